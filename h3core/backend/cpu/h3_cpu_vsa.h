/* h3_cpu_vsa.h - the coarse stage of VSA-H3 (docs/spec/fasth3-vsa.md §3) as
 * the CPU backend computes it: tile means, tile scores, the per-query-tile
 * top-k selection and the compressed branch, as plain host functions.
 *
 * They are the float32 reference of h3_op_vsa_attention (h3_cpu_vsa.c runs
 * them per head); tests call them to check the CUDA kernels, which must
 * select the same tiles. The plan whose tables they read is model/h3_vsa.h's. */
#ifndef H3_CPU_VSA_H
#define H3_CPU_VSA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* All on one head: x_tiled holds its rows in tile order (row r = packed row
 * tile_order[r]), `ld` floats apart. */

/* pooled[j] = Σ rows of tile j / size_j (sum in double, rounded once, then
 * divided in float32: the masked mean, pads excluded). pooled [n, dh]. */
void h3_vsa_pool(const float *x_tiled, int64_t ld, const int32_t *tile_sizes, int64_t num_tiles, int head_dim,
                 float *pooled);
/* scores[i, j] = (qp[i]·kp[j]) / sqrt(dh) over all n tiles, [n, n]. */
void h3_vsa_scores(const float *q_pooled, const float *k_pooled, int64_t num_tiles, int head_dim, float *scores);
/* The key tiles of query tile r in ascending order into keys[] (room for
 * num_tiles); returns their count. scores_row = scores[r]. work holds
 * 2·num_tiles floats. */
int64_t h3_vsa_select(const float *scores_row, int64_t r, int64_t num_tiles, int64_t num_prefix_tiles, int64_t topk,
                      int32_t *keys, float *work);
/* compressed[i] = softmax(scores[i])·v_pooled over all n tiles, [n, dh].
 * work holds num_tiles floats. */
void h3_vsa_compress(const float *scores, const float *v_pooled, int64_t num_tiles, int head_dim, float *compressed,
                     float *work);

#ifdef __cplusplus
}
#endif
#endif
