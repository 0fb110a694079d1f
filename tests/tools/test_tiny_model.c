/* test_tiny_model.c - h3-make-tiny-model against the golden tiny model.
 *
 *   test_tiny_model TOOL [BUILD_MODEL_DIR]
 *
 * --profile golden must reproduce tests/data/models/tiny-h3 exactly in
 * structure: the same files, every safetensors tensor with the same name,
 * shape and dtype, every JSON file with the same keys and values, the
 * parameter counts of golden_meta.json, and the anti-aliasing filter buffers
 * bit for bit. --profile default may differ only in the audio VAE (32 kHz,
 * hop 800) and must run end to end through the engine with finite,
 * non-constant output. Same seed gives identical bytes, another seed other
 * values, and bad arguments exit 2 with one line. BUILD_MODEL_DIR, the model
 * the build generated, must equal a fresh `--profile default --seed 1234`.
 * --lora FILE writes a LoRA the engine opens on that model, which changes
 * its clip. */
#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <stdint.h>
#include <sys/wait.h>

#include "h3.h"
#include "model/h3_audio_vae.h"
#include "backend/h3_backend.h"
#include "base/h3_random.h"
#include "base/h3_safetensors.h"
#include "h3_test.h"
#include "h3_test_capture.h"

static const char *tool;

static const char *const weight_files[] = {
    "transformer/diffusion_pytorch_model.safetensors", "vae/diffusion_pytorch_model.safetensors",
    "audio_vae/diffusion_pytorch_model.safetensors", "text_encoder/model.safetensors"};

/* ---- helpers ---------------------------------------------------------------- */

static void remove_tree(const char *path) {
    if (g_file_test(path, G_FILE_TEST_IS_DIR) && !g_file_test(path, G_FILE_TEST_IS_SYMLINK)) {
        GDir *d = g_dir_open(path, 0, NULL);
        const char *name;
        while (d && (name = g_dir_read_name(d))) {
            char *child = g_build_filename(path, name, NULL);
            remove_tree(child);
            g_free(child);
        }
        if (d) g_dir_close(d);
        g_rmdir(path);
    } else {
        g_remove(path);
    }
}

static void list_into(const char *root, const char *rel, GPtrArray *out) {
    char *dir = rel ? g_build_filename(root, rel, NULL) : g_strdup(root);
    GDir *d = g_dir_open(dir, 0, NULL);
    const char *name;
    while (d && (name = g_dir_read_name(d))) {
        char *child_rel = rel ? g_build_filename(rel, name, NULL) : g_strdup(name);
        char *child = g_build_filename(root, child_rel, NULL);
        if (g_file_test(child, G_FILE_TEST_IS_DIR)) {
            list_into(root, child_rel, out);
            g_free(child_rel);
        } else {
            g_ptr_array_add(out, child_rel);
        }
        g_free(child);
    }
    if (d) g_dir_close(d);
    g_free(dir);
}

static gint compare_strings(gconstpointer a, gconstpointer b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every regular file under root, as sorted relative paths. */
static GPtrArray *list_files(const char *root) {
    GPtrArray *out = g_ptr_array_new_with_free_func(g_free);
    list_into(root, NULL, out);
    g_ptr_array_sort(out, compare_strings);
    return out;
}

static int same_file_list(GPtrArray *a, GPtrArray *b) {
    if (a->len != b->len) return 0;
    for (guint i = 0; i < a->len; i++)
        if (strcmp(g_ptr_array_index(a, i), g_ptr_array_index(b, i))) return 0;
    return 1;
}

static int files_identical(const char *a, const char *b) {
    gchar *x = NULL, *y = NULL;
    gsize nx = 0, ny = 0;
    int same = g_file_get_contents(a, &x, &nx, NULL) && g_file_get_contents(b, &y, &ny, NULL) && nx == ny &&
               memcmp(x, y, nx) == 0;
    g_free(x);
    g_free(y);
    return same;
}

static int files_identical_in(const char *dir_a, const char *dir_b, const char *rel) {
    char *a = g_build_filename(dir_a, rel, NULL), *b = g_build_filename(dir_b, rel, NULL);
    int same = files_identical(a, b);
    g_free(a);
    g_free(b);
    return same;
}

/* Runs the tool; returns its exit status (-1 if it did not exit). */
static int run_tool(const char *const *args, char **out, char **err) {
    GPtrArray *argv = g_ptr_array_new();
    g_ptr_array_add(argv, (gpointer)tool);
    for (int i = 0; args[i]; i++) g_ptr_array_add(argv, (gpointer)args[i]);
    g_ptr_array_add(argv, NULL);
    int wait_status = 0;
    GError *e = NULL;
    char *o = NULL, *r = NULL;
    int code = -1;
    if (g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, &o, &r, &wait_status, &e)) {
        if (WIFEXITED(wait_status)) code = WEXITSTATUS(wait_status);
    } else {
        fprintf(stderr, "spawn %s: %s\n", tool, e->message);
        g_error_free(e);
    }
    g_ptr_array_free(argv, TRUE);
    if (out) *out = o;
    else g_free(o);
    if (err) *err = r;
    else g_free(r);
    return code;
}

