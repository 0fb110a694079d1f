/* test_memory_plan.c - the memory plan (h3_memory_plan_make) on the tiny
 * model against what a real CPU engine holds: for two request sizes, fa and
 * vsa (the tiny VSA adapter), one backend and cpu:2, the plan's weights per
 * component equal what each rank's backend took at load, its arena equals
 * the arena's measured peak after the generation (the measuring backend
 * runs the same arena code), and stats.peak_bytes is within 10% of the
 * plan's total (on the CPU it is the total). Then the CUDA plans, made here
 * without a GPU (the measuring backend stands for CUDA without touching
 * one): cuda-f32 keeps the CPU's float32 weights byte for byte, cuda keeps
 * bf16 weights with the fp32 islands, f16 for the video VAE, and a
 * workspace of at least the cuBLASLt workspace and the reserves (fp8's
 * larger by its kernels' reserve, its transformer smaller). Then the
 * refusal at open of a GPU with too little free memory (faked), before
 * anything loads; the native layout's re-packed transformer on a measuring
 * backend; h3_memory_plan_describe's keys; and the errors. */
#include <glib.h>
#include <stdint.h>

#include "h3.h"
#include "backend/h3_backend.h"
#include "engine/h3_engine.h"
#include "model/h3_dit.h"
#include "h3_test.h"
#include "h3_test_capture.h"

#define VSA_ADAPTER "adapters/tiny-h3/vsa-datafree/adapter_model.safetensors"

typedef struct size_case {
    int width, height, frames;
} size_case;

static const size_case SIZES[] = {{64, 32, 22}, {256, 192, 39}};

static h3_engine_options options_for(int vsa, const char *devices, h3_compute compute) {
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("models/tiny-h3");
    o.compute = compute;
    o.devices = devices;
    o.adapter_path = vsa ? h3_test_data(VSA_ADAPTER) : NULL;
    return o;
}

static h3_request request_for(const size_case *s, int vsa) {
    h3_request r = h3_request_default();
    r.prompt = "a robot dancing";
    r.width = s->width;
    r.height = s->height;
    r.num_frames = s->frames;
    r.steps = vsa ? 0 : 2; /* with the adapter: its 4 */
    r.attention = vsa ? H3_ATTENTION_VSA : H3_ATTENTION_DENSE;
    return r;
}

static uint64_t weights_of(const h3_memory_device *d) {
    return d->text_encoder + d->transformer + d->video_vae + d->audio_vae;
}

static double rel(uint64_t a, uint64_t b) { return b ? fabs((double)a - (double)b) / (double)b : (a ? 1.0 : 0.0); }

