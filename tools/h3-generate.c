/* h3-generate - text to video + audio from the command line.
 *
 *   h3-generate --model DIR --prompt TEXT --seed N --width W --height H
 *               --num-frames F --steps N [--backend fa|vsa] [--adapter FILE]
 *               [--vsa-sparsity S] [--ladder release|a|b]
 *               [--load-format safetensors|dummy] [--dummy-adapter none|dense|vsa] [--dummy-seed N]
 *               [--max-gpu-memory GIB] [--memory auto|resident|stream] [--max-pinned-memory GIB]
 *               --output OUT.safetensors
 *   h3-generate --plan [the same settings]
 *
 * OUT holds `video` (uint8 [F,H,W,3]), `audio` (float32 [2,samples]) and
 * __metadata__ with the aligned frame count and the sample rate. Progress
 * goes to stderr; a bad argument or model is a one-line error, exit 2.
 * --plan loads nothing: it prints the memory plan of those settings
 * (h3_memory_plan_describe) and exits 0, or 1 with the reason when a device
 * lacks the memory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h3.h"
#include "h3_image_file.h"
#include "base/h3_safetensors.h"

typedef struct clip {
    h3_plan plan;
    uint8_t *video;
    float *audio; /* planar [2, samples] */
    int frames_seen;
    int64_t samples_seen;
    int quiet;
} clip;

static void usage(FILE *f) {
    fprintf(f,
            "usage: h3-generate --model DIR --prompt TEXT --seed N --width W --height H --num-frames F --steps N\n"
            "                   [--backend fa|vsa] [--adapter FILE] [--vsa-sparsity S] [--ladder release|a|b]\n"
            "                   [--compute auto|cpu|cuda|cuda-f32] [--devices LIST]\n"
            "                   [--load-format safetensors|dummy] [--dummy-adapter none|dense|vsa] [--dummy-seed N]\n"
            "                   [--max-gpu-memory GIB] [--memory auto|resident|stream] [--max-pinned-memory GIB]\n"
            "                   [--precision bf16|fp8] [--image FILE] [--last-image FILE]\n"
            "                   [--quiet] --output OUT.safetensors\n"
            "       h3-generate --plan [the settings above; --prompt and --output optional]\n"
            "  --model DIR      MiniMax-H3 directory (diffusers layout or FL2VA/); default: the embedded tiny model\n"
            "  --steps N        denoising passes (transformer forwards); 0 = model default (49, or 4 with an adapter)\n"
            "  --num-frames F   requested frames at 24 fps, aligned up to 17n+5\n"
            "  --adapter PATH   FastH3 fastvideo-lora-v2 adapter (file or variant directory), fused at load\n"
            "  --backend fa|vsa dense attention, or VSA-H3 sparse attention (needs a FastH3 VSA adapter)\n"
            "  --vsa-sparsity S fraction of video key tiles VSA-H3 drops, [0, 0.99] (default 0.9)\n"
            "  --ladder L       FastH3 sigma ladder: release (the adapter's, default), a or b\n"
            "  --devices LIST   auto; GPUs for tensor parallelism (0,1,2,3: one rank per GPU, NCCL); or cpu:N\n"
            "                   (N CPU ranks); the count must divide the model's heads (1, 2, 4, 7, 8)\n"
            "  --load-format F  safetensors (default): the weight files; dummy: random weights drawn on each device\n"
            "                   from the configs alone (no weight files needed; the output is noise)\n"
            "  --dummy-adapter A with --load-format dummy: behave as a FastH3 adapter of kind dense or vsa\n"
            "                   (4 forwards, its attention mode; vsa adds random gates); default none\n"
            "  --dummy-seed N   with --load-format dummy: the weights' seed (default 0)\n"
            "  --max-gpu-memory GIB  use at most this much memory on each GPU (GiB, the CUDA context included;\n"
            "                   default: what is free), as on a smaller card: the plan holds requests to it and\n"
            "                   allocations past it fail\n"
            "  --precision P    bf16 (default): the linears in the backend's type; fp8: the DiT's and text\n"
            "                   encoder's linears in E4M3 with per-channel scales (a GPU of compute capability\n"
            "                   8.9 or newer, compute=cuda; emulated in float32 on the CPU)\n"
            "  --memory M       resident: every weight on the device; stream: the DiT's blocks and the text\n"
            "                   encoder's layers in host memory, copied a block ahead into a two-slot ring (same\n"
            "                   output, far less device memory); auto (default): resident when it fits, else stream\n"
            "  --max-pinned-memory GIB  with stream: host memory to page-lock for the weights (default: half\n"
            "                   of the machine's); the rest stays pageable (copied slower)\n"
            "  --image FILE     FL2VA: the clip starts on this picture (PNG, JPEG), stretched onto the canvas\n"
            "  --last-image FILE FL2VA: the clip ends on this picture, scaled to cover the canvas and cropped\n"
            "  --plan           print what these settings need on each device (weights per component, arena,\n"
            "                   workspace) against its free memory, loading nothing; exit 1 if it does not fit\n");
}

