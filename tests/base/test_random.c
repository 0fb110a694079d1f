/* test_random.c - torch CPU MT19937 + randn against goldens/common/randn and
 * the noise the end-to-end goldens drew, compared bit for bit (uint32/uint64
 * patterns, never a tolerance). */
#include <glib.h>
#include <json-glib/json-glib.h>
#include <stdint.h>

#include "base/h3_random.h"
#include "base/h3_safetensors.h"
#include "h3_test.h"

static uint32_t f32_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* Number of float32 values of got[] whose bits equal golden tensor name
 * (from offset golden_offset); prints the first mismatches. */
static size_t count_exact_f32(const h3_st_file *f, const char *name, const float *got, size_t n,
                              size_t golden_offset) {
    const h3_st_tensor *t = h3_st_find(f, name);
    if (!t || t->dtype != H3_ST_F32 || (size_t)t->numel < golden_offset + n) {
        fprintf(stderr, "golden tensor '%s' missing or too small\n", name);
        return 0;
    }
    const uint32_t *ref = (const uint32_t *)t->data + golden_offset;
    size_t exact = 0, shown = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t g = f32_bits(got[i]);
        if (g == ref[i]) {
            exact++;
        } else if (shown++ < 5) {
            fprintf(stderr, "  %s[%zu]: got 0x%08x, golden 0x%08x\n", name, golden_offset + i, g,
                    ref[i]);
        }
    }
    return exact;
}

static size_t total_exact, total_values;

/* Checks one draw against a whole golden tensor and reports the count. */
static void check_draw(const h3_st_file *f, const char *name, const float *got, size_t n) {
    const h3_st_tensor *t = h3_st_find(f, name);
    CHECK(t && (size_t)t->numel == n, "%s: golden has %lld values, drew %zu", name,
          t ? (long long)t->numel : -1LL, n);
    if (!t || (size_t)t->numel != n) return;
    size_t exact = count_exact_f32(f, name, got, n, 0);
    total_exact += exact;
    total_values += n;
    CHECK(exact == n, "%s: %zu / %zu bit-exact", name, exact, n);
}

static size_t numel_of(JsonArray *shape) {
    size_t n = 1;
    for (guint i = 0; i < json_array_get_length(shape); i++)
        n *= (size_t)json_array_get_int_element(shape, i);
    return n;
}

static void test_engine(void) {
    /* docs/spec/torch-randn.md §2: first outputs of seed 42 (std::mt19937(42)) */
    static const uint32_t first42[4] = {1608637542u, 3421126067u, 4083286876u, 787846414u};
    h3_torch_generator g;
    h3_torch_generator_seed(&g, 42);
    for (int i = 0; i < 4; i++) {
        uint32_t w = h3_torch_random32(&g);
        CHECK(w == first42[i], "mt19937(42) output %d: %u, want %u", i, w, first42[i]);
    }
    /* only the low 32 bits of the seed matter; random64 = (first << 32) | second */
    h3_torch_generator_seed(&g, (UINT64_C(7) << 32) | 42u);
    uint64_t w64 = h3_torch_random64(&g);
    CHECK(w64 == (((uint64_t)first42[0] << 32) | first42[1]), "random64 after seed 2^32*7+42: %llx",
          (unsigned long long)w64);
}

static void test_cases(const h3_st_file *f, JsonObject *meta) {
    JsonArray *cases = json_object_get_array_member(meta, "cases");
    guint count = json_array_get_length(cases);
    CHECK(count == 45, "randn.json lists %u cases", count);
    for (guint i = 0; i < count; i++) {
        JsonObject *c = json_array_get_object_element(cases, i);
        const char *key = json_object_get_string_member(c, "key");
        gint64 seed = json_object_get_int_member(c, "seed");
        size_t n = numel_of(json_object_get_array_member(c, "shape"));
        float *out = malloc(n * sizeof(float));
        h3_torch_generator g;
        h3_torch_generator_seed(&g, (uint64_t)seed);
        h3_torch_randn_f32(&g, out, n);
        check_draw(f, key, out, n);
        free(out);
    }
}

