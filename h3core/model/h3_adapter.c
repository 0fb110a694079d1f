/* h3_adapter.c - FastH3 `fastvideo-lora-v2` adapters: validation, mapping
 * onto either base layout, and the float32 fusion (h3_adapter.h;
 * docs/spec/fasth3-vsa.md §1.2-§1.6).
 *
 * Opening reads the header only. Binding walks every key once more against
 * the base checkpoint's header and builds, per base tensor, the list of its
 * deltas and where their rows land; fusing one base tensor is then a lookup
 * and a few sgemm calls, done by the DiT loader as each tensor streams in. */
#include "model/h3_adapter.h"

#include <cblas.h>
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/h3_config.h"
#include "model/h3_scheduler.h"

typedef enum key_role { ROLE_LORA_A = 0, ROLE_LORA_B, ROLE_DIFF, ROLE_DIFF_B, ROLE_SET_WEIGHT, ROLE_COUNT } key_role;

/* Terminal suffixes; the suffix decides the role whatever the module name
 * contains. PEFT/kohya aliases and alpha/rank keys are not part of the
 * published format and are refused as unknown keys. */
static const struct {
    const char *suffix;
    key_role role;
} suffixes[] = {
    {".lora_A.weight", ROLE_LORA_A}, {".lora_B.weight", ROLE_LORA_B}, {".diff_b", ROLE_DIFF_B},
    {".diff", ROLE_DIFF},            {".set_weight", ROLE_SET_WEIGHT},
};

/* Everything the adapter holds for one diffusers module. */
typedef struct module_delta {
    char *module;
    const h3_st_tensor *t[ROLE_COUNT];
} module_delta;

/* Where a delta's rows land in its base tensor. */
typedef enum placement {
    PLACE_WHOLE = 0,  /* row r -> r */
    PLACE_QKV,        /* native qkv_proj: head h's part p at rows h·3dh + p·dh + [0, dh) */
    PLACE_SWAP_HALVES /* native fc1 [gate; value] from the diffusers [value; gate] */
} placement;

typedef struct delta {
    const h3_st_tensor *lora_a, *lora_b; /* low-rank pair, or NULL */
    const h3_st_tensor *diff;            /* exact delta (.diff or .diff_b), or NULL */
    placement place;
    int part; /* PLACE_QKV: 0 q, 1 k, 2 v */
} delta;

/* One base tensor the adapter changes. */
typedef struct target {
    char *base_name;
    h3_st_dtype dtype;
    int ndim;
    int64_t rows, cols; /* a 1-D tensor has cols 1 */
    int n_deltas;
    delta deltas[3];
} target;

struct h3_adapter {
    char *path;
    h3_st_file *file;
    const char *base_model, *finetuned_model; /* owned by the file's metadata */
    int rank;
    GPtrArray *modules;    /* module_delta *, in file order */
    GHashTable *by_module; /* module name -> module_delta * */
    int n_gates;
    h3_adapter_contract contract;

    /* h3_adapter_bind; tensor-parallel ranks load concurrently and bind
     * the same adapter: the first binds, the others find it bound. */
    GMutex lock;
    int bound;
    char *bound_to; /* checkpoint path */
    h3_dit_checkpoint_layout layout;
    int head_dim, num_layers;
    GHashTable *targets;     /* base tensor name -> target * */
    h3_st_dtype *gate_dtype; /* [num_layers] */
};

static void free_module(gpointer p) {
    module_delta *m = p;
    g_free(m->module);
    g_free(m);
}

static void free_target(gpointer p) {
    target *t = p;
    g_free(t->base_name);
    g_free(t);
}

static void unbind(h3_adapter *a) {
    g_free(a->bound_to);
    a->bound_to = NULL;
    if (a->targets) g_hash_table_destroy(a->targets);
    a->targets = NULL;
    g_free(a->gate_dtype);
    a->gate_dtype = NULL;
    a->bound = 0;
}

void h3_adapter_free(h3_adapter *a) {
    if (!a) return;
    unbind(a);
    g_mutex_clear(&a->lock);
    if (a->by_module) g_hash_table_destroy(a->by_module);
    if (a->modules) g_ptr_array_free(a->modules, TRUE);
    h3_st_close(a->file);
    g_free(a->path);
    g_free(a);
}

const char *h3_adapter_path(const h3_adapter *a) { return a->path; }
const char *h3_adapter_base_model(const h3_adapter *a) { return a->base_model; }
const char *h3_adapter_finetuned_model(const h3_adapter *a) { return a->finetuned_model; }
int h3_adapter_rank(const h3_adapter *a) { return a->rank; }
int h3_adapter_has_vsa_gates(const h3_adapter *a) { return a->n_gates > 0; }
const h3_adapter_contract *h3_adapter_get_contract(const h3_adapter *a) { return &a->contract; }

/* ---- locating the file ---------------------------------------------------------- */

/* A manifest root holds several variants: name them instead of guessing. */
static h3_status_code refuse_root(const char *dir, h3_status *status) {
    GString *names = g_string_new("");
    GDir *d = g_dir_open(dir, 0, NULL);
    for (const char *e; d && (e = g_dir_read_name(d));) {
        char *f = g_build_filename(dir, e, H3_ADAPTER_FILE, NULL);
        if (g_file_test(f, G_FILE_TEST_IS_REGULAR)) g_string_append_printf(names, "%s%s", names->len ? ", " : "", e);
        g_free(f);
    }
    if (d) g_dir_close(d);
    h3_status_code rc = h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                                "adapter '%s' is a FastH3 release root with variants (%s): pass one variant "
                                "directory or its " H3_ADAPTER_FILE, dir, names->len ? names->str : "none found");
    g_string_free(names, TRUE);
    return rc;
}

