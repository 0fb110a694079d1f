/* test_vsa.c - VSA-H3 (h3_vsa.h, h3_op_vsa_attention) against the goldens:
 *
 * - top-k budget: Python's ceil((1 − s)·n) at the reference shapes;
 * - the tiling plan on odd shapes (partial prefix tiles, text lengths that
 *   are not multiples of 64, partial video edge tiles) against an
 *   independent per-row formula, and against the goldens' tile_sizes /
 *   tile_order / untile_index (tile 64 and 8, T2VA and FL2VA);
 * - the coarse stage (scores, block mask, compressed branch) per head;
 * - the op's output (1e-4 relative L2), tie-breaking, sparsity 0 == dense;
 * - the whole transformer forward with the VSA adapter (vsa_forward_t64),
 *   dense and sparse, through h3_dit. */
#include "model/h3_adapter.h"
#include "h3_test_fasth3.h"
#include "model/h3_vsa.h"
#include "backend/cpu/h3_cpu_vsa.h" /* the coarse stage: the CPU reference */

#define TOLERANCE 1e-4

static h3_backend *backend;

/* ---- top-k -------------------------------------------------------------------------- */

static void test_topk(void) {
    static const struct { float s; int64_t n, k; } cases[] = {
        {0.9f, 600, 60},   {0.9f, 660, 66},  {0.9f, 1188, 119}, {0.9f, 1782, 179}, {0.9f, 20, 2},
        {0.75f, 114, 29},  {0.75f, 38, 10},  {0.0f, 600, 600},  {0.5f, 3, 2},      {0.999f, 50, 1},
        {0.9f, 1, 1},      {0.0f, 0, 0},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        int64_t k = h3_vsa_topk(cases[i].s, cases[i].n);
        CHECK(k == cases[i].k, "topk(%g, %lld) = %lld, want %lld", (double)cases[i].s, (long long)cases[i].n,
              (long long)k, (long long)cases[i].k);
    }
}

/* ---- tiling plan ---------------------------------------------------------------------- */

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The padded slot of every packed row from the definition alone (docs/spec/fasth3-vsa.md §3.3):
 * prefix row at offset o of its segment -> tile (tiles before) + o/E, slot
 * o%E; video (t, y, x) -> its block in (t, h, w) tile order, at the rank of
 * (t, y, x) inside that block's own extents. */
static void expected_slots(const int64_t *seg, int nseg, int64_t T, int64_t H, int64_t W, int tt, int th, int tw,
                           int32_t *slot) {
    int64_t E = (int64_t)tt * th * tw, row = 0, tiles = 0;
    for (int s = 0; s < nseg; s++) {
        for (int64_t o = 0; o < seg[s]; o++) slot[row++] = (int32_t)((tiles + o / E) * E + o % E);
        tiles += cdiv(seg[s], E);
    }
    int64_t nh = cdiv(H, th), nw = cdiv(W, tw);
    for (int64_t t = 0; t < T; t++)
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++) {
                int64_t bt = t / tt, bh = y / th, bw = x / tw;
                int64_t eh = H - bh * th < th ? H - bh * th : th, ew = W - bw * tw < tw ? W - bw * tw : tw;
                int64_t tile = tiles + (bt * nh + bh) * nw + bw;
                int64_t rank = ((t % tt) * eh + (y % th)) * ew + (x % tw);
                slot[row++] = (int32_t)(tile * E + rank);
            }
}

/* Structural invariants plus the per-row formula. */
static void check_plan(const char *label, const int64_t *seg, int nseg, int64_t T, int64_t H, int64_t W,
                       const h3_vsa_params *p) {
    h3_vsa_plan *pl = NULL;
    h3_status st = {0};
    CHECK(h3_vsa_plan_make(seg, nseg, T, H, W, p, &pl, &st) == H3_OK, "%s: %s", label, st.message);
    if (!pl) return;
    int64_t S = pl->seq_len, E = pl->tile_elems, sum = 0;
    int ok_sizes = 1;
    for (int64_t j = 0; j < pl->num_tiles; j++) {
        ok_sizes &= pl->tile_sizes[j] >= 1 && pl->tile_sizes[j] <= E && pl->tile_start[j] == sum;
        sum += pl->tile_sizes[j];
    }
    CHECK(ok_sizes && sum == S && pl->tile_start[pl->num_tiles] == S, "%s: tile sizes do not partition %lld rows",
          label, (long long)S);
    int32_t *want = malloc((size_t)S * sizeof *want);
    expected_slots(seg, nseg, T, H, W, p->tile_t, p->tile_h, p->tile_w, want);
    int64_t bad = 0;
    for (int64_t i = 0; i < S; i++) bad += pl->untile_index[i] != want[i];
    int64_t bad_order = 0; /* tile_order is untile's inverse over non-pad slots */
    for (int64_t j = 0; j < pl->num_tiles; j++)
        for (int64_t o = 0; o < pl->tile_sizes[j]; o++)
            bad_order += pl->untile_index[pl->tile_order[pl->tile_start[j] + o]] != (int32_t)(j * E + o);
    printf("%s: %lld rows, %lld tiles (%lld prefix, %lld video), padded %lld, top-k %lld; %lld slot and %lld order "
           "mismatches\n", label, (long long)S, (long long)pl->num_tiles, (long long)pl->num_prefix_tiles,
           (long long)pl->num_video_tiles, (long long)pl->padded_len, (long long)pl->topk, (long long)bad,
           (long long)bad_order);
    CHECK(bad == 0 && bad_order == 0, "%s: untile/order differ from the definition", label);
    free(want);
    h3_vsa_plan_free(pl);
}

