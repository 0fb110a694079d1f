/* h3_backend_cpu.c - the float32 CPU reference backend.
 *
 * Everything is float32: weights stored in bf16 in the files are widened
 * exactly, so this backend reproduces the official reference run in float32
 * (the goldens) to rounding. GEMMs go through OpenBLAS; the rest are plain
 * loops written for clarity first. */
#include "backend/h3_backend_impl.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cpu_impl {
    int n_threads;
    float *scratch; /* attention scores, grown on first use and kept */
    size_t scratch_size;
} cpu_impl;

static cpu_impl *impl_of(h3_backend *b) { return b->impl; }

static int need_f32(h3_backend *b, const char *op, const h3_tensor *t) {
    if (t && t->dtype != H3_F32) {
        h3_backend_fail(b, H3_ERR_UNSUPPORTED, "cpu %s: %s tensor (the CPU backend computes in f32)", op,
                        h3_dtype_name(t->dtype));
        return 0;
    }
    return 1;
}

static float *scratch(h3_backend *b, size_t n) {
    cpu_impl *c = impl_of(b);
    if (n > c->scratch_size) {
        free(c->scratch);
        c->scratch = malloc(n * sizeof(float));
        c->scratch_size = c->scratch ? n : 0;
        if (!c->scratch) h3_backend_fail(b, H3_ERR_NO_MEMORY, "cpu: no memory for %zu scratch floats", n);
    }
    return c->scratch;
}

/* Shared with h3_backend_cpu_vsa.c (h3_backend_impl.h). */
float *h3_cpu_scratch(h3_backend *b, size_t n) { return scratch(b, n); }

static void cpu_destroy(h3_backend *b) {
    cpu_impl *c = impl_of(b);
    free(c->scratch);
    free(c);
    free(b);
}

static h3_dtype cpu_weight_dtype(h3_backend *b, h3_weight_type type, h3_dtype file_dtype) { return H3_F32; }

static void *cpu_alloc(h3_backend *b, size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    return p;
}

static void cpu_free(h3_backend *b, void *p) { free(p); }

static int cpu_copy_bytes(h3_backend *b, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    return 0;
}

static int cpu_synchronize(h3_backend *b) { return 0; }

static void cpu_linear(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias) {
    if (!need_f32(b, "linear", y) || !need_f32(b, "linear", x) || !need_f32(b, "linear", w) ||
        !need_f32(b, "linear", bias))
        return;
    int M = (int)h3_tensor_rows(x), K = (int)h3_tensor_cols(x), N = (int)w->shape[0];
    float *Y = y->data;
    if (bias) {
        const float *bb = bias->data;
        for (int i = 0; i < M; i++) memcpy(Y + (size_t)i * N, bb, (size_t)N * sizeof(float));
    }
    if (M == 0 || N == 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x->data, K, w->data, K, bias ? 1.0f : 0.0f,
                Y, N);
}

static void cpu_rms_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, int64_t width,
                         float eps) {
    if (!need_f32(b, "rms_norm", y) || !need_f32(b, "rms_norm", x) || !need_f32(b, "rms_norm", w)) return;
    int64_t groups = h3_tensor_numel(x) / width;
    const float *X = x->data, *W = w ? w->data : NULL;
    float *Y = y->data;
    for (int64_t g = 0; g < groups; g++) {
        const float *xr = X + g * width;
        float *yr = Y + g * width;
        double ss = 0;
        for (int64_t i = 0; i < width; i++) ss += (double)xr[i] * xr[i];
        float inv = 1.0f / sqrtf((float)(ss / (double)width) + eps);
        for (int64_t i = 0; i < width; i++) yr[i] = W ? xr[i] * inv * W[i] : xr[i] * inv;
    }
}

static void cpu_layer_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                           const h3_tensor *bias, float eps) {
    if (!need_f32(b, "layer_norm", y) || !need_f32(b, "layer_norm", x)) return;
    int64_t rows = h3_tensor_rows(x), D = h3_tensor_cols(x);
    const float *X = x->data, *W = w ? w->data : NULL, *B = bias ? bias->data : NULL;
    float *Y = y->data;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = X + r * D;
        float *yr = Y + r * D;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < D; i++) mean += xr[i];
        mean /= (double)D;
        for (int64_t i = 0; i < D; i++) var += ((double)xr[i] - mean) * ((double)xr[i] - mean);
        var /= (double)D;
        float inv = 1.0f / sqrtf((float)var + eps);
        for (int64_t i = 0; i < D; i++) {
            float v = (xr[i] - (float)mean) * inv;
            if (W) v *= W[i];
            if (B) v += B[i];
            yr[i] = v;
        }
    }
}

