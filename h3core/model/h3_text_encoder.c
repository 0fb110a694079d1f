/* h3_text_encoder.c - Qwen3-VL text decoder up to a tap layer, on the op
 * interface. Reference: transformers Qwen3VLTextModel (docs/spec/h3-conditioner.md
 * §3). Per layer:
 *
 *   h = rmsnorm(x);  q,k,v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ
 *   q,k = per-head rmsnorm (before RoPE), then rotate-half M-RoPE
 *   x += causal GQA attention(q,k,v) · Woᵀ
 *   x += (silu(rmsnorm(x)·Wgᵀ) ⊙ rmsnorm(x)·Wuᵀ) · Wdᵀ
 *
 * The output is the raw residual stream: no final norm. */
#include "model/h3_text_encoder.h"

#include "backend/h3_weight_stream.h"

#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/h3_config.h"
#include "base/h3_safetensors.h"
#include "model/h3_vision.h"

#define PREFIX "model.language_model."

/* Per-layer tensors, in checkpoint-name order of the roles below. */
enum {
    W_INPUT_NORM, W_Q, W_K, W_V, W_O, W_Q_NORM, W_K_NORM, W_POST_NORM, W_GATE, W_UP, W_DOWN, W_PER_LAYER
};

static const char *const role_suffix[W_PER_LAYER] = {
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight", "self_attn.o_proj.weight", "self_attn.q_norm.weight",
    "self_attn.k_norm.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight",
    "mlp.up_proj.weight", "mlp.down_proj.weight",
};

typedef struct layer_weights {
    h3_tensor input_norm, q, k, v, o, q_norm, k_norm, post_norm;
    h3_tensor gate_up; /* [2F, D]: gate rows then up rows, one GEMM feeds swiglu */
    h3_tensor down;
} layer_weights;

/* The FL2VA side: the vision tower and the token ids that place its output. */
typedef struct h3_text_vision {
    h3_vision *tower;
    int32_t image_token_id, video_token_id, vision_start_id, vision_end_id;
} h3_text_vision;

struct h3_text_encoder {
    h3_backend *b;
    h3_text_encoder_config cfg;
    h3_tp tp;              /* q/k/v/o by heads, gate/up/down by FFN columns (h3_tp.h) */
    int heads, kv_heads;   /* this rank's */
    int64_t ffn;
    int tap_layer;
    h3_tensor embed;
    layer_weights *layers; /* tap_layer entries */
    float *inv_freq;       /* head_dim/2 rotary frequencies */
    h3_text_vision vis;    /* the vision tower and its token ids (FL2VA); vis.tower NULL: none */
    /* memory=stream (h3_weight_stream.h): the layers on the host, at most
     * two on the device (the ring's slots: one computing, one copying) */
    int stream;
    h3_weight_ring *ring;
};

#define LAYER_TENSORS 10

static void layer_tensors(layer_weights *lw, h3_tensor **out) {
    h3_tensor *list[LAYER_TENSORS] = {&lw->input_norm, &lw->q,         &lw->k,         &lw->v,       &lw->o,
                                      &lw->q_norm,     &lw->k_norm,    &lw->post_norm, &lw->gate_up, &lw->down};
    memcpy(out, list, sizeof list);
}

/* ---- config -------------------------------------------------------------------- */

/* Where the rope parameters live differs between transformers versions:
 * v5 writes text_config.rope_parameters (rope_theta inside), v4 writes
 * text_config.rope_scaling with text_config.rope_theta beside it. */
static const char *const rope_containers[] = {"text_config.rope_parameters", "text_config.rope_scaling",
                                              "rope_scaling"};

static h3_status_code read_rope(const h3_config *c, h3_text_encoder_config *cfg, h3_status *status) {
    const char *path = h3_config_path(c);
    char key[128];
    const char *where = NULL;
    for (size_t i = 0; i < G_N_ELEMENTS(rope_containers) && !where; i++) {
        snprintf(key, sizeof key, "%s.mrope_section", rope_containers[i]);
        if (h3_config_has(c, key)) where = rope_containers[i];
    }
    if (!where)
        return h3_fail(status, H3_ERR_FORMAT,
                       "%s: no mrope_section in text_config.rope_parameters or text_config.rope_scaling", path);
    int64_t sec[3];
    int n = 0;
    h3_status_code rc = h3_config_int_array(c, key, sec, 3, &n, status);
    if (rc != H3_OK) return rc;
    if (n != 3) return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" has %d entries, want 3 (T, H, W)", path, key, n);
    for (int i = 0; i < 3; i++) {
        if (sec[i] < 0 || sec[i] > 4096)
            return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\"[%d] = %lld is out of range", path, key, i,
                           (long long)sec[i]);
        cfg->mrope_section[i] = (int)sec[i];
    }

    /* Qwen3-VL always interleaves the axes (THWTHW...); a config that says
     * otherwise describes a different model, so refuse it. */
    snprintf(key, sizeof key, "%s.mrope_interleaved", where);
    if (h3_config_has(c, key)) {
        int interleaved = 0;
        if ((rc = h3_config_bool(c, key, &interleaved, status)) != H3_OK) return rc;
        if (!interleaved)
            return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: \"%s\" is false; only interleaved M-RoPE is supported",
                           path, key);
    }
    snprintf(key, sizeof key, "%s.rope_type", where);
    if (h3_config_has(c, key)) {
        const char *type;
        if ((rc = h3_config_string(c, key, &type, status)) != H3_OK) return rc;
        if (strcmp(type, "default") != 0)
            return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: \"%s\" is \"%s\"; only \"default\" is supported", path,
                           key, type);
    }

    snprintf(key, sizeof key, "%s.rope_theta", where);
    if (!h3_config_has(c, key)) snprintf(key, sizeof key, "text_config.rope_theta");
    if (!h3_config_has(c, key))
        return h3_fail(status, H3_ERR_FORMAT, "%s: no rope_theta in %s or text_config", path, where);
    if ((rc = h3_config_double(c, key, &cfg->rope_theta, status)) != H3_OK) return rc;
    if (!(cfg->rope_theta > 1.0 && cfg->rope_theta <= 1e12))
        return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" is %g, outside (1, 1e12]", path, key, cfg->rope_theta);
    return H3_OK;
}

static h3_status_code check_options(const h3_config *c, h3_status *status) {
    const char *path = h3_config_path(c);
    h3_status_code rc;
    if (h3_config_has(c, "text_config.hidden_act")) {
        const char *act;
        if ((rc = h3_config_string(c, "text_config.hidden_act", &act, status)) != H3_OK) return rc;
        if (strcmp(act, "silu") != 0)
            return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: text_config.hidden_act is \"%s\"; only \"silu\"", path,
                           act);
    }
    if (h3_config_has(c, "text_config.attention_bias")) {
        int bias = 0;
        if ((rc = h3_config_bool(c, "text_config.attention_bias", &bias, status)) != H3_OK) return rc;
        if (bias)
            return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: text_config.attention_bias is true; not supported", path);
    }
    return H3_OK;
}

/* The ranges (docs/RELIABILITY.md, "Ranges and files") hold the release
 * (64 layers, D 5120, F 25600, 64/8 heads of 128, vocabulary 151936) with
 * room, and keep every tensor's element count (heads·head_dim·D, vocab·D,
 * F·D) far inside int64 and the widths inside int32. */
