/* test_video_vae_encoder.c - the video VAE encoder against the tiny-h3
 * goldens on the CPU backend: one frame (vae_encode_image: posterior mean,
 * logvar, the keyframe condition), 22 frames over two clips
 * (vae_encode_video), the FL2VA keyframe of the end-to-end golden and the
 * order of its condition noise; spatial tiling against the tiles stitched
 * on the host; the tiles over 2-4 tensor-parallel CPU ranks; the encoder's tensor list against the release's index, in
 * both layouts; the measuring backend at the release's size; and the
 * error paths (no encoder, bad sizes, a missing encoder tensor). */
#include <glib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/h3_backend.h"
#include "base/h3_random.h"
#include "base/h3_safetensors.h"
#include "h3_test.h"
#include "h3_test_golden.h"
#include "model/h3_dit_layout.h"
#include "model/h3_video_vae.h"
#include "model/h3_video_vae_encoder.h"
#include "parallel/h3_comm.h"
#include "parallel/h3_tp.h"

#define TINY_VAE "models/tiny-h3/vae"

static const h3_video_vae_options with_encoder = {.encoder = 1};

/* A golden video_uint8 [1, 3, F, H, W] (planar) as packed RGB frames. */
static uint8_t *golden_frames(h3_st_file *f, const char *name, int *F, int *H, int *W) {
    const h3_st_tensor *t = h3_st_find(f, name);
    if (!t || t->dtype != H3_ST_U8 || t->ndim != 5) return NULL;
    *F = (int)t->shape[2], *H = (int)t->shape[3], *W = (int)t->shape[4];
    size_t plane = (size_t)*H * *W, n = plane * *F;
    const uint8_t *src = t->data;
    uint8_t *rgb = malloc(n * 3);
    for (size_t c = 0; c < 3; c++)
        for (size_t i = 0; i < n; i++) rgb[i * 3 + c] = src[c * n + i];
    return rgb;
}

static h3_video_vae *load_tiny(h3_backend *b, const h3_video_vae_options *opts) {
    h3_video_vae *vae = NULL;
    h3_status st;
    h3_status_code rc = h3_video_vae_load_with(b, h3_test_data(TINY_VAE), NULL, opts, &vae, &st);
    CHECK(rc == H3_OK, "load tiny VAE: %s", st.message);
    return vae;
}

static void check_close(const char *what, const float *got, const float *want, size_t n, double tol) {
    double e = want ? h3_test_rel_l2(got, want, n) : 1;
    CHECK(e <= tol, "%s: rel-L2 %.3g > %.0e", what, e, tol);
    printf("  %-34s rel-L2 %.3g\n", what, e);
}

/* ---- goldens ---------------------------------------------------------------------- */

static void test_encode_image(h3_video_vae *vae) {
    h3_st_file *f = golden_tiny("vae_encode_image");
    if (!f) { CHECK(0, "vae_encode_image golden"); return; }
    int F, H, W;
    uint8_t *rgb = golden_frames(f, "image_uint8", &F, &H, &W);
    int64_t n = 0;
    float *want_mean = golden_f32(f, "posterior_mean", &n), *want_logvar = golden_f32(f, "posterior_logvar", NULL);
    float *want_cond = golden_f32(f, "condition_latents", NULL);
    CHECK(rgb && F == 1 && n == 24 * (H / 16) * (W / 16), "image golden geometry");
    float *mean = calloc((size_t)n, sizeof(float)), *logvar = calloc((size_t)n, sizeof(float));
    float *cond = calloc((size_t)n, sizeof(float));
    h3_video_vae_frames in = {.rgb = rgb, .frames = 1, .width = W, .height = H};
    h3_status st;
    CHECK(h3_video_vae_encoded_frames(vae, 1) == 1, "1 frame -> 1 latent");
    CHECK(h3_video_vae_encode(vae, &in, mean, logvar, &st) == H3_OK, "encode image: %s", st.message);
    check_close("vae_encode_image posterior_mean", mean, want_mean, (size_t)n, 1e-4);
    check_close("vae_encode_image posterior_logvar", logvar, want_logvar, (size_t)n, 1e-4);
    CHECK(h3_video_vae_encode_keyframe(vae, rgb, W, H, 0, NULL, cond, &st) == H3_OK, "keyframe: %s", st.message);
    check_close("vae_encode_image condition_latents", cond, want_cond, (size_t)n, 1e-4);
    /* the same draw through an explicit generator seeded 42 */
    h3_torch_generator g;
    h3_torch_generator_seed(&g, 42);
    float *cond2 = calloc((size_t)n, sizeof(float));
    CHECK(h3_video_vae_encode_keyframe(vae, rgb, W, H, 3 * (size_t)W, &g, cond2, &st) == H3_OK, "keyframe gen: %s",
          st.message);
    CHECK(memcmp(cond, cond2, (size_t)n * sizeof(float)) == 0, "explicit seed-42 generator = the default");
    free(cond2);
    free(rgb), free(mean), free(logvar), free(cond), free(want_mean), free(want_logvar), free(want_cond);
    h3_st_close(f);
}

