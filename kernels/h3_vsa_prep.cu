/* h3_vsa_prep.cu - stages 1-5 of a VSA-H3 call (h3_vsa.cu says what each
 * does): the slot table, the tile means and images, the coarse scores, the
 * top-k selection with the key-tile lists, and the compressed branch. All
 * plain CUDA, the same kernels on every architecture. */
#include <math.h>
#include <stdint.h>

#include "kernels/h3_common.cuh" /* ld1_fp, warp_sum */
#include "kernels/h3_vsa_impl.cuh"

namespace {

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

unsigned blocks_for(int64_t n, int per) {
    int64_t b = (n + per - 1) / per;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

template <int DH>
int launch_prep_images(const h3k_vsa_args *a, const h3k_vsa::vsa_layout &L, char *sc, cudaStream_t stream) {
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

int launch_prep_pool(const h3k_vsa_args *a, const h3k_vsa::vsa_layout &L, char *sc, cudaStream_t stream) {
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

} /* namespace */

namespace h3k_vsa {

int launch_slot_table(const h3k_vsa_args *a, const vsa_layout &L, char *sc, cudaStream_t stream) {
    int64_t n = a->num_tiles, E = a->tile_elems;
    int32_t *slot = (int32_t *)(sc + L.slot);
    k_vsa_slot_clear<<<blocks_for(n * E, 256), 256, 0, stream>>>(slot, n * E);
    k_vsa_slot_fill<<<blocks_for(a->S > n ? a->S : n, 256), 256, 0, stream>>>(slot, a->untile_index, a->S,
                                                                              a->tile_sizes, n, (int)E, a->err);
    return (int)cudaGetLastError();
}

int launch_tile_means(const h3k_vsa_args *a, const vsa_layout &L, char *sc, cudaStream_t stream) {
    if (!L.images) return launch_prep_pool(a, L, sc, stream);
    return a->head_dim == 64 ? launch_prep_images<64>(a, L, sc, stream) : launch_prep_images<128>(a, L, sc, stream);
}

int launch_coarse(const h3k_vsa_args *a, const vsa_layout &L, char *sc, cudaStream_t stream) {
    int64_t n = a->num_tiles, P = a->num_prefix_tiles;
    cudaError_t e;
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
    return 0;
}

} /* namespace h3k_vsa */