static h3_status_code check_dims(const char *path, const h3_text_encoder_config *cfg, h3_status *status) {
    const struct { const char *key; int64_t v, min, max; } dims[] = {
        {"text_config.vocab_size", cfg->vocab_size, 1, 1 << 22},
        {"text_config.hidden_size", cfg->hidden_size, 1, 65536},
        {"text_config.intermediate_size", cfg->intermediate_size, 1, 1 << 20},
        {"text_config.num_hidden_layers", cfg->num_layers, 1, H3_TEXT_ENCODER_MAX_LAYERS},
        {"text_config.num_attention_heads", cfg->num_heads, 1, 1024},
        {"text_config.num_key_value_heads", cfg->num_kv_heads, 1, 1024},
        {"text_config.head_dim", cfg->head_dim, 1, 1024},
        {"text_config.max_position_embeddings", cfg->max_positions, 1, 1 << 24},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(dims); i++) {
        h3_status_code rc = h3_config_check_range(path, dims[i].key, dims[i].v, dims[i].min, dims[i].max, status);
        if (rc != H3_OK) return rc;
    }
    if (cfg->num_heads % cfg->num_kv_heads != 0)
        return h3_fail(status, H3_ERR_FORMAT, "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
                       path, (long long)cfg->num_heads, (long long)cfg->num_kv_heads);
    int64_t sec = (int64_t)cfg->mrope_section[0] + cfg->mrope_section[1] + cfg->mrope_section[2];
    if (2 * sec != cfg->head_dim)
        return h3_fail(status, H3_ERR_FORMAT, "%s: mrope_section [%d, %d, %d] sums to %lld, want head_dim/2 = %lld",
                       path, cfg->mrope_section[0], cfg->mrope_section[1], cfg->mrope_section[2], (long long)sec,
                       (long long)cfg->head_dim / 2);
    if (!(cfg->rms_norm_eps > 0 && cfg->rms_norm_eps < 1))
        return h3_fail(status, H3_ERR_FORMAT, "%s: text_config.rms_norm_eps = %g is out of range", path,
                       cfg->rms_norm_eps);
    return H3_OK;
}

h3_status_code h3_text_encoder_config_load(const char *dir, h3_text_encoder_config *cfg, h3_status *status) {
    memset(cfg, 0, sizeof *cfg);
    if (!g_file_test(dir, G_FILE_TEST_IS_DIR))
        return h3_fail(status, H3_ERR_NOT_FOUND, "%s: text encoder directory does not exist", dir);
    char *path = g_build_filename(dir, "config.json", NULL);
    h3_config *c = NULL;
    h3_status_code rc = h3_config_load(path, &c, status);
    g_free(path);
    if (rc != H3_OK) return rc;

    const struct { const char *key; int64_t *dst; } ints[] = {
        {"text_config.vocab_size", &cfg->vocab_size},
        {"text_config.hidden_size", &cfg->hidden_size},
        {"text_config.intermediate_size", &cfg->intermediate_size},
        {"text_config.num_hidden_layers", &cfg->num_layers},
        {"text_config.num_attention_heads", &cfg->num_heads},
        {"text_config.num_key_value_heads", &cfg->num_kv_heads},
        {"text_config.max_position_embeddings", &cfg->max_positions},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(ints) && rc == H3_OK; i++) rc = h3_config_int(c, ints[i].key, ints[i].dst, status);
    if (rc == H3_OK) rc = h3_config_double(c, "text_config.rms_norm_eps", &cfg->rms_norm_eps, status);
    if (rc == H3_OK && cfg->num_heads > 0) {
        /* transformers' default when head_dim is absent */
        cfg->head_dim = cfg->hidden_size / cfg->num_heads;
        rc = h3_config_int_or(c, "text_config.head_dim", &cfg->head_dim, status);
    }
    if (rc == H3_OK) rc = read_rope(c, cfg, status);
    if (rc == H3_OK) rc = check_options(c, status);
    if (rc == H3_OK) rc = check_dims(h3_config_path(c), cfg, status);
    h3_config_free(c);
    return rc;
}

/* ---- tensor list --------------------------------------------------------------- */

static void role_shape(const h3_text_encoder_config *c, int role, h3_text_encoder_tensor_info *t) {
    int64_t D = c->hidden_size, F = c->intermediate_size, dh = c->head_dim;
    int64_t qw = c->num_heads * dh, kvw = c->num_kv_heads * dh;
    t->ndim = 2;
    switch (role) {
    case W_INPUT_NORM:
    case W_POST_NORM: t->ndim = 1; t->shape[0] = D; break;
    case W_Q_NORM:
    case W_K_NORM: t->ndim = 1; t->shape[0] = dh; break;
    case W_Q: t->shape[0] = qw; t->shape[1] = D; break;
    case W_K:
    case W_V: t->shape[0] = kvw; t->shape[1] = D; break;
    case W_O: t->shape[0] = D; t->shape[1] = qw; break;
    case W_GATE:
    case W_UP: t->shape[0] = F; t->shape[1] = D; break;
    case W_DOWN: t->shape[0] = D; t->shape[1] = F; break;
    }
}

h3_status_code h3_text_encoder_tensor_list(const h3_text_encoder_config *cfg, int tap_layer,
                                           h3_text_encoder_tensor_info **out, int *n, h3_status *status) {
    *out = NULL;
    *n = 0;
    if (tap_layer < 0 || tap_layer > cfg->num_layers)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "text encoder: tap layer %d outside [0, %lld]", tap_layer,
                       (long long)cfg->num_layers);
    int count = 1 + tap_layer * W_PER_LAYER;
    h3_text_encoder_tensor_info *list = calloc((size_t)count, sizeof *list);
    if (!list) return h3_fail(status, H3_ERR_NO_MEMORY, "text encoder: out of host memory");
    snprintf(list[0].name, sizeof list[0].name, PREFIX "embed_tokens.weight");
    list[0].ndim = 2;
    list[0].shape[0] = cfg->vocab_size;
    list[0].shape[1] = cfg->hidden_size;
    for (int l = 0; l < tap_layer; l++)
        for (int r = 0; r < W_PER_LAYER; r++) {
            h3_text_encoder_tensor_info *t = &list[1 + l * W_PER_LAYER + r];
            snprintf(t->name, sizeof t->name, PREFIX "layers.%d.%s", l, role_suffix[r]);
            role_shape(cfg, r, t);
        }
    *out = list;
    *n = count;
    return H3_OK;
}

/* ---- loading ------------------------------------------------------------------- */

/* How each role is split across tensor-parallel ranks. */
static h3_tp_role tp_role(int role) {
    switch (role) {
    case W_Q:
    case W_K:
    case W_V: return H3_TP_HEADS;
    case W_O: return H3_TP_OUT;
    case W_DOWN: return H3_TP_FFN_OUT;
    }
    return H3_TP_REPLICATED;
}

static h3_tensor *layer_slot(layer_weights *lw, int role) {
    switch (role) {
    case W_INPUT_NORM: return &lw->input_norm;
    case W_Q: return &lw->q;
    case W_K: return &lw->k;
    case W_V: return &lw->v;
    case W_O: return &lw->o;
    case W_Q_NORM: return &lw->q_norm;
    case W_K_NORM: return &lw->k_norm;
    case W_POST_NORM: return &lw->post_norm;
    case W_DOWN: return &lw->down;
    }
    return NULL; /* gate and up are fused */
}

/* Stacks gate [F, D] over up [F, D] into one [2F, D] weight so the MLP is a
 * single GEMM whose output rows are [gate | up], the layout h3_op_swiglu
 * takes. The rows are copied in the file's dtype, so nothing is rounded.
 * Under TP each rank keeps the same F/N rows of both halves. */
