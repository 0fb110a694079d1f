/* h3_dit.c - the MiniMax-H3 transformer forward on the op interface
 * (spec h3-transformer.md §2-§3).
 *
 * Weights. Both checkpoint layouts are read through one plan (walk_plan):
 * the list of every tensor the model holds, its checkpoint name(s) in each
 * layout, its shape and how it is rearranged. In memory every block keeps
 *   qkv [3·inner, D]  rows [q_all; k_all; v_all] (one allocation, three GEMMs
 *                     on row views; a backend may fuse them later)
 *   fc1 [2·F, D]      rows [value; gate] (the diffusers order)
 * The native checkpoint's per-head interleaved qkv_proj and [gate; value]
 * fc1 are reordered on the host while loading, by whole rows, so both layouts
 * end in bit-identical weights. Precision islands follow the release:
 * proj_in, audio_proj_in, time_embedder, proj_out, audio_proj_out are F32;
 * everything else is the backend's compute dtype.
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

#include <glib.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/h3_adapter.h" /* FastH3 */
#include "base/h3_config.h"

/* AdaLN table rows per timestep: one per modality tag (0 video, 1 text, 2 audio). */
#define MODALITIES 3
/* shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp */
#define ADALN_PARAMS 6

typedef struct dit_block {
    h3_tensor norm1, norm2;
    h3_tensor qkv;            /* [3·inner, D] */
    h3_tensor norm_q, norm_k; /* [head_dim] */
    h3_tensor out;            /* [D, inner] */
    h3_tensor fc1;            /* [2·F, D], [value; gate] */
    h3_tensor fc2;            /* [D, F] */
    h3_tensor adaln_w, adaln_b; /* [18·D, Te], [18·D]; main blocks only */
    h3_tensor gate;           /* FastH3 VSA: to_gate_compress [inner, D] (main blocks, VSA adapter) */
    int gate_active;          /* FastH3 VSA: the gate has a non-zero weight */
} dit_block;

struct h3_dit {
    h3_backend *b;
    h3_dit_config cfg;
    h3_tp tp;            /* tensor parallelism (h3_tp.h): this rank's heads and FFN slice */
    int heads;           /* attention heads of this rank */
    int64_t ffn;         /* FFN width of this rank */
    h3_dit_checkpoint_layout ckpt_layout;
    h3_checkpoint *ckpt; /* only while loading */

    /* FastH3 (h3_adapter.h, h3_vsa.h) */
    h3_adapter *adapter;  /* only while loading */
    int vsa_enabled;      /* h3_dit_set_vsa */
    h3_vsa_params vsa;
    h3_vsa_plan *vsa_plan;   /* per request */
    h3_vsa_tiles vsa_tiles;  /* per request, the plan's tables on the backend */

    h3_tensor proj_in_w, proj_in_b, audio_in_w, audio_in_b;
    h3_tensor context_w, context_b;
    h3_tensor time1_w, time1_b, time2_w, time2_b;
    dit_block *refiner, *blocks;
    h3_tensor refiner_norm;
    h3_tensor out_norm, out_adaln_w, out_adaln_b;
    h3_tensor proj_out_w, proj_out_b, audio_out_w, audio_out_b;

    /* Per request (h3_dit_begin .. h3_dit_end). */
    const h3_dit_layout *layout;
    h3_tensor text_hidden;              /* [L, D] refined text rows */
    h3_tensor rope_cos, rope_sin;       /* [S, rot] F32 */
    h3_tensor video_index, audio_index, text_index; /* I32 */
    int32_t *host_select;               /* [2·S] scratch for the selectors */
};

/* ---- config ----------------------------------------------------------------- */

typedef struct config_key {
    const char *diffusers, *native;
    size_t offset;
    double default_value; /* float keys only */
} config_key;

static const config_key int_keys[] = {
    {"num_layers", "num_layers", offsetof(h3_dit_config, num_layers)},
    {"num_refiner_layers", "token_refiner_num_layers", offsetof(h3_dit_config, num_refiner_layers)},
    {"hidden_size", "hidden_size", offsetof(h3_dit_config, hidden_size)},
    {"num_attention_heads", "num_attention_heads", offsetof(h3_dit_config, num_heads)},
    {"attention_head_dim", "attention_head_dim", offsetof(h3_dit_config, head_dim)},
    {"ffn_dim", "ffn_hidden_size", offsetof(h3_dit_config, ffn_dim)},
    {"in_channels", "latents_dim", offsetof(h3_dit_config, in_channels)},
    {"audio_in_channels", "audio_latents_dim", offsetof(h3_dit_config, audio_in_channels)},
    {"text_dim", "text_dim", offsetof(h3_dit_config, text_dim)},
    {"freq_dim", "timestep_input_dim", offsetof(h3_dit_config, freq_dim)},
    {"time_embed_hidden_dim", "time_embed_hidden_size", offsetof(h3_dit_config, time_embed_hidden_dim)},
    {"time_embed_dim", "time_embed_dim", offsetof(h3_dit_config, time_embed_dim)},
    {"rope_freq_dim", "rope_inv_freq_len", offsetof(h3_dit_config, rope_freq_dim)},
};

/* Optional in both namings; the defaults are the model class's (§1). The
 * native config has no rope_theta: the reference hard-codes 10000. */
static const config_key float_keys[] = {
    {"rope_theta", "rope_theta", offsetof(h3_dit_config, rope_theta), 10000.0},
    {"norm_eps", "norm_eps", offsetof(h3_dit_config, norm_eps), 1e-5},
    {"qk_norm_eps", "qk_norm_eps", offsetof(h3_dit_config, qk_norm_eps), 1e-5},
    {"final_norm_eps", "final_norm_eps", offsetof(h3_dit_config, final_norm_eps), 1e-5},
};

