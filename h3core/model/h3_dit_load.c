/* h3_dit_load.c - the transformer's weights onto a backend: from either
 * checkpoint layout, with a FastH3 adapter fused in as the tensors stream
 * (h3_adapter.h), sharded for tensor parallelism, or random for benchmarks;
 * and freeing them. The plan it walks is h3_dit_plan.c's.
 *
 * The native checkpoint's per-head interleaved qkv_proj and [gate; value]
 * fc1 are reordered on the host while loading, by whole rows, so both
 * layouts end in bit-identical weights. */
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/h3_adapter.h" /* FastH3 */
#include "model/h3_dit_impl.h"
#include "model/h3_tp_plan.h"

/* ---- loading ----------------------------------------------------------------- */

/* Host copy of the rows of one or more checkpoint tensors rearranged into
 * the in-memory order, then uploaded like a file tensor. Rows are moved
 * whole, in the file dtype, so the values are untouched. */
static h3_status_code load_rearranged(h3_dit *dit, const h3_dit_request *r, const h3_st_tensor **src,
                                      h3_status *status) {
    const h3_dit_config *c = &dit->cfg;
    int64_t rows = r->kind == H3_DIT_SOURCE_QKV && r->n_names == 3 ? 3 * src[0]->shape[0] : src[0]->shape[0];
    int64_t cols = src[0]->shape[1];
    size_t esize = h3_st_dtype_size(src[0]->dtype), row_bytes = (size_t)cols * esize;
    for (int i = 1; i < r->n_names; i++)
        if (src[i]->dtype != src[0]->dtype)
            return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s' is %s but '%s' is %s", src[i]->file_path,
                           src[i]->name, h3_st_dtype_name(src[i]->dtype), src[0]->name,
                           h3_st_dtype_name(src[0]->dtype));
    if (h3_st_is_dummy(src[0])) {
        /* Random rows have no order to restore: the packed tensor is one
         * dummy tensor of the packed shape, drawn from its first source's
         * generator, and sharded like the packed file tensor. */
        h3_st_tensor packed = *src[0];
        packed.shape[0] = rows;
        packed.numel = rows * cols;
        packed.nbytes = (size_t)rows * row_bytes;
        return h3_tp_weight_load(dit->b, &dit->tp, &packed, r->role, r->type, r->dst, status);
    }
    char *buf = malloc((size_t)rows * row_bytes + 1);
    if (!buf) return h3_fail(status, H3_ERR_NO_MEMORY, "%s: tensor '%s': out of host memory", src[0]->file_path, src[0]->name);
    int64_t inner = (int64_t)c->num_heads * c->head_dim, dh = c->head_dim, F = c->ffn_dim;
    for (int64_t row = 0; row < rows; row++) {
        const h3_st_tensor *from = src[0];
        int64_t src_row = row;
        if (r->kind == H3_DIT_SOURCE_QKV && r->n_names == 3) {
            from = src[row / inner];
            src_row = row % inner;
        } else if (r->kind == H3_DIT_SOURCE_QKV) {
            /* native: head h's q, k, v rows are h·3dh + [0,dh), [dh,2dh), [2dh,3dh) */
            int64_t part = row / inner, head = (row % inner) / dh, j = row % dh;
            src_row = head * 3 * dh + part * dh + j;
        } else if (r->kind == H3_DIT_SOURCE_FC1) {
            src_row = row < F ? F + row : row - F; /* [gate; value] -> [value; gate] */
        }
        if (h3_backend_holds_data(dit->b)) /* a measuring backend takes the shape alone */
            memcpy(buf + (size_t)row * row_bytes, (const char *)from->data + (size_t)src_row * row_bytes, row_bytes);
    }
    h3_st_tensor fused = *src[0];
    fused.shape[0] = rows;
    fused.numel = rows * cols;
    fused.data = buf;
    fused.nbytes = (size_t)rows * row_bytes;
    h3_status_code rc = h3_tp_weight_load(dit->b, &dit->tp, &fused, r->role, r->type, r->dst, status);
    free(buf);
    return rc;
}

/* ---- memory=stream: the blocks' weights on the host (h3_weight_stream.h) ------------ */

