/* h3_request.c - the request schema: every parameter of a request and of
 * the engine options, one row each (name, type, place, default, range or
 * values, documentation), and the rules that need no model, each written
 * once here: the defaults, h3_request_check, h3_engine_options_check and
 * the `devices` grammar. h3_engine_validate applies them first; the element
 * and the tools build their properties, options, URI keys and checks from
 * the same rows, to fail early, before a model is loaded. */
#include "h3.h"
#include "model/h3_lora.h"
#include "model/h3_vsa.h"

#include <errno.h>
#include <math.h>
#include <glib.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *h3_phase_name(h3_phase phase) {
    switch (phase) {
    case H3_PHASE_LOAD: return "load";
    case H3_PHASE_TEXT: return "text";
    case H3_PHASE_DENOISE: return "denoise";
    case H3_PHASE_DECODE_VIDEO: return "decode-video";
    case H3_PHASE_DECODE_AUDIO: return "decode-audio";
    case H3_PHASE_DONE: return "done";
    }
    return "?";
}

/* The enums' names are their rows' choices (below). */
const char *h3_memory_mode_name(h3_memory_mode mode) {
    const h3_param_choice *c = h3_param_choice_by_value(h3_param_find(NULL, "memory"), (int)mode);
    return c ? c->nick : NULL;
}

h3_status_code h3_memory_mode_parse(const char *name, h3_memory_mode *out, h3_status *status) {
    h3_engine_options o = {0};
    h3_status_code rc = h3_param_parse(h3_param_find(NULL, "memory"), name, 0, &o, status);
    if (rc == H3_OK) *out = o.memory;
    return rc;
}

const char *h3_precision_name(h3_precision p) {
    const h3_param_choice *c = h3_param_choice_by_value(h3_param_find(NULL, "precision"), (int)p);
    return c ? c->nick : NULL;
}

h3_status_code h3_precision_parse(const char *text, h3_precision *out, h3_status *status) {
    h3_engine_options o = {0};
    h3_status_code rc = h3_param_parse(h3_param_find(NULL, "precision"), text, 0, &o, status);
    if (rc == H3_OK) *out = o.precision;
    return rc;
}

/* ---- the rows' own rules --------------------------------------------------- */

/* Only white space (or nothing): the text encoder would see no description. */
static int blank(const char *s) {
    for (; *s; s++)
        if (!g_ascii_isspace(*s)) return 0;
    return 1;
}

static h3_status_code check_prompt(const h3_request *r, const h3_engine_options *o, h3_status *status) {
    (void)o;
    if (!r->prompt || blank(r->prompt))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "prompt is empty: describe the clip to generate");
    if (!g_utf8_validate(r->prompt, -1, NULL))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "prompt is not valid UTF-8");
    return H3_OK;
}

/* The nearest allowed sides below and above v, for the message. */
static void side_neighbours(int v, int *down, int *up) {
    int d = v / H3_SIDE_MULTIPLE * H3_SIDE_MULTIPLE, u = d + H3_SIDE_MULTIPLE;
    *down = d < H3_MIN_SIDE ? H3_MIN_SIDE : d > H3_MAX_SIDE ? H3_MAX_SIDE : d;
    *up = u < H3_MIN_SIDE ? H3_MIN_SIDE : u > H3_MAX_SIDE ? H3_MAX_SIDE : u;
}

static h3_status_code check_side(const char *name, int v, const h3_request *r, h3_status *status) {
    if (v >= H3_MIN_SIDE && v <= H3_MAX_SIDE && v % H3_SIDE_MULTIPLE == 0) return H3_OK;
    int down, up;
    side_neighbours(v, &down, &up);
    if (v < H3_MIN_SIDE || v > H3_MAX_SIDE)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "width %d x height %d: %s %d is out of range: sides are multiples of %d in %d..%d", r->width,
                       r->height, name, v, H3_SIDE_MULTIPLE, H3_MIN_SIDE, H3_MAX_SIDE);
    return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                   "width %d x height %d: both must be positive multiples of %d (%s %d: use %d or %d)", r->width,
                   r->height, H3_SIDE_MULTIPLE, name, v, down, up);
}

static h3_status_code check_width(const h3_request *r, const h3_engine_options *o, h3_status *status) {
    (void)o;
    return check_side("width", r->width, r, status);
}

/* The height's row comes after the width's: both are valid sides here. */
static h3_status_code check_height(const h3_request *r, const h3_engine_options *o, h3_status *status) {
    (void)o;
    h3_status_code rc = check_side("height", r->height, r, status);
    if (rc != H3_OK) return rc;
    if (r->width > H3_MAX_ASPECT * r->height || r->height > H3_MAX_ASPECT * r->width)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "width %d x height %d: aspect ratio must be between 1:%d and %d:1", r->width, r->height,
                       H3_MAX_ASPECT, H3_MAX_ASPECT);
    return H3_OK;
}

static h3_status_code check_devices(const h3_request *r, const h3_engine_options *o, h3_status *status) {
    (void)r;
    h3_device_list list;
    return h3_devices_parse(o->devices, o->compute, &list, status);
}

/* The lora row: each item by the grammar (h3_lora_spec_parse), no file
 * twice by its path, and not with FP8 weights (h3_dit_set_loras refuses
 * them; said here, before any load, naming both settings). */
static h3_status_code check_lora_item(const char *item, h3_status *status) {
    return h3_lora_spec_parse(item, NULL, NULL, status);
}

