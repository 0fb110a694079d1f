/* h3_request.c - the rules of a request and of a device list that need no
 * model: defaults, limits and the `devices` grammar, each written once here.
 * h3_engine_validate applies them first; the element and the tools call the
 * same functions to fail early, before a model is loaded. */
#include "h3.h"

#include <glib.h>
#include <stdlib.h>
#include <string.h>

const char *h3_phase_name(h3_phase phase) {
    switch (phase) {
    case H3_PHASE_LOAD: return "load";
    case H3_PHASE_TEXT: return "text";
    case H3_PHASE_DENOISE: return "denoise";
    case H3_PHASE_DECODE_VIDEO: return "decode-video";
    case H3_PHASE_DECODE_AUDIO: return "decode-audio";
    case H3_PHASE_DONE: return "done";
    }
    return "?";
}

const char *h3_memory_mode_name(h3_memory_mode mode) {
    switch (mode) {
    case H3_MEMORY_AUTO: return "auto";
    case H3_MEMORY_RESIDENT: return "resident";
    case H3_MEMORY_STREAM: return "stream";
    }
    return NULL;
}

h3_status_code h3_memory_mode_parse(const char *name, h3_memory_mode *out, h3_status *status) {
    static const h3_memory_mode all[] = {H3_MEMORY_AUTO, H3_MEMORY_RESIDENT, H3_MEMORY_STREAM};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, h3_memory_mode_name(all[i])) == 0) {
            *out = all[i];
            return H3_OK;
        }
    return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "memory '%s': expected auto, resident or stream",
                   name ? name : "(null)");
}

const char *h3_precision_name(h3_precision p) {
    switch (p) {
    case H3_PRECISION_BF16: return "bf16";
    case H3_PRECISION_FP8: return "fp8";
    }
    return NULL;
}

h3_status_code h3_precision_parse(const char *text, h3_precision *out, h3_status *status) {
    if (text && strcmp(text, "bf16") == 0) *out = H3_PRECISION_BF16;
    else if (text && strcmp(text, "fp8") == 0) *out = H3_PRECISION_FP8;
    else return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "precision '%s': must be bf16 or fp8", text ? text : "(null)");
    return H3_OK;
}

h3_engine_options h3_engine_options_default(void) {
    h3_engine_options o;
    memset(&o, 0, sizeof o);
    o.compute = H3_COMPUTE_AUTO;
    o.devices = "auto";
    return o;
}

h3_request h3_request_default(void) {
    h3_request r;
    memset(&r, 0, sizeof r);
    r.seed = H3_DEFAULT_SEED;
    r.width = H3_DEFAULT_WIDTH;
    r.height = H3_DEFAULT_HEIGHT;
    r.num_frames = H3_DEFAULT_FRAMES;
    r.steps = 0;
    r.attention = H3_ATTENTION_DENSE;
    r.vsa_sparsity = (float)H3_DEFAULT_VSA_SPARSITY;
    return r;
}

int h3_align_frames(int requested) {
    if (requested <= 22) return 22;
    int n = (requested - 5 + 16) / 17;
    return 17 * n + 5;
}

/* Only white space (or nothing): the text encoder would see no description. */
static int blank(const char *s) {
    for (; *s; s++)
        if (!g_ascii_isspace(*s)) return 0;
    return 1;
}

/* The nearest allowed sides below and above v, for the message. */
static void side_neighbours(int v, int *down, int *up) {
    int d = v / H3_SIDE_MULTIPLE * H3_SIDE_MULTIPLE, u = d + H3_SIDE_MULTIPLE;
    *down = d < H3_MIN_SIDE ? H3_MIN_SIDE : d > H3_MAX_SIDE ? H3_MAX_SIDE : d;
    *up = u < H3_MIN_SIDE ? H3_MIN_SIDE : u > H3_MAX_SIDE ? H3_MAX_SIDE : u;
}

static h3_status_code check_side(const char *name, int v, const h3_request *r, h3_status *status) {
    if (v >= H3_MIN_SIDE && v <= H3_MAX_SIDE && v % H3_SIDE_MULTIPLE == 0) return H3_OK;
    int down, up;
    side_neighbours(v, &down, &up);
    if (v < H3_MIN_SIDE || v > H3_MAX_SIDE)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "width %d x height %d: %s %d is out of range: sides are multiples of %d in %d..%d", r->width,
                       r->height, name, v, H3_SIDE_MULTIPLE, H3_MIN_SIDE, H3_MAX_SIDE);
    return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                   "width %d x height %d: both must be positive multiples of %d (%s %d: use %d or %d)", r->width,
                   r->height, H3_SIDE_MULTIPLE, name, v, down, up);
}

