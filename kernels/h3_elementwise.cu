/* h3_elementwise.cu - memory-bound kernels of the CUDA backend: fills,
 * conversions, elementwise maths, norms, AdaLN modulation, RoPE, row
 * gathers.
 *
 * Every kernel reads its operands in float32 and rounds once on store, so
 * the same code serves bf16 (the DiT), f16 (the video VAE) and f32 (the
 * islands). Dtypes are run-time values: the switch on them is uniform
 * across a warp and costs a few instructions per 8 elements, far less than
 * the memory traffic. When every pointer is 16-byte aligned and the row
 * length is a multiple of 8, a thread moves 8 elements with 16-byte
 * accesses (the VEC template flag); otherwise it falls back to scalars. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/h3_common.cuh" /* ld1, st1, warp_sum, GRID_STRIDE, aligned16 */
#include "kernels/h3_kernels.h"

namespace {

/* ---- element access ------------------------------------------------------ */

/* 8 elements from index i (a multiple of 8) of a 16-byte aligned tensor. */
__device__ __forceinline__ void ld8(const void *p, int dt, int64_t i, float v[8]) {
    if (dt == H3K_F32) {
        const float4 *q = (const float4 *)((const float *)p + i);
        float4 a = q[0], b = q[1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else if (dt == H3K_BF16) {
        uint4 u = *(const uint4 *)((const __nv_bfloat16 *)p + i);
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 f = __bfloat1622float2(h[k]);
            v[2 * k] = f.x;
            v[2 * k + 1] = f.y;
        }
    } else if (dt == H3K_F16) {
        uint4 u = *(const uint4 *)((const __half *)p + i);
        const __half2 *h = (const __half2 *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 f = __half22float2(h[k]);
            v[2 * k] = f.x;
            v[2 * k + 1] = f.y;
        }
    } else {
        const int4 *q = (const int4 *)((const int32_t *)p + i);
        int4 a = q[0], b = q[1];
        v[0] = (float)a.x; v[1] = (float)a.y; v[2] = (float)a.z; v[3] = (float)a.w;
        v[4] = (float)b.x; v[5] = (float)b.y; v[6] = (float)b.z; v[7] = (float)b.w;
    }
}

__device__ __forceinline__ void st8(void *p, int dt, int64_t i, const float v[8]) {
    if (dt == H3K_F32) {
        float4 *q = (float4 *)((float *)p + i);
        q[0] = make_float4(v[0], v[1], v[2], v[3]);
        q[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else if (dt == H3K_BF16) {
        uint4 u;
        __nv_bfloat162 *h = (__nv_bfloat162 *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
        *(uint4 *)((__nv_bfloat16 *)p + i) = u;
    } else if (dt == H3K_F16) {
        uint4 u;
        __half2 *h = (__half2 *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) h[k] = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
        *(uint4 *)((__half *)p + i) = u;
    } else {
        int4 *q = (int4 *)((int32_t *)p + i);
        q[0] = make_int4((int)v[0], (int)v[1], (int)v[2], (int)v[3]);
        q[1] = make_int4((int)v[4], (int)v[5], (int)v[6], (int)v[7]);
    }
}

/* A chunk of 8 elements at i, of which those at index >= n are absent. */
template <bool VEC>
__device__ __forceinline__ void load_chunk(const void *p, int dt, int64_t i, int64_t n, float v[8]) {
    if (VEC) {
        ld8(p, dt, i, v);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = i + k < n ? ld1(p, dt, i + k) : 0.0f;
    }
}

template <bool VEC>
__device__ __forceinline__ void store_chunk(void *p, int dt, int64_t i, int64_t n, const float v[8]) {
    if (VEC) {
        st8(p, dt, i, v);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (i + k < n) st1(p, dt, i + k, v[k]);
    }
}

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

/* Sum over the block (blockDim.x a multiple of 32, at most 1024). */
__device__ float block_sum(float v) {
    __shared__ float part[32];
    __shared__ float total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* part/total may still be read by an earlier call */
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0f;
        s = warp_sum(s);
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

/* ---- launch helpers ------------------------------------------------------------ */

const int kThreads = 256;

inline unsigned grid_for(int64_t items, int per_block = kThreads) {
    int64_t g = (items + per_block - 1) / per_block;
    if (g < 1) g = 1;
    if (g > 8192) g = 8192; /* grid-stride loops cover the rest */
    return (unsigned)g;
}

inline int launched() { return (int)cudaGetLastError(); }

/* ---- fills and conversions ---------------------------------------------------------- */

__global__ void k_fill(void *p, int dt, int64_t n, float value) {
    GRID_STRIDE(i, n) st1(p, dt, i, value);
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

__global__ void k_fill_uniform(void *p, int dt, int64_t n, uint64_t seed, float lo, float hi) {
    GRID_STRIDE(i, n) {
        uint64_t h = splitmix64(seed * 0x100000001B3ull ^ splitmix64((uint64_t)i));
        float u = (float)(h >> 40) * (1.0f / 16777216.0f);
        st1(p, dt, i, lo + (hi - lo) * u);
    }
}

/* h3k_fill_random: the hash of k_fill_uniform at the element's counter,
 * and lo + (hi - lo)·u unfused, as h3_counter_uniform computes it. */
__global__ void k_fill_random(void *p, int dt, int64_t rows, int64_t cols, h3k_random_fill f) {
    GRID_STRIDE(i, rows * cols) {
        int64_t r = i / cols, c = i - r * cols;
        int64_t index = f.offset + (r / f.part_rows) * f.part_stride + (r % f.part_rows) * f.row_stride + c;
        uint64_t h = splitmix64(f.key * 0x100000001B3ull ^ splitmix64((uint64_t)index));
        float u = (float)(h >> 40) * (1.0f / 16777216.0f);
        float v = __fadd_rn(f.lo, __fmul_rn(__fsub_rn(f.hi, f.lo), u));
        st1(p, dt, i, round_to(f.round_dt, v));
    }
}

template <bool VEC>
__global__ void k_convert(void *dst, int ddt, const void *src, int sdt, int64_t n) {
    GRID_STRIDE(c, (n + 7) / 8) {
        float v[8];
        load_chunk<VEC>(src, sdt, c * 8, n, v);
        store_chunk<VEC>(dst, ddt, c * 8, n, v);
    }
}

/* ---- elementwise ------------------------------------------------------------------------ */

template <bool VEC>
__global__ void k_binary(int op, void *y, int ydt, const void *a, int adt, const void *b, int bdt, int64_t n) {
    GRID_STRIDE(c, (n + 7) / 8) {
        float va[8], vb[8];
        load_chunk<VEC>(a, adt, c * 8, n, va);
        load_chunk<VEC>(b, bdt, c * 8, n, vb);
#pragma unroll
        for (int k = 0; k < 8; k++) va[k] = op ? va[k] * vb[k] : va[k] + vb[k];
        store_chunk<VEC>(y, ydt, c * 8, n, va);
    }
}

/* Scalar: row vectors of any length (VAE layer scales have odd widths). */
__global__ void k_row_vector(int op, void *y, int ydt, const void *x, int xdt, const void *v, int vdt, int64_t rows,
                             int64_t cols) {
    GRID_STRIDE(i, rows * cols) {
        float a = ld1(x, xdt, i), w = ld1(v, vdt, i % cols);
        st1(y, ydt, i, op ? a + w : a * w);
    }
}

template <bool VEC>
__global__ void k_row_vector_vec(int op, void *y, int ydt, const void *x, int xdt, const void *v, int vdt,
                                 int64_t rows, int64_t cols) {
    int64_t n = rows * cols;
    GRID_STRIDE(c, n / 8) {
        float a[8], w[8];
        ld8(x, xdt, c * 8, a);
        ld8(v, vdt, (c * 8) % cols, w);
#pragma unroll
        for (int k = 0; k < 8; k++) a[k] = op ? a[k] + w[k] : a[k] * w[k];
        st8(y, ydt, c * 8, a);
    }
}

template <bool VEC>
__global__ void k_scale(void *y, int ydt, const void *x, int xdt, int64_t n, float alpha) {
    GRID_STRIDE(c, (n + 7) / 8) {
        float v[8];
        load_chunk<VEC>(x, xdt, c * 8, n, v);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] *= alpha;
        store_chunk<VEC>(y, ydt, c * 8, n, v);
    }
}

template <bool VEC>
__global__ void k_unary(int op, void *y, int ydt, const void *x, int xdt, int64_t n) {
    GRID_STRIDE(c, (n + 7) / 8) {
        float v[8];
        load_chunk<VEC>(x, xdt, c * 8, n, v);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float t = v[k];
            if (op == 0) v[k] = silu(t);
            else if (op == 1) v[k] = 0.5f * t * (1.0f + erff(t * 0.70710678118654752f));
            else v[k] = 0.5f * t * (1.0f + tanhf(0.7978845608028654f * (t + 0.044715f * t * t * t)));
        }
        store_chunk<VEC>(y, ydt, c * 8, n, v);
    }
}

/* The audio's last op: every output finite and in [lo, hi]. A NaN becomes
 * 0 (fminf/fmaxf would make it lo, a full-scale click, and the old
 * `v != v ? v` kept it), and any NaN or Inf sets the error word so the clip
 * ends as an error (h3_op_clamp). */
template <bool VEC>
__global__ void k_clamp(void *y, int ydt, const void *x, int xdt, int64_t n, float lo, float hi, int *err) {
    bool bad = false;
    GRID_STRIDE(c, (n + 7) / 8) {
        float v[8];
        load_chunk<VEC>(x, xdt, c * 8, n, v);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            bad |= !isfinite(v[k]) && c * 8 + k < n;
            v[k] = v[k] != v[k] ? 0.0f : fminf(fmaxf(v[k], lo), hi);
        }
        store_chunk<VEC>(y, ydt, c * 8, n, v);
    }
    if (bad) atomicOr(err, H3K_ERR_NONFINITE_CLAMP);
}

/* Non-finite means all exponent bits set, in every float format; testing
 * the bits reads each element once with no conversion. */
__device__ __forceinline__ int nonfinite_bits(const void *x, int dt, int64_t i) {
    if (dt == H3K_F32) return (((const uint32_t *)x)[i] & 0x7f800000u) == 0x7f800000u;
    uint16_t h = ((const uint16_t *)x)[i];
    return dt == H3K_BF16 ? (h & 0x7f80u) == 0x7f80u : (h & 0x7c00u) == 0x7c00u;
}

__global__ void k_count_nonfinite(const void *x, int dt, int64_t n, unsigned long long *count) {
    unsigned mine = 0;
    GRID_STRIDE(i, n) mine += (unsigned)nonfinite_bits(x, dt, i);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mine += __shfl_xor_sync(0xffffffffu, mine, o);
    if ((threadIdx.x & 31) == 0 && mine) atomicAdd(count, (unsigned long long)mine);
}

/* y[r, f] = value ⊙ silu(gate), value/gate the two halves of u[r]. VEC
 * needs F % 8 == 0 so that a chunk never straddles rows. */
template <bool VEC>
__global__ void k_swiglu(void *y, int ydt, const void *u, int udt, int64_t rows, int64_t F, int value_first) {
    int64_t n = rows * F;
    GRID_STRIDE(c, (n + 7) / 8) {
        int64_t i = c * 8;
        float first[8], second[8], out[8];
        if (VEC) {
            int64_t r = i / F, f = i - r * F;
            ld8(u, udt, r * 2 * F + f, first);
            ld8(u, udt, r * 2 * F + F + f, second);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) {
                int64_t e = i + k < n ? i + k : n - 1;
                int64_t r = e / F, f = e - r * F;
                first[k] = ld1(u, udt, r * 2 * F + f);
                second[k] = ld1(u, udt, r * 2 * F + F + f);
            }
        }
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float value = value_first ? first[k] : second[k], gate = value_first ? second[k] : first[k];
            out[k] = value * silu(gate);
        }
        store_chunk<VEC>(y, ydt, i, n, out);
    }
}

/* ---- norms ------------------------------------------------------------------------------ */

/* One group of `width` elements per warp (TPG 32) or per block (TPG = blockDim). */
template <int TPG, bool VEC>
__device__ __forceinline__ float group_sumsq(const void *x, int xdt, int64_t base, int64_t width, int t) {
    float ss = 0.0f;
    if (VEC) {
        for (int64_t c = t; c < width / 8; c += TPG) {
            float v[8];
            ld8(x, xdt, base + c * 8, v);
#pragma unroll
            for (int k = 0; k < 8; k++) ss += v[k] * v[k];
        }
    } else {
        for (int64_t e = t; e < width; e += TPG) {
            float v = ld1(x, xdt, base + e);
            ss += v * v;
        }
    }
    return ss;
}

template <bool VEC>
__global__ void k_rms_norm_warp(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, int64_t groups,
                                int64_t width, float eps) {
    int lane = threadIdx.x & 31;
    int64_t g = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (g >= groups) return;
    int64_t base = g * width;
    float ss = warp_sum(group_sumsq<32, VEC>(x, xdt, base, width, lane));
    float inv = 1.0f / sqrtf(ss / (float)width + eps);
    if (VEC) {
        for (int64_t c = lane; c < width / 8; c += 32) {
            float v[8], wv[8];
            ld8(x, xdt, base + c * 8, v);
            if (w) ld8(w, wdt, c * 8, wv);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = w ? v[k] * inv * wv[k] : v[k] * inv;
            st8(y, ydt, base + c * 8, v);
        }
    } else {
        for (int64_t e = lane; e < width; e += 32) {
            float v = ld1(x, xdt, base + e) * inv;
            st1(y, ydt, base + e, w ? v * ld1(w, wdt, e) : v);
        }
    }
}

template <bool VEC>
__global__ void k_rms_norm_block(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, int64_t width,
                                 float eps) {
    int64_t base = blockIdx.x * width;
    float ss = block_sum(group_sumsq<kThreads, VEC>(x, xdt, base, width, threadIdx.x));
    float inv = 1.0f / sqrtf(ss / (float)width + eps);
    if (VEC) {
        for (int64_t c = threadIdx.x; c < width / 8; c += kThreads) {
            float v[8], wv[8];
            ld8(x, xdt, base + c * 8, v);
            if (w) ld8(w, wdt, c * 8, wv);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = w ? v[k] * inv * wv[k] : v[k] * inv;
            st8(y, ydt, base + c * 8, v);
        }
    } else {
        for (int64_t e = threadIdx.x; e < width; e += kThreads) {
            float v = ld1(x, xdt, base + e) * inv;
            st1(y, ydt, base + e, w ? v * ld1(w, wdt, e) : v);
        }
    }
}

/* LayerNorm, one row per block: mean, then the centred variance (two
 * passes over a row that stays in L1/L2), then the affine map. */
__global__ void k_layer_norm(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, const void *bias,
                             int bdt, int64_t D, float eps) {
    int64_t base = blockIdx.x * D;
    float s = 0.0f;
    for (int64_t e = threadIdx.x; e < D; e += blockDim.x) s += ld1(x, xdt, base + e);
    float mean = block_sum(s) / (float)D;
    float var = 0.0f;
    for (int64_t e = threadIdx.x; e < D; e += blockDim.x) {
        float d = ld1(x, xdt, base + e) - mean;
        var += d * d;
    }
    var = block_sum(var) / (float)D;
    float inv = 1.0f / sqrtf(var + eps);
    for (int64_t e = threadIdx.x; e < D; e += blockDim.x) {
        float v = (ld1(x, xdt, base + e) - mean) * inv;
        if (w) v *= ld1(w, wdt, e);
        if (bias) v += ld1(bias, bdt, e);
        st1(y, ydt, base + e, v);
    }
}

/* ---- AdaLN ------------------------------------------------------------------------------- */

__device__ __forceinline__ bool selector_ok(int32_t r, int64_t T, int *err, int bit) {
    if (r >= 0 && r < T) return true;
    atomicOr(err, bit);
    return false;
}

template <bool VEC>
__global__ void k_modulate(void *y, int ydt, const void *x, int xdt, const void *shift, int shdt, const void *scale,
                           int scdt, const int32_t *sel, int64_t S, int64_t D, int64_t T, int *err) {
    int64_t n = S * D;
    if (VEC) {
        GRID_STRIDE(c, n / 8) {
            int64_t i = c * 8, s = i / D, col = i - s * D;
            int32_t r = sel[s];
            if (!selector_ok(r, T, err, H3K_ERR_SELECTOR)) continue;
            float v[8], sh[8], sc[8];
            ld8(x, xdt, i, v);
            ld8(shift, shdt, r * D + col, sh);
            ld8(scale, scdt, r * D + col, sc);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = v[k] * (1.0f + sc[k]) + sh[k];
            st8(y, ydt, i, v);
        }
    } else {
        GRID_STRIDE(i, n) {
            int64_t s = i / D, col = i - s * D;
            int32_t r = sel[s];
            if (!selector_ok(r, T, err, H3K_ERR_SELECTOR)) continue;
            float v = ld1(x, xdt, i);
            st1(y, ydt, i, v * (1.0f + ld1(scale, scdt, r * D + col)) + ld1(shift, shdt, r * D + col));
        }
    }
}

template <bool VEC>
__global__ void k_gated_residual(void *x, int xdt, const void *gate, int gdt, const void *y, int ydt,
                                 const int32_t *sel, int64_t S, int64_t D, int64_t T, int *err) {
    int64_t n = S * D;
    if (VEC) {
        GRID_STRIDE(c, n / 8) {
            int64_t i = c * 8, s = i / D, col = i - s * D;
            int32_t r = sel[s];
            if (!selector_ok(r, T, err, H3K_ERR_SELECTOR)) continue;
            float v[8], g[8], u[8];
            ld8(x, xdt, i, v);
            ld8(gate, gdt, r * D + col, g);
            ld8(y, ydt, i, u);
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] += g[k] * u[k];
            st8(x, xdt, i, v);
        }
    } else {
        GRID_STRIDE(i, n) {
            int64_t s = i / D, col = i - s * D;
            int32_t r = sel[s];
            if (!selector_ok(r, T, err, H3K_ERR_SELECTOR)) continue;
            st1(x, xdt, i, ld1(x, xdt, i) + ld1(gate, gdt, r * D + col) * ld1(y, ydt, i));
        }
    }
}

/* RMSNorm + modulate of one row per block: the DiT's pre-attention and
 * pre-FFN step in one read of x and one write of y. */
template <bool VEC>
__global__ void k_rms_norm_modulate(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, float eps,
                                    const void *shift, int shdt, const void *scale, int scdt, const int32_t *sel,
                                    int64_t D, int64_t T, int *err) {
    int64_t s = blockIdx.x, base = s * D;
    int32_t r = sel[s];
    if (r < 0 || r >= T) {
        if (threadIdx.x == 0) atomicOr(err, H3K_ERR_SELECTOR);
        return;
    }
    float ss = block_sum(group_sumsq<kThreads, VEC>(x, xdt, base, D, threadIdx.x));
    float inv = 1.0f / sqrtf(ss / (float)D + eps);
    int64_t tb = (int64_t)r * D;
    if (VEC) {
        for (int64_t c = threadIdx.x; c < D / 8; c += kThreads) {
            float v[8], wv[8], sh[8], sc[8];
            ld8(x, xdt, base + c * 8, v);
            if (w) ld8(w, wdt, c * 8, wv);
            ld8(shift, shdt, tb + c * 8, sh);
            ld8(scale, scdt, tb + c * 8, sc);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float t = v[k] * inv;
                if (w) t *= wv[k];
                v[k] = t * (1.0f + sc[k]) + sh[k];
            }
            st8(y, ydt, base + c * 8, v);
        }
    } else {
        for (int64_t e = threadIdx.x; e < D; e += kThreads) {
            float t = ld1(x, xdt, base + e) * inv;
            if (w) t *= ld1(w, wdt, e);
            st1(y, ydt, base + e, t * (1.0f + ld1(scale, scdt, tb + e)) + ld1(shift, shdt, tb + e));
        }
    }
}

