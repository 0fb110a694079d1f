/* h3_ops_video_vae.h - the ops of the video VAE: strided views, the tile
 * and window cross-fade, RGB conversion (the decoder); the causal 3-D
 * convolution's gather and the per-frame GroupNorm (the encoder). Part of
 * the op interface: h3_backend.h includes it. */
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

/* ---- the encoder (causal 3-D CNN, docs/spec/h3-vaes.md §3.4) ----------------
 * Activations are channels last, [T, H, W, C] (frames, rows, columns,
 * channels) for one clip of one tile, so a convolution is a gather (im2col)
 * followed by h3_op_linear with the weight [Cout, Cin·kt·kh·kw] (PyTorch's
 * Conv3d layout flattened), and a 1×1×1 convolution is h3_op_linear alone. */
typedef struct h3_conv3d_geom {
    int kt, kh, kw;                               /* kernel */
    int st, sh, sw;                               /* stride */
    int pad_t;                                    /* zero frames in front (causal); none at the back */
    int pad_top, pad_bottom, pad_left, pad_right; /* reflect padding (torch 'reflect': no edge repeat) */
} h3_conv3d_geom;

/* x [T, H, W, C] float; the padded input xp is x with pad_t zero frames in
 * front and reflect-padded rows and columns (each pad < that size). Output
 * positions n = (t·Ho + y)·Wo + x, To = (T + pad_t − kt)/st + 1,
 * Ho = (H + pad_top + pad_bottom − kh)/sh + 1, Wo likewise; for the rows of
 * col, n in [n0, n0 + rows):
 *   col[n − n0, ((c·kt + a)·kh + i)·kw + j] = xp[t·st + a, y·sh + i, x·sw + j, c]
 * col [rows, C·kt·kh·kw] of any float dtype (values converted to it). */
void h3_op_im2col3d(h3_backend *b, h3_tensor *col, const h3_tensor *x, const h3_conv3d_geom *g, int64_t n0);
/* GroupNorm of each frame on its own (the encoder's "temporally isolated"
 * GroupNorm), channels last: x, y [F, P, C] float (P pixels per frame);
 * for each frame f and group of C/groups consecutive channels, mean and
 * biased variance over its P·C/groups values (accumulated in double), then
 *   y = (x − mean)·(1/sqrt(var + eps))·w[c] + bias[c],   y = y·sigmoid(y) if silu.
 * w and bias [C] float32. y may alias x. */
void h3_op_group_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                      int groups, float eps, int silu);

#ifdef __cplusplus
}
#endif
#endif