static h3_status_code check_loras(const h3_request *r, const h3_engine_options *o, h3_status *status) {
    (void)r;
    int n = 0;
    for (const char *const *it = o->loras; it && *it; it++, n++) {
        char *path = NULL;
        h3_status_code rc = h3_lora_spec_parse(*it, &path, NULL, status);
        for (const char *const *before = o->loras; rc == H3_OK && before < it; before++) {
            char *other = NULL;
            h3_lora_spec_parse(*before, &other, NULL, NULL);
            if (other && strcmp(other, path) == 0)
                rc = h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                             "lora '%s' is listed twice ('%s' and '%s'): give it once with the summed strength",
                             path, *before, *it);
            free(other);
        }
        free(path);
        if (rc != H3_OK) return rc;
    }
    if (n && o->precision == H3_PRECISION_FP8)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "lora with precision=fp8: LoRAs are fused into the weights, which fp8 holds as E4M3 codes "
                       "(not supported yet); use precision=bf16 or no lora");
    return H3_OK;
}

/* ---- the table ---------------------------------------------------------------- */

static const h3_param_choice backend_choices[] = {
    {"fa", H3_ATTENTION_DENSE, "Dense attention (FastH3 dense adapter when given)", 0},
    {"vsa", H3_ATTENTION_VSA, "VSA-H3 block-sparse attention (FastH3 VSA adapter; experimental)", 0},
    {NULL, 0, NULL, 0}};
static const h3_param_choice ladder_choices[] = {
    {"release", H3_LADDER_RELEASE, "The adapter's dmd_denoising_steps (fastvideo_inference.json), else b", 0},
    {"a", H3_LADDER_A, "Base [1, 0.75, 0.5, 0.25, 0]: FastVideo set_timesteps(5), sglang", 0},
    {"b", H3_LADDER_B, "Base [0.999, 0.749, 0.5, 0.25, 0]: the released dmd_denoising_steps", 0},
    {NULL, 0, NULL, 0}};
static const h3_param_choice compute_choices[] = {
    {"auto", H3_COMPUTE_AUTO, "CUDA when a usable GPU is present, else the CPU", 0},
    {"cpu", H3_COMPUTE_CPU, "The CPU", 0},
    {"cuda", H3_COMPUTE_CUDA, "CUDA GPUs (fails when none is usable)", 0},
    {"cuda-f32", H3_COMPUTE_CUDA_F32, "CUDA in float32 (slow, for parity checks)", H3_PARAM_TOOLS},
    {NULL, 0, NULL, 0}};
static const h3_param_choice load_format_choices[] = {
    {"safetensors", H3_LOAD_SAFETENSORS, "The checkpoint files of the model", 0},
    {"dummy", H3_LOAD_DUMMY, "Random weights made on the device from the configs (benchmarks)", 0},
    {NULL, 0, NULL, 0}};
static const h3_param_choice dummy_adapter_choices[] = {
    {"none", H3_DUMMY_ADAPTER_NONE, "No adapter: the base model", 0},
    {"dense", H3_DUMMY_ADAPTER_DENSE, "A random FastH3 dense adapter", 0},
    {"vsa", H3_DUMMY_ADAPTER_VSA, "A random FastH3 VSA adapter", 0},
    {NULL, 0, NULL, 0}};
static const h3_param_choice precision_choices[] = {
    {"bf16", H3_PRECISION_BF16, "The backend's compute type (bf16 on CUDA)", 0},
    {"fp8", H3_PRECISION_FP8, "FP8 E4M3 weights with per-channel scales for the big linears", 0},
    {NULL, 0, NULL, 0}};
static const h3_param_choice memory_choices[] = {
    {"auto", H3_MEMORY_AUTO, "Resident when the weights fit the device, else stream", 0},
    {"resident", H3_MEMORY_RESIDENT, "Every weight on the device", 0},
    {"stream", H3_MEMORY_STREAM,
     "The transformer's blocks and the text encoder's layers in host memory, streamed to the device a block ahead",
     0},
    {NULL, 0, NULL, 0}};

#define REQ(field) H3_PARAM_IN_REQUEST, offsetof(h3_request, field)
#define OPT(field) H3_PARAM_IN_OPTIONS, offsetof(h3_engine_options, field)

/* vsa-sparsity's range is [0, 0.99]: the VSA plan keeps max(1, ceil((1 - s)
 * n)) of n video key tiles, so past 1 - 1/n every value means one tile;
 * 0.99 is the largest value that still means what it says at the
 * release's 600 tiles (6 kept), and the element's property always had it.
 * Its default is the model's trained value (model/h3_vsa.h). */
