/* test_tp.c - tensor parallelism on the CPU communicator.
 *
 * - the communicator: deterministic rank-order sums, gather, broadcast,
 *   exchange; a mismatch, an abort, a sticky backend error, an injected
 *   fault and a timeout fail every rank (no hang); reset recovers;
 * - the plan: the degrees the real model splits over (1, 2, 4, 7, 8), a
 *   clear error for any other, the text conditioner's rank-0 fallback;
 *   sharded loading of every role;
 * - the agreement: one decision from the same probes, failures named;
 * - the models at TP 1/2/4/7/8 against TP1 and the goldens: the DiT forward
 *   and the text conditioner (tiny-h3 at TP 1/2 against the goldens, and a
 *   "wide" test model written here with 56 DiT heads and 56/8 text heads for
 *   the degrees tiny-h3's 2 heads cannot split into), the tiled video VAE
 *   decode (15 tiles over 1..8 ranks against the golden);
 * - the engine with devices "cpu:N": the end-to-end golden at TP2, the
 *   wide model's media at TP 2/4/7/8 against TP1, an injected fault on rank
 *   k at step s ending every rank with an error (under a watchdog), recovery,
 *   reopen, and refused degrees. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "h3.h"
#include "model/h3_adapter.h"
#include "parallel/h3_comm.h"
#include "model/h3_dit.h"
#include "model/h3_dit_layout.h"
#include "base/h3_safetensors.h"
#include "h3_test.h"
#include "h3_test_golden.h"
#include "h3_test_capture.h"
#include "model/h3_text_encoder.h"
#include "parallel/h3_tp.h"
#include "model/h3_tp_plan.h"
#include "engine/h3_engine.h" /* h3_engine_inject_fault */
#include "model/h3_video_vae.h"

#define MAX_RANKS 8
#define TINY "models/tiny-h3"
/* Rounding between TP degrees: partial sums are added in another order. */
#define TP_TOLERANCE 1e-5

static const int degrees[] = {1, 2, 4, 7, 8};
static char *wide_dir; /* the wide test model, written by main */

/* ---- small helpers ------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static float gauss(void) { return (float)(sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform())); }

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

/* A group of n CPU ranks with a team of threads. */
static h3_tp_team *make_team(int n) {
    h3_comm_group *g = NULL;
    h3_tp_team *t = NULL;
    h3_status st;
    CHECK(h3_comm_group_create_cpu(n, &g, &st) == H3_OK, "cpu group %d: %s", n, st.message);
    if (g) CHECK(h3_tp_team_create(g, &t, &st) == H3_OK, "team %d: %s", n, st.message);
    return t;
}

static h3_tp team_tp(h3_tp_team *t, int rank) {
    h3_tp tp = {rank, h3_tp_team_size(t), h3_comm_group_rank(h3_tp_team_group(t), rank)};
    return tp;
}

/* ---- the communicator ------------------------------------------------------------------ */

typedef struct comm_job {
    h3_backend *b[MAX_RANKS];
    float *in[MAX_RANKS];   /* per rank inputs */
    float *out[MAX_RANKS];  /* per rank results */
    int64_t n;
    int mode;               /* which scenario */
    h3_status_code rc[MAX_RANKS];
    char msg[MAX_RANKS][H3_STATUS_MESSAGE_SIZE];
} comm_job;

enum { JOB_COLLECTIVES, JOB_MISMATCH, JOB_ABORT, JOB_STICKY, JOB_SLOW };

static h3_status_code comm_rank(const h3_tp *tp, void *user, h3_status *status) {
    comm_job *j = user;
    int r = tp->rank, n = tp->size;
    h3_backend *b = j->b[r];
    size_t mark = h3_arena_mark(b);
    h3_tensor t = h3_new_1d(b, H3_F32, j->n);
    h3_status_code rc = h3_tensor_upload_f32(b, &t, j->in[r], status);
    if (rc == H3_OK && j->mode == JOB_MISMATCH && r == n - 1) {
        h3_tensor g = h3_new_2d(b, H3_F32, n, 4);
        rc = h3_comm_all_gather(tp->comm, b, &g, status);
    } else if (rc == H3_OK && j->mode == JOB_ABORT && r == 1) {
        h3_status why;
        h3_fail(&why, H3_ERR_IO, "rank 1 could not read its weights");
        h3_comm_abort(tp->comm, &why);
        rc = h3_fail(status, H3_ERR_IO, "rank 1 could not read its weights");
    } else if (rc == H3_OK && j->mode == JOB_STICKY && r == n - 1) {
        h3_backend_set_error(b, H3_ERR_NO_MEMORY, "rank %d ran out of memory in an op", r);
        rc = h3_comm_all_reduce_sum(tp->comm, b, &t, status);
    } else if (rc == H3_OK && j->mode == JOB_SLOW && r == 1) {
        g_usleep(1500 * 1000); /* longer than the group's timeout */
        rc = h3_comm_all_reduce_sum(tp->comm, b, &t, status);
    } else if (rc == H3_OK) {
        rc = h3_comm_all_reduce_sum(tp->comm, b, &t, status);
    }
    if (rc == H3_OK) rc = h3_tensor_download_f32(b, &t, j->out[r], status);
    /* Gather: rank r's chunk of 3 values is r*10 + k. */
    if (rc == H3_OK && j->mode == JOB_COLLECTIVES) {
        h3_tensor g = h3_new_2d(b, H3_F32, n, 3);
        float host[MAX_RANKS * 3], mine[3] = {(float)(r * 10), (float)(r * 10 + 1), (float)(r * 10 + 2)};
        for (int i = 0; i < 3 * n; i++) host[i] = -1.0f;
        memcpy(host + 3 * r, mine, sizeof mine);
        rc = h3_tensor_upload_f32(b, &g, host, status);
        if (rc == H3_OK) rc = h3_comm_all_gather(tp->comm, b, &g, status);
        if (rc == H3_OK) rc = h3_tensor_download_f32(b, &g, host, status);
        for (int i = 0; rc == H3_OK && i < 3 * n; i++)
            if (host[i] != (float)((i / 3) * 10 + i % 3)) rc = h3_fail(status, H3_ERR_INTERNAL, "gather value %d", i);
        /* broadcast from the last rank */
        h3_tensor bc = h3_new_1d(b, H3_F32, 2);
        float v[2] = {(float)r, (float)-r};
        if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &bc, v, status);
        if (rc == H3_OK) rc = h3_comm_broadcast(tp->comm, b, &bc, n - 1, status);
        if (rc == H3_OK) rc = h3_tensor_download_f32(b, &bc, v, status);
        if (rc == H3_OK && (v[0] != (float)(n - 1) || v[1] != (float)-(n - 1)))
            rc = h3_fail(status, H3_ERR_INTERNAL, "broadcast got %g %g", v[0], v[1]);
        int all[MAX_RANKS], me = 100 + r;
        if (rc == H3_OK) rc = h3_comm_exchange(tp->comm, &me, all, sizeof me, status);
        for (int i = 0; rc == H3_OK && i < n; i++)
            if (all[i] != 100 + i) rc = h3_fail(status, H3_ERR_INTERNAL, "exchange slot %d = %d", i, all[i]);
        if (rc == H3_OK) rc = h3_comm_barrier(tp->comm, status);
    }
    h3_arena_reset(b, mark);
    j->rc[r] = rc;
    snprintf(j->msg[r], sizeof j->msg[r], "%s", rc == H3_OK ? "" : status->message);
    return rc;
}

static void comm_job_init(comm_job *j, int n, int64_t count) {
    memset(j, 0, sizeof *j);
    j->n = count;
    for (int r = 0; r < n; r++) {
        h3_status st;
        h3_backend_cpu_create(1, &j->b[r], &st);
        j->in[r] = malloc((size_t)count * sizeof(float));
        j->out[r] = malloc((size_t)count * sizeof(float));
        /* magnitudes far apart, so the addition order shows in the bits */
        for (int64_t i = 0; i < count; i++) j->in[r][i] = gauss() * (float)pow(10.0, (double)((r + i) % 7) - 3.0);
    }
}

static void comm_job_free(comm_job *j, int n) {
    for (int r = 0; r < n; r++) {
        h3_backend_destroy(j->b[r]);
        free(j->in[r]);
        free(j->out[r]);
    }
}

