/* h3_kernels.h - the CUDA kernels of h3core, as plain C entry points.
 *
 * The kernels are compiled ahead of time by nvcc (sm_80 and sm_90a) into a
 * static library; h3core/h3_backend_cuda.c calls them through this header
 * so that the backend itself is ordinary C compiled with the project's
 * warnings. Every function enqueues work on `stream` and returns the CUDA
 * error of the launch (0 = cudaSuccess); none of them synchronizes.
 *
 * Dtype codes are h3_dtype's values: 0 F32, 1 BF16, 2 F16, 3 I32 and -1 for
 * "no tensor". Element tensors may mix dtypes; every kernel computes in
 * float32 and rounds once when it stores. Pointers of a row-structured op
 * are taken as contiguous row-major. `err` is a device word the kernels OR
 * bits into when they meet an index outside its table (H3K_ERR_*); the
 * backend reads it back when it synchronizes. */
#ifndef H3_KERNELS_H
#define H3_KERNELS_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { H3K_F32 = 0, H3K_BF16 = 1, H3K_F16 = 2, H3K_I32 = 3, H3K_NONE = -1 };

enum { H3K_ERR_SELECTOR = 1, H3K_ERR_GATHER = 2, H3K_ERR_SCATTER = 4 };

/* ---- fills and conversions ---------------------------------------------- */
int h3k_fill(void *p, int dt, int64_t n, float value, cudaStream_t stream);
/* Uniform [lo, hi) from a counter-based hash of (seed, index): the same
 * numbers on every device and launch shape (benchmarks, tests). */
int h3k_fill_uniform(void *p, int dt, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);
/* dst[i] = src[i] with conversion; same dtype is a plain device copy. */
int h3k_convert(void *dst, int ddt, const void *src, int sdt, int64_t n, cudaStream_t stream);

/* ---- elementwise ---------------------------------------------------------- */
/* op 0: y = a + b, 1: y = a * b */
int h3k_binary(int op, void *y, int ydt, const void *a, int adt, const void *b, int bdt, int64_t n,
               cudaStream_t stream);
/* op 0: y[r,c] = x[r,c] * v[c], 1: y[r,c] = x[r,c] + v[c] */
int h3k_row_vector(int op, void *y, int ydt, const void *x, int xdt, const void *v, int vdt, int64_t rows,
                   int64_t cols, cudaStream_t stream);
int h3k_scale(void *y, int ydt, const void *x, int xdt, int64_t n, float alpha, cudaStream_t stream);
/* op 0 silu, 1 gelu (erf), 2 gelu (tanh) */
int h3k_unary(int op, void *y, int ydt, const void *x, int xdt, int64_t n, cudaStream_t stream);
/* y = min(max(x, lo), hi), NaN kept. */
int h3k_clamp(void *y, int ydt, const void *x, int xdt, int64_t n, float lo, float hi, cudaStream_t stream);
/* u [rows, 2F] -> y [rows, F] */
int h3k_swiglu(void *y, int ydt, const void *u, int udt, int64_t rows, int64_t F, int value_first,
               cudaStream_t stream);

/* ---- normalisation and modulation ---------------------------------------- */
/* y = x / rms(x) * w over groups of `width` consecutive elements (w may be NULL). */
int h3k_rms_norm(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, int64_t groups, int64_t width,
                 float eps, cudaStream_t stream);
int h3k_layer_norm(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, const void *bias, int bdt,
                   int64_t rows, int64_t D, float eps, cudaStream_t stream);
/* y[s] = x[s] * (1 + scale[sel[s]]) + shift[sel[s]]; T = table rows. */
int h3k_modulate(void *y, int ydt, const void *x, int xdt, const void *shift, int shdt, const void *scale, int scdt,
                 const int32_t *sel, int64_t S, int64_t D, int64_t T, int *err, cudaStream_t stream);
/* y[s] = rms_norm(x[s]) * w * (1 + scale[sel[s]]) + shift[sel[s]] (w may be NULL). */
int h3k_rms_norm_modulate(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, float eps,
                          const void *shift, int shdt, const void *scale, int scdt, const int32_t *sel, int64_t S,
                          int64_t D, int64_t T, int *err, cudaStream_t stream);
/* x[s] += gate[sel[s]] * y[s] */
int h3k_gated_residual(void *x, int xdt, const void *gate, int gdt, const void *y, int ydt, const int32_t *sel,
                       int64_t S, int64_t D, int64_t T, int *err, cudaStream_t stream);
/* In place on x [S, n_heads*head_dim]: optional per-head RMSNorm (norm != 0,
 * weight w [head_dim] or NULL), then rotate-half RoPE on [0, rot_dim) with
 * f32 cos/sin [S, rot_dim] (rot_dim 0: no rotation). */
