/* test_tokenizer.c - the Qwen3 BPE tokenizer against the goldens made with HF
 * tokenizers and transformers (goldens/common/tokenizer_goldens.json, ids in
 * tokenizer_ids.safetensors), for the real and the tiny vocabulary, plus the
 * official release's slow files, the spec's toy vocabulary and error cases. */
#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/h3_safetensors.h"
#include "h3_test.h"
#include "model/h3_tokenizer.h"

#define MAX_ENTRIES 256

static int n_entries;
static char *texts[MAX_ENTRIES];
static JsonParser *golden_parser;
static JsonObject *golden_root;
static h3_st_file *golden_ids;

/* Golden ids of entry j in column ("real_tokenizers", ...). */
static const int64_t *golden_column(const char *column, int j, size_t *n) {
    char name[128];
    snprintf(name, sizeof name, "%s.ids", column);
    const h3_st_tensor *ids = h3_st_find(golden_ids, name);
    snprintf(name, sizeof name, "%s.offsets", column);
    const h3_st_tensor *off = h3_st_find(golden_ids, name);
    if (!ids || !off || ids->dtype != H3_ST_I64 || off->dtype != H3_ST_I64 || off->numel != n_entries + 1)
        return NULL;
    const int64_t *o = off->data;
    *n = (size_t)(o[j + 1] - o[j]);
    return (const int64_t *)ids->data + o[j];
}

static int load_goldens(void) {
    GError *err = NULL;
    golden_parser = json_parser_new();
    const char *path = h3_test_data("goldens/common/tokenizer_goldens.json");
    if (!json_parser_load_from_file(golden_parser, path, &err)) {
        fprintf(stderr, "%s: %s\n", path, err->message);
        g_error_free(err);
        return -1;
    }
    golden_root = json_node_get_object(json_parser_get_root(golden_parser));
    JsonArray *entries = json_object_get_array_member(golden_root, "entries");
    n_entries = (int)json_array_get_length(entries);
    for (int j = 0; j < n_entries && j < MAX_ENTRIES; j++)
        texts[j] = g_strdup(json_object_get_string_member(json_array_get_object_element(entries, j), "text"));
    h3_status st;
    if (h3_st_open(h3_test_data("goldens/common/tokenizer_ids.safetensors"), &golden_ids, &st)) {
        fprintf(stderr, "%s\n", st.message);
        return -1;
    }
    return 0;
}

