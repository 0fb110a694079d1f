/* h3_attention_sm90.cu - the attention kernels of Hopper (sm_90a: wgmma,
 * mbarriers, bulk copies), non-causal: bf16 at head_dim 128 (the DiT's hot
 * case) and f16/bf16 at head_dim 64 (the video VAE's ViT: 32 heads × 64,
 * fp16, 1797 rows a tile, where the portable mma.sync kernel reaches about
 * half of what PyTorch's SDPA does). The default at both head dims is
 * k_attn_fa3, one body templated over the head dim (FlashAttention-3's turn
 * order: S of tile j and P·V of tile j-1 issued together, softmax under
 * both; see its comment), its variants the rows of H3_FA3_VARIANTS
 * (h3_attention_impl.cuh); k_attn_wgmma2 and the first version,
 * k_attn_wgmma, stay selectable at head_dim 128 (h3_backend_cuda_bench.h).
 * The first version: 256 threads =
 * two warpgroups, each owning 64 query rows of a 128-row tile; K and Vᵀ
 * tiles of 128 keys stream through shared memory (cp.async, two stages) in
 * the 128-byte-swizzled K-major layout that wgmma reads through matrix
 * descriptors. S = Q·Kᵀ runs from shared memory, O += P·V takes P straight
 * from registers (the accumulator layout of S is the A-fragment layout of
 * the second product). V is transposed once per call into scratch so that
 * both products read K-major operands: the pre-pass moves 2 bytes per V
 * element twice, well under 1% of the time of the attention it serves.
 * Built for sm_90a alone (kernels/meson.build): the dispatch
 * (h3_attention.cu) launches them on sm_90 devices only, and a GPU of
 * another architecture has no image of them. The H3_HAVE_WGMMA guards
 * leave a trap should they ever be built for another target. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "kernels/h3_attention_impl.cuh" /* tile sizes, the launchers */
#include "kernels/h3_common.cuh"         /* kLog2e, ex2_ftz */
#include "kernels/h3_tc.cuh"             /* wgmma, mbarriers, bulk copies, softmax steps; H3_HAVE_WGMMA */

namespace {

const int kWgSmem = 5 * kWgTileBytes + 1024; /* Q + 2 stages of K and Vᵀ + alignment slack */

/* Byte offset of 16-byte chunk `ch` (0..15) of row `row` in a 128×128
 * bf16 tile kept as two 64-column boxes of 128 rows × 128 bytes, each in
 * the 128-byte swizzle (chunk ^ row%8 inside every 1024-byte atom), which
 * is what a K-major SWIZZLE_128B wgmma descriptor describes. */
__device__ __forceinline__ uint32_t sw128(int row, int ch) {
    return (uint32_t)((ch >> 3) * (128 * 128) + row * 128 + (((ch & 7) ^ (row & 7)) << 4));
}

/* 16-byte chunks of a row of DH 16-bit elements, as a shift: 4 at 128, 3 at 64. */
template <int DH> __host__ __device__ constexpr int chunk_shift() {
    static_assert(DH == 64 || DH == 128, "head_dim 64 or 128");
    return DH == 128 ? 4 : 3;
}

#ifdef H3_HAVE_WGMMA

/* Descriptor of k-step kk (16 columns) of a tile kept as 64-column boxes of
 * BOX bytes (128 rows × 128 bytes by default) whose rows start at tile. */
template <int BOX = 128 * 128> __device__ __forceinline__ uint64_t wg_desc_k(uint32_t tile, int kk) {
    return wg_desc(tile + (uint32_t)((kk >> 2) * BOX + (kk & 3) * 32));
}

/* The 128-row Q tile (DH channels, 64-channel boxes as sw128 lays them) of
 * query rows q0.. into sQ (rows past Sq zero), by THREADS threads; the
 * caller commits and waits. */
template <int THREADS, int DH = 128, typename T = __nv_bfloat16>
__device__ __forceinline__ void wg_load_q(uint32_t sQ, const T *qg, int64_t ldq, int64_t q0, int64_t Sq, int tid) {
    const int CS = chunk_shift<DH>();
    for (int i = tid; i < 128 * (DH / 8); i += THREADS) {
        int row = i >> CS, ch = i & ((DH / 8) - 1);
        int64_t gr = q0 + row;
        bool valid = gr < Sq;
        cp_async16(sQ + sw128(row, ch), qg + (valid ? gr : 0) * ldq + ch * 8, valid);
    }
}

__device__ __forceinline__ void wg_load_kv(uint32_t sk, uint32_t sv, const __nv_bfloat16 *kg, int64_t ldk,
                                           const __nv_bfloat16 *vg, int64_t Skv, int64_t Skv_pad, int64_t k0,
                                           int tid) {
#pragma unroll
    for (int i = tid; i < 128 * 16; i += 256) {
        int row = i >> 4, ch = i & 15;
        int64_t key = k0 + row;
        bool valid = key < Skv;
        cp_async16(sk + sw128(row, ch), kg + (valid ? key : 0) * ldk + ch * 8, valid);
        int64_t kc = k0 + ch * 8; /* Vᵀ: row = head-dim channel, chunk = 8 keys */
        valid = kc < Skv_pad;
        cp_async16(sv + sw128(row, ch), vg + (int64_t)row * Skv_pad + (valid ? kc : 0), valid);
    }
}

/* The online-softmax step of k_attn_wgmma2 and k_attn_wgmma on a finished
 * 64 × 128 score tile s (s[4n + 2r + c] is row 16·w4 + g + 8r, key
 * k0 + 8n + 2t + c): keys >= Skv masked, the running max m and sum l
 * updated, O rescaled, P packed into the bf16 A fragments of P·V. */
__device__ __forceinline__ void wg_softmax_tile(int64_t k0, int64_t Skv, int t, float scale_log2, float s[64],
                                                float m[2], float l[2], float oacc[64], uint32_t pa[8][4]) {
    bool tail = k0 + kWgTile > Skv;
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int i = 0; i < 64; i++) {
        float x = s[i] * scale_log2;
        if (tail && k0 + 8 * (i >> 2) + 2 * t + (i & 1) >= Skv) x = -INFINITY;
        s[i] = x;
        mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], x);
    }
    float base[2], corr[2], rs[2] = {0.0f, 0.0f};
    softmax_row_max(mx, m, base, corr);
