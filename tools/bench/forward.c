/* forward.c - the product's forward (--forward on|off|only) on one GPU.
 *
 * block.h is a hand-written block. This times what the engine runs: an
 * h3_dit of --blocks random main blocks (h3_dit_create_random: the release's
 * shapes, weight dtypes and packing, no checkpoint) through h3_dit_begin (text
 * refiner, RoPE tables) and h3_dit_forward (timestep MLP, AdaLN tables, input
 * projections, the blocks, final layer, output heads) over the 1280×736×124
 * layout that h3_dit_layout builds for the engine (256 text rows, two
 * timesteps), next to the hand-written block timed in the same run. Forward
 * times are medians of synchronised wall time (CUDA events alongside) after
 * one warm-up forward (which grows the arena), scaled to 50 blocks. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/h3_backend_cuda.h"
#include "bench.h"
#include "block.h"
#include "model/h3_dit_layout.h"

typedef struct fwd_result {
    int ok, blocks, n_t;
    int64_t S;
    double create_s, begin_ms;
    double fwd_ms, fwd_event_ms, enqueue_ms; /* medians: wall, CUDA events, host time inside h3_dit_forward */
    double hand_block_ms;                    /* the hand-written block at S1, same run */
} fwd_result;

/* What one run needs: the model, its layout and inputs, the timing events. */
typedef struct fwd_run {
    h3_dit *dit;
    h3_dit_layout *l;
    h3_tensor text, xv, xa, vv, va;
    float ts[H3_DIT_MAX_TIMESTEPS];
    int32_t *row_index;
    cudaEvent_t e0, e1;
} fwd_run;

static int fwd_failed(const char *where, h3_status_code rc, const h3_status *st) {
    h3_status sync;
    if (rc == H3_OK && h3_backend_synchronize(B, &sync) == H3_OK) return 0;
    fprintf(stderr, "h3-bench: forward: %s: %s\n", where, rc != H3_OK ? st->message : sync.message);
    h3_backend_clear_error(B);
    return 1;
}

/* 1280×736×124: 124 frames -> 37 latent frames of 46×80, 207 audio latents a channel. */
static h3_status_code make_layout(const h3_dit_config *cfg, h3_dit_layout **l, h3_status *st) {
    int32_t tags[256];
    for (int i = 0; i < 256; i++) tags[i] = H3_TAG_TEXT;
    h3_dit_layout_params lp = {.text_token_tags = tags, .num_text = 256, .num_latent_frames = 37,
                               .latent_height = 46, .latent_width = 80, .num_audio_latents = 207,
                               .patch_t = cfg->patch_t, .patch_h = cfg->patch_h, .patch_w = cfg->patch_w};
    return h3_dit_layout_build(&lp, l, st);
}

static h3_status_code make_inputs(const h3_dit_config *cfg, fwd_run *f, fwd_result *r, h3_status *st) {
    const h3_dit_layout *l = f->l;
    int64_t vf = (int64_t)cfg->in_channels * cfg->patch_h * cfg->patch_w, af = cfg->audio_in_channels;
    f->text = h3_new_2d(B, H3_BF16, l->num_text, cfg->text_dim);
    f->xv = h3_new_2d(B, H3_F32, l->num_video_rows, vf);
    f->xa = h3_new_2d(B, H3_F32, l->num_audio_rows, af);
    f->vv = h3_new_2d(B, H3_F32, l->num_video_rows, vf);
    f->va = h3_new_2d(B, H3_F32, l->num_audio_rows, af);
    h3_backend_cuda_fill_uniform(B, &f->text, next_seed(), -1, 1);
    h3_backend_cuda_fill_uniform(B, &f->xv, next_seed(), -1.7f, 1.7f);
    h3_backend_cuda_fill_uniform(B, &f->xa, next_seed(), -1.7f, 1.7f);
    f->row_index = malloc((size_t)l->seq_len * sizeof *f->row_index);
    if (!f->row_index) return h3_fail(st, H3_ERR_NO_MEMORY, "out of host memory");
    return h3_dit_layout_timesteps(l, 0.3f, 0.6f, f->ts, &r->n_t, f->row_index, st);
}

/* The velocities must be finite: random weights at full size are no excuse for NaN. */
static void check_finite(const h3_tensor *vv) {
    size_t n = (size_t)h3_tensor_numel(vv), bad = 0;
    float *host = malloc(n * sizeof *host);
    h3_status st;
    if (host && h3_tensor_download_f32(B, vv, host, &st) == H3_OK)
        for (size_t i = 0; i < n; i++) bad += !isfinite(host[i]);
    if (!host || bad) printf("forward: WARNING: %zu non-finite video velocities\n", host ? bad : n);
    free(host);
}

/* Warm-up, then the timed forwards: wall, CUDA events and the host's time inside the call. */
static int time_forwards(const bench_options *o, fwd_run *f, fwd_result *r) {
    h3_status st;
    int reps = o->forward_reps < 3 ? 3 : o->forward_reps > 64 ? 64 : o->forward_reps;
    double t[64], ev[64], enq[64];
    cudaStream_t s = (cudaStream_t)h3_backend_cuda_stream(B);
    h3_status_code rc = h3_dit_forward(f->dit, &f->xv, &f->xa, f->ts, r->n_t, f->row_index, &f->vv, &f->va, &st);
    if (fwd_failed("warm-up", rc, &st)) return 0; /* the warm-up grows the arena */
    for (int i = 0; i < reps; i++) {
        double w0 = now_ms();
        cudaEventRecord(f->e0, s);
        rc = h3_dit_forward(f->dit, &f->xv, &f->xa, f->ts, r->n_t, f->row_index, &f->vv, &f->va, &st);
        enq[i] = now_ms() - w0;
        cudaEventRecord(f->e1, s);
        cudaEventSynchronize(f->e1);
        t[i] = now_ms() - w0;
        float ms = 0;
        cudaEventElapsedTime(&ms, f->e0, f->e1);
        ev[i] = ms;
        if (fwd_failed("forward", rc, &st)) return 0;
    }
    r->fwd_ms = upper_median(t, reps);
    r->fwd_event_ms = upper_median(ev, reps);
    r->enqueue_ms = upper_median(enq, reps);
    return 1;
}

