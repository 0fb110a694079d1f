/* test_prepare.c - a request is prepared once (h3_engine_prepare): its
 * keyframes are fitted onto the canvas and presented to the Qwen3-VL
 * processor once per generation (h3_engine_keyframe_preparations), however
 * many times the measuring twin runs it, on the tiny model:
 *   plain CPU      no twin: generate prepares once
 *   under a cap    h3_engine_cap_cpu_memory: the twin runs the request first
 *                  (once with the text encoder resident, a second time
 *                  freed when that does not fit); still one preparation
 *   the job        h3_engine_prepare's plan is h3_engine_validate's; the job
 *                  run twice gives the same clip as h3_engine_generate and
 *                  prepares nothing more; a bad request is refused at
 *                  prepare, with no job
 * Before the job, generate validated, ran the twin (which validated and
 * prepared again, once or twice) and prepared once more: 2 on the plain CPU,
 * 4 under a roomy cap, 6 when the twin had to free the text encoder. */
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h3.h"
#include "engine/h3_engine.h"
#include "h3_test.h"
#include "h3_test_capture.h"

#define KEY_W 48
#define KEY_H 40

static uint8_t key_rgb[KEY_W * KEY_H * 3];
static const h3_image KEY = {KEY_W, KEY_H, KEY_W * 3, key_rgb};

static void make_key(void) {
    for (int y = 0; y < KEY_H; y++)
        for (int x = 0; x < KEY_W; x++) {
            uint8_t *p = key_rgb + (y * KEY_W + x) * 3;
            p[0] = (uint8_t)(x * 5);
            p[1] = (uint8_t)(y * 6);
            p[2] = (uint8_t)((x + y) * 3);
        }
}

static h3_request fl2va_request(void) {
    h3_request r = h3_request_default();
    r.prompt = "a robot dancing";
    r.width = 64;
    r.height = 32;
    r.num_frames = 22;
    r.steps = 2;
    r.first_image = &KEY;
    return r;
}

static h3_engine *open_tiny(uint64_t cap, h3_status *st) {
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("models/tiny-h3");
    o.compute = H3_COMPUTE_CPU;
    o.max_gpu_memory = cap;
    h3_engine *e = NULL;
    return h3_engine_open(&o, &e, st) == H3_OK ? e : NULL;
}

static int same_clip(const h3_test_capture *a, const h3_test_capture *b) {
    size_t vb = (size_t)a->plan.num_frames * a->plan.width * a->plan.height * 3;
    return a->video && b->video && a->frames == b->frames && memcmp(a->video, b->video, vb) == 0 &&
           a->samples == b->samples && memcmp(a->audio, b->audio, (size_t)(2 * a->samples) * sizeof(float)) == 0;
}

/* One h3_engine_generate of the FL2VA request: the preparations it made and
 * whether the text encoder was freed. */
static int preparations_of_generate(h3_engine *e, const char *what, h3_test_capture *c, int *released) {
    h3_request r = fl2va_request();
    h3_status st = {0};
    h3_plan plan;
    CHECK(h3_engine_validate(e, &r, &plan, &st) == H3_OK, "%s: validate: %s", what, st.message);
    int before = h3_engine_keyframe_preparations();
    h3_callbacks cb = {.progress = h3_test_on_progress, .video_frames = h3_test_on_video,
                       .audio_samples = h3_test_on_audio, .opaque = c};
    c->plan = plan;
    c->video = g_malloc0((size_t)plan.num_frames * plan.width * plan.height * 3);
    c->audio = g_malloc0((size_t)(2 * plan.audio_samples) * sizeof(float));
    CHECK(h3_engine_generate(e, &r, &cb, &st) == H3_OK, "%s: generate: %s", what, st.message);
    int n = h3_engine_keyframe_preparations() - before;
    h3_stats stats;
    h3_engine_get_stats(e, &stats);
    *released = stats.text_encoder_released;
    printf("%s: keyframes prepared %d time(s) by one generate (text encoder %s)\n", what, n,
           stats.text_encoder_released ? "freed after encoding" : "resident");
    return n;
}

