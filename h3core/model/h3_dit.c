/* h3_dit.c - the MiniMax-H3 transformer forward on the op interface
 * (docs/spec/h3-transformer.md §2, §3); its weights are loaded by
 * h3_dit_load.c along the plan of h3_dit_plan.c.
 *
 * Forward. Activations live in the backend arena between a mark and a reset.
 * Per forward, the timestep MLP runs once and every block's AdaLN projection
 * is evaluated once for the distinct timesteps and rearranged into six
 * tables [3·n_t, D] (shift/scale/gate for attention and MLP, row ti·3 + tag)
 * that h3_op_rms_norm_modulate / h3_op_gated_residual address with a per-row
 * selector; the final layer has two tables [n_t, D] selected by the row's
 * timestep index. The refined text rows, the RoPE tables and the indices
 * are per-request state built by h3_dit_begin. */
#include "model/h3_dit.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/h3_dit_impl.h"

const h3_dit_config *h3_dit_get_config(const h3_dit *dit) { return &dit->cfg; }
h3_dit_checkpoint_layout h3_dit_get_checkpoint_layout(const h3_dit *dit) { return dit->ckpt_layout; }

/* ---- FastH3: VSA-H3 attention (h3_vsa.h) ------------------------------------------ */

static void end_vsa(h3_dit *dit) {
    h3_weight_free(dit->b, &dit->vsa_tiles.tile_sizes);
    h3_weight_free(dit->b, &dit->vsa_tiles.tile_order);
    h3_weight_free(dit->b, &dit->vsa_tiles.untile_index);
    h3_vsa_plan_free(dit->vsa_plan);
    dit->vsa_plan = NULL;
}

/* The request's tiling plan, its tables uploaded once. */
static h3_status_code begin_vsa(h3_dit *dit, const h3_dit_layout *l, h3_status *status) {
    h3_status_code rc = h3_vsa_plan_from_layout(l, &dit->vsa, &dit->vsa_plan, status);
    if (rc != H3_OK) return rc;
    const h3_vsa_plan *p = dit->vsa_plan;
    h3_vsa_tiles *t = &dit->vsa_tiles;
    t->num_tiles = p->num_tiles;
    t->num_prefix_tiles = p->num_prefix_tiles;
    t->topk = p->topk;
    t->tile_elems = p->tile_elems;
    rc = h3_weight_from_i32(dit->b, p->tile_sizes, p->num_tiles, &t->tile_sizes, status);
    if (rc == H3_OK) rc = h3_weight_from_i32(dit->b, p->tile_order, p->seq_len, &t->tile_order, status);
    if (rc == H3_OK) rc = h3_weight_from_i32(dit->b, p->untile_index, p->seq_len, &t->untile_index, status);
    return rc;
}

h3_status_code h3_dit_set_vsa(h3_dit *dit, const h3_vsa_params *params, h3_status *status) {
    if (!params) {
        dit->vsa_enabled = 0;
        return H3_OK;
    }
    h3_status_code rc = h3_vsa_params_check(params, status);
    if (rc != H3_OK) return rc;
    if (!h3_backend_has_vsa_attention(dit->b))
        return h3_fail(status, H3_ERR_UNSUPPORTED, "VSA-H3: the %s backend has no VSA kernel yet",
                       h3_backend_name(dit->b));
    dit->vsa = *params;
    dit->vsa_enabled = 1;
    return H3_OK;
}

int h3_dit_num_vsa_gates(const h3_dit *dit) {
    int n = 0;
    for (int i = 0; i < dit->cfg.num_layers; i++) n += dit->w.blocks[i].gate_active;
    return n;
}

const h3_vsa_plan *h3_dit_vsa_plan(const h3_dit *dit) { return dit->vsa_plan; }

/* ---- shared block pieces -------------------------------------------------------- */

/* Activations of one block pass over S rows, allocated once per phase. */
typedef struct block_scratch {
    h3_tensor h;        /* [S, D] normed / modulated input */
    h3_tensor q, k, v;  /* [S, inner] */
    h3_tensor o;        /* [S, inner] attention output */
    h3_tensor y;        /* [S, D] branch output */
    h3_tensor u;        /* [S, 2F] fc1 output */
    h3_tensor g;        /* [S, F] swiglu output */
    h3_tensor gate;     /* FastH3 VSA: [S, inner] to_gate_compress output (main blocks) */
} block_scratch;