static void test_float64(const h3_st_file *f) {
    const h3_st_tensor *t = h3_st_find(f, "seed42.17.float64");
    CHECK(t && t->dtype == H3_ST_F64 && t->numel == 17, "seed42.17.float64 golden");
    if (!t) return;
    double out[17];
    h3_torch_generator g;
    h3_torch_generator_seed(&g, 42);
    h3_torch_randn_f64(&g, out, 17);
    const uint64_t *ref = t->data;
    int exact = 0;
    for (int i = 0; i < 17; i++) {
        uint64_t b;
        memcpy(&b, &out[i], 8);
        if (b == ref[i]) exact++;
        else fprintf(stderr, "  float64[%d]: 0x%016llx vs 0x%016llx\n", i, (unsigned long long)b,
                     (unsigned long long)ref[i]);
    }
    CHECK(exact == 17, "seed42.17.float64: %d / 17 bit-exact", exact);
    printf("seed42.17.float64: %d / 17 bit-exact\n", exact);
}

static void test_sequence(const h3_st_file *f) {
    float video[24 * 37 * 2 * 4], audio[414 * 32];
    h3_torch_generator g;
    h3_torch_generator_seed(&g, 42);
    h3_torch_randn_f32(&g, video, 24 * 37 * 2 * 4);
    h3_torch_randn_f32(&g, audio, 414 * 32);
    check_draw(f, "seed42.sequence.video_1x24x37x2x4", video, 24 * 37 * 2 * 4);
    check_draw(f, "seed42.sequence.audio_414x32", audio, 414 * 32);
}

/* numpy's pairwise float64 sum (what the golden's sum_float64 came from):
 * blocks of <= 128 with 8 accumulators, halves split on multiples of 8. */
static double pairwise_sum(const double *a, size_t n) {
    if (n < 8) {
        double s = 0.0;
        for (size_t i = 0; i < n; i++) s += a[i];
        return s;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        size_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) s += a[i];
        return s;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

/* A full-size video draw: first/last 1000 values, sha256 of all values,
 * float64 sum; optionally the audio draw that follows on the same generator. */
static void test_big(const h3_st_file *f, JsonObject *meta, const char *meta_key,
                     const char *tag, const char *next_key) {
    JsonObject *m = json_object_get_object_member(meta, meta_key);
    size_t n = numel_of(json_object_get_array_member(m, "shape"));
    float *out = malloc(n * sizeof(float));
    h3_torch_generator g;
    h3_torch_generator_seed(&g, 42);
    h3_torch_randn_f32(&g, out, n);

    char name[256];
    snprintf(name, sizeof name, "%s.first1000", tag);
    check_draw(f, name, out, 1000);
    snprintf(name, sizeof name, "%s.last1000", tag);
    check_draw(f, name, out + n - 1000, 1000);

    char *sha = g_compute_checksum_for_data(G_CHECKSUM_SHA256, (const guchar *)out,
                                            n * sizeof(float));
    const char *want_sha = json_object_get_string_member(m, "sha256_float32_le");
    CHECK(strcmp(sha, want_sha) == 0, "%s: sha256 %s, golden %s", tag, sha, want_sha);
    printf("%s: %zu values, sha256 %s (%s)\n", tag, n, sha,
           strcmp(sha, want_sha) == 0 ? "match" : "MISMATCH");
    g_free(sha);

    double *wide = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) wide[i] = out[i];
    double sum = pairwise_sum(wide, n);
    double want_sum = json_object_get_double_member(m, "sum_float64");
    CHECK(sum == want_sum, "%s: float64 sum %.17g, golden %.17g", tag, sum, want_sum);
    printf("%s: float64 sum %.17g (golden %.17g)\n", tag, sum, want_sum);
    free(wide);

    if (next_key) {
        float audio[414 * 32];
        h3_torch_randn_f32(&g, audio, 414 * 32);
        check_draw(f, next_key, audio, 414 * 32);
    }
    free(out);
}

