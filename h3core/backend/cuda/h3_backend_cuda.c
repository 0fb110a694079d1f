/* h3_backend_cuda.c - the CUDA backend: bf16 compute, cuBLASLt GEMMs and
 * our own kernels (kernels/h3_*.cu), all on one stream. This file creates
 * the backend and holds its memory, uploads, GEMMs, core ops, dense
 * attention and op table; VSA-H3 is in h3_cuda_vsa.c, the VAE decoders'
 * ops in h3_cuda_vae.c (what they share: h3_backend_cuda_impl.h).
 *
 * Memory: weights and arena chunks are plain cudaMalloc allocations; a
 * backend-owned scratch buffer (dtype conversions of GEMM operands, the
 * transposed V of the Hopper attention) grows on first use and is kept, so
 * a steady-state denoising step allocates nothing.
 *
 * Errors: every launch is checked with cudaGetLastError and the first
 * failure becomes the backend's sticky error, with the CUDA error string.
 * Kernels that meet an index outside its table (a selector, a gather index)
 * set a bit in a device word instead of faulting; the word is read back at
 * the next synchronize or download. Nothing here aborts.
 *
 * Precision (docs/spec/h3-transformer.md §3.8): activations are bf16,
 * GEMMs take bf16 operands and accumulate in fp32 (CUBLAS_COMPUTE_32F);
 * weights loaded as H3_WEIGHT_F32 stay f32 and run as true fp32 GEMMs (no
 * TF32), weights loaded as H3_WEIGHT_F16 become f16 (the video VAE's
 * autocast recipe). Elementwise kernels compute in fp32 and round once per
 * output. */
#include "backend/cuda/h3_backend_cuda_bench.h"

#include "backend/cuda/h3_backend_cuda_impl.h"
#include "kernels/h3_kernels.h"
#include "kernels/h3_kernels_attention.h"
#include "kernels/h3_kernels_vsa.h"

#include <glib.h>
#include <math.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Weight uploads (tools/h3-bench-load measures the three on the H200):
 *  - pageable (the default): cudaMemcpy from the mmap'd file; the driver
 *    stages through its own pinned buffers.
 *  - pinned (H3_CUDA_UPLOAD=pinned): a ring of our pinned buffers; the CPU
 *    copies chunk k+1 out of the file while the copy engine moves chunk k.
 *    Measured slower than the driver's staging on 2026-12-03 (5.5 against
 *    7.3 GB/s, file in the page cache): one memcpy thread is the limit.
 *  - register (H3_CUDA_UPLOAD=register): the file's pages are page-locked
 *    in place (cudaHostRegister, read-only) and copied by DMA with no CPU copy.
 * Copies under STAGE_MIN bytes are always plain. */
#define STAGE_BYTES ((size_t)32 << 20)
#define STAGE_MIN ((size_t)1 << 20)
enum { UPLOAD_PAGEABLE = 0, UPLOAD_PINNED, UPLOAD_REGISTER };

/* ---- errors ------------------------------------------------------------------ */

static int lt_ok(h3_backend *b, cublasStatus_t st, const char *what) {
    if (st == CUBLAS_STATUS_SUCCESS) return 1;
    h3_backend_fail(b, H3_ERR_DEVICE, "cuBLASLt %s: status %d", what, (int)st);
    return 0;
}

/* Reads and clears the kernels' error word (synchronizes the stream). */
static int check_flag(h3_backend *b) {
    cuda_impl *c = impl_of(b);
    int flag = 0;
    if (!ok(b, cudaMemcpyAsync(&flag, c->flag, sizeof flag, cudaMemcpyDeviceToHost, c->stream), "read error word"))
        return 1;
    if (!ok(b, cudaStreamSynchronize(c->stream), "synchronize")) return 1;
    if (flag == 0) return 0;
    cudaMemsetAsync(c->flag, 0, sizeof(int), c->stream);
    if (flag & H3K_ERR_SELECTOR)
        h3_backend_fail(b, H3_ERR_INTERNAL, "cuda modulate/gated_residual: a selector lies outside its table");
    else if (flag & H3K_ERR_GATHER)
        h3_backend_fail(b, H3_ERR_INVALID_ARGUMENT, "cuda gather_rows: an index lies outside the source rows");
    else if (flag & H3K_ERR_VSA_TABLE)
        h3_backend_fail(b, H3_ERR_INTERNAL,
                        "cuda vsa_attention: the tile tables are not a tiling of the sequence (a tile size outside "
                        "1..tile_elems, or an untile_index entry outside its tile or left unused)");
    else if (flag & H3K_ERR_VSA_SELECT)
        h3_backend_fail(b, H3_ERR_INTERNAL, "cuda vsa_attention: a top-k selection came out short (kernel bug)");
    else if (flag & H3K_ERR_NONFINITE_RGB)
        h3_backend_fail(b, H3_ERR_NONFINITE, "cuda rgb8_from_planar: the decoded frames hold NaN or Inf values");
    else if (flag & H3K_ERR_NONFINITE_CLAMP)
        h3_backend_fail(b, H3_ERR_NONFINITE, "cuda clamp: the values hold NaN or Inf");
    else
        h3_backend_fail(b, H3_ERR_INVALID_ARGUMENT, "cuda scatter_rows: an index lies outside the destination rows");
    return 1;
}

/* ---- memory ------------------------------------------------------------------ */

static void plan_release(gemm_plan *p);

static void cuda_destroy(h3_backend *b) {
    cuda_impl *c = impl_of(b);
    for (int i = 0; i < PLAN_CACHE; i++) plan_release(&c->plans[i]);
    if (c->stream) cudaStreamSynchronize(c->stream);
    for (int i = 0; i < 4; i++)
        if (c->vsa_events[i]) cudaEventDestroy(c->vsa_events[i]);
    for (int i = 0; i < STAGE_SLOTS; i++) {
        if (c->stage[i]) cudaFreeHost(c->stage[i]);
        if (c->stage_done[i]) cudaEventDestroy(c->stage_done[i]);
    }
    cudaFree(c->workspace);
    cudaFree(c->scratch);
    cudaFree(c->flag); /* the words' block */
    if (c->lt) cublasLtDestroy(c->lt);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
    free(b);
}

static h3_dtype weight_dtype_for(int exact, h3_weight_type type) {
    if (type == H3_WEIGHT_F32 || exact) return H3_F32;
    if (type == H3_WEIGHT_F16) return H3_F16;
    return H3_BF16;
}

