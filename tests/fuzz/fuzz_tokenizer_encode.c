/* fuzz_tokenizer_encode: arbitrary bytes through the tiny model's
 * tokenizer (tests/data/models/tiny-h3/tokenizer; H3_FUZZ_TOKENIZER names
 * another directory, e.g. tests/data/tokenizers/qwen3 for the real
 * vocabulary), in both modes.
 *
 * Invalid UTF-8 must be an error, never a crash; valid text must give ids
 * below the vocabulary size, each naming a token; encode (up to the first
 * NUL) and encode_len on that prefix must agree. */
#include "h3_fuzz.h"

#include "model/h3_tokenizer.h"

static h3_tokenizer *toks[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    h3_fuzz_init();
    const char *dir = h3_fuzz_setting("H3_FUZZ_TOKENIZER", H3_FUZZ_DATA "/models/tiny-h3/tokenizer");
    for (int m = 0; m < 2; m++) {
        h3_tokenizer_options opt = {.mode = m ? H3_TOKENIZER_MODE_TOKENIZERS : H3_TOKENIZER_MODE_TRANSFORMERS};
        h3_status st;
        if (h3_tokenizer_load_with_options(dir, &opt, &toks[m], &st) != H3_OK) {
            fprintf(stderr, "fuzz_tokenizer_encode: %s\n", st.message);
            abort();
        }
    }
    return 0;
}

static void check_ids(const h3_tokenizer *tok, const int32_t *ids, size_t n) {
    int32_t vs = h3_tokenizer_vocab_size(tok);
    for (size_t k = 0; k < n; k++) {
        if (ids[k] < 0 || ids[k] >= vs) abort();
        if (!h3_tokenizer_id_to_token(tok, ids[k])) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int m = 0; m < 2; m++) {
        const h3_tokenizer *tok = toks[m];
        h3_status st;
        int32_t *ids = NULL, *ids2 = NULL;
        size_t n = 0, n2 = 0;
        if (h3_tokenizer_encode_len(tok, (const char *)data, size, &ids, &n, &st) == H3_OK) {
            check_ids(tok, ids, n);
            free(ids);
            ids = NULL;
        } else {
            h3_fuzz_check_status(&st);
        }
        /* The NUL-terminated call over the text up to its first NUL. */
        char *text = g_strndup((const char *)data, size);
        size_t len = strlen(text);
        n = 0;
        h3_status_code a = h3_tokenizer_encode(tok, text, &ids, &n, &st);
        h3_status_code b = h3_tokenizer_encode_len(tok, text, len, &ids2, &n2, &st);
        if (a != b) abort();
        if (a == H3_OK) {
            if (n != n2 || (n && memcmp(ids, ids2, n * sizeof *ids) != 0)) abort();
            check_ids(tok, ids, n);
        }
        free(ids);
        free(ids2);
        g_free(text);
    }
    return 0;
}
