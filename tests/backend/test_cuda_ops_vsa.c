/* test_cuda_ops_vsa.c - test_cuda_ops' checks of VSA-H3's op
 * (h3_op_vsa_attention) against the CPU's, which is its definition: the
 * small odd shapes (test_vsa_small), then the reference shape
 * (full_vsa_all). The harness, the backends and main are test_cuda_ops.c's
 * (test_cuda_ops.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_cuda_ops.h"

#ifdef H3_HAVE_CUDA
#include "model/h3_vsa.h"
#include "backend/cpu/h3_cpu_vsa.h" /* the CPU reference of the coarse stage */

/* ---- VSA-H3 (h3_op_vsa_attention) ---------------------------------------------------------------
 * The GPU op against the CPU op, which is the definition, on small odd shapes and for every kernel
 * that fits a case (generic, mma.sync, wgmma): partial prefix and video tiles, prefix segments that
 * are not multiples of the tile, tiles of 8 and 30 rows, no prefix at all, top-k = all video tiles
 * (which must equal dense attention) and top-k of one or two tiles, with and without the gate. The
 * key-tile lists and coarse scores the GPU built are compared with h3_vsa.c's coarse stage run on
 * the host on the same inputs: the GPU computes the scores bit for bit as the CPU does, so the
 * lists must be identical, near-ties included. Then the reference shape (1280×736×124 with 256 text
 * rows: 611 tiles of 64 = 11 prefix + 600 video, k = 60, 56 heads × 128, gate): every list and
 * score against the host, and 64 query rows against a float64 host reference computed from the
 * same selection. Outputs are NaN-poisoned before each call. A failure prints the first mismatching
 * list (head, query tile, both lists, the scores of the tiles where they part) or output element
 * (packed row, its tile, head, channel, both values), and the error of the prefix and video rows
 * apart, which tells the dense rows' path from the sparse one. */

typedef struct vsa_shape {
    const char *label;
    int64_t seg[3]; /* text, keyframe-condition and audio rows */
    int64_t T, h, w; /* video tokens */
    int tile[3];
    float sparsity;
} vsa_shape;

/* backends_ok, then the sticky error cleared, so that one failing VSA kernel does not hide the
 * results of the next (a fault that kills the CUDA context still ends them all). */
static int vsa_ok(const char *what) {
    if (backends_ok(what)) return 1;
    h3_backend_clear_error(gpu);
    h3_backend_clear_error(cpu);
    return 0;
}

static h3_vsa_plan *vsa_plan_of(const vsa_shape *s) {
    h3_vsa_params p = h3_vsa_params_default();
    p.sparsity = s->sparsity;
    p.tile_t = s->tile[0];
    p.tile_h = s->tile[1];
    p.tile_w = s->tile[2];
    h3_vsa_plan *pl = NULL;
    h3_status st;
    if (h3_vsa_plan_make(s->seg, 3, s->T, s->h, s->w, &p, &pl, &st) != H3_OK) {
        CHECK(0, "%s: plan: %s", s->label, st.message);
        return NULL;
    }
    return pl;
}

/* The plan's tables on a backend, in its arena. */
static h3_vsa_tiles vsa_tables(h3_backend *b, const h3_vsa_plan *pl) {
    h3_vsa_tiles t = {.num_tiles = pl->num_tiles, .num_prefix_tiles = pl->num_prefix_tiles, .topk = pl->topk,
                      .tile_elems = pl->tile_elems};
    t.tile_sizes = h3_new_1d(b, H3_I32, pl->num_tiles);
    t.tile_order = h3_new_1d(b, H3_I32, pl->seq_len);
    t.untile_index = h3_new_1d(b, H3_I32, pl->seq_len);
    h3_tensor_upload_i32(b, &t.tile_sizes, pl->tile_sizes, NULL);
    h3_tensor_upload_i32(b, &t.tile_order, pl->tile_order, NULL);
    h3_tensor_upload_i32(b, &t.untile_index, pl->untile_index, NULL);
    return t;
}

static int vsa_sparse(const h3_vsa_plan *pl) { return pl->topk < pl->num_tiles - pl->num_prefix_tiles; }

/* Entries of the lists and scores a call leaves (h3_backend_cuda_vsa_inspect). */
static size_t vsa_list_len(const h3_vsa_plan *pl, int H) {
    return vsa_sparse(pl) ? (size_t)H * (size_t)(pl->num_tiles - pl->num_prefix_tiles) *
                                (size_t)(pl->num_prefix_tiles + pl->topk)
                          : 0;
}
static size_t vsa_score_len(const h3_vsa_plan *pl, int H, int gate) {
    return vsa_sparse(pl) || gate ? (size_t)H * (size_t)pl->num_tiles * (size_t)pl->num_tiles : 0;
}

