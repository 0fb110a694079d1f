/* h3-bench - times the CUDA backend at the full MiniMax-H3 configuration and
 * compares it, in the same run, with PyTorch on the same GPU.
 *
 * Random bf16 weights for --blocks of the 50 main blocks (D 5376, 56 × 128,
 * SwiGLU 14336) are drawn on the device. Everything is timed with CUDA
 * events on the backend's stream after warm-up; medians are reported:
 * each hot op, the block's GEMMs, attention at S = 34,710 and 37,966, one
 * DiT block, and a forward through the blocks at 1280×736×124 (S = 34,710)
 * and 1344×768×124 (S = 37,966). The block is built from ops in the order
 * of h3-transformer.md §3.7, with the fused RMSNorm+modulate and
 * QK-norm+RoPE ops; h3_dit only loads real checkpoints, and a random one
 * would be 62 GB.
 *
 * Then it dumps block 0's weights, an input and our output for that block
 * to --dump-dir and runs tools/h3_bench_reference.py, which times
 * torch.matmul (8192³ peak and the block's shapes), SDPA with each backend
 * and an eager PyTorch block from the spec with the same weights, and
 * checks that block against ours. The table gives TFLOP/s, the fraction of
 * the measured GEMM peak and our/reference speed ratios (> 1: we are
 * faster); one dated row per run is appended to --perf-md.
 *
 * Last (--vsa on, the default; --vsa only runs this part alone), VSA-H3:
 * h3_op_vsa_attention against our dense attention at the spec's shapes
 * (1280×736×124 and 1344×768 at 10 s and 15 s), with useful TFLOP/s and a
 * stage breakdown; rows go to the VSA table of --perf-md. */
#include <cuda_runtime_api.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "h3_backend.h"
#include "h3_backend_cuda.h"
#include "h3_vsa.h"

#define D 5376
#define NH 56
#define HD 128
#define INNER (NH * HD)
#define FFN 14336
#define ROT 96
#define TROWS 6 /* AdaLN table rows: 3 modalities × 2 timesteps */
#define S1 34710 /* 1280×736×124, L = 256 */
#define S2 37966 /* 1344×768×124 */
#define LINEAR_FLOP_PER_TOKEN 770703360.0

typedef struct block_weights {
    h3_tensor wq, wk, wv, wo, w1, w2, norm1, norm2, norm_q, norm_k;
    h3_tensor tab[6]; /* shift1 scale1 gate1 shift2 scale2 gate2, each [TROWS, D] */
} block_weights;

typedef struct acts {
    int64_t S;
    h3_tensor x, h, q, k, v, o, y, u, g, sel, cos, sin;
} acts;

typedef struct options {
    int blocks, reps, forward_reps;
    int vsa; /* --vsa: 0 off, 1 on (default), 2 only */
    const char *commit, *perf_md, *reference, *python, *dump_dir;
} options;

static h3_backend *B;
static uint64_t seed = 1;

