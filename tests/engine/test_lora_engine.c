/* test_lora_engine.c - user LoRAs through the engine (h3_engine_options.loras,
 * h3_engine_set_loras) and h3-generate's --lora, on the tiny model, with a
 * LoRA written here (tests/h3_test_lora.h: seeded factors on 11 modules,
 * PEFT layout):
 * (a) a clip with L:1.0 differs from the base clip; L:0.0 is the base clip
 *     bit for bit;
 * (b) set_loras L:0.6 on the engine opened with L:1.0 gives the clip of an
 *     engine opened with L:0.6: uint8 frames within 1, audio rel-L2 <= 1e-5
 *     (the in-place change rounds once more in float32 than a fresh fusion,
 *     h3_lora.c; the measured difference is printed);
 * (c) set back to none gives the base clip (the same tolerance);
 * (d) bad sets refused, naming the fault, with the previous set still in
 *     force (stats.loras and the clip unchanged): a missing file, shapes of
 *     another model, one file twice (by path and by another path), a
 *     strength out of range, "PATH:abc"; a set during a generation; a LoRA
 *     with precision=fp8 refused at open naming both settings; the set in
 *     force asked again changes nothing;
 * (b) again under tensor parallelism (cpu:2: every rank fuses its shard),
 *     and that clip against one rank's (within the same tolerance);
 * (e) h3-generate --lora FILE:0.6 writes the clip of (b).
 * usage: test_lora_engine [H3_GENERATE_EXE] */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h3.h"
#include "h3_test.h"
#include "h3_test_capture.h"
#include "h3_test_engine.h"
#include "h3_test_lora.h"

static char *tmpdir;
static h3_dit_config cfg;

static const char *model(void) { return h3_test_data("models/tiny-h3"); }

static h3_engine *open_on(const char *devices, const char *const *loras, h3_status *st) {
    h3_engine_options o = h3_engine_options_default();
    o.devices = devices;
    o.model_dir = model();
    o.compute = H3_COMPUTE_CPU;
    o.cpu_threads = 2;
    o.loras = loras;
    h3_engine *e = NULL;
    return h3_engine_open(&o, &e, st) == H3_OK ? e : NULL;
}

static h3_engine *open_with(const char *const *loras, h3_status *st) { return open_on(NULL, loras, st); }

static h3_request request(void) { return h3_test_small_request("a red fox in fresh snow", 2); }

static void clip_of(h3_engine *e, h3_test_capture *c, const char *what) {
    h3_status st = {0};
    memset(c, 0, sizeof *c);
    h3_request r = request();
    CHECK(h3_test_generate(e, &r, c, NULL, &st) == H3_OK, "%s: generate: %s", what, st.message);
}

static size_t video_bytes(const h3_test_capture *c) {
    return (size_t)c->plan.num_frames * c->plan.width * c->plan.height * 3;
}

/* The largest frame difference and the audio's rel-L2; *same: bit for bit. */
static void compare(const h3_test_capture *a, const h3_test_capture *b, int *max_diff, double *audio, int *same) {
    size_t n = video_bytes(a), na = (size_t)(2 * a->plan.audio_samples);
    *max_diff = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a->video[i] - (int)b->video[i]);
        if (d > *max_diff) *max_diff = d;
    }
    *audio = h3_test_rel_l2(a->audio, b->audio, na);
    *same = memcmp(a->video, b->video, n) == 0 && memcmp(a->audio, b->audio, na * sizeof(float)) == 0;
}

static void check_same(const h3_test_capture *a, const h3_test_capture *b, const char *what) {
    int d, same;
    double ra;
    compare(a, b, &d, &ra, &same);
    CHECK(same, "%s: differs (frames by up to %d, audio rel-L2 %.3e)", what, d, ra);
}

static void check_close(const h3_test_capture *a, const h3_test_capture *b, const char *what) {
    int d, same;
    double ra;
    compare(a, b, &d, &ra, &same);
    printf("%s: %s (frames within %d, audio rel-L2 %.3e)\n", what, same ? "bit for bit" : "close", d, ra);
    CHECK(d <= 1 && ra <= 1e-5, "%s: frames differ by %d, audio rel-L2 %.3e", what, d, ra);
}

static char *spec(const char *path, const char *strength) { return g_strdup_printf("%s:%s", path, strength); }

