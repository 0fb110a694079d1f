/* h3_comm_impl.h - what a communicator implementation provides, and the
 * host rendezvous they share. Private to h3core.
 *
 * h3_comm.c runs the checks and the rendezvous of every collective, then
 * calls the implementation to move the data. Between h3_comm_rendezvous and
 * h3_comm_complete every rank's slot (what it called, with its host pointer)
 * is stable, so the CPU implementation reads its peers' memory there. */
#ifndef H3_COMM_IMPL_H
#define H3_COMM_IMPL_H

#include <pthread.h>

#include "parallel/h3_comm.h"

typedef enum h3_comm_call {
    H3_CALL_ALL_REDUCE = 1,
    H3_CALL_ALL_GATHER,
    H3_CALL_BROADCAST,
    H3_CALL_BARRIER,
    H3_CALL_EXCHANGE
} h3_comm_call;

/* What one rank brought to a rendezvous. */
typedef struct h3_comm_slot {
    h3_comm_call kind;
    long call;      /* the rank's collective number since the last reset */
    size_t bytes;
    int dtype;      /* h3_dtype, or -1 */
    int root;
    void *data;     /* the tensor's memory (host for the CPU implementation) */
} h3_comm_slot;

typedef struct h3_comm_ops {
    const char *name;
    /* Non-zero: rank 0 stands for the whole group and is the only rank that
     * runs (a projection, h3_comm_project.c): no rendezvous, and an exchange
     * hands every rank's slot rank 0's record. */
    int solo;
    /* May this rank's backend and tensor take part? Runs before the
     * rendezvous, so a refusal fails the group cleanly. NULL: always. */
    h3_status_code (*check)(h3_comm *c, h3_backend *b, h3_comm_call kind, const h3_tensor *t, h3_status *status);
    /* Data movement, after a successful rendezvous. */
    h3_status_code (*all_reduce_sum)(h3_comm *c, h3_backend *b, h3_tensor *t, h3_status *status);
    h3_status_code (*all_gather)(h3_comm *c, h3_backend *b, h3_tensor *t, h3_status *status);
    h3_status_code (*broadcast)(h3_comm *c, h3_backend *b, h3_tensor *t, int root, h3_status *status);
    /* A device error or a timeout: abort outstanding device work (NCCL
     * ncclCommAbort) so no rank waits on a peer that is gone. May be NULL. */
    void (*abort_device)(h3_comm_group *g);
    /* Rebuilds what abort_device tore down. May be NULL. */
    h3_status_code (*reset)(h3_comm_group *g, h3_status *status);
    void (*destroy)(h3_comm_group *g);
} h3_comm_ops;

struct h3_comm {
    h3_comm_group *group;
    int rank;
    long calls;
    h3_comm_traffic traffic; /* written by this rank's thread only */
};

struct h3_comm_group {
    const h3_comm_ops *ops;
    void *impl;
    int size;
    h3_comm *ranks;
    h3_comm_slot *slots;
    int *present;        /* arrived at the current rendezvous */
    pthread_mutex_t lock; /* pthread, not GMutex: thread sanitizers understand it */
    pthread_cond_t cond;  /* on CLOCK_MONOTONIC */
    int arrived, completed;
    uint64_t round, complete_round;
    int failed, failed_rank, device_aborted;
    h3_status failure;
    double timeout;
    int fault_rank;
    long fault_call;
};

h3_comm_group *h3_comm_group_new(int size, const h3_comm_ops *ops, void *impl);
/* Waits until every rank brought a matching slot (H3_OK), or the group fails. */
h3_status_code h3_comm_rendezvous(h3_comm *c, const h3_comm_slot *mine, h3_status *status);
/* Waits until every rank finished the data movement of the current call.
 * Never fails: it follows a successful rendezvous, and what lies between
 * (memory copies) cannot fail. */
void h3_comm_complete(h3_comm *c);

#endif
