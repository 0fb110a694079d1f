/* h3_ops_video_vae.h - the ops of the video VAE decoder: strided views,
 * the tile and window cross-fade, RGB conversion. Part of the op
 * interface: h3_backend.h includes it. */
#ifndef H3_OPS_VIDEO_VAE_H
#define H3_OPS_VIDEO_VAE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/h3_tensor.h"
#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Data movement of the video VAE decoder (latent tile gather, unpatchify,
 * tile stitching, window cross-fade, RGB conversion), kept on the backend so
 * decoded pixels never round-trip through the host until they are final.
 *
 * A view is a strided window into a tensor's elements: element
 * (i0, ..., i[ndim-1]) lives at data[offset + Σ i_k·stride_k] (offset and
 * strides in elements, strides >= 0). The whole window must lie inside the
 * tensor; h3_ops_video_vae_check.c checks that. Views are host structs passed by pointer. */
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

#ifdef __cplusplus
}
#endif
#endif
