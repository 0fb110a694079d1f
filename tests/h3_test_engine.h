/* h3_test_engine.h - what the engine tests share: the smallest request of
 * the tiny model and an engine opened on the CPU. */
#ifndef H3_TEST_ENGINE_H
#define H3_TEST_ENGINE_H

#include <stdint.h>

#include "h3.h"

/* The smallest clip the tiny model makes: 64x32, 22 frames, `steps`
 * forwards, seed 42 unless the caller changes it. */
static inline h3_request h3_test_small_request(const char *prompt, int steps) {
    h3_request r = h3_request_default();
    r.prompt = prompt;
    r.width = 64;
    r.height = 32;
    r.num_frames = 22;
    r.steps = steps;
    return r;
}

/* An engine on the CPU: dir (NULL: the embedded tiny model), devices
 * (NULL: one rank; "cpu:N": N ranks), adapter (NULL: none), threads per rank. */
static inline h3_status_code h3_test_open_cpu(const char *dir, const char *devices, const char *adapter,
                                              int threads, h3_engine **e, h3_status *st) {
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = dir;
    o.compute = H3_COMPUTE_CPU;
    o.cpu_threads = threads;
    o.devices = devices;
    o.adapter_path = adapter;
    return h3_engine_open(&o, e, st);
}

#endif
