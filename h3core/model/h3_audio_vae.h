/* h3_audio_vae.h - the MiniMax-H3 audio VAE decoder (BigVGAN), latents to
 * waveform.
 *
 * The VAE is mono at the configured sample rate (32 kHz for the release);
 * stereo is carried as two batch items, channel 0 first. Weights stay
 * float32 on every backend (bf16 decodes audibly quieter), with weight norm
 * folded once at load time. */
#ifndef H3_AUDIO_VAE_H
#define H3_AUDIO_VAE_H

#include "backend/h3_backend.h"
#include "base/h3_safetensors.h"
#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define H3_AUDIO_VAE_CHANNELS 2 /* stereo as batch items */
#define H3_AUDIO_VAE_MAX_STAGES 12
#define H3_AUDIO_VAE_MAX_KERNELS 8
#define H3_AUDIO_VAE_MAX_DILATIONS 8
#define H3_AUDIO_VAE_MAX_LATENT_CHANNELS 256

/* The decoder's geometry, from either layout of the model directory:
 * diffusers (config.json with decoder_rates, ...) or the native FL2VA one
 * (config.json + metadata.json, BigVGAN tables fixed per sample rate). */
typedef struct h3_audio_vae_config {
    int sample_rate;
    int latent_channels; /* 32 */
    int latent_dim;      /* width after dec_in_proj: 2048 */
    int decoder_dim;     /* BigVGAN initial channels: 1024 */
    int n_stages;
    int rates[H3_AUDIO_VAE_MAX_STAGES];        /* upsampling strides */
    int kernel_sizes[H3_AUDIO_VAE_MAX_STAGES]; /* transposed-conv kernels */
    int n_kernels;                             /* AMP blocks per stage */
    int resblock_kernels[H3_AUDIO_VAE_MAX_KERNELS];
    int n_dilations[H3_AUDIO_VAE_MAX_KERNELS];
    int dilations[H3_AUDIO_VAE_MAX_KERNELS][H3_AUDIO_VAE_MAX_DILATIONS];
    int hop;                                   /* product of rates */
    /* The encoder (DAC blocks + attention head), for reference audio; 0 /
     * empty when the config does not describe one (encoder_rates absent). */
    int encoder_dim;                                 /* width of the first conv: 64 */
    int n_encoder_stages;
    int encoder_rates[H3_AUDIO_VAE_MAX_STAGES];      /* downsampling strides, product = hop */
    int num_attention_heads;                         /* of the encoder's causal attention: 8 */
    double latents_mean[H3_AUDIO_VAE_MAX_LATENT_CHANNELS];
    double latents_std[H3_AUDIO_VAE_MAX_LATENT_CHANNELS];
} h3_audio_vae_config;

/* Reads and validates the config of an audio_vae/ directory. */
h3_status_code h3_audio_vae_config_load(const char *dir, h3_audio_vae_config *cfg, h3_status *status);

/* The decoder's tensors (docs/spec/h3-vaes.md §4.6): the one list the loader
 * reads, that h3-bench and h3-make-tiny-model write random checkpoints from.
 * What a tensor is, and where it sits, so that a writer can draw each kind at
 * its own scale: */
typedef enum h3_audio_vae_role {
    H3_AUDIO_VAE_CONV_WEIGHT, /* a plain Conv1d weight [out, in, k] (dec_in_proj) */
    H3_AUDIO_VAE_WN_V,        /* weight_v of a weight-normed conv: Conv1d [out, in, k], ConvTranspose1d [in, out, k] */
    H3_AUDIO_VAE_WN_G,        /* its weight_g [v's dim 0, 1, 1], right after it: w = g·v/‖v‖ per slice of dim 0 */
    H3_AUDIO_VAE_BIAS,        /* a conv's bias [out] */
    H3_AUDIO_VAE_SNAKE_ALPHA, /* SnakeBeta's log-scale alpha [C] */
    H3_AUDIO_VAE_SNAKE_BETA,  /* and beta [C] */
    H3_AUDIO_VAE_FILTER_UP,   /* a buffer, not a parameter: the ×2 upsampler's Kaiser-sinc low-pass [1, 1, 12] */
    H3_AUDIO_VAE_FILTER_DOWN  /* the ×2 downsampler's, the same taps */
} h3_audio_vae_role;