static block_scratch new_scratch(h3_dit *dit, int64_t S) {
    const h3_dit_config *c = &dit->cfg;
    h3_dtype dt = h3_backend_compute_dtype(dit->b);
    int64_t D = c->hidden_size, inner = (int64_t)dit->heads * c->head_dim, F = dit->ffn; /* this rank's */
    block_scratch s;
    s.h = h3_new_2d(dit->b, dt, S, D);
    s.q = h3_new_2d(dit->b, dt, S, inner);
    s.k = h3_new_2d(dit->b, dt, S, inner);
    s.v = h3_new_2d(dit->b, dt, S, inner);
    s.o = h3_new_2d(dit->b, dt, S, inner);
    s.y = h3_new_2d(dit->b, dt, S, D);
    s.u = h3_new_2d(dit->b, dt, S, 2 * F);
    s.g = h3_new_2d(dit->b, dt, S, F);
    return s;
}

/* Self-attention of s->h into s->y: per-head QK RMSNorm, RoPE when given
 * (main blocks; the refiner has none), full bidirectional attention. */
static void attention(h3_dit *dit, const h3_dit_block *blk, block_scratch *s, const h3_tensor *cos,
                      const h3_tensor *sin) {
    h3_backend *b = dit->b;
    const h3_dit_config *c = &dit->cfg;
    int64_t inner = (int64_t)dit->heads * c->head_dim; /* this rank's heads */
    h3_tensor wq = h3_tensor_rows_view(&blk->qkv, 0, inner);
    h3_tensor wk = h3_tensor_rows_view(&blk->qkv, inner, inner);
    h3_tensor wv = h3_tensor_rows_view(&blk->qkv, 2 * inner, inner);
    h3_op_linear(b, &s->q, &s->h, &wq, NULL);
    h3_op_linear(b, &s->k, &s->h, &wk, NULL);
    h3_op_linear(b, &s->v, &s->h, &wv, NULL);
    if (cos) { /* per-head RMSNorm then RoPE on channels [0, rot), fused: one pass over q and k */
        int rot = 6 * c->rope_freq_dim;
        h3_op_qk_norm_rope(b, &s->q, &blk->norm_q, c->qk_norm_eps, cos, sin, dit->heads, c->head_dim, rot);
        h3_op_qk_norm_rope(b, &s->k, &blk->norm_k, c->qk_norm_eps, cos, sin, dit->heads, c->head_dim, rot);
    } else {
        h3_op_rms_norm(b, &s->q, &s->q, &blk->norm_q, c->head_dim, c->qk_norm_eps);
        h3_op_rms_norm(b, &s->k, &s->k, &blk->norm_k, c->head_dim, c->qk_norm_eps);
    }
    if (cos && dit->vsa_plan) { /* FastH3: VSA-H3 on the main blocks (h3_vsa.h) */
        if (blk->gate_active) h3_op_linear(b, &s->gate, &s->h, &blk->gate, NULL);
        h3_op_vsa_attention(b, &s->o, &s->q, &s->k, &s->v, blk->gate_active ? &s->gate : NULL, &dit->vsa_tiles,
                            dit->heads, c->head_dim);
    } else {
        h3_op_attention(b, &s->o, &s->q, &s->k, &s->v, dit->heads, dit->heads, c->head_dim, 0,
                        (float)(1.0 / sqrt((double)c->head_dim)));
    }
    h3_tp_linear_row_parallel(&dit->tp, b, &s->y, &s->o, &blk->out, NULL); /* sums the heads of all ranks */
}

/* SwiGLU feed-forward of s->h into s->y: fc2(value ⊙ silu(gate)). */
static void feed_forward(h3_dit *dit, const h3_dit_block *blk, block_scratch *s) {
    h3_op_linear(dit->b, &s->u, &s->h, &blk->fc1, NULL);
    h3_op_swiglu(dit->b, &s->g, &s->u, 1);
    h3_tp_linear_row_parallel(&dit->tp, dit->b, &s->y, &s->g, &blk->fc2, NULL); /* sums the FFN slices */
}

/* ---- the blocks' weights, resident or streamed -------------------------------------- */

/* A pass over n blocks (the refiner's, the main ones) reads block i's
 * weights through block_get and gives them back with block_put. Resident,
 * these hand the block itself. memory=stream: block_get waits for block i's
 * copy and hands a copy of the block whose tensors are views into its slot;
 * block_put, called once block i's ops are queued, releases its slot and
 * queues the copy of the next block into the slot the block before i freed,
 * so that copy runs while block i computes. Queued after block i's ops, a
 * copy from pageable memory (past the pin budget), which the host stages
 * itself, also overlaps block i. */
