/* h3_attention_sm90_d64.cu - Hopper attention (sm_90a: wgmma, mbarriers,
 * bulk copies) for head_dim 64, f16 or bf16, non-causal: the video VAE's
 * ViT (32 heads × 64, fp16, 1797 rows a tile), where the portable mma.sync
 * kernel reaches about half of what PyTorch's SDPA does.
 *
 * The shape of k_attn_fa3 (h3_attention_sm90.cu) with the head_dim-64
 * geometry: a 64-element row is exactly one 128-byte swizzle row, so Q, K
 * and each 64-key slice of Vᵀ are single K-major SWIZZLE_128B boxes and the
 * GEMMs have 4 k-steps of 16 channels (S) and KN/16 of 16 keys (P·V), for
 * key tiles of KN = 128 or 192 keys (the variants wgmma-d64, -n192; FA3
 * takes 192 at this head_dim). 384 threads: warpgroup 0 produces (one thread
 * issues the bulk copies of the pre-packed K and Vᵀ tile images, KN·128
 * bytes each, on per-stage full/empty mbarriers),
 * warpgroups 1 and 2 consume 64 query rows each of a 128-row tile. Per key
 * tile j a consumer issues S_j = Q·K_jᵀ and O += P_{j-1}·V_{j-1} together and
 * runs the softmax of S_j under P·V (two GEMMs of cover), and the two
 * consumers pass a token around their GEMM issues (named barriers 1, 2) so
 * one's softmax runs under the other's GEMMs.
 *
 * Numerics as the mma.sync kernel: S in f32, the online softmax in f32 with
 * exp2 and a running max, the row sums over the unrounded probabilities,
 * P rounded to the operand dtype for P·V, O normalised in f32 and rounded
 * once. (The exponent is taken as one FMA, s·scale·log2e − max·scale·log2e,
 * as k_attn_fa3 does, where the mma.sync kernel rounds s·scale·log2e first:
 * a difference of one f32 rounding in the exponent.)
 *
 * Built for sm_80 too, where the kernel is a trap: the dispatch
 * (h3_attention.cu) launches it on sm_90 devices only. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "kernels/h3_attention_impl.cuh" /* d64_kbytes/vbytes, fa3_tiles, the launcher */
#include "kernels/h3_common.cuh"         /* kLog2e, ex2_ftz */
#include "kernels/h3_tc.cuh"             /* wgmma descriptors, mbarriers, bulk copies; H3_HAVE_WGMMA */

namespace {

const int kD64Stages = 2;
const int kD64QBytes = 128 * 128; /* 128 query rows × 64 channels × 2 bytes */
template <int KN> constexpr int d64_smem() {
    return kD64QBytes + kD64Stages * (d64_kbytes<KN>() + d64_vbytes<KN>()) + 1024 + 32 * kD64Stages;
}

/* Byte offset of 16-byte chunk ch (0..7) of row r in a box of 128-byte rows
 * under the 128-byte swizzle (chunk ^ row%8 in every 1024-byte atom). */
__device__ __forceinline__ uint32_t sw64(int r, int ch) { return (uint32_t)(r * 128 + ((ch ^ (r & 7)) << 4)); }

#ifdef H3_HAVE_WGMMA

/* The f16 and bf16 forms of the GEMMs (the PTX differs only in the operand
 * type). ss_n128, ss_n192: d[64 × KN] (+)= A[64 × 16]·B[KN × 16]ᵀ from
 * shared memory, the scores. rs_n64: d[64 × 64] (+)= A[64 × 16]·B[64 × 16]ᵀ,
 * A from registers (P packed in the accumulator layout of S), the output.
 * Accumulator i is row 16·warp + lane/4 + 8·((i>>1)&1), column
 * 8·(i>>2) + 2·(lane%4) + (i&1). */
#define H3_D64_WGMMA(T, TY)                                                                                        \
    template <> struct WgD64<T> {                                                                                  \
        static __device__ __forceinline__ void ss_n128(float *d, uint64_t da, uint64_t db, int scale_d) {          \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                              \
                         "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " "                              \
                         "{"                                                                                       \
                         "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                  \
                         "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "        \
                         "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "        \
                         "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"          \
                         "}, "                                                                                     \
                         "%64, %65, p, 1, 1, 0, 0;\n}\n"                                                           \
                         : H3_WG_F32(0), H3_WG_F32(32)                                                             \
                         : "l"(da), "l"(db), "r"(scale_d));                                                        \
        }                                                                                                          \
        static __device__ __forceinline__ void ss_n192(float *d, uint64_t da, uint64_t db, int scale_d) {          \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"                                              \
                         "wgmma.mma_async.sync.aligned.m64n192k16.f32." TY "." TY " "                              \
                         "{"                                                                                       \
                         "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                  \
                         "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "        \
                         "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "        \
                         "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "        \
                         "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "        \
                         "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"          \
                         "}, "                                                                                     \
                         "%96, %97, p, 1, 1, 0, 0;\n}\n"                                                           \
                         : H3_WG_F32(0), H3_WG_F32(32), H3_WG_F32(64)                                              \
                         : "l"(da), "l"(db), "r"(scale_d));                                                        \
        }                                                                                                          \
        template <int KN> static __device__ __forceinline__ void ss(float *d, uint64_t da, uint64_t db, int sd) {  \
            if constexpr (KN == 128) ss_n128(d, da, db, sd);                                                       \
            else ss_n192(d, da, db, sd);                                                                           \
        }                                                                                                          \
        static __device__ __forceinline__ void rs_n64(float *d, const uint32_t *a, uint64_t db, int scale_d) {     \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                              \
                         "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                               \
                         "{"                                                                                       \
                         "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                  \
                         "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"          \
                         "}, "                                                                                     \
                         "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"                                             \
                         : H3_WG_F32(0)                                                                            \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));                     \
        }                                                                                                          \
    };
