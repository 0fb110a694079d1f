/* test_adapter.c - FastH3 adapters (h3_adapter.h) against the fusion goldens:
 *
 * - metadata, contract json and key classification of both tiny adapters;
 * - fusion onto the diffusers base: every tensor of the golden fused state
 *   dict (adapter_fused_dense / adapter_fused_vsa) to within one ulp of its
 *   dtype (B·A is a float32 matmul whose summation order may flip the last
 *   bf16 bit), untouched tensors bit-identical and never rewritten;
 * - fusion onto the native base (per-head interleaved qkv_proj, swapped
 *   fc1): mapped back to diffusers order it equals the diffusers fusion bit
 *   for bit;
 * - the VSA gates (set_weight) exactly;
 * - the DiT loaded with an adapter reproduces the transformer golden of the
 *   fused model, identically from both layouts;
 * - every adapter error names the file and the key or value at fault. */
#include <glib/gstdio.h>

#include "model/h3_adapter.h"
#include "h3_test_fasth3.h"

#define TOLERANCE 1e-4

static h3_backend *backend;
static char *tmpdir;

/* ---- open ----------------------------------------------------------------------------- */

static void test_open(void) {
    h3_adapter *d = NULL, *v = NULL;
    h3_status st = {0};
    CHECK(h3_adapter_open(h3_test_data(FASTH3_DENSE_ADAPTER), &d, &st) == H3_OK, "dense: %s", st.message);
    CHECK(h3_adapter_open(h3_test_data(FASTH3_VSA_ADAPTER "/adapter_model.safetensors"), &v, &st) == H3_OK, "vsa: %s",
          st.message);
    if (d) {
        CHECK(h3_adapter_rank(d) == 4 && !h3_adapter_has_vsa_gates(d), "dense: rank %d gates %d", h3_adapter_rank(d),
              h3_adapter_has_vsa_gates(d));
        CHECK(strcmp(h3_adapter_base_model(d), "golden/tiny-h3") == 0 &&
                  strcmp(h3_adapter_finetuned_model(d), "FastVideo/tiny-FastH3-golden-Dense") == 0,
              "dense: base '%s' finetuned '%s'", h3_adapter_base_model(d), h3_adapter_finetuned_model(d));
        CHECK(g_str_has_suffix(h3_adapter_path(d), "dense-datafree/adapter_model.safetensors"), "path %s",
              h3_adapter_path(d));
        const h3_adapter_contract *c = h3_adapter_get_contract(d);
        CHECK(c->present && c->num_dmd_steps == 4 && c->dmd_steps[0] == 999 && c->dmd_steps[1] == 749 &&
                  c->dmd_steps[2] == 500 && c->dmd_steps[3] == 250 && c->video_shift == 12.0 && c->audio_shift == 3.0 &&
                  strcmp(c->attention_backend, "FLASH_ATTN") == 0 && c->vsa_sparsity < 0,
              "dense contract");
        CHECK(h3_adapter_check_base_model(d, "golden/tiny-h3", "m", &st) == H3_OK, "base id: %s", st.message);
        CHECK(h3_adapter_check_base_model(d, "GOLDEN/Tiny-H3", "m", &st) == H3_OK, "base id case: %s", st.message);
        CHECK(h3_adapter_check_base_model(d, "MiniMaxAI/MiniMax-H3", "/models/h3", &st) == H3_ERR_INVALID_ARGUMENT &&
                  strstr(st.message, "golden/tiny-h3") && strstr(st.message, "MiniMaxAI/MiniMax-H3") &&
                  strstr(st.message, "/models/h3") && strstr(st.message, "adapter_model.safetensors"),
              "wrong base model: %s", st.message);
    }
    if (v) {
        const h3_adapter_contract *c = h3_adapter_get_contract(v);
        CHECK(h3_adapter_has_vsa_gates(v) && c->vsa_sparsity == 0.9 && c->vsa_tile_size == 64 &&
                  strcmp(c->attention_backend, "VIDEO_SPARSE_ATTN_H3") == 0,
              "vsa: gates %d, sparsity %g, tile %d", h3_adapter_has_vsa_gates(v), c->vsa_sparsity, c->vsa_tile_size);
    }
    h3_adapter_free(d);
    h3_adapter_free(v);

    h3_adapter *a = NULL;
    CHECK(h3_adapter_open(h3_test_data("adapters/tiny-h3"), &a, &st) == H3_ERR_INVALID_ARGUMENT && !a &&
              strstr(st.message, "dense-datafree") && strstr(st.message, "vsa-datafree"),
          "manifest root: %s", st.message);
    CHECK(h3_adapter_open(h3_test_data("adapters/tiny-h3/nope"), &a, &st) == H3_ERR_NOT_FOUND &&
              strstr(st.message, "adapters/tiny-h3/nope"),
          "missing: %s", st.message);
    CHECK(h3_adapter_open(h3_test_data("models/tiny-h3"), &a, &st) == H3_ERR_NOT_FOUND &&
              strstr(st.message, "adapter_model.safetensors"),
          "not an adapter dir: %s", st.message);
}

/* ---- fusion goldens -------------------------------------------------------------------------- */

