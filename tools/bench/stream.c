/* stream.c - memory=stream against resident (--stream on|only; off by
 * default: it holds the release's 66 GB twice over, once on the device and
 * once in host memory, one after the other).
 *
 * The product's forward (h3_dit_create_random / _stream: --blocks random
 * blocks of the release, 1280×736×124, 256 text rows, two timesteps) in the
 * same run: resident without a cap, then streamed without a cap and under
 * caps of 80, 48 and 24 GiB (h3_backend_set_memory_limit, the context's
 * 768 MiB reserve taken off as the engine does), each cap applied to a
 * trimmed arena so the activations are allocated under it. For each: the
 * median forward (wall, synchronised, after a warm-up), the overhead against
 * resident, the device peak (h3_backend_memory), the time compute stood
 * waiting for a copy (the ring's stall counter: CUDA events around each
 * wait) and what the host holds pinned and pageable; last, the ring with
 * three slots instead of two, without a cap. Outputs must match
 * resident to the bit; the section says so. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/h3_backend_cuda.h"
#include "backend/h3_weight_stream.h"
#include "bench.h"
#include "model/h3_dit_layout.h"

#define GIB 1073741824.0
#define CONTEXT_RESERVE ((uint64_t)768 << 20) /* the memory plan's CUDA context reserve */

typedef struct stream_run {
    h3_dit *dit;
    h3_dit_layout *l;
    h3_tensor text, xv, xa, vv, va;
    float ts[H3_DIT_MAX_TIMESTEPS];
    int n_t;
    int32_t *row_index;
} stream_run;

typedef struct stream_row {
    const char *mode;
    double cap_gb; /* 0: none */
    int ok;
    double fwd_ms, create_s;
    uint64_t peak, weights;
    double stall_ms;
    uint64_t stalls, loads;
    uint64_t pinned, pageable;
    int same; /* velocities equal resident's: 1, differ: 0, unknown: -1 */
} stream_row;

static int failed(const char *where, h3_status_code rc, const h3_status *st) {
    h3_status sync;
    if (rc == H3_OK && h3_backend_synchronize(B, &sync) == H3_OK) return 0;
    printf("stream: %s: %s\n", where, rc != H3_OK ? st->message : sync.message);
    h3_backend_clear_error(B);
    return 1;
}

static h3_status_code make_inputs(const h3_dit_config *cfg, stream_run *f, h3_status *st) {
    int32_t tags[256];
    for (int i = 0; i < 256; i++) tags[i] = H3_TAG_TEXT;
    h3_dit_layout_params lp = {.text_token_tags = tags, .num_text = 256, .num_latent_frames = 37,
                               .latent_height = 46, .latent_width = 80, .num_audio_latents = 207,
                               .patch_t = cfg->patch_t, .patch_h = cfg->patch_h, .patch_w = cfg->patch_w};
    h3_status_code rc = h3_dit_layout_build(&lp, &f->l, st);
    if (rc != H3_OK) return rc;
    const h3_dit_layout *l = f->l;
    int64_t vf = (int64_t)cfg->in_channels * cfg->patch_h * cfg->patch_w, af = cfg->audio_in_channels;
    /* persistent, so that a trimmed arena (a cap) does not take them */
    int64_t ts[2] = {l->num_text, cfg->text_dim}, vs[2] = {l->num_video_rows, vf}, as[2] = {l->num_audio_rows, af};
    size_t nmax = (size_t)(l->num_video_rows * vf);
    float *host = malloc(nmax * sizeof *host);
    if (!host) return h3_fail(st, H3_ERR_NO_MEMORY, "stream: out of host memory");
    for (size_t i = 0; i < nmax; i++) host[i] = (float)sin(0.37 * (double)i);
    rc = h3_weight_from_f32(B, host, H3_BF16, 2, ts, &f->text, st);
    if (rc == H3_OK) rc = h3_weight_from_f32(B, host, H3_F32, 2, vs, &f->xv, st);
    if (rc == H3_OK) rc = h3_weight_from_f32(B, host, H3_F32, 2, as, &f->xa, st);
    if (rc == H3_OK) rc = h3_weight_from_f32(B, host, H3_F32, 2, vs, &f->vv, st);
    if (rc == H3_OK) rc = h3_weight_from_f32(B, host, H3_F32, 2, as, &f->va, st);
    free(host);
    f->row_index = malloc((size_t)l->seq_len * sizeof *f->row_index);
    if (rc == H3_OK && !f->row_index) rc = h3_fail(st, H3_ERR_NO_MEMORY, "stream: out of host memory");
    return rc == H3_OK ? h3_dit_layout_timesteps(l, 0.3f, 0.6f, f->ts, &f->n_t, f->row_index, st) : rc;
}

