/* h3_backend_cpu_impl.h - what the files of the CPU backend share. Private
 * to backend/cpu/.
 *
 * h3_backend_cpu.c holds the backend, its ops table and the core ops; the
 * subsystems' ops live one file each and are reached through the table:
 *   h3_cpu_video_vae.c   views, cross-fade, RGB8 (backend/h3_ops_video_vae.h)
 *   h3_cpu_audio_vae.c   1-D signal ops (backend/h3_ops_audio_vae.h)
 *   h3_cpu_vsa.c         VSA-H3 attention (backend/h3_ops_vsa.h) */
#ifndef H3_BACKEND_CPU_IMPL_H
#define H3_BACKEND_CPU_IMPL_H

#include <stddef.h>

#include "backend/h3_backend_impl.h"

/* 1 when t is NULL or float32; else records why the CPU backend cannot run
 * op on it and returns 0. */
int h3_cpu_need_f32(h3_backend *b, const char *op, const h3_tensor *t);
/* The backend's kept scratch buffer, grown to n floats on first need (so
 * the denoising loop allocates nothing after its first step). NULL, with
 * the sticky error set, when out of memory. */
float *h3_cpu_scratch(h3_backend *b, size_t n);

/* ---- h3_cpu_fp8.c (precision=fp8) ---- */
void h3_cpu_quantize_fp8(h3_backend *b, h3_tensor *dst, const h3_tensor *src);
/* h3_op_linear with an H3_F8E4M3 weight. */
void h3_cpu_linear_fp8(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias);

/* ---- h3_cpu_video_vae.c ---- */
void h3_cpu_copy_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *src, const h3_view *sv);
void h3_cpu_blend_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *a, const h3_view *av,
                       const h3_tensor *x, const h3_view *xv, int axis, int extent);
void h3_cpu_im2col3d(h3_backend *b, h3_tensor *col, const h3_tensor *x, const h3_conv3d_geom *g, int64_t n0);
void h3_cpu_group_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                       int groups, float eps, int silu);
void h3_cpu_rgb8_from_planar(h3_backend *b, h3_tensor *dst, const h3_tensor *src, int64_t frame0, int64_t nframes,
                             const float *mean, const float *std);

/* ---- h3_cpu_audio_vae.c ---- */
void h3_cpu_conv1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                   int stride, int padding, int dilation, int groups);
void h3_cpu_conv_transpose1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                             const h3_tensor *bias, int stride, int padding);
void h3_cpu_upsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio);
void h3_cpu_downsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio);
void h3_cpu_snake_beta(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                       const h3_tensor *beta);
void h3_cpu_snake(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha);
void h3_cpu_snake_beta_antialiased(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                                   const h3_tensor *beta, const h3_tensor *up_filter,
                                   const h3_tensor *down_filter, int ratio);
void h3_cpu_clamp(h3_backend *b, h3_tensor *y, const h3_tensor *x, float lo, float hi);

/* ---- h3_cpu_vsa.c ---- */
void h3_cpu_vsa_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                          const h3_tensor *gate, const h3_vsa_tiles *tiles, int n_heads, int head_dim);

#endif
