/* audio_profile.c - the audio VAE decoder (BigVGAN, h3_audio_vae.c) op by op
 * at the bench's shape (vae.c: 207 latents), stereo ([2, C, L] signals), fp32, the
 * release's config (tests/data/official/audio_vae). Every distinct op of
 * decode_device is run alone on random activations and weights of its shape
 * (CUDA events, 3 calls a timed run, medians of 7) and weighted by how many
 * times one decode runs it, so the table adds up to the decode's op time and
 * names where it goes: each conv1d by (kernel, dilation) on the path the
 * decoder takes, then on both float32 GEMM paths forced (im2col + cuBLASLt,
 * and the implicit-GEMM kernel: h3_backend_cuda_set_conv1d_path), with the
 * cuBLASLt GEMM of the im2col path timed alone at the same M×N×K; each
 * conv_transpose1d, the anti-aliased SnakeBeta, the residual adds, copies
 * and the mean of the AMP blocks, clamp. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/h3_backend_cuda_bench.h"
#include "bench.h"
#include "model/h3_audio_vae.h"

enum { AP_CONV, AP_GEMM, AP_CONVT, AP_ACT, AP_ADD, AP_COPY, AP_SCALE, AP_CLAMP, AP_KINDS };
static const char *ap_kind_names[AP_KINDS] = {"conv1d",        "(its GEMM alone)", "conv_transpose1d",
                                              "snake_beta_aa", "add",              "copy",
                                              "scale",         "clamp"};

/* One op at one shape: y = op(x, ...) on [2, Cin, Lin] -> [2, Cout, Lout]. */
typedef struct ap_op {
    int kind;
    int64_t Cin, Lin, Cout, Lout;
    int K, stride, padding, dilation, bias;
} ap_op;

typedef struct ap_ctx {
    const ap_op *op;
    h3_tensor x, y, w, bias, alpha, beta, fu, fd, gx, gw, gy; /* gx, gw, gy: the conv's GEMM operands */
} ap_ctx;

typedef struct ap_bufs {
    h3_tensor act[2], w, bias, alpha, beta, fu, fd, col;
} ap_bufs;

static h3_tensor ap_view(const h3_tensor *buf, int ndim, int64_t a, int64_t b, int64_t c) {
    h3_tensor t = *buf;
    t.ndim = ndim;
    memset(t.shape, 0, sizeof t.shape);
    t.shape[0] = a, t.shape[1] = b;
    if (ndim > 2) t.shape[2] = c;
    return t;
}

static void ap_call(void *opaque) {
    ap_ctx *c = opaque;
    const ap_op *o = c->op;
    switch (o->kind) {
    case AP_CONV:
        h3_op_conv1d(B, &c->y, &c->x, &c->w, o->bias ? &c->bias : NULL, o->stride, o->padding, o->dilation, 1);
        break;
    case AP_GEMM: h3_op_linear(B, &c->gy, &c->gw, &c->gx, NULL); break; /* the conv's y_b = w · colᵀ */
    case AP_CONVT: h3_op_conv_transpose1d(B, &c->y, &c->x, &c->w, &c->bias, o->stride, o->padding); break;
    case AP_ACT: h3_op_snake_beta_antialiased(B, &c->y, &c->x, &c->alpha, &c->beta, &c->fu, &c->fd, 2); break;
    case AP_ADD: h3_op_add(B, &c->y, &c->y, &c->x); break;
    case AP_COPY: h3_op_copy(B, &c->y, &c->x); break;
    case AP_SCALE: h3_op_scale(B, &c->y, &c->y, 1.0f / 3.0f); break;
    default: h3_op_clamp(B, &c->y, &c->x, -1.0f, 1.0f);
    }
}

