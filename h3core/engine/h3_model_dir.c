/* h3_model_dir.c - the model directory: the default one, the layout rule
 * (a diffusers root, or a native FL2VA/ folder given itself or its parent)
 * and the components it resolves to, with the scheduler shifts and the
 * conditioner's tap layer. Read by open (h3_engine.c) and preflight
 * (h3_preflight.c); it calls no other engine/ file. */
#include "engine/h3_engine_impl.h"

#include <glib.h>

#include "base/h3_config.h"

/* The text encoder layer the conditioner taps (see h3_engine_resolve_layout). */
#define H3_DEFAULT_TEXT_LAYER 50

static gpointer find_default_model_dir(gpointer unused) {
    (void)unused;
    const char *env = g_getenv("H3_DEFAULT_MODEL_DIR");
    if (env && *env) return g_strdup(env);
#ifdef H3_DATADIR
    char *installed = g_build_filename(H3_DATADIR, "tiny-h3", NULL);
    if (g_file_test(installed, G_FILE_TEST_IS_DIR)) return installed;
    g_free(installed);
#endif
#ifdef H3_BUILD_MODEL_DIR
    return g_strdup(H3_BUILD_MODEL_DIR);
#else
    return g_strdup("tiny-h3");
#endif
}

/* Resolved once per process (elements in several pipelines may ask at the
 * same time, hence GOnce); the string lives as long as the process. */
const char *h3_default_model_dir(void) {
    static GOnce once = G_ONCE_INIT;
    return g_once(&once, find_default_model_dir, NULL);
}

static int is_dir(const char *base, const char *sub) {
    char *p = g_build_filename(base, sub, NULL);
    int r = g_file_test(p, G_FILE_TEST_IS_DIR);
    g_free(p);
    return r;
}

static int is_file(const char *base, const char *sub) {
    char *p = g_build_filename(base, sub, NULL);
    int r = g_file_test(p, G_FILE_TEST_IS_REGULAR);
    g_free(p);
    return r;
}

static h3_status_code read_shift(const char *dir, const char *sub, float *shift, h3_status *status) {
    char *p = g_build_filename(dir, sub, "scheduler_config.json", NULL);
    h3_config *c;
    h3_status_code rc = h3_config_load(p, &c, status);
    g_free(p);
    if (rc != H3_OK) return rc;
    double v = *shift;
    rc = h3_config_double_range_or(c, "shift", H3_SHIFT_MIN, H3_SHIFT_MAX, &v, status);
    h3_config_free(c);
    *shift = (float)v;
    return rc;
}

h3_status_code h3_engine_model_root(const char *dir, char **out, h3_status *status) {
    *out = NULL;
    if (!g_file_test(dir, G_FILE_TEST_IS_DIR))
        return h3_fail(status, H3_ERR_NOT_FOUND, "model directory '%s' does not exist", dir);
    char *root = g_strdup(dir);
    if (!is_file(root, "model_index.json") && !is_file(root, "modular_model_index.json") && is_dir(root, "FL2VA")) {
        g_free(root);
        root = g_build_filename(dir, "FL2VA", NULL);
    }
    if (!is_dir(root, "transformer") || (!is_dir(root, "vae") && !is_dir(root, "video_vae"))) {
        g_free(root);
        return h3_fail(status, H3_ERR_NOT_FOUND,
                       "'%s' is not a MiniMax-H3 model: expected model_index.json with transformer/ and vae/ "
                       "(diffusers layout) or FL2VA/ with transformer/ and video_vae/ (native layout)", dir);
    }
    *out = root;
    return H3_OK;
}

/* Finds the components of a diffusers-layout root (model_index.json +
 * transformer/, vae/, ...) or of a native FL2VA/ directory. */
h3_status_code h3_engine_resolve_layout(h3_engine *e, const char *dir, h3_status *status) {
    char *root;
    h3_status_code rc = h3_engine_model_root(dir, &root, status);
    if (rc != H3_OK) return rc;
    e->model_dir = root;
    e->video_shift = H3_VIDEO_SHIFT;
    e->audio_shift = H3_AUDIO_SHIFT;
    if (is_dir(root, "vae")) {
        e->native_layout = 0;
        e->vae_dir = g_build_filename(root, "vae", NULL);
        if (is_dir(root, "scheduler")) rc = read_shift(root, "scheduler", &e->video_shift, status);
        if (rc == H3_OK && is_dir(root, "audio_scheduler")) rc = read_shift(root, "audio_scheduler", &e->audio_shift, status);
    } else { /* video_vae/: h3_engine_model_root checked it */
        e->native_layout = 1;
        e->vae_dir = g_build_filename(root, "video_vae", NULL);
        char *mi = g_build_filename(root, "model_index.json", NULL);
        h3_config *c;
        /* optional (the release's FL2VA/ has it), but one that is there is read or refused */
        if (g_file_test(mi, G_FILE_TEST_EXISTS) && (rc = h3_config_load(mi, &c, status)) == H3_OK) {
            double v = e->video_shift, a = e->audio_shift;
            rc = h3_config_double_range_or(c, "_minimax_h3.sigma_shift_scales.video", H3_SHIFT_MIN, H3_SHIFT_MAX, &v,
                                           status);
            if (rc == H3_OK)
                rc = h3_config_double_range_or(c, "_minimax_h3.sigma_shift_scales.audio", H3_SHIFT_MIN, H3_SHIFT_MAX,
                                               &a, status);
            e->video_shift = (float)v;
            e->audio_shift = (float)a;
            h3_config_free(c);
        }
        g_free(mi);
    }
    if (rc != H3_OK) return rc;
    e->transformer_dir = g_build_filename(root, "transformer", NULL);
    e->audio_vae_dir = g_build_filename(root, "audio_vae", NULL);
    e->text_encoder_dir = g_build_filename(root, "text_encoder", NULL);
    e->tokenizer_dir = g_build_filename(root, is_dir(root, "tokenizer") ? "tokenizer" : "processor", NULL);
    const char *need[] = {e->audio_vae_dir, e->text_encoder_dir, e->tokenizer_dir};
    for (size_t i = 0; i < G_N_ELEMENTS(need); i++)
        if (!g_file_test(need[i], G_FILE_TEST_IS_DIR))
            return h3_fail(status, H3_ERR_NOT_FOUND, "model '%s' lacks the component directory '%s'", dir, need[i]);

    /* The conditioner tap: 50 for the release, which records it nowhere;
     * test models carry it in golden_meta.json. */
    e->text_layer = H3_DEFAULT_TEXT_LAYER;
    char *meta = g_build_filename(root, "golden_meta.json", NULL);
    if (g_file_test(meta, G_FILE_TEST_IS_REGULAR)) {
        h3_config *c;
        rc = h3_config_load(meta, &c, status);
        if (rc == H3_OK) {
            /* Ranged before the narrowing: 4294967297 used to become layer 1. */
            int64_t layer = e->text_layer;
            rc = h3_config_int_range_or(c, "text_encoder_layer", 0, H3_TEXT_ENCODER_MAX_LAYERS, &layer, status);
            e->text_layer = (int)layer;
            h3_config_free(c);
        }
    }
    g_free(meta);
    return rc;
}
