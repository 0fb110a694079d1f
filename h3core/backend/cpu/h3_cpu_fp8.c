/* h3_cpu_fp8.c - precision=fp8 on the CPU: the emulation in float32 of the
 * CUDA backend's FP8 linear (h3_cuda_fp8.c), so the fp8 path runs end to
 * end in CI and the GPU's results have a reference.
 *
 * Weights are kept as E4M3 codes with per-row scales, as on the GPU (so
 * the memory tally is the GPU's bytes per weight). A linear quantises each
 * row of x with its own scale, exactly as the CUDA quantiser does, widens
 * the codes of both operands to their E4M3 values in float32 (exact), runs
 * one float32 GEMM (products of two E4M3 values are exact in float32; the
 * sum is float32, the tensor cores' accumulator), and scales each output by
 * its row's and its column's scales. The GPU differs only by the order of
 * its float32 sums and by rounding y to bf16. */
#include "backend/cpu/h3_backend_cpu_impl.h"
#include "backend/h3_fp8.h"

#include <cblas.h>
#include <math.h>

void h3_cpu_quantize_fp8(h3_backend *b, h3_tensor *dst, const h3_tensor *src) {
    if (!h3_cpu_need_f32(b, "quantize_fp8", src)) return;
    int64_t rows = h3_tensor_rows(src), cols = h3_tensor_cols(src);
    const float *x = src->data;
    uint8_t *q = dst->data;
    float *s = dst->scale;
    for (int64_t r = 0; r < rows; r++) {
        int64_t bad = h3_fp8_quantize_row(x + r * cols, cols, q + r * cols, s + r);
        if (bad) {
            h3_backend_fail(b, H3_ERR_NONFINITE, "cpu quantize_fp8: row %lld of %lld holds %lld NaN or Inf values",
                            (long long)r, (long long)rows, (long long)bad);
            return;
        }
    }
}

void h3_cpu_linear_fp8(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias) {
    if (!h3_cpu_need_f32(b, "linear", y) || !h3_cpu_need_f32(b, "linear", x) || !h3_cpu_need_f32(b, "linear", bias))
        return;
    if (!w->scale) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "cpu linear: an f8e4m3 weight without its scales");
        return;
    }
    int64_t M = h3_tensor_rows(x), K = h3_tensor_cols(x), N = w->shape[0];
    if (M == 0 || N == 0) return;
    /* scratch: x's E4M3 values [M, K], w's [N, K], x's scales [M], x's codes [M, K] (bytes) */
    size_t nx = (size_t)(M * K), nw = (size_t)(N * K);
    float *xs = h3_cpu_scratch(b, nx + nw + (size_t)M + (nx + 3) / 4);
    if (!xs) return;
    float *ws = xs + nx, *sx = ws + nw;
    uint8_t *qx = (uint8_t *)(sx + M);
    float val[256]; /* the codes' values: a widening is one load (256 conversions a call, per rank) */
    for (int i = 0; i < 256; i++) val[i] = h3_fp8_to_f32((uint8_t)i);
    const float *X = x->data;
    for (int64_t m = 0; m < M; m++) {
        int64_t bad = h3_fp8_quantize_row(X + m * K, K, qx + m * K, sx + m);
        if (bad) {
            h3_backend_fail(b, H3_ERR_NONFINITE, "cpu linear (fp8): row %lld of x holds %lld NaN or Inf values",
                            (long long)m, (long long)bad);
            return;
        }
    }
    for (size_t i = 0; i < nx; i++) xs[i] = val[qx[i]];
    const uint8_t *qw = w->data;
    for (size_t i = 0; i < nw; i++) ws[i] = val[qw[i]];
    float *Y = y->data;
    if (K > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, xs, (int)K, ws, (int)K,
                    0.0f, Y, (int)N);
    const float *sw = w->scale, *bb = bias ? bias->data : NULL;
    for (int64_t m = 0; m < M; m++) {
        float *yr = Y + m * N;
        for (int64_t n = 0; n < N; n++) {
            float acc = K > 0 ? yr[n] : 0.0f;
            yr[n] = acc * (sx[m] * sw[n]) + (bb ? bb[n] : 0.0f);
        }
    }
}