static int die(const char *fmt, const char *arg) {
    fprintf(stderr, "h3-generate: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    return 2;
}

static int parse_int(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || !*s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static void on_progress(void *opaque, h3_phase phase, int done, int total) {
    clip *c = opaque;
    if (!c->quiet) fprintf(stderr, "h3-generate: %s %d/%d\n", h3_phase_name(phase), done, total);
}

static int on_video(void *opaque, int first, int count, const uint8_t *rgb) {
    clip *c = opaque;
    size_t frame = (size_t)c->plan.width * c->plan.height * 3;
    if (first != c->frames_seen || first + count > c->plan.num_frames) return 1;
    memcpy(c->video + (size_t)first * frame, rgb, (size_t)count * frame);
    c->frames_seen += count;
    return 0;
}

static int on_audio(void *opaque, int64_t first, int64_t count, const float *inter) {
    clip *c = opaque;
    int64_t n = c->plan.audio_samples;
    if (first != c->samples_seen || first + count > n) return 1;
    for (int64_t i = 0; i < count; i++) {
        c->audio[first + i] = inter[2 * i];
        c->audio[n + first + i] = inter[2 * i + 1];
    }
    c->samples_seen += count;
    return 0;
}

/* --plan: the memory plan of these settings, nothing loaded. The prompt
 * only sets the text rows; without one, a short sentence stands in. */
static int print_plan(const h3_engine_options *opt, h3_request *req) {
    if (!req->prompt) req->prompt = "a red fox runs through fresh snow at dawn";
    h3_memory_plan plan;
    h3_status st = {0};
    if (h3_memory_plan_make(opt, req, &plan, &st) != H3_OK) return die("%s", st.message);
    char *text = h3_memory_plan_describe(&plan);
    if (!text) return die("%s", "out of memory");
    fputs(text, stdout);
    free(text);
    if (plan.fits) return 0;
    for (int i = 0; i < plan.n_devices; i++) {
        const h3_memory_device *d = &plan.devices[i];
        if (d->available && d->total > d->available)
            fprintf(stderr, "h3-generate: does not fit: cuda:%d needs %.2f GiB but %.2f GiB are free\n", d->device,
                    (double)d->total / (1 << 30), (double)d->available / (1 << 30));
    }
    return 1;
}

static int generate(const h3_engine_options *options, h3_request *request, const char *output, int plan_only,
                    int quiet);

int main(int argc, char **argv) {
    h3_engine_options opt = h3_engine_options_default();
    h3_request req = h3_request_default();
    const char *output = NULL, *first_path = NULL, *last_path = NULL;
    int have_seed = 0, have_w = 0, have_h = 0, have_f = 0, have_steps = 0, quiet = 0, plan_only = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--quiet")) { quiet = 1; continue; }
        if (!strcmp(a, "--plan")) { plan_only = 1; continue; }
        if (i + 1 >= argc) return die("option %s needs a value", a);
        const char *v = argv[++i];
        long long n;
        if (!strcmp(a, "--model")) opt.model_dir = v;
        else if (!strcmp(a, "--prompt")) req.prompt = v;
        else if (!strcmp(a, "--output")) output = v;
        else if (!strcmp(a, "--adapter")) opt.adapter_path = v;
        else if (!strcmp(a, "--devices")) opt.devices = v;
        else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || !*v || *end || v[0] == '-') return die("--seed '%s': not a non-negative integer", v);
            req.seed = s;
            have_seed = 1;
        } else if (!strcmp(a, "--width")) {
            if (!parse_int(v, 1, 1 << 16, &n)) return die("--width '%s': not a positive integer", v);
            req.width = (int)n; have_w = 1;
        } else if (!strcmp(a, "--height")) {
            if (!parse_int(v, 1, 1 << 16, &n)) return die("--height '%s': not a positive integer", v);
            req.height = (int)n; have_h = 1;
        } else if (!strcmp(a, "--num-frames")) {
            if (!parse_int(v, 1, 1 << 20, &n)) return die("--num-frames '%s': not a positive integer", v);
            req.num_frames = (int)n; have_f = 1;
        } else if (!strcmp(a, "--steps")) {
            if (!parse_int(v, 0, 1 << 20, &n)) return die("--steps '%s': not a non-negative integer", v);
            req.steps = (int)n; have_steps = 1;
        } else if (!strcmp(a, "--backend")) {
            if (!strcmp(v, "fa")) req.attention = H3_ATTENTION_DENSE;
            else if (!strcmp(v, "vsa")) req.attention = H3_ATTENTION_VSA;
            else return die("--backend '%s': must be fa or vsa", v);
        } else if (!strcmp(a, "--vsa-sparsity")) {
            char *end;
            errno = 0;
            double s = strtod(v, &end);
            if (errno || !*v || *end || !(s >= 0.0 && s < 1.0)) return die("--vsa-sparsity '%s': must be in [0, 1)", v);
            req.vsa_sparsity = (float)s;
        } else if (!strcmp(a, "--ladder")) {
            if (!strcmp(v, "release")) req.ladder = H3_LADDER_RELEASE;
            else if (!strcmp(v, "a")) req.ladder = H3_LADDER_A;
            else if (!strcmp(v, "b")) req.ladder = H3_LADDER_B;
            else return die("--ladder '%s': must be release, a or b", v);
        } else if (!strcmp(a, "--load-format")) {
            if (!strcmp(v, "safetensors")) opt.load_format = H3_LOAD_SAFETENSORS;
            else if (!strcmp(v, "dummy")) opt.load_format = H3_LOAD_DUMMY;
            else return die("--load-format '%s': must be safetensors or dummy", v);
        } else if (!strcmp(a, "--dummy-adapter")) {
            if (!strcmp(v, "none")) opt.dummy_adapter = H3_DUMMY_ADAPTER_NONE;
            else if (!strcmp(v, "dense")) opt.dummy_adapter = H3_DUMMY_ADAPTER_DENSE;
            else if (!strcmp(v, "vsa")) opt.dummy_adapter = H3_DUMMY_ADAPTER_VSA;
            else return die("--dummy-adapter '%s': must be none, dense or vsa", v);
        } else if (!strcmp(a, "--dummy-seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || !*v || *end || v[0] == '-') return die("--dummy-seed '%s': not a non-negative integer", v);
            opt.dummy_seed = s;
        } else if (!strcmp(a, "--image")) {
            first_path = v;
        } else if (!strcmp(a, "--last-image")) {
            last_path = v;
        } else if (!strcmp(a, "--max-gpu-memory")) {
            char *end;
            errno = 0;
            double gib = strtod(v, &end);
            if (errno || !*v || *end || !(gib > 0 && gib <= 1048576))
                return die("--max-gpu-memory '%s': GiB, a positive number", v);
            opt.max_gpu_memory = (uint64_t)(gib * 1073741824.0);
        } else if (!strcmp(a, "--precision")) {
            h3_status pst = {0};
            if (h3_precision_parse(v, &opt.precision, &pst) != H3_OK) return die("--%s", pst.message);
        } else if (!strcmp(a, "--memory")) {
            h3_status ms = {0};
            if (h3_memory_mode_parse(v, &opt.memory, &ms) != H3_OK) return die("--%s", ms.message);
        } else if (!strcmp(a, "--max-pinned-memory")) {
            char *end;
            errno = 0;
            double gib = strtod(v, &end);
            if (errno || !*v || *end || !(gib > 0 && gib <= 1048576))
                return die("--max-pinned-memory '%s': GiB, a positive number", v);
            opt.max_pinned_memory = (uint64_t)(gib * 1073741824.0);
        } else if (!strcmp(a, "--compute")) {
            if (!strcmp(v, "auto")) opt.compute = H3_COMPUTE_AUTO;
            else if (!strcmp(v, "cpu")) opt.compute = H3_COMPUTE_CPU;
            else if (!strcmp(v, "cuda")) opt.compute = H3_COMPUTE_CUDA;
            else if (!strcmp(v, "cuda-f32")) opt.compute = H3_COMPUTE_CUDA_F32;
            else return die("--compute '%s': must be auto, cpu, cuda or cuda-f32", v);
        } else {
            return die("unknown option %s (see --help)", a);
        }
    }
    (void)have_seed; (void)have_w; (void)have_h; (void)have_f; (void)have_steps;
    /* keyframes: decoded here, before the model loads, so a bad file fails at once */
    h3_image_file first = {0}, last = {0};
    h3_status st = {0};
    if (first_path && h3_image_file_load(first_path, &first, &st) != H3_OK) return die("--image: %s", st.message);
    if (last_path && h3_image_file_load(last_path, &last, &st) != H3_OK) {
        h3_image_file_clear(&first);
        return die("--last-image: %s", st.message);
    }
    req.first_image = first_path ? &first.image : NULL;
    req.last_image = last_path ? &last.image : NULL;
    int rc = generate(&opt, &req, output, plan_only, quiet);
    h3_image_file_clear(&first);
    h3_image_file_clear(&last);
    return rc;
}

