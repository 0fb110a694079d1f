/* h3_vae.cu - kernels of the VAE ops: strided views, tile cross-fades and
 * RGB packing (video decoder), the causal 3-D im2col and the per-frame
 * GroupNorm (video encoder), 1-D convolutions, anti-aliased resampling and
 * SnakeBeta (the BigVGAN audio decoder).
 *
 * These are direct kernels written for exactness first: one thread per
 * output element, float32 accumulation in the order of the op's formula
 * (h3_backend.h), dtypes read and written through ld1/st1 so the same code
 * serves the f16 video decoder and the f32 audio decoder. The fused
 * SnakeBeta computes each upsampled sample where the downsampler needs it,
 * so the 2×-rate signal never reaches device memory. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/h3_common.cuh" /* ld1, st1, round_to, GRID_STRIDE */
#include "kernels/h3_kernels_vae.h"

namespace {

const int kThreads = 256;

inline unsigned grid_for(int64_t n) {
    int64_t g = (n + kThreads - 1) / kThreads;
    if (g < 1) g = 1;
    if (g > 65535) g = 65535;
    return (unsigned)g;
}

/* Element offsets of linear index i (last dim fastest) in up to three views
 * of one shape; axis_idx gets the index along `axis`. */
__device__ __forceinline__ void view_offsets(int64_t i, const h3k_view &v0, const h3k_view *v1, const h3k_view *v2,
                                             int axis, int64_t *o0, int64_t *o1, int64_t *o2, int64_t *axis_idx) {
    int64_t a = v0.offset, b = v1 ? v1->offset : 0, c = v2 ? v2->offset : 0, ax = 0;
    for (int d = v0.ndim - 1; d >= 0; d--) {
        int64_t n = v0.shape[d], k = i % n;
        i /= n;
        a += k * v0.stride[d];
        if (v1) b += k * v1->stride[d];
        if (v2) c += k * v2->stride[d];
        if (d == axis) ax = k;
    }
    *o0 = a;
    if (o1) *o1 = b;
    if (o2) *o2 = c;
    if (axis_idx) *axis_idx = ax;
}

__global__ void k_copy_view(void *dst, h3k_view dv, const void *src, h3k_view sv, int elem, int64_t n) {
    GRID_STRIDE(i, n) {
        int64_t od, os;
        view_offsets(i, dv, &sv, nullptr, -1, &od, &os, nullptr, nullptr);
        if (elem == 4) ((uint32_t *)dst)[od] = ((const uint32_t *)src)[os];
        else ((uint16_t *)dst)[od] = ((const uint16_t *)src)[os];
    }
}

__global__ void k_blend_view(void *dst, h3k_view dv, const void *a, h3k_view av, const void *x, h3k_view xv, int dt,
                             int axis, int extent, int64_t n) {
    GRID_STRIDE(i, n) {
        int64_t od, oa, ox, k;
        view_offsets(i, dv, &av, &xv, axis, &od, &oa, &ox, &k);
        float wx = round_to(dt, (float)k / (float)extent), wa = round_to(dt, 1.0f - wx);
        float ta = round_to(dt, __fmul_rn(ld1(a, dt, oa), wa)), tx = round_to(dt, __fmul_rn(ld1(x, dt, ox), wx));
        st1(dst, dt, od, __fadd_rn(ta, tx));
    }
}

/* dst bytes ((f·H + y)·W + x)·C + c of frames [frame0, frame0 + nframes). */
/* A NaN would be a black pixel: it (or an Inf) sets the error word, so the
 * frames are refused (h3_op_rgb8_from_planar). */
__global__ void k_rgb8(uint8_t *dst, const void *src, int dt, int64_t C, int64_t F, int64_t HW, int64_t frame0,
                       int64_t nframes, h3k_rgb_norm norm, int *err) {
    int64_t n = nframes * HW * C;
    bool bad = false;
    GRID_STRIDE(i, n) {
        int64_t c = i % C, p = (i / C) % HW, f = i / (C * HW);
        float v = __fmul_rn(ld1(src, dt, (c * F + frame0 + f) * HW + p), norm.std[c]);
        v = __fadd_rn(v, norm.mean[c]);
        bad |= !isfinite(v);
        v = v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
        v = rintf(__fmul_rn(v, 255.0f)); /* half to even */
        dst[i] = v == v ? (uint8_t)v : 0;
    }
    if (bad) atomicOr(err, H3K_ERR_NONFINITE_RGB);
}

/* ---- 1-D convolutions ---------------------------------------------------------------- */

/* y[b, co, t] for CO consecutive output channels of one group per thread:
 * each input sample is loaded once for CO multiply-adds. */
template <int CO>
__global__ void k_conv1d(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, const void *bias, int bdt,
                         int64_t Cin, int64_t Lin, int64_t Cout, int64_t Lout, int K, int stride, int padding,
                         int dilation, int groups) {
    int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t co0 = (int64_t)blockIdx.y * CO, b = blockIdx.z;
    int64_t cin_g = Cin / groups, cout_g = Cout / groups, g = co0 / cout_g;
    float acc[CO];
#pragma unroll
    for (int c = 0; c < CO; c++) acc[c] = bias ? ld1(bias, bdt, co0 + c) : 0.0f;
    if (t >= Lout) return;
    for (int64_t ci = 0; ci < cin_g; ci++) {
        int64_t xrow = (b * Cin + g * cin_g + ci) * Lin;
        for (int k = 0; k < K; k++) {
            int64_t pos = t * stride + (int64_t)k * dilation - padding;
            if (pos < 0 || pos >= Lin) continue;
            float xv = ld1(x, xdt, xrow + pos);
#pragma unroll
            for (int c = 0; c < CO; c++) acc[c] += ld1(w, wdt, ((co0 + c) * cin_g + ci) * K + k) * xv;
        }
    }
#pragma unroll
    for (int c = 0; c < CO; c++) st1(y, ydt, (b * Cout + co0 + c) * Lout + t, acc[c]);
}

/* y[b, co, p] = bias + Σ_ci Σ_k x[b, ci, m]·w[ci, co, k] over m·stride − padding + k = p.
 * Polyphase: only the taps k ≡ p + padding (mod stride) meet an input sample,
 * so each thread walks those alone (K/stride of them, ascending k as the
 * formula sums) instead of testing all K; lanes of a warp then run the same
 * number of taps and none idles through another phase's channel loop. F32:
 * every operand is float32 (the audio decoder), read without ld1's switch. */
template <bool F32>
__device__ __forceinline__ float ldv(const void *p, int dt, int64_t i) {
    return F32 ? ((const float *)p)[i] : ld1(p, dt, i);
}

template <int CO, bool F32>
__global__ void k_conv_transpose1d(void *y, int ydt, const void *x, int xdt, const void *w, int wdt,
                                   const void *bias, int bdt, int64_t Cin, int64_t Lin, int64_t Cout, int64_t Lout,
                                   int K, int stride, int padding) {
    int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t co0 = (int64_t)blockIdx.y * CO, b = blockIdx.z;
    if (p >= Lout) return;
    float acc[CO];
#pragma unroll
    for (int c = 0; c < CO; c++) acc[c] = bias ? ldv<F32>(bias, bdt, co0 + c) : 0.0f;
    int64_t q0 = p + padding; /* >= 0: p >= 0, padding >= 0 */
    for (int k = (int)(q0 % stride); k < K; k += stride) {
        int64_t m = (q0 - k) / stride; /* exact: k ≡ q0 (mod stride) */
        if (k > q0) break;              /* m < 0 here and for every later tap (m falls as k grows) */
        if (m >= Lin) continue;
        for (int64_t ci = 0; ci < Cin; ci++) {
            float xv = ldv<F32>(x, xdt, (b * Cin + ci) * Lin + m);
#pragma unroll
            for (int c = 0; c < CO; c++) acc[c] += xv * ldv<F32>(w, wdt, (ci * Cout + co0 + c) * K + k);
        }
    }
#pragma unroll
    for (int c = 0; c < CO; c++) st1(y, ydt, (b * Cout + co0 + c) * Lout + p, acc[c]);
}

/* ---- resampling and SnakeBeta ------------------------------------------------------------ */

/* Sample n of UpSample1d(row x[0, L)), h3_op_upsample1d's formula. */
__device__ __forceinline__ float upsample_at(const void *x, int xdt, int64_t row0, int64_t L, const void *f, int fdt,
                                             int K, int ratio, int64_t n) {
    int64_t p = K / ratio - 1, off = p * ratio + (K - ratio) / 2, Lp = L + 2 * p, j = n + off;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        int64_t jk = j - k;
        if (jk < 0 || jk % ratio) continue;
        int64_t m = jk / ratio;
        if (m >= Lp) continue;
        int64_t s = m - p;
        s = s < 0 ? 0 : s >= L ? L - 1 : s;
        acc += ((float)ratio * ld1(f, fdt, k)) * ld1(x, xdt, row0 + s);
    }
    return acc;
}

