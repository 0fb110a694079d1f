/* h3.h - the public API of h3core: MiniMax-H3 text -> video + audio.
 *
 * An engine is opened once on a model directory and stays resident across
 * requests (the GStreamer element keeps one per element instance). A request
 * is validated into a plan (aligned frame count, latent sizes, sample count)
 * before any costly work, then generated with callbacks that stream progress,
 * decoded video frames and audio samples as they become available.
 * h3_engine_cancel() may be called from any thread; generation stops at the
 * next step or decode window and returns H3_ERR_CANCELLED.
 *
 *   h3_engine_options opt = h3_engine_options_default();
 *   opt.model_dir = "/path/to/MiniMax-H3";           // NULL: the embedded tiny model
 *   h3_engine *e; h3_status st;
 *   if (h3_engine_open(&opt, &e, &st) != H3_OK) fprintf(stderr, "%s\n", st.message);
 *   h3_request req = h3_request_default();
 *   req.prompt = "a red fox in snow";
 *   h3_engine_generate(e, &req, &callbacks, &st);
 *   h3_engine_close(e);
 */
#ifndef H3_H
#define H3_H

#include <stddef.h>
#include <stdint.h>

#include "base/h3_api.h"
#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct h3_engine h3_engine;

/* The limits of a request that need no model. The defaults, ranges and
 * documentation of every parameter are rows of the request schema
 * (h3_params, below), which uses these; front ends ask the schema. */
#define H3_FPS 24                 /* the model's one frame rate */
#define H3_MIN_SIDE 32            /* width and height: multiples of H3_SIDE_MULTIPLE in [MIN, MAX] */
#define H3_MAX_SIDE 4096
#define H3_SIDE_MULTIPLE 32
#define H3_MAX_ASPECT 4           /* width/height and height/width at most 4 */
#define H3_MAX_FRAMES 362         /* 15 s at 24 fps, the longest the reference serves */
#define H3_MAX_STEPS 1000
#define H3_MAX_DEVICES 64         /* ranks of a tensor-parallel group */
#define H3_MAX_DEVICE_ORDINAL 1023

typedef enum h3_compute {
    H3_COMPUTE_AUTO = 0, /* CUDA when a usable GPU is present, else the CPU (the reason is logged) */
    H3_COMPUTE_CPU,
    H3_COMPUTE_CUDA,
    H3_COMPUTE_CUDA_F32 /* CUDA in float32 (weights and activations): slow, for parity checks only */
} h3_compute;

/* The two execution modes of the `backend` property. */
typedef enum h3_attention_mode {
    H3_ATTENTION_DENSE = 0, /* "fa": dense attention (+ FastH3 dense adapter when given) */
    H3_ATTENTION_VSA        /* "vsa": VSA-H3 block-sparse attention (+ FastH3 VSA adapter) */
} h3_attention_mode;

/* FastH3 sigma ladders (with an adapter; docs/spec/fasth3-vsa.md §2.2): five
 * sigma points, four forwards, shifts 12 (video) / 3 (audio). */
typedef enum h3_fasth3_ladder {
    H3_LADDER_RELEASE = 0, /* the adapter's dmd_denoising_steps (fastvideo_inference.json), else B */
    H3_LADDER_A,           /* base [1, 0.75, 0.5, 0.25, 0]: FastVideo set_timesteps(5), sglang */
    H3_LADDER_B            /* base [0.999, 0.749, 0.5, 0.25, 0]: the released dmd_denoising_steps */
} h3_fasth3_ladder;

typedef enum h3_log_level { H3_LOG_ERROR = 0, H3_LOG_WARNING, H3_LOG_INFO, H3_LOG_DEBUG } h3_log_level;

/* Where the weights come from. DUMMY (vLLM's and sglang's "dummy" load
 * format): the model directory needs only its configs and tokenizer; every
 * weight of every component is made on its own device (its tensor-parallel
 * shard) from a seeded generator, at scales that keep activations finite,
 * so the release's shapes run end to end without the release's files. Every
 * other step (layouts, adapter fusion, sharding, arenas) runs as with files;
 * stats.random_weights and the log say so. */
typedef enum h3_load_format { H3_LOAD_SAFETENSORS = 0, H3_LOAD_DUMMY } h3_load_format;

/* With H3_LOAD_DUMMY and no adapter file: which kind of FastH3 adapter to
 * make up: its rules (4 forwards over the release ladder, its attention
 * mode) and, for VSA, random to_gate_compress gates; no delta is drawn
 * (random weights plus a random delta are random weights). An adapter file
 * with H3_LOAD_DUMMY is refused: its fusion needs the base weights' values. */