static void cpu_binary(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x0, const h3_tensor *x1) {
    if (!need_f32(b, "binary", y) || !need_f32(b, "binary", x0) || !need_f32(b, "binary", x1)) return;
    int64_t n = h3_tensor_numel(y);
    const float *a = x0->data, *c = x1->data;
    float *Y = y->data;
    if (op == 0)
        for (int64_t i = 0; i < n; i++) Y[i] = a[i] + c[i];
    else
        for (int64_t i = 0; i < n; i++) Y[i] = a[i] * c[i];
}

static void cpu_row_vector(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x, const h3_tensor *v) {
    if (!need_f32(b, "row_vector", y) || !need_f32(b, "row_vector", x) || !need_f32(b, "row_vector", v)) return;
    int64_t rows = h3_tensor_rows(x), D = h3_tensor_cols(x);
    const float *X = x->data, *V = v->data;
    float *Y = y->data;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < D; i++) Y[r * D + i] = op == 0 ? X[r * D + i] * V[i] : X[r * D + i] + V[i];
}

static void cpu_scale(h3_backend *b, h3_tensor *y, const h3_tensor *x, float alpha) {
    if (!need_f32(b, "scale", y) || !need_f32(b, "scale", x)) return;
    int64_t n = h3_tensor_numel(y);
    const float *X = x->data;
    float *Y = y->data;
    for (int64_t i = 0; i < n; i++) Y[i] = X[i] * alpha;
}

static float silu(float v) { return v / (1.0f + expf(-v)); }

