/* test_dummy.c - the dummy load format (h3_engine_options.load_format =
 * H3_LOAD_DUMMY): weights drawn on the backend from (seed, tensor name)
 * instead of read from files.
 *
 *   the pieces     a dummy checkpoint (names, shapes, no bytes), the
 *                  backend's fill, and tensor-parallel shards that hold the
 *                  very values of the whole tensor, for every weight role
 *   the engine     the tiny model's configs and tokenizer alone (no
 *                  *.safetensors): a clip of finite, varying noise; the seed
 *                  decides it; safetensors on that folder names what is
 *                  missing; cpu:2 draws the same model; the dummy FastH3
 *                  adapters (4 forwards, their attention modes, VSA gates);
 *                  the native layout's packing steps on dummy tensors
 *   the release    the dummy checkpoints made from the release's configs
 *                  (tests/data/official, both layouts) hold the tensors its
 *                  index files name, at the release's sizes: what the
 *                  release would load, without loading it (too big here)
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h3_test.h"
#include "h3_test_engine.h"
#include "h3_test_capture.h"

#include <json-glib/json-glib.h>

#include "h3.h"
#include "backend/h3_backend.h"
#include "base/h3_random.h"
#include "base/h3_safetensors.h"
#include "model/h3_audio_vae.h"
#include "model/h3_dit.h"
#include "model/h3_text_encoder.h"
#include "model/h3_video_vae.h"
#include "parallel/h3_tp.h"

/* ---- the pieces ---------------------------------------------------------------------- */

static void test_checkpoint(void) {
    h3_status st;
    h3_checkpoint *c;
    CHECK(h3_checkpoint_dummy_new("test (dummy)", 7, &c, &st) == H3_OK, "%s", st.message);
    CHECK(h3_checkpoint_dummy_add(c, "w", H3_ST_BF16, 2, (int64_t[]){6, 4}, -1.0f, 1.0f, &st) == H3_OK, "%s",
          st.message);
    CHECK(h3_checkpoint_dummy_add(c, "b", H3_ST_F32, 1, (int64_t[]){6}, 0.5f, 0.5f, &st) == H3_OK, "%s", st.message);
    static const float taps[3] = {0.25f, 0.5f, 0.25f};
    CHECK(h3_checkpoint_dummy_add_data(c, "f", H3_ST_F32, 1, (int64_t[]){3}, taps, &st) == H3_OK, "%s", st.message);
    CHECK(h3_checkpoint_dummy_add(c, "w", H3_ST_BF16, 1, (int64_t[]){1}, 0, 1, &st) == H3_ERR_INVALID_ARGUMENT,
          "a second 'w' is refused");
    CHECK(h3_checkpoint_dummy_add(c, "i", H3_ST_I32, 1, (int64_t[]){1}, 0, 1, &st) == H3_ERR_INVALID_ARGUMENT,
          "an integer dummy tensor is refused");
    CHECK(h3_checkpoint_count(c) == 3 && h3_checkpoint_nbytes(c) == 6 * 4 * 2 + 6 * 4 + 3 * 4, "count %zu, %llu bytes",
          h3_checkpoint_count(c), (unsigned long long)h3_checkpoint_nbytes(c));
    const h3_st_tensor *t;
    CHECK(h3_checkpoint_get(c, "w", 2, (int64_t[]){6, 4}, &t, &st) == H3_OK && h3_st_is_dummy(t), "%s", st.message);
    CHECK(h3_checkpoint_get(c, "w", 2, (int64_t[]){4, 6}, &t, &st) == H3_ERR_FORMAT && strstr(st.message, "'w'"),
          "a wrong shape names the tensor: %s", st.message);
    CHECK(h3_checkpoint_get(c, "x", 1, NULL, &t, &st) == H3_ERR_NOT_FOUND && strstr(st.message, "test (dummy)"),
          "a missing tensor names the checkpoint: %s", st.message);
    const h3_st_tensor *f = h3_checkpoint_find(c, "f");
    float host[6];
    CHECK(f && !h3_st_is_dummy(f) && h3_st_to_f32(f, host, 3, &st) == H3_OK && host[1] == 0.5f, "constant data");
    t = h3_checkpoint_find(c, "w");
    CHECK(h3_st_to_f32(t, host, 6, &st) == H3_ERR_UNSUPPORTED && strstr(st.message, "dummy"),
          "a dummy tensor has no host values: %s", st.message);
    h3_checkpoint *d;
    h3_checkpoint_dummy_new("other seed", 8, &d, &st);
    h3_checkpoint_dummy_add(d, "w", H3_ST_BF16, 2, (int64_t[]){6, 4}, -1.0f, 1.0f, &st);
    CHECK(h3_checkpoint_find(d, "w")->random.key != t->random.key &&
              h3_checkpoint_find(c, "b")->random.key != t->random.key,
          "keys differ by seed and by name");
    h3_checkpoint_close(d);
    h3_checkpoint_close(c);
}