static h3_status_code resolve_file(const char *path, char **file, h3_status *status) {
    *file = NULL;
    if (!path || !*path) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "adapter: empty path");
    if (g_file_test(path, G_FILE_TEST_IS_DIR)) {
        char *f = g_build_filename(path, H3_ADAPTER_FILE, NULL);
        if (g_file_test(f, G_FILE_TEST_IS_REGULAR)) {
            *file = f;
            return H3_OK;
        }
        g_free(f);
        char *manifest = g_build_filename(path, "adapter_manifest.json", NULL);
        int root = g_file_test(manifest, G_FILE_TEST_IS_REGULAR);
        g_free(manifest);
        if (root) return refuse_root(path, status);
        return h3_fail(status, H3_ERR_NOT_FOUND, "adapter directory '%s' has no " H3_ADAPTER_FILE, path);
    }
    if (!g_file_test(path, G_FILE_TEST_IS_REGULAR))
        return h3_fail(status, H3_ERR_NOT_FOUND, "adapter '%s' does not exist", path);
    *file = g_strdup(path);
    return H3_OK;
}

/* ---- metadata --------------------------------------------------------------------- */

static h3_status_code required_meta(const h3_adapter *a, const char *key, const char **out, h3_status *status) {
    *out = h3_st_metadata(a->file, key);
    if (!*out || !**out)
        return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': __metadata__ has no '%s' (not a " H3_ADAPTER_FORMAT " file)",
                       a->path, key);
    return H3_OK;
}

/* A declared count: a plain decimal string. */
static h3_status_code meta_count(const h3_adapter *a, const char *key, int required, long long *out, h3_status *status) {
    const char *v = h3_st_metadata(a->file, key);
    *out = -1;
    if (!v) {
        if (required) return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': __metadata__ does not declare '%s'", a->path, key);
        return H3_OK;
    }
    char *end;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || n < 0 || !g_ascii_isdigit(*v))
        return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': __metadata__ '%s' = '%s' is not a count", a->path, key, v);
    *out = n;
    return H3_OK;
}

static h3_status_code check_metadata(h3_adapter *a, h3_status *status) {
    const char *format, *rank;
    h3_status_code rc = required_meta(a, "format", &format, status);
    if (rc != H3_OK) return rc;
    if (strcmp(format, H3_ADAPTER_FORMAT) != 0)
        return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': __metadata__ format is '%s', expected '" H3_ADAPTER_FORMAT "'",
                       a->path, format);
    if ((rc = required_meta(a, "base_model", &a->base_model, status)) != H3_OK) return rc;
    if ((rc = required_meta(a, "finetuned_model", &a->finetuned_model, status)) != H3_OK) return rc;
    char *lower = g_ascii_strdown(a->finetuned_model, -1);
    int fasth3 = strstr(lower, "fasth3") != NULL;
    g_free(lower);
    if (!fasth3)
        return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': finetuned_model '%s' is not a FastH3 student", a->path,
                       a->finetuned_model);
    if ((rc = required_meta(a, "rank", &rank, status)) != H3_OK) return rc;
    char *end;
    long r = strtol(rank, &end, 10);
    if (*end || r < 1 || r > 65536)
        return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': __metadata__ rank '%s' is not a positive integer", a->path,
                       rank);
    a->rank = (int)r;
    return H3_OK;
}

/* ---- keys ------------------------------------------------------------------------ */

static int role_of(const char *name, size_t *module_len) {
    size_t n = strlen(name);
    for (size_t i = 0; i < G_N_ELEMENTS(suffixes); i++) {
        size_t s = strlen(suffixes[i].suffix);
        if (n > s && strcmp(name + n - s, suffixes[i].suffix) == 0) {
            *module_len = n - s;
            return (int)suffixes[i].role;
        }
    }
    return -1;
}

static int is_float(h3_st_dtype d) { return d == H3_ST_F32 || d == H3_ST_BF16 || d == H3_ST_F16; }

/* A block number as the checkpoints write it: decimal digits, no sign, no
 * leading zero, at most 9 digits (so it fits an int; the binding checks it
 * against the layer count). Returns the digits consumed, 0 when s does not
 * start with one. "00", "+1" or "4294967296" are not numbers a base
 * tensor's name carries: parsed loosely, such a key passed validation as
 * block 0 (or a wrapped one) and was then never applied. */
#define MAX_BLOCK_DIGITS 9
static size_t block_number(const char *s, int *out) {
    size_t n = 0;
    while (g_ascii_isdigit(s[n])) n++;
    if (n == 0 || n > MAX_BLOCK_DIGITS || (n > 1 && s[0] == '0')) return 0;
    int v = 0;
    for (size_t i = 0; i < n; i++) v = v * 10 + (s[i] - '0');
    *out = v;
    return n;
}