template <typename T> struct WgD64;
H3_D64_WGMMA(__half, "f16")
H3_D64_WGMMA(__nv_bfloat16, "bf16")
#undef H3_D64_WGMMA

/* Online softmax of one 64 × KN S tile held raw (unscaled) in s: keys
 * >= Skv masked (tail tiles only), s becomes P = 2^(s·sl − max·sl), m the
 * running raw row max, corr the factor O and l take, rs this tile's row
 * sums (this thread's share). Max and sum run on 4 partial chains a row. */
template <int KN>
__device__ __forceinline__ void d64_softmax(float *s, float m[2], float corr[2], float rs[2], float sl, bool tail,
                                            int64_t k0, int64_t Skv, int t) {
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
        base[r] = mx == -INFINITY ? 0.0f : mx * sl; /* a row with no valid key yet: no -inf - -inf */
        corr[r] = ex2_ftz(m[r] * sl - base[r]);     /* m = -inf (first tile): 0 */
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
                s[i] = ex2_ftz(fmaf(s[i], sl, -base[r]));
                a[r][(n & 1) * 2 + c] += s[i];
            }
#pragma unroll
    for (int r = 0; r < 2; r++) rs[r] = (a[r][0] + a[r][1]) + (a[r][2] + a[r][3]);
}

/* P (s, KN/2 floats) -> the A fragments of P·V, KN/16 k-steps of 16 keys. */
template <typename T, int KN> __device__ __forceinline__ void d64_pack_p(const float *s, uint32_t (*pa)[4]) {
#pragma unroll
    for (int i = 0; i < KN / 2; i += 2) pa[i >> 3][(i >> 1) & 3] = Mma<T>::pack(s[i], s[i + 1]);
}

/* S = Q·Kᵀ for one 64-row warpgroup: 4 k-steps of 16 channels, both boxes
 * of 128-byte rows, k-step kk 32 bytes into the row. */
template <typename T, int KN> __device__ __forceinline__ void d64_issue_s(float *s, uint32_t qtile, uint32_t ktile) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        WgD64<T>::template ss<KN>(s, wg_desc(qtile + kk * 32), wg_desc(ktile + kk * 32), kk > 0);
}

/* O += P·V: KN/16 k-steps of 16 keys; keys 64·b.. are box b of the Vᵀ image. */
template <typename T, int KN>
__device__ __forceinline__ void d64_issue_pv(float *oacc, uint32_t (*pa)[4], uint32_t vtile) {
#pragma unroll
    for (int kk = 0; kk < KN / 16; kk++)
        WgD64<T>::rs_n64(oacc, pa[kk], wg_desc(vtile + (kk >> 2) * (64 * 128) + (kk & 3) * 32), 1);
}

#endif /* H3_HAVE_WGMMA */

