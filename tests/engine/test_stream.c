/* test_stream.c - memory=stream (h3_weight_stream.h, h3.h's h3_memory_mode):
 * weights in host memory streamed through a ring of device slots.
 *
 *   the primitives  a weight moved to the host leaves the device tally and
 *                   keeps its bytes; every op and host copy refuses it with a
 *                   sticky error; a ring slot gives the same bytes back and an
 *                   op on the slot's view the same result; the measuring
 *                   backend counts slots but no host bytes on the device
 *   the DiT         a random model of 5 blocks (so the ring turns over)
 *                   streamed forwards bit-identically to resident, with less
 *                   on the device
 *   the engine      the tiny model, memory=stream against resident, same
 *                   latents, audio and frames to the bit: one rank, cpu:2, a
 *                   FastH3 dense and a VSA adapter, dummy weights
 *   the decision    under a cap on the CPU (h3_engine_cap_cpu_memory): auto
 *                   picks resident when it fits and stream when only stream
 *                   fits, says why; a cap below stream's working set is
 *                   refused naming the numbers; resident under a cap that
 *                   only stream fits is refused pointing to memory=stream
 */
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h3_test.h"
#include "h3_test_capture.h"
#include "h3_test_fasth3.h"
#include "h3_test_golden.h"
#include "h3_test_stream.h"

#include "h3.h"
#include "backend/h3_backend.h"
#include "backend/h3_weight_stream.h"
#include "engine/h3_engine.h"
#include "model/h3_dit.h"

/* ---- the primitives ------------------------------------------------------------------ */

static h3_tensor table_weight(h3_backend *b, int64_t rows, int64_t cols, float phase) {
    float *host = malloc((size_t)(rows * cols) * sizeof *host);
    for (int64_t i = 0; i < rows * cols; i++) host[i] = (float)sin(0.7 * (double)i + phase);
    h3_tensor w = {0};
    h3_status st = {0};
    CHECK(h3_weight_from_f32(b, host, H3_F32, 2, (int64_t[]){rows, cols}, &w, &st) == H3_OK, "weight: %s", st.message);
    free(host);
    return w;
}