static int block_ahead(const h3_weight_ring *ring) {
    int slots = h3_weight_ring_slots(ring);
    return slots > 1 ? slots - 1 : 1; /* blocks in flight beyond the one computing */
}

static h3_status_code block_load(h3_dit *dit, h3_dit_block *blocks, int i, h3_status *status) {
    h3_tensor *list[H3_DIT_BLOCK_TENSORS];
    h3_dit_block_tensors(&blocks[i], list);
    return h3_weight_ring_load(dit->ring, i % h3_weight_ring_slots(dit->ring), (const h3_tensor *const *)list,
                               H3_DIT_BLOCK_TENSORS, status);
}

static h3_status_code block_start(h3_dit *dit, h3_dit_block *blocks, int n, h3_status *status) {
    h3_status_code rc = H3_OK;
    for (int i = 0; dit->ring && i < n && i < block_ahead(dit->ring) && rc == H3_OK; i++)
        rc = block_load(dit, blocks, i, status);
    return rc;
}

static h3_status_code block_get(h3_dit *dit, h3_dit_block *blocks, int i, h3_dit_block *dev, h3_status *status) {
    *dev = blocks[i];
    if (!dit->ring) return H3_OK;
    h3_tensor *list[H3_DIT_BLOCK_TENSORS];
    h3_dit_block_tensors(dev, list);
    return h3_weight_ring_acquire(dit->ring, i % h3_weight_ring_slots(dit->ring), list, H3_DIT_BLOCK_TENSORS, status);
}

static h3_status_code block_put(h3_dit *dit, h3_dit_block *blocks, int n, int i, h3_status *status) {
    if (!dit->ring) return H3_OK;
    h3_weight_ring_release(dit->ring, i % h3_weight_ring_slots(dit->ring));
    int next = i + block_ahead(dit->ring);
    return next < n ? block_load(dit, blocks, next, status) : h3_backend_check(dit->b, status);
}

/* ---- begin: text refiner, RoPE tables, indices ------------------------------------- */

/* cos/sin [S, 6F] from the float64 positions: cast to float32, angle =
 * pos·inv_freq in float32, per axis (t, h, w), the 3F angles repeated twice
 * for the rotate-half pairing (docs/spec/h3-transformer.md §3.4). Out of
 * line: the fuzz build leaves this loop uninstrumented for coverage
 * (tests/fuzz/coverage-ignore.txt). */
__attribute__((noinline)) static void rope_angles(const h3_dit_layout *l, const float *inv_freq, int F, float *cs,
                                                  float *sn) {
    int rot = 6 * F;
    for (int64_t s = 0; s < l->seq_len; s++)
        for (int j = 0; j < 3 * F; j++) {
            float pos = (float)l->position_ids[s * 3 + j / F];
            float angle = pos * inv_freq[j % F];
            float cv = (float)cos((double)angle), sv = (float)sin((double)angle);
            cs[s * rot + j] = cs[s * rot + 3 * F + j] = cv;
            sn[s * rot + j] = sn[s * rot + 3 * F + j] = sv;
        }
}

static h3_status_code build_rope(h3_dit *dit, const h3_dit_layout *l, h3_status *status) {
    const h3_dit_config *c = &dit->cfg;
    int F = c->rope_freq_dim, rot = 6 * F;
    int64_t S = l->seq_len;
    float *inv_freq = malloc((size_t)F * sizeof *inv_freq);
    float *cs = malloc((size_t)S * rot * sizeof *cs), *sn = malloc((size_t)S * rot * sizeof *sn);
    h3_status_code rc = H3_OK;
    if (!inv_freq || !cs || !sn) rc = h3_fail(status, H3_ERR_NO_MEMORY, "dit: out of memory for RoPE tables");
    if (rc == H3_OK) {
        h3_dit_rope_inv_freq(c, inv_freq);
        rope_angles(l, inv_freq, F, cs, sn);
        int64_t shape[2] = {S, rot};
        rc = h3_weight_from_f32(dit->b, cs, H3_F32, 2, shape, &dit->rope_cos, status);
        if (rc == H3_OK) rc = h3_weight_from_f32(dit->b, sn, H3_F32, 2, shape, &dit->rope_sin, status);
    }
    free(inv_freq);
    free(cs);
    free(sn);
    return rc;
}