static void cpu_unary(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x) {
    if (!need_f32(b, "unary", y) || !need_f32(b, "unary", x)) return;
    int64_t n = h3_tensor_numel(y);
    const float *X = x->data;
    float *Y = y->data;
    for (int64_t i = 0; i < n; i++) {
        float v = X[i];
        if (op == 0) Y[i] = silu(v);
        else if (op == 1) Y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        else Y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

static void cpu_swiglu(h3_backend *b, h3_tensor *y, const h3_tensor *u, int value_first) {
    if (!need_f32(b, "swiglu", y) || !need_f32(b, "swiglu", u)) return;
    int64_t rows = h3_tensor_rows(y), F = h3_tensor_cols(y);
    const float *U = u->data;
    float *Y = y->data;
    for (int64_t r = 0; r < rows; r++) {
        const float *first = U + r * 2 * F, *second = first + F;
        const float *value = value_first ? first : second, *gate = value_first ? second : first;
        for (int64_t i = 0; i < F; i++) Y[r * F + i] = value[i] * silu(gate[i]);
    }
}

static void cpu_modulate(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *shift,
                         const h3_tensor *scale, const h3_tensor *sel) {
    if (!need_f32(b, "modulate", y) || !need_f32(b, "modulate", x) || !need_f32(b, "modulate", shift) ||
        !need_f32(b, "modulate", scale))
        return;
    int64_t S = h3_tensor_rows(x), D = h3_tensor_cols(x), T = h3_tensor_rows(shift);
    const float *X = x->data, *SH = shift->data, *SC = scale->data;
    const int32_t *R = sel->data;
    float *Y = y->data;
    for (int64_t s = 0; s < S; s++) {
        if (R[s] < 0 || R[s] >= T) {
            h3_backend_fail(b, H3_ERR_INTERNAL, "modulate: selector %d outside table of %lld rows", R[s], (long long)T);
            return;
        }
        const float *sh = SH + (int64_t)R[s] * D, *sc = SC + (int64_t)R[s] * D;
        for (int64_t i = 0; i < D; i++) Y[s * D + i] = X[s * D + i] * (1.0f + sc[i]) + sh[i];
    }
}

static void cpu_gated_residual(h3_backend *b, h3_tensor *x, const h3_tensor *gate, const h3_tensor *y,
                               const h3_tensor *sel) {
    if (!need_f32(b, "gated_residual", x) || !need_f32(b, "gated_residual", gate) ||
        !need_f32(b, "gated_residual", y))
        return;
    int64_t S = h3_tensor_rows(x), D = h3_tensor_cols(x), T = h3_tensor_rows(gate);
    const float *G = gate->data, *Yv = y->data;
    const int32_t *R = sel->data;
    float *X = x->data;
    for (int64_t s = 0; s < S; s++) {
        if (R[s] < 0 || R[s] >= T) {
            h3_backend_fail(b, H3_ERR_INTERNAL, "gated_residual: selector %d outside table of %lld rows", R[s],
                            (long long)T);
            return;
        }
        const float *g = G + (int64_t)R[s] * D;
        for (int64_t i = 0; i < D; i++) X[s * D + i] += g[i] * Yv[s * D + i];
    }
}

static void cpu_rope(h3_backend *b, h3_tensor *x, const h3_tensor *cos, const h3_tensor *sin, int n_heads,
                     int head_dim, int rot_dim) {
    if (!need_f32(b, "rope", x)) return;
    int64_t S = h3_tensor_rows(x);
    int half = rot_dim / 2;
    float *X = x->data;
    const float *C = cos->data, *Sn = sin->data;
    for (int64_t s = 0; s < S; s++) {
        const float *c = C + s * rot_dim, *sn = Sn + s * rot_dim;
        for (int h = 0; h < n_heads; h++) {
            float *v = X + s * (int64_t)n_heads * head_dim + (int64_t)h * head_dim;
            for (int i = 0; i < half; i++) {
                float a = v[i], d = v[i + half];
                v[i] = a * c[i] - d * sn[i];
                v[i + half] = d * c[i + half] + a * sn[i + half];
            }
        }
    }
}

/* Attention one head and one block of queries at a time: scores via GEMM,
 * a numerically safe softmax, then P·V via GEMM. */
static void cpu_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                          int n_heads, int n_kv_heads, int head_dim, int causal, float scale) {
    if (!need_f32(b, "attention", o) || !need_f32(b, "attention", q) || !need_f32(b, "attention", k) ||
        !need_f32(b, "attention", v))
        return;
    int Sq = (int)h3_tensor_rows(q), Skv = (int)h3_tensor_rows(k);
    int ldq = n_heads * head_dim, ldk = n_kv_heads * head_dim, group = n_heads / n_kv_heads;
    const int block = 256;
    float *P = scratch(b, (size_t)block * (size_t)(Skv ? Skv : 1));
    if (!P) return;
    const float *Q = q->data, *K = k->data, *V = v->data;
    float *O = o->data;
    for (int h = 0; h < n_heads; h++) {
        int kh = h / group;
        for (int q0 = 0; q0 < Sq; q0 += block) {
            int nq = Sq - q0 < block ? Sq - q0 : block;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, Skv, head_dim, scale,
                        Q + (size_t)q0 * ldq + (size_t)h * head_dim, ldq, K + (size_t)kh * head_dim, ldk, 0.0f, P,
                        Skv);
            for (int i = 0; i < nq; i++) {
                float *p = P + (size_t)i * Skv;
                int limit = causal ? q0 + i + 1 : Skv;
                float m = -INFINITY;
                for (int j = 0; j < limit; j++) m = p[j] > m ? p[j] : m;
                double sum = 0;
                for (int j = 0; j < limit; j++) {
                    p[j] = expf(p[j] - m);
                    sum += p[j];
                }
                float inv = (float)(1.0 / sum);
                for (int j = 0; j < limit; j++) p[j] *= inv;
                for (int j = limit; j < Skv; j++) p[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, head_dim, Skv, 1.0f, P, Skv,
                        V + (size_t)kh * head_dim, ldk, 0.0f, O + (size_t)q0 * ldq + (size_t)h * head_dim, ldq);
        }
    }
}

static void cpu_gather_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx) {
    int64_t n = h3_tensor_numel(idx), rows = h3_tensor_rows(src);
    size_t rb = (size_t)h3_tensor_cols(src) * h3_dtype_size(src->dtype);
    if (dst->dtype != src->dtype) { h3_backend_fail(b, H3_ERR_INTERNAL, "gather_rows: dtype mismatch"); return; }
    const int32_t *ix = idx->data;
    for (int64_t i = 0; i < n; i++) {
        if (ix[i] < 0 || ix[i] >= rows) {
            h3_backend_fail(b, H3_ERR_INVALID_ARGUMENT, "gather_rows: index %d outside [0, %lld)", ix[i], (long long)rows);
            return;
        }
        memcpy((char *)dst->data + (size_t)i * rb, (const char *)src->data + (size_t)ix[i] * rb, rb);
    }
}

static void cpu_scatter_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx) {
    int64_t n = h3_tensor_numel(idx), rows = h3_tensor_rows(dst);
    size_t rb = (size_t)h3_tensor_cols(src) * h3_dtype_size(src->dtype);
    if (dst->dtype != src->dtype) { h3_backend_fail(b, H3_ERR_INTERNAL, "scatter_rows: dtype mismatch"); return; }
    const int32_t *ix = idx->data;
    for (int64_t i = 0; i < n; i++) {
        if (ix[i] < 0 || ix[i] >= rows) {
            h3_backend_fail(b, H3_ERR_INVALID_ARGUMENT, "scatter_rows: index %d outside [0, %lld)", ix[i], (long long)rows);
            return;
        }
        memcpy((char *)dst->data + (size_t)ix[i] * rb, (const char *)src->data + (size_t)i * rb, rb);
    }
}

