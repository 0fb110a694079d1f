/* test_fp8.c - precision=fp8 on the CPU backend: the E4M3 codec on known
 * values (rounding ties to even, saturation, subnormals, NaN), the per-row
 * quantiser, an FP8 weight's load (codes, scales, memory, row views, the
 * multiple-of-16 rule) and the FP8 linear against a double-precision
 * reference of the same quantised operands and against the float linear. */
#include "backend/h3_backend.h"
#include "backend/h3_fp8.h"
#include "backend/h3_weight_stream.h"
#include "h3_test.h"

#include <stdint.h>

static void test_codec_known_values(void) {
    struct { float v; uint8_t code; } known[] = {
        {0.0f, 0x00},       {-0.0f, 0x80},       {1.0f, 0x38},       {-1.0f, 0xB8},
        {1.125f, 0x39},     {448.0f, 0x7E},      {-448.0f, 0xFE},    {256.0f, 0x78},
        {0x1p-6f, 0x08},    /* smallest normal */
        {0x1p-9f, 0x01},    /* smallest subnormal */
        {0x7p-9f, 0x07},    /* largest subnormal */
        {1.0625f, 0x38},    /* tie between 1 and 1.125: to the even mantissa (1) */
        {1.1875f, 0x3A},    /* tie between 1.125 and 1.25: to even (1.25) */
        {1.06251f, 0x39},   /* just past the tie: up */
        {0x1p-10f, 0x00},   /* tie between 0 and 2^-9: to even (0) */
        {0x3p-10f, 0x02},   /* tie between 2^-9 and 2·2^-9: to even (2) */
        {0x1.1p-10f, 0x01}, /* just past half the smallest subnormal */
        {0xFp-10f, 0x08},   /* tie between 7·2^-9 and 2^-6: to even (the normal 0x08) */
        {449.0f, 0x7E},     /* past the largest: saturates */
        {464.0f, 0x7E},     /* the tie with 480 (not finite in E4M3): saturates */
        {1e9f, 0x7E},       {-1e9f, 0xFE},
        {INFINITY, 0x7E},   {-INFINITY, 0xFE},  /* satfinite */
        {240.0f, 0x77},     {232.0f, 0x76},      /* 232 is the tie of 224 and 240: even (224 = m 6) */
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        uint8_t c = h3_fp8_from_f32(known[i].v);
        CHECK(c == known[i].code, "e4m3(%a) = 0x%02X, want 0x%02X", (double)known[i].v, c, known[i].code);
    }
    CHECK(h3_fp8_from_f32(NAN) == 0x7F, "NaN -> 0x%02X", h3_fp8_from_f32(NAN));
    CHECK(isnan(h3_fp8_to_f32(0x7F)) && isnan(h3_fp8_to_f32(0xFF)), "0x7F/0xFF are NaN");
    CHECK(h3_fp8_to_f32(0x7E) == 448.0f && h3_fp8_to_f32(0x01) == 0x1p-9f && h3_fp8_to_f32(0x38) == 1.0f,
          "values of 0x7E, 0x01, 0x38");
    /* every finite code round-trips, and the values are increasing */
    int bad = 0;
    for (int c = 0; c < 0x7F; c++) {
        float v = h3_fp8_to_f32((uint8_t)c), n = -v;
        bad += h3_fp8_from_f32(v) != c || h3_fp8_from_f32(n) != (c | 0x80);
        if (c > 0) bad += !(v > h3_fp8_to_f32((uint8_t)(c - 1)));
    }
    CHECK(bad == 0, "%d codes do not round-trip or are out of order", bad);
    /* round to nearest: each midpoint of two neighbours and either side of it */
    int wrong = 0;
    for (int c = 0; c < 0x7E; c++) {
        float lo = h3_fp8_to_f32((uint8_t)c), hi = h3_fp8_to_f32((uint8_t)(c + 1)), mid = (lo + hi) / 2;
        wrong += h3_fp8_from_f32(nextafterf(mid, 0.0f)) != c;
        wrong += h3_fp8_from_f32(nextafterf(mid, 1000.0f)) != c + 1;
        wrong += h3_fp8_from_f32(mid) != ((c & 1) ? c + 1 : c);
    }
    CHECK(wrong == 0, "%d midpoints rounded wrongly", wrong);
}

