/* h3_cpu_audio_vae.c - the audio VAE's 1-D signal ops on the CPU backend
 * (backend/h3_ops_audio_vae.h). */
#include "backend/cpu/h3_backend_cpu_impl.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

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

void h3_cpu_conv1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                   int stride, int padding, int dilation, int groups) {
    if (!h3_cpu_need_f32(b, "conv1d", y) || !h3_cpu_need_f32(b, "conv1d", x) || !h3_cpu_need_f32(b, "conv1d", w) ||
        !h3_cpu_need_f32(b, "conv1d", bias))
        return;
    int64_t B = x->shape[0], Cin = x->shape[1], Lin = x->shape[2];
    int64_t Cout = y->shape[1], Lout = y->shape[2], K = w->shape[2];
    int64_t cin_g = Cin / groups, cout_g = Cout / groups, KK = cin_g * K;
    const float *X = x->data, *W = w->data, *bb = bias ? bias->data : NULL;
    float *Y = y->data;
    for (int64_t n = 0; n < B; n++) fill_rows(Y + n * Cout * Lout, Cout, Lout, bb);
    if (Lout == 0 || Cout == 0) return;
    int64_t chunk = col_chunk(KK, Lout);
    float *col = h3_cpu_scratch(b, (size_t)(KK * chunk));
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
void h3_cpu_conv_transpose1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *w,
                             const h3_tensor *bias, int stride, int padding) {
    if (!h3_cpu_need_f32(b, "conv_transpose1d", y) || !h3_cpu_need_f32(b, "conv_transpose1d", x) ||
        !h3_cpu_need_f32(b, "conv_transpose1d", w) || !h3_cpu_need_f32(b, "conv_transpose1d", bias))
        return;
    int64_t B = x->shape[0], Cin = x->shape[1], Lin = x->shape[2];
    int64_t Cout = y->shape[1], Lout = y->shape[2], K = w->shape[2], CK = Cout * K;
    const float *X = x->data, *W = w->data, *bb = bias ? bias->data : NULL;
    float *Y = y->data;
    for (int64_t n = 0; n < B; n++) fill_rows(Y + n * Cout * Lout, Cout, Lout, bb);
    int64_t chunk = col_chunk(CK, Lin);
    float *col = h3_cpu_scratch(b, (size_t)(CK * chunk));
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

void h3_cpu_upsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio) {
    if (!h3_cpu_need_f32(b, "upsample1d", y) || !h3_cpu_need_f32(b, "upsample1d", x) || !h3_cpu_need_f32(b, "upsample1d", filter)) return;
    int64_t rows = h3_tensor_rows(x), L = h3_tensor_cols(x);
    int K = (int)h3_tensor_numel(filter);
    int64_t M = phase_margin(K, ratio), row = L + 2 * M;
    float *xz = h3_cpu_scratch(b, (size_t)(L + 4 * K + ratio * row));
    if (!xz) return;
    float *ph = xz + L + 4 * K;
    for (int64_t r = 0; r < rows; r++) {
        upsample_phases(ph, row, M, (const float *)x->data + r * L, L, filter->data, K, ratio, xz);
        float *yr = (float *)y->data + r * L * ratio;
        for (int c = 0; c < ratio; c++)
            for (int64_t t = 0; t < L; t++) yr[t * ratio + c] = ph[c * row + M + t];
    }
}