__global__ void k_upsample1d(void *y, int ydt, const void *x, int xdt, const void *f, int fdt, int K, int ratio,
                             int64_t rows, int64_t L) {
    int64_t Lr = L * ratio;
    GRID_STRIDE(i, rows * Lr) {
        int64_t r = i / Lr, n = i - r * Lr;
        st1(y, ydt, i, upsample_at(x, xdt, r * L, L, f, fdt, K, ratio, n));
    }
}

__global__ void k_downsample1d(void *y, int ydt, const void *x, int xdt, const void *f, int fdt, int K, int ratio,
                               int64_t rows, int64_t L, int64_t Lout) {
    int64_t left = K / 2 - (K % 2 == 0);
    GRID_STRIDE(i, rows * Lout) {
        int64_t r = i / Lout, n = i - r * Lout;
        float acc = 0.0f;
        for (int k = 0; k < K; k++) {
            int64_t s = n * ratio + k - left;
            s = s < 0 ? 0 : s >= L ? L - 1 : s;
            acc += ld1(f, fdt, k) * ld1(x, xdt, r * L + s);
        }
        st1(y, ydt, i, acc);
    }
}

__device__ __forceinline__ float snake(float v, float a, float inv) {
    float s = sinf(a * v);
    return v + inv * (s * s);
}

