/* test_preflight.c - h3_engine_preflight: what the engine would refuse,
 * found from configs, headers and the driver alone, in the engine's words:
 *
 * - the sample rate of the embedded and the official tiny model's audio
 *   VAE, equal to what h3_engine_validate plans after a load;
 * - a directory that is not a model, and a missing one;
 * - backend against the adapter's kind, read from its header (both tiny
 *   adapters), and against a dummy adapter; steps against the student;
 * - compute=cuda and GPU lists against this build and machine: an error
 *   that says what is missing (no CUDA backend, no driver, no GPU, no such
 *   GPU), and nothing on the CPU;
 * - precision: fp8 with compute=cuda-f32 and a value outside the enum are
 *   refused as open refuses them; fp8 on the CPU passes;
 * - and that it loads nothing: it runs in milliseconds on the tiny model. */
#include <glib.h>
#include <glib/gstdio.h>

#include "h3.h"
#include "h3_test.h"
#include "h3_test_engine.h"

static h3_request small_request(void) { return h3_test_small_request("a robot dancing", 2); }

static const char *adapter(const char *variant) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s/adapter_model.safetensors", h3_test_data("adapters/tiny-h3"), variant);
    return path;
}

static void test_sample_rate(void) {
    const char *dirs[] = {NULL, h3_test_data("models/tiny-h3")};
    for (size_t i = 0; i < G_N_ELEMENTS(dirs); i++) {
        h3_engine_options o = h3_engine_options_default();
        o.model_dir = dirs[i];
        o.compute = H3_COMPUTE_CPU;
        h3_preflight pf;
        h3_status st = {0};
        double t0 = (double)g_get_monotonic_time();
        h3_status_code rc = h3_engine_preflight(&o, NULL, &pf, &st);
        double ms = ((double)g_get_monotonic_time() - t0) / 1000.0;
        CHECK(rc == H3_OK, "%s: %s", dirs[i] ? dirs[i] : "default", st.message);
        CHECK(pf.sample_rate > 0 && pf.audio_channels == 2, "rate %d channels %d", pf.sample_rate,
              pf.audio_channels);
        CHECK(ms < 1000, "preflight took %.1f ms: it must load nothing", ms);
        h3_engine *e = NULL;
        h3_request r = small_request();
        h3_plan plan;
        if (h3_engine_open(&o, &e, &st) == H3_OK && h3_engine_validate(e, &r, &plan, &st) == H3_OK)
            CHECK(plan.sample_rate == pf.sample_rate, "preflight says %d Hz, the plan %d Hz", pf.sample_rate,
                  plan.sample_rate);
        else
            CHECK(0, "open/validate: %s", st.message);
        h3_engine_close(e);
        printf("preflight %s: %d Hz in %.2f ms\n", dirs[i] ? dirs[i] : h3_default_model_dir(), pf.sample_rate, ms);
    }
}

static void expect(h3_engine_options *o, h3_request *r, h3_status_code code, const char *must_say, const char *what) {
    h3_preflight pf;
    h3_status st = {0};
    h3_status_code rc = h3_engine_preflight(o, r, &pf, &st);
    CHECK(rc == code, "%s: got %s '%s', expected %s", what, h3_status_code_name(rc), st.message,
          h3_status_code_name(code));
    if (rc != H3_OK) {
        CHECK(!must_say || strstr(st.message, must_say), "%s: '%s' does not say '%s'", what, st.message, must_say);
        printf("%s: %s\n", what, st.message);
    }
}

static void test_model_dir(void) {
    char *tmp = g_dir_make_tmp("h3-preflight-XXXXXX", NULL);
    h3_engine_options o = h3_engine_options_default();
    h3_request r = small_request();
    o.model_dir = tmp;
    expect(&o, &r, H3_ERR_NOT_FOUND, "is not a MiniMax-H3 model", "empty directory");
    expect(&o, NULL, H3_ERR_NOT_FOUND, "is not a MiniMax-H3 model", "empty directory, no request");
    o.model_dir = "/nonexistent/MiniMax-H3";
    expect(&o, &r, H3_ERR_NOT_FOUND, "does not exist", "missing directory");
    g_rmdir(tmp);
    g_free(tmp);
}