/* The whole tensor, drawn on one rank. */
static float *load_whole(h3_backend *b, const h3_st_tensor *t) {
    h3_tensor w;
    h3_status st;
    float *host = calloc((size_t)t->numel, sizeof *host);
    CHECK(h3_weight_load(b, t, H3_WEIGHT_DEFAULT, &w, &st) == H3_OK, "%s", st.message);
    CHECK(h3_tensor_download_f32(b, &w, host, &st) == H3_OK, "%s", st.message);
    h3_weight_free(b, &w);
    return host;
}

static void test_fill(h3_backend *b) {
    h3_status st;
    h3_checkpoint *c;
    h3_checkpoint_dummy_new("fill", 3, &c, &st);
    h3_checkpoint_dummy_add(c, "w", H3_ST_BF16, 2, (int64_t[]){12, 8}, -0.5f, 0.25f, &st);
    h3_checkpoint_dummy_add(c, "one", H3_ST_F32, 1, (int64_t[]){5}, 1.0f, 1.0f, &st);
    const h3_st_tensor *t = h3_checkpoint_find(c, "w");
    float *w = load_whole(b, t);
    int exact = 1, in_range = 1, distinct = 0;
    for (int64_t i = 0; i < t->numel; i++) {
        float want = h3_bf16_to_f32(h3_f32_to_bf16(h3_counter_uniform(t->random.key, (uint64_t)i, -0.5f, 0.25f)));
        exact &= w[i] == want;
        in_range &= w[i] >= -0.5f && w[i] <= 0.25f;
        distinct += i > 0 && w[i] != w[i - 1];
    }
    CHECK(exact, "the backend draws h3_counter_uniform rounded to bf16");
    CHECK(in_range && distinct > 80, "values in range and not constant (%d changes)", distinct);
    float *one = load_whole(b, h3_checkpoint_find(c, "one"));
    CHECK(one[0] == 1.0f && one[4] == 1.0f, "lo == hi is a constant");
    free(one);
    free(w);
    h3_checkpoint_close(c);
}

/* Each role's shards over 2 and 4 ranks, side by side, are the whole
 * tensor's values at the rows and columns a file's shard would take. */
static void test_shards(h3_backend *b) {
    h3_status st;
    h3_checkpoint *c;
    h3_checkpoint_dummy_new("shards", 11, &c, &st);
    const int64_t R = 24, C = 8;
    h3_checkpoint_dummy_add(c, "m", H3_ST_BF16, 2, (int64_t[]){R, C}, -1.0f, 1.0f, &st);
    h3_checkpoint_dummy_add(c, "v", H3_ST_F32, 1, (int64_t[]){R}, -1.0f, 1.0f, &st);
    const h3_tp_role roles[] = {H3_TP_QKV, H3_TP_HEADS, H3_TP_OUT, H3_TP_FFN_IN, H3_TP_FFN_OUT, H3_TP_GATHER};
    const int parts_of[] = {3, 1, 0, 2, 0, 1};
    for (int vec = 0; vec < 2; vec++) {
        const h3_st_tensor *t = h3_checkpoint_find(c, vec ? "v" : "m");
        int64_t cols = vec ? 1 : C;
        float *whole = load_whole(b, t);
        for (size_t k = 0; k < G_N_ELEMENTS(roles); k++) {
            if (vec && parts_of[k] == 0) continue; /* row-parallel roles are for matrices */
            for (int size = 2; size <= 4; size += 2) {
                int same = 1;
                for (int rank = 0; rank < size; rank++) {
                    h3_tp tp = {rank, size, NULL};
                    h3_tensor s;
                    if (h3_tp_weight_load(b, &tp, t, roles[k], H3_WEIGHT_DEFAULT, &s, &st) != H3_OK) {
                        CHECK(0, "%s over %d: %s", h3_tp_role_name(roles[k]), size, st.message);
                        continue;
                    }
                    int64_t n = h3_tensor_numel(&s);
                    float *got = malloc((size_t)n * sizeof *got);
                    h3_tensor_download_f32(b, &s, got, &st);
                    int parts = parts_of[k];
                    if (parts == 0) {
                        int64_t Cl = C / size;
                        for (int64_t r = 0; r < R; r++)
                            for (int64_t j = 0; j < Cl; j++) same &= got[r * Cl + j] == whole[r * C + rank * Cl + j];
                    } else {
                        int64_t part_rows = R / parts, local = part_rows / size;
                        for (int p = 0; p < parts; p++)
                            for (int64_t r = 0; r < local; r++)
                                for (int64_t j = 0; j < cols; j++)
                                    same &= got[(p * local + r) * cols + j] ==
                                            whole[(p * part_rows + rank * local + r) * cols + j];
                    }
                    free(got);
                    h3_weight_free(b, &s);
                }
                CHECK(same, "%s '%s' over %d ranks: the shards hold the whole tensor's values",
                      h3_tp_role_name(roles[k]), t->name, size);
            }
        }
        free(whole);
    }
    /* a view of rows of a dummy tensor, then sharded: the values of those rows */
    const h3_st_tensor *m = h3_checkpoint_find(c, "m");
    h3_st_tensor rows = h3_st_rows(m, 6, 12);
    float *whole = load_whole(b, m), *part = load_whole(b, &rows);
    CHECK(memcmp(part, whole + 6 * C, 12 * C * sizeof(float)) == 0, "h3_st_rows of a dummy tensor");
    free(whole);
    free(part);
    h3_checkpoint_close(c);
}

