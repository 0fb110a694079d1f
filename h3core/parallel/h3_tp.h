/* h3_tp.h - the mechanics of tensor parallelism: the weight roles and
 * sharded loading, the collectives and parallel linears the model code
 * calls, the agreement between ranks before any work, and the team of rank
 * threads. It knows no model: which degrees divide the model and what each
 * rank holds is model/h3_tp_plan.h's.
 *
 * The sharding (Megatron-style, docs/spec/tp4-v100-reference.md §2), written
 * once here as weight roles that the model loaders name:
 *
 *   role          rows/cols kept by rank r of N            then
 *   QKV           heads [r·H/N, (r+1)·H/N) of q, k and v    attention on H/N heads
 *   HEADS         the same heads of one projection (q, k,    (text q/k/v, VSA gate)
 *                 v, gate)
 *   OUT           the input columns of those heads           all-reduce (row-parallel)
 *   FFN_IN        rows [r·F/N, (r+1)·F/N) of both halves     swiglu on F/N
 *                 (value and gate) of a fused fc1
 *   FFN_OUT       the input columns of that slice            all-reduce (row-parallel)
 *   GATHER        output rows [r·O/N, ...) (AdaLN)           all-gather: every rank holds
 *                                                            the whole identical table
 *   REPLICATED    everything else (norms, embeddings, the small fp32 heads)
 *
 * Row-parallel outputs are summed in float32 whatever the compute dtype, and
 * a bias is added once, by rank 0, before the sum. The DiT (main blocks and
 * refiner) and the text conditioner use the same roles; the video VAE splits
 * its tiles round-robin over the ranks and rank 0 stitches them; the audio
 * VAE runs on rank 0.
 *
 * Each rank loads only its slice: rows are a view of the mmap'd tensor,
 * columns are copied row by row, so no rank uploads what another holds. A
 * dummy tensor (load-format dummy, h3_st_random) is sliced the same way by
 * the offset and strides of its values, and each rank draws its share on
 * its own device: the shards hold exactly the values of the whole tensor.
 *
 * Collectives used from model code (h3_tp_all_reduce, the parallel linears)
 * report failures as the backend's sticky error, like any op: the model
 * code's existing h3_backend_check calls see them, and every other rank sees
 * the failure at its next collective (h3_comm.h). A one-rank h3_tp with no
 * communicator (H3_TP_SINGLE) makes every call here the plain op. */
#ifndef H3_TP_H
#define H3_TP_H

#include <stdint.h>

#include "backend/h3_backend.h"
#include "parallel/h3_comm.h"
#include "base/h3_safetensors.h"
#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One rank's place in the group, handed to each model instance. */
typedef struct h3_tp {
    int rank, size;
    h3_comm *comm; /* NULL: one rank, no communicator */
} h3_tp;

#define H3_TP_SINGLE ((h3_tp){0, 1, NULL})

typedef enum h3_tp_role {
    H3_TP_REPLICATED = 0,
    H3_TP_QKV,     /* [q; k; v] stacked by rows, sharded by heads in each third */
    H3_TP_HEADS,   /* one head-major projection, sharded by heads */
    H3_TP_OUT,     /* row-parallel over the heads' columns */
    H3_TP_FFN_IN,  /* [first half; second half] stacked by rows, each sharded */
    H3_TP_FFN_OUT, /* row-parallel over the FFN's columns */
    H3_TP_GATHER   /* column-parallel by output rows, gathered after */
} h3_tp_role;

const char *h3_tp_role_name(h3_tp_role role);
/* n / tp->size (callers validated divisibility through the plan). */
int64_t h3_tp_local(const h3_tp *tp, int64_t n);

/* Uploads this rank's slice of src (a checkpoint tensor or a host buffer
 * described as one). A dimension that does not split evenly is an
 * H3_ERR_INVALID_ARGUMENT naming the tensor. */
h3_status_code h3_tp_weight_load(h3_backend *b, const h3_tp *tp, const h3_st_tensor *src, h3_tp_role role,
                                 h3_weight_type type, h3_tensor *out, h3_status *status);

