/* h3_memory_plan.c - what a request needs on each device, before anything
 * loads, and the refusals that follow from it (h3.h: h3_memory_plan_make).
 *
 * The plan is not a formula. It opens an engine exactly as h3_engine_open
 * would (same directory, adapter, devices, tensor-parallel split, loaders)
 * but on measuring backends (backend/measure/), one per rank, each standing
 * for the backend that rank would have: the CPU's float32, or CUDA's bf16
 * with its fp32 islands and f16 video VAE, for that GPU's compute
 * capability. The loaders read configs and checkpoint headers and skip
 * every weight byte (h3_backend_holds_data); the request then runs whole
 * (text encoder, every denoising forward, both decoders) with nothing
 * computed (the job of h3_generate.c, prepared once). Every persistent allocation, arena chunk and scratch buffer is
 * tallied as the real backend would make it (h3_backend_memory), so the
 * numbers are the real code path's, per rank:
 *   weights    what loading each component took (its shard on that rank)
 *   arena      the peak of activations: arena chunks plus the persistent
 *              allocations a request makes (text states, VSA tables)
 *   workspace  the peak of the backend's own buffers (CUDA: the 64 MiB
 *              cuBLASLt workspace and the op scratch, for the kernels this
 *              GPU picks), plus on CUDA what no tally sees (below)
 * The tally counts bytes as asked for; the driver rounds each cudaMalloc up
 * (to 2 MiB pages for large ones), which the reserves below absorb.
 *
 * A CUDA engine keeps such a measuring twin (e->shadow): h3_engine_open
 * checks the weights and workspace of each GPU against its free memory
 * before loading anything, and h3_engine_prepare runs each request's job on
 * the twin (h3_job_run, the engine's own run) and checks its arena and
 * scratch against what the GPU has left. Free memory comes from NVML,
 * without a CUDA context. This file opens engines (h3_engine.c) and runs
 * jobs (h3_generate.c); neither calls it. */
#include "engine/h3_engine_impl.h"

#include "backend/h3_weight_stream.h"

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/h3_engine.h"
#include "engine/h3_gpus.h"
#ifdef H3_HAVE_CUDA
#include "backend/cuda/h3_backend_cuda.h" /* h3_cuda_kernels_for: compute=auto's GPUs */
#endif

#define GIB (1024.0 * 1024.0 * 1024.0)

/* A CUDA plan made where NVML cannot say which GPU it is for: the H200's. */
#define DEFAULT_SM 90

/* ---- what the engine would run on ------------------------------------------------- */

static uint64_t fake_free; /* h3_engine_fake_gpu_free (tests): 0, or what every GPU reports free */

void h3_engine_fake_gpu_free(uint64_t bytes) { fake_free = bytes; }

static int nvml_gpu(int device, const h3_gpu_info *gpus, int n) {
    int i = h3_gpus_nvml_index(device);
    return i >= 0 && i < n ? i : -1;
}

/* NVML's list, or the test hook's: one GPU per ordinal, all with that much free. */
static int list_gpus(h3_gpu_info *gpus, int max, char *why, size_t why_size) {
    uint64_t fake = fake_free;
    if (!fake) return h3_gpus_list(gpus, max, why, why_size);
    for (int i = 0; i < max; i++) {
        memset(&gpus[i], 0, sizeof gpus[i]);
        snprintf(gpus[i].name, sizeof gpus[i].name, "test GPU");
        gpus[i].total_bytes = gpus[i].free_bytes = fake;
        gpus[i].cc_major = 9;
    }
    return max;
}

/* The ranks h3_engine_open would make from these options: h3_devices_parse,
 * and for "auto" the one backend create_backend picks (compute=auto: CUDA
 * when this build has it and NVML shows a GPU of sm_80 or newer). */
