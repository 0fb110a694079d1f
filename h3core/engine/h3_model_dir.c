/* h3_model_dir.c - the model directory: the default one, the layout rule
 * (a diffusers root, or a native FL2VA/ folder given itself or its parent)
 * and the components it resolves to, with the scheduler shifts and the
 * conditioner's tap layer. Read by open (h3_engine.c) and preflight
 * (h3_preflight.c); it calls no other engine/ file. */
#include "engine/h3_engine_impl.h"

#include <errno.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "base/h3_config.h"
#include "base/h3_file.h"

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

static h3_status_code check_component(const char *root, const char *path, h3_status *status);

static h3_status_code read_shift(const char *dir, const char *sub, float *shift, h3_status *status) {
    char *folder = g_build_filename(dir, sub, NULL);
    h3_status_code rc = check_component(dir, folder, status);
    g_free(folder);
    if (rc != H3_OK) return rc;
    char *p = g_build_filename(dir, sub, "scheduler_config.json", NULL);
    h3_config *c;
    rc = h3_config_load(p, &c, status);
    g_free(p);
    if (rc != H3_OK) return rc;
    double v = *shift;
    rc = h3_config_double_range_or(c, "shift", H3_SHIFT_MIN, H3_SHIFT_MAX, &v, status);
    h3_config_free(c);
    *shift = (float)v;
    return rc;
}

/* An entry the layout is told by must be there or missing: a symlink loop
 * (or a folder that cannot be searched) made g_file_test say "no", and the
 * folder was reported as not a MiniMax-H3 model (issue 31). */
static h3_status_code check_reachable(const char *base, const char *sub, h3_status *status) {
    char *p = sub ? g_build_filename(base, sub, NULL) : g_strdup(base);
    GStatBuf st;
    h3_status_code rc = H3_OK;
    int err = g_stat(p, &st) == 0 ? 0 : errno;
    if (err && err != ENOENT && err != ENOTDIR)
        rc = h3_fail(status, H3_ERR_IO, "model folder entry '%s': %s%s", p, g_strerror(err),
                     err == ELOOP ? " (a symlink loop)" : "");
    g_free(p);
    return rc;
}

static h3_status_code check_layout_entries(const char *root, h3_status *status) {
    static const char *const entries[] = {"model_index.json", "modular_model_index.json", "FL2VA", "transformer",
                                          "vae", "video_vae"};
    h3_status_code rc = check_reachable(root, NULL, status);
    for (size_t i = 0; i < G_N_ELEMENTS(entries) && rc == H3_OK; i++) rc = check_reachable(root, entries[i], status);
    return rc;
}

/* A component folder (transformer/, vae/, ...) resolves inside the model
 * folder, every symlink included, as a config's source_path must (a vae/
 * linked elsewhere read files the folder does not hold; issue 31). The files
 * in it may be links: a Hugging Face snapshot's files link to blobs/. */
static h3_status_code check_component(const char *root, const char *path, h3_status *status) {
    char *name = g_path_get_basename(path);
    char *what = g_strdup_printf("the component folder %s/", name);
    h3_status_code rc = h3_path_check_inside(root, path, what, status);
    g_free(what);
    g_free(name);
    return rc;
}

