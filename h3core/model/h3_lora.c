/* h3_lora.c - user LoRAs: the key grammar of each layout, the mapping onto
 * the transformer's in-memory weights, the checks, and the fusion into a
 * loaded DiT (h3_lora.h).
 *
 * Mapping. Every linear a LoRA may target is one module of a table built
 * from the config, under its diffusers name, its original-checkpoint name
 * and (for kohya) both flattened with '_'. Each entry names the in-memory
 * weight (h3_dit_plan_impl.h: qkv [q; k; v], fc1 [value; gate]) and where
 * the module's B rows land in it: to_q at rows [0, inner), qkv_proj's rows
 * reordered from its per-head interleaved order to [q; k; v] (as the
 * loader reorders the base weight), mlp.fc1's halves swapped. So the
 * checkpoint layout of the base model does not matter: the LoRA is placed
 * on the weights as loaded.
 *
 * Fusion. The weights are changed in place, by the difference between the
 * set asked for and the set in force (new minus old strength per LoRA),
 * accumulated in float32 over the weight read back and rounded once. A
 * weight's rounding is then that of a fresh fusion plus one more per
 * change: exact to float32 rounding on the CPU backend, within one BF16
 * ulp per change on CUDA (docs/ARCHITECTURE.md, h3_lora, has the
 * measurements and why this beats unfused GEMMs here).
 *
 * Tensor parallelism: each rank changes its shard (q/k/v rows of its
 * heads, fc1 rows of its FFN slice, AdaLN rows of its slice, out and fc2
 * columns; shard_of), with no collective: the ranks' calls are independent.
 *
 * memory=stream: the blocks' weights live in host memory; they are fused
 * there (update_host_weight), the resident rest with the backend's ops.
 *
 * Not yet: FP8 weights (un-fusing E4M3 codes re-quantises the row: fuse at
 * load instead), refused with H3_ERR_UNSUPPORTED. */
#include "model/h3_lora.h"

#include <cblas.h>
#include <glib.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/h3_json.h"
#include "base/h3_safetensors.h"
#include "model/h3_dit_impl.h"

/* ---- the model's modules ---------------------------------------------------------- */

typedef enum wparam {
    W_QKV = 0, W_OUT, W_FC1, W_FC2, W_ADALN,                             /* per block */
    W_PROJ_IN, W_AUDIO_IN, W_CONTEXT, W_TIME1, W_TIME2, W_OUT_ADALN, W_PROJ_OUT, W_AUDIO_OUT /* global */
} wparam;

typedef enum section { SEC_GLOBAL = 0, SEC_REFINER, SEC_BLOCK } section;

/* One in-memory weight. */
typedef struct wtarget {
    section sec;
    int block;
    wparam param;
} wtarget;

/* B rows [b0, b0 + n) land at rows [t0, t0 + n) of the weight. */
typedef struct piece {
    int64_t b0, t0, n;
} piece;

/* A module a LoRA may target. */
typedef struct module_def {
    char *name;         /* diffusers name: the one messages and h3_lora_delta_f32 use */
    wtarget t;
    int64_t rows, cols; /* the whole weight */
    int64_t out;        /* B's rows */
    int n_pieces;
    piece pieces[2];
    int qkv_head_dim;   /* > 0: B's rows are the original per-head interleaved qkv_proj order */
} module_def;

typedef struct module_table {
    GPtrArray *defs;     /* module_def * */
    GHashTable *by_name; /* dotted names (diffusers and original) -> module_def * */
    GHashTable *by_flat; /* the same flattened with '_' (kohya) -> module_def * */
} module_table;

static void free_def(gpointer p) {
    module_def *d = p;
    g_free(d->name);
    g_free(d);
}

static void table_free(module_table *t) {
    if (t->by_name) g_hash_table_destroy(t->by_name);
    if (t->by_flat) g_hash_table_destroy(t->by_flat);
    if (t->defs) g_ptr_array_free(t->defs, TRUE);
}

static char *flatten(const char *name) {
    char *f = g_strdup(name);
    for (char *p = f; *p; p++)
        if (*p == '.') *p = '_';
    return f;
}

/* Registers a module under its names (diffusers first). */
static module_def *add_def(module_table *t, wtarget w, int64_t rows, int64_t cols, const char *diffusers,
                           const char *original) {
    module_def *d = g_new0(module_def, 1);
    d->name = g_strdup(diffusers);
    d->t = w;
    d->rows = rows;
    d->cols = cols;
    d->out = rows;
    d->n_pieces = 1;
    d->pieces[0] = (piece){0, 0, rows};
    g_ptr_array_add(t->defs, d);
    const char *names[2] = {diffusers, original};
    for (int i = 0; i < 2; i++) {
        if (!names[i]) continue;
        g_hash_table_insert(t->by_name, g_strdup(names[i]), d);
        g_hash_table_insert(t->by_flat, flatten(names[i]), d);
    }
    return d;
}

static void add_block(module_table *t, const h3_dit_config *c, section sec, int i) {
    int64_t D = c->hidden_size, inner = (int64_t)c->num_heads * c->head_dim, F = c->ffn_dim;
    const char *dp = sec == SEC_BLOCK ? "transformer_blocks" : "token_refiner.refiner_blocks";
    const char *np = sec == SEC_BLOCK ? "blocks" : "token_refiner.blocks";
    char dn[160], nn[160];
#define NAMES(d, n) (snprintf(dn, sizeof dn, "%s.%d.%s", dp, i, d), snprintf(nn, sizeof nn, "%s.%d.%s", np, i, n))
    static const char *const qkv[3] = {"attn.to_q", "attn.to_k", "attn.to_v"};
    for (int p = 0; p < 3; p++) {
        snprintf(dn, sizeof dn, "%s.%d.%s", dp, i, qkv[p]);
        module_def *d = add_def(t, (wtarget){sec, i, W_QKV}, 3 * inner, D, dn, NULL);
        d->out = inner;
        d->pieces[0] = (piece){0, p * inner, inner};
    }
    /* The original qkv_proj: B [3·inner, r] in its per-head interleaved
     * order (rows h·3dh + [0, dh) q of head h, then k, v), as the base
     * weight; reordered to [q; k; v] at open, then in thirds on to_q/k/v. */
    snprintf(dn, sizeof dn, "%s.%d.attn.qkv_proj", np, i);
    add_def(t, (wtarget){sec, i, W_QKV}, 3 * inner, D, dn, NULL)->qkv_head_dim = c->head_dim;
    NAMES("attn.to_out.0", "attn.out_proj");
    add_def(t, (wtarget){sec, i, W_OUT}, D, inner, dn, nn);
    NAMES("ff.net.0.proj", "mlp.fc1");
    add_def(t, (wtarget){sec, i, W_FC1}, 2 * F, D, dn, NULL);
    /* mlp.fc1's B is [gate; value]; the model holds [value; gate]. */
    module_def *fc1 = add_def(t, (wtarget){sec, i, W_FC1}, 2 * F, D, nn, NULL);
    fc1->n_pieces = 2;
    fc1->pieces[0] = (piece){0, F, F};
    fc1->pieces[1] = (piece){F, 0, F};
    NAMES("ff.net.2", "mlp.fc2");
    add_def(t, (wtarget){sec, i, W_FC2}, D, F, dn, nn);
    if (sec == SEC_BLOCK) {
        NAMES("adaln_proj.linear", "adaln_proj.linear");
        add_def(t, (wtarget){sec, i, W_ADALN}, H3_DIT_ADALN_WIDTH(D), c->time_embed_dim, dn, nn);
    }
#undef NAMES
}