static void test_primitives(void) {
    h3_backend *b = NULL;
    h3_status st = {0};
    CHECK(h3_backend_cpu_create(1, &b, &st) == H3_OK, "cpu backend: %s", st.message);
    if (!b) return;
    h3_tensor w = table_weight(b, 6, 4, 0.0f), bias = table_weight(b, 1, 6, 1.0f);
    h3_tensor x = h3_new_2d(b, H3_F32, 3, 4), y0 = h3_new_2d(b, H3_F32, 3, 6), y1 = h3_new_2d(b, H3_F32, 3, 6);
    float xs[12], a[18], c[18];
    for (int i = 0; i < 12; i++) xs[i] = (float)i / 7.0f - 0.5f;
    h3_tensor_upload_f32(b, &x, xs, &st);
    h3_op_linear(b, &y0, &x, &w, &bias);
    CHECK(h3_tensor_download_f32(b, &y0, a, &st) == H3_OK, "resident linear: %s", st.message);

    h3_backend_memory before, after;
    h3_backend_memory_get(b, &before);
    CHECK(h3_weight_to_host(b, &w, &st) == H3_OK && h3_weight_to_host(b, &bias, &st) == H3_OK, "to host: %s",
          st.message);
    h3_backend_memory_get(b, &after);
    h3_weight_host_bytes host;
    h3_weight_host_bytes_get(b, &host);
    CHECK(w.on_host && before.weights - after.weights == 6 * 4 * 4 + 6 * 4, "device tally: %llu -> %llu",
          (unsigned long long)before.weights, (unsigned long long)after.weights);
    CHECK(host.pageable == 6 * 4 * 4 + 6 * 4 && host.pinned == 0, "host bytes on the CPU: %llu pageable, %llu pinned",
          (unsigned long long)host.pageable, (unsigned long long)host.pinned);

    /* every op refuses it, naming the argument; so do the host copies */
    h3_op_linear(b, &y1, &x, &w, NULL);
    CHECK(h3_backend_check(b, &st) == H3_ERR_INTERNAL && strstr(st.message, "linear: w is a host-resident"),
          "an op on a host-resident weight: %s", st.message);
    h3_backend_clear_error(b);
    h3_tensor view = h3_tensor_rows_view(&w, 1, 2);
    h3_op_add(b, &y1, &y1, &view);
    CHECK(h3_backend_check(b, &st) == H3_ERR_INTERNAL && strstr(st.message, "host-resident"),
          "a view keeps the flag: %s", st.message);
    h3_backend_clear_error(b);
    h3_tensor resident = table_weight(b, 6, 4, 0.0f);
    h3_op_linear(b, &y1, &x, &resident, &bias);
    CHECK(h3_backend_check(b, &st) == H3_ERR_INTERNAL && strstr(st.message, "linear: bias is a host-resident"),
          "an optional argument on the host: %s", st.message);
    h3_backend_clear_error(b);
    h3_weight_free(b, &resident);
    float back[24];
    CHECK(h3_tensor_download_f32(b, &w, back, &st) == H3_ERR_INTERNAL && strstr(st.message, "host-resident"),
          "a download of a host-resident weight: %s", st.message);

    /* a ring of two slots: the same bytes come back, the op gives the same result */
    const h3_tensor *group[2] = {&w, &bias};
    h3_weight_ring *ring = NULL;
    size_t need = h3_weight_ring_group_bytes(group, 2);
    CHECK(need == 256 + 256, "group bytes %zu", need);
    h3_backend_memory_get(b, &before);
    CHECK(h3_weight_ring_create(b, 2, need, &ring, &st) == H3_OK, "ring: %s", st.message);
    h3_backend_memory_get(b, &after);
    CHECK(after.weights - before.weights == 2 * need, "the slots are device memory: %llu bytes",
          (unsigned long long)(after.weights - before.weights));
    for (int slot = 0; ring && slot < 2; slot++) {
        CHECK(h3_weight_ring_load(ring, slot, group, 2, &st) == H3_OK, "load slot %d: %s", slot, st.message);
        h3_tensor dw = w, db = bias;
        h3_tensor *views[2] = {&dw, &db};
        CHECK(h3_weight_ring_acquire(ring, slot, views, 2, &st) == H3_OK && !dw.on_host && dw.data != w.data,
              "acquire slot %d: %s", slot, st.message);
        h3_op_linear(b, &y1, &x, &dw, &db);
        CHECK(h3_tensor_download_f32(b, &y1, c, &st) == H3_OK && memcmp(a, c, sizeof a) == 0,
              "slot %d: the linear differs from the resident one", slot);
        h3_weight_ring_release(ring, slot);
    }
    if (ring) {
        h3_tensor dw = w;
        h3_tensor *one[1] = {&dw};
        CHECK(h3_weight_ring_acquire(ring, 0, one, 1, &st) == H3_ERR_INTERNAL && strstr(st.message, "slot 0 holds"),
              "a group that is not the load's: %s", st.message);
        CHECK(h3_weight_ring_load(ring, 0, (const h3_tensor *[]){&x}, 1, &st) == H3_ERR_INTERNAL,
              "a device tensor is not a streamed weight: %s", st.message);
        h3_weight_ring_stats rs;
        h3_weight_ring_stats_get(ring, &rs);
        CHECK(rs.loads == 2 && rs.bytes == 2 * need, "ring stats: %llu loads", (unsigned long long)rs.loads);
    }
    h3_weight_ring_destroy(ring);
    h3_weight_free(b, &w);
    h3_weight_free(b, &bias);
    h3_weight_host_bytes_get(b, &host);
    CHECK(host.pageable == 0, "freed host weights: %llu bytes left", (unsigned long long)host.pageable);
    h3_backend_destroy(b);

    /* measuring: host bytes counted apart from the device; slots on it */
    CHECK(h3_backend_cpu_create_measure(&b, &st) == H3_OK, "measure: %s", st.message);
    if (!b) return;
    h3_tensor m = table_weight(b, 64, 64, 0.0f);
    CHECK(h3_weight_to_host(b, &m, &st) == H3_OK, "measure to host: %s", st.message);
    h3_backend_memory_get(b, &after);
    h3_weight_host_bytes_get(b, &host);
    CHECK(after.weights == 0 && host.pageable == 64 * 64 * 4, "measure: %llu on the device, %llu on the host",
          (unsigned long long)after.weights, (unsigned long long)host.pageable);
    CHECK(h3_weight_ring_create(b, 2, 64 * 64 * 4, &ring, &st) == H3_OK, "measure ring: %s", st.message);
    h3_backend_memory_get(b, &after);
    CHECK(after.weights == 2 * 64 * 64 * 4, "measure: slots %llu", (unsigned long long)after.weights);
    h3_weight_ring_destroy(ring);
    h3_weight_free(b, &m);
    h3_backend_destroy(b);
    printf("primitives: host-resident weights refused by ops, ring slots bit-exact, measured apart\n");
}

