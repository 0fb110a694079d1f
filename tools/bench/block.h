/* block.h - one MiniMax-H3 main block written by hand from the ops, in the
 * order of docs/spec/h3-transformer.md §3.7 with the fused RMSNorm+modulate
 * and QK-norm+RoPE ops, as h3_dit runs it; random bf16 weights at the
 * release's shapes. The ops section times it and its parts, the forward
 * section sets the product's forward next to it. */
#ifndef H3_BENCH_BLOCK_H
#define H3_BENCH_BLOCK_H

#include <stdint.h>

#include "backend/h3_backend.h"

typedef struct block_weights {
    h3_tensor wq, wk, wv, wo, w1, w2, norm1, norm2, norm_q, norm_k;
    h3_tensor tab[6]; /* shift1 scale1 gate1 shift2 scale2 gate2, each [TROWS, D] */
} block_weights;

/* The activations of one block at S rows, with the RoPE tables and the rows' table selectors. */
typedef struct block_acts {
    int64_t S;
    h3_tensor x, h, q, k, v, o, y, u, g, sel, cos, sin;
} block_acts;

/* Uniform weights of variance 1/K: unit-variance outputs for unit-variance inputs. */
void block_make_weights(block_weights *w);
/* x random, the rest allocated (uninitialised), the tables filled. */
void block_make_acts(block_acts *a, int64_t S);
/* a->x += the block's update: block_steps in order. */
void block_run(const block_weights *w, block_acts *a);

/* The block's ops one by one (breakdown.c times each in the block and alone). */
#define BLOCK_STEPS 14
typedef struct block_step {
    const char *name;
    void (*run)(const block_weights *w, block_acts *a);
} block_step;
extern const block_step block_steps[BLOCK_STEPS];

#endif
