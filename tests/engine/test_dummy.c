/* test_dummy.c - the dummy load format (h3_engine_options.load_format =
 * H3_LOAD_DUMMY): weights drawn on the backend from (seed, tensor name)
 * instead of read from files.
 *
 *   the pieces     a dummy checkpoint (names, shapes, no bytes), the
 *                  backend's fill, and tensor-parallel shards that hold the
 *                  very values of the whole tensor, for every weight role
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h3_test.h"

#include "backend/h3_backend.h"
#include "base/h3_random.h"
#include "base/h3_safetensors.h"
#include "parallel/h3_tp.h"

/* ---- the pieces ---------------------------------------------------------------------- */

static void test_checkpoint(void) {
    h3_status st;
    h3_checkpoint *c;
    CHECK(h3_checkpoint_dummy_new("test (dummy)", 7, &c, &st) == H3_OK, "%s", st.message);
    CHECK(h3_checkpoint_dummy_add(c, "w", H3_ST_BF16, 2, (int64_t[]){6, 4}, -1.0f, 1.0f, &st) == H3_OK, "%s",
          st.message);
    CHECK(h3_checkpoint_dummy_add(c, "b", H3_ST_F32, 1, (int64_t[]){6}, 0.5f, 0.5f, &st) == H3_OK, "%s", st.message);
    static const float taps[3] = {0.25f, 0.5f, 0.25f};
    CHECK(h3_checkpoint_dummy_add_data(c, "f", H3_ST_F32, 1, (int64_t[]){3}, taps, &st) == H3_OK, "%s", st.message);
    CHECK(h3_checkpoint_dummy_add(c, "w", H3_ST_BF16, 1, (int64_t[]){1}, 0, 1, &st) == H3_ERR_INVALID_ARGUMENT,
          "a second 'w' is refused");
    CHECK(h3_checkpoint_dummy_add(c, "i", H3_ST_I32, 1, (int64_t[]){1}, 0, 1, &st) == H3_ERR_INVALID_ARGUMENT,
          "an integer dummy tensor is refused");
    CHECK(h3_checkpoint_count(c) == 3 && h3_checkpoint_nbytes(c) == 6 * 4 * 2 + 6 * 4 + 3 * 4, "count %zu, %llu bytes",
          h3_checkpoint_count(c), (unsigned long long)h3_checkpoint_nbytes(c));
    const h3_st_tensor *t;
    CHECK(h3_checkpoint_get(c, "w", 2, (int64_t[]){6, 4}, &t, &st) == H3_OK && h3_st_is_dummy(t), "%s", st.message);
    CHECK(h3_checkpoint_get(c, "w", 2, (int64_t[]){4, 6}, &t, &st) == H3_ERR_FORMAT && strstr(st.message, "'w'"),
          "a wrong shape names the tensor: %s", st.message);
    CHECK(h3_checkpoint_get(c, "x", 1, NULL, &t, &st) == H3_ERR_NOT_FOUND && strstr(st.message, "test (dummy)"),
          "a missing tensor names the checkpoint: %s", st.message);
    const h3_st_tensor *f = h3_checkpoint_find(c, "f");
    float host[6];
    CHECK(f && !h3_st_is_dummy(f) && h3_st_to_f32(f, host, 3, &st) == H3_OK && host[1] == 0.5f, "constant data");
    t = h3_checkpoint_find(c, "w");
    CHECK(h3_st_to_f32(t, host, 6, &st) == H3_ERR_UNSUPPORTED && strstr(st.message, "dummy"),
          "a dummy tensor has no host values: %s", st.message);
    h3_checkpoint *d;
    h3_checkpoint_dummy_new("other seed", 8, &d, &st);
    h3_checkpoint_dummy_add(d, "w", H3_ST_BF16, 2, (int64_t[]){6, 4}, -1.0f, 1.0f, &st);
    CHECK(h3_checkpoint_find(d, "w")->random.key != t->random.key &&
              h3_checkpoint_find(c, "b")->random.key != t->random.key,
          "keys differ by seed and by name");
    h3_checkpoint_close(d);
    h3_checkpoint_close(c);
}

/* The whole tensor, drawn on one rank. */
static float *load_whole(h3_backend *b, const h3_st_tensor *t) {
    h3_tensor w;
    h3_status st;
    float *host = calloc((size_t)t->numel, sizeof *host);
    CHECK(h3_weight_load(b, t, H3_WEIGHT_DEFAULT, &w, &st) == H3_OK, "%s", st.message);
    CHECK(h3_tensor_download_f32(b, &w, host, &st) == H3_OK, "%s", st.message);
    h3_weight_free(b, &w);
    return host;
}