static void table_build(module_table *t, const h3_dit_config *c) {
    t->defs = g_ptr_array_new_with_free_func(free_def);
    t->by_name = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    t->by_flat = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    int64_t D = c->hidden_size, vf = (int64_t)c->in_channels * c->patch_t * c->patch_h * c->patch_w;
    static const struct {
        wparam p;
        const char *diffusers, *original;
    } globals[] = {
        {W_PROJ_IN, "proj_in", "video_patch_proj"},
        {W_AUDIO_IN, "audio_proj_in", "audio_patch_proj"},
        {W_CONTEXT, "context_embedder", "condition_proj"},
        {W_TIME1, "time_embedder.linear_1", "time_embedder.proj_in"},
        {W_TIME2, "time_embedder.linear_2", "time_embedder.proj_out"},
        {W_OUT_ADALN, "norm_out.linear", "final_layer.adaln_proj.linear"},
        {W_PROJ_OUT, "proj_out", "final_layer.video_out"},
        {W_AUDIO_OUT, "audio_proj_out", "final_layer.audio_out"},
    };
    const int64_t shapes[][2] = {
        {D, vf}, {D, c->audio_in_channels}, {D, c->text_dim}, {c->time_embed_hidden_dim, c->freq_dim},
        {c->time_embed_dim, c->time_embed_hidden_dim}, {2 * D, c->time_embed_dim}, {vf, D}, {c->audio_in_channels, D},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(globals); i++)
        add_def(t, (wtarget){SEC_GLOBAL, 0, globals[i].p}, shapes[i][0], shapes[i][1], globals[i].diffusers,
                globals[i].original);
    for (int i = 0; i < c->num_refiner_layers; i++) add_block(t, c, SEC_REFINER, i);
    for (int i = 0; i < c->num_layers; i++) add_block(t, c, SEC_BLOCK, i);
}

/* ---- the parsed LoRA ------------------------------------------------------------------- */

typedef enum role { ROLE_A = 0, ROLE_B, ROLE_ALPHA, ROLE_DORA } role;

typedef struct lora_module {
    char *key_module;   /* the module as the file spells it (prefix included) */
    size_t bare;        /* where the name past the prefix starts (PEFT patterns match it) */
    const module_def *def;
    h3_lora_partition partition;
    const h3_st_tensor *t[3]; /* A, B, alpha */
    int rank;
    float scale;        /* alpha / rank */
    float *A, *B;       /* float32 copies [rank, in], [out, rank] */
} lora_module;

struct h3_lora {
    gint refs;
    char *path;
    h3_st_file *file;
    dev_t dev;
    ino_t ino;
    h3_lora_layout layout;
    h3_dit_config cfg;
    module_table table;
    GPtrArray *modules;    /* lora_module *, in file order */
    GHashTable *by_module; /* key_module -> lora_module * */
    int n_dropped;
    const char *first_dropped;
    int n_modules[2];
};

static void free_module(gpointer p) {
    lora_module *m = p;
    g_free(m->key_module);
    free(m->A);
    free(m->B);
    g_free(m);
}

h3_lora *h3_lora_ref(h3_lora *l) {
    if (l) g_atomic_int_inc(&l->refs);
    return l;
}

void h3_lora_unref(h3_lora *l) {
    if (!l || !g_atomic_int_dec_and_test(&l->refs)) return;
    if (l->by_module) g_hash_table_destroy(l->by_module);
    if (l->modules) g_ptr_array_free(l->modules, TRUE);
    table_free(&l->table);
    h3_st_close(l->file);
    g_free(l->path);
    g_free(l);
}

const char *h3_lora_path(const h3_lora *l) { return l->path; }
h3_lora_layout h3_lora_get_layout(const h3_lora *l) { return l->layout; }
int h3_lora_module_count(const h3_lora *l, h3_lora_partition p) { return l->n_modules[p == H3_LORA_REF]; }

int h3_lora_dropped_count(const h3_lora *l, const char **first) {
    if (first) *first = l->first_dropped;
    return l->n_dropped;
}

const char *h3_lora_layout_name(h3_lora_layout layout) {
    static const char *const names[] = {"PEFT/diffusers", "original checkpoint names", "kohya/musubi", "DiffSynth"};
    return layout >= 0 && layout < H3_LORA_LAYOUTS ? names[layout] : "unknown";
}

/* ---- key grammar ------------------------------------------------------------------------ */

static const struct {
    const char *suffix;
    role role;
    int down_up; /* the kohya/original spelling */
} suffixes[] = {
    {".lora_A.default.weight", ROLE_A, 0}, {".lora_B.default.weight", ROLE_B, 0},
    {".lora_A.weight", ROLE_A, 0},         {".lora_B.weight", ROLE_B, 0},
    {".lora_down.weight", ROLE_A, 1},      {".lora_up.weight", ROLE_B, 1},
    {".alpha", ROLE_ALPHA, 1},             {".dora_scale", ROLE_DORA, 0},
    {".lora_magnitude_vector.default.weight", ROLE_DORA, 0}, {".lora_magnitude_vector.weight", ROLE_DORA, 0},
    {".lora_magnitude_vector", ROLE_DORA, 0},
};

/* Prefixes of text-encoder LoRAs (diffusers, kohya, ComfyUI). */
static const char *const text_encoder_prefixes[] = {"text_encoder.", "text_encoder_2.", "lora_te_", "lora_te1_",
                                                    "lora_te2_", "te.", "text_model.", "cond_stage_model.",
                                                    "conditioner.", "lora_te.", "text_encoders."};

typedef enum prefix_class { PFX_PEFT = 0, PFX_ORIGINAL, PFX_KOHYA, PFX_BARE } prefix_class;

typedef struct parsed_key {
    role role;
    int down_up;
    prefix_class pfx;
    h3_lora_partition partition;
    char *module;       /* the full module (prefix included) */
    const char *bare;   /* into module: past the prefix */
} parsed_key;