/* ---- the DiT: a random model whose ring turns over --------------------------------------- */

static void test_dit_random(void) {
    h3_backend *b = NULL;
    h3_status st = {0};
    h3_dit_config cfg;
    CHECK(h3_backend_cpu_create(2, &b, &st) == H3_OK, "cpu: %s", st.message);
    CHECK(h3_dit_config_load(h3_test_data(FASTH3_DIFFUSERS_DIR), &cfg, &st) == H3_OK, "config: %s", st.message);
    if (!b) return;
    cfg.num_layers = 5;
    uint64_t resident_bytes = 0, stream_bytes = 0;
    h3_weight_ring_stats rr, rs;
    size_t n = 0;
    float *r = h3_test_stream_forward(b, &cfg, 0, 1, &resident_bytes, &rr, &n);
    float *s = h3_test_stream_forward(b, &cfg, 1, 1, &stream_bytes, &rs, &n);
    CHECK(r && s && memcmp(r, s, n * sizeof *r) == 0, "5 streamed blocks differ from resident");
    /* 5 main blocks per forward (two forwards), 2 refiner blocks at begin */
    CHECK(rs.loads == (uint64_t)(2 * cfg.num_layers + 2) && rr.loads == 0, "ring loads %llu",
          (unsigned long long)rs.loads);
    for (int slots = 1; slots <= 3; slots += 2) {
        uint64_t bytes = 0;
        h3_weight_ring_stats k;
        float *t = h3_test_stream_forward_slots(b, &cfg, 1, slots, 1, &bytes, &k, &n);
        CHECK(t && r && memcmp(r, t, n * sizeof *r) == 0 && k.loads == rs.loads, "%d slots differ from resident",
              slots);
        free(t);
    }
    CHECK(stream_bytes < resident_bytes, "stream holds %llu on the device, resident %llu",
          (unsigned long long)stream_bytes, (unsigned long long)resident_bytes);
    printf("dit, 5 random blocks: stream = resident bit for bit; device weights %llu -> %llu bytes\n",
           (unsigned long long)resident_bytes, (unsigned long long)stream_bytes);
    free(r);
    free(s);
    h3_backend_destroy(b);
}

/* ---- the engine: stream against resident ---------------------------------------------------- */

/* One request on a resident and a streamed engine of the same settings. */
static void compare_modes(const char *what, const char *devices, const char *adapter, h3_load_format format,
                          const h3_request *r) {
    h3_status st = {0};
    opened res = open_mode(H3_MEMORY_RESIDENT, devices, adapter, format, 0, &st);
    CHECK(res.e, "%s: open resident: %s", what, st.message);
    opened str = open_mode(H3_MEMORY_STREAM, devices, adapter, format, 0, &st);
    CHECK(str.e, "%s: open stream: %s", what, st.message);
    if (!res.e || !str.e) {
        h3_engine_close(res.e);
        h3_engine_close(str.e);
        return;
    }
    CHECK(strcmp(res.stats.memory, "resident") == 0 && strcmp(str.stats.memory, "stream") == 0,
          "%s: stats.memory %s / %s", what, res.stats.memory, str.stats.memory);
    CHECK(str.stats.host_pageable_bytes > 0 && res.stats.host_pageable_bytes == 0 && str.stats.host_pinned_bytes == 0,
          "%s: host bytes %llu (stream), %llu (resident)", what, (unsigned long long)str.stats.host_pageable_bytes,
          (unsigned long long)res.stats.host_pageable_bytes);
    h3_test_capture a = {0}, b = {0};
    CHECK(h3_test_generate(res.e, r, &a, NULL, &st) == H3_OK, "%s: resident run: %s", what, st.message);
    CHECK(h3_test_generate(str.e, r, &b, NULL, &st) == H3_OK, "%s: stream run: %s", what, st.message);
    CHECK(a.frames > 0 && same_clip(&a, &b), "%s: stream differs from resident", what);
    /* a second request on the streamed engine: the ring starts over; then
     * two with the text encoder released after encoding (its host copies
     * and slots freed, loaded again for the next request) */
    h3_test_capture c = {0};
    CHECK(h3_test_generate(str.e, r, &c, NULL, &st) == H3_OK && same_clip(&a, &c), "%s: second stream run: %s", what,
          st.message);
    h3_engine_force_text_release(str.e, 1);
    for (int i = 0; i < 2; i++) {
        h3_test_capture d = {0};
        CHECK(h3_test_generate(str.e, r, &d, NULL, &st) == H3_OK && same_clip(&a, &d),
              "%s: stream run %d with the text encoder released: %s", what, i + 1, st.message);
        h3_test_capture_free(&d);
    }
    printf("%s: stream = resident (latents, audio, %d frames) with %.2f MiB of weights on the host\n", what, a.frames,
           (double)str.stats.host_pageable_bytes / 1048576.0);
    h3_test_capture_free(&a);
    h3_test_capture_free(&b);
    h3_test_capture_free(&c);
    h3_engine_close(res.e);
    h3_engine_close(str.e);
}

