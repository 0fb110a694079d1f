/* ops.c - the default section: each hot op, the block's GEMMs, attention at
 * S = 34,710 and 37,966, one hand-written DiT block (block.h) and a forward of
 * --blocks of them, at both lengths; then block 0's weights, an input and our
 * output for that block go to --dump-dir and tools/bench/h3_bench_reference.py
 * times torch.matmul (8192³ peak and the block's shapes), SDPA with each
 * backend and an eager PyTorch block from the spec with the same weights, and
 * checks that block against ours. The table gives TFLOP/s, the fraction of
 * the measured GEMM peak and our/reference speed ratios (> 1: we are
 * faster); with --perf-md, one dated row per run is appended there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/h3_backend_cuda_bench.h"
#include "bench.h"
#include "block.h"

struct ops_result {
    double gemm_ms[4], gemm_ref_ms[4];
    double op_ms[6];
    double attn_ms[2], attn_mma_ms, attn_simple_ms, block_ms[2], fwd_ms[2];
    const char *attn_kernel;
};

static const int64_t seqs[2] = {S1, S2};

/* ---- what is timed ------------------------------------------------------------------------------ */

enum {
    OP_RMS_MOD, OP_RMS_MOD_UNFUSED, OP_QK_ROPE, OP_QK_ROPE_UNFUSED, OP_SWIGLU, OP_GATED,
    OP_LIN_Q, OP_LIN_OUT, OP_LIN_FC1, OP_LIN_FC2, OP_ATTN, OP_ATTN_MMA, OP_ATTN_SIMPLE, OP_BLOCK, OP_FORWARD
};

typedef struct op_ctx {
    const block_weights *w;
    int n_blocks;
    block_acts *a;
    int id; /* OP_* */
} op_ctx;

static void attention(block_acts *a) {
    h3_op_attention(B, &a->o, &a->q, &a->k, &a->v, NH, NH, HD, 0, 1.0f / sqrtf((float)HD));
}

static void run_op(void *opaque) {
    op_ctx *c = opaque;
    block_acts *a = c->a;
    const block_weights *w = c->w;
    switch (c->id) {
    case OP_RMS_MOD: h3_op_rms_norm_modulate(B, &a->h, &a->x, &w->norm1, 1e-5f, &w->tab[0], &w->tab[1], &a->sel); break;
    case OP_RMS_MOD_UNFUSED:
        h3_op_rms_norm(B, &a->h, &a->x, &w->norm1, D, 1e-5f);
        h3_op_modulate(B, &a->h, &a->h, &w->tab[0], &w->tab[1], &a->sel);
        break;
    case OP_QK_ROPE: h3_op_qk_norm_rope(B, &a->q, &w->norm_q, 1e-5f, &a->cos, &a->sin, NH, HD, ROT); break;
    case OP_QK_ROPE_UNFUSED:
        h3_op_rms_norm(B, &a->q, &a->q, &w->norm_q, HD, 1e-5f);
        h3_op_rope(B, &a->q, &a->cos, &a->sin, NH, HD, ROT);
        break;
    case OP_SWIGLU: h3_op_swiglu(B, &a->g, &a->u, 1); break;
    case OP_GATED: h3_op_gated_residual(B, &a->x, &w->tab[2], &a->y, &a->sel); break;
    case OP_LIN_Q: h3_op_linear(B, &a->q, &a->h, &w->wq, NULL); break;
    case OP_LIN_OUT: h3_op_linear(B, &a->y, &a->o, &w->wo, NULL); break;
    case OP_LIN_FC1: h3_op_linear(B, &a->u, &a->h, &w->w1, NULL); break;
    case OP_LIN_FC2: h3_op_linear(B, &a->y, &a->g, &w->w2, NULL); break;
    case OP_ATTN: attention(a); break; /* the backend's choice (--attention-variant, else auto) */
    case OP_ATTN_MMA:
    case OP_ATTN_SIMPLE: {
        h3_cuda_attention_variant old = h3_backend_cuda_set_attention_variant(
            B, c->id == OP_ATTN_MMA ? H3_CUDA_VARIANT_MMA : H3_CUDA_VARIANT_WGMMA_SIMPLE);
        attention(a);
        h3_backend_cuda_set_attention_variant(B, old);
        break;
    }
    case OP_BLOCK: block_run(w, a); break;
    case OP_FORWARD:
        for (int i = 0; i < c->n_blocks; i++) block_run(&c->w[i], a);
        break;
    }
}

