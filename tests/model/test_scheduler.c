/* test_scheduler.c - sigma grids, FastH3 ladders, the Euler step, scale_noise
 * and the per-forward timestep plan, bit for bit against
 * goldens/common/scheduler and the end-to-end tiny-h3 goldens. */
#include <glib.h>
#include <json-glib/json-glib.h>
#include <stdint.h>

#include "base/h3_safetensors.h"
#include "model/h3_scheduler.h"
#include "h3_test.h"

static uint32_t f32_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static const h3_st_tensor *golden_f32(const h3_st_file *f, const char *name, size_t n) {
    const h3_st_tensor *t = h3_st_find(f, name);
    CHECK(t && t->dtype == H3_ST_F32 && (size_t)t->numel == n, "golden '%s' (%zu float32) in %s",
          name, n, h3_st_path(f));
    return t && t->dtype == H3_ST_F32 && (size_t)t->numel == n ? t : NULL;
}

/* Bit-exact comparison of got[0..n) with a golden float32 tensor. */
static size_t check_bits(const h3_st_file *f, const char *name, const float *got, size_t n) {
    const h3_st_tensor *t = golden_f32(f, name, n);
    if (!t) return 0;
    const uint32_t *ref = t->data;
    size_t exact = 0, shown = 0;
    for (size_t i = 0; i < n; i++) {
        if (f32_bits(got[i]) == ref[i]) exact++;
        else if (shown++ < 5)
            fprintf(stderr, "  %s[%zu]: got 0x%08x (%.9g), golden 0x%08x\n", name, i,
                    f32_bits(got[i]), (double)got[i], ref[i]);
    }
    CHECK(exact == n, "%s: %zu / %zu bit-exact", name, exact, n);
    return exact;
}

static JsonParser *load_json(const char *rel, JsonObject **root) {
    JsonParser *p = json_parser_new();
    GError *err = NULL;
    gboolean ok = json_parser_load_from_file(p, h3_test_data(rel), &err);
    CHECK(ok, "%s: %s", rel, err ? err->message : "?");
    if (err) g_error_free(err);
    *root = ok ? json_node_get_object(json_parser_get_root(p)) : NULL;
    return p;
}

/* Grids of scheduler.json: N-point grids and the ladder-B base. */
static void test_grids(const h3_st_file *f, JsonObject *meta) {
    JsonObject *grids = json_object_get_object_member(meta, "grids");
    GList *keys = json_object_get_members(grids);
    int count = 0;
    for (GList *k = keys; k; k = k->next, count++) {
        const char *key = k->data;
        JsonObject *g = json_object_get_object_member(grids, key);
        float shift = (float)json_object_get_double_member(g, "shift");
        h3_sigma_grid grid = {0};
        h3_status st = {0};
        h3_status_code rc;
        if (json_object_has_member(g, "base")) {
            JsonArray *base = json_object_get_array_member(g, "base");
            float b[16];
            int n = (int)json_array_get_length(base);
            for (int i = 0; i < n && i < 16; i++) b[i] = (float)json_array_get_double_element(base, i);
            /* the json's base is the named ladder B */
            CHECK(n == H3_FASTH3_LADDER_POINTS &&
                      memcmp(b, h3_fasth3_ladder_b, sizeof h3_fasth3_ladder_b) == 0,
                  "%s: base differs from h3_fasth3_ladder_b", key);
            rc = h3_sigma_grid_from_base(h3_fasth3_ladder_b, H3_FASTH3_LADDER_POINTS, shift, &grid, &st);
        } else {
            int steps = (int)json_object_get_int_member(g, "num_inference_steps");
            rc = h3_sigma_grid_make(steps, shift, &grid, &st);
            CHECK(grid.n - 1 == json_object_get_int_member(g, "forwards"), "%s: %d forwards", key,
                  grid.n - 1);
        }
        CHECK(rc == H3_OK, "%s: %s", key, st.message);
        if (rc != H3_OK) continue;

        /* sigmas_hex of the json and the safetensors tensor, both */
        gchar **hex = g_strsplit(json_object_get_string_member(g, "sigmas_hex"), " ", -1);
        CHECK((int)g_strv_length(hex) == grid.n, "%s: %u hex sigmas, grid has %d", key,
              g_strv_length(hex), grid.n);
        for (int i = 0; i < grid.n && hex[i]; i++) {
            uint32_t want = (uint32_t)g_ascii_strtoull(hex[i], NULL, 16);
            CHECK(f32_bits(grid.sigmas[i]) == want, "%s sigma[%d] 0x%08x, golden 0x%08x", key, i,
                  f32_bits(grid.sigmas[i]), want);
        }
        g_strfreev(hex);
        char name[128];
        snprintf(name, sizeof name, "%s.sigmas", key);
        size_t es = check_bits(f, name, grid.sigmas, (size_t)grid.n);
        snprintf(name, sizeof name, "%s.timesteps", key);
        size_t et = check_bits(f, name, grid.timesteps, (size_t)grid.n - 1);
        printf("grid %-14s shift %4.1f: sigmas %zu/%d, timesteps %zu/%d bit-exact\n", key,
               (double)shift, es, grid.n, et, grid.n - 1);
        h3_sigma_grid_free(&grid);
    }
    CHECK(count == 8, "scheduler.json has %d grids", count);
    g_list_free(keys);
}

