/* test_ref2va_e2e.c - Ref2VA on the tiny model: one image reference, stage
 * by stage against the official golden e2e_ref2va_image_3steps (the
 * setup step's resize, the presentation, the conditioner, the video VAE's
 * condition latents, the noise draws, the layout), then the whole request
 * through the engine on transformer_ref/ (final latents, uint8 frames,
 * audio), and transformer_ref/ loaded once for two requests; [image, audio
 * clip] against e2e_ref2va_audio_3steps (the "<Audio 1>: " presentation,
 * the audio encoder's rows, the layout, the engine); the request check's
 * reference limits. */
#include <glib.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "h3.h"
#include "backend/h3_backend.h"
#include "base/h3_config.h"
#include "base/h3_random.h"
#include "base/h3_safetensors.h"
#include "model/h3_audio_vae_encoder.h"
#include "model/h3_dit_layout.h"
#include "model/h3_image.h"
#include "model/h3_text_encoder.h"
#include "model/h3_tokenizer.h"
#include "model/h3_video_vae_encoder.h"
#include "h3_test.h"
#include "h3_test_capture.h"
#include "h3_test_golden.h"

#define NAME "e2e_ref2va_image_3steps"
#define TINY "models/tiny-h3"
#define SHORT_EDGE 64 /* the golden's reference_image_short_edge (tiny modular_model_index.json) */

static h3_st_file *golden;
static h3_backend *be;

/* The reference as the golden stores it, [H, W, 3] uint8. */
static h3_rgb_image golden_rgb(const char *name) {
    const h3_st_tensor *t = h3_st_find(golden, name);
    CHECK(t && t->ndim == 3 && t->shape[2] == 3, "golden %s missing or not [H, W, 3]", name);
    if (!t || t->ndim != 3) return (h3_rgb_image){0};
    return (h3_rgb_image){(int)t->shape[1], (int)t->shape[0], (size_t)t->shape[1] * 3, (uint8_t *)t->data};
}

static int diff_i32(const char *name, const int32_t *got, int64_t n) {
    int64_t gn = 0;
    int32_t *want = golden_i32(golden, name, &gn);
    int d = want ? (gn != n) : 1;
    for (int64_t i = 0; want && gn == n && i < n; i++) d += got[i] != want[i];
    free(want);
    return d;
}

static void check_f32(const char *what, const float *got, const char *name, size_t n, double tol) {
    int64_t gn = 0;
    float *want = golden_f32(golden, name, &gn);
    double e = want && (size_t)gn == n ? h3_test_rel_l2(got, want, n) : 1;
    printf("  %-28s rel L2 %.3g\n", what, e);
    CHECK(e <= tol, "%s (%s): rel L2 %.3g > %g (%zu vs %lld values)", what, name, e, tol, n, (long long)gn);
    free(want);
}

/* The setup step: 80x48 to the short edge 64, multiple 32, LANCZOS, byte for byte. */
static void test_resize(h3_rgb_image *out) {
    h3_rgb_image in = golden_rgb("reference.0.input_uint8"), want = golden_rgb("reference.0.normalized_uint8");
    h3_status st = {0};
    CHECK(h3_image_fit_reference(&in, SHORT_EDGE, out, &st) == H3_OK, "fit reference: %s", st.message);
    CHECK(out->width == want.width && out->height == want.height, "normalized %dx%d, golden %dx%d", out->width,
          out->height, want.width, want.height);
    int d = 0;
    for (int y = 0; y < want.height && out->width == want.width && out->height == want.height; y++)
        for (int x = 0; x < want.width * 3; x++) d += out->data[y * out->stride + x] != want.data[y * want.stride + x];
    CHECK(d == 0, "normalized reference: %d bytes differ", d);
    printf("reference 80x48 -> %dx%d, %d bytes differ\n", out->width, out->height, d);
    /* a 1x4096 strip at the release's 2048 would be 2048 x 8388608: refused before any allocation */
    static uint8_t strip[4096 * 3];
    h3_rgb_image thin = {1, 4096, 3, strip}, big = {0};
    h3_status_code rc = h3_image_fit_reference(&thin, 2048, &big, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "becomes 2048x8388608") && !big.data,
          "extreme aspect: %d %s", rc, st.message);
}