static h3_status_code check_config(const char *path, const h3_dit_config *c, h3_status *status) {
    for (size_t i = 0; i < sizeof int_keys / sizeof int_keys[0]; i++) {
        int v = *(const int *)((const char *)c + int_keys[i].offset);
        int may_be_zero = int_keys[i].offset == offsetof(h3_dit_config, num_refiner_layers);
        if (v < 0 || (v == 0 && !may_be_zero))
            return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" is %d", path, int_keys[i].diffusers, v);
    }
    if (c->patch_t != 1 || c->patch_h <= 0 || c->patch_w <= 0)
        return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: patch_size [%d, %d, %d] (need [1, h, w])", path, c->patch_t,
                       c->patch_h, c->patch_w);
    if (c->freq_dim % 2)
        return h3_fail(status, H3_ERR_FORMAT, "%s: freq_dim %d is odd", path, c->freq_dim);
    if (6 * c->rope_freq_dim > c->head_dim)
        return h3_fail(status, H3_ERR_FORMAT, "%s: rope_freq_dim %d rotates %d channels of a %d-wide head", path,
                       c->rope_freq_dim, 6 * c->rope_freq_dim, c->head_dim);
    if (!(c->rope_theta > 0) || !(c->norm_eps > 0) || !(c->qk_norm_eps > 0) || !(c->final_norm_eps > 0))
        return h3_fail(status, H3_ERR_FORMAT, "%s: rope_theta and the eps values must be positive", path);
    return H3_OK;
}

/* The native config states the AdaLN widths; they must agree with D. */
static h3_status_code check_native_widths(h3_config *c, const char *path, const h3_dit_config *cfg,
                                          h3_status *status) {
    int64_t v = (int64_t)ADALN_PARAMS * MODALITIES * cfg->hidden_size;
    h3_status_code rc = h3_config_int_or(c, "adaln_out_features", &v, status);
    if (rc != H3_OK) return rc;
    if (v != (int64_t)ADALN_PARAMS * MODALITIES * cfg->hidden_size)
        return h3_fail(status, H3_ERR_FORMAT, "%s: adaln_out_features %lld != 18 x hidden_size %d", path,
                       (long long)v, cfg->hidden_size);
    v = 2 * (int64_t)cfg->hidden_size;
    rc = h3_config_int_or(c, "final_adaln_out_features", &v, status);
    if (rc != H3_OK) return rc;
    if (v != 2 * (int64_t)cfg->hidden_size)
        return h3_fail(status, H3_ERR_FORMAT, "%s: final_adaln_out_features %lld != 2 x hidden_size %d", path,
                       (long long)v, cfg->hidden_size);
    return H3_OK;
}

static h3_status_code read_config(h3_config *c, const char *path, h3_dit_config *cfg, h3_status *status) {
    int native = h3_config_has(c, "token_refiner_num_layers") || h3_config_has(c, "latents_dim");
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < sizeof int_keys / sizeof int_keys[0]; i++) {
        int64_t v;
        const char *key = native ? int_keys[i].native : int_keys[i].diffusers;
        h3_status_code rc = h3_config_int(c, key, &v, status);
        if (rc != H3_OK) return rc;
        if (v < INT32_MIN || v > INT32_MAX) return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" = %lld", path, key, (long long)v);
        *(int *)((char *)cfg + int_keys[i].offset) = (int)v;
    }
    for (size_t i = 0; i < sizeof float_keys / sizeof float_keys[0]; i++) {
        double v = float_keys[i].default_value;
        h3_status_code rc = h3_config_double_or(c, native ? float_keys[i].native : float_keys[i].diffusers, &v, status);
        if (rc != H3_OK) return rc;
        *(float *)((char *)cfg + float_keys[i].offset) = (float)v;
    }
    int64_t patch[3] = {1, 2, 2};
    int n = 3;
    if (h3_config_has(c, "patch_size")) {
        h3_status_code rc = h3_config_int_array(c, "patch_size", patch, 3, &n, status);
        if (rc != H3_OK) return rc;
        if (n != 3) return h3_fail(status, H3_ERR_FORMAT, "%s: patch_size has %d entries, want 3", path, n);
    }
    cfg->patch_t = (int)patch[0];
    cfg->patch_h = (int)patch[1];
    cfg->patch_w = (int)patch[2];
    if (native) {
        h3_status_code rc = check_native_widths(c, path, cfg, status);
        if (rc != H3_OK) return rc;
    }
    return check_config(path, cfg, status);
}

h3_status_code h3_dit_config_load(const char *dir, h3_dit_config *cfg, h3_status *status) {
    char *path = g_build_filename(dir, "config.json", NULL);
    h3_config *c = NULL;
    h3_status_code rc = h3_config_load(path, &c, status);
    if (rc == H3_OK) rc = read_config(c, path, cfg, status);
    h3_config_free(c);
    g_free(path);
    return rc;
}

/* ---- the weight plan ------------------------------------------------------- */

typedef enum source_kind {
    SOURCE_PLAIN = 0, /* one tensor, loaded as is */
    SOURCE_QKV,       /* diffusers: to_q/to_k/to_v stacked; native: per-head interleaved qkv_proj */
    SOURCE_FC1        /* native [gate; value] swapped to [value; gate] */
} source_kind;

typedef struct weight_request {
    source_kind kind;
    int n_names;
    char names[3][192];
    int ndim;
    int64_t shape[2]; /* of each named tensor */
    h3_weight_type type;
    h3_tp_role role;  /* how tensor parallelism splits it (h3_tp.h) */
    h3_tensor *dst;   /* NULL when only listing names */
} weight_request;

typedef h3_status_code (*request_fn)(const weight_request *r, void *user, h3_status *status);

typedef struct plan {
    const h3_dit_config *cfg;
    h3_dit_checkpoint_layout layout;
    request_fn fn;
    void *user;
    h3_status *status;
    h3_status_code rc; /* first failure; later requests are skipped */
} plan;

static void submit(plan *p, weight_request *r) {
    if (p->rc == H3_OK) p->rc = p->fn(r, p->user, p->status);
}

/* One tensor named `name` (already in the plan's layout), split by role
 * across tensor-parallel ranks. d1 == 0: 1-D. */
static void want_split(plan *p, h3_tensor *dst, h3_weight_type type, source_kind kind, h3_tp_role role, int64_t d0,
                       int64_t d1, const char *name) {
    weight_request r = {.kind = kind, .n_names = 1, .ndim = d1 ? 2 : 1, .shape = {d0, d1}, .type = type,
                        .role = role, .dst = dst};
    snprintf(r.names[0], sizeof r.names[0], "%s", name);
    submit(p, &r);
}

