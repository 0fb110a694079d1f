/* fuzz_engine_open, fuzz_memory_plan: the model-folder resolver and every
 * loader behind h3_engine_open, on a copy of a model (H3_FUZZ_MODEL: the
 * build's tests/fuzz/seeds/model: make_seeds.c's engine_model, the embedded
 * tiny model shrunk to the fewest and narrowest parts that still take every
 * path of a load, with a small tokenizer) whose small files come from the
 * input.
 *
 * The folder is a tree of symbolic links to that model, made once.
 * Input: parts "relpath\ncontent"; relpath is one of the files below (any
 * other part is dropped); each replaces that file for this run, an empty
 * content deletes it. A pseudo-file "@devices" sets that option (e.g.
 * "cpu:2": tensor parallelism over two CPU ranks; at most 4).
 *
 * fuzz_engine_open (H3_FUZZ_PLAN 0): h3_engine_open loads the model's
 * weights (135 K values, converted and checked for NaN/Inf; the json parse
 * of their headers is now the larger part); an engine that opens validates
 * a small request (tokenizes, plans) and is closed.
 *
 * fuzz_memory_plan (H3_FUZZ_PLAN 1): h3_memory_plan_make for that request,
 * which opens the same folder on measuring backends (no weight read) and
 * runs a measured generation. By default with load_format dummy: the
 * checkpoints are made from the configs alone, so the resolver, the configs,
 * the tokenizer and the plan run without the tiny model's 150 KB of
 * safetensors headers, whose json parse took half the time (the headers are
 * the safetensors and checkpoint harnesses', their agreement with the
 * configs engine_open's). A pseudo-file "@load" of "safetensors" reads the
 * real headers instead. "@request" of "W H F S" sets
 * the request's width, height, frames and steps (at most 512 x 512, 121
 * frames, 8 steps, so that a run stays short; h3_engine_validate refuses
 * the rest of what is out of range); "@memory" the memory mode by name
 * (h3_memory_mode_parse: auto, resident, stream, the streamed plan's slots
 * sized from the configs).
 *
 * Either way the links are then restored. */
#include "h3_fuzz.h"
#include "h3_fuzz_nest.h" /* runs of [ and { (issue 31) */

#include "h3.h"

#ifndef H3_FUZZ_PLAN
#define H3_FUZZ_PLAN 0
#endif

static const char *const files[] = {
    "model_index.json", "modular_model_index.json", "golden_meta.json",
    "scheduler/scheduler_config.json", "audio_scheduler/scheduler_config.json",
    "transformer/config.json", "text_encoder/config.json", "vae/config.json", "vae/source/config.json",
    "audio_vae/config.json", "audio_vae/metadata.json",
    "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json", "tokenizer/special_tokens_map.json",
    "tokenizer/added_tokens.json", "tokenizer/vocab.json", "tokenizer/merges.txt",
};

static char *model_src;

/* Links root/rel to the model's rel (or removes it when the model has none). */
static void link_one(const char *rel) {
    char *src = g_build_filename(model_src, rel, NULL);
    char *dst = h3_fuzz_path(rel);
    char *dir = g_path_get_dirname(dst);
    unlink(dst);
    if (g_file_test(src, G_FILE_TEST_IS_REGULAR)) {
        g_mkdir_with_parents(dir, 0700);
        if (symlink(src, dst) != 0) {
            fprintf(stderr, "fuzz_engine_open: symlink %s: %s\n", dst, strerror(errno));
            abort();
        }
    }
    g_free(dir);
    g_free(dst);
    g_free(src);
}

static void link_tree(const char *rel) {
    char *src = rel ? g_build_filename(model_src, rel, NULL) : g_strdup(model_src);
    GDir *d = g_dir_open(src, 0, NULL);
    if (!d) {
        fprintf(stderr, "fuzz_engine_open: no model at %s (H3_FUZZ_MODEL)\n", src);
        abort();
    }
    for (const char *name; (name = g_dir_read_name(d));) {
        char *sub = rel ? g_build_filename(rel, name, NULL) : g_strdup(name);
        char *p = g_build_filename(model_src, sub, NULL);
        if (g_file_test(p, G_FILE_TEST_IS_DIR)) link_tree(sub);
        else link_one(sub);
        g_free(p);
        g_free(sub);
    }
    g_dir_close(d);
    g_free(src);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    h3_fuzz_init();
    model_src = g_strdup(h3_fuzz_setting("H3_FUZZ_MODEL", H3_FUZZ_MODEL));
    link_tree(NULL);
    return 0;
}

static void quiet(void *opaque, h3_log_level level, const char *message) {
    (void)opaque; (void)level;
    volatile size_t n = strlen(message);
    (void)n;
}

static h3_request small_request(void) {
    h3_request r = h3_request_default();
    r.prompt = "a robot dancing";
    r.width = 64;
    r.height = 32;
    r.num_frames = 22;
    r.steps = 2;
    return r;
}

/* "W H F S"; values past the harness's bounds keep the small request's. */
static void parse_request(const uint8_t *body, size_t size, h3_request *r) {
    char text[64];
    size_t m = size < sizeof text - 1 ? size : sizeof text - 1;
    memcpy(text, body, m);
    text[m] = 0;
    int v[4] = {r->width, r->height, r->num_frames, r->steps};
    if (sscanf(text, "%d %d %d %d", &v[0], &v[1], &v[2], &v[3]) < 1) return;
    const int hi[4] = {512, 512, 121, 8};
    r->width = v[0] <= hi[0] ? v[0] : r->width;
    r->height = v[1] <= hi[1] ? v[1] : r->height;
    r->num_frames = v[2] <= hi[2] ? v[2] : r->num_frames;
    r->steps = v[3] <= hi[3] ? v[3] : r->steps;
}