/* context_embedder + token refiner over the L text rows (timestep-free, so
 * once per request), kept as a persistent [L, D] tensor. */
static h3_status_code refine_text(h3_dit *dit, const h3_tensor *text, h3_status *status) {
    h3_backend *b = dit->b;
    const h3_dit_config *c = &dit->cfg;
    h3_dtype dt = h3_backend_compute_dtype(b);
    int64_t L = h3_tensor_rows(text), D = c->hidden_size;
    size_t mark = h3_arena_mark(b);
    h3_tensor x = *text;
    if (text->dtype != dt) {
        x = h3_new_2d(b, dt, L, c->text_dim);
        h3_op_copy(b, &x, text);
    }
    h3_tensor ht = h3_new_2d(b, dt, L, D);
    h3_op_linear(b, &ht, &x, &dit->w.context_w, &dit->w.context_b);
    block_scratch s = new_scratch(dit, L);
    int n = c->num_refiner_layers;
    h3_status_code rc = block_start(dit, dit->w.refiner, n, status);
    for (int i = 0; i < n && rc == H3_OK; i++) {
        h3_dit_block blk;
        rc = block_get(dit, dit->w.refiner, i, &blk, status);
        if (rc != H3_OK) break;
        h3_op_rms_norm(b, &s.h, &ht, &blk.norm1, D, c->norm_eps);
        attention(dit, &blk, &s, NULL, NULL);
        h3_op_add(b, &ht, &ht, &s.y);
        h3_op_rms_norm(b, &s.h, &ht, &blk.norm2, D, c->norm_eps);
        feed_forward(dit, &blk, &s);
        h3_op_add(b, &ht, &ht, &s.y);
        rc = block_put(dit, dit->w.refiner, n, i, status);
    }
    if (rc == H3_OK) h3_op_rms_norm(b, &ht, &ht, &dit->w.refiner_norm, D, c->final_norm_eps);
    if (rc == H3_OK) rc = h3_backend_check(b, status);
    /* Persist through the host: small (L·D) and backend-neutral. */
    float *host = rc == H3_OK ? malloc((size_t)(L * D + 1) * sizeof *host) : NULL;
    if (rc == H3_OK && !host) rc = h3_fail(status, H3_ERR_NO_MEMORY, "dit: out of memory for %lld text rows", (long long)L);
    if (rc == H3_OK) rc = h3_tensor_download_f32(b, &ht, host, status);
    int64_t shape[2] = {L, D};
    if (rc == H3_OK) rc = h3_weight_from_f32(b, host, dt, 2, shape, &dit->text_hidden, status);
    free(host);
    h3_arena_reset(b, mark);
    return rc;
}

void h3_dit_end(h3_dit *dit) {
    if (!dit) return;
    h3_tensor *state[] = {&dit->text_hidden, &dit->rope_cos, &dit->rope_sin,
                          &dit->video_index, &dit->audio_index, &dit->text_index};
    for (size_t i = 0; i < sizeof state / sizeof state[0]; i++) h3_weight_free(dit->b, state[i]);
    free(dit->host_select);
    dit->host_select = NULL;
    dit->layout = NULL;
    end_vsa(dit); /* FastH3 */
}

static h3_status_code upload_index(h3_dit *dit, const int32_t *host, int64_t n, h3_tensor *out, h3_status *status) {
    static const int32_t none = 0;
    /* A zero-length persistent tensor still gets a valid allocation. */
    h3_status_code rc = h3_weight_from_i32(dit->b, n ? host : &none, n ? n : 1, out, status);
    if (rc == H3_OK && n == 0) out->shape[0] = 0;
    return rc;
}