static void die_if_failed(const char *where) {
    h3_status st;
    if (h3_backend_synchronize(B, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: %s: %s\n", where, st.message);
        exit(1);
    }
}

static h3_tensor rand2(int64_t rows, int64_t cols, float a) {
    h3_tensor t = h3_new_2d(B, H3_BF16, rows, cols);
    h3_backend_cuda_fill_uniform(B, &t, seed++, -a, a);
    return t;
}

static h3_tensor rand1(int64_t n, float lo, float hi) {
    h3_tensor t = h3_new_1d(B, H3_BF16, n);
    h3_backend_cuda_fill_uniform(B, &t, seed++, lo, hi);
    return t;
}

/* Uniform weights of variance 1/K: unit-variance outputs for unit-variance inputs. */
static void make_block(block_weights *w) {
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

static void make_acts(acts *a, int64_t S) {
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

/* One main block, h3-transformer.md §3.7. */
static void run_block(block_weights *w, acts *a) {
    h3_op_rms_norm_modulate(B, &a->h, &a->x, &w->norm1, 1e-5f, &w->tab[0], &w->tab[1], &a->sel);
    h3_op_linear(B, &a->q, &a->h, &w->wq, NULL);
    h3_op_linear(B, &a->k, &a->h, &w->wk, NULL);
    h3_op_linear(B, &a->v, &a->h, &w->wv, NULL);
    h3_op_qk_norm_rope(B, &a->q, &w->norm_q, 1e-5f, &a->cos, &a->sin, NH, HD, ROT);
    h3_op_qk_norm_rope(B, &a->k, &w->norm_k, 1e-5f, &a->cos, &a->sin, NH, HD, ROT);
    h3_op_attention(B, &a->o, &a->q, &a->k, &a->v, NH, NH, HD, 0, 1.0f / sqrtf((float)HD));
    h3_op_linear(B, &a->y, &a->o, &w->wo, NULL);
    h3_op_gated_residual(B, &a->x, &w->tab[2], &a->y, &a->sel);
    h3_op_rms_norm_modulate(B, &a->h, &a->x, &w->norm2, 1e-5f, &w->tab[3], &w->tab[4], &a->sel);
    h3_op_linear(B, &a->u, &a->h, &w->w1, NULL);
    h3_op_swiglu(B, &a->g, &a->u, 1);
    h3_op_linear(B, &a->y, &a->g, &w->w2, NULL);
    h3_op_gated_residual(B, &a->x, &w->tab[5], &a->y, &a->sel);
}

/* ---- timing ------------------------------------------------------------------------ */

enum {
    OP_RMS_MOD, OP_RMS_MOD_UNFUSED, OP_QK_ROPE, OP_QK_ROPE_UNFUSED, OP_SWIGLU, OP_GATED,
    OP_LIN_Q, OP_LIN_OUT, OP_LIN_FC1, OP_LIN_FC2, OP_ATTN, OP_ATTN_MMA, OP_ATTN_SIMPLE, OP_BLOCK, OP_FORWARD
};

typedef struct ctx {
    block_weights *w;
    int n_blocks;
    acts *a;
} ctx;

static void run(ctx *c, int id) {
    acts *a = c->a;
    block_weights *w = c->w;
    switch (id) {
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
    case OP_ATTN: /* the backend's choice (H3_CUDA_ATTENTION or auto) */
        h3_op_attention(B, &a->o, &a->q, &a->k, &a->v, NH, NH, HD, 0, 1.0f / sqrtf((float)HD));
        break;
    case OP_ATTN_MMA:
    case OP_ATTN_SIMPLE: {
        h3_cuda_attention_path old = h3_backend_cuda_set_attention_path(
            B, id == OP_ATTN_MMA ? H3_CUDA_ATTENTION_MMA : H3_CUDA_ATTENTION_WGMMA_SIMPLE);
        h3_op_attention(B, &a->o, &a->q, &a->k, &a->v, NH, NH, HD, 0, 1.0f / sqrtf((float)HD));
        h3_backend_cuda_set_attention_path(B, old);
        break;
    }
    case OP_BLOCK: run_block(w, a); break;
    case OP_FORWARD:
        for (int i = 0; i < c->n_blocks; i++) run_block(&c->w[i], a);
        break;
    }
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* Median milliseconds of `reps` runs after `warmup`, CUDA events on the backend's stream. */
static double time_ms(ctx *c, int id, int warmup, int reps) {
    cudaStream_t s = (cudaStream_t)h3_backend_cuda_stream(B);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < warmup; i++) run(c, id);
    die_if_failed("warm-up");
    double t[64];
    if (reps > 64) reps = 64;
    for (int i = 0; i < reps; i++) {
        cudaEventRecord(e0, s);
        run(c, id);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        t[i] = ms;
    }
    die_if_failed("timing");
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    return t[reps / 2];
}

/* ---- dump for the reference ------------------------------------------------------------ */

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
static int dump_block(const char *dir, block_weights *w, acts *a) {
    mkdir(dir, 0755);
    size_t mark = h3_arena_mark(B);
    h3_tensor tabs = h3_new_2d(B, H3_BF16, 6 * TROWS, D);
    for (int i = 0; i < 6; i++) {
        h3_tensor dst = h3_tensor_rows_view(&tabs, (int64_t)i * TROWS, TROWS);
        h3_op_copy(B, &dst, &w->tab[i]);
    }
    h3_backend_cuda_fill_uniform(B, &a->x, seed++, -1, 1);
    die_if_failed("dump");
    int rc = write_tensor(dir, "x_in.bin", &a->x);
    run_block(w, a);
    die_if_failed("dump block");
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

/* Runs the reference script; returns its H3REF JSON object (or NULL). */
static JsonNode *run_reference(const options *o) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s --dump %s --seq %d,%d --reps %d 2>&1", o->python, o->reference, o->dump_dir, S1,
             S2, o->reps);
    printf("reference: %s\n", cmd);
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    char *line = NULL;
    size_t cap = 0;
    JsonNode *res = NULL;
    while (getline(&line, &cap, p) > 0) {
        if (!strncmp(line, "H3REF ", 6)) {
            JsonParser *parser = json_parser_new();
            if (json_parser_load_from_data(parser, line + 6, -1, NULL)) res = json_node_copy(json_parser_get_root(parser));
            g_object_unref(parser);
        } else {
            printf("  [torch] %s", line);
        }
    }
    free(line);
    int rc = pclose(p);
    if (rc != 0) printf("reference exited with status %d\n", rc);
    return res;
}

/* A number at a dotted path of the reference JSON; NAN when absent. */
static double ref_num(JsonNode *root, const char *path) {
    if (!root) return NAN;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    JsonNode *n = root;
    for (char *tok = strtok(buf, "."); tok; tok = strtok(NULL, ".")) {
        if (!n || !JSON_NODE_HOLDS_OBJECT(n)) return NAN;
        JsonObject *obj = json_node_get_object(n);
        if (!json_object_has_member(obj, tok)) return NAN;
        n = json_object_get_member(obj, tok);
    }
    return n && JSON_NODE_HOLDS_VALUE(n) ? json_node_get_double(n) : NAN;
}

/* ---- report --------------------------------------------------------------------------------- */

typedef struct result {
    double gemm_ms[4], gemm_ref_ms[4];
    double op_ms[6];
    double attn_ms[2], attn_mma_ms, attn_simple_ms, block_ms[2], fwd_ms[2];
    const char *attn_kernel;
} result;

static double tflops(double flop, double ms) { return flop / ms / 1e9; }

/* ---- VSA-H3 (h3_op_vsa_attention) against our dense attention ------------------------------------
 * At the spec's shapes (fasth3-vsa.md §3.9: text 256, 64-row tiles, sparsity 0.9): 1280×736×124
 * (the reference: 611 tiles = 11 prefix + 600 video, k = 60), and the 10 s and 15 s clips at
 * 1344×768 (243 and 362 frames). Each shape times our dense attention and the VSA op (with the
 * gate, i.e. everything the DiT runs; without it; and at the reference shape the portable mma.sync
 * kernel), and once with stage timing. Useful FLOPs count only valid query rows × valid keys of
 * the selected tiles (4·dh per pair, from the op's own key lists), so useful TFLOP/s compares with
 * the dense kernel's 4·S²·H·dh. */

typedef struct vsa_case {
    const char *label;
    int64_t text, audio, T, h, w;
} vsa_case;

static const vsa_case vsa_cases[] = {
    {"1280x736x124 (5 s)", 256, 414, 37, 23, 40},
    {"1344x768x243 (10 s)", 256, 810, 72, 24, 42},
    {"1344x768x362 (15 s)", 256, 1206, 107, 24, 42},
};
#define N_VSA_CASES 3

typedef struct vsa_result {
    int ok;
    int64_t S, n, P, k;
    double dense_ms, vsa_ms, nogate_ms, mma_ms, stage_ms[3];
    double alt_ms, alt_fine_ms; /* the other consumer of the Hopper kernel (pipelined or not) */
    const char *alt_kernel;
    double useful_flop, dense_flop;
    const char *kernel;
    int ctas;
} vsa_result;

enum { VSA_DENSE, VSA_GATE, VSA_NOGATE, VSA_MMA, VSA_ALT };

typedef struct vsa_ctx {
    h3_tensor q, k, v, g, o;
    h3_vsa_tiles t;
} vsa_ctx;

static void vsa_run(vsa_ctx *c, int what) {
    switch (what) {
    case VSA_DENSE: h3_op_attention(B, &c->o, &c->q, &c->k, &c->v, NH, NH, HD, 0, 1.0f / sqrtf((float)HD)); break;
    case VSA_GATE: h3_op_vsa_attention(B, &c->o, &c->q, &c->k, &c->v, &c->g, &c->t, NH, HD); break;
    case VSA_NOGATE: h3_op_vsa_attention(B, &c->o, &c->q, &c->k, &c->v, NULL, &c->t, NH, HD); break;
    case VSA_ALT: { /* the Hopper kernel with its other consumer */
        int old = h3_backend_cuda_set_vsa_pipelined(B, 1);
        h3_backend_cuda_set_vsa_pipelined(B, !old);
        h3_op_vsa_attention(B, &c->o, &c->q, &c->k, &c->v, &c->g, &c->t, NH, HD);
        h3_backend_cuda_set_vsa_pipelined(B, old);
        break;
    }
    default: {
        h3_cuda_attention_path old = h3_backend_cuda_set_attention_path(B, H3_CUDA_ATTENTION_MMA);
        h3_op_vsa_attention(B, &c->o, &c->q, &c->k, &c->v, &c->g, &c->t, NH, HD);
        h3_backend_cuda_set_attention_path(B, old);
    }
    }
}

/* A failure in the VSA section is reported and cleared, not fatal: the dense numbers measured
 * before it still get reported. */
static int vsa_ok(const char *where) {
    h3_status st;
    if (h3_backend_synchronize(B, &st) == H3_OK) return 1;
    fprintf(stderr, "h3-bench: vsa %s: %s\n", where, st.message);
    h3_backend_clear_error(B);
    return 0;
}

/* Median milliseconds of `reps` runs after `warmup`, as time_ms; NAN on failure. */
static double vsa_time(vsa_ctx *c, int what, int warmup, int reps) {
    cudaStream_t s = (cudaStream_t)h3_backend_cuda_stream(B);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < warmup; i++) vsa_run(c, what);
    if (!vsa_ok("warm-up")) {
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        return NAN;
    }
    double t[64];
    if (reps > 64) reps = 64;
    for (int i = 0; i < reps; i++) {
        cudaEventRecord(e0, s);
        vsa_run(c, what);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        t[i] = ms;
    }
    int good = vsa_ok("timing");
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    return good ? t[reps / 2] : NAN;
}

/* 4·dh·Σ (valid query rows × valid keys attended), over heads, from the lists of the last call. */
static double vsa_useful_flop(const h3_vsa_plan *pl) {
    int64_t n = pl->num_tiles, P = pl->num_prefix_tiles, L = P + pl->topk;
    size_t len = (size_t)NH * (size_t)((n - P) * L);
    int32_t *lists = malloc(len * sizeof *lists);
    h3_status st;
    if (!lists || h3_backend_cuda_vsa_inspect(B, lists, len, NULL, 0, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: vsa lists: %s\n", lists ? st.message : "out of memory");
        free(lists);
        return NAN;
    }
    double pairs = 0;
    for (int h = 0; h < NH; h++) {
        for (int64_t qt = 0; qt < P; qt++) pairs += (double)pl->tile_sizes[qt] * (double)pl->seq_len;
        for (int64_t qt = P; qt < n; qt++) {
            const int32_t *list = lists + ((int64_t)h * (n - P) + (qt - P)) * L;
            double keys = 0;
            for (int64_t e = 0; e < L; e++) keys += pl->tile_sizes[list[e]];
            pairs += (double)pl->tile_sizes[qt] * keys;
        }
    }
    free(lists);
    return 4.0 * HD * pairs;
}

static void bench_vsa(const options *o, vsa_result *res) {
    h3_status st;
    for (int ci = 0; ci < N_VSA_CASES; ci++) {
        const vsa_case *vc = &vsa_cases[ci];
        vsa_result *r = &res[ci];
        memset(r, 0, sizeof *r);
        h3_vsa_params p = h3_vsa_params_default();
        int64_t seg[3] = {vc->text, 0, vc->audio};
        h3_vsa_plan *pl = NULL;
        if (h3_vsa_plan_make(seg, 3, vc->T, vc->h, vc->w, &p, &pl, &st) != H3_OK) {
            fprintf(stderr, "h3-bench: vsa plan %s: %s\n", vc->label, st.message);
            continue;
        }
        size_t mark = h3_arena_mark(B);
        int64_t S = pl->seq_len;
        vsa_ctx c;
        c.q = rand2(S, INNER, 2.0f);
        c.k = rand2(S, INNER, 2.0f);
        c.v = rand2(S, INNER, 1.0f);
        c.g = rand2(S, INNER, 1.0f);
        c.o = h3_new_2d(B, H3_BF16, S, INNER);
        c.t = (h3_vsa_tiles){.num_tiles = pl->num_tiles, .num_prefix_tiles = pl->num_prefix_tiles, .topk = pl->topk,
                             .tile_elems = pl->tile_elems};
        c.t.tile_sizes = h3_new_1d(B, H3_I32, pl->num_tiles);
        c.t.tile_order = h3_new_1d(B, H3_I32, S);
        c.t.untile_index = h3_new_1d(B, H3_I32, S);
        h3_tensor_upload_i32(B, &c.t.tile_sizes, pl->tile_sizes, NULL);
        h3_tensor_upload_i32(B, &c.t.tile_order, pl->tile_order, NULL);
        h3_tensor_upload_i32(B, &c.t.untile_index, pl->untile_index, NULL);
        if (!vsa_ok("inputs")) {
            h3_arena_reset(B, mark);
            h3_vsa_plan_free(pl);
            continue;
        }
        r->S = S;
        r->n = pl->num_tiles;
        r->P = pl->num_prefix_tiles;
        r->k = pl->topk;
        r->kernel = h3_backend_cuda_vsa_kernel(B, H3_BF16, HD, pl->tile_elems);
        r->ctas = h3_backend_cuda_vsa_ctas_per_sm(B, H3_BF16, HD, pl->tile_elems);
        r->dense_flop = 4.0 * (double)S * (double)S * INNER;
        printf("VSA %s: S %lld, %lld tiles (%lld prefix), k %lld; dense attention...\n", vc->label, (long long)S,
               (long long)r->n, (long long)r->P, (long long)r->k);
        fflush(stdout);
        r->dense_ms = vsa_time(&c, VSA_DENSE, 1, o->reps);
        r->vsa_ms = vsa_time(&c, VSA_GATE, 2, o->reps);
        r->useful_flop = isnan(r->vsa_ms) ? NAN : vsa_useful_flop(pl);
        r->nogate_ms = vsa_time(&c, VSA_NOGATE, 1, o->reps);
        r->mma_ms = ci == 0 ? vsa_time(&c, VSA_MMA, 1, o->reps) : NAN;
        /* on Hopper, the other consumer of the wgmma kernel too */
        int pipe = h3_backend_cuda_set_vsa_pipelined(B, 0);
        h3_backend_cuda_set_vsa_pipelined(B, !pipe);
        r->alt_kernel = h3_backend_cuda_vsa_kernel(B, H3_BF16, HD, pl->tile_elems);
        h3_backend_cuda_set_vsa_pipelined(B, pipe);
        int has_alt = strcmp(r->alt_kernel, r->kernel) != 0;
        r->alt_ms = has_alt ? vsa_time(&c, VSA_ALT, 1, o->reps) : NAN;
        float ms[3] = {NAN, NAN, NAN}, alt[3] = {NAN, NAN, NAN};
        if (h3_backend_cuda_vsa_profile(B, 1, &st) == H3_OK) {
            vsa_run(&c, VSA_GATE);
            if (h3_backend_cuda_vsa_stage_ms(B, ms, &st) != H3_OK) fprintf(stderr, "h3-bench: %s\n", st.message);
            if (has_alt) {
                vsa_run(&c, VSA_ALT);
                if (h3_backend_cuda_vsa_stage_ms(B, alt, &st) != H3_OK) fprintf(stderr, "h3-bench: %s\n", st.message);
            }
            h3_backend_cuda_vsa_profile(B, 0, NULL);
        }
        vsa_ok("stages");
        for (int i = 0; i < 3; i++) r->stage_ms[i] = ms[i];
        r->alt_fine_ms = alt[2];
        r->ok = 1;
        printf("  dense %.2f ms, vsa %.2f ms (%.2fx)\n", r->dense_ms, r->vsa_ms, r->dense_ms / r->vsa_ms);
        h3_arena_reset(B, mark);
        h3_vsa_plan_free(pl);
    }
}

/* Inserts `row` before the line holding `marker` in the file at path. */
static int insert_before_marker(const char *path, const char *marker, const char *row) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char *text = NULL;
    size_t len = 0, cap = 0, got;
    char buf[65536];
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        if (len + got + 1 > cap) {
            cap = 2 * (len + got + 1);
            char *t = realloc(text, cap);
            if (!t) {
                free(text);
                fclose(f);
                return 0;
            }
            text = t;
        }
        memcpy(text + len, buf, got);
        len += got;
    }
    fclose(f);
    if (!text) return 0;
    text[len] = 0;
    char *at = strstr(text, marker);
    if (!at) {
        free(text);
        return 0;
    }
    while (at > text && at[-1] != '\n') at--;
    f = fopen(path, "wb");
    int ok = f && fwrite(text, 1, (size_t)(at - text), f) == (size_t)(at - text) && fputs(row, f) >= 0 &&
             fwrite(at, 1, strlen(at), f) == strlen(at);
    if (f && fclose(f) != 0) ok = 0;
    free(text);
    return ok;
}