static const h3_param engine_params[] = {
    {.name = "prompt", .title = "Prompt", .doc = "Description of the clip to generate (required)",
     .type = H3_PARAM_STRING, REQ(prompt), .flags = H3_PARAM_CONTENT, .check = check_prompt},
    {.name = "seed", .title = "Seed", .doc = "Seed of the initial noise (same seed and settings, same clip)",
     .type = H3_PARAM_UINT64, REQ(seed), .flags = H3_PARAM_CONTENT, .min = 0, .umax = UINT64_MAX,
     .number_default = 42},
    {.name = "width", .title = "Width", .doc = "Frame width in pixels (multiple of 32, aspect 1:4 to 4:1)",
     .type = H3_PARAM_INT, REQ(width), .flags = H3_PARAM_CONTENT, .min = H3_MIN_SIDE, .umax = H3_MAX_SIDE,
     .number_default = 1280, .check = check_width},
    {.name = "height", .title = "Height", .doc = "Frame height in pixels (multiple of 32, aspect 1:4 to 4:1)",
     .type = H3_PARAM_INT, REQ(height), .flags = H3_PARAM_CONTENT, .min = H3_MIN_SIDE, .umax = H3_MAX_SIDE,
     .number_default = 736, .check = check_height},
    {.name = "num-frames", .title = "Number of frames",
     .doc = "Requested number of frames at 24 fps (aligned up to 17n+5, see aligned-frames)",
     .type = H3_PARAM_INT, REQ(num_frames), .flags = H3_PARAM_CONTENT, .min = 1, .umax = H3_MAX_FRAMES,
     .number_default = 120, .range_note = "(15 s at 24 fps)"},
    {.name = "steps", .title = "Steps",
     .doc = "Denoising passes; 0 = the model's default (49, or 4 with a FastH3 adapter)",
     .type = H3_PARAM_UINT, REQ(steps), .flags = H3_PARAM_CONTENT, .min = 0, .umax = H3_MAX_STEPS,
     .number_default = 0, .range_note = "(0: the model's default)"},
    {.name = "backend", .title = "Backend", .doc = "Attention mode: dense (fa) or VSA-H3 block-sparse (vsa)",
     .type = H3_PARAM_ENUM, REQ(attention), .flags = H3_PARAM_CONTENT, .choices = backend_choices,
     .number_default = H3_ATTENTION_DENSE},
    {.name = "vsa-sparsity", .title = "VSA sparsity", .doc = "Fraction of video key tiles skipped with backend=vsa",
     .type = H3_PARAM_FLOAT, REQ(vsa_sparsity), .flags = H3_PARAM_CONTENT, .real_min = 0.0, .real_max = 0.99,
     .number_default = H3_VSA_DEFAULT_SPARSITY},
    {.name = "ladder", .title = "Ladder", .doc = "FastH3 sigma ladder: release (the adapter's), a or b",
     .type = H3_PARAM_ENUM, REQ(ladder), .flags = H3_PARAM_CONTENT | H3_PARAM_TOOLS, .choices = ladder_choices,
     .number_default = H3_LADDER_RELEASE},
    {.name = "model-location", .option = "model", .title = "Model location",
     .doc = "Directory of a MiniMax-H3 model (diffusers layout or FL2VA/); unset = the embedded tiny model",
     .type = H3_PARAM_STRING, OPT(model_dir), .flags = H3_PARAM_PATH | H3_PARAM_RUNTIME_DEFAULT},
    {.name = "adapter-location", .option = "adapter", .title = "Adapter location",
     .doc = "FastH3 adapter (fastvideo-lora-v2 .safetensors), or unset", .type = H3_PARAM_STRING,
     OPT(adapter_path), .flags = H3_PARAM_PATH},
    {.name = "compute", .title = "Compute", .doc = "Where the model runs: auto, cpu or cuda", .type = H3_PARAM_ENUM,
     OPT(compute), .choices = compute_choices, .number_default = H3_COMPUTE_AUTO},
    {.name = "devices", .title = "Devices",
     .doc = "Tensor-parallel ranks: \"auto\", CUDA devices such as \"0,1,2,3\", or \"cpu:N\" (N CPU ranks)",
     .type = H3_PARAM_STRING, OPT(devices), .string_default = "auto", .check = check_devices},
    {.name = "load-format", .title = "Load format",
     .doc = "Where the weights come from: safetensors or dummy (random)", .type = H3_PARAM_ENUM, OPT(load_format),
     .choices = load_format_choices, .number_default = H3_LOAD_SAFETENSORS},
    {.name = "dummy-adapter", .title = "Dummy adapter",
     .doc = "With load-format=dummy: the FastH3 adapter kind to make up", .type = H3_PARAM_ENUM,
     OPT(dummy_adapter), .choices = dummy_adapter_choices, .number_default = H3_DUMMY_ADAPTER_NONE},
    {.name = "dummy-seed", .title = "Dummy seed", .doc = "With load-format=dummy: the weights' seed",
     .type = H3_PARAM_UINT64, OPT(dummy_seed), .flags = H3_PARAM_TOOLS, .min = 0, .umax = UINT64_MAX},
    {.name = "precision", .title = "Precision",
     .doc = "The linear layers' weights: bf16, or fp8 (E4M3, per-channel scales; GPUs of compute capability 8.9+)",
     .type = H3_PARAM_ENUM, OPT(precision), .choices = precision_choices, .number_default = H3_PRECISION_BF16},
    {.name = "memory", .title = "Memory",
     .doc = "Where the weights live: auto, resident (on the device) or stream (host memory, streamed to the device "
            "a block ahead)",
     .type = H3_PARAM_ENUM, OPT(memory), .choices = memory_choices, .number_default = H3_MEMORY_AUTO},
    {.name = "max-gpu-memory", .title = "Max GPU memory",
     .doc = "Most device memory to use on each GPU, in bytes (0: what is free)", .type = H3_PARAM_BYTES,
     OPT(max_gpu_memory), .min = 0, .umax = UINT64_MAX},
    {.name = "max-pinned-memory", .title = "Max pinned memory",
     .doc = "With memory=stream: host memory to page-lock for the weights (0: half of the machine's)",
     .type = H3_PARAM_BYTES, OPT(max_pinned_memory), .flags = H3_PARAM_TOOLS, .min = 0, .umax = UINT64_MAX},
    {.name = "lora", .title = "LoRAs",
     .doc = "LoRA files fused into the transformer, each PATH or PATH:STRENGTH (strength in [-16, 16], "
            "default 1); several: a list (h3-generate: --lora once per file)",
     .type = H3_PARAM_STRV, OPT(loras), .flags = H3_PARAM_PATH | H3_PARAM_MUTABLE_PLAYING,
     .real_min = -H3_LORA_MAX_STRENGTH, .real_max = H3_LORA_MAX_STRENGTH, .number_default = 1.0,
     .check = check_loras, .item_check = check_lora_item},
    {.name = "cpu-threads", .title = "CPU threads", .doc = "Threads of the CPU backend (0: every core)",
     .type = H3_PARAM_INT, OPT(cpu_threads), .flags = H3_PARAM_TOOLS, .min = 0, .umax = 4096},
    {.name = NULL}};

