/* h3_gpus.c - GPUs through a dlopen'd NVML (h3_gpus.h): no CUDA context,
 * no link against the driver. */
#include "engine/h3_gpus.h"

#include <dlfcn.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct nvml_memory { unsigned long long total, free, used; } nvml_memory;

int h3_gpus_list(h3_gpu_info *gpus, int max, char *reason, size_t reason_size) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(reason, reason_size, "no NVIDIA driver (libnvidia-ml.so.1 not found)");
        return -1;
    }
    int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    int (*shutdown)(void) = (int (*)(void))dlsym(lib, "nvmlShutdown");
    int (*count)(unsigned *) = (int (*)(unsigned *))dlsym(lib, "nvmlDeviceGetCount_v2");
    int (*handle)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    int (*name)(void *, char *, unsigned) = (int (*)(void *, char *, unsigned))dlsym(lib, "nvmlDeviceGetName");
    int (*memory)(void *, nvml_memory *) = (int (*)(void *, nvml_memory *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
    int (*cc)(void *, int *, int *) = (int (*)(void *, int *, int *))dlsym(lib, "nvmlDeviceGetCudaComputeCapability");
    int n = -1;
    if (!init || !shutdown || !count || !handle) {
        snprintf(reason, reason_size, "libnvidia-ml.so.1 lacks the NVML entry points");
    } else if (init() != 0) {
        snprintf(reason, reason_size, "NVML could not initialise (driver not loaded?)");
    } else {
        unsigned c = 0;
        if (count(&c) == 0) {
            n = (int)c;
            for (int i = 0; i < n && i < max; i++) {
                void *h = NULL;
                memset(&gpus[i], 0, sizeof gpus[i]);
                if (handle((unsigned)i, &h) != 0) continue;
                if (name) name(h, gpus[i].name, sizeof gpus[i].name);
                nvml_memory m = {0};
                if (memory && memory(h, &m) == 0) {
                    gpus[i].total_bytes = m.total;
                    gpus[i].free_bytes = m.free;
                }
                if (cc) cc(h, &gpus[i].cc_major, &gpus[i].cc_minor);
            }
        } else {
            snprintf(reason, reason_size, "NVML could not count the GPUs");
        }
        shutdown();
    }
    dlclose(lib);
    return n;
}

int h3_gpus_nvml_index(int device) {
    const char *visible = g_getenv("CUDA_VISIBLE_DEVICES");
    if (device < 0) return -1;
    if (!visible) return device;
    char **items = g_strsplit(visible, ",", -1);
    int index = -1, n = (int)g_strv_length(items);
    if (device < n) {
        char *end = NULL;
        const char *item = g_strstrip(items[device]);
        long v = strtol(item, &end, 10);
        if (*item && end && *end == '\0' && v >= 0) index = (int)v;
    }
    g_strfreev(items);
    return index;
}