typedef enum h3_dummy_adapter { H3_DUMMY_ADAPTER_NONE = 0, H3_DUMMY_ADAPTER_DENSE, H3_DUMMY_ADAPTER_VSA } h3_dummy_adapter;

/* What the big linear layers' weights are held and multiplied in
 * (docs/ARCHITECTURE.md, "precision"). FP8: the DiT's and the text
 * encoder's linears (qkv, out, fc1, fc2, AdaLN, VSA gate; q/k/v/o,
 * gate_up, down) become E4M3 with a float32 scale per output channel,
 * quantised once at load, and their inputs are quantised per row on the
 * fly; attention, norms, the input/output projections, the timestep MLP and
 * the VAEs stay as they are. On CUDA it needs FP8 tensor cores (compute
 * capability 8.9 or newer) and compute=cuda; on the CPU it is emulated in
 * float32, value for value. About half the weight memory of those layers. */
typedef enum h3_precision { H3_PRECISION_BF16 = 0, H3_PRECISION_FP8 } h3_precision;
/* "bf16", "fp8" (NULL for a value outside the enum): the precision row's choices. */
H3_API const char *h3_precision_name(h3_precision p);
/* "bf16" or "fp8" into *out; H3_ERR_INVALID_ARGUMENT naming the text otherwise. */
H3_API h3_status_code h3_precision_parse(const char *text, h3_precision *out, h3_status *status);
/* Where the big weights live (memory, docs/ARCHITECTURE.md "Weight
 * streaming"). RESIDENT: every weight on the device, as loaded. STREAM:
 * the DiT's blocks and the text encoder's layers in host memory, copied
 * into a small ring of device slots a block (a layer) ahead of the compute
 * that reads them, on a copy stream of their own; the outputs are
 * RESIDENT's bit for bit, the device holds the rest of the model, two
 * blocks and the activations. AUTO (the default): RESIDENT when the memory
 * plan's weights and workspace fit the device (max_gpu_memory, or what is
 * free), else STREAM; the choice and its reason are logged and in
 * h3_stats. A cap below what STREAM needs is refused at open, naming the
 * numbers. */
typedef enum h3_memory_mode { H3_MEMORY_AUTO = 0, H3_MEMORY_RESIDENT, H3_MEMORY_STREAM } h3_memory_mode;
/* "auto", "resident", "stream"; NULL for a value outside the enum. */
H3_API const char *h3_memory_mode_name(h3_memory_mode mode);
/* The inverse (the front ends' option and property); H3_ERR_INVALID_ARGUMENT
 * naming the value otherwise. */
H3_API h3_status_code h3_memory_mode_parse(const char *name, h3_memory_mode *out, h3_status *status);

typedef struct h3_engine_options {
    const char *model_dir;    /* diffusers layout root or native FL2VA/ dir; NULL = embedded tiny model */
    const char *adapter_path; /* FastH3 fastvideo-lora-v2 safetensors (or its variant directory), or NULL;
                                 fused into the base weights once, at open */
    h3_compute compute;
    /* "auto": one backend chosen by `compute`. A list of CUDA ordinals
     * "0,1,2,3": tensor parallelism, one rank per GPU (NCCL), degree = count.
     * "cpu:N": tensor parallelism over N CPU ranks (for tests). The degree
     * must divide the model's heads (1, 2, 4, 7 or 8 for the release);
     * anything else fails h3_engine_open. With TP the callbacks run on rank
     * 0's thread; stats.compute names the ranks and stats.fallback (and the
     * log) every departure from the full split, with its reason. */
    const char *devices;
    int cpu_threads;          /* 0 = all cores */
    h3_load_format load_format;    /* default H3_LOAD_SAFETENSORS */
    h3_dummy_adapter dummy_adapter; /* H3_LOAD_DUMMY only */
    uint64_t dummy_seed;           /* H3_LOAD_DUMMY: the weights' generator seed */
    /* The most device memory the engine may use on each GPU, in bytes, the
     * CUDA context included (0: what is free). The memory plan holds every
     * request to the lesser of this and the free memory, and each GPU
     * backend refuses an allocation past it (minus the plan's reserve for
     * the context), so an 80, 48 or 24 GB card can be stood for on a larger
     * one. */
    uint64_t max_gpu_memory;
    h3_precision precision; /* default H3_PRECISION_BF16 */
    h3_memory_mode memory;       /* default H3_MEMORY_AUTO */
    /* memory=stream: how much host memory the process may page-lock for the
     * streamed weights (0: half of the physical memory); past it they are
     * pageable (copied slower). Process-wide: the last engine opened sets it. */
    uint64_t max_pinned_memory;
    /* User LoRAs fused into the transformer after loading: a NULL-terminated
     * list of "PATH[:STRENGTH]" items (h3_lora_spec_parse; NULL: none), any
     * of the common layouts (docs/ARCHITECTURE.md, h3_lora). Changed on an
     * open engine with h3_engine_set_loras. Not with precision=fp8. */
    const char *const *loras;
    /* Log sink (fallbacks, timings). NULL = stderr for warnings and errors. */
    void (*log)(void *opaque, h3_log_level level, const char *message);
    void *log_opaque;
} h3_engine_options;