static void test_plan_shapes(void) {
    h3_vsa_params t8 = {0.75f, 2, 2, 2}, t64 = h3_vsa_params_default();

    /* A hand-sized case: text 5, audio 3 (partial prefix tiles), grid 3x3x5 of 2x2x2. */
    int64_t seg[3] = {5, 0, 3};
    h3_vsa_plan *pl = NULL;
    h3_status st = {0};
    CHECK(h3_vsa_plan_make(seg, 3, 3, 3, 5, &t8, &pl, &st) == H3_OK, "small plan: %s", st.message);
    if (pl) {
        static const int32_t sizes[14] = {5, 3, 8, 8, 4, 4, 4, 2, 4, 4, 2, 2, 2, 1};
        static const int32_t first_tile[8] = {8, 9, 13, 14, 23, 24, 28, 29};
        CHECK(pl->num_tiles == 14 && pl->num_prefix_tiles == 2 && pl->num_video_tiles == 12 && pl->padded_len == 112,
              "small plan: %lld tiles", (long long)pl->num_tiles);
        CHECK(pl->num_tiles == 14 && memcmp(pl->tile_sizes, sizes, sizeof sizes) == 0, "small plan: tile sizes");
        CHECK(memcmp(pl->tile_order + 8, first_tile, sizeof first_tile) == 0, "small plan: first video tile rows");
        CHECK(pl->untile_index[4] == 4 && pl->untile_index[5] == 8 && pl->untile_index[7] == 10 &&
                  pl->untile_index[8] == 16 && pl->untile_index[pl->seq_len - 1] == 13 * 8,
              "small plan: untile slots");
        CHECK(pl->topk == 3, "small plan: top-k %lld, want ceil(0.25·12) = 3", (long long)pl->topk);
        h3_vsa_plan_free(pl);
    }
    int64_t a[3] = {5, 0, 3};
    check_plan("2x2x2 tiles, text 5, audio 3, grid 3x3x5", a, 3, 3, 3, 5, &t8);
    int64_t b[3] = {70, 0, 414};
    check_plan("64 tiles, text 70, audio 414, grid 37x3x5", b, 3, 37, 3, 5, &t64);
    int64_t c[3] = {130, 6, 414};
    check_plan("64 tiles, text 130, cond 6, audio 414, grid 37x7x9", c, 3, 37, 7, 9, &t64);
    int64_t d[3] = {1, 0, 0};
    check_plan("64 tiles, text 1, no audio, grid 1x1x1", d, 3, 1, 1, 1, &t64);
    h3_vsa_params odd = {0.5f, 3, 2, 5};
    int64_t e[3] = {64, 65, 129};
    check_plan("3x2x5 tiles, prefix 64/65/129, grid 7x5x11", e, 3, 7, 5, 11, &odd);

    /* The spec's reference shapes (docs/spec/fasth3-vsa.md §3.9): n, P, video tiles, k at 0.9. */
    static const struct { int64_t L, Na, T, h, w, n, P, video, k; } ref[] = {
        {256, 207, 37, 23, 40, 611, 11, 600, 60},   {512, 207, 37, 23, 40, 615, 15, 600, 60},
        {256, 207, 37, 24, 42, 671, 11, 660, 66},   {256, 405, 72, 24, 42, 1205, 17, 1188, 119},
        {256, 603, 107, 24, 42, 1805, 23, 1782, 179},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(ref); i++) {
        int64_t s[3] = {ref[i].L, 0, 2 * ref[i].Na};
        pl = NULL;
        CHECK(h3_vsa_plan_make(s, 3, ref[i].T, ref[i].h, ref[i].w, &t64, &pl, &st) == H3_OK, "ref plan: %s", st.message);
        if (!pl) continue;
        CHECK(pl->num_tiles == ref[i].n && pl->num_prefix_tiles == ref[i].P && pl->num_video_tiles == ref[i].video &&
                  pl->topk == ref[i].k && pl->padded_len == 64 * ref[i].n,
              "reference %lldx%lldx%lld: n %lld P %lld video %lld k %lld", (long long)ref[i].T, (long long)ref[i].h,
              (long long)ref[i].w, (long long)pl->num_tiles, (long long)pl->num_prefix_tiles,
              (long long)pl->num_video_tiles, (long long)pl->topk);
        h3_vsa_plan_free(pl);
    }

    /* Bad parameters. */
    h3_vsa_params bad[] = {{1.0f, 4, 4, 4}, {-0.1f, 4, 4, 4}, {NAN, 4, 4, 4}, {0.9f, 0, 4, 4}, {0.9f, 64, 64, 64}};
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        pl = NULL;
        CHECK(h3_vsa_plan_make(seg, 3, 3, 3, 5, &bad[i], &pl, &st) == H3_ERR_INVALID_ARGUMENT && !pl &&
                  strstr(st.message, "vsa:"),
              "bad params %zu accepted (%s)", i, st.message);
    }
    int64_t neg[1] = {-1};
    CHECK(h3_vsa_plan_make(neg, 1, 3, 3, 5, &t64, &pl, &st) == H3_ERR_INVALID_ARGUMENT, "negative segment accepted");
    CHECK(h3_vsa_plan_make(seg, 3, 0, 3, 5, &t64, &pl, &st) == H3_ERR_INVALID_ARGUMENT, "empty video accepted");
}