const h3_param *h3_params(void) { return engine_params; }

const h3_param *h3_param_find(const h3_param *table, const char *name) {
    for (const h3_param *p = table ? table : engine_params; name && p->name; p++)
        if (strcmp(p->name, name) == 0) return p;
    return NULL;
}

const h3_param *h3_param_find_option(const h3_param *table, const char *option) {
    for (const h3_param *p = table ? table : engine_params; option && p->name; p++)
        if (strcmp(p->option ? p->option : p->name, option) == 0) return p;
    return NULL;
}

void *h3_param_field(const h3_param *p, void *home) { return (char *)home + p->offset; }

static const void *field_of(const h3_param *p, const void *home) { return (const char *)home + p->offset; }

const h3_param_choice *h3_param_choice_by_nick(const h3_param *p, const char *nick) {
    for (const h3_param_choice *c = p->choices; c && c->nick && nick; c++)
        if (strcmp(c->nick, nick) == 0) return c;
    return NULL;
}

const h3_param_choice *h3_param_choice_by_value(const h3_param *p, int value) {
    for (const h3_param_choice *c = p->choices; c && c->nick; c++)
        if (c->value == value) return c;
    return NULL;
}

/* ---- values ------------------------------------------------------------------- */

static int64_t int_max(const h3_param *p) { return (int64_t)p->umax; }

char *h3_param_allowed(const h3_param *p) {
    GString *s = g_string_new(NULL);
    switch (p->type) {
    case H3_PARAM_STRING: g_string_append(s, "text"); break;
    case H3_PARAM_BOOL: g_string_append(s, "true or false"); break;
    case H3_PARAM_INT:
    case H3_PARAM_UINT:
    case H3_PARAM_INT64:
        g_string_append_printf(s, "%lld..%lld", (long long)p->min, (long long)int_max(p));
        break;
    case H3_PARAM_UINT64:
    case H3_PARAM_BYTES:
        g_string_append_printf(s, "%lld..%llu", (long long)p->min, (unsigned long long)p->umax);
        break;
    case H3_PARAM_FLOAT: g_string_append_printf(s, "in [%g, %g]", p->real_min, p->real_max); break;
    case H3_PARAM_STRV: g_string_append(s, "a list (in one value: items separated by ',')"); break;
    case H3_PARAM_ENUM:
        for (const h3_param_choice *c = p->choices; c && c->nick; c++)
            g_string_append_printf(s, "%s%s", c == p->choices ? "" : c[1].nick ? ", " : " or ", c->nick);
        break;
    }
    if (p->range_note) g_string_append_printf(s, " %s", p->range_note);
    char *out = strdup(s->str);
    g_string_free(s, TRUE);
    return out;
}

/* The message of a value outside what the row allows ("vsa-sparsity 1: must
 * be in [0, 0.99]"); `shown` is the value as given. */
static h3_status_code fail_allowed(const h3_param *p, const char *shown, h3_status *status) {
    char *allowed = h3_param_allowed(p);
    h3_status_code rc = h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s %s: %s %s", p->name, shown,
                                p->type == H3_PARAM_ENUM ? "expected" : "must be", allowed ? allowed : "");
    free(allowed);
    return rc;
}

h3_status_code h3_param_check_value(const h3_param *p, const void *home, h3_status *status) {
    const void *f = field_of(p, home);
    char shown[64];
    switch (p->type) {
    case H3_PARAM_STRING: return H3_OK;
    case H3_PARAM_STRV:
        for (const char *const *it = *(const char *const *const *)f; p->item_check && it && *it; it++) {
            h3_status_code rc = p->item_check(*it, status);
            if (rc != H3_OK) return rc;
        }
        return H3_OK;
    case H3_PARAM_BOOL: {
        int v = *(const int *)f;
        if (v == 0 || v == 1) return H3_OK;
        snprintf(shown, sizeof shown, "%d", v);
        break;
    }
    case H3_PARAM_INT:
    case H3_PARAM_UINT: {
        int v = *(const int *)f;
        if (v >= p->min && v <= int_max(p)) return H3_OK;
        snprintf(shown, sizeof shown, "%d", v);
        break;
    }
    case H3_PARAM_INT64: {
        int64_t v = *(const int64_t *)f;
        if (v >= p->min && v <= int_max(p)) return H3_OK;
        snprintf(shown, sizeof shown, "%lld", (long long)v);
        break;
    }
    case H3_PARAM_UINT64:
    case H3_PARAM_BYTES: {
        uint64_t v = *(const uint64_t *)f;
        if (v >= (uint64_t)p->min && v <= p->umax) return H3_OK;
        snprintf(shown, sizeof shown, "%llu", (unsigned long long)v);
        break;
    }
    case H3_PARAM_FLOAT: {
        float v = *(const float *)f;
        /* compared in float: the field holds 0.99f, not 0.99 */
        if (v >= (float)p->real_min && v <= (float)p->real_max) return H3_OK;
        snprintf(shown, sizeof shown, "%g", (double)v);
        break;
    }
    case H3_PARAM_ENUM: {
        int v = *(const int *)f;
        if (h3_param_choice_by_value(p, v)) return H3_OK;
        snprintf(shown, sizeof shown, "%d", v);
        break;
    }
    }
    return fail_allowed(p, shown, status);
}