/* Table of docs/spec/torch-randn.md §10 (fresh generator per row). */
static void test_spec_vectors(void) {
    static const struct { uint64_t seed; size_t numel, index; uint32_t bits; } v[] = {
        {0, 1, 0, 0x3fc53f5c},      {1, 1, 0, 0x3f294e60},        {42, 1, 0, 0x3eac62ae},
        {12345, 1, 0, 0x3fb6ac36},  {42, 7, 6, 0x400d532c},       {42, 15, 14, 0xbf7d2c7a},
        {0, 16, 0, 0xbf901b85},     {0, 16, 8, 0x3ea50138},       {1, 16, 15, 0x3eef6dec},
        {12345, 16, 3, 0x3ee340fd}, {42, 16, 0, 0x3ff6a529},      {42, 16, 7, 0xbfcd65ba},
        {42, 16, 8, 0xbf408bf0},    {42, 16, 15, 0x3f432f9f},     {42, 17, 0, 0x3ff6a529},
        {42, 17, 1, 0xbe236d85},    {42, 17, 16, 0xbe9e9482},     {42, 105, 88, 0x3f3e73a3},
        {42, 105, 89, 0x3f130661},  {42, 105, 104, 0xbc4fd6c1},   {0, 100, 95, 0xbf6d4212},
        {12345, 100, 99, 0x3f8ab7a4}, {42, 13248, 13247, 0x3ef1ff56},
    };
    float *buf = malloc(13248 * sizeof(float));
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        h3_torch_generator g;
        h3_torch_generator_seed(&g, v[i].seed);
        h3_torch_randn_f32(&g, buf, v[i].numel);
        uint32_t b = f32_bits(buf[v[i].index]);
        CHECK(b == v[i].bits, "seed %llu randn(%zu)[%zu] = 0x%08x, spec 0x%08x",
              (unsigned long long)v[i].seed, v[i].numel, v[i].index, b, v[i].bits);
    }
    free(buf);
}

/* The full 3,580,416-value draw of docs/spec/torch-randn.md §10: first 8 and last 4 values, and
 * the first value of the randn(414, 32) that follows it. */
static void test_spec_big_vectors(void) {
    static const uint32_t first8[8] = {0x3ff6a529, 0x3fbe5f53, 0x3f669567, 0xc006c0db,
                                       0x3f2dacd5, 0xbf9e0591, 0xbd306786, 0xbfcd65ba};
    static const uint32_t last4[4] = {0xbe9b5716, 0x3f3629e2, 0x3f45bc6c, 0x3fc8130d};
    size_t n = (size_t)24 * 37 * 48 * 84;
    float *out = malloc(n * sizeof(float));
    h3_torch_generator g;
    h3_torch_generator_seed(&g, 42);
    h3_torch_randn_f32(&g, out, n);
    for (int i = 0; i < 8; i++)
        CHECK(f32_bits(out[i]) == first8[i], "big[%d] = 0x%08x", i, f32_bits(out[i]));
    for (int i = 0; i < 4; i++)
        CHECK(f32_bits(out[n - 4 + i]) == last4[i], "big[n-4+%d] = 0x%08x", i,
              f32_bits(out[n - 4 + i]));
    h3_torch_randn_f32(&g, out, 414 * 32);
    CHECK(f32_bits(out[0]) == 0xbf20add2u, "randn(414,32) after big: 0x%08x", f32_bits(out[0]));
    free(out);
}

/* The serial path's cached sine: randn(7) then randn(1) continues randn(8);
 * manual_seed clears the cache (docs/spec/torch-randn.md §6). */
