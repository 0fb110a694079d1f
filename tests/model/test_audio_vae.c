/* test_audio_vae.c - the audio VAE decoder against the tiny-h3 golden, the
 * 1-D ops it adds to the backend against direct formulas and hand-checked
 * values, config parsing of the real release, and error paths. */
#include <glib.h>
#include <glib/gstdio.h>
#include <stdint.h>
#include <time.h>

#include "model/h3_audio_vae.h"
#include "backend/h3_backend.h"
#include "base/h3_safetensors.h"
#include "h3.h"
#include "h3_test.h"

/* ---- helpers ------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
}

static void fill_random(float *v, size_t n) {
    for (size_t i = 0; i < n; i++) v[i] = frand();
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || d != d) m = d;
    }
    return m;
}

/* A backend tensor of the given shape filled from host data (arena). */
static h3_tensor upload(h3_backend *b, int ndim, const int64_t *shape, const float *host) {
    h3_tensor t = h3_new(b, H3_F32, ndim, shape);
    if (t.data && host) h3_tensor_upload_f32(b, &t, host, NULL);
    return t;
}

static h3_tensor upload3(h3_backend *b, int64_t d0, int64_t d1, int64_t d2, const float *host) {
    int64_t s[3] = {d0, d1, d2};
    return upload(b, 3, s, host);
}

static h3_tensor upload1(h3_backend *b, int64_t n, const float *host) { return upload(b, 1, &n, host); }

static float *download(h3_backend *b, const h3_tensor *t) {
    float *h = malloc((size_t)h3_tensor_numel(t) * sizeof(float));
    h3_tensor_download_f32(b, t, h, NULL);
    return h;
}

static int64_t clampi(int64_t i, int64_t lo, int64_t hi) { return i < lo ? lo : i > hi ? hi : i; }

/* ---- reference formulas, written straight from the PyTorch definitions ---------- */

static void ref_conv1d(float *y, const float *x, const float *w, const float *bias, int B, int Cin, int Lin, int Cout,
                       int K, int stride, int pad, int dil, int groups, int Lout) {
    int cig = Cin / groups, cog = Cout / groups;
    for (int n = 0; n < B; n++)
        for (int co = 0; co < Cout; co++)
            for (int t = 0; t < Lout; t++) {
                double s = bias ? bias[co] : 0.0;
                int g = co / cog;
                for (int ci = 0; ci < cig; ci++)
                    for (int k = 0; k < K; k++) {
                        int pos = t * stride + k * dil - pad;
                        if (pos >= 0 && pos < Lin)
                            s += (double)w[((size_t)co * cig + ci) * K + k] *
                                 x[((size_t)n * Cin + g * cig + ci) * Lin + pos];
                    }
                y[((size_t)n * Cout + co) * Lout + t] = (float)s;
            }
}

static void ref_conv_transpose1d(float *y, const float *x, const float *w, const float *bias, int B, int Cin, int Lin,
                                 int Cout, int K, int stride, int pad, int Lout) {
    double *acc = calloc((size_t)B * Cout * Lout, sizeof(double));
    for (int n = 0; n < B; n++)
        for (int ci = 0; ci < Cin; ci++)
            for (int m = 0; m < Lin; m++)
                for (int co = 0; co < Cout; co++)
                    for (int k = 0; k < K; k++) {
                        int pos = m * stride - pad + k;
                        if (pos >= 0 && pos < Lout)
                            acc[((size_t)n * Cout + co) * Lout + pos] +=
                                (double)x[((size_t)n * Cin + ci) * Lin + m] * w[((size_t)ci * Cout + co) * K + k];
                    }
    for (int n = 0; n < B; n++)
        for (int co = 0; co < Cout; co++)
            for (int t = 0; t < Lout; t++)
                y[((size_t)n * Cout + co) * Lout + t] =
                    (float)(acc[((size_t)n * Cout + co) * Lout + t] + (bias ? bias[co] : 0.0));
    free(acc);
}

/* BigVGAN UpSample1d literally: replicate pad, full transposed conv, ×ratio,
 * crop [pad_left : −pad_right]. */
static void ref_upsample(float *y, const float *x, int L, const float *f, int K, int r) {
    int p = K / r - 1, pl = p * r + (K - r) / 2, Lp = L + 2 * p, Lfull = (Lp - 1) * r + K;
    double *full = calloc((size_t)Lfull, sizeof(double));
    for (int m = 0; m < Lp; m++)
        for (int k = 0; k < K; k++) full[m * r + k] += (double)x[clampi(m - p, 0, L - 1)] * f[k];
    for (int n = 0; n < L * r; n++) y[n] = (float)(r * full[n + pl]);
    free(full);
}

/* LowPassFilter1d: replicate pad (K/2 − even, K/2), strided cross-correlation. */
static int ref_downsample(float *y, const float *x, int L, const float *f, int K, int r) {
    int pl = K / 2 - (K % 2 == 0), pr = K / 2, Lp = L + pl + pr, Lout = (Lp - K) / r + 1;
    for (int n = 0; n < Lout; n++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += (double)f[k] * x[clampi(n * r + k - pl, 0, L - 1)];
        y[n] = (float)s;
    }
    return Lout;
}

