/* h3_engine_impl.h - the engine's state and what its files share. Private
 * to engine/. The files, each calling only those above it in this list
 * (no circle: docs/ARCHITECTURE.md, "the twin"):
 *
 *   h3_engine_log.c   the log and the clock
 *   h3_model_dir.c    the model directory: default, layout, components
 *   h3_memory_limit.c measuring backends, the CUDA reserves, max_gpu_memory
 *   h3_fasth3.c       FastH3: the adapter, the attention mode, the ladders
 *   h3_preflight.c    the checks without weights (and the precision rule)
 *   h3_engine.c       open (begin, load) / close: backends, ranks, loading
 *   h3_engine_lora.c  user LoRAs: opened, fused on every rank between clips
 *   h3_generate.c     a request: prepared once into a job, then run (text,
 *                     denoising, decoding), stats.peak_bytes
 *   h3_memory_plan.c  the memory plan: the measuring twin runs the job, the
 *                     checks against free device memory
 *   h3_engine_api.c   h3_engine_open, _prepare, _validate, _generate: the
 *                     public calls that join the three above */
#ifndef H3_ENGINE_IMPL_H
#define H3_ENGINE_IMPL_H

#include <glib.h>

#include "h3.h"
#include "backend/h3_backend.h"
#include "model/h3_adapter.h"
#include "model/h3_audio_vae.h"
#include "model/h3_audio_vae_encoder.h"
#include "model/h3_dit.h"
#include "model/h3_scheduler.h"
#include "model/h3_image.h"
#include "model/h3_text_encoder.h"
#include "model/h3_tokenizer.h"
#include "model/h3_tp_plan.h"
#include "model/h3_video_vae.h"
#include "parallel/h3_comm.h"
#include "parallel/h3_tp.h"

/* The components of a rank, for the weights each took on its backend. */
typedef enum h3_engine_part {
    H3_PART_TEXT = 0, H3_PART_TRANSFORMER, H3_PART_VIDEO_VAE, H3_PART_AUDIO_VAE, H3_PARTS
} h3_engine_part;

/* One tensor-parallel rank's components (h3_tp.h), each on its own backend. */
typedef struct h3_engine_rank {
    h3_backend *backend;
    h3_text_encoder *text_encoder; /* NULL on ranks outside the text conditioner's group */
    h3_dit *dit;
    h3_dit *dit_ref;               /* Ref2VA: transformer_ref/, loaded by the first request with references */
    h3_audio_vae_encoder *audio_encoder; /* Ref2VA: loaded by the first request with audio references */
    h3_video_vae *video_vae;
    h3_audio_vae *audio_vae;       /* rank 0 only */
    uint64_t weight_bytes[H3_PARTS]; /* what loading each component took (h3_backend_memory) */
} h3_engine_rank;

/* What a measuring engine stands for (h3_memory_plan.c): per rank, the CUDA
 * device and its compute capability, or the CPU. */
typedef struct h3_memory_target {
    int n_ranks;
    int device[H3_MAX_DEVICES]; /* CUDA ordinal; -1: the CPU */
    int sm[H3_MAX_DEVICES];
    int exact;                  /* compute=cuda-f32 */
} h3_memory_target;

_Static_assert(H3_MAX_DEVICES == H3_COMM_MAX_RANKS, "a device list fills one tensor-parallel group");

/* FL2VA: a request's keyframes on its canvas, in packed order (first,
 * last), and the prompt's presentation with them (docs/spec/h3-transformer.md
 * §6): host work made once per request (h3_job_make), read by every rank
 * of the engine and of its twin. */
typedef struct h3_job_keyframes {
    int n;
    h3_keyframe_anchor anchors[2];
    h3_rgb_image fitted[2];
    h3_text_presentation text; /* n > 0 only */
} h3_job_keyframes;

/* Ref2VA: a request's references in request order (shape, for the layout),
 * its images resized to the model's reference_image_short_edge and its
 * audio clips (planar copies), each in request order among its kind; and
 * the presentation. */