/* ---- per-head norm + RoPE ------------------------------------------------------------------- */

const int kMaxHeadDim = 512;
const int kHeadWarps = 8;

/* One warp per (row, head). The normalised head goes through shared memory
 * because rotate-half pairs channel c with c + rot/2, held by another lane. */
template <bool VEC>
__global__ void k_head_norm_rope(void *x, int xdt, int norm, const void *w, int wdt, float eps, const float *cos,
                                 const float *sin, int64_t S, int n_heads, int head_dim, int rot_dim) {
    __shared__ float buf[kHeadWarps][kMaxHeadDim];
    int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    int64_t g = blockIdx.x * (int64_t)kHeadWarps + wi;
    if (g >= S * n_heads) return;
    int64_t s = g / n_heads, base = g * head_dim;
    float inv = 1.0f;
    if (norm) {
        float ss = warp_sum(group_sumsq<32, VEC>(x, xdt, base, head_dim, lane));
        inv = 1.0f / sqrtf(ss / (float)head_dim + eps);
    }
    float *hb = buf[wi];
    if (VEC) {
        for (int c = lane; c < head_dim / 8; c += 32) {
            float v[8], wv[8];
            ld8(x, xdt, base + c * 8, v);
            if (norm && w) ld8(w, wdt, c * 8, wv);
#pragma unroll
            for (int k = 0; k < 8; k++) hb[c * 8 + k] = (norm && w) ? v[k] * inv * wv[k] : v[k] * inv;
        }
    } else {
        for (int e = lane; e < head_dim; e += 32) {
            float v = ld1(x, xdt, base + e) * inv;
            hb[e] = (norm && w) ? v * ld1(w, wdt, e) : v;
        }
    }
    __syncwarp();
    int half = rot_dim / 2;
    const float *cs = cos + s * rot_dim, *sn = sin + s * rot_dim;
    for (int e = lane; e < head_dim; e += 32) {
        float v = hb[e];
        if (e < half) v = v * cs[e] - hb[e + half] * sn[e];
        else if (e < rot_dim) v = v * cs[e] + hb[e - half] * sn[e];
        st1(x, xdt, base + e, v);
    }
}

