/* h3_cuda_fp8.c - precision=fp8 on CUDA: the FP8 linear and the weights'
 * quantisation at load (h3_backend.h, backend/h3_fp8.h).
 *
 * A linear with an H3_F8E4M3 weight quantises x per row into the op scratch
 * (codes and scales, kernels/h3_fp8.cu), then runs one cuBLASLt FP8 GEMM:
 * E4M3 × E4M3, float32 accumulation (CUBLAS_COMPUTE_32F, no fast
 * accumulation), the weight's per-row and x's per-row float32 scales
 * applied by cuBLASLt as outer vectors (CUBLASLT_MATMUL_MATRIX_SCALE_
 * OUTER_VEC_32F, cuBLAS 12.9+: D[i,j] = a_scale[i]·b_scale[j]·Σ A·B), and
 * y written in its own dtype (bf16) with the bias fused when an algorithm
 * has that epilogue. Where cuBLASLt has no algorithm with outer-vector
 * scales (Hopper: cuBLAS 13.1 on an H200 has none, measured 2026-12-04;
 * they are Blackwell's), the GEMM runs unscaled into y and one pass then
 * multiplies each output by its row's and column's scales and adds the
 * bias (h3k_fp8_rescale), in the CPU's order: y rounded to bf16 once more
 * than with the fused scales. cuBLASLt's FP8 kernels take only the "TN" layout,
 * which is exactly ours: A = w [N,K] row-major seen transposed, B = x
 * [M,K] row-major seen as K×M, both K-major with K and N multiples of 16
 * (the load keeps other weights in bf16, h3_backend.c).
 *
 * The CPU backend computes the same thing in float32 (h3_cpu_fp8.c) from
 * the same codes and scales; tests/backend/test_cuda_ops.c compares them. */
#include "backend/cuda/h3_backend_cuda_bench.h"
#include "backend/cuda/h3_backend_cuda_impl.h"
#include "kernels/h3_kernels_fp8.h"

#include <stdio.h>

#if !defined(CUBLAS_VERSION) || CUBLAS_VERSION < 120900
#error "precision=fp8 needs cuBLAS 12.9 or newer (per-row outer-vector scales in cuBLASLt)"
#endif

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

h3_status_code h3_cuda_fp8_check_at(int sm, int exact, const char *gpu, h3_status *status) {
    if (exact)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "precision=fp8 on %s in float32 (compute=cuda-f32): the parity mode keeps every weight in "
                       "float32; use compute=cuda with fp8, or precision=bf16", gpu);
    if (sm < 89)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "precision=fp8 on %s: compute capability %d.%d has no FP8 tensor cores (8.9 or newer: Ada, "
                       "Hopper); use precision=bf16 on this GPU", gpu, sm / 10, sm % 10);
    return H3_OK;
}

h3_status_code h3_cuda_fp8_check(h3_backend *b, h3_status *status) {
    cuda_impl *c = impl_of(b);
    char gpu[300];
    snprintf(gpu, sizeof gpu, "GPU %d (%s)", c->device, c->name);
    return h3_cuda_fp8_check_at(c->sm, c->exact, gpu, status);
}

void h3_cuda_quantize_fp8(h3_backend *b, h3_tensor *dst, const h3_tensor *src) {
    cuda_impl *c = impl_of(b);
    ok(b, h3k_quantize_fp8_rows(dst->data, dst->scale, src->data, (int)src->dtype, h3_tensor_rows(src),
                                h3_tensor_cols(src), c->stream),
       "quantize_fp8");
}

size_t h3_cuda_linear_fp8_scratch(const h3_tensor *x) {
    int64_t M = h3_tensor_rows(x), K = h3_tensor_cols(x);
    if (M <= 0 || K <= 0) return 0;
    return align256((size_t)(M * K)) + align256((size_t)M * sizeof(float));
}

/* D = the scaled product (+ bias): returns FP8_BIAS_FUSED when the bias
 * went in with it, FP8_SCALES_AFTER when D holds the unscaled product (no
 * algorithm with outer-vector scales: the caller runs h3k_fp8_rescale). */
enum { FP8_BIAS_FUSED = 1, FP8_SCALES_AFTER = 2 };

