/* fuzz_model_config: the config loaders of the model components, which
 * read a component directory's JSON and no weights. One source, four
 * harnesses (H3_FUZZ_COMPONENT):
 *
 *   1 dit            transformer/config.json (either layout's names) ->
 *                    h3_dit_config_load, _check, the checkpoint plan of both
 *                    layouts, the RoPE frequencies
 *   2 text_encoder   text_encoder/config.json -> h3_text_encoder_config_load,
 *                    the tensor list up to the conditioner's tap
 *   3 audio_vae      audio_vae/config.json [SEP metadata.json (native)] ->
 *                    h3_audio_vae_config_load, the decoder's tensor list
 *   4 video_vae      vae/config.json [SEP source/config.json (native
 *                    wrapper)] -> h3_video_vae_decoder_tensors
 *
 * Input: the config.json, then optional parts for the files beside it. */
#include "h3_fuzz.h"
#include "h3_fuzz_nest.h" /* runs of [ and { (issue 31) */

#include "model/h3_audio_vae.h"
#include "model/h3_dit_plan.h"
#include "model/h3_text_encoder.h"
#include "model/h3_video_vae.h"

#ifndef H3_FUZZ_COMPONENT
#error "H3_FUZZ_COMPONENT: 1 dit, 2 text_encoder, 3 audio_vae, 4 video_vae"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    h3_fuzz_init();
    return 0;
}

static size_t planned;

G_GNUC_UNUSED static void count_dit(const char *name, int ndim, const int64_t *shape, void *user) {
    (void)user;
    if (ndim < 0 || ndim > H3_ST_MAX_DIMS) abort();
    planned += strlen(name) + (ndim ? (size_t)shape[ndim - 1] : 0);
}

G_GNUC_UNUSED static h3_status_code count_audio(void *opaque, const h3_audio_vae_tensor *t, h3_status *status) {
    (void)opaque; (void)status;
    if (t->ndim < 0 || t->ndim > 3) abort();
    planned += strlen(t->name);
    return ++planned > 1000000 ? H3_ERR_INVALID_ARGUMENT : H3_OK; /* stop a runaway list */
}

G_GNUC_UNUSED static h3_status_code count_video(void *opaque, const h3_video_vae_tensor *t, h3_status *status) {
    (void)opaque; (void)status;
    if (t->ndim < 0 || t->ndim > 5) abort();
    planned += strlen(t->name);
    return ++planned > 1000000 ? H3_ERR_INVALID_ARGUMENT : H3_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    h3_fuzz_remove("c");
    h3_fuzz_part parts[H3_FUZZ_MAX_PARTS];
    size_t n = h3_fuzz_split(data, size, parts, 3);
    g_free(h3_fuzz_write("c/config.json", parts[0].data, parts[0].size));
    char *dir = h3_fuzz_path("c");
    h3_status st;
    h3_status_code rc;
    planned = 0;
#if H3_FUZZ_COMPONENT == 1
    (void)n;
    h3_dit_config cfg;
    rc = h3_dit_config_load(dir, &cfg, &st);
    if (rc == H3_OK) {
        if (h3_dit_config_check("fuzz", &cfg, &st) != H3_OK) abort(); /* load applies the same checks */
        h3_dit_checkpoint_plan(&cfg, H3_DIT_DIFFUSERS, count_dit, NULL);
        h3_dit_checkpoint_plan(&cfg, H3_DIT_NATIVE, count_dit, NULL);
        if (cfg.rope_freq_dim > 0 && cfg.rope_freq_dim <= (1 << 20)) {
            float *f = malloc((size_t)cfg.rope_freq_dim * sizeof *f);
            h3_dit_rope_inv_freq(&cfg, f);
            free(f);
        }
    }
#elif H3_FUZZ_COMPONENT == 2
    (void)n;
    h3_text_encoder_config cfg;
    rc = h3_text_encoder_config_load(dir, &cfg, &st);
    if (rc == H3_OK) {
        /* The engine taps layer 50 of the release (golden_meta.json's for test models). */
        int tap = cfg.num_layers < 64 ? (int)cfg.num_layers : 64;
        h3_text_encoder_tensor_info *list = NULL;
        int count = 0;
        if (h3_text_encoder_tensor_list(&cfg, tap, &list, &count, &st) == H3_OK) {
            for (int i = 0; i < count; i++) planned += strnlen(list[i].name, sizeof list[i].name);
            free(list);
        } else {
            h3_fuzz_check_status(&st);
        }
    }
#elif H3_FUZZ_COMPONENT == 3
    if (n > 1) g_free(h3_fuzz_write("c/metadata.json", parts[1].data, parts[1].size));
    h3_audio_vae_config cfg;
    rc = h3_audio_vae_config_load(dir, &cfg, &st);
    if (rc == H3_OK) {
        if (h3_audio_vae_decoder_tensors(&cfg, count_audio, NULL, &st) != H3_OK) h3_fuzz_check_status(&st);
    }
#elif H3_FUZZ_COMPONENT == 4
    if (n > 1) g_free(h3_fuzz_write("c/source/config.json", parts[1].data, parts[1].size));
    rc = h3_video_vae_decoder_tensors(dir, count_video, NULL, &st);
#else
#error "unknown H3_FUZZ_COMPONENT"
#endif
    if (rc != H3_OK) h3_fuzz_check_status(&st);
    g_free(dir);
    return 0;
}