typedef struct h3_job_references {
    int n, n_images, n_audio;
    h3_dit_reference shape[H3_MAX_REFERENCES]; /* each one's latent grid or latents, for the layout */
    h3_rgb_image images[H3_MAX_REFERENCE_IMAGES];
    float *audio[H3_MAX_REFERENCE_AUDIO];      /* [2, audio_samples[j]] */
    int64_t audio_samples[H3_MAX_REFERENCE_AUDIO];
    h3_text_presentation text;                 /* n > 0 only */
} h3_job_references;

/* A prepared request (h3.h: h3_engine_prepare): what every stage of its
 * generation reads, derived once. The twin runs it as the engine does. */
struct h3_job {
    const h3_engine *engine;  /* the engine that prepared it (h3_engine_run runs it there only) */
    h3_request request;       /* the checked request: prompt is the job's copy, the images are NULL
                                 (the job holds them fitted, in kf) */
    char *prompt;
    h3_plan plan;
    h3_job_keyframes kf;
    h3_job_references refs;   /* Ref2VA (refs.n == 0: none) */
    int32_t *ids;             /* T2VA: the prompt's tokens (FL2VA: kf.text) */
    size_t n_ids;
    int text_release;         /* free the text encoder after encoding: the memory plan's decision
                                 (h3_memory_check_request), else h3_engine_force_text_release's */
};

/* h3_engine.c: the calling rank's share of the text conditioner, loaded
 * (again: the files, or the dummy draw) when it has none; and its language
 * model's weights freed (the config and vision tower stay, so presentations
 * can still be built). Ranks outside the conditioner's group hold none and
 * do nothing. */
h3_status_code h3_engine_text_encoder_load(h3_engine *e, const h3_tp *tp, h3_status *status);
void h3_engine_text_encoder_free(h3_engine *e, const h3_tp *tp);
/* h3_engine.c: the calling rank's transformer_ref/ (Ref2VA), loaded once by
 * the first request that needs it and kept (on the measuring twin too, so
 * the memory plan counts it). */
h3_status_code h3_engine_transformer_ref_load(h3_engine *e, const h3_tp *tp, h3_status *status);
/* Likewise the audio VAE's encoder (audio references), on every rank: each
 * encodes the references itself, so no rank waits for another. */
h3_status_code h3_engine_audio_encoder_load(h3_engine *e, const h3_tp *tp, h3_status *status);
/* h3_memory_limit.c: max_gpu_memory as a limit on a GPU backend's tally
 * (the plan's reserve for the context taken off); applied to real backends. */
void h3_memory_limit_backend(const h3_engine *e, h3_backend *b, int device);
/* h3_preflight.c: the precision setting on its own and against compute
 * (fp8 refused with compute=cuda-f32); open and preflight both refuse it. */
h3_status_code h3_engine_check_precision(const h3_engine_options *o, h3_status *status);

struct h3_engine {
    char *model_dir;
    char *transformer_ref_dir; /* Ref2VA partition (the folder may be absent: references are then refused) */
    int reference_image_short_edge; /* modular_model_index.json's, else the release's 2048 */
    char *transformer_dir, *vae_dir, *audio_vae_dir, *text_encoder_dir, *tokenizer_dir;
    char *adapter_path;
    /* FastH3 (h3_adapter.h): the adapter is open only while the ranks load */
    h3_adapter *adapter;
    int has_adapter, adapter_vsa;
    h3_adapter_contract contract;
    /* load-format dummy (h3.h): each component's dummy checkpoint, only
     * while the ranks load; the dummy adapter is has_adapter without a file */
    h3_load_format load_format;
    uint64_t dummy_seed;
    struct {
        h3_checkpoint *text_encoder, *transformer, *video_vae, *audio_vae;
    } dummy;
    int native_layout;
    float video_shift, audio_shift;
    int text_layer;
    h3_compute compute;
    void (*log)(void *opaque, h3_log_level level, const char *message);
    void *log_opaque;