typedef struct hand_ctx {
    const block_weights *w;
    block_acts *a;
} hand_ctx;

static void run_hand_block(void *opaque) {
    hand_ctx *c = opaque;
    block_run(c->w, c->a);
}

/* The hand-written block at S1, in the same run. */
static double time_hand_block(const bench_options *o) {
    block_weights w;
    block_acts a;
    block_make_weights(&w);
    block_make_acts(&a, S1);
    hand_ctx c = {&w, &a};
    return time_ms("hand-written block", run_hand_block, &c, 1, o->reps, 1);
}

static void run_forward(const bench_options *o, const h3_dit_config *cfg, fwd_run *f, fwd_result *r) {
    h3_status st;
    h3_status_code rc = make_inputs(cfg, f, r, &st);
    if (fwd_failed("inputs", rc, &st)) return;
    double t0 = now_ms();
    rc = h3_dit_begin(f->dit, f->l, &f->text, &st);
    if (fwd_failed("begin", rc, &st)) return;
    r->begin_ms = now_ms() - t0;
    printf("forward: begin %.1f ms; forward of %d blocks at S %lld...\n", r->begin_ms, o->blocks,
           (long long)f->l->seq_len);
    fflush(stdout);
    if (!time_forwards(o, f, r)) return;
    check_finite(&f->vv);
    h3_dit_end(f->dit);
    r->hand_block_ms = time_hand_block(o);
    r->ok = 1;
}

static void bench_real_forward(const bench_options *o, fwd_result *r) {
    memset(r, 0, sizeof *r);
    r->blocks = o->blocks;
    h3_dit_config cfg;
    release_dit_config(&cfg);
    if (cfg.hidden_size != D || cfg.num_heads != NH || cfg.head_dim != HD || cfg.ffn_dim != FFN ||
        6 * cfg.rope_freq_dim != ROT)
        printf("forward: WARNING: the config differs from the hand-written block's shapes\n");
    printf("forward: building an h3_dit with %d random blocks...\n", o->blocks);
    fflush(stdout);
    h3_status st;
    fwd_run f;
    memset(&f, 0, sizeof f);
    double t0 = now_ms();
    h3_status_code rc = h3_dit_create_random(B, &cfg, o->blocks, 20261203, NULL, &f.dit, &st);
    if (fwd_failed("random model", rc, &st)) return;
    r->create_s = (now_ms() - t0) / 1e3;
    rc = make_layout(&cfg, &f.l, &st);
    if (fwd_failed("layout", rc, &st)) {
        h3_dit_free(f.dit);
        return;
    }
    r->S = f.l->seq_len;
    if (f.l->seq_len != S1) printf("forward: WARNING: layout S %lld, expected %d\n", (long long)f.l->seq_len, S1);
    size_t mark = h3_arena_mark(B);
    cudaEventCreate(&f.e0);
    cudaEventCreate(&f.e1);
    run_forward(o, &cfg, &f, r);
    cudaEventDestroy(f.e0);
    cudaEventDestroy(f.e1);
    h3_dit_end(f.dit);
    h3_arena_reset(B, mark);
    free(f.row_index);
    h3_dit_layout_free(f.l);
    h3_dit_free(f.dit);
}

/* hand: the ops section's results when it ran (its forward of --blocks hand-written blocks), else NULL. */
static void report_real_forward(const fwd_result *r, const ops_result *hand) {
    if (!r->ok) return;
    double per_block = r->fwd_ms / r->blocks;
    printf("\nProduct forward (h3_dit_create_random + h3_dit_begin/h3_dit_forward), 1280x736x124, S %lld, %d timesteps,\n"
           "%d of 50 blocks:\n", (long long)r->S, r->n_t, r->blocks);
    printf("  random model built in %.1f s (host); begin (text refiner, RoPE tables) %.1f ms\n", r->create_s,
           r->begin_ms);
    printf("  forward %.1f ms wall (CUDA events %.1f ms; host time inside h3_dit_forward %.1f ms) = %.2f ms/block\n",
           r->fwd_ms, r->fwd_event_ms, r->enqueue_ms, per_block);
    printf("  50-block forward (scaled from %d blocks): %.2f s\n", r->blocks, r->fwd_ms * 50 / r->blocks / 1e3);
    printf("  hand-written block in the same run: %.2f ms -> 50 blocks %.2f s; product/hand per block "
           "%.3f (%+.2f ms)\n",
           r->hand_block_ms, r->hand_block_ms * 50 / 1e3, per_block / r->hand_block_ms, per_block - r->hand_block_ms);
    if (hand)
        printf("  hand-written section: block %.2f ms, forward of %d blocks %.1f ms -> 50 blocks %.2f s\n",
               ops_block_ms(hand), r->blocks, ops_forward_ms(hand), ops_forward_ms(hand) * 50 / r->blocks / 1e3);
    fflush(stdout);
}

int forward_bench(const bench_options *o, const ops_result *hand) {
    fwd_result r;
    bench_real_forward(o, &r);
    report_real_forward(&r, hand);
    return r.ok;
}
