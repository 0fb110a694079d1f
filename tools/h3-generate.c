/* h3-generate - text to video + audio from the command line.
 *
 *   h3-generate --prompt TEXT [--model DIR] [--seed N] [--width W] ...
 *               [--image FILE] [--last-image FILE] [--reference image:FILE|audio:FILE.wav ...]
 *               --output OUT.safetensors
 *   h3-generate --plan [the same settings]
 *
 * Every setting of the request and the engine is an option named after its
 * row of the request schema (h3_params: --NAME, or the row's `option`),
 * parsed, ranged and documented there; --help prints them from it. A list
 * row (--lora PATH[:STRENGTH]) takes the option once per item.
 * OUT holds `video` (uint8 [F,H,W,3]), `audio` (float32 [2,samples]) and
 * __metadata__ with the aligned frame count and the sample rate. Progress
 * goes to stderr; a bad argument or model is a one-line error, exit 2.
 * --plan loads nothing: it prints the memory plan of those settings
 * (h3_memory_plan_describe) and exits 0, or 1 with the reason when a device
 * lacks the memory. */
#include <errno.h>
#include <glib.h>
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

/* The options that are not request or engine settings. */
static const struct {
    const char *option, *arg, *doc;
} own_options[] = {
    {"image", "FILE", "FL2VA: the clip starts on this picture (PNG, JPEG), stretched onto the canvas"},
    {"last-image", "FILE", "FL2VA: the clip ends on this picture, scaled to cover the canvas and cropped"},
    {"reference", "KIND:FILE", "Ref2VA: a reference, repeatable, in the order the prompt names them "
                               "(<Picture 1>, <Audio 1>, ...); KIND image (PNG, JPEG) or audio (stereo WAV at "
                               "the model's audio rate, at most the clip's length)"},
    {"output", "FILE", "the clip's safetensors (required unless --plan)"},
    {"plan", NULL, "print what these settings need on each device (weights per component, arena, workspace) "
                   "against its free memory, loading nothing; exit 1 if it does not fit"},
    {"quiet", NULL, "no progress on stderr"},
    {"help", NULL, "this text"},
};

static const char *metavar(const h3_param *p) {
    switch (p->type) {
    case H3_PARAM_STRING: return p->flags & H3_PARAM_PATH ? "PATH" : "TEXT";
    case H3_PARAM_BYTES: return "GIB";
    case H3_PARAM_FLOAT: return "X";
    case H3_PARAM_ENUM: return "NAME";
    case H3_PARAM_STRV: return p->flags & H3_PARAM_PATH ? "PATH[:STRENGTH]" : "ITEM";
    default: return "N";
    }
}

static void usage(FILE *f) {
    fprintf(f, "usage: h3-generate --prompt TEXT [options] --output OUT.safetensors\n"
               "       h3-generate --plan [options; --prompt and --output optional]\n");
    for (const h3_param *p = h3_params(); p->name; p++) {
        char *allowed = h3_param_allowed(p);
        char *def = p->flags & H3_PARAM_RUNTIME_DEFAULT ? strdup("the embedded tiny model") : NULL;
        if (!def && !(p->type == H3_PARAM_STRING && !p->string_default) && p->type != H3_PARAM_STRV) {
            h3_request r = h3_request_default();
            h3_engine_options o = h3_engine_options_default();
            def = h3_param_format(p, p->home == H3_PARAM_IN_REQUEST ? (void *)&r : (void *)&o);
        }
        fprintf(f, "  --%s %s%s\n      %s", p->option ? p->option : p->name, metavar(p),
                p->type == H3_PARAM_STRV ? " (repeatable)" : "", p->doc);
        if (p->type != H3_PARAM_STRING && allowed) fprintf(f, "; %s", allowed);
        if (def) fprintf(f, " (default %s)", def);
        fputc('\n', f);
        free(allowed);
        free(def);
    }
    for (size_t i = 0; i < sizeof own_options / sizeof own_options[0]; i++)
        fprintf(f, "  --%s%s%s\n      %s\n", own_options[i].option, own_options[i].arg ? " " : "",
                own_options[i].arg ? own_options[i].arg : "", own_options[i].doc);
}