/* Ladder A is linspace(1, 0, 5): the base ladder and the 5-point grid agree. */
static void test_ladder_a(const h3_st_file *f) {
    const float shifts[2] = {H3_VIDEO_SHIFT, H3_AUDIO_SHIFT};
    const char *names[2] = {"video.N5.sigmas", "audio.N5.sigmas"};
    for (int m = 0; m < 2; m++) {
        h3_sigma_grid grid = {0};
        h3_status st = {0};
        CHECK(h3_sigma_grid_from_base(h3_fasth3_ladder_a, H3_FASTH3_LADDER_POINTS, shifts[m], &grid,
                                      &st) == H3_OK, "%s", st.message);
        if (grid.n) check_bits(f, names[m], grid.sigmas, 5);
        h3_sigma_grid_free(&grid);
    }
}

/* Ladder B from the tiny adapter's fastvideo_inference.json numbers. */
static void test_dmd_steps(const h3_st_file *f) {
    const int dmd[4] = {999, 749, 500, 250};
    const float shifts[2] = {H3_VIDEO_SHIFT, H3_AUDIO_SHIFT};
    const char *names[2] = {"video.ladderB.sigmas", "audio.ladderB.sigmas"};
    for (int m = 0; m < 2; m++) {
        h3_sigma_grid grid = {0};
        h3_status st = {0};
        CHECK(h3_sigma_grid_from_dmd_steps(dmd, 4, shifts[m], &grid, &st) == H3_OK, "%s", st.message);
        if (grid.n) check_bits(f, names[m], grid.sigmas, 5);
        h3_sigma_grid_free(&grid);
    }
    const int bad[2] = {999, 1001};
    h3_sigma_grid grid = {0};
    h3_status st = {0};
    CHECK(h3_sigma_grid_from_dmd_steps(bad, 2, 12.0f, &grid, &st) == H3_ERR_INVALID_ARGUMENT &&
              strstr(st.message, "1001") != NULL, "dmd step 1001 accepted: %s", st.message);
}

static void grid_for(JsonNode *grid_node, float shift, h3_sigma_grid *grid) {
    h3_status st = {0};
    h3_status_code rc;
    if (json_node_get_value_type(grid_node) == G_TYPE_STRING)
        rc = h3_sigma_grid_from_base(h3_fasth3_ladder_b, H3_FASTH3_LADDER_POINTS, shift, grid, &st);
    else
        rc = h3_sigma_grid_make((int)json_node_get_int(grid_node), shift, grid, &st);
    CHECK(rc == H3_OK, "grid: %s", st.message);
}

