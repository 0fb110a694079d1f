/* h3_tp_plan.h - the split of MiniMax-H3 over tensor-parallel ranks: which
 * degrees divide the transformer, how the text conditioner follows, and
 * the weights each rank holds (docs/spec/tp4-v100-reference.md §2). The
 * mechanics it plans for (roles, collectives, the team) are
 * parallel/h3_tp.h's.
 *
 * The transformer splits its heads, its FFN width and its AdaLN width by
 * the degree, which must divide all three; the text conditioner splits its
 * query and key-value heads and its FFN width when they divide too, and
 * otherwise runs on rank 0 and broadcasts its states. */
#ifndef H3_TP_PLAN_H
#define H3_TP_PLAN_H

#include <stdint.h>

#include "model/h3_dit_plan.h"
#include "model/h3_text_encoder.h"
#include "parallel/h3_comm.h"
#include "parallel/h3_tp.h"
#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct h3_tp_plan {
    int size;                         /* ranks */
    int dit_heads, dit_ffn;           /* per rank */
    int64_t dit_adaln;                /* AdaLN output rows per rank */
    int text_size;                    /* ranks the text conditioner runs on: size, or 1 (rank 0) */
    int text_heads, text_kv_heads, text_ffn; /* per text rank */
    uint64_t rank_bytes[H3_COMM_MAX_RANKS];  /* weights each rank holds */
    char note[320];                   /* planned departures from the full split, with reasons */
} h3_tp_plan;

/* Whether the transformer splits over `size` ranks. */
int h3_tp_dit_divides(const h3_dit_config *dit, int size);
/* The degrees (1..max) the transformer splits over: they divide its heads,
 * its FFN width and its AdaLN width. Returns how many were written. */
int h3_tp_valid_degrees(const h3_dit_config *dit, int *out, int max);
/* The plan for `size` ranks. A degree that does not divide the transformer
 * is an H3_ERR_INVALID_ARGUMENT listing the valid ones; a text conditioner
 * whose heads do not split runs on rank 0 (recorded in note). text may be
 * NULL. weight_bytes: the compute dtype's size (4 CPU, 2 CUDA); vae_bytes
 * and audio_vae_bytes: what those components hold (every rank holds the
 * video VAE, rank 0 the audio VAE). */
h3_status_code h3_tp_plan_make(int size, const h3_dit_config *dit, const h3_text_encoder_config *text,
                               int text_layers, int weight_bytes, uint64_t vae_bytes, uint64_t audio_vae_bytes,
                               h3_tp_plan *plan, h3_status *status);
/* The h3_tp the text conditioner of a rank uses; size 0 when the rank holds none. */
h3_tp h3_tp_text(const h3_tp_plan *plan, const h3_tp *tp);

#ifdef __cplusplus
}
#endif
#endif
