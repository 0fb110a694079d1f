/* test_audio_vae_encoder.c - the audio VAE encoder (Ref2VA reference audio)
 * against the tiny-h3 goldens audio_vae_encode_ref (a reference video's
 * soundtrack and a reference audio clip, both off the hop) and audio_vae
 * (encode of an aligned and an unaligned clip), its Snake1d op against the
 * formula, and its error paths. */
#include <glib.h>
#include <glib/gstdio.h>
#include <stdint.h>

#include "backend/h3_backend.h"
#include "base/h3_safetensors.h"
#include "h3_test.h"
#include "model/h3_audio_vae.h"
#include "model/h3_audio_vae_encoder.h"

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || d != d) m = d;
    }
    return m;
}

/* Snake1d straight from DAC's definition, in double. */
static void test_snake(h3_backend *b) {
    enum { B = 2, C = 3, L = 7 };
    float x[B * C * L], alpha[C] = {1.3f, -0.7f, 0.0f}, want[B * C * L], got[B * C * L];
    for (int i = 0; i < B * C * L; i++) x[i] = (float)((i * 37) % 23) / 5.0f - 2.0f;
    for (int i = 0; i < B * C * L; i++) {
        double a = alpha[(i / L) % C], s = sin(a * x[i]);
        want[i] = (float)(x[i] + s * s / (a + 1e-9));
    }
    size_t mark = h3_arena_mark(b);
    int64_t shape[3] = {B, C, L}, ashape[3] = {1, C, 1};
    h3_tensor tx = h3_new(b, H3_F32, 3, shape), ty = h3_new(b, H3_F32, 3, shape), ta = h3_new(b, H3_F32, 3, ashape);
    h3_tensor_upload_f32(b, &tx, x, NULL);
    h3_tensor_upload_f32(b, &ta, alpha, NULL);
    h3_op_snake(b, &ty, &tx, &ta);
    h3_tensor_download_f32(b, &ty, got, NULL);
    /* alpha 0: sin²(0)/1e-9 = 0 exactly; elsewhere float32 rounding */
    CHECK(max_abs_diff(got, want, B * C * L) < 1e-5, "snake: max |diff| %g", max_abs_diff(got, want, B * C * L));
    h3_op_snake(b, &tx, &tx, &ta); /* in place */
    float again[B * C * L];
    h3_tensor_download_f32(b, &tx, again, NULL);
    CHECK(memcmp(again, got, sizeof got) == 0, "snake in place differs");
    h3_status st = {0};
    CHECK(h3_backend_check(b, &st) == H3_OK, "snake: %s", st.message);
    /* alpha of the wrong width: a shape error, named */
    h3_tensor bad = h3_new(b, H3_F32, 3, (int64_t[]){1, C + 1, 1});
    h3_op_snake(b, &ty, &tx, &bad);
    h3_status_code rc = h3_backend_check(b, &st);
    CHECK(rc != H3_OK && strstr(st.message, "snake"), "snake with 4 alphas for 3 channels: rc %d '%s'", rc, st.message);
    h3_backend_clear_error(b);
    h3_arena_reset(b, mark);
}

/* One case of a golden: input [B, 1, S] -> posterior mean [B, Cl, Na] and,
 * when rows_name is given, the normalized rows [B·Na, Cl]. */
static void golden_case(h3_audio_vae_encoder *enc, const h3_st_file *g, const char *label, const char *input_name,
                        const char *mean_name, const char *rows_name) {
    h3_status st = {0};
    float *x = NULL, *want = NULL, *want_rows = NULL;
    const h3_st_tensor *tx, *tm;
    h3_status_code rc = h3_st_read_f32(g, input_name, &x, &tx, &st);
    if (rc == H3_OK) rc = h3_st_read_f32(g, mean_name, &want, &tm, &st);
    if (rc == H3_OK && rows_name) rc = h3_st_read_f32(g, rows_name, &want_rows, NULL, &st);
    CHECK(rc == H3_OK, "%s: golden tensors: %s", label, st.message);
    if (rc != H3_OK) goto done;
    int B = (int)tx->shape[0];
    int64_t S = tx->shape[2], Na = h3_audio_vae_encoded_length(enc, S), Cl = tm->shape[1];
    CHECK(tx->shape[1] == 1 && tm->shape[0] == B && tm->shape[2] == Na && Cl == 32,
          "%s: golden geometry [%d,1,%lld] -> [%lld,%lld,%lld], want %lld latents", label, B, (long long)S,
          (long long)tm->shape[0], (long long)Cl, (long long)tm->shape[2], (long long)Na);
    if (tm->shape[2] != Na) goto done;
    size_t n = (size_t)(B * Cl * Na);
    float *got = malloc(n * sizeof *got), *rows = malloc(n * sizeof *rows);
    rc = h3_audio_vae_encode(enc, x, B, S, got, NULL, &st);
    CHECK(rc == H3_OK, "%s: encode: %s", label, st.message);
    if (rc == H3_OK) {
        double e = h3_test_rel_l2(got, want, n);
        printf("%s posterior mean [%d,%lld,%lld] from %lld samples: rel L2 %.3g, max |diff| %.3g\n", label, B,
               (long long)Cl, (long long)Na, (long long)S, e, max_abs_diff(got, want, n));
        CHECK(e <= 1e-4, "%s: posterior mean rel L2 %.3g", label, e);
        if (want_rows) {
            h3_audio_vae_normalize_rows(h3_audio_vae_encoder_config(enc), got, B, Na, rows);
            double er = h3_test_rel_l2(rows, want_rows, n);
            printf("%s normalized rows [%lld,%lld]: rel L2 %.3g\n", label, (long long)(B * Na), (long long)Cl, er);
            CHECK(er <= 1e-4, "%s: normalized rows rel L2 %.3g", label, er);
            /* the normalization alone, on the golden's own mean: float32 rounding only */
            h3_audio_vae_normalize_rows(h3_audio_vae_encoder_config(enc), want, B, Na, rows);
            double en = h3_test_rel_l2(rows, want_rows, n);
            CHECK(en <= 1e-6, "%s: normalization of the golden mean: rel L2 %.3g", label, en);
        }
    }
    free(got);
    free(rows);
done:
    free(x), free(want), free(want_rows);
}