/* The Euler steps of scheduler.json (random sample / model_output). */
static void test_steps(const h3_st_file *f, JsonObject *meta) {
    JsonArray *steps = json_object_get_array_member(meta, "steps");
    guint count = json_array_get_length(steps);
    size_t exact_total = 0, total = 0;
    for (guint s = 0; s < count; s++) {
        JsonObject *o = json_array_get_object_element(steps, s);
        const char *key = json_object_get_string_member(o, "key");
        float shift = (float)json_object_get_double_member(o, "shift");
        int index = (int)json_object_get_int_member(o, "index");
        h3_sigma_grid grid = {0};
        grid_for(json_object_get_member(o, "grid"), shift, &grid);
        if (!grid.n) continue;
        CHECK(index >= 0 && index < grid.n - 1, "%s: index %d", key, index);
        if (index < 0 || index >= grid.n - 1) {
            h3_sigma_grid_free(&grid);
            continue;
        }
        /* the step's timestep / sigmas are those of the grid */
        char name[128];
        snprintf(name, sizeof name, "%s.timestep", key);
        const h3_st_tensor *tt = golden_f32(f, name, 1);
        float t = tt ? ((const float *)tt->data)[0] : 0.0f;
        CHECK(tt && f32_bits(t) == f32_bits(grid.timesteps[index]), "%s: timestep %.9g vs grid %.9g",
              key, (double)t, (double)grid.timesteps[index]);
        CHECK((double)grid.sigmas[index] == json_object_get_double_member(o, "sigma") &&
                  (double)grid.sigmas[index + 1] == json_object_get_double_member(o, "sigma_next"),
              "%s: sigma %.9g -> %.9g", key, (double)grid.sigmas[index],
              (double)grid.sigmas[index + 1]);

        snprintf(name, sizeof name, "%s.sample", key);
        const h3_st_tensor *xs = golden_f32(f, name, 4 * 96);
        snprintf(name, sizeof name, "%s.model_output", key);
        const h3_st_tensor *vs = golden_f32(f, name, 4 * 96);
        if (xs && vs) {
            float x[4 * 96];
            memcpy(x, xs->data, sizeof x);
            h3_euler_step(x, vs->data, 4 * 96, t, grid.sigmas[index], grid.sigmas[index + 1]);
            snprintf(name, sizeof name, "%s.prev_sample", key);
            exact_total += check_bits(f, name, x, 4 * 96);
            total += 4 * 96;
            /* the grid form gives the same step */
            memcpy(x, xs->data, sizeof x);
            h3_sigma_grid_step(&grid, index, x, vs->data, 4 * 96);
            check_bits(f, name, x, 4 * 96);
        }
        h3_sigma_grid_free(&grid);
    }
    CHECK(count == 18, "scheduler.json has %u steps", count);
    printf("euler steps: %u goldens, %zu / %zu prev_sample values bit-exact\n", count, exact_total,
           total);
}

static void test_scale_noise(const h3_st_file *f) {
    const h3_st_tensor *x = golden_f32(f, "scale_noise.sample", 192);
    const h3_st_tensor *e = golden_f32(f, "scale_noise.noise", 192);
    if (!x || !e) return;
    float out[192];
    h3_scale_noise(out, x->data, e->data, 192, H3_CONDITION_TIMESTEP);
    size_t exact = check_bits(f, "scale_noise.out_t0.999", out, 192);
    printf("scale_noise t=0.999: %zu / 192 bit-exact\n", exact);
}

static void test_plan_unit(void) {
    h3_step_timesteps p;
    h3_step_timesteps_make(0.0f, 0.0f, 0, &p);
    CHECK(p.count == 1 && p.values[0] == 0.0f && p.index_text == 0 && p.index_video == 0 &&
              p.index_audio == 0 && p.index_cond == -1, "T2VA step 0 plan");
    h3_step_timesteps_make(0.3f, 0.1f, 1, &p); /* sorted, whatever the order */
    CHECK(p.count == 3 && p.values[0] == 0.1f && p.values[1] == 0.3f && p.values[2] == 0.999f &&
              p.index_audio == 0 && p.index_video == 1 && p.index_text == 1 && p.index_cond == 2,
          "sorted plan");
    h3_step_timesteps_make(0.9995f, 0.5f, 1, &p); /* cond = max(t_video, 0.999) */
    CHECK(p.count == 2 && p.index_cond == p.index_video && p.values[p.index_cond] == 0.9995f,
          "cond row above 0.999 follows t_video");
}

static void test_errors(void) {
    h3_sigma_grid g = {0};
    h3_status st = {0};
    CHECK(h3_sigma_grid_make(1, 12.0f, &g, &st) == H3_ERR_INVALID_ARGUMENT && g.sigmas == NULL,
          "1-point grid accepted");
    CHECK(h3_sigma_grid_make(50, 0.0f, &g, &st) == H3_ERR_INVALID_ARGUMENT, "shift 0 accepted");
    const float rising[3] = {0.5f, 0.75f, 0.0f}, no_zero[3] = {1.0f, 0.5f, 0.25f};
    CHECK(h3_sigma_grid_from_base(rising, 3, 12.0f, &g, &st) == H3_ERR_INVALID_ARGUMENT &&
              g.sigmas == NULL, "non-decreasing ladder accepted");
    CHECK(strstr(st.message, "index 1") != NULL, "message names the index: %s", st.message);
    CHECK(h3_sigma_grid_from_sigmas(no_zero, 3, &g, &st) == H3_ERR_INVALID_ARGUMENT,
          "schedule without terminal 0 accepted");
}