/* "<Picture 1>: " + vision block + prompt: ids, Qwen types, tags, grid,
 * pixel values; then the conditioner's states at the tap. */
static void test_presentation(const h3_rgb_image *ref, h3_text_presentation *p) {
    h3_status st = {0};
    h3_tokenizer *tok = NULL;
    h3_text_encoder *te = NULL;
    h3_image_processor_config proc;
    h3_config *meta = NULL;
    int64_t tap = -1;
    if (h3_config_load(h3_test_data(TINY "/golden_meta.json"), &meta, &st) == H3_OK)
        h3_config_int(meta, "text_encoder_layer", &tap, &st);
    h3_config_free(meta);
    int ok = tap >= 0 && h3_tokenizer_load(h3_test_data(TINY "/tokenizer"), &tok, &st) == H3_OK &&
             h3_text_encoder_load(be, h3_test_data(TINY "/text_encoder"), (int)tap, &te, &st) == H3_OK &&
             h3_image_processor_config_load(h3_test_data(TINY "/processor"), &proc, &st) == H3_OK &&
             h3_text_presentation_build(te, tok, &proc, "a robot dancing", ref, 1, p, &st) == H3_OK;
    CHECK(ok, "presentation: %s", st.message);
    if (ok) {
        CHECK(p->n == 25 && p->n_images == 1, "presentation: %d rows, %d images", p->n, p->n_images);
        CHECK(diff_i32("text.input_ids", p->ids, p->n) == 0, "text.input_ids differ");
        CHECK(diff_i32("text.mm_token_type_ids", p->mm_types, p->n) == 0, "mm_token_type_ids differ");
        CHECK(diff_i32("text_token_tags", p->tags, p->n) == 0, "text_token_tags differ");
        int32_t grid[3] = {(int32_t)p->grid_thw[0][0], (int32_t)p->grid_thw[0][1], (int32_t)p->grid_thw[0][2]};
        CHECK(diff_i32("text.image_grid_thw", grid, 3) == 0, "image_grid_thw %d,%d,%d", grid[0], grid[1], grid[2]);
        check_f32("pixel_values", p->pixel_values, "text.pixel_values", (size_t)(p->pixel_rows * p->pixel_cols), 1e-6);
        int D = h3_text_encoder_hidden_size(te);
        size_t mark = h3_arena_mark(be);
        h3_tensor out = h3_new_2d(be, h3_backend_compute_dtype(be), p->n, D);
        float *host = malloc((size_t)p->n * D * sizeof *host);
        ok = h3_text_encoder_encode(te, p, &out, &st) == H3_OK && h3_tensor_download_f32(be, &out, host, &st) == H3_OK;
        CHECK(ok, "encode: %s", st.message);
        if (ok) check_f32("prompt_embeds (vision in)", host, "prompt_embeds", (size_t)p->n * D, 1e-4);
        free(host);
        h3_arena_reset(be, mark);
    }
    h3_text_encoder_free(te);
    h3_tokenizer_free(tok);
}

/* The video VAE's posterior sample (seed 42), fp16-rounded and normalized. */
static float *test_condition_latents_named(const h3_rgb_image *ref, const char *name) {
    h3_status st = {0};
    h3_video_vae *vae = NULL;
    h3_video_vae_options with = {.encoder = 1};
    size_t n = (size_t)24 * (ref->height / 16) * (ref->width / 16);
    float *z = calloc(n, sizeof *z);
    int ok = h3_video_vae_load_with(be, h3_test_data(TINY "/vae"), NULL, &with, &vae, &st) == H3_OK &&
             h3_video_vae_encode_keyframe(vae, ref->data, ref->width, ref->height, ref->stride, NULL, z, &st) == H3_OK;
    CHECK(ok, "condition latents: %s", st.message);
    if (ok) check_f32(name, z, name, n, 1e-4);
    h3_video_vae_free(vae);
    return z;
}