/* The model and its inputs, and f cleared. */
static void free_run(stream_run *f) {
    h3_dit_free(f->dit);
    h3_tensor *t[] = {&f->text, &f->xv, &f->xa, &f->vv, &f->va};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) h3_weight_free(B, t[i]);
    free(f->row_index);
    h3_dit_layout_free(f->l);
    memset(f, 0, sizeof *f);
}

/* The video velocities of the last forward, for the bit comparison. */
static float *velocities(const stream_run *f) {
    size_t n = (size_t)h3_tensor_numel(&f->vv);
    float *host = malloc(n * sizeof *host);
    h3_status st;
    if (host && h3_tensor_download_f32(B, &f->vv, host, &st) != H3_OK) {
        free(host);
        return NULL;
    }
    return host;
}

/* One row: the cap (0: none) on a trimmed arena, a warm-up, the timed forwards. */
static void time_row(const bench_options *o, stream_run *f, stream_row *r, uint64_t cap, const float *want,
                     float **got) {
    h3_status st;
    h3_backend_trim(B);
    h3_backend_set_memory_limit(B, cap ? cap - CONTEXT_RESERVE : 0);
    h3_backend_memory_mark(B);
    h3_status_code rc = h3_dit_begin(f->dit, f->l, &f->text, &st);
    if (rc == H3_OK) rc = h3_dit_forward(f->dit, &f->xv, &f->xa, f->ts, f->n_t, f->row_index, &f->vv, &f->va, &st);
    if (failed("warm-up", rc, &st)) {
        h3_dit_end(f->dit);
        return;
    }
    int reps = o->forward_reps < 1 ? 1 : o->forward_reps > 16 ? 16 : o->forward_reps;
    double t[16];
    h3_weight_ring_stats before, after;
    h3_dit_stream_stats(f->dit, &before);
    for (int i = 0; i < reps && rc == H3_OK; i++) {
        double w0 = now_ms();
        rc = h3_dit_forward(f->dit, &f->xv, &f->xa, f->ts, f->n_t, f->row_index, &f->vv, &f->va, &st);
        if (failed("forward", rc, &st)) rc = H3_ERR_DEVICE;
        t[i] = now_ms() - w0;
    }
    if (rc == H3_OK) {
        r->ok = 1;
        r->fwd_ms = upper_median(t, reps);
        h3_backend_memory m;
        h3_backend_memory_get(B, &m);
        r->peak = m.peak;
        r->weights = m.weights;
        h3_dit_stream_stats(f->dit, &after); /* the timed forwards' share, per forward */
        r->stall_ms = (after.stall_ms - before.stall_ms) / reps;
        r->stalls = (after.stalls - before.stalls) / (uint64_t)reps;
        r->loads = (after.loads - before.loads) / (uint64_t)reps;
        h3_weight_host_bytes hb;
        h3_weight_host_bytes_get(B, &hb);
        r->pinned = hb.pinned;
        r->pageable = hb.pageable;
        float *v = velocities(f);
        size_t n = (size_t)h3_tensor_numel(&f->vv);
        r->same = v && want ? memcmp(v, want, n * sizeof *v) == 0 : -1;
        if (got) *got = v;
        else free(v);
    }
    h3_dit_end(f->dit);
    h3_backend_set_memory_limit(B, 0);
}

