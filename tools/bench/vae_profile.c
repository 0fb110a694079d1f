/* vae_profile.c - the video VAE decoder's ViT block, op by op, at the tile
 * shape (N = 1797 rows a tile: 7·16·16 tokens + 4 registers + 1 zero token;
 * D 2048, 32 × 64, FFN 8192, fp16 GEMMs, fp32 residual), for G tiles stacked
 * as h3_video_vae.c decodes them (a row of 7 tiles at 1280 px): the op
 * sequence of its block_forward with random weights, CUDA events (10 calls a
 * timed run), medians; then the attention op and the block with the
 * mma.sync and the Hopper head_dim-64 kernel each forced, same run. */
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/h3_backend_cuda_bench.h"
#include "bench.h"

#define VAE_TILE_N 1797

enum { VP_NORM, VP_QKV, VP_QKROPE, VP_ATTN, VP_OUT, VP_RESID, VP_FC1, VP_SWIGLU, VP_FC2, VP_BLOCK, VP_N };
static const char *vp_names[VP_N] = {
    "rms_norm f32 -> f16", "3 x GEMM q/k/v 2048->2048", "2 x qk_norm_rope (no weight, rot 48)",
    "attention 32x64 fp16 (per tile)", "GEMM out 2048->2048", "scaled residual (gated_residual)",
    "GEMM fc1 2048->16384", "swiglu [., 16384]", "GEMM fc2 8192->2048", "whole block"};

typedef struct vae_prof {
    int G;
    int64_t S;
    int id; /* VP_* */
    h3_tensor x, n, q, k, v, o, p, u, g, cos, sin, sel;
    h3_tensor wq, wk, wv, wo, w1, w2, bq, bk, bv, bo, b1, b2, norm1, norm2, scale1, scale2;
} vae_prof;

static void vp_op(vae_prof *c, int id) {
    const float eps = 1e-5f, sc = 0.125f;
    switch (id) {
    case VP_NORM: h3_op_rms_norm(B, &c->n, &c->x, &c->norm1, 2048, eps); break;
    case VP_QKV:
        h3_op_linear(B, &c->q, &c->n, &c->wq, &c->bq);
        h3_op_linear(B, &c->k, &c->n, &c->wk, &c->bk);
        h3_op_linear(B, &c->v, &c->n, &c->wv, &c->bv);
        break;
    case VP_QKROPE:
        h3_op_qk_norm_rope(B, &c->q, NULL, eps, &c->cos, &c->sin, 32, 64, 48);
        h3_op_qk_norm_rope(B, &c->k, NULL, eps, &c->cos, &c->sin, 32, 64, 48);
        break;
    case VP_ATTN:
        for (int t = 0; t < c->G; t++) {
            h3_tensor o = h3_tensor_rows_view(&c->o, t * c->S, c->S), q = h3_tensor_rows_view(&c->q, t * c->S, c->S);
            h3_tensor k = h3_tensor_rows_view(&c->k, t * c->S, c->S), v = h3_tensor_rows_view(&c->v, t * c->S, c->S);
            h3_op_attention(B, &o, &q, &k, &v, 32, 32, 64, 0, sc);
        }
        break;
    case VP_OUT: h3_op_linear(B, &c->p, &c->o, &c->wo, &c->bo); break;
    case VP_RESID: h3_op_gated_residual(B, &c->x, &c->scale1, &c->p, &c->sel); break;
    case VP_FC1: h3_op_linear(B, &c->u, &c->n, &c->w1, &c->b1); break;
    case VP_SWIGLU: h3_op_swiglu(B, &c->g, &c->u, 1); break;
    case VP_FC2: h3_op_linear(B, &c->p, &c->g, &c->w2, &c->b2); break;
    default:
        for (int i = VP_NORM; i <= VP_RESID; i++) vp_op(c, i);
        vp_op(c, VP_NORM);
        for (int i = VP_FC1; i <= VP_FC2; i++) vp_op(c, i);
        vp_op(c, VP_RESID);
    }
}

