/* h3_backend.h - tensors, arenas and the op interface every backend implements.
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

#include "base/h3_safetensors.h"
#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum h3_dtype { H3_F32 = 0, H3_BF16, H3_F16, H3_I32 } h3_dtype;

#define H3_MAX_DIMS 5

/* A dense, contiguous, row-major tensor living in a backend's memory.
 * Tensors are small value types: views copy the struct and share data. */
typedef struct h3_tensor {
    h3_dtype dtype;
    int ndim;
    int64_t shape[H3_MAX_DIMS];
    void *data;
} h3_tensor;

typedef struct h3_backend h3_backend;

/* What a weight is stored as on the backend. DEFAULT is the backend's
 * compute type (F32 on the CPU, BF16 on CUDA); F32 keeps the fp32 islands
 * (input/output projections, timestep MLP, audio VAE). */
typedef enum h3_weight_type { H3_WEIGHT_DEFAULT = 0, H3_WEIGHT_F32, H3_WEIGHT_F16 } h3_weight_type;

/* ---- tensor helpers (no backend involved) ------------------------------ */
int64_t h3_tensor_numel(const h3_tensor *t);
size_t h3_tensor_nbytes(const h3_tensor *t);
size_t h3_dtype_size(h3_dtype dtype);
const char *h3_dtype_name(h3_dtype dtype);
/* Rows = product of all dims but the last; cols = last dim. */
int64_t h3_tensor_rows(const h3_tensor *t);
int64_t h3_tensor_cols(const h3_tensor *t);
/* A view of rows [row0, row0+nrows) of t seen as 2-D [rows, cols]. */
h3_tensor h3_tensor_rows_view(const h3_tensor *t, int64_t row0, int64_t nrows);
/* The same data with another shape (numel must match; else a zero tensor). */
h3_tensor h3_tensor_reshape(const h3_tensor *t, int ndim, const int64_t *shape);
h3_tensor h3_tensor_2d(const h3_tensor *t, int64_t rows, int64_t cols);

/* ---- backend lifetime ---------------------------------------------------- */
h3_status_code h3_backend_cpu_create(int n_threads, h3_backend **out, h3_status *status);
/* device = CUDA ordinal. Defined only when built with CUDA. */
h3_status_code h3_backend_cuda_create(int device, h3_backend **out, h3_status *status);
/* The same in float32 (weights and activations): parity checks only. */
h3_status_code h3_backend_cuda_create_exact(int device, h3_backend **out, h3_status *status);
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
/* Weights: persistent allocations, freed by h3_weight_free or backend destroy. */
h3_status_code h3_weight_load(h3_backend *b, const h3_st_tensor *src, h3_weight_type type, h3_tensor *out,
                              h3_status *status);
/* A persistent tensor filled from host float32 (e.g. derived tables). */
h3_status_code h3_weight_from_f32(h3_backend *b, const float *host, h3_dtype dtype, int ndim,
                                  const int64_t *shape, h3_tensor *out, h3_status *status);
h3_status_code h3_weight_from_i32(h3_backend *b, const int32_t *host, int64_t n, h3_tensor *out,
                                  h3_status *status);
void h3_weight_free(h3_backend *b, h3_tensor *t);

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

/* Host <-> backend copies with conversion from/to float32 or int32. */
h3_status_code h3_tensor_upload_f32(h3_backend *b, h3_tensor *dst, const float *host, h3_status *status);
h3_status_code h3_tensor_upload_i32(h3_backend *b, h3_tensor *dst, const int32_t *host, h3_status *status);
h3_status_code h3_tensor_download_f32(h3_backend *b, const h3_tensor *src, float *host, h3_status *status);

/* ---- ops ------------------------------------------------------------------
 * Shapes are checked here, once, for every backend; a mismatch sets the
 * sticky error. Unless stated, y may alias x (in place is allowed). All
 * float tensors of one op share a dtype unless stated. */

/* y[M,N] = x[M,K] · w[N,K]ᵀ (+ bias[N]). w is a weight (any weight dtype);
 * x and y may be F32 while w is BF16 on CUDA (mixed islands). y != x. */
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
/* H3_OPS_VSA_BEGIN */
/* VSA-H3 block-sparse attention over one packed sequence (spec
 * fasth3-vsa.md §3; the tiling and the selection rule are in h3_vsa.h).
 * The tile tables come from an h3_vsa_plan, uploaded once per request. */