/* The kernel. o, q: [Sq, H·64]; kp, vp: the tile images of k_pack_k64 and
 * k_pack_v64 for each kv head; n_tiles = ceil(Skv / KN). Barriers sit
 * after the stages: fullK[s], fullV[s], emptyK[s], emptyV[s], 8 bytes each.
 * Registers: O 32 + S KN/2 + P KN/4 live at once, within the 240 that
 * setmaxnreg grants a consumer thread. */
template <typename T, int KN>
__global__ void __launch_bounds__(384, 1)
    k_attn_d64(T *o, const T *q, const uint8_t *kp, const uint8_t *vp, int64_t Sq, int64_t Skv, int n_tiles, int H,
               int Hkv, float sl) {
#ifdef H3_HAVE_WGMMA
    const int KB = d64_kbytes<KN>(), VB = d64_vbytes<KN>(), ST = kD64Stages, NS = KN / 2, KS = KN / 16;
    extern __shared__ __align__(1024) uint8_t smem_d64[];
    uint32_t sbase = (smem_u32(smem_d64) + 1023u) & ~1023u;
    uint32_t sQ = sbase, sK = sbase + kD64QBytes, sV = sK + ST * KB;
    uint32_t fullK = sV + ST * VB, fullV = fullK + 8 * ST, emptyK = fullV + 8 * ST, emptyV = emptyK + 8 * ST;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int h = blockIdx.y, kh = h / (H / Hkv);
    int64_t q0 = (int64_t)blockIdx.x * 128;
    int64_t ldq = (int64_t)H * 64;
    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < ST; s++) {
            mbar_init(fullK + 8 * s, 1);
            mbar_init(fullV + 8 * s, 1);
            mbar_init(emptyK + 8 * s, 8); /* lane 0 of each of the 8 consumer warps */
            mbar_init(emptyV + 8 * s, 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    { /* Q: 128 rows × 8 chunks, rows past Sq zero */
        const T *qg = q + (int64_t)h * 64;
        for (int i = tid; i < 128 * 8; i += 384) {
            int row = i >> 3, ch = i & 7;
            int64_t gr = q0 + row;
            bool valid = gr < Sq;
            cp_async16(sQ + sw64(row, ch), qg + (valid ? gr : 0) * ldq + ch * 8, valid);
        }
        cp_async_commit();
        cp_async_wait<0>();
        fence_proxy_async(); /* cp.async wrote through the generic proxy; wgmma reads through the async one */
    }
    __syncthreads();

    if (warp < 4) { /* producer: K_j, then V_{j-1}, the order the consumers take them */
        reg_dealloc<24>();
        if (tid == 0) {
            const uint8_t *kb = kp + (int64_t)kh * n_tiles * KB, *vb = vp + (int64_t)kh * n_tiles * VB;
            for (int j = 0; j <= n_tiles; j++) {
                if (j < n_tiles) {
                    int st = j % ST, u = j / ST;
                    if (u > 0) mbar_wait(emptyK + 8 * st, (u - 1) & 1);
                    mbar_expect_tx(fullK + 8 * st, KB);
                    bulk_load(sK + st * KB, kb + (int64_t)j * KB, KB, fullK + 8 * st);
                }
                if (j > 0) {
                    int jv = j - 1, st = jv % ST, u = jv / ST;
                    if (u > 0) mbar_wait(emptyV + 8 * st, (u - 1) & 1);
                    mbar_expect_tx(fullV + 8 * st, VB);
                    bulk_load(sV + st * VB, vb + (int64_t)jv * VB, VB, fullV + 8 * st);
                }
            }
        }
        return;
    }

    reg_alloc<240>();
    int late = 0;
    int wg = (warp >> 2) - 1, w4 = warp & 3, g = lane >> 2, t = lane & 3;
    uint32_t qtile = sQ + wg * 64 * 128;
    int mine = 1 + wg, other = 2 - wg; /* named barrier ids: 1 for warpgroup 0, 2 for 1 */
    float oacc[32], s[NS];
    uint32_t pa[KS][4];
    float m[2] = {-INFINITY, -INFINITY}, l[2], corr[2], rs[2];
#pragma unroll
    for (int i = 0; i < 32; i++) oacc[i] = 0.0f;
    if (wg == 1) named_arrive(1); /* warpgroup 0 issues first */

    /* tile 0: S alone. No branch may sit between a wgmma and its wait
     * (ptxas would serialise them, C7520): barrier waits come before the
     * issue, releases after the wait. */
    mbar_wait_late(fullK, 0, &late);
    named_sync(mine);
    wg_fence();
    d64_issue_s<T, KN>(s, qtile, sK);
    wg_commit();
    named_arrive(other);
    wg_wait0();
    fence_f<NS>(s);
    if (lane == 0) mbar_arrive(emptyK);
    d64_softmax<KN>(s, m, corr, rs, sl, KN > Skv, 0, Skv, t);
    l[0] = rs[0];
    l[1] = rs[1];
    d64_pack_p<T, KN>(s, pa);

    for (int j = 1; j < n_tiles; j++) {
        int st = j % ST, sp = (j - 1) % ST;
        mbar_wait_late(fullK + 8 * st, (j / ST) & 1, &late);
        mbar_wait_late(fullV + 8 * sp, ((j - 1) / ST) & 1, &late);
        named_sync(mine);
        wg_fence();
        d64_issue_s<T, KN>(s, qtile, sK + st * KB);
        wg_commit();
        d64_issue_pv<T, KN>(oacc, pa, sV + sp * VB);
        wg_commit();
        named_arrive(other);
        wg_wait1(); /* S_j done, P_{j-1}·V_{j-1} may still run */
        fence_f<NS>(s);
        int64_t k0 = (int64_t)j * KN;
        d64_softmax<KN>(s, m, corr, rs, sl, k0 + KN > Skv, k0, Skv, t);
        wg_wait0();
        fence_f<32>(oacc);
        fence_u<KS * 4>(&pa[0][0]);
        if (lane == 0) {
            mbar_arrive(emptyK + 8 * st);
            mbar_arrive(emptyV + 8 * sp);
        }
#pragma unroll
        for (int r = 0; r < 2; r++) l[r] = l[r] * corr[r] + rs[r];
#pragma unroll
        for (int i = 0; i < 32; i++) oacc[i] *= corr[(i >> 1) & 1];
        d64_pack_p<T, KN>(s, pa);
    }

    { /* the last P·V */
        int sp = (n_tiles - 1) % ST;
        mbar_wait_late(fullV + 8 * sp, ((n_tiles - 1) / ST) & 1, &late);
        wg_fence();
        d64_issue_pv<T, KN>(oacc, pa, sV + sp * VB);
        wg_commit();
        wg_wait0();
        fence_f<32>(oacc);
        fence_u<KS * 4>(&pa[0][0]);
    }
    if (wg == 0) named_sync(mine); /* warpgroup 1's last token */

    float inv[2];
    softmax_row_inverse(l, inv);
    T *og = o + (int64_t)h * 64;
    int64_t rbase = q0 + wg * 64 + w4 * 16 + g;
#pragma unroll
    for (int i = 0; i < 32; i += 2) {
        int r = (i >> 1) & 1;
        int64_t row = rbase + 8 * r;
        int col = 8 * (i >> 2) + 2 * t;
        if (row < Sq) *(uint32_t *)(og + row * ldq + col) = Mma<T>::pack(oacc[i] * inv[r], oacc[i + 1] * inv[r]);
    }
    if (late) __trap();
#else
    __trap(); /* only launched on sm_90 devices, which load the sm_90a image */
#endif
}

/* K [Skv, Hkv·64] -> per (kv head, KN-key tile) the K image: KN key rows
 * of 128 bytes, swizzled; rows past Skv zero. 16-bit elements. */
template <int KN> __global__ void k_pack_k64(uint8_t *kp, const uint16_t *k, int64_t Skv, int Hkv, int n_tiles) {
    int64_t total = (int64_t)Hkv * n_tiles * KN * 8;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int c = (int)(idx % (KN * 8));
        int64_t tile = idx / (KN * 8);
        int tt = (int)(tile % n_tiles), hh = (int)(tile / n_tiles);
        int r = c >> 3, ch = c & 7;
        int64_t key = (int64_t)tt * KN + r;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (key < Skv) v = *(const uint4 *)(k + key * ((int64_t)Hkv * 64) + (int64_t)hh * 64 + ch * 8);
        *(uint4 *)(kp + tile * d64_kbytes<KN>() + sw64(r, ch)) = v;
    }
}