static h3_dtype cuda_weight_dtype(h3_backend *b, h3_weight_type type, h3_dtype file_dtype) {
    (void)file_dtype;
    return weight_dtype_for(impl_of(b)->exact, type);
}

static void *cuda_alloc(h3_backend *b, size_t bytes) {
    void *p = NULL;
    (void)b;
    if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
        cudaGetLastError(); /* an out-of-memory is reported by the caller, not by the next launch */
        return NULL;
    }
    return p;
}

static void cuda_free(h3_backend *b, void *p) {
    (void)b;
    cudaFree(p);
}

/* The pinned ring, once. Without it (pinned memory refused) uploads are
 * plain pageable copies; that is slower, not wrong, and said on the log. */
static int stage_ready(cuda_impl *c) {
    if (c->stage_state) return c->stage_state > 0;
    const char *why = NULL;
    for (int i = 0; i < STAGE_SLOTS && !why; i++) {
        if (cudaHostAlloc(&c->stage[i], STAGE_BYTES, cudaHostAllocDefault) != cudaSuccess ||
            cudaEventCreateWithFlags(&c->stage_done[i], cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            why = "pinned host memory refused";
        }
    }
    c->stage_state = why ? -1 : 1;
    if (why) g_warning("h3core cuda:%d: uploads use pageable copies (%s); weight loading is slower", c->device, why);
    return c->stage_state > 0;
}

static int upload_plain(h3_backend *b, void *dst, const void *src, size_t bytes) {
    cuda_impl *c = impl_of(b);
    if (!ok(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream), "upload")) return 1;
    return ok(b, cudaStreamSynchronize(c->stream), "upload") ? 0 : 1;
}

/* Page-locks the source's pages in place for the copy. A refusal (some
 * kernels refuse file-backed pages) turns this backend to pageable copies,
 * said once on the log. */
static int upload_registered(h3_backend *b, void *dst, const void *src, size_t bytes) {
    cuda_impl *c = impl_of(b);
    size_t page = 4096, start = (size_t)src & ~(page - 1), end = ((size_t)src + bytes + page - 1) & ~(page - 1);
    if (cudaHostRegister((void *)start, end - start, cudaHostRegisterReadOnly) != cudaSuccess) {
        cudaError_t e = cudaGetLastError();
        g_warning("h3core cuda:%d: cudaHostRegister refused the weights' pages (%s); uploads use pageable copies",
                  c->device, cudaGetErrorString(e));
        c->upload_mode = UPLOAD_PAGEABLE;
        return upload_plain(b, dst, src, bytes);
    }
    int rc = upload_plain(b, dst, src, bytes);
    cudaHostUnregister((void *)start);
    return rc;
}

static int cuda_upload(h3_backend *b, void *dst, const void *src, size_t bytes) {
    cuda_impl *c = impl_of(b);
    if (bytes < STAGE_MIN || c->upload_mode == UPLOAD_PAGEABLE) return upload_plain(b, dst, src, bytes);
    if (c->upload_mode == UPLOAD_REGISTER) return upload_registered(b, dst, src, bytes);
    if (!stage_ready(c)) return upload_plain(b, dst, src, bytes);
    for (size_t off = 0; off < bytes; off += STAGE_BYTES) {
        size_t n = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
        int s = c->stage_next;
        c->stage_next = (s + 1) % STAGE_SLOTS;
        if (!ok(b, cudaEventSynchronize(c->stage_done[s]), "upload")) return 1; /* slot's last copy is done */
        memcpy(c->stage[s], (const char *)src + off, n);
        if (!ok(b, cudaMemcpyAsync((char *)dst + off, c->stage[s], n, cudaMemcpyHostToDevice, c->stream), "upload") ||
            !ok(b, cudaEventRecord(c->stage_done[s], c->stream), "upload"))
            return 1;
    }
    return 0; /* in flight on the stream; src is no longer needed */
}

static int cuda_download(h3_backend *b, void *dst, const void *src, size_t bytes) {
    cuda_impl *c = impl_of(b);
    if (!ok(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), "download")) return 1;
    if (!ok(b, cudaStreamSynchronize(c->stream), "download")) return 1;
    return check_flag(b);
}

static int cuda_synchronize(h3_backend *b) {
    cuda_impl *c = impl_of(b);
    if (!ok(b, cudaStreamSynchronize(c->stream), "synchronize")) return 1;
    return check_flag(b) || h3_backend_failed(b);
}

/* cudaFree waits for the work queued on the device, so no kernel still
 * reads the buffer. */
static void cuda_trim_scratch(h3_backend *b) {
    cuda_impl *c = impl_of(b);
    if (!c->scratch) return;
    c->scratch_epoch++;
    cudaFree(c->scratch);
    h3_backend_track_scratch(b, -(int64_t)c->scratch_size);
    c->scratch = NULL;
    c->scratch_size = 0;
}

/* Growing the scratch waits for the stream (cudaFree does), which happens
 * only while warming up. */
void *h3_cuda_scratch(h3_backend *b, size_t bytes) {
    cuda_impl *c = impl_of(b);
    c->scratch_epoch++;
    if (bytes <= c->scratch_size) return c->scratch;
    size_t want = H3_CUDA_SCRATCH_GROWN(bytes);
    if (h3_backend_limit_refuses(b, want, c->scratch_size, "op scratch")) return NULL;
    cudaFree(c->scratch);
    h3_backend_track_scratch(b, -(int64_t)c->scratch_size);
    c->scratch = NULL;
    c->scratch_size = 0;
    if (h3_backend_alloc_refused(b) || cudaMalloc(&c->scratch, want) != cudaSuccess) {
        cudaGetLastError();
        c->scratch = NULL;
        h3_backend_fail(b, H3_ERR_NO_MEMORY, "cuda: cannot allocate %zu bytes of scratch", want);
        return NULL;
    }
    c->scratch_size = want;
    h3_backend_track_scratch(b, (int64_t)want);
    return c->scratch;
}

static size_t align_up(size_t n) { return (n + 255) & ~(size_t)255; }

/* ---- GEMM ------------------------------------------------------------------------ */

cudaDataType_t h3_cuda_type(h3_dtype dt) {
    return dt == H3_BF16 ? CUDA_R_16BF : dt == H3_F16 ? CUDA_R_16F : CUDA_R_32F;
}

