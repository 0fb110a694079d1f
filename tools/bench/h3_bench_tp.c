/* h3_bench_tp.c - h3-bench's forward over tensor-parallel ranks (see
 * h3_bench_tp.h). Timing: every timed region starts and ends with each rank
 * synchronising its backend and then a barrier of the group, so rank 0's wall
 * clock covers the slowest rank. */
#include "h3_bench_tp.h"

#include <glib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/h3_backend.h"
#include "parallel/h3_tp.h"
#include "model/h3_tp_plan.h"
#include "model/h3_vsa.h"
#ifdef H3_HAVE_CUDA
#include "backend/cuda/h3_backend_cuda_bench.h" /* the attention variant and VSA consumer h3-bench forces */
#endif

int h3_bench_parse_devices(const char *list, int *devices, int max, h3_status *status) {
    const char *bad = "devices '%s': expected CUDA ordinals such as \"0,1,2,3\", or \"cpu:N\"";
    char *end;
    if (!list || !*list) {
        h3_fail(status, H3_ERR_INVALID_ARGUMENT, bad, list ? list : "");
        return 0;
    }
    if (strncmp(list, "cpu:", 4) == 0) {
        long n = strtol(list + 4, &end, 10);
        if (end == list + 4 || *end || n < 1 || n > max) {
            h3_fail(status, H3_ERR_INVALID_ARGUMENT, "devices '%s': cpu:N needs N in 1..%d", list, max);
            return 0;
        }
        for (int r = 0; r < n; r++) devices[r] = -1;
        return (int)n;
    }
    int n = 0;
    for (const char *p = list; *p;) {
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1023 || (*end && *end != ',') || n == max || (*end && !end[1])) {
            h3_fail(status, H3_ERR_INVALID_ARGUMENT, bad, list);
            return 0;
        }
        for (int i = 0; i < n; i++)
            if (devices[i] == v) {
                h3_fail(status, H3_ERR_INVALID_ARGUMENT, "devices '%s': device %ld is listed twice", list, v);
                return 0;
            }
        devices[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return n;
}

/* ---- one rank ---------------------------------------------------------------------------- */

typedef struct job {
    const h3_bench_tp_params *p;
    const int *devices;
    const h3_tp_plan *plan;
    const h3_dit_layout *layout;
    const float *text, *video, *audio; /* the same inputs on every rank */
    const float *ts;
    const int32_t *row_index;
    int n_t;
    int project;                       /* 1: rank 0 alone through the projection communicator */
    double create_s[H3_COMM_MAX_RANKS];
    h3_bench_tp_result *r;             /* rank 0 writes */
} job;

static double now_ms(void) { return (double)g_get_monotonic_time() / 1e3; }

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* The backend's queue drained on every rank, then every rank here. */
static h3_status_code sync_all(const h3_tp *tp, h3_backend *b, h3_status *status) {
    h3_status_code rc = h3_backend_synchronize(b, status);
    if (rc == H3_OK) rc = h3_backend_check(b, status);
    if (rc == H3_OK && tp->comm) rc = h3_comm_barrier(tp->comm, status);
    return rc;
}

static h3_status_code rank_backend(const h3_bench_tp_params *p, int device, h3_backend **out, h3_status *status) {
    if (device < 0) return h3_backend_cpu_create(p->cpu_threads, out, status);
#ifdef H3_HAVE_CUDA
    h3_status_code rc = h3_backend_cuda_create(device, out, status);
    /* what h3-bench chose for its own backend, before the handshake may narrow it */
    if (rc == H3_OK && p->attention_variant)
        h3_backend_cuda_set_attention_variant(*out, (h3_cuda_attention_variant)p->attention_variant);
    if (rc == H3_OK && p->vsa_pipelined) h3_backend_cuda_set_vsa_pipelined(*out, p->vsa_pipelined);
    return rc;
#else
    return h3_fail(status, H3_ERR_UNSUPPORTED, "device %d: this build of h3core has no CUDA backend", device);
#endif
}

static void traffic_delta(const h3_comm_traffic *a, const h3_comm_traffic *b, h3_comm_traffic *d) {
    d->all_reduce_calls = b->all_reduce_calls - a->all_reduce_calls;
    d->all_reduce_bytes = b->all_reduce_bytes - a->all_reduce_bytes;
    d->all_gather_calls = b->all_gather_calls - a->all_gather_calls;
    d->all_gather_bytes = b->all_gather_bytes - a->all_gather_bytes;
    d->broadcast_calls = b->broadcast_calls - a->broadcast_calls;
    d->broadcast_bytes = b->broadcast_bytes - a->broadcast_bytes;
}

/* reps timed calls of what: 0 the forward, 1 the all-reduces alone; medians to r on rank 0. */
static h3_status_code timed(const h3_tp *tp, h3_backend *b, h3_dit *dit, job *j, h3_tensor *io, h3_tensor *red,
                            int what, int reps, double *t, h3_status *status) {
    const h3_bench_tp_params *p = j->p;
    h3_status_code rc = H3_OK;
    for (int i = 0; i < reps && rc == H3_OK; i++) {
        rc = sync_all(tp, b, status);
        double t0 = now_ms();
        if (rc == H3_OK && what == 0)
            rc = h3_dit_forward(dit, &io[0], &io[1], j->ts, j->n_t, j->row_index, &io[2], &io[3], status);
        for (int k = 0; rc == H3_OK && what == 1 && k < 2 * p->blocks; k++)
            rc = h3_comm_all_reduce_sum(tp->comm, b, red, status);
        if (rc == H3_OK) rc = sync_all(tp, b, status);
        t[i] = now_ms() - t0;
    }
    if (rc == H3_OK) qsort(t, (size_t)reps, sizeof *t, cmp_double);
    return rc;
}

/* Inputs, begin, warm-up, timed forwards, the velocities' check, the
 * all-reduces alone; all activations in one arena phase. */
static h3_status_code run_rank(const h3_tp *tp, h3_backend *b, h3_dit *dit, job *j, h3_status *status) {
    const h3_bench_tp_params *p = j->p;
    const h3_dit_config *c = p->cfg;
    const h3_dit_layout *l = j->layout;
    h3_bench_tp_result *r = j->r;
    int lead = tp->rank == 0;
    int64_t vf = (int64_t)c->in_channels * c->patch_h * c->patch_w, af = c->audio_in_channels;
    size_t mark = h3_arena_mark(b);
    h3_tensor text = h3_new_2d(b, h3_backend_compute_dtype(b), l->num_text, c->text_dim);
    h3_tensor io[4] = {h3_new_2d(b, H3_F32, l->num_video_rows, vf), h3_new_2d(b, H3_F32, l->num_audio_rows, af),
                       h3_new_2d(b, H3_F32, l->num_video_rows, vf), h3_new_2d(b, H3_F32, l->num_audio_rows, af)};
    h3_status_code rc = h3_backend_check(b, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &text, j->text, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &io[0], j->video, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &io[1], j->audio, status);
    if (rc == H3_OK) rc = sync_all(tp, b, status);
    double t0 = now_ms();
    if (rc == H3_OK) rc = h3_dit_begin(dit, l, &text, status);
    if (rc == H3_OK) rc = sync_all(tp, b, status);
    if (rc == H3_OK && lead) {
        r->begin_ms = now_ms() - t0;
        if (p->log) {
            fprintf(p->log, "forward tp%d: begin %.1f ms; forward of %d blocks at S %lld...\n", tp->size, r->begin_ms,
                    p->blocks, (long long)l->seq_len);
            fflush(p->log);
        }
    }
    /* warm-up: grows the arena; what one forward's collectives carry */
    h3_comm_traffic before = {0}, after = {0};
    if (tp->comm) h3_comm_traffic_get(tp->comm, &before);
    if (rc == H3_OK) rc = h3_dit_forward(dit, &io[0], &io[1], j->ts, j->n_t, j->row_index, &io[2], &io[3], status);
    if (tp->comm) h3_comm_traffic_get(tp->comm, &after);
    if (lead) traffic_delta(&before, &after, &r->fwd_traffic);
    double *t = calloc((size_t)(p->reps > p->comm_reps ? p->reps : p->comm_reps) + 1, sizeof *t);
    if (rc == H3_OK && !t) rc = h3_fail(status, H3_ERR_NO_MEMORY, "out of host memory");
    if (rc == H3_OK) rc = timed(tp, b, dit, j, io, NULL, 0, p->reps, t, status);
    if (rc == H3_OK && lead) {
        r->fwd_ms = t[p->reps / 2];
        r->fwd_min_ms = t[0];
        r->fwd_max_ms = t[p->reps - 1];
        /* the velocities must be finite: random weights at full size are no excuse for NaN */
        size_t n = (size_t)h3_tensor_numel(&io[2]);
        float *host = p->video_out ? p->video_out : malloc(n * sizeof *host + 1);
        if (!host) rc = h3_fail(status, H3_ERR_NO_MEMORY, "out of host memory");
        if (rc == H3_OK) rc = h3_tensor_download_f32(b, &io[2], host, status);
        r->nonfinite = 0;
        for (size_t i = 0; rc == H3_OK && i < n; i++) r->nonfinite += !isfinite(host[i]);
        if (host != p->video_out) free(host);
    }
    h3_dit_end(dit);
    /* The row-parallel linears' sums alone: the same tensor, the same count,
     * float32 above one rank (h3_tp_linear_row_parallel). Every rank decides
     * alike, so every rank calls the same collectives. */
    if (rc == H3_OK && p->comm_reps > 0 && tp->size > 1 && tp->comm) {
        h3_dtype dt = H3_F32;
        h3_tensor red = h3_new_2d(b, dt, l->seq_len, c->hidden_size);
        h3_op_fill(b, &red, 0.0f);
        rc = timed(tp, b, dit, j, io, &red, 1, p->comm_reps, t, status);
        if (rc == H3_OK && lead) {
            r->comm_ms = t[p->comm_reps / 2];
            r->comm_bytes = (uint64_t)h3_tensor_numel(&red) * sizeof(float);
        }
    }
    free(t);
    h3_arena_reset(b, mark);
    return rc;
}

/* On each rank's thread, like the engine's start_rank: backend on its
 * device, probe, handshake, its shard; then the run; then everything freed. */
static h3_status_code bench_rank(const h3_tp *tp, void *user, h3_status *status) {
    job *j = user;
    const h3_bench_tp_params *p = j->p;
    int device = j->devices[tp->rank];
    h3_backend *b = NULL;
    h3_dit *dit = NULL;
    h3_status bs;
    h3_status_clear(&bs);
    h3_status_code rc = rank_backend(p, device, &b, &bs);
    h3_tp_probe probe;
    /* A projection agrees with itself: its one rank stands for the others,
     * which would hold as much on devices of their own. */
    h3_tp alone = H3_TP_SINGLE;
    h3_tp_probe_rank(rc == H3_OK ? b : NULL, tp->rank, device, j->devices, j->project ? 1 : tp->size,
                     j->plan->rank_bytes[tp->rank], rc == H3_OK ? NULL : bs.message, &probe);
    h3_tp_decision d;
    rc = h3_tp_handshake(j->project ? &alone : tp, b, &probe, &d, status);
    if (rc == H3_OK && tp->rank == 0) {
        snprintf(j->r->fallback, sizeof j->r->fallback, "%s", d.fallback);
        snprintf(j->r->device, sizeof j->r->device, "%s", probe.name);
        if (p->log) {
            fprintf(p->log, "forward tp%d: building a random h3_dit of %d blocks on each rank...\n", tp->size,
                    p->blocks);
            fflush(p->log);
        }
    }
    double t0 = now_ms();
    if (rc == H3_OK) rc = h3_dit_create_random(b, p->cfg, p->blocks, p->model_seed, tp, &dit, status);
    j->create_s[tp->rank] = (now_ms() - t0) / 1e3;
    if (rc == H3_OK && p->vsa) rc = h3_dit_create_random_gates(dit, p->model_seed + 1, status);
    if (rc == H3_OK && p->vsa) {
        h3_vsa_params vp = h3_vsa_params_default();
        vp.sparsity = p->vsa_sparsity;
        rc = h3_dit_set_vsa(dit, &vp, status);
    }
    if (rc == H3_OK) rc = run_rank(tp, b, dit, j, status);
    h3_dit_free(dit);
    h3_backend_destroy(b);
    return rc;
}

/* ---- the group ------------------------------------------------------------------------------ */

/* Rank 0 of n on this thread and the first device, its collectives replaced
 * by device copies (h3_comm_group_create_projection). */
static h3_status_code project_rank0(job *j, int n, h3_status *status) {
    h3_comm_group *group = NULL;
    h3_status_code rc = h3_comm_group_create_projection(n, &group, status);
    if (rc != H3_OK) return rc;
    snprintf(j->r->comm, sizeof j->r->comm, "%s", h3_comm_group_name(group));
    h3_tp tp = {0, n, h3_comm_group_rank(group, 0)};
    rc = bench_rank(&tp, j, status);
    h3_comm_group_destroy(group);
    return rc;
}

static void host_uniform(float *x, size_t n, uint64_t seed, float lo, float hi) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = lo + (hi - lo) * (float)((double)(s >> 11) / 9007199254740992.0);
    }
}