h3_status_code h3_dit_begin(h3_dit *dit, const h3_dit_layout *l, const h3_tensor *text, h3_status *status) {
    const h3_dit_config *c = &dit->cfg;
    h3_dit_end(dit);
    if (l->params.patch_h != c->patch_h || l->params.patch_w != c->patch_w || l->params.patch_t != c->patch_t)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit begin: layout patch %dx%dx%d, model patch %dx%dx%d",
                       l->params.patch_t, l->params.patch_h, l->params.patch_w, c->patch_t, c->patch_h, c->patch_w);
    int text_ok = text ? text->ndim >= 1 && h3_tensor_rows(text) == l->num_text && h3_tensor_cols(text) == c->text_dim &&
                             (text->dtype == H3_F32 || text->dtype == h3_backend_compute_dtype(dit->b))
                       : l->num_text == 0;
    if (!text_ok)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit begin: text states must be [%lld, %d] (%s or f32)",
                       (long long)l->num_text, c->text_dim, h3_dtype_name(h3_backend_compute_dtype(dit->b)));
    h3_status_code rc = h3_backend_check(dit->b, status);
    if (rc != H3_OK) return rc;
    dit->host_select = malloc((size_t)(2 * l->seq_len + 1) * sizeof *dit->host_select);
    if (!dit->host_select) return h3_fail(status, H3_ERR_NO_MEMORY, "dit begin: out of memory");
    rc = upload_index(dit, l->video_indices, l->num_video_rows, &dit->video_index, status);
    if (rc == H3_OK) rc = upload_index(dit, l->audio_indices, l->num_audio_rows, &dit->audio_index, status);
    if (rc == H3_OK) rc = upload_index(dit, l->text_indices, l->num_text, &dit->text_index, status);
    if (rc == H3_OK) rc = build_rope(dit, l, status);
    if (rc == H3_OK && l->num_text > 0) rc = refine_text(dit, text, status);
    if (rc == H3_OK && dit->vsa_enabled) rc = begin_vsa(dit, l, status); /* FastH3 */
    if (rc != H3_OK) {
        h3_dit_end(dit);
        return rc;
    }
    dit->layout = l;
    return H3_OK;
}

/* ---- forward ------------------------------------------------------------------------ */

/* Sinusoidal timestep features [n_t, freq_dim], cos half first
 * (diffusers Timesteps(flip_sin_to_cos=True, downscale_freq_shift=0)), in
 * float32 like torch: exponent = −ln(10000)·k / half, ω = exp(exponent). */
static void timestep_features(const float *t, int n_t, int freq_dim, float *out) {
    int half = freq_dim / 2;
    float minus_log = (float)-log(10000.0);
    for (int i = 0; i < n_t; i++)
        for (int k = 0; k < half; k++) {
            float exponent = (minus_log * (float)k) / (float)half;
            float omega = (float)exp((double)exponent);
            float arg = t[i] * omega;
            out[i * freq_dim + k] = (float)cos((double)arg);
            out[i * freq_dim + half + k] = (float)sin((double)arg);
        }
}

/* The AdaLN tables of one forward. A block's table is computed right
 * before the block, from its own weights (in stream mode they are in the
 * block's slot then); every block reuses the same buffers. */
typedef struct modulation {
    h3_tensor act;       /* silu(temb) [n_t, Te] in the compute dtype: every AdaLN projection's input */
    h3_tensor raw;       /* [n_t, 18·D] a block's projection */
    h3_tensor raw_rows;  /* the same as [18·n_t, D] */
    h3_tensor block_idx; /* I32 [18·n_t]: raw_rows -> block */
    h3_tensor block;     /* [6·3·n_t, D]: param p at rows p·3n_t + ti·3 + tag */
    h3_tensor final;     /* [2·n_t, D]: shift rows then scale rows */
} modulation;

/* Row p·R + r of the table is the linear output's row r viewed as [R·P, D]
 * chunk p (R table rows, P params), i.e. source row r·P + p. */
static h3_status_code table_index(h3_dit *dit, int n_params, int n_rows, h3_tensor *idx, h3_status *status) {
    int32_t host[H3_DIT_ADALN_PARAMS * H3_DIT_MODALITIES * H3_DIT_MAX_TIMESTEPS];
    for (int p = 0; p < n_params; p++)
        for (int r = 0; r < n_rows; r++) host[p * n_rows + r] = r * n_params + p;
    *idx = h3_new_1d(dit->b, H3_I32, (int64_t)n_params * n_rows);
    h3_status_code rc = h3_backend_check(dit->b, status);
    return rc == H3_OK ? h3_tensor_upload_i32(dit->b, idx, host, status) : rc;
}

/* temb = linear_2(silu(linear_1(features))) in float32; every AdaLN
 * projection reads silu(temb), applied in float32 then cast (docs/spec/h3-transformer.md §3.6). */