static void test_fill(h3_backend *b) {
    h3_status st;
    h3_checkpoint *c;
    h3_checkpoint_dummy_new("fill", 3, &c, &st);
    h3_checkpoint_dummy_add(c, "w", H3_ST_BF16, 2, (int64_t[]){12, 8}, -0.5f, 0.25f, &st);
    h3_checkpoint_dummy_add(c, "one", H3_ST_F32, 1, (int64_t[]){5}, 1.0f, 1.0f, &st);
    const h3_st_tensor *t = h3_checkpoint_find(c, "w");
    float *w = load_whole(b, t);
    int exact = 1, in_range = 1, distinct = 0;
    for (int64_t i = 0; i < t->numel; i++) {
        float want = h3_bf16_to_f32(h3_f32_to_bf16(h3_counter_uniform(t->random.key, (uint64_t)i, -0.5f, 0.25f)));
        exact &= w[i] == want;
        in_range &= w[i] >= -0.5f && w[i] <= 0.25f;
        distinct += i > 0 && w[i] != w[i - 1];
    }
    CHECK(exact, "the backend draws h3_counter_uniform rounded to bf16");
    CHECK(in_range && distinct > 80, "values in range and not constant (%d changes)", distinct);
    float *one = load_whole(b, h3_checkpoint_find(c, "one"));
    CHECK(one[0] == 1.0f && one[4] == 1.0f, "lo == hi is a constant");
    free(one);
    free(w);
    h3_checkpoint_close(c);
}

/* Each role's shards over 2 and 4 ranks, side by side, are the whole
 * tensor's values at the rows and columns a file's shard would take. */
static void test_shards(h3_backend *b) {
    h3_status st;
    h3_checkpoint *c;
    h3_checkpoint_dummy_new("shards", 11, &c, &st);
    const int64_t R = 24, C = 8;
    h3_checkpoint_dummy_add(c, "m", H3_ST_BF16, 2, (int64_t[]){R, C}, -1.0f, 1.0f, &st);
    h3_checkpoint_dummy_add(c, "v", H3_ST_F32, 1, (int64_t[]){R}, -1.0f, 1.0f, &st);
    const h3_tp_role roles[] = {H3_TP_QKV, H3_TP_HEADS, H3_TP_OUT, H3_TP_FFN_IN, H3_TP_FFN_OUT, H3_TP_GATHER};
    const int parts_of[] = {3, 1, 0, 2, 0, 1};
    for (int vec = 0; vec < 2; vec++) {
        const h3_st_tensor *t = h3_checkpoint_find(c, vec ? "v" : "m");
        int64_t cols = vec ? 1 : C;
        float *whole = load_whole(b, t);
        for (size_t k = 0; k < G_N_ELEMENTS(roles); k++) {
            if (vec && parts_of[k] == 0) continue; /* row-parallel roles are for matrices */
            for (int size = 2; size <= 4; size += 2) {
                int same = 1;
                for (int rank = 0; rank < size; rank++) {
                    h3_tp tp = {rank, size, NULL};
                    h3_tensor s;
                    if (h3_tp_weight_load(b, &tp, t, roles[k], H3_WEIGHT_DEFAULT, &s, &st) != H3_OK) {
                        CHECK(0, "%s over %d: %s", h3_tp_role_name(roles[k]), size, st.message);
                        continue;
                    }
                    int64_t n = h3_tensor_numel(&s);
                    float *got = malloc((size_t)n * sizeof *got);
                    h3_tensor_download_f32(b, &s, got, &st);
                    int parts = parts_of[k];
                    if (parts == 0) {
                        int64_t Cl = C / size;
                        for (int64_t r = 0; r < R; r++)
                            for (int64_t j = 0; j < Cl; j++) same &= got[r * Cl + j] == whole[r * C + rank * Cl + j];
                    } else {
                        int64_t part_rows = R / parts, local = part_rows / size;
                        for (int p = 0; p < parts; p++)
                            for (int64_t r = 0; r < local; r++)
                                for (int64_t j = 0; j < cols; j++)
                                    same &= got[(p * local + r) * cols + j] ==
                                            whole[(p * part_rows + rank * local + r) * cols + j];
                    }
                    free(got);
                    h3_weight_free(b, &s);
                }
                CHECK(same, "%s '%s' over %d ranks: the shards hold the whole tensor's values",
                      h3_tp_role_name(roles[k]), t->name, size);
            }
        }
        free(whole);
    }
    /* a view of rows of a dummy tensor, then sharded: the values of those rows */
    const h3_st_tensor *m = h3_checkpoint_find(c, "m");
    h3_st_tensor rows = h3_st_rows(m, 6, 12);
    float *whole = load_whole(b, m), *part = load_whole(b, &rows);
    CHECK(memcmp(part, whole + 6 * C, 12 * C * sizeof(float)) == 0, "h3_st_rows of a dummy tensor");
    free(whole);
    free(part);
    h3_checkpoint_close(c);
}

int main(void) {
    h3_backend *b;
    h3_status st;
    if (h3_backend_cpu_create(2, &b, &st) != H3_OK) {
        fprintf(stderr, "cpu backend: %s\n", st.message);
        return 1;
    }
    test_checkpoint();
    test_fill(b);
    test_shards(b);
    h3_backend_destroy(b);
    return h3_test_finish("test_dummy");
}
