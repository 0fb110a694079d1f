/* test_ref2va.c - the Ref2VA pieces of the model against the tiny-h3 Ref2VA
 * goldens:
 * - the packed layout ([text | reference blocks | target audio | target
 *   video]) of every end-to-end request and of the larger synthetic one in
 *   ref2va_layout: row tags, float64 positions, indices and the per-row
 *   timesteps of each pass, exactly;
 * - the layout's refusals of malformed references;
 * - one forward of the Ref2VA partition (transformer_ref/, its own weights)
 *   with references against golden transformer_ref, on the layout built
 *   here, 1e-4 relative L2, and the same forward with the reference rows
 *   replaced by noise (the references reach the target rows). */
#include <glib.h>
#include <json-glib/json-glib.h>
#include <stdint.h>

#include "backend/h3_backend.h"
#include "base/h3_safetensors.h"
#include "h3_test.h"
#include "h3_test_golden.h"
#include "model/h3_dit.h"
#include "model/h3_dit_layout.h"

#define LAYOUT_GOLDEN "ref2va_layout"
#define FORWARD_GOLDEN "transformer_ref"
#define TOLERANCE 1e-4

static h3_backend *backend;

/* ---- the requests' references, as their latents shape them ----------------------------
 * From each e2e_ref2va_<case>_3steps.json's normalized_references
 * (condition_latents_shape [1, C, F, H, W], audio_condition_rows_shape
 * [2·Na, 32]) and ref2va_layout.json's cases.synthetic.references. The
 * targets: 124 frames at 64x32 -> 37 latent frames of 2x4, 207 audio
 * latents. */
#define IMG(h, w) {H3_DIT_REFERENCE_IMAGE, 1, h, w, 0}
#define VID(f, h, w, na) {H3_DIT_REFERENCE_VIDEO, f, h, w, na}
#define AUD(na) {H3_DIT_REFERENCE_AUDIO, 0, 0, 0, na}

typedef struct ref_case {
    const char *name;
    int n;
    h3_dit_reference refs[H3_DIT_MAX_REFERENCES];
} ref_case;

static const ref_case cases[] = {
    {"image", 1, {IMG(4, 6)}},
    {"video", 1, {VID(7, 2, 4, 37)}},
    {"audio", 2, {IMG(4, 6), AUD(51)}},
    {"mixed", 4, {IMG(4, 6), VID(7, 2, 4, 0), AUD(51), IMG(6, 4)}},
    {"synthetic", 4, {IMG(4, 6), VID(12, 2, 4, 45), AUD(50), IMG(6, 4)}},
};

static h3_dit_layout *build_case(const ref_case *c, const int32_t *text_tags, int L) {
    h3_dit_layout_params p = {.text_token_tags = text_tags, .num_text = L, .num_latent_frames = 37,
                              .latent_height = 2, .latent_width = 4, .num_audio_latents = 207, .patch_t = 1,
                              .patch_h = 2, .patch_w = 2, .num_references = c->n};
    memcpy(p.references, c->refs, sizeof p.references);
    h3_dit_layout *l = NULL;
    h3_status st = {0};
    CHECK(h3_dit_layout_build(&p, &l, &st) == H3_OK, "%s: layout build: %s", c->name, st.message);
    return l;
}