static void cpu_copy(h3_backend *b, h3_tensor *dst, const h3_tensor *src) {
    if (dst->dtype != src->dtype) {
        h3_backend_fail(b, H3_ERR_UNSUPPORTED, "cpu copy: %s -> %s", h3_dtype_name(src->dtype), h3_dtype_name(dst->dtype));
        return;
    }
    memmove(dst->data, src->data, h3_tensor_nbytes(src));
}

static void cpu_fill(h3_backend *b, h3_tensor *dst, float value) {
    int64_t n = h3_tensor_numel(dst);
    if (dst->dtype == H3_I32) {
        int32_t *d = dst->data;
        for (int64_t i = 0; i < n; i++) d[i] = (int32_t)value;
        return;
    }
    if (!need_f32(b, "fill", dst)) return;
    float *d = dst->data;
    for (int64_t i = 0; i < n; i++) d[i] = value;
}

/* H3_CPU_VIDEO_VAE_BEGIN */
/* Walks the outer dims (all but the last) of up to three same-shaped views
 * like an odometer; the caller's inner loop runs over the last dim. */
typedef struct view_walk {
    int ndim;
    int64_t idx[H3_VIEW_MAX_DIMS];
    int64_t pos[3];
    const h3_view *v[3];
    int nv;
} view_walk;

static void view_walk_init(view_walk *w, int nv, const h3_view *v0, const h3_view *v1, const h3_view *v2) {
    memset(w, 0, sizeof *w);
    w->nv = nv;
    w->v[0] = v0, w->v[1] = v1, w->v[2] = v2;
    w->ndim = v0->ndim;
    for (int i = 0; i < nv; i++) w->pos[i] = w->v[i]->offset;
}

/* Advances to the next row of the last dim; returns 0 when done. */
static int view_walk_next(view_walk *w) {
    for (int d = w->ndim - 2; d >= 0; d--) {
        if (++w->idx[d] < w->v[0]->shape[d]) {
            for (int i = 0; i < w->nv; i++) w->pos[i] += w->v[i]->stride[d];
            return 1;
        }
        for (int i = 0; i < w->nv; i++) w->pos[i] -= (w->v[0]->shape[d] - 1) * w->v[i]->stride[d];
        w->idx[d] = 0;
    }
    return 0;
}

static int view_empty(const h3_view *v) {
    for (int i = 0; i < v->ndim; i++)
        if (v->shape[i] == 0) return 1;
    return 0;
}

static void cpu_copy_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *src, const h3_view *sv) {
    if (view_empty(dv)) return;
    size_t es = h3_dtype_size(dst->dtype);
    int last = dv->ndim - 1;
    int64_t n = dv->shape[last], ds = dv->stride[last], ss = sv->stride[last];
    view_walk w;
    view_walk_init(&w, 2, dv, sv, NULL);
    do {
        char *d = (char *)dst->data + (size_t)w.pos[0] * es;
        const char *s = (const char *)src->data + (size_t)w.pos[1] * es;
        if ((ds == 1 && ss == 1) || n == 1) {
            memmove(d, s, (size_t)n * es);
        } else if (es == 4) {
            for (int64_t i = 0; i < n; i++) memcpy(d + (size_t)(i * ds) * 4, s + (size_t)(i * ss) * 4, 4);
        } else {
            for (int64_t i = 0; i < n; i++) memcpy(d + (size_t)(i * ds) * es, s + (size_t)(i * ss) * es, es);
        }
    } while (view_walk_next(&w));
}

static void cpu_blend_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *a, const h3_view *av,
                           const h3_tensor *x, const h3_view *xv, int axis, int extent) {
    if (!need_f32(b, "blend_view", dst)) return;
    if (view_empty(dv)) return;
    int last = dv->ndim - 1;
    int64_t n = dv->shape[last];
    view_walk w;
    view_walk_init(&w, 3, dv, av, xv);
    do {
        float *d = (float *)dst->data + w.pos[0];
        const float *pa = (const float *)a->data + w.pos[1], *px = (const float *)x->data + w.pos[2];
        for (int64_t i = 0; i < n; i++) {
            /* torch: positions / extent in the tensor dtype, then 1 - that. */
            int64_t k = axis == last ? i : w.idx[axis];
            float wx = (float)k / (float)extent, wa = 1.0f - wx;
            float ta = pa[i * av->stride[last]] * wa, tx = px[i * xv->stride[last]] * wx;
            d[i * dv->stride[last]] = ta + tx;
        }
    } while (view_walk_next(&w));
}

