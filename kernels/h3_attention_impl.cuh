/* h3_attention_impl.cuh - what the attention files share: the dispatch
 * (h3_attention.cu) sizes the scratch and calls the launchers of the
 * kernels, which live with their kernels in h3_attention_sm80.cu (generic,
 * mma.sync) and h3_attention_sm90.cu (wgmma); the tile table of the Hopper
 * kernel k_attn_fa3. Private to kernels/. */
#ifndef H3_ATTENTION_IMPL_CUH
#define H3_ATTENTION_IMPL_CUH

#include <stdint.h>

#include "kernels/h3_kernels_attention.h"

namespace {

const int kGenWarps = 8; /* query rows per block of the generic kernel */

const int kWgTile = 128;                /* query rows, keys and head_dim of a tile of the wgmma kernels */
const int kWgTileBytes = 128 * 128 * 2; /* one Q, K or Vᵀ tile */

/* k_attn_fa3's geometry at head dim DH (64 or 128) with KN-key tiles, in
 * bytes of 16-bit elements: the 128-row Q tile and the K image as DH/64
 * boxes of 128-byte rows (128 and KN rows), the Vᵀ image as ceil(KN/64)
 * boxes of DH channel rows × 64 keys (the last one partly used when 64 does
 * not divide KN); the shared memory of STAGES stages of K and Vᵀ, the 1024
 * bytes of alignment slack and the 4 mbarriers a stage. */
template <int DH, int KN> struct Fa3Tile {
    static_assert(DH == 64 || DH == 128, "k_attn_fa3 takes head_dim 64 or 128");
    static constexpr int q_bytes = 128 * DH * 2;
    static constexpr int k_bytes = KN * DH * 2;
    static constexpr int v_bytes = (KN + 63) / 64 * (DH * 128);
    static constexpr int image_bytes = k_bytes + v_bytes; /* a key tile's in the scratch */
    template <int STAGES> static constexpr int smem() { return q_bytes + STAGES * image_bytes + 1024 + 32 * STAGES; }
};

/* The tile table of k_attn_fa3 (FlashAttention-3's tile_size_fwd_sm90 in
 * the form of a list): one row per H3K_ATTN_* path, X(path, head dim,
 * stages, ping-pong, lazy rescaling, keys a tile). h3_attention.cu launches
 * and sizes the scratch from it, h3_attention_sm90.cu instantiates it.
 * Head dim 128 (bf16, the DiT): the default is the n192 row (H200,
 * 2026-12-03: 1-1.6% over 128-key tiles); head dim 64 (f16/bf16, the video
 * VAE's ViT): the d64-n192 row (H200, 2026-12-04: the video decode 4342 ms
 * against 4366 with 128-key tiles). */
#define H3_FA3_VARIANTS(X)                              \
    X(H3K_ATTN_FA3, 128, 3, true, false, 128)           \
    X(H3K_ATTN_FA3_S2, 128, 2, true, false, 128)        \
    X(H3K_ATTN_FA3_NOPP, 128, 3, false, false, 128)     \
    X(H3K_ATTN_FA3_LAZY, 128, 2, true, true, 128)       \
    X(H3K_ATTN_FA3_N176, 128, 2, true, true, 176)       \
    X(H3K_ATTN_FA3_N192, 128, 2, true, true, 192)       \
    X(H3K_ATTN_D64, 64, 2, true, false, 128)            \
    X(H3K_ATTN_D64_N192, 64, 2, true, false, 192)

/* Keys of k_attn_wgmma's transposed V: Skv rounded up to 8 (16-byte rows). */
inline int64_t padded_keys(int64_t Skv) { return (Skv + 7) / 8 * 8; }
/* Key tiles of k_attn_wgmma2 (128 keys) and of k_attn_fa3 (kn keys). */
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
/* k_attn_fa3, the rows of H3_FA3_VARIANTS: bf16 at head_dim 128, f16 or bf16 at 64, non-causal */
template <int DH, int STAGES, bool PINGPONG, bool LAZY, int KN>
int launch_fa3(const h3k_attention_args *a, cudaStream_t stream);
int probe_fa3(const h3k_attention_args *a, int which, cudaStream_t stream); /* H3K_ATTN_PROBE_* */
} /* namespace h3k_attn */

#endif