static void test_encode_video(h3_video_vae *vae) {
    h3_st_file *f = golden_tiny("vae_encode_video");
    if (!f) { CHECK(0, "vae_encode_video golden"); return; }
    int F, H, W;
    uint8_t *rgb = golden_frames(f, "video_uint8", &F, &H, &W);
    int64_t n = 0;
    float *want_mean = golden_f32(f, "posterior_mean", &n), *want_logvar = golden_f32(f, "posterior_logvar", NULL);
    int T = h3_video_vae_encoded_frames(vae, F);
    CHECK(rgb && F == 22 && T == 7 && n == 24 * T * (H / 16) * (W / 16), "video golden geometry (T %d)", T);
    float *mean = calloc((size_t)n, sizeof(float)), *logvar = calloc((size_t)n, sizeof(float));
    h3_video_vae_frames in = {.rgb = rgb, .frames = F, .width = W, .height = H};
    h3_status st;
    CHECK(h3_video_vae_encode(vae, &in, mean, logvar, &st) == H3_OK, "encode video: %s", st.message);
    check_close("vae_encode_video posterior_mean", mean, want_mean, (size_t)n, 1e-4);
    check_close("vae_encode_video posterior_logvar", logvar, want_logvar, (size_t)n, 1e-4);
    free(rgb), free(mean), free(logvar), free(want_mean), free(want_logvar);
    h3_st_close(f);
}

/* e2e_fl2va_3steps: the keyframe (already resized to the canvas) gives the
 * golden's condition_latents; the pipeline's generator (the request's seed)
 * draws the condition noise first, then the video noise, then the audio;
 * the condition rows mix the condition with its noise at t = 0.999. */
static void test_e2e_keyframe(h3_video_vae *vae) {
    h3_st_file *f = golden_tiny("e2e_fl2va_3steps");
    if (!f) { CHECK(0, "e2e_fl2va_3steps golden"); return; }
    const h3_st_tensor *t = h3_st_find(f, "keyframe.resized_uint8");
    int64_t n = 0, nv = 0, na = 0;
    float *want = golden_f32(f, "condition_latents", &n), *noise_c = golden_f32(f, "noise.condition", NULL);
    float *noise_v = golden_f32(f, "noise.video", &nv), *noise_a = golden_f32(f, "noise.audio_rows", &na);
    CHECK(t && t->dtype == H3_ST_U8 && t->ndim == 3 && want && noise_c && noise_v && noise_a, "e2e golden tensors");
    if (!t || !want || !noise_c || !noise_v || !noise_a) goto out;
    int H = (int)t->shape[0], W = (int)t->shape[1];
    float *cond = calloc((size_t)n, sizeof(float));
    h3_status st;
    CHECK(h3_video_vae_encode_keyframe(vae, t->data, W, H, 0, NULL, cond, &st) == H3_OK, "e2e keyframe: %s",
          st.message);
    check_close("e2e_fl2va condition_latents", cond, want, (size_t)n, 1e-4);
    h3_torch_generator g;
    h3_torch_generator_seed(&g, 42);
    float *c = malloc((size_t)n * sizeof(float)), *v = malloc((size_t)nv * sizeof(float));
    float *a = malloc((size_t)na * sizeof(float));
    h3_torch_randn_f32(&g, c, (size_t)n);
    h3_torch_randn_f32(&g, v, (size_t)nv);
    h3_torch_randn_f32(&g, a, (size_t)na);
    CHECK(memcmp(c, noise_c, (size_t)n * 4) == 0, "noise.condition = the first draw of the seed-42 generator");
    CHECK(memcmp(v, noise_v, (size_t)nv * 4) == 0, "noise.video = the second draw of the same generator");
    CHECK(memcmp(a, noise_a, (size_t)na * 4) == 0, "noise.audio_rows = the third draw of the same generator");
    /* the condition rows: 0.999·z + (1 − 0.999)·ε in float32 (scale_noise to t = 0.999), patchified 2x2 */
    float *rows = golden_f32(f, "condition_rows", NULL), *mix = malloc((size_t)n * sizeof(float));
    float *prow = malloc((size_t)n * sizeof(float));
    for (int64_t k = 0; k < n; k++) mix[k] = 0.999f * cond[k] + (1.0f - 0.999f) * noise_c[k];
    CHECK(rows && h3_dit_patchify_video(mix, 24, 1, H / 16, W / 16, 2, 2, prow, &st) == H3_OK &&
              memcmp(prow, rows, (size_t)n * sizeof(float)) == 0,
          "condition_rows = patchify(0.999 z + (1 - 0.999) eps), bit for bit");
    free(rows), free(mix), free(prow);
    free(c), free(v), free(a), free(cond);
out:
    free(want), free(noise_c), free(noise_v), free(noise_a);
    h3_st_close(f);
}

