/* breakdown.c - --breakdown only: where the hand-written block's time goes
 * (issue 18 §2: "the ~7 ms per block lost between ops").
 *
 * Each of the block's 14 ops (block_steps) is timed three ways at S = 34,710:
 *  - in the block: CUDA events between every op of --blocks consecutive
 *    blocks run back to back, as the forward runs them;
 *  - alone, warm: the op launched again and again on its own inputs (what
 *    the ops table reports), so L2 holds what it reads;
 *  - alone, cold: the same, after a 512 MB write that flushes L2 (50 MB on
 *    the H200) between launches, as in the block where the op before wrote
 *    other tensors.
 * The block's loss is in-block minus warm. Where cold ≈ in-block, the loss is
 * L2 state (nothing a kernel can keep); where in-block exceeds even cold, the
 * GPU runs slower under the block's sustained load (clocks and power: run
 * nvidia-smi beside it). Events cost about 2 µs each; their sum is given
 * next to the block timed with events only at its ends. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/h3_backend_cuda_bench.h"
#include "bench.h"
#include "block.h"

#define BD_MAX_BLOCKS 8
#define BD_FLUSH_BYTES ((size_t)512 << 20)

typedef struct step_ctx {
    const block_weights *w;
    block_acts *a;
    int step;
} step_ctx;

static void run_step(void *opaque) {
    step_ctx *c = opaque;
    block_steps[c->step].run(c->w, c->a);
}

/* Median over reps of each op's time inside n back-to-back blocks (events between all ops); block_ms: the
 * median of the whole n blocks over n, events at the ends only. */
static void time_in_block(const block_weights *w, block_acts *a, int n, int reps, double in_ms[BLOCK_STEPS],
                          double *block_ms) {
    cudaStream_t s = (cudaStream_t)h3_backend_cuda_stream(B);
    int ne = n * BLOCK_STEPS + 1;
    cudaEvent_t *ev = calloc((size_t)ne, sizeof *ev);
    double *t = calloc((size_t)(reps * n) * BLOCK_STEPS, sizeof *t), *whole = calloc((size_t)reps, sizeof *whole);
    for (int i = 0; i < ne; i++) cudaEventCreate(&ev[i]);
    for (int r = 0; r < reps; r++) {
        cudaEventRecord(ev[0], s);
        for (int b = 0; b < n; b++)
            for (int i = 0; i < BLOCK_STEPS; i++) {
                block_steps[i].run(w, a);
                cudaEventRecord(ev[b * BLOCK_STEPS + i + 1], s);
            }
        cudaEventSynchronize(ev[ne - 1]);
        for (int b = 0; b < n; b++)
            for (int i = 0; i < BLOCK_STEPS; i++) {
                float ms = 0;
                cudaEventElapsedTime(&ms, ev[b * BLOCK_STEPS + i], ev[b * BLOCK_STEPS + i + 1]);
                t[(size_t)i * reps * n + (size_t)r * n + b] = ms;
            }
        float all = 0;
        cudaEventElapsedTime(&all, ev[0], ev[ne - 1]);
        whole[r] = all / n;
    }
    for (int i = 0; i < BLOCK_STEPS; i++) in_ms[i] = median(t + (size_t)i * reps * n, reps * n);
    *block_ms = median(whole, reps);
    for (int i = 0; i < ne; i++) cudaEventDestroy(ev[i]);
    free(ev);
    free(t);
    free(whole);
}

/* Median over reps of one op launched alone, after a write of flush_bytes to flush (0: none, L2 warm). */
static double time_alone(step_ctx *c, void *flush, size_t flush_bytes, int reps) {
    if (!flush) return time_ms(block_steps[c->step].name, run_step, c, 2, reps, 1);
    cudaStream_t s = (cudaStream_t)h3_backend_cuda_stream(B);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double t[64];
    if (reps > 64) reps = 64;
    run_step(c);
    for (int r = 0; r < reps; r++) {
        cudaMemsetAsync(flush, r & 0xff, flush_bytes, s);
        cudaEventRecord(e0, s);
        run_step(c);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        t[r] = ms;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return upper_median(t, reps);
}

/* The wall clock (UTC), to line the phases up with nvidia-smi's clock and power log beside the run. */
static void stamp(const char *phase) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    printf("breakdown: %s at %02d:%02d:%02d.%03ld UTC\n", phase, tm.tm_hour, tm.tm_min, tm.tm_sec,
           ts.tv_nsec / 1000000);
    fflush(stdout);
}

