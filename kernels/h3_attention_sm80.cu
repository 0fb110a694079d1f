/* h3_attention_sm80.cu - the attention kernels on the sm_80 instruction
 * set (they run on Ampere, Ada and Hopper alike):
 *  - mma.sync: bf16/f16, head_dim 64 or 128, causal or not.
 *    FlashAttention-2 style: 4 warps × 16 query rows, 64-key tiles, ldmatrix
 *    from XOR-swizzled shared memory, online softmax in registers.
 *  - generic: any float dtype, head_dim <= 256 (the tiny test models, the
 *    audio VAE's 256-wide heads, the vision tower's 72). One warp per query
 *    row, keys staged through shared memory in float32.
 * Which one runs is h3_attention.cu's choice. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "kernels/h3_attention_impl.cuh" /* kGenWarps, the launchers */
#include "kernels/h3_common.cuh"         /* kLog2e, ld1_fp, st1_fp, warp_sum */
#include "kernels/h3_tc.cuh"             /* smem_u32, cp.async, ldmatrix, Mma, mma_scores, mma_softmax_step, mma_pv */

namespace {

/* ============================ generic path ============================ */

const int kGenKeys = 16; /* keys staged per step */

template <int DPL> /* head-dim elements per lane: head_dim <= 32·DPL */
__global__ void __launch_bounds__(256) k_attn_generic(void *o, const void *q, const void *k, const void *v, int dt,
                                                      int64_t Sq, int64_t Skv, int H, int Hkv, int hd, int causal,
                                                      float scale_log2) {
    __shared__ float ks[kGenKeys][32 * DPL];
    __shared__ float vs[kGenKeys][32 * DPL];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int h = blockIdx.y, kh = h / (H / Hkv);
    int64_t i = (int64_t)blockIdx.x * kGenWarps + warp;
    bool active = i < Sq;
    int64_t ldq = (int64_t)H * hd, ldk = (int64_t)Hkv * hd;
    float qv[DPL], acc[DPL];
#pragma unroll
    for (int e = 0; e < DPL; e++) {
        int d = lane + 32 * e;
        qv[e] = active && d < hd ? ld1_fp(q, dt, i * ldq + (int64_t)h * hd + d) * scale_log2 : 0.0f;
        acc[e] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    int64_t kend = Skv;
    if (causal) {
        int64_t last = (int64_t)blockIdx.x * kGenWarps + kGenWarps - 1;
        if (last > Sq - 1) last = Sq - 1;
        if (last + 1 < kend) kend = last + 1;
    }
    for (int64_t k0 = 0; k0 < kend; k0 += kGenKeys) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < kGenKeys * hd; idx += blockDim.x) {
            int r = idx / hd, d = idx - r * hd;
            int64_t key = k0 + r;
            float kv = 0.0f, vv = 0.0f;
            if (key < Skv) {
                kv = ld1_fp(k, dt, key * ldk + (int64_t)kh * hd + d);
                vv = ld1_fp(v, dt, key * ldk + (int64_t)kh * hd + d);
            }
            ks[r][d] = kv;
            vs[r][d] = vv;
        }
        __syncthreads();
        if (!active) continue;
        int64_t nk = kend - k0 < kGenKeys ? kend - k0 : kGenKeys;
        for (int r = 0; r < nk; r++) {
            if (causal && k0 + r > i) break;
            float s = 0.0f;
#pragma unroll
            for (int e = 0; e < DPL; e++) {
                int d = lane + 32 * e;
                if (d < hd) s += qv[e] * ks[r][d];
            }
            s = warp_sum(s);
            float mn = fmaxf(m, s);
            float corr = exp2f(m - mn), p = exp2f(s - mn);
            l = l * corr + p;
#pragma unroll
            for (int e = 0; e < DPL; e++) {
                int d = lane + 32 * e;
                if (d < hd) acc[e] = acc[e] * corr + p * vs[r][d];
            }
            m = mn;
        }
    }
    if (!active) return;
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int e = 0; e < DPL; e++) {
        int d = lane + 32 * e;
        if (d < hd) st1_fp(o, dt, i * ldq + (int64_t)h * hd + d, acc[e] * inv);
    }
}

