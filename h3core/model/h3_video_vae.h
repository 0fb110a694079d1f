/* h3_video_vae.h - the MiniMax-H3 video VAE decoder: latents -> RGB frames.
 *
 * The decoder is a non-causal ViT (docs/spec/h3-vaes.md §3.5) run per temporal
 * window of 7 latents (5 new + 2 overlap, cross-faded over 5 frames, §3.6)
 * and per 256-px spatial tile (linearly blended overlaps, §3.7), exactly as
 * the official diffusers AutoencoderKLMiniMaxH3. Frames are streamed out one
 * window at a time: 17 frames become final after each window, and the last
 * window adds the 5 closing frames. All math and data movement runs on the
 * backend through the op interface; only finished frames come back.
 *
 * Both checkpoint layouts load: the diffusers `vae/` directory and the
 * native `FL2VA/video_vae/` one (original names, fused per-head qkv). Only
 * the decoder side (post_quant_conv + decoder.*) is read, unless the
 * options ask for the encoder too (encoder.* + quant_conv, FL2VA keyframes:
 * model/h3_video_vae_encoder.h). */
#ifndef H3_VIDEO_VAE_H
#define H3_VIDEO_VAE_H

#include <stdint.h>

#include "backend/h3_backend.h"
#include "base/h3_safetensors.h"
#include "base/h3_status.h"
#include "parallel/h3_tp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct h3_video_vae h3_video_vae;

/* dir: a diffusers `vae/` directory (config.json + safetensors or index) or
 * a native `video_vae/` directory (config.json naming source/ and its
 * config.json + model.safetensors). */
h3_status_code h3_video_vae_load(h3_backend *b, const char *dir, h3_video_vae **out, h3_status *status);
/* The same, with the weights from `weights` (NULL: dir's files; else e.g. a
 * dummy checkpoint, which the caller keeps and frees). */
h3_status_code h3_video_vae_load_from(h3_backend *b, const char *dir, const h3_checkpoint *weights,
                                      h3_video_vae **out, h3_status *status);
/* load-format dummy: a checkpoint of the decoder tensors of dir's config
 * (h3_video_vae_decoder_tensors), float32 as the release stores them, with
 * no bytes: values drawn on the backend, keyed by (seed, name), at h3-bench's
 * ranges, which keep the release's decoder finite. The caller closes it. */
h3_status_code h3_video_vae_dummy_checkpoint(const char *dir, uint64_t seed, h3_checkpoint **out, h3_status *status);
void h3_video_vae_free(h3_video_vae *vae);

/* What a load takes besides the decoder. Zeroed = decoder only, which is
 * what h3_video_vae_load / _load_from do. */
typedef struct h3_video_vae_options {
    int encoder; /* 1: also encoder.* and quant_conv (keyframe conditioning, ~0.72 GB fp32 at the release) */
} h3_video_vae_options;
/* h3_video_vae_load_from with options (opts NULL: decoder only). A missing
 * encoder tensor fails the load with H3_ERR_NOT_FOUND naming it. */
h3_status_code h3_video_vae_load_with(h3_backend *b, const char *dir, const h3_checkpoint *weights,
                                      const h3_video_vae_options *opts, h3_video_vae **out, h3_status *status);
/* h3_video_vae_dummy_checkpoint with options: with opts->encoder the
 * checkpoint also lists the encoder's tensors (h3_video_vae_encoder_tensors). */
h3_status_code h3_video_vae_dummy_checkpoint_with(const char *dir, uint64_t seed, const h3_video_vae_options *opts,
                                                  h3_checkpoint **out, h3_status *status);
/* 1 when the encoder was loaded. */
int h3_video_vae_has_encoder(const h3_video_vae *vae);

/* Finished frames [first, first+count), each H*W*3 bytes of packed RGB.
 * Return non-zero to cancel the decode. */
typedef int (*h3_video_emit_fn)(void *opaque, int first, int count, const uint8_t *rgb);
/* Called after each temporal window: done of total windows. */
typedef void (*h3_video_progress_fn)(void *opaque, int done, int total);

/* latents: normalized latents [C=24, T, H_lat, W_lat], host float32, as the
 * sampler produces them. T must be 5n+2 with n >= 1 (F = 17n+5 frames of
 * 16*H_lat x 16*W_lat pixels). De-normalizes with latents_mean/std, decodes
 * window by window and hands finished frames to emit (uint8, clamp and round
 * half to even after ImageNet de-normalization). emit returning non-zero, or
 * *cancel_flag becoming non-zero (polled between tiles, or rows of tiles
 * decoded together, and windows), stops
 * the decode with H3_ERR_CANCELLED. cancel_flag may be NULL. */
h3_status_code h3_video_vae_decode(h3_video_vae *vae, const float *latents, int T, int H_lat, int W_lat,
                                   h3_video_emit_fn emit, void *opaque, const volatile int *cancel_flag,
                                   h3_status *status);
/* The same decode, returning the decoder output before the uint8 conversion:
 * ImageNet-normalized RGB [3, F, H, W] float32 (what diffusers' vae.decode
 * returns; the goldens' vae_output). out holds 3*F*H*W floats. */
h3_status_code h3_video_vae_decode_f32(h3_video_vae *vae, const float *latents, int T, int H_lat, int W_lat,
                                       float *out, h3_status *status);