/* ---- the engine ------------------------------------------------------------------------ */

/* src's files but its weights (*.safetensors), into dst. */
static void copy_configs(const char *src, const char *dst) {
    g_mkdir_with_parents(dst, 0755);
    GDir *d = g_dir_open(src, 0, NULL);
    for (const char *name; d && (name = g_dir_read_name(d));) {
        char *from = g_build_filename(src, name, NULL), *to = g_build_filename(dst, name, NULL);
        if (g_file_test(from, G_FILE_TEST_IS_DIR)) {
            copy_configs(from, to);
        } else if (!g_str_has_suffix(name, ".safetensors")) {
            char *text;
            gsize n;
            if (g_file_get_contents(from, &text, &n, NULL)) {
                g_file_set_contents(to, text, (gssize)n, NULL);
                g_free(text);
            }
        }
        g_free(from);
        g_free(to);
    }
    if (d) g_dir_close(d);
}

static void remove_tree(const char *dir) {
    GDir *d = g_dir_open(dir, 0, NULL);
    for (const char *name; d && (name = g_dir_read_name(d));) {
        char *p = g_build_filename(dir, name, NULL);
        if (g_file_test(p, G_FILE_TEST_IS_DIR)) remove_tree(p);
        else g_unlink(p);
        g_free(p);
    }
    if (d) g_dir_close(d);
    g_rmdir(dir);
}

typedef struct log_capture {
    char text[4096];
} log_capture;

static void on_log(void *opaque, h3_log_level level, const char *message) {
    log_capture *l = opaque;
    (void)level;
    g_strlcat(l->text, message, sizeof l->text);
    g_strlcat(l->text, "\n", sizeof l->text);
}

static h3_engine *open_dummy(const char *dir, uint64_t seed, const char *devices, h3_dummy_adapter adapter,
                             log_capture *log, h3_status *st) {
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = dir;
    o.compute = H3_COMPUTE_CPU;
    o.cpu_threads = 2;
    o.devices = devices;
    o.load_format = H3_LOAD_DUMMY;
    o.dummy_seed = seed;
    o.dummy_adapter = adapter;
    o.log = on_log;
    o.log_opaque = log;
    h3_engine *e = NULL;
    h3_engine_open(&o, &e, st);
    return e;
}

static h3_request small_request(void) {
    h3_request r = h3_test_small_request("a red fox in the snow", 2);
    r.seed = 5;
    return r;
}

/* A whole clip: every callback in order, every value finite, neither the
 * video nor the audio constant. */
static int clip_ok(const char *what, const h3_test_capture *c) {
    size_t nv = (size_t)c->plan.num_frames * c->plan.width * c->plan.height * 3, na = (size_t)(2 * c->plan.audio_samples);
    int finite = 1, video_varies = 0, audio_varies = 0;
    for (size_t i = 1; i < nv; i++) video_varies |= c->video[i] != c->video[0];
    for (size_t i = 0; i < na; i++) finite &= isfinite(c->audio[i]);
    for (size_t i = 1; i < na; i++) audio_varies |= c->audio[i] != c->audio[0];
    for (size_t i = 0; i < c->n_latents; i++) finite &= isfinite(c->latents[i]);
    CHECK(c->frames == c->plan.num_frames && c->samples == c->plan.audio_samples && !c->out_of_order,
          "%s: %d/%d frames, %lld/%lld samples", what, c->frames, c->plan.num_frames, (long long)c->samples,
          (long long)c->plan.audio_samples);
    CHECK(finite && video_varies && audio_varies, "%s: finite %d, video varies %d, audio varies %d", what, finite,
          video_varies, audio_varies);
    return finite && video_varies && audio_varies;
}

static int same_clip(const h3_test_capture *a, const h3_test_capture *b) {
    size_t nv = (size_t)a->plan.num_frames * a->plan.width * a->plan.height * 3;
    return a->frames == b->frames && a->samples == b->samples && memcmp(a->video, b->video, nv) == 0 &&
           memcmp(a->audio, b->audio, (size_t)(2 * a->samples) * sizeof(float)) == 0;
}

