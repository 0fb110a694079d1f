/* fp8.c - precision=fp8 against bf16 on the GPU (--fp8 on|only; off by
 * default), in the same run and on the same values:
 *   1. the block's four GEMM shapes at S = 34,710 (qkv, out, fc1, fc2): the
 *      bf16 cuBLASLt GEMM, the fp8 linear as the model runs it (per-row
 *      quantisation of x, then the FP8 GEMM) and its two steps alone, with
 *      TFLOP/s and the rel-L2 of fp8's output against bf16's;
 *   2. the product's forward (h3_dit_create_random + h3_dit_begin /
 *      h3_dit_forward, as forward.c) at 1280×736×124 with 1 block and with
 *      --blocks blocks, once with bf16 weights and once with the same
 *      weights quantised to fp8 (the backend's linears set to fp8 before the
 *      model is drawn): forward times, the weights' bytes, and the rel-L2 of
 *      the video and audio velocities fp8 against bf16.
 * Nothing is written to docs/PERFORMANCE.md; the lead records the numbers. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/h3_backend_cuda_bench.h"
#include "bench.h"
#include "model/h3_dit_layout.h"

/* ---- 1. the GEMMs --------------------------------------------------------------------------------- */

typedef struct gemm_ctx {
    h3_tensor *y, *x, *w, *codes, *scales;
    int step; /* 0 the linear, 1 quantise only, 2 the FP8 GEMM only */
} gemm_ctx;

static void run_gemm(void *opaque) {
    gemm_ctx *c = opaque;
    if (c->step == 0) h3_op_linear(B, c->y, c->x, c->w, NULL);
    else if (c->step == 1) h3_backend_cuda_fp8_quantize(B, c->codes, c->scales, c->x);
    else h3_backend_cuda_fp8_gemm(B, c->y, c->codes, c->scales, c->w);
}

static double rel_l2_dev(const h3_tensor *a, const h3_tensor *ref) {
    size_t n = (size_t)h3_tensor_numel(ref);
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    double e = NAN;
    h3_status st;
    if (x && y && h3_tensor_download_f32(B, a, x, &st) == H3_OK && h3_tensor_download_f32(B, ref, y, &st) == H3_OK)
        e = rel_l2(x, y, n);
    free(x);
    free(y);
    return e;
}

static void gemm_shape(const bench_options *o, const char *name, int64_t N, int64_t K) {
    size_t mark = h3_arena_mark(B);
    h3_tensor x = rand2(S1, K, 1.0f), w = rand2(N, K, sqrtf(3.0f / (float)K));
    h3_tensor y = h3_new_2d(B, H3_BF16, S1, N), y8 = h3_new_2d(B, H3_BF16, S1, N);
    h3_tensor codes = h3_new_2d(B, H3_F8E4M3, S1, K), scales = h3_new_1d(B, H3_F32, S1);
    h3_tensor w8;
    h3_status st;
    if (!bench_ok("fp8 gemm inputs")) {
        h3_arena_reset(B, mark);
        return;
    }
    if (h3_weight_quantize_fp8(B, &w, &w8, &st) != H3_OK) {
        printf("  %-5s fp8 weight: %s\n", name, st.message);
        h3_backend_clear_error(B);
        h3_arena_reset(B, mark);
        return;
    }
    gemm_ctx bf = {&y, &x, &w, NULL, NULL, 0}, lin = {&y8, &x, &w8, &codes, &scales, 0};
    gemm_ctx quant = lin, gemm = lin;
    quant.step = 1;
    gemm.step = 2;
    double t_bf = time_ms_or_nan("bf16 gemm", run_gemm, &bf, 2, o->reps, 1);
    double t_lin = time_ms_or_nan("fp8 linear", run_gemm, &lin, 2, o->reps, 1);
    double t_q = time_ms_or_nan("fp8 quantize", run_gemm, &quant, 2, o->reps, 1);
    double t_g = time_ms_or_nan("fp8 gemm", run_gemm, &gemm, 2, o->reps, 1);
    h3_op_linear(B, &y, &x, &w, NULL);
    h3_op_linear(B, &y8, &x, &w8, NULL);
    double e = bench_ok("fp8 outputs") ? rel_l2_dev(&y8, &y) : NAN;
    double flop = 2.0 * S1 * (double)N * (double)K;
    printf("  %-5s %6lldx%-6lld bf16 %7.3f ms %6.0f TF | fp8 linear %7.3f ms %6.0f TF (%.2fx) = quantize %6.3f + "
           "gemm %7.3f ms %6.0f TF (%.2fx) | rel-L2 %.4f\n",
           name, (long long)N, (long long)K, t_bf, tflops(flop, t_bf), t_lin, tflops(flop, t_lin), t_bf / t_lin,
           t_q, t_g, tflops(flop, t_g), t_bf / t_g, e);
    fflush(stdout);
    h3_weight_free(B, &w8);
    h3_arena_reset(B, mark);
}