/* The DiT's case, head_dim 128 with 16-byte access: a half-warp per
 * (row, head), each lane holding 8 channels in registers. Rotate-half pairs
 * chunk c with chunk c ± rot/16, fetched with one shuffle per element, so
 * the head makes one trip through registers instead of shared memory. */
__global__ void k_head_norm_rope128(void *x, int xdt, int norm, const void *w, int wdt, float eps, const float *cos,
                                    const float *sin, int64_t S, int n_heads, int rot_dim) {
    int64_t g = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 4;
    bool valid = g < S * n_heads; /* invalid lanes still take part in the shuffles */
    int lane = threadIdx.x & 31, l16 = lane & 15;
    int64_t gg = valid ? g : 0, base = gg * 128 + l16 * 8;
    float v[8];
    ld8(x, xdt, base, v);
    if (norm) {
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) ss += v[k] * v[k];
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        float inv = 1.0f / sqrtf(ss / 128.0f + eps);
        float wv[8];
        if (w) ld8(w, wdt, l16 * 8, wv);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = w ? v[k] * inv * wv[k] : v[k] * inv;
    }
    int hc = rot_dim / 16; /* half the rotated channels, in chunks of 8 */
    int src = l16 < hc ? l16 + hc : l16 < 2 * hc ? l16 - hc : l16;
    float p[8];
