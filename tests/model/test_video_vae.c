/* test_video_vae.c - the video VAE decoder against the tiny-h3 goldens on the
 * CPU backend: the untiled 2-window decode (vae_decode), the tiled decode with
 * unequal overlaps (vae_tiled), the uint8 frames, the native FL2VA layout
 * (converted back from the diffusers tiny model), and the error paths. */
#include <glib.h>
#include <glib/gstdio.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/h3_backend.h"
#include "base/h3_safetensors.h"
#include "h3_test.h"
#include "h3_test_golden.h"
#include "model/h3_video_vae.h"

#define TINY_VAE "models/tiny-h3/vae"

static const float pixel_mean[3] = {0.485f, 0.456f, 0.406f};
static const float pixel_std[3] = {0.229f, 0.224f, 0.225f};

/* ---- golden access --------------------------------------------------------------- */

/* ---- a minimal safetensors writer (F32 only) for the fixtures ---------------------- */

typedef struct st_entry {
    char *name;
    int ndim;
    int64_t shape[5];
    float *data; /* owned */
    int64_t numel;
} st_entry;

typedef struct st_writer {
    st_entry e[256];
    int n;
} st_writer;

static void st_add(st_writer *w, const char *name, int ndim, const int64_t *shape, const float *data) {
    st_entry *e = &w->e[w->n++];
    e->name = g_strdup(name);
    e->ndim = ndim;
    e->numel = 1;
    for (int i = 0; i < ndim; i++) e->numel *= (e->shape[i] = shape[i]);
    e->data = g_memdup2(data, (gsize)e->numel * sizeof(float));
}

static int st_write(st_writer *w, const char *path) {
    GString *h = g_string_new("{");
    int64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        st_entry *e = &w->e[i];
        g_string_append_printf(h, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[", i ? "," : "", e->name);
        for (int d = 0; d < e->ndim; d++) g_string_append_printf(h, "%s%lld", d ? "," : "", (long long)e->shape[d]);
        g_string_append_printf(h, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + e->numel * 4));
        off += e->numel * 4;
    }
    g_string_append(h, "}");
    while (h->len % 8) g_string_append_c(h, ' ');
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    uint64_t n = h->len;
    fwrite(&n, 8, 1, f);
    fwrite(h->str, 1, h->len, f);
    for (int i = 0; i < w->n; i++) fwrite(w->e[i].data, 4, (size_t)w->e[i].numel, f);
    fclose(f);
    g_string_free(h, TRUE);
    return 1;
}

static void st_free(st_writer *w) {
    for (int i = 0; i < w->n; i++) {
        g_free(w->e[i].name);
        g_free(w->e[i].data);
    }
    w->n = 0;
}

/* Copies every decoder-side tensor of the tiny model; `edit` may rename,
 * reshape or drop (return 0) each one. */
typedef int (*edit_fn)(st_writer *w, const char *name, int ndim, const int64_t *shape, const float *data);

static int copy_tiny(st_writer *w, edit_fn edit) {
    h3_st_file *f = NULL;
    h3_status st;
    char *path = g_build_filename(h3_test_data(TINY_VAE), "diffusion_pytorch_model.safetensors", NULL);
    int ok = h3_st_open(path, &f, &st) == H3_OK;
    g_free(path);
    if (!ok) return 0;
    for (size_t i = 0; i < h3_st_count(f); i++) {
        const h3_st_tensor *t = h3_st_at(f, i);
        if (g_str_has_prefix(t->name, "encoder.") || g_str_has_prefix(t->name, "quant_conv.")) continue;
        float *d = malloc((size_t)t->numel * sizeof(float));
        h3_st_to_f32(t, d, (size_t)t->numel, &st);
        if (!edit || edit(w, t->name, t->ndim, t->shape, d)) st_add(w, t->name, t->ndim, t->shape, d);
        free(d);
    }
    h3_st_close(f);
    return 1;
}

static int write_file(const char *dir, const char *name, const char *text) {
    char *p = g_build_filename(dir, name, NULL);
    int ok = g_file_set_contents(p, text, -1, NULL);
    g_free(p);
    return ok;
}

static char *read_tiny_config(void) {
    char *p = g_build_filename(h3_test_data(TINY_VAE), "config.json", NULL), *text = NULL;
    g_file_get_contents(p, &text, NULL, NULL);
    g_free(p);
    return text;
}