/* The json's id arrays and the safetensors must agree (both are goldens). */
static void check_golden_files_agree(void) {
    static const char *columns[] = {"real_tokenizers", "real_transformers", "tiny_tokenizers",
                                    "tiny_transformers"};
    JsonArray *entries = json_object_get_array_member(golden_root, "entries");
    int agree = 0;
    for (int c = 0; c < 4; c++)
        for (int j = 0; j < n_entries; j++) {
            JsonArray *a =
                json_object_get_array_member(json_array_get_object_element(entries, j), columns[c]);
            size_t n = 0;
            const int64_t *g = golden_column(columns[c], j, &n);
            int same = g && n == json_array_get_length(a);
            for (size_t i = 0; same && i < n; i++)
                same = json_array_get_int_element(a, (guint)i) == g[i];
            agree += same;
        }
    CHECK(agree == 4 * n_entries, "golden json and safetensors differ (%d of %d agree)", agree,
          4 * n_entries);
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Encodes every golden string and compares with one column; returns the
 * number of exact matches. */
static int check_column(const h3_tokenizer *tok, const char *label, const char *column) {
    int ok = 0;
    for (int j = 0; j < n_entries; j++) {
        size_t ng = 0, n = 0;
        int32_t *ids = NULL;
        h3_status st;
        const int64_t *g = golden_column(column, j, &ng);
        h3_status_code rc = h3_tokenizer_encode(tok, texts[j], &ids, &n, &st);
        int same = g && rc == H3_OK && n == ng;
        for (size_t i = 0; same && i < n; i++)
            same = ids[i] == g[i];
        CHECK(same, "%s vs %s: entry %d %s (rc %d %s)", label, column, j, texts[j], rc, rc ? st.message : "");
        if (!same && g) {
            int32_t gi[4096];
            for (size_t i = 0; i < ng && i < 4096; i++)
                gi[i] = (int32_t)g[i];
            print_ids("got", ids, n);
            print_ids("want", gi, ng < 4096 ? ng : 4096);
        }
        ok += same;
        free(ids);
    }
    printf("%-58s vs %-17s: %d/%d exact\n", label, column, ok, n_entries);
    return ok;
}

static h3_tokenizer *load(const char *path, h3_tokenizer_mode mode, const char *config) {
    h3_status st;
    h3_tokenizer *tok = NULL;
    h3_tokenizer_options opt = {mode, config};
    gint64 t0 = g_get_monotonic_time();
    h3_status_code rc = h3_tokenizer_load_with_options(path, &opt, &tok, &st);
    double dt = (double)(g_get_monotonic_time() - t0) / 1e6;
    CHECK(rc == H3_OK && tok, "load %s: %s", path, rc ? st.message : "");
    printf("load %s (%s%s%s): %.3f s, vocab size %d\n", path, mode ? "tokenizers" : "transformers",
           config ? ", config " : "", config ? config : "", dt, tok ? h3_tokenizer_vocab_size(tok) : -1);
    return tok;
}

/* The golden "real_tokens" strings are the byte-level forms of the ids. */
static void check_token_strings(const h3_tokenizer *tok) {
    JsonArray *entries = json_object_get_array_member(golden_root, "entries");
    int ok = 0, total = 0;
    for (int j = 0; j < n_entries; j++) {
        JsonArray *s = json_object_get_array_member(json_array_get_object_element(entries, j), "real_tokens");
        size_t n = 0;
        const int64_t *g = golden_column("real_tokenizers", j, &n);
        for (size_t i = 0; g && i < n && i < json_array_get_length(s); i++, total++) {
            const char *t = h3_tokenizer_id_to_token(tok, (int32_t)g[i]);
            const char *want = json_array_get_string_element(s, (guint)i);
            ok += t && !strcmp(t, want);
            if (t) CHECK(h3_tokenizer_token_to_id(tok, t) == (int32_t)g[i], "token_to_id('%s')", t);
        }
    }
    CHECK(ok == total && total > 400, "id_to_token matches real_tokens: %d/%d", ok, total);
}

static void test_real(void) {
    const char *dir = h3_test_data("tokenizers/qwen3");
    const char *json = h3_test_data("tokenizers/qwen3/tokenizer.json");
    const char *official = h3_test_data("official/tokenizer");
    const char *official_cfg = h3_test_data("official/tokenizer/tokenizer_config.json");

    /* tokenizers.Tokenizer.from_file(tokenizer.json): no H3 extras. */
    h3_tokenizer *plain = load(json, H3_TOKENIZER_MODE_TOKENIZERS, NULL);
    if (plain) {
        CHECK(check_column(plain, "qwen3/tokenizer.json [tokenizers]", "real_tokenizers") == n_entries,
              "column");
        CHECK(h3_tokenizer_vocab_size(plain) == 151669, "vocab size %d", h3_tokenizer_vocab_size(plain));
        check_token_strings(plain);
    }
    /* transformers on the npm directory: its tokenizer_config.json names no
     * extras, so <d> etc. are still plain text, as in the tokenizers column. */
    h3_tokenizer *npm = load(dir, H3_TOKENIZER_MODE_TRANSFORMERS, NULL);
    if (npm) {
        CHECK(check_column(npm, "qwen3/ [transformers, npm config]", "real_tokenizers") == n_entries,
              "column");
        CHECK(h3_tokenizer_token_to_id(npm, "<d>") == -1, "npm config has no <d>");
        h3_tokenizer_free(npm);
    }
    /* transformers with the release's tokenizer_config.json: the extras are
     * appended as 151669..151675 (the H3 pipeline call). */
    h3_tokenizer *h3 = load(json, H3_TOKENIZER_MODE_TRANSFORMERS, official_cfg);
    if (h3) {
        CHECK(check_column(h3, "qwen3/tokenizer.json + official config [transformers]",
                           "real_transformers") == n_entries,
              "column");
        CHECK(h3_tokenizer_vocab_size(h3) == 151676, "vocab size %d", h3_tokenizer_vocab_size(h3));
    }
    /* The official release: vocab.json + merges.txt + tokenizer_config.json. */
    h3_tokenizer *rel = load(official, H3_TOKENIZER_MODE_TRANSFORMERS, NULL);
    if (rel) {
        CHECK(check_column(rel, "official/tokenizer (vocab.json+merges.txt) [transformers]",
                           "real_transformers") == n_entries,
              "column");
        CHECK(h3_tokenizer_vocab_size(rel) == 151676, "vocab size %d", h3_tokenizer_vocab_size(rel));
        JsonObject *extra = json_object_get_object_member(
            json_object_get_object_member(golden_root, "real_tokenizer"), "h3_extra_ids_via_transformers");
        GList *names = json_object_get_members(extra);
        int n_extra = 0;
        for (GList *l = names; l; l = l->next, n_extra++) {
            int32_t want = (int32_t)json_object_get_int_member(extra, l->data);
            CHECK(h3_tokenizer_token_to_id(rel, l->data) == want, "%s id %d", (char *)l->data,
                  h3_tokenizer_token_to_id(rel, l->data));
            CHECK(h3_tokenizer_is_special(rel, want), "%s is special", (char *)l->data);
            if (h3)
                CHECK(h3_tokenizer_token_to_id(h3, l->data) == want, "%s id via tokenizer.json",
                      (char *)l->data);
        }
        g_list_free(names);
        CHECK(n_extra == 7, "%d extras", n_extra);
        CHECK(h3_tokenizer_is_special(rel, 151655) && !h3_tokenizer_is_special(rel, 151667) &&
                  !h3_tokenizer_is_special(rel, 9707),
              "special flags of <|image_pad|>, <think>, Hello");
        /* Same vocabulary from the slow files as from tokenizer.json. */
        if (plain) {
            int same = 0;
            for (int32_t id = 0; id < 151669; id++) {
                const char *a = h3_tokenizer_id_to_token(rel, id), *b = h3_tokenizer_id_to_token(plain, id);
                same += a && b && !strcmp(a, b);
            }
            CHECK(same == 151669, "official vocab equals tokenizer.json on %d of 151669 ids", same);
        }
        CHECK(h3_tokenizer_id_to_token(rel, 151676) == NULL && h3_tokenizer_id_to_token(rel, -1) == NULL,
              "out-of-range ids");
    }
    /* Both official paths agree on the golden strings (a direct comparison). */
    if (rel && h3) {
        int same = 0;
        for (int j = 0; j < n_entries; j++) {
            int32_t *a = NULL, *b = NULL;
            size_t na = 0, nb = 0;
            h3_tokenizer_encode(rel, texts[j], &a, &na, NULL);
            h3_tokenizer_encode(h3, texts[j], &b, &nb, NULL);
            same += na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
            free(a);
            free(b);
        }
        CHECK(same == n_entries, "official dir vs tokenizer.json+config: %d/%d equal", same, n_entries);
    }
    /* Speed: a long prompt. */
    if (h3) {
        GString *g = g_string_new(NULL);
        for (int r = 0; g->len < 1000000; r++)
            g_string_append(g, texts[r % n_entries]);
        int32_t *ids = NULL;
        size_t n = 0;
        gint64 t0 = g_get_monotonic_time();
        h3_status_code rc = h3_tokenizer_encode(h3, g->str, &ids, &n, NULL);
        double dt = (double)(g_get_monotonic_time() - t0) / 1e6;
        CHECK(rc == H3_OK && n > 100000, "long text");
        printf("encode %zu bytes -> %zu ids: %.3f s (%.1f MB/s)\n", g->len, n, dt, (double)g->len / dt / 1e6);
        free(ids);
        g_string_free(g, TRUE);
    }
    h3_tokenizer_free(plain);
    h3_tokenizer_free(h3);
    h3_tokenizer_free(rel);
}

static void test_tiny(void) {
    const char *dir = h3_test_data("models/tiny-h3/tokenizer");
    h3_tokenizer *t = load(dir, H3_TOKENIZER_MODE_TRANSFORMERS, NULL);
    if (t) {
        CHECK(check_column(t, "tiny-h3/tokenizer [transformers]", "tiny_transformers") == n_entries,
              "column");
        CHECK(h3_tokenizer_vocab_size(t) == 1033, "tiny vocab size %d", h3_tokenizer_vocab_size(t));
        h3_tokenizer_free(t);
    }
    t = load(dir, H3_TOKENIZER_MODE_TOKENIZERS, NULL);
    if (t) {
        CHECK(check_column(t, "tiny-h3/tokenizer [tokenizers]", "tiny_tokenizers") == n_entries, "column");
        h3_tokenizer_free(t);
    }
}

/* The spec's toy vocabulary (transformers test_python_full_tokenizer,
 * docs/spec/h3-conditioner.md §4.6):
 * NFC, digit splitting, ';}\n' and an added token. */
static char *write_toy(const char *dir) {
    static const char *extra[] = {"\xC4\xA0l",      "\xC4\xA0n",        "\xC4\xA0lo",    "\xC4\xA0low", "er",
                                  "\xC4\xA0lowest", "\xC4\xA0newer",    "\xC4\xA0wider", "01",          ";}",
                                  ";}\xC4\x8A",     "\xC3\x8F\xC4\xB5", "\xC4\xA0#",     "##"};
    static const char *merges[] = {"\xC4\xA0 l", "\xC4\xA0l o", "\xC4\xA0lo w",      "e r",        "0 1",
                                   "; }",        ";} \xC4\x8A", "\xC3\x8F \xC4\xB5", "\xC4\xA0 #", "# #"};
    JsonBuilder *b = json_builder_new();
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "added_tokens");
    json_builder_begin_array(b);
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "id");
    json_builder_add_int_value(b, 270);
    json_builder_set_member_name(b, "content");
    json_builder_add_string_value(b, "<|endoftext|>");
    json_builder_set_member_name(b, "special");
    json_builder_add_boolean_value(b, TRUE);
    json_builder_set_member_name(b, "normalized");
    json_builder_add_boolean_value(b, FALSE);
    json_builder_end_object(b);
    json_builder_end_array(b);
    json_builder_set_member_name(b, "normalizer");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "type");
    json_builder_add_string_value(b, "NFC");
    json_builder_end_object(b);
    /* the pre_tokenizer is copied from the real file below */
    json_builder_set_member_name(b, "model");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "type");
    json_builder_add_string_value(b, "BPE");
    json_builder_set_member_name(b, "vocab");
    json_builder_begin_object(b);
    int id = 0;
    for (int x = 0; x < 256; x++) { /* bytes_to_unicode() order */
        int printable = (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE);
        if (!printable) continue;
        char s[8];
        s[g_unichar_to_utf8((gunichar)x, s)] = 0;
        json_builder_set_member_name(b, s);
        json_builder_add_int_value(b, id++);
    }
    for (int x = 0, n = 0; x < 256; x++) {
        int printable = (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE);
        if (printable) continue;
        char s[8];
        s[g_unichar_to_utf8((gunichar)(0x100 + n++), s)] = 0;
        json_builder_set_member_name(b, s);
        json_builder_add_int_value(b, id++);
    }
    for (size_t i = 0; i < G_N_ELEMENTS(extra); i++) {
        json_builder_set_member_name(b, extra[i]);
        json_builder_add_int_value(b, id++);
    }
    json_builder_end_object(b);
    json_builder_set_member_name(b, "merges");
    json_builder_begin_array(b);
    for (size_t i = 0; i < G_N_ELEMENTS(merges); i++)
        json_builder_add_string_value(b, merges[i]);
    json_builder_end_array(b);
    json_builder_end_object(b);
    json_builder_end_object(b);

    /* Borrow the real pre_tokenizer node so the regex text is the real one. */
    JsonNode *root = json_builder_get_root(b);
    JsonParser *p = json_parser_new();
    json_parser_load_from_file(p, h3_test_data("models/tiny-h3/tokenizer/tokenizer.json"), NULL);
    JsonNode *pt = json_object_get_member(json_node_get_object(json_parser_get_root(p)), "pre_tokenizer");
    json_object_set_member(json_node_get_object(root), "pre_tokenizer", json_node_copy(pt));
    char *path = g_build_filename(dir, "toy.json", NULL);
    JsonGenerator *gen = json_generator_new();
    json_generator_set_root(gen, root);
    json_generator_to_file(gen, path, NULL);
    g_object_unref(gen);
    json_node_unref(root);
    g_object_unref(p);
    g_object_unref(b);
    return path;
}

