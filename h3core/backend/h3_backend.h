/* h3_backend.h - backends, their memory (weights, the activation arena) and
 * the op interface every backend implements; the tensor type itself is
 * h3_tensor.h's.
 *
 * The model code (text encoder, DiT, VAEs) is written once against the
 * h3_op_* functions below. A backend (CPU reference in float32, CUDA in bf16)
 * implements them through struct h3_backend_ops and owns its memory.
 *
 * Errors inside ops are sticky, like cudaGetLastError: an op that meets a
 * shape mismatch or a device failure records the first error in the backend
 * and later ops become no-ops. Model code checks h3_backend_check() at phase
 * boundaries (end of a block, of a forward), so the hot path carries no
 * error plumbing and nothing aborts. */
#ifndef H3_BACKEND_H
#define H3_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend/h3_tensor.h"
#include "base/h3_safetensors.h"
#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a weight is stored as on the backend. DEFAULT is the backend's
 * compute type (F32 on the CPU, BF16 on CUDA); F32 keeps the fp32 islands
 * (input/output projections, timestep MLP, audio VAE). */
/* LINEAR marks the matrix of one of the big linear layers (the DiT's
 * qkv/out/fc1/fc2/AdaLN/gate, the text encoder's q/k/v/o/gate_up/down): as
 * DEFAULT, unless the backend's linears are FP8 (h3_backend_set_linear_fp8),
 * then it is quantised once as it loads, after any fusion or sharding, to
 * H3_F8E4M3 codes with per-row float32 scales (backend/h3_fp8.h). */
typedef enum h3_weight_type { H3_WEIGHT_DEFAULT = 0, H3_WEIGHT_F32, H3_WEIGHT_F16, H3_WEIGHT_LINEAR } h3_weight_type;

/* ---- backend lifetime ---------------------------------------------------- */
h3_status_code h3_backend_cpu_create(int n_threads, h3_backend **out, h3_status *status);
/* device = CUDA ordinal. Defined only when built with CUDA. */
h3_status_code h3_backend_cuda_create(int device, h3_backend **out, h3_status *status);
/* The same in float32 (weights and activations): parity checks only. */
h3_status_code h3_backend_cuda_create_exact(int device, h3_backend **out, h3_status *status);
/* Measuring backends (backend/measure/): each stands for the backend named,
 * with its op table, weight dtypes, arena chunks and scratch rules, over
 * memory that holds no bytes; nothing is computed and no device is touched.
 * The memory plan runs requests through them (h3_memory_plan_make). The
 * CUDA one is for compute capability sm (major·10 + minor), exact as
 * h3_backend_cuda_create_exact; defined only when built with CUDA. */
h3_status_code h3_backend_cpu_create_measure(h3_backend **out, h3_status *status);
h3_status_code h3_backend_cuda_create_measure(int sm, int exact, h3_backend **out, h3_status *status);
void h3_backend_destroy(h3_backend *b);
const char *h3_backend_name(const h3_backend *b);
h3_dtype h3_backend_compute_dtype(const h3_backend *b);

