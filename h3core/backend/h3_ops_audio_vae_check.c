/* h3_ops_audio_vae_check.c - the checks of the audio VAE's 1-D signal ops
 * (h3_ops_audio_vae.h), before the backend's implementation runs. */
#include "backend/h3_ops_check_impl.h"

static int same_float_dtype(const h3_tensor *a, const h3_tensor *c) { return !c || a->dtype == c->dtype; }

void h3_op_conv1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                  int stride, int padding, int dilation, int groups) {
    GUARD(b);
    NEED(b, "conv1d", "y", y); NEED(b, "conv1d", "x", x); NEED(b, "conv1d", "w", w);
    NEED_IMPL(b, "conv1d", conv1d);
    REQUIRE(b, x->ndim == 3 && y->ndim == 3 && w->ndim == 3, "conv1d: x, y and w must be 3-D (got %d, %d, %d dims)",
            x->ndim, y->ndim, w->ndim);
    REQUIRE(b, stride >= 1 && dilation >= 1 && padding >= 0 && groups >= 1,
            "conv1d: bad stride %d / padding %d / dilation %d / groups %d", stride, padding, dilation, groups);
    int64_t B = x->shape[0], Cin = x->shape[1], Lin = x->shape[2];
    int64_t Cout = w->shape[0], K = w->shape[2];
    REQUIRE(b, Cin % groups == 0 && Cout % groups == 0 && w->shape[1] == Cin / groups,
            "conv1d: w is [%lld,%lld,%lld] for %lld input channels in %d groups", (long long)Cout,
            (long long)w->shape[1], (long long)K, (long long)Cin, groups);
    int64_t span = Lin + 2 * (int64_t)padding - (int64_t)dilation * (K - 1) - 1;
    REQUIRE(b, K >= 1 && span >= 0, "conv1d: input length %lld too short for kernel %lld, dilation %d, padding %d",
            (long long)Lin, (long long)K, dilation, padding);
    int64_t Lout = span / stride + 1;
    REQUIRE(b, y->shape[0] == B && y->shape[1] == Cout && y->shape[2] == Lout,
            "conv1d: y is [%lld,%lld,%lld], want [%lld,%lld,%lld]", (long long)y->shape[0], (long long)y->shape[1],
            (long long)y->shape[2], (long long)B, (long long)Cout, (long long)Lout);
    NOT_HOST(b, "conv1d", "bias", bias);
    REQUIRE(b, !bias || h3_tensor_numel(bias) == Cout, "conv1d: bias has %lld elements, want %lld",
            (long long)h3_tensor_numel(bias), (long long)Cout);
    REQUIRE(b, same_float_dtype(x, y), "conv1d: x is %s, y is %s", h3_dtype_name(x->dtype), h3_dtype_name(y->dtype));
    REQUIRE(b, y->data != x->data, "conv1d: y aliases x");
    b->ops->conv1d(b, y, x, w, bias, stride, padding, dilation, groups);
}

void h3_op_conv_transpose1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                            const h3_tensor *bias, int stride, int padding) {
    GUARD(b);
    NEED(b, "conv_transpose1d", "y", y); NEED(b, "conv_transpose1d", "x", x); NEED(b, "conv_transpose1d", "w", w);
    NEED_IMPL(b, "conv_transpose1d", conv_transpose1d);
    REQUIRE(b, x->ndim == 3 && y->ndim == 3 && w->ndim == 3,
            "conv_transpose1d: x, y and w must be 3-D (got %d, %d, %d dims)", x->ndim, y->ndim, w->ndim);
    REQUIRE(b, stride >= 1 && padding >= 0, "conv_transpose1d: bad stride %d / padding %d", stride, padding);
    int64_t B = x->shape[0], Cin = x->shape[1], Lin = x->shape[2];
    int64_t Cout = w->shape[1], K = w->shape[2];
    REQUIRE(b, w->shape[0] == Cin && K >= 1, "conv_transpose1d: w is [%lld,%lld,%lld] for %lld input channels",
            (long long)w->shape[0], (long long)Cout, (long long)K, (long long)Cin);
    int64_t Lout = (Lin - 1) * stride - 2 * (int64_t)padding + K;
    REQUIRE(b, Lin >= 1 && Lout >= 1, "conv_transpose1d: empty output (input length %lld)", (long long)Lin);
    REQUIRE(b, y->shape[0] == B && y->shape[1] == Cout && y->shape[2] == Lout,
            "conv_transpose1d: y is [%lld,%lld,%lld], want [%lld,%lld,%lld]", (long long)y->shape[0],
            (long long)y->shape[1], (long long)y->shape[2], (long long)B, (long long)Cout, (long long)Lout);
    NOT_HOST(b, "conv_transpose1d", "bias", bias);
    REQUIRE(b, !bias || h3_tensor_numel(bias) == Cout, "conv_transpose1d: bias has %lld elements, want %lld",
            (long long)h3_tensor_numel(bias), (long long)Cout);
    REQUIRE(b, same_float_dtype(x, y), "conv_transpose1d: x is %s, y is %s", h3_dtype_name(x->dtype),
            h3_dtype_name(y->dtype));
    REQUIRE(b, y->data != x->data, "conv_transpose1d: y aliases x");
    b->ops->conv_transpose1d(b, y, x, w, bias, stride, padding);
}

