/* h3_cpu_vsa.c - VSA-H3 block-sparse attention on the CPU backend, the
 * float32 reference the CUDA kernel is checked against: the coarse stage
 * (h3_cpu_vsa.h) and the op (h3_backend_cpu_impl.h).
 *
 * One head at a time: the head's q, k, v (and gate) rows are gathered into
 * tile order (tile j = rows [start_j, start_j + size_j), no pads: masking
 * the pad keys by tile size is then implicit), pooled, scored and selected
 * by the coarse stage below. Each query tile then runs ordinary
 * softmax attention against the concatenated rows of its key tiles through
 * two sgemm calls, the compressed branch is added, and the rows go back to
 * their packed positions. Scratch is the CPU backend's kept buffer, so the
 * denoising loop allocates nothing after its first step. */
#include "backend/cpu/h3_cpu_vsa.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/h3_backend_cpu_impl.h"

/* ---- the coarse stage (h3_cpu_vsa.h) ------------------------------------------------ */

void h3_vsa_pool(const float *x, int64_t ld, const int32_t *sizes, int64_t n, int dh, float *pooled) {
    int64_t row = 0;
    for (int64_t j = 0; j < n; j++) {
        for (int c = 0; c < dh; c++) {
            double sum = 0;
            for (int64_t r = 0; r < sizes[j]; r++) sum += x[(row + r) * ld + c];
            pooled[j * dh + c] = (float)sum / (float)sizes[j];
        }
        row += sizes[j];
    }
}

void h3_vsa_scores(const float *qp, const float *kp, int64_t n, int dh, float *scores) {
    float root = (float)sqrt((double)dh);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double dot = 0;
            for (int c = 0; c < dh; c++) dot += (double)qp[i * dh + c] * kp[j * dh + c];
            scores[i * n + j] = (float)dot / root;
        }
}

typedef struct scored_tile {
    float score;
    int32_t index;
} scored_tile;

/* Descending by score (NaN first, as torch.topk ranks it), ties to the
 * lower index: the order of a stable descending sort. */
static int by_score(const void *a, const void *b) {
    const scored_tile *x = a, *y = b;
    int xn = isnan(x->score), yn = isnan(y->score);
    if (xn != yn) return xn ? -1 : 1;
    if (!xn && x->score != y->score) return x->score > y->score ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static int ascending(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int64_t h3_vsa_select(const float *row, int64_t r, int64_t n, int64_t P, int64_t topk, int32_t *keys, float *work) {
    if (r < P || topk >= n - P) {
        for (int64_t j = 0; j < n; j++) keys[j] = (int32_t)j;
        return n;
    }
    scored_tile *cand = (scored_tile *)(void *)work;
    for (int64_t j = P; j < n; j++) cand[j - P] = (scored_tile){row[j], (int32_t)j};
    qsort(cand, (size_t)(n - P), sizeof *cand, by_score);
    for (int64_t j = 0; j < P; j++) keys[j] = (int32_t)j;
    for (int64_t i = 0; i < topk; i++) keys[P + i] = cand[i].index;
    qsort(keys + P, (size_t)topk, sizeof *keys, ascending);
    return P + topk;
}

void h3_vsa_compress(const float *scores, const float *vp, int64_t n, int dh, float *out, float *work) {
    for (int64_t i = 0; i < n; i++) {
        const float *s = scores + i * n;
        float m = -INFINITY;
        for (int64_t j = 0; j < n; j++) m = s[j] > m ? s[j] : m;
        double sum = 0;
        for (int64_t j = 0; j < n; j++) sum += work[j] = expf(s[j] - m);
        float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < n; j++) work[j] *= inv;
        for (int c = 0; c < dh; c++) {
            double acc = 0;
            for (int64_t j = 0; j < n; j++) acc += (double)work[j] * vp[j * dh + c];
            out[i * dh + c] = (float)acc;
        }
    }
}

/* ---- the op ------------------------------------------------------------------------- */

/* Per-call views into the scratch buffer. */
typedef struct vsa_work {
    float *qt, *kt, *vt, *gt, *ot; /* [S, dh] one head in tile order */
    float *qp, *kp, *vp;           /* [n, dh] tile means */
    float *scores;                 /* [n, n] */
    float *compressed;             /* [n, dh] */
    float *select_work;            /* 2n */
    float *ksel, *vsel;            /* [m_sparse, dh] gathered key rows of a sparse query tile */
    float *logits;                 /* [tile_elems, S] */
    int32_t *start;                /* [n + 1] */
    int32_t *keys;                 /* [n] */
} vsa_work;

/* The tile tables must describe a partition of [0, S) into tiles of 1..E
 * valid rows (model/h3_vsa.c's h3_vsa_plan_make guarantees it; a corrupt table must not
 * read out of bounds). */
static int check_tables(h3_backend *b, const h3_vsa_tiles *t, int64_t S) {
    const int32_t *sizes = t->tile_sizes.data, *order = t->tile_order.data;
    int64_t total = 0;
    for (int64_t j = 0; j < t->num_tiles; j++) {
        if (sizes[j] < 1 || sizes[j] > t->tile_elems) {
            h3_backend_fail(b, H3_ERR_INTERNAL, "cpu vsa_attention: tile %lld has %d rows (1..%d)", (long long)j,
                            sizes[j], t->tile_elems);
            return 0;
        }
        total += sizes[j];
    }
    if (total != S) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "cpu vsa_attention: tiles hold %lld rows, the sequence %lld",
                        (long long)total, (long long)S);
        return 0;
    }
    for (int64_t r = 0; r < S; r++)
        if (order[r] < 0 || order[r] >= S) {
            h3_backend_fail(b, H3_ERR_INTERNAL, "cpu vsa_attention: tile_order[%lld] = %d outside [0, %lld)",
                            (long long)r, order[r], (long long)S);
            return 0;
        }
    return 1;
}

