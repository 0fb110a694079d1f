/* vae.c - the VAE decoders (--vae on|off|only): the video VAE at 1280×736×124
 * and its audio, ours against eager torch.
 *
 * Random weights in the release's dtypes (float32 safetensors: the video
 * decoder side, 2.4 G parameters, and the BigVGAN decoder with
 * weight_g/weight_v) for the tensors the loaders list
 * (h3_video_vae_decoder_tensors, h3_audio_vae_decoder_tensors) of the real
 * configs (tests/data/official/{vae,audio_vae}/config.json, read from the
 * working directory) are written under --dump-dir and loaded through
 * h3_video_vae_load / h3_audio_vae_load, so the decode runs exactly as the
 * engine runs it: 7 temporal windows × 28 spatial tiles of 7×16×16 latents,
 * stitching, cross-fades and the uint8 conversion of every frame
 * (h3_video_vae_decode), timed as synchronised wall time. The same weights,
 * the latents and our decoder outputs (h3_video_vae_decode_f32, the audio
 * waveform) go to h3_vae_reference.py, which decodes with an eager PyTorch
 * implementation written from docs/spec/h3-vaes.md (fp16 as §3.8 says for the
 * video, fp32 for the audio), times it the same way and reports relative L2
 * against ours. Before them, the video decoder's ViT block op by op
 * (vae_profile.c) and the audio decoder op by op (audio_profile.c). With
 * --vae audio only the audio decoder runs: its profile, its decode and the
 * reference's (--skip-video), in one call. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/cuda/h3_backend_cuda.h"
#include "backend/cuda/h3_backend_cuda_bench.h" /* the head_dim-64 attention switch */
#include "base/h3_safetensors.h"
#include "bench.h"
#include "model/h3_audio_vae.h"
#include "model/h3_video_vae.h"

#define VAE_T 37 /* 124 frames = 17·7 + 5 */
#define VAE_HL 46
#define VAE_WL 80
#define VAE_FRAMES 124
#define VAE_AUDIO_L 207 /* round(124/24·40) latents of 800 samples */

/* One tensor of a random checkpoint: drawn uniform in [lo, hi), or the Kaiser filter. */
typedef struct vae_tensor {
    char name[128];
    int ndim;
    int64_t shape[5];
    float lo, hi;
    int filter;
} vae_tensor;

typedef struct vae_list {
    vae_tensor *t;
    int n, cap;
} vae_list;

static vae_tensor *vae_add(vae_list *l, const char *name, int ndim, const int64_t *shape, float lo, float hi) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->t = realloc(l->t, (size_t)l->cap * sizeof *l->t);
        if (!l->t) {
            fprintf(stderr, "h3-bench: out of memory\n");
            exit(1);
        }
    }
    vae_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->lo = lo, t->hi = hi;
    return t;
}