static int parse_suffix(const char *name, role *r, int *down_up, size_t *module_len) {
    size_t n = strlen(name);
    for (size_t i = 0; i < G_N_ELEMENTS(suffixes); i++) {
        size_t s = strlen(suffixes[i].suffix);
        if (n > s && strcmp(name + n - s, suffixes[i].suffix) == 0) {
            *r = suffixes[i].role;
            *down_up = suffixes[i].down_up;
            *module_len = n - s;
            return 1;
        }
    }
    return 0;
}

static void parse_prefix(parsed_key *k) {
    static const struct {
        const char *prefix;
        prefix_class pfx;
        h3_lora_partition partition;
    } prefixes[] = {
        {"transformer_ref.", PFX_PEFT, H3_LORA_REF}, {"transformer.", PFX_PEFT, H3_LORA_MAIN},
        {"base_model.model.", PFX_PEFT, H3_LORA_MAIN}, {"diffusion_model.", PFX_ORIGINAL, H3_LORA_MAIN},
        {"lora_unet_", PFX_KOHYA, H3_LORA_MAIN},
    };
    k->pfx = PFX_BARE;
    k->partition = H3_LORA_MAIN;
    k->bare = k->module;
    for (size_t i = 0; i < G_N_ELEMENTS(prefixes); i++)
        if (g_str_has_prefix(k->module, prefixes[i].prefix)) {
            k->pfx = prefixes[i].pfx;
            k->partition = prefixes[i].partition;
            k->bare = k->module + strlen(prefixes[i].prefix);
            return;
        }
}

static int is_text_encoder_key(const char *name) {
    for (size_t i = 0; i < G_N_ELEMENTS(text_encoder_prefixes); i++)
        if (g_str_has_prefix(name, text_encoder_prefixes[i])) return 1;
    return 0;
}

static int is_float(h3_st_dtype d) { return d == H3_ST_F32 || d == H3_ST_BF16 || d == H3_ST_F16; }

/* The module table's entry for a key's module: kohya names are flattened,
 * the others dotted. */
static const module_def *lookup(const h3_lora *l, const parsed_key *k) {
    return g_hash_table_lookup(k->pfx == PFX_KOHYA ? l->table.by_flat : l->table.by_name, k->bare);
}

static h3_status_code classify(h3_lora *l, const h3_st_tensor *t, int *seen_pfx, int *down_up_seen,
                               int *original_names, h3_status *status) {
    if (is_text_encoder_key(t->name))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "LoRA '%s': key '%s' is for the text encoder; only the "
                       "transformer takes LoRAs here", l->path, t->name);
    parsed_key k = {0};
    size_t len;
    if (!parse_suffix(t->name, &k.role, &k.down_up, &len))
        return h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': unknown key '%s' (a LoRA key ends in .lora_A.weight / "
                       ".lora_B.weight, .lora_down.weight / .lora_up.weight or .alpha)", l->path, t->name);
    if (k.role == ROLE_DORA) {
        if (!l->n_dropped++) l->first_dropped = t->name;
        return H3_OK;
    }
    k.module = g_strndup(t->name, len);
    parse_prefix(&k);
    h3_status_code rc = H3_OK;
    const module_def *def = lookup(l, &k);
    if (*seen_pfx >= 0 && *seen_pfx != (int)k.pfx)
        rc = h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': key '%s' mixes key layouts in one file (an earlier key "
                     "had another prefix)", l->path, t->name);
    else if (!def)
        rc = h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': key '%s' maps to no linear of the MiniMax-H3 transformer "
                     "(%d blocks, %d refiner blocks)", l->path, t->name, l->cfg.num_layers,
                     l->cfg.num_refiner_layers);
    else if (!is_float(t->dtype))
        rc = h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': tensor '%s' has dtype %s (F32, BF16 or F16)", l->path,
                     t->name, h3_st_dtype_name(t->dtype));
    if (rc != H3_OK) {
        g_free(k.module);
        return rc;
    }
    *seen_pfx = (int)k.pfx;
    *down_up_seen |= k.down_up;
    *original_names |= strcmp(def->name, k.bare) != 0 && k.pfx != PFX_KOHYA;
    lora_module *m = g_hash_table_lookup(l->by_module, k.module);
    if (!m) {
        m = g_new0(lora_module, 1);
        m->key_module = k.module;
        m->def = def;
        m->partition = k.partition;
        m->bare = (size_t)(k.bare - k.module);
        g_ptr_array_add(l->modules, m);
        g_hash_table_insert(l->by_module, m->key_module, m);
    } else {
        g_free(k.module);
    }
    if (m->t[k.role])
        return h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': key '%s' repeats the %s of module '%s'", l->path, t->name,
                       k.role == ROLE_ALPHA ? "alpha" : k.role == ROLE_A ? "down (A) factor" : "up (B) factor",
                       m->key_module);
    m->t[k.role] = t;
    return H3_OK;
}

static h3_status_code classify_keys(h3_lora *l, h3_status *status) {
    l->modules = g_ptr_array_new_with_free_func(free_module);
    l->by_module = g_hash_table_new(g_str_hash, g_str_equal);
    int pfx = -1, down_up = 0, original = 0;
    for (size_t i = 0; i < h3_st_count(l->file); i++) {
        h3_status_code rc = classify(l, h3_st_at(l->file, i), &pfx, &down_up, &original, status);
        if (rc != H3_OK) return rc;
    }
    if (l->modules->len == 0)
        return h3_fail(status, H3_ERR_FORMAT, "LoRA '%s' holds no LoRA factor for the transformer%s", l->path,
                       l->n_dropped ? " (only DoRA keys, which are not supported)" : "");
    switch (pfx) {
    case PFX_PEFT: l->layout = H3_LORA_PEFT; break;
    case PFX_KOHYA: l->layout = H3_LORA_KOHYA; break;
    case PFX_ORIGINAL: l->layout = H3_LORA_ORIGINAL; break;
    default: l->layout = down_up || original ? H3_LORA_ORIGINAL : H3_LORA_DIFFSYNTH; break;
    }
    if (l->n_dropped)
        g_warning("LoRA '%s': %d DoRA key(s) dropped (first '%s'): the magnitude vectors are not applied", l->path,
                  l->n_dropped, l->first_dropped);
    return H3_OK;
}

/* ---- the header's LoraConfig ------------------------------------------------------------- */

typedef struct lora_config {
    JsonParser *parser;
    JsonObject *root;  /* lora_adapter_metadata, or NULL */
    double kohya_alpha; /* ss_network_alpha; NAN: not given */
} lora_config;

/* The value of `field` for a partition: "transformer.r" (diffusers packs
 * each component's config with its prefix), {"transformer": {"r": ...}}, or
 * a bare "r" (a plain PEFT LoraConfig). */
