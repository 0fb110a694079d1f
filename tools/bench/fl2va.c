/* fl2va.c - what a keyframe costs (--fl2va on|off|only): the Qwen3-VL vision
 * tower and the video VAE encoder of one 1280×736 keyframe, ours against
 * eager torch, and the seconds an FL2VA clip adds over T2VA.
 *
 * Weights are the release's shapes with load-format dummy values, drawn on
 * the device (h3_vision_dummy_add over text_encoder/config.json's
 * vision_config, h3_video_vae_dummy_checkpoint_with(encoder) over
 * vae/config.json), loaded by the product's loaders. The keyframe is a
 * synthetic 1280×736 picture; the vision tower gets it through the Qwen
 * processor (h3_image_process: 3680 patches, 920 tokens), the VAE through
 * h3_video_vae_encode (28 tiles of 256 px). Every tensor the two models hold
 * is drawn once more the same way (same checkpoint tensor, same weight type,
 * so the same values), downloaded and written under --dump-dir with the
 * inputs and our outputs; tools/bench/h3_fl2va_reference.py runs the same two
 * computations in eager torch (bf16; the VAE also in fp32/TF32, the official
 * encode) on those weights, times them and reports rel-L2 against ours.
 *
 * The FL2VA surcharge is measured on the product's code, each at both lengths
 * of one first-keyframe request against T2VA (256 prompt tokens): the text
 * encoder (h3_text_encoder_forward of FL2VA_TE_LAYERS random layers, scaled
 * to the 50 tapped layers) over the presentation's extra tokens, and the DiT
 * (h3_dit_create_random of FL2VA_DIT_BLOCKS blocks, begin + forward over
 * h3_dit_layout with and without the keyframe: text rows + condition rows,
 * scaled to 50 blocks, times the default 49 steps), plus the vision tower
 * and the VAE encode. Our timings print before the reference runs, so they
 * stand even when torch fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/h3_config.h"
#include "base/h3_random.h"
#include "base/h3_safetensors.h"
#include "bench.h"
#include "model/h3_dit_layout.h"
#include "model/h3_image.h"
#include "model/h3_text_encoder.h"
#include "model/h3_tokenizer.h"
#include "model/h3_video_vae.h"
#include "model/h3_video_vae_encoder.h"
#include "model/h3_vision.h"

#define FL_W 1280
#define FL_H 736
#define FL_STEPS 49         /* the model's default denoising passes (h3.h) */
#define FL_TEXT 256         /* T2VA prompt rows, as the forward section uses */
#define FL_DIT_BLOCKS 4     /* of 50, scaled */
#define FL_TE_LAYERS 4      /* of the 50 tapped, scaled (>= 3: the DeepStack layers) */
#define FL_TE_TAP 50
#define FL_MAX_REPS 32

typedef struct fl_result {
    /* vision tower */
    int vis_ok;
    int64_t patches, tokens, grid[3];
    double vis_ms, vis_flop, vis_load_s;
    /* VAE encoder */
    int vae_ok;
    double vae_ms, key_ms, vae_load_s;
    int tiles;
    /* text encoder surcharge */
    int te_ok, extra_text, extra_exact;
    double te_ms0, te_ms1;
    /* DiT surcharge */
    int dit_ok;
    int64_t s_t2va, s_fl2va, cond_rows;
    int dit_blocks;
    double dit_ms0, dit_ms1, begin_ms0, begin_ms1;
    /* dumps written for the reference */
    int dump_vision, dump_vae;
    /* the report's sums */
    double surcharge_text_ms, surcharge_fwd_ms, surcharge_s;
} fl_result;

/* ---- small helpers ------------------------------------------------------------------------ */

/* $H3_TEST_DATA/official/sub (else tests/data/official/sub, from the repository root). */
static void data_path(const char *sub, char *out, size_t size) {
    const char *data = getenv("H3_TEST_DATA");
    snprintf(out, size, "%s/official/%s", data && *data ? data : "tests/data", sub);
}

static int fl_fail(const char *where, h3_status_code rc, const h3_status *st) {
    h3_status sync;
    if (rc == H3_OK && h3_backend_synchronize(B, &sync) == H3_OK) return 0;
    fprintf(stderr, "h3-bench: fl2va: %s: %s\n", where, rc != H3_OK ? st->message : sync.message);
    h3_backend_clear_error(B);
    return 1;
}

static int fl_reps(const bench_options *o) { return o->reps < 3 ? 3 : o->reps > FL_MAX_REPS ? FL_MAX_REPS : o->reps; }

/* A synthetic keyframe: smooth colour ramps, a few discs and some noise (so every tile and patch differs). */
static uint8_t *make_keyframe(void) {
    uint8_t *rgb = malloc((size_t)FL_W * FL_H * 3);
    if (!rgb) return NULL;
    uint64_t s = 20261203;
    for (int y = 0; y < FL_H; y++)
        for (int x = 0; x < FL_W; x++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            int noise = (int)((s >> 59) & 15) - 8;
            double dx = x - 0.3 * FL_W, dy = y - 0.6 * FL_H, d2 = dx * dx + dy * dy;
            int disc = d2 < 150.0 * 150.0 ? 60 : 0;
            int v[3] = {255 * x / FL_W, 255 * y / FL_H, 128 + (int)(100 * sin(x * 0.02) * cos(y * 0.015))};
            for (int c = 0; c < 3; c++) {
                int u = v[c] + noise + (c == 0 ? disc : -disc / 2);
                rgb[((size_t)y * FL_W + x) * 3 + c] = (uint8_t)(u < 0 ? 0 : u > 255 ? 255 : u);
            }
        }
    return rgb;
}