int h3k_head_norm_rope(void *x, int xdt, int norm, const void *w, int wdt, float eps, const float *cos,
                       const float *sin, int64_t S, int n_heads, int head_dim, int rot_dim, cudaStream_t stream);

/* ---- rows ---------------------------------------------------------------- */
/* dst[i] = src[idx[i]] (i < n); src has src_rows rows of row_bytes. */
int h3k_gather_rows(void *dst, const void *src, const int32_t *idx, int64_t n, int64_t src_rows, int64_t row_bytes,
                    int *err, cudaStream_t stream);
/* dst[idx[i]] = src[i] (i < n); dst has dst_rows rows. */
int h3k_scatter_rows(void *dst, const void *src, const int32_t *idx, int64_t n, int64_t dst_rows,
                     int64_t row_bytes, int *err, cudaStream_t stream);

/* ---- VAE ops (h3_vae.cu) ----------------------------------------------------- */
/* A strided window: element (i0, ...) at offset + Σ i_k·stride_k (elements). */
typedef struct h3k_view {
    int ndim;
    int64_t shape[8];
    int64_t offset;
    int64_t stride[8];
} h3k_view;
typedef struct h3k_rgb_norm {
    float mean[4], std[4];
} h3k_rgb_norm;

int h3k_copy_view(void *dst, const h3k_view *dv, const void *src, const h3k_view *sv, int elem_size,
                  cudaStream_t stream);
/* dst = a·(1 − w) + x·w, w = k/extent along `axis`, rounded to dt like torch. */
int h3k_blend_view(void *dst, const h3k_view *dv, const void *a, const h3k_view *av, const void *x,
                   const h3k_view *xv, int dt, int axis, int extent, cudaStream_t stream);
int h3k_rgb8_from_planar(uint8_t *dst, const void *src, int dt, int64_t C, int64_t F, int64_t H, int64_t W,
                         int64_t frame0, int64_t nframes, const h3k_rgb_norm *norm, cudaStream_t stream);
int h3k_conv1d(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, const void *bias, int bdt, int64_t B,
               int64_t Cin, int64_t Lin, int64_t Cout, int64_t Lout, int K, int stride, int padding, int dilation,
               int groups, cudaStream_t stream);
/* conv1d as GEMMs (float32, groups 1): the im2col [Lout, Cin·K] of one batch item, and the bias per channel. */
int h3k_im2col1d(float *col, const float *x, int64_t Cin, int64_t Lin, int64_t Lout, int K, int stride, int padding,
                 int dilation, cudaStream_t stream);
int h3k_add_channel_bias(float *y, const float *bias, int64_t B, int64_t C, int64_t L, cudaStream_t stream);
int h3k_conv_transpose1d(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, const void *bias, int bdt,
                         int64_t B, int64_t Cin, int64_t Lin, int64_t Cout, int64_t Lout, int K, int stride,
                         int padding, cudaStream_t stream);
int h3k_upsample1d(void *y, int ydt, const void *x, int xdt, const void *f, int fdt, int K, int ratio, int64_t rows,
                   int64_t L, cudaStream_t stream);
int h3k_downsample1d(void *y, int ydt, const void *x, int xdt, const void *f, int fdt, int K, int ratio, int64_t rows,
                     int64_t L, int64_t Lout, cudaStream_t stream);
int h3k_snake_beta(void *y, int ydt, const void *x, int xdt, const void *alpha, int adt, const void *beta, int bdt,
                   int64_t B, int64_t C, int64_t L, cudaStream_t stream);
/* y must not alias x. */
int h3k_snake_beta_antialiased(void *y, int ydt, const void *x, int xdt, const void *alpha, int adt, const void *beta,
                               int bdt, const void *up, int updt, int Ku, const void *down, int downdt, int Kd,
                               int ratio, int64_t B, int64_t C, int64_t L, cudaStream_t stream);

/* ---- attention ------------------------------------------------------------- */
/* Which kernel runs an attention call. */
enum { H3K_ATTN_AUTO = 0, H3K_ATTN_GENERIC = 1, H3K_ATTN_MMA = 2, H3K_ATTN_WGMMA = 3, H3K_ATTN_WGMMA_SIMPLE = 4,
       /* k_attn_fa3 variants (sm_90a), kept in this order (h3k_attention_scratch tests the range) */
       H3K_ATTN_FA3 = 5, H3K_ATTN_FA3_S2 = 6, H3K_ATTN_FA3_NOPP = 7, H3K_ATTN_FA3_LAZY = 8, H3K_ATTN_FA3_N176 = 9,
       H3K_ATTN_FA3_N192 = 10 };