static int64_t vae_numel(const vae_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* Uniform weights of variance 1/fan-in (the dims after the first), so every layer sees unit-scale inputs. */
static float vae_weight_bound(int ndim, const int64_t *shape) {
    int64_t fan_in = 1;
    for (int i = 1; i < ndim; i++) fan_in *= shape[i];
    return sqrtf(3.0f / (float)fan_in);
}

/* The video decoder's tensors as h3_video_vae lists them (docs/spec/h3-vaes.md §3.11), drawn so that every
 * block sees unit-scale activations; layer scales small as in a trained ViT. */
static h3_status_code vae_video_tensor(void *opaque, const h3_video_vae_tensor *t, h3_status *status) {
    vae_list *l = opaque;
    float a = vae_weight_bound(t->ndim, t->shape);
    switch (t->role) {
    case H3_VIDEO_VAE_WEIGHT: vae_add(l, t->name, t->ndim, t->shape, -a, a); break;
    case H3_VIDEO_VAE_BIAS: vae_add(l, t->name, t->ndim, t->shape, -0.02f, 0.02f); break;
    case H3_VIDEO_VAE_NORM_WEIGHT: vae_add(l, t->name, t->ndim, t->shape, 0.8f, 1.2f); break;
    case H3_VIDEO_VAE_NORM_BIAS: vae_add(l, t->name, t->ndim, t->shape, -0.1f, 0.1f); break;
    case H3_VIDEO_VAE_LAYER_SCALE: vae_add(l, t->name, t->ndim, t->shape, 0.05f, 0.25f); break;
    case H3_VIDEO_VAE_REGISTERS: vae_add(l, t->name, t->ndim, t->shape, -1.0f, 1.0f); break;
    default: return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: h3-bench writes the diffusers layout only", t->name);
    }
    return H3_OK;
}

/* weight_g of a weight-normed conv sets its output scale (w = g·v/‖v‖, so a unit-variance input gives about g²
 * variance): 1, but sqrt(rate/2) for an upsampler and less for the end of a residual branch and conv_post. */
static float vae_conv_gain(const h3_audio_vae_tensor *t) {
    switch (t->module) {
    case H3_AUDIO_VAE_UPSAMPLE: return sqrtf((float)t->stride / 2.0f);
    case H3_AUDIO_VAE_AMP_CONV2: return 0.3f;
    case H3_AUDIO_VAE_CONV_POST: return 0.2f;
    default: return 1.0f;
    }
}

/* The BigVGAN decoder's tensors as h3_audio_vae lists them (docs/spec/h3-vaes.md §4.3, §4.6); alpha/beta in
 * log space; the two Kaiser filters get their real values when written. */
static h3_status_code vae_audio_tensor(void *opaque, const h3_audio_vae_tensor *t, h3_status *status) {
    (void)status;
    vae_list *l = opaque;
    float a = vae_weight_bound(t->ndim, t->shape), g = vae_conv_gain(t);
    switch (t->role) {
    case H3_AUDIO_VAE_CONV_WEIGHT: vae_add(l, t->name, t->ndim, t->shape, -a, a); break;
    case H3_AUDIO_VAE_WN_V: vae_add(l, t->name, t->ndim, t->shape, -1.0f, 1.0f); break;
    case H3_AUDIO_VAE_WN_G: vae_add(l, t->name, t->ndim, t->shape, 0.9f * g, 1.1f * g); break;
    case H3_AUDIO_VAE_BIAS: vae_add(l, t->name, t->ndim, t->shape, -0.02f, 0.02f); break;
    case H3_AUDIO_VAE_SNAKE_ALPHA:
    case H3_AUDIO_VAE_SNAKE_BETA: vae_add(l, t->name, t->ndim, t->shape, -0.3f, 0.3f); break;
    default: vae_add(l, t->name, t->ndim, t->shape, 0, 0)->filter = 1;
    }
    return H3_OK;
}

/* The decoder tensors of the VAE whose config is in official (video: the dir; audio: its config). */
static int vae_tensors(const char *official, int video, vae_list *l) {
    h3_status st;
    h3_audio_vae_config cfg;
    h3_status_code rc = video ? h3_video_vae_decoder_tensors(official, vae_video_tensor, l, &st)
                              : h3_audio_vae_config_load(official, &cfg, &st);
    if (rc == H3_OK && !video) rc = h3_audio_vae_decoder_tensors(&cfg, vae_audio_tensor, l, &st);
    if (rc != H3_OK) fprintf(stderr, "h3-bench: %s: %s\n", official, st.message);
    return rc == H3_OK;
}

static const float vae_kaiser[12] = {0.0020289647f, 0.0093894657f, -0.0255434588f, -0.0576573834f,
                                     0.1285725832f, 0.4432097971f,  0.4432097971f,  0.1285725832f,
                                     -0.0576573834f, -0.0255434588f, 0.0093894657f, 0.0020289647f};

/* Draws every tensor of l on the device (float32, uniform [lo, hi)) and writes them as one safetensors file. */
static int vae_write_weights(const char *path, const vae_list *l) {
    int64_t total = 0, most = 0;
    for (int i = 0; i < l->n; i++) {
        int64_t n = vae_numel(&l->t[i]);
        total += n;
        if (n > most) most = n;
    }
    float *host = malloc((size_t)total * sizeof(float));
    h3_st_write_tensor *wt = calloc((size_t)l->n, sizeof *wt);
    if (!host || !wt) {
        fprintf(stderr, "h3-bench: no host memory for %lld weights\n", (long long)total);
        free(host);
        free(wt);
        return 0;
    }
    size_t mark = h3_arena_mark(B);
    h3_tensor scratch = h3_new_1d(B, H3_F32, most);
    int64_t at = 0;
    for (int i = 0; i < l->n; i++) {
        const vae_tensor *t = &l->t[i];
        int64_t n = vae_numel(t);
        float *dst = host + at;
        if (t->filter) {
            memcpy(dst, vae_kaiser, sizeof vae_kaiser);
        } else {
            h3_tensor s = scratch;
            s.shape[0] = n;
            h3_backend_cuda_fill_uniform(B, &s, next_seed(), t->lo, t->hi);
            if (h3_tensor_download_f32(B, &s, dst, NULL) != H3_OK) break;
        }
        wt[i].name = t->name;
        wt[i].dtype = H3_ST_F32;
        wt[i].ndim = t->ndim;
        for (int k = 0; k < t->ndim; k++) wt[i].shape[k] = t->shape[k];
        wt[i].data = dst;
        at += n;
    }
    h3_arena_reset(B, mark);
    h3_status st;
    int ok = h3_backend_check(B, &st) == H3_OK;
    if (ok && h3_st_write(path, wt, (size_t)l->n, NULL, &st) != H3_OK) ok = 0;
    if (!ok) fprintf(stderr, "h3-bench: writing %s: %s\n", path, st.message);
    free(host);
    free(wt);
    return ok;
}

static int vae_copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
    char buf[65536];
    size_t n;
    int ok = a && b;
    while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, n, b) == n;
    if (a) fclose(a);
    if (b && fclose(b) != 0) ok = 0;
    if (!ok) fprintf(stderr, "h3-bench: cannot copy %s to %s\n", from, to);
    return ok;
}

