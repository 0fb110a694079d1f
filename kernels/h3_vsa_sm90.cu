/* h3_vsa_sm90.cu - the block-sparse kernels of VSA-H3 on Hopper (sm_90a:
 * wgmma, mbarriers, bulk copies), for bf16, head_dim 128 and 64-row tiles:
 * k_vsa_wgmma with its two consumers (one tile at a time, the default; the
 * FlashAttention-3-style pipelined one), the paired k_vsa_pair, and the two
 * probes of benchmarks (k_vsa_copy_probe: the tile copies alone;
 * k_vsa_wgmma<false, true>: the consumer alone). Built for sm_90a alone
 * (kernels/meson.build): the dispatch (h3_vsa.cu) launches them on sm_90
 * devices only, and a GPU of another architecture has no image of them.
 * The H3_HAVE_WGMMA guards leave a trap should they ever be built for
 * another target. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "kernels/h3_common.cuh" /* kLog2e, ex2_ftz */
#include "kernels/h3_tc.cuh"     /* wgmma, mbarriers, bulk copies, softmax steps; H3_HAVE_WGMMA */
#include "kernels/h3_vsa_impl.cuh"

namespace {

/* ---- 6c. wgmma fine kernel (sm_90a) ------------------------------------------------------------ */

const int kWgImg = img_bytes<128>(); /* 16 KB: a Q, K or Vᵀ tile */
const int kWgStages = 3;
/* Q + three stages of K and Vᵀ, plus the slack that aligns them to 1024
 * bytes (the swizzle atom); the barriers live in that slack. 115,712 bytes:
 * exactly half of an H100/H200 SM's 228 KB less the 1 KB the runtime
 * reserves per CTA, so two CTAs fit on an SM. */
const int kWgSmem = (1 + 2 * kWgStages) * kWgImg + 1024;

#ifdef H3_HAVE_WGMMA
/* Issues S = Q·Kᵀ for one 64-key tile (64 × 64; s[4n + 2r + c] is row
 * 16·warp + lane/4 + 8r, key 8n + 2·(lane%4) + c) and commits it. */
__device__ __forceinline__ void wg_scores(float s[32], uint32_t sQ, uint32_t ktile) {
#pragma unroll
    for (int i = 0; i < 32; i++) s[i] = 0.0f;
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        uint32_t off = (uint32_t)((kk >> 2) * (kRows * 128) + (kk & 3) * 32);
        Wg<__nv_bfloat16>::ss<64>(s, wg_desc(sQ + off), wg_desc(ktile + off), kk > 0);
    }
    wg_commit();
}

/* Online softmax of a finished score tile: p = exp2(s·scale − max) with
 * keys >= ks masked, the running max m updated, corr the factor the
 * previous O and row sums are to be multiplied by, rs the row sums of p.
 * The dense kernels' softmax, on 64 keys. s is only read: in the pipelined
 * loop no instruction but a wgmma may define wgmma registers while one is
 * in flight, or ptxas serializes the pipeline (C7513/C7515). */
__device__ __forceinline__ void wg_softmax(const float s[32], float p[32], int ks, int t, float scale_log2,
                                           float m[2], float corr[2], float rs[2]) {
    bool tail = ks < kRows;
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int i = 0; i < 32; i++) {
        float x = s[i] * scale_log2;
        if (tail && 8 * (i >> 2) + 2 * t + (i & 1) >= ks) x = -INFINITY;
        p[i] = x;
        mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], x);
    }
    float base[2];
    softmax_row_max(mx, m, base, corr);
    rs[0] = rs[1] = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; i++) {
        p[i] = exp2f(p[i] - base[(i >> 1) & 1]);
        rs[(i >> 1) & 1] += p[i];
    }
}

/* The end of a Hopper VSA consumer: the row sums reduced over the quad, O
 * normalised, plus the gated compressed branch (oc·gate, oc rounded to bf16
 * as the reference does) when there is a gate, written to the query tile's
 * rows through the slot table. w4 is the warp within its warpgroup. */
