/* test_dit.c - the H3 transformer against the diffusers goldens.
 *
 * - layout builder: position_ids / token_tags / indices / row timesteps of
 *   the transformer and end-to-end goldens, exactly;
 * - patchify / audio packing against the end-to-end goldens;
 * - the forward (T2VA and FL2VA) on the CPU backend from both checkpoint
 *   layouts (diffusers and native), 1e-4 relative L2, and bit-identical
 *   between the layouts; the end-to-end goldens' two transformer calls;
 * - the loader's name mapping against the real release's index files (transformer/, Ref2VA's
 *   transformer_ref/ and the native FL2VA/);
 * - config and checkpoint errors name the file and the tensor or key. */
#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <stdint.h>

#include "backend/h3_backend.h"
#include "model/h3_dit.h"
#include "model/h3_dit_layout.h"
#include "base/h3_safetensors.h"
#include "h3_test.h"
#include "h3_test_golden.h"

#define TOLERANCE 1e-4

static h3_backend *backend;
static char *tmpdir;

/* ---- golden access ------------------------------------------------------------- */

static JsonObject *json_member(JsonParser *p, const char *object) {
    JsonNode *root = json_parser_get_root(p);
    return root ? json_object_get_object_member(json_node_get_object(root), object) : NULL;
}

static const h3_st_tensor *tensor(h3_st_file *f, const char *name) {
    const h3_st_tensor *t = f ? h3_st_find(f, name) : NULL;
    CHECK(t != NULL, "golden tensor '%s' missing", name);
    return t;
}

static double *read_f64(h3_st_file *f, const char *name, int64_t *n) {
    const h3_st_tensor *t = tensor(f, name);
    if (!t || t->dtype != H3_ST_F64) return NULL;
    double *out = malloc((size_t)t->numel * sizeof *out + 8);
    memcpy(out, t->data, (size_t)t->numel * 8);
    if (n) *n = t->numel;
    return out;
}

static h3_tensor upload(const float *host, int64_t rows, int64_t cols) {
    h3_tensor t = h3_new_2d(backend, H3_F32, rows, cols);
    h3_status st = {0};
    CHECK(h3_tensor_upload_f32(backend, &t, host, &st) == H3_OK, "upload: %s", st.message);
    return t;
}

static float *download(const h3_tensor *t) {
    float *host = malloc((size_t)h3_tensor_numel(t) * sizeof *host + 4);
    h3_status st = {0};
    CHECK(h3_tensor_download_f32(backend, t, host, &st) == H3_OK, "download: %s", st.message);
    return host;
}

/* ---- layout ---------------------------------------------------------------------- */

typedef struct golden_geometry {
    int T, H_lat, W_lat, Na, L;
    int num_keyframes;
    h3_keyframe_anchor anchors[H3_DIT_MAX_KEYFRAMES];
} golden_geometry;

/* The layout the pipeline built, from a golden's text tags and geometry. */
static h3_dit_layout *build_layout(const golden_geometry *g, const int32_t *text_tags) {
    h3_dit_layout_params p = {.text_token_tags = text_tags, .num_text = g->L, .num_latent_frames = g->T,
                              .latent_height = g->H_lat, .latent_width = g->W_lat, .num_audio_latents = g->Na,
                              .patch_t = 1, .patch_h = 2, .patch_w = 2, .num_keyframes = g->num_keyframes};
    memcpy(p.anchors, g->anchors, sizeof p.anchors);
    h3_dit_layout *l = NULL;
    h3_status st = {0};
    CHECK(h3_dit_layout_build(&p, &l, &st) == H3_OK, "layout build: %s", st.message);
    return l;
}