/* ---- goldens: plan, coarse stage, op ----------------------------------------------------- */

typedef struct layer_golden {
    const char *name;
    JsonParser *json;
    h3_st_file *f;
    h3_vsa_plan *plan;
    int heads, dh;
    int64_t S;
} layer_golden;

/* The golden's geometry as a plan; inputs may come from another golden. */
static int layer_open(layer_golden *g, const char *name) {
    memset(g, 0, sizeof *g);
    g->name = name;
    g->json = golden_json(name);
    g->f = golden_tiny(name);
    JsonObject *geo = golden_json_object(g->json, "geometry");
    if (!geo || !g->f) return 0;
    JsonArray *tile = json_object_get_array_member(geo, "tile_shape");
    JsonArray *segs = json_object_get_array_member(geo, "prefix_segments");
    JsonArray *video = json_object_get_array_member(geo, "video_shape");
    h3_vsa_params p = {(float)json_object_get_double_member(geo, "sparsity"), (int)json_array_get_int_element(tile, 0),
                       (int)json_array_get_int_element(tile, 1), (int)json_array_get_int_element(tile, 2)};
    int64_t s[3] = {0};
    int ns = (int)json_array_get_length(segs);
    for (int i = 0; i < ns && i < 3; i++) s[i] = json_array_get_int_element(segs, (guint)i);
    h3_status st = {0};
    CHECK(h3_vsa_plan_make(s, ns, json_array_get_int_element(video, 0), json_array_get_int_element(video, 1),
                           json_array_get_int_element(video, 2), &p, &g->plan, &st) == H3_OK,
          "%s: plan: %s", name, st.message);
    if (!g->plan) return 0;
    CHECK(g->plan->num_tiles == json_object_get_int_member(geo, "num_tiles") &&
              g->plan->num_prefix_tiles == json_object_get_int_member(geo, "num_prefix_tiles") &&
              g->plan->num_video_tiles == json_object_get_int_member(geo, "num_video_tiles") &&
              g->plan->padded_len == json_object_get_int_member(geo, "padded_len") &&
              g->plan->seq_len == json_object_get_int_member(geo, "seq_len") &&
              g->plan->topk == json_object_get_int_member(geo, "topk_video_tiles"),
          "%s: plan geometry differs from the golden (n %lld, P %lld, k %lld)", name, (long long)g->plan->num_tiles,
          (long long)g->plan->num_prefix_tiles, (long long)g->plan->topk);
    const h3_st_tensor *out = h3_st_find(g->f, "out");
    if (!out || out->ndim != 4) return 0;
    g->S = out->shape[1], g->heads = (int)out->shape[2], g->dh = (int)out->shape[3];
    return g->S == g->plan->seq_len;
}

