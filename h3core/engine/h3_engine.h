/* h3_engine.h - what the engine offers beyond the public API of h3.h: its
 * test hooks. Applications use h3.h alone. */
#ifndef H3_ENGINE_H
#define H3_ENGINE_H

#include "h3.h"

#ifdef __cplusplus
extern "C" {
#endif

/* At denoising step `step` (from 0) rank `rank` fails as if its device had
 * failed; rank < 0 disarms. One shot: the generation it fails disarms it,
 * so the next one runs clean. The environment variable
 * H3_INJECT_FAULT=RANK:STEP arms the same at h3_engine_open, for
 * applications' tests (and RANK:STEP:OPS the one below). */
void h3_engine_inject_fault(h3_engine *engine, int rank, int step);
/* The same in the middle of that step's forward: rank `rank`'s backend
 * fails `ops` ops into it (h3_backend_inject_fault; on CUDA through the
 * launch check), between two collectives, as a device that faults inside a
 * kernel; the other ranks learn it at their next collective. ops <= 0 is
 * h3_engine_inject_fault. One shot, as above. */
void h3_engine_inject_fault_mid_forward(h3_engine *engine, int rank, int step, long ops);

/* What rank `rank`'s backend holds, from its memory tally
 * (h3_backend_memory): the weights each component took at load, the peaks
 * of activations (arena) and of the backend's own buffers (workspace) in
 * the last generation, or what they hold now when none ran; total is their
 * sum, available 0. A memory plan is this, taken on measuring backends,
 * plus the CUDA reserves in workspace (engine/h3_memory_plan.c). */
h3_status_code h3_engine_memory(h3_engine *engine, int rank, h3_memory_device *out, h3_status *status);

/* Makes every request of this engine free the text encoder after encoding
 * and load it again for the next (on = 1), as a GPU engine does by itself
 * when a request does not fit with it resident (h3_memory_plan); 0 keeps
 * it, as a CPU engine does. For tests on the CPU, which has no free count. */
void h3_engine_force_text_release(h3_engine *engine, int on);

/* For tests of the refusals without a GPU: from now on the memory plan sees
 * a GPU of compute capability 9.0 with `bytes` free at every CUDA ordinal
 * instead of asking NVML; 0 asks NVML again. Process-wide. */
void h3_engine_fake_gpu_free(uint64_t bytes);

/* For tests of the memory modes on the CPU: from now on (on != 0) a CPU
 * rank is held to max_gpu_memory as a GPU is: the memory plan plans it
 * against that cap (memory=auto decides on it, a cap too small is
 * refused) and its backend refuses an allocation past it (no context
 * reserve: the CPU has none). 0 restores the default: the CPU is not
 * planned. Process-wide; engines opened after the call see it. */
void h3_engine_cap_cpu_memory(int on);

/* How many times this process has fitted a request's keyframes onto its
 * canvas and built their presentation (the Qwen3-VL processor's patches):
 * once for each job of a request with keyframes (h3_engine_prepare, and
 * h3_engine_generate through it; h3_engine_validate and
 * h3_memory_plan_make make one each too), never in a run. For tests that a
 * generation, the measuring twin's runs included, prepares them once.
 * Process-wide. */
int h3_engine_keyframe_preparations(void);

#ifdef __cplusplus
}
#endif
#endif