static float *test_condition_latents(const h3_rgb_image *ref) {
    return test_condition_latents_named(ref, "condition_latents.0");
}

/* One generator: the reference's ε, then the video noise, then the audio rows;
 * the reference rows at 0.999·z + 0.001·ε, patchified. */
static void test_noise(const float *z) {
    size_t nc = 24 * 4 * 6, nv = (size_t)24 * 37 * 2 * 4, na = (size_t)414 * 32;
    float *eps = malloc(nc * sizeof *eps), *v = malloc(nv * sizeof *v), *a = malloc(na * sizeof *a);
    float *rows = malloc(nc * sizeof *rows);
    h3_torch_generator gen;
    h3_torch_generator_seed(&gen, 42);
    h3_torch_randn_f32(&gen, eps, nc);
    h3_torch_randn_f32(&gen, v, nv);
    h3_torch_randn_f32(&gen, a, na);
    check_f32("noise.condition.0", eps, "noise.condition.0", nc, 0);
    check_f32("noise.video", v, "noise.video", nv, 0);
    check_f32("noise.audio_rows", a, "noise.audio_rows", na, 0);
    for (size_t i = 0; i < nc; i++) eps[i] = H3_DIT_CONDITION_TIMESTEP * z[i] + (1.0f - H3_DIT_CONDITION_TIMESTEP) * eps[i];
    h3_status st = {0};
    CHECK(h3_dit_patchify_video(eps, 24, 1, 4, 6, 2, 2, rows, &st) == H3_OK, "patchify: %s", st.message);
    check_f32("condition_rows", rows, "condition_rows", nc, 1e-4);
    free(eps);
    free(v);
    free(a);
    free(rows);
}

/* [text | reference | target audio | target video]: positions (float64),
 * tags and indices exact; step 0's per-row timestep indices exact. */
static void test_layout(const h3_text_presentation *p, const h3_dit_reference *refs, int n_refs, int64_t rows,
                        int64_t audio_rows) {
    h3_dit_layout_params lp = {.text_token_tags = p->tags, .num_text = p->n, .num_latent_frames = 37,
                               .latent_height = 2, .latent_width = 4, .num_audio_latents = 207, .patch_t = 1,
                               .patch_h = 2, .patch_w = 2, .num_references = n_refs};
    for (int i = 0; i < n_refs; i++) lp.references[i] = refs[i];
    h3_dit_layout *l = NULL;
    h3_status st = {0};
    if (h3_dit_layout_build(&lp, &l, &st) != H3_OK) {
        CHECK(0, "layout: %s", st.message);
        return;
    }
    CHECK(l->seq_len == rows && l->num_condition_rows == 6 && l->num_condition_audio_rows == audio_rows,
          "layout: %lld rows, %lld reference video rows, %lld reference audio rows", (long long)l->seq_len,
          (long long)l->num_condition_rows, (long long)l->num_condition_audio_rows);
    const h3_st_tensor *pos = h3_st_find(golden, "position_ids");
    CHECK(pos && pos->dtype == H3_ST_F64 && pos->numel == l->seq_len * 3 &&
              memcmp(pos->data, l->position_ids, (size_t)pos->numel * 8) == 0,
          "position_ids differ (float64)");
    CHECK(diff_i32("token_tags", l->token_tags, l->seq_len) == 0, "token_tags differ");
    CHECK(diff_i32("video_indices", l->video_indices, l->num_video_rows) == 0, "video_indices differ");
    CHECK(diff_i32("audio_indices", l->audio_indices, l->num_audio_rows) == 0, "audio_indices differ");
    CHECK(diff_i32("text_indices", l->text_indices, l->num_text) == 0, "text_indices differ");
    float *tv = golden_f32(golden, "timesteps", NULL), *ta = golden_f32(golden, "audio_timesteps", NULL);
    float ts[H3_DIT_MAX_TIMESTEPS];
    int n_ts = 0;
    int32_t *idx = malloc((size_t)l->seq_len * sizeof *idx);
    for (int step = 0; step < 2 && tv && ta; step++) {
        char name[64];
        CHECK(h3_dit_layout_timesteps(l, tv[step], ta[step], ts, &n_ts, idx, &st) == H3_OK, "timesteps: %s",
              st.message);
        snprintf(name, sizeof name, "step%d.timestep_indices", step);
        CHECK(diff_i32(name, idx, l->seq_len) == 0, "%s differ", name);
        snprintf(name, sizeof name, "step%d.timestep", step);
        check_f32(name, ts, name, (size_t)n_ts, 0);
    }
    printf("layout: %lld rows exact (positions, tags, indices, step timesteps)\n", (long long)rows);
    free(idx);
    free(tv);
    free(ta);
    h3_dit_layout_free(l);
}

