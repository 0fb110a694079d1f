/* h3_kernels_attention.h - scaled dot-product attention: h3_attention.cu
 * picks the kernel and launches it, h3_attention_sm80.cu (generic,
 * mma.sync) and h3_attention_sm90.cu (wgmma) hold the kernels.
 * Conventions: h3_kernels.h. */
#ifndef H3_KERNELS_ATTENTION_H
#define H3_KERNELS_ATTENTION_H

#include "kernels/h3_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which kernel runs an attention call. */
enum { H3K_ATTN_AUTO = 0, H3K_ATTN_GENERIC = 1, H3K_ATTN_MMA = 2, H3K_ATTN_WGMMA = 3, H3K_ATTN_WGMMA_SIMPLE = 4,
       /* k_attn_fa3 variants (sm_90a; their tiles: H3_FA3_VARIANTS in h3_attention_impl.cuh): bf16 head_dim 128 */
       H3K_ATTN_FA3 = 5, H3K_ATTN_FA3_S2 = 6, H3K_ATTN_FA3_NOPP = 7, H3K_ATTN_FA3_LAZY = 8, H3K_ATTN_FA3_N176 = 9,
       H3K_ATTN_FA3_N192 = 10,
       /* k_attn_fa3 at head_dim 64 with 128- or 192-key tiles: f16/bf16 head_dim 64 non-causal calls; the
        * others as AUTO */
       H3K_ATTN_D64 = 11, H3K_ATTN_D64_N192 = 12 };

typedef struct h3k_attention_args {
    void *o;
    const void *q, *k, *v;
    int dt; /* F32, BF16 or F16: q, k, v and o share it */
    int64_t Sq, Skv;
    int n_heads, n_kv_heads, head_dim, causal;
    float scale;
    int path;           /* H3K_ATTN_*: AUTO picks from the device (sm), dtype and head_dim */
    int sm;             /* compute capability major*10+minor of the device */
    void *scratch;      /* device scratch for the Hopper path (V transposed) */
    size_t scratch_size;
} h3k_attention_args;

/* Device scratch bytes the attention call needs (0 for most paths). */
size_t h3k_attention_scratch(const h3k_attention_args *a);
/* The path AUTO resolves to for these arguments. */
int h3k_attention_path(const h3k_attention_args *a);
int h3k_attention(const h3k_attention_args *a, cudaStream_t stream);
const char *h3k_attention_path_name(int path);

/* Benchmarks (h3-bench --attention): parts of the Hopper default kernel
 * (wgmma-fa3-n192) for these arguments, to say what bounds it. PACK: the
 * K/Vᵀ image pass alone; KERNEL: the attention kernel alone on the images
 * a PACK (or a call) left in a->scratch; NOSOFTMAX: that kernel with its
 * softmax left out (wrong output: the GEMMs, copies and barriers alone).
 * POLY_QUARTER, POLY_HALF: the kernel with a quarter or half of its
 * exponentials computed on the FMA pipe (a cubic) instead of MUFU.EX2 (a
 * right output, within bf16); NOEXP: the kernel with no exponential at all
 * (wrong output: what MUFU.EX2 costs the kernel).
 * cudaErrorNotSupported where that kernel does not fit the call. */
enum { H3K_ATTN_PROBE_PACK = 0, H3K_ATTN_PROBE_KERNEL = 1, H3K_ATTN_PROBE_NOSOFTMAX = 2,
       H3K_ATTN_PROBE_POLY_QUARTER = 3, H3K_ATTN_PROBE_POLY_HALF = 4, H3K_ATTN_PROBE_NOEXP = 5 };
int h3k_attention_probe(const h3k_attention_args *a, int which, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
