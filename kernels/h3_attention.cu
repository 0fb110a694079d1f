/* h3_attention.cu - scaled dot-product attention: which of our kernels
 * runs a call, the scratch it needs, and the launch.
 *
 * Three paths, picked per call from the device and the problem
 * (h3k_attention_path):
 *  - wgmma (sm_90a, Hopper; h3_attention_sm90.cu): k_attn_fa3, one body
 *    over the head dim, its variants the rows of H3_FA3_VARIANTS
 *    (h3_attention_impl.cuh): bf16 head_dim 128 non-causal (the DiT's hot
 *    case; the earlier Hopper kernels as variants) and f16/bf16 head_dim 64
 *    non-causal (the video VAE's ViT, the D64 rows); a D64 variant is AUTO
 *    for every other call.
 *  - mma.sync (sm_80 and later; h3_attention_sm80.cu): bf16/f16, head_dim
 *    64 or 128, causal or not. The only tensor-core path on every GPU but
 *    9.0: Blackwell (10.x, 12.x) has no wgmma, and the sm_90a image runs
 *    on 9.0 alone, hence sm == 90 below (kernels/meson.build: the images).
 *  - generic (h3_attention_sm80.cu): any float dtype, head_dim <= 256.
 * A forced path that does not fit a call falls back to the next one down.
 * All paths compute the softmax in float32 with exp2 and a running max,
 * and round P to the input dtype for the P·V product (the tensor-core
 * paths) exactly as FlashAttention does. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/h3_attention_impl.cuh" /* tile sizes, the launchers */
#include "kernels/h3_common.cuh"         /* aligned16 */

namespace {

bool mma_fits(const h3k_attention_args *a) {
    return (a->dt == H3K_BF16 || a->dt == H3K_F16) && (a->head_dim == 64 || a->head_dim == 128) && a->sm >= 80 &&
           aligned16(a->q) && aligned16(a->k) && aligned16(a->v) && aligned16(a->o);
}

bool wgmma_fits(const h3k_attention_args *a) {
    return a->dt == H3K_BF16 && a->head_dim == 128 && !a->causal && a->sm == 90 && aligned16(a->q) &&
           aligned16(a->k) && aligned16(a->v) && aligned16(a->o);
}

bool d64_fits(const h3k_attention_args *a) {
    return (a->dt == H3K_F16 || a->dt == H3K_BF16) && a->head_dim == 64 && !a->causal && a->sm == 90 &&
           aligned16(a->q) && aligned16(a->k) && aligned16(a->v) && aligned16(a->o);
}

} /* namespace */

extern "C" int h3k_attention_path(const h3k_attention_args *a) {
    bool wg = wgmma_fits(a), mma = mma_fits(a);
    switch (a->path) {
    case H3K_ATTN_GENERIC: return H3K_ATTN_GENERIC;
    case H3K_ATTN_MMA: return mma ? H3K_ATTN_MMA : H3K_ATTN_GENERIC;
    case H3K_ATTN_WGMMA_SIMPLE: return wg ? H3K_ATTN_WGMMA_SIMPLE : mma ? H3K_ATTN_MMA : H3K_ATTN_GENERIC;
    case H3K_ATTN_FA3:
    case H3K_ATTN_FA3_S2:
    case H3K_ATTN_FA3_NOPP:
    case H3K_ATTN_FA3_LAZY:
    case H3K_ATTN_FA3_N176:
    case H3K_ATTN_FA3_N192: return wg ? a->path : mma ? H3K_ATTN_MMA : H3K_ATTN_GENERIC;
    case H3K_ATTN_WGMMA: return wg ? H3K_ATTN_WGMMA : mma ? H3K_ATTN_MMA : H3K_ATTN_GENERIC;
    case H3K_ATTN_D64:
    case H3K_ATTN_D64_N192:
        if (d64_fits(a)) return a->path;
        return wg ? H3K_ATTN_FA3_N192 : mma ? H3K_ATTN_MMA : H3K_ATTN_GENERIC; /* as AUTO */
    /* AUTO on Hopper: k_attn_fa3, 2 stages, ping-pong, 192-key tiles (H200, 2026-12-03, three runs in two
     * sessions: 1-1.6% over 128-key tiles, 615-618 TF/s at S 34,710-37,966 against cuDNN SDPA's 578) */
    /* AUTO for head_dim 64 (the video VAE's ViT, f16) on Hopper: k_attn_fa3 at head_dim 64 with 192-key tiles
     * (H200, 2026-12-04: the whole video decode 4342 ms against 4734 on mma.sync, 4366 with 128-key tiles) */
    default:
        if (d64_fits(a)) return H3K_ATTN_D64_N192;
        return wg ? H3K_ATTN_FA3_N192 : mma ? H3K_ATTN_MMA : H3K_ATTN_GENERIC;
    }
}