static void test_comm_collectives(void) {
    for (int n = 1; n <= MAX_RANKS; n++) {
        h3_tp_team *t = make_team(n);
        if (!t) continue;
        comm_job j;
        comm_job_init(&j, n, 5000);
        h3_status st;
        h3_status_code rc = h3_tp_team_run(t, comm_rank, &j, &st);
        CHECK(rc == H3_OK, "tp%d collectives: %s", n, st.message);
        int same = 1, exact = 1;
        for (int64_t i = 0; i < j.n; i++) {
            float sum = j.in[0][i];
            for (int r = 1; r < n; r++) sum += j.in[r][i]; /* rank order, float32 */
            for (int r = 0; r < n; r++) {
                exact &= memcmp(&j.out[r][i], &sum, sizeof sum) == 0;
                same &= memcmp(&j.out[r][i], &j.out[0][i], sizeof sum) == 0;
            }
        }
        CHECK(exact, "tp%d all-reduce is not ((x0 + x1) + x2)... in float32", n);
        CHECK(same, "tp%d ranks received different bits", n);
        /* the same run again gives the same bits */
        float *first = g_memdup2(j.out[0], (size_t)j.n * sizeof(float));
        rc = h3_tp_team_run(t, comm_rank, &j, &st);
        CHECK(rc == H3_OK && memcmp(first, j.out[0], (size_t)j.n * sizeof(float)) == 0, "tp%d rerun differs", n);
        g_free(first);
        comm_job_free(&j, n);
        h3_tp_team_destroy(t);
    }
}

static void test_comm_failures(void) {
    struct { int mode; h3_status_code want; const char *text; double timeout; } cases[] = {
        {JOB_MISMATCH, H3_ERR_INTERNAL, "collective mismatch", 0},
        {JOB_ABORT, H3_ERR_IO, "rank 1 could not read its weights", 0},
        {JOB_STICKY, H3_ERR_NO_MEMORY, "ran out of memory in an op", 0},
        {JOB_SLOW, H3_ERR_DEVICE, "did not reach all-reduce #0 within", 0.5},
    };
    for (size_t c = 0; c < G_N_ELEMENTS(cases); c++) {
        int n = 4;
        h3_tp_team *t = make_team(n);
        if (!t) continue;
        if (cases[c].timeout > 0) h3_comm_group_set_timeout(h3_tp_team_group(t), cases[c].timeout);
        comm_job j;
        comm_job_init(&j, n, 64);
        j.mode = cases[c].mode;
        h3_status st;
        gint64 t0 = g_get_monotonic_time();
        h3_status_code rc = h3_tp_team_run(t, comm_rank, &j, &st);
        double dt = (double)(g_get_monotonic_time() - t0) / 1e6;
        CHECK(rc == cases[c].want && strstr(st.message, cases[c].text), "case %zu: rc %d '%s'", c, rc, st.message);
        int all_failed = 1;
        for (int r = 0; r < n; r++) all_failed &= j.rc[r] != H3_OK;
        CHECK(all_failed, "case %zu: a rank went on after the failure", c);
        printf("comm failure %zu on 4 ranks: all ranks stopped after %.3f s: %s\n", c, dt, st.message);
        j.mode = JOB_COLLECTIVES;
        for (int r = 0; r < n; r++) h3_backend_clear_error(j.b[r]); /* as the engine does after a request */
        rc = h3_tp_team_run(t, comm_rank, &j, &st);
        CHECK(rc == H3_OK, "case %zu: the group does not recover: %s", c, st.message);
        comm_job_free(&j, n);
        h3_tp_team_destroy(t);
    }

    /* An injected device fault at a rank's 2nd collective. */
    h3_tp_team *t = make_team(3);
    if (t) {
        comm_job j;
        comm_job_init(&j, 3, 64);
        h3_comm_group_inject_fault(h3_tp_team_group(t), 2, 1);
        h3_status st;
        h3_status_code rc = h3_tp_team_run(t, comm_rank, &j, &st);
        CHECK(rc == H3_ERR_DEVICE && strstr(st.message, "injected fault on rank 2 at all-gather #1"), "fault: %d %s",
              rc, st.message);
        CHECK(j.rc[0] != H3_OK && j.rc[1] != H3_OK && strstr(j.msg[0], "rank 2 failed"), "fault: others: '%s'",
              j.msg[0]);
        h3_comm_group_inject_fault(h3_tp_team_group(t), -1, 0);
        CHECK(h3_tp_team_run(t, comm_rank, &j, &st) == H3_OK, "after fault: %s", st.message);
        comm_job_free(&j, 3);
        h3_tp_team_destroy(t);
    }
}

/* ---- the plan and sharded loading --------------------------------------------------------- */

static void test_plan(void) {
    h3_dit_config real, tiny;
    h3_text_encoder_config text;
    h3_status st;
    if (h3_dit_config_load(h3_test_data("official/transformer"), &real, &st) != H3_OK ||
        h3_dit_config_load(h3_test_data(TINY "/transformer"), &tiny, &st) != H3_OK ||
        h3_text_encoder_config_load(h3_test_data("official/text_encoder"), &text, &st) != H3_OK) {
        CHECK(0, "configs: %s", st.message);
        return;
    }
    int v[16], n = h3_tp_valid_degrees(&real, v, 8);
    CHECK(n == 5 && v[0] == 1 && v[1] == 2 && v[2] == 4 && v[3] == 7 && v[4] == 8, "real model degrees (%d)", n);
    n = h3_tp_valid_degrees(&tiny, v, 8);
    CHECK(n == 2 && v[0] == 1 && v[1] == 2, "tiny model degrees (%d)", n);
    h3_tp_plan p;
    for (int d = 1; d <= 8; d++) {
        h3_status_code rc = h3_tp_plan_make(d, &real, &text, 50, 2, 0, 0, &p, &st);
        int valid = d == 1 || d == 2 || d == 4 || d == 7 || d == 8;
        if (valid) {
            CHECK(rc == H3_OK && p.dit_heads == 56 / d && p.dit_ffn == 14336 / d, "real tp%d: %s", d, st.message);
            int text_split = d != 7;
            CHECK(p.text_size == (text_split ? d : 1) && (text_split ? p.note[0] == 0 : strstr(p.note, "rank 0") != NULL),
                  "real tp%d text plan: size %d note '%s'", d, p.text_size, p.note);
            if (d == 7) printf("plan tp7: %s\n", p.note);
            if (d == 4)
                printf("plan tp4 (real model, bf16): rank 0 holds %.1f GiB of transformer + text weights, rank 1 "
                       "%.1f GiB\n",
                       (double)p.rank_bytes[0] / (1 << 30), (double)p.rank_bytes[1] / (1 << 30));
        } else {
            CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "1, 2, 4, 7 or 8"), "real tp%d: rc %d '%s'", d,
                  rc, st.message);
        }
    }
    CHECK(h3_tp_plan_make(3, &real, &text, 50, 2, 0, 0, &p, &st) == H3_ERR_INVALID_ARGUMENT, "tp3 refused");
    printf("tp3 refused: %s\n", st.message);
    CHECK(h3_tp_plan_make(4, &tiny, NULL, 0, 4, 0, 0, &p, &st) == H3_ERR_INVALID_ARGUMENT &&
              strstr(st.message, "1 or 2 ranks"),
          "tiny tp4: %s", st.message);
    /* TP4 holds a quarter of the sharded weights. */
    h3_tp_plan p1, p4;
    h3_tp_plan_make(1, &real, NULL, 0, 2, 0, 0, &p1, &st);
    h3_tp_plan_make(4, &real, NULL, 0, 2, 0, 0, &p4, &st);
    double ratio = (double)p4.rank_bytes[0] / (double)p1.rank_bytes[0];
    printf("plan: transformer bytes per rank tp1 %.2f GiB, tp4 %.2f GiB (ratio %.3f)\n",
           (double)p1.rank_bytes[0] / (1 << 30), (double)p4.rank_bytes[0] / (1 << 30), ratio);
    CHECK(ratio > 0.25 && ratio < 0.3, "tp4 transformer share %.3f", ratio);
}