/* Rows of a sparse video query tile: every prefix tile plus top-k video tiles. */
static int64_t sparse_rows(const h3_vsa_tiles *t, int64_t prefix_len) { return prefix_len + t->topk * t->tile_elems; }

static int carve(h3_backend *b, vsa_work *w, const h3_vsa_tiles *t, int64_t S, int dh, int has_gate, int64_t m_sparse) {
    int64_t n = t->num_tiles;
    size_t floats = (size_t)(5 * S * dh + 4 * n * dh + n * n + 2 * n + 2 * m_sparse * dh + (int64_t)t->tile_elems * S +
                             2 * (n + 1));
    float *p = h3_cpu_scratch(b, floats);
    if (!p) return 0;
    w->qt = p, p += S * dh;
    w->kt = p, p += S * dh;
    w->vt = p, p += S * dh;
    w->ot = p, p += S * dh;
    w->gt = has_gate ? p : NULL, p += S * dh;
    w->qp = p, p += n * dh;
    w->kp = p, p += n * dh;
    w->vp = p, p += n * dh;
    w->compressed = p, p += n * dh;
    w->scores = p, p += n * n;
    w->select_work = p, p += 2 * n;
    w->ksel = p, p += m_sparse * dh;
    w->vsel = p, p += m_sparse * dh;
    w->logits = p, p += (int64_t)t->tile_elems * S;
    w->start = (int32_t *)(void *)p, p += n + 1;
    w->keys = (int32_t *)(void *)p;
    return 1;
}

/* One head's columns of x [S, W] into rows of dst [S, dh] in tile order. */
static void gather_head(float *dst, const float *x, const int32_t *order, int64_t S, int64_t W, int64_t col, int dh) {
    for (int64_t r = 0; r < S; r++) memcpy(dst + r * dh, x + (int64_t)order[r] * W + col, (size_t)dh * sizeof(float));
}

static void scatter_head(float *x, const float *src, const int32_t *order, int64_t S, int64_t W, int64_t col, int dh) {
    for (int64_t r = 0; r < S; r++) memcpy(x + (int64_t)order[r] * W + col, src + r * dh, (size_t)dh * sizeof(float));
}

/* Row-wise softmax of p [rows, m] in place, as cpu_attention computes it. */
static void softmax_rows(float *p, int64_t rows, int64_t m) {
    for (int64_t i = 0; i < rows; i++) {
        float *row = p + i * m, mx = -INFINITY;
        for (int64_t j = 0; j < m; j++) mx = row[j] > mx ? row[j] : mx;
        double sum = 0;
        for (int64_t j = 0; j < m; j++) sum += row[j] = expf(row[j] - mx);
        float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < m; j++) row[j] *= inv;
    }
}