static void test_engine(const char *dir) {
    h3_status st;
    h3_request r = small_request();
    log_capture log = {{0}};
    h3_engine *e = open_dummy(dir, 1, "auto", H3_DUMMY_ADAPTER_NONE, &log, &st);
    CHECK(e != NULL, "open the configs alone with load_format dummy: %s", st.message);
    if (!e) return;
    h3_stats s;
    h3_engine_get_stats(e, &s);
    CHECK(s.random_weights == 1 && strcmp(s.compute, "cpu") == 0, "stats: random_weights %d, compute '%s'",
          s.random_weights, s.compute);
    CHECK(strstr(log.text, "weights are random (load-format dummy, seed 1): the output is noise") != NULL,
          "the log says so:\n%s", log.text);
    h3_test_capture a = {0}, b = {0}, c = {0};
    CHECK(h3_test_generate(e, &r, &a, NULL, &st) == H3_OK, "generate: %s", st.message);
    clip_ok("dummy clip", &a);
    h3_engine_get_stats(e, &s);
    CHECK(s.steps == 2 && s.random_weights == 1, "stats after generate: steps %d, random_weights %d", s.steps,
          s.random_weights);
    h3_engine_close(e);

    e = open_dummy(dir, 1, "auto", H3_DUMMY_ADAPTER_NONE, &log, &st);
    CHECK(e && h3_test_generate(e, &r, &b, NULL, &st) == H3_OK, "seed 1 again: %s", st.message);
    CHECK(same_clip(&a, &b), "the same seed gives the same clip");
    h3_engine_close(e);
    e = open_dummy(dir, 2, "auto", H3_DUMMY_ADAPTER_NONE, &log, &st);
    CHECK(e && h3_test_generate(e, &r, &c, NULL, &st) == H3_OK, "seed 2: %s", st.message);
    clip_ok("seed 2", &c);
    CHECK(!same_clip(&a, &c), "another seed gives another clip");
    h3_engine_close(e);
    h3_test_capture_free(&b);
    h3_test_capture_free(&c);

    /* two CPU ranks draw their shards of the same model */
    e = open_dummy(dir, 1, "cpu:2", H3_DUMMY_ADAPTER_NONE, &log, &st);
    CHECK(e != NULL, "dummy on cpu:2: %s", st.message);
    if (e) {
        h3_engine_get_stats(e, &s);
        CHECK(strstr(s.compute, "tp2") && s.random_weights == 1, "cpu:2 stats: '%s', random_weights %d", s.compute,
              s.random_weights);
        CHECK(h3_test_generate(e, &r, &b, NULL, &st) == H3_OK, "cpu:2 generate: %s", st.message);
        clip_ok("cpu:2", &b);
        double l2 = b.latents ? h3_test_rel_l2(b.latents, a.latents, a.n_latents) : 1.0;
        double l2a = b.audio_latents ? h3_test_rel_l2(b.audio_latents, a.audio_latents, a.n_audio_latents) : 1.0;
        printf("cpu:2 against one rank: latents rel L2 video %.2e, audio %.2e\n", l2, l2a);
        CHECK(l2 < 1e-4 && l2a < 1e-4, "cpu:2's latents are one rank's (rel L2 video %.2e, audio %.2e)", l2, l2a);
        h3_engine_close(e);
        h3_test_capture_free(&b);
    }
    h3_test_capture_free(&a);

    /* the same folder with the files' format: the missing weights named */
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = dir;
    o.compute = H3_COMPUTE_CPU;
    CHECK(h3_engine_open(&o, &e, &st) != H3_OK && strstr(st.message, "text_encoder") &&
              strstr(st.message, ".safetensors"),
          "safetensors without the files fails naming them: %s", st.message);

    /* what does not go with dummy weights */
    o.load_format = H3_LOAD_DUMMY;
    o.adapter_path = "/nowhere/adapter_model.safetensors";
    CHECK(h3_engine_open(&o, &e, &st) == H3_ERR_UNSUPPORTED && strstr(st.message, "dummy-adapter") &&
              strstr(st.message, "load-format=dummy"),
          "an adapter file on dummy weights is refused (in property names): %s", st.message);
    o.adapter_path = NULL;
    o.load_format = H3_LOAD_SAFETENSORS;
    o.dummy_adapter = H3_DUMMY_ADAPTER_DENSE;
    CHECK(h3_engine_open(&o, &e, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "load-format=dummy") &&
              !strstr(st.message, "load_format"),
          "a dummy adapter on real weights is refused: %s", st.message);
    o.dummy_adapter = H3_DUMMY_ADAPTER_NONE;
    o.load_format = (h3_load_format)7;
    CHECK(h3_engine_open(&o, &e, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "load-format 7"),
          "an unknown load format is refused: %s", st.message);
}

