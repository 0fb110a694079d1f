/* h3_kernels_fp8.h - precision=fp8's kernel (h3_fp8.cu): the per-row E4M3
 * quantiser of weights at load and of a linear's input on the fly. The
 * rule is backend/h3_fp8.h's, and the codes are the CPU quantiser's bit for
 * bit: scale = absmax/448 (0 for a zero row), code = E4M3(x / scale) with
 * IEEE division, round to nearest even, saturation at ±448. A row holding
 * NaN or Inf gets a NaN scale and NaN codes, so the product is NaN and the
 * engine's stage check reports it (a weight is counted before it is
 * quantised, so only activations can meet this). Conventions:
 * h3_kernels.h. */
#ifndef H3_KERNELS_FP8_H
#define H3_KERNELS_FP8_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* q[rows, cols] (E4M3 codes) and scale[rows] (float32) from x[rows, cols]
 * of dtype xdt (F32, BF16 or F16). */
int h3k_quantize_fp8_rows(uint8_t *q, float *scale, const void *x, int xdt, int64_t rows, int64_t cols,
                          cudaStream_t stream);

/* y[m, n] = y[m, n]·(xs[m]·ws[n]) (+ bias[n]) in place over y [M, N] of
 * dtype ydt: the scales of an FP8 GEMM that ran unscaled (Hopper's
 * cuBLASLt has no per-row outer-vector scaling), in the CPU's order. */
int h3k_fp8_rescale(void *y, int ydt, const float *xs, const float *ws, const void *bias, int bdt, int64_t M,
                    int64_t N, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