void h3_param_set_default(const h3_param *p, void *home) {
    void *f = h3_param_field(p, home);
    switch (p->type) {
    case H3_PARAM_STRING: *(const char **)f = p->string_default; break;
    case H3_PARAM_STRV: *(const char *const **)f = NULL; break;
    case H3_PARAM_BOOL:
    case H3_PARAM_INT:
    case H3_PARAM_UINT:
    case H3_PARAM_ENUM: *(int *)f = (int)p->number_default; break;
    case H3_PARAM_INT64: *(int64_t *)f = (int64_t)p->number_default; break;
    case H3_PARAM_UINT64:
    case H3_PARAM_BYTES: *(uint64_t *)f = (uint64_t)p->number_default; break;
    case H3_PARAM_FLOAT: *(float *)f = (float)p->number_default; break;
    }
}

int h3_param_is_default(const h3_param *p, const void *home) {
    const void *f = field_of(p, home);
    switch (p->type) {
    case H3_PARAM_STRING: {
        const char *v = *(const char *const *)f;
        if (!v || !p->string_default) return v == p->string_default;
        return strcmp(v, p->string_default) == 0;
    }
    case H3_PARAM_STRV: {
        const char *const *v = *(const char *const *const *)f;
        return !v || !v[0];
    }
    case H3_PARAM_BOOL:
    case H3_PARAM_INT:
    case H3_PARAM_UINT:
    case H3_PARAM_ENUM: return *(const int *)f == (int)p->number_default;
    case H3_PARAM_INT64: return *(const int64_t *)f == (int64_t)p->number_default;
    case H3_PARAM_UINT64:
    case H3_PARAM_BYTES: return *(const uint64_t *)f == (uint64_t)p->number_default;
    case H3_PARAM_FLOAT: return *(const float *)f == (float)p->number_default;
    }
    return 0;
}

/* ---- STRV: the list's text form and its one-block storage ----------------------- */

/* The items joined by ',', '\\' and ',' in an item escaped with '\\'. */
static char *strv_format(const char *const *v) {
    GString *s = g_string_new(NULL);
    for (const char *const *it = v; it && *it; it++) {
        if (it != v) g_string_append_c(s, ',');
        for (const char *c = *it; *c; c++) {
            if (*c == '\\' || *c == ',') g_string_append_c(s, '\\');
            g_string_append_c(s, *c);
        }
    }
    char *out = strdup(s->str);
    g_string_free(s, TRUE);
    return out;
}

/* The items of `text` (the form above) appended to `items`; 0 for a '\\'
 * that escapes nothing. An empty text is no item. */
static int strv_split(const char *text, GPtrArray *items) {
    if (!*text) return 1;
    GString *cur = g_string_new(NULL);
    for (const char *c = text;; c++) {
        if (*c == '\\') {
            if (c[1] != '\\' && c[1] != ',') {
                g_string_free(cur, TRUE);
                return 0;
            }
            g_string_append_c(cur, *++c);
        } else if (*c == ',' || !*c) {
            g_ptr_array_add(items, g_string_free(cur, FALSE));
            if (!*c) return 1;
            cur = g_string_new(NULL);
        } else {
            g_string_append_c(cur, *c);
        }
    }
}

/* One malloc block: n + 1 pointers, then the strings. */
static const char **strv_block(GPtrArray *items) {
    size_t bytes = (items->len + 1) * sizeof(char *);
    for (guint i = 0; i < items->len; i++) bytes += strlen(items->pdata[i]) + 1;
    const char **v = malloc(bytes);
    if (!v) return NULL;
    char *at = (char *)(v + items->len + 1);
    for (guint i = 0; i < items->len; i++) {
        size_t n = strlen(items->pdata[i]) + 1;
        memcpy(at, items->pdata[i], n);
        v[i] = at;
        at += n;
    }
    v[items->len] = NULL;
    return v;
}

static h3_status_code strv_parse(const h3_param *p, const char *text, void *f, h3_status *status) {
    const char *const **field = f;
    GPtrArray *items = g_ptr_array_new_with_free_func(g_free);
    for (const char *const *it = *field; it && *it; it++) g_ptr_array_add(items, g_strdup(*it));
    guint old = items->len;
    h3_status_code rc = H3_OK;
    if (!strv_split(text, items))
        rc = h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                     "%s '%s': a '\\' must escape a ',' or a '\\' (items are separated by ',')", p->name, text);
    for (guint i = old; rc == H3_OK && p->item_check && i < items->len; i++)
        rc = p->item_check(items->pdata[i], status);
    /* no item: no list (NULL, the default), not an empty block */
    const char **v = rc == H3_OK && items->len ? strv_block(items) : NULL;
    if (rc == H3_OK && items->len && !v) rc = h3_fail(status, H3_ERR_NO_MEMORY, "%s: out of memory", p->name);
    g_ptr_array_free(items, TRUE);
    if (rc != H3_OK) return rc;
    free((void *)*field);
    *field = v;
    return H3_OK;
}