/* The dummy FastH3 adapters: the student's 4 forwards over the release
 * ladder and its attention mode; the VSA one runs VSA-H3 with gates. */
static void test_dummy_adapters(const char *dir) {
    h3_status st;
    log_capture log = {{0}};
    h3_request r = small_request();
    r.steps = 0;
    h3_test_capture dense = {0}, vsa = {0};
    h3_engine *e = open_dummy(dir, 1, "auto", H3_DUMMY_ADAPTER_DENSE, &log, &st);
    CHECK(e != NULL, "dummy dense adapter: %s", st.message);
    if (e) {
        CHECK(strstr(log.text, "dummy FastH3 dense adapter") && strstr(log.text, "adds no delta"),
              "the log names the dummy adapter:\n%s", log.text);
        CHECK(h3_test_generate(e, &r, &dense, NULL, &st) == H3_OK, "dense adapter generate: %s", st.message);
        clip_ok("dense adapter", &dense);
        h3_stats s;
        h3_engine_get_stats(e, &s);
        CHECK(s.steps == 4 && dense.forwards == 4, "dense adapter: %d forwards (stats.steps %d), want 4",
              dense.forwards, s.steps);
        h3_plan plan;
        h3_request bad = r;
        bad.steps = 2;
        CHECK(h3_engine_validate(e, &bad, &plan, &st) == H3_ERR_INVALID_ARGUMENT, "steps 2 with the student");
        bad = r;
        bad.attention = H3_ATTENTION_VSA;
        CHECK(h3_engine_validate(e, &bad, &plan, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "dense"),
              "backend=vsa with a dense adapter: %s", st.message);
        h3_engine_close(e);
    }
    log.text[0] = 0;
    e = open_dummy(dir, 1, "auto", H3_DUMMY_ADAPTER_VSA, &log, &st);
    CHECK(e != NULL, "dummy VSA adapter: %s", st.message);
    if (e) {
        CHECK(strstr(log.text, "dummy FastH3 VSA adapter") && strstr(log.text, "gates"),
              "the log names the dummy VSA adapter:\n%s", log.text);
        h3_plan plan;
        CHECK(h3_engine_validate(e, &r, &plan, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "VSA"),
              "backend=fa with a VSA adapter: %s", st.message);
        r.attention = H3_ATTENTION_VSA;
        CHECK(h3_test_generate(e, &r, &vsa, NULL, &st) == H3_OK, "VSA adapter generate: %s", st.message);
        clip_ok("VSA adapter", &vsa);
        h3_stats s;
        h3_engine_get_stats(e, &s);
        CHECK(s.steps == 4 && vsa.forwards == 4, "VSA adapter: %d forwards (stats.steps %d), want 4", vsa.forwards,
              s.steps);
        /* the same base weights (seed 1) as the dense run: only VSA-H3 and its
         * gated compressed branch make the difference */
        double l2 = vsa.latents && dense.latents ? h3_test_rel_l2(vsa.latents, dense.latents, dense.n_latents) : 0;
        printf("VSA adapter against the dense one (same base weights): latents rel L2 %.3f\n", l2);
        CHECK(l2 > 1e-3, "VSA-H3 with gates changes the clip");
        h3_engine_close(e);
    }
    h3_test_capture_free(&dense);
    h3_test_capture_free(&vsa);
}

/* The native layout's host-side steps on dummy tensors: the DiT's per-head
 * qkv_proj and [gate; value] fc1 packing (one rank and two), the video
 * VAE's fused to_qkv split, then a decode of finite, varying frames. */