/* One growing list of tensors to write as one safetensors file (names and data owned). */
typedef struct fl_dump {
    h3_st_write_tensor *t;
    int n, cap;
    int64_t bytes;
    int failed;
} fl_dump;

/* Adds a tensor; data is taken over (freed by fl_dump_free). */
static void fl_dump_add(fl_dump *d, const char *name, h3_st_dtype dtype, int ndim, const int64_t *shape, void *data) {
    if (!data) {
        d->failed = 1;
        return;
    }
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 64;
        h3_st_write_tensor *t = realloc(d->t, (size_t)cap * sizeof *t);
        if (!t) {
            free(data);
            d->failed = 1;
            return;
        }
        d->t = t, d->cap = cap;
    }
    h3_st_write_tensor *w = &d->t[d->n++];
    memset(w, 0, sizeof *w);
    w->name = strdup(name);
    w->dtype = dtype;
    w->ndim = ndim;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) w->shape[i] = shape[i], n *= shape[i];
    w->data = data;
    d->bytes += n * (int64_t)h3_st_dtype_size(dtype);
    if (!w->name) d->failed = 1;
}

static void fl_dump_free(fl_dump *d) {
    for (int i = 0; i < d->n; i++) {
        free((void *)d->t[i].name);
        free((void *)d->t[i].data);
    }
    free(d->t);
    memset(d, 0, sizeof *d);
}

