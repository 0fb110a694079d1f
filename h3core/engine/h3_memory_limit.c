/* h3_memory_limit.c - the memory rules a backend is created under, below
 * the memory plan (h3_memory_plan.c) and the open (h3_engine.c), which both
 * use them: a measuring engine's backends (backend/measure/), what a CUDA
 * rank holds beyond its tally (the reserves), and max_gpu_memory as a limit
 * on a real backend. It calls no other engine/ file. */
#include "engine/h3_engine_impl.h"

#include "engine/h3_engine.h"

/* Device memory a CUDA rank uses that no allocation of ours shows, added to
 * its workspace:
 *  - the CUDA context with h3core's kernels and cuBLASLt's, loaded lazily
 *    (CUDA 12's default): about 0.5 GiB on Hopper; 768 MiB leaves room for
 *    the driver's rounding of our allocations;
 *  - with tensor parallelism over GPUs, NCCL's buffers: its default 4 MiB
 *    per channel and peer, both directions, for the ring and tree channels
 *    of an NVLink host (NVLink SHARP off): 512 MiB per rank;
 *  - with precision=fp8, cuBLASLt's FP8 GEMM kernels and our quantisers,
 *    loaded into the context on first use: measured through gst-launch-1.0
 *    (FastH3 VSA 1280x736x124) as 1.10 GiB of nvidia-smi's peak outside our
 *    tally, on an H200 and an H100, against 0.46 GiB in bf16, so 640 MiB
 *    more. Without it the fp8 plan was 0.35 GiB under that peak. */
#define CUDA_CONTEXT_BYTES ((uint64_t)768 << 20)
#define NCCL_BYTES ((uint64_t)512 << 20)
#define FP8_KERNELS_BYTES ((uint64_t)640 << 20)

static int cpu_capped; /* h3_engine_cap_cpu_memory (tests): max_gpu_memory holds the CPU ranks too */

void h3_engine_cap_cpu_memory(int on) { cpu_capped = on != 0; }

int h3_memory_cpu_capped(void) { return cpu_capped; }

int h3_memory_capped(const h3_engine *e, int device) { return e->max_gpu_memory && (device >= 0 || cpu_capped); }

/* A measuring backend for the rank, as e->measure says. */
h3_status_code h3_memory_backend_create(const h3_engine *e, int rank, h3_backend **out, h3_status *status) {
    if (e->measure->device[rank] < 0) return h3_backend_cpu_create_measure(out, status);
#ifdef H3_HAVE_CUDA
    return h3_backend_cuda_create_measure(e->measure->sm[rank], e->measure->exact, out, status);
#else
    *out = NULL;
    return h3_fail(status, H3_ERR_UNSUPPORTED,
                   "compute=cuda: this build of h3core has no CUDA backend (rebuild with -Dcuda=enabled)");
#endif
}

/* What a CUDA rank uses beyond its tally. */
uint64_t h3_memory_reserve(const h3_engine *e, int device) {
    if (device < 0) return 0;
    return CUDA_CONTEXT_BYTES + (e->n_ranks > 1 ? NCCL_BYTES : 0) +
           (e->precision == H3_PRECISION_FP8 ? FP8_KERNELS_BYTES : 0);
}

void h3_memory_limit_backend(const h3_engine *e, h3_backend *b, int device) {
    uint64_t r = h3_memory_reserve(e, device);
    if (!h3_memory_capped(e, device) || e->measure) return;
    h3_backend_set_memory_limit(b, e->max_gpu_memory > r ? e->max_gpu_memory - r : 1);
}