/* Returns the sticky error (and clears it when clear != 0). */
h3_status_code h3_backend_check(h3_backend *b, h3_status *status);
/* Clears the sticky error so the backend can serve the next request. */
void h3_backend_clear_error(h3_backend *b);
/* Records an error from model code (first one wins). */
void h3_backend_set_error(h3_backend *b, h3_status_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Waits for queued work (no-op on the CPU). */
h3_status_code h3_backend_synchronize(h3_backend *b, h3_status *status);

/* ---- memory -------------------------------------------------------------- */
/* Weights: persistent allocations, freed by h3_weight_free or backend destroy.
 * A dummy tensor (h3_st_is_dummy: load-format dummy) is drawn on the backend
 * with h3_op_fill_random instead of copied: no host copy exists. */
h3_status_code h3_weight_load(h3_backend *b, const h3_st_tensor *src, h3_weight_type type, h3_tensor *out,
                              h3_status *status);
/* A persistent tensor filled from host float32 (e.g. derived tables). */
h3_status_code h3_weight_from_f32(h3_backend *b, const float *host, h3_dtype dtype, int ndim,
                                  const int64_t *shape, h3_tensor *out, h3_status *status);
/* A persistent float tensor of zeros, filled where it lives (nothing is
 * uploaded): the vision tower's padded heads (h3_vision.c). */
h3_status_code h3_weight_zeros(h3_backend *b, h3_dtype dtype, int ndim, const int64_t *shape, h3_tensor *out,
                               h3_status *status);
h3_status_code h3_weight_from_i32(h3_backend *b, const int32_t *host, int64_t n, h3_tensor *out,
                                  h3_status *status);
void h3_weight_free(h3_backend *b, h3_tensor *t);
/* A persistent H3_F8E4M3 copy (codes + per-row scales, h3_fp8.h) of the
 * float matrix src (a weight or an activation), made where it lives; what
 * the loader does to a LINEAR weight under fp8, for tools and tests.
 * UNSUPPORTED on a backend without an FP8 linear. */
h3_status_code h3_weight_quantize_fp8(h3_backend *b, const h3_tensor *src, h3_tensor *out, h3_status *status);

/* Activations: a bump arena. h3_arena_mark/h3_arena_reset bracket a phase;
 * the arena grows only on first use of a size (chunks are kept after reset),
 * so the denoising loop allocates nothing after its first step. Allocation
 * failure sets the sticky error and returns a tensor with data == NULL. */
h3_tensor h3_new(h3_backend *b, h3_dtype dtype, int ndim, const int64_t *shape);
h3_tensor h3_new_2d(h3_backend *b, h3_dtype dtype, int64_t rows, int64_t cols);
h3_tensor h3_new_1d(h3_backend *b, h3_dtype dtype, int64_t n);
size_t h3_arena_mark(h3_backend *b);
void h3_arena_reset(h3_backend *b, size_t mark);
size_t h3_arena_high_water(const h3_backend *b);
/* Gives back what the arena and the backend's op scratch hold beyond what is
 * in use (arena chunks past the current position; all of them when the arena
 * is empty), so a phase that needs the room for weights can have it (the
 * engine's text encoder between requests, h3_generate.c). They grow again on
 * first use, as after creation. */
void h3_backend_trim(h3_backend *b);

/* At most `bytes` in the tally below (weights, arena and the backend's own
 * buffers together; 0: no limit): an allocation past it fails like an
 * out-of-memory one (the sticky H3_ERR_NO_MEMORY), naming the limit. The
 * engine sets it from h3_engine_options.max_gpu_memory, so a smaller GPU can
 * be stood for on a large one. */
void h3_backend_set_memory_limit(h3_backend *b, uint64_t bytes);

/* precision=fp8: weights loaded as H3_WEIGHT_LINEAR from now on become
 * H3_F8E4M3 with per-row scales, and h3_op_linear on such a weight
 * quantises its input per row on the fly (backend/h3_fp8.h). UNSUPPORTED
 * when the backend has no FP8 linear (CUDA's exact float32 mode), naming it.
 * Set before the loads (the engine does, from h3_engine_options.precision). */
h3_status_code h3_backend_set_linear_fp8(h3_backend *b, int on, h3_status *status);
int h3_backend_linear_fp8(const h3_backend *b);
/* Since creation: the LINEAR weights loaded as FP8, and those kept in the
 * compute type because their in- or out-features are not a multiple of 16
 * (the FP8 GEMMs' rule; the tiny test model's narrow layers). */
void h3_backend_fp8_counts(const h3_backend *b, int *quantised, int *kept);

/* The device memory a backend holds, tallied at every allocation and free
 * (bytes as asked for, before the driver's rounding). The CPU backend counts
 * weights and arena (its scratch is small host memory outside the tally);
 * CUDA adds its own buffers: the cuBLASLt workspace and the op scratch. */
typedef struct h3_backend_memory {
    uint64_t weights; /* persistent allocations live now (weights, tables, per-request persistents) */
    uint64_t arena;   /* activation arena chunks live now */
    uint64_t scratch; /* the backend's own buffers live now */
    /* Since the last h3_backend_memory_mark (or creation): */
    uint64_t peak;             /* the most of the three together */
    uint64_t peak_activations; /* the most of arena + persistent allocations above the mark's */
    uint64_t peak_scratch;     /* the most of scratch */
} h3_backend_memory;
void h3_backend_memory_get(const h3_backend *b, h3_backend_memory *out);
/* Starts a new peak window (a generation): the peaks restart from now. */
void h3_backend_memory_mark(h3_backend *b);
/* 0 for a measuring backend (backend/measure/): its tensors have addresses
 * but no bytes, so code that works on weight bytes on the host (repacking,
 * fusing, folding) skips that work and hands the shapes on. */
int h3_backend_holds_data(const h3_backend *b);

/* Host <-> backend copies with conversion from/to float32 or int32. */
h3_status_code h3_tensor_upload_f32(h3_backend *b, h3_tensor *dst, const float *host, h3_status *status);
h3_status_code h3_tensor_upload_i32(h3_backend *b, h3_tensor *dst, const int32_t *host, h3_status *status);
h3_status_code h3_tensor_download_f32(h3_backend *b, const h3_tensor *src, float *host, h3_status *status);

/* ---- values that must be finite ------------------------------------------
 * *count = how many of t's values are NaN or ±Inf (F32, BF16 or F16), counted
 * where t lives: one pass on the device and one small copy back, nothing
 * allocated. Every weight is counted once as it loads (h3_weight_load: a
 * non-finite one is H3_ERR_NONFINITE naming its file and tensor), and the
 * engine counts each stage's output before it becomes media. A measuring
 * backend counts 0. */
h3_status_code h3_tensor_count_nonfinite(h3_backend *b, const h3_tensor *t, int64_t *count, h3_status *status);

/* ---- fault injection, for the tests of the failure paths -------------------
 * The op `ops` ops from now (1: the next) on b fails as its device would
 * (CUDA: the op's launch check reports cudaErrorLaunchFailure; CPU: an
 * H3_ERR_DEVICE), in the middle of whatever forward is running; 0 disarms.
 * The sticky error then ends the work at the next check, as a real failure. */
void h3_backend_inject_fault(h3_backend *b, long ops);
/* Process-wide: the nth allocation from now (1: the next) that a backend
 * holding data makes fails as out of memory: weights, arena chunks, the
 * backends' scratch and h3_backend.c's host staging buffers; 0 disarms.
 * h3_backend_alloc_count is how many such allocations were made so far, so
 * a test counts one run's and then fails each in turn. */
void h3_backend_inject_alloc_fault(long nth);
long h3_backend_alloc_count(void);

/* ---- ops ------------------------------------------------------------------
 * Shapes are checked once, for every backend (h3_ops_check.c); a mismatch
 * sets the sticky error. Unless stated, y may alias x (in place is
 * allowed). All float tensors of one op share a dtype unless stated. */

/* y[M,N] = x[M,K] · w[N,K]ᵀ (+ bias[N]). w is a weight (any weight dtype);
 * x and y may be F32 while w is BF16 on CUDA (mixed islands). y != x.
 * w H3_F8E4M3 (precision=fp8): each row of x is quantised to E4M3 with its
 * own scale (absmax/448), the product accumulates in float32 and is
 * scaled by x's row scale and w's row scale (backend/h3_fp8.h). */
void h3_op_linear(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias);
/* y = x / rms(x) (* w), over consecutive groups of `width` elements (width
 * divides the last dim: the per-head q/k norm uses width = head_dim). w may be NULL. */
void h3_op_rms_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, int64_t width, float eps);
/* LayerNorm over the last dim; w and bias may be NULL. */
void h3_op_layer_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                      float eps);
void h3_op_add(h3_backend *b, h3_tensor *y, const h3_tensor *x0, const h3_tensor *x1);
void h3_op_mul(h3_backend *b, h3_tensor *y, const h3_tensor *x0, const h3_tensor *x1);
/* y[r, c] = x[r, c] * v[c] (+ y_old if accumulate): the VAE's layer scale. */
void h3_op_mul_row_vector(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *v);
void h3_op_add_row_vector(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *v);
void h3_op_scale(h3_backend *b, h3_tensor *y, const h3_tensor *x, float alpha);
void h3_op_silu(h3_backend *b, h3_tensor *y, const h3_tensor *x);
/* tanh-approximate when approximate != 0, else exact erf GELU. */
void h3_op_gelu(h3_backend *b, h3_tensor *y, const h3_tensor *x, int approximate);
/* u[M, 2F] -> y[M, F]: y = first ⊙ silu(second) when value_first, else
 * y = second ⊙ silu(first) (native [gate; value] layout). */