/* ---- spatial tiling ------------------------------------------------------------------
 * A tiled encode is diffusers' _stitch_tiles over the tiles encoded alone:
 * each tile is the encode of its crop, and the host stitches those with
 * the reference's blend order (vertical blend with the raw tile above, then
 * horizontal with the raw tile to the left, then the crop). 96x128 pixels
 * in 64-px tiles with 16-px minimum overlaps: rows at 0/32 (overlap 32),
 * columns at 0/32/64 (overlaps 32, 32): latent overlaps of 2. */
typedef struct lat_tile {
    float *m; /* [C2, h, w] mean then logvar */
} lat_tile;

/* D _blend(a, b, e, dim) into b (planar [C2, h, w], dim 1 rows, 2 columns). */
static void host_blend(const float *a, float *b, int C2, int h, int w, int e, int dim) {
    for (int c = 0; c < C2; c++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int k = dim == 1 ? y : x;
                if (k >= e) continue;
                float wx = (float)k / (float)e, wa = 1.0f - wx;
                int ay = dim == 1 ? h - e + y : y, ax = dim == 2 ? w - e + x : x;
                float *pb = &b[((size_t)c * h + y) * w + x];
                *pb = a[((size_t)c * h + ay) * w + ax] * wa + *pb * wx;
            }
}

