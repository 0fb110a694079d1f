/* test_tp_text_vae.c - the text conditioner and the tiled video VAE decode
 * over 1..8 CPU ranks: tiny-h3's conditioner (4 query / 2 key-value heads) at
 * TP 1/2 against the golden and TP1, refused at TP4; the "wide" test model's
 * (56 query / 8 key-value heads) at TP 2/4/8 against TP1, refused at TP7;
 * the decode of 15 tiles at TP 1/2/4/7/8 against the golden, bit-identical
 * to TP1. */
#include "h3_test_tp.h"
#include "h3_test_golden.h"
#include "model/h3_video_vae.h"

static char *wide_dir; /* the wide test model, written by main */

/* ---- the text conditioner at TP N ----------------------------------------------------------------- */

typedef struct text_job {
    h3_backend *b[MAX_RANKS];
    h3_text_encoder *te[MAX_RANKS];
    const int32_t *ids;
    int n_ids;
    float *out[MAX_RANKS];
} text_job;

static h3_status_code text_rank(const h3_tp *tp, void *user, h3_status *status) {
    text_job *j = user;
    h3_backend *b = j->b[tp->rank];
    int D = h3_text_encoder_hidden_size(j->te[tp->rank]);
    size_t mark = h3_arena_mark(b);
    h3_tensor out = h3_new_2d(b, H3_F32, j->n_ids, D);
    h3_status_code rc = h3_text_encoder_forward(j->te[tp->rank], j->ids, j->n_ids, &out, status);
    if (rc == H3_OK) rc = h3_tensor_download_f32(b, &out, j->out[tp->rank], status);
    h3_arena_reset(b, mark);
    return rc;
}

/* Rank 0's states (caller frees); NULL if the degree does not split. */
static float *run_text(const char *dir, int tap, int n, const int32_t *ids, int n_ids, h3_status_code want) {
    h3_tp_team *t = make_team(n);
    if (!t) return NULL;
    text_job j;
    memset(&j, 0, sizeof j);
    j.ids = ids;
    j.n_ids = n_ids;
    h3_status st;
    int ok = 1;
    for (int r = 0; r < n && ok; r++) {
        h3_tp tp = team_tp(t, r);
        h3_backend_cpu_create(1, &j.b[r], &st);
        h3_status_code rc = h3_text_encoder_load_tp(j.b[r], dir, tap, &tp, &j.te[r], &st);
        ok = rc == H3_OK;
        if (want != H3_OK) {
            CHECK(rc == want && strstr(st.message, "do not split"), "text tp%d: rc %d %s", n, rc, st.message);
            break;
        }
        CHECK(ok, "text tp%d rank %d load: %s", n, r, st.message);
    }
    float *result = NULL;
    if (ok && want == H3_OK) {
        int D = h3_text_encoder_hidden_size(j.te[0]);
        for (int r = 0; r < n; r++) j.out[r] = calloc((size_t)n_ids * D, sizeof(float));
        ok = h3_tp_team_run(t, text_rank, &j, &st) == H3_OK;
        CHECK(ok, "text tp%d forward: %s", n, st.message);
        for (int r = 1; r < n && ok; r++)
            CHECK(memcmp(j.out[r], j.out[0], (size_t)n_ids * D * sizeof(float)) == 0, "text tp%d: rank %d differs",
                  n, r);
        result = ok ? j.out[0] : NULL;
        for (int r = ok ? 1 : 0; r < n; r++) free(j.out[r]);
    }
    for (int r = 0; r < n; r++) {
        h3_text_encoder_free(j.te[r]);
        if (j.b[r]) h3_backend_destroy(j.b[r]);
    }
    h3_tp_team_destroy(t);
    return result;
}