static void test_native(h3_backend *b, const char *tmp) {
    h3_status st;
    const char *transformer = h3_test_data("models/tiny-h3-native/FL2VA/transformer");
    h3_checkpoint *c = NULL;
    CHECK(h3_dit_dummy_checkpoint(transformer, 4, 0, &c, &st) == H3_OK &&
              h3_checkpoint_find(c, "blocks.0.attn.qkv_proj.weight") && h3_checkpoint_find(c, "blocks.0.mlp.fc1.weight"),
          "native dummy transformer: %s", st.message);
    for (int size = 1; c && size <= 2; size++) {
        h3_tp tp = {0, size, NULL};
        h3_dit *dit = NULL;
        CHECK(h3_dit_load_from(b, transformer, c, &tp, NULL, &dit, &st) == H3_OK &&
                  h3_dit_get_checkpoint_layout(dit) == H3_DIT_NATIVE,
              "native dummy transformer over %d rank(s): %s", size, st.message);
        h3_dit_free(dit);
    }
    h3_checkpoint_close(c);

    char *dir = g_build_filename(tmp, "video_vae", NULL), *src = g_build_filename(dir, "source", NULL);
    g_mkdir_with_parents(src, 0755);
    GString *wrap = g_string_new("{\"source_path\": \"source\", \"latent_channels\": 24, \"latents_mean\": [");
    for (int i = 0; i < 24; i++) g_string_append_printf(wrap, "%s0.1", i ? ", " : "");
    g_string_append(wrap, "], \"latents_std\": [");
    for (int i = 0; i < 24; i++) g_string_append_printf(wrap, "%s0.9", i ? ", " : "");
    g_string_append(wrap, "]}");
    char *p = g_build_filename(dir, "config.json", NULL);
    g_file_set_contents(p, wrap->str, -1, NULL);
    g_free(p);
    p = g_build_filename(src, "config.json", NULL);
    g_file_set_contents(p,
                        "{\"causal_decoder\": false, \"embed_dim\": 24, \"out_ch\": 3, \"use_vit_decoder\": true,"
                        " \"vae_ratio\": 16, \"vae_ratio_t\": 4, \"vit_decoder_kwargs\": {\"dim_head\": 24,"
                        " \"heads\": 2, \"num_layers\": 2, \"rope_dim_ratio\": 0.75, \"rope_theta\": 100.0}}",
                        -1, NULL);
    g_free(p);
    g_string_free(wrap, TRUE);
    c = NULL;
    CHECK(h3_video_vae_dummy_checkpoint(dir, 4, &c, &st) == H3_OK &&
              h3_checkpoint_find(c, "decoder.transformer_blocks.1.attn.to_qkv.bias"),
          "native dummy video VAE: %s", st.message);
    h3_video_vae *vae = NULL;
    if (c) CHECK(h3_video_vae_load_from(b, dir, c, &vae, &st) == H3_OK, "native dummy video VAE load: %s", st.message);
    h3_checkpoint_close(c);
    if (vae) {
        const int T = 7, H = 2, W = 2, F = h3_video_vae_num_frames(vae, T);
        float *z = malloc((size_t)24 * T * H * W * sizeof *z), *rgb = malloc((size_t)3 * F * 32 * 32 * sizeof *rgb);
        for (int i = 0; i < 24 * T * H * W; i++) z[i] = (float)sin(0.7 * i);
        CHECK(h3_video_vae_decode_f32(vae, z, T, H, W, rgb, &st) == H3_OK, "native dummy decode: %s", st.message);
        int finite = 1, varies = 0;
        for (int i = 0; i < 3 * F * 32 * 32; i++) finite &= isfinite(rgb[i]), varies |= rgb[i] != rgb[0];
        CHECK(finite && varies, "native dummy decode: finite %d, varies %d", finite, varies);
        free(z);
        free(rgb);
        h3_video_vae_free(vae);
    }
    g_free(src);
    g_free(dir);
}

/* ---- the release ------------------------------------------------------------------------ */

/* An index json's weight_map (a set of names) and metadata.total_size. */
static GHashTable *read_index(const char *rel, uint64_t *total_size) {
    JsonParser *p = json_parser_new();
    GError *err = NULL;
    GHashTable *names = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    *total_size = 0;
    if (!json_parser_load_from_file(p, h3_test_data(rel), &err)) {
        CHECK(0, "%s: %s", rel, err->message);
        g_error_free(err);
    } else {
        JsonObject *root = json_node_get_object(json_parser_get_root(p));
        JsonObject *map = json_object_get_object_member(root, "weight_map");
        GList *keys = map ? json_object_get_members(map) : NULL;
        for (GList *k = keys; k; k = k->next) g_hash_table_add(names, g_strdup(k->data));
        g_list_free(keys);
        JsonObject *meta = json_object_get_object_member(root, "metadata");
        if (meta && json_object_has_member(meta, "total_size"))
            *total_size = (uint64_t)json_object_get_int_member(meta, "total_size");
    }
    g_object_unref(p);
    return names;
}

/* How many of the checkpoint's tensors the index names; *missing gets the
 * first that it does not. */
static size_t in_index(const h3_checkpoint *c, GHashTable *index, const char **missing) {
    size_t n = 0;
    *missing = NULL;
    for (size_t i = 0; i < h3_checkpoint_count(c); i++) {
        const h3_st_tensor *t = h3_checkpoint_at(c, i);
        if (g_hash_table_contains(index, t->name)) n++;
        else if (!*missing) *missing = t->name;
    }
    return n;
}

static int has_shape(const h3_checkpoint *c, const char *name, h3_st_dtype dtype, int ndim, const int64_t *shape) {
    const h3_st_tensor *t = h3_checkpoint_find(c, name);
    int ok = t && h3_st_is_dummy(t) && t->dtype == dtype && t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    CHECK(ok, "release dummy '%s': %s", name, t ? "dtype or shape differs" : "missing");
    return ok;
}