/* ========================== mma.sync path ========================== */

const int kMmaRows = 64, kMmaKeys = 64;

template <int DH> constexpr int mma_smem_bytes() { return (kMmaRows + 4 * kMmaKeys) * DH * 2; }

/* Element offset of 16-byte chunk `ch` of row `row` in a [rows][DH] tile:
 * chunk ^ (row & 7) spreads the 8 rows an ldmatrix reads over all banks. */
template <int DH> __device__ __forceinline__ int swz(int row, int ch) { return row * DH + ((ch ^ (row & 7)) << 3); }

template <typename T, int DH>
__device__ __forceinline__ void mma_load_tile(T *dst, const T *g, int64_t ld, int64_t r0, int64_t S, int tid) {
    const int CH = DH / 8;
#pragma unroll
    for (int idx = tid; idx < kMmaRows * CH; idx += 128) {
        int row = idx / CH, ch = idx % CH;
        int64_t gr = r0 + row;
        bool valid = gr < S;
        cp_async16(smem_u32(dst + swz<DH>(row, ch)), g + (valid ? gr : 0) * ld + ch * 8, valid);
    }
}

template <typename T, int DH, bool CAUSAL>
__global__ void __launch_bounds__(128) k_attn_mma(T *o, const T *q, const T *k, const T *v, int64_t Sq, int64_t Skv,
                                                  int H, int Hkv, float scale_log2) {
    extern __shared__ __align__(128) uint8_t smem_mma[];
    T *sq = (T *)smem_mma, *sk = sq + kMmaRows * DH, *sv = sk + 2 * kMmaKeys * DH;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    int h = blockIdx.y, kh = h / (H / Hkv);
    int64_t q0 = (int64_t)blockIdx.x * kMmaRows;
    int64_t ldq = (int64_t)H * DH, ldk = (int64_t)Hkv * DH;
    const T *qg = q + (int64_t)h * DH, *kg = k + (int64_t)kh * DH, *vg = v + (int64_t)kh * DH;

    int n_tiles = (int)((Skv + kMmaKeys - 1) / kMmaKeys);
    if (CAUSAL) {
        int last = (int)((q0 + kMmaRows - 1) / kMmaKeys) + 1;
        if (last < n_tiles) n_tiles = last;
    }
    mma_load_tile<T, DH>(sq, qg, ldq, q0, Sq, tid);
    mma_load_tile<T, DH>(sk, kg, ldk, 0, Skv, tid);
    mma_load_tile<T, DH>(sv, vg, ldk, 0, Skv, tid);
    cp_async_commit();

    uint32_t qf[DH / 16][4];
    float oacc[DH / 8][4];
#pragma unroll
    for (int d = 0; d < DH / 8; d++) oacc[d][0] = oacc[d][1] = oacc[d][2] = oacc[d][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    int64_t row0 = q0 + warp * 16 + g; /* this thread's rows: row0 and row0 + 8 */

    for (int j = 0; j < n_tiles; j++) {
        int st = j & 1;
        if (j + 1 < n_tiles) {
            mma_load_tile<T, DH>(sk + (st ^ 1) * kMmaKeys * DH, kg, ldk, (int64_t)(j + 1) * kMmaKeys, Skv, tid);
            mma_load_tile<T, DH>(sv + (st ^ 1) * kMmaKeys * DH, vg, ldk, (int64_t)(j + 1) * kMmaKeys, Skv, tid);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (j == 0) {
#pragma unroll
            for (int kk = 0; kk < DH / 16; kk++)
                ldmatrix_x4(qf[kk], smem_u32(sq + swz<DH>(warp * 16 + (lane & 15), 2 * kk + (lane >> 4))));
        }
        const T *kt = sk + st * kMmaKeys * DH, *vt = sv + st * kMmaKeys * DH;

        float s[kMmaKeys / 8][4];
        mma_scores<T, kMmaKeys / 8, DH>(s, qf, lane, [&](int row, int ch) { return smem_u32(kt + swz<DH>(row, ch)); });

        /* online softmax over this tile, rows row0 (e < 2) and row0 + 8 */
        int64_t k0 = (int64_t)j * kMmaKeys;
        bool mask = k0 + kMmaKeys > Skv || (CAUSAL && k0 + kMmaKeys - 1 > q0);
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int n = 0; n < kMmaKeys / 8; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = s[n][e] * scale_log2;
                if (mask) {
                    int64_t col = k0 + n * 8 + 2 * t + (e & 1), row = row0 + ((e >> 1) << 3);
                    if (col >= Skv || (CAUSAL && col > row)) x = -INFINITY;
                }
                s[n][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        }
        mma_softmax_step<kMmaKeys / 8, DH>(s, mx, m, l, oacc);

        /* O += P·V, P from the S accumulators, B fragments from V rows (transposed by ldmatrix) */
        mma_pv<T, kMmaKeys / 8, DH>(s, oacc, [&](int kk, int d, uint32_t b[4]) {
            int row = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), ch = d + (lane >> 4);
            ldmatrix_x4_trans(b, smem_u32(vt + swz<DH>(row, ch)));
        });
        __syncthreads(); /* the stage just read is refilled next iteration */
    }

    float inv[2];
    softmax_row_inverse(l, inv);
    T *og = o + (int64_t)h * DH;
#pragma unroll
    for (int d = 0; d < DH / 8; d++) {
        int col = d * 8 + 2 * t;
        if (row0 < Sq) *(uint32_t *)(og + row0 * ldq + col) = Mma<T>::pack(oacc[d][0] * inv[0], oacc[d][1] * inv[0]);
        if (row0 + 8 < Sq)
            *(uint32_t *)(og + (row0 + 8) * ldq + col) = Mma<T>::pack(oacc[d][2] * inv[1], oacc[d][3] * inv[1]);
    }
}

template <typename T, int DH, bool CAUSAL> int launch_mma(const h3k_attention_args *a, cudaStream_t stream) {
    static bool configured;
    const int smem = mma_smem_bytes<DH>();
    if (!configured) {
        cudaError_t e = cudaFuncSetAttribute(k_attn_mma<T, DH, CAUSAL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             smem);
        if (e != cudaSuccess) return (int)e;
        configured = true;
    }
    dim3 grid((unsigned)((a->Sq + kMmaRows - 1) / kMmaRows), (unsigned)a->n_heads);
    k_attn_mma<T, DH, CAUSAL><<<grid, 128, smem, stream>>>((T *)a->o, (const T *)a->q, (const T *)a->k,
                                                            (const T *)a->v, a->Sq, a->Skv, a->n_heads,
                                                            a->n_kv_heads, a->scale * kLog2e);
    return (int)cudaGetLastError();
}

} /* namespace */

