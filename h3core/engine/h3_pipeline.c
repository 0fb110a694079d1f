/* h3_pipeline.c - the engine: model directory -> resident components ->
 * validated request -> text states -> denoising loop -> decoded media.
 *
 * Data flow of one request (see docs/ARCHITECTURE.md):
 *   prompt --tokenizer--> ids --text encoder (tap layer)--> text states
 *   seed --torch randn--> video noise [24,T,h,w] (patchified to rows), audio rows [2Na,32]
 *   for each step: DiT(rows, text, timesteps) -> velocities -> Euler step (fp32, host)
 *   audio rows -> audio VAE -> stereo samples (emitted first: it is cheap and lets
 *   a consumer interleave audio with the video frames that follow)
 *   video rows -> unpatchify -> video VAE window by window -> RGB frames */
#include "h3.h"

#include <glib.h>
#include <json-glib/json-glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/h3_audio_vae.h"
#include "backend/h3_backend.h"
#include "model/h3_adapter.h"
#include "base/h3_config.h"
#include "model/h3_dit.h"
#include "model/h3_dit_layout.h"
#include "base/h3_random.h"
#include "model/h3_scheduler.h"
#include "model/h3_text_encoder.h"
#include "model/h3_tokenizer.h"
#include "parallel/h3_tp.h"
#include "model/h3_tp_plan.h"
#include "engine/h3_engine.h"
#include "model/h3_video_vae.h"

#define H3_AUDIO_LATENTS_PER_SECOND 40
#define H3_DEFAULT_TEXT_LAYER 50
#define H3_DEFAULT_STEPS 49

/* One tensor-parallel rank's components (h3_tp.h), each on its own backend. */
typedef struct engine_rank {
    h3_backend *backend;
    h3_text_encoder *text_encoder; /* NULL on ranks outside the text conditioner's group */
    h3_dit *dit;
    h3_video_vae *video_vae;
    h3_audio_vae *audio_vae;       /* rank 0 only */
} engine_rank;

_Static_assert(H3_MAX_DEVICES == H3_COMM_MAX_RANKS, "a device list fills one tensor-parallel group");

struct h3_engine {
    char *model_dir;
    char *transformer_dir, *vae_dir, *audio_vae_dir, *text_encoder_dir, *tokenizer_dir;
    char *adapter_path;
    /* FastH3 (h3_adapter.h): the adapter is open only while the ranks load */
    h3_adapter *adapter;
    int has_adapter, adapter_vsa;
    h3_adapter_contract contract;
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
    engine_rank *ranks;
    h3_tp_team *team;
    h3_tp_plan plan;
    int devices[H3_COMM_MAX_RANKS]; /* CUDA ordinal of each rank; -1: CPU */
    int cpu_threads;
    h3_tp_decision decision;
    int fault_rank, fault_step;     /* test hook: h3_engine_inject_fault */

    volatile int cancel;  /* set by h3_engine_cancel, polled between steps */
    GMutex lock;          /* one generation at a time; guards stats */
    h3_stats stats;
};