/* Distance in units in the last place between two values of one dtype. */
static int64_t ulps(const void *a, const void *b, h3_st_dtype dtype, int64_t i) {
    if (dtype == H3_ST_F32) {
        int32_t x, y;
        memcpy(&x, (const char *)a + 4 * i, 4);
        memcpy(&y, (const char *)b + 4 * i, 4);
        int64_t ox = x < 0 ? (int64_t)INT32_MIN - x : x, oy = y < 0 ? (int64_t)INT32_MIN - y : y;
        return ox > oy ? ox - oy : oy - ox;
    }
    int16_t x, y;
    memcpy(&x, (const char *)a + 2 * i, 2);
    memcpy(&y, (const char *)b + 2 * i, 2);
    int64_t ox = x < 0 ? (int64_t)INT16_MIN - x : x, oy = y < 0 ? (int64_t)INT16_MIN - y : y;
    return ox > oy ? ox - oy : oy - ox;
}

typedef struct tally {
    int64_t values, differ, max_ulp;
    int tensors, bad;
} tally;

/* got (dtype of the golden) against golden tensor g. */
static void compare_tensor(tally *t, const char *label, const h3_st_tensor *g, h3_st_dtype dtype, const void *got,
                           int64_t numel) {
    t->tensors++;
    if (g->dtype != dtype || g->numel != numel) {
        t->bad++;
        CHECK(0, "%s: '%s' is %s x%lld, golden %s x%lld", label, g->name, h3_st_dtype_name(dtype), (long long)numel,
              h3_st_dtype_name(g->dtype), (long long)g->numel);
        return;
    }
    int64_t differ = 0, worst = 0;
    for (int64_t i = 0; i < numel; i++) {
        int64_t u = ulps(got, g->data, dtype, i);
        differ += u != 0;
        worst = u > worst ? u : worst;
    }
    t->values += numel;
    t->differ += differ;
    t->max_ulp = worst > t->max_ulp ? worst : t->max_ulp;
    if (worst > 1) {
        t->bad++;
        CHECK(0, "%s: '%s' differs by %lld ulp", label, g->name, (long long)worst);
    }
}

static const char *kind_of(JsonObject *kinds, const char *name) {
    return kinds && json_object_has_member(kinds, name) ? json_object_get_string_member(kinds, name) : "?";
}

/* Diffusers base: golden fused dict vs base + adapter. Returns the fused
 * bytes by name (for the native comparison); caller destroys. */
static GHashTable *test_fusion_diffusers(const char *adapter_dir, const char *golden_dir) {
    GHashTable *fused = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    char rel[256];
    snprintf(rel, sizeof rel, "goldens/tiny-h3/%s/fusion.json", golden_dir);
    JsonParser *jp = json_parser_new();
    CHECK(json_parser_load_from_file(jp, h3_test_data(rel), NULL), "fusion json %s", rel);
    JsonObject *kinds = golden_json_object(jp, "kinds");
    snprintf(rel, sizeof rel, "goldens/tiny-h3/%s/diffusion_pytorch_model.safetensors", golden_dir);
    h3_st_file *g = golden_open(rel);
    h3_adapter *a = NULL;
    h3_checkpoint *base = NULL;
    h3_dit_config cfg;
    h3_status st = {0};
    CHECK(h3_adapter_open(h3_test_data(adapter_dir), &a, &st) == H3_OK, "%s: %s", adapter_dir, st.message);
    CHECK(h3_checkpoint_open(h3_test_data(FASTH3_DIFFUSERS_DIR), &base, &st) == H3_OK, "base: %s", st.message);
    CHECK(h3_dit_config_load(h3_test_data(FASTH3_DIFFUSERS_DIR), &cfg, &st) == H3_OK, "config: %s", st.message);
    if (a && base && g && kinds) {
        CHECK(h3_adapter_bind(a, base, H3_DIT_DIFFUSERS, &cfg, &st) == H3_OK, "bind: %s", st.message);
        tally t = {0};
        int kinds_ok = 1;
        for (size_t i = 0; i < h3_st_count(g); i++) {
            const h3_st_tensor *gt = h3_st_at(g, i), *bt = h3_checkpoint_find(base, gt->name);
            if (!bt) {
                CHECK(0, "%s: base lacks '%s'", golden_dir, gt->name);
                continue;
            }
            h3_st_tensor ft;
            void *data = NULL;
            CHECK(h3_adapter_fuse(a, bt, &ft, &data, &st) == H3_OK, "fuse %s: %s", gt->name, st.message);
            const char *kind = kind_of(kinds, gt->name);
            int unchanged = strcmp(kind, "unchanged") == 0;
            if (unchanged == (data != NULL)) {
                kinds_ok = 0;
                CHECK(0, "%s: '%s' is %s in fusion.json but was %sfused", golden_dir, gt->name, kind, data ? "" : "not ");
            }
            const void *bytes = data ? data : bt->data;
            if (unchanged) CHECK(memcmp(bytes, gt->data, gt->nbytes) == 0, "unchanged '%s' differs", gt->name);
            compare_tensor(&t, golden_dir, gt, data ? ft.dtype : bt->dtype, bytes, bt->numel);
            g_hash_table_insert(fused, g_strdup(gt->name), g_memdup2(bytes, bt->nbytes));
            free(data);
        }
        printf("%s (diffusers base): %d tensors, %lld values, %lld differ by one ulp (max %lld ulp)\n", golden_dir,
               t.tensors, (long long)t.values, (long long)t.differ, (long long)t.max_ulp);
        CHECK(t.tensors == (int)h3_checkpoint_count(base) && t.bad == 0 && kinds_ok, "%s: %d tensors, %d bad",
              golden_dir, t.tensors, t.bad);
        CHECK(t.differ * 1000 <= t.values, "%s: %lld of %lld values differ (more than 0.1%%)", golden_dir,
              (long long)t.differ, (long long)t.values);
    }
    h3_adapter_free(a);
    h3_checkpoint_close(base);
    h3_st_close(g);
    g_object_unref(jp);
    return fused;
}