static void layer_close(layer_golden *g) {
    h3_vsa_plan_free(g->plan);
    h3_st_close(g->f);
    if (g->json) g_object_unref(g->json);
}

static void check_tables(layer_golden *g) {
    const h3_vsa_plan *pl = g->plan;
    struct { const char *name; const int32_t *mine; int64_t n; } t[] = {
        {"tile_sizes", pl->tile_sizes, pl->num_tiles},
        {"tile_order", pl->tile_order, pl->seq_len},
        {"untile_index", pl->untile_index, pl->seq_len},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(t); i++) {
        int64_t n = 0;
        int32_t *want = golden_i32(g->f, t[i].name, &n);
        CHECK(want && n == t[i].n && memcmp(want, t[i].mine, (size_t)n * sizeof *want) == 0, "%s: %s differs",
              g->name, t[i].name);
        free(want);
    }
}

/* One head of x [S, H, dh] in tile order. */
static float *head_tiled(const float *x, const h3_vsa_plan *pl, int H, int dh, int h) {
    float *out = malloc((size_t)pl->seq_len * dh * sizeof *out);
    for (int64_t r = 0; r < pl->seq_len; r++)
        memcpy(out + r * dh, x + ((int64_t)pl->tile_order[r] * H + h) * dh, (size_t)dh * sizeof *out);
    return out;
}

/* scores, block_mask and compressed_out per head from the h3_vsa functions. */
static void check_coarse(layer_golden *g, const float *q, const float *k, const float *v) {
    const h3_vsa_plan *pl = g->plan;
    int64_t n = pl->num_tiles, H = g->heads, dh = g->dh;
    float *scores = malloc((size_t)(H * n * n) * sizeof *scores), *comp = malloc((size_t)(n * H * dh) * sizeof *comp);
    uint8_t *mask = calloc((size_t)(H * n * n), 1);
    float *qp = malloc((size_t)(3 * n * dh) * sizeof *qp), *kp = qp + n * dh, *vp = kp + n * dh;
    float *c = malloc((size_t)(n * dh) * sizeof *c), *work = malloc((size_t)(2 * n) * sizeof *work);
    int32_t *keys = malloc((size_t)n * sizeof *keys);
    for (int h = 0; h < H; h++) {
        float *qt = head_tiled(q, pl, (int)H, (int)dh, h), *kt = head_tiled(k, pl, (int)H, (int)dh, h);
        float *vt = head_tiled(v, pl, (int)H, (int)dh, h);
        h3_vsa_pool(qt, dh, pl->tile_sizes, n, (int)dh, qp);
        h3_vsa_pool(kt, dh, pl->tile_sizes, n, (int)dh, kp);
        h3_vsa_pool(vt, dh, pl->tile_sizes, n, (int)dh, vp);
        float *s = scores + h * n * n;
        h3_vsa_scores(qp, kp, n, (int)dh, s);
        for (int64_t r = 0; r < n; r++) {
            int64_t cnt = h3_vsa_select(s + r * n, r, n, pl->num_prefix_tiles, pl->topk, keys, work);
            for (int64_t j = 0; j < cnt; j++) mask[(h * n + r) * n + keys[j]] = 1;
        }
        h3_vsa_compress(s, vp, n, (int)dh, c, work);
        for (int64_t j = 0; j < n; j++) memcpy(comp + (j * H + h) * dh, c + j * dh, (size_t)dh * sizeof *c);
        free(qt);
        free(kt);
        free(vt);
    }
    char label[128];
    snprintf(label, sizeof label, "%s coarse stage", g->name);
    CHECK(golden_compare(g->f, "scores", scores, (size_t)(H * n * n), label) <= 1e-5, "%s: scores", g->name);
    CHECK(golden_compare(g->f, "compressed_out", comp, (size_t)(n * H * dh), label) <= TOLERANCE, "%s: compressed",
          g->name);
    const h3_st_tensor *gm = h3_st_find(g->f, "block_mask");
    int64_t diff = 0, kept = 0;
    if (gm && gm->numel == H * n * n)
        for (int64_t i = 0; i < gm->numel; i++) {
            diff += ((const uint8_t *)gm->data)[i] != mask[i];
            kept += mask[i];
        }
    printf("%s: block mask %lld of %lld tiles kept, %lld differ from the golden\n", g->name, (long long)kept,
           (long long)(H * n * n), (long long)diff);
    CHECK(gm && gm->numel == H * n * n && diff == 0, "%s: block mask differs in %lld places", g->name, (long long)diff);
    free(scores);
    free(comp);
    free(mask);
    free(qp);
    free(c);
    free(work);
    free(keys);
}