static void report_vsa(const options *o, const vsa_result *res, const char *gpu) {
    printf("\nVSA-H3 vs our dense attention (56 heads x 128, 64-row tiles, sparsity 0.9, gate on; useful TF/s over\n"
           "valid query rows x valid keys of the selected tiles; target: the block-sparse kernel >= 85%% of the dense\n"
           "kernel's TF/s; FastVideo's Triton kernel takes 16.1 ms at the reference shape on an H200, spec §4.3):\n");
    printf("%-22s %7s %11s %4s %9s %8s %9s %8s %8s %8s %22s %8s %8s\n", "shape", "S", "tiles P+vid", "k", "dense ms",
           "dense TF", "vsa ms", "useful TF", "of dense", "speedup", "stages ms prep/crs/fine", "fine TF", "of dense");
    for (int i = 0; i < N_VSA_CASES; i++) {
        const vsa_result *r = &res[i];
        if (!r->ok) continue;
        double dtf = tflops(r->dense_flop, r->dense_ms), vtf = tflops(r->useful_flop, r->vsa_ms);
        double ftf = tflops(r->useful_flop, r->stage_ms[2]);
        char tiles[32], stages[40];
        snprintf(tiles, sizeof tiles, "%lld+%lld", (long long)r->P, (long long)(r->n - r->P));
        snprintf(stages, sizeof stages, "%.2f/%.2f/%.2f", r->stage_ms[0], r->stage_ms[1], r->stage_ms[2]);
        printf("%-22s %7lld %11s %4lld %9.2f %8.1f %9.2f %8.1f %7.1f%% %7.2fx %22s %8.1f %7.1f%%\n", vsa_cases[i].label,
               (long long)r->S, tiles, (long long)r->k, r->dense_ms, dtf, r->vsa_ms, vtf, 100 * vtf / dtf,
               r->dense_ms / r->vsa_ms, stages, ftf, 100 * ftf / dtf);
        printf("%-22s without the gate %.2f ms; kernel %s, %d CTAs/SM\n", "", r->nogate_ms, r->kernel, r->ctas);
        if (!isnan(r->alt_ms))
            printf("%-22s %s: %.2f ms = %.1f useful TF/s (%.1f%% of dense), fine kernel %.2f ms = %.1f TF/s (%.1f%%)\n",
                   "", r->alt_kernel, r->alt_ms, tflops(r->useful_flop, r->alt_ms),
                   100 * tflops(r->useful_flop, r->alt_ms) / dtf, r->alt_fine_ms, tflops(r->useful_flop, r->alt_fine_ms),
                   100 * tflops(r->useful_flop, r->alt_fine_ms) / dtf);
        if (i == 0)
            printf("%-22s mma.sync (portable) %.2f ms = %.1f useful TF/s; vs FastVideo Triton 16.1 ms: %.2fx\n", "",
                   r->mma_ms, tflops(r->useful_flop, r->mma_ms), 16.1 / r->vsa_ms);
    }
    if (strcmp(o->perf_md, "-") == 0) return;
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M", gmtime(&now));
    for (int i = 0; i < N_VSA_CASES; i++) {
        const vsa_result *r = &res[i];
        if (!r->ok) continue;
        double dtf = tflops(r->dense_flop, r->dense_ms), vtf = tflops(r->useful_flop, r->vsa_ms);
        double ftf = tflops(r->useful_flop, r->stage_ms[2]);
        char row[1024], alt[160] = "";
        if (!isnan(r->alt_ms))
            snprintf(alt, sizeof alt, "; %s %.2f ms, fine %.2f ms (%.0f%%)", r->alt_kernel, r->alt_ms, r->alt_fine_ms,
                     100 * tflops(r->useful_flop, r->alt_fine_ms) / dtf);
        snprintf(row, sizeof row,
                 "| %s | %s | %s | %s | %lld | %lld | %.2f (%.0f TF/s) | %.2f (%.0f TF/s) | %.2fx | %.2f / %.2f / %.2f | "
                 "%.0f | %.0f%% | %s, %d/SM%s |\n",
                 date, gpu, o->commit, vsa_cases[i].label, (long long)r->S, (long long)r->k, r->dense_ms, dtf,
                 r->vsa_ms, vtf, r->dense_ms / r->vsa_ms, r->stage_ms[0], r->stage_ms[1], r->stage_ms[2], ftf,
                 100 * ftf / dtf, r->kernel, r->ctas, alt);
        if (!insert_before_marker(o->perf_md, "<!-- vsa-runs -->", row))
            fprintf(stderr, "h3-bench: no '<!-- vsa-runs -->' line in %s; VSA row not recorded\n", o->perf_md);
    }
    printf("VSA rows recorded in %s\n", o->perf_md);
}