__device__ __forceinline__ void wg_store_rows(__nv_bfloat16 *o, const __nv_bfloat16 *gate, const float *oc,
                                              const int32_t *slot, const int32_t *sizes, const float oacc[64],
                                              float l[2], int64_t n, int H, int h, int64_t qt, int w4, int g,
                                              int t) {
    float inv[2];
    softmax_row_inverse(l, inv);
    int qsize = tile_size(sizes, qt, kRows);
    const float *ocr = oc ? oc + ((int64_t)h * n + qt) * 128 : nullptr;
    int64_t ld = (int64_t)H * 128;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int rb = w4 * 16 + g + 8 * r;
        if (rb >= qsize) continue;
        int row = slot[qt * kRows + rb];
        if (row < 0) continue;
        __nv_bfloat16 *orow = o + (int64_t)row * ld + (int64_t)h * 128;
        const __nv_bfloat16 *grow = gate ? gate + (int64_t)row * ld + (int64_t)h * 128 : nullptr;
#pragma unroll
        for (int i = 2 * r; i < 64; i += 4) { /* accumulators i, i + 1: row rb, channels 8(i/4) + 2t, +1 */
            int col = 8 * (i >> 2) + 2 * t;
            float v0 = oacc[i] * inv[r], v1 = oacc[i + 1] * inv[r];
            if (grow) {
                float2 c = *(const float2 *)(ocr + col);
                float2 gv = Mma<__nv_bfloat16>::unpack(*(const uint32_t *)(grow + col));
                v0 += Mma<__nv_bfloat16>::round(c.x) * gv.x;
                v1 += Mma<__nv_bfloat16>::round(c.y) * gv.y;
            }
            *(uint32_t *)(orow + col) = Mma<__nv_bfloat16>::pack(v0, v1);
        }
    }
}

/* P (the accumulator layout of S) as the bf16 A fragments of P·V; in the
 * pipelined loop only once the previous P·V has finished (see above). */
__device__ __forceinline__ void wg_pack(const float p[32], uint32_t pa[4][4]) {
#pragma unroll
    for (int i = 0; i < 32; i += 2) pa[i >> 3][(i >> 1) & 3] = Mma<__nv_bfloat16>::pack(p[i], p[i + 1]);
}

/* Issues O += P·V for one 64-key tile (P from registers, the Vᵀ image
 * K-major in shared memory) and commits it. */
__device__ __forceinline__ void wg_pv(float oacc[64], const uint32_t pa[4][4], uint32_t vtile) {
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) Wg<__nv_bfloat16>::rs<128>(oacc, pa[kk], wg_desc(vtile + kk * 32), 1);
    wg_commit();
}

__device__ __forceinline__ void wg_rescale(float oacc[64], float l[2], const float corr[2], const float rs[2]) {
#pragma unroll
    for (int r = 0; r < 2; r++) l[r] = l[r] * corr[r] + rs[r];
#pragma unroll
    for (int i = 0; i < 64; i++) oacc[i] *= corr[(i >> 1) & 1];
}
#endif

#ifdef H3_HAVE_WGMMA
/* A CTA of k_vsa_wgmma or k_vsa_copy_probe: its shared-memory layout (below),
 * its head, query tile and key list. */
struct wg_cta {
    uint32_t sQ, sK, sV, bars; /* stage s: sK/sV + s·2·kWgImg */
    int *info;
    int h;
    int64_t qt;
    key_list kl;
};

/* Carves the dynamic shared memory, finds the CTA's work and initialises the
 * barriers (all threads: it ends in a __syncthreads). */