/* The clip of req to output (or --plan), once the options are parsed. */
static int generate(const h3_engine_options *options, h3_request *request, const char *output, int plan_only,
                    int quiet) {
    h3_engine_options opt = *options;
    h3_request req = *request;
    if (plan_only) return print_plan(&opt, &req);
    int rc = 0;
    if (!req.prompt) return die("%s", "--prompt is required");
    if (!output) return die("%s", "--output is required");

    h3_status st = {0};
    h3_engine *engine;
    if (h3_engine_open(&opt, &engine, &st) != H3_OK) return die("%s", st.message);
    h3_stats opened;
    h3_engine_get_stats(engine, &opened);
    if (opened.random_weights && !quiet)
        fprintf(stderr, "h3-generate: weights are random (load-format dummy, seed %llu): the output is noise\n",
                (unsigned long long)opt.dummy_seed);
    clip c = {0};
    c.quiet = quiet;
    if (h3_engine_validate(engine, &req, &c.plan, &st) != H3_OK) {
        h3_engine_close(engine);
        return die("%s", st.message);
    }
    if (!quiet)
        fprintf(stderr, "h3-generate: %dx%d, %d frames (requested %d), %lld audio samples at %d Hz, %d steps, %d text tokens\n",
                c.plan.width, c.plan.height, c.plan.num_frames, req.num_frames, (long long)c.plan.audio_samples,
                c.plan.sample_rate, c.plan.steps, c.plan.text_tokens);
    size_t frame = (size_t)c.plan.width * c.plan.height * 3;
    c.video = calloc((size_t)c.plan.num_frames, frame);
    c.audio = calloc((size_t)(2 * c.plan.audio_samples), sizeof(float));
    if (!c.video || !c.audio) {
        h3_engine_close(engine);
        return die("%s", "out of memory for the output clip");
    }
    h3_callbacks cb = {.progress = on_progress, .video_frames = on_video, .audio_samples = on_audio, .opaque = &c};
    if (h3_engine_generate(engine, &req, &cb, &st) != H3_OK) {
        fprintf(stderr, "h3-generate: %s\n", st.message);
        rc = st.code == H3_ERR_INVALID_ARGUMENT ? 2 : 1;
    } else if (c.frames_seen != c.plan.num_frames || c.samples_seen != c.plan.audio_samples) {
        fprintf(stderr, "h3-generate: engine delivered %d/%d frames and %lld/%lld samples\n", c.frames_seen,
                c.plan.num_frames, (long long)c.samples_seen, (long long)c.plan.audio_samples);
        rc = 1;
    } else {
        char frames[32], rate[32], seed[32], steps[32];
        snprintf(frames, sizeof frames, "%d", c.plan.num_frames);
        snprintf(rate, sizeof rate, "%d", c.plan.sample_rate);
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)req.seed);
        snprintf(steps, sizeof steps, "%d", c.plan.steps);
        const char *meta[] = {"num_frames", frames, "sample_rate", rate, "fps", "24", "seed", seed,
                              "steps", steps, "prompt", req.prompt, NULL};
        h3_st_write_tensor t[2] = {
            {"video", H3_ST_U8, 4, {c.plan.num_frames, c.plan.height, c.plan.width, 3}, c.video},
            {"audio", H3_ST_F32, 2, {2, c.plan.audio_samples}, c.audio},
        };
        if (h3_st_write(output, t, 2, meta, &st) != H3_OK) {
            fprintf(stderr, "h3-generate: %s\n", st.message);
            rc = 1;
        } else if (!quiet) {
            h3_stats s;
            h3_engine_get_stats(engine, &s);
            fprintf(stderr, "h3-generate: wrote %s (%s, %s: text %.2f s, denoise %.2f s (%.3f s/step), audio %.2f s, video %.2f s)\n",
                    output, s.compute, s.precision, s.text, s.denoise, s.per_step, s.decode_audio, s.decode_video);
            fprintf(stderr, "h3-generate: memory=%s (%s): device peak %.2f GiB, host %.2f GiB pinned + %.2f GiB pageable\n",
                    s.memory, s.memory_reason, (double)s.peak_bytes / 1073741824.0,
                    (double)s.host_pinned_bytes / 1073741824.0, (double)s.host_pageable_bytes / 1073741824.0);
        }
    }
    free(c.video);
    free(c.audio);
    h3_engine_close(engine);
    return rc;
}