static void engine_log(h3_engine *e, h3_log_level level, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static void engine_log(h3_engine *e, h3_log_level level, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (e->log) e->log(e->log_opaque, level, msg);
    else if (level <= H3_LOG_WARNING) fprintf(stderr, "h3: %s\n", msg);
}

static double now_seconds(void) { return (double)g_get_monotonic_time() / 1e6; }

/* ---- model directory ------------------------------------------------------ */

static gpointer find_default_model_dir(gpointer unused) {
    (void)unused;
    const char *env = g_getenv("H3_DEFAULT_MODEL_DIR");
    if (env && *env) return g_strdup(env);
#ifdef H3_DATADIR
    char *installed = g_build_filename(H3_DATADIR, "tiny-h3", NULL);
    if (g_file_test(installed, G_FILE_TEST_IS_DIR)) return installed;
    g_free(installed);
#endif
#ifdef H3_BUILD_MODEL_DIR
    return g_strdup(H3_BUILD_MODEL_DIR);
#else
    return g_strdup("tiny-h3");
#endif
}

/* Resolved once per process (elements in several pipelines may ask at the
 * same time, hence GOnce); the string lives as long as the process. */
const char *h3_default_model_dir(void) {
    static GOnce once = G_ONCE_INIT;
    return g_once(&once, find_default_model_dir, NULL);
}

static int is_dir(const char *base, const char *sub) {
    char *p = g_build_filename(base, sub, NULL);
    int r = g_file_test(p, G_FILE_TEST_IS_DIR);
    g_free(p);
    return r;
}

static int is_file(const char *base, const char *sub) {
    char *p = g_build_filename(base, sub, NULL);
    int r = g_file_test(p, G_FILE_TEST_IS_REGULAR);
    g_free(p);
    return r;
}

static h3_status_code read_shift(const char *dir, const char *sub, float *shift, h3_status *status) {
    char *p = g_build_filename(dir, sub, "scheduler_config.json", NULL);
    h3_config *c;
    h3_status_code rc = h3_config_load(p, &c, status);
    g_free(p);
    if (rc != H3_OK) return rc;
    double v = *shift;
    rc = h3_config_double_or(c, "shift", &v, status);
    h3_config_free(c);
    if (rc == H3_OK && !(v > 0)) return h3_fail(status, H3_ERR_FORMAT, "%s/%s: shift must be positive", dir, sub);
    *shift = (float)v;
    return rc;
}

/* Finds the components of a diffusers-layout root (model_index.json +
 * transformer/, vae/, ...) or of a native FL2VA/ directory. */
static h3_status_code resolve_layout(h3_engine *e, const char *dir, h3_status *status) {
    if (!g_file_test(dir, G_FILE_TEST_IS_DIR))
        return h3_fail(status, H3_ERR_NOT_FOUND, "model directory '%s' does not exist", dir);
    char *root = g_strdup(dir);
    if (!is_file(root, "model_index.json") && !is_file(root, "modular_model_index.json") && is_dir(root, "FL2VA")) {
        char *n = g_build_filename(root, "FL2VA", NULL);
        g_free(root);
        root = n;
    }
    e->model_dir = root;
    e->video_shift = H3_VIDEO_SHIFT;
    e->audio_shift = H3_AUDIO_SHIFT;
    h3_status_code rc = H3_OK;
    if (is_dir(root, "transformer") && is_dir(root, "vae")) {
        e->native_layout = 0;
        e->vae_dir = g_build_filename(root, "vae", NULL);
        if (is_dir(root, "scheduler")) rc = read_shift(root, "scheduler", &e->video_shift, status);
        if (rc == H3_OK && is_dir(root, "audio_scheduler")) rc = read_shift(root, "audio_scheduler", &e->audio_shift, status);
    } else if (is_dir(root, "transformer") && is_dir(root, "video_vae")) {
        e->native_layout = 1;
        e->vae_dir = g_build_filename(root, "video_vae", NULL);
        char *mi = g_build_filename(root, "model_index.json", NULL);
        h3_config *c;
        if (h3_config_load(mi, &c, NULL) == H3_OK) {
            double v = e->video_shift, a = e->audio_shift;
            rc = h3_config_double_or(c, "_minimax_h3.sigma_shift_scales.video", &v, status);
            if (rc == H3_OK) rc = h3_config_double_or(c, "_minimax_h3.sigma_shift_scales.audio", &a, status);
            e->video_shift = (float)v;
            e->audio_shift = (float)a;
            h3_config_free(c);
        }
        g_free(mi);
    } else {
        return h3_fail(status, H3_ERR_NOT_FOUND,
                       "'%s' is not a MiniMax-H3 model: expected model_index.json with transformer/ and vae/ "
                       "(diffusers layout) or FL2VA/ with transformer/ and video_vae/ (native layout)", dir);
    }
    if (rc != H3_OK) return rc;
    e->transformer_dir = g_build_filename(root, "transformer", NULL);
    e->audio_vae_dir = g_build_filename(root, "audio_vae", NULL);
    e->text_encoder_dir = g_build_filename(root, "text_encoder", NULL);
    e->tokenizer_dir = g_build_filename(root, is_dir(root, "tokenizer") ? "tokenizer" : "processor", NULL);
    const char *need[] = {e->audio_vae_dir, e->text_encoder_dir, e->tokenizer_dir};
    for (size_t i = 0; i < G_N_ELEMENTS(need); i++)
        if (!g_file_test(need[i], G_FILE_TEST_IS_DIR))
            return h3_fail(status, H3_ERR_NOT_FOUND, "model '%s' lacks the component directory '%s'", dir, need[i]);

    /* The conditioner tap: 50 for the release, which records it nowhere;
     * test models carry it in golden_meta.json. */
    e->text_layer = H3_DEFAULT_TEXT_LAYER;
    char *meta = g_build_filename(root, "golden_meta.json", NULL);
    if (g_file_test(meta, G_FILE_TEST_IS_REGULAR)) {
        h3_config *c;
        rc = h3_config_load(meta, &c, status);
        if (rc == H3_OK) {
            int64_t layer = e->text_layer;
            rc = h3_config_int_or(c, "text_encoder_layer", &layer, status);
            e->text_layer = (int)layer;
            h3_config_free(c);
        }
    }
    g_free(meta);
    return rc;
}

/* ---- FastH3: adapter, ladders, attention mode (h3_adapter.h, h3_vsa.h) ---------- */

/* The identity an adapter's base_model must name: the transformer entry's
 * pretrained_model_name_or_path in a diffusers model_index.json. The
 * native FL2VA/ partition records none; it is published only as the
 * release, MiniMaxAI/MiniMax-H3. */
static char *model_id(const h3_engine *e) {
    static const char *const index_files[] = {"model_index.json", "modular_model_index.json"};
    for (size_t i = 0; !e->native_layout && i < G_N_ELEMENTS(index_files); i++) {
        char *path = g_build_filename(e->model_dir, index_files[i], NULL);
        JsonParser *p = json_parser_new();
        char *id = NULL;
        if (json_parser_load_from_file(p, path, NULL)) {
            JsonNode *root = json_parser_get_root(p);
            JsonObject *o = root && JSON_NODE_HOLDS_OBJECT(root) ? json_node_get_object(root) : NULL;
            JsonNode *t = o ? json_object_get_member(o, "transformer") : NULL;
            JsonArray *a = t && JSON_NODE_HOLDS_ARRAY(t) ? json_node_get_array(t) : NULL;
            JsonNode *spec = a && json_array_get_length(a) > 2 ? json_array_get_element(a, 2) : NULL;
            JsonObject *so = spec && JSON_NODE_HOLDS_OBJECT(spec) ? json_node_get_object(spec) : NULL;
            JsonNode *name = so ? json_object_get_member(so, "pretrained_model_name_or_path") : NULL;
            if (name && JSON_NODE_HOLDS_VALUE(name) && json_node_get_value_type(name) == G_TYPE_STRING)
                id = g_strdup(json_node_get_string(name));
        }
        g_object_unref(p);
        g_free(path);
        if (id) return id;
    }
    return g_strdup("MiniMaxAI/MiniMax-H3");
}

/* Every key against the transformer's header before anything costly loads
 * (the ranks' loaders find the adapter bound and reuse the binding). */
static h3_status_code bind_adapter(h3_engine *e, h3_status *status) {
    h3_dit_config cfg;
    h3_checkpoint *ckpt = NULL;
    h3_dit_checkpoint_layout layout;
    h3_status_code rc = h3_dit_config_load(e->transformer_dir, &cfg, status);
    if (rc == H3_OK) rc = h3_checkpoint_open(e->transformer_dir, &ckpt, status);
    if (rc == H3_OK) rc = h3_dit_detect_layout(ckpt, &layout, status);
    if (rc == H3_OK) rc = h3_adapter_bind(e->adapter, ckpt, layout, &cfg, status);
    h3_checkpoint_close(ckpt);
    return rc;
}

static h3_status_code open_adapter(h3_engine *e, const char *path, h3_status *status) {
    h3_status_code rc = h3_adapter_open(path, &e->adapter, status);
    if (rc != H3_OK) return rc;
    e->has_adapter = 1;
    e->adapter_path = g_strdup(h3_adapter_path(e->adapter));
    e->adapter_vsa = h3_adapter_has_vsa_gates(e->adapter);
    e->contract = *h3_adapter_get_contract(e->adapter);
    char *id = model_id(e);
    rc = h3_adapter_check_base_model(e->adapter, id, e->model_dir, status);
    g_free(id);
    if (rc == H3_OK) rc = bind_adapter(e, status);
    if (rc == H3_OK)
        engine_log(e, H3_LOG_INFO, "FastH3 adapter %s (%s, rank %d, %s)", e->adapter_path,
                   h3_adapter_finetuned_model(e->adapter), h3_adapter_rank(e->adapter),
                   e->adapter_vsa ? "VSA gates: backend=vsa" : "dense: backend=fa");
    return rc;
}

/* Forwards of a FastH3 ladder: the release's dmd_denoising_steps or 4. */
static int fasth3_forwards(const h3_engine *e, h3_fasth3_ladder ladder) {
    if (ladder == H3_LADDER_RELEASE && e->contract.num_dmd_steps > 0) return e->contract.num_dmd_steps;
    return H3_FASTH3_LADDER_POINTS - 1;
}

/* The attention mode must match the adapter (spec §1.4: VSA gates only make
 * sense under VSA-H3, and dense attention is no substitute for a VSA
 * student); a FastH3 student runs exactly its ladder's forwards. Sets the
 * default number of forwards. */
static h3_status_code validate_fasth3(const h3_engine *e, const h3_request *r, int *forwards, h3_status *status) {
    if (r->attention != H3_ATTENTION_DENSE && r->attention != H3_ATTENTION_VSA)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "unknown attention mode %d", (int)r->attention);
    if (r->ladder != H3_LADDER_RELEASE && r->ladder != H3_LADDER_A && r->ladder != H3_LADDER_B)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "unknown FastH3 ladder %d", (int)r->ladder);
    if (!e->has_adapter) {
        if (r->attention == H3_ATTENTION_VSA)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "backend=vsa runs VSA-H3 with the gates of a FastH3 VSA "
                           "adapter: set adapter-location to a vsa-datafree adapter, or use backend=fa");
        if (r->ladder != H3_LADDER_RELEASE)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "a FastH3 ladder needs a FastH3 adapter (adapter-location)");
        return H3_OK;
    }
    if (r->attention == H3_ATTENTION_DENSE && e->adapter_vsa)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "backend=fa: adapter '%s' is a FastH3 VSA adapter (its "
                       "to_gate_compress gates were trained under VSA-H3; dense attention is not a substitute): use "
                       "backend=vsa", e->adapter_path);
    if (r->attention == H3_ATTENTION_VSA && !e->adapter_vsa)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "backend=vsa: adapter '%s' is a dense FastH3 adapter (no "
                       "to_gate_compress gates): use backend=fa, or a vsa-datafree adapter", e->adapter_path);
    if (r->attention == H3_ATTENTION_VSA) {
        if (!(r->vsa_sparsity >= 0.0f && r->vsa_sparsity < 1.0f))
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "vsa-sparsity %g: must be in [0, 1)", (double)r->vsa_sparsity);
        if (!h3_backend_has_vsa_attention(e->backend))
            return h3_fail(status, H3_ERR_UNSUPPORTED, "backend=vsa: the %s backend has no VSA-H3 kernel yet",
                           h3_backend_name(e->backend));
    }
    *forwards = fasth3_forwards(e, r->ladder);
    if (r->steps != 0 && r->steps != *forwards)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "steps %d: the FastH3 student is distilled for exactly %d "
                       "forwards over its sigma ladder; use steps 0 or %d", r->steps, *forwards, *forwards);
    return H3_OK;
}