/* Every part of a key that starts with a digit is a canonical block number. */
static h3_status_code check_key_numbers(const h3_adapter *a, const char *key, h3_status *status) {
    for (const char *part = key; *part; part = strchr(part, '.') ? strchr(part, '.') + 1 : part + strlen(part)) {
        if (!g_ascii_isdigit(*part)) continue;
        int v;
        size_t n = block_number(part, &v);
        if (n == 0 || (part[n] != '.' && part[n] != '\0')) {
            size_t len = strcspn(part, ".");
            return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': key '%s': block number '%.*s' is not canonical "
                           "(decimal, no leading zero, at most %d digits), so it would match no tensor of the model",
                           a->path, key, (int)len, part, MAX_BLOCK_DIGITS);
        }
    }
    return H3_OK;
}

/* name is prefix, a canonical block number, then exactly suffix. */
static int parse_block_name(const char *name, const char *prefix, const char *suffix, int *block) {
    if (!g_str_has_prefix(name, prefix)) return 0;
    const char *p = name + strlen(prefix);
    size_t n = block_number(p, block);
    return n > 0 && strcmp(p + n, suffix) == 0;
}

static h3_status_code classify_keys(h3_adapter *a, long long counts[ROLE_COUNT], h3_status *status) {
    a->modules = g_ptr_array_new_with_free_func(free_module);
    a->by_module = g_hash_table_new(g_str_hash, g_str_equal);
    for (size_t i = 0; i < h3_st_count(a->file); i++) {
        const h3_st_tensor *t = h3_st_at(a->file, i);
        size_t len;
        int role = role_of(t->name, &len);
        if (role < 0)
            return h3_fail(status, H3_ERR_FORMAT,
                           "adapter '%s': unknown key '%s' (a " H3_ADAPTER_FORMAT " key ends in .lora_A.weight, "
                           ".lora_B.weight, .diff, .diff_b or .set_weight)", a->path, t->name);
        if (!is_float(t->dtype))
            return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': tensor '%s' has dtype %s (F32, BF16 or F16)", a->path,
                           t->name, h3_st_dtype_name(t->dtype));
        h3_status_code rc = check_key_numbers(a, t->name, status);
        if (rc != H3_OK) return rc;
        char *module = g_strndup(t->name, len);
        module_delta *m = g_hash_table_lookup(a->by_module, module);
        if (!m) {
            m = g_new0(module_delta, 1);
            m->module = module;
            g_ptr_array_add(a->modules, m);
            g_hash_table_insert(a->by_module, m->module, m);
        } else {
            g_free(module);
        }
        m->t[role] = t;
        counts[role]++;
    }
    return H3_OK;
}

/* Each pair complete and shaped [r, in] / [out, r]; set_weight 2-D. */
static h3_status_code check_pairs(const h3_adapter *a, h3_status *status) {
    for (guint i = 0; i < a->modules->len; i++) {
        const module_delta *m = g_ptr_array_index(a->modules, i);
        const h3_st_tensor *A = m->t[ROLE_LORA_A], *B = m->t[ROLE_LORA_B], *set = m->t[ROLE_SET_WEIGHT];
        if (!A != !B)
            return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': '%s' has no matching %s", a->path, (A ? A : B)->name,
                           A ? "lora_B" : "lora_A");
        if (A && (A->ndim != 2 || B->ndim != 2 || A->shape[0] != a->rank || B->shape[1] != a->rank))
            return h3_fail(status, H3_ERR_FORMAT,
                           "adapter '%s': '%s' is [%lld, %lld] and '%s' [%lld, %lld]; rank %d wants [%d, in] and [out, %d]",
                           a->path, A->name, (long long)A->shape[0], (long long)(A->ndim > 1 ? A->shape[1] : 0), B->name,
                           (long long)B->shape[0], (long long)(B->ndim > 1 ? B->shape[1] : 0), a->rank, a->rank, a->rank);
        if (set && (set->ndim != 2 || A || m->t[ROLE_DIFF] || m->t[ROLE_DIFF_B]))
            return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': '%s' must be a 2-D whole weight with no other delta on it",
                           a->path, set->name);
    }
    return H3_OK;
}

static h3_status_code check_counts(const h3_adapter *a, const long long counts[ROLE_COUNT], h3_status *status) {
    static const struct {
        const char *key;
        int required;
    } declared[] = {{"low_rank_tensors", 1}, {"diff_tensors", 1}, {"set_weight_tensors", 0}};
    long long have[] = {counts[ROLE_LORA_A] + counts[ROLE_LORA_B], counts[ROLE_DIFF] + counts[ROLE_DIFF_B],
                        counts[ROLE_SET_WEIGHT]};
    for (size_t i = 0; i < G_N_ELEMENTS(declared); i++) {
        long long want;
        h3_status_code rc = meta_count(a, declared[i].key, declared[i].required, &want, status);
        if (rc != H3_OK) return rc;
        if (want < 0) want = 0; /* set_weight_tensors: dense releases leave it out */
        if (want != have[i])
            return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': __metadata__ declares %s = %lld but the file holds %lld "
                           "(truncated or mixed-up file)", a->path, declared[i].key, want, have[i]);
    }
    return H3_OK;
}

/* ---- fastvideo_inference.json ---------------------------------------------------------- */