#pragma unroll
    for (int i = 0; i < 64; i += 2) {
        int r = (i >> 1) & 1;
        float p0 = exp2f(s[i] - base[r]), p1 = exp2f(s[i + 1] - base[r]);
        rs[r] += p0 + p1;
        pa[i >> 3][(i >> 1) & 3] = Mma<__nv_bfloat16>::pack(p0, p1);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) l[r] = l[r] * corr[r] + rs[r];
#pragma unroll
    for (int i = 0; i < 64; i++) oacc[i] *= corr[(i >> 1) & 1];
}

#endif /* H3_HAVE_WGMMA */

/* Warp-specialised Hopper attention. 288 threads: warps 0-7 are two
 * consumer warpgroups (64 query rows each), warp 8 the producer. K and Vᵀ
 * come pre-packed (k_pack_k, k_pack_v) as the exact 32 KB shared-memory
 * image of each 128-key tile, so one bulk copy per operand and stage moves
 * a tile, completing on the stage's `full` mbarrier; consumers release a
 * stage through its `empty` mbarrier. The two consumer warpgroups pass a
 * token through named barriers 1 and 2 around each GEMM issue, so their
 * GEMMs alternate on the tensor cores and one warpgroup's softmax runs
 * while the other's GEMM does (FlashAttention-3's ping-pong). */
__global__ void __launch_bounds__(288, 1)
    k_attn_wgmma2(__nv_bfloat16 *o, const __nv_bfloat16 *q, const uint8_t *kp, const uint8_t *vp, int64_t Sq,
                  int64_t Skv, int n_tiles, int H, int Hkv, float scale_log2) {
#ifdef H3_HAVE_WGMMA
    extern __shared__ __align__(1024) uint8_t smem_wg2[];
    uint32_t sbase = (smem_u32(smem_wg2) + 1023u) & ~1023u;
    uint32_t sQ = sbase, sK = sbase + kWgTileBytes, sV = sbase + 3 * kWgTileBytes, bars = sbase + 5 * kWgTileBytes;
    /* full[s] at bars + 8s, empty[s] at bars + 16 + 8s */
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int h = blockIdx.y, kh = h / (H / Hkv);
    int64_t q0 = (int64_t)blockIdx.x * kWgTile;
    int64_t ldq = (int64_t)H * 128;
    if (tid == 0) {
        mbar_init(bars, 1);
        mbar_init(bars + 8, 1);
        mbar_init(bars + 16, 8);
        mbar_init(bars + 24, 8);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if (tid < 256) {
        wg_load_q<256>(sQ, q + (int64_t)h * 128, ldq, q0, Sq, tid);
        cp_async_commit();
        cp_async_wait<0>();
        fence_proxy_async();
    }
    __syncthreads();

    if (warp == 8) { /* producer */
        if (lane == 0) {
            const uint8_t *kb = kp + (int64_t)kh * n_tiles * kWgTileBytes, *vb = vp + (int64_t)kh * n_tiles * kWgTileBytes;
            for (int j = 0; j < n_tiles; j++) {
                int st = j & 1;
                if (j >= 2) mbar_wait(bars + 16 + 8 * st, ((j >> 1) - 1) & 1);
                mbar_expect_tx(bars + 8 * st, 2 * kWgTileBytes);
                bulk_load(sK + st * kWgTileBytes, kb + (int64_t)j * kWgTileBytes, kWgTileBytes, bars + 8 * st);
                bulk_load(sV + st * kWgTileBytes, vb + (int64_t)j * kWgTileBytes, kWgTileBytes, bars + 8 * st);
            }
        }
        return;
    }

    int wg = warp >> 2, w4 = warp & 3, g = lane >> 2, t = lane & 3;
    float oacc[64], s[64];
#pragma unroll
    for (int i = 0; i < 64; i++) oacc[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    uint32_t qtile = sQ + wg * 64 * 128;
    int mine = 1 + wg, other = 2 - wg; /* named barrier ids: 1 for warpgroup 0, 2 for 1 */
    if (wg == 1) named_arrive(1); /* warpgroup 0 issues first */

    for (int j = 0; j < n_tiles; j++) {
        int st = j & 1;
        uint32_t ktile = sK + st * kWgTileBytes, vtile = sV + st * kWgTileBytes;
#pragma unroll
        for (int i = 0; i < 64; i++) s[i] = 0.0f;
        named_sync(mine);
        mbar_wait(bars + 8 * st, (j >> 1) & 1);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 8; kk++)
            Wg<__nv_bfloat16>::ss<128>(s, wg_desc_k(qtile, kk), wg_desc_k(ktile, kk), kk > 0);
        wg_commit();
        named_arrive(other);
        wg_wait0();

        uint32_t pa[8][4];
        wg_softmax_tile((int64_t)j * kWgTile, Skv, t, scale_log2, s, m, l, oacc, pa);

        named_sync(mine);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 8; kk++) Wg<__nv_bfloat16>::rs<128>(oacc, pa[kk], wg_desc_k(vtile, kk), 1);
        wg_commit();
        if (!(wg == 1 && j == n_tiles - 1)) named_arrive(other); /* the last token has no taker */
        wg_wait0();
        if (lane == 0) mbar_arrive(bars + 16 + 8 * st);
    }

    float inv[2];
    softmax_row_inverse(l, inv);
    __nv_bfloat16 *og = o + (int64_t)h * 128;
    int64_t rbase = q0 + wg * 64 + w4 * 16 + g;
#pragma unroll
    for (int i = 0; i < 64; i += 2) {
        int r = (i >> 1) & 1;
        int64_t row = rbase + 8 * r;
        int col = 8 * (i >> 2) + 2 * t;
        if (row < Sq) *(uint32_t *)(og + row * ldq + col) = Mma<__nv_bfloat16>::pack(oacc[i] * inv[r], oacc[i + 1] * inv[r]);
    }
#else
    __trap();
#endif
}

