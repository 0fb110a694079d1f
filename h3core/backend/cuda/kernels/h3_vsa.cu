/* h3_vsa.cu - VSA-H3 block-sparse attention on the GPU (spec fasth3-vsa.md
 * §3). The op's contract is h3_op_vsa_attention (h3core/h3_backend.h); the
 * definition it is checked against is the CPU op (h3_backend_cpu_vsa.c and
 * the coarse stage of h3_vsa.c).
 *
 * One call, all on the stream, nothing read back by the host:
 *  1. slot table: slot[j·E + r] = packed row of row r of tile j, −1 for the
 *     pad slots (from untile_index; E = tile_elems).
 *  2. per (tile, head): the tile means of q, k, v, each channel summed in
 *     double in row order, rounded once and divided in float (h3_vsa_pool
 *     bit for bit); on the tensor-core paths also each tile's 64 × dh image
 *     in the exact shared-memory layout the fine kernels read (q and k row
 *     by row in 128-byte-swizzled boxes of 64 channels, v transposed), so a
 *     key tile is one contiguous copy wherever its rows lie in the packed
 *     sequence, and pad rows are zero.
 *  3. coarse scores q̄·k̄ᵀ/sqrt(dh) over all tiles, each dot product summed in
 *     double in channel order: h3_vsa_scores bit for bit. That is what makes
 *     the selection below exactly the CPU op's, near-ties included.
 *  4. per (head, query tile): the softmax of its score row for the
 *     compressed branch, and for a video query tile its top-k video key
 *     tiles by an exact radix select over order-preserving keys (descending,
 *     NaN first, ties to the lower index: the order h3_vsa_select sorts by),
 *     compacted in ascending order after the prefix tiles 0..P−1.
 *  5. the compressed branch O_c = softmax(S)·v̄ (fp32 tiled GEMM).
 *  6. the block-sparse kernel, one CTA per (head, query tile), the prefix
 *     query tiles (dense rows, n key tiles each, ~9× the work of a video
 *     tile) launched first so that they do not form the tail. It runs the
 *     dense kernels' inner loop (h3_attention.cu) over the tile's key list
 *     instead of over all keys, masks the pad keys of partial tiles by tile
 *     size (zero keys alone are not −inf), and writes
 *         o[row] = softmax(q·Kᵀ)·V + round(O_c[tile])·gate[row]
 *     straight to the packed rows (the un-permutation).
 * Paths, as for dense attention:
 *  - wgmma (sm_90a; bf16, head_dim 128, 64-row tiles): 160 threads, one
 *    consumer warpgroup (the 64 query rows) and one producer warp that
 *    moves Q and each listed key tile's K and Vᵀ images with bulk copies
 *    into a three-stage mbarrier ring; S = Q·Kᵀ is m64n64k16 from shared
 *    memory, O += P·V is m64n128k16 with P from registers, as in
 *    k_attn_wgmma2. 113 KB of shared memory, so two CTAs share an SM and
 *    one's softmax, prologue and epilogue run under the other's GEMMs.
 *  - mma.sync (sm_80+; bf16/f16, head_dim 64/128, tiles of <= 64 rows):
 *    k_attn_mma's loop: 4 warps × 16 query rows, 64-key tiles through two
 *    cp.async stages, ldmatrix from the swizzled images.
 *  - generic: any float dtype, head_dim <= 256, any tile size; one warp per
 *    query row, keys read straight from the packed tensors.
 * All paths compute the softmax in float32 with exp2 and a running max and
 * round P to the input dtype for P·V, as the dense kernels do. */
#include <math.h>
#include <stdint.h>

#include "backend/cuda/kernels/h3_common.cuh" /* kLog2e, ld1_fp, st1_fp, round_to_fp, warp_sum, ex2_ftz, aligned16 */
#include "backend/cuda/kernels/h3_kernels_vsa.h"
#include "backend/cuda/kernels/h3_tc.cuh"