/* The 12-tap Kaiser-sinc filter of every activation (docs/spec/h3-vaes.md §4.3). */
static const float kaiser12[12] = {0.0020289647f, 0.0093894657f, -0.0255434588f, -0.0576573834f,
                                   0.1285725832f, 0.4432097971f, 0.4432097971f,  0.1285725832f,
                                   -0.0576573834f, -0.0255434588f, 0.0093894657f, 0.0020289647f};

/* ---- op tests ----------------------------------------------------------------------- */

static void test_conv1d_hand(h3_backend *b) {
    size_t mark = h3_arena_mark(b);
    const float xv[4] = {1, 2, 3, 4}, wv[3] = {1, 0, -1};
    h3_tensor x = upload3(b, 1, 1, 4, xv), w = upload3(b, 1, 1, 3, wv);
    h3_tensor y = upload3(b, 1, 1, 4, NULL);
    /* y[t] = x[t−1] − x[t+1] with zeros outside */
    h3_op_conv1d(b, &y, &x, &w, NULL, 1, 1, 1, 1);
    float *h = download(b, &y);
    const float want1[4] = {-2, -2, -2, 3};
    CHECK(max_abs_diff(h, want1, 4) == 0, "conv1d k3 p1: %g %g %g %g", h[0], h[1], h[2], h[3]);
    free(h);
    /* dilation 2, padding 2: y[t] = x[t−2] − x[t+2], plus bias 0.5 */
    const float bv[1] = {0.5f};
    h3_tensor bias = upload1(b, 1, bv);
    h3_op_conv1d(b, &y, &x, &w, &bias, 1, 2, 2, 1);
    h = download(b, &y);
    const float want2[4] = {-2.5f, -3.5f, 1.5f, 2.5f};
    CHECK(max_abs_diff(h, want2, 4) == 0, "conv1d k3 d2 p2: %g %g %g %g", h[0], h[1], h[2], h[3]);
    free(h);
    /* stride 2, padding 1: positions −1,1 | 1,3 -> y = x[t·2−1] − x[t·2+1] */
    h3_tensor y2 = upload3(b, 1, 1, 2, NULL);
    h3_op_conv1d(b, &y2, &x, &w, NULL, 2, 1, 1, 1);
    h = download(b, &y2);
    const float want3[2] = {-2, -2};
    CHECK(max_abs_diff(h, want3, 2) == 0, "conv1d stride 2: %g %g", h[0], h[1]);
    free(h);
    CHECK(h3_backend_check(b, NULL) == H3_OK, "conv1d hand cases left an error");
    h3_arena_reset(b, mark);
}

/* Random shapes against the direct formula; the long case crosses the
 * im2col chunk boundary. */
static void conv1d_case(h3_backend *b, int B, int Cin, int Lin, int Cout, int K, int stride, int pad, int dil,
                        int groups, int with_bias) {
    size_t mark = h3_arena_mark(b);
    int Lout = (Lin + 2 * pad - dil * (K - 1) - 1) / stride + 1;
    size_t nx = (size_t)B * Cin * Lin, nw = (size_t)Cout * (Cin / groups) * K, ny = (size_t)B * Cout * Lout;
    float *xv = malloc(nx * 4), *wv = malloc(nw * 4), *bv = malloc((size_t)Cout * 4), *want = malloc(ny * 4);
    fill_random(xv, nx), fill_random(wv, nw), fill_random(bv, (size_t)Cout);
    ref_conv1d(want, xv, wv, with_bias ? bv : NULL, B, Cin, Lin, Cout, K, stride, pad, dil, groups, Lout);
    h3_tensor x = upload3(b, B, Cin, Lin, xv), w = upload3(b, Cout, Cin / groups, K, wv), bias = upload1(b, Cout, bv);
    h3_tensor y = upload3(b, B, Cout, Lout, NULL);
    h3_op_conv1d(b, &y, &x, &w, with_bias ? &bias : NULL, stride, pad, dil, groups);
    float *got = download(b, &y);
    double e = h3_test_rel_l2(got, want, ny);
    CHECK(h3_backend_check(b, NULL) == H3_OK && e < 1e-6,
          "conv1d B%d Cin%d L%d Cout%d K%d s%d p%d d%d g%d: rel L2 %.3g", B, Cin, Lin, Cout, K, stride, pad, dil,
          groups, e);
    free(xv), free(wv), free(bv), free(want), free(got);
    h3_arena_reset(b, mark);
}