static h3_status_code check_image(const char *what, const h3_image *im, h3_status *status) {
    if (!im) return H3_OK;
    if (im->width < 1 || im->height < 1 || im->width > H3_MAX_IMAGE_SIDE || im->height > H3_MAX_IMAGE_SIDE)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s is %dx%d: each side must be 1..%d pixels", what,
                       im->width, im->height, H3_MAX_IMAGE_SIDE);
    if ((int64_t)im->width * im->height > H3_MAX_IMAGE_PIXELS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s is %dx%d = %lld pixels: at most %lld", what, im->width,
                       im->height, (long long)im->width * im->height, (long long)H3_MAX_IMAGE_PIXELS);
    if (im->stride < (size_t)im->width * 3)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s: stride %zu bytes is less than 3 x width %d", what,
                       im->stride, im->width);
    if (!im->rgb) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s has no pixels", what);
    return H3_OK;
}

h3_status_code h3_request_check(const h3_request *r, h3_status *status) {
    if (!r) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "no request");
    if (!r->prompt || blank(r->prompt))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "prompt is empty: describe the clip to generate");
    if (!g_utf8_validate(r->prompt, -1, NULL))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "prompt is not valid UTF-8");
    h3_status_code rc = check_side("width", r->width, r, status);
    if (rc == H3_OK) rc = check_side("height", r->height, r, status);
    if (rc != H3_OK) return rc;
    if (r->width > H3_MAX_ASPECT * r->height || r->height > H3_MAX_ASPECT * r->width)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "width %d x height %d: aspect ratio must be between 1:%d and %d:1", r->width, r->height,
                       H3_MAX_ASPECT, H3_MAX_ASPECT);
    if (r->num_frames <= 0 || r->num_frames > H3_MAX_FRAMES)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "num-frames %d: must be 1..%d (15 s at %d fps)",
                       r->num_frames, H3_MAX_FRAMES, H3_FPS);
    if (r->steps < 0 || r->steps > H3_MAX_STEPS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "steps %d: must be 0 (model default) .. %d", r->steps,
                       H3_MAX_STEPS);
    if (r->attention != H3_ATTENTION_DENSE && r->attention != H3_ATTENTION_VSA)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "attention mode %d: expected fa (dense) or vsa",
                       (int)r->attention);
    if (!(r->vsa_sparsity >= 0.0f && r->vsa_sparsity <= (float)H3_MAX_VSA_SPARSITY))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "vsa-sparsity %g: must be in [0, %.2f]",
                       (double)r->vsa_sparsity, H3_MAX_VSA_SPARSITY);
    if (r->ladder != H3_LADDER_RELEASE && r->ladder != H3_LADDER_A && r->ladder != H3_LADDER_B)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "ladder %d: expected release, a or b", (int)r->ladder);
    rc = check_image("first image", r->first_image, status);
    if (rc == H3_OK) rc = check_image("last image", r->last_image, status);
    return rc;
}

static int compute_is_cuda(h3_compute c) { return c == H3_COMPUTE_CUDA || c == H3_COMPUTE_CUDA_F32; }

h3_status_code h3_devices_parse(const char *d, h3_compute compute, h3_device_list *out, h3_status *status) {
    memset(out, 0, sizeof *out);
    if (!d || !*d || strcmp(d, "auto") == 0) return H3_OK;
    const char *bad = "devices '%s': expected \"auto\", a list of CUDA ordinals such as \"0,1,2,3\", or \"cpu:N\"";
    char *end;
    if (strncmp(d, "cpu:", 4) == 0) {
        long n = strtol(d + 4, &end, 10);
        if (end == d + 4 || *end || n < 1 || n > H3_MAX_DEVICES)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "devices '%s': cpu:N needs N in 1..%d", d,
                           H3_MAX_DEVICES);
        if (compute_is_cuda(compute))
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "devices '%s' runs on the CPU but compute=cuda", d);
        out->count = (int)n;
        out->cpu = 1;
        for (int r = 0; r < out->count; r++) out->ordinals[r] = -1;
        return H3_OK;
    }
    int n = 0;
    for (const char *p = d; *p;) {
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > H3_MAX_DEVICE_ORDINAL || (*end && *end != ',') || n == H3_MAX_DEVICES)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, bad, d);
        out->ordinals[n++] = (int)v;
        p = *end ? end + 1 : end;
        if (*end && !*p) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, bad, d);
    }
    /* The advice is a value this same function accepts: cpu:N with N the
     * ranks the list asked for (1..H3_MAX_DEVICES by the loop above). */
    if (compute == H3_COMPUTE_CPU)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "devices '%s' names GPUs but compute=cpu: for %d rank%s on the CPU use devices=cpu:%d, or "
                       "leave compute at auto or cuda",
                       d, n, n == 1 ? "" : "s", n);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (out->ordinals[i] == out->ordinals[j])
                return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                               "devices '%s': GPU %d is listed twice; each rank needs a GPU of its own", d,
                               out->ordinals[i]);
#ifndef H3_HAVE_CUDA
    return h3_fail(status, H3_ERR_UNSUPPORTED, "devices '%s': this build of h3core has no CUDA backend", d);
#endif
    out->count = n;
    return H3_OK;
}