/* Each role keeps the right rows / columns of a [12, 6] tensor of ids. */
static void test_sharded_load(void) {
    h3_backend *b;
    h3_status st;
    h3_backend_cpu_create(1, &b, &st);
    float data[12 * 6];
    for (int i = 0; i < 72; i++) data[i] = (float)i;
    h3_st_tensor src = {.name = "w", .dtype = H3_ST_F32, .ndim = 2, .shape = {12, 6}, .numel = 72, .data = data,
                        .nbytes = sizeof data, .file_path = "test"};
    struct { h3_tp_role role; int size, rank; int64_t rows, cols; int ok; } cases[] = {
        {H3_TP_QKV, 2, 1, 6, 6, 1},  {H3_TP_QKV, 4, 3, 3, 6, 1},  {H3_TP_HEADS, 3, 2, 4, 6, 1},
        {H3_TP_GATHER, 4, 1, 3, 6, 1}, {H3_TP_FFN_IN, 3, 1, 4, 6, 1}, {H3_TP_OUT, 3, 2, 12, 2, 1},
        {H3_TP_FFN_OUT, 2, 0, 12, 3, 1}, {H3_TP_QKV, 8, 0, 0, 0, 0}, {H3_TP_OUT, 4, 0, 0, 0, 0},
        {H3_TP_REPLICATED, 4, 2, 12, 6, 1},
    };
    for (size_t c = 0; c < G_N_ELEMENTS(cases); c++) {
        h3_tp tp = {cases[c].rank, cases[c].size, NULL};
        h3_tensor t = {0};
        h3_status_code rc = h3_tp_weight_load(b, &tp, &src, cases[c].role, H3_WEIGHT_F32, &t, &st);
        if (!cases[c].ok) {
            CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "do not split over"), "case %zu: %s", c,
                  st.message);
            continue;
        }
        CHECK(rc == H3_OK && t.shape[0] == cases[c].rows && t.shape[1] == cases[c].cols, "case %zu: %s", c,
              st.message);
        if (rc != H3_OK) continue;
        float got[72];
        h3_tensor_download_f32(b, &t, got, &st);
        int ok = 1, parts = cases[c].role == H3_TP_QKV ? 3 : cases[c].role == H3_TP_FFN_IN ? 2 : 1;
        for (int64_t r = 0; r < t.shape[0]; r++)
            for (int64_t k = 0; k < t.shape[1]; k++) {
                int64_t src_row = r, src_col = k;
                if (cases[c].role == H3_TP_OUT || cases[c].role == H3_TP_FFN_OUT) {
                    src_col = cases[c].rank * t.shape[1] + k;
                } else if (cases[c].role != H3_TP_REPLICATED) {
                    int64_t local = t.shape[0] / parts, part = r / local;
                    src_row = part * (12 / parts) + cases[c].rank * local + r % local;
                }
                ok &= got[r * t.shape[1] + k] == data[src_row * 6 + src_col];
            }
        CHECK(ok, "case %zu (%s over %d ranks, rank %d): wrong slice", c, h3_tp_role_name(cases[c].role),
              cases[c].size, cases[c].rank);
        h3_weight_free(b, &t);
    }
    h3_backend_destroy(b);
}

/* ---- agreement ------------------------------------------------------------------------------ */

static h3_tp_probe gpu_probe(int rank, int sm, double free_gib, double need_gib) {
    h3_tp_probe p;
    memset(&p, 0, sizeof p);
    p.rank = rank;
    p.device = rank;
    p.sm = sm;
    p.kernels = (sm >= 80 ? H3_TP_KERNEL_MMA : 0) | (sm == 90 ? H3_TP_KERNEL_WGMMA : 0);
    p.peers = 0xf;
    p.free_bytes = (uint64_t)(free_gib * (1 << 30));
    p.total_bytes = (uint64_t)(141.0 * (1 << 30));
    p.need_bytes = (uint64_t)(need_gib * (1 << 30));
    snprintf(p.name, sizeof p.name, "H200");
    return p;
}

static void test_agreement(void) {
    h3_tp_probe p[4];
    h3_tp_decision d;
    h3_status st;
    for (int r = 0; r < 4; r++) p[r] = gpu_probe(r, 90, 130, 40);
    CHECK(h3_tp_agree(p, 4, &d, &st) == H3_OK && d.fallback[0] == 0 && d.peer_route &&
              (d.kernels & H3_TP_KERNEL_WGMMA),
          "four H200: %s / %s", st.message, d.fallback);
    /* One slower GPU: every rank drops to the kernel all have, recorded. */
    p[2] = gpu_probe(2, 80, 70, 40);
    CHECK(h3_tp_agree(p, 4, &d, &st) == H3_OK && !(d.kernels & H3_TP_KERNEL_WGMMA) && (d.kernels & H3_TP_KERNEL_MMA) &&
              strstr(d.fallback, "rank 2") && strstr(d.fallback, "wgmma"),
          "mixed sm: %s", d.fallback);
    printf("agreement, mixed GPUs: %s\n", d.fallback);
    /* No peer access between two ranks: recorded, NCCL routes through the host. */
    p[2] = gpu_probe(2, 90, 130, 40);
    p[3].peers = 0xb;
    CHECK(h3_tp_agree(p, 4, &d, &st) == H3_OK && !d.peer_route &&
              strstr(d.fallback, "rank 3 cannot access rank 2's memory directly"),
          "peers: %s", d.fallback);
    printf("agreement, no peer access: %s\n", d.fallback);
    p[3].peers = 0xf;
    /* One full GPU: an error naming it, the same on every rank. */
    p[1] = gpu_probe(1, 90, 30, 40);
    CHECK(h3_tp_agree(p, 4, &d, &st) == H3_ERR_NO_MEMORY && strstr(st.message, "rank 1 (cuda:1, H200)"),
          "memory: %s", st.message);
    printf("agreement, one full GPU: %s\n", st.message);
    p[1] = gpu_probe(1, 90, 130, 40);
    /* A rank that could not start. */
    snprintf(p[3].error, sizeof p[3].error, "cudaSetDevice: invalid device ordinal");
    CHECK(h3_tp_agree(p, 4, &d, &st) == H3_ERR_DEVICE && strstr(st.message, "rank 3") &&
              strstr(st.message, "invalid device ordinal"),
          "start: %s", st.message);
    /* CPU ranks share the host: their needs add up. */
    h3_tp_probe c[4];
    for (int r = 0; r < 4; r++) {
        memset(&c[r], 0, sizeof c[r]);
        c[r].rank = r;
        c[r].device = -1;
        c[r].kernels = H3_TP_KERNEL_CPU;
        c[r].peers = 0xf;
        c[r].free_bytes = 8ull << 30;
        c[r].total_bytes = 16ull << 30;
        c[r].need_bytes = 2ull << 30;
    }
    h3_status_clear(&st);
    CHECK(h3_tp_agree(c, 4, &d, &st) == H3_ERR_NO_MEMORY && strstr(st.message, "host memory"), "cpu sum: %s",
          st.message);
    printf("agreement, four CPU ranks of 2 GiB in 8 GiB: %s\n", st.message);
    for (int r = 0; r < 4; r++) c[r].need_bytes = 1ull << 30;
    CHECK(h3_tp_agree(c, 4, &d, &st) == H3_OK && d.fallback[0] == 0, "cpu fits: %s", st.message);
}

/* ---- the wide test model ------------------------------------------------------------------------- */

typedef struct tensor_list {
    h3_st_write_tensor t[512];
    float *data[512];
    int n;
} tensor_list;

static float init_value(const char *name, int ndim, const int64_t *shape, int64_t i) {
    if (ndim == 1 && strstr(name, "norm")) return 1.0f + 0.1f * gauss();
    if (ndim == 1) return (strstr(name, "adaln") ? 0.1f : 0.05f) * gauss();
    if (strstr(name, "embed_tokens")) return 0.5f * gauss();
    return gauss() / sqrtf((float)shape[1]);
}

static void add_tensor(const char *name, int ndim, const int64_t *shape, void *user) {
    tensor_list *l = user;
    if (l->n >= 512) return;
    h3_st_write_tensor *t = &l->t[l->n];
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    float *d = malloc((size_t)numel * sizeof *d);
    for (int64_t i = 0; i < numel; i++) d[i] = init_value(name, ndim, shape, i);
    t->name = g_strdup(name);
    t->dtype = H3_ST_F32;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->data = d;
    l->data[l->n++] = d;
}

static int write_list(tensor_list *l, const char *path) {
    h3_status st;
    h3_status_code rc = h3_st_write(path, l->t, (size_t)l->n, NULL, &st);
    CHECK(rc == H3_OK, "write %s: %s", path, st.message);
    for (int i = 0; i < l->n; i++) {
        g_free((char *)l->t[i].name);
        free(l->data[i]);
    }
    l->n = 0;
    return rc == H3_OK;
}

static int write_file(const char *dir, const char *name, const char *text) {
    char *p = g_build_filename(dir, name, NULL);
    int ok = g_file_set_contents(p, text, -1, NULL);
    CHECK(ok, "write %s", p);
    g_free(p);
    return ok;
}

/* A file is linked; a folder is made and its entries linked: a component
 * folder linked out of the model folder is refused (issue 31). */
static void link_tree(const char *from, const char *to) {
    if (!g_file_test(from, G_FILE_TEST_IS_DIR)) {
        char *abs = g_canonicalize_filename(from, NULL);
        CHECK(symlink(abs, to) == 0, "symlink %s", to);
        g_free(abs);
        return;
    }
    g_mkdir(to, 0755);
    GDir *d = g_dir_open(from, 0, NULL);
    for (const char *n; d && (n = g_dir_read_name(d));) {
        char *f = g_build_filename(from, n, NULL), *t = g_build_filename(to, n, NULL);
        link_tree(f, t);
        g_free(f);
        g_free(t);
    }
    if (d) g_dir_close(d);
}

