/* h3_fp8.h - FP8 E4M3 weights and activations (precision=fp8): the number
 * format and the per-row quantiser, on the host. The CPU backend computes
 * with it (an emulation in float32 of what the CUDA backend's FP8 GEMMs
 * do) and the CUDA kernels reproduce it bit for bit (kernels/h3_fp8.cu).
 *
 * E4M3 here is the OCP "fn" variant the tensor cores take: 1 sign, 4
 * exponent bits (bias 7), 3 mantissa bits, no infinities, 0x7F/0xFF NaN,
 * largest finite 448, smallest subnormal 2^-9. Conversion rounds to nearest
 * with ties to even and saturates at ±448 (cvt.satfinite's rule).
 *
 * A row of n values x is stored as codes q[i] = e4m3(x[i] / s) with
 * s = absmax(x) / 448, so the row's largest value lands on ±448 and the
 * row keeps the format's full relative precision; s = 0 (codes 0) for a row
 * of zeros. The value represented is e4m3_value(q[i]) · s. */
#ifndef H3_FP8_H
#define H3_FP8_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define H3_FP8_MAX 448.0f

/* v rounded to the nearest E4M3 value (ties to even, saturating at ±448);
 * NaN gives 0x7F (with v's sign). */
uint8_t h3_fp8_from_f32(float v);
/* The value of a code (0x7F/0xFF: NaN). */
float h3_fp8_to_f32(uint8_t code);
/* v rounded to E4M3 and back. */
float h3_fp8_round(float v);

/* One row: *scale = absmax(x)/448 and q[i] = e4m3(x[i] / *scale) (all 0
 * when the row is zero). Returns the number of non-finite values in x (0:
 * done); a row with any is left unwritten, for the caller to refuse by
 * name. */
int64_t h3_fp8_quantize_row(const float *x, int64_t n, uint8_t *q, float *scale);

/* An F8 weight is one allocation: its codes, then (at this offset, 256-byte
 * aligned) its rows' float32 scales; h3_fp8_weight_bytes is the whole. A
 * copy of those bytes (a weight streamer's) is a copy of the weight. */
size_t h3_fp8_scale_offset(int64_t numel);
size_t h3_fp8_weight_bytes(int64_t rows, int64_t cols);

#ifdef __cplusplus
}
#endif
#endif