static int same_i32(const int32_t *a, const int32_t *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* Compares a layout with the golden's position_ids, token_tags and indices
 * (prefix: "" or "step0."). */
static void check_layout(const char *label, const h3_dit_layout *l, h3_st_file *f, const char *prefix) {
    char name[128];
    int64_t n = 0;
#define NAME(s) (snprintf(name, sizeof name, "%s%s", prefix, s), name)
    double *pos = read_f64(f, NAME("position_ids"), &n);
    CHECK(pos && n == 3 * l->seq_len, "%s: position_ids has %lld values, layout %lld rows", label, (long long)n,
          (long long)l->seq_len);
    if (pos && n == 3 * l->seq_len) {
        double max_diff = 0;
        int64_t f32_mismatch = 0, f64_mismatch = 0;
        for (int64_t i = 0; i < n; i++) {
            double d = fabs(pos[i] - l->position_ids[i]);
            max_diff = d > max_diff ? d : max_diff;
            f64_mismatch += pos[i] != l->position_ids[i];
            f32_mismatch += (float)pos[i] != (float)l->position_ids[i];
        }
        printf("%s: position_ids max |diff| %.3g (float64 mismatches %lld, float32 mismatches %lld of %lld)\n", label,
               max_diff, (long long)f64_mismatch, (long long)f32_mismatch, (long long)n);
        CHECK(f32_mismatch == 0, "%s: %lld float32 positions differ", label, (long long)f32_mismatch);
        CHECK(f64_mismatch == 0, "%s: %lld float64 positions differ (max %.3g)", label, (long long)f64_mismatch,
              max_diff);
    }
    free(pos);
    struct { const char *name; const int32_t *mine; int64_t n; } ints[] = {
        {"token_tags", l->token_tags, l->seq_len},
        {"video_indices", l->video_indices, l->num_video_rows},
        {"audio_indices", l->audio_indices, l->num_audio_rows},
        {"text_indices", l->text_indices, l->num_text},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int32_t *g = golden_i32(f, NAME(ints[i].name), &n);
        CHECK(g && n == ints[i].n && same_i32(g, ints[i].mine, n), "%s: %s differs (%lld vs %lld values)", label,
              ints[i].name, (long long)n, (long long)ints[i].n);
        free(g);
    }
#undef NAME
}

/* Row timesteps of a step against the golden's timestep / timestep_indices. */
static void check_timesteps(const char *label, const h3_dit_layout *l, float t_video, float t_audio, h3_st_file *f,
                            const char *ts_name, const char *idx_name) {
    float ts[H3_DIT_MAX_TIMESTEPS];
    int n_t = 0;
    int32_t *idx = malloc((size_t)l->seq_len * sizeof *idx);
    h3_status st = {0};
    CHECK(h3_dit_layout_timesteps(l, t_video, t_audio, ts, &n_t, idx, &st) == H3_OK, "%s: %s", label, st.message);
    int64_t gn = 0, gi = 0;
    float *gts = golden_f32(f, ts_name, &gn);
    int32_t *gidx = golden_i32(f, idx_name, &gi);
    int ok = gts && gn == n_t && gidx && gi == l->seq_len;
    for (int i = 0; ok && i < n_t; i++) ok = gts[i] == ts[i];
    CHECK(ok && same_i32(gidx, idx, gi), "%s: row timesteps differ (n_t %d vs %lld)", label, n_t, (long long)gn);
    free(idx);
    free(gts);
    free(gidx);
}

static golden_geometry transformer_geometry(JsonParser *p) {
    JsonObject *l = json_member(p, "layout");
    golden_geometry g = {0};
    if (!l) return g;
    g.T = (int)json_object_get_int_member(l, "T");
    g.H_lat = (int)json_object_get_int_member(l, "H_lat");
    g.W_lat = (int)json_object_get_int_member(l, "W_lat");
    g.Na = (int)json_object_get_int_member(l, "Na");
    g.L = (int)json_object_get_int_member(l, "L");
    JsonArray *a = json_object_get_array_member(l, "anchors");
    g.num_keyframes = (int)json_array_get_length(a);
    for (int i = 0; i < g.num_keyframes && i < H3_DIT_MAX_KEYFRAMES; i++)
        g.anchors[i] = strcmp(json_array_get_string_element(a, (guint)i), "last") == 0 ? H3_ANCHOR_LAST : H3_ANCHOR_FIRST;
    return g;
}

/* The text tags of a transformer golden are token_tags[text_indices]. */
static int32_t *golden_text_tags(h3_st_file *f, int L) {
    int32_t *tags = golden_i32(f, "token_tags", NULL);
    int32_t *text = golden_i32(f, "text_indices", NULL);
    int32_t *out = malloc((size_t)L * sizeof *out + 4);
    for (int i = 0; tags && text && i < L; i++) out[i] = tags[text[i]];
    free(tags);
    free(text);
    return out;
}

static void test_transformer_layout(const char *golden) {
    JsonParser *p = golden_json(golden);
    h3_st_file *f = golden_tiny(golden);
    golden_geometry g = transformer_geometry(p);
    int32_t *text_tags = golden_text_tags(f, g.L);
    h3_dit_layout *l = build_layout(&g, text_tags);
    if (l) {
        check_layout(golden, l, f, "");
        JsonObject *lay = json_member(p, "layout");
        float tv = (float)json_object_get_double_member(lay, "t_video");
        float ta = (float)json_object_get_double_member(lay, "t_audio");
        check_timesteps(golden, l, tv, ta, f, "timestep", "timestep_indices");
        /* adaln_indices = timestep_indices·3 + token_tags */
        int32_t *ti = golden_i32(f, "timestep_indices", NULL), *ad = golden_i32(f, "adaln_indices", NULL);
        int ok = ti && ad;
        for (int64_t s = 0; ok && s < l->seq_len; s++) ok = ad[s] == ti[s] * 3 + l->token_tags[s];
        CHECK(ok, "%s: adaln_indices != timestep_indices*3 + token_tags", golden);
        free(ti);
        free(ad);
    }
    h3_dit_layout_free(l);
    free(text_tags);
    h3_st_close(f);
    g_object_unref(p);
}

static golden_geometry e2e_geometry(JsonParser *p) {
    JsonObject *r = json_member(p, "resolved");
    JsonObject *req = json_member(p, "request");
    golden_geometry g = {0};
    if (!r || !req) return g;
    g.T = (int)json_object_get_int_member(r, "num_latent_frames");
    g.H_lat = (int)json_object_get_int_member(r, "latent_height");
    g.W_lat = (int)json_object_get_int_member(r, "latent_width");
    g.Na = (int)json_object_get_int_member(r, "num_audio_latents");
    int cond = (int)json_object_get_int_member(r, "num_condition_video_rows");
    g.num_keyframes = cond / ((g.H_lat / 2) * (g.W_lat / 2));
    /* The requests give `image` (first keyframe) only, never `last_image`. */
    CHECK(!json_object_has_member(req, "last_image") || json_object_get_null_member(req, "last_image"),
          "e2e golden with a last keyframe: the test assumes first-frame anchors");
    for (int i = 0; i < g.num_keyframes; i++) g.anchors[i] = H3_ANCHOR_FIRST;
    return g;
}

static void test_e2e_layout(const char *golden) {
    JsonParser *p = golden_json(golden);
    h3_st_file *f = golden_tiny(golden);
    golden_geometry g = e2e_geometry(p);
    int64_t L = 0;
    int32_t *text_tags = golden_i32(f, "text_token_tags", &L);
    g.L = (int)L;
    h3_dit_layout *l = build_layout(&g, text_tags);
    if (l) {
        check_layout(golden, l, f, "");
        char label[128];
        snprintf(label, sizeof label, "%s step0 inputs", golden);
        check_layout(label, l, f, "step0.");
        float *tv = golden_f32(f, "timesteps", NULL), *ta = golden_f32(f, "audio_timesteps", NULL);
        for (int step = 0; tv && ta && step < 2; step++) {
            char ts[64], idx[64];
            snprintf(ts, sizeof ts, "step%d.timestep", step);
            snprintf(idx, sizeof idx, "step%d.timestep_indices", step);
            snprintf(label, sizeof label, "%s step %d", golden, step);
            check_timesteps(label, l, tv[step], ta[step], f, ts, idx);
        }
        free(tv);
        free(ta);
    }
    h3_dit_layout_free(l);
    free(text_tags);
    h3_st_close(f);
    g_object_unref(p);
}

/* numpy.sum of the spans, bit for bit (values from numpy 1.24). */
static void test_pairwise_span(void) {
    static const struct { int T; double sum; } cases[] = {
        {2, 0x1.0aaaaaaaaaaabp+3},   {7, 0x1.2555555555556p+5},   {16, 0x1.5aaaaaaaaaaabp+6},
        {37, 0x1.9d55555555554p+7},  {72, 0x1.9500000000000p+8},  {102, 0x1.1f7fffffffffep+9},
        {107, 0x1.2daaaaaaaaaa9p+9}, {200, 0x1.1b55555555555p+10}, {300, 0x1.a900000000000p+10},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double s = h3_dit_temporal_span_pairwise(cases[i].T);
        CHECK(s == cases[i].sum, "pairwise span of %d latents: %a, numpy %a", cases[i].T, s, cases[i].sum);
    }
    /* A first + last FL2VA layout: the last anchor sits at L + span − 5/3,
     * the first at L; both carry the frame grid of the target video. */
    int32_t tags[5] = {1, 0, 0, 1, 1};
    golden_geometry g = {.T = 37, .H_lat = 48, .W_lat = 84, .Na = 207, .L = 5, .num_keyframes = 2,
                         .anchors = {H3_ANCHOR_FIRST, H3_ANCHOR_LAST}};
    h3_dit_layout *l = build_layout(&g, tags);
    if (!l) return;
    int64_t rpf = 24 * 42;
    CHECK(l->seq_len == 5 + 2 * rpf + 414 + 37 * rpf, "fl2va first+last: S = %lld", (long long)l->seq_len);
    double last = 5.0 + 0x1.9d55555555554p+7 - 5.0 / 3.0;
    const double *first_row = l->position_ids + 3 * l->condition_start;
    const double *last_row = l->position_ids + 3 * (l->condition_start + rpf);
    const double *video_row = l->position_ids + 3 * l->video_start;
    CHECK(first_row[0] == 5.0 && last_row[0] == last, "anchors at %.17g / %.17g, want 5 / %.17g", first_row[0],
          last_row[0], last);
    CHECK(first_row[1] == video_row[1] && last_row[2] == video_row[2], "keyframe rows use the frame grid");
    /* docs/spec/h3-transformer.md §3.3 example grids for 1344x768. */
    CHECK(fabs(l->height_grid[0] - 3.90513686) < 1e-8 && fabs(l->height_grid[23] - 27.0869579) < 1e-7 &&
              fabs(l->width_grid[0] + 5.16601049) < 1e-8 && fabs(l->width_grid[41] - 36.1581052) < 1e-7,
          "1344x768 grids: h %.9g..%.9g w %.9g..%.9g", l->height_grid[0], l->height_grid[23], l->width_grid[0],
          l->width_grid[41]);
    /* Spec: the last of 37 latent frames sits at L + 200 (up to the float64
     * cumsum's rounding, which the goldens show as 204.99999999999991). */
    CHECK(fabs(l->position_ids[3 * (l->seq_len - 1)] - 205.0) < 1e-12, "last video time %.17g",
          l->position_ids[3 * (l->seq_len - 1)]);
    int ok = 1;
    for (int64_t i = 0; i < 5; i++) ok &= l->token_tags[i] == tags[i];
    for (int64_t i = 5; i < l->audio_start; i++) ok &= l->token_tags[i] == H3_TAG_VIDEO;
    CHECK(ok && l->video_indices[0] == 5 && l->video_indices[2 * rpf] == l->video_start,
          "fl2va first+last tags / video indices");
    h3_dit_layout_free(l);
}

/* ---- patchify / audio packing -------------------------------------------------------- */

static void test_patchify(const char *golden, int64_t cond_rows) {
    h3_st_file *f = golden_tiny(golden);
    const h3_st_tensor *noise = tensor(f, "noise.video");
    if (!noise) {
        h3_st_close(f);
        return;
    }
    int C = (int)noise->shape[1], T = (int)noise->shape[2], H = (int)noise->shape[3], W = (int)noise->shape[4];
    int64_t n_noise, n_rows, n_cond = 0;
    float *z = golden_f32(f, "noise.video", &n_noise);
    float *rows = golden_f32(f, "step0.hidden_states", &n_rows);
    float *cond = cond_rows ? golden_f32(f, "condition_rows", &n_cond) : NULL;
    int64_t F = (int64_t)C * 4, target = (int64_t)T * (H / 2) * (W / 2);
    float *mine = malloc((size_t)n_noise * sizeof *mine);
    float *back = malloc((size_t)n_noise * sizeof *back);
    h3_status st = {0};
    CHECK(h3_dit_patchify_video(z, C, T, H, W, 2, 2, mine, &st) == H3_OK, "patchify: %s", st.message);
    CHECK(n_rows == (cond_rows + target) * F, "%s: %lld row values", golden, (long long)n_rows);
    CHECK(memcmp(mine, rows + cond_rows * F, (size_t)(target * F) * sizeof *mine) == 0,
          "%s: patchify(noise.video) != step0.hidden_states target rows", golden);
    if (cond)
        CHECK(n_cond == cond_rows * F && memcmp(cond, rows, (size_t)n_cond * sizeof *cond) == 0,
              "%s: condition_rows are not the leading step0 rows", golden);
    CHECK(h3_dit_unpatchify_video(mine, C, T, H, W, 2, 2, back, &st) == H3_OK &&
              memcmp(back, z, (size_t)n_noise * sizeof *z) == 0,
          "%s: unpatchify(patchify(z)) != z", golden);
    CHECK(h3_dit_patchify_video(z, C, T, 3, W, 2, 2, mine, &st) == H3_ERR_INVALID_ARGUMENT,
          "odd latent height accepted");
    free(z);
    free(rows);
    free(cond);
    free(mine);
    free(back);
    h3_st_close(f);

    /* Audio: a[ch, c, n] -> row ch·Na + n, feature c (== reshape(2,Na,C).permute(0,2,1) inverted). */
    enum { CA = 3, NA = 5 };
    float a[2 * CA * NA], r[2 * NA * CA], a2[2 * CA * NA];
    for (int i = 0; i < 2 * CA * NA; i++) a[i] = (float)i;
    h3_dit_pack_audio(a, CA, NA, r);
    int ok = 1;
    for (int ch = 0; ch < 2; ch++)
        for (int n = 0; n < NA; n++)
            for (int c = 0; c < CA; c++) ok &= r[(ch * NA + n) * CA + c] == (float)((ch * CA + c) * NA + n);
    h3_dit_unpack_audio(r, CA, NA, a2);
    CHECK(ok && memcmp(a, a2, sizeof a) == 0, "audio pack/unpack");
}

/* ---- forward --------------------------------------------------------------------------- */

static const char *diffusers_dir(void) { return h3_test_data("models/tiny-h3/transformer"); }
static const char *native_dir(void) { return h3_test_data("models/tiny-h3-native/FL2VA/transformer"); }

static h3_dit *load_dit(const char *dir, h3_dit_checkpoint_layout want) {
    h3_dit *dit = NULL;
    h3_status st = {0};
    CHECK(h3_dit_load(backend, dir, &dit, &st) == H3_OK, "load %s: %s", dir, st.message);
    if (dit) CHECK(h3_dit_get_checkpoint_layout(dit) == want, "%s: detected layout %d", dir,
                   (int)h3_dit_get_checkpoint_layout(dit));
    return dit;
}

/* One forward with a golden's inputs (names with prefix, text from text_name);
 * returns the velocities (caller frees) after checking them. */
static void run_forward(h3_dit *dit, const char *label, h3_st_file *f, const h3_dit_layout *l, const char *prefix,
                        const char *text_name, float **video_out, float **audio_out) {
    char name[128];
#define NAME(s) (snprintf(name, sizeof name, "%s%s", prefix, s), name)
    const h3_dit_config *c = h3_dit_get_config(dit);
    int64_t vf = (int64_t)c->in_channels * 4, af = c->audio_in_channels, n_t = 0, n_idx = 0;
    size_t mark = h3_arena_mark(backend);
    float *text = golden_f32(f, text_name, NULL);
    float *video = golden_f32(f, NAME("hidden_states"), NULL);
    float *audio = golden_f32(f, NAME("audio_hidden_states"), NULL);
    float *ts = golden_f32(f, NAME("timestep"), &n_t);
    int32_t *idx = golden_i32(f, NAME("timestep_indices"), &n_idx);
    const char *want_v = strcmp(prefix, "") ? "noise_pred" : "sample";
    const char *want_a = strcmp(prefix, "") ? "audio_noise_pred" : "audio_sample";
    float *gv = golden_f32(f, NAME(want_v), NULL);
    float *ga = golden_f32(f, NAME(want_a), NULL);
    *video_out = *audio_out = NULL;
    if (text && video && audio && ts && idx && gv && ga && n_idx == l->seq_len) {
        h3_status st = {0};
        h3_tensor t = upload(text, l->num_text, c->text_dim);
        h3_tensor v = upload(video, l->num_video_rows, vf), a = upload(audio, l->num_audio_rows, af);
        h3_tensor vv = h3_new_2d(backend, H3_F32, l->num_video_rows, vf);
        h3_tensor av = h3_new_2d(backend, H3_F32, l->num_audio_rows, af);
        h3_status_code rc = h3_dit_begin(dit, l, &t, &st);
        CHECK(rc == H3_OK, "%s: begin: %s", label, st.message);
        if (rc == H3_OK) rc = h3_dit_forward(dit, &v, &a, ts, (int)n_t, idx, &vv, &av, &st);
        CHECK(rc == H3_OK, "%s: forward: %s", label, st.message);
        if (rc == H3_OK) {
            *video_out = download(&vv);
            *audio_out = download(&av);
            double ev = h3_test_rel_l2(*video_out, gv, (size_t)(l->num_video_rows * vf));
            double ea = h3_test_rel_l2(*audio_out, ga, (size_t)(l->num_audio_rows * af));
            printf("%s: video rel L2 %.3e, audio rel L2 %.3e\n", label, ev, ea);
            CHECK(ev <= TOLERANCE, "%s: video velocity rel L2 %.3e", label, ev);
            CHECK(ea <= TOLERANCE, "%s: audio velocity rel L2 %.3e", label, ea);
        }
        h3_dit_end(dit);
    }
    h3_arena_reset(backend, mark);
    free(text);
    free(video);
    free(audio);
    free(ts);
    free(idx);
    free(gv);
    free(ga);
#undef NAME
}

static void test_transformer_forward(const char *golden, h3_dit *diffusers, h3_dit *native) {
    JsonParser *p = golden_json(golden);
    h3_st_file *f = golden_tiny(golden);
    golden_geometry g = transformer_geometry(p);
    int32_t *text_tags = golden_text_tags(f, g.L);
    h3_dit_layout *l = build_layout(&g, text_tags);
    float *v[2] = {0}, *a[2] = {0};
    char label[128];
    if (l && diffusers) {
        snprintf(label, sizeof label, "%s (diffusers layout)", golden);
        run_forward(diffusers, label, f, l, "", "encoder_hidden_states", &v[0], &a[0]);
    }
    if (l && native) {
        snprintf(label, sizeof label, "%s (native layout)", golden);
        run_forward(native, label, f, l, "", "encoder_hidden_states", &v[1], &a[1]);
    }
    if (v[0] && v[1] && a[0] && a[1]) {
        size_t nv = (size_t)(l->num_video_rows * 96), na = (size_t)(l->num_audio_rows * 32);
        int same = memcmp(v[0], v[1], nv * sizeof(float)) == 0 && memcmp(a[0], a[1], na * sizeof(float)) == 0;
        printf("%s: diffusers vs native layout: %s (rel L2 video %.3e, audio %.3e)\n", golden,
               same ? "bit-identical" : "DIFFERENT", h3_test_rel_l2(v[0], v[1], nv), h3_test_rel_l2(a[0], a[1], na));
        CHECK(same, "%s: the two checkpoint layouts give different outputs", golden);
    }
    for (int i = 0; i < 2; i++) {
        free(v[i]);
        free(a[i]);
    }
    h3_dit_layout_free(l);
    free(text_tags);
    h3_st_close(f);
    g_object_unref(p);
}

/* The two transformer calls recorded by an end-to-end golden. */
static void test_e2e_forward(const char *golden, h3_dit *dit) {
    JsonParser *p = golden_json(golden);
    h3_st_file *f = golden_tiny(golden);
    golden_geometry g = e2e_geometry(p);
    int64_t L = 0;
    int32_t *text_tags = golden_i32(f, "text_token_tags", &L);
    g.L = (int)L;
    h3_dit_layout *l = build_layout(&g, text_tags);
    for (int step = 0; l && dit && step < 2; step++) {
        char prefix[32], label[128];
        float *v = NULL, *a = NULL;
        snprintf(prefix, sizeof prefix, "step%d.", step);
        snprintf(label, sizeof label, "%s step %d", golden, step);
        run_forward(dit, label, f, l, prefix, "step0.encoder_hidden_states", &v, &a);
        CHECK(v && a, "%s: no output", label);
        free(v);
        free(a);
    }
    h3_dit_layout_free(l);
    free(text_tags);
    h3_st_close(f);
    g_object_unref(p);
}

/* ---- random-weight model (benchmarks) ------------------------------------------------- */

/* One forward of a random model over a small layout; returns the video velocity. */
static float *random_forward(const h3_dit_config *cfg, int blocks, uint64_t seed, const h3_dit_layout *l,
                             int64_t *n_video) {
    h3_dit *dit = NULL;
    h3_status st = {0};
    CHECK(h3_dit_create_random(backend, cfg, blocks, seed, NULL, &dit, &st) == H3_OK, "random dit: %s", st.message);
    if (!dit) return NULL;
    CHECK(h3_dit_get_config(dit)->num_layers == blocks, "random dit has %d blocks, want %d",
          h3_dit_get_config(dit)->num_layers, blocks);
    int64_t vf = (int64_t)cfg->in_channels * cfg->patch_h * cfg->patch_w, af = cfg->audio_in_channels;
    size_t mark = h3_arena_mark(backend);
    float *text = malloc((size_t)(l->num_text * cfg->text_dim) * sizeof *text);
    float *video = malloc((size_t)(l->num_video_rows * vf) * sizeof *video);
    float *audio = malloc((size_t)(l->num_audio_rows * af) * sizeof *audio);
    for (int64_t i = 0; i < l->num_text * cfg->text_dim; i++) text[i] = (float)sin(0.37 * (double)i);
    for (int64_t i = 0; i < l->num_video_rows * vf; i++) video[i] = (float)cos(0.11 * (double)i);
    for (int64_t i = 0; i < l->num_audio_rows * af; i++) audio[i] = (float)sin(0.23 * (double)i + 1.0);
    float ts[H3_DIT_MAX_TIMESTEPS];
    int n_t = 0;
    int32_t *row_index = malloc((size_t)l->seq_len * sizeof *row_index);
    CHECK(h3_dit_layout_timesteps(l, 0.25f, 0.5f, ts, &n_t, row_index, &st) == H3_OK, "timesteps: %s", st.message);
    h3_tensor t = upload(text, l->num_text, cfg->text_dim);
    h3_tensor v = upload(video, l->num_video_rows, vf), a = upload(audio, l->num_audio_rows, af);
    h3_tensor vv = h3_new_2d(backend, H3_F32, l->num_video_rows, vf);
    h3_tensor av = h3_new_2d(backend, H3_F32, l->num_audio_rows, af);
    float *out = NULL;
    h3_status_code rc = h3_dit_begin(dit, l, &t, &st);
    if (rc == H3_OK) rc = h3_dit_forward(dit, &v, &a, ts, n_t, row_index, &vv, &av, &st);
    CHECK(rc == H3_OK, "random dit forward: %s", st.message);
    if (rc == H3_OK) out = download(&vv);
    *n_video = l->num_video_rows * vf;
    h3_dit_end(dit);
    h3_arena_reset(backend, mark);
    h3_dit_free(dit);
    free(text);
    free(video);
    free(audio);
    free(row_index);
    return out;
}

static void test_random_model(void) {
    h3_dit_config cfg;
    h3_status st = {0};
    CHECK(h3_dit_config_load(diffusers_dir(), &cfg, &st) == H3_OK, "tiny config: %s", st.message);
    int32_t tags[5] = {1, 1, 1, 1, 1};
    golden_geometry g = {.T = 2, .H_lat = 4, .W_lat = 6, .Na = 3, .L = 5};
    h3_dit_layout *l = build_layout(&g, tags);
    if (!l) return;
    int64_t n = 0;
    float *a = random_forward(&cfg, cfg.num_layers, 7, l, &n), *b = random_forward(&cfg, cfg.num_layers, 7, l, &n);
    float *c = random_forward(&cfg, cfg.num_layers, 8, l, &n), *one = random_forward(&cfg, 1, 7, l, &n);
    int finite = a != NULL;
    for (int64_t i = 0; a && i < n; i++) finite &= isfinite(a[i]) != 0;
    CHECK(finite, "random dit: non-finite velocity");
    CHECK(a && b && memcmp(a, b, (size_t)n * sizeof *a) == 0, "random dit: same seed, different output");
    CHECK(a && c && memcmp(a, c, (size_t)n * sizeof *a) != 0, "random dit: another seed, same output");
    CHECK(one != NULL, "random dit: one block");
    h3_dit *dit = NULL;
    CHECK(h3_dit_create_random(backend, &cfg, 0, 1, NULL, &dit, &st) == H3_ERR_INVALID_ARGUMENT && !dit,
          "random dit with 0 blocks: %s", st.message);
    CHECK(h3_dit_create_random(backend, &cfg, cfg.num_layers + 1, 1, NULL, &dit, &st) == H3_ERR_INVALID_ARGUMENT &&
              !dit,
          "random dit with too many blocks: %s", st.message);
    printf("random dit (tiny config, %d blocks): deterministic, seed-dependent, finite\n", cfg.num_layers);
    free(a);
    free(b);
    free(c);
    free(one);
    h3_dit_layout_free(l);
}

/* ---- config and name mapping ---------------------------------------------------------- */

static void test_config(void) {
    h3_dit_config d, n, rd, rn;
    h3_status st = {0};
    CHECK(h3_dit_config_load(diffusers_dir(), &d, &st) == H3_OK, "tiny diffusers config: %s", st.message);
    CHECK(h3_dit_config_load(native_dir(), &n, &st) == H3_OK, "tiny native config: %s", st.message);
    CHECK(memcmp(&d, &n, sizeof d) == 0, "tiny configs differ between layouts");
    CHECK(d.num_layers == 2 && d.num_refiner_layers == 2 && d.hidden_size == 48 && d.num_heads == 2 &&
              d.head_dim == 32 && d.ffn_dim == 96 && d.in_channels == 24 && d.audio_in_channels == 32 &&
              d.text_dim == 40 && d.freq_dim == 16 && d.time_embed_hidden_dim == 48 && d.time_embed_dim == 24 &&
              d.rope_freq_dim == 4 && d.rope_theta == 10000.0f && d.norm_eps == 1e-5f && d.patch_h == 2,
          "tiny config values");
    CHECK(h3_dit_config_load(h3_test_data("official/transformer"), &rd, &st) == H3_OK, "real diffusers: %s",
          st.message);
    CHECK(h3_dit_config_load(h3_test_data("official/FL2VA/transformer"), &rn, &st) == H3_OK, "real native: %s",
          st.message);
    CHECK(memcmp(&rd, &rn, sizeof rd) == 0, "real configs differ between layouts");
    CHECK(rd.num_layers == 50 && rd.num_refiner_layers == 2 && rd.hidden_size == 5376 && rd.num_heads == 56 &&
              rd.head_dim == 128 && rd.ffn_dim == 14336 && rd.text_dim == 5120 && rd.freq_dim == 256 &&
              rd.time_embed_hidden_dim == 5376 && rd.time_embed_dim == 2688 && rd.rope_freq_dim == 16 &&
              rd.final_norm_eps == 1e-5f,
          "real config values");

    /* inv_freq: the float32 table of docs/spec/h3-transformer.md §10.2 and the native checkpoint's buffer. */
    static const float spec[16] = {1, 0.562341332f, 0.316227764f, 0.177827939f, 0.100000001f, 0.0562341288f,
                                   0.0316227786f, 0.0177827943f, 0.00999999978f, 0.00562341325f, 0.00316227786f,
                                   0.00177827943f, 0.00100000005f, 0.000562341302f, 0.000316227786f,
                                   0.00017782794f};
    float inv[16];
    h3_dit_rope_inv_freq(&rd, inv);
    int ok = 1;
    for (int k = 0; k < 16; k++) ok &= inv[k] == spec[k];
    CHECK(ok, "real inv_freq differs from the spec table");
    h3_checkpoint *ck = NULL;
    if (h3_checkpoint_open(native_dir(), &ck, &st) == H3_OK) {
        const h3_st_tensor *t = h3_checkpoint_find(ck, "rope.inv_freq");
        float tiny[4], file[4] = {0};
        h3_dit_rope_inv_freq(&d, tiny);
        CHECK(t && h3_st_to_f32(t, file, 4, &st) == H3_OK && memcmp(tiny, file, sizeof tiny) == 0,
              "tiny inv_freq differs from the native checkpoint's rope.inv_freq");
    }
    h3_checkpoint_close(ck);
}

typedef struct name_check {
    GHashTable *index;   /* names in the index file */
    GHashTable *planned; /* names the loader asks for */
    int missing;
} name_check;

static void collect(const char *name, int ndim, const int64_t *shape, void *user) {
    name_check *c = user;
    if (!g_hash_table_contains(c->index, name)) {
        if (c->missing++ < 5) fprintf(stderr, "  planned but not in the index: %s\n", name);
    }
    CHECK(!g_hash_table_contains(c->planned, name), "'%s' requested twice", name);
    g_hash_table_add(c->planned, g_strdup(name));
}

/* Every name the loader requests at the real config is in the real index,
 * and every index name is requested or knowingly ignored. */
static void test_official_names(const char *config_dir, const char *index_file, h3_dit_checkpoint_layout layout,
                                guint want_count) {
    h3_dit_config cfg;
    h3_status st = {0};
    CHECK(h3_dit_config_load(h3_test_data(config_dir), &cfg, &st) == H3_OK, "%s: %s", config_dir, st.message);
    JsonParser *p = json_parser_new();
    GError *err = NULL;
    if (!json_parser_load_from_file(p, h3_test_data(index_file), &err)) {
        CHECK(0, "%s: %s", index_file, err->message);
        g_error_free(err);
        g_object_unref(p);
        return;
    }
    JsonObject *map = json_object_get_object_member(json_node_get_object(json_parser_get_root(p)), "weight_map");
    name_check c = {g_hash_table_new(g_str_hash, g_str_equal), g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL), 0};
    GList *members = json_object_get_members(map);
    for (GList *m = members; m; m = m->next) g_hash_table_add(c.index, m->data);
    h3_dit_checkpoint_plan(&cfg, layout, collect, &c);
    int unused = 0, ignored = 0;
    for (GList *m = members; m; m = m->next) {
        if (g_hash_table_contains(c.planned, m->data)) continue;
        if (h3_dit_checkpoint_ignores(layout, m->data)) {
            ignored++;
            continue;
        }
        if (unused++ < 5) fprintf(stderr, "  in the index but never read: %s\n", (const char *)m->data);
    }
    guint n_index = g_hash_table_size(c.index), n_planned = g_hash_table_size(c.planned);
    printf("%s: index %u names, loader reads %u, ignores %d, missing %d, unused %d\n", index_file, n_index,
           n_planned, ignored, c.missing, unused);
    CHECK(n_index == want_count, "%s: %u names, expected %u", index_file, n_index, want_count);
    CHECK(c.missing == 0 && unused == 0 && n_planned + (guint)ignored == n_index, "%s: name mapping incomplete",
          index_file);
    g_list_free(members);
    g_hash_table_destroy(c.index);
    g_hash_table_destroy(c.planned);
    g_object_unref(p);
}

