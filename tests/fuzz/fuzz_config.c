/* fuzz_config: base/h3_config, the typed reader of every config.json.
 *
 * The input is parsed from memory (h3_config_parse, up to its first NUL)
 * and loaded from a file (h3_config_load, every byte); each accessor then
 * reads a list of keys the loaders use, dotted paths and odd ones, into
 * each type. */
#include "h3_fuzz.h"
#include "h3_fuzz_nest.h" /* runs of [ and { (issue 31) */

#include "base/h3_config.h"

static const char *const keys[] = {
    "", ".", "..", "a..b", ".hidden_size", "hidden_size.", "_class_name", "hidden_size", "num_layers",
    "num_attention_heads", "attention_head_dim", "patch_size", "in_channels", "text_dim", "rope_theta",
    "shift", "flow_shift", "sample_rate", "latents_mean", "latents_std", "decoder_rates", "source_path",
    "text_config", "text_config.hidden_size", "text_config.num_hidden_layers", "text_config.rope_scaling",
    "text_config.rope_scaling.mrope_section", "text_config.rope_parameters.rope_theta",
    "_minimax_h3.sigma_shift_scales.video", "_minimax_h3.sigma_shift_scales.audio",
    "metadata.kwargs.decoder_rates", "vit_decoder_kwargs.num_layers", "dmd_denoising_steps",
    "text_encoder_layer", "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p",
};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    h3_fuzz_init();
    return 0;
}

static void read_all(const h3_config *c) {
    h3_status st;
    volatile size_t sink = strlen(h3_config_path(c));
    for (size_t i = 0; i < G_N_ELEMENTS(keys); i++) {
        const char *k = keys[i];
        int64_t iv = 0, ia[64];
        double dv = 0, da[64];
        int bv = 0, n = 0;
        const char *sv = NULL;
        sink += (size_t)h3_config_has(c, k);
        if (h3_config_int(c, k, &iv, &st) != H3_OK) h3_fuzz_check_status(&st);
        if (h3_config_double(c, k, &dv, &st) != H3_OK) h3_fuzz_check_status(&st);
        if (h3_config_bool(c, k, &bv, &st) != H3_OK) h3_fuzz_check_status(&st);
        if (h3_config_string(c, k, &sv, &st) == H3_OK) sink += strlen(sv);
        else h3_fuzz_check_status(&st);
        if (h3_config_int_array(c, k, ia, 64, &n, &st) != H3_OK) h3_fuzz_check_status(&st);
        if (h3_config_double_array(c, k, da, 64, &n, &st) != H3_OK) h3_fuzz_check_status(&st);
        if (h3_config_int_array(c, k, ia, 0, &n, &st) != H3_OK) h3_fuzz_check_status(&st);
        if (h3_config_int_or(c, k, &iv, &st) != H3_OK) h3_fuzz_check_status(&st);
        if (h3_config_double_or(c, k, &dv, &st) != H3_OK) h3_fuzz_check_status(&st);
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    h3_status st;
    h3_config *c;
    char *text = g_strndup((const char *)data, size);
    if (h3_config_parse(text, "fuzz.json", &c, &st) == H3_OK) {
        read_all(c);
        h3_config_free(c);
    } else {
        h3_fuzz_check_status(&st);
    }
    g_free(text);

    char *path = h3_fuzz_write("config.json", data, size);
    if (h3_config_load(path, &c, &st) == H3_OK) {
        read_all(c);
        h3_config_free(c);
    } else {
        h3_fuzz_check_status(&st);
    }
    g_free(path);
    return 0;
}