__global__ void k_snake_beta(void *y, int ydt, const void *x, int xdt, const void *alpha, int adt, const void *beta,
                             int bdt, int64_t C, int64_t L, int64_t n) {
    GRID_STRIDE(i, n) {
        int64_t c = (i / L) % C;
        float a = expf(ld1(alpha, adt, c)), inv = 1.0f / (expf(ld1(beta, bdt, c)) + 1e-9f);
        st1(y, ydt, i, snake(ld1(x, xdt, i), a, inv));
    }
}

/* BigVGAN Activation1d, downsample(snake(upsample(x))), a tile of kActTile
 * outputs of one row per block. The block stages the row's input samples the
 * tile reaches into shared memory, computes every upsampled sample the
 * downsampler reads once (its polyphase taps only, then SnakeBeta: one sinf
 * a 2×-rate sample), keeps them in shared memory, and filters them down. The
 * 2×-rate signal never reaches device memory, and each of its samples is
 * computed once instead of once per downsampling tap (Kd times). Sums run in
 * the formulas' order (h3_ops_audio_vae.h: ascending taps), so the values are
 * those of upsample_at / k_downsample1d composed. y != x (the caller stages). */
const int kActTile = 512, kActThreads = 256;

__device__ __forceinline__ int64_t clamp_len(int64_t v, int64_t len) { return v < 0 ? 0 : v >= len ? len - 1 : v; }

/* floor(a / b) for b > 0. */
__device__ __forceinline__ int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* Shared floats of one block: both filters, the upsampled tile, the input span. */
inline size_t act_smem_floats(int Ku, int Kd, int ratio) {
    size_t nu = (size_t)(kActTile - 1) * (size_t)ratio + (size_t)Kd;
    size_t nx = (nu + (size_t)Ku) / (size_t)ratio + 3;
    return (size_t)Ku + (size_t)Kd + nu + nx;
}