static h3_status_code read_contract(h3_adapter *a, h3_status *status) {
    h3_adapter_contract *c = &a->contract;
    memset(c, 0, sizeof *c);
    c->vsa_sparsity = -1;
    char *dir = g_path_get_dirname(a->path);
    char *path = g_build_filename(dir, H3_ADAPTER_CONTRACT_FILE, NULL);
    g_free(dir);
    h3_status_code rc = H3_OK;
    h3_config *j = NULL;
    if (!g_file_test(path, G_FILE_TEST_IS_REGULAR)) goto done;
    if ((rc = h3_config_load(path, &j, status)) != H3_OK) goto done;
    c->present = 1;
    if (h3_config_has(j, "dmd_denoising_steps")) {
        int64_t steps[H3_ADAPTER_MAX_DMD_STEPS];
        if ((rc = h3_config_int_array(j, "dmd_denoising_steps", steps, H3_ADAPTER_MAX_DMD_STEPS, &c->num_dmd_steps,
                                      status)) != H3_OK)
            goto done;
        for (int i = 0; i < c->num_dmd_steps; i++) {
            if (steps[i] < 0 || steps[i] > 1000 || (i > 0 && steps[i] >= steps[i - 1])) {
                rc = h3_fail(status, H3_ERR_FORMAT, "%s: dmd_denoising_steps must decrease within [0, 1000] (entry %d)",
                             path, i);
                goto done;
            }
            c->dmd_steps[i] = (int)steps[i];
        }
        int64_t points = c->num_dmd_steps + 1;
        if ((rc = h3_config_int_or(j, "num_inference_steps", &points, status)) != H3_OK) goto done;
        if (c->num_dmd_steps < 1 || points != c->num_dmd_steps + 1) {
            rc = h3_fail(status, H3_ERR_FORMAT, "%s: num_inference_steps %lld does not match %d dmd_denoising_steps + 0",
                         path, (long long)points, c->num_dmd_steps);
            goto done;
        }
    }
    if ((rc = h3_config_double_range_or(j, "flow_shift", H3_SHIFT_MIN, H3_SHIFT_MAX, &c->video_shift, status)) !=
        H3_OK)
        goto done;
    if ((rc = h3_config_double_range_or(j, "audio_flow_shift", H3_SHIFT_MIN, H3_SHIFT_MAX, &c->audio_shift,
                                        status)) != H3_OK)
        goto done;
    if ((rc = h3_config_double_range_or(j, "vsa_sparsity", 0, 1, &c->vsa_sparsity, status)) != H3_OK) goto done;
    int64_t tile = 0;
    if ((rc = h3_config_int_or(j, "vsa_tile_size", &tile, status)) != H3_OK) goto done;
    c->vsa_tile_size = (int)tile;
    if (c->video_shift < 0 || c->audio_shift < 0 || (h3_config_has(j, "flow_shift") && !(c->video_shift > 0)) ||
        (h3_config_has(j, "audio_flow_shift") && !(c->audio_shift > 0))) {
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: flow shifts must be positive", path);
        goto done;
    }
    if (tile != 0 && tile != 64) {
        rc = h3_fail(status, H3_ERR_UNSUPPORTED, "%s: vsa_tile_size %lld (VSA-H3 here runs the trained 64 = 4x4x4)", path,
                     (long long)tile);
        goto done;
    }
    const char *s;
    if (h3_config_has(j, "vsa_mode")) {
        if ((rc = h3_config_string(j, "vsa_mode", &s, status)) != H3_OK) goto done;
        if (strcmp(s, "exempt") != 0) {
            rc = h3_fail(status, H3_ERR_UNSUPPORTED, "%s: vsa_mode '%s' (only the trained \"exempt\" mode)", path, s);
            goto done;
        }
    }
    if (h3_config_has(j, "attention_backend")) {
        if ((rc = h3_config_string(j, "attention_backend", &s, status)) != H3_OK) goto done;
        g_strlcpy(c->attention_backend, s, sizeof c->attention_backend);
    }
done:
    h3_config_free(j);
    g_free(path);
    return rc;
}

/* The contract json and the tensors must agree on the attention mode. */
static h3_status_code check_contract_mode(const h3_adapter *a, h3_status *status) {
    const char *backend = a->contract.attention_backend;
    if (!*backend) return H3_OK;
    int sparse = strstr(backend, "SPARSE") != NULL;
    if (sparse != (a->n_gates > 0))
        return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': " H3_ADAPTER_CONTRACT_FILE " says attention_backend %s but "
                       "the file %s to_gate_compress weights", a->path, backend, a->n_gates ? "has" : "has no");
    return H3_OK;
}

h3_status_code h3_adapter_open(const char *path, h3_adapter **out, h3_status *status) {
    *out = NULL;
    h3_adapter *a = g_new0(h3_adapter, 1);
    g_mutex_init(&a->lock);
    long long counts[ROLE_COUNT] = {0};
    h3_status_code rc = resolve_file(path, &a->path, status);
    if (rc == H3_OK) rc = h3_st_open(a->path, &a->file, status);
    if (rc == H3_OK) rc = check_metadata(a, status);
    if (rc == H3_OK) rc = classify_keys(a, counts, status);
    if (rc == H3_OK) rc = check_pairs(a, status);
    if (rc == H3_OK) rc = check_counts(a, counts, status);
    a->n_gates = (int)counts[ROLE_SET_WEIGHT];
    if (rc == H3_OK) rc = read_contract(a, status);
    if (rc == H3_OK) rc = check_contract_mode(a, status);
    if (rc != H3_OK) {
        h3_adapter_free(a);
        return rc;
    }
    *out = a;
    return H3_OK;
}