static void want(plan *p, h3_tensor *dst, h3_weight_type type, source_kind kind, int64_t d0, int64_t d1,
                 const char *name) {
    want_split(p, dst, type, kind, H3_TP_REPLICATED, d0, d1, name);
}

/* `diffusers` or `native`, by the plan's layout. */
static void want2(plan *p, h3_tensor *dst, h3_weight_type type, int64_t d0, int64_t d1, const char *diffusers,
                  const char *native) {
    want(p, dst, type, SOURCE_PLAIN, d0, d1, p->layout == H3_DIT_NATIVE ? native : diffusers);
}

#define DST(blk, field) ((blk) ? &(blk)->field : NULL)

/* One block; prefix is "transformer_blocks.3." style for the plan's layout. */
static void want_block(plan *p, dit_block *blk, const char *prefix, int with_adaln) {
    const h3_dit_config *c = p->cfg;
    int64_t D = c->hidden_size, inner = (int64_t)c->num_heads * c->head_dim, F = c->ffn_dim;
    int native = p->layout == H3_DIT_NATIVE;
    char name[192];
#define NAME(suffix) (snprintf(name, sizeof name, "%s%s", prefix, suffix), name)
    want(p, DST(blk, norm1), H3_WEIGHT_DEFAULT, SOURCE_PLAIN, D, 0, NAME("norm1.weight"));
    want(p, DST(blk, norm2), H3_WEIGHT_DEFAULT, SOURCE_PLAIN, D, 0, NAME("norm2.weight"));
    if (native) {
        want_split(p, DST(blk, qkv), H3_WEIGHT_DEFAULT, SOURCE_QKV, H3_TP_QKV, 3 * inner, D,
                   NAME("attn.qkv_proj.weight"));
    } else {
        weight_request r = {.kind = SOURCE_QKV, .n_names = 3, .ndim = 2, .shape = {inner, D},
                            .type = H3_WEIGHT_DEFAULT, .role = H3_TP_QKV, .dst = DST(blk, qkv)};
        snprintf(r.names[0], sizeof r.names[0], "%sattn.to_q.weight", prefix);
        snprintf(r.names[1], sizeof r.names[1], "%sattn.to_k.weight", prefix);
        snprintf(r.names[2], sizeof r.names[2], "%sattn.to_v.weight", prefix);
        submit(p, &r);
    }
    want(p, DST(blk, norm_q), H3_WEIGHT_DEFAULT, SOURCE_PLAIN, c->head_dim, 0,
         NAME(native ? "attn.q_norm.weight" : "attn.norm_q.weight"));
    want(p, DST(blk, norm_k), H3_WEIGHT_DEFAULT, SOURCE_PLAIN, c->head_dim, 0,
         NAME(native ? "attn.k_norm.weight" : "attn.norm_k.weight"));
    want_split(p, DST(blk, out), H3_WEIGHT_DEFAULT, SOURCE_PLAIN, H3_TP_OUT, D, inner,
               NAME(native ? "attn.out_proj.weight" : "attn.to_out.0.weight"));
    want_split(p, DST(blk, fc1), H3_WEIGHT_DEFAULT, native ? SOURCE_FC1 : SOURCE_PLAIN, H3_TP_FFN_IN, 2 * F, D,
               NAME(native ? "mlp.fc1.weight" : "ff.net.0.proj.weight"));
    want_split(p, DST(blk, fc2), H3_WEIGHT_DEFAULT, SOURCE_PLAIN, H3_TP_FFN_OUT, D, F,
               NAME(native ? "mlp.fc2.weight" : "ff.net.2.weight"));
    if (with_adaln) {
        int64_t A = (int64_t)ADALN_PARAMS * MODALITIES * D;
        want_split(p, DST(blk, adaln_w), H3_WEIGHT_DEFAULT, SOURCE_PLAIN, H3_TP_GATHER, A, c->time_embed_dim,
                   NAME("adaln_proj.linear.weight"));
        want_split(p, DST(blk, adaln_b), H3_WEIGHT_DEFAULT, SOURCE_PLAIN, H3_TP_GATHER, A, 0,
                   NAME("adaln_proj.linear.bias"));
    }
#undef NAME
}

/* Every weight of the model, in one order for loading, listing and freeing.
 * dit may be NULL (listing only). */
