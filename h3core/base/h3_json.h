/* h3_json.h - reading the JSON files of a model folder (config.json files,
 * index files, safetensors headers, tokenizer.json, model_index.json).
 *
 * json-glib keeps the last of two members with one name, silently; a model
 * file with `"a": x, "a": y` means two things to two readers (the
 * safetensors format forbids it), so every parse here refuses it. */
#ifndef H3_JSON_H
#define H3_JSON_H

#include <json-glib/json-glib.h>
#include <stddef.h>

#include "base/h3_status.h"

/* Parses len bytes (-1: NUL-terminated) into parser. FALSE with *err set:
 * not JSON. FALSE with *dup set (g_free it): a member name repeated in one
 * object, the first such name. For callers with their own messages. */
gboolean h3_json_load(JsonParser *parser, const char *data, gssize len, char **dup, GError **err);

/* Parses len bytes (-1: NUL-terminated) into a new parser (*out, the
 * caller's to unref). Text that is not JSON, or repeats a member name, is
 * H3_ERR_FORMAT naming `name`. Any root is accepted: callers check theirs. */
h3_status_code h3_json_parse(const char *data, gssize len, const char *name, JsonParser **out, h3_status *status);

/* Reads path through h3_file_read (a regular file of at most max_bytes)
 * and parses it as h3_json_parse does, naming path in errors. A missing
 * file is H3_ERR_NOT_FOUND, as h3_file_read says it. */
h3_status_code h3_json_read_file(const char *path, size_t max_bytes, JsonParser **out, h3_status *status);

#endif
