/* h3_lora.h - LoRAs as users bring them (issue 33): parsing any of the
 * common layouts onto the transformer's weights, and fusing a list of
 * (LoRA, strength) into a loaded DiT, changeable between clips.
 *
 * Layouts (detected from the keys; one per file):
 *   PEFT / diffusers  transformer.<module>.lora_A.weight / .lora_B.weight,
 *                     LoraConfig (r, lora_alpha, rank_pattern,
 *                     alpha_pattern) in the header's lora_adapter_metadata;
 *                     transformer_ref.<module> targets the Ref2VA partition
 *   original names    diffusion_model.<module> (ai-toolkit, ComfyUI) or bare
 *                     blocks.<i>... with lora_A/lora_B or lora_down/lora_up
 *                     and an optional <module>.alpha
 *   kohya / musubi    lora_unet_<module with '.' -> '_'>.lora_down.weight /
 *                     .lora_up.weight / .alpha
 *   DiffSynth         bare diffusers module names, lora_A/lora_B (optionally
 *                     lora_A.default.weight), no prefix
 * <module> may use the diffusers names (transformer_blocks.<i>.attn.to_q,
 * ff.net.0.proj, ...) or the original checkpoint's (blocks.<i>.attn.qkv_proj,
 * mlp.fc1, ...). A fused qkv_proj pair maps to to_q/to_k/to_v with A shared
 * and B split in thirds after its rows are reordered from the original
 * per-head interleaved order (h·3dh + [0, dh) q of head h, then k, v) to
 * [q; k; v], as the base weight is; mlp.fc1's B ([gate; value]) has its
 * halves swapped into the model's [value; gate].
 *
 * Scale: each module adds strength x alpha/rank x B·A, alpha from the
 * module's .alpha tensor, else the header (alpha_pattern, lora_alpha,
 * ss_network_alpha), else alpha = rank. Only the transformer takes LoRAs.
 *
 *   h3_lora *l;
 *   h3_lora_open(path, h3_dit_get_config(dit), &l, &st);  // header, keys, shapes, values
 *   h3_lora_use use[] = {{l, 0.6f}};
 *   h3_dit_set_loras(dit, use, 1, &st);   // fused; again with other strengths
 *   h3_dit_set_loras(dit, NULL, 0, &st);  // back to the base weights
 *   h3_lora_unref(l);                     // the DiT holds its own reference
 */
#ifndef H3_LORA_H
#define H3_LORA_H

#include <stdint.h>

#include "base/h3_status.h"
#include "model/h3_dit.h"
#include "model/h3_dit_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum h3_lora_layout {
    H3_LORA_PEFT = 0,   /* transformer.* / transformer_ref.* */
    H3_LORA_ORIGINAL,   /* diffusion_model.* or bare blocks.* with lora_down/up or .alpha */
    H3_LORA_KOHYA,      /* lora_unet_* */
    H3_LORA_DIFFSYNTH,  /* bare diffusers names, lora_A/lora_B */
    H3_LORA_LAYOUTS
} h3_lora_layout;

/* Which transformer a module belongs to. */
typedef enum h3_lora_partition { H3_LORA_MAIN = 0, H3_LORA_REF = 1 } h3_lora_partition;

/* Strengths outside [-H3_LORA_MAX_STRENGTH, H3_LORA_MAX_STRENGTH] are refused. */
#define H3_LORA_MAX_STRENGTH 16.0

typedef struct h3_lora h3_lora;

/* Opens, detects the layout, maps every key onto cfg's transformer and
 * checks it: shapes against the model, 0 < rank <= min(in, out), a complete
 * pair per module, finite factors and alphas, no two keys on the same rows,
 * no text-encoder key, no key that maps to nothing (the message names the
 * file and the first bad key). DoRA keys (dora_scale,
 * lora_magnitude_vector) are dropped with a warning. Reads the factors (to
 * check their values); the file stays mapped until the last unref. */
h3_status_code h3_lora_open(const char *path, const h3_dit_config *cfg, h3_lora **out, h3_status *status);
h3_lora *h3_lora_ref(h3_lora *l);
void h3_lora_unref(h3_lora *l);

const char *h3_lora_path(const h3_lora *l);
h3_lora_layout h3_lora_get_layout(const h3_lora *l);
const char *h3_lora_layout_name(h3_lora_layout layout);
/* Modules (low-rank pairs) aimed at a partition. */
int h3_lora_module_count(const h3_lora *l, h3_lora_partition p);
/* DoRA keys dropped at open, and the first of them (NULL: none). */
int h3_lora_dropped_count(const h3_lora *l, const char **first);

/* The delta a LoRA makes at strength 1 on one weight of the main
 * partition, named by its diffusers module ("transformer_blocks.0.attn.to_q",
 * "ff.net.0.proj": rows in the model's order, [value; gate]): *delta is a
 * new [rows, cols] float32 array (zeros where the LoRA does not touch it;
 * the caller frees it). For tests and tools. */
h3_status_code h3_lora_delta_f32(const h3_lora *l, const char *module, float **delta, int64_t *rows, int64_t *cols,
                                 h3_status *status);

typedef struct h3_lora_use {
    h3_lora *lora;
    float strength;
} h3_lora_use;

/* Makes the DiT's weights base + sum of strength x alpha/rank x B·A over
 * `uses` (n 0: the base; with a FastH3 adapter, its fused weights are the
 * base). Fused in place: each targeted weight is read back in float32, the
 * change from the set in force added (new minus old strength), and rounded
 * once to its dtype, so changing strengths costs one pass over the targeted
 * weights and no reload (the accuracy: docs/ARCHITECTURE.md, h3_lora).
 * Everything is checked before any weight is touched (the LoRAs' model, the
 * strengths, one file used twice, the backend); a failure while writing
 * puts back the weights already changed: the previous set stays in force.
 * The DiT keeps references to the LoRAs in force. Outside a request only.
 * A tensor-parallel rank changes its own shard: call it on every rank with
 * the same list (no collective inside). memory=stream: the blocks' host
 * copies are fused where they are. UNSUPPORTED for weights the backend holds
 * as FP8 (not yet: see the note in h3_lora.c). */
h3_status_code h3_dit_set_loras(h3_dit *dit, const h3_lora_use *uses, int n, h3_status *status);
/* The set in force (the DiT's own array; valid until the next set). */
int h3_dit_get_loras(const h3_dit *dit, const h3_lora_use **uses);

/* The DiT's weight that module names (as h3_lora_delta_f32), read back in
 * float32 into a new array: for tests of the fusion. */
h3_status_code h3_dit_lora_weight_f32(h3_dit *dit, const char *module, float **out, int64_t *rows, int64_t *cols,
                                      h3_status *status);

#ifdef __cplusplus
}
#endif
#endif