/* The sigma grids of a request: the base model's linspace grid of steps + 1
 * points, or a FastH3 ladder (ladder A is that grid at 5 points). Shifts
 * from the adapter's contract when it states them. */
static h3_status_code make_grids(const h3_engine *e, const h3_request *r, int steps, h3_sigma_grid *video,
                                 h3_sigma_grid *audio, h3_status *status) {
    h3_status_code rc;
    if (!e->has_adapter || r->ladder == H3_LADDER_A) {
        rc = h3_sigma_grid_make(steps + 1, e->video_shift, video, status);
        if (rc == H3_OK) rc = h3_sigma_grid_make(steps + 1, e->audio_shift, audio, status);
        return rc;
    }
    float vs = e->contract.video_shift > 0 ? (float)e->contract.video_shift : e->video_shift;
    float as = e->contract.audio_shift > 0 ? (float)e->contract.audio_shift : e->audio_shift;
    if (r->ladder == H3_LADDER_RELEASE && e->contract.num_dmd_steps > 0) {
        rc = h3_sigma_grid_from_dmd_steps(e->contract.dmd_steps, e->contract.num_dmd_steps, vs, video, status);
        if (rc == H3_OK) rc = h3_sigma_grid_from_dmd_steps(e->contract.dmd_steps, e->contract.num_dmd_steps, as, audio, status);
        return rc;
    }
    rc = h3_sigma_grid_from_base(h3_fasth3_ladder_b, H3_FASTH3_LADDER_POINTS, vs, video, status);
    if (rc == H3_OK) rc = h3_sigma_grid_from_base(h3_fasth3_ladder_b, H3_FASTH3_LADDER_POINTS, as, audio, status);
    return rc;
}

/* Main-block attention of this request: VSA-H3 (64-token tiles) or dense. */
static h3_status_code set_attention(h3_dit *dit, const h3_request *r, h3_status *status) {
    if (r->attention != H3_ATTENTION_VSA) return h3_dit_set_vsa(dit, NULL, status);
    h3_vsa_params p = h3_vsa_params_default();
    p.sparsity = r->vsa_sparsity;
    return h3_dit_set_vsa(dit, &p, status);
}

/* ---- open / close ------------------------------------------------------------ */

#ifdef H3_HAVE_CUDA
static h3_status_code create_cuda(h3_compute compute, int device, h3_backend **out, h3_status *status) {
    if (compute == H3_COMPUTE_CUDA_F32) return h3_backend_cuda_create_exact(device, out, status);
    return h3_backend_cuda_create(device, out, status);
}
#endif

/* The one backend of an engine without a device list (devices "auto"). */
static h3_status_code create_backend(h3_engine *e, const h3_engine_options *o, h3_status *status) {
    int need_cuda = o->compute == H3_COMPUTE_CUDA || o->compute == H3_COMPUTE_CUDA_F32;
    if (need_cuda || o->compute == H3_COMPUTE_AUTO) {
#ifdef H3_HAVE_CUDA
        int device = 0;
        h3_status cs = {0};
        if (create_cuda(o->compute, device, &e->backend, &cs) == H3_OK) {
            snprintf(e->stats.compute, sizeof e->stats.compute, "cuda:%d%s", device,
                     o->compute == H3_COMPUTE_CUDA_F32 ? " (f32)" : "");
            return H3_OK;
        }
        if (need_cuda) {
            *status = cs;
            return cs.code;
        }
        snprintf(e->stats.fallback, sizeof e->stats.fallback, "compute=auto fell back to the CPU: %.200s", cs.message);
        engine_log(e, H3_LOG_WARNING, "%s", e->stats.fallback);
#else
        if (need_cuda)
            return h3_fail(status, H3_ERR_UNSUPPORTED, "compute=cuda: this build of h3core has no CUDA backend "
                                                       "(rebuild with -Dcuda=enabled)");
        snprintf(e->stats.fallback, sizeof e->stats.fallback,
                 "compute=auto uses the CPU: this build has no CUDA backend");
        engine_log(e, H3_LOG_INFO, "%s", e->stats.fallback);
#endif
    }
    snprintf(e->stats.compute, sizeof e->stats.compute, "cpu");
    return h3_backend_cpu_create(o->cpu_threads, &e->backend, status);
}

