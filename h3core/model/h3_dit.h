/* h3_dit.h - the MiniMax-H3 Omni-Transformer (DiT), written once against the
 * op interface of h3_backend.h (docs/spec/h3-transformer.md §2, §3).
 *
 * Loads either checkpoint layout of the release: the diffusers one
 * (`transformer/`, to_q/to_k/to_v, fc1 = [value; gate]) or the native one
 * (`FL2VA/transformer/`, per-head interleaved qkv_proj, fc1 = [gate; value]),
 * detected by tensor names. Both end in the same in-memory weights, so they
 * give bit-identical outputs.
 *
 * A request runs as
 *
 *   h3_dit_begin(dit, layout, text_states, &st);   // refiner + RoPE tables, once
 *   for each step:
 *       h3_dit_forward(dit, video_rows, audio_rows, timesteps, n_t, row_index,
 *                      video_velocity, audio_velocity, &st);
 *   h3_dit_end(dit);
 *
 * The layout (h3_dit_layout.h) fixes the row order [text | cond | audio |
 * video]; velocities are returned in the order of video_indices /
 * audio_indices, conditioning rows included (the caller ignores them). */
#ifndef H3_DIT_H
#define H3_DIT_H

#include <stdint.h>

#include "backend/h3_backend.h"
#include "backend/h3_weight_stream.h"
#include "model/h3_dit_layout.h"
#include "model/h3_dit_plan.h"
#include "base/h3_status.h"
#include "parallel/h3_tp.h"
#include "model/h3_vsa.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct h3_dit h3_dit;
typedef struct h3_adapter h3_adapter; /* FastH3 (h3_adapter.h) */

/* dir: a diffusers `transformer/` or a native `FL2VA/transformer/` folder. */
h3_status_code h3_dit_load(h3_backend *b, const char *dir, h3_dit **out, h3_status *status);
/* The same, as one rank of a tensor-parallel group (h3_tp.h): the rank
 * loads and runs its share of the heads and of the FFN of every block and
 * 1/N of each AdaLN projection; forwards of all ranks run together and every
 * rank returns the whole velocities. A degree the model does not split over
 * is an H3_ERR_INVALID_ARGUMENT. */
h3_status_code h3_dit_load_tp(h3_backend *b, const char *dir, const h3_tp *tp, h3_dit **out, h3_status *status);
void h3_dit_free(h3_dit *dit);
/* The general load: dir's config.json, the weights from `weights` (NULL:
 * dir's safetensors files; else e.g. a dummy checkpoint, which the caller
 * keeps and frees), one rank of tp (NULL: one rank), adapter fused in (NULL:
 * none; see h3_dit_load_with_adapter below). VSA gates the checkpoint holds
 * itself (h3_dit_gate_name) are loaded as an adapter's would be. */
h3_status_code h3_dit_load_from(h3_backend *b, const char *dir, const h3_checkpoint *weights, const h3_tp *tp,
                                h3_adapter *adapter, h3_dit **out, h3_status *status);
/* memory=stream (h3_weight_stream.h): h3_dit_load_from with every main and
 * refiner block's weights moved to host memory as each is loaded (the
 * device never holds more than one block's plus the resident rest: the
 * embedders, the timestep MLP, the output heads), and a ring of
 * H3_DIT_STREAM_SLOTS device slots of the largest block. Each forward (and
 * the refiner in h3_dit_begin) copies block i+1 into one slot while block i
 * computes from the other; every op is the resident model's, on the same
 * bytes, so the outputs are bit-identical. Adapters are fused on the host
 * as they are resident; each tensor-parallel rank streams its own shard. */
#define H3_DIT_STREAM_SLOTS 2
h3_status_code h3_dit_load_stream(h3_backend *b, const char *dir, const h3_checkpoint *weights, const h3_tp *tp,
                                  h3_adapter *adapter, h3_dit **out, h3_status *status);
/* h3_dit_create_random in stream mode (benchmarks). */
h3_status_code h3_dit_create_random_stream(h3_backend *b, const h3_dit_config *cfg, int num_blocks, uint64_t seed,
                                           const h3_tp *tp, h3_dit **out, h3_status *status);
int h3_dit_is_streamed(const h3_dit *dit);
/* The ring's slot count (1..8; H3_DIT_STREAM_SLOTS by default): 3 keeps two
 * blocks in flight ahead of the one computing, for benchmarks of the
 * overlap. Remakes the ring; outside a request only; no-op when resident. */
h3_status_code h3_dit_set_stream_slots(h3_dit *dit, int slots, h3_status *status);
/* What the ring did (zeros when resident). */
void h3_dit_stream_stats(h3_dit *dit, h3_weight_ring_stats *out);