static void usage(void) {
    fprintf(stderr,
            "usage: h3-bench [--blocks N (1..50, default 50)] [--reps R] [--forward-reps R] [--commit HASH]\n"
            "                [--perf-md FILE|-] [--reference SCRIPT|none] [--python PY] [--dump-dir DIR]\n"
            "                [--vsa on|off|only]\n");
}

static int parse(int argc, char **argv, options *o) {
    o->blocks = 50;
    o->reps = 5;
    o->forward_reps = 2;
    o->commit = getenv("H3_COMMIT") ? getenv("H3_COMMIT") : "unknown";
    o->perf_md = "docs/PERFORMANCE.md";
    o->reference = "tools/h3_bench_reference.py";
    o->python = "python3";
    o->dump_dir = "/tmp/h3-bench-dump";
    o->vsa = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return 0;
        if (!strcmp(a, "--blocks")) o->blocks = atoi(v);
        else if (!strcmp(a, "--reps")) o->reps = atoi(v);
        else if (!strcmp(a, "--forward-reps")) o->forward_reps = atoi(v);
        else if (!strcmp(a, "--commit")) o->commit = v;
        else if (!strcmp(a, "--perf-md")) o->perf_md = v;
        else if (!strcmp(a, "--reference")) o->reference = v;
        else if (!strcmp(a, "--python")) o->python = v;
        else if (!strcmp(a, "--dump-dir")) o->dump_dir = v;
        else if (!strcmp(a, "--vsa") && (!strcmp(v, "on") || !strcmp(v, "off") || !strcmp(v, "only")))
            o->vsa = !strcmp(v, "off") ? 0 : !strcmp(v, "on") ? 1 : 2;
        else return 0;
        i++;
    }
    return o->blocks >= 1 && o->blocks <= 50 && o->reps >= 1 && o->forward_reps >= 1;
}