static h3_status_code load_gate_up(h3_backend *b, const h3_tp *tp, const h3_st_tensor *gate, const h3_st_tensor *up,
                                   h3_tensor *out, h3_status *status) {
    if (gate->dtype != up->dtype)
        return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s' is %s but '%s' is %s; they must match", up->file_path,
                       up->name, h3_st_dtype_name(up->dtype), gate->name, h3_st_dtype_name(gate->dtype));
    if (h3_st_is_dummy(gate)) {
        /* load-format dummy: one dummy tensor of the stacked shape, drawn
         * from gate's generator, sharded like the stacked file tensors */
        h3_st_tensor stacked = *gate;
        stacked.shape[0] = gate->shape[0] + up->shape[0];
        stacked.numel = gate->numel + up->numel;
        stacked.nbytes = gate->nbytes + up->nbytes;
        return h3_tp_weight_load(b, tp, &stacked, H3_TP_FFN_IN, H3_WEIGHT_LINEAR, out, status);
    }
    void *buf = malloc(gate->nbytes + up->nbytes);
    if (!buf) return h3_fail(status, H3_ERR_NO_MEMORY, "%s: tensor '%s': out of host memory", gate->file_path, gate->name);
    if (h3_backend_holds_data(b)) { /* a measuring backend takes the shape alone */
        memcpy(buf, gate->data, gate->nbytes);
        memcpy((char *)buf + gate->nbytes, up->data, up->nbytes);
    }
    h3_st_tensor fused = *gate;
    fused.shape[0] = gate->shape[0] + up->shape[0];
    fused.numel = gate->numel + up->numel;
    fused.nbytes = gate->nbytes + up->nbytes;
    fused.data = buf;
    h3_status_code rc = h3_tp_weight_load(b, tp, &fused, H3_TP_FFN_IN, H3_WEIGHT_LINEAR, out, status);
    free(buf);
    return rc;
}

static h3_status_code load_layer(h3_text_encoder *te, const h3_checkpoint *ck, const h3_text_encoder_tensor_info *info,
                                 layer_weights *lw, h3_status *status) {
    const h3_st_tensor *src[W_PER_LAYER];
    h3_status_code rc;
    for (int r = 0; r < W_PER_LAYER; r++) {
        rc = h3_checkpoint_get(ck, info[r].name, info[r].ndim, info[r].shape, &src[r], status);
        if (rc != H3_OK) return rc;
    }
    for (int r = 0; r < W_PER_LAYER; r++) {
        h3_tensor *slot = layer_slot(lw, r);
        if (!slot) continue;
        /* the projections are the big linears (fp8 under precision=fp8); the norms are not */
        h3_weight_type type = tp_role(r) == H3_TP_REPLICATED ? H3_WEIGHT_DEFAULT : H3_WEIGHT_LINEAR;
        if ((rc = h3_tp_weight_load(te->b, &te->tp, src[r], tp_role(r), type, slot, status)) != H3_OK)
            return rc;
    }
    rc = load_gate_up(te->b, &te->tp, src[W_GATE], src[W_UP], &lw->gate_up, status);
    if (rc != H3_OK || !te->stream) return rc;
    /* memory=stream: the layer leaves the device as soon as it is loaded */
    h3_tensor *list[LAYER_TENSORS];
    layer_tensors(lw, list);
    for (int i = 0; i < LAYER_TENSORS && rc == H3_OK; i++) rc = h3_weight_to_host(te->b, list[i], status);
    return rc;
}

/* The ring for memory=stream, sized for the largest layer. */
static h3_status_code make_ring(h3_text_encoder *te, h3_status *status) {
    size_t most = 0;
    h3_tensor *list[LAYER_TENSORS];
    for (int l = 0; l < te->tap_layer; l++) {
        layer_tensors(&te->layers[l], list);
        size_t n = h3_weight_ring_group_bytes((const h3_tensor *const *)list, LAYER_TENSORS);
        if (n > most) most = n;
    }
    int slots = te->tap_layer < 2 ? 1 : 2;
    h3_status_code rc = te->tap_layer ? h3_weight_ring_create(te->b, slots, most, &te->ring, status) : H3_OK;
    return rc == H3_OK ? rc : h3_status_prefix(status, "text encoder (memory=stream)");
}

/* Layer l's weights where the ops can read them (the forward's pass over
 * the layers, as the DiT's blocks: h3_dit.c): resident, the layer itself;
 * streamed, views into its slot once its copy is done. layer_put, once
 * layer l's ops are queued, releases its slot and queues the copy of the
 * next layer into the slot the layer before freed, behind layer l's ops. */
static int layer_ahead(const h3_text_encoder *te) {
    int slots = h3_weight_ring_slots(te->ring);
    return slots > 1 ? slots - 1 : 1;
}

static h3_status_code layer_load(h3_text_encoder *te, int l, h3_status *status) {
    h3_tensor *list[LAYER_TENSORS];
    layer_tensors(&te->layers[l], list);
    return h3_weight_ring_load(te->ring, l % h3_weight_ring_slots(te->ring), (const h3_tensor *const *)list,
                               LAYER_TENSORS, status);
}

static h3_status_code layer_start(h3_text_encoder *te, h3_status *status) {
    h3_status_code rc = H3_OK;
    for (int l = 0; te->ring && l < te->tap_layer && l < layer_ahead(te) && rc == H3_OK; l++)
        rc = layer_load(te, l, status);
    return rc;
}

static h3_status_code layer_get(h3_text_encoder *te, int l, layer_weights *dev, h3_status *status) {
    *dev = te->layers[l];
    if (!te->ring) return H3_OK;
    h3_tensor *list[LAYER_TENSORS];
    layer_tensors(dev, list);
    return h3_weight_ring_acquire(te->ring, l % h3_weight_ring_slots(te->ring), list, LAYER_TENSORS, status);
}

static h3_status_code layer_put(h3_text_encoder *te, int l, h3_status *status) {
    if (!te->ring) return H3_OK;
    h3_weight_ring_release(te->ring, l % h3_weight_ring_slots(te->ring));
    int next = l + layer_ahead(te);
    return next < te->tap_layer ? layer_load(te, next, status) : h3_backend_check(te->b, status);
}

int h3_text_encoder_is_streamed(const h3_text_encoder *te) { return te->stream; }

/* ---- the vision tower (FL2VA) ------------------------------------------------------ */

#define VISION_PROBE "model.visual.patch_embed.proj.weight"

static h3_status_code load_config_of(const char *dir, h3_config **c, h3_status *status) {
    char *path = g_build_filename(dir, "config.json", NULL);
    h3_status_code rc = h3_config_load(path, c, status);
    g_free(path);
    return rc;
}

/* The top-level token ids that mark a vision block (config.json). */
static h3_status_code read_vision_ids(const h3_config *c, int64_t vocab, h3_text_vision *vis, h3_status *status) {
    const struct { const char *key; int32_t *dst; } ids[] = {
        {"image_token_id", &vis->image_token_id},
        {"video_token_id", &vis->video_token_id},
        {"vision_start_token_id", &vis->vision_start_id},
        {"vision_end_token_id", &vis->vision_end_id},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(ids); i++) {
        int64_t v = 0;
        h3_status_code rc = h3_config_int(c, ids[i].key, &v, status);
        if (rc != H3_OK) return rc;
        if (v < 0 || v >= vocab)
            return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" = %lld is outside the vocabulary [0, %lld)",
                           h3_config_path(c), ids[i].key, (long long)v, (long long)vocab);
        *ids[i].dst = (int32_t)v;
    }
    return H3_OK;
}

/* Loads the tower when the config describes one and the checkpoint holds
 * it; a text-only checkpoint (no model.visual.*) loads without. */
static h3_status_code load_vision(h3_text_encoder *te, const char *dir, const h3_checkpoint *ck, h3_status *status) {
    h3_config *c = NULL;
    h3_status_code rc = load_config_of(dir, &c, status);
    if (rc != H3_OK) return rc;
    h3_vision_config vc;
    if (h3_config_has(c, "vision_config") && h3_checkpoint_find(ck, VISION_PROBE)) {
        rc = read_vision_ids(c, te->cfg.vocab_size, &te->vis, status);
        if (rc == H3_OK) rc = h3_vision_config_read(c, &vc, status);
        if (rc == H3_OK && vc.out_hidden_size != te->cfg.hidden_size)
            rc = h3_fail(status, H3_ERR_FORMAT, "%s: vision_config.out_hidden_size %lld differs from hidden_size %lld",
                         h3_config_path(c), (long long)vc.out_hidden_size, (long long)te->cfg.hidden_size);
        if (rc == H3_OK) rc = h3_vision_load(te->b, &vc, ck, &te->vis.tower, status);
    }
    h3_config_free(c);
    return rc;
}

