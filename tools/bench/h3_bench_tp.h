/* h3_bench_tp.h - h3-bench's forward over tensor-parallel ranks.
 *
 * The engine's machinery, not a copy of it: a communicator group over the
 * devices (NCCL for GPUs, the CPU one for "cpu:N"), the team of rank
 * threads, the probe and handshake, then on each rank its backend on its
 * device and its shard of a random model (h3_dit_create_random with the
 * rank's h3_tp: the loader's weight plan and split), h3_dit_begin and timed
 * h3_dit_forward calls between barriers. Backend-agnostic, so the CPU test
 * (tests/test_bench_tp.c) runs this same code on CPU ranks with a tiny
 * config; h3-bench runs it on GPUs at the release's size. */
#ifndef H3_BENCH_TP_H
#define H3_BENCH_TP_H

#include <stdint.h>
#include <stdio.h>

#include "parallel/h3_comm.h"
#include "model/h3_dit.h"
#include "model/h3_dit_layout.h"
#include "base/h3_status.h"

/* "0,1,2,3": distinct CUDA ordinals; "cpu:N": N CPU ranks (-1 each).
 * Returns the count (>= 1), or 0 with status filled. */
int h3_bench_parse_devices(const char *list, int *devices, int max, h3_status *status);

typedef struct h3_bench_tp_params {
    const h3_dit_config *cfg;
    int blocks;                     /* random main blocks, 1..cfg->num_layers */
    uint64_t model_seed, input_seed;
    h3_dit_layout_params layout;    /* the request's packed sequence */
    float t_video, t_audio;         /* the timesteps */
    int reps;                       /* timed forwards after one warm-up (median), >= 1 */
    int vsa;                        /* 1: VSA-H3 attention at vsa_sparsity; 0: dense */
    float vsa_sparsity;
    int comm_reps;                  /* > 0: also time the forward's all-reduces alone, this many times */
    int cpu_threads;                /* per CPU rank; 0: the backend's default */
    int attention_variant;          /* CUDA ranks: the h3_cuda_attention_variant to force (h3-bench
                                       --attention-variant); 0, AUTO: the backend's default */
    int vsa_pipelined;              /* CUDA ranks: the Hopper VSA kernel's consumer (0, the default) */
    int project;                    /* 1: run only rank 0 of the n ranks, on devices[0], with every
                                       collective replaced by a device copy of its bytes
                                       (h3_comm_group_create_projection): one rank's share of a TP-n
                                       forward on one GPU, a projection, not a TP run */
    FILE *log;                      /* rank 0's progress lines; NULL: silent */
    float *video_out;               /* optional: rank 0's video velocities of the last timed forward,
                                       [num_video_rows, in_channels·patch_h·patch_w] (tests compare degrees) */
} h3_bench_tp_params;

typedef struct h3_bench_tp_result {
    int size;                /* TP degree */
    char comm[16];           /* "nccl" or "cpu" */
    char device[64];         /* rank 0's device name */
    int64_t S;
    int n_t;
    double create_s;         /* slowest rank's h3_dit_create_random, host wall */
    double begin_ms;         /* rank 0: h3_dit_begin */
    double fwd_ms, fwd_min_ms, fwd_max_ms; /* median / min / max: rank 0's wall between barriers */
    /* The 2 all-reduces per block alone (h3_comm_all_reduce_sum on [S, hidden]
     * in the dtype the row-parallel linears reduce in: float32 above one rank),
     * median wall per forward; 0 when not timed or one rank. */
    double comm_ms;
    uint64_t comm_bytes;     /* bytes of one all-reduce's tensor */
    h3_comm_traffic fwd_traffic; /* rank 0's collectives in one forward (calls, tensor bytes) */
    size_t nonfinite;        /* non-finite video velocities on rank 0 */
    char fallback[512];      /* the handshake's departures, "" if none */
} h3_bench_tp_result;

/* Runs the forward over devices[0..n) (TP degree n). A degree the model does
 * not split over is an H3_ERR_INVALID_ARGUMENT listing the valid ones; any
 * rank's failure is returned as "rank k: ...". Everything is freed. */
h3_status_code h3_bench_tp_forward(const h3_bench_tp_params *p, const int *devices, int n, h3_bench_tp_result *r,
                                   h3_status *status);

#endif