static JsonNode *config_field(const lora_config *c, h3_lora_partition p, const char *field) {
    if (!c->root) return NULL;
    const char *comp = p == H3_LORA_REF ? "transformer_ref" : "transformer";
    char key[96];
    snprintf(key, sizeof key, "%s.%s", comp, field);
    if (json_object_has_member(c->root, key)) return json_object_get_member(c->root, key);
    JsonNode *nested = json_object_get_member(c->root, comp);
    if (nested && JSON_NODE_HOLDS_OBJECT(nested) && json_object_has_member(json_node_get_object(nested), field))
        return json_object_get_member(json_node_get_object(nested), field);
    if (p == H3_LORA_MAIN && json_object_has_member(c->root, field)) return json_object_get_member(c->root, field);
    return NULL;
}

static int node_number(JsonNode *n, double *v) {
    if (!n || !JSON_NODE_HOLDS_VALUE(n)) return 0;
    GType t = json_node_get_value_type(n);
    if (t != G_TYPE_INT64 && t != G_TYPE_DOUBLE) return 0;
    *v = json_node_get_double(n);
    return 1;
}

/* A PEFT pattern matches a module named exactly it or ending in ".pattern". */
static int pattern_matches(const char *module, const char *pattern) {
    size_t m = strlen(module), p = strlen(pattern);
    if (p == 0 || p > m) return 0;
    return strcmp(module + m - p, pattern) == 0 && (m == p || module[m - p - 1] == '.');
}

/* The first entry of a pattern object matching the module. */
static JsonNode *pattern_value(JsonNode *patterns, const char *module) {
    if (!patterns || !JSON_NODE_HOLDS_OBJECT(patterns)) return NULL;
    JsonObject *o = json_node_get_object(patterns);
    GList *names = json_object_get_members(o);
    JsonNode *hit = NULL;
    for (GList *i = names; i && !hit; i = i->next)
        if (pattern_matches(module, i->data)) hit = json_object_get_member(o, i->data);
    g_list_free(names);
    return hit;
}

static h3_status_code read_config(h3_lora *l, lora_config *c, h3_status *status) {
    c->kohya_alpha = NAN;
    const char *meta = h3_st_metadata(l->file, "lora_adapter_metadata");
    if (!meta) meta = h3_st_metadata(l->file, "transformer_lora_adapter_metadata");
    if (meta) {
        h3_status_code rc = h3_json_parse(meta, -1, l->path, &c->parser, status);
        if (rc != H3_OK) return rc;
        JsonNode *root = json_parser_get_root(c->parser);
        if (!root || !JSON_NODE_HOLDS_OBJECT(root))
            return h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': __metadata__ lora_adapter_metadata is not a JSON object",
                           l->path);
        c->root = json_node_get_object(root);
    }
    const char *ss = h3_st_metadata(l->file, "ss_network_alpha");
    if (ss) {
        char *end;
        double v = g_ascii_strtod(ss, &end);
        if (!*ss || *end || !isfinite(v))
            return h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': __metadata__ ss_network_alpha '%s' is not a number",
                           l->path, ss);
        c->kohya_alpha = v;
    }
    return H3_OK;
}

/* The header's rank (0: none) and alpha (NAN: none) for a module. */
static h3_status_code header_rank_alpha(const h3_lora *l, const lora_config *c, const lora_module *m, double *rank,
                                        double *alpha, h3_status *status) {
    *rank = 0;
    *alpha = NAN;
    const char *bare = m->key_module + m->bare;
    JsonNode *r = pattern_value(config_field(c, m->partition, "rank_pattern"), bare);
    if (!r) r = config_field(c, m->partition, "r");
    JsonNode *a = pattern_value(config_field(c, m->partition, "alpha_pattern"), bare);
    if (!a) a = config_field(c, m->partition, "lora_alpha");
    if (r && (!node_number(r, rank) || !(*rank >= 0)))
        return h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': lora_adapter_metadata gives module '%s' a rank that is not "
                       "a number", l->path, m->key_module);
    if (a && (!node_number(a, alpha) || !isfinite(*alpha)))
        return h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': lora_adapter_metadata gives module '%s' an alpha that is "
                       "not a number", l->path, m->key_module);
    if (isnan(*alpha) && !isnan(c->kohya_alpha)) *alpha = c->kohya_alpha;
    return H3_OK;
}

/* ---- checks per module ---------------------------------------------------------------------- */

static h3_status_code check_shapes(const h3_lora *l, lora_module *m, h3_status *status) {
    const h3_st_tensor *A = m->t[ROLE_A], *B = m->t[ROLE_B], *alpha = m->t[ROLE_ALPHA];
    const module_def *d = m->def;
    if (!A || !B)
        return h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': module '%s' has no %s factor (key '%s' alone)", l->path,
                       m->key_module, A ? "up (lora_B / lora_up)" : "down (lora_A / lora_down)",
                       (A ? A : B ? B : alpha)->name);
    int64_t r = A->ndim == 2 ? A->shape[0] : 0, width = d->cols < d->out ? d->cols : d->out;
    if (A->ndim == 2 && B->ndim == 2 && A->shape[0] == B->shape[1] && (r < 1 || r > width))
        return h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': '%s' has rank %lld; module '%s' takes ranks 1..%lld",
                       l->path, A->name, (long long)r, d->name, (long long)width);
    if (A->ndim != 2 || B->ndim != 2 || A->shape[0] != B->shape[1] || A->shape[1] != d->cols || B->shape[0] != d->out)
        return h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': '%s' is [%lld, %lld] and '%s' [%lld, %lld]; the model's "
                       "'%s' wants [r, %lld] and [%lld, r] (a LoRA for another model?)", l->path, A->name,
                       (long long)A->shape[0], (long long)(A->ndim > 1 ? A->shape[1] : 0), B->name,
                       (long long)B->shape[0], (long long)(B->ndim > 1 ? B->shape[1] : 0), d->name,
                       (long long)d->cols, (long long)d->out);
    if (alpha && alpha->numel != 1)
        return h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': '%s' has %lld values, an alpha is one", l->path,
                       alpha->name, (long long)alpha->numel);
    m->rank = (int)r;
    return H3_OK;
}

/* alpha/rank past this is no LoRA anyone trained (they sit at 0.5..2, rsLoRA
 * at sqrt(rank)): a garbled alpha, refused before it scales weights to inf. */
#define MAX_SCALE 1e4