h3_status_code h3_engine_model_root(const char *dir, char **out, h3_status *status) {
    *out = NULL;
    h3_status_code rc = check_reachable(dir, NULL, status);
    if (rc != H3_OK) return rc;
    if (!g_file_test(dir, G_FILE_TEST_IS_DIR))
        return h3_fail(status, H3_ERR_NOT_FOUND, "model directory '%s' does not exist", dir);
    char *root = g_strdup(dir);
    if ((rc = check_layout_entries(root, status)) != H3_OK) goto fail;
    if (!is_file(root, "model_index.json") && !is_file(root, "modular_model_index.json") && is_dir(root, "FL2VA")) {
        g_free(root);
        root = g_build_filename(dir, "FL2VA", NULL);
        if ((rc = check_component(dir, root, status)) != H3_OK || (rc = check_layout_entries(root, status)) != H3_OK)
            goto fail;
    }
    if (!is_dir(root, "transformer") || (!is_dir(root, "vae") && !is_dir(root, "video_vae"))) {
        g_free(root);
        return h3_fail(status, H3_ERR_NOT_FOUND,
                       "'%s' is not a MiniMax-H3 model: expected model_index.json with transformer/ and vae/ "
                       "(diffusers layout) or FL2VA/ with transformer/ and video_vae/ (native layout)", dir);
    }
    /* The diffusers layout is told by its index (transformer/ and vae/ alone
     * were accepted: issue 31); the native FL2VA/ may lack one. */
    if (is_dir(root, "vae")) {
        char *mi = g_build_filename(root, "model_index.json", NULL);
        char *mmi = g_build_filename(root, "modular_model_index.json", NULL);
        int has = g_file_test(mi, G_FILE_TEST_EXISTS) || g_file_test(mmi, G_FILE_TEST_EXISTS);
        g_free(mi);
        g_free(mmi);
        if (!has) {
            rc = h3_fail(status, H3_ERR_NOT_FOUND,
                         "'%s' is not a MiniMax-H3 model: it has transformer/ and vae/ but no model_index.json "
                         "(the diffusers layout's index)", dir);
            goto fail;
        }
    }
    char *parts[] = {g_build_filename(root, "transformer", NULL),
                     g_build_filename(root, is_dir(root, "vae") ? "vae" : "video_vae", NULL)};
    for (size_t i = 0; i < G_N_ELEMENTS(parts); i++) {
        if (rc == H3_OK) rc = check_component(root, parts[i], status);
        g_free(parts[i]);
    }
    if (rc != H3_OK) goto fail;
    *out = root;
    return H3_OK;
fail:
    g_free(root);
    return rc;
}

/* Ref2VA: the transformer_ref/ partition's path (read only when a request
 * has references) and the reference image's short edge, which the release
 * keeps in modular_model_index.json (2048 when the file or key is absent). */
#define H3_REFERENCE_IMAGE_SHORT_EDGE 2048
static h3_status_code read_reference_configs(h3_engine *e, const char *root, h3_status *status) {
    e->transformer_ref_dir = g_build_filename(root, "transformer_ref", NULL);
    e->reference_image_short_edge = H3_REFERENCE_IMAGE_SHORT_EDGE;
    char *mi = g_build_filename(root, "modular_model_index.json", NULL);
    h3_status_code rc = H3_OK;
    h3_config *c;
    if (g_file_test(mi, G_FILE_TEST_IS_REGULAR) && (rc = h3_config_load(mi, &c, status)) == H3_OK) {
        int64_t edge = e->reference_image_short_edge;
        rc = h3_config_int_range_or(c, "reference_image_short_edge", 32, 16384, &edge, status);
        e->reference_image_short_edge = (int)edge;
        h3_config_free(c);
    }
    g_free(mi);
    return rc;
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
    if (rc == H3_OK) rc = read_reference_configs(e, root, status);
    e->audio_vae_dir = g_build_filename(root, "audio_vae", NULL);
    e->text_encoder_dir = g_build_filename(root, "text_encoder", NULL);
    e->tokenizer_dir = g_build_filename(root, is_dir(root, "tokenizer") ? "tokenizer" : "processor", NULL);
    const char *need[] = {e->audio_vae_dir, e->text_encoder_dir, e->tokenizer_dir};
    for (size_t i = 0; i < G_N_ELEMENTS(need); i++) {
        if ((rc = check_reachable(need[i], NULL, status)) != H3_OK) return rc;
        if (!g_file_test(need[i], G_FILE_TEST_IS_DIR))
            return h3_fail(status, H3_ERR_NOT_FOUND, "model '%s' lacks the component directory '%s'", dir, need[i]);
        if ((rc = check_component(root, need[i], status)) != H3_OK) return rc;
    }

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