/* Milliseconds per call of one op, on views of the preallocated buffers. */
static double ap_time(ap_bufs *bf, const ap_op *o) {
    ap_ctx c;
    memset(&c, 0, sizeof c);
    c.op = o;
    c.x = ap_view(&bf->act[0], 3, 2, o->Cin, o->Lin);
    c.y = ap_view(&bf->act[1], 3, 2, o->Cout, o->Lout);
    if (o->kind == AP_CONV || o->kind == AP_GEMM) c.w = ap_view(&bf->w, 3, o->Cout, o->Cin, o->K);
    if (o->kind == AP_CONVT) c.w = ap_view(&bf->w, 3, o->Cin, o->Cout, o->K);
    c.bias = ap_view(&bf->bias, 1, o->Cout, 0, 0);
    c.alpha = ap_view(&bf->alpha, 1, o->Cin, 0, 0);
    c.beta = ap_view(&bf->beta, 1, o->Cin, 0, 0);
    c.fu = bf->fu, c.fd = bf->fd;
    if (o->kind == AP_GEMM) { /* one batch item: [Cout, Cin·K] · [Lout, Cin·K]ᵀ, as conv1d_gemm calls it */
        c.gw = ap_view(&bf->w, 2, o->Cout, o->Cin * o->K, 0);
        c.gx = ap_view(&bf->col, 2, o->Lout, o->Cin * o->K, 0);
        c.gy = ap_view(&bf->act[1], 2, o->Cout, o->Lout, 0);
    }
    return time_ms_or_nan("audio VAE profile", ap_call, &c, 2, 7, 3);
}

/* FLOPs (convs: 2 per multiply-add, both batch items) and bytes moved at least (read + write, fp32). */
static void ap_cost(const ap_op *o, double *flop, double *bytes) {
    double in = 2.0 * o->Cin * o->Lin * 4, out = 2.0 * o->Cout * o->Lout * 4;
    *flop = 0, *bytes = in + out;
    switch (o->kind) {
    case AP_CONV: *flop = 2.0 * 2 * o->Cout * o->Lout * (double)o->Cin * o->K; break;
    case AP_GEMM:
        *flop = 2.0 * o->Cout * o->Lout * (double)o->Cin * o->K;
        *bytes = 4.0 * ((double)o->Lout * o->Cin * o->K + (double)o->Cout * o->Lout);
        break;
    case AP_CONVT: *flop = 2.0 * 2 * o->Cin * o->Lin * (double)o->Cout * o->K; break;
    case AP_ADD: *bytes = in + 2 * out; break;
    default: break;
    }
}

typedef struct ap_row {
    ap_op op;
    int calls; /* per decode */
    const char *what;
    double ms, path_ms[2]; /* conv1d: forced im2col + cuBLASLt, forced implicit GEMM */
} ap_row;

#define AP_MAX_ROWS 512

typedef struct ap_table {
    ap_row r[AP_MAX_ROWS];
    int n;
} ap_table;

static void ap_add(ap_table *t, const char *what, int calls, ap_op o) {
    if (t->n == AP_MAX_ROWS) return;
    t->r[t->n].op = o, t->r[t->n].calls = calls, t->r[t->n].what = what;
    t->n++;
}

/* decode_device's op sequence, each distinct op once with its count per decode. */
static void ap_plan(const h3_audio_vae_config *cfg, int64_t Na, ap_table *t) {
    int64_t C = cfg->decoder_dim, L = Na;
    ap_add(t, "in_proj k1", 1, (ap_op){AP_CONV, cfg->latent_channels, L, cfg->latent_dim, L, 1, 1, 0, 1, 1});
    ap_add(t, "in_proj GEMM", 2, (ap_op){AP_GEMM, cfg->latent_channels, L, cfg->latent_dim, L, 1, 1, 0, 1, 0});
    ap_add(t, "conv_pre k7", 1, (ap_op){AP_CONV, cfg->latent_dim, L, C, L, 7, 1, 3, 1, 1});
    ap_add(t, "conv_pre GEMM", 2, (ap_op){AP_GEMM, cfg->latent_dim, L, C, L, 7, 1, 3, 1, 0});
    for (int s = 0; s < cfg->n_stages; s++) {
        int r = cfg->rates[s], k = cfg->kernel_sizes[s];
        ap_add(t, "upsample", 1, (ap_op){AP_CONVT, C, L, C / 2, L * r, k, r, (k - r) / 2, 1, 1});
        C /= 2, L *= r;
        int acts = 0, adds = 0;
        for (int j = 0; j < cfg->n_kernels; j++) {
            int K = cfg->resblock_kernels[j], nd = cfg->n_dilations[j];
            for (int i = 0; i < nd; i++) {
                int d = cfg->dilations[j][i], occ = 0, seen = 0;
                for (int q = 0; q < nd; q++) occ += cfg->dilations[j][q] == d;
                for (int q = 0; q < i; q++) seen |= cfg->dilations[j][q] == d;
                if (seen) continue;
                /* convs1 at d, once per occurrence; the convs2 (dilation 1) once per dilation join d = 1 */
                int calls = occ + (d == 1 ? nd : 0);
                ap_add(t, "amp conv", calls, (ap_op){AP_CONV, C, L, C, L, K, 1, d * (K - 1) / 2, d, 1});
                ap_add(t, "amp GEMM", 2 * calls, (ap_op){AP_GEMM, C, L, C, L, K, 1, d * (K - 1) / 2, d, 0});
            }
            int has1 = 0;
            for (int i = 0; i < nd; i++) has1 |= cfg->dilations[j][i] == 1;
            if (!has1) { /* convs2 alone at dilation 1 */
                ap_add(t, "amp conv", nd, (ap_op){AP_CONV, C, L, C, L, K, 1, (K - 1) / 2, 1, 1});
                ap_add(t, "amp GEMM", 2 * nd, (ap_op){AP_GEMM, C, L, C, L, K, 1, (K - 1) / 2, 1, 0});
            }
            acts += 2 * nd, adds += nd + (j > 0);
        }
        ap_add(t, "activation", acts, (ap_op){AP_ACT, C, L, C, L, 0, 0, 0, 0, 0});
        ap_add(t, "residual/mean adds", adds, (ap_op){AP_ADD, C, L, C, L, 0, 0, 0, 0, 0});
        ap_add(t, "copies", cfg->n_kernels, (ap_op){AP_COPY, C, L, C, L, 0, 0, 0, 0, 0});
        if (cfg->n_kernels > 1) ap_add(t, "mean scale", 1, (ap_op){AP_SCALE, C, L, C, L, 0, 0, 0, 0, 0});
    }
    ap_add(t, "act_post", 1, (ap_op){AP_ACT, C, L, C, L, 0, 0, 0, 0, 0});
    ap_add(t, "conv_post k7", 1, (ap_op){AP_CONV, C, L, 1, L, 7, 1, 3, 1, 0});
    ap_add(t, "clamp", 1, (ap_op){AP_CLAMP, 1, L, 1, L, 0, 0, 0, 0, 0});
}