static void test_tiled(h3_video_vae *vae) {
    enum { H = 96, W = 128, TILE = 64, OV = 16, C2 = 48, R = 16 };
    uint8_t *rgb = malloc((size_t)H * W * 3);
    uint32_t s = 12345;
    for (size_t i = 0; i < (size_t)H * W * 3; i++) s = s * 1664525u + 1013904223u, rgb[i] = (uint8_t)(s >> 24);
    h3_status st;
    int ys[8], yo[8], xs[8], xo[8], th = 0, tw = 0;
    int ny = h3_video_vae_split_tiles(H, TILE, OV, R, ys, yo, 8, &th), nx = h3_video_vae_split_tiles(W, TILE, OV, R, xs, xo, 8, &tw);
    CHECK(ny == 2 && nx == 3 && yo[0] == 32 && xo[0] == 32 && xo[1] == 32, "tile layout %d x %d", ny, nx);
    int lh = th / R, lw = tw / R, Hl = H / R, Wl = W / R;
    lat_tile t[2][3];
    for (int i = 0; i < ny; i++)
        for (int j = 0; j < nx; j++) { /* each tile alone: its crop, which fits one tile */
            t[i][j].m = calloc((size_t)C2 * lh * lw, sizeof(float));
            h3_video_vae_frames crop = {.rgb = rgb + ((size_t)ys[i] * W + xs[j]) * 3, .frames = 1, .width = tw,
                                        .height = th, .stride = (size_t)W * 3};
            CHECK(h3_video_vae_encode(vae, &crop, t[i][j].m, t[i][j].m + (size_t)24 * lh * lw, &st) == H3_OK,
                  "tile %d,%d: %s", i, j, st.message);
        }
    float *want = calloc((size_t)C2 * Hl * Wl, sizeof(float)), *tmp = malloc((size_t)C2 * lh * lw * sizeof(float));
    for (int i = 0; i < ny; i++)
        for (int j = 0; j < nx; j++) {
            memcpy(tmp, t[i][j].m, (size_t)C2 * lh * lw * sizeof(float));
            if (i > 0) host_blend(t[i - 1][j].m, tmp, C2, lh, lw, yo[i - 1] / R, 1);
            if (j > 0) host_blend(t[i][j - 1].m, tmp, C2, lh, lw, xo[j - 1] / R, 2);
            int oh = i < ny - 1 ? lh - yo[i] / R : lh, ow = j < nx - 1 ? lw - xo[j] / R : lw;
            for (int c = 0; c < C2; c++)
                for (int y = 0; y < oh; y++)
                    memcpy(want + ((size_t)c * Hl + ys[i] / R + y) * Wl + xs[j] / R, tmp + ((size_t)c * lh + y) * lw,
                           (size_t)ow * sizeof(float));
        }
    for (size_t i = (size_t)24 * Hl * Wl; i < (size_t)C2 * Hl * Wl; i++) /* the encode clamps the logvar */
        want[i] = want[i] < -30 ? -30 : want[i] > 20 ? 20 : want[i];
    float *got = calloc((size_t)C2 * Hl * Wl, sizeof(float));
    CHECK(h3_video_vae_set_tiling(vae, TILE, OV, &st) == H3_OK, "tiling: %s", st.message);
    h3_video_vae_frames in = {.rgb = rgb, .frames = 1, .width = W, .height = H};
    CHECK(h3_video_vae_encode(vae, &in, got, got + (size_t)24 * Hl * Wl, &st) == H3_OK, "tiled: %s", st.message);
    check_close("tiled 96x128 vs tiles stitched", got, want, (size_t)C2 * Hl * Wl, 1e-6);
    CHECK(h3_video_vae_set_tiling(vae, 256, 64, &st) == H3_OK, "reset tiling");
    for (int i = 0; i < ny; i++)
        for (int j = 0; j < nx; j++) free(t[i][j].m);
    free(rgb), free(want), free(tmp), free(got);
}

/* The native FL2VA layout names the same encoder (original names:
 * down.{l}.block.{j}, nin_shortcut, down.{l}.downsample.conv). */
typedef struct walk_names {
    GPtrArray *names;
} walk_names;

static h3_status_code collect(void *opaque, const h3_video_vae_tensor *t, h3_status *status) {
    (void)status;
    walk_names *w = opaque;
    g_ptr_array_add(w->names, g_strdup(t->name));
    return H3_OK;
}

static char *to_diffusers(const char *native) {
    int l, j, n = 0;
    char rest[128];
    if (sscanf(native, "encoder.down.%d.block.%d.%127s%n", &l, &j, rest, &n) == 3) {
        if (g_str_has_prefix(rest, "nin_shortcut.")) return g_strdup_printf("encoder.down_blocks.%d.resnets.%d.conv_shortcut.%s", l, j, rest + 13);
        return g_strdup_printf("encoder.down_blocks.%d.resnets.%d.%s", l, j, rest);
    }
    if (sscanf(native, "encoder.down.%d.downsample.conv.%127s", &l, rest) == 2)
        return g_strdup_printf("encoder.down_blocks.%d.downsamplers.0.conv.%s", l, rest);
    return g_strdup(native);
}

