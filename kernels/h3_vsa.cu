/* h3_vsa.cu - VSA-H3 block-sparse attention on the GPU
 * (docs/spec/fasth3-vsa.md §3): which kernels a call runs, where it keeps
 * what it builds in the scratch, and the launch of its stages in order.
 * The op's contract is h3_op_vsa_attention (backend/h3_backend.h); the
 * definition it is checked against is the CPU op
 * (backend/cpu/h3_backend_cpu_vsa.c and the coarse stage of model/h3_vsa.c).
 * Stages 1-5 are in h3_vsa_prep.cu, the block-sparse kernels of stage 6 in
 * h3_vsa_sm80.cu (generic, mma.sync) and h3_vsa_sm90.cu (wgmma).
 *
 * One call, all on the stream, nothing read back by the host:
 *  1. slot table: slot[j·E + r] = packed row of row r of tile j, −1 for the
 *     pad slots (from untile_index; E = tile_elems).
 *  2. per (tile, head): the tile means of q, k, v, each channel summed in
 *     double in row order, rounded once and divided in float (h3_vsa_pool
 *     bit for bit); on the tensor-core paths also each tile's 64 × dh image
 *     in the exact shared-memory layout the fine kernels read (q and k row
 *     by row in 128-byte-swizzled boxes of 64 channels, v transposed), so a
 *     key tile is one contiguous copy wherever its rows lie in the packed
 *     sequence, and pad rows are zero.
 *  3. coarse scores q̄·k̄ᵀ/sqrt(dh) over all tiles, each dot product summed in
 *     double in channel order: h3_vsa_scores bit for bit. That is what makes
 *     the selection below exactly the CPU op's, near-ties included.
 *  4. per (head, query tile): the softmax of its score row for the
 *     compressed branch, and for a video query tile its top-k video key
 *     tiles by an exact radix select over order-preserving keys (descending,
 *     NaN first, ties to the lower index: the order h3_vsa_select sorts by),
 *     compacted in ascending order after the prefix tiles 0..P−1.
 *  5. the compressed branch O_c = softmax(S)·v̄ (fp32 tiled GEMM).
 *  6. the block-sparse kernel, one CTA per (head, query tile), the prefix
 *     query tiles (dense rows, n key tiles each, ~9× the work of a video
 *     tile) launched first so that they do not form the tail. It runs the
 *     dense kernels' inner loop (h3_attention_sm*.cu) over the tile's key list
 *     instead of over all keys, masks the pad keys of partial tiles by tile
 *     size (zero keys alone are not −inf), and writes
 *         o[row] = softmax(q·Kᵀ)·V + round(O_c[tile])·gate[row]
 *     straight to the packed rows (the un-permutation).
 * Paths, as for dense attention:
 *  - wgmma (sm_90a; bf16, head_dim 128, 64-row tiles): 160 threads, one
 *    consumer warpgroup (the 64 query rows) and one producer warp that
 *    moves Q and each listed key tile's K and Vᵀ images with bulk copies
 *    into a three-stage mbarrier ring; S = Q·Kᵀ is m64n64k16 from shared
 *    memory, O += P·V is m64n128k16 with P from registers, as in
 *    k_attn_wgmma2. 113 KB of shared memory, so two CTAs share an SM and
 *    one's softmax, prologue and epilogue run under the other's GEMMs.
 *  - mma.sync (sm_80+; bf16/f16, head_dim 64/128, tiles of <= 64 rows):
 *    k_attn_mma's loop: 4 warps × 16 query rows, 64-key tiles through two
 *    cp.async stages, ldmatrix from the swizzled images.
 *  - generic: any float dtype, head_dim <= 256, any tile size; one warp per
 *    query row, keys read straight from the packed tensors.
 * All paths compute the softmax in float32 with exp2 and a running max and
 * round P to the input dtype for P·V, as the dense kernels do. */
#include <math.h>
#include <stdint.h>

#include "kernels/h3_common.cuh" /* kLog2e, aligned16 */
#include "kernels/h3_vsa_impl.cuh"

namespace {

inline size_t up256(size_t x) { return (x + 255) & ~(size_t)255; }

h3k_vsa::vsa_layout layout_of(const h3k_vsa_args *a) {
    h3k_vsa::vsa_layout L = {};
    size_t n = (size_t)a->num_tiles, P = (size_t)a->num_prefix_tiles, H = (size_t)a->n_heads,
           dh = (size_t)a->head_dim;
    L.path = h3k_vsa_path(a);
    L.dense = a->topk >= a->num_tiles - a->num_prefix_tiles;
    L.gate = a->gate != nullptr;
    L.scores = !L.dense || L.gate;
    L.images = L.path != H3K_ATTN_GENERIC;
    size_t off = 0;
    auto take = [&off](size_t bytes) {
        size_t at = off;
        off += up256(bytes);
        return at;
    };
    L.slot = take(n * (size_t)a->tile_elems * 4);
    if (L.scores) {
        L.qp = take(H * n * dh * 4);
        L.kp = take(H * n * dh * 4);
        L.s = take(H * n * n * 4);
    }
    if (L.gate) {
        L.vp = take(H * n * dh * 4);
        L.w = take(H * n * n * 4);
        L.oc = take(H * n * dh * 4);
    }
    if (!L.dense) L.lists = take(H * (n - P) * (P + (size_t)a->topk) * 4);
    if (L.images) {
        size_t img = H * n * kRows * dh * 2;
        L.qimg = take(img);
        L.kimg = take(img);
        L.vimg = take(img);
    }
    L.total = off;
    return L;
}

} /* namespace */