static void test_quantize_row(void) {
    float x[4] = {1.0f, -2.0f, 0.5f, 0.0f};
    uint8_t q[4];
    float s = -1;
    CHECK(h3_fp8_quantize_row(x, 4, q, &s) == 0, "finite row");
    CHECK(s == 2.0f / 448.0f, "scale %g, want absmax/448", (double)s);
    CHECK(q[1] == 0xFE, "the absmax lands on -448 (0x%02X)", q[1]);
    CHECK(q[0] == h3_fp8_from_f32(1.0f / s) && q[3] == 0, "codes %02X %02X", q[0], q[3]);
    float z[3] = {0, 0, 0};
    CHECK(h3_fp8_quantize_row(z, 3, q, &s) == 0 && s == 0.0f && q[0] == 0 && q[2] == 0, "a zero row: scale 0, codes 0");
    float n[3] = {1.0f, NAN, INFINITY};
    CHECK(h3_fp8_quantize_row(n, 3, q, &s) == 2, "NaN and Inf are counted, not quantised");
    CHECK(h3_fp8_weight_bytes(3, 16) == 256 + 12 && h3_fp8_scale_offset(4096) == 4096, "weight layout");
}

/* A host float tensor wrapped as a safetensors source. */
static h3_st_tensor host_source(const char *name, float *data, int64_t rows, int64_t cols) {
    h3_st_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.file_path = "test";
    t.dtype = H3_ST_F32;
    t.ndim = 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    t.numel = rows * cols;
    t.nbytes = (size_t)t.numel * 4;
    t.data = data;
    return t;
}

static float uniform(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xFFFFFF) / (float)0x1000000 * 2.0f - 1.0f;
}