static void test_native_names(void) {
    walk_names a = {g_ptr_array_new_with_free_func(g_free)}, b = {g_ptr_array_new_with_free_func(g_free)};
    h3_status st;
    CHECK(h3_video_vae_encoder_tensors(h3_test_data("official/vae"), collect, &a, &st) == H3_OK, "%s", st.message);
    CHECK(h3_video_vae_encoder_tensors(h3_test_data("official/FL2VA/video_vae"), collect, &b, &st) == H3_OK,
          "native walk: %s", st.message);
    int same = a.names->len == b.names->len && a.names->len > 0;
    for (guint i = 0; same && i < a.names->len; i++) {
        char *d = to_diffusers(g_ptr_array_index(b.names, i));
        same = strcmp(d, g_ptr_array_index(a.names, i)) == 0;
        if (!same) fprintf(stderr, "native %s -> %s, diffusers %s\n", (char *)g_ptr_array_index(b.names, i), d,
                           (char *)g_ptr_array_index(a.names, i));
        g_free(d);
    }
    CHECK(same, "native and diffusers encoder walks agree (%u / %u tensors)", a.names->len, b.names->len);
    g_ptr_array_free(a.names, TRUE);
    g_ptr_array_free(b.names, TRUE);
}

/* ---- tensor parallelism: the tiles over CPU ranks, every rank with the whole result ---- */

typedef struct tp_job {
    h3_backend *b[4];
    h3_video_vae *vae[4];
    const uint8_t *rgb;
    float *out[4];
} tp_job;

static h3_status_code tp_rank(const h3_tp *tp, void *user, h3_status *status) {
    tp_job *j = user;
    return h3_video_vae_encode_keyframe(j->vae[tp->rank], j->rgb, 128, 96, 0, NULL, j->out[tp->rank], status);
}

static void test_tp(h3_video_vae *vae) {
    enum { H = 96, W = 128 };
    size_t n = (size_t)24 * (H / 16) * (W / 16);
    uint8_t *rgb = malloc((size_t)H * W * 3);
    uint32_t s = 99;
    for (size_t i = 0; i < (size_t)H * W * 3; i++) s = s * 1664525u + 1013904223u, rgb[i] = (uint8_t)(s >> 24);
    float *ref = calloc(n, sizeof(float));
    h3_status st;
    CHECK(h3_video_vae_set_tiling(vae, 64, 16, &st) == H3_OK && /* 6 tiles */
              h3_video_vae_encode_keyframe(vae, rgb, W, H, 0, NULL, ref, &st) == H3_OK,
          "tp1 encode: %s", st.message);
    h3_video_vae_set_tiling(vae, 256, 64, &st);
    for (int N = 2; N <= 4; N++) {
        h3_comm_group *g = NULL;
        h3_tp_team *t = NULL;
        CHECK(h3_comm_group_create_cpu(N, &g, &st) == H3_OK && h3_tp_team_create(g, &t, &st) == H3_OK, "team %d: %s",
              N, st.message);
        if (!t) continue;
        tp_job j;
        memset(&j, 0, sizeof j);
        j.rgb = rgb;
        int ok = 1;
        for (int r = 0; r < N && ok; r++) {
            h3_tp tp = {r, N, h3_comm_group_rank(h3_tp_team_group(t), r)};
            ok = h3_backend_cpu_create(1, &j.b[r], &st) == H3_OK &&
                 h3_video_vae_load_with(j.b[r], h3_test_data(TINY_VAE), NULL, &with_encoder, &j.vae[r], &st) == H3_OK &&
                 h3_video_vae_set_tiling(j.vae[r], 64, 16, &st) == H3_OK;
            if (ok) h3_video_vae_set_tp(j.vae[r], &tp);
            j.out[r] = calloc(n, sizeof(float));
        }
        CHECK(ok, "tp%d setup: %s", N, st.message);
        if (ok) CHECK(h3_tp_team_run(t, tp_rank, &j, &st) == H3_OK, "tp%d encode: %s", N, st.message);
        int same = ok;
        for (int r = 0; r < N && same; r++) same = memcmp(j.out[r], ref, n * sizeof(float)) == 0;
        CHECK(same, "tp%d: every rank's keyframe bit-identical to one rank's", N);
        printf("  tp%d keyframe (6 tiles): %s\n", N, same ? "bit-identical on every rank" : "DIFFERENT");
        for (int r = 0; r < N; r++) {
            free(j.out[r]);
            h3_video_vae_free(j.vae[r]);
            if (j.b[r]) h3_backend_destroy(j.b[r]);
        }
        h3_tp_team_destroy(t);
    }
    free(rgb), free(ref);
}

/* ---- the tensor list, dummy checkpoints, measuring ------------------------------------ */

typedef struct name_check {
    char *index;
    int n, missing;
} name_check;