#pragma unroll
    for (int k = 0; k < 8; k++) p[k] = __shfl_sync(0xffffffffu, v[k], (lane & 16) | src);
    if (l16 < 2 * hc) {
        int64_t s = gg / n_heads;
        const float4 *c4 = (const float4 *)(cos + s * rot_dim + l16 * 8), *s4 = (const float4 *)(sin + s * rot_dim + l16 * 8);
        float4 ca = c4[0], cb = c4[1], sa = s4[0], sb = s4[1];
        float cs[8] = {ca.x, ca.y, ca.z, ca.w, cb.x, cb.y, cb.z, cb.w};
        float sn[8] = {sa.x, sa.y, sa.z, sa.w, sb.x, sb.y, sb.z, sb.w};
        float sign = l16 < hc ? -1.0f : 1.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = v[k] * cs[k] + sign * p[k] * sn[k];
    }
    if (valid) st8(x, xdt, base, v);
}

/* ---- rows ---------------------------------------------------------------------------------- */

template <typename W>
__global__ void k_move_rows(void *dst, const void *src, const int32_t *idx, int64_t n, int64_t rows,
                            int64_t row_words, int scatter, int *err) {
    int64_t i = blockIdx.x;
    int32_t r = idx[i];
    if (r < 0 || r >= rows) {
        if (threadIdx.x == 0) atomicOr(err, scatter ? H3K_ERR_SCATTER : H3K_ERR_GATHER);
        return;
    }
    const W *s = (const W *)src + (scatter ? i : (int64_t)r) * row_words;
    W *d = (W *)dst + (scatter ? (int64_t)r : i) * row_words;
    for (int64_t e = threadIdx.x; e < row_words; e += blockDim.x) d[e] = s[e];
}