static int gemm_fp8(h3_backend *b, void *D, h3_dtype dtype, const void *W, const float *w_scale, const void *X,
                    const float *x_scale, int64_t M, int64_t N, int64_t K, const void *bias) {
    cuda_impl *c = impl_of(b);
    cudaDataType_t d = h3_cuda_type(dtype);
    int align = h3_cuda_alignment(W, X, D), result = 0;
    /* the plans in the order of preference: bias and scales fused, scales fused, neither */
    gemm_key key = {M, N, K, CUDA_R_8F_E4M3, d, 1, align, GEMM_SCALE_OUTER_VEC};
    gemm_plan *p = bias ? h3_cuda_gemm_plan(b, &key) : NULL;
    if (p) result = FP8_BIAS_FUSED;
    key.bias = 0;
    if (!p) p = h3_cuda_gemm_plan(b, &key);
    key.scale = GEMM_SCALE_NONE;
    if (!p && (p = h3_cuda_gemm_plan(b, &key))) result = FP8_SCALES_AFTER;
    if (!p) {
        if (h3_backend_failed(b)) return 0; /* a descriptor failed: that error stands */
        h3_backend_fail(b, H3_ERR_DEVICE,
                        "cuBLASLt: no FP8 algorithm (E4M3, with or without per-row scales) for %lldx%lldx%lld into "
                        "%s (align %d) on %s; use precision=bf16",
                        (long long)M, (long long)N, (long long)K, h3_dtype_name(dtype), align, c->name);
        return 0;
    }
    if (p->key.scale == GEMM_SCALE_OUTER_VEC) { /* cuBLAS's A is w (its rows are D's rows in column-major), B is x */
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale);
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof x_scale);
    }
    if (result & FP8_BIAS_FUSED) cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = cublasLtMatmul(c->lt, p->op, &alpha, W, p->a, X, p->bl, &beta, D, p->c, D, p->c, &p->algo,
                                       c->workspace, WORKSPACE_BYTES, c->stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        h3_backend_fail(b, H3_ERR_DEVICE, "cuBLASLt FP8 matmul %lldx%lldx%lld: status %d", (long long)M,
                        (long long)N, (long long)K, (int)st);
    if (result & FP8_SCALES_AFTER) c->fp8_scaled_after++;
    return result;
}

/* The product with its scales (and the bias, when given) in D. */
static void gemm_fp8_scaled(h3_backend *b, void *D, h3_dtype dtype, const void *W, const float *w_scale,
                            const void *X, const float *x_scale, int64_t M, int64_t N, int64_t K,
                            const h3_tensor *bias) {
    cuda_impl *c = impl_of(b);
    /* the bias epilogue takes a bias of y's type for a bf16/f16 y; an f32 y (whose FP8
     * bias would be bf16) gets it added after */
    int fusable = bias && bias->dtype == dtype && dtype != H3_F32;
    int r = gemm_fp8(b, D, dtype, W, w_scale, X, x_scale, M, N, K, fusable ? bias->data : NULL);
    if (h3_backend_failed(b)) return;
    if (r & FP8_SCALES_AFTER)
        ok(b, h3k_fp8_rescale(D, (int)dtype, x_scale, w_scale, bias ? bias->data : NULL,
                              bias ? (int)bias->dtype : 0, M, N, c->stream),
           "linear (fp8): scales");
    else if (bias && !(r & FP8_BIAS_FUSED))
        ok(b, h3k_row_vector(1, D, (int)dtype, D, (int)dtype, bias->data, (int)bias->dtype, M, N, c->stream),
           "linear (fp8): bias");
}

void h3_cuda_linear_fp8(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias) {
    cuda_impl *c = impl_of(b);
    int64_t M = h3_tensor_rows(x), K = h3_tensor_cols(x), N = w->shape[0];
    if (M == 0 || N == 0) return;
    if (!w->scale || K % 16 != 0 || N % 16 != 0) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "cuda linear (fp8): a weight [%lld,%lld] %s", (long long)N, (long long)K,
                        w->scale ? "whose shape is not in multiples of 16" : "without its scales");
        return;
    }
    char *tmp = h3_cuda_scratch(b, h3_cuda_linear_fp8_scratch(x));
    if (!tmp) return;
    uint8_t *xq = (uint8_t *)tmp;
    float *xs = (float *)(void *)(tmp + align256((size_t)(M * K)));
    if (!ok(b, h3k_quantize_fp8_rows(xq, xs, x->data, (int)x->dtype, M, K, c->stream), "linear (fp8): quantize x"))
        return;
    gemm_fp8_scaled(b, y->data, y->dtype, w->data, w->scale, xq, xs, M, N, K, bias);
}

/* ---- h3-bench's hooks (h3_backend_cuda_bench.h) ---------------------------------------- */

void h3_backend_cuda_fp8_quantize(h3_backend *b, h3_tensor *codes, h3_tensor *scales, const h3_tensor *x) {
    cuda_impl *c = impl_of(b);
    ok(b, h3k_quantize_fp8_rows(codes->data, scales->data, x->data, (int)x->dtype, h3_tensor_rows(x),
                                h3_tensor_cols(x), c->stream),
       "fp8 quantize (bench)");
}

void h3_backend_cuda_fp8_gemm(h3_backend *b, h3_tensor *y, const h3_tensor *codes, const h3_tensor *scales,
                              const h3_tensor *w) {
    gemm_fp8_scaled(b, y->data, y->dtype, w->data, w->scale, codes->data, scales->data, h3_tensor_rows(codes),
                    w->shape[0], h3_tensor_cols(codes), NULL);
}

uint64_t h3_backend_cuda_fp8_scaled_after(const h3_backend *b) { return impl_of((h3_backend *)b)->fp8_scaled_after; }