/* What the last GPU call selected, fetched right after it (before any other op touches the scratch). */
static int vsa_fetch(const char *name, const h3_vsa_plan *pl, int H, int gate, int32_t **lists, float **scores) {
    size_t nl = vsa_list_len(pl, H), ns = vsa_score_len(pl, H, gate);
    *lists = nl ? malloc(nl * sizeof **lists) : NULL;
    *scores = ns ? malloc(ns * sizeof **scores) : NULL;
    h3_status st;
    if ((nl && !*lists) || (ns && !*scores) ||
        h3_backend_cuda_vsa_inspect(gpu, *lists, nl, *scores, ns, &st) != H3_OK) {
        CHECK(0, "%s: cannot fetch the GPU's lists and scores: %s", name, (nl && !*lists) || (ns && !*scores) ? "host memory" : st.message);
        free(*lists);
        free(*scores);
        *lists = NULL;
        *scores = NULL;
        return 0;
    }
    return 1;
}

/* One head's rows of x [S, W] (host) in tile order, [S, dh]. */
static void host_gather(const h3_vsa_plan *pl, const float *x, int64_t W, int h, int dh, float *dst) {
    for (int64_t r = 0; r < pl->seq_len; r++)
        memcpy(dst + r * dh, x + (int64_t)pl->tile_order[r] * W + (int64_t)h * dh, (size_t)dh * sizeof(float));
}

/* The CPU op's coarse stage for head h on host copies of q and k, with h3_cpu_vsa.c's own functions as
 * the CPU op runs them: scores [n, n] and, for a sparse call, the lists of the video
 * query tiles [n − P][P + topk]. tmp holds S·dh floats. */
static void host_coarse(const h3_vsa_plan *pl, const float *q, const float *k, int64_t W, int h, int dh, float *tmp,
                        float *scores, int32_t *lists) {
    int64_t n = pl->num_tiles, P = pl->num_prefix_tiles, L = P + pl->topk;
    float *qp = malloc((size_t)(n * dh) * sizeof *qp), *kp = malloc((size_t)(n * dh) * sizeof *kp);
    float *work = malloc((size_t)(2 * n) * sizeof *work);
    int32_t *keys = malloc((size_t)n * sizeof *keys);
    host_gather(pl, q, W, h, dh, tmp);
    h3_vsa_pool(tmp, dh, pl->tile_sizes, n, dh, qp);
    host_gather(pl, k, W, h, dh, tmp);
    h3_vsa_pool(tmp, dh, pl->tile_sizes, n, dh, kp);
    h3_vsa_scores(qp, kp, n, dh, scores);
    for (int64_t r = P; lists && r < n; r++) {
        int64_t c = h3_vsa_select(scores + r * n, r, n, P, pl->topk, keys, work);
        memcpy(lists + (r - P) * L, keys, (size_t)(c < L ? c : L) * sizeof *keys);
    }
    free(qp);
    free(kp);
    free(work);
    free(keys);
}

/* The GPU's lists and scores (gl, gs: from vsa_fetch; NULL when the call has none) against the
 * host's coarse stage on the same q, k. The lists must be identical; the scores are computed the
 * same way and are expected bit-identical, and must agree to 1e-6 relative. host_lists and
 * host_scores (optional) receive the host's. */
