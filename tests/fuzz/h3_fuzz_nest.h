/* h3_fuzz_nest.h - a custom mutator for the harnesses whose inputs hold
 * JSON (included once, by their .c file, after h3_fuzz.h).
 *
 * Issue 31: 100,000 levels of [ (200 KB) overflowed json-glib's recursion
 * in every JSON reader, and months of fuzzing never built such an input.
 * libFuzzer's mutations change a few bytes at a time (a dictionary word is
 * at most 64 bytes), -max_len defaults to the largest seed, and one more
 * level of nesting reaches no new edge (the same parse functions recurse),
 * so a deeper input is never kept in the corpus to be deepened further.
 * So one mutation in 16 here inserts a whole run: 257 (one past
 * H3_JSON_MAX_DEPTH), 1,000, 20,000 or 100,000 copies of "[" or "{\"a\":"
 * or "[{\"k\":" at a random place, as much as fits in max_size (run with
 * -max_len=262144 to let the longest run in). An 8-byte little-endian
 * length in front that covers the insertion point (a safetensors header's)
 * grows with it, so the header still parses up to the nesting. The other
 * 15 in 16 are libFuzzer's own mutations. */
#ifndef H3_FUZZ_NEST_H
#define H3_FUZZ_NEST_H

#include "h3_fuzz.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

static inline uint32_t h3_fuzz_nest_next(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* Adds n to the leading 8-byte length when it names a header that ends at
 * or after `at` (and fits the input), as a safetensors file's does. */
static inline void h3_fuzz_nest_fix_length(uint8_t *data, size_t size, size_t at, size_t n) {
    if (size < 8 || at < 8) return;
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--) len = (len << 8) | data[i];
    if (len > size - 8 || at > 8 + len) return;
    len += n;
    for (int i = 0; i < 8; i++) data[i] = (uint8_t)(len >> (8 * i));
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    uint32_t s = seed | 1u;
    if (h3_fuzz_nest_next(&s) % 16 != 0 || size >= max_size) return LLVMFuzzerMutate(data, size, max_size);
    static const char *const units[] = {"[", "{\"a\":", "[{\"k\":"};
    static const size_t counts[] = {257, 1000, 20000, 100000};
    const char *unit = units[h3_fuzz_nest_next(&s) % 3];
    size_t ulen = strlen(unit), count = counts[h3_fuzz_nest_next(&s) % 4];
    size_t room = (max_size - size) / ulen;
    if (count > room) count = room;
    if (count == 0) return LLVMFuzzerMutate(data, size, max_size);
    size_t at = size ? h3_fuzz_nest_next(&s) % (size + 1) : 0, n = count * ulen;
    h3_fuzz_nest_fix_length(data, size, at, n);
    memmove(data + at + n, data + at, size - at);
    for (size_t i = 0; i < count; i++) memcpy(data + at + i * ulen, unit, ulen);
    return size + n;
}

#endif
