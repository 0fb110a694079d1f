/* h3_tokenizer.c - Qwen2/Qwen3 byte-level BPE, byte-exact with HF tokenizers.
 *
 * The pipeline per call (docs/spec/h3-conditioner.md §4.2):
 *   1. split the raw text on added tokens (leftmost-longest), each match is its id;
 *   2. NFC-normalize every other segment, then split it on "normalized" added tokens;
 *   3. pre-tokenize with the Qwen2 regex, here a hand-coded scanner (pretok_next);
 *   4. map each piece's bytes to their byte-level symbols (one symbol per byte);
 *   5. BPE: merge the adjacent pair of lowest rank (leftmost on ties) until none
 *      is left, with the same heap-and-validity-check loop as tokenizers' Word.
 *
 * Loading mirrors what decides the ids in Python: tokenizers' AddedVocabulary
 * gives an added token that is not yet known the next free id, and transformers
 * adds the tokens named in tokenizer_config.json on top of tokenizer.json. A
 * declared id that disagrees with that rule is a format error, not a warning. */
#include "model/h3_tokenizer.h"

#include <glib.h>
#include <json-glib/json-glib.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/h3_file.h"
#include "base/h3_json.h"

/* Pre-tokenizer regex of Qwen2/Qwen3; pretok_next() implements exactly this. */
#define QWEN2_REGEX                                                                                          \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"      \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define MAX_TOKEN_ID (1 << 24) /* bounds the id -> token table */

enum { FLAG_ADDED = 1, FLAG_SPECIAL = 2 };

typedef struct merge_slot {
    uint64_t key; /* left id << 32 | right id; EMPTY_KEY when free */
    int32_t rank;
    int32_t new_id;
} merge_slot;

#define EMPTY_KEY UINT64_MAX

typedef struct added_token {
    const char *content; /* as declared (id_to_token) */
    const char *match;   /* what is searched: content, NFC'd for normalized tokens */
    size_t match_len;
    int32_t id;
    bool special;
    bool normalized;
} added_token;

/* Added tokens searched in one pass, grouped by first byte, longest first, so
 * the first hit at the leftmost position is the leftmost-longest match. */
typedef struct added_set {
    uint32_t *index; /* into h3_tokenizer.added */
    uint32_t start[257];
} added_set;

struct h3_tokenizer {
    GStringChunk *strings; /* every token string */
    char **tokens;         /* id -> string, NULL for an unused id */
    uint8_t *flags;        /* id -> FLAG_* */
    int32_t n_ids;         /* highest id + 1 */
    int32_t cap_ids;
    GHashTable *vocab;  /* BPE vocabulary: string -> id + 1 */
    int32_t model_size; /* entries in the BPE vocabulary */
    merge_slot *merges;
    uint64_t merge_mask;
    int merge_bits;
    int32_t byte_ids[256];
    added_token *added;
    size_t n_added, cap_added;
    GHashTable *added_index; /* content -> index + 1 */
    bool nfc;
    bool split_special; /* tokenizer_config split_special_tokens: specials not matched */
    added_set raw_set, norm_set;
};

/* ---------------------------------------------------------------- strict JSON getters
 * json-glib's *_with_default getters emit criticals on a wrong type; these
 * return a format error naming the file and member instead. */

static bool node_is_null(JsonNode *n) {
    return n == NULL || JSON_NODE_HOLDS_NULL(n);
}

static bool node_is_string(JsonNode *n) {
    return n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING;
}

static bool node_is_int(JsonNode *n) {
    return n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_INT64;
}

static bool node_is_bool(JsonNode *n) {
    return n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_BOOLEAN;
}

static h3_status_code get_bool(JsonObject *o, const char *name, bool def, bool *out, const char *where,
                               h3_status *status) {
    JsonNode *n = json_object_get_member(o, name);
    if (node_is_null(n)) {
        *out = def;
        return H3_OK;
    }
    if (!node_is_bool(n)) return h3_fail(status, H3_ERR_FORMAT, "%s: '%s' is not a boolean", where, name);
    *out = json_node_get_boolean(n);
    return H3_OK;
}

/* An optional string member: NULL when missing or null. */
static h3_status_code get_string(JsonObject *o, const char *name, const char **out, const char *where,
                                 h3_status *status) {
    JsonNode *n = json_object_get_member(o, name);
    *out = NULL;
    if (node_is_null(n)) return H3_OK;
    if (!node_is_string(n)) return h3_fail(status, H3_ERR_FORMAT, "%s: '%s' is not a string", where, name);
    *out = json_node_get_string(n);
    return H3_OK;
}

static JsonObject *get_object(JsonObject *o, const char *name) {
    JsonNode *n = json_object_get_member(o, name);
    return n && JSON_NODE_HOLDS_OBJECT(n) ? json_node_get_object(n) : NULL;
}

static JsonArray *get_array(JsonObject *o, const char *name) {
    JsonNode *n = json_object_get_member(o, name);
    return n && JSON_NODE_HOLDS_ARRAY(n) ? json_node_get_array(n) : NULL;
}

/* Every tokenizer file is read through h3_file_read: a regular file (a FIFO
 * in its place is refused before a read that could block), at most this
 * size, checked before a byte is read: the Qwen3 tokenizer.json is 11 MB
 * (102 MB of RSS once parsed and loaded), its vocab.json 2.8 MB, its
 * merges.txt 1.7 MB; 32 MiB is three times the largest. It was 256 MiB,
 * which let an 83 MB tokenizer.json take 1.7 GB of json-glib nodes before
 * it was refused (issue 31). What json-glib may build from a file under
 * the limit is bounded by h3_json_load's value count (H3_JSON_MAX_VALUES). */
#define H3_TOKENIZER_FILE_MAX_BYTES (32u << 20)

/* Parses a JSON file whose root must be an object. */
static h3_status_code parse_json_file(const char *path, JsonParser **parser, JsonObject **root,
                                      h3_status *status) {
    h3_status_code rc = h3_json_read_file(path, H3_TOKENIZER_FILE_MAX_BYTES, parser, status);
    if (rc != H3_OK) return rc;
    JsonNode *node = json_parser_get_root(*parser);
    if (!node || !JSON_NODE_HOLDS_OBJECT(node)) {
        g_object_unref(*parser);
        *parser = NULL;
        return h3_fail(status, H3_ERR_FORMAT, "%s: not a JSON object", path);
    }
    *root = json_node_get_object(node);
    return H3_OK;
}

/* ---------------------------------------------------------------- byte-level mapping */

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the
 * other 68 bytes (controls, space, 0x7F-0xA0, 0xAD) to U+0100 + n in order. */
static uint32_t byte_to_unicode(int b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return (uint32_t)b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) n++;
    return 0x100u + (uint32_t)n;
}

/* ---------------------------------------------------------------- vocabulary and ids */