static void link_from_tiny(const char *dir, const char *name) {
    char *from = g_build_filename(h3_test_data(TINY), name, NULL), *to = g_build_filename(dir, name, NULL);
    link_tree(from, to);
    g_free(from);
    g_free(to);
}

/* tiny-h3 with a transformer of 56 heads (D 56, FFN 112: splits over 1, 2,
 * 4, 7, 8) and a text conditioner of 56 query / 8 key-value heads (splits
 * over 1, 2, 4, 8; over 7 it runs on rank 0), random weights; the VAEs,
 * tokenizer and schedulers are tiny-h3's. */
static char *write_wide_model(void) {
    char *dir = g_dir_make_tmp("h3-tp-XXXXXX", NULL);
    if (!dir) return NULL;
    const char *links[] = {"vae", "audio_vae", "tokenizer", "scheduler", "audio_scheduler", "model_index.json"};
    for (size_t i = 0; i < G_N_ELEMENTS(links); i++) link_from_tiny(dir, links[i]);
    write_file(dir, "golden_meta.json", "{\"text_encoder_layer\": 3}\n");
    char *tdir = g_build_filename(dir, "transformer", NULL), *edir = g_build_filename(dir, "text_encoder", NULL);
    g_mkdir(tdir, 0755);
    g_mkdir(edir, 0755);
    write_file(tdir, "config.json",
               "{\"num_attention_heads\": 56, \"attention_head_dim\": 8, \"hidden_size\": 56, \"num_layers\": 2,"
               " \"num_refiner_layers\": 1, \"ffn_dim\": 112, \"in_channels\": 24, \"audio_in_channels\": 32,"
               " \"patch_size\": [1, 2, 2], \"text_dim\": 32, \"freq_dim\": 16, \"time_embed_hidden_dim\": 48,"
               " \"time_embed_dim\": 28, \"rope_freq_dim\": 1, \"rope_theta\": 10000.0, \"norm_eps\": 1e-05,"
               " \"qk_norm_eps\": 1e-05, \"final_norm_eps\": 1e-05}\n");
    write_file(edir, "config.json",
               "{\"model_type\": \"qwen3_vl\", \"text_config\": {\"attention_bias\": false, \"head_dim\": 16,"
               " \"hidden_act\": \"silu\", \"hidden_size\": 32, \"intermediate_size\": 112,"
               " \"max_position_embeddings\": 4096, \"num_attention_heads\": 56, \"num_hidden_layers\": 3,"
               " \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06, \"vocab_size\": 1088,"
               " \"rope_parameters\": {\"mrope_interleaved\": true, \"mrope_section\": [4, 2, 2],"
               " \"rope_theta\": 5000000.0, \"rope_type\": \"default\"}}}\n");
    tensor_list *l = calloc(1, sizeof *l);
    h3_dit_config dc;
    h3_text_encoder_config tc;
    h3_status st;
    int ok = h3_dit_config_load(tdir, &dc, &st) == H3_OK;
    CHECK(ok, "wide transformer config: %s", st.message);
    if (ok) {
        h3_dit_checkpoint_plan(&dc, H3_DIT_DIFFUSERS, add_tensor, l);
        char *p = g_build_filename(tdir, "diffusion_pytorch_model.safetensors", NULL);
        ok = write_list(l, p);
        g_free(p);
    }
    if (ok) ok = h3_text_encoder_config_load(edir, &tc, &st) == H3_OK;
    h3_text_encoder_tensor_info *info = NULL;
    int n = 0;
    if (ok) ok = h3_text_encoder_tensor_list(&tc, 3, &info, &n, &st) == H3_OK;
    CHECK(ok, "wide text encoder: %s", st.message);
    for (int i = 0; ok && i < n; i++) add_tensor(info[i].name, info[i].ndim, info[i].shape, l);
    if (ok) {
        char *p = g_build_filename(edir, "model.safetensors", NULL);
        ok = write_list(l, p);
        g_free(p);
    }
    free(info);
    free(l);
    g_free(tdir);
    g_free(edir);
    return dir;
}

static void remove_tree(const char *path) {
    if (g_file_test(path, G_FILE_TEST_IS_SYMLINK) || !g_file_test(path, G_FILE_TEST_IS_DIR)) {
        g_remove(path);
        return;
    }
    GDir *d = g_dir_open(path, 0, NULL);
    for (const char *n; d && (n = g_dir_read_name(d));) {
        char *p = g_build_filename(path, n, NULL);
        remove_tree(p);
        g_free(p);
    }
    if (d) g_dir_close(d);
    g_rmdir(path);
}

/* ---- the transformer at TP N ------------------------------------------------------------------------ */

typedef struct dit_inputs {
    h3_dit_layout *layout;
    float *text, *video, *audio, *ts;
    int32_t *row_index;
    int n_ts;
} dit_inputs;

typedef struct dit_job {
    const dit_inputs *in;
    h3_backend *b[MAX_RANKS];
    h3_dit *dit[MAX_RANKS];
    float *video[MAX_RANKS], *audio[MAX_RANKS];
} dit_job;

static h3_status_code dit_rank(const h3_tp *tp, void *user, h3_status *status) {
    dit_job *j = user;
    const dit_inputs *in = j->in;
    h3_backend *b = j->b[tp->rank];
    h3_dit *dit = j->dit[tp->rank];
    const h3_dit_config *c = h3_dit_get_config(dit);
    const h3_dit_layout *l = in->layout;
    int64_t vf = (int64_t)c->in_channels * c->patch_h * c->patch_w, af = c->audio_in_channels;
    size_t mark = h3_arena_mark(b);
    h3_tensor t = h3_new_2d(b, H3_F32, l->num_text, c->text_dim);
    h3_tensor v = h3_new_2d(b, H3_F32, l->num_video_rows, vf), a = h3_new_2d(b, H3_F32, l->num_audio_rows, af);
    h3_tensor vv = h3_new_2d(b, H3_F32, l->num_video_rows, vf), av = h3_new_2d(b, H3_F32, l->num_audio_rows, af);
    h3_status_code rc = h3_backend_check(b, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &t, in->text, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &v, in->video, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &a, in->audio, status);
    if (rc == H3_OK) rc = h3_dit_begin(dit, l, &t, status);
    if (rc == H3_OK) rc = h3_dit_forward(dit, &v, &a, in->ts, in->n_ts, in->row_index, &vv, &av, status);
    if (rc == H3_OK) rc = h3_tensor_download_f32(b, &vv, j->video[tp->rank], status);
    if (rc == H3_OK) rc = h3_tensor_download_f32(b, &av, j->audio[tp->rank], status);
    h3_dit_end(dit);
    h3_arena_reset(b, mark);
    return rc;
}

/* Loads the transformer of `dir` on n CPU ranks (with `adapter` fused and
 * VSA-H3 on when given) and runs one forward; the velocities of rank 0
 * (caller frees). Checks that every rank returned the same bits.
 * fault_call >= 0 injects a device fault there on rank n-1 first. */
static int run_dit_adapter(const char *dir, int n, const dit_inputs *in, float **video, float **audio,
                           long fault_call, const char *adapter, int vsa) {
    h3_tp_team *t = make_team(n);
    if (!t) return 0;
    dit_job j;
    memset(&j, 0, sizeof j);
    j.in = in;
    h3_status st;
    int ok = 1;
    h3_adapter *a = NULL;
    if (adapter) {
        ok = h3_adapter_open(adapter, &a, &st) == H3_OK;
        CHECK(ok, "adapter %s: %s", adapter, st.message);
    }
    for (int r = 0; r < n && ok; r++) {
        h3_tp tp = team_tp(t, r);
        ok = h3_backend_cpu_create(1, &j.b[r], &st) == H3_OK &&
             h3_dit_load_with_adapter(j.b[r], dir, &tp, a, &j.dit[r], &st) == H3_OK;
        if (ok && vsa) {
            h3_vsa_params vp = h3_vsa_params_default();
            ok = h3_dit_set_vsa(j.dit[r], &vp, &st) == H3_OK;
        }
        CHECK(ok, "dit tp%d rank %d load: %s", n, r, st.message);
    }
    h3_adapter_free(a);
    const h3_dit_config *c = ok ? h3_dit_get_config(j.dit[0]) : NULL;
    size_t nv = c ? (size_t)(in->layout->num_video_rows * c->in_channels * c->patch_h * c->patch_w) : 0;
    size_t na = c ? (size_t)(in->layout->num_audio_rows * c->audio_in_channels) : 0;
    for (int r = 0; r < n && ok; r++) {
        j.video[r] = calloc(nv, sizeof(float));
        j.audio[r] = calloc(na, sizeof(float));
    }
    if (ok && fault_call >= 0) {
        h3_comm_group_inject_fault(h3_tp_team_group(t), n - 1, fault_call);
        gint64 t0 = g_get_monotonic_time();
        h3_status_code rc = h3_tp_team_run(t, dit_rank, &j, &st);
        char want[96];
        snprintf(want, sizeof want, "injected fault on rank %d", n - 1);
        CHECK(rc == H3_ERR_DEVICE && strstr(st.message, want), "dit tp%d fault: rc %d %s", n, rc, st.message);
        printf("dit tp%d: fault at collective #%ld of rank %d stopped every rank in %.3f s: %s\n", n, fault_call,
               n - 1, (double)(g_get_monotonic_time() - t0) / 1e6, st.message);
        h3_comm_group_inject_fault(h3_tp_team_group(t), -1, 0);
        for (int r = 0; r < n; r++) h3_backend_clear_error(j.b[r]);
    }
    if (ok) {
        ok = h3_tp_team_run(t, dit_rank, &j, &st) == H3_OK;
        CHECK(ok, "dit tp%d forward: %s", n, st.message);
    }
    for (int r = 1; r < n && ok; r++)
        CHECK(memcmp(j.video[r], j.video[0], nv * sizeof(float)) == 0 &&
                  memcmp(j.audio[r], j.audio[0], na * sizeof(float)) == 0,
              "dit tp%d: rank %d returned other velocities than rank 0", n, r);
    *video = ok ? j.video[0] : NULL;
    *audio = ok ? j.audio[0] : NULL;
    for (int r = 0; r < n; r++) {
        if (!ok || r > 0) free(j.video[r]), free(j.audio[r]);
        h3_dit_free(j.dit[r]);
        h3_backend_destroy(j.b[r]);
    }
    h3_tp_team_destroy(t);
    return ok;
}