/* The tiny checkpoints: every planned name exists with the planned shape. */
typedef struct shape_check {
    h3_checkpoint *ckpt;
    int bad, n;
} shape_check;

static void check_shape(const char *name, int ndim, const int64_t *shape, void *user) {
    shape_check *s = user;
    const h3_st_tensor *t = NULL;
    h3_status st = {0};
    s->n++;
    if (h3_checkpoint_get(s->ckpt, name, ndim, shape, &t, &st) != H3_OK && s->bad++ < 5)
        fprintf(stderr, "  %s\n", st.message);
}

static void test_tiny_names(const char *dir, h3_dit_checkpoint_layout layout) {
    h3_dit_config cfg;
    h3_status st = {0};
    shape_check s = {0};
    h3_dit_checkpoint_layout detected;
    CHECK(h3_dit_config_load(dir, &cfg, &st) == H3_OK, "%s: %s", dir, st.message);
    CHECK(h3_checkpoint_open(dir, &s.ckpt, &st) == H3_OK, "%s: %s", dir, st.message);
    if (!s.ckpt) return;
    CHECK(h3_dit_detect_layout(s.ckpt, &detected, &st) == H3_OK && detected == layout, "%s: layout detection", dir);
    h3_dit_checkpoint_plan(&cfg, layout, check_shape, &s);
    size_t ignored = 0;
    for (size_t i = 0; i < h3_checkpoint_count(s.ckpt); i++)
        ignored += (size_t)h3_dit_checkpoint_ignores(layout, h3_checkpoint_at(s.ckpt, i)->name);
    printf("%s: %d planned tensors, %zu in the checkpoint (%zu ignored), %d bad\n", dir, s.n,
           h3_checkpoint_count(s.ckpt), ignored, s.bad);
    CHECK(s.bad == 0 && (size_t)s.n + ignored == h3_checkpoint_count(s.ckpt), "%s: plan does not cover the checkpoint",
          dir);
    h3_checkpoint_close(s.ckpt);
}

