/* h3_vision.h - the Qwen3-VL vision tower of the text conditioner: keyframe
 * patches -> image token embeddings for the language model, plus the
 * DeepStack features added after its first layers (docs/spec/h3-conditioner.md
 * §5.3; transformers Qwen3VLVisionModel).
 *
 *   x = patch_embed(pixel_values) + interpolated pos_embed       [N, C]
 *   per block: x += proj(attn(norm1(x)))  (2-D rotary, bidirectional per image)
 *              x += fc2(gelu_tanh(fc1(norm2(x))))
 *   after block deepstack_visual_indexes[k]: deepstack[k] = merger_k(x)
 *   embeds = merger(x)                                           [N/4, out]
 *
 * Written on the op interface like the text decoder, so it runs on every
 * backend. Under tensor parallelism each rank holds the whole tower and
 * computes the same features (it is ~2% of the conditioner). */
#ifndef H3_VISION_H
#define H3_VISION_H

#include <stdint.h>

#include "backend/h3_backend.h"
#include "base/h3_config.h"
#include "base/h3_safetensors.h"
#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define H3_VISION_MAX_DEEPSTACK 8

/* config.json's vision_config. */
typedef struct h3_vision_config {
    int64_t depth, hidden_size, intermediate_size, num_heads, in_channels;
    int64_t patch_size, temporal_patch_size, spatial_merge_size, out_hidden_size, num_position_embeddings;
    int deepstack[H3_VISION_MAX_DEEPSTACK]; /* block indexes, in merger order */
    int n_deepstack;
    double rope_theta; /* rope_parameters.rope_theta, default 10000 */
} h3_vision_config;

/* Reads c's vision_config (the text encoder's config.json). A config without
 * one is H3_ERR_NOT_FOUND: that checkpoint has no vision tower. */
h3_status_code h3_vision_config_read(const h3_config *c, h3_vision_config *cfg, h3_status *status);

/* One checkpoint tensor of the tower, with the shape the loader demands. */
typedef struct h3_vision_tensor_info {
    char name[96];
    int ndim;
    int64_t shape[5];
} h3_vision_tensor_info;

/* Every tensor the tower loads, in load order (patch embedding, position
 * table, 12 per block, the merger, 6 per DeepStack merger), named as the
 * release names them (model.visual.*). *out is malloc'd. */
h3_status_code h3_vision_tensor_list(const h3_vision_config *cfg, h3_vision_tensor_info **out, int *n,
                                     h3_status *status);
/* Adds those tensors to a load-format dummy checkpoint, BF16, at ranges that
 * keep the features finite. */
h3_status_code h3_vision_dummy_add(const h3_vision_config *cfg, h3_checkpoint *ck, h3_status *status);

typedef struct h3_vision h3_vision;

h3_status_code h3_vision_load(h3_backend *b, const h3_vision_config *cfg, const h3_checkpoint *ck, h3_vision **out,
                              h3_status *status);
void h3_vision_free(h3_vision *v);
const h3_vision_config *h3_vision_get_config(const h3_vision *v);

/* Image tokens (merged patches) of one image grid {t, h, w}, or -1 when the
 * grid does not fit the tower (sides not multiples of the merge size, or
 * out of range). */
int64_t h3_vision_tokens(const h3_vision *v, const int64_t grid_thw[3]);

/* n_images images, whose pixel_values rows are stacked in order
 * (h3_image_process's layout, rows = Σ t·h·w, cols = in_channels·tp·ps²).
 * embeds [Σ tokens, out_hidden_size] and deepstack[k] (n_deepstack of them,
 * same shape) are caller-allocated in the compute dtype. Still images only
 * (grid t = 1; videos attend per frame and are not supported). */
h3_status_code h3_vision_forward(h3_vision *v, const float *pixel_values, const int64_t (*grid_thw)[3], int n_images,
                                 h3_tensor *embeds, h3_tensor *deepstack, h3_status *status);

#ifdef __cplusplus
}
#endif
#endif
