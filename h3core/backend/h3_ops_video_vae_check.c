/* h3_ops_video_vae_check.c - the checks of the video VAE's ops (h3_ops_video_vae.h):
 * every view inside its tensor, shapes and dtypes agreeing, no overlap the
 * op does not allow; and the raw byte download of the RGB frames. */
#include "backend/h3_ops_check_impl.h"

#include <stdint.h>

/* A view is valid when every element it names lies inside its tensor. */
static int view_ok(h3_backend *b, const char *op, const char *what, const h3_tensor *t, const h3_view *v) {
    if (!ok_tensor(b, op, what, t)) return 0;
    if (!v || v->ndim < 1 || v->ndim > H3_VIEW_MAX_DIMS) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: view of %s has %d dims (1..%d)", op, what, v ? v->ndim : 0,
                        H3_VIEW_MAX_DIMS);
        return 0;
    }
    int64_t last = v->offset;
    int empty = 0;
    for (int i = 0; i < v->ndim; i++) {
        if (v->shape[i] < 0 || v->stride[i] < 0) {
            h3_backend_fail(b, H3_ERR_INTERNAL, "%s: view of %s has a negative size or stride in dim %d", op, what, i);
            return 0;
        }
        if (v->shape[i] == 0) empty = 1;
        else last += (v->shape[i] - 1) * v->stride[i];
    }
    if (v->offset < 0 || (!empty && last >= h3_tensor_numel(t))) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: view of %s reaches element %lld of %lld", op, what, (long long)last,
                        (long long)h3_tensor_numel(t));
        return 0;
    }
    return 1;
}

static int view_same_shape(const h3_view *a, const h3_view *c) {
    if (a->ndim != c->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != c->shape[i]) return 0;
    return 1;
}

static int view_identical(const h3_tensor *ta, const h3_view *a, const h3_tensor *tc, const h3_view *c) {
    if (ta->data != tc->data || ta->dtype != tc->dtype || a->offset != c->offset || !view_same_shape(a, c)) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] > 1 && a->stride[i] != c->stride[i]) return 0;
    return 1;
}

/* Byte ranges [lo, hi) spanned by two views; they overlap if they intersect. */
static void view_bytes(const h3_tensor *t, const h3_view *v, uintptr_t *lo, uintptr_t *hi) {
    size_t es = h3_dtype_size(t->dtype);
    int64_t last = v->offset;
    for (int i = 0; i < v->ndim; i++)
        if (v->shape[i] > 0) last += (v->shape[i] - 1) * v->stride[i];
    *lo = (uintptr_t)t->data + (uintptr_t)v->offset * es;
    *hi = (uintptr_t)t->data + (uintptr_t)(last + 1) * es;
}

static int view_disjoint(const h3_tensor *ta, const h3_view *a, const h3_tensor *tc, const h3_view *c) {
    uintptr_t alo, ahi, clo, chi;
    view_bytes(ta, a, &alo, &ahi);
    view_bytes(tc, c, &clo, &chi);
    return ahi <= clo || chi <= alo;
}

void h3_op_copy_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *src, const h3_view *sv) {
    GUARD(b);
    NEED_IMPL(b, "copy_view", copy_view);
    if (!view_ok(b, "copy_view", "dst", dst, dv) || !view_ok(b, "copy_view", "src", src, sv)) return;
    REQUIRE(b, view_same_shape(dv, sv), "copy_view: dst and src views differ in shape");
    REQUIRE(b, dst->dtype == src->dtype, "copy_view: dtypes differ (%s vs %s)", h3_dtype_name(dst->dtype),
            h3_dtype_name(src->dtype));
    REQUIRE(b, view_identical(dst, dv, src, sv) || view_disjoint(dst, dv, src, sv),
            "copy_view: dst and src windows overlap");
    b->ops->copy_view(b, dst, dv, src, sv);
}

void h3_op_blend_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *a, const h3_view *av,
                      const h3_tensor *x, const h3_view *xv, int axis, int extent) {
    GUARD(b);
    NEED_IMPL(b, "blend_view", blend_view);
    if (!view_ok(b, "blend_view", "dst", dst, dv) || !view_ok(b, "blend_view", "a", a, av) ||
        !view_ok(b, "blend_view", "x", x, xv))
        return;
    REQUIRE(b, view_same_shape(dv, av) && view_same_shape(dv, xv), "blend_view: views differ in shape");
    REQUIRE(b, dst->dtype == a->dtype && dst->dtype == x->dtype && is_float(dst), "blend_view: dtypes differ");
    REQUIRE(b, axis >= 0 && axis < dv->ndim, "blend_view: axis %d outside %d dims", axis, dv->ndim);
    REQUIRE(b, extent > 0 && dv->shape[axis] <= extent, "blend_view: %lld positions along the axis, extent %d",
            (long long)dv->shape[axis], extent);
    REQUIRE(b, view_identical(dst, dv, x, xv) || view_disjoint(dst, dv, x, xv), "blend_view: dst overlaps x");
    REQUIRE(b, view_disjoint(dst, dv, a, av), "blend_view: dst overlaps a");
    b->ops->blend_view(b, dst, dv, a, av, x, xv, axis, extent);
}