static void ap_alloc(const ap_table *t, ap_bufs *bf) {
    int64_t act = 0, w = 0, ch = 0, col = 0;
    for (int i = 0; i < t->n; i++) {
        const ap_op *o = &t->r[i].op;
        int64_t a = 2 * (o->Cin * o->Lin > o->Cout * o->Lout ? o->Cin * o->Lin : o->Cout * o->Lout);
        int64_t ww = o->Cin * o->Cout * (o->K > 0 ? o->K : 1), cc = o->Cin > o->Cout ? o->Cin : o->Cout;
        int64_t cl = o->kind == AP_GEMM ? o->Lout * o->Cin * o->K : 0;
        act = a > act ? a : act, w = ww > w ? ww : w, ch = cc > ch ? cc : ch, col = cl > col ? cl : col;
    }
    h3_tensor *u[] = {&bf->act[0], &bf->act[1], &bf->w, &bf->bias, &bf->alpha, &bf->beta, &bf->col};
    int64_t n[] = {act, act, w, ch, ch, ch, col > 0 ? col : 1};
    float lo[] = {-1, -1, -0.05f, -0.02f, -0.3f, -0.3f, -1}, hi[] = {1, 1, 0.05f, 0.02f, 0.3f, 0.3f, 1};
    for (int i = 0; i < 7; i++) {
        *u[i] = h3_new_1d(B, H3_F32, n[i]);
        h3_backend_cuda_fill_uniform(B, u[i], next_seed(), lo[i], hi[i]);
    }
    bf->fu = h3_new_1d(B, H3_F32, 12); /* the Kaiser filters' length; their values do not change the time */
    bf->fd = h3_new_1d(B, H3_F32, 12);
    h3_backend_cuda_fill_uniform(B, &bf->fu, next_seed(), -0.06f, 0.45f);
    h3_backend_cuda_fill_uniform(B, &bf->fd, next_seed(), -0.06f, 0.45f);
}