static int die(const char *fmt, const char *arg) {
    fprintf(stderr, "h3-generate: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    return 2;
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

/* A WAV file's samples, interleaved float: RIFF/WAVE with a fmt chunk of
 * IEEE float 32-bit (format 3) or 16-bit PCM (format 1), stereo. Returns
 * NULL with why[] filled on any other file. */
static float *wav_load(const char *path, int64_t *frames, int *rate, char *why, size_t why_len) {
    gchar *bytes = NULL;
    gsize len = 0;
    float *out = NULL;
    if (!g_file_get_contents(path, &bytes, &len, NULL)) {
        snprintf(why, why_len, "'%s' cannot be read", path);
        return NULL;
    }
    const uint8_t *b = (const uint8_t *)bytes;
    int fmt = 0, channels = 0, bits = 0;
    const uint8_t *data = NULL;
    size_t data_len = 0;
    if (len < 12 || memcmp(b, "RIFF", 4) || memcmp(b + 8, "WAVE", 4)) {
        snprintf(why, why_len, "'%s' is not a WAV file (no RIFF/WAVE header)", path);
        goto done;
    }
    for (size_t at = 12; at + 8 <= len;) {
        uint32_t n = (uint32_t)b[at + 4] | (uint32_t)b[at + 5] << 8 | (uint32_t)b[at + 6] << 16 | (uint32_t)b[at + 7] << 24;
        if (n > len - at - 8) n = (uint32_t)(len - at - 8); /* a truncated last chunk: what is there */
        if (!memcmp(b + at, "fmt ", 4) && n >= 16) {
            fmt = b[at + 8] | b[at + 9] << 8;
            channels = b[at + 10] | b[at + 11] << 8;
            *rate = (int)((uint32_t)b[at + 12] | (uint32_t)b[at + 13] << 8 | (uint32_t)b[at + 14] << 16 |
                          (uint32_t)b[at + 15] << 24);
            bits = b[at + 22] | b[at + 23] << 8;
        } else if (!memcmp(b + at, "data", 4)) {
            data = b + at + 8;
            data_len = n;
        }
        at += 8 + (size_t)n + (n & 1);
    }
    int ok_fmt = (fmt == 3 && bits == 32) || (fmt == 1 && bits == 16);
    if (!ok_fmt || channels != 2 || !data || *rate < 1) {
        snprintf(why, why_len,
                 "'%s': format %d, %d bits, %d channels%s; want stereo IEEE float 32-bit or 16-bit PCM", path, fmt,
                 bits, channels, data ? "" : ", no data chunk");
        goto done;
    }
    size_t per = (size_t)bits / 8 * 2;
    *frames = (int64_t)(data_len / per);
    if (*frames == 0) {
        snprintf(why, why_len, "'%s' holds no samples", path);
        goto done;
    }
    out = malloc((size_t)(*frames > 0 ? *frames : 1) * 2 * sizeof *out);
    if (!out) {
        snprintf(why, why_len, "'%s': out of memory", path);
        goto done;
    }
    for (int64_t i = 0; i < 2 * *frames; i++) {
        if (fmt == 3) memcpy(&out[i], data + 4 * i, 4); /* little-endian host */
        else out[i] = (float)(int16_t)(data[2 * i] | data[2 * i + 1] << 8) / 32768.0f;
    }
done:
    g_free(bytes);
    return out;
}

/* --reference KIND:FILE values, decoded before the model loads (a bad file
 * fails at once): image:FILE (PNG, JPEG), audio:FILE (WAV); video is not
 * yet supported. */
static int load_references(const char **args, int n, h3_image_file *files, float **audio, h3_reference *refs) {
    for (int i = 0; i < n; i++) {
        const char *colon = strchr(args[i], ':');
        size_t k = colon ? (size_t)(colon - args[i]) : 0;
        int image = k == 5 && !strncmp(args[i], "image", 5), sound = k == 5 && !strncmp(args[i], "audio", 5);
        if (!image && !sound)
            return die("--reference '%s': expected image:FILE or audio:FILE (video references are not yet "
                       "supported)",
                       args[i]);
        memset(&refs[i], 0, sizeof refs[i]);
        if (sound) {
            char why[512];
            audio[i] = wav_load(colon + 1, &refs[i].num_samples, &refs[i].sample_rate, why, sizeof why);
            if (!audio[i]) return die("--reference: %s", why);
            refs[i].kind = H3_REFERENCE_AUDIO;
            refs[i].samples = audio[i];
            continue;
        }
        h3_status st = {0};
        if (h3_image_file_load(colon + 1, &files[i], &st) != H3_OK) return die("--reference: %s", st.message);
        refs[i].kind = H3_REFERENCE_IMAGE;
        refs[i].image = files[i].image;
    }
    return 0;
}

/* The options parsed into *opt (its lists are parse's: main frees them). */
static int cli(int argc, char **argv, h3_engine_options *opt) {
    h3_request req = h3_request_default();
    const char *output = NULL, *first_path = NULL, *last_path = NULL;
    const char *ref_args[H3_MAX_REFERENCES];
    int n_refs = 0;
    int quiet = 0, plan_only = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--quiet")) { quiet = 1; continue; }
        if (!strcmp(a, "--plan")) { plan_only = 1; continue; }
        const h3_param *p = strncmp(a, "--", 2) == 0 ? h3_param_find_option(NULL, a + 2) : NULL;
        int own = !strcmp(a, "--output") || !strcmp(a, "--image") || !strcmp(a, "--last-image") ||
                  !strcmp(a, "--reference");
        if (!p && !own) return die("unknown option %s (see --help)", a);
        if (i + 1 >= argc) return die("option %s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--output")) output = v;
        else if (!strcmp(a, "--image")) first_path = v;
        else if (!strcmp(a, "--last-image")) last_path = v;
        else if (!strcmp(a, "--reference")) {
            if (n_refs == H3_MAX_REFERENCES) return die("--reference %s: more references than a request takes (see h3.h)", v);
            ref_args[n_refs++] = v;
        }
        else {
            h3_status pst = {0};
            void *home = p->home == H3_PARAM_IN_REQUEST ? (void *)&req : (void *)opt;
            if (h3_param_parse(p, v, H3_PARSE_GIB, home, &pst) != H3_OK) return die("--%s", pst.message);
        }
    }
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
    h3_image_file ref_files[H3_MAX_REFERENCES] = {0};
    h3_reference refs[H3_MAX_REFERENCES];
    float *ref_audio[H3_MAX_REFERENCES] = {0};
    int rc = load_references(ref_args, n_refs, ref_files, ref_audio, refs);
    req.references = n_refs ? refs : NULL;
    req.num_references = n_refs;
    if (rc == 0) rc = generate(opt, &req, output, plan_only, quiet);
    for (int i = 0; i < n_refs; i++) {
        h3_image_file_clear(&ref_files[i]);
        free(ref_audio[i]);
    }
    h3_image_file_clear(&first);
    h3_image_file_clear(&last);
    return rc;
}