/* Common checks of the resampling filters: 1-D after squeezing, K >= ratio. */
static int check_filter(h3_backend *b, const char *op, const char *what, const h3_tensor *f, int ratio) {
    if (!ok_tensor(b, op, what, f)) return 0;
    int64_t K = h3_tensor_numel(f);
    if (ratio < 1 || K < ratio || K != h3_tensor_cols(f)) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: %s has %lld taps (shape ending in %lld) for ratio %d", op, what,
                        (long long)K, (long long)h3_tensor_cols(f), ratio);
        return 0;
    }
    return 1;
}

void h3_op_upsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio) {
    GUARD(b);
    NEED(b, "upsample1d", "y", y); NEED(b, "upsample1d", "x", x);
    NEED_IMPL(b, "upsample1d", upsample1d);
    if (!check_filter(b, "upsample1d", "filter", filter, ratio)) return;
    int64_t L = h3_tensor_cols(x);
    REQUIRE(b, L >= 1 && h3_tensor_rows(y) == h3_tensor_rows(x) && h3_tensor_cols(y) == L * ratio,
            "upsample1d: y is %lldx%lld, want %lldx%lld", (long long)h3_tensor_rows(y), (long long)h3_tensor_cols(y),
            (long long)h3_tensor_rows(x), (long long)(L * ratio));
    REQUIRE(b, y->data != x->data, "upsample1d: y aliases x");
    b->ops->upsample1d(b, y, x, filter, ratio);
}

void h3_op_downsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio) {
    GUARD(b);
    NEED(b, "downsample1d", "y", y); NEED(b, "downsample1d", "x", x);
    NEED_IMPL(b, "downsample1d", downsample1d);
    if (!check_filter(b, "downsample1d", "filter", filter, ratio)) return;
    int64_t L = h3_tensor_cols(x), Lout = (L + ratio - 1) / ratio;
    REQUIRE(b, L >= 1 && h3_tensor_rows(y) == h3_tensor_rows(x) && h3_tensor_cols(y) == Lout,
            "downsample1d: y is %lldx%lld, want %lldx%lld", (long long)h3_tensor_rows(y),
            (long long)h3_tensor_cols(y), (long long)h3_tensor_rows(x), (long long)Lout);
    REQUIRE(b, y->data != x->data, "downsample1d: y aliases x");
    b->ops->downsample1d(b, y, x, filter, ratio);
}

static int check_snake(h3_backend *b, const char *op, const h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                       const h3_tensor *beta) {
    if (!ok_tensor(b, op, "y", y) || !ok_tensor(b, op, "x", x) || !ok_tensor(b, op, "alpha", alpha) ||
        !ok_tensor(b, op, "beta", beta))
        return 0;
    if (x->ndim != 3 || !same_numel(b, op, y, x) || h3_tensor_cols(y) != x->shape[2]) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: x must be [B, C, L] and y the same shape", op);
        return 0;
    }
    if (h3_tensor_numel(alpha) != x->shape[1] || h3_tensor_numel(beta) != x->shape[1]) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "%s: alpha/beta have %lld/%lld elements for %lld channels", op,
                        (long long)h3_tensor_numel(alpha), (long long)h3_tensor_numel(beta), (long long)x->shape[1]);
        return 0;
    }
    return 1;
}

void h3_op_snake_beta(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha, const h3_tensor *beta) {
    GUARD(b);
    NEED_IMPL(b, "snake_beta", snake_beta);
    if (!check_snake(b, "snake_beta", y, x, alpha, beta)) return;
    b->ops->snake_beta(b, y, x, alpha, beta);
}

void h3_op_snake(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha) {
    GUARD(b);
    NEED_IMPL(b, "snake", snake);
    if (!check_snake(b, "snake", y, x, alpha, alpha)) return;
    b->ops->snake(b, y, x, alpha);
}

void h3_op_snake_beta_antialiased(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                                  const h3_tensor *beta, const h3_tensor *up_filter, const h3_tensor *down_filter,
                                  int ratio) {
    GUARD(b);
    NEED_IMPL(b, "snake_beta_antialiased", snake_beta_antialiased);
    if (!check_snake(b, "snake_beta_antialiased", y, x, alpha, beta)) return;
    if (!check_filter(b, "snake_beta_antialiased", "up_filter", up_filter, ratio)) return;
    if (!check_filter(b, "snake_beta_antialiased", "down_filter", down_filter, ratio)) return;
    REQUIRE(b, x->shape[2] >= 1, "snake_beta_antialiased: empty signal");
    b->ops->snake_beta_antialiased(b, y, x, alpha, beta, up_filter, down_filter, ratio);
}

void h3_op_clamp(h3_backend *b, h3_tensor *y, const h3_tensor *x, float lo, float hi) {
    GUARD(b);
    NEED(b, "clamp", "y", y); NEED(b, "clamp", "x", x);
    NEED_IMPL(b, "clamp", clamp);
    if (!same_numel(b, "clamp", y, x)) return;
    REQUIRE(b, lo <= hi, "clamp: lo %g > hi %g", (double)lo, (double)hi);
    b->ops->clamp(b, y, x, lo, hi);
}