/* A keyframe (FL2VA): 8-bit RGB pixels, row-major, `stride` bytes between
 * rows (>= 3·width), owned by the caller for the length of the call. At
 * most H3_MAX_IMAGE_SIDE a side and H3_MAX_IMAGE_PIXELS in all. Decoding
 * image files is the caller's: h3-generate and the element do it. */
typedef struct h3_image {
    int width, height;
    size_t stride;
    const uint8_t *rgb;
} h3_image;

#define H3_MAX_IMAGE_SIDE 16384
#define H3_MAX_IMAGE_PIXELS ((int64_t)1 << 28)

/* ---- Ref2VA references ---- */
typedef enum h3_reference_kind {
    H3_REFERENCE_IMAGE = 0, /* image: resized to the model's reference_image_short_edge */
    H3_REFERENCE_VIDEO = 1, /* not yet: refused (H3_ERR_UNSUPPORTED) */
    H3_REFERENCE_AUDIO = 2  /* audio clip: stereo at the audio VAE's rate, at most the clip's length */
} h3_reference_kind;

/* One reference; the caller owns every buffer for the length of the call. */
typedef struct h3_reference {
    h3_reference_kind kind;
    h3_image image;           /* H3_REFERENCE_IMAGE */
    /* H3_REFERENCE_VIDEO (declared, not yet taken): frames of image's size */
    const h3_image *frames;
    int num_frames;
    double fps;
    /* H3_REFERENCE_AUDIO (a video's soundtrack: declared, not yet taken):
     * interleaved stereo float samples [num_samples, 2], at sample_rate,
     * which must be the model's audio rate (h3_plan.sample_rate) */
    const float *samples;
    int64_t num_samples;      /* per channel, 1..the generated clip's audio_samples */
    int sample_rate;
} h3_reference;

#define H3_MAX_REFERENCE_IMAGES 9
#define H3_MAX_REFERENCE_VIDEOS 3
#define H3_MAX_REFERENCE_AUDIO 3
#define H3_MAX_REFERENCES 12

typedef struct h3_request {
    const char *prompt;       /* non-empty UTF-8 */
    uint64_t seed;            /* torch.Generator().manual_seed(seed), diffusers draw order */
    int width, height;        /* pixels, multiples of 32, aspect in [1/4, 4] */
    int num_frames;           /* requested; aligned up to 17n+5 */
    int steps;                /* denoising passes (transformer forwards); 0 = model default
                                 (49; with a FastH3 adapter the 4 of its ladder, the only value allowed) */
    h3_attention_mode attention; /* VSA needs a FastH3 VSA adapter, dense a dense one (or none) */
    float vsa_sparsity;       /* fraction of video key tiles dropped in VSA mode (the schema's range) */
    h3_fasth3_ladder ladder;  /* FastH3 only (default: the release's) */
    /* FL2VA keyframes, either or both (NULL: none; neither: T2VA). The clip
     * starts on first_image, stretched onto the width x height canvas, and
     * ends on last_image, scaled to cover it and centre-cropped (a lone last
     * image is stretched, as the reference does). The model needs the
     * text encoder's vision tower and the video VAE's encoder. */
    const h3_image *first_image, *last_image;
    /* Ref2VA references (issue 32), in the order the prompt's presentation
     * and the packed sequence take them (NULL / 0: none). At most
     * H3_MAX_REFERENCE_IMAGES images, H3_MAX_REFERENCE_VIDEOS videos,
     * H3_MAX_REFERENCE_AUDIO audio clips, H3_MAX_REFERENCES in all; audio
     * only with a visual reference; never with keyframes. Runs on the
     * model's transformer_ref/ partition. */
    const h3_reference *references;
    int num_references;
} h3_request;