int h3_cuda_alignment(const void *a, const void *b, const void *d) {
    uintptr_t v = (uintptr_t)a | (uintptr_t)b | (uintptr_t)d | 256;
    return (int)(v & (~v + 1));
}

/* ---- GEMM plans: one cache for bf16 and FP8, one release ------------------- */

/* Frees a plan's descriptors (whichever exist) and marks it free. */
static void plan_release(gemm_plan *p) {
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->bl) cublasLtMatrixLayoutDestroy(p->bl);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
    memset(p, 0, sizeof *p);
}

static int same_key(const gemm_key *x, const gemm_key *y) {
    return x->M == y->M && x->N == y->N && x->K == y->K && x->ab == y->ab && x->d == y->d && x->bias == y->bias &&
           x->align == y->align && x->scale == y->scale;
}

/* The descriptor and layouts of the key; 0 when cuBLASLt refuses an
 * attribute (an epilogue or a scale mode it lacks: no algorithm) or fails
 * to create one (also the sticky error). Row-major y[M,N] = x[M,K]·w[N,K]ᵀ
 * is column-major yᵀ = w·xᵀ: A = w seen as K×N (op T), B = x seen as K×M,
 * D = yᵀ as N×M; cuBLASLt's FP8 kernels take exactly this "TN" layout. */
static int plan_describe(h3_backend *b, gemm_plan *p, const gemm_key *k) {
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = k->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    cudaDataType_t d = k->d;
    if (!lt_ok(b, cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc")) return 0;
    int okay = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == 0 &&
               cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == 0 &&
               cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == 0;
    if (okay && k->scale == GEMM_SCALE_OUTER_VEC)
        okay = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &vec, sizeof vec) == 0 &&
               cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof vec) == 0;
    if (okay && k->bias)
        okay = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &d, sizeof d) == 0;
    return okay &&
           lt_ok(b, cublasLtMatrixLayoutCreate(&p->a, k->ab, (uint64_t)k->K, (uint64_t)k->N, k->K), "layout") &&
           lt_ok(b, cublasLtMatrixLayoutCreate(&p->bl, k->ab, (uint64_t)k->K, (uint64_t)k->M, k->K), "layout") &&
           lt_ok(b, cublasLtMatrixLayoutCreate(&p->c, k->d, (uint64_t)k->N, (uint64_t)k->M, k->N), "layout");
}

/* cuBLASLt's first algorithm for the described plan within our workspace
 * and the key's alignment into p->algo; 0 when it has none. */
static int plan_choose(h3_backend *b, gemm_plan *p, int align) {
    cuda_impl *c = impl_of(b);
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (!lt_ok(b, cublasLtMatmulPreferenceCreate(&pref), "preference")) return 0;
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
    if (found >= 1) p->algo = res.algo;
    return found >= 1;
}

gemm_plan *h3_cuda_gemm_plan(h3_backend *b, const gemm_key *key) {
    cuda_impl *c = impl_of(b);
    for (int i = 0; i < PLAN_CACHE; i++) {
        gemm_plan *p = &c->plans[i];
        if (p->valid && same_key(&p->key, key)) return p->valid > 0 ? p : NULL;
    }
    gemm_plan *p = &c->plans[c->next_plan];
    c->next_plan = (c->next_plan + 1) % PLAN_CACHE;
    plan_release(p);
    int found = plan_describe(b, p, key) && plan_choose(b, p, key->align);
    if (!found) plan_release(p); /* the caller decides: another key, or the error */
    p->key = *key;
    p->valid = found ? 1 : -1;
    return found ? p : NULL;
}

int h3_cuda_gemm(h3_backend *b, void *D, cudaDataType_t dtype, const void *W, const void *X, cudaDataType_t ab,
                 int64_t M, int64_t N, int64_t K, const void *bias) {
    cuda_impl *c = impl_of(b);
    int align = h3_cuda_alignment(W, X, D);
    gemm_key key = {M, N, K, ab, dtype, 1, align, GEMM_SCALE_NONE};
    gemm_plan *p = bias ? h3_cuda_gemm_plan(b, &key) : NULL;
    if (!p) {
        bias = NULL;
        key.bias = 0;
        p = h3_cuda_gemm_plan(b, &key);
    }
    if (!p) {
        if (!h3_backend_failed(b))
            h3_backend_fail(b, H3_ERR_DEVICE, "cuBLASLt: no algorithm for %lldx%lldx%lld (types %d/%d, align %d)",
                            (long long)M, (long long)N, (long long)K, (int)ab, (int)dtype, align);
        return 0;
    }
    if (bias) cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    float alpha = 1.0f, beta = 0.0f;
    lt_ok(b, cublasLtMatmul(c->lt, p->op, &alpha, W, p->a, X, p->bl, &beta, D, p->c, D, p->c, &p->algo,
                            c->workspace, WORKSPACE_BYTES, c->stream),
          "matmul");
    return bias != NULL;
}

/* cuBLASLt writes bf16/f16 products as that type or as f32; f32 products
 * only as f32. */
static int gemm_can_write(h3_dtype ab, h3_dtype out) { return out == ab || out == H3_F32; }

/* The scratch of a linear: x converted to the weight's type when it differs
 * (xbytes), and an f32 product when the GEMM cannot write y's type (obytes). */
static void linear_scratch_parts(const h3_tensor *y, const h3_tensor *x, const h3_tensor *w, size_t *xbytes,
                                 size_t *obytes) {
    int64_t M = h3_tensor_rows(x), K = h3_tensor_cols(x), N = w->shape[0];
    h3_dtype ab = w->dtype, out = gemm_can_write(ab, y->dtype) ? y->dtype : H3_F32;
    if (ab == H3_F8E4M3) { /* precision=fp8: x's codes and scales (h3_cuda_fp8.c) */
        *xbytes = h3_cuda_linear_fp8_scratch(x);
        *obytes = 0;
        return;
    }
    *xbytes = x->dtype == ab ? 0 : align_up((size_t)(M * K) * h3_dtype_size(ab));
    *obytes = out == y->dtype ? 0 : align_up((size_t)(M * N) * 4);
}