static h3_status_code dummy_add_vision(const char *dir, h3_checkpoint *ck, h3_status *status) {
    h3_config *c = NULL;
    h3_status_code rc = load_config_of(dir, &c, status);
    h3_vision_config vc;
    if (rc == H3_OK && h3_config_has(c, "vision_config")) {
        rc = h3_vision_config_read(c, &vc, status);
        if (rc == H3_OK) rc = h3_vision_dummy_add(&vc, ck, status);
    }
    h3_config_free(c);
    return rc;
}

/* torch's fp32 inv_freq for theta 5e6 at exponents 2j/128, as torch 2.11
 * computes it on the CPU (docs/spec/h3-conditioner.md §3.3). glibc's powf differs by one ulp at
 * j = 19, so the table wins wherever an exponent falls on its grid. */
static const uint32_t inv_freq_5e6[64] = {
    0x3f800000, 0x3f492c28, 0x3f1e165d, 0x3ef875a7, 0x3ec33f3a, 0x3e996e52, 0x3e712429, 0x3e3d7efc,
    0x3e14e963, 0x3dea09db, 0x3db7ea1a, 0x3d908687, 0x3d63251b, 0x3d327f50, 0x3d0c44bf, 0x3cdc7456,
    0x3cad3d5e, 0x3c88230f, 0x3c55f605, 0x3c282311, 0x3c042088, 0x3bcfa8a9, 0x3ba32f3e, 0x3b803c3d,
    0x3b498ad3, 0x3b1e60c3, 0x3af8ea93, 0x3ac39b1c, 0x3a99b686, 0x3a7195a5, 0x3a3dd829, 0x3a152f76,
    0x39ea77ff, 0x39b840a8, 0x3990ca8b, 0x39639000, 0x3932d34f, 0x390c86c1, 0x38dcdc14, 0x38ad8ee4,
    0x38886320, 0x38565ab5, 0x38287230, 0x38045eb6, 0x37d00a62, 0x37a37c09, 0x37807896, 0x3749e9ab,
    0x371eab4b, 0x36f95fb6, 0x36c3f72a, 0x3699fedc, 0x36720755, 0x363e3180, 0x361575ab, 0x35eae655,
    0x35b8975d, 0x35910eae, 0x3563fb18, 0x35332777, 0x350cc8e3, 0x34dd4405, 0x34ade091, 0x3488a34f,
};

/* inv_freq[j] = 1 / theta^(2j/dim), in fp32 the way torch evaluates it. */
static float inv_freq_at(double theta, int j, int dim) {
    float e = (float)(2 * j) / (float)dim;
    float k = e * 64.0f;
    if (theta == 5e6 && k == floorf(k) && k < 64.0f) {
        float v;
        memcpy(&v, &inv_freq_5e6[(int)k], sizeof v);
        return v;
    }
    return 1.0f / powf((float)theta, e);
}

static void free_lm_weights(h3_text_encoder *te);

void h3_text_encoder_free(h3_text_encoder *te) {
    if (!te) return;
    free_lm_weights(te);
    free(te->layers);
    free(te->inv_freq);
    h3_vision_free(te->vis.tower);
    free(te);
}

/* The language model's weights (embedding, tapped layers); the vision
 * tower's are not among them. */
static void free_lm_weights(h3_text_encoder *te) {
    h3_weight_ring_destroy(te->ring); /* its slots are device memory the release gives back too */
    te->ring = NULL;
    h3_weight_free(te->b, &te->embed);
    if (te->layers)
        for (int l = 0; l < te->tap_layer; l++) {
            layer_weights *lw = &te->layers[l];
            for (int r = 0; r < W_PER_LAYER; r++) h3_weight_free(te->b, layer_slot(lw, r));
            h3_weight_free(te->b, &lw->gate_up);
        }
}

/* weights: the checkpoint to read, NULL: dir's files. vision: the tower too. */
static h3_status_code load_weights_of(h3_text_encoder *te, const char *dir, const h3_checkpoint *weights, int vision,
                                      h3_status *status);

static h3_status_code load_weights(h3_text_encoder *te, const char *dir, const h3_checkpoint *weights,
                                   h3_status *status) {
    return load_weights_of(te, dir, weights, 1, status);
}

void h3_text_encoder_drop_weights(h3_text_encoder *te) {
    if (te) free_lm_weights(te);
}

int h3_text_encoder_has_weights(const h3_text_encoder *te) { return te && te->embed.data != NULL; }

h3_status_code h3_text_encoder_reload_weights(h3_text_encoder *te, const char *dir, const h3_checkpoint *weights,
                                              h3_status *status) {
    if (h3_text_encoder_has_weights(te)) return H3_OK;
    h3_status_code rc = load_weights_of(te, dir, weights, 0, status);
    if (rc != H3_OK) free_lm_weights(te); /* all or nothing */
    return rc;
}

static h3_status_code load_weights_of(h3_text_encoder *te, const char *dir, const h3_checkpoint *weights, int vision,
                                      h3_status *status) {
    h3_text_encoder_tensor_info *info = NULL;
    int n = 0;
    h3_status_code rc = h3_text_encoder_tensor_list(&te->cfg, te->tap_layer, &info, &n, status);
    if (rc != H3_OK) return rc;
    h3_checkpoint *own = NULL;
    if (!weights) rc = h3_checkpoint_open(dir, &own, status);
    const h3_checkpoint *ck = weights ? weights : own;
    if (rc == H3_OK) {
        const h3_st_tensor *t;
        rc = h3_checkpoint_get(ck, info[0].name, info[0].ndim, info[0].shape, &t, status);
        if (rc == H3_OK) rc = h3_weight_load(te->b, t, H3_WEIGHT_DEFAULT, &te->embed, status);
    }
    for (int l = 0; l < te->tap_layer && rc == H3_OK; l++)
        rc = load_layer(te, ck, &info[1 + l * W_PER_LAYER], &te->layers[l], status);
    if (rc == H3_OK && te->stream) rc = make_ring(te, status);
    if (rc == H3_OK && vision) rc = load_vision(te, dir, ck, status);
    h3_checkpoint_close(own);
    free(info);
    return rc;
}

h3_status_code h3_text_encoder_dummy_checkpoint(const char *dir, int tap_layer, uint64_t seed, h3_checkpoint **out,
                                                h3_status *status) {
    *out = NULL;
    h3_text_encoder_config cfg;
    h3_text_encoder_tensor_info *info = NULL;
    int n = 0;
    h3_status_code rc = h3_text_encoder_config_load(dir, &cfg, status);
    if (rc == H3_OK) rc = h3_text_encoder_tensor_list(&cfg, tap_layer, &info, &n, status);
    if (rc != H3_OK) return rc;
    char *label = g_strdup_printf("%s (load-format dummy)", dir);
    h3_checkpoint *ck = NULL;
    rc = h3_checkpoint_dummy_new(label, seed, &ck, status);
    g_free(label);
    /* The embedding in ±1; a matrix [N, K] in ±sqrt(3/K), unit variance out
     * for unit variance in (the DiT's rule); RMSNorm weights in [0.8, 1.2]. */
    for (int i = 0; i < n && rc == H3_OK; i++) {
        float lo = 0.8f, hi = 1.2f;
        if (i == 0) lo = -1.0f, hi = 1.0f;
        else if (info[i].ndim == 2) hi = sqrtf(3.0f / (float)info[i].shape[1]), lo = -hi;
        rc = h3_checkpoint_dummy_add(ck, info[i].name, H3_ST_BF16, info[i].ndim, info[i].shape, lo, hi, status);
    }
    free(info);
    if (rc == H3_OK) rc = dummy_add_vision(dir, ck, status);
    if (rc != H3_OK) {
        h3_checkpoint_close(ck);
        return rc;
    }
    *out = ck;
    return H3_OK;
}

