/* h3_backend_cuda.h - what only the CUDA backend offers beyond the op
 * interface of h3_backend.h: its stream (NCCL enqueues on it; benchmarks
 * time with CUDA events on it), facts about its device, random fills done on
 * the device (billions of random weights are made this way) and the choice
 * of attention kernel (the ranks of a tensor-parallel group agree on one).
 * What only benchmarks and tests use is in h3_backend_cuda_bench.h. Defined
 * only when h3core is built with CUDA (H3_HAVE_CUDA). */
#ifndef H3_BACKEND_CUDA_H
#define H3_BACKEND_CUDA_H

#include <stdint.h>

#include "backend/h3_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (0 when there is no driver or no device);
 * why, when none, goes to `why` (may be NULL). */
int h3_cuda_device_count(char *why, size_t why_size);

/* Exact mode (h3_backend_cuda_create_exact in h3_backend.h)? */
int h3_backend_cuda_is_exact(h3_backend *b);

/* The backend's only stream, as a cudaStream_t. */
void *h3_backend_cuda_stream(h3_backend *b);
const char *h3_backend_cuda_device_name(h3_backend *b);
/* Compute capability as major*10 + minor (90 on H100/H200). */
int h3_backend_cuda_sm(h3_backend *b);

/* t = uniform [lo, hi) from a hash of (seed, element index), on the device. */
void h3_backend_cuda_fill_uniform(h3_backend *b, h3_tensor *t, uint64_t seed, float lo, float hi);

/* Attention kernels. AUTO (the default, or H3_CUDA_ATTENTION=auto|wgmma|mma|generic
 * in the environment; also wgmma-simple and wgmma-fa3[-s2|-nopp|-lazy|-n176|-n192]) picks wgmma on Hopper
 * for bf16 head_dim 128 non-causal
 * calls, mma.sync for other bf16/f16 calls with head_dim 64 or 128, and the
 * generic kernel otherwise. A forced path that does not fit a call falls
 * back to the next one down. */
typedef enum h3_cuda_attention_path {
    H3_CUDA_ATTENTION_AUTO = 0,
    H3_CUDA_ATTENTION_GENERIC = 1,
    H3_CUDA_ATTENTION_MMA = 2,
    H3_CUDA_ATTENTION_WGMMA = 3,        /* k_attn_wgmma2: warp-specialised, ping-pong, one GEMM of cover */
    H3_CUDA_ATTENTION_WGMMA_SIMPLE = 4, /* one barrier per tile: the first version, kept as a cross-check */
    H3_CUDA_ATTENTION_WGMMA_FA3 = 5,    /* FlashAttention-3 turn order, 3 K/V stages, ping-pong (wgmma-fa3) */
    H3_CUDA_ATTENTION_WGMMA_FA3_S2 = 6, /* the same with 2 stages (wgmma-fa3-s2) */
    H3_CUDA_ATTENTION_WGMMA_FA3_NOPP = 7, /* 3 stages, no ping-pong token between warpgroups (wgmma-fa3-nopp) */
    H3_CUDA_ATTENTION_WGMMA_FA3_LAZY = 8, /* 2 stages, ping-pong, O rescaled only when the max grows > 2^8 */
    H3_CUDA_ATTENTION_WGMMA_FA3_N176 = 9, /* the same with 176-key tiles (wgmma-fa3-n176) */
    H3_CUDA_ATTENTION_WGMMA_FA3_N192 = 10 /* the same with 192-key tiles (wgmma-fa3-n192): the default on Hopper */
} h3_cuda_attention_path;

/* Sets the path for later calls; returns the previous setting. */
h3_cuda_attention_path h3_backend_cuda_set_attention_path(h3_backend *b, h3_cuda_attention_path path);

#ifdef __cplusplus
}
#endif
#endif