h3_status_code h3_adapter_check_base_model(const h3_adapter *a, const char *model_id, const char *model_dir,
                                           h3_status *status) {
    if (!model_id || g_ascii_strcasecmp(a->base_model, model_id) != 0)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "adapter '%s' was made for base_model '%s', but the model at '%s' is '%s'", a->path,
                       a->base_model, model_dir ? model_dir : "?", model_id ? model_id : "unknown");
    return H3_OK;
}

/* ---- binding --------------------------------------------------------------------------- */

/* The native name of a diffusers parameter (docs/spec/fasth3-vsa.md §1.5) and how its rows are placed. */
static char *native_name(const char *param, placement *place, int *part) {
    static const char *const model_map[][2] = {
        {"proj_in.", "video_patch_proj."},
        {"proj_out.", "final_layer.video_out."},
        {"audio_proj_in.", "audio_patch_proj."},
        {"audio_proj_out.", "final_layer.audio_out."},
        {"context_embedder.", "condition_proj."},
        {"time_embedder.linear_1.", "time_embedder.proj_in."},
        {"time_embedder.linear_2.", "time_embedder.proj_out."},
        {"norm_out.linear.", "final_layer.adaln_proj.linear."},
        {"norm_out.norm.", "final_layer.norm."},
    };
    static const char *const block_map[][2] = {
        {"transformer_blocks.", "blocks."},
        {"token_refiner.refiner_blocks.", "token_refiner.blocks."},
    };
    static const struct {
        const char *from, *to;
        placement place;
        int part;
    } inner_map[] = {
        {"attn.to_q.", "attn.qkv_proj.", PLACE_QKV, 0},   {"attn.to_k.", "attn.qkv_proj.", PLACE_QKV, 1},
        {"attn.to_v.", "attn.qkv_proj.", PLACE_QKV, 2},   {"attn.to_out.0.", "attn.out_proj.", PLACE_WHOLE, 0},
        {"ff.net.0.proj.", "mlp.fc1.", PLACE_SWAP_HALVES, 0}, {"ff.net.2.", "mlp.fc2.", PLACE_WHOLE, 0},
        {"attn.norm_q.", "attn.q_norm.", PLACE_WHOLE, 0}, {"attn.norm_k.", "attn.k_norm.", PLACE_WHOLE, 0},
    };
    *place = PLACE_WHOLE;
    *part = 0;
    for (size_t i = 0; i < G_N_ELEMENTS(block_map); i++) {
        if (!g_str_has_prefix(param, block_map[i][0])) continue;
        const char *p = param + strlen(block_map[i][0]);
        int index;
        size_t digits = block_number(p, &index);
        if (digits == 0 || p[digits] != '.') break;
        const char *rest = p + digits + 1;
        for (size_t j = 0; j < G_N_ELEMENTS(inner_map); j++)
            if (g_str_has_prefix(rest, inner_map[j].from)) {
                *place = inner_map[j].place;
                *part = inner_map[j].part;
                return g_strdup_printf("%s%d.%s%s", block_map[i][1], index, inner_map[j].to,
                                       rest + strlen(inner_map[j].from));
            }
        return g_strdup_printf("%s%d.%s", block_map[i][1], index, rest);
    }
    for (size_t i = 0; i < G_N_ELEMENTS(model_map); i++)
        if (g_str_has_prefix(param, model_map[i][0]))
            return g_strconcat(model_map[i][1], param + strlen(model_map[i][0]), NULL);
    return g_strdup(param);
}

static void collect_plan(const char *name, int ndim, const int64_t *shape, void *user) {
    g_hash_table_add(user, g_strdup(name));
}

typedef struct bind_ctx {
    h3_adapter *a;
    const h3_checkpoint *base;
    const h3_dit_config *cfg;
    GHashTable *planned;
} bind_ctx;

/* Rows of the base tensor one delta covers. */
static int64_t part_rows(const target *t, placement place) { return place == PLACE_QKV ? t->rows / 3 : t->rows; }

static h3_status_code shape_error(const bind_ctx *c, const h3_st_tensor *key, const target *t, const char *want,
                                  h3_status *status) {
    char shape[64] = "";
    for (int i = 0; i < key->ndim; i++)
        g_snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", i ? ", " : "", (long long)key->shape[i]);
    return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': '%s' is [%s], which does not fit base tensor '%s' [%lld, %lld] "
                   "(wants %s)", c->a->path, key->name, shape, t->base_name, (long long)t->rows, (long long)t->cols, want);
}

/* The target record of a base tensor, created on first use after checking
 * that the loader reads it and the checkpoint has it. */