static void remove_tree(const char *dir) {
    GDir *d = g_dir_open(dir, 0, NULL);
    if (!d) return;
    const char *n;
    while ((n = g_dir_read_name(d))) {
        char *p = g_build_filename(dir, n, NULL);
        if (g_file_test(p, G_FILE_TEST_IS_DIR)) remove_tree(p);
        else g_unlink(p);
        g_free(p);
    }
    g_dir_close(d);
    g_rmdir(dir);
}

/* ---- decode helpers -------------------------------------------------------------- */

typedef struct collect {
    uint8_t *rgb; /* [F, H, W, 3] */
    int frames, H, W;
    int next;     /* frames must arrive in order */
    int calls, in_order;
    int stop_after; /* cancel after this many calls (0 = never) */
    int progress_done, progress_total, progress_calls;
} collect;

static int on_frames(void *opaque, int first, int count, const uint8_t *rgb) {
    collect *c = opaque;
    c->calls++;
    if (first != c->next || first + count > c->frames) c->in_order = 0;
    else memcpy(c->rgb + (size_t)first * c->H * c->W * 3, rgb, (size_t)count * c->H * c->W * 3);
    c->next = first + count;
    return c->stop_after && c->calls >= c->stop_after;
}

static void on_progress(void *opaque, int done, int total) {
    collect *c = opaque;
    if (done == c->progress_done + 1) c->progress_done = done;
    c->progress_total = total;
    c->progress_calls++;
}

/* Compares packed RGB frames to a planar [3, F, H, W] uint8 reference. */
static void compare_u8(const char *what, const uint8_t *packed, const uint8_t *planar, int F, int H, int W) {
    int64_t differ = 0, n = (int64_t)F * H * W * 3;
    int max_diff = 0;
    for (int c = 0; c < 3; c++)
        for (int64_t p = 0; p < (int64_t)F * H * W; p++) {
            int d = abs((int)packed[p * 3 + c] - (int)planar[c * (int64_t)F * H * W + p]);
            if (d) differ++;
            if (d > max_diff) max_diff = d;
        }
    printf("%s: uint8 frames: %lld of %lld values differ, max |diff| %d\n", what, (long long)differ, (long long)n,
           max_diff);
    CHECK(max_diff <= 1, "%s: uint8 max |diff| %d", what, max_diff);
}

/* uint8 reference from the golden float output, with the spec's formula. */
static uint8_t *u8_from_golden(const float *out, int64_t n_per_channel) {
    uint8_t *u = malloc((size_t)(3 * n_per_channel));
    for (int c = 0; c < 3; c++)
        for (int64_t i = 0; i < n_per_channel; i++) {
            float v = out[c * n_per_channel + i] * pixel_std[c];
            v = v + pixel_mean[c];
            v = v < 0 ? 0 : v > 1 ? 1 : v;
            u[c * n_per_channel + i] = (uint8_t)nearbyintf(v * 255.0f);
        }
    return u;
}

/* ---- tests ------------------------------------------------------------------------- */