static void check_ids(const h3_tokenizer *tok, const char *text, const int32_t *want, size_t n_want) {
    int32_t *ids = NULL;
    size_t n = 0;
    h3_status st;
    h3_status_code rc = h3_tokenizer_encode(tok, text, &ids, &n, &st);
    int same = rc == H3_OK && n == n_want && (n == 0 || !memcmp(ids, want, n * sizeof *ids));
    CHECK(same, "encode '%s' (rc %d)", text, rc);
    if (!same) print_ids("got", ids, n), print_ids("want", want, n_want);
    free(ids);
}

static void test_toy(const char *tmp) {
    char *path = write_toy(tmp);
    h3_tokenizer *t = NULL;
    h3_status st;
    h3_status_code rc = h3_tokenizer_load(path, &t, &st);
    CHECK(rc == H3_OK, "toy load: %s", rc ? st.message : "");
    if (t) {
        static const int32_t a[] = {75, 78,  86,  260, 259, 260, 220, 77,  68,
                                    86, 260, 220, 15,  16,  15,  266, 270, 267};
        static const int32_t b[] = {268, 269};
        check_ids(t, "lower lower newer 010;}\n<|endoftext|>\xCF\x92\xCC\x81", a, G_N_ELEMENTS(a));
        check_ids(t, " ###", b, G_N_ELEMENTS(b));
        CHECK(h3_tokenizer_vocab_size(t) == 271, "toy vocab size %d", h3_tokenizer_vocab_size(t));
        h3_tokenizer_free(t);
    }
    g_unlink(path);
    g_free(path);
}

