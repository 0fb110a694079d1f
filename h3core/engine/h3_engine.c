/* h3_engine.c - the engine's lifetime: the model directory resolved to its
 * components, the backends created (one, or one per tensor-parallel rank on
 * a team of rank threads), every rank's components loaded (from the files,
 * or with load-format dummy from each component's dummy checkpoint, drawn on
 * the rank's device), and all of it freed again. The requests are
 * h3_generate.c's; the FastH3 rules h3_fasth3.c's; the model directory
 * h3_model_dir.c's. The memory plan's check at open (h3_memory_check_open)
 * runs between h3_engine_begin and h3_engine_load (h3_engine_api.c), so
 * this file calls no memory plan, which opens engines of its own. */
#include "engine/h3_engine_impl.h"

#include "backend/h3_weight_stream.h"

#include <errno.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/h3_engine.h"

/* ---- load format -------------------------------------------------------------- */

static const char *dummy_adapter_name(h3_dummy_adapter a) {
    return a == H3_DUMMY_ADAPTER_VSA ? "vsa" : a == H3_DUMMY_ADAPTER_DENSE ? "dense" : "none";
}

/* load-format, dummy-adapter and adapter-location together, after the
 * schema's rules of each (h3_engine_options_check). Messages name the
 * properties and options the user set, not the C fields. */
static h3_status_code check_load_options(const h3_engine_options *o, h3_status *status) {
    h3_status_code rc = h3_engine_options_check(o, status);
    if (rc != H3_OK) return rc;
    int has_file = o->adapter_path && *o->adapter_path;
    if (o->load_format != H3_LOAD_DUMMY && o->dummy_adapter != H3_DUMMY_ADAPTER_NONE)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "dummy-adapter=%s needs load-format=dummy; with real weights an adapter is a file "
                       "(adapter-location)", dummy_adapter_name(o->dummy_adapter));
    h3_status_code prc = h3_engine_check_precision(o, status);
    if (prc != H3_OK) return prc;
    if (o->load_format == H3_LOAD_DUMMY && has_file)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "adapter '%s' with load-format=dummy: a FastH3 adapter's deltas are fused into the base "
                       "weights on the host, and dummy weights have no host values; use dummy-adapter=dense or vsa",
                       o->adapter_path);
    return H3_OK;
}

/* load-format dummy: every component's checkpoint of dummy tensors (names,
 * shapes, no bytes) from its config, which the loaders then read as they
 * read files; with a dummy adapter, the FastH3 rules of that kind. */
static h3_status_code make_dummy(h3_engine *e, const h3_engine_options *o, h3_status *status) {
    uint64_t seed = o->dummy_seed;
    int vsa = o->dummy_adapter == H3_DUMMY_ADAPTER_VSA;
    h3_status_code rc = h3_text_encoder_dummy_checkpoint(e->text_encoder_dir, e->text_layer, seed,
                                                         &e->dummy.text_encoder, status);
    if (rc == H3_OK) rc = h3_dit_dummy_checkpoint(e->transformer_dir, seed, vsa, &e->dummy.transformer, status);
    h3_video_vae_options vae_options = {.encoder = 1}; /* FL2VA's keyframes */
    if (rc == H3_OK)
        rc = h3_video_vae_dummy_checkpoint_with(e->vae_dir, seed, &vae_options, &e->dummy.video_vae, status);
    if (rc == H3_OK) rc = h3_audio_vae_dummy_checkpoint(e->audio_vae_dir, seed, &e->dummy.audio_vae, status);
    if (rc != H3_OK) return rc;
    e->stats.random_weights = 1;
    if (o->dummy_adapter != H3_DUMMY_ADAPTER_NONE) {
        /* A FastH3 student of that kind: its 4 forwards over the release
         * ladder (B: the released dmd_denoising_steps), its attention mode. */
        e->has_adapter = 1;
        e->adapter_vsa = vsa;
        e->adapter_path = g_strdup_printf("(dummy %s adapter)", vsa ? "VSA" : "dense");
        h3_engine_log(e, H3_LOG_INFO,
                      "dummy FastH3 %s adapter: %d forwards over the release ladder, backend=%s%s; it adds no delta "
                      "(random weights plus a random delta are random weights)",
                      vsa ? "VSA" : "dense", H3_FASTH3_LADDER_POINTS - 1, vsa ? "vsa" : "fa",
                      vsa ? "; its to_gate_compress gates are random, drawn on the device" : "");
    }
    return H3_OK;
}

