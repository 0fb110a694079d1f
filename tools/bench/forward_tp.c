/* forward_tp.c - the product's forward over tensor-parallel ranks (--devices
 * LIST, --tp-sweep, --backend fa|vsa).
 *
 * The same random model and layout as forward.c, through h3_bench_tp_forward
 * (the engine's team, communicator and handshake; one rank per listed GPU,
 * each with its shard). Times are rank 0's wall clock between barriers (every
 * rank synchronised), so they cover the slowest rank; no CUDA events and no
 * hand-written block here. --tp-sweep runs every valid degree up to the
 * device count on the first devices of the list, TP1 first, so each degree's
 * efficiency against TP1 is measured. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>

#include "bench.h"
#include "h3_bench_tp.h"
#include "model/h3_tp_plan.h" /* the degrees the model splits over */
#include "parallel/h3_tp.h"

static void devices_text(const int *devices, int n, char *buf, size_t size) {
    size_t at = (size_t)snprintf(buf, size, "%s", devices[0] < 0 ? "cpu" : "cuda ");
    for (int i = 0; i < n && devices[0] >= 0 && at < size - 8; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%d", i ? "," : "", devices[i]);
    if (devices[0] < 0) snprintf(buf + at, size - at, " x%d", n);
}

int forward_tp_degree_ok(const bench_options *o) {
    h3_dit_config cfg;
    release_dit_config(&cfg);
    h3_tp_plan plan;
    h3_status st;
    for (int i = 0; i < o->n_tp_project; i++)
        if (h3_tp_plan_make(o->tp_project[i], &cfg, NULL, 0, 2, 0, 0, &plan, &st) != H3_OK) {
            fprintf(stderr, "h3-bench: --tp-project: %s\n", st.message);
            return 0;
        }
    if (o->n_tp_project || o->tp_sweep || h3_tp_plan_make(o->n_devices, &cfg, NULL, 0, 2, 0, 0, &plan, &st) == H3_OK)
        return 1;
    fprintf(stderr, "h3-bench: --devices: %s\n", st.message);
    return 0;
}

/* The degrees to run: the device count, or with --tp-sweep every valid one up to it. */
static int degrees_to_run(const bench_options *o, const h3_dit_config *cfg, int *degrees) {
    if (!o->tp_sweep) {
        degrees[0] = o->n_devices;
        return 1;
    }
    int n = h3_tp_valid_degrees(cfg, degrees, o->n_devices);
    if (n == 0 || degrees[n - 1] != o->n_devices)
        printf("forward: --tp-sweep: %d devices is not a valid degree (it must divide the %d heads); the sweep "
               "stops at %d\n", o->n_devices, cfg->num_heads, n ? degrees[n - 1] : 0);
    return n;
}

static void report_degree(const bench_options *o, const h3_dit_config *cfg, const h3_bench_tp_params *p,
                          const h3_bench_tp_result *res, int i, int t1) {
    const h3_bench_tp_result *r = &res[i];
    char devs[256];
    devices_text(o->devices, r->size < o->n_devices ? r->size : o->n_devices, devs, sizeof devs);
    printf("  TP%d on %s (%s, %s), S %lld, %d timesteps: random model built in %.1f s (slowest rank); begin "
           "%.1f ms\n", r->size, devs, r->device, r->comm, (long long)r->S, r->n_t, r->create_s, r->begin_ms);
    printf("    forward %.1f ms (median of %d between barriers; min %.1f, max %.1f) = %.2f ms/block; 50-block "
           "forward %.2f s\n", r->fwd_ms, p->reps, r->fwd_min_ms, r->fwd_max_ms, r->fwd_ms / o->blocks,
           r->fwd_ms * 50 / o->blocks / 1e3);
    if (r->comm_ms > 0)
        printf("    all-reduces alone (2 per block, [%lld, %d] f32, %.1f MB each): %.1f ms per forward = %.1f%% "
               "of it\n", (long long)r->S, cfg->hidden_size, (double)r->comm_bytes / 1e6, r->comm_ms,
               100 * r->comm_ms / r->fwd_ms);
    if (t1 >= 0 && i != t1)
        printf("    vs TP1 in this run: %.2fx faster, efficiency %.1f%%\n", res[t1].fwd_ms / r->fwd_ms,
               100 * res[t1].fwd_ms / (r->fwd_ms * r->size));
    if (r->nonfinite) printf("    WARNING: %zu non-finite video velocities\n", r->nonfinite);
    if (r->fallback[0]) printf("    tensor parallelism: %s\n", r->fallback);
}

/* The sweep's summary table. */
static void report_sweep(const bench_options *o, const h3_bench_tp_result *res, const int *degrees, const int *ok,
                         int n_deg, int t1) {
    printf("\n  %-4s %-16s %10s %9s %11s %14s %8s %10s\n", "TP", "devices", "fwd ms", "ms/block", "50-block s",
           "all-reduce ms", "speedup", "efficiency");
    for (int i = 0; i < n_deg; i++) {
        if (!ok[i]) continue;
        const h3_bench_tp_result *r = &res[i];
        char devs[256];
        devices_text(o->devices, degrees[i] < o->n_devices ? degrees[i] : o->n_devices, devs, sizeof devs);
        double base = t1 >= 0 ? res[t1].fwd_ms : NAN;
        printf("  %-4d %-16s %10.1f %9.2f %11.2f %14.1f %7.2fx %9.1f%%\n", r->size, devs, r->fwd_ms,
               r->fwd_ms / o->blocks, r->fwd_ms * 50 / o->blocks / 1e3, r->comm_ms, base / r->fwd_ms,
               100 * base / (r->fwd_ms * r->size));
    }
}

/* The projection's table: TP1 measured, then each degree's rank share with
 * its link time computed from the bytes and the assumed bandwidth. A ring
 * all-reduce puts 2·(N−1)/N of the tensor on each rank's link, an
 * all-gather (N−1)/N; the link time is added to the rank's time, as if no
 * collective overlapped compute (the forward's all-reduces sit between
 * dependent GEMMs). */
static void report_projection(const bench_options *o, const h3_bench_tp_result *res, const int *ok, int n_deg) {
    const h3_bench_tp_result *t1 = ok[0] ? &res[0] : NULL;
    printf("\nOne rank's share of a TP-N forward on one GPU: a PROJECTION, not a TP run. Each collective is a\n"
           "device copy of its bytes; the link time is computed at an assumed all-reduce bus bandwidth of\n"
           "%.0f GB/s per rank (--link-gbps) and added without overlap. %d of 50 blocks, scaled to 50.\n",
           o->link_gbps, o->blocks);
    printf("  %-4s %12s %11s %13s %14s %12s %13s %12s %9s\n", "TP", "rank fwd ms", "all-reduces", "AR GB/rank",
           "link GB/rank", "link ms", "projected ms", "50-block s", "vs TP1");
    for (int i = 0; i < n_deg; i++) {
        if (!ok[i]) continue;
        const h3_bench_tp_result *r = &res[i];
        const h3_comm_traffic *tr = &r->fwd_traffic;
        int n = r->size;
        double ar = (double)tr->all_reduce_bytes, ag = (double)tr->all_gather_bytes;
        double wire = n > 1 ? ar * 2.0 * (n - 1) / n + ag * (double)(n - 1) / n : 0.0;
        double link_ms = wire / (o->link_gbps * 1e9) * 1e3;
        double proj = r->fwd_ms + link_ms, scale = 50.0 / o->blocks;
        printf("  %-4d %12.1f %11llu %13.2f %14.2f %12.1f %13.1f %12.2f %8.2fx\n", n, r->fwd_ms,
               (unsigned long long)tr->all_reduce_calls, ar / 1e9, wire / 1e9, link_ms, proj,
               proj * scale / 1e3, t1 ? t1->fwd_ms / proj : NAN);
    }
    printf("  (all-gathers per forward: %llu, %.3f GB; the rank fwd column includes the stand-in copies)\n",
           n_deg > 1 && ok[n_deg - 1] ? (unsigned long long)res[n_deg - 1].fwd_traffic.all_gather_calls : 0ull,
           n_deg > 1 && ok[n_deg - 1] ? (double)res[n_deg - 1].fwd_traffic.all_gather_bytes / 1e9 : 0.0);
}

int forward_tp_bench(const bench_options *o) {
    h3_dit_config cfg;
    release_dit_config(&cfg);
    int degrees[H3_COMM_MAX_RANKS];
    int n_deg = degrees_to_run(o, &cfg, degrees);
    if (o->n_tp_project) { /* TP1 first, on the first device, then each projected degree there */
        n_deg = 1 + o->n_tp_project;
        degrees[0] = 1;
        for (int i = 0; i < o->n_tp_project; i++) degrees[1 + i] = o->tp_project[i];
    }
    /* 1280×736×124: 124 frames -> 37 latent frames of 46×80, 207 audio latents a channel */
    int32_t tags[256];
    for (int i = 0; i < 256; i++) tags[i] = H3_TAG_TEXT;
    h3_bench_tp_params p = {.cfg = &cfg, .blocks = o->blocks, .model_seed = 20261203, .input_seed = next_seed(),
                            .layout = {.text_token_tags = tags, .num_text = 256, .num_latent_frames = 37,
                                       .latent_height = 46, .latent_width = 80, .num_audio_latents = 207,
                                       .patch_t = cfg.patch_t, .patch_h = cfg.patch_h, .patch_w = cfg.patch_w},
                            .t_video = 0.3f, .t_audio = 0.6f,
                            .reps = o->forward_reps < 3 ? 3 : o->forward_reps > 64 ? 64 : o->forward_reps,
                            .vsa = o->fwd_vsa, .vsa_sparsity = 0.9f, .log = stdout,
                            .attention_variant = o->attention_variant, .vsa_pipelined = o->vsa_pipelined};
    p.comm_reps = p.reps;
    h3_bench_tp_result res[H3_COMM_MAX_RANKS];
    int ok[H3_COMM_MAX_RANKS], all_ok = 1, t1 = -1;
    int main_device = 0;
    cudaError_t ce = cudaGetDevice(&main_device); /* NCCL's setup moves this thread; later sections use B on it */
    if (ce != cudaSuccess) {
        fprintf(stderr, "h3-bench: forward: cudaGetDevice: %s\n", cudaGetErrorString(ce));
        return 0;
    }
    for (int i = 0; i < n_deg; i++) {
        char devs[256];
        devices_text(o->devices, degrees[i] < o->n_devices ? degrees[i] : o->n_devices, devs, sizeof devs);
        printf("forward: TP%d on %s, %d random blocks, attention %s...\n", degrees[i], devs, o->blocks,
               o->fwd_vsa ? "vsa" : "fa");
        fflush(stdout);
        h3_status st;
        p.project = o->n_tp_project && degrees[i] > 1;
        ok[i] = h3_bench_tp_forward(&p, o->devices, degrees[i], &res[i], &st) == H3_OK;
        if (!ok[i]) fprintf(stderr, "h3-bench: forward tp%d: %s\n", degrees[i], st.message);
        if ((ce = cudaSetDevice(main_device)) != cudaSuccess) {
            fprintf(stderr, "h3-bench: forward: cudaSetDevice(%d): %s\n", main_device, cudaGetErrorString(ce));
            return 0;
        }
        all_ok &= ok[i];
        if (ok[i] && degrees[i] == 1) t1 = i;
    }
    printf("\nProduct forward over tensor parallelism (h3_dit_create_random sharded like the loader + "
           "h3_dit_begin/h3_dit_forward),\n1280x736x124, %d of 50 blocks, attention %s:\n", o->blocks,
           o->fwd_vsa ? "VSA-H3 at sparsity 0.90 with random to_gate_compress gates (gate projection and compressed branch run)" : "dense (fa)");
    for (int i = 0; i < n_deg; i++) {
        if (ok[i]) {
            report_degree(o, &cfg, &p, res, i, t1);
        } else {
            char devs[256];
            devices_text(o->devices, degrees[i] < o->n_devices ? degrees[i] : o->n_devices, devs, sizeof devs);
            printf("  TP%d on %s: failed (see above)\n", degrees[i], devs);
        }
    }
    if (o->n_tp_project) report_projection(o, res, ok, n_deg);
    else if (n_deg > 1) report_sweep(o, res, degrees, ok, n_deg, t1);
    fflush(stdout);
    return all_ok;
}