static void test_conv_transpose1d_hand(h3_backend *b) {
    size_t mark = h3_arena_mark(b);
    /* full output [1,10,102,20,203,30,300]; padding 1 crops one sample per
     * side, so y = [10,102,20,203,30] + bias 0.5 */
    const float xv[3] = {1, 2, 3}, wv[3] = {1, 10, 100}, bv[1] = {0.5f};
    h3_tensor x = upload3(b, 1, 1, 3, xv), w = upload3(b, 1, 1, 3, wv), bias = upload1(b, 1, bv);
    h3_tensor y = upload3(b, 1, 1, 5, NULL);
    h3_op_conv_transpose1d(b, &y, &x, &w, &bias, 2, 1);
    float *h = download(b, &y);
    const float want[5] = {10.5f, 102.5f, 20.5f, 203.5f, 30.5f};
    CHECK(max_abs_diff(h, want, 5) == 0, "conv_transpose1d: %g %g %g %g %g", h[0], h[1], h[2], h[3], h[4]);
    free(h);
    /* two input channels, two output channels: w[ci, co, k] */
    const float x2[4] = {1, 2, /* ci 1: */ 3, 4};
    const float w2[8] = {1, 0, 0, 1, /* ci 1: */ 2, 0, 0, -1}; /* K 2, stride 2, padding 0 */
    h3_tensor xx = upload3(b, 1, 2, 2, x2), ww = upload3(b, 2, 2, 2, w2), yy = upload3(b, 1, 2, 4, NULL);
    h3_op_conv_transpose1d(b, &yy, &xx, &ww, NULL, 2, 0);
    h = download(b, &yy);
    /* co 0: out[2m] = x0[m]·1 + x1[m]·2 -> [7, 0, 10, 0]; co 1: out[2m+1] = x0[m] − x1[m] -> [0, −2, 0, −2] */
    const float want2[8] = {7, 0, 10, 0, 0, -2, 0, -2};
    CHECK(max_abs_diff(h, want2, 8) == 0, "conv_transpose1d 2x2: %g %g %g %g | %g %g %g %g", h[0], h[1], h[2], h[3],
          h[4], h[5], h[6], h[7]);
    free(h);
    CHECK(h3_backend_check(b, NULL) == H3_OK, "conv_transpose1d hand cases left an error");
    h3_arena_reset(b, mark);
}

static void conv_transpose1d_case(h3_backend *b, int B, int Cin, int Lin, int Cout, int K, int stride, int pad) {
    size_t mark = h3_arena_mark(b);
    int Lout = (Lin - 1) * stride - 2 * pad + K;
    size_t nx = (size_t)B * Cin * Lin, nw = (size_t)Cin * Cout * K, ny = (size_t)B * Cout * Lout;
    float *xv = malloc(nx * 4), *wv = malloc(nw * 4), *bv = malloc((size_t)Cout * 4), *want = malloc(ny * 4);
    fill_random(xv, nx), fill_random(wv, nw), fill_random(bv, (size_t)Cout);
    ref_conv_transpose1d(want, xv, wv, bv, B, Cin, Lin, Cout, K, stride, pad, Lout);
    h3_tensor x = upload3(b, B, Cin, Lin, xv), w = upload3(b, Cin, Cout, K, wv), bias = upload1(b, Cout, bv);
    h3_tensor y = upload3(b, B, Cout, Lout, NULL);
    h3_op_conv_transpose1d(b, &y, &x, &w, &bias, stride, pad);
    float *got = download(b, &y);
    double e = h3_test_rel_l2(got, want, ny);
    CHECK(h3_backend_check(b, NULL) == H3_OK && e < 1e-6,
          "conv_transpose1d B%d Cin%d L%d Cout%d K%d s%d p%d: rel L2 %.3g", B, Cin, Lin, Cout, K, stride, pad, e);
    free(xv), free(wv), free(bv), free(want), free(got);
    h3_arena_reset(b, mark);
}