void h3_op_rgb8_from_planar(h3_backend *b, h3_tensor *dst, const h3_tensor *src, int64_t frame0, int64_t nframes,
                            const float *mean, const float *std) {
    GUARD(b);
    NEED_IMPL(b, "rgb8_from_planar", rgb8_from_planar);
    NEED(b, "rgb8_from_planar", "dst", dst); NEED(b, "rgb8_from_planar", "src", src);
    REQUIRE(b, mean && std, "rgb8_from_planar: mean/std missing");
    REQUIRE(b, src->ndim == 4 && src->shape[0] >= 1 && src->shape[0] <= 4 && is_float(src),
            "rgb8_from_planar: src must be float [C<=4, F, H, W]");
    REQUIRE(b, frame0 >= 0 && nframes >= 0 && frame0 + nframes <= src->shape[1],
            "rgb8_from_planar: frames [%lld, %lld) outside %lld", (long long)frame0, (long long)(frame0 + nframes),
            (long long)src->shape[1]);
    REQUIRE(b, dst->dtype == H3_I32, "rgb8_from_planar: dst must be an I32 byte buffer");
    size_t need = (size_t)(nframes * src->shape[0] * src->shape[2] * src->shape[3]);
    REQUIRE(b, h3_tensor_nbytes(dst) >= need, "rgb8_from_planar: dst holds %zu bytes, need %zu",
            h3_tensor_nbytes(dst), need);
    b->ops->rgb8_from_planar(b, dst, src, frame0, nframes, mean, std);
}

h3_status_code h3_tensor_download_bytes(h3_backend *b, const h3_tensor *src, void *host, size_t nbytes,
                                        h3_status *status) {
    if (!src || !src->data || nbytes > h3_tensor_nbytes(src))
        return h3_fail(status, H3_ERR_INTERNAL, "download_bytes: %zu bytes from a tensor of %zu", nbytes,
                       src ? h3_tensor_nbytes(src) : 0);
    if (nbytes && b->ops->download(b, host, src->data, nbytes) != 0)
        return h3_fail(status, H3_ERR_DEVICE, "%s: download failed", b->ops->name);
    return H3_OK;
}

/* The output extent of a causal 3-D convolution along one axis, or -1. */
static int64_t conv_out_len(int64_t len, int pad, int k, int s) {
    int64_t padded = len + pad;
    return k >= 1 && s >= 1 && padded >= k ? (padded - k) / s + 1 : -1;
}

void h3_op_im2col3d(h3_backend *b, h3_tensor *col, const h3_tensor *x, const h3_conv3d_geom *g, int64_t n0) {
    GUARD(b);
    NEED_IMPL(b, "im2col3d", im2col3d);
    NEED(b, "im2col3d", "col", col); NEED(b, "im2col3d", "x", x);
    REQUIRE(b, g, "im2col3d: no geometry");
    REQUIRE(b, x->ndim == 4 && is_float(x) && is_float(col), "im2col3d: x must be float [T, H, W, C]");
    int64_t T = x->shape[0], H = x->shape[1], W = x->shape[2], C = x->shape[3];
    REQUIRE(b, g->pad_t >= 0 && g->pad_top >= 0 && g->pad_bottom >= 0 && g->pad_left >= 0 && g->pad_right >= 0 &&
                   g->pad_top < H && g->pad_bottom < H && g->pad_left < W && g->pad_right < W,
            "im2col3d: reflect padding %d/%d/%d/%d needs more than %lldx%lld pixels", g->pad_top, g->pad_bottom,
            g->pad_left, g->pad_right, (long long)H, (long long)W);
    int64_t To = conv_out_len(T, g->pad_t, g->kt, g->st), Ho = conv_out_len(H, g->pad_top + g->pad_bottom, g->kh, g->sh);
    int64_t Wo = conv_out_len(W, g->pad_left + g->pad_right, g->kw, g->sw);
    REQUIRE(b, To > 0 && Ho > 0 && Wo > 0, "im2col3d: kernel %dx%dx%d does not fit %lldx%lldx%lld", g->kt, g->kh,
            g->kw, (long long)T, (long long)H, (long long)W);
    int64_t K = C * g->kt * g->kh * g->kw, rows = h3_tensor_rows(col);
    REQUIRE(b, h3_tensor_cols(col) == K, "im2col3d: col has %lld columns, want %lld", (long long)h3_tensor_cols(col),
            (long long)K);
    REQUIRE(b, n0 >= 0 && n0 + rows <= To * Ho * Wo, "im2col3d: rows [%lld, %lld) outside %lld outputs",
            (long long)n0, (long long)(n0 + rows), (long long)(To * Ho * Wo));
    REQUIRE(b, col->data != x->data, "im2col3d: col aliases x");
    b->ops->im2col3d(b, col, x, g, n0);
}

void h3_op_group_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                      int groups, float eps, int silu) {
    GUARD(b);
    NEED_IMPL(b, "group_norm", group_norm);
    NEED(b, "group_norm", "y", y); NEED(b, "group_norm", "x", x);
    NEED(b, "group_norm", "w", w); NEED(b, "group_norm", "bias", bias);
    REQUIRE(b, x->ndim == 3 && is_float(x) && is_float(y), "group_norm: x must be float [F, P, C]");
    REQUIRE(b, h3_tensor_numel(y) == h3_tensor_numel(x), "group_norm: y and x differ in size");
    int64_t C = x->shape[2];
    REQUIRE(b, groups >= 1 && C % groups == 0, "group_norm: %d groups do not divide %lld channels", groups,
            (long long)C);
    REQUIRE(b, w->dtype == H3_F32 && bias->dtype == H3_F32 && h3_tensor_numel(w) == C && h3_tensor_numel(bias) == C,
            "group_norm: w and bias must be float32 [%lld]", (long long)C);
    b->ops->group_norm(b, y, x, w, bias, groups, eps, silu);
}