static h3_status_code set_scale(const h3_lora *l, const lora_config *c, lora_module *m, h3_status *status) {
    double rank, alpha;
    h3_status_code rc = header_rank_alpha(l, c, m, &rank, &alpha, status);
    if (rc != H3_OK) return rc;
    if (rank > 0 && rank != m->rank)
        return h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': lora_adapter_metadata says rank %g for '%s', its factors "
                       "have rank %d", l->path, rank, m->key_module, m->rank);
    if (m->t[ROLE_ALPHA]) {
        float v;
        if ((rc = h3_st_to_f32(m->t[ROLE_ALPHA], &v, 1, status)) != H3_OK) return rc;
        if (!isfinite(v))
            return h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': '%s' is %g", l->path, m->t[ROLE_ALPHA]->name, (double)v);
        alpha = v;
    }
    if (isnan(alpha)) alpha = m->rank;
    if (!(fabs(alpha / m->rank) <= MAX_SCALE))
        return h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': module '%s' has alpha %g for rank %d: alpha/rank outside "
                       "[-%g, %g]", l->path, m->key_module, alpha, m->rank, MAX_SCALE, MAX_SCALE);
    m->scale = (float)(alpha / m->rank);
    return H3_OK;
}

static float *read_finite(const h3_lora *l, const h3_st_tensor *t, h3_status *status) {
    float *v = malloc((size_t)t->numel * sizeof *v + 4);
    if (!v) {
        h3_fail(status, H3_ERR_NO_MEMORY, "LoRA '%s': out of memory for '%s'", l->path, t->name);
        return NULL;
    }
    if (h3_st_to_f32(t, v, (size_t)t->numel, status) != H3_OK) {
        free(v);
        return NULL;
    }
    for (int64_t i = 0; i < t->numel; i++)
        if (!isfinite(v[i])) {
            h3_fail(status, H3_ERR_NONFINITE, "LoRA '%s': '%s' holds %g at element %lld", l->path, t->name,
                    (double)v[i], (long long)i);
            free(v);
            return NULL;
        }
    return v;
}

/* Two modules of one partition may not write the same rows of a weight
 * (to_q and qkv_proj both, say). */
static h3_status_code check_overlaps(const h3_lora *l, h3_status *status) {
    for (guint i = 0; i < l->modules->len; i++) {
        const lora_module *a = g_ptr_array_index(l->modules, i);
        for (guint j = 0; j < i; j++) {
            const lora_module *b = g_ptr_array_index(l->modules, j);
            if (a->partition != b->partition || memcmp(&a->def->t, &b->def->t, sizeof a->def->t) != 0) continue;
            for (int p = 0; p < a->def->n_pieces; p++)
                for (int q = 0; q < b->def->n_pieces; q++) {
                    const piece *x = &a->def->pieces[p], *y = &b->def->pieces[q];
                    if (x->t0 < y->t0 + y->n && y->t0 < x->t0 + x->n)
                        return h3_fail(status, H3_ERR_FORMAT, "LoRA '%s': modules '%s' and '%s' both change rows of "
                                       "'%s'", l->path, b->key_module, a->key_module, a->def->name);
                }
        }
    }
    return H3_OK;
}

/* B of an original qkv_proj, rows h·3dh + p·dh + i, to [q; k; v]: rows
 * p·inner + h·dh + i (what the loader does to the base weight,
 * docs/spec/h3-transformer.md §2.4). */
static h3_status_code reorder_qkv(const h3_lora *l, lora_module *m, h3_status *status) {
    int64_t dh = m->def->qkv_head_dim, inner = m->def->out / 3, heads = inner / dh, r = m->rank;
    float *out = malloc((size_t)(m->def->out * r) * sizeof *out);
    if (!out) return h3_fail(status, H3_ERR_NO_MEMORY, "LoRA '%s': out of memory for '%s'", l->path, m->key_module);
    for (int64_t h = 0; h < heads; h++)
        for (int p = 0; p < 3; p++)
            memcpy(out + (p * inner + h * dh) * r, m->B + (h * 3 * dh + p * dh) * r, (size_t)(dh * r) * sizeof *out);
    free(m->B);
    m->B = out;
    return H3_OK;
}

static h3_status_code check_modules(h3_lora *l, h3_status *status) {
    lora_config c = {0};
    h3_status_code rc = read_config(l, &c, status);
    /* Every header-level check before any value is read. */
    for (guint i = 0; rc == H3_OK && i < l->modules->len; i++) rc = check_shapes(l, g_ptr_array_index(l->modules, i), status);
    if (rc == H3_OK) rc = check_overlaps(l, status);
    for (guint i = 0; rc == H3_OK && i < l->modules->len; i++) {
        lora_module *m = g_ptr_array_index(l->modules, i);
        rc = set_scale(l, &c, m, status);
        if (rc == H3_OK && !(m->A = read_finite(l, m->t[ROLE_A], status))) rc = status ? status->code : H3_ERR_FORMAT;
        if (rc == H3_OK && !(m->B = read_finite(l, m->t[ROLE_B], status))) rc = status ? status->code : H3_ERR_FORMAT;
        if (rc == H3_OK && m->def->qkv_head_dim > 0) rc = reorder_qkv(l, m, status);
        l->n_modules[m->partition == H3_LORA_REF]++;
    }
    if (c.parser) g_object_unref(c.parser);
    return rc;
}

h3_status_code h3_lora_open(const char *path, const h3_dit_config *cfg, h3_lora **out, h3_status *status) {
    *out = NULL;
    if (!path || !*path) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "LoRA: empty path");
    if (!cfg) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "LoRA '%s': no transformer config", path);
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return h3_fail(status, H3_ERR_NOT_FOUND, "LoRA '%s' does not exist or is not a file", path);
    h3_lora *l = g_new0(h3_lora, 1);
    l->refs = 1;
    l->path = g_strdup(path);
    l->dev = sb.st_dev;
    l->ino = sb.st_ino;
    l->cfg = *cfg;
    table_build(&l->table, cfg);
    /* The reader validates the header (length, JSON, ranges, no trailing
     * bytes) from the mapping without touching the data: a file of zeros
     * or a header that does not cover the file is refused here. */
    h3_status_code rc = h3_st_open(path, &l->file, status);
    if (rc == H3_OK) rc = classify_keys(l, status);
    if (rc == H3_OK) rc = check_modules(l, status);
    if (rc != H3_OK) {
        h3_lora_unref(l);
        return rc;
    }
    *out = l;
    return H3_OK;
}

/* ---- tensor parallelism: this rank's shard of a weight ----------------------------------------
 * The roles of h3_dit_plan.c's weights (h3_tp.h): qkv and fc1 are stacked
 * parts (3, 2) each split by rows, the AdaLN projection split by rows,
 * out and fc2 by columns; the rest replicated. */
typedef struct shard {
    int64_t rows, cols; /* of this rank's weight */
    int64_t c0;         /* its first column in the whole (column-parallel) */
    int n_pieces;
    piece pieces[6];    /* the module's B rows -> this rank's rows */
} shard;