void h3_dit_block_tensors(h3_dit_block *blk, h3_tensor **out) {
    h3_tensor *list[H3_DIT_BLOCK_TENSORS] = {&blk->norm1, &blk->norm2,  &blk->qkv,     &blk->norm_q,
                                             &blk->norm_k, &blk->out,   &blk->fc1,     &blk->fc2,
                                             &blk->adaln_w, &blk->adaln_b, &blk->gate};
    memcpy(out, list, sizeof list);
}

/* A weight of a main or refiner block: those stream, the rest (embedders,
 * timestep MLP, output heads: small) stay resident. */
static int in_blocks(const h3_dit *dit, const h3_tensor *t) {
    const char *p = (const char *)t;
    const char *m = (const char *)dit->w.blocks, *r = (const char *)dit->w.refiner;
    return (m && p >= m && p < m + (size_t)dit->cfg.num_layers * sizeof *dit->w.blocks) ||
           (r && p >= r && p < r + (size_t)dit->cfg.num_refiner_layers * sizeof *dit->w.refiner);
}

/* A gate loaded after the walk (FastH3 VSA) follows its block. */
static h3_status_code gate_home(h3_dit *dit, int i, h3_status *status) {
    return dit->stream ? h3_weight_to_host(dit->b, &dit->w.blocks[i].gate, status) : H3_OK;
}

/* The ring, sized for the largest block (gates included), made once the
 * blocks are on the host: H3_DIT_STREAM_SLOTS slots, the one computing and
 * the next one copying. */
static h3_status_code make_ring(h3_dit *dit, h3_status *status) {
    h3_weight_ring_destroy(dit->ring);
    dit->ring = NULL;
    if (!dit->stream) return H3_OK;
    size_t most = 0;
    h3_tensor *list[H3_DIT_BLOCK_TENSORS];
    for (int i = 0; i < dit->cfg.num_layers + dit->cfg.num_refiner_layers; i++) {
        h3_dit_block *blk = i < dit->cfg.num_layers ? &dit->w.blocks[i] : &dit->w.refiner[i - dit->cfg.num_layers];
        h3_dit_block_tensors(blk, list);
        size_t n = h3_weight_ring_group_bytes((const h3_tensor *const *)list, H3_DIT_BLOCK_TENSORS);
        if (n > most) most = n;
    }
    int slots = dit->stream_slots ? dit->stream_slots : H3_DIT_STREAM_SLOTS;
    h3_status_code rc = h3_weight_ring_create(dit->b, slots, most, &dit->ring, status);
    return rc == H3_OK ? rc : h3_status_prefix(status, "dit (memory=stream)");
}

h3_status_code h3_dit_set_stream_slots(h3_dit *dit, int slots, h3_status *status) {
    if (slots < 1 || slots > 8)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit: %d stream slots (1..8)", slots);
    if (dit->layout) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit: stream slots changed inside a request");
    dit->stream_slots = slots;
    return make_ring(dit, status);
}

int h3_dit_is_streamed(const h3_dit *dit) { return dit->stream; }

void h3_dit_stream_stats(h3_dit *dit, h3_weight_ring_stats *out) {
    memset(out, 0, sizeof *out);
    if (dit->ring) h3_weight_ring_stats_get(dit->ring, out);
}

static h3_status_code load_request(const h3_dit_request *r, void *user, h3_status *status) {
    h3_dit *dit = user;
    const h3_st_tensor *src[3];
    h3_st_tensor fused[3]; /* FastH3: an adapter's fused copies, before any rearranging or sharding */
    void *fused_data[3] = {NULL, NULL, NULL};
    h3_status_code rc = H3_OK;
    for (int i = 0; i < r->n_names && rc == H3_OK; i++) {
        rc = h3_checkpoint_get(dit->ckpt, r->names[i], r->ndim, r->shape, &src[i], status);
        /* (fusing keeps shape and dtype: a measuring backend needs no fused copy) */
        if (rc == H3_OK && dit->adapter && h3_backend_holds_data(dit->b))
            rc = h3_adapter_fuse(dit->adapter, src[i], &fused[i], &fused_data[i], status);
        if (fused_data[i]) src[i] = &fused[i];
    }
    if (rc == H3_OK)
        rc = r->kind == H3_DIT_SOURCE_PLAIN
                 ? h3_tp_weight_load(dit->b, &dit->tp, src[0], r->role, r->type, r->dst, status)
                 : load_rearranged(dit, r, src, status);
    for (int i = 0; i < r->n_names; i++) free(fused_data[i]);
    if (rc == H3_OK && dit->stream && in_blocks(dit, r->dst)) rc = h3_weight_to_host(dit->b, r->dst, status);
    return rc;
}