static void free_dummy(h3_engine *e) {
    h3_checkpoint_close(e->dummy.text_encoder);
    h3_checkpoint_close(e->dummy.transformer);
    h3_checkpoint_close(e->dummy.video_vae);
    h3_checkpoint_close(e->dummy.audio_vae);
    memset(&e->dummy, 0, sizeof e->dummy);
}

/* The Qwen3-VL image processor's config (FL2VA): processor/ beside the
 * components, else the copy in text_encoder/. None is no error (keyframe
 * requests are refused then); a broken one is. */
static h3_status_code load_processor(h3_engine *e, h3_status *status) {
    const char *where[] = {"processor", "text_encoder"};
    for (size_t i = 0; i < G_N_ELEMENTS(where); i++) {
        char *path = g_build_filename(e->model_dir, where[i], "preprocessor_config.json", NULL);
        int found = g_file_test(path, G_FILE_TEST_EXISTS);
        h3_status_code rc = found ? h3_image_processor_config_load(path, &e->processor, status) : H3_OK;
        g_free(path);
        if (rc != H3_OK) return rc;
        if (found) {
            e->has_processor = 1;
            return H3_OK;
        }
    }
    return H3_OK;
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
    if (e->measure) return h3_memory_backend_create(e, 0, &e->backend, status);
    int need_cuda = o->compute == H3_COMPUTE_CUDA || o->compute == H3_COMPUTE_CUDA_F32;
    if (need_cuda || o->compute == H3_COMPUTE_AUTO) {
#ifdef H3_HAVE_CUDA
        int device = 0;
        h3_status cs = {0};
        if (create_cuda(o->compute, device, &e->backend, &cs) == H3_OK) {
            h3_memory_limit_backend(e, e->backend, device);
            snprintf(e->stats.compute, sizeof e->stats.compute, "cuda:%d%s", device,
                     o->compute == H3_COMPUTE_CUDA_F32 ? " (f32)" : "");
            return H3_OK;
        }
        if (need_cuda) {
            *status = cs;
            return cs.code;
        }
        snprintf(e->stats.fallback, sizeof e->stats.fallback, "compute=auto fell back to the CPU: %.200s", cs.message);
        h3_engine_log(e, H3_LOG_WARNING, "%s", e->stats.fallback);
#else
        if (need_cuda)
            return h3_fail(status, H3_ERR_UNSUPPORTED, "compute=cuda: this build of h3core has no CUDA backend "
                                                       "(rebuild with -Dcuda=enabled)");
        snprintf(e->stats.fallback, sizeof e->stats.fallback,
                 "compute=auto uses the CPU: this build has no CUDA backend");
        h3_engine_log(e, H3_LOG_INFO, "%s", e->stats.fallback);
#endif
    }
    snprintf(e->stats.compute, sizeof e->stats.compute, "cpu");
    h3_status_code rc = h3_backend_cpu_create(o->cpu_threads, &e->backend, status);
    if (rc == H3_OK) h3_memory_limit_backend(e, e->backend, -1); /* only under h3_engine_cap_cpu_memory */
    return rc;
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

/* The weights the backend took since *at (then *at moves on). */
static uint64_t took(h3_backend *b, uint64_t *at) {
    h3_backend_memory m;
    h3_backend_memory_get(b, &m);
    uint64_t d = m.weights > *at ? m.weights - *at : 0;
    *at = m.weights;
    return d;
}

/* Loads a rank's components: its text conditioner share (when the plan puts
 * one on it), its transformer shard, the video VAE (tiles split by rank), and
 * on rank 0 the audio VAE; what each took is kept for the memory plan. */

h3_status_code h3_engine_text_encoder_load(h3_engine *e, const h3_tp *tp, h3_status *status) {
    h3_engine_rank *r = &e->ranks[tp->rank];
    h3_tp text_tp = h3_tp_text(&e->plan, tp);
    if (text_tp.size == 0 || h3_text_encoder_has_weights(r->text_encoder)) return H3_OK;
    /* load-format dummy: the open's dummy checkpoint, or (loading again
     * after a release) a new one of the same names, seed and values */
    h3_checkpoint *dummy = e->dummy.text_encoder, *own = NULL;
    h3_status_code rc = H3_OK;
    if (e->load_format == H3_LOAD_DUMMY && !dummy) {
        rc = h3_text_encoder_dummy_checkpoint(e->text_encoder_dir, e->text_layer, e->dummy_seed, &own, status);
        dummy = own;
    }
    if (rc == H3_OK && r->text_encoder) /* its weights freed by an earlier request */
        rc = h3_text_encoder_reload_weights(r->text_encoder, e->text_encoder_dir, dummy, status);
    else if (rc == H3_OK && e->stream) /* memory=stream: its layers on the host (h3_weight_stream.h) */
        rc = h3_text_encoder_load_stream(r->backend, e->text_encoder_dir, dummy, e->text_layer, &text_tp,
                                         &r->text_encoder, status);
    else if (rc == H3_OK)
        rc = h3_text_encoder_load_from(r->backend, e->text_encoder_dir, dummy, e->text_layer, &text_tp,
                                       &r->text_encoder, status);
    h3_checkpoint_close(own);
    if (tp->rank == 0) e->text_encoder = r->text_encoder;
    return rc;
}

void h3_engine_text_encoder_free(h3_engine *e, const h3_tp *tp) {
    h3_text_encoder_drop_weights(e->ranks[tp->rank].text_encoder);
}

/* The video VAE with its encoder (FL2VA keyframes) when the checkpoint has
 * one: a checkpoint without the encoder's tensors loads the decoder alone,
 * said in the log, and keyframe requests are then refused by name. */
static h3_status_code load_video_vae(h3_engine *e, const h3_tp *tp, h3_engine_rank *r, h3_status *status) {
    h3_video_vae_options with = {.encoder = 1};
    h3_status_code rc = h3_video_vae_load_with(r->backend, e->vae_dir, e->dummy.video_vae, &with, &r->video_vae,
                                               status);
    if (rc != H3_ERR_NOT_FOUND) return rc;
    h3_status why = *status;
    h3_video_vae_options without = {.encoder = 0};
    rc = h3_video_vae_load_with(r->backend, e->vae_dir, e->dummy.video_vae, &without, &r->video_vae, status);
    if (rc == H3_OK && tp->rank == 0)
        h3_engine_log(e, H3_LOG_INFO, "video VAE without its encoder (%s): requests with keyframes are refused",
                      why.message);
    return rc;
}

static h3_status_code load_transformer(const h3_tp *tp, h3_engine *e, h3_engine_rank *r, h3_status *status) {
    h3_status_code rc = e->stream ? h3_dit_load_stream(r->backend, e->transformer_dir, e->dummy.transformer, tp,
                                                       e->adapter, &r->dit, status)
                                  : h3_dit_load_from(r->backend, e->transformer_dir, e->dummy.transformer, tp,
                                                     e->adapter, &r->dit, status);
    /* Every weight is counted as it loads (h3_weight_load); one that the
     * adapter was fused into may owe its NaN to the adapter: say so. */
    if (rc == H3_ERR_NONFINITE && e->adapter)
        h3_status_prefix(status, "the transformer with the FastH3 adapter %s fused into it", e->adapter_path);
    return rc;
}

h3_status_code h3_engine_transformer_ref_load(h3_engine *e, const h3_tp *tp, h3_status *status) {
    h3_engine_rank *r = &e->ranks[tp->rank];
    if (r->dit_ref) return H3_OK; /* the job's preparation refused a model without the partition */
    h3_checkpoint *dummy = NULL;
    h3_status_code rc = H3_OK;
    if (e->load_format == H3_LOAD_DUMMY)
        rc = h3_dit_dummy_checkpoint(e->transformer_ref_dir, e->dummy_seed + 1, 0, &dummy, status);
    if (rc == H3_OK)
        rc = e->stream ? h3_dit_load_stream(r->backend, e->transformer_ref_dir, dummy, tp, NULL, &r->dit_ref, status)
                       : h3_dit_load_from(r->backend, e->transformer_ref_dir, dummy, tp, NULL, &r->dit_ref, status);
    h3_checkpoint_close(dummy);
    if (rc != H3_OK) return h3_status_prefix(status, "loading the Ref2VA transformer '%s'", e->transformer_ref_dir);
    if (tp->rank == 0) h3_engine_log(e, H3_LOG_INFO, "Ref2VA transformer loaded from %s", e->transformer_ref_dir);
    return H3_OK;
}

h3_status_code h3_engine_audio_encoder_load(h3_engine *e, const h3_tp *tp, h3_status *status) {
    h3_engine_rank *r = &e->ranks[tp->rank];
    if (r->audio_encoder) return H3_OK;
    if (e->load_format == H3_LOAD_DUMMY)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "audio references with load-format=dummy: the dummy audio VAE has no encoder yet");
    h3_status_code rc = h3_audio_vae_encoder_load(r->backend, e->audio_vae_dir, NULL, &r->audio_encoder, status);
    if (rc != H3_OK) return h3_status_prefix(status, "loading the audio VAE's encoder for the audio references");
    return H3_OK;
}