static void expect_load_error(const char *path, h3_tokenizer_mode mode, h3_status_code want,
                              const char *what) {
    h3_tokenizer *t = (h3_tokenizer *)1;
    h3_status st = {0};
    h3_tokenizer_options opt = {mode, NULL};
    h3_status_code rc = h3_tokenizer_load_with_options(path, &opt, &t, &st);
    CHECK(rc == want && t == NULL && st.message[0], "%s: rc %d (%s), want %d", what, rc, st.message, want);
    if (rc) printf("  error as expected (%s): %s\n", what, st.message);
    if (rc == H3_OK) h3_tokenizer_free(t);
}

/* An error whose message names `file` and says `what`. */
static void expect_load_message(const char *path, h3_status_code want, const char *file, const char *what,
                                const char *label) {
    h3_tokenizer *t = NULL;
    h3_status st = {0};
    h3_status_code rc = h3_tokenizer_load(path, &t, &st);
    CHECK(rc == want && !t && strstr(st.message, file) && strstr(st.message, what), "%s: rc %d (%s), want %d, '%s'",
          label, rc, st.message, want, what);
    if (rc) printf("  error as expected (%s): %s\n", label, st.message);
    h3_tokenizer_free(t);
}

static void write_file(const char *dir, const char *name, const char *text) {
    char *p = g_build_filename(dir, name, NULL);
    g_file_set_contents(p, text, -1, NULL);
    g_free(p);
}

