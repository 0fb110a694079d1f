/* h3_ops_vsa_check.c - the checks of the VSA-H3 attention op (h3_ops_vsa.h). */
#include "backend/h3_ops_check_impl.h"

int h3_backend_has_vsa_attention(const h3_backend *b) { return b->ops->vsa_attention != NULL; }

/* The tile tables' shapes and the scalars; their values are the plan
 * builder's invariants (h3_vsa.c), checked again by the CPU kernel. */
static int vsa_tiles_ok(h3_backend *b, const h3_vsa_tiles *t, int64_t S) {
    if (!t) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "vsa_attention: no tile tables");
        return 0;
    }
    int64_t n = t->num_tiles, P = t->num_prefix_tiles;
    if (n < 1 || P < 0 || P > n || t->tile_elems < 1 || (n > P && (t->topk < 1 || t->topk > n - P)) ||
        n * t->tile_elems < S) {
        h3_backend_fail(b, H3_ERR_INTERNAL, "vsa_attention: %lld tiles (%lld prefix) of %d rows, top-k %lld for %lld rows",
                        (long long)n, (long long)P, t->tile_elems, (long long)t->topk, (long long)S);
        return 0;
    }
    const h3_tensor *tables[] = {&t->tile_sizes, &t->tile_order, &t->untile_index};
    const int64_t want[] = {n, S, S};
    for (int i = 0; i < 3; i++)
        if (!ok_tensor(b, "vsa_attention", "a tile table", tables[i])) return 0;
        else if (tables[i]->dtype != H3_I32 || h3_tensor_numel(tables[i]) != want[i]) {
            h3_backend_fail(b, H3_ERR_INTERNAL, "vsa_attention: tile table %d must be i32 [%lld]", i, (long long)want[i]);
            return 0;
        }
    return 1;
}

void h3_op_vsa_attention(h3_backend *b, h3_tensor *o, const h3_tensor *q, const h3_tensor *k, const h3_tensor *v,
                         const h3_tensor *gate, const h3_vsa_tiles *tiles, int n_heads, int head_dim) {
    GUARD(b);
    if (!b->ops->vsa_attention) {
        h3_backend_fail(b, H3_ERR_UNSUPPORTED, "vsa_attention: the %s backend has no VSA-H3 kernel", b->ops->name);
        return;
    }
    NEED(b, "vsa_attention", "o", o); NEED(b, "vsa_attention", "q", q);
    NEED(b, "vsa_attention", "k", k); NEED(b, "vsa_attention", "v", v);
    if (gate) NEED(b, "vsa_attention", "gate", gate);
    int64_t S = h3_tensor_rows(q), W = (int64_t)n_heads * head_dim;
    REQUIRE(b, n_heads > 0 && head_dim > 0, "vsa_attention: %d heads of %d", n_heads, head_dim);
    const h3_tensor *all[] = {o, k, v, gate};
    for (int i = 0; i < 4; i++)
        REQUIRE(b, !all[i] || (h3_tensor_rows(all[i]) == S && h3_tensor_cols(all[i]) == W && all[i]->dtype == q->dtype),
                "vsa_attention: o, k, v and gate must be %s [%lld, %lld] like q", h3_dtype_name(q->dtype), (long long)S,
                (long long)W);
    REQUIRE(b, h3_tensor_cols(q) == W && is_float(q), "vsa_attention: q is not a float [S, %d x %d]", n_heads, head_dim);
    REQUIRE(b, o->data != q->data && o->data != k->data && o->data != v->data && (!gate || o->data != gate->data),
            "vsa_attention: o aliases an input");
    if (!vsa_tiles_ok(b, tiles, S)) return;
    b->ops->vsa_attention(b, o, q, k, v, gate, tiles, n_heads, head_dim);
}
