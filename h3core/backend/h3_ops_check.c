/* h3_ops_check.c - the core ops of h3_backend.h: every op's shapes and
 * dtypes checked once, for every backend, then the backend's implementation
 * called through its table (h3_backend_impl.h). The subsystems' ops are
 * checked the same way in h3_ops_vsa_check.c, h3_ops_video_vae_check.c and
 * h3_ops_audio_vae_check.c. */
#include "backend/h3_ops_check_impl.h"

#include <math.h>

void h3_op_linear(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias) {
    GUARD(b);
    NEED(b, "linear", "y", y); NEED(b, "linear", "x", x); NEED(b, "linear", "w", w);
    int64_t K = h3_tensor_cols(x), M = h3_tensor_rows(x);
    REQUIRE(b, w->ndim == 2 && w->shape[1] == K, "linear: w is [%lld,%lld], x has %lld cols", (long long)w->shape[0],
            (long long)(w->ndim > 1 ? w->shape[1] : 0), (long long)K);
    int64_t N = w->shape[0];
    REQUIRE(b, h3_tensor_rows(y) == M && h3_tensor_cols(y) == N, "linear: y is %lldx%lld, want %lldx%lld",
            (long long)h3_tensor_rows(y), (long long)h3_tensor_cols(y), (long long)M, (long long)N);
    NOT_HOST(b, "linear", "bias", bias);
    REQUIRE(b, !bias || h3_tensor_numel(bias) == N, "linear: bias has %lld elements, want %lld",
            (long long)h3_tensor_numel(bias), (long long)N);
    REQUIRE(b, y->data != x->data, "linear: y aliases x");
    b->ops->linear(b, y, x, w, bias);
}

void h3_op_rms_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, int64_t width, float eps) {
    GUARD(b);
    NEED(b, "rms_norm", "y", y); NEED(b, "rms_norm", "x", x);
    if (!same_numel(b, "rms_norm", y, x)) return;
    REQUIRE(b, width > 0 && h3_tensor_cols(x) % width == 0, "rms_norm: width %lld does not divide %lld",
            (long long)width, (long long)h3_tensor_cols(x));
    NOT_HOST(b, "rms_norm", "w", w);
    REQUIRE(b, !w || h3_tensor_numel(w) == width, "rms_norm: weight has %lld elements, width %lld",
            (long long)h3_tensor_numel(w), (long long)width);
    b->ops->rms_norm(b, y, x, w, width, eps);
}

void h3_op_layer_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                      float eps) {
    GUARD(b);
    NEED(b, "layer_norm", "y", y); NEED(b, "layer_norm", "x", x);
    if (!same_numel(b, "layer_norm", y, x)) return;
    int64_t D = h3_tensor_cols(x);
    NOT_HOST(b, "layer_norm", "w", w); NOT_HOST(b, "layer_norm", "bias", bias);
    REQUIRE(b, (!w || h3_tensor_numel(w) == D) && (!bias || h3_tensor_numel(bias) == D),
            "layer_norm: weight/bias size differs from %lld", (long long)D);
    b->ops->layer_norm(b, y, x, w, bias, eps);
}

static void binary(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x0, const h3_tensor *x1) {
    GUARD(b);
    NEED(b, "binary", "y", y); NEED(b, "binary", "x0", x0); NEED(b, "binary", "x1", x1);
    if (!same_numel(b, op ? "mul" : "add", y, x0) || !same_numel(b, op ? "mul" : "add", y, x1)) return;
    b->ops->binary(b, op, y, x0, x1);
}
void h3_op_add(h3_backend *b, h3_tensor *y, const h3_tensor *x0, const h3_tensor *x1) { binary(b, 0, y, x0, x1); }
void h3_op_mul(h3_backend *b, h3_tensor *y, const h3_tensor *x0, const h3_tensor *x1) { binary(b, 1, y, x0, x1); }

static void row_vector(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x, const h3_tensor *v) {
    GUARD(b);
    NEED(b, "row_vector", "y", y); NEED(b, "row_vector", "x", x); NEED(b, "row_vector", "v", v);
    if (!same_numel(b, "row_vector", y, x)) return;
    REQUIRE(b, h3_tensor_numel(v) == h3_tensor_cols(x), "row_vector: vector has %lld elements, rows have %lld",
            (long long)h3_tensor_numel(v), (long long)h3_tensor_cols(x));
    b->ops->row_vector(b, op, y, x, v);
}
void h3_op_mul_row_vector(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *v) { row_vector(b, 0, y, x, v); }
void h3_op_add_row_vector(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *v) { row_vector(b, 1, y, x, v); }

