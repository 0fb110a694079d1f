/* h3_dit_impl.h - the transformer's state, shared by its loader
 * (h3_dit_load.c) and its forward (h3_dit.c). Private to model/. */
#ifndef H3_DIT_IMPL_H
#define H3_DIT_IMPL_H

#include <stdint.h>

#include "model/h3_dit.h"
#include "backend/h3_weight_stream.h"
#include "model/h3_dit_plan_impl.h"

struct h3_dit {
    h3_backend *b;
    h3_dit_config cfg;
    h3_tp tp;            /* tensor parallelism (h3_tp.h): this rank's heads and FFN slice */
    int heads;           /* attention heads of this rank */
    int64_t ffn;         /* FFN width of this rank */
    h3_dit_checkpoint_layout ckpt_layout;
    const h3_checkpoint *ckpt; /* only while loading: the file's (own_ckpt) or the caller's */
    h3_checkpoint *own_ckpt;

    /* FastH3 (h3_adapter.h, h3_vsa.h) */
    h3_adapter *adapter;  /* only while loading */
    int vsa_enabled;      /* h3_dit_set_vsa */
    h3_vsa_params vsa;
    h3_vsa_plan *vsa_plan;   /* per request */
    h3_vsa_tiles vsa_tiles;  /* per request, the plan's tables on the backend */

    h3_dit_weights w;    /* every weight of the plan (h3_dit_plan_impl.h) */
    struct h3_lora_set *lora_set; /* user LoRAs fused in (h3_lora.h); NULL: none */

    /* memory=stream (h3_weight_stream.h): the blocks' weights (main and
     * refiner) live on the host and go through the ring, block i+1 copied
     * while block i computes; everything else stays resident. */
    int stream;
    int stream_slots;    /* the ring's slots (h3_dit_set_stream_slots; H3_DIT_STREAM_SLOTS by default) */
    h3_weight_ring *ring;

    /* Per request (h3_dit_begin .. h3_dit_end). */
    const h3_dit_layout *layout;
    h3_tensor text_hidden;              /* [L, D] refined text rows */
    h3_tensor rope_cos, rope_sin;       /* [S, rot] F32 */
    h3_tensor video_index, audio_index, text_index; /* I32 */
    int32_t *host_select;               /* [2·S] scratch for the selectors */
};

/* h3_dit_load.c: the tensors of a block in the ring's order (absent ones
 * have no data): H3_DIT_BLOCK_TENSORS pointers into blk. */
#define H3_DIT_BLOCK_TENSORS 11
/* h3_lora.c: drops the DiT's references to the LoRAs in force (h3_dit_free). */
void h3_dit_lora_release(h3_dit *dit);
void h3_dit_block_tensors(h3_dit_block *blk, h3_tensor **out);

#endif
