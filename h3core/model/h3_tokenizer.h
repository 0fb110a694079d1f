/* h3_tokenizer.h - the Qwen2/Qwen3 byte-level BPE tokenizer, byte-exact with
 * Hugging Face `tokenizers` / `transformers` (docs/spec/h3-conditioner.md §4).
 *
 * Encoding is tokenizer(text, add_special_tokens=False): added tokens are
 * matched whole (leftmost-longest), every other segment is NFC-normalized,
 * split by the Qwen2 pre-tokenizer regex (a hand-coded scanner), mapped to
 * byte-level symbols and merged by BPE rank. Nothing is added before or after.
 *
 * Two modes decide which added tokens exist:
 *   TRANSFORMERS (default; the H3 pipeline call): tokenizer.json's added_tokens,
 *     then tokenizer_config.json's added_tokens_decoder, then every special token
 *     the config names (bos/eos/.../additional_special_tokens/extra_special_tokens)
 *     that is still unknown gets the next free id, as transformers'
 *     PreTrainedTokenizerFast does. This is how the H3 extras <d>, </d>,
 *     <|cutoff|>, ... become 151669..151675 with the release's config.
 *   TOKENIZERS: tokenizer.json alone, like tokenizers.Tokenizer.from_file(). */
#ifndef H3_TOKENIZER_H
#define H3_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct h3_tokenizer h3_tokenizer;

typedef enum h3_tokenizer_mode {
    H3_TOKENIZER_MODE_TRANSFORMERS = 0,
    H3_TOKENIZER_MODE_TOKENIZERS = 1
} h3_tokenizer_mode;

typedef struct h3_tokenizer_options {
    h3_tokenizer_mode mode;
    /* TRANSFORMERS mode: the tokenizer_config.json to use instead of the one
     * beside the vocabulary (NULL: <dir>/tokenizer_config.json if present). */
    const char *config_path;
} h3_tokenizer_options;

/* path: a tokenizer directory (tokenizer.json, or vocab.json + merges.txt +
 * tokenizer_config.json as in the official release) or a tokenizer.json file.
 * Uses the TRANSFORMERS mode. */
h3_status_code h3_tokenizer_load(const char *path, h3_tokenizer **out, h3_status *status);
/* options may be NULL (same as h3_tokenizer_load). */
h3_status_code h3_tokenizer_load_with_options(const char *path, const h3_tokenizer_options *options,
                                              h3_tokenizer **out, h3_status *status);
void h3_tokenizer_free(h3_tokenizer *tok);

/* Encodes NUL-terminated UTF-8 text. *ids is malloc'd (caller frees; NULL when
 * *n_ids is 0). Invalid UTF-8 is an H3_ERR_INVALID_ARGUMENT. Thread-safe: the
 * tokenizer is not modified. */
h3_status_code h3_tokenizer_encode(const h3_tokenizer *tok, const char *text, int32_t **ids, size_t *n_ids,
                                   h3_status *status);
/* Same for len bytes of text, which may contain NUL characters. */
h3_status_code h3_tokenizer_encode_len(const h3_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                                       size_t *n_ids, h3_status *status);

/* Highest id + 1, added tokens included (151669 for Qwen3, 151676 with the
 * H3 extras). */
int32_t h3_tokenizer_vocab_size(const h3_tokenizer *tok);
/* The token's string (byte-level form for BPE tokens), or NULL for an unused id. */
const char *h3_tokenizer_id_to_token(const h3_tokenizer *tok, int32_t id);
/* The id of a vocabulary or added token, or -1. */
int32_t h3_tokenizer_token_to_id(const h3_tokenizer *tok, const char *token);
/* 1 if id is an added token flagged special (<|image_pad|>, <d>, ...), else 0. */
int h3_tokenizer_is_special(const h3_tokenizer *tok, int32_t id);

#ifdef __cplusplus
}
#endif
#endif