/* The plan of one request against a fresh engine that runs it. */
static void check_against_engine(const size_case *s, int vsa, const char *devices) {
    char what[128];
    snprintf(what, sizeof what, "%dx%dx%d %s devices=%s", s->width, s->height, s->frames, vsa ? "vsa" : "fa", devices);
    h3_engine_options o = options_for(vsa, devices, H3_COMPUTE_CPU);
    h3_request r = request_for(s, vsa);
    h3_memory_plan plan;
    h3_status st = {0};
    if (h3_memory_plan_make(&o, &r, &plan, &st) != H3_OK) {
        CHECK(0, "%s: plan: %s", what, st.message);
        return;
    }
    int ranks = strcmp(devices, "auto") ? atoi(devices + 4) : 1;
    CHECK(plan.n_devices == ranks && plan.fits, "%s: %d devices, fits %d", what, plan.n_devices, plan.fits);
    h3_engine *e = NULL;
    if (h3_engine_open(&o, &e, &st) != H3_OK) {
        CHECK(0, "%s: open: %s", what, st.message);
        return;
    }
    for (int k = 0; k < plan.n_devices; k++) {
        const h3_memory_device *p = &plan.devices[k];
        h3_memory_device m;
        CHECK(h3_engine_memory(e, k, &m, &st) == H3_OK, "%s: rank %d: %s", what, k, st.message);
        CHECK(p->device == -1 && p->available == 0, "%s: rank %d: device %d, available %llu", what, k, p->device,
              (unsigned long long)p->available);
        CHECK(p->text_encoder == m.text_encoder && p->transformer == m.transformer && p->video_vae == m.video_vae &&
                  p->audio_vae == m.audio_vae,
              "%s: rank %d: planned weights %llu/%llu/%llu/%llu, loaded %llu/%llu/%llu/%llu", what, k,
              (unsigned long long)p->text_encoder, (unsigned long long)p->transformer,
              (unsigned long long)p->video_vae, (unsigned long long)p->audio_vae, (unsigned long long)m.text_encoder,
              (unsigned long long)m.transformer, (unsigned long long)m.video_vae, (unsigned long long)m.audio_vae);
        CHECK(p->transformer > 0 && p->video_vae > 0 && (k == 0) == (p->audio_vae > 0), "%s: rank %d: components",
              what, k);
    }
    h3_callbacks cb = {0};
    if (h3_engine_generate(e, &r, &cb, &st) != H3_OK) {
        CHECK(0, "%s: generate: %s", what, st.message);
        h3_engine_close(e);
        return;
    }
    for (int k = 0; k < plan.n_devices; k++) {
        const h3_memory_device *p = &plan.devices[k];
        h3_memory_device m;
        h3_engine_memory(e, k, &m, &st);
        CHECK(p->arena == m.arena && p->arena > 0, "%s: rank %d: planned arena %llu, measured %llu", what, k,
              (unsigned long long)p->arena, (unsigned long long)m.arena);
        CHECK(p->workspace == m.workspace, "%s: rank %d: planned workspace %llu, measured %llu", what, k,
              (unsigned long long)p->workspace, (unsigned long long)m.workspace);
        CHECK(p->total == weights_of(p) + p->arena + p->workspace, "%s: rank %d: total is not the sum", what, k);
    }
    h3_stats stats;
    h3_engine_get_stats(e, &stats);
    double d = rel(stats.peak_bytes, plan.devices[0].total);
    printf("%s: plan %llu bytes on rank 0 (weights %llu, arena %llu), peak %llu (%.2f%%)\n", what,
           (unsigned long long)plan.devices[0].total, (unsigned long long)weights_of(&plan.devices[0]),
           (unsigned long long)plan.devices[0].arena, (unsigned long long)stats.peak_bytes, 100 * d);
    CHECK(stats.peak_bytes > 0 && d <= 0.10, "%s: peak %llu against the plan's %llu", what,
          (unsigned long long)stats.peak_bytes, (unsigned long long)plan.devices[0].total);
    /* A second request on the same engine: the arena keeps its chunks, and
     * the peak is again the weights and the activations of that request. */
    if (h3_engine_generate(e, &r, &cb, &st) == H3_OK) {
        h3_engine_get_stats(e, &stats);
        CHECK(stats.peak_bytes == plan.devices[0].total || rel(stats.peak_bytes, plan.devices[0].total) <= 0.10,
              "%s: second run's peak %llu", what, (unsigned long long)stats.peak_bytes);
    } else {
        CHECK(0, "%s: second generate: %s", what, st.message);
    }
    h3_engine_close(e);
}