static int ref_loads;
static void count_loads(void *opaque, h3_log_level level, const char *message) {
    (void)opaque;
    (void)level;
    if (strstr(message, "Ref2VA transformer loaded")) ref_loads++;
}

/* The request through the engine: latents, frames, audio; then again,
 * on the kept transformer_ref/. */
static void test_engine(const char *name, const h3_reference *refs, int n_refs, int64_t rows, int want_loads) {
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data(TINY);
    o.compute = H3_COMPUTE_CPU;
    o.log = count_loads;
    h3_engine *e = NULL;
    h3_status st = {0};
    ref_loads = 0;
    if (h3_engine_open(&o, &e, &st) != H3_OK) {
        CHECK(0, "open: %s", st.message);
        return;
    }
    h3_request r = h3_test_golden_request(name);
    r.references = refs;
    r.num_references = n_refs;
    h3_plan plan;
    CHECK(h3_engine_validate(e, &r, &plan, &st) == H3_OK && plan.sequence_length == rows, "plan: %s (%lld rows)",
          st.message, (long long)plan.sequence_length);
    for (int run = 0; run < 2; run++) {
        h3_test_capture c = {0};
        if (h3_test_generate(e, &r, &c, NULL, &st) != H3_OK) {
            CHECK(0, "generate %d: %s", run, st.message);
            h3_test_capture_free(&c);
            break;
        }
        printf("%s, engine run %d:\n", name, run + 1);
        check_f32("latents", c.latents, "latents", c.n_latents, 1e-4);
        check_f32("audio_latents", c.audio_latents, "audio_latents", c.n_audio_latents, 1e-4);
        float *planar = malloc((size_t)2 * c.samples * sizeof *planar);
        for (int64_t i = 0; i < c.samples; i++) {
            planar[i] = c.audio[2 * i];
            planar[c.samples + i] = c.audio[2 * i + 1];
        }
        check_f32("audio", planar, "audio", (size_t)(2 * c.samples), 1e-3);
        free(planar);
        const h3_st_tensor *u8 = h3_st_find(golden, "videos_uint8");
        int maxd = u8 && u8->numel == (int64_t)c.frames * 64 * 32 * 3 ? 0 : 999;
        for (int64_t i = 0; maxd < 999 && i < u8->numel; i++) {
            int d = abs((int)((const uint8_t *)u8->data)[i] - (int)c.video[i]);
            if (d > maxd) maxd = d;
        }
        printf("  uint8 frames max |diff| %d\n", maxd);
        CHECK(maxd <= 1, "uint8 frames differ by %d", maxd);
        h3_test_capture_free(&c);
    }
    CHECK(ref_loads == want_loads, "transformer_ref/ loaded %d times for two requests (want once, kept)", ref_loads);
    h3_engine_close(e);
}

/* The reference limits and kinds of h3_request_check, each refused by name. */
static h3_status_code check_refs(const h3_reference *refs, int n, const h3_image *first, h3_status *st) {
    h3_request r = h3_request_default();
    r.prompt = "a robot dancing";
    r.references = refs;
    r.num_references = n;
    r.first_image = first;
    return h3_request_check(&r, st);
}