    /* Rank 0's components (all of them with one rank), for the code that
     * reads the model's configuration. */
    h3_backend *backend;
    h3_tokenizer *tokenizer;
    h3_text_encoder *text_encoder;
    h3_dit *dit;
    h3_video_vae *video_vae;
    h3_audio_vae *audio_vae;

    /* Tensor parallelism: n_ranks ranks; with a device list or cpu:N a team
     * of rank threads runs them, else rank 0 runs on the calling thread. */
    int n_ranks;
    h3_engine_rank *ranks;
    h3_tp_team *team;
    h3_tp_plan plan;
    int devices[H3_COMM_MAX_RANKS]; /* CUDA ordinal of each rank; -1: CPU */
    int cpu_threads;
    h3_tp_decision decision;
    int fault_rank, fault_step;     /* test hook: h3_engine_inject_fault */
    long fault_ops;                 /* > 0: that many ops into the step's forward (..._mid_forward) */

    /* The memory plan (h3_memory_plan.c): measure is set on an engine whose
     * ranks run on measuring backends; shadow is a CUDA engine's measuring
     * twin, which runs each request first to check it against free memory. */
    const h3_memory_target *measure;
    h3_engine *shadow;
    /* The text encoder between requests: when a request does not fit with
     * it resident, h3_memory_check_request sets its job's text_release, and
     * h3_generate.c frees its weights after the text stage (after giving the
     * arena and scratch back, so they load beside the weights alone); the
     * next request loads them again. force_text_release: the test hook's
     * h3_engine_force_text_release, every job's default; text_released_last:
     * the last run did. */
    int force_text_release, text_released_last;
    int text_hidden; /* the text encoder's width, known while its weights are away */
    int64_t text_positions; /* its max_position_embeddings: the prompt's limit in tokens (likewise) */
    uint64_t max_gpu_memory; /* h3_engine_options.max_gpu_memory */
    h3_precision precision;  /* h3_engine_options.precision */
    /* memory=stream (h3.h): stream is the mode in use, set before the
     * ranks load (h3_memory_check_open decides memory=auto); the reason is
     * stats.memory_reason's */
    h3_memory_mode memory;
    int stream;
    /* FL2VA: the image processor's config (has_processor: one was found) */
    h3_image_processor_config processor;
    int has_processor;
    h3_memory_target shadow_target; /* what the shadow stands for */
    int generated;        /* a generation ran: the backends' peaks are its */
    double open_started;  /* h3_engine_begin's clock, for stats.load */

    volatile int cancel;  /* set by h3_engine_cancel, polled between steps */
    gint busy;            /* 1 while h3_engine_run or h3_engine_set_loras runs (each refuses the other) */
    GMutex lock;          /* one generation at a time; guards stats */
    h3_stats stats;
};