static int make_model(const char *dir, const char *profile, const char *seed) {
    char *err = NULL;
    int code = run_tool((const char *const[]){"--output", dir, "--profile", profile, "--seed", seed, NULL}, NULL, &err);
    CHECK(code == 0, "%s --profile %s --seed %s: exit %d: %s", tool, profile, seed, code, err ? err : "");
    g_free(err);
    return code == 0;
}

static JsonNode *read_json(const char *path) {
    JsonParser *p = json_parser_new();
    JsonNode *n = NULL;
    if (json_parser_load_from_file(p, path, NULL) && json_parser_get_root(p)) n = json_node_copy(json_parser_get_root(p));
    g_object_unref(p);
    return n;
}

static JsonNode *read_json_in(const char *dir, const char *rel) {
    char *path = g_build_filename(dir, rel, NULL);
    JsonNode *n = read_json(path);
    g_free(path);
    return n;
}

/* Deep equality with the JSON types kept apart (12 is not 12.0). On a
 * difference, *where names it. */
static int json_equal(JsonNode *a, JsonNode *b, const char *path, char **where) {
    int same = a && b && JSON_NODE_TYPE(a) == JSON_NODE_TYPE(b);
    if (same && JSON_NODE_HOLDS_VALUE(a)) {
        GType t = json_node_get_value_type(a);
        same = t == json_node_get_value_type(b);
        if (same && t == G_TYPE_INT64) same = json_node_get_int(a) == json_node_get_int(b);
        else if (same && t == G_TYPE_DOUBLE) same = json_node_get_double(a) == json_node_get_double(b);
        else if (same && t == G_TYPE_BOOLEAN) same = json_node_get_boolean(a) == json_node_get_boolean(b);
        else if (same && t == G_TYPE_STRING) same = !strcmp(json_node_get_string(a), json_node_get_string(b));
    } else if (same && JSON_NODE_HOLDS_ARRAY(a)) {
        JsonArray *x = json_node_get_array(a), *y = json_node_get_array(b);
        same = json_array_get_length(x) == json_array_get_length(y);
        for (guint i = 0; same && i < json_array_get_length(x); i++) {
            char *sub = g_strdup_printf("%s[%u]", path, i);
            same = json_equal(json_array_get_element(x, i), json_array_get_element(y, i), sub, where);
            g_free(sub);
            if (!same) return 0;
        }
    } else if (same && JSON_NODE_HOLDS_OBJECT(a)) {
        JsonObject *x = json_node_get_object(a), *y = json_node_get_object(b);
        same = json_object_get_size(x) == json_object_get_size(y);
        GList *members = json_object_get_members(x);
        for (GList *l = members; same && l; l = l->next) {
            char *sub = g_strdup_printf("%s.%s", path, (const char *)l->data);
            same = json_equal(json_object_get_member(x, l->data), json_object_get_member(y, l->data), sub, where);
            g_free(sub);
            if (!same) {
                g_list_free(members);
                return 0;
            }
        }
        g_list_free(members);
    }
    if (!same && where && !*where) *where = g_strdup(path);
    return same;
}

static JsonNode *member(JsonNode *object, const char *key) {
    return object && JSON_NODE_HOLDS_OBJECT(object) ? json_object_get_member(json_node_get_object(object), key)
                                                    : NULL;
}

static int json_files_equal(const char *dir_a, const char *dir_b, const char *rel, char **where) {
    JsonNode *a = read_json_in(dir_a, rel), *b = read_json_in(dir_b, rel);
    int same = json_equal(a, b, rel, where);
    if (a) json_node_unref(a);
    if (b) json_node_unref(b);
    return same;
}

static h3_st_file *open_st(const char *dir, const char *rel) {
    char *path = g_build_filename(dir, rel, NULL);
    h3_st_file *f = NULL;
    h3_status st = {0};
    if (h3_st_open(path, &f, &st) != H3_OK) {
        CHECK(0, "open %s: %s", path, st.message);
        f = NULL;
    }
    g_free(path);
    return f;
}

