/* test_gpu_goldens.c - the tiny-model goldens on the CUDA backend, component
 * by component and end to end through the engine, twice:
 *
 *  - exact mode (h3_backend_cuda_create_exact: float32 weights and
 *    activations, the same kernels): every component within the goldens'
 *    float32 tolerance (1e-4 relative L2; end to end 1e-3, uint8 +-1). This
 *    is what proves the kernels compute the reference's function.
 *  - production mode (bf16 compute, fp16 video VAE, fp32 audio VAE and
 *    islands): relative L2 <= 1e-2 (bf16 rounding over a few layers), against the official bf16
 *    golden where one exists. Two places drift further for a known reason and
 *    are held to a measured bound instead, see TEXT_BF16_TOLERANCE and
 *    test_engine.
 *
 * Skips (exit 77) with the reason when there is no CUDA backend or GPU. */
#include <glib.h>
#include <stdint.h>

#include "h3.h"
#include "engine/h3_engine.h" /* h3_engine_inject_fault_mid_forward */
#include "model/h3_audio_vae.h"
#include "backend/h3_backend.h"
#ifdef H3_HAVE_CUDA
#include "backend/cuda/h3_backend_cuda.h"
#endif
#include "model/h3_dit.h"
#include "model/h3_dit_layout.h"
#include "base/h3_safetensors.h"
#include "h3_test.h"
#include "h3_test_golden.h"
#include "h3_test_capture.h"
#include "h3_test_model.h" /* damaged copies of the tiny model */
#include "model/h3_image.h"
#include "model/h3_text_encoder.h"
#include "model/h3_tokenizer.h"
#include "model/h3_video_vae.h"
#include "model/h3_video_vae_encoder.h"
#include "model/h3_vision.h"

#ifndef H3_HAVE_CUDA
int main(void) {
    printf("SKIP: this build has no CUDA backend (meson -Dcuda=enabled with nvcc)\n");
    return 77;
}
#else
#define BF16_TOLERANCE 1e-2
#define F32_TOLERANCE 1e-4
#define E2E_F32_TOLERANCE 1e-3
/* The conditioner taps layer 50 of the tiny model's 52: fifty layers of bf16
 * residual adds on a 40-wide hidden state. The reference's own bf16 run
 * (tools/h3_text_encoder_reference.py: the spec's rounding points, torch
 * on the H200) lands TEXT_BF16_REFERENCE from the float32 golden; ours must
 * stay within 1.5 times that. */
#define TEXT_BF16_REFERENCE 2.5e-2 /* measured 2026-12-03 on the H200: 2.49e-2 (ours: 2.59e-2) */
#define TEXT_BF16_TOLERANCE (1.5 * TEXT_BF16_REFERENCE)

static h3_backend *gpu;
static int exact; /* gpu is in exact (float32) mode */
static const char *mode_name(void) { return exact ? "exact f32" : "bf16"; }

static float *read_golden(h3_st_file *f, const char *name, size_t *n) {
    float *v = NULL;
    const h3_st_tensor *t = NULL;
    h3_status st = {0};
    if (h3_st_read_f32(f, name, &v, &t, &st) != H3_OK) {
        CHECK(0, "golden %s: %s", name, st.message);
        return NULL;
    }
    if (n) *n = (size_t)t->numel;
    return v;
}

static int32_t *read_i32(h3_st_file *f, const char *name, size_t *n) {
    const h3_st_tensor *t = h3_st_find(f, name);
    if (!t || t->dtype != H3_ST_I64) {
        CHECK(0, "golden %s missing or not int64", name);
        return NULL;
    }
    int32_t *v = malloc((size_t)t->numel * sizeof *v);
    for (int64_t i = 0; i < t->numel; i++) {
        int64_t x;
        memcpy(&x, (const char *)t->data + 8 * i, 8);
        v[i] = (int32_t)x;
    }
    if (n) *n = (size_t)t->numel;
    return v;
}

static h3_tensor upload(const float *host, int64_t rows, int64_t cols, h3_dtype dtype) {
    h3_tensor t = h3_new_2d(gpu, dtype, rows, cols);
    h3_status st = {0};
    if (t.data) CHECK(h3_tensor_upload_f32(gpu, &t, host, &st) == H3_OK, "upload: %s", st.message);
    return t;
}