/* What a validated request will produce. */
typedef struct h3_plan {
    int width, height;
    int num_frames;           /* aligned: 17n+5 */
    int fps;                  /* 24 */
    int latent_frames;        /* T = 5n+2 */
    int latent_height, latent_width;
    int audio_latents;        /* per stereo channel, round(F/24*40) */
    int64_t audio_samples;    /* per channel, audio_latents * hop */
    int sample_rate;          /* of the model's audio VAE (32000 for the release) */
    int audio_channels;       /* 2 */
    int steps;                /* transformer forwards */
    int text_tokens;          /* prompt tokens (known after validation) */
    int64_t sequence_length;  /* packed DiT rows */
} h3_plan;

typedef enum h3_phase {
    H3_PHASE_LOAD = 0,      /* engine open: reading weights */
    H3_PHASE_TEXT,          /* tokenizer + text conditioner */
    H3_PHASE_DENOISE,       /* completed = forwards done, total = steps */
    H3_PHASE_DECODE_VIDEO,  /* completed = temporal windows done */
    H3_PHASE_DECODE_AUDIO,
    H3_PHASE_DONE
} h3_phase;

H3_API const char *h3_phase_name(h3_phase phase);

typedef struct h3_callbacks {
    /* Called from the generating thread (with tensor parallelism: rank 0's
     * thread; never two at once). */
    void (*progress)(void *opaque, h3_phase phase, int completed, int total);
    /* Frames [first, first+count), each height*width*3 bytes of RGB, packed.
     * Frames arrive in order, each exactly once. Return non-zero to cancel. */
    int (*video_frames)(void *opaque, int first, int count, const uint8_t *rgb);
    /* Samples [first, first+count) per channel, interleaved stereo float32
     * in [-1, 1] (count*2 floats). Return non-zero to cancel. */
    int (*audio_samples)(void *opaque, int64_t first, int64_t count, const float *interleaved);
    /* Optional: the denoised latents before decoding (normalized space), for
     * tools and tests: video [C, T, H_lat, W_lat], audio [2, C_a, Na]. */
    void (*latents)(void *opaque, const float *video, int channels, int frames, int height, int width,
                    const float *audio, int audio_channels, int audio_latents);
    void *opaque;
    /* Optional caller-owned stop flag, polled with the engine's own. Unlike
     * h3_engine_cancel() it cannot be lost when it is raised before this
     * generation starts (h3_engine_generate clears the engine's flag on
     * entry), so a consumer that stops asynchronously should use it. */
    const volatile int *cancel_flag;
} h3_callbacks;

/* Stage timings of the last generation, in seconds. */
typedef struct h3_stats {
    double load, text, denoise, decode_video, decode_audio, total;
    double per_step;          /* mean transformer forward */
    int steps;
    char compute[64];         /* "cpu", "cuda:0", "cuda:0-3 (tp4)" */
    char fallback[256];       /* why compute differs from what was asked, or "" */
    int random_weights;       /* 1: opened with H3_LOAD_DUMMY */
    uint64_t peak_bytes;      /* rank 0's device memory high-water of the last generation (0: unknown):
                                 its backend's allocation tally (weights, arena, its own buffers such as
                                 cuBLASLt's workspace and op scratch), not the CUDA context */
    char precision[96];       /* the linears' weights (h3_precision): the compute type ("bf16"; "f32" on
                                 the CPU and cuda-f32), or "fp8 (e4m3: N linears[; K kept in bf16])" */
    int text_encoder_released; /* 1: the last generation freed the text encoder after encoding (it did
                                  not fit resident, h3_memory_plan.text_encoder_released); the next
                                  loads it again, which its text time includes */
    char memory[16];           /* the memory mode in use: "resident" or "stream" (h3_memory_mode) */
    char memory_reason[256];   /* why (memory=auto's decision, or "asked for") */
    uint64_t host_pinned_bytes, host_pageable_bytes; /* memory=stream: the host copies, all ranks */
    char loras[512];           /* the LoRAs in force, "PATH:STRENGTH" joined by ", " ("" none; cut
                                  with "..." past the field) */
} h3_stats;