void h3_param_free_value(const h3_param *p, void *home) {
    if (p->type != H3_PARAM_STRV) return;
    const char *const **field = h3_param_field(p, home);
    free((void *)*field);
    *field = NULL;
}

/* ---- the lora item grammar (h3.h) ----------------------------------------------------- */

h3_status_code h3_lora_spec_parse(const char *item, char **path, float *strength, h3_status *status) {
    const h3_param *row = h3_param_find(NULL, "lora");
    if (path) *path = NULL;
    if (!item || !*item) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "lora '': no path");
    const char *colon = strrchr(item, ':');
    if (colon && strchr(colon, '/')) colon = NULL; /* a ':' in a folder name */
    size_t n = colon ? (size_t)(colon - item) : strlen(item);
    double v = row->number_default;
    if (colon) {
        const char *t = colon + 1;
        char *end;
        errno = 0;
        v = strtod(t, &end);
        if (errno || !*t || g_ascii_isspace(*t) || *end || !isfinite(v))
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                           "lora '%s': the strength '%s' is not a number (PATH or PATH:STRENGTH, strength in [%g, "
                           "%g])", item, t, row->real_min, row->real_max);
        if (!(v >= row->real_min && v <= row->real_max))
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "lora '%s': strength %g must be in [%g, %g]", item, v,
                           row->real_min, row->real_max);
    }
    if (n == 0) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "lora '%s': no path before the ':'", item);
    if (strength) *strength = (float)v;
    if (path) {
        *path = malloc(n + 1);
        if (!*path) return h3_fail(status, H3_ERR_NO_MEMORY, "lora: out of memory");
        memcpy(*path, item, n);
        (*path)[n] = '\0';
    }
    return H3_OK;
}

char *h3_param_format(const h3_param *p, const void *home) {
    const void *f = field_of(p, home);
    char text[64];
    switch (p->type) {
    case H3_PARAM_STRING: {
        const char *v = *(const char *const *)f;
        return v ? strdup(v) : NULL;
    }
    case H3_PARAM_STRV: return strv_format(*(const char *const *const *)f);
    case H3_PARAM_BOOL: return strdup(*(const int *)f ? "true" : "false");
    case H3_PARAM_INT:
    case H3_PARAM_UINT: snprintf(text, sizeof text, "%d", *(const int *)f); break;
    case H3_PARAM_INT64: snprintf(text, sizeof text, "%lld", (long long)*(const int64_t *)f); break;
    case H3_PARAM_UINT64:
    case H3_PARAM_BYTES: snprintf(text, sizeof text, "%llu", (unsigned long long)*(const uint64_t *)f); break;
    /* %.9g: enough digits that the float parses back to itself */
    case H3_PARAM_FLOAT: {
        float v = *(const float *)f;
        snprintf(text, sizeof text, "%g", (double)v);
        if ((float)strtod(text, NULL) != v) snprintf(text, sizeof text, "%.9g", (double)v);
        break;
    }
    case H3_PARAM_ENUM: {
        const h3_param_choice *c = h3_param_choice_by_value(p, *(const int *)f);
        if (c) return strdup(c->nick);
        snprintf(text, sizeof text, "%d", *(const int *)f);
        break;
    }
    }
    return strdup(text);
}

/* Integers as the front ends write them: decimal digits, '-' only where
 * the range allows it, no white space, no '+', nothing after. */
static int parse_integer(const char *text, int allow_minus, long long *sv, unsigned long long *uv) {
    if (!text[0] || (text[0] == '-' && !allow_minus)) return 0;
    const char *d = text[0] == '-' ? text + 1 : text;
    if (!g_ascii_isdigit(*d)) return 0;
    char *end;
    errno = 0;
    if (allow_minus) *sv = strtoll(text, &end, 10);
    else *uv = strtoull(text, &end, 10);
    return errno == 0 && *end == '\0';
}

static h3_status_code fail_text(const h3_param *p, const char *text, const char *what, h3_status *status) {
    char *allowed = h3_param_allowed(p);
    h3_status_code rc = h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s '%s': %s %s", p->name, text, what,
                                allowed ? allowed : "");
    free(allowed);
    return rc;
}