static void print_row(const stream_row *r, const stream_row *base) {
    if (!r->mode) return; /* never reached: its mode's model failed (said above) */
    if (!r->ok) {
        printf("  %-8s cap %5.0f GiB: failed (see above)\n", r->mode, r->cap_gb);
        return;
    }
    char cap[16] = "none", over[24] = "";
    if (r->cap_gb > 0) snprintf(cap, sizeof cap, "%.0f GiB", r->cap_gb);
    if (base && base->ok) snprintf(over, sizeof over, "overhead %+6.1f%%", (r->fwd_ms / base->fwd_ms - 1.0) * 100.0);
    printf("  %-8s cap %-7s forward %8.1f ms  %-17s  device peak %6.2f GiB (weights %6.2f)  "
           "stall %7.1f ms in %3llu of %3llu copies a forward  host %6.2f GiB pinned + %6.2f pageable  %s\n",
           r->mode, cap, r->fwd_ms, over, r->peak / GIB, r->weights / GIB, r->stall_ms, (unsigned long long)r->stalls,
           (unsigned long long)r->loads, r->pinned / GIB, r->pageable / GIB,
           r->same < 0 ? "" : r->same ? "= resident" : "DIFFERS from resident");
}

/* A model in one mode, its rows, the model freed. */
static int bench_mode(const bench_options *o, const h3_dit_config *cfg, int stream, const double *caps, int n_caps,
                      stream_row *rows, float **want) {
    h3_status st;
    stream_run f;
    memset(&f, 0, sizeof f);
    printf("stream: building %d random blocks %s...\n", o->blocks, stream ? "on the host (memory=stream)" : "resident");
    fflush(stdout);
    double t0 = now_ms();
    h3_status_code rc = stream ? h3_dit_create_random_stream(B, cfg, o->blocks, 20261203, NULL, &f.dit, &st)
                               : h3_dit_create_random(B, cfg, o->blocks, 20261203, NULL, &f.dit, &st);
    if (failed("random model", rc, &st)) return 0;
    double create_s = (now_ms() - t0) / 1e3;
    rc = make_inputs(cfg, &f, &st);
    if (!failed("inputs", rc, &st))
        for (int i = 0; i < n_caps; i++) {
            rows[i].mode = stream ? "stream" : "resident";
            rows[i].cap_gb = caps[i];
            rows[i].create_s = create_s;
            time_row(o, &f, &rows[i], (uint64_t)(caps[i] * GIB), stream ? *want : NULL, stream ? NULL : want);
            print_row(&rows[i], NULL);
            fflush(stdout);
        }
    if (stream && f.row_index) { /* three slots: two blocks in flight ahead of the one computing */
        stream_row *r3 = &rows[n_caps];
        r3->mode = "stream-3";
        r3->create_s = create_s;
        rc = h3_dit_set_stream_slots(f.dit, 3, &st);
        if (!failed("three slots", rc, &st)) {
            time_row(o, &f, r3, 0, *want, NULL);
            print_row(r3, NULL);
        }
    }
    free_run(&f);
    h3_backend_trim(B);
    h3_backend_memory m;
    h3_backend_memory_get(B, &m); /* what the next mode starts from: nothing of this one */
    printf("stream: %s model freed: device weights %.2f GiB, arena %.2f GiB, scratch %.2f GiB held\n",
           stream ? "streamed" : "resident", m.weights / GIB, m.arena / GIB, m.scratch / GIB);
    return 1;
}

int stream_bench(const bench_options *o) {
    h3_dit_config cfg;
    release_dit_config(&cfg);
    static const double resident_caps[] = {0}, stream_caps[] = {0, 80, 48, 24};
    stream_row res[1], str[5]; /* the caps, then three slots without a cap */
    memset(res, 0, sizeof res);
    memset(str, 0, sizeof str);
    float *want = NULL;
    if (o->max_pinned_gib > 0) h3_weight_set_pin_budget((uint64_t)(o->max_pinned_gib * GIB));
    printf("stream: pin budget %.2f GiB (h3_weight_set_pin_budget; default half of the host's memory)\n",
           h3_weight_pin_budget() / GIB);
    bench_mode(o, &cfg, 0, resident_caps, 1, res, &want);
    bench_mode(o, &cfg, 1, stream_caps, 4, str, &want);
    printf("\nmemory=stream against resident: the product's forward, %d of 50 release blocks, 1280x736x124 "
           "(random model built in %.1f s resident, %.1f s streamed)\n",
           o->blocks, res[0].create_s, str[0].create_s);
    print_row(&res[0], &res[0]);
    for (int i = 0; i < 5; i++) print_row(&str[i], &res[0]);
    if (o->blocks < 50) printf("  (%d blocks: scale the forward times by 50/%d for the whole model)\n", o->blocks, o->blocks);
    fflush(stdout);
    free(want);
    return res[0].ok && str[0].ok;
}