/* Where a diffusers tensor's row r lives in the native checkpoint
 * (docs/spec/fasth3-vsa.md §1.5, restated here independently of h3_adapter.c). */
static char *native_of(const char *name, int dh, int ffn, int *part, int *swap) {
    static const char *const model[][2] = {
        {"proj_in.", "video_patch_proj."},       {"proj_out.", "final_layer.video_out."},
        {"audio_proj_in.", "audio_patch_proj."}, {"audio_proj_out.", "final_layer.audio_out."},
        {"context_embedder.", "condition_proj."}, {"time_embedder.linear_1.", "time_embedder.proj_in."},
        {"time_embedder.linear_2.", "time_embedder.proj_out."},
        {"norm_out.linear.", "final_layer.adaln_proj.linear."}, {"norm_out.norm.", "final_layer.norm."},
    };
    *part = -1;
    *swap = 0;
    (void)dh, (void)ffn;
    for (size_t i = 0; i < G_N_ELEMENTS(model); i++)
        if (g_str_has_prefix(name, model[i][0])) return g_strconcat(model[i][1], name + strlen(model[i][0]), NULL);
    char *s = g_strdup(name);
    const char *pairs[][2] = {{"token_refiner.refiner_blocks.", "token_refiner.blocks."}, {"transformer_blocks.", "blocks."},
                              {"attn.to_out.0.", "attn.out_proj."}, {"ff.net.2.", "mlp.fc2."},
                              {"attn.norm_q.", "attn.q_norm."}, {"attn.norm_k.", "attn.k_norm."}};
    for (size_t i = 0; i < G_N_ELEMENTS(pairs); i++) {
        char *at = strstr(s, pairs[i][0]);
        if (!at) continue;
        char *n = g_strdup_printf("%.*s%s%s", (int)(at - s), s, pairs[i][1], at + strlen(pairs[i][0]));
        g_free(s);
        s = n;
    }
    const char *qkv[] = {"attn.to_q.", "attn.to_k.", "attn.to_v."};
    for (int p = 0; p < 3; p++) {
        char *at = strstr(s, qkv[p]);
        if (!at) continue;
        char *n = g_strdup_printf("%.*sattn.qkv_proj.%s", (int)(at - s), s, at + strlen(qkv[p]));
        g_free(s);
        *part = p;
        return n;
    }
    char *at = strstr(s, "ff.net.0.proj.");
    if (at) {
        char *n = g_strdup_printf("%.*smlp.fc1.%s", (int)(at - s), s, at + strlen("ff.net.0.proj."));
        g_free(s);
        *swap = 1;
        return n;
    }
    return s;
}

static void test_fusion_native(const char *adapter_dir, const char *golden_dir, GHashTable *diffusers_fused) {
    char rel[256];
    snprintf(rel, sizeof rel, "goldens/tiny-h3/%s/diffusion_pytorch_model.safetensors", golden_dir);
    h3_st_file *g = golden_open(rel);
    h3_adapter *a = NULL;
    h3_checkpoint *base = NULL;
    h3_dit_config cfg;
    h3_status st = {0};
    CHECK(h3_adapter_open(h3_test_data(adapter_dir), &a, &st) == H3_OK, "%s: %s", adapter_dir, st.message);
    CHECK(h3_checkpoint_open(h3_test_data(FASTH3_NATIVE_DIR), &base, &st) == H3_OK, "native base: %s", st.message);
    CHECK(h3_dit_config_load(h3_test_data(FASTH3_NATIVE_DIR), &cfg, &st) == H3_OK, "config: %s", st.message);
    if (!a || !base || !g) goto out;
    CHECK(h3_adapter_bind(a, base, H3_DIT_NATIVE, &cfg, &st) == H3_OK, "bind native: %s", st.message);
    GHashTable *native = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, free); /* fused native bytes */
    tally t = {0};
    int64_t not_identical = 0;
    for (size_t i = 0; i < h3_st_count(g); i++) {
        const h3_st_tensor *gt = h3_st_at(g, i);
        int part, swap;
        char *nname = native_of(gt->name, cfg.head_dim, cfg.ffn_dim, &part, &swap);
        const h3_st_tensor *bt = h3_checkpoint_find(base, nname);
        if (!bt) {
            CHECK(0, "native base lacks '%s' (for '%s')", nname, gt->name);
            g_free(nname);
            continue;
        }
        const char *bytes = g_hash_table_lookup(native, nname);
        if (!bytes) {
            h3_st_tensor ft;
            void *data = NULL;
            CHECK(h3_adapter_fuse(a, bt, &ft, &data, &st) == H3_OK, "fuse native %s: %s", nname, st.message);
            if (!data) data = g_memdup2(bt->data, bt->nbytes);
            g_hash_table_insert(native, g_strdup(nname), data);
            bytes = data;
        }
        /* Rows of the golden tensor gathered from the native one. */
        size_t es = h3_st_dtype_size(bt->dtype);
        int64_t rows = gt->shape[0], cols = gt->ndim == 2 ? gt->shape[1] : 1, dh = cfg.head_dim;
        char *mine = malloc((size_t)(rows * cols) * es);
        for (int64_t r = 0; r < rows; r++) {
            int64_t src = r;
            if (part >= 0) src = (r / dh) * 3 * dh + part * dh + r % dh;
            if (swap) src = (r + rows / 2) % rows;
            memcpy(mine + (size_t)(r * cols) * es, bytes + (size_t)(src * cols) * es, (size_t)cols * es);
        }
        compare_tensor(&t, "native", gt, bt->dtype, mine, rows * cols);
        const void *d = g_hash_table_lookup(diffusers_fused, gt->name);
        if (!d || memcmp(d, mine, (size_t)(rows * cols) * es) != 0) not_identical++;
        free(mine);
        g_free(nname);
    }
    printf("%s (native base): %d tensors, %lld values, %lld differ by one ulp (max %lld), %lld not bit-identical to "
           "the diffusers fusion\n", golden_dir, t.tensors, (long long)t.values, (long long)t.differ,
           (long long)t.max_ulp, (long long)not_identical);
    CHECK(t.tensors == (int)h3_st_count(g) && t.tensors == 62 && t.bad == 0, "%s native: %d tensors, %d bad",
          golden_dir, t.tensors, t.bad);
    CHECK(not_identical == 0, "%s: %lld tensors fuse differently on the native layout", golden_dir,
          (long long)not_identical);
    g_hash_table_destroy(native);