static int same_i32(const int32_t *a, const int32_t *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* position_ids, token_tags and the indices of case c, exactly. */
static void check_layout(const char *c, const h3_dit_layout *l, h3_st_file *f) {
    char name[128];
#define NAME(s) (snprintf(name, sizeof name, "%s%s%s", c, *c ? "." : "", s), name)
    const h3_st_tensor *t = h3_st_find(f, NAME("position_ids"));
    CHECK(t && t->dtype == H3_ST_F64 && t->numel == 3 * l->seq_len, "%s: position_ids [%lld] for %lld rows", c,
          t ? (long long)t->numel : -1LL, (long long)l->seq_len);
    if (t && t->dtype == H3_ST_F64 && t->numel == 3 * l->seq_len) {
        int64_t mismatch = 0, first = -1;
        for (int64_t i = 0; i < t->numel; i++) {
            double g;
            memcpy(&g, (const char *)t->data + i * 8, 8);
            if (g != l->position_ids[i] && first < 0) first = i;
            mismatch += g != l->position_ids[i];
        }
        if (first >= 0) {
            double g;
            memcpy(&g, (const char *)t->data + first * 8, 8);
            printf("%s: first position mismatch at row %lld axis %lld: %.17g vs golden %.17g\n", c,
                   (long long)(first / 3), (long long)(first % 3), l->position_ids[first], g);
        }
        CHECK(mismatch == 0, "%s: %lld of %lld float64 positions differ", c, (long long)mismatch,
              (long long)t->numel);
    }
    struct { const char *name; const int32_t *mine; int64_t n; } ints[] = {
        {"token_tags", l->token_tags, l->seq_len},
        {"video_indices", l->video_indices, l->num_video_rows},
        {"audio_indices", l->audio_indices, l->num_audio_rows},
        {"text_indices", l->text_indices, l->num_text},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int64_t n = 0;
        int32_t *g = golden_i32(f, NAME(ints[i].name), &n);
        CHECK(g && n == ints[i].n && same_i32(g, ints[i].mine, n), "%s: %s differs (%lld vs %lld values)", c,
              ints[i].name, (long long)n, (long long)ints[i].n);
        free(g);
    }
#undef NAME
}

/* One pass's row timesteps against <prefix>timestep, timestep_indices and,
 * when the golden has them (with_rows), row_timesteps. */
static void check_timesteps(const char *label, const h3_dit_layout *l, float tv, float ta, h3_st_file *f,
                            const char *prefix, int with_rows) {
    char n1[128], n2[128], n3[128];
    snprintf(n1, sizeof n1, "%stimestep", prefix);
    snprintf(n2, sizeof n2, "%stimestep_indices", prefix);
    snprintf(n3, sizeof n3, "%srow_timesteps", prefix);
    float ts[H3_DIT_MAX_TIMESTEPS];
    int n_t = 0;
    int32_t *idx = malloc((size_t)l->seq_len * sizeof *idx);
    h3_status st = {0};
    CHECK(h3_dit_layout_timesteps(l, tv, ta, ts, &n_t, idx, &st) == H3_OK, "%s: %s", label, st.message);
    int64_t gn = 0, gi = 0, gr = 0;
    float *gts = golden_f32(f, n1, &gn), *grow = with_rows ? golden_f32(f, n3, &gr) : NULL;
    int32_t *gidx = golden_i32(f, n2, &gi);
    int ok = gts && gn == n_t && gidx && gi == l->seq_len;
    for (int i = 0; ok && i < n_t; i++) ok = gts[i] == ts[i];
    CHECK(ok && same_i32(gidx, idx, gi), "%s: timesteps / indices differ (%d values vs %lld)", label, n_t,
          (long long)gn);
    if (with_rows) {
        int64_t bad = 0;
        ok = ok && grow && gr == l->seq_len;
        for (int64_t s = 0; ok && s < l->seq_len; s++) bad += ts[idx[s]] != grow[s];
        CHECK(ok && bad == 0, "%s: %lld row timesteps differ", label, (long long)bad);
    }
    free(idx), free(gts), free(grow), free(gidx);
}

static void test_layout_case(const ref_case *c, h3_st_file *f, JsonObject *cases_json) {
    char name[128];
    int64_t L = 0;
    snprintf(name, sizeof name, "%s.text_token_tags", c->name);
    int32_t *tags = golden_i32(f, name, &L);
    JsonObject *cj = cases_json ? json_object_get_object_member(cases_json, c->name) : NULL;
    h3_dit_layout *l = tags && cj ? build_case(c, tags, (int)L) : NULL;
    if (l) {
        CHECK(l->seq_len == json_object_get_int_member(cj, "sequence_length") &&
                  l->num_condition_rows == json_object_get_int_member(cj, "num_condition_video_rows") &&
                  l->num_condition_audio_rows == json_object_get_int_member(cj, "num_condition_audio_rows"),
              "%s: %lld rows, %lld reference video rows, %lld reference audio rows", c->name, (long long)l->seq_len,
              (long long)l->num_condition_rows, (long long)l->num_condition_audio_rows);
        check_layout(c->name, l, f);
        if (json_object_has_member(cj, "t_video")) { /* synthetic: one set of timesteps */
            snprintf(name, sizeof name, "%s.", c->name);
            check_timesteps(c->name, l, (float)json_object_get_double_member(cj, "t_video"),
                            (float)json_object_get_double_member(cj, "t_audio"), f, name, 1);
        } else {
            JsonArray *tv = json_object_get_array_member(cj, "timesteps");
            JsonArray *ta = json_object_get_array_member(cj, "audio_timesteps");
            for (guint step = 0; step < json_array_get_length(tv); step++) {
                char label[64];
                snprintf(name, sizeof name, "%s.step%u.", c->name, step);
                snprintf(label, sizeof label, "%s pass %u", c->name, step);
                check_timesteps(label, l, (float)json_array_get_double_element(tv, step),
                                (float)json_array_get_double_element(ta, step), f, name, 1);
            }
        }
        printf("ref2va layout %s: %lld rows (%lld text, %lld + %lld reference), checked\n", c->name,
               (long long)l->seq_len, (long long)l->num_text, (long long)l->num_condition_rows,
               (long long)l->num_condition_audio_rows);
    }
    h3_dit_layout_free(l);
    free(tags);
}

static void test_layouts(void) {
    h3_st_file *f = golden_tiny(LAYOUT_GOLDEN);
    JsonParser *p = golden_json(LAYOUT_GOLDEN);
    JsonObject *cj = golden_json_object(p, "cases");
    CHECK(f && cj, "ref2va_layout golden");
    for (size_t i = 0; f && cj && i < sizeof cases / sizeof cases[0]; i++) test_layout_case(&cases[i], f, cj);
    h3_st_close(f);
    g_object_unref(p);
}

/* Malformed references are refused, naming the reference. */
static void expect_refused(const char *label, h3_dit_reference r, int with_keyframe, const char *needle) {
    int32_t tags[2] = {1, 1};
    h3_dit_layout_params p = {.text_token_tags = tags, .num_text = 2, .num_latent_frames = 7, .latent_height = 2,
                              .latent_width = 4, .num_audio_latents = 12, .num_references = 1,
                              .num_keyframes = with_keyframe};
    p.references[0] = r;
    h3_dit_layout *l = (h3_dit_layout *)1;
    h3_status st = {0};
    h3_status_code rc = h3_dit_layout_build(&p, &l, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && l == NULL && strstr(st.message, needle), "%s: rc %d '%s'", label, rc,
          st.message);
}

static void test_refusals(void) {
    expect_refused("image with 2 frames", (h3_dit_reference){H3_DIT_REFERENCE_IMAGE, 2, 4, 6, 0}, 0,
                   "image reference 1");
    expect_refused("odd image grid", (h3_dit_reference)IMG(3, 6), 0, "latent grid 3x6");
    expect_refused("image with audio", (h3_dit_reference){H3_DIT_REFERENCE_IMAGE, 1, 4, 6, 5}, 0, "audio latents");
    expect_refused("empty audio", (h3_dit_reference)AUD(0), 0, "audio reference 1");
    expect_refused("video of 0 frames", (h3_dit_reference)VID(0, 2, 4, 3), 0, "video reference 1");
    expect_refused("bad kind", (h3_dit_reference){(h3_dit_reference_kind)7, 1, 2, 2, 0}, 0, "kind 7");
    expect_refused("references and keyframes", (h3_dit_reference)IMG(4, 6), 1, "keyframes");
    /* a silent video and an audio clip alone build */
    int32_t tags[1] = {1};
    h3_dit_layout_params p = {.text_token_tags = tags, .num_text = 1, .num_latent_frames = 7, .latent_height = 2,
                              .latent_width = 4, .num_audio_latents = 12, .num_references = 2,
                              .references = {VID(2, 2, 4, 0), AUD(3)}};
    h3_dit_layout *l = NULL;
    h3_status st = {0};
    CHECK(h3_dit_layout_build(&p, &l, &st) == H3_OK && l && l->num_condition_rows == 4 &&
              l->num_condition_audio_rows == 6 && l->audio_start == 1 + 4 + 6 && l->num_audio_rows == 6 + 24,
          "silent video + audio: %s", st.message);
    h3_dit_layout_free(l);
}

/* ---- the transformer_ref forward ------------------------------------------------------ */

static h3_tensor upload(const float *host, int64_t rows, int64_t cols) {
    h3_tensor t = h3_new_2d(backend, H3_F32, rows, cols);
    h3_status st = {0};
    CHECK(t.data && h3_tensor_upload_f32(backend, &t, host, &st) == H3_OK, "upload: %s", st.message);
    return t;
}

/* One forward on the golden's inputs (prefix "" or "perturbed."), compared
 * with its outputs; *video / *audio: the velocities (caller frees). */
static void forward(h3_dit *dit, const h3_dit_layout *l, h3_st_file *f, const char *prefix, float **video,
                    float **audio) {
    char name[128];
#define NAME(s) (snprintf(name, sizeof name, "%s%s", prefix, s), name)
    const h3_dit_config *c = h3_dit_get_config(dit);
    int64_t vf = (int64_t)c->in_channels * c->patch_h * c->patch_w, af = c->audio_in_channels, n_t = 0, n_idx = 0;
    float *text = golden_f32(f, "encoder_hidden_states", NULL);
    float *v_in = golden_f32(f, NAME("hidden_states"), NULL), *a_in = golden_f32(f, NAME("audio_hidden_states"), NULL);
    float *ts = golden_f32(f, "timestep", &n_t);
    int32_t *idx = golden_i32(f, "timestep_indices", &n_idx);
    float *gv = golden_f32(f, NAME("sample"), NULL), *ga = golden_f32(f, NAME("audio_sample"), NULL);
    *video = *audio = NULL;
    size_t mark = h3_arena_mark(backend);
    if (text && v_in && a_in && ts && idx && gv && ga && n_idx == l->seq_len) {
        h3_status st = {0};
        h3_tensor t = upload(text, l->num_text, c->text_dim);
        h3_tensor v = upload(v_in, l->num_video_rows, vf), a = upload(a_in, l->num_audio_rows, af);
        h3_tensor vv = h3_new_2d(backend, H3_F32, l->num_video_rows, vf);
        h3_tensor av = h3_new_2d(backend, H3_F32, l->num_audio_rows, af);
        h3_status_code rc = h3_dit_begin(dit, l, &t, &st);
        if (rc == H3_OK) rc = h3_dit_forward(dit, &v, &a, ts, (int)n_t, idx, &vv, &av, &st);
        CHECK(rc == H3_OK, "%sforward: %s", prefix, st.message);
        if (rc == H3_OK) {
            *video = malloc((size_t)(l->num_video_rows * vf) * sizeof(float));
            *audio = malloc((size_t)(l->num_audio_rows * af) * sizeof(float));
            h3_tensor_download_f32(backend, &vv, *video, NULL);
            h3_tensor_download_f32(backend, &av, *audio, NULL);
            double ev = h3_test_rel_l2(*video, gv, (size_t)(l->num_video_rows * vf));
            double ea = h3_test_rel_l2(*audio, ga, (size_t)(l->num_audio_rows * af));
            printf("transformer_ref %sforward: video rel L2 %.3e, audio rel L2 %.3e\n", prefix, ev, ea);
            CHECK(ev <= TOLERANCE, "%s: video velocity rel L2 %.3e", prefix, ev);
            CHECK(ea <= TOLERANCE, "%s: audio velocity rel L2 %.3e", prefix, ea);
        }
        h3_dit_end(dit);
    }
    h3_arena_reset(backend, mark);
    free(text), free(v_in), free(a_in), free(ts), free(idx), free(gv), free(ga);
#undef NAME
}

/* The golden is pass 1 of the mixed request: its layout is the mixed case's,
 * its timesteps those of that pass. */
static void test_forward(void) {
    h3_st_file *f = golden_tiny(FORWARD_GOLDEN);
    const ref_case *mixed = &cases[3];
    int32_t *tags = golden_i32(f, "token_tags", NULL), *text_idx = golden_i32(f, "text_indices", NULL);
    int64_t L = 0;
    int32_t *text_tags = NULL;
    if (tags && text_idx && h3_st_find(f, "text_indices")) {
        L = h3_st_find(f, "text_indices")->numel;
        text_tags = malloc((size_t)L * sizeof *text_tags);
        for (int64_t i = 0; i < L; i++) text_tags[i] = tags[text_idx[i]];
    }
    h3_dit_layout *l = text_tags ? build_case(mixed, text_tags, (int)L) : NULL;
    h3_dit *dit = NULL;
    h3_status st = {0};
    h3_status_code rc = h3_dit_load(backend, h3_test_data("models/tiny-h3/transformer_ref"), &dit, &st);
    CHECK(rc == H3_OK, "load transformer_ref: %s", st.message);
    if (l && dit) {
        check_layout("", l, f); /* the golden's own position_ids, tags and indices */
        /* pass 1 of the mixed request (ref2va_layout.json cases.mixed.timesteps[1], audio_timesteps[1]) */
        check_timesteps("transformer_ref", l, 0.07692307233810425f, 0.25f, f, "", 0);
        float *v = NULL, *a = NULL, *pv = NULL, *pa = NULL;
        forward(dit, l, f, "", &v, &a);
        forward(dit, l, f, "perturbed.", &pv, &pa);
        if (v && pv) { /* noise in the reference rows changes the target rows */
            int64_t ref_rows = l->num_condition_rows * 96, n = l->num_video_rows * 96;
            double d = h3_test_rel_l2(pv + ref_rows, v + ref_rows, (size_t)(n - ref_rows));
            printf("transformer_ref: reference rows replaced by noise move the target video by rel L2 %.3e\n", d);
            CHECK(d > 1e-3, "the references do not reach the target video (rel L2 %.3e)", d);
        }
        free(v), free(a), free(pv), free(pa);
    }
    h3_dit_free(dit);
    h3_dit_layout_free(l);
    free(tags), free(text_idx), free(text_tags);
    h3_st_close(f);
}

int main(void) {
    h3_status st = {0};
    if (h3_backend_cpu_create(2, &backend, &st) != H3_OK) {
        fprintf(stderr, "cpu backend: %s\n", st.message);
        return 1;
    }
    test_layouts();
    test_refusals();
    test_forward();
    h3_backend_destroy(backend);
    return h3_test_finish("test_ref2va");
}