/* ---- memory plan ----------------------------------------------------------
 * What a request needs on each device, computed before any weight is read:
 * the weights of each component on that rank (its shard, in the dtype the
 * backend keeps them), the activation arena's high-water mark for the
 * request's size and mode, and the backend's workspace (GEMM workspace,
 * attention and VSA scratch, VAE tiles). h3_engine_open and
 * h3_engine_generate refuse, naming these numbers, what does not fit. */
typedef struct h3_memory_device {
    int device;                  /* CUDA ordinal, -1 for the CPU */
    uint64_t text_encoder, transformer, video_vae, audio_vae; /* weight bytes on this rank */
    uint64_t arena;              /* activation high-water for the request */
    uint64_t workspace;          /* backend scratch outside the arena */
    uint64_t total;              /* the sum of the above; with the text encoder released (below), the
                                    highest the weights, arena and workspace reach together */
    uint64_t available;          /* free bytes on the device when planned (0: unknown, e.g. the CPU) */
    uint64_t host_pinned, host_pageable; /* memory=stream: this rank's host copies (not in total) */
} h3_memory_device;

typedef struct h3_memory_plan {
    int n_devices;
    h3_memory_device devices[H3_MAX_DEVICES];
    int fits;                    /* every device's total <= available (or available unknown) */
    /* 1: the request does not fit with the text encoder resident through the
     * denoising, so its weights are freed after the text stage and loaded
     * again (from the files, or drawn again) before the next request; the
     * engine decides this itself, per request, and logs it. */
    int text_encoder_released;
    /* The mode planned: RESIDENT or STREAM (memory=auto: the one the engine
     * would choose), and why. In STREAM the transformer's and text
     * encoder's weights are what stays on the device, the ring's slots
     * included. */
    h3_memory_mode memory;
    char memory_reason[256];
} h3_memory_plan;

/* The plan for `request` on the engine `options` would open, reading only
 * configs and checkpoint headers (or, with H3_LOAD_DUMMY, configs alone);
 * no weight is loaded and no device memory is taken. */
H3_API h3_status_code h3_memory_plan_make(const h3_engine_options *options, const h3_request *request,
                                          h3_memory_plan *plan, h3_status *status);
/* `key: value` lines, one block per device, byte counts in GiB with two
 * decimals (h3-generate --plan prints it, the element puts it in stats).
 * Caller frees with free(). */
H3_API char *h3_memory_plan_describe(const h3_memory_plan *plan);


H3_API h3_engine_options h3_engine_options_default(void);
H3_API h3_request h3_request_default(void);

H3_API h3_status_code h3_engine_open(const h3_engine_options *options, h3_engine **out, h3_status *status);
H3_API void h3_engine_close(h3_engine *engine);

/* Checks a request against the rules and the loaded model and fills plan.
 * Cheap: tokenizes the prompt but runs no model. */
H3_API h3_status_code h3_engine_validate(h3_engine *engine, const h3_request *request, h3_plan *plan,
                                         h3_status *status);
/* Runs the whole pipeline. Not re-entrant on one engine: one generation at a time. */
H3_API h3_status_code h3_engine_generate(h3_engine *engine, const h3_request *request,
                                         const h3_callbacks *callbacks, h3_status *status);
/* Thread-safe, async-signal-unsafe. Cancels the generation in progress at its
 * next step, tile or window. A cancel issued before h3_engine_generate starts
 * is cleared by it: use h3_callbacks.cancel_flag to stop a generation that
 * may not have started yet. */
H3_API void h3_engine_cancel(h3_engine *engine);
/* Makes `specs` (a NULL-terminated list of "PATH[:STRENGTH]" items, as
 * h3_engine_options.loras; NULL or empty: none) the LoRAs in force, fused
 * into every rank's transformer weights by difference from the set in
 * force (h3_dit_set_loras): changing strengths between clips costs one
 * pass over the targeted weights, no reload, and the set in force asked
 * again (the same items in order) costs nothing, so a front end may call
 * it before every clip. A file already open under the same path is reused. Between generations only: refused with
 * H3_ERR_INVALID_ARGUMENT while one runs (and a generation asked for
 * while a set runs is refused likewise). On any
 * failure (a missing file, shapes of another model, a file listed twice, a
 * strength out of range, precision=fp8) the previous set stays in force.
 * stats.loras names the set in force. */
H3_API h3_status_code h3_engine_set_loras(h3_engine *engine, const char *const *specs, h3_status *status);
H3_API void h3_engine_get_stats(h3_engine *engine, h3_stats *stats);

