/* h3_preflight.c - h3_engine_preflight: what h3_engine_open and
 * h3_engine_validate would refuse that needs no weight, found in
 * milliseconds so that a caller (the element at READY->PAUSED) fails a bad
 * setting at once instead of after a load of minutes:
 *
 *   - the model directory's layout and its audio VAE's config (the sample
 *     rate a consumer negotiates);
 *   - compute and devices against this build and the GPUs the driver lists
 *     (NVML: no CUDA context);
 *   - the adapter's kind from its safetensors header and metadata
 *     (h3_adapter_open reads no tensor data), or the dummy adapter's;
 *   - the request against all of it, with the engine's own rules
 *     (h3_request_check, h3_fasth3_check_request on an engine that has not
 *     loaded yet).
 *
 * The engine stays the authority: it checks all of this again, and more. */
#include "engine/h3_engine_impl.h"

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/h3_config.h"
#include "engine/h3_gpus.h"

#ifdef H3_HAVE_CUDA
#include "backend/cuda/h3_backend_cuda.h" /* h3_cuda_kernels_for: the GPUs this build's kernels run on */

/* Number of entries of CUDA_VISIBLE_DEVICES, or -1 when it is unset: CUDA
 * sees only those. */
static int visible_devices(void) {
    const char *v = g_getenv("CUDA_VISIBLE_DEVICES");
    if (!v) return -1;
    int n = 0;
    gchar **parts = g_strsplit(v, ",", -1);
    for (gchar **p = parts; *p; p++) n += **p != '\0';
    g_strfreev(parts);
    return n;
}
#endif

/* precision=fp8 needs FP8 tensor cores (h3_cuda_fp8.c says the same at open). */
#define FP8_MIN_CC 89

/* The precision on its own and against compute (h3_engine_impl.h). */
h3_status_code h3_engine_check_precision(const h3_engine_options *o, h3_status *status) {
    if (!h3_precision_name(o->precision))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "precision %d: must be bf16 (%d) or fp8 (%d)",
                       (int)o->precision, (int)H3_PRECISION_BF16, (int)H3_PRECISION_FP8);
    if (o->precision == H3_PRECISION_FP8 && o->compute == H3_COMPUTE_CUDA_F32)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "precision=fp8 with compute=cuda-f32: the float32 parity mode keeps every weight in float32; "
                       "use compute=cuda (bf16) with fp8, or precision=bf16 with cuda-f32");
    return H3_OK;
}

/* compute and devices against this build and the GPUs the driver lists:
 * what the engine would otherwise find when it creates its backends. */
static h3_status_code check_devices(const h3_engine_options *o, h3_status *status) {
    h3_device_list list;
    h3_status_code rc = h3_devices_parse(o->devices, o->compute, &list, status);
    if (rc != H3_OK) return rc;
    int cuda = o->compute == H3_COMPUTE_CUDA || o->compute == H3_COMPUTE_CUDA_F32;
    if (!cuda && !(list.count > 0 && !list.cpu)) return H3_OK; /* the CPU, or auto's fallback */
    char what[96];
    if (list.count > 0) snprintf(what, sizeof what, "devices '%s'", o->devices);
    else snprintf(what, sizeof what, "compute=cuda");
#ifndef H3_HAVE_CUDA
    return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: this build of h3core has no CUDA backend (rebuild with "
                   "-Dcuda=enabled): use compute=cpu or compute=auto", what);
#else
    h3_gpu_info gpus[H3_MAX_DEVICES];
    char reason[256] = "";
    int n = h3_gpus_list(gpus, H3_MAX_DEVICES, reason, sizeof reason);
    if (n < 0)
        return h3_fail(status, H3_ERR_DEVICE, "%s: %s: install the NVIDIA driver, or use compute=cpu (or "
                       "compute=auto, which falls back to the CPU)", what, reason);
    if (n == 0)
        return h3_fail(status, H3_ERR_DEVICE, "%s: the NVIDIA driver lists no GPU: use compute=cpu (or "
                       "compute=auto, which falls back to the CPU)", what);
    int visible = visible_devices(), usable = visible >= 0 ? MIN(visible, n) : n;
    if (usable == 0)
        return h3_fail(status, H3_ERR_DEVICE, "%s: CUDA_VISIBLE_DEVICES hides every GPU: unset it, or use "
                       "compute=cpu", what);
    int single = 0;
    const int *ordinals = list.count > 0 ? list.ordinals : &single;
    for (int r = 0; r < (list.count > 0 ? list.count : 1); r++) {
        int d = ordinals[r];
        if (d >= usable)
            return h3_fail(status, H3_ERR_DEVICE, "%s: GPU %d does not exist: %d GPU%s visible (0..%d)%s", what, d,
                           usable, usable == 1 ? " is" : "s are", usable - 1,
                           visible >= 0 ? " through CUDA_VISIBLE_DEVICES" : "");
        /* The NVML entry of CUDA ordinal d (through CUDA_VISIBLE_DEVICES);
         * unknown when that names GPUs by UUID. */
        int nv = h3_gpus_nvml_index(d);
        char images[160];
        const char *attention, *vsa;
        if (nv >= 0 && nv < n && nv < H3_MAX_DEVICES &&
            !h3_cuda_kernels_for(gpus[nv].cc_major * 10 + gpus[nv].cc_minor, images, sizeof images, &attention, &vsa))
            return h3_fail(status, H3_ERR_DEVICE, "%s: GPU %d (%s) has compute capability %d.%d; %s: use other "
                           "devices, or compute=cpu", what, d, gpus[nv].name, gpus[nv].cc_major, gpus[nv].cc_minor,
                           images);
        if (nv >= 0 && nv < n && nv < H3_MAX_DEVICES && o->precision == H3_PRECISION_FP8 &&
            gpus[nv].cc_major * 10 + gpus[nv].cc_minor < FP8_MIN_CC)
            return h3_fail(status, H3_ERR_UNSUPPORTED, "precision=fp8 on %s: GPU %d (%s) has compute capability "
                           "%d.%d, without FP8 tensor cores (8.9 or newer: Ada, Hopper); use precision=bf16", what, d,
                           gpus[nv].name, gpus[nv].cc_major, gpus[nv].cc_minor);
    }
    return H3_OK;
#endif
}

