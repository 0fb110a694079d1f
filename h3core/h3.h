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

/* The rules of a request that need no model, owned here: the element's
 * property ranges and the tools' option checks use these, and
 * h3_request_check applies them. */
#define H3_FPS 24                 /* the model's one frame rate */
#define H3_MIN_SIDE 32            /* width and height: multiples of H3_SIDE_MULTIPLE in [MIN, MAX] */
#define H3_MAX_SIDE 4096
#define H3_SIDE_MULTIPLE 32
#define H3_MAX_ASPECT 4           /* width/height and height/width at most 4 */
#define H3_MAX_FRAMES 362         /* 15 s at 24 fps, the longest the reference serves */
#define H3_MAX_STEPS 1000
#define H3_MAX_VSA_SPARSITY 0.99  /* vsa_sparsity in [0, 0.99] */
#define H3_DEFAULT_SEED 42
#define H3_DEFAULT_WIDTH 1280
#define H3_DEFAULT_HEIGHT 736
#define H3_DEFAULT_FRAMES 120
#define H3_DEFAULT_VSA_SPARSITY 0.9 /* the trained value */
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
/* "bf16", "fp8" (NULL for a value outside the enum). */
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

typedef struct h3_request {
    const char *prompt;       /* non-empty UTF-8 */
    uint64_t seed;            /* torch.Generator().manual_seed(seed), diffusers draw order */
    int width, height;        /* pixels, multiples of 32, aspect in [1/4, 4] */
    int num_frames;           /* requested; aligned up to 17n+5 */
    int steps;                /* denoising passes (transformer forwards); 0 = model default
                                 (49; with a FastH3 adapter the 4 of its ladder, the only value allowed) */
    h3_attention_mode attention; /* VSA needs a FastH3 VSA adapter, dense a dense one (or none) */
    float vsa_sparsity;       /* fraction of video key tiles dropped in VSA mode, [0, 1) (default 0.9) */
    h3_fasth3_ladder ladder;  /* FastH3 only (default: the release's) */
    /* FL2VA keyframes, either or both (NULL: none; neither: T2VA). The clip
     * starts on first_image, stretched onto the width x height canvas, and
     * ends on last_image, scaled to cover it and centre-cropped (a lone last
     * image is stretched, as the reference does). The model needs the
     * text encoder's vision tower and the video VAE's encoder. */
    const h3_image *first_image, *last_image;
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
H3_API void h3_engine_get_stats(h3_engine *engine, h3_stats *stats);

/* The model-free rules of a request (prompt, sides, aspect, frames, steps,
 * mode, sparsity, ladder): the first thing h3_engine_validate checks, and
 * callable without an engine so that a bad setting fails before any load. */
H3_API h3_status_code h3_request_check(const h3_request *request, h3_status *status);

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

#ifdef __cplusplus
}
#endif
#endif