static void test_decode_golden(h3_backend *b, h3_video_vae *vae, const char *label) {
    h3_st_file *g = NULL;
    h3_status st;
    if (h3_st_open(h3_test_data("goldens/tiny-h3/vae_decode.safetensors"), &g, &st) != H3_OK) {
        CHECK(0, "golden: %s", st.message);
        return;
    }
    int64_t n_lat = 0, n_out = 0;
    float *lat = golden_f32(g, "latents_normalized", &n_lat), *ref = golden_f32(g, "vae_output", &n_out);
    const h3_st_tensor *u8 = h3_st_find(g, "pixels_uint8");
    const int T = 12, Hl = 2, Wl = 4, F = 39, H = 32, W = 64;
    CHECK(lat && ref && u8 && n_lat == 24 * T * Hl * Wl && n_out == 3 * F * H * W, "vae_decode golden tensors");
    if (!lat || !ref || !u8) goto out;
    CHECK(h3_video_vae_num_frames(vae, T) == F, "num_frames(12) = %d", h3_video_vae_num_frames(vae, T));

    float *got = calloc((size_t)n_out, sizeof(float));
    h3_status_code rc = h3_video_vae_decode_f32(vae, lat, T, Hl, Wl, got, &st);
    CHECK(rc == H3_OK, "%s decode_f32: %s", label, st.message);
    double rel = h3_test_rel_l2(got, ref, (size_t)n_out);
    printf("%s vae_decode: vae_output rel L2 %.3e (12 latents -> 39 frames 32x64, 2 windows, 1 tile)\n", label, rel);
    CHECK(rel < 1e-4, "%s vae_decode rel L2 %.3e", label, rel);
    /* The cross-faded frames 17..21 and the last window's tail on their own. */
    double rel_fade = h3_test_rel_l2(got + 17 * H * W, ref + 17 * H * W, (size_t)5 * H * W);
    double rel_tail = h3_test_rel_l2(got + 34 * H * W, ref + 34 * H * W, (size_t)5 * H * W);
    printf("%s vae_decode: cross-fade frames 17-21 rel L2 %.3e, tail frames 34-38 rel L2 %.3e (red channel)\n",
           label, rel_fade, rel_tail);
    CHECK(rel_fade < 1e-4 && rel_tail < 1e-4, "%s fade %.3e tail %.3e", label, rel_fade, rel_tail);
    free(got);

    collect c = {0};
    c.frames = F, c.H = H, c.W = W, c.in_order = 1;
    c.rgb = calloc((size_t)F * H * W * 3, 1);
    h3_video_vae_set_progress(vae, on_progress, &c);
    rc = h3_video_vae_decode(vae, lat, T, Hl, Wl, on_frames, &c, NULL, &st);
    h3_video_vae_set_progress(vae, NULL, NULL);
    CHECK(rc == H3_OK, "%s decode: %s", label, st.message);
    CHECK(c.in_order && c.next == F, "%s: frames arrived in order and complete (next %d, calls %d)", label, c.next,
          c.calls);
    CHECK(c.calls == 3, "%s: %d emit calls, want 3 (17 + 17 + 5)", label, c.calls);
    CHECK(c.progress_done == 2 && c.progress_total == 2 && c.progress_calls == 2, "%s: progress %d/%d in %d calls",
          label, c.progress_done, c.progress_total, c.progress_calls);
    compare_u8(label, c.rgb, u8->data, F, H, W);
    free(c.rgb);
out:
    free(lat);
    free(ref);
    h3_st_close(g);
    (void)b;
}

static void test_tiled_golden(h3_video_vae *vae) {
    h3_st_file *g = NULL;
    h3_status st;
    if (h3_st_open(h3_test_data("goldens/tiny-h3/vae_tiled.safetensors"), &g, &st) != H3_OK) {
        CHECK(0, "golden: %s", st.message);
        return;
    }
    int64_t n_lat = 0, n_out = 0;
    float *lat = golden_f32(g, "decode_latents_normalized", &n_lat), *ref = golden_f32(g, "decode_output", &n_out);
    const int T = 7, Hl = 4, Wl = 6, F = 22, H = 64, W = 96;
    CHECK(lat && ref && n_lat == 24 * T * Hl * Wl && n_out == 3 * F * H * W, "vae_tiled golden tensors");
    if (!lat || !ref) goto out;
    /* enable_tiling(32, 32, 16, 16): y tiles 0,16,32 (overlaps 16,16), x tiles 0..64 step 16. */
    CHECK(h3_video_vae_set_tiling(vae, 32, 16, &st) == H3_OK, "set_tiling: %s", st.message);
    float *got = calloc((size_t)n_out, sizeof(float));
    h3_status_code rc = h3_video_vae_decode_f32(vae, lat, T, Hl, Wl, got, &st);
    CHECK(rc == H3_OK, "tiled decode_f32: %s", st.message);
    double rel = h3_test_rel_l2(got, ref, (size_t)n_out);
    printf("vae_tiled: decode_output rel L2 %.3e (7 latents -> 22 frames 64x96, 3x5 tiles of 32 px)\n", rel);
    CHECK(rel < 1e-4, "vae_tiled rel L2 %.3e", rel);
    free(got);

    collect c = {0};
    c.frames = F, c.H = H, c.W = W, c.in_order = 1;
    c.rgb = calloc((size_t)F * H * W * 3, 1);
    rc = h3_video_vae_decode(vae, lat, T, Hl, Wl, on_frames, &c, NULL, &st);
    CHECK(rc == H3_OK && c.in_order && c.next == F && c.calls == 2, "tiled decode: %s (calls %d)",
          rc == H3_OK ? "ok" : st.message, c.calls);
    uint8_t *u = u8_from_golden(ref, (int64_t)F * H * W);
    compare_u8("vae_tiled (reference uint8 = spec formula on the golden floats)", c.rgb, u, F, H, W);
    free(u);
    free(c.rgb);
    CHECK(h3_video_vae_set_tiling(vae, 256, 64, &st) == H3_OK, "reset tiling");
out:
    free(lat);
    free(ref);
    h3_st_close(g);
}