/* Model directory `dir` = config.json from the repository's official configs + random weights. */
static int vae_make_model(const char *dir, const char *official, int video) {
    char cfg[1100], path[1200];
    mkdir(dir, 0755);
    snprintf(cfg, sizeof cfg, "%s/config.json", official);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!vae_copy_file(cfg, path)) return 0;
    vae_list l = {0};
    int ok = vae_tensors(official, video, &l);
    snprintf(path, sizeof path, "%s/%s", dir, "diffusion_pytorch_model.safetensors");
    ok = ok && vae_write_weights(path, &l);
    free(l.t);
    return ok;
}

static int vae_emit(void *opaque, int first, int count, const uint8_t *rgb) {
    (void)rgb;
    int *frames = opaque;
    if (first != *frames) return 1; /* frames come in order */
    *frames += count;
    return 0;
}

/* Uniform host values of unit variance (a 64-bit LCG: no GPU needed, the reference reads them from the dump). */
static void vae_host_uniform(float *x, int64_t n, uint64_t s) {
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = ((float)(s >> 40) / 16777216.0f * 2.0f - 1.0f) * 1.7320508f;
    }
}

typedef struct vae_result {
    double video_ms, audio_ms, video_load_s, audio_load_s;
    /* the video decode with the ViT's head_dim-64 attention switched (vae_video_alt): the variants' names,
     * median ms, and the relative L2 of their float output against the run's own (NAN when not run) */
    double alt_ms[2], alt_rel_l2[2];
    const char *alt_name[2];
    int frames;
    int ok_video, ok_audio;
} vae_result;