static void test_goldens(h3_backend *b) {
    h3_status st = {0};
    h3_audio_vae_encoder *enc = NULL;
    h3_status_code rc = h3_audio_vae_encoder_load(b, h3_test_data("models/tiny-h3/audio_vae"), NULL, &enc, &st);
    CHECK(rc == H3_OK, "load: %s", st.message);
    if (rc != H3_OK) return;
    const h3_audio_vae_config *cfg = h3_audio_vae_encoder_config(enc);
    CHECK(cfg->encoder_dim == 4 && cfg->n_encoder_stages == 3 && cfg->num_attention_heads == 2 && cfg->hop == 40,
          "tiny encoder config: dim %d, %d stages, %d heads, hop %d", cfg->encoder_dim, cfg->n_encoder_stages,
          cfg->num_attention_heads, cfg->hop);
    CHECK(h3_audio_vae_encoded_length(enc, 1467) == 37 && h3_audio_vae_encoded_length(enc, 40) == 1 &&
              h3_audio_vae_encoded_length(enc, 41) == 2,
          "encoded lengths");

    h3_st_file *g = NULL;
    rc = h3_st_open(h3_test_data("goldens/tiny-h3/audio_vae_encode_ref.safetensors"), &g, &st);
    CHECK(rc == H3_OK, "golden: %s", st.message);
    if (rc == H3_OK) {
        golden_case(enc, g, "ref soundtrack", "video.input", "video.posterior_mean", "video.rows_normalized");
        golden_case(enc, g, "ref audio clip", "audio.input", "audio.posterior_mean", "audio.rows_normalized");
        h3_st_close(g);
    }
    rc = h3_st_open(h3_test_data("goldens/tiny-h3/audio_vae.safetensors"), &g, &st);
    CHECK(rc == H3_OK, "golden: %s", st.message);
    if (rc == H3_OK) {
        golden_case(enc, g, "aligned clip", "encode_input", "encode_mean", NULL);
        golden_case(enc, g, "unaligned clip", "encode_unaligned_input", "encode_unaligned_mean", NULL);
        h3_st_close(g);
    }

    /* argument errors and cancellation leave the encoder usable */
    float x[2 * 100] = {0}, mean[2 * 32 * 3];
    rc = h3_audio_vae_encode(enc, x, 2, 0, mean, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "samples"), "0 samples: rc %d '%s'", rc, st.message);
    rc = h3_audio_vae_encode(enc, x, 0, 100, mean, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "channels"), "0 channels: rc %d '%s'", rc, st.message);
    rc = h3_audio_vae_encode(enc, NULL, 2, 100, mean, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT, "NULL samples: rc %d", rc);
    volatile int flag = 1;
    rc = h3_audio_vae_encode(enc, x, 2, 100, mean, &flag, &st);
    CHECK(rc == H3_ERR_CANCELLED, "cancel: rc %d", rc);
    rc = h3_audio_vae_encode(enc, x, 1, 100, mean, NULL, &st); /* mono: one batch item */
    CHECK(rc == H3_OK, "mono encode after errors: %s", st.message);
    h3_audio_vae_encoder_free(enc);
}

/* A config without the encoder's keys, and a checkpoint without a tensor:
 * both refused by name. */