static int run_dit(const char *dir, int n, const dit_inputs *in, float **video, float **audio, long fault_call) {
    return run_dit_adapter(dir, n, in, video, audio, fault_call, NULL, 0);
}

static dit_inputs golden_dit_inputs(h3_st_file *f, int T, int H_lat, int W_lat, int Na) {
    dit_inputs in;
    memset(&in, 0, sizeof in);
    int64_t L = 0, S = 0, nt = 0;
    int32_t *tags = golden_i32(f, "token_tags", &S), *text_idx = golden_i32(f, "text_indices", &L);
    int32_t *text_tags = malloc((size_t)(L + 1) * sizeof *text_tags);
    for (int64_t i = 0; tags && text_idx && i < L; i++) text_tags[i] = tags[text_idx[i]];
    h3_dit_layout_params p = {.text_token_tags = text_tags, .num_text = (int)L, .num_latent_frames = T,
                              .latent_height = H_lat, .latent_width = W_lat, .num_audio_latents = Na,
                              .patch_t = 1, .patch_h = 2, .patch_w = 2};
    h3_status st;
    CHECK(h3_dit_layout_build(&p, &in.layout, &st) == H3_OK, "layout: %s", st.message);
    in.text = golden_f32(f, "encoder_hidden_states", NULL);
    in.video = golden_f32(f, "hidden_states", NULL);
    in.audio = golden_f32(f, "audio_hidden_states", NULL);
    in.ts = golden_f32(f, "timestep", &nt);
    in.n_ts = (int)nt;
    in.row_index = golden_i32(f, "timestep_indices", NULL);
    CHECK(in.layout && in.layout->seq_len == S, "golden layout: %lld rows", (long long)S);
    free(tags);
    free(text_idx);
    free(text_tags);
    return in;
}

static void free_inputs(dit_inputs *in) {
    h3_dit_layout_free(in->layout);
    free(in->text);
    free(in->video);
    free(in->audio);
    free(in->ts);
    free(in->row_index);
}

static void test_dit_tiny(void) {
    h3_st_file *f;
    h3_status st;
    if (h3_st_open(h3_test_data("goldens/tiny-h3/transformer_t2va.safetensors"), &f, &st) != H3_OK) {
        CHECK(0, "golden: %s", st.message);
        return;
    }
    dit_inputs in = golden_dit_inputs(f, 37, 4, 6, 207); /* transformer_t2va: 64x96, 124 frames */
    int64_t nv = 0, na = 0;
    float *gv = golden_f32(f, "sample", &nv), *ga = golden_f32(f, "audio_sample", &na);
    const char *dirs[] = {TINY "/transformer", "models/tiny-h3-native/FL2VA/transformer"};
    float *v1 = NULL, *a1 = NULL;
    for (int d = 0; d < 2 && in.layout && gv && ga; d++)
        for (int n = 1; n <= 2; n++) {
            float *v = NULL, *a = NULL;
            if (!run_dit(h3_test_data(dirs[d]), n, &in, &v, &a, -1)) continue;
            double ev = h3_test_rel_l2(v, gv, (size_t)nv), ea = h3_test_rel_l2(a, ga, (size_t)na);
            printf("tiny dit (%s) tp%d vs golden: video rel L2 %.3e, audio %.3e\n", d ? "native" : "diffusers", n, ev,
                   ea);
            CHECK(ev <= 1e-4 && ea <= 1e-4, "tiny dit tp%d vs golden: %.3e %.3e", n, ev, ea);
            if (d == 0 && n == 1) {
                v1 = v;
                a1 = a;
                continue;
            }
            if (v1) {
                double dv = h3_test_rel_l2(v, v1, (size_t)nv), da = h3_test_rel_l2(a, a1, (size_t)na);
                printf("tiny dit (%s) tp%d vs tp1: video rel L2 %.3e, audio %.3e\n", d ? "native" : "diffusers", n, dv,
                       da);
                CHECK(dv <= TP_TOLERANCE && da <= TP_TOLERANCE, "tiny dit tp%d vs tp1: %.3e %.3e", n, dv, da);
            }
            free(v);
            free(a);
        }
    /* 2 heads do not split over 4 ranks: a clear load error. */
    h3_backend *b;
    h3_dit *dit = NULL;
    h3_backend_cpu_create(1, &b, &st);
    h3_tp tp4 = {0, 4, NULL};
    CHECK(h3_dit_load_tp(b, h3_test_data(TINY "/transformer"), &tp4, &dit, &st) == H3_ERR_INVALID_ARGUMENT &&
              strstr(st.message, "2 attention heads") && dit == NULL,
          "tiny dit tp4: %s", st.message);
    h3_backend_destroy(b);
    free(v1);
    free(a1);
    free(gv);
    free(ga);
    free_inputs(&in);
    h3_st_close(f);
}

/* The FastH3 VSA adapter (its to_gate_compress split by heads like q) and
 * VSA-H3 attention on each rank's heads, against the golden at TP 1 and 2. */
static void test_dit_vsa(void) {
    h3_st_file *f;
    h3_status st;
    if (h3_st_open(h3_test_data("goldens/tiny-h3/vsa_forward_t64.safetensors"), &f, &st) != H3_OK) {
        CHECK(0, "golden: %s", st.message);
        return;
    }
    dit_inputs in = golden_dit_inputs(f, 37, 6, 10, 207); /* 96x160, 124 frames */
    int64_t nv = 0, na = 0;
    float *gv = golden_f32(f, "sample", &nv), *ga = golden_f32(f, "audio_sample", &na);
    for (int n = 1; n <= 2 && in.layout && gv && ga; n++) {
        float *v = NULL, *a = NULL;
        if (!run_dit_adapter(h3_test_data(TINY "/transformer"), n, &in, &v, &a, -1,
                             h3_test_data("adapters/tiny-h3/vsa-datafree"), 1))
            continue;
        double ev = h3_test_rel_l2(v, gv, (size_t)nv), ea = h3_test_rel_l2(a, ga, (size_t)na);
        printf("tiny dit + VSA adapter, VSA-H3 attention, tp%d vs golden: video rel L2 %.3e, audio %.3e\n", n, ev, ea);
        CHECK(ev <= 1e-4 && ea <= 1e-4, "vsa tp%d vs golden: %.3e %.3e", n, ev, ea);
        free(v);
        free(a);
    }
    free(gv);
    free(ga);
    free_inputs(&in);
    h3_st_close(f);
}