/* ---- collectives and parallel linears for model code (sticky errors) ---- */
void h3_tp_all_reduce(const h3_tp *tp, h3_backend *b, h3_tensor *t);
void h3_tp_all_gather(const h3_tp *tp, h3_backend *b, h3_tensor *t);
void h3_tp_broadcast(const h3_tp *tp, h3_backend *b, h3_tensor *t, int root);
/* y[M, N] = Σ_ranks x_r[M, K/N] · w_r[N, K/N]ᵀ (+ bias, once). w is an OUT or
 * FFN_OUT slice, x the matching activations. */
void h3_tp_linear_row_parallel(const h3_tp *tp, h3_backend *b, h3_tensor *y, const h3_tensor *x,
                               const h3_tensor *w, const h3_tensor *bias);
/* y[M, N] on every rank, rank r computing columns [r·N/size, ...) with its
 * GATHER slice w_r [N/size, K] (and bias slice), then an all-gather. */
void h3_tp_linear_column_gather(const h3_tp *tp, h3_backend *b, h3_tensor *y, const h3_tensor *x,
                                const h3_tensor *w, const h3_tensor *bias);

/* ---- agreement before work ---------------------------------------------------- */
#define H3_TP_KERNEL_CPU 1u   /* the float32 reference ops */
#define H3_TP_KERNEL_MMA 2u   /* CUDA mma.sync attention (sm80 and later) */
#define H3_TP_KERNEL_WGMMA 4u /* CUDA wgmma attention (sm90) */
#define H3_TP_KERNEL_VSA 8u   /* VSA-H3 block-sparse attention kernels */

/* What one rank found about its device. Plain data: exchanged as bytes. */
typedef struct h3_tp_probe {
    int rank;
    int device;            /* CUDA ordinal; -1: host memory (CPU ranks share it) */
    int sm;                /* compute capability ×10; 0 on the CPU */
    uint32_t kernels;      /* H3_TP_KERNEL_* */
    uint32_t peers;        /* bit j: direct access to rank j's memory */
    uint64_t free_bytes;   /* 0: unknown */
    uint64_t total_bytes;
    uint64_t need_bytes;   /* what the plan puts on this rank */
    char name[64];
    char error[200];       /* non-empty: the rank could not start */
} h3_tp_probe;

/* The one decision every rank takes from the same probes. */
typedef struct h3_tp_decision {
    uint32_t kernels;      /* available on every rank */
    int peer_route;        /* every pair of ranks has direct access */
    char fallback[512];    /* each departure from the best route, with its reason; "" if none */
} h3_tp_decision;

/* This rank's probe: its backend (NULL if it failed to start: then
 * start_error says why), its device (-1 for the CPU), the group's devices. */
void h3_tp_probe_rank(h3_backend *b, int rank, int device, const int *devices, int n, uint64_t need_bytes,
                      const char *start_error, h3_tp_probe *out);
/* Pure: the same probes give the same decision on every rank. A rank that
 * failed to start or lacks memory for its shard is an error naming it;
 * kernels every rank does not have are dropped (recorded); missing peer
 * access is recorded (NCCL then routes through the host). */
h3_status_code h3_tp_agree(const h3_tp_probe *probes, int n, h3_tp_decision *decision, h3_status *status);
/* On every rank: exchange the probes, agree, apply (the attention kernel
 * all ranks share). The decision is identical on every rank. */
h3_status_code h3_tp_handshake(const h3_tp *tp, h3_backend *b, const h3_tp_probe *mine, h3_tp_decision *decision,
                               h3_status *status);

/* ---- the team: one persistent host thread per rank -------------------------- */
typedef struct h3_tp_team h3_tp_team;
typedef h3_status_code (*h3_tp_rank_fn)(const h3_tp *tp, void *user, h3_status *status);

/* Takes ownership of group. */
h3_status_code h3_tp_team_create(h3_comm_group *group, h3_tp_team **out, h3_status *status);
void h3_tp_team_destroy(h3_tp_team *team);
int h3_tp_team_size(const h3_tp_team *team);
h3_comm_group *h3_tp_team_group(h3_tp_team *team);
/* Runs fn on every rank, each on its own thread, and waits for all. A rank
 * that returns an error fails the group, so the others stop at their next
 * collective. Returns H3_OK, or the first failure as "rank k: ..." (the
 * root cause, not the ranks that stopped because of it); the group is then
 * reset for the next run. */
h3_status_code h3_tp_team_run(h3_tp_team *team, h3_tp_rank_fn fn, void *user, h3_status *status);

#ifdef __cplusplus
}
#endif
#endif