/* V [Skv, Hkv·64] -> per (kv head, KN-key tile) the Vᵀ image: box b holds
 * keys 64b..64b+63 as 64 channel rows of 64 keys (128 bytes), swizzled; one
 * block a (tile, kv head), through shared memory. */
template <int KN>
__global__ void __launch_bounds__(256) k_pack_v64(uint8_t *vp, const uint16_t *v, int64_t Skv, int Hkv, int n_tiles) {
    __shared__ __align__(16) uint16_t tile[KN][64 + 8]; /* rows 144 bytes apart: 16-byte aligned for the row writes */
    int tt = blockIdx.x, hh = blockIdx.y;
    for (int i = threadIdx.x; i < KN * 8; i += 256) {
        int r = i >> 3, ch = i & 7;
        int64_t key = (int64_t)tt * KN + r;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (key < Skv) val = *(const uint4 *)(v + key * ((int64_t)Hkv * 64) + (int64_t)hh * 64 + ch * 8);
        *(uint4 *)&tile[r][ch * 8] = val;
    }
    __syncthreads();
    uint8_t *dst = vp + ((int64_t)hh * n_tiles + tt) * d64_vbytes<KN>();
    for (int i = threadIdx.x; i < 64 * (KN / 8); i += 256) { /* channel d, key chunk kc (8 keys) */
        int d = i & 63, kc = i >> 6;
        uint16_t e[8];
#pragma unroll
        for (int u = 0; u < 8; u++) e[u] = tile[kc * 8 + u][d];
        *(uint4 *)(dst + (kc >> 3) * (64 * 128) + sw64(d, kc & 7)) = *(const uint4 *)e;
    }
}