__global__ void k_snake_antialiased(void *y, int ydt, const void *x, int xdt, const void *alpha, int adt,
                                    const void *beta, int bdt, const void *fu, int fudt, int Ku, const void *fd,
                                    int fddt, int Kd, int ratio, int64_t C, int64_t L, int64_t rows) {
    extern __shared__ float act_smem[];
    float *fus = act_smem, *fds = fus + Ku;
    const int64_t Lr = L * ratio, left = Kd / 2 - (Kd % 2 == 0);
    const int64_t p = Ku / ratio - 1, off = p * ratio + (Ku - ratio) / 2, Lp = L + 2 * p;
    const int64_t t0 = (int64_t)blockIdx.x * kActTile;
    const int tn = (int)(L - t0 < kActTile ? L - t0 : kActTile);
    const int nu = (tn - 1) * ratio + Kd;     /* upsampled samples the tile reads */
    const int64_t jlo = t0 * ratio - left;    /* the first of them, before clamping */
    const int64_t ulo = clamp_len(jlo, Lr), uhi = clamp_len(jlo + nu - 1, Lr);
    /* input samples s = clamp(m − p) for m = (n + off − k)/ratio over n in [ulo, uhi], k in [0, Ku) */
    const int64_t slo = clamp_len(floor_div(ulo + off - (Ku - 1), ratio) - p, L);
    const int64_t shi = clamp_len(floor_div(uhi + off, ratio) - p, L);
    const int nx = (int)(shi - slo + 1);
    float *us = fds + Kd, *xs = us + ((kActTile - 1) * ratio + Kd);
    /* Upsampled sample i of the tile sits at j = jbase + li, li = clamp(jlo + i) − jlo in [0, nu): its
     * phase and quotient from the block's once-computed ones in 32-bit arithmetic (no 64-bit division per
     * sample). jbase = q_base·ratio + ph_base, ph_base in [0, ratio). */
    const int64_t jbase = jlo + off, q_base = floor_div(jbase, ratio);
    const int ph_base = (int)(jbase - q_base * ratio);
    for (int i = (int)threadIdx.x; i < Ku; i += (int)blockDim.x) fus[i] = (float)ratio * ld1(fu, fudt, i);
    for (int i = (int)threadIdx.x; i < Kd; i += (int)blockDim.x) fds[i] = ld1(fd, fddt, i);
    for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
        const int64_t base = row * L, c = row % C;
        const float a = expf(ld1(alpha, adt, c)), inv = 1.0f / (expf(ld1(beta, bdt, c)) + 1e-9f);
        for (int i = (int)threadIdx.x; i < nx; i += (int)blockDim.x) xs[i] = ld1(x, xdt, base + slo + i);
        __syncthreads();
        for (int i = (int)threadIdx.x; i < nu; i += (int)blockDim.x) {
            /* the downsampler's replicate padding, then upsample_at at j = clamp(jlo + i) + off */
            int li = (int)(clamp_len(jlo + i, Lr) - jlo), t = ph_base + li, k = t % ratio;
            int64_t j = jbase + li, m = q_base + (t - k) / ratio; /* taps k, k + ratio, ... read m, m − 1, ... */
            float acc = 0.0f;
            for (; k < Ku; k += ratio, m--) {
                if (j - k < 0 || m >= Lp) continue;
                acc += fus[k] * xs[clamp_len(m - p, L) - slo];
            }
            us[i] = snake(acc, a, inv);
        }
        __syncthreads();
        for (int i = (int)threadIdx.x; i < tn; i += (int)blockDim.x) {
            const float *u = us + (int64_t)i * ratio;
            float acc = 0.0f;
            for (int k = 0; k < Kd; k++) acc += fds[k] * u[k];
            st1(y, ydt, base + t0 + i, acc);
        }
        __syncthreads(); /* xs and us are the next row's */
    }
}

/* ---- the encoder: causal 3-D im2col, per-frame GroupNorm ---------------------------- */

/* torch 'reflect' for one pad (pad < len). */
__device__ __forceinline__ int64_t reflect1(int64_t i, int64_t len) {
    return i < 0 ? -i : i >= len ? 2 * (len - 1) - i : i;
}

/* col[r, ((c·kt + a)·kh + i)·kw + j] = xp[t·st + a, y·sh + i, x·sw + j, c], n = n0 + r.
 * One thread per (r, c) writes that channel's kt·kh·kw taps: neighbouring
 * threads read neighbouring channels of one pixel (coalesced), and a row's
 * strided writes meet in L2 before they reach memory. */
__global__ void k_im2col3d(void *col, int cdt, const void *x, int xdt, h3k_conv3d g, int64_t n0, int64_t rows) {
    int64_t taps = (int64_t)g.kt * g.kh * g.kw, K = g.C * taps, n = rows * g.C;
    GRID_STRIDE(idx, n) {
        int64_t r = idx / g.C, c = idx % g.C, o = n0 + r;
        int64_t ox = o % g.Wo, oy = o / g.Wo % g.Ho, ot = o / (g.Wo * g.Ho), at = r * K + c * taps;
        for (int a = 0; a < g.kt; a++) {
            int64_t ti = ot * g.st + a - g.pad_t; /* < 0: a causal zero frame */
            for (int i = 0; i < g.kh; i++) {
                int64_t yi = reflect1(oy * g.sh + i - g.pad_top, g.H);
                for (int j = 0; j < g.kw; j++, at++) {
                    int64_t xi = reflect1(ox * g.sw + j - g.pad_left, g.W);
                    st1(col, cdt, at, ti < 0 ? 0.0f : ld1(x, xdt, ((ti * g.H + yi) * g.W + xi) * g.C + c));
                }
            }
        }
    }
}

const int kNormThreads = 256;