static void test_resampling(h3_backend *b) {
    size_t mark = h3_arena_mark(b);
    h3_tensor kf = upload1(b, 12, kaiser12);
    /* lengths and values against the literal BigVGAN formulas */
    const int lengths[] = {1, 2, 5, 7, 40};
    for (size_t i = 0; i < G_N_ELEMENTS(lengths); i++) {
        int L = lengths[i], rows = 3;
        float *xv = malloc((size_t)rows * L * 4), *want = malloc((size_t)rows * 2 * L * 4);
        fill_random(xv, (size_t)rows * L);
        h3_tensor x = upload3(b, 1, rows, L, xv), y = upload3(b, 1, rows, 2 * L, NULL);
        h3_op_upsample1d(b, &y, &x, &kf, 2);
        for (int r = 0; r < rows; r++) ref_upsample(want + r * 2 * L, xv + r * L, L, kaiser12, 12, 2);
        float *got = download(b, &y);
        CHECK(y.shape[2] == 2 * L && max_abs_diff(got, want, (size_t)rows * 2 * L) < 1e-6,
              "upsample1d L=%d: max |diff| %.3g", L, max_abs_diff(got, want, (size_t)rows * 2 * L));
        free(got);
        /* downsample the (even) upsampled signal and an odd-length one */
        for (int odd = 0; odd < 2; odd++) {
            int Ld = 2 * L + odd, Lo = (Ld + 1) / 2;
            float *xd = malloc((size_t)rows * Ld * 4), *wd = malloc((size_t)rows * Lo * 4);
            fill_random(xd, (size_t)rows * Ld);
            h3_tensor xt = upload3(b, 1, rows, Ld, xd), yt = upload3(b, 1, rows, Lo, NULL);
            h3_op_downsample1d(b, &yt, &xt, &kf, 2);
            int ref_len = 0;
            for (int r = 0; r < rows; r++) ref_len = ref_downsample(wd + r * Lo, xd + r * Ld, Ld, kaiser12, 12, 2);
            got = download(b, &yt);
            CHECK(ref_len == Lo && max_abs_diff(got, wd, (size_t)rows * Lo) < 1e-6,
                  "downsample1d L=%d: reference length %d, ours %d, max |diff| %.3g", Ld, ref_len, Lo,
                  max_abs_diff(got, wd, (size_t)rows * Lo));
            free(got), free(xd), free(wd);
        }
        free(xv), free(want);
    }
    /* hand checks: a flat 12-tap filter keeps a constant (2·6·(1/12) = 1);
     * a unit tap at k = 5 (the left pad) makes the downsampler pick x[2n]. */
    float flat[12], delta[12] = {0};
    for (int k = 0; k < 12; k++) flat[k] = 1.0f / 12.0f;
    delta[5] = 1.0f;
    h3_tensor ff = upload1(b, 12, flat), fd = upload1(b, 12, delta);
    const float c4[4] = {3, 3, 3, 3}, ramp[7] = {0, 1, 2, 3, 4, 5, 6};
    h3_tensor x = upload3(b, 1, 1, 4, c4), y = upload3(b, 1, 1, 8, NULL);
    h3_op_upsample1d(b, &y, &x, &ff, 2);
    float *got = download(b, &y);
    const float three[8] = {3, 3, 3, 3, 3, 3, 3, 3};
    CHECK(max_abs_diff(got, three, 8) < 1e-6, "upsample1d of a constant: %g %g ... %g", got[0], got[1], got[7]);
    free(got);
    h3_tensor xr = upload3(b, 1, 1, 7, ramp), yr = upload3(b, 1, 1, 4, NULL);
    h3_op_downsample1d(b, &yr, &xr, &fd, 2);
    got = download(b, &yr);
    const float picked[4] = {0, 2, 4, 6};
    CHECK(max_abs_diff(got, picked, 4) == 0, "downsample1d decimation: %g %g %g %g", got[0], got[1], got[2], got[3]);
    free(got);
    CHECK(h3_backend_check(b, NULL) == H3_OK, "resampling left an error");
    h3_arena_reset(b, mark);
}

static void test_snake(h3_backend *b) {
    size_t mark = h3_arena_mark(b);
    int B = 2, C = 3, L = 9;
    size_t n = (size_t)B * C * L;
    float *xv = malloc(n * 4), *want = malloc(n * 4);
    fill_random(xv, n);
    for (size_t i = 0; i < n; i++) xv[i] *= 3.0f;
    /* log-space parameters: e^alpha = 2, 0.5, 1; e^beta = 0.5, 2, 1 */
    const float av[3] = {logf(2.0f), logf(0.5f), 0.0f}, bv[3] = {logf(0.5f), logf(2.0f), 0.0f};
    for (int r = 0; r < B * C; r++)
        for (int t = 0; t < L; t++) {
            double a = exp((double)av[r % C]), be = exp((double)bv[r % C]), v = xv[r * L + t];
            want[r * L + t] = (float)(v + sin(a * v) * sin(a * v) / (be + 1e-9));
        }
    h3_tensor x = upload3(b, B, C, L, xv), alpha = upload1(b, C, av), beta = upload1(b, C, bv);
    h3_tensor y = upload3(b, B, C, L, NULL);
    h3_op_snake_beta(b, &y, &x, &alpha, &beta);
    float *got = download(b, &y);
    CHECK(max_abs_diff(got, want, n) < 2e-6, "snake_beta: max |diff| %.3g", max_abs_diff(got, want, n));
    free(got);

    /* fused op = upsample -> snake -> downsample, also in place */
    h3_tensor kf = upload1(b, 12, kaiser12);
    h3_tensor up = upload3(b, B, C, 2 * L, NULL), act = upload3(b, B, C, 2 * L, NULL), ref = upload3(b, B, C, L, NULL);
    h3_op_upsample1d(b, &up, &x, &kf, 2);
    h3_op_snake_beta(b, &act, &up, &alpha, &beta);
    h3_op_downsample1d(b, &ref, &act, &kf, 2);
    h3_op_snake_beta_antialiased(b, &y, &x, &alpha, &beta, &kf, &kf, 2);
    float *r1 = download(b, &ref), *r2 = download(b, &y);
    CHECK(max_abs_diff(r1, r2, n) < 1e-6, "snake_beta_antialiased vs composition: %.3g", max_abs_diff(r1, r2, n));
    h3_op_snake_beta_antialiased(b, &x, &x, &alpha, &beta, &kf, &kf, 2);
    float *r3 = download(b, &x);
    CHECK(max_abs_diff(r3, r2, n) == 0, "snake_beta_antialiased in place differs: %.3g", max_abs_diff(r3, r2, n));
    free(r1), free(r2), free(r3), free(xv), free(want);

    const float cv[6] = {-2.0f, -1.0f, 0.5f, 1.0f, 3.0f, NAN};
    h3_tensor cx = upload1(b, 6, cv), cy = upload1(b, 6, NULL);
    h3_op_clamp(b, &cy, &cx, -1.0f, 1.0f);
    /* The samples stay finite (the NaN becomes 0) and the NaN is the
     * backend's error, so a clip that lost its values is not emitted. */
    CHECK(h3_backend_check(b, NULL) == H3_ERR_NONFINITE, "clamp let a NaN pass without an error");
    h3_backend_clear_error(b);
    got = download(b, &cy);
    CHECK(got[0] == -1 && got[1] == -1 && got[2] == 0.5f && got[3] == 1 && got[4] == 1 && got[5] == 0,
          "clamp: %g %g %g %g %g %g", got[0], got[1], got[2], got[3], got[4], got[5]);
    free(got);
    CHECK(h3_backend_check(b, NULL) == H3_OK, "snake tests left an error");
    h3_arena_reset(b, mark);
}

