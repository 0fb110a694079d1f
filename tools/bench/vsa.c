/* vsa.c - VSA-H3 (h3_op_vsa_attention) against our dense attention
 * (--vsa on|off|only).
 *
 * At the spec's shapes (docs/spec/fasth3-vsa.md §3.9: text 256, 64-row tiles,
 * sparsity 0.9): 1280×736×124 (the reference: 611 tiles = 11 prefix + 600
 * video, k = 60), and the 10 s and 15 s clips at 1344×768 (243 and 362
 * frames). Each shape times our dense attention and the VSA op (with the gate,
 * i.e. everything the DiT runs; without it; at the reference shape the
 * portable mma.sync kernel; on Hopper the other consumers of the wgmma
 * kernel), and once with stage timing and the fine kernel's probes. Useful
 * FLOPs count only valid query rows × valid keys of the selected tiles (4·dh
 * per pair, from the op's own key lists), so useful TFLOP/s compares with the
 * dense kernel's 4·S²·H·dh. A failure here is reported and cleared, not
 * fatal: the dense numbers measured before it still get reported. With
 * --perf-md, one row per shape goes to its VSA table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/h3_backend_cuda_bench.h"
#include "bench.h"
#include "model/h3_vsa.h"

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
    double tk_ms, triton_ms; /* --vsa-anchors: FastVideo's kernels at this P, video tiles and k, same run */
    double shared, copied;   /* vsa_list_overlap of the lists */
} vsa_result;

struct vsa_run {
    vsa_result res[N_VSA_CASES];
};

enum { VSA_DENSE, VSA_GATE, VSA_NOGATE, VSA_MMA, VSA_ALT };

typedef struct vsa_ctx {
    h3_tensor q, k, v, g, o;
    h3_vsa_tiles t;
    int what;    /* VSA_* */
    int consumer; /* the one VSA_ALT runs (h3_backend_cuda_set_vsa_pipelined) */
} vsa_ctx;