static void shard_of(const module_def *d, const h3_tp *tp, shard *sh) {
    int parts = d->t.param == W_QKV ? 3 : d->t.param == W_FC1 ? 2 : d->t.param == W_ADALN ? 1 : 0;
    int by_cols = d->t.param == W_OUT || d->t.param == W_FC2;
    int n = tp->size > 1 ? tp->size : 1, r = tp->size > 1 ? tp->rank : 0;
    *sh = (shard){.rows = d->rows, .cols = d->cols, .c0 = 0, .n_pieces = 0};
    if (n == 1 || (!parts && !by_cols)) {
        sh->n_pieces = d->n_pieces;
        memcpy(sh->pieces, d->pieces, sizeof d->pieces);
        return;
    }
    if (by_cols) {
        sh->cols = d->cols / n;
        sh->c0 = r * sh->cols;
        sh->n_pieces = d->n_pieces;
        memcpy(sh->pieces, d->pieces, sizeof d->pieces);
        return;
    }
    int64_t P = d->rows / parts, Pl = P / n;
    sh->rows = d->rows / n;
    for (int i = 0; i < d->n_pieces; i++) {
        const piece *pc = &d->pieces[i];
        for (int p = 0; p < parts; p++) {
            int64_t lo = pc->t0 > p * P + r * Pl ? pc->t0 : p * P + r * Pl;
            int64_t hi = pc->t0 + pc->n < p * P + (r + 1) * Pl ? pc->t0 + pc->n : p * P + (r + 1) * Pl;
            if (lo < hi) sh->pieces[sh->n_pieces++] = (piece){pc->b0 + lo - pc->t0, p * Pl + lo - p * P - r * Pl, hi - lo};
        }
    }
}

/* ---- deltas ------------------------------------------------------------------------------ */

/* w (a shard [sh->rows, sh->cols] on the host) += coef·scale·B·A over the
 * shard's pieces and columns (float32 sgemm). */
static void add_module_host(float *w, const lora_module *m, const shard *sh, float coef) {
    int64_t r = m->rank, in = m->def->cols;
    for (int p = 0; p < sh->n_pieces; p++) {
        const piece *pc = &sh->pieces[p];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)pc->n, (int)sh->cols, (int)r, coef * m->scale,
                    m->B + pc->b0 * r, (int)r, m->A + sh->c0, (int)in, 1.0f, w + pc->t0 * sh->cols, (int)sh->cols);
    }
}

/* The table entry named `module` (its diffusers name). */
static const module_def *find_def(const module_table *t, const char *module) {
    for (guint i = 0; i < t->defs->len; i++) {
        const module_def *d = g_ptr_array_index(t->defs, i);
        if (strcmp(d->name, module) == 0) return d;
    }
    return NULL;
}

h3_status_code h3_lora_delta_f32(const h3_lora *l, const char *module, float **delta, int64_t *rows, int64_t *cols,
                                 h3_status *status) {
    *delta = NULL;
    const module_def *d = find_def(&l->table, module);
    if (!d) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "LoRA: '%s' is no module of the transformer", module);
    *rows = d->rows;
    *cols = d->cols;
    float *w = calloc((size_t)(d->rows * d->cols) + 1, sizeof *w);
    if (!w) return h3_fail(status, H3_ERR_NO_MEMORY, "LoRA: out of memory for the delta of '%s'", module);
    const h3_tp single = H3_TP_SINGLE;
    for (guint i = 0; i < l->modules->len; i++) {
        const lora_module *m = g_ptr_array_index(l->modules, i);
        if (m->partition != H3_LORA_MAIN || memcmp(&m->def->t, &d->t, sizeof d->t) != 0) continue;
        shard sh;
        shard_of(m->def, &single, &sh);
        add_module_host(w, m, &sh, 1.0f);
    }
    /* A to_q/to_k/to_v name asks for its own rows. */
    if (d->out != d->rows) {
        memmove(w, w + d->pieces[0].t0 * d->cols, (size_t)(d->out * d->cols) * sizeof *w);
        *rows = d->out;
    }
    *delta = w;
    return H3_OK;
}

/* ---- fusing into a DiT --------------------------------------------------------------------- */

struct h3_lora_set {
    h3_lora_use *uses;
    int n;
};
typedef struct h3_lora_set lora_set;

static h3_tensor *weight_of(h3_dit *dit, const wtarget *t) {
    h3_dit_weights *w = &dit->w;
    if (t->sec != SEC_GLOBAL) {
        h3_dit_block *b = t->sec == SEC_BLOCK ? &w->blocks[t->block] : &w->refiner[t->block];
        switch (t->param) {
        case W_QKV: return &b->qkv;
        case W_OUT: return &b->out;
        case W_FC1: return &b->fc1;
        case W_FC2: return &b->fc2;
        case W_ADALN: return &b->adaln_w;
        default: return NULL;
        }
    }
    switch (t->param) {
    case W_PROJ_IN: return &w->proj_in_w;
    case W_AUDIO_IN: return &w->audio_in_w;
    case W_CONTEXT: return &w->context_w;
    case W_TIME1: return &w->time1_w;
    case W_TIME2: return &w->time2_w;
    case W_OUT_ADALN: return &w->out_adaln_w;
    case W_PROJ_OUT: return &w->proj_out_w;
    case W_AUDIO_OUT: return &w->audio_out_w;
    default: return NULL;
    }
}

/* One LoRA's change: coef = new strength minus the one in force. */
typedef struct term {
    const h3_lora *lora;
    float coef;
} term;

/* The weights the terms touch, each once, in table order. */
static GPtrArray *touched_defs(const term *terms, int n) {
    GPtrArray *out = g_ptr_array_new();
    GHashTable *seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    for (int i = 0; i < n; i++) {
        const h3_lora *l = terms[i].lora;
        for (guint j = 0; j < l->modules->len; j++) {
            const lora_module *m = g_ptr_array_index(l->modules, j);
            char key[64];
            snprintf(key, sizeof key, "%d.%d.%d", m->def->t.sec, m->def->t.block, m->def->t.param);
            if (m->partition != H3_LORA_MAIN || g_hash_table_contains(seen, key)) continue;
            g_hash_table_add(seen, g_strdup(key));
            g_ptr_array_add(out, (gpointer)m->def);
        }
    }
    g_hash_table_destroy(seen);
    return out;
}

/* acc (this rank's weight in float32, where it lives) += coef·scale·B·A
 * over the module's pieces: y = x·wᵀ by h3_op_linear with x the scaled rows
 * of B (F32 [n, r]) and w = Aᵀ restricted to the shard's columns (an F32
 * weight [cols, r]), then added to acc's rows. Ops only, so every backend
 * runs it where the weights are. */
