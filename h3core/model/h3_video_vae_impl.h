/* h3_video_vae_impl.h - what the video VAE's loader (h3_video_vae.c) hands
 * the encoder's forward (h3_video_vae_encoder.c): the encoder's weights
 * and the VAE's geometry. Private to model/.
 *
 * The encoder (docs/spec/h3-vaes.md §3.4) is loaded only when asked
 * (h3_video_vae_options.encoder), so a text-to-video engine holds no byte of
 * it. Its convolution weights are [Cout, Cin·kt·kh·kw] (PyTorch's Conv3d
 * layout flattened, so a convolution is an im2col and h3_op_linear) in the
 * backend's compute dtype; biases and GroupNorm affines are float32. */
#ifndef H3_VIDEO_VAE_IMPL_H
#define H3_VIDEO_VAE_IMPL_H

#include "model/h3_video_vae.h"

#define H3_VAE_ENC_MAX_LEVELS 8
#define H3_VAE_ENC_MAX_LAYERS 4

typedef struct h3_vae_conv {
    h3_tensor w; /* [Cout, Cin·k³] */
    h3_tensor b; /* [Cout] float32 */
} h3_vae_conv;

typedef struct h3_vae_enc_resnet {
    int cin, cout;
    h3_tensor norm1_w, norm1_b, norm2_w, norm2_b; /* GroupNorm affines [cin] / [cout] */
    h3_vae_conv conv1, conv2;                     /* 3×3×3, causal in time, reflect in space */
    h3_vae_conv shortcut;                         /* 1×1×1 when cin != cout (w.data NULL otherwise) */
} h3_vae_enc_resnet;

typedef struct h3_vae_enc_level {
    int cout;
    int t_stride, s_stride; /* the downsampler's strides; 1 and 1: none */
    h3_vae_enc_resnet res[H3_VAE_ENC_MAX_LAYERS];
    h3_vae_conv down; /* 3×3×3 with stride (t_stride, s_stride, s_stride) */
} h3_vae_enc_level;

typedef struct h3_vae_encoder {
    int in_channels, n_levels, layers, groups;
    float eps;
    h3_vae_conv conv_in;
    h3_vae_enc_level level[H3_VAE_ENC_MAX_LEVELS];
    h3_tensor norm_out_w, norm_out_b;
    h3_vae_conv conv_out; /* -> 2·latent channels: mean, logvar */
    h3_vae_conv quant;    /* quant_conv 1×1×1 */
} h3_vae_encoder;

/* The VAE as the encoder's forward sees it. */
typedef struct h3_video_vae_info {
    h3_backend *b;
    const h3_vae_encoder *enc; /* NULL: loaded without the encoder */
    int z_channels, ratio, ratio_t;
    int clip_length, token_drop;
    int tile, min_overlap; /* pixels */
    const float *latents_mean, *latents_std;
    h3_tp tp; /* h3_video_vae_set_tp's: tiles round-robin over the ranks */
} h3_video_vae_info;

void h3_video_vae_get_info(const h3_video_vae *vae, h3_video_vae_info *out);

#endif
