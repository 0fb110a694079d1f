/* h3_backend_cuda_impl.h - what the CUDA backend's files share: its state,
 * the error and scratch helpers every op uses, and the ops that live in
 * their own files. Private to backend/cuda/.
 *
 *   h3_backend_cuda.c  creation, memory and uploads, GEMMs, the core ops and
 *                      dense attention, the op table, the product extras
 *   h3_cuda_vsa.c      VSA-H3 block-sparse attention and its bench hooks
 *   h3_cuda_vae.c      the VAE decoders' ops (views, RGB, 1-D convolutions,
 *                      resampling, SnakeBeta, clamp)
 * The kernels they launch are in kernels/. Defined only when h3core is
 * built with CUDA (H3_HAVE_CUDA). */
#ifndef H3_BACKEND_CUDA_IMPL_H
#define H3_BACKEND_CUDA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/h3_backend_cuda_bench.h" /* h3_cuda_attention_variant */
#include "kernels/h3_kernels.h"
#include "kernels/h3_kernels_vsa.h" /* h3k_vsa_args */
#include "backend/h3_backend_impl.h"

#define PLAN_CACHE 96 /* the bf16 GEMM shapes and precision=fp8's (64 and 32 when they had a cache each) */
#define CUDA_ARENA_CHUNK ((size_t)256 << 20) /* the smallest activation arena chunk */
#define WORKSPACE_BYTES ((size_t)64 << 20) /* cuBLASLt's, allocated at creation */
/* The device words the backend keeps: the kernels' error word, then the
 * non-finite counter (h3_tensor_count_nonfinite), 16 bytes in one block. */
#define H3_CUDA_WORDS_BYTES ((size_t)16)
/* What the backend allocates for itself at creation: the cuBLASLt workspace
 * and its device words (the memory tally, and so the measuring twin, count
 * both). */
#define H3_CUDA_FIXED_BYTES (WORKSPACE_BYTES + H3_CUDA_WORDS_BYTES)
/* The size the scratch grows to when a call needs `bytes` more than it
 * holds: an eighth more, so that slowly growing calls do not reallocate. */
#define H3_CUDA_SCRATCH_GROWN(bytes) ((bytes) + (bytes) / 8)
#define STAGE_SLOTS 4 /* pinned upload buffers (h3_backend_cuda.c) */

/* What a cuBLASLt GEMM plan is for: row-major D[M,N] = X[M,K]·W[N,K]ᵀ
 * (+ bias), operands of type ab (bf16, f16, f32 or E4M3), D of type d, every
 * operand address a multiple of align bytes, and the scale mode. */
enum { GEMM_SCALE_NONE = 0, GEMM_SCALE_OUTER_VEC = 1 /* FP8: per-row float32 scales of W and X (h3_cuda_fp8.c) */ };
typedef struct gemm_key {
    int64_t M, N, K;
    cudaDataType_t ab, d;
    int bias, align, scale;
} gemm_key;

/* One cuBLASLt configuration, kept for reuse: the heuristic query costs
 * tens of microseconds, the DiT issues the same few shapes 50 times a step.
 * valid: 1 ready, -1 cuBLASLt has no algorithm for the key (remembered, no
 * descriptors, so a missing epilogue is not asked for at every call), 0 free. */