static h3_status_code add_module_on(h3_backend *b, h3_tensor *acc, const lora_module *m, const shard *sh, float coef,
                                    h3_status *status) {
    const module_def *d = m->def;
    int64_t r = m->rank, in = d->cols, cols = sh->cols;
    float *at = malloc((size_t)(cols * r) * sizeof *at), *xs = malloc((size_t)(d->out * r) * sizeof *xs);
    if (!at || !xs) {
        free(at);
        free(xs);
        return h3_fail(status, H3_ERR_NO_MEMORY, "LoRA: out of memory staging '%s'", m->key_module);
    }
    for (int64_t k = 0; k < r; k++)
        for (int64_t c = 0; c < cols; c++) at[c * r + k] = m->A[k * in + sh->c0 + c];
    for (int64_t i = 0; i < d->out * r; i++) xs[i] = m->B[i] * coef * m->scale;
    h3_tensor w = {0};
    const int64_t shape[2] = {cols, r};
    h3_status_code rc = h3_weight_from_f32(b, at, H3_F32, 2, shape, &w, status);
    for (int p = 0; rc == H3_OK && p < sh->n_pieces; p++) {
        const piece *pc = &sh->pieces[p];
        h3_tensor x = h3_new_2d(b, H3_F32, pc->n, r), y = h3_new_2d(b, H3_F32, pc->n, cols);
        if (!x.data || !y.data) break; /* the sticky error says why */
        rc = h3_tensor_upload_f32(b, &x, xs + pc->b0 * r, status);
        h3_op_linear(b, &y, &x, &w, NULL);
        h3_tensor rows = h3_tensor_rows_view(acc, pc->t0, pc->n);
        h3_op_add(b, &rows, &rows, &y);
    }
    h3_weight_free(b, &w);
    free(at);
    free(xs);
    return rc;
}

/* One weight: read into float32, every term's modules added, checked
 * finite, rounded once back into the weight. */
/* memory=stream: a block's weight lives in host memory (h3_weight_stream.h),
 * the very bytes the ring copies: fused there, in float32, rounded once. */
static h3_status_code update_host_weight(h3_dit *dit, const module_def *d, h3_tensor *t, const term *terms, int n,
                                         float sign, h3_status *status) {
    shard sh;
    shard_of(d, &dit->tp, &sh);
    size_t numel = (size_t)(sh.rows * sh.cols);
    float *w = malloc(numel * sizeof *w + 4);
    if (!w) return h3_fail(status, H3_ERR_NO_MEMORY, "LoRA: out of memory fusing '%s'", d->name);
    uint16_t *h16 = t->data;
    for (size_t i = 0; i < numel; i++)
        w[i] = t->dtype == H3_F32 ? ((float *)t->data)[i] : t->dtype == H3_BF16 ? h3_bf16_to_f32(h16[i]) : h3_f16_to_f32(h16[i]);
    for (int i = 0; i < n; i++) {
        const h3_lora *l = terms[i].lora;
        for (guint j = 0; j < l->modules->len; j++) {
            const lora_module *m = g_ptr_array_index(l->modules, j);
            if (m->partition != H3_LORA_MAIN || memcmp(&m->def->t, &d->t, sizeof d->t) != 0 || terms[i].coef == 0)
                continue;
            shard msh;
            shard_of(m->def, &dit->tp, &msh);
            add_module_host(w, m, &msh, sign * terms[i].coef);
        }
    }
    for (size_t i = 0; i < numel; i++)
        if (!isfinite(w[i])) {
            free(w);
            return h3_fail(status, H3_ERR_NONFINITE, "LoRA: the fused weight '%s' would hold %g (strengths too large "
                           "for these factors)", d->name, (double)w[i]);
        }
    for (size_t i = 0; i < numel; i++) {
        if (t->dtype == H3_F32) ((float *)t->data)[i] = w[i];
        else h16[i] = t->dtype == H3_BF16 ? h3_f32_to_bf16(w[i]) : h3_f32_to_f16(w[i]);
    }
    free(w);
    return H3_OK;
}

static h3_status_code update_weight(h3_dit *dit, const module_def *d, const term *terms, int n, float sign,
                                    h3_status *status) {
    h3_backend *b = dit->b;
    h3_tensor *t = weight_of(dit, &d->t);
    if (t->on_host) return update_host_weight(dit, d, t, terms, n, sign, status);
    size_t mark = h3_arena_mark(b);
    shard sh;
    shard_of(d, &dit->tp, &sh);
    h3_tensor acc = h3_new_2d(b, H3_F32, sh.rows, sh.cols);
    h3_status_code rc = H3_OK;
    if (acc.data) h3_op_copy(b, &acc, t);
    for (int i = 0; acc.data && rc == H3_OK && i < n; i++) {
        const h3_lora *l = terms[i].lora;
        for (guint j = 0; rc == H3_OK && j < l->modules->len; j++) {
            const lora_module *m = g_ptr_array_index(l->modules, j);
            if (m->partition != H3_LORA_MAIN || memcmp(&m->def->t, &d->t, sizeof d->t) != 0 || terms[i].coef == 0)
                continue;
            shard msh;
            shard_of(m->def, &dit->tp, &msh);
            rc = add_module_on(b, &acc, m, &msh, sign * terms[i].coef, status);
        }
    }
    int64_t bad = 0;
    if (rc == H3_OK && acc.data) rc = h3_tensor_count_nonfinite(b, &acc, &bad, status);
    if (rc == H3_OK && bad)
        rc = h3_fail(status, H3_ERR_NONFINITE, "LoRA: the fused weight '%s' would hold %lld non-finite values "
                     "(strengths too large for these factors)", d->name, (long long)bad);
    if (rc == H3_OK) h3_op_copy(b, t, &acc);
    if (rc == H3_OK) rc = h3_backend_check(b, status);
    h3_arena_reset(b, mark);
    return rc;
}

/* What the DiT must be for an in-place fusion; checked before any weight. */
static h3_status_code check_dit(h3_dit *dit, GPtrArray *defs, h3_status *status) {
    if (dit->layout)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "LoRA: the transformer is inside a request; change LoRAs "
                       "between clips");
    h3_status_code rc = h3_backend_check(dit->b, status);
    if (rc != H3_OK) return rc;
    if (!h3_backend_holds_data(dit->b))
        return h3_fail(status, H3_ERR_UNSUPPORTED, "LoRA: the backend '%s' holds no weight values",
                       h3_backend_name(dit->b));
    for (guint i = 0; i < defs->len; i++) {
        const module_def *d = g_ptr_array_index(defs, i);
        const h3_tensor *t = weight_of(dit, &d->t);
        shard sh;
        shard_of(d, &dit->tp, &sh);
        if (!t || !t->data || h3_tensor_rows(t) != sh.rows || h3_tensor_numel(t) != sh.rows * sh.cols)
            return h3_fail(status, H3_ERR_INTERNAL, "LoRA: weight '%s' is not the planned [%lld, %lld] (rank %d of %d)",
                           d->name, (long long)sh.rows, (long long)sh.cols, dit->tp.rank, dit->tp.size);
        if (t->dtype != H3_F32 && t->dtype != H3_BF16 && t->dtype != H3_F16)
            return h3_fail(status, H3_ERR_UNSUPPORTED, "LoRA: weight '%s' is held as FP8 (precision=fp8): a LoRA on "
                           "it is not supported yet", d->name);
    }
    return H3_OK;
}

