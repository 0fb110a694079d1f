/* test_fasth3.c - the FastH3 4-forward sampler and the engine's FastH3
 * modes against the official end-to-end goldens:
 *
 * - ladder A (linspace(1, 0, 5)) and ladder B (dmd_denoising_steps
 *   [999, 749, 500, 250]) sigma grids and timesteps, bit for bit;
 * - the step rule of docs/spec/fasth3-vsa.md §2.3 (x0 = x + (1 − t)·v, x' = r·x + (1 − r)·x0,
 *   no fresh noise) replayed on the golden's recorded transformer calls;
 * - the row timesteps of every forward;
 * - end to end through the engine with the dense adapter, both ladders:
 *   latents and audio <= 1e-3 relative L2, frames within one uint8 step;
 * - the VSA mode through the engine, the mode/adapter/steps errors, the
 *   base-model check and the capabilities text. */
#include <glib/gstdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h3.h"
#include "model/h3_scheduler.h"
#include "h3_test_capture.h"
#include "h3_test_fasth3.h"
#include "h3_test_golden.h"
#include "h3_test_model.h"

static char *tmpdir;

/* ---- sigma ladders and the step rule ---------------------------------------------------- */

static int same_floats(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static void check_grid(const char *label, h3_st_file *f, const char *sigmas, const char *timesteps,
                       const h3_sigma_grid *g) {
    int64_t ns = 0, nt = 0;
    float *s = golden_f32(f, sigmas, &ns), *t = golden_f32(f, timesteps, &nt);
    CHECK(s && ns == g->n && same_floats(s, g->sigmas, ns), "%s: %s differ from the golden", label, sigmas);
    CHECK(t && nt == g->n - 1 && same_floats(t, g->timesteps, nt), "%s: %s differ from the golden", label, timesteps);
    if (s && ns == 5)
        printf("%s %s: %.9g %.9g %.9g %.9g %.9g\n", label, sigmas, (double)s[0], (double)s[1], (double)s[2],
               (double)s[3], (double)s[4]);
    free(s);
    free(t);
}

static void test_ladders(void) {
    h3_st_file *a = golden_tiny("e2e_t2va_fasth3_ladderA"), *b = golden_tiny("e2e_t2va_fasth3_ladderB");
    h3_sigma_grid v = {0}, au = {0}, v2 = {0};
    h3_status st = {0};
    /* A: the ordinary grid at five points (num_inference_steps 5). */
    CHECK(h3_sigma_grid_make(5, 12.0f, &v, &st) == H3_OK && h3_sigma_grid_make(5, 3.0f, &au, &st) == H3_OK, "A: %s",
          st.message);
    check_grid("ladder A", a, "sigmas", "timesteps", &v);
    check_grid("ladder A", a, "audio_sigmas", "audio_timesteps", &au);
    CHECK(h3_sigma_grid_from_base(h3_fasth3_ladder_a, 5, 12.0f, &v2, &st) == H3_OK && same_floats(v.sigmas, v2.sigmas, 5),
          "ladder A from its base differs from the 5-point grid");
    h3_sigma_grid_free(&v);
    h3_sigma_grid_free(&au);
    h3_sigma_grid_free(&v2);
    /* B: the released dmd_denoising_steps. */
    static const int dmd[4] = {999, 749, 500, 250};
    CHECK(h3_sigma_grid_from_dmd_steps(dmd, 4, 12.0f, &v, &st) == H3_OK &&
              h3_sigma_grid_from_dmd_steps(dmd, 4, 3.0f, &au, &st) == H3_OK, "B: %s", st.message);
    check_grid("ladder B", b, "sigmas", "timesteps", &v);
    check_grid("ladder B", b, "audio_sigmas", "audio_timesteps", &au);
    CHECK(h3_sigma_grid_from_base(h3_fasth3_ladder_b, 5, 12.0f, &v2, &st) == H3_OK && same_floats(v.sigmas, v2.sigmas, 5),
          "ladder B from its base differs from the dmd steps");
    /* vLLM-Omni's asserted values (docs/spec/fasth3-vsa.md §2.2). */
    static const double vb[5] = {0.999917, 0.972833, 0.923077, 0.8, 0}, ab[5] = {0.999666, 0.899520, 0.75, 0.5, 0};
    int near = 1;
    for (int i = 0; i < 5; i++) near &= fabs(v.sigmas[i] - vb[i]) < 1e-6 && fabs(au.sigmas[i] - ab[i]) < 1e-6;
    CHECK(near, "ladder B sigmas differ from the spec's table");
    h3_sigma_grid_free(&v);
    h3_sigma_grid_free(&au);
    h3_sigma_grid_free(&v2);
    h3_st_close(a);
    h3_st_close(b);
}

/* The recorded transformer calls of ladder A: step i's inputs and velocity
 * give step i+1's inputs, and the last step the final latents. */
static void test_step_rule(void) {
    h3_st_file *f = golden_tiny("e2e_t2va_fasth3_ladderA");
    h3_sigma_grid gv = {0}, ga = {0};
    h3_status st = {0};
    h3_sigma_grid_make(5, 12.0f, &gv, &st);
    h3_sigma_grid_make(5, 3.0f, &ga, &st);
    int64_t exact = 0, total = 0;
    double worst = 0;
    for (int i = 0; f && i < 4; i++) {
        const char *mod[2][3] = {{"hidden_states", "noise_pred", "latents"}, {"audio_hidden_states", "audio_noise_pred", "audio_latents"}};
        for (int m = 0; m < 2; m++) {
            char x_name[64], v_name[64], next[64];
            snprintf(x_name, sizeof x_name, "step%d.%s", i, mod[m][0]);
            snprintf(v_name, sizeof v_name, "step%d.%s", i, mod[m][1]);
            snprintf(next, sizeof next, "step%d.%s", i + 1, mod[m][0]);
            int64_t n = 0, nn = 0;
            float *x = golden_f32(f, x_name, &n), *v = golden_f32(f, v_name, NULL);
            if (!x || !v) {
                free(x);
                free(v);
                continue;
            }
            h3_sigma_grid_step(m ? &ga : &gv, i, x, v, (size_t)n);
            float *want = NULL;
            if (i < 3) {
                want = golden_f32(f, next, &nn);
            } else { /* the final latents, back in row order */
                float *lat = golden_f32(f, mod[m][2], &nn);
                want = malloc((size_t)nn * sizeof *want);
                if (lat && m == 0) h3_dit_patchify_video(lat, 24, 37, 2, 4, 2, 2, want, &st);
                if (lat && m == 1) h3_dit_pack_audio(lat, 32, 207, want);
                free(lat);
            }
            if (want && nn == n) {
                for (int64_t k = 0; k < n; k++) exact += x[k] == want[k];
                total += n;
                double e = h3_test_rel_l2(x, want, (size_t)n);
                worst = e > worst ? e : worst;
            } else {
                CHECK(0, "step %d %s: golden sizes differ", i, mod[m][0]);
            }
            free(x);
            free(v);
            free(want);
        }
    }
    printf("step rule on ladder A's recorded calls: %lld of %lld values bit-exact, worst rel L2 %.3e\n",
           (long long)exact, (long long)total, worst);
    CHECK(total > 0 && worst <= 1e-7, "the deterministic step differs from the golden: %.3e", worst);
    h3_sigma_grid_free(&gv);
    h3_sigma_grid_free(&ga);
    h3_st_close(f);
}

/* Every forward's distinct timesteps and row indices, both ladders. */
static void test_row_timesteps(const char *golden, int ladder_b) {
    h3_st_file *f = golden_tiny(golden);
    int64_t L = 0;
    int32_t *tags = f ? golden_i32(f, "text_token_tags", &L) : NULL;
    h3_dit_layout_params lp = {.text_token_tags = tags, .num_text = (int)L, .num_latent_frames = 37,
                               .latent_height = 2, .latent_width = 4, .num_audio_latents = 207};
    h3_dit_layout *l = NULL;
    h3_status st = {0};
    h3_sigma_grid gv = {0}, ga = {0};
    static const int dmd[4] = {999, 749, 500, 250};
    if (ladder_b) {
        h3_sigma_grid_from_dmd_steps(dmd, 4, 12.0f, &gv, &st);
        h3_sigma_grid_from_dmd_steps(dmd, 4, 3.0f, &ga, &st);
    } else {
        h3_sigma_grid_make(5, 12.0f, &gv, &st);
        h3_sigma_grid_make(5, 3.0f, &ga, &st);
    }
    if (tags && h3_dit_layout_build(&lp, &l, &st) == H3_OK) {
        int32_t *idx = malloc((size_t)l->seq_len * sizeof *idx);
        for (int i = 0; i < 4; i++) {
            float ts[H3_DIT_MAX_TIMESTEPS];
            int n = 0;
            h3_dit_layout_timesteps(l, gv.timesteps[i], ga.timesteps[i], ts, &n, idx, &st);
            char a[64], b[64];
            snprintf(a, sizeof a, "step%d.timestep", i);
            snprintf(b, sizeof b, "step%d.timestep_indices", i);
            int64_t gn = 0, gi = 0;
            float *gts = golden_f32(f, a, &gn);
            int32_t *gidx = golden_i32(f, b, &gi);
            int ok = gts && gidx && gn == n && gi == l->seq_len && same_floats(gts, ts, n);
            for (int64_t k = 0; ok && k < gi; k++) ok = gidx[k] == idx[k];
            CHECK(ok, "%s forward %d: row timesteps differ (%d vs %lld values)", golden, i, n, (long long)gn);
            free(gts);
            free(gidx);
        }
        free(idx);
    } else {
        CHECK(0, "%s: layout: %s", golden, st.message);
    }
    h3_dit_layout_free(l);
    h3_sigma_grid_free(&gv);
    h3_sigma_grid_free(&ga);
    free(tags);
    h3_st_close(f);
}

/* ---- the engine ------------------------------------------------------------------------------ */

typedef h3_test_capture capture;

static h3_status_code run(h3_engine *e, const h3_request *r, capture *c, h3_status *st) {
    return h3_test_generate(e, r, c, NULL, st);
}

static h3_request golden_request(void) {
    h3_request r = h3_test_golden_request("e2e_t2va_fasth3_ladderB");
    r.steps = 0; /* the student's 4, from the adapter */
    return r;
}

static h3_engine *open_engine_on(const char *adapter, const char *devices) {
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("models/tiny-h3");
    o.compute = H3_COMPUTE_CPU;
    o.adapter_path = adapter;
    o.devices = devices;
    h3_engine *e = NULL;
    h3_status st = {0};
    CHECK(h3_engine_open(&o, &e, &st) == H3_OK, "open with %s: %s", adapter ? adapter : "no adapter", st.message);
    return e;
}

static h3_engine *open_engine(const char *adapter) { return open_engine_on(adapter, "auto"); }

static void compare_e2e(const char *golden, const capture *c) {
    h3_st_file *g = golden_tiny(golden);
    if (!g) return;
    char label[96];
    snprintf(label, sizeof label, "e2e %s", golden);
    CHECK(golden_compare(g, "latents", c->latents, c->n_latents, label) <= 1e-3, "%s: video latents", golden);
    CHECK(golden_compare(g, "audio_latents", c->audio_latents, c->n_audio_latents, label) <= 1e-3, "%s: audio latents",
          golden);
    float *planar = malloc((size_t)(2 * c->samples) * sizeof *planar);
    for (int64_t i = 0; i < c->samples; i++) {
        planar[i] = c->audio[2 * i];
        planar[c->samples + i] = c->audio[2 * i + 1];
    }
    CHECK(golden_compare(g, "audio", planar, (size_t)(2 * c->samples), label) <= 1e-3, "%s: audio", golden);
    free(planar);
    const h3_st_tensor *u8 = h3_st_find(g, "videos_uint8");
    int64_t n = (int64_t)c->plan.num_frames * c->plan.width * c->plan.height * 3;
    CHECK(u8 && u8->numel == n, "%s: videos_uint8 size", golden);
    if (u8 && u8->numel == n) {
        int maxd = 0;
        int64_t ndiff = 0;
        for (int64_t i = 0; i < n; i++) {
            int d = abs((int)((const uint8_t *)u8->data)[i] - (int)c->video[i]);
            maxd = d > maxd ? d : maxd;
            ndiff += d != 0;
        }
        printf("%s: uint8 frames differ in %lld of %lld values, max |diff| %d\n", label, (long long)ndiff, (long long)n,
               maxd);
        CHECK(maxd <= 1, "%s: uint8 max diff %d", golden, maxd);
    }
    h3_st_close(g);
}

static void test_e2e(h3_engine *e, h3_fasth3_ladder ladder, const char *golden) {
    h3_request r = golden_request();
    r.ladder = ladder;
    capture c = {0};
    h3_status st = {0};
    CHECK(run(e, &r, &c, &st) == H3_OK, "%s: %s", golden, st.message);
    CHECK(c.plan.steps == 4 && c.forwards == 4, "%s: %d steps planned, %d forwards run", golden, c.plan.steps,
          c.forwards);
    CHECK(c.frames == 124 && c.samples == c.plan.audio_samples, "%s: %d frames, %lld samples", golden, c.frames,
          (long long)c.samples);
    if (c.latents) compare_e2e(golden, &c);
    h3_test_capture_free(&c);
}

/* FNV-1a of the frames and samples. */
static uint64_t checksum(const capture *c) {
    uint64_t h = 1469598103934665603ull;
    size_t nv = (size_t)c->plan.num_frames * c->plan.width * c->plan.height * 3;
    for (size_t i = 0; i < nv; i++) h = (h ^ c->video[i]) * 1099511628211ull;
    const uint8_t *a = (const uint8_t *)c->audio;
    for (size_t i = 0; i < (size_t)(2 * c->plan.audio_samples) * sizeof(float); i++) h = (h ^ a[i]) * 1099511628211ull;
    return h;
}

static void expect_refused(h3_engine *e, const h3_request *r, h3_status_code code, const char *t1, const char *t2,
                           const char *what) {
    h3_plan p;
    h3_status st = {0};
    h3_status_code rc = h3_engine_validate(e, r, &p, &st);
    CHECK(rc == code && (!t1 || strstr(st.message, t1)) && (!t2 || strstr(st.message, t2)), "%s: rc %s, '%s'", what,
          h3_status_code_name(rc), st.message);
    rc = h3_engine_generate(e, r, NULL, &st);
    CHECK(rc == code, "%s: generate did not refuse (%s)", what, h3_status_code_name(rc));
}

static void test_dense_engine(void) {
    h3_engine *e = open_engine(h3_test_data(FASTH3_DENSE_ADAPTER));
    if (!e) return;
    test_e2e(e, H3_LADDER_RELEASE, "e2e_t2va_fasth3_ladderB"); /* the release's dmd_denoising_steps */
    test_e2e(e, H3_LADDER_A, "e2e_t2va_fasth3_ladderA");
    h3_request r = golden_request();
    r.attention = H3_ATTENTION_VSA;
    expect_refused(e, &r, H3_ERR_INVALID_ARGUMENT, "dense FastH3 adapter", "backend=fa", "dense adapter + vsa");
    r = golden_request();
    r.steps = 7;
    expect_refused(e, &r, H3_ERR_INVALID_ARGUMENT, "steps 7", "exactly 4", "adapter + 7 steps");
    r = golden_request();
    r.ladder = (h3_fasth3_ladder)9;
    expect_refused(e, &r, H3_ERR_INVALID_ARGUMENT, "ladder", NULL, "unknown ladder");
    /* Ladder B spelled out equals the release default. */
    r = golden_request();
    r.num_frames = 22;
    capture a = {0}, b = {0};
    h3_status st = {0};
    CHECK(run(e, &r, &a, &st) == H3_OK, "release ladder: %s", st.message);
    r.ladder = H3_LADDER_B;
    CHECK(run(e, &r, &b, &st) == H3_OK, "ladder B: %s", st.message);
    CHECK(a.video && b.video && checksum(&a) == checksum(&b), "ladder B differs from the release's dmd steps");
    h3_test_capture_free(&a);
    h3_test_capture_free(&b);
    h3_engine_close(e);
}

static void test_vsa_engine(void) {
    h3_engine *e = open_engine(h3_test_data(FASTH3_VSA_ADAPTER));
    if (!e) return;
    h3_request r = golden_request();
    expect_refused(e, &r, H3_ERR_INVALID_ARGUMENT, "VSA adapter", "backend=vsa", "vsa adapter + fa");
    r.attention = H3_ATTENTION_VSA;
    r.vsa_sparsity = 1.5f;
    expect_refused(e, &r, H3_ERR_INVALID_ARGUMENT, "vsa-sparsity", NULL, "sparsity 1.5");
    /* 160x96: 3x5 tokens per frame, 20 video tiles, k = 2 at 0.9. */
    r = golden_request();
    r.attention = H3_ATTENTION_VSA;
    r.width = 160;
    r.height = 96;
    capture a = {0}, b = {0}, z = {0};
    h3_status st = {0};
    CHECK(run(e, &r, &a, &st) == H3_OK, "vsa run: %s", st.message);
    CHECK(run(e, &r, &b, &st) == H3_OK, "vsa run again: %s", st.message);
    r.vsa_sparsity = 0.0f;
    CHECK(run(e, &r, &z, &st) == H3_OK, "vsa sparsity 0: %s", st.message);
    CHECK(a.forwards == 4 && a.frames == 124 && a.samples == a.plan.audio_samples, "vsa run: %d forwards, %d frames",
          a.forwards, a.frames);
    int finite = a.latents != NULL;
    for (size_t i = 0; finite && i < a.n_latents; i++) finite = isfinite(a.latents[i]);
    CHECK(finite, "vsa latents are not finite");
    CHECK(a.video && b.video && checksum(&a) == checksum(&b), "vsa runs are not deterministic");
    double d = a.latents && z.latents ? h3_test_rel_l2(a.latents, z.latents, a.n_latents) : 0;
    printf("e2e vsa 160x96: sparsity 0.9 vs 0 latents differ by rel L2 %.3e\n", d);
    CHECK(d > 1e-4, "sparsity had no effect (%.3e)", d);
    h3_test_capture_free(&a);
    h3_test_capture_free(&b);
    h3_test_capture_free(&z);
    h3_engine_close(e);
}

/* Tensor parallelism on two CPU ranks (one head each): the adapter is fused
 * before sharding and the VSA gates are split by heads like q. */
static void test_tp(void) {
    h3_engine *e = open_engine_on(h3_test_data(FASTH3_DENSE_ADAPTER), "cpu:2");
    if (e) test_e2e(e, H3_LADDER_RELEASE, "e2e_t2va_fasth3_ladderB");
    h3_engine_close(e);
    h3_engine *one = open_engine(h3_test_data(FASTH3_VSA_ADAPTER));
    h3_engine *two = open_engine_on(h3_test_data(FASTH3_VSA_ADAPTER), "cpu:2");
    h3_request r = golden_request();
    r.attention = H3_ATTENTION_VSA;
    r.width = 160;
    r.height = 96;
    capture a = {0}, b = {0};
    h3_status st = {0};
    if (one) CHECK(run(one, &r, &a, &st) == H3_OK, "vsa tp1: %s", st.message);
    if (two) CHECK(run(two, &r, &b, &st) == H3_OK, "vsa tp2: %s", st.message);
    double d = a.latents && b.latents ? h3_test_rel_l2(b.latents, a.latents, a.n_latents) : INFINITY;
    double da = a.audio_latents && b.audio_latents ? h3_test_rel_l2(b.audio_latents, a.audio_latents, a.n_audio_latents)
                                                   : INFINITY;
    printf("e2e vsa 160x96: tp2 vs tp1 latents rel L2 %.3e, audio %.3e\n", d, da);
    CHECK(d <= 1e-5 && da <= 1e-5, "vsa at tp2 differs from tp1: %.3e / %.3e", d, da);
    h3_test_capture_free(&a);
    h3_test_capture_free(&b);
    h3_engine_close(one);
    h3_engine_close(two);
}

static void test_no_adapter(void) {
    h3_engine *e = open_engine(NULL);
    if (!e) return;
    h3_request r = golden_request();
    r.attention = H3_ATTENTION_VSA;
    expect_refused(e, &r, H3_ERR_INVALID_ARGUMENT, "backend=vsa", "adapter", "vsa without adapter");
    r = golden_request();
    r.ladder = H3_LADDER_A;
    expect_refused(e, &r, H3_ERR_INVALID_ARGUMENT, "FastH3 adapter", NULL, "ladder without adapter");
    h3_plan p;
    h3_status st = {0};
    r = golden_request();
    CHECK(h3_engine_validate(e, &r, &p, &st) == H3_OK && p.steps == 49, "base default steps %d", p.steps);
    h3_engine_close(e);
}

/* The dense adapter with another base_model in its metadata. */
static char *foreign_adapter(void) {
    h3_st_file *f = golden_open(FASTH3_DENSE_ADAPTER "/adapter_model.safetensors");
    char *path = g_build_filename(tmpdir, "adapter_model.safetensors", NULL);
    if (!f) return path;
    size_t n = h3_st_count(f);
    h3_st_write_tensor *t = calloc(n, sizeof *t);
    for (size_t i = 0; i < n; i++) {
        const h3_st_tensor *x = h3_st_at(f, i);
        t[i] = (h3_st_write_tensor){.name = x->name, .dtype = x->dtype, .ndim = x->ndim, .data = x->data};
        memcpy(t[i].shape, x->shape, sizeof t[i].shape);
    }
    const char *kv[] = {"format", "fastvideo-lora-v2", "base_model", "MiniMaxAI/MiniMax-H3", "finetuned_model",
                        "FastVideo/FastVideo-FastH3-Dense-4-step-v1", "rank", "4", "low_rank_tensors", "52",
                        "diff_tensors", "16", NULL};
    h3_status st = {0};
    CHECK(h3_st_write(path, t, n, kv, &st) == H3_OK, "write: %s", st.message);
    free(t);
    h3_st_close(f);
    return path;
}

static void test_open_errors(void) {
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("models/tiny-h3");
    o.compute = H3_COMPUTE_CPU;
    h3_engine *e = NULL;
    h3_status st = {0};
    char *foreign = foreign_adapter();
    o.adapter_path = foreign;
    CHECK(h3_engine_open(&o, &e, &st) == H3_ERR_INVALID_ARGUMENT && !e && strstr(st.message, "MiniMaxAI/MiniMax-H3") &&
              strstr(st.message, "golden/tiny-h3"),
          "wrong base model: %s", st.message);
    printf("wrong base model -> %s\n", st.message);
    g_remove(foreign);
    g_free(foreign);
    o.adapter_path = h3_test_data("adapters/tiny-h3/missing");
    CHECK(h3_engine_open(&o, &e, &st) == H3_ERR_NOT_FOUND && !e, "missing adapter: %s", st.message);
    o.adapter_path = h3_test_data("adapters/tiny-h3");
    CHECK(h3_engine_open(&o, &e, &st) == H3_ERR_INVALID_ARGUMENT && !e && strstr(st.message, "vsa-datafree"),
          "manifest root: %s", st.message);
}

/* Issue 14: the base-model check reads model_index.json (then
 * modular_model_index.json) as every model file is read. A FIFO in its
 * place blocked the open for ever (json-glib opened it without a check),
 * a damaged one was passed over for the release's name. */
static void test_index_files(void) {
    char *dir = h3_test_copy_data("models/tiny-h3");
    CHECK(dir != NULL, "a copy of the tiny model");
    if (!dir) return;
    char *index = g_build_filename(dir, "model_index.json", NULL);
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = dir;
    o.compute = H3_COMPUTE_CPU;
    o.adapter_path = h3_test_data(FASTH3_DENSE_ADAPTER);
    h3_engine *e = NULL;
    h3_status st = {0};
    g_remove(index);
    CHECK(mkfifo(index, 0600) == 0, "mkfifo %s", index);
    alarm(120); /* what it did before: block, until this ends the test */
    h3_status_code rc = h3_engine_open(&o, &e, &st);
    alarm(0);
    CHECK(rc == H3_ERR_IO && !e && strstr(st.message, "model_index.json") && strstr(st.message, "not a regular file"),
          "a FIFO as model_index.json: %s %s", h3_status_code_name(rc), st.message);
    g_remove(index);
    CHECK(g_file_set_contents(index, "{\"transformer\": [\"diffusers\",", -1, NULL), "write %s", index);
    rc = h3_engine_open(&o, &e, &st);
    CHECK(rc == H3_ERR_FORMAT && !e && strstr(st.message, "model_index.json"), "a damaged model_index.json: %s %s",
          h3_status_code_name(rc), st.message);
    /* two "transformer" entries name two models: json-glib would take the last */
    CHECK(g_file_set_contents(index, "{\"transformer\": [\"diffusers\", \"X\", {}], \"transformer\": []}", -1, NULL),
          "write %s", index);
    rc = h3_engine_open(&o, &e, &st);
    CHECK(rc == H3_ERR_FORMAT && !e && strstr(st.message, "model_index.json") &&
              strstr(st.message, "\"transformer\" appears twice"),
          "a model_index.json naming the transformer twice: %s %s", h3_status_code_name(rc), st.message);
    /* without it, modular_model_index.json names the model, and the adapter binds */
    g_remove(index);
    rc = h3_engine_open(&o, &e, &st);
    CHECK(rc == H3_OK && e, "no model_index.json, the modular index names golden/tiny-h3: %s %s",
          h3_status_code_name(rc), st.message);
    h3_engine_close(e);
    g_free(index);
    h3_test_remove_tree(dir);
    g_free(dir);
}

static void test_capabilities(void) {
    char *text = h3_capabilities_describe();
    CHECK(text && strstr(text, "vsa: available, experimental") && strstr(text, "fa: available") &&
              strstr(text, "fastvideo-lora-v2"),
          "capabilities: %s", text ? text : "(null)");
    if (text) printf("capabilities:\n%s", text);
    free(text);
}

int main(void) {
    tmpdir = g_dir_make_tmp("h3-fasth3-XXXXXX", NULL);
    test_ladders();
    test_step_rule();
    test_row_timesteps("e2e_t2va_fasth3_ladderA", 0);
    test_row_timesteps("e2e_t2va_fasth3_ladderB", 1);
    test_dense_engine();
    test_vsa_engine();
    test_tp();
    test_no_adapter();
    test_open_errors();
    test_index_files();
    test_capabilities();
    g_rmdir(tmpdir);
    g_free(tmpdir);
    return h3_test_finish("test_fasth3");
}
