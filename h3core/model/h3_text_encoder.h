/* h3_text_encoder.h - the text conditioner: the Qwen3-VL text decoder read
 * at one hidden-state index (H3 taps hidden_states[50] of 64 layers).
 *
 * The model is written once against the op interface (h3_backend.h), so the
 * same code runs on the CPU reference backend and on CUDA. Only the layers
 * below the tap are loaded and run: causal attention makes early exit exact,
 * and the final norm and lm_head are never touched. */
#ifndef H3_TEXT_ENCODER_H
#define H3_TEXT_ENCODER_H

#include <stdint.h>

#include "backend/h3_backend.h"
#include "base/h3_safetensors.h"
#include "base/h3_status.h"
#include "parallel/h3_tp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most decoder layers a config may have (text_config.num_hidden_layers),
 * so also the highest tap layer (hidden_states index) anyone may ask for. */
#define H3_TEXT_ENCODER_MAX_LAYERS 1024

/* The text_config fields the decoder needs (HF qwen3_vl schema). */
typedef struct h3_text_encoder_config {
    int64_t vocab_size, hidden_size, intermediate_size, num_layers;
    int64_t num_heads, num_kv_heads, head_dim, max_positions;
    double rms_norm_eps, rope_theta;
    int mrope_section[3]; /* frequency slots per axis (T, H, W), interleaved */
} h3_text_encoder_config;

/* Reads dir/config.json. rope_theta and mrope_section are taken from
 * text_config.rope_parameters (transformers 5) or text_config.rope_scaling
 * plus text_config.rope_theta (transformers 4), whichever the file has. */
h3_status_code h3_text_encoder_config_load(const char *dir, h3_text_encoder_config *cfg, h3_status *status);

/* One checkpoint tensor the loader reads, with the shape it demands. */
typedef struct h3_text_encoder_tensor_info {
    char name[96];
    int ndim;
    int64_t shape[2];
} h3_text_encoder_tensor_info;

/* The exact list of tensors a load at tap_layer reads, in load order (the
 * embedding table, then 11 tensors per layer 0..tap_layer-1). The loader
 * walks this same list, so checking it against a checkpoint index checks
 * the loader. *out is malloc'd; the caller frees it. */
h3_status_code h3_text_encoder_tensor_list(const h3_text_encoder_config *cfg, int tap_layer,
                                           h3_text_encoder_tensor_info **out, int *n, h3_status *status);

typedef struct h3_text_encoder h3_text_encoder;

/* dir: the component directory (config.json + model.safetensors, or shards
 * + index). tap_layer: hidden_states index to return (0 = embeddings, k =
 * output of decoder layer k-1, before the final norm); only layers
 * 0..tap_layer-1 are loaded and run. Error if tap_layer > num_hidden_layers. */
h3_status_code h3_text_encoder_load(h3_backend *b, const char *dir, int tap_layer, h3_text_encoder **out,
                                    h3_status *status);
/* The same, as one rank of a tensor-parallel group: this rank loads and runs
 * its share of the query and key-value heads and of the FFN (h3_tp.h), and
 * every rank returns the whole output. All ranks call forward together. */
h3_status_code h3_text_encoder_load_tp(h3_backend *b, const char *dir, int tap_layer, const h3_tp *tp,
                                       h3_text_encoder **out, h3_status *status);
/* The general load: dir's config.json, the weights from `weights` (NULL:
 * dir's safetensors; else e.g. a dummy checkpoint, which the caller keeps
 * and frees), one rank of tp (NULL: one rank). */
h3_status_code h3_text_encoder_load_from(h3_backend *b, const char *dir, const h3_checkpoint *weights, int tap_layer,
                                         const h3_tp *tp, h3_text_encoder **out, h3_status *status);
/* load-format dummy: a checkpoint of the tensors a load at tap_layer reads
 * (h3_text_encoder_tensor_list), BF16 as the release stores them, with no
 * bytes: the values are drawn on the backend, keyed by (seed, name), at
 * ranges that keep the residual stream finite through the tapped layers.
 * The caller closes it. */
h3_status_code h3_text_encoder_dummy_checkpoint(const char *dir, int tap_layer, uint64_t seed, h3_checkpoint **out,
                                                h3_status *status);
void h3_text_encoder_free(h3_text_encoder *te);
int h3_text_encoder_hidden_size(const h3_text_encoder *te);
int h3_text_encoder_tap_layer(const h3_text_encoder *te);
const h3_text_encoder_config *h3_text_encoder_get_config(const h3_text_encoder *te);

/* ids[n] -> out [n, hidden] (caller-allocated backend tensor, compute
 * dtype). Attention mask all ones, positions 0..n-1 on all three M-RoPE axes
 * (text only). */
h3_status_code h3_text_encoder_forward(h3_text_encoder *te, const int32_t *ids, int n, h3_tensor *out,
                                       h3_status *status);

#ifdef __cplusplus
}
#endif
#endif