static void vp_call(void *opaque) {
    vae_prof *c = opaque;
    vp_op(c, c->id);
}

/* Activations of G stacked tiles and random weights of one block. */
static void vp_setup(vae_prof *c, int G) {
    const int64_t S = VAE_TILE_N, N = G * S, Dm = 2048, F = 8192;
    c->G = G, c->S = S;
    h3_tensor *acts16[] = {&c->n, &c->q, &c->k, &c->v, &c->o, &c->p};
    c->x = h3_new_2d(B, H3_F32, N, Dm);
    for (int i = 0; i < 6; i++) *acts16[i] = h3_new_2d(B, H3_F16, N, Dm);
    c->u = h3_new_2d(B, H3_F16, N, 2 * F);
    c->g = h3_new_2d(B, H3_F16, N, F);
    c->cos = h3_new_2d(B, H3_F32, N, 48);
    c->sin = h3_new_2d(B, H3_F32, N, 48);
    c->sel = h3_new_2d(B, H3_I32, N, 1);
    int32_t *zeros = calloc((size_t)N, sizeof *zeros);
    if (zeros) h3_tensor_upload_i32(B, &c->sel, zeros, NULL);
    free(zeros);
    struct { h3_tensor *t; int64_t r, k; h3_dtype dt; float lo, hi; } w[] = {
        {&c->wq, Dm, Dm, H3_F16, -0.04f, 0.04f}, {&c->wk, Dm, Dm, H3_F16, -0.04f, 0.04f},
        {&c->wv, Dm, Dm, H3_F16, -0.04f, 0.04f}, {&c->wo, Dm, Dm, H3_F16, -0.04f, 0.04f},
        {&c->w1, 2 * F, Dm, H3_F16, -0.04f, 0.04f}, {&c->w2, Dm, F, H3_F16, -0.02f, 0.02f},
        {&c->bq, 1, Dm, H3_F16, -0.02f, 0.02f}, {&c->bk, 1, Dm, H3_F16, -0.02f, 0.02f},
        {&c->bv, 1, Dm, H3_F16, -0.02f, 0.02f}, {&c->bo, 1, Dm, H3_F16, -0.02f, 0.02f},
        {&c->b1, 1, 2 * F, H3_F16, -0.02f, 0.02f}, {&c->b2, 1, Dm, H3_F16, -0.02f, 0.02f},
        {&c->norm1, 1, Dm, H3_F32, 0.8f, 1.2f}, {&c->norm2, 1, Dm, H3_F32, 0.8f, 1.2f},
        {&c->scale1, 2, Dm, H3_F32, 0.05f, 0.25f}, {&c->scale2, 2, Dm, H3_F32, 0.05f, 0.25f},
        {&c->x, 0, 0, H3_F32, -1, 1}, {&c->cos, 0, 0, H3_F32, -1, 1}, {&c->sin, 0, 0, H3_F32, -1, 1}};
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) {
        if (w[i].r == 1) *w[i].t = h3_new_1d(B, w[i].dt, w[i].k);
        else if (w[i].r == 2) *w[i].t = h3_new_2d(B, w[i].dt, 1, w[i].k); /* layer scale: a one-row table */
        else if (w[i].r) *w[i].t = h3_new_2d(B, w[i].dt, w[i].r, w[i].k);
        h3_backend_cuda_fill_uniform(B, w[i].t, next_seed(), w[i].lo, w[i].hi);
    }
    h3_backend_cuda_fill_uniform(B, &c->n, next_seed(), -1, 1);
    h3_backend_cuda_fill_uniform(B, &c->u, next_seed(), -1, 1);
}

