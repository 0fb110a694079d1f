/* h3-tokenize - encode prompts with the H3 (Qwen3) tokenizer.
 *
 *   h3-tokenize --tokenizer DIR [--mode transformers|tokenizers] [--config FILE]
 *
 * Reads one JSON string per line on stdin and writes one JSON array of token
 * ids per line, as tokenizer(text, add_special_tokens=False). Exit status: 0
 * ok, 1 a bad input line (after the lines before it were written), 2 bad
 * arguments or a tokenizer that does not load. */
#include <glib.h>
#include <json-glib/json-glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/h3_json.h"
#include "model/h3_tokenizer.h"

static void usage(FILE *f) {
    fprintf(f, "usage: h3-tokenize --tokenizer DIR [--mode transformers|tokenizers] [--config "
               "tokenizer_config.json]\n"
               "reads one JSON string per line on stdin, writes one JSON array of ids per line\n");
}

/* Decodes the JSON string literal that json-glib has already validated. Done
 * here because json-glib hands strings out NUL-terminated, which would cut a
 * "\u0000" short; returns NULL for a lone UTF-16 surrogate. */
static char *decode_json_string(const char *p, size_t *len) {
    GString *g = g_string_new(NULL);
    while (g_ascii_isspace(*p))
        p++;
    for (p++; *p && *p != '"'; p++) {
        if (*p != '\\') {
            g_string_append_c(g, *p);
            continue;
        }
        p++;
        switch (*p) {
        case 'b': g_string_append_c(g, '\b'); break;
        case 'f': g_string_append_c(g, '\f'); break;
        case 'n': g_string_append_c(g, '\n'); break;
        case 'r': g_string_append_c(g, '\r'); break;
        case 't': g_string_append_c(g, '\t'); break;
        case 'u': {
            gunichar c = (gunichar)g_ascii_strtoull((char[]){p[1], p[2], p[3], p[4], 0}, NULL, 16);
            p += 4;
            if (c >= 0xD800 && c <= 0xDBFF && p[1] == '\\' && p[2] == 'u') {
                gunichar lo = (gunichar)g_ascii_strtoull((char[]){p[3], p[4], p[5], p[6], 0}, NULL, 16);
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
            }
            if (c >= 0xD800 && c <= 0xDFFF) {
                g_string_free(g, TRUE);
                return NULL;
            }
            char buf[8];
            g_string_append_len(g, buf, g_unichar_to_utf8(c, buf));
            break;
        }
        default: g_string_append_c(g, *p); break; /* \" \\ \/ */
        }
    }
    *len = g->len;
    return g_string_free(g, FALSE);
}

/* Parses one line as a JSON string; returns a newly allocated copy and its
 * length, or NULL and a message. Through h3_json_load, as every JSON text
 * is: a line of 100,000 '[' is refused before json-glib recurses on it. */
static char *parse_line(const char *line, size_t *len, char **error) {
    GError *err = NULL;
    char *dup = NULL;
    JsonParser *p = json_parser_new();
    char *out = NULL;
    if (!h3_json_load(p, line, -1, &dup, &err)) {
        *error = err ? g_strdup(err->message) : g_strdup_printf("the key \"%s\" appears twice in one object", dup);
        if (err) g_error_free(err);
        g_free(dup);
    } else {
        JsonNode *n = json_parser_get_root(p);
        if (n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING) {
            out = decode_json_string(line, len);
            if (!out) *error = g_strdup("lone UTF-16 surrogate in the string");
        } else {
            *error = g_strdup("not a JSON string");
        }
    }
    g_object_unref(p);
    return out;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *mode = "transformers", *config = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (i + 1 < argc && !strcmp(argv[i], "--tokenizer")) {
            dir = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--mode")) {
            mode = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--config")) {
            config = argv[++i];
        } else {
            fprintf(stderr, "h3-tokenize: unknown or incomplete argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "h3-tokenize: --tokenizer DIR is required (see --help)\n");
        return 2;
    }
    h3_tokenizer_options opt = {H3_TOKENIZER_MODE_TRANSFORMERS, config};
    if (!strcmp(mode, "tokenizers"))
        opt.mode = H3_TOKENIZER_MODE_TOKENIZERS;
    else if (strcmp(mode, "transformers")) {
        fprintf(stderr, "h3-tokenize: --mode must be 'transformers' or 'tokenizers', not '%s'\n", mode);
        return 2;
    }
    h3_status st;
    h3_tokenizer *tok = NULL;
    if (h3_tokenizer_load_with_options(dir, &opt, &tok, &st)) {
        fprintf(stderr, "h3-tokenize: %s\n", st.message);
        return 2;
    }

    int rc = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    GString *out = g_string_new(NULL);
    for (size_t lineno = 1; (got = getline(&line, &cap, stdin)) >= 0; lineno++) {
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = '\0';
        char *error = NULL;
        size_t len = 0;
        char *text = parse_line(line, &len, &error);
        int32_t *ids = NULL;
        size_t n = 0;
        if (text && h3_tokenizer_encode_len(tok, text, len, &ids, &n, &st)) error = g_strdup(st.message);
        g_free(text);
        if (error) {
            fprintf(stderr, "h3-tokenize: stdin line %zu: %s\n", lineno, error);
            g_free(error);
            rc = 1;
            break;
        }
        g_string_truncate(out, 0);
        g_string_append_c(out, '[');
        for (size_t i = 0; i < n; i++)
            g_string_append_printf(out, i ? ", %d" : "%d", ids[i]);
        g_string_append(out, "]\n");
        fwrite(out->str, 1, out->len, stdout);
        free(ids);
    }
    free(line);
    g_string_free(out, TRUE);
    h3_tokenizer_free(tok);
    if (fflush(stdout)) {
        fprintf(stderr, "h3-tokenize: cannot write stdout\n");
        return 1;
    }
    return rc;
}