static void test_errors(const char *tmp) {
    expect_load_error("/nonexistent/tokenizer", H3_TOKENIZER_MODE_TRANSFORMERS, H3_ERR_NOT_FOUND,
                      "missing dir");
    expect_load_error(h3_test_data("official/tokenizer"), H3_TOKENIZER_MODE_TOKENIZERS, H3_ERR_NOT_FOUND,
                      "tokenizers mode without tokenizer.json");

    char *bad = g_build_filename(tmp, "bad", NULL);
    g_mkdir(bad, 0700);
    expect_load_error(bad, H3_TOKENIZER_MODE_TRANSFORMERS, H3_ERR_NOT_FOUND, "empty dir");
    write_file(bad, "tokenizer.json", "{\"model\": {\"vocab\": {\"a\": 0,}");
    expect_load_error(bad, H3_TOKENIZER_MODE_TRANSFORMERS, H3_ERR_FORMAT, "malformed json");
    write_file(bad, "tokenizer.json", "[1, 2]");
    expect_load_error(bad, H3_TOKENIZER_MODE_TRANSFORMERS, H3_ERR_FORMAT, "json not an object");
    write_file(bad, "tokenizer.json",
               "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}");
    expect_load_error(bad, H3_TOKENIZER_MODE_TRANSFORMERS, H3_ERR_UNSUPPORTED, "no Qwen2 pre_tokenizer");
    char *p = g_build_filename(bad, "tokenizer.json", NULL);
    g_unlink(p);
    g_free(p);
    write_file(bad, "vocab.json", "{\"a\": 0, \"b\": \"1\"}");
    write_file(bad, "merges.txt", "#version: 0.2\na b\n");
    expect_load_error(bad, H3_TOKENIZER_MODE_TRANSFORMERS, H3_ERR_FORMAT, "string id in vocab.json");
    /* one token, two ids: json-glib kept the last silently */
    write_file(bad, "vocab.json", "{\"a\": 0, \"b\": 1, \"a\": 2}");
    expect_load_message(bad, H3_ERR_FORMAT, "vocab.json", "\"a\" appears twice", "a token twice in vocab.json");
    write_file(bad, "vocab.json", "{\"a\": 0, \"b\": 1}");
    expect_load_error(bad, H3_TOKENIZER_MODE_TRANSFORMERS, H3_ERR_FORMAT, "merge result not in vocab");
    write_file(bad, "vocab.json", "{\"a\": 0, \"b\": 1, \"ab\": 2}");
    expect_load_error(bad, H3_TOKENIZER_MODE_TRANSFORMERS, H3_ERR_FORMAT, "byte symbols missing");
    /* Issue 14: a tokenizer file has a size limit (32 MiB since issue 31),
     * checked before it is read: json-glib and g_file_get_contents read any
     * size. Sparse files, so the test writes nothing of their size. */
    p = g_build_filename(bad, "merges.txt", NULL);
    CHECK(truncate(p, (32 << 20) + 1) == 0, "truncate %s", p);
    expect_load_message(bad, H3_ERR_FORMAT, "merges.txt", "more than the 33554432", "a merges.txt of 32 MiB + 1");
    g_free(p);
    write_file(bad, "tokenizer.json", "{");
    p = g_build_filename(bad, "tokenizer.json", NULL);
    CHECK(truncate(p, (32 << 20) + 1) == 0, "truncate %s", p);
    expect_load_message(p, H3_ERR_FORMAT, "tokenizer.json", "more than the 33554432", "a tokenizer.json of 32 MiB + 1");
    g_free(p);
    const char *names[] = {"tokenizer.json", "vocab.json", "merges.txt"};
    for (int i = 0; i < 3; i++) {
        p = g_build_filename(bad, names[i], NULL);
        g_unlink(p);
        g_free(p);
    }
    g_rmdir(bad);
    g_free(bad);

    /* A config that declares an id inconsistent with the vocabulary. */
    char *cfg = g_build_filename(tmp, "tokenizer_config.json", NULL);
    g_file_set_contents(
        cfg, "{\"added_tokens_decoder\": {\"151700\": {\"content\": \"<x>\", \"special\": true}}}", -1, NULL);
    h3_tokenizer *t = NULL;
    h3_status st;
    h3_tokenizer_options opt = {H3_TOKENIZER_MODE_TRANSFORMERS, cfg};
    h3_status_code rc =
        h3_tokenizer_load_with_options(h3_test_data("tokenizers/qwen3/tokenizer.json"), &opt, &t, &st);
    CHECK(rc == H3_ERR_FORMAT && !t, "inconsistent added token id: rc %d", rc);
    if (rc) printf("  error as expected (inconsistent id): %s\n", st.message);
    h3_tokenizer_free(t);
    g_unlink(cfg);
    opt.config_path = "/nonexistent/tokenizer_config.json";
    rc = h3_tokenizer_load_with_options(h3_test_data("tokenizers/qwen3/tokenizer.json"), &opt, &t, &st);
    CHECK(rc == H3_ERR_NOT_FOUND, "missing config override: rc %d", rc);
    g_free(cfg);
}

