/* h3_dit_plan.c - the transformer's configuration, its checkpoint layout and
 * the plan of its weights (h3_dit_plan.h, h3_dit_plan_impl.h).
 *
 * Both checkpoint layouts are read through one plan (h3_dit_weights_walk):
 * the list of every tensor the model holds, its checkpoint name(s) in each
 * layout, its shape, how it is rearranged and how tensor parallelism splits
 * it. In memory every block keeps
 *   qkv [3·inner, D]  rows [q_all; k_all; v_all] (one allocation, three GEMMs
 *                     on row views; a backend may fuse them later)
 *   fc1 [2·F, D]      rows [value; gate] (the diffusers order)
 * Precision islands follow the release: proj_in, audio_proj_in,
 * time_embedder, proj_out, audio_proj_out are F32; everything else is the
 * backend's compute dtype. */
#include "model/h3_dit_plan.h"

#include <glib.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/h3_config.h"
#include "model/h3_dit_plan_impl.h"

/* ---- config ----------------------------------------------------------------- */

typedef struct config_key {
    const char *diffusers, *native;
    size_t offset;
    double min, max;      /* the accepted range (docs/RELIABILITY.md, "Ranges and files") */
    double default_value; /* float keys only */
} config_key;

/* The ranges hold the release (50 layers, D 5376, 56 x 128 heads, F 14336)
 * with room to spare, and keep every width the plan multiplies (3·heads·
 * head_dim, 2·F, 18·D) far inside int32: a count past them is a config
 * error naming the key, not a wrapped width or "out of memory". */
static const config_key int_keys[] = {
    {"num_layers", "num_layers", offsetof(h3_dit_config, num_layers), 1, 1024, 0},
    {"num_refiner_layers", "token_refiner_num_layers", offsetof(h3_dit_config, num_refiner_layers), 0, 64, 0},
    {"hidden_size", "hidden_size", offsetof(h3_dit_config, hidden_size), 1, 65536, 0},
    {"num_attention_heads", "num_attention_heads", offsetof(h3_dit_config, num_heads), 1, 1024, 0},
    {"attention_head_dim", "attention_head_dim", offsetof(h3_dit_config, head_dim), 1, 1024, 0},
    {"ffn_dim", "ffn_hidden_size", offsetof(h3_dit_config, ffn_dim), 1, 1 << 20, 0},
    {"in_channels", "latents_dim", offsetof(h3_dit_config, in_channels), 1, 4096, 0},
    {"audio_in_channels", "audio_latents_dim", offsetof(h3_dit_config, audio_in_channels), 1, 4096, 0},
    {"text_dim", "text_dim", offsetof(h3_dit_config, text_dim), 1, 65536, 0},
    {"freq_dim", "timestep_input_dim", offsetof(h3_dit_config, freq_dim), 2, 65536, 0},
    {"time_embed_hidden_dim", "time_embed_hidden_size", offsetof(h3_dit_config, time_embed_hidden_dim), 1, 65536, 0},
    {"time_embed_dim", "time_embed_dim", offsetof(h3_dit_config, time_embed_dim), 1, 65536, 0},
    {"rope_freq_dim", "rope_inv_freq_len", offsetof(h3_dit_config, rope_freq_dim), 1, 1024, 0},
};

/* Optional in both namings; the defaults are the model class's (docs/spec/h3-transformer.md §1). The
 * native config has no rope_theta: the reference hard-codes 10000. A value
 * past float's range would become inf when stored. */
static const config_key float_keys[] = {
    {"rope_theta", "rope_theta", offsetof(h3_dit_config, rope_theta), 1e-3, 1e12, 10000.0},
    {"norm_eps", "norm_eps", offsetof(h3_dit_config, norm_eps), 1e-30, 1, 1e-5},
    {"qk_norm_eps", "qk_norm_eps", offsetof(h3_dit_config, qk_norm_eps), 1e-30, 1, 1e-5},
    {"final_norm_eps", "final_norm_eps", offsetof(h3_dit_config, final_norm_eps), 1e-30, 1, 1e-5},
};

/* patch_size [t, h, w]: t is 1 (h3_dit_config_check), h and w at most this. */
#define H3_DIT_MAX_PATCH 64