void h3_op_swiglu(h3_backend *b, h3_tensor *y, const h3_tensor *u, int value_first);
/* AdaLN modulation with a per-row table selector:
 *   y[s, :] = x[s, :] * (1 + scale[sel[s], :]) + shift[sel[s], :]
 * shift/scale are 2-D [n_rows_table, D] views (row stride = their cols);
 * sel is I32 [S]. */
void h3_op_modulate(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *shift,
                    const h3_tensor *scale, const h3_tensor *sel);
/* x[s, :] += gate[sel[s], :] * y[s, :] */
void h3_op_gated_residual(h3_backend *b, h3_tensor *x, const h3_tensor *gate, const h3_tensor *y,
                          const h3_tensor *sel);
/* Rotate-half RoPE in place on x[S, n_heads*head_dim]: for each head, on
 * channels [0, rot_dim): with h = rot_dim/2, c < h:
 *   x'[c]   = x[c]·cos[s,c]   − x[c+h]·sin[s,c]
 *   x'[c+h] = x[c+h]·cos[s,c+h] + x[c]·sin[s,c+h]
 * cos, sin: F32 [S, rot_dim]. Channels >= rot_dim pass through. */
void h3_op_rope(h3_backend *b, h3_tensor *x, const h3_tensor *cos, const h3_tensor *sin, int n_heads,
                int head_dim, int rot_dim);
