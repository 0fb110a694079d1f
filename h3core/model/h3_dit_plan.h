/* h3_dit_plan.h - what the MiniMax-H3 transformer is made of, before any
 * weight is read: its configuration (either checkpoint layout's
 * config.json), which layout a checkpoint holds, and the plan of every
 * tensor the loader reads (docs/spec/h3-transformer.md §1, §2).
 *
 * The FastH3 adapter binds to this plan (h3_adapter.h); the loader walks it
 * (h3_dit_load.c); the forward is h3_dit.h's. */
#ifndef H3_DIT_PLAN_H
#define H3_DIT_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/h3_safetensors.h"
#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Each block's AdaLN projection holds six parameters (shift, scale, gate
 * for attention and for the MLP) for three modality tags (0 video, 1 text,
 * 2 audio): 18·D outputs. */
#define H3_DIT_ADALN_PARAMS 6
#define H3_DIT_MODALITIES 3
#define H3_DIT_ADALN_WIDTH(D) ((int64_t)H3_DIT_ADALN_PARAMS * H3_DIT_MODALITIES * (D))

typedef struct h3_dit_config {
    int num_layers, num_refiner_layers;
    int hidden_size;               /* D, the residual stream */
    int num_heads, head_dim;       /* inner width num_heads·head_dim != D */
    int ffn_dim;                   /* SwiGLU inner width */
    int in_channels, audio_in_channels;
    int patch_t, patch_h, patch_w;
    int text_dim;
    int freq_dim;                  /* sinusoidal timestep features */
    int time_embed_hidden_dim, time_embed_dim;
    int rope_freq_dim;             /* frequencies per axis: 6·rope_freq_dim channels rotate */
    float rope_theta, norm_eps, qk_norm_eps, final_norm_eps;
} h3_dit_config;

typedef enum h3_dit_checkpoint_layout {
    H3_DIT_DIFFUSERS = 0, /* transformer/diffusion_pytorch_model*.safetensors */
    H3_DIT_NATIVE = 1     /* FL2VA/transformer/model-*.safetensors */
} h3_dit_checkpoint_layout;

/* Reads dir/config.json in either layout's naming. */
h3_status_code h3_dit_config_load(const char *dir, h3_dit_config *cfg, h3_status *status);
/* The checks h3_dit_config_load applies, for a configuration built in code
 * (random models); `what` names it in the message. */
h3_status_code h3_dit_config_check(const char *what, const h3_dit_config *cfg, h3_status *status);

/* The layout whose naming dir/config.json uses (diffusers or native keys):
 * the tensor names of a checkpoint made from the config alone (a dummy one). */
h3_status_code h3_dit_config_layout(const char *dir, h3_dit_checkpoint_layout *layout, h3_status *status);

/* The name of main block `block`'s VSA gate (to_gate_compress, what a FastH3
 * VSA adapter's .set_weight creates) in a checkpoint of this layout. */
void h3_dit_gate_name(h3_dit_checkpoint_layout layout, int block, char *name, size_t size);

/* Which layout a checkpoint holds, by its tensor names
 * (docs/spec/h3-transformer.md §2.4). Neither or
 * both is an H3_ERR_FORMAT naming the path. */
h3_status_code h3_dit_detect_layout(const h3_checkpoint *ckpt, h3_dit_checkpoint_layout *layout,
                                    h3_status *status);

/* Every checkpoint tensor the loader reads for cfg in a layout, in load
 * order, with its expected shape; the loader itself walks this same plan.
 * Used to check the name mapping against the release's index files. */
typedef void (*h3_dit_tensor_fn)(const char *name, int ndim, const int64_t *shape, void *user);
void h3_dit_checkpoint_plan(const h3_dit_config *cfg, h3_dit_checkpoint_layout layout, h3_dit_tensor_fn fn,
                            void *user);
/* Checkpoint tensors the loader knowingly does not read (native
 * rope.inv_freq: recomputed, bitwise equal). */
int h3_dit_checkpoint_ignores(h3_dit_checkpoint_layout layout, const char *name);

/* RoPE inverse frequencies [rope_freq_dim], float32 as torch computes them:
 * 1 / theta^(arange(0, 2F, 2) / 2F). */
void h3_dit_rope_inv_freq(const h3_dit_config *cfg, float *inv_freq);

#ifdef __cplusplus
}
#endif
#endif
