/* h3_gpus.h - the GPUs of this machine as NVML sees them, without creating
 * a CUDA context (NVML is dlopen'd, so h3core does not link the driver):
 * what `capabilities` lists and the free memory the memory plan checks
 * against. Private to engine/. */
#ifndef H3_GPUS_H
#define H3_GPUS_H

#include <stddef.h>
#include <stdint.h>

typedef struct h3_gpu_info {
    char name[96];
    uint64_t total_bytes, free_bytes;
    int cc_major, cc_minor;
} h3_gpu_info;

/* The number of GPUs NVML sees (filling up to max entries, in NVML's order),
 * or -1 with the reason when NVML is not usable. */
int h3_gpus_list(h3_gpu_info *gpus, int max, char *reason, size_t reason_size);

/* The NVML index of CUDA ordinal `device`: through CUDA_VISIBLE_DEVICES
 * when it lists indices, else the ordinal itself (CUDA orders the GPUs of
 * one model as NVML does, by PCI bus); -1 when CUDA_VISIBLE_DEVICES names
 * GPUs by UUID or lists fewer than device + 1. */
int h3_gpus_nvml_index(int device);

#endif