extern "C" int h3k_vsa_path(const h3k_vsa_args *a) {
    bool tc = (a->dt == H3K_BF16 || a->dt == H3K_F16) && (a->head_dim == 64 || a->head_dim == 128) &&
              a->tile_elems <= kRows && a->sm >= 80 && aligned16(a->q) && aligned16(a->k) && aligned16(a->v) &&
              aligned16(a->o) && aligned16(a->gate);
    bool wg = tc && a->dt == H3K_BF16 && a->head_dim == 128 && a->tile_elems == kRows && a->sm == 90;
    switch (a->path) {
    case H3K_ATTN_GENERIC: return H3K_ATTN_GENERIC;
    case H3K_ATTN_MMA: return tc ? H3K_ATTN_MMA : H3K_ATTN_GENERIC;
    default: return wg ? H3K_ATTN_WGMMA : tc ? H3K_ATTN_MMA : H3K_ATTN_GENERIC;
    }
}

extern "C" size_t h3k_vsa_scratch(const h3k_vsa_args *a) { return layout_of(a).total; }

extern "C" void h3k_vsa_results(const h3k_vsa_args *a, const int32_t **lists, const float **scores) {
    h3k_vsa::vsa_layout L = layout_of(a);
    char *sc = (char *)a->scratch;
    if (lists) *lists = sc && !L.dense ? (const int32_t *)(sc + L.lists) : nullptr;
    if (scores) *scores = sc && L.scores ? (const float *)(sc + L.s) : nullptr;
}

extern "C" int h3k_vsa_attention(const h3k_vsa_args *a, cudaStream_t stream) {
    int64_t n = a->num_tiles, P = a->num_prefix_tiles, E = a->tile_elems;
    if (a->S <= 0) return 0;
    if (n < 1 || P < 0 || P > n || E < 1 || a->n_heads < 1 || a->n_heads > 65535 || a->head_dim < 1 ||
        a->head_dim > 256 || (n > P && a->topk < 1) || n * E > 0x7fffffff || a->S > 0x7fffffff ||
        (int64_t)a->n_heads * n > 0x7fffffff || n * E / kGenWarps + 1 > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    h3k_vsa::vsa_layout L = layout_of(a);
    if (!a->scratch || a->scratch_size < L.total) return (int)cudaErrorInvalidValue;
    char *sc = (char *)a->scratch;
    bool timed = a->events[0] && a->events[1] && a->events[2] && a->events[3];
    cudaError_t e;
    int rc;

    if (timed && (e = cudaEventRecord(a->events[0], stream)) != cudaSuccess) return (int)e;
    if ((rc = h3k_vsa::launch_slot_table(a, L, sc, stream)) != 0) return rc;
    if ((rc = h3k_vsa::launch_tile_means(a, L, sc, stream)) != 0) return rc;
    if (timed && (e = cudaEventRecord(a->events[1], stream)) != cudaSuccess) return (int)e;
    if ((rc = h3k_vsa::launch_coarse(a, L, sc, stream)) != 0) return rc;
    if (timed && (e = cudaEventRecord(a->events[2], stream)) != cudaSuccess) return (int)e;

    h3k_vsa::fine_args f;
    f.oc = L.gate ? (const float *)(sc + L.oc) : nullptr;
    f.lists = L.dense ? nullptr : (const int32_t *)(sc + L.lists);
    f.slot = (const int32_t *)(sc + L.slot);
    f.dense_all = L.dense;
    f.scale_log2 = (float)(1.0 / sqrt((double)a->head_dim)) * kLog2e;
    switch (L.path) {
    case H3K_ATTN_WGMMA: rc = h3k_vsa::launch_wgmma(a, L, sc, f, stream); break;
    case H3K_ATTN_MMA: rc = h3k_vsa::launch_mma(a, L, sc, f, stream); break;
    default: rc = h3k_vsa::launch_generic(a, f, stream); break;
    }
    if (rc == 0 && timed) rc = (int)cudaEventRecord(a->events[3], stream);
    return rc;
}

/* A probe of the Hopper fine kernel (H3K_VSA_PROBE_*) over what the last
 * call with these arguments left in the scratch (images, lists). */
extern "C" int h3k_vsa_probe(const h3k_vsa_args *a, int which, cudaStream_t stream) {
    if (h3k_vsa_path(a) != H3K_ATTN_WGMMA || !a->scratch) return (int)cudaErrorNotSupported;
    if (which != H3K_VSA_PROBE_COPIES && which != H3K_VSA_PROBE_MATH) return (int)cudaErrorInvalidValue;
    h3k_vsa::vsa_layout L = layout_of(a);
    if (a->scratch_size < L.total) return (int)cudaErrorInvalidValue;
    return h3k_vsa::launch_probe(a, L, which, stream);
}

extern "C" int h3k_vsa_ctas_per_sm(const h3k_vsa_args *a) {
    switch (h3k_vsa_path(a)) {
    case H3K_ATTN_WGMMA: return h3k_vsa::wgmma_ctas_per_sm(a);
    case H3K_ATTN_MMA: return h3k_vsa::mma_ctas_per_sm(a);
    default: return h3k_vsa::generic_ctas_per_sm();
    }
}
