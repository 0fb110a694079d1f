/* h3_engine.h - what the engine offers beyond the public API of h3.h: its
 * test hooks. Applications use h3.h alone. */
#ifndef H3_ENGINE_H
#define H3_ENGINE_H

#include "h3.h"

#ifdef __cplusplus
extern "C" {
#endif

/* At denoising step `step` (from 0) rank `rank` fails as if its device had
 * failed; rank < 0 disarms. The environment variable H3_INJECT_FAULT=RANK:STEP
 * arms the same at h3_engine_open, for applications' tests. */
void h3_engine_inject_fault(h3_engine *engine, int rank, int step);

#ifdef __cplusplus
}
#endif
#endif