static h3_tensor upload(const float *host, int64_t rows, int64_t cols) {
    h3_tensor t = h3_new_2d(backend, H3_F32, rows, cols);
    h3_status st = {0};
    CHECK(h3_backend_check(backend, &st) == H3_OK && h3_tensor_upload_f32(backend, &t, host, &st) == H3_OK,
          "upload: %s", st.message);
    return t;
}

static float *download(const h3_tensor *t) {
    float *host = malloc((size_t)h3_tensor_numel(t) * sizeof *host + 4);
    h3_status st = {0};
    CHECK(h3_tensor_download_f32(backend, t, host, &st) == H3_OK, "download: %s", st.message);
    return host;
}

/* The plan's tables as backend tensors (arena). */
static h3_vsa_tiles tiles_of(const h3_vsa_plan *pl) {
    h3_vsa_tiles t = {.num_tiles = pl->num_tiles, .num_prefix_tiles = pl->num_prefix_tiles, .topk = pl->topk,
                      .tile_elems = pl->tile_elems};
    h3_status st = {0};
    t.tile_sizes = h3_new_1d(backend, H3_I32, pl->num_tiles);
    t.tile_order = h3_new_1d(backend, H3_I32, pl->seq_len);
    t.untile_index = h3_new_1d(backend, H3_I32, pl->seq_len);
    CHECK(h3_backend_check(backend, &st) == H3_OK && h3_tensor_upload_i32(backend, &t.tile_sizes, pl->tile_sizes, &st) == H3_OK &&
              h3_tensor_upload_i32(backend, &t.tile_order, pl->tile_order, &st) == H3_OK &&
              h3_tensor_upload_i32(backend, &t.untile_index, pl->untile_index, &st) == H3_OK,
          "tiles: %s", st.message);
    return t;
}

/* out = VSA(q, k, v, gate) with these tables; caller frees. */
static float *run_op(const float *q, const float *k, const float *v, const float *gate, const h3_vsa_tiles *t,
                     int64_t S, int H, int dh) {
    h3_tensor tq = upload(q, S, (int64_t)H * dh), tk = upload(k, S, (int64_t)H * dh), tv = upload(v, S, (int64_t)H * dh);
    h3_tensor tg = gate ? upload(gate, S, (int64_t)H * dh) : (h3_tensor){0};
    h3_tensor to = h3_new_2d(backend, H3_F32, S, (int64_t)H * dh);
    h3_op_vsa_attention(backend, &to, &tq, &tk, &tv, gate ? &tg : NULL, t, H, dh);
    h3_status st = {0};
    h3_status_code rc = h3_backend_check(backend, &st);
    CHECK(rc == H3_OK, "vsa op: %s", st.message);
    if (rc != H3_OK) {
        h3_backend_clear_error(backend);
        return NULL;
    }
    return download(&to);
}

static void test_layer_golden(const char *name) {
    layer_golden g;
    int ok = layer_open(&g, name);
    CHECK(ok, "%s: golden geometry unusable", name);
    if (ok) {
        check_tables(&g);
        /* vsa_layer_t8 reuses vsa_layer_t64's q, k, v and gate. */
        h3_st_file *in = h3_st_find(g.f, "q") ? g.f : golden_tiny("vsa_layer_t64");
        float *q = golden_f32(in, "q", NULL), *k = golden_f32(in, "k", NULL), *v = golden_f32(in, "v", NULL);
        float *gate = golden_f32(in, "gate", NULL);
        if (q && k && v && gate) {
            check_coarse(&g, q, k, v);
            size_t mark = h3_arena_mark(backend);
            h3_vsa_tiles t = tiles_of(g.plan);
            float *out = run_op(q, k, v, gate, &t, g.S, g.heads, g.dh);
            char label[128];
            snprintf(label, sizeof label, "%s op", name);
            CHECK(golden_compare(g.f, "out", out, (size_t)(g.S * g.heads * g.dh), label) <= TOLERANCE, "%s: out", name);
            free(out);
            h3_arena_reset(backend, mark);
        }
        free(q);
        free(k);
        free(v);
        free(gate);
        if (in != g.f) h3_st_close(in);
    }
    layer_close(&g);
}