/* The memory mode's name through h3_memory_mode_parse (a refused one keeps
 * auto, its message read). */
static void parse_memory(const uint8_t *body, size_t size, h3_memory_mode *mode) {
    char name[32];
    size_t m = size < sizeof name - 1 ? size : sizeof name - 1;
    memcpy(name, body, m);
    name[m] = 0;
    h3_status st;
    if (h3_memory_mode_parse(name, mode, &st) != H3_OK) {
        h3_fuzz_check_status(&st);
        *mode = H3_MEMORY_AUTO;
    }
}

#if H3_FUZZ_PLAN
/* A plan that was made: sane counts, a describable text. */
static void plan_one(const h3_engine_options *o, const h3_request *r) {
    h3_memory_plan plan;
    h3_status st;
    if (h3_memory_plan_make(o, r, &plan, &st) != H3_OK) {
        h3_fuzz_check_status(&st);
        return;
    }
    if (plan.n_devices < 1 || plan.n_devices > H3_MAX_DEVICES) abort();
    if (plan.memory != H3_MEMORY_RESIDENT && plan.memory != H3_MEMORY_STREAM) abort(); /* a mode was chosen */
    if (strnlen(plan.memory_reason, sizeof plan.memory_reason) >= sizeof plan.memory_reason) abort();
    for (int i = 0; i < plan.n_devices; i++) {
        const h3_memory_device *d = &plan.devices[i];
        uint64_t weights = d->text_encoder + d->transformer + d->video_vae + d->audio_vae;
        /* total is the sum, or with the text encoder released the highest point, never more than the sum */
        if (d->total > weights + d->arena + d->workspace) abort();
        if (!plan.text_encoder_released && d->total != weights + d->arena + d->workspace) abort();
    }
    char *text = h3_memory_plan_describe(&plan);
    if (!text) abort();
    volatile size_t n = strlen(text);
    (void)n;
    free(text);
}
#else
static void open_one(const h3_engine_options *o, const h3_request *r) {
    h3_engine *e = NULL;
    h3_status st;
    if (h3_engine_open(o, &e, &st) != H3_OK) {
        h3_fuzz_check_status(&st);
        return;
    }
    h3_plan plan;
    if (h3_engine_validate(e, r, &plan, &st) != H3_OK) h3_fuzz_check_status(&st);
    h3_stats stats;
    h3_engine_get_stats(e, &stats);
    h3_engine_close(e);
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    h3_fuzz_part parts[H3_FUZZ_MAX_PARTS];
    size_t n = h3_fuzz_split(data, size, parts, H3_FUZZ_MAX_PARTS);
    int changed[G_N_ELEMENTS(files)] = {0}, dummy = H3_FUZZ_PLAN;
    h3_memory_mode memory = H3_MEMORY_AUTO;
    char devices[32] = "";
    h3_request r = small_request();
    for (size_t i = 0; i < n; i++) {
        const uint8_t *nl = memchr(parts[i].data, '\n', parts[i].size);
        if (!nl) continue;
        size_t len = (size_t)(nl - parts[i].data);
        const uint8_t *body = nl + 1;
        size_t body_size = parts[i].size - len - 1;
        if (H3_FUZZ_PLAN && len == 5 && memcmp(parts[i].data, "@load", 5) == 0) {
            dummy = !(body_size >= 11 && memcmp(body, "safetensors", 11) == 0);
            continue;
        }
        if (H3_FUZZ_PLAN && len == 7 && memcmp(parts[i].data, "@memory", 7) == 0) {
            parse_memory(body, body_size, &memory);
            continue;
        }
        if (H3_FUZZ_PLAN && len == 8 && memcmp(parts[i].data, "@request", 8) == 0) {
            parse_request(body, body_size, &r);
            continue;
        }
        if (len == 8 && memcmp(parts[i].data, "@devices", 8) == 0) {
            size_t m = body_size < sizeof devices - 1 ? body_size : sizeof devices - 1;
            memcpy(devices, body, m);
            devices[m] = 0;
            /* a few CPU ranks at most: threads are not what is fuzzed here */
            if (strncmp(devices, "cpu:", 4) == 0 && atoi(devices + 4) > 4) devices[0] = 0;
            continue;
        }
        for (size_t f = 0; f < G_N_ELEMENTS(files); f++) {
            if (strlen(files[f]) != len || memcmp(parts[i].data, files[f], len) != 0) continue;
            if (body_size) g_free(h3_fuzz_write(files[f], body, body_size));
            else h3_fuzz_remove(files[f]);
            changed[f] = 1;
        }
    }
    char *root = h3_fuzz_path("");

    h3_engine_options o = h3_engine_options_default();
    o.model_dir = root;
    o.compute = H3_COMPUTE_CPU;
    o.cpu_threads = 1;
    o.devices = devices[0] ? devices : NULL;
    o.log = quiet;
#if H3_FUZZ_PLAN
    o.load_format = dummy ? H3_LOAD_DUMMY : H3_LOAD_SAFETENSORS;
    o.memory = memory;
    plan_one(&o, &r);
#else
    (void)dummy;
    (void)memory;
    open_one(&o, &r);
#endif

    g_free(root);
    for (size_t f = 0; f < G_N_ELEMENTS(files); f++)
        if (changed[f]) {
            h3_fuzz_remove(files[f]);
            link_one(files[f]);
        }
    return 0;
}