static void test_linear(void) {
    h3_backend *b = NULL;
    h3_status st = {0};
    CHECK(h3_backend_cpu_create(1, &b, &st) == H3_OK, "%s", st.message);
    if (!b) return;
    enum { M = 37, K = 96, N = 48 };
    float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K), *bias = malloc(sizeof(float) * N);
    uint32_t seed = 7;
    for (int i = 0; i < M * K; i++) x[i] = uniform(&seed) * (i % 7 == 0 ? 30.0f : 1.0f); /* outliers */
    for (int i = 0; i < N * K; i++) w[i] = uniform(&seed) * 0.1f;
    for (int i = 0; i < N; i++) bias[i] = uniform(&seed);
    x[5] = 1e-6f; /* values that land in the subnormal codes */
    h3_st_tensor src = host_source("w", w, N, K);
    h3_tensor wf, w8, bt;
    CHECK(h3_weight_load(b, &src, H3_WEIGHT_LINEAR, &wf, &st) == H3_OK && wf.dtype == H3_F32, "bf16 path: float");
    h3_backend_memory before, after;
    h3_backend_memory_get(b, &before);
    CHECK(h3_backend_set_linear_fp8(b, 1, &st) == H3_OK, "%s", st.message);
    CHECK(h3_weight_load(b, &src, H3_WEIGHT_LINEAR, &w8, &st) == H3_OK, "%s", st.message);
    h3_backend_memory_get(b, &after);
    CHECK(w8.dtype == H3_F8E4M3 && w8.scale != NULL, "an fp8 weight with scales (%s)", h3_dtype_name(w8.dtype));
    CHECK(after.weights - before.weights == h3_fp8_weight_bytes(N, K), "fp8 weight tallied at %llu bytes, want %zu",
          (unsigned long long)(after.weights - before.weights), h3_fp8_weight_bytes(N, K));
    int64_t bshape = N;
    CHECK(h3_weight_from_f32(b, bias, H3_F32, 1, &bshape, &bt, &st) == H3_OK, "%s", st.message);
    /* codes and scales are the host quantiser's */
    const uint8_t *codes = w8.data;
    const float *scales = w8.scale;
    int mism = 0;
    for (int n = 0; n < N; n++) {
        uint8_t q[K];
        float s;
        h3_fp8_quantize_row(w + n * K, K, q, &s);
        mism += s != scales[n] || memcmp(q, codes + n * K, K) != 0;
    }
    CHECK(mism == 0, "%d weight rows differ from h3_fp8_quantize_row", mism);

    h3_tensor xt = h3_new_2d(b, H3_F32, M, K), y8 = h3_new_2d(b, H3_F32, M, N), yf = h3_new_2d(b, H3_F32, M, N);
    h3_tensor_upload_f32(b, &xt, x, &st);
    h3_op_linear(b, &y8, &xt, &w8, &bt);
    h3_op_linear(b, &yf, &xt, &wf, &bt);
    CHECK(h3_backend_check(b, &st) == H3_OK, "%s", st.message);
    float *g8 = malloc(sizeof(float) * M * N), *gf = malloc(sizeof(float) * M * N), *ref = malloc(sizeof(float) * M * N);
    h3_tensor_download_f32(b, &y8, g8, &st);
    h3_tensor_download_f32(b, &yf, gf, &st);
    /* the reference: the same quantised operands, summed in double */
    for (int m = 0; m < M; m++) {
        uint8_t qx[K];
        float sx;
        h3_fp8_quantize_row(x + m * K, K, qx, &sx);
        for (int n = 0; n < N; n++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)h3_fp8_to_f32(qx[k]) * h3_fp8_to_f32(codes[n * K + k]);
            ref[m * N + n] = (float)(acc * sx * scales[n] + bias[n]);
        }
    }
    double e_ref = h3_test_rel_l2(g8, ref, (size_t)M * N), e_float = h3_test_rel_l2(g8, gf, (size_t)M * N);
    printf("fp8 linear %dx%dx%d: rel-L2 %.3g against its double reference, %.4f against the float32 linear\n", M, K,
           N, e_ref, e_float);
    /* float32 sums of exact products: a few ulps of float32 */
    CHECK(e_ref < 1e-6, "fp8 linear vs its reference: rel-L2 %g", e_ref);
    /* 3 mantissa bits: each operand within 2^-4 relative, errors averaging over K */
    CHECK(e_float > 1e-4 && e_float < 0.05, "fp8 vs float32 linear: rel-L2 %g (quantised, and not too far)", e_float);

    /* a row view of the fp8 weight multiplies as the same rows of the whole */
    h3_tensor wv = h3_tensor_rows_view(&w8, 8, 16), yv = h3_new_2d(b, H3_F32, M, 16);
    CHECK(wv.scale == (float *)w8.scale + 8, "the view carries its rows' scales");
    h3_op_linear(b, &yv, &xt, &wv, NULL);
    float *gv = malloc(sizeof(float) * M * 16);
    h3_tensor_download_f32(b, &yv, gv, &st);
    int off = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < 16; n++) off += fabsf(gv[m * 16 + n] - (g8[m * N + 8 + n] - bias[8 + n])) > 1e-5f * (1 + fabsf(g8[m * N + 8 + n]));
    CHECK(off == 0, "%d outputs of the row view differ", off);

    /* its storage is one span: a byte copy of it, seen through h3_tensor_at, multiplies the same */
    CHECK(h3_tensor_storage_bytes(&w8) == h3_fp8_weight_bytes(N, K), "storage %zu", h3_tensor_storage_bytes(&w8));
    void *copy = malloc(h3_tensor_storage_bytes(&w8));
    memcpy(copy, w8.data, h3_tensor_storage_bytes(&w8));
    h3_tensor wc = h3_tensor_at(&w8, copy), yc = h3_new_2d(b, H3_F32, M, N);
    CHECK(wc.scale == (char *)copy + h3_fp8_scale_offset(N * K), "the copy's scales follow its codes");
    h3_op_linear(b, &yc, &xt, &wc, &bt);
    float *gc = malloc(sizeof(float) * M * N);
    h3_tensor_download_f32(b, &yc, gc, &st);
    CHECK(memcmp(gc, g8, sizeof(float) * M * N) == 0, "the copied weight gives other outputs");
    free(gc);
    free(copy);

    /* memory=stream: the weight moved to the host and back through a ring
     * slot keeps its scales with it (they follow the codes into the slot) */
    h3_tensor hw;
    CHECK(h3_weight_load(b, &src, H3_WEIGHT_LINEAR, &hw, &st) == H3_OK && hw.dtype == H3_F8E4M3, "%s", st.message);
    CHECK(h3_weight_to_host(b, &hw, &st) == H3_OK && hw.on_host, "to host: %s", st.message);
    CHECK((char *)hw.scale - (char *)hw.data == (ptrdiff_t)h3_fp8_scale_offset(N * K), "host copy's scales");
    const h3_tensor *group[1] = {&hw};
    CHECK(h3_weight_ring_group_bytes(group, 1) >= h3_fp8_weight_bytes(N, K), "a slot holds the codes and scales");
    h3_weight_ring *ring = NULL;
    CHECK(h3_weight_ring_create(b, 1, h3_weight_ring_group_bytes(group, 1), &ring, &st) == H3_OK, "%s", st.message);
    h3_tensor slot_w = hw, *views[1] = {&slot_w};
    if (ring && h3_weight_ring_load(ring, 0, group, 1, &st) == H3_OK &&
        h3_weight_ring_acquire(ring, 0, views, 1, &st) == H3_OK) {
        CHECK(!slot_w.on_host && slot_w.scale != hw.scale &&
                  (char *)slot_w.scale - (char *)slot_w.data == (ptrdiff_t)h3_fp8_scale_offset(N * K),
              "the slot's view: its scales in the slot, after its codes");
        h3_tensor ys = h3_new_2d(b, H3_F32, M, N);
        h3_op_linear(b, &ys, &xt, &slot_w, &bt);
        float *gs = malloc(sizeof(float) * M * N);
        CHECK(h3_tensor_download_f32(b, &ys, gs, &st) == H3_OK && memcmp(gs, g8, sizeof(float) * M * N) == 0,
              "the streamed fp8 weight gives other outputs");
        free(gs);
        h3_weight_ring_release(ring, 0);
    } else {
        CHECK(0, "ring: %s", st.message);
    }
    h3_weight_ring_destroy(ring);
    h3_weight_free(b, &hw); /* the host copy */

    /* the download of an fp8 weight gives code · scale */
    float *wd = malloc(sizeof(float) * N * K);
    CHECK(h3_tensor_download_f32(b, &w8, wd, &st) == H3_OK, "%s", st.message);
    CHECK(wd[3 * K + 5] == h3_fp8_to_f32(codes[3 * K + 5]) * scales[3], "downloaded value");

    /* NaN in the input: refused by name */
    x[2 * K + 3] = NAN;
    h3_tensor_upload_f32(b, &xt, x, &st);
    h3_op_linear(b, &y8, &xt, &w8, NULL);
    h3_status_code rc = h3_backend_check(b, &st);
    CHECK(rc == H3_ERR_NONFINITE && strstr(st.message, "row 2"), "NaN input: %s", st.message);
    h3_backend_clear_error(b);

    /* in- or out-features not a multiple of 16: kept in the compute type, counted */
    int q0, k0, q1, k1;
    h3_backend_fp8_counts(b, &q0, &k0);
    h3_st_tensor narrow = host_source("narrow", w, 16, 24), short_rows = host_source("short", w, 40, 32);
    h3_tensor wn, ws;
    CHECK(h3_weight_load(b, &narrow, H3_WEIGHT_LINEAR, &wn, &st) == H3_OK && wn.dtype == H3_F32, "narrow kept f32");
    CHECK(h3_weight_load(b, &short_rows, H3_WEIGHT_LINEAR, &ws, &st) == H3_OK && ws.dtype == H3_F32, "40 rows kept f32");
    h3_backend_fp8_counts(b, &q1, &k1);
    CHECK(q1 == q0 && k1 == k0 + 2, "counts %d/%d -> %d/%d", q0, k0, q1, k1);
    h3_weight_free(b, &ws);
    /* DEFAULT weights are never quantised */
    h3_tensor wd2;
    CHECK(h3_weight_load(b, &src, H3_WEIGHT_DEFAULT, &wd2, &st) == H3_OK && wd2.dtype == H3_F32, "default stays f32");

    /* a weight holding NaN is refused at load, by name */
    w[0] = NAN;
    h3_tensor wbad;
    rc = h3_weight_load(b, &src, H3_WEIGHT_LINEAR, &wbad, &st);
    CHECK(rc == H3_ERR_NONFINITE && strstr(st.message, "'w'"), "NaN weight: %s", st.message);

    h3_weight_free(b, &wf);
    h3_weight_free(b, &w8);
    h3_weight_free(b, &bt);
    h3_weight_free(b, &wn);
    h3_weight_free(b, &wd2);
    h3_backend_destroy(b);
    free(x), free(w), free(bias), free(g8), free(gf), free(ref), free(gv), free(wd);
}