/* CUDA plans, made on this machine whether or not it has a GPU. */
static void test_cuda_plans(void) {
#ifdef H3_HAVE_CUDA
    const size_case *s = &SIZES[1];
    for (int vsa = 0; vsa < 2; vsa++) {
        h3_request r = request_for(s, vsa);
        h3_memory_plan cpu, f32, bf16;
        h3_status st = {0};
        h3_engine_options o = options_for(vsa, "auto", H3_COMPUTE_CPU);
        CHECK(h3_memory_plan_make(&o, &r, &cpu, &st) == H3_OK, "cpu plan: %s", st.message);
        o.compute = H3_COMPUTE_CUDA_F32;
        CHECK(h3_memory_plan_make(&o, &r, &f32, &st) == H3_OK, "cuda-f32 plan: %s", st.message);
        o.compute = H3_COMPUTE_CUDA;
        CHECK(h3_memory_plan_make(&o, &r, &bf16, &st) == H3_OK, "cuda plan: %s", st.message);
        const h3_memory_device *c = &cpu.devices[0], *x = &f32.devices[0], *b = &bf16.devices[0];
        printf("%s on cpu / cuda-f32 / cuda: transformer %llu / %llu / %llu, arena %llu / %llu / %llu, workspace "
               "%llu / %llu / %llu\n",
               vsa ? "vsa" : "fa", (unsigned long long)c->transformer, (unsigned long long)x->transformer,
               (unsigned long long)b->transformer, (unsigned long long)c->arena, (unsigned long long)x->arena,
               (unsigned long long)b->arena, (unsigned long long)c->workspace, (unsigned long long)x->workspace,
               (unsigned long long)b->workspace);
        CHECK(x->device == 0 && b->device == 0, "cuda plans on device %d/%d", x->device, b->device);
        CHECK(x->text_encoder == c->text_encoder && x->transformer == c->transformer && x->video_vae == c->video_vae &&
                  x->audio_vae == c->audio_vae,
              "%s: cuda-f32 weights differ from the cpu's", vsa ? "vsa" : "fa");
        /* bf16 for the blocks, fp32 islands: between half and all of the f32 bytes */
        /* bf16: half the f32 bytes, plus the vision tower's heads padded for the tensor-core attention
         * (h3_vision.c): tiny-h3's 2 blocks of 2 heads 16 wide (C 32) padded to 64, in bf16, each block
         * 3·2·48·32 qkv rows, 3·2·48 bias values and 32·2·48 proj columns more */
        uint64_t pad = 2 * (uint64_t)(3 * 2 * 48 * 32 + 3 * 2 * 48 + 32 * 2 * 48) * 2;
        CHECK(b->text_encoder * 2 == c->text_encoder + 2 * pad, "%s: text encoder %llu in bf16 against %llu in f32",
              vsa ? "vsa" : "fa", (unsigned long long)b->text_encoder, (unsigned long long)c->text_encoder);
        CHECK(b->transformer * 2 > c->transformer && b->transformer < c->transformer, "%s: transformer %llu / %llu",
              vsa ? "vsa" : "fa", (unsigned long long)b->transformer, (unsigned long long)c->transformer);
        CHECK(b->video_vae < c->video_vae && b->audio_vae == c->audio_vae, "%s: VAEs %llu/%llu against %llu/%llu",
              vsa ? "vsa" : "fa", (unsigned long long)b->video_vae, (unsigned long long)b->audio_vae,
              (unsigned long long)c->video_vae, (unsigned long long)c->audio_vae);
        uint64_t fixed = ((uint64_t)64 << 20) + ((uint64_t)512 << 20);
        CHECK(b->workspace > fixed && x->workspace > fixed && c->workspace == 0, "%s: workspaces %llu/%llu/%llu",
              vsa ? "vsa" : "fa", (unsigned long long)b->workspace, (unsigned long long)x->workspace,
              (unsigned long long)c->workspace);
        CHECK(b->arena >= ((uint64_t)256 << 20), "%s: a CUDA arena takes 256 MiB chunks: %llu", vsa ? "vsa" : "fa",
              (unsigned long long)b->arena);
        /* fp8: the context holds cuBLASLt's FP8 kernels too (measured 0.64 GiB more than bf16's on the
         * H100 and the H200), so the reserve grows by at least 640 MiB besides the quantisers' scratch */
        h3_memory_plan fp8;
        o.precision = H3_PRECISION_FP8;
        CHECK(h3_memory_plan_make(&o, &r, &fp8, &st) == H3_OK, "cuda fp8 plan: %s", st.message);
        o.precision = H3_PRECISION_BF16;
        CHECK(fp8.devices[0].workspace >= b->workspace + ((uint64_t)640 << 20), "%s: fp8 workspace %llu, bf16 %llu",
              vsa ? "vsa" : "fa", (unsigned long long)fp8.devices[0].workspace, (unsigned long long)b->workspace);
        CHECK(fp8.devices[0].transformer < b->transformer, "%s: fp8 transformer %llu not below bf16's %llu",
              vsa ? "vsa" : "fa", (unsigned long long)fp8.devices[0].transformer, (unsigned long long)b->transformer);
        /* Tensor parallelism over two GPUs: each rank holds its shard of the
         * transformer (more than half: the replicated tensors) and NCCL's reserve. */
        o.devices = "0,1";
        h3_memory_plan tp;
        h3_status_code rc = h3_memory_plan_make(&o, &r, &tp, &st);
        CHECK(rc == H3_OK || rc == H3_ERR_UNSUPPORTED, "tp plan: %s", st.message);
        if (rc == H3_OK) {
            CHECK(tp.n_devices == 2 && tp.devices[1].device == 1 && tp.devices[1].audio_vae == 0,
                  "tp plan: %d devices", tp.n_devices);
            for (int k = 0; k < 2; k++)
                CHECK(tp.devices[k].transformer < b->transformer && tp.devices[k].transformer * 2 > b->transformer,
                      "tp rank %d: transformer %llu of %llu", k, (unsigned long long)tp.devices[k].transformer,
                      (unsigned long long)b->transformer);
            CHECK(tp.devices[0].workspace > b->workspace, "tp: NCCL's reserve missing from %llu",
                  (unsigned long long)tp.devices[0].workspace);
        }
    }
#endif
}