static void cuda_linear(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias) {
    cuda_impl *c = impl_of(b);
    int64_t M = h3_tensor_rows(x), K = h3_tensor_cols(x), N = w->shape[0];
    h3_dtype ab = w->dtype;
    if (ab == H3_I32) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "cuda linear: i32 weight");
        return;
    }
    if (ab == H3_F8E4M3) {
        h3_cuda_linear_fp8(b, y, x, w, bias); /* precision=fp8: h3_cuda_fp8.c */
        return;
    }
    if (M == 0 || N == 0) return;
    h3_dtype out = gemm_can_write(ab, y->dtype) ? y->dtype : H3_F32;
    size_t xbytes, obytes;
    linear_scratch_parts(y, x, w, &xbytes, &obytes);
    char *tmp = NULL;
    if (xbytes + obytes) {
        tmp = h3_cuda_scratch(b, xbytes + obytes);
        if (!tmp) return;
    }
    const void *X = x->data;
    if (xbytes) {
        if (!ok(b, h3k_convert(tmp, ab, x->data, x->dtype, M * K, c->stream), "linear: convert x")) return;
        X = tmp;
    }
    void *D = obytes ? (void *)(tmp + xbytes) : y->data;
    int fused_bias = bias && bias->dtype == out;
    if (K == 0) {
        if (!ok(b, h3k_fill(D, out, M * N, 0.0f, c->stream), "linear: fill")) return;
        fused_bias = 0;
    } else {
        fused_bias = h3_cuda_gemm(b, D, h3_cuda_type(out), w->data, X, h3_cuda_type(ab), M, N, K,
                                  fused_bias ? bias->data : NULL);
        if (h3_backend_failed(b)) return;
    }
    if (bias && !fused_bias &&
        !ok(b, h3k_row_vector(1, D, out, D, out, bias->data, bias->dtype, M, N, c->stream), "linear: bias"))
        return;
    if (obytes) ok(b, h3k_convert(y->data, y->dtype, D, H3_F32, M * N, c->stream), "linear: convert y");
}

/* ---- elementwise and row ops ----------------------------------------------------- */

#define DT(t) ((t) ? (int)(t)->dtype : H3K_NONE)
#define PTR(t) ((t) ? (t)->data : NULL)

static void cuda_rms_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, int64_t width,
                          float eps) {
    ok(b, h3k_rms_norm(y->data, y->dtype, x->data, x->dtype, PTR(w), DT(w), h3_tensor_numel(x) / width, width, eps,
                       impl_of(b)->stream),
       "rms_norm");
}

static void cuda_layer_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                            const h3_tensor *bias, float eps) {
    ok(b, h3k_layer_norm(y->data, y->dtype, x->data, x->dtype, PTR(w), DT(w), PTR(bias), DT(bias),
                         h3_tensor_rows(x), h3_tensor_cols(x), eps, impl_of(b)->stream),
       "layer_norm");
}

static void cuda_binary(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x0, const h3_tensor *x1) {
    ok(b, h3k_binary(op, y->data, y->dtype, x0->data, x0->dtype, x1->data, x1->dtype, h3_tensor_numel(y),
                     impl_of(b)->stream),
       op ? "mul" : "add");
}

static void cuda_row_vector(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x, const h3_tensor *v) {
    /* h3k op 0 is mul, 1 add: the same numbering as the vtable's */
    ok(b, h3k_row_vector(op, y->data, y->dtype, x->data, x->dtype, v->data, v->dtype, h3_tensor_rows(x),
                         h3_tensor_cols(x), impl_of(b)->stream),
       "row_vector");
}

static void cuda_scale(h3_backend *b, h3_tensor *y, const h3_tensor *x, float alpha) {
    ok(b, h3k_scale(y->data, y->dtype, x->data, x->dtype, h3_tensor_numel(y), alpha, impl_of(b)->stream), "scale");
}

static void cuda_unary(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x) {
    ok(b, h3k_unary(op, y->data, y->dtype, x->data, x->dtype, h3_tensor_numel(y), impl_of(b)->stream), "unary");
}

static void cuda_swiglu(h3_backend *b, h3_tensor *y, const h3_tensor *u, int value_first) {
    ok(b, h3k_swiglu(y->data, y->dtype, u->data, u->dtype, h3_tensor_rows(y), h3_tensor_cols(y), value_first,
                     impl_of(b)->stream),
       "swiglu");
}

static void cuda_modulate(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *shift,
                          const h3_tensor *scale, const h3_tensor *sel) {
    cuda_impl *c = impl_of(b);
    ok(b, h3k_modulate(y->data, y->dtype, x->data, x->dtype, shift->data, shift->dtype, scale->data, scale->dtype,
                       sel->data, h3_tensor_rows(x), h3_tensor_cols(x), h3_tensor_rows(shift), c->flag, c->stream),
       "modulate");
}

static void cuda_gated_residual(h3_backend *b, h3_tensor *x, const h3_tensor *gate, const h3_tensor *y,
                                const h3_tensor *sel) {
    cuda_impl *c = impl_of(b);
    ok(b, h3k_gated_residual(x->data, x->dtype, gate->data, gate->dtype, y->data, y->dtype, sel->data,
                             h3_tensor_rows(x), h3_tensor_cols(x), h3_tensor_rows(gate), c->flag, c->stream),
       "gated_residual");
}

static void cuda_rms_norm_modulate(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, float eps,
                                   const h3_tensor *shift, const h3_tensor *scale, const h3_tensor *sel) {
    cuda_impl *c = impl_of(b);
    ok(b, h3k_rms_norm_modulate(y->data, y->dtype, x->data, x->dtype, PTR(w), DT(w), eps, shift->data, shift->dtype,
                                scale->data, scale->dtype, sel->data, h3_tensor_rows(x), h3_tensor_cols(x),
                                h3_tensor_rows(shift), c->flag, c->stream),
       "rms_norm_modulate");
}

static void cuda_rope(h3_backend *b, h3_tensor *x, const h3_tensor *cos, const h3_tensor *sin, int n_heads,
                      int head_dim, int rot_dim) {
    ok(b, h3k_head_norm_rope(x->data, x->dtype, 0, NULL, H3K_NONE, 0.0f, cos->data, sin->data, h3_tensor_rows(x),
                             n_heads, head_dim, rot_dim, impl_of(b)->stream),
       "rope");
}

