/* h3_cuda_vae.c - the VAE ops on the CUDA backend: strided views, tile
 * cross-fades and RGB packing (the video decoder), the causal 3-D im2col and
 * per-frame GroupNorm (the video encoder: its convolutions are these
 * im2cols feeding cuBLASLt through h3_op_linear), 1-D convolutions,
 * anti-aliased resampling, SnakeBeta and clamp (the BigVGAN audio decoder).
 * The kernels: kernels/h3_vae.cu; float32 convolutions with groups 1 run as
 * cuBLASLt GEMMs over an im2col, or (few output channels) as an implicit
 * GEMM kernel. */
#include "backend/cuda/h3_backend_cuda_impl.h"
#include "kernels/h3_kernels_vae.h"

#include <cuda_runtime_api.h>
#include <string.h>

static h3k_view kview(const h3_view *v) {
    h3k_view k;
    memset(&k, 0, sizeof k);
    k.ndim = v->ndim;
    k.offset = v->offset;
    for (int i = 0; i < v->ndim && i < 8; i++) {
        k.shape[i] = v->shape[i];
        k.stride[i] = v->stride[i];
    }
    return k;
}

void h3_cuda_copy_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *src,
                           const h3_view *sv) {
    h3k_view d = kview(dv), s = kview(sv);
    ok(b, h3k_copy_view(dst->data, &d, src->data, &s, (int)h3_dtype_size(dst->dtype), impl_of(b)->stream),
       "copy_view");
}

void h3_cuda_blend_view(h3_backend *b, h3_tensor *dst, const h3_view *dv, const h3_tensor *a, const h3_view *av,
                            const h3_tensor *x, const h3_view *xv, int axis, int extent) {
    if (dst->dtype == H3_I32) {
        h3_backend_fail(b, H3_ERR_UNSUPPORTED, "cuda blend_view: i32 tensors");
        return;
    }
    h3k_view d = kview(dv), va = kview(av), vx = kview(xv);
    ok(b, h3k_blend_view(dst->data, &d, a->data, &va, x->data, &vx, dst->dtype, axis, extent, impl_of(b)->stream),
       "blend_view");
}

void h3_cuda_rgb8_from_planar(h3_backend *b, h3_tensor *dst, const h3_tensor *src, int64_t frame0,
                                  int64_t nframes, const float *mean, const float *std) {
    h3k_rgb_norm norm;
    memset(&norm, 0, sizeof norm);
    int64_t C = src->shape[0];
    if (C > 4 || src->ndim != 4) {
        h3_backend_fail(b, H3_ERR_UNSUPPORTED, "cuda rgb8_from_planar: src must be [C<=4, F, H, W]");
        return;
    }
    for (int64_t c = 0; c < C; c++) {
        norm.mean[c] = mean[c];
        norm.std[c] = std[c];
    }
    ok(b, h3k_rgb8_from_planar(dst->data, src->data, src->dtype, C, src->shape[1], src->shape[2], src->shape[3],
                               frame0, nframes, &norm, impl_of(b)->flag, impl_of(b)->stream),
       "rgb8_from_planar");
}

void h3_cuda_im2col3d(h3_backend *b, h3_tensor *col, const h3_tensor *x, const h3_conv3d_geom *g, int64_t n0) {
    h3k_conv3d k;
    memset(&k, 0, sizeof k);
    k.T = x->shape[0], k.H = x->shape[1], k.W = x->shape[2], k.C = x->shape[3];
    k.Ho = (k.H + g->pad_top + g->pad_bottom - g->kh) / g->sh + 1;
    k.Wo = (k.W + g->pad_left + g->pad_right - g->kw) / g->sw + 1;
    k.kt = g->kt, k.kh = g->kh, k.kw = g->kw, k.st = g->st, k.sh = g->sh, k.sw = g->sw;
    k.pad_t = g->pad_t, k.pad_top = g->pad_top, k.pad_left = g->pad_left;
    ok(b, h3k_im2col3d(col->data, col->dtype, x->data, x->dtype, &k, n0, h3_tensor_rows(col), impl_of(b)->stream),
       "im2col3d");
}