static void vsa_check_selection(const char *name, const h3_vsa_plan *pl, int H, int dh, const float *q,
                                const float *k, const int32_t *gl, const float *gs, int32_t *host_lists,
                                float *host_scores) {
    int64_t n = pl->num_tiles, P = pl->num_prefix_tiles, L = P + pl->topk, W = (int64_t)H * dh;
    int sparse = vsa_sparse(pl);
    float *tmp = malloc((size_t)(pl->seq_len * dh) * sizeof *tmp), *hs = malloc((size_t)(n * n) * sizeof *hs);
    int32_t *hl = sparse ? malloc((size_t)((n - P) * L) * sizeof *hl) : NULL;
    int64_t list_bad = 0, score_diff = 0;
    double score_worst = 0;
    for (int h = 0; h < H; h++) {
        host_coarse(pl, q, k, W, h, dh, tmp, hs, hl);
        if (host_scores) memcpy(host_scores + (int64_t)h * n * n, hs, (size_t)(n * n) * sizeof *hs);
        if (host_lists && hl) memcpy(host_lists + (int64_t)h * (n - P) * L, hl, (size_t)((n - P) * L) * sizeof *hl);
        const float *ghs = gs ? gs + (int64_t)h * n * n : NULL;
        for (int64_t i = 0; ghs && i < n * n; i++) {
            if (memcmp(&ghs[i], &hs[i], sizeof(float)) == 0) continue;
            double d = fabs((double)ghs[i] - hs[i]) / (fabs((double)hs[i]) + 1e-30);
            if (!(d <= score_worst)) score_worst = isnan(d) ? INFINITY : d;
            if (score_diff++ == 0)
                printf("    first score difference: head %d, query tile %lld, key tile %lld: gpu %.9g, host %.9g\n", h,
                       (long long)(i / n), (long long)(i % n), (double)ghs[i], (double)hs[i]);
        }
        for (int64_t r = 0; gl && hl && r < n - P; r++) {
            const int32_t *a = gl + ((int64_t)h * (n - P) + r) * L, *b = hl + r * L;
            if (memcmp(a, b, (size_t)L * sizeof *a) == 0) continue;
            if (list_bad++ < 3) {
                int64_t e = 0;
                while (e < L && a[e] == b[e]) e++;
                printf("    list of head %d, query tile %lld (video tile %lld) differs from entry %lld of %lld: gpu "
                       "%d, host %d\n",
                       h, (long long)(P + r), (long long)r, (long long)e, (long long)L, a[e], b[e]);
                printf("      gpu video tiles:");
                for (int64_t x = P; x < L && x < P + 24; x++) printf(" %d", a[x]);
                printf("%s\n      host video tiles:", L > P + 24 ? " ..." : "");
                for (int64_t x = P; x < L && x < P + 24; x++) printf(" %d", b[x]);
                printf("%s\n", L > P + 24 ? " ..." : "");
                const float *hrow = hs + (P + r) * n, *grow = ghs ? ghs + (P + r) * n : NULL;
                int32_t tiles[2] = {a[e], b[e]};
                for (int u = 0; u < 2; u++)
                    if (tiles[u] >= 0 && tiles[u] < n)
                        printf("      score of key tile %d: host %.9g, gpu %.9g\n", tiles[u], (double)hrow[tiles[u]],
                               grow ? (double)grow[tiles[u]] : NAN);
            }
        }
    }
    CHECK(list_bad == 0, "%s: %lld of %lld key-tile lists differ from the CPU op's selection", name,
          (long long)list_bad, (long long)(sparse ? H * (n - P) : 0));
    CHECK(score_worst <= 1e-6, "%s: coarse scores differ from the CPU op's by up to %.3g relative", name, score_worst);
    printf("  %-58s %s%lld lists differ, %lld of %lld scores not bit-identical\n", name, sparse ? "" : "(dense) ",
           (long long)list_bad, (long long)score_diff, (long long)(gs ? H * n * n : 0));
    free(tmp);
    free(hs);
    free(hl);
}

/* got [S, H·dh] against ref, with the error of the prefix rows and of the video rows apart and the
 * first element that is clearly wrong. */
static void vsa_compare(const char *name, const h3_vsa_plan *pl, const float *got, const float *ref, int H, int dh,
                        double tol) {
    int64_t S = pl->seq_len, W = (int64_t)H * dh, E = pl->tile_elems;
    double num[2] = {0, 0}, den[2] = {0, 0};
    size_t nonfinite = 0;
    int64_t first_nf = -1;
    for (int64_t i = 0; i < S * W; i++) {
        int video = pl->untile_index[i / W] / E >= pl->num_prefix_tiles;
        if (!isfinite(got[i])) {
            if (nonfinite++ == 0) first_nf = i;
            continue;
        }
        double d = (double)got[i] - ref[i];
        num[video] += d * d;
        den[video] += (double)ref[i] * ref[i];
    }
    double rms = sqrt((den[0] + den[1]) / (double)(S * W));
    size_t wrong = 0;
    int64_t first = -1;
    for (int64_t i = 0; i < S * W; i++)
        if (isfinite(got[i]) && fabs((double)got[i] - ref[i]) > 0.05 * (fabs((double)ref[i]) + rms) && wrong++ == 0)
            first = i;
    double e = nonfinite ? INFINITY : sqrt((num[0] + num[1]) / (den[0] + den[1] > 0 ? den[0] + den[1] : 1));
    double ep = den[0] > 0 ? sqrt(num[0] / den[0]) : 0, ev = den[1] > 0 ? sqrt(num[1] / den[1]) : 0;
    CHECK(nonfinite == 0, "%s: %zu of %lld outputs not finite (unwritten?)", name, nonfinite, (long long)(S * W));
    CHECK(e <= tol, "%s: relative L2 %.3g > %.3g (prefix rows %.3g, video rows %.3g)", name, e, tol, ep, ev);
    printf("  %-58s rel L2 %.2e (prefix rows %.2e, video rows %.2e)%s\n", name, e, ep, ev,
           e <= tol && !nonfinite ? "" : "  FAIL");
    int64_t at[2] = {first_nf, first};
    for (int u = 0; u < 2 && (e > tol || nonfinite); u++) {
        if (at[u] < 0) continue;
        int64_t row = at[u] / W, col = at[u] % W, slot = pl->untile_index[row], tile = slot / E;
        printf("    first %s: packed row %lld (%s tile %lld of %d rows, row %lld of it), head %lld, channel %lld: got "
               "%.6g, want %.6g\n",
               u ? "element off by > 5%" : "non-finite output", (long long)row,
               tile < pl->num_prefix_tiles ? "prefix" : "video", (long long)tile, pl->tile_sizes[tile],
               (long long)(slot % E), (long long)(col / dh), (long long)(col % dh), (double)got[at[u]],
               (double)ref[at[u]]);
    }
    if (e > tol || nonfinite) printf("    %zu non-finite, %zu off by > 5%% of %lld\n", nonfinite, wrong, (long long)(S * W));
}

