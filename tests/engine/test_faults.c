/* test_faults.c - failures injected where real ones happen (issue 14, item
 * 7), on the tiny model on the CPU:
 *   - every backend allocation of a whole run (open + generate), failed one
 *     at a time: each run ends in H3_ERR_NO_MEMORY with a message, nothing
 *     leaks (the sanitizer build's LeakSanitizer checks this program), and
 *     a normal run afterwards gives the same clip as before;
 *   - a rank of a tensor-parallel group (devices=cpu:2) failing in the
 *     middle of a forward, between collectives: every rank stops with the
 *     error naming the rank, in bounded time, and the same engine then
 *     gives the same clip as before. */
#include <glib.h>
#include <stdint.h>

#include "h3.h"
#include "engine/h3_engine.h"  /* h3_engine_inject_fault_mid_forward */
#include "backend/h3_backend.h" /* h3_backend_inject_alloc_fault */
#include "h3_test.h"
#include "h3_test_engine.h"
#include "h3_test_capture.h"

#define TINY "models/tiny-h3"

static h3_request small_request(void) { return h3_test_small_request("a red fox runs through fresh snow", 2); }

static h3_status_code open_engine(const char *devices, h3_engine **e, h3_status *st) {
    return h3_test_open_cpu(h3_test_data(TINY), devices, NULL, 1, e, st);
}

/* open + generate + close; *c keeps the clip (the caller frees it). */
static h3_status_code whole_run(h3_test_capture *c, h3_status *st) {
    h3_engine *e = NULL;
    h3_status_code rc = open_engine(NULL, &e, st);
    if (rc == H3_OK) {
        h3_request r = small_request();
        rc = h3_test_generate(e, &r, c, NULL, st);
    }
    h3_engine_close(e);
    return rc;
}

static int same_clip(const h3_test_capture *a, const h3_test_capture *b) {
    size_t fb = (size_t)a->plan.width * a->plan.height * 3;
    return a->frames == b->frames && a->samples == b->samples &&
           memcmp(a->video, b->video, fb * (size_t)a->frames) == 0 &&
           memcmp(a->audio, b->audio, (size_t)(2 * a->samples) * sizeof(float)) == 0;
}

static void test_allocation_failures(void) {
    h3_test_capture ref = {0};
    h3_status st = {0};
    long before = h3_backend_alloc_count();
    CHECK(whole_run(&ref, &st) == H3_OK, "reference run: %s", st.message);
    long total = h3_backend_alloc_count() - before;
    printf("a whole tiny run makes %ld backend allocations\n", total);
    CHECK(total > 100, "only %ld allocations counted", total);
    int wrong = 0;
    for (long n = 1; n <= total; n++) {
        h3_test_capture c = {0};
        h3_status_clear(&st);
        h3_backend_inject_alloc_fault(n);
        h3_status_code rc = whole_run(&c, &st);
        h3_backend_inject_alloc_fault(0);
        if (!(rc == H3_ERR_NO_MEMORY && st.message[0] && c.frames == 0) && wrong++ < 10)
            CHECK(0, "allocation %ld of %ld failed: rc %d (%s), %d frames, '%s'", n, total, rc,
                  h3_status_code_name(rc), c.frames, st.message);
        if (n == 1 || n == total / 2 || n == total) printf("allocation %ld of %ld failed: %s\n", n, total, st.message);
        h3_test_capture_free(&c);
    }
    CHECK(wrong == 0, "%d of %ld failed allocations did not end in a clear out-of-memory error", wrong, total);
    h3_test_capture c = {0};
    CHECK(whole_run(&c, &st) == H3_OK && same_clip(&c, &ref), "the run after: %s", st.message);
    h3_test_capture_free(&c);
    h3_test_capture_free(&ref);
}

/* The same on devices=cpu:2, where the ranks allocate on their own threads
 * (so which rank meets the n-th allocation may vary): a sample of them,
 * each failing one rank while the other goes on. The run ends in
 * H3_ERR_NO_MEMORY naming the rank, no rank hangs, nothing leaks. */