/* Tensor parallelism (h3_tp.h): the spatial tiles of each window are decoded
 * round-robin by the ranks of tp and gathered; rank 0 stitches them and is
 * the only rank that emits frames, writes `out` or reports progress. All
 * ranks call decode together with the same latents. Weights are whole on
 * every rank. Default: one rank. The encoder (h3_video_vae_encoder.h) splits
 * its tiles the same way; there every rank receives the whole result. */
void h3_video_vae_set_tp(h3_video_vae *vae, const h3_tp *tp);
/* Optional per-window progress callback (NULL to remove). */
void h3_video_vae_set_progress(h3_video_vae *vae, h3_video_progress_fn fn, void *opaque);
/* Spatial tiling in pixels (diffusers enable_tiling(tile, tile, overlap,
 * overlap)). Defaults: 256 / 64, or the native config's vae_tile_size /
 * vae_tile_overlap_min. tile and min_overlap must be multiples of the
 * spatial ratio (16), with 0 <= min_overlap < tile. */
h3_status_code h3_video_vae_set_tiling(h3_video_vae *vae, int tile, int min_overlap, h3_status *status);

/* The decoder's tensors (docs/spec/h3-vaes.md §3.11): the one list the
 * loader reads, that h3-bench and h3-make-tiny-model write random
 * checkpoints from. What a tensor is, so that a writer can draw each kind at
 * its own scale: */
typedef enum h3_video_vae_role {
    H3_VIDEO_VAE_WEIGHT,       /* a linear's [out, in], or post_quant_conv's [out, in, 1, 1, 1]: fan-in shape[1] */
    H3_VIDEO_VAE_BIAS,         /* its bias [out] */
    H3_VIDEO_VAE_NORM_WEIGHT,  /* an RMSNorm's or norm_out's weight [dim] */
    H3_VIDEO_VAE_NORM_BIAS,    /* norm_out's bias [dim] */
    H3_VIDEO_VAE_LAYER_SCALE,  /* a block's scale1 / scale2 [dim]: the gain of its residual branch */
    H3_VIDEO_VAE_REGISTERS,    /* decoder.register_tokens [1, n, dim] */
    H3_VIDEO_VAE_QKV_WEIGHT,   /* native layout: to_qkv [3·dim, dim], q/k/v interleaved per head */
    H3_VIDEO_VAE_QKV_BIAS,     /* native layout: its bias [3·dim] */
    /* the encoder's (h3_video_vae_encoder_tensors) */
    H3_VIDEO_VAE_CONV_WEIGHT,  /* a Conv3d's [out, in, kt, kh, kw]: fan-in in·kt·kh·kw */
    H3_VIDEO_VAE_CONV_BIAS     /* its bias [out] */
} h3_video_vae_role;

typedef struct h3_video_vae_tensor {
    const char *name; /* valid during the callback */
    int ndim;
    int64_t shape[5];
    h3_st_dtype dtype; /* as the release stores it: float32 (the loader converts any dtype) */
    h3_video_vae_role role;
} h3_video_vae_tensor;

typedef h3_status_code (*h3_video_vae_tensor_fn)(void *opaque, const h3_video_vae_tensor *t, h3_status *status);

/* Calls fn for every decoder tensor (post_quant_conv and decoder.*) of the
 * VAE whose config is in dir, either layout (h3_video_vae_load), module by
 * module as data flows through them: the order h3-make-tiny-model draws its
 * random values in. The native config states neither the register count nor
 * the FFN width: the ViT3DDecoder defaults (4, 4·dim) are listed there. Stops
 * at fn's first error and returns it. */
h3_status_code h3_video_vae_decoder_tensors(const char *dir, h3_video_vae_tensor_fn fn, void *opaque,
                                            h3_status *status);
/* The same for the encoder's tensors (encoder.*, quant_conv), in data-flow
 * order: conv_in, per level its resnets (norm1, conv1, norm2, conv2, the
 * shortcut) and downsampler, norm_out, conv_out, quant_conv. GroupNorm
 * affines have the NORM_WEIGHT / NORM_BIAS roles. */
h3_status_code h3_video_vae_encoder_tensors(const char *dir, h3_video_vae_tensor_fn fn, void *opaque,
                                            h3_status *status);

/* Geometry (release values in comments). */
int h3_video_vae_latent_channels(const h3_video_vae *vae); /* 24 */
int h3_video_vae_spatial_ratio(const h3_video_vae *vae);   /* 16 */
/* Frames decoded from T latents (17n+5 for T = 5n+2), or -1 if T is invalid. */
int h3_video_vae_num_frames(const h3_video_vae *vae, int T);
/* The spatial tile layout along one axis (D _split_tiles): fills starts[]
 * and overlaps[] (pixels; overlaps[i] is between tile i and i+1) and returns
 * the tile count, or -1 if it would exceed max or the arguments are invalid.
 * *tile_len receives the tile size (the length itself when one tile covers it). */
int h3_video_vae_split_tiles(int length, int tile, int min_overlap, int ratio, int *starts, int *overlaps, int max,
                             int *tile_len);
/* Temporal windows for T latents with the release geometry (7-latent windows
 * stepping by 5): n for T = 5n+2, 0 if T is not of that form. */
int h3_video_vae_num_windows(int T);

#ifdef __cplusplus
}
#endif
#endif
