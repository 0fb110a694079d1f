/* test_json.c - the one JSON reader (base/h3_json.h): 100,000 levels of
 * [ or { (200 KB, which overflowed json-glib's recursion: SIGSEGV before
 * these bounds) and two million values are FORMAT errors naming the file and
 * the bound, found before json-glib parses; brackets and commas inside
 * strings count for nothing; real files stay far inside both bounds. */
#include <glib.h>
#include <glib/gstdio.h>
#include <string.h>

#include "base/h3_config.h"
#include "base/h3_json.h"
#include "h3_test.h"

static char *tmpdir;

/* n levels of `open`, a 0, then the closing brackets: valid JSON. */
static char *nested(const char *open, const char *close, int n) {
    GString *s = g_string_new(NULL);
    for (int i = 0; i < n; i++) g_string_append(s, open);
    g_string_append(s, "0");
    for (int i = 0; i < n; i++) g_string_append(s, close);
    return g_string_free(s, FALSE);
}

static void expect_refused(const char *label, const char *text, const char *bound) {
    JsonParser *p = NULL;
    h3_status st = {0};
    h3_status_code rc = h3_json_parse(text, -1, "deep.json", &p, &st);
    CHECK(rc == H3_ERR_FORMAT && p == NULL, "%s: %d (%s)", label, rc, st.message);
    CHECK(strstr(st.message, "deep.json") && strstr(st.message, bound), "%s: message '%s' lacks the file or '%s'",
          label, st.message, bound);
    if (p) g_object_unref(p);
}

static void expect_parsed(const char *label, const char *text) {
    JsonParser *p = NULL;
    h3_status st = {0};
    CHECK(h3_json_parse(text, -1, label, &p, &st) == H3_OK && p, "%s: %s", label, st.message);
    if (p) g_object_unref(p);
}

static void test_depth(void) {
    char *arrays = nested("[", "]", 100000);
    CHECK(strlen(arrays) >= 200000, "the deep input is %zu bytes", strlen(arrays));
    expect_refused("100,000 arrays", arrays, "256 levels");
    g_free(arrays);
    char *objects = nested("{\"a\":", "}", 100000);
    expect_refused("100,000 objects", objects, "256 levels");
    g_free(objects);
    /* Unclosed: the scan stops it before json-glib would recurse and fail. */
    GString *open = g_string_new(NULL);
    for (int i = 0; i < 100000; i++) g_string_append_c(open, i % 2 ? '{' : '[');
    expect_refused("100,000 unclosed", open->str, "256 levels");
    g_string_free(open, TRUE);

    char *at = nested("[", "]", H3_JSON_MAX_DEPTH);
    expect_parsed("256 levels", at);
    g_free(at);
    char *past = nested("[", "]", H3_JSON_MAX_DEPTH + 1);
    expect_refused("257 levels", past, "256 levels");
    g_free(past);
}

/* Brackets inside strings, escaped quotes included, are not nesting. */
static void test_strings(void) {
    GString *s = g_string_new("{\"k\\\"[[\": \"");
    for (int i = 0; i < 100000; i++) g_string_append(s, i % 3 ? "[{" : "\\\"[");
    g_string_append(s, "\\\\\", \"b\": [[1]]}");
    expect_parsed("brackets in strings", s->str);
    g_string_free(s, TRUE);
    /* An escaped backslash ends before the quote: the string closes there. */
    char *deep = nested("[", "]", 300);
    char *after = g_strconcat("[\"\\\\\",", deep, "]", NULL);
    expect_refused("nesting after an escaped backslash", after, "256 levels");
    g_free(after);
    g_free(deep);
}

static void test_values(void) {
    GString *s = g_string_new("[");
    for (unsigned i = 0; i < H3_JSON_MAX_VALUES; i++) g_string_append(s, i ? ",0" : "0");
    g_string_append_c(s, ']');
    expect_parsed("2,000,000 values", s->str); /* 1,999,999 commas + [ */
    g_string_truncate(s, s->len - 1);
    g_string_append(s, ",0]");
    expect_refused("2,000,001 values", s->str, "2000000 values");
    g_string_free(s, TRUE);
    GString *c = g_string_new("[\"");
    for (unsigned i = 0; i < H3_JSON_MAX_VALUES + 10; i++) g_string_append_c(c, ',');
    g_string_append(c, "\"]");
    expect_parsed("commas in a string", c->str);
    g_string_free(c, TRUE);
}

/* Through the file readers: the path is named, and the config reader (every
 * config.json, model_index.json, golden_meta.json) is bounded too. */
static void test_files(void) {
    char *path = g_build_filename(tmpdir, "config.json", NULL);
    char *deep = nested("{\"a\":", "}", 100000);
    CHECK(g_file_set_contents(path, deep, -1, NULL), "write %s", path);
    JsonParser *p = NULL;
    h3_status st = {0};
    CHECK(h3_json_read_file(path, 1u << 20, &p, &st) == H3_ERR_FORMAT && !p && strstr(st.message, path) &&
              strstr(st.message, "256 levels"),
          "read_file: %s", st.message);
    h3_config *c = NULL;
    h3_status cs = {0};
    CHECK(h3_config_load(path, &c, &cs) == H3_ERR_FORMAT && !c && strstr(cs.message, path) &&
              strstr(cs.message, "256 levels"),
          "config_load: %s", cs.message);
    h3_status ps = {0};
    CHECK(h3_config_parse(deep, "inline", &c, &ps) == H3_ERR_FORMAT && strstr(ps.message, "256 levels"),
          "config_parse: %s", ps.message);
    g_free(deep);
    g_unlink(path);
    g_free(path);
}

int main(void) {
    tmpdir = g_dir_make_tmp("h3json-XXXXXX", NULL);
    test_depth();
    test_strings();
    test_values();
    test_files();
    g_rmdir(tmpdir);
    g_free(tmpdir);
    return h3_test_finish("test_json");
}