static h3_status_code walk_plan(const h3_dit_config *c, h3_dit_checkpoint_layout layout, h3_dit *dit, request_fn fn,
                                void *user, h3_status *status) {
    plan p = {.cfg = c, .layout = layout, .fn = fn, .user = user, .status = status, .rc = H3_OK};
    int64_t D = c->hidden_size, Te = c->time_embed_dim, Th = c->time_embed_hidden_dim;
    int64_t video_features = (int64_t)c->in_channels * c->patch_t * c->patch_h * c->patch_w;
    const h3_weight_type F32 = H3_WEIGHT_F32, DEF = H3_WEIGHT_DEFAULT;
    char prefix[96];

    want2(&p, DST(dit, proj_in_w), F32, D, video_features, "proj_in.weight", "video_patch_proj.weight");
    want2(&p, DST(dit, proj_in_b), F32, D, 0, "proj_in.bias", "video_patch_proj.bias");
    want2(&p, DST(dit, audio_in_w), F32, D, c->audio_in_channels, "audio_proj_in.weight", "audio_patch_proj.weight");
    want2(&p, DST(dit, audio_in_b), F32, D, 0, "audio_proj_in.bias", "audio_patch_proj.bias");
    want2(&p, DST(dit, context_w), DEF, D, c->text_dim, "context_embedder.weight", "condition_proj.weight");
    want2(&p, DST(dit, context_b), DEF, D, 0, "context_embedder.bias", "condition_proj.bias");
    want2(&p, DST(dit, time1_w), F32, Th, c->freq_dim, "time_embedder.linear_1.weight", "time_embedder.proj_in.weight");
    want2(&p, DST(dit, time1_b), F32, Th, 0, "time_embedder.linear_1.bias", "time_embedder.proj_in.bias");
    want2(&p, DST(dit, time2_w), F32, Te, Th, "time_embedder.linear_2.weight", "time_embedder.proj_out.weight");
    want2(&p, DST(dit, time2_b), F32, Te, 0, "time_embedder.linear_2.bias", "time_embedder.proj_out.bias");
    for (int i = 0; i < c->num_refiner_layers; i++) {
        snprintf(prefix, sizeof prefix, layout == H3_DIT_NATIVE ? "token_refiner.blocks.%d." : "token_refiner.refiner_blocks.%d.", i);
        want_block(&p, dit ? &dit->refiner[i] : NULL, prefix, 0);
    }
    want2(&p, DST(dit, refiner_norm), DEF, D, 0, "token_refiner.final_norm.weight", "token_refiner.final_norm.weight");
    for (int i = 0; i < c->num_layers; i++) {
        snprintf(prefix, sizeof prefix, layout == H3_DIT_NATIVE ? "blocks.%d." : "transformer_blocks.%d.", i);
        want_block(&p, dit ? &dit->blocks[i] : NULL, prefix, 1);
    }
    want2(&p, DST(dit, out_norm), DEF, D, 0, "norm_out.norm.weight", "final_layer.norm.weight");
    want2(&p, DST(dit, out_adaln_w), DEF, 2 * D, Te, "norm_out.linear.weight", "final_layer.adaln_proj.linear.weight");
    want2(&p, DST(dit, out_adaln_b), DEF, 2 * D, 0, "norm_out.linear.bias", "final_layer.adaln_proj.linear.bias");
    want2(&p, DST(dit, proj_out_w), F32, video_features, D, "proj_out.weight", "final_layer.video_out.weight");
    want2(&p, DST(dit, proj_out_b), F32, video_features, 0, "proj_out.bias", "final_layer.video_out.bias");
    want2(&p, DST(dit, audio_out_w), F32, c->audio_in_channels, D, "audio_proj_out.weight",
          "final_layer.audio_out.weight");
    want2(&p, DST(dit, audio_out_b), F32, c->audio_in_channels, 0, "audio_proj_out.bias", "final_layer.audio_out.bias");
    return p.rc;
}

typedef struct list_ctx {
    h3_dit_tensor_fn fn;
    void *user;
} list_ctx;

static h3_status_code list_request(const weight_request *r, void *user, h3_status *status) {
    list_ctx *l = user;
    for (int i = 0; i < r->n_names; i++) l->fn(r->names[i], r->ndim, r->shape, l->user);
    return H3_OK;
}

void h3_dit_checkpoint_plan(const h3_dit_config *cfg, h3_dit_checkpoint_layout layout, h3_dit_tensor_fn fn,
                            void *user) {
    list_ctx l = {fn, user};
    walk_plan(cfg, layout, NULL, list_request, &l, NULL);
}

int h3_dit_checkpoint_ignores(h3_dit_checkpoint_layout layout, const char *name) {
    return layout == H3_DIT_NATIVE && strcmp(name, "rope.inv_freq") == 0;
}

h3_status_code h3_dit_detect_layout(const h3_checkpoint *ckpt, h3_dit_checkpoint_layout *layout, h3_status *status) {
    int native = h3_checkpoint_find(ckpt, "video_patch_proj.weight") != NULL ||
                 h3_checkpoint_find(ckpt, "blocks.0.attn.qkv_proj.weight") != NULL;
    int diffusers = h3_checkpoint_find(ckpt, "proj_in.weight") != NULL ||
                    h3_checkpoint_find(ckpt, "transformer_blocks.0.attn.to_q.weight") != NULL;
    if (native == diffusers)
        return h3_fail(status, H3_ERR_FORMAT,
                       "%s: unknown transformer checkpoint layout (%s 'proj_in.weight' / "
                       "'transformer_blocks.0.attn.to_q.weight' (diffusers) and 'video_patch_proj.weight' / "
                       "'blocks.0.attn.qkv_proj.weight' (native))",
                       h3_checkpoint_path(ckpt), native ? "has both" : "has none of");
    *layout = native ? H3_DIT_NATIVE : H3_DIT_DIFFUSERS;
    return H3_OK;
}

void h3_dit_rope_inv_freq(const h3_dit_config *cfg, float *inv_freq) {
    int F = cfg->rope_freq_dim;
    for (int k = 0; k < F; k++) {
        float exponent = (float)(2 * k) / (float)(2 * F);
        inv_freq[k] = 1.0f / powf(cfg->rope_theta, exponent);
    }
}

/* ---- loading ----------------------------------------------------------------- */

/* Host copy of the rows of one or more checkpoint tensors rearranged into
 * the in-memory order, then uploaded like a file tensor. Rows are moved
 * whole, in the file dtype, so the values are untouched. */