/* The refusals, without a GPU: the plan sees a GPU with little free memory
 * (h3_engine_fake_gpu_free), and h3_engine_open refuses before loading. */
static void test_refusals(void) {
#ifdef H3_HAVE_CUDA
    h3_engine_fake_gpu_free((uint64_t)100 << 20);
    h3_engine_options o = options_for(0, "auto", H3_COMPUTE_CUDA);
    o.memory = H3_MEMORY_RESIDENT; /* the resident refusal; memory=auto's (stream's) follows */
    h3_request r = request_for(&SIZES[0], 0);
    h3_memory_plan plan;
    h3_status st = {0};
    CHECK(h3_memory_plan_make(&o, &r, &plan, &st) == H3_OK, "plan: %s", st.message);
    CHECK(!plan.fits && plan.devices[0].available == ((uint64_t)100 << 20), "fits %d, available %llu", plan.fits,
          (unsigned long long)plan.devices[0].available);
    char *text = h3_memory_plan_describe(&plan);
    CHECK(text && strstr(text, "fits: no") && strstr(text, "available: 0.10 GiB"), "description:\n%s",
          text ? text : "(null)");
    free(text);
    h3_engine *e = NULL;
    h3_status_code rc = h3_engine_open(&o, &e, &st);
    CHECK(rc == H3_ERR_NO_MEMORY && e == NULL, "open: %s '%s'", h3_status_code_name(rc), st.message);
    const char *parts[] = {"cuda:0 needs ", " GiB before any request (weights ", ": text ", ", transformer ",
                           ", video-vae ", ", audio-vae ", "; workspace 0.8", " but the 100.00 MiB free on cuda:0 is less",
                           "use memory=stream or auto"};
    for (size_t i = 0; i < G_N_ELEMENTS(parts); i++)
        CHECK(strstr(st.message, parts[i]) != NULL, "'%s' not in '%s'", parts[i], st.message);
    printf("refused: %s\n", st.message);
    o.devices = "0,1";
    rc = h3_engine_open(&o, &e, &st);
    CHECK(rc == H3_ERR_NO_MEMORY && strstr(st.message, "cuda:0 needs"), "tp open: %s '%s'", h3_status_code_name(rc),
          st.message);
    h3_engine_close(e);
    e = NULL;
    /* memory=auto (the default) falls back to stream, which does not fit 100 MiB either: refused naming it */
    o.memory = H3_MEMORY_AUTO;
    o.devices = NULL;
    rc = h3_engine_open(&o, &e, &st);
    CHECK(rc == H3_ERR_NO_MEMORY && e == NULL && strstr(st.message, "stream mode needs") &&
              strstr(st.message, "(resident: ") && strstr(st.message, "100.00 MiB free on cuda:0"),
          "auto open: %s '%s'", h3_status_code_name(rc), st.message);
    h3_engine_close(e);
    h3_engine_fake_gpu_free(0);
#endif
}