/* devices: "auto" (or empty): one backend chosen by `compute`; "cpu:N": N
 * CPU ranks (tensor parallelism on the CPU, for tests); "0,1,2,3": one
 * rank per listed GPU, NCCL between them. devices[0] == -2 marks "auto". */
static h3_status_code parse_devices(h3_engine *e, const h3_engine_options *o, h3_status *status) {
    h3_device_list list;
    e->cpu_threads = o->cpu_threads;
    e->n_ranks = 1;
    e->devices[0] = -2;
    h3_status_code rc = h3_devices_parse(o->devices, o->compute, &list, status);
    if (rc != H3_OK || list.count == 0) return rc;
    e->n_ranks = list.count;
    for (int r = 0; r < list.count; r++) e->devices[r] = list.ordinals[r];
    return H3_OK;
}

/* Loads a rank's components: its text conditioner share (when the plan puts
 * one on it), its transformer shard, the video VAE (tiles split by rank), and
 * on rank 0 the audio VAE. */
static h3_status_code load_rank(const h3_tp *tp, h3_engine *e, h3_status *status) {
    engine_rank *r = &e->ranks[tp->rank];
    h3_tp text_tp = h3_tp_text(&e->plan, tp);
    h3_status_code rc = H3_OK;
    if (text_tp.size > 0)
        rc = h3_text_encoder_load_tp(r->backend, e->text_encoder_dir, e->text_layer, &text_tp, &r->text_encoder,
                                     status);
    if (rc == H3_OK) rc = h3_dit_load_with_adapter(r->backend, e->transformer_dir, tp, e->adapter, &r->dit, status);
    if (rc == H3_OK) rc = h3_video_vae_load(r->backend, e->vae_dir, &r->video_vae, status);
    if (rc == H3_OK) h3_video_vae_set_tp(r->video_vae, tp);
    if (rc == H3_OK && tp->rank == 0) rc = h3_audio_vae_load(r->backend, e->audio_vae_dir, &r->audio_vae, status);
    return rc;
}

static h3_status_code close_rank(const h3_tp *tp, void *user, h3_status *status) {
    h3_engine *e = user;
    engine_rank *r = &e->ranks[tp->rank];
    h3_audio_vae_free(r->audio_vae);
    h3_video_vae_free(r->video_vae);
    h3_dit_free(r->dit);
    h3_text_encoder_free(r->text_encoder);
    h3_backend_destroy(r->backend);
    memset(r, 0, sizeof *r);
    return H3_OK;
}

static void alias_rank0(h3_engine *e) {
    e->backend = e->ranks[0].backend;
    e->text_encoder = e->ranks[0].text_encoder;
    e->dit = e->ranks[0].dit;
    e->video_vae = e->ranks[0].video_vae;
    e->audio_vae = e->ranks[0].audio_vae;
}

/* Sum of the safetensors files of a component directory (and of a native
 * VAE's source/ beside it): what the plan counts for weights it replicates. */
static uint64_t weight_file_bytes(const char *dir, int depth) {
    uint64_t total = 0;
    GDir *d = g_dir_open(dir, 0, NULL);
    if (!d) return 0;
    for (const char *name; (name = g_dir_read_name(d));) {
        char *p = g_build_filename(dir, name, NULL);
        GStatBuf sb;
        if (g_str_has_suffix(name, ".safetensors") && g_stat(p, &sb) == 0) total += (uint64_t)sb.st_size;
        else if (depth > 0 && g_file_test(p, G_FILE_TEST_IS_DIR)) total += weight_file_bytes(p, depth - 1);
        g_free(p);
    }
    g_dir_close(d);
    return total;
}

static h3_status_code open_single(h3_engine *e, const h3_engine_options *o, h3_status *status) {
    e->ranks = calloc(1, sizeof *e->ranks);
    if (!e->ranks) return h3_fail(status, H3_ERR_NO_MEMORY, "out of memory");
    e->n_ranks = 1;
    h3_tp single = H3_TP_SINGLE;
    h3_status_code rc = create_backend(e, o, status);
    e->ranks[0].backend = e->backend;
    e->backend = NULL;
    /* One rank has no plan to agree on, but load_rank reads it. */
    e->plan.size = 1;
    e->plan.text_size = 1;
    if (rc == H3_OK) rc = load_rank(&single, e, status);
    alias_rank0(e);
    return rc;
}

/* On each rank's thread: its backend, the probe of its device, the
 * agreement with the other ranks, then its share of the weights. */
static h3_status_code start_rank(const h3_tp *tp, void *user, h3_status *status) {
    h3_engine *e = user;
    engine_rank *r = &e->ranks[tp->rank];
    int device = e->devices[tp->rank];
    h3_status bs;
    h3_status_clear(&bs);
    h3_status_code rc;
    if (device < 0) {
        int threads = e->cpu_threads > 0 ? (e->cpu_threads + e->n_ranks - 1) / e->n_ranks : 0;
        rc = h3_backend_cpu_create(threads, &r->backend, &bs);
    } else {
#ifdef H3_HAVE_CUDA
        rc = create_cuda(e->compute, device, &r->backend, &bs);
#else
        rc = h3_fail(&bs, H3_ERR_UNSUPPORTED, "no CUDA backend in this build");
#endif
    }
    h3_tp_probe probe;
    h3_tp_probe_rank(rc == H3_OK ? r->backend : NULL, tp->rank, device, e->devices, e->n_ranks,
                     e->plan.rank_bytes[tp->rank], rc == H3_OK ? NULL : bs.message, &probe);
    h3_tp_decision d;
    rc = h3_tp_handshake(tp, r->backend, &probe, &d, status);
    if (rc != H3_OK) return rc;
    if (tp->rank == 0) e->decision = d;
    return load_rank(tp, e, status);
}

/* A device list or cpu:N: the plan (the degree must divide the model), a
 * communicator and a team of rank threads that start and load the ranks. */