static long max_rss_kb(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

/* Issue 31: what a tokenizer file costs before it is refused. Run first, so
 * that the peak RSS (which only grows) still measures these loads. */
static void test_memory_bounds(const char *tmp) {
    char *dir = g_build_filename(tmp, "big", NULL);
    g_mkdir(dir, 0700);
    char *p = g_build_filename(dir, "tokenizer.json", NULL);
    long before = max_rss_kb();
    /* 83 MB (sparse): refused by its size before a byte is read; the
     * 256 MiB limit let it in, and a real-looking one took 1.7 GB. */
    write_file(dir, "tokenizer.json", "{");
    CHECK(truncate(p, 83000000) == 0, "truncate %s", p);
    expect_load_message(p, H3_ERR_FORMAT, "tokenizer.json", "more than the 33554432", "an 83 MB tokenizer.json");
    long grew = max_rss_kb() - before;
    CHECK(grew < 16 * 1024, "the 83 MB tokenizer.json raised the peak RSS by %ld KB", grew);
    /* 6 MB, under the size limit, of 2,000,001 empty merges: json-glib
     * built 230 MB of nodes from it; the value bound refuses it unparsed. */
    GString *s = g_string_new("{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [");
    for (int i = 0; i <= 2000000; i++) g_string_append(s, i ? ",[]" : "[]");
    g_string_append(s, "]}}");
    CHECK(g_file_set_contents(p, s->str, (gssize)s->len, NULL), "write %s", p);
    g_string_free(s, TRUE);
    before = max_rss_kb();
    expect_load_message(p, H3_ERR_FORMAT, "tokenizer.json", "2000000 values", "2,000,001 merges");
    grew = max_rss_kb() - before;
    CHECK(grew < 32 * 1024, "the 6 MB tokenizer.json raised the peak RSS by %ld KB", grew);
    /* 100,000 levels (200 KB): SIGSEGV in json-glib's recursion before. */
    s = g_string_new("{\"model\": ");
    for (int i = 0; i < 100000; i++) g_string_append_c(s, '[');
    g_string_append(s, "}");
    CHECK(g_file_set_contents(p, s->str, (gssize)s->len, NULL), "write %s", p);
    g_string_free(s, TRUE);
    expect_load_message(p, H3_ERR_FORMAT, "tokenizer.json", "256 levels", "a 100,000-deep tokenizer.json");
    g_unlink(p);
    g_free(p);
    g_rmdir(dir);
    g_free(dir);
}

static void test_encode_errors(void) {
    h3_tokenizer *t = NULL;
    h3_status st;
    if (h3_tokenizer_load(h3_test_data("models/tiny-h3/tokenizer"), &t, &st)) {
        CHECK(0, "tiny load: %s", st.message);
        return;
    }
    static const char *invalid[] = {
        "abc\x80",          /* lone continuation byte */
        "\xC3",             /* truncated sequence */
        "\xC0\xAF",         /* overlong '/' */
        "\xE0\x80\xAF",     /* overlong */
        "\xED\xA0\x80",     /* UTF-16 surrogate */
        "\xF4\x90\x80\x80", /* above U+10FFFF */
        "ok \xFF ok",       /* never valid */
        "<d>\xE2\x82",      /* truncated after an added token */
    };
    for (size_t i = 0; i < G_N_ELEMENTS(invalid); i++) {
        int32_t *ids = (int32_t *)1;
        size_t n = 7;
        h3_status_code rc = h3_tokenizer_encode(t, invalid[i], &ids, &n, &st);
        CHECK(rc == H3_ERR_INVALID_ARGUMENT && ids == NULL && n == 0, "invalid UTF-8 #%zu: rc %d", i, rc);
        if (i == 0) printf("  error as expected (invalid UTF-8): %s\n", st.message);
    }
    int32_t *ids = (int32_t *)1;
    size_t n = 7;
    CHECK(h3_tokenizer_encode(t, "", &ids, &n, &st) == H3_OK && ids == NULL && n == 0, "empty text");
    CHECK(h3_tokenizer_encode(t, NULL, &ids, &n, &st) == H3_ERR_INVALID_ARGUMENT, "NULL text");
    /* Valid edge code points, and an embedded NUL via encode_len. */
    CHECK(h3_tokenizer_encode(t, "\xF4\x8F\xBF\xBF \xEF\xBF\xBF", &ids, &n, &st) == H3_OK && n > 0,
          "U+10FFFF, U+FFFF");
    free(ids);
    ids = NULL;
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    h3_tokenizer_encode_len(t, "x y\0z w", 7, &a, &na, &st);
    h3_tokenizer_encode(t, "x y", &b, &nb, &st);
    CHECK(na > nb && nb > 0 && !memcmp(a, b, nb * sizeof *a) && a[nb] == 188,
          "NUL is byte symbol 188 (got %zu ids)", na);
    free(a);
    free(b);
    h3_tokenizer_free(t);
}

int main(void) {
    if (load_goldens()) {
        CHECK(0, "cannot read the tokenizer goldens");
        return h3_test_finish("test_tokenizer");
    }
    CHECK(n_entries == 42, "%d golden entries", n_entries);
    check_golden_files_agree();
    char *tmp = g_dir_make_tmp("h3-tok-XXXXXX", NULL);
    test_memory_bounds(tmp);
    test_real();
    test_tiny();
    test_toy(tmp);
    test_errors(tmp);
    test_encode_errors();
    g_rmdir(tmp);
    g_free(tmp);
    for (int j = 0; j < n_entries; j++)
        g_free(texts[j]);
    h3_st_close(golden_ids);
    g_object_unref(golden_parser);
    return h3_test_finish("test_tokenizer");
}