static h3_status_code ensure_ids(h3_tokenizer *tok, int32_t id, h3_status *status) {
    if (id < tok->cap_ids) return H3_OK;
    int32_t cap = tok->cap_ids ? tok->cap_ids : 1024;
    while (cap <= id)
        cap *= 2;
    char **t = realloc(tok->tokens, (size_t)cap * sizeof *t);
    if (!t) return h3_fail(status, H3_ERR_NO_MEMORY, "tokenizer: id table of %d entries", cap);
    tok->tokens = t;
    uint8_t *f = realloc(tok->flags, (size_t)cap);
    if (!f) return h3_fail(status, H3_ERR_NO_MEMORY, "tokenizer: id table of %d entries", cap);
    tok->flags = f;
    memset(tok->tokens + tok->cap_ids, 0, (size_t)(cap - tok->cap_ids) * sizeof *t);
    memset(tok->flags + tok->cap_ids, 0, (size_t)(cap - tok->cap_ids));
    tok->cap_ids = cap;
    return H3_OK;
}

static h3_status_code add_vocab_entry(h3_tokenizer *tok, const char *token, int64_t id, const char *where,
                                      h3_status *status) {
    if (id < 0 || id >= MAX_TOKEN_ID)
        return h3_fail(status, H3_ERR_FORMAT, "%s: token '%s' has id %lld out of range", where, token,
                       (long long)id);
    h3_status_code rc = ensure_ids(tok, (int32_t)id, status);
    if (rc) return rc;
    if (tok->tokens[id])
        return h3_fail(status, H3_ERR_FORMAT, "%s: id %lld is used by both '%s' and '%s'", where,
                       (long long)id, tok->tokens[id], token);
    if (g_hash_table_contains(tok->vocab, token))
        return h3_fail(status, H3_ERR_FORMAT, "%s: token '%s' appears twice", where, token);
    char *s = g_string_chunk_insert(tok->strings, token);
    tok->tokens[id] = s;
    g_hash_table_insert(tok->vocab, s, GINT_TO_POINTER((int)id + 1));
    if ((int32_t)id >= tok->n_ids) tok->n_ids = (int32_t)id + 1;
    tok->model_size++;
    return H3_OK;
}

static int32_t vocab_lookup(const h3_tokenizer *tok, const char *s) {
    gpointer v = g_hash_table_lookup(tok->vocab, s);
    return v ? GPOINTER_TO_INT(v) - 1 : -1;
}

static h3_status_code load_vocab_object(h3_tokenizer *tok, JsonObject *vocab, const char *where,
                                        h3_status *status) {
    JsonObjectIter it;
    const char *name;
    JsonNode *node;
    json_object_iter_init(&it, vocab);
    while (json_object_iter_next(&it, &name, &node)) {
        if (!node_is_int(node))
            return h3_fail(status, H3_ERR_FORMAT, "%s: vocab entry '%s' is not an integer id", where, name);
        h3_status_code rc = add_vocab_entry(tok, name, json_node_get_int(node), where, status);
        if (rc) return rc;
    }
    if (tok->model_size == 0) return h3_fail(status, H3_ERR_FORMAT, "%s: empty vocab", where);
    return H3_OK;
}

/* ---------------------------------------------------------------- merge table */

static uint64_t merge_hash(const h3_tokenizer *tok, uint64_t key) {
    return (key * 0x9E3779B97F4A7C15ull) >> (64 - tok->merge_bits);
}

static h3_status_code merges_init(h3_tokenizer *tok, size_t count, h3_status *status) {
    int bits = 4;
    while (((size_t)1 << bits) < 2 * count + 16)
        bits++;
    tok->merge_bits = bits;
    tok->merge_mask = ((uint64_t)1 << bits) - 1;
    tok->merges = malloc(((size_t)1 << bits) * sizeof *tok->merges);
    if (!tok->merges)
        return h3_fail(status, H3_ERR_NO_MEMORY, "tokenizer: merge table for %zu merges", count);
    for (size_t i = 0; i <= tok->merge_mask; i++)
        tok->merges[i].key = EMPTY_KEY;
    return H3_OK;
}

static const merge_slot *merge_find(const h3_tokenizer *tok, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t h = merge_hash(tok, key);; h = (h + 1) & tok->merge_mask) {
        const merge_slot *s = &tok->merges[h];
        if (s->key == key) return s;
        if (s->key == EMPTY_KEY) return NULL;
    }
}

/* Adds merge "a b" with the given rank. A repeated pair keeps its first rank
 * when keep_first (the slow Qwen2Tokenizer's dict, then the converter's
 * enumeration) or takes the new one (tokenizers' HashMap collect); *added
 * says whether it was new. */
static h3_status_code add_merge(h3_tokenizer *tok, const char *a, size_t alen, const char *b, size_t blen,
                                int32_t rank, bool keep_first, bool *added, const char *where,
                                h3_status *status) {
    char buf[512];
    char *joined = alen + blen < sizeof buf ? buf : malloc(alen + blen + 1);
    if (!joined) return h3_fail(status, H3_ERR_NO_MEMORY, "%s: merge %d", where, rank);
    h3_status_code rc = H3_OK;
    memcpy(joined, a, alen);
    joined[alen] = '\0';
    int32_t ia = vocab_lookup(tok, joined);
    memcpy(joined, b, blen);
    joined[blen] = '\0';
    int32_t ib = vocab_lookup(tok, joined);
    memcpy(joined, a, alen);
    memcpy(joined + alen, b, blen);
    joined[alen + blen] = '\0';
    int32_t inew = vocab_lookup(tok, joined);
    if (ia < 0 || ib < 0 || inew < 0) {
        const char *what = ia < 0 ? a : ib < 0 ? b : joined;
        int what_len = ia < 0 ? (int)alen : ib < 0 ? (int)blen : (int)(alen + blen);
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: merge %d ('%.*s' '%.*s'): '%.*s' is not in the vocab", where,
                     rank, (int)alen, a, (int)blen, b, what_len, what);
        goto done;
    }
    uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
    uint64_t h = merge_hash(tok, key);
    while (tok->merges[h].key != EMPTY_KEY && tok->merges[h].key != key)
        h = (h + 1) & tok->merge_mask;
    merge_slot *s = &tok->merges[h];
    *added = s->key == EMPTY_KEY;
    if (*added || !keep_first) {
        s->key = key;
        s->rank = rank;
        s->new_id = inew;
    }
done:
    if (joined != buf) free(joined);
    return rc;
}

/* ---------------------------------------------------------------- added tokens */

static int32_t max_added_id(const h3_tokenizer *tok) {
    int32_t m = -1;
    for (size_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].id > m) m = tok->added[i].id;
    return m;
}

/* tokenizers' AddedVocabulary::add_tokens: a known content keeps its id, a
 * BPE token becomes "added" with its BPE id, anything else gets the next id. */
static int32_t next_added_id(const h3_tokenizer *tok, const char *content, bool *in_vocab) {
    int32_t id = vocab_lookup(tok, content);
    *in_vocab = id >= 0;
    if (id >= 0) return id;
    int32_t m = max_added_id(tok);
    if (m < 0) return tok->model_size;
    return (m >= tok->model_size || tok->model_size == 0) ? m + 1 : tok->model_size;
}

typedef struct token_decl {
    const char *content;
    bool special, normalized, lstrip, rstrip, single_word;
    int64_t declared_id; /* -1: none */
} token_decl;

