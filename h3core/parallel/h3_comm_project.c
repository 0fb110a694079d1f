/* h3_comm_project.c - the projection communicator (h3_comm.h): rank 0 of a
 * group of N runs alone on one device, so h3-bench can time what one rank of
 * a TP-N group computes before a machine with N GPUs is at hand.
 *
 * Every collective becomes a device copy of the bytes it would move, on the
 * rank's own stream, so the rank pays the memory traffic of receiving them
 * (not the link's latency or bandwidth, which the caller adds from the
 * traffic counters with a bandwidth it states). Rank 0's values are not the
 * group's: the other ranks' partial sums never arrive. The copies keep them
 * finite and the shapes real, which is all a timing needs. */
#include "parallel/h3_comm_impl.h"

#include <string.h>

/* A copy of t into a temporary of the same size, freed in stream order. */
static void copy_through(h3_backend *b, const h3_tensor *t) {
    size_t mark = h3_arena_mark(b);
    h3_tensor tmp = h3_new(b, t->dtype, t->ndim, t->shape);
    if (tmp.data) h3_op_copy(b, &tmp, t);
    h3_arena_reset(b, mark);
}

static h3_status_code project_all_reduce_sum(h3_comm *c, h3_backend *b, h3_tensor *t, h3_status *status) {
    (void)c;
    copy_through(b, t);
    return h3_backend_check(b, status);
}

/* The other ranks' chunks: rank 0's chunk copied into each of them. */
static h3_status_code project_all_gather(h3_comm *c, h3_backend *b, h3_tensor *t, h3_status *status) {
    int size = c->group->size;
    int64_t rows = h3_tensor_rows(t), chunk = rows / size;
    h3_tensor mine = h3_tensor_rows_view(t, 0, chunk);
    for (int r = 1; r < size; r++) {
        h3_tensor theirs = h3_tensor_rows_view(t, r * chunk, chunk);
        h3_op_copy(b, &theirs, &mine);
    }
    return h3_backend_check(b, status);
}

static h3_status_code project_broadcast(h3_comm *c, h3_backend *b, h3_tensor *t, int root, h3_status *status) {
    if (root != c->rank) copy_through(b, t);
    return h3_backend_check(b, status);
}

static h3_status_code project_check(h3_comm *c, h3_backend *b, h3_comm_call kind, const h3_tensor *t,
                                    h3_status *status) {
    (void)b;
    int size = c->group->size;
    if (kind == H3_CALL_ALL_GATHER && (t->ndim < 1 || h3_tensor_rows(t) % size != 0))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "all-gather: the first dim (%lld) must hold %d equal chunks, one per rank",
                       (long long)(t->ndim ? t->shape[0] : 0), size);
    return H3_OK;
}

static const h3_comm_ops project_ops = {
    .name = "projection",
    .solo = 1,
    .check = project_check,
    .all_reduce_sum = project_all_reduce_sum,
    .all_gather = project_all_gather,
    .broadcast = project_broadcast,
};

h3_status_code h3_comm_group_create_projection(int size, h3_comm_group **out, h3_status *status) {
    *out = NULL;
    if (size < 1 || size > H3_COMM_MAX_RANKS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "projection communicator: %d ranks (1..%d)", size,
                       H3_COMM_MAX_RANKS);
    *out = h3_comm_group_new(size, &project_ops, NULL);
    return *out ? H3_OK : h3_fail(status, H3_ERR_NO_MEMORY, "projection communicator: out of memory");
}