/* The native checkpoint layout (per-head qkv and [gate; value] fc1 re-packed
 * on the host at load): a measuring backend takes what the real one does
 * without the re-packing, whole and as the shard of a rank of two. */
static void test_native_layout(void) {
    const char *dir = h3_test_data("models/tiny-h3-native/FL2VA/transformer");
    for (int size = 1; size <= 2; size++) {
        h3_tp tp = {size - 1, size, NULL};
        uint64_t held[2] = {0, 0};
        for (int measure = 0; measure < 2; measure++) {
            h3_backend *b = NULL;
            h3_dit *dit = NULL;
            h3_status st = {0};
            h3_status_code rc = measure ? h3_backend_cpu_create_measure(&b, &st) : h3_backend_cpu_create(1, &b, &st);
            if (rc == H3_OK) rc = h3_dit_load_tp(b, dir, &tp, &dit, &st);
            CHECK(rc == H3_OK, "native transformer on %s: %s", measure ? "a measuring backend" : "the cpu", st.message);
            h3_backend_memory m = {0};
            if (b) h3_backend_memory_get(b, &m);
            held[measure] = m.weights;
            h3_dit_free(dit);
            h3_backend_destroy(b);
        }
        CHECK(held[0] > 0 && held[0] == held[1], "native transformer, rank %d of %d: %llu bytes loaded, %llu measured",
              size - 1, size, (unsigned long long)held[0], (unsigned long long)held[1]);
    }
}

static void test_describe(void) {
    h3_engine_options o = options_for(0, "cpu:2", H3_COMPUTE_CPU);
    h3_request r = request_for(&SIZES[0], 0);
    h3_memory_plan plan;
    h3_status st = {0};
    if (h3_memory_plan_make(&o, &r, &plan, &st) != H3_OK) {
        CHECK(0, "plan: %s", st.message);
        return;
    }
    char *text = h3_memory_plan_describe(&plan);
    CHECK(text != NULL, "describe returned NULL");
    if (!text) return;
    const char *keys[] = {"device: ", "text-encoder: ", "transformer: ", "video-vae: ", "audio-vae: ", "arena: ",
                          "workspace: ", "total: ", "available: ", "fits: "};
    for (size_t i = 0; i < G_N_ELEMENTS(keys); i++) {
        int n = 0;
        for (const char *p = text; (p = strstr(p, keys[i])); p++) n += p == text || p[-1] == '\n';
        CHECK(n == 2, "key '%s' in %d blocks of the description:\n%s", keys[i], n, text);
    }
    CHECK(strstr(text, "device: cpu (rank 1 of 2)") && strstr(text, "GiB (") && strstr(text, "fits: yes"),
          "description:\n%s", text);
    char total[64];
    snprintf(total, sizeof total, "total: %.2f GiB (%llu bytes)", (double)plan.devices[0].total / (1024.0 * 1024 * 1024),
             (unsigned long long)plan.devices[0].total);
    CHECK(strstr(text, total) != NULL, "'%s' not in:\n%s", total, text);
    printf("%s", text);
    free(text);
    CHECK(h3_memory_plan_describe(NULL) == NULL, "describe(NULL)");
}