/* The rank's share of the heads and of the FFN; all must split evenly. */
static h3_status_code split_for_tp(h3_text_encoder *te, const char *dir, h3_status *status) {
    const h3_text_encoder_config *c = &te->cfg;
    int n = te->tp.size;
    if (n < 1 || c->num_heads % n || c->num_kv_heads % n || c->intermediate_size % n)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "%s: %lld query heads, %lld key-value heads and FFN width %lld do not split over %d "
                       "tensor-parallel ranks",
                       dir, (long long)c->num_heads, (long long)c->num_kv_heads, (long long)c->intermediate_size, n);
    te->heads = (int)(c->num_heads / n);
    te->kv_heads = (int)(c->num_kv_heads / n);
    te->ffn = c->intermediate_size / n;
    return H3_OK;
}

h3_status_code h3_text_encoder_load(h3_backend *b, const char *dir, int tap_layer, h3_text_encoder **out,
                                    h3_status *status) {
    h3_tp single = H3_TP_SINGLE;
    return h3_text_encoder_load_tp(b, dir, tap_layer, &single, out, status);
}

h3_status_code h3_text_encoder_load_tp(h3_backend *b, const char *dir, int tap_layer, const h3_tp *tp,
                                       h3_text_encoder **out, h3_status *status) {
    return h3_text_encoder_load_from(b, dir, NULL, tap_layer, tp, out, status);
}

static h3_status_code load_from(h3_backend *b, const char *dir, const h3_checkpoint *weights, int tap_layer,
                                const h3_tp *tp, int stream, h3_text_encoder **out, h3_status *status);

h3_status_code h3_text_encoder_load_from(h3_backend *b, const char *dir, const h3_checkpoint *weights, int tap_layer,
                                         const h3_tp *tp, h3_text_encoder **out, h3_status *status) {
    return load_from(b, dir, weights, tap_layer, tp, 0, out, status);
}

h3_status_code h3_text_encoder_load_stream(h3_backend *b, const char *dir, const h3_checkpoint *weights, int tap_layer,
                                           const h3_tp *tp, h3_text_encoder **out, h3_status *status) {
    return load_from(b, dir, weights, tap_layer, tp, 1, out, status);
}

static h3_status_code load_from(h3_backend *b, const char *dir, const h3_checkpoint *weights, int tap_layer,
                                const h3_tp *tp, int stream, h3_text_encoder **out, h3_status *status) {
    *out = NULL;
    h3_tp single = H3_TP_SINGLE;
    if (!tp) tp = &single;
    h3_text_encoder *te = calloc(1, sizeof *te);
    if (!te) return h3_fail(status, H3_ERR_NO_MEMORY, "text encoder: out of host memory");
    te->b = b;
    te->tp = *tp;
    te->stream = stream;
    h3_status_code rc = h3_text_encoder_config_load(dir, &te->cfg, status);
    if (rc == H3_OK) rc = split_for_tp(te, dir, status);
    if (rc == H3_OK && (tap_layer < 0 || tap_layer > te->cfg.num_layers))
        rc = h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                     "%s: tap layer %d is outside [0, %lld] (text_config.num_hidden_layers = %lld)", dir, tap_layer,
                     (long long)te->cfg.num_layers, (long long)te->cfg.num_layers);
    if (rc == H3_OK) {
        te->layers = calloc((size_t)(tap_layer ? tap_layer : 1), sizeof *te->layers);
        te->inv_freq = malloc((size_t)(te->cfg.head_dim / 2) * sizeof *te->inv_freq);
        if (!te->layers || !te->inv_freq) rc = h3_fail(status, H3_ERR_NO_MEMORY, "text encoder: out of host memory");
        te->tap_layer = tap_layer;
    }
    if (rc == H3_OK) {
        for (int j = 0; j < te->cfg.head_dim / 2; j++)
            te->inv_freq[j] = inv_freq_at(te->cfg.rope_theta, j, (int)te->cfg.head_dim);
        rc = load_weights(te, dir, weights, status);
    }
    if (rc != H3_OK) {
        h3_text_encoder_free(te);
        return rc;
    }
    *out = te;
    return H3_OK;
}

int h3_text_encoder_hidden_size(const h3_text_encoder *te) { return (int)te->cfg.hidden_size; }
int h3_text_encoder_tap_layer(const h3_text_encoder *te) { return te->tap_layer; }
const h3_text_encoder_config *h3_text_encoder_get_config(const h3_text_encoder *te) { return &te->cfg; }

/* ---- forward ------------------------------------------------------------------- */

/* Which position axis (0 T, 1 H, 2 W) frequency slot j reads under
 * interleaved M-RoPE (transformers apply_interleaved_mrope): H takes slots
 * 1, 4, 7, ... below 3*section[1], W takes 2, 5, 8, ... below 3*section[2],
 * T everything else, including the T-only tail. */
static int mrope_axis(const int section[3], int j) {
    if (j % 3 == 1 && j < 3 * section[1]) return 1;
    if (j % 3 == 2 && j < 3 * section[2]) return 2;
    return 0;
}

/* cos/sin [n, head_dim] for positions pos[axis][i]: angle = pos·inv_freq in
 * fp32, duplicated over both halves (emb = cat(freqs, freqs)). */
static void rope_tables(const h3_text_encoder *te, const int32_t *const pos[3], int n, float *cos_t, float *sin_t) {
    int dh = (int)te->cfg.head_dim, half = dh / 2;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < half; j++) {
            float angle = (float)pos[mrope_axis(te->cfg.mrope_section, j)][i] * te->inv_freq[j];
            float c = cosf(angle), s = sinf(angle);
            cos_t[(size_t)i * dh + j] = cos_t[(size_t)i * dh + j + half] = c;
            sin_t[(size_t)i * dh + j] = sin_t[(size_t)i * dh + j + half] = s;
        }
}

/* One decoder layer on the residual stream x [n, D], in place. */
static void layer_forward(h3_text_encoder *te, const layer_weights *lw, h3_tensor *x, const h3_tensor *cos_t,
                          const h3_tensor *sin_t) {
    h3_backend *b = te->b;
    const h3_text_encoder_config *c = &te->cfg;
    h3_dtype dt = h3_backend_compute_dtype(b);
    int64_t n = h3_tensor_rows(x), D = c->hidden_size, F = te->ffn;
    int H = te->heads, G = te->kv_heads, dh = (int)c->head_dim; /* this rank's share */
    float eps = (float)c->rms_norm_eps;
    size_t mark = h3_arena_mark(b);

    h3_tensor h = h3_new_2d(b, dt, n, D);
    h3_tensor q = h3_new_2d(b, dt, n, (int64_t)H * dh);
    h3_tensor k = h3_new_2d(b, dt, n, (int64_t)G * dh);
    h3_tensor v = h3_new_2d(b, dt, n, (int64_t)G * dh);
    h3_tensor a = h3_new_2d(b, dt, n, (int64_t)H * dh);
    h3_op_rms_norm(b, &h, x, &lw->input_norm, D, eps);
    h3_op_linear(b, &q, &h, &lw->q, NULL);
    h3_op_linear(b, &k, &h, &lw->k, NULL);
    h3_op_linear(b, &v, &h, &lw->v, NULL);
    h3_op_rms_norm(b, &q, &q, &lw->q_norm, dh, eps); /* per head, before RoPE */
    h3_op_rms_norm(b, &k, &k, &lw->k_norm, dh, eps);
    h3_op_rope(b, &q, cos_t, sin_t, H, dh, dh);
    h3_op_rope(b, &k, cos_t, sin_t, G, dh, dh);
    h3_op_attention(b, &a, &q, &k, &v, H, G, dh, 1, (float)(1.0 / sqrt((double)dh)));
    h3_tp_linear_row_parallel(&te->tp, b, &h, &a, &lw->o, NULL);
    h3_op_add(b, x, x, &h);

    h3_tensor u = h3_new_2d(b, dt, n, 2 * F);
    h3_tensor m = h3_new_2d(b, dt, n, F);
    h3_op_rms_norm(b, &h, x, &lw->post_norm, D, eps);
    h3_op_linear(b, &u, &h, &lw->gate_up, NULL);
    h3_op_swiglu(b, &m, &u, 0); /* up ⊙ silu(gate) */
    h3_tp_linear_row_parallel(&te->tp, b, &h, &m, &lw->down, NULL);
    h3_op_add(b, x, x, &h);
    h3_arena_reset(b, mark);
}