/* The model-free rules of a request (prompt, sides, aspect, frames, steps,
 * mode, sparsity, ladder): the first thing h3_engine_validate checks, and
 * callable without an engine so that a bad setting fails before any load. */
H3_API h3_status_code h3_request_check(const h3_request *request, h3_status *status);

/* ---- the request schema (engine/h3_request.c) -----------------------------
 * Every parameter a front end sets, one row each: the fields of h3_request
 * and h3_engine_options, and the front ends' own rows in the same form. A
 * row is the one home of its parameter's name, type, place, default, range
 * or values and documentation. From it come h3_request_default and
 * h3_engine_options_default, h3_request_check and h3_engine_options_check,
 * the element's properties and their get/set, its settings copy and clear,
 * the h3: URI keys and their policy, h3-generate's options and usage, and
 * the capabilities text. A new parameter is one row plus the code that
 * uses it. */
typedef enum h3_param_type {
    H3_PARAM_STRING, /* const char * (NULL: unset) */
    H3_PARAM_BOOL,   /* int, 0 or 1 */
    H3_PARAM_INT,    /* int in [min, max] */
    H3_PARAM_UINT,   /* int in [min, max], min >= 0: an unsigned property */
    H3_PARAM_INT64,  /* int64_t in [min, max] */
    H3_PARAM_UINT64, /* uint64_t in [min, umax] */
    H3_PARAM_BYTES,  /* uint64_t byte count in [min, umax]; h3-generate takes GiB */
    H3_PARAM_FLOAT,  /* float in [real_min, real_max] */
    H3_PARAM_ENUM,   /* an enum field (int-sized), one of `choices` */
    /* const char *const *: a NULL-terminated list of strings (NULL: empty,
     * the default), each item checked by the row's item_check. Written
     * (h3_param_format) as the items joined by ',' with '\\' and ',' in an
     * item escaped by a '\\'; h3_param_parse reads that form and appends
     * its items, so a front end that takes an option several times
     * (h3-generate's --lora) parses each occurrence, and one that takes a
     * key once (an h3: URI) may give several items in it. Ownership: a
     * list h3_param_parse made is one malloc block (the pointers, then the
     * strings), freed by h3_param_free_value (free()); parse replaces (and
     * frees) the list in the field, which must be NULL or one it made. A
     * front end that keeps its own copies (the element: a GStrv) sets the
     * field itself and never parses into it. */
    H3_PARAM_STRV
} h3_param_type;

/* Which struct a row's offset is into. */
typedef enum h3_param_home {
    H3_PARAM_IN_REQUEST = 0, /* h3_request */
    H3_PARAM_IN_OPTIONS,     /* h3_engine_options */
    H3_PARAM_IN_FRONTEND     /* the front end's own struct (its own table) */
} h3_param_home;

/* Row flags. */
#define H3_PARAM_CONTENT (1u << 0)    /* describes the clip alone (prompt, sizes, steps...): an h3: URI may
                                         carry it by default (docs/RELIABILITY.md, the URI policy) */
#define H3_PARAM_PATH (1u << 1)       /* names a file or folder */
#define H3_PARAM_TOOLS (1u << 2)      /* h3-generate and the benches only, not an element property */
#define H3_PARAM_RUNTIME_DEFAULT (1u << 3) /* its default is found at run time (model-location: the
                                              embedded model's folder) */
#define H3_PARAM_MUTABLE_PLAYING (1u << 4) /* may change between clips while the element plays */

typedef struct h3_param_choice {
    const char *nick;   /* "fa": the value's name in every front end */
    int value;          /* the C enum value */
    const char *doc;    /* one line */
    unsigned flags;     /* H3_PARAM_TOOLS: the tools' value only (compute=cuda-f32) */
} h3_param_choice;

typedef struct h3_param {
    const char *name;   /* "vsa-sparsity": the property, the URI key, and --NAME of h3-generate */
    const char *option; /* h3-generate's option when it is not --NAME ("model"), or NULL */
    const char *title;  /* the property's nick: "VSA sparsity" */
    const char *doc;    /* one line: the property's blurb, the usage text */
    h3_param_type type;
    h3_param_home home;
    size_t offset;      /* of the field in its home struct */
    unsigned flags;
    int64_t min;        /* integer types and BYTES */
    uint64_t umax;      /* UINT64 and BYTES: the maximum; the other integers: max (as int64) */
    double real_min, real_max;
    double number_default;          /* numeric and BOOL rows; ENUM: the value */
    const char *string_default;     /* STRING rows (NULL: unset) */
    const h3_param_choice *choices; /* ENUM: ended by a NULL nick */
    const char *range_note;         /* appended to the range in messages: "(15 s at 24 fps)" */
    /* The row's own rule in place of the range check (it applies the
     * range itself, with a message of its own), or NULL. It gets the
     * struct the field is in (the other is NULL), for rules that read other
     * fields; h3_request_check and h3_engine_options_check run it. */
    h3_status_code (*check)(const h3_request *request, const h3_engine_options *options, h3_status *status);
    /* STRV rows: the rule of one item (the lora row: h3_lora_spec_parse),
     * run by h3_param_parse and h3_param_check_value on each, or NULL. */
    h3_status_code (*item_check)(const char *item, h3_status *status);
} h3_param;