static h3_status_code free_request(const h3_dit_request *r, void *user, h3_status *status) {
    h3_dit *dit = user;
    h3_weight_free(dit->b, r->dst);
    return H3_OK;
}

void h3_dit_free(h3_dit *dit) {
    if (!dit) return;
    h3_dit_end(dit);
    h3_dit_lora_release(dit);
    h3_weight_ring_destroy(dit->ring);
    if (dit->w.refiner && dit->w.blocks)
        h3_dit_weights_walk(&dit->cfg, dit->ckpt_layout, &dit->w, free_request, dit, NULL);
    h3_checkpoint_close(dit->own_ckpt);
    for (int i = 0; dit->w.blocks && i < dit->cfg.num_layers; i++)
        h3_weight_free(dit->b, &dit->w.blocks[i].gate); /* FastH3 */
    free(dit->w.refiner);
    free(dit->w.blocks);
    free(dit);
}

h3_status_code h3_dit_load(h3_backend *b, const char *dir, h3_dit **out, h3_status *status) {
    h3_tp single = H3_TP_SINGLE;
    return h3_dit_load_tp(b, dir, &single, out, status);
}

/* This rank's share of the heads and the FFN (the plan: h3_tp_plan.h). */
static h3_status_code split_for_tp(h3_dit *dit, const char *dir, h3_status *status) {
    const h3_dit_config *c = &dit->cfg;
    int n = dit->tp.size;
    if (n < 1 || !h3_tp_dit_divides(c, n))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "%s: %d attention heads, FFN width %d and AdaLN width %lld do not split over %d "
                       "tensor-parallel ranks",
                       dir, c->num_heads, c->ffn_dim, (long long)H3_DIT_ADALN_WIDTH(c->hidden_size), n);
    dit->heads = c->num_heads / n;
    dit->ffn = c->ffn_dim / n;
    return H3_OK;
}

/* ---- FastH3: the adapter's gates (h3_adapter.h) -------------------------------------- */

/* "Skip the branch only when the weights are exactly zero": ±0 bit patterns. */
static int all_zero(const h3_st_tensor *t) {
    if (h3_st_is_dummy(t)) return t->random.lo == 0 && t->random.hi == 0;
    size_t es = h3_st_dtype_size(t->dtype);
    const unsigned char *p = t->data;
    for (int64_t i = 0; i < t->numel; i++, p += es)
        for (size_t k = 0; k < es; k++)
            if (p[k] & (k + 1 == es ? 0x7f : 0xff)) return 0; /* little-endian: the sign bit is in the last byte */
    return 1;
}

/* A VSA adapter's to_gate_compress weights, split by heads like q. A
 * measuring backend reads no gate bytes and counts every gate active (the
 * trained gates are not zero). */
static h3_status_code load_gates(h3_dit *dit, h3_status *status) {
    for (int i = 0; i < dit->cfg.num_layers; i++) {
        h3_st_tensor gate;
        void *data = NULL;
        int present = 0;
        h3_status_code rc = h3_backend_holds_data(dit->b)
                                ? h3_adapter_gate(dit->adapter, i, &gate, &data, status)
                                : h3_adapter_gate_header(dit->adapter, i, &gate, &present, status);
        if (rc == H3_OK && (data || present)) {
            dit->w.blocks[i].gate_active = data ? !all_zero(&gate) : 1;
            rc = h3_tp_weight_load(dit->b, &dit->tp, &gate, H3_TP_HEADS, H3_WEIGHT_LINEAR, &dit->w.blocks[i].gate,
                                   status);
            if (rc == H3_OK) rc = gate_home(dit, i, status);
        }
        free(data);
        if (rc != H3_OK) return rc;
    }
    return H3_OK;
}

/* to_gate_compress weights the checkpoint holds itself (a dummy VSA
 * model's: the release's base has none), loaded as an adapter's are. */