/* Equal scores: the lower tile index wins; NaN ranks first (torch.topk). */
static void test_ties(void) {
    float row[10] = {9, 9, 1, 5, 5, 5, 5, 0, 5, 5};
    int32_t keys[10];
    float work[20];
    int64_t n = h3_vsa_select(row, 4, 10, 2, 3, keys, work);
    CHECK(n == 5 && keys[0] == 0 && keys[1] == 1 && keys[2] == 3 && keys[3] == 4 && keys[4] == 5,
          "ties: got %lld keys %d %d %d %d %d", (long long)n, keys[0], keys[1], keys[2], keys[3], keys[4]);
    row[9] = NAN;
    n = h3_vsa_select(row, 4, 10, 2, 2, keys, work);
    CHECK(n == 4 && keys[2] == 3 && keys[3] == 9, "NaN ranking: keys %d %d", keys[2], keys[3]);
    n = h3_vsa_select(row, 1, 10, 2, 2, keys, work);
    CHECK(n == 10, "a prefix query tile must attend every tile (%lld)", (long long)n);
    n = h3_vsa_select(row, 5, 10, 2, 8, keys, work);
    CHECK(n == 10, "top-k = every video tile must be dense (%lld)", (long long)n);
}

/* Sparsity 0: the fine stage is dense attention (gate NULL), and with a
 * gate exactly dense + broadcast(softmax(S)·V̄) ⊙ gate. Also a shape with
 * partial tiles everywhere, random inputs. */
static void test_sparsity_zero(void) {
    int64_t seg[3] = {70, 0, 30};
    int H = 3, dh = 16;
    h3_vsa_params p = {0.0f, 4, 4, 4};
    h3_vsa_plan *pl = NULL;
    h3_status st = {0};
    CHECK(h3_vsa_plan_make(seg, 3, 5, 3, 6, &p, &pl, &st) == H3_OK, "plan: %s", st.message);
    if (!pl) return;
    int64_t S = pl->seq_len, n = S * H * dh;
    float *x = malloc((size_t)(4 * n) * sizeof *x);
    uint64_t r = 88172645463325252ull;
    for (int64_t i = 0; i < 4 * n; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    }
    float *q = x, *k = x + n, *v = x + 2 * n, *gate = x + 3 * n;
    size_t mark = h3_arena_mark(backend);
    h3_vsa_tiles t = tiles_of(pl);
    float *sparse0 = run_op(q, k, v, NULL, &t, S, H, dh);
    h3_tensor tq = upload(q, S, H * dh), tk = upload(k, S, H * dh), tv = upload(v, S, H * dh);
    h3_tensor to = h3_new_2d(backend, H3_F32, S, H * dh);
    h3_op_attention(backend, &to, &tq, &tk, &tv, H, H, dh, 0, (float)(1.0 / sqrt((double)dh)));
    float *dense = download(&to);
    double e = sparse0 ? h3_test_rel_l2(sparse0, dense, (size_t)n) : INFINITY;
    printf("sparsity 0 vs dense attention: rel L2 %.3e\n", e);
    CHECK(e <= 1e-6, "sparsity 0 differs from dense: %.3e", e);

    /* With the gate: dense + compressed branch, built from the h3_vsa pieces. */
    float *gated = run_op(q, k, v, gate, &t, S, H, dh);
    float *want = malloc((size_t)n * sizeof *want);
    memcpy(want, dense, (size_t)n * sizeof *want);
    int64_t nt = pl->num_tiles;
    float *qp = malloc((size_t)(3 * nt * dh + nt * nt + nt * dh + 2 * nt) * sizeof *qp);
    float *kp = qp + nt * dh, *vp = kp + nt * dh, *s = vp + nt * dh, *c = s + nt * nt, *work = c + nt * dh;
    for (int h = 0; h < H; h++) {
        float *qt = head_tiled(q, pl, H, dh, h), *kt = head_tiled(k, pl, H, dh, h), *vt = head_tiled(v, pl, H, dh, h);
        h3_vsa_pool(qt, dh, pl->tile_sizes, nt, dh, qp);
        h3_vsa_pool(kt, dh, pl->tile_sizes, nt, dh, kp);
        h3_vsa_pool(vt, dh, pl->tile_sizes, nt, dh, vp);
        h3_vsa_scores(qp, kp, nt, dh, s);
        h3_vsa_compress(s, vp, nt, dh, c, work);
        for (int64_t j = 0; j < nt; j++)
            for (int64_t o = pl->tile_start[j]; o < pl->tile_start[j + 1]; o++) {
                int64_t row = pl->tile_order[o];
                for (int d = 0; d < dh; d++)
                    want[(row * H + h) * dh + d] += c[j * dh + d] * gate[(row * H + h) * dh + d];
            }
        free(qt);
        free(kt);
        free(vt);
    }
    e = gated ? h3_test_rel_l2(gated, want, (size_t)n) : INFINITY;
    printf("sparsity 0 with gate vs dense + compressed branch: rel L2 %.3e\n", e);
    CHECK(e <= 1e-6, "sparsity 0 with gate: %.3e", e);

    /* A sparse plan of the same shape really drops keys. */
    h3_vsa_params p9 = {0.9f, 4, 4, 4};
    h3_vsa_plan *sp = NULL;
    CHECK(h3_vsa_plan_make(seg, 3, 5, 3, 6, &p9, &sp, &st) == H3_OK && sp && sp->topk < sp->num_video_tiles,
          "sparse plan");
    if (sp) {
        h3_vsa_tiles ts = tiles_of(sp);
        float *sparse = run_op(q, k, v, NULL, &ts, S, H, dh);
        e = sparse ? h3_test_rel_l2(sparse, dense, (size_t)n) : 0;
        printf("sparsity 0.9 (k %lld of %lld) vs dense: rel L2 %.3e\n", (long long)sp->topk,
               (long long)sp->num_video_tiles, e);
        CHECK(e > 1e-3, "sparsity 0.9 equals dense (%.3e): nothing was dropped", e);
        free(sparse);
        h3_vsa_plan_free(sp);
    }

    /* Bad tables are refused, not read out of bounds. */
    h3_vsa_tiles bad = t;
    bad.topk = 0;
    h3_tensor o2 = h3_new_2d(backend, H3_F32, S, H * dh);
    h3_op_vsa_attention(backend, &o2, &tq, &tk, &tv, NULL, &bad, H, dh);
    CHECK(h3_backend_check(backend, &st) == H3_ERR_INTERNAL && strstr(st.message, "vsa_attention"), "topk 0: %s",
          st.message);
    h3_backend_clear_error(backend);
    h3_op_vsa_attention(backend, &tq, &tq, &tk, &tv, NULL, &t, H, dh);
    CHECK(h3_backend_check(backend, &st) == H3_ERR_INTERNAL && strstr(st.message, "aliases"), "alias: %s", st.message);
    h3_backend_clear_error(backend);
    h3_arena_reset(backend, mark);
    free(x);
    free(sparse0);
    free(dense);
    free(gated);
    free(want);
    free(qp);
    h3_vsa_plan_free(pl);
}

