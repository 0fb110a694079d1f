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

/* Which of this build's kernel images a GPU of compute capability `sm`
 * (major*10 + minor) runs, without a CUDA context (`capabilities` asks it
 * with NVML's numbers; creating a backend refuses a GPU it says no to):
 * `images` gets the image the portable kernels load ("sm_120", or PTX
 * compiled at the first launch), `attention` and `vsa` the kernel family
 * the dispatch picks for the DiT's bf16 head_dim 128 calls ("wgmma-fa3-n192"
 * and "wgmma" on sm_90, "mma.sync" elsewhere). Returns 0, with the reason
 * in `images`, when no image runs there. */
int h3_cuda_kernels_for(int sm, char *images, size_t images_size, const char **attention, const char **vsa);

/* Exact mode (h3_backend_cuda_create_exact in h3_backend.h)? */
int h3_backend_cuda_is_exact(h3_backend *b);

/* The backend's only stream, as a cudaStream_t. */
void *h3_backend_cuda_stream(h3_backend *b);
const char *h3_backend_cuda_device_name(h3_backend *b);
/* Compute capability as major*10 + minor (90 on H100/H200). */
int h3_backend_cuda_sm(h3_backend *b);

/* t = uniform [lo, hi) from a hash of (seed, element index), on the device. */
void h3_backend_cuda_fill_uniform(h3_backend *b, h3_tensor *t, uint64_t seed, float lo, float hi);

/* The attention kernels a backend may use. AUTO (the default): the best
 * kernel that fits each call (wgmma on Hopper for bf16 head_dim 128,
 * mma.sync for other bf16/f16 calls with head_dim 64 or 128, the generic
 * kernel otherwise). MMA: nothing newer than mma.sync; GENERIC: the generic
 * kernel only. A tensor-parallel group sets the family every rank has, so
 * each head is computed by the same code on whichever rank holds it. */
typedef enum h3_cuda_attention_path {
    H3_CUDA_ATTENTION_AUTO = 0,
    H3_CUDA_ATTENTION_GENERIC = 1,
    H3_CUDA_ATTENTION_MMA = 2
} h3_cuda_attention_path;

/* Sets the path for later calls; returns the previous setting (an
 * experimental variant set through h3_backend_cuda_bench.h reads as AUTO). */
h3_cuda_attention_path h3_backend_cuda_set_attention_path(h3_backend *b, h3_cuda_attention_path path);

#ifdef __cplusplus
}
#endif
#endif