static void cuda_qk_norm_rope(h3_backend *b, h3_tensor *x, const h3_tensor *w, float eps, const h3_tensor *cos,
                              const h3_tensor *sin, int n_heads, int head_dim, int rot_dim) {
    ok(b, h3k_head_norm_rope(x->data, x->dtype, 1, PTR(w), DT(w), eps, cos->data, sin->data, h3_tensor_rows(x),
                             n_heads, head_dim, rot_dim, impl_of(b)->stream),
       "qk_norm_rope");
}

static void attention_args_at(int sm, int path, h3k_attention_args *a, const h3_tensor *o, const h3_tensor *q,
                              const h3_tensor *k, const h3_tensor *v, int n_heads, int n_kv_heads, int head_dim,
                              int causal, float scale) {
    memset(a, 0, sizeof *a);
    a->o = o->data;
    a->q = q->data;
    a->k = k->data;
    a->v = v->data;
    a->dt = q->dtype;
    a->Sq = h3_tensor_rows(q);
    a->Skv = h3_tensor_rows(k);
    a->n_heads = n_heads;
    a->n_kv_heads = n_kv_heads;
    a->head_dim = head_dim;
    a->causal = causal;
    a->scale = scale;
    a->path = path;
    a->sm = sm;
}

static void attention_args(h3_backend *b, h3k_attention_args *a, h3_tensor *o, const h3_tensor *q,
                           const h3_tensor *k, const h3_tensor *v, int n_heads, int n_kv_heads, int head_dim,
                           int causal, float scale) {
    cuda_impl *c = impl_of(b);
    attention_args_at(c->sm, (int)c->attention, a, o, q, k, v, n_heads, n_kv_heads, head_dim, causal, scale);
}

/* cuda_attention's checks, then the scratch its kernel takes. */
static int attention_runs(const h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                          int head_dim) {
    return q->dtype == k->dtype && q->dtype == v->dtype && q->dtype == o->dtype && q->dtype != H3_I32 &&
           head_dim <= 256;
}

static void cuda_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                           int n_heads, int n_kv_heads, int head_dim, int causal, float scale) {
    cuda_impl *c = impl_of(b);
    if (!attention_runs(o, q, k, v, 0)) {
        h3_backend_fail(b, H3_ERR_UNSUPPORTED, "cuda attention: q/k/v/o are %s/%s/%s/%s, want one float dtype",
                        h3_dtype_name(q->dtype), h3_dtype_name(k->dtype), h3_dtype_name(v->dtype),
                        h3_dtype_name(o->dtype));
        return;
    }
    if (head_dim > 256) {
        h3_backend_fail(b, H3_ERR_UNSUPPORTED, "cuda attention: head_dim %d (at most 256)", head_dim);
        return;
    }
    h3k_attention_args a;
    attention_args(b, &a, o, q, k, v, n_heads, n_kv_heads, head_dim, causal, scale);
    size_t need = h3k_attention_scratch(&a);
    if (need) {
        a.scratch = h3_cuda_scratch(b, need);
        a.scratch_size = c->scratch_size;
        if (!a.scratch) return;
    }
    ok(b, h3k_attention(&a, c->stream), h3k_attention_path_name(h3k_attention_path(&a)));
}

static void cuda_gather_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx) {
    cuda_impl *c = impl_of(b);
    if (dst->dtype != src->dtype) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "gather_rows: dtype mismatch");
        return;
    }
    ok(b, h3k_gather_rows(dst->data, src->data, idx->data, h3_tensor_numel(idx), h3_tensor_rows(src),
                          h3_tensor_cols(src) * (int64_t)h3_dtype_size(src->dtype), c->flag, c->stream),
       "gather_rows");
}

static void cuda_scatter_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx) {
    cuda_impl *c = impl_of(b);
    if (dst->dtype != src->dtype) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "scatter_rows: dtype mismatch");
        return;
    }
    ok(b, h3k_scatter_rows(dst->data, src->data, idx->data, h3_tensor_numel(idx), h3_tensor_rows(dst),
                           h3_tensor_cols(src) * (int64_t)h3_dtype_size(src->dtype), c->flag, c->stream),
       "scatter_rows");
}

static void cuda_copy(h3_backend *b, h3_tensor *dst, const h3_tensor *src) {
    ok(b, h3k_convert(dst->data, dst->dtype, src->data, src->dtype, h3_tensor_numel(src), impl_of(b)->stream),
       "copy");
}

static void cuda_fill(h3_backend *b, h3_tensor *dst, float value) {
    ok(b, h3k_fill(dst->data, dst->dtype, h3_tensor_numel(dst), value, impl_of(b)->stream), "fill");
}

static void cuda_fill_random(h3_backend *b, h3_tensor *dst, const h3_st_random *v, h3_st_dtype round_to) {
    int64_t n = h3_tensor_numel(dst), rows = dst->shape[0] ? dst->shape[0] : 1, cols = n / rows;
    h3k_random_fill f = {.key = v->key, .lo = v->lo, .hi = v->hi, .offset = v->offset,
                         .row_stride = v->row_stride ? v->row_stride : cols,
                         .part_rows = v->part_rows ? v->part_rows : rows, .part_stride = v->part_stride,
                         .round_dt = round_to == H3_ST_BF16 ? H3K_BF16 : round_to == H3_ST_F16 ? H3K_F16 : H3K_F32};
    ok(b, h3k_fill_random(dst->data, dst->dtype, rows, cols, &f, impl_of(b)->stream), "fill_random");
}

/* One pass on the stream, one 8-byte copy back (the counter lives beside
 * the error word, made at creation: nothing is allocated here). */
static int64_t cuda_count_nonfinite(h3_backend *b, const h3_tensor *t) {
    cuda_impl *c = impl_of(b);
    unsigned long long n = 0;
    if (!ok(b, cudaMemsetAsync(c->count, 0, sizeof n, c->stream), "count_nonfinite") ||
        !ok(b, h3k_count_nonfinite(t->data, t->dtype, h3_tensor_numel(t), c->count, c->stream), "count_nonfinite") ||
        !ok(b, cudaMemcpyAsync(&n, c->count, sizeof n, cudaMemcpyDeviceToHost, c->stream), "count_nonfinite") ||
        !ok(b, cudaStreamSynchronize(c->stream), "count_nonfinite"))
        return -1;
    return (int64_t)n;
}

/* The injected fault goes through the launch check every op uses, so it
 * is reported as a faulted kernel is; at once, so that nothing stays armed
 * past this op (an op checked by cuBLASLt's status alone). */