/* The request against the adapter (or its absence) with the engine's own
 * FastH3 rules: an engine that has loaded nothing yet, holding only what
 * those rules read. */
static h3_status_code check_request(const h3_engine_options *o, const h3_request *r, h3_preflight *out,
                                    h3_status *status) {
    h3_status_code rc = h3_request_check(r, status);
    if (rc != H3_OK) return rc;
    h3_engine e;
    memset(&e, 0, sizeof e);
    h3_adapter *a = NULL;
    char dummy_name[48];
    if (o->adapter_path && *o->adapter_path) {
        rc = h3_adapter_open(o->adapter_path, &a, status);
        if (rc != H3_OK) return rc;
        e.has_adapter = 1;
        e.adapter_vsa = h3_adapter_has_vsa_gates(a);
        e.contract = *h3_adapter_get_contract(a);
        e.adapter_path = (char *)h3_adapter_path(a);
    } else if (o->load_format == H3_LOAD_DUMMY && o->dummy_adapter != H3_DUMMY_ADAPTER_NONE) {
        e.has_adapter = 1;
        e.adapter_vsa = o->dummy_adapter == H3_DUMMY_ADAPTER_VSA;
        snprintf(dummy_name, sizeof dummy_name, "dummy-adapter=%s", e.adapter_vsa ? "vsa" : "dense");
        e.adapter_path = dummy_name;
    }
    out->has_adapter = e.has_adapter;
    out->adapter_vsa = e.adapter_vsa;
    int forwards = 0;
    rc = h3_fasth3_check_request(&e, r, &forwards, status);
    h3_adapter_free(a);
    return rc;
}

/* Keyframes need the vision tower (the text encoder's vision_config and,
 * with the files, its model.visual.* tensors) and the image processor's
 * config; the configs and the checkpoint's header say so without a load. */
static h3_status_code check_keyframes(const h3_engine_options *o, const char *root, h3_status *status) {
    char *te = g_build_filename(root, "text_encoder", NULL);
    char *cfg_path = g_build_filename(te, "config.json", NULL);
    char *proc[2] = {g_build_filename(root, "processor", "preprocessor_config.json", NULL),
                     g_build_filename(te, "preprocessor_config.json", NULL)};
    h3_config *c = NULL;
    h3_status_code rc = h3_config_load(cfg_path, &c, status);
    if (rc == H3_OK && !h3_config_has(c, "vision_config"))
        rc = h3_fail(status, H3_ERR_UNSUPPORTED,
                     "keyframes need a vision tower, and the text encoder in '%s' has none (no vision_config in "
                     "its config.json): this model generates from text only",
                     te);
    if (rc == H3_OK && !g_file_test(proc[0], G_FILE_TEST_EXISTS) && !g_file_test(proc[1], G_FILE_TEST_EXISTS))
        rc = h3_fail(status, H3_ERR_UNSUPPORTED,
                     "keyframes need the Qwen3-VL image processor's config (%s), and the model has none", proc[0]);
    if (rc == H3_OK && o->load_format != H3_LOAD_DUMMY) {
        h3_checkpoint *ck = NULL;
        rc = h3_checkpoint_open(te, &ck, status);
        if (rc == H3_OK && !h3_checkpoint_find(ck, "model.visual.patch_embed.proj.weight"))
            rc = h3_fail(status, H3_ERR_UNSUPPORTED,
                         "keyframes need a vision tower, and the text encoder checkpoint in '%s' holds none "
                         "(no model.visual.* tensors)",
                         te);
        h3_checkpoint_close(ck);
    }
    h3_config_free(c);
    g_free(proc[0]);
    g_free(proc[1]);
    g_free(cfg_path);
    g_free(te);
    return rc;
}

h3_status_code h3_engine_preflight(const h3_engine_options *o, const h3_request *r, h3_preflight *out,
                                   h3_status *status) {
    memset(out, 0, sizeof *out);
    const char *dir = o->model_dir && *o->model_dir ? o->model_dir : h3_default_model_dir();
    char *root = NULL;
    h3_status_code rc = h3_engine_model_root(dir, &root, status);
    if (rc == H3_OK) {
        char *audio = g_build_filename(root, "audio_vae", NULL);
        h3_audio_vae_config cfg;
        if (!g_file_test(audio, G_FILE_TEST_IS_DIR))
            rc = h3_fail(status, H3_ERR_NOT_FOUND, "model '%s' lacks the component directory '%s'", dir, audio);
        else
            rc = h3_audio_vae_config_load(audio, &cfg, status);
        if (rc == H3_OK) {
            out->sample_rate = cfg.sample_rate;
            out->audio_channels = 2;
        }
        g_free(audio);
    }
    if (rc == H3_OK && r && (r->first_image || r->last_image)) rc = check_keyframes(o, root, status);
    g_free(root);
    if (rc != H3_OK || !r) return rc;
    rc = h3_engine_check_precision(o, status);
    if (rc == H3_OK) rc = check_devices(o, status);
    if (rc == H3_OK) rc = check_request(o, r, out, status);
    return rc;
}