#ifdef H3_HAVE_WGMMA

/* 2^x on the FMA and integer pipes instead of MUFU.EX2 (FlashAttention-4's
 * split on Blackwell, where MUFU did not keep up with the tensor cores):
 * x = j + f with j = round(x) (the 1.5·2^23 trick: t's low bits hold j),
 * f in [-1/2, 1/2], 2^f by a cubic fitted for relative error (7.5e-5, far
 * inside bf16's 3.9e-3), then j added to the exponent field. x is clamped
 * at -125 so the result stays a normal float (2^-125, nothing in a row sum
 * next to its max's 1). Nine instructions for one MUFU op. Measured on the
 * H200 (2026-12-04, S 34,710): a quarter of the scores this way made the
 * kernel 0.93x as fast, half 0.89x (outputs 7e-4 from MUFU's): the issue
 * slots cost more than MUFU's throughput, so only the probes use it. */
__device__ __forceinline__ float ex2_fma(float x) {
    x = fmaxf(x, -125.0f);
    float t = x + 12582912.0f, f = x - (t - 12582912.0f);
    float p = fmaf(fmaf(fmaf(0.05517153442f, f, 0.24261111021f), f, 0.69326102734f), f, 0.99992805719f);
    return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

/* Which scores of the softmax take ex2_fma (h3k_attention_probe's POLY
 * probes): POLY 0 none (MUFU for all, the product), 1 a quarter, 2 half;
 * 3 none and no MUFU either (P = the exponent itself: wrong output, the
 * kernel's time without the exponentials). */
template <int POLY> __device__ __forceinline__ float fa3_exp2(float x, int n, int c) {
    if (POLY == 3) return x;
    if ((POLY == 1 && c == 1 && (n & 1)) || (POLY == 2 && c == 1)) return ex2_fma(x);
    return ex2_ftz(x);
}

/* Online softmax of one 64×KN S tile held raw (unscaled) in s: s becomes
 * P = 2^(s·scale_log2 - m·scale_log2), m the running raw row max, corr the
 * factor O and l take, rs this tile's row sums (per thread). One FFMA and one
 * MUFU.EX2 per score; max and sum run on 4 partial chains a row. LAZY keeps
 * the old max unless the new one is larger by more than 2^8 (FlashAttention-4's
 * conditional rescaling): P stays <= 256, exact after the final 1/l, and corr
 * is exactly 1 for most tiles, so the O rescale can be skipped. */
template <int KN, bool LAZY, int POLY = 0>
__device__ __forceinline__ void fa3_softmax(float *s, float m[2], float corr[2], float rs[2], float scale_log2,
                                            bool tail, int64_t k0, int64_t Skv, int t) {
    if (tail) {
#pragma unroll
        for (int i = 0; i < KN / 2; i++)
            if (k0 + 8 * (i >> 2) + 2 * t + (i & 1) >= Skv) s[i] = -INFINITY;
    }
    float a[2][4];
#pragma unroll
    for (int r = 0; r < 2; r++) a[r][0] = a[r][1] = a[r][2] = a[r][3] = m[r];
#pragma unroll
    for (int n = 0; n < KN / 8; n++)
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int c = 0; c < 2; c++) a[r][(n & 1) * 2 + c] = fmaxf(a[r][(n & 1) * 2 + c], s[4 * n + 2 * r + c]);
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = fmaxf(fmaxf(a[r][0], a[r][1]), fmaxf(a[r][2], a[r][3]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        if (LAZY) mx = (mx - m[r]) * scale_log2 > 8.0f ? mx : m[r]; /* m = -inf: takes mx */
        base[r] = mx == -INFINITY ? 0.0f : mx * scale_log2;
        corr[r] = ex2_ftz(m[r] * scale_log2 - base[r]); /* m = -inf (first tile): 0 */
        m[r] = mx;
    }
#pragma unroll
    for (int r = 0; r < 2; r++) a[r][0] = a[r][1] = a[r][2] = a[r][3] = 0.0f;
#pragma unroll
    for (int n = 0; n < KN / 8; n++)
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                int i = 4 * n + 2 * r + c;
                s[i] = fa3_exp2<POLY>(fmaf(s[i], scale_log2, -base[r]), n, c);
                a[r][(n & 1) * 2 + c] += s[i];
            }
#pragma unroll
    for (int r = 0; r < 2; r++) rs[r] = (a[r][0] + a[r][1]) + (a[r][2] + a[r][3]);
}

/* The probe's stand-in (h3k_attention_probe, NOSOFT): no max, no exp, no
 * sum; the raw scores go on as P. Wrong output, the same GEMMs, copies and
 * barriers: the kernel's time without its softmax. */
template <int KN> __device__ __forceinline__ void fa3_nosoftmax(float corr[2], float rs[2]) {
    corr[0] = corr[1] = 1.0f;
    rs[0] = rs[1] = 1.0f;
}
#endif

