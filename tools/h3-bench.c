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
 * QK-norm+RoPE ops, as h3_dit runs it. Next to it (--forward on, the
 * default; --forward only runs this part alone) the product's own forward:
 * h3_dit_create_random (--blocks random blocks, no checkpoint) through
 * h3_dit_begin / h3_dit_forward at 1280×736×124, so any gap between the
 * hand-written block and what the engine runs shows.
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
 * stage breakdown; rows go to the VSA table of --perf-md.
 *
 * Then (--vae on, the default; --vae only runs this part alone) the VAE
 * decoders at 1280×736×124 with random float32 weights through
 * h3_video_vae / h3_audio_vae, against tools/h3_vae_reference.py (eager
 * PyTorch from h3-vaes.md) on the same weights and latents: times, ratio and
 * parity; see bench_vae. */
#include <cuda_runtime_api.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "backend/h3_backend.h"
#include "backend/cuda/h3_backend_cuda_bench.h"
#include "model/h3_dit.h" /* --forward: the product's forward */
#include "h3_bench_tp.h" /* --forward with --devices / --tp-sweep / --backend vsa: over tensor-parallel ranks */
#include "model/h3_tp_plan.h" /* the degrees the model splits over */
#include "model/h3_vsa.h"
#include "model/h3_audio_vae.h"
#include "base/h3_safetensors.h"
#include "model/h3_video_vae.h"

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
    int vae, vae_reps; /* --vae: 0 off, 1 on (default), 2 only; --vae-reps (default 2) */
    int attn_only;     /* --attention only: every dense attention kernel and torch SDPA, nothing else */
    int forward;       /* --forward: 0 off, 1 on (default), 2 only: h3_dit_forward itself */
    int devices[H3_COMM_MAX_RANKS], n_devices; /* --devices LIST (default "0"): the forward's ranks */
    int tp_sweep;      /* --tp-sweep: the forward at every valid degree up to the device count */
    int fwd_vsa;       /* --backend fa|vsa: the forward's attention (vsa: VSA-H3, sparsity 0.9) */
    int fwd_tp;        /* not the default single-GPU forward: the tensor-parallel path (bench_tp_forward) */
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
        h3_cuda_attention_variant old = h3_backend_cuda_set_attention_variant(
            B, id == OP_ATTN_MMA ? H3_CUDA_VARIANT_MMA : H3_CUDA_VARIANT_WGMMA_SIMPLE);
        h3_op_attention(B, &a->o, &a->q, &a->k, &a->v, NH, NH, HD, 0, 1.0f / sqrtf((float)HD));
        h3_backend_cuda_set_attention_variant(B, old);
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

/* Runs a PyTorch reference command; its lines that start with `tag` carry
 * one JSON object (returned, or NULL), the rest is echoed as it comes. */
static JsonNode *run_python_json(const char *cmd, const char *tag) {
    printf("reference: %s\n", cmd);
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    char *line = NULL;
    size_t cap = 0, n = strlen(tag);
    JsonNode *res = NULL;
    while (getline(&line, &cap, p) > 0) {
        if (!strncmp(line, tag, n)) {
            JsonParser *parser = json_parser_new();
            if (json_parser_load_from_data(parser, line + n, -1, NULL)) res = json_node_copy(json_parser_get_root(parser));
            g_object_unref(parser);
        } else {
            printf("  [torch] %s", line);
            fflush(stdout);
        }
    }
    free(line);
    int rc = pclose(p);
    if (rc != 0) printf("reference exited with status %d\n", rc);
    return res;
}

/* Runs the reference script; returns its H3REF JSON object (or NULL). */
static JsonNode *run_reference(const options *o) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s --dump %s --seq %d,%d --reps %d 2>&1", o->python, o->reference, o->dump_dir, S1,
             S2, o->reps);
    return run_python_json(cmd, "H3REF ");
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
    double alt_ms[2], alt_fine_ms[2]; /* the other consumers of the Hopper kernel (simple, pipelined, paired) */
    double copy_ms, copy_bytes;       /* the fine kernel's tile copies alone (h3_backend_cuda_vsa_probe_ms) */
    double math_ms;                   /* its consumer alone, on resident tiles */
    const char *alt_kernel[2];
    double useful_flop, dense_flop;
    const char *kernel;
    int ctas;
} vsa_result;

enum { VSA_DENSE, VSA_GATE, VSA_NOGATE, VSA_MMA, VSA_ALT };

static int vsa_alt; /* the consumer VSA_ALT runs (h3_backend_cuda_set_vsa_pipelined) */

typedef struct vsa_ctx {
    h3_tensor q, k, v, g, o;
    h3_vsa_tiles t;
} vsa_ctx;