h3_status_code h3_param_parse(const h3_param *p, const char *text, unsigned how, void *home, h3_status *status) {
    void *f = h3_param_field(p, home);
    if (!text) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s: no value", p->name);
    long long sv = 0;
    unsigned long long uv = 0;
    switch (p->type) {
    case H3_PARAM_STRING: *(const char **)f = text; return H3_OK;
    case H3_PARAM_STRV: return strv_parse(p, text, f, status);
    case H3_PARAM_BOOL:
        if (!strcmp(text, "true") || !strcmp(text, "1") || !strcmp(text, "yes")) *(int *)f = 1;
        else if (!strcmp(text, "false") || !strcmp(text, "0") || !strcmp(text, "no")) *(int *)f = 0;
        else return fail_text(p, text, "must be", status);
        return H3_OK;
    case H3_PARAM_INT:
    case H3_PARAM_UINT:
    case H3_PARAM_INT64:
        if (!parse_integer(text, p->min < 0, &sv, &uv)) return fail_text(p, text, "must be an integer in", status);
        if (p->min >= 0) sv = uv > (unsigned long long)INT64_MAX ? INT64_MAX : (long long)uv;
        if (sv < p->min || sv > int_max(p)) return fail_text(p, text, "must be", status);
        if (p->type == H3_PARAM_INT64) *(int64_t *)f = sv;
        else *(int *)f = (int)sv;
        return H3_OK;
    case H3_PARAM_UINT64:
    case H3_PARAM_BYTES:
        if (p->type == H3_PARAM_BYTES && (how & H3_PARSE_GIB)) {
            char *end;
            errno = 0;
            double gib = strtod(text, &end);
            if (errno || !text[0] || *end || !(gib >= 0) || gib * 1073741824.0 > (double)p->umax)
                return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s '%s': GiB, a number from 0", p->name, text);
            *(uint64_t *)f = (uint64_t)(gib * 1073741824.0);
            return H3_OK;
        }
        if (!parse_integer(text, 0, &sv, &uv)) return fail_text(p, text, "must be an integer in", status);
        if (uv < (unsigned long long)p->min || uv > p->umax) return fail_text(p, text, "must be", status);
        *(uint64_t *)f = uv;
        return H3_OK;
    case H3_PARAM_FLOAT: {
        char *end;
        errno = 0;
        double v = strtod(text, &end);
        if (errno || !text[0] || g_ascii_isspace(text[0]) || *end || !((float)v >= (float)p->real_min &&
                                                                        (float)v <= (float)p->real_max))
            return fail_text(p, text, "must be a number", status);
        *(float *)f = (float)v;
        return H3_OK;
    }
    case H3_PARAM_ENUM: {
        const h3_param_choice *c = h3_param_choice_by_nick(p, text);
        if (!c) return fail_text(p, text, "expected", status);
        *(int *)f = c->value;
        return H3_OK;
    }
    }
    return h3_fail(status, H3_ERR_INTERNAL, "%s: row of unknown type %d", p->name, (int)p->type);
}

/* ---- defaults and checks ------------------------------------------------------ */

static void set_defaults(h3_param_home home, void *base) {
    for (const h3_param *p = engine_params; p->name; p++)
        if (p->home == home) h3_param_set_default(p, base);
}

h3_engine_options h3_engine_options_default(void) {
    h3_engine_options o;
    memset(&o, 0, sizeof o);
    set_defaults(H3_PARAM_IN_OPTIONS, &o);
    return o;
}

h3_request h3_request_default(void) {
    h3_request r;
    memset(&r, 0, sizeof r);
    set_defaults(H3_PARAM_IN_REQUEST, &r);
    return r;
}

int h3_align_frames(int requested) {
    if (requested <= 22) return 22;
    int n = (requested - 5 + 16) / 17;
    return 17 * n + 5;
}

static h3_status_code check_image(const char *what, const h3_image *im, h3_status *status) {
    if (!im) return H3_OK;
    if (im->width < 1 || im->height < 1 || im->width > H3_MAX_IMAGE_SIDE || im->height > H3_MAX_IMAGE_SIDE)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s is %dx%d: each side must be 1..%d pixels", what,
                       im->width, im->height, H3_MAX_IMAGE_SIDE);
    if ((int64_t)im->width * im->height > H3_MAX_IMAGE_PIXELS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s is %dx%d = %lld pixels: at most %lld", what, im->width,
                       im->height, (long long)im->width * im->height, (long long)H3_MAX_IMAGE_PIXELS);
    if (im->stride < (size_t)im->width * 3)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s: stride %zu bytes is less than 3 x width %d", what,
                       im->stride, im->width);
    if (!im->rgb) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s has no pixels", what);
    return H3_OK;
}

/* ---- Ref2VA references (issue 32) ---- */

static const char *reference_kind_name(h3_reference_kind k) {
    return k == H3_REFERENCE_IMAGE ? "image" : k == H3_REFERENCE_VIDEO ? "video" : k == H3_REFERENCE_AUDIO ? "audio"
                                                                                                        : "?";
}

/* The counts the pipeline accepts, then each reference; videos and audio
 * are declared in h3.h but not implemented yet. */
static h3_status_code check_references(const h3_request *r, h3_status *status) {
    if (r->num_references == 0) return H3_OK;
    if (r->num_references < 0 || r->num_references > H3_MAX_REFERENCES || !r->references)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "references: %d given; want 1..%d, with the list",
                       r->num_references, H3_MAX_REFERENCES);
    if (r->first_image || r->last_image)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "references cannot be combined with a first or last image (Ref2VA and FL2VA are separate "
                       "workflows)");
    int count[3] = {0, 0, 0};
    const int limit[3] = {H3_MAX_REFERENCE_IMAGES, H3_MAX_REFERENCE_VIDEOS, H3_MAX_REFERENCE_AUDIO};
    for (int i = 0; i < r->num_references; i++) {
        h3_reference_kind k = r->references[i].kind;
        if (k != H3_REFERENCE_IMAGE && k != H3_REFERENCE_VIDEO && k != H3_REFERENCE_AUDIO)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "reference %d: unknown kind %d (image, video or audio)",
                           i + 1, (int)k);
        if (++count[k] > limit[k])
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "references: more than %d %s references", limit[k],
                           reference_kind_name(k));
    }
    if (count[H3_REFERENCE_AUDIO] && !count[H3_REFERENCE_IMAGE] && !count[H3_REFERENCE_VIDEO])
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "references: audio references need an image or video reference beside them");
    for (int i = 0; i < r->num_references; i++) {
        const h3_reference *ref = &r->references[i];
        if (ref->kind == H3_REFERENCE_VIDEO)
            return h3_fail(status, H3_ERR_UNSUPPORTED, "reference %d: %s references are not yet supported", i + 1,
                           reference_kind_name(ref->kind));
        if (ref->kind == H3_REFERENCE_AUDIO) {
            if (!ref->samples || ref->num_samples < 1 || ref->num_samples > INT32_MAX || ref->sample_rate < 1)
                return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                               "reference %d (audio): %lld samples at %d Hz%s; want 1..%d stereo samples at a "
                               "positive rate",
                               i + 1, (long long)ref->num_samples, ref->sample_rate, ref->samples ? "" : ", no samples",
                               INT32_MAX);
            continue;
        }
        char what[48];
        snprintf(what, sizeof what, "reference %d (image)", i + 1);
        h3_status_code rc = check_image(what, &ref->image, status);
        if (rc != H3_OK) return rc;
    }
    return H3_OK;
}

