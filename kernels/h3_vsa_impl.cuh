/* h3_vsa_impl.cuh - what the VSA-H3 files share: the tile geometry and key
 * lists the kernels agree on, where a call keeps what it builds in the
 * scratch, and the launchers h3_vsa.cu (the dispatch) calls: stages 1-5 in
 * h3_vsa_prep.cu, the block-sparse kernels in h3_vsa_sm80.cu (generic,
 * mma.sync) and h3_vsa_sm90.cu (wgmma, and its probes). Private to
 * kernels/. */
#ifndef H3_VSA_IMPL_CUH
#define H3_VSA_IMPL_CUH

#include <stddef.h>
#include <stdint.h>

#include "kernels/h3_kernels_vsa.h"

namespace {

const int kRows = 64;    /* rows (and keys) of a tile block on the tensor-core paths */
const int kGenWarps = 8; /* padded query slots per block of the generic kernel */

/* Valid rows of tile j, clamped to [0, E] (k_vsa_slot_fill reports a table
 * whose sizes fall outside 1..E; the clamp keeps every read in bounds). */
__device__ __forceinline__ int tile_size(const int32_t *sizes, int64_t j, int E) {
    int s = sizes[j];
    return s < 0 ? 0 : s > E ? E : s;
}

/* CTA b of a fine kernel -> (head, query tile): the H·P prefix query tiles
 * first, then the video ones. */
__device__ __forceinline__ void vsa_item(int64_t b, int64_t n, int64_t P, int H, int *h, int64_t *qt) {
    int64_t pre = (int64_t)H * P;
    if (b < pre) {
        *h = (int)(b / P);
        *qt = b - (int64_t)*h * P;
    } else {
        b -= pre;
        *h = (int)(b / (n - P));
        *qt = P + (b - (int64_t)*h * (n - P));
    }
}

/* The key tiles one query tile attends: all n for a dense row (a prefix
 * query tile, or every tile when topk covers all video tiles), else its
 * list of P + topk. */
struct key_list {
    const int32_t *list;
    int64_t count;
    __device__ __forceinline__ int64_t at(int64_t e) const { return list ? (int64_t)list[e] : e; }
};

__device__ __forceinline__ key_list vsa_keys(const int32_t *lists, int64_t n, int64_t P, int64_t topk, int dense_all,
                                             int h, int64_t qt) {
    key_list k;
    if (dense_all || qt < P) {
        k.list = nullptr;
        k.count = n;
    } else {
        k.list = lists + ((int64_t)h * (n - P) + (qt - P)) * (P + topk);
        k.count = P + topk;
    }
    return k;
}

/* Byte offset of 16-byte chunk `ch` (8 channels) of row `row` in a tile
 * image of 64 rows kept as dh/64 boxes of 64 rows × 128 bytes, each in the
 * 128-byte swizzle (chunk ^ row%8 inside every 1024-byte atom): the K-major
 * layout a SWIZZLE_128B wgmma descriptor describes, and one that ldmatrix
 * reads without bank conflicts. Q and K tiles are kept this way. */
__device__ __forceinline__ uint32_t sw_rows(int row, int ch) {
    return (uint32_t)((ch >> 3) * (kRows * 128) + row * 128 + (((ch & 7) ^ (row & 7)) << 4));
}
/* The transposed image (Vᵀ): row = channel d, its 64 keys = 8 chunks of one
 * swizzled 128-byte row. */
__device__ __forceinline__ uint32_t sw_t(int d, int kc) { return (uint32_t)(d * 128 + ((kc ^ (d & 7)) << 4)); }

template <int DH> __host__ __device__ constexpr int img_bytes() { return kRows * DH * 2; }

/* CTAs of `kernel` with `threads` threads and `smem` bytes of dynamic shared
 * memory that fit on one SM (-1 when the query fails). */
template <typename K> int occupancy(K kernel, int threads, int smem) {
    int blocks = 0;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 (int)cudaSharedmemCarveoutMaxShared);
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, (size_t)smem);
    if (e != cudaSuccess) cudaGetLastError();
    return e == cudaSuccess ? blocks : -1;
}

} /* namespace */

namespace h3k_vsa {

/* What a call computes and where it keeps it in the scratch. */
struct vsa_layout {
    int path;
    bool dense, gate, scores, images;
    size_t slot, qp, kp, vp, s, w, oc, lists, qimg, kimg, vimg, total;
};

/* Fine-kernel arguments shared by the three paths. */
struct fine_args {
    const float *oc;
    const int32_t *lists, *slot;
    int dense_all;
    float scale_log2;
};

/* The launchers; each returns the CUDA error of its launches. sc is the
 * call's scratch, laid out as L says. */

/* h3_vsa_prep.cu: 1. the slot table; 2. the tile means and (tensor-core
 * paths) the tile images; 3-5. the coarse scores, the selection and the
 * compressed branch, as far as the call needs them. */
int launch_slot_table(const h3k_vsa_args *a, const vsa_layout &L, char *sc, cudaStream_t stream);
int launch_tile_means(const h3k_vsa_args *a, const vsa_layout &L, char *sc, cudaStream_t stream);
int launch_coarse(const h3k_vsa_args *a, const vsa_layout &L, char *sc, cudaStream_t stream);
/* h3_vsa_sm80.cu: 6. the generic and the mma.sync block-sparse kernels */
int launch_generic(const h3k_vsa_args *a, const fine_args &f, cudaStream_t stream);
int launch_mma(const h3k_vsa_args *a, const vsa_layout &L, char *sc, const fine_args &f, cudaStream_t stream);
int generic_ctas_per_sm();
int mma_ctas_per_sm(const h3k_vsa_args *a);
/* h3_vsa_sm90.cu: 6. the wgmma block-sparse kernel, with the consumer
 * a->pipelined picks, and its probes (H3K_VSA_PROBE_*) */
int launch_wgmma(const h3k_vsa_args *a, const vsa_layout &L, char *sc, const fine_args &f, cudaStream_t stream);
int launch_probe(const h3k_vsa_args *a, const vsa_layout &L, int which, cudaStream_t stream);
int wgmma_ctas_per_sm(const h3k_vsa_args *a);
} /* namespace h3k_vsa */

#endif