out:
    h3_adapter_free(a);
    h3_checkpoint_close(base);
    h3_st_close(g);
}

static void test_gates(void) {
    h3_st_file *g = golden_open("goldens/tiny-h3/adapter_fused_vsa/to_gate_compress.safetensors");
    const char *dirs[] = {FASTH3_DIFFUSERS_DIR, FASTH3_NATIVE_DIR};
    for (int l = 0; l < 2 && g; l++) {
        h3_adapter *a = NULL;
        h3_checkpoint *base = NULL;
        h3_dit_config cfg;
        h3_status st = {0};
        CHECK(h3_adapter_open(h3_test_data(FASTH3_VSA_ADAPTER), &a, &st) == H3_OK, "vsa: %s", st.message);
        CHECK(h3_checkpoint_open(h3_test_data(dirs[l]), &base, &st) == H3_OK, "base: %s", st.message);
        CHECK(h3_dit_config_load(h3_test_data(dirs[l]), &cfg, &st) == H3_OK, "config: %s", st.message);
        if (a && base && h3_adapter_bind(a, base, l ? H3_DIT_NATIVE : H3_DIT_DIFFUSERS, &cfg, &st) == H3_OK) {
            for (int i = 0; i < 3; i++) {
                char name[96];
                snprintf(name, sizeof name, "transformer_blocks.%d.attn.to_gate_compress.weight", i);
                h3_st_tensor gate;
                void *data = NULL;
                CHECK(h3_adapter_gate(a, i, &gate, &data, &st) == H3_OK, "gate %d: %s", i, st.message);
                const h3_st_tensor *want = h3_st_find(g, name);
                if (i == 2) {
                    CHECK(!data && !want, "block 2 does not exist, yet a gate came back");
                    continue;
                }
                CHECK(data && want && gate.dtype == H3_ST_BF16 && gate.numel == want->numel &&
                          gate.shape[0] == 64 && gate.shape[1] == 48 && memcmp(data, want->data, want->nbytes) == 0,
                      "gate %d (%s layout) differs from the golden", i, l ? "native" : "diffusers");
                free(data);
            }
        } else {
            CHECK(0, "bind vsa: %s", st.message);
        }
        h3_adapter_free(a);
        h3_checkpoint_close(base);
    }
    h3_st_close(g);
}

/* ---- the DiT with an adapter ------------------------------------------------------------------- */

static float *forward_of(h3_dit *dit, const char *golden, float **audio) {
    JsonParser *p = golden_json(golden);
    h3_st_file *f = golden_tiny(golden);
    h3_dit_layout *l = f ? golden_layout(p, f) : NULL;
    float *v = NULL;
    *audio = NULL;
    if (l && dit) golden_forward(backend, dit, f, l, &v, audio);
    h3_dit_layout_free(l);
    h3_st_close(f);
    g_object_unref(p);
    return v;
}

