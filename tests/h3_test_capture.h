/* h3_test_capture.h - what one h3_engine_generate call delivers, collected
 * for the engine tests (test_pipeline, test_fasth3, test_tp_*,
 * test_tiny_model): the RGB frames, the interleaved stereo samples, the
 * latents and the progress, with a count of callbacks that came out of order
 * (each must continue where the last one stopped). Header-only, like
 * h3_test.h. */
#ifndef H3_TEST_CAPTURE_H
#define H3_TEST_CAPTURE_H

#include <glib.h>
#include <stdint.h>
#include <string.h>

#include "h3.h"

typedef struct h3_test_capture {
    h3_plan plan;
    uint8_t *video;               /* [frames][H][W][3] */
    float *audio;                 /* interleaved stereo */
    float *latents, *audio_latents;
    size_t n_latents, n_audio_latents;
    int frames, out_of_order;
    int64_t samples;
    int cancel_after_frames;      /* > 0: the video callback asks to stop after this many frames */
    int forwards;                 /* finished denoising steps, from the progress callback */
    int done;                     /* H3_PHASE_DONE reports */
    gint64 first_step_us;         /* monotonic time of the first finished denoising step */
} h3_test_capture;

static inline void h3_test_on_progress(void *opaque, h3_phase phase, int done, int total) {
    h3_test_capture *c = opaque;
    (void)total;
    if (phase == H3_PHASE_DENOISE && done > 0 && g_atomic_int_add(&c->forwards, 1) == 0)
        c->first_step_us = g_get_monotonic_time();
    if (phase == H3_PHASE_DONE) c->done++;
}

static inline int h3_test_on_video(void *opaque, int first, int count, const uint8_t *rgb) {
    h3_test_capture *c = opaque;
    size_t fb = (size_t)c->plan.width * c->plan.height * 3;
    if (first != c->frames || first + count > c->plan.num_frames) {
        c->out_of_order++;
        return 1;
    }
    memcpy(c->video + (size_t)first * fb, rgb, (size_t)count * fb);
    c->frames += count;
    return c->cancel_after_frames && c->frames >= c->cancel_after_frames;
}

static inline int h3_test_on_audio(void *opaque, int64_t first, int64_t count, const float *inter) {
    h3_test_capture *c = opaque;
    if (first != c->samples || first + count > c->plan.audio_samples) {
        c->out_of_order++;
        return 1;
    }
    memcpy(c->audio + 2 * first, inter, (size_t)(2 * count) * sizeof(float));
    c->samples += count;
    return 0;
}

static inline void h3_test_on_latents(void *opaque, const float *video, int C, int T, int H, int W,
                                      const float *audio, int Ca, int Na) {
    h3_test_capture *c = opaque;
    c->n_latents = (size_t)C * T * H * W;
    c->n_audio_latents = (size_t)2 * Ca * Na;
    c->latents = g_memdup2(video, c->n_latents * sizeof(float));
    c->audio_latents = g_memdup2(audio, c->n_audio_latents * sizeof(float));
}

static inline void h3_test_capture_free(h3_test_capture *c) {
    g_free(c->video);
    g_free(c->audio);
    g_free(c->latents);
    g_free(c->audio_latents);
    memset(c, 0, sizeof *c);
}

/* Validates r into c->plan, allocates the media buffers and generates into
 * c (which the caller zeroed, maybe setting cancel_after_frames). flag is the
 * caller's h3_callbacks.cancel_flag, or NULL. */
static inline h3_status_code h3_test_generate(h3_engine *e, const h3_request *r, h3_test_capture *c,
                                              const volatile int *flag, h3_status *st) {
    h3_status_code rc = h3_engine_validate(e, r, &c->plan, st);
    if (rc != H3_OK) return rc;
    c->video = g_malloc0((size_t)c->plan.num_frames * c->plan.width * c->plan.height * 3);
    c->audio = g_malloc0((size_t)(2 * c->plan.audio_samples) * sizeof(float));
    h3_callbacks cb = {.progress = h3_test_on_progress, .video_frames = h3_test_on_video,
                       .audio_samples = h3_test_on_audio, .latents = h3_test_on_latents, .opaque = c,
                       .cancel_flag = flag};
    return h3_engine_generate(e, r, &cb, st);
}

#endif