static h3_status_code load_checkpoint_gates(h3_dit *dit, h3_status *status) {
    int64_t inner = (int64_t)dit->cfg.num_heads * dit->cfg.head_dim;
    for (int i = 0; i < dit->cfg.num_layers; i++) {
        char name[128];
        h3_dit_gate_name(dit->ckpt_layout, i, name, sizeof name);
        if (!h3_checkpoint_find(dit->ckpt, name)) continue;
        const h3_st_tensor *gate;
        h3_status_code rc = h3_checkpoint_get(dit->ckpt, name, 2, (int64_t[]){inner, dit->cfg.hidden_size}, &gate,
                                              status);
        if (rc == H3_OK)
            rc = h3_tp_weight_load(dit->b, &dit->tp, gate, H3_TP_HEADS, H3_WEIGHT_LINEAR, &dit->w.blocks[i].gate,
                                   status);
        if (rc == H3_OK) rc = gate_home(dit, i, status);
        if (rc != H3_OK) return rc;
        dit->w.blocks[i].gate_active = !all_zero(gate);
    }
    return H3_OK;
}

/* The adapter (NULL: none) is bound to the checkpoint's header before any
 * weight is read; load_request fuses as the tensors stream in. weights:
 * the checkpoint to read (NULL: dir's files). */
static h3_status_code load_dit(h3_backend *b, const char *dir, const h3_checkpoint *weights, const h3_tp *tp,
                               h3_adapter *adapter, int stream, h3_dit **out, h3_status *status) {
    *out = NULL;
    h3_dit *dit = calloc(1, sizeof *dit);
    if (!dit) return h3_fail(status, H3_ERR_NO_MEMORY, "%s: out of memory", dir);
    dit->b = b;
    dit->stream = stream;
    dit->adapter = adapter;
    dit->tp = *tp;
    h3_status_code rc = h3_dit_config_load(dir, &dit->cfg, status);
    if (rc == H3_OK) rc = split_for_tp(dit, dir, status);
    if (rc == H3_OK && !weights) rc = h3_checkpoint_open(dir, &dit->own_ckpt, status);
    dit->ckpt = weights ? weights : dit->own_ckpt;
    if (rc == H3_OK) rc = h3_dit_detect_layout(dit->ckpt, &dit->ckpt_layout, status);
    if (rc == H3_OK && adapter) rc = h3_adapter_bind(adapter, dit->ckpt, dit->ckpt_layout, &dit->cfg, status);
    if (rc == H3_OK) {
        dit->w.refiner = calloc((size_t)dit->cfg.num_refiner_layers + 1, sizeof *dit->w.refiner);
        dit->w.blocks = calloc((size_t)dit->cfg.num_layers + 1, sizeof *dit->w.blocks);
        if (!dit->w.refiner || !dit->w.blocks) rc = h3_fail(status, H3_ERR_NO_MEMORY, "%s: out of memory", dir);
    }
    if (rc == H3_OK) rc = h3_dit_weights_walk(&dit->cfg, dit->ckpt_layout, &dit->w, load_request, dit, status);
    if (rc == H3_OK) rc = adapter ? load_gates(dit, status) : load_checkpoint_gates(dit, status);
    if (rc == H3_OK) rc = make_ring(dit, status);
    dit->adapter = NULL;
    /* The weights are on the backend now; the mapping is not needed. */
    h3_checkpoint_close(dit->own_ckpt);
    dit->own_ckpt = NULL;
    dit->ckpt = NULL;
    if (rc != H3_OK) {
        h3_dit_free(dit);
        return rc;
    }
    *out = dit;
    return H3_OK;
}

h3_status_code h3_dit_load_tp(h3_backend *b, const char *dir, const h3_tp *tp, h3_dit **out, h3_status *status) {
    return load_dit(b, dir, NULL, tp, NULL, 0, out, status);
}

h3_status_code h3_dit_load_with_adapter(h3_backend *b, const char *dir, const h3_tp *tp, h3_adapter *adapter,
                                        h3_dit **out, h3_status *status) {
    h3_tp single = H3_TP_SINGLE;
    return load_dit(b, dir, NULL, tp ? tp : &single, adapter, 0, out, status);
}

h3_status_code h3_dit_load_from(h3_backend *b, const char *dir, const h3_checkpoint *weights, const h3_tp *tp,
                                h3_adapter *adapter, h3_dit **out, h3_status *status) {
    h3_tp single = H3_TP_SINGLE;
    return load_dit(b, dir, weights, tp ? tp : &single, adapter, 0, out, status);
}