static void print_breakdown(const double *in, const double *warm, const double *cold, double block_ms, int n) {
    double sum_in = 0, sum_warm = 0, sum_cold = 0;
    printf("\nblock breakdown at S %lld (%d blocks back to back; ms, median):\n", (long long)S1, n);
    printf("%-22s %10s %10s %10s %10s %10s\n", "op", "in block", "alone", "cold L2", "lost", "lost-cold");
    for (int i = 0; i < BLOCK_STEPS; i++) {
        printf("%-22s %10.3f %10.3f %10.3f %10.3f %10.3f\n", block_steps[i].name, in[i], warm[i], cold[i],
               in[i] - warm[i], in[i] - cold[i]);
        sum_in += in[i];
        sum_warm += warm[i];
        sum_cold += cold[i];
    }
    printf("%-22s %10.3f %10.3f %10.3f %10.3f %10.3f\n", "sum", sum_in, sum_warm, sum_cold, sum_in - sum_warm,
           sum_in - sum_cold);
    printf("block timed at its ends only: %.3f ms (events between ops add %.3f ms); lost to running back to back: "
           "%.2f ms a block (%.1f%%), of which L2 state explains %.2f ms\n",
           block_ms, sum_in - block_ms, block_ms - sum_warm, 100.0 * (block_ms - sum_warm) / block_ms,
           sum_cold - sum_warm);
    fflush(stdout);
}

int breakdown_bench(const bench_options *o) {
    int n = o->blocks < BD_MAX_BLOCKS ? o->blocks : BD_MAX_BLOCKS;
    size_t mark = h3_arena_mark(B);
    block_weights w;
    block_make_weights(&w);
    block_acts a;
    block_make_acts(&a, S1);
    h3_tensor *fill[8] = {&a.h, &a.q, &a.k, &a.v, &a.o, &a.u, &a.g, &a.y};
    const float range[8] = {2, 2, 2, 1, 1, 2, 1, 1};
    for (int i = 0; i < 8; i++) h3_backend_cuda_fill_uniform(B, fill[i], next_seed(), -range[i], range[i]);
    void *flush = NULL;
    if (!bench_ok("breakdown inputs") || cudaMalloc(&flush, BD_FLUSH_BYTES) != cudaSuccess) {
        fprintf(stderr, "h3-bench: breakdown: no device memory for its inputs\n");
        h3_arena_reset(B, mark);
        return 0;
    }
    printf("block breakdown: %d block(s) back to back, %d reps, S %lld\n", n, o->reps, (long long)S1);
    fflush(stdout);
    for (int i = 0; i < 2; i++) block_run(&w, &a); /* warm-up */
    double in[BLOCK_STEPS], warm[BLOCK_STEPS], cold[BLOCK_STEPS], block_ms = NAN;
    stamp("in-block timing starts");
    time_in_block(&w, &a, n, o->reps, in, &block_ms);
    stamp("in-block timing ends; the ops alone start");
    step_ctx c = {&w, &a, 0};
    for (int i = 0; i < BLOCK_STEPS; i++) {
        c.step = i;
        warm[i] = time_alone(&c, NULL, 0, o->reps);
        cold[i] = time_alone(&c, flush, BD_FLUSH_BYTES, o->reps);
    }
    stamp("the ops alone end");
    int ok = bench_ok("breakdown");
    if (ok) print_breakdown(in, warm, cold, block_ms, n);
    cudaFree(flush);
    h3_arena_reset(B, mark);
    return ok;
}
