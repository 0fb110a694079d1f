/* test_gpu_stream.c - memory=stream on the CUDA backend (h3_weight_stream.h,
 * backend/cuda/h3_cuda_stream.c): the copy stream, its events and pinned
 * host memory, where the CPU tests (test_stream) copy synchronously.
 *
 *   the DiT       a random model of 5 tiny blocks and one of 3 release-size
 *                 blocks (3.9 GB, so every copy is a large DMA): streamed
 *                 forwards bit-identical to resident, pinned host copies,
 *                 the time compute stood waiting for a copy reported
 *   the engine    the tiny model on CUDA, memory=stream against resident:
 *                 the same latents, audio and frames to the bit, the host
 *                 copies pinned; FastH3 VSA too; the CUDA plan of stream
 *                 mode holds the slots, not the layers (the auto decision
 *                 and the refusals under a cap are test_stream's, on the
 *                 CPU, through the same plan code)
 *
 * Skips (exit 77) with the reason when there is no CUDA backend or GPU. */
#include <glib.h>
#include <stdint.h>

#include "h3.h"
#include "backend/h3_backend.h"
#include "backend/h3_weight_stream.h"
#include "model/h3_dit.h"
#include "h3_test.h"
#include "h3_test_capture.h"
#include "h3_test_fasth3.h"
#include "h3_test_golden.h"
#include "h3_test_stream.h"

#ifdef H3_HAVE_CUDA
static h3_backend *gpu;

/* Resident then streamed forwards of a random model on the GPU. */
static void dit_pair(const char *what, h3_dit_config *cfg, int seq_scale) {
    uint64_t rb = 0, sb = 0;
    h3_weight_ring_stats rr, rs;
    size_t n = 0;
    double t0 = (double)g_get_monotonic_time() / 1e6;
    float *r = h3_test_stream_forward(gpu, cfg, 0, seq_scale, &rb, &rr, &n);
    double t1 = (double)g_get_monotonic_time() / 1e6;
    float *s = h3_test_stream_forward(gpu, cfg, 1, seq_scale, &sb, &rs, &n);
    double t2 = (double)g_get_monotonic_time() / 1e6;
    CHECK(r && s && memcmp(r, s, n * sizeof *r) == 0, "%s: stream differs from resident on CUDA", what);
    h3_weight_host_bytes host;
    h3_weight_host_bytes_get(gpu, &host);
    CHECK(host.pinned == 0 && host.pageable == 0, "%s: host copies left after the model was freed", what);
    CHECK(rs.loads == (uint64_t)(2 * cfg->num_layers + cfg->num_refiner_layers), "%s: %llu ring loads", what,
          (unsigned long long)rs.loads);
    printf("%s: stream = resident bit for bit; device weights %.3f -> %.3f GiB; %llu copies of %.2f GiB, compute "
           "waited %.1f ms in %llu acquires (load+2 forwards: resident %.2f s, stream %.2f s)\n",
           what, rb / 1073741824.0, sb / 1073741824.0, (unsigned long long)rs.loads, rs.bytes / 1073741824.0,
           rs.stall_ms, (unsigned long long)rs.stalls, t1 - t0, t2 - t1);
    free(r);
    free(s);
}

static void test_dit(void) {
    h3_dit_config cfg;
    h3_status st = {0};
    CHECK(h3_dit_config_load(h3_test_data(FASTH3_DIFFUSERS_DIR), &cfg, &st) == H3_OK, "tiny config: %s", st.message);
    cfg.num_layers = 5;
    dit_pair("cuda dit, 5 tiny blocks", &cfg, 1);
    CHECK(h3_dit_config_load(h3_test_data("official/transformer"), &cfg, &st) == H3_OK, "release config: %s",
          st.message);
    cfg.num_layers = 3;
    dit_pair("cuda dit, 3 release blocks", &cfg, 8);
}

static void compare_on_gpu(const char *what, const char *adapter, const h3_request *r) {
    h3_status st = {0};
    opened res = open_mode(H3_MEMORY_RESIDENT, "auto", adapter, H3_LOAD_SAFETENSORS, 0, &st);
    CHECK(res.e, "%s: open resident: %s", what, st.message);
    opened str = open_mode(H3_MEMORY_STREAM, "auto", adapter, H3_LOAD_SAFETENSORS, 0, &st);
    CHECK(str.e, "%s: open stream: %s", what, st.message);
    if (res.e && str.e) {
        CHECK(strncmp(str.stats.compute, "cuda", 4) == 0 && strcmp(str.stats.memory, "stream") == 0,
              "%s: on %s, memory %s", what, str.stats.compute, str.stats.memory);
        CHECK(str.stats.host_pinned_bytes > 0, "%s: nothing pinned (%llu pageable)", what,
              (unsigned long long)str.stats.host_pageable_bytes);
        h3_test_capture a = {0}, b = {0};
        CHECK(h3_test_generate(res.e, r, &a, NULL, &st) == H3_OK, "%s: resident: %s", what, st.message);
        CHECK(h3_test_generate(str.e, r, &b, NULL, &st) == H3_OK, "%s: stream: %s", what, st.message);
        CHECK(a.frames > 0 && same_clip(&a, &b), "%s: stream differs from resident on CUDA", what);
        printf("%s: stream = resident on %s (%d frames), %.2f MiB pinned\n", what, str.stats.compute, a.frames,
               str.stats.host_pinned_bytes / 1048576.0);
        h3_test_capture_free(&a);
        h3_test_capture_free(&b);
    }
    h3_engine_close(res.e);
    h3_engine_close(str.e);
}

static void test_engine(void) {
    h3_test_stream_compute = H3_COMPUTE_CUDA;
    h3_request r = small_request();
    compare_on_gpu("cuda engine", NULL, &r);
    h3_request f = h3_test_golden_request("e2e_t2va_fasth3_ladderB");
    f.steps = 0;
    f.attention = H3_ATTENTION_VSA;
    f.width = 160;
    f.height = 96;
    compare_on_gpu("cuda engine fasth3 vsa", h3_test_data(FASTH3_VSA_ADAPTER), &f);
    /* the GPU's plan in stream mode holds the slots, not the blocks */
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("models/tiny-h3");
    o.compute = H3_COMPUTE_CUDA;
    h3_memory_plan pr, ps;
    h3_status st = {0};
    o.memory = H3_MEMORY_RESIDENT;
    CHECK(h3_memory_plan_make(&o, &r, &pr, &st) == H3_OK, "plan resident: %s", st.message);
    o.memory = H3_MEMORY_STREAM;
    CHECK(h3_memory_plan_make(&o, &r, &ps, &st) == H3_OK, "plan stream: %s", st.message);
    CHECK(ps.devices[0].text_encoder < pr.devices[0].text_encoder && ps.devices[0].host_pinned > 0,
          "stream plan: text encoder %llu (resident %llu), pinned %llu",
          (unsigned long long)ps.devices[0].text_encoder, (unsigned long long)pr.devices[0].text_encoder,
          (unsigned long long)ps.devices[0].host_pinned);
}
#endif

int main(void) {
#ifndef H3_HAVE_CUDA
    printf("SKIP: this build has no CUDA backend (meson -Dcuda=enabled with nvcc)\n");
    return 77;
#else
    h3_status st = {0};
    if (h3_backend_cuda_create(0, &gpu, &st) != H3_OK) {
        printf("SKIP: no CUDA backend or GPU: %s\n", st.message);
        return 77;
    }
    test_dit();
    test_engine();
    h3_backend_destroy(gpu);
    return h3_test_finish("test_gpu_stream");
#endif
}