/* Sum of v over the block (kNormThreads threads), in every thread. */
__device__ double block_sum(double v, double *shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = kNormThreads / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    double r = shared[0];
    __syncthreads();
    return r;
}

/* One block per (group, frame): mean, then the biased variance around it
 * (double accumulators), then y; in place is safe (the block owns its values). */
__global__ void k_group_norm(void *y, int ydt, const void *x, int xdt, const float *w, const float *bias, int64_t P,
                             int64_t C, int64_t Cg, float eps, int silu) {
    __shared__ double shared[kNormThreads];
    int64_t g = blockIdx.x, base = (int64_t)blockIdx.y * P * C + g * Cg, n = P * Cg;
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += kNormThreads) s += ld1(x, xdt, base + i / Cg * C + i % Cg);
    double mean = block_sum(s, shared) / (double)n;
    s = 0;
    for (int64_t i = threadIdx.x; i < n; i += kNormThreads) {
        double d = ld1(x, xdt, base + i / Cg * C + i % Cg) - mean;
        s += d * d;
    }
    float rstd = (float)(1.0 / sqrt(block_sum(s, shared) / (double)n + (double)eps)), m = (float)mean;
    for (int64_t i = threadIdx.x; i < n; i += kNormThreads) {
        int64_t at = base + i / Cg * C + i % Cg, c = g * Cg + i % Cg;
        float v = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(ld1(x, xdt, at), m), rstd), w[c]), bias[c]);
        st1(y, ydt, at, silu ? v / (1.0f + expf(-v)) : v);
    }
}

int launched() { return (int)cudaGetLastError(); }

} /* namespace */

extern "C" int h3k_copy_view(void *dst, const h3k_view *dv, const void *src, const h3k_view *sv, int elem_size,
                             cudaStream_t stream) {
    int64_t n = 1;
    for (int d = 0; d < dv->ndim; d++) n *= dv->shape[d];
    if (n <= 0) return 0;
    if (elem_size != 2 && elem_size != 4) return (int)cudaErrorInvalidValue;
    k_copy_view<<<grid_for(n), kThreads, 0, stream>>>(dst, *dv, src, *sv, elem_size, n);
    return launched();
}

extern "C" int h3k_blend_view(void *dst, const h3k_view *dv, const void *a, const h3k_view *av, const void *x,
                              const h3k_view *xv, int dt, int axis, int extent, cudaStream_t stream) {
    int64_t n = 1;
    for (int d = 0; d < dv->ndim; d++) n *= dv->shape[d];
    if (n <= 0) return 0;
    k_blend_view<<<grid_for(n), kThreads, 0, stream>>>(dst, *dv, a, *av, x, *xv, dt, axis, extent, n);
    return launched();
}

extern "C" int h3k_rgb8_from_planar(uint8_t *dst, const void *src, int dt, int64_t C, int64_t F, int64_t H, int64_t W,
                                    int64_t frame0, int64_t nframes, const h3k_rgb_norm *norm, int *err,
                                    cudaStream_t stream) {
    int64_t n = nframes * H * W * C;
    if (n <= 0) return 0;
    k_rgb8<<<grid_for(n), kThreads, 0, stream>>>(dst, src, dt, C, F, H * W, frame0, nframes, *norm, err);
    return launched();
}

/* The GEMM path of conv1d (float32, groups 1): col[t][ci·K + k] = x[ci, t·stride + k·dilation − padding]
 * (0 outside) for one batch item, [Lout, Cin·K] row-major, so that y_b = w · colᵀ is one GEMM. */
__global__ void k_im2col1d(float *col, const float *x, int64_t Cin, int64_t Lin, int64_t Lout, int K, int stride,
                           int padding, int dilation) {
    int64_t CK = Cin * K;
    GRID_STRIDE(i, Lout * CK) {
        int64_t t = i / CK, r = i - t * CK, ci = r / K;
        int64_t pos = t * stride + (r - ci * K) * dilation - padding;
        col[i] = pos >= 0 && pos < Lin ? x[ci * Lin + pos] : 0.0f;
    }
}

/* conv1d as an implicit GEMM (float32, groups 1): y_b[Cout, Lout] = w[Cout, Cin·K] · col_b + bias, where
 * col_b[(ci, k), t] = x_b[ci, t·stride + k·dilation − padding] (0 outside) is gathered tile by tile into
 * shared memory and never written out. A block computes BM = 16·TM channels × BN = 128 steps of one batch
 * item (grid.z); each of its 256 threads TM channels × 8 steps (4 + 4, 64 apart, read as float4), over
 * BK = 16 rows of (ci, k) a step, the next step's operands loaded into registers while this one computes.
 * Each output sums its (ci, k) terms in ascending order, sequentially, as the direct kernel does; the bias
 * is added last, as the im2col GEMM path adds it. TM follows Cout (4, 2 or 1) so that few-channel
 * convolutions (the decoder's last stages) waste little of the tile. */
