/* h3_random.c - torch's CPU MT19937 generator and randn, bit for bit.
 *
 * Specification: docs/spec/torch-randn.md. Every multiply-add that GCC fused when
 * it compiled torch's AVX2 kernel is written below as an explicit fmaf(), and
 * nothing else may be fused: a contraction the compiler invents on its own
 * moves values by an ulp and breaks seed-exactness. Hence the pragmas, which
 * turn contraction off for this file whatever -march the build uses (GCC's
 * gnu11 default is -ffp-contract=fast, which fuses as soon as FMA exists). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "base/h3_random.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* MT19937 (at::mt19937, identical to std::mt19937)                         */
/* ------------------------------------------------------------------------ */

#define MT_M 397
#define MT_MATRIX_A 0x9908B0DFu
#define MT_UPPER 0x80000000u
#define MT_LOWER 0x7FFFFFFFu

void h3_torch_generator_seed(h3_torch_generator *g, uint64_t seed) {
    g->state[0] = (uint32_t)(seed & 0xFFFFFFFFu);
    for (int i = 1; i < H3_MT19937_N; i++) {
        uint32_t prev = g->state[i - 1];
        g->state[i] = 1812433253u * (prev ^ (prev >> 30)) + (uint32_t)i;
    }
    g->next = H3_MT19937_N; /* the first draw twists, as in torch */
    g->has_cached_normal = 0;
    g->cached_normal = 0.0;
}

static void mt_twist(uint32_t *mt) {
    for (int i = 0; i < H3_MT19937_N; i++) {
        uint32_t y = (mt[i] & MT_UPPER) | (mt[(i + 1) % H3_MT19937_N] & MT_LOWER);
        uint32_t v = mt[(i + MT_M) % H3_MT19937_N] ^ (y >> 1);
        mt[i] = (y & 1u) ? v ^ MT_MATRIX_A : v;
    }
}