namespace {

const int kRows = 64; /* rows (and keys) of a tile block on the tensor-core paths */

/* ---- small helpers ----------------------------------------------------------------- */

/* Valid rows of tile j, clamped to [0, E] (k_vsa_slot_fill reports a table
 * whose sizes fall outside 1..E; the clamp keeps every read in bounds). */
__device__ __forceinline__ int tile_size(const int32_t *sizes, int64_t j, int E) {
    int s = sizes[j];
    return s < 0 ? 0 : s > E ? E : s;
}

/* CTA b of a fine kernel -> (head, query tile): the H·P prefix query tiles
 * first, then the video ones. */
__device__ __forceinline__ void vsa_item(int64_t b, int64_t n, int64_t P, int H, int *h, int64_t *qt) {
    int64_t pre = (int64_t)H * P;
    if (b < pre) {
        *h = (int)(b / P);
        *qt = b - (int64_t)*h * P;
    } else {
        b -= pre;
        *h = (int)(b / (n - P));
        *qt = P + (b - (int64_t)*h * (n - P));
    }
}

/* The key tiles one query tile attends: all n for a dense row (a prefix
 * query tile, or every tile when topk covers all video tiles), else its
 * list of P + topk. */
struct key_list {
    const int32_t *list;
    int64_t count;
    __device__ __forceinline__ int64_t at(int64_t e) const { return list ? (int64_t)list[e] : e; }
};

__device__ __forceinline__ key_list vsa_keys(const int32_t *lists, int64_t n, int64_t P, int64_t topk, int dense_all,
                                             int h, int64_t qt) {
    key_list k;
    if (dense_all || qt < P) {
        k.list = nullptr;
        k.count = n;
    } else {
        k.list = lists + ((int64_t)h * (n - P) + (qt - P)) * (P + topk);
        k.count = P + topk;
    }
    return k;
}

/* Byte offset of 16-byte chunk `ch` (8 channels) of row `row` in a tile
 * image of 64 rows kept as dh/64 boxes of 64 rows × 128 bytes, each in the
 * 128-byte swizzle (chunk ^ row%8 inside every 1024-byte atom): the K-major
 * layout a SWIZZLE_128B wgmma descriptor describes, and one that ldmatrix
 * reads without bank conflicts. Q and K tiles are kept this way. */
__device__ __forceinline__ uint32_t sw_rows(int row, int ch) {
    return (uint32_t)((ch >> 3) * (kRows * 128) + row * 128 + (((ch & 7) ^ (row & 7)) << 4));
}
/* The transposed image (Vᵀ): row = channel d, its 64 keys = 8 chunks of one
 * swizzled 128-byte row. */
__device__ __forceinline__ uint32_t sw_t(int d, int kc) { return (uint32_t)(d * 128 + ((kc ^ (d & 7)) << 4)); }

template <int DH> __host__ __device__ constexpr int img_bytes() { return kRows * DH * 2; }

/* ---- 1. slot table ------------------------------------------------------------------ */

__global__ void k_vsa_slot_clear(int32_t *slot, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        slot[i] = -1;
}

/* slot[untile[i]] = i. A slot outside the tables or past its tile's size,
 * or a size outside 1..E, is a table error (the CPU op checks the same). */
__global__ void k_vsa_slot_fill(int32_t *slot, const int32_t *untile, int64_t S, const int32_t *sizes, int64_t n,
                                int E, int *err) {
    int64_t end = S > n ? S : n;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < end; i += (int64_t)gridDim.x * blockDim.x) {
        if (i < n && (sizes[i] < 1 || sizes[i] > E)) atomicOr(err, H3K_ERR_VSA_TABLE);
        if (i >= S) continue;
        int64_t u = untile[i];
        if (u < 0 || u >= n * E) {
            atomicOr(err, H3K_ERR_VSA_TABLE);
            continue;
        }
        int64_t j = u / E;
        if (u - j * E >= tile_size(sizes, j, E)) {
            atomicOr(err, H3K_ERR_VSA_TABLE);
            continue;
        }
        slot[u] = (int32_t)i;
    }
}

/* ---- 2. tile means and images ----------------------------------------------------------- */

/* Block (tile j, head h) of x [S, H·dh]. pooled (may be NULL):
 * pooled[h][j][c] = mean of the tile's valid rows, each channel summed in
 * double in row order. KIND 1: the tile's row-major image, KIND 2: its
 * transposed image, into img + (h·n + j)·img_bytes<DH>; these stage the
 * tile in shared memory once (16-byte loads) and pool from there. KIND 0
 * (the generic path: any dtype and head_dim) pools straight from x and
 * writes no image. */
template <int KIND, int DH>
__global__ void __launch_bounds__(128) k_vsa_prep(float *pooled, uint8_t *img, const void *x, int dt,
                                                  const int32_t *slot, const int32_t *sizes, int64_t n, int E, int H,
                                                  int dh, int *err) {
    int64_t j = blockIdx.x;
    int h = blockIdx.y, tid = threadIdx.x;
    int size = tile_size(sizes, j, E);
    int64_t ld = (int64_t)H * dh;
    const int32_t *rows = slot + j * E;
    if (tid == 0)
        for (int r = 0; r < size; r++)
            if (rows[r] < 0) atomicOr(err, H3K_ERR_VSA_TABLE); /* a valid slot no row maps to */
    if constexpr (KIND == 0) {
        if (!pooled) return;
        for (int c = tid; c < dh; c += blockDim.x) {
            double sum = 0;
#pragma unroll 4
            for (int r = 0; r < size; r++) {
                int row = rows[r];
                if (row >= 0) sum += (double)ld1_fp(x, dt, (int64_t)row * ld + (int64_t)h * dh + c);
            }
            pooled[((int64_t)h * n + j) * dh + c] = __fdiv_rn(__double2float_rn(sum), (float)size);
        }
    } else {
        constexpr int CH = DH / 8;
        __shared__ __align__(16) uint16_t tile[kRows][DH];
        const uint16_t *x16 = (const uint16_t *)x;
        for (int i = tid; i < kRows * CH; i += blockDim.x) {
            int r = i / CH, ch = i - r * CH;
            uint4 val = make_uint4(0, 0, 0, 0);
            int row = r < size ? rows[r] : -1;
            if (row >= 0) val = *(const uint4 *)(x16 + (int64_t)row * ld + (int64_t)h * DH + ch * 8);
            *(uint4 *)&tile[r][ch * 8] = val;
        }
        __syncthreads();
        if (pooled && tid < DH) {
            double sum = 0;
            if (dt == H3K_BF16)
                for (int r = 0; r < size; r++) sum += (double)__uint_as_float((uint32_t)tile[r][tid] << 16);
            else
                for (int r = 0; r < size; r++) sum += (double)__half2float(__ushort_as_half(tile[r][tid]));
            pooled[((int64_t)h * n + j) * DH + tid] = __fdiv_rn(__double2float_rn(sum), (float)size);
        }
        uint8_t *dst = img + ((int64_t)h * n + j) * img_bytes<DH>();
        if constexpr (KIND == 1) {
            for (int i = tid; i < kRows * CH; i += blockDim.x) {
                int r = i / CH, ch = i - r * CH;
                *(uint4 *)(dst + sw_rows(r, ch)) = *(const uint4 *)&tile[r][ch * 8];
            }
        } else {
            for (int i = tid; i < DH * 8; i += blockDim.x) {
                int d = i % DH, kc = i / DH;
                union {
                    uint4 v;
                    uint16_t e[8];
                } pk;
#pragma unroll
                for (int u = 0; u < 8; u++) pk.e[u] = tile[kc * 8 + u][d];
                *(uint4 *)(dst + sw_t(d, kc)) = pk.v;
            }
        }
    }
}