static h3_status_code make_target(const h3_engine_options *o, h3_memory_target *t, h3_status *status) {
    memset(t, 0, sizeof *t);
    h3_device_list list;
    h3_status_code rc = h3_devices_parse(o->devices, o->compute, &list, status);
    if (rc != H3_OK) return rc;
    h3_gpu_info gpus[H3_MAX_DEVICES];
    char why[256];
    int host_only = list.cpu || (list.count == 0 && o->compute == H3_COMPUTE_CPU);
    int n_gpus = host_only ? 0 : list_gpus(gpus, H3_MAX_DEVICES, why, sizeof why);
    t->exact = o->compute == H3_COMPUTE_CUDA_F32;
    if (list.count == 0) {
        int cuda = o->compute == H3_COMPUTE_CUDA || o->compute == H3_COMPUTE_CUDA_F32;
#ifdef H3_HAVE_CUDA
        if (o->compute == H3_COMPUTE_AUTO)
            for (int i = 0; i < n_gpus && i < H3_MAX_DEVICES; i++) {
                char images[160];
                const char *attention, *vsa;
                cuda |= h3_cuda_kernels_for(gpus[i].cc_major * 10 + gpus[i].cc_minor, images, sizeof images,
                                            &attention, &vsa);
            }
#endif
        t->n_ranks = 1;
        t->device[0] = cuda ? 0 : -1;
    } else {
        t->n_ranks = list.count;
        for (int r = 0; r < list.count; r++) t->device[r] = list.cpu ? -1 : list.ordinals[r];
        if (!list.cpu && list.count > 1 && !h3_comm_have_nccl()) { /* the open would stop here: say why */
            h3_comm_group *none = NULL;
            return h3_comm_group_create_nccl(list.count, list.ordinals, &none, status);
        }
    }
    for (int r = 0; r < t->n_ranks; r++) {
        int g = t->device[r] >= 0 ? nvml_gpu(t->device[r], gpus, n_gpus) : -1;
        t->sm[r] = g >= 0 && gpus[g].cc_major ? gpus[g].cc_major * 10 + gpus[g].cc_minor : DEFAULT_SM;
    }
    return H3_OK;
}

/* ---- what a rank holds ---------------------------------------------------------------- */

static int rank_device(const h3_engine *e, int rank) {
    if (e->measure) return e->measure->device[rank];
    if (e->devices[0] != -2) return e->devices[rank];
    return strcmp(h3_backend_name(e->ranks[0].backend), "cuda") == 0 ? 0 : -1;
}

static void measured(const h3_engine *e, int rank, h3_memory_device *d) {
    const h3_engine_rank *r = &e->ranks[rank];
    h3_backend_memory m;
    h3_backend_memory_get(r->backend, &m);
    memset(d, 0, sizeof *d);
    d->device = rank_device(e, rank);
    d->text_encoder = r->weight_bytes[H3_PART_TEXT];
    d->transformer = r->weight_bytes[H3_PART_TRANSFORMER];
    d->video_vae = r->weight_bytes[H3_PART_VIDEO_VAE];
    d->audio_vae = r->weight_bytes[H3_PART_AUDIO_VAE];
    d->arena = e->generated ? m.peak_activations : m.arena;
    d->workspace = e->generated ? m.peak_scratch : m.scratch;
    d->total = d->text_encoder + d->transformer + d->video_vae + d->audio_vae + d->arena + d->workspace;
    h3_weight_host_bytes host;
    h3_weight_host_bytes_get(r->backend, &host);
    d->host_pinned = host.pinned;
    d->host_pageable = host.pageable;
    /* The text encoder freed after the text stage: its weights and the
     * denoising's arena are never there together, so the sum overstates;
     * the tally's own peak is what the device holds at its fullest. */
    if (e->generated && e->text_released_last) d->total = m.peak;
}

h3_status_code h3_engine_memory(h3_engine *e, int rank, h3_memory_device *out, h3_status *status) {
    if (!e || rank < 0 || rank >= e->n_ranks || !e->ranks)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "h3_engine_memory: rank %d of %d", rank, e ? e->n_ranks : 0);
    g_mutex_lock(&e->lock);
    measured(e, rank, out);
    g_mutex_unlock(&e->lock);
    return H3_OK;
}

/* The plan of a measuring engine: each rank's tally, the reserves, and the
 * free memory NVML reports now (at most max_gpu_memory). */