static int same_shape(const h3_st_tensor *a, const h3_st_tensor *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

static float *to_f32(const h3_st_tensor *t) {
    float *v = g_new(float, t->numel ? t->numel : 1);
    h3_status st = {0};
    if (h3_st_to_f32(t, v, (size_t)t->numel, &st) != H3_OK) {
        CHECK(0, "%s: %s", t->name, st.message);
        memset(v, 0, (size_t)t->numel * sizeof *v);
    }
    return v;
}

/* ---- golden profile ------------------------------------------------------------- */

/* Every tensor of the golden file exists in ours with its name, dtype and
 * shape, and ours has no other; data is aligned to the element size. */
static void check_headers(const char *golden_dir, const char *dir, const char *rel) {
    h3_st_file *g = open_st(golden_dir, rel), *f = open_st(dir, rel);
    if (!g || !f) goto done;
    CHECK(h3_st_count(f) == h3_st_count(g), "%s: %zu tensors, golden %zu", rel, h3_st_count(f), h3_st_count(g));
    for (size_t i = 0; i < h3_st_count(g); i++) {
        const h3_st_tensor *gt = h3_st_at(g, i), *t = h3_st_find(f, gt->name);
        CHECK(t && same_shape(t, gt), "%s: tensor %s missing or with another dtype/shape (golden %s, %d dims)", rel,
              gt->name, h3_st_dtype_name(gt->dtype), gt->ndim);
    }
    int aligned = 1;
    for (size_t i = 0; i < h3_st_count(f); i++) {
        const h3_st_tensor *t = h3_st_at(f, i);
        if ((uintptr_t)t->data % h3_st_dtype_size(t->dtype)) aligned = 0;
    }
    CHECK(aligned, "%s: a tensor is not aligned to its element size", rel);
    CHECK(h3_st_metadata(f, "format") && !strcmp(h3_st_metadata(f, "format"), "pt"), "%s: __metadata__.format", rel);
done:
    if (g) h3_st_close(g);
    if (f) h3_st_close(f);
}

/* Values: finite everywhere; filter buffers (expect_filters of them in an
 * audio VAE) bit-identical to the golden model's; weight-norm g = ‖v‖ per
 * output row; SnakeBeta logs 0. */
static void check_values(const char *golden_dir, const char *dir, const char *rel, int expect_filters) {
    h3_st_file *g = open_st(golden_dir, rel), *f = open_st(dir, rel);
    if (!g || !f) goto done;
    const h3_st_tensor *golden_filter = h3_st_find(g, "decoder.activation_post.upsample.filter");
    int finite = 1, filters = 0, filters_equal = 0, norms = 0, norms_ok = 0, snake = 0, snake_ok = 0;
    for (size_t i = 0; i < h3_st_count(f); i++) {
        const h3_st_tensor *t = h3_st_at(f, i);
        float *v = to_f32(t);
        for (int64_t k = 0; k < t->numel; k++)
            if (!isfinite(v[k])) finite = 0;
        if (g_str_has_suffix(t->name, ".filter")) {
            const h3_st_tensor *gt = golden_filter; /* all taps are the same low-pass */
            filters++;
            if (gt && gt->nbytes == t->nbytes && !memcmp(gt->data, t->data, t->nbytes)) filters_equal++;
        }
        if (g_str_has_suffix(t->name, ".act.alpha") || g_str_has_suffix(t->name, ".act.beta")) {
            int zero = 1;
            for (int64_t k = 0; k < t->numel; k++) zero &= v[k] == 0.0f;
            snake++;
            snake_ok += zero;
        }
        if (g_str_has_suffix(t->name, ".weight_g")) {
            char *vname = g_strdup(t->name); /* ….weight_g -> ….weight_v */
            vname[strlen(vname) - 1] = 'v';
            const h3_st_tensor *vt = h3_st_find(f, vname);
            norms++;
            if (vt && vt->shape[0] == t->numel) {
                float *w = to_f32(vt);
                int64_t per = vt->numel / t->numel;
                int ok = 1;
                for (int64_t r = 0; r < t->numel; r++) {
                    double s = 0;
                    for (int64_t k = 0; k < per; k++) s += (double)w[r * per + k] * w[r * per + k];
                    if (fabs(sqrt(s) - v[r]) > 1e-6 * sqrt(s)) ok = 0;
                }
                norms_ok += ok;
                g_free(w);
            }
            g_free(vname);
        }
        g_free(v);
    }
    CHECK(finite, "%s: a value is not finite", rel);
    CHECK(filters_equal == filters, "%s: %d of %d anti-aliasing filters differ from the golden buffers", rel,
          filters - filters_equal, filters);
    CHECK(norms_ok == norms, "%s: %d of %d weight_g are not ||weight_v||", rel, norms - norms_ok, norms);
    CHECK(snake_ok == snake, "%s: %d of %d SnakeBeta log-alpha/beta are not 0", rel, snake - snake_ok, snake);
    if (strstr(rel, "audio_vae"))
        CHECK(filters == expect_filters && norms > 0, "%s: %d filters (want %d), %d weight norms", rel, filters,
              expect_filters, norms);
    const h3_st_tensor *z = h3_st_find(f, "pre_block.attn.zero_k_bias");
    if (strstr(rel, "audio_vae")) {
        float *v = z ? to_f32(z) : NULL;
        int zero = z != NULL;
        for (int64_t k = 0; v && k < z->numel; k++) zero &= v[k] == 0.0f;
        CHECK(zero, "%s: zero_k_bias is not zero", rel);
        g_free(v);
    }
done:
    if (g) h3_st_close(g);
    if (f) h3_st_close(f);
}

static void check_golden_meta(const char *golden_dir, const char *dir, int same_audio) {
    JsonNode *g = read_json_in(golden_dir, "golden_meta.json"), *m = read_json_in(dir, "golden_meta.json");
    CHECK(g && m && JSON_NODE_HOLDS_OBJECT(m), "golden_meta.json unreadable");
    if (!g || !m || !JSON_NODE_HOLDS_OBJECT(m)) goto done;
    GList *keys = json_object_get_members(json_node_get_object(g));
    for (GList *l = keys; l; l = l->next)
        CHECK(member(m, l->data), "golden_meta.json: no \"%s\"", (const char *)l->data);
    g_list_free(keys);
    static const char *const equal_keys[] = {"name", "public", "text_encoder_layer", "dtype_policy", "tokenizer"};
    for (size_t i = 0; i < G_N_ELEMENTS(equal_keys); i++) {
        char *where = NULL;
        CHECK(json_equal(member(g, equal_keys[i]), member(m, equal_keys[i]), equal_keys[i], &where),
              "golden_meta.json: %s differs", where);
        g_free(where);
    }
    static const char *const parts[] = {"transformer", "vae", "text_encoder", "audio_vae"};
    for (size_t i = 0; i < G_N_ELEMENTS(parts); i++) {
        if (!same_audio && !strcmp(parts[i], "audio_vae")) continue;
        char *where = NULL;
        CHECK(json_equal(member(member(g, "param_counts"), parts[i]), member(member(m, "param_counts"), parts[i]),
                         parts[i], &where),
              "golden_meta.json: param_counts.%s differs from the golden count", parts[i]);
        g_free(where);
    }
    JsonNode *gc = member(g, "configs"), *mc = member(m, "configs");
    GList *cfgs = gc && JSON_NODE_HOLDS_OBJECT(gc) ? json_object_get_members(json_node_get_object(gc)) : NULL;
    for (GList *l = cfgs; l; l = l->next) {
        if (!same_audio && !strcmp(l->data, "audio_vae")) continue;
        char *where = NULL;
        CHECK(json_equal(member(gc, l->data), member(mc, l->data), l->data, &where),
              "golden_meta.json: configs.%s differs", where);
        g_free(where);
    }
    g_list_free(cfgs);
    /* The checksums describe the files next to it. */
    JsonNode *sums = member(m, "files_sha256");
    for (size_t i = 0; i < G_N_ELEMENTS(weight_files); i++) {
        JsonNode *s = member(sums, weight_files[i]);
        char *path = g_build_filename(dir, weight_files[i], NULL);
        gchar *data = NULL;
        gsize len = 0;
        char *sum = g_file_get_contents(path, &data, &len, NULL)
                        ? g_compute_checksum_for_data(G_CHECKSUM_SHA256, (const guchar *)data, len)
                        : NULL;
        CHECK(s && sum && JSON_NODE_HOLDS_VALUE(s) && json_node_get_value_type(s) == G_TYPE_STRING &&
                  !strcmp(json_node_get_string(s), sum),
              "golden_meta.json: files_sha256 of %s", weight_files[i]);
        g_free(sum);
        g_free(data);
        g_free(path);
    }
done:
    if (g) json_node_unref(g);
    if (m) json_node_unref(m);
}

static void test_golden_profile(const char *golden_dir, const char *dir) {
    GPtrArray *want = list_files(golden_dir), *got = list_files(dir);
    CHECK(same_file_list(want, got), "the file list differs from the golden layout (%u files, golden %u)", got->len,
          want->len);
    for (guint i = 0; i < want->len; i++) {
        const char *rel = g_ptr_array_index(want, i);
        if (g_str_has_suffix(rel, ".safetensors")) {
            check_headers(golden_dir, dir, rel);
            /* 3 stages × 2 AMP blocks × 6 activations + activation_post, 2 filters each */
            check_values(golden_dir, dir, rel, 2 * (3 * 2 * 6 + 1));
        } else if (!strcmp(rel, "golden_meta.json")) {
            check_golden_meta(golden_dir, dir, 1);
        } else if (g_str_has_suffix(rel, ".json")) {
            char *where = NULL;
            CHECK(json_files_equal(golden_dir, dir, rel, &where), "%s: differs from the golden config at %s", rel,
                  where ? where : "(top)");
            g_free(where);
        }
        /* Tokenizer files are copies, byte for byte. */
        if (g_str_has_prefix(rel, "tokenizer/") || g_str_has_suffix(rel, ".txt") || strstr(rel, "vocab") ||
            strstr(rel, "tokenizer"))
            CHECK(files_identical_in(golden_dir, dir, rel), "%s: not a byte copy of the golden file", rel);
    }
    g_ptr_array_free(want, TRUE);
    g_ptr_array_free(got, TRUE);
}

/* ---- seeds ---------------------------------------------------------------------- */

static void test_same_seed(const char *a, const char *b) {
    GPtrArray *fa = list_files(a), *fb = list_files(b);
    CHECK(same_file_list(fa, fb) && fa->len > 0, "two runs wrote different file lists");
    int identical = 0;
    for (guint i = 0; i < fa->len; i++) identical += files_identical_in(a, b, g_ptr_array_index(fa, i));
    CHECK(identical == (int)fa->len, "same seed: %d of %u files differ", (int)fa->len - identical, fa->len);
    g_ptr_array_free(fa, TRUE);
    g_ptr_array_free(fb, TRUE);
}

/* Another seed: the same headers, other values for every random tensor
 * (those that are not constant under the first seed). */
static void test_other_seed(const char *a, const char *b) {
    for (size_t i = 0; i < G_N_ELEMENTS(weight_files); i++) {
        h3_st_file *x = open_st(a, weight_files[i]), *y = open_st(b, weight_files[i]);
        if (!x || !y) {
            if (x) h3_st_close(x);
            if (y) h3_st_close(y);
            continue;
        }
        int random = 0, differ = 0, constant_same = 1, headers = h3_st_count(x) == h3_st_count(y);
        for (size_t k = 0; k < h3_st_count(x); k++) {
            const h3_st_tensor *tx = h3_st_at(x, k), *ty = h3_st_find(y, tx->name);
            if (!ty || !same_shape(tx, ty)) {
                headers = 0;
                continue;
            }
            if (g_str_has_suffix(tx->name, ".filter")) continue; /* buffers: the same in every model */
            float *vx = to_f32(tx);
            int is_constant = 1;
            for (int64_t n = 1; n < tx->numel; n++) is_constant &= vx[n] == vx[0];
            int same = !memcmp(tx->data, ty->data, tx->nbytes);
            if (is_constant && tx->numel > 1) constant_same &= same;
            else if (tx->numel > 1) {
                random++;
                differ += !same;
            }
            g_free(vx);
        }
        CHECK(headers, "%s: other seed, other tensors", weight_files[i]);
        CHECK(random > 0 && differ == random, "%s: other seed: %d of %d random tensors unchanged", weight_files[i],
              random - differ, random);
        CHECK(constant_same, "%s: other seed changed a constant tensor", weight_files[i]);
        h3_st_close(x);
        h3_st_close(y);
    }
    CHECK(!files_identical_in(a, b, "golden_meta.json"), "golden_meta.json does not record the seed");
}

/* ---- default profile -------------------------------------------------------------- */

static int64_t product(JsonNode *array) {
    if (!array || !JSON_NODE_HOLDS_ARRAY(array)) return -1;
    int64_t p = 1;
    JsonArray *a = json_node_get_array(array);
    for (guint i = 0; i < json_array_get_length(a); i++) p *= json_array_get_int_element(a, i);
    return p;
}

static void test_default_configs(const char *golden_dir, const char *golden_out, const char *dir) {
    GPtrArray *want = list_files(golden_dir), *got = list_files(dir);
    CHECK(same_file_list(want, got), "default profile: the file list differs from the golden layout");
    for (guint i = 0; i < want->len; i++) {
        const char *rel = g_ptr_array_index(want, i);
        if (!g_str_has_suffix(rel, ".json") || !strcmp(rel, "golden_meta.json") || !strcmp(rel, "audio_vae/config.json"))
            continue;
        char *where = NULL;
        CHECK(json_files_equal(golden_dir, dir, rel, &where), "default profile: %s differs at %s", rel,
              where ? where : "(top)");
        g_free(where);
    }
    g_ptr_array_free(want, TRUE);
    g_ptr_array_free(got, TRUE);

    /* Same seed, same configs: the other components are the same bytes. */
    for (size_t i = 0; i < G_N_ELEMENTS(weight_files); i++) {
        int same = files_identical_in(golden_out, dir, weight_files[i]);
        if (strstr(weight_files[i], "audio_vae")) CHECK(!same, "default profile: the audio VAE equals the golden one");
        else CHECK(same, "default profile: %s differs from the golden profile's", weight_files[i]);
    }

    JsonNode *g = read_json_in(golden_dir, "audio_vae/config.json"), *a = read_json_in(dir, "audio_vae/config.json");
    CHECK(g && a && JSON_NODE_HOLDS_OBJECT(a), "audio_vae/config.json unreadable");
    if (g && a && JSON_NODE_HOLDS_OBJECT(a)) {
        GList *keys = json_object_get_members(json_node_get_object(g));
        CHECK(json_object_get_size(json_node_get_object(a)) == g_list_length(keys), "audio_vae/config.json: key count");
        static const char *const changed[] = {"decoder_dim", "decoder_rates", "decoder_kernel_sizes", "encoder_rates",
                                              "sampling_rate"};
        for (GList *l = keys; l; l = l->next) {
            int may_change = 0;
            for (size_t k = 0; k < G_N_ELEMENTS(changed); k++) may_change |= !strcmp(changed[k], l->data);
            char *where = NULL;
            if (!may_change)
                CHECK(json_equal(member(g, l->data), member(a, l->data), l->data, &where),
                      "audio_vae/config.json: %s differs from the golden", where);
            else
                CHECK(member(a, l->data) != NULL, "audio_vae/config.json: no %s", (const char *)l->data);
            g_free(where);
        }
        g_list_free(keys);
        JsonNode *rate = member(a, "sampling_rate");
        CHECK(rate && json_node_get_int(rate) == 32000, "sampling_rate is not 32000");
        CHECK(product(member(a, "decoder_rates")) == 800, "decoder_rates multiply to %lld",
              (long long)product(member(a, "decoder_rates")));
        CHECK(product(member(a, "encoder_rates")) == 800, "encoder_rates multiply to %lld",
              (long long)product(member(a, "encoder_rates")));

        JsonNode *meta = read_json_in(dir, "golden_meta.json");
        char *where = NULL;
        JsonObject *stripped = json_object_new();
        GList *members = json_object_get_members(json_node_get_object(a));
        for (GList *l = members; l; l = l->next)
            if (((const char *)l->data)[0] != '_')
                json_object_set_member(stripped, l->data, json_node_copy(member(a, l->data)));
        g_list_free(members);
        JsonNode *sn = json_node_init_object(json_node_alloc(), stripped);
        CHECK(json_equal(member(member(meta, "configs"), "audio_vae"), sn, "configs.audio_vae", &where),
              "golden_meta.json: %s is not the audio VAE config", where);
        JsonNode *prof = member(meta, "profile");
        CHECK(prof && !strcmp(json_node_get_string(prof), "default"), "golden_meta.json: profile");
        json_node_unref(sn);
        json_object_unref(stripped);
        g_free(where);
        if (meta) json_node_unref(meta);
    }
    if (g) json_node_unref(g);
    if (a) json_node_unref(a);
    check_golden_meta(golden_dir, dir, 0);
    check_values(golden_dir, dir, "audio_vae/diffusion_pytorch_model.safetensors", 2 * (4 * 2 * 6 + 1));
}

static double std_dev(const float *x, size_t n) {
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        s += x[i];
        s2 += (double)x[i] * x[i];
    }
    double m = n ? s / n : 0;
    return n ? sqrt(fmax(s2 / n - m * m, 0)) : 0;
}