int move_rows(void *dst, const void *src, const int32_t *idx, int64_t n, int64_t rows, int64_t row_bytes, int scatter,
              int *err, cudaStream_t stream) {
    if (n <= 0 || row_bytes <= 0) return 0;
    if (n > 0x7fffffff) return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)n);
    if (row_bytes % 16 == 0 && aligned16(dst) && aligned16(src))
        k_move_rows<uint4><<<grid, 128, 0, stream>>>(dst, src, idx, n, rows, row_bytes / 16, scatter, err);
    else if (row_bytes % 4 == 0 && ((uintptr_t)dst & 3) == 0 && ((uintptr_t)src & 3) == 0)
        k_move_rows<uint32_t><<<grid, 128, 0, stream>>>(dst, src, idx, n, rows, row_bytes / 4, scatter, err);
    else
        k_move_rows<uint8_t><<<grid, 128, 0, stream>>>(dst, src, idx, n, rows, row_bytes, scatter, err);
    return launched();
}

} /* namespace */

/* ---- C entry points --------------------------------------------------------------------------- */

#define VEC_DISPATCH(cond, kernel, grid, block, ...)                                         \
    do {                                                                                     \
        if (cond) kernel<true><<<grid, block, 0, stream>>>(__VA_ARGS__);                     \
        else kernel<false><<<grid, block, 0, stream>>>(__VA_ARGS__);                         \
    } while (0)