/* FlashAttention-3's consumer on pre-packed K/Vᵀ tile images of KN keys
 * (k_pack_k_n, k_pack_v_n; for head_dim 128 and KN = 128 the images of
 * k_attn_wgmma2), for T = bf16 or f16 and head dim DH = 128 or 64: Fa3Tile
 * (h3_attention_impl.cuh) holds the geometry. Q and K rows are DH/64 boxes
 * of 128-byte swizzle rows (a 64-element row is exactly one), so S takes
 * DH/16 k-steps of 16 channels and P·V KN/16 of 16 keys with N = DH.
 * 384 threads: warpgroup 0 is the producer (one thread issues the bulk
 * copies; setmaxnreg gives its registers away), warpgroups 1 and 2 consume
 * 64 query rows each with 240 registers a thread. Per key tile j a consumer
 * issues S_j = Q·K_jᵀ and O += P_{j-1}·V_{j-1} back to back, then runs the
 * softmax of S_j while P_{j-1}·V_{j-1} (and the other warpgroup's GEMMs) run:
 * two GEMMs of cover instead of one. K and V have their own full/empty
 * barriers. STAGES K and V tiles are in flight. PINGPONG passes a token
 * between the consumers around each GEMM pair (named barriers 1, 2), so their
 * GEMMs alternate on the tensor cores. Registers (ptxas -v reports the entry
 * budget, 168): O DH/2 + S KN/2 + P KN/4 live at once, within the 240 that
 * setmaxnreg grants each consumer thread (no spills at KN <= 192).
 * Numerics: S in f32, the online softmax in f32 with exp2 and a running
 * max, the row sums over the unrounded probabilities, P rounded to T for
 * P·V, O normalised in f32 and rounded once; the exponent is one FMA,
 * s·scale·log2e − max·scale·log2e (where the mma.sync kernel rounds
 * s·scale·log2e first: one f32 rounding apart). */
template <typename T, int DH, int STAGES, bool PINGPONG, bool LAZY, int KN, bool NOSOFT = false, int POLY = 0>
__global__ void __launch_bounds__(384, 1)
    k_attn_fa3(T *o, const T *q, const uint8_t *kp, const uint8_t *vp, int64_t Sq, int64_t Skv, int n_tiles, int H,
               int Hkv, float scale_log2) {
#ifdef H3_HAVE_WGMMA
    typedef Fa3Tile<DH, KN> Tile;
    const int KB = Tile::k_bytes, VB = Tile::v_bytes, NS = KN / 2, KS = KN / 16, NO = DH / 2;
    extern __shared__ __align__(1024) uint8_t smem_fa3[];
    uint32_t sbase = (smem_u32(smem_fa3) + 1023u) & ~1023u;
    uint32_t sQ = sbase, sK = sbase + Tile::q_bytes, sV = sK + STAGES * KB;
    uint32_t fullK = sV + STAGES * VB, fullV = fullK + 8 * STAGES, emptyK = fullV + 8 * STAGES,
             emptyV = emptyK + 8 * STAGES;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int h = blockIdx.y, kh = h / (H / Hkv);
    int64_t q0 = (int64_t)blockIdx.x * kWgTile;
    int64_t ldq = (int64_t)H * DH;
    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; s++) {
            mbar_init(fullK + 8 * s, 1);
            mbar_init(fullV + 8 * s, 1);
            mbar_init(emptyK + 8 * s, 8);
            mbar_init(emptyV + 8 * s, 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    {
        wg_load_q<384, DH>(sQ, q + (int64_t)h * DH, ldq, q0, Sq, tid);
        cp_async_commit();
        cp_async_wait<0>();
        fence_proxy_async();
    }
    __syncthreads();

    if (warp < 4) { /* producer: K_j, then V_{j-1}, the order the consumers take them */
        reg_dealloc<24>();
        if (tid == 0) {
            const uint8_t *kb = kp + (int64_t)kh * n_tiles * KB;
            const uint8_t *vb = vp + (int64_t)kh * n_tiles * VB;
            for (int j = 0; j <= n_tiles; j++) {
                if (j < n_tiles) {
                    int st = j % STAGES, u = j / STAGES;
                    if (u > 0) mbar_wait(emptyK + 8 * st, (u - 1) & 1);
                    mbar_expect_tx(fullK + 8 * st, KB);
                    bulk_load(sK + st * KB, kb + (int64_t)j * KB, KB, fullK + 8 * st);
                }
                if (j > 0) {
                    int jv = j - 1, st = jv % STAGES, u = jv / STAGES;
                    if (u > 0) mbar_wait(emptyV + 8 * st, (u - 1) & 1);
                    mbar_expect_tx(fullV + 8 * st, VB);
                    bulk_load(sV + st * VB, vb + (int64_t)jv * VB, VB, fullV + 8 * st);
                }
            }
        }
    } else {
        reg_alloc<240>();
        int late = 0;
        int wg = (warp >> 2) - 1, w4 = warp & 3, g = lane >> 2, t = lane & 3;
        uint32_t qtile = sQ + wg * 64 * 128;
        int mine = 1 + wg, other = 2 - wg;
        float oacc[NO], s[NS];
        uint32_t pa[KS][4];
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, corr[2], rs[2];
#pragma unroll
        for (int i = 0; i < NO; i++) oacc[i] = 0.0f;
        if (PINGPONG && wg == 1) named_arrive(1); /* warpgroup 0 issues first */

        /* tile 0: S alone. No branch may sit between a wgmma and its wait
         * (ptxas would serialize them, C7520): barrier waits come before the
         * issue, releases after the wait. */
        mbar_wait_late(fullK, 0, &late);
        if (PINGPONG) named_sync(mine);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < DH / 16; kk++)
            Wg<T>::template ss<KN>(s, wg_desc_k(qtile, kk), wg_desc(sK + (kk >> 2) * (KN * 128) + (kk & 3) * 32),
                                   kk > 0);
        wg_commit();
        if (PINGPONG) named_arrive(other);
        wg_wait0();
        fence_f<NS>(s);
        if (lane == 0) mbar_arrive(emptyK);
        if (NOSOFT) fa3_nosoftmax<KN>(corr, rs);
        else fa3_softmax<KN, LAZY, POLY>(s, m, corr, rs, scale_log2, KN > Skv, 0, Skv, t);
        l[0] = rs[0];
        l[1] = rs[1];
#pragma unroll
        for (int i = 0; i < NS; i += 2) pa[i >> 3][(i >> 1) & 3] = Mma<T>::pack(s[i], s[i + 1]);

        for (int j = 1; j < n_tiles; j++) {
            int st = j % STAGES, sp = (j - 1) % STAGES;
            uint32_t ktile = sK + st * KB, vtile = sV + sp * VB;
            mbar_wait_late(fullK + 8 * st, (j / STAGES) & 1, &late);
            mbar_wait_late(fullV + 8 * sp, ((j - 1) / STAGES) & 1, &late);
            if (PINGPONG) named_sync(mine);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < DH / 16; kk++)
                Wg<T>::template ss<KN>(s, wg_desc_k(qtile, kk),
                                       wg_desc(ktile + (kk >> 2) * (KN * 128) + (kk & 3) * 32), kk > 0);
            wg_commit();
#pragma unroll
            for (int kk = 0; kk < KS; kk++) Wg<T>::template rs<DH>(oacc, pa[kk], wg_desc_k<DH * 128>(vtile, kk), 1);
            wg_commit();
            if (PINGPONG) named_arrive(other);
            wg_wait1();
            fence_f<NS>(s);
            int64_t k0 = (int64_t)j * KN;
            if (NOSOFT) fa3_nosoftmax<KN>(corr, rs);
            else fa3_softmax<KN, LAZY, POLY>(s, m, corr, rs, scale_log2, k0 + KN > Skv, k0, Skv, t);
            wg_wait0();
            fence_f<NO>(oacc);
            fence_u<KS * 4>(&pa[0][0]);
            if (lane == 0) {
                mbar_arrive(emptyK + 8 * st);
                mbar_arrive(emptyV + 8 * sp);
            }
#pragma unroll
            for (int r = 0; r < 2; r++) l[r] = l[r] * corr[r] + rs[r];
            if (!LAZY || __any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
                for (int i = 0; i < NO; i++) oacc[i] *= corr[(i >> 1) & 1];
            }
#pragma unroll
            for (int i = 0; i < NS; i += 2) pa[i >> 3][(i >> 1) & 3] = Mma<T>::pack(s[i], s[i + 1]);
        }

        /* the last P·V */
        {
            int sp = (n_tiles - 1) % STAGES;
            mbar_wait_late(fullV + 8 * sp, ((n_tiles - 1) / STAGES) & 1, &late);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < KS; kk++)
                Wg<T>::template rs<DH>(oacc, pa[kk], wg_desc_k<DH * 128>(sV + sp * VB, kk), 1);
            wg_commit();
            wg_wait0();
            fence_f<NO>(oacc);
            fence_u<KS * 4>(&pa[0][0]);
        }
        if (PINGPONG && wg == 0) named_sync(mine); /* warpgroup 1's last token */

        float inv[2];
        softmax_row_inverse(l, inv);
        T *og = o + (int64_t)h * DH;
        int64_t rbase = q0 + wg * 64 + w4 * 16 + g;