/* The audio VAE decoder of h3core on the default model: 32 kHz, hop 800,
 * finite, non-constant, in [-1, 1]. */
static void test_default_audio_decode(const char *dir) {
    char *sub = g_build_filename(dir, "audio_vae", NULL);
    h3_backend *b = NULL;
    h3_audio_vae *vae = NULL;
    h3_status st = {0};
    CHECK(h3_backend_cpu_create(1, &b, &st) == H3_OK, "cpu backend: %s", st.message);
    if (b && h3_audio_vae_load(b, sub, &vae, &st) != H3_OK) CHECK(0, "load %s: %s", sub, st.message);
    if (vae) {
        CHECK(h3_audio_vae_sample_rate(vae) == 32000 && h3_audio_vae_hop(vae) == 800, "rate %d hop %d",
              h3_audio_vae_sample_rate(vae), h3_audio_vae_hop(vae));
        const int L = 7, C = h3_audio_vae_get_config(vae)->latent_channels;
        float *z = g_new(float, 2 * C * L), *out = g_new(float, 2 * L * 800);
        h3_torch_generator gen;
        h3_torch_generator_seed(&gen, 7);
        h3_torch_randn_f32(&gen, z, (size_t)(2 * C * L));
        CHECK(h3_audio_vae_decode(vae, z, L, out, NULL, &st) == H3_OK, "decode: %s", st.message);
        int finite = 1;
        for (int i = 0; i < 2 * L * 800; i++) finite &= isfinite(out[i]) && fabsf(out[i]) <= 1.0f;
        double sd = std_dev(out, (size_t)(2 * L * 800));
        int clipped = 0;
        for (int i = 0; i < 2 * L * 800; i++) clipped += fabsf(out[i]) >= 0.999f;
        printf("default audio VAE: %.1f%% of the samples at the clamp\n", 100.0 * clipped / (2 * L * 800));
        CHECK(finite, "default audio VAE: output not finite or outside [-1, 1]");
        CHECK(sd > 1e-4, "default audio VAE: output is constant (std %g)", sd);
        printf("default audio VAE: %d latents -> %d samples at 32 kHz, std %.4f\n", L, L * 800, sd);
        g_free(z);
        g_free(out);
        h3_audio_vae_free(vae);
    }
    if (b) h3_backend_destroy(b);
    g_free(sub);
}