/* Diffusers -> native names (the inverse of D convert_video_vae_key): adds
 * the renamed tensor to w. to_q/to_k/to_v are fused by add_native_qkv. */
static char *replace_once(char *s, const char *from, const char *to) {
    char *at = strstr(s, from);
    if (!at) return s;
    *at = 0;
    char *r = g_strconcat(s, to, at + strlen(from), NULL);
    g_free(s);
    return r;
}

static int native_edit(st_writer *w, const char *name, int ndim, const int64_t *shape, const float *data) {
    if (strstr(name, ".attn.to_q.") || strstr(name, ".attn.to_k.") || strstr(name, ".attn.to_v.")) return 0;
    char *n = g_strdup(name);
    n = replace_once(n, "decoder.proj_in.", "decoder.x_embedder.");
    n = replace_once(n, ".attn.to_out.0.", ".attn.to_out.");
    n = replace_once(n, ".ff.net.2.", ".ff.w2.");
    if (strstr(n, ".ff.net.0.proj.")) {
        /* diffusers [value; gate] -> native [gate; value] */
        n = replace_once(n, ".ff.net.0.proj.", ".ff.w1.");
        int64_t half = (shape[0] / 2) * (ndim == 2 ? shape[1] : 1);
        float *sw = malloc((size_t)(2 * half) * sizeof(float));
        memcpy(sw, data + half, (size_t)half * sizeof(float));
        memcpy(sw + half, data, (size_t)half * sizeof(float));
        st_add(w, n, ndim, shape, sw);
        free(sw);
    } else {
        st_add(w, n, ndim, shape, data);
    }
    g_free(n);
    return 0;
}

/* Builds the fused per-head-interleaved to_qkv of every block from the
 * tiny model's to_q/to_k/to_v. */
static void add_native_qkv(st_writer *w) {
    h3_st_file *f = NULL;
    h3_status st;
    char *path = g_build_filename(h3_test_data(TINY_VAE), "diffusion_pytorch_model.safetensors", NULL);
    h3_st_open(path, &f, &st);
    g_free(path);
    if (!f) return;
    const int heads = 2, hd = 24, D = 48;
    for (int blk = 0; blk < 2; blk++) {
        for (int is_bias = 0; is_bias < 2; is_bias++) {
            int64_t cols = is_bias ? 1 : D;
            float *fused = malloc((size_t)(3 * D * cols) * sizeof(float));
            const char *parts[3] = {"to_q", "to_k", "to_v"};
            for (int p = 0; p < 3; p++) {
                char name[128];
                snprintf(name, sizeof name, "decoder.transformer_blocks.%d.attn.%s.%s", blk, parts[p],
                         is_bias ? "bias" : "weight");
                const h3_st_tensor *t = h3_st_find(f, name);
                float *d = malloc((size_t)t->numel * sizeof(float));
                h3_st_to_f32(t, d, (size_t)t->numel, &st);
                for (int h = 0; h < heads; h++)
                    memcpy(fused + ((int64_t)h * 3 * hd + p * hd) * cols, d + (int64_t)h * hd * cols,
                           (size_t)(hd * cols) * sizeof(float));
                free(d);
            }
            char name[128];
            snprintf(name, sizeof name, "decoder.transformer_blocks.%d.attn.to_qkv.%s", blk, is_bias ? "bias" : "weight");
            int64_t shape[2] = {3 * D, D};
            st_add(w, name, is_bias ? 1 : 2, shape, fused);
            free(fused);
        }
    }
    float zeros[48] = {0};
    int64_t ms[3] = {1, 1, 48};
    st_add(w, "decoder.mask_token", 3, ms, zeros); /* present in the release file, unused */
    h3_st_close(f);
}