static void fill_plan(const h3_engine *m, h3_memory_plan *plan) {
    h3_gpu_info gpus[H3_MAX_DEVICES];
    char why[256];
    int n_gpus = list_gpus(gpus, H3_MAX_DEVICES, why, sizeof why);
    memset(plan, 0, sizeof *plan);
    plan->n_devices = m->n_ranks;
    plan->fits = 1;
    for (int r = 0; r < m->n_ranks; r++) {
        h3_memory_device *d = &plan->devices[r];
        measured(m, r, d);
        d->workspace += h3_memory_reserve(m, d->device);
        d->total += h3_memory_reserve(m, d->device);
        int g = d->device >= 0 ? nvml_gpu(d->device, gpus, n_gpus) : -1;
        d->available = g >= 0 ? gpus[g].free_bytes : 0;
        if (h3_memory_capped(m, d->device) && (!d->available || d->available > m->max_gpu_memory))
            d->available = m->max_gpu_memory;
        if (d->available && d->total > d->available) plan->fits = 0;
    }
}

/* Whether the measuring engine m holds a text encoder to free. */
static int has_text_weights(const h3_engine *m) {
    for (int r = 0; r < m->n_ranks; r++)
        if (m->ranks[r].weight_bytes[H3_PART_TEXT]) return 1;
    return 0;
}

/* Free to a request on rank i: what its GPU has left, plus, for a running
 * engine e (NULL: none yet), what e holds there already (it counts in the
 * plan) and the reserves it has taken. */
static uint64_t room(const h3_engine *e, int i, const h3_memory_device *d) {
    if (!e) return d->available;
    h3_backend_memory held;
    h3_backend_memory_get(e->ranks[i].backend, &held);
    uint64_t r = d->available + held.weights + held.arena + held.scratch + h3_memory_reserve(e, d->device);
    return h3_memory_capped(e, d->device) && r > e->max_gpu_memory ? e->max_gpu_memory : r;
}

static int fits_in(const h3_engine *e, const h3_memory_plan *plan) {
    for (int i = 0; i < plan->n_devices; i++) {
        const h3_memory_device *d = &plan->devices[i];
        if (d->available && d->total > room(e, i, d)) return 0;
    }
    return 1;
}

/* The job on the measuring engine m as the engine e (NULL: one not yet
 * open) would run it: with the text encoder resident when that fits, else
 * freed after the text stage. m is left as after the run that was chosen,
 * so a twin follows its engine. */
static h3_status_code plan_request(h3_engine *m, const h3_engine *e, const h3_job *job, h3_memory_plan *plan,
                                   h3_status *status) {
    h3_status_code rc = h3_job_run(m, job, NULL, 0, status);
    if (rc != H3_OK) return rc;
    fill_plan(m, plan);
    plan->fits = fits_in(e, plan);
    if (plan->fits || !has_text_weights(m)) return H3_OK;
    rc = h3_job_run(m, job, NULL, 1, status);
    if (rc != H3_OK) return rc;
    fill_plan(m, plan);
    plan->fits = fits_in(e, plan);
    plan->text_encoder_released = 1;
    return H3_OK;
}

h3_status_code h3_memory_plan_make(const h3_engine_options *options, const h3_request *request,
                                   h3_memory_plan *plan, h3_status *status) {
    if (!plan) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "h3_memory_plan_make: no plan to fill");
    memset(plan, 0, sizeof *plan);
    if (!options) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "h3_memory_plan_make: no engine options");
    h3_memory_target t;
    h3_status_code rc = make_target(options, &t, status);
    /* memory=auto: resident first; stream when that does not fit */
    int stream = options->memory == H3_MEMORY_STREAM;
    for (int pass = 0; rc == H3_OK && pass < 2; pass++) {
        h3_engine_options mo = *options;
        mo.memory = stream ? H3_MEMORY_STREAM : H3_MEMORY_RESIDENT;
        h3_engine *m = NULL;
        rc = h3_engine_open_measuring(&mo, &t, &m, status);
        if (rc == H3_OK && request) {
            h3_job *job = NULL;
            rc = h3_job_make(m, request, &job, status);
            if (rc == H3_OK) rc = plan_request(m, NULL, job, plan, status);
            h3_job_free(job);
        } else if (rc == H3_OK) {
            fill_plan(m, plan);
        }
        h3_engine_close(m);
        plan->memory = mo.memory;
        if (rc != H3_OK || plan->fits || stream || options->memory != H3_MEMORY_AUTO) break;
        stream = 1;
    }
    if (rc == H3_OK)
        snprintf(plan->memory_reason, sizeof plan->memory_reason, "%s",
                 options->memory != H3_MEMORY_AUTO ? "asked for"
                 : stream                          ? "auto: resident does not fit, streaming"
                                                   : "auto: resident fits");
    return rc;
}