static h3_status_code add_token(h3_tokenizer *tok, const token_decl *d, const char *where,
                                h3_status *status) {
    if (!d->content[0]) return H3_OK; /* tokenizers skips empty tokens */
    if (d->lstrip || d->rstrip || d->single_word)
        return h3_fail(
            status, H3_ERR_UNSUPPORTED,
            "%s: added token '%s' uses lstrip/rstrip/single_word, which this tokenizer does not implement",
            where, d->content);
    gpointer known = g_hash_table_lookup(tok->added_index, d->content);
    if (known) {
        added_token *t = &tok->added[GPOINTER_TO_SIZE(known) - 1];
        if (d->declared_id >= 0 && d->declared_id != t->id)
            return h3_fail(status, H3_ERR_FORMAT,
                           "%s: added token '%s' declared with id %lld but it already has id %d", where,
                           d->content, (long long)d->declared_id, t->id);
        t->special = d->special;
        if (t->special)
            tok->flags[t->id] |= FLAG_SPECIAL;
        else
            tok->flags[t->id] &= (uint8_t)~FLAG_SPECIAL;
        if (t->normalized != d->normalized)
            return h3_fail(status, H3_ERR_UNSUPPORTED,
                           "%s: added token '%s' redeclared with another 'normalized' flag", where,
                           d->content);
        return H3_OK;
    }
    bool in_vocab;
    int32_t id = next_added_id(tok, d->content, &in_vocab);
    if (d->declared_id >= 0 && d->declared_id != id)
        return h3_fail(
            status, H3_ERR_FORMAT,
            "%s: added token '%s' declared with id %lld, but (transformers/tokenizers) it gets id %d", where,
            d->content, (long long)d->declared_id, id);
    if (id >= MAX_TOKEN_ID) return h3_fail(status, H3_ERR_FORMAT, "%s: too many added tokens", where);
    h3_status_code rc = ensure_ids(tok, id, status);
    if (rc) return rc;
    if (!in_vocab && tok->tokens[id])
        return h3_fail(status, H3_ERR_FORMAT, "%s: added token '%s' would take id %d, which is '%s'", where,
                       d->content, id, tok->tokens[id]);
    if (tok->n_added == tok->cap_added) {
        size_t cap = tok->cap_added ? 2 * tok->cap_added : 64;
        added_token *a = realloc(tok->added, cap * sizeof *a);
        if (!a) return h3_fail(status, H3_ERR_NO_MEMORY, "%s: added tokens", where);
        tok->added = a;
        tok->cap_added = cap;
    }
    added_token *t = &tok->added[tok->n_added++];
    t->content = g_string_chunk_insert(tok->strings, d->content);
    t->match = t->content;
    t->id = id;
    t->special = d->special;
    t->normalized = d->normalized;
    if (d->normalized && tok->nfc) {
        /* tokenizers searches normalized tokens in normalized text, by their
         * normalized content. */
        char *n = g_utf8_normalize(d->content, -1, G_NORMALIZE_NFC);
        if (!n)
            return h3_fail(status, H3_ERR_FORMAT, "%s: added token '%s' is not valid UTF-8", where,
                           d->content);
        t->match = g_string_chunk_insert(tok->strings, n);
        g_free(n);
    }
    t->match_len = strlen(t->match);
    if (!tok->tokens[id]) tok->tokens[id] = (char *)t->content;
    tok->flags[id] |= FLAG_ADDED | (d->special ? FLAG_SPECIAL : 0);
    if (id >= tok->n_ids) tok->n_ids = id + 1;
    g_hash_table_insert(tok->added_index, (char *)t->content, GSIZE_TO_POINTER(tok->n_added));
    return H3_OK;
}

/* Reads the flags of an added-token object ({"content":..., "special":...}). */
static h3_status_code read_token_object(JsonObject *o, token_decl *d, bool special_default, const char *where,
                                        h3_status *status) {
    h3_status_code rc = get_string(o, "content", &d->content, where, status);
    if (rc) return rc;
    if (!d->content) return h3_fail(status, H3_ERR_FORMAT, "%s: added token without 'content'", where);
    if ((rc = get_bool(o, "special", special_default, &d->special, where, status))) return rc;
    /* AddedToken(content, special) defaults normalized to !special. */
    if ((rc = get_bool(o, "normalized", !d->special, &d->normalized, where, status))) return rc;
    if ((rc = get_bool(o, "lstrip", false, &d->lstrip, where, status))) return rc;
    if ((rc = get_bool(o, "rstrip", false, &d->rstrip, where, status))) return rc;
    if ((rc = get_bool(o, "single_word", false, &d->single_word, where, status))) return rc;
    return H3_OK;
}

/* ---------------------------------------------------------------- tokenizer.json */

static h3_status_code check_normalizer(h3_tokenizer *tok, JsonObject *root, const char *path,
                                       h3_status *status) {
    JsonNode *n = json_object_get_member(root, "normalizer");
    if (node_is_null(n)) {
        tok->nfc = false;
        return H3_OK;
    }
    JsonObject *o = JSON_NODE_HOLDS_OBJECT(n) ? json_node_get_object(n) : NULL;
    const char *type = NULL;
    h3_status_code rc;
    if (o && (rc = get_string(o, "type", &type, path, status))) return rc;
    if (type && !strcmp(type, "Sequence")) {
        JsonArray *a = get_array(o, "normalizers");
        if (a && json_array_get_length(a) == 0) {
            tok->nfc = false;
            return H3_OK;
        }
        if (a && json_array_get_length(a) == 1) {
            JsonNode *e = json_array_get_element(a, 0);
            o = JSON_NODE_HOLDS_OBJECT(e) ? json_node_get_object(e) : NULL;
            type = NULL;
            if (o && (rc = get_string(o, "type", &type, path, status))) return rc;
        }
    }
    if (!type || strcmp(type, "NFC"))
        return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: normalizer '%s' is not supported (only NFC or none)",
                       path, type ? type : "?");
    tok->nfc = true;
    return H3_OK;
}

/* Only the Qwen2 pre-tokenizer is implemented: Split(regex, Isolated) then
 * ByteLevel without its own regex and without a prefix space. */
static h3_status_code check_pre_tokenizer(JsonObject *root, const char *path, h3_status *status) {
    JsonObject *pt = get_object(root, "pre_tokenizer");
    JsonArray *seq = pt ? get_array(pt, "pretokenizers") : NULL;
    const char *type = NULL, *regex = NULL, *behavior = NULL, *type2 = NULL;
    bool invert = true, prefix = true, use_regex = true;
    h3_status_code rc;
    if (seq && json_array_get_length(seq) == 2 && JSON_NODE_HOLDS_OBJECT(json_array_get_element(seq, 0)) &&
        JSON_NODE_HOLDS_OBJECT(json_array_get_element(seq, 1))) {
        JsonObject *split = json_array_get_object_element(seq, 0);
        JsonObject *bl = json_array_get_object_element(seq, 1);
        JsonObject *pat = get_object(split, "pattern");
        if ((rc = get_string(split, "type", &type, path, status)) ||
            (rc = get_string(split, "behavior", &behavior, path, status)) ||
            (rc = get_bool(split, "invert", false, &invert, path, status)) ||
            (pat && (rc = get_string(pat, "Regex", &regex, path, status))) ||
            (rc = get_string(bl, "type", &type2, path, status)) ||
            (rc = get_bool(bl, "add_prefix_space", false, &prefix, path, status)) ||
            (rc = get_bool(bl, "use_regex", true, &use_regex, path, status)))
            return rc;
    }
    if (!type || strcmp(type, "Split") || !regex || strcmp(regex, QWEN2_REGEX) || !behavior ||
        strcmp(behavior, "Isolated") || invert || !type2 || strcmp(type2, "ByteLevel") || prefix || use_regex)
        return h3_fail(
            status, H3_ERR_UNSUPPORTED,
            "%s: pre_tokenizer is not the Qwen2 one (Split(Qwen2 regex, Isolated) + ByteLevel(no prefix "
            "space, no regex)); other pre-tokenizers are not implemented",
            path);
    return H3_OK;
}

