/* h3_comm_cpu.c - the communicator of CPU ranks: threads of one process
 * sharing memory, so after the rendezvous every rank reads its peers'
 * tensors directly.
 *
 * No two ranks ever write the same bytes, so no locking is needed between
 * the rendezvous and the completion barrier:
 *   all-reduce  rank r owns elements [r·n/N, (r+1)·n/N): it adds them over the
 *               ranks in rank order and writes the sum into every rank's tensor;
 *   all-gather  rank r copies its own chunk into every other rank's tensor;
 *   broadcast   every rank but the root copies the root's tensor.
 * The completion barrier keeps every tensor alive and unchanged until all
 * ranks are done with it. A group of one rank moves nothing, so it accepts
 * tensors of any backend (a single GPU runs the TP code path this way). */
#include "parallel/h3_comm_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REDUCE_BLOCK 2048

static h3_status_code cpu_check(h3_comm *c, h3_backend *b, h3_comm_call kind, const h3_tensor *t,
                                h3_status *status) {
    int size = c->group->size;
    if (size == 1) return H3_OK;
    if (b && strcmp(h3_backend_name(b), "cpu") != 0)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "cpu communicator: rank %d computes on the %s backend; tensors must be in host memory "
                       "(use the NCCL communicator for GPUs)",
                       c->rank, h3_backend_name(b));
    if (kind == H3_CALL_ALL_REDUCE && t->dtype != H3_F32)
        return h3_fail(status, H3_ERR_UNSUPPORTED, "cpu communicator: all-reduce of a %s tensor (f32 only)",
                       h3_dtype_name(t->dtype));
    if (kind == H3_CALL_ALL_GATHER && (t->ndim < 1 || t->shape[0] % size != 0))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "all-gather: the first dim (%lld) must hold %d equal chunks, one per rank",
                       (long long)(t->ndim ? t->shape[0] : 0), size);
    return H3_OK;
}

static h3_status_code cpu_all_reduce_sum(h3_comm *c, h3_backend *b, h3_tensor *t, h3_status *status) {
    h3_comm_group *g = c->group;
    int size = g->size;
    if (size > 1) {
        int64_t n = h3_tensor_numel(t);
        int64_t lo = n * c->rank / size, hi = n * (c->rank + 1) / size;
        float acc[REDUCE_BLOCK];
        for (int64_t e0 = lo; e0 < hi; e0 += REDUCE_BLOCK) {
            int64_t m = hi - e0 < REDUCE_BLOCK ? hi - e0 : REDUCE_BLOCK;
            memcpy(acc, (const float *)g->slots[0].data + e0, (size_t)m * sizeof(float));
            for (int r = 1; r < size; r++) {
                const float *x = (const float *)g->slots[r].data + e0;
                for (int64_t j = 0; j < m; j++) acc[j] += x[j];
            }
            for (int r = 0; r < size; r++) memcpy((float *)g->slots[r].data + e0, acc, (size_t)m * sizeof(float));
        }
    }
    h3_comm_complete(c);
    return H3_OK;
}

static h3_status_code cpu_all_gather(h3_comm *c, h3_backend *b, h3_tensor *t, h3_status *status) {
    h3_comm_group *g = c->group;
    int size = g->size;
    if (size > 1) {
        size_t chunk = h3_tensor_nbytes(t) / (size_t)size, at = chunk * (size_t)c->rank;
        for (int r = 0; r < size; r++)
            if (r != c->rank) memcpy((char *)g->slots[r].data + at, (const char *)t->data + at, chunk);
    }
    h3_comm_complete(c);
    return H3_OK;
}

static h3_status_code cpu_broadcast(h3_comm *c, h3_backend *b, h3_tensor *t, int root, h3_status *status) {
    h3_comm_group *g = c->group;
    if (g->size > 1 && c->rank != root) memcpy(t->data, g->slots[root].data, h3_tensor_nbytes(t));
    h3_comm_complete(c);
    return H3_OK;
}

static const h3_comm_ops cpu_ops = {
    .name = "cpu",
    .check = cpu_check,
    .all_reduce_sum = cpu_all_reduce_sum,
    .all_gather = cpu_all_gather,
    .broadcast = cpu_broadcast,
};

h3_status_code h3_comm_group_create_cpu(int size, h3_comm_group **out, h3_status *status) {
    *out = NULL;
    if (size < 1 || size > H3_COMM_MAX_RANKS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "cpu communicator: %d ranks (1..%d)", size, H3_COMM_MAX_RANKS);
    *out = h3_comm_group_new(size, &cpu_ops, NULL);
    return *out ? H3_OK : h3_fail(status, H3_ERR_NO_MEMORY, "cpu communicator: out of memory");
}