/* ---- errors --------------------------------------------------------------------------- */

/* A safetensors file with the tensors of ckpt, each passed through edit()
 * (rename / reshape / drop by returning 0). */
typedef int (*edit_fn)(const h3_st_tensor *t, char *name, size_t name_size, int64_t *shape);

static void write_variant(h3_checkpoint *ckpt, const char *path, edit_fn edit) {
    GString *h = g_string_new("{");
    size_t offset = 0, n = h3_checkpoint_count(ckpt);
    int first = 1;
    for (size_t i = 0; i < n; i++) {
        const h3_st_tensor *t = h3_checkpoint_at(ckpt, i);
        char name[256];
        int64_t shape[H3_ST_MAX_DIMS];
        snprintf(name, sizeof name, "%s", t->name);
        memcpy(shape, t->shape, sizeof shape);
        if (!edit(t, name, sizeof name, shape)) continue;
        g_string_append_printf(h, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", first ? "" : ",", name,
                               h3_st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) g_string_append_printf(h, "%s%lld", d ? "," : "", (long long)shape[d]);
        g_string_append_printf(h, "],\"data_offsets\":[%zu,%zu]}", offset, offset + t->nbytes);
        offset += t->nbytes;
        first = 0;
    }
    g_string_append(h, "}");
    while (h->len % 8) g_string_append_c(h, ' '); /* keep the data 8-byte aligned, as writers do */
    FILE *f = fopen(path, "wb");
    uint64_t len = h->len;
    for (int i = 0; i < 8; i++) fputc((int)((len >> (8 * i)) & 0xff), f);
    fwrite(h->str, 1, h->len, f);
    for (size_t i = 0; i < n; i++) {
        const h3_st_tensor *t = h3_checkpoint_at(ckpt, i);
        char name[256];
        int64_t shape[H3_ST_MAX_DIMS];
        snprintf(name, sizeof name, "%s", t->name);
        memcpy(shape, t->shape, sizeof shape);
        if (edit(t, name, sizeof name, shape)) fwrite(t->data, 1, t->nbytes, f);
    }
    fclose(f);
    g_string_free(h, TRUE);
}