/* Every row of `home`, in table order: its range, then its own rule. */
static h3_status_code check_rows(h3_param_home home, const h3_request *r, const h3_engine_options *o,
                                 h3_status *status) {
    const void *base = home == H3_PARAM_IN_REQUEST ? (const void *)r : (const void *)o;
    for (const h3_param *p = engine_params; p->name; p++) {
        if (p->home != home) continue;
        h3_status_code rc = p->check ? p->check(r, o, status) : h3_param_check_value(p, base, status);
        if (rc != H3_OK) return rc;
    }
    return H3_OK;
}

h3_status_code h3_request_check(const h3_request *r, h3_status *status) {
    if (!r) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "no request");
    h3_status_code rc = check_rows(H3_PARAM_IN_REQUEST, r, NULL, status);
    if (rc == H3_OK) rc = check_image("first image", r->first_image, status);
    if (rc == H3_OK) rc = check_image("last image", r->last_image, status);
    if (rc == H3_OK) rc = check_references(r, status);
    return rc;
}

h3_status_code h3_request_check_untrusted(const h3_request *r, h3_status *status) {
    h3_status_code rc = h3_request_check(r, status);
    if (rc != H3_OK) return rc;
    if (r->width > H3_UNTRUSTED_MAX_SIDE || r->height > H3_UNTRUSTED_MAX_SIDE ||
        r->width * r->height > H3_UNTRUSTED_MAX_PIXELS || r->steps > H3_UNTRUSTED_MAX_STEPS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "width %d x height %d at %d steps is past what an untrusted request may ask for (sides up "
                       "to %d, %d pixels: the release's largest frame; %d steps)",
                       r->width, r->height, r->steps, H3_UNTRUSTED_MAX_SIDE, H3_UNTRUSTED_MAX_PIXELS,
                       H3_UNTRUSTED_MAX_STEPS);
    return H3_OK;
}

h3_status_code h3_engine_options_check(const h3_engine_options *o, h3_status *status) {
    if (!o) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "no engine options");
    return check_rows(H3_PARAM_IN_OPTIONS, NULL, o, status);
}

static int compute_is_cuda(h3_compute c) { return c == H3_COMPUTE_CUDA || c == H3_COMPUTE_CUDA_F32; }

h3_status_code h3_devices_parse(const char *d, h3_compute compute, h3_device_list *out, h3_status *status) {
    memset(out, 0, sizeof *out);
    if (!d || !*d || strcmp(d, "auto") == 0) return H3_OK;
    const char *bad = "devices '%s': expected \"auto\", a list of CUDA ordinals such as \"0,1,2,3\", or \"cpu:N\"";
    char *end;
    if (strncmp(d, "cpu:", 4) == 0) {
        long n = strtol(d + 4, &end, 10);
        if (end == d + 4 || *end || n < 1 || n > H3_MAX_DEVICES)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "devices '%s': cpu:N needs N in 1..%d", d,
                           H3_MAX_DEVICES);
        if (compute_is_cuda(compute))
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "devices '%s' runs on the CPU but compute=cuda", d);
        out->count = (int)n;
        out->cpu = 1;
        for (int r = 0; r < out->count; r++) out->ordinals[r] = -1;
        return H3_OK;
    }
    int n = 0;
    for (const char *p = d; *p;) {
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > H3_MAX_DEVICE_ORDINAL || (*end && *end != ',') || n == H3_MAX_DEVICES)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, bad, d);
        out->ordinals[n++] = (int)v;
        p = *end ? end + 1 : end;
        if (*end && !*p) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, bad, d);
    }
    /* The advice is a value this same function accepts: cpu:N with N the
     * ranks the list asked for (1..H3_MAX_DEVICES by the loop above). */
    if (compute == H3_COMPUTE_CPU)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "devices '%s' names GPUs but compute=cpu: for %d rank%s on the CPU use devices=cpu:%d, or "
                       "leave compute at auto or cuda",
                       d, n, n == 1 ? "" : "s", n);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (out->ordinals[i] == out->ordinals[j])
                return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                               "devices '%s': GPU %d is listed twice; each rank needs a GPU of its own", d,
                               out->ordinals[i]);
#ifndef H3_HAVE_CUDA
    return h3_fail(status, H3_ERR_UNSUPPORTED, "devices '%s': this build of h3core has no CUDA backend", d);
#endif
    out->count = n;
    return H3_OK;
}