static h3_status_code open_parallel(h3_engine *e, h3_status *status) {
    int n = e->n_ranks, cpu = e->devices[0] < 0;
    h3_dit_config dc;
    h3_text_encoder_config tc;
    h3_status_code rc = h3_dit_config_load(e->transformer_dir, &dc, status);
    if (rc == H3_OK) rc = h3_text_encoder_config_load(e->text_encoder_dir, &tc, status);
    if (rc == H3_OK)
        rc = h3_tp_plan_make(n, &dc, &tc, e->text_layer, cpu ? 4 : 2, weight_file_bytes(e->vae_dir, 2),
                             weight_file_bytes(e->audio_vae_dir, 1), &e->plan, status);
    if (rc != H3_OK) return rc;
    e->ranks = calloc((size_t)n, sizeof *e->ranks);
    if (!e->ranks) return h3_fail(status, H3_ERR_NO_MEMORY, "out of memory");
    h3_comm_group *group = NULL;
    /* One GPU without NCCL still runs the rank machinery: a one-rank group
     * moves nothing, so the CPU communicator serves it. */
    int nccl = !cpu && (h3_comm_have_nccl() || n > 1);
    rc = nccl ? h3_comm_group_create_nccl(n, e->devices, &group, status) : h3_comm_group_create_cpu(n, &group, status);
    if (rc == H3_OK) rc = h3_tp_team_create(group, &e->team, status);
    if (rc == H3_OK) rc = h3_tp_team_run(e->team, start_rank, e, status);
    alias_rank0(e);
    if (rc != H3_OK) return rc;
    size_t at = 0;
    if (cpu) {
        at = (size_t)snprintf(e->stats.compute, sizeof e->stats.compute, "cpu");
    } else {
        at = (size_t)snprintf(e->stats.compute, sizeof e->stats.compute, "cuda:");
        for (int r = 0; r < n && at < sizeof e->stats.compute - 16; r++)
            at += (size_t)snprintf(e->stats.compute + at, sizeof e->stats.compute - at, "%s%d", r ? "," : "",
                                   e->devices[r]);
    }
    snprintf(e->stats.compute + at, sizeof e->stats.compute - at, " (tp%d, %s%s)", n,
             h3_comm_group_name(h3_tp_team_group(e->team)), e->compute == H3_COMPUTE_CUDA_F32 ? ", f32" : "");
    /* Planned departures (the plan) and agreed ones (the probes), in full in the log. */
    g_strlcpy(e->stats.fallback, e->plan.note, sizeof e->stats.fallback);
    if (e->plan.note[0] && e->decision.fallback[0]) g_strlcat(e->stats.fallback, "; ", sizeof e->stats.fallback);
    g_strlcat(e->stats.fallback, e->decision.fallback, sizeof e->stats.fallback);
    if (e->plan.note[0]) engine_log(e, H3_LOG_WARNING, "tensor parallelism: %s", e->plan.note);
    if (e->decision.fallback[0]) engine_log(e, H3_LOG_WARNING, "tensor parallelism: %s", e->decision.fallback);
    return H3_OK;
}

h3_status_code h3_engine_open(const h3_engine_options *o, h3_engine **out, h3_status *status) {
    *out = NULL;
    h3_engine *e = calloc(1, sizeof *e);
    if (!e) return h3_fail(status, H3_ERR_NO_MEMORY, "out of memory");
    g_mutex_init(&e->lock);
    e->fault_rank = -1;
    e->log = o->log;
    e->log_opaque = o->log_opaque;
    e->compute = o->compute;
    /* Test hook for applications (the element's tests use it): a device
     * failure on RANK at denoising STEP, as h3_engine_inject_fault. Logged,
     * so that a stray variable is never a silent failure. */
    const char *fault = g_getenv("H3_INJECT_FAULT");
    if (fault && *fault) {
        if (sscanf(fault, "%d:%d", &e->fault_rank, &e->fault_step) == 2)
            engine_log(e, H3_LOG_WARNING, "H3_INJECT_FAULT=%s: rank %d will fail at step %d (test hook)", fault,
                       e->fault_rank, e->fault_step);
        else
            engine_log(e, H3_LOG_WARNING, "H3_INJECT_FAULT='%s' ignored: expected RANK:STEP", fault);
    }
    double t0 = now_seconds();
    const char *dir = o->model_dir && *o->model_dir ? o->model_dir : h3_default_model_dir();
    h3_status_code rc = resolve_layout(e, dir, status);
    if (rc == H3_OK && o->adapter_path && *o->adapter_path) rc = open_adapter(e, o->adapter_path, status);
    if (rc == H3_OK) rc = parse_devices(e, o, status);
    if (rc == H3_OK) rc = h3_tokenizer_load(e->tokenizer_dir, &e->tokenizer, status);
    if (rc == H3_OK) rc = e->devices[0] == -2 ? open_single(e, o, status) : open_parallel(e, status);
    h3_adapter_free(e->adapter); /* FastH3: fused into every rank's weights by now */
    e->adapter = NULL;
    if (rc == H3_OK && h3_text_encoder_hidden_size(e->text_encoder) != h3_dit_get_config(e->dit)->text_dim)
        rc = h3_fail(status, H3_ERR_FORMAT, "text encoder width %d differs from the transformer's text_dim %d",
                     h3_text_encoder_hidden_size(e->text_encoder), h3_dit_get_config(e->dit)->text_dim);
    if (rc != H3_OK) {
        h3_engine_close(e);
        return rc;
    }
    e->stats.load = now_seconds() - t0;
    engine_log(e, H3_LOG_INFO, "opened %s (%s layout) on %s in %.2f s", e->model_dir,
               e->native_layout ? "native" : "diffusers", e->stats.compute, e->stats.load);
    *out = e;
    return H3_OK;
}

void h3_engine_close(h3_engine *e) {
    if (!e) return;
    h3_status st;
    if (e->team) {
        /* Each rank frees its components on its own thread (its device). */
        h3_tp_team_run(e->team, close_rank, e, &st);
        h3_tp_team_destroy(e->team);
    } else if (e->ranks) {
        h3_tp single = H3_TP_SINGLE;
        close_rank(&single, e, &st);
    }
    free(e->ranks);
    h3_tokenizer_free(e->tokenizer);
    g_free(e->model_dir);
    g_free(e->transformer_dir);
    g_free(e->vae_dir);
    g_free(e->audio_vae_dir);
    g_free(e->text_encoder_dir);
    g_free(e->tokenizer_dir);
    g_free(e->adapter_path);
    h3_adapter_free(e->adapter);
    g_mutex_clear(&e->lock);
    free(e);
}

void h3_engine_cancel(h3_engine *e) {
    if (e) g_atomic_int_set(&e->cancel, 1);
}

void h3_engine_get_stats(h3_engine *e, h3_stats *stats) {
    g_mutex_lock(&e->lock);
    *stats = e->stats;
    g_mutex_unlock(&e->lock);
}

/* ---- validation -------------------------------------------------------------- */

