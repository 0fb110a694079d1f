/* h3_config.c - typed access to config.json values. */
#include "base/h3_config.h"

#include <json-glib/json-glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/h3_json.h"

/* A config.json or index file larger than this is no config (the release's
 * largest, an index of every tensor name, is well under 1 MiB). */
#define H3_CONFIG_MAX_BYTES (64u << 20)

struct h3_config {
    char *path;
    JsonParser *parser;
    JsonObject *root;
};

/* A new config named `name` over a parsed document (the config owns it
 * from here, success or not); its root must be an object. */
static h3_status_code wrap(JsonParser *parser, const char *name, h3_config **out, h3_status *status) {
    JsonNode *root = json_parser_get_root(parser);
    if (!root || !JSON_NODE_HOLDS_OBJECT(root)) {
        g_object_unref(parser);
        return h3_fail(status, H3_ERR_FORMAT, "%s: not a JSON object", name);
    }
    h3_config *c = calloc(1, sizeof *c);
    if (!c) {
        g_object_unref(parser);
        return h3_fail(status, H3_ERR_NO_MEMORY, "%s: out of memory", name);
    }
    c->path = g_strdup(name);
    c->parser = parser;
    c->root = json_node_get_object(root);
    *out = c;
    return H3_OK;
}

h3_status_code h3_config_load(const char *path, h3_config **out, h3_status *status) {
    *out = NULL;
    JsonParser *parser;
    h3_status_code rc = h3_json_read_file(path, H3_CONFIG_MAX_BYTES, &parser, status);
    if (rc != H3_OK) return rc;
    return wrap(parser, path, out, status);
}

h3_status_code h3_config_parse(const char *json, const char *name, h3_config **out, h3_status *status) {
    *out = NULL;
    JsonParser *parser;
    h3_status_code rc = h3_json_parse(json, -1, name, &parser, status);
    if (rc != H3_OK) return rc;
    return wrap(parser, name, out, status);
}

void h3_config_free(h3_config *c) {
    if (!c) return;
    if (c->parser) g_object_unref(c->parser);
    g_free(c->path);
    free(c);
}

const char *h3_config_path(const h3_config *c) { return c->path; }

/* Walks a dotted path; returns NULL when any part is missing. */
static JsonNode *lookup(const h3_config *c, const char *key) {
    JsonObject *obj = c->root;
    char **parts = g_strsplit(key, ".", -1);
    JsonNode *node = NULL;
    for (int i = 0; parts[i]; i++) {
        if (!obj || !json_object_has_member(obj, parts[i])) { node = NULL; break; }
        node = json_object_get_member(obj, parts[i]);
        obj = parts[i + 1] && JSON_NODE_HOLDS_OBJECT(node) ? json_node_get_object(node) : NULL;
        if (parts[i + 1] && !obj) { node = NULL; break; }
    }
    g_strfreev(parts);
    return node;
}

int h3_config_has(const h3_config *c, const char *key) {
    JsonNode *n = lookup(c, key);
    return n && !JSON_NODE_HOLDS_NULL(n);
}

static int is_number(JsonNode *n) {
    if (!n || !JSON_NODE_HOLDS_VALUE(n)) return 0;
    GType t = json_node_get_value_type(n);
    return t == G_TYPE_INT64 || t == G_TYPE_DOUBLE;
}

h3_status_code h3_config_int(const h3_config *c, const char *key, int64_t *out, h3_status *status) {
    JsonNode *n = lookup(c, key);
    if (!n || JSON_NODE_HOLDS_NULL(n)) return h3_fail(status, H3_ERR_FORMAT, "%s: missing key \"%s\"", c->path, key);
    if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_INT64)
        return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" is not an integer", c->path, key);
    *out = json_node_get_int(n);
    return H3_OK;
}

h3_status_code h3_config_double(const h3_config *c, const char *key, double *out, h3_status *status) {
    JsonNode *n = lookup(c, key);
    if (!n || JSON_NODE_HOLDS_NULL(n)) return h3_fail(status, H3_ERR_FORMAT, "%s: missing key \"%s\"", c->path, key);
    if (!is_number(n)) return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" is not a number", c->path, key);
    *out = json_node_get_double(n);
    return H3_OK;
}

h3_status_code h3_config_bool(const h3_config *c, const char *key, int *out, h3_status *status) {
    JsonNode *n = lookup(c, key);
    if (!n || JSON_NODE_HOLDS_NULL(n)) return h3_fail(status, H3_ERR_FORMAT, "%s: missing key \"%s\"", c->path, key);
    if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_BOOLEAN)
        return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" is not a boolean", c->path, key);
    *out = json_node_get_boolean(n);
    return H3_OK;
}