/* ---- 2. the forward --------------------------------------------------------------------------------- */

typedef struct fwd {
    double ms, weights_gb;
    float *vv, *va;
    size_t nv, na;
} fwd;

/* 1280×736×124: 37 latent frames of 46×80, 207 audio latents, 256 text rows (forward.c's layout). */
static h3_status_code layout_of(const h3_dit_config *cfg, h3_dit_layout **l, h3_status *st) {
    int32_t tags[256];
    for (int i = 0; i < 256; i++) tags[i] = H3_TAG_TEXT;
    h3_dit_layout_params lp = {.text_token_tags = tags, .num_text = 256, .num_latent_frames = 37,
                               .latent_height = 46, .latent_width = 80, .num_audio_latents = 207,
                               .patch_t = cfg->patch_t, .patch_h = cfg->patch_h, .patch_w = cfg->patch_w};
    return h3_dit_layout_build(&lp, l, st);
}

static float *download_all(const h3_tensor *t, size_t *n) {
    *n = (size_t)h3_tensor_numel(t);
    float *h = malloc(*n * sizeof *h);
    h3_status st;
    if (h && h3_tensor_download_f32(B, t, h, &st) == H3_OK) return h;
    free(h);
    return NULL;
}

/* One model (fp8: the linears quantised as they load), its forwards timed; 0 on failure. */
static int run_model(const bench_options *o, const h3_dit_config *cfg, int blocks, int fp8, fwd *out) {
    memset(out, 0, sizeof *out);
    h3_status st;
    h3_dit *dit = NULL;
    h3_dit_layout *l = NULL;
    h3_backend_memory m0, m1;
    if (h3_backend_set_linear_fp8(B, fp8, &st) != H3_OK) {
        printf("  fp8: %s\n", st.message);
        return 0;
    }
    h3_backend_memory_get(B, &m0);
    h3_status_code rc = h3_dit_create_random(B, cfg, blocks, 20261203, NULL, &dit, &st);
    h3_backend_memory_get(B, &m1);
    out->weights_gb = (double)(m1.weights - m0.weights) / 1e9;
    if (rc == H3_OK) rc = layout_of(cfg, &l, &st);
    size_t mark = h3_arena_mark(B);
    int64_t vf = (int64_t)cfg->in_channels * cfg->patch_h * cfg->patch_w, af = cfg->audio_in_channels;
    float ts[H3_DIT_MAX_TIMESTEPS];
    int n_t = 0;
    int32_t *rows = l ? malloc((size_t)l->seq_len * sizeof *rows) : NULL;
    h3_tensor text, xv, xa, vv, va;
    if (rc == H3_OK) {
        uint64_t seed = 777; /* the same inputs for both precisions */
        text = h3_new_2d(B, H3_BF16, l->num_text, cfg->text_dim);
        xv = h3_new_2d(B, H3_F32, l->num_video_rows, vf);
        xa = h3_new_2d(B, H3_F32, l->num_audio_rows, af);
        vv = h3_new_2d(B, H3_F32, l->num_video_rows, vf);
        va = h3_new_2d(B, H3_F32, l->num_audio_rows, af);
        h3_backend_cuda_fill_uniform(B, &text, seed, -1, 1);
        h3_backend_cuda_fill_uniform(B, &xv, seed + 1, -1.7f, 1.7f);
        h3_backend_cuda_fill_uniform(B, &xa, seed + 2, -1.7f, 1.7f);
        rc = rows ? h3_dit_layout_timesteps(l, 0.3f, 0.6f, ts, &n_t, rows, &st) : H3_ERR_NO_MEMORY;
    }
    if (rc == H3_OK) rc = h3_dit_begin(dit, l, &text, &st);
    if (rc == H3_OK) rc = h3_dit_forward(dit, &xv, &xa, ts, n_t, rows, &vv, &va, &st); /* warm-up */
    int reps = o->forward_reps < 3 ? 3 : o->forward_reps > 64 ? 64 : o->forward_reps;
    double t[64];
    for (int i = 0; rc == H3_OK && i < reps; i++) {
        double w0 = now_ms();
        rc = h3_dit_forward(dit, &xv, &xa, ts, n_t, rows, &vv, &va, &st);
        if (rc == H3_OK) rc = h3_backend_synchronize(B, &st);
        t[i] = now_ms() - w0;
    }
    if (rc == H3_OK) {
        out->ms = upper_median(t, reps);
        out->vv = download_all(&vv, &out->nv);
        out->va = download_all(&va, &out->na);
    } else {
        printf("  %s forward of %d blocks: %s\n", fp8 ? "fp8" : "bf16", blocks, st.message);
        h3_backend_clear_error(B);
    }
    if (dit) h3_dit_end(dit);
    h3_arena_reset(B, mark);
    free(rows);
    h3_dit_layout_free(l);
    h3_dit_free(dit);
    h3_backend_set_linear_fp8(B, 0, &st);
    return rc == H3_OK && out->vv && out->va;
}