h3_status_code h3_dit_config_check(const char *path, const h3_dit_config *c, h3_status *status) {
    for (size_t i = 0; i < sizeof int_keys / sizeof int_keys[0]; i++) {
        int v = *(const int *)((const char *)c + int_keys[i].offset);
        h3_status_code rc = h3_config_check_range(path, int_keys[i].diffusers, v, (int64_t)int_keys[i].min,
                                                  (int64_t)int_keys[i].max, status);
        if (rc != H3_OK) return rc;
    }
    for (size_t i = 0; i < sizeof float_keys / sizeof float_keys[0]; i++) {
        float v = *(const float *)((const char *)c + float_keys[i].offset);
        if (!(v >= float_keys[i].min && v <= float_keys[i].max))
            return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" is %g, outside [%g, %g]", path, float_keys[i].diffusers,
                           (double)v, float_keys[i].min, float_keys[i].max);
    }
    if (c->patch_t != 1 || c->patch_h <= 0 || c->patch_w <= 0 || c->patch_h > H3_DIT_MAX_PATCH ||
        c->patch_w > H3_DIT_MAX_PATCH)
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
    int64_t v = H3_DIT_ADALN_WIDTH(cfg->hidden_size);
    h3_status_code rc = h3_config_int_or(c, "adaln_out_features", &v, status);
    if (rc != H3_OK) return rc;
    if (v != H3_DIT_ADALN_WIDTH(cfg->hidden_size))
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

/* The native config names its keys differently (config_key.native). */
static int native_naming(const h3_config *c) {
    return h3_config_has(c, "token_refiner_num_layers") || h3_config_has(c, "latents_dim");
}

static h3_status_code read_config(h3_config *c, const char *path, h3_dit_config *cfg, h3_status *status) {
    int native = native_naming(c);
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < sizeof int_keys / sizeof int_keys[0]; i++) {
        int64_t v;
        const char *key = native ? int_keys[i].native : int_keys[i].diffusers;
        h3_status_code rc = h3_config_int_range(c, key, (int64_t)int_keys[i].min, (int64_t)int_keys[i].max, &v, status);
        if (rc != H3_OK) return rc;
        *(int *)((char *)cfg + int_keys[i].offset) = (int)v;
    }
    for (size_t i = 0; i < sizeof float_keys / sizeof float_keys[0]; i++) {
        double v = float_keys[i].default_value;
        const char *key = native ? float_keys[i].native : float_keys[i].diffusers;
        h3_status_code rc = h3_config_double_range_or(c, key, float_keys[i].min, float_keys[i].max, &v, status);
        if (rc != H3_OK) return rc;
        *(float *)((char *)cfg + float_keys[i].offset) = (float)v;
    }
    int64_t patch[3] = {1, 2, 2};
    int n = 3;
    if (h3_config_has(c, "patch_size")) {
        h3_status_code rc = h3_config_int_array_range(c, "patch_size", 1, H3_DIT_MAX_PATCH, patch, 3, &n, status);
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
    return h3_dit_config_check(path, cfg, status);
}

h3_status_code h3_dit_config_layout(const char *dir, h3_dit_checkpoint_layout *layout, h3_status *status) {
    char *path = g_build_filename(dir, "config.json", NULL);
    h3_config *c = NULL;
    h3_status_code rc = h3_config_load(path, &c, status);
    if (rc == H3_OK) *layout = native_naming(c) ? H3_DIT_NATIVE : H3_DIT_DIFFUSERS;
    h3_config_free(c);
    g_free(path);
    return rc;
}