static void vsa_run(vsa_ctx *c, int what) {
    switch (what) {
    case VSA_DENSE: h3_op_attention(B, &c->o, &c->q, &c->k, &c->v, NH, NH, HD, 0, 1.0f / sqrtf((float)HD)); break;
    case VSA_GATE: h3_op_vsa_attention(B, &c->o, &c->q, &c->k, &c->v, &c->g, &c->t, NH, HD); break;
    case VSA_NOGATE: h3_op_vsa_attention(B, &c->o, &c->q, &c->k, &c->v, NULL, &c->t, NH, HD); break;
    case VSA_ALT: { /* the Hopper kernel with another consumer: vsa_alt */
        int old = h3_backend_cuda_set_vsa_pipelined(B, vsa_alt);
        h3_op_vsa_attention(B, &c->o, &c->q, &c->k, &c->v, &c->g, &c->t, NH, HD);
        h3_backend_cuda_set_vsa_pipelined(B, old);
        break;
    }
    default: {
        h3_cuda_attention_variant old = h3_backend_cuda_set_attention_variant(B, H3_CUDA_VARIANT_MMA);
        h3_op_vsa_attention(B, &c->o, &c->q, &c->k, &c->v, &c->g, &c->t, NH, HD);
        h3_backend_cuda_set_attention_variant(B, old);
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
        /* on Hopper, the other consumers of the wgmma kernel too (0 simple, 1 pipelined, 2 paired) */
        int pipe = h3_backend_cuda_set_vsa_pipelined(B, 0), alts[2], has_alt[2];
        h3_backend_cuda_set_vsa_pipelined(B, pipe);
        for (int a = 0, v = 0; v < 3; v++)
            if (v != pipe && a < 2) alts[a++] = v;
        for (int a = 0; a < 2; a++) {
            h3_backend_cuda_set_vsa_pipelined(B, alts[a]);
            r->alt_kernel[a] = h3_backend_cuda_vsa_kernel(B, H3_BF16, HD, pl->tile_elems);
            h3_backend_cuda_set_vsa_pipelined(B, pipe);
            has_alt[a] = strcmp(r->alt_kernel[a], r->kernel) != 0;
            vsa_alt = alts[a];
            r->alt_ms[a] = has_alt[a] ? vsa_time(&c, VSA_ALT, 1, o->reps) : NAN;
        }
        float ms[3] = {NAN, NAN, NAN}, alt[2][3] = {{NAN, NAN, NAN}, {NAN, NAN, NAN}};
        r->copy_ms = r->math_ms = NAN;
        if (h3_backend_cuda_vsa_profile(B, 1, &st) == H3_OK) {
            vsa_run(&c, VSA_GATE);
            if (h3_backend_cuda_vsa_stage_ms(B, ms, &st) != H3_OK) fprintf(stderr, "h3-bench: %s\n", st.message);
            float copy = NAN, math = NAN;
            if (h3_backend_cuda_vsa_probe_ms(B, H3_CUDA_VSA_PROBE_COPIES, 3, &copy, &st) != H3_OK ||
                h3_backend_cuda_vsa_probe_ms(B, H3_CUDA_VSA_PROBE_MATH, 3, &math, &st) != H3_OK)
                fprintf(stderr, "h3-bench: %s\n", st.message);
            r->copy_ms = copy;
            r->math_ms = math;
            /* a Q image per CTA, then K and Vᵀ images (16 KB each) per listed key tile */
            double n = (double)r->n, P = (double)r->P, tiles = NH * (n + 2 * (P * n + (n - P) * (P + r->k)));
            r->copy_bytes = tiles * 64 * HD * 2;
            for (int a = 0; a < 2; a++)
                if (has_alt[a]) {
                    vsa_alt = alts[a];
                    vsa_run(&c, VSA_ALT);
                    if (h3_backend_cuda_vsa_stage_ms(B, alt[a], &st) != H3_OK)
                        fprintf(stderr, "h3-bench: %s\n", st.message);
                }
            h3_backend_cuda_vsa_profile(B, 0, NULL);
        }
        vsa_ok("stages");
        for (int i = 0; i < 3; i++) r->stage_ms[i] = ms[i];
        for (int a = 0; a < 2; a++) r->alt_fine_ms[a] = alt[a][2];
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
        if (!isnan(r->copy_ms))
            printf("%-22s the fine kernel's tile copies alone (no math): %.2f ms for %.1f GB = %.2f TB/s; its consumer "
                   "alone (no copies): %.2f ms = %.1f TF/s; the fine kernel takes %.2fx the larger\n", "", r->copy_ms,
                   r->copy_bytes / 1e9, r->copy_bytes / r->copy_ms / 1e9, r->math_ms,
                   tflops(r->useful_flop, r->math_ms), r->stage_ms[2] / fmax(r->copy_ms, r->math_ms));
        for (int a = 0; a < 2; a++)
            if (!isnan(r->alt_ms[a]))
                printf("%-22s %s: %.2f ms = %.1f useful TF/s (%.1f%% of dense), fine kernel %.2f ms = %.1f TF/s (%.1f%%)\n",
                       "", r->alt_kernel[a], r->alt_ms[a], tflops(r->useful_flop, r->alt_ms[a]),
                       100 * tflops(r->useful_flop, r->alt_ms[a]) / dtf, r->alt_fine_ms[a],
                       tflops(r->useful_flop, r->alt_fine_ms[a]), 100 * tflops(r->useful_flop, r->alt_fine_ms[a]) / dtf);
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
        char row[1024], alt[400] = "";
        if (!isnan(r->copy_ms))
            snprintf(alt, sizeof alt, "; copies alone %.2f ms (%.1f TB/s), consumer alone %.2f ms", r->copy_ms,
                     r->copy_bytes / r->copy_ms / 1e9, r->math_ms);
        for (int a = 0; a < 2; a++)
            if (!isnan(r->alt_ms[a])) {
                size_t at = strlen(alt);
                snprintf(alt + at, sizeof alt - at, "; %s %.2f ms, fine %.2f ms (%.0f%%)", r->alt_kernel[a],
                         r->alt_ms[a], r->alt_fine_ms[a], 100 * tflops(r->useful_flop, r->alt_fine_ms[a]) / dtf);
            }
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

/* ---- VAE decoders (--vae on|off|only): the video VAE at 1280×736×124 and its audio, ours vs eager torch --------
 * Random weights in the release's dtypes (float32 safetensors: the video decoder side, 2.4 G parameters, and the
 * BigVGAN decoder with weight_g/weight_v) and the real configs (tests/data/official/{vae,audio_vae}/config.json)
 * are written under --dump-dir and loaded through h3_video_vae_load / h3_audio_vae_load, so the decode runs
 * exactly as the engine runs it: 7 temporal windows × 28 spatial tiles of 7×16×16 latents, stitching, cross-fades
 * and the uint8 conversion of every frame (h3_video_vae_decode), timed as synchronised wall time. The same
 * weights, the latents and our decoder outputs (h3_video_vae_decode_f32, the audio waveform) go to
 * tools/h3_vae_reference.py, which decodes with an eager PyTorch implementation written from h3-vaes.md (fp16 as
 * §3.8 says for the video, fp32 for the audio), times it the same way and reports relative L2 against ours. */

#define VAE_T 37 /* 124 frames = 17·7 + 5 */
#define VAE_HL 46
#define VAE_WL 80
#define VAE_FRAMES 124
#define VAE_AUDIO_L 207 /* round(124/24·40) latents of 800 samples */
#define VAE_TILE_N 1797 /* 7·16·16 tokens + 4 registers + 1 zero token */

typedef struct vae_tensor {
    char name[128];
    int ndim;
    int64_t shape[5];
    float lo, hi;
} vae_tensor;

typedef struct vae_list {
    vae_tensor *t;
    int n, cap;
} vae_list;

static void vae_add(vae_list *l, float lo, float hi, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void vae_add(vae_list *l, float lo, float hi, int ndim, const int64_t *shape, const char *fmt, ...) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->t = realloc(l->t, (size_t)l->cap * sizeof *l->t);
        if (!l->t) {
            fprintf(stderr, "h3-bench: out of memory\n");
            exit(1);
        }
    }
    vae_tensor *t = &l->t[l->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->lo = lo, t->hi = hi;
}

static int64_t vae_numel(const vae_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* The decoder side of the diffusers video VAE (h3-vaes.md §3.11): linear weights of variance 1/fan-in, so every
 * block sees unit-scale activations; layer scales small as in a trained ViT. */
static void vae_video_tensors(vae_list *l) {
    const int64_t C = 24, Dm = 2048, F = 8192, P = 3072;
    int64_t s5[5] = {C, C, 1, 1, 1}, c[1] = {C}, d[1] = {Dm};
    float a24 = sqrtf(3.0f / 24), aD = sqrtf(3.0f / 2048), aF = sqrtf(3.0f / 8192);
    vae_add(l, -a24, a24, 5, s5, "post_quant_conv.weight");
    vae_add(l, -0.05f, 0.05f, 1, c, "post_quant_conv.bias");
    vae_add(l, -a24, a24, 2, (int64_t[]){Dm, C}, "decoder.proj_in.weight");
    vae_add(l, -0.05f, 0.05f, 1, d, "decoder.proj_in.bias");
    vae_add(l, -1.0f, 1.0f, 3, (int64_t[]){1, 4, Dm}, "decoder.register_tokens");
    for (int i = 0; i < 36; i++) {
        const char *p = "decoder.transformer_blocks";
        vae_add(l, 0.8f, 1.2f, 1, d, "%s.%d.norm1.weight", p, i);
        vae_add(l, 0.8f, 1.2f, 1, d, "%s.%d.norm2.weight", p, i);
        vae_add(l, 0.05f, 0.25f, 1, d, "%s.%d.scale1", p, i);
        vae_add(l, 0.05f, 0.25f, 1, d, "%s.%d.scale2", p, i);
        const char *lin[4] = {"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0"};
        for (int k = 0; k < 4; k++) {
            vae_add(l, -aD, aD, 2, (int64_t[]){Dm, Dm}, "%s.%d.%s.weight", p, i, lin[k]);
            vae_add(l, -0.02f, 0.02f, 1, d, "%s.%d.%s.bias", p, i, lin[k]);
        }
        vae_add(l, -aD, aD, 2, (int64_t[]){2 * F, Dm}, "%s.%d.ff.net.0.proj.weight", p, i);
        vae_add(l, -0.02f, 0.02f, 1, (int64_t[]){2 * F}, "%s.%d.ff.net.0.proj.bias", p, i);
        vae_add(l, -aF, aF, 2, (int64_t[]){Dm, F}, "%s.%d.ff.net.2.weight", p, i);
        vae_add(l, -0.02f, 0.02f, 1, d, "%s.%d.ff.net.2.bias", p, i);
    }
    vae_add(l, 0.8f, 1.2f, 1, d, "decoder.norm_out.weight");
    vae_add(l, -0.1f, 0.1f, 1, d, "decoder.norm_out.bias");
    vae_add(l, -aD, aD, 2, (int64_t[]){P, Dm}, "decoder.proj_out.weight");
    vae_add(l, -0.05f, 0.05f, 1, (int64_t[]){P}, "decoder.proj_out.bias");
}

/* A weight-normed conv: g sets the output scale (w = g·v/‖v‖, so a unit-variance input gives ≈ g² variance). */
static void vae_wn(vae_list *l, const char *prefix, int64_t d0, int64_t d1, int64_t K, int64_t bias_n, float g) {
    vae_add(l, 0.9f * g, 1.1f * g, 3, (int64_t[]){d0, 1, 1}, "%s.weight_g", prefix);
    vae_add(l, -1.0f, 1.0f, 3, (int64_t[]){d0, d1, K}, "%s.weight_v", prefix);
    if (bias_n) vae_add(l, -0.02f, 0.02f, 1, &bias_n, "%s.bias", prefix);
}

/* alpha/beta in log space; the two Kaiser filters are filled with their real values after generation. */
static void vae_act(vae_list *l, const char *prefix, int64_t C) {
    vae_add(l, -0.3f, 0.3f, 1, &C, "%s.act.alpha", prefix);
    vae_add(l, -0.3f, 0.3f, 1, &C, "%s.act.beta", prefix);
    vae_add(l, 0, 0, 3, (int64_t[]){1, 1, 12}, "%s.upsample.filter", prefix);
    vae_add(l, 0, 0, 3, (int64_t[]){1, 1, 12}, "%s.downsample.lowpass.filter", prefix);
}

/* The BigVGAN decoder side of the audio VAE (h3-vaes.md §4.3, §4.6), release config. */
static void vae_audio_tensors(vae_list *l) {
    const int rates[7] = {5, 5, 2, 2, 2, 2, 2}, ks[7] = {9, 9, 4, 4, 4, 4, 4}, rk[3] = {3, 7, 11};
    char p[160];
    float a32 = sqrtf(3.0f / 32);
    vae_add(l, -a32, a32, 3, (int64_t[]){2048, 32, 1}, "dec_in_proj.weight");
    vae_add(l, -0.02f, 0.02f, 1, (int64_t[]){2048}, "dec_in_proj.bias");
    vae_wn(l, "decoder.conv_pre", 1024, 2048, 7, 1024, 1.0f);
    for (int s = 0; s < 7; s++) {
        int64_t Cs = 1024 >> s, C = Cs / 2;
        snprintf(p, sizeof p, "decoder.ups.%d.0", s);
        vae_wn(l, p, Cs, C, ks[s], C, sqrtf(rates[s] / 2.0f));
        for (int j = 0; j < 3; j++) {
            int r = 3 * s + j;
            for (int i = 0; i < 3; i++) {
                snprintf(p, sizeof p, "decoder.resblocks.%d.convs1.%d", r, i);
                vae_wn(l, p, C, C, rk[j], C, 1.0f);
                snprintf(p, sizeof p, "decoder.resblocks.%d.convs2.%d", r, i);
                vae_wn(l, p, C, C, rk[j], C, 0.3f);
            }
            for (int a = 0; a < 6; a++) {
                snprintf(p, sizeof p, "decoder.resblocks.%d.activations.%d", r, a);
                vae_act(l, p, C);
            }
        }
    }
    vae_act(l, "decoder.activation_post", 8);
    vae_wn(l, "decoder.conv_post", 1, 8, 7, 0, 0.2f);
}

static const float vae_kaiser[12] = {0.0020289647f, 0.0093894657f, -0.0255434588f, -0.0576573834f,
                                     0.1285725832f, 0.4432097971f,  0.4432097971f,  0.1285725832f,
                                     -0.0576573834f, -0.0255434588f, 0.0093894657f, 0.0020289647f};

/* Draws every tensor of l on the device (float32, uniform [lo, hi)) and writes them as one safetensors file. */
static int vae_write_weights(const char *path, const vae_list *l) {
    int64_t total = 0, most = 0;
    for (int i = 0; i < l->n; i++) {
        int64_t n = vae_numel(&l->t[i]);
        total += n;
        if (n > most) most = n;
    }
    float *host = malloc((size_t)total * sizeof(float));
    h3_st_write_tensor *wt = calloc((size_t)l->n, sizeof *wt);
    if (!host || !wt) {
        fprintf(stderr, "h3-bench: no host memory for %lld weights\n", (long long)total);
        free(host);
        free(wt);
        return 0;
    }
    size_t mark = h3_arena_mark(B);
    h3_tensor scratch = h3_new_1d(B, H3_F32, most);
    int64_t at = 0;
    for (int i = 0; i < l->n; i++) {
        const vae_tensor *t = &l->t[i];
        int64_t n = vae_numel(t);
        float *dst = host + at;
        if (strstr(t->name, ".filter")) {
            memcpy(dst, vae_kaiser, sizeof vae_kaiser);
        } else {
            h3_tensor s = scratch;
            s.shape[0] = n;
            h3_backend_cuda_fill_uniform(B, &s, seed++, t->lo, t->hi);
            if (h3_tensor_download_f32(B, &s, dst, NULL) != H3_OK) break;
        }
        wt[i].name = t->name;
        wt[i].dtype = H3_ST_F32;
        wt[i].ndim = t->ndim;
        for (int k = 0; k < t->ndim; k++) wt[i].shape[k] = t->shape[k];
        wt[i].data = dst;
        at += n;
    }
    h3_arena_reset(B, mark);
    h3_status st;
    int ok = h3_backend_check(B, &st) == H3_OK;
    if (ok && h3_st_write(path, wt, (size_t)l->n, NULL, &st) != H3_OK) ok = 0;
    if (!ok) fprintf(stderr, "h3-bench: writing %s: %s\n", path, st.message);
    free(host);
    free(wt);
    return ok;
}

static int vae_copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
    char buf[65536];
    size_t n;
    int ok = a && b;
    while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, n, b) == n;
    if (a) fclose(a);
    if (b && fclose(b) != 0) ok = 0;
    if (!ok) fprintf(stderr, "h3-bench: cannot copy %s to %s\n", from, to);
    return ok;
}

/* Model directory `dir` = config.json from the repository's official configs + random weights. */
static int vae_make_model(const char *dir, const char *official, int video) {
    char cfg[1100], path[1200];
    mkdir(dir, 0755);
    snprintf(cfg, sizeof cfg, "%s/config.json", official);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!vae_copy_file(cfg, path)) return 0;
    vae_list l = {0};
    if (video) vae_video_tensors(&l);
    else vae_audio_tensors(&l);
    snprintf(path, sizeof path, "%s/%s", dir, "diffusion_pytorch_model.safetensors");
    int ok = vae_write_weights(path, &l);
    free(l.t);
    return ok;
}

static double vae_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int vae_emit(void *opaque, int first, int count, const uint8_t *rgb) {
    (void)rgb;
    int *frames = opaque;
    if (first != *frames) return 1; /* frames come in order */
    *frames += count;
    return 0;
}

/* Median of n doubles (sorts them). */
static double vae_median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Uniform host values of unit variance (a 64-bit LCG: no GPU needed, the reference reads them from the dump). */
static void vae_host_uniform(float *x, int64_t n, uint64_t s) {
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = ((float)(s >> 40) / 16777216.0f * 2.0f - 1.0f) * 1.7320508f;
    }
}