/* ---- refusals ---------------------------------------------------------------------------- */

static void where(const h3_memory_device *d, char *buf, size_t size) {
    if (d->device < 0) snprintf(buf, size, "cpu");
    else snprintf(buf, size, "cuda:%d", d->device);
}

/* "weights 117.90: text 50.10, transformer 66.40, video-vae 1.10, audio-vae 0.30" */
static void weights_text(const h3_memory_device *d, char *buf, size_t size) {
    uint64_t w = d->text_encoder + d->transformer + d->video_vae + d->audio_vae;
    snprintf(buf, size, "weights %.2f: text %.2f, transformer %.2f, video-vae %.2f, audio-vae %.2f", (double)w / GIB,
             (double)d->text_encoder / GIB, (double)d->transformer / GIB, (double)d->video_vae / GIB,
             (double)d->audio_vae / GIB);
}

/* The twin in one mode (stream or resident), its plan at open (weights and
 * workspace), replacing any earlier twin. */
static h3_status_code open_twin(h3_engine *e, const h3_engine_options *o, int stream, h3_memory_plan *plan,
                                h3_status *status) {
    h3_engine_options mo = *o;
    mo.memory = stream ? H3_MEMORY_STREAM : H3_MEMORY_RESIDENT;
    h3_engine_close(e->shadow);
    e->shadow = NULL;
    h3_status_code rc = h3_engine_open_measuring(&mo, &e->shadow_target, &e->shadow, status);
    if (rc == H3_OK) fill_plan(e->shadow, plan);
    return rc;
}

/* The first device of the plan that does not fit, or -1. */
static int misfit(const h3_memory_plan *plan) {
    for (int r = 0; r < plan->n_devices; r++)
        if (plan->devices[r].available && plan->devices[r].total > plan->devices[r].available) return r;
    return -1;
}

/* Bytes for a message: GiB, or MiB under a tenth of one (the tiny model). */
static const char *size_text(uint64_t bytes, char *buf, size_t size) {
    if ((double)bytes >= 0.1 * GIB) snprintf(buf, size, "%.2f GiB", (double)bytes / GIB);
    else snprintf(buf, size, "%.2f MiB", (double)bytes / (1024.0 * 1024.0));
    return buf;
}

static h3_status_code refuse_open(const h3_engine *e, const h3_memory_device *d, int stream, uint64_t resident,
                                  h3_status *status) {
    char w[16], ws[160], cap[96], a[32], t[32];
    where(d, w, sizeof w);
    weights_text(d, ws, sizeof ws);
    size_text(d->available, a, sizeof a);
    if (h3_memory_capped(e, d->device) && d->available == e->max_gpu_memory)
        snprintf(cap, sizeof cap, "max-gpu-memory %s", a);
    else snprintf(cap, sizeof cap, "the %s free on %s", a, w);
    if (!stream)
        return h3_fail(status, H3_ERR_NO_MEMORY,
                       "%s needs %.2f GiB before any request (%s; arena %.2f; workspace %.2f) but %s is less "
                       "(memory=resident); use memory=stream or auto, spread the model over more GPUs "
                       "(devices=0,1,...) or free memory on %s",
                       w, (double)d->total / GIB, ws, (double)d->arena / GIB, (double)d->workspace / GIB, cap, w);
    char also[96] = "", r[32];
    if (resident) snprintf(also, sizeof also, " (resident: %s)", size_text(resident, r, sizeof r));
    return h3_fail(status, H3_ERR_NO_MEMORY,
                   "%s is below the %s stream mode needs on %s%s: %s GiB (the transformer's and text "
                   "encoder's are what stays on the device, two ring slots each included); arena %.2f; "
                   "workspace %.2f; spread the model over more GPUs (devices=0,1,...) or raise the cap",
                   cap, size_text(d->total, t, sizeof t), w, also, ws, (double)d->arena / GIB,
                   (double)d->workspace / GIB);
}