void h3_cuda_group_norm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                        int groups, float eps, int silu) {
    ok(b, h3k_group_norm(y->data, y->dtype, x->data, x->dtype, w->data, bias->data, x->shape[0], x->shape[1],
                         x->shape[2], groups, eps, silu, impl_of(b)->stream),
       "group_norm");
}

/* Float32 conv1d with groups 1 runs as true-fp32 GEMMs (the BigVGAN convs: 20-50x the direct kernel), one
 * of two ways:
 *   im2col: per batch item, im2col [Lout, Cin·K] into the scratch, then y_b[Cout, Lout] = w[Cout, Cin·K] · colᵀ
 *     by cuBLASLt, then the bias per channel;
 *   implicit: k_conv1d_igemm gathers the im2col tiles in shared memory and adds the bias, one launch for both
 *     batch items. With few output channels the GEMM is bound by reading col (2·Cout FLOPs per float of
 *     it: 32 FLOP/B at Cout 64 down to 4 at Cout 8, 1.34 GB written and read again per stage of the
 *     release's decoder), so col's write and read are the cost the kernel removes; wider convolutions keep
 *     cuBLASLt's tuned kernels.
 * CONV1D_IMPLICIT_MAX_COUT is where the automatic choice switches (h3_backend_cuda_set_conv1d_path forces
 * one, for benchmarks). Too small to pay (16-bit, grouped, or tiny): the direct kernel. */
#define CONV1D_IMPLICIT_MAX_COUT 64

static int conv1d_gemm_fits(const h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                            int groups) {
    int64_t Cin = x->shape[1], Cout = y->shape[1], Lout = y->shape[2], K = w->shape[2];
    return groups == 1 && x->dtype == H3_F32 && w->dtype == H3_F32 && y->dtype == H3_F32 &&
           (!bias || bias->dtype == H3_F32) && Cout >= 8 && Cin * K >= 16 && Lout >= 64;
}

/* The path a conv1d takes: 0 direct, 1 im2col + cuBLASLt, 2 implicit GEMM. */
static int conv1d_path(int forced, const h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                       int groups) {
    if (!conv1d_gemm_fits(y, x, w, bias, groups)) return 0;
    if (forced == 1 || forced == 2) return forced;
    return y->shape[1] <= CONV1D_IMPLICIT_MAX_COUT ? 2 : 1;
}

size_t h3_cuda_conv1d_scratch(const h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                              int groups) {
    if (conv1d_path(0, y, x, w, bias, groups) != 1) return 0; /* no im2col */
    return (size_t)(y->shape[2] * x->shape[1] * w->shape[2]) * sizeof(float);
}

int h3_backend_cuda_set_conv1d_path(h3_backend *b, int path) {
    cuda_impl *c = impl_of(b);
    int old = c->conv1d_path;
    c->conv1d_path = path == 1 || path == 2 ? path : 0;
    return old;
}

static void conv1d_im2col_gemm(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                               const h3_tensor *bias, int stride, int padding, int dilation) {
    cuda_impl *c = impl_of(b);
    int64_t B = x->shape[0], Cin = x->shape[1], Lin = x->shape[2], Cout = y->shape[1], Lout = y->shape[2];
    int K = (int)w->shape[2];
    float *col = h3_cuda_scratch(b, (size_t)(Lout * Cin * K) * sizeof(float));
    if (!col) return; /* the failure is recorded */
    for (int64_t i = 0; i < B && !h3_backend_failed(b); i++) {
        const float *xb = (const float *)x->data + i * Cin * Lin;
        float *yb = (float *)y->data + i * Cout * Lout;
        if (!ok(b, h3k_im2col1d(col, xb, Cin, Lin, Lout, K, stride, padding, dilation, c->stream), "conv1d: im2col"))
            return;
        h3_cuda_gemm(b, yb, CUDA_R_32F, col, w->data, CUDA_R_32F, Cout, Lout, Cin * K, NULL);
    }
    if (bias && !h3_backend_failed(b))
        ok(b, h3k_add_channel_bias(y->data, bias->data, B, Cout, Lout, c->stream), "conv1d: bias");
}