/* Per-op profile of one ViT block at the tile shape (N = 1797 rows a tile, D 2048, 32 × 64, FFN 8192, fp16 GEMMs,
 * fp32 residual), for G tiles stacked as h3_video_vae.c decodes them (a row of 7 tiles at 1280 px): the op
 * sequence of its block_forward with random weights, CUDA events, medians. */
enum { VP_NORM, VP_QKV, VP_QKROPE, VP_ATTN, VP_OUT, VP_RESID, VP_FC1, VP_SWIGLU, VP_FC2, VP_BLOCK, VP_N };
static const char *vp_names[VP_N] = {
    "rms_norm f32 -> f16", "3 x GEMM q/k/v 2048->2048", "2 x qk_norm_rope (no weight, rot 48)",
    "attention 32x64 fp16 (per tile)", "GEMM out 2048->2048", "scaled residual (gated_residual)",
    "GEMM fc1 2048->16384", "swiglu [., 16384]", "GEMM fc2 8192->2048", "whole block"};

typedef struct vae_prof {
    int G;
    int64_t S;
    h3_tensor x, n, q, k, v, o, p, u, g, cos, sin, sel;
    h3_tensor wq, wk, wv, wo, w1, w2, bq, bk, bv, bo, b1, b2, norm1, norm2, scale1, scale2;
} vae_prof;

static void vp_run(vae_prof *c, int id) {
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
        for (int i = VP_NORM; i <= VP_RESID; i++) vp_run(c, i);
        vp_run(c, VP_NORM);
        for (int i = VP_FC1; i <= VP_FC2; i++) vp_run(c, i);
        vp_run(c, VP_RESID);
    }
}