/* No free count to plan against (the CPU, NVML silent): the mode asked
 * for, auto being resident. */
static void unplanned(h3_engine *e, const h3_engine_options *o, const char *why) {
    e->stream = o->memory == H3_MEMORY_STREAM;
    snprintf(e->stats.memory_reason, sizeof e->stats.memory_reason, "%s",
             o->memory != H3_MEMORY_AUTO ? "asked for" : why);
}

h3_status_code h3_memory_check_open(h3_engine *e, const h3_engine_options *o, h3_status *status) {
    h3_memory_target *t = &e->shadow_target;
    h3_status_code rc = make_target(o, t, status);
    if (rc != H3_OK) return rc;
    int cuda = 0, planned = 0;
    for (int r = 0; r < t->n_ranks; r++) cuda |= t->device[r] >= 0;
    for (int r = 0; r < t->n_ranks; r++)
        planned |= t->device[r] >= 0 || (h3_memory_cpu_capped() && o->max_gpu_memory);
    if (!planned) { /* host memory: the plan has no free count to hold it to */
        unplanned(e, o, "auto: host memory is not planned, resident");
        return H3_OK;
    }
    if (cuda) {
        h3_gpu_info gpus[H3_MAX_DEVICES];
        char why[256] = "";
        int n_gpus = list_gpus(gpus, H3_MAX_DEVICES, why, sizeof why);
        if (n_gpus <= 0 && !o->max_gpu_memory) {
            h3_engine_log(e, H3_LOG_INFO, "memory plan not checked: free GPU memory unknown (%s)",
                          n_gpus < 0 ? why : "NVML lists no GPU");
            unplanned(e, o, "auto: free GPU memory unknown, resident");
            return H3_OK;
        }
    }
    h3_memory_plan plan;
    uint64_t resident = 0;
    if (o->memory != H3_MEMORY_STREAM) {
        rc = open_twin(e, o, 0, &plan, status);
        if (rc != H3_OK) return rc;
        int bad = misfit(&plan);
        if (bad < 0) {
            e->stream = 0;
            snprintf(e->stats.memory_reason, sizeof e->stats.memory_reason,
                     o->memory == H3_MEMORY_AUTO ? "auto: the weights fit resident (%.2f GiB of %.2f on rank 0)"
                                                 : "asked for (%.2f GiB of %.2f on rank 0)",
                     (double)plan.devices[0].total / GIB, (double)plan.devices[0].available / GIB);
            return H3_OK;
        }
        if (o->memory == H3_MEMORY_RESIDENT) return refuse_open(e, &plan.devices[bad], 0, 0, status);
        resident = plan.devices[bad].total;
    }
    rc = open_twin(e, o, 1, &plan, status);
    if (rc != H3_OK) return rc;
    int bad = misfit(&plan);
    if (bad >= 0) return refuse_open(e, &plan.devices[bad], 1, resident, status);
    e->stream = 1;
    if (o->memory == H3_MEMORY_AUTO) {
        char w[16];
        where(&plan.devices[0], w, sizeof w);
        snprintf(e->stats.memory_reason, sizeof e->stats.memory_reason,
                 "auto: resident needs %.2f GiB, more than the %.2f GiB %s has; stream needs %.2f", (double)resident / GIB,
                 (double)plan.devices[0].available / GIB, w, (double)plan.devices[0].total / GIB);
    } else {
        snprintf(e->stats.memory_reason, sizeof e->stats.memory_reason, "asked for (%.2f GiB of %.2f on rank 0)",
                 (double)plan.devices[0].total / GIB, (double)plan.devices[0].available / GIB);
    }
    return H3_OK;
}

