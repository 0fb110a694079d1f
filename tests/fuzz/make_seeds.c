/* make_seeds: the fuzzers' seed corpora, made at build time from tests/data
 * (and the build's embedded tiny model) so that no large seed is committed.
 *
 *   make_seeds OUT_DIR TESTS_DATA_DIR TINY_MODEL_DIR
 *
 * writes OUT_DIR/<harness>/<seed> for every harness of tests/fuzz. Weight
 * files are shrunk to their smallest tensors (a few KiB, metadata kept):
 * the fuzzers mutate headers, not megabytes of weights. Multi-file inputs
 * are joined with H3_FUZZ_SEP as the harnesses split them. Built against the
 * plain h3core (no sanitizer). */
#include <glib.h>
#include <stdarg.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h3.h"
#include "base/h3_random.h"
#include "base/h3_safetensors.h"
#include "model/h3_audio_vae.h"
#include "model/h3_dit.h"
#include "model/h3_text_encoder.h"
#include "model/h3_video_vae.h"

#define SEP "\n--h3-fuzz-part--\n"

static const char *out_dir, *data_dir, *model_dir;
static int n_seeds;

static void die(const char *what, const char *detail) {
    fprintf(stderr, "make_seeds: %s: %s\n", what, detail);
    exit(1);
}

static GBytes *slurp(const char *path) {
    char *text;
    gsize len;
    GError *err = NULL;
    if (!g_file_get_contents(path, &text, &len, &err)) die(path, err->message);
    return g_bytes_new_take(text, len);
}

static GBytes *data_file(const char *rel) {
    char *p = g_build_filename(data_dir, rel, NULL);
    GBytes *b = slurp(p);
    g_free(p);
    return b;
}

/* A file of the engine harnesses' model folder (engine_model below). */
static GBytes *model_file(const char *rel) {
    char *p = g_build_filename(model_dir, rel, NULL);
    GBytes *b = slurp(p);
    g_free(p);
    return b;
}

static GBytes *text(const char *s) { return g_bytes_new(s, strlen(s)); }

/* Writes OUT/harness/name: prefix (may be NULL), then the parts joined by SEP.
 * Takes the parts. */
static void seed(const char *harness, const char *name, GBytes *prefix, int n, GBytes **parts) {
    GByteArray *a = g_byte_array_new();
    if (prefix) {
        g_byte_array_append(a, g_bytes_get_data(prefix, NULL), (guint)g_bytes_get_size(prefix));
        g_bytes_unref(prefix);
    }
    for (int i = 0; i < n; i++) {
        if (i) g_byte_array_append(a, (const guint8 *)SEP, (guint)strlen(SEP));
        g_byte_array_append(a, g_bytes_get_data(parts[i], NULL), (guint)g_bytes_get_size(parts[i]));
        g_bytes_unref(parts[i]);
    }
    char *dir = g_build_filename(out_dir, harness, NULL);
    g_mkdir_with_parents(dir, 0755);
    char *path = g_build_filename(dir, name, NULL);
    GError *err = NULL;
    if (!g_file_set_contents(path, (const char *)a->data, a->len, &err)) die(path, err->message);
    g_free(path);
    g_free(dir);
    g_byte_array_unref(a);
    n_seeds++;
}

#define SEED(h, name, prefix, ...)                                        \
    do {                                                                  \
        GBytes *p_[] = {__VA_ARGS__};                                     \
        seed(h, name, prefix, (int)G_N_ELEMENTS(p_), p_);                \
    } while (0)

/* "name\n" + bytes: a named part (fuzz_checkpoint's shards, fuzz_engine_open's files). */
static GBytes *named(const char *name, GBytes *body) {
    GByteArray *a = g_byte_array_new();
    g_byte_array_append(a, (const guint8 *)name, (guint)strlen(name));
    g_byte_array_append(a, (const guint8 *)"\n", 1);
    g_byte_array_append(a, g_bytes_get_data(body, NULL), (guint)g_bytes_get_size(body));
    g_bytes_unref(body);
    return g_byte_array_free_to_bytes(a);
}

static int by_size(const void *a, const void *b) {
    const h3_st_tensor *x = *(const h3_st_tensor *const *)a, *y = *(const h3_st_tensor *const *)b;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes ? 1 : strcmp(x->name, y->name);
}

