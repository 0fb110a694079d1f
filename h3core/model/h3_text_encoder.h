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
#include "model/h3_image.h"
#include "model/h3_tokenizer.h"
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
/* memory=stream (h3_weight_stream.h): the same, with every tapped layer
 * moved to host memory as it is loaded (the embedding and the vision tower
 * stay resident) and streamed through a ring of two device slots at each
 * forward: the device never holds more than two layers, and the outputs are
 * the resident encoder's, bit for bit. h3_text_encoder_drop_weights also
 * gives back the slots; reload_weights makes them again. */
h3_status_code h3_text_encoder_load_stream(h3_backend *b, const char *dir, const h3_checkpoint *weights, int tap_layer,
                                           const h3_tp *tp, h3_text_encoder **out, h3_status *status);
int h3_text_encoder_is_streamed(const h3_text_encoder *te);
/* load-format dummy: a checkpoint of the tensors a load at tap_layer reads
 * (h3_text_encoder_tensor_list), BF16 as the release stores them, with no
 * bytes: the values are drawn on the backend, keyed by (seed, name), at
 * ranges that keep the residual stream finite through the tapped layers.
 * The caller closes it. */
h3_status_code h3_text_encoder_dummy_checkpoint(const char *dir, int tap_layer, uint64_t seed, h3_checkpoint **out,
                                                h3_status *status);
void h3_text_encoder_free(h3_text_encoder *te);
/* The language model's weights (embedding and tapped layers) freed, and
 * loaded again from the same files or dummy checkpoint; the config, the
 * tables and the vision tower stay, so h3_text_presentation_build works in
 * between and forward/encode do not. The engine frees them between requests
 * that do not fit with them resident. Reloading is all or nothing. */
void h3_text_encoder_drop_weights(h3_text_encoder *te);
h3_status_code h3_text_encoder_reload_weights(h3_text_encoder *te, const char *dir, const h3_checkpoint *weights,
                                              h3_status *status);
int h3_text_encoder_has_weights(const h3_text_encoder *te);
int h3_text_encoder_hidden_size(const h3_text_encoder *te);
int h3_text_encoder_tap_layer(const h3_text_encoder *te);
const h3_text_encoder_config *h3_text_encoder_get_config(const h3_text_encoder *te);

/* ids[n] -> out [n, hidden] (caller-allocated backend tensor, compute
 * dtype). Attention mask all ones, positions 0..n-1 on all three M-RoPE axes
 * (text only). */
h3_status_code h3_text_encoder_forward(h3_text_encoder *te, const int32_t *ids, int n, h3_tensor *out,
                                       h3_status *status);

/* ---- FL2VA: keyframes in the presentation (docs/spec/h3-conditioner.md §2.1, §5) ----
 *
 * The conditioner's input for one request, built on the host:
 *   for each keyframe i (packed order: first, then last; a lone last one is
 *   picture 1): tok("<Picture i>: ") <|vision_start|> <|image_pad|>·N_i <|vision_end|>
 *   then tok(prompt), each segment tokenized on its own.
 * With no keyframe it is tok(prompt) alone (T2VA). The engine allocates the
 * [n, hidden] output from p.n and runs h3_text_encoder_encode. */
/* images of one presentation: FL2VA's 2 keyframes, Ref2VA's 9 image references */
#define H3_TEXT_MAX_KEYFRAMES 9

/* H3's per-row modality tags of the conditioner output (the DiT layout's
 * text_token_tags): a vision block's rows are tagged as video. */
enum { H3_TEXT_TAG_VISION = 0, H3_TEXT_TAG_TEXT = 1 };

typedef struct h3_text_presentation {
    int n;              /* L, rows of the hidden state */
    int32_t *ids;       /* [L] input_ids */
    int32_t *tags;      /* [L] H3 tags: 1 text, 0 <|vision_start|> / <|image_pad|> / <|vision_end|> */
    int32_t *mm_types;  /* [L] Qwen mm_token_type_ids: 1 <|image_pad|>, 2 <|video_pad|>, else 0 */
    int32_t *positions; /* [3·L] M-RoPE positions, axis-major (T row, H row, W row) */
    int n_images;
    int64_t grid_thw[H3_TEXT_MAX_KEYFRAMES][3];
    float *pixel_values; /* [Σ t·h·w, 3·tp·ps²] the processor's patches, images stacked */
    int64_t pixel_rows, pixel_cols;
} h3_text_presentation;

/* Ref2VA: the references' presentation, in request order: per image
 * "<Picture i>: " + its vision block (images[] in order, on their
 * normalised size), per audio clip "<Audio j>: ", then the prompt; the
 * rules of h3_text_presentation_build otherwise. */
typedef enum h3_text_reference_kind { H3_TEXT_REFERENCE_IMAGE = 0, H3_TEXT_REFERENCE_AUDIO = 2 } h3_text_reference_kind;
h3_status_code h3_text_presentation_build_references(const h3_text_encoder *te, const h3_tokenizer *tok,
                                                     const h3_image_processor_config *proc, const char *prompt,
                                                     const h3_text_reference_kind *kinds, int n,
                                                     const h3_rgb_image *images, h3_text_presentation *out,
                                                     h3_status *status);

/* 1 when the loaded checkpoint has a vision tower (config vision_config and
 * the model.visual.* tensors), so it can take keyframes. */
int h3_text_encoder_has_vision(const h3_text_encoder *te);

/* Builds the presentation of prompt with n_keyframes (0..2) keyframes that
 * are already on the canvas (h3_image_fit_keyframe), run through the image
 * processor `proc` (processor/preprocessor_config.json; unused and may be
 * NULL without keyframes). A prompt whose tokens include a vision special
 * token (<|vision_start|>, <|vision_end|>, <|vision_pad|>, <|image_pad|>,
 * <|video_pad|>) is an H3_ERR_INVALID_ARGUMENT naming it; keyframes with a
 * checkpoint without a vision tower are H3_ERR_UNSUPPORTED; a presentation of
 * no tokens is H3_ERR_INVALID_ARGUMENT. On error *out is left cleared. */
h3_status_code h3_text_presentation_build(const h3_text_encoder *te, const h3_tokenizer *tok,
                                          const h3_image_processor_config *proc, const char *prompt,
                                          const h3_rgb_image *keyframes, int n_keyframes, h3_text_presentation *out,
                                          h3_status *status);
void h3_text_presentation_clear(h3_text_presentation *p);

/* The hidden state of a presentation: out [p->n, hidden] (caller-allocated,
 * compute dtype). The vision tower's merger outputs replace the
 * <|image_pad|> rows' embeddings, in order; its DeepStack features are added
 * to those rows after decoder layers 0..n_deepstack-1; the M-RoPE positions
 * are p->positions. Under tensor parallelism all ranks call it together with
 * the same presentation (each runs the whole vision tower). */
h3_status_code h3_text_encoder_encode(h3_text_encoder *te, const h3_text_presentation *p, h3_tensor *out,
                                      h3_status *status);

#ifdef __cplusplus
}
#endif
#endif