static h3_status_code load_rearranged(h3_dit *dit, const weight_request *r, const h3_st_tensor **src,
                                      h3_status *status) {
    const h3_dit_config *c = &dit->cfg;
    int64_t rows = r->kind == SOURCE_QKV && r->n_names == 3 ? 3 * src[0]->shape[0] : src[0]->shape[0];
    int64_t cols = src[0]->shape[1];
    size_t esize = h3_st_dtype_size(src[0]->dtype), row_bytes = (size_t)cols * esize;
    for (int i = 1; i < r->n_names; i++)
        if (src[i]->dtype != src[0]->dtype)
            return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s' is %s but '%s' is %s", src[i]->file_path,
                           src[i]->name, h3_st_dtype_name(src[i]->dtype), src[0]->name,
                           h3_st_dtype_name(src[0]->dtype));
    char *buf = malloc((size_t)rows * row_bytes + 1);
    if (!buf) return h3_fail(status, H3_ERR_NO_MEMORY, "%s: tensor '%s': out of host memory", src[0]->file_path, src[0]->name);
    int64_t inner = (int64_t)c->num_heads * c->head_dim, dh = c->head_dim, F = c->ffn_dim;
    for (int64_t row = 0; row < rows; row++) {
        const h3_st_tensor *from = src[0];
        int64_t src_row = row;
        if (r->kind == SOURCE_QKV && r->n_names == 3) {
            from = src[row / inner];
            src_row = row % inner;
        } else if (r->kind == SOURCE_QKV) {
            /* native: head h's q, k, v rows are h·3dh + [0,dh), [dh,2dh), [2dh,3dh) */
            int64_t part = row / inner, head = (row % inner) / dh, j = row % dh;
            src_row = head * 3 * dh + part * dh + j;
        } else if (r->kind == SOURCE_FC1) {
            src_row = row < F ? F + row : row - F; /* [gate; value] -> [value; gate] */
        }
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

static h3_status_code load_request(const weight_request *r, void *user, h3_status *status) {
    h3_dit *dit = user;
    const h3_st_tensor *src[3];
    h3_st_tensor fused[3]; /* FastH3: an adapter's fused copies, before any rearranging or sharding */
    void *fused_data[3] = {NULL, NULL, NULL};
    h3_status_code rc = H3_OK;
    for (int i = 0; i < r->n_names && rc == H3_OK; i++) {
        rc = h3_checkpoint_get(dit->ckpt, r->names[i], r->ndim, r->shape, &src[i], status);
        if (rc == H3_OK && dit->adapter) rc = h3_adapter_fuse(dit->adapter, src[i], &fused[i], &fused_data[i], status);
        if (fused_data[i]) src[i] = &fused[i];
    }
    if (rc == H3_OK)
        rc = r->kind == SOURCE_PLAIN ? h3_tp_weight_load(dit->b, &dit->tp, src[0], r->role, r->type, r->dst, status)
                                     : load_rearranged(dit, r, src, status);
    for (int i = 0; i < r->n_names; i++) free(fused_data[i]);
    return rc;
}

static h3_status_code free_request(const weight_request *r, void *user, h3_status *status) {
    h3_dit *dit = user;
    h3_weight_free(dit->b, r->dst);
    return H3_OK;
}

void h3_dit_free(h3_dit *dit) {
    if (!dit) return;
    h3_dit_end(dit);
    if (dit->refiner && dit->blocks) walk_plan(&dit->cfg, dit->ckpt_layout, dit, free_request, dit, NULL);
    h3_checkpoint_close(dit->ckpt);
    for (int i = 0; dit->blocks && i < dit->cfg.num_layers; i++) h3_weight_free(dit->b, &dit->blocks[i].gate); /* FastH3 */
    free(dit->refiner);
    free(dit->blocks);
    free(dit);
}

h3_status_code h3_dit_load(h3_backend *b, const char *dir, h3_dit **out, h3_status *status) {
    h3_tp single = H3_TP_SINGLE;
    return h3_dit_load_tp(b, dir, &single, out, status);
}

/* This rank's share of the heads and the FFN (the plan: h3_tp.h). */
static h3_status_code split_for_tp(h3_dit *dit, const char *dir, h3_status *status) {
    const h3_dit_config *c = &dit->cfg;
    int n = dit->tp.size;
    if (n < 1 || !h3_tp_dit_divides(c, n))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "%s: %d attention heads, FFN width %d and AdaLN width %lld do not split over %d "
                       "tensor-parallel ranks",
                       dir, c->num_heads, c->ffn_dim, (long long)ADALN_PARAMS * MODALITIES * c->hidden_size, n);
    dit->heads = c->num_heads / n;
    dit->ffn = c->ffn_dim / n;
    return H3_OK;
}

/* ---- FastH3: adapter gates and VSA-H3 (h3_adapter.h, h3_vsa.h) ---------------- */

/* "Skip the branch only when the weights are exactly zero": ±0 bit patterns. */
static int all_zero(const h3_st_tensor *t) {
    size_t es = h3_st_dtype_size(t->dtype);
    const unsigned char *p = t->data;
    for (int64_t i = 0; i < t->numel; i++, p += es)
        for (size_t k = 0; k < es; k++)
            if (p[k] & (k + 1 == es ? 0x7f : 0xff)) return 0; /* little-endian: the sign bit is in the last byte */
    return 1;
}

/* A VSA adapter's to_gate_compress weights, split by heads like q. */
static h3_status_code load_gates(h3_dit *dit, h3_status *status) {
    for (int i = 0; i < dit->cfg.num_layers; i++) {
        h3_st_tensor gate;
        void *data = NULL;
        h3_status_code rc = h3_adapter_gate(dit->adapter, i, &gate, &data, status);
        if (rc == H3_OK && data) {
            dit->blocks[i].gate_active = !all_zero(&gate);
            rc = h3_tp_weight_load(dit->b, &dit->tp, &gate, H3_TP_HEADS, H3_WEIGHT_DEFAULT, &dit->blocks[i].gate,
                                   status);
        }
        free(data);
        if (rc != H3_OK) return rc;
    }
    return H3_OK;
}

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
    for (int i = 0; i < dit->cfg.num_layers; i++) n += dit->blocks[i].gate_active;
    return n;
}

const h3_vsa_plan *h3_dit_vsa_plan(const h3_dit *dit) { return dit->vsa_plan; }

/* The adapter (NULL: none) is bound to the checkpoint's header before any
 * weight is read; load_request fuses as the tensors stream in. */
