/* h3_kernels_vae.h - the kernels of the VAE ops (h3_vae.cu): strided views,
 * tile cross-fades and RGB packing (video decoder), 3-D im2col and per-frame
 * GroupNorm (video encoder), 1-D convolutions, resampling and SnakeBeta (audio). Conventions: h3_kernels.h. */
#ifndef H3_KERNELS_VAE_H
#define H3_KERNELS_VAE_H

#include "kernels/h3_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

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
/* A NaN or Inf value sets H3K_ERR_NONFINITE_RGB in err (its pixel is 0). */
int h3k_rgb8_from_planar(uint8_t *dst, const void *src, int dt, int64_t C, int64_t F, int64_t H, int64_t W,
                         int64_t frame0, int64_t nframes, const h3k_rgb_norm *norm, int *err, cudaStream_t stream);
/* The video encoder: a causal 3-D conv's gather into col [rows, C·kt·kh·kw]
 * (h3_op_im2col3d: x [T, H, W, C] channels last, reflect in space, zero
 * frames in front), and GroupNorm per frame of x, y [F, P, C] (h3_op_group_norm). */
typedef struct h3k_conv3d {
    int64_t T, H, W, C, Ho, Wo;
    int kt, kh, kw, st, sh, sw, pad_t, pad_top, pad_left;
} h3k_conv3d;
int h3k_im2col3d(void *col, int cdt, const void *x, int xdt, const h3k_conv3d *g, int64_t n0, int64_t rows,
                 cudaStream_t stream);
int h3k_group_norm(void *y, int ydt, const void *x, int xdt, const float *w, const float *bias, int64_t F, int64_t P,
                   int64_t C, int groups, float eps, int silu, cudaStream_t stream);
int h3k_conv1d(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, const void *bias, int bdt, int64_t B,
               int64_t Cin, int64_t Lin, int64_t Cout, int64_t Lout, int K, int stride, int padding, int dilation,
               int groups, cudaStream_t stream);
/* conv1d as GEMMs (float32, groups 1): the im2col [Lout, Cin·K] of one batch item, and the bias per channel. */
int h3k_im2col1d(float *col, const float *x, int64_t Cin, int64_t Lin, int64_t Lout, int K, int stride, int padding,
                 int dilation, cudaStream_t stream);
int h3k_add_channel_bias(float *y, const float *bias, int64_t B, int64_t C, int64_t L, cudaStream_t stream);
/* conv1d as an implicit GEMM (float32, groups 1): the im2col tiles gathered in shared memory, never stored;
 * y [B, Cout, Lout] gets + bias[Cout] (bias may be NULL). y != x. */
int h3k_conv1d_igemm(float *y, const float *x, const float *w, const float *bias, int64_t B, int64_t Cin, int64_t Lin,
                     int64_t Cout, int64_t Lout, int K, int stride, int padding, int dilation, cudaStream_t stream);
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

#ifdef __cplusplus
}
#endif
#endif