static double vp_time(vae_prof *c, int id, int warmup, int reps) {
    cudaStream_t s = (cudaStream_t)h3_backend_cuda_stream(B);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < warmup; i++) vp_run(c, id);
    double t[16];
    for (int i = 0; i < reps; i++) {
        cudaEventRecord(e0, s);
        for (int k = 0; k < 10; k++) vp_run(c, id);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        t[i] = ms / 10;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return vae_median(t, reps);
}

static void vae_profile_block(int G) {
    const int64_t S = VAE_TILE_N, N = G * S, Dm = 2048, F = 8192;
    size_t mark = h3_arena_mark(B);
    vae_prof c;
    c.G = G, c.S = S;
    h3_tensor *acts16[] = {&c.n, &c.q, &c.k, &c.v, &c.o, &c.p};
    c.x = h3_new_2d(B, H3_F32, N, Dm);
    for (int i = 0; i < 6; i++) *acts16[i] = h3_new_2d(B, H3_F16, N, Dm);
    c.u = h3_new_2d(B, H3_F16, N, 2 * F);
    c.g = h3_new_2d(B, H3_F16, N, F);
    c.cos = h3_new_2d(B, H3_F32, N, 48);
    c.sin = h3_new_2d(B, H3_F32, N, 48);
    c.sel = h3_new_2d(B, H3_I32, N, 1);
    int32_t *zeros = calloc((size_t)N, sizeof *zeros);
    if (zeros) h3_tensor_upload_i32(B, &c.sel, zeros, NULL);
    free(zeros);
    struct { h3_tensor *t; int64_t r, k; h3_dtype dt; float lo, hi; } w[] = {
        {&c.wq, Dm, Dm, H3_F16, -0.04f, 0.04f}, {&c.wk, Dm, Dm, H3_F16, -0.04f, 0.04f},
        {&c.wv, Dm, Dm, H3_F16, -0.04f, 0.04f}, {&c.wo, Dm, Dm, H3_F16, -0.04f, 0.04f},
        {&c.w1, 2 * F, Dm, H3_F16, -0.04f, 0.04f}, {&c.w2, Dm, F, H3_F16, -0.02f, 0.02f},
        {&c.bq, 1, Dm, H3_F16, -0.02f, 0.02f}, {&c.bk, 1, Dm, H3_F16, -0.02f, 0.02f},
        {&c.bv, 1, Dm, H3_F16, -0.02f, 0.02f}, {&c.bo, 1, Dm, H3_F16, -0.02f, 0.02f},
        {&c.b1, 1, 2 * F, H3_F16, -0.02f, 0.02f}, {&c.b2, 1, Dm, H3_F16, -0.02f, 0.02f},
        {&c.norm1, 1, Dm, H3_F32, 0.8f, 1.2f}, {&c.norm2, 1, Dm, H3_F32, 0.8f, 1.2f},
        {&c.scale1, 2, Dm, H3_F32, 0.05f, 0.25f}, {&c.scale2, 2, Dm, H3_F32, 0.05f, 0.25f},
        {&c.x, 0, 0, H3_F32, -1, 1}, {&c.cos, 0, 0, H3_F32, -1, 1}, {&c.sin, 0, 0, H3_F32, -1, 1}};
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) {
        if (w[i].r == 1) *w[i].t = h3_new_1d(B, w[i].dt, w[i].k);
        else if (w[i].r == 2) *w[i].t = h3_new_2d(B, w[i].dt, 1, w[i].k); /* layer scale: a one-row table */
        else if (w[i].r) *w[i].t = h3_new_2d(B, w[i].dt, w[i].r, w[i].k);
        h3_backend_cuda_fill_uniform(B, w[i].t, seed++, w[i].lo, w[i].hi);
    }
    h3_backend_cuda_fill_uniform(B, &c.n, seed++, -1, 1);
    h3_backend_cuda_fill_uniform(B, &c.u, seed++, -1, 1);
    vp_run(&c, VP_BLOCK);
    h3_status st;
    if (h3_backend_synchronize(B, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: vae profile: %s\n", st.message);
        h3_backend_clear_error(B);
        h3_arena_reset(B, mark);
        return;
    }
    double ms[VP_N], sum = 0;
    for (int i = 0; i < VP_N; i++) ms[i] = vp_time(&c, i, 3, 7);
    for (int i = 0; i < VP_BLOCK; i++) sum += ms[i] * (i == VP_NORM || i == VP_RESID ? 2 : 1);
    double flop[VP_N] = {0};
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
           h3_backend_cuda_attention_kernel(B, &c.o, &c.q, &c.k, &c.v, 32, 32, 64, 0));
    printf("  per tile: 36 blocks = %.1f ms; 196 tiles = %.2f s\n", 36 * ms[VP_BLOCK] / G,
           196 * 36 * ms[VP_BLOCK] / G / 1e3);
    h3_arena_reset(B, mark);
}

typedef struct vae_result {
    double video_ms, audio_ms, video_load_s, audio_load_s;
    int frames;
    int ok_video, ok_audio;
} vae_result;