static h3_status_code check_inputs(const h3_text_encoder *te, const int32_t *ids, int n, const h3_tensor *out,
                                   h3_status *status) {
    const h3_text_encoder_config *c = &te->cfg;
    if (n <= 0 || n > c->max_positions)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "text encoder: %d tokens; want 1..%lld (max_position_embeddings)",
                       n, (long long)c->max_positions);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "text encoder: token %d (position %d) is outside the vocabulary [0, %lld)",
                           ids[i], i, (long long)c->vocab_size);
    if (!out || !out->data || out->dtype != h3_backend_compute_dtype(te->b) || h3_tensor_rows(out) != n ||
        h3_tensor_cols(out) != c->hidden_size)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "text encoder: output must be a %s [%d, %lld] tensor",
                       h3_dtype_name(h3_backend_compute_dtype(te->b)), n, (long long)c->hidden_size);
    return H3_OK;
}

/* The image rows of an FL2VA forward: the merger outputs that replace their
 * embeddings and the DeepStack features added after the first layers. */
typedef struct vision_rows {
    const h3_tensor *rows;      /* I32 [T]: the <|image_pad|> positions, in order */
    const h3_tensor *embeds;    /* [T, D] */
    const h3_tensor *deepstack; /* n_deepstack x [T, D] */
    int n_deepstack;
} vision_rows;

/* x[rows] += feature (transformers _deepstack_process, in the compute dtype). */
static void add_at_rows(h3_backend *b, h3_tensor *x, const vision_rows *vr, const h3_tensor *feature) {
    size_t mark = h3_arena_mark(b);
    h3_tensor t = h3_new_2d(b, x->dtype, h3_tensor_rows(feature), h3_tensor_cols(x));
    h3_op_gather_rows(b, &t, x, vr->rows);
    h3_op_add(b, &t, &t, feature);
    h3_op_scatter_rows(b, x, &t, vr->rows);
    h3_arena_reset(b, mark);
}

/* Embeds ids and runs the loaded layers with the given M-RoPE positions;
 * vr (NULL: text only) places the vision features. */
static h3_status_code forward_positions(h3_text_encoder *te, const int32_t *ids, const int32_t *const pos[3], int n,
                                        const vision_rows *vr, h3_tensor *out, h3_status *status) {
    h3_backend *b = te->b;
    int64_t dh = te->cfg.head_dim;
    h3_status_code rc = h3_backend_check(b, status);
    if (rc != H3_OK) return rc;
    float *host = malloc((size_t)n * (size_t)dh * 2 * sizeof *host);
    if (!host) return h3_fail(status, H3_ERR_NO_MEMORY, "text encoder: out of host memory for %d rope rows", n);
    rope_tables(te, pos, n, host, host + (size_t)n * dh);

    size_t mark = h3_arena_mark(b);
    h3_tensor idx = h3_new_1d(b, H3_I32, n);
    h3_tensor cos_t = h3_new_2d(b, H3_F32, n, dh);
    h3_tensor sin_t = h3_new_2d(b, H3_F32, n, dh);
    rc = h3_backend_check(b, status);
    if (rc == H3_OK) rc = h3_tensor_upload_i32(b, &idx, ids, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &cos_t, host, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &sin_t, host + (size_t)n * dh, status);
    free(host);
    h3_tensor x = h3_tensor_2d(out, n, te->cfg.hidden_size);
    if (rc == H3_OK) {
        h3_op_gather_rows(b, &x, &te->embed, &idx);
        if (vr) h3_op_scatter_rows(b, &x, vr->embeds, vr->rows);
        rc = h3_backend_check(b, status);
    }
    if (rc == H3_OK) rc = layer_start(te, status);
    for (int l = 0; l < te->tap_layer && rc == H3_OK; l++) {
        layer_weights lw;
        if ((rc = layer_get(te, l, &lw, status)) != H3_OK) break;
        layer_forward(te, &lw, &x, &cos_t, &sin_t);
        if ((rc = layer_put(te, l, status)) != H3_OK) break;
        /* hidden_states[l + 1] is layer l's output as transformers records
         * it, before the DeepStack add; the add feeds the next layer */
        if (vr && l < vr->n_deepstack && l + 1 < te->tap_layer) add_at_rows(b, &x, vr, &vr->deepstack[l]);
        if ((rc = h3_backend_check(b, status)) != H3_OK) h3_status_prefix(status, "text encoder layer %d", l);
    }
    h3_arena_reset(b, mark);
    return rc;
}

h3_status_code h3_text_encoder_forward(h3_text_encoder *te, const int32_t *ids, int n, h3_tensor *out,
                                       h3_status *status) {
    h3_status_code rc = check_inputs(te, ids, n, out, status);
    if (rc != H3_OK) return rc;
    int32_t *arange = malloc((size_t)n * sizeof *arange);
    if (!arange) return h3_fail(status, H3_ERR_NO_MEMORY, "text encoder: out of host memory");
    for (int i = 0; i < n; i++) arange[i] = i;
    /* Text only: get_rope_index gives the same arange on all three axes. */
    const int32_t *pos[3] = {arange, arange, arange};
    rc = forward_positions(te, ids, pos, n, NULL, out, status);
    free(arange);
    return rc;
}

/* ---- FL2VA: the presentation and its forward ------------------------------------- */

int h3_text_encoder_has_vision(const h3_text_encoder *te) { return te->vis.tower != NULL; }

void h3_text_presentation_clear(h3_text_presentation *p) {
    if (!p) return;
    free(p->ids);
    free(p->tags);
    free(p->mm_types);
    free(p->positions);
    free(p->pixel_values);
    memset(p, 0, sizeof *p);
}

/* A growing token list with its tags. */
typedef struct token_list {
    int32_t *ids, *tags;
    size_t n, cap;
} token_list;

static int token_list_add(token_list *t, const int32_t *ids, size_t n, int32_t tag) {
    if (t->n + n > t->cap) {
        size_t cap = (t->n + n) * 2 + 16;
        int32_t *a = realloc(t->ids, cap * sizeof *a);
        if (a) t->ids = a;
        int32_t *b = realloc(t->tags, cap * sizeof *b);
        if (b) t->tags = b;
        if (!a || !b) return 0;
        t->cap = cap;
    }
    for (size_t i = 0; i < n; i++) {
        t->ids[t->n + i] = ids[i];
        t->tags[t->n + i] = tag;
    }
    t->n += n;
    return 1;
}

static int token_list_repeat(token_list *t, int32_t id, int64_t count, int32_t tag) {
    for (int64_t i = 0; i < count; i++)
        if (!token_list_add(t, &id, 1, tag)) return 0;
    return 1;
}

/* tok(text) appended with tag. */
static h3_status_code add_text(token_list *t, const h3_tokenizer *tok, const char *text, int32_t tag,
                               h3_status *status) {
    int32_t *ids = NULL;
    size_t n = 0;
    h3_status_code rc = h3_tokenizer_encode(tok, text, &ids, &n, status);
    if (rc == H3_OK && !token_list_add(t, ids, n, tag))
        rc = h3_fail(status, H3_ERR_NO_MEMORY, "text encoder: out of host memory for the presentation");
    free(ids);
    return rc;
}