static h3_status_code load_dit(h3_backend *b, const char *dir, const h3_tp *tp, h3_adapter *adapter, h3_dit **out,
                               h3_status *status) {
    *out = NULL;
    h3_dit *dit = calloc(1, sizeof *dit);
    if (!dit) return h3_fail(status, H3_ERR_NO_MEMORY, "%s: out of memory", dir);
    dit->b = b;
    dit->adapter = adapter;
    dit->tp = *tp;
    h3_status_code rc = h3_dit_config_load(dir, &dit->cfg, status);
    if (rc == H3_OK) rc = split_for_tp(dit, dir, status);
    if (rc == H3_OK) rc = h3_checkpoint_open(dir, &dit->ckpt, status);
    if (rc == H3_OK) rc = h3_dit_detect_layout(dit->ckpt, &dit->ckpt_layout, status);
    if (rc == H3_OK && adapter) rc = h3_adapter_bind(adapter, dit->ckpt, dit->ckpt_layout, &dit->cfg, status);
    if (rc == H3_OK) {
        dit->refiner = calloc((size_t)dit->cfg.num_refiner_layers + 1, sizeof *dit->refiner);
        dit->blocks = calloc((size_t)dit->cfg.num_layers + 1, sizeof *dit->blocks);
        if (!dit->refiner || !dit->blocks) rc = h3_fail(status, H3_ERR_NO_MEMORY, "%s: out of memory", dir);
    }
    if (rc == H3_OK) rc = walk_plan(&dit->cfg, dit->ckpt_layout, dit, load_request, dit, status);
    if (rc == H3_OK && adapter) rc = load_gates(dit, status);
    dit->adapter = NULL;
    /* The weights are on the backend now; the mapping is not needed. */
    h3_checkpoint_close(dit->ckpt);
    dit->ckpt = NULL;
    if (rc != H3_OK) {
        h3_dit_free(dit);
        return rc;
    }
    *out = dit;
    return H3_OK;
}

h3_status_code h3_dit_load_tp(h3_backend *b, const char *dir, const h3_tp *tp, h3_dit **out, h3_status *status) {
    return load_dit(b, dir, tp, NULL, out, status);
}

h3_status_code h3_dit_load_with_adapter(h3_backend *b, const char *dir, const h3_tp *tp, h3_adapter *adapter,
                                        h3_dit **out, h3_status *status) {
    h3_tp single = H3_TP_SINGLE;
    return load_dit(b, dir, tp ? tp : &single, adapter, out, status);
}

/* ---- random weights (benchmarks) -------------------------------------------------- */

typedef struct random_ctx {
    h3_dit *dit;
    uint64_t seed, index; /* tensor `index` draws from a stream seeded by (seed, index) */
    void *buf;
    size_t cap;
    uint16_t *levels16; /* [65536] the tensor's value levels, bf16 and f32 */
    float *levels32;
} random_ctx;

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform values for one plan entry: matrices [N, K] in ±sqrt(3/K) (unit
 * variance out for unit variance in), norm weights in [0.8, 1.2], biases in
 * ±0.05. BF16 unless the plan keeps the weight in F32, so the backend gets
 * what a checkpoint would give it, sharded the same way. */
static h3_status_code random_request(const weight_request *r, void *user, h3_status *status) {
    random_ctx *ctx = user;
    h3_dit *dit = ctx->dit;
    int64_t rows = r->kind == SOURCE_QKV && r->n_names == 3 ? 3 * r->shape[0] : r->shape[0];
    int64_t cols = r->ndim == 2 ? r->shape[1] : 1;
    size_t n = (size_t)(rows * cols);
    int f32 = r->type == H3_WEIGHT_F32;
    size_t bytes = n * (f32 ? 4 : 2);
    if (bytes > ctx->cap) {
        free(ctx->buf);
        ctx->buf = malloc(bytes);
        ctx->cap = ctx->buf ? bytes : 0;
        if (!ctx->buf) return h3_fail(status, H3_ERR_NO_MEMORY, "random dit: no host memory for %zu bytes", bytes);
    }
    float lo, hi;
    if (r->ndim == 2) {
        hi = sqrtf(3.0f / (float)cols);
        lo = -hi;
    } else if (g_str_has_suffix(r->names[0], ".bias")) {
        lo = -0.05f, hi = 0.05f;
    } else {
        lo = 0.8f, hi = 1.2f;
    }
    /* 16 random bits per value through a table of 65536 levels: cheap
     * enough for the 645 M values of a block. */
    uint16_t *levels16 = ctx->levels16;
    float *levels32 = ctx->levels32;
    for (int u = 0; u < 65536; u++) {
        levels32[u] = lo + (hi - lo) * ((float)u + 0.5f) / 65536.0f;
        levels16[u] = h3_f32_to_bf16(levels32[u]);
    }
    uint64_t state = ctx->seed * 0x9e3779b97f4a7c15ull + ++ctx->index;
    for (size_t i = 0; i < n; i += 4) {
        uint64_t z = splitmix64(&state);
        for (size_t k = 0; k < 4 && i + k < n; k++, z >>= 16) {
            if (f32) ((float *)ctx->buf)[i + k] = levels32[z & 0xffff];
            else ((uint16_t *)ctx->buf)[i + k] = levels16[z & 0xffff];
        }
    }
    h3_st_tensor t = {.name = r->names[0], .dtype = f32 ? H3_ST_F32 : H3_ST_BF16, .ndim = r->ndim,
                      .shape = {rows, cols}, .numel = rows * cols, .data = ctx->buf, .nbytes = bytes,
                      .file_path = "(random weights)"};
    return h3_tp_weight_load(dit->b, &dit->tp, &t, r->role, r->type, r->dst, status);
}

static h3_status_code random_begin(random_ctx *ctx, h3_dit *dit, uint64_t seed, h3_status *status) {
    *ctx = (random_ctx){.dit = dit, .seed = seed};
    ctx->levels16 = malloc(65536 * sizeof *ctx->levels16);
    ctx->levels32 = malloc(65536 * sizeof *ctx->levels32);
    if (!ctx->levels16 || !ctx->levels32) return h3_fail(status, H3_ERR_NO_MEMORY, "random dit: out of memory");
    return H3_OK;
}

static void random_end(random_ctx *ctx) {
    free(ctx->buf);
    free(ctx->levels16);
    free(ctx->levels32);
    *ctx = (random_ctx){0};
}