static h3_status_code load_rank(const h3_tp *tp, h3_engine *e, h3_status *status) {
    h3_engine_rank *r = &e->ranks[tp->rank];
    /* e->dummy.*: NULL (the files) unless load-format dummy */
    uint64_t at = 0;
    took(r->backend, &at);
    /* precision=fp8: the loaders' LINEAR weights become E4M3 on this backend
     * (it refuses, naming why, a GPU without FP8 tensor cores) */
    h3_status_code rc = e->precision == H3_PRECISION_FP8 ? h3_backend_set_linear_fp8(r->backend, 1, status) : H3_OK;
    if (rc != H3_OK) return rc;
    /* memory=stream: the transformer first, so its blocks (copied every
     * forward) take the pin budget before the text encoder's layers
     * (copied once a request) do */
    if (e->stream) {
        rc = load_transformer(tp, e, r, status);
        r->weight_bytes[H3_PART_TRANSFORMER] = took(r->backend, &at);
    }
    if (rc == H3_OK) rc = h3_engine_text_encoder_load(e, tp, status);
    r->weight_bytes[H3_PART_TEXT] = took(r->backend, &at);
    if (rc == H3_OK && !e->stream) {
        rc = load_transformer(tp, e, r, status);
        r->weight_bytes[H3_PART_TRANSFORMER] = took(r->backend, &at);
    }
    if (rc == H3_OK) rc = load_video_vae(e, tp, r, status);
    if (rc == H3_OK) h3_video_vae_set_tp(r->video_vae, tp);
    r->weight_bytes[H3_PART_VIDEO_VAE] = took(r->backend, &at);
    if (rc == H3_OK && tp->rank == 0)
        rc = h3_audio_vae_load_from(r->backend, e->audio_vae_dir, e->dummy.audio_vae, &r->audio_vae, status);
    r->weight_bytes[H3_PART_AUDIO_VAE] = took(r->backend, &at);
    return rc;
}