static void test_generate_counts(void) {
    h3_status st = {0};
    h3_test_capture plain = {0}, roomy = {0}, tight = {0};
    int released = 0;

    h3_engine *e = open_tiny(0, &st);
    CHECK(e, "open: %s", st.message);
    if (!e) return;
    int n = preparations_of_generate(e, "plain CPU", &plain, &released);
    CHECK(n == 1 && !released, "plain CPU: %d preparations, released %d", n, released);
    /* the peaks with the text encoder resident and freed: the cap between them */
    h3_stats stats;
    h3_engine_get_stats(e, &stats);
    uint64_t keep_peak = stats.peak_bytes;
    h3_engine_force_text_release(e, 1);
    h3_test_capture forced = {0};
    preparations_of_generate(e, "plain CPU, text encoder freed (forced)", &forced, &released);
    h3_engine_get_stats(e, &stats);
    uint64_t release_peak = stats.peak_bytes;
    CHECK(released && release_peak < keep_peak, "forced release: peak %llu, resident %llu",
          (unsigned long long)release_peak, (unsigned long long)keep_peak);
    h3_test_capture_free(&forced);
    h3_engine_close(e);

    h3_engine_cap_cpu_memory(1);
    e = open_tiny(keep_peak * 4, &st);
    CHECK(e, "open under a roomy cap: %s", st.message);
    if (e) {
        n = preparations_of_generate(e, "twin, roomy cap", &roomy, &released);
        CHECK(n == 1 && !released, "twin, roomy cap: %d preparations, released %d", n, released);
        CHECK(same_clip(&plain, &roomy), "twin, roomy cap: the clip differs from the plain engine's");
        h3_engine_close(e);
    }
    e = open_tiny(release_peak + (keep_peak - release_peak) / 2, &st);
    CHECK(e, "open under a cap only the release fits: %s", st.message);
    if (e) {
        n = preparations_of_generate(e, "twin, cap only the release fits", &tight, &released);
        CHECK(n == 1 && released, "twin, tight cap: %d preparations, released %d", n, released);
        CHECK(same_clip(&plain, &tight), "twin, tight cap: the clip differs from the plain engine's");
        h3_engine_close(e);
    }
    h3_engine_cap_cpu_memory(0);
    h3_test_capture_free(&plain);
    h3_test_capture_free(&roomy);
    h3_test_capture_free(&tight);
}

static int same_plan(const h3_plan *a, const h3_plan *b) {
    return a->width == b->width && a->height == b->height && a->num_frames == b->num_frames &&
           a->latent_frames == b->latent_frames && a->audio_latents == b->audio_latents &&
           a->audio_samples == b->audio_samples && a->steps == b->steps && a->text_tokens == b->text_tokens &&
           a->sequence_length == b->sequence_length && a->sample_rate == b->sample_rate;
}

/* h3_engine_prepare once, h3_engine_run twice: the clip of h3_engine_generate
 * each time, one preparation in all; the request's strings and images may go
 * once the job is prepared. */