typedef struct h3k_attention_args {
    void *o;
    const void *q, *k, *v;
    int dt; /* F32, BF16 or F16: q, k, v and o share it */
    int64_t Sq, Skv;
    int n_heads, n_kv_heads, head_dim, causal;
    float scale;
    int path;           /* H3K_ATTN_*: AUTO picks from the device (sm), dtype and head_dim */
    int sm;             /* compute capability major*10+minor of the device */
    void *scratch;      /* device scratch for the Hopper path (V transposed) */
    size_t scratch_size;
} h3k_attention_args;

/* Device scratch bytes the attention call needs (0 for most paths). */
size_t h3k_attention_scratch(const h3k_attention_args *a);
/* The path AUTO resolves to for these arguments. */
int h3k_attention_path(const h3k_attention_args *a);
int h3k_attention(const h3k_attention_args *a, cudaStream_t stream);
const char *h3k_attention_path_name(int path);

/* H3K_VSA_BEGIN: VSA-H3 block-sparse attention (h3_vsa.cu; spec fasth3-vsa.md
 * §3, op contract in h3core/h3_backend.h). Everything runs on the stream:
 * the tile tables are expanded into a slot table, q/k/v are mean-pooled per
 * tile (bit-identical to h3_vsa_pool/h3_vsa_scores, so the selection equals
 * the CPU op's), each video query tile's key-tile list is selected and
 * compacted on the device, then the block-sparse kernel (paths as for
 * h3k_attention: wgmma on sm_90a for bf16/head_dim 128/64-row tiles,
 * mma.sync on sm_80+ for bf16/f16, head_dim 64/128, tiles <= 64 rows, and a
 * generic kernel for the rest) adds the compressed branch and writes the
 * rows back in packed order. A table entry out of range sets
 * H3K_ERR_VSA_TABLE in err. */
enum { H3K_ERR_VSA_TABLE = 8, H3K_ERR_VSA_SELECT = 16 };

typedef struct h3k_vsa_args {
    void *o;
    const void *q, *k, *v, *gate; /* [S, n_heads·head_dim] packed rows; gate NULL: no compressed branch */
    int dt;                       /* F32, BF16 or F16, shared by all five */
    int64_t S;
    int n_heads, head_dim;
    int64_t num_tiles, num_prefix_tiles, topk; /* topk >= num_tiles − num_prefix_tiles: dense */
    int tile_elems;
    const int32_t *tile_sizes;   /* device, [num_tiles] */
    const int32_t *untile_index; /* device, [S]: padded slot of each packed row */
    int path;                    /* H3K_ATTN_*: AUTO/WGMMA pick the best fit, MMA, GENERIC */
    int pipelined;               /* wgmma path: 0 the simple consumer, 1 the FA3-style pipelined one, 2 paired */
    int sm;
    void *scratch;
    size_t scratch_size;
    int *err;
    cudaEvent_t events[4]; /* all set: recorded before the call, after the tile means and images, after the
                              scores, selection and compressed branch, after the block-sparse kernel */
} h3k_vsa_args;

size_t h3k_vsa_scratch(const h3k_vsa_args *a);
/* Benchmarks: probes of the wgmma fine kernel over what the last call with these arguments left in the
 * scratch. COPIES: its tile copies alone (same grid, stages and lists, no math, nothing written). MATH: its
 * simple consumer alone (the whole list's GEMMs and softmax over three resident stages, no copies, nothing
 * written). cudaErrorNotSupported off the wgmma path. */
enum { H3K_VSA_PROBE_COPIES = 0, H3K_VSA_PROBE_MATH = 1 };
int h3k_vsa_probe(const h3k_vsa_args *a, int which, cudaStream_t stream);
/* The kernel (H3K_ATTN_WGMMA, _MMA or _GENERIC) a call with these arguments runs. */
int h3k_vsa_path(const h3k_vsa_args *a);
int h3k_vsa_attention(const h3k_vsa_args *a, cudaStream_t stream);
/* CTAs of the block-sparse kernel a call with these arguments runs that fit on one SM. */
int h3k_vsa_ctas_per_sm(const h3k_vsa_args *a);
/* Where a call with these arguments leaves, in its scratch, the key-tile
 * lists it selected ([n_heads][n − P][P + topk] int32: the prefix tiles,
 * then the top-k video tiles ascending, per video query tile) and the
 * coarse scores ([n_heads][n][n] f32); NULL for what such a call does not
 * build (dense calls have no lists; dense calls without a gate no scores). */
void h3k_vsa_results(const h3k_vsa_args *a, const int32_t **lists, const float **scores);
/* H3K_VSA_END */

#ifdef __cplusplus
}
#endif
#endif