/* The engine's rows (request and options), ended by a NULL name. */
H3_API const h3_param *h3_params(void);
/* The row named `name` in `table` (h3_params() when NULL), or NULL. */
H3_API const h3_param *h3_param_find(const h3_param *table, const char *name);
/* The row of h3-generate's option `option` (without the dashes: "model",
 * "vsa-sparsity") in `table`, or NULL. */
H3_API const h3_param *h3_param_find_option(const h3_param *table, const char *option);
/* The field a row describes in `home` (its home struct), as bytes. */
H3_API void *h3_param_field(const h3_param *p, void *home);
/* The choice of an ENUM row by nick or value, or NULL. */
H3_API const h3_param_choice *h3_param_choice_by_nick(const h3_param *p, const char *nick);
H3_API const h3_param_choice *h3_param_choice_by_value(const h3_param *p, int value);

/* How h3_param_parse reads a value. */
#define H3_PARSE_GIB (1u << 0) /* BYTES: the number is GiB (h3-generate), not bytes */

/* Parses `text` into the row's field of `home`, checking its syntax, the
 * range and the choices (not the row's check, which may read fields set
 * later): H3_ERR_INVALID_ARGUMENT naming the parameter, the text and what
 * is allowed, and the field untouched. STRING rows keep a pointer to
 * `text`. */
H3_API h3_status_code h3_param_parse(const h3_param *p, const char *text, unsigned how, void *home, h3_status *status);
/* The range and choices check of the value in `home` (not the row's
 * check, which may need the whole request). */
H3_API h3_status_code h3_param_check_value(const h3_param *p, const void *home, h3_status *status);
/* Sets the row's field of `home` to its default (STRING: the static
 * default text, not a copy; STRV: NULL, without freeing the list). */
H3_API void h3_param_set_default(const h3_param *p, void *home);
/* STRV rows: frees the list h3_param_parse made in the field and sets it
 * to NULL. Nothing for the other types. */
H3_API void h3_param_free_value(const h3_param *p, void *home);
/* 1 when the field of `home` holds the row's default. */
H3_API int h3_param_is_default(const h3_param *p, const void *home);
/* The value as the front ends write it ("vsa", "0.9", "42"; NULL for an
 * unset string). Caller frees with free(). */
H3_API char *h3_param_format(const h3_param *p, const void *home);
/* "1..362 (15 s at 24 fps)", "fa, vsa", "[0, 0.99]": what the row allows,
 * for messages and usage. Caller frees with free(). */
H3_API char *h3_param_allowed(const h3_param *p);

/* The bounds of a request from an untrusted source (an h3: URI under
 * h3src's default uri-policy, h3-studio's API): the release's largest
 * clip, 1344x768 (or 768x1344) pixels, and the base model's 49 steps plus
 * one. Past them a request asks for more work than any real clip needs,
 * which from a playlist or a web page is a denial of service; the front
 * end's operator can lift them. h3_request_check_untrusted applies them
 * (after h3_request_check's own rules). */
#define H3_UNTRUSTED_MAX_SIDE 1344
#define H3_UNTRUSTED_MAX_PIXELS (1344 * 768)
#define H3_UNTRUSTED_MAX_STEPS 50
H3_API h3_status_code h3_request_check_untrusted(const h3_request *request, h3_status *status);

/* The model-free rules of the engine options (the devices grammar against
 * compute, the enums' values, the ranges): what h3_engine_open checks
 * first. */
H3_API h3_status_code h3_engine_options_check(const h3_engine_options *options, h3_status *status);