static h3_status_code compute_modulation(h3_dit *dit, const float *timesteps, int n_t, modulation *m,
                                         h3_status *status) {
    h3_backend *b = dit->b;
    const h3_dit_config *c = &dit->cfg;
    h3_dtype dt = h3_backend_compute_dtype(b);
    int64_t D = c->hidden_size;
    float features[H3_DIT_MAX_TIMESTEPS * 1024];
    float *host = c->freq_dim <= 1024 ? features : malloc((size_t)n_t * c->freq_dim * sizeof *host);
    if (!host) return h3_fail(status, H3_ERR_NO_MEMORY, "dit: out of memory");
    timestep_features(timesteps, n_t, c->freq_dim, host);
    h3_tensor f = h3_new_2d(b, H3_F32, n_t, c->freq_dim);
    h3_status_code rc = h3_backend_check(b, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &f, host, status);
    if (host != features) free(host);
    if (rc != H3_OK) return rc;

    h3_tensor hidden = h3_new_2d(b, H3_F32, n_t, c->time_embed_hidden_dim);
    h3_tensor temb = h3_new_2d(b, H3_F32, n_t, c->time_embed_dim);
    h3_op_linear(b, &hidden, &f, &dit->w.time1_w, &dit->w.time1_b);
    h3_op_silu(b, &hidden, &hidden);
    h3_op_linear(b, &temb, &hidden, &dit->w.time2_w, &dit->w.time2_b);
    h3_op_silu(b, &temb, &temb);
    h3_tensor act = temb;
    if (dt != H3_F32) {
        act = h3_new_2d(b, dt, n_t, c->time_embed_dim);
        h3_op_copy(b, &act, &temb);
    }

    m->act = act;
    int rows = H3_DIT_MODALITIES * n_t;
    h3_tensor final_idx;
    rc = table_index(dit, H3_DIT_ADALN_PARAMS, rows, &m->block_idx, status);
    if (rc == H3_OK) rc = table_index(dit, 2, n_t, &final_idx, status);
    if (rc != H3_OK) return rc;
    m->raw = h3_new_2d(b, dt, n_t, H3_DIT_ADALN_PARAMS * H3_DIT_MODALITIES * D);
    m->raw_rows = h3_tensor_2d(&m->raw, (int64_t)H3_DIT_ADALN_PARAMS * rows, D);
    m->block = h3_new_2d(b, dt, (int64_t)H3_DIT_ADALN_PARAMS * rows, D);
    h3_tensor raw_final = h3_new_2d(b, dt, n_t, 2 * D);
    h3_tensor raw_final_rows = h3_tensor_2d(&raw_final, 2 * (int64_t)n_t, D);
    m->final = h3_new_2d(b, dt, 2 * (int64_t)n_t, D);
    h3_op_linear(b, &raw_final, &act, &dit->w.out_adaln_w, &dit->w.out_adaln_b);
    h3_op_gather_rows(b, &m->final, &raw_final_rows, &final_idx);
    return h3_backend_check(b, status);
}

/* Block blk's tables into m->block. */
static void block_modulation(h3_dit *dit, const h3_dit_block *blk, modulation *m) {
    /* each rank computes 1/N of the table and every rank gets all of it */
    h3_tp_linear_column_gather(&dit->tp, dit->b, &m->raw, &m->act, &blk->adaln_w, &blk->adaln_b);
    h3_op_gather_rows(dit->b, &m->block, &m->raw_rows, &m->block_idx);
}

/* Table p of a block's modulation: rows [p·3n_t, (p+1)·3n_t). */
static h3_tensor table(const h3_tensor *t, int p, int n_rows) { return h3_tensor_rows_view(t, (int64_t)p * n_rows, n_rows); }

static void main_block(h3_dit *dit, const h3_dit_block *blk, h3_tensor *x, block_scratch *s, const h3_tensor *mod,
                       int n_rows, const h3_tensor *select) {
    h3_backend *b = dit->b;
    const h3_dit_config *c = &dit->cfg;
    h3_tensor shift1 = table(mod, 0, n_rows), scale1 = table(mod, 1, n_rows), gate1 = table(mod, 2, n_rows);
    h3_tensor shift2 = table(mod, 3, n_rows), scale2 = table(mod, 4, n_rows), gate2 = table(mod, 5, n_rows);
    /* RMSNorm + modulate fused (h3_backend.h): one pass over X instead of two */
    h3_op_rms_norm_modulate(b, &s->h, x, &blk->norm1, c->norm_eps, &shift1, &scale1, select);
    attention(dit, blk, s, &dit->rope_cos, &dit->rope_sin);
    h3_op_gated_residual(b, x, &gate1, &s->y, select);
    h3_op_rms_norm_modulate(b, &s->h, x, &blk->norm2, c->norm_eps, &shift2, &scale2, select);
    feed_forward(dit, blk, s);
    h3_op_gated_residual(b, x, &gate2, &s->y, select);
}