static h3_status_code validate_settings(const h3_engine *e, const h3_request *r, h3_plan *p, h3_status *status) {
    h3_status_code rc = h3_request_check(r, status);
    if (rc != H3_OK) return rc;
    int forwards = H3_DEFAULT_STEPS;
    rc = validate_fasth3(e, r, &forwards, status); /* attention mode, adapter, ladder, steps */
    if (rc != H3_OK) return rc;
    memset(p, 0, sizeof *p);
    p->width = r->width;
    p->height = r->height;
    p->num_frames = h3_align_frames(r->num_frames);
    p->fps = H3_FPS;
    p->latent_frames = (p->num_frames - 5) / 17 * 5 + 2;
    p->latent_height = r->height / 16;
    p->latent_width = r->width / 16;
    p->audio_latents = (int)lround((double)p->num_frames * H3_AUDIO_LATENTS_PER_SECOND / H3_FPS);
    p->audio_channels = 2;
    p->sample_rate = h3_audio_vae_sample_rate(e->audio_vae);
    p->audio_samples = (int64_t)p->audio_latents * h3_audio_vae_hop(e->audio_vae);
    p->steps = r->steps ? r->steps : forwards;
    return H3_OK;
}

h3_status_code h3_engine_validate(h3_engine *e, const h3_request *r, h3_plan *p, h3_status *status) {
    h3_status_code rc = validate_settings(e, r, p, status);
    if (rc != H3_OK) return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    rc = h3_tokenizer_encode(e->tokenizer, r->prompt, &ids, &n, status);
    free(ids);
    if (rc != H3_OK) return rc;
    p->text_tokens = (int)n;
    const h3_dit_config *c = h3_dit_get_config(e->dit);
    int64_t rows_per_frame = (int64_t)(p->latent_height / c->patch_h) * (p->latent_width / c->patch_w);
    p->sequence_length = (int64_t)n + 2 * p->audio_latents + p->latent_frames * rows_per_frame;
    return H3_OK;
}

/* ---- generation ---------------------------------------------------------------- */

/* One rank's generation. Every rank runs the whole request on its own
 * components (tokens, noise and Euler steps are deterministic host work, so
 * every rank holds the same latents); rank 0 alone has the callbacks and
 * decodes the audio. */
typedef struct generation {
    h3_engine *e;
    engine_rank *r;
    h3_tp tp;                 /* this rank in the group (H3_TP_SINGLE with one rank) */
    const h3_callbacks *cb;   /* NULL on ranks other than 0 */
    h3_plan plan;
    int32_t *ids;
    size_t n_ids;
    h3_dit_layout *layout;
    int dit_begun;
    float *video_rows, *audio_rows, *video_velocity, *audio_velocity;
    int32_t *row_timestep_index;
    h3_sigma_grid video_grid, audio_grid;
    size_t arena_mark;
    const h3_request *request;
    double times[5];          /* start, text, denoise, audio, video done */
} generation;

static void progress(generation *g, h3_phase phase, int done, int total) {
    if (g->cb && g->cb->progress) g->cb->progress(g->cb->opaque, phase, done, total);
}

/* True when the engine or the caller asked to stop; a caller's flag is
 * copied into the engine's so the VAEs, which poll the engine flag between
 * tiles and blocks, see it too. */
static int cancel_requested(generation *g) {
    if (g->cb && g->cb->cancel_flag && *g->cb->cancel_flag) g_atomic_int_set(&g->e->cancel, 1);
    return g_atomic_int_get(&g->e->cancel);
}

static h3_status_code check_cancel(generation *g, h3_status *status) {
    if (cancel_requested(g)) return h3_fail(status, H3_ERR_CANCELLED, "generation cancelled");
    return H3_OK;
}

static h3_status_code encode_text(generation *g, const h3_request *r, h3_tensor *text_states, h3_status *status) {
    h3_engine *e = g->e;
    h3_backend *b = g->r->backend;
    progress(g, H3_PHASE_TEXT, 0, 1);
    h3_status_code rc = h3_tokenizer_encode(e->tokenizer, r->prompt, &g->ids, &g->n_ids, status);
    if (rc != H3_OK) return rc;
    if (g->n_ids == 0) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "prompt produced no tokens");
    *text_states = h3_new_2d(b, h3_backend_compute_dtype(b), (int64_t)g->n_ids,
                             h3_text_encoder_hidden_size(e->text_encoder));
    rc = h3_backend_check(b, status);
    if (rc == H3_OK && g->r->text_encoder)
        rc = h3_text_encoder_forward(g->r->text_encoder, g->ids, (int)g->n_ids, text_states, status);
    if (rc == H3_OK && e->plan.text_size < g->tp.size) {
        /* The conditioner ran on rank 0 alone (its heads do not split). */
        h3_tp_broadcast(&g->tp, b, text_states, 0);
        rc = h3_backend_check(b, status);
    }
    if (rc == H3_OK) progress(g, H3_PHASE_TEXT, 1, 1);
    return rc;
}

/* Initial noise exactly as diffusers draws it: one generator seeded with the
 * request seed, video [1, C, T, H, W] first, then audio rows [2·Na, C_a]. */
static h3_status_code draw_noise(generation *g, uint64_t seed, h3_status *status) {
    const h3_dit_config *c = h3_dit_get_config(g->e->dit);
    const h3_plan *p = &g->plan;
    size_t n_video = (size_t)c->in_channels * p->latent_frames * p->latent_height * p->latent_width;
    size_t n_audio = (size_t)2 * p->audio_latents * c->audio_in_channels;
    float *z = malloc(n_video * sizeof(float));
    g->video_rows = malloc(n_video * sizeof(float));
    g->video_velocity = malloc(n_video * sizeof(float));
    g->audio_rows = malloc(n_audio * sizeof(float));
    g->audio_velocity = malloc(n_audio * sizeof(float));
    if (!z || !g->video_rows || !g->video_velocity || !g->audio_rows || !g->audio_velocity) {
        free(z);
        return h3_fail(status, H3_ERR_NO_MEMORY, "no host memory for %zu latent values", n_video + n_audio);
    }
    h3_torch_generator gen;
    h3_torch_generator_seed(&gen, seed);
    h3_torch_randn_f32(&gen, z, n_video);
    h3_torch_randn_f32(&gen, g->audio_rows, n_audio);
    h3_status_code rc = h3_dit_patchify_video(z, c->in_channels, p->latent_frames, p->latent_height, p->latent_width,
                                              c->patch_h, c->patch_w, g->video_rows, status);
    free(z);
    return rc;
}