static void test_dit_with_adapter(void) {
    const char *golden = "transformer_t2va_fasth3_dense";
    h3_dit *dits[3] = {0};
    const char *dirs[2] = {FASTH3_DIFFUSERS_DIR, FASTH3_NATIVE_DIR};
    h3_status st = {0};
    for (int l = 0; l < 2; l++) {
        h3_adapter *a = NULL;
        CHECK(h3_adapter_open(h3_test_data(FASTH3_DENSE_ADAPTER), &a, &st) == H3_OK, "dense: %s", st.message);
        if (a) CHECK(h3_dit_load_with_adapter(backend, h3_test_data(dirs[l]), NULL, a, &dits[l], &st) == H3_OK,
                     "load %s + adapter: %s", dirs[l], st.message);
        h3_adapter_free(a);
    }
    /* The golden's own fused weights, loaded as a plain checkpoint. */
    CHECK(h3_dit_load(backend, h3_test_data("goldens/tiny-h3/adapter_fused_dense"), &dits[2], &st) == H3_OK,
          "fused dir: %s", st.message);
    h3_st_file *f = golden_tiny(golden);
    float *v[3] = {0}, *a[3] = {0};
    const char *names[3] = {"diffusers base + adapter", "native base + adapter", "golden fused weights"};
    for (int i = 0; i < 3; i++) {
        if (!dits[i]) continue;
        v[i] = forward_of(dits[i], golden, &a[i]);
        char label[160];
        snprintf(label, sizeof label, "%s (%s)", golden, names[i]);
        CHECK(golden_compare(f, "sample", v[i], 222 * 96, label) <= TOLERANCE, "%s: sample", label);
        CHECK(golden_compare(f, "audio_sample", a[i], 414 * 32, label) <= TOLERANCE, "%s: audio", label);
    }
    if (v[0] && v[1] && a[0] && a[1])
        CHECK(memcmp(v[0], v[1], 222 * 96 * sizeof(float)) == 0 && memcmp(a[0], a[1], 414 * 32 * sizeof(float)) == 0,
              "the two base layouts give different fused models");
    if (v[0] && v[2]) {
        double e = h3_test_rel_l2(v[0], v[2], 222 * 96);
        printf("%s: base + adapter vs the golden fused weights: rel L2 %.3e\n", golden, e);
        CHECK(e <= 1e-5, "base + adapter vs fused weights: %.3e", e);
    }
    /* The base model itself is a different model: the adapter did something. */
    h3_dit *plain = NULL;
    if (h3_dit_load(backend, h3_test_data(FASTH3_DIFFUSERS_DIR), &plain, &st) == H3_OK && v[0]) {
        float *pa, *pv = forward_of(plain, golden, &pa);
        double e = pv ? h3_test_rel_l2(pv, v[0], 222 * 96) : 0;
        printf("%s: base without adapter differs by rel L2 %.3e\n", golden, e);
        CHECK(e > 1e-2, "the adapter changed nothing (%.3e)", e);
        free(pv);
        free(pa);
    }
    h3_dit_free(plain);
    for (int i = 0; i < 3; i++) {
        free(v[i]);
        free(a[i]);
        h3_dit_free(dits[i]);
    }
    h3_st_close(f);
}

/* ---- errors ----------------------------------------------------------------------------------- */

#define MAX_ADD 2

typedef struct variant {
    const char *label;
    const char *src;                         /* adapter directory */
    const char *meta[4];                     /* key, value (NULL: removed) pairs */
    const char *drop;                        /* tensor left out */
    const char *rename_from, *rename_to;     /* substring replaced in every key */
    const char *grow;                        /* tensor whose first dim grows by one */
    struct { const char *name; h3_st_dtype dtype; int ndim; int64_t shape[2]; } add[MAX_ADD];
    const char *json;                        /* fastvideo_inference.json beside the file */
    int stage;                               /* 0: open fails, 1: bind (diffusers), 2: bind (native) */
    h3_status_code code;
    const char *text[2];                     /* in the message */
} variant;

static const char *meta_keys[] = {"format", "base_model", "finetuned_model", "base_revision", "finetuned_revision",
                                  "rank", "application", "low_rank_tensors", "diff_tensors", "dropped_unchanged",
                                  "finalized_from", "set_weight_tensors"};

static char *write_variant(const variant *v, int index) {
    char *dir = g_strdup_printf("%s/v%02d", tmpdir, index);
    g_mkdir_with_parents(dir, 0755);
    char *path = g_build_filename(dir, "adapter_model.safetensors", NULL);
    h3_st_file *f = golden_open(v->src);
    h3_status st = {0};
    size_t n = f ? h3_st_count(f) : 0;
    h3_st_write_tensor *t = calloc(n + MAX_ADD, sizeof *t);
    char **names = calloc(n + MAX_ADD, sizeof *names);
    static char zeros[1 << 16];
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const h3_st_tensor *x = h3_st_at(f, i);
        if (v->drop && strcmp(x->name, v->drop) == 0) continue;
        char *at = v->rename_from ? strstr(x->name, v->rename_from) : NULL;
        names[m] = at ? g_strdup_printf("%.*s%s%s", (int)(at - x->name), x->name, v->rename_to, at + strlen(v->rename_from))
                      : g_strdup(x->name);
        t[m].name = names[m];
        t[m].dtype = x->dtype;
        t[m].ndim = x->ndim;
        memcpy(t[m].shape, x->shape, sizeof t[m].shape);
        t[m].data = x->data;
        if (v->grow && strcmp(x->name, v->grow) == 0) {
            t[m].shape[0]++;
            t[m].data = zeros;
        }
        m++;
    }
    for (int i = 0; i < MAX_ADD && v->add[i].name; i++, m++) {
        t[m].name = v->add[i].name;
        t[m].dtype = v->add[i].dtype;
        t[m].ndim = v->add[i].ndim;
        memcpy(t[m].shape, v->add[i].shape, sizeof v->add[i].shape);
        t[m].data = zeros;
    }
    const char *kv[2 * G_N_ELEMENTS(meta_keys) + 1];
    size_t k = 0;
    for (size_t i = 0; f && i < G_N_ELEMENTS(meta_keys); i++) {
        const char *val = h3_st_metadata(f, meta_keys[i]);
        for (int j = 0; j < 4; j += 2)
            if (v->meta[j] && strcmp(v->meta[j], meta_keys[i]) == 0) val = v->meta[j + 1];
        if (!val) continue;
        kv[k++] = meta_keys[i];
        kv[k++] = val;
    }
    kv[k] = NULL;
    CHECK(h3_st_write(path, t, m, kv, &st) == H3_OK, "write %s: %s", path, st.message);
    if (v->json) {
        char *j = g_build_filename(dir, "fastvideo_inference.json", NULL);
        g_file_set_contents(j, v->json, -1, NULL);
        g_free(j);
    }
    for (size_t i = 0; i < n + MAX_ADD; i++) g_free(names[i]);
    free(names);
    free(t);
    h3_st_close(f);
    g_free(dir);
    return path;
}