static void test_native_layout(h3_backend *b, const char *tmp) {
    char *dir = g_build_filename(tmp, "video_vae", NULL), *src = g_build_filename(dir, "source", NULL);
    g_mkdir_with_parents(src, 0755);
    /* Wrapper config: the real FL2VA/video_vae/config.json with the tiny model's stats. */
    char *tiny = read_tiny_config();
    const char *m0 = strstr(tiny, "\"latents_mean\""), *m1 = strstr(tiny, "\"layers_per_block\"");
    GString *wrap = g_string_new("{\n  \"_class_name\": \"MiniMaxH3VideoVAE\",\n  \"source_path\": \"source\",\n"
                                 "  \"source_safetensors_path\": \"model.safetensors\",\n"
                                 "  \"vae_clip_length\": 17, \"vae_token_drop\": 3,\n"
                                 "  \"vae_tile_size\": 256, \"vae_tile_overlap_min\": 64,\n"
                                 "  \"latent_channels\": 24,\n  ");
    g_string_append_len(wrap, m0, m1 - m0);
    while (wrap->len && wrap->str[wrap->len - 1] != ',') g_string_truncate(wrap, wrap->len - 1);
    g_string_truncate(wrap, wrap->len - 1);
    g_string_append(wrap, "\n}\n");
    write_file(dir, "config.json", wrap->str);
    write_file(src, "config.json",
               "{\"_class_name\": \"AutoencoderKLLegacy\", \"causal_decoder\": false, \"embed_dim\": 24,"
               " \"out_ch\": 3, \"space_down\": [2, 2, 2, 2], \"time_down\": [1, 2, 2, 1], \"use_vit_decoder\": true,"
               " \"vae_ratio\": 16, \"vae_ratio_t\": 4, \"z_channels\": 24,"
               " \"vit_decoder_kwargs\": {\"dim_head\": 24, \"heads\": 2, \"num_layers\": 2, \"norm_type\": \"rms_norm\","
               " \"rope_dim_ratio\": 0.75, \"rope_theta\": 100.0}}");
    st_writer w = {0};
    copy_tiny(&w, native_edit);
    add_native_qkv(&w);
    char *model = g_build_filename(src, "model.safetensors", NULL);
    CHECK(st_write(&w, model), "write native fixture");
    st_free(&w);

    h3_video_vae *vae = NULL;
    h3_status st;
    h3_status_code rc = h3_video_vae_load(b, dir, &vae, &st);
    CHECK(rc == H3_OK, "native load: %s", st.message);
    if (vae) test_decode_golden(b, vae, "native FL2VA layout");
    h3_video_vae_free(vae);
    g_free(model);
    g_free(tiny);
    g_string_free(wrap, TRUE);
    g_free(src);
    g_free(dir);
}

/* A diffusers dir whose one tensor is edited by `edit`. */
static const char *edit_target;
static int shrink_tensor(st_writer *w, const char *name, int ndim, const int64_t *shape, const float *data) {
    if (strcmp(name, edit_target) != 0) return 1;
    int64_t s[5];
    memcpy(s, shape, (size_t)ndim * sizeof *s);
    s[ndim - 1] -= 1; /* a wrong last dim; the data is just shorter */
    st_add(w, name, ndim, s, data);
    return 0;
}
static int drop_tensor(st_writer *w, const char *name, int ndim, const int64_t *shape, const float *data) {
    return strcmp(name, edit_target) != 0;
}

static char *make_edited_dir(const char *tmp, const char *sub, edit_fn edit) {
    char *dir = g_build_filename(tmp, sub, NULL);
    g_mkdir_with_parents(dir, 0755);
    char *cfg = read_tiny_config();
    write_file(dir, "config.json", cfg);
    g_free(cfg);
    st_writer w = {0};
    copy_tiny(&w, edit);
    char *p = g_build_filename(dir, "diffusion_pytorch_model.safetensors", NULL);
    st_write(&w, p);
    g_free(p);
    st_free(&w);
    return dir;
}

