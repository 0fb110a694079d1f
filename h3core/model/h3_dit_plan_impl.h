/* h3_dit_plan_impl.h - the weights of the transformer as the plan lays them
 * out, and the walk over them that loading, random weights, freeing and
 * listing share (h3_dit_plan.c). Private to model/. */
#ifndef H3_DIT_PLAN_IMPL_H
#define H3_DIT_PLAN_IMPL_H

#include <stdint.h>

#include "backend/h3_backend.h"
#include "model/h3_dit_plan.h"
#include "base/h3_status.h"
#include "parallel/h3_tp.h"

typedef struct h3_dit_block {
    h3_tensor norm1, norm2;
    h3_tensor qkv;            /* [3·inner, D] */
    h3_tensor norm_q, norm_k; /* [head_dim] */
    h3_tensor out;            /* [D, inner] */
    h3_tensor fc1;            /* [2·F, D], [value; gate] */
    h3_tensor fc2;            /* [D, F] */
    h3_tensor adaln_w, adaln_b; /* [18·D, Te], [18·D]; main blocks only */
    h3_tensor gate;           /* FastH3 VSA: to_gate_compress [inner, D] (main blocks, VSA adapter) */
    int gate_active;          /* FastH3 VSA: the gate has a non-zero weight */
} h3_dit_block;

/* Every weight of the model; the blocks are arrays of the config's counts. */
typedef struct h3_dit_weights {
    h3_tensor proj_in_w, proj_in_b, audio_in_w, audio_in_b;
    h3_tensor context_w, context_b;
    h3_tensor time1_w, time1_b, time2_w, time2_b;
    h3_dit_block *refiner, *blocks; /* [num_refiner_layers], [num_layers] */
    h3_tensor refiner_norm;
    h3_tensor out_norm, out_adaln_w, out_adaln_b;
    h3_tensor proj_out_w, proj_out_b, audio_out_w, audio_out_b;
} h3_dit_weights;

typedef enum h3_dit_source {
    H3_DIT_SOURCE_PLAIN = 0, /* one tensor, loaded as is */
    H3_DIT_SOURCE_QKV,       /* diffusers: to_q/to_k/to_v stacked; native: per-head interleaved qkv_proj */
    H3_DIT_SOURCE_FC1        /* native [gate; value] swapped to [value; gate] */
} h3_dit_source;

typedef struct h3_dit_request {
    h3_dit_source kind;
    int n_names;
    char names[3][192];
    int ndim;
    int64_t shape[2]; /* of each named tensor */
    h3_weight_type type;
    h3_tp_role role;  /* how tensor parallelism splits it (h3_tp.h) */
    h3_tensor *dst;   /* NULL when only listing names */
} h3_dit_request;

typedef h3_status_code (*h3_dit_request_fn)(const h3_dit_request *r, void *user, h3_status *status);

/* Every weight of the model, in one order for loading, listing and freeing:
 * fn is called once per weight, with dst pointing into w (NULL when w is
 * NULL: listing only). Stops at the first failure and returns it. */
h3_status_code h3_dit_weights_walk(const h3_dit_config *cfg, h3_dit_checkpoint_layout layout, h3_dit_weights *w,
                                   h3_dit_request_fn fn, void *user, h3_status *status);

#endif