static int vae_write_named(const char *path, const char *name, int ndim, const int64_t *shape, const float *data) {
    h3_st_write_tensor t = {.name = name, .dtype = H3_ST_F32, .ndim = ndim, .data = data};
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    h3_status st;
    if (h3_st_write(path, &t, 1, NULL, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: %s\n", st.message);
        return 0;
    }
    return 1;
}

/* The same decode (timed the same way, then in float32) with the head_dim-64
 * attention switched, in the same run: k_attn_fa3 at head_dim 64
 * (h3_attention_sm90.cu) with 128- and with 192-key tiles (wgmma-d64,
 * wgmma-d64-n192), AUTO in place of the one the run itself used if it used
 * one. ref: the run's own float output. */
static void vae_video_alt(const bench_options *o, h3_video_vae *vae, const float *lat, const float *ref,
                          int64_t nout, vae_result *r) {
    h3_cuda_attention_variant cur = h3_backend_cuda_set_attention_variant(B, H3_CUDA_VARIANT_AUTO);
    h3_backend_cuda_set_attention_variant(B, cur);
    h3_cuda_attention_variant alts[2] = {H3_CUDA_VARIANT_WGMMA_D64, H3_CUDA_VARIANT_WGMMA_D64_N192};
    for (int a = 0; a < 2; a++)
        if (alts[a] == cur) alts[a] = H3_CUDA_VARIANT_AUTO;
    float *out = malloc((size_t)nout * sizeof *out);
    if (!out) {
        fprintf(stderr, "h3-bench: no host memory for the switched video decodes\n");
        return;
    }
    for (int a = 0; a < 2; a++) {
        h3_status st;
        const char *name = alts[a] == H3_CUDA_VARIANT_AUTO ? "auto"
                           : alts[a] == H3_CUDA_VARIANT_WGMMA_D64 ? "wgmma-d64" : "wgmma-d64-n192";
        double t[16];
        r->alt_name[a] = name;
        h3_backend_cuda_set_attention_variant(B, alts[a]);
        printf("video VAE with attention variant %s (warm-up + %d reps)...\n", name, o->vae_reps);
        int ok = 1;
        for (int i = -1; i < o->vae_reps && ok; i++) {
            int frames = 0;
            double t0 = now_ms();
            ok = h3_video_vae_decode(vae, lat, VAE_T, VAE_HL, VAE_WL, vae_emit, &frames, NULL, &st) == H3_OK;
            double ms = now_ms() - t0;
            if (ok) printf("  decode %s: %.1f ms, %d frames\n", i < 0 ? "warm-up" : "rep", ms, frames);
            fflush(stdout);
            if (i >= 0) t[i] = ms;
        }
        if (ok) ok = h3_video_vae_decode_f32(vae, lat, VAE_T, VAE_HL, VAE_WL, out, &st) == H3_OK;
        h3_backend_cuda_set_attention_variant(B, cur);
        if (!ok) {
            fprintf(stderr, "h3-bench: video VAE decode (%s): %s\n", name, st.message);
            break;
        }
        r->alt_ms[a] = median(t, o->vae_reps);
        double num = 0, den = 0;
        for (int64_t i = 0; i < nout; i++) {
            double e = (double)out[i] - ref[i];
            num += e * e;
            den += (double)ref[i] * ref[i];
        }
        r->alt_rel_l2[a] = den > 0 ? sqrt(num / den) : NAN;
    }
    free(out);
}

static void vae_bench_video(const bench_options *o, const char *dir, vae_result *r) {
    char mdir[1100], path[1100];
    h3_status st;
    snprintf(mdir, sizeof mdir, "%s/vae", dir);
    double t0 = now_ms();
    printf("video VAE: writing random float32 weights to %s ...\n", mdir);
    fflush(stdout);
    if (!vae_make_model(mdir, "tests/data/official/vae", 1)) return;
    printf("  written in %.1f s\n", (now_ms() - t0) / 1e3);
    t0 = now_ms();
    h3_video_vae *vae = NULL;
    if (h3_video_vae_load(B, mdir, &vae, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: video VAE load: %s\n", st.message);
        return;
    }
    r->video_load_s = (now_ms() - t0) / 1e3;
    int64_t nl = 24LL * VAE_T * VAE_HL * VAE_WL, nout = 3LL * VAE_FRAMES * VAE_HL * 16 * VAE_WL * 16;
    float *lat = malloc((size_t)nl * sizeof *lat), *out = malloc((size_t)nout * sizeof *out);
    if (!lat || !out) {
        fprintf(stderr, "h3-bench: no host memory for the video decode\n");
        goto done;
    }
    vae_host_uniform(lat, nl, 12345);
    snprintf(path, sizeof path, "%s/vae_latents.safetensors", dir);
    if (!vae_write_named(path, "latents", 4, (int64_t[]){24, VAE_T, VAE_HL, VAE_WL}, lat)) goto done;
    printf("video VAE: loaded in %.1f s; decode of %d latents %dx%d -> %d frames %dx%d (warm-up + %d reps)...\n",
           r->video_load_s, VAE_T, VAE_HL, VAE_WL, VAE_FRAMES, VAE_WL * 16, VAE_HL * 16, o->vae_reps);
    fflush(stdout);
    double t[16];
    for (int i = -1; i < o->vae_reps; i++) {
        int frames = 0;
        double a = now_ms();
        if (h3_video_vae_decode(vae, lat, VAE_T, VAE_HL, VAE_WL, vae_emit, &frames, NULL, &st) != H3_OK) {
            fprintf(stderr, "h3-bench: video VAE decode: %s\n", st.message);
            goto done;
        }
        double ms = now_ms() - a;
        printf("  decode %s: %.1f ms, %d frames\n", i < 0 ? "warm-up" : "rep", ms, frames);
        fflush(stdout);
        if (i >= 0) t[i] = ms;
        r->frames = frames;
    }
    r->video_ms = median(t, o->vae_reps);
    if (h3_video_vae_decode_f32(vae, lat, VAE_T, VAE_HL, VAE_WL, out, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: video VAE decode_f32: %s\n", st.message);
        goto done;
    }
    snprintf(path, sizeof path, "%s/vae_ours.safetensors", dir);
    r->ok_video = vae_write_named(path, "video", 4, (int64_t[]){3, VAE_FRAMES, VAE_HL * 16, VAE_WL * 16}, out);
    vae_video_alt(o, vae, lat, out, nout, r);
done:
    free(lat);
    free(out);
    h3_video_vae_free(vae);
}

static void vae_bench_audio(const bench_options *o, const char *dir, vae_result *r) {
    char mdir[1100], path[1100];
    h3_status st;
    snprintf(mdir, sizeof mdir, "%s/audio_vae", dir);
    if (!vae_make_model(mdir, "tests/data/official/audio_vae", 0)) return;
    double t0 = now_ms();
    h3_audio_vae *vae = NULL;
    if (h3_audio_vae_load(B, mdir, &vae, &st) != H3_OK) {
        fprintf(stderr, "h3-bench: audio VAE load: %s\n", st.message);
        return;
    }
    r->audio_load_s = (now_ms() - t0) / 1e3;
    int64_t nl = 2LL * 32 * VAE_AUDIO_L, ns = 2LL * VAE_AUDIO_L * h3_audio_vae_hop(vae);
    float *lat = malloc((size_t)nl * sizeof *lat), *out = malloc((size_t)ns * sizeof *out);
    if (lat && out) {
        vae_host_uniform(lat, nl, 777);
        snprintf(path, sizeof path, "%s/audio_latents.safetensors", dir);
        int ok = vae_write_named(path, "latents", 3, (int64_t[]){2, 32, VAE_AUDIO_L}, lat);
        double t[16];
        int reps = o->vae_reps * 3 > 15 ? 15 : o->vae_reps * 3;
        for (int i = -2; i < reps && ok; i++) {
            double a = now_ms();
            if (h3_audio_vae_decode(vae, lat, VAE_AUDIO_L, out, NULL, &st) != H3_OK) {
                fprintf(stderr, "h3-bench: audio VAE decode: %s\n", st.message);
                ok = 0;
                break;
            }
            if (i >= 0) t[i] = now_ms() - a;
        }
        if (ok) {
            r->audio_ms = median(t, reps);
            snprintf(path, sizeof path, "%s/audio_ours.safetensors", dir);
            r->ok_audio = vae_write_named(path, "audio", 2, (int64_t[]){2, ns / 2}, out);
            printf("audio VAE: %lld samples x 2 in %.2f ms (median of %d)\n", (long long)(ns / 2), r->audio_ms, reps);
        }
    }
    free(lat);
    free(out);
    h3_audio_vae_free(vae);
}

/* Runs h3_vae_reference.py (beside --reference) on the dump; returns its H3VAE JSON object (or NULL). */
static JsonNode *vae_run_reference(const bench_options *o, const char *dir, int audio_only) {
    char cmd[8192], script[2048];
    reference_script(o, "h3_vae_reference.py", script, sizeof script);
    snprintf(cmd, sizeof cmd, "%s %s --dump %s --reps %d%s 2>&1", o->python, script, dir, o->vae_reps,
             audio_only ? " --skip-video" : "");
    return run_python_json(cmd, "H3VAE ");
}

void vae_bench(const bench_options *o) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/vae-bench", o->dump_dir);
    mkdir(o->dump_dir, 0755);
    mkdir(dir, 0755);
    vae_result r;
    memset(&r, 0, sizeof r);
    for (int a = 0; a < 2; a++) {
        r.alt_ms[a] = r.alt_rel_l2[a] = NAN;
        r.alt_name[a] = "-";
    }
    int audio_only = o->vae == 3;
    if (!audio_only) {
        vae_profile_block(1);
        vae_profile_block(7);
    }
    audio_vae_profile(VAE_AUDIO_L);
    vae_bench_audio(o, dir, &r);
    if (!audio_only) vae_bench_video(o, dir, &r);
    JsonNode *ref = strcmp(o->reference, "none") ? vae_run_reference(o, dir, audio_only) : NULL;
    double tv = ref_num(ref, "video.ms"), ta = ref_num(ref, "audio.ms");
    double pv = ref_num(ref, "video.rel_l2"), pa = ref_num(ref, "audio.rel_l2");
    printf("\nVAE decoders, 1280x736x124 (37 latents, 7 windows x 28 tiles) and 207 audio latents (5.175 s, "
           "stereo, 32 kHz):\n");
    printf("%-34s %12s %12s %10s %12s\n", "", "ours ms", "torch ms", "speedup", "parity relL2");
    if (!audio_only) {
        printf("%-34s %12.1f %12.1f %9.2fx %12.2e\n", "video VAE decode (fp16)", r.video_ms, tv, tv / r.video_ms, pv);
        for (int a = 0; a < 2; a++) {
            char alt[64];
            snprintf(alt, sizeof alt, "video, attention %s", r.alt_name[a]);
            printf("%-34s %12.1f %12.1f %9.2fx %12s  (relL2 %.2e against the first row)\n", alt, r.alt_ms[a], tv,
                   tv / r.alt_ms[a], "", r.alt_rel_l2[a]);
        }
    }
    printf("%-34s %12.2f %12.2f %9.2fx %12.2e\n", "audio VAE decode (fp32)", r.audio_ms, ta, ta / r.audio_ms, pa);
    printf("audio: torch with TF32 convolutions %.2f ms; target: at least as fast as eager torch fp32%s\n",
           ref_num(ref, "audio.ms_tf32"), !isnan(ta) && ta / r.audio_ms >= 1.0 ? " (met)" : " (missed)");
    if (!audio_only)
        printf("video: %.1f ms per tile forward (196), %d frames emitted; target: >= 1.5x the eager reference%s\n",
               r.video_ms / 196, r.frames, !isnan(tv) && tv / r.video_ms >= 1.5 ? " (met)" : " (missed)");
    if (ref) json_node_unref(ref);
}

