/* h3_attention_impl.cuh - what the attention files share: the dispatch
 * (h3_attention.cu) sizes the scratch and calls the launchers of the
 * kernels, which live with their kernels in h3_attention_sm80.cu (generic,
 * mma.sync) and h3_attention_sm90.cu (wgmma). Private to kernels/. */
#ifndef H3_ATTENTION_IMPL_CUH
#define H3_ATTENTION_IMPL_CUH

#include <stdint.h>

#include "kernels/h3_kernels_attention.h"

namespace {

const int kGenWarps = 8; /* query rows per block of the generic kernel */

const int kWgTile = 128;                /* query rows, keys and head_dim of a tile of the wgmma kernels */
const int kWgTileBytes = 128 * 128 * 2; /* one Q, K or Vᵀ tile */

/* Byte sizes of k_attn_fa3's tile images for KN keys: K as two 64-channel
 * boxes of KN rows × 128 bytes; Vᵀ as ceil(KN/64) boxes of 128 channel rows
 * × 64 keys (the last one partly used when 64 does not divide KN). */
template <int KN> __host__ __device__ constexpr int fa3_kbytes() { return KN * 256; }
template <int KN> __host__ __device__ constexpr int fa3_vbytes() { return (KN + 63) / 64 * 16384; }

/* Byte sizes of k_attn_d64's (head_dim 64) tile images for KN keys (128 or
 * 192): K as one box of KN rows × 128 bytes, Vᵀ as KN/64 boxes of 64 channel
 * rows × 64 keys. */
template <int KN> __host__ __device__ constexpr int d64_kbytes() { return KN * 128; }
template <int KN> __host__ __device__ constexpr int d64_vbytes() { return KN / 64 * 64 * 128; }

/* Keys of k_attn_wgmma's transposed V: Skv rounded up to 8 (16-byte rows). */
inline int64_t padded_keys(int64_t Skv) { return (Skv + 7) / 8 * 8; }
/* Key tiles of k_attn_wgmma2 (128 keys) and of k_attn_fa3 and k_attn_d64 (kn keys). */
inline int64_t wg2_tiles(const h3k_attention_args *a) { return (a->Skv + kWgTile - 1) / kWgTile; }
inline int64_t fa3_tiles(const h3k_attention_args *a, int kn) { return (a->Skv + kn - 1) / kn; }

} /* namespace */

/* The launchers: each enqueues its kernel (and its pre-passes) for a call
 * that fits it and returns the CUDA error. */
namespace h3k_attn {
/* h3_attention_sm80.cu */
int launch_generic(const h3k_attention_args *a, cudaStream_t stream);
template <typename T> int launch_mma_dt(const h3k_attention_args *a, cudaStream_t stream); /* __nv_bfloat16, __half */
/* h3_attention_sm90.cu; these need a->scratch of h3k_attention_scratch(a) bytes */
int launch_wgmma(const h3k_attention_args *a, cudaStream_t stream); /* k_attn_wgmma (WGMMA_SIMPLE) */
int launch_wgmma2(const h3k_attention_args *a, cudaStream_t stream);
template <int STAGES, bool PINGPONG, bool LAZY, int KN>
int launch_fa3(const h3k_attention_args *a, cudaStream_t stream);
int probe_fa3(const h3k_attention_args *a, int which, cudaStream_t stream); /* H3K_ATTN_PROBE_* */
/* h3_attention_sm90_d64.cu; f16 or bf16, head_dim 64, non-causal, KN = 128 or 192 keys a tile; a->scratch as above */
template <int KN> int launch_d64(const h3k_attention_args *a, cudaStream_t stream);
} /* namespace h3k_attn */

#endif