uint32_t h3_torch_random32(h3_torch_generator *g) {
    if (g->next >= H3_MT19937_N) {
        mt_twist(g->state);
        g->next = 0;
    }
    uint32_t y = g->state[g->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9D2C5680u;
    y ^= (y << 15) & 0xEFC60000u;
    y ^= y >> 18;
    return y;
}

uint64_t h3_torch_random64(h3_torch_generator *g) {
    uint64_t hi = h3_torch_random32(g); /* the first output is the high word */
    uint64_t lo = h3_torch_random32(g);
    return (hi << 32) | lo;
}

/* at::uniform_real_distribution<float>: 24 low bits, exact, in [0, 1). */
static float uniform_f32(h3_torch_generator *g) {
    return (float)(h3_torch_random32(g) & 0xFFFFFFu) * 0x1p-24f;
}

/* at::uniform_real_distribution<double>: 53 low bits of random64(). */
static double uniform_f64(h3_torch_generator *g) {
    return (double)(h3_torch_random64(g) & ((UINT64_C(1) << 53) - 1)) * 0x1p-53;
}

/* ------------------------------------------------------------------------ */
/* avx_mathfun log256_ps / sincos256_ps, one lane, as GCC compiled them     */
/* ------------------------------------------------------------------------ */

static float bits_to_float(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t float_to_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* Cephes logf polynomial (the source's double literals rounded to float). */
static const uint32_t log_p_bits[9] = {
    0x3D9021BBu, 0xBDEBD1B8u, 0x3DEF251Au, 0xBDFE5D4Fu, 0x3E11E9BFu,
    0xBE2AAE50u, 0x3E4CCEACu, 0xBE7FFFFCu, 0x3EAAAAAAu,
};
#define LOG_Q1 0xB95E8083u
#define LOG_Q2 0x3F318000u
#define LOG_SQRTHF 0x3F3504F3u
#define MIN_NORM_POS 0x00800000u

static float avx_log(float x) {
    float min_norm = bits_to_float(MIN_NORM_POS);
    if (!(x > min_norm)) x = min_norm; /* _mm256_max_ps(x, min_norm): no-op here */
    uint32_t b = float_to_bits(x);
    float e = (float)((int32_t)(b >> 23) - 127) + 1.0f;
    float m = bits_to_float((b & 0x807FFFFFu) | 0x3F000000u); /* [0.5, 1) */
    float tmp = 0.0f;
    if (m < bits_to_float(LOG_SQRTHF)) {
        tmp = m;
        e = e - 1.0f;
    }
    m = m - 1.0f;
    m = m + tmp;
    float z = m * m;
    float y = fmaf(bits_to_float(log_p_bits[0]), m, bits_to_float(log_p_bits[1]));
    for (int k = 2; k < 9; k++) y = fmaf(y, m, bits_to_float(log_p_bits[k]));
    y = y * m;
    y = fmaf(y, z, e * bits_to_float(LOG_Q1)); /* e*q1 rounded first, y*z fused */
    y = fmaf(-z, 0.5f, y);
    float r = m + y;
    return fmaf(e, bits_to_float(LOG_Q2), r);
}

#define FOPI 0x3FA2F983u
#define MDP1 0xBF490000u
#define MDP2 0xB97DA000u
#define MDP3 0xB3222169u
#define SIN_P0 0xB94CA1F9u
#define SIN_P1 0x3C08839Eu
#define SIN_P2 0xBE2AAAA3u
#define COS_P0 0x37CCF5CEu
#define COS_P1 0xBAB6061Au
#define COS_P2 0x3D2AAAA5u

static void avx_sincos(float x, float *s_out, float *c_out) {
    uint32_t sign_sin = float_to_bits(x) & 0x80000000u;
    x = fabsf(x);
    float y = x * bits_to_float(FOPI);
    int32_t j = (int32_t)y; /* cvttps: truncation */
    j = (j + 1) & ~1;
    y = (float)j;
    uint32_t swap_sin = (uint32_t)(j & 4) << 29;
    int poly_sel = (j & 2) == 0;
    x = fmaf(y, bits_to_float(MDP1), x);
    x = fmaf(y, bits_to_float(MDP2), x);
    x = fmaf(y, bits_to_float(MDP3), x);
    uint32_t sign_cos = (uint32_t)(~(j - 2) & 4) << 29;
    sign_sin ^= swap_sin;
    float z = x * x;

    float yc = fmaf(bits_to_float(COS_P0), z, bits_to_float(COS_P1));
    yc = fmaf(yc, z, bits_to_float(COS_P2));
    yc = yc * z;
    yc = fmaf(yc, z, -(z * 0.5f));
    yc = yc + 1.0f;

    float ys = fmaf(bits_to_float(SIN_P0), z, bits_to_float(SIN_P1));
    ys = fmaf(ys, z, bits_to_float(SIN_P2));
    ys = ys * z;
    ys = fmaf(ys, x, x);

    *s_out = bits_to_float(float_to_bits(poly_sel ? ys : yc) ^ sign_sin);
    *c_out = bits_to_float(float_to_bits(poly_sel ? yc : ys) ^ sign_cos);
}

#define TWO_PI_F32 0x40C90FDBu

/* normal_fill_16_AVX2 on 16 uniforms in place: 8 Box-Muller lanes. */
static void fill16_f32(float *d) {
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - d[j];
        float u2 = d[j + 8];
        float radius = sqrtf(-2.0f * avx_log(u1));
        float theta = bits_to_float(TWO_PI_F32) * u2;
        float s, c;
        avx_sincos(theta, &s, &c);
        /* fma(radius*c, std=1, mean=0): also turns -0 into +0 (u1 == 1) */
        d[j] = fmaf(radius * c, 1.0f, 0.0f);
        d[j + 8] = fmaf(radius * s, 1.0f, 0.0f);
    }
}

/* ------------------------------------------------------------------------ */
/* randn                                                                     */
/* ------------------------------------------------------------------------ */

/* at::normal_distribution<double>(0, 1): pairs (cos, sin), the sine cached. */
static double normal_serial(h3_torch_generator *g) {
    if (g->has_cached_normal) {
        g->has_cached_normal = 0;
        return g->cached_normal;
    }
    double u1 = uniform_f64(g);
    double u2 = uniform_f64(g);
    double r = sqrt(-2.0 * log1p(-u2));
    double theta = 2.0 * M_PI * u1;
    g->cached_normal = r * sin(theta);
    g->has_cached_normal = 1;
    return r * cos(theta);
}

void h3_torch_randn_f32(h3_torch_generator *g, float *out, size_t n) {
    if (n < 16) {
        for (size_t i = 0; i < n; i++) out[i] = (float)normal_serial(g);
        return;
    }
    for (size_t i = 0; i < n; i++) out[i] = uniform_f32(g);
    for (size_t o = 0; o + 16 <= n; o += 16) fill16_f32(out + o);
    if (n % 16 != 0) {
        /* torch recomputes the last 16 values from 16 fresh uniforms,
         * overwriting part of the last full block. */
        float *tail = out + n - 16;
        for (int i = 0; i < 16; i++) tail[i] = uniform_f32(g);
        fill16_f32(tail);
    }
}

/* normal_fill_16<double>: glibc log/cos/sin. */
static void fill16_f64(double *d) {
    for (int j = 0; j < 8; j++) {
        double u1 = 1.0 - d[j];
        double u2 = d[j + 8];
        double radius = sqrt(-2.0 * log(u1));
        double theta = 2.0 * M_PI * u2;
        d[j] = radius * cos(theta);
        d[j + 8] = radius * sin(theta);
    }
}

void h3_torch_randn_f64(h3_torch_generator *g, double *out, size_t n) {
    if (n < 16) {
        for (size_t i = 0; i < n; i++) out[i] = normal_serial(g);
        return;
    }
    for (size_t i = 0; i < n; i++) out[i] = uniform_f64(g);
    for (size_t o = 0; o + 16 <= n; o += 16) fill16_f64(out + o);
    if (n % 16 != 0) {
        double *tail = out + n - 16;
        for (int i = 0; i < 16; i++) tail[i] = uniform_f64(g);
        fill16_f64(tail);
    }
}

/* ------------------------------------------------------------------------ */
/* Counter-based uniform values (h3_random.h)                               */
/* ------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

float h3_counter_uniform(uint64_t key, uint64_t index, float lo, float hi) {
    uint64_t h = splitmix64(key * 0x100000001B3ull ^ splitmix64(index));
    float u = (float)(h >> 40) * (1.0f / 16777216.0f);
    return lo + (hi - lo) * u; /* contraction is off in this file */
}

uint64_t h3_counter_key(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return splitmix64(splitmix64(seed) ^ h);
}
