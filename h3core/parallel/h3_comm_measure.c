/* h3_comm_measure.c - the communicator of measuring ranks (the memory plan,
 * backend/measure/): every collective keeps its rendezvous, so the ranks of
 * a measuring engine run in the order and with the checks of a real group,
 * and moves nothing (the tensors hold no bytes). What a real communicator
 * allocates on the backend for a collective is the model code's and
 * h3_tp.c's arena temporaries, which the measuring backends tally. */
#include "parallel/h3_comm_impl.h"

static h3_status_code measure_all_reduce_sum(h3_comm *c, h3_backend *b, h3_tensor *t, h3_status *status) {
    (void)b, (void)t, (void)status;
    h3_comm_complete(c);
    return H3_OK;
}

static h3_status_code measure_all_gather(h3_comm *c, h3_backend *b, h3_tensor *t, h3_status *status) {
    (void)b, (void)t, (void)status;
    h3_comm_complete(c);
    return H3_OK;
}

static h3_status_code measure_broadcast(h3_comm *c, h3_backend *b, h3_tensor *t, int root, h3_status *status) {
    (void)b, (void)t, (void)root, (void)status;
    h3_comm_complete(c);
    return H3_OK;
}

static const h3_comm_ops measure_ops = {
    .name = "measure",
    .all_reduce_sum = measure_all_reduce_sum,
    .all_gather = measure_all_gather,
    .broadcast = measure_broadcast,
};

h3_status_code h3_comm_group_create_measure(int size, h3_comm_group **out, h3_status *status) {
    *out = NULL;
    if (size < 1 || size > H3_COMM_MAX_RANKS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "measuring communicator: %d ranks (1..%d)", size,
                       H3_COMM_MAX_RANKS);
    *out = h3_comm_group_new(size, &measure_ops, NULL);
    return *out ? H3_OK : h3_fail(status, H3_ERR_NO_MEMORY, "measuring communicator: out of memory");
}