static void check_loras_stat(h3_engine *e, const char *want, const char *what) {
    h3_stats s;
    h3_engine_get_stats(e, &s);
    CHECK(strcmp(s.loras, want) == 0, "%s: stats.loras '%s', expected '%s'", what, s.loras, want);
}

/* A set refused with a message holding `needle`. */
static void refused(h3_engine *e, const char *const *specs, const char *needle, const char *what) {
    h3_status st = {0};
    CHECK(h3_engine_set_loras(e, specs, &st) != H3_OK, "%s: accepted", what);
    CHECK(strstr(st.message, needle) != NULL, "%s: message '%s' lacks '%s'", what, st.message, needle);
}

/* (d), during a generation: the progress callback asks for a change. */
typedef struct busy_probe {
    h3_test_capture c;
    h3_engine *e;
    const char *const *specs;
    int tried, refused;
    char message[512];
} busy_probe;

static void busy_progress(void *opaque, h3_phase phase, int done, int total) {
    busy_probe *p = opaque;
    (void)done, (void)total;
    if (phase != H3_PHASE_DENOISE || p->tried) return;
    h3_status st = {0};
    p->tried = 1;
    p->refused = h3_engine_set_loras(p->e, p->specs, &st) != H3_OK;
    g_strlcpy(p->message, st.message, sizeof p->message);
}

static int busy_video(void *opaque, int first, int count, const uint8_t *rgb) {
    return h3_test_on_video(&((busy_probe *)opaque)->c, first, count, rgb);
}

static int busy_audio(void *opaque, int64_t first, int64_t count, const float *inter) {
    return h3_test_on_audio(&((busy_probe *)opaque)->c, first, count, inter);
}

static void test_busy(h3_engine *e, const char *const *specs, const h3_test_capture *want) {
    busy_probe p = {.e = e, .specs = specs};
    h3_status st = {0};
    h3_request r = request();
    CHECK(h3_engine_validate(e, &r, &p.c.plan, &st) == H3_OK, "busy: validate: %s", st.message);
    p.c.video = g_malloc0(video_bytes(&p.c));
    p.c.audio = g_malloc0((size_t)(2 * p.c.plan.audio_samples) * sizeof(float));
    h3_callbacks cb = {.progress = busy_progress, .video_frames = busy_video, .audio_samples = busy_audio,
                       .opaque = &p};
    CHECK(h3_engine_generate(e, &r, &cb, &st) == H3_OK, "busy: generate: %s", st.message);
    CHECK(p.tried && p.refused, "a LoRA change during a generation was %s", p.tried ? "accepted" : "not tried");
    CHECK(strstr(p.message, "generation is running") != NULL, "busy: message '%s'", p.message);
    check_same(&p.c, want, "the clip of a generation that refused a LoRA change");
    h3_test_capture_free(&p.c);
}

/* A LoRA of another model: proj_out's A one column wider. */
static char *write_wrong_shape(const factor *f) {
    writer w = {0};
    int64_t in = f[9].in + 1;
    float *A = g_malloc0((size_t)(RANK * in) * sizeof *A);
    put(&w, "transformer.proj_out.lora_A.weight", RANK, in, A, 1);
    put(&w, "transformer.proj_out.lora_B.weight", f[9].out, RANK, f[9].B, 1);
    g_free(A);
    return write_writer(&w, tmpdir, "wrong-shape.safetensors", NULL);
}

/* (b) under tensor parallelism (two CPU ranks): each rank changes its shard. */
static void test_tp(const char *const *s10, const char *const *s06, const h3_test_capture *one_rank) {
    h3_status st = {0};
    h3_test_capture set, fresh;
    h3_engine *e = open_on("cpu:2", s06, &st);
    CHECK(e, "cpu:2 with L:0.6: %s", st.message);
    if (!e) return;
    clip_of(e, &fresh, "cpu:2 fresh L:0.6");
    /* the split sums in another order: the one-rank clip within the tolerance */
    check_close(&fresh, one_rank, "cpu:2 L:0.6 against one rank's");
    h3_engine_close(e);
    e = open_on("cpu:2", s10, &st);
    CHECK(e, "cpu:2 with L:1: %s", st.message);
    if (e) {
        CHECK(h3_engine_set_loras(e, s06, &st) == H3_OK, "cpu:2 set 0.6: %s", st.message);
        clip_of(e, &set, "cpu:2 set L:0.6");
        check_close(&set, &fresh, "cpu:2: set L:1 -> 0.6 against a fresh L:0.6");
        h3_test_capture_free(&set);
        h3_engine_close(e);
    }
    h3_test_capture_free(&fresh);
}