h3_status_code h3_dit_create_random(h3_backend *b, const h3_dit_config *cfg, int num_blocks, uint64_t seed,
                                    const h3_tp *tp, h3_dit **out, h3_status *status) {
    *out = NULL;
    h3_status_code rc = check_config("random dit", cfg, status);
    if (rc != H3_OK) return rc;
    if (num_blocks < 1 || num_blocks > cfg->num_layers)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "random dit: %d blocks (1..%d)", num_blocks,
                       cfg->num_layers);
    h3_dit *dit = calloc(1, sizeof *dit);
    if (!dit) return h3_fail(status, H3_ERR_NO_MEMORY, "random dit: out of memory");
    h3_tp single = H3_TP_SINGLE;
    dit->b = b;
    dit->tp = tp ? *tp : single;
    dit->cfg = *cfg;
    dit->cfg.num_layers = num_blocks;
    dit->ckpt_layout = H3_DIT_DIFFUSERS; /* names only; the weights never touch a file */
    rc = split_for_tp(dit, "random dit", status);
    if (rc == H3_OK) {
        dit->refiner = calloc((size_t)dit->cfg.num_refiner_layers + 1, sizeof *dit->refiner);
        dit->blocks = calloc((size_t)dit->cfg.num_layers + 1, sizeof *dit->blocks);
        if (!dit->refiner || !dit->blocks) rc = h3_fail(status, H3_ERR_NO_MEMORY, "random dit: out of memory");
    }
    random_ctx ctx = {0}; /* random_end is safe on it whether or not random_begin ran */
    if (rc == H3_OK) rc = random_begin(&ctx, dit, seed, status);
    if (rc == H3_OK) rc = walk_plan(&dit->cfg, dit->ckpt_layout, dit, random_request, &ctx, status);
    random_end(&ctx);
    if (rc != H3_OK) {
        h3_dit_free(dit);
        return rc;
    }
    *out = dit;
    return H3_OK;
}

/* What a VSA adapter adds: to_gate_compress in every main block, here
 * random, so a VSA benchmark pays for the gate projection and the compressed
 * branch like a FastH3 VSA model does. Split by heads like a loaded gate. */
h3_status_code h3_dit_create_random_gates(h3_dit *dit, uint64_t seed, h3_status *status) {
    random_ctx ctx;
    h3_status_code rc = random_begin(&ctx, dit, seed, status);
    int64_t inner = (int64_t)dit->cfg.num_heads * dit->cfg.head_dim;
    for (int i = 0; rc == H3_OK && i < dit->cfg.num_layers; i++) {
        weight_request r = {.kind = SOURCE_PLAIN, .n_names = 1, .ndim = 2, .shape = {inner, dit->cfg.hidden_size},
                            .type = H3_WEIGHT_DEFAULT, .role = H3_TP_HEADS, .dst = &dit->blocks[i].gate};
        snprintf(r.names[0], sizeof r.names[0], "transformer_blocks.%d.attn.to_gate_compress.weight", i);
        h3_weight_free(dit->b, &dit->blocks[i].gate);
        rc = random_request(&r, &ctx, status);
        dit->blocks[i].gate_active = rc == H3_OK;
    }
    random_end(&ctx);
    return rc;
}

const h3_dit_config *h3_dit_get_config(const h3_dit *dit) { return &dit->cfg; }
h3_dit_checkpoint_layout h3_dit_get_checkpoint_layout(const h3_dit *dit) { return dit->ckpt_layout; }

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
static void attention(h3_dit *dit, const dit_block *blk, block_scratch *s, const h3_tensor *cos, const h3_tensor *sin) {
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
static void feed_forward(h3_dit *dit, const dit_block *blk, block_scratch *s) {
    h3_op_linear(dit->b, &s->u, &s->h, &blk->fc1, NULL);
    h3_op_swiglu(dit->b, &s->g, &s->u, 1);
    h3_tp_linear_row_parallel(&dit->tp, dit->b, &s->y, &s->g, &blk->fc2, NULL); /* sums the FFN slices */
}

/* ---- begin: text refiner, RoPE tables, indices ------------------------------------- */

/* cos/sin [S, 6F] from the float64 positions: cast to float32, angle =
 * pos·inv_freq in float32, per axis (t, h, w), the 3F angles repeated twice
 * for the rotate-half pairing (§3.4). */
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
        for (int64_t s = 0; s < S; s++)
            for (int j = 0; j < 3 * F; j++) {
                float pos = (float)l->position_ids[s * 3 + j / F];
                float angle = pos * inv_freq[j % F];
                float cv = (float)cos((double)angle), sv = (float)sin((double)angle);
                cs[s * rot + j] = cs[s * rot + 3 * F + j] = cv;
                sn[s * rot + j] = sn[s * rot + 3 * F + j] = sv;
            }
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
    h3_op_linear(b, &ht, &x, &dit->context_w, &dit->context_b);
    block_scratch s = new_scratch(dit, L);
    for (int i = 0; i < c->num_refiner_layers; i++) {
        const dit_block *blk = &dit->refiner[i];
        h3_op_rms_norm(b, &s.h, &ht, &blk->norm1, D, c->norm_eps);
        attention(dit, blk, &s, NULL, NULL);
        h3_op_add(b, &ht, &ht, &s.y);
        h3_op_rms_norm(b, &s.h, &ht, &blk->norm2, D, c->norm_eps);
        feed_forward(dit, blk, &s);
        h3_op_add(b, &ht, &ht, &s.y);
        if (h3_backend_check(b, status) != H3_OK) break;
    }
    h3_op_rms_norm(b, &ht, &ht, &dit->refiner_norm, D, c->final_norm_eps);
    h3_status_code rc = h3_backend_check(b, status);
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

/* The AdaLN tables of one forward. */
typedef struct modulation {
    h3_tensor *blocks; /* per block [6·3·n_t, D]: param p at rows p·3n_t + ti·3 + tag */
    h3_tensor final;   /* [2·n_t, D]: shift rows then scale rows */
} modulation;

/* Row p·R + r of the table is the linear output's row r viewed as [R·P, D]
 * chunk p (R table rows, P params), i.e. source row r·P + p. */
static h3_status_code table_index(h3_dit *dit, int n_params, int n_rows, h3_tensor *idx, h3_status *status) {
    int32_t host[ADALN_PARAMS * MODALITIES * H3_DIT_MAX_TIMESTEPS];
    for (int p = 0; p < n_params; p++)
        for (int r = 0; r < n_rows; r++) host[p * n_rows + r] = r * n_params + p;
    *idx = h3_new_1d(dit->b, H3_I32, (int64_t)n_params * n_rows);
    h3_status_code rc = h3_backend_check(dit->b, status);
    return rc == H3_OK ? h3_tensor_upload_i32(dit->b, idx, host, status) : rc;
}

/* temb = linear_2(silu(linear_1(features))) in float32; every AdaLN
 * projection reads silu(temb), applied in float32 then cast (§3.6). */
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
    h3_op_linear(b, &hidden, &f, &dit->time1_w, &dit->time1_b);
    h3_op_silu(b, &hidden, &hidden);
    h3_op_linear(b, &temb, &hidden, &dit->time2_w, &dit->time2_b);
    h3_op_silu(b, &temb, &temb);
    h3_tensor act = temb;
    if (dt != H3_F32) {
        act = h3_new_2d(b, dt, n_t, c->time_embed_dim);
        h3_op_copy(b, &act, &temb);
    }

    int rows = MODALITIES * n_t;
    h3_tensor block_idx, final_idx;
    rc = table_index(dit, ADALN_PARAMS, rows, &block_idx, status);
    if (rc == H3_OK) rc = table_index(dit, 2, n_t, &final_idx, status);
    if (rc != H3_OK) return rc;
    h3_tensor raw = h3_new_2d(b, dt, n_t, ADALN_PARAMS * MODALITIES * D);
    h3_tensor raw_rows = h3_tensor_2d(&raw, (int64_t)ADALN_PARAMS * rows, D);
    for (int i = 0; i < c->num_layers; i++) {
        m->blocks[i] = h3_new_2d(b, dt, (int64_t)ADALN_PARAMS * rows, D);
        /* each rank computes 1/N of the table and every rank gets all of it */
        h3_tp_linear_column_gather(&dit->tp, b, &raw, &act, &dit->blocks[i].adaln_w, &dit->blocks[i].adaln_b);
        h3_op_gather_rows(b, &m->blocks[i], &raw_rows, &block_idx);
    }
    h3_tensor raw_final = h3_new_2d(b, dt, n_t, 2 * D);
    h3_tensor raw_final_rows = h3_tensor_2d(&raw_final, 2 * (int64_t)n_t, D);
    m->final = h3_new_2d(b, dt, 2 * (int64_t)n_t, D);
    h3_op_linear(b, &raw_final, &act, &dit->out_adaln_w, &dit->out_adaln_b);
    h3_op_gather_rows(b, &m->final, &raw_final_rows, &final_idx);
    return h3_backend_check(b, status);
}

