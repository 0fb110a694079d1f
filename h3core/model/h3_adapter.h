/* h3_adapter.h - FastH3 adapters (`fastvideo-lora-v2` safetensors): strict
 * validation and one-time fusion onto the MiniMax-H3 base weights
 * (docs/spec/fasth3-vsa.md §1).
 *
 * An adapter reconstructs a 4-forward FastH3 student from the base model:
 *
 *   <module>.lora_A.weight [r, in] + <module>.lora_B.weight [out, r]
 *                                      W += B·A   (no alpha: scale exactly 1)
 *   <module>.diff                      W += diff  (full shape, own dtype)
 *   <module>.diff_b                    bias += diff_b
 *   <module>.set_weight                W  = set_weight, for a parameter the
 *                                      base lacks: the VSA gates
 *                                      transformer_blocks.i.attn.to_gate_compress
 *
 * Keys use the diffusers names. Each fused tensor is summed in float32 from
 * the base value and its deltas (low-rank first, then the exact diff) and
 * rounded once to the base tensor's dtype. On a native (FL2VA/) base the
 * deltas are placed: to_q/to_k/to_v into the per-head interleaved qkv_proj
 * (rows h·3dh + [0,dh) q, +[dh,2dh) k, +[2dh,3dh) v) and ff.net.0.proj
 * ([value; gate]) into fc1 ([gate; value]) with its halves swapped.
 *
 *   h3_adapter *a;
 *   h3_adapter_open(path, &a, &st);             // metadata, counts, key grammar
 *   h3_adapter_check_base_model(a, "MiniMaxAI/MiniMax-H3", dir, &st);
 *   h3_dit_load_with_adapter(b, dir, a, &dit, &st);  // binds, fuses, loads gates
 *   h3_adapter_free(a);                         // the DiT keeps nothing of it
 */
#ifndef H3_ADAPTER_H
#define H3_ADAPTER_H

#include <stdint.h>

#include "model/h3_dit_plan.h"
#include "base/h3_safetensors.h"
#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define H3_ADAPTER_FORMAT "fastvideo-lora-v2"
#define H3_ADAPTER_FILE "adapter_model.safetensors"
#define H3_ADAPTER_CONTRACT_FILE "fastvideo_inference.json"
#define H3_ADAPTER_MAX_DMD_STEPS 16

typedef struct h3_adapter h3_adapter;

/* The release's inference contract, from fastvideo_inference.json beside
 * the safetensors file when there is one (fields stay 0 / -1 otherwise). */
typedef struct h3_adapter_contract {
    int present;                                 /* the json file was found */
    int num_dmd_steps;                           /* 0: not given */
    int dmd_steps[H3_ADAPTER_MAX_DMD_STEPS];     /* e.g. 999, 749, 500, 250 */
    double video_shift, audio_shift;             /* flow_shift, audio_flow_shift; 0: not given */
    double vsa_sparsity;                         /* -1: not given */
    int vsa_tile_size;                           /* 0: not given; otherwise 64 */
    char attention_backend[64];                  /* "" when not given */
} h3_adapter_contract;

/* path: an adapter_model.safetensors (any name) or a variant directory that
 * holds one. Checks __metadata__ (format, base_model, finetuned_model naming
 * a FastH3 student, rank), the suffix of every key, the dtypes, the shapes
 * of each low-rank pair against the rank, that every pair is complete, the
 * declared tensor counts, and the contract json. Reads no tensor data.
 * A manifest root with several variants is an error that lists them. */
h3_status_code h3_adapter_open(const char *path, h3_adapter **out, h3_status *status);
void h3_adapter_free(h3_adapter *a);

const char *h3_adapter_path(const h3_adapter *a); /* the safetensors file */
const char *h3_adapter_base_model(const h3_adapter *a);
const char *h3_adapter_finetuned_model(const h3_adapter *a);
int h3_adapter_rank(const h3_adapter *a);
/* Non-zero for a VSA adapter: it sets to_gate_compress weights, which only
 * make sense under VSA-H3 attention. */
int h3_adapter_has_vsa_gates(const h3_adapter *a);
const h3_adapter_contract *h3_adapter_get_contract(const h3_adapter *a);

/* The adapter's base_model must name the model being loaded (model_id, as
 * the model directory records it; compared case-insensitively). model_dir
 * is for the message. */
h3_status_code h3_adapter_check_base_model(const h3_adapter *a, const char *model_id, const char *model_dir,
                                           h3_status *status);

/* Maps every key onto a tensor the DiT loader reads from `base` (in its
 * layout) and checks presence and shapes, or, for .set_weight, that it
 * creates a VSA gate the base lacks with shape [heads·head_dim, hidden].
 * Reads headers only: run it before loading anything costly. Binding again
 * to the same checkpoint is a no-op, and binding is serialized, so the
 * loaders of several tensor-parallel ranks may share one adapter; fuse and
 * gate only read the binding and may run concurrently. */
h3_status_code h3_adapter_bind(h3_adapter *a, const h3_checkpoint *base, h3_dit_checkpoint_layout layout,
                               const h3_dit_config *cfg, h3_status *status);

/* The fused value of base tensor `base` of the bound checkpoint. When the
 * adapter leaves it unchanged, *data is NULL and *fused untouched.
 * Otherwise *fused is a copy of *base whose values live in *data (same
 * dtype and shape; the caller frees *data). */
h3_status_code h3_adapter_fuse(const h3_adapter *a, const h3_st_tensor *base, h3_st_tensor *fused, void **data,
                               h3_status *status);

/* The to_gate_compress weight of main block `block` ([heads·head_dim,
 * hidden], in the dtype of that block's attention weights in the base), or
 * *data NULL when the adapter has none. Same ownership as h3_adapter_fuse. */
h3_status_code h3_adapter_gate(const h3_adapter *a, int block, h3_st_tensor *gate, void **data, h3_status *status);
/* The same tensor's description alone (data NULL), reading no bytes: for a
 * measuring backend (h3_backend_holds_data). *present: whether the adapter
 * has that gate. */
h3_status_code h3_adapter_gate_header(const h3_adapter *a, int block, h3_st_tensor *gate, int *present,
                                      h3_status *status);

#ifdef __cplusplus
}
#endif
#endif