static void cpu_rgb8_from_planar(h3_backend *b, h3_tensor *dst, const h3_tensor *src, int64_t frame0, int64_t nframes,
                                 const float *mean, const float *std) {
    if (!need_f32(b, "rgb8_from_planar", src)) return;
    int64_t C = src->shape[0], F = src->shape[1], HW = src->shape[2] * src->shape[3];
    uint8_t *out = dst->data;
    const float *S = src->data;
    for (int64_t c = 0; c < C; c++) {
        for (int64_t f = 0; f < nframes; f++) {
            const float *plane = S + (c * F + frame0 + f) * HW;
            uint8_t *o = out + f * HW * C + c;
            for (int64_t p = 0; p < HW; p++) {
                float v = plane[p] * std[c];
                v = v + mean[c];
                v = v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
                v = nearbyintf(v * 255.0f); /* half to even, like numpy round */
                o[p * C] = v == v ? (uint8_t)v : 0;
            }
        }
    }
}
/* H3_CPU_VIDEO_VAE_END */
/* H3_CPU_AUDIO_VAE_BEGIN */
/* 1-D ops of the audio VAE. Convolutions are im2col (or its transpose,
 * col2im) over chunks of time steps feeding one sgemm each, so the scratch
 * stays bounded (COL_BUDGET floats) however long the signal is: the real
 * decoder runs 165,600 samples per channel. */
#define COL_BUDGET ((int64_t)1 << 21)

static int64_t col_chunk(int64_t rows, int64_t len) {
    int64_t n = COL_BUDGET / (rows ? rows : 1);
    if (n < 32) n = 32;
    return n < len ? n : len;
}

/* Every row of Y [rows, len] set to bias[row] (or 0). */
static void fill_rows(float *Y, int64_t rows, int64_t len, const float *bias) {
    for (int64_t r = 0; r < rows; r++) {
        float v = bias ? bias[r] : 0.0f, *yr = Y + r * len;
        for (int64_t j = 0; j < len; j++) yr[j] = v;
    }
}

/* col[row, j] = x_row[(t0 + j)·stride + off] or 0 outside [0, Lin). */
static void im2col_row(float *col, const float *src, int64_t Lin, int64_t t0, int64_t nt, int stride, int64_t off) {
    if (stride == 1) {
        int64_t lo = -off - t0, hi = Lin - off - t0; /* valid j in [lo, hi) */
        if (lo < 0) lo = 0;
        if (hi > nt) hi = nt;
        if (hi <= lo) { memset(col, 0, (size_t)nt * sizeof(float)); return; }
        if (lo > 0) memset(col, 0, (size_t)lo * sizeof(float));
        memcpy(col + lo, src + t0 + lo + off, (size_t)(hi - lo) * sizeof(float));
        if (hi < nt) memset(col + hi, 0, (size_t)(nt - hi) * sizeof(float));
        return;
    }
    int64_t pos = t0 * stride + off;
    for (int64_t j = 0; j < nt; j++, pos += stride) col[j] = pos >= 0 && pos < Lin ? src[pos] : 0.0f;
}

static void cpu_conv1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                       int stride, int padding, int dilation, int groups) {
    if (!need_f32(b, "conv1d", y) || !need_f32(b, "conv1d", x) || !need_f32(b, "conv1d", w) ||
        !need_f32(b, "conv1d", bias))
        return;
    int64_t B = x->shape[0], Cin = x->shape[1], Lin = x->shape[2];
    int64_t Cout = y->shape[1], Lout = y->shape[2], K = w->shape[2];
    int64_t cin_g = Cin / groups, cout_g = Cout / groups, KK = cin_g * K;
    const float *X = x->data, *W = w->data, *bb = bias ? bias->data : NULL;
    float *Y = y->data;
    for (int64_t n = 0; n < B; n++) fill_rows(Y + n * Cout * Lout, Cout, Lout, bb);
    if (Lout == 0 || Cout == 0) return;
    int64_t chunk = col_chunk(KK, Lout);
    float *col = scratch(b, (size_t)(KK * chunk));
    if (!col) return;
    for (int64_t n = 0; n < B; n++) {
        for (int g = 0; g < groups; g++) {
            const float *xg = X + (n * Cin + g * cin_g) * Lin;
            float *yg = Y + (n * Cout + g * cout_g) * Lout;
            for (int64_t t0 = 0; t0 < Lout; t0 += chunk) {
                int64_t nt = Lout - t0 < chunk ? Lout - t0 : chunk;
                for (int64_t ci = 0; ci < cin_g; ci++)
                    for (int64_t k = 0; k < K; k++)
                        im2col_row(col + (ci * K + k) * nt, xg + ci * Lin, Lin, t0, nt, stride,
                                   k * dilation - padding);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)cout_g, (int)nt, (int)KK, 1.0f,
                            W + g * cout_g * KK, (int)KK, col, (int)nt, 1.0f, yg + t0, (int)Lout);
            }
        }
    }
}