static void test_errors(void) {
    const char *D = FASTH3_DENSE_ADAPTER "/adapter_model.safetensors", *V = FASTH3_VSA_ADAPTER "/adapter_model.safetensors";
    const variant cases[] = {
        {"wrong format", D, {"format", "fastvideo-lora-v1"}, .code = H3_ERR_FORMAT, .text = {"fastvideo-lora-v1", "format"}},
        {"no base_model", D, {"base_model", NULL}, .code = H3_ERR_FORMAT, .text = {"base_model"}},
        {"not FastH3", D, {"finetuned_model", "someone/anime-lora"}, .code = H3_ERR_FORMAT, .text = {"someone/anime-lora", "FastH3"}},
        {"rank 0", D, {"rank", "0"}, .code = H3_ERR_FORMAT, .text = {"rank", "'0'"}},
        {"short file", D, {"low_rank_tensors", "50"}, .code = H3_ERR_FORMAT, .text = {"low_rank_tensors = 50", "52"}},
        {"undeclared diffs", D, {"diff_tensors", NULL}, .code = H3_ERR_FORMAT, .text = {"diff_tensors"}},
        {"lone lora_A", D, {"low_rank_tensors", "51"}, .drop = "transformer_blocks.1.ff.net.2.lora_B.weight",
         .code = H3_ERR_FORMAT, .text = {"transformer_blocks.1.ff.net.2.lora_A.weight", "lora_B"}},
        {"unknown suffix", D, .rename_from = "proj_in.diff_b", .rename_to = "proj_in.delta_b", .code = H3_ERR_FORMAT,
         .text = {"unknown key", "proj_in.delta_b"}},
        {"alpha key", D, .add = {{"transformer_blocks.0.attn.to_q.alpha", H3_ST_F32, 1, {1}}}, .code = H3_ERR_FORMAT,
         .text = {"transformer_blocks.0.attn.to_q.alpha"}},
        {"rank mismatch", D, .grow = "transformer_blocks.0.attn.to_q.lora_A.weight", .code = H3_ERR_FORMAT,
         .text = {"transformer_blocks.0.attn.to_q.lora_A.weight", "rank 4"}},
        {"integer tensor", D, {"diff_tensors", "17"}, .add = {{"proj_in.diff_x.diff", H3_ST_I32, 1, {4}}},
         .code = H3_ERR_FORMAT, .text = {"proj_in.diff_x.diff", "I32"}},
        {"gate count", V, {"set_weight_tensors", "3"}, .code = H3_ERR_FORMAT, .text = {"set_weight_tensors = 3", "2"}},
        {"contract says dense", V, .json = "{\"attention_backend\": \"FLASH_ATTN\"}", .code = H3_ERR_FORMAT,
         .text = {"FLASH_ATTN", "to_gate_compress"}},
        {"tile 256", V, .json = "{\"vsa_tile_size\": 256}", .code = H3_ERR_UNSUPPORTED, .text = {"vsa_tile_size 256"}},
        {"compete mode", V, .json = "{\"vsa_mode\": \"compete\"}", .code = H3_ERR_UNSUPPORTED, .text = {"compete"}},
        {"ladder length", D, .json = "{\"dmd_denoising_steps\": [999, 749, 500, 250], \"num_inference_steps\": 4}",
         .code = H3_ERR_FORMAT, .text = {"num_inference_steps 4"}},
        {"ladder order", D, .json = "{\"dmd_denoising_steps\": [999, 1000]}", .code = H3_ERR_FORMAT,
         .text = {"dmd_denoising_steps"}},
        /* bind, diffusers base */
        {"B too tall", D, .grow = "transformer_blocks.0.attn.to_q.lora_B.weight", .stage = 1, .code = H3_ERR_FORMAT,
         .text = {"transformer_blocks.0.attn.to_q.lora_B.weight", "base tensor 'transformer_blocks.0.attn.to_q.weight'"}},
        {"diff shape", D, .grow = "context_embedder.diff", .stage = 1, .code = H3_ERR_FORMAT,
         .text = {"context_embedder.diff", "[49, 40]"}},
        {"unknown module", D, .rename_from = "ff.net.2.", .rename_to = "ff.net.3.", .stage = 1, .code = H3_ERR_FORMAT,
         .text = {"ff.net.3.weight", "does not have"}},
        {"block 7", D, .rename_from = "transformer_blocks.1.", .rename_to = "transformer_blocks.7.", .stage = 1,
         .code = H3_ERR_FORMAT, .text = {"transformer_blocks.7."}},
        {"no q bias", D, {"diff_tensors", "17"}, .add = {{"transformer_blocks.0.attn.to_q.diff_b", H3_ST_BF16, 1, {64}}},
         .stage = 1, .code = H3_ERR_FORMAT, .text = {"transformer_blocks.0.attn.to_q.diff_b", "to_q.bias"}},
        {"lora on a norm", D, {"low_rank_tensors", "54"},
         .add = {{"transformer_blocks.0.norm1.lora_A.weight", H3_ST_BF16, 2, {4, 1}},
                 {"transformer_blocks.0.norm1.lora_B.weight", H3_ST_BF16, 2, {48, 4}}},
         .stage = 1, .code = H3_ERR_FORMAT, .text = {"transformer_blocks.0.norm1.lora_A.weight", "1-D"}},
        {"gate shape", V, .grow = "transformer_blocks.1.attn.to_gate_compress.set_weight", .stage = 1,
         .code = H3_ERR_FORMAT, .text = {"transformer_blocks.1.attn.to_gate_compress.set_weight", "[64, 48]"}},
        {"gate of block 5", V, .rename_from = "transformer_blocks.1.attn.to_gate", .rename_to = "transformer_blocks.5.attn.to_gate",
         .stage = 1, .code = H3_ERR_FORMAT, .text = {"transformer_blocks.5.attn.to_gate_compress.set_weight", "not a VSA gate"}},
        {"set_weight elsewhere", V, .rename_from = "1.attn.to_gate_compress", .rename_to = "1.attn.to_qq", .stage = 1,
         .code = H3_ERR_FORMAT, .text = {"transformer_blocks.1.attn.to_qq.set_weight"}},
        /* bind, native base: the same shape error names the fused tensor */
        {"B too tall (native)", D, .grow = "transformer_blocks.0.attn.to_q.lora_B.weight", .stage = 2,
         .code = H3_ERR_FORMAT, .text = {"transformer_blocks.0.attn.to_q.lora_B.weight", "blocks.0.attn.qkv_proj.weight"}},
        {"fc1 B (native)", D, .grow = "transformer_blocks.1.ff.net.0.proj.lora_B.weight", .stage = 2,
         .code = H3_ERR_FORMAT, .text = {"ff.net.0.proj.lora_B.weight", "blocks.1.mlp.fc1.weight"}},
        /* Issue 14: block numbers that are not canonical passed validation and were never applied. */
        {"block 00", D, .rename_from = "transformer_blocks.0.", .rename_to = "transformer_blocks.00.",
         .code = H3_ERR_FORMAT, .text = {"'00'", "not canonical"}},
        {"block 4294967296", D, .rename_from = "transformer_blocks.1.", .rename_to = "transformer_blocks.4294967296.",
         .code = H3_ERR_FORMAT, .text = {"'4294967296'", "not canonical"}},
        {"gate of block 01", V, .rename_from = "transformer_blocks.1.attn.to_gate",
         .rename_to = "transformer_blocks.01.attn.to_gate", .code = H3_ERR_FORMAT, .text = {"'01'", "not canonical"}},
        {"gate of block +1", V, .rename_from = "transformer_blocks.1.attn.to_gate",
         .rename_to = "transformer_blocks.+1.attn.to_gate", .stage = 1, .code = H3_ERR_FORMAT,
         .text = {"transformer_blocks.+1.attn.to_gate_compress.set_weight", "not a VSA gate"}},
        {"flow_shift 1e300", D, .json = "{\"flow_shift\": 1e300}", .code = H3_ERR_FORMAT,
         .text = {"\"flow_shift\"", "1e+300"}},
        {"block 00 (native)", D, .rename_from = "transformer_blocks.1.", .rename_to = "transformer_blocks.001.",
         .code = H3_ERR_FORMAT, .text = {"'001'", "not canonical"}},
    };
    h3_dit_config cfg;
    h3_status st = {0};
    CHECK(h3_dit_config_load(h3_test_data(FASTH3_DIFFUSERS_DIR), &cfg, &st) == H3_OK, "config: %s", st.message);
    h3_checkpoint *bases[2] = {NULL, NULL};
    CHECK(h3_checkpoint_open(h3_test_data(FASTH3_DIFFUSERS_DIR), &bases[0], &st) == H3_OK, "base: %s", st.message);
    CHECK(h3_checkpoint_open(h3_test_data(FASTH3_NATIVE_DIR), &bases[1], &st) == H3_OK, "native: %s", st.message);
    int passed = 0;
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        const variant *v = &cases[i];
        char *path = write_variant(v, (int)i);
        h3_adapter *a = NULL;
        h3_status_code rc = h3_adapter_open(path, &a, &st);
        if (v->stage > 0 && rc == H3_OK)
            rc = h3_adapter_bind(a, bases[v->stage - 1], v->stage == 1 ? H3_DIT_DIFFUSERS : H3_DIT_NATIVE, &cfg, &st);
        else if (v->stage > 0)
            CHECK(0, "%s: open failed early: %s", v->label, st.message);
        /* The message names the file at fault: the adapter or its contract json. */
        int ok = rc == v->code && strstr(st.message, v->json ? "fastvideo_inference.json" : "adapter_model.safetensors");
        for (int j = 0; j < 2; j++) ok &= !v->text[j] || strstr(st.message, v->text[j]) != NULL;
        CHECK(ok, "%s: rc %s, message '%s'", v->label, h3_status_code_name(rc), st.message);
        passed += ok;
        if (i == 0 || v->stage == 1) printf("  %-22s -> %s\n", v->label, st.message);
        h3_adapter_free(a);
        g_free(path);
    }
    printf("adapter errors: %d of %zu cases refused with the expected message\n", passed, G_N_ELEMENTS(cases));

    /* Through the loader: the error surfaces and nothing is returned. */
    char *path = write_variant(&cases[17], 99);
    h3_adapter *a = NULL;
    h3_dit *dit = (h3_dit *)&st;
    if (h3_adapter_open(path, &a, &st) == H3_OK) {
        CHECK(h3_dit_load_with_adapter(backend, h3_test_data(FASTH3_DIFFUSERS_DIR), NULL, a, &dit, &st) == H3_ERR_FORMAT &&
                  dit == NULL && strstr(st.message, "to_q.lora_B.weight"),
              "dit load with a bad adapter: %s", st.message);
    }
    h3_adapter_free(a);
    g_free(path);
    h3_checkpoint_close(bases[0]);
    h3_checkpoint_close(bases[1]);
}