static void test_errors(void) {
    h3_engine_options o = options_for(0, "auto", H3_COMPUTE_CPU);
    o.model_dir = h3_test_data("models/no-such-model");
    h3_request r = request_for(&SIZES[0], 0);
    h3_memory_plan plan;
    h3_status st = {0};
    h3_status_code rc = h3_memory_plan_make(&o, &r, &plan, &st);
    CHECK(rc == H3_ERR_NOT_FOUND && strstr(st.message, "no-such-model"), "missing model: %s '%s'",
          h3_status_code_name(rc), st.message);
    o = options_for(0, "auto", H3_COMPUTE_CPU);
    r.width = 33;
    rc = h3_memory_plan_make(&o, &r, &plan, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "33"), "bad width: %s '%s'", h3_status_code_name(rc),
          st.message);
    r = request_for(&SIZES[0], 0);
    o.devices = "cpu:3"; /* does not divide the tiny model's heads */
    rc = h3_memory_plan_make(&o, &r, &plan, &st);
    CHECK(rc == H3_ERR_INVALID_ARGUMENT, "cpu:3: %s '%s'", h3_status_code_name(rc), st.message);
    /* No request: the weights and what the backends hold after loading. */
    o.devices = "auto";
    CHECK(h3_memory_plan_make(&o, NULL, &plan, &st) == H3_OK && plan.devices[0].transformer > 0 &&
              plan.devices[0].arena == 0,
          "plan without a request: %s", st.message);
    CHECK(h3_memory_plan_make(NULL, &r, &plan, &st) == H3_ERR_INVALID_ARGUMENT, "no options");
}

/* Freeing the text encoder after encoding and loading it again: on a CPU
 * engine (forced, h3_engine_force_text_release), the clips are identical to
 * those with it resident, request after request, with the files and with
 * dummy weights; after a request the engine holds the other weights only. */
static void check_release(h3_load_format format, const char *devices) {
    char what[96];
    snprintf(what, sizeof what, "text release, %s, devices=%s", format == H3_LOAD_DUMMY ? "dummy" : "files",
             devices);
    h3_engine_options o = options_for(0, devices, H3_COMPUTE_CPU);
    o.load_format = format;
    h3_request r = request_for(&SIZES[0], 0);
    h3_engine *e = NULL;
    h3_status st = {0};
    if (h3_engine_open(&o, &e, &st) != H3_OK) {
        CHECK(0, "%s: open: %s", what, st.message);
        return;
    }
    h3_memory_device at_open;
    h3_engine_memory(e, 0, &at_open, &st);
    h3_test_capture keep = {0}, c[2];
    memset(c, 0, sizeof c);
    CHECK(h3_test_generate(e, &r, &keep, NULL, &st) == H3_OK, "%s: resident: %s", what, st.message);
    h3_stats kept;
    h3_engine_get_stats(e, &kept);
    uint64_t keep_peak = kept.peak_bytes;
    CHECK(at_open.text_encoder > 0 && kept.text_encoder_released == 0, "%s: text encoder %llu at open", what,
          (unsigned long long)at_open.text_encoder);
    h3_engine_force_text_release(e, 1);
    for (int i = 0; i < 2; i++) {
        CHECK(h3_test_generate(e, &r, &c[i], NULL, &st) == H3_OK, "%s: released #%d: %s", what, i, st.message);
        size_t vb = (size_t)keep.plan.num_frames * keep.plan.width * keep.plan.height * 3;
        CHECK(c[i].frames == keep.frames && c[i].video && keep.video && memcmp(c[i].video, keep.video, vb) == 0 &&
                  c[i].samples == keep.samples &&
                  memcmp(c[i].audio, keep.audio, (size_t)(2 * keep.samples) * sizeof(float)) == 0,
              "%s: request %d differs from the resident one", what, i);
        h3_stats stats;
        h3_engine_get_stats(e, &stats);
        CHECK(stats.text_encoder_released == 1, "%s: stats.text_encoder_released %d", what,
              stats.text_encoder_released);
        /* the peak: the text encoder and the denoising's arena were never held together */
        CHECK(stats.peak_bytes < keep_peak && stats.peak_bytes + at_open.text_encoder >= keep_peak,
              "%s: request %d peaked at %llu, resident %llu, text encoder %llu", what, i,
              (unsigned long long)stats.peak_bytes, (unsigned long long)keep_peak,
              (unsigned long long)at_open.text_encoder);
    }
    h3_engine_force_text_release(e, 0);
    h3_test_capture again = {0};
    CHECK(h3_test_generate(e, &r, &again, NULL, &st) == H3_OK, "%s: resident again: %s", what, st.message);
    CHECK(again.video && memcmp(again.video, keep.video, (size_t)keep.frames * keep.plan.width * keep.plan.height * 3) == 0,
          "%s: resident after release differs", what);
    h3_stats stats;
    h3_engine_get_stats(e, &stats);
    CHECK(stats.text_encoder_released == 0, "%s: stats after resident run %d", what, stats.text_encoder_released);
    printf("%s: 2 requests with the text encoder freed and loaded again match the resident clip\n", what);
    h3_test_capture_free(&keep);
    h3_test_capture_free(&c[0]);
    h3_test_capture_free(&c[1]);
    h3_test_capture_free(&again);
    h3_engine_close(e);
}