__device__ __forceinline__ wg_cta wg_setup(uint8_t *smem, const int32_t *lists, int64_t n, int64_t P, int64_t topk,
                                           int dense_all, int H) {
    wg_cta c;
    uint32_t base = smem_u32(smem), sbase = (base + 1023u) & ~1023u;
    c.sQ = sbase;
    c.sK = sbase + kWgImg;
    c.sV = c.sK + kWgImg;
    c.bars = sbase - base >= 128 ? base : sbase + (1 + 2 * kWgStages) * kWgImg;
    c.info = (int *)(smem + (c.bars - base) + 64);
    vsa_item(blockIdx.x, n, P, H, &c.h, &c.qt);
    c.kl = vsa_keys(lists, n, P, topk, dense_all, c.h, c.qt);
    if (threadIdx.x == 0) {
        mbar_init(c.bars, 1);
        for (int s = 0; s < kWgStages; s++) {
            mbar_init(c.bars + 8 + 8 * s, 1);
            mbar_init(c.bars + 32 + 8 * s, 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    return c;
}

/* The producer warp: the query tile's image once, then the first `count`
 * listed key tiles' K and Vᵀ images, each into the next free stage. The lanes read 32 list
 * entries at a time; lane 0 issues the copies. */
__device__ __forceinline__ void wg_produce(const uint8_t *qimg, const uint8_t *kimg, const uint8_t *vimg,
                                           const int32_t *sizes, const key_list &kl, int64_t count, int64_t n, int h,
                                           int64_t qt, uint32_t sQ, uint32_t sK, uint32_t sV, uint32_t bars, int *info,
                                           int lane) {
    const uint8_t *kb = kimg + (int64_t)h * n * kWgImg, *vb = vimg + (int64_t)h * n * kWgImg;
    if (lane == 0) {
        mbar_expect_tx(bars, kWgImg);
        bulk_load(sQ, qimg + ((int64_t)h * n + qt) * kWgImg, kWgImg, bars);
    }
    int st = 0;
    uint32_t use = 0;
    for (int64_t e0 = 0; e0 < count; e0 += 32) {
        int64_t e = e0 + lane;
        int kt_l = e < count ? (int)kl.at(e) : 0;
        int ks_l = e < count ? tile_size(sizes, kt_l, kRows) : 0;
        int batch = count - e0 < 32 ? (int)(count - e0) : 32;
        for (int i = 0; i < batch; i++) {
            int kt = __shfl_sync(0xffffffffu, kt_l, i), ks = __shfl_sync(0xffffffffu, ks_l, i);
            if (lane == 0) {
                if (use > 0) mbar_wait(bars + 32 + 8 * st, (use - 1) & 1);
                info[2 * st] = kt;
                info[2 * st + 1] = ks;
                mbar_expect_tx(bars + 8 + 8 * st, 2 * kWgImg);
                bulk_load(sK + st * 2 * kWgImg, kb + (int64_t)kt * kWgImg, kWgImg, bars + 8 + 8 * st);
                bulk_load(sV + st * 2 * kWgImg, vb + (int64_t)kt * kWgImg, kWgImg, bars + 8 + 8 * st);
            }
            __syncwarp();
            if (++st == kWgStages) {
                st = 0;
                use++;
            }
        }
    }
}
#endif

/* MATH_ONLY (h3-bench's math probe, with the simple consumer): the producer
 * copies only the first three key tiles; the consumer waits for them once and
 * then runs the whole list's GEMMs and softmax over those resident stages,
 * with no copies to wait for, and writes nothing. Its time is what the
 * consumer's own work costs.
 * 160 threads: warps 0-3 the consumer warpgroup (the tile's 64 query rows),
 * warp 4 the producer. Barriers (8 bytes each): q at +0, full[s] at +8 + 8s
 * (producer arrive + transaction bytes), empty[s] at +32 + 8s (one arrive
 * per consumer warp); the stage's key tile and size at +64 + 8s, written by
 * the producer before it arrives on full[s] and so visible to the consumers
 * that wait on it.
 * PIPE (FlashAttention-3's intra-warpgroup overlap): the consumer issues
 * S_{j+1} = Q·K_{j+1}ᵀ and O += P_j·V_j back to back and computes the
 * softmax of S_{j+1} while P_j·V_j runs; without it each tile is S, wait,
 * softmax, P·V, wait, and the overlap comes only from the SM's other CTA. */
template <bool PIPE, bool MATH_ONLY = false>
__global__ void __launch_bounds__(160, 2)
    k_vsa_wgmma(__nv_bfloat16 *o, const __nv_bfloat16 *gate, const uint8_t *qimg, const uint8_t *kimg,
                const uint8_t *vimg, const float *oc, const int32_t *lists, const int32_t *slot, const int32_t *sizes,
                int64_t n, int64_t P, int64_t topk, int dense_all, int H, float scale_log2) {
#ifdef H3_HAVE_WGMMA
    extern __shared__ __align__(1024) uint8_t smem_vsa_wg[];
    const wg_cta c = wg_setup(smem_vsa_wg, lists, n, P, topk, dense_all, H);
    const uint32_t sQ = c.sQ, sK = c.sK, sV = c.sV, bars = c.bars;
    const int h = c.h;
    const int64_t qt = c.qt;
    const key_list kl = c.kl;
    int *info = c.info;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

    if (warp == 4) {
        int64_t count = MATH_ONLY && kl.count > kWgStages ? kWgStages : kl.count;
        wg_produce(qimg, kimg, vimg, sizes, kl, count, n, h, qt, sQ, sK, sV, bars, info, lane);
        return;
    }

    int g = lane >> 2, t = lane & 3;
    float oacc[64], s[32], p[32], corr[2], rs[2];
    uint32_t pa[4][4];
#pragma unroll
    for (int i = 0; i < 64; i++) oacc[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    mbar_wait(bars, 0);
    int st = 0;
    uint32_t use = 0;
    if constexpr (!PIPE) {
        for (int64_t it = 0; it < kl.count; it++) {
            if (!MATH_ONLY || use == 0) mbar_wait(bars + 8 + 8 * st, use & 1);
            int ks = info[2 * st + 1];
            wg_scores(s, sQ, sK + st * 2 * kWgImg);
            wg_wait0();
            wg_softmax(s, p, ks, t, scale_log2, m, corr, rs);
            wg_pack(p, pa);
            wg_rescale(oacc, l, corr, rs);
            wg_pv(oacc, pa, sV + st * 2 * kWgImg);
            wg_wait0();
            if (!MATH_ONLY && lane == 0) mbar_arrive(bars + 32 + 8 * st);
            if (++st == kWgStages) {
                st = 0;
                use++;
            }
        }
    } else {
        /* tile 0's scores and softmax up front; then per tile j: S_{j+1} and P_j·V_j in flight together */
        mbar_wait(bars + 8, 0);
        int ks = info[1];
        wg_scores(s, sQ, sK);
        wg_wait0();
        wg_softmax(s, p, ks, t, scale_log2, m, corr, rs);
        wg_pack(p, pa);
        wg_rescale(oacc, l, corr, rs);
        for (int64_t it = 0; it < kl.count; it++) {
            int nst = st + 1 == kWgStages ? 0 : st + 1;
            uint32_t nuse = nst == 0 ? use + 1 : use;
            bool more = it + 1 < kl.count;
            int ks_next = 0;
            if (more) {
                mbar_wait(bars + 8 + 8 * nst, nuse & 1);
                ks_next = info[2 * nst + 1];
                wg_scores(s, sQ, sK + nst * 2 * kWgImg);
            }
            wg_pv(oacc, pa, sV + st * 2 * kWgImg);
            if (more) {
                wg_wait1(); /* groups complete in order: S_{j+1} is done, P_j·V_j may still run */
                wg_softmax(s, p, ks_next, t, scale_log2, m, corr, rs);
                wg_wait0();
                if (lane == 0) mbar_arrive(bars + 32 + 8 * st);
                wg_pack(p, pa);
                wg_rescale(oacc, l, corr, rs);
            } else {
                wg_wait0();
                if (lane == 0) mbar_arrive(bars + 32 + 8 * st);
            }
            st = nst;
            use = nuse;
        }
    }

    if constexpr (MATH_ONLY) {
        static_assert(!PIPE, "the math probe runs the simple consumer");
        if (l[0] < 0.0f) o[tid] = __float2bfloat16(oacc[0]); /* never: the results stay live, nothing written */
    } else {
        wg_store_rows(o, gate, oc, slot, sizes, oacc, l, n, H, h, qt, warp, g, t);
    }
#else
    __trap(); /* only launched on sm_90 devices, which load the sm_90a image */
#endif
}

/* What copying the listed tiles costs on its own (h3-bench): k_vsa_wgmma's
 * grid, shared memory, producer and stage protocol, with consumers that only
 * wait for each stage and free it. No math, nothing written. Its time is the
 * floor that moving the tiles sets under the fine kernel. */
__global__ void __launch_bounds__(160, 2)
    k_vsa_copy_probe(const uint8_t *qimg, const uint8_t *kimg, const uint8_t *vimg, const int32_t *lists,
                     const int32_t *sizes, int64_t n, int64_t P, int64_t topk, int dense_all, int H) {
#ifdef H3_HAVE_WGMMA
    extern __shared__ __align__(1024) uint8_t smem_vsa_probe[];
    const wg_cta c = wg_setup(smem_vsa_probe, lists, n, P, topk, dense_all, H);
    int lane = threadIdx.x & 31;
    if (threadIdx.x >> 5 == 4) {
        wg_produce(qimg, kimg, vimg, sizes, c.kl, c.kl.count, n, c.h, c.qt, c.sQ, c.sK, c.sV, c.bars, c.info, lane);
        return;
    }
    mbar_wait(c.bars, 0);
    int st = 0;
    uint32_t use = 0;
    for (int64_t it = 0; it < c.kl.count; it++) {
        mbar_wait(c.bars + 8 + 8 * st, use & 1);
        if (lane == 0) mbar_arrive(c.bars + 32 + 8 * st);
        if (++st == kWgStages) {
            st = 0;
            use++;
        }
    }
#else
    __trap(); /* only launched on sm_90 devices, which load the sm_90a image */
#endif
}

/* ---- 6d. paired wgmma fine kernel (sm_90a) -------------------------------------------------------- */

/* Why a second Hopper kernel: each listed key tile costs 32 KB (K and Vᵀ
 * images) for 64 query rows, so the one-tile-a-CTA kernels above move
 * ~91 GB through L2 at the reference shape. On an H200 those copies alone
 * take 8.8 ms (k_vsa_copy_probe, 10.4 TB/s), the consumer alone 10.9 ms
 * (k_vsa_wgmma<false, true>), the kernel 12.7 ms: the consumer's 64 × 64
 * steps bound it first, the copies next. Sharing copies lowers the second
 * floor. k_vsa_pair gives a CTA two query tiles of one head (one
 * consumer warpgroup each) and streams the union of their key lists once:
 * a key tile both lists hold (every prefix tile; for a prefix query tile,
 * every tile; for neighbouring video tiles, the overlap of their top-k) is
 * copied once for both. 288 threads: warps 0-3 consume query tile A, warps
 * 4-7 query tile B (absent at the end of an odd run), warp 8 produces.
 * Both lists are ascending (prefix tiles, then the top-k ascending), so the
 * producer merges them; each slot of the six-stage ring carries its tile,
 * size and a mask of the consumers that use it, and every consumer waits on
 * and releases every slot (one arrive per warp), doing the GEMMs only for
 * its own. A slot with mask −1 ends the stream. The merge visits each
 * list's entries in list order even if a list were not sorted (less
 * sharing, same result). Each consumer runs k_vsa_wgmma<false>'s loop (S,
 * softmax, P·V; the other warpgroup's GEMMs fill its softmax) with the
 * dense kernel's cheaper softmax (scale folded into one FFMA, ex2.approx). */
const int kPairStages = 6;
/* Two Q images + six stages of K and Vᵀ, then barriers and slot info:
 * 224 KB + 1 KB alignment slack + 256 bytes, within the 227 KB a CTA may
 * have; one CTA an SM. */
const int kPairTiles = (2 + 2 * kPairStages) * kWgImg;
const int kPairSmem = kPairTiles + 1024 + 256;

#ifdef H3_HAVE_WGMMA
/* wg_softmax with the dense kernel's arithmetic: m is the running raw (unscaled) row max, each p one
 * FFMA and one MUFU.EX2; max and sum on two chains a row. */
__device__ __forceinline__ void wg_softmax_fast(const float s[32], float p[32], int ks, int t, float scale_log2,
                                                float m[2], float corr[2], float rs[2]) {
    bool tail = ks < kRows;
    float a[2][2] = {{m[0], m[0]}, {m[1], m[1]}};
#pragma unroll
    for (int i = 0; i < 32; i++) {
        float x = s[i];
        if (tail && 8 * (i >> 2) + 2 * t + (i & 1) >= ks) x = -INFINITY;
        p[i] = x;
        a[(i >> 1) & 1][(i >> 2) & 1] = fmaxf(a[(i >> 1) & 1][(i >> 2) & 1], x);
    }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = fmaxf(a[r][0], a[r][1]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        base[r] = mx == -INFINITY ? 0.0f : mx * scale_log2;
        corr[r] = ex2_ftz(m[r] * scale_log2 - base[r]); /* m = −inf (first tile): 0 */
        m[r] = mx;
        a[r][0] = a[r][1] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 32; i++) {
        p[i] = ex2_ftz(fmaf(p[i], scale_log2, -base[(i >> 1) & 1]));
        a[(i >> 1) & 1][(i >> 2) & 1] += p[i];
    }
#pragma unroll
    for (int r = 0; r < 2; r++) rs[r] = a[r][0] + a[r][1];
}

/* CTA b of k_vsa_pair -> head and query tiles A, B (B = −1: none): prefix pairs first (dense rows,
 * ~9× the work), then video pairs, both within one head. */
__device__ __forceinline__ void vsa_pair_item(int64_t b, int64_t n, int64_t P, int H, int *h, int64_t *qa,
                                              int64_t *qb) {
    int64_t pp = (P + 1) / 2, vp = (n - P + 1) / 2, pre = (int64_t)H * pp;
    int64_t first, end;
    if (b < pre) {
        *h = (int)(b / pp);
        first = 2 * (b - (int64_t)*h * pp);
        end = P;
    } else {
        b -= pre;
        *h = (int)(b / vp);
        first = P + 2 * (b - (int64_t)*h * vp);
        end = n;
    }
    *qa = first;
    *qb = first + 1 < end ? first + 1 : -1;
}

/* Entry e of a key list as a tile index clamped into [0, n) (a corrupt list reads in bounds), or
 * INT32_MAX past its end. */
__device__ __forceinline__ int64_t pair_key(const key_list &k, int64_t e, int64_t n) {
    if (e >= k.count) return INT32_MAX;
    int64_t t = k.at(e);
    return t < 0 ? 0 : t >= n ? n - 1 : t;
}
#endif

__global__ void __launch_bounds__(288, 1)
    k_vsa_pair(__nv_bfloat16 *o, const __nv_bfloat16 *gate, const uint8_t *qimg, const uint8_t *kimg,
               const uint8_t *vimg, const float *oc, const int32_t *lists, const int32_t *slot, const int32_t *sizes,
               int64_t n, int64_t P, int64_t topk, int dense_all, int H, float scale_log2) {
#ifdef H3_HAVE_WGMMA
    extern __shared__ __align__(1024) uint8_t smem_vsa_pair[];
    uint32_t base = smem_u32(smem_vsa_pair), sbase = (base + 1023u) & ~1023u;
    uint32_t sQ = sbase, sK = sbase + 2 * kWgImg, sV = sK + kWgImg; /* stage s: sK/sV + s·2·kWgImg */
    /* barriers: q at +0, full[s] at +8 + 8s, empty[s] at +56 + 8s; slot info (tile, size, mask) at +128 */
    uint32_t bars = sbase + kPairTiles, qbar = bars, full = bars + 8, empty = bars + 8 + 8 * kPairStages;
    volatile int *info = (volatile int *)(smem_vsa_pair + (bars - base) + 128);
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int h;
    int64_t qa, qb;
    vsa_pair_item(blockIdx.x, n, P, H, &h, &qa, &qb);
    if (tid == 0) {
        mbar_init(qbar, 1);
        for (int s = 0; s < kPairStages; s++) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warp == 8) { /* producer: lane 0 merges the two lists and issues the copies */
        if (lane != 0) return;
        const uint8_t *kb = kimg + (int64_t)h * n * kWgImg, *vb = vimg + (int64_t)h * n * kWgImg;
        mbar_expect_tx(qbar, qb >= 0 ? 2 * kWgImg : kWgImg);
        bulk_load(sQ, qimg + ((int64_t)h * n + qa) * kWgImg, kWgImg, qbar);
        if (qb >= 0) bulk_load(sQ + kWgImg, qimg + ((int64_t)h * n + qb) * kWgImg, kWgImg, qbar);
        key_list la = vsa_keys(lists, n, P, topk, dense_all, h, qa), lb = {nullptr, 0};
        if (qb >= 0) lb = vsa_keys(lists, n, P, topk, dense_all, h, qb);
        int64_t ia = 0, ib = 0, ta = pair_key(la, 0, n), tb = pair_key(lb, 0, n);
        int st = 0;
        uint32_t use = 0;
        for (;;) {
            int64_t kt = ta < tb ? ta : tb;
            int mask = kt == INT32_MAX ? -1 : (ta == kt ? 1 : 0) | (tb == kt ? 2 : 0);
            if (use > 0) mbar_wait(empty + 8 * st, (use - 1) & 1);
            info[3 * st + 2] = mask;
            if (mask < 0) {
                mbar_arrive(full + 8 * st); /* the end: no copy, a plain arrive completes the phase */
                return;
            }
            info[3 * st] = (int)kt;
            info[3 * st + 1] = tile_size(sizes, kt, kRows);
            mbar_expect_tx(full + 8 * st, 2 * kWgImg);
            bulk_load(sK + st * 2 * kWgImg, kb + kt * kWgImg, kWgImg, full + 8 * st);
            bulk_load(sV + st * 2 * kWgImg, vb + kt * kWgImg, kWgImg, full + 8 * st);
            if (mask & 1) ta = pair_key(la, ++ia, n);
            if (mask & 2) tb = pair_key(lb, ++ib, n);
            if (++st == kPairStages) {
                st = 0;
                use++;
            }
        }
    }

    int wg = warp >> 2, w4 = warp & 3, g = lane >> 2, t = lane & 3;
    int64_t qt = wg == 0 ? qa : qb;
    int mine = 1 << wg;
    uint32_t sQw = sQ + wg * kWgImg;
    float oacc[64], s[32], p[32], corr[2], rs[2];
    uint32_t pa[4][4];
#pragma unroll
    for (int i = 0; i < 64; i++) oacc[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    mbar_wait(qbar, 0); /* completes for both warpgroups: the producer expects only the images it loads */
    int st = 0;
    uint32_t use = 0;
    for (;;) {
        mbar_wait(full + 8 * st, use & 1);
        int mask = info[3 * st + 2];
        if (mask < 0) break;
        if (mask & mine) { /* warpgroup-uniform: every thread read the same slot */
            int ks = info[3 * st + 1];
            wg_scores(s, sQw, sK + st * 2 * kWgImg);
            wg_wait0();
            wg_softmax_fast(s, p, ks, t, scale_log2, m, corr, rs);
            wg_pack(p, pa);
            wg_rescale(oacc, l, corr, rs);
            wg_pv(oacc, pa, sV + st * 2 * kWgImg);
            wg_wait0();
        }
        if (lane == 0) mbar_arrive(empty + 8 * st);
        if (++st == kPairStages) {
            st = 0;
            use++;
        }
    }
    if (qt < 0) return;

    wg_store_rows(o, gate, oc, slot, sizes, oacc, l, n, H, h, qt, w4, g, t);
#else
    __trap(); /* only launched on sm_90 devices, which load the sm_90a image */
#endif
}

template <bool PIPE>
int launch_consumer(const h3k_vsa_args *a, const h3k_vsa::vsa_layout &L, char *sc, const h3k_vsa::fine_args &f,
                    cudaStream_t stream) {
    cudaError_t e = cudaFuncSetAttribute(k_vsa_wgmma<PIPE>, cudaFuncAttributeMaxDynamicSharedMemorySize, kWgSmem);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_vsa_wgmma<PIPE>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 (int)cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess) return (int)e;
    unsigned grid = (unsigned)((int64_t)a->n_heads * a->num_tiles);
    k_vsa_wgmma<PIPE><<<grid, 160, kWgSmem, stream>>>((__nv_bfloat16 *)a->o, (const __nv_bfloat16 *)a->gate,
                                                (const uint8_t *)(sc + L.qimg), (const uint8_t *)(sc + L.kimg),
                                                (const uint8_t *)(sc + L.vimg), f.oc, f.lists, f.slot, a->tile_sizes,
                                                a->num_tiles, a->num_prefix_tiles, a->topk, f.dense_all, a->n_heads,
                                                f.scale_log2);
    return (int)cudaGetLastError();
}

int launch_pair(const h3k_vsa_args *a, const h3k_vsa::vsa_layout &L, char *sc, const h3k_vsa::fine_args &f,
                cudaStream_t stream) {
    cudaError_t e = cudaFuncSetAttribute(k_vsa_pair, cudaFuncAttributeMaxDynamicSharedMemorySize, kPairSmem);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_vsa_pair, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 (int)cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess) return (int)e;
    int64_t n = a->num_tiles, P = a->num_prefix_tiles;
    unsigned grid = (unsigned)((int64_t)a->n_heads * ((P + 1) / 2 + (n - P + 1) / 2));
    k_vsa_pair<<<grid, 288, kPairSmem, stream>>>((__nv_bfloat16 *)a->o, (const __nv_bfloat16 *)a->gate,
                                                 (const uint8_t *)(sc + L.qimg), (const uint8_t *)(sc + L.kimg),
                                                 (const uint8_t *)(sc + L.vimg), f.oc, f.lists, f.slot, a->tile_sizes,
                                                 n, P, a->topk, f.dense_all, a->n_heads, f.scale_log2);
    return (int)cudaGetLastError();
}

} /* namespace */

namespace h3k_vsa {

int launch_wgmma(const h3k_vsa_args *a, const vsa_layout &L, char *sc, const fine_args &f, cudaStream_t stream) {
    return a->pipelined == 2 ? launch_pair(a, L, sc, f, stream)
           : a->pipelined    ? launch_consumer<true>(a, L, sc, f, stream)
                             : launch_consumer<false>(a, L, sc, f, stream);
}

int wgmma_ctas_per_sm(const h3k_vsa_args *a) {
    if (a->pipelined == 2) return occupancy(k_vsa_pair, 288, kPairSmem);
    return a->pipelined ? occupancy(k_vsa_wgmma<true>, 160, kWgSmem) : occupancy(k_vsa_wgmma<false>, 160, kWgSmem);
}

int launch_probe(const h3k_vsa_args *a, const vsa_layout &L, int which, cudaStream_t stream) {
    char *sc = (char *)a->scratch;
    const uint8_t *qimg = (const uint8_t *)(sc + L.qimg), *kimg = (const uint8_t *)(sc + L.kimg),
                  *vimg = (const uint8_t *)(sc + L.vimg);
    const int32_t *lists = L.dense ? nullptr : (const int32_t *)(sc + L.lists);
    unsigned grid = (unsigned)((int64_t)a->n_heads * a->num_tiles);
    bool copies = which == H3K_VSA_PROBE_COPIES;
    const void *kernel = copies ? (const void *)k_vsa_copy_probe : (const void *)k_vsa_wgmma<false, true>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kWgSmem);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 (int)cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess) return (int)e;
    if (copies)
        k_vsa_copy_probe<<<grid, 160, kWgSmem, stream>>>(qimg, kimg, vimg, lists, a->tile_sizes, a->num_tiles,
                                                         a->num_prefix_tiles, a->topk, L.dense, a->n_heads);
    else
        k_vsa_wgmma<false, true><<<grid, 160, kWgSmem, stream>>>(
            (__nv_bfloat16 *)a->o, nullptr, qimg, kimg, vimg, nullptr, lists, (const int32_t *)(sc + L.slot),
            a->tile_sizes, a->num_tiles, a->num_prefix_tiles, a->topk, L.dense, a->n_heads,
            (float)(1.0 / sqrt((double)a->head_dim)) * kLog2e);
    return (int)cudaGetLastError();
}

} /* namespace h3k_vsa */