static h3_status_code check_bpe_model(JsonObject *model, const char *path, h3_status *status) {
    const char *type = NULL, *prefix = NULL, *suffix = NULL;
    bool byte_fallback, ignore_merges;
    h3_status_code rc;
    if ((rc = get_string(model, "type", &type, path, status)) ||
        (rc = get_string(model, "continuing_subword_prefix", &prefix, path, status)) ||
        (rc = get_string(model, "end_of_word_suffix", &suffix, path, status)) ||
        (rc = get_bool(model, "byte_fallback", false, &byte_fallback, path, status)) ||
        (rc = get_bool(model, "ignore_merges", false, &ignore_merges, path, status)))
        return rc;
    if (type && strcmp(type, "BPE"))
        return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: model type '%s' (only BPE)", path, type);
    if ((prefix && *prefix) || (suffix && *suffix) || byte_fallback || ignore_merges ||
        !node_is_null(json_object_get_member(model, "dropout")))
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "%s: BPE options (subword prefix/suffix, byte_fallback, ignore_merges, dropout) are "
                       "not supported",
                       path);
    return H3_OK;
}

static h3_status_code load_json_merges(h3_tokenizer *tok, JsonArray *merges, const char *path,
                                       h3_status *status) {
    guint n = json_array_get_length(merges);
    h3_status_code rc = merges_init(tok, n, status);
    if (rc) return rc;
    for (guint i = 0; i < n; i++) {
        JsonNode *e = json_array_get_element(merges, i);
        const char *a, *b;
        size_t alen, blen;
        if (node_is_string(e)) { /* older files: "a b" */
            a = json_node_get_string(e);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return h3_fail(status, H3_ERR_FORMAT,
                               "%s: merge %u '%s' is not two tokens separated by one space", path, i, a);
            alen = (size_t)(sp - a);
            b = sp + 1;
            blen = strlen(b);
        } else if (e && JSON_NODE_HOLDS_ARRAY(e) && json_array_get_length(json_node_get_array(e)) == 2 &&
                   node_is_string(json_array_get_element(json_node_get_array(e), 0)) &&
                   node_is_string(json_array_get_element(json_node_get_array(e), 1))) {
            a = json_array_get_string_element(json_node_get_array(e), 0);
            b = json_array_get_string_element(json_node_get_array(e), 1);
            alen = strlen(a);
            blen = strlen(b);
        } else {
            return h3_fail(status, H3_ERR_FORMAT, "%s: merge %u is neither \"a b\" nor [\"a\", \"b\"]", path,
                           i);
        }
        bool added;
        if ((rc = add_merge(tok, a, alen, b, blen, (int32_t)i, false, &added, path, status))) return rc;
    }
    return H3_OK;
}

static h3_status_code load_json_added(h3_tokenizer *tok, JsonArray *arr, const char *path,
                                      h3_status *status) {
    guint n = arr ? json_array_get_length(arr) : 0;
    for (guint i = 0; i < n; i++) {
        JsonNode *e = json_array_get_element(arr, i);
        if (!JSON_NODE_HOLDS_OBJECT(e))
            return h3_fail(status, H3_ERR_FORMAT, "%s: added_tokens[%u] is not an object", path, i);
        JsonObject *o = json_node_get_object(e);
        token_decl d;
        h3_status_code rc = read_token_object(o, &d, false, path, status);
        if (rc) return rc;
        JsonNode *idn = json_object_get_member(o, "id");
        if (!node_is_int(idn))
            return h3_fail(status, H3_ERR_FORMAT, "%s: added_tokens[%u] ('%s') has no integer id", path, i,
                           d.content);
        d.declared_id = json_node_get_int(idn);
        if ((rc = add_token(tok, &d, path, status))) return rc;
    }
    return H3_OK;
}

static h3_status_code load_tokenizer_json(h3_tokenizer *tok, const char *path, h3_status *status) {
    JsonParser *parser;
    JsonObject *root;
    h3_status_code rc = parse_json_file(path, &parser, &root, status);
    if (rc) return rc;
    JsonObject *model = get_object(root, "model");
    JsonObject *vocab = model ? get_object(model, "vocab") : NULL;
    JsonArray *merges = model ? get_array(model, "merges") : NULL;
    if (!model || !vocab || !merges) {
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: no model.vocab object and model.merges array", path);
        goto out;
    }
    JsonNode *added = json_object_get_member(root, "added_tokens");
    if (!node_is_null(added) && !JSON_NODE_HOLDS_ARRAY(added)) {
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: added_tokens is not an array", path);
        goto out;
    }
    if ((rc = check_normalizer(tok, root, path, status)) || (rc = check_pre_tokenizer(root, path, status)) ||
        (rc = check_bpe_model(model, path, status)) || (rc = load_vocab_object(tok, vocab, path, status)) ||
        (rc = load_json_merges(tok, merges, path, status)) ||
        (rc = load_json_added(tok, node_is_null(added) ? NULL : json_node_get_array(added), path, status)))
        goto out;
out:
    g_object_unref(parser);
    return rc;
}

/* ---------------------------------------------------------------- vocab.json + merges.txt */

static h3_status_code load_slow_files(h3_tokenizer *tok, const char *vocab_path, const char *merges_path,
                                      h3_status *status) {
    JsonParser *parser;
    JsonObject *root;
    h3_status_code rc = parse_json_file(vocab_path, &parser, &root, status);
    if (rc) return rc;
    rc = load_vocab_object(tok, root, vocab_path, status);
    g_object_unref(parser);
    if (rc) return rc;
    tok->nfc = true; /* Qwen2Converter: normalizer NFC */

    char *text;
    size_t len;
    if ((rc = h3_file_read(merges_path, H3_TOKENIZER_FILE_MAX_BYTES, &text, &len, status))) return rc;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    if ((rc = merges_init(tok, lines, status))) goto out;
    /* As Qwen2Tokenizer reads it: strip each line, skip blank lines and a
     * first "#version:" line, split on whitespace. */
    int32_t rank = 0;
    size_t lineno = 0;
    for (char *line = text, *end; line < text + len; line = end + 1, lineno++) {
        end = memchr(line, '\n', (size_t)(text + len - line));
        if (!end) end = text + len;
        char *s = line, *e = end;
        while (s < e && g_ascii_isspace(*s))
            s++;
        while (e > s && g_ascii_isspace(e[-1]))
            e--;
        if (s == e || (lineno == 0 && e - s >= 9 && !memcmp(s, "#version:", 9))) continue;
        char *sp = s;
        while (sp < e && !g_ascii_isspace(*sp))
            sp++;
        char *b = sp;
        while (b < e && g_ascii_isspace(*b))
            b++;
        char *be = b;
        while (be < e && !g_ascii_isspace(*be))
            be++;
        if (sp == s || b == e || be != e) {
            rc = h3_fail(status, H3_ERR_FORMAT, "%s: line %zu is not two tokens", merges_path, lineno + 1);
            goto out;
        }
        bool added;
        if ((rc = add_merge(tok, s, (size_t)(sp - s), b, (size_t)(be - b), rank, true, &added, merges_path,
                            status)))
            goto out;
        rank += added;
    }
out:
    g_free(text);
    return rc;
}