static int drop_to_k(const h3_st_tensor *t, char *name, size_t size, int64_t *shape) {
    return strcmp(t->name, "transformer_blocks.1.attn.to_k.weight") != 0;
}

static int reshape_fc2(const h3_st_tensor *t, char *name, size_t size, int64_t *shape) {
    if (strcmp(t->name, "transformer_blocks.0.ff.net.2.weight") == 0) {
        shape[0] = t->shape[1];
        shape[1] = t->shape[0];
    }
    return 1;
}

static int reshape_native_fc1(const h3_st_tensor *t, char *name, size_t size, int64_t *shape) {
    if (strcmp(t->name, "blocks.1.mlp.fc1.weight") == 0) {
        shape[0] = t->shape[0] / 2;
        shape[1] = t->shape[1] * 2;
    }
    return 1;
}

static int add_prefix(const h3_st_tensor *t, char *name, size_t size, int64_t *shape) {
    snprintf(name, size, "model.diffusion_model.%s", t->name);
    return 1;
}

static void copy_file(const char *from, const char *to) {
    gchar *data = NULL;
    gsize len = 0;
    CHECK(g_file_get_contents(from, &data, &len, NULL), "read %s", from);
    CHECK(g_file_set_contents(to, data ? data : "", (gssize)len, NULL), "write %s", to);
    g_free(data);
}