static void test_vsa(const vsa_shape *s, h3_dtype dt, int H, int dh, int with_gate, h3_cuda_attention_variant path) {
    size_t mc = h3_arena_mark(cpu), mg = h3_arena_mark(gpu);
    h3_vsa_plan *pl = vsa_plan_of(s);
    if (!pl) return;
    int64_t S = pl->seq_len, W = (int64_t)H * dh;
    char name[200];
    pair q = input2(dt, S, W, -3, 3), k = input2(dt, S, W, -1.5f, 1.5f), v = input2(dt, S, W, -1, 1), g = {0};
    if (with_gate) g = input2(dt, S, W, -1, 1);
    pair o = output2(dt, S, W);
    h3_vsa_tiles tc = vsa_tables(cpu, pl), tg = vsa_tables(gpu, pl);
    h3_backend_cuda_set_attention_variant(gpu, path == H3_CUDA_VARIANT_AUTO ? default_path : path);
    const char *kernel = h3_backend_cuda_vsa_kernel(gpu, dt, dh, pl->tile_elems);
    h3_op_vsa_attention(gpu, &o.g, &q.g, &k.g, &v.g, with_gate ? &g.g : NULL, &tg, H, dh);
    h3_backend_cuda_set_attention_variant(gpu, default_path);
    snprintf(name, sizeof name, "vsa[%s] %s, %lld tiles (%lld prefix) k %lld, %dx%d %s%s", kernel, s->label,
             (long long)pl->num_tiles, (long long)pl->num_prefix_tiles, (long long)pl->topk, H, dh, dn(dt),
             with_gate ? " gate" : "");
    int32_t *gl = NULL;
    float *gs = NULL;
    int fetched = vsa_ok(name) && vsa_fetch(name, pl, H, with_gate, &gl, &gs);
    h3_op_vsa_attention(cpu, &o.c, &q.c, &k.c, &v.c, with_gate ? &g.c : NULL, &tc, H, dh);
    if (fetched && vsa_ok(name)) {
        float *hq = download(cpu, &q.c), *hk = download(cpu, &k.c), *got = download(gpu, &o.g),
              *ref = download(cpu, &o.c);
        if (hq && hk && got && ref) {
            vsa_check_selection(name, pl, H, dh, hq, hk, gl, gs, NULL, NULL);
            vsa_compare(name, pl, got, ref, H, dh, tolerance(dt));
            if (!vsa_sparse(pl) && !with_gate) { /* top-k = all and no gate: dense attention */
                pair d = output2(dt, S, W);
                h3_op_attention(cpu, &d.c, &q.c, &k.c, &v.c, H, H, dh, 0, 1.0f / sqrtf((float)dh));
                float *dense = vsa_ok(name) ? download(cpu, &d.c) : NULL;
                char dname[240];
                snprintf(dname, sizeof dname, "%s = dense attention", name);
                if (dense) vsa_compare(dname, pl, got, dense, H, dh, tolerance(dt));
                snprintf(dname, sizeof dname, "  cpu vsa = cpu dense attention (%s)", s->label);
                if (dense) vsa_compare(dname, pl, ref, dense, H, dh, 1e-5);
                free(dense);
            }
        } else {
            CHECK(0, "%s: download failed", name);
        }
        free(hq);
        free(hk);
        free(got);
        free(ref);
    }
    free(gl);
    free(gs);
    h3_vsa_plan_free(pl);
    reset(mc, mg);
}

/* The Hopper consumers (h3_backend_cuda_set_vsa_pipelined: 0 simple, 1 pipelined, 2 paired), the
 * backend's default first: vsa_consumer(0) is the default, 1 and 2 the others in ascending order. */
static int vsa_consumer(int i) {
    int c[3] = {default_pipelined, 0, 0}, m = 1;
    for (int v = 0; v < 3; v++)
        if (v != default_pipelined) c[m++] = v;
    return c[i];
}