/* Issue 31: 100,000 levels (200 KB) in the adapter's safetensors header or
 * in its fastvideo_inference.json killed h3-generate, gst-launch-1.0 and
 * playbin (through an h3: URI's adapter-location) with SIGSEGV in
 * json-glib's recursion; now a FORMAT error names the file and the bound. */
static char *deep_text(const char *head, const char *tail) {
    GString *s = g_string_new(head);
    for (int i = 0; i < 100000; i++) g_string_append_c(s, '[');
    for (int i = 0; i < 100000; i++) g_string_append_c(s, ']');
    g_string_append(s, tail);
    return g_string_free(s, FALSE);
}

static void expect_deep_refused(const char *label, const char *path, const char *file) {
    h3_adapter *a = NULL;
    h3_status st = {0};
    h3_status_code rc = h3_adapter_open(path, &a, &st);
    CHECK(rc == H3_ERR_FORMAT && !a && strstr(st.message, file) && strstr(st.message, "256 levels"),
          "%s: rc %s, message '%s'", label, h3_status_code_name(rc), st.message);
    h3_adapter_free(a);
}

static void test_deep_json(void) {
    char *json = deep_text("{\"flow_shift\": ", "}");
    variant v = {"deep contract", FASTH3_DENSE_ADAPTER "/adapter_model.safetensors", .json = json};
    char *path = write_variant(&v, 98);
    expect_deep_refused("a 100,000-deep fastvideo_inference.json", path, "fastvideo_inference.json");
    g_free(path);
    g_free(json);

    char *dir = g_build_filename(tmpdir, "deep", NULL);
    g_mkdir_with_parents(dir, 0755);
    path = g_build_filename(dir, "adapter_model.safetensors", NULL);
    char *header = deep_text("{\"__metadata__\": {\"format\": \"fastvideo-lora-v2\", \"x\": ", "}}");
    uint64_t n = strlen(header);
    GString *file = g_string_new(NULL);
    for (int i = 0; i < 8; i++) g_string_append_c(file, (char)((n >> (8 * i)) & 0xff));
    g_string_append(file, header);
    CHECK(g_file_set_contents(path, file->str, (gssize)file->len, NULL), "write %s", path);
    expect_deep_refused("a 100,000-deep adapter header", path, "adapter_model.safetensors");
    g_string_free(file, TRUE);
    g_free(header);
    g_free(path);
    g_free(dir);
}

