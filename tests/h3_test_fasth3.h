/* h3_test_fasth3.h - golden helpers shared by test_adapter.c, test_vsa.c and
 * test_fasth3.c: reading golden tensors, rebuilding a transformer golden's
 * layout and running one DiT forward on its inputs. */
#ifndef H3_TEST_FASTH3_H
#define H3_TEST_FASTH3_H

#include <glib.h>
#include <json-glib/json-glib.h>
#include <stdint.h>

#include "backend/h3_backend.h"
#include "model/h3_dit.h"
#include "model/h3_dit_layout.h"
#include "base/h3_safetensors.h"
#include "h3_test.h"
#include "h3_test_golden.h"

#define FASTH3_DENSE_ADAPTER "adapters/tiny-h3/dense-datafree"
#define FASTH3_VSA_ADAPTER "adapters/tiny-h3/vsa-datafree"
#define FASTH3_DIFFUSERS_DIR "models/tiny-h3/transformer"
#define FASTH3_NATIVE_DIR "models/tiny-h3-native/FL2VA/transformer"


/* The layout of a transformer-style golden: "layout" {T, H_lat, W_lat, Na,
 * L, anchors} in the json, text tags = token_tags[text_indices]. */
static inline h3_dit_layout *golden_layout(JsonParser *p, h3_st_file *f) {
    JsonObject *lo = golden_json_object(p, "layout");
    CHECK(lo != NULL, "golden has no layout");
    if (!lo) return NULL;
    h3_dit_layout_params lp = {0};
    lp.num_latent_frames = (int)json_object_get_int_member(lo, "T");
    lp.latent_height = (int)json_object_get_int_member(lo, "H_lat");
    lp.latent_width = (int)json_object_get_int_member(lo, "W_lat");
    lp.num_audio_latents = (int)json_object_get_int_member(lo, "Na");
    lp.num_text = (int)json_object_get_int_member(lo, "L");
    lp.patch_t = 1, lp.patch_h = 2, lp.patch_w = 2;
    JsonArray *a = json_object_get_array_member(lo, "anchors");
    lp.num_keyframes = a ? (int)json_array_get_length(a) : 0;
    for (int i = 0; i < lp.num_keyframes && i < H3_DIT_MAX_KEYFRAMES; i++)
        lp.anchors[i] = strcmp(json_array_get_string_element(a, (guint)i), "last") == 0 ? H3_ANCHOR_LAST : H3_ANCHOR_FIRST;
    int32_t *tags = golden_i32(f, "token_tags", NULL), *text = golden_i32(f, "text_indices", NULL);
    int32_t *text_tags = malloc((size_t)lp.num_text * sizeof *text_tags + 4);
    for (int i = 0; tags && text && i < lp.num_text; i++) text_tags[i] = tags[text[i]];
    lp.text_token_tags = text_tags;
    h3_dit_layout *l = NULL;
    h3_status st = {0};
    CHECK(h3_dit_layout_build(&lp, &l, &st) == H3_OK, "layout: %s", st.message);
    free(tags);
    free(text);
    free(text_tags);
    return l;
}

/* One forward on a transformer golden's inputs (hidden_states,
 * audio_hidden_states, encoder_hidden_states, timestep, timestep_indices);
 * returns the velocities (caller frees) or leaves them NULL on failure. */
static inline void golden_forward(h3_backend *b, h3_dit *dit, h3_st_file *f, const h3_dit_layout *l, float **video_out,
                                  float **audio_out) {
    const h3_dit_config *c = h3_dit_get_config(dit);
    int64_t vf = (int64_t)c->in_channels * c->patch_h * c->patch_w, af = c->audio_in_channels, n_t = 0, n_idx = 0;
    *video_out = *audio_out = NULL;
    size_t mark = h3_arena_mark(b);
    float *text = golden_f32(f, "encoder_hidden_states", NULL);
    float *video = golden_f32(f, "hidden_states", NULL);
    float *audio = golden_f32(f, "audio_hidden_states", NULL);
    float *ts = golden_f32(f, "timestep", &n_t);
    int32_t *idx = golden_i32(f, "timestep_indices", &n_idx);
    if (text && video && audio && ts && idx && n_idx == l->seq_len) {
        h3_status st = {0};
        h3_tensor t = h3_new_2d(b, H3_F32, l->num_text, c->text_dim);
        h3_tensor v = h3_new_2d(b, H3_F32, l->num_video_rows, vf), a = h3_new_2d(b, H3_F32, l->num_audio_rows, af);
        h3_tensor vv = h3_new_2d(b, H3_F32, l->num_video_rows, vf), av = h3_new_2d(b, H3_F32, l->num_audio_rows, af);
        h3_status_code rc = h3_backend_check(b, &st);
        if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &t, text, &st);
        if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &v, video, &st);
        if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &a, audio, &st);
        if (rc == H3_OK) rc = h3_dit_begin(dit, l, &t, &st);
        if (rc == H3_OK) rc = h3_dit_forward(dit, &v, &a, ts, (int)n_t, idx, &vv, &av, &st);
        CHECK(rc == H3_OK, "forward: %s", st.message);
        if (rc == H3_OK) {
            *video_out = malloc((size_t)(l->num_video_rows * vf) * sizeof(float));
            *audio_out = malloc((size_t)(l->num_audio_rows * af) * sizeof(float));
            CHECK(h3_tensor_download_f32(b, &vv, *video_out, &st) == H3_OK, "download: %s", st.message);
            CHECK(h3_tensor_download_f32(b, &av, *audio_out, &st) == H3_OK, "download: %s", st.message);
        }
        h3_dit_end(dit);
    }
    h3_arena_reset(b, mark);
    free(text);
    free(video);
    free(audio);
    free(ts);
    free(idx);
}

/* Relative L2 of `got` against golden tensor `name`, printed with a label. */
static inline double golden_compare(h3_st_file *f, const char *name, const float *got, size_t n, const char *label) {
    int64_t gn = 0;
    float *want = golden_f32(f, name, &gn);
    double r = INFINITY;
    if (want && got && (size_t)gn == n) r = h3_test_rel_l2(got, want, n);
    else CHECK(0, "%s: %s has %lld values, got %zu", label, name, (long long)gn, n);
    printf("%s: %s rel L2 %.3e\n", label, name, r);
    free(want);
    return r;
}

#endif