/* The __metadata__ of a safetensors file as a NULL-terminated key/value list. */
static char **read_metadata(const char *path) {
    GBytes *b = slurp(path);
    gsize size;
    const guint8 *p = g_bytes_get_data(b, &size);
    guint64 n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | p[i];
    GPtrArray *kv = g_ptr_array_new();
    JsonParser *parser = json_parser_new();
    if (json_parser_load_from_data(parser, (const char *)p + 8, (gssize)n, NULL)) {
        JsonObject *root = json_node_get_object(json_parser_get_root(parser));
        JsonNode *m = json_object_get_member(root, "__metadata__");
        if (m && JSON_NODE_HOLDS_OBJECT(m)) {
            JsonObject *mo = json_node_get_object(m);
            GList *keys = json_object_get_members(mo);
            for (GList *l = keys; l; l = l->next) {
                g_ptr_array_add(kv, g_strdup(l->data));
                g_ptr_array_add(kv, g_strdup(json_object_get_string_member(mo, l->data)));
            }
            g_list_free(keys);
        }
    }
    g_object_unref(parser);
    g_bytes_unref(b);
    g_ptr_array_add(kv, NULL);
    return (char **)g_ptr_array_free(kv, FALSE);
}

/* The smallest tensors of src (at most max_count, about budget bytes of
 * data), with src's metadata. *names (if not NULL) gets the kept names. */
static GBytes *shrink(const char *src_rel, size_t budget, size_t max_count, GPtrArray *names) {
    char *src = g_build_filename(data_dir, src_rel, NULL);
    h3_st_file *f;
    h3_status st;
    if (h3_st_open(src, &f, &st) != H3_OK) die(src, st.message);
    size_t n = h3_st_count(f), keep = 0, bytes = 0;
    const h3_st_tensor **order = g_new(const h3_st_tensor *, n ? n : 1);
    for (size_t i = 0; i < n; i++) order[i] = h3_st_at(f, i);
    qsort(order, n, sizeof *order, by_size);
    h3_st_write_tensor *w = g_new0(h3_st_write_tensor, n ? n : 1);
    for (size_t i = 0; i < n && keep < max_count; i++) {
        if (keep && bytes + order[i]->nbytes > budget) break;
        const h3_st_tensor *t = order[i];
        w[keep] = (h3_st_write_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = t->data};
        memcpy(w[keep].shape, t->shape, sizeof t->shape);
        if (names) g_ptr_array_add(names, g_strdup(t->name));
        bytes += t->nbytes;
        keep++;
    }
    char **meta = read_metadata(src);
    char *tmp = g_build_filename(out_dir, ".shrink.safetensors", NULL);
    if (h3_st_write(tmp, w, keep, (const char *const *)meta, &st) != H3_OK) die(tmp, st.message);
    GBytes *b = slurp(tmp);
    g_unlink(tmp);
    g_free(tmp);
    g_strfreev(meta);
    g_free(w);
    g_free(order);
    h3_st_close(f);
    g_free(src);
    return b;
}

/* An index json mapping each name of each shard's list to that shard. */
static GBytes *index_json(int n, const char *const *shards, GPtrArray *const *names) {
    GString *s = g_string_new("{\n  \"metadata\": {\"total_size\": 0},\n  \"weight_map\": {");
    int first = 1;
    for (int i = 0; i < n; i++)
        for (guint k = 0; k < names[i]->len; k++) {
            g_string_append_printf(s, "%s\n    \"%s\": \"%s\"", first ? "" : ",", (const char *)names[i]->pdata[k],
                                   shards[i]);
            first = 0;
        }
    g_string_append(s, "\n  }\n}\n");
    return g_string_free_to_bytes(s);
}

static void safetensors_seeds(void) {
    static const char *const files[] = {
        "models/tiny-h3/transformer/diffusion_pytorch_model.safetensors",
        "models/tiny-h3/vae/diffusion_pytorch_model.safetensors",
        "models/tiny-h3/audio_vae/diffusion_pytorch_model.safetensors",
        "models/tiny-h3/text_encoder/model.safetensors",
        "models/tiny-h3-native/FL2VA/transformer/model-00001-of-00002.safetensors",
        "adapters/tiny-h3/dense-datafree/adapter_model.safetensors",
        "adapters/tiny-h3/vsa-datafree/adapter_model.safetensors",
        "goldens/common/tokenizer_ids.safetensors",
        "goldens/common/randn.safetensors",
    };
    for (size_t i = 0; i < G_N_ELEMENTS(files); i++) {
        char name[32];
        snprintf(name, sizeof name, "shrunk-%02zu.safetensors", i);
        SEED("safetensors", name, NULL, shrink(files[i], 4096, 12, NULL));
    }
}