static int same_config(const h3_dit_config *a, const h3_dit_config *b) {
    return a->num_layers == b->num_layers && a->num_refiner_layers == b->num_refiner_layers &&
           a->hidden_size == b->hidden_size && a->num_heads == b->num_heads && a->head_dim == b->head_dim &&
           a->ffn_dim == b->ffn_dim && a->in_channels == b->in_channels &&
           a->audio_in_channels == b->audio_in_channels && a->patch_t == b->patch_t && a->patch_h == b->patch_h &&
           a->patch_w == b->patch_w && a->text_dim == b->text_dim && a->freq_dim == b->freq_dim &&
           a->time_embed_hidden_dim == b->time_embed_hidden_dim && a->time_embed_dim == b->time_embed_dim;
}

#define MAX_LORAS 32

static h3_status_code check_uses(const h3_dit *dit, const h3_lora_use *uses, int n, h3_status *status) {
    if (n < 0 || n > MAX_LORAS || (n && !uses))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "LoRA: %d LoRAs (0..%d)", n, MAX_LORAS);
    for (int i = 0; i < n; i++) {
        const h3_lora *l = uses[i].lora;
        if (!l) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "LoRA %d: none given", i);
        if (!isfinite(uses[i].strength) || fabs(uses[i].strength) > H3_LORA_MAX_STRENGTH)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "LoRA '%s': strength %g outside [-%g, %g]", l->path,
                           (double)uses[i].strength, H3_LORA_MAX_STRENGTH, H3_LORA_MAX_STRENGTH);
        if (!same_config(&l->cfg, &dit->cfg))
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "LoRA '%s' was opened for another transformer "
                           "configuration than the one loaded", l->path);
        if (l->n_modules[0] == 0)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "LoRA '%s' has no module for this transformer (only "
                           "transformer_ref keys, for the Ref2VA partition)", l->path);
        for (int j = 0; j < i; j++)
            if (uses[j].lora == l || (uses[j].lora->dev == l->dev && uses[j].lora->ino == l->ino))
                return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "LoRA '%s' is listed twice (as '%s' too): give one "
                               "entry with the summed strength", l->path, uses[j].lora->path);
    }
    return H3_OK;
}

/* new minus old, per LoRA (the old ones leave with -strength). */
static int make_terms(const lora_set *old, const h3_lora_use *uses, int n, term *terms) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        float before = 0;
        for (int j = 0; old && j < old->n; j++)
            if (old->uses[j].lora == uses[i].lora) before = old->uses[j].strength;
        terms[k++] = (term){uses[i].lora, uses[i].strength - before};
    }
    for (int j = 0; old && j < old->n; j++) {
        int kept = 0;
        for (int i = 0; i < n; i++) kept |= uses[i].lora == old->uses[j].lora;
        if (!kept) terms[k++] = (term){old->uses[j].lora, -old->uses[j].strength};
    }
    return k;
}

static void set_free(lora_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) h3_lora_unref(s->uses[i].lora);
    g_free(s->uses);
    g_free(s);
}

void h3_dit_lora_release(h3_dit *dit) {
    set_free(dit->lora_set);
    dit->lora_set = NULL;
}

h3_status_code h3_dit_set_loras(h3_dit *dit, const h3_lora_use *uses, int n, h3_status *status) {
    if (!dit) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "LoRA: no transformer");
    h3_status_code rc = check_uses(dit, uses, n, status);
    if (rc != H3_OK) return rc;
    lora_set *old = dit->lora_set;
    term terms[2 * MAX_LORAS];
    int n_terms = make_terms(old, uses, n, terms);
    GPtrArray *defs = touched_defs(terms, n_terms);
    rc = check_dit(dit, defs, status);
    guint done = 0;
    for (; rc == H3_OK && done < defs->len; done++)
        rc = update_weight(dit, g_ptr_array_index(defs, done), terms, n_terms, 1.0f, status);
    if (rc != H3_OK) {
        /* Put back what was changed: the previous set stays in force. */
        h3_status ignored = {0};
        h3_backend_clear_error(dit->b);
        for (guint i = 0; i + 1 < done; i++)
            update_weight(dit, g_ptr_array_index(defs, i), terms, n_terms, -1.0f, &ignored);
        g_ptr_array_free(defs, TRUE);
        return rc;
    }
    g_ptr_array_free(defs, TRUE);
    lora_set *s = g_new0(lora_set, 1);
    s->uses = g_new0(h3_lora_use, n + 1);
    s->n = n;
    for (int i = 0; i < n; i++) s->uses[i] = (h3_lora_use){h3_lora_ref(uses[i].lora), uses[i].strength};
    set_free(old);
    dit->lora_set = s;
    return H3_OK;
}

int h3_dit_get_loras(const h3_dit *dit, const h3_lora_use **uses) {
    const lora_set *s = dit->lora_set;
    *uses = s ? s->uses : NULL;
    return s ? s->n : 0;
}

h3_status_code h3_dit_lora_weight_f32(h3_dit *dit, const char *module, float **out, int64_t *rows, int64_t *cols,
                                      h3_status *status) {
    *out = NULL;
    module_table t = {0};
    table_build(&t, &dit->cfg);
    const module_def *d = find_def(&t, module);
    h3_status_code rc = H3_OK;
    if (!d || dit->tp.size > 1 || weight_of(dit, &d->t)->on_host)
        rc = h3_fail(status, H3_ERR_INVALID_ARGUMENT, "LoRA: cannot read back '%s'", module);
    float *w = rc == H3_OK ? malloc((size_t)(d->rows * d->cols) * sizeof *w + 4) : NULL;
    if (rc == H3_OK && !w) rc = h3_fail(status, H3_ERR_NO_MEMORY, "LoRA: out of memory reading '%s'", module);
    if (rc == H3_OK) rc = h3_tensor_download_f32(dit->b, weight_of(dit, &d->t), w, status);
    if (rc == H3_OK) {
        *rows = d->out;
        *cols = d->cols;
        if (d->out != d->rows) memmove(w, w + d->pieces[0].t0 * d->cols, (size_t)(d->out * d->cols) * sizeof *w);
        *out = w;
    } else {
        free(w);
    }
    table_free(&t);
    return rc;
}