static void test_engine_modes(void) {
    h3_request r = small_request();
    compare_modes("engine", "auto", NULL, H3_LOAD_SAFETENSORS, &r);
    compare_modes("engine cpu:2", "cpu:2", NULL, H3_LOAD_SAFETENSORS, &r);
    compare_modes("engine dummy", "auto", NULL, H3_LOAD_DUMMY, &r);
    h3_request f = h3_test_golden_request("e2e_t2va_fasth3_ladderB");
    f.steps = 0; /* the adapter's 4 */
    compare_modes("engine fasth3 dense", "auto", h3_test_data(FASTH3_DENSE_ADAPTER), H3_LOAD_SAFETENSORS, &f);
    f.attention = H3_ATTENTION_VSA;
    f.width = 160;
    f.height = 96;
    compare_modes("engine fasth3 vsa", "auto", h3_test_data(FASTH3_VSA_ADAPTER), H3_LOAD_SAFETENSORS, &f);
    compare_modes("engine fasth3 vsa cpu:2", "cpu:2", h3_test_data(FASTH3_VSA_ADAPTER), H3_LOAD_SAFETENSORS, &f);
}

/* ---- the decision under a cap ------------------------------------------------------------------ */

static uint64_t planned_total(h3_memory_mode memory, const h3_request *r) {
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("models/tiny-h3");
    o.compute = H3_COMPUTE_CPU;
    o.memory = memory;
    h3_memory_plan plan;
    h3_status st = {0};
    CHECK(h3_memory_plan_make(&o, r, &plan, &st) == H3_OK, "plan %s: %s", h3_memory_mode_name(memory), st.message);
    char *text = h3_memory_plan_describe(&plan);
    CHECK(text && strstr(text, memory == H3_MEMORY_STREAM ? "memory: stream" : "memory: resident"),
          "the plan shows its mode:\n%s", text ? text : "(none)");
    if (memory == H3_MEMORY_STREAM)
        CHECK(text && strstr(text, "host-pageable") && plan.devices[0].host_pageable > 0, "stream plan's host bytes:\n%s",
              text ? text : "(none)");
    free(text);
    return plan.devices[0].total;
}