static void forward_pair(const bench_options *o, const h3_dit_config *cfg, int blocks) {
    fwd bf = {0}, f8 = {0};
    printf("  forward, %d block%s: building and timing bf16, then fp8...\n", blocks, blocks == 1 ? "" : "s");
    fflush(stdout);
    int ok = run_model(o, cfg, blocks, 0, &bf) && run_model(o, cfg, blocks, 1, &f8);
    if (ok)
        printf("  forward, %2d blocks: bf16 %8.1f ms (weights %.2f GB) | fp8 %8.1f ms (weights %.2f GB) = %.3fx | "
               "50 blocks: %.2f s / %.2f s | rel-L2 fp8 vs bf16: video %.4f, audio %.4f\n",
               blocks, bf.ms, bf.weights_gb, f8.ms, f8.weights_gb, bf.ms / f8.ms, bf.ms * 50 / blocks / 1e3,
               f8.ms * 50 / blocks / 1e3, rel_l2(f8.vv, bf.vv, bf.nv), rel_l2(f8.va, bf.va, bf.na));
    fflush(stdout);
    free(bf.vv), free(bf.va), free(f8.vv), free(f8.va);
}

void fp8_bench(const bench_options *o) {
    h3_status st;
    if (h3_backend_set_linear_fp8(B, 1, &st) != H3_OK) {
        printf("\nfp8: skipped: %s\n", st.message);
        return;
    }
    h3_backend_set_linear_fp8(B, 0, &st);
    printf("\nfp8 (E4M3, per-row scales, cuBLASLt FP8 GEMM, fp32 accumulation) against bf16, S %d:\n", S1);
    gemm_shape(o, "qkv", 3 * INNER, D);
    gemm_shape(o, "out", D, INNER);
    gemm_shape(o, "fc1", 2 * FFN, D);
    gemm_shape(o, "fc2", D, FFN);
    h3_dit_config cfg;
    release_dit_config(&cfg);
    forward_pair(o, &cfg, 1);
    if (o->blocks > 1) forward_pair(o, &cfg, o->blocks);
    uint64_t after = h3_backend_cuda_fp8_scaled_after(B);
    printf("  scales: %s (%llu FP8 GEMMs ran unscaled, their per-row scales applied by a pass after them)\n",
           after ? "cuBLASLt has no outer-vector-scaled FP8 algorithm here" : "inside cuBLASLt (outer vectors)",
           (unsigned long long)after);
}
