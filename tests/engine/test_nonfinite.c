/* test_nonfinite.c - NaN and Inf never become media (issue 14, item 3): a
 * non-finite weight in any component (or in a FastH3 adapter) is refused at
 * open naming its file and tensor; finite weights that overflow are caught
 * at the stage whose output went non-finite (text encoder, a denoising step,
 * the audio decode, a video window), before anything of it is emitted; and
 * the engine on a sound model still works afterwards. */
#include <glib.h>
#include <math.h>
#include <stdint.h>

#include "h3.h"
#include "h3_test.h"
#include "h3_test_engine.h"
#include "h3_test_capture.h"
#include "h3_test_model.h"

#define TINY "models/tiny-h3"

static h3_request small_request(void) { return h3_test_small_request("a red fox runs through fresh snow", 2); }

static h3_status_code open_engine(const char *dir, const char *adapter, h3_engine **e, h3_status *st) {
    return h3_test_open_cpu(dir, NULL, adapter, 2, e, st);
}

/* One component's weight set to v in a copy of the tiny model: the open
 * fails with H3_ERR_NONFINITE naming the file and the tensor. */
static void test_weight(const char *file, const char *part, float v) {
    char *dir = h3_test_copy_data(TINY);
    CHECK(dir != NULL, "copy of the tiny model");
    if (!dir) return;
    char *name = h3_test_poison_part(dir, file, part, v, 3);
    CHECK(name != NULL, "poison %s in %s", part, file);
    h3_engine *e = NULL;
    h3_status st = {0};
    h3_status_code rc = name ? open_engine(dir, NULL, &e, &st) : H3_ERR_INTERNAL;
    char *want_file = g_path_get_dirname(file);
    CHECK(rc == H3_ERR_NONFINITE && !e && name && strstr(st.message, name) && strstr(st.message, want_file),
          "%s '%s' = %g: rc %d '%s'", file, name ? name : "?", (double)v, rc, st.message);
    printf("%s = %g: %s\n", name ? name : "?", (double)v, st.message);
    h3_engine_close(e);
    g_free(want_file);
    g_free(name);
    h3_test_remove_tree(dir);
    g_free(dir);
}

/* A NaN in a FastH3 adapter poisons the weights it is fused into: refused
 * at open like a NaN in the transformer's own file, with the adapter named. */
static void test_adapter(void) {
    char *dir = h3_test_copy_data("adapters/tiny-h3/dense-datafree");
    CHECK(dir != NULL, "copy of the dense adapter");
    if (!dir) return;
    char *name = h3_test_poison_part(dir, "adapter_model.safetensors", "proj_out.diff", NAN, 2);
    CHECK(name != NULL, "poison the adapter");
    h3_engine *e = NULL;
    h3_status st = {0};
    h3_status_code rc = name ? open_engine(h3_test_data(TINY), dir, &e, &st) : H3_ERR_INTERNAL;
    CHECK(rc == H3_ERR_NONFINITE && !e && strstr(st.message, "proj_out") && strstr(st.message, "adapter"),
          "NaN adapter: rc %d '%s'", rc, st.message);
    printf("NaN adapter: %s\n", st.message);
    h3_engine_close(e);
    g_free(name);
    h3_test_remove_tree(dir);
    g_free(dir);
}

/* Finite weights large enough to overflow: the load check passes them, and
 * the stage whose output goes non-finite ends the request with an error
 * naming it, with no frame emitted (and no sample when the audio is at
 * fault or comes after). */
static void test_stage(const char *file, const char *part, const char *stage, int want_samples) {
    char *dir = h3_test_copy_data(TINY);
    CHECK(dir != NULL, "copy of the tiny model");
    if (!dir) return;
    char *name = h3_test_poison_part(dir, file, part, 3.0e38f, 1 << 20);
    h3_engine *e = NULL;
    h3_status st = {0};
    h3_status_code rc = name ? open_engine(dir, NULL, &e, &st) : H3_ERR_INTERNAL;
    CHECK(rc == H3_OK, "open with %s = 3e38: %s", part, st.message);
    if (rc == H3_OK) {
        h3_request r = small_request();
        h3_test_capture c = {0};
        rc = h3_test_generate(e, &r, &c, NULL, &st);
        CHECK(rc == H3_ERR_NONFINITE && strstr(st.message, stage) && c.frames == 0 && c.done == 0,
              "%s = 3e38: rc %d, %d frames, '%s' (want the stage '%s')", name, rc, c.frames, st.message, stage);
        CHECK(want_samples ? c.samples > 0 : c.samples == 0, "%s: %lld samples emitted", stage, (long long)c.samples);
        for (int64_t i = 0; i < 2 * c.samples; i++)
            if (!(c.audio[i] >= -1.0f && c.audio[i] <= 1.0f)) {
                CHECK(0, "%s: sample %lld is %g", stage, (long long)i, (double)c.audio[i]);
                break;
            }
        printf("%s = 3e38: %s\n", name, st.message);
        h3_test_capture_free(&c);
    }
    h3_engine_close(e);
    g_free(name);
    h3_test_remove_tree(dir);
    g_free(dir);
}

/* After all of it, the sound model still generates finite media. */
static void test_sound_model(void) {
    h3_engine *e = NULL;
    h3_status st = {0};
    CHECK(open_engine(h3_test_data(TINY), NULL, &e, &st) == H3_OK, "open: %s", st.message);
    if (!e) return;
    h3_request r = small_request();
    h3_test_capture c = {0};
    CHECK(h3_test_generate(e, &r, &c, NULL, &st) == H3_OK && c.frames == c.plan.num_frames, "generate: %s",
          st.message);
    h3_test_capture_free(&c);
    h3_engine_close(e);
}

int main(void) {
    test_weight("text_encoder/model.safetensors", "layers.0.mlp.down_proj", NAN);
    test_weight("transformer/diffusion_pytorch_model.safetensors", "proj_out.weight", NAN);
    test_weight("transformer/diffusion_pytorch_model.safetensors", "audio_proj_in.bias", INFINITY);
    test_weight("vae/diffusion_pytorch_model.safetensors", "decoder.proj_out.weight", NAN);
    test_weight("audio_vae/diffusion_pytorch_model.safetensors", "dec_in_proj.weight", -INFINITY);
    test_adapter();
    test_stage("text_encoder/model.safetensors", "layers.0.mlp.down_proj", "text encoder", 0);
    test_stage("transformer/diffusion_pytorch_model.safetensors", "proj_out.weight", "denoising step 1/2", 0);
    test_stage("audio_vae/diffusion_pytorch_model.safetensors", "dec_in_proj.weight", "audio decode", 0);
    test_stage("vae/diffusion_pytorch_model.safetensors", "decoder.proj_out.weight", "video decode, window 1", 1);
    test_sound_model();
    return h3_test_finish("test_nonfinite");
}