/* (e): h3-generate's output file against the clip. */
static void test_cli(const char *exe, const char *lora, const h3_test_capture *want) {
    char *out = g_build_filename(tmpdir, "cli.safetensors", NULL);
    char *item = spec(lora, "0.6");
    h3_request r = request();
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)r.seed);
    const char *argv[] = {exe, "--prompt", r.prompt, "--model", model(), "--compute", "cpu", "--cpu-threads", "2",
                          "--width", "64", "--height", "32", "--num-frames", "22", "--steps", "2", "--seed", seed,
                          "--lora", item, "--output", out, "--quiet", NULL};
    gchar *err = NULL;
    gint status = -1;
    GError *error = NULL;
    gboolean ran = g_spawn_sync(NULL, (gchar **)argv, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL, &err,
                                &status, &error);
    CHECK(ran && g_spawn_check_wait_status(status, NULL), "h3-generate --lora: %s %s", error ? error->message : "",
          err ? err : "");
    h3_st_file *f = NULL;
    h3_status st = {0};
    if (ran && h3_st_open(out, &f, &st) == H3_OK) {
        const h3_st_tensor *v = h3_st_find(f, "video"), *a = h3_st_find(f, "audio");
        CHECK(v && v->nbytes == video_bytes(want), "h3-generate: video of %zu bytes", v ? v->nbytes : 0);
        int64_t n = want->plan.audio_samples;
        CHECK(a && a->nbytes == (size_t)(2 * n) * sizeof(float), "h3-generate: audio of %zu bytes",
              a ? a->nbytes : 0);
        if (v && a && v->nbytes == video_bytes(want) && a->nbytes == (size_t)(2 * n) * sizeof(float)) {
            const float *planar = a->data;
            int same = memcmp(v->data, want->video, v->nbytes) == 0;
            for (int64_t i = 0; i < n; i++)
                same &= planar[i] == want->audio[2 * i] && planar[n + i] == want->audio[2 * i + 1];
            CHECK(same, "h3-generate --lora %s: not the clip of an engine opened with it", item);
        }
        h3_st_close(f);
    } else {
        CHECK(0, "h3-generate output: %s", st.message);
    }
    g_unlink(out);
    g_free(out);
    g_free(item);
    g_free(err);
    if (error) g_error_free(error);
}