static const char *const vision_specials[] = {"<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                                              "<|image_pad|>", "<|video_pad|>"};

/* The prompt alone, tokenized, may hold no vision special token: a keyframe
 * is passed as an image, never as tokens. */
static h3_status_code check_prompt_tokens(const h3_text_encoder *te, const h3_tokenizer *tok, const int32_t *ids,
                                          size_t n, h3_status *status) {
    const h3_text_vision *v = &te->vis;
    for (size_t i = 0; i < n; i++) {
        const char *name = NULL;
        for (size_t k = 0; k < G_N_ELEMENTS(vision_specials) && !name; k++)
            if (ids[i] == h3_tokenizer_token_to_id(tok, vision_specials[k])) name = vision_specials[k];
        if (!name && v->tower && (ids[i] == v->image_token_id || ids[i] == v->video_token_id ||
                                  ids[i] == v->vision_start_id || ids[i] == v->vision_end_id))
            name = h3_tokenizer_id_to_token(tok, ids[i]);
        if (name)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                           "prompt: contains the vision special token %s (id %d, token %zu); keyframes are passed as "
                           "images, not as tokens, so remove it from the prompt",
                           name, ids[i], i);
    }
    return H3_OK;
}

/* The special ids of a vision block, from the tokenizer (as diffusers takes
 * them), which must agree with the checkpoint's config. */
static h3_status_code block_ids(const h3_text_encoder *te, const h3_tokenizer *tok, int32_t ids[3],
                                h3_status *status) {
    const char *names[3] = {"<|vision_start|>", "<|image_pad|>", "<|vision_end|>"};
    const int32_t want[3] = {te->vis.vision_start_id, te->vis.image_token_id, te->vis.vision_end_id};
    for (int i = 0; i < 3; i++) {
        ids[i] = h3_tokenizer_token_to_id(tok, names[i]);
        if (ids[i] != want[i])
            return h3_fail(status, H3_ERR_FORMAT,
                           "tokenizer: %s is id %d but the text encoder's config says %d; the tokenizer and the "
                           "checkpoint do not belong together",
                           names[i], ids[i], want[i]);
    }
    return H3_OK;
}

/* Each keyframe through the processor, its pixel rows stacked. */
static h3_status_code process_keyframes(const h3_text_encoder *te, const h3_image_processor_config *proc,
                                        const h3_rgb_image *kf, int n, h3_text_presentation *p, h3_status *status) {
    float *pix[H3_TEXT_MAX_KEYFRAMES] = {0};
    h3_status_code rc = H3_OK;
    int64_t rows = 0, cols = (int64_t)3 * proc->temporal_patch_size * proc->patch_size * proc->patch_size;
    for (int i = 0; i < n && rc == H3_OK; i++) {
        rc = h3_image_process(proc, &kf[i], &pix[i], p->grid_thw[i], status);
        if (rc != H3_OK) h3_status_prefix(status, "keyframe %d of %d", i + 1, n);
        else if (h3_vision_tokens(te->vis.tower, p->grid_thw[i]) < 0)
            rc = h3_fail(status, H3_ERR_INVALID_ARGUMENT, "keyframe %d: grid [%lld, %lld, %lld] does not fit the tower", i,
                         (long long)p->grid_thw[i][0], (long long)p->grid_thw[i][1], (long long)p->grid_thw[i][2]);
        else rows += p->grid_thw[i][0] * p->grid_thw[i][1] * p->grid_thw[i][2];
    }
    const h3_vision_config *vc = h3_vision_get_config(te->vis.tower);
    if (rc == H3_OK && cols != vc->in_channels * vc->temporal_patch_size * vc->patch_size * vc->patch_size)
        rc = h3_fail(status, H3_ERR_FORMAT, "image processor: %lld values per patch, the vision tower takes %lld",
                     (long long)cols, (long long)(vc->in_channels * vc->temporal_patch_size * vc->patch_size * vc->patch_size));
    if (rc == H3_OK && !(p->pixel_values = malloc((size_t)(rows * cols) * sizeof(float))))
        rc = h3_fail(status, H3_ERR_NO_MEMORY, "keyframes: no host memory for %lld pixel rows", (long long)rows);
    for (int i = 0, r = 0; i < n && rc == H3_OK; i++) {
        int64_t ri = p->grid_thw[i][0] * p->grid_thw[i][1] * p->grid_thw[i][2];
        memcpy(p->pixel_values + (size_t)r * cols, pix[i], (size_t)(ri * cols) * sizeof(float));
        r += (int)ri;
    }
    for (int i = 0; i < n; i++) free(pix[i]);
    p->n_images = rc == H3_OK ? n : 0;
    p->pixel_rows = rows;
    p->pixel_cols = cols;
    return rc;
}

/* get_rope_index: text runs count up one by one; an image block of merged
 * grid (t, h', w') starting where the next text position would be, s, gets
 * (s + t, s + r, s + c) in raster order, and the text after it resumes at
 * s + max(t, h', w'). */
static void rope_positions(const h3_text_encoder *te, h3_text_presentation *p) {
    int32_t *T = p->positions, *Hp = T + p->n, *Wp = Hp + p->n;
    int64_t next = 0, m = te->vis.tower ? h3_vision_get_config(te->vis.tower)->spatial_merge_size : 1;
    int img = 0;
    for (int i = 0; i < p->n;) {
        if (p->mm_types[i] != 1 || img >= p->n_images) {
            T[i] = Hp[i] = Wp[i] = (int32_t)next++;
            i++;
            continue;
        }
        int64_t gt = p->grid_thw[img][0], gh = p->grid_thw[img][1] / m, gw = p->grid_thw[img][2] / m, s = next;
        for (int64_t t = 0; t < gt; t++)
            for (int64_t r = 0; r < gh; r++)
                for (int64_t c = 0; c < gw; c++, i++) {
                    T[i] = (int32_t)(s + t);
                    Hp[i] = (int32_t)(s + r);
                    Wp[i] = (int32_t)(s + c);
                }
        int64_t span = gt > gh ? gt : gh;
        next = s + (span > gw ? span : gw);
        img++;
    }
}

/* The token list with a label and a vision block per image and a label per
 * audio clip, in the order `kinds` gives (NULL: the images alone), then the
 * prompt. */
static h3_status_code build_tokens(const h3_text_encoder *te, const h3_tokenizer *tok, const char *prompt,
                                   const h3_text_reference_kind *kinds, int n_kinds, h3_text_presentation *p,
                                   token_list *t, h3_status *status) {
    int32_t block[3];
    h3_status_code rc = p->n_images ? block_ids(te, tok, block, status) : H3_OK;
    int64_t m = p->n_images ? h3_vision_get_config(te->vis.tower)->spatial_merge_size : 1;
    int n_segments = kinds ? n_kinds : p->n_images, audio = 0;
    for (int s = 0, i = 0; s < n_segments && rc == H3_OK; s++) {
        char label[32];
        if (kinds && kinds[s] == H3_TEXT_REFERENCE_AUDIO) {
            snprintf(label, sizeof label, "<Audio %d>: ", ++audio);
            rc = add_text(t, tok, label, H3_TEXT_TAG_TEXT, status);
            continue;
        }
        snprintf(label, sizeof label, "<Picture %d>: ", i + 1);
        int64_t pads = p->grid_thw[i][0] * p->grid_thw[i][1] * p->grid_thw[i][2] / (m * m);
        rc = add_text(t, tok, label, H3_TEXT_TAG_TEXT, status);
        if (rc == H3_OK && !(token_list_add(t, &block[0], 1, H3_TEXT_TAG_VISION) &&
                             token_list_repeat(t, block[1], pads, H3_TEXT_TAG_VISION) &&
                             token_list_add(t, &block[2], 1, H3_TEXT_TAG_VISION)))
            rc = h3_fail(status, H3_ERR_NO_MEMORY, "text encoder: out of host memory for the presentation");
        i++;
    }
    size_t before = t->n;
    if (rc == H3_OK) rc = add_text(t, tok, prompt, H3_TEXT_TAG_TEXT, status);
    if (rc == H3_OK) rc = check_prompt_tokens(te, tok, t->ids + before, t->n - before, status);
    if (rc == H3_OK && t->n == 0)
        rc = h3_fail(status, H3_ERR_INVALID_ARGUMENT, "prompt: produced no tokens (an empty prompt needs a keyframe)");
    if (rc == H3_OK && (int64_t)t->n > te->cfg.max_positions)
        rc = h3_fail(status, H3_ERR_INVALID_ARGUMENT, "prompt: the presentation has %zu tokens, over %lld", t->n,
                     (long long)te->cfg.max_positions);
    return rc;
}