static h3_status_code find_target(bind_ctx *c, const char *key, const char *base_name, target **out, h3_status *status) {
    h3_adapter *a = c->a;
    *out = g_hash_table_lookup(a->targets, base_name);
    if (*out) return H3_OK;
    if (!g_hash_table_contains(c->planned, base_name))
        return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': key '%s' targets '%s', which the MiniMax-H3 transformer "
                       "(%s layout) does not have", a->path, key, base_name,
                       a->layout == H3_DIT_NATIVE ? "native" : "diffusers");
    const h3_st_tensor *bt = h3_checkpoint_find(c->base, base_name);
    if (!bt)
        return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': key '%s' targets '%s', missing from the base checkpoint '%s'",
                       a->path, key, base_name, h3_checkpoint_path(c->base));
    if (!is_float(bt->dtype) || bt->ndim < 1 || bt->ndim > 2)
        return h3_fail(status, H3_ERR_FORMAT, "%s: base tensor '%s' (%s, %d-D) cannot take an adapter delta",
                       bt->file_path, base_name, h3_st_dtype_name(bt->dtype), bt->ndim);
    target *t = g_new0(target, 1);
    t->base_name = g_strdup(base_name);
    t->dtype = bt->dtype;
    t->ndim = bt->ndim;
    t->rows = bt->shape[0];
    t->cols = bt->ndim == 2 ? bt->shape[1] : 1;
    g_hash_table_insert(a->targets, t->base_name, t);
    *out = t;
    return H3_OK;
}

/* One (module, parameter) contribution: the low-rank pair and/or the exact
 * delta aimed at `param` ("<module>.weight" or ".bias"). */
static h3_status_code bind_param(bind_ctx *c, const module_delta *m, const char *suffix, const h3_st_tensor *A,
                                 const h3_st_tensor *B, const h3_st_tensor *diff, h3_status *status) {
    h3_adapter *a = c->a;
    char *param = g_strconcat(m->module, suffix, NULL);
    placement place = PLACE_WHOLE;
    int part = 0;
    char *base_name = a->layout == H3_DIT_NATIVE ? native_name(param, &place, &part) : g_strdup(param);
    const char *key = (A ? A : diff)->name;
    target *t = NULL;
    h3_status_code rc = find_target(c, key, base_name, &t, status);
    g_free(param);
    g_free(base_name);
    if (rc != H3_OK) return rc;
    int64_t rows = part_rows(t, place);
    char want[96];
    if ((place == PLACE_QKV && (t->rows % (3 * (int64_t)a->head_dim))) || (place == PLACE_SWAP_HALVES && t->rows % 2))
        return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': base tensor '%s' has %lld rows, not a fused layout", a->path,
                       t->base_name, (long long)t->rows);
    if (A) {
        g_snprintf(want, sizeof want, "lora_B [%lld, %d] and lora_A [%d, %lld]", (long long)rows, a->rank, a->rank,
                   (long long)t->cols);
        if (t->ndim != 2)
            return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': low-rank pair '%s' aims at the 1-D tensor '%s'",
                           a->path, A->name, t->base_name);
        if (B->shape[0] != rows) return shape_error(c, B, t, want, status);
        if (A->shape[1] != t->cols) return shape_error(c, A, t, want, status);
    }
    if (diff) {
        int ok = t->ndim == 1 ? diff->numel == rows && diff->ndim == 1
                              : diff->ndim == 2 && diff->shape[0] == rows && diff->shape[1] == t->cols;
        if (t->ndim == 1) g_snprintf(want, sizeof want, "[%lld]", (long long)rows);
        else g_snprintf(want, sizeof want, "[%lld, %lld]", (long long)rows, (long long)t->cols);
        if (!ok) return shape_error(c, diff, t, want, status);
    }
    if (t->n_deltas == (int)G_N_ELEMENTS(t->deltas))
        return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': too many deltas aimed at '%s'", a->path, t->base_name);
    for (int i = 0; i < t->n_deltas; i++)
        if (t->deltas[i].place == place && t->deltas[i].part == part)
            return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': two keys aim at the same rows of '%s' ('%s')", a->path,
                           t->base_name, key);
    t->deltas[t->n_deltas++] = (delta){.lora_a = A, .lora_b = B, .diff = diff, .place = place, .part = part};
    return H3_OK;
}

/* .set_weight creates a VSA gate transformer_blocks.i.attn.to_gate_compress. */
static h3_status_code bind_gate(bind_ctx *c, const module_delta *m, h3_status *status) {
    h3_adapter *a = c->a;
    const h3_st_tensor *set = m->t[ROLE_SET_WEIGHT];
    int block = -1;
    /* Parsed as gate_source names it back, so a gate that binds is one the loader finds. */
    if (!parse_block_name(m->module, "transformer_blocks.", ".attn.to_gate_compress", &block) ||
        block >= a->num_layers)
        return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': '%s' is not a VSA gate: .set_weight may only create "
                       "transformer_blocks.<i>.attn.to_gate_compress (i < %d)", a->path, set->name, a->num_layers);
    char gate[128];
    h3_dit_gate_name(a->layout, block, gate, sizeof gate);
    int exists = h3_checkpoint_find(c->base, gate) != NULL;
    if (exists)
        return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': '%s' sets a parameter the base already has", a->path,
                       set->name);
    int64_t inner = (int64_t)c->cfg->num_heads * c->cfg->head_dim;
    if (set->shape[0] != inner || set->shape[1] != c->cfg->hidden_size)
        return h3_fail(status, H3_ERR_FORMAT, "adapter '%s': '%s' is [%lld, %lld], the gate of this model is [%lld, %d]",
                       a->path, set->name, (long long)set->shape[0], (long long)set->shape[1], (long long)inner,
                       c->cfg->hidden_size);
    /* The gate takes the dtype of its block's attention projections. */
    char *qkv = g_strdup_printf(a->layout == H3_DIT_NATIVE ? "blocks.%d.attn.qkv_proj.weight"
                                                           : "transformer_blocks.%d.attn.to_q.weight", block);
    const h3_st_tensor *q = h3_checkpoint_find(c->base, qkv);
    g_free(qkv);
    a->gate_dtype[block] = q && is_float(q->dtype) ? q->dtype : H3_ST_BF16;
    return H3_OK;
}

