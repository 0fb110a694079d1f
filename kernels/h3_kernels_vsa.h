/* h3_kernels_vsa.h - VSA-H3 block-sparse attention on the GPU
 * (docs/spec/fasth3-vsa.md §3; the op's contract is h3_op_vsa_attention in
 * backend/h3_backend.h). h3_vsa.cu dispatches, h3_vsa_prep.cu builds the
 * tile means, coarse scores and key-tile lists, h3_vsa_sm80.cu and
 * h3_vsa_sm90.cu hold the block-sparse kernels.
 *
 * Everything runs on the stream: the tile tables are expanded into a slot
 * table, q/k/v are mean-pooled per tile (bit-identical to
 * h3_vsa_pool/h3_vsa_scores, so the selection equals the CPU op's), each
 * video query tile's key-tile list is selected and compacted on the
 * device, then the block-sparse kernel (paths as for h3k_attention: wgmma
 * on sm_90a for bf16/head_dim 128/64-row tiles, mma.sync on sm_80+ for
 * bf16/f16, head_dim 64/128, tiles <= 64 rows, and a generic kernel for the
 * rest) adds the compressed branch and writes the rows back in packed
 * order. A table entry out of range sets H3K_ERR_VSA_TABLE in err, a short
 * top-k list H3K_ERR_VSA_SELECT (h3_kernels.h). */
#ifndef H3_KERNELS_VSA_H
#define H3_KERNELS_VSA_H

#include "kernels/h3_kernels.h"
#include "kernels/h3_kernels_attention.h" /* H3K_ATTN_*: the paths */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct h3k_vsa_args {
    void *o;
    const void *q, *k, *v, *gate; /* [S, n_heads·head_dim] packed rows; gate NULL: no compressed branch */
    int dt;                       /* F32, BF16 or F16, shared by all five */
    int64_t S;
    int n_heads, head_dim;
    int64_t num_tiles, num_prefix_tiles, topk; /* topk >= num_tiles − num_prefix_tiles: dense */
    int tile_elems;
    const int32_t *tile_sizes;   /* device, [num_tiles] */
    const int32_t *untile_index; /* device, [S]: padded slot of each packed row */
    int path;                    /* H3K_ATTN_*: AUTO/WGMMA pick the best fit, MMA, GENERIC */
    int pipelined;               /* wgmma path: 0 the simple consumer, 1 the FA3-style pipelined one, 2 paired */
    int sm;
    void *scratch;
    size_t scratch_size;
    int *err;
    cudaEvent_t events[4]; /* all set: recorded before the call, after the tile means and images, after the
                              scores, selection and compressed branch, after the block-sparse kernel */
} h3k_vsa_args;

size_t h3k_vsa_scratch(const h3k_vsa_args *a);
/* Benchmarks: probes of the wgmma fine kernel over what the last call with these arguments left in the
 * scratch. COPIES: its tile copies alone (same grid, stages and lists, no math, nothing written). MATH: its
 * simple consumer alone (the whole list's GEMMs and softmax over three resident stages, no copies, nothing
 * written). cudaErrorNotSupported off the wgmma path. */
enum { H3K_VSA_PROBE_COPIES = 0, H3K_VSA_PROBE_MATH = 1 };
int h3k_vsa_probe(const h3k_vsa_args *a, int which, cudaStream_t stream);
/* The kernel (H3K_ATTN_WGMMA, _MMA or _GENERIC) a call with these arguments runs. */
int h3k_vsa_path(const h3k_vsa_args *a);
int h3k_vsa_attention(const h3k_vsa_args *a, cudaStream_t stream);
/* CTAs of the block-sparse kernel a call with these arguments runs that fit on one SM. */
int h3k_vsa_ctas_per_sm(const h3k_vsa_args *a);
/* Where a call with these arguments leaves, in its scratch, the key-tile
 * lists it selected ([n_heads][n − P][P + topk] int32: the prefix tiles,
 * then the top-k video tiles ascending, per video query tile) and the
 * coarse scores ([n_heads][n][n] f32); NULL for what such a call does not
 * build (dense calls have no lists; dense calls without a gate no scores). */
void h3k_vsa_results(const h3k_vsa_args *a, const int32_t **lists, const float **scores);

#ifdef __cplusplus
}
#endif
#endif
