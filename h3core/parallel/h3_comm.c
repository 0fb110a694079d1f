/* h3_comm.c - the part of every collective that does not depend on the
 * implementation: health checks, the host rendezvous, failure propagation,
 * timeouts, fault injection, and the host-only exchange and barrier.
 *
 * The rendezvous is a generation-counting barrier under one mutex. The last
 * rank to arrive checks that every rank called the same collective with the
 * same size and releases the round; a failure (abort, mismatch, timeout)
 * wakes every waiter with the group's first error. Waiters test "round
 * released" before "group failed", so a round that was released stays a
 * success for every rank even if an abort lands right after: either every
 * rank moves the data of a collective or none does. */
#include "parallel/h3_comm_impl.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_TIMEOUT_SECONDS 600.0

h3_comm_group *h3_comm_group_new(int size, const h3_comm_ops *ops, void *impl) {
    h3_comm_group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->ranks = calloc((size_t)size, sizeof *g->ranks);
    g->slots = calloc((size_t)size, sizeof *g->slots);
    g->present = calloc((size_t)size, sizeof *g->present);
    if (!g->ranks || !g->slots || !g->present) {
        free(g->ranks);
        free(g->slots);
        free(g->present);
        free(g);
        return NULL;
    }
    g->ops = ops;
    g->impl = impl;
    g->size = size;
    g->failed_rank = -1;
    g->fault_rank = -1;
    g->timeout = DEFAULT_TIMEOUT_SECONDS;
    for (int r = 0; r < size; r++) {
        g->ranks[r].group = g;
        g->ranks[r].rank = r;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, &attr);
    pthread_condattr_destroy(&attr);
    return g;
}

void h3_comm_group_destroy(h3_comm_group *g) {
    if (!g) return;
    if (g->ops->destroy) g->ops->destroy(g);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->cond);
    free(g->ranks);
    free(g->slots);
    free(g->present);
    free(g);
}

h3_comm *h3_comm_group_rank(h3_comm_group *g, int rank) {
    return rank >= 0 && rank < g->size ? &g->ranks[rank] : NULL;
}

int h3_comm_group_size(const h3_comm_group *g) { return g->size; }
const char *h3_comm_group_name(const h3_comm_group *g) { return g->ops->name; }
void h3_comm_group_set_timeout(h3_comm_group *g, double seconds) { g->timeout = seconds > 0 ? seconds : DEFAULT_TIMEOUT_SECONDS; }

int h3_comm_rank(const h3_comm *c) { return c->rank; }
void h3_comm_traffic_get(const h3_comm *c, h3_comm_traffic *out) { *out = c->traffic; }
int h3_comm_size(const h3_comm *c) { return c->group->size; }
h3_comm_group *h3_comm_get_group(h3_comm *c) { return c->group; }

int h3_comm_group_failure(h3_comm_group *g, int *rank, h3_status *status) {
    pthread_mutex_lock(&g->lock);
    int failed = g->failed;
    if (failed && rank) *rank = g->failed_rank;
    if (failed && status) *status = g->failure;
    pthread_mutex_unlock(&g->lock);
    return failed;
}

/* Under the lock: records the first failure and wakes everyone. Returns
 * whether the device must be aborted (done by the caller, unlocked). */
static int fail_locked(h3_comm_group *g, int rank, const h3_status *why) {
    if (g->failed) return 0;
    g->failed = 1;
    g->failed_rank = rank;
    g->failure = *why;
    if (g->failure.code == H3_OK) g->failure.code = H3_ERR_INTERNAL;
    pthread_cond_broadcast(&g->cond);
    /* Host-side failures leave the device communicators consistent (nothing
     * was issued unevenly); only a device failure can strand a peer inside
     * a device collective. */
    if (why->code == H3_ERR_DEVICE && g->ops->abort_device && !g->device_aborted) {
        g->device_aborted = 1;
        return 1;
    }
    return 0;
}