/* ---- 3. coarse scores ------------------------------------------------------------------------ */

/* scores[h][i][j] = (float)(Σ_c (double)qp[i][c]·kp[j][c]) / root with the
 * channels summed in order: h3_vsa_scores bit for bit (a float product is
 * exact in double, so the fused multiply-add rounds exactly as the CPU's
 * multiply-then-add does). 64 × 64 scores a block, 4 × 4 a thread. */
__global__ void __launch_bounds__(256) k_vsa_scores(float *scores, const float *qp, const float *kp, int64_t n, int dh,
                                                    float root) {
    __shared__ double qs[64][17], ks[64][17];
    int h = blockIdx.z, tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    int64_t i0 = (int64_t)blockIdx.y * 64, j0 = (int64_t)blockIdx.x * 64;
    const float *qh = qp + (int64_t)h * n * dh, *kh = kp + (int64_t)h * n * dh;
    double acc[4][4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 4; b++) acc[a][b] = 0.0;
    for (int c0 = 0; c0 < dh; c0 += 16) {
        for (int idx = tid; idx < 64 * 16; idx += 256) {
            int r = idx >> 4, cc = idx & 15;
            bool cin = c0 + cc < dh;
            qs[r][cc] = i0 + r < n && cin ? (double)qh[(i0 + r) * dh + c0 + cc] : 0.0;
            ks[r][cc] = j0 + r < n && cin ? (double)kh[(j0 + r) * dh + c0 + cc] : 0.0;
        }
        __syncthreads();
        int cn = dh - c0 < 16 ? dh - c0 : 16;
        for (int cc = 0; cc < cn; cc++) {
            double b[4];
#pragma unroll
            for (int bb = 0; bb < 4; bb++) b[bb] = ks[tx + 16 * bb][cc];
#pragma unroll
            for (int a = 0; a < 4; a++) {
                double q = qs[ty + 16 * a][cc];
#pragma unroll
                for (int bb = 0; bb < 4; bb++) acc[a][bb] = fma(q, b[bb], acc[a][bb]);
            }
        }
        __syncthreads();
    }
    float *sh = scores + (int64_t)h * n * n;
#pragma unroll
    for (int a = 0; a < 4; a++) {
        int64_t i = i0 + ty + 16 * a;
        if (i >= n) continue;
#pragma unroll
        for (int bb = 0; bb < 4; bb++) {
            int64_t j = j0 + tx + 16 * bb;
            if (j < n) sh[i * n + j] = __fdiv_rn(__double2float_rn(acc[a][bb]), root);
        }
    }
}

/* ---- 4. selection and the softmax of the compressed branch -------------------------------- */

/* A key whose unsigned order is the CPU's selection order: larger first,
 * every NaN above +inf and equal to the others, −0 equal to +0. */
__device__ __forceinline__ uint32_t order_key(float f) {
    if (f != f) return 0xFFFFFFFFu;
    uint32_t u = __float_as_uint(f);
    if (u == 0x80000000u) u = 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Reductions and scans over the 256 threads of a block; `red` holds 8
 * words. Each starts with a barrier so that `red` can be reused at once. */
__device__ __forceinline__ float block_max(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < 8; w++) v = fmaxf(v, red[w]);
    return v;
}

__device__ __forceinline__ float block_sum(float v, float *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = 0.0f;
    for (int w = 0; w < 8; w++) v += red[w];
    return v;
}

/* Exclusive prefix sum of v over the block in thread order; *total = the sum. */
__device__ __forceinline__ int block_scan(int v, int *red, int *total) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31) red[warp] = x;
    __syncthreads();
    int before = 0, all = 0;
    for (int w = 0; w < 8; w++) {
        if (w < warp) before += red[w];
        all += red[w];
    }
    *total = all;
    return before + x - v;
}

/* Block (query tile r, head h), 256 threads, over score row s[h][r][0..n).
 * w != NULL: w[h][r][:] = softmax of the row (all tiles). lists != NULL and
 * r >= P: the row's list [0..P) ++ top-k video tiles ascending. The k-th
 * largest key T is found by a radix select, 8 bits a pass; a tile is kept
 * when its key is above T, or equal to T and among the first (topk − #above)
 * such tiles in index order: exactly the first topk of a stable descending
 * sort. With dynamic shared memory of n floats the row is read once into it
 * (the passes then run on shared memory), else from global memory. */
