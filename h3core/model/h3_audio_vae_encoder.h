/* h3_audio_vae_encoder.h - the MiniMax-H3 audio VAE encoder, waveform to
 * latents: the posterior mean a Ref2VA audio reference (or a reference
 * video's soundtrack) becomes (docs/spec/h3-vaes.md §4.5).
 *
 *   x [B, 1, S] (zero-padded to a multiple of the hop)
 *   -> DAC encoder: conv k7, then per rate a block of 3 residual units
 *      (Snake1d, dilated conv k7, Snake1d, conv k1) and a strided conv
 *      doubling the width, then Snake1d and a conv k3 to latent_dim
 *   -> pre_block on [B, Na, latent_dim]: proj(norm3(x)) + attn(norm1(x)),
 *      then + mlp(norm2(x)); attn is causal self-attention whose heads are
 *      averaged and pooled to latent_channels
 *   -> mean_proj (k1): the posterior mean [B, latent_channels, Na]
 *
 * The pipeline uses the mean, never a sample, so logs_proj is not loaded.
 * Stereo is two batch items, channel 0 first, as for the decoder. Weights
 * and activations stay float32 (the reference encodes in fp32). Ops: conv1d,
 * snake, layer_norm, linear, attention, gelu, copy_view; the backend must
 * implement each (the CUDA backend has no snake yet: H3_ERR_UNSUPPORTED,
 * naming the op). */
#ifndef H3_AUDIO_VAE_ENCODER_H
#define H3_AUDIO_VAE_ENCODER_H

#include "backend/h3_backend.h"
#include "base/h3_safetensors.h"
#include "base/h3_status.h"
#include "model/h3_audio_vae.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct h3_audio_vae_encoder h3_audio_vae_encoder;

/* dir is the audio_vae/ directory (its config must describe the encoder:
 * encoder_dim, encoder_rates, num_attention_heads); weights NULL: dir's
 * files, else a checkpoint the caller keeps. Loads encoder.*, pre_block.*
 * and mean_proj.*. */
h3_status_code h3_audio_vae_encoder_load(h3_backend *b, const char *dir, const h3_checkpoint *weights,
                                         h3_audio_vae_encoder **out, h3_status *status);
void h3_audio_vae_encoder_free(h3_audio_vae_encoder *enc);
const h3_audio_vae_config *h3_audio_vae_encoder_config(const h3_audio_vae_encoder *enc);

/* Latents per channel for n_samples samples: ceil(n_samples / hop) (the
 * input is right-padded with zeros to a whole number of hops). */
int64_t h3_audio_vae_encoded_length(const h3_audio_vae_encoder *enc, int64_t n_samples);

/* samples: host float32 [n_channels, n_samples], channel-major (stereo: 2).
 * mean: host float32 [n_channels, latent_channels, Na] (Na =
 * h3_audio_vae_encoded_length), the posterior mean, not normalized.
 * cancel_flag (may be NULL) is polled between encoder stages. */
h3_status_code h3_audio_vae_encode(h3_audio_vae_encoder *enc, const float *samples, int n_channels,
                                   int64_t n_samples, float *mean, const volatile int *cancel_flag,
                                   h3_status *status);

/* The rows a reference's audio takes in the DiT's sequence: normalized and
 * channel-major, rows [n_channels·Na, latent_channels] with
 *   rows[ch·Na + n, c] = (mean[ch, c, n] − latents_mean[c]) / latents_std[c]
 * in float32 (the statistics rounded to float32 first, as torch.tensor of
 * the config's lists). The inverse of h3_audio_vae_denormalize + packing. */
void h3_audio_vae_normalize_rows(const h3_audio_vae_config *cfg, const float *mean, int n_channels, int64_t n_latents,
                                 float *rows);

#ifdef __cplusplus
}
#endif
#endif
