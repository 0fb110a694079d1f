/* fuzz_tokenizer_load: a tokenizer directory.
 *
 * Input: one flags byte, then parts.
 *   flags & 1: the 'tokenizers' mode (tokenizer.json alone) instead of
 *              the 'transformers' one (tokenizer_config.json on top)
 *   flags & 2: the slow layout (vocab.json + merges.txt) instead of
 *              tokenizer.json
 *   parts: tokenizer.json, or vocab.json SEP merges.txt; then
 *          tokenizer_config.json, special_tokens_map.json,
 *          added_tokens.json (each optional)
 * A loaded tokenizer encodes a few fixed strings (added tokens, NFC,
 * pre-tokenizer corners); every id must be below its vocabulary size and
 * name a token that maps back to an id. */
#include "h3_fuzz.h"
#include "h3_fuzz_nest.h" /* runs of [ and { (issue 31) */

#include "model/h3_tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    h3_fuzz_init();
    return 0;
}

static const char *const texts[] = {
    "a robot dancing", " Hello world", "<|im_start|>user\nhi<|im_end|>", "<d>12</d><|cutoff|>",
    "caf\xc3\xa9 cafe\xcc\x81", "   \t\n\n  x", "1234567 don't I'LL", "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x81",
    "\xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", "",
};

static void encode_all(const h3_tokenizer *tok) {
    int32_t vs = h3_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < G_N_ELEMENTS(texts); i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        h3_status st;
        if (h3_tokenizer_encode(tok, texts[i], &ids, &n, &st) != H3_OK) {
            h3_fuzz_check_status(&st);
            continue;
        }
        for (size_t k = 0; k < n; k++) {
            if (ids[k] < 0 || ids[k] >= vs) abort();
            const char *s = h3_tokenizer_id_to_token(tok, ids[k]);
            if (!s) abort(); /* an id the encoder emits names a token */
            (void)h3_tokenizer_token_to_id(tok, s);
            (void)h3_tokenizer_is_special(tok, ids[k]);
        }
        free(ids);
    }
    (void)h3_tokenizer_id_to_token(tok, -1);
    (void)h3_tokenizer_id_to_token(tok, vs);
    (void)h3_tokenizer_is_special(tok, vs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned flags = data[0];
    h3_fuzz_remove("tok");
    h3_fuzz_part parts[H3_FUZZ_MAX_PARTS];
    size_t n = h3_fuzz_split(data + 1, size - 1, parts, 6), at = 0;
    if (flags & 2) {
        g_free(h3_fuzz_write("tok/vocab.json", parts[at].data, parts[at].size));
        at++;
        if (at < n) {
            g_free(h3_fuzz_write("tok/merges.txt", parts[at].data, parts[at].size));
            at++;
        }
    } else {
        g_free(h3_fuzz_write("tok/tokenizer.json", parts[at].data, parts[at].size));
        at++;
    }
    const char *beside[] = {"tok/tokenizer_config.json", "tok/special_tokens_map.json", "tok/added_tokens.json"};
    for (size_t i = 0; i < G_N_ELEMENTS(beside) && at < n; i++, at++)
        g_free(h3_fuzz_write(beside[i], parts[at].data, parts[at].size));

    char *dir = h3_fuzz_path("tok");
    h3_tokenizer_options opt = {.mode = (flags & 1) ? H3_TOKENIZER_MODE_TOKENIZERS : H3_TOKENIZER_MODE_TRANSFORMERS};
    h3_tokenizer *tok;
    h3_status st;
    if (h3_tokenizer_load_with_options(dir, &opt, &tok, &st) == H3_OK) {
        encode_all(tok);
        h3_tokenizer_free(tok);
    } else {
        h3_fuzz_check_status(&st);
    }
    g_free(dir);
    return 0;
}
