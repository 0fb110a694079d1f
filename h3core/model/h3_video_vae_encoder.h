/* h3_video_vae_encoder.h - the MiniMax-H3 video VAE encoder: RGB frames ->
 * the posterior's mean and log-variance, and the FL2VA keyframe condition.
 *
 * The encoder is a causal 3-D CNN (docs/spec/h3-vaes.md §3.4) run exactly
 * as diffusers' AutoencoderKLMiniMaxH3.encode: pixels ImageNet-normalized
 * over [0, 1]; one frame goes through the spatial path alone (1 latent);
 * more frames are cut into clips of 17 (the last padded by repeating the
 * last frame), each clip encoded from zero causal history, the clips'
 * latents concatenated and the last 3 (token_drop) dropped (§3.3); each clip
 * is encoded in 256-px spatial tiles whose moments are blended in latent
 * space (§3.4, §3.7). The VAE must have been loaded with the encoder
 * (h3_video_vae_load_with, options.encoder = 1). Under tensor parallelism
 * (h3_video_vae_set_tp) all ranks call together; the tiles are shared out
 * and every rank returns the whole result.
 *
 * Keyframe condition (§3.10, diffusers encode_vae_condition): the posterior
 * is sampled, z = mean + exp(0.5·logvar)·ε with ε = torch.randn of the
 * latent's shape [1, C, 1, h, w] on the CPU generator, rounded to float16
 * and back, then normalized: (z − latents_mean)/latents_std. The official
 * pipeline draws ε from a fresh torch.Generator().manual_seed(42) for every
 * keyframe (H3_VIDEO_VAE_KEYFRAME_SEED), not from the request's generator. */
#ifndef H3_VIDEO_VAE_ENCODER_H
#define H3_VIDEO_VAE_ENCODER_H

#include <stddef.h>
#include <stdint.h>

#include "base/h3_random.h"
#include "base/h3_status.h"
#include "model/h3_video_vae.h"

#ifdef __cplusplus
extern "C" {
#endif

/* diffusers' keyframe_encode_seed: the posterior sample's generator seed. */
#define H3_VIDEO_VAE_KEYFRAME_SEED 42

/* Frames to encode: packed 8-bit RGB, frame f's row y at
 * rgb + f·frame_stride + y·stride (bytes; stride 0: 3·width; frame_stride 0:
 * stride·height). width and height must be multiples of the spatial
 * compression (16) and at least twice it. */
typedef struct h3_video_vae_frames {
    const uint8_t *rgb;
    int frames, width, height;
    size_t stride, frame_stride;
} h3_video_vae_frames;

/* Latent frames an encode of `frames` frames gives: 1 for one frame, else
 * ceil(frames/17)·5 − 3 (22 -> 7, 124 -> 37); -1 if frames < 1, or for
 * more than one frame when the VAE was loaded without its encoder. */
int h3_video_vae_encoded_frames(const h3_video_vae *vae, int frames);

/* The posterior: mean and logvar (clamped to [-30, 20]), each
 * [C, T_lat, height/16, width/16] float32 on the host, C = 24 latent
 * channels, T_lat = h3_video_vae_encoded_frames(frames). Either may be NULL. */
h3_status_code h3_video_vae_encode(h3_video_vae *vae, const h3_video_vae_frames *in, float *mean, float *logvar,
                                   h3_status *status);

/* The keyframe condition of one image already resized to the canvas:
 * out [C, 1, height/16, width/16] normalized latents (the DiT's latent
 * space). gen: the generator ε is drawn from (C·h·w values, advancing it);
 * NULL: a fresh one seeded H3_VIDEO_VAE_KEYFRAME_SEED, as the pipeline does. */
h3_status_code h3_video_vae_encode_keyframe(h3_video_vae *vae, const uint8_t *rgb, int width, int height,
                                            size_t stride, h3_torch_generator *gen, float *out, h3_status *status);

/* The condition recipe alone, per element of [C, n] (n values per channel):
 *   z = mean + exp(0.5·logvar)·eps;  z = f32(f16(z));  out = (z − latents_mean[c])/latents_std[c]
 * logvar already clamped (h3_video_vae_encode's). */
void h3_video_vae_condition_latents(const h3_video_vae *vae, const float *mean, const float *logvar, const float *eps,
                                    int64_t n, float *out);

#ifdef __cplusplus
}
#endif
#endif