static void test_request_limits(void) {
    static uint8_t px[4 * 4 * 3];
    h3_image im = {4, 4, 12, px};
    h3_reference refs[H3_MAX_REFERENCES + 1];
    for (int i = 0; i <= H3_MAX_REFERENCES; i++) refs[i] = (h3_reference){.kind = H3_REFERENCE_IMAGE, .image = im};
    h3_status st = {0};
    CHECK(check_refs(refs, 9, NULL, &st) == H3_OK, "9 images: %s", st.message);
    h3_status_code rc = check_refs(refs, 10, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "more than 9 image"), "10 images: %d %s", rc, st.message);
    rc = check_refs(refs, 13, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "1..12"), "13 references: %d %s", rc, st.message);
    rc = check_refs(refs, 1, &im, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "first or last image"), "with a keyframe: %d %s", rc,
          st.message);
    rc = check_refs(NULL, 1, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT, "a count without a list: %d %s", rc, st.message);
    h3_reference audio = {.kind = H3_REFERENCE_AUDIO};
    rc = check_refs(&audio, 1, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "need an image or video"), "audio alone: %d %s", rc,
          st.message);
    h3_reference mixed[2] = {refs[0], audio};
    rc = check_refs(mixed, 2, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "reference 2 (audio): 0 samples"),
          "silent audio beside an image: %d %s", rc, st.message);
    static float clip[2 * 16];
    mixed[1] = (h3_reference){.kind = H3_REFERENCE_AUDIO, .samples = clip, .num_samples = 16, .sample_rate = 1600};
    CHECK(check_refs(mixed, 2, NULL, &st) == H3_OK, "audio beside an image: %s", st.message);
    h3_reference four[5] = {refs[0], mixed[1], mixed[1], mixed[1], mixed[1]};
    rc = check_refs(four, 5, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "more than 3 audio"), "4 clips: %d %s", rc, st.message);
    h3_reference videos[4];
    for (int i = 0; i < 4; i++) videos[i] = (h3_reference){.kind = H3_REFERENCE_VIDEO};
    rc = check_refs(videos, 4, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "more than 3 video"), "4 videos: %d %s", rc, st.message);
    rc = check_refs(videos, 1, NULL, &st);
    CHECK(rc == H3_ERR_UNSUPPORTED && strstr(st.message, "video references are not yet"), "a video: %d %s", rc,
          st.message);
    h3_reference bad = {.kind = (h3_reference_kind)7};
    rc = check_refs(&bad, 1, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "unknown kind 7"), "kind 7: %d %s", rc, st.message);
    h3_reference empty = {.kind = H3_REFERENCE_IMAGE};
    rc = check_refs(&empty, 1, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "reference 1 (image)"), "no pixels: %d %s", rc,
          st.message);
    printf("reference limits: refused by name\n");
}

/* Audio references the engine refuses when it prepares the job: another
 * rate, longer than the clip. */
static void test_audio_refusals(const h3_reference *image) {
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data(TINY);
    o.compute = H3_COMPUTE_CPU;
    h3_engine *e = NULL;
    h3_status st = {0};
    if (h3_engine_open(&o, &e, &st) != H3_OK) {
        CHECK(0, "open: %s", st.message);
        return;
    }
    static float clip[2 * 9000];
    h3_reference refs[2] = {*image, {.kind = H3_REFERENCE_AUDIO, .samples = clip, .num_samples = 100,
                                     .sample_rate = 8000}};
    h3_request r = h3_test_golden_request("e2e_ref2va_audio_3steps");
    r.references = refs;
    r.num_references = 2;
    h3_plan plan;
    h3_status_code rc = h3_engine_validate(e, &r, &plan, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "reference 2 (audio): 8000 Hz") &&
              strstr(st.message, "1600 Hz"),
          "8000 Hz clip: %d %s", rc, st.message);
    refs[1].sample_rate = 1600;
    refs[1].num_samples = 9000; /* the clip has 207 latents x 40 = 8280 samples */
    rc = h3_engine_validate(e, &r, &plan, &st);
    CHECK(rc == H3_ERR_UNSUPPORTED && strstr(st.message, "9000 samples, longer than the clip's 8280"),
          "long clip: %d %s", rc, st.message);
    h3_engine_close(e);
}

