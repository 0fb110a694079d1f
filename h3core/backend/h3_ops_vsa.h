/* h3_ops_vsa.h - VSA-H3, the block-sparse attention FastH3's VSA students
 * were trained with, as an op. Part of the op interface: h3_backend.h
 * includes it. */
#ifndef H3_OPS_VSA_H
#define H3_OPS_VSA_H

#include <stdint.h>

#include "backend/h3_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* VSA-H3 block-sparse attention over one packed sequence
 * (docs/spec/fasth3-vsa.md §3; the tiling and the selection rule are in
 * model/h3_vsa.h). The tile tables come from an h3_vsa_plan, uploaded once
 * per request. */
typedef struct h3_vsa_tiles {
    int64_t num_tiles;        /* n */
    int64_t num_prefix_tiles; /* P: text/cond/audio tiles (always attended; dense as queries) */
    int64_t topk;             /* video key tiles per video query tile; n − P means dense */
    int tile_elems;           /* rows of a padded tile (64) */
    h3_tensor tile_sizes;     /* I32 [n]: valid rows of each tile, 1..tile_elems */
    h3_tensor tile_order;     /* I32 [S]: packed row of each non-pad slot, tile by tile */
    h3_tensor untile_index;   /* I32 [S]: padded slot (tile·tile_elems + offset) of each packed row */
} h3_vsa_tiles;
/* q, k, v, o [S, n_heads·head_dim] in packed row order, gate the same or
 * NULL (no compressed branch). Per head: tile means (fp32) of q, k, v;
 * scores = q̄·k̄ᵀ/sqrt(dh) over all tiles; each query tile attends its
 * selected key tiles' valid rows (softmax, scale 1/sqrt(dh)); then
 *   o[row] += softmax(scores[tile(row)])·v̄ ⊙ gate[row]
 * for every row, prefix tiles included. With topk == n − P and gate NULL
 * this is exactly dense attention (to rounding). o must not alias the
 * inputs. Backends without the kernel fail with H3_ERR_UNSUPPORTED. */
void h3_op_vsa_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                         const h3_tensor *gate, const h3_vsa_tiles *tiles, int n_heads, int head_dim);
/* Non-zero when the backend implements h3_op_vsa_attention. */
int h3_backend_has_vsa_attention(const h3_backend *b);

#ifdef __cplusplus
}
#endif
#endif