static double time_op(op_ctx *c, int id, int warmup, int reps) {
    c->id = id;
    return time_ms("ops", run_op, c, warmup, reps, 1);
}

/* ---- the dump for the reference ---------------------------------------------------------------------- */

static int write_tensor(const char *dir, const char *name, const h3_tensor *t) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t n = h3_tensor_nbytes(t);
    void *h = malloc(n);
    int rc = h && cudaMemcpy(h, t->data, n, cudaMemcpyDeviceToHost) == cudaSuccess;
    FILE *f = rc ? fopen(path, "wb") : NULL;
    rc = f && fwrite(h, 1, n, f) == n;
    if (f && fclose(f) != 0) rc = 0;
    free(h);
    if (!rc) fprintf(stderr, "h3-bench: cannot write %s\n", path);
    return rc;
}

/* Block 0's weights, an input and our output of that block, for the
 * reference's parity check. */
static int dump_block(const char *dir, const block_weights *w, block_acts *a) {
    mkdir(dir, 0755);
    size_t mark = h3_arena_mark(B);
    h3_tensor tabs = h3_new_2d(B, H3_BF16, 6 * TROWS, D);
    for (int i = 0; i < 6; i++) {
        h3_tensor dst = h3_tensor_rows_view(&tabs, (int64_t)i * TROWS, TROWS);
        h3_op_copy(B, &dst, &w->tab[i]);
    }
    h3_backend_cuda_fill_uniform(B, &a->x, next_seed(), -1, 1);
    bench_check("dump");
    int rc = write_tensor(dir, "x_in.bin", &a->x);
    block_run(w, a);
    bench_check("dump block");
    rc = rc && write_tensor(dir, "x_out.bin", &a->x) && write_tensor(dir, "wq.bin", &w->wq) &&
         write_tensor(dir, "wk.bin", &w->wk) && write_tensor(dir, "wv.bin", &w->wv) &&
         write_tensor(dir, "wo.bin", &w->wo) && write_tensor(dir, "w1.bin", &w->w1) &&
         write_tensor(dir, "w2.bin", &w->w2) && write_tensor(dir, "norm1.bin", &w->norm1) &&
         write_tensor(dir, "norm2.bin", &w->norm2) && write_tensor(dir, "norm_q.bin", &w->norm_q) &&
         write_tensor(dir, "norm_k.bin", &w->norm_k) && write_tensor(dir, "tables.bin", &tabs) &&
         write_tensor(dir, "sel.bin", &a->sel) && write_tensor(dir, "cos.bin", &a->cos) &&
         write_tensor(dir, "sin.bin", &a->sin);
    char path[4096];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "{\"S\": %lld, \"T\": %d}\n", (long long)a->S, TROWS);
        fclose(f);
    }
    h3_arena_reset(B, mark);
    return rc && f;
}

/* ---- the timings ------------------------------------------------------------------------------------------ */

/* The ops alone, the GEMMs and the other attention kernels, at S1 only. */
static void time_parts(ops_result *r, op_ctx *c, int reps) {
    static const int ops[6] = {OP_RMS_MOD, OP_RMS_MOD_UNFUSED, OP_QK_ROPE, OP_QK_ROPE_UNFUSED, OP_SWIGLU, OP_GATED};
    static const int gemms[4] = {OP_LIN_Q, OP_LIN_OUT, OP_LIN_FC1, OP_LIN_FC2};
    for (int i = 0; i < 6; i++) r->op_ms[i] = time_op(c, ops[i], 2, reps);
    for (int i = 0; i < 4; i++) r->gemm_ms[i] = time_op(c, gemms[i], 2, reps);
    r->attn_mma_ms = time_op(c, OP_ATTN_MMA, 1, reps);
    r->attn_simple_ms = time_op(c, OP_ATTN_SIMPLE, 1, reps);
    block_acts *a = c->a;
    r->attn_kernel = h3_backend_cuda_attention_kernel(B, &a->o, &a->q, &a->k, &a->v, NH, NH, HD, 0);
}