namespace h3k_attn {

template <typename T> int launch_mma_dt(const h3k_attention_args *a, cudaStream_t stream) {
    if (a->head_dim == 64)
        return a->causal ? launch_mma<T, 64, true>(a, stream) : launch_mma<T, 64, false>(a, stream);
    return a->causal ? launch_mma<T, 128, true>(a, stream) : launch_mma<T, 128, false>(a, stream);
}

template int launch_mma_dt<__nv_bfloat16>(const h3k_attention_args *a, cudaStream_t stream);
template int launch_mma_dt<__half>(const h3k_attention_args *a, cudaStream_t stream);

int launch_generic(const h3k_attention_args *a, cudaStream_t stream) {
    dim3 grid((unsigned)((a->Sq + kGenWarps - 1) / kGenWarps), (unsigned)a->n_heads);
    float sl = a->scale * kLog2e;
#define H3_GEN(DPL)                                                                                              \
    k_attn_generic<DPL><<<grid, 32 * kGenWarps, 0, stream>>>(a->o, a->q, a->k, a->v, a->dt, a->Sq, a->Skv,         \
                                                             a->n_heads, a->n_kv_heads, a->head_dim, a->causal, sl)
    if (a->head_dim <= 32) H3_GEN(1);
    else if (a->head_dim <= 64) H3_GEN(2);
    else if (a->head_dim <= 128) H3_GEN(4);
    else H3_GEN(8);
#undef H3_GEN
    return (int)cudaGetLastError();
}

} /* namespace h3k_attn */