static void test_serial_cache(void) {
    float a[8], b[8];
    h3_torch_generator g1, g2;
    h3_torch_generator_seed(&g1, 42);
    h3_torch_randn_f32(&g1, a, 7);
    h3_torch_randn_f32(&g1, a + 7, 1);
    h3_torch_generator_seed(&g2, 42);
    h3_torch_randn_f32(&g2, b, 8);
    CHECK(memcmp(a, b, sizeof a) == 0, "randn(7)+randn(1) != randn(8)");
    h3_torch_generator_seed(&g1, 42);
    h3_torch_randn_f32(&g1, a, 7);
    h3_torch_generator_seed(&g1, 42);
    h3_torch_randn_f32(&g1, a, 1);
    CHECK(f32_bits(a[0]) == 0x3eac62aeu, "reseed did not clear the cached sample: 0x%08x",
          f32_bits(a[0]));
}

/* The pipeline's own draws: one generator seeded 42, keyframe noise first
 * (FL2VA), then video noise, then the audio rows. */
static void test_e2e_noise(const char *golden, int has_cond) {
    h3_st_file *f = NULL;
    h3_status st = {0};
    CHECK(h3_st_open(h3_test_data(golden), &f, &st) == H3_OK, "%s", st.message);
    if (!f) return;
    h3_torch_generator g;
    h3_torch_generator_seed(&g, 42);
    char label[256];
    if (has_cond) {
        float cond[24 * 2 * 4];
        h3_torch_randn_f32(&g, cond, 24 * 2 * 4);
        snprintf(label, sizeof label, "%s noise.condition", golden);
        size_t exact = count_exact_f32(f, "noise.condition", cond, 24 * 2 * 4, 0);
        CHECK(exact == 24 * 2 * 4, "%s: %zu / 192", label, exact);
    }
    float video[24 * 37 * 2 * 4], audio[414 * 32];
    h3_torch_randn_f32(&g, video, 24 * 37 * 2 * 4);
    h3_torch_randn_f32(&g, audio, 414 * 32);
    size_t ev = count_exact_f32(f, "noise.video", video, 24 * 37 * 2 * 4, 0);
    size_t ea = count_exact_f32(f, "noise.audio_rows", audio, 414 * 32, 0);
    CHECK(ev == 24 * 37 * 2 * 4, "%s noise.video: %zu / 7104", golden, ev);
    CHECK(ea == 414 * 32, "%s noise.audio_rows: %zu / 13248", golden, ea);
    printf("%s: noise%s video %zu/7104, audio %zu/13248 bit-exact\n", golden,
           has_cond ? " (condition 192 first)" : "", ev, ea);
    h3_st_close(f);
}

int main(void) {
    test_engine();

    h3_st_file *f = NULL;
    h3_status st = {0};
    CHECK(h3_st_open(h3_test_data("goldens/common/randn.safetensors"), &f, &st) == H3_OK, "%s",
          st.message);
    JsonParser *parser = json_parser_new();
    GError *err = NULL;
    gboolean ok = json_parser_load_from_file(parser, h3_test_data("goldens/common/randn.json"), &err);
    CHECK(ok, "randn.json: %s", err ? err->message : "?");
    if (!f || !ok) {
        if (err) g_error_free(err);
        g_object_unref(parser);
        h3_st_close(f);
        return h3_test_finish("test_random");
    }
    JsonObject *meta = json_node_get_object(json_parser_get_root(parser));

    test_cases(f, meta);
    test_float64(f);
    test_sequence(f);
    test_big(f, meta, "big", "seed42.big_1x24x37x48x84", "seed42.big_then_414x32");
    test_big(f, meta, "big_1280x736", "seed42.big_1x24x37x46x80", NULL);
    printf("randn.safetensors float32: %zu / %zu values bit-exact\n", total_exact, total_values);

    test_spec_vectors();
    test_spec_big_vectors();
    test_serial_cache();
    test_e2e_noise("goldens/tiny-h3/e2e_t2va_3steps.safetensors", 0);
    test_e2e_noise("goldens/tiny-h3/e2e_fl2va_3steps.safetensors", 1);
    test_e2e_noise("goldens/tiny-h3/e2e_t2va_fasth3_ladderA.safetensors", 0);
    test_e2e_noise("goldens/tiny-h3/e2e_t2va_fasth3_ladderB.safetensors", 0);

    g_object_unref(parser);
    h3_st_close(f);
    return h3_test_finish("test_random");
}