static void test_dit_wide(void) {
    char *dir = g_build_filename(wide_dir, "transformer", NULL);
    /* T2VA layout: 5 text rows, 7 latent frames of 4x4 latents, 6 audio latents */
    int32_t tags[5] = {1, 1, 1, 1, 1};
    h3_dit_layout_params p = {.text_token_tags = tags, .num_text = 5, .num_latent_frames = 7, .latent_height = 4,
                              .latent_width = 4, .num_audio_latents = 6, .patch_t = 1, .patch_h = 2, .patch_w = 2};
    dit_inputs in;
    memset(&in, 0, sizeof in);
    h3_status st;
    if (h3_dit_layout_build(&p, &in.layout, &st) != H3_OK) {
        CHECK(0, "wide layout: %s", st.message);
        g_free(dir);
        return;
    }
    const h3_dit_layout *l = in.layout;
    size_t nt = (size_t)l->num_text * 32, nv = (size_t)l->num_video_rows * 96, na = (size_t)l->num_audio_rows * 32;
    in.text = malloc(nt * sizeof(float));
    in.video = malloc(nv * sizeof(float));
    in.audio = malloc(na * sizeof(float));
    for (size_t i = 0; i < nt; i++) in.text[i] = gauss();
    for (size_t i = 0; i < nv; i++) in.video[i] = gauss();
    for (size_t i = 0; i < na; i++) in.audio[i] = gauss();
    in.ts = malloc(H3_DIT_MAX_TIMESTEPS * sizeof(float));
    in.row_index = malloc((size_t)l->seq_len * sizeof(int32_t));
    CHECK(h3_dit_layout_timesteps(l, 0.3f, 0.6f, in.ts, &in.n_ts, in.row_index, &st) == H3_OK, "timesteps: %s",
          st.message);
    float *v1 = NULL, *a1 = NULL;
    run_dit(dir, 1, &in, &v1, &a1, -1);
    for (size_t k = 1; k < G_N_ELEMENTS(degrees) && v1; k++) {
        int n = degrees[k];
        float *v = NULL, *a = NULL;
        if (!run_dit(dir, n, &in, &v, &a, -1)) continue;
        double dv = h3_test_rel_l2(v, v1, nv), da = h3_test_rel_l2(a, a1, na);
        printf("wide dit (56 heads) tp%d vs tp1: video rel L2 %.3e (max |d| %.2e), audio %.3e\n", n, dv,
               max_abs_diff(v, v1, nv), da);
        CHECK(dv <= TP_TOLERANCE && da <= TP_TOLERANCE, "wide dit tp%d vs tp1: %.3e %.3e", n, dv, da);
        free(v);
        free(a);
    }
    /* A device fault in the middle of a forward on the last of 4 ranks: its
     * collective #5 (refiner #0-1, AdaLN gathers #2-3, then the FFN
     * all-reduce of the first block); then the same group recovers and
     * computes the same result. */
    float *v = NULL, *a = NULL;
    if (run_dit(dir, 4, &in, &v, &a, 5) && v1) {
        double dv = h3_test_rel_l2(v, v1, nv);
        CHECK(dv <= TP_TOLERANCE, "wide dit tp4 after a fault: %.3e", dv);
    }
    free(v);
    free(a);
    free(v1);
    free(a1);
    free_inputs(&in);
    g_free(dir);
}

/* ---- the text conditioner at TP N ----------------------------------------------------------------- */

typedef struct text_job {
    h3_backend *b[MAX_RANKS];
    h3_text_encoder *te[MAX_RANKS];
    const int32_t *ids;
    int n_ids;
    float *out[MAX_RANKS];
} text_job;

static h3_status_code text_rank(const h3_tp *tp, void *user, h3_status *status) {
    text_job *j = user;
    h3_backend *b = j->b[tp->rank];
    int D = h3_text_encoder_hidden_size(j->te[tp->rank]);
    size_t mark = h3_arena_mark(b);
    h3_tensor out = h3_new_2d(b, H3_F32, j->n_ids, D);
    h3_status_code rc = h3_text_encoder_forward(j->te[tp->rank], j->ids, j->n_ids, &out, status);
    if (rc == H3_OK) rc = h3_tensor_download_f32(b, &out, j->out[tp->rank], status);
    h3_arena_reset(b, mark);
    return rc;
}

/* Rank 0's states (caller frees); NULL if the degree does not split. */
static float *run_text(const char *dir, int tap, int n, const int32_t *ids, int n_ids, h3_status_code want) {
    h3_tp_team *t = make_team(n);
    if (!t) return NULL;
    text_job j;
    memset(&j, 0, sizeof j);
    j.ids = ids;
    j.n_ids = n_ids;
    h3_status st;
    int ok = 1;
    for (int r = 0; r < n && ok; r++) {
        h3_tp tp = team_tp(t, r);
        h3_backend_cpu_create(1, &j.b[r], &st);
        h3_status_code rc = h3_text_encoder_load_tp(j.b[r], dir, tap, &tp, &j.te[r], &st);
        ok = rc == H3_OK;
        if (want != H3_OK) {
            CHECK(rc == want && strstr(st.message, "do not split"), "text tp%d: rc %d %s", n, rc, st.message);
            break;
        }
        CHECK(ok, "text tp%d rank %d load: %s", n, r, st.message);
    }
    float *result = NULL;
    if (ok && want == H3_OK) {
        int D = h3_text_encoder_hidden_size(j.te[0]);
        for (int r = 0; r < n; r++) j.out[r] = calloc((size_t)n_ids * D, sizeof(float));
        ok = h3_tp_team_run(t, text_rank, &j, &st) == H3_OK;
        CHECK(ok, "text tp%d forward: %s", n, st.message);
        for (int r = 1; r < n && ok; r++)
            CHECK(memcmp(j.out[r], j.out[0], (size_t)n_ids * D * sizeof(float)) == 0, "text tp%d: rank %d differs",
                  n, r);
        result = ok ? j.out[0] : NULL;
        for (int r = ok ? 1 : 0; r < n; r++) free(j.out[r]);
    }
    for (int r = 0; r < n; r++) {
        h3_text_encoder_free(j.te[r]);
        if (j.b[r]) h3_backend_destroy(j.b[r]);
    }
    h3_tp_team_destroy(t);
    return result;
}

static void test_text(void) {
    h3_st_file *f;
    h3_status st;
    if (h3_st_open(h3_test_data("goldens/tiny-h3/text_encoder.safetensors"), &f, &st) != H3_OK) {
        CHECK(0, "golden: %s", st.message);
        return;
    }
    int64_t n_ids = 0, n_ref = 0;
    int32_t *ids = golden_i32(f, "t2va.input_ids", &n_ids);
    float *ref = golden_f32(f, "t2va.prompt_embeds", &n_ref);
    float *t1 = NULL;
    for (int n = 1; n <= 2 && ids && ref; n++) {
        float *o = run_text(h3_test_data(TINY "/text_encoder"), 50, n, ids, (int)n_ids, H3_OK);
        if (!o) continue;
        double e = h3_test_rel_l2(o, ref, (size_t)n_ref);
        printf("tiny text encoder (4 q / 2 kv heads) tp%d vs golden: rel L2 %.3e\n", n, e);
        CHECK(e <= 1e-4, "tiny text tp%d vs golden %.3e", n, e);
        if (n == 1) t1 = o;
        else {
            double d = h3_test_rel_l2(o, t1, (size_t)n_ref);
            printf("tiny text encoder tp2 vs tp1: rel L2 %.3e\n", d);
            CHECK(d <= TP_TOLERANCE, "tiny text tp2 vs tp1: %.3e", d);
            free(o);
        }
    }
    run_text(h3_test_data(TINY "/text_encoder"), 50, 4, ids, (int)n_ids, H3_ERR_INVALID_ARGUMENT);
    free(t1);
    /* The wide conditioner: 56 query / 8 key-value heads, 3 layers. */
    char *dir = g_build_filename(wide_dir, "text_encoder", NULL);
    float *w1 = run_text(dir, 3, 1, ids, (int)n_ids, H3_OK);
    int wn[] = {2, 4, 8};
    for (size_t k = 0; k < G_N_ELEMENTS(wn) && w1; k++) {
        float *o = run_text(dir, 3, wn[k], ids, (int)n_ids, H3_OK);
        if (!o) continue;
        double d = h3_test_rel_l2(o, w1, (size_t)n_ids * 32);
        printf("wide text encoder (56 q / 8 kv heads) tp%d vs tp1: rel L2 %.3e\n", wn[k], d);
        CHECK(d <= TP_TOLERANCE, "wide text tp%d vs tp1: %.3e", wn[k], d);
        free(o);
    }
    run_text(dir, 3, 7, ids, (int)n_ids, H3_ERR_INVALID_ARGUMENT); /* 8 kv heads over 7 */
    free(w1);
    g_free(dir);
    free(ids);
    free(ref);
    h3_st_close(f);
}

/* ---- the tiled video VAE decode at TP N ------------------------------------------------------------- */

typedef struct vae_job {
    h3_backend *b[MAX_RANKS];
    h3_video_vae *vae[MAX_RANKS];
    const float *latents;
    float *out[MAX_RANKS];
} vae_job;

static h3_status_code vae_rank(const h3_tp *tp, void *user, h3_status *status) {
    vae_job *j = user;
    return h3_video_vae_decode_f32(j->vae[tp->rank], j->latents, 7, 4, 6, j->out[tp->rank], status);
}