int main(int argc, char **argv) {
    options o;
    if (!parse(argc, argv, &o)) {
        usage();
        return 2;
    }
    char why[256];
    if (h3_cuda_device_count(why, sizeof why) == 0) {
        fprintf(stderr, "h3-bench: no GPU: %s\n", why);
        return 1;
    }
    h3_status st;
    if (h3_backend_cuda_create(0, &B, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: %s\n", st.message);
        return 1;
    }
    const char *gpu = h3_backend_cuda_device_name(B);
    printf("h3-bench: %s (sm_%d), %d blocks, commit %s\n", gpu, h3_backend_cuda_sm(B), o.blocks, o.commit);
    vsa_result vres[N_VSA_CASES];
    if (o.vsa == 2) { /* --vsa only: VSA-H3 and our dense attention at its shapes, nothing else */
        bench_vsa(&o, vres);
        report_vsa(&o, vres, gpu);
        h3_backend_destroy(B);
        return 0;
    }

    block_weights *w = calloc((size_t)o.blocks, sizeof *w);
    for (int i = 0; i < o.blocks; i++) make_block(&w[i]);
    die_if_failed("weights");
    result r;
    memset(&r, 0, sizeof r);
    int64_t seqs[2] = {S1, S2};
    for (int si = 0; si < 2; si++) {
        size_t mark = h3_arena_mark(B);
        acts a;
        make_acts(&a, seqs[si]);
        /* q/k/v/o/u/g hold random data for the ops timed alone */
        h3_backend_cuda_fill_uniform(B, &a.h, seed++, -2, 2);
        h3_backend_cuda_fill_uniform(B, &a.q, seed++, -2, 2);
        h3_backend_cuda_fill_uniform(B, &a.k, seed++, -2, 2);
        h3_backend_cuda_fill_uniform(B, &a.v, seed++, -1, 1);
        h3_backend_cuda_fill_uniform(B, &a.o, seed++, -1, 1);
        h3_backend_cuda_fill_uniform(B, &a.u, seed++, -2, 2);
        h3_backend_cuda_fill_uniform(B, &a.g, seed++, -1, 1);
        h3_backend_cuda_fill_uniform(B, &a.y, seed++, -1, 1);
        ctx c = {w, o.blocks, &a};
        if (si == 0) {
            int ops[6] = {OP_RMS_MOD, OP_RMS_MOD_UNFUSED, OP_QK_ROPE, OP_QK_ROPE_UNFUSED, OP_SWIGLU, OP_GATED};
            for (int i = 0; i < 6; i++) r.op_ms[i] = time_ms(&c, ops[i], 2, o.reps);
            int gem[4] = {OP_LIN_Q, OP_LIN_OUT, OP_LIN_FC1, OP_LIN_FC2};
            for (int i = 0; i < 4; i++) r.gemm_ms[i] = time_ms(&c, gem[i], 2, o.reps);
            r.attn_mma_ms = time_ms(&c, OP_ATTN_MMA, 1, o.reps);
            r.attn_simple_ms = time_ms(&c, OP_ATTN_SIMPLE, 1, o.reps);
            r.attn_kernel = h3_backend_cuda_attention_kernel(B, &a.o, &a.q, &a.k, &a.v, NH, NH, HD, 0);
        }
        r.attn_ms[si] = time_ms(&c, OP_ATTN, 1, o.reps);
        r.block_ms[si] = time_ms(&c, OP_BLOCK, 1, o.reps);
        printf("S %lld: attention %.2f ms, block %.2f ms; forward of %d blocks...\n", (long long)seqs[si],
               r.attn_ms[si], r.block_ms[si], o.blocks);
        fflush(stdout);
        r.fwd_ms[si] = time_ms(&c, OP_FORWARD, 0, o.forward_reps);
        if (si == 0 && strcmp(o.reference, "none") != 0 && !dump_block(o.dump_dir, &w[0], &a))
            fprintf(stderr, "h3-bench: dump failed; the reference runs without parity\n");
        h3_arena_reset(B, mark);
    }

    if (o.vsa) bench_vsa(&o, vres);

    JsonNode *ref = strcmp(o.reference, "none") ? run_reference(&o) : NULL;
    double peak = ref_num(ref, "gemm_peak_tflops");
    const char *gnames[4] = {"q", "out", "fc1", "fc2"};
    const int64_t gN[4] = {INNER, D, 2 * FFN, D}, gK[4] = {D, INNER, D, FFN};
    char key[128];
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof key, "linear.%s.ms", gnames[i]);
        r.gemm_ref_ms[i] = ref_num(ref, key);
    }
    double best_sdpa[2] = {NAN, NAN};
    const char *best_name[2] = {"-", "-"};
    const char *backends[3] = {"flash", "cudnn", "efficient"};
    for (int si = 0; si < 2; si++)
        for (int bi = 0; bi < 3; bi++) {
            snprintf(key, sizeof key, "sdpa.%lld.%s.ms", (long long)seqs[si], backends[bi]);
            double ms = ref_num(ref, key);
            if (!isnan(ms) && (isnan(best_sdpa[si]) || ms < best_sdpa[si])) {
                best_sdpa[si] = ms;
                best_name[si] = backends[bi];
            }
        }

    /* ---- table ---- */
    printf("\n%-44s %10s %9s %8s %10s %10s %8s\n", "", "ours ms", "TFLOP/s", "of peak", "torch ms", "torch TF/s",
           "speedup");
    double gemm_sum = 0, gemm_ref_sum = 0;
    for (int i = 0; i < 4; i++) {
        double f = 2.0 * S1 * gN[i] * gK[i];
        char n[96];
        snprintf(n, sizeof n, "GEMM %-3s %dx%lld->%lld", gnames[i], S1, (long long)gK[i], (long long)gN[i]);
        printf("%-44s %10.3f %9.1f %7.1f%% %10.3f %10.1f %7.3fx\n", n, r.gemm_ms[i], tflops(f, r.gemm_ms[i]),
               100 * tflops(f, r.gemm_ms[i]) / peak, r.gemm_ref_ms[i], tflops(f, r.gemm_ref_ms[i]),
               r.gemm_ref_ms[i] / r.gemm_ms[i]);
        gemm_sum += r.gemm_ms[i];
        gemm_ref_sum += r.gemm_ref_ms[i];
    }
    const char *onames[6] = {"rms_norm+modulate fused [S,D]", "rms_norm, modulate unfused [S,D]",
                             "qk_norm+rope fused [S,56x128]", "rms_norm(head), rope unfused", "swiglu [S,28672]->[S,14336]",
                             "gated_residual [S,D]"};
    /* bytes each op must move at least (bf16 reads + writes) */
    double obytes[6] = {2.0 * S1 * D * 2, 2.0 * S1 * D * 2, 2.0 * S1 * INNER * 2, 2.0 * S1 * INNER * 2,
                        3.0 * S1 * FFN * 2, 3.0 * S1 * D * 2};
    for (int i = 0; i < 6; i++)
        printf("%-44s %10.3f %9s %8s   %.0f GB/s\n", onames[i], r.op_ms[i], "", "", obytes[i] / r.op_ms[i] / 1e6);
    for (int si = 0; si < 2; si++) {
        double f = 4.0 * seqs[si] * seqs[si] * INNER;
        char n[96];
        snprintf(n, sizeof n, "attention S=%lld [%s] vs SDPA %s", (long long)seqs[si], r.attn_kernel, best_name[si]);
        printf("%-44s %10.3f %9.1f %7.1f%% %10.3f %10.1f %7.3fx\n", n, r.attn_ms[si], tflops(f, r.attn_ms[si]),
               100 * tflops(f, r.attn_ms[si]) / peak, best_sdpa[si], tflops(f, best_sdpa[si]),
               best_sdpa[si] / r.attn_ms[si]);
        for (int bi = 0; bi < 3; bi++) {
            snprintf(key, sizeof key, "sdpa.%lld.%s.ms", (long long)seqs[si], backends[bi]);
            double ms = ref_num(ref, key);
            snprintf(n, sizeof n, "  SDPA %s S=%lld", backends[bi], (long long)seqs[si]);
            printf("%-44s %10s %9s %8s %10.3f %10.1f\n", n, "", "", "", ms, tflops(f, ms));
        }
        if (si == 0) {
            printf("%-44s %10.3f %9.1f %7.1f%%\n", "attention S=34710 [mma.sync, portable]", r.attn_mma_ms,
                   tflops(f, r.attn_mma_ms), 100 * tflops(f, r.attn_mma_ms) / peak);
            printf("%-44s %10.3f %9.1f %7.1f%%\n", "attention S=34710 [wgmma-simple, first version]",
                   r.attn_simple_ms, tflops(f, r.attn_simple_ms), 100 * tflops(f, r.attn_simple_ms) / peak);
        }
    }
    double fwd_est[2];
    for (int si = 0; si < 2; si++) {
        double S = (double)seqs[si], f = LINEAR_FLOP_PER_TOKEN * S + 4.0 * S * S * INNER;
        snprintf(key, sizeof key, "block.%lld.ms", (long long)seqs[si]);
        double ref_ms = ref_num(ref, key);
        char n[96];
        snprintf(n, sizeof n, "DiT block S=%lld vs eager torch", (long long)seqs[si]);
        printf("%-44s %10.3f %9.1f %7.1f%% %10.3f %10.1f %7.3fx\n", n, r.block_ms[si], tflops(f, r.block_ms[si]),
               100 * tflops(f, r.block_ms[si]) / peak, ref_ms, tflops(f, ref_ms), ref_ms / r.block_ms[si]);
        fwd_est[si] = r.fwd_ms[si] / o.blocks * 50;
        snprintf(n, sizeof n, "forward %d blocks S=%lld (50-block est.)", o.blocks, (long long)seqs[si]);
        printf("%-44s %10.1f %9.1f %7.1f%%   50 blocks: %.2f s (eager torch est. %.2f s)\n", n, r.fwd_ms[si],
               tflops(f * o.blocks, r.fwd_ms[si]), 100 * tflops(f * o.blocks, r.fwd_ms[si]) / peak, fwd_est[si] / 1e3,
               ref_ms * 50 / 1e3);
    }
    double par = ref_num(ref, "parity.rel_l2_block_update"), par_out = ref_num(ref, "parity.rel_l2_block_output");
    printf("GEMM peak (torch.matmul 8192^3 bf16): %.1f TFLOP/s; block GEMMs ours/torch time %.3f\n", peak,
           gemm_sum / gemm_ref_sum);
    printf("parity vs eager torch block (S=%d): rel L2 of the block update %.2e, of the output %.2e%s\n", S1, par,
           par_out, par > 2e-2 ? "  (LARGE)" : "");

    /* ---- PERFORMANCE.md row ---- */
    if (strcmp(o.perf_md, "-") != 0) {
        FILE *f = fopen(o.perf_md, "a");
        if (f) {
            char date[32];
            time_t now = time(NULL);
            strftime(date, sizeof date, "%Y-%m-%d %H:%M", gmtime(&now));
            double fa = 4.0 * S1 * (double)S1 * INNER;
            fprintf(f,
                    "| %s | %s | %s | %d | %.0f | %.3f | %.0f (%s) | %.0f (%s) | %.2f | %.1f | %.1f | %.2f | %.2f / %.2f | "
                    "%.2e |\n",
                    date, gpu, o.commit, o.blocks, peak, gemm_ref_sum / gemm_sum, tflops(fa, r.attn_ms[0]),
                    r.attn_kernel, tflops(fa, best_sdpa[0]), best_name[0], best_sdpa[0] / r.attn_ms[0],
                    r.block_ms[0], ref_num(ref, "block.34710.ms"), ref_num(ref, "block.34710.ms") / r.block_ms[0],
                    fwd_est[0] / 1e3, fwd_est[1] / 1e3, par);
            fclose(f);
            printf("appended a row to %s\n", o.perf_md);
        } else {
            fprintf(stderr, "h3-bench: cannot append to %s\n", o.perf_md);
        }
    }
    if (o.vsa) report_vsa(&o, vres, gpu);
    if (ref) json_node_unref(ref);
    free(w);
    h3_backend_destroy(B);
    return 0;
}