h3_status_code h3_dit_load_stream(h3_backend *b, const char *dir, const h3_checkpoint *weights, const h3_tp *tp,
                                  h3_adapter *adapter, h3_dit **out, h3_status *status) {
    h3_tp single = H3_TP_SINGLE;
    return load_dit(b, dir, weights, tp ? tp : &single, adapter, 1, out, status);
}

/* ---- random weights (benchmarks) -------------------------------------------------- */

/* The range of one plan entry's random values: matrices [N, K] in
 * ±sqrt(3/K) (unit variance out for unit variance in), norm weights in
 * [0.8, 1.2], biases in ±0.05. Random models and dummy checkpoints share it;
 * it keeps activations finite through the release's 50 blocks. */
static void random_range(const h3_dit_request *r, float *lo, float *hi) {
    if (r->ndim == 2) {
        *hi = sqrtf(3.0f / (float)r->shape[1]);
        *lo = -*hi;
    } else if (g_str_has_suffix(r->names[0], ".bias")) {
        *lo = -0.05f, *hi = 0.05f;
    } else {
        *lo = 0.8f, *hi = 1.2f;
    }
}

static h3_status_code dummy_request(const h3_dit_request *r, void *user, h3_status *status);

/* A model of random weights drawn on the backend, each rank its shard: a
 * dummy checkpoint of the config's tensors (load-format dummy's) read by the
 * loader's own walk, so a benchmark's model is built like the product's, in
 * seconds, without host copies of the values. */
static h3_status_code create_random(h3_backend *b, const h3_dit_config *cfg, int num_blocks, uint64_t seed,
                                    const h3_tp *tp, int stream, h3_dit **out, h3_status *status);

h3_status_code h3_dit_create_random(h3_backend *b, const h3_dit_config *cfg, int num_blocks, uint64_t seed,
                                    const h3_tp *tp, h3_dit **out, h3_status *status) {
    return create_random(b, cfg, num_blocks, seed, tp, 0, out, status);
}

h3_status_code h3_dit_create_random_stream(h3_backend *b, const h3_dit_config *cfg, int num_blocks, uint64_t seed,
                                           const h3_tp *tp, h3_dit **out, h3_status *status) {
    return create_random(b, cfg, num_blocks, seed, tp, 1, out, status);
}

static h3_status_code create_random(h3_backend *b, const h3_dit_config *cfg, int num_blocks, uint64_t seed,
                                    const h3_tp *tp, int stream, h3_dit **out, h3_status *status) {
    *out = NULL;
    h3_status_code rc = h3_dit_config_check("random dit", cfg, status);
    if (rc != H3_OK) return rc;
    if (num_blocks < 1 || num_blocks > cfg->num_layers)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "random dit: %d blocks (1..%d)", num_blocks,
                       cfg->num_layers);
    h3_dit *dit = calloc(1, sizeof *dit);
    if (!dit) return h3_fail(status, H3_ERR_NO_MEMORY, "random dit: out of memory");
    h3_tp single = H3_TP_SINGLE;
    dit->b = b;
    dit->stream = stream;
    dit->tp = tp ? *tp : single;
    dit->cfg = *cfg;
    dit->cfg.num_layers = num_blocks;
    dit->ckpt_layout = H3_DIT_DIFFUSERS; /* names only; the weights never touch a file */
    h3_checkpoint *ck = NULL;
    rc = split_for_tp(dit, "random dit", status);
    if (rc == H3_OK) rc = h3_checkpoint_dummy_new("random dit", seed, &ck, status);
    if (rc == H3_OK) rc = h3_dit_weights_walk(&dit->cfg, dit->ckpt_layout, NULL, dummy_request, ck, status);
    if (rc == H3_OK) {
        dit->w.refiner = calloc((size_t)dit->cfg.num_refiner_layers + 1, sizeof *dit->w.refiner);
        dit->w.blocks = calloc((size_t)dit->cfg.num_layers + 1, sizeof *dit->w.blocks);
        if (!dit->w.refiner || !dit->w.blocks) rc = h3_fail(status, H3_ERR_NO_MEMORY, "random dit: out of memory");
    }
    dit->ckpt = ck;
    if (rc == H3_OK) rc = h3_dit_weights_walk(&dit->cfg, dit->ckpt_layout, &dit->w, load_request, dit, status);
    if (rc == H3_OK) rc = make_ring(dit, status);
    dit->ckpt = NULL;
    h3_checkpoint_close(ck);
    if (rc != H3_OK) {
        h3_dit_free(dit);
        return rc;
    }
    *out = dit;
    return H3_OK;
}