#pragma unroll
        for (int i = 0; i < NO; i += 2) {
            int r = (i >> 1) & 1;
            int64_t row = rbase + 8 * r;
            int col = 8 * (i >> 2) + 2 * t;
            if (row < Sq) *(uint32_t *)(og + row * ldq + col) = Mma<T>::pack(oacc[i] * inv[r], oacc[i + 1] * inv[r]);
        }
        if (late) __trap();
    }
#else
    __trap(); /* only launched on sm_90 devices, which load the sm_90a image */
#endif
}

/* K [Skv, Hkv·DH] -> per (kv head, KN-key tile) k_attn_fa3's K image (DH/64
 * boxes of KN rows × 128 bytes); rows past Skv are zero. 16-bit elements. */
template <int DH, int KN>
__global__ void k_pack_k_n(uint8_t *kp, const uint16_t *k, int64_t Skv, int Hkv, int n_tiles) {
    const int CH = DH / 8, CS = chunk_shift<DH>();
    int64_t total = (int64_t)Hkv * n_tiles * KN * CH;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int c = (int)(idx % (KN * CH));
        int64_t tile = idx / (KN * CH);
        int tt = (int)(tile % n_tiles), hh = (int)(tile / n_tiles);
        int r = c >> CS, ch = c & (CH - 1);
        int64_t key = (int64_t)tt * KN + r;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (key < Skv) v = *(const uint4 *)(k + key * ((int64_t)Hkv * DH) + (int64_t)hh * DH + ch * 8);
        *(uint4 *)(kp + tile * Fa3Tile<DH, KN>::k_bytes + (ch >> 3) * (KN * 128) + r * 128 +
                   (((ch & 7) ^ (r & 7)) << 4)) = v;
    }
}

/* V [Skv, Hkv·DH] -> per (kv head, KN-key tile) the Vᵀ image (box b: keys
 * 64b.. as DH channel rows of 64 keys), one box per block (blockIdx.x =
 * tile · boxes + box), through shared memory. 16-bit elements. */
template <int DH, int KN>
__global__ void __launch_bounds__(256) k_pack_v_n(uint8_t *vp, const uint16_t *v, int64_t Skv, int Hkv, int n_tiles) {
    const int NB = (KN + 63) / 64, CH = DH / 8, CS = chunk_shift<DH>();
    __shared__ __align__(16) uint16_t tile[64][DH];
    int tt = blockIdx.x / NB, bx = blockIdx.x % NB, hh = blockIdx.y;
    for (int i = threadIdx.x; i < 64 * CH; i += 256) {
        int r = i >> CS, ch = i & (CH - 1);
        int kr = bx * 64 + r;
        int64_t key = (int64_t)tt * KN + kr;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (kr < KN && key < Skv) val = *(const uint4 *)(v + key * ((int64_t)Hkv * DH) + (int64_t)hh * DH + ch * 8);
        *(uint4 *)&tile[r][ch * 8] = val;
    }
    __syncthreads();
    uint8_t *dst = vp + ((int64_t)hh * n_tiles + tt) * Fa3Tile<DH, KN>::v_bytes + bx * (DH * 128);
    for (int i = threadIdx.x; i < DH * 8; i += 256) {
        int d = i & (DH - 1), kc = i >> (CS + 3);
        uint16_t e[8];
#pragma unroll
        for (int u = 0; u < 8; u++) e[u] = tile[kc * 8 + u][d];
        *(uint4 *)(dst + d * 128 + ((kc ^ (d & 7)) << 4)) = *(const uint4 *)e;
    }
}