extern "C" int h3k_fill(void *p, int dt, int64_t n, float value, cudaStream_t stream) {
    if (n <= 0) return 0;
    k_fill<<<grid_for(n), kThreads, 0, stream>>>(p, dt, n, value);
    return launched();
}

extern "C" int h3k_fill_uniform(void *p, int dt, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
    if (n <= 0) return 0;
    k_fill_uniform<<<grid_for(n), kThreads, 0, stream>>>(p, dt, n, seed, lo, hi);
    return launched();
}

extern "C" int h3k_fill_random(void *p, int dt, int64_t rows, int64_t cols, const h3k_random_fill *f,
                               cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    k_fill_random<<<grid_for(rows * cols), kThreads, 0, stream>>>(p, dt, rows, cols, *f);
    return launched();
}

extern "C" int h3k_convert(void *dst, int ddt, const void *src, int sdt, int64_t n, cudaStream_t stream) {
    if (n <= 0) return 0;
    if (ddt == sdt) {
        size_t es = ddt == H3K_F32 || ddt == H3K_I32 ? 4 : 2;
        if (dst == src) return 0;
        return (int)cudaMemcpyAsync(dst, src, (size_t)n * es, cudaMemcpyDeviceToDevice, stream);
    }
    bool vec = n % 8 == 0 && aligned16(dst) && aligned16(src);
    VEC_DISPATCH(vec, k_convert, grid_for((n + 7) / 8), kThreads, dst, ddt, src, sdt, n);
    return launched();
}

