/* test_tp_comm.c - the CPU communicator of a tensor-parallel group: the
 * all-reduce sums in rank order (the same bits on every rank and every run),
 * gather, broadcast, exchange and barrier over 1..8 ranks; a collective
 * mismatch, an abort, a sticky backend error, an injected fault and a
 * timeout fail every rank (no hang), and the group recovers after each. */
#include "h3_test_tp.h"

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

int main(void) {
    test_comm_collectives();
    test_comm_failures();
    return h3_test_finish("test_tp_comm");
}