h3_status_code h3_config_string(const h3_config *c, const char *key, const char **out, h3_status *status) {
    JsonNode *n = lookup(c, key);
    if (!n || JSON_NODE_HOLDS_NULL(n)) return h3_fail(status, H3_ERR_FORMAT, "%s: missing key \"%s\"", c->path, key);
    if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_STRING)
        return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" is not a string", c->path, key);
    *out = json_node_get_string(n);
    return H3_OK;
}

static h3_status_code get_array(const h3_config *c, const char *key, int max, int *n, JsonArray **out,
                                h3_status *status) {
    JsonNode *node = lookup(c, key);
    if (!node || JSON_NODE_HOLDS_NULL(node))
        return h3_fail(status, H3_ERR_FORMAT, "%s: missing key \"%s\"", c->path, key);
    if (!JSON_NODE_HOLDS_ARRAY(node)) return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" is not an array", c->path, key);
    *out = json_node_get_array(node);
    *n = (int)json_array_get_length(*out);
    if (*n > max)
        return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" has %d entries (at most %d supported)", c->path, key, *n, max);
    return H3_OK;
}

h3_status_code h3_config_int_array(const h3_config *c, const char *key, int64_t *out, int max, int *n,
                                   h3_status *status) {
    JsonArray *a;
    h3_status_code rc = get_array(c, key, max, n, &a, status);
    if (rc != H3_OK) return rc;
    for (int i = 0; i < *n; i++) {
        JsonNode *e = json_array_get_element(a, (guint)i);
        if (!JSON_NODE_HOLDS_VALUE(e) || json_node_get_value_type(e) != G_TYPE_INT64)
            return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\"[%d] is not an integer", c->path, key, i);
        out[i] = json_node_get_int(e);
    }
    return H3_OK;
}

h3_status_code h3_config_double_array(const h3_config *c, const char *key, double *out, int max, int *n,
                                      h3_status *status) {
    JsonArray *a;
    h3_status_code rc = get_array(c, key, max, n, &a, status);
    if (rc != H3_OK) return rc;
    for (int i = 0; i < *n; i++) {
        JsonNode *e = json_array_get_element(a, (guint)i);
        if (!is_number(e)) return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\"[%d] is not a number", c->path, key, i);
        out[i] = json_node_get_double(e);
    }
    return H3_OK;
}

h3_status_code h3_config_int_or(const h3_config *c, const char *key, int64_t *out, h3_status *status) {
    return h3_config_has(c, key) ? h3_config_int(c, key, out, status) : H3_OK;
}

h3_status_code h3_config_double_or(const h3_config *c, const char *key, double *out, h3_status *status) {
    return h3_config_has(c, key) ? h3_config_double(c, key, out, status) : H3_OK;
}

/* ---- ranges ---------------------------------------------------------------- */

h3_status_code h3_config_check_range(const char *file, const char *key, int64_t value, int64_t min, int64_t max,
                                     h3_status *status) {
    if (value >= min && value <= max) return H3_OK;
    return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" is %lld, outside [%lld, %lld]", file, key, (long long)value,
                   (long long)min, (long long)max);
}

h3_status_code h3_config_int_range(const h3_config *c, const char *key, int64_t min, int64_t max, int64_t *out,
                                   h3_status *status) {
    int64_t v;
    h3_status_code rc = h3_config_int(c, key, &v, status);
    if (rc == H3_OK) rc = h3_config_check_range(c->path, key, v, min, max, status);
    if (rc == H3_OK) *out = v;
    return rc;
}

h3_status_code h3_config_int_range_or(const h3_config *c, const char *key, int64_t min, int64_t max, int64_t *out,
                                      h3_status *status) {
    return h3_config_has(c, key) ? h3_config_int_range(c, key, min, max, out, status) : H3_OK;
}

h3_status_code h3_config_int_array_range(const h3_config *c, const char *key, int64_t min, int64_t max, int64_t *out,
                                         int max_n, int *n, h3_status *status) {
    h3_status_code rc = h3_config_int_array(c, key, out, max_n, n, status);
    for (int i = 0; rc == H3_OK && i < *n; i++) {
        char entry[256];
        snprintf(entry, sizeof entry, "%s[%d]", key, i);
        rc = h3_config_check_range(c->path, entry, out[i], min, max, status);
    }
    return rc;
}

h3_status_code h3_config_double_range_or(const h3_config *c, const char *key, double min, double max, double *out,
                                         h3_status *status) {
    if (!h3_config_has(c, key)) return H3_OK; /* the caller's default, not checked here */
    double v;
    h3_status_code rc = h3_config_double(c, key, &v, status);
    if (rc != H3_OK) return rc;
    if (!(v >= min && v <= max))
        return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" is %g, outside [%g, %g]", c->path, key, v, min, max);
    *out = v;
    return H3_OK;
}