/* Shape mismatches set the sticky error (on a throwaway backend). */
static void test_op_shape_errors(void) {
    struct {
        const char *what;
        int which;
    } cases[] = {{"conv1d y length", 0}, {"conv_transpose1d y length", 1}, {"downsample1d y length", 2},
                 {"snake alpha size", 3}, {"conv1d groups", 4}};
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        h3_backend *b = NULL;
        if (h3_backend_cpu_create(1, &b, NULL) != H3_OK) { CHECK(0, "cpu backend"); return; }
        h3_tensor x = upload3(b, 1, 2, 8, NULL), w = upload3(b, 2, 2, 3, NULL), f = upload1(b, 12, kaiser12);
        h3_tensor a3 = upload1(b, 3, NULL), y = upload3(b, 1, 2, 7, NULL);
        switch (cases[i].which) {
        case 0: h3_op_conv1d(b, &y, &x, &w, NULL, 1, 1, 1, 1); break;           /* want length 8 */
        case 1: h3_op_conv_transpose1d(b, &y, &x, &w, NULL, 2, 0); break;       /* want 17 */
        case 2: h3_op_downsample1d(b, &y, &x, &f, 2); break;                    /* want 4 */
        case 3: h3_op_snake_beta(b, &x, &x, &a3, &a3); break;                   /* 2 channels */
        case 4: h3_op_conv1d(b, &y, &x, &w, NULL, 1, 0, 1, 2); break;           /* w must be [2,1,3] */
        }
        h3_status st = {0};
        h3_status_code rc = h3_backend_check(b, &st);
        CHECK(rc == H3_ERR_INTERNAL && strlen(st.message) > 0, "%s: rc %d '%s'", cases[i].what, rc, st.message);
        h3_backend_destroy(b);
    }
}

/* ---- config ------------------------------------------------------------------------- */

static void test_release_configs(void) {
    const char *dirs[2] = {h3_test_data("official/audio_vae"), h3_test_data("official/FL2VA/audio_vae")};
    h3_audio_vae_config cfg[2];
    for (int d = 0; d < 2; d++) {
        h3_status st = {0};
        h3_status_code rc = h3_audio_vae_config_load(dirs[d], &cfg[d], &st);
        CHECK(rc == H3_OK, "%s: %s", dirs[d], st.message);
        if (rc != H3_OK) return;
        const h3_audio_vae_config *c = &cfg[d];
        static const int rates[7] = {5, 5, 2, 2, 2, 2, 2}, kernels[7] = {9, 9, 4, 4, 4, 4, 4};
        int ok = c->n_stages == 7 && c->n_kernels == 3;
        for (int s = 0; ok && s < 7; s++) ok = c->rates[s] == rates[s] && c->kernel_sizes[s] == kernels[s];
        for (int j = 0; ok && j < 3; j++)
            ok = c->resblock_kernels[j] == 3 + 4 * j && c->n_dilations[j] == 3 && c->dilations[j][0] == 1 &&
                 c->dilations[j][1] == 3 && c->dilations[j][2] == 5;
        CHECK(ok, "%s: BigVGAN tables differ from the release", dirs[d]);
        CHECK(c->sample_rate == 32000 && c->hop == 800, "%s: sample rate %d, hop %d", dirs[d], c->sample_rate, c->hop);
        CHECK(c->latent_channels == 32 && c->latent_dim == 2048 && c->decoder_dim == 1024,
              "%s: latent %d/%d, decoder_dim %d", dirs[d], c->latent_channels, c->latent_dim, c->decoder_dim);
        CHECK(c->latents_mean[0] == -0.020211687488382354 && c->latents_std[31] == 1.5613768203168363,
              "%s: latent statistics %.17g %.17g", dirs[d], c->latents_mean[0], c->latents_std[31]);
    }
    CHECK(memcmp(cfg[0].latents_mean, cfg[1].latents_mean, sizeof cfg[0].latents_mean) == 0 &&
              memcmp(cfg[0].latents_std, cfg[1].latents_std, sizeof cfg[0].latents_std) == 0,
          "the two layouts disagree on the latent statistics");
    /* The release directories carry no weights: loading must say so. */
    h3_backend *b = NULL;
    h3_backend_cpu_create(1, &b, NULL);
    h3_audio_vae *vae = (h3_audio_vae *)1;
    h3_status st = {0};
    h3_status_code rc = h3_audio_vae_load(b, dirs[0], &vae, &st);
    CHECK(rc == H3_ERR_NOT_FOUND && vae == NULL, "weightless dir: rc %d '%s'", rc, st.message);
    h3_backend_destroy(b);
}