const int kIgBN = 128, kIgBK = 16, kIgThreads = 256;

/* One step's operands, read from global memory into registers (the next step's, while this one computes):
 * A, TM weights a thread, a warp reading 16 consecutive ones of two rows; B, 8 gathered samples a thread, a
 * warp reading 32 consecutive steps of one (ci, k) row, twice, 8 rows apart. */
template <int TM> struct ig_regs {
    float a[TM], b[2][4];
};

template <int TM>
__device__ __forceinline__ void ig_load(ig_regs<TM> &r, const float *w, const float *xb, int64_t g0, int64_t m0,
                                        int64_t n0, int64_t CK, int64_t Cout, int64_t Lin, int64_t Lout, int K,
                                        int stride, int padding, int dilation) {
    const int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;
#pragma unroll
    for (int i = 0; i < TM; i++) {
        int64_t m = m0 + ty + 16 * i, g = g0 + tx;
        r.a[i] = m < Cout && g < CK ? w[m * CK + g] : 0.0f;
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int64_t g = g0 + tid / 32 + 8 * h;
        const float *src = NULL;
        int64_t off = 0;
        if (g < CK) {
            int64_t ci = g / K;
            src = xb + ci * Lin;
            off = (g - ci * K) * dilation - padding;
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int64_t n = n0 + tid % 32 + 32 * j, pos = n * stride + off;
            r.b[h][j] = src && n < Lout && pos >= 0 && pos < Lin ? src[pos] : 0.0f;
        }
    }
}

template <int TM>
__device__ __forceinline__ void ig_store(const ig_regs<TM> &r, float (*As)[kIgBK + 1], float (*Bs)[kIgBN]) {
    const int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;
#pragma unroll
    for (int i = 0; i < TM; i++) As[ty + 16 * i][tx] = r.a[i];
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int j = 0; j < 4; j++) Bs[tid / 32 + 8 * h][tid % 32 + 32 * j] = r.b[h][j];
}

template <int TM>
__global__ void __launch_bounds__(kIgThreads) k_conv1d_igemm(float *y, const float *x, const float *w,
                                                           const float *bias, int64_t Cin, int64_t Lin, int64_t Cout,
                                                           int64_t Lout, int K, int stride, int padding,
                                                           int dilation) {
    const int BM = 16 * TM;
    /* w rows m0.., columns g0.. (a column of padding: a warp's two rows of a column fall in two banks) */
    __shared__ float As[16 * TM][kIgBK + 1];
    __shared__ __align__(16) float Bs[kIgBK][kIgBN];    /* col rows g0.., steps n0.. */
    const int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t m0 = (int64_t)blockIdx.y * BM, n0 = (int64_t)blockIdx.x * kIgBN, b = blockIdx.z;
    const int64_t CK = Cin * K;
    const float *xb = x + b * Cin * Lin;
    float acc[TM][8];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;
    ig_regs<TM> next;
    ig_load<TM>(next, w, xb, 0, m0, n0, CK, Cout, Lin, Lout, K, stride, padding, dilation);
    ig_store<TM>(next, As, Bs);
    __syncthreads();
    for (int64_t g0 = 0; g0 < CK; g0 += kIgBK) {
        const bool more = g0 + kIgBK < CK;
        if (more) ig_load<TM>(next, w, xb, g0 + kIgBK, m0, n0, CK, Cout, Lin, Lout, K, stride, padding, dilation);
#pragma unroll
        for (int kk = 0; kk < kIgBK; kk++) {
            float a[TM];
#pragma unroll
            for (int i = 0; i < TM; i++) a[i] = As[ty * TM + i][kk];
            float4 lo = *reinterpret_cast<const float4 *>(&Bs[kk][tx * 4]);
            float4 hi = *reinterpret_cast<const float4 *>(&Bs[kk][64 + tx * 4]);
            float bv[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
        }
        __syncthreads();
        if (more) {
            ig_store<TM>(next, As, Bs);
            __syncthreads();
        }
    }
#pragma unroll
    for (int i = 0; i < TM; i++) {
        int64_t m = m0 + ty * TM + i;
        if (m >= Cout) continue;
        float bm = bias ? bias[m] : 0.0f;
        float *yr = y + (b * Cout + m) * Lout;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int64_t n = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + (j - 4));
            if (n < Lout) yr[n] = __fadd_rn(acc[i][j], bm);
        }
    }
}

