/* h3_json.c - json-glib parsing that refuses repeated member names (h3_json.h). */
#include "base/h3_json.h"

#include <string.h>

#include "base/h3_file.h"

typedef struct dup_watch {
    GHashTable *members; /* JsonObject* -> members seen so far */
    char *first;         /* the first repeated name */
} dup_watch;

/* json-glib emits object-member after adding the member: an object that
 * did not grow replaced a member. Before the first repeat no object is
 * freed during the parse, so the addresses used as keys stay unique. */
static void on_member(JsonParser *parser, JsonObject *object, gchar *name, gpointer user) {
    (void)parser;
    dup_watch *w = user;
    if (w->first) return;
    guint seen = GPOINTER_TO_UINT(g_hash_table_lookup(w->members, object)) + 1;
    g_hash_table_insert(w->members, object, GUINT_TO_POINTER(seen));
    if (seen > json_object_get_size(object)) w->first = g_strdup(name);
}

/* The bounds of h3_json.h, in one pass over the text before json-glib:
 * brackets and commas inside strings (escapes honoured) do not count. A
 * text that is not JSON (an unclosed string, a stray ]) is left to
 * json-glib to report; only what would take its stack or its memory is
 * refused here. */
static gboolean check_bounds(const char *data, size_t len, GError **err) {
    size_t depth = 0, values = 0;
    gboolean in_string = FALSE;
    for (size_t i = 0; i < len; i++) {
        char c = data[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = FALSE;
            continue;
        }
        if (c == '"') {
            in_string = TRUE;
        } else if (c == '[' || c == '{') {
            values++;
            if (++depth > H3_JSON_MAX_DEPTH) {
                g_set_error(err, JSON_PARSER_ERROR, JSON_PARSER_ERROR_PARSE,
                            "nested more than %d levels deep at byte %zu (the bound on [ and { nesting; no "
                            "model file needs more than 5), not parsed",
                            H3_JSON_MAX_DEPTH, i);
                return FALSE;
            }
        } else if (c == ']' || c == '}') {
            if (depth) depth--;
        } else if (c == ',') {
            values++;
        }
        if (values > H3_JSON_MAX_VALUES) {
            g_set_error(err, JSON_PARSER_ERROR, JSON_PARSER_ERROR_PARSE,
                        "more than %u values (counted as [ { and , outside strings) by byte %zu (the bound on "
                        "one JSON text; the largest real file, a tokenizer.json, has 606,053), not parsed",
                        H3_JSON_MAX_VALUES, i);
            return FALSE;
        }
    }
    return TRUE;
}

gboolean h3_json_load(JsonParser *parser, const char *data, gssize len, char **dup, GError **err) {
    *dup = NULL;
    if (!check_bounds(data, len < 0 ? strlen(data) : (size_t)len, err)) return FALSE;
    dup_watch w = {g_hash_table_new(NULL, NULL), NULL};
    gulong id = g_signal_connect(parser, "object-member", G_CALLBACK(on_member), &w);
    gboolean ok = json_parser_load_from_data(parser, data, len, err);
    g_signal_handler_disconnect(parser, id);
    g_hash_table_destroy(w.members);
    if (ok && w.first) {
        *dup = w.first;
        return FALSE;
    }
    g_free(w.first);
    return ok;
}

h3_status_code h3_json_parse(const char *data, gssize len, const char *name, JsonParser **out, h3_status *status) {
    JsonParser *parser = json_parser_new();
    GError *err = NULL;
    char *dup = NULL;
    *out = NULL;
    if (h3_json_load(parser, data, len, &dup, &err)) {
        *out = parser;
        return H3_OK;
    }
    h3_status_code rc;
    if (err) rc = h3_fail(status, H3_ERR_FORMAT, "%s: %s", name, err->message);
    else rc = h3_fail(status, H3_ERR_FORMAT, "%s: the key \"%s\" appears twice in one object", name, dup);
    if (err) g_error_free(err);
    g_free(dup);
    g_object_unref(parser);
    return rc;
}

h3_status_code h3_json_read_file(const char *path, size_t max_bytes, JsonParser **out, h3_status *status) {
    char *text;
    size_t len;
    *out = NULL;
    h3_status_code rc = h3_file_read(path, max_bytes, &text, &len, status);
    if (rc != H3_OK) return rc;
    rc = h3_json_parse(text, (gssize)len, path, out, status);
    g_free(text);
    return rc;
}
