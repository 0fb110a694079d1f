/* h3_ops_audio_vae.h - the 1-D signal ops of the audio VAE (BigVGAN decoder,
 * DAC encoder).
 * Part of the op interface: h3_backend.h includes it. */
#ifndef H3_OPS_AUDIO_VAE_H
#define H3_OPS_AUDIO_VAE_H

#include <stdint.h>

#include "backend/h3_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Signals are [B, C, L] with time last, the PyTorch Conv1d layout; weights
 * keep PyTorch's layouts too. */

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
/* Snake1d of the encoder (DAC), alpha in linear scale, x and y [B, C, L],
 * alpha [C] elements (the checkpoint's [1, C, 1]):
 *   y = x + sin²(alpha[c] · x) · (1 / (alpha[c] + 1e-9))
 * y may alias x. */
void h3_op_snake(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha);
/* BigVGAN Activation1d fused: upsample1d(ratio, up_filter) -> snake_beta ->
 * downsample1d(ratio, down_filter). x, y [B, C, L]; y may alias x. */
void h3_op_snake_beta_antialiased(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                                  const h3_tensor *beta, const h3_tensor *up_filter,
                                  const h3_tensor *down_filter, int ratio);
/* y = min(max(x, lo), hi) (NaN stays NaN). */
void h3_op_clamp(h3_backend *b, h3_tensor *y, const h3_tensor *x, float lo, float hi);

#ifdef __cplusplus
}
#endif
#endif