/* y[b, c, t] += bias[c] over y [B, C, L] float32. */
__global__ void k_add_channel_bias(float *y, const float *bias, int64_t C, int64_t L, int64_t n) {
    GRID_STRIDE(i, n) y[i] += bias[(i / L) % C];
}

extern "C" int h3k_im2col1d(float *col, const float *x, int64_t Cin, int64_t Lin, int64_t Lout, int K, int stride,
                            int padding, int dilation, cudaStream_t stream) {
    if (Lout <= 0 || Cin <= 0 || K <= 0) return 0;
    k_im2col1d<<<grid_for(Lout * Cin * K), kThreads, 0, stream>>>(col, x, Cin, Lin, Lout, K, stride, padding,
                                                                    dilation);
    return launched();
}

extern "C" int h3k_conv1d_igemm(float *y, const float *x, const float *w, const float *bias, int64_t B,
                                int64_t Cin, int64_t Lin, int64_t Cout, int64_t Lout, int K, int stride, int padding,
                                int dilation, cudaStream_t stream) {
    if (B <= 0 || Cout <= 0 || Lout <= 0) return 0;
    int tm = Cout >= 64 ? 4 : Cout >= 32 ? 2 : 1;
    int64_t bx = (Lout + kIgBN - 1) / kIgBN, by = (Cout + 16 * tm - 1) / (16 * tm);
    if (bx > 0x7fffffff || by > 65535 || B > 65535) return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)bx, (unsigned)by, (unsigned)B);
    if (tm == 4)
        k_conv1d_igemm<4><<<grid, kIgThreads, 0, stream>>>(y, x, w, bias, Cin, Lin, Cout, Lout, K, stride, padding,
                                                             dilation);
    else if (tm == 2)
        k_conv1d_igemm<2><<<grid, kIgThreads, 0, stream>>>(y, x, w, bias, Cin, Lin, Cout, Lout, K, stride, padding,
                                                             dilation);
    else
        k_conv1d_igemm<1><<<grid, kIgThreads, 0, stream>>>(y, x, w, bias, Cin, Lin, Cout, Lout, K, stride, padding,
                                                             dilation);
    return launched();
}

extern "C" int h3k_add_channel_bias(float *y, const float *bias, int64_t B, int64_t C, int64_t L,
                                    cudaStream_t stream) {
    int64_t n = B * C * L;
    if (n <= 0) return 0;
    k_add_channel_bias<<<grid_for(n), kThreads, 0, stream>>>(y, bias, C, L, n);
    return launched();
}

extern "C" int h3k_conv1d(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, const void *bias, int bdt,
                          int64_t B, int64_t Cin, int64_t Lin, int64_t Cout, int64_t Lout, int K, int stride,
                          int padding, int dilation, int groups, cudaStream_t stream) {
    if (B <= 0 || Cout <= 0 || Lout <= 0) return 0;
    int64_t cout_g = Cout / groups;
    dim3 grid((unsigned)((Lout + 127) / 128), 1, (unsigned)B);
    if (cout_g % 8 == 0) {
        grid.y = (unsigned)(Cout / 8);
        k_conv1d<8><<<grid, 128, 0, stream>>>(y, ydt, x, xdt, w, wdt, bias, bdt, Cin, Lin, Cout, Lout, K, stride,
                                               padding, dilation, groups);
    } else {
        grid.y = (unsigned)Cout;
        k_conv1d<1><<<grid, 128, 0, stream>>>(y, ydt, x, xdt, w, wdt, bias, bdt, Cin, Lin, Cout, Lout, K, stride,
                                               padding, dilation, groups);
    }
    return launched();
}