static h3_status_code denoise(generation *g, const h3_tensor *text_states, h3_status *status) {
    h3_engine *e = g->e;
    h3_backend *b = g->r->backend;
    h3_dit *dit = g->r->dit;
    const h3_dit_config *c = h3_dit_get_config(dit);
    const h3_plan *p = &g->plan;
    int steps = p->steps;
    h3_status_code rc = make_grids(e, g->request, steps, &g->video_grid, &g->audio_grid, status); /* FastH3 ladders */
    if (rc == H3_OK && (g->video_grid.n != steps + 1 || g->audio_grid.n != steps + 1))
        rc = h3_fail(status, H3_ERR_INVALID_ARGUMENT, "steps %d: the sigma grid collapsed to %d points", steps,
                     g->video_grid.n);
    if (rc != H3_OK) return rc;
    h3_dit_layout_params lp;
    memset(&lp, 0, sizeof lp);
    /* T2VA: every text row is a text token (tag 1); only FL2VA's Qwen
     * vision tokens would carry the video tag. */
    int32_t *tags = malloc(g->n_ids * sizeof(int32_t));
    if (!tags) return h3_fail(status, H3_ERR_NO_MEMORY, "no host memory");
    for (size_t i = 0; i < g->n_ids; i++) tags[i] = 1;
    lp.text_token_tags = tags;
    lp.num_text = (int)g->n_ids;
    lp.num_latent_frames = p->latent_frames;
    lp.latent_height = p->latent_height;
    lp.latent_width = p->latent_width;
    lp.num_audio_latents = p->audio_latents;
    lp.patch_t = c->patch_t;
    lp.patch_h = c->patch_h;
    lp.patch_w = c->patch_w;
    rc = h3_dit_layout_build(&lp, &g->layout, status);
    free(tags);
    if (rc != H3_OK) return rc;
    rc = set_attention(dit, g->request, status); /* FastH3: VSA-H3 or dense */
    if (rc == H3_OK) rc = h3_dit_begin(dit, g->layout, text_states, status);
    if (rc != H3_OK) return rc;
    g->dit_begun = 1;

    int64_t nv = g->layout->num_video_rows, na = g->layout->num_audio_rows;
    int fv = c->in_channels * c->patch_h * c->patch_w, fa = c->audio_in_channels;
    h3_tensor xv = h3_new_2d(b, H3_F32, nv, fv), xa = h3_new_2d(b, H3_F32, na, fa);
    h3_tensor vv = h3_new_2d(b, H3_F32, nv, fv), va = h3_new_2d(b, H3_F32, na, fa);
    g->row_timestep_index = malloc((size_t)g->layout->seq_len * sizeof(int32_t));
    if (!g->row_timestep_index) return h3_fail(status, H3_ERR_NO_MEMORY, "no host memory");
    if ((rc = h3_backend_check(b, status)) != H3_OK) return rc;

    progress(g, H3_PHASE_DENOISE, 0, steps);
    double t0 = now_seconds();
    for (int i = 0; i < steps; i++) {
        if ((rc = check_cancel(g, status)) != H3_OK) return rc;
        if (g->tp.rank == e->fault_rank && i == e->fault_step)
            h3_backend_set_error(b, H3_ERR_DEVICE, "injected fault on rank %d at step %d", g->tp.rank, i);
        float ts[H3_DIT_MAX_TIMESTEPS];
        int n_ts = 0;
        rc = h3_dit_layout_timesteps(g->layout, g->video_grid.timesteps[i], g->audio_grid.timesteps[i], ts, &n_ts,
                                     g->row_timestep_index, status);
        if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &xv, g->video_rows, status);
        if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &xa, g->audio_rows, status);
        if (rc == H3_OK)
            rc = h3_dit_forward(dit, &xv, &xa, ts, n_ts, g->row_timestep_index, &vv, &va, status);
        if (rc == H3_OK) rc = h3_tensor_download_f32(b, &vv, g->video_velocity, status);
        if (rc == H3_OK) rc = h3_tensor_download_f32(b, &va, g->audio_velocity, status);
        if (rc != H3_OK) return h3_status_prefix(status, "denoising step %d/%d", i + 1, steps);
        h3_sigma_grid_step(&g->video_grid, i, g->video_rows, g->video_velocity, (size_t)(nv * fv));
        h3_sigma_grid_step(&g->audio_grid, i, g->audio_rows, g->audio_velocity, (size_t)(na * fa));
        progress(g, H3_PHASE_DENOISE, i + 1, steps);
    }
    double dt = now_seconds() - t0;
    if (g->tp.rank == 0) {
        g_mutex_lock(&e->lock);
        e->stats.denoise = dt;
        e->stats.steps = steps;
        e->stats.per_step = steps ? dt / steps : 0;
        g_mutex_unlock(&e->lock);
    }
    h3_dit_end(dit);
    g->dit_begun = 0;
    return H3_OK;
}

/* Audio rows are channel-major [2·Na, 32]; the VAE takes [2, 32, Na]. */
static h3_status_code decode_audio(generation *g, h3_status *status) {
    h3_engine *e = g->e;
    int Na = g->plan.audio_latents, C = h3_dit_get_config(e->dit)->audio_in_channels;
    int64_t n = g->plan.audio_samples;
    float *lat = malloc((size_t)2 * C * Na * sizeof(float));
    float *planar = malloc((size_t)2 * n * sizeof(float));
    float *inter = malloc((size_t)2 * n * sizeof(float));
    h3_status_code rc = H3_OK;
    if (!lat || !planar || !inter) rc = h3_fail(status, H3_ERR_NO_MEMORY, "no host memory for %lld samples", (long long)n);
    if (rc == H3_OK) {
        progress(g, H3_PHASE_DECODE_AUDIO, 0, 1);
        h3_dit_unpack_audio(g->audio_rows, C, Na, lat);
        rc = h3_audio_vae_decode(g->r->audio_vae, lat, Na, planar, &e->cancel, status);
    }
    if (rc == H3_OK) {
        for (int64_t i = 0; i < n; i++) {
            inter[2 * i] = planar[i];
            inter[2 * i + 1] = planar[n + i];
        }
        progress(g, H3_PHASE_DECODE_AUDIO, 1, 1);
        if (g->cb && g->cb->audio_samples && g->cb->audio_samples(g->cb->opaque, 0, n, inter) != 0)
            rc = h3_fail(status, H3_ERR_CANCELLED, "cancelled by the audio consumer");
    }
    free(lat);
    free(planar);
    free(inter);
    return rc;
}

typedef struct video_emit {
    generation *g;
    int windows_done, windows_total;
} video_emit;