void h3_dit_gate_name(h3_dit_checkpoint_layout layout, int block, char *name, size_t size) {
    snprintf(name, size, layout == H3_DIT_NATIVE ? "blocks.%d.attn.to_gate_compress.weight"
                                                 : "transformer_blocks.%d.attn.to_gate_compress.weight", block);
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

typedef struct plan {
    const h3_dit_config *cfg;
    h3_dit_checkpoint_layout layout;
    h3_dit_request_fn fn;
    void *user;
    h3_status *status;
    h3_status_code rc; /* first failure; later requests are skipped */
} plan;

static void submit(plan *p, h3_dit_request *r) {
    if (p->rc == H3_OK) p->rc = p->fn(r, p->user, p->status);
}

/* One tensor named `name` (already in the plan's layout), split by role
 * across tensor-parallel ranks. d1 == 0: 1-D. */
static void want_split(plan *p, h3_tensor *dst, h3_weight_type type, h3_dit_source kind, h3_tp_role role, int64_t d0,
                       int64_t d1, const char *name) {
    h3_dit_request r = {.kind = kind, .n_names = 1, .ndim = d1 ? 2 : 1, .shape = {d0, d1}, .type = type,
                        .role = role, .dst = dst};
    snprintf(r.names[0], sizeof r.names[0], "%s", name);
    submit(p, &r);
}

static void want(plan *p, h3_tensor *dst, h3_weight_type type, h3_dit_source kind, int64_t d0, int64_t d1,
                 const char *name) {
    want_split(p, dst, type, kind, H3_TP_REPLICATED, d0, d1, name);
}

/* `diffusers` or `native`, by the plan's layout. */
static void want2(plan *p, h3_tensor *dst, h3_weight_type type, int64_t d0, int64_t d1, const char *diffusers,
                  const char *native) {
    want(p, dst, type, H3_DIT_SOURCE_PLAIN, d0, d1, p->layout == H3_DIT_NATIVE ? native : diffusers);
}

#define DST(blk, field) ((blk) ? &(blk)->field : NULL)

/* One block; prefix is "transformer_blocks.3." style for the plan's layout. */
static void want_block(plan *p, h3_dit_block *blk, const char *prefix, int with_adaln) {
    const h3_dit_config *c = p->cfg;
    int64_t D = c->hidden_size, inner = (int64_t)c->num_heads * c->head_dim, F = c->ffn_dim;
    int native = p->layout == H3_DIT_NATIVE;
    char name[192];
#define NAME(suffix) (snprintf(name, sizeof name, "%s%s", prefix, suffix), name)
    want(p, DST(blk, norm1), H3_WEIGHT_DEFAULT, H3_DIT_SOURCE_PLAIN, D, 0, NAME("norm1.weight"));
    want(p, DST(blk, norm2), H3_WEIGHT_DEFAULT, H3_DIT_SOURCE_PLAIN, D, 0, NAME("norm2.weight"));
    if (native) {
        want_split(p, DST(blk, qkv), H3_WEIGHT_LINEAR, H3_DIT_SOURCE_QKV, H3_TP_QKV, 3 * inner, D,
                   NAME("attn.qkv_proj.weight"));
    } else {
        h3_dit_request r = {.kind = H3_DIT_SOURCE_QKV, .n_names = 3, .ndim = 2, .shape = {inner, D},
                            .type = H3_WEIGHT_LINEAR, .role = H3_TP_QKV, .dst = DST(blk, qkv)};
        snprintf(r.names[0], sizeof r.names[0], "%sattn.to_q.weight", prefix);
        snprintf(r.names[1], sizeof r.names[1], "%sattn.to_k.weight", prefix);
        snprintf(r.names[2], sizeof r.names[2], "%sattn.to_v.weight", prefix);
        submit(p, &r);
    }
    want(p, DST(blk, norm_q), H3_WEIGHT_DEFAULT, H3_DIT_SOURCE_PLAIN, c->head_dim, 0,
         NAME(native ? "attn.q_norm.weight" : "attn.norm_q.weight"));
    want(p, DST(blk, norm_k), H3_WEIGHT_DEFAULT, H3_DIT_SOURCE_PLAIN, c->head_dim, 0,
         NAME(native ? "attn.k_norm.weight" : "attn.norm_k.weight"));
    want_split(p, DST(blk, out), H3_WEIGHT_LINEAR, H3_DIT_SOURCE_PLAIN, H3_TP_OUT, D, inner,
               NAME(native ? "attn.out_proj.weight" : "attn.to_out.0.weight"));
    want_split(p, DST(blk, fc1), H3_WEIGHT_LINEAR, native ? H3_DIT_SOURCE_FC1 : H3_DIT_SOURCE_PLAIN, H3_TP_FFN_IN,
               2 * F, D, NAME(native ? "mlp.fc1.weight" : "ff.net.0.proj.weight"));
    want_split(p, DST(blk, fc2), H3_WEIGHT_LINEAR, H3_DIT_SOURCE_PLAIN, H3_TP_FFN_OUT, D, F,
               NAME(native ? "mlp.fc2.weight" : "ff.net.2.weight"));
    if (with_adaln) {
        int64_t A = H3_DIT_ADALN_WIDTH(D);
        want_split(p, DST(blk, adaln_w), H3_WEIGHT_LINEAR, H3_DIT_SOURCE_PLAIN, H3_TP_GATHER, A, c->time_embed_dim,
                   NAME("adaln_proj.linear.weight"));
        want_split(p, DST(blk, adaln_b), H3_WEIGHT_DEFAULT, H3_DIT_SOURCE_PLAIN, H3_TP_GATHER, A, 0,
                   NAME("adaln_proj.linear.bias"));
    }
#undef NAME
}

h3_status_code h3_dit_weights_walk(const h3_dit_config *c, h3_dit_checkpoint_layout layout, h3_dit_weights *w,
                                   h3_dit_request_fn fn, void *user, h3_status *status) {
    plan p = {.cfg = c, .layout = layout, .fn = fn, .user = user, .status = status, .rc = H3_OK};
    int64_t D = c->hidden_size, Te = c->time_embed_dim, Th = c->time_embed_hidden_dim;
    int64_t video_features = (int64_t)c->in_channels * c->patch_t * c->patch_h * c->patch_w;
    const h3_weight_type F32 = H3_WEIGHT_F32, DEF = H3_WEIGHT_DEFAULT;
    char prefix[96];

    want2(&p, DST(w, proj_in_w), F32, D, video_features, "proj_in.weight", "video_patch_proj.weight");
    want2(&p, DST(w, proj_in_b), F32, D, 0, "proj_in.bias", "video_patch_proj.bias");
    want2(&p, DST(w, audio_in_w), F32, D, c->audio_in_channels, "audio_proj_in.weight", "audio_patch_proj.weight");
    want2(&p, DST(w, audio_in_b), F32, D, 0, "audio_proj_in.bias", "audio_patch_proj.bias");
    want2(&p, DST(w, context_w), DEF, D, c->text_dim, "context_embedder.weight", "condition_proj.weight");
    want2(&p, DST(w, context_b), DEF, D, 0, "context_embedder.bias", "condition_proj.bias");
    want2(&p, DST(w, time1_w), F32, Th, c->freq_dim, "time_embedder.linear_1.weight", "time_embedder.proj_in.weight");
    want2(&p, DST(w, time1_b), F32, Th, 0, "time_embedder.linear_1.bias", "time_embedder.proj_in.bias");
    want2(&p, DST(w, time2_w), F32, Te, Th, "time_embedder.linear_2.weight", "time_embedder.proj_out.weight");
    want2(&p, DST(w, time2_b), F32, Te, 0, "time_embedder.linear_2.bias", "time_embedder.proj_out.bias");
    for (int i = 0; i < c->num_refiner_layers; i++) {
        snprintf(prefix, sizeof prefix, layout == H3_DIT_NATIVE ? "token_refiner.blocks.%d." : "token_refiner.refiner_blocks.%d.", i);
        want_block(&p, w ? &w->refiner[i] : NULL, prefix, 0);
    }
    want2(&p, DST(w, refiner_norm), DEF, D, 0, "token_refiner.final_norm.weight", "token_refiner.final_norm.weight");
    for (int i = 0; i < c->num_layers; i++) {
        snprintf(prefix, sizeof prefix, layout == H3_DIT_NATIVE ? "blocks.%d." : "transformer_blocks.%d.", i);
        want_block(&p, w ? &w->blocks[i] : NULL, prefix, 1);
    }
    want2(&p, DST(w, out_norm), DEF, D, 0, "norm_out.norm.weight", "final_layer.norm.weight");
    want2(&p, DST(w, out_adaln_w), DEF, 2 * D, Te, "norm_out.linear.weight", "final_layer.adaln_proj.linear.weight");
    want2(&p, DST(w, out_adaln_b), DEF, 2 * D, 0, "norm_out.linear.bias", "final_layer.adaln_proj.linear.bias");
    want2(&p, DST(w, proj_out_w), F32, video_features, D, "proj_out.weight", "final_layer.video_out.weight");
    want2(&p, DST(w, proj_out_b), F32, video_features, 0, "proj_out.bias", "final_layer.video_out.bias");
    want2(&p, DST(w, audio_out_w), F32, c->audio_in_channels, D, "audio_proj_out.weight",
          "final_layer.audio_out.weight");
    want2(&p, DST(w, audio_out_b), F32, c->audio_in_channels, 0, "audio_proj_out.bias", "final_layer.audio_out.bias");
    return p.rc;
}

typedef struct list_ctx {
    h3_dit_tensor_fn fn;
    void *user;
} list_ctx;

static h3_status_code list_request(const h3_dit_request *r, void *user, h3_status *status) {
    list_ctx *l = user;
    for (int i = 0; i < r->n_names; i++) l->fn(r->names[i], r->ndim, r->shape, l->user);
    return H3_OK;
}

void h3_dit_checkpoint_plan(const h3_dit_config *cfg, h3_dit_checkpoint_layout layout, h3_dit_tensor_fn fn,
                            void *user) {
    list_ctx l = {fn, user};
    h3_dit_weights_walk(cfg, layout, NULL, list_request, &l, NULL);
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