static void test_vae(void) {
    h3_st_file *f;
    h3_status st;
    if (h3_st_open(h3_test_data("goldens/tiny-h3/vae_tiled.safetensors"), &f, &st) != H3_OK) {
        CHECK(0, "golden: %s", st.message);
        return;
    }
    int64_t n_out = 0;
    float *lat = golden_f32(f, "decode_latents_normalized", NULL), *ref = golden_f32(f, "decode_output", &n_out);
    float *first = NULL;
    for (size_t k = 0; k < G_N_ELEMENTS(degrees) && lat && ref; k++) {
        int n = degrees[k];
        h3_tp_team *t = make_team(n);
        if (!t) continue;
        vae_job j;
        memset(&j, 0, sizeof j);
        j.latents = lat;
        int ok = 1;
        for (int r = 0; r < n && ok; r++) {
            h3_tp tp = team_tp(t, r);
            ok = h3_backend_cpu_create(1, &j.b[r], &st) == H3_OK &&
                 h3_video_vae_load(j.b[r], h3_test_data(TINY "/vae"), &j.vae[r], &st) == H3_OK &&
                 h3_video_vae_set_tiling(j.vae[r], 32, 16, &st) == H3_OK;
            if (ok) h3_video_vae_set_tp(j.vae[r], &tp);
            j.out[r] = calloc((size_t)n_out, sizeof(float));
            CHECK(ok, "vae tp%d rank %d: %s", n, r, st.message);
        }
        if (ok) {
            ok = h3_tp_team_run(t, vae_rank, &j, &st) == H3_OK;
            CHECK(ok, "vae tp%d decode: %s", n, st.message);
        }
        if (ok) {
            double e = h3_test_rel_l2(j.out[0], ref, (size_t)n_out);
            int same = !first || memcmp(first, j.out[0], (size_t)n_out * sizeof(float)) == 0;
            printf("video VAE tiled decode (15 tiles) tp%d vs golden: rel L2 %.3e; vs tp1: %s\n", n, e,
                   same ? "bit-identical" : "DIFFERENT");
            CHECK(e < 1e-4 && same, "vae tp%d: rel L2 %.3e, same %d", n, e, same);
            if (!first) first = g_memdup2(j.out[0], (size_t)n_out * sizeof(float));
        }
        for (int r = 0; r < n; r++) {
            free(j.out[r]);
            h3_video_vae_free(j.vae[r]);
            if (j.b[r]) h3_backend_destroy(j.b[r]);
        }
        h3_tp_team_destroy(t);
    }
    g_free(first);
    free(lat);
    free(ref);
    h3_st_close(f);
}

/* ---- the engine ---------------------------------------------------------------------------------- */

typedef h3_test_capture capture;

static h3_request request(void) {
    h3_request r = h3_test_golden_request("e2e_t2va_3steps");
    return r;
}

static h3_status_code generate(h3_engine *e, const h3_request *r, capture *c, h3_status *st) {
    memset(c, 0, sizeof *c);
    return h3_test_generate(e, r, c, NULL, st);
}

static h3_engine *open_engine(const char *dir, const char *devices, h3_status *st) {
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = dir;
    o.compute = H3_COMPUTE_CPU;
    o.devices = devices;
    o.cpu_threads = 1;
    h3_engine *e = NULL;
    if (h3_engine_open(&o, &e, st) != H3_OK) return NULL;
    return e;
}

static int max_u8_diff(const uint8_t *a, const uint8_t *b, size_t n) {
    int m = 0;
    for (size_t i = 0; i < n; i++) m = abs((int)a[i] - (int)b[i]) > m ? abs((int)a[i] - (int)b[i]) : m;
    return m;
}

/* Media of c against reference ref: latents, audio and frames. */
static void compare_media(const char *label, const capture *c, const capture *ref, double tol) {
    if (!c->latents || !ref->latents || c->n_latents != ref->n_latents) {
        CHECK(0, "%s: no latents", label);
        return;
    }
    size_t nf = (size_t)c->plan.num_frames * c->plan.width * c->plan.height * 3;
    double lv = h3_test_rel_l2(c->latents, ref->latents, c->n_latents);
    double la = h3_test_rel_l2(c->audio_latents, ref->audio_latents, c->n_audio_latents);
    double au = h3_test_rel_l2(c->audio, ref->audio, (size_t)(2 * c->plan.audio_samples));
    int fd = max_u8_diff(c->video, ref->video, nf);
    printf("%s: video latents rel L2 %.3e, audio latents %.3e, audio %.3e, frames max |diff| %d\n", label, lv, la, au,
           fd);
    CHECK(lv <= tol && la <= tol && au <= tol && fd <= 1, "%s: %.3e %.3e %.3e %d", label, lv, la, au, fd);
}

static void test_engine_tiny(void) {
    h3_status st;
    h3_request r = request();
    /* TP2 on tiny-h3 against the official end-to-end golden. */
    h3_engine *e = open_engine(h3_test_data(TINY), "cpu:2", &st);
    CHECK(e != NULL, "open cpu:2: %s", st.message);
    if (!e) return;
    h3_stats stats;
    h3_engine_get_stats(e, &stats);
    CHECK(strstr(stats.compute, "tp2") != NULL, "stats.compute '%s'", stats.compute);
    printf("tiny engine cpu:2: compute '%s', fallback '%s'\n", stats.compute, stats.fallback);
    capture c;
    CHECK(generate(e, &r, &c, &st) == H3_OK && c.frames == 124 && c.forwards == 2 && !c.out_of_order,
          "cpu:2 generate: %s", st.message);
    h3_st_file *g;
    if (c.latents && h3_st_open(h3_test_data("goldens/tiny-h3/e2e_t2va_3steps.safetensors"), &g, &st) == H3_OK) {
        capture gold;
        memset(&gold, 0, sizeof gold);
        gold.plan = c.plan;
        int64_t n = 0;
        gold.latents = golden_f32(g, "latents", &n);
        gold.n_latents = (size_t)n;
        gold.audio_latents = golden_f32(g, "audio_latents", &n);
        gold.n_audio_latents = (size_t)n;
        float *planar = golden_f32(g, "audio", &n);
        const h3_st_tensor *u8 = h3_st_find(g, "videos_uint8");
        if (planar && u8 && u8->numel == (int64_t)124 * 64 * 32 * 3) {
            gold.audio = g_malloc((size_t)n * sizeof(float));
            for (int64_t i = 0; i < n / 2; i++) {
                gold.audio[2 * i] = planar[i];
                gold.audio[2 * i + 1] = planar[n / 2 + i];
            }
            gold.video = g_memdup2(u8->data, (size_t)u8->numel);
            compare_media("tiny engine tp2 vs end-to-end golden", &c, &gold, 1e-3);
        }
        free(planar);
        free(gold.latents);
        free(gold.audio_latents);
        gold.latents = gold.audio_latents = NULL;
        h3_test_capture_free(&gold);
        h3_st_close(g);
    }
    /* the one-rank engine (devices auto) gives what TP2 gives, to rounding */
    h3_engine *one = open_engine(h3_test_data(TINY), "auto", &st);
    capture c1;
    if (one && generate(one, &r, &c1, &st) == H3_OK) compare_media("tiny engine tp2 vs one rank", &c, &c1, TP_TOLERANCE);
    capture cr;
    h3_engine *r1 = open_engine(h3_test_data(TINY), "cpu:1", &st);
    if (r1 && generate(r1, &r, &cr, &st) == H3_OK && c1.latents) {
        int same = memcmp(cr.latents, c1.latents, cr.n_latents * sizeof(float)) == 0 &&
                   memcmp(cr.video, c1.video, (size_t)124 * 64 * 32 * 3) == 0;
        printf("tiny engine cpu:1 (the rank machinery, one rank) vs auto: %s\n", same ? "bit-identical" : "DIFFERENT");
        CHECK(same, "cpu:1 differs from auto");
    }
    h3_test_capture_free(&cr);
    h3_test_capture_free(&c1);
    h3_engine_close(r1);
    h3_engine_close(one);
    h3_test_capture_free(&c);
    h3_engine_close(e);
}

/* Runs generate in a thread under a watchdog: a hang fails the test (and
 * ends the program, since a hung thread cannot be joined). */
typedef struct watched {
    h3_engine *e;
    h3_request r;
    capture c;
    h3_status st;
    h3_status_code rc;
    int done;
    GMutex lock;
    GCond cond;
} watched;

static gpointer watched_thread(gpointer data) {
    watched *w = data;
    w->rc = generate(w->e, &w->r, &w->c, &w->st);
    g_mutex_lock(&w->lock);
    w->done = 1;
    g_cond_signal(&w->cond);
    g_mutex_unlock(&w->lock);
    return NULL;
}