__global__ void __launch_bounds__(256) k_vsa_select(float *w, int32_t *lists, const float *s, int64_t n, int64_t P,
                                                    int64_t topk, int cached, int *err) {
    __shared__ int hist[256];
    __shared__ int ired[8];
    __shared__ float fred[8];
    __shared__ uint32_t sh_prefix;
    __shared__ int sh_want;
    extern __shared__ float srow[];
    int64_t r = blockIdx.x;
    int h = blockIdx.y, tid = threadIdx.x;
    const float *row = s + ((int64_t)h * n + r) * n;
    if (cached) {
        for (int64_t j = tid; j < n; j += 256) srow[j] = row[j];
        __syncthreads();
        row = srow;
    }
    if (lists && r >= P) {
        int32_t *out = lists + ((int64_t)h * (n - P) + (r - P)) * (P + topk);
        for (int64_t j = tid; j < P; j += 256) out[j] = (int32_t)j;
        uint32_t prefix = 0, mask = 0;
        int want = (int)topk;
        for (int shift = 24; shift >= 0; shift -= 8) {
            hist[tid] = 0;
            __syncthreads();
            for (int64_t j = P + tid; j < n; j += 256) {
                uint32_t key = order_key(row[j]);
                if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255], 1);
            }
            __syncthreads();
            if (tid == 0) {
                int cum = 0, b = 255;
                for (; b > 0; b--) {
                    if (cum + hist[b] >= want) break;
                    cum += hist[b];
                }
                sh_prefix = prefix | ((uint32_t)b << shift);
                sh_want = want - cum;
            }
            __syncthreads();
            prefix = sh_prefix;
            want = sh_want;
            mask |= 0xFFu << shift;
        }
        /* each thread scans a contiguous range, so that the scans give index order */
        const uint32_t T = prefix;
        int64_t nv = n - P, per = (nv + 255) / 256, lo = P + tid * per, hi = lo + per < n ? lo + per : n;
        int eq = 0, total = 0;
        for (int64_t j = lo; j < hi; j++) eq += order_key(row[j]) == T;
        int eq_before = block_scan(eq, ired, &total);
        int take = 0, e2 = eq_before;
        for (int64_t j = lo; j < hi; j++) {
            uint32_t key = order_key(row[j]);
            if (key > T) take++;
            else if (key == T) take += e2++ < want;
        }
        int pos = block_scan(take, ired, &total);
        e2 = eq_before;
        for (int64_t j = lo; j < hi; j++) {
            uint32_t key = order_key(row[j]);
            bool kept = key > T || (key == T && e2++ < want);
            if (kept && pos < topk) out[P + pos++] = (int32_t)j;
        }
        if (total != topk) { /* cannot happen; keep the list in bounds and say so */
            if (tid == 0) atomicOr(err, H3K_ERR_VSA_SELECT);
            for (int64_t i = total + tid; i < topk; i += 256) out[P + i] = (int32_t)P;
        }
    }
    if (w) {
        float m = -INFINITY;
        for (int64_t j = tid; j < n; j += 256) m = fmaxf(m, row[j]);
        m = block_max(m, fred);
        float sum = 0.0f;
        for (int64_t j = tid; j < n; j += 256) sum += expf(row[j] - m);
        sum = block_sum(sum, fred);
        float inv = 1.0f / sum, *wr = w + ((int64_t)h * n + r) * n;
        for (int64_t j = tid; j < n; j += 256) wr[j] = expf(row[j] - m) * inv;
    }
}

/* ---- 5. compressed branch --------------------------------------------------------------------- */

/* oc[h][i][c] = Σ_j w[h][i][j]·vp[h][j][c]: 64 tiles × 64 channels a block. */
__global__ void __launch_bounds__(256) k_vsa_compress(float *oc, const float *w, const float *vp, int64_t n, int dh) {
    __shared__ float ws[64][17], vs[16][65];
    int h = blockIdx.z, tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    int64_t i0 = (int64_t)blockIdx.y * 64;
    int c0 = blockIdx.x * 64;
    const float *wh = w + (int64_t)h * n * n, *vh = vp + (int64_t)h * n * dh;
    float acc[4][4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 4; b++) acc[a][b] = 0.0f;
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        for (int idx = tid; idx < 64 * 16; idx += 256) {
            int r = idx >> 4, jj = idx & 15;
            ws[r][jj] = i0 + r < n && j0 + jj < n ? wh[(i0 + r) * n + j0 + jj] : 0.0f;
            int vj = idx >> 6, vc = idx & 63;
            vs[vj][vc] = j0 + vj < n && c0 + vc < dh ? vh[(j0 + vj) * dh + c0 + vc] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int jj = 0; jj < 16; jj++) {
            float b[4];
#pragma unroll
            for (int bb = 0; bb < 4; bb++) b[bb] = vs[jj][tx + 16 * bb];
#pragma unroll
            for (int a = 0; a < 4; a++) {
                float x = ws[ty + 16 * a][jj];
#pragma unroll
                for (int bb = 0; bb < 4; bb++) acc[a][bb] = fmaf(x, b[bb], acc[a][bb]);
            }
        }
        __syncthreads();
    }
    float *oh = oc + (int64_t)h * n * dh;
#pragma unroll
    for (int a = 0; a < 4; a++) {
        int64_t i = i0 + ty + 16 * a;
        if (i >= n) continue;
#pragma unroll
        for (int bb = 0; bb < 4; bb++) {
            int c = c0 + tx + 16 * bb;
            if (c < dh) oh[i * dh + c] = acc[a][bb];
        }
    }
}

/* ---- 6a. generic fine kernel --------------------------------------------------------------------- */

const int kGenWarps = 8;

/* One warp per padded query slot (blockIdx.x·8 + warp), head blockIdx.y. */
template <int DPL>
__global__ void __launch_bounds__(256)
    k_vsa_generic(void *o, const void *q, const void *k, const void *v, const void *gate, int dt, const float *oc,
                  const int32_t *lists, const int32_t *slot, const int32_t *sizes, int64_t n, int64_t P, int64_t topk,
                  int dense_all, int E, int H, int hd, float scale_log2) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, h = blockIdx.y;
    int64_t sidx = (int64_t)blockIdx.x * kGenWarps + warp;
    if (sidx >= n * E) return;
    int64_t qt = sidx / E;
    if (sidx - qt * E >= tile_size(sizes, qt, E)) return;
    int row = slot[sidx];
    if (row < 0) return;
    int64_t ld = (int64_t)H * hd, hoff = (int64_t)h * hd;
    float qv[DPL], acc[DPL];