extern "C" const char *h3k_attention_path_name(int path) {
    switch (path) {
    case H3K_ATTN_GENERIC: return "generic";
    case H3K_ATTN_MMA: return "mma.sync";
    case H3K_ATTN_WGMMA: return "wgmma";
    case H3K_ATTN_WGMMA_SIMPLE: return "wgmma-simple";
    case H3K_ATTN_FA3: return "wgmma-fa3";
    case H3K_ATTN_FA3_S2: return "wgmma-fa3-s2";
    case H3K_ATTN_FA3_NOPP: return "wgmma-fa3-nopp";
    case H3K_ATTN_FA3_LAZY: return "wgmma-fa3-lazy";
    case H3K_ATTN_FA3_N176: return "wgmma-fa3-n176";
    case H3K_ATTN_FA3_N192: return "wgmma-fa3-n192";
    case H3K_ATTN_D64: return "wgmma-d64";
    case H3K_ATTN_D64_N192: return "wgmma-d64-n192";
    default: return "auto";
    }
}

extern "C" size_t h3k_attention_scratch(const h3k_attention_args *a) {
    int path = h3k_attention_path(a);
    switch (path) { /* k_attn_fa3: the K and Vᵀ images of every kv head's key tiles */
#define H3_FA3_SCRATCH(P, DH, STAGES, PINGPONG, LAZY, KN) \
    case P: return (size_t)a->n_kv_heads * (size_t)fa3_tiles(a, KN) * (size_t)Fa3Tile<DH, KN>::image_bytes;
        H3_FA3_VARIANTS(H3_FA3_SCRATCH)
#undef H3_FA3_SCRATCH
    default: break;
    }
    if (path == H3K_ATTN_WGMMA) return 2 * (size_t)a->n_kv_heads * (size_t)wg2_tiles(a) * kWgTileBytes;
    if (path == H3K_ATTN_WGMMA_SIMPLE) return (size_t)a->n_kv_heads * 128 * (size_t)padded_keys(a->Skv) * 2;
    return 0;
}

extern "C" int h3k_attention_probe(const h3k_attention_args *a, int which, cudaStream_t stream) {
    h3k_attention_args n192 = *a;
    n192.path = H3K_ATTN_FA3_N192;
    if (h3k_attention_path(&n192) != H3K_ATTN_FA3_N192) return (int)cudaErrorNotSupported;
    return h3k_attn::probe_fa3(&n192, which, stream);
}

extern "C" int h3k_attention(const h3k_attention_args *a, cudaStream_t stream) {
    if (a->Sq <= 0 || a->n_heads <= 0) return 0;
    if (a->Sq > (int64_t)0x7fffffff * kGenWarps || a->n_heads > 65535 || a->head_dim > 256 || a->head_dim <= 0)
        return (int)cudaErrorInvalidValue;
    switch (h3k_attention_path(a)) {
    case H3K_ATTN_WGMMA: return h3k_attn::launch_wgmma2(a, stream);
    case H3K_ATTN_WGMMA_SIMPLE: return h3k_attn::launch_wgmma(a, stream);
#define H3_FA3_LAUNCH(P, DH, STAGES, PINGPONG, LAZY, KN) \
    case P: return h3k_attn::launch_fa3<DH, STAGES, PINGPONG, LAZY, KN>(a, stream);
        H3_FA3_VARIANTS(H3_FA3_LAUNCH)
#undef H3_FA3_LAUNCH
    case H3K_ATTN_MMA:
        return a->dt == H3K_BF16 ? h3k_attn::launch_mma_dt<__nv_bfloat16>(a, stream)
                                 : h3k_attn::launch_mma_dt<__half>(a, stream);
    default: return h3k_attn::launch_generic(a, stream);
    }
}