template <typename T, int KN> int launch_d64_t(const h3k_attention_args *a, cudaStream_t stream) {
    static uint64_t configured; /* one bit per device: the shared-memory limit is set per device */
    const int KB = d64_kbytes<KN>();
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return (int)e;
    uint64_t bit = (uint64_t)1 << (dev & 63);
    if (!(configured & bit)) {
        e = cudaFuncSetAttribute(k_attn_d64<T, KN>, cudaFuncAttributeMaxDynamicSharedMemorySize, d64_smem<KN>());
        if (e != cudaSuccess) return (int)e;
        configured |= bit;
    }
    int n_tiles = (int)fa3_tiles(a, KN);
    uint8_t *kp = (uint8_t *)a->scratch, *vp = kp + (size_t)a->n_kv_heads * n_tiles * KB;
    int64_t chunks = (int64_t)a->n_kv_heads * n_tiles * KN * 8;
    int64_t pk_blocks = (chunks + 255) / 256;
    k_pack_k64<KN><<<(unsigned)(pk_blocks < 16384 ? pk_blocks : 16384), 256, 0, stream>>>(
        kp, (const uint16_t *)a->k, a->Skv, a->n_kv_heads, n_tiles);
    k_pack_v64<KN><<<dim3((unsigned)n_tiles, (unsigned)a->n_kv_heads), 256, 0, stream>>>(
        vp, (const uint16_t *)a->v, a->Skv, a->n_kv_heads, n_tiles);
    e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
    dim3 grid((unsigned)((a->Sq + 127) / 128), (unsigned)a->n_heads);
    k_attn_d64<T, KN><<<grid, 384, d64_smem<KN>(), stream>>>((T *)a->o, (const T *)a->q, kp, vp, a->Sq, a->Skv,
                                                              n_tiles, a->n_heads, a->n_kv_heads, a->scale * kLog2e);
    return (int)cudaGetLastError();
}

} /* namespace */

namespace h3k_attn {

template <int KN> int launch_d64(const h3k_attention_args *a, cudaStream_t stream) {
    if (!a->scratch || a->scratch_size < h3k_attention_scratch(a)) return (int)cudaErrorInvalidValue;
    if (a->Skv <= 0 || a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads != 0 || a->Skv > (int64_t)0x7fffffff * KN)
        return (int)cudaErrorInvalidValue;
    return a->dt == H3K_BF16 ? launch_d64_t<__nv_bfloat16, KN>(a, stream) : launch_d64_t<__half, KN>(a, stream);
}

/* The variants h3_attention.cu dispatches to (H3K_ATTN_D64, H3K_ATTN_D64_N192). */
template int launch_d64<128>(const h3k_attention_args *a, cudaStream_t stream);
template int launch_d64<192>(const h3k_attention_args *a, cudaStream_t stream);

} /* namespace h3k_attn */