#pragma unroll
    for (int e = 0; e < DPL; e++) {
        int d = lane + 32 * e;
        qv[e] = d < hd ? ld1_fp(q, dt, row * ld + hoff + d) * scale_log2 : 0.0f;
        acc[e] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    key_list kl = vsa_keys(lists, n, P, topk, dense_all, h, qt);
    for (int64_t it = 0; it < kl.count; it++) {
        int64_t kt = kl.at(it);
        int ks = tile_size(sizes, kt, E);
        for (int rr = 0; rr < ks; rr++) {
            int krow = slot[kt * E + rr];
            if (krow < 0) continue;
            float s = 0.0f;
#pragma unroll
            for (int e = 0; e < DPL; e++) {
                int d = lane + 32 * e;
                if (d < hd) s += qv[e] * ld1_fp(k, dt, krow * ld + hoff + d);
            }
            s = warp_sum(s);
            float mn = fmaxf(m, s);
            float corr = exp2f(m - mn), p = exp2f(s - mn);
            l = l * corr + p;
#pragma unroll
            for (int e = 0; e < DPL; e++) {
                int d = lane + 32 * e;
                if (d < hd) acc[e] = acc[e] * corr + p * ld1_fp(v, dt, krow * ld + hoff + d);
            }
            m = mn;
        }
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const float *ocr = oc ? oc + ((int64_t)h * n + qt) * hd : nullptr;
#pragma unroll
    for (int e = 0; e < DPL; e++) {
        int d = lane + 32 * e;
        if (d >= hd) continue;
        float val = acc[e] * inv;
        /* the compressed branch is cast to the output dtype before it meets the gate, as in the reference */
        if (gate) val += round_to_fp(dt, ocr[d]) * ld1_fp(gate, dt, row * ld + hoff + d);
        st1_fp(o, dt, row * ld + hoff + d, val);
    }
}

/* ---- 6b. mma.sync fine kernel -------------------------------------------------------------------- */

/* cp.async of a whole tile image (IMG bytes) by the 128 threads. */
template <int IMG> __device__ __forceinline__ void copy_image(uint32_t dst, const uint8_t *src, int tid) {
#pragma unroll
    for (int i = tid; i < IMG / 16; i += 128) cp_async16(dst + i * 16, src + (int64_t)i * 16, true);
}

template <int DH> constexpr int vsa_mma_smem() { return 5 * img_bytes<DH>(); }

/* k_attn_mma's loop over a key-tile list: 4 warps × 16 rows of the query
 * tile, two cp.async stages of K and Vᵀ images, ldmatrix from the swizzled
 * images (P·V reads Vᵀ rows as its B fragments, the way Q·Kᵀ reads K). */
template <typename T, int DH>
__global__ void __launch_bounds__(128)
    k_vsa_mma(T *o, const T *gate, const uint8_t *qimg, const uint8_t *kimg, const uint8_t *vimg, const float *oc,
              const int32_t *lists, const int32_t *slot, const int32_t *sizes, int64_t n, int64_t P, int64_t topk,
              int dense_all, int E, int H, float scale_log2) {
    constexpr int IMG = img_bytes<DH>();
    extern __shared__ __align__(128) uint8_t smem_vsa_mma[];
    uint32_t sq = smem_u32(smem_vsa_mma), sk = sq + IMG, sv = sk + 2 * IMG;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    int h;
    int64_t qt;
    vsa_item(blockIdx.x, n, P, H, &h, &qt);
    key_list kl = vsa_keys(lists, n, P, topk, dense_all, h, qt);
    const uint8_t *kbase = kimg + (int64_t)h * n * IMG, *vbase = vimg + (int64_t)h * n * IMG;

    /* key tiles are looked up one iteration ahead, so the list read is not on the critical path */
    int64_t kt = kl.at(0), kt_next = kl.count > 1 ? kl.at(1) : 0;
    copy_image<IMG>(sq, qimg + ((int64_t)h * n + qt) * IMG, tid);
    copy_image<IMG>(sk, kbase + kt * IMG, tid);
    copy_image<IMG>(sv, vbase + kt * IMG, tid);
    cp_async_commit();

    uint32_t qf[DH / 16][4];
    float oacc[DH / 8][4];
#pragma unroll
    for (int d = 0; d < DH / 8; d++) oacc[d][0] = oacc[d][1] = oacc[d][2] = oacc[d][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    for (int64_t it = 0; it < kl.count; it++) {
        int st = (int)(it & 1);
        int64_t kt_after = it + 2 < kl.count ? kl.at(it + 2) : 0;
        int ks = tile_size(sizes, kt, E);
        if (it + 1 < kl.count) {
            copy_image<IMG>(sk + (st ^ 1) * IMG, kbase + kt_next * IMG, tid);
            copy_image<IMG>(sv + (st ^ 1) * IMG, vbase + kt_next * IMG, tid);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (it == 0) {
#pragma unroll
            for (int kk = 0; kk < DH / 16; kk++)
                ldmatrix_x4(qf[kk], sq + sw_rows(warp * 16 + (lane & 15), 2 * kk + (lane >> 4)));
        }
        uint32_t ktile = sk + st * IMG, vtile = sv + st * IMG;

        float s[kRows / 8][4];
#pragma unroll
        for (int nb = 0; nb < kRows / 8; nb++) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < DH / 16; kk++) {
#pragma unroll
            for (int nb = 0; nb < kRows / 8; nb += 2) {
                uint32_t b[4];
                int row = nb * 8 + (lane & 7) + ((lane >> 4) << 3), ch = 2 * kk + ((lane >> 3) & 1);
                ldmatrix_x4(b, ktile + sw_rows(row, ch));
                Mma<T>::run(s[nb], qf[kk], b[0], b[1]);
                Mma<T>::run(s[nb + 1], qf[kk], b[2], b[3]);
            }
        }

        /* online softmax over this tile; keys past the tile's size are pads */
        bool mask = ks < kRows;
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int nb = 0; nb < kRows / 8; nb++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = s[nb][e] * scale_log2;
                if (mask && nb * 8 + 2 * t + (e & 1) >= ks) x = -INFINITY;
                s[nb][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        }
        mma_softmax_step<kRows / 8, DH>(s, mx, m, l, oacc);

        /* O += P·V, P from the S accumulators, B fragments from Vᵀ rows */
        mma_pv<T, kRows / 8, DH>(s, oacc, [&](int kk, int d, uint32_t b[4]) {
            int row = d * 8 + (lane & 7) + ((lane >> 4) << 3), ch = 2 * kk + ((lane >> 3) & 1);
            ldmatrix_x4(b, vtile + sw_t(row, ch));
        });
        __syncthreads(); /* the stage just read is refilled next iteration */
        kt = kt_next;
        kt_next = kt_after;
    }

    float inv[2];
    softmax_row_inverse(l, inv);
    int qsize = tile_size(sizes, qt, E);
    const float *ocr = oc ? oc + ((int64_t)h * n + qt) * DH : nullptr;
    int64_t ld = (int64_t)H * DH;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int rb = warp * 16 + g + 8 * r;
        if (rb >= qsize) continue;
        int row = slot[qt * E + rb];
        if (row < 0) continue;
        T *orow = o + (int64_t)row * ld + (int64_t)h * DH;
        const T *grow = gate ? gate + (int64_t)row * ld + (int64_t)h * DH : nullptr;
#pragma unroll
        for (int d = 0; d < DH / 8; d++) {
            int col = d * 8 + 2 * t;
            float v0 = oacc[d][2 * r] * inv[r], v1 = oacc[d][2 * r + 1] * inv[r];
            if (grow) {
                float2 c = *(const float2 *)(ocr + col);
                float2 gv = Mma<T>::unpack(*(const uint32_t *)(grow + col));
                v0 += Mma<T>::round(c.x) * gv.x;
                v1 += Mma<T>::round(c.y) * gv.y;
            }
            *(uint32_t *)(orow + col) = Mma<T>::pack(v0, v1);
        }
    }
}

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
        wgmma_ss_n64(s, wg_desc(sQ + off), wg_desc(ktile + off), kk > 0);
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
    for (int kk = 0; kk < 4; kk++) wgmma_rs(oacc, pa[kk], wg_desc(vtile + kk * 32), 1);
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

/* ============================ host side ============================ */

inline size_t up256(size_t x) { return (x + 255) & ~(size_t)255; }

/* What a call computes and where it keeps it in the scratch. */
struct vsa_layout {
    int path;
    bool dense, gate, scores, images;
    size_t slot, qp, kp, vp, s, w, oc, lists, qimg, kimg, vimg, total;
};

vsa_layout layout_of(const h3k_vsa_args *a) {
    vsa_layout L = {};
    size_t n = (size_t)a->num_tiles, P = (size_t)a->num_prefix_tiles, H = (size_t)a->n_heads,
           dh = (size_t)a->head_dim;
    L.path = h3k_vsa_path(a);
    L.dense = a->topk >= a->num_tiles - a->num_prefix_tiles;
    L.gate = a->gate != nullptr;
    L.scores = !L.dense || L.gate;
    L.images = L.path != H3K_ATTN_GENERIC;
    size_t off = 0;
    auto take = [&off](size_t bytes) {
        size_t at = off;
        off += up256(bytes);
        return at;
    };
    L.slot = take(n * (size_t)a->tile_elems * 4);
    if (L.scores) {
        L.qp = take(H * n * dh * 4);
        L.kp = take(H * n * dh * 4);
        L.s = take(H * n * n * 4);
    }
    if (L.gate) {
        L.vp = take(H * n * dh * 4);
        L.w = take(H * n * n * 4);
        L.oc = take(H * n * dh * 4);
    }
    if (!L.dense) L.lists = take(H * (n - P) * (P + (size_t)a->topk) * 4);
    if (L.images) {
        size_t img = H * n * kRows * dh * 2;
        L.qimg = take(img);
        L.kimg = take(img);
        L.vimg = take(img);
    }
    L.total = off;
    return L;
}

unsigned blocks_for(int64_t n, int per) {
    int64_t b = (n + per - 1) / per;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

template <int DH>
int launch_prep_images(const h3k_vsa_args *a, const vsa_layout &L, char *sc, cudaStream_t stream) {
    dim3 grid((unsigned)a->num_tiles, (unsigned)a->n_heads);
    int64_t n = a->num_tiles;
    const int32_t *slot = (const int32_t *)(sc + L.slot);
    k_vsa_prep<1, DH><<<grid, 128, 0, stream>>>(L.scores ? (float *)(sc + L.qp) : nullptr, (uint8_t *)(sc + L.qimg),
                                                a->q, a->dt, slot, a->tile_sizes, n, a->tile_elems, a->n_heads,
                                                a->head_dim, a->err);
    k_vsa_prep<1, DH><<<grid, 128, 0, stream>>>(L.scores ? (float *)(sc + L.kp) : nullptr, (uint8_t *)(sc + L.kimg),
                                                a->k, a->dt, slot, a->tile_sizes, n, a->tile_elems, a->n_heads,
                                                a->head_dim, a->err);
    k_vsa_prep<2, DH><<<grid, 128, 0, stream>>>(L.gate ? (float *)(sc + L.vp) : nullptr, (uint8_t *)(sc + L.vimg),
                                                a->v, a->dt, slot, a->tile_sizes, n, a->tile_elems, a->n_heads,
                                                a->head_dim, a->err);
    return (int)cudaGetLastError();
}

int launch_prep_pool(const h3k_vsa_args *a, const vsa_layout &L, char *sc, cudaStream_t stream) {
    dim3 grid((unsigned)a->num_tiles, (unsigned)a->n_heads);
    const void *x[3] = {a->q, a->k, a->v};
    float *dst[3] = {L.scores ? (float *)(sc + L.qp) : nullptr, L.scores ? (float *)(sc + L.kp) : nullptr,
                     L.gate ? (float *)(sc + L.vp) : nullptr};
    for (int i = 0; i < 3; i++)
        if (dst[i])
            k_vsa_prep<0, 0><<<grid, 128, 0, stream>>>(dst[i], nullptr, x[i], a->dt, (const int32_t *)(sc + L.slot),
                                                       a->tile_sizes, a->num_tiles, a->tile_elems, a->n_heads,
                                                       a->head_dim, a->err);
    return (int)cudaGetLastError();
}

/* Fine-kernel arguments shared by the three paths. */
struct fine_args {
    const float *oc;
    const int32_t *lists, *slot;
    int dense_all;
    float scale_log2;
};

template <typename T, int DH> int launch_mma(const h3k_vsa_args *a, const vsa_layout &L, char *sc, const fine_args &f,
                                             cudaStream_t stream) {
    const int smem = vsa_mma_smem<DH>();
    cudaError_t e = cudaFuncSetAttribute(k_vsa_mma<T, DH>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_vsa_mma<T, DH>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 (int)cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess) return (int)e;
    unsigned grid = (unsigned)((int64_t)a->n_heads * a->num_tiles);
    k_vsa_mma<T, DH><<<grid, 128, smem, stream>>>((T *)a->o, (const T *)a->gate, (const uint8_t *)(sc + L.qimg),
                                                  (const uint8_t *)(sc + L.kimg), (const uint8_t *)(sc + L.vimg), f.oc,
                                                  f.lists, f.slot, a->tile_sizes, a->num_tiles, a->num_prefix_tiles,
                                                  a->topk, f.dense_all, a->tile_elems, a->n_heads, f.scale_log2);
    return (int)cudaGetLastError();
}

template <bool PIPE>
int launch_wgmma(const h3k_vsa_args *a, const vsa_layout &L, char *sc, const fine_args &f, cudaStream_t stream) {
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

int launch_pair(const h3k_vsa_args *a, const vsa_layout &L, char *sc, const fine_args &f, cudaStream_t stream) {
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

int launch_generic(const h3k_vsa_args *a, const fine_args &f, cudaStream_t stream) {
    int64_t slots = a->num_tiles * a->tile_elems;
    dim3 grid((unsigned)((slots + kGenWarps - 1) / kGenWarps), (unsigned)a->n_heads);
#define H3_VSA_GEN(DPL)                                                                                              \
    k_vsa_generic<DPL><<<grid, 32 * kGenWarps, 0, stream>>>(a->o, a->q, a->k, a->v, a->gate, a->dt, f.oc, f.lists,    \
                                                            f.slot, a->tile_sizes, a->num_tiles, a->num_prefix_tiles, \
                                                            a->topk, f.dense_all, a->tile_elems, a->n_heads,          \
                                                            a->head_dim, f.scale_log2)
    if (a->head_dim <= 32) H3_VSA_GEN(1);
    else if (a->head_dim <= 64) H3_VSA_GEN(2);
    else if (a->head_dim <= 128) H3_VSA_GEN(4);
    else H3_VSA_GEN(8);
#undef H3_VSA_GEN
    return (int)cudaGetLastError();
}

} /* namespace */

extern "C" int h3k_vsa_path(const h3k_vsa_args *a) {
    bool tc = (a->dt == H3K_BF16 || a->dt == H3K_F16) && (a->head_dim == 64 || a->head_dim == 128) &&
              a->tile_elems <= kRows && a->sm >= 80 && aligned16(a->q) && aligned16(a->k) && aligned16(a->v) &&
              aligned16(a->o) && aligned16(a->gate);
    bool wg = tc && a->dt == H3K_BF16 && a->head_dim == 128 && a->tile_elems == kRows && a->sm == 90;
    switch (a->path) {
    case H3K_ATTN_GENERIC: return H3K_ATTN_GENERIC;
    case H3K_ATTN_MMA: return tc ? H3K_ATTN_MMA : H3K_ATTN_GENERIC;
    default: return wg ? H3K_ATTN_WGMMA : tc ? H3K_ATTN_MMA : H3K_ATTN_GENERIC;
    }
}

/* A probe of the Hopper fine kernel (H3K_VSA_PROBE_*) over what the last
 * call with these arguments left in the scratch (images, lists). */
extern "C" int h3k_vsa_probe(const h3k_vsa_args *a, int which, cudaStream_t stream) {
    if (h3k_vsa_path(a) != H3K_ATTN_WGMMA || !a->scratch) return (int)cudaErrorNotSupported;
    if (which != H3K_VSA_PROBE_COPIES && which != H3K_VSA_PROBE_MATH) return (int)cudaErrorInvalidValue;
    vsa_layout L = layout_of(a);
    if (a->scratch_size < L.total) return (int)cudaErrorInvalidValue;
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

extern "C" size_t h3k_vsa_scratch(const h3k_vsa_args *a) { return layout_of(a).total; }

extern "C" void h3k_vsa_results(const h3k_vsa_args *a, const int32_t **lists, const float **scores) {
    vsa_layout L = layout_of(a);
    char *sc = (char *)a->scratch;
    if (lists) *lists = sc && !L.dense ? (const int32_t *)(sc + L.lists) : nullptr;
    if (scores) *scores = sc && L.scores ? (const float *)(sc + L.s) : nullptr;
}

extern "C" int h3k_vsa_attention(const h3k_vsa_args *a, cudaStream_t stream) {
    int64_t n = a->num_tiles, P = a->num_prefix_tiles, E = a->tile_elems;
    if (a->S <= 0) return 0;
    if (n < 1 || P < 0 || P > n || E < 1 || a->n_heads < 1 || a->n_heads > 65535 || a->head_dim < 1 ||
        a->head_dim > 256 || (n > P && a->topk < 1) || n * E > 0x7fffffff || a->S > 0x7fffffff ||
        (int64_t)a->n_heads * n > 0x7fffffff || n * E / kGenWarps + 1 > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    vsa_layout L = layout_of(a);
    if (!a->scratch || a->scratch_size < L.total) return (int)cudaErrorInvalidValue;
    char *sc = (char *)a->scratch;
    int32_t *slot = (int32_t *)(sc + L.slot);
    bool timed = a->events[0] && a->events[1] && a->events[2] && a->events[3];
    cudaError_t e;

    if (timed && (e = cudaEventRecord(a->events[0], stream)) != cudaSuccess) return (int)e;
    k_vsa_slot_clear<<<blocks_for(n * E, 256), 256, 0, stream>>>(slot, n * E);
    k_vsa_slot_fill<<<blocks_for(a->S > n ? a->S : n, 256), 256, 0, stream>>>(slot, a->untile_index, a->S,
                                                                              a->tile_sizes, n, (int)E, a->err);
    if ((e = cudaGetLastError()) != cudaSuccess) return (int)e;

    int rc = 0;
    if (L.images) rc = a->head_dim == 64 ? launch_prep_images<64>(a, L, sc, stream) : launch_prep_images<128>(a, L, sc, stream);
    else rc = launch_prep_pool(a, L, sc, stream);
    if (rc) return rc;
    if (timed && (e = cudaEventRecord(a->events[1], stream)) != cudaSuccess) return (int)e;

    if (L.scores) {
        dim3 sgrid((unsigned)((n + 63) / 64), (unsigned)((n + 63) / 64), (unsigned)a->n_heads);
        k_vsa_scores<<<sgrid, 256, 0, stream>>>((float *)(sc + L.s), (const float *)(sc + L.qp),
                                                (const float *)(sc + L.kp), n, a->head_dim,
                                                (float)sqrt((double)a->head_dim));
        int cached = n <= 8192; /* the row in shared memory: at most 32 KB */
        k_vsa_select<<<dim3((unsigned)n, (unsigned)a->n_heads), 256, cached ? (size_t)n * 4 : 0, stream>>>(
            L.gate ? (float *)(sc + L.w) : nullptr, L.dense ? nullptr : (int32_t *)(sc + L.lists),
            (const float *)(sc + L.s), n, P, a->topk, cached, a->err);
        if ((e = cudaGetLastError()) != cudaSuccess) return (int)e;
    }
    if (L.gate) {
        dim3 cgrid((unsigned)((a->head_dim + 63) / 64), (unsigned)((n + 63) / 64), (unsigned)a->n_heads);
        k_vsa_compress<<<cgrid, 256, 0, stream>>>((float *)(sc + L.oc), (const float *)(sc + L.w),
                                                  (const float *)(sc + L.vp), n, a->head_dim);
        if ((e = cudaGetLastError()) != cudaSuccess) return (int)e;
    }

    if (timed && (e = cudaEventRecord(a->events[2], stream)) != cudaSuccess) return (int)e;

    fine_args f;
    f.oc = L.gate ? (const float *)(sc + L.oc) : nullptr;
    f.lists = L.dense ? nullptr : (const int32_t *)(sc + L.lists);
    f.slot = slot;
    f.dense_all = L.dense;
    f.scale_log2 = (float)(1.0 / sqrt((double)a->head_dim)) * kLog2e;
    switch (L.path) {
    case H3K_ATTN_WGMMA:
        rc = a->pipelined == 2 ? launch_pair(a, L, sc, f, stream)
             : a->pipelined    ? launch_wgmma<true>(a, L, sc, f, stream)
                               : launch_wgmma<false>(a, L, sc, f, stream);
        break;
    case H3K_ATTN_MMA:
        if (a->dt == H3K_BF16)
            rc = a->head_dim == 64 ? launch_mma<__nv_bfloat16, 64>(a, L, sc, f, stream)
                                   : launch_mma<__nv_bfloat16, 128>(a, L, sc, f, stream);
        else
            rc = a->head_dim == 64 ? launch_mma<__half, 64>(a, L, sc, f, stream)
                                   : launch_mma<__half, 128>(a, L, sc, f, stream);
        break;
    default: rc = launch_generic(a, f, stream); break;
    }
    if (rc == 0 && timed) rc = (int)cudaEventRecord(a->events[3], stream);
    return rc;
}

namespace {
template <typename K> int occupancy(K kernel, int threads, int smem) {
    int blocks = 0;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 (int)cudaSharedmemCarveoutMaxShared);
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, (size_t)smem);
    if (e != cudaSuccess) cudaGetLastError();
    return e == cudaSuccess ? blocks : -1;
}
} /* namespace */

extern "C" int h3k_vsa_ctas_per_sm(const h3k_vsa_args *a) {
    switch (h3k_vsa_path(a)) {
    case H3K_ATTN_WGMMA:
        if (a->pipelined == 2) return occupancy(k_vsa_pair, 288, kPairSmem);
        return a->pipelined ? occupancy(k_vsa_wgmma<true>, 160, kWgSmem) : occupancy(k_vsa_wgmma<false>, 160, kWgSmem);
    case H3K_ATTN_MMA:
        if (a->dt == H3K_BF16)
            return a->head_dim == 64 ? occupancy(k_vsa_mma<__nv_bfloat16, 64>, 128, vsa_mma_smem<64>())
                                     : occupancy(k_vsa_mma<__nv_bfloat16, 128>, 128, vsa_mma_smem<128>());
        return a->head_dim == 64 ? occupancy(k_vsa_mma<__half, 64>, 128, vsa_mma_smem<64>())
                                 : occupancy(k_vsa_mma<__half, 128>, 128, vsa_mma_smem<128>());
    default: return occupancy(k_vsa_generic<4>, 32 * kGenWarps, 0);
    }
}
