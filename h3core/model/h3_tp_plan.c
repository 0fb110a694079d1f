/* h3_tp_plan.c - the plan of MiniMax-H3 over tensor-parallel ranks and its
 * byte counts (h3_tp_plan.h). */
#include "model/h3_tp_plan.h"

#include <stdio.h>
#include <string.h>

static int dit_splits(const h3_dit_config *c, int d) {
    return d >= 1 && c->num_heads % d == 0 && c->ffn_dim % d == 0 && H3_DIT_ADALN_WIDTH(c->hidden_size) % d == 0;
}

int h3_tp_dit_divides(const h3_dit_config *dit, int size) { return dit_splits(dit, size); }

int h3_tp_valid_degrees(const h3_dit_config *dit, int *out, int max) {
    int n = 0;
    for (int d = 1; d <= max; d++)
        if (dit_splits(dit, d)) out[n++] = d;
    return n;
}

static int text_splits(const h3_text_encoder_config *t, int d) {
    return t->num_heads % d == 0 && t->num_kv_heads % d == 0 && t->intermediate_size % d == 0;
}

/* Weights of the transformer on one rank, in bytes: the fp32 islands, the
 * replicated compute-dtype tensors, and 1/size of every sharded block tensor. */
static uint64_t dit_bytes(const h3_dit_config *c, int size, int wb) {
    int64_t D = c->hidden_size, inner = (int64_t)c->num_heads * c->head_dim, F = c->ffn_dim;
    int64_t Te = c->time_embed_dim, Th = c->time_embed_hidden_dim;
    int64_t vf = (int64_t)c->in_channels * c->patch_t * c->patch_h * c->patch_w, Ca = c->audio_in_channels;
    int64_t f32 = D * vf + D + D * Ca + D + Th * c->freq_dim + Th + Te * Th + Te + vf * D + vf + Ca * D + Ca;
    int64_t rep = D * c->text_dim + D + 3 * D + 2 * D * Te + 2 * D;
    int64_t per_block_rep = 2 * D + 2 * (int64_t)c->head_dim;
    int64_t per_block_split = 3 * inner * D + D * inner + 2 * F * D + D * F;
    int64_t adaln = H3_DIT_ADALN_WIDTH(D) * Te + H3_DIT_ADALN_WIDTH(D);
    int64_t blocks = (int64_t)c->num_layers + c->num_refiner_layers;
    int64_t elems = rep + blocks * per_block_rep + (blocks * per_block_split + c->num_layers * adaln) / size;
    return (uint64_t)(f32 * 4 + elems * wb);
}

static uint64_t text_bytes(const h3_text_encoder_config *t, int layers, int size, int wb) {
    int64_t D = t->hidden_size, dh = t->head_dim, F = t->intermediate_size;
    int64_t split = t->num_heads * dh * D * 2 + 2 * t->num_kv_heads * dh * D + 3 * F * D;
    int64_t per_layer = 2 * D + 2 * dh + split / size;
    return (uint64_t)((t->vocab_size * D + layers * per_layer) * wb);
}

h3_status_code h3_tp_plan_make(int size, const h3_dit_config *dit, const h3_text_encoder_config *text,
                               int text_layers, int weight_bytes, uint64_t vae_bytes, uint64_t audio_vae_bytes,
                               h3_tp_plan *plan, h3_status *status) {
    memset(plan, 0, sizeof *plan);
    if (size < 1 || size > H3_COMM_MAX_RANKS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "tensor parallelism over %d ranks: 1..%d", size,
                       H3_COMM_MAX_RANKS);
    if (!dit_splits(dit, size)) {
        int valid[H3_COMM_MAX_RANKS], n = h3_tp_valid_degrees(dit, valid, 8);
        char list[128] = "";
        size_t at = 0;
        for (int i = 0; i < n && at < sizeof list - 8; i++)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s%d", i ? (i + 1 == n ? " or " : ", ") : "",
                                   valid[i]);
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "tensor parallelism over %d ranks: the transformer's %d attention heads, FFN width %d and "
                       "AdaLN width %lld must all divide by the rank count; this model runs on %s ranks",
                       size, dit->num_heads, dit->ffn_dim, (long long)H3_DIT_ADALN_WIDTH(dit->hidden_size), list);
    }
    plan->size = size;
    plan->dit_heads = dit->num_heads / size;
    plan->dit_ffn = dit->ffn_dim / size;
    plan->dit_adaln = H3_DIT_ADALN_WIDTH(dit->hidden_size) / size;
    plan->text_size = 1;
    if (text) {
        plan->text_size = text_splits(text, size) ? size : 1;
        plan->text_heads = (int)(text->num_heads / plan->text_size);
        plan->text_kv_heads = (int)(text->num_kv_heads / plan->text_size);
        plan->text_ffn = (int)(text->intermediate_size / plan->text_size);
        if (plan->text_size != size)
            snprintf(plan->note, sizeof plan->note,
                     "text conditioner on rank 0 only: its %lld query / %lld key-value heads and FFN width %lld do "
                     "not split over %d ranks; its states are broadcast",
                     (long long)text->num_heads, (long long)text->num_kv_heads, (long long)text->intermediate_size,
                     size);
    }
    uint64_t d = dit_bytes(dit, size, weight_bytes);
    uint64_t t = text ? text_bytes(text, text_layers, plan->text_size, weight_bytes) : 0;
    for (int r = 0; r < size; r++)
        plan->rank_bytes[r] = d + vae_bytes + (r < plan->text_size ? t : 0) + (r == 0 ? audio_vae_bytes : 0);
    return H3_OK;
}

h3_tp h3_tp_text(const h3_tp_plan *plan, const h3_tp *tp) {
    if (plan->text_size == tp->size) return *tp;
    h3_tp none = {tp->rank, tp->rank == 0 ? 1 : 0, NULL};
    return none;
}