/* K [Skv, Hkv·128] -> per (kv head, 128-key tile) the 32 KB shared-memory
 * image k_attn_wgmma2 copies in one piece; rows past Skv are zero. */
__global__ void k_pack_k(uint8_t *kp, const __nv_bfloat16 *k, int64_t Skv, int Hkv, int n_tiles) {
    int64_t total = (int64_t)Hkv * n_tiles * 2048;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int c = (int)(idx & 2047);
        int64_t tile = idx >> 11;
        int tt = (int)(tile % n_tiles), hh = (int)(tile / n_tiles);
        int r = c >> 4, ch = c & 15;
        int64_t key = (int64_t)tt * 128 + r;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (key < Skv) v = *(const uint4 *)(k + key * ((int64_t)Hkv * 128) + (int64_t)hh * 128 + ch * 8);
        *(uint4 *)(kp + tile * kWgTileBytes + sw128(r, ch)) = v;
    }
}

/* V [Skv, Hkv·128] -> per (kv head, tile) the image of the Vᵀ tile (rows =
 * head-dim channels, columns = the tile's 128 keys), through shared memory. */
__global__ void __launch_bounds__(256) k_pack_v(uint8_t *vp, const __nv_bfloat16 *v, int64_t Skv, int Hkv,
                                               int n_tiles) {
    __shared__ __align__(16) uint16_t tile[128][128];
    int tt = blockIdx.x, hh = blockIdx.y;
    for (int i = threadIdx.x; i < 2048; i += 256) {
        int r = i >> 4, ch = i & 15;
        int64_t key = (int64_t)tt * 128 + r;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (key < Skv) val = *(const uint4 *)(v + key * ((int64_t)Hkv * 128) + (int64_t)hh * 128 + ch * 8);
        *(uint4 *)&tile[r][ch * 8] = val;
    }
    __syncthreads();
    uint8_t *dst = vp + ((int64_t)hh * n_tiles + tt) * kWgTileBytes;
    for (int i = threadIdx.x; i < 2048; i += 256) {
        int d = i & 127, kc = i >> 7;
        uint16_t e[8];
#pragma unroll
        for (int u = 0; u < 8; u++) e[u] = tile[kc * 8 + u][d];
        *(uint4 *)(dst + sw128(d, kc)) = *(const uint4 *)e;
    }
}

__global__ void __launch_bounds__(256, 1)
    k_attn_wgmma(__nv_bfloat16 *o, const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *vt,
                 int64_t Sq, int64_t Skv, int64_t Skv_pad, int H, int Hkv, float scale_log2) {
#ifdef H3_HAVE_WGMMA
    extern __shared__ __align__(1024) uint8_t smem_wg[];
    uint32_t sbase = (smem_u32(smem_wg) + 1023u) & ~1023u;
    uint32_t sQ = sbase, sK = sbase + kWgTileBytes, sV = sbase + 3 * kWgTileBytes;
    int tid = threadIdx.x, wg = tid >> 7, w4 = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
    int h = blockIdx.y, kh = h / (H / Hkv);
    int64_t q0 = (int64_t)blockIdx.x * kWgTile;
    int64_t ldq = (int64_t)H * 128, ldk = (int64_t)Hkv * 128;
    const __nv_bfloat16 *qg = q + (int64_t)h * 128, *kg = k + (int64_t)kh * 128;
    const __nv_bfloat16 *vg = vt + (int64_t)kh * 128 * Skv_pad;

    wg_load_q<256>(sQ, qg, ldq, q0, Sq, tid);
    wg_load_kv(sK, sV, kg, ldk, vg, Skv, Skv_pad, 0, tid);
    cp_async_commit();

    float oacc[64], s[64];
#pragma unroll
    for (int i = 0; i < 64; i++) oacc[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    uint32_t qtile = sQ + wg * 64 * 128; /* this warpgroup's 64 rows in each box */
    int n_tiles = (int)((Skv + kWgTile - 1) / kWgTile);

    for (int j = 0; j < n_tiles; j++) {
        int st = j & 1;
        if (j + 1 < n_tiles) {
            wg_load_kv(sK + (st ^ 1) * kWgTileBytes, sV + (st ^ 1) * kWgTileBytes, kg, ldk, vg, Skv, Skv_pad,
                       (int64_t)(j + 1) * kWgTile, tid);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async(); /* cp.async wrote through the generic proxy; wgmma reads through the async one */
        __syncthreads();
        uint32_t ktile = sK + st * kWgTileBytes, vtile = sV + st * kWgTileBytes;

        /* S = Q·Kᵀ, 64 × 128 per warpgroup */
#pragma unroll
        for (int i = 0; i < 64; i++) s[i] = 0.0f;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 8; kk++)
            Wg<__nv_bfloat16>::ss<128>(s, wg_desc_k(qtile, kk), wg_desc_k(ktile, kk), kk > 0);
        wg_commit();
        wg_wait0();

        /* online softmax: s[4n + 2r + c] is row (16·w4 + g + 8r), key 8n + 2t + c */
        uint32_t pa[8][4];
        wg_softmax_tile((int64_t)j * kWgTile, Skv, t, scale_log2, s, m, l, oacc, pa);

        /* O += P·V: P from registers, Vᵀ tile K-major in shared memory */
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 8; kk++) Wg<__nv_bfloat16>::rs<128>(oacc, pa[kk], wg_desc_k(vtile, kk), 1);
        wg_commit();
        wg_wait0();
        __syncthreads(); /* the stage just read is refilled next iteration */
    }

    float inv[2];
    softmax_row_inverse(l, inv);
    __nv_bfloat16 *og = o + (int64_t)h * 128;
    int64_t rbase = q0 + wg * 64 + w4 * 16 + g;
#pragma unroll
    for (int i = 0; i < 64; i += 2) {
        int r = (i >> 1) & 1;
        int64_t row = rbase + 8 * r;
        int col = 8 * (i >> 2) + 2 * t;
        if (row < Sq) *(uint32_t *)(og + row * ldq + col) = Mma<__nv_bfloat16>::pack(oacc[i] * inv[r], oacc[i + 1] * inv[r]);
    }
#else
    __trap(); /* only launched on sm_90 devices, which load the sm_90a image */
#endif
}