/* Writes and frees; 1 on success. */
static int fl_dump_write(fl_dump *d, const char *path) {
    h3_status st;
    int ok = !d->failed && d->n > 0;
    if (!ok) fprintf(stderr, "h3-bench: fl2va: %s: a tensor could not be prepared (host memory?)\n", path);
    if (ok && h3_st_write(path, d->t, (size_t)d->n, NULL, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: fl2va: writing %s: %s\n", path, st.message);
        ok = 0;
    }
    fl_dump_free(d);
    return ok;
}

/* A backend tensor as host float32 (malloc'd), or NULL with a message. */
static float *fl_download(const h3_tensor *t, const char *what) {
    size_t n = (size_t)h3_tensor_numel(t);
    float *host = malloc(n * sizeof *host);
    h3_status st;
    if (!host) {
        fprintf(stderr, "h3-bench: fl2va: no host memory for %s\n", what);
        return NULL;
    }
    if (h3_tensor_download_f32(B, t, host, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: fl2va: downloading %s: %s\n", what, st.message);
        h3_backend_clear_error(B);
        free(host);
        return NULL;
    }
    return host;
}

/* The value a model holds for checkpoint tensor `name`: loaded again from the same dummy tensor with the same
 * weight type (so drawn by the same counter-based generator), downloaded, freed. bf16: as BF16 bytes. */
static void fl_export(fl_dump *d, const h3_checkpoint *ck, const char *name, int ndim, const int64_t *shape,
                      h3_weight_type type, int bf16) {
    const h3_st_tensor *src;
    h3_tensor w;
    h3_status st;
    if (h3_checkpoint_get(ck, name, ndim, shape, &src, &st) != H3_OK ||
        h3_weight_load(B, src, type, &w, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: fl2va: export %s: %s\n", name, st.message);
        h3_backend_clear_error(B);
        d->failed = 1;
        return;
    }
    float *host = fl_download(&w, name);
    h3_weight_free(B, &w);
    if (host && bf16) {
        size_t n = (size_t)src->numel;
        uint16_t *b = malloc(n * sizeof *b);
        for (size_t i = 0; b && i < n; i++) b[i] = h3_f32_to_bf16(host[i]);
        free(host);
        fl_dump_add(d, name, H3_ST_BF16, ndim, shape, b);
    } else {
        fl_dump_add(d, name, H3_ST_F32, ndim, shape, host);
    }
}

/* Median of reps synchronised wall-clock runs of fn after one warm-up; NAN on a failure. */
typedef h3_status_code (*fl_fn)(void *ctx, h3_status *st);
static double fl_time(const char *what, fl_fn fn, void *ctx, int reps) {
    double t[FL_MAX_REPS + 1];
    h3_status st;
    for (int i = -1; i < reps; i++) {
        double a = now_ms();
        h3_status_code rc = fn(ctx, &st);
        if (fl_fail(what, rc, &st)) return NAN;
        if (i >= 0) t[i] = now_ms() - a;
    }
    return median(t, reps);
}

/* ---- (a) the vision tower --------------------------------------------------------------------- */

/* FLOP of the tower on n patches of one image (docs/spec/h3-conditioner.md §6.2: linears, attention, mergers). */
static double vision_flop(const h3_vision_config *c, int64_t n) {
    double C = (double)c->hidden_size, I = (double)c->intermediate_size, m2 = (double)(c->spatial_merge_size *
                                                                                         c->spatial_merge_size);
    double K = (double)(c->in_channels * c->temporal_patch_size * c->patch_size * c->patch_size);
    double W = C * m2, O = (double)c->out_hidden_size, N = (double)n, depth = (double)c->depth;
    double linear = 2.0 * N * (K * C + depth * (3 * C * C + C * C + 2 * C * I));
    double attention = depth * 4.0 * N * N * C;
    double mergers = (1.0 + c->n_deepstack) * 2.0 * (N / m2) * (W * W + W * O);
    return linear + attention + mergers;
}

typedef struct vis_ctx {
    h3_vision *v;
    const float *pix;
    int64_t grid[1][3];
    h3_tensor embeds, ds[H3_VISION_MAX_DEEPSTACK];
} vis_ctx;

static h3_status_code vis_call(void *opaque, h3_status *st) {
    vis_ctx *c = opaque;
    return h3_vision_forward(c->v, c->pix, (const int64_t(*)[3])c->grid, 1, &c->embeds, c->ds, st);
}

static void bench_vision(const bench_options *o, const char *dir, const uint8_t *rgb, fl_result *r) {
    char path[1200], cfgp[1100];
    h3_status st;
    h3_config *conf = NULL;
    h3_vision_config vc;
    h3_image_processor_config pc;
    data_path("text_encoder/config.json", cfgp, sizeof cfgp);
    h3_status_code rc = h3_config_load(cfgp, &conf, &st);
    if (rc == H3_OK) rc = h3_vision_config_read(conf, &vc, &st);
    h3_config_free(conf);
    if (fl_fail("vision config", rc, &st)) return;
    data_path("processor", path, sizeof path);
    rc = h3_image_processor_config_load(path, &pc, &st);
    if (fl_fail("image processor config", rc, &st)) return;
    h3_rgb_image img = {.width = FL_W, .height = FL_H, .stride = (size_t)FL_W * 3, .data = (uint8_t *)rgb};
    float *pix = NULL;
    rc = h3_image_process(&pc, &img, &pix, r->grid, &st);
    if (fl_fail("image processor", rc, &st)) return;
    r->patches = r->grid[0] * r->grid[1] * r->grid[2];

    h3_checkpoint *ck = NULL;
    h3_vision *v = NULL;
    double t0 = now_ms();
    rc = h3_checkpoint_dummy_new("fl2va vision tower (load-format dummy)", 20261203, &ck, &st);
    if (rc == H3_OK) rc = h3_vision_dummy_add(&vc, ck, &st);
    if (rc == H3_OK) rc = h3_vision_load(B, &vc, ck, &v, &st);
    if (fl_fail("vision tower load", rc, &st)) goto done;
    r->vis_load_s = (now_ms() - t0) / 1e3;
    r->tokens = h3_vision_tokens(v, r->grid);
    r->vis_flop = vision_flop(&vc, r->patches);
    printf("vision tower: %lld blocks, %lld patches (grid %lldx%lldx%lld) -> %lld tokens, %.2f TFLOP; dummy weights "
           "drawn in %.1f s; timing (warm-up + %d reps)...\n",
           (long long)vc.depth, (long long)r->patches, (long long)r->grid[0], (long long)r->grid[1],
           (long long)r->grid[2], (long long)r->tokens, r->vis_flop / 1e12, r->vis_load_s, fl_reps(o));
    fflush(stdout);

    size_t mark = h3_arena_mark(B);
    vis_ctx c = {.v = v, .pix = pix, .grid = {{r->grid[0], r->grid[1], r->grid[2]}}};
    c.embeds = h3_new_2d(B, h3_backend_compute_dtype(B), r->tokens, vc.out_hidden_size);
    for (int k = 0; k < vc.n_deepstack; k++) c.ds[k] = h3_new_2d(B, h3_backend_compute_dtype(B), r->tokens, vc.out_hidden_size);
    r->vis_ms = fl_time("vision forward", vis_call, &c, fl_reps(o));
    r->vis_ok = !isnan(r->vis_ms);
    if (r->vis_ok) {
        printf("vision tower: %.2f ms, %.0f TF/s\n", r->vis_ms, tflops(r->vis_flop, r->vis_ms));
        fflush(stdout);
    }

    /* the dump: inputs, our outputs, then the weights */
    fl_dump d = {0};
    if (r->vis_ok) {
        int64_t cols = vc.in_channels * vc.temporal_patch_size * vc.patch_size * vc.patch_size;
        float *pcopy = malloc((size_t)(r->patches * cols) * sizeof *pcopy);
        if (pcopy) memcpy(pcopy, pix, (size_t)(r->patches * cols) * sizeof *pcopy);
        fl_dump_add(&d, "pixel_values", H3_ST_F32, 2, (int64_t[]){r->patches, cols}, pcopy);
        int64_t *g = malloc(3 * sizeof *g);
        if (g) memcpy(g, r->grid, 3 * sizeof *g);
        fl_dump_add(&d, "grid_thw", H3_ST_I64, 2, (int64_t[]){1, 3}, g);
        int64_t es[2] = {r->tokens, vc.out_hidden_size};
        fl_dump_add(&d, "ours.embeds", H3_ST_F32, 2, es, fl_download(&c.embeds, "embeds"));
        for (int k = 0; k < vc.n_deepstack; k++) {
            char name[64];
            snprintf(name, sizeof name, "ours.deepstack.%d", k);
            fl_dump_add(&d, name, H3_ST_F32, 2, es, fl_download(&c.ds[k], name));
        }
    }
    h3_arena_reset(B, mark);
    h3_vision_free(v); /* its weights freed before the export draws them again, one at a time */
    v = NULL;
    if (r->vis_ok) {
        t0 = now_ms();
        snprintf(path, sizeof path, "%s/vision_io.safetensors", dir);
        int ok = fl_dump_write(&d, path);
        h3_vision_tensor_info *list = NULL;
        int n = 0;
        if (ok && h3_vision_tensor_list(&vc, &list, &n, &st) != H3_OK) {
            fprintf(stderr, "h3-bench: fl2va: %s\n", st.message);
            ok = 0;
        }
        for (int i = 0; ok && i < n && !d.failed; i++)
            fl_export(&d, ck, list[i].name, list[i].ndim, list[i].shape, H3_WEIGHT_DEFAULT, 1);
        free(list);
        snprintf(path, sizeof path, "%s/vision_weights.safetensors", dir);
        double gb = (double)d.bytes / 1e9;
        ok = ok && fl_dump_write(&d, path);
        r->dump_vision = ok;
        printf("vision tower: %s %s (%.2f GB) in %.1f s\n", ok ? "weights written to" : "FAILED to write", path, gb,
               (now_ms() - t0) / 1e3);
        fflush(stdout);
    }
    fl_dump_free(&d);
done:
    h3_vision_free(v);
    h3_checkpoint_close(ck);
    free(pix);
}

/* ---- (b) the VAE encoder ------------------------------------------------------------------- */

typedef struct vae_ctx {
    h3_video_vae *vae;
    const uint8_t *rgb;
    float *mean, *logvar, *cond;
} vae_ctx;

static h3_status_code vae_call(void *opaque, h3_status *st) {
    vae_ctx *c = opaque;
    h3_video_vae_frames in = {.rgb = c->rgb, .frames = 1, .width = FL_W, .height = FL_H};
    return h3_video_vae_encode(c->vae, &in, c->mean, c->logvar, st);
}

static h3_status_code key_call(void *opaque, h3_status *st) {
    vae_ctx *c = opaque;
    return h3_video_vae_encode_keyframe(c->vae, c->rgb, FL_W, FL_H, 0, NULL, c->cond, st);
}

typedef struct vae_export {
    fl_dump *d;
    const h3_checkpoint *ck;
} vae_export;

/* The encoder's tensors as load_one loads them: convolution weights in the compute dtype, the rest float32. */
static h3_status_code vae_export_one(void *opaque, const h3_video_vae_tensor *t, h3_status *status) {
    vae_export *e = opaque;
    fl_export(e->d, e->ck, t->name, t->ndim, t->shape,
              t->role == H3_VIDEO_VAE_CONV_WEIGHT ? H3_WEIGHT_DEFAULT : H3_WEIGHT_F32, 0);
    return e->d->failed ? h3_fail(status, H3_ERR_NO_MEMORY, "%s: export failed", t->name) : H3_OK;
}

static void bench_vae(const bench_options *o, const char *dir, const uint8_t *rgb, fl_result *r) {
    char vdir[1100], path[1200];
    h3_status st;
    data_path("vae", vdir, sizeof vdir);
    h3_video_vae_options opts = {.encoder = 1};
    h3_checkpoint *ck = NULL;
    h3_video_vae *vae = NULL;
    double t0 = now_ms();
    h3_status_code rc = h3_video_vae_dummy_checkpoint_with(vdir, 20261204, &opts, &ck, &st);
    if (rc == H3_OK) rc = h3_video_vae_load_with(B, vdir, ck, &opts, &vae, &st);
    if (fl_fail("video VAE load", rc, &st)) goto done;
    r->vae_load_s = (now_ms() - t0) / 1e3;
    int C = h3_video_vae_latent_channels(vae), hl = FL_H / 16, wl = FL_W / 16;
    int ys[64], yo[64], xs[64], xo[64], tl;
    r->tiles = h3_video_vae_split_tiles(FL_H, 256, 64, 16, ys, yo, 64, &tl) *
               h3_video_vae_split_tiles(FL_W, 256, 64, 16, xs, xo, 64, &tl);
    size_t n = (size_t)C * hl * wl;
    vae_ctx c = {.vae = vae, .rgb = rgb, .mean = malloc(n * sizeof(float)), .logvar = malloc(n * sizeof(float)),
                 .cond = malloc(n * sizeof(float))};
    if (!c.mean || !c.logvar || !c.cond) {
        fprintf(stderr, "h3-bench: fl2va: no host memory for the moments\n");
        free(c.mean), free(c.logvar), free(c.cond);
        goto done;
    }
    printf("video VAE encoder: loaded (dummy, with the decoder) in %.1f s; one %dx%d keyframe, %d tiles of 256 px "
           "(warm-up + %d reps)...\n", r->vae_load_s, FL_W, FL_H, r->tiles, fl_reps(o));
    fflush(stdout);
    r->vae_ms = fl_time("video VAE encode", vae_call, &c, fl_reps(o));
    r->key_ms = fl_time("video VAE encode_keyframe", key_call, &c, fl_reps(o));
    r->vae_ok = !isnan(r->vae_ms);
    if (r->vae_ok) printf("video VAE encoder: encode %.2f ms; encode_keyframe (+ ε, f16, normalise) %.2f ms\n",
                          r->vae_ms, r->key_ms);
    fflush(stdout);
    if (r->vae_ok) {
        fl_dump d = {0};
        int64_t ms[4] = {C, 1, hl, wl};
        uint8_t *img = malloc((size_t)FL_W * FL_H * 3);
        if (img) memcpy(img, rgb, (size_t)FL_W * FL_H * 3);
        fl_dump_add(&d, "rgb", H3_ST_U8, 3, (int64_t[]){FL_H, FL_W, 3}, img);
        fl_dump_add(&d, "ours.mean", H3_ST_F32, 4, ms, c.mean);
        fl_dump_add(&d, "ours.logvar", H3_ST_F32, 4, ms, c.logvar);
        c.mean = c.logvar = NULL;
        snprintf(path, sizeof path, "%s/vae_io.safetensors", dir);
        int ok = fl_dump_write(&d, path);
        t0 = now_ms();
        vae_export e = {&d, ck};
        if (ok && h3_video_vae_encoder_tensors(vdir, vae_export_one, &e, &st) != H3_OK) {
            fprintf(stderr, "h3-bench: fl2va: VAE encoder export: %s\n", st.message);
            ok = 0;
        }
        snprintf(path, sizeof path, "%s/vae_encoder_weights.safetensors", dir);
        double gb = (double)d.bytes / 1e9;
        ok = ok && fl_dump_write(&d, path);
        fl_dump_free(&d);
        r->dump_vae = ok;
        printf("video VAE encoder: %s %s (%.2f GB) in %.1f s\n", ok ? "weights written to" : "FAILED to write", path,
               gb, (now_ms() - t0) / 1e3);
        fflush(stdout);
    }
    free(c.mean), free(c.logvar), free(c.cond);
done:
    h3_video_vae_free(vae);
    h3_checkpoint_close(ck);
}

/* ---- (d) the text encoder's extra tokens ---------------------------------------------------- */

/* The FL2VA presentation's extra rows and their tags (tags[extra], malloc'd), from the product's presentation
 * with and without the keyframe; 0 when it could not be built (the caller then uses the formula). */
static int presentation_extra(const h3_text_encoder *te, const uint8_t *rgb, int32_t **tags) {
    char path[1100];
    h3_status st;
    h3_tokenizer *tok = NULL;
    h3_image_processor_config pc;
    h3_text_presentation p0, p1;
    memset(&p0, 0, sizeof p0), memset(&p1, 0, sizeof p1);
    const char *prompt = "A red fox runs through fresh snow at dawn, the camera tracking low beside it.";
    h3_rgb_image img = {.width = FL_W, .height = FL_H, .stride = (size_t)FL_W * 3, .data = (uint8_t *)rgb};
    data_path("tokenizer", path, sizeof path);
    h3_status_code rc = h3_tokenizer_load(path, &tok, &st);
    data_path("processor", path, sizeof path);
    if (rc == H3_OK) rc = h3_image_processor_config_load(path, &pc, &st);
    if (rc == H3_OK) rc = h3_text_presentation_build(te, tok, &pc, prompt, NULL, 0, &p0, &st);
    if (rc == H3_OK) rc = h3_text_presentation_build(te, tok, &pc, prompt, &img, 1, &p1, &st);
    int extra = 0;
    if (rc == H3_OK && p1.n > p0.n) {
        extra = p1.n - p0.n;
        *tags = malloc((size_t)extra * sizeof **tags);
        if (*tags) memcpy(*tags, p1.tags, (size_t)extra * sizeof **tags); /* the keyframe block comes first */
        else extra = 0;
    } else {
        fprintf(stderr, "h3-bench: fl2va: presentation: %s\n", rc != H3_OK ? st.message : "no extra rows");
    }
    h3_text_presentation_clear(&p0);
    h3_text_presentation_clear(&p1);
    h3_tokenizer_free(tok);
    return extra;
}

typedef struct te_ctx {
    h3_text_encoder *te;
    int32_t *ids;
    int n;
    h3_tensor out;
} te_ctx;

static h3_status_code te_call(void *opaque, h3_status *st) {
    te_ctx *c = opaque;
    return h3_text_encoder_forward(c->te, c->ids, c->n, &c->out, st);
}

/* Sets r->extra_text (and *tags) and times the text encoder at FL_TEXT and FL_TEXT + extra tokens. */
static void bench_text(const bench_options *o, const uint8_t *rgb, fl_result *r, int32_t **tags) {
    char dir[1100];
    h3_status st;
    h3_checkpoint *ck = NULL;
    h3_text_encoder *te = NULL;
    data_path("text_encoder", dir, sizeof dir);
    double t0 = now_ms();
    h3_status_code rc = h3_text_encoder_dummy_checkpoint(dir, FL_TE_LAYERS, 20261205, &ck, &st);
    if (rc == H3_OK) rc = h3_text_encoder_load_from(B, dir, ck, FL_TE_LAYERS, NULL, &te, &st);
    if (!fl_fail("text encoder load", rc, &st)) {
        r->extra_text = presentation_extra(te, rgb, tags);
        r->extra_exact = r->extra_text > 0;
    }
    if (!r->extra_exact) { /* "<Picture 1>: " (6 ids), <|vision_start|>, the image tokens, <|vision_end|> */
        r->extra_text = (int)(6 + 1 + (FL_W / 32) * (FL_H / 32) + 1);
        free(*tags);
        *tags = malloc((size_t)r->extra_text * sizeof **tags);
        for (int i = 0; *tags && i < r->extra_text; i++) (*tags)[i] = i < 6 ? H3_TEXT_TAG_TEXT : H3_TEXT_TAG_VISION;
        printf("text encoder: extra FL2VA rows from the formula (6 + 1 + %d + 1)\n", (FL_W / 32) * (FL_H / 32));
    }
    if (!te) goto done;
    printf("text encoder: %d of %d layers (dummy) in %.1f s; T2VA %d tokens, FL2VA %d (+%d, %s)...\n", FL_TE_LAYERS,
           FL_TE_TAP, (now_ms() - t0) / 1e3, FL_TEXT, FL_TEXT + r->extra_text, r->extra_text,
           r->extra_exact ? "from h3_text_presentation_build" : "formula");
    fflush(stdout);
    int L1 = FL_TEXT + r->extra_text;
    int32_t *ids = malloc((size_t)L1 * sizeof *ids);
    if (!ids) goto done;
    uint64_t s = 7;
    for (int i = 0; i < L1; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        ids[i] = (int32_t)((s >> 33) % (uint64_t)h3_text_encoder_get_config(te)->vocab_size);
    }
    size_t mark = h3_arena_mark(B);
    te_ctx c0 = {te, ids, FL_TEXT, h3_new_2d(B, h3_backend_compute_dtype(B), FL_TEXT, h3_text_encoder_hidden_size(te))};
    te_ctx c1 = {te, ids, L1, h3_new_2d(B, h3_backend_compute_dtype(B), L1, h3_text_encoder_hidden_size(te))};
    r->te_ms0 = fl_time("text encoder T2VA", te_call, &c0, fl_reps(o));
    r->te_ms1 = fl_time("text encoder FL2VA", te_call, &c1, fl_reps(o));
    r->te_ok = !isnan(r->te_ms0) && !isnan(r->te_ms1);
    if (r->te_ok)
        printf("text encoder: %d layers %.2f ms at %d tokens, %.2f ms at %d\n", FL_TE_LAYERS, r->te_ms0, FL_TEXT,
               r->te_ms1, L1);
    fflush(stdout);
    h3_arena_reset(B, mark);
    free(ids);
done:
    h3_text_encoder_free(te);
    h3_checkpoint_close(ck);
}

/* ---- (d) the DiT's extra rows ------------------------------------------------------------------ */

typedef struct dit_run {
    h3_dit *dit;
    h3_dit_layout *l;
    h3_tensor text, xv, xa, vv, va;
    float ts[H3_DIT_MAX_TIMESTEPS];
    int n_t;
    int32_t *row_index;
} dit_run;

static h3_status_code dit_call(void *opaque, h3_status *st) {
    dit_run *f = opaque;
    return h3_dit_forward(f->dit, &f->xv, &f->xa, f->ts, f->n_t, f->row_index, &f->vv, &f->va, st);
}

/* t uniform in [lo, hi) on the backend (the dummy-weight generator, so any backend). */
static void fl_fill(h3_tensor *t, const char *name, float lo, float hi) {
    h3_st_random v = {.key = h3_counter_key(next_seed(), name), .lo = lo, .hi = hi};
    h3_op_fill_random(B, t, &v, H3_ST_F32);
}

/* One layout (keyframes 0: T2VA, 1: a first keyframe) timed: begin once, forward median. */
static int dit_one(const bench_options *o, h3_dit *dit, const h3_dit_config *cfg, int blocks, int keyframe,
                   const int32_t *vtags, int extra, int64_t *S, int64_t *cond, double *begin_ms, double *fwd_ms) {
    h3_status st;
    int L = FL_TEXT + (keyframe ? extra : 0);
    int32_t *tags = malloc((size_t)L * sizeof *tags);
    if (!tags) return 0;
    for (int i = 0; i < L; i++) tags[i] = keyframe && i < extra ? vtags[i] : H3_TAG_TEXT;
    h3_dit_layout_params lp = {.text_token_tags = tags, .num_text = L, .num_latent_frames = 37,
                               .latent_height = FL_H / 16, .latent_width = FL_W / 16, .num_audio_latents = 207,
                               .patch_t = cfg->patch_t, .patch_h = cfg->patch_h, .patch_w = cfg->patch_w,
                               .num_keyframes = keyframe, .anchors = {H3_ANCHOR_FIRST}};
    dit_run f;
    memset(&f, 0, sizeof f);
    f.dit = dit;
    h3_status_code rc = h3_dit_layout_build(&lp, &f.l, &st);
    free(tags);
    if (fl_fail("DiT layout", rc, &st)) return 0;
    *S = f.l->seq_len;
    *cond = f.l->num_condition_rows;
    size_t mark = h3_arena_mark(B);
    int64_t vf = (int64_t)cfg->in_channels * cfg->patch_h * cfg->patch_w, af = cfg->audio_in_channels;
    f.text = h3_new_2d(B, h3_backend_compute_dtype(B), L, cfg->text_dim);
    f.xv = h3_new_2d(B, H3_F32, f.l->num_video_rows, vf);
    f.xa = h3_new_2d(B, H3_F32, f.l->num_audio_rows, af);
    f.vv = h3_new_2d(B, H3_F32, f.l->num_video_rows, vf);
    f.va = h3_new_2d(B, H3_F32, f.l->num_audio_rows, af);
    fl_fill(&f.text, "text", -1, 1);
    fl_fill(&f.xv, "video", -1.7f, 1.7f);
    fl_fill(&f.xa, "audio", -1.7f, 1.7f);
    f.row_index = malloc((size_t)f.l->seq_len * sizeof *f.row_index);
    rc = f.row_index ? h3_dit_layout_timesteps(f.l, 0.3f, 0.6f, f.ts, &f.n_t, f.row_index, &st)
                     : h3_fail(&st, H3_ERR_NO_MEMORY, "out of host memory");
    int ok = 0;
    if (!fl_fail("DiT inputs", rc, &st)) {
        double t0 = now_ms();
        rc = h3_dit_begin(dit, f.l, &f.text, &st);
        if (!fl_fail("DiT begin", rc, &st)) {
            *begin_ms = now_ms() - t0;
            *fwd_ms = fl_time(keyframe ? "DiT forward FL2VA" : "DiT forward T2VA", dit_call, &f, fl_reps(o));
            ok = !isnan(*fwd_ms);
            if (ok)
                printf("DiT: %s S %lld (%lld text, %lld condition rows): begin %.1f ms, forward of %d blocks %.1f ms\n",
                       keyframe ? "FL2VA" : "T2VA ", (long long)*S, (long long)L, (long long)*cond, *begin_ms,
                       blocks, *fwd_ms);
            fflush(stdout);
        }
        h3_dit_end(dit);
    }
    h3_arena_reset(B, mark);
    free(f.row_index);
    h3_dit_layout_free(f.l);
    return ok;
}

static void bench_dit(const bench_options *o, const int32_t *vtags, fl_result *r) {
    h3_dit_config cfg;
    release_dit_config(&cfg);
    h3_status st;
    h3_dit *dit = NULL;
    r->dit_blocks = cfg.num_layers < FL_DIT_BLOCKS ? (int)cfg.num_layers : FL_DIT_BLOCKS;
    printf("DiT: building %d random blocks...\n", r->dit_blocks);
    fflush(stdout);
    h3_status_code rc = h3_dit_create_random(B, &cfg, r->dit_blocks, 20261206, NULL, &dit, &st);
    if (fl_fail("DiT random model", rc, &st)) return;
    int64_t c0 = 0;
    r->dit_ok = dit_one(o, dit, &cfg, r->dit_blocks, 0, vtags, r->extra_text, &r->s_t2va, &c0, &r->begin_ms0, &r->dit_ms0) &&
                dit_one(o, dit, &cfg, r->dit_blocks, 1, vtags, r->extra_text, &r->s_fl2va, &r->cond_rows, &r->begin_ms1, &r->dit_ms1);
    h3_dit_free(dit);
}

/* ---- the reference and the report ----------------------------------------------------------------- */

static JsonNode *fl_reference(const bench_options *o, const char *dir, const fl_result *r) {
    char cmd[8192], script[2048], te[1100], vae[1100];
    reference_script(o, "h3_fl2va_reference.py", script, sizeof script);
    data_path("text_encoder/config.json", te, sizeof te);
    data_path("vae/config.json", vae, sizeof vae);
    snprintf(cmd, sizeof cmd, "timeout 240 %s %s --dump %s --te-config %s --vae-config %s --reps %d%s%s 2>&1",
             o->python, script, dir, te, vae, fl_reps(o), r->dump_vision ? "" : " --skip-vision",
             r->dump_vae ? "" : " --skip-vae");
    return run_python_json(cmd, "H3FL2VA ");
}

static const char *verdict(double rel, double tol) { return isnan(rel) ? "n/a" : rel <= tol ? "ok" : "HIGH"; }

static void report(fl_result *r, JsonNode *ref, int final) {
    double tv = ref_num(ref, "vision.ms"), pv = ref_num(ref, "vision.rel_l2"), pd = ref_num(ref, "vision.rel_l2_deepstack");
    double te = ref_num(ref, "vae.bf16.ms"), pe = ref_num(ref, "vae.bf16.rel_l2");
    double tf = ref_num(ref, "vae.fp32.ms"), pf = ref_num(ref, "vae.fp32.rel_l2");
    double tt = ref_num(ref, "vae.bf16_lasttap.ms"), pt = ref_num(ref, "vae.bf16_lasttap.rel_l2");
    printf("\n%sFL2VA keyframe, %dx%d (%lld patches -> %lld vision tokens; VAE %d tiles of 256 px):\n",
           final ? "" : "[ours alone, before the reference] ", FL_W, FL_H, (long long)r->patches, (long long)r->tokens,
           r->tiles);
    printf("%-44s %10s %10s %9s %12s\n", "", "ours ms", "torch ms", "speedup", "relL2 (tol)");
    printf("%-44s %10.2f %10.2f %8.2fx %9.2e %s\n", "vision tower (bf16)", r->vis_ms, tv, tv / r->vis_ms, pv,
           verdict(pv, 2e-2));
    printf("%-44s %10s %10s %9s %9.2e %s\n", "  its DeepStack features (all mergers)", "", "", "", pd, verdict(pd, 2e-2));
    printf("%-44s %10.2f %10.2f %8.2fx %9.2e %s\n", "VAE encoder, torch bf16 conv3d (causal pad)", r->vae_ms, te,
           te / r->vae_ms, pe, verdict(pe, 2e-2));
    printf("%-44s %10.2f %10.2f %8.2fx %9.2e %s\n", "VAE encoder, torch bf16 last tap only", r->vae_ms, tt,
           tt / r->vae_ms, pt, verdict(pt, 2e-2));
    printf("%-44s %10.2f %10.2f %8.2fx %9.2e %s\n", "VAE encoder, torch fp32/TF32 (official)", r->vae_ms, tf,
           tf / r->vae_ms, pf, verdict(pf, 2e-2));
    if (r->vis_ok)
        printf("vision tower: %.2f TFLOP at %dx%d (the spec's 5.71 is 1344x768's 4032 patches): ours %.0f TF/s, "
               "torch %.0f TF/s\n", r->vis_flop / 1e12, FL_W, FL_H, tflops(r->vis_flop, r->vis_ms),
               tflops(r->vis_flop, tv));
    if (!ref) printf("(no PyTorch reference result: see the reference's output above)\n");

    /* the surcharge */
    double te_extra = r->te_ok ? (r->te_ms1 - r->te_ms0) * FL_TE_TAP / FL_TE_LAYERS : NAN;
    double fwd_extra = r->dit_ok ? (r->dit_ms1 - r->dit_ms0) * 50.0 / r->dit_blocks : NAN;
    double begin_extra = r->dit_ok ? r->begin_ms1 - r->begin_ms0 : NAN;
    double vis = r->vis_ok ? r->vis_ms : NAN, vae = r->vae_ok ? r->key_ms : NAN;
    printf("\nFL2VA surcharge over T2VA, one first keyframe, 1280x736x124, %d steps (each term measured on the "
           "product's code in this run):\n", FL_STEPS);
    printf("  vision tower (h3_vision_forward)                               %9.1f ms\n", vis);
    printf("  VAE encode of the keyframe (h3_video_vae_encode_keyframe)      %9.1f ms\n", vae);
    printf("  text encoder, +%d tokens over %d (%d layers at both lengths,\n"
           "    x %d/%d: (%.2f - %.2f) ms)                                  %9.1f ms\n",
           r->extra_text, FL_TEXT, FL_TE_LAYERS, FL_TE_TAP, FL_TE_LAYERS, r->te_ms1, r->te_ms0, te_extra);
    printf("  DiT begin (text refiner over the extra rows, once; one run each) %7.1f ms\n", begin_extra);
    printf("  DiT: S %lld -> %lld (+%d text rows, +%lld condition rows): %d blocks\n"
           "    (%.1f - %.1f) ms x 50/%d = %+.1f ms per forward, x %d steps   %9.1f ms\n",
           (long long)r->s_t2va, (long long)r->s_fl2va, r->extra_text, (long long)r->cond_rows, r->dit_blocks, r->dit_ms1,
           r->dit_ms0, r->dit_blocks, fwd_extra, FL_STEPS, fwd_extra * FL_STEPS);
    double total = vis + vae + te_extra + begin_extra + fwd_extra * FL_STEPS;
    r->surcharge_text_ms = te_extra, r->surcharge_fwd_ms = fwd_extra, r->surcharge_s = total / 1e3;
    printf("an FL2VA clip costs %.1f s more than T2VA (first+last keyframes: about %.1f s)\n",
           total / 1e3,
           (2 * (vis + vae) + 2 * te_extra + 2 * begin_extra + 2 * fwd_extra * FL_STEPS) / 1e3);
    printf("  (first+last is estimated as twice one keyframe: the extra rows double; attention's quadratic term "
           "makes it slightly more)\n");
    fflush(stdout);
}

#define FL_MARKER "<!-- fl2va-runs -->"
#define FL_TABLE                                                                                                     \
    "\n## FL2VA: what a keyframe costs (`h3-bench --fl2va`, one 1280x736 first keyframe, 49 steps)\n\n"                 \
    "| date (UTC) | GPU | commit | vision tower ms (TF/s) | torch ms | speedup | relL2 | VAE encode ms | torch bf16 / "    \
    "last-tap / fp32 ms | speedup (bf16) | relL2 (bf16) | text encoder +ms | DiT +ms per forward | FL2VA - T2VA s |\n" \
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"

/* The run's PERFORMANCE.md row: printed, and with --perf-md inserted before FL_MARKER (the table and the
 * marker appended to the file first when it has none). */
static void fl_record(const bench_options *o, const char *gpu, const fl_result *r, JsonNode *ref) {
    char row[2048], date[32];
    double tv = ref_num(ref, "vision.ms"), pv = ref_num(ref, "vision.rel_l2");
    double te = ref_num(ref, "vae.bf16.ms"), tt = ref_num(ref, "vae.bf16_lasttap.ms"), tf = ref_num(ref, "vae.fp32.ms");
    double pe = ref_num(ref, "vae.bf16.rel_l2");
    perf_date(date, sizeof date);
    snprintf(row, sizeof row,
             "| %s | %s | %s | %.2f (%.0f) | %.2f | %.2fx | %.1e | %.1f | %.1f / %.1f / %.1f | %.2fx | %.1e | %.0f | "
             "%+.0f | %.2f |\n",
             date, gpu, o->commit, r->vis_ms, tflops(r->vis_flop, r->vis_ms), tv, tv / r->vis_ms, pv, r->vae_ms, te,
             tt, tf, te / r->vae_ms, pe, r->surcharge_text_ms, r->surcharge_fwd_ms, r->surcharge_s);
    printf("PERFORMANCE.md row: %s", row);
    if (!o->perf_md) return;
    if (perf_insert_before(o->perf_md, FL_MARKER, row)) {
        printf("recorded in %s\n", o->perf_md);
        return;
    }
    char table[4096];
    snprintf(table, sizeof table, "%s%s%s\n", FL_TABLE, row, FL_MARKER);
    if (perf_append(o->perf_md, table)) printf("appended the FL2VA table and its first row to %s\n", o->perf_md);
    else fprintf(stderr, "h3-bench: cannot append to %s; FL2VA row not recorded\n", o->perf_md);
}

void fl2va_bench(const bench_options *o, const char *gpu) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/fl2va-bench", o->dump_dir);
    mkdir(o->dump_dir, 0755);
    mkdir(dir, 0755);
    fl_result r;
    memset(&r, 0, sizeof r);
    r.vis_ms = r.vae_ms = r.key_ms = r.te_ms0 = r.te_ms1 = r.dit_ms0 = r.dit_ms1 = NAN;
    double t0 = now_ms();
    printf("\nFL2VA: the vision tower and VAE encoder of one %dx%d keyframe, the extra text and DiT rows "
           "(dump: %s)\n", FL_W, FL_H, dir);
    fflush(stdout);
    uint8_t *rgb = make_keyframe();
    if (!rgb) {
        fprintf(stderr, "h3-bench: fl2va: out of host memory\n");
        return;
    }
    int32_t *vtags = NULL;
    bench_vision(o, dir, rgb, &r);
    bench_vae(o, dir, rgb, &r);
    bench_text(o, rgb, &r, &vtags);
    if (vtags) bench_dit(o, vtags, &r);
    printf("FL2VA: our side done in %.1f s\n", (now_ms() - t0) / 1e3);
    report(&r, NULL, 0); /* ours first: it stands whatever the reference does */
    JsonNode *ref = NULL;
    if (strcmp(o->reference, "none") && (r.dump_vision || r.dump_vae)) {
        ref = fl_reference(o, dir, &r);
        report(&r, ref, 1);
    }
    fl_record(o, gpu, &r, ref);
    if (ref) json_node_unref(ref);
    free(vtags);
    free(rgb);
    printf("FL2VA: section done in %.1f s\n", (now_ms() - t0) / 1e3);
}