/* Loads a variant of the tiny checkpoint of src_dir and expects an error
 * of `code` whose message names `what` and the file. */
static void expect_load_error(const char *label, const char *src_dir, edit_fn edit, h3_status_code code,
                              const char *what) {
    char *dir = g_build_filename(tmpdir, label, NULL);
    char *cfg_src = g_build_filename(src_dir, "config.json", NULL), *cfg_dst = g_build_filename(dir, "config.json", NULL);
    char *st_path = g_build_filename(dir, "model.safetensors", NULL);
    g_mkdir_with_parents(dir, 0700);
    copy_file(cfg_src, cfg_dst);
    h3_checkpoint *ck = NULL;
    h3_status st = {0};
    if (h3_checkpoint_open(src_dir, &ck, &st) == H3_OK) write_variant(ck, st_path, edit);
    h3_checkpoint_close(ck);
    h3_dit *dit = NULL;
    h3_status_code rc = h3_dit_load(backend, dir, &dit, &st);
    printf("%s: %s\n", label, st.message);
    CHECK(rc == code && dit == NULL, "%s: got %s (%s)", label, h3_status_code_name(rc), st.message);
    CHECK(strstr(st.message, what) != NULL, "%s: message '%s' lacks '%s'", label, st.message, what);
    CHECK(strstr(st.message, st_path) != NULL, "%s: message '%s' does not name %s", label, st.message, st_path);
    h3_dit_free(dit);
    g_unlink(st_path);
    g_unlink(cfg_dst);
    g_rmdir(dir);
    g_free(dir);
    g_free(cfg_src);
    g_free(cfg_dst);
    g_free(st_path);
}