/* Everything at one length; the dump after the first. */
static void time_length(const bench_options *o, ops_result *r, const block_weights *w, int si) {
    size_t mark = h3_arena_mark(B);
    block_acts a;
    block_make_acts(&a, seqs[si]);
    /* q/k/v/o/u/g hold random data for the ops timed alone */
    h3_tensor *fill[8] = {&a.h, &a.q, &a.k, &a.v, &a.o, &a.u, &a.g, &a.y};
    const float range[8] = {2, 2, 2, 1, 1, 2, 1, 1};
    for (int i = 0; i < 8; i++) h3_backend_cuda_fill_uniform(B, fill[i], next_seed(), -range[i], range[i]);
    op_ctx c = {w, o->blocks, &a, 0};
    if (si == 0) time_parts(r, &c, o->reps);
    r->attn_ms[si] = time_op(&c, OP_ATTN, 1, o->reps);
    r->block_ms[si] = time_op(&c, OP_BLOCK, 1, o->reps);
    printf("S %lld: attention %.2f ms, block %.2f ms; forward of %d blocks...\n", (long long)seqs[si], r->attn_ms[si],
           r->block_ms[si], o->blocks);
    fflush(stdout);
    r->fwd_ms[si] = time_op(&c, OP_FORWARD, 0, o->forward_reps);
    if (si == 0 && strcmp(o->reference, "none") != 0 && !dump_block(o->dump_dir, &w[0], &a))
        fprintf(stderr, "h3-bench: dump failed; the reference runs without parity\n");
    h3_arena_reset(B, mark);
}

ops_result *ops_bench(const bench_options *o) {
    ops_result *r = calloc(1, sizeof *r);
    block_weights *w = calloc((size_t)o->blocks, sizeof *w);
    if (!r || !w) {
        fprintf(stderr, "h3-bench: out of host memory\n");
        exit(1);
    }
    /* The weights stay in the backend's arena for the rest of the run, as they always did. */
    for (int i = 0; i < o->blocks; i++) block_make_weights(&w[i]);
    bench_check("weights");
    for (int si = 0; si < 2; si++) time_length(o, r, w, si);
    free(w);
    return r;
}

double ops_block_ms(const ops_result *r) { return r->block_ms[0]; }
double ops_forward_ms(const ops_result *r) { return r->fwd_ms[0]; }
void ops_free(ops_result *r) { free(r); }

/* ---- the reference and the table --------------------------------------------------------------------------- */

static const char *const backends[3] = {"flash", "cudnn", "efficient"};

/* What the reference measured, in the terms of the table. */
typedef struct ref_view {
    JsonNode *root;
    double peak, best_sdpa[2], fwd_est[2];
    const char *best_name[2];
    double gemm_sum, gemm_ref_sum;
} ref_view;

static JsonNode *run_reference(const bench_options *o) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s --dump %s --seq %d,%d --reps %d 2>&1", o->python, o->reference, o->dump_dir, S1,
             S2, o->reps);
    return run_python_json(cmd, "H3REF ");
}

static void read_reference(const bench_options *o, ops_result *r, ref_view *v) {
    v->root = strcmp(o->reference, "none") ? run_reference(o) : NULL;
    v->peak = ref_num(v->root, "gemm_peak_tflops");
    const char *gnames[4] = {"q", "out", "fc1", "fc2"};
    char key[128];
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof key, "linear.%s.ms", gnames[i]);
        r->gemm_ref_ms[i] = ref_num(v->root, key);
    }
    for (int si = 0; si < 2; si++) {
        v->best_sdpa[si] = NAN;
        v->best_name[si] = "-";
        for (int bi = 0; bi < 3; bi++) {
            snprintf(key, sizeof key, "sdpa.%lld.%s.ms", (long long)seqs[si], backends[bi]);
            double ms = ref_num(v->root, key);
            if (!isnan(ms) && (isnan(v->best_sdpa[si]) || ms < v->best_sdpa[si])) {
                v->best_sdpa[si] = ms;
                v->best_name[si] = backends[bi];
            }
        }
    }
}