void h3_op_scale(h3_backend *b, h3_tensor *y, const h3_tensor *x, float alpha) {
    GUARD(b);
    NEED(b, "scale", "y", y); NEED(b, "scale", "x", x);
    if (!same_numel(b, "scale", y, x)) return;
    b->ops->scale(b, y, x, alpha);
}

static void unary(h3_backend *b, int op, h3_tensor *y, const h3_tensor *x) {
    GUARD(b);
    NEED(b, "unary", "y", y); NEED(b, "unary", "x", x);
    if (!same_numel(b, "unary", y, x)) return;
    b->ops->unary(b, op, y, x);
}
void h3_op_silu(h3_backend *b, h3_tensor *y, const h3_tensor *x) { unary(b, 0, y, x); }
void h3_op_gelu(h3_backend *b, h3_tensor *y, const h3_tensor *x, int approximate) { unary(b, approximate ? 2 : 1, y, x); }

void h3_op_swiglu(h3_backend *b, h3_tensor *y, const h3_tensor *u, int value_first) {
    GUARD(b);
    NEED(b, "swiglu", "y", y); NEED(b, "swiglu", "u", u);
    REQUIRE(b, h3_tensor_rows(y) == h3_tensor_rows(u) && 2 * h3_tensor_cols(y) == h3_tensor_cols(u),
            "swiglu: u is %lldx%lld, y is %lldx%lld", (long long)h3_tensor_rows(u), (long long)h3_tensor_cols(u),
            (long long)h3_tensor_rows(y), (long long)h3_tensor_cols(y));
    b->ops->swiglu(b, y, u, value_first);
}

static int check_sel(h3_backend *b, const char *op, const h3_tensor *sel, int64_t S, int64_t table_rows) {
    if (!ok_tensor(b, op, "sel", sel)) return 0;
    if (sel->dtype != H3_I32 || h3_tensor_numel(sel) != S) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: selector must be i32 [%lld]", op, (long long)S);
        return 0;
    }
    (void)table_rows; /* values are checked where the selector is built */
    return 1;
}

void h3_op_modulate(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *shift, const h3_tensor *scale,
                    const h3_tensor *sel) {
    GUARD(b);
    NEED(b, "modulate", "y", y); NEED(b, "modulate", "x", x);
    NEED(b, "modulate", "shift", shift); NEED(b, "modulate", "scale", scale);
    if (!same_numel(b, "modulate", y, x)) return;
    int64_t D = h3_tensor_cols(x);
    REQUIRE(b, h3_tensor_cols(shift) == D && h3_tensor_cols(scale) == D, "modulate: table width differs from %lld",
            (long long)D);
    if (!check_sel(b, "modulate", sel, h3_tensor_rows(x), h3_tensor_rows(shift))) return;
    b->ops->modulate(b, y, x, shift, scale, sel);
}

void h3_op_gated_residual(h3_backend *b, h3_tensor *x, const h3_tensor *gate, const h3_tensor *y, const h3_tensor *sel) {
    GUARD(b);
    NEED(b, "gated_residual", "x", x); NEED(b, "gated_residual", "gate", gate); NEED(b, "gated_residual", "y", y);
    if (!same_numel(b, "gated_residual", x, y)) return;
    REQUIRE(b, h3_tensor_cols(gate) == h3_tensor_cols(x), "gated_residual: gate width differs");
    if (!check_sel(b, "gated_residual", sel, h3_tensor_rows(x), h3_tensor_rows(gate))) return;
    b->ops->gated_residual(b, x, gate, y, sel);
}