static void test_errors(h3_dit *dit) {
    expect_load_error("missing_tensor", diffusers_dir(), drop_to_k, H3_ERR_NOT_FOUND,
                      "transformer_blocks.1.attn.to_k.weight");
    expect_load_error("wrong_shape", diffusers_dir(), reshape_fc2, H3_ERR_FORMAT,
                      "'transformer_blocks.0.ff.net.2.weight' has shape [96,48], expected [48,96]");
    expect_load_error("wrong_shape_native", native_dir(), reshape_native_fc1, H3_ERR_FORMAT,
                      "'blocks.1.mlp.fc1.weight' has shape [96,96], expected [192,48]");
    expect_load_error("unknown_layout", diffusers_dir(), add_prefix, H3_ERR_FORMAT,
                      "unknown transformer checkpoint layout");

    /* A config without hidden_size names the file and the key. */
    char *dir = g_build_filename(tmpdir, "bad_config", NULL);
    char *cfg = g_build_filename(dir, "config.json", NULL);
    g_mkdir_with_parents(dir, 0700);
    g_file_set_contents(cfg, "{\"num_layers\": 2, \"num_refiner_layers\": 2}", -1, NULL);
    h3_dit_config c;
    h3_status st = {0};
    CHECK(h3_dit_config_load(dir, &c, &st) == H3_ERR_FORMAT && strstr(st.message, cfg) &&
              strstr(st.message, "hidden_size"),
          "config error: '%s'", st.message);
    printf("bad config: %s\n", st.message);
    g_unlink(cfg);
    g_rmdir(dir);
    g_free(cfg);
    g_free(dir);

    /* Forward without a request, and with rows of the wrong shape. */
    if (!dit) return;
    size_t mark = h3_arena_mark(backend);
    h3_tensor v = h3_new_2d(backend, H3_F32, 5, 96), a = h3_new_2d(backend, H3_F32, 6, 32);
    float t = 0.5f;
    int32_t idx[8] = {0};
    CHECK(h3_dit_forward(dit, &v, &a, &t, 1, idx, &v, &a, &st) == H3_ERR_INVALID_ARGUMENT, "forward before begin");
    int32_t tags[2] = {1, 1};
    golden_geometry g = {.T = 2, .H_lat = 2, .W_lat = 4, .Na = 3, .L = 2};
    h3_dit_layout *l = build_layout(&g, tags);
    float text[2 * 40] = {0};
    h3_tensor tt = upload(text, 2, 40);
    if (l && h3_dit_begin(dit, l, &tt, &st) == H3_OK) {
        h3_status_code rc = h3_dit_forward(dit, &v, &a, &t, 1, idx, &v, &a, &st);
        CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "video rows"), "wrong rows: %s", st.message);
        h3_tensor bad_text = upload(text, 1, 40);
        rc = h3_dit_begin(dit, l, &bad_text, &st);
        CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "text"), "wrong text rows: %s", st.message);
    } else {
        CHECK(0, "begin: %s", st.message);
    }
    h3_dit_end(dit);
    h3_dit_layout_free(l);
    h3_arena_reset(backend, mark);
}