/* ---- h3_engine_log.c ---------------------------------------------------------- */
/* To the application's log callback, else warnings and errors to stderr. */
void h3_engine_log(h3_engine *e, h3_log_level level, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
/* Monotonic seconds, for the stats. */
double h3_engine_now(void);

/* ---- h3_model_dir.c ---------------------------------------------------------- */
/* The model's root as the engine opens it (a diffusers root, or a native
 * FL2VA/ folder given itself or its parent), or an error in the engine's
 * words when dir is not a model. The one owner of the layout rule (open and
 * preflight). Caller frees *out with g_free. */
h3_status_code h3_engine_model_root(const char *dir, char **out, h3_status *status);
/* The root's components into e (model_dir and the *_dir paths), the
 * scheduler shifts and the conditioner's tap layer. */
h3_status_code h3_engine_resolve_layout(h3_engine *e, const char *dir, h3_status *status);

/* ---- h3_memory_limit.c ---------------------------------------------------------- */
/* Rank `rank`'s measuring backend, as e->measure says. */
h3_status_code h3_memory_backend_create(const h3_engine *e, int rank, h3_backend **out, h3_status *status);
/* What a rank on `device` (-1: the CPU) uses beyond its tally: the CUDA
 * context, NCCL's buffers, the FP8 kernels. */
uint64_t h3_memory_reserve(const h3_engine *e, int device);
/* Whether max_gpu_memory holds a rank on `device` (-1: the CPU, only under
 * h3_engine_cap_cpu_memory, which h3_memory_cpu_capped reports). */
int h3_memory_capped(const h3_engine *e, int device);
int h3_memory_cpu_capped(void);

/* ---- h3_engine.c ---------------------------------------------------------- */
/* An engine's open in two halves, so that the memory plan can decide the
 * memory mode between them (h3_engine_api.c): begin checks the options and
 * resolves the model and devices, reading only configs (measure: the
 * engine stands for that target on measuring backends); load reads the
 * tokenizer and the processor and loads every rank. On a failure of load
 * the caller closes the engine; begin closes its own. */
h3_status_code h3_engine_begin(const h3_engine_options *options, const h3_memory_target *measure, h3_engine **out,
                               h3_status *status);
h3_status_code h3_engine_load(h3_engine *e, const h3_engine_options *options, h3_status *status);
/* An engine on measuring backends standing for `target`: everything
 * h3_engine_open does, reading only configs and headers. */
h3_status_code h3_engine_open_measuring(const h3_engine_options *options, const h3_memory_target *target,
                                        h3_engine **out, h3_status *status);

/* ---- h3_generate.c ---------------------------------------------------------- */
/* The request r checked (h3_request_check, the FastH3 rules, the model's
 * limits) and prepared once: its plan, its keyframes fitted and presented,
 * its tokens. The memory plan is not consulted (h3_engine_prepare does). */
h3_status_code h3_job_make(const h3_engine *e, const h3_request *r, h3_job **out, h3_status *status);
/* The job on e, which may be the engine that made it or its measuring twin
 * (nothing computed there), the text encoder freed after encoding when
 * text_release is set. Calls no memory plan. */
h3_status_code h3_job_run(h3_engine *e, const h3_job *job, const h3_callbacks *cb, int text_release,
                          h3_status *status);

/* ---- h3_memory_plan.c ---------------------------------------------------------- */
/* At open, before loading: the weights and workspace of every CUDA rank
 * against its free memory; keeps the measuring twin for the requests. */
h3_status_code h3_memory_check_open(h3_engine *e, const h3_engine_options *options, h3_status *status);
/* At prepare, before any costly step: the job on the twin, then its needs
 * against what each CUDA rank holds and what is free; sets
 * job->text_release when it fits only with the text encoder freed. */
h3_status_code h3_memory_check_request(h3_engine *e, h3_job *job, h3_status *status);

/* ---- h3_fasth3.c (docs/spec/fasth3-vsa.md §1, §2) ---------------------------- */
/* Opens the adapter at path, checks that it was trained on this model and
 * binds it to the transformer's checkpoint header, before any weight loads. */
h3_status_code h3_fasth3_open_adapter(h3_engine *e, const char *path, h3_status *status);
/* The attention mode, ladder and step count of r against the engine's
 * adapter (or its absence); *forwards becomes the default number of
 * forwards (left as it is without an adapter). */
h3_status_code h3_fasth3_check_request(const h3_engine *e, const h3_request *r, int *forwards,
                                       h3_status *status);
/* The video and audio sigma grids of r: the base model's grid of steps + 1
 * points, or a FastH3 ladder. */
h3_status_code h3_fasth3_sigma_grids(const h3_engine *e, const h3_request *r, int steps, h3_sigma_grid *video,
                                     h3_sigma_grid *audio, h3_status *status);
/* The main blocks' attention for r: VSA-H3 or dense. */
h3_status_code h3_fasth3_set_attention(h3_dit *dit, const h3_request *r, h3_status *status);

#endif