void h3_cpu_downsample1d(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *filter, int ratio) {
    if (!h3_cpu_need_f32(b, "downsample1d", y) || !h3_cpu_need_f32(b, "downsample1d", x) || !h3_cpu_need_f32(b, "downsample1d", filter))
        return;
    int64_t rows = h3_tensor_rows(x), L = h3_tensor_cols(x), Lout = h3_tensor_cols(y);
    int K = (int)h3_tensor_numel(filter);
    int64_t M = phase_margin(K, ratio), row = Lout + 2 * M;
    float *ph = h3_cpu_scratch(b, (size_t)(ratio * row));
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

void h3_cpu_snake_beta(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                       const h3_tensor *beta) {
    if (!h3_cpu_need_f32(b, "snake_beta", y) || !h3_cpu_need_f32(b, "snake_beta", x) || !h3_cpu_need_f32(b, "snake_beta", alpha) ||
        !h3_cpu_need_f32(b, "snake_beta", beta))
        return;
    int64_t B = x->shape[0], C = x->shape[1], L = x->shape[2];
    const float *A = alpha->data, *Bt = beta->data;
    for (int64_t r = 0; r < B * C; r++) {
        float *yr = (float *)y->data + r * L;
        if (yr != (const float *)x->data + r * L) memcpy(yr, (const float *)x->data + r * L, (size_t)L * sizeof(float));
        snake_row(yr, L, expf(A[r % C]), 1.0f / (expf(Bt[r % C]) + 1e-9f));
    }
}

/* Snake1d: SnakeBeta's row with a = alpha, inv = 1/(alpha + 1e-9), both
 * linear-scale, as DAC's snake computes them in float32. */
void h3_cpu_snake(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha) {
    if (!h3_cpu_need_f32(b, "snake", y) || !h3_cpu_need_f32(b, "snake", x) || !h3_cpu_need_f32(b, "snake", alpha))
        return;
    int64_t B = x->shape[0], C = x->shape[1], L = x->shape[2];
    const float *A = alpha->data;
    for (int64_t r = 0; r < B * C; r++) {
        float *yr = (float *)y->data + r * L;
        if (yr != (const float *)x->data + r * L) memcpy(yr, (const float *)x->data + r * L, (size_t)L * sizeof(float));
        snake_row(yr, L, A[r % C], 1.0f / (A[r % C] + 1e-9f));
    }
}

/* Per row: upsample into phase rows, SnakeBeta on them (elementwise, so the
 * phase order does not matter), fill the margins, downsample. One row of
 * scratch, so y may alias x. */
void h3_cpu_snake_beta_antialiased(h3_backend *b, h3_tensor *y, const h3_tensor *x, const h3_tensor *alpha,
                                   const h3_tensor *beta, const h3_tensor *up_filter,
                                   const h3_tensor *down_filter, int ratio) {
    if (!h3_cpu_need_f32(b, "snake_beta_antialiased", y) || !h3_cpu_need_f32(b, "snake_beta_antialiased", x) ||
        !h3_cpu_need_f32(b, "snake_beta_antialiased", alpha) || !h3_cpu_need_f32(b, "snake_beta_antialiased", beta) ||
        !h3_cpu_need_f32(b, "snake_beta_antialiased", up_filter) || !h3_cpu_need_f32(b, "snake_beta_antialiased", down_filter))
        return;
    int64_t B = x->shape[0], C = x->shape[1], L = x->shape[2];
    int Ku = (int)h3_tensor_numel(up_filter), Kd = (int)h3_tensor_numel(down_filter);
    int64_t M = phase_margin(Ku > Kd ? Ku : Kd, ratio), row = L + 2 * M;
    float *xz = h3_cpu_scratch(b, (size_t)(L + 4 * Ku + ratio * row));
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

/* The last op before samples become media: every output is finite and in
 * [lo, hi] whatever came in. A NaN becomes 0 (silence, not a full-scale
 * click), and NaN or Inf inputs are the backend's H3_ERR_NONFINITE, so the
 * clip that lost its values ends as an error instead of as samples. */
void h3_cpu_clamp(h3_backend *b, h3_tensor *y, const h3_tensor *x, float lo, float hi) {
    if (!h3_cpu_need_f32(b, "clamp", y) || !h3_cpu_need_f32(b, "clamp", x)) return;
    int64_t n = h3_tensor_numel(y), bad = 0;
    const float *X = x->data;
    float *Y = y->data;
    for (int64_t i = 0; i < n; i++) {
        float v = X[i];
        bad += !isfinite(v);
        Y[i] = v != v ? 0.0f : v < lo ? lo : v > hi ? hi : v;
    }
    if (bad)
        h3_backend_fail(b, H3_ERR_NONFINITE, "clamp: %lld of %lld values are NaN or Inf", (long long)bad, (long long)n);
}