static void test_decision(void) {
    h3_request r = small_request();
    uint64_t resident_open = planned_total(H3_MEMORY_RESIDENT, NULL), stream_open = planned_total(H3_MEMORY_STREAM, NULL);
    uint64_t stream_run = planned_total(H3_MEMORY_STREAM, &r);
    printf("tiny model on the CPU: resident %.3f MiB, stream %.3f MiB at open; stream with the request %.3f MiB\n",
           resident_open / 1048576.0, stream_open / 1048576.0, stream_run / 1048576.0);
    CHECK(stream_open < resident_open, "stream needs %llu, resident %llu", (unsigned long long)stream_open,
          (unsigned long long)resident_open);
    h3_engine_cap_cpu_memory(1);
    h3_status st = {0};

    /* a roomy cap: auto stays resident */
    opened big = open_mode(H3_MEMORY_AUTO, "auto", NULL, H3_LOAD_SAFETENSORS, resident_open * 4, &st);
    CHECK(big.e && strcmp(big.stats.memory, "resident") == 0 && strstr(big.stats.memory_reason, "auto"),
          "auto under a roomy cap: %s (%s)", big.e ? big.stats.memory : st.message, big.stats.memory_reason);
    h3_engine_close(big.e);

    /* between the two: auto streams, and says why */
    uint64_t between = (resident_open + stream_open) / 2;
    opened mid = open_mode(H3_MEMORY_AUTO, "auto", NULL, H3_LOAD_SAFETENSORS, between, &st);
    CHECK(mid.e && strcmp(mid.stats.memory, "stream") == 0 && strstr(mid.stats.memory_reason, "resident needs"),
          "auto under a cap only stream fits: %s (%s)", mid.e ? mid.stats.memory : st.message, mid.stats.memory_reason);
    if (mid.e && stream_run <= between) {
        h3_test_capture c = {0};
        CHECK(h3_test_generate(mid.e, &r, &c, NULL, &st) == H3_OK, "a run under the cap: %s", st.message);
        h3_test_capture_free(&c);
    } else if (mid.e) {
        h3_test_capture c = {0};
        CHECK(h3_test_generate(mid.e, &r, &c, NULL, &st) == H3_ERR_NO_MEMORY, "the request past the cap: %s",
              st.message);
        h3_test_capture_free(&c);
    }
    h3_engine_close(mid.e);

    /* stream asked for under a cap the request fits in stream mode: the
     * backend's limit holds the CPU rank, and the clip is resident's */
    opened capped = open_mode(H3_MEMORY_STREAM, "auto", NULL, H3_LOAD_SAFETENSORS, stream_run + stream_run / 20, &st);
    opened free_run = open_mode(H3_MEMORY_RESIDENT, "auto", NULL, H3_LOAD_SAFETENSORS, 0, &st);
    if (capped.e && free_run.e) {
        h3_test_capture a = {0}, c = {0};
        CHECK(h3_test_generate(capped.e, &r, &c, NULL, &st) == H3_OK, "stream under a %.2f MiB cap: %s",
              (stream_run + stream_run / 20) / 1048576.0, st.message);
        CHECK(h3_test_generate(free_run.e, &r, &a, NULL, &st) == H3_OK, "resident uncapped: %s", st.message);
        CHECK(same_clip(&a, &c), "stream under a cap differs from resident");
        h3_engine_get_stats(capped.e, &capped.stats);
        CHECK(capped.stats.peak_bytes <= stream_run + stream_run / 20, "peak %llu past the cap",
              (unsigned long long)capped.stats.peak_bytes);
        h3_test_capture_free(&a);
        h3_test_capture_free(&c);
    }
    CHECK(capped.e && free_run.e, "open stream under a cap: %s", st.message);
    h3_engine_close(capped.e);
    h3_engine_close(free_run.e);

    /* resident asked for under that cap: refused, pointing to stream */
    opened res = open_mode(H3_MEMORY_RESIDENT, "auto", NULL, H3_LOAD_SAFETENSORS, between, &st);
    CHECK(!res.e && st.code == H3_ERR_NO_MEMORY && strstr(st.message, "memory=stream"),
          "resident under a cap only stream fits: %s", st.message);
    h3_engine_close(res.e);

    /* below stream's working set: refused with the numbers */
    uint64_t small = stream_open / 2;
    char want[96];
    snprintf(want, sizeof want, "max-gpu-memory %.2f MiB is below the %.2f MiB stream mode needs", small / 1048576.0,
             stream_open / 1048576.0);
    opened tiny = open_mode(H3_MEMORY_AUTO, "auto", NULL, H3_LOAD_SAFETENSORS, small, &st);
    CHECK(!tiny.e && st.code == H3_ERR_NO_MEMORY && strstr(st.message, want) && strstr(st.message, "resident:"),
          "auto under a cap below stream: %s", st.message);
    h3_engine_close(tiny.e);
    opened str = open_mode(H3_MEMORY_STREAM, "cpu:2", NULL, H3_LOAD_SAFETENSORS, 1 << 20, &st);
    CHECK(!str.e && st.code == H3_ERR_NO_MEMORY && strstr(st.message, "stream mode needs"),
          "stream on cpu:2 under 1 MiB: %s", st.message);
    h3_engine_close(str.e);
    printf("decision: %s\n", st.message);
    h3_engine_cap_cpu_memory(0);

    /* without the hook the CPU is not planned: auto is resident, said so */
    opened plain = open_mode(H3_MEMORY_AUTO, "auto", NULL, H3_LOAD_SAFETENSORS, 1 << 20, &st);
    CHECK(plain.e && strcmp(plain.stats.memory, "resident") == 0 && strstr(plain.stats.memory_reason, "not planned"),
          "auto on the plain CPU: %s (%s)", plain.e ? plain.stats.memory : st.message, plain.stats.memory_reason);
    h3_engine_close(plain.e);
    h3_memory_mode m;
    CHECK(h3_memory_mode_parse("stream", &m, &st) == H3_OK && m == H3_MEMORY_STREAM, "parse stream");
    CHECK(h3_memory_mode_parse("offload", &m, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "'offload'"),
          "parse offload: %s", st.message);
}

int main(void) {
    test_primitives();
    test_dit_random();
    test_engine_modes();
    test_decision();
    return h3_test_finish("test_stream");
}