/* ---- the whole transformer with the VSA adapter ------------------------------------------ */

static void test_forward_golden(void) {
    h3_adapter *a = NULL;
    h3_dit *dit = NULL;
    h3_status st = {0};
    CHECK(h3_adapter_open(h3_test_data(FASTH3_VSA_ADAPTER), &a, &st) == H3_OK, "vsa adapter: %s", st.message);
    if (a) CHECK(h3_dit_load_with_adapter(backend, h3_test_data(FASTH3_DIFFUSERS_DIR), NULL, a, &dit, &st) == H3_OK,
                 "load with vsa adapter: %s", st.message);
    h3_adapter_free(a);
    if (!dit) return;
    CHECK(h3_dit_num_vsa_gates(dit) == 2, "%d gates loaded", h3_dit_num_vsa_gates(dit));
    JsonParser *p = golden_json("vsa_forward_t64");
    h3_st_file *f = golden_tiny("vsa_forward_t64");
    h3_dit_layout *l = f ? golden_layout(p, f) : NULL;
    if (l) {
        float *v = NULL, *au = NULL;
        /* Dense attention on the same fused weights. */
        CHECK(h3_dit_set_vsa(dit, NULL, &st) == H3_OK, "set dense: %s", st.message);
        golden_forward(backend, dit, f, l, &v, &au);
        CHECK(golden_compare(f, "dense_sample", v, (size_t)(l->num_video_rows * 96), "vsa_forward_t64 dense") <= TOLERANCE,
              "dense sample");
        CHECK(golden_compare(f, "dense_audio_sample", au, (size_t)(l->num_audio_rows * 32), "vsa_forward_t64 dense") <=
                  TOLERANCE, "dense audio sample");
        free(v);
        free(au);
        /* VSA-H3, tile 64, sparsity 0.9. */
        h3_vsa_params vp = h3_vsa_params_default();
        CHECK(h3_dit_set_vsa(dit, &vp, &st) == H3_OK, "set vsa: %s", st.message);
        golden_forward(backend, dit, f, l, &v, &au);
        CHECK(golden_compare(f, "sample", v, (size_t)(l->num_video_rows * 96), "vsa_forward_t64 vsa") <= TOLERANCE,
              "vsa sample");
        CHECK(golden_compare(f, "audio_sample", au, (size_t)(l->num_audio_rows * 32), "vsa_forward_t64 vsa") <= TOLERANCE,
              "vsa audio sample");
        free(v);
        free(au);
        /* The request's plan is the golden's geometry. */
        h3_tensor text = h3_new_2d(backend, H3_F32, l->num_text, 40);
        h3_op_fill(backend, &text, 0.0f);
        CHECK(h3_dit_begin(dit, l, &text, &st) == H3_OK, "begin: %s", st.message);
        const h3_vsa_plan *pl = h3_dit_vsa_plan(dit);
        CHECK(pl && pl->num_tiles == 28 && pl->num_prefix_tiles == 8 && pl->topk == 2 && pl->padded_len == 1792,
              "dit plan: %lld tiles", pl ? (long long)pl->num_tiles : -1LL);
        h3_dit_end(dit);
        CHECK(h3_dit_vsa_plan(dit) == NULL, "plan kept after end");
        h3_dit_set_vsa(dit, NULL, &st);
    }
    h3_dit_layout_free(l);
    h3_st_close(f);
    g_object_unref(p);
    h3_dit_free(dit);
}

