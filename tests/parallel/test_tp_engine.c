/* test_tp_engine.c - the engine with devices "cpu:N": tiny-h3 at TP2 against
 * the end-to-end golden and the one-rank engine, cpu:1 bit-identical to auto;
 * the "wide" test model's media at TP 2/4/7/8 against TP1 (the text
 * conditioner's rank-0 fallback at TP7 reported), an injected fault on a rank
 * at a step ending every rank with an error (under a watchdog), recovery,
 * cancel, close and reopen; the device lists and degrees it refuses. */
#include "h3_test_tp.h"
#include "h3_test_golden.h"
#include "h3_test_capture.h"
#include "engine/h3_engine.h" /* h3_engine_inject_fault */

static char *wide_dir; /* the wide test model, written by main */

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
        h3_test_finish("test_tp_engine");
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
    wide_dir = wide_model_open();
    test_engine_tiny();
    test_engine_refusals();
    if (wide_dir) test_engine_wide();
    wide_model_remove(wide_dir);
    return h3_test_finish("test_tp_engine");
}