/* ---------------------------------------------------------------- tokenizer_config.json */

/* One special-token value: "text", {"content": "text", ...}, or null. */
static h3_status_code add_special_value(h3_tokenizer *tok, JsonNode *v, const char *where,
                                        h3_status *status) {
    token_decl d = {0};
    d.declared_id = -1;
    if (node_is_null(v)) return H3_OK;
    if (node_is_string(v)) {
        d.content = json_node_get_string(v);
        d.special = true; /* AddedToken(token, special=True): normalized=False */
    } else if (JSON_NODE_HOLDS_OBJECT(v)) {
        h3_status_code rc = read_token_object(json_node_get_object(v), &d, true, where, status);
        if (rc) return rc;
    } else {
        return h3_fail(status, H3_ERR_FORMAT, "%s: a special token is neither a string nor an object", where);
    }
    /* transformers only adds special tokens that are not added tokens yet. */
    if (g_hash_table_contains(tok->added_index, d.content)) return H3_OK;
    return add_token(tok, &d, where, status);
}

static h3_status_code add_special_list(h3_tokenizer *tok, JsonNode *v, const char *where, h3_status *status) {
    if (node_is_null(v)) return H3_OK;
    if (JSON_NODE_HOLDS_ARRAY(v)) {
        JsonArray *a = json_node_get_array(v);
        for (guint i = 0; i < json_array_get_length(a); i++) {
            h3_status_code rc = add_special_value(tok, json_array_get_element(a, i), where, status);
            if (rc) return rc;
        }
        return H3_OK;
    }
    if (JSON_NODE_HOLDS_OBJECT(v)) { /* extra_special_tokens as {"name": token}, in file order */
        JsonObjectIter it;
        const char *name;
        JsonNode *e;
        json_object_iter_init_ordered(&it, json_node_get_object(v));
        while (json_object_iter_next_ordered(&it, &name, &e)) {
            h3_status_code rc = add_special_value(tok, e, where, status);
            if (rc) return rc;
        }
        return H3_OK;
    }
    return h3_fail(status, H3_ERR_FORMAT, "%s: special token list is neither an array nor an object", where);
}

typedef struct decoder_entry {
    int64_t id;
    JsonObject *obj;
} decoder_entry;

static int compare_decoder_entry(const void *a, const void *b) {
    int64_t x = ((const decoder_entry *)a)->id, y = ((const decoder_entry *)b)->id;
    return (x > y) - (x < y);
}

/* added_tokens_decoder {"151643": {...}} in id order, ids checked. */
static h3_status_code load_added_tokens_decoder(h3_tokenizer *tok, JsonObject *dec, const char *path,
                                                h3_status *status) {
    guint n = json_object_get_size(dec);
    decoder_entry *e = calloc(n ? n : 1, sizeof *e);
    if (!e) return h3_fail(status, H3_ERR_NO_MEMORY, "%s: added_tokens_decoder", path);
    h3_status_code rc = H3_OK;
    JsonObjectIter it;
    const char *name;
    JsonNode *node;
    guint k = 0;
    json_object_iter_init(&it, dec);
    while (json_object_iter_next(&it, &name, &node)) {
        char *endp;
        long long id = g_ascii_strtoll(name, &endp, 10);
        if (!*name || *endp || !JSON_NODE_HOLDS_OBJECT(node)) {
            rc = h3_fail(status, H3_ERR_FORMAT, "%s: added_tokens_decoder entry '%s' is not id -> object",
                         path, name);
            goto out;
        }
        e[k].id = id;
        e[k++].obj = json_node_get_object(node);
    }
    qsort(e, k, sizeof *e, compare_decoder_entry);
    for (guint i = 0; i < k; i++) {
        token_decl d;
        if ((rc = read_token_object(e[i].obj, &d, false, path, status))) goto out;
        d.declared_id = e[i].id;
        if ((rc = add_token(tok, &d, path, status))) goto out;
    }
out:
    free(e);
    return rc;
}

static const char *const special_token_keys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                                 "pad_token", "cls_token", "mask_token"};

/* What transformers' PreTrainedTokenizerFast.__init__ adds on top of
 * tokenizer.json (or of the converted slow files): added_tokens_decoder in id
 * order, then the special tokens not yet added, each with the next free id. */
static h3_status_code apply_config(h3_tokenizer *tok, const char *path, h3_status *status) {
    JsonParser *parser;
    JsonObject *cfg;
    h3_status_code rc = parse_json_file(path, &parser, &cfg, status);
    if (rc) return rc;
    char *dir = g_path_get_dirname(path);
    char *stm = g_build_filename(dir, "special_tokens_map.json", NULL);
    char *atj = g_build_filename(dir, "added_tokens.json", NULL);
    const char *cls = NULL;
    bool split_special = false, prefix_space = false;
    JsonObject *dec = get_object(cfg, "added_tokens_decoder");
    if ((rc = get_string(cfg, "tokenizer_class", &cls, path, status)) ||
        (rc = get_bool(cfg, "split_special_tokens", false, &split_special, path, status)) ||
        (rc = get_bool(cfg, "add_prefix_space", false, &prefix_space, path, status)))
        goto out;
    if (cls && strcmp(cls, "Qwen2Tokenizer") && strcmp(cls, "Qwen2TokenizerFast") &&
        strcmp(cls, "PreTrainedTokenizerFast")) {
        rc = h3_fail(status, H3_ERR_UNSUPPORTED, "%s: tokenizer_class '%s' (only Qwen2Tokenizer[Fast])", path,
                     cls);
        goto out;
    }
    if (prefix_space) {
        rc = h3_fail(status, H3_ERR_UNSUPPORTED, "%s: add_prefix_space=true is not supported", path);
        goto out;
    }
    /* These two files change the added tokens in transformers; rather than
     * ignore them silently, refuse them (the H3 and Qwen3 releases have neither). */
    if (g_file_test(stm, G_FILE_TEST_EXISTS) || (!dec && g_file_test(atj, G_FILE_TEST_EXISTS))) {
        rc = h3_fail(status, H3_ERR_UNSUPPORTED,
                     "%s: special_tokens_map.json / added_tokens.json are not supported", dir);
        goto out;
    }
    tok->split_special = split_special;
    if (dec && (rc = load_added_tokens_decoder(tok, dec, path, status))) goto out;
    for (size_t i = 0; i < G_N_ELEMENTS(special_token_keys); i++)
        if ((rc = add_special_value(tok, json_object_get_member(cfg, special_token_keys[i]), path, status)))
            goto out;
    if ((rc =
             add_special_list(tok, json_object_get_member(cfg, "additional_special_tokens"), path, status)) ||
        (rc = add_special_list(tok, json_object_get_member(cfg, "extra_special_tokens"), path, status)))
        goto out;
out:
    g_free(stm);
    g_free(atj);
    g_free(dir);
    g_object_unref(parser);
    return rc;
}