static void cuda_inject_fault(h3_backend *b) {
    impl_of(b)->fault_armed = 1;
    ok(b, 0, "kernel launch");
}

static const h3_backend_ops cuda_ops = {
    .name = "cuda",
    .compute_dtype = H3_BF16,
    .destroy = cuda_destroy,
    .weight_dtype = cuda_weight_dtype,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .trim_scratch = cuda_trim_scratch,
    .synchronize = cuda_synchronize,
    .pins_host = 1,
    .host_alloc = h3_cuda_host_alloc,
    .host_free = h3_cuda_host_free,
    .stream_create = h3_cuda_stream_create,
    .stream_destroy = h3_cuda_stream_destroy,
    .stream_copy_begin = h3_cuda_stream_copy_begin,
    .stream_copy = h3_cuda_stream_copy,
    .stream_copy_end = h3_cuda_stream_copy_end,
    .stream_acquire = h3_cuda_stream_acquire,
    .stream_release = h3_cuda_stream_release,
    .stream_stalls = h3_cuda_stream_stalls,
    .linear = cuda_linear,
    .quantize_fp8 = h3_cuda_quantize_fp8, /* h3_cuda_fp8.c */
    .fp8_check = h3_cuda_fp8_check,
    .rms_norm = cuda_rms_norm,
    .layer_norm = cuda_layer_norm,
    .binary = cuda_binary,
    .row_vector = cuda_row_vector,
    .scale = cuda_scale,
    .unary = cuda_unary,
    .swiglu = cuda_swiglu,
    .modulate = cuda_modulate,
    .gated_residual = cuda_gated_residual,
    .rope = cuda_rope,
    .attention = cuda_attention,
    .vsa_attention = h3_cuda_vsa_attention,
    .gather_rows = cuda_gather_rows,
    .scatter_rows = cuda_scatter_rows,
    .copy = cuda_copy,
    .fill = cuda_fill,
    .fill_random = cuda_fill_random,
    .rms_norm_modulate = cuda_rms_norm_modulate,
    .qk_norm_rope = cuda_qk_norm_rope,
    .copy_view = h3_cuda_copy_view,
    .blend_view = h3_cuda_blend_view,
    .rgb8_from_planar = h3_cuda_rgb8_from_planar,
    .im2col3d = h3_cuda_im2col3d,
    .group_norm = h3_cuda_group_norm,
    .conv1d = h3_cuda_conv1d,
    .conv_transpose1d = h3_cuda_conv_transpose1d,
    .upsample1d = h3_cuda_upsample1d,
    .downsample1d = h3_cuda_downsample1d,
    .snake_beta = h3_cuda_snake_beta,
    .snake_beta_antialiased = h3_cuda_snake_beta_antialiased,
    .clamp = h3_cuda_clamp,
    .count_nonfinite = cuda_count_nonfinite,
    .inject_fault = cuda_inject_fault,
};

/* ---- lifetime and extras ------------------------------------------------------------ */

/* The SASS of the portable kernels (90 stands for sm_90a) and the
 * architecture of their PTX, as kernels/meson.build built them. */
static const int portable_sass[] = {H3_CUDA_PORTABLE_SASS};

/* SASS for sm_XY runs on a GPU of major version X and minor Y or more; PTX
 * for compute_P on any GPU of P or later, compiled by the driver at the
 * first launch (and cached). The best image is the newest that runs, SASS
 * before PTX. The families come from the kernels' own dispatch, asked
 * about the DiT's hot call (bf16, head_dim 128, non-causal; null pointers
 * pass its alignment checks), so this text cannot disagree with it. */
int h3_cuda_kernels_for(int sm, char *images, size_t images_size, const char **attention, const char **vsa) {
    int best = 0;
    for (size_t i = 0; i < sizeof portable_sass / sizeof *portable_sass; i++) {
        int s = portable_sass[i];
        if (s / 10 == sm / 10 && s % 10 <= sm % 10 && s > best) best = s;
    }
    *attention = *vsa = "none";
    if (best)
        snprintf(images, images_size, "sm_%d%s", best, best == 90 ? "a" : "");
    else if (sm >= H3_CUDA_PTX)
        snprintf(images, images_size, "compute_%d PTX, compiled at the first launch", H3_CUDA_PTX);
    else {
        snprintf(images, images_size, "this build's kernels are for " H3_CUDA_TARGETS ", none of which runs on sm_%d",
                 sm);
        return 0;
    }
    h3k_attention_args a;
    memset(&a, 0, sizeof a);
    a.dt = H3K_BF16;
    a.Sq = a.Skv = 1;
    a.n_heads = a.n_kv_heads = 1;
    a.head_dim = 128;
    a.path = H3K_ATTN_AUTO;
    a.sm = sm;
    *attention = h3k_attention_path_name(h3k_attention_path(&a));
    h3k_vsa_args v;
    memset(&v, 0, sizeof v);
    v.dt = H3K_BF16;
    v.S = 64;
    v.n_heads = 1;
    v.head_dim = 128;
    v.num_tiles = v.topk = 1;
    v.tile_elems = 64; /* VSA-H3's tile */
    v.path = H3K_ATTN_AUTO;
    v.sm = sm;
    *vsa = h3k_attention_path_name(h3k_vsa_path(&v));
    return 1;
}

int h3_cuda_device_count(char *why, size_t why_size) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (why) snprintf(why, why_size, "%s", cudaGetErrorString(e));
        return 0;
    }
    if (n == 0 && why) snprintf(why, why_size, "no CUDA device");
    return n;
}

