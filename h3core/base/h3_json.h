/* h3_json.h - reading the JSON files of a model folder (config.json files,
 * index files, safetensors headers, tokenizer.json, model_index.json).
 *
 * json-glib keeps the last of two members with one name, silently; a model
 * file with `"a": x, "a": y` means two things to two readers (the
 * safetensors format forbids it), so every parse here refuses it.
 *
 * json-glib's parser recurses once per [ or { level and keeps every value
 * as a node of 80-300 bytes: 200 KB of "[[[[..." (100,000 levels) overflows
 * the stack, and 6 MB of "{},{},..." takes 600 MB. So before json-glib sees
 * the text, one linear scan (outside strings, escapes honoured) bounds both:
 * nesting to H3_JSON_MAX_DEPTH levels and the number of values (counted as
 * the [ { and , outside strings) to H3_JSON_MAX_VALUES; past either the
 * text is H3_ERR_FORMAT naming the file and the bound, and is never parsed.
 * Every JSON text the engine, the element and the tools read goes through
 * h3_json_load (safetensors and adapter headers, configs, index files,
 * model_index.json, tokenizer files). */
#ifndef H3_JSON_H
#define H3_JSON_H

#include <json-glib/json-glib.h>
#include <stddef.h>

#include "base/h3_status.h"

/* The deepest real file a model has needs 5 levels (tokenizer.json: root,
 * pre_tokenizer, its pretokenizers list, one of them, its pattern; the
 * golden files of tests/data as much); configs, index files and safetensors
 * headers need 2 or 3. 256 is 50 times that. json-glib 1.6 takes about
 * 120 bytes of stack a level (60,000 levels fit in 8 MiB, 80,000 do not),
 * so 256 levels take about 30 KB (a few times that under ASan), well
 * inside a GStreamer streaming thread's or a worker thread's stack. */
#define H3_JSON_MAX_DEPTH 256
/* The largest real file, the Qwen3 tokenizer.json (11 MB), counts 606,053
 * ([ { and , outside strings); a safetensors header of the release's
 * largest shard a few thousand. 2,000,000 is 3.3 times the tokenizer's, and
 * keeps the worst text measured ({"":{}} repeated: 260 bytes of json-glib
 * nodes per value counted) to about 520 MB, where a 32 MB file of it would
 * take 3 GB. */
#define H3_JSON_MAX_VALUES 2000000u

/* Parses len bytes (-1: NUL-terminated) into parser. FALSE with *err set:
 * not JSON, or past H3_JSON_MAX_DEPTH / H3_JSON_MAX_VALUES (checked
 * before json-glib parses anything; the message names the bound). FALSE
 * with *dup set (g_free it): a member name repeated in one object, the
 * first such name. For callers with their own messages. */
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
