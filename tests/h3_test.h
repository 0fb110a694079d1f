/* h3_test.h - a tiny test harness: CHECK macros, golden paths, relative L2.
 * Each test program ends with h3_test_finish(), which prints the plain
 * "N passed, N failed" line and returns the exit status. */
#ifndef H3_TEST_H
#define H3_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int h3_test_passed, h3_test_failed;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (cond) {                                                          \
            h3_test_passed++;                                                \
        } else {                                                             \
            h3_test_failed++;                                                \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
        }                                                                    \
    } while (0)

/* Path of a file under tests/data (H3_TEST_DATA is set by meson). */
static inline const char *h3_test_data(const char *rel) {
    static char buf[8][4096];
    static int slot;
    const char *root = getenv("H3_TEST_DATA");
    if (!root) root = "tests/data";
    char *p = buf[slot++ % 8];
    snprintf(p, 4096, "%s/%s", root, rel);
    return p;
}

/* Relative L2 error ||a - b|| / ||b|| in double precision. */
static inline double h3_test_rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Cosine similarity of a and b in double precision (1 when both are zero). */
static inline double h3_test_cosine(const float *a, const float *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : (aa == bb ? 1 : 0);
}

static inline int h3_test_finish(const char *name) {
    printf("%s: %d passed, %d failed\n", name, h3_test_passed, h3_test_failed);
    return h3_test_failed ? 1 : 0;
}

#endif