static void print_gemms(const ops_result *r, ref_view *v) {
    const char *gnames[4] = {"q", "out", "fc1", "fc2"};
    const int64_t gN[4] = {INNER, D, 2 * FFN, D}, gK[4] = {D, INNER, D, FFN};
    v->gemm_sum = v->gemm_ref_sum = 0;
    for (int i = 0; i < 4; i++) {
        double f = 2.0 * S1 * gN[i] * gK[i];
        char n[96];
        snprintf(n, sizeof n, "GEMM %-3s %dx%lld->%lld", gnames[i], S1, (long long)gK[i], (long long)gN[i]);
        printf("%-44s %10.3f %9.1f %7.1f%% %10.3f %10.1f %7.3fx\n", n, r->gemm_ms[i], tflops(f, r->gemm_ms[i]),
               100 * tflops(f, r->gemm_ms[i]) / v->peak, r->gemm_ref_ms[i], tflops(f, r->gemm_ref_ms[i]),
               r->gemm_ref_ms[i] / r->gemm_ms[i]);
        v->gemm_sum += r->gemm_ms[i];
        v->gemm_ref_sum += r->gemm_ref_ms[i];
    }
}

static void print_elementwise(const ops_result *r) {
    const char *onames[6] = {"rms_norm+modulate fused [S,D]", "rms_norm, modulate unfused [S,D]",
                             "qk_norm+rope fused [S,56x128]", "rms_norm(head), rope unfused", "swiglu [S,28672]->[S,14336]",
                             "gated_residual [S,D]"};
    /* bytes each op must move at least (bf16 reads + writes) */
    double obytes[6] = {2.0 * S1 * D * 2, 2.0 * S1 * D * 2, 2.0 * S1 * INNER * 2, 2.0 * S1 * INNER * 2,
                        3.0 * S1 * FFN * 2, 3.0 * S1 * D * 2};
    for (int i = 0; i < 6; i++)
        printf("%-44s %10.3f %9s %8s   %.0f GB/s\n", onames[i], r->op_ms[i], "", "", obytes[i] / r->op_ms[i] / 1e6);
}

static void print_attention(const ops_result *r, const ref_view *v) {
    char key[128], n[96];
    for (int si = 0; si < 2; si++) {
        double f = 4.0 * seqs[si] * seqs[si] * INNER;
        snprintf(n, sizeof n, "attention S=%lld [%s] vs SDPA %s", (long long)seqs[si], r->attn_kernel, v->best_name[si]);
        printf("%-44s %10.3f %9.1f %7.1f%% %10.3f %10.1f %7.3fx\n", n, r->attn_ms[si], tflops(f, r->attn_ms[si]),
               100 * tflops(f, r->attn_ms[si]) / v->peak, v->best_sdpa[si], tflops(f, v->best_sdpa[si]),
               v->best_sdpa[si] / r->attn_ms[si]);
        for (int bi = 0; bi < 3; bi++) {
            snprintf(key, sizeof key, "sdpa.%lld.%s.ms", (long long)seqs[si], backends[bi]);
            double ms = ref_num(v->root, key);
            snprintf(n, sizeof n, "  SDPA %s S=%lld", backends[bi], (long long)seqs[si]);
            printf("%-44s %10s %9s %8s %10.3f %10.1f\n", n, "", "", "", ms, tflops(f, ms));
        }
        if (si == 0) {
            printf("%-44s %10.3f %9.1f %7.1f%%\n", "attention S=34710 [mma.sync, portable]", r->attn_mma_ms,
                   tflops(f, r->attn_mma_ms), 100 * tflops(f, r->attn_mma_ms) / v->peak);
            printf("%-44s %10.3f %9.1f %7.1f%%\n", "attention S=34710 [wgmma-simple, first version]",
                   r->attn_simple_ms, tflops(f, r->attn_simple_ms), 100 * tflops(f, r->attn_simple_ms) / v->peak);
        }
    }
}