/* The measuring twin of the CPU takes an fp8 weight at its real size. */
static void test_measure(void) {
    h3_backend *m = NULL;
    h3_status st = {0};
    CHECK(h3_backend_cpu_create_measure(&m, &st) == H3_OK, "%s", st.message);
    if (!m) return;
    CHECK(h3_backend_set_linear_fp8(m, 1, &st) == H3_OK, "%s", st.message);
    h3_st_tensor src = host_source("w", NULL, 64, 32);
    h3_tensor w;
    h3_backend_memory before, after;
    h3_backend_memory_get(m, &before);
    CHECK(h3_weight_load(m, &src, H3_WEIGHT_LINEAR, &w, &st) == H3_OK, "%s", st.message);
    h3_backend_memory_get(m, &after);
    CHECK(w.dtype == H3_F8E4M3 && after.weights - before.weights == h3_fp8_weight_bytes(64, 32),
          "measured %llu bytes for an fp8 [64, 32] (%s)", (unsigned long long)(after.weights - before.weights),
          h3_dtype_name(w.dtype));
    CHECK(after.peak - before.weights >= 64 * 32 * 4, "the float copy before quantising is in the peak");
    h3_weight_free(m, &w);
    h3_backend_destroy(m);
}

int main(void) {
    test_codec_known_values();
    test_quantize_row();
    test_linear();
    test_measure();
    return h3_test_finish("test_fp8");
}