static void remove_tree(const char *dir) {
    GDir *d = g_dir_open(dir, 0, NULL);
    for (const char *e; d && (e = g_dir_read_name(d));) {
        char *p = g_build_filename(dir, e, NULL);
        if (g_file_test(p, G_FILE_TEST_IS_DIR)) remove_tree(p);
        else g_remove(p);
        g_free(p);
    }
    if (d) g_dir_close(d);
    g_rmdir(dir);
}

int main(void) {
    h3_status st = {0};
    if (h3_backend_cpu_create(2, &backend, &st) != H3_OK) {
        fprintf(stderr, "cpu backend: %s\n", st.message);
        return 1;
    }
    tmpdir = g_dir_make_tmp("h3-adapter-XXXXXX", NULL);
    test_open();
    test_deep_json();
    GHashTable *dense = test_fusion_diffusers(FASTH3_DENSE_ADAPTER, "adapter_fused_dense");
    test_fusion_native(FASTH3_DENSE_ADAPTER, "adapter_fused_dense", dense);
    g_hash_table_destroy(dense);
    GHashTable *vsa = test_fusion_diffusers(FASTH3_VSA_ADAPTER, "adapter_fused_vsa");
    test_fusion_native(FASTH3_VSA_ADAPTER, "adapter_fused_vsa", vsa);
    g_hash_table_destroy(vsa);
    test_gates();
    test_dit_with_adapter();
    test_errors();
    remove_tree(tmpdir);
    g_free(tmpdir);
    h3_backend_destroy(backend);
    return h3_test_finish("test_adapter");
}