/* A parsed `devices` setting (h3_engine_options.devices). */
typedef struct h3_device_list {
    int count;                    /* 0: "auto", one backend chosen by `compute` */
    int cpu;                      /* 1: "cpu:N", N CPU ranks */
    int ordinals[H3_MAX_DEVICES]; /* CUDA ordinal of each rank; -1 for CPU ranks */
} h3_device_list;

/* The `devices` grammar: "auto" (or NULL, or empty), "cpu:N" (N in
 * 1..H3_MAX_DEVICES) or a comma-separated list of CUDA ordinals, checked
 * against `compute` and against this build (a GPU list without the CUDA
 * backend is H3_ERR_UNSUPPORTED). h3_engine_open uses exactly this. */
H3_API h3_status_code h3_devices_parse(const char *devices, h3_compute compute, h3_device_list *out, h3_status *status);

/* The grammar of one `lora` item (h3_engine_options.loras): "PATH" (strength
 * 1) or "PATH:STRENGTH", the strength a number in the lora row's range
 * ([-16, 16]). The text after the last ':' is the strength unless it holds
 * a '/' (then the whole item is the path); a file name with a ':' of its
 * own therefore needs an explicit strength ("a:b.safetensors:1"). *path
 * (NULL allowed: just check) is a new string the caller frees with
 * free(). H3_ERR_INVALID_ARGUMENT naming the item otherwise. */
H3_API h3_status_code h3_lora_spec_parse(const char *item, char **path, float *strength, h3_status *status);

/* Frame-count alignment without an engine: 17n+5 >= requested (>= 22). */
H3_API int h3_align_frames(int requested);

/* Where the embedded default model lives (installed data dir or the build tree). */
H3_API const char *h3_default_model_dir(void);

/* A short human-readable description of what this build and machine can run
 * (compute backends, GPUs, fa/vsa availability), without creating a CUDA
 * context. Caller frees with free(). */
H3_API char *h3_capabilities_describe(void);

/* ---- preflight (engine/h3_preflight.c) -------------------------------------
 * What h3_engine_open and h3_engine_validate would refuse that needs no
 * weight, in milliseconds, without a CUDA context: the layout of
 * options->model_dir and its audio VAE config (the sample rate); then, with
 * a request, compute and devices against this build and the GPUs the driver
 * lists, the adapter's kind from its safetensors header (or the dummy
 * adapter's), and the request against them by the engine's own rules (e.g.
 * backend=vsa without a VSA adapter). The engine stays the authority. */
typedef struct h3_preflight {
    int sample_rate;          /* of the model's audio VAE (32000 for the release) */
    int audio_channels;       /* 2 */
    int has_adapter;          /* with a request: a FastH3 adapter file, or a dummy one */
    int adapter_vsa;          /* with a request: the adapter sets VSA gates (backend=vsa only) */
} h3_preflight;

H3_API h3_status_code h3_engine_preflight(const h3_engine_options *options, const h3_request *request,
                                          h3_preflight *out, h3_status *status);

/* ---- prepare once, run (engine/h3_generate.c, h3_engine_api.c) -----------
 * A request prepared once into a job: h3_engine_prepare checks it (what
 * h3_engine_validate checks), fits its keyframes onto the canvas and builds
 * their presentation (the Qwen3-VL processor's patches), tokenizes the
 * prompt, and on an engine with a memory plan (a GPU) runs the job on the
 * measuring twin with nothing computed, refusing (H3_ERR_NO_MEMORY) what
 * does not fit and deciding whether the text encoder is freed after
 * encoding. h3_engine_run then runs the job; no stage derives it again.
 * h3_engine_generate is prepare, run and free. The job copies what it keeps
 * of the request (the prompt; the keyframes fitted), so the request and its
 * images may go once prepare returns. A job runs on the engine that prepared
 * it, as often as asked (the same clip each time); its memory decision is
 * that of prepare's moment. h3_engine_prepare clears the engine's cancel
 * flag, as h3_engine_generate did: a cancel during prepare or run stops the
 * run. Free a job before closing its engine. */
typedef struct h3_job h3_job;

H3_API h3_status_code h3_engine_prepare(h3_engine *engine, const h3_request *request, h3_job **job, h3_status *status);
/* The plan of a prepared job (what h3_engine_validate fills); NULL for NULL. */
H3_API const h3_plan *h3_job_plan(const h3_job *job);
H3_API h3_status_code h3_engine_run(h3_engine *engine, const h3_job *job, const h3_callbacks *callbacks,
                             h3_status *status);
H3_API void h3_job_free(h3_job *job);

#ifdef __cplusplus
}
#endif
#endif
