/* h3_random.h - torch's CPU random generator, bit for bit.
 *
 * The reference pipeline draws its initial noise with
 *     g = torch.Generator().manual_seed(seed); torch.randn(shape, generator=g)
 * on the CPU. Seed-exact output therefore needs torch's MT19937 engine and
 * its randn kernels reproduced exactly; docs/spec/torch-randn.md is the
 * specification this file implements (torch 2.11, x86-64 AVX2/AVX512 build).
 *
 * The generator is a plain struct (no allocation): seed it, then draw from
 * it in the same order as the reference. Successive draws continue the same
 * stream, so "video noise, then audio rows" from one generator is simply two
 * calls. Only numel matters for a contiguous tensor: pass the product of the
 * shape. */
#ifndef H3_RANDOM_H
#define H3_RANDOM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define H3_MT19937_N 624

typedef struct h3_torch_generator {
    uint32_t state[H3_MT19937_N]; /* MT19937 state words */
    int next;                     /* next state word to temper; N = twist first */
    int has_cached_normal;        /* torch's next_double_normal_sample_ */
    double cached_normal;
} h3_torch_generator;

/* torch.Generator().manual_seed(seed): only the low 32 bits of seed matter
 * (as in torch); also clears the cached normal sample. */
void h3_torch_generator_seed(h3_torch_generator *g, uint64_t seed);

/* One 32-bit output (CPUGeneratorImpl::random). */
uint32_t h3_torch_random32(h3_torch_generator *g);
/* (first output << 32) | second output (CPUGeneratorImpl::random64). */
uint64_t h3_torch_random64(h3_torch_generator *g);

/* Fills out[0..n) exactly as torch.randn(<n elements>, dtype=float32,
 * generator=g) on the CPU, advancing g the same way:
 *   n >= 16: the AVX2 normal_fill kernel (float32 avx_mathfun log/sincos with
 *            GCC's FMA contraction), 16-value Box-Muller blocks, a tail block
 *            of 16 fresh uniforms when n % 16 != 0; the cache is untouched;
 *   n < 16:  the serial double normal_distribution (glibc log1p/sin/cos),
 *            consuming and refilling the cached sine sample. */
void h3_torch_randn_f32(h3_torch_generator *g, float *out, size_t n);

/* Same for dtype=float64 (scalar normal_fill<double> for n >= 16, the serial
 * path for n < 16). Bit-exact with glibc's libm. */
void h3_torch_randn_f64(h3_torch_generator *g, double *out, size_t n);

/* ---- counter-based uniform values (dummy weights) ------------------------
 * A value per (key, index) with no state, so any slice of a tensor can be
 * drawn on its own, on any device, in any order, and a tensor-parallel
 * shard holds exactly the values of the whole tensor. The CUDA backend's
 * fill kernels (k_fill_uniform, k_fill_random) compute the same bits:
 *   h = splitmix64(key · 0x100000001B3 ^ splitmix64(index))
 *   u = (h >> 40) / 2^24,   value = lo + (hi − lo)·u   (float32, not fused) */
float h3_counter_uniform(uint64_t key, uint64_t index, float lo, float hi);
/* The key of a named tensor's values: seed and name hashed together. */
uint64_t h3_counter_key(uint64_t seed, const char *name);

#ifdef __cplusplus
}
#endif
#endif