static void vp_print(vae_prof *c, const double *ms) {
    const int64_t S = c->S, N = c->G * S, Dm = 2048, F = 8192;
    const int G = c->G;
    double sum = 0, flop[VP_N] = {0};
    for (int i = 0; i < VP_BLOCK; i++) sum += ms[i] * (i == VP_NORM || i == VP_RESID ? 2 : 1);
    flop[VP_QKV] = 3 * 2.0 * N * Dm * Dm, flop[VP_OUT] = 2.0 * N * Dm * Dm;
    flop[VP_FC1] = 2.0 * N * Dm * 2 * F, flop[VP_FC2] = 2.0 * N * F * Dm, flop[VP_ATTN] = 4.0 * G * S * S * Dm;
    printf("\nvideo VAE ViT block, %d tile%s of %lld rows stacked (fp16 GEMMs, fp32 residual), ms per call, medians:\n",
           G, G > 1 ? "s" : "", (long long)S);
    for (int i = 0; i < VP_N; i++) {
        int times = i == VP_NORM || i == VP_RESID ? 2 : 1;
        printf("  %-40s %8.4f ms", vp_names[i], ms[i]);
        if (flop[i] > 0) printf("  %6.1f TFLOP/s", tflops(flop[i], ms[i]));
        if (i < VP_BLOCK) printf("  x%d = %4.1f%% of the block's ops", times, 100 * times * ms[i] / sum);
        printf("\n");
    }
    printf("  sum of the ops %.3f ms; attention kernel: %s\n", sum,
           h3_backend_cuda_attention_kernel(B, &c->o, &c->q, &c->k, &c->v, 32, 32, 64, 0));
    printf("  per tile: 36 blocks = %.1f ms; 196 tiles = %.2f s\n", 36 * ms[VP_BLOCK] / G,
           196 * 36 * ms[VP_BLOCK] / G / 1e3);
}

/* The attention op and the whole block with each head_dim-64 kernel forced,
 * in the same run: mma.sync (the portable kernel, AUTO's today) and
 * k_attn_fa3 at head_dim 64 with 128- and 192-key tiles (wgmma-d64,
 * wgmma-d64-n192, the Hopper one; off by default until checked). The newer
 * last: a kernel that faults ends the run after the others' numbers. */
static void vp_kernels(vae_prof *c) {
    static const h3_cuda_attention_variant vs[] = {H3_CUDA_VARIANT_MMA, H3_CUDA_VARIANT_WGMMA_D64,
                                                   H3_CUDA_VARIANT_WGMMA_D64_N192};
    const double flop = 4.0 * c->G * (double)c->S * (double)c->S * 2048;
    double attn[3], block[3];
    for (int i = 0; i < 3; i++) {
        h3_cuda_attention_variant old = h3_backend_cuda_set_attention_variant(B, vs[i]);
        const char *kernel = h3_backend_cuda_attention_kernel(B, &c->o, &c->q, &c->k, &c->v, 32, 32, 64, 0);
        c->id = VP_ATTN;
        attn[i] = time_ms_or_nan(kernel, vp_call, c, 3, 7, 10);
        c->id = VP_BLOCK;
        block[i] = time_ms_or_nan(kernel, vp_call, c, 3, 7, 10);
        h3_backend_cuda_set_attention_variant(B, old);
        printf("  attention forced to %-12s %8.4f ms  %6.1f TFLOP/s; whole block %8.4f ms\n", kernel, attn[i],
               tflops(flop, attn[i]), block[i]);
        fflush(stdout);
    }
    printf("  against mma.sync: wgmma-d64 attention %.2fx, block %.2fx; wgmma-d64-n192 attention %.2fx, block %.2fx\n",
           attn[0] / attn[1], block[0] / block[1], attn[0] / attn[2], block[0] / block[2]);
}

void vae_profile_block(int G) {
    size_t mark = h3_arena_mark(B);
    vae_prof c;
    vp_setup(&c, G);
    vp_op(&c, VP_BLOCK);
    if (bench_ok("vae profile")) {
        double ms[VP_N];
        for (int i = 0; i < VP_N; i++) {
            c.id = i;
            ms[i] = time_ms_or_nan("vae profile", vp_call, &c, 3, 7, 10);
        }
        vp_print(&c, ms);
        vp_kernels(&c);
    }
    h3_arena_reset(B, mark);
}