/* col[co·K + k, j] = Σ_ci w[ci, co, k] · x[ci, m0 + j] by one sgemm, then
 * scattered (col2im) to y[co, (m0 + j)·stride − padding + k]. */
static void cpu_conv_transpose1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                                 const h3_tensor *bias, int stride, int padding) {
    if (!need_f32(b, "conv_transpose1d", y) || !need_f32(b, "conv_transpose1d", x) ||
        !need_f32(b, "conv_transpose1d", w) || !need_f32(b, "conv_transpose1d", bias))
        return;
    int64_t B = x->shape[0], Cin = x->shape[1], Lin = x->shape[2];
    int64_t Cout = y->shape[1], Lout = y->shape[2], K = w->shape[2], CK = Cout * K;
    const float *X = x->data, *W = w->data, *bb = bias ? bias->data : NULL;
    float *Y = y->data;
    for (int64_t n = 0; n < B; n++) fill_rows(Y + n * Cout * Lout, Cout, Lout, bb);
    int64_t chunk = col_chunk(CK, Lin);
    float *col = scratch(b, (size_t)(CK * chunk));
    if (!col) return;
    for (int64_t n = 0; n < B; n++) {
        float *yn = Y + n * Cout * Lout;
        for (int64_t m0 = 0; m0 < Lin; m0 += chunk) {
            int64_t nm = Lin - m0 < chunk ? Lin - m0 : chunk;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)CK, (int)nm, (int)Cin, 1.0f, W, (int)CK,
                        X + n * Cin * Lin + m0, (int)Lin, 0.0f, col, (int)nm);
            for (int64_t co = 0; co < Cout; co++) {
                float *yr = yn + co * Lout;
                for (int64_t k = 0; k < K; k++) {
                    const float *cr = col + (co * K + k) * nm;
                    int64_t pos = m0 * stride - padding + k;
                    for (int64_t j = 0; j < nm; j++, pos += stride)
                        if (pos >= 0 && pos < Lout) yr[pos] += cr[j];
                }
            }
        }
    }
}

/* Resampling works in polyphase form: a signal u[0, r·n) is kept as r rows
 * ph[c][t] = u[r·t + c], t in [−M, n + M), with the margins holding the
 * replicate padding. Both the transposed-conv upsampler and the strided
 * downsampler then become a few contiguous multiply-adds per tap, which the
 * compiler vectorizes, and the fused activation never interleaves at all. */
static int64_t phase_margin(int K, int ratio) { return K / ratio + 2; }

/* Replicate padding: dst[i] = src[clamp(i − left, 0, L−1)], i in [0, n). */
static void replicate_pad(float *dst, const float *src, int64_t L, int64_t left, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        int64_t s = i - left;
        dst[i] = src[s < 0 ? 0 : s >= L ? L - 1 : s];
    }
}

/* UpSample1d of x[0, L) into the phase rows (row stride `row`, margin M):
 *   u[j − off] = ratio · Σ_{ratio·m + k = j} xp[m] · f[k],  xp = x replicate-padded by p
 * Terms with m outside xp do not exist in the transposed conv, so xz pads xp
 * with zeros (K each side). xz: L + 2·p + 2·K floats. */
static void upsample_phases(float *ph, int64_t row, int64_t M, const float *x, int64_t L, const float *f, int K,
                            int ratio, float *xz) {
    int64_t p = K / ratio - 1, off = p * ratio + (K - ratio) / 2, Lp = L + 2 * p;
    float *xp = xz + K;
    memset(xz, 0, (size_t)K * sizeof(float));
    replicate_pad(xp, x, L, p, Lp);
    memset(xp + Lp, 0, (size_t)K * sizeof(float));
    for (int c = 0; c < ratio; c++) {
        float *dst = ph + c * row + M;
        int64_t k0 = (c + off) % ratio, q0 = (c + off - k0) / ratio; /* output t uses xp[q0 + t − i]·f[k0 + i·ratio] */
        memset(dst, 0, (size_t)L * sizeof(float));
        /* ratio·f[k] instead of ratio·Σ: exact for ratio 2, the only one used */
        for (int64_t k = k0, i = 0; k < K; k += ratio, i++)
            cblas_saxpy((int)L, (float)ratio * f[k], xp + q0 - i, 1, dst, 1);
    }
}