void h3_op_rope(h3_backend *b, h3_tensor *x, const h3_tensor *cos, const h3_tensor *sin, int n_heads, int head_dim,
                int rot_dim) {
    GUARD(b);
    NEED(b, "rope", "x", x); NEED(b, "rope", "cos", cos); NEED(b, "rope", "sin", sin);
    int64_t S = h3_tensor_rows(x);
    REQUIRE(b, h3_tensor_cols(x) == (int64_t)n_heads * head_dim, "rope: x has %lld cols, want %d heads x %d",
            (long long)h3_tensor_cols(x), n_heads, head_dim);
    REQUIRE(b, rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= head_dim, "rope: bad rot_dim %d", rot_dim);
    REQUIRE(b, cos->dtype == H3_F32 && sin->dtype == H3_F32, "rope: cos/sin must be f32");
    REQUIRE(b, h3_tensor_rows(cos) == S && h3_tensor_cols(cos) == rot_dim && h3_tensor_rows(sin) == S &&
                   h3_tensor_cols(sin) == rot_dim,
            "rope: cos/sin must be [%lld, %d]", (long long)S, rot_dim);
    b->ops->rope(b, x, cos, sin, n_heads, head_dim, rot_dim);
}

void h3_op_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                     int n_heads, int n_kv_heads, int head_dim, int causal, float scale) {
    GUARD(b);
    NEED(b, "attention", "o", o); NEED(b, "attention", "q", q);
    NEED(b, "attention", "k", k); NEED(b, "attention", "v", v);
    REQUIRE(b, n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0 && head_dim > 0,
            "attention: bad heads %d/%d", n_heads, n_kv_heads);
    REQUIRE(b, h3_tensor_cols(q) == (int64_t)n_heads * head_dim && h3_tensor_cols(o) == h3_tensor_cols(q) &&
                   h3_tensor_rows(o) == h3_tensor_rows(q),
            "attention: q/o shape mismatch");
    REQUIRE(b, h3_tensor_cols(k) == (int64_t)n_kv_heads * head_dim && h3_tensor_cols(v) == h3_tensor_cols(k) &&
                   h3_tensor_rows(v) == h3_tensor_rows(k),
            "attention: k/v shape mismatch");
    REQUIRE(b, !causal || h3_tensor_rows(q) == h3_tensor_rows(k), "attention: causal needs Sq == Skv");
    REQUIRE(b, o->data != q->data && o->data != k->data && o->data != v->data, "attention: o aliases an input");
    b->ops->attention(b, o, q, k, v, n_heads, n_kv_heads, head_dim, causal, scale);
}


void h3_op_gather_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx) {
    GUARD(b);
    NEED(b, "gather_rows", "dst", dst); NEED(b, "gather_rows", "src", src); NEED(b, "gather_rows", "idx", idx);
    REQUIRE(b, idx->dtype == H3_I32 && h3_tensor_numel(idx) == h3_tensor_rows(dst) &&
                   h3_tensor_cols(dst) == h3_tensor_cols(src),
            "gather_rows: shapes do not fit");
    b->ops->gather_rows(b, dst, src, idx);
}

void h3_op_scatter_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, const h3_tensor *idx) {
    GUARD(b);
    NEED(b, "scatter_rows", "dst", dst); NEED(b, "scatter_rows", "src", src); NEED(b, "scatter_rows", "idx", idx);
    REQUIRE(b, idx->dtype == H3_I32 && h3_tensor_numel(idx) == h3_tensor_rows(src) &&
                   h3_tensor_cols(dst) == h3_tensor_cols(src),
            "scatter_rows: shapes do not fit");
    b->ops->scatter_rows(b, dst, src, idx);
}

void h3_op_copy(h3_backend *b, h3_tensor *dst, const h3_tensor *src) {
    GUARD(b);
    NEED(b, "copy", "dst", dst); NEED(b, "copy", "src", src);
    if (!same_numel(b, "copy", dst, src)) return;
    REQUIRE(b, is_float(dst) == is_float(src), "copy: between int and float");
    b->ops->copy(b, dst, src);
}

void h3_op_fill(h3_backend *b, h3_tensor *dst, float value) {
    GUARD(b);
    NEED(b, "fill", "dst", dst);
    b->ops->fill(b, dst, value);
}