/* Which Hopper consumers test_vsa_kernels runs: -1 the first two (with generic and mma.sync), else
 * only vsa_consumer(vsa_only_consumer). A new consumer runs in a later pass, so that a fault in it
 * cannot take the checks of the others with it. */
static int vsa_only_consumer = -1;

/* Each kernel that fits the case once: generic, mma.sync, and the backend's own choice (AUTO:
 * wgmma on Hopper) with the Hopper kernel's consumers. */
static void test_vsa_kernels(const vsa_shape *s, h3_dtype dt, int H, int dh, int with_gate) {
    h3_cuda_attention_variant paths[5] = {H3_CUDA_VARIANT_GENERIC, H3_CUDA_VARIANT_MMA, H3_CUDA_VARIANT_AUTO,
                                       H3_CUDA_VARIANT_AUTO, H3_CUDA_VARIANT_AUTO};
    const char *ran[5];
    int n_ran = 0;
    int E = s->tile[0] * s->tile[1] * s->tile[2];
    for (int p = 0; p < 5; p++) {
        if (vsa_only_consumer < 0 ? p == 4 : p != 2 + vsa_only_consumer) continue;
        int old_pipe = h3_backend_cuda_set_vsa_pipelined(gpu, vsa_consumer(p < 2 ? 0 : p - 2));
        h3_backend_cuda_set_attention_variant(gpu, paths[p] == H3_CUDA_VARIANT_AUTO ? default_path : paths[p]);
        const char *kernel = h3_backend_cuda_vsa_kernel(gpu, dt, dh, E);
        int dup = 0;
        for (int i = 0; i < n_ran; i++) dup |= strcmp(ran[i], kernel) == 0;
        if (vsa_only_consumer >= 0) dup = strncmp(kernel, "wgmma", 5) != 0; /* off Hopper: ran in pass 1 */
        if (!dup) {
            ran[n_ran++] = kernel;
            test_vsa(s, dt, H, dh, with_gate, paths[p]);
        }
        h3_backend_cuda_set_attention_variant(gpu, default_path);
        h3_backend_cuda_set_vsa_pipelined(gpu, old_pipe);
    }
}

/* A tile table that does not describe the sequence is reported at the next synchronize. */
static void test_vsa_bad_table(void) {
    h3_backend *g = NULL;
    h3_status st;
    if (h3_backend_cuda_create(0, &g, &st) != H3_OK) {
        CHECK(0, "second cuda backend: %s", st.message);
        return;
    }
    vsa_shape s = {"bad table", {10, 0, 0}, 4, 4, 4, {4, 4, 4}, 0.5f};
    h3_vsa_plan *pl = vsa_plan_of(&s);
    if (!pl) {
        h3_backend_destroy(g);
        return;
    }
    int64_t S = pl->seq_len, W = 2 * 64;
    h3_tensor q = h3_new_2d(g, H3_BF16, S, W), o = h3_new_2d(g, H3_BF16, S, W);
    h3_op_fill(g, &q, 0.5f);
    h3_vsa_tiles t = vsa_tables(g, pl);
    int32_t *sizes = malloc((size_t)pl->num_tiles * sizeof *sizes);
    memcpy(sizes, pl->tile_sizes, (size_t)pl->num_tiles * sizeof *sizes);
    sizes[0] = 0; /* an empty tile: the CPU op rejects it too */
    h3_tensor_upload_i32(g, &t.tile_sizes, sizes, NULL);
    h3_op_vsa_attention(g, &o, &q, &q, &q, NULL, &t, 2, 64);
    h3_status_code rc = h3_backend_synchronize(g, &st);
    CHECK(rc != H3_OK && strstr(st.message, "tile tables"), "vsa with a tile of 0 rows: rc %d '%s'", rc,
          rc ? st.message : "");
    printf("  %-58s %s\n", "vsa bad tile table reported", rc != H3_OK ? st.message : "NOT REPORTED");
    free(sizes);
    h3_vsa_plan_free(pl);
    h3_backend_destroy(g);
}