/* mm_token_type_ids and positions of the finished token list. */
static h3_status_code finish_rows(const h3_text_encoder *te, h3_text_presentation *p, h3_status *status) {
    p->mm_types = malloc((size_t)p->n * sizeof *p->mm_types);
    p->positions = malloc((size_t)p->n * 3 * sizeof *p->positions);
    if (!p->mm_types || !p->positions)
        return h3_fail(status, H3_ERR_NO_MEMORY, "text encoder: out of host memory for the presentation");
    for (int i = 0; i < p->n; i++) {
        int32_t id = p->ids[i];
        p->mm_types[i] = te->vis.tower && id == te->vis.image_token_id ? 1
                       : te->vis.tower && id == te->vis.video_token_id ? 2
                                                                       : 0;
    }
    rope_positions(te, p);
    return H3_OK;
}

static h3_status_code presentation_build(const h3_text_encoder *te, const h3_tokenizer *tok,
                                         const h3_image_processor_config *proc, const char *prompt,
                                         const h3_rgb_image *keyframes, int n_keyframes,
                                         const h3_text_reference_kind *kinds, int n_kinds, h3_text_presentation *out,
                                         h3_status *status) {
    memset(out, 0, sizeof *out);
    if (!prompt) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "prompt: missing");
    if (n_keyframes < 0 || n_keyframes > H3_TEXT_MAX_KEYFRAMES || (n_keyframes && (!keyframes || !proc)))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "text encoder: %d keyframes; want 0..%d, with pixels and a "
                       "processor config", n_keyframes, H3_TEXT_MAX_KEYFRAMES);
    if (n_keyframes && !te->vis.tower)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "keyframes need a vision tower, and this text encoder checkpoint has none (no vision_config or "
                       "no model.visual.* tensors)");
    h3_status_code rc = n_keyframes ? process_keyframes(te, proc, keyframes, n_keyframes, out, status) : H3_OK;
    token_list t = {0};
    if (rc == H3_OK) rc = build_tokens(te, tok, prompt, kinds, n_kinds, out, &t, status);
    out->ids = t.ids;
    out->tags = t.tags;
    out->n = (int)t.n;
    if (rc == H3_OK) rc = finish_rows(te, out, status);
    if (rc != H3_OK) h3_text_presentation_clear(out);
    return rc;
}

h3_status_code h3_text_presentation_build(const h3_text_encoder *te, const h3_tokenizer *tok,
                                          const h3_image_processor_config *proc, const char *prompt,
                                          const h3_rgb_image *keyframes, int n_keyframes, h3_text_presentation *out,
                                          h3_status *status) {
    return presentation_build(te, tok, proc, prompt, keyframes, n_keyframes, NULL, 0, out, status);
}

h3_status_code h3_text_presentation_build_references(const h3_text_encoder *te, const h3_tokenizer *tok,
                                                     const h3_image_processor_config *proc, const char *prompt,
                                                     const h3_text_reference_kind *kinds, int n,
                                                     const h3_rgb_image *images, h3_text_presentation *out,
                                                     h3_status *status) {
    memset(out, 0, sizeof *out);
    int n_images = 0;
    for (int i = 0; i < n; i++) {
        if (kinds[i] != H3_TEXT_REFERENCE_IMAGE && kinds[i] != H3_TEXT_REFERENCE_AUDIO)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "text encoder: reference %d has kind %d", i + 1,
                           (int)kinds[i]);
        n_images += kinds[i] == H3_TEXT_REFERENCE_IMAGE;
    }
    return presentation_build(te, tok, proc, prompt, images, n_images, kinds, n, out, status);
}

/* The <|image_pad|> rows, which must be as many as the images' tokens. */
static h3_status_code image_rows(const h3_text_encoder *te, const h3_text_presentation *p, int32_t **rows, int *n,
                                 h3_status *status) {
    int64_t want = 0;
    int count = 0;
    for (int i = 0; i < p->n_images; i++) want += h3_vision_tokens(te->vis.tower, p->grid_thw[i]);
    for (int i = 0; i < p->n; i++) count += p->ids[i] == te->vis.image_token_id;
    if (count != want)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "text encoder: %d image tokens in the presentation but the %d images give %lld features", count,
                       p->n_images, (long long)want);
    *rows = malloc((size_t)(count > 0 ? count : 1) * sizeof **rows);
    if (!*rows) return h3_fail(status, H3_ERR_NO_MEMORY, "text encoder: out of host memory");
    *n = 0;
    for (int i = 0; i < p->n; i++)
        if (p->ids[i] == te->vis.image_token_id) (*rows)[(*n)++] = i;
    return H3_OK;
}

/* The vision features of p's images and the rows they go to, in the arena. */
static h3_status_code run_vision(h3_text_encoder *te, const h3_text_presentation *p, h3_tensor *rows,
                                 h3_tensor *embeds, h3_tensor *deepstack, h3_status *status) {
    h3_backend *b = te->b;
    const h3_vision_config *vc = h3_vision_get_config(te->vis.tower);
    int32_t *host = NULL;
    int n = 0;
    h3_status_code rc = image_rows(te, p, &host, &n, status);
    if (rc != H3_OK) return rc;
    h3_dtype dt = h3_backend_compute_dtype(b);
    *rows = h3_new_1d(b, H3_I32, n);
    *embeds = h3_new_2d(b, dt, n, te->cfg.hidden_size);
    for (int k = 0; k < vc->n_deepstack; k++) deepstack[k] = h3_new_2d(b, dt, n, te->cfg.hidden_size);
    rc = h3_backend_check(b, status);
    if (rc == H3_OK) rc = h3_tensor_upload_i32(b, rows, host, status);
    free(host);
    if (rc == H3_OK)
        rc = h3_vision_forward(te->vis.tower, p->pixel_values, (const int64_t(*)[3])p->grid_thw, p->n_images, embeds,
                               deepstack, status);
    return rc;
}

h3_status_code h3_text_encoder_encode(h3_text_encoder *te, const h3_text_presentation *p, h3_tensor *out,
                                      h3_status *status) {
    h3_status_code rc = check_inputs(te, p->ids, p->n, out, status);
    if (rc != H3_OK) return rc;
    const int32_t *pos[3] = {p->positions, p->positions + p->n, p->positions + 2 * p->n};
    if (p->n_images == 0) return forward_positions(te, p->ids, pos, p->n, NULL, out, status);
    if (!te->vis.tower)
        return h3_fail(status, H3_ERR_UNSUPPORTED, "text encoder: the presentation has keyframes but no vision tower");
    size_t mark = h3_arena_mark(te->b);
    h3_tensor rows, embeds, deepstack[H3_VISION_MAX_DEEPSTACK];
    rc = run_vision(te, p, &rows, &embeds, deepstack, status);
    vision_rows vr = {&rows, &embeds, deepstack, h3_vision_get_config(te->vis.tower)->n_deepstack};
    if (rc == H3_OK) rc = forward_positions(te, p->ids, pos, p->n, &vr, out, status);
    h3_arena_reset(te->b, mark);
    return rc;
}