static void test_release_transformer(const char *dir, const char *index_rel, h3_dit_checkpoint_layout layout) {
    h3_status st;
    h3_checkpoint *c = NULL;
    CHECK(h3_dit_dummy_checkpoint(h3_test_data(dir), 0, 0, &c, &st) == H3_OK, "%s: %s", dir, st.message);
    if (!c) return;
    uint64_t total;
    GHashTable *index = read_index(index_rel, &total);
    const char *missing;
    size_t named = in_index(c, index, &missing);
    size_t ignored = 0;
    GHashTableIter it;
    gpointer key;
    g_hash_table_iter_init(&it, index);
    while (g_hash_table_iter_next(&it, &key, NULL)) ignored += h3_dit_checkpoint_ignores(layout, key) != 0;
    CHECK(named == h3_checkpoint_count(c) && named + ignored == g_hash_table_size(index),
          "%s: the dummy's %zu tensors are the index's %u (%zu ignored), first stranger '%s'", dir,
          h3_checkpoint_count(c), g_hash_table_size(index), ignored, missing ? missing : "-");
    /* The release keeps the fp32 islands in F32 and the rest in BF16: the
     * shapes and dtypes add up to its byte count (the ignored rope.inv_freq
     * of the native layout aside: 16 F32). */
    uint64_t bytes = h3_checkpoint_nbytes(c) + (layout == H3_DIT_NATIVE ? 16 * 4 : 0);
    CHECK(bytes == total, "%s: %llu bytes, the index says %llu", dir, (unsigned long long)bytes,
          (unsigned long long)total);
    if (layout == H3_DIT_DIFFUSERS) {
        has_shape(c, "proj_in.weight", H3_ST_F32, 2, (int64_t[]){5376, 96});
        has_shape(c, "transformer_blocks.49.attn.to_q.weight", H3_ST_BF16, 2, (int64_t[]){7168, 5376});
        has_shape(c, "transformer_blocks.49.ff.net.0.proj.weight", H3_ST_BF16, 2, (int64_t[]){28672, 5376});
        has_shape(c, "transformer_blocks.0.adaln_proj.linear.weight", H3_ST_BF16, 2, (int64_t[]){96768, 2688});
    } else {
        has_shape(c, "blocks.49.attn.qkv_proj.weight", H3_ST_BF16, 2, (int64_t[]){21504, 5376});
    }
    printf("release %s: %zu dummy tensors, %.2f GB, as the index\n", dir, h3_checkpoint_count(c),
           (double)h3_checkpoint_nbytes(c) / 1e9);
    g_hash_table_destroy(index);
    h3_checkpoint_close(c);
    /* what a VSA adapter adds: one gate per main block */
    CHECK(h3_dit_dummy_checkpoint(h3_test_data(dir), 0, 1, &c, &st) == H3_OK && h3_checkpoint_count(c) == named + 50,
          "%s with VSA gates: %s", dir, st.message);
    char gate[128];
    h3_dit_gate_name(layout, 49, gate, sizeof gate);
    if (c) has_shape(c, gate, H3_ST_BF16, 2, (int64_t[]){7168, 5376});
    h3_checkpoint_close(c);
}

static void test_release_text_encoder(const char *dir) {
    h3_status st;
    h3_checkpoint *c = NULL;
    const int tap = 50; /* the conditioner's tap: what the engine loads */
    CHECK(h3_text_encoder_dummy_checkpoint(h3_test_data(dir), tap, 0, &c, &st) == H3_OK, "%s: %s", dir, st.message);
    if (!c) return;
    char index_rel[256];
    snprintf(index_rel, sizeof index_rel, "%s/model.safetensors.index.json", dir);
    uint64_t total;
    GHashTable *index = read_index(index_rel, &total);
    const char *missing;
    size_t named = in_index(c, index, &missing);
    /* every language-model tensor of the tapped layers, the vision tower
     * (FL2VA keyframes), and nothing else */
    size_t wanted = 0, visual = 0;
    GHashTableIter it;
    gpointer key;
    g_hash_table_iter_init(&it, index);
    while (g_hash_table_iter_next(&it, &key, NULL)) {
        int layer = -1;
        if (sscanf(key, "model.language_model.layers.%d.", &layer) == 1 && layer < tap) wanted++;
        if (g_str_has_prefix(key, "model.visual.")) visual++;
    }
    CHECK(named == h3_checkpoint_count(c) && named == 1 + wanted + visual && wanted == (size_t)tap * 11 &&
              visual == 351,
          "%s: %zu dummy tensors, %zu in the index, %zu tapped-layer and %zu vision tensors there; first stranger "
          "'%s'",
          dir, h3_checkpoint_count(c), named, wanted, visual, missing ? missing : "-");
    has_shape(c, "model.language_model.embed_tokens.weight", H3_ST_BF16, 2, (int64_t[]){151936, 5120});
    has_shape(c, "model.language_model.layers.49.self_attn.q_proj.weight", H3_ST_BF16, 2, (int64_t[]){8192, 5120});
    has_shape(c, "model.language_model.layers.49.self_attn.k_proj.weight", H3_ST_BF16, 2, (int64_t[]){1024, 5120});
    has_shape(c, "model.language_model.layers.49.mlp.down_proj.weight", H3_ST_BF16, 2, (int64_t[]){5120, 25600});
    has_shape(c, "model.language_model.layers.49.self_attn.q_norm.weight", H3_ST_BF16, 1, (int64_t[]){128});
    printf("release %s: %zu dummy tensors (%d tapped layers), %.2f GB\n", dir, h3_checkpoint_count(c), tap,
           (double)h3_checkpoint_nbytes(c) / 1e9);
    g_hash_table_destroy(index);
    h3_checkpoint_close(c);
}

