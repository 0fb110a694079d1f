/* h3_test_stream.h - what the memory=stream tests share (test_stream on the
 * CPU, test_gpu_stream on CUDA): a random DiT's forwards in either mode,
 * engines opened in a mode, and the comparison of two clips to the bit.
 * Header-only, like h3_test.h. */
#ifndef H3_TEST_STREAM_H
#define H3_TEST_STREAM_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h3_test.h"
#include "h3_test_capture.h"

#include "h3.h"
#include "backend/h3_backend.h"
#include "backend/h3_weight_stream.h"
#include "model/h3_dit.h"

/* Two forwards of a random model of cfg's blocks over a small layout
 * (seq_scale 1: 5 text rows, 2x4x6 latents, 3 audio latents; larger scales
 * widen the latents), resident or streamed; the video then audio
 * velocities of the second (malloc'd, *n values), the device weights the
 * model took and the ring's stats. */
/* slots: the ring's (0: the default). */
static inline float *h3_test_stream_forward_slots(h3_backend *b, const h3_dit_config *cfg, int stream, int slots,
                                                  int seq_scale, uint64_t *device_weights, h3_weight_ring_stats *ring,
                                                  size_t *n) {
    h3_dit *dit = NULL;
    h3_status st = {0};
    h3_backend_memory m0, m1;
    h3_backend_memory_get(b, &m0);
    h3_status_code rc = stream ? h3_dit_create_random_stream(b, cfg, cfg->num_layers, 11, NULL, &dit, &st)
                               : h3_dit_create_random(b, cfg, cfg->num_layers, 11, NULL, &dit, &st);
    CHECK(rc == H3_OK, "random dit (stream %d): %s", stream, st.message);
    if (!dit) return NULL;
    if (slots) CHECK(h3_dit_set_stream_slots(dit, slots, &st) == H3_OK, "%d slots: %s", slots, st.message);
    h3_backend_memory_get(b, &m1);
    *device_weights = m1.weights - m0.weights;
    CHECK(h3_dit_is_streamed(dit) == stream, "h3_dit_is_streamed");
    int32_t tags[5] = {1, 1, 1, 1, 1};
    h3_dit_layout_params p = {.text_token_tags = tags, .num_text = 5, .num_latent_frames = 2, .latent_height = 4 * seq_scale,
                              .latent_width = 6 * seq_scale, .num_audio_latents = 3, .patch_t = 1, .patch_h = 2, .patch_w = 2};
    h3_dit_layout *l = NULL;
    CHECK(h3_dit_layout_build(&p, &l, &st) == H3_OK, "layout: %s", st.message);
    int64_t vf = (int64_t)cfg->in_channels * 4, af = cfg->audio_in_channels;
    size_t mark = h3_arena_mark(b);
    h3_tensor t = h3_new_2d(b, H3_F32, 5, cfg->text_dim), v = h3_new_2d(b, H3_F32, l->num_video_rows, vf);
    h3_tensor a = h3_new_2d(b, H3_F32, l->num_audio_rows, af);
    h3_tensor vv = h3_new_2d(b, H3_F32, l->num_video_rows, vf), av = h3_new_2d(b, H3_F32, l->num_audio_rows, af);
    size_t nmax = (size_t)(l->num_video_rows * vf + 5 * cfg->text_dim + l->num_audio_rows * af);
    float *host = malloc(nmax * sizeof *host);
    for (size_t i = 0; i < nmax; i++) host[i] = (float)cos(0.13 * (double)i);
    h3_tensor_upload_f32(b, &t, host, &st);
    h3_tensor_upload_f32(b, &v, host, &st);
    h3_tensor_upload_f32(b, &a, host, &st);
    float ts[H3_DIT_MAX_TIMESTEPS];
    int n_t = 0;
    int32_t *row_index = malloc((size_t)l->seq_len * sizeof *row_index);
    h3_dit_layout_timesteps(l, 0.25f, 0.5f, ts, &n_t, row_index, &st);
    float *out = malloc((size_t)(l->num_video_rows * vf + l->num_audio_rows * af) * sizeof *out);
    rc = h3_dit_begin(dit, l, &t, &st);
    for (int step = 0; step < 2 && rc == H3_OK; step++) /* twice: the ring starts over each forward */
        rc = h3_dit_forward(dit, &v, &a, ts, n_t, row_index, &vv, &av, &st);
    CHECK(rc == H3_OK, "forward (stream %d): %s", stream, st.message);
    if (rc == H3_OK) rc = h3_tensor_download_f32(b, &vv, out, &st);
    if (rc == H3_OK) rc = h3_tensor_download_f32(b, &av, out + l->num_video_rows * vf, &st);
    h3_dit_stream_stats(dit, ring);
    *n = (size_t)(l->num_video_rows * vf + l->num_audio_rows * af);
    h3_dit_end(dit);
    h3_arena_reset(b, mark);
    h3_dit_free(dit);
    h3_backend_memory m2;
    h3_backend_memory_get(b, &m2);
    CHECK(m2.weights == m0.weights, "stream %d: device weights %llu bytes before the model, %llu after it was freed",
          stream, (unsigned long long)m0.weights, (unsigned long long)m2.weights);
    h3_dit_layout_free(l);
    free(host);
    free(row_index);
    if (rc != H3_OK) {
        free(out);
        return NULL;
    }
    return out;
}

static inline float *h3_test_stream_forward(h3_backend *b, const h3_dit_config *cfg, int stream, int seq_scale,
                                            uint64_t *device_weights, h3_weight_ring_stats *ring, size_t *n) {
    return h3_test_stream_forward_slots(b, cfg, stream, 0, seq_scale, device_weights, ring, n);
}

typedef struct opened {
    h3_engine *e;
    h3_stats stats;
} opened;

/* The tiny model in a memory mode (compute CPU unless h3_test_stream_compute
 * says otherwise), its stats after the open. */
static h3_compute h3_test_stream_compute = H3_COMPUTE_CPU;

static inline opened open_mode(h3_memory_mode memory, const char *devices, const char *adapter, h3_load_format format,
                               uint64_t cap, h3_status *st) {
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("models/tiny-h3");
    o.compute = h3_test_stream_compute;
    o.cpu_threads = 2;
    o.devices = devices;
    o.adapter_path = adapter;
    o.memory = memory;
    o.max_gpu_memory = cap;
    o.load_format = format;
    o.dummy_seed = 3;
    opened r = {0};
    if (h3_engine_open(&o, &r.e, st) == H3_OK) h3_engine_get_stats(r.e, &r.stats);
    return r;
}

static inline h3_request small_request(void) {
    h3_request r = h3_request_default();
    r.prompt = "a lighthouse at dusk, waves";
    r.seed = 9;
    r.width = 64;
    r.height = 32;
    r.num_frames = 22;
    r.steps = 2;
    return r;
}

static inline int same_clip(const h3_test_capture *a, const h3_test_capture *b) {
    size_t nv = (size_t)a->plan.num_frames * a->plan.width * a->plan.height * 3;
    return a->latents && b->latents && a->n_latents == b->n_latents && a->n_audio_latents == b->n_audio_latents &&
           memcmp(a->latents, b->latents, a->n_latents * sizeof(float)) == 0 &&
           memcmp(a->audio_latents, b->audio_latents, a->n_audio_latents * sizeof(float)) == 0 &&
           a->samples == b->samples && memcmp(a->audio, b->audio, (size_t)(2 * a->samples) * sizeof(float)) == 0 &&
           a->frames == b->frames && memcmp(a->video, b->video, nv) == 0;
}

#endif