h3_status_code h3_memory_check_request(h3_engine *e, h3_job *job, h3_status *status) {
    if (e->measure || !e->shadow) return H3_OK;
    /* compute=auto fell back to the CPU after the twin was made */
    if (rank_device(e, 0) < 0 && !h3_memory_cpu_capped()) {
        h3_engine_close(e->shadow);
        e->shadow = NULL;
        return H3_OK;
    }
    h3_memory_plan plan;
    h3_status_code rc = plan_request(e->shadow, e, job, &plan, status);
    if (rc != H3_OK) return h3_status_prefix(status, "memory plan of the request");
    job->text_release = plan.text_encoder_released;
    for (int i = 0; i < plan.n_devices; i++) {
        const h3_memory_device *d = &plan.devices[i];
        uint64_t have = room(e, i, d);
        if (!d->available || d->total <= have) continue;
        char w[16], ws[160];
        where(d, w, sizeof w);
        weights_text(d, ws, sizeof ws);
        return h3_fail(status, H3_ERR_NO_MEMORY,
                       "%s needs %.2f GiB for this request%s (%s; arena %.2f; workspace %.2f) but %.2f GiB are free "
                       "to it (%.2f free on the device, %.2f held by this engine); ask for fewer frames or a "
                       "smaller size, %sor spread the model over more GPUs",
                       w, (double)d->total / GIB,
                       plan.text_encoder_released ? " even with the text encoder freed after encoding" : "", ws,
                       (double)d->arena / GIB, (double)d->workspace / GIB, (double)have / GIB,
                       (double)d->available / GIB, (double)(have - d->available) / GIB,
                       e->stream ? "" : "open the engine with memory=stream, ");
    }
    if (plan.text_encoder_released)
        h3_engine_log(e, H3_LOG_INFO,
                      "this request does not fit with the text encoder resident, so its weights (%.2f GiB on "
                      "rank 0) are freed after encoding and loaded again for the next request (peak %.2f GiB)",
                      (double)plan.devices[0].text_encoder / GIB, (double)plan.devices[0].total / GIB);
    return H3_OK;
}

/* ---- the description ------------------------------------------------------------------------ */

static void line(GString *s, const char *key, uint64_t bytes) {
    g_string_append_printf(s, "%s: %.2f GiB (%llu bytes)\n", key, (double)bytes / GIB, (unsigned long long)bytes);
}

char *h3_memory_plan_describe(const h3_memory_plan *plan) {
    if (!plan) return NULL;
    GString *s = g_string_new(NULL);
    for (int i = 0; i < plan->n_devices && i < H3_MAX_DEVICES; i++) {
        const h3_memory_device *d = &plan->devices[i];
        char w[16];
        where(d, w, sizeof w);
        if (i) g_string_append_c(s, '\n');
        if (plan->n_devices > 1) g_string_append_printf(s, "device: %s (rank %d of %d)\n", w, i, plan->n_devices);
        else g_string_append_printf(s, "device: %s\n", w);
        if (plan->memory == H3_MEMORY_STREAM || plan->memory == H3_MEMORY_RESIDENT)
            g_string_append_printf(s, "memory: %s%s%s%s\n", h3_memory_mode_name(plan->memory),
                                   plan->memory_reason[0] ? " (" : "", plan->memory_reason,
                                   plan->memory_reason[0] ? ")" : "");
        line(s, "text-encoder", d->text_encoder);
        if (plan->text_encoder_released) g_string_append(s, "text-encoder-released: yes (after encoding)\n");
        line(s, "transformer", d->transformer);
        line(s, "video-vae", d->video_vae);
        line(s, "audio-vae", d->audio_vae);
        line(s, "arena", d->arena);
        line(s, "workspace", d->workspace);
        line(s, "total", d->total);
        if (plan->memory == H3_MEMORY_STREAM) {
            line(s, "host-pinned", d->host_pinned);
            line(s, "host-pageable", d->host_pageable);
        }
        if (d->available) line(s, "available", d->available);
        else g_string_append(s, "available: unknown\n");
        g_string_append_printf(s, "fits: %s\n", !d->available ? "yes (free memory unknown)"
                                               : d->total <= d->available ? "yes" : "no");
    }
    char *out = strdup(s->str);
    g_string_free(s, TRUE);
    return out;
}