/* ---- a copy of the tiny model with one tensor altered ------------------------------- */

/* Writes every tensor of src to path; `target` gets new_shape (same numel) or
 * is dropped when new_shape is NULL. */
static int write_altered(const char *src_path, const char *path, const char *target, const int64_t *new_shape,
                         int new_ndim) {
    h3_st_file *src = NULL;
    if (h3_st_open(src_path, &src, NULL) != H3_OK) return 0;
    GString *hdr = g_string_new("{");
    GByteArray *data = g_byte_array_new();
    int first = 1;
    for (size_t i = 0; i < h3_st_count(src); i++) {
        const h3_st_tensor *t = h3_st_at(src, i);
        int is_target = strcmp(t->name, target) == 0;
        if (is_target && !new_shape) continue;
        const int64_t *shape = is_target ? new_shape : t->shape;
        int ndim = is_target ? new_ndim : t->ndim;
        g_string_append_printf(hdr, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", first ? "" : ",", t->name,
                               h3_st_dtype_name(t->dtype));
        for (int d = 0; d < ndim; d++) g_string_append_printf(hdr, "%s%lld", d ? "," : "", (long long)shape[d]);
        g_string_append_printf(hdr, "],\"data_offsets\":[%u,%zu]}", data->len, (size_t)data->len + t->nbytes);
        g_byte_array_append(data, t->data, (guint)t->nbytes);
        first = 0;
    }
    g_string_append(hdr, "}");
    while (hdr->len % 8) g_string_append_c(hdr, ' ');
    uint64_t n = hdr->len;
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(n >> (8 * i));
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(le, 1, 8, f) == 8 && fwrite(hdr->str, 1, hdr->len, f) == hdr->len &&
             fwrite(data->data, 1, data->len, f) == data->len;
    if (f) ok = fclose(f) == 0 && ok;
    g_string_free(hdr, TRUE);
    g_byte_array_free(data, TRUE);
    h3_st_close(src);
    return ok;
}

static void altered_load(h3_backend *b, const char *target, const int64_t *new_shape, int new_ndim,
                         h3_status_code want) {
    const char *model = h3_test_data("models/tiny-h3/audio_vae");
    char *tmp = g_dir_make_tmp("h3_audio_vae_XXXXXX", NULL);
    char *cfg_src = g_build_filename(model, "config.json", NULL), *cfg_dst = g_build_filename(tmp, "config.json", NULL);
    char *st_src = g_build_filename(model, "diffusion_pytorch_model.safetensors", NULL);
    char *st_dst = g_build_filename(tmp, "diffusion_pytorch_model.safetensors", NULL);
    gchar *text = NULL;
    gsize len = 0;
    int ok = tmp && g_file_get_contents(cfg_src, &text, &len, NULL) &&
             g_file_set_contents(cfg_dst, text, (gssize)len, NULL) &&
             write_altered(st_src, st_dst, target, new_shape, new_ndim);
    CHECK(ok, "could not build the altered model in %s", tmp ? tmp : "(none)");
    if (ok) {
        h3_audio_vae *vae = NULL;
        h3_status st = {0};
        h3_status_code rc = h3_audio_vae_load(b, tmp, &vae, &st);
        CHECK(rc == want && vae == NULL && strstr(st.message, target) != NULL,
              "tensor %s %s: rc %d (want %d), '%s'", target, new_shape ? "reshaped" : "removed", rc, want, st.message);
        h3_audio_vae_free(vae);
    }
    g_free(text);
    if (tmp) {
        g_remove(cfg_dst);
        g_remove(st_dst);
        g_rmdir(tmp);
    }
    g_free(cfg_src), g_free(cfg_dst), g_free(st_src), g_free(st_dst), g_free(tmp);
}

/* ---- the golden ------------------------------------------------------------------------ */