/* e2e_ref2va_audio_3steps: [image, audio clip]. The presentation with its
 * "<Audio 1>: " label, the audio encoder's mean and rows, the layout of
 * 630 rows, then the engine. */
static void test_audio_case(void) {
    h3_status st = {0};
    h3_st_file *image_golden = golden;
    if (h3_st_open(h3_test_data("goldens/tiny-h3/e2e_ref2va_audio_3steps.safetensors"), &golden, &st) != H3_OK) {
        CHECK(0, "audio golden: %s", st.message);
        golden = image_golden;
        return;
    }
    h3_rgb_image ref = {0}, in = golden_rgb("reference.0.input_uint8");
    CHECK(h3_image_fit_reference(&in, SHORT_EDGE, &ref, &st) == H3_OK, "fit: %s", st.message);
    h3_tokenizer *tok = NULL;
    h3_text_encoder *te = NULL;
    h3_image_processor_config proc;
    h3_text_presentation p = {0};
    h3_text_reference_kind kinds[2] = {H3_TEXT_REFERENCE_IMAGE, H3_TEXT_REFERENCE_AUDIO};
    int ok = h3_tokenizer_load(h3_test_data(TINY "/tokenizer"), &tok, &st) == H3_OK &&
             h3_text_encoder_load(be, h3_test_data(TINY "/text_encoder"), 2, &te, &st) == H3_OK &&
             h3_image_processor_config_load(h3_test_data(TINY "/processor"), &proc, &st) == H3_OK &&
             h3_text_presentation_build_references(te, tok, &proc, "a robot dancing", kinds, 2, &ref, &p, &st) ==
                 H3_OK;
    CHECK(ok && p.n == 34, "audio presentation: %s (%d rows)", st.message, p.n);
    if (ok) {
        CHECK(diff_i32("text.input_ids", p.ids, p.n) == 0, "audio case: text.input_ids differ");
        CHECK(diff_i32("text_token_tags", p.tags, p.n) == 0, "audio case: text_token_tags differ");
    }
    /* the clip through the encoder: mean, then the normalized rows */
    h3_audio_vae_encoder *enc = NULL;
    int64_t n = 0;
    float *x = golden_f32(golden, "reference.1.normalized_audio", &n); /* [2, 2003] */
    int64_t na = 0;
    ok = x && h3_audio_vae_encoder_load(be, h3_test_data(TINY "/audio_vae"), NULL, &enc, &st) == H3_OK;
    CHECK(ok, "audio encoder: %s", st.message);
    if (ok) {
        na = h3_audio_vae_encoded_length(enc, n / 2);
        float *mean = malloc((size_t)(2 * na * 32) * sizeof *mean), *rows = malloc((size_t)(2 * na * 32) * sizeof *rows);
        CHECK(h3_audio_vae_encode(enc, x, 2, n / 2, mean, NULL, &st) == H3_OK, "encode: %s", st.message);
        check_f32("audio_vae_encode_mean.0", mean, "audio_vae_encode_mean.0", (size_t)(2 * na * 32), 1e-4);
        h3_audio_vae_normalize_rows(h3_audio_vae_encoder_config(enc), mean, 2, na, rows);
        check_f32("audio_condition_latents.0", rows, "audio_condition_latents.0", (size_t)(2 * na * 32), 1e-4);
        free(mean);
        free(rows);
    }
    h3_dit_reference shapes[2] = {{.kind = H3_DIT_REFERENCE_IMAGE, .num_latent_frames = 1, .latent_height = 4,
                                   .latent_width = 6},
                                  {.kind = H3_DIT_REFERENCE_AUDIO, .num_audio_latents = (int)na}};
    if (p.n) test_layout(&p, shapes, 2, 630, 102);
    /* the engine, from the interleaved clip */
    float *inter = x ? malloc((size_t)n * sizeof *inter) : NULL;
    for (int64_t i = 0; inter && i < n / 2; i++) {
        inter[2 * i] = x[i];
        inter[2 * i + 1] = x[n / 2 + i];
    }
    h3_reference refs[2] = {{.kind = H3_REFERENCE_IMAGE, .image = {in.width, in.height, in.stride, in.data}},
                            {.kind = H3_REFERENCE_AUDIO, .samples = inter, .num_samples = n / 2, .sample_rate = 1600}};
    if (inter) test_engine("e2e_ref2va_audio_3steps", refs, 2, 630, 1);
    test_audio_refusals(&refs[0]);
    free(inter);
    free(x);
    h3_audio_vae_encoder_free(enc);
    h3_text_presentation_clear(&p);
    h3_text_encoder_free(te);
    h3_tokenizer_free(tok);
    h3_rgb_image_clear(&ref);
    h3_st_close(golden);
    golden = image_golden;
}