static void fail_group(h3_comm_group *g, int rank, const h3_status *why) {
    pthread_mutex_lock(&g->lock);
    int abort_device = fail_locked(g, rank, why);
    pthread_mutex_unlock(&g->lock);
    if (abort_device) g->ops->abort_device(g);
}

void h3_comm_abort(h3_comm *c, const h3_status *why) {
    h3_status s;
    if (why) s = *why;
    else h3_fail(&s, H3_ERR_INTERNAL, "rank %d aborted", c->rank);
    fail_group(c->group, c->rank, &s);
}

/* The status a rank returns when another rank failed the group. */
static h3_status_code peer_failure(h3_comm_group *g, h3_status *status) {
    if (g->failed_rank < 0) return h3_fail(status, g->failure.code, "%s", g->failure.message);
    return h3_fail(status, g->failure.code, "rank %d failed: %s", g->failed_rank, g->failure.message);
}

h3_status_code h3_comm_group_reset(h3_comm_group *g, h3_status *status) {
    pthread_mutex_lock(&g->lock);
    int rebuild = g->device_aborted;
    g->failed = 0;
    g->failed_rank = -1;
    h3_status_clear(&g->failure);
    g->arrived = g->completed = 0;
    g->device_aborted = 0;
    for (int r = 0; r < g->size; r++) {
        g->ranks[r].calls = 0;
        memset(&g->ranks[r].traffic, 0, sizeof g->ranks[r].traffic);
        g->present[r] = 0;
    }
    pthread_mutex_unlock(&g->lock);
    if (rebuild && g->ops->reset) return g->ops->reset(g, status);
    return H3_OK;
}

void h3_comm_group_inject_fault(h3_comm_group *g, int rank, long call) {
    pthread_mutex_lock(&g->lock);
    g->fault_rank = rank;
    g->fault_call = call;
    pthread_mutex_unlock(&g->lock);
}

/* ---- rendezvous ------------------------------------------------------------------ */

static const char *call_name(h3_comm_call kind) {
    switch (kind) {
    case H3_CALL_ALL_REDUCE: return "all-reduce";
    case H3_CALL_ALL_GATHER: return "all-gather";
    case H3_CALL_BROADCAST: return "broadcast";
    case H3_CALL_BARRIER: return "barrier";
    case H3_CALL_EXCHANGE: return "exchange";
    }
    return "?";
}

/* Under the lock, by the last rank to arrive: every slot must match rank 0's. */
static int slots_match(h3_comm_group *g, h3_status *why) {
    const h3_comm_slot *a = &g->slots[0];
    for (int r = 1; r < g->size; r++) {
        const h3_comm_slot *s = &g->slots[r];
        if (s->kind != a->kind || s->call != a->call || s->bytes != a->bytes || s->dtype != a->dtype ||
            s->root != a->root) {
            h3_fail(why, H3_ERR_INTERNAL,
                    "collective mismatch: rank 0 called %s #%ld (%zu bytes, root %d), rank %d called %s #%ld "
                    "(%zu bytes, root %d)",
                    call_name(a->kind), a->call, a->bytes, a->root, r, call_name(s->kind), s->call, s->bytes,
                    s->root);
            return 0;
        }
    }
    return 1;
}

/* Under the lock, on timeout: which ranks never came. */
static void timeout_status(h3_comm_group *g, const h3_comm_slot *mine, h3_status *why) {
    char missing[256] = "";
    size_t n = 0;
    for (int r = 0; r < g->size && n < sizeof missing - 8; r++)
        if (!g->present[r]) n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", n ? ", " : "", r);
    h3_fail(why, H3_ERR_DEVICE, "rank(s) %s did not reach %s #%ld within %.1f s", missing, call_name(mine->kind),
            mine->call, g->timeout);
}

