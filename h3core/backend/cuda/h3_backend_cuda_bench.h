/* h3_backend_cuda_bench.h - hooks of the CUDA backend that only
 * benchmarks (tools/h3-bench) and the GPU tests use: which kernel a call
 * runs, the experimental VSA consumers, the VSA scratch, stage timing and
 * the fine kernel's probes. The product never calls these. Defined only
 * when h3core is built with CUDA (H3_HAVE_CUDA). */
#ifndef H3_BACKEND_CUDA_BENCH_H
#define H3_BACKEND_CUDA_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/h3_backend_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Attention kernel variants, for benchmarks and tests: the experimental
 * kernels are reachable only through this call (the product picks through
 * h3_backend_cuda_set_attention_path; nothing is read from the
 * environment). AUTO (the default) picks wgmma on Hopper for bf16 head_dim
 * 128 non-causal calls (k_attn_fa3 with 192-key tiles) and for f16/bf16
 * head_dim 64 non-causal ones (k_attn_fa3 at head_dim 64 with 192-key
 * tiles: the video VAE's ViT), mma.sync for other bf16/f16 calls with
 * head_dim 64 or 128, and the generic kernel otherwise.
 * A forced path that does not fit a call falls back to the next one down. */
typedef enum h3_cuda_attention_variant {
    H3_CUDA_VARIANT_AUTO = 0,
    H3_CUDA_VARIANT_GENERIC = 1,
    H3_CUDA_VARIANT_MMA = 2,
    H3_CUDA_VARIANT_WGMMA = 3,        /* k_attn_wgmma2: warp-specialised, ping-pong, one GEMM of cover */
    H3_CUDA_VARIANT_WGMMA_SIMPLE = 4, /* one barrier per tile: the first version, kept as a cross-check */
    H3_CUDA_VARIANT_WGMMA_FA3 = 5,    /* FlashAttention-3 turn order, 3 K/V stages, ping-pong (wgmma-fa3) */
    H3_CUDA_VARIANT_WGMMA_FA3_S2 = 6, /* the same with 2 stages (wgmma-fa3-s2) */
    H3_CUDA_VARIANT_WGMMA_FA3_NOPP = 7, /* 3 stages, no ping-pong token between warpgroups (wgmma-fa3-nopp) */
    H3_CUDA_VARIANT_WGMMA_FA3_LAZY = 8, /* 2 stages, ping-pong, O rescaled only when the max grows > 2^8 */
    H3_CUDA_VARIANT_WGMMA_FA3_N176 = 9, /* the same with 176-key tiles (wgmma-fa3-n176) */
    H3_CUDA_VARIANT_WGMMA_FA3_N192 = 10, /* the same with 192-key tiles (wgmma-fa3-n192): the default on Hopper */
    /* AUTO, with f16/bf16 head_dim 64 non-causal calls on Hopper (the video VAE's ViT) forced onto
     * k_attn_fa3 at head_dim 64 with 128-key tiles (wgmma-d64) or 192-key tiles (wgmma-d64-n192, what AUTO picks: the
     * faster on the H200, 2026-12-04). */
    H3_CUDA_VARIANT_WGMMA_D64 = 11,
    H3_CUDA_VARIANT_WGMMA_D64_N192 = 12
} h3_cuda_attention_variant;

/* Parts of the Hopper default attention kernel (wgmma-fa3-n192) at a call's
 * shape, timed alone for h3-bench --attention: the K/Vᵀ pack pass, the
 * kernel on packed images, and the kernel with its softmax left out (o is
 * then wrong), with part of its exponentials on the FMA pipe, or none. ms:
 * the median of reps launches. UNSUPPORTED off Hopper. */
typedef enum h3_cuda_attention_probe {
    H3_CUDA_ATTN_PROBE_PACK = 0,
    H3_CUDA_ATTN_PROBE_KERNEL = 1,
    H3_CUDA_ATTN_PROBE_NOSOFTMAX = 2,
    H3_CUDA_ATTN_PROBE_POLY_QUARTER = 3, /* a quarter of the exponentials on the FMA pipe (o right, within bf16) */
    H3_CUDA_ATTN_PROBE_POLY_HALF = 4,    /* half of them */
    H3_CUDA_ATTN_PROBE_NOEXP = 5         /* no exponential at all (o wrong): what MUFU.EX2 costs */
} h3_cuda_attention_probe;
h3_status_code h3_backend_cuda_attention_probe_ms(h3_backend *b, h3_cuda_attention_probe which, h3_tensor *o,
                                                  const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                                                  int n_heads, int head_dim, int reps, float *ms,
                                                  h3_status *status);

/* Sets the variant for later calls; returns the previous setting. */
/* precision=fp8's linear in its two steps, for h3-bench's --fp8 section:
 * x [M,K] quantised per row into codes (an H3_F8E4M3 tensor [M,K]; its
 * scale pointer is ignored) and scales (F32 [M]), then the FP8 GEMM
 * y = (codes·wᵀ) scaled by both rows' scales, w an FP8 weight. Errors are
 * the backend's sticky ones. */
void h3_backend_cuda_fp8_quantize(h3_backend *b, h3_tensor *codes, h3_tensor *scales, const h3_tensor *x);
void h3_backend_cuda_fp8_gemm(h3_backend *b, h3_tensor *y, const h3_tensor *codes, const h3_tensor *scales,
                              const h3_tensor *w);
/* How many FP8 GEMMs so far ran unscaled with their per-row scales applied
 * by a pass after them (cuBLASLt offered no outer-vector-scaled algorithm
 * for the shape, as on Hopper); 0 when every one was scaled inside. */
uint64_t h3_backend_cuda_fp8_scaled_after(const h3_backend *b);

h3_cuda_attention_variant h3_backend_cuda_set_attention_variant(h3_backend *b, h3_cuda_attention_variant path);

/* Name of the kernel an attention call with these arguments runs now. */
const char *h3_backend_cuda_attention_kernel(h3_backend *b, const h3_tensor *o, const h3_tensor *q,
                                             const h3_tensor *k, const h3_tensor *v, int n_heads, int n_kv_heads,
                                             int head_dim, int causal);

/* VSA-H3 (h3_op_vsa_attention). The kernel follows the attention setting
 * above: wgmma on Hopper for bf16, head_dim 128 and 64-row tiles; mma.sync
 * for bf16/f16, head_dim 64/128 and tiles of at most 64 rows; the generic
 * kernel otherwise (MMA or GENERIC forces the lower ones). Name of the
 * kernel a call with these parameters runs now ("wgmma", "wgmma-pipelined",
 * "wgmma-paired", "mma.sync", "generic"). */
const char *h3_backend_cuda_vsa_kernel(h3_backend *b, h3_dtype dtype, int head_dim, int tile_elems);
/* The Hopper VSA kernel's consumer: 0 (the default) one tile at a time,
 * 1 FlashAttention-3's intra-warpgroup overlap (the softmax of tile j+1
 * while P·V of tile j runs), 2 paired (two query tiles of a head a CTA,
 * the union of their key lists streamed once; other values: 1). Returns
 * the previous setting. */
int h3_backend_cuda_set_vsa_pipelined(h3_backend *b, int on);
/* For tests and benchmarks: copies what the last h3_op_vsa_attention left in
 * the backend's scratch to the host, when no op has used the scratch since
 * (else an error). lists: the key-tile list of every video query tile,
 * [n_heads][n − P][P + topk] int32 (the prefix tiles 0..P−1, then the top-k
 * video tiles ascending); 0 entries for a dense call. scores: the coarse
 * scores [n_heads][n][n] f32; 0 entries for a dense call without a gate.
 * Either may be NULL; a length that differs from what the call left is an
 * error that gives the right one. */
h3_status_code h3_backend_cuda_vsa_inspect(h3_backend *b, int32_t *lists, size_t lists_len, float *scores,
                                           size_t scores_len, h3_status *status);
/* CTAs of the block-sparse kernel that fit on one SM (-1 when the query fails). */
int h3_backend_cuda_vsa_ctas_per_sm(h3_backend *b, h3_dtype dtype, int head_dim, int tile_elems);
/* Stage timing (benchmarks): with profiling on, every later VSA call records
 * CUDA events around its stages; h3_backend_cuda_vsa_stage_ms gives the last
 * call's milliseconds (it waits for it): ms[0] slot table, tile means and
 * images; ms[1] scores, selection and compressed branch; ms[2] the
 * block-sparse kernel. */
h3_status_code h3_backend_cuda_vsa_profile(h3_backend *b, int on, h3_status *status);
h3_status_code h3_backend_cuda_vsa_stage_ms(h3_backend *b, float ms[3], h3_status *status);
/* Benchmarks: where the Hopper block-sparse kernel's time goes. Re-runs a
 * probe of the last VSA call's fine kernel reps times over what the call
 * left in the scratch; *ms = the fastest. COPIES: its tile copies alone
 * (same grid, stages and key lists, no math). MATH: its consumer alone (every
 * listed tile's GEMMs and softmax over tiles already in shared memory, no
 * copies). Neither writes anything. H3_ERR_UNSUPPORTED off the wgmma path. */
typedef enum h3_cuda_vsa_probe { H3_CUDA_VSA_PROBE_COPIES = 0, H3_CUDA_VSA_PROBE_MATH = 1 } h3_cuda_vsa_probe;
h3_status_code h3_backend_cuda_vsa_probe_ms(h3_backend *b, h3_cuda_vsa_probe which, int reps, float *ms,
                                            h3_status *status);

/* The float32 conv1d's path, for benchmarks and tests: 0 (the default) chosen per shape, 1 im2col +
 * cuBLASLt, 2 the implicit-GEMM kernel (where neither fits a call, the direct kernel runs either way).
 * Returns the previous setting. */
int h3_backend_cuda_set_conv1d_path(h3_backend *b, int path);

#ifdef __cplusplus
}
#endif
#endif