typedef struct h3_vsa_tiles {
    int64_t num_tiles;        /* n */
    int64_t num_prefix_tiles; /* P: text/cond/audio tiles (always attended; dense as queries) */
    int64_t topk;             /* video key tiles per video query tile; n − P means dense */
    int tile_elems;           /* rows of a padded tile (64) */
    h3_tensor tile_sizes;     /* I32 [n]: valid rows of each tile, 1..tile_elems */
    h3_tensor tile_order;     /* I32 [S]: packed row of each non-pad slot, tile by tile */
    h3_tensor untile_index;   /* I32 [S]: padded slot (tile·tile_elems + offset) of each packed row */
} h3_vsa_tiles;
/* q, k, v, o [S, n_heads·head_dim] in packed row order, gate the same or
 * NULL (no compressed branch). Per head: tile means (fp32) of q, k, v;
 * scores = q̄·k̄ᵀ/sqrt(dh) over all tiles; each query tile attends its
 * selected key tiles' valid rows (softmax, scale 1/sqrt(dh)); then
 *   o[row] += softmax(scores[tile(row)])·v̄ ⊙ gate[row]
 * for every row, prefix tiles included. With topk == n − P and gate NULL
 * this is exactly dense attention (to rounding). o must not alias the
 * inputs. Backends without the kernel fail with H3_ERR_UNSUPPORTED. */
void h3_op_vsa_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                         const h3_tensor *gate, const h3_vsa_tiles *tiles, int n_heads, int head_dim);
/* Non-zero when the backend implements h3_op_vsa_attention. */
int h3_backend_has_vsa_attention(const h3_backend *b);
/* H3_OPS_VSA_END */
/* dst[i, :] = src[idx[i], :]   (idx I32 [n]); also the embedding lookup. */
void h3_op_gather_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx);
/* dst[idx[i], :] = src[i, :] */
void h3_op_scatter_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx);
/* Element copy with dtype conversion (same numel). */
void h3_op_copy(h3_backend *b, h3_tensor *dst, const h3_tensor *src);
void h3_op_fill(h3_backend *b, h3_tensor *dst, float value);

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

/* Subsystem ops (VAEs) are declared below by the files that need them, each
 * in its own block. */
/* H3_OPS_VIDEO_VAE_BEGIN */
/* Data movement of the video VAE decoder (latent tile gather, unpatchify,
 * tile stitching, window cross-fade, RGB conversion), kept on the backend so
 * decoded pixels never round-trip through the host until they are final.
 *
 * A view is a strided window into a tensor's elements: element
 * (i0, ..., i[ndim-1]) lives at data[offset + Σ i_k·stride_k] (offset and
 * strides in elements, strides >= 0). The whole window must lie inside the
 * tensor; h3_backend.c checks that. Views are host structs passed by pointer. */
#define H3_VIEW_MAX_DIMS 8
typedef struct h3_view {
    int ndim;
    int64_t shape[H3_VIEW_MAX_DIMS];
    int64_t offset;
    int64_t stride[H3_VIEW_MAX_DIMS];
} h3_view;

/* dst[dv] = src[sv], element by element. The views have the same shape; the
 * tensors the same dtype. The windows must not overlap unless dst == src and
 * the views are identical. */
void h3_op_copy_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *src, const h3_view *sv);
/* Linear cross-fade along one axis (the VAE's tile and window blend):
 *   w = k / extent, k = the element's index along `axis`   (0 <= k < extent)
 *   dst[i] = a[i]·(1 − w) + x[i]·w
 * computed as (a·(1−w)) + (x·w) with w and 1−w rounded to the tensors' dtype
 * first, as torch does. Same shape for the three views, same dtype for the
 * tensors; shape[axis] <= extent. dst may be the very view x (in place). */
void h3_op_blend_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *a, const h3_view *av,
                      const h3_tensor *x, const h3_view *xv, int axis, int extent);
