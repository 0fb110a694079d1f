/* h3_vsa_sm80.cu - the block-sparse kernels of VSA-H3 on the sm_80
 * instruction set (they run on Ampere, Ada and Hopper alike):
 *  - mma.sync (bf16/f16, head_dim 64/128, tiles of <= 64 rows): k_attn_mma's
 *    loop over a query tile's key-tile list, 4 warps × 16 query rows, two
 *    cp.async stages of the K and Vᵀ tile images.
 *  - generic: any float dtype, head_dim <= 256, any tile size; one warp per
 *    query row, keys read straight from the packed tensors.
 * Which one runs is h3_vsa.cu's choice. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "kernels/h3_common.cuh" /* ld1_fp, st1_fp, round_to_fp, warp_sum */
#include "kernels/h3_tc.cuh"     /* cp.async, ldmatrix, Mma, mma_scores, mma_softmax_step, mma_pv */
#include "kernels/h3_vsa_impl.cuh"

namespace {

/* ---- 6a. generic fine kernel --------------------------------------------------------------------- */

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
        mma_scores<T, kRows / 8, DH>(s, qf, lane, [&](int row, int ch) { return ktile + sw_rows(row, ch); });

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

template <typename T, int DH>
int launch_mma_dt(const h3k_vsa_args *a, const h3k_vsa::vsa_layout &L, char *sc, const h3k_vsa::fine_args &f,
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

} /* namespace */

namespace h3k_vsa {

int launch_mma(const h3k_vsa_args *a, const vsa_layout &L, char *sc, const fine_args &f, cudaStream_t stream) {
    if (a->dt == H3K_BF16)
        return a->head_dim == 64 ? launch_mma_dt<__nv_bfloat16, 64>(a, L, sc, f, stream)
                                 : launch_mma_dt<__nv_bfloat16, 128>(a, L, sc, f, stream);
    return a->head_dim == 64 ? launch_mma_dt<__half, 64>(a, L, sc, f, stream)
                             : launch_mma_dt<__half, 128>(a, L, sc, f, stream);
}

int mma_ctas_per_sm(const h3k_vsa_args *a) {
    if (a->dt == H3K_BF16)
        return a->head_dim == 64 ? occupancy(k_vsa_mma<__nv_bfloat16, 64>, 128, vsa_mma_smem<64>())
                                 : occupancy(k_vsa_mma<__nv_bfloat16, 128>, 128, vsa_mma_smem<128>());
    return a->head_dim == 64 ? occupancy(k_vsa_mma<__half, 64>, 128, vsa_mma_smem<64>())
                             : occupancy(k_vsa_mma<__half, 128>, 128, vsa_mma_smem<128>());
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

int generic_ctas_per_sm() { return occupancy(k_vsa_generic<4>, 32 * kGenWarps, 0); }

} /* namespace h3k_vsa */
