/* test_cuda_targets.c - which of the build's kernel images each compute
 * capability runs (h3_cuda_kernels_for), found without a GPU, and the
 * `capabilities` text that names them:
 *
 * - 8.x runs the sm_80 SASS, 9.0 the sm_90a SASS with the wgmma attention
 *   and VSA kernels, 10.0 and 10.3 sm_100, 12.0 sm_120 (Blackwell: the
 *   portable mma.sync kernels, never the Hopper ones);
 * - a capability newer than every SASS but not older than the PTX runs the
 *   PTX, compiled at its first launch (mma.sync);
 * - 7.5 and 11.0 (no image: Thor) are refused, naming the build's targets;
 * - the `build:` line lists H3_CUDA_TARGETS (kernels/meson.build), Blackwell
 *   included, and the `gpus:` count stays.
 * Suite cpu, in CUDA builds only. */
#include <string.h>

#include "backend/cuda/h3_backend_cuda.h"
#include "h3.h"
#include "h3_test.h"

static void expect(int sm, const char *images, const char *attention, const char *vsa) {
    char got[160] = "";
    const char *a = NULL, *v = NULL;
    int ok = h3_cuda_kernels_for(sm, got, sizeof got, &a, &v);
    CHECK(ok, "sm_%d: refused: %s", sm, got);
    if (!ok) return;
    CHECK(strstr(got, images) == got, "sm_%d: image %s, want %s", sm, got, images);
    CHECK(!strcmp(a, attention), "sm_%d: attention %s, want %s", sm, a, attention);
    CHECK(!strcmp(v, vsa), "sm_%d: vsa %s, want %s", sm, v, vsa);
}

static void refused(int sm) {
    char got[160] = "";
    const char *a = NULL, *v = NULL;
    int ok = h3_cuda_kernels_for(sm, got, sizeof got, &a, &v);
    CHECK(!ok, "sm_%d: accepted with %s", sm, got);
    CHECK(strstr(got, H3_CUDA_TARGETS), "sm_%d: the reason names the build's targets: %s", sm, got);
}

static void test_images(void) {
    expect(80, "sm_80", "mma.sync", "mma.sync");
    expect(86, "sm_80", "mma.sync", "mma.sync");
    expect(89, "sm_80", "mma.sync", "mma.sync");
    expect(90, "sm_90a", "wgmma-fa3-n192", "wgmma");
    expect(100, "sm_100", "mma.sync", "mma.sync");
    expect(103, "sm_100", "mma.sync", "mma.sync");
    expect(120, "sm_120", "mma.sync", "mma.sync");
    char ptx[32];
    snprintf(ptx, sizeof ptx, "sm_%d", H3_CUDA_PTX); /* the newest architecture: SASS and PTX */
    expect(H3_CUDA_PTX, ptx, "mma.sync", "mma.sync");
    snprintf(ptx, sizeof ptx, "compute_%d PTX", H3_CUDA_PTX);
    expect((H3_CUDA_PTX / 10 + 1) * 10, ptx, "mma.sync", "mma.sync"); /* a later major version */
    refused(75);
    refused(110);
}

static void test_capabilities(void) {
    char *text = h3_capabilities_describe();
    CHECK(text && strstr(text, "build: cpu cuda(" H3_CUDA_TARGETS ")"), "build line: %s", text ? text : "(null)");
    CHECK(text && strstr(text, "\ngpus: "), "the GPU count line (the element's `gpus` field): %s", text ? text : "(null)");
    CHECK(strstr(H3_CUDA_TARGETS, "sm_100") && strstr(H3_CUDA_TARGETS, "sm_120") && strstr(H3_CUDA_TARGETS, "sm_90a"),
          "targets: %s", H3_CUDA_TARGETS);
    if (text) printf("%s", text);
    free(text);
}

int main(void) {
    test_images();
    test_capabilities();
    return h3_test_finish("test_cuda_targets");
}