static void test_release_vaes(void) {
    h3_status st;
    h3_checkpoint *c = NULL;
    CHECK(h3_video_vae_dummy_checkpoint(h3_test_data("official/vae"), 0, &c, &st) == H3_OK, "vae: %s", st.message);
    if (c) {
        uint64_t total;
        GHashTable *index = read_index("official/vae/diffusion_pytorch_model.safetensors.index.json", &total);
        const char *missing;
        size_t named = in_index(c, index, &missing), decoder = 0;
        GHashTableIter it;
        gpointer key;
        g_hash_table_iter_init(&it, index);
        while (g_hash_table_iter_next(&it, &key, NULL))
            decoder += g_str_has_prefix(key, "decoder.") || g_str_has_prefix(key, "post_quant_conv.");
        CHECK(named == h3_checkpoint_count(c) && named == decoder,
              "vae: %zu dummy tensors, %zu in the index, %zu decoder tensors there; first stranger '%s'",
              h3_checkpoint_count(c), named, decoder, missing ? missing : "-");
        printf("release vae: %zu dummy decoder tensors, %.2f GB\n", h3_checkpoint_count(c),
               (double)h3_checkpoint_nbytes(c) / 1e9);
        g_hash_table_destroy(index);
        h3_checkpoint_close(c);
    }
    /* the native video VAE (no index in the release's layout files): the
     * same decoder, fused q/k/v */
    CHECK(h3_video_vae_dummy_checkpoint(h3_test_data("official/FL2VA/video_vae"), 0, &c, &st) == H3_OK &&
              h3_checkpoint_find(c, "decoder.transformer_blocks.0.attn.to_qkv.weight"),
          "native video vae: %s", st.message);
    h3_checkpoint_close(c);
    const char *audio[] = {"official/audio_vae", "official/FL2VA/audio_vae"};
    for (int i = 0; i < 2; i++) {
        c = NULL;
        CHECK(h3_audio_vae_dummy_checkpoint(h3_test_data(audio[i]), 0, &c, &st) == H3_OK, "%s: %s", audio[i],
              st.message);
        if (!c) continue;
        const h3_st_tensor *f = h3_checkpoint_find(c, "decoder.activation_post.upsample.filter");
        const h3_st_tensor *v = h3_checkpoint_find(c, "decoder.conv_post.weight_v");
        CHECK(f && !h3_st_is_dummy(f) && v && h3_st_is_dummy(v), "%s: the filters are real, the weights dummy",
              audio[i]);
        h3_checkpoint_close(c);
    }
}

int main(void) {
    h3_backend *b;
    h3_status st;
    if (h3_backend_cpu_create(2, &b, &st) != H3_OK) {
        fprintf(stderr, "cpu backend: %s\n", st.message);
        return 1;
    }
    test_checkpoint();
    test_fill(b);
    test_shards(b);
    h3_backend_destroy(b);

    char *tmp = g_dir_make_tmp("h3-dummy-XXXXXX", NULL);
    char *dir = g_build_filename(tmp, "tiny-h3", NULL);
    copy_configs(h3_test_data("models/tiny-h3"), dir);
    test_engine(dir);
    test_dummy_adapters(dir);
    if (h3_backend_cpu_create(2, &b, &st) == H3_OK) {
        test_native(b, tmp);
        h3_backend_destroy(b);
    }
    remove_tree(tmp);

    test_release_transformer("official/transformer", "official/transformer/diffusion_pytorch_model.safetensors.index.json",
                             H3_DIT_DIFFUSERS);
    test_release_transformer("official/FL2VA/transformer", "official/FL2VA/transformer/model.safetensors.index.json",
                             H3_DIT_NATIVE);
    test_release_text_encoder("official/text_encoder");
    test_release_text_encoder("official/FL2VA/text_encoder");
    test_release_vaes();
    g_free(dir);
    g_free(tmp);
    return h3_test_finish("test_dummy");
}