static void test_errors(h3_backend *b, h3_video_vae *vae, const char *tmp) {
    h3_status st;
    h3_video_vae *bad = NULL;
    h3_status_code rc = h3_video_vae_load(b, "/nonexistent/vae", &bad, &st);
    printf("missing dir -> %s: %s\n", h3_status_code_name(rc), st.message);
    CHECK(rc == H3_ERR_NOT_FOUND && bad == NULL && strstr(st.message, "/nonexistent/vae"), "missing dir: %s",
          st.message);

    edit_target = "decoder.proj_out.weight";
    char *dir = make_edited_dir(tmp, "wrong_shape", shrink_tensor);
    rc = h3_video_vae_load(b, dir, &bad, &st);
    printf("wrong shape -> %s: %s\n", h3_status_code_name(rc), st.message);
    CHECK(rc == H3_ERR_FORMAT && bad == NULL && strstr(st.message, "decoder.proj_out.weight"), "wrong shape: %s",
          st.message);
    g_free(dir);

    edit_target = "decoder.transformer_blocks.1.scale2";
    dir = make_edited_dir(tmp, "missing_tensor", drop_tensor);
    rc = h3_video_vae_load(b, dir, &bad, &st);
    printf("missing tensor -> %s: %s\n", h3_status_code_name(rc), st.message);
    CHECK(rc == H3_ERR_NOT_FOUND && bad == NULL && strstr(st.message, "transformer_blocks.1.scale2"),
          "missing tensor: %s", st.message);
    g_free(dir);

    /* T must be 5n+2, n >= 1. */
    float lat[24 * 12 * 2 * 4] = {0};
    collect c = {0};
    c.frames = 39, c.H = 32, c.W = 64, c.in_order = 1;
    c.rgb = calloc((size_t)39 * 32 * 64 * 3, 1);
    int bad_T[4] = {11, 2, 0, -5};
    for (int i = 0; i < 4; i++) {
        rc = h3_video_vae_decode(vae, lat, bad_T[i], 2, 4, on_frames, &c, NULL, &st);
        printf("T = %d -> %s: %s\n", bad_T[i], h3_status_code_name(rc), st.message);
        CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "5n+2"), "T = %d: %s", bad_T[i], st.message);
    }
    CHECK(c.calls == 0, "no frames for rejected requests (%d calls)", c.calls);
    rc = h3_video_vae_decode(vae, NULL, 12, 2, 4, on_frames, &c, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT, "NULL latents: %s", st.message);
    rc = h3_video_vae_decode(vae, lat, 12, 0, 4, on_frames, &c, NULL, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT, "zero height: %s", st.message);

    /* Cancel through the consumer: stops after the first window. */
    c.stop_after = 1;
    rc = h3_video_vae_decode(vae, lat, 12, 2, 4, on_frames, &c, NULL, &st);
    printf("emit returns 1 -> %s: %s (emit calls %d)\n", h3_status_code_name(rc), st.message, c.calls);
    CHECK(rc == H3_ERR_CANCELLED && c.calls == 1, "emit cancel: %s, calls %d", st.message, c.calls);
    /* Cancel flag raised before the decode starts. */
    volatile int flag = 1;
    c.calls = 0, c.stop_after = 0, c.next = 0;
    rc = h3_video_vae_decode(vae, lat, 12, 2, 4, on_frames, &c, &flag, &st);
    CHECK(rc == H3_ERR_CANCELLED && c.calls == 0, "cancel flag: %s, calls %d", st.message, c.calls);
    free(c.rgb);
    /* The backend is still usable after the errors above. */
    CHECK(h3_backend_check(b, &st) == H3_OK, "backend error left behind: %s", st.message);

    CHECK(h3_video_vae_set_tiling(vae, 24, 8, &st) == H3_ERR_INVALID_ARGUMENT, "tile 24 rejected");
    CHECK(h3_video_vae_set_tiling(vae, 32, 32, &st) == H3_ERR_INVALID_ARGUMENT, "overlap >= tile rejected");
}