h3_status_code h3_bench_tp_forward(const h3_bench_tp_params *p, const int *devices, int n, h3_bench_tp_result *r,
                                   h3_status *status) {
    memset(r, 0, sizeof *r);
    r->size = n;
    if (p->blocks < 1 || p->blocks > p->cfg->num_layers || p->reps < 1 || p->comm_reps < 0)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "forward tp%d: %d blocks (1..%d), %d reps (>= 1)", n,
                       p->blocks, p->cfg->num_layers, p->reps);
    if (p->vsa && !(p->vsa_sparsity >= 0.0f && p->vsa_sparsity < 1.0f))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "forward: VSA sparsity %g: must be in [0, 1)",
                       (double)p->vsa_sparsity);
    int cpu = devices[0] < 0;
    for (int i = 1; i < (p->project ? 1 : n); i++)
        if ((devices[i] < 0) != cpu)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "forward: CPU and GPU ranks in one group");
    /* The plan: the degree must divide the model; what each rank will hold. */
    h3_dit_config cfg = *p->cfg;
    cfg.num_layers = p->blocks;
    h3_tp_plan plan;
    h3_status_code rc = h3_tp_plan_make(n, &cfg, NULL, 0, cpu ? 4 : 2, 0, 0, &plan, status);
    if (rc != H3_OK) return rc;

    job j;
    memset(&j, 0, sizeof j);
    j.p = p;
    j.devices = devices;
    j.plan = &plan;
    j.r = r;
    h3_dit_layout *l = NULL;
    rc = h3_dit_layout_build(&p->layout, &l, status);
    int64_t vf = (int64_t)cfg.in_channels * cfg.patch_h * cfg.patch_w;
    size_t nt = l ? (size_t)l->num_text * (size_t)cfg.text_dim : 0, nv = l ? (size_t)(l->num_video_rows * vf) : 0;
    size_t na = l ? (size_t)(l->num_audio_rows * cfg.audio_in_channels) : 0;
    float *text = malloc(nt * sizeof *text + 1), *video = malloc(nv * sizeof *video + 1);
    float *audio = malloc(na * sizeof *audio + 1), ts[H3_DIT_MAX_TIMESTEPS];
    int32_t *row_index = l ? malloc((size_t)l->seq_len * sizeof *row_index) : NULL;
    if (rc == H3_OK && (!text || !video || !audio || !row_index))
        rc = h3_fail(status, H3_ERR_NO_MEMORY, "forward: out of host memory");
    if (rc == H3_OK) rc = h3_dit_layout_timesteps(l, p->t_video, p->t_audio, ts, &j.n_t, row_index, status);
    if (rc == H3_OK) {
        host_uniform(text, nt, p->input_seed, -1.0f, 1.0f);
        host_uniform(video, nv, p->input_seed + 1, -1.7f, 1.7f);
        host_uniform(audio, na, p->input_seed + 2, -1.7f, 1.7f);
        j.layout = l;
        j.text = text;
        j.video = video;
        j.audio = audio;
        j.ts = ts;
        j.row_index = row_index;
        r->S = l->seq_len;
        r->n_t = j.n_t;
    }
    /* Like the engine: one GPU without NCCL still runs the rank machinery
     * through a one-rank CPU group, which moves nothing. */
    h3_comm_group *group = NULL;
    h3_tp_team *team = NULL;
    j.project = p->project;
    if (rc == H3_OK && p->project) {
        rc = project_rank0(&j, n, status);
    } else if (rc == H3_OK) {
        int nccl = !cpu && (h3_comm_have_nccl() || n > 1);
        rc = nccl ? h3_comm_group_create_nccl(n, devices, &group, status) : h3_comm_group_create_cpu(n, &group, status);
        if (rc == H3_OK) {
            snprintf(r->comm, sizeof r->comm, "%s", h3_comm_group_name(group));
            rc = h3_tp_team_create(group, &team, status); /* owns the group, even on failure */
        }
    }
    if (rc == H3_OK && team) rc = h3_tp_team_run(team, bench_rank, &j, status);
    for (int i = 0; rc == H3_OK && i < n; i++)
        if (j.create_s[i] > r->create_s) r->create_s = j.create_s[i];
    h3_tp_team_destroy(team);
    free(text);
    free(video);
    free(audio);
    free(row_index);
    h3_dit_layout_free(l);
    return rc;
}