h3_status_code h3_comm_rendezvous(h3_comm *c, const h3_comm_slot *mine, h3_status *status) {
    h3_comm_group *g = c->group;
    pthread_mutex_lock(&g->lock);
    if (g->failed) {
        h3_status_code rc = peer_failure(g, status);
        pthread_mutex_unlock(&g->lock);
        return rc;
    }
    g->slots[c->rank] = *mine;
    g->present[c->rank] = 1;
    if (++g->arrived == g->size) {
        h3_status why;
        if (!slots_match(g, &why)) {
            int abort_device = fail_locked(g, -1, &why);
            h3_status_code rc = peer_failure(g, status);
            pthread_mutex_unlock(&g->lock);
            if (abort_device) g->ops->abort_device(g);
            return rc;
        }
        g->arrived = 0;
        memset(g->present, 0, (size_t)g->size * sizeof *g->present);
        g->round++;
        pthread_cond_broadcast(&g->cond);
        pthread_mutex_unlock(&g->lock);
        return H3_OK;
    }
    uint64_t round = g->round;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    double whole = floor(g->timeout);
    deadline.tv_sec += (time_t)whole;
    deadline.tv_nsec += (long)((g->timeout - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
    while (g->round == round && !g->failed) {
        int waited = pthread_cond_timedwait(&g->cond, &g->lock, &deadline);
        if (waited == ETIMEDOUT && g->round == round && !g->failed) {
            h3_status why;
            timeout_status(g, mine, &why);
            int abort_device = fail_locked(g, -1, &why);
            pthread_mutex_unlock(&g->lock);
            if (abort_device) g->ops->abort_device(g);
            pthread_mutex_lock(&g->lock);
        }
    }
    h3_status_code rc = g->round != round ? H3_OK : peer_failure(g, status);
    pthread_mutex_unlock(&g->lock);
    return rc;
}

void h3_comm_complete(h3_comm *c) {
    h3_comm_group *g = c->group;
    pthread_mutex_lock(&g->lock);
    if (++g->completed == g->size) {
        g->completed = 0;
        g->complete_round++;
        pthread_cond_broadcast(&g->cond);
    } else {
        uint64_t round = g->complete_round;
        while (g->complete_round == round) pthread_cond_wait(&g->cond, &g->lock);
    }
    pthread_mutex_unlock(&g->lock);
}

/* ---- collectives ------------------------------------------------------------------- */

/* Everything a collective checks before it waits for the others: the rank's
 * backend is healthy, no fault is injected here, the implementation accepts
 * the tensor. Any refusal fails the group with this rank's error. */
static h3_status_code enter(h3_comm *c, h3_backend *b, h3_comm_slot *slot, const h3_tensor *t, h3_status *status) {
    h3_comm_group *g = c->group;
    slot->call = c->calls++;
    h3_status why;
    h3_status_clear(&why);
    if (b && h3_backend_check(b, &why) != H3_OK) {
        /* keep the backend's own message */
    } else {
        pthread_mutex_lock(&g->lock);
        int fault = g->fault_rank == c->rank && g->fault_call == slot->call;
        pthread_mutex_unlock(&g->lock);
        if (fault)
            h3_fail(&why, H3_ERR_DEVICE, "injected fault on rank %d at %s #%ld", c->rank, call_name(slot->kind),
                    slot->call);
        else if (t && g->ops->check)
            g->ops->check(c, b, slot->kind, t, &why);
    }
    if (why.code != H3_OK) {
        fail_group(g, c->rank, &why);
        if (status) *status = why;
        return why.code;
    }
    if (g->ops->solo) return H3_OK; /* no other rank runs */
    return h3_comm_rendezvous(c, slot, status);
}

/* The data movement failed on this rank after the rendezvous: the others may
 * already be past it, so fail the group for the next collective. */
static h3_status_code finish(h3_comm *c, h3_status_code rc, h3_status *status) {
    if (rc != H3_OK) fail_group(c->group, c->rank, status);
    return rc;
}

static h3_comm_slot tensor_slot(h3_comm_call kind, const h3_tensor *t, int root) {
    h3_comm_slot s = {.kind = kind, .bytes = h3_tensor_nbytes(t), .dtype = (int)t->dtype, .root = root,
                      .data = t->data};
    return s;
}

h3_status_code h3_comm_all_reduce_sum(h3_comm *c, h3_backend *b, h3_tensor *t, h3_status *status) {
    h3_comm_slot s = tensor_slot(H3_CALL_ALL_REDUCE, t, 0);
    h3_status_code rc = enter(c, b, &s, t, status);
    if (rc != H3_OK) return rc;
    c->traffic.all_reduce_calls++;
    c->traffic.all_reduce_bytes += s.bytes;
    return finish(c, c->group->ops->all_reduce_sum(c, b, t, status), status);
}

h3_status_code h3_comm_all_gather(h3_comm *c, h3_backend *b, h3_tensor *t, h3_status *status) {
    h3_comm_slot s = tensor_slot(H3_CALL_ALL_GATHER, t, 0);
    h3_status_code rc = enter(c, b, &s, t, status);
    if (rc != H3_OK) return rc;
    c->traffic.all_gather_calls++;
    c->traffic.all_gather_bytes += s.bytes;
    return finish(c, c->group->ops->all_gather(c, b, t, status), status);
}

h3_status_code h3_comm_broadcast(h3_comm *c, h3_backend *b, h3_tensor *t, int root, h3_status *status) {
    h3_comm_slot s = tensor_slot(H3_CALL_BROADCAST, t, root);
    if (root < 0 || root >= c->group->size) {
        h3_status why;
        h3_fail(&why, H3_ERR_INVALID_ARGUMENT, "broadcast: root %d outside the group of %d", root, c->group->size);
        fail_group(c->group, c->rank, &why);
        if (status) *status = why;
        return why.code;
    }
    h3_status_code rc = enter(c, b, &s, t, status);
    if (rc != H3_OK) return rc;
    c->traffic.broadcast_calls++;
    c->traffic.broadcast_bytes += s.bytes;
    return finish(c, c->group->ops->broadcast(c, b, t, root, status), status);
}

h3_status_code h3_comm_barrier(h3_comm *c, h3_status *status) {
    h3_comm_slot s = {.kind = H3_CALL_BARRIER, .dtype = -1};
    return enter(c, NULL, &s, NULL, status);
}

h3_status_code h3_comm_exchange(h3_comm *c, const void *mine, void *all, size_t bytes, h3_status *status) {
    h3_comm_slot s = {.kind = H3_CALL_EXCHANGE, .bytes = bytes, .dtype = -1, .data = (void *)mine};
    h3_status_code rc = enter(c, NULL, &s, NULL, status);
    if (rc != H3_OK) return rc;
    h3_comm_group *g = c->group;
    for (int r = 0; r < g->size; r++)
        memcpy((char *)all + (size_t)r * bytes, g->ops->solo ? mine : g->slots[r].data, bytes);
    if (!g->ops->solo) h3_comm_complete(c);
    return H3_OK;
}

#ifndef H3_HAVE_NCCL
/* Builds without NCCL (no CUDA, or -Dnccl=disabled): the CPU communicator only. */
int h3_comm_have_nccl(void) { return 0; }

h3_status_code h3_comm_group_create_nccl(int size, const int *devices, h3_comm_group **out, h3_status *status) {
    *out = NULL;
    return h3_fail(status, H3_ERR_UNSUPPORTED,
                   "tensor parallelism over %d GPUs needs NCCL, and this build of h3core has none (rebuild with "
                   "-Dcuda=enabled -Dnccl=enabled where libnccl and nccl.h are installed)",
                   size);
}

h3_status_code h3_comm_cuda_device_info(int device, const int *devices, int n, int *sm, uint64_t *free_bytes,
                                        uint64_t *total_bytes, uint32_t *peer_mask, char *name, size_t name_size,
                                        h3_status *status) {
    return h3_fail(status, H3_ERR_UNSUPPORTED, "cuda:%d: device probing needs the NCCL build", device);
}
#endif