/* The release's 15 s clip on one GPU with 139.8 GiB free (an H200's): it
 * does not fit with the 46.9 GiB text encoder resident through the
 * denoising, so the plan frees it after encoding, and then it fits; with room
 * enough it stays resident; with too little it does not fit either way. */
static void test_release_plan(void) {
#ifdef H3_HAVE_CUDA
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("official");
    o.compute = H3_COMPUTE_CUDA;
    o.load_format = H3_LOAD_DUMMY;
    o.dummy_adapter = H3_DUMMY_ADAPTER_DENSE;
    o.memory = H3_MEMORY_RESIDENT; /* the text encoder's release is resident mode's answer */
    h3_request r = h3_request_default();
    r.prompt = "a red fox in snow";
    r.width = 1344;
    r.height = 768;
    r.num_frames = 362;
    const struct {
        double free_gib;
        int released, fits;
    } cases[] = {{139.8, 1, 1}, {200.0, 0, 1}, {60.0, 1, 0}};
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        h3_engine_fake_gpu_free((uint64_t)(cases[i].free_gib * 1073741824.0));
        h3_memory_plan plan;
        h3_status st = {0};
        if (h3_memory_plan_make(&o, &r, &plan, &st) != H3_OK) {
            CHECK(0, "15 s plan at %.1f GiB: %s", cases[i].free_gib, st.message);
            continue;
        }
        const h3_memory_device *d = &plan.devices[0];
        printf("15 s fa plan, %.1f GiB free: total %.2f GiB, text encoder %s, fits %d\n", cases[i].free_gib,
               d->total / 1073741824.0, plan.text_encoder_released ? "released" : "resident", plan.fits);
        CHECK(plan.text_encoder_released == cases[i].released && plan.fits == cases[i].fits,
              "15 s at %.1f GiB: released %d, fits %d", cases[i].free_gib, plan.text_encoder_released, plan.fits);
        uint64_t weights = weights_of(d);
        if (plan.text_encoder_released)
            CHECK(d->total < weights + d->arena + d->workspace && d->total > weights - d->text_encoder + d->arena,
                  "15 s released: peak %llu not between the denoising's %llu and the sum %llu",
                  (unsigned long long)d->total, (unsigned long long)(weights - d->text_encoder + d->arena),
                  (unsigned long long)(weights + d->arena + d->workspace));
        else
            CHECK(d->total == weights + d->arena + d->workspace, "15 s resident: total is not the sum");
        char *text = h3_memory_plan_describe(&plan);
        CHECK(text && (strstr(text, "text-encoder-released: yes") != NULL) == cases[i].released, "description:\n%s",
              text ? text : "(null)");
        free(text);
    }
    h3_engine_fake_gpu_free(0);
#endif
}

/* max_gpu_memory: a backend refuses past its limit with a message naming
 * it, and works again without one; the plan holds requests to it. */