/* Through h3_dit: a model without gates at sparsity 0 is the dense model. */
static void test_forward_sparsity_zero(void) {
    h3_adapter *a = NULL;
    h3_dit *dit = NULL;
    h3_status st = {0};
    CHECK(h3_adapter_open(h3_test_data(FASTH3_DENSE_ADAPTER), &a, &st) == H3_OK, "dense adapter: %s", st.message);
    if (a) CHECK(h3_dit_load_with_adapter(backend, h3_test_data(FASTH3_DIFFUSERS_DIR), NULL, a, &dit, &st) == H3_OK,
                 "load: %s", st.message);
    h3_adapter_free(a);
    if (!dit) return;
    CHECK(h3_dit_num_vsa_gates(dit) == 0, "dense adapter brought gates");
    JsonParser *p = golden_json("transformer_t2va_fasth3_dense");
    h3_st_file *f = golden_tiny("transformer_t2va_fasth3_dense");
    h3_dit_layout *l = f ? golden_layout(p, f) : NULL;
    if (l) {
        float *v0, *a0, *v1, *a1;
        golden_forward(backend, dit, f, l, &v0, &a0);
        h3_vsa_params vp = {0.0f, 4, 4, 4};
        CHECK(h3_dit_set_vsa(dit, &vp, &st) == H3_OK, "set vsa: %s", st.message);
        golden_forward(backend, dit, f, l, &v1, &a1);
        h3_dit_set_vsa(dit, NULL, &st);
        size_t nv = (size_t)(l->num_video_rows * 96), na = (size_t)(l->num_audio_rows * 32);
        double ev = v0 && v1 ? h3_test_rel_l2(v1, v0, nv) : INFINITY, ea = a0 && a1 ? h3_test_rel_l2(a1, a0, na) : INFINITY;
        printf("transformer_t2va_fasth3_dense: VSA sparsity 0 vs dense: video %.3e, audio %.3e\n", ev, ea);
        CHECK(ev <= 1e-6 && ea <= 1e-6, "sparsity 0 forward differs from dense: %.3e / %.3e", ev, ea);
        CHECK(golden_compare(f, "sample", v1, nv, "transformer_t2va_fasth3_dense vsa 0") <= TOLERANCE, "sample");
        free(v0);
        free(a0);
        free(v1);
        free(a1);
    }
    h3_vsa_params bad = {1.5f, 4, 4, 4};
    CHECK(h3_dit_set_vsa(dit, &bad, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "sparsity"), "bad sparsity: %s",
          st.message);
    h3_dit_layout_free(l);
    h3_st_close(f);
    g_object_unref(p);
    h3_dit_free(dit);
}

int main(void) {
    h3_status st = {0};
    if (h3_backend_cpu_create(2, &backend, &st) != H3_OK) {
        fprintf(stderr, "cpu backend: %s\n", st.message);
        return 1;
    }
    test_topk();
    test_plan_shapes();
    test_ties();
    test_layer_golden("vsa_layer_t64");
    test_layer_golden("vsa_layer_t8");
    test_layer_golden("vsa_layer_fl2va_t8");
    test_sparsity_zero();
    test_forward_golden();
    test_forward_sparsity_zero();
    h3_backend_destroy(backend);
    return h3_test_finish("test_vsa");
}