/* The DiT against the bf16 golden (same inputs as transformer_t2va). */
static void test_dit(void) {
    h3_dit *dit = NULL;
    h3_status st = {0};
    if (h3_dit_load(gpu, h3_test_data("models/tiny-h3/transformer"), &dit, &st) != H3_OK) {
        CHECK(0, "dit load: %s", st.message);
        return;
    }
    h3_st_file *f = golden_tiny("transformer_t2va_bf16");
    h3_st_file *f32 = golden_tiny("transformer_t2va");
    if (!f || !f32) return;
    const h3_dit_config *c = h3_dit_get_config(dit);
    int32_t tags[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    h3_dit_layout_params p = {.text_token_tags = tags, .num_text = 8, .num_latent_frames = 37, .latent_height = 4,
                              .latent_width = 6, .num_audio_latents = 207, .patch_t = 1, .patch_h = 2, .patch_w = 2};
    h3_dit_layout *l = NULL;
    CHECK(h3_dit_layout_build(&p, &l, &st) == H3_OK, "layout: %s", st.message);
    size_t n_t = 0, n_idx = 0;
    float *text = read_golden(f, "encoder_hidden_states", NULL), *video = read_golden(f, "hidden_states", NULL);
    float *audio = read_golden(f, "audio_hidden_states", NULL), *ts = read_golden(f, "timestep", &n_t);
    float *want_v = read_golden(f, "sample", NULL), *want_a = read_golden(f, "audio_sample", NULL);
    float *f32_v = read_golden(f32, "sample", NULL), *f32_a = read_golden(f32, "audio_sample", NULL);
    int32_t *idx = read_i32(f, "timestep_indices", &n_idx);
    if (l && text && video && audio && ts && idx && want_v && want_a && (int64_t)n_idx == l->seq_len) {
        size_t mark = h3_arena_mark(gpu);
        int vf = c->in_channels * c->patch_h * c->patch_w, af = c->audio_in_channels;
        h3_tensor t = upload(text, 8, c->text_dim, h3_backend_compute_dtype(gpu));
        h3_tensor v = upload(video, l->num_video_rows, vf, H3_F32), a = upload(audio, l->num_audio_rows, af, H3_F32);
        h3_tensor vv = h3_new_2d(gpu, H3_F32, l->num_video_rows, vf), av = h3_new_2d(gpu, H3_F32, l->num_audio_rows, af);
        h3_status_code rc = h3_dit_begin(dit, l, &t, &st);
        if (rc == H3_OK) rc = h3_dit_forward(dit, &v, &a, ts, (int)n_t, idx, &vv, &av, &st);
        CHECK(rc == H3_OK, "dit forward: %s", st.message);
        if (rc == H3_OK) {
            size_t nv = (size_t)(l->num_video_rows * vf), na = (size_t)(l->num_audio_rows * af);
            float *gv = malloc(nv * 4), *ga = malloc(na * 4);
            h3_tensor_download_f32(gpu, &vv, gv, &st);
            h3_tensor_download_f32(gpu, &av, ga, &st);
            double ev = h3_test_rel_l2(gv, want_v, nv), ea = h3_test_rel_l2(ga, want_a, na);
            double ev32 = h3_test_rel_l2(gv, f32_v, nv), ea32 = h3_test_rel_l2(ga, f32_a, na);
            double ref_v = h3_test_rel_l2(want_v, f32_v, nv), ref_a = h3_test_rel_l2(want_a, f32_a, na);
            printf("gpu dit (%s) vs bf16 golden: video %.3e audio %.3e; vs f32 golden: video %.3e audio %.3e "
                   "(reference bf16 vs f32: %.3e / %.3e)\n", mode_name(), ev, ea, ev32, ea32, ref_v, ref_a);
            if (exact)
                CHECK(ev32 <= F32_TOLERANCE && ea32 <= F32_TOLERANCE, "dit f32 parity %.3e %.3e", ev32, ea32);
            else
                CHECK(ev <= BF16_TOLERANCE && ea <= BF16_TOLERANCE, "dit bf16 parity %.3e %.3e", ev, ea);
            free(gv);
            free(ga);
        }
        h3_dit_end(dit);
        h3_arena_reset(gpu, mark);
    }
    free(text); free(video); free(audio); free(ts); free(want_v); free(want_a); free(f32_v); free(f32_a); free(idx);
    h3_dit_layout_free(l);
    h3_st_close(f);
    h3_st_close(f32);
    h3_dit_free(dit);
}

static void test_text_encoder(void) {
    h3_text_encoder *te = NULL;
    h3_status st = {0};
    if (h3_text_encoder_load(gpu, h3_test_data("models/tiny-h3/text_encoder"), 50, &te, &st) != H3_OK) {
        CHECK(0, "text encoder load: %s", st.message);
        return;
    }
    h3_st_file *f = golden_tiny("text_encoder");
    size_t n = 0, ne = 0;
    int32_t *ids = f ? read_i32(f, "t2va.input_ids", &n) : NULL;
    float *want = f ? read_golden(f, "t2va.prompt_embeds", &ne) : NULL;
    if (ids && want) {
        size_t mark = h3_arena_mark(gpu);
        int D = h3_text_encoder_hidden_size(te);
        h3_tensor out = h3_new_2d(gpu, h3_backend_compute_dtype(gpu), (int64_t)n, D);
        float *got = malloc(ne * 4);
        h3_status_code rc = h3_text_encoder_forward(te, ids, (int)n, &out, &st);
        if (rc == H3_OK) rc = h3_tensor_download_f32(gpu, &out, got, &st);
        CHECK(rc == H3_OK, "text encoder: %s", st.message);
        if (rc == H3_OK) {
            double e = h3_test_rel_l2(got, want, ne), worst = 1;
            for (size_t r = 0; r < n; r++) {
                double c = h3_test_cosine(got + r * D, want + r * D, (size_t)D);
                worst = c < worst ? c : worst;
            }
            printf("gpu text encoder (%s): rel L2 %.3e, min row cosine %.6f\n", mode_name(), e, worst);
            CHECK(e <= (exact ? F32_TOLERANCE : TEXT_BF16_TOLERANCE), "text encoder (%s) rel L2 %.3e", mode_name(),
                  e);
            CHECK(exact || worst >= 0.999, "text encoder (bf16) min row cosine %.6f", worst);
        }
        free(got);
        h3_arena_reset(gpu, mark);
    }
    free(ids);
    free(want);
    h3_st_close(f);
    h3_text_encoder_free(te);
}

/* The golden keyframe (on the 64x32 canvas) twice: FL2VA first + last. */
static int fl2va_keyframes(h3_st_file *f, h3_rgb_image kf[2]) {
    const h3_st_tensor *t = f ? h3_st_find(f, "fl2va.keyframe_uint8") : NULL;
    if (!t || t->dtype != H3_ST_U8 || t->ndim != 3) return 0;
    kf[0] = (h3_rgb_image){(int)t->shape[1], (int)t->shape[0], (size_t)t->shape[1] * 3, (uint8_t *)t->data};
    kf[1] = kf[0];
    return 1;
}

/* The vision tower alone on one and two keyframes, against the CPU float32
 * reference on the same weights: merger and DeepStack outputs. */
static void test_vision_tower(void) {
    h3_status st = {0};
    h3_backend *cpu = NULL;
    h3_checkpoint *ck = NULL;
    h3_config *c = NULL;
    h3_vision_config vc;
    h3_vision *vg = NULL, *vr = NULL;
    h3_st_file *f = golden_tiny("text_encoder");
    h3_image_processor_config proc;
    h3_rgb_image kf[2];
    const char *dir = h3_test_data("models/tiny-h3/text_encoder");
    char *cfg_path = g_build_filename(dir, "config.json", NULL);
    h3_status_code rc = h3_backend_cpu_create(2, &cpu, &st);
    if (rc == H3_OK) rc = h3_config_load(cfg_path, &c, &st);
    if (rc == H3_OK) rc = h3_vision_config_read(c, &vc, &st);
    if (rc == H3_OK) rc = h3_checkpoint_open(dir, &ck, &st);
    if (rc == H3_OK) rc = h3_vision_load(gpu, &vc, ck, &vg, &st);
    if (rc == H3_OK) rc = h3_vision_load(cpu, &vc, ck, &vr, &st);
    if (rc == H3_OK) rc = h3_image_processor_config_load(h3_test_data("models/tiny-h3/processor"), &proc, &st);
    if (rc == H3_OK && !fl2va_keyframes(f, kf)) rc = h3_fail(&st, H3_ERR_NOT_FOUND, "fl2va.keyframe_uint8");
    CHECK(rc == H3_OK, "vision tower setup: %s", st.message);
    float *pv = NULL;
    int64_t grid[2][3];
    if (rc == H3_OK) rc = h3_image_process(&proc, &kf[0], &pv, grid[0], &st);
    for (int n_img = 1; n_img <= 2 && rc == H3_OK; n_img++) {
        memcpy(grid[1], grid[0], sizeof grid[0]);
        int64_t rows = grid[0][0] * grid[0][1] * grid[0][2], tokens = n_img * h3_vision_tokens(vg, grid[0]);
        float *pix = malloc((size_t)(n_img * rows * 1536) * sizeof *pix);
        for (int i = 0; i < n_img; i++) memcpy(pix + i * rows * 1536, pv, (size_t)(rows * 1536) * sizeof *pix);
        int64_t O = vc.out_hidden_size;
        size_t n_out = (size_t)(tokens * O);
        float *got = malloc(n_out * sizeof *got), *want = malloc(n_out * sizeof *want);
        for (int k = 0; k <= vc.n_deepstack && rc == H3_OK; k++) {
            h3_backend *bs[2] = {gpu, cpu};
            h3_vision *vs[2] = {vg, vr};
            float *dst[2] = {got, want};
            for (int j = 0; j < 2 && rc == H3_OK; j++) {
                h3_dtype dt = h3_backend_compute_dtype(bs[j]);
                size_t mark = h3_arena_mark(bs[j]);
                h3_tensor e = h3_new_2d(bs[j], dt, tokens, O), d[H3_VISION_MAX_DEEPSTACK];
                for (int q = 0; q < vc.n_deepstack; q++) d[q] = h3_new_2d(bs[j], dt, tokens, O);
                rc = h3_vision_forward(vs[j], pix, (const int64_t(*)[3])grid, n_img, &e, d, &st);
                if (rc == H3_OK) rc = h3_tensor_download_f32(bs[j], k ? &d[k - 1] : &e, dst[j], &st);
                h3_arena_reset(bs[j], mark);
            }
            CHECK(rc == H3_OK, "vision forward: %s", st.message);
            if (rc != H3_OK) break;
            double err = h3_test_rel_l2(got, want, n_out);
            printf("gpu vision tower (%s), %d keyframe(s), %s: rel L2 %.3e\n", mode_name(), n_img,
                   k ? "deepstack" : "merger", err);
            CHECK(err <= (exact ? F32_TOLERANCE : BF16_TOLERANCE), "vision tower (%s) output %d rel L2 %.3e",
                  mode_name(), k, err);
        }
        free(got);
        free(want);
        free(pix);
    }
    free(pv);
    g_free(cfg_path);
    h3_vision_free(vg);
    h3_vision_free(vr);
    h3_checkpoint_close(ck);
    h3_config_free(c);
    h3_st_close(f);
    if (cpu) h3_backend_destroy(cpu);
}

/* The FL2VA conditioner end to end (presentation, vision tower, image rows,
 * DeepStack, 50 layers) against the float32 golden fl2va.prompt_embeds. */
static void test_text_encoder_fl2va(void) {
    h3_status st = {0};
    h3_text_encoder *te = NULL;
    h3_tokenizer *tok = NULL;
    h3_image_processor_config proc;
    h3_text_presentation p = {0};
    h3_rgb_image kf[2];
    h3_st_file *f = golden_tiny("text_encoder");
    h3_status_code rc = h3_text_encoder_load(gpu, h3_test_data("models/tiny-h3/text_encoder"), 50, &te, &st);
    if (rc == H3_OK) rc = h3_tokenizer_load(h3_test_data("models/tiny-h3/tokenizer"), &tok, &st);
    if (rc == H3_OK) rc = h3_image_processor_config_load(h3_test_data("models/tiny-h3/processor"), &proc, &st);
    if (rc == H3_OK && !fl2va_keyframes(f, kf)) rc = h3_fail(&st, H3_ERR_NOT_FOUND, "fl2va.keyframe_uint8");
    if (rc == H3_OK) rc = h3_text_presentation_build(te, tok, &proc, "a robot dancing", kf, 1, &p, &st);
    CHECK(rc == H3_OK, "fl2va setup: %s", st.message);
    size_t ne = 0;
    float *want = rc == H3_OK ? read_golden(f, "fl2va.prompt_embeds", &ne) : NULL;
    if (want && ne == (size_t)p.n * (size_t)h3_text_encoder_hidden_size(te)) {
        int D = h3_text_encoder_hidden_size(te);
        size_t mark = h3_arena_mark(gpu);
        h3_tensor out = h3_new_2d(gpu, h3_backend_compute_dtype(gpu), p.n, D);
        float *got = malloc(ne * sizeof *got);
        rc = h3_text_encoder_encode(te, &p, &out, &st);
        if (rc == H3_OK) rc = h3_tensor_download_f32(gpu, &out, got, &st);
        CHECK(rc == H3_OK, "fl2va encode: %s", st.message);
        if (rc == H3_OK) {
            double e = h3_test_rel_l2(got, want, ne), worst = 1;
            for (int r = 0; r < p.n; r++) {
                double cs = h3_test_cosine(got + (size_t)r * D, want + (size_t)r * D, (size_t)D);
                worst = cs < worst ? cs : worst;
            }
            printf("gpu text encoder fl2va (%s): rel L2 %.3e, min row cosine %.6f\n", mode_name(), e, worst);
            /* bf16: the t2va bound (fifty bf16 layers) plus the tower's rows; cosine a little looser */
            CHECK(e <= (exact ? F32_TOLERANCE : TEXT_BF16_TOLERANCE), "fl2va text encoder (%s) rel L2 %.3e",
                  mode_name(), e);
            CHECK(exact || worst >= 0.998, "fl2va text encoder (bf16) min row cosine %.6f", worst);
        }
        free(got);
        h3_arena_reset(gpu, mark);
    } else if (want) {
        CHECK(0, "fl2va golden has %zu values, the presentation %d rows", ne, p.n);
    }
    free(want);
    h3_text_presentation_clear(&p);
    h3_tokenizer_free(tok);
    h3_text_encoder_free(te);
    h3_st_close(f);
}

static void test_video_vae(void) {
    h3_video_vae *vae = NULL;
    h3_status st = {0};
    if (h3_video_vae_load(gpu, h3_test_data("models/tiny-h3/vae"), &vae, &st) != H3_OK) {
        CHECK(0, "video vae load: %s", st.message);
        return;
    }
    h3_st_file *f = golden_tiny("vae_decode");
    size_t n = 0;
    float *lat = f ? read_golden(f, "latents_normalized", NULL) : NULL;
    float *want = f ? read_golden(f, "vae_output", &n) : NULL;
    if (lat && want) {
        float *got = malloc(n * 4);
        h3_status_code rc = h3_video_vae_decode_f32(vae, lat, 12, 2, 4, got, &st);
        CHECK(rc == H3_OK, "video vae: %s", st.message);
        if (rc == H3_OK) {
            double e = h3_test_rel_l2(got, want, n);
            printf("gpu video vae (%s): rel L2 %.3e\n", exact ? "exact f32" : "fp16", e);
            CHECK(e <= (exact ? F32_TOLERANCE : BF16_TOLERANCE), "video vae (%s) rel L2 %.3e", mode_name(), e);
        }
        free(got);
    }
    free(lat);
    free(want);
    h3_st_close(f);
    h3_video_vae_free(vae);
}

/* ---- the video VAE encoder (FL2VA keyframes) -------------------------------------------
 * vae_encode_image (one frame: posterior mean, logvar, the keyframe
 * condition with the seed-42 posterior sample) and vae_encode_video (22
 * frames, two clips) on the GPU: exact mode at the float32 tolerance, bf16
 * (convolution inputs and weights in bf16, float32 activations and GEMM
 * outputs) at ENCODER_BF16_TOLERANCE. */

/* bf16 im2col and weights through the tiny encoder's 13 convolutions: the
 * CPU backend with exactly that rounding added (float32 elsewhere) lands at
 * 8.5e-3 (mean, logvar) and 3.6e-3 (condition) from the float32 golden
 * (measured 2026-12-03); twice the former leaves room for the GEMMs' order. */
#define ENCODER_BF16_TOLERANCE 2e-2

/* golden video_uint8 / image_uint8 [1, 3, F, H, W] -> packed RGB frames */
static uint8_t *encoder_frames(h3_st_file *f, const char *name, int *F, int *H, int *W) {
    const h3_st_tensor *t = h3_st_find(f, name);
    if (!t || t->dtype != H3_ST_U8 || t->ndim != 5) return NULL;
    *F = (int)t->shape[2], *H = (int)t->shape[3], *W = (int)t->shape[4];
    size_t n = (size_t)*F * *H * *W;
    uint8_t *rgb = malloc(n * 3);
    for (size_t c = 0; c < 3; c++)
        for (size_t i = 0; i < n; i++) rgb[i * 3 + c] = ((const uint8_t *)t->data)[c * n + i];
    return rgb;
}

static void encoder_check(const char *what, const float *got, const float *want, size_t n) {
    double e = h3_test_rel_l2(got, want, n), tol = exact ? F32_TOLERANCE : ENCODER_BF16_TOLERANCE;
    printf("gpu video vae encoder %s (%s): rel L2 %.3e\n", what, mode_name(), e);
    CHECK(e <= tol, "video vae encoder %s (%s) rel L2 %.3e > %.0e", what, mode_name(), e, tol);
}

static void encoder_golden(h3_video_vae *vae, const char *golden, const char *frames, int keyframe) {
    h3_st_file *f = golden_tiny(golden);
    int F = 0, H = 0, W = 0;
    uint8_t *rgb = f ? encoder_frames(f, frames, &F, &H, &W) : NULL;
    size_t n = 0;
    float *mean = f ? read_golden(f, "posterior_mean", &n) : NULL, *logvar = f ? read_golden(f, "posterior_logvar", NULL) : NULL;
    float *cond = f && keyframe ? read_golden(f, "condition_latents", NULL) : NULL;
    float *got = calloc(2 * n + 1, sizeof(float));
    h3_status st = {0};
    h3_video_vae_frames in = {.rgb = rgb, .frames = F, .width = W, .height = H};
    if (rgb && mean && logvar) {
        h3_status_code rc = h3_video_vae_encode(vae, &in, got, got + n, &st);
        CHECK(rc == H3_OK, "video vae encode %s: %s", golden, st.message);
        if (rc == H3_OK) {
            encoder_check("posterior mean", got, mean, n);
            encoder_check("posterior logvar", got + n, logvar, n);
        }
    }
    if (rgb && cond) {
        h3_status_code rc = h3_video_vae_encode_keyframe(vae, rgb, W, H, 0, NULL, got, &st);
        CHECK(rc == H3_OK, "video vae keyframe: %s", st.message);
        if (rc == H3_OK) encoder_check("keyframe condition", got, cond, n);
    }
    free(rgb), free(mean), free(logvar), free(cond), free(got);
    h3_st_close(f);
}

/* 96x128 pixels in 64-px tiles (overlaps 32, latent 2): the GPU's tiled
 * encode against the CPU backend's (test_video_vae_encoder checks the CPU's
 * stitching against the reference's order). */
static void encoder_tiled_vs_cpu(h3_video_vae *vae) {
    enum { H = 96, W = 128 };
    h3_backend *cpu = NULL;
    h3_video_vae *ref = NULL;
    h3_status st = {0};
    h3_video_vae_options opts = {.encoder = 1};
    CHECK(h3_backend_cpu_create(1, &cpu, &st) == H3_OK, "cpu backend: %s", st.message);
    if (cpu && h3_video_vae_load_with(cpu, h3_test_data("models/tiny-h3/vae"), NULL, &opts, &ref, &st) != H3_OK)
        CHECK(0, "cpu encoder load: %s", st.message);
    uint8_t *rgb = malloc((size_t)H * W * 3);
    uint32_t s = 777;
    for (size_t i = 0; i < (size_t)H * W * 3; i++) s = s * 1664525u + 1013904223u, rgb[i] = (uint8_t)(s >> 24);
    size_t n = (size_t)24 * (H / 16) * (W / 16);
    float *got = calloc(2 * n, sizeof(float)), *want = calloc(2 * n, sizeof(float));
    h3_video_vae_frames in = {.rgb = rgb, .frames = 1, .width = W, .height = H};
    if (ref && h3_video_vae_set_tiling(vae, 64, 16, &st) == H3_OK && h3_video_vae_set_tiling(ref, 64, 16, &st) == H3_OK) {
        h3_status_code rc = h3_video_vae_encode(vae, &in, got, got + n, &st);
        CHECK(rc == H3_OK, "tiled gpu encode: %s", st.message);
        CHECK(h3_video_vae_encode(ref, &in, want, want + n, &st) == H3_OK, "tiled cpu encode: %s", st.message);
        if (rc == H3_OK) encoder_check("tiled 96x128 vs cpu", got, want, 2 * n);
        h3_video_vae_set_tiling(vae, 256, 64, &st);
    }
    free(rgb), free(got), free(want);
    h3_video_vae_free(ref);
    h3_backend_destroy(cpu);
}

static void test_video_vae_encoder(void) {
    h3_video_vae *vae = NULL;
    h3_status st = {0};
    h3_video_vae_options opts = {.encoder = 1};
    if (h3_video_vae_load_with(gpu, h3_test_data("models/tiny-h3/vae"), NULL, &opts, &vae, &st) != H3_OK) {
        CHECK(0, "video vae encoder load: %s", st.message);
        return;
    }
    encoder_golden(vae, "vae_encode_image", "image_uint8", 1);
    encoder_golden(vae, "vae_encode_video", "video_uint8", 0);
    encoder_tiled_vs_cpu(vae);
    h3_video_vae_free(vae);
}

static void test_audio_vae(void) {
    h3_audio_vae *vae = NULL;
    h3_status st = {0};
    if (h3_audio_vae_load(gpu, h3_test_data("models/tiny-h3/audio_vae"), &vae, &st) != H3_OK) {
        CHECK(0, "audio vae load: %s", st.message);
        return;
    }
    h3_st_file *f = golden_tiny("audio_vae");
    size_t n = 0;
    float *lat = f ? read_golden(f, "decode_latents_normalized", NULL) : NULL;
    float *want = f ? read_golden(f, "decode_output", &n) : NULL;
    if (lat && want) {
        float *got = malloc(n * 4);
        h3_status_code rc = h3_audio_vae_decode(vae, lat, 207, got, NULL, &st);
        CHECK(rc == H3_OK, "audio vae: %s", st.message);
        if (rc == H3_OK) {
            double e = h3_test_rel_l2(got, want, n);
            printf("gpu audio vae (fp32, %s mode): rel L2 %.3e\n", mode_name(), e);
            CHECK(e <= F32_TOLERANCE, "audio vae rel L2 %.3e", e);
        }
        free(got);
    }
    free(lat);
    free(want);
    h3_st_close(f);
    h3_audio_vae_free(vae);
}

/* ---- the engine, end to end ------------------------------------------------------------ */

/* The audio latents of a GPU run decoded by the CPU reference (float32):
 * what the golden's audio would be if only the latents differed. Planar
 * [2][samples], like the goldens. */
static float *cpu_decode_audio(const float *latents, int n_latents, size_t n_out) {
    h3_backend *cpu = NULL;
    h3_audio_vae *vae = NULL;
    h3_status st = {0};
    float *out = calloc(n_out, sizeof *out);
    int ok = h3_backend_cpu_create(0, &cpu, &st) == H3_OK &&
             h3_audio_vae_load(cpu, h3_test_data("models/tiny-h3/audio_vae"), &vae, &st) == H3_OK &&
             h3_audio_vae_decode(vae, latents, n_latents, out, NULL, &st) == H3_OK;
    CHECK(ok, "cpu decode of the gpu's audio latents: %s", st.message);
    if (vae) h3_audio_vae_free(vae);
    if (cpu) h3_backend_destroy(cpu);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

/* Interleaved stereo -> planar [2][n], as the goldens store it. */
static float *planar(const h3_test_capture *c) {
    int64_t n = c->plan.audio_samples;
    float *p = malloc((size_t)(2 * n) * sizeof *p);
    for (int64_t i = 0; i < n; i++) {
        p[i] = c->audio[2 * i];
        p[n + i] = c->audio[2 * i + 1];
    }
    return p;
}

static h3_engine *open_engine(h3_compute compute, const char *adapter) {
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("models/tiny-h3");
    o.adapter_path = adapter ? h3_test_data(adapter) : NULL;
    o.compute = compute;
    o.devices = "0"; /* TP1 through NCCL */
    h3_engine *e = NULL;
    h3_status st = {0};
    CHECK(h3_engine_open(&o, &e, &st) == H3_OK, "engine (%s): %s", adapter ? adapter : "base", st.message);
    return e;
}

static h3_request golden_request(void) {
    h3_request r = h3_test_golden_request("e2e_t2va_3steps");
    return r;
}

/* One engine run against an end-to-end golden. compute=cuda-f32 is held to
 * the float32 end-to-end tolerance. With bf16 the latents are held to 1e-2;
 * the decoded audio then lands further from the golden than its latents do,
 * because the tiny random BigVGAN amplifies a latent difference (about 6x
 * here). So the audio is checked where that says something: against the CPU
 * reference's decode of the same latents (the decode is float32 on both),
 * and the golden distance is printed. */
static void check_e2e(h3_engine *e, const h3_request *r, const char *golden, int f32) {
    h3_test_capture c = {0};
    h3_status st = {0};
    h3_status_code rc = h3_test_generate(e, r, &c, NULL, &st);
    CHECK(rc == H3_OK, "%s: generate: %s", golden, st.message);
    h3_st_file *f = golden_tiny(golden);
    if (rc == H3_OK && f && c.latents) {
        size_t n;
        float *g = read_golden(f, "latents", &n);
        double el = g && n == c.n_latents ? h3_test_rel_l2(c.latents, g, n) : 1;
        free(g);
        g = read_golden(f, "audio_latents", &n);
        double ea = g && n == c.n_audio_latents ? h3_test_rel_l2(c.audio_latents, g, n) : 1;
        free(g);
        g = read_golden(f, "audio", &n);
        float *audio = planar(&c);
        double es = g && n == (size_t)(2 * c.plan.audio_samples) ? h3_test_rel_l2(audio, g, n) : 1;
        float *cpu_audio = f32 ? NULL : cpu_decode_audio(c.audio_latents, c.plan.audio_latents, n);
        double ed = cpu_audio ? h3_test_rel_l2(audio, cpu_audio, n) : 0;
        double eg = cpu_audio && g ? h3_test_rel_l2(cpu_audio, g, n) : 0;
        free(cpu_audio);
        free(audio);
        free(g);
        const h3_st_tensor *u8 = h3_st_find(f, "videos_uint8");
        int maxd = 0;
        size_t over1 = 0;
        double num = 0, den = 0;
        int64_t nv = (int64_t)c.plan.num_frames * c.plan.width * c.plan.height * 3;
        CHECK(u8 && u8->numel == nv, "%s: videos_uint8 missing or of another size", golden);
        for (int64_t i = 0; u8 && u8->numel == nv && i < nv; i++) {
            int want = ((const uint8_t *)u8->data)[i], d = abs(want - (int)c.video[i]);
            maxd = d > maxd ? d : maxd;
            over1 += d > 1;
            num += (double)d * d;
            den += (double)want * want;
        }
        double eu = den > 0 ? sqrt(num / den) : 1;
        h3_stats s;
        h3_engine_get_stats(e, &s);
        printf("gpu engine %s (%s): latents %.3e, audio latents %.3e, audio %.3e, uint8 rel L2 %.3e max |diff| %d "
               "(%zu values > 1), %.3f s/step\n", golden, s.compute, el, ea, es, eu, maxd, over1, s.per_step);
        if (f32) {
            CHECK(el <= E2E_F32_TOLERANCE && ea <= E2E_F32_TOLERANCE && es <= E2E_F32_TOLERANCE && maxd <= 1,
                  "%s f32 parity %.3e %.3e %.3e, uint8 %d", golden, el, ea, es, maxd);
        } else {
            printf("  audio: gpu vs cpu decode of the gpu's latents %.3e; that cpu decode vs the golden %.3e\n", ed,
                   eg);
            CHECK(el <= BF16_TOLERANCE && ea <= BF16_TOLERANCE && eu <= BF16_TOLERANCE,
                  "%s bf16 parity %.3e %.3e, uint8 %.3e", golden, el, ea, eu);
            CHECK(ed <= F32_TOLERANCE, "%s audio decode %.3e from the cpu decode of the same latents", golden, ed);
        }
        CHECK(c.frames == c.plan.num_frames && !c.out_of_order, "%s: %d frames, %d out of order", golden, c.frames,
              c.out_of_order);
    }
    h3_st_close(f);
    h3_test_capture_free(&c);
}

/* The base model (2 passes) and FastH3 with the dense adapter (4 passes on
 * each ladder), on CUDA in bf16 or float32. */
static void test_engine(h3_compute compute) {
    int f32 = compute == H3_COMPUTE_CUDA_F32;
    h3_request r = golden_request();
    h3_engine *e = open_engine(compute, NULL);
    if (e) check_e2e(e, &r, "e2e_t2va_3steps", f32);
    /* FL2VA: the golden's keyframe (its PNG's pixels, as stored in the golden) */
    h3_st_file *kf = e ? golden_tiny("e2e_fl2va_3steps") : NULL;
    const h3_st_tensor *key = kf ? h3_st_find(kf, "keyframe.input_uint8") : NULL;
    CHECK(!e || (key && key->ndim == 3), "e2e_fl2va_3steps: no keyframe.input_uint8");
    if (key && key->ndim == 3) {
        h3_request q = h3_test_golden_request("e2e_fl2va_3steps");
        h3_image im = {(int)key->shape[1], (int)key->shape[0], (size_t)key->shape[1] * 3, key->data};
        q.first_image = &im;
        check_e2e(e, &q, "e2e_fl2va_3steps", f32);
    }
    if (kf) h3_st_close(kf);
    h3_engine_close(e);
    e = open_engine(compute, "adapters/tiny-h3/dense-datafree");
    if (!e) return;
    r.steps = 0; /* the adapter's 4 */
    r.ladder = H3_LADDER_RELEASE;
    check_e2e(e, &r, "e2e_t2va_fasth3_ladderB", f32);
    r.ladder = H3_LADDER_A;
    check_e2e(e, &r, "e2e_t2va_fasth3_ladderA", f32);
    h3_engine_close(e);
}

/* FastH3 with the VSA adapter and VSA-H3 attention has no end-to-end
 * golden: the CPU reference (whose VSA op matches the VSA goldens to 2e-7,
 * test_vsa) is the reference. 160x96: 20 video tiles a frame group, k = 2. */
static void test_vsa_engine(h3_compute compute) {
    int f32 = compute == H3_COMPUTE_CUDA_F32;
    h3_request r = golden_request();
    r.attention = H3_ATTENTION_VSA;
    r.width = 160;
    r.height = 96;
    r.steps = 0;
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("models/tiny-h3");
    o.adapter_path = h3_test_data("adapters/tiny-h3/vsa-datafree");
    o.compute = H3_COMPUTE_CPU;
    h3_engine *cpu = NULL, *e = open_engine(compute, "adapters/tiny-h3/vsa-datafree");
    h3_status st = {0};
    CHECK(h3_engine_open(&o, &cpu, &st) == H3_OK, "cpu engine (vsa): %s", st.message);
    h3_test_capture a = {0}, b = {0};
    if (cpu) CHECK(h3_test_generate(cpu, &r, &a, NULL, &st) == H3_OK, "cpu vsa: %s", st.message);
    if (e) CHECK(h3_test_generate(e, &r, &b, NULL, &st) == H3_OK, "gpu vsa: %s", st.message);
    if (a.latents && b.latents && a.n_latents == b.n_latents && a.n_audio_latents == b.n_audio_latents) {
        double el = h3_test_rel_l2(b.latents, a.latents, a.n_latents);
        double ea = h3_test_rel_l2(b.audio_latents, a.audio_latents, a.n_audio_latents);
        double tol = f32 ? E2E_F32_TOLERANCE : BF16_TOLERANCE;
        printf("gpu engine vsa 160x96 (%s) vs the cpu reference: latents %.3e, audio latents %.3e\n",
               f32 ? "f32" : "bf16", el, ea);
        CHECK(el <= tol && ea <= tol, "vsa engine (%s) %.3e %.3e", f32 ? "f32" : "bf16", el, ea);
    } else {
        CHECK(0, "vsa engine: no latents to compare");
    }
    h3_test_capture_free(&a);
    h3_test_capture_free(&b);
    h3_engine_close(cpu);
    h3_engine_close(e);
}

/* A CUDA error in the middle of a forward (issue 14, item 7): the backend
 * reports a faulted launch 40 ops into the first denoising step's forward
 * (h3_engine_inject_fault_mid_forward, through the launch check every op
 * uses), the request ends in H3_ERR_DEVICE naming it with no frame sent,
 * and the same engine then gives the clip it gave before. */
static void test_engine_fault(void) {
    h3_engine *e = open_engine(H3_COMPUTE_CUDA, NULL);
    if (!e) return;
    h3_request r = golden_request();
    h3_test_capture ref = {0}, c = {0};
    h3_status st = {0};
    CHECK(h3_test_generate(e, &r, &ref, NULL, &st) == H3_OK, "reference: %s", st.message);
    h3_engine_inject_fault_mid_forward(e, 0, 0, 40);
    h3_status_code rc = h3_test_generate(e, &r, &c, NULL, &st);
    CHECK(rc == H3_ERR_DEVICE && strstr(st.message, "cudaErrorLaunchFailure") && c.frames == 0,
          "cuda fault mid-forward: rc %d, %d frames, '%s'", rc, c.frames, st.message);
    printf("cuda fault 40 ops into step 1: %s\n", st.message);
    h3_test_capture_free(&c);
    rc = h3_test_generate(e, &r, &c, NULL, &st);
    size_t fb = (size_t)c.plan.width * c.plan.height * 3;
    CHECK(rc == H3_OK && c.frames == ref.frames && memcmp(c.video, ref.video, fb * (size_t)c.frames) == 0,
          "after the cuda fault: rc %d '%s'", rc, st.message);
    h3_test_capture_free(&c);
    h3_test_capture_free(&ref);
    h3_engine_close(e);
}

/* NaN and Inf on CUDA (issue 14, item 3): a NaN weight is refused at open
 * by the device-side count, naming the tensor; a weight of 3e38 stays
 * finite in bf16 and overflows the transformer's output, refused at the
 * first denoising step; the same value in the video VAE, stored as f16 on
 * CUDA, is Inf once uploaded and refused at open. */
static void open_damaged(const char *file, const char *part, float v, h3_status_code want_open, const char *stage) {
    char *dir = h3_test_copy_data("models/tiny-h3");
    char *name = dir ? h3_test_poison_part(dir, file, part, v, 1 << 20) : NULL;
    CHECK(name != NULL, "damaged copy: %s in %s", part, file);
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = dir;
    o.compute = H3_COMPUTE_CUDA;
    h3_engine *e = NULL;
    h3_status st = {0};
    h3_status_code rc = name ? h3_engine_open(&o, &e, &st) : H3_ERR_INTERNAL;
    CHECK(rc == want_open && (rc == H3_OK || strstr(st.message, name)), "cuda open with %s = %g: rc %d '%s'",
          name ? name : "?", (double)v, rc, st.message);
    if (rc != H3_OK) printf("cuda open with %s = %g: %s\n", name ? name : "?", (double)v, st.message);
    if (e && stage) {
        h3_request r = golden_request();
        h3_test_capture c = {0};
        rc = h3_test_generate(e, &r, &c, NULL, &st);
        CHECK(rc == H3_ERR_NONFINITE && strstr(st.message, stage) && c.frames == 0, "cuda %s = %g: rc %d '%s'",
              name, (double)v, rc, st.message);
        printf("cuda generate with %s = %g: %s\n", name, (double)v, st.message);
        h3_test_capture_free(&c);
    }
    h3_engine_close(e);
    g_free(name);
    if (dir) h3_test_remove_tree(dir);
    g_free(dir);
}

static void test_engine_nonfinite(void) {
    open_damaged("transformer/diffusion_pytorch_model.safetensors", "blocks.0.", NAN, H3_ERR_NONFINITE, NULL);
    open_damaged("vae/diffusion_pytorch_model.safetensors", "decoder.proj_out.weight", 3.0e38f, H3_ERR_NONFINITE,
                 NULL);
    open_damaged("transformer/diffusion_pytorch_model.safetensors", "proj_out.weight", 3.0e38f, H3_OK,
                 "denoising step 1/");
    open_damaged("text_encoder/model.safetensors", "layers.0.mlp.down_proj", 3.0e38f, H3_OK, "text encoder");
}

int main(void) {
    h3_status st = {0};
    if (h3_backend_cuda_create(0, &gpu, &st) != H3_OK) {
        printf("SKIP: no CUDA backend or GPU: %s\n", st.message);
        return 77;
    }
    /* H3_TEST_VAE_ENCODER_ONLY=1: the video VAE encoder alone, in both modes */
    const char *eonly = getenv("H3_TEST_VAE_ENCODER_ONLY");
    int encoder_only = eonly && *eonly && strcmp(eonly, "0") != 0;
    for (exact = 0; exact < 2; exact++) {
        if (exact && h3_backend_cuda_create_exact(0, &gpu, &st) != H3_OK) {
            CHECK(0, "exact mode: %s", st.message);
            break;
        }
        if (encoder_only) {
            test_video_vae_encoder();
            h3_backend_destroy(gpu);
            gpu = NULL;
            continue;
        }
        test_text_encoder();
        test_vision_tower();
        test_text_encoder_fl2va();
        test_dit();
        test_video_vae();
        test_video_vae_encoder();
        test_audio_vae();
        h3_backend_destroy(gpu);
        gpu = NULL;
    }
    if (encoder_only) return h3_test_finish("test_gpu_goldens");
    test_engine(H3_COMPUTE_CUDA);
    test_engine(H3_COMPUTE_CUDA_F32);
    test_vsa_engine(H3_COMPUTE_CUDA);
    test_vsa_engine(H3_COMPUTE_CUDA_F32);
    test_engine_fault();
    test_engine_nonfinite();
    return h3_test_finish("test_gpu_goldens");
}
#endif