/* Query tile i against key rows K, V [m, dh]: ot rows = softmax(Q·Kᵀ·scale)·V. */
static void attend_tile(vsa_work *w, int64_t i, const float *K, const float *V, int64_t m, int dh, float scale) {
    int64_t r0 = w->start[i], rows = w->start[i + 1] - r0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)m, dh, scale, w->qt + r0 * dh, dh, K, dh,
                0.0f, w->logits, (int)m);
    softmax_rows(w->logits, rows, m);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, dh, (int)m, 1.0f, w->logits, (int)m, V, dh, 0.0f,
                w->ot + r0 * dh, dh);
}

/* The selected key tiles' rows, concatenated in ascending tile order. */
static int64_t gather_keys(vsa_work *w, const int32_t *keys, int64_t count, int dh) {
    int64_t m = 0;
    for (int64_t c = 0; c < count; c++) {
        int64_t r0 = w->start[keys[c]], rows = w->start[keys[c] + 1] - r0;
        memcpy(w->ksel + m * dh, w->kt + r0 * dh, (size_t)(rows * dh) * sizeof(float));
        memcpy(w->vsel + m * dh, w->vt + r0 * dh, (size_t)(rows * dh) * sizeof(float));
        m += rows;
    }
    return m;
}

static void one_head(vsa_work *w, const h3_vsa_tiles *t, int64_t S, int dh, int dense) {
    int64_t n = t->num_tiles, P = t->num_prefix_tiles;
    const int32_t *sizes = t->tile_sizes.data;
    float scale = (float)(1.0 / sqrt((double)dh));
    if (!dense || w->gt) {
        h3_vsa_pool(w->qt, dh, sizes, n, dh, w->qp);
        h3_vsa_pool(w->kt, dh, sizes, n, dh, w->kp);
        h3_vsa_scores(w->qp, w->kp, n, dh, w->scores);
    }
    for (int64_t i = 0; i < n; i++) {
        if (dense || i < P) {
            attend_tile(w, i, w->kt, w->vt, S, dh, scale);
            continue;
        }
        int64_t count = h3_vsa_select(w->scores + i * n, i, n, P, t->topk, w->keys, w->select_work);
        int64_t m = gather_keys(w, w->keys, count, dh);
        attend_tile(w, i, w->ksel, w->vsel, m, dh, scale);
    }
    if (!w->gt) return;
    h3_vsa_pool(w->vt, dh, sizes, n, dh, w->vp);
    h3_vsa_compress(w->scores, w->vp, n, dh, w->compressed, w->select_work);
    for (int64_t i = 0; i < n; i++)
        for (int64_t r = w->start[i]; r < w->start[i + 1]; r++)
            for (int c = 0; c < dh; c++) w->ot[r * dh + c] += w->compressed[i * dh + c] * w->gt[r * dh + c];
}

void h3_cpu_vsa_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                          const h3_tensor *gate, const h3_vsa_tiles *t, int n_heads, int dh) {
    const h3_tensor *all[] = {o, q, k, v, gate};
    for (int i = 0; i < 5; i++)
        if (all[i] && all[i]->dtype != H3_F32) {
            h3_backend_fail(b, H3_ERR_UNSUPPORTED, "cpu vsa_attention: %s tensor (the CPU backend computes in f32)",
                            h3_dtype_name(all[i]->dtype));
            return;
        }
    int64_t S = h3_tensor_rows(q), W = (int64_t)n_heads * dh, P = t->num_prefix_tiles;
    if (!check_tables(b, t, S)) return;
    const int32_t *sizes = t->tile_sizes.data, *order = t->tile_order.data;
    int64_t prefix_len = 0;
    for (int64_t j = 0; j < P; j++) prefix_len += sizes[j];
    int dense = t->topk >= t->num_tiles - P;
    vsa_work w;
    if (!carve(b, &w, t, S, dh, gate != NULL, dense ? 0 : sparse_rows(t, prefix_len))) return;
    w.start[0] = 0;
    for (int64_t j = 0; j < t->num_tiles; j++) w.start[j + 1] = w.start[j] + sizes[j];
    for (int h = 0; h < n_heads; h++) {
        int64_t col = (int64_t)h * dh;
        gather_head(w.qt, q->data, order, S, W, col, dh);
        gather_head(w.kt, k->data, order, S, W, col, dh);
        gather_head(w.vt, v->data, order, S, W, col, dh);
        if (gate) gather_head(w.gt, gate->data, order, S, W, col, dh);
        one_head(&w, t, S, dh, dense);
        scatter_head(o->data, w.ot, order, S, W, col, dh);
    }
}