typedef h3_test_capture capture;

/* The whole engine on the default model: text, denoising, both decoders. */
static void test_default_engine(const char *dir) {
    h3_engine_options opt = h3_engine_options_default();
    opt.model_dir = dir;
    opt.compute = H3_COMPUTE_CPU;
    opt.cpu_threads = 2;
    h3_engine *e = NULL;
    h3_status st = {0};
    if (h3_engine_open(&opt, &e, &st) != H3_OK) {
        CHECK(0, "engine on the default model: %s", st.message);
        return;
    }
    h3_request r = h3_request_default();
    r.prompt = "a red fox crosses fresh snow at sunrise";
    r.seed = 42;
    r.width = 64;
    r.height = 32;
    r.num_frames = 22;
    r.steps = 2;
    capture c = {0};
    if (h3_engine_validate(e, &r, &c.plan, &st) != H3_OK) {
        CHECK(0, "validate: %s", st.message);
    } else {
        CHECK(c.plan.sample_rate == 32000, "plan sample rate %d", c.plan.sample_rate);
        CHECK(c.plan.audio_samples == (int64_t)c.plan.audio_latents * 800, "plan: %lld samples for %d latents",
              (long long)c.plan.audio_samples, c.plan.audio_latents);
        size_t video_bytes = (size_t)c.plan.num_frames * c.plan.width * c.plan.height * 3;
        CHECK(h3_test_generate(e, &r, &c, NULL, &st) == H3_OK, "generate: %s", st.message);
        CHECK(c.frames == c.plan.num_frames && c.samples == c.plan.audio_samples, "delivered %d frames, %lld samples",
              c.frames, (long long)c.samples);
        int finite = 1;
        for (int64_t i = 0; i < 2 * c.plan.audio_samples; i++) finite &= isfinite(c.audio[i]);
        double sd_audio = std_dev(c.audio, (size_t)(2 * c.plan.audio_samples));
        int lo = 255, hi = 0;
        size_t saturated = 0;
        for (size_t i = 0; i < video_bytes; i++) {
            saturated += c.video[i] == 0 || c.video[i] == 255;
            lo = c.video[i] < lo ? c.video[i] : lo;
            hi = c.video[i] > hi ? c.video[i] : hi;
        }
        CHECK(finite && sd_audio > 1e-4, "engine audio: finite %d, std %g", finite, sd_audio);
        CHECK(hi > lo, "engine video is constant (%d)", lo);
        printf("default model end to end: %d frames %dx%d (pixel range %d..%d, %.1f%% at 0 or 255), %lld samples at "
               "%d Hz (std %.4f)\n",
               c.frames, c.plan.width, c.plan.height, lo, hi, 100.0 * (double)saturated / (double)video_bytes,
               (long long)c.samples, c.plan.sample_rate, sd_audio);
    }
    h3_test_capture_free(&c);
    h3_engine_close(e);
}

