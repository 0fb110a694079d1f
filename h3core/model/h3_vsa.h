/* h3_vsa.h - VSA-H3, the block-sparse attention FastH3's VSA students were
 * trained with (docs/spec/fasth3-vsa.md §3): its parameters, the number of
 * key tiles kept (h3_vsa_topk) and the tiling plan of one request. The op
 * that runs it is h3_op_vsa_attention (backend/h3_ops_vsa.h); the CPU
 * backend's float32 reference of the coarse stage (tile means, scores,
 * selection, the compressed branch) is backend/cpu/h3_cpu_vsa.h.
 *
 * The plan is built once per request from the packed layout:
 *
 *   [ text | keyframe cond | audio ]  prefix: each segment cut into chunks of
 *                                     tile_elems rows on its own (a tile never
 *                                     straddles two segments; the last one of
 *                                     a segment may be partial)
 *   [ video (T, h, w) ]               cut into tile_t x tile_h x tile_w blocks,
 *                                     t-major, then h, then w; rows inside a
 *                                     block in (t, h, w) order; edge blocks
 *                                     partial
 *
 * Tile j holds tile_sizes[j] <= tile_elems valid rows. In the padded buffer
 * of the reference (n·tile_elems rows) tile j occupies [j·tile_elems,
 * j·tile_elems + size) and its remaining rows are zero; untile_index maps
 * each packed row to that slot. tile_order lists the packed rows slot by
 * slot without the pads, so tile j is tile_order[tile_start[j] ..
 * tile_start[j+1]).
 *
 * Selection ("exempt", the FastH3 contract): every query tile attends every
 * prefix key tile; a video query tile additionally attends its top-k video
 * key tiles by coarse score, k = max(1, min(ceil((1 − sparsity)·n_video),
 * n_video)), ties going to the lower tile index; prefix query tiles attend
 * everything. k == n_video is exactly dense. */
#ifndef H3_VSA_H
#define H3_VSA_H

#include <stdint.h>

#include "model/h3_dit_layout.h"
#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define H3_VSA_MAX_SEGMENTS 3 /* text, keyframe cond, audio */
#define H3_VSA_DEFAULT_SPARSITY 0.9f

typedef struct h3_vsa_params {
    float sparsity;             /* fraction of video key tiles dropped, [0, 1) */
    int tile_t, tile_h, tile_w; /* video tile in tokens; (4, 4, 4) = 64 is the trained contract */
} h3_vsa_params;

/* Sparsity 0.9, tile 4x4x4. */
h3_vsa_params h3_vsa_params_default(void);
/* Sparsity in [0, 1), tile sides >= 1, at most 4096 rows per tile. */
h3_status_code h3_vsa_params_check(const h3_vsa_params *params, h3_status *status);

/* Video key tiles each video query tile keeps: compute_topk of the
 * reference, evaluated on the shortest decimal that reads back as the
 * float `sparsity` (so 0.9f behaves as Python's 0.9: 60 of 600 tiles, not
 * 61). Clamped to [1, num_video_tiles]; 0 when there are no video tiles. */
int64_t h3_vsa_topk(float sparsity, int64_t num_video_tiles);

typedef struct h3_vsa_plan {
    h3_vsa_params params;
    int tile_elems;                            /* tile_t·tile_h·tile_w, also the prefix chunk length */
    int num_segments;                          /* non-empty prefix segments */
    int64_t segments[H3_VSA_MAX_SEGMENTS];     /* their lengths, in packed order */
    int64_t grid[3];                           /* video tokens (T, h, w) */
    int64_t seq_len, prefix_len;               /* S, rows before the video */
    int64_t num_tiles, num_prefix_tiles, num_video_tiles;
    int64_t padded_len;                        /* num_tiles · tile_elems */
    int64_t topk;                              /* h3_vsa_topk(sparsity, num_video_tiles) */
    int32_t *tile_sizes;                       /* [num_tiles] valid rows per tile, >= 1 */
    int32_t *tile_start;                       /* [num_tiles + 1] prefix sums of tile_sizes */
    int32_t *tile_order;                       /* [seq_len] packed row of each non-pad slot */
    int32_t *untile_index;                     /* [seq_len] padded slot of each packed row */
} h3_vsa_plan;

/* A plan for prefix segments (zeros are dropped) followed by a T x h x w
 * video token grid. */
h3_status_code h3_vsa_plan_make(const int64_t *segments, int num_segments, int64_t T, int64_t h, int64_t w,
                                const h3_vsa_params *params, h3_vsa_plan **out, h3_status *status);
/* The plan of a packed DiT layout: segments (text, cond, audio), video grid
 * (T, H_lat/ph, W_lat/pw). */
h3_status_code h3_vsa_plan_from_layout(const h3_dit_layout *layout, const h3_vsa_params *params,
                                       h3_vsa_plan **out, h3_status *status);
void h3_vsa_plan_free(h3_vsa_plan *plan);

#ifdef __cplusplus
}
#endif
#endif
