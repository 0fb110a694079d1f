/* h3_json_impl.h - JSON parsing shared by base/ (config.json files,
 * safetensors headers, index files). Private to base/.
 *
 * json-glib keeps the last of two members with one name, silently; a model
 * file with `"a": x, "a": y` means two things to two readers (the
 * safetensors format forbids it), so every parse here notices it. */
#ifndef H3_JSON_IMPL_H
#define H3_JSON_IMPL_H

#include <json-glib/json-glib.h>

/* Parses len bytes (-1: NUL-terminated) into parser. FALSE with *err set:
 * not JSON. FALSE with *dup set (g_free it): a member name repeated in one
 * object, the first such name. */
gboolean h3_json_load(JsonParser *parser, const char *data, gssize len, char **dup, GError **err);

#endif