/* ---------------------------------------------------------------- finishing the load */

static int compare_set_entry(const void *a, const void *b, void *user) {
    const h3_tokenizer *tok = user;
    const added_token *x = &tok->added[*(const uint32_t *)a], *y = &tok->added[*(const uint32_t *)b];
    unsigned char fx = (unsigned char)x->match[0], fy = (unsigned char)y->match[0];
    if (fx != fy) return fx < fy ? -1 : 1;
    if (x->match_len != y->match_len) return x->match_len > y->match_len ? -1 : 1;
    return 0;
}

static h3_status_code build_set(h3_tokenizer *tok, added_set *set, bool normalized, h3_status *status) {
    set->index = malloc((tok->n_added ? tok->n_added : 1) * sizeof *set->index);
    if (!set->index) return h3_fail(status, H3_ERR_NO_MEMORY, "tokenizer: added token index");
    uint32_t n = 0;
    for (size_t i = 0; i < tok->n_added; i++) {
        const added_token *t = &tok->added[i];
        if (t->normalized == normalized && !(tok->split_special && t->special) && t->match_len)
            set->index[n++] = (uint32_t)i;
    }
    g_qsort_with_data(set->index, (gint)n, sizeof *set->index, compare_set_entry, tok);
    uint32_t k = 0;
    for (int b = 0; b <= 256; b++) {
        while (b < 256 && k < n && (unsigned char)tok->added[set->index[k]].match[0] < b)
            k++;
        set->start[b] = b < 256 ? k : n;
    }
    return H3_OK;
}

static h3_status_code finish_load(h3_tokenizer *tok, const char *path, h3_status *status) {
    for (int b = 0; b < 256; b++) {
        char s[8];
        s[g_unichar_to_utf8(byte_to_unicode(b), s)] = '\0';
        tok->byte_ids[b] = vocab_lookup(tok, s);
        if (tok->byte_ids[b] < 0)
            return h3_fail(status, H3_ERR_FORMAT, "%s: byte 0x%02X (symbol '%s') is not in the vocab", path,
                           b, s);
    }
    h3_status_code rc = build_set(tok, &tok->raw_set, false, status);
    if (!rc) rc = build_set(tok, &tok->norm_set, true, status);
    return rc;
}

h3_status_code h3_tokenizer_load(const char *path, h3_tokenizer **out, h3_status *status) {
    return h3_tokenizer_load_with_options(path, NULL, out, status);
}

h3_status_code h3_tokenizer_load_with_options(const char *path, const h3_tokenizer_options *options,
                                              h3_tokenizer **out, h3_status *status) {
    if (!out) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "h3_tokenizer_load: out is NULL");
    *out = NULL;
    if (!path) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "h3_tokenizer_load: path is NULL");
    h3_tokenizer_mode mode = options ? options->mode : H3_TOKENIZER_MODE_TRANSFORMERS;
    const char *config_override = options ? options->config_path : NULL;
    if (mode != H3_TOKENIZER_MODE_TRANSFORMERS && mode != H3_TOKENIZER_MODE_TOKENIZERS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "h3_tokenizer_load: unknown mode %d", (int)mode);

    char *dir = NULL, *json = NULL, *vocab = NULL, *merges = NULL, *config = NULL;
    h3_status_code rc = H3_OK;
    if (g_file_test(path, G_FILE_TEST_IS_DIR)) {
        dir = g_strdup(path);
        json = g_build_filename(dir, "tokenizer.json", NULL);
        if (!g_file_test(json, G_FILE_TEST_IS_REGULAR)) {
            g_free(json);
            json = NULL;
        }
    } else if (g_file_test(path, G_FILE_TEST_IS_REGULAR)) {
        dir = g_path_get_dirname(path);
        json = g_strdup(path);
    } else {
        return h3_fail(status, H3_ERR_NOT_FOUND, "%s: no such tokenizer directory or file", path);
    }
    if (!json) {
        vocab = g_build_filename(dir, "vocab.json", NULL);
        merges = g_build_filename(dir, "merges.txt", NULL);
        if (mode == H3_TOKENIZER_MODE_TOKENIZERS) {
            rc = h3_fail(status, H3_ERR_NOT_FOUND,
                         "%s: no tokenizer.json (the 'tokenizers' mode reads only that)", dir);
            goto out;
        }
        if (!g_file_test(vocab, G_FILE_TEST_IS_REGULAR) || !g_file_test(merges, G_FILE_TEST_IS_REGULAR)) {
            rc = h3_fail(status, H3_ERR_NOT_FOUND, "%s: neither tokenizer.json nor vocab.json + merges.txt",
                         dir);
            goto out;
        }
    }
    if (mode == H3_TOKENIZER_MODE_TRANSFORMERS) {
        config = g_strdup(config_override ? config_override : NULL);
        if (!config) {
            config = g_build_filename(dir, "tokenizer_config.json", NULL);
            if (!g_file_test(config, G_FILE_TEST_IS_REGULAR)) {
                g_free(config);
                config = NULL;
            }
        } else if (!g_file_test(config, G_FILE_TEST_IS_REGULAR)) {
            rc = h3_fail(status, H3_ERR_NOT_FOUND, "%s: no such tokenizer config", config);
            goto out;
        }
    }

    h3_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) {
        rc = h3_fail(status, H3_ERR_NO_MEMORY, "%s: tokenizer", path);
        goto out;
    }
    tok->strings = g_string_chunk_new(1 << 20);
    tok->vocab = g_hash_table_new(g_str_hash, g_str_equal);
    tok->added_index = g_hash_table_new(g_str_hash, g_str_equal);
    rc = json ? load_tokenizer_json(tok, json, status) : load_slow_files(tok, vocab, merges, status);
    if (!rc && config) rc = apply_config(tok, config, status);
    if (!rc) rc = finish_load(tok, json ? json : dir, status);
    if (rc)
        h3_tokenizer_free(tok);
    else
        *out = tok;
out:
    g_free(dir);
    g_free(json);
    g_free(vocab);
    g_free(merges);
    g_free(config);
    return rc;
}

void h3_tokenizer_free(h3_tokenizer *tok) {
    if (!tok) return;
    if (tok->strings) g_string_chunk_free(tok->strings);
    if (tok->vocab) g_hash_table_destroy(tok->vocab);
    if (tok->added_index) g_hash_table_destroy(tok->added_index);
    free(tok->tokens);
    free(tok->flags);
    free(tok->merges);
    free(tok->added);
    free(tok->raw_set.index);
    free(tok->norm_set.index);
    free(tok);
}

int32_t h3_tokenizer_vocab_size(const h3_tokenizer *tok) {
    return tok ? tok->n_ids : 0;
}

const char *h3_tokenizer_id_to_token(const h3_tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->n_ids) return NULL;
    return tok->tokens[id];
}

int32_t h3_tokenizer_token_to_id(const h3_tokenizer *tok, const char *token) {
    if (!tok || !token) return -1;
    gpointer v = g_hash_table_lookup(tok->added_index, token);
    if (v) return tok->added[GPOINTER_TO_SIZE(v) - 1].id;
    return vocab_lookup(tok, token);
}