static h3_status_code bind_module(bind_ctx *c, const module_delta *m, h3_status *status) {
    h3_status_code rc = H3_OK;
    if (m->t[ROLE_SET_WEIGHT]) return bind_gate(c, m, status);
    if (m->t[ROLE_LORA_A] || m->t[ROLE_DIFF])
        rc = bind_param(c, m, ".weight", m->t[ROLE_LORA_A], m->t[ROLE_LORA_B], m->t[ROLE_DIFF], status);
    if (rc == H3_OK && m->t[ROLE_DIFF_B]) rc = bind_param(c, m, ".bias", NULL, NULL, m->t[ROLE_DIFF_B], status);
    return rc;
}

static h3_status_code bind_locked(h3_adapter *a, const h3_checkpoint *base, h3_dit_checkpoint_layout layout,
                                  const h3_dit_config *cfg, h3_status *status) {
    if (a->bound && a->layout == layout && a->head_dim == cfg->head_dim && a->num_layers == cfg->num_layers &&
        strcmp(a->bound_to, h3_checkpoint_path(base)) == 0)
        return H3_OK;
    unbind(a);
    a->layout = layout;
    a->head_dim = cfg->head_dim;
    a->num_layers = cfg->num_layers;
    a->targets = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, free_target);
    a->gate_dtype = g_new0(h3_st_dtype, (gsize)cfg->num_layers + 1);
    bind_ctx c = {a, base, cfg, g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL)};
    h3_dit_checkpoint_plan(cfg, layout, collect_plan, c.planned);
    h3_status_code rc = H3_OK;
    for (guint i = 0; i < a->modules->len && rc == H3_OK; i++) rc = bind_module(&c, g_ptr_array_index(a->modules, i), status);
    g_hash_table_destroy(c.planned);
    if (rc != H3_OK) {
        unbind(a);
        return rc;
    }
    a->bound = 1;
    a->bound_to = g_strdup(h3_checkpoint_path(base));
    return H3_OK;
}

h3_status_code h3_adapter_bind(h3_adapter *a, const h3_checkpoint *base, h3_dit_checkpoint_layout layout,
                               const h3_dit_config *cfg, h3_status *status) {
    g_mutex_lock(&a->lock);
    h3_status_code rc = bind_locked(a, base, layout, cfg, status);
    g_mutex_unlock(&a->lock);
    return rc;
}

/* ---- fusion ---------------------------------------------------------------------------- */

static int64_t place_row(const delta *d, int64_t r, int64_t rows, int head_dim) {
    switch (d->place) {
    case PLACE_QKV: return (r / head_dim) * 3 * head_dim + (int64_t)d->part * head_dim + r % head_dim;
    case PLACE_SWAP_HALVES: return (r + rows / 2) % rows;
    default: return r;
    }
}

static float *to_f32(const h3_st_tensor *t, h3_status *status) {
    float *v = malloc((size_t)t->numel * sizeof *v + 4);
    if (!v) {
        h3_fail(status, H3_ERR_NO_MEMORY, "adapter: out of memory for '%s'", t->name);
        return NULL;
    }
    if (h3_st_to_f32(t, v, (size_t)t->numel, status) != H3_OK) {
        free(v);
        return NULL;
    }
    return v;
}

#define LOW_RANK_CHUNK 1024 /* rows of B·A formed at once */

/* acc[place(r)] += (B·A)[r], B·A in float32 (sgemm) a chunk of rows at a time. */
static h3_status_code add_low_rank(float *acc, const target *t, const delta *d, int head_dim, h3_status *status) {
    int64_t out = d->lora_b->shape[0], in = d->lora_a->shape[1], r = d->lora_a->shape[0];
    float *A = to_f32(d->lora_a, status), *B = A ? to_f32(d->lora_b, status) : NULL;
    float *tmp = B ? malloc((size_t)(LOW_RANK_CHUNK * in) * sizeof *tmp) : NULL;
    if (B && !tmp) h3_fail(status, H3_ERR_NO_MEMORY, "adapter: out of memory fusing '%s'", t->base_name);
    h3_status_code rc = tmp ? H3_OK : status ? status->code : H3_ERR_NO_MEMORY;
    for (int64_t r0 = 0; tmp && r0 < out; r0 += LOW_RANK_CHUNK) {
        int64_t n = out - r0 < LOW_RANK_CHUNK ? out - r0 : LOW_RANK_CHUNK;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)in, (int)r, 1.0f, B + r0 * r, (int)r, A,
                    (int)in, 0.0f, tmp, (int)in);
        for (int64_t i = 0; i < n; i++) {
            float *dst = acc + place_row(d, r0 + i, t->rows, head_dim) * t->cols;
            const float *src = tmp + i * in;
            for (int64_t j = 0; j < in; j++) dst[j] += src[j];
        }
    }
    free(A);
    free(B);
    free(tmp);
    return rc;
}