/* Planar normalized frames to packed 8-bit RGB. src [C, F, H, W] (C <= 4),
 * frames [frame0, frame0 + nframes):
 *   v = clamp(src·std[c] + mean[c], 0, 1)·255   (float32: x·std, then + mean)
 *   byte ((f·H + y)·W + x)·C + c = round_half_even(v)
 * h3_dtype has no 8-bit type, so dst is an I32 tensor used as raw bytes; it
 * must hold nframes·H·W·C bytes. Read them with h3_tensor_download_bytes. */
void h3_op_rgb8_from_planar(h3_backend *b, h3_tensor *dst, const h3_tensor *src, int64_t frame0, int64_t nframes,
                            const float *mean, const float *std);
/* Copies the first nbytes of a tensor to the host as they are stored. */
h3_status_code h3_tensor_download_bytes(h3_backend *b, const h3_tensor *src, void *host, size_t nbytes,
                                        h3_status *status);
/* H3_OPS_VIDEO_VAE_END */
/* H3_OPS_AUDIO_VAE_BEGIN */
/* 1-D signal ops of the audio VAE (BigVGAN). Signals are [B, C, L] with time
 * last, the PyTorch Conv1d layout; weights keep PyTorch's layouts too. */

/* Conv1d (cross-correlation, zero padding on both sides):
 *   y[b, co, t] = bias[co] + Σ_{ci in group(co), k} w[co, ci', k] · x[b, ci, t·stride + k·dilation − padding]
 * x [B, Cin, Lin], w [Cout, Cin/groups, K], bias [Cout] or NULL,
 * y [B, Cout, Lout], Lout = (Lin + 2·padding − dilation·(K−1) − 1)/stride + 1. y != x. */
void h3_op_conv1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                  int stride, int padding, int dilation, int groups);
/* ConvTranspose1d (groups 1, dilation 1, no output padding):
 *   y[b, co, m·stride − padding + k] += x[b, ci, m] · w[ci, co, k], then + bias[co]
 * x [B, Cin, Lin], w [Cin, Cout, K], bias [Cout] or NULL,
 * y [B, Cout, Lout], Lout = (Lin − 1)·stride − 2·padding + K. y != x. */
void h3_op_conv_transpose1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                            const h3_tensor *bias, int stride, int padding);
/* Anti-aliased upsampling by `ratio` (BigVGAN UpSample1d), per row of x
 * [rows, L] (any leading dims), filter f [K] shared by all rows:
 *   p = K/ratio − 1, off = p·ratio + (K − ratio)/2, xp[m] = x[clamp(m − p, 0, L−1)]
 *   y[n] = ratio · Σ_{m,k: ratio·m + k = n + off} xp[m] · f[k],  n in [0, L·ratio)
 * y [rows, L·ratio]. y != x. */
void h3_op_upsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio);
/* Anti-aliased downsampling by `ratio` (BigVGAN DownSample1d / LowPassFilter1d),
 * replicate padding K/2 − (K even) on the left:
 *   y[n] = Σ_k f[k] · x[clamp(n·ratio + k − (K/2 − (K even)), 0, L−1)],  n in [0, ceil(L/ratio))
 * x [rows, L], y [rows, ceil(L/ratio)]. y != x. */
void h3_op_downsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio);
/* SnakeBeta with log-space parameters, x and y [B, C, L], alpha/beta [C]:
 *   y = x + sin²(e^alpha[c] · x) / (e^beta[c] + 1e-9) */
void h3_op_snake_beta(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                      const h3_tensor *beta);
/* BigVGAN Activation1d fused: upsample1d(ratio, up_filter) -> snake_beta ->
 * downsample1d(ratio, down_filter). x, y [B, C, L]; y may alias x. */
void h3_op_snake_beta_antialiased(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                                  const h3_tensor *beta, const h3_tensor *up_filter,
                                  const h3_tensor *down_filter, int ratio);
/* y = min(max(x, lo), hi) (NaN stays NaN). */
void h3_op_clamp(h3_backend *b, h3_tensor *y, const h3_tensor *x, float lo, float hi);
/* H3_OPS_AUDIO_VAE_END */

#ifdef __cplusplus
}
#endif
#endif