int h3_tokenizer_is_special(const h3_tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->n_ids) return 0;
    return (tok->flags[id] & FLAG_SPECIAL) != 0;
}

/* ---------------------------------------------------------------- encoding */

enum { CC_L = 1, CC_N = 2, CC_S = 4, CC_NL = 8 };

/* Per call scratch, grown as needed: the code points of a segment and the
 * symbols and heap of one BPE word. */
typedef struct work {
    uint32_t *cp, *off;
    uint8_t *cls;
    size_t cap_cp;
    int32_t *sym, *prev, *next;
    size_t cap_sym;
    struct bpe_merge *heap;
    size_t n_heap;
    int32_t *out;
    size_t n_out, cap_out;
} work;

typedef struct bpe_merge {
    int32_t rank, pos, new_id;
} bpe_merge;

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

/* Reallocates a set of parallel arrays to one capacity; an array that grew
 * before a later failure is only larger than recorded, which is harmless. */
static bool grow_parallel(void **arrays[], const size_t *elems, int count, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    for (int i = 0; i < count; i++) {
        void *q = realloc(*arrays[i], c * elems[i]);
        if (!q) return false;
        *arrays[i] = q;
    }
    *cap = c;
    return true;
}

static h3_status_code push_id(work *w, int32_t id, h3_status *status) {
    if (w->n_out == w->cap_out && !grow((void **)&w->out, &w->cap_out, w->n_out + 1, sizeof *w->out))
        return h3_fail(status, H3_ERR_NO_MEMORY, "tokenizer: %zu output ids", w->n_out + 1);
    w->out[w->n_out++] = id;
    return H3_OK;
}

/* Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF);
 * NUL is a valid character. Returns the offset of the first bad byte or len. */
static size_t utf8_check(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;                        /* continuation bytes */
        unsigned lo = 0x80, hi = 0xBF;   /* range of the first continuation byte */
        if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            if (c == 0xE0) lo = 0xA0; /* overlong */
            if (c == 0xED) hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            if (c == 0xF0) lo = 0x90; /* overlong */
            if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
        } else {
            return i;
        }
        if (len - i <= n) return i;
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k <= n; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += n + 1;
    }
    return len;
}

/* Decodes one character of valid UTF-8, returns its length. */
static size_t utf8_decode(const unsigned char *s, uint32_t *cp) {
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if (s[0] < 0xE0) {
        *cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
        return 2;
    }
    if (s[0] < 0xF0) {
        *cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
        return 3;
    }
    *cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 |
          (s[3] & 0x3F);
    return 4;
}

/* \p{L}, \p{N}, \s (Unicode White_Space, as Oniguruma's \s) and [\r\n]. */
static uint8_t char_class(uint32_t c) {
    if (c < 0x80) {
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return CC_L;
        if (c >= '0' && c <= '9') return CC_N;
        if (c == '\n' || c == '\r') return CC_S | CC_NL;
        if ((c >= 0x09 && c <= 0x0D) || c == 0x20) return CC_S;
        return 0;
    }
    if (c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
        c == 0x202F || c == 0x205F || c == 0x3000)
        return CC_S;
    switch (g_unichar_type(c)) {
    case G_UNICODE_UPPERCASE_LETTER:
    case G_UNICODE_LOWERCASE_LETTER:
    case G_UNICODE_TITLECASE_LETTER:
    case G_UNICODE_MODIFIER_LETTER:
    case G_UNICODE_OTHER_LETTER: return CC_L;
    case G_UNICODE_DECIMAL_NUMBER:
    case G_UNICODE_LETTER_NUMBER:
    case G_UNICODE_OTHER_NUMBER: return CC_N;
    default: return 0;
    }
}

/* Simple case folding of the letters in (?i:'s|'t|'re|'ve|'m|'ll|'d): ASCII,
 * plus U+017F LONG S, which folds to 's' under Unicode case folding. */
static uint32_t fold(uint32_t c) {
    if (c >= 'A' && c <= 'Z') return c | 0x20;
    if (c == 0x17F) return 's';
    return c;
}

/* End (in code points) of the regex match that starts at i. The alternatives
 * are tried in the regex's order; each comment is the alternative. */
static size_t pretok_next(const uint32_t *cp, const uint8_t *cls, size_t n, size_t i) {
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (cp[i] == '\'' && i + 1 < n) {
        uint32_t a = fold(cp[i + 1]);
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if (i + 2 < n) {
            uint32_t b = fold(cp[i + 2]);
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
        }
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    size_t j = i;
    if (!(cls[j] & (CC_L | CC_N | CC_NL)) && j + 1 < n && (cls[j + 1] & CC_L)) j++;
    if (cls[j] & CC_L) {
        while (j < n && (cls[j] & CC_L))
            j++;
        return j;
    }
    /* \p{N} */
    if (cls[i] & CC_N) return i + 1;
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    j = cp[i] == ' ' ? i + 1 : i;
    size_t k = j;
    while (k < n && !(cls[k] & (CC_S | CC_L | CC_N)))
        k++;
    if (k > j) {
        while (k < n && (cls[k] & CC_NL))
            k++;
        return k;
    }
    /* Only whitespace is left: cls[i] has CC_S. */
    size_t e = i;
    while (e < n && (cls[e] & CC_S))
        e++;
    /* \s*[\r\n]+ : up to and including the last CR/LF of the run */
    for (size_t m = e; m > i; m--)
        if (cls[m - 1] & CC_NL) return m;
    /* \s+(?!\S) : the whole run at the end, else all but its last char */
    if (e == n) return e;
    if (e - i >= 2) return e - 1;
    /* \s+ */
    return e;
}

static void heap_push(work *w, bpe_merge m) {
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        bpe_merge q = w->heap[p];
        if (q.rank < m.rank || (q.rank == m.rank && q.pos < m.pos)) break;
        w->heap[i] = q;
        i = p;
    }
    w->heap[i] = m;
}