/* Input rows [n, features] (F32) through their F32 projection, then into X
 * at `index` in the compute dtype. */
static void project_in(h3_dit *dit, h3_tensor *x, const h3_tensor *rows, const h3_tensor *w, const h3_tensor *bias,
                       const h3_tensor *index) {
    h3_backend *b = dit->b;
    int64_t n = h3_tensor_rows(rows), D = dit->cfg.hidden_size;
    if (n == 0) return;
    h3_tensor y = h3_new_2d(b, H3_F32, n, D);
    h3_op_linear(b, &y, rows, w, bias);
    if (x->dtype != H3_F32) {
        h3_tensor yc = h3_new_2d(b, x->dtype, n, D);
        h3_op_copy(b, &yc, &y);
        y = yc;
    }
    h3_op_scatter_rows(b, x, &y, index);
}

/* Rows of Y at `index` (compute dtype) through an F32 output head. */
static void project_out(h3_dit *dit, h3_tensor *out, const h3_tensor *y, const h3_tensor *w, const h3_tensor *bias,
                        const h3_tensor *index) {
    h3_backend *b = dit->b;
    int64_t n = h3_tensor_numel(index), D = dit->cfg.hidden_size;
    if (n == 0) return;
    h3_tensor rows = h3_new_2d(b, y->dtype, n, D);
    h3_op_gather_rows(b, &rows, y, index);
    if (rows.dtype != H3_F32) {
        h3_tensor r32 = h3_new_2d(b, H3_F32, n, D);
        h3_op_copy(b, &r32, &rows);
        rows = r32;
    }
    h3_op_linear(b, out, &rows, w, bias);
}

static h3_status_code check_rows(const char *what, const h3_tensor *t, int64_t rows, int64_t cols, h3_status *status) {
    if (!t || t->dtype != H3_F32 || t->ndim < 1 || h3_tensor_rows(t) != rows || h3_tensor_cols(t) != cols)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit forward: %s must be f32 [%lld, %lld]%s", what,
                       (long long)rows, (long long)cols, t && t->dtype != H3_F32 ? " (got another dtype)" : "");
    return H3_OK;
}

static h3_status_code check_forward_args(h3_dit *dit, const h3_tensor *video_rows, const h3_tensor *audio_rows,
                                         const float *timesteps, int n_t, const int32_t *row_index,
                                         const h3_tensor *video_velocity, const h3_tensor *audio_velocity,
                                         h3_status *status) {
    const h3_dit_config *c = &dit->cfg;
    const h3_dit_layout *l = dit->layout;
    if (!l) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit forward: no request (call h3_dit_begin first)");
    int64_t vf = (int64_t)c->in_channels * c->patch_t * c->patch_h * c->patch_w;
    h3_status_code rc = check_rows("video rows", video_rows, l->num_video_rows, vf, status);
    if (rc == H3_OK) rc = check_rows("audio rows", audio_rows, l->num_audio_rows, c->audio_in_channels, status);
    if (rc == H3_OK) rc = check_rows("video velocity", video_velocity, l->num_video_rows, vf, status);
    if (rc == H3_OK) rc = check_rows("audio velocity", audio_velocity, l->num_audio_rows, c->audio_in_channels, status);
    if (rc != H3_OK) return rc;
    if (n_t < 1 || n_t > H3_DIT_MAX_TIMESTEPS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit forward: %d distinct timesteps (1..%d)", n_t,
                       H3_DIT_MAX_TIMESTEPS);
    for (int i = 0; i < n_t; i++)
        if (!isfinite(timesteps[i]))
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit forward: timestep %d is %g", i, timesteps[i]);
    for (int64_t s = 0; s < l->seq_len; s++)
        if (row_index[s] < 0 || row_index[s] >= n_t)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit forward: row %lld has timestep index %d of %d",
                           (long long)s, row_index[s], n_t);
    return H3_OK;
}

