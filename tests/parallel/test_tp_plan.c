/* test_tp_plan.c - the tensor-parallel plan and sharded loading: the degrees
 * the real model splits over (1, 2, 4, 7, 8) and tiny-h3's (1, 2), a clear
 * error for any other, the text conditioner's rank-0 fallback at TP7, the
 * bytes a rank holds; each weight role keeps its rows / columns of a tensor. */
#include "h3_test_tp.h"
#include "model/h3_tp_plan.h"

static void test_plan(void) {
    h3_dit_config real, tiny;
    h3_text_encoder_config text;
    h3_status st;
    if (h3_dit_config_load(h3_test_data("official/transformer"), &real, &st) != H3_OK ||
        h3_dit_config_load(h3_test_data(TINY "/transformer"), &tiny, &st) != H3_OK ||
        h3_text_encoder_config_load(h3_test_data("official/text_encoder"), &text, &st) != H3_OK) {
        CHECK(0, "configs: %s", st.message);
        return;
    }
    int v[16], n = h3_tp_valid_degrees(&real, v, 8);
    CHECK(n == 5 && v[0] == 1 && v[1] == 2 && v[2] == 4 && v[3] == 7 && v[4] == 8, "real model degrees (%d)", n);
    n = h3_tp_valid_degrees(&tiny, v, 8);
    CHECK(n == 2 && v[0] == 1 && v[1] == 2, "tiny model degrees (%d)", n);
    h3_tp_plan p;
    for (int d = 1; d <= 8; d++) {
        h3_status_code rc = h3_tp_plan_make(d, &real, &text, 50, 2, 0, 0, &p, &st);
        int valid = d == 1 || d == 2 || d == 4 || d == 7 || d == 8;
        if (valid) {
            CHECK(rc == H3_OK && p.dit_heads == 56 / d && p.dit_ffn == 14336 / d, "real tp%d: %s", d, st.message);
            int text_split = d != 7;
            CHECK(p.text_size == (text_split ? d : 1) && (text_split ? p.note[0] == 0 : strstr(p.note, "rank 0") != NULL),
                  "real tp%d text plan: size %d note '%s'", d, p.text_size, p.note);
            if (d == 7) printf("plan tp7: %s\n", p.note);
            if (d == 4)
                printf("plan tp4 (real model, bf16): rank 0 holds %.1f GiB of transformer + text weights, rank 1 "
                       "%.1f GiB\n",
                       (double)p.rank_bytes[0] / (1 << 30), (double)p.rank_bytes[1] / (1 << 30));
        } else {
            CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "1, 2, 4, 7 or 8"), "real tp%d: rc %d '%s'", d,
                  rc, st.message);
        }
    }
    CHECK(h3_tp_plan_make(3, &real, &text, 50, 2, 0, 0, &p, &st) == H3_ERR_INVALID_ARGUMENT, "tp3 refused");
    printf("tp3 refused: %s\n", st.message);
    CHECK(h3_tp_plan_make(4, &tiny, NULL, 0, 4, 0, 0, &p, &st) == H3_ERR_INVALID_ARGUMENT &&
              strstr(st.message, "1 or 2 ranks"),
          "tiny tp4: %s", st.message);
    /* TP4 holds a quarter of the sharded weights. */
    h3_tp_plan p1, p4;
    h3_tp_plan_make(1, &real, NULL, 0, 2, 0, 0, &p1, &st);
    h3_tp_plan_make(4, &real, NULL, 0, 2, 0, 0, &p4, &st);
    double ratio = (double)p4.rank_bytes[0] / (double)p1.rank_bytes[0];
    printf("plan: transformer bytes per rank tp1 %.2f GiB, tp4 %.2f GiB (ratio %.3f)\n",
           (double)p1.rank_bytes[0] / (1 << 30), (double)p4.rank_bytes[0] / (1 << 30), ratio);
    CHECK(ratio > 0.25 && ratio < 0.3, "tp4 transformer share %.3f", ratio);
}

/* Each role keeps the right rows / columns of a [12, 6] tensor of ids. */
static void test_sharded_load(void) {
    h3_backend *b;
    h3_status st;
    h3_backend_cpu_create(1, &b, &st);
    float data[12 * 6];
    for (int i = 0; i < 72; i++) data[i] = (float)i;
    h3_st_tensor src = {.name = "w", .dtype = H3_ST_F32, .ndim = 2, .shape = {12, 6}, .numel = 72, .data = data,
                        .nbytes = sizeof data, .file_path = "test"};
    struct { h3_tp_role role; int size, rank; int64_t rows, cols; int ok; } cases[] = {
        {H3_TP_QKV, 2, 1, 6, 6, 1},  {H3_TP_QKV, 4, 3, 3, 6, 1},  {H3_TP_HEADS, 3, 2, 4, 6, 1},
        {H3_TP_GATHER, 4, 1, 3, 6, 1}, {H3_TP_FFN_IN, 3, 1, 4, 6, 1}, {H3_TP_OUT, 3, 2, 12, 2, 1},
        {H3_TP_FFN_OUT, 2, 0, 12, 3, 1}, {H3_TP_QKV, 8, 0, 0, 0, 0}, {H3_TP_OUT, 4, 0, 0, 0, 0},
        {H3_TP_REPLICATED, 4, 2, 12, 6, 1},
    };
    for (size_t c = 0; c < G_N_ELEMENTS(cases); c++) {
        h3_tp tp = {cases[c].rank, cases[c].size, NULL};
        h3_tensor t = {0};
        h3_status_code rc = h3_tp_weight_load(b, &tp, &src, cases[c].role, H3_WEIGHT_F32, &t, &st);
        if (!cases[c].ok) {
            CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "do not split over"), "case %zu: %s", c,
                  st.message);
            continue;
        }
        CHECK(rc == H3_OK && t.shape[0] == cases[c].rows && t.shape[1] == cases[c].cols, "case %zu: %s", c,
              st.message);
        if (rc != H3_OK) continue;
        float got[72];
        h3_tensor_download_f32(b, &t, got, &st);
        int ok = 1, parts = cases[c].role == H3_TP_QKV ? 3 : cases[c].role == H3_TP_FFN_IN ? 2 : 1;
        for (int64_t r = 0; r < t.shape[0]; r++)
            for (int64_t k = 0; k < t.shape[1]; k++) {
                int64_t src_row = r, src_col = k;
                if (cases[c].role == H3_TP_OUT || cases[c].role == H3_TP_FFN_OUT) {
                    src_col = cases[c].rank * t.shape[1] + k;
                } else if (cases[c].role != H3_TP_REPLICATED) {
                    int64_t local = t.shape[0] / parts, part = r / local;
                    src_row = part * (12 / parts) + cases[c].rank * local + r % local;
                }
                ok &= got[r * t.shape[1] + k] == data[src_row * 6 + src_col];
            }
        CHECK(ok, "case %zu (%s over %d ranks, rank %d): wrong slice", c, h3_tp_role_name(cases[c].role),
              cases[c].size, cases[c].rank);
        h3_weight_free(b, &t);
    }
    h3_backend_destroy(b);
}

int main(void) {
    test_plan();
    test_sharded_load();
    return h3_test_finish("test_tp_plan");
}
