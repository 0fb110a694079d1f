/* block.c - the hand-written main block (see block.h). */
#include "block.h"

#include <math.h>
#include <stdlib.h>

#include "bench.h"

void block_make_weights(block_weights *w) {
    w->wq = rand2(INNER, D, sqrtf(3.0f / D));
    w->wk = rand2(INNER, D, sqrtf(3.0f / D));
    w->wv = rand2(INNER, D, sqrtf(3.0f / D));
    w->wo = rand2(D, INNER, sqrtf(3.0f / INNER));
    w->w1 = rand2(2 * FFN, D, sqrtf(3.0f / D));
    w->w2 = rand2(D, FFN, sqrtf(3.0f / FFN));
    w->norm1 = rand1(D, 0.8f, 1.2f);
    w->norm2 = rand1(D, 0.8f, 1.2f);
    w->norm_q = rand1(HD, 0.8f, 1.2f);
    w->norm_k = rand1(HD, 0.8f, 1.2f);
    for (int i = 0; i < 6; i++) w->tab[i] = rand2(TROWS, D, i % 3 == 2 ? 0.5f : 0.3f);
}

void block_make_acts(block_acts *a, int64_t S) {
    a->S = S;
    a->x = rand2(S, D, 1.0f);
    a->h = h3_new_2d(B, H3_BF16, S, D);
    a->q = h3_new_2d(B, H3_BF16, S, INNER);
    a->k = h3_new_2d(B, H3_BF16, S, INNER);
    a->v = h3_new_2d(B, H3_BF16, S, INNER);
    a->o = h3_new_2d(B, H3_BF16, S, INNER);
    a->y = h3_new_2d(B, H3_BF16, S, D);
    a->u = h3_new_2d(B, H3_BF16, S, 2 * FFN);
    a->g = h3_new_2d(B, H3_BF16, S, FFN);
    int32_t *sel = malloc((size_t)S * sizeof *sel);
    float *cs = malloc((size_t)S * ROT * sizeof *cs), *sn = malloc((size_t)S * ROT * sizeof *sn);
    for (int64_t s = 0; s < S; s++) {
        sel[s] = (int32_t)((s * 7919) % TROWS);
        for (int j = 0; j < ROT; j++) {
            double ang = (double)(s % 4001) * pow(10000.0, -(double)(j % 48) / 48.0);
            cs[s * ROT + j] = (float)cos(ang);
            sn[s * ROT + j] = (float)sin(ang);
        }
    }
    a->sel = h3_new_1d(B, H3_I32, S);
    a->cos = h3_new_2d(B, H3_F32, S, ROT);
    a->sin = h3_new_2d(B, H3_F32, S, ROT);
    h3_tensor_upload_i32(B, &a->sel, sel, NULL);
    h3_tensor_upload_f32(B, &a->cos, cs, NULL);
    h3_tensor_upload_f32(B, &a->sin, sn, NULL);
    free(sel);
    free(cs);
    free(sn);
}

/* The block's steps, in order (h3-transformer.md §3.7). */
static void step_norm1(const block_weights *w, block_acts *a) {
    h3_op_rms_norm_modulate(B, &a->h, &a->x, &w->norm1, 1e-5f, &w->tab[0], &w->tab[1], &a->sel);
}
static void step_q(const block_weights *w, block_acts *a) { h3_op_linear(B, &a->q, &a->h, &w->wq, NULL); }
static void step_k(const block_weights *w, block_acts *a) { h3_op_linear(B, &a->k, &a->h, &w->wk, NULL); }
static void step_v(const block_weights *w, block_acts *a) { h3_op_linear(B, &a->v, &a->h, &w->wv, NULL); }
static void step_rope_q(const block_weights *w, block_acts *a) {
    h3_op_qk_norm_rope(B, &a->q, &w->norm_q, 1e-5f, &a->cos, &a->sin, NH, HD, ROT);
}
static void step_rope_k(const block_weights *w, block_acts *a) {
    h3_op_qk_norm_rope(B, &a->k, &w->norm_k, 1e-5f, &a->cos, &a->sin, NH, HD, ROT);
}
static void step_attention(const block_weights *w, block_acts *a) {
    (void)w;
    h3_op_attention(B, &a->o, &a->q, &a->k, &a->v, NH, NH, HD, 0, 1.0f / sqrtf((float)HD));
}
static void step_out(const block_weights *w, block_acts *a) { h3_op_linear(B, &a->y, &a->o, &w->wo, NULL); }
static void step_gate1(const block_weights *w, block_acts *a) {
    h3_op_gated_residual(B, &a->x, &w->tab[2], &a->y, &a->sel);
}
static void step_norm2(const block_weights *w, block_acts *a) {
    h3_op_rms_norm_modulate(B, &a->h, &a->x, &w->norm2, 1e-5f, &w->tab[3], &w->tab[4], &a->sel);
}
static void step_fc1(const block_weights *w, block_acts *a) { h3_op_linear(B, &a->u, &a->h, &w->w1, NULL); }
static void step_swiglu(const block_weights *w, block_acts *a) {
    (void)w;
    h3_op_swiglu(B, &a->g, &a->u, 1);
}
static void step_fc2(const block_weights *w, block_acts *a) { h3_op_linear(B, &a->y, &a->g, &w->w2, NULL); }
static void step_gate2(const block_weights *w, block_acts *a) {
    h3_op_gated_residual(B, &a->x, &w->tab[5], &a->y, &a->sel);
}

const block_step block_steps[BLOCK_STEPS] = {
    {"rms_norm+modulate 1", step_norm1}, {"GEMM q", step_q},           {"GEMM k", step_k},
    {"GEMM v", step_v},                  {"qk_norm+rope q", step_rope_q}, {"qk_norm+rope k", step_rope_k},
    {"attention", step_attention},       {"GEMM out", step_out},       {"gated residual 1", step_gate1},
    {"rms_norm+modulate 2", step_norm2}, {"GEMM fc1", step_fc1},       {"swiglu", step_swiglu},
    {"GEMM fc2", step_fc2},              {"gated residual 2", step_gate2},
};

void block_run(const block_weights *w, block_acts *a) {
    for (int i = 0; i < BLOCK_STEPS; i++) block_steps[i].run(w, a);
}
