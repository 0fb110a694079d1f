/* h3_backend_cuda.h - what only the CUDA backend offers beyond the op
 * interface of h3_backend.h: its stream (to time with CUDA events), facts
 * about its device, random fills done on the device (benchmarks build
 * billions of random weights this way) and the choice of attention kernel
 * (tests check every path). Defined only when h3core is built with CUDA
 * (H3_HAVE_CUDA). */
#ifndef H3_BACKEND_CUDA_H
#define H3_BACKEND_CUDA_H

#include <stdint.h>

#include "h3_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (0 when there is no driver or no device);
 * why, when none, goes to `why` (may be NULL). */
int h3_cuda_device_count(char *why, size_t why_size);

/* The backend's only stream, as a cudaStream_t. */
void *h3_backend_cuda_stream(h3_backend *b);
const char *h3_backend_cuda_device_name(h3_backend *b);
/* Compute capability as major*10 + minor (90 on H100/H200). */
int h3_backend_cuda_sm(h3_backend *b);

/* t = uniform [lo, hi) from a hash of (seed, element index), on the device. */
void h3_backend_cuda_fill_uniform(h3_backend *b, h3_tensor *t, uint64_t seed, float lo, float hi);

/* Attention kernels. AUTO (the default, or H3_CUDA_ATTENTION=auto|wgmma|mma|generic
 * in the environment; also wgmma-simple) picks wgmma on Hopper for bf16 head_dim 128 non-causal
 * calls, mma.sync for other bf16/f16 calls with head_dim 64 or 128, and the
 * generic kernel otherwise. A forced path that does not fit a call falls
 * back to the next one down. */
typedef enum h3_cuda_attention_path {
    H3_CUDA_ATTENTION_AUTO = 0,
    H3_CUDA_ATTENTION_GENERIC = 1,
    H3_CUDA_ATTENTION_MMA = 2,
    H3_CUDA_ATTENTION_WGMMA = 3,        /* warp-specialised, ping-pong (the default on Hopper) */
    H3_CUDA_ATTENTION_WGMMA_SIMPLE = 4  /* one barrier per tile: the first version, kept as a cross-check */
} h3_cuda_attention_path;

/* Sets the path for later calls; returns the previous setting. */
h3_cuda_attention_path h3_backend_cuda_set_attention_path(h3_backend *b, h3_cuda_attention_path path);
/* Name of the kernel an attention call with these arguments runs now. */
const char *h3_backend_cuda_attention_kernel(h3_backend *b, const h3_tensor *o, const h3_tensor *q,
                                             const h3_tensor *k, const h3_tensor *v, int n_heads, int n_kv_heads,
                                             int head_dim, int causal);

#ifdef __cplusplus
}
#endif
#endif