/* e2e_ref2va_mixed_3steps (its video reference is not yet supported): its
 * second image, 48x72, normalised to 64x96 byte for byte and encoded from
 * a fresh seed-42 generator, as the first: each image's posterior draws
 * from its own generator. */
static void test_mixed_images(void) {
    h3_status st = {0};
    h3_st_file *image_golden = golden;
    if (h3_st_open(h3_test_data("goldens/tiny-h3/e2e_ref2va_mixed_3steps.safetensors"), &golden, &st) != H3_OK) {
        CHECK(0, "mixed golden: %s", st.message);
        golden = image_golden;
        return;
    }
    h3_rgb_image in = golden_rgb("reference.3.input_uint8"), want = golden_rgb("reference.3.normalized_uint8");
    h3_rgb_image out = {0};
    CHECK(h3_image_fit_reference(&in, SHORT_EDGE, &out, &st) == H3_OK && out.width == want.width &&
              out.height == want.height,
          "mixed image 2: %s (%dx%d)", st.message, out.width, out.height);
    int d = 0;
    for (int y = 0; y < want.height && out.width == want.width && out.height == want.height; y++)
        for (int x = 0; x < want.width * 3; x++) d += out.data[y * out.stride + x] != want.data[y * want.stride + x];
    CHECK(d == 0, "mixed image 2: %d bytes differ", d);
    printf("mixed: image 2 48x72 -> %dx%d, %d bytes differ\n", out.width, out.height, d);
    if (out.data && d == 0) {
        float *z = test_condition_latents_named(&out, "condition_latents.2");
        free(z);
    }
    h3_rgb_image_clear(&out);
    h3_st_close(golden);
    golden = image_golden;
}

int main(void) {
    test_request_limits();
    h3_status st = {0};
    if (h3_backend_cpu_create(2, &be, &st) != H3_OK ||
        h3_st_open(h3_test_data("goldens/tiny-h3/" NAME ".safetensors"), &golden, &st) != H3_OK) {
        CHECK(0, "setup: %s", st.message);
        return h3_test_finish("test_ref2va_e2e");
    }
    h3_rgb_image ref = {0};
    h3_text_presentation p = {0};
    test_resize(&ref);
    if (ref.data) {
        test_presentation(&ref, &p);
        float *z = test_condition_latents(&ref);
        test_noise(z);
        free(z);
        h3_dit_reference shape = {.kind = H3_DIT_REFERENCE_IMAGE, .num_latent_frames = 1, .latent_height = 4,
                                  .latent_width = 6};
        if (p.n) test_layout(&p, &shape, 1, 519, 0);
    }
    h3_text_presentation_clear(&p);
    h3_rgb_image_clear(&ref);
    h3_rgb_image in = golden_rgb("reference.0.input_uint8");
    h3_reference image_ref = {.kind = H3_REFERENCE_IMAGE, .image = {in.width, in.height, in.stride, in.data}};
    test_engine(NAME, &image_ref, 1, 519, 1);
    test_audio_case();
    test_mixed_images();
    h3_st_close(golden);
    h3_backend_destroy(be);
    return h3_test_finish("test_ref2va_e2e");
}