static h3_status_code add_diff(float *acc, const target *t, const delta *d, int head_dim, h3_status *status) {
    float *v = to_f32(d->diff, status);
    if (!v) return status ? status->code : H3_ERR_NO_MEMORY;
    int64_t rows = t->ndim == 1 ? d->diff->numel : d->diff->shape[0];
    for (int64_t i = 0; i < rows; i++) {
        float *dst = acc + place_row(d, i, t->rows, head_dim) * t->cols;
        for (int64_t j = 0; j < t->cols; j++) dst[j] += v[i * t->cols + j];
    }
    free(v);
    return H3_OK;
}

/* acc rounded once to dtype; for F32 acc itself is the result. */
static void *round_to(h3_st_dtype dtype, float *acc, size_t n) {
    if (dtype == H3_ST_F32) return acc;
    uint16_t *out = malloc(n * sizeof *out + 2);
    if (out)
        for (size_t i = 0; i < n; i++) out[i] = dtype == H3_ST_BF16 ? h3_f32_to_bf16(acc[i]) : h3_f32_to_f16(acc[i]);
    free(acc);
    return out;
}

h3_status_code h3_adapter_fuse(const h3_adapter *a, const h3_st_tensor *base, h3_st_tensor *fused, void **data,
                               h3_status *status) {
    *data = NULL;
    if (!a->bound) return h3_fail(status, H3_ERR_INTERNAL, "adapter '%s': fuse before bind", a->path);
    const target *t = g_hash_table_lookup(a->targets, base->name);
    if (!t) return H3_OK;
    if (base->dtype != t->dtype || base->numel != t->rows * t->cols || base->shape[0] != t->rows)
        return h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s' differs from the header the adapter was bound to",
                       base->file_path, base->name);
    if (h3_st_is_dummy(base))
        return h3_fail(status, H3_ERR_UNSUPPORTED, "adapter '%s': fusing into '%s' needs the base weights' values "
                       "on the host, and a dummy checkpoint (load-format dummy) has none", a->path, base->name);
    size_t n = (size_t)base->numel;
    float *acc = malloc(n * sizeof *acc + 4);
    if (!acc) return h3_fail(status, H3_ERR_NO_MEMORY, "adapter: out of memory fusing '%s'", base->name);
    h3_status_code rc = h3_st_to_f32(base, acc, n, status);
    /* Low-rank terms first, then the exact diffs: the reference order. */
    for (int i = 0; rc == H3_OK && i < t->n_deltas; i++)
        if (t->deltas[i].lora_a) rc = add_low_rank(acc, t, &t->deltas[i], a->head_dim, status);
    for (int i = 0; rc == H3_OK && i < t->n_deltas; i++)
        if (t->deltas[i].diff) rc = add_diff(acc, t, &t->deltas[i], a->head_dim, status);
    if (rc != H3_OK) {
        free(acc);
        return rc;
    }
    void *out = round_to(base->dtype, acc, n);
    if (!out) return h3_fail(status, H3_ERR_NO_MEMORY, "adapter: out of memory fusing '%s'", base->name);
    *fused = *base;
    fused->data = out;
    *data = out;
    return H3_OK;
}

/* The .set_weight of block's gate, or NULL. */
static const h3_st_tensor *gate_source(const h3_adapter *a, int block) {
    if (block < 0 || block >= a->num_layers) return NULL;
    char *module = g_strdup_printf("transformer_blocks.%d.attn.to_gate_compress", block);
    const module_delta *m = g_hash_table_lookup(a->by_module, module);
    g_free(module);
    return m ? m->t[ROLE_SET_WEIGHT] : NULL;
}

h3_status_code h3_adapter_gate_header(const h3_adapter *a, int block, h3_st_tensor *gate, int *present,
                                      h3_status *status) {
    *present = 0;
    if (!a->bound) return h3_fail(status, H3_ERR_INTERNAL, "adapter '%s': gate before bind", a->path);
    const h3_st_tensor *set = gate_source(a, block);
    if (!set) return H3_OK;
    *gate = *set;
    gate->dtype = a->gate_dtype[block];
    gate->nbytes = (size_t)set->numel * h3_st_dtype_size(gate->dtype);
    gate->data = NULL;
    *present = 1;
    return H3_OK;
}

h3_status_code h3_adapter_gate(const h3_adapter *a, int block, h3_st_tensor *gate, void **data, h3_status *status) {
    *data = NULL;
    if (!a->bound) return h3_fail(status, H3_ERR_INTERNAL, "adapter '%s': gate before bind", a->path);
    const h3_st_tensor *set = gate_source(a, block);
    if (!set) return H3_OK;
    float *acc = to_f32(set, status); /* strength 1: s·set is set itself */
    if (!acc) return status ? status->code : H3_ERR_NO_MEMORY;
    h3_st_dtype dtype = a->gate_dtype[block];
    void *out = round_to(dtype, acc, (size_t)set->numel);
    if (!out) return h3_fail(status, H3_ERR_NO_MEMORY, "adapter: out of memory for '%s'", set->name);
    *gate = *set;
    gate->dtype = dtype;
    gate->nbytes = (size_t)set->numel * h3_st_dtype_size(dtype);
    gate->data = out;
    *data = out;
    return H3_OK;
}