static void check_job(h3_engine *e, const char *what, int fl2va) {
    h3_status st = {0};
    h3_request r = fl2va_request();
    if (!fl2va) r.first_image = NULL;
    h3_test_capture ref = {0};
    CHECK(h3_test_generate(e, &r, &ref, NULL, &st) == H3_OK, "%s: generate: %s", what, st.message);

    char *prompt = g_strdup(r.prompt);
    uint8_t *pixels = g_memdup2(key_rgb, sizeof key_rgb);
    h3_image key = {KEY_W, KEY_H, KEY_W * 3, pixels};
    h3_request q = r;
    q.prompt = prompt;
    if (fl2va) q.first_image = &key;
    int before = h3_engine_keyframe_preparations();
    h3_job *job = NULL;
    CHECK(h3_engine_prepare(e, &q, &job, &st) == H3_OK && job, "%s: prepare: %s", what, st.message);
    memset(prompt, 'x', strlen(prompt)); /* the job keeps its own copies */
    memset(pixels, 0, sizeof key_rgb);
    g_free(prompt);
    g_free(pixels);
    if (!job) {
        h3_test_capture_free(&ref);
        return;
    }
    const h3_plan *plan = h3_job_plan(job);
    CHECK(plan && same_plan(plan, &ref.plan), "%s: the job's plan is not h3_engine_validate's", what);
    for (int i = 0; i < 2; i++) {
        h3_test_capture c = {0};
        c.plan = *plan;
        c.video = g_malloc0((size_t)plan->num_frames * plan->width * plan->height * 3);
        c.audio = g_malloc0((size_t)(2 * plan->audio_samples) * sizeof(float));
        h3_callbacks cb = {.progress = h3_test_on_progress, .video_frames = h3_test_on_video,
                           .audio_samples = h3_test_on_audio, .opaque = &c};
        CHECK(h3_engine_run(e, job, &cb, &st) == H3_OK, "%s: run %d: %s", what, i, st.message);
        CHECK(same_clip(&ref, &c) && c.done == 1, "%s: run %d of the job differs from generate's clip", what, i);
        h3_test_capture_free(&c);
    }
    int n = h3_engine_keyframe_preparations() - before;
    printf("%s: one job prepared, run twice: %d keyframe preparation(s)\n", what, n);
    CHECK(n == (fl2va ? 1 : 0), "%s: %d preparations for one job run twice", what, n);
    h3_job_free(job);
    h3_test_capture_free(&ref);
}

static void test_job(void) {
    h3_status st = {0};
    h3_engine *e = open_tiny(0, &st), *other = open_tiny(0, &st);
    CHECK(e && other, "open: %s", st.message);
    if (!e || !other) {
        h3_engine_close(e);
        h3_engine_close(other);
        return;
    }
    check_job(e, "job, FL2VA", 1);
    check_job(e, "job, T2VA", 0);

    /* a request the rules refuse is refused at prepare, as validate refuses it, with no job */
    h3_request bad = fl2va_request();
    bad.width = 65;
    h3_job *job = (h3_job *)&st; /* prepare sets it to NULL */
    h3_status vs = {0};
    h3_plan plan;
    h3_status_code vrc = h3_engine_validate(e, &bad, &plan, &vs);
    h3_status_code rc = h3_engine_prepare(e, &bad, &job, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && vrc == rc && !job && strcmp(st.message, vs.message) == 0,
          "bad width: prepare %s '%s', validate %s '%s'", h3_status_code_name(rc), st.message,
          h3_status_code_name(vrc), vs.message);
    CHECK(h3_engine_prepare(e, NULL, &job, &st) == H3_ERR_INVALID_ARGUMENT && !job, "no request: %s", st.message);
    CHECK(h3_engine_prepare(e, &bad, NULL, &st) == H3_ERR_INVALID_ARGUMENT, "no job pointer: %s", st.message);
    CHECK(h3_job_plan(NULL) == NULL, "the plan of no job");
    h3_job_free(NULL);

    /* a job runs on the engine that prepared it only */
    h3_request r = fl2va_request();
    CHECK(h3_engine_prepare(e, &r, &job, &st) == H3_OK, "prepare: %s", st.message);
    rc = h3_engine_run(other, job, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "another engine"), "run elsewhere: %s '%s'",
          h3_status_code_name(rc), st.message);
    CHECK(h3_engine_run(e, NULL, NULL, &st) == H3_ERR_INVALID_ARGUMENT, "run no job: %s", st.message);
    h3_job_free(job);
    h3_engine_close(other);
    h3_engine_close(e);
}

int main(void) {
    make_key();
    test_generate_counts();
    test_job();
    return h3_test_finish("test_prepare");
}