static h3_status_code check_name(void *opaque, const h3_video_vae_tensor *t, h3_status *status) {
    (void)status;
    name_check *c = opaque;
    char *quoted = g_strdup_printf("\"%s\"", t->name);
    if (!strstr(c->index, quoted)) {
        if (c->missing++ < 5) fprintf(stderr, "not in the release index: %s\n", t->name);
    }
    g_free(quoted);
    c->n++;
    return H3_OK;
}

/* Encoder + decoder walks name exactly the 703 tensors of the release. */
static void test_release_names(void) {
    name_check c = {0};
    char *path = g_build_filename(h3_test_data("official/vae"), "diffusion_pytorch_model.safetensors.index.json", NULL);
    CHECK(g_file_get_contents(path, &c.index, NULL, NULL), "read %s", path);
    g_free(path);
    if (!c.index) return;
    h3_status st;
    CHECK(h3_video_vae_encoder_tensors(h3_test_data("official/vae"), check_name, &c, &st) == H3_OK, "encoder walk: %s",
          st.message);
    int n_enc = c.n;
    CHECK(h3_video_vae_decoder_tensors(h3_test_data("official/vae"), check_name, &c, &st) == H3_OK, "decoder walk: %s",
          st.message);
    CHECK(c.missing == 0 && c.n == 703, "%d tensors (%d encoder), %d not in the index; the release has 703", c.n, n_enc,
          c.missing);
    g_free(c.index);
}

/* The release's VAE with its encoder on the measuring CPU backend: a dummy
 * checkpoint lists the encoder, loads, and a 1280x736 keyframe runs. */
static void test_release_measure(void) {
    h3_backend *b = NULL;
    h3_checkpoint *ck = NULL, *dec_only = NULL;
    h3_video_vae *vae = NULL;
    h3_status st;
    const char *dir = h3_test_data("official/vae");
    CHECK(h3_backend_cpu_create_measure(&b, &st) == H3_OK, "measure backend: %s", st.message);
    CHECK(h3_video_vae_dummy_checkpoint_with(dir, 1, &with_encoder, &ck, &st) == H3_OK, "dummy: %s", st.message);
    CHECK(h3_video_vae_dummy_checkpoint(dir, 1, &dec_only, &st) == H3_OK, "dummy: %s", st.message);
    if (ck && dec_only) CHECK(h3_checkpoint_count(ck) == 703 && h3_checkpoint_count(dec_only) < 703,
                              "dummy tensors %zu / %zu", h3_checkpoint_count(ck), h3_checkpoint_count(dec_only));
    if (b && ck) {
        h3_backend_memory m0, m1;
        h3_backend_memory_get(b, &m0);
        CHECK(h3_video_vae_load_with(b, dir, ck, &with_encoder, &vae, &st) == H3_OK, "measure load: %s", st.message);
        h3_backend_memory_get(b, &m1);
        uint64_t enc_bytes = 180337888ull * 4; /* encoder + quant_conv fp32 (spec §2) */
        CHECK(m1.weights - m0.weights > enc_bytes, "weights %llu", (unsigned long long)(m1.weights - m0.weights));
    }
    if (vae) {
        int W = 1280, H = 736;
        uint8_t *rgb = calloc((size_t)W * H * 3, 1);
        float *out = calloc((size_t)24 * (H / 16) * (W / 16), sizeof(float));
        h3_backend_memory_mark(b);
        CHECK(h3_video_vae_encode_keyframe(vae, rgb, W, H, 0, NULL, out, &st) == H3_OK, "measure encode: %s",
              st.message);
        h3_backend_memory m;
        h3_backend_memory_get(b, &m);
        printf("  release keyframe 1280x736 on measure:cpu: activations peak %.1f MB\n", m.peak_activations / 1e6);
        CHECK(m.peak_activations > 3 * (uint64_t)128 * 256 * 256 * 4, "activation peak %llu",
              (unsigned long long)m.peak_activations);
        free(rgb), free(out);
    }
    h3_video_vae_free(vae);
    h3_checkpoint_close(ck);
    h3_checkpoint_close(dec_only);
    h3_backend_destroy(b);
}

/* ---- errors ------------------------------------------------------------------------ */