extern "C" int h3k_binary(int op, void *y, int ydt, const void *a, int adt, const void *b, int bdt, int64_t n,
                          cudaStream_t stream) {
    if (n <= 0) return 0;
    bool vec = n % 8 == 0 && aligned16(y) && aligned16(a) && aligned16(b);
    VEC_DISPATCH(vec, k_binary, grid_for((n + 7) / 8), kThreads, op, y, ydt, a, adt, b, bdt, n);
    return launched();
}

extern "C" int h3k_row_vector(int op, void *y, int ydt, const void *x, int xdt, const void *v, int vdt, int64_t rows,
                              int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    if (cols % 8 == 0 && aligned16(y) && aligned16(x) && aligned16(v))
        k_row_vector_vec<true><<<grid_for(rows * cols / 8), kThreads, 0, stream>>>(op, y, ydt, x, xdt, v, vdt, rows,
                                                                                    cols);
    else
        k_row_vector<<<grid_for(rows * cols), kThreads, 0, stream>>>(op, y, ydt, x, xdt, v, vdt, rows, cols);
    return launched();
}

extern "C" int h3k_scale(void *y, int ydt, const void *x, int xdt, int64_t n, float alpha, cudaStream_t stream) {
    if (n <= 0) return 0;
    bool vec = n % 8 == 0 && aligned16(y) && aligned16(x);
    VEC_DISPATCH(vec, k_scale, grid_for((n + 7) / 8), kThreads, y, ydt, x, xdt, n, alpha);
    return launched();
}

extern "C" int h3k_unary(int op, void *y, int ydt, const void *x, int xdt, int64_t n, cudaStream_t stream) {
    if (n <= 0) return 0;
    bool vec = n % 8 == 0 && aligned16(y) && aligned16(x);
    VEC_DISPATCH(vec, k_unary, grid_for((n + 7) / 8), kThreads, op, y, ydt, x, xdt, n);
    return launched();
}

extern "C" int h3k_clamp(void *y, int ydt, const void *x, int xdt, int64_t n, float lo, float hi, int *err,
                         cudaStream_t stream) {
    if (n <= 0) return 0;
    bool vec = n % 8 == 0 && aligned16(y) && aligned16(x);
    VEC_DISPATCH(vec, k_clamp, grid_for((n + 7) / 8), kThreads, y, ydt, x, xdt, n, lo, hi, err);
    return launched();
}

extern "C" int h3k_count_nonfinite(const void *x, int dt, int64_t n, unsigned long long *count,
                                   cudaStream_t stream) {
    if (n <= 0) return 0;
    k_count_nonfinite<<<grid_for(n), kThreads, 0, stream>>>(x, dt, n, count);
    return launched();
}

extern "C" int h3k_swiglu(void *y, int ydt, const void *u, int udt, int64_t rows, int64_t F, int value_first,
                          cudaStream_t stream) {
    if (rows <= 0 || F <= 0) return 0;
    bool vec = F % 8 == 0 && aligned16(y) && aligned16(u);
    VEC_DISPATCH(vec, k_swiglu, grid_for((rows * F + 7) / 8), kThreads, y, ydt, u, udt, rows, F, value_first);
    return launched();
}

extern "C" int h3k_rms_norm(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, int64_t groups,
                            int64_t width, float eps, cudaStream_t stream) {
    if (groups <= 0 || width <= 0) return 0;
    bool vec = width % 8 == 0 && aligned16(y) && aligned16(x) && aligned16(w);
    if (width >= 1024) {
        if (groups > 0x7fffffff) return (int)cudaErrorInvalidValue;
        VEC_DISPATCH(vec, k_rms_norm_block, (unsigned)groups, kThreads, y, ydt, x, xdt, w, wdt, width, eps);
    } else {
        int64_t blocks = (groups + 7) / 8;
        if (blocks > 0x7fffffff) return (int)cudaErrorInvalidValue;
        VEC_DISPATCH(vec, k_rms_norm_warp, (unsigned)blocks, 256, y, ydt, x, xdt, w, wdt, groups, width, eps);
    }
    return launched();
}