/* V [Skv, Hkv·DH] -> Vᵀ [Hkv][DH][Skv_pad], zero past Skv. 16-bit elements. */
__global__ void k_transpose_v(uint16_t *vt, const uint16_t *v, int64_t Skv, int64_t Skv_pad, int Hkv, int DH) {
    __shared__ uint16_t tile[32][33];
    int64_t key0 = (int64_t)blockIdx.x * 32;
    int d0 = blockIdx.y * 32, hh = blockIdx.z;
    for (int r = threadIdx.y; r < 32; r += 8) {
        int64_t key = key0 + r;
        tile[r][threadIdx.x] = key < Skv ? v[key * ((int64_t)Hkv * DH) + (int64_t)hh * DH + d0 + threadIdx.x] : 0;
    }
    __syncthreads();
    for (int r = threadIdx.y; r < 32; r += 8) {
        int64_t key = key0 + threadIdx.x;
        if (key < Skv_pad) vt[((int64_t)hh * DH + d0 + r) * Skv_pad + key] = tile[threadIdx.x][r];
    }
}

} /* namespace */

namespace h3k_attn {

int launch_wgmma(const h3k_attention_args *a, cudaStream_t stream) {
    static bool configured;
    int64_t pad = padded_keys(a->Skv);
    if (!a->scratch || a->scratch_size < h3k_attention_scratch(a)) return (int)cudaErrorInvalidValue;
    if (!configured) {
        cudaError_t e = cudaFuncSetAttribute(k_attn_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize, kWgSmem);
        if (e != cudaSuccess) return (int)e;
        configured = true;
    }
    dim3 tgrid((unsigned)((pad + 31) / 32), 128 / 32, (unsigned)a->n_kv_heads);
    k_transpose_v<<<tgrid, dim3(32, 8), 0, stream>>>((uint16_t *)a->scratch, (const uint16_t *)a->v, a->Skv, pad,
                                                     a->n_kv_heads, 128);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
    dim3 grid((unsigned)((a->Sq + kWgTile - 1) / kWgTile), (unsigned)a->n_heads);
    k_attn_wgmma<<<grid, 256, kWgSmem, stream>>>((__nv_bfloat16 *)a->o, (const __nv_bfloat16 *)a->q,
                                                 (const __nv_bfloat16 *)a->k, (const __nv_bfloat16 *)a->scratch,
                                                 a->Sq, a->Skv, pad, a->n_heads, a->n_kv_heads, a->scale * kLog2e);
    return (int)cudaGetLastError();
}

int launch_wgmma2(const h3k_attention_args *a, cudaStream_t stream) {
    static bool configured;
    const int smem = 5 * kWgTileBytes + 1024 + 64;
    if (!a->scratch || a->scratch_size < h3k_attention_scratch(a)) return (int)cudaErrorInvalidValue;
    if (!configured) {
        cudaError_t e = cudaFuncSetAttribute(k_attn_wgmma2, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return (int)e;
        configured = true;
    }
    int n_tiles = (int)wg2_tiles(a);
    uint8_t *kp = (uint8_t *)a->scratch, *vp = kp + (size_t)a->n_kv_heads * n_tiles * kWgTileBytes;
    int64_t chunks = (int64_t)a->n_kv_heads * n_tiles * 2048;
    int64_t pk_blocks = (chunks + 255) / 256;
    k_pack_k<<<(unsigned)(pk_blocks < 16384 ? pk_blocks : 16384), 256, 0, stream>>>(
        kp, (const __nv_bfloat16 *)a->k, a->Skv, a->n_kv_heads, n_tiles);
    k_pack_v<<<dim3((unsigned)n_tiles, (unsigned)a->n_kv_heads), 256, 0, stream>>>(vp, (const __nv_bfloat16 *)a->v,
                                                                                  a->Skv, a->n_kv_heads, n_tiles);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
    dim3 grid((unsigned)((a->Sq + kWgTile - 1) / kWgTile), (unsigned)a->n_heads);
    k_attn_wgmma2<<<grid, 288, smem, stream>>>((__nv_bfloat16 *)a->o, (const __nv_bfloat16 *)a->q, kp, vp, a->Sq,
                                               a->Skv, n_tiles, a->n_heads, a->n_kv_heads, a->scale * kLog2e);
    return (int)cudaGetLastError();
}

/* K and Vᵀ into k_attn_fa3's tile images of KN keys (the scratch). */
template <int DH, int KN> int fa3_pack(const h3k_attention_args *a, cudaStream_t stream) {
    const int KB = Fa3Tile<DH, KN>::k_bytes;
    if (!a->scratch || a->scratch_size < h3k_attention_scratch(a)) return (int)cudaErrorInvalidValue;
    int n_tiles = (int)fa3_tiles(a, KN);
    uint8_t *kp = (uint8_t *)a->scratch, *vp = kp + (size_t)a->n_kv_heads * n_tiles * KB;
    int64_t chunks = (int64_t)a->n_kv_heads * n_tiles * KN * (DH / 8);
    int64_t pk_blocks = (chunks + 255) / 256;
    unsigned kblocks = (unsigned)(pk_blocks < 16384 ? pk_blocks : 16384);
    if (DH == 128 && KN == 128) { /* the same images as k_attn_wgmma2's */
        k_pack_k<<<kblocks, 256, 0, stream>>>(kp, (const __nv_bfloat16 *)a->k, a->Skv, a->n_kv_heads, n_tiles);
        k_pack_v<<<dim3((unsigned)n_tiles, (unsigned)a->n_kv_heads), 256, 0, stream>>>(
            vp, (const __nv_bfloat16 *)a->v, a->Skv, a->n_kv_heads, n_tiles);
    } else {
        k_pack_k_n<DH, KN><<<kblocks, 256, 0, stream>>>(kp, (const uint16_t *)a->k, a->Skv, a->n_kv_heads, n_tiles);
        k_pack_v_n<DH, KN><<<dim3((unsigned)(n_tiles * ((KN + 63) / 64)), (unsigned)a->n_kv_heads), 256, 0, stream>>>(
            vp, (const uint16_t *)a->v, a->Skv, a->n_kv_heads, n_tiles);
    }
    return (int)cudaGetLastError();
}

/* k_attn_fa3 on the images fa3_pack<DH, KN> left in the scratch. */
template <typename T, int DH, int STAGES, bool PINGPONG, bool LAZY, int KN, bool NOSOFT, int POLY = 0>
int fa3_kernel(const h3k_attention_args *a, cudaStream_t stream) {
    static uint64_t configured; /* one bit per device: the shared-memory limit is set per device */
    const int smem = Fa3Tile<DH, KN>::template smem<STAGES>();
    if (!a->scratch || a->scratch_size < h3k_attention_scratch(a)) return (int)cudaErrorInvalidValue;
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return (int)e;
    uint64_t bit = (uint64_t)1 << (dev & 63);
    if (!(configured & bit)) {
        e = cudaFuncSetAttribute(k_attn_fa3<T, DH, STAGES, PINGPONG, LAZY, KN, NOSOFT, POLY>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return (int)e;
        configured |= bit;
    }
    int n_tiles = (int)fa3_tiles(a, KN);
    uint8_t *kp = (uint8_t *)a->scratch, *vp = kp + (size_t)a->n_kv_heads * n_tiles * Fa3Tile<DH, KN>::k_bytes;
    dim3 grid((unsigned)((a->Sq + kWgTile - 1) / kWgTile), (unsigned)a->n_heads);
    k_attn_fa3<T, DH, STAGES, PINGPONG, LAZY, KN, NOSOFT, POLY><<<grid, 384, smem, stream>>>(
        (T *)a->o, (const T *)a->q, kp, vp, a->Sq, a->Skv, n_tiles, a->n_heads, a->n_kv_heads, a->scale * kLog2e);
    return (int)cudaGetLastError();
}

/* k_attn_fa3 after packing K and Vᵀ into its tile images (scratch): bf16 at
 * head_dim 128, f16 or bf16 at 64 (what h3_attention.cu lets through). */
template <int DH, int STAGES, bool PINGPONG, bool LAZY, int KN>
int launch_fa3(const h3k_attention_args *a, cudaStream_t stream) {
    if (a->Skv <= 0 || a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads != 0 || a->Skv > (int64_t)0x7fffffff * KN)
        return (int)cudaErrorInvalidValue;
    int e = fa3_pack<DH, KN>(a, stream);
    if (e) return e;
    if constexpr (DH == 64) {
        if (a->dt == H3K_F16) return fa3_kernel<__half, DH, STAGES, PINGPONG, LAZY, KN, false>(a, stream);
    }
    return fa3_kernel<__nv_bfloat16, DH, STAGES, PINGPONG, LAZY, KN, false>(a, stream);
}

/* h3k_attention_probe's parts of the default kernel (bf16, head_dim 128, 2 stages, ping-pong, lazy,
 * 192-key tiles): the pack alone, the kernel alone on the images already packed, the kernel without
 * its softmax, with a quarter or half of its exponentials on the FMA pipe, and without exponentials. */
int probe_fa3(const h3k_attention_args *a, int which, cudaStream_t stream) {
    typedef __nv_bfloat16 B;
    switch (which) {
    case H3K_ATTN_PROBE_PACK: return fa3_pack<128, 192>(a, stream);
    case H3K_ATTN_PROBE_KERNEL: return fa3_kernel<B, 128, 2, true, true, 192, false>(a, stream);
    case H3K_ATTN_PROBE_NOSOFTMAX: return fa3_kernel<B, 128, 2, true, true, 192, true>(a, stream);
    case H3K_ATTN_PROBE_POLY_QUARTER: return fa3_kernel<B, 128, 2, true, true, 192, false, 1>(a, stream);
    case H3K_ATTN_PROBE_POLY_HALF: return fa3_kernel<B, 128, 2, true, true, 192, false, 2>(a, stream);
    case H3K_ATTN_PROBE_NOEXP: return fa3_kernel<B, 128, 2, true, true, 192, false, 3>(a, stream);
    default: return (int)cudaErrorInvalidValue;
    }
}

/* The variants h3_attention.cu dispatches to: the rows of H3_FA3_VARIANTS. */
#define H3_FA3_INSTANCE(path, DH, STAGES, PINGPONG, LAZY, KN) \
    template int launch_fa3<DH, STAGES, PINGPONG, LAZY, KN>(const h3k_attention_args *a, cudaStream_t stream);
H3_FA3_VARIANTS(H3_FA3_INSTANCE)
#undef H3_FA3_INSTANCE

} /* namespace h3k_attn */