typedef enum h3_audio_vae_module {
    H3_AUDIO_VAE_IN_PROJ,    /* dec_in_proj: latent_channels -> latent_dim */
    H3_AUDIO_VAE_CONV_PRE,   /* decoder.conv_pre: latent_dim -> decoder_dim */
    H3_AUDIO_VAE_UPSAMPLE,   /* decoder.ups.{s}.0: a ConvTranspose1d by `stride`, halving the width */
    H3_AUDIO_VAE_ACTIVATION, /* an anti-aliased SnakeBeta: in an AMP block, or decoder.activation_post */
    H3_AUDIO_VAE_AMP_CONV1,  /* an AMP block's dilated conv (convs1) */
    H3_AUDIO_VAE_AMP_CONV2,  /* the conv that ends its residual branch (convs2) */
    H3_AUDIO_VAE_CONV_POST   /* decoder.conv_post: to one channel, no bias */
} h3_audio_vae_module;

typedef struct h3_audio_vae_tensor {
    const char *name; /* valid during the callback */
    int ndim;
    int64_t shape[3];
    h3_st_dtype dtype; /* as the release stores it: float32 */
    h3_audio_vae_role role;
    h3_audio_vae_module module;
    int stride; /* H3_AUDIO_VAE_UPSAMPLE: its rate; 1 otherwise */
} h3_audio_vae_tensor;

typedef h3_status_code (*h3_audio_vae_tensor_fn)(void *opaque, const h3_audio_vae_tensor *t, h3_status *status);

/* Calls fn for every decoder tensor (dec_in_proj and decoder.*) of a VAE with
 * config cfg (h3_audio_vae_config_load), module by module as data flows
 * through them: the order h3-make-tiny-model draws its random values in. Each
 * weight_v comes right before its weight_g, which a writer may compute from
 * it. Stops at fn's first error and returns it. */
h3_status_code h3_audio_vae_decoder_tensors(const h3_audio_vae_config *cfg, h3_audio_vae_tensor_fn fn, void *opaque,
                                            h3_status *status);

typedef struct h3_audio_vae h3_audio_vae;

/* dir is the audio_vae/ directory (config + safetensors). Only the decoder
 * side (dec_in_proj, decoder.*) is loaded. */
h3_status_code h3_audio_vae_load(h3_backend *b, const char *dir, h3_audio_vae **out, h3_status *status);
/* The same, with the weights from `weights` (NULL: dir's files; else e.g. a
 * dummy checkpoint, which the caller keeps and frees). */
h3_status_code h3_audio_vae_load_from(h3_backend *b, const char *dir, const h3_checkpoint *weights,
                                      h3_audio_vae **out, h3_status *status);
/* load-format dummy: a checkpoint of the decoder tensors of dir's config
 * (h3_audio_vae_decoder_tensors), float32 as the release stores them, with
 * no bytes: values drawn on the backend, keyed by (seed, name), at h3-bench's
 * ranges (weight norm folds to a known range); the resampling filters, fixed
 * buffers, hold their real taps. The caller closes it. */
h3_status_code h3_audio_vae_dummy_checkpoint(const char *dir, uint64_t seed, h3_checkpoint **out, h3_status *status);
void h3_audio_vae_free(h3_audio_vae *vae);
const h3_audio_vae_config *h3_audio_vae_get_config(const h3_audio_vae *vae);
int h3_audio_vae_sample_rate(const h3_audio_vae *vae); /* 32000 for the release */
int h3_audio_vae_hop(const h3_audio_vae *vae);         /* samples per latent: 800 */

/* latents: normalized host float32 [2, latent_channels, n_latents] (stereo as
 * 2 batch items). De-normalizes with the config's latents_mean/std, decodes,
 * clamps to [-1, 1]. out: host float32 [2, n_latents·hop], channel-major,
 * allocated by the caller. cancel_flag (may be NULL) is polled between
 * stages; a non-zero value returns H3_ERR_CANCELLED. */
/* The de-normalization decode applies first: out = latents·std[c] + mean[c]
 * in float32 over [2, latent_channels, n_latents]. */
void h3_audio_vae_denormalize(const h3_audio_vae *vae, const float *latents, int n_latents, float *out);

h3_status_code h3_audio_vae_decode(h3_audio_vae *vae, const float *latents, int n_latents, float *out,
                                   const volatile int *cancel_flag, h3_status *status);

#ifdef __cplusplus
}
#endif
#endif