static void test_adapters(void) {
    h3_engine_options o = h3_engine_options_default();
    h3_request r = small_request();
    o.model_dir = h3_test_data("models/tiny-h3");
    o.compute = H3_COMPUTE_CPU;
    r.steps = 0;
    /* backend=vsa needs a VSA adapter; the base model has none. */
    r.attention = H3_ATTENTION_VSA;
    expect(&o, &r, H3_ERR_INVALID_ARGUMENT, "backend=vsa", "vsa, no adapter");
    o.adapter_path = adapter("dense-datafree");
    expect(&o, &r, H3_ERR_INVALID_ARGUMENT, "dense FastH3 adapter", "vsa, dense adapter");
    r.attention = H3_ATTENTION_DENSE;
    expect(&o, &r, H3_OK, NULL, "fa, dense adapter");
    r.steps = 7;
    expect(&o, &r, H3_ERR_INVALID_ARGUMENT, "steps 7", "fa, dense adapter, 7 steps");
    r.steps = 0;
    o.adapter_path = adapter("vsa-datafree");
    expect(&o, &r, H3_ERR_INVALID_ARGUMENT, "FastH3 VSA adapter", "fa, vsa adapter");
    r.attention = H3_ATTENTION_VSA;
    h3_preflight pf;
    h3_status st = {0};
    CHECK(h3_engine_preflight(&o, &r, &pf, &st) == H3_OK && pf.has_adapter && pf.adapter_vsa, "vsa, vsa adapter: %s",
          st.message);
    /* A dummy adapter has the kind it is asked for. */
    o.adapter_path = NULL;
    o.load_format = H3_LOAD_DUMMY;
    o.dummy_adapter = H3_DUMMY_ADAPTER_DENSE;
    expect(&o, &r, H3_ERR_INVALID_ARGUMENT, "dummy-adapter=dense", "vsa, dummy dense adapter");
    o.dummy_adapter = H3_DUMMY_ADAPTER_VSA;
    expect(&o, &r, H3_OK, NULL, "vsa, dummy vsa adapter");
    /* A file that is not an adapter is refused from its header. */
    char *tmp = g_dir_make_tmp("h3-preflight-XXXXXX", NULL);
    char *bogus = g_build_filename(tmp, "adapter.safetensors", NULL);
    CHECK(g_file_set_contents(bogus, "{\"not\": \"safetensors\"}", -1, NULL), "write %s", bogus);
    o.load_format = H3_LOAD_SAFETENSORS;
    o.adapter_path = bogus;
    r.attention = H3_ATTENTION_DENSE;
    h3_status_code rc = h3_engine_preflight(&o, &r, &pf, &st);
    CHECK(rc == H3_ERR_FORMAT || rc == H3_ERR_IO, "bogus adapter: %s '%s'", h3_status_code_name(rc), st.message);
    g_unlink(bogus);
    g_rmdir(tmp);
    g_free(bogus);
    g_free(tmp);
}

/* What this machine has, from the capabilities text (NVML, like the
 * preflight): the number of GPUs, whether the build has CUDA. */
static void machine(int *gpus, int *cuda_built) {
    char *caps = h3_capabilities_describe();
    const char *g = strstr(caps, "\ngpus: ");
    *gpus = g ? atoi(g + 7) : 0;
    *cuda_built = strstr(caps, "build: cpu cuda") != NULL;
    free(caps);
}