static void vsa_call(void *opaque) {
    vsa_ctx *c = opaque;
    switch (c->what) {
    case VSA_DENSE: h3_op_attention(B, &c->o, &c->q, &c->k, &c->v, NH, NH, HD, 0, 1.0f / sqrtf((float)HD)); break;
    case VSA_GATE: h3_op_vsa_attention(B, &c->o, &c->q, &c->k, &c->v, &c->g, &c->t, NH, HD); break;
    case VSA_NOGATE: h3_op_vsa_attention(B, &c->o, &c->q, &c->k, &c->v, NULL, &c->t, NH, HD); break;
    case VSA_ALT: { /* the Hopper kernel with another consumer */
        int old = h3_backend_cuda_set_vsa_pipelined(B, c->consumer);
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

static double vsa_time(vsa_ctx *c, int what, int warmup, int reps) {
    c->what = what;
    return time_ms_or_nan("vsa", vsa_call, c, warmup, reps, 1);
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

/* --vsa-lists smooth: q or k with the locality of a real video model's
 * attention, so that the coarse stage's top-k lists of neighbouring query
 * tiles overlap as they do there (random q and k give lists that share
 * about k/n of their tiles). Video row (t, y, x), head h, channel pair j:
 * A·(cos θ, sin θ) with θ = ω_j·(t, y, x) + φ_j, the same ω and φ for q and
 * k: random Fourier features, so q·k ≈ A²·Σ_j cos(ω_j·Δp), a Gaussian kernel
 * of the distance between the two tokens with length scales ℓ (tokens; ω ~
 * N(0, 1/ℓ²) per axis). Heads take ℓ of 2, 4, 8 or 16 tokens in turn, local
 * to near-global, as a model's heads differ. Plus independent uniform noise
 * of standard deviation 0.5 per channel (q and k their own); the prefix rows
 * (text, audio) uniform in ±2, as in the random mode. e^{iθ} is the product of
 * three per-axis tables, so no sine is taken per element. */
#define SMOOTH_AMPLITUDE 1.0f
#define SMOOTH_NOISE 0.5f

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float uniform01(uint64_t *x) { return (float)(splitmix(x) >> 40) * (1.0f / 16777216.0f); }

static float gaussian(uint64_t *x) {
    float u = uniform01(x) + 1e-7f, v = uniform01(x);
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

/* One head's 64 frequency tables: et [T][64] (with the phase), ey [h][64], ex [w][64], complex (re, im). */
static void smooth_tables(const h3_vsa_plan *pl, int head, uint64_t *rng, float *et, float *ey, float *ex) {
    static const float scales[4] = {2.0f, 4.0f, 8.0f, 16.0f};
    float l = scales[head % 4];
    int64_t n[3] = {pl->grid[0], pl->grid[1], pl->grid[2]};
    float *tab[3] = {et, ey, ex};
    for (int j = 0; j < HD / 2; j++) {
        float phase = 6.2831853f * uniform01(rng);
        for (int ax = 0; ax < 3; ax++) {
            float w = gaussian(rng) / l;
            for (int64_t i = 0; i < n[ax]; i++) {
                float a = w * (float)i + (ax == 0 ? phase : 0.0f);
                tab[ax][(i * (HD / 2) + j) * 2] = cosf(a);
                tab[ax][(i * (HD / 2) + j) * 2 + 1] = sinf(a);
            }
        }
    }
}

/* q or k [S, INNER] as floats into host (features from feature_seed, noise from noise_seed). */
static int smooth_fill(const h3_vsa_plan *pl, float *host, uint64_t feature_seed, uint64_t noise_seed) {
    int64_t T = pl->grid[0], H = pl->grid[1], W = pl->grid[2], S = pl->seq_len, P = pl->prefix_len;
    float *et = malloc((size_t)T * HD * sizeof *et), *ey = malloc((size_t)H * HD * sizeof *ey),
          *ex = malloc((size_t)W * HD * sizeof *ex);
    if (!et || !ey || !ex) {
        free(et), free(ey), free(ex);
        return 0;
    }
    uint64_t noise = noise_seed, feat = feature_seed;
    const float nz = SMOOTH_NOISE * 1.7320508f * 2.0f; /* uniform of sd 0.5: width 2·√3·0.5 */
    for (int64_t r = 0; r < P * INNER; r++) host[r] = 4.0f * uniform01(&noise) - 2.0f;
    for (int head = 0; head < NH; head++) {
        smooth_tables(pl, head, &feat, et, ey, ex);
        for (int64_t t = 0; t < T; t++)
            for (int64_t y = 0; y < H; y++)
                for (int64_t x = 0; x < W; x++) {
                    float *row = host + (P + (t * H + y) * W + x) * INNER + (int64_t)head * HD;
                    const float *a = et + t * HD, *b = ey + y * HD, *d = ex + x * HD;
                    for (int j = 0; j < HD / 2; j++) {
                        float re = a[2 * j] * b[2 * j] - a[2 * j + 1] * b[2 * j + 1];
                        float im = a[2 * j] * b[2 * j + 1] + a[2 * j + 1] * b[2 * j];
                        float re2 = re * d[2 * j] - im * d[2 * j + 1], im2 = re * d[2 * j + 1] + im * d[2 * j];
                        row[2 * j] = SMOOTH_AMPLITUDE * re2 + nz * (uniform01(&noise) - 0.5f);
                        row[2 * j + 1] = SMOOTH_AMPLITUDE * im2 + nz * (uniform01(&noise) - 0.5f);
                    }
                }
    }
    (void)S;
    free(et), free(ey), free(ex);
    return 1;
}

/* q and k of --vsa-lists smooth on the device; 0 on failure. */
static int smooth_qk(vsa_ctx *c, const h3_vsa_plan *pl) {
    int64_t S = pl->seq_len;
    float *host = malloc((size_t)S * INNER * sizeof *host);
    uint64_t features = next_seed();
    h3_status st;
    c->q = h3_new_2d(B, H3_BF16, S, INNER);
    c->k = h3_new_2d(B, H3_BF16, S, INNER);
    int ok = host && smooth_fill(pl, host, features, next_seed()) && h3_tensor_upload_f32(B, &c->q, host, &st) == H3_OK &&
             smooth_fill(pl, host, features, next_seed()) && h3_tensor_upload_f32(B, &c->k, host, &st) == H3_OK;
    if (!ok) fprintf(stderr, "h3-bench: vsa smooth inputs: %s\n", host ? st.message : "out of host memory");
    free(host);
    return ok;
}

/* How much the lists of the query-tile pairs k_vsa_pair serves (video tiles P+2i, P+2i+1 of a head) share,
 * from the last call's lists: *shared = mean |A∩B| / k over their top-k parts, *copied = the key tiles a
 * pair copies (its union) over what two one-tile CTAs copy (|A| + |B|, prefix tiles included). */
static void vsa_list_overlap(const h3_vsa_plan *pl, double *shared, double *copied) {
    int64_t n = pl->num_tiles, P = pl->num_prefix_tiles, k = pl->topk, L = P + k;
    size_t len = (size_t)NH * (size_t)((n - P) * L);
    int32_t *lists = malloc(len * sizeof *lists);
    uint8_t *mark = calloc((size_t)n, 1);
    h3_status st;
    *shared = *copied = NAN;
    if (!lists || !mark || h3_backend_cuda_vsa_inspect(B, lists, len, NULL, 0, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: vsa lists: %s\n", lists && mark ? st.message : "out of memory");
        free(lists), free(mark);
        return;
    }
    double inter = 0, pairs = 0, uni = 0, both = 0;
    for (int h = 0; h < NH; h++)
        for (int64_t qt = P; qt + 1 < n; qt += 2) {
            const int32_t *a = lists + ((int64_t)h * (n - P) + (qt - P)) * L, *b = a + L;
            int64_t common = 0;
            for (int64_t e = P; e < L; e++) mark[a[e]] = 1;
            for (int64_t e = P; e < L; e++) common += mark[b[e]];
            for (int64_t e = P; e < L; e++) mark[a[e]] = 0;
            inter += (double)common;
            pairs += 1;
            uni += (double)(2 * L - common);
            both += (double)(2 * L);
        }
    *shared = inter / (pairs * (double)k);
    *copied = uni / both;
    free(lists), free(mark);
}

/* q, k (random, or --vsa-lists smooth), random v and gate, and the plan's tiles on the device; 0 on failure. */
static int vsa_inputs(const bench_options *o, vsa_ctx *c, const h3_vsa_plan *pl) {
    int64_t S = pl->seq_len;
    if (o->vsa_smooth) {
        if (!smooth_qk(c, pl)) return 0;
    } else {
        c->q = rand2(S, INNER, 2.0f);
        c->k = rand2(S, INNER, 2.0f);
    }
    c->v = rand2(S, INNER, 1.0f);
    c->g = rand2(S, INNER, 1.0f);
    c->o = h3_new_2d(B, H3_BF16, S, INNER);
    c->t = (h3_vsa_tiles){.num_tiles = pl->num_tiles, .num_prefix_tiles = pl->num_prefix_tiles, .topk = pl->topk,
                          .tile_elems = pl->tile_elems};
    c->t.tile_sizes = h3_new_1d(B, H3_I32, pl->num_tiles);
    c->t.tile_order = h3_new_1d(B, H3_I32, S);
    c->t.untile_index = h3_new_1d(B, H3_I32, S);
    h3_tensor_upload_i32(B, &c->t.tile_sizes, pl->tile_sizes, NULL);
    h3_tensor_upload_i32(B, &c->t.tile_order, pl->tile_order, NULL);
    h3_tensor_upload_i32(B, &c->t.untile_index, pl->untile_index, NULL);
    return bench_ok("vsa inputs");
}

/* On Hopper, the other consumers of the wgmma kernel (0 simple, 1 pipelined, 2 paired): the two
 * that are not the current one, timed where they run a kernel of their own. */
static void vsa_time_alternatives(const bench_options *o, vsa_ctx *c, const h3_vsa_plan *pl, vsa_result *r,
                                  int *alts, int *has_alt) {
    int pipe = h3_backend_cuda_set_vsa_pipelined(B, 0);
    h3_backend_cuda_set_vsa_pipelined(B, pipe);
    for (int a = 0, v = 0; v < 3; v++)
        if (v != pipe && a < 2) alts[a++] = v;
    for (int a = 0; a < 2; a++) {
        h3_backend_cuda_set_vsa_pipelined(B, alts[a]);
        r->alt_kernel[a] = h3_backend_cuda_vsa_kernel(B, H3_BF16, HD, pl->tile_elems);
        h3_backend_cuda_set_vsa_pipelined(B, pipe);
        has_alt[a] = strcmp(r->alt_kernel[a], r->kernel) != 0;
        c->consumer = alts[a];
        r->alt_ms[a] = has_alt[a] ? vsa_time(c, VSA_ALT, 1, o->reps) : NAN;
    }
}

/* Stage timing of one gated call (and of the alternatives), and the fine kernel's two probes. */
static void vsa_profile(vsa_ctx *c, vsa_result *r, const int *alts, const int *has_alt) {
    h3_status st;
    float ms[3] = {NAN, NAN, NAN}, alt[2][3] = {{NAN, NAN, NAN}, {NAN, NAN, NAN}};
    r->copy_ms = r->math_ms = NAN;
    if (h3_backend_cuda_vsa_profile(B, 1, &st) == H3_OK) {
        c->what = VSA_GATE;
        vsa_call(c);
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
                c->what = VSA_ALT;
                c->consumer = alts[a];
                vsa_call(c);
                if (h3_backend_cuda_vsa_stage_ms(B, alt[a], &st) != H3_OK) fprintf(stderr, "h3-bench: %s\n", st.message);
            }
        h3_backend_cuda_vsa_profile(B, 0, NULL);
    }
    bench_ok("vsa stages");
    for (int i = 0; i < 3; i++) r->stage_ms[i] = ms[i];
    for (int a = 0; a < 2; a++) r->alt_fine_ms[a] = alt[a][2];
}

static void vsa_case_run(const bench_options *o, const vsa_case *vc, vsa_result *r, int reference_shape) {
    h3_status st;
    memset(r, 0, sizeof *r);
    r->tk_ms = r->triton_ms = NAN; /* set by vsa_anchors when --vsa-anchors runs */
    h3_vsa_params p = h3_vsa_params_default();
    int64_t seg[3] = {vc->text, 0, vc->audio};
    h3_vsa_plan *pl = NULL;
    if (h3_vsa_plan_make(seg, 3, vc->T, vc->h, vc->w, &p, &pl, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: vsa plan %s: %s\n", vc->label, st.message);
        return;
    }
    size_t mark = h3_arena_mark(B);
    vsa_ctx c;
    memset(&c, 0, sizeof c);
    if (vsa_inputs(o, &c, pl)) {
        int64_t S = pl->seq_len;
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
        if (!isnan(r->vsa_ms)) vsa_list_overlap(pl, &r->shared, &r->copied);
        r->nogate_ms = vsa_time(&c, VSA_NOGATE, 1, o->reps);
        r->mma_ms = reference_shape ? vsa_time(&c, VSA_MMA, 1, o->reps) : NAN;
        int alts[2], has_alt[2];
        vsa_time_alternatives(o, &c, pl, r, alts, has_alt);
        vsa_profile(&c, r, alts, has_alt);
        r->ok = 1;
        printf("  dense %.2f ms, vsa %.2f ms (%.2fx)\n", r->dense_ms, r->vsa_ms, r->dense_ms / r->vsa_ms);
    }
    h3_arena_reset(B, mark);
    h3_vsa_plan_free(pl);
}

/* FastVideo's ThunderKittens and Triton kernels (--vsa-anchors DIR:
 * bench_vsa_anchors.py) in the same run, at each shape's prefix tiles,
 * video tiles and k. Their tiles are all 64 rows (S = tiles·64) and their
 * lists random; ours are the plan's (a partial last tile per segment) and
 * the coarse stage's. Both count the same (query tile, key tile) pairs. */
static void vsa_anchors(const bench_options *o, vsa_run *run) {
    for (int i = 0; i < N_VSA_CASES; i++) run->res[i].tk_ms = run->res[i].triton_ms = NAN;
    GString *cmd = g_string_new(NULL);
    g_string_printf(cmd, "%s %s/bench_vsa_anchors.py --heads %d", o->python, o->vsa_anchors, NH);
    int shapes = 0;
    for (int i = 0; i < N_VSA_CASES; i++) {
        const vsa_result *r = &run->res[i];
        if (!r->ok) continue;
        g_string_append_printf(cmd, " --shape %lld,%lld,%lld", (long long)r->P, (long long)(r->n - r->P),
                               (long long)r->k);
        shapes++;
    }
    JsonNode *res = shapes ? run_python_json_document(cmd->str) : NULL;
    g_string_free(cmd, TRUE);
    JsonObject *root = res && JSON_NODE_HOLDS_OBJECT(res) ? json_node_get_object(res) : NULL;
    JsonArray *rows = root && json_object_has_member(root, "rows") ? json_object_get_array_member(root, "rows") : NULL;
    if (!rows) {
        printf("VSA anchors: no result from %s/bench_vsa_anchors.py; the TK column stays empty\n", o->vsa_anchors);
        if (res) json_node_unref(res);
        return;
    }
    for (int i = 0, row = 0; i < N_VSA_CASES; i++) {
        vsa_result *r = &run->res[i];
        if (!r->ok || row >= (int)json_array_get_length(rows)) continue;
        JsonObject *a = json_array_get_object_element(rows, (guint)row++);
        if (json_object_get_int_member_with_default(a, "prefix_tiles", -1) != r->P ||
            json_object_get_int_member_with_default(a, "k", -1) != r->k) {
            printf("VSA anchors: row %d is not the shape asked for; ignored\n", row);
            continue;
        }
        r->tk_ms = json_object_get_double_member_with_default(a, "tk_ms", NAN);
        r->triton_ms = json_object_get_double_member_with_default(a, "triton_ms", NAN);
    }
    json_node_unref(res);
}

vsa_run *vsa_bench(const bench_options *o) {
    vsa_run *run = calloc(1, sizeof *run);
    if (!run) {
        fprintf(stderr, "h3-bench: out of host memory\n");
        exit(1);
    }
    for (int ci = 0; ci < N_VSA_CASES; ci++) vsa_case_run(o, &vsa_cases[ci], &run->res[ci], ci == 0);
    if (o->vsa_anchors) vsa_anchors(o, run);
    return run;
}

void vsa_free(vsa_run *run) { free(run); }

/* ---- the report -------------------------------------------------------------------------------------- */

static void print_case(const vsa_result *r, const char *label, int reference_shape) {
    double dtf = tflops(r->dense_flop, r->dense_ms), vtf = tflops(r->useful_flop, r->vsa_ms);
    double ftf = tflops(r->useful_flop, r->stage_ms[2]);
    char tiles[32], stages[40];
    snprintf(tiles, sizeof tiles, "%lld+%lld", (long long)r->P, (long long)(r->n - r->P));
    snprintf(stages, sizeof stages, "%.2f/%.2f/%.2f", r->stage_ms[0], r->stage_ms[1], r->stage_ms[2]);
    printf("%-22s %7lld %11s %4lld %9.2f %8.1f %9.2f %8.1f %7.1f%% %7.2fx %22s %8.1f %7.1f%%\n", label,
           (long long)r->S, tiles, (long long)r->k, r->dense_ms, dtf, r->vsa_ms, vtf, 100 * vtf / dtf,
           r->dense_ms / r->vsa_ms, stages, ftf, 100 * ftf / dtf);
    printf("%-22s without the gate %.2f ms; kernel %s, %d CTAs/SM\n", "", r->nogate_ms, r->kernel, r->ctas);
    printf("%-22s lists: neighbouring video query tiles share %.1f%% of their top-k; a paired CTA copies %.1f%% of "
           "the key tiles two one-tile CTAs copy\n", "", 100 * r->shared, 100 * r->copied);
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
    if (reference_shape)
        printf("%-22s mma.sync (portable) %.2f ms = %.1f useful TF/s\n", "", r->mma_ms,
               tflops(r->useful_flop, r->mma_ms));
    if (!isnan(r->tk_ms))
        printf("%-22s same run: FastVideo ThunderKittens %.2f ms, Triton %.2f ms; our fine kernel %.2fx TK "
               "(target >= 1.25x), our whole op %.2fx TK (target > 1x), %.2fx Triton\n", "", r->tk_ms, r->triton_ms,
               r->tk_ms / r->stage_ms[2], r->tk_ms / r->vsa_ms, r->triton_ms / r->vsa_ms);
}

/* One row of the VSA table in --perf-md, before its "<!-- vsa-runs -->" line. */
static void record_case(const bench_options *o, const vsa_result *r, const char *label, const char *gpu,
                        const char *date) {
    double dtf = tflops(r->dense_flop, r->dense_ms), vtf = tflops(r->useful_flop, r->vsa_ms);
    double ftf = tflops(r->useful_flop, r->stage_ms[2]);
    char row[1600], alt[900] = "";
    snprintf(alt, sizeof alt, "; lists %s (pairs share %.0f%% of top-k, paired copies %.0f%%)",
             o->vsa_smooth ? "smooth" : "random", 100 * r->shared, 100 * r->copied);
    if (!isnan(r->copy_ms))
        snprintf(alt + strlen(alt), sizeof alt - strlen(alt), "; copies alone %.2f ms (%.1f TB/s), consumer alone %.2f ms",
                 r->copy_ms, r->copy_bytes / r->copy_ms / 1e9, r->math_ms);
    if (!isnan(r->tk_ms)) {
        size_t at = strlen(alt);
        snprintf(alt + at, sizeof alt - at, "; same run: TK %.2f ms (fine %.2fx TK, op %.2fx TK), Triton %.2f ms",
                 r->tk_ms, r->tk_ms / r->stage_ms[2], r->tk_ms / r->vsa_ms, r->triton_ms);
    }
    for (int a = 0; a < 2; a++)
        if (!isnan(r->alt_ms[a])) {
            size_t at = strlen(alt);
            snprintf(alt + at, sizeof alt - at, "; %s %.2f ms, fine %.2f ms (%.0f%%)", r->alt_kernel[a], r->alt_ms[a],
                     r->alt_fine_ms[a], 100 * tflops(r->useful_flop, r->alt_fine_ms[a]) / dtf);
        }
    snprintf(row, sizeof row,
             "| %s | %s | %s | %s | %lld | %lld | %.2f (%.0f TF/s) | %.2f (%.0f TF/s) | %.2fx | %.2f / %.2f / %.2f | "
             "%.0f | %.0f%% | %s, %d/SM%s |\n",
             date, gpu, o->commit, label, (long long)r->S, (long long)r->k, r->dense_ms, dtf, r->vsa_ms, vtf,
             r->dense_ms / r->vsa_ms, r->stage_ms[0], r->stage_ms[1], r->stage_ms[2], ftf, 100 * ftf / dtf, r->kernel,
             r->ctas, alt);
    if (!perf_insert_before(o->perf_md, "<!-- vsa-runs -->", row))
        fprintf(stderr, "h3-bench: no '<!-- vsa-runs -->' line in %s; VSA row not recorded\n", o->perf_md);
}

void vsa_report(const bench_options *o, const vsa_run *run, const char *gpu) {
    printf("\nVSA-H3 vs our dense attention (56 heads x 128, 64-row tiles, sparsity 0.9, gate on; useful TF/s over\n"
           "valid query rows x valid keys of the selected tiles; target: the block-sparse kernel >= 85%% of the dense\n"
           "kernel's TF/s, docs/spec/fasth3-vsa.md §4.3; with --vsa-anchors, FastVideo's ThunderKittens and Triton\n"
           "kernels in the same run: our fine kernel >= 1.25x TK, the whole op faster than TK, issue 18):\n");
    printf("%-22s %7s %11s %4s %9s %8s %9s %8s %8s %8s %22s %8s %8s\n", "shape", "S", "tiles P+vid", "k", "dense ms",
           "dense TF", "vsa ms", "useful TF", "of dense", "speedup", "stages ms prep/crs/fine", "fine TF", "of dense");
    for (int i = 0; i < N_VSA_CASES; i++)
        if (run->res[i].ok) print_case(&run->res[i], vsa_cases[i].label, i == 0);
    if (!o->perf_md) return;
    char date[32];
    perf_date(date, sizeof date);
    for (int i = 0; i < N_VSA_CASES; i++)
        if (run->res[i].ok) record_case(o, &run->res[i], vsa_cases[i].label, gpu, date);
    printf("VSA rows recorded in %s\n", o->perf_md);
}