static bpe_merge heap_pop(work *w) {
    bpe_merge top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && (w->heap[c + 1].rank < w->heap[c].rank ||
                          (w->heap[c + 1].rank == w->heap[c].rank && w->heap[c + 1].pos < w->heap[c].pos)))
            c++;
        if (last.rank < w->heap[c].rank || (last.rank == w->heap[c].rank && last.pos < w->heap[c].pos)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

static void push_pair(const h3_tokenizer *tok, work *w, int32_t left) {
    const merge_slot *m = merge_find(tok, w->sym[left], w->sym[w->next[left]]);
    if (m) heap_push(w, (bpe_merge){m->rank, left, m->new_id});
}

/* BPE of one pre-tokenized piece, as tokenizers' Word::merge_all: a min-heap
 * of (rank, position); a popped merge is skipped when its pair has changed. */
static h3_status_code bpe_piece(const h3_tokenizer *tok, work *w, const unsigned char *p, size_t n,
                                h3_status *status) {
    if (n == 1) return push_id(w, tok->byte_ids[p[0]], status);
    /* The heap holds at most n - 1 initial pairs plus 2 per merge. */
    void **arrays[] = {(void **)&w->sym, (void **)&w->prev, (void **)&w->next, (void **)&w->heap};
    const size_t elems[] = {sizeof *w->sym, sizeof *w->prev, sizeof *w->next, 3 * sizeof *w->heap};
    if (!grow_parallel(arrays, elems, 4, &w->cap_sym, n))
        return h3_fail(status, H3_ERR_NO_MEMORY, "tokenizer: BPE of a %zu-byte piece", n);
    for (size_t k = 0; k < n; k++) {
        w->sym[k] = tok->byte_ids[p[k]];
        w->prev[k] = (int32_t)k - 1;
        w->next[k] = k + 1 < n ? (int32_t)k + 1 : -1;
    }
    w->n_heap = 0;
    for (size_t k = 0; k + 1 < n; k++)
        push_pair(tok, w, (int32_t)k);
    while (w->n_heap) {
        bpe_merge m = heap_pop(w);
        int32_t right = w->next[m.pos];
        if (w->sym[m.pos] < 0 || right < 0) continue;
        const merge_slot *cur = merge_find(tok, w->sym[m.pos], w->sym[right]);
        if (!cur || cur->new_id != m.new_id) continue;
        w->sym[m.pos] = m.new_id;
        w->sym[right] = -1;
        w->next[m.pos] = w->next[right];
        if (w->next[right] >= 0) w->prev[w->next[right]] = m.pos;
        if (w->prev[m.pos] >= 0) push_pair(tok, w, w->prev[m.pos]);
        if (w->next[m.pos] >= 0) push_pair(tok, w, m.pos);
    }
    for (int32_t k = 0; k >= 0; k = w->next[k]) {
        h3_status_code rc = push_id(w, w->sym[k], status);
        if (rc) return rc;
    }
    return H3_OK;
}

/* Pre-tokenizes and BPE-encodes normalized text without added tokens. */
static h3_status_code encode_plain(const h3_tokenizer *tok, work *w, const char *s, size_t len,
                                   h3_status *status) {
    void **arrays[] = {(void **)&w->cp, (void **)&w->off, (void **)&w->cls};
    const size_t elems[] = {sizeof *w->cp, sizeof *w->off, sizeof *w->cls};
    if (!grow_parallel(arrays, elems, 3, &w->cap_cp, len + 1))
        return h3_fail(status, H3_ERR_NO_MEMORY, "tokenizer: %zu-byte segment", len);
    const unsigned char *u = (const unsigned char *)s;
    size_t n = 0;
    for (size_t i = 0; i < len; n++) {
        w->off[n] = (uint32_t)i;
        i += utf8_decode(u + i, &w->cp[n]);
        w->cls[n] = char_class(w->cp[n]);
    }
    w->off[n] = (uint32_t)len;
    for (size_t i = 0; i < n;) {
        size_t j = pretok_next(w->cp, w->cls, n, i);
        h3_status_code rc = bpe_piece(tok, w, u + w->off[i], w->off[j] - w->off[i], status);
        if (rc) return rc;
        i = j;
    }
    return H3_OK;
}

/* Leftmost-longest added token in s[from, len): returns its start (len when
 * none) and sets *mlen and *id. */
static size_t find_added(const h3_tokenizer *tok, const added_set *set, const char *s, size_t from,
                         size_t len, size_t *mlen, int32_t *id) {
    if (set->start[256] == 0) return len;
    for (size_t pos = from; pos < len; pos++) {
        unsigned char c = (unsigned char)s[pos];
        for (uint32_t k = set->start[c]; k < set->start[c + 1]; k++) {
            const added_token *t = &tok->added[set->index[k]];
            if (t->match_len <= len - pos && !memcmp(s + pos, t->match, t->match_len)) {
                *mlen = t->match_len;
                *id = t->id;
                return pos;
            }
        }
    }
    return len;
}

/* NFC of valid UTF-8 that may hold NULs: NUL is a starter that composes
 * with nothing, so the NUL-free runs normalize independently. */
static char *nfc(const char *s, size_t len, size_t *out_len) {
    GString *g = g_string_sized_new(len + 16);
    for (size_t i = 0; i < len;) {
        const char *z = memchr(s + i, '\0', len - i);
        size_t run = z ? (size_t)(z - (s + i)) : len - i;
        if (run) {
            char *n = g_utf8_normalize(s + i, (gssize)run, G_NORMALIZE_NFC);
            if (n) g_string_append(g, n);
            g_free(n);
        }
        i += run;
        if (i < len) {
            g_string_append_c(g, '\0');
            i++;
        }
    }
    *out_len = g->len;
    return g_string_free(g, FALSE);
}

static bool is_ascii(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] >= 0x80) return false;
    return true;
}

/* A segment between raw added tokens: normalize, then split on normalized
 * added tokens, then encode the rest. */
static h3_status_code encode_segment(const h3_tokenizer *tok, work *w, const char *s, size_t len,
                                     h3_status *status) {
    char *norm = NULL;
    if (tok->nfc && !is_ascii(s, len)) { /* ASCII is already NFC */
        norm = nfc(s, len, &len);
        s = norm;
    }
    h3_status_code rc = H3_OK;
    for (size_t pos = 0; pos < len && !rc;) {
        size_t mlen = 0;
        int32_t id = -1;
        size_t at = find_added(tok, &tok->norm_set, s, pos, len, &mlen, &id);
        if (at > pos) rc = encode_plain(tok, w, s + pos, at - pos, status);
        if (at == len || rc) break;
        rc = push_id(w, id, status);
        pos = at + mlen;
    }
    g_free(norm);
    return rc;
}

h3_status_code h3_tokenizer_encode_len(const h3_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                                       size_t *n_ids, h3_status *status) {
    if (!ids || !n_ids)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "h3_tokenizer_encode: ids/n_ids is NULL");
    *ids = NULL;
    *n_ids = 0;
    if (!tok || (!text && len))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "h3_tokenizer_encode: NULL tokenizer or text");
    if (len > UINT32_MAX - 1)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "h3_tokenizer_encode: text of %zu bytes is too long",
                       len);
    size_t bad = utf8_check((const unsigned char *)text, len);
    if (bad < len)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "tokenizer: text is not valid UTF-8 (byte 0x%02X at offset %zu)",
                       (unsigned char)text[bad], bad);
    work w = {0};
    h3_status_code rc = H3_OK;
    for (size_t pos = 0; pos < len && !rc;) {
        size_t mlen = 0;
        int32_t id = -1;
        size_t at = find_added(tok, &tok->raw_set, text, pos, len, &mlen, &id);
        if (at > pos) rc = encode_segment(tok, &w, text + pos, at - pos, status);
        if (at == len || rc) break;
        rc = push_id(&w, id, status);
        pos = at + mlen;
    }
    free(w.cp);
    free(w.off);
    free(w.cls);
    free(w.sym);
    free(w.prev);
    free(w.next);
    free(w.heap);
    if (rc || w.n_out == 0) {
        free(w.out);
        return rc;
    }
    *ids = w.out;
    *n_ids = w.n_out;
    return H3_OK;
}

h3_status_code h3_tokenizer_encode(const h3_tokenizer *tok, const char *text, int32_t **ids, size_t *n_ids,
                                   h3_status *status) {
    if (!text) {
        if (ids) *ids = NULL;
        if (n_ids) *n_ids = 0;
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "h3_tokenizer_encode: text is NULL");
    }
    return h3_tokenizer_encode_len(tok, text, strlen(text), ids, n_ids, status);
}