static void checkpoint_seeds(void) {
    const char *shards[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    GPtrArray *names[] = {g_ptr_array_new_with_free_func(g_free), g_ptr_array_new_with_free_func(g_free)};
    GBytes *s0 = shrink("models/tiny-h3-native/FL2VA/transformer/model-00001-of-00002.safetensors", 2048, 6, names[0]);
    GBytes *s1 = shrink("models/tiny-h3-native/FL2VA/transformer/model-00002-of-00002.safetensors", 2048, 6, names[1]);
    SEED("checkpoint", "native-2-shards", NULL, index_json(2, shards, names), named(shards[0], s0),
         named(shards[1], s1));
    g_ptr_array_unref(names[0]);
    g_ptr_array_unref(names[1]);

    const char *one[] = {"diffusion_pytorch_model-00001-of-00001.safetensors"};
    GPtrArray *n1 = g_ptr_array_new_with_free_func(g_free);
    GBytes *d = shrink("models/tiny-h3/transformer/diffusion_pytorch_model.safetensors", 4096, 10, n1);
    SEED("checkpoint", "diffusers-1-shard", NULL, index_json(1, one, &n1), named(one[0], d));
    g_ptr_array_unref(n1);
    /* The release's index alone: every shard is missing. */
    SEED("checkpoint", "official-native-index", NULL,
         data_file("official/FL2VA/transformer/model.safetensors.index.json"));
}

static void config_seeds(void) {
    static const char *const files[] = {
        "official/model_index.json", "official/FL2VA/model_index.json", "official/transformer/config.json",
        "official/FL2VA/transformer/config.json", "official/text_encoder/config.json",
        "official/vae/config.json", "official/FL2VA/video_vae/config.json",
        "official/FL2VA/video_vae/source/config.json", "official/audio_vae/config.json",
        "official/FL2VA/audio_vae/config.json", "official/FL2VA/audio_vae/metadata.json",
        "official/scheduler/scheduler_config.json", "models/tiny-h3/golden_meta.json",
        "adapters/tiny-h3/vsa-datafree/fastvideo_inference.json",
    };
    for (size_t i = 0; i < G_N_ELEMENTS(files); i++) {
        char name[32];
        snprintf(name, sizeof name, "config-%02zu.json", i);
        SEED("config", name, NULL, data_file(files[i]));
    }
}

static void model_config_seeds(void) {
    SEED("dit_config", "tiny", NULL, data_file("models/tiny-h3/transformer/config.json"));
    SEED("dit_config", "tiny-native", NULL, data_file("models/tiny-h3-native/FL2VA/transformer/config.json"));
    SEED("dit_config", "release", NULL, data_file("official/transformer/config.json"));
    SEED("dit_config", "release-native", NULL, data_file("official/FL2VA/transformer/config.json"));
    SEED("text_encoder_config", "tiny", NULL, data_file("models/tiny-h3/text_encoder/config.json"));
    SEED("text_encoder_config", "release", NULL, data_file("official/text_encoder/config.json"));
    SEED("text_encoder_config", "release-native", NULL, data_file("official/FL2VA/text_encoder/config.json"));
    SEED("audio_vae_config", "tiny", NULL, data_file("models/tiny-h3/audio_vae/config.json"));
    SEED("audio_vae_config", "release", NULL, data_file("official/audio_vae/config.json"));
    SEED("audio_vae_config", "release-native", NULL, data_file("official/FL2VA/audio_vae/config.json"),
         data_file("official/FL2VA/audio_vae/metadata.json"));
    SEED("video_vae_config", "tiny", NULL, data_file("models/tiny-h3/vae/config.json"));
    SEED("video_vae_config", "release", NULL, data_file("official/vae/config.json"));
    SEED("video_vae_config", "release-native", NULL, data_file("official/FL2VA/video_vae/config.json"),
         data_file("official/FL2VA/video_vae/source/config.json"));
}

static GBytes *flag(unsigned char f) { return g_bytes_new(&f, 1); }

static void tokenizer_seeds(void) {
    /* flags 0: transformers mode, tokenizer.json (+ config); 1: tokenizers mode;
     * 2: vocab.json + merges.txt (+ config) */
    SEED("tokenizer_load", "json+config", flag(0), data_file("models/tiny-h3/tokenizer/tokenizer.json"),
         data_file("models/tiny-h3/tokenizer/tokenizer_config.json"));
    SEED("tokenizer_load", "json-tokenizers-mode", flag(1), data_file("models/tiny-h3/tokenizer/tokenizer.json"));
    SEED("tokenizer_load", "slow+config", flag(2), data_file("models/tiny-h3/tokenizer/vocab.json"),
         data_file("models/tiny-h3/tokenizer/merges.txt"), data_file("models/tiny-h3/tokenizer/tokenizer_config.json"));
    SEED("tokenizer_load", "slow+release-config", flag(2), data_file("models/tiny-h3/tokenizer/vocab.json"),
         data_file("models/tiny-h3/tokenizer/merges.txt"), data_file("official/tokenizer/tokenizer_config.json"));
    SEED("tokenizer_load", "json+release-config", flag(0), data_file("models/tiny-h3/tokenizer/tokenizer.json"),
         data_file("official/FL2VA/tokenizer/tokenizer_config.json"));
    /* The same layouts with tests/fuzz/tokenizer-small (the tiny tokenizer's
     * 256 byte tokens, 24 merges, its added tokens renumbered from 280): a
     * quarter of the bytes to mutate and parse. */
#define SMALL(f) data_file("../fuzz/tokenizer-small/" f)
    SEED("tokenizer_load", "small-json+config", flag(0), SMALL("tokenizer.json"), SMALL("tokenizer_config.json"));
    SEED("tokenizer_load", "small-json-tokenizers-mode", flag(1), SMALL("tokenizer.json"));
    SEED("tokenizer_load", "small-slow+config", flag(2), SMALL("vocab.json"), SMALL("merges.txt"),
         SMALL("tokenizer_config.json"));
    SEED("tokenizer_load", "small-slow", flag(3), SMALL("vocab.json"), SMALL("merges.txt"));
#undef SMALL

    /* The golden strings (tokenizer_goldens.json entries[].text). */
    JsonParser *parser = json_parser_new();
    char *p = g_build_filename(data_dir, "goldens/common/tokenizer_goldens.json", NULL);
    GError *err = NULL;
    if (!json_parser_load_from_file(parser, p, &err)) die(p, err->message);
    JsonArray *entries =
        json_object_get_array_member(json_node_get_object(json_parser_get_root(parser)), "entries");
    for (guint i = 0; i < json_array_get_length(entries); i++) {
        const char *t = json_object_get_string_member(json_array_get_object_element(entries, i), "text");
        char name[32];
        snprintf(name, sizeof name, "golden-%02u", i);
        SEED("tokenizer_encode", name, NULL, text(t));
    }
    g_object_unref(parser);
    g_free(p);
}

/* An adapter cut to the tensors named in keep (NULL-terminated), its
 * metadata's counts set to match: low_rank_tensors, diff_tensors,
 * set_weight_tensors (the others as they were). A few KiB instead of 90. */
static GBytes *adapter_subset(const char *src_rel, const char *const *keep, int low_rank, int diff, int set_weight) {
    char *src = g_build_filename(data_dir, src_rel, NULL);
    h3_st_file *f;
    h3_status st;
    if (h3_st_open(src, &f, &st) != H3_OK) die(src, st.message);
    size_t n = 0;
    while (keep[n]) n++;
    h3_st_write_tensor *w = g_new0(h3_st_write_tensor, n);
    for (size_t i = 0; i < n; i++) {
        const h3_st_tensor *t = h3_st_find(f, keep[i]);
        if (!t) die(src, keep[i]);
        w[i] = (h3_st_write_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = t->data};
        memcpy(w[i].shape, t->shape, sizeof t->shape);
    }
    char **meta = read_metadata(src);
    const char *counts[][2] = {{"low_rank_tensors", NULL}, {"diff_tensors", NULL}, {"set_weight_tensors", NULL}};
    char values[3][16];
    int want[3] = {low_rank, diff, set_weight};
    for (int c = 0; c < 3; c++) {
        snprintf(values[c], sizeof values[c], "%d", want[c]);
        counts[c][1] = values[c];
    }
    for (size_t k = 0; meta[k]; k += 2)
        for (int c = 0; c < 3; c++)
            if (strcmp(meta[k], counts[c][0]) == 0) {
                g_free(meta[k + 1]);
                meta[k + 1] = g_strdup(counts[c][1]);
            }
    char *tmp = g_build_filename(out_dir, ".subset.safetensors", NULL);
    if (h3_st_write(tmp, w, n, (const char *const *)meta, &st) != H3_OK) die(tmp, st.message);
    GBytes *b = slurp(tmp);
    g_unlink(tmp);
    g_free(tmp);
    g_strfreev(meta);
    g_free(w);
    h3_st_close(f);
    g_free(src);
    return b;
}

static void adapter_seeds(void) {
    SEED("adapter", "dense+contract", NULL, data_file("adapters/tiny-h3/dense-datafree/adapter_model.safetensors"),
         data_file("adapters/tiny-h3/dense-datafree/fastvideo_inference.json"));
    SEED("adapter", "vsa+contract", NULL, data_file("adapters/tiny-h3/vsa-datafree/adapter_model.safetensors"),
         data_file("adapters/tiny-h3/vsa-datafree/fastvideo_inference.json"));
    SEED("adapter", "vsa", NULL, data_file("adapters/tiny-h3/vsa-datafree/adapter_model.safetensors"));
    /* one low-rank pair, a diff and a diff_b (and the VSA gates) of each */
    static const char *const dense[] = {"transformer_blocks.0.attn.to_k.lora_A.weight",
                                        "transformer_blocks.0.attn.to_k.lora_B.weight", "norm_out.norm.diff",
                                        "proj_in.diff_b", NULL};
    static const char *const vsa[] = {"transformer_blocks.0.attn.to_k.lora_A.weight",
                                      "transformer_blocks.0.attn.to_k.lora_B.weight", "norm_out.norm.diff",
                                      "proj_in.diff_b", "transformer_blocks.0.attn.to_gate_compress.set_weight",
                                      "transformer_blocks.1.attn.to_gate_compress.set_weight", NULL};
    SEED("adapter", "small-dense+contract", NULL,
         adapter_subset("adapters/tiny-h3/dense-datafree/adapter_model.safetensors", dense, 2, 2, 0),
         data_file("adapters/tiny-h3/dense-datafree/fastvideo_inference.json"));
    SEED("adapter", "small-vsa+contract", NULL,
         adapter_subset("adapters/tiny-h3/vsa-datafree/adapter_model.safetensors", vsa, 2, 2, 2),
         data_file("adapters/tiny-h3/vsa-datafree/fastvideo_inference.json"));
}

/* fuzz_engine_open and fuzz_memory_plan read the same inputs; the plan's
 * own pseudo-files on top. */
static void engine_seeds(const char *h) {
    static const char *const files[] = {
        "golden_meta.json", "scheduler/scheduler_config.json", "audio_scheduler/scheduler_config.json",
        "transformer/config.json", "text_encoder/config.json", "vae/config.json", "audio_vae/config.json",
        "tokenizer/tokenizer_config.json",
    };
    SEED(h, "as-is", NULL, text(""));
    for (size_t i = 0; i < G_N_ELEMENTS(files); i++) {
        char name[32];
        snprintf(name, sizeof name, "file-%02zu", i);
        SEED(h, name, NULL, named(files[i], model_file(files[i])));
    }
    SEED(h, "tp2", NULL, named("@devices", text("cpu:2")));
    SEED(h, "no-model-index", NULL, named("model_index.json", text("")), named("modular_model_index.json", text("")));
    SEED(h, "tap-layer-2", NULL, named("golden_meta.json", text("{\"text_encoder_layer\": 2}")));
    if (strcmp(h, "memory_plan") != 0) return;
    /* (dummy weights unless "@load" says safetensors) */
    SEED(h, "safetensors", NULL, named("@load", text("safetensors")));
    SEED(h, "safetensors-tp2", NULL, named("@load", text("safetensors")), named("@devices", text("cpu:2")));
    SEED(h, "request", NULL, named("@request", text("128 64 39 3")));
    SEED(h, "stream", NULL, named("@memory", text("stream")));
    SEED(h, "stream-safetensors-tp2", NULL, named("@memory", text("stream")), named("@load", text("safetensors")),
         named("@devices", text("cpu:2")));
    SEED(h, "safetensors-config", NULL, named("@load", text("safetensors")),
         named("transformer/config.json", model_file("transformer/config.json")));
}

/* The keyframe decoder: the FL2VA golden's PNG (a small JPEG is committed
 * under seeds/image_file/). */
static void image_seeds(void) { SEED("image_file", "keyframe.png", NULL, data_file("goldens/tiny-h3/e2e_fl2va_keyframe.png")); }

/* ---- the engine harnesses' model --------------------------------------------------- */

static void write_file(const char *path, const void *data, size_t size) {
    GError *err = NULL;
    if (!g_file_set_contents(path, data, (gssize)size, &err)) die(path, err->message);
}

/* dst: a copy of the directory tree src (regular files only). */
static void copy_tree(const char *src, const char *dst) {
    g_mkdir_with_parents(dst, 0755);
    GDir *d = g_dir_open(src, 0, NULL);
    if (!d) die(src, "cannot read the directory");
    for (const char *name; (name = g_dir_read_name(d));) {
        char *s = g_build_filename(src, name, NULL), *t = g_build_filename(dst, name, NULL);
        if (g_file_test(s, G_FILE_TEST_IS_DIR)) {
            copy_tree(s, t);
        } else {
            GBytes *b = slurp(s);
            write_file(t, g_bytes_get_data(b, NULL), g_bytes_get_size(b));
            g_bytes_unref(b);
        }
        g_free(s);
        g_free(t);
    }
    g_dir_close(d);
}

/* Sets the member at each dotted path (its parents exist) of a JSON file to
 * a value given as JSON text: pairs of (path, value), NULL-terminated. */
static void set_json(const char *path, ...) {
    JsonParser *parser = json_parser_new();
    GError *err = NULL;
    if (!json_parser_load_from_file(parser, path, &err)) die(path, err->message);
    va_list ap;
    va_start(ap, path);
    for (const char *dotted; (dotted = va_arg(ap, const char *));) {
        const char *value = va_arg(ap, const char *);
        JsonNode *node = json_from_string(value, &err);
        if (!node) die(value, err->message);
        JsonObject *o = json_node_get_object(json_parser_get_root(parser));
        char **keys = g_strsplit(dotted, ".", -1);
        int n = (int)g_strv_length(keys);
        for (int i = 0; i + 1 < n; i++) o = json_object_get_object_member(o, keys[i]);
        json_object_set_member(o, keys[n - 1], node);
        g_strfreev(keys);
    }
    va_end(ap);
    JsonGenerator *g = json_generator_new();
    json_generator_set_root(g, json_parser_get_root(parser));
    json_generator_set_pretty(g, TRUE);
    if (!json_generator_to_file(g, path, &err)) die(path, err->message);
    g_object_unref(g);
    g_object_unref(parser);
}

/* The tiny model's configs narrowed and cut to the fewest of each kind of
 * part (one DiT block and one refiner block, two text layers, one vision
 * block, one VAE decoder layer, two audio stages with one resblock kernel;
 * the heads still split over 2 TP ranks): every code path of a load is
 * still taken, but an open loads and checks 135 K weight values in 236
 * tensors where the tiny model's took about 1 M in about 600, and the audio
 * hop is 16 samples where it was 800, so a measured generation's host
 * loops over the samples shrink with it. Together they made both engine
 * harnesses 2 to 4 times faster (docs/RELIABILITY.md). */
static void shrink_configs(const char *dst) {
    char *p = g_build_filename(dst, "text_encoder", "config.json", NULL);
    set_json(p, "text_config.num_hidden_layers", "2", "text_config.hidden_size", "16", "text_config.head_dim", "8",
             "text_config.num_attention_heads", "2", "text_config.intermediate_size", "32",
             "text_config.rope_parameters.mrope_section", "[2, 1, 1]", "vision_config.hidden_size", "8",
             "vision_config.intermediate_size", "16", "vision_config.out_hidden_size", "16", "vision_config.depth",
             "1", "vision_config.deepstack_visual_indexes", "[0]", NULL);
    g_free(p);
    p = g_build_filename(dst, "transformer", "config.json", NULL);
    set_json(p, "num_layers", "1", "num_refiner_layers", "1", "hidden_size", "16", "attention_head_dim", "8",
             "rope_freq_dim", "1", "ffn_dim", "32", "text_dim", "16", NULL);
    g_free(p);
    p = g_build_filename(dst, "vae", "config.json", NULL);
    set_json(p, "block_out_channels", "[4, 4, 4, 4]", "decoder_attention_head_dim", "8", "decoder_num_layers", "1",
             NULL);
    g_free(p);
    p = g_build_filename(dst, "audio_vae", "config.json", NULL);
    set_json(p, "decoder_dim", "16", "latent_dim", "16", "decoder_rates", "[4, 4]", "decoder_kernel_sizes", "[8, 8]",
             "encoder_rates", "[4, 4]", "resblock_kernel_sizes", "[3]", "resblock_dilation_sizes", "[[1, 3]]", NULL);
    g_free(p);
}

/* The bytes of a dummy tensor (h3_st_random over the whole tensor: index
 * = element), in its dtype: what a file of those weights would hold. */
static void *dummy_bytes(const h3_st_tensor *t) {
    if (t->data) return g_memdup2(t->data, t->nbytes);
    uint8_t *out = g_malloc(t->nbytes ? t->nbytes : 1);
    for (int64_t i = 0; i < t->numel; i++) {
        float x = h3_counter_uniform(t->random.key, (uint64_t)(t->random.offset + i), t->random.lo, t->random.hi);
        if (t->dtype == H3_ST_F32) memcpy(out + 4 * i, &x, 4);
        else if (t->dtype == H3_ST_BF16 || t->dtype == H3_ST_F16) {
            uint16_t h = t->dtype == H3_ST_BF16 ? h3_f32_to_bf16(x) : h3_f32_to_f16(x);
            memcpy(out + 2 * i, &h, 2);
        } else die(t->name, "a dummy tensor of a dtype make_seeds does not write");
    }
    return out;
}

/* Replaces the safetensors file `path` (its metadata kept) by the tensors of
 * checkpoint ck (a component's load-format dummy list, drawn here): exactly
 * what the engine reads, at the component's configured size. */
static void write_checkpoint(const char *path, h3_checkpoint *ck) {
    size_t n = h3_checkpoint_count(ck);
    h3_st_write_tensor *w = g_new0(h3_st_write_tensor, n ? n : 1);
    for (size_t i = 0; i < n; i++) {
        const h3_st_tensor *t = h3_checkpoint_at(ck, i);
        w[i] = (h3_st_write_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = dummy_bytes(t)};
        memcpy(w[i].shape, t->shape, sizeof t->shape);
    }
    char **meta = read_metadata(path);
    h3_status st;
    if (h3_st_write(path, w, n, (const char *const *)meta, &st) != H3_OK) die(path, st.message);
    for (size_t i = 0; i < n; i++) g_free((void *)w[i].data);
    g_free(w);
    g_strfreev(meta);
    h3_checkpoint_close(ck);
}

/* Every component's weight file of the model at dst rewritten from its
 * config (write_checkpoint), the text encoder's up to its last layer. */
static void rewrite_weights(const char *dst) {
    h3_checkpoint *ck = NULL;
    h3_status st;
    char *dir = g_build_filename(dst, "text_encoder", NULL), *file = g_build_filename(dir, "model.safetensors", NULL);
    if (h3_text_encoder_dummy_checkpoint(dir, 2, 1, &ck, &st) != H3_OK) die(dir, st.message);
    write_checkpoint(file, ck);
    g_free(dir), g_free(file);
    dir = g_build_filename(dst, "transformer", NULL), file = g_build_filename(dir, "diffusion_pytorch_model.safetensors", NULL);
    if (h3_dit_dummy_checkpoint(dir, 2, 0, &ck, &st) != H3_OK) die(dir, st.message);
    write_checkpoint(file, ck);
    g_free(dir), g_free(file);
    dir = g_build_filename(dst, "vae", NULL), file = g_build_filename(dir, "diffusion_pytorch_model.safetensors", NULL);
    h3_video_vae_options vae_options = {.encoder = 1};
    if (h3_video_vae_dummy_checkpoint_with(dir, 3, &vae_options, &ck, &st) != H3_OK) die(dir, st.message);
    write_checkpoint(file, ck);
    g_free(dir), g_free(file);
    dir = g_build_filename(dst, "audio_vae", NULL), file = g_build_filename(dir, "diffusion_pytorch_model.safetensors", NULL);
    if (h3_audio_vae_dummy_checkpoint(dir, 4, &ck, &st) != H3_OK) die(dir, st.message);
    write_checkpoint(file, ck);
    g_free(dir), g_free(file);
}

/* OUT/model: the folder fuzz_engine_open and fuzz_memory_plan open, the
 * embedded tiny model made cheaper to open where no harness input reaches:
 * its configs shrunk (shrink_configs), its weight files rewritten to match
 * them (rewrite_weights; the text encoder's has its two layers, tapped at
 * layer 2 by golden_meta.json), its tokenizer tests/fuzz/tokenizer-small
 * (7 KB of tokenizer.json for 28), its golden_meta.json the one key h3core
 * reads. Returns its path. */
static char *engine_model(const char *tiny) {
    char *dst = g_build_filename(out_dir, "model", NULL);
    copy_tree(tiny, dst);
    shrink_configs(dst);
    char *p;
    /* golden_meta.json: only the key h3core reads (the tiny one's 7.6 KB are
     * provenance: hashes, counts, notes) */
    static const char meta[] = "{\n  \"name\": \"tiny-h3 (fuzz: shrunk)\",\n  \"text_encoder_layer\": 2\n}\n";
    p = g_build_filename(dst, "golden_meta.json", NULL);
    write_file(p, meta, sizeof meta - 1);
    g_free(p);
    rewrite_weights(dst);
    static const char *const tok[] = {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"};
    for (size_t i = 0; i < G_N_ELEMENTS(tok); i++) {
        char *rel = g_build_filename("..", "fuzz", "tokenizer-small", tok[i], NULL);
        GBytes *b = data_file(rel);
        p = g_build_filename(dst, "tokenizer", tok[i], NULL);
        write_file(p, g_bytes_get_data(b, NULL), g_bytes_get_size(b));
        g_free(p);
        g_bytes_unref(b);
        g_free(rel);
    }
    return dst;
}

static int count_frames(void *opaque, int first, int count, const uint8_t *rgb) {
    (void)first, (void)rgb;
    *(int *)opaque += count;
    return 0;
}

/* The engine harnesses' model must load and run, or they would fuzz
 * nothing but config errors without anyone noticing: a clip of it on one
 * CPU rank and on two (the harnesses' small request), every frame out. */
static void check_engine_model(const char *dir) {
    static const char *const devices[] = {NULL, "cpu:2"};
    for (size_t i = 0; i < G_N_ELEMENTS(devices); i++) {
        h3_engine_options o = h3_engine_options_default();
        o.model_dir = dir;
        o.compute = H3_COMPUTE_CPU;
        o.cpu_threads = 1;
        o.devices = devices[i];
        h3_request r = h3_request_default();
        r.prompt = "a robot dancing";
        r.width = 64, r.height = 32, r.num_frames = 22, r.steps = 2;
        int frames = 0;
        h3_callbacks cb = {.video_frames = count_frames, .opaque = &frames};
        h3_engine *e = NULL;
        h3_status st;
        if (h3_engine_open(&o, &e, &st) != H3_OK || h3_engine_generate(e, &r, &cb, &st) != H3_OK)
            die(dir, st.message);
        h3_engine_close(e);
        if (frames != r.num_frames) die(dir, "the fuzz model's clip lacks frames");
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: make_seeds OUT_DIR TESTS_DATA_DIR TINY_MODEL_DIR\n");
        return 2;
    }
    out_dir = argv[1];
    data_dir = argv[2];
    model_dir = argv[3];
    g_mkdir_with_parents(out_dir, 0755);
    safetensors_seeds();
    checkpoint_seeds();
    config_seeds();
    model_config_seeds();
    tokenizer_seeds();
    adapter_seeds();
    model_dir = engine_model(model_dir);
    check_engine_model(model_dir);
    engine_seeds("engine_open");
    engine_seeds("memory_plan");
    image_seeds();
    printf("make_seeds: %d seeds in %s\n", n_seeds, out_dir);
    return 0;
}