h3_status_code h3_backend_cuda_create(int device, h3_backend **out, h3_status *status) {
    *out = NULL;
    char why[256];
    int n = h3_cuda_device_count(why, sizeof why);
    if (n == 0) return h3_fail(status, H3_ERR_DEVICE, "cuda backend: %s", why);
    if (device < 0 || device >= n)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "cuda backend: device %d of %d", device, n);
    struct cudaDeviceProp prop;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess)
        return h3_fail(status, H3_ERR_DEVICE, "cuda backend: device %d: %s", device, cudaGetErrorString(e));
    int sm = prop.major * 10 + prop.minor;
    char images[160];
    const char *attention, *vsa;
    if (!h3_cuda_kernels_for(sm, images, sizeof images, &attention, &vsa))
        return h3_fail(status, H3_ERR_UNSUPPORTED, "cuda backend: %s is sm_%d: %s", prop.name, sm, images);
    h3_backend *b = calloc(1, sizeof *b);
    cuda_impl *c = calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        return h3_fail(status, H3_ERR_NO_MEMORY, "cuda backend: out of host memory");
    }
    c->device = device;
    c->sm = sm;
    snprintf(c->name, sizeof c->name, "%s", prop.name);
    c->attention = H3_CUDA_VARIANT_AUTO; /* the variants: h3_backend_cuda_bench.h */
    const char *up = getenv("H3_CUDA_UPLOAD");
    c->upload_mode = up && !strcmp(up, "pinned") ? UPLOAD_PINNED : up && !strcmp(up, "register") ? UPLOAD_REGISTER
                                                                                               : UPLOAD_PAGEABLE;
    c->vsa_pipelined = 0; /* the simple consumer; the others: h3_backend_cuda_set_vsa_pipelined */
    h3_backend_init(b, &cuda_ops, c);
    b->chunk_min_size = CUDA_ARENA_CHUNK;
    const char *what = "stream";
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) {
        what = "workspace";
        e = cudaMalloc(&c->workspace, WORKSPACE_BYTES);
    }
    if (e == cudaSuccess) {
        what = "error word";
        e = cudaMalloc((void **)&c->flag, H3_CUDA_WORDS_BYTES);
    }
    if (e == cudaSuccess) e = cudaMemset(c->flag, 0, H3_CUDA_WORDS_BYTES);
    if (e == cudaSuccess) c->count = (unsigned long long *)((char *)c->flag + 8);
    if (e == cudaSuccess) h3_backend_track_scratch(b, (int64_t)H3_CUDA_FIXED_BYTES);
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (e == cudaSuccess) st = cublasLtCreate(&c->lt);
    if (e != cudaSuccess || st != CUBLAS_STATUS_SUCCESS) {
        h3_backend_destroy(b);
        if (e != cudaSuccess)
            return h3_fail(status, H3_ERR_DEVICE, "cuda backend: %s: %s", what, cudaGetErrorString(e));
        return h3_fail(status, H3_ERR_DEVICE, "cuda backend: cublasLtCreate failed (status %d)", (int)st);
    }
    *out = b;
    return H3_OK;
}

/* Exact mode: the same kernels on float32 weights (bf16/f16 files widen
 * exactly) and float32 activations, GEMMs in true fp32 (no TF32), attention
 * through the generic fp32 kernel. Slow and memory-hungry; it exists so that
 * the GPU's kernels can be held to the float32 goldens at float32 tolerance,
 * which separates a kernel bug from bf16 rounding. */
h3_status_code h3_backend_cuda_create_exact(int device, h3_backend **out, h3_status *status) {
    h3_status_code rc = h3_backend_cuda_create(device, out, status);
    if (rc != H3_OK) return rc;
    impl_of(*out)->exact = 1;
    (*out)->compute_dtype = H3_F32;
    return H3_OK;
}

int h3_backend_cuda_is_exact(h3_backend *b) { return impl_of(b)->exact; }

void *h3_backend_cuda_stream(h3_backend *b) { return impl_of(b)->stream; }
const char *h3_backend_cuda_device_name(h3_backend *b) { return impl_of(b)->name; }
int h3_backend_cuda_sm(h3_backend *b) { return impl_of(b)->sm; }

void h3_backend_cuda_fill_uniform(h3_backend *b, h3_tensor *t, uint64_t seed, float lo, float hi) {
    if (h3_backend_failed(b) || !t || !t->data) return;
    ok(b, h3k_fill_uniform(t->data, t->dtype, h3_tensor_numel(t), seed, lo, hi, impl_of(b)->stream),
       "fill_uniform");
}

h3_cuda_attention_variant h3_backend_cuda_set_attention_variant(h3_backend *b, h3_cuda_attention_variant path) {
    cuda_impl *c = impl_of(b);
    h3_cuda_attention_variant old = c->attention;
    c->attention = path;
    return old;
}

_Static_assert((int)H3_CUDA_ATTENTION_GENERIC == (int)H3_CUDA_VARIANT_GENERIC && (int)H3_CUDA_ATTENTION_MMA == (int)H3_CUDA_VARIANT_MMA,
               "the product paths are the first variants");
h3_cuda_attention_path h3_backend_cuda_set_attention_path(h3_backend *b, h3_cuda_attention_path path) {
    h3_cuda_attention_variant old = h3_backend_cuda_set_attention_variant(b, (h3_cuda_attention_variant)path);
    return old == H3_CUDA_VARIANT_GENERIC ? H3_CUDA_ATTENTION_GENERIC
           : old == H3_CUDA_VARIANT_MMA   ? H3_CUDA_ATTENTION_MMA
                                          : H3_CUDA_ATTENTION_AUTO;
}

const char *h3_backend_cuda_attention_kernel(h3_backend *b, const h3_tensor *o, const h3_tensor *q,
                                             const h3_tensor *k, const h3_tensor *v, int n_heads, int n_kv_heads,
                                             int head_dim, int causal) {
    h3k_attention_args a;
    attention_args(b, &a, (h3_tensor *)o, q, k, v, n_heads, n_kv_heads, head_dim, causal, 1.0f);
    return h3k_attention_path_name(h3k_attention_path(&a));
}

/* Benchmarks: the median of reps launches of one part of the Hopper default attention kernel at this call's
 * shape (h3k_attention_probe). All but PACK pack the images once first; NOSOFTMAX and NOEXP leave o wrong. */
