/* h3_test_golden.h - the request an end-to-end golden was made with, read
 * from the golden's own JSON (goldens/tiny-h3/NAME.json: "request" holds the
 * diffusers call, "forwards" the transformer passes it ran), so the tests
 * never restate the prompt, seed or canvas of a golden. */
#ifndef H3_TEST_GOLDEN_H
#define H3_TEST_GOLDEN_H

#include <json-glib/json-glib.h>

#include "h3.h"
#include "h3_test.h"

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
