/* vae.c - the VAE decoders (--vae on|off|only): the video VAE at 1280×736×124
 * and its audio, ours against eager torch.
 *
 * Random weights in the release's dtypes (float32 safetensors: the video
 * decoder side, 2.4 G parameters, and the BigVGAN decoder with
 * weight_g/weight_v) and the real configs (tests/data/official/{vae,audio_vae}/
 * config.json) are written under --dump-dir and loaded through
 * h3_video_vae_load / h3_audio_vae_load, so the decode runs exactly as the
 * engine runs it: 7 temporal windows × 28 spatial tiles of 7×16×16 latents,
 * stitching, cross-fades and the uint8 conversion of every frame
 * (h3_video_vae_decode), timed as synchronised wall time. The same weights,
 * the latents and our decoder outputs (h3_video_vae_decode_f32, the audio
 * waveform) go to h3_vae_reference.py, which decodes with an eager PyTorch
 * implementation written from docs/spec/h3-vaes.md (fp16 as §3.8 says for the
 * video, fp32 for the audio), times it the same way and reports relative L2
 * against ours. Before them, the video decoder's ViT block op by op
 * (vae_profile.c). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/cuda/h3_backend_cuda.h"
#include "base/h3_safetensors.h"
#include "bench.h"
#include "model/h3_audio_vae.h"
#include "model/h3_video_vae.h"

#define VAE_T 37 /* 124 frames = 17·7 + 5 */
#define VAE_HL 46
#define VAE_WL 80
#define VAE_FRAMES 124
#define VAE_AUDIO_L 207 /* round(124/24·40) latents of 800 samples */

typedef struct vae_tensor {
    char name[128];
    int ndim;
    int64_t shape[5];
    float lo, hi;
} vae_tensor;

typedef struct vae_list {
    vae_tensor *t;
    int n, cap;
} vae_list;

static void vae_add(vae_list *l, float lo, float hi, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void vae_add(vae_list *l, float lo, float hi, int ndim, const int64_t *shape, const char *fmt, ...) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->t = realloc(l->t, (size_t)l->cap * sizeof *l->t);
        if (!l->t) {
            fprintf(stderr, "h3-bench: out of memory\n");
            exit(1);
        }
    }
    vae_tensor *t = &l->t[l->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->lo = lo, t->hi = hi;
}