int main(void) {
    h3_status st = {0};
    if (h3_backend_cpu_create(2, &backend, &st) != H3_OK) {
        fprintf(stderr, "cpu backend: %s\n", st.message);
        return 1;
    }
    tmpdir = g_dir_make_tmp("h3-dit-XXXXXX", NULL);

    test_config();
    test_official_names("official/transformer", "official/transformer/diffusion_pytorch_model.safetensors.index.json",
                        H3_DIT_DIFFUSERS, 638);
    test_official_names("official/FL2VA/transformer", "official/FL2VA/transformer/model.safetensors.index.json",
                        H3_DIT_NATIVE, 535);
    /* the Ref2VA partition: the same class, config and names, its own weights */
    test_official_names("official/transformer_ref",
                        "official/transformer_ref/diffusion_pytorch_model.safetensors.index.json", H3_DIT_DIFFUSERS,
                        638);
    test_tiny_names(diffusers_dir(), H3_DIT_DIFFUSERS);
    test_tiny_names(native_dir(), H3_DIT_NATIVE);
    test_tiny_names(h3_test_data("models/tiny-h3/transformer_ref"), H3_DIT_DIFFUSERS);

    test_pairwise_span();
    test_transformer_layout("transformer_t2va");
    test_transformer_layout("transformer_fl2va");
    test_e2e_layout("e2e_t2va_3steps");
    test_e2e_layout("e2e_fl2va_3steps");
    test_patchify("e2e_t2va_3steps", 0);
    test_patchify("e2e_fl2va_3steps", 2);

    h3_dit *diffusers = load_dit(diffusers_dir(), H3_DIT_DIFFUSERS);
    h3_dit *native = load_dit(native_dir(), H3_DIT_NATIVE);
    test_transformer_forward("transformer_t2va", diffusers, native);
    test_transformer_forward("transformer_fl2va", diffusers, native);
    test_e2e_forward("e2e_t2va_3steps", diffusers);
    test_e2e_forward("e2e_fl2va_3steps", native);
    test_errors(diffusers);
    test_random_model();
    h3_dit_free(diffusers);
    h3_dit_free(native);

    g_rmdir(tmpdir);
    g_free(tmpdir);
    h3_backend_destroy(backend);
    return h3_test_finish("test_dit");
}
