/* h3_test_golden.h - reading the goldens (tests/data/goldens/tiny-h3/):
 * their tensors (golden_open, golden_tiny, golden_f32, golden_i32, golden_json)
 * and the request an end-to-end golden was made with, read from the golden's
 * own JSON (NAME.json: "request" holds the diffusers call, "forwards" the
 * transformer passes it ran), so the tests never restate the prompt, seed or
 * canvas of a golden. A golden that cannot be read fails a CHECK. */
#ifndef H3_TEST_GOLDEN_H
#define H3_TEST_GOLDEN_H

#include <json-glib/json-glib.h>

#include <stdint.h>
#include <stdio.h>

#include "base/h3_safetensors.h"
#include "h3.h"
#include "h3_test.h"

static inline h3_st_file *golden_open(const char *rel) {
    h3_st_file *f = NULL;
    h3_status st = {0};
    CHECK(h3_st_open(h3_test_data(rel), &f, &st) == H3_OK, "open %s: %s", rel, st.message);
    return f;
}

/* goldens/tiny-h3/<name>.safetensors */
static inline h3_st_file *golden_tiny(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "goldens/tiny-h3/%s.safetensors", name);
    return golden_open(rel);
}

static inline JsonParser *golden_json(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "goldens/tiny-h3/%s.json", name);
    JsonParser *p = json_parser_new();
    GError *err = NULL;
    if (!json_parser_load_from_file(p, h3_test_data(rel), &err)) {
        CHECK(0, "%s: %s", rel, err->message);
        g_error_free(err);
    }
    return p;
}

static inline JsonObject *golden_json_object(JsonParser *p, const char *member) {
    JsonNode *root = json_parser_get_root(p);
    if (!root || !JSON_NODE_HOLDS_OBJECT(root)) return NULL;
    JsonObject *o = json_node_get_object(root);
    return json_object_has_member(o, member) ? json_object_get_object_member(o, member) : NULL;
}

static inline float *golden_f32(h3_st_file *f, const char *name, int64_t *n) {
    float *out = NULL;
    const h3_st_tensor *info = NULL;
    h3_status st = {0};
    if (!f || h3_st_read_f32(f, name, &out, &info, &st) != H3_OK) {
        CHECK(0, "read %s: %s", name, st.message);
        return NULL;
    }
    if (n) *n = info->numel;
    return out;
}

/* An I64 golden tensor as int32. */
static inline int32_t *golden_i32(h3_st_file *f, const char *name, int64_t *n) {
    const h3_st_tensor *t = f ? h3_st_find(f, name) : NULL;
    CHECK(t && t->dtype == H3_ST_I64, "golden tensor '%s' missing or not int64", name);
    if (!t || t->dtype != H3_ST_I64) return NULL;
    int32_t *out = malloc((size_t)t->numel * sizeof *out + 4);
    for (int64_t i = 0; i < t->numel; i++) {
        int64_t v;
        memcpy(&v, (const char *)t->data + i * 8, 8);
        out[i] = (int32_t)v;
    }
    if (n) *n = t->numel;
    return out;
}


/* The request of golden NAME (e.g. "e2e_t2va_3steps"); steps = the forwards
 * the golden ran. A golden that cannot be read fails a CHECK and gives the
 * default request. The prompt stays valid for the life of the program. */
static inline h3_request h3_test_golden_request(const char *name) {
    static char prompts[4][512];
    static int slot;
    char rel[256];
    h3_request r = h3_request_default();
    snprintf(rel, sizeof rel, "goldens/tiny-h3/%s.json", name);
    JsonParser *parser = json_parser_new();
    GError *err = NULL;
    int ok = json_parser_load_from_file(parser, h3_test_data(rel), &err);
    JsonNode *root = ok ? json_parser_get_root(parser) : NULL;
    JsonObject *o = root && JSON_NODE_HOLDS_OBJECT(root) ? json_node_get_object(root) : NULL;
    JsonObject *q = o && json_object_has_member(o, "request") ? json_object_get_object_member(o, "request") : NULL;
    ok = q && json_object_has_member(q, "prompt") && json_object_has_member(q, "seed") &&
         json_object_has_member(q, "width") && json_object_has_member(q, "height") &&
         json_object_has_member(q, "num_frames") && json_object_has_member(o, "forwards");
    CHECK(ok, "golden %s: no request in its JSON (%s)", name, err ? err->message : "members missing");
    if (ok) {
        char *p = prompts[slot++ % 4];
        snprintf(p, sizeof prompts[0], "%s", json_object_get_string_member(q, "prompt"));
        r.prompt = p;
        r.seed = (uint64_t)json_object_get_int_member(q, "seed");
        r.width = (int)json_object_get_int_member(q, "width");
        r.height = (int)json_object_get_int_member(q, "height");
        r.num_frames = (int)json_object_get_int_member(q, "num_frames");
        r.steps = (int)json_object_get_int_member(o, "forwards");
    }
    if (err) g_error_free(err);
    g_object_unref(parser);
    return r;
}

#endif