static int64_t vae_numel(const vae_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* The decoder side of the diffusers video VAE (docs/spec/h3-vaes.md §3.11): linear weights of variance 1/fan-in, so every
 * block sees unit-scale activations; layer scales small as in a trained ViT. */
static void vae_video_tensors(vae_list *l) {
    const int64_t C = 24, Dm = 2048, F = 8192, P = 3072;
    int64_t s5[5] = {C, C, 1, 1, 1}, c[1] = {C}, d[1] = {Dm};
    float a24 = sqrtf(3.0f / 24), aD = sqrtf(3.0f / 2048), aF = sqrtf(3.0f / 8192);
    vae_add(l, -a24, a24, 5, s5, "post_quant_conv.weight");
    vae_add(l, -0.05f, 0.05f, 1, c, "post_quant_conv.bias");
    vae_add(l, -a24, a24, 2, (int64_t[]){Dm, C}, "decoder.proj_in.weight");
    vae_add(l, -0.05f, 0.05f, 1, d, "decoder.proj_in.bias");
    vae_add(l, -1.0f, 1.0f, 3, (int64_t[]){1, 4, Dm}, "decoder.register_tokens");
    for (int i = 0; i < 36; i++) {
        const char *p = "decoder.transformer_blocks";
        vae_add(l, 0.8f, 1.2f, 1, d, "%s.%d.norm1.weight", p, i);
        vae_add(l, 0.8f, 1.2f, 1, d, "%s.%d.norm2.weight", p, i);
        vae_add(l, 0.05f, 0.25f, 1, d, "%s.%d.scale1", p, i);
        vae_add(l, 0.05f, 0.25f, 1, d, "%s.%d.scale2", p, i);
        const char *lin[4] = {"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0"};
        for (int k = 0; k < 4; k++) {
            vae_add(l, -aD, aD, 2, (int64_t[]){Dm, Dm}, "%s.%d.%s.weight", p, i, lin[k]);
            vae_add(l, -0.02f, 0.02f, 1, d, "%s.%d.%s.bias", p, i, lin[k]);
        }
        vae_add(l, -aD, aD, 2, (int64_t[]){2 * F, Dm}, "%s.%d.ff.net.0.proj.weight", p, i);
        vae_add(l, -0.02f, 0.02f, 1, (int64_t[]){2 * F}, "%s.%d.ff.net.0.proj.bias", p, i);
        vae_add(l, -aF, aF, 2, (int64_t[]){Dm, F}, "%s.%d.ff.net.2.weight", p, i);
        vae_add(l, -0.02f, 0.02f, 1, d, "%s.%d.ff.net.2.bias", p, i);
    }
    vae_add(l, 0.8f, 1.2f, 1, d, "decoder.norm_out.weight");
    vae_add(l, -0.1f, 0.1f, 1, d, "decoder.norm_out.bias");
    vae_add(l, -aD, aD, 2, (int64_t[]){P, Dm}, "decoder.proj_out.weight");
    vae_add(l, -0.05f, 0.05f, 1, (int64_t[]){P}, "decoder.proj_out.bias");
}

/* A weight-normed conv: g sets the output scale (w = g·v/‖v‖, so a unit-variance input gives ≈ g² variance). */
static void vae_wn(vae_list *l, const char *prefix, int64_t d0, int64_t d1, int64_t K, int64_t bias_n, float g) {
    vae_add(l, 0.9f * g, 1.1f * g, 3, (int64_t[]){d0, 1, 1}, "%s.weight_g", prefix);
    vae_add(l, -1.0f, 1.0f, 3, (int64_t[]){d0, d1, K}, "%s.weight_v", prefix);
    if (bias_n) vae_add(l, -0.02f, 0.02f, 1, &bias_n, "%s.bias", prefix);
}

/* alpha/beta in log space; the two Kaiser filters are filled with their real values after generation. */
static void vae_act(vae_list *l, const char *prefix, int64_t C) {
    vae_add(l, -0.3f, 0.3f, 1, &C, "%s.act.alpha", prefix);
    vae_add(l, -0.3f, 0.3f, 1, &C, "%s.act.beta", prefix);
    vae_add(l, 0, 0, 3, (int64_t[]){1, 1, 12}, "%s.upsample.filter", prefix);
    vae_add(l, 0, 0, 3, (int64_t[]){1, 1, 12}, "%s.downsample.lowpass.filter", prefix);
}

/* The BigVGAN decoder side of the audio VAE (docs/spec/h3-vaes.md §4.3, §4.6), release config. */
static void vae_audio_tensors(vae_list *l) {
    const int rates[7] = {5, 5, 2, 2, 2, 2, 2}, ks[7] = {9, 9, 4, 4, 4, 4, 4}, rk[3] = {3, 7, 11};
    char p[160];
    float a32 = sqrtf(3.0f / 32);
    vae_add(l, -a32, a32, 3, (int64_t[]){2048, 32, 1}, "dec_in_proj.weight");
    vae_add(l, -0.02f, 0.02f, 1, (int64_t[]){2048}, "dec_in_proj.bias");
    vae_wn(l, "decoder.conv_pre", 1024, 2048, 7, 1024, 1.0f);
    for (int s = 0; s < 7; s++) {
        int64_t Cs = 1024 >> s, C = Cs / 2;
        snprintf(p, sizeof p, "decoder.ups.%d.0", s);
        vae_wn(l, p, Cs, C, ks[s], C, sqrtf(rates[s] / 2.0f));
        for (int j = 0; j < 3; j++) {
            int r = 3 * s + j;
            for (int i = 0; i < 3; i++) {
                snprintf(p, sizeof p, "decoder.resblocks.%d.convs1.%d", r, i);
                vae_wn(l, p, C, C, rk[j], C, 1.0f);
                snprintf(p, sizeof p, "decoder.resblocks.%d.convs2.%d", r, i);
                vae_wn(l, p, C, C, rk[j], C, 0.3f);
            }
            for (int a = 0; a < 6; a++) {
                snprintf(p, sizeof p, "decoder.resblocks.%d.activations.%d", r, a);
                vae_act(l, p, C);
            }
        }
    }
    vae_act(l, "decoder.activation_post", 8);
    vae_wn(l, "decoder.conv_post", 1, 8, 7, 0, 0.2f);
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
        if (strstr(t->name, ".filter")) {
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
    if (video) vae_video_tensors(&l);
    else vae_audio_tensors(&l);
    snprintf(path, sizeof path, "%s/%s", dir, "diffusion_pytorch_model.safetensors");
    int ok = vae_write_weights(path, &l);
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
static JsonNode *vae_run_reference(const bench_options *o, const char *dir) {
    char cmd[8192], script[2048];
    reference_script(o, "h3_vae_reference.py", script, sizeof script);
    snprintf(cmd, sizeof cmd, "%s %s --dump %s --reps %d 2>&1", o->python, script, dir, o->vae_reps);
    return run_python_json(cmd, "H3VAE ");
}

void vae_bench(const bench_options *o) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/vae-bench", o->dump_dir);
    mkdir(o->dump_dir, 0755);
    mkdir(dir, 0755);
    vae_result r;
    memset(&r, 0, sizeof r);
    vae_profile_block(1);
    vae_profile_block(7);
    vae_bench_audio(o, dir, &r);
    vae_bench_video(o, dir, &r);
    JsonNode *ref = strcmp(o->reference, "none") ? vae_run_reference(o, dir) : NULL;
    double tv = ref_num(ref, "video.ms"), ta = ref_num(ref, "audio.ms");
    double pv = ref_num(ref, "video.rel_l2"), pa = ref_num(ref, "audio.rel_l2");
    printf("\nVAE decoders, 1280x736x124 (37 latents, 7 windows x 28 tiles) and 207 audio latents (5.175 s, "
           "stereo, 32 kHz):\n");
    printf("%-34s %12s %12s %10s %12s\n", "", "ours ms", "torch ms", "speedup", "parity relL2");
    printf("%-34s %12.1f %12.1f %9.2fx %12.2e\n", "video VAE decode (fp16)", r.video_ms, tv, tv / r.video_ms, pv);
    printf("%-34s %12.2f %12.2f %9.2fx %12.2e\n", "audio VAE decode (fp32)", r.audio_ms, ta, ta / r.audio_ms, pa);
    printf("video: %.1f ms per tile forward (196), %d frames emitted; target: >= 1.5x the eager reference%s\n",
           r.video_ms / 196, r.frames, !isnan(tv) && tv / r.video_ms >= 1.5 ? " (met)" : " (missed)");
    if (ref) json_node_unref(ref);
}

