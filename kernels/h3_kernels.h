/* h3_kernels.h - the CUDA kernels of h3core, as plain C entry points: the
 * conventions they share and the memory-bound kernels (h3_elementwise.cu).
 * The others have a header each: h3_kernels_attention.h (dense attention),
 * h3_kernels_vsa.h (VSA-H3 block-sparse attention), h3_kernels_vae.h (the
 * VAE decoders' ops).
 *
 * The kernels are compiled ahead of time by nvcc (sm_80 and sm_90a) into a
 * static library; the CUDA backend (the .c files of backend/cuda/) calls
 * them through these headers so that the backend itself is ordinary C
 * compiled with the project's warnings. Every function enqueues work on
 * `stream` and returns the CUDA error of the launch (0 = cudaSuccess); none
 * of them synchronizes.
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

/* Bits of the error word: a selector, gather or scatter index outside its
 * table; a VSA tile table that is no tiling of the sequence, a top-k list
 * that came out short (h3_kernels_vsa.h); NaN or Inf met by one of the ops
 * that turn values into media (clamp, rgb8_from_planar). */
enum {
    H3K_ERR_SELECTOR = 1,
    H3K_ERR_GATHER = 2,
    H3K_ERR_SCATTER = 4,
    H3K_ERR_VSA_TABLE = 8,
    H3K_ERR_VSA_SELECT = 16,
    H3K_ERR_NONFINITE_CLAMP = 32,
    H3K_ERR_NONFINITE_RGB = 64
};

/* ---- fills and conversions ---------------------------------------------- */
int h3k_fill(void *p, int dt, int64_t n, float value, cudaStream_t stream);
/* Uniform [lo, hi) from a counter-based hash of (seed, index): the same
 * numbers on every device and launch shape (benchmarks, tests). */
int h3k_fill_uniform(void *p, int dt, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);
/* A dummy tensor's values (h3_st_random, base/h3_safetensors.h) into p
 * viewed as [rows, cols]: element (r, c) is the uniform value at counter
 * offset + (r / part_rows)·part_stride + (r % part_rows)·row_stride + c
 * (strides already resolved: no zeros), the same bits as
 * h3_counter_uniform on the host, rounded to round_dt, then stored in dt. */
typedef struct h3k_random_fill {
    uint64_t key;
    float lo, hi;
    int64_t offset, row_stride, part_rows, part_stride;
    int round_dt;
} h3k_random_fill;
int h3k_fill_random(void *p, int dt, int64_t rows, int64_t cols, const h3k_random_fill *f, cudaStream_t stream);
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
/* y = min(max(x, lo), hi), a NaN made 0; a NaN or Inf in x sets
 * H3K_ERR_NONFINITE_CLAMP in err. */
int h3k_clamp(void *y, int ydt, const void *x, int xdt, int64_t n, float lo, float hi, int *err,
              cudaStream_t stream);
/* *count += the NaN and Inf values of x[n] (F32, BF16, F16), by their
 * exponent bits. The caller zeroes *count first. */
int h3k_count_nonfinite(const void *x, int dt, int64_t n, unsigned long long *count, cudaStream_t stream);
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

#ifdef __cplusplus
}
#endif
#endif