/* Scaled dot-product attention. q [Sq, Hq*dh], k/v [Skv, Hkv*dh], o [Sq, Hq*dh];
 * Hq a multiple of Hkv (GQA: query head h uses kv head h / (Hq/Hkv)).
 * causal: query i sees keys j <= i (Sq == Skv). */
void h3_op_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                     int n_heads, int n_kv_heads, int head_dim, int causal, float scale);
/* dst[i, :] = src[idx[i], :]   (idx I32 [n]); also the embedding lookup. */
void h3_op_gather_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx);
/* dst[idx[i], :] = src[i, :] */
void h3_op_scatter_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx);
/* Element copy with dtype conversion (same numel). */
void h3_op_copy(h3_backend *b, h3_tensor *dst, const h3_tensor *src);
void h3_op_fill(h3_backend *b, h3_tensor *dst, float value);
/* dst = the values of a dummy tensor (h3_st_random, base/h3_safetensors.h)
 * of dst's shape, each rounded to round_to (the dtype a file of them would
 * hold: F32, BF16 or F16) before it is stored in dst's dtype, so a dummy
 * weight ends on the backend exactly as a file tensor of those values would.
 * Drawn where dst lives (on the device for CUDA); float dst only. */
void h3_op_fill_random(h3_backend *b, h3_tensor *dst, const h3_st_random *values, h3_st_dtype round_to);

/* Fused forms of the DiT's hot sequences, one pass over the activations
 * instead of two. A backend without the fused kernel runs the ops they
 * replace, so results match those ops to rounding.
 *   y[s, :] = rms_norm(x[s, :]; w, eps) * (1 + scale[sel[s], :]) + shift[sel[s], :]
 * (RMSNorm over the whole last dim; w may be NULL; shift/scale/sel as in
 * h3_op_modulate). */
void h3_op_rms_norm_modulate(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, float eps,
                             const h3_tensor *shift, const h3_tensor *scale, const h3_tensor *sel);
/* In place on x [S, n_heads*head_dim]: per-head RMSNorm (width head_dim,
 * weight w [head_dim] or NULL), then h3_op_rope. */
void h3_op_qk_norm_rope(h3_backend *b, h3_tensor *x, const h3_tensor *w, float eps, const h3_tensor *cos,
                        const h3_tensor *sin, int n_heads, int head_dim, int rot_dim);

#ifdef __cplusplus
}
#endif

/* ---- the subsystems' ops --------------------------------------------------
 * Each family in its own header, found by its name; included here so that
 * every user of the interface (the model code, the backends) sees the whole
 * of it through this one header. */
#include "backend/h3_ops_vsa.h"       /* VSA-H3 attention (FastH3) */
#include "backend/h3_ops_video_vae.h" /* strided views, cross-fade, RGB8 */
#include "backend/h3_ops_audio_vae.h" /* conv1d, anti-aliased resampling, snake */

#endif