static int ints_equal(const int *a, const int *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* docs/spec/h3-vaes.md §3.7 table (256 px tiles, >= 64 px overlap). */
static void test_tile_layout(void) {
    struct {
        int length, n;
        int starts[8], ov[8];
    } cases[] = {
        {736, 4, {0, 160, 320, 480}, {96, 96, 96}},
        {1280, 7, {0, 160, 320, 496, 672, 848, 1024}, {96, 96, 80, 80, 80, 80}},
        {768, 4, {0, 160, 336, 512}, {96, 80, 80}},
        {1344, 7, {0, 176, 352, 528, 704, 896, 1088}, {80, 80, 80, 80, 64, 64}},
        {544, 3, {0, 144, 288}, {112, 112}},
        {960, 5, {0, 176, 352, 528, 704}, {80, 80, 80, 80}},
        {256, 1, {0}, {0}},
        {64, 1, {0}, {0}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        int starts[16], ov[16], len = 0;
        int n = h3_video_vae_split_tiles(cases[k].length, 256, 64, 16, starts, ov, 16, &len);
        CHECK(n == cases[k].n && ints_equal(starts, cases[k].starts, n) && ints_equal(ov, cases[k].ov, n - 1) &&
                  len == (n > 1 ? 256 : cases[k].length),
              "tiles over %d px: n %d (want %d)", cases[k].length, n, cases[k].n);
    }
    /* vae_tiled.json: enable_tiling(32, 32, 16, 16) over 64 x 96. */
    int starts[16], ov[16], len = 0;
    int n = h3_video_vae_split_tiles(64, 32, 16, 16, starts, ov, 16, &len);
    CHECK(n == 3 && starts[2] == 32 && ov[0] == 16 && ov[1] == 16 && len == 32, "tiled golden y split");
    n = h3_video_vae_split_tiles(96, 32, 16, 16, starts, ov, 16, &len);
    CHECK(n == 5 && starts[4] == 64 && ov[3] == 16, "tiled golden x split");
    CHECK(h3_video_vae_split_tiles(96, 32, 32, 16, starts, ov, 16, &len) == -1, "overlap >= tile rejected");
    CHECK(h3_video_vae_split_tiles(1280, 256, 64, 16, starts, ov, 3, &len) == -1, "too many tiles rejected");
}

static void test_geometry(void) {
    test_tile_layout();
    CHECK(h3_video_vae_num_windows(37) == 7, "windows(37) = %d", h3_video_vae_num_windows(37));
    CHECK(h3_video_vae_num_windows(12) == 2, "windows(12) = %d", h3_video_vae_num_windows(12));
    CHECK(h3_video_vae_num_windows(102) == 20, "windows(102) = %d", h3_video_vae_num_windows(102));
    CHECK(h3_video_vae_num_windows(2) == 0 && h3_video_vae_num_windows(11) == 0 && h3_video_vae_num_windows(1) == 0,
          "invalid T gives 0 windows");
}

/* The release config and index parse: shapes and names of the real decoder
 * are what the loader asks for (no weights here, so the load stops at the
 * first missing shard file, after the config). */
static void test_official_configs(h3_backend *b) {
    h3_video_vae *vae = NULL;
    h3_status st;
    h3_status_code rc = h3_video_vae_load(b, h3_test_data("official/vae"), &vae, &st);
    printf("official/vae (no weights) -> %s: %s\n", h3_status_code_name(rc), st.message);
    CHECK(rc != H3_OK && vae == NULL && strstr(st.message, "safetensors"), "official vae: %s", st.message);
    rc = h3_video_vae_load(b, h3_test_data("official/FL2VA/video_vae"), &vae, &st);
    printf("official/FL2VA/video_vae (no weights) -> %s: %s\n", h3_status_code_name(rc), st.message);
    CHECK(rc == H3_ERR_NOT_FOUND && vae == NULL && strstr(st.message, "model.safetensors"), "official FL2VA: %s",
          st.message);
}

int main(void) {
    h3_backend *b = NULL;
    h3_status st;
    if (h3_backend_cpu_create(1, &b, &st) != H3_OK) {
        fprintf(stderr, "%s\n", st.message);
        return 1;
    }
    char *tmp = g_dir_make_tmp("h3-video-vae-XXXXXX", NULL);
    h3_video_vae *vae = NULL;
    h3_status_code rc = h3_video_vae_load(b, h3_test_data(TINY_VAE), &vae, &st);
    CHECK(rc == H3_OK, "load tiny vae: %s", st.message);
    test_geometry();
    if (vae) {
        CHECK(h3_video_vae_latent_channels(vae) == 24 && h3_video_vae_spatial_ratio(vae) == 16, "geometry");
        CHECK(h3_video_vae_num_frames(vae, 37) == 124 && h3_video_vae_num_frames(vae, 11) == -1, "num_frames");
        test_decode_golden(b, vae, "diffusers layout");
        test_tiled_golden(vae);
        test_errors(b, vae, tmp);
    }
    test_native_layout(b, tmp);
    test_official_configs(b);
    h3_video_vae_free(vae);
    if (tmp) remove_tree(tmp);
    g_free(tmp);
    h3_backend_destroy(b);
    return h3_test_finish("test_video_vae");
}