/* ---- arguments ------------------------------------------------------------------- */

static void test_bad_arguments(const char *scratch) {
    char *target = g_build_filename(scratch, "never-written", NULL);
    const char *const *cases[] = {
        (const char *const[]){NULL},
        (const char *const[]){"--output", NULL},
        (const char *const[]){"--output=", NULL},
        (const char *const[]){"--output", target, "--profile", "huge", NULL},
        (const char *const[]){"--output", target, "--seed", "abc", NULL},
        (const char *const[]){"--output", target, "--seed", "-1", NULL},
        (const char *const[]){"--output", target, "--seed", "4294967296", NULL},
        (const char *const[]){"--output", target, "--seed", "", NULL},
        (const char *const[]){"--output", target, "--frobnicate", NULL},
        (const char *const[]){"--output", target, "extra", NULL},
        (const char *const[]){"--seed", "1", "--profile", "golden", NULL},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        char *out = NULL, *err = NULL;
        int code = run_tool(cases[i], &out, &err);
        const char *nl = err ? strchr(err, '\n') : NULL;
        CHECK(code == 2, "case %zu: exit %d, want 2", i, code);
        CHECK(err && nl && nl[1] == 0 && nl > err && g_str_has_prefix(err, "h3-make-tiny-model: "),
              "case %zu: stderr is not one error line: '%s'", i, err ? err : "");
        CHECK(out && !*out, "case %zu: wrote to stdout", i);
        g_free(out);
        g_free(err);
    }
    CHECK(!g_file_test(target, G_FILE_TEST_EXISTS), "a bad invocation created %s", target);

    char *out = NULL;
    CHECK(run_tool((const char *const[]){"--help", NULL}, &out, NULL) == 0 && out && strstr(out, "--profile"),
          "--help");
    g_free(out);

    /* An output that cannot be a directory is a write failure, exit 1. */
    char *file = g_build_filename(scratch, "a-file", NULL);
    g_file_set_contents(file, "x", 1, NULL);
    char *err = NULL;
    CHECK(run_tool((const char *const[]){"--output", file, NULL}, NULL, &err) == 1 && err && *err,
          "--output on a regular file: want exit 1 and a message");
    g_free(err);
    g_free(file);
    g_free(target);
}