static void test_vsa_cases(void) {
    /* text 37 + audio 70: prefix tiles 37, 64, 6; grid 5x6x7 of 4x4x4: 8 video tiles, all partial but one */
    vsa_shape odd = {"text 37 audio 70, grid 5x6x7", {37, 0, 70}, 5, 6, 7, {4, 4, 4}, 0.5f};
    vsa_shape odd_dense = odd, odd_k1 = odd;
    odd_dense.label = "text 37 audio 70, grid 5x6x7, top-k all";
    odd_dense.sparsity = 0.0f;
    odd_k1.label = "text 37 audio 70, grid 5x6x7, top-k 1";
    odd_k1.sparsity = 0.95f;
    /* 27 video tiles, k = ceil(0.05·27) = 2; cond rows too */
    vsa_shape many = {"text 100 cond 20 audio 30, grid 9x9x9", {100, 20, 30}, 9, 9, 9, {4, 4, 4}, 0.95f};
    /* tiles of 8 rows (2x2x2), prefix 5 + 3 */
    vsa_shape small = {"text 5 audio 3, grid 3x3x5 of 2x2x2", {5, 0, 3}, 3, 3, 5, {2, 2, 2}, 0.5f};
    /* tiles of 30 rows (3x2x5), prefix 64 / 65 / 129 */
    vsa_shape e30 = {"prefix 64/65/129, grid 7x5x11 of 3x2x5", {64, 65, 129}, 7, 5, 11, {3, 2, 5}, 0.7f};
    /* no prefix: 8 video tiles, k 2 */
    vsa_shape bare = {"no prefix, grid 8x8x8", {0, 0, 0}, 8, 8, 8, {4, 4, 4}, 0.75f};
    /* 1280x736 in miniature: text 256 + audio 414 (11 prefix tiles), 2 latent frames */
    vsa_shape ref = {"text 256 audio 414, grid 2x23x40", {256, 0, 414}, 2, 23, 40, {4, 4, 4}, 0.9f};

    test_vsa_kernels(&odd, H3_BF16, 3, 128, 1);
    test_vsa_kernels(&odd, H3_BF16, 3, 128, 0);
    test_vsa_kernels(&odd_dense, H3_BF16, 3, 128, 0);
    test_vsa_kernels(&odd_dense, H3_BF16, 3, 128, 1);
    test_vsa_kernels(&odd_k1, H3_BF16, 2, 64, 1);
    test_vsa_kernels(&many, H3_BF16, 2, 128, 1);
    test_vsa_kernels(&many, H3_BF16, 2, 64, 0);
    test_vsa_kernels(&small, H3_BF16, 2, 128, 1);
    test_vsa_kernels(&e30, H3_BF16, 2, 128, 1);
    test_vsa_kernels(&bare, H3_BF16, 2, 128, 1);
    test_vsa_kernels(&ref, H3_BF16, 4, 128, 1);
    test_vsa_kernels(&odd, H3_F16, 2, 128, 1);
    test_vsa_kernels(&many, H3_F16, 2, 64, 1);
    test_vsa_kernels(&odd, H3_BF16, 2, 32, 1); /* the tiny model's head_dim on the GPU */
    test_vsa_kernels(&odd, H3_F32, 2, 32, 1);
    test_vsa_kernels(&e30, H3_F32, 2, 16, 0);
    test_vsa_kernels(&odd, H3_BF16, 2, 96, 1); /* head_dim the tensor-core kernels do not take */
    test_vsa_kernels(&odd_dense, H3_F32, 2, 32, 0);
}

void test_vsa_small(void) {
    printf("VSA-H3 (h3_op_vsa_attention) against the CPU op:\n");
    CHECK(h3_backend_has_vsa_attention(gpu), "the cuda backend does not report a VSA-H3 kernel");
    test_vsa_cases();
    test_vsa_bad_table();
    vsa_only_consumer = 2; /* the third Hopper consumer last */
    test_vsa_cases();
    vsa_only_consumer = -1;
}

/* float64 reference of query row i, head h: softmax over the valid rows of the listed key tiles
 * (list NULL: all n tiles), then + softmax(scores_row)·v̄ ⊙ gate when scores_row. p holds S doubles. */
static void vsa_row_f64(const h3_vsa_plan *pl, const float *q, const float *k, const float *v, const float *g,
                        int64_t W, int h, int dh, int64_t i, const int32_t *list, int64_t count,
                        const float *scores_row, const float *vp, double *out, double *p) {
    const float *qi = q + i * W + (int64_t)h * dh;
    double m = -INFINITY, scale = 1.0 / sqrt((double)dh);
    int64_t m_keys = 0;
    for (int64_t e = 0; e < count; e++) {
        int64_t kt = list ? list[e] : e;
        for (int32_t r = pl->tile_start[kt]; r < pl->tile_start[kt + 1]; r++) {
            const float *kj = k + (int64_t)pl->tile_order[r] * W + (int64_t)h * dh;
            double s = 0;
            for (int d = 0; d < dh; d++) s += (double)qi[d] * kj[d];
            p[m_keys] = s * scale;
            if (p[m_keys] > m) m = p[m_keys];
            m_keys++;
        }
    }
    double sum = 0;
    for (int d = 0; d < dh; d++) out[d] = 0;
    m_keys = 0;
    for (int64_t e = 0; e < count; e++) {
        int64_t kt = list ? list[e] : e;
        for (int32_t r = pl->tile_start[kt]; r < pl->tile_start[kt + 1]; r++) {
            double w = exp(p[m_keys++] - m);
            const float *vj = v + (int64_t)pl->tile_order[r] * W + (int64_t)h * dh;
            sum += w;
            for (int d = 0; d < dh; d++) out[d] += w * vj[d];
        }
    }
    for (int d = 0; d < dh; d++) out[d] /= sum;
    if (!scores_row) return;
    int64_t n = pl->num_tiles;
    double mx = -INFINITY, z = 0;
    for (int64_t j = 0; j < n; j++) mx = scores_row[j] > mx ? scores_row[j] : mx;
    for (int64_t j = 0; j < n; j++) z += exp((double)scores_row[j] - mx);
    for (int d = 0; d < dh; d++) {
        double c = 0;
        for (int64_t j = 0; j < n; j++) c += exp((double)scores_row[j] - mx) / z * vp[j * dh + d];
        out[d] += c * g[i * W + (int64_t)h * dh + d];
    }
}

