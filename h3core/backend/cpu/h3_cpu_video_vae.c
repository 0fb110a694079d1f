/* h3_cpu_video_vae.c - the video VAE's ops on the CPU backend
 * (backend/h3_ops_video_vae.h): strided view copies, the cross-fade and the
 * RGB conversion (decoder), the 3-D im2col and the per-frame GroupNorm
 * (encoder), element by element in float32. */
#include "backend/cpu/h3_backend_cpu_impl.h"

#include <math.h>
#include <string.h>

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

void h3_cpu_copy_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *src, const h3_view *sv) {
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

void h3_cpu_blend_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *a, const h3_view *av,
                       const h3_tensor *x, const h3_view *xv, int axis, int extent) {
    if (!h3_cpu_need_f32(b, "blend_view", dst)) return;
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

void h3_cpu_rgb8_from_planar(h3_backend *b, h3_tensor *dst, const h3_tensor *src, int64_t frame0, int64_t nframes,
                             const float *mean, const float *std) {
    if (!h3_cpu_need_f32(b, "rgb8_from_planar", src)) return;
    int64_t C = src->shape[0], F = src->shape[1], HW = src->shape[2] * src->shape[3], bad = 0;
    uint8_t *out = dst->data;
    const float *S = src->data;
    for (int64_t c = 0; c < C; c++) {
        for (int64_t f = 0; f < nframes; f++) {
            const float *plane = S + (c * F + frame0 + f) * HW;
            uint8_t *o = out + f * HW * C + c;
            for (int64_t p = 0; p < HW; p++) {
                float v = plane[p] * std[c];
                v = v + mean[c];
                bad += !isfinite(v);
                v = v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
                v = nearbyintf(v * 255.0f); /* half to even, like numpy round */
                o[p * C] = v == v ? (uint8_t)v : 0;
            }
        }
    }
    /* A NaN would be a black pixel: the frames are refused instead. */
    if (bad)
        h3_backend_fail(b, H3_ERR_NONFINITE, "rgb8_from_planar: %lld decoded values of %lld frames are NaN or Inf",
                        (long long)bad, (long long)nframes);
}

/* ---- the encoder's ops ------------------------------------------------------------ */

/* torch 'reflect' for one pad (pad < len): -1 -> 1, len -> len - 2. */
static int64_t reflect(int64_t i, int64_t len) {
    if (i < 0) return -i;
    if (i >= len) return 2 * (len - 1) - i;
    return i;
}

void h3_cpu_im2col3d(h3_backend *b, h3_tensor *col, const h3_tensor *x, const h3_conv3d_geom *g, int64_t n0) {
    if (!h3_cpu_need_f32(b, "im2col3d", col) || !h3_cpu_need_f32(b, "im2col3d", x)) return;
    int64_t H = x->shape[1], W = x->shape[2], C = x->shape[3];
    int64_t Ho = (H + g->pad_top + g->pad_bottom - g->kh) / g->sh + 1;
    int64_t Wo = (W + g->pad_left + g->pad_right - g->kw) / g->sw + 1;
    int64_t taps = (int64_t)g->kt * g->kh * g->kw, K = C * taps, rows = h3_tensor_rows(col);
    const float *X = x->data;
    float *out = col->data;
    for (int64_t r = 0; r < rows; r++) {
        int64_t n = n0 + r, ox = n % Wo, oy = n / Wo % Ho, ot = n / (Wo * Ho);
        float *row = out + r * K;
        for (int a = 0, tap = 0; a < g->kt; a++) {
            int64_t ti = ot * g->st + a - g->pad_t; /* < 0: a causal zero frame */
            for (int i = 0; i < g->kh; i++) {
                int64_t yi = reflect(oy * g->sh + i - g->pad_top, H);
                for (int j = 0; j < g->kw; j++, tap++) {
                    int64_t xi = reflect(ox * g->sw + j - g->pad_left, W);
                    const float *src = ti < 0 ? NULL : X + ((ti * H + yi) * W + xi) * C;
                    for (int64_t c = 0; c < C; c++) row[c * taps + tap] = src ? src[c] : 0.0f;
                }
            }
        }
    }
}

void h3_cpu_group_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                       int groups, float eps, int silu) {
    if (!h3_cpu_need_f32(b, "group_norm", y) || !h3_cpu_need_f32(b, "group_norm", x)) return;
    int64_t F = x->shape[0], P = x->shape[1], C = x->shape[2], Cg = C / groups;
    const float *X = x->data, *gw = w->data, *gb = bias->data;
    float *Y = y->data;
    for (int64_t f = 0; f < F; f++) {
        for (int64_t g = 0; g < groups; g++) {
            const float *xs = X + f * P * C + g * Cg;
            double s = 0, ss = 0;
            for (int64_t p = 0; p < P; p++)
                for (int64_t c = 0; c < Cg; c++) s += xs[p * C + c];
            double mean = s / (double)(P * Cg);
            for (int64_t p = 0; p < P; p++)
                for (int64_t c = 0; c < Cg; c++) {
                    double d = xs[p * C + c] - mean;
                    ss += d * d;
                }
            float m = (float)mean, rstd = (float)(1.0 / sqrt(ss / (double)(P * Cg) + (double)eps));
            float *ys = Y + f * P * C + g * Cg;
            for (int64_t p = 0; p < P; p++)
                for (int64_t c = 0; c < Cg; c++) {
                    float v = (xs[p * C + c] - m) * rstd * gw[g * Cg + c] + gb[g * Cg + c];
                    ys[p * C + c] = silu ? v / (1.0f + expf(-v)) : v;
                }
        }
    }
}
