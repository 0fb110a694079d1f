/* h3_comm.h - collectives between the ranks of one tensor-parallel group.
 *
 * A group is N ranks inside this process, one host thread per rank, each
 * rank with its own backend. Two implementations share this interface:
 *
 *   cpu   threads and shared memory (h3_comm_cpu.c). Reductions add the ranks
 *         in rank order, ((x0 + x1) + x2) + ..., in float32, and every rank
 *         receives the same bits, so a TP run is reproducible run to run.
 *         A group of one rank works with any backend (every collective is a
 *         no-op), which is how a single GPU runs the TP code path without NCCL.
 *   nccl  one NCCL communicator per GPU made with ncclCommInitAll, the
 *         collectives enqueued on each rank's CUDA stream (h3_comm_nccl.c,
 *         built with -Dnccl when the CUDA backend is built).
 *
 * Failure. Before its data moves, every collective is a rendezvous of the
 * host threads: each rank states what it calls (kind, bytes, root, call
 * number) and whether it is healthy, and no rank moves data unless every rank
 * arrived healthy with the same call. So a rank that fails (its backend holds
 * a sticky error, or it calls h3_comm_abort) reaches every other rank at the
 * next collective: they return its error instead of waiting, and NCCL never
 * sees a collective that only some ranks issued. Mismatched calls (a bug) and
 * a rank that does not arrive within the timeout fail the group the same way.
 * After a failed run, h3_comm_group_reset makes the group usable again (the
 * NCCL communicators are rebuilt when a device error aborted them).
 *
 *   h3_comm_group *g;
 *   h3_comm_group_create_cpu(4, &g, &st);
 *   // on the thread of rank r:
 *   h3_comm *c = h3_comm_group_rank(g, r);
 *   if (h3_comm_all_reduce_sum(c, backend, &partial, &st) != H3_OK) ...  // every rank got the error
 */
#ifndef H3_COMM_H
#define H3_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "backend/h3_backend.h"
#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define H3_COMM_MAX_RANKS 64

typedef struct h3_comm_group h3_comm_group;
typedef struct h3_comm h3_comm; /* one rank's handle, owned by the group */

/* ---- groups ---------------------------------------------------------------- */
h3_status_code h3_comm_group_create_cpu(int size, h3_comm_group **out, h3_status *status);
/* devices[size]: distinct CUDA ordinals, rank r drives devices[r]. Fails with
 * H3_ERR_UNSUPPORTED when this build has no NCCL. */
h3_status_code h3_comm_group_create_nccl(int size, const int *devices, h3_comm_group **out, h3_status *status);
/* For measuring ranks (backend/measure/, the memory plan): the rendezvous of
 * every collective, and no data moved. */
h3_status_code h3_comm_group_create_measure(int size, h3_comm_group **out, h3_status *status);
/* A projection of a group of `size` ranks onto one device: rank 0 runs
 * alone, holding its shard of everything, and each collective is replaced
 * by a device copy of the bytes it would move (an all-reduce copies its
 * tensor once, an all-gather the chunks of the other ranks, a broadcast the
 * whole tensor on the ranks that receive it). What a rank of a real group
 * computes is then timed on one GPU; the link time is not, it is computed
 * from h3_comm_traffic by whoever assumes a bandwidth. Rank 0's data is not
 * the group's result (the other ranks' partial sums are missing): for
 * timing and traffic only. */
h3_status_code h3_comm_group_create_projection(int size, h3_comm_group **out, h3_status *status);
/* Whether this build has the NCCL implementation. */
int h3_comm_have_nccl(void);
void h3_comm_group_destroy(h3_comm_group *g);

h3_comm *h3_comm_group_rank(h3_comm_group *g, int rank);
int h3_comm_group_size(const h3_comm_group *g);
const char *h3_comm_group_name(const h3_comm_group *g); /* "cpu" or "nccl" */
/* Longest wait for the other ranks at one rendezvous (default 600 s); a rank
 * that stays away longer fails the group with H3_ERR_DEVICE. */
void h3_comm_group_set_timeout(h3_comm_group *g, double seconds);

/* Non-zero when the group has failed: *rank gets the rank that failed first
 * (-1 for a failure of no single rank: a mismatch, a timeout) and *status
 * its error. Either pointer may be NULL. */
int h3_comm_group_failure(h3_comm_group *g, int *rank, h3_status *status);
/* Clears a failure once no rank is inside a collective; rebuilds NCCL
 * communicators that a device error aborted. */
h3_status_code h3_comm_group_reset(h3_comm_group *g, h3_status *status);
/* Test hook: the call-th collective (counted from 0 since the last reset) of
 * `rank` fails as if its device had failed (H3_ERR_DEVICE). rank < 0 clears. */
void h3_comm_group_inject_fault(h3_comm_group *g, int rank, long call);

/* ---- one rank --------------------------------------------------------------- */
/* What a rank's collectives carried since the group was made or reset: the
 * calls and the bytes of their tensors (an all-gather counts the whole
 * gathered tensor). The bytes a ring algorithm puts on each link follow from
 * these: 2·(N−1)/N of an all-reduce's, (N−1)/N of an all-gather's. */
typedef struct h3_comm_traffic {
    uint64_t all_reduce_calls, all_reduce_bytes;
    uint64_t all_gather_calls, all_gather_bytes;
    uint64_t broadcast_calls, broadcast_bytes;
} h3_comm_traffic;
void h3_comm_traffic_get(const h3_comm *c, h3_comm_traffic *out);

int h3_comm_rank(const h3_comm *c);
int h3_comm_size(const h3_comm *c);
h3_comm_group *h3_comm_get_group(h3_comm *c);

/* Marks the group failed with `why` (first failure wins) and wakes every rank
 * waiting in a collective. Idempotent. */
void h3_comm_abort(h3_comm *c, const h3_status *why);

/* Collectives. Every rank calls the same ones in the same order with tensors
 * of the same dtype and shape. b is the rank's backend: a sticky error in it
 * fails the group before anything moves. Tensors stay on the backend.
 *
 * t = Σ_ranks t, in place (F32; NCCL also BF16/F16). */
h3_status_code h3_comm_all_reduce_sum(h3_comm *c, h3_backend *b, h3_tensor *t, h3_status *status);
/* In place: t holds size equal chunks along its first dim; rank r's chunk r
 * is the input, every chunk is filled on return. */
h3_status_code h3_comm_all_gather(h3_comm *c, h3_backend *b, h3_tensor *t, h3_status *status);
/* t on every rank = t on root. */
h3_status_code h3_comm_broadcast(h3_comm *c, h3_backend *b, h3_tensor *t, int root, h3_status *status);
h3_status_code h3_comm_barrier(h3_comm *c, h3_status *status);
/* Host all-gather of a small record: all[r·bytes ..] = rank r's mine. Used to
 * agree (probes, flags) before any device work. */
h3_status_code h3_comm_exchange(h3_comm *c, const void *mine, void *all, size_t bytes, h3_status *status);

/* Facts about a CUDA device for the agreement probe (h3_tp.h), without a
 * backend: compute capability (major·10 + minor), free and total memory, and
 * whether it can read each of devices[0..n) directly (bit j). Returns
 * H3_ERR_UNSUPPORTED in builds without NCCL. */
h3_status_code h3_comm_cuda_device_info(int device, const int *devices, int n, int *sm, uint64_t *free_bytes,
                                        uint64_t *total_bytes, uint32_t *peer_mask, char *name, size_t name_size,
                                        h3_status *status);

#ifdef __cplusplus
}
#endif
#endif
