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
#include <string.h>

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

static void plan_release(gemm_plan *p);

void h3_cuda_fp8_plans_destroy(cuda_impl *c) {
    for (int i = 0; i < FP8_PLAN_CACHE; i++) plan_release(&c->fp8_plans[i]);
}

static void plan_release(gemm_plan *p) {
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->bl) cublasLtMatrixLayoutDestroy(p->bl);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
    memset(p, 0, sizeof *p);
}

/* The descriptor and layouts of one FP8 shape; 0 when cuBLASLt refuses them. */
static int plan_describe(gemm_plan *p, int64_t M, int64_t N, int64_t K, cudaDataType_t d, int bias, int vec_scales) {
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return 0;
    int okay = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == 0 &&
               cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == 0 &&
               cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == 0;
    if (okay && vec_scales)
        okay = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &vec, sizeof vec) == 0 &&
               cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof vec) == 0;
    if (okay && bias) okay = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &d, sizeof d) == 0;
    okay = okay &&
           cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)N, K) == CUBLAS_STATUS_SUCCESS &&
           cublasLtMatrixLayoutCreate(&p->bl, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)M, K) == CUBLAS_STATUS_SUCCESS &&
           cublasLtMatrixLayoutCreate(&p->c, d, (uint64_t)N, (uint64_t)M, N) == CUBLAS_STATUS_SUCCESS;
    return okay;
}

/* A cached FP8 plan for the shape, or NULL (no algorithm: the caller says
 * so). A shape without one is remembered too (valid = -1, no descriptors),
 * so a bias epilogue cuBLASLt lacks is not asked for again at every call. */
static gemm_plan *find_fp8_plan(h3_backend *b, int64_t M, int64_t N, int64_t K, cudaDataType_t d, int bias,
                                int align, int vec) {
    cuda_impl *c = impl_of(b);
    for (int i = 0; i < FP8_PLAN_CACHE; i++) {
        gemm_plan *p = &c->fp8_plans[i];
        if (p->valid && p->M == M && p->N == N && p->K == K && p->d == d && p->bias == bias && p->align == align &&
            p->vec == vec)
            return p->valid > 0 ? p : NULL;
    }
    gemm_plan *p = &c->fp8_plans[c->next_fp8_plan];
    c->next_fp8_plan = (c->next_fp8_plan + 1) % FP8_PLAN_CACHE;
    plan_release(p);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (plan_describe(p, M, N, K, d, bias, vec)) {
        cublasLtMatmulPreference_t pref = NULL;
        if (cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS) {
            size_t ws = WORKSPACE_BYTES;
            uint32_t al = (uint32_t)align;
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al);
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al);
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al);
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al);
            if (cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->a, p->bl, p->c, p->c, pref, 1, &res, &found) !=
                CUBLAS_STATUS_SUCCESS)
                found = 0;
            cublasLtMatmulPreferenceDestroy(pref);
        }
    }
    if (found < 1) plan_release(p);
    else p->algo = res.algo;
    p->M = M, p->N = N, p->K = K;
    p->ab = CUDA_R_8F_E4M3;
    p->d = d;
    p->bias = bias;
    p->align = align;
    p->vec = vec;
    p->valid = found < 1 ? -1 : 1;
    return found < 1 ? NULL : p;
}

static cudaDataType_t out_type(h3_dtype dt) {
    return dt == H3_BF16 ? CUDA_R_16BF : dt == H3_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* Largest power of two (<= 256) dividing every operand address. */
static int alignment_of(const void *a, const void *b, const void *d) {
    uintptr_t v = (uintptr_t)a | (uintptr_t)b | (uintptr_t)d | 256;
    return (int)(v & (~v + 1));
}

/* D = the scaled product (+ bias): returns FP8_BIAS_FUSED when the bias
 * went in with it, FP8_SCALES_AFTER when D holds the unscaled product (no
 * algorithm with outer-vector scales: the caller runs h3k_fp8_rescale). */
enum { FP8_BIAS_FUSED = 1, FP8_SCALES_AFTER = 2 };

static int gemm_fp8(h3_backend *b, void *D, h3_dtype dtype, const void *W, const float *w_scale, const void *X,
                    const float *x_scale, int64_t M, int64_t N, int64_t K, const void *bias) {
    cuda_impl *c = impl_of(b);
    cudaDataType_t d = out_type(dtype);
    int align = alignment_of(W, X, D), result = 0;
    gemm_plan *p = bias ? find_fp8_plan(b, M, N, K, d, 1, align, 1) : NULL;
    if (p) result = FP8_BIAS_FUSED;
    if (!p) p = find_fp8_plan(b, M, N, K, d, 0, align, 1);
    if (!p && (p = find_fp8_plan(b, M, N, K, d, 0, align, 0))) result = FP8_SCALES_AFTER;
    if (!p) {
        h3_backend_fail(b, H3_ERR_DEVICE,
                        "cuBLASLt: no FP8 algorithm (E4M3, with or without per-row scales) for %lldx%lldx%lld into "
                        "%s (align %d) on %s; use precision=bf16",
                        (long long)M, (long long)N, (long long)K, h3_dtype_name(dtype), align, c->name);
        return 0;
    }
    if (p->vec) { /* cuBLAS's A is w (its rows are D's rows in column-major), B is x */
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