/* The reference shape on the GPU: every list and score against the host's coarse stage, 64 rows
 * against float64 from the same selection. */
static void full_vsa(h3_cuda_attention_variant path) {
    size_t mg = h3_arena_mark(gpu);
    vsa_shape s = {"1280x736x124, text 256", {256, 0, 414}, 37, 23, 40, {4, 4, 4}, H3_VSA_DEFAULT_SPARSITY};
    h3_vsa_plan *pl = vsa_plan_of(&s);
    if (!pl) return;
    int H = FULL_H, dh = FULL_HD;
    int64_t S = pl->seq_len, W = (int64_t)H * dh, n = pl->num_tiles, P = pl->num_prefix_tiles, L = P + pl->topk;
    CHECK(S == FULL_S && n == 611 && P == 11 && pl->topk == 60, "reference plan: S %lld, n %lld, P %lld, k %lld",
          (long long)S, (long long)n, (long long)P, (long long)pl->topk);
    h3_tensor q = h3_new_2d(gpu, H3_BF16, S, W), k = h3_new_2d(gpu, H3_BF16, S, W), v = h3_new_2d(gpu, H3_BF16, S, W);
    h3_tensor g = h3_new_2d(gpu, H3_BF16, S, W), o = h3_new_2d(gpu, H3_BF16, S, W);
    h3_backend_cuda_fill_uniform(gpu, &q, seed_counter++, -3.5f, 3.5f);
    h3_backend_cuda_fill_uniform(gpu, &k, seed_counter++, -1.7f, 1.7f);
    h3_backend_cuda_fill_uniform(gpu, &v, seed_counter++, -1, 1);
    h3_backend_cuda_fill_uniform(gpu, &g, seed_counter++, -1, 1);
    h3_op_fill(gpu, &o, NAN);
    h3_vsa_tiles t = vsa_tables(gpu, pl);
    h3_backend_cuda_set_attention_variant(gpu, path == H3_CUDA_VARIANT_AUTO ? default_path : path);
    const char *kernel = h3_backend_cuda_vsa_kernel(gpu, H3_BF16, dh, pl->tile_elems);
    h3_op_vsa_attention(gpu, &o, &q, &k, &v, &g, &t, H, dh);
    h3_backend_cuda_set_attention_variant(gpu, default_path);
    char name[200];
    snprintf(name, sizeof name, "FULL vsa[%s] %lld x %dx%d bf16, n %lld (P %lld) k %lld", kernel, (long long)S, H, dh,
             (long long)n, (long long)P, (long long)pl->topk);
    int32_t *gl = NULL;
    float *gs = NULL;
    if (!vsa_ok(name) || !vsa_fetch(name, pl, H, 1, &gl, &gs)) {
        h3_vsa_plan_free(pl);
        h3_arena_reset(gpu, mg);
        return;
    }
    float *hq = download(gpu, &q), *hk = download(gpu, &k), *hv = download(gpu, &v), *hg = download(gpu, &g);
    float *ho = download(gpu, &o);
    int32_t *hl = malloc((size_t)H * (size_t)((n - P) * L) * sizeof *hl);
    float *hs = malloc((size_t)H * (size_t)(n * n) * sizeof *hs), *tmp = malloc((size_t)(S * dh) * sizeof *tmp);
    float *vp = malloc((size_t)(n * dh) * sizeof *vp);
    double *p = malloc((size_t)S * sizeof *p), ref[FULL_HD];
    if (!hq || !hk || !hv || !hg || !ho || !hl || !hs || !tmp || !vp || !p) {
        CHECK(0, "%s: host memory", name);
    } else {
        size_t bad = 0;
        for (size_t i = 0; i < (size_t)(S * W); i++) bad += !isfinite(ho[i]);
        CHECK(bad == 0, "%s: %zu outputs not finite (unwritten?)", name, bad);
        vsa_check_selection(name, pl, H, dh, hq, hk, gl, gs, hl, hs);
        /* rows: first and last text row, an audio row in the partial last audio tile, the last row (a
           partial video edge tile), then random ones */
        int64_t fixed[4] = {0, 255, 256 + 413, S - 1};
        double num[2] = {0, 0}, den[2] = {0, 0};
        int shown = 0;
        for (int tno = 0; tno < 64; tno++) {
            int64_t i = tno < 4 ? fixed[tno] : (int64_t)(rnd() % (uint32_t)S);
            int h = (int)(rnd() % (uint32_t)H);
            int64_t qt = pl->untile_index[i] / pl->tile_elems;
            int video = qt >= P;
            host_gather(pl, hv, W, h, dh, tmp);
            h3_vsa_pool(tmp, dh, pl->tile_sizes, n, dh, vp);
            const int32_t *list = video ? hl + ((int64_t)h * (n - P) + (qt - P)) * L : NULL;
            vsa_row_f64(pl, hq, hk, hv, hg, W, h, dh, i, list, video ? L : n, hs + ((int64_t)h * n + qt) * n, vp,
                        ref, p);
            double rn = 0, rd = 0;
            for (int d = 0; d < dh; d++) {
                double e = ho[i * W + (int64_t)h * dh + d] - ref[d];
                rn += e * e;
                rd += ref[d] * ref[d];
            }
            num[video] += rn;
            den[video] += rd;
            if (rn > 1e-4 * rd && shown++ < 3) {
                int d = 0;
                for (int x = 1; x < dh; x++)
                    if (fabs(ho[i * W + (int64_t)h * dh + x] - ref[x]) > fabs(ho[i * W + (int64_t)h * dh + d] - ref[d])) d = x;
                printf("    row %lld (%s tile %lld of %d rows), head %d: rel L2 %.3g, worst channel %d: got %.6g, "
                       "want %.6g\n",
                       (long long)i, video ? "video" : "prefix", (long long)qt, pl->tile_sizes[qt], h,
                       sqrt(rn / rd), d, (double)ho[i * W + (int64_t)h * dh + d], ref[d]);
            }
        }
        double e = sqrt((num[0] + num[1]) / (den[0] + den[1]));
        double ep = den[0] > 0 ? sqrt(num[0] / den[0]) : 0, ev = den[1] > 0 ? sqrt(num[1] / den[1]) : 0;
        CHECK(e <= 1e-2, "%s: relative L2 %.3g of 64 rows vs float64 (prefix rows %.3g, video rows %.3g)", name, e, ep,
              ev);
        printf("  %-58s rel L2 %.2e of 64 rows vs f64 (prefix %.2e, video %.2e)%s\n", name, e, ep, ev,
               e <= 1e-2 && !bad ? "" : "  FAIL");
    }
    free(hq);
    free(hk);
    free(hv);
    free(hg);
    free(ho);
    free(hl);
    free(hs);
    free(tmp);
    free(vp);
    free(p);
    free(gl);
    free(gs);
    h3_vsa_plan_free(pl);
    h3_arena_reset(gpu, mg);
}