static void print_blocks(const bench_options *o, const ops_result *r, ref_view *v) {
    char key[128], n[96];
    for (int si = 0; si < 2; si++) {
        double S = (double)seqs[si], f = LINEAR_FLOP_PER_TOKEN * S + 4.0 * S * S * INNER;
        snprintf(key, sizeof key, "block.%lld.ms", (long long)seqs[si]);
        double ref_ms = ref_num(v->root, key);
        snprintf(n, sizeof n, "DiT block S=%lld vs eager torch", (long long)seqs[si]);
        printf("%-44s %10.3f %9.1f %7.1f%% %10.3f %10.1f %7.3fx\n", n, r->block_ms[si], tflops(f, r->block_ms[si]),
               100 * tflops(f, r->block_ms[si]) / v->peak, ref_ms, tflops(f, ref_ms), ref_ms / r->block_ms[si]);
        v->fwd_est[si] = r->fwd_ms[si] / o->blocks * 50;
        snprintf(n, sizeof n, "forward %d blocks S=%lld (50-block est.)", o->blocks, (long long)seqs[si]);
        printf("%-44s %10.1f %9.1f %7.1f%%   50 blocks: %.2f s (eager torch est. %.2f s)\n", n, r->fwd_ms[si],
               tflops(f * o->blocks, r->fwd_ms[si]), 100 * tflops(f * o->blocks, r->fwd_ms[si]) / v->peak,
               v->fwd_est[si] / 1e3, ref_ms * 50 / 1e3);
    }
}

/* One dated row of the table in PERFORMANCE.md. */
static void record_row(const bench_options *o, const ops_result *r, const ref_view *v, const char *gpu, double par) {
    char date[32], row[1024];
    perf_date(date, sizeof date);
    double fa = 4.0 * S1 * (double)S1 * INNER, ref_block = ref_num(v->root, "block.34710.ms");
    snprintf(row, sizeof row,
             "| %s | %s | %s | %d | %.0f | %.3f | %.0f (%s) | %.0f (%s) | %.2f | %.1f | %.1f | %.2f | %.2f / %.2f | "
             "%.2e |\n",
             date, gpu, o->commit, o->blocks, v->peak, v->gemm_ref_sum / v->gemm_sum, tflops(fa, r->attn_ms[0]),
             r->attn_kernel, tflops(fa, v->best_sdpa[0]), v->best_name[0], v->best_sdpa[0] / r->attn_ms[0],
             r->block_ms[0], ref_block, ref_block / r->block_ms[0], v->fwd_est[0] / 1e3, v->fwd_est[1] / 1e3, par);
    if (perf_append(o->perf_md, row)) printf("appended a row to %s\n", o->perf_md);
    else fprintf(stderr, "h3-bench: cannot append to %s\n", o->perf_md);
}

void ops_report(const bench_options *o, const ops_result *res, const char *gpu) {
    ops_result r = *res; /* the reference's GEMM times join ours */
    ref_view v;
    read_reference(o, &r, &v);
    printf("\n%-44s %10s %9s %8s %10s %10s %8s\n", "", "ours ms", "TFLOP/s", "of peak", "torch ms", "torch TF/s",
           "speedup");
    print_gemms(&r, &v);
    print_elementwise(&r);
    print_attention(&r, &v);
    print_blocks(o, &r, &v);
    double par = ref_num(v.root, "parity.rel_l2_block_update"), par_out = ref_num(v.root, "parity.rel_l2_block_output");
    printf("GEMM peak (torch.matmul 8192^3 bf16): %.1f TFLOP/s; block GEMMs ours/torch time %.3f\n", v.peak,
           v.gemm_sum / v.gemm_ref_sum);
    printf("parity vs eager torch block (S=%d): rel L2 of the block update %.2e, of the output %.2e%s\n", S1, par,
           par_out, par > 2e-2 ? "  (LARGE)" : "");
    if (o->perf_md) record_row(o, &r, &v, gpu, par);
    if (v.root) json_node_unref(v.root);
}