/* The end-to-end goldens: grids, every forward's (timestep, timestep_indices)
 * and the Euler steps between the recorded transformer inputs. */
static void test_e2e(const char *name, int ladder_b) {
    char rel[256];
    JsonObject *meta = NULL;
    snprintf(rel, sizeof rel, "goldens/tiny-h3/%s.json", name);
    JsonParser *parser = load_json(rel, &meta);
    snprintf(rel, sizeof rel, "goldens/tiny-h3/%s.safetensors", name);
    h3_st_file *f = NULL;
    h3_status st = {0};
    CHECK(h3_st_open(h3_test_data(rel), &f, &st) == H3_OK, "%s", st.message);
    if (!f || !meta) goto done;

    JsonObject *req = json_object_get_object_member(meta, "request");
    JsonObject *res = json_object_get_object_member(meta, "resolved");
    int points = (int)json_object_get_int_member(req, "num_inference_steps");
    int k_cond = (int)json_object_get_int_member(res, "num_condition_video_rows");
    int n_audio = (int)json_object_get_int_member(res, "num_audio_latents");

    h3_sigma_grid gv = {0}, ga = {0};
    if (ladder_b) {
        CHECK(h3_sigma_grid_from_base(h3_fasth3_ladder_b, 5, H3_VIDEO_SHIFT, &gv, &st) == H3_OK, "%s", st.message);
        CHECK(h3_sigma_grid_from_base(h3_fasth3_ladder_b, 5, H3_AUDIO_SHIFT, &ga, &st) == H3_OK, "%s", st.message);
    } else {
        CHECK(h3_sigma_grid_make(points, H3_VIDEO_SHIFT, &gv, &st) == H3_OK, "%s", st.message);
        CHECK(h3_sigma_grid_make(points, H3_AUDIO_SHIFT, &ga, &st) == H3_OK, "%s", st.message);
    }
    if (!gv.n || !ga.n) goto free_grids;
    check_bits(f, "sigmas", gv.sigmas, (size_t)gv.n);
    check_bits(f, "audio_sigmas", ga.sigmas, (size_t)ga.n);
    check_bits(f, "timesteps", gv.timesteps, (size_t)gv.n - 1);
    check_bits(f, "audio_timesteps", ga.timesteps, (size_t)ga.n - 1);

    const h3_st_tensor *ti = h3_st_find(f, "text_indices");
    const h3_st_tensor *vi = h3_st_find(f, "video_indices");
    const h3_st_tensor *ai = h3_st_find(f, "audio_indices");
    CHECK(ti && vi && ai, "%s: row indices", name);
    if (!ti || !vi || !ai) goto free_grids;
    size_t rows = (size_t)(ti->numel + vi->numel + ai->numel);

    int plan_ok = 0, forwards = gv.n - 1;
    for (int i = 0; i < forwards; i++) {
        h3_step_timesteps p;
        h3_step_timesteps_make(gv.timesteps[i], ga.timesteps[i], k_cond > 0, &p);
        char key[64];
        snprintf(key, sizeof key, "step%d.timestep", i);
        const h3_st_tensor *tv = h3_st_find(f, key);
        snprintf(key, sizeof key, "step%d.timestep_indices", i);
        const h3_st_tensor *tx = h3_st_find(f, key);
        CHECK(tv && tx && tv->dtype == H3_ST_F32 && tx->dtype == H3_ST_I64, "%s step %d plan", name, i);
        if (!tv || !tx) continue;
        CHECK(tv->numel == p.count, "%s step %d: %lld timesteps, plan %d", name, i,
              (long long)tv->numel, p.count);
        int ok = tv->numel == p.count && (size_t)tx->numel == rows;
        for (int j = 0; ok && j < p.count; j++)
            ok = f32_bits(((const float *)tv->data)[j]) == f32_bits(p.values[j]);
        /* every row's index, by row class */
        const int64_t *idx = tx->data;
        const int64_t *t_rows = ti->data, *v_rows = vi->data, *a_rows = ai->data;
        for (int64_t r = 0; ok && r < ti->numel; r++) ok = idx[t_rows[r]] == p.index_text;
        for (int64_t r = 0; ok && r < vi->numel; r++)
            ok = idx[v_rows[r]] == (r < k_cond ? p.index_cond : p.index_video);
        for (int64_t r = 0; ok && r < ai->numel; r++) ok = idx[a_rows[r]] == p.index_audio;
        CHECK(ok, "%s step %d: timestep / timestep_indices differ from the plan", name, i);
        plan_ok += ok;
    }
    printf("%s: grids exact, %d / %d forwards' timestep plans exact\n", name, plan_ok, forwards);

    /* Euler steps between recorded transformer inputs; the condition rows
     * are never written. */
    size_t exact = 0, total = 0;
    for (int i = 0; i < forwards; i++) {
        char key[64];
        snprintf(key, sizeof key, "step%d.hidden_states", i);
        const h3_st_tensor *xv = h3_st_find(f, key);
        snprintf(key, sizeof key, "step%d.noise_pred", i);
        const h3_st_tensor *vv = h3_st_find(f, key);
        snprintf(key, sizeof key, "step%d.audio_hidden_states", i);
        const h3_st_tensor *xa = h3_st_find(f, key);
        snprintf(key, sizeof key, "step%d.audio_noise_pred", i);
        const h3_st_tensor *va = h3_st_find(f, key);
        if (!xv || !vv || !xa || !va) continue; /* ladder B keeps only the plan */

        size_t nv = (size_t)xv->numel, na = (size_t)xa->numel, skip = (size_t)k_cond * 96;
        float *x = malloc(nv * sizeof(float)), *y = malloc(na * sizeof(float));
        memcpy(x, xv->data, nv * sizeof(float));
        memcpy(y, xa->data, na * sizeof(float));
        h3_sigma_grid_step(&gv, i, x + skip, (const float *)vv->data + skip, nv - skip);
        h3_sigma_grid_step(&ga, i, y, va->data, na);
        if (i + 1 < forwards) {
            snprintf(key, sizeof key, "step%d.hidden_states", i + 1);
            exact += check_bits(f, key, x, nv);
            snprintf(key, sizeof key, "step%d.audio_hidden_states", i + 1);
            exact += check_bits(f, key, y, na);
            total += nv + na;
        } else {
            /* audio rows [2*Na, 32] -> audio_latents [2, 32, Na] */
            float *lat = malloc(na * sizeof(float));
            for (int c = 0; c < 2; c++)
                for (int ch = 0; ch < 32; ch++)
                    for (int j = 0; j < n_audio; j++)
                        lat[((size_t)c * 32 + ch) * n_audio + j] = y[((size_t)c * n_audio + j) * 32 + ch];
            exact += check_bits(f, "audio_latents", lat, na);
            total += na;
            free(lat);
        }
        free(x);
        free(y);
    }
    if (total) printf("%s: Euler steps %zu / %zu values bit-exact\n", name, exact, total);

free_grids:
    h3_sigma_grid_free(&gv);
    h3_sigma_grid_free(&ga);
done:
    h3_st_close(f);
    g_object_unref(parser);
}

int main(void) {
    h3_st_file *f = NULL;
    h3_status st = {0};
    JsonObject *meta = NULL;
    CHECK(h3_st_open(h3_test_data("goldens/common/scheduler.safetensors"), &f, &st) == H3_OK, "%s",
          st.message);
    JsonParser *parser = load_json("goldens/common/scheduler.json", &meta);
    if (f && meta) {
        test_grids(f, meta);
        test_ladder_a(f);
        test_dmd_steps(f);
        test_steps(f, meta);
        test_scale_noise(f);
    }
    h3_st_close(f);
    g_object_unref(parser);

    test_plan_unit();
    test_errors();
    test_e2e("e2e_t2va_3steps", 0);
    test_e2e("e2e_fl2va_3steps", 0);
    test_e2e("e2e_t2va_fasth3_ladderA", 0);
    test_e2e("e2e_t2va_fasth3_ladderB", 1);
    return h3_test_finish("test_scheduler");
}