static int vae_write_named(const char *path, const char *name, int ndim, const int64_t *shape, const float *data) {
    h3_st_write_tensor t = {.name = name, .dtype = H3_ST_F32, .ndim = ndim, .data = data};
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    h3_status st;
    if (h3_st_write(path, &t, 1, NULL, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: %s\n", st.message);
        return 0;
    }
    return 1;
}

static void vae_bench_video(const options *o, const char *dir, vae_result *r) {
    char mdir[1100], path[1100];
    h3_status st;
    snprintf(mdir, sizeof mdir, "%s/vae", dir);
    double t0 = vae_now_ms();
    printf("video VAE: writing random float32 weights to %s ...\n", mdir);
    fflush(stdout);
    if (!vae_make_model(mdir, "tests/data/official/vae", 1)) return;
    printf("  written in %.1f s\n", (vae_now_ms() - t0) / 1e3);
    t0 = vae_now_ms();
    h3_video_vae *vae = NULL;
    if (h3_video_vae_load(B, mdir, &vae, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: video VAE load: %s\n", st.message);
        return;
    }
    r->video_load_s = (vae_now_ms() - t0) / 1e3;
    int64_t nl = 24LL * VAE_T * VAE_HL * VAE_WL, nout = 3LL * VAE_FRAMES * VAE_HL * 16 * VAE_WL * 16;
    float *lat = malloc((size_t)nl * sizeof *lat), *out = malloc((size_t)nout * sizeof *out);
    if (!lat || !out) {
        fprintf(stderr, "h3-bench: no host memory for the video decode\n");
        goto done;
    }
    vae_host_uniform(lat, nl, 12345);
    snprintf(path, sizeof path, "%s/vae_latents.safetensors", dir);
    if (!vae_write_named(path, "latents", 4, (int64_t[]){24, VAE_T, VAE_HL, VAE_WL}, lat)) goto done;
    printf("video VAE: loaded in %.1f s; decode of %d latents %dx%d -> %d frames %dx%d (warm-up + %d reps)...\n",
           r->video_load_s, VAE_T, VAE_HL, VAE_WL, VAE_FRAMES, VAE_WL * 16, VAE_HL * 16, o->vae_reps);
    fflush(stdout);
    double t[16];
    for (int i = -1; i < o->vae_reps; i++) {
        int frames = 0;
        double a = vae_now_ms();
        if (h3_video_vae_decode(vae, lat, VAE_T, VAE_HL, VAE_WL, vae_emit, &frames, NULL, &st) != H3_OK) {
            fprintf(stderr, "h3-bench: video VAE decode: %s\n", st.message);
            goto done;
        }
        double ms = vae_now_ms() - a;
        printf("  decode %s: %.1f ms, %d frames\n", i < 0 ? "warm-up" : "rep", ms, frames);
        fflush(stdout);
        if (i >= 0) t[i] = ms;
        r->frames = frames;
    }
    r->video_ms = vae_median(t, o->vae_reps);
    if (h3_video_vae_decode_f32(vae, lat, VAE_T, VAE_HL, VAE_WL, out, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: video VAE decode_f32: %s\n", st.message);
        goto done;
    }
    snprintf(path, sizeof path, "%s/vae_ours.safetensors", dir);
    r->ok_video = vae_write_named(path, "video", 4, (int64_t[]){3, VAE_FRAMES, VAE_HL * 16, VAE_WL * 16}, out);
done:
    free(lat);
    free(out);
    h3_video_vae_free(vae);
}

static void vae_bench_audio(const options *o, const char *dir, vae_result *r) {
    char mdir[1100], path[1100];
    h3_status st;
    snprintf(mdir, sizeof mdir, "%s/audio_vae", dir);
    if (!vae_make_model(mdir, "tests/data/official/audio_vae", 0)) return;
    double t0 = vae_now_ms();
    h3_audio_vae *vae = NULL;
    if (h3_audio_vae_load(B, mdir, &vae, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: audio VAE load: %s\n", st.message);
        return;
    }
    r->audio_load_s = (vae_now_ms() - t0) / 1e3;
    int64_t nl = 2LL * 32 * VAE_AUDIO_L, ns = 2LL * VAE_AUDIO_L * h3_audio_vae_hop(vae);
    float *lat = malloc((size_t)nl * sizeof *lat), *out = malloc((size_t)ns * sizeof *out);
    if (lat && out) {
        vae_host_uniform(lat, nl, 777);
        snprintf(path, sizeof path, "%s/audio_latents.safetensors", dir);
        int ok = vae_write_named(path, "latents", 3, (int64_t[]){2, 32, VAE_AUDIO_L}, lat);
        double t[16];
        int reps = o->vae_reps * 3 > 15 ? 15 : o->vae_reps * 3;
        for (int i = -2; i < reps && ok; i++) {
            double a = vae_now_ms();
            if (h3_audio_vae_decode(vae, lat, VAE_AUDIO_L, out, NULL, &st) != H3_OK) {
                fprintf(stderr, "h3-bench: audio VAE decode: %s\n", st.message);
                ok = 0;
                break;
            }
            if (i >= 0) t[i] = vae_now_ms() - a;
        }
        if (ok) {
            r->audio_ms = vae_median(t, reps);
            snprintf(path, sizeof path, "%s/audio_ours.safetensors", dir);
            r->ok_audio = vae_write_named(path, "audio", 2, (int64_t[]){2, ns / 2}, out);
            printf("audio VAE: %lld samples x 2 in %.2f ms (median of %d)\n", (long long)(ns / 2), r->audio_ms, reps);
        }
    }
    free(lat);
    free(out);
    h3_audio_vae_free(vae);
}

/* Runs tools/h3_vae_reference.py on the dump; returns its H3VAE JSON object (or NULL). */
static JsonNode *vae_run_reference(const options *o, const char *dir) {
    char cmd[8192], script[2048];
    snprintf(script, sizeof script, "%s", o->reference);
    char *slash = strrchr(script, '/');
    snprintf(slash ? slash + 1 : script, sizeof script - (size_t)(slash ? slash + 1 - script : 0), "%s",
             "h3_vae_reference.py");
    snprintf(cmd, sizeof cmd, "%s %s --dump %s --reps %d 2>&1", o->python, script, dir, o->vae_reps);
    return run_python_json(cmd, "H3VAE ");
}

static void bench_vae(const options *o) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/vae-bench", o->dump_dir);
    mkdir(o->dump_dir, 0755);
    mkdir(dir, 0755);
    vae_result r;
    memset(&r, 0, sizeof r);
    vae_profile_block(1);
    vae_profile_block(7);
    vae_bench_audio(o, dir, &r);
    vae_bench_video(o, dir, &r);
    JsonNode *ref = strcmp(o->reference, "none") ? vae_run_reference(o, dir) : NULL;
    double tv = ref_num(ref, "video.ms"), ta = ref_num(ref, "audio.ms");
    double pv = ref_num(ref, "video.rel_l2"), pa = ref_num(ref, "audio.rel_l2");
    printf("\nVAE decoders, 1280x736x124 (37 latents, 7 windows x 28 tiles) and 207 audio latents (5.175 s, "
           "stereo, 32 kHz):\n");
    printf("%-34s %12s %12s %10s %12s\n", "", "ours ms", "torch ms", "speedup", "parity relL2");
    printf("%-34s %12.1f %12.1f %9.2fx %12.2e\n", "video VAE decode (fp16)", r.video_ms, tv, tv / r.video_ms, pv);
    printf("%-34s %12.2f %12.2f %9.2fx %12.2e\n", "audio VAE decode (fp32)", r.audio_ms, ta, ta / r.audio_ms, pa);
    printf("video: %.1f ms per tile forward (196), %d frames emitted; target: >= 1.5x the eager reference%s\n",
           r.video_ms / 196, r.frames, !isnan(tv) && tv / r.video_ms >= 1.5 ? " (met)" : " (missed)");
    if (ref) json_node_unref(ref);
}

/* torch SDPA (flash, cuDNN, efficient) at both S through the reference script's sdpa_backends(), in a
 * child process; run first, so that a kernel of ours that faults cannot lose these numbers. */
static void attention_torch(const options *o) {
    if (strcmp(o->reference, "none") != 0) {
        char dir[512], cmd[1536];
        snprintf(dir, sizeof dir, "%s", o->reference);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
        snprintf(cmd, sizeof cmd,
                 "%s -c \"import sys; sys.path.insert(0, '%s'); import h3_bench_reference as r\n"
                 "for S in (%d, %d):\n"
                 "    for n, x in r.sdpa_backends(S, %d).items(): print('%%-8d %%-18s %%10.3f %%9.1f' %% "
                 "(S, 'torch-' + n, x['ms'], x['tflops']) if 'ms' in x else '%%-8d torch-%%s: %%s' %% (S, n, x['error']))\" 2>&1",
                 o->python, dir, S1, S2, o->reps);
        fflush(stdout);
        int rc = system(cmd);
        if (rc != 0) printf("torch SDPA reference exited with status %d\n", rc);
    }
}

/* ---- --attention only: every dense attention kernel at the block's shapes -------------------------
 * Each path that fits (forced through h3_backend_cuda_set_attention_variant; the kernel name printed is the
 * one that ran) timed with CUDA events around h3_op_attention, median of --reps after 2 warm-ups, on
 * fresh random q, k, v (scores O(1..3), as in the tests); then torch SDPA through the reference
 * script's sdpa_backends() in the same process run (--reference none skips it). */
static void bench_attention_only(const options *o) {
    static const h3_cuda_attention_variant paths[] = { /* the newest last: a kernel that faults ends the run */
        H3_CUDA_VARIANT_AUTO,           H3_CUDA_VARIANT_WGMMA,          H3_CUDA_VARIANT_WGMMA_FA3,
        H3_CUDA_VARIANT_WGMMA_FA3_S2,   H3_CUDA_VARIANT_WGMMA_FA3_NOPP, H3_CUDA_VARIANT_WGMMA_SIMPLE,
        H3_CUDA_VARIANT_MMA,            H3_CUDA_VARIANT_WGMMA_FA3_LAZY, H3_CUDA_VARIANT_WGMMA_FA3_N176,
        H3_CUDA_VARIANT_WGMMA_FA3_N192};
    const int n_paths = (int)(sizeof paths / sizeof paths[0]);
    int64_t seqs[2] = {S1, S2};
    cudaStream_t cs = (cudaStream_t)h3_backend_cuda_stream(B);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    printf("\nattention only: %d heads x %d, bf16, non-causal; median of %d after 2 warm-ups\n", NH, HD, o->reps);
    printf("%-8s %-18s %10s %9s\n", "S", "kernel", "ms", "TF/s");
    fflush(stdout);
    attention_torch(o);
    for (int si = 0; si < 2; si++) {
        size_t mark = h3_arena_mark(B);
        int64_t S = seqs[si];
        h3_tensor q = h3_new_2d(B, H3_BF16, S, INNER), k = h3_new_2d(B, H3_BF16, S, INNER);
        h3_tensor v = h3_new_2d(B, H3_BF16, S, INNER), out = h3_new_2d(B, H3_BF16, S, INNER);
        h3_backend_cuda_fill_uniform(B, &q, seed++, -3.5f, 3.5f);
        h3_backend_cuda_fill_uniform(B, &k, seed++, -1.7f, 1.7f);
        h3_backend_cuda_fill_uniform(B, &v, seed++, -1, 1);
        die_if_failed("attention inputs");
        double flop = 4.0 * (double)S * (double)S * NH * HD;
        for (int p = 0; p < n_paths; p++) {
            h3_cuda_attention_variant old = h3_backend_cuda_set_attention_variant(B, paths[p]);
            const char *kernel = h3_backend_cuda_attention_kernel(B, &out, &q, &k, &v, NH, NH, HD, 0);
            double t[64];
            int reps = o->reps > 64 ? 64 : o->reps;
            for (int i = 0; i < 2; i++) h3_op_attention(B, &out, &q, &k, &v, NH, NH, HD, 0, 1.0f / sqrtf((float)HD));
            for (int i = 0; i < reps; i++) {
                float ms = 0;
                cudaEventRecord(e0, cs);
                h3_op_attention(B, &out, &q, &k, &v, NH, NH, HD, 0, 1.0f / sqrtf((float)HD));
                cudaEventRecord(e1, cs);
                cudaEventSynchronize(e1);
                cudaEventElapsedTime(&ms, e0, e1);
                t[i] = ms;
            }
            h3_backend_cuda_set_attention_variant(B, old);
            die_if_failed(kernel);
            qsort(t, (size_t)reps, sizeof *t, cmp_double);
            printf("%-8lld %-18s %10.3f %9.1f%s\n", (long long)S, kernel, t[reps / 2], tflops(flop, t[reps / 2]),
                   p == 0 ? "  (auto)" : "");
            fflush(stdout);
        }
        h3_arena_reset(B, mark);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

/* ---- the product's forward (--forward on|off|only) ----------------------------------------------
 * run_block is a hand-written block. This times what the engine runs: an h3_dit of --blocks random
 * main blocks (h3_dit_create_random: the release's shapes, weight dtypes and packing, no checkpoint)
 * through h3_dit_begin (text refiner, RoPE tables) and h3_dit_forward (timestep MLP, AdaLN tables,
 * input projections, the blocks, final layer, output heads) over the 1280×736×124 layout that
 * h3_dit_layout builds for the engine (256 text rows, two timesteps), next to run_block timed in
 * the same run. Forward times are medians of synchronised wall time (CUDA events alongside) after
 * one warm-up forward (which grows the arena), scaled to 50 blocks. */

typedef struct fwd_result {
    int ok, blocks, n_t;
    int64_t S;
    double create_s, begin_ms;
    double fwd_ms, fwd_event_ms, enqueue_ms; /* medians: wall, CUDA events, host time inside h3_dit_forward */
    double hand_block_ms;                    /* run_block at S1, same run */
} fwd_result;

static double now_ms(void) { return (double)g_get_monotonic_time() / 1e3; }

/* The release's transformer config (from the test data when present, else the values above). */
static void forward_config(h3_dit_config *c) {
    char dir[4096];
    const char *data = getenv("H3_TEST_DATA");
    snprintf(dir, sizeof dir, "%s/official/transformer", data ? data : "tests/data");
    h3_status st;
    if (h3_dit_config_load(dir, c, &st) == H3_OK) return;
    printf("forward: %s; using the release's values built into h3-bench\n", st.message);
    *c = (h3_dit_config){.num_layers = 50, .num_refiner_layers = 2, .hidden_size = D, .num_heads = NH,
                         .head_dim = HD, .ffn_dim = FFN, .in_channels = 24, .audio_in_channels = 32, .patch_t = 1,
                         .patch_h = 2, .patch_w = 2, .text_dim = 5120, .freq_dim = 256,
                         .time_embed_hidden_dim = 5376, .time_embed_dim = 2688, .rope_freq_dim = 16,
                         .rope_theta = 10000.0f, .norm_eps = 1e-5f, .qk_norm_eps = 1e-5f, .final_norm_eps = 1e-5f};
}

static int fwd_failed(const char *where, h3_status_code rc, const h3_status *st) {
    h3_status sync;
    if (rc == H3_OK && h3_backend_synchronize(B, &sync) == H3_OK) return 0;
    fprintf(stderr, "h3-bench: forward: %s: %s\n", where, rc != H3_OK ? st->message : sync.message);
    h3_backend_clear_error(B);
    return 1;
}

static void bench_real_forward(const options *o, fwd_result *r) {
    memset(r, 0, sizeof *r);
    r->blocks = o->blocks;
    h3_dit_config cfg;
    forward_config(&cfg);
    if (cfg.hidden_size != D || cfg.num_heads != NH || cfg.head_dim != HD || cfg.ffn_dim != FFN ||
        6 * cfg.rope_freq_dim != ROT)
        printf("forward: WARNING: the config differs from the hand-written block's shapes\n");
    printf("forward: building an h3_dit with %d random blocks...\n", o->blocks);
    fflush(stdout);
    h3_status st;
    double t0 = now_ms();
    h3_dit *dit = NULL;
    h3_status_code rc = h3_dit_create_random(B, &cfg, o->blocks, 20261203, NULL, &dit, &st);
    if (fwd_failed("random model", rc, &st)) return;
    r->create_s = (now_ms() - t0) / 1e3;

    /* 1280×736×124: 124 frames -> 37 latent frames of 46×80, 207 audio latents a channel */
    int32_t tags[256];
    for (int i = 0; i < 256; i++) tags[i] = H3_TAG_TEXT;
    h3_dit_layout_params lp = {.text_token_tags = tags, .num_text = 256, .num_latent_frames = 37,
                               .latent_height = 46, .latent_width = 80, .num_audio_latents = 207,
                               .patch_t = cfg.patch_t, .patch_h = cfg.patch_h, .patch_w = cfg.patch_w};
    h3_dit_layout *l = NULL;
    rc = h3_dit_layout_build(&lp, &l, &st);
    if (fwd_failed("layout", rc, &st)) {
        h3_dit_free(dit);
        return;
    }
    r->S = l->seq_len;
    if (l->seq_len != S1) printf("forward: WARNING: layout S %lld, expected %d\n", (long long)l->seq_len, S1);
    size_t mark = h3_arena_mark(B);
    int64_t vf = (int64_t)cfg.in_channels * cfg.patch_h * cfg.patch_w, af = cfg.audio_in_channels;
    h3_tensor text = h3_new_2d(B, H3_BF16, l->num_text, cfg.text_dim);
    h3_tensor xv = h3_new_2d(B, H3_F32, l->num_video_rows, vf), xa = h3_new_2d(B, H3_F32, l->num_audio_rows, af);
    h3_tensor vv = h3_new_2d(B, H3_F32, l->num_video_rows, vf), va = h3_new_2d(B, H3_F32, l->num_audio_rows, af);
    h3_backend_cuda_fill_uniform(B, &text, seed++, -1, 1);
    h3_backend_cuda_fill_uniform(B, &xv, seed++, -1.7f, 1.7f);
    h3_backend_cuda_fill_uniform(B, &xa, seed++, -1.7f, 1.7f);
    float ts[H3_DIT_MAX_TIMESTEPS];
    int32_t *row_index = malloc((size_t)l->seq_len * sizeof *row_index);
    rc = row_index ? h3_dit_layout_timesteps(l, 0.3f, 0.6f, ts, &r->n_t, row_index, &st) : H3_ERR_NO_MEMORY;
    double t[64];
    int reps = o->forward_reps < 3 ? 3 : o->forward_reps > 64 ? 64 : o->forward_reps;
    double ev[64], enq[64];
    cudaStream_t s = (cudaStream_t)h3_backend_cuda_stream(B);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    if (fwd_failed("inputs", rc, &st)) goto done;
    t0 = now_ms();
    rc = h3_dit_begin(dit, l, &text, &st);
    if (fwd_failed("begin", rc, &st)) goto done;
    r->begin_ms = now_ms() - t0;
    printf("forward: begin %.1f ms; forward of %d blocks at S %lld...\n", r->begin_ms, o->blocks,
           (long long)l->seq_len);
    fflush(stdout);
    rc = h3_dit_forward(dit, &xv, &xa, ts, r->n_t, row_index, &vv, &va, &st); /* warm-up: grows the arena */
    if (fwd_failed("warm-up", rc, &st)) goto done;
    for (int i = 0; i < reps; i++) {
        double w0 = now_ms();
        cudaEventRecord(e0, s);
        rc = h3_dit_forward(dit, &xv, &xa, ts, r->n_t, row_index, &vv, &va, &st);
        enq[i] = now_ms() - w0;
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        t[i] = now_ms() - w0;
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        ev[i] = ms;
        if (fwd_failed("forward", rc, &st)) goto done;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    qsort(ev, (size_t)reps, sizeof *ev, cmp_double);
    qsort(enq, (size_t)reps, sizeof *enq, cmp_double);
    r->fwd_ms = t[reps / 2];
    r->fwd_event_ms = ev[reps / 2];
    r->enqueue_ms = enq[reps / 2];
    { /* the velocities must be finite: random weights at full size are no excuse for NaN */
        size_t n = (size_t)h3_tensor_numel(&vv), bad = 0;
        float *host = malloc(n * sizeof *host);
        if (host && h3_tensor_download_f32(B, &vv, host, &st) == H3_OK)
            for (size_t i = 0; i < n; i++) bad += !isfinite(host[i]);
        if (!host || bad) printf("forward: WARNING: %zu non-finite video velocities\n", host ? bad : n);
        free(host);
    }
    h3_dit_end(dit);
    { /* the hand-written block at S1, in the same run */
        block_weights hw;
        acts a;
        make_block(&hw);
        make_acts(&a, S1);
        ctx c = {&hw, 1, &a};
        r->hand_block_ms = time_ms(&c, OP_BLOCK, 1, o->reps);
    }
    r->ok = 1;
done:
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    h3_dit_end(dit);
    h3_arena_reset(B, mark);
    free(row_index);
    h3_dit_layout_free(l);
    h3_dit_free(dit);
}

/* hand: the main section's results when it ran (its forward of --blocks hand-written blocks), else NULL. */
static void report_real_forward(const fwd_result *r, const result *hand) {
    if (!r->ok) return;
    double per_block = r->fwd_ms / r->blocks;
    printf("\nProduct forward (h3_dit_create_random + h3_dit_begin/h3_dit_forward), 1280x736x124, S %lld, %d timesteps,\n"
           "%d of 50 blocks:\n", (long long)r->S, r->n_t, r->blocks);
    printf("  random model built in %.1f s (host); begin (text refiner, RoPE tables) %.1f ms\n", r->create_s,
           r->begin_ms);
    printf("  forward %.1f ms wall (CUDA events %.1f ms; host time inside h3_dit_forward %.1f ms) = %.2f ms/block\n",
           r->fwd_ms, r->fwd_event_ms, r->enqueue_ms, per_block);
    printf("  50-block forward (scaled from %d blocks): %.2f s\n", r->blocks, r->fwd_ms * 50 / r->blocks / 1e3);
    printf("  hand-written block (run_block) in the same run: %.2f ms -> 50 blocks %.2f s; product/hand per block "
           "%.3f (%+.2f ms)\n",
           r->hand_block_ms, r->hand_block_ms * 50 / 1e3, per_block / r->hand_block_ms, per_block - r->hand_block_ms);
    if (hand)
        printf("  hand-written section: block %.2f ms, forward of %d blocks %.1f ms -> 50 blocks %.2f s\n",
               hand->block_ms[0], r->blocks, hand->fwd_ms[0], hand->fwd_ms[0] * 50 / r->blocks / 1e3);
    fflush(stdout);
}

/* ---- the forward over tensor-parallel ranks (--devices LIST, --tp-sweep, --backend fa|vsa) -------
 * The same random model and layout as bench_real_forward, through h3_bench_tp_forward (the engine's
 * team, communicator and handshake; one rank per listed GPU, each with its shard). Times are rank 0's
 * wall clock between barriers (every rank synchronised), so they cover the slowest rank; no CUDA
 * events and no hand-written block here. --tp-sweep runs every valid degree up to the device count on
 * the first devices of the list, TP1 first, so each degree's efficiency against TP1 is measured. */

static void tp_devices_text(const int *devices, int n, char *buf, size_t size) {
    size_t at = (size_t)snprintf(buf, size, "%s", devices[0] < 0 ? "cpu" : "cuda ");
    for (int i = 0; i < n && devices[0] >= 0 && at < size - 8; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%d", i ? "," : "", devices[i]);
    if (devices[0] < 0) snprintf(buf + at, size - at, " x%d", n);
}

/* A degree the model does not split over, refused before any section runs. */
static int tp_degree_ok(const options *o) {
    h3_dit_config cfg;
    forward_config(&cfg);
    h3_tp_plan plan;
    h3_status st;
    if (o->tp_sweep || h3_tp_plan_make(o->n_devices, &cfg, NULL, 0, 2, 0, 0, &plan, &st) == H3_OK) return 1;
    fprintf(stderr, "h3-bench: --devices: %s\n", st.message);
    return 0;
}

static int bench_tp_forward(const options *o) {
    h3_dit_config cfg;
    forward_config(&cfg);
    int degrees[H3_COMM_MAX_RANKS], n_deg = 0;
    if (o->tp_sweep) {
        n_deg = h3_tp_valid_degrees(&cfg, degrees, o->n_devices);
        if (n_deg == 0 || degrees[n_deg - 1] != o->n_devices)
            printf("forward: --tp-sweep: %d devices is not a valid degree (it must divide the %d heads); the sweep "
                   "stops at %d\n", o->n_devices, cfg.num_heads, n_deg ? degrees[n_deg - 1] : 0);
    } else {
        degrees[n_deg++] = o->n_devices;
    }
    /* 1280×736×124: 124 frames -> 37 latent frames of 46×80, 207 audio latents a channel */
    int32_t tags[256];
    for (int i = 0; i < 256; i++) tags[i] = H3_TAG_TEXT;
    h3_bench_tp_params p = {.cfg = &cfg, .blocks = o->blocks, .model_seed = 20261203, .input_seed = seed++,
                            .layout = {.text_token_tags = tags, .num_text = 256, .num_latent_frames = 37,
                                       .latent_height = 46, .latent_width = 80, .num_audio_latents = 207,
                                       .patch_t = cfg.patch_t, .patch_h = cfg.patch_h, .patch_w = cfg.patch_w},
                            .t_video = 0.3f, .t_audio = 0.6f,
                            .reps = o->forward_reps < 3 ? 3 : o->forward_reps > 64 ? 64 : o->forward_reps,
                            .vsa = o->fwd_vsa, .vsa_sparsity = 0.9f, .log = stdout};
    p.comm_reps = p.reps;
    h3_bench_tp_result res[H3_COMM_MAX_RANKS];
    int ok[H3_COMM_MAX_RANKS], all_ok = 1, t1 = -1;
    int main_device = 0;
    cudaError_t ce = cudaGetDevice(&main_device); /* NCCL's setup moves this thread; later sections use B on it */
    if (ce != cudaSuccess) {
        fprintf(stderr, "h3-bench: forward: cudaGetDevice: %s\n", cudaGetErrorString(ce));
        return 0;
    }
    for (int i = 0; i < n_deg; i++) {
        char devs[256];
        tp_devices_text(o->devices, degrees[i], devs, sizeof devs);
        printf("forward: TP%d on %s, %d random blocks, attention %s...\n", degrees[i], devs, o->blocks,
               o->fwd_vsa ? "vsa" : "fa");
        fflush(stdout);
        h3_status st;
        ok[i] = h3_bench_tp_forward(&p, o->devices, degrees[i], &res[i], &st) == H3_OK;
        if (!ok[i]) fprintf(stderr, "h3-bench: forward tp%d: %s\n", degrees[i], st.message);
        if ((ce = cudaSetDevice(main_device)) != cudaSuccess) {
            fprintf(stderr, "h3-bench: forward: cudaSetDevice(%d): %s\n", main_device, cudaGetErrorString(ce));
            return 0;
        }
        all_ok &= ok[i];
        if (ok[i] && degrees[i] == 1) t1 = i;
    }
    printf("\nProduct forward over tensor parallelism (h3_dit_create_random sharded like the loader + "
           "h3_dit_begin/h3_dit_forward),\n1280x736x124, %d of 50 blocks, attention %s:\n", o->blocks,
           o->fwd_vsa ? "VSA-H3 at sparsity 0.90 with random to_gate_compress gates (gate projection and compressed branch run)" : "dense (fa)");
    for (int i = 0; i < n_deg; i++) {
        const h3_bench_tp_result *r = &res[i];
        char devs[256];
        tp_devices_text(o->devices, degrees[i], devs, sizeof devs);
        if (!ok[i]) {
            printf("  TP%d on %s: failed (see above)\n", degrees[i], devs);
            continue;
        }
        printf("  TP%d on %s (%s, %s), S %lld, %d timesteps: random model built in %.1f s (slowest rank); begin "
               "%.1f ms\n", r->size, devs, r->device, r->comm, (long long)r->S, r->n_t, r->create_s, r->begin_ms);
        printf("    forward %.1f ms (median of %d between barriers; min %.1f, max %.1f) = %.2f ms/block; 50-block "
               "forward %.2f s\n", r->fwd_ms, p.reps, r->fwd_min_ms, r->fwd_max_ms, r->fwd_ms / o->blocks,
               r->fwd_ms * 50 / o->blocks / 1e3);
        if (r->comm_ms > 0)
            printf("    all-reduces alone (2 per block, [%lld, %d] f32, %.1f MB each): %.1f ms per forward = %.1f%% "
                   "of it\n", (long long)r->S, cfg.hidden_size, (double)r->comm_bytes / 1e6, r->comm_ms,
                   100 * r->comm_ms / r->fwd_ms);
        if (t1 >= 0 && i != t1)
            printf("    vs TP1 in this run: %.2fx faster, efficiency %.1f%%\n", res[t1].fwd_ms / r->fwd_ms,
                   100 * res[t1].fwd_ms / (r->fwd_ms * r->size));
        if (r->nonfinite) printf("    WARNING: %zu non-finite video velocities\n", r->nonfinite);
        if (r->fallback[0]) printf("    tensor parallelism: %s\n", r->fallback);
    }
    if (n_deg > 1) {
        printf("\n  %-4s %-16s %10s %9s %11s %14s %8s %10s\n", "TP", "devices", "fwd ms", "ms/block", "50-block s",
               "all-reduce ms", "speedup", "efficiency");
        for (int i = 0; i < n_deg; i++) {
            if (!ok[i]) continue;
            const h3_bench_tp_result *r = &res[i];
            char devs[256];
            tp_devices_text(o->devices, degrees[i], devs, sizeof devs);
            double base = t1 >= 0 ? res[t1].fwd_ms : NAN;
            printf("  %-4d %-16s %10.1f %9.2f %11.2f %14.1f %7.2fx %9.1f%%\n", r->size, devs, r->fwd_ms,
                   r->fwd_ms / o->blocks, r->fwd_ms * 50 / o->blocks / 1e3, r->comm_ms, base / r->fwd_ms,
                   100 * base / (r->fwd_ms * r->size));
        }
    }
    fflush(stdout);
    return all_ok;
}

static void usage(void) {
    fprintf(stderr,
            "usage: h3-bench [--blocks N (1..50, default 50)] [--reps R] [--forward-reps R] [--commit HASH]\n"
            "                [--perf-md FILE|-] [--reference SCRIPT|none] [--python PY] [--dump-dir DIR]\n"
            "                [--vsa on|off|only] [--vae on|off|only] [--vae-reps R] [--attention only]\n"
            "                [--forward on|off|only] [--devices LIST] [--tp-sweep] [--backend fa|vsa]\n"
            "  --devices LIST  the forward section's GPUs, one tensor-parallel rank each, NCCL between them\n"
            "                  (\"0,1,2,3\"; default \"0\": today's single-GPU forward next to the hand-written block;\n"
            "                  the count must divide the 56 heads: 1, 2, 4, 7 or 8)\n"
            "  --tp-sweep      the forward at TP1 and every valid degree up to the device count (first devices\n"
            "                  of the list), with the speedup and efficiency against TP1\n"
            "  --backend fa|vsa  the forward's attention: dense (default) or VSA-H3 at sparsity 0.9\n");
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
    o->vae = 1;
    o->vae_reps = 2;
    o->attn_only = 0;
    o->forward = 1;
    const char *devices = "0";
    o->tp_sweep = 0;
    o->fwd_vsa = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--tp-sweep")) { /* a flag: no value */
            o->tp_sweep = 1;
            continue;
        }
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
        else if (!strcmp(a, "--vae") && (!strcmp(v, "on") || !strcmp(v, "off") || !strcmp(v, "only")))
            o->vae = !strcmp(v, "off") ? 0 : !strcmp(v, "on") ? 1 : 2;
        else if (!strcmp(a, "--vae-reps")) o->vae_reps = atoi(v);
        else if (!strcmp(a, "--attention") && !strcmp(v, "only")) o->attn_only = 1;
        else if (!strcmp(a, "--forward") && (!strcmp(v, "on") || !strcmp(v, "off") || !strcmp(v, "only")))
            o->forward = !strcmp(v, "off") ? 0 : !strcmp(v, "on") ? 1 : 2;
        else if (!strcmp(a, "--devices")) devices = v;
        else if (!strcmp(a, "--backend") && (!strcmp(v, "fa") || !strcmp(v, "vsa"))) o->fwd_vsa = !strcmp(v, "vsa");
        else return 0;
        i++;
    }
    h3_status st;
    o->n_devices = h3_bench_parse_devices(devices, o->devices, H3_COMM_MAX_RANKS, &st);
    if (o->n_devices == 0 || o->devices[0] < 0) {
        fprintf(stderr, "h3-bench: --devices: %s\n", o->n_devices ? "GPU ordinals only (cpu:N is for the tests)" : st.message);
        return 0;
    }
    o->fwd_tp = o->tp_sweep || o->fwd_vsa || o->n_devices > 1 || o->devices[0] != 0;
    return o->blocks >= 1 && o->blocks <= 50 && o->reps >= 1 && o->forward_reps >= 1 && o->vae_reps >= 1 &&
           o->vae_reps <= 16;
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
    int forward_runs = o.forward == 2 || (o.forward && o.vae != 2 && !o.attn_only && o.vsa != 2);
    if (forward_runs && o.fwd_tp && !tp_degree_ok(&o)) {
        h3_backend_destroy(B);
        return 2;
    }
    const char *gpu = h3_backend_cuda_device_name(B);
    printf("h3-bench: %s (sm_%d), %d blocks, commit %s\n", gpu, h3_backend_cuda_sm(B), o.blocks, o.commit);
    vsa_result vres[N_VSA_CASES];
    if (o.vae == 2) { /* --vae only: the VAE decoders against eager torch, nothing else */
        bench_vae(&o);
        h3_backend_destroy(B);
        return 0;
    }
    if (o.attn_only) { /* --attention only: the dense attention kernels and torch SDPA, nothing else */
        bench_attention_only(&o);
        h3_backend_destroy(B);
        return 0;
    }
    if (o.vsa == 2) { /* --vsa only: VSA-H3 and our dense attention at its shapes, nothing else */
        bench_vsa(&o, vres);
        report_vsa(&o, vres, gpu);
        h3_backend_destroy(B);
        return 0;
    }
    fwd_result fres;
    if (o.forward == 2 && o.fwd_tp) { /* --forward only over tensor-parallel ranks */
        int ok = bench_tp_forward(&o);
        h3_backend_destroy(B);
        return ok ? 0 : 1;
    }
    if (o.forward == 2) { /* --forward only: h3_dit_forward and the hand-written block, nothing else */
        bench_real_forward(&o, &fres);
        report_real_forward(&fres, NULL);
        h3_backend_destroy(B);
        return fres.ok ? 0 : 1;
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
    if (o.forward && o.fwd_tp) { /* over tensor-parallel ranks (--devices, --tp-sweep, --backend vsa) */
        bench_tp_forward(&o);
    } else if (o.forward) { /* the product's forward next to the hand-written one */
        bench_real_forward(&o, &fres);
        report_real_forward(&fres, &r);
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
    if (o.vae) bench_vae(&o);
    free(w);
    h3_backend_destroy(B);
    return 0;
}