/* Table p of a block's modulation: rows [p·3n_t, (p+1)·3n_t). */
static h3_tensor table(const h3_tensor *t, int p, int n_rows) { return h3_tensor_rows_view(t, (int64_t)p * n_rows, n_rows); }

static void main_block(h3_dit *dit, const dit_block *blk, h3_tensor *x, block_scratch *s, const h3_tensor *mod,
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
        bs[s] = row_index[s] * MODALITIES + tag;
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
                                 const modulation *m, int n_t, const h3_tensor *block_sel,
                                 const h3_tensor *final_sel, h3_tensor *video_velocity, h3_tensor *audio_velocity,
                                 h3_status *status) {
    h3_backend *b = dit->b;
    const h3_dit_config *c = &dit->cfg;
    const h3_dit_layout *l = dit->layout;
    int64_t S = l->seq_len, D = c->hidden_size;

    /* Text, video and audio rows partition [0, S). */
    h3_tensor x = h3_new_2d(b, h3_backend_compute_dtype(b), S, D);
    if (l->num_text > 0) h3_op_scatter_rows(b, &x, &dit->text_hidden, &dit->text_index);
    project_in(dit, &x, video_rows, &dit->proj_in_w, &dit->proj_in_b, &dit->video_index);
    project_in(dit, &x, audio_rows, &dit->audio_in_w, &dit->audio_in_b, &dit->audio_index);

    block_scratch s = new_scratch(dit, S);
    if (dit->vsa_plan) s.gate = h3_new_2d(b, h3_backend_compute_dtype(b), S, (int64_t)dit->heads * c->head_dim); /* FastH3 */
    for (int i = 0; i < c->num_layers; i++) {
        main_block(dit, &dit->blocks[i], &x, &s, &m->blocks[i], MODALITIES * n_t, block_sel);
        h3_status_code rc = h3_backend_check(b, status);
        if (rc != H3_OK) return rc;
    }
    h3_tensor shift = table(&m->final, 0, n_t), scale = table(&m->final, 1, n_t);
    h3_op_rms_norm_modulate(b, &x, &x, &dit->out_norm, c->final_norm_eps, &shift, &scale, final_sel);
    project_out(dit, video_velocity, &x, &dit->proj_out_w, &dit->proj_out_b, &dit->video_index);
    project_out(dit, audio_velocity, &x, &dit->audio_out_w, &dit->audio_out_b, &dit->audio_index);
    return h3_backend_check(b, status);
}

h3_status_code h3_dit_forward(h3_dit *dit, const h3_tensor *video_rows, const h3_tensor *audio_rows,
                              const float *timesteps, int n_t, const int32_t *row_index, h3_tensor *video_velocity,
                              h3_tensor *audio_velocity, h3_status *status) {
    h3_status_code rc = check_forward_args(dit, video_rows, audio_rows, timesteps, n_t, row_index, video_velocity,
                                           audio_velocity, status);
    if (rc == H3_OK) rc = h3_backend_check(dit->b, status);
    if (rc != H3_OK) return rc;
    h3_tensor *tables = calloc((size_t)dit->cfg.num_layers + 1, sizeof *tables);
    if (!tables) return h3_fail(status, H3_ERR_NO_MEMORY, "dit forward: out of memory");
    size_t mark = h3_arena_mark(dit->b);
    modulation m = {.blocks = tables};
    h3_tensor block_sel, final_sel;
    rc = compute_modulation(dit, timesteps, n_t, &m, status);
    if (rc == H3_OK) rc = upload_selectors(dit, row_index, &block_sel, &final_sel, status);
    if (rc == H3_OK)
        rc = run_blocks(dit, video_rows, audio_rows, &m, n_t, &block_sel, &final_sel, video_velocity, audio_velocity,
                        status);
    h3_arena_reset(dit->b, mark);
    free(tables);
    return rc;
}