typedef struct gemm_plan {
    int valid;
    gemm_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, bl, c;
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

typedef struct cuda_impl {
    int device, sm;
    void *stage[STAGE_SLOTS];         /* pinned, allocated at the first large upload */
    cudaEvent_t stage_done[STAGE_SLOTS];
    int stage_next, stage_state;      /* state: 0 not tried, 1 ready, -1 unavailable (pageable copies) */
    int upload_mode;                  /* UPLOAD_* (h3_backend_cuda.c), from H3_CUDA_UPLOAD at creation */
    int exact; /* h3_backend_cuda_create_exact: f32 weights and activations */
    char name[256];
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *workspace;
    void *scratch;
    size_t scratch_size;
    unsigned scratch_epoch; /* bumped by every h3_cuda_scratch call: what a VSA call left there is still there */
    h3k_vsa_args vsa_last;  /* the last vsa_attention call, for h3_backend_cuda_vsa_inspect */
    unsigned vsa_epoch;
    int vsa_valid;
    int vsa_profile;           /* h3_backend_cuda_vsa_profile */
    int vsa_pipelined;         /* h3_backend_cuda_set_vsa_pipelined (0 by default) */
    cudaEvent_t vsa_events[4];
    int *flag; /* device word of H3K_ERR_* bits: the start of the H3_CUDA_WORDS_BYTES block */
    unsigned long long *count; /* device counter of count_nonfinite, in the same block */
    int fault_armed; /* h3_backend_inject_fault came due: the next launch check fails */
    h3_cuda_attention_variant attention; /* h3_backend_cuda_set_attention_variant (AUTO by default) */
    int conv1d_path; /* h3_backend_cuda_set_conv1d_path: 0 (the default) chosen per shape (h3_cuda_vae.c) */
    gemm_plan plans[PLAN_CACHE]; /* h3_cuda_gemm_plan: bf16 and FP8 alike */
    int next_plan;
    uint64_t fp8_scaled_after; /* FP8 GEMMs whose scales a pass applied after (no outer-vector algorithm) */
} cuda_impl;

static inline cuda_impl *impl_of(h3_backend *b) { return b->impl; }

/* Records a failed CUDA call (err != 0) as the sticky error; returns !err.
 * An armed injected fault (h3_backend_inject_fault) makes the next checked
 * call fail as a kernel that faulted would, through this same path. */
static inline int ok(h3_backend *b, int err, const char *what) {
    cuda_impl *c = impl_of(b);
    int injected = err == 0 && c->fault_armed;
    if (injected) {
        c->fault_armed = 0;
        err = (int)cudaErrorLaunchFailure;
    }
    if (err == 0) return 1;
    h3_backend_fail(b, H3_ERR_DEVICE, "cuda %s: %s (%s)%s", what, cudaGetErrorString((cudaError_t)err),
                    cudaGetErrorName((cudaError_t)err), injected ? " [injected by the test hook]" : "");
    return 0;
}

/* A tensor's dtype code and data for the kernels, H3K_NONE and NULL for an absent one. */
#define DT(t) ((t) ? (int)(t)->dtype : H3K_NONE)
#define PTR(t) ((t) ? (t)->data : NULL)

/* Scratch of at least `bytes`, kept for later calls (NULL, with the
 * backend's error set, when it cannot be had). */
void *h3_cuda_scratch(h3_backend *b, size_t bytes);
/* D[M,N] = X[M,K]·W[N,K]ᵀ (+ bias[N] of D's type) by cuBLASLt. Returns 1
 * when the bias was applied (no algorithm with the bias epilogue: 0, the
 * caller adds it). */
int h3_cuda_gemm(h3_backend *b, void *D, cudaDataType_t dtype, const void *W, const void *X, cudaDataType_t ab,
                 int64_t M, int64_t N, int64_t K, const void *bias);

/* The scratch of a call, for the measuring twin (h3_backend_cuda_create_measure):
 * VSA's on a device of compute capability sm with attention path `path`;
 * the conv1d GEMM's im2col; an in-place SnakeBeta's copy. */
size_t h3_cuda_vsa_scratch_at(int sm, int path, const h3_tensor *o, const h3_tensor *q, const h3_tensor *k,
                              const h3_tensor *v, const h3_tensor *gate, const h3_vsa_tiles *t, int n_heads,
                              int head_dim);
size_t h3_cuda_conv1d_scratch(const h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                              int groups);
size_t h3_cuda_snake_scratch(const h3_tensor *y, const h3_tensor *x);

/* h3_cuda_fp8.c (precision=fp8) */
/* The refusal of fp8 on a device of compute capability sm (exact: the
 * float32 mode); gpu names it in the message. */
h3_status_code h3_cuda_fp8_check_at(int sm, int exact, const char *gpu, h3_status *status);
h3_status_code h3_cuda_fp8_check(h3_backend *b, h3_status *status);
void h3_cuda_quantize_fp8(h3_backend *b, h3_tensor *dst, const h3_tensor *src);
/* h3_op_linear with an H3_F8E4M3 weight, and its scratch (x's codes and scales). */
void h3_cuda_linear_fp8(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias);
size_t h3_cuda_linear_fp8_scratch(const h3_tensor *x);
/* The cuBLASLt type of a dtype (bf16, f16, else f32), and the largest power
 * of two (<= 256) dividing every operand address: a plan key's fields. */
cudaDataType_t h3_cuda_type(h3_dtype dt);
int h3_cuda_alignment(const void *a, const void *b, const void *d);
/* The cached plan for key (made and cached when new), or NULL when
 * cuBLASLt has no algorithm for it; a descriptor cuBLASLt fails to create
 * is also the backend's sticky error. */
gemm_plan *h3_cuda_gemm_plan(h3_backend *b, const gemm_key *key);
/* h3_cuda_stream.c: weight streaming (h3_weight_stream.h) */
void *h3_cuda_host_alloc(h3_backend *b, size_t bytes, int pinned);
void h3_cuda_host_free(h3_backend *b, void *p, int pinned);
void *h3_cuda_stream_create(h3_backend *b, int n_slots);
void h3_cuda_stream_destroy(h3_backend *b, void *s);
int h3_cuda_stream_copy_begin(h3_backend *b, void *s, int slot);
int h3_cuda_stream_copy(h3_backend *b, void *s, void *dst, const void *src, size_t bytes);
int h3_cuda_stream_copy_end(h3_backend *b, void *s, int slot);
int h3_cuda_stream_acquire(h3_backend *b, void *s, int slot);
int h3_cuda_stream_release(h3_backend *b, void *s, int slot);
void h3_cuda_stream_stalls(h3_backend *b, void *s, double *ms, uint64_t *count);

/* h3_cuda_vsa.c */
void h3_cuda_vsa_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                           const h3_tensor *gate, const h3_vsa_tiles *t, int n_heads, int head_dim);

/* h3_cuda_vae.c */
void h3_cuda_copy_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *src, const h3_view *sv);
void h3_cuda_blend_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *a, const h3_view *av,
                        const h3_tensor *x, const h3_view *xv, int axis, int extent);
void h3_cuda_rgb8_from_planar(h3_backend *b, h3_tensor *dst, const h3_tensor *src, int64_t frame0, int64_t nframes,
                              const float *mean, const float *std);
void h3_cuda_im2col3d(h3_backend *b, h3_tensor *col, const h3_tensor *x, const h3_conv3d_geom *g, int64_t n0);
void h3_cuda_group_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                        int groups, float eps, int silu);
void h3_cuda_conv1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                    int stride, int padding, int dilation, int groups);
void h3_cuda_conv_transpose1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                              const h3_tensor *bias, int stride, int padding);
void h3_cuda_upsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio);
void h3_cuda_downsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio);
void h3_cuda_snake_beta(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                        const h3_tensor *beta);
void h3_cuda_snake_beta_antialiased(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                                    const h3_tensor *beta, const h3_tensor *up_filter, const h3_tensor *down_filter,
                                    int ratio);
void h3_cuda_clamp(h3_backend *b, h3_tensor *y, const h3_tensor *x, float lo, float hi);

#endif