/* load-format dummy: a checkpoint of every tensor the loader reads for
 * dir/config.json, in its naming's layout (h3_dit_config_layout), with no
 * bytes: BF16 (F32 for the fp32 islands, as the release stores them),
 * values drawn on the backend at h3_dit_create_random's ranges, keyed by
 * (seed, name). vsa_gates: also every main block's to_gate_compress, as a
 * FastH3 VSA adapter would create it. The caller closes it. */
h3_status_code h3_dit_dummy_checkpoint(const char *dir, uint64_t seed, int vsa_gates, h3_checkpoint **out,
                                       h3_status *status);

/* For benchmarks and tests: a model of cfg's shapes with `num_blocks` main
 * blocks (1..cfg->num_layers) and random weights, no checkpoint needed (the
 * release's 50 blocks would be 62 GB). Values are uniform and deterministic
 * in `seed`: matrices [N, K] in ±sqrt(3/K), norm weights in [0.8, 1.2],
 * biases in ±0.05, drawn as BF16 (F32 for the fp32 islands) and handed to
 * the backend like checkpoint tensors, so weight dtypes, packing and the
 * tensor-parallel split (tp NULL = one rank) are the loader's. The model
 * then runs h3_dit_begin / h3_dit_forward like a loaded one, over
 * num_blocks blocks. Costs about a second of host time per full-size block. */
h3_status_code h3_dit_create_random(h3_backend *b, const h3_dit_config *cfg, int num_blocks, uint64_t seed,
                                    const h3_tp *tp, h3_dit **out, h3_status *status);

/* Random to_gate_compress weights in every main block (what a FastH3 VSA
 * adapter brings), so a VSA forward of a random model runs the gate
 * projection and the compressed branch. */
h3_status_code h3_dit_create_random_gates(h3_dit *dit, uint64_t seed, h3_status *status);

/* FastH3 (h3_adapter.h, h3_vsa.h) ---------------------------------------------
 * h3_dit_load(_tp) with an adapter fused in: the adapter is bound to the
 * checkpoint (every key mapped and shape-checked) before any weight is
 * read; each tensor it changes is fused once as it streams in, in float32
 * rounded once to the checkpoint dtype, before any rearranging or sharding,
 * so the fused values are what the backend receives; a VSA adapter's
 * to_gate_compress weights are loaded into the main blocks (split by heads
 * under tensor parallelism). tp NULL = one rank; adapter NULL = the base.
 * The adapter may be freed once this returns. */
h3_status_code h3_dit_load_with_adapter(h3_backend *b, const char *dir, const h3_tp *tp, h3_adapter *adapter,
                                        h3_dit **out, h3_status *status);
/* Attention of the main blocks from the next h3_dit_begin on: NULL = dense
 * (the default), else VSA-H3 with these parameters over this rank's heads.
 * A block whose gate is missing or exactly zero skips the compressed
 * branch. The token refiner always runs dense. Fails with
 * H3_ERR_UNSUPPORTED if the backend has no VSA kernel. */
h3_status_code h3_dit_set_vsa(h3_dit *dit, const h3_vsa_params *params, h3_status *status);
/* Main blocks carrying a non-zero to_gate_compress weight. */
int h3_dit_num_vsa_gates(const h3_dit *dit);
/* The tiling plan of the current request (between begin and end), or NULL. */
const h3_vsa_plan *h3_dit_vsa_plan(const h3_dit *dit);
const h3_dit_config *h3_dit_get_config(const h3_dit *dit);
h3_dit_checkpoint_layout h3_dit_get_checkpoint_layout(const h3_dit *dit);

/* Per request, once: the text rows [L, text_dim] (F32 or the backend's
 * compute dtype) through context_embedder + token refiner (kept), the RoPE
 * cos/sin tables, the row indices and tags. The layout must match the
 * model's patch and stay alive until h3_dit_end. A second begin ends the
 * previous request. */
h3_status_code h3_dit_begin(h3_dit *dit, const h3_dit_layout *layout, const h3_tensor *text_states,
                            h3_status *status);

/* One forward. video_rows [Nv, C·ph·pw] and audio_rows [2·Na, Ca] are F32
 * backend tensors in the order of video_indices / audio_indices;
 * timesteps[n_timesteps] the distinct timesteps (t = 1 − σ, n <= 4),
 * row_timestep_index[S] (host) each row's index into them. The AdaLN tables
 * of every block are computed once per forward for these timesteps (a
 * [3·n_t, 6·D] table per block). Velocities (F32, same shapes as the inputs)
 * are written to video_velocity / audio_velocity. */
h3_status_code h3_dit_forward(h3_dit *dit, const h3_tensor *video_rows, const h3_tensor *audio_rows,
                              const float *timesteps, int n_timesteps, const int32_t *row_timestep_index,
                              h3_tensor *video_velocity, h3_tensor *audio_velocity, h3_status *status);

/* Frees the per-request state (refined text, RoPE tables, indices). */
void h3_dit_end(h3_dit *dit);

#ifdef __cplusplus
}
#endif
#endif
