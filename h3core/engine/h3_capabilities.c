/* h3_capabilities.c - what this build and machine can run, found without
 * creating a CUDA context: the element's `capabilities` property is read in
 * gst-inspect and at READY, where touching the driver would be wrong (slow,
 * and it would pin memory on every GPU). GPUs are listed through NVML
 * (engine/h3_gpus.c), dlopen'd so that h3core does not link the driver. */
#include "h3.h"
#ifdef H3_HAVE_CUDA
#include "backend/cuda/h3_backend_cuda.h"
#endif
#include "engine/h3_gpus.h"
#include "model/h3_adapter.h"

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What GPU i runs, appended to its line: the kernel image and families
 * (backend/cuda: h3_cuda_kernels_for), or why it cannot. Returns 1 when
 * the GPU is usable. */
static int describe_gpu(GString *s, const h3_gpu_info *g, int cuda_built) {
    int sm = g->cc_major * 10 + g->cc_minor;
    g_string_append_printf(s, ", sm_%d", sm);
    if (sm < 80) {
        g_string_append(s, " (unsupported: needs sm_80 or newer)");
        return 0;
    }
#ifdef H3_HAVE_CUDA
    char images[160];
    const char *attention, *vsa;
    if (!h3_cuda_kernels_for(sm, images, sizeof images, &attention, &vsa)) {
        g_string_append_printf(s, " (unsupported: %s)", images);
        return 0;
    }
    g_string_append_printf(s, ", kernels %s (attention %s, vsa %s)", images, attention, vsa);
#endif
    return cuda_built;
}

/* `key: value` lines (the element turns each into a structure field). No
 * engine, no model and no CUDA context: what this build and machine can run. */
char *h3_capabilities_describe(void) {
    GString *s = g_string_new(NULL);
    g_string_append(s, "engine: h3core, MiniMax-H3 text (and keyframes) to video + audio (T2VA, FL2VA)\n");
    int cuda_built = 0, nccl_built = 0;
    const char *cuda_text = "";
#ifdef H3_HAVE_CUDA
    cuda_built = 1;
    cuda_text = " cuda(" H3_CUDA_TARGETS ")"; /* kernels/meson.build: the images nvcc built */
#endif
#ifdef H3_HAVE_NCCL
    nccl_built = 1;
#endif
    g_string_append_printf(s, "build: cpu%s%s\n", cuda_text, nccl_built ? " nccl" : "");
    g_string_append_printf(s, "cpu-threads: %u\n", g_get_num_processors());
    h3_gpu_info gpus[16];
    char reason[256] = "";
    int n = h3_gpus_list(gpus, 16, reason, sizeof reason);
    int usable = 0;
    for (int i = 0; i < n && i < 16; i++) {
        g_string_append_printf(s, "gpu%d: %s, %llu MiB", i, gpus[i].name,
                               (unsigned long long)(gpus[i].total_bytes >> 20));
        usable += describe_gpu(s, &gpus[i], cuda_built);
        g_string_append_c(s, '\n');
    }
    g_string_append_printf(s, "gpus: %d\n", n < 0 ? 0 : n);
    const char *compute = "cpu";
    char fallback[320] = "";
    if (!cuda_built) snprintf(fallback, sizeof fallback, "compute=auto uses the CPU: this build has no CUDA backend");
    else if (n < 0) snprintf(fallback, sizeof fallback, "compute=auto uses the CPU: %s", reason);
    else if (usable == 0) snprintf(fallback, sizeof fallback, "compute=auto uses the CPU: no GPU this build's kernels run on");
    else compute = "cuda";
    g_string_append_printf(s, "compute-auto: %s\n", compute);
    if (*fallback) g_string_append_printf(s, "fallback: %s\n", fallback);
    g_string_append(s, "modes: t2va, fl2va-first, fl2va-last, fl2va-first-last\n");
    g_string_append(s, "backends: fa, vsa\n");
    g_string_append(s, "fa: available (dense attention, base model or FastH3 dense-datafree adapter)\n");
    g_string_append(s, "vsa: available, experimental (VSA-H3 block-sparse attention, 64-token tiles, exempt "
                       "prefix, FastH3 vsa-datafree adapter required)\n");
    g_string_append_printf(s, "vsa-kernels: cpu reference%s\n",
                           cuda_built ? ", cuda (mma.sync, wgmma on sm_90: each GPU's line names its own)" : "");
    const h3_param *sparsity = h3_param_find(NULL, "vsa-sparsity");
    g_string_append_printf(s, "vsa-sparsity-default: %.1f\n", sparsity->number_default);
    /* the request's parameters, as the schema names them */
    g_string_append(s, "parameters:");
    for (const h3_param *p = h3_params(); p->name; p++) g_string_append_printf(s, " %s", p->name);
    g_string_append_c(s, '\n');
    g_string_append(s, "adapters: " H3_ADAPTER_FORMAT " (FastH3 4-step, fused once at load)\n");
    g_string_append(s, "loras: supported (layouts peft/diffusers, original, kohya/musubi, diffsynth; transformer "
                       "only; fused in place, strengths changeable between clips; not with precision=fp8)\n");
    g_string_append(s, "fasth3-steps: 4 forwards, shifts 12/3, ladder release (dmd_denoising_steps) or "
                       "a [1, 0.75, 0.5, 0.25, 0] or b [0.999, 0.749, 0.5, 0.25, 0]\n");
    g_string_append_printf(s, "tensor-parallel: %s\n",
                           nccl_built ? "NCCL, degrees 1 2 4 7 8 (must divide the head counts)" : "CPU ranks only");
    char *out = strdup(s->str);
    g_string_free(s, TRUE);
    return out;
}