extern "C" int h3k_conv_transpose1d(void *y, int ydt, const void *x, int xdt, const void *w, int wdt,
                                    const void *bias, int bdt, int64_t B, int64_t Cin, int64_t Lin, int64_t Cout,
                                    int64_t Lout, int K, int stride, int padding, cudaStream_t stream) {
    if (B <= 0 || Cout <= 0 || Lout <= 0) return 0;
    dim3 grid((unsigned)((Lout + 127) / 128), 1, (unsigned)B);
    bool f32 = ydt == H3K_F32 && xdt == H3K_F32 && wdt == H3K_F32 && (!bias || bdt == H3K_F32);
    if (Cout % 8 == 0) {
        grid.y = (unsigned)(Cout / 8);
        if (f32)
            k_conv_transpose1d<8, true><<<grid, 128, 0, stream>>>(y, ydt, x, xdt, w, wdt, bias, bdt, Cin, Lin, Cout,
                                                                   Lout, K, stride, padding);
        else
            k_conv_transpose1d<8, false><<<grid, 128, 0, stream>>>(y, ydt, x, xdt, w, wdt, bias, bdt, Cin, Lin, Cout,
                                                                    Lout, K, stride, padding);
    } else {
        grid.y = (unsigned)Cout;
        k_conv_transpose1d<1, false><<<grid, 128, 0, stream>>>(y, ydt, x, xdt, w, wdt, bias, bdt, Cin, Lin, Cout,
                                                                Lout, K, stride, padding);
    }
    return launched();
}

extern "C" int h3k_upsample1d(void *y, int ydt, const void *x, int xdt, const void *f, int fdt, int K, int ratio,
                              int64_t rows, int64_t L, cudaStream_t stream) {
    if (rows <= 0 || L <= 0) return 0;
    k_upsample1d<<<grid_for(rows * L * ratio), kThreads, 0, stream>>>(y, ydt, x, xdt, f, fdt, K, ratio, rows, L);
    return launched();
}

extern "C" int h3k_downsample1d(void *y, int ydt, const void *x, int xdt, const void *f, int fdt, int K, int ratio,
                                int64_t rows, int64_t L, int64_t Lout, cudaStream_t stream) {
    if (rows <= 0 || Lout <= 0) return 0;
    k_downsample1d<<<grid_for(rows * Lout), kThreads, 0, stream>>>(y, ydt, x, xdt, f, fdt, K, ratio, rows, L, Lout);
    return launched();
}

extern "C" int h3k_snake_beta(void *y, int ydt, const void *x, int xdt, const void *alpha, int adt, const void *beta,
                              int bdt, int64_t B, int64_t C, int64_t L, cudaStream_t stream) {
    int64_t n = B * C * L;
    if (n <= 0) return 0;
    k_snake_beta<<<grid_for(n), kThreads, 0, stream>>>(y, ydt, x, xdt, alpha, adt, beta, bdt, C, L, n);
    return launched();
}

extern "C" int h3k_snake_beta_antialiased(void *y, int ydt, const void *x, int xdt, const void *alpha, int adt,
                                          const void *beta, int bdt, const void *up, int updt, int Ku,
                                          const void *down, int downdt, int Kd, int ratio, int64_t B, int64_t C,
                                          int64_t L, cudaStream_t stream) {
    int64_t rows = B * C;
    if (rows <= 0 || L <= 0) return 0;
    if (ratio < 1 || Ku < 1 || Kd < 1) return (int)cudaErrorInvalidValue;
    size_t smem = act_smem_floats(Ku, Kd, ratio) * sizeof(float);
    if (smem > 48 * 1024) return (int)cudaErrorInvalidValue; /* filters of thousands of taps: none exist */
    int64_t tiles = (L + kActTile - 1) / kActTile;
    if (tiles > 0x7fffffff) return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)tiles, (unsigned)(rows < 65535 ? rows : 65535));
    k_snake_antialiased<<<grid, kActThreads, smem, stream>>>(y, ydt, x, xdt, alpha, adt, beta, bdt, up, updt, Ku,
                                                             down, downdt, Kd, ratio, C, L, rows);
    return launched();
}

extern "C" int h3k_im2col3d(void *col, int cdt, const void *x, int xdt, const h3k_conv3d *g, int64_t n0, int64_t rows,
                            cudaStream_t stream) {
    int64_t n = rows * g->C;
    if (n <= 0 || g->kt * g->kh * g->kw <= 0) return 0;
    k_im2col3d<<<grid_for(n), kThreads, 0, stream>>>(col, cdt, x, xdt, *g, n0, rows);
    return launched();
}

extern "C" int h3k_group_norm(void *y, int ydt, const void *x, int xdt, const float *w, const float *bias, int64_t F,
                              int64_t P, int64_t C, int groups, float eps, int silu, cudaStream_t stream) {
    if (F <= 0 || P <= 0 || C <= 0) return 0;
    if (F > 65535 || groups < 1) return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)groups, (unsigned)F);
    k_group_norm<<<grid, kNormThreads, 0, stream>>>(y, ydt, x, xdt, w, bias, P, C, C / groups, eps, silu);
    return launched();
}
