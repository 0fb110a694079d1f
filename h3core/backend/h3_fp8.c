/* h3_fp8.c - the E4M3 format and the per-row quantiser (h3_fp8.h). Every
 * step below is exact in float32 (scaling by powers of two, comparing
 * halves), so the rounding is the format's alone and the CUDA kernel's
 * hardware conversion gives the same codes. */
#include "backend/h3_fp8.h"

#include <math.h>

/* Round t >= 0 (t < 2^23) to an integer, ties to even, without depending
 * on the floating-point environment's rounding mode. */
static float round_half_even(float t) {
    float f = floorf(t), frac = t - f;
    if (frac > 0.5f || (frac == 0.5f && fmodf(f, 2.0f) != 0.0f)) f += 1.0f;
    return f;
}

uint8_t h3_fp8_from_f32(float v) {
    uint8_t sign = signbit(v) ? 0x80 : 0x00;
    if (isnan(v)) return (uint8_t)(sign | 0x7F);
    float a = fabsf(v);
    if (a >= H3_FP8_MAX) return (uint8_t)(sign | 0x7E); /* saturate (infinities too) */
    if (a < 0x1p-6f) {
        /* subnormal: m · 2^-9, m in 0..8 (8 is the smallest normal, code 0x08) */
        return (uint8_t)(sign | (uint8_t)round_half_even(a * 0x1p9f));
    }
    int e2;
    float f = frexpf(a, &e2); /* a = f · 2^e2, f in [0.5, 1) */
    int e = e2 - 1;           /* a = (1 + m/8) · 2^e */
    float m = round_half_even((f * 2.0f - 1.0f) * 8.0f);
    if (m >= 8.0f) {
        m = 0.0f;
        e += 1;
    }
    int code = ((e + 7) << 3) | (int)m;
    if (code > 0x7E) code = 0x7E; /* rounded past 448: saturate */
    return (uint8_t)(sign | code);
}

float h3_fp8_to_f32(uint8_t code) {
    int e = (code >> 3) & 0xF, m = code & 7;
    float sign = (code & 0x80) ? -1.0f : 1.0f;
    if (e == 0xF && m == 7) return NAN;
    if (e == 0) return sign * ldexpf((float)m, -9);
    return sign * ldexpf(1.0f + (float)m / 8.0f, e - 7);
}

float h3_fp8_round(float v) { return h3_fp8_to_f32(h3_fp8_from_f32(v)); }

int64_t h3_fp8_quantize_row(const float *x, int64_t n, uint8_t *q, float *scale) {
    int64_t bad = 0;
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) bad++;
        else if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    }
    if (bad) return bad;
    float s = amax / H3_FP8_MAX;
    *scale = s;
    for (int64_t i = 0; i < n; i++) q[i] = s > 0.0f ? h3_fp8_from_f32(x[i] / s) : 0;
    return 0;
}

size_t h3_fp8_scale_offset(int64_t numel) { return ((size_t)(numel > 0 ? numel : 0) + 255) & ~(size_t)255; }

size_t h3_fp8_weight_bytes(int64_t rows, int64_t cols) {
    return h3_fp8_scale_offset(rows * cols) + (size_t)(rows > 0 ? rows : 0) * sizeof(float);
}