/* The per-row AdaLN selectors: blocks ti·3 + tag, final layer ti. */
static h3_status_code upload_selectors(h3_dit *dit, const int32_t *row_index, h3_tensor *block_sel,
                                       h3_tensor *final_sel, h3_status *status) {
    const h3_dit_layout *l = dit->layout;
    int64_t S = l->seq_len;
    int32_t *bs = dit->host_select, *fs = dit->host_select + S;
    for (int64_t s = 0; s < S; s++) {
        int32_t tag = l->token_tags[s] < 0 ? 0 : l->token_tags[s];
        bs[s] = row_index[s] * H3_DIT_MODALITIES + tag;
        fs[s] = row_index[s];
    }
    *block_sel = h3_new_1d(dit->b, H3_I32, S);
    *final_sel = h3_new_1d(dit->b, H3_I32, S);
    h3_status_code rc = h3_backend_check(dit->b, status);
    if (rc == H3_OK) rc = h3_tensor_upload_i32(dit->b, block_sel, bs, status);
    if (rc == H3_OK) rc = h3_tensor_upload_i32(dit->b, final_sel, fs, status);
    return rc;
}

/* The packed sequence through the block stack and the output heads. */
static h3_status_code run_blocks(h3_dit *dit, const h3_tensor *video_rows, const h3_tensor *audio_rows,
                                 modulation *m, int n_t, const h3_tensor *block_sel,
                                 const h3_tensor *final_sel, h3_tensor *video_velocity, h3_tensor *audio_velocity,
                                 h3_status *status) {
    h3_backend *b = dit->b;
    const h3_dit_config *c = &dit->cfg;
    const h3_dit_layout *l = dit->layout;
    int64_t S = l->seq_len, D = c->hidden_size;

    /* Text, video and audio rows partition [0, S). */
    h3_tensor x = h3_new_2d(b, h3_backend_compute_dtype(b), S, D);
    if (l->num_text > 0) h3_op_scatter_rows(b, &x, &dit->text_hidden, &dit->text_index);
    project_in(dit, &x, video_rows, &dit->w.proj_in_w, &dit->w.proj_in_b, &dit->video_index);
    project_in(dit, &x, audio_rows, &dit->w.audio_in_w, &dit->w.audio_in_b, &dit->audio_index);

    block_scratch s = new_scratch(dit, S);
    if (dit->vsa_plan) s.gate = h3_new_2d(b, h3_backend_compute_dtype(b), S, (int64_t)dit->heads * c->head_dim); /* FastH3 */
    h3_status_code rc = block_start(dit, dit->w.blocks, c->num_layers, status);
    for (int i = 0; i < c->num_layers && rc == H3_OK; i++) {
        h3_dit_block blk;
        rc = block_get(dit, dit->w.blocks, i, &blk, status);
        if (rc != H3_OK) break;
        block_modulation(dit, &blk, m);
        main_block(dit, &blk, &x, &s, &m->block, H3_DIT_MODALITIES * n_t, block_sel);
        rc = h3_backend_check(b, status);
        if (rc == H3_OK) rc = block_put(dit, dit->w.blocks, c->num_layers, i, status);
    }
    if (rc != H3_OK) return rc;
    h3_tensor shift = table(&m->final, 0, n_t), scale = table(&m->final, 1, n_t);
    h3_op_rms_norm_modulate(b, &x, &x, &dit->w.out_norm, c->final_norm_eps, &shift, &scale, final_sel);
    project_out(dit, video_velocity, &x, &dit->w.proj_out_w, &dit->w.proj_out_b, &dit->video_index);
    project_out(dit, audio_velocity, &x, &dit->w.audio_out_w, &dit->w.audio_out_b, &dit->audio_index);
    return h3_backend_check(b, status);
}

h3_status_code h3_dit_forward(h3_dit *dit, const h3_tensor *video_rows, const h3_tensor *audio_rows,
                              const float *timesteps, int n_t, const int32_t *row_index, h3_tensor *video_velocity,
                              h3_tensor *audio_velocity, h3_status *status) {
    h3_status_code rc = check_forward_args(dit, video_rows, audio_rows, timesteps, n_t, row_index, video_velocity,
                                           audio_velocity, status);
    if (rc == H3_OK) rc = h3_backend_check(dit->b, status);
    if (rc != H3_OK) return rc;
    size_t mark = h3_arena_mark(dit->b);
    modulation m;
    h3_tensor block_sel, final_sel;
    rc = compute_modulation(dit, timesteps, n_t, &m, status);
    if (rc == H3_OK) rc = upload_selectors(dit, row_index, &block_sel, &final_sel, status);
    if (rc == H3_OK)
        rc = run_blocks(dit, video_rows, audio_rows, &m, n_t, &block_sel, &final_sel, video_velocity, audio_velocity,
                        status);
    h3_arena_reset(dit->b, mark);
    return rc;
}