static h3_status_code generate_watched(h3_engine *e, capture *c, h3_status *st, double *seconds) {
    watched w;
    memset(&w, 0, sizeof w);
    w.e = e;
    w.r = request();
    g_mutex_init(&w.lock);
    g_cond_init(&w.cond);
    gint64 t0 = g_get_monotonic_time();
    GThread *t = g_thread_new("watched", watched_thread, &w);
    g_mutex_lock(&w.lock);
    gint64 deadline = t0 + 120 * G_TIME_SPAN_SECOND;
    while (!w.done && g_cond_wait_until(&w.cond, &w.lock, deadline)) {}
    int done = w.done;
    g_mutex_unlock(&w.lock);
    if (!done) {
        CHECK(0, "generation hung for 120 s");
        h3_test_finish("test_tp");
        _exit(1);
    }
    g_thread_join(t);
    *seconds = (double)(g_get_monotonic_time() - t0) / 1e6;
    *c = w.c;
    *st = w.st;
    g_mutex_clear(&w.lock);
    g_cond_clear(&w.cond);
    return w.rc;
}

static gpointer long_generation(gpointer data) {
    watched *w = data;
    w->rc = generate(w->e, &w->r, &w->c, &w->st);
    g_atomic_int_set(&w->done, 1);
    return NULL;
}

/* Cancel from another thread while the ranks denoise: the request ends with
 * H3_ERR_CANCELLED at the next step (counted in steps, so the check holds
 * under sanitizers too) and the engine serves the next one. */
static void test_cancel(h3_engine *e) {
    watched w;
    memset(&w, 0, sizeof w);
    w.e = e;
    w.r = request();
    w.r.steps = 1000; /* cheap steps: cancel takes effect at the next one */
    GThread *t = g_thread_new("long", long_generation, &w);
    while (g_atomic_int_get(&w.c.forwards) < 3 && !g_atomic_int_get(&w.done)) g_usleep(1000);
    gint64 t0 = g_get_monotonic_time();
    int at_cancel = g_atomic_int_get(&w.c.forwards);
    h3_engine_cancel(e);
    g_thread_join(t);
    double dt = (double)(g_get_monotonic_time() - t0) / 1e6;
    int after = w.c.forwards - at_cancel;
    printf("wide engine tp4: cancel at step %d returned after %d more step(s), %.3f s: %s\n", at_cancel, after, dt,
           w.st.message);
    CHECK(w.rc == H3_ERR_CANCELLED && after <= 1, "cancel: rc %d after %d steps (%s)", w.rc, after, w.st.message);
    h3_test_capture_free(&w.c);
    capture c;
    h3_status st;
    h3_request r = request();
    CHECK(generate(e, &r, &c, &st) == H3_OK && c.frames == 124, "after cancel: %s", st.message);
    h3_test_capture_free(&c);
}

static void test_engine_wide(void) {
    h3_status st;
    h3_request r = request();
    capture ref;
    memset(&ref, 0, sizeof ref);
    h3_engine *e1 = open_engine(wide_dir, "cpu:1", &st);
    CHECK(e1 != NULL, "wide cpu:1: %s", st.message);
    if (!e1 || generate(e1, &r, &ref, &st) != H3_OK) {
        CHECK(0, "wide tp1 generate: %s", st.message);
        h3_engine_close(e1);
        return;
    }
    h3_engine_close(e1);
    for (size_t k = 1; k < G_N_ELEMENTS(degrees); k++) {
        int n = degrees[k];
        char devices[16], label[64];
        snprintf(devices, sizeof devices, "cpu:%d", n);
        h3_engine *e = open_engine(wide_dir, devices, &st);
        CHECK(e != NULL, "wide %s: %s", devices, st.message);
        if (!e) continue;
        h3_stats stats;
        h3_engine_get_stats(e, &stats);
        if (n == 7)
            CHECK(strstr(stats.fallback, "text conditioner on rank 0") != NULL, "tp7 fallback '%s'", stats.fallback);
        else
            CHECK(stats.fallback[0] == 0, "tp%d fallback '%s'", n, stats.fallback);
        printf("wide engine %s: compute '%s', fallback '%s'\n", devices, stats.compute, stats.fallback);
        capture c;
        double dt = 0;
        h3_status_code rc = generate_watched(e, &c, &st, &dt);
        CHECK(rc == H3_OK && c.frames == 124 && !c.out_of_order, "wide %s generate: %s", devices, st.message);
        snprintf(label, sizeof label, "wide engine tp%d vs tp1 (%.2f s)", n, dt);
        if (rc == H3_OK) compare_media(label, &c, &ref, TP_TOLERANCE);
        h3_test_capture_free(&c);

        if (n == 4 || n == 7) {
            /* An injected device fault on the last rank at the second step:
             * every rank ends with the error, nothing hangs. */
            h3_engine_inject_fault((struct h3_engine *)e, n - 1, 1);
            rc = generate_watched(e, &c, &st, &dt);
            char want[64];
            snprintf(want, sizeof want, "injected fault on rank %d at step 1", n - 1);
            CHECK(rc == H3_ERR_DEVICE && strstr(st.message, want), "%s fault: rc %d '%s'", devices, rc, st.message);
            printf("wide engine %s: fault on rank %d at step 1 ended the request in %.3f s: %s\n", devices, n - 1, dt,
                   st.message);
            h3_test_capture_free(&c);
            /* the same engine serves the next request, with the same result */
            h3_engine_inject_fault((struct h3_engine *)e, -1, 0);
            rc = generate_watched(e, &c, &st, &dt);
            CHECK(rc == H3_OK, "%s after the fault: %s", devices, st.message);
            snprintf(label, sizeof label, "wide engine tp%d after a fault vs tp1", n);
            if (rc == H3_OK) compare_media(label, &c, &ref, TP_TOLERANCE);
            h3_test_capture_free(&c);
        }
        if (n == 4) test_cancel(e);
        h3_engine_close(e);
    }
    /* close and open again after a failure */
    h3_engine *e = open_engine(wide_dir, "cpu:4", &st);
    if (e) {
        h3_engine_inject_fault((struct h3_engine *)e, 0, 0);
        capture c;
        double dt;
        CHECK(generate_watched(e, &c, &st, &dt) == H3_ERR_DEVICE, "fault rank 0 step 0: %s", st.message);
        h3_test_capture_free(&c);
        h3_engine_close(e);
        e = open_engine(wide_dir, "cpu:4", &st);
        CHECK(e != NULL, "reopen: %s", st.message);
        if (e && generate_watched(e, &c, &st, &dt) == H3_OK) compare_media("wide engine tp4 reopened", &c, &ref, TP_TOLERANCE);
        else CHECK(0, "reopened generate: %s", st.message);
        h3_test_capture_free(&c);
        h3_engine_close(e);
    }
    h3_test_capture_free(&ref);
}

static void test_engine_refusals(void) {
    h3_status st;
    struct { const char *dir; const char *devices; h3_status_code want; const char *text; } cases[] = {
        {TINY, "cpu:4", H3_ERR_INVALID_ARGUMENT, "this model runs on 1 or 2 ranks"},
        {TINY, "cpu:3", H3_ERR_INVALID_ARGUMENT, "2 attention heads"},
        {NULL, "cpu:3", H3_ERR_INVALID_ARGUMENT, "1, 2, 4, 7 or 8 ranks"},
        {NULL, "cpu:5", H3_ERR_INVALID_ARGUMENT, "1, 2, 4, 7 or 8 ranks"},
        {TINY, "cpu:0", H3_ERR_INVALID_ARGUMENT, "cpu:N needs N"},
        {TINY, "cpu:x", H3_ERR_INVALID_ARGUMENT, "cpu:N needs N"},
        {TINY, "0,,1", H3_ERR_INVALID_ARGUMENT, "expected"},
        {TINY, "gpu0", H3_ERR_INVALID_ARGUMENT, "expected"},
        {TINY, "0,1", H3_ERR_INVALID_ARGUMENT, "compute=cpu"},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        const char *dir = cases[i].dir ? h3_test_data(cases[i].dir) : wide_dir;
        h3_engine *e = open_engine(dir, cases[i].devices, &st);
        CHECK(!e && st.code == cases[i].want && strstr(st.message, cases[i].text), "devices %s: '%s'",
              cases[i].devices, e ? "opened" : st.message);
        if (i == 2) printf("devices cpu:3 on the 56-head model: %s\n", st.message);
        h3_engine_close(e);
    }
}

int main(void) {
    test_comm_collectives();
    test_comm_failures();
    test_plan();
    test_sharded_load();
    test_agreement();
    wide_dir = write_wide_model();
    CHECK(wide_dir != NULL, "wide model");
    test_dit_tiny();
    test_dit_vsa();
    test_text();
    test_vae();
    test_engine_tiny();
    test_engine_refusals();
    if (wide_dir) {
        test_dit_wide();
        test_engine_wide();
        remove_tree(wide_dir);
        g_free(wide_dir);
    }
    return h3_test_finish("test_tp");
}