/* Margins of n-sample phase rows: the first and last sample of u. */
static void fill_phase_margins(float *ph, int64_t row, int64_t M, int64_t n, int ratio) {
    float first = ph[M], last = ph[(ratio - 1) * row + M + n - 1];
    for (int c = 0; c < ratio; c++) {
        float *r = ph + c * row + M;
        for (int64_t t = -M; t < 0; t++) r[t] = first;
        for (int64_t t = n; t < n + M; t++) r[t] = last;
    }
}

/* DownSample1d from phase rows: y[n] = Σ_k f[k] · u[n·ratio + k − left] with
 * u replicate-padded (the margins), left = K/2 − (K even). */
static void downsample_phases(float *y, int64_t Lout, const float *ph, int64_t row, int64_t M, const float *f, int K,
                              int ratio) {
    int64_t left = K / 2 - (K % 2 == 0);
    memset(y, 0, (size_t)Lout * sizeof(float));
    for (int k = 0; k < K; k++) {
        int64_t u = k - left, c = ((u % ratio) + ratio) % ratio, o = (u - c) / ratio;
        cblas_saxpy((int)Lout, f[k], ph + c * row + M + o, 1, y, 1);
    }
}

static void cpu_upsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio) {
    if (!need_f32(b, "upsample1d", y) || !need_f32(b, "upsample1d", x) || !need_f32(b, "upsample1d", filter)) return;
    int64_t rows = h3_tensor_rows(x), L = h3_tensor_cols(x);
    int K = (int)h3_tensor_numel(filter);
    int64_t M = phase_margin(K, ratio), row = L + 2 * M;
    float *xz = scratch(b, (size_t)(L + 4 * K + ratio * row));
    if (!xz) return;
    float *ph = xz + L + 4 * K;
    for (int64_t r = 0; r < rows; r++) {
        upsample_phases(ph, row, M, (const float *)x->data + r * L, L, filter->data, K, ratio, xz);
        float *yr = (float *)y->data + r * L * ratio;
        for (int c = 0; c < ratio; c++)
            for (int64_t t = 0; t < L; t++) yr[t * ratio + c] = ph[c * row + M + t];
    }
}

static void cpu_downsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio) {
    if (!need_f32(b, "downsample1d", y) || !need_f32(b, "downsample1d", x) || !need_f32(b, "downsample1d", filter))
        return;
    int64_t rows = h3_tensor_rows(x), L = h3_tensor_cols(x), Lout = h3_tensor_cols(y);
    int K = (int)h3_tensor_numel(filter);
    int64_t M = phase_margin(K, ratio), row = Lout + 2 * M;
    float *ph = scratch(b, (size_t)(ratio * row));
    if (!ph) return;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = (const float *)x->data + r * L;
        for (int c = 0; c < ratio; c++) /* deinterleave with replicate padding, margins included */
            for (int64_t t = -M; t < Lout + M; t++) {
                int64_t u = t * ratio + c;
                ph[c * row + M + t] = xr[u < 0 ? 0 : u >= L ? L - 1 : u];
            }
        downsample_phases((float *)y->data + r * Lout, Lout, ph, row, M, filter->data, K, ratio);
    }
}

/* SnakeBeta on one row, in place; a = e^alpha, inv = 1/(e^beta + 1e-9) as
 * the reference computes them (float32). */
static void snake_row(float *v, int64_t n, float a, float inv) {
    for (int64_t i = 0; i < n; i++) {
        float s = sinf(a * v[i]);
        v[i] = v[i] + inv * (s * s);
    }
}

static void cpu_snake_beta(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                           const h3_tensor *beta) {
    if (!need_f32(b, "snake_beta", y) || !need_f32(b, "snake_beta", x) || !need_f32(b, "snake_beta", alpha) ||
        !need_f32(b, "snake_beta", beta))
        return;
    int64_t B = x->shape[0], C = x->shape[1], L = x->shape[2];
    const float *A = alpha->data, *Bt = beta->data;
    for (int64_t r = 0; r < B * C; r++) {
        float *yr = (float *)y->data + r * L;
        if (yr != (const float *)x->data + r * L) memcpy(yr, (const float *)x->data + r * L, (size_t)L * sizeof(float));
        snake_row(yr, L, expf(A[r % C]), 1.0f / (expf(Bt[r % C]) + 1e-9f));
    }
}