static void test_allocation_failures_tp(void) {
    h3_status st = {0};
    long before = h3_backend_alloc_count();
    h3_engine *e = NULL;
    h3_request r = small_request();
    h3_test_capture ref = {0};
    CHECK(open_engine("cpu:2", &e, &st) == H3_OK && h3_test_generate(e, &r, &ref, NULL, &st) == H3_OK,
          "cpu:2 reference: %s", st.message);
    h3_engine_close(e);
    long total = h3_backend_alloc_count() - before;
    int wrong = 0, runs = 0;
    for (long n = 1; n <= total; n += 29, runs++) {
        h3_test_capture c = {0};
        e = NULL;
        h3_backend_inject_alloc_fault(n);
        h3_status_code rc = open_engine("cpu:2", &e, &st);
        if (rc == H3_OK) rc = h3_test_generate(e, &r, &c, NULL, &st);
        h3_backend_inject_alloc_fault(0);
        h3_engine_close(e);
        if (!(rc == H3_ERR_NO_MEMORY && strstr(st.message, "rank ") && c.frames == 0) && wrong++ < 5)
            CHECK(0, "cpu:2, allocation %ld of %ld failed: rc %d, %d frames, '%s'", n, total, rc, c.frames,
                  st.message);
        h3_test_capture_free(&c);
    }
    printf("cpu:2: %d of its %ld allocations failed in turn, each a clear error: %s\n", runs, total, st.message);
    CHECK(wrong == 0, "%d of %d failed allocations on cpu:2 did not end in a clear error", wrong, runs);
    h3_test_capture_free(&ref);
}

/* One request with a fault armed on `rank`, `ops` ops into the forward of
 * denoising step `step`. */
static void fail_rank(h3_engine *e, int rank, int step, long ops, const h3_test_capture *ref) {
    h3_engine_inject_fault_mid_forward(e, rank, step, ops);
    h3_request r = small_request();
    h3_test_capture c = {0};
    h3_status st = {0};
    gint64 t0 = g_get_monotonic_time();
    h3_status_code rc = h3_test_generate(e, &r, &c, NULL, &st);
    double dt = (double)(g_get_monotonic_time() - t0) / 1e6;
    char want[32];
    snprintf(want, sizeof want, "rank %d", rank);
    CHECK(rc == H3_ERR_DEVICE && strstr(st.message, want) && strstr(st.message, "injected") && c.frames == 0 &&
              c.done == 0,
          "rank %d, step %d, %ld ops in: rc %d, %d frames, '%s'", rank, step, ops, rc, c.frames, st.message);
    CHECK(dt < 60, "the group took %.1f s to stop", dt);
    printf("rank %d failing %ld ops into step %d: every rank stopped in %.3f s: %s\n", rank, ops, step, dt,
           st.message);
    h3_test_capture_free(&c);
    /* one shot: the same engine serves the next request, with the same clip */
    rc = h3_test_generate(e, &r, &c, NULL, &st);
    CHECK(rc == H3_OK && same_clip(&c, ref), "after the fault on rank %d: %s", rank, st.message);
    h3_test_capture_free(&c);
}

static void test_rank_failure(void) {
    h3_engine *e = NULL;
    h3_status st = {0};
    CHECK(open_engine("cpu:2", &e, &st) == H3_OK, "cpu:2: %s", st.message);
    if (!e) return;
    h3_request r = small_request();
    h3_test_capture ref = {0};
    CHECK(h3_test_generate(e, &r, &ref, NULL, &st) == H3_OK, "cpu:2 reference: %s", st.message);
    const long ops[] = {1, 9, 25, 60};
    for (size_t i = 0; i < G_N_ELEMENTS(ops); i++) fail_rank(e, 1, 0, ops[i], &ref);
    fail_rank(e, 0, 1, 30, &ref);
    h3_engine_close(e);
    /* and a new engine after one that failed */
    e = NULL;
    CHECK(open_engine("cpu:2", &e, &st) == H3_OK, "reopen cpu:2: %s", st.message);
    if (e) fail_rank(e, 1, 1, 5, &ref);
    h3_engine_close(e);
    h3_test_capture_free(&ref);
}

int main(void) {
    test_rank_failure();
    test_allocation_failures();
    test_allocation_failures_tp();
    return h3_test_finish("test_faults");
}