static void test_devices(void) {
    h3_engine_options o = h3_engine_options_default();
    h3_request r = small_request();
    int gpus, cuda_built;
    machine(&gpus, &cuda_built);
    printf("machine: %d GPU(s), %s\n", gpus, cuda_built ? "CUDA build" : "no CUDA in this build");
    o.compute = H3_COMPUTE_CPU;
    expect(&o, &r, H3_OK, NULL, "compute=cpu");
    o.devices = "cpu:2";
    expect(&o, &r, H3_OK, NULL, "devices=cpu:2");
    o.devices = "auto";
    o.compute = H3_COMPUTE_AUTO;
    expect(&o, &r, H3_OK, NULL, "compute=auto (falls back)");
    o.devices = "0,x";
    expect(&o, &r, H3_ERR_INVALID_ARGUMENT, "0,x", "devices=0,x");

    /* compute=cuda: refused with the reason when nothing can run it. */
    o.devices = "auto";
    o.compute = H3_COMPUTE_CUDA;
    if (!cuda_built) expect(&o, &r, H3_ERR_UNSUPPORTED, "no CUDA backend", "compute=cuda, no CUDA build");
    else if (gpus == 0) expect(&o, &r, H3_ERR_DEVICE, "compute=cpu", "compute=cuda, no GPU");
    /* A GPU past the last one. */
    char list[32];
    snprintf(list, sizeof list, "%d", gpus);
    o.devices = list;
    o.compute = H3_COMPUTE_AUTO;
    if (!cuda_built) expect(&o, &r, H3_ERR_UNSUPPORTED, "no CUDA backend", "devices past the last GPU, no CUDA");
    else if (gpus == 0) expect(&o, &r, H3_ERR_DEVICE, list, "devices past the last GPU, no GPU");
    else expect(&o, &r, H3_ERR_DEVICE, "does not exist", "devices past the last GPU");
    /* Never "fewer frames or a smaller size": nothing here is about memory. */
    h3_preflight pf;
    h3_status st = {0};
    o.compute = H3_COMPUTE_CUDA;
    o.devices = "auto";
    if (h3_engine_preflight(&o, &r, &pf, &st) != H3_OK)
        CHECK(!strstr(st.message, "fewer frames") && !strstr(st.message, "smaller"), "'%s'", st.message);
}

/* Keyframes against a model without a vision tower, refused before any load;
 * accepted on the tiny model, which has one. */
static void test_keyframes(void) {
    static uint8_t px[32 * 64 * 3];
    h3_image im = {64, 32, 64 * 3, px};
    h3_request r = small_request();
    r.first_image = &im;
    h3_engine_options o = h3_engine_options_default();
    o.model_dir = h3_test_data("models/tiny-h3");
    o.compute = H3_COMPUTE_CPU;
    h3_preflight pf;
    h3_status st = {0};
    CHECK(h3_engine_preflight(&o, &r, &pf, &st) == H3_OK, "tiny model with a keyframe: %s", st.message);
    /* a copy of the tiny model whose text encoder config lacks vision_config */
    char *tmp = g_dir_make_tmp("h3-preflight-XXXXXX", NULL);
    char *cmd = g_strdup_printf("cp -r '%s/.' '%s/'", h3_test_data("models/tiny-h3"), tmp);
    CHECK(system(cmd) == 0, "copy the tiny model");
    char *cfg = g_build_filename(tmp, "text_encoder", "config.json", NULL);
    gchar *text = NULL;
    CHECK(g_file_get_contents(cfg, &text, NULL, NULL), "read %s", cfg);
    char *at = text ? strstr(text, "\"vision_config\"") : NULL;
    if (at) memcpy(at, "\"visionXconfig\"", 15);
    CHECK(at && g_file_set_contents(cfg, text, -1, NULL), "edit %s", cfg);
    o.model_dir = tmp;
    h3_status_code rc = h3_engine_preflight(&o, &r, &pf, &st);
    CHECK(rc == H3_ERR_UNSUPPORTED && strstr(st.message, "vision tower"), "no vision_config: %s '%s'",
          h3_status_code_name(rc), st.message);
    r.first_image = NULL;
    CHECK(h3_engine_preflight(&o, &r, &pf, &st) == H3_OK, "the same model without keyframes: %s", st.message);
    char *rm = g_strdup_printf("rm -rf '%s'", tmp);
    CHECK(system(rm) == 0, "remove %s", tmp);
    g_free(rm);
    g_free(text);
    g_free(cfg);
    g_free(cmd);
    g_free(tmp);
}

static void test_precision(void) {
    h3_engine_options o = h3_engine_options_default();
    h3_request r = small_request();
    o.compute = H3_COMPUTE_CUDA_F32;
    o.precision = H3_PRECISION_FP8;
    expect(&o, &r, H3_ERR_UNSUPPORTED, "precision=bf16", "fp8 with cuda-f32");
    o.compute = H3_COMPUTE_CPU;
    expect(&o, &r, H3_OK, NULL, "fp8 on the CPU");
    o.precision = (h3_precision)5;
    expect(&o, &r, H3_ERR_INVALID_ARGUMENT, "precision 5", "precision 5");
}

int main(void) {
    test_precision();
    test_keyframes();
    test_sample_rate();
    test_model_dir();
    test_adapters();
    test_devices();
    return h3_test_finish("test_preflight");
}