static h3_status_code close_rank(const h3_tp *tp, void *user, h3_status *status) {
    h3_engine *e = user;
    h3_engine_rank *r = &e->ranks[tp->rank];
    h3_audio_vae_free(r->audio_vae);
    h3_video_vae_free(r->video_vae);
    h3_dit_free(r->dit);
    h3_dit_free(r->dit_ref);
    h3_audio_vae_encoder_free(r->audio_encoder);
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
    h3_engine_rank *r = &e->ranks[tp->rank];
    int device = e->devices[tp->rank];
    h3_status bs;
    h3_status_clear(&bs);
    h3_status_code rc;
    if (e->measure) { /* measuring ranks: nothing to probe or agree on */
        rc = h3_memory_backend_create(e, tp->rank, &r->backend, status);
        return rc == H3_OK ? load_rank(tp, e, status) : rc;
    }
    if (device < 0) {
        int threads = e->cpu_threads > 0 ? (e->cpu_threads + e->n_ranks - 1) / e->n_ranks : 0;
        rc = h3_backend_cpu_create(threads, &r->backend, &bs);
        if (rc == H3_OK) h3_memory_limit_backend(e, r->backend, -1); /* only under h3_engine_cap_cpu_memory */
    } else {
#ifdef H3_HAVE_CUDA
        rc = create_cuda(e->compute, device, &r->backend, &bs);
        if (rc == H3_OK) h3_memory_limit_backend(e, r->backend, device);
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
    /* the VAEs' bytes: their files, or their dummy checkpoints */
    uint64_t vae_bytes = e->dummy.video_vae ? h3_checkpoint_nbytes(e->dummy.video_vae) : weight_file_bytes(e->vae_dir, 2);
    uint64_t audio_bytes =
        e->dummy.audio_vae ? h3_checkpoint_nbytes(e->dummy.audio_vae) : weight_file_bytes(e->audio_vae_dir, 1);
    if (rc == H3_OK)
        rc = h3_tp_plan_make(n, &dc, &tc, e->text_layer, cpu ? 4 : 2, vae_bytes, audio_bytes, &e->plan, status);
    if (rc != H3_OK) return rc;
    e->ranks = calloc((size_t)n, sizeof *e->ranks);
    if (!e->ranks) return h3_fail(status, H3_ERR_NO_MEMORY, "out of memory");
    h3_comm_group *group = NULL;
    /* One GPU without NCCL still runs the rank machinery: a one-rank group
     * moves nothing, so the CPU communicator serves it. */
    int nccl = !cpu && (h3_comm_have_nccl() || n > 1);
    rc = e->measure ? h3_comm_group_create_measure(n, &group, status)
         : nccl     ? h3_comm_group_create_nccl(n, e->devices, &group, status)
                    : h3_comm_group_create_cpu(n, &group, status);
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
    if (e->plan.note[0]) h3_engine_log(e, H3_LOG_WARNING, "tensor parallelism: %s", e->plan.note);
    if (e->decision.fallback[0]) h3_engine_log(e, H3_LOG_WARNING, "tensor parallelism: %s", e->decision.fallback);
    return H3_OK;
}

/* A tokenizer file h3core cannot use (an unknown model type or normalizer
 * is UNSUPPORTED to the tokenizer) is a problem of the model's files, not
 * of a setting: FORMAT, so the caller is told to fix the file it names. */
static h3_status_code load_tokenizer(h3_engine *e, h3_status *status) {
    h3_status_code rc = h3_tokenizer_load(e->tokenizer_dir, &e->tokenizer, status);
    if (rc != H3_ERR_UNSUPPORTED && rc != H3_ERR_INVALID_ARGUMENT) return rc;
    if (status) status->code = H3_ERR_FORMAT;
    return H3_ERR_FORMAT;
}

/* stats.precision and the log: which linears rank 0 holds in FP8, and any
 * kept in the compute type (in- or out-features not a multiple of 16), so
 * a partial fp8 is never silent. */
static void describe_precision(h3_engine *e) {
    if (e->precision != H3_PRECISION_FP8) { /* the backend's own: bf16 on CUDA, f32 on the CPU and cuda-f32 */
        snprintf(e->stats.precision, sizeof e->stats.precision, "%s",
                 h3_dtype_name(h3_backend_compute_dtype(e->backend)));
        return;
    }
    int quantised = 0, kept = 0;
    h3_backend_fp8_counts(e->backend, &quantised, &kept);
    const char *dt = h3_dtype_name(h3_backend_compute_dtype(e->backend));
    if (kept)
        snprintf(e->stats.precision, sizeof e->stats.precision, "fp8 (e4m3: %d linears; %d kept in %s)", quantised,
                 kept, dt);
    else
        snprintf(e->stats.precision, sizeof e->stats.precision, "fp8 (e4m3: %d linears)", quantised);
    h3_engine_log(e, kept ? H3_LOG_WARNING : H3_LOG_INFO, "precision %s%s", e->stats.precision,
                  kept ? ": the FP8 GEMMs take in- and out-features in multiples of 16, the others stay as they are"
                       : "");
}

static void discard_log(void *opaque, h3_log_level level, const char *message) {
    (void)opaque, (void)level, (void)message;
}

/* stats.memory and the host bytes of memory=stream, said in the log. */
static void memory_stats(h3_engine *e) {
    g_strlcpy(e->stats.memory, e->stream ? "stream" : "resident", sizeof e->stats.memory);
    uint64_t pinned = 0, pageable = 0;
    for (int r = 0; r < e->n_ranks; r++) {
        h3_weight_host_bytes h;
        h3_weight_host_bytes_get(e->ranks[r].backend, &h);
        pinned += h.pinned;
        pageable += h.pageable;
    }
    e->stats.host_pinned_bytes = pinned;
    e->stats.host_pageable_bytes = pageable;
    if (e->stream)
        h3_engine_log(e, H3_LOG_INFO, "memory=stream (%s): %.2f GiB of weights on the host, %.2f GiB pinned and "
                      "%.2f GiB pageable (pin budget %.2f GiB)", e->stats.memory_reason,
                      (double)(pinned + pageable) / 1073741824.0, (double)pinned / 1073741824.0,
                      (double)pageable / 1073741824.0, (double)h3_weight_pin_budget() / 1073741824.0);
    else if (e->memory == H3_MEMORY_AUTO)
        h3_engine_log(e, H3_LOG_INFO, "memory=resident (%s)", e->stats.memory_reason);
}

h3_status_code h3_engine_begin(const h3_engine_options *o, const h3_memory_target *measure, h3_engine **out,
                               h3_status *status) {
    *out = NULL;
    h3_engine *e = calloc(1, sizeof *e);
    if (!e) return h3_fail(status, H3_ERR_NO_MEMORY, "out of memory");
    g_mutex_init(&e->lock);
    e->measure = measure;
    e->fault_rank = -1;
    e->log = measure ? discard_log : o->log; /* a measuring engine repeats what the real one says */
    e->log_opaque = o->log_opaque;
    e->compute = o->compute;
    e->max_gpu_memory = o->max_gpu_memory;
    e->precision = o->precision;
    e->memory = o->memory;
    /* a measuring engine runs the mode it is asked for (the plan asks it
     * for each); a real one's is decided by h3_memory_check_open */
    e->stream = measure && o->memory == H3_MEMORY_STREAM;
    /* the twin and the plan decide pinned or pageable as the engine will */
    h3_weight_set_pin_budget(o->max_pinned_memory);
    /* Test hook for applications (the element's tests use it): a device
     * failure on RANK at denoising STEP, as h3_engine_inject_fault. Logged,
     * so that a stray variable is never a silent failure. */
    const char *fault = measure ? NULL : g_getenv("H3_INJECT_FAULT");
    if (fault && *fault) {
        int n = sscanf(fault, "%d:%d:%ld", &e->fault_rank, &e->fault_step, &e->fault_ops);
        if (n == 2 || n == 3)
            h3_engine_log(e, H3_LOG_WARNING, "H3_INJECT_FAULT=%s: rank %d will fail at step %d, %ld ops into its "
                          "forward (test hook)", fault, e->fault_rank, e->fault_step, n == 3 ? e->fault_ops : 0L);
        else
            h3_engine_log(e, H3_LOG_WARNING, "H3_INJECT_FAULT='%s' ignored: expected RANK:STEP or RANK:STEP:OPS",
                          fault);
        if (n != 2 && n != 3) e->fault_rank = -1;
        if (n != 3) e->fault_ops = 0;
    }
    e->open_started = h3_engine_now();
    const char *dir = o->model_dir && *o->model_dir ? o->model_dir : h3_default_model_dir();
    e->load_format = o->load_format;
    e->dummy_seed = o->dummy_seed;
    h3_status_code rc = check_load_options(o, status);
    if (rc == H3_OK) rc = h3_engine_resolve_layout(e, dir, status);
    if (rc == H3_OK && o->adapter_path && *o->adapter_path) rc = h3_fasth3_open_adapter(e, o->adapter_path, status);
    if (rc == H3_OK && o->load_format == H3_LOAD_DUMMY) rc = make_dummy(e, o, status);
    if (rc == H3_OK) rc = parse_devices(e, o, status);
    if (rc != H3_OK) {
        h3_engine_close(e);
        return rc;
    }
    *out = e;
    return H3_OK;
}

h3_status_code h3_engine_load(h3_engine *e, const h3_engine_options *o, h3_status *status) {
    h3_status_code rc = load_tokenizer(e, status);
    if (rc == H3_OK) rc = load_processor(e, status);
    if (rc == H3_OK) rc = e->devices[0] == -2 ? open_single(e, o, status) : open_parallel(e, status);
    h3_adapter_free(e->adapter); /* FastH3: fused into every rank's weights by now */
    e->adapter = NULL;
    free_dummy(e); /* drawn on every rank's device by now */
    if (rc == H3_OK) e->text_hidden = h3_text_encoder_hidden_size(e->text_encoder);
    if (rc == H3_OK) e->text_positions = h3_text_encoder_get_config(e->text_encoder)->max_positions;
    if (rc == H3_OK && e->text_hidden != h3_dit_get_config(e->dit)->text_dim)
        rc = h3_fail(status, H3_ERR_FORMAT, "text encoder width %d differs from the transformer's text_dim %d",
                     e->text_hidden, h3_dit_get_config(e->dit)->text_dim);
    if (rc != H3_OK) return rc;
    e->stats.load = h3_engine_now() - e->open_started;
    describe_precision(e);
    memory_stats(e);
    h3_engine_log(e, H3_LOG_INFO, "opened %s (%s layout) on %s in %.2f s", e->model_dir,
               e->native_layout ? "native" : "diffusers", e->stats.compute, e->stats.load);
    if (e->load_format == H3_LOAD_DUMMY)
        h3_engine_log(e, H3_LOG_INFO, "weights are random (load-format dummy, seed %llu): the output is noise",
                      (unsigned long long)e->dummy_seed);
    return H3_OK;
}

h3_status_code h3_engine_open_measuring(const h3_engine_options *o, const h3_memory_target *target,
                                        h3_engine **out, h3_status *status) {
    h3_engine *e = NULL;
    h3_status_code rc = h3_engine_begin(o, target, &e, status);
    if (rc == H3_OK) rc = h3_engine_load(e, o, status);
    if (rc != H3_OK) {
        h3_engine_close(e);
        e = NULL;
    }
    *out = e;
    return rc;
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
    h3_engine_close(e->shadow);
    h3_tokenizer_free(e->tokenizer);
    g_free(e->model_dir);
    g_free(e->transformer_dir);
    g_free(e->transformer_ref_dir);
    g_free(e->vae_dir);
    g_free(e->audio_vae_dir);
    g_free(e->text_encoder_dir);
    g_free(e->tokenizer_dir);
    g_free(e->adapter_path);
    h3_adapter_free(e->adapter);
    free_dummy(e);
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

void h3_engine_force_text_release(h3_engine *e, int on) { e->force_text_release = on != 0; }

void h3_engine_inject_fault(h3_engine *e, int rank, int step) { h3_engine_inject_fault_mid_forward(e, rank, step, 0); }

void h3_engine_inject_fault_mid_forward(h3_engine *e, int rank, int step, long ops) {
    e->fault_rank = rank;
    e->fault_step = step;
    e->fault_ops = ops > 0 ? ops : 0;
}