static void test_memory_limit(void) {
    h3_backend *b = NULL;
    h3_status st = {0};
    if (h3_backend_cpu_create(1, &b, &st) != H3_OK) {
        CHECK(0, "cpu backend: %s", st.message);
        return;
    }
    h3_backend_set_memory_limit(b, (uint64_t)1 << 20);
    size_t mark = h3_arena_mark(b);
    h3_tensor big = h3_new_2d(b, H3_F32, 1024, 1024); /* 4 MiB */
    h3_status_code rc = h3_backend_check(b, &st);
    CHECK(big.data == NULL && rc == H3_ERR_NO_MEMORY && strstr(st.message, "max-gpu-memory") &&
              strstr(st.message, "activations"),
          "arena past the limit: %s '%s'", h3_status_code_name(rc), st.message);
    h3_backend_clear_error(b);
    float *host = calloc(1 << 19, sizeof *host);
    int64_t shape[2] = {512, 1024};
    h3_tensor w;
    rc = h3_weight_from_f32(b, host, H3_F32, 2, shape, &w, &st);
    CHECK(rc == H3_ERR_NO_MEMORY && strstr(st.message, "memory limit of 0.00 GiB") && strstr(st.message, "weights"),
          "weights past the limit: %s '%s'", h3_status_code_name(rc), st.message);
    h3_backend_clear_error(b);
    h3_backend_set_memory_limit(b, 0);
    h3_arena_reset(b, mark);
    big = h3_new_2d(b, H3_F32, 1024, 1024);
    CHECK(big.data != NULL && h3_backend_check(b, &st) == H3_OK, "no limit: %s", st.message);
    rc = h3_weight_from_f32(b, host, H3_F32, 2, shape, &w, &st);
    CHECK(rc == H3_OK, "weights without a limit: %s", st.message);
    if (rc == H3_OK) h3_weight_free(b, &w);
    free(host);
    h3_backend_destroy(b);
#ifdef H3_HAVE_CUDA
    /* The release's 5 s VSA clip (130.1 GiB resident) on an 80 GB card and on a 135 GiB budget. */
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("official");
    o.compute = H3_COMPUTE_CUDA;
    o.load_format = H3_LOAD_DUMMY;
    o.dummy_adapter = H3_DUMMY_ADAPTER_VSA;
    o.memory = H3_MEMORY_RESIDENT; /* memory=auto would stream at 80 GiB (test_stream, h3-generate) */
    h3_request r = h3_request_default();
    r.prompt = "a red fox in snow";
    r.width = 1280;
    r.height = 736;
    r.num_frames = 124;
    r.attention = H3_ATTENTION_VSA;
    const struct {
        double cap_gib;
        int fits, released;
    } cases[] = {{80.0, 0, 1}, {135.0, 1, 0}};
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        o.max_gpu_memory = (uint64_t)(cases[i].cap_gib * 1073741824.0);
        h3_memory_plan plan;
        if (h3_memory_plan_make(&o, &r, &plan, &st) != H3_OK) {
            CHECK(0, "5 s vsa plan at %.0f GiB: %s", cases[i].cap_gib, st.message);
            continue;
        }
        printf("5 s vsa plan with max_gpu_memory %.0f GiB: total %.2f GiB, available %.2f, fits %d, text encoder %s\n",
               cases[i].cap_gib, plan.devices[0].total / 1073741824.0, plan.devices[0].available / 1073741824.0,
               plan.fits, plan.text_encoder_released ? "released" : "resident");
        CHECK(plan.devices[0].available == o.max_gpu_memory && plan.fits == cases[i].fits &&
                  plan.text_encoder_released == cases[i].released,
              "5 s vsa at %.0f GiB: available %llu, fits %d, released %d", cases[i].cap_gib,
              (unsigned long long)plan.devices[0].available, plan.fits, plan.text_encoder_released);
    }
#endif
}

int main(void) {
    test_memory_limit();
    check_release(H3_LOAD_SAFETENSORS, "auto");
    check_release(H3_LOAD_DUMMY, "auto");
    check_release(H3_LOAD_SAFETENSORS, "cpu:2");
    test_release_plan();
    for (size_t s = 0; s < G_N_ELEMENTS(SIZES); s++)
        for (int vsa = 0; vsa < 2; vsa++) {
            check_against_engine(&SIZES[s], vsa, "auto");
            check_against_engine(&SIZES[s], vsa, "cpu:2");
        }
    test_cuda_plans();
    test_refusals();
    test_native_layout();
    test_describe();
    test_errors();
    return h3_test_finish("test_memory_plan");
}