static void ap_print_row(const ap_row *r, double total) {
    const ap_op *o = &r->op;
    double flop, bytes;
    ap_cost(o, &flop, &bytes);
    char shape[96];
    if (o->kind == AP_CONV || o->kind == AP_GEMM || o->kind == AP_CONVT)
        snprintf(shape, sizeof shape, "%lld->%lld K%d d%d s%d L%lld->%lld", (long long)o->Cin, (long long)o->Cout,
                 o->K, o->dilation, o->stride, (long long)o->Lin, (long long)o->Lout);
    else
        snprintf(shape, sizeof shape, "[2, %lld, %lld]", (long long)o->Cin, (long long)o->Lin);
    printf("  %-18s %-16s %-34s %9.4f x%-3d %8.3f ms %5.1f%%", r->what, ap_kind_names[o->kind], shape, r->ms,
           r->calls, r->ms * r->calls, 100 * r->ms * r->calls / total);
    if (flop > 0) printf("  %6.2f TFLOP/s", tflops(flop, r->ms));
    else printf("  %6.0f GB/s", bytes / r->ms / 1e6);
    printf("%s\n", o->kind == AP_GEMM ? "  (inside the im2col path)" : "");
    if (o->kind == AP_CONV && !isnan(r->path_ms[0]))
        printf("  %-18s %-16s im2col + cuBLASLt %.4f ms (%.2f TFLOP/s), implicit GEMM %.4f ms (%.2f TFLOP/s)\n", "",
               "  both paths:", r->path_ms[0], tflops(flop, r->path_ms[0]), r->path_ms[1],
               tflops(flop, r->path_ms[1]));
}

/* The table, then the time by kind. */
static void ap_report(const ap_table *t, const h3_audio_vae_config *cfg, int n_latents) {
    double total = 0, by_kind[AP_KINDS] = {0};
    for (int i = 0; i < t->n; i++) {
        double ms = t->r[i].ms * t->r[i].calls;
        by_kind[t->r[i].op.kind] += ms;
        if (t->r[i].op.kind != AP_GEMM) total += ms;
    }
    printf("\naudio VAE decoder op by op: %d latents, stereo, fp32, hop %d; ms per call (median of 7 runs of 3 calls), "
           "calls per decode, ms per decode, share of the sum:\n",
           n_latents, cfg->hop);
    for (int i = 0; i < t->n; i++) {
        const ap_op *o = &t->r[i].op;
        if (o->kind == AP_CONVT)
            printf(" stage (x%d): C %lld -> %lld, L %lld -> %lld\n", o->stride, (long long)o->Cin, (long long)o->Cout,
                   (long long)o->Lin, (long long)o->Lout);
        ap_print_row(&t->r[i], total);
    }
    printf("  sum of the ops: %.2f ms a decode (h3_audio_vae_decode, timed below, adds launches and the copies in "
           "and out)\n  by kind:",
           total);
    for (int k = 0; k < AP_KINDS; k++)
        if (k != AP_GEMM && by_kind[k] > 0) printf(" %s %.2f ms (%.1f%%);", ap_kind_names[k], by_kind[k],
                                                   100 * by_kind[k] / total);
    double best = 0, forced[2] = {0, 0};
    for (int i = 0; i < t->n; i++) {
        const ap_row *r = &t->r[i];
        if (r->op.kind != AP_CONV) continue;
        double a = isnan(r->path_ms[0]) ? r->ms : r->path_ms[0], b = isnan(r->path_ms[1]) ? r->ms : r->path_ms[1];
        forced[0] += a * r->calls, forced[1] += b * r->calls, best += (a < b ? a : b) * r->calls;
    }
    printf("\n  conv1d a decode: as chosen %.2f ms; all im2col + cuBLASLt %.2f ms (its GEMMs alone %.2f ms); all "
           "implicit GEMM %.2f ms; the faster path at each shape %.2f ms\n",
           by_kind[AP_CONV], forced[0], by_kind[AP_GEMM], forced[1], best);
}

void audio_vae_profile(int n_latents) {
    h3_audio_vae_config cfg;
    h3_status st;
    if (h3_audio_vae_config_load("tests/data/official/audio_vae", &cfg, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: audio VAE profile: %s\n", st.message);
        return;
    }
    static ap_table t;
    t.n = 0;
    ap_plan(&cfg, n_latents, &t);
    size_t mark = h3_arena_mark(B);
    ap_bufs bf;
    ap_alloc(&t, &bf);
    if (bench_ok("audio VAE profile: buffers")) {
        for (int i = 0; i < t.n; i++) {
            ap_row *r = &t.r[i];
            r->ms = ap_time(&bf, &r->op);
            r->path_ms[0] = r->path_ms[1] = NAN;
            for (int p = 0; r->op.kind == AP_CONV && r->op.Cout >= 8 && p < 2; p++) { /* Cout < 8: direct only */
                h3_backend_cuda_set_conv1d_path(B, p + 1);
                r->path_ms[p] = ap_time(&bf, &r->op);
            }
            h3_backend_cuda_set_conv1d_path(B, 0);
        }
        ap_report(&t, &cfg, n_latents);
    }
    h3_arena_reset(B, mark);
}