static void test_golden(h3_backend *b) {
    h3_status st = {0};
    h3_audio_vae *vae = NULL;
    double t0 = now_s();
    h3_status_code rc = h3_audio_vae_load(b, h3_test_data("models/tiny-h3/audio_vae"), &vae, &st);
    CHECK(rc == H3_OK, "load: %s", st.message);
    if (rc != H3_OK) return;
    double t_load = now_s() - t0;
    CHECK(h3_audio_vae_hop(vae) == 40 && h3_audio_vae_sample_rate(vae) == 1600, "tiny hop %d, rate %d",
          h3_audio_vae_hop(vae), h3_audio_vae_sample_rate(vae));

    h3_st_file *g = NULL;
    rc = h3_st_open(h3_test_data("goldens/tiny-h3/audio_vae.safetensors"), &g, &st);
    CHECK(rc == H3_OK, "golden: %s", st.message);
    if (rc != H3_OK) { h3_audio_vae_free(vae); return; }
    float *zn = NULL, *zin = NULL, *want = NULL;
    const h3_st_tensor *tz, *tw;
    rc = h3_st_read_f32(g, "decode_latents_normalized", &zn, &tz, &st);
    if (rc == H3_OK) rc = h3_st_read_f32(g, "decode_input", &zin, NULL, &st);
    if (rc == H3_OK) rc = h3_st_read_f32(g, "decode_output", &want, &tw, &st);
    CHECK(rc == H3_OK, "golden tensors: %s", st.message);
    if (rc == H3_OK) {
        int Na = (int)tz->shape[2];
        size_t nz = (size_t)tz->numel, S = (size_t)Na * h3_audio_vae_hop(vae);
        CHECK(tz->shape[0] == 2 && tz->shape[1] == 32 && Na == 207 && tw->shape[2] == (int64_t)S,
              "golden geometry: latents [%lld,%lld,%d], output %lld samples", (long long)tz->shape[0],
              (long long)tz->shape[1], Na, (long long)tw->shape[2]);
        float *den = malloc(nz * 4);
        h3_audio_vae_denormalize(vae, zn, Na, den);
        double e_in = h3_test_rel_l2(den, zin, nz);
        printf("audio_vae decode_input (de-normalization): rel L2 %.3g, max |diff| %.3g\n", e_in,
               max_abs_diff(den, zin, nz));
        CHECK(e_in < 1e-6, "de-normalization: rel L2 %.3g", e_in);
        free(den);

        float *got = malloc(2 * S * 4);
        t0 = now_s();
        rc = h3_audio_vae_decode(vae, zn, Na, got, NULL, &st);
        double t_dec = now_s() - t0;
        CHECK(rc == H3_OK, "decode: %s", st.message);
        if (rc == H3_OK) {
            double e = h3_test_rel_l2(got, want, 2 * S);
            double e0 = h3_test_rel_l2(got, want, S), e1 = h3_test_rel_l2(got + S, want + S, S);
            printf("audio_vae decode_output [2,1,%zu]: rel L2 %.3g (ch0 %.3g, ch1 %.3g), max |diff| %.3g; "
                   "load %.3f s, decode %.3f s\n",
                   S, e, e0, e1, max_abs_diff(got, want, 2 * S), t_load, t_dec);
            CHECK(e < 1e-4, "decode_output rel L2 %.3g", e);
            float lo = 0, hi = 0;
            for (size_t i = 0; i < 2 * S; i++) lo = got[i] < lo ? got[i] : lo, hi = got[i] > hi ? got[i] : hi;
            CHECK(lo >= -1.0f && hi <= 1.0f, "output outside [-1, 1]: %g..%g", lo, hi);
        }
        /* a second decode reuses the arena and gives the same bits */
        float *again = malloc(2 * S * 4);
        rc = h3_audio_vae_decode(vae, zn, Na, again, NULL, &st);
        CHECK(rc == H3_OK && memcmp(again, got, 2 * S * 4) == 0, "second decode differs (rc %d)", rc);
        /* a shorter clip: the decoder is fully convolutional, lengths follow */
        rc = h3_audio_vae_decode(vae, zn, 1, again, NULL, &st);
        CHECK(rc == H3_OK, "decode of 1 latent: %s", st.message);

        /* cancellation and argument errors leave the VAE usable */
        volatile int flag = 1;
        rc = h3_audio_vae_decode(vae, zn, Na, again, &flag, &st);
        CHECK(rc == H3_ERR_CANCELLED, "cancel: rc %d", rc);
        rc = h3_audio_vae_decode(vae, zn, 0, again, NULL, &st);
        CHECK(rc == H3_ERR_INVALID_ARGUMENT, "n_latents 0: rc %d '%s'", rc, st.message);
        rc = h3_audio_vae_decode(vae, zn, -3, again, NULL, &st);
        CHECK(rc == H3_ERR_INVALID_ARGUMENT, "n_latents -3: rc %d '%s'", rc, st.message);
        rc = h3_audio_vae_decode(vae, NULL, Na, again, NULL, &st);
        CHECK(rc == H3_ERR_INVALID_ARGUMENT, "NULL latents: rc %d", rc);
        flag = 0;
        rc = h3_audio_vae_decode(vae, zn, Na, again, &flag, &st);
        CHECK(rc == H3_OK && memcmp(again, got, 2 * S * 4) == 0, "decode after errors differs (rc %d '%s')", rc,
              st.message);
        free(again);
        free(got);
    }
    free(zn), free(zin), free(want);
    h3_st_close(g);
    h3_audio_vae_free(vae);
}

/* ---- cancellation granularity ---------------------------------------------------------
 * A stop during the audio decode waits for one layer, not one AMP block:
 * on the embedded model's 32 kHz VAE one block of the last stage (the full
 * sample rate) is about a third of a 124-frame clip's decode (200 ms of
 * 570 ms of CPU here), one layer about 26 ms; the element's stop must stay
 * under 100 ms. The work done after the flag is set is measured in process
 * CPU time (the decode's threads), so a loaded machine does not change it.
 * With a poll per block the worst of these five stops took 137 ms (a
 * quarter of the decode), with a poll per layer 24 ms. */