int main(int argc, char **argv) {
    h3_engine_options opt = h3_engine_options_default();
    int rc = cli(argc, argv, &opt);
    for (const h3_param *p = h3_params(); p->name; p++) h3_param_free_value(p, &opt);
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
    /* prepared once: checked, keyframes fitted, the memory plan decided */
    h3_job *job = NULL;
    if (h3_engine_prepare(engine, &req, &job, &st) != H3_OK) {
        h3_engine_close(engine);
        return die("%s", st.message);
    }
    c.plan = *h3_job_plan(job);
    if (!quiet)
        fprintf(stderr, "h3-generate: %dx%d, %d frames (requested %d), %lld audio samples at %d Hz, %d steps, %d text tokens\n",
                c.plan.width, c.plan.height, c.plan.num_frames, req.num_frames, (long long)c.plan.audio_samples,
                c.plan.sample_rate, c.plan.steps, c.plan.text_tokens);
    size_t frame = (size_t)c.plan.width * c.plan.height * 3;
    c.video = calloc((size_t)c.plan.num_frames, frame);
    c.audio = calloc((size_t)(2 * c.plan.audio_samples), sizeof(float));
    if (!c.video || !c.audio) {
        free(c.video);
        free(c.audio);
        h3_job_free(job);
        h3_engine_close(engine);
        return die("%s", "out of memory for the output clip");
    }
    h3_callbacks cb = {.progress = on_progress, .video_frames = on_video, .audio_samples = on_audio, .opaque = &c};
    if (h3_engine_run(engine, job, &cb, &st) != H3_OK) {
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
    h3_job_free(job);
    h3_engine_close(engine);
    return rc;
}