/* Per row: upsample into phase rows, SnakeBeta on them (elementwise, so the
 * phase order does not matter), fill the margins, downsample. One row of
 * scratch, so y may alias x. */
static void cpu_snake_beta_antialiased(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                                       const h3_tensor *beta, const h3_tensor *up_filter,
                                       const h3_tensor *down_filter, int ratio) {
    if (!need_f32(b, "snake_beta_antialiased", y) || !need_f32(b, "snake_beta_antialiased", x) ||
        !need_f32(b, "snake_beta_antialiased", alpha) || !need_f32(b, "snake_beta_antialiased", beta) ||
        !need_f32(b, "snake_beta_antialiased", up_filter) || !need_f32(b, "snake_beta_antialiased", down_filter))
        return;
    int64_t B = x->shape[0], C = x->shape[1], L = x->shape[2];
    int Ku = (int)h3_tensor_numel(up_filter), Kd = (int)h3_tensor_numel(down_filter);
    int64_t M = phase_margin(Ku > Kd ? Ku : Kd, ratio), row = L + 2 * M;
    float *xz = scratch(b, (size_t)(L + 4 * Ku + ratio * row));
    if (!xz) return;
    float *ph = xz + L + 4 * Ku;
    const float *A = alpha->data, *Bt = beta->data;
    for (int64_t r = 0; r < B * C; r++) {
        upsample_phases(ph, row, M, (const float *)x->data + r * L, L, up_filter->data, Ku, ratio, xz);
        float a = expf(A[r % C]), inv = 1.0f / (expf(Bt[r % C]) + 1e-9f);
        for (int c = 0; c < ratio; c++) snake_row(ph + c * row + M, L, a, inv);
        fill_phase_margins(ph, row, M, L, ratio);
        downsample_phases((float *)y->data + r * L, L, ph, row, M, down_filter->data, Kd, ratio);
    }
}

static void cpu_clamp(h3_backend *b, h3_tensor *y, const h3_tensor *x, float lo, float hi) {
    if (!need_f32(b, "clamp", y) || !need_f32(b, "clamp", x)) return;
    int64_t n = h3_tensor_numel(y);
    const float *X = x->data;
    float *Y = y->data;
    for (int64_t i = 0; i < n; i++) Y[i] = X[i] < lo ? lo : X[i] > hi ? hi : X[i]; /* NaN passes through */
}
/* H3_CPU_AUDIO_VAE_END */

static const h3_backend_ops cpu_ops = {
    .name = "cpu",
    .compute_dtype = H3_F32,
    .destroy = cpu_destroy,
    .weight_dtype = cpu_weight_dtype,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy_bytes,
    .download = cpu_copy_bytes,
    .synchronize = cpu_synchronize,
    .linear = cpu_linear,
    .rms_norm = cpu_rms_norm,
    .layer_norm = cpu_layer_norm,
    .binary = cpu_binary,
    .row_vector = cpu_row_vector,
    .scale = cpu_scale,
    .unary = cpu_unary,
    .swiglu = cpu_swiglu,
    .modulate = cpu_modulate,
    .gated_residual = cpu_gated_residual,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .vsa_attention = h3_cpu_vsa_attention, /* h3_backend_cpu_vsa.c */
    .gather_rows = cpu_gather_rows,
    .scatter_rows = cpu_scatter_rows,
    .copy = cpu_copy,
    .fill = cpu_fill,
    /* H3_CPU_OPS_TABLE_VAE */
    .copy_view = cpu_copy_view,
    .blend_view = cpu_blend_view,
    .rgb8_from_planar = cpu_rgb8_from_planar,
    .conv1d = cpu_conv1d,
    .conv_transpose1d = cpu_conv_transpose1d,
    .upsample1d = cpu_upsample1d,
    .downsample1d = cpu_downsample1d,
    .snake_beta = cpu_snake_beta,
    .snake_beta_antialiased = cpu_snake_beta_antialiased,
    .clamp = cpu_clamp,
};

h3_status_code h3_backend_cpu_create(int n_threads, h3_backend **out, h3_status *status) {
    *out = NULL;
    h3_backend *b = calloc(1, sizeof *b);
    cpu_impl *c = calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        return h3_fail(status, H3_ERR_NO_MEMORY, "cpu backend: out of memory");
    }
    c->n_threads = n_threads;
    if (n_threads > 0) openblas_set_num_threads(n_threads);
    h3_backend_init(b, &cpu_ops, c);
    b->chunk_min_size = (size_t)16 << 20;
    *out = b;
    return H3_OK;
}