void h3_op_fill_random(h3_backend *b, h3_tensor *dst, const h3_st_random *values, h3_st_dtype round_to) {
    GUARD(b);
    NEED(b, "fill_random", "dst", dst);
    REQUIRE(b, is_float(dst), "fill_random: dst is %s", h3_dtype_name(dst->dtype));
    REQUIRE(b, values && isfinite(values->lo) && isfinite(values->hi) && values->lo <= values->hi,
            "fill_random: range [%g, %g)", values ? (double)values->lo : 0.0, values ? (double)values->hi : 0.0);
    REQUIRE(b, round_to == H3_ST_F32 || round_to == H3_ST_BF16 || round_to == H3_ST_F16,
            "fill_random: values of dtype %s", h3_st_dtype_name(round_to));
    REQUIRE(b, values->offset >= 0 && values->row_stride >= 0 && values->part_rows >= 0 && values->part_stride >= 0,
            "fill_random: negative offset or stride");
    NEED_IMPL(b, "fill_random", fill_random);
    b->ops->fill_random(b, dst, values, round_to);
}

/* ---- fused ops: validated like the ops they replace -------------------------------- */

void h3_op_rms_norm_modulate(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, float eps,
                             const h3_tensor *shift, const h3_tensor *scale, const h3_tensor *sel) {
    GUARD(b);
    if (!b->ops->rms_norm_modulate) {
        h3_op_rms_norm(b, y, x, w, h3_tensor_cols(x), eps);
        h3_op_modulate(b, y, y, shift, scale, sel);
        return;
    }
    NEED(b, "rms_norm_modulate", "y", y); NEED(b, "rms_norm_modulate", "x", x);
    NEED(b, "rms_norm_modulate", "shift", shift); NEED(b, "rms_norm_modulate", "scale", scale);
    if (!same_numel(b, "rms_norm_modulate", y, x)) return;
    int64_t D = h3_tensor_cols(x);
    NOT_HOST(b, "rms_norm_modulate", "w", w);
    REQUIRE(b, !w || h3_tensor_numel(w) == D, "rms_norm_modulate: weight has %lld elements, rows %lld",
            (long long)h3_tensor_numel(w), (long long)D);
    REQUIRE(b, h3_tensor_cols(shift) == D && h3_tensor_cols(scale) == D,
            "rms_norm_modulate: table width differs from %lld", (long long)D);
    if (!check_sel(b, "rms_norm_modulate", sel, h3_tensor_rows(x), h3_tensor_rows(shift))) return;
    b->ops->rms_norm_modulate(b, y, x, w, eps, shift, scale, sel);
}

void h3_op_qk_norm_rope(h3_backend *b, h3_tensor *x, const h3_tensor *w, float eps, const h3_tensor *cos,
                        const h3_tensor *sin, int n_heads, int head_dim, int rot_dim) {
    GUARD(b);
    if (!b->ops->qk_norm_rope) {
        h3_op_rms_norm(b, x, x, w, head_dim, eps);
        h3_op_rope(b, x, cos, sin, n_heads, head_dim, rot_dim);
        return;
    }
    NEED(b, "qk_norm_rope", "x", x); NEED(b, "qk_norm_rope", "cos", cos); NEED(b, "qk_norm_rope", "sin", sin);
    int64_t S = h3_tensor_rows(x);
    REQUIRE(b, head_dim > 0 && h3_tensor_cols(x) == (int64_t)n_heads * head_dim,
            "qk_norm_rope: x has %lld cols, want %d heads x %d", (long long)h3_tensor_cols(x), n_heads, head_dim);
    NOT_HOST(b, "qk_norm_rope", "w", w);
    REQUIRE(b, !w || h3_tensor_numel(w) == head_dim, "qk_norm_rope: weight has %lld elements, head_dim %d",
            (long long)h3_tensor_numel(w), head_dim);
    REQUIRE(b, rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= head_dim, "qk_norm_rope: bad rot_dim %d", rot_dim);
    REQUIRE(b, cos->dtype == H3_F32 && sin->dtype == H3_F32, "qk_norm_rope: cos/sin must be f32");
    REQUIRE(b, h3_tensor_rows(cos) == S && h3_tensor_cols(cos) == rot_dim && h3_tensor_rows(sin) == S &&
                   h3_tensor_cols(sin) == rot_dim,
            "qk_norm_rope: cos/sin must be [%lld, %d]", (long long)S, rot_dim);
    b->ops->qk_norm_rope(b, x, w, eps, cos, sin, n_heads, head_dim, rot_dim);
}
