/* h3_gpus.h - the GPUs the NVIDIA driver lists, through NVML (dlopen'd, so
 * h3core does not link against the driver) and without a CUDA context:
 * what h3_capabilities_describe reports and what h3_engine_preflight checks
 * `compute` and `devices` against. Private to engine/. */
#ifndef H3_GPUS_H
#define H3_GPUS_H

#include <stddef.h>

typedef struct h3_gpu_info {
    char name[96];
    unsigned long long memory_mib;
    int cc_major, cc_minor;
} h3_gpu_info;

/* The compute capability h3core's CUDA kernels need. */
#define H3_GPU_MIN_CC_MAJOR 8

/* Returns the number of GPUs NVML sees (filling up to max entries), or -1
 * with a reason ("no NVIDIA driver (...)") when NVML is not usable. */
int h3_gpus_list(h3_gpu_info *gpus, int max, char *reason, size_t reason_size);

#endif