int main(int argc, char **argv) {
    h3_status st = {0};
    tmpdir = g_dir_make_tmp("h3-lora-engine-XXXXXX", NULL);
    char *tdir = g_build_filename(model(), "transformer", NULL);
    CHECK(h3_dit_config_load(tdir, &cfg, &st) == H3_OK, "tiny config: %s", st.message);
    g_free(tdir);
    factor f[N_FACTORS];
    make_factors(f, &cfg, 1);
    char *lora = write_lora(tmpdir, &cfg, L_PEFT, f, "lora.safetensors");
    char *wrong = write_wrong_shape(f);
    char *l10 = spec(lora, "1"), *l06 = spec(lora, "0.6"), *l00 = spec(lora, "0");
    char *alias = g_build_filename(tmpdir, ".", "lora.safetensors", NULL); /* the same file by another path */

    /* (a) */
    h3_test_capture base, c10, c00, c06, fresh06, none;
    h3_engine *e = open_with(NULL, &st);
    CHECK(e, "open: %s", st.message);
    if (!e) return h3_test_finish("test_lora_engine");
    clip_of(e, &base, "no LoRA");
    check_loras_stat(e, "", "no LoRA");
    h3_engine_close(e);
    const char *const s00[] = {l00, NULL}, *const s06[] = {l06, NULL}, *const s10[] = {l10, NULL};
    e = open_with(s00, &st);
    CHECK(e, "open with %s: %s", l00, st.message);
    clip_of(e, &c00, "L:0");
    check_same(&c00, &base, "L:0 against no LoRA");
    h3_engine_close(e);
    h3_engine *fresh = open_with(s06, &st);
    CHECK(fresh, "open with %s: %s", l06, st.message);
    clip_of(fresh, &fresh06, "fresh L:0.6");
    h3_engine_close(fresh);
    e = open_with(s10, &st);
    CHECK(e, "open with %s: %s", l10, st.message);
    clip_of(e, &c10, "L:1");
    int d, same;
    double ra;
    compare(&c10, &base, &d, &ra, &same);
    printf("L:1 against no LoRA: frames differ by up to %d, audio rel-L2 %.3e\n", d, ra);
    CHECK(!same && d > 1, "a LoRA at strength 1 barely changes the clip (%d)", d);

    /* (b) */
    CHECK(h3_engine_set_loras(e, s06, &st) == H3_OK, "set %s: %s", l06, st.message);
    char *want06 = g_strdup_printf("%s:0.6", lora);
    check_loras_stat(e, want06, "after set 0.6");
    clip_of(e, &c06, "set L:0.6");
    check_close(&c06, &fresh06, "set L:1 -> 0.6 against a fresh L:0.6");

    /* (d): each refused, the set of (b) still in force */
    char *missing = g_build_filename(tmpdir, "missing.safetensors", NULL);
    char *twice_b = spec(lora, "0.2"), *by_alias = spec(alias, "0.2"), *big = spec(lora, "17"),
         *abc = spec(lora, "abc");
    const char *const bad_missing[] = {l06, missing, NULL}, *const bad_shape[] = {wrong, NULL},
                      *const bad_twice[] = {l06, twice_b, NULL}, *const bad_alias[] = {l06, by_alias, NULL},
                      *const bad_big[] = {big, NULL}, *const bad_abc[] = {abc, NULL};
    refused(e, bad_missing, "missing.safetensors", "a missing file");
    refused(e, bad_shape, "wrong-shape.safetensors", "shapes of another model");
    refused(e, bad_twice, "listed twice", "one file twice");
    refused(e, bad_alias, "listed twice", "one file by two paths");
    refused(e, bad_big, "strength 17", "strength 17");
    refused(e, bad_abc, "'abc' is not a number", "PATH:abc");
    check_loras_stat(e, want06, "after the refused sets");
    h3_test_capture after;
    clip_of(e, &after, "after the refused sets");
    check_same(&after, &c06, "the clip after the refused sets");
    h3_test_capture_free(&after);
    test_busy(e, s10, &c06);
    check_loras_stat(e, want06, "after a set during a generation");
    /* the set in force asked again: nothing changes */
    CHECK(h3_engine_set_loras(e, s06, &st) == H3_OK, "set %s again: %s", l06, st.message);
    clip_of(e, &after, "the same set again");
    check_same(&after, &c06, "the clip after the same set again");
    h3_test_capture_free(&after);

    /* (c) */
    CHECK(h3_engine_set_loras(e, NULL, &st) == H3_OK, "set none: %s", st.message);
    check_loras_stat(e, "", "after set none");
    clip_of(e, &none, "set none");
    check_close(&none, &base, "set L:1 -> 0.6 -> none against no LoRA");
    h3_engine_close(e);

    /* fp8 refused before any load */
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = model();
    o.compute = H3_COMPUTE_CPU;
    o.precision = H3_PRECISION_FP8;
    o.loras = s06;
    h3_engine *e8 = NULL;
    CHECK(h3_engine_open(&o, &e8, &st) != H3_OK, "lora with precision=fp8 opened");
    CHECK(strstr(st.message, "lora") && strstr(st.message, "precision=fp8"), "fp8: message '%s'", st.message);
    h3_engine_close(e8);

    test_tp(s10, s06, &fresh06);

    /* (e) */
    if (argc > 1) test_cli(argv[1], lora, &fresh06);
    else CHECK(0, "usage: test_lora_engine H3_GENERATE_EXE");

    h3_test_capture *all[] = {&base, &c10, &c00, &c06, &fresh06, &none};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) h3_test_capture_free(all[i]);
    free_factors(f);
    g_unlink(lora);
    g_unlink(wrong);
    g_rmdir(tmpdir);
    g_free(lora);
    g_free(wrong);
    g_free(alias);
    g_free(missing);
    g_free(twice_b);
    g_free(by_alias);
    g_free(big);
    g_free(abc);
    g_free(l10);
    g_free(l06);
    g_free(l00);
    g_free(want06);
    g_free(tmpdir);
    return h3_test_finish("test_lora_engine");
}