void h3_cuda_conv1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                        int stride, int padding, int dilation, int groups) {
    switch (conv1d_path(impl_of(b)->conv1d_path, y, x, w, bias, groups)) {
    case 1: conv1d_im2col_gemm(b, y, x, w, bias, stride, padding, dilation); return;
    case 2:
        ok(b, h3k_conv1d_igemm(y->data, x->data, w->data, PTR(bias), x->shape[0], x->shape[1], x->shape[2],
                               y->shape[1], y->shape[2], (int)w->shape[2], stride, padding, dilation,
                               impl_of(b)->stream),
           "conv1d (implicit GEMM)");
        return;
    default: break;
    }
    ok(b, h3k_conv1d(y->data, y->dtype, x->data, x->dtype, w->data, w->dtype, PTR(bias), DT(bias), x->shape[0],
                     x->shape[1], x->shape[2], y->shape[1], y->shape[2], (int)w->shape[2], stride, padding, dilation,
                     groups, impl_of(b)->stream),
       "conv1d");
}

void h3_cuda_conv_transpose1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                                  const h3_tensor *bias, int stride, int padding) {
    ok(b, h3k_conv_transpose1d(y->data, y->dtype, x->data, x->dtype, w->data, w->dtype, PTR(bias), DT(bias),
                               x->shape[0], x->shape[1], x->shape[2], y->shape[1], y->shape[2], (int)w->shape[2],
                               stride, padding, impl_of(b)->stream),
       "conv_transpose1d");
}

void h3_cuda_upsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio) {
    ok(b, h3k_upsample1d(y->data, y->dtype, x->data, x->dtype, filter->data, filter->dtype,
                         (int)h3_tensor_numel(filter), ratio, h3_tensor_rows(x), h3_tensor_cols(x),
                         impl_of(b)->stream),
       "upsample1d");
}

void h3_cuda_downsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio) {
    ok(b, h3k_downsample1d(y->data, y->dtype, x->data, x->dtype, filter->data, filter->dtype,
                           (int)h3_tensor_numel(filter), ratio, h3_tensor_rows(x), h3_tensor_cols(x),
                           h3_tensor_cols(y), impl_of(b)->stream),
       "downsample1d");
}

void h3_cuda_snake_beta(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                            const h3_tensor *beta) {
    ok(b, h3k_snake_beta(y->data, y->dtype, x->data, x->dtype, alpha->data, alpha->dtype, beta->data, beta->dtype,
                         x->shape[0], x->shape[1], x->shape[2], impl_of(b)->stream),
       "snake_beta");
}

/* y may alias x: the fused kernel reads neighbours of each output, so an
 * in-place call goes through scratch. */
size_t h3_cuda_snake_scratch(const h3_tensor *y, const h3_tensor *x) {
    return y->data == x->data ? h3_tensor_nbytes(y) : 0;
}

void h3_cuda_snake_beta_antialiased(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                                        const h3_tensor *beta, const h3_tensor *up_filter,
                                        const h3_tensor *down_filter, int ratio) {
    cuda_impl *c = impl_of(b);
    void *out = y->data;
    size_t bytes = h3_tensor_nbytes(y);
    if (h3_cuda_snake_scratch(y, x) && !(out = h3_cuda_scratch(b, bytes))) return;
    if (!ok(b, h3k_snake_beta_antialiased(out, y->dtype, x->data, x->dtype, alpha->data, alpha->dtype, beta->data,
                                          beta->dtype, up_filter->data, up_filter->dtype,
                                          (int)h3_tensor_numel(up_filter), down_filter->data, down_filter->dtype,
                                          (int)h3_tensor_numel(down_filter), ratio, x->shape[0], x->shape[1],
                                          x->shape[2], c->stream),
            "snake_beta_antialiased"))
        return;
    if (out != y->data)
        ok(b, cudaMemcpyAsync(y->data, out, bytes, cudaMemcpyDeviceToDevice, c->stream), "snake_beta_antialiased");
}

void h3_cuda_clamp(h3_backend *b, h3_tensor *y, const h3_tensor *x, float lo, float hi) {
    ok(b, h3k_clamp(y->data, y->dtype, x->data, x->dtype, h3_tensor_numel(y), lo, hi, impl_of(b)->flag,
                    impl_of(b)->stream),
       "clamp");
}