/* --lora: a LoRA for the model just written, fused by the engine. */
static void test_lora_file(const char *scratch) {
    char *dir = g_build_filename(scratch, "with-lora", NULL), *file = g_build_filename(scratch, "style.safetensors", NULL);
    char *err = NULL;
    int code = run_tool((const char *const[]){"--output", dir, "--lora", file, NULL}, NULL, &err);
    CHECK(code == 0, "--lora: exit %d: %s", code, err ? err : "");
    g_free(err);
    char *item = g_strdup_printf("%s:0.6", file);
    const char *const loras[] = {item, NULL};
    h3_test_capture c[2];
    for (int k = 0; code == 0 && k < 2; k++) {
        h3_engine_options o = h3_engine_options_default();
        o.model_dir = dir;
        o.compute = H3_COMPUTE_CPU;
        o.loras = k ? loras : NULL;
        h3_engine *e = NULL;
        h3_status st = {0};
        memset(&c[k], 0, sizeof c[k]);
        CHECK(h3_engine_open(&o, &e, &st) == H3_OK, "open %s: %s", k ? "with the LoRA" : "without", st.message);
        h3_request r = h3_request_default();
        r.prompt = "a robot dancing";
        r.width = 64, r.height = 32, r.num_frames = 22, r.steps = 2;
        if (e) CHECK(h3_test_generate(e, &r, &c[k], NULL, &st) == H3_OK, "generate: %s", st.message);
        h3_engine_close(e);
    }
    if (code == 0 && c[0].video && c[1].video)
        CHECK(memcmp(c[0].video, c[1].video, (size_t)c[0].plan.num_frames * 64 * 32 * 3) != 0,
              "the --lora file does not change the clip");
    for (int k = 0; code == 0 && k < 2; k++) h3_test_capture_free(&c[k]);
    g_free(item);
    g_free(dir);
    g_free(file);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_tiny_model TOOL [BUILD_MODEL_DIR]\n");
        return 2;
    }
    tool = argv[1];
    const char *golden_dir = h3_test_data("models/tiny-h3");
    char *scratch = g_dir_make_tmp("h3-tiny-model-XXXXXX", NULL);
    if (!scratch) {
        fprintf(stderr, "no temporary directory\n");
        return 1;
    }
    char *g1 = g_build_filename(scratch, "golden-1234", NULL), *g2 = g_build_filename(scratch, "golden-1235", NULL);
    char *d1 = g_build_filename(scratch, "default-1234", NULL), *d2 = g_build_filename(scratch, "default-1234b", NULL);

    if (make_model(g1, "golden", "1234")) test_golden_profile(golden_dir, g1);
    if (make_model(g2, "golden", "1235") && g_file_test(g1, G_FILE_TEST_IS_DIR)) test_other_seed(g1, g2);
    if (make_model(d1, "default", "1234") && make_model(d2, "default", "1234")) {
        test_same_seed(d1, d2);
        test_default_configs(golden_dir, g1, d1);
        test_default_audio_decode(d1);
        test_default_engine(d1);
        if (argc > 2) {
            GPtrArray *files = list_files(argv[2]), *want = list_files(d1);
            CHECK(same_file_list(files, want), "%s: not the files of --profile default", argv[2]);
            int identical = 0;
            for (guint i = 0; i < want->len; i++) identical += files_identical_in(argv[2], d1, g_ptr_array_index(want, i));
            CHECK(identical == (int)want->len, "%s: %d files differ from --profile default --seed 1234", argv[2],
                  (int)want->len - identical);
            g_ptr_array_free(files, TRUE);
            g_ptr_array_free(want, TRUE);
        }
    }
    test_bad_arguments(scratch);
    test_lora_file(scratch);

    remove_tree(scratch);
    g_free(g1);
    g_free(g2);
    g_free(d1);
    g_free(d2);
    g_free(scratch);
    return h3_test_finish("test_tiny_model");
}