static void test_text(void) {
    h3_st_file *f;
    h3_status st;
    if (h3_st_open(h3_test_data("goldens/tiny-h3/text_encoder.safetensors"), &f, &st) != H3_OK) {
        CHECK(0, "golden: %s", st.message);
        return;
    }
    int64_t n_ids = 0, n_ref = 0;
    int32_t *ids = golden_i32(f, "t2va.input_ids", &n_ids);
    float *ref = golden_f32(f, "t2va.prompt_embeds", &n_ref);
    float *t1 = NULL;
    for (int n = 1; n <= 2 && ids && ref; n++) {
        float *o = run_text(h3_test_data(TINY "/text_encoder"), 50, n, ids, (int)n_ids, H3_OK);
        if (!o) continue;
        double e = h3_test_rel_l2(o, ref, (size_t)n_ref);
        printf("tiny text encoder (4 q / 2 kv heads) tp%d vs golden: rel L2 %.3e\n", n, e);
        CHECK(e <= 1e-4, "tiny text tp%d vs golden %.3e", n, e);
        if (n == 1) t1 = o;
        else {
            double d = h3_test_rel_l2(o, t1, (size_t)n_ref);
            printf("tiny text encoder tp2 vs tp1: rel L2 %.3e\n", d);
            CHECK(d <= TP_TOLERANCE, "tiny text tp2 vs tp1: %.3e", d);
            free(o);
        }
    }
    run_text(h3_test_data(TINY "/text_encoder"), 50, 4, ids, (int)n_ids, H3_ERR_INVALID_ARGUMENT);
    free(t1);
    /* The wide conditioner: 56 query / 8 key-value heads, 3 layers. */
    char *dir = g_build_filename(wide_dir, "text_encoder", NULL);
    float *w1 = run_text(dir, 3, 1, ids, (int)n_ids, H3_OK);
    int wn[] = {2, 4, 8};
    for (size_t k = 0; k < G_N_ELEMENTS(wn) && w1; k++) {
        float *o = run_text(dir, 3, wn[k], ids, (int)n_ids, H3_OK);
        if (!o) continue;
        double d = h3_test_rel_l2(o, w1, (size_t)n_ids * 32);
        printf("wide text encoder (56 q / 8 kv heads) tp%d vs tp1: rel L2 %.3e\n", wn[k], d);
        CHECK(d <= TP_TOLERANCE, "wide text tp%d vs tp1: %.3e", wn[k], d);
        free(o);
    }
    run_text(dir, 3, 7, ids, (int)n_ids, H3_ERR_INVALID_ARGUMENT); /* 8 kv heads over 7 */
    free(w1);
    g_free(dir);
    free(ids);
    free(ref);
    h3_st_close(f);
}

/* ---- the tiled video VAE decode at TP N ------------------------------------------------------------- */

typedef struct vae_job {
    h3_backend *b[MAX_RANKS];
    h3_video_vae *vae[MAX_RANKS];
    const float *latents;
    float *out[MAX_RANKS];
} vae_job;

static h3_status_code vae_rank(const h3_tp *tp, void *user, h3_status *status) {
    vae_job *j = user;
    return h3_video_vae_decode_f32(j->vae[tp->rank], j->latents, 7, 4, 6, j->out[tp->rank], status);
}

static void test_vae(void) {
    h3_st_file *f;
    h3_status st;
    if (h3_st_open(h3_test_data("goldens/tiny-h3/vae_tiled.safetensors"), &f, &st) != H3_OK) {
        CHECK(0, "golden: %s", st.message);
        return;
    }
    int64_t n_out = 0;
    float *lat = golden_f32(f, "decode_latents_normalized", NULL), *ref = golden_f32(f, "decode_output", &n_out);
    float *first = NULL;
    for (size_t k = 0; k < G_N_ELEMENTS(degrees) && lat && ref; k++) {
        int n = degrees[k];
        h3_tp_team *t = make_team(n);
        if (!t) continue;
        vae_job j;
        memset(&j, 0, sizeof j);
        j.latents = lat;
        int ok = 1;
        for (int r = 0; r < n && ok; r++) {
            h3_tp tp = team_tp(t, r);
            ok = h3_backend_cpu_create(1, &j.b[r], &st) == H3_OK &&
                 h3_video_vae_load(j.b[r], h3_test_data(TINY "/vae"), &j.vae[r], &st) == H3_OK &&
                 h3_video_vae_set_tiling(j.vae[r], 32, 16, &st) == H3_OK;
            if (ok) h3_video_vae_set_tp(j.vae[r], &tp);
            j.out[r] = calloc((size_t)n_out, sizeof(float));
            CHECK(ok, "vae tp%d rank %d: %s", n, r, st.message);
        }
        if (ok) {
            ok = h3_tp_team_run(t, vae_rank, &j, &st) == H3_OK;
            CHECK(ok, "vae tp%d decode: %s", n, st.message);
        }
        if (ok) {
            double e = h3_test_rel_l2(j.out[0], ref, (size_t)n_out);
            int same = !first || memcmp(first, j.out[0], (size_t)n_out * sizeof(float)) == 0;
            printf("video VAE tiled decode (15 tiles) tp%d vs golden: rel L2 %.3e; vs tp1: %s\n", n, e,
                   same ? "bit-identical" : "DIFFERENT");
            CHECK(e < 1e-4 && same, "vae tp%d: rel L2 %.3e, same %d", n, e, same);
            if (!first) first = g_memdup2(j.out[0], (size_t)n_out * sizeof(float));
        }
        for (int r = 0; r < n; r++) {
            free(j.out[r]);
            h3_video_vae_free(j.vae[r]);
            if (j.b[r]) h3_backend_destroy(j.b[r]);
        }
        h3_tp_team_destroy(t);
    }
    g_free(first);
    free(lat);
    free(ref);
    h3_st_close(f);
}

int main(void) {
    wide_dir = wide_model_open();
    test_text();
    test_vae();
    wide_model_remove(wide_dir);
    return h3_test_finish("test_tp_text_vae");
}