static void test_errors(h3_backend *b, h3_video_vae *vae) {
    h3_status st;
    uint8_t rgb[64 * 48 * 3] = {0};
    float out[24 * 4 * 4];
    h3_status_code rc = h3_video_vae_encode_keyframe(vae, rgb, 0, 0, 0, NULL, out, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "0x0"), "0x0: %d %s", rc, st.message);
    rc = h3_video_vae_encode_keyframe(vae, rgb, 64, 40, 0, NULL, out, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "64x40") && strstr(st.message, "multiples of 16"),
          "64x40: %d %s", rc, st.message);
    rc = h3_video_vae_encode_keyframe(vae, rgb, 64, 16, 0, NULL, out, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT, "64x16 (a 1-latent side): %d %s", rc, st.message);
    rc = h3_video_vae_encode_keyframe(vae, rgb, 64, 32, 10, NULL, out, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "stride"), "short stride: %d %s", rc, st.message);
    h3_video_vae_frames none = {.rgb = rgb, .frames = 0, .width = 64, .height = 32};
    rc = h3_video_vae_encode(vae, &none, out, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT, "0 frames: %d %s", rc, st.message);
    CHECK(h3_video_vae_encoded_frames(vae, 0) == -1 && h3_video_vae_encoded_frames(vae, 124) == 37,
          "encoded frames 0 / 124");

    h3_video_vae *dec = load_tiny(b, NULL);
    if (dec) {
        CHECK(!h3_video_vae_has_encoder(dec) && h3_video_vae_has_encoder(vae), "has_encoder");
        rc = h3_video_vae_encode_keyframe(dec, rgb, 64, 32, 0, NULL, out, &st);
        CHECK(rc == H3_ERR_UNSUPPORTED && strstr(st.message, "without its encoder"), "no encoder: %d %s", rc,
              st.message);
        h3_video_vae_free(dec);
    }
    /* a checkpoint with the decoder only: the encoder load names the first missing tensor */
    h3_checkpoint *ck = NULL;
    h3_video_vae *bad = NULL;
    CHECK(h3_video_vae_dummy_checkpoint(h3_test_data(TINY_VAE), 3, &ck, &st) == H3_OK, "dummy: %s", st.message);
    rc = h3_video_vae_load_with(b, h3_test_data(TINY_VAE), ck, &with_encoder, &bad, &st);
    CHECK(rc == H3_ERR_NOT_FOUND && strstr(st.message, "encoder.conv_in.weight") && !bad, "missing encoder: %d %s",
          rc, st.message);
    h3_checkpoint_close(ck);
    /* the dummy with the encoder loads and encodes (finite values) */
    CHECK(h3_video_vae_dummy_checkpoint_with(h3_test_data(TINY_VAE), 3, &with_encoder, &ck, &st) == H3_OK,
          "dummy enc: %s", st.message);
    rc = h3_video_vae_load_with(b, h3_test_data(TINY_VAE), ck, &with_encoder, &bad, &st);
    CHECK(rc == H3_OK, "dummy encoder load: %s", st.message);
    if (bad) {
        float o[24 * 2 * 4];
        rc = h3_video_vae_encode_keyframe(bad, rgb, 64, 32, 0, NULL, o, &st);
        int finite = 1;
        for (size_t i = 0; i < sizeof o / sizeof *o; i++) finite &= isfinite(o[i]) != 0;
        CHECK(rc == H3_OK && finite, "dummy encode: %s", st.message);
    }
    h3_video_vae_free(bad);
    h3_checkpoint_close(ck);
}

int main(void) {
    h3_backend *b = NULL;
    h3_status st;
    if (h3_backend_cpu_create(1, &b, &st) != H3_OK) {
        fprintf(stderr, "cpu backend: %s\n", st.message);
        return 1;
    }
    h3_video_vae *vae = load_tiny(b, &with_encoder);
    if (vae) {
        test_encode_image(vae);
        test_encode_video(vae);
        test_e2e_keyframe(vae);
        test_tiled(vae);
        test_tp(vae);
        test_errors(b, vae);
    }
    test_release_names();
    test_native_names();
    test_release_measure();
    h3_video_vae_free(vae);
    h3_backend_destroy(b);
    return h3_test_finish("test_video_vae_encoder");
}