h3_status_code h3_backend_cuda_attention_probe_ms(h3_backend *b, h3_cuda_attention_probe which, h3_tensor *o,
                                                  const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                                                  int n_heads, int head_dim, int reps, float *ms,
                                                  h3_status *status) {
    cuda_impl *c = impl_of(b);
    h3k_attention_args a;
    attention_args_at(c->sm, H3K_ATTN_FA3_N192, &a, o, q, k, v, n_heads, n_heads, head_dim, 0,
                      1.0f / sqrtf((float)head_dim));
    if (h3k_attention_path(&a) != H3K_ATTN_FA3_N192)
        return h3_fail(status, H3_ERR_UNSUPPORTED, "cuda attention_probe: wgmma-fa3-n192 does not fit this call");
    a.scratch = h3_cuda_scratch(b, h3k_attention_scratch(&a));
    a.scratch_size = c->scratch_size;
    if (!a.scratch) return h3_fail(status, H3_ERR_NO_MEMORY, "cuda attention_probe: no scratch");
    static const int kinds[] = {[H3_CUDA_ATTN_PROBE_PACK] = H3K_ATTN_PROBE_PACK,
                                [H3_CUDA_ATTN_PROBE_KERNEL] = H3K_ATTN_PROBE_KERNEL,
                                [H3_CUDA_ATTN_PROBE_NOSOFTMAX] = H3K_ATTN_PROBE_NOSOFTMAX,
                                [H3_CUDA_ATTN_PROBE_POLY_QUARTER] = H3K_ATTN_PROBE_POLY_QUARTER,
                                [H3_CUDA_ATTN_PROBE_POLY_HALF] = H3K_ATTN_PROBE_POLY_HALF,
                                [H3_CUDA_ATTN_PROBE_NOEXP] = H3K_ATTN_PROBE_NOEXP};
    if ((unsigned)which >= sizeof kinds / sizeof kinds[0])
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "cuda attention_probe: no probe %d", (int)which);
    int kind = kinds[which];
    float t[32];
    reps = reps < 1 ? 1 : reps > 32 ? 32 : reps;
    cudaEvent_t ev[2] = {NULL, NULL};
    cudaError_t e = cudaEventCreate(&ev[0]);
    if (e == cudaSuccess) e = cudaEventCreate(&ev[1]);
    if (e == cudaSuccess && kind != H3K_ATTN_PROBE_PACK)
        e = (cudaError_t)h3k_attention_probe(&a, H3K_ATTN_PROBE_PACK, c->stream);
    if (e == cudaSuccess) e = (cudaError_t)h3k_attention_probe(&a, kind, c->stream); /* warm-up */
    for (int r = 0; e == cudaSuccess && r < reps; r++) {
        e = cudaEventRecord(ev[0], c->stream);
        if (e == cudaSuccess) e = (cudaError_t)h3k_attention_probe(&a, kind, c->stream);
        if (e == cudaSuccess) e = cudaEventRecord(ev[1], c->stream);
        if (e == cudaSuccess) e = cudaEventSynchronize(ev[1]);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&t[r], ev[0], ev[1]);
    }
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return h3_fail(status, e == cudaErrorNotSupported ? H3_ERR_UNSUPPORTED : H3_ERR_DEVICE,
                       "cuda attention_probe: %s", cudaGetErrorString(e));
    }
    for (int i = 1; i < reps; i++) /* insertion sort: reps is small */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            float x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    *ms = t[reps / 2];
    return H3_OK;
}


/* ---- the measuring twin (backend/measure/) ------------------------------------------ */

/* The rules the twin follows are the ones the ops above apply: the same
 * helpers size the linear's conversions, the attention kernels' scratch
 * (h3k_attention_scratch for the kernel this device would pick), VSA's
 * tables and images, the conv1d GEMM's im2col and the in-place SnakeBeta. */
static h3_dtype measure_weight_dtype(const h3_measure_target *t, h3_weight_type type, h3_dtype file_dtype) {
    (void)file_dtype;
    return weight_dtype_for(t->exact, type);
}

static size_t measure_grown(size_t need) { return H3_CUDA_SCRATCH_GROWN(need); }

static h3_status_code measure_fp8_check(const h3_measure_target *t, h3_status *status) {
    char gpu[64];
    snprintf(gpu, sizeof gpu, "a GPU of compute capability %d.%d", t->sm / 10, t->sm % 10);
    return h3_cuda_fp8_check_at(t->sm, t->exact, gpu, status);
}

static size_t measure_linear(const h3_measure_target *t, const h3_tensor *y, const h3_tensor *x, const h3_tensor *w) {
    (void)t;
    if (w->dtype == H3_I32 || h3_tensor_rows(x) == 0 || w->shape[0] == 0) return 0;
    size_t xbytes, obytes;
    linear_scratch_parts(y, x, w, &xbytes, &obytes);
    return xbytes + obytes;
}

static size_t measure_attention(const h3_measure_target *t, const h3_tensor *o, const h3_tensor *q,
                                const h3_tensor *k, const h3_tensor *v, int n_heads, int n_kv_heads, int head_dim,
                                int causal) {
    if (!attention_runs(o, q, k, v, head_dim)) return 0;
    h3k_attention_args a;
    attention_args_at(t->sm, (int)H3_CUDA_VARIANT_AUTO, &a, o, q, k, v, n_heads, n_kv_heads, head_dim, causal, 1.0f);
    return h3k_attention_scratch(&a);
}

static size_t measure_vsa(const h3_measure_target *t, const h3_tensor *o, const h3_tensor *q, const h3_tensor *k,
                          const h3_tensor *v, const h3_tensor *gate, const h3_vsa_tiles *tiles, int n_heads,
                          int head_dim) {
    if (head_dim > 256) return 0;
    return h3_cuda_vsa_scratch_at(t->sm, (int)H3_CUDA_VARIANT_AUTO, o, q, k, v, gate, tiles, n_heads, head_dim);
}

static size_t measure_conv1d(const h3_measure_target *t, const h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                             const h3_tensor *bias, int groups) {
    (void)t;
    return h3_cuda_conv1d_scratch(y, x, w, bias, groups);
}

static size_t measure_snake(const h3_measure_target *t, const h3_tensor *y, const h3_tensor *x) {
    (void)t;
    return h3_cuda_snake_scratch(y, x);
}

h3_status_code h3_backend_cuda_create_measure(int sm, int exact, h3_backend **out, h3_status *status) {
    h3_measure_target t = {
        .name = "measure:cuda",
        .ops = &cuda_ops,
        .compute_dtype = exact ? H3_F32 : H3_BF16,
        .chunk_min_size = CUDA_ARENA_CHUNK,
        .fixed_scratch = H3_CUDA_FIXED_BYTES,
        .sm = sm,
        .exact = exact,
        .weight_dtype = measure_weight_dtype,
        .scratch_grown = measure_grown,
        .fp8_check = measure_fp8_check,
        .linear_scratch = measure_linear,
        .attention_scratch = measure_attention,
        .vsa_scratch = measure_vsa,
        .conv1d_scratch = measure_conv1d,
        .snake_scratch = measure_snake,
    };
    return h3_backend_measure_create(&t, out, status);
}