void full_vsa_all(void) {
    printf("VSA-H3 at the reference shape:\n");
    full_vsa(H3_CUDA_VARIANT_AUTO);
    h3_backend_cuda_set_attention_variant(gpu, default_path);
    int wg = strncmp(h3_backend_cuda_vsa_kernel(gpu, H3_BF16, FULL_HD, 64), "wgmma", 5) == 0;
    if (wg) { /* the other Hopper consumers, and the portable kernel */
        int old = h3_backend_cuda_set_vsa_pipelined(gpu, vsa_consumer(1));
        full_vsa(H3_CUDA_VARIANT_AUTO);
        h3_backend_cuda_set_vsa_pipelined(gpu, old);
        full_vsa(H3_CUDA_VARIANT_MMA);
        old = h3_backend_cuda_set_vsa_pipelined(gpu, vsa_consumer(2));
        full_vsa(H3_CUDA_VARIANT_AUTO);
        h3_backend_cuda_set_vsa_pipelined(gpu, old);
    }
}

/* --attention NAME and --vsa-consumer N into default_path and default_pipelined; 0 when they parse. */
/* h3_test.h keeps its CHECK tallies per file: main adds this file's to its
 * own before h3_test_finish. */
void test_cuda_ops_vsa_tally(int *passed, int *failed) {
    *passed = h3_test_passed;
    *failed = h3_test_failed;
}
#endif