static int emit_frames(void *opaque, int first, int count, const uint8_t *rgb) {
    video_emit *v = opaque;
    generation *g = v->g;
    if (g->cb && g->cb->video_frames && g->cb->video_frames(g->cb->opaque, first, count, rgb) != 0) return 1;
    return cancel_requested(g);
}

static void video_window_progress(void *opaque, int done, int total) {
    video_emit *v = opaque;
    progress(v->g, H3_PHASE_DECODE_VIDEO, done, total);
}

static h3_status_code decode_video(generation *g, h3_status *status) {
    h3_engine *e = g->e;
    const h3_dit_config *c = h3_dit_get_config(e->dit);
    const h3_plan *p = &g->plan;
    size_t n = (size_t)c->in_channels * p->latent_frames * p->latent_height * p->latent_width;
    float *z = malloc(n * sizeof(float));
    if (!z) return h3_fail(status, H3_ERR_NO_MEMORY, "no host memory for the video latents");
    h3_status_code rc = h3_dit_unpatchify_video(g->video_rows, c->in_channels, p->latent_frames, p->latent_height,
                                                p->latent_width, c->patch_h, c->patch_w, z, status);
    if (rc != H3_OK) {
        free(z);
        return rc;
    }
    video_emit v = {g, 0, h3_video_vae_num_windows(p->latent_frames)};
    h3_video_vae *vae = g->r->video_vae;
    progress(g, H3_PHASE_DECODE_VIDEO, 0, v.windows_total);
    h3_video_vae_set_progress(vae, video_window_progress, &v);
    rc = h3_video_vae_decode(vae, z, p->latent_frames, p->latent_height, p->latent_width, emit_frames, &v, &e->cancel,
                             status);
    h3_video_vae_set_progress(vae, NULL, NULL);
    free(z);
    return rc;
}

/* Hands the denoised latents to an optional observer (tools, tests). */
static h3_status_code report_latents(generation *g, h3_status *status) {
    if (!g->cb || !g->cb->latents) return H3_OK;
    const h3_dit_config *c = h3_dit_get_config(g->e->dit);
    const h3_plan *p = &g->plan;
    size_t nv = (size_t)c->in_channels * p->latent_frames * p->latent_height * p->latent_width;
    size_t na = (size_t)2 * c->audio_in_channels * p->audio_latents;
    float *z = malloc(nv * sizeof(float)), *a = malloc(na * sizeof(float));
    h3_status_code rc = (!z || !a) ? h3_fail(status, H3_ERR_NO_MEMORY, "no host memory for the latents") : H3_OK;
    if (rc == H3_OK)
        rc = h3_dit_unpatchify_video(g->video_rows, c->in_channels, p->latent_frames, p->latent_height,
                                     p->latent_width, c->patch_h, c->patch_w, z, status);
    if (rc == H3_OK) {
        h3_dit_unpack_audio(g->audio_rows, c->audio_in_channels, p->audio_latents, a);
        g->cb->latents(g->cb->opaque, z, c->in_channels, p->latent_frames, p->latent_height, p->latent_width, a,
                       c->audio_in_channels, p->audio_latents);
    }
    free(z);
    free(a);
    return rc;
}

static void generation_clear(generation *g) {
    if (g->dit_begun) h3_dit_end(g->r->dit);
    h3_dit_layout_free(g->layout);
    h3_sigma_grid_free(&g->video_grid);
    h3_sigma_grid_free(&g->audio_grid);
    free(g->ids);
    free(g->video_rows);
    free(g->audio_rows);
    free(g->video_velocity);
    free(g->audio_velocity);
    free(g->row_timestep_index);
    h3_arena_reset(g->r->backend, g->arena_mark);
    /* A failed op leaves a sticky error in the backend; clear it so the
     * engine can serve the next request. */
    h3_status sticky;
    if (h3_backend_check(g->r->backend, &sticky) != H3_OK) h3_backend_clear_error(g->r->backend);
}

/* The whole request on one rank; with a team, on every rank at once. */
static h3_status_code generate_rank(const h3_tp *tp, void *user, h3_status *status) {
    generation *g = (generation *)user + tp->rank;
    const h3_request *r = g->request;
    g->tp = *tp;
    g->arena_mark = h3_arena_mark(g->r->backend);
    g->times[0] = now_seconds();
    h3_tensor text_states;
    h3_status_code rc = encode_text(g, r, &text_states, status);
    g->times[1] = now_seconds();
    if (rc == H3_OK) rc = check_cancel(g, status);
    if (rc == H3_OK) rc = draw_noise(g, r->seed, status);
    if (rc == H3_OK) rc = denoise(g, &text_states, status);
    g->times[2] = now_seconds();
    if (rc == H3_OK) rc = report_latents(g, status);
    if (rc == H3_OK) rc = check_cancel(g, status);
    if (rc == H3_OK && tp->rank == 0) rc = decode_audio(g, status); /* the audio VAE lives on rank 0 */
    g->times[3] = now_seconds();
    if (rc == H3_OK) rc = check_cancel(g, status);
    if (rc == H3_OK) rc = decode_video(g, status);
    g->times[4] = now_seconds();
    generation_clear(g);
    return rc;
}

h3_status_code h3_engine_generate(h3_engine *e, const h3_request *r, const h3_callbacks *cb, h3_status *status) {
    g_atomic_int_set(&e->cancel, 0);
    h3_plan plan;
    h3_status_code rc = h3_engine_validate(e, r, &plan, status);
    if (rc != H3_OK) return rc;
    generation *gens = calloc((size_t)e->n_ranks, sizeof *gens);
    if (!gens) return h3_fail(status, H3_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < e->n_ranks; i++) {
        gens[i].e = e;
        gens[i].r = &e->ranks[i];
        gens[i].cb = i == 0 ? cb : NULL;
        gens[i].plan = plan;
        gens[i].request = r;
    }
    if (e->team) {
        rc = h3_tp_team_run(e->team, generate_rank, gens, status);
    } else {
        h3_tp single = H3_TP_SINGLE;
        rc = generate_rank(&single, gens, status);
    }
    const double *t = gens[0].times;
    g_mutex_lock(&e->lock);
    e->stats.text = t[1] - t[0];
    e->stats.decode_audio = t[3] - t[2];
    e->stats.decode_video = t[4] - t[3];
    e->stats.total = t[4] - t[0];
    g_mutex_unlock(&e->lock);
    if (rc == H3_OK) progress(&gens[0], H3_PHASE_DONE, 1, 1);
    free(gens);
    return rc;
}

void h3_engine_inject_fault(h3_engine *e, int rank, int step) {
    e->fault_rank = rank;
    e->fault_step = step;
}
