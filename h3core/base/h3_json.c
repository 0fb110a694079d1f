/* h3_json.c - json-glib parsing that refuses repeated member names (h3_json.h). */
#include "base/h3_json.h"

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

gboolean h3_json_load(JsonParser *parser, const char *data, gssize len, char **dup, GError **err) {
    dup_watch w = {g_hash_table_new(NULL, NULL), NULL};
    *dup = NULL;
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