static double process_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct cancel_job {
    h3_audio_vae *vae;
    const float *z;
    int n_latents;
    float *out;
    volatile int flag;
    int finished;
    h3_status_code rc;
    h3_status st;
    double cpu_end;
} cancel_job;

static gpointer decode_job(gpointer data) {
    cancel_job *j = data;
    j->rc = h3_audio_vae_decode(j->vae, j->z, j->n_latents, j->out, &j->flag, &j->st);
    j->cpu_end = process_cpu_s();
    g_atomic_int_set(&j->finished, 1);
    return NULL;
}

static void test_cancel_granularity(h3_backend *b) {
    const int Na = 207; /* 124 frames at 24 fps, 40 latents a second */
    h3_status st = {0};
    h3_audio_vae *vae = NULL;
    char *dir = g_build_filename(h3_default_model_dir(), "audio_vae", NULL);
    h3_status_code rc = h3_audio_vae_load(b, dir, &vae, &st);
    CHECK(rc == H3_OK, "load %s: %s", dir, st.message);
    g_free(dir);
    if (rc != H3_OK) return;
    size_t nz = (size_t)2 * 32 * Na, S = (size_t)Na * h3_audio_vae_hop(vae);
    float *z = malloc(nz * sizeof(float)), *out = malloc(2 * S * sizeof(float));
    fill_random(z, nz);
    double c0 = process_cpu_s();
    rc = h3_audio_vae_decode(vae, z, Na, out, NULL, &st);
    double whole = process_cpu_s() - c0, worst = 0;
    CHECK(rc == H3_OK, "decode: %s", st.message);
    for (int k = 1; k <= 5 && rc == H3_OK; k++) {
        cancel_job j = {vae, z, Na, out, 0, 0, H3_OK, {0}, 0};
        double start = process_cpu_s();
        GThread *t = g_thread_new("audio-decode", decode_job, &j);
        while (!g_atomic_int_get(&j.finished) && process_cpu_s() - start < whole * k / 6) g_usleep(100);
        double at_cancel = process_cpu_s();
        j.flag = 1;
        g_thread_join(t);
        double after = j.cpu_end - at_cancel;
        CHECK(j.rc == H3_ERR_CANCELLED, "stop %d: rc %d (%s)", k, j.rc, j.st.message);
        if (after > worst) worst = after;
    }
    printf("audio_vae: a 124-frame decode takes %.3f s of CPU; a stop takes at most %.3f s more (bound %.3f s)\n",
           whole, worst, whole / 10);
    CHECK(worst <= whole / 10, "a stop during the decode took %.3f s of CPU of a %.3f s decode (more than a tenth)",
          worst, whole);
    free(z);
    free(out);
    h3_audio_vae_free(vae);
}

int main(void) {
    h3_backend *b = NULL;
    h3_status st = {0};
    if (h3_backend_cpu_create(2, &b, &st) != H3_OK) {
        fprintf(stderr, "cpu backend: %s\n", st.message);
        return 1;
    }
    test_conv1d_hand(b);
    conv1d_case(b, 2, 3, 17, 4, 5, 1, 2, 1, 1, 1);
    conv1d_case(b, 2, 4, 23, 6, 3, 2, 3, 2, 2, 1);  /* stride, dilation, groups */
    conv1d_case(b, 1, 6, 9, 6, 3, 1, 1, 1, 6, 0);   /* depthwise */
    conv1d_case(b, 1, 64, 4000, 3, 11, 1, 25, 5, 1, 1); /* crosses the im2col chunk (2978 columns) */
    conv1d_case(b, 2, 5, 10, 2, 1, 1, 0, 1, 1, 0);  /* k1, like dec_in_proj */
    test_conv_transpose1d_hand(b);
    conv_transpose1d_case(b, 2, 3, 11, 4, 9, 5, 2); /* the (9,5) stage */
    conv_transpose1d_case(b, 2, 4, 13, 3, 4, 2, 1); /* the (4,2) stage */
    conv_transpose1d_case(b, 1, 4, 3000, 200, 9, 5, 2); /* crosses the col2im chunk */
    test_resampling(b);
    test_snake(b);
    test_op_shape_errors();
    test_release_configs();

    /* load errors */
    h3_audio_vae *vae = (h3_audio_vae *)1;
    h3_status_code rc = h3_audio_vae_load(b, "/nonexistent/audio_vae", &vae, &st);
    CHECK(rc == H3_ERR_NOT_FOUND && vae == NULL && strstr(st.message, "/nonexistent/audio_vae"),
          "missing dir: rc %d '%s'", rc, st.message);
    int64_t wrong[3] = {8, 16, 8}; /* [16, 8, 8] transposed: same bytes, wrong shape */
    altered_load(b, "decoder.ups.1.0.weight_v", wrong, 3, H3_ERR_FORMAT);
    altered_load(b, "decoder.activation_post.act.beta", NULL, 0, H3_ERR_NOT_FOUND);
    CHECK(h3_backend_check(b, NULL) == H3_OK, "load errors poisoned the backend");

    test_golden(b);
    test_cancel_granularity(b);
    h3_backend_destroy(b);
    return h3_test_finish("test_audio_vae");
}