extern "C" int h3k_layer_norm(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, const void *bias,
                              int bdt, int64_t rows, int64_t D, float eps, cudaStream_t stream) {
    if (rows <= 0 || D <= 0) return 0;
    if (rows > 0x7fffffff) return (int)cudaErrorInvalidValue;
    int threads = D >= 1024 ? 256 : D >= 256 ? 128 : 64;
    k_layer_norm<<<(unsigned)rows, threads, 0, stream>>>(y, ydt, x, xdt, w, wdt, bias, bdt, D, eps);
    return launched();
}

extern "C" int h3k_modulate(void *y, int ydt, const void *x, int xdt, const void *shift, int shdt, const void *scale,
                            int scdt, const int32_t *sel, int64_t S, int64_t D, int64_t T, int *err,
                            cudaStream_t stream) {
    if (S <= 0 || D <= 0) return 0;
    bool vec = D % 8 == 0 && aligned16(y) && aligned16(x) && aligned16(shift) && aligned16(scale);
    VEC_DISPATCH(vec, k_modulate, grid_for(vec ? S * D / 8 : S * D), kThreads, y, ydt, x, xdt, shift, shdt, scale,
                 scdt, sel, S, D, T, err);
    return launched();
}

extern "C" int h3k_rms_norm_modulate(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, float eps,
                                     const void *shift, int shdt, const void *scale, int scdt, const int32_t *sel,
                                     int64_t S, int64_t D, int64_t T, int *err, cudaStream_t stream) {
    if (S <= 0 || D <= 0) return 0;
    if (S > 0x7fffffff) return (int)cudaErrorInvalidValue;
    bool vec = D % 8 == 0 && aligned16(y) && aligned16(x) && aligned16(w) && aligned16(shift) && aligned16(scale);
    VEC_DISPATCH(vec, k_rms_norm_modulate, (unsigned)S, kThreads, y, ydt, x, xdt, w, wdt, eps, shift, shdt, scale,
                 scdt, sel, D, T, err);
    return launched();
}

extern "C" int h3k_gated_residual(void *x, int xdt, const void *gate, int gdt, const void *y, int ydt,
                                  const int32_t *sel, int64_t S, int64_t D, int64_t T, int *err,
                                  cudaStream_t stream) {
    if (S <= 0 || D <= 0) return 0;
    bool vec = D % 8 == 0 && aligned16(x) && aligned16(gate) && aligned16(y);
    VEC_DISPATCH(vec, k_gated_residual, grid_for(vec ? S * D / 8 : S * D), kThreads, x, xdt, gate, gdt, y, ydt, sel,
                 S, D, T, err);
    return launched();
}

extern "C" int h3k_head_norm_rope(void *x, int xdt, int norm, const void *w, int wdt, float eps, const float *cos,
                                  const float *sin, int64_t S, int n_heads, int head_dim, int rot_dim,
                                  cudaStream_t stream) {
    if (S <= 0 || n_heads <= 0 || head_dim <= 0) return 0;
    if (head_dim > kMaxHeadDim) return (int)cudaErrorInvalidValue;
    int64_t blocks = (S * n_heads + kHeadWarps - 1) / kHeadWarps;
    if (blocks > 0x7fffffff) return (int)cudaErrorInvalidValue;
    bool vec = head_dim % 8 == 0 && aligned16(x) && aligned16(w);
    if (vec && head_dim == 128 && rot_dim % 16 == 0 && aligned16(cos) && aligned16(sin)) {
        int64_t b128 = (S * n_heads * 16 + 255) / 256;
        if (b128 > 0x7fffffff) return (int)cudaErrorInvalidValue;
        k_head_norm_rope128<<<(unsigned)b128, 256, 0, stream>>>(x, xdt, norm, w, wdt, eps, cos, sin, S, n_heads,
                                                                rot_dim);
        return launched();
    }
    VEC_DISPATCH(vec, k_head_norm_rope, (unsigned)blocks, 32 * kHeadWarps, x, xdt, norm, w, wdt, eps, cos, sin, S,
                 n_heads, head_dim, rot_dim);
    return launched();
}

extern "C" int h3k_gather_rows(void *dst, const void *src, const int32_t *idx, int64_t n, int64_t src_rows,
                               int64_t row_bytes, int *err, cudaStream_t stream) {
    return move_rows(dst, src, idx, n, src_rows, row_bytes, 0, err, stream);
}

extern "C" int h3k_scatter_rows(void *dst, const void *src, const int32_t *idx, int64_t n, int64_t dst_rows,
                                int64_t row_bytes, int *err, cudaStream_t stream) {
    return move_rows(dst, src, idx, n, dst_rows, row_bytes, 1, err, stream);
}