static void test_load_errors(h3_backend *b) {
    h3_status st = {0};
    h3_audio_vae_encoder *enc = (h3_audio_vae_encoder *)1;
    h3_status_code rc = h3_audio_vae_encoder_load(b, "/nonexistent/audio_vae", NULL, &enc, &st);
    CHECK(rc == H3_ERR_NOT_FOUND && enc == NULL, "missing dir: rc %d '%s'", rc, st.message);

    char *dir = g_dir_make_tmp("h3-aenc-XXXXXX", NULL);
    char *src = NULL, *path = g_build_filename(dir, "config.json", NULL);
    gsize len = 0;
    g_file_get_contents(h3_test_data("models/tiny-h3/audio_vae/config.json"), &src, &len, NULL);
    GString *cfg = g_string_new(src);
    char *at = strstr(cfg->str, "\"encoder_rates\"");
    CHECK(at != NULL, "tiny config has encoder_rates");
    if (at) at[1] = 'X'; /* "Xncoder_rates": the key is gone */
    g_file_set_contents(path, cfg->str, -1, NULL);
    h3_checkpoint *ck = NULL;
    rc = h3_checkpoint_open(h3_test_data("models/tiny-h3/audio_vae"), &ck, &st);
    CHECK(rc == H3_OK, "checkpoint: %s", st.message);
    rc = h3_audio_vae_encoder_load(b, dir, ck, &enc, &st);
    CHECK(rc == H3_ERR_FORMAT && enc == NULL && strstr(st.message, "encoder_rates"), "no encoder: rc %d '%s'", rc,
          st.message);
    h3_checkpoint_close(ck);
    CHECK(h3_backend_check(b, NULL) == H3_OK, "load errors poisoned the backend");
    g_unlink(path);
    g_rmdir(dir);
    g_string_free(cfg, TRUE);
    g_free(src), g_free(path), g_free(dir);
}

/* The release's configs, both layouts, describe the same encoder. */
static void test_release_configs(void) {
    h3_status st = {0};
    h3_audio_vae_config d, n;
    h3_status_code rc = h3_audio_vae_config_load(h3_test_data("official/audio_vae"), &d, &st);
    CHECK(rc == H3_OK, "diffusers release config: %s", st.message);
    rc = h3_audio_vae_config_load(h3_test_data("official/FL2VA/audio_vae"), &n, &st);
    CHECK(rc == H3_OK, "native release config: %s", st.message);
    static const int rates[5] = {2, 4, 4, 5, 5};
    for (int k = 0; k < 2; k++) {
        const h3_audio_vae_config *c = k ? &n : &d;
        CHECK(c->encoder_dim == 64 && c->n_encoder_stages == 5 && memcmp(c->encoder_rates, rates, sizeof rates) == 0 &&
                  c->num_attention_heads == 8 && c->latent_dim == 2048,
              "%s release encoder: dim %d, %d stages, %d heads", k ? "native" : "diffusers", c->encoder_dim,
              c->n_encoder_stages, c->num_attention_heads);
    }
}

/* On a measuring backend (the memory plan's twin) the encoder loads and
 * runs through every op with nothing computed, and its arena is measured. */
static void test_measure(void) {
    h3_backend *m = NULL;
    h3_status st = {0};
    h3_status_code rc = h3_backend_cpu_create_measure(&m, &st);
    CHECK(rc == H3_OK, "measuring backend: %s", st.message);
    if (rc != H3_OK) return;
    h3_audio_vae_encoder *enc = NULL;
    rc = h3_audio_vae_encoder_load(m, h3_test_data("models/tiny-h3/audio_vae"), NULL, &enc, &st);
    CHECK(rc == H3_OK, "measured load: %s", st.message);
    if (rc == H3_OK) {
        float x[2 * 1467] = {0}, mean[2 * 32 * 37];
        h3_backend_memory_mark(m);
        rc = h3_audio_vae_encode(enc, x, 2, 1467, mean, NULL, &st);
        h3_backend_memory mem;
        h3_backend_memory_get(m, &mem);
        CHECK(rc == H3_OK && mem.peak_activations > 0, "measured encode: %s (peak activations %llu)", st.message,
              (unsigned long long)mem.peak_activations);
        printf("audio VAE encoder, measured: weights %llu B, peak activations %llu B for 2 x 1467 samples\n",
               (unsigned long long)mem.weights, (unsigned long long)mem.peak_activations);
    }
    h3_audio_vae_encoder_free(enc);
    h3_backend_destroy(m);
}

int main(void) {
    h3_backend *b = NULL;
    h3_status st = {0};
    if (h3_backend_cpu_create(2, &b, &st) != H3_OK) {
        fprintf(stderr, "cpu backend: %s\n", st.message);
        return 1;
    }
    test_snake(b);
    test_release_configs();
    test_load_errors(b);
    test_goldens(b);
    test_measure();
    h3_backend_destroy(b);
    return h3_test_finish("test_audio_vae_encoder");
}