/* What a VSA adapter adds: to_gate_compress in every main block, here
 * random, so a VSA benchmark pays for the gate projection and the compressed
 * branch like a FastH3 VSA model does. Split by heads like a loaded gate,
 * drawn on the backend like the rest. */
h3_status_code h3_dit_create_random_gates(h3_dit *dit, uint64_t seed, h3_status *status) {
    h3_checkpoint *ck = NULL;
    h3_status_code rc = h3_checkpoint_dummy_new("random dit gates", seed, &ck, status);
    int64_t shape[2] = {(int64_t)dit->cfg.num_heads * dit->cfg.head_dim, dit->cfg.hidden_size};
    float bound = sqrtf(3.0f / (float)dit->cfg.hidden_size);
    for (int i = 0; rc == H3_OK && i < dit->cfg.num_layers; i++) {
        char name[128];
        const h3_st_tensor *src = NULL;
        h3_dit_gate_name(H3_DIT_DIFFUSERS, i, name, sizeof name);
        rc = h3_checkpoint_dummy_add(ck, name, H3_ST_BF16, 2, shape, -bound, bound, status);
        if (rc == H3_OK) rc = h3_checkpoint_get(ck, name, 2, shape, &src, status);
        h3_weight_free(dit->b, &dit->w.blocks[i].gate);
        if (rc == H3_OK)
            rc = h3_tp_weight_load(dit->b, &dit->tp, src, H3_TP_HEADS, H3_WEIGHT_LINEAR, &dit->w.blocks[i].gate,
                                   status);
        if (rc == H3_OK) rc = gate_home(dit, i, status);
        dit->w.blocks[i].gate_active = rc == H3_OK;
    }
    h3_checkpoint_close(ck);
    if (rc == H3_OK) rc = make_ring(dit, status); /* the blocks grew */
    return rc;
}

/* ---- dummy checkpoints (load-format dummy) ------------------------------------------ */

static h3_status_code dummy_request(const h3_dit_request *r, void *user, h3_status *status) {
    float lo, hi;
    random_range(r, &lo, &hi);
    h3_status_code rc = H3_OK;
    for (int i = 0; i < r->n_names && rc == H3_OK; i++)
        rc = h3_checkpoint_dummy_add(user, r->names[i], r->type == H3_WEIGHT_F32 ? H3_ST_F32 : H3_ST_BF16, r->ndim,
                                     r->shape, lo, hi, status);
    return rc;
}

h3_status_code h3_dit_dummy_checkpoint(const char *dir, uint64_t seed, int vsa_gates, h3_checkpoint **out,
                                       h3_status *status) {
    *out = NULL;
    h3_dit_config cfg;
    h3_dit_checkpoint_layout layout;
    h3_status_code rc = h3_dit_config_load(dir, &cfg, status);
    if (rc == H3_OK) rc = h3_dit_config_layout(dir, &layout, status);
    if (rc != H3_OK) return rc;
    char *label = g_strdup_printf("%s (load-format dummy)", dir);
    h3_checkpoint *ck;
    rc = h3_checkpoint_dummy_new(label, seed, &ck, status);
    g_free(label);
    if (rc != H3_OK) return rc;
    rc = h3_dit_weights_walk(&cfg, layout, NULL, dummy_request, ck, status);
    /* what a VSA adapter's .set_weight creates: [heads·head_dim, hidden], in
     * the dtype of the attention weights */
    int64_t gate_shape[2] = {(int64_t)cfg.num_heads * cfg.head_dim, cfg.hidden_size};
    float bound = sqrtf(3.0f / (float)cfg.hidden_size);
    for (int i = 0; vsa_gates && rc == H3_OK && i < cfg.num_layers; i++) {
        char name[128];
        h3_dit_gate_name(layout, i, name, sizeof name);
        rc = h3_checkpoint_dummy_add(ck, name, H3_ST_BF16, 2, gate_shape, -bound, bound, status);
    }
    if (rc != H3_OK) {
        h3_checkpoint_close(ck);
        return rc;
    }
    *out = ck;
    return H3_OK;
}
