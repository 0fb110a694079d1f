/* h3_audio_vae.c - the audio VAE decoder: dec_in_proj, then BigVGAN.
 *
 *   z [2, 32, Na] -> dec_in_proj (k1) -> conv_pre (k7)
 *   -> per stage: ConvTranspose1d (×rate), then the mean of the AMP blocks
 *   -> anti-aliased SnakeBeta -> conv_post (k7, 1 channel) -> clamp [-1, 1]
 *
 * An AMP block runs, per dilation d: x += conv2(act(conv1_d(act(x)))), each
 * act being upsample ×2 -> SnakeBeta -> downsample ×2. Everything is float32
 * (the reference decodes in pure fp32). Weight norm w = g·v/‖v‖ (norm over
 * all dims but 0: per output channel for Conv1d, per input channel for
 * ConvTranspose1d, whose weight is [Cin, Cout, K]) is folded once here. */
#include "model/h3_audio_vae.h"
#include "model/h3_audio_vae_impl.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/h3_config.h"
#include "base/h3_json.h"
#include "base/h3_safetensors.h"
#include "base/h3_size.h"

#define FILTER_TAPS 12 /* Kaiser-sinc resampling filter of every activation */
#define ACT_RATIO 2

typedef struct conv {
    h3_tensor w, bias; /* bias.data == NULL when the conv has none */
} conv;

typedef struct snake_act {
    h3_tensor alpha, beta, up_filter, down_filter;
} snake_act;

typedef struct amp_block {
    int kernel, n_dilations;
    const int *dilations;
    conv convs1[H3_AUDIO_VAE_MAX_DILATIONS], convs2[H3_AUDIO_VAE_MAX_DILATIONS];
    snake_act acts1[H3_AUDIO_VAE_MAX_DILATIONS], acts2[H3_AUDIO_VAE_MAX_DILATIONS];
} amp_block;

struct h3_audio_vae {
    h3_backend *b;
    h3_audio_vae_config cfg;
    conv in_proj, conv_pre, ups[H3_AUDIO_VAE_MAX_STAGES], conv_post;
    amp_block *blocks; /* n_stages × n_kernels, resblocks.{s·n_kernels + j} */
    snake_act act_post;
};

/* ---- config ----------------------------------------------------------------------- */

/* The ranges (docs/RELIABILITY.md, "Ranges and files"). Rates and kernel
 * sizes are checked one by one, then their product, the hop (samples per
 * latent), through h3_size.h: 32 kHz, hop 800 for the release. */
#define MAX_SAMPLE_RATE (1 << 22)
#define MAX_WIDTH (1 << 16)   /* latent_dim, decoder_dim */
#define MAX_KERNEL (1 << 16)  /* a rate, a kernel size */
#define MAX_HOP (1 << 20)
/* DacAudioVAE builds its attention head with 8 heads; metadata.json does not say. */
#define NATIVE_ENCODER_HEADS 8

static h3_status_code int_in_range(const h3_config *c, const char *key, int lo, int hi, int *out, h3_status *status) {
    int64_t v = 0;
    h3_status_code rc = h3_config_int_range(c, key, lo, hi, &v, status);
    if (rc == H3_OK) *out = (int)v;
    return rc;
}

static h3_status_code int_list(const h3_config *c, const char *key, int max, int *out, int *n, h3_status *status) {
    int64_t v[64];
    h3_status_code rc = h3_config_int_array_range(c, key, 1, MAX_KERNEL, v, max < 64 ? max : 64, n, status);
    for (int i = 0; rc == H3_OK && i < *n; i++) out[i] = (int)v[i];
    return rc;
}

/* The product of n rates (each in [1, MAX_KERNEL]), at most MAX_HOP. */
static h3_status_code rate_product(const char *path, const char *key, const int *rates, int n, int64_t *out,
                                   h3_status *status) {
    uint64_t hop = 1;
    for (int i = 0; i < n; i++) {
        h3_status_code rc = h3_size_mul_max(hop, (uint64_t)rates[i], MAX_HOP, &hop, status,
                                            "%s: the product of \"%s\" up to [%d]", path, key, i);
        if (rc != H3_OK) return rc;
    }
    *out = (int64_t)hop;
    return H3_OK;
}

/* resblock_dilation_sizes is a list of lists, which h3_config does not read. */
static h3_status_code read_dilations(const char *path, h3_audio_vae_config *cfg, h3_status *status) {
    JsonParser *parser;
    h3_status_code rc = h3_json_read_file(path, 64u << 20, &parser, status);
    if (rc != H3_OK) return rc;
    JsonNode *root = json_parser_get_root(parser);
    JsonObject *obj = root && JSON_NODE_HOLDS_OBJECT(root) ? json_node_get_object(root) : NULL;
    JsonNode *node = obj ? json_object_get_member(obj, "resblock_dilation_sizes") : NULL;
    if (!node || !JSON_NODE_HOLDS_ARRAY(node)) {
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: \"resblock_dilation_sizes\" is missing or not a list", path);
        goto done;
    }
    JsonArray *outer = json_node_get_array(node);
    if ((int)json_array_get_length(outer) != cfg->n_kernels) {
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: \"resblock_dilation_sizes\" has %u lists for %d resblock kernels",
                     path, json_array_get_length(outer), cfg->n_kernels);
        goto done;
    }
    for (int j = 0; j < cfg->n_kernels; j++) {
        JsonNode *e = json_array_get_element(outer, (guint)j);
        JsonArray *inner = JSON_NODE_HOLDS_ARRAY(e) ? json_node_get_array(e) : NULL;
        int n = inner ? (int)json_array_get_length(inner) : 0;
        if (n < 1 || n > H3_AUDIO_VAE_MAX_DILATIONS) {
            rc = h3_fail(status, H3_ERR_FORMAT, "%s: \"resblock_dilation_sizes\"[%d] must be a list of 1..%d integers",
                         path, j, H3_AUDIO_VAE_MAX_DILATIONS);
            goto done;
        }
        for (int i = 0; i < n; i++) {
            JsonNode *d = json_array_get_element(inner, (guint)i);
            if (!JSON_NODE_HOLDS_VALUE(d) || json_node_get_value_type(d) != G_TYPE_INT64 ||
                json_node_get_int(d) < 1 || json_node_get_int(d) > 1024) {
                rc = h3_fail(status, H3_ERR_FORMAT, "%s: \"resblock_dilation_sizes\"[%d][%d] is not a dilation", path,
                             j, i);
                goto done;
            }
            cfg->dilations[j][i] = (int)json_node_get_int(d);
        }
        cfg->n_dilations[j] = n;
    }
done:
    g_object_unref(parser);
    return rc;
}

static h3_status_code read_latent_stats(const h3_config *c, h3_audio_vae_config *cfg, h3_status *status) {
    int n;
    h3_status_code rc = h3_config_double_array(c, "latents_mean", cfg->latents_mean, H3_AUDIO_VAE_MAX_LATENT_CHANNELS,
                                               &n, status);
    if (rc != H3_OK) return rc;
    if (n != cfg->latent_channels)
        return h3_fail(status, H3_ERR_FORMAT, "%s: \"latents_mean\" has %d values for %d latent channels",
                       h3_config_path(c), n, cfg->latent_channels);
    rc = h3_config_double_array(c, "latents_std", cfg->latents_std, H3_AUDIO_VAE_MAX_LATENT_CHANNELS, &n, status);
    if (rc != H3_OK) return rc;
    if (n != cfg->latent_channels)
        return h3_fail(status, H3_ERR_FORMAT, "%s: \"latents_std\" has %d values for %d latent channels",
                       h3_config_path(c), n, cfg->latent_channels);
    return H3_OK;
}

/* The encoder's width and rates (key prefix: "" for diffusers, the
 * metadata's kwargs for the native layout). The reference refuses a VAE
 * whose encoder hop differs from the decoder's; so does this. */
static h3_status_code read_encoder(const h3_config *c, const char *prefix, h3_audio_vae_config *cfg,
                                   h3_status *status) {
    char dim_key[96], rates_key[96];
    snprintf(dim_key, sizeof dim_key, "%sencoder_dim", prefix);
    snprintf(rates_key, sizeof rates_key, "%sencoder_rates", prefix);
    int64_t hop = 1, dec = 1;
    h3_status_code rc = int_in_range(c, dim_key, 1, MAX_WIDTH, &cfg->encoder_dim, status);
    if (rc == H3_OK)
        rc = int_list(c, rates_key, H3_AUDIO_VAE_MAX_STAGES, cfg->encoder_rates, &cfg->n_encoder_stages, status);
    if (rc == H3_OK) rc = rate_product(h3_config_path(c), rates_key, cfg->encoder_rates, cfg->n_encoder_stages, &hop,
                                       status);
    if (rc == H3_OK) rc = rate_product(h3_config_path(c), "decoder_rates", cfg->rates, cfg->n_stages, &dec, status);
    if (rc != H3_OK) return rc;
    if (hop != dec)
        return h3_fail(status, H3_ERR_FORMAT, "%s: decoder_rates upsample by %lld but %s hop is %lld",
                       h3_config_path(c), (long long)dec, rates_key, (long long)hop);
    /* each stage doubles the width, up to latent_dim's conv (block 7) */
    if ((int64_t)cfg->encoder_dim << cfg->n_encoder_stages > MAX_WIDTH)
        return h3_fail(status, H3_ERR_FORMAT, "%s: %s %d doubled %d times is too wide", h3_config_path(c), dim_key,
                       cfg->encoder_dim, cfg->n_encoder_stages);
    return H3_OK;
}

/* diffusers layout: everything is in config.json. */
static h3_status_code config_diffusers(const h3_config *c, h3_audio_vae_config *cfg, h3_status *status) {
    h3_status_code rc;
    int n;
    if ((rc = int_in_range(c, "sampling_rate", 1, MAX_SAMPLE_RATE, &cfg->sample_rate, status)) != H3_OK ||
        (rc = int_in_range(c, "latent_channels", 1, H3_AUDIO_VAE_MAX_LATENT_CHANNELS, &cfg->latent_channels,
                           status)) != H3_OK ||
        (rc = int_in_range(c, "latent_dim", 1, MAX_WIDTH, &cfg->latent_dim, status)) != H3_OK ||
        (rc = int_in_range(c, "decoder_dim", 1, MAX_WIDTH, &cfg->decoder_dim, status)) != H3_OK ||
        (rc = int_list(c, "decoder_rates", H3_AUDIO_VAE_MAX_STAGES, cfg->rates, &cfg->n_stages, status)) != H3_OK ||
        (rc = int_list(c, "decoder_kernel_sizes", H3_AUDIO_VAE_MAX_STAGES, cfg->kernel_sizes, &n, status)) != H3_OK)
        return rc;
    if (n != cfg->n_stages)
        return h3_fail(status, H3_ERR_FORMAT, "%s: %d decoder_kernel_sizes for %d decoder_rates", h3_config_path(c), n,
                       cfg->n_stages);
    rc = int_list(c, "resblock_kernel_sizes", H3_AUDIO_VAE_MAX_KERNELS, cfg->resblock_kernels, &cfg->n_kernels,
                  status);
    if (rc != H3_OK) return rc;
    rc = read_dilations(h3_config_path(c), cfg, status);
    if (rc != H3_OK) return rc;
    if (h3_config_has(c, "encoder_rates")) {
        rc = read_encoder(c, "", cfg, status);
        if (rc == H3_OK) rc = int_in_range(c, "num_attention_heads", 1, MAX_WIDTH, &cfg->num_attention_heads, status);
        if (rc != H3_OK) return rc;
    }
    return read_latent_stats(c, cfg, status);
}

/* Native FL2VA layout: config.json holds the latent statistics, metadata.json
 * the DacAudioVAE kwargs; the BigVGAN tables are fixed per sample rate in the
 * original dac_audio_vae.py (only 16 kHz and 32 kHz exist). */
static h3_status_code config_native(const h3_config *c, const char *meta_path, h3_audio_vae_config *cfg,
                                    h3_status *status) {
    static const int rates16[] = {5, 5, 2, 2, 2, 2}, kernels16[] = {9, 9, 4, 4, 4, 4};
    static const int rates32[] = {5, 5, 2, 2, 2, 2, 2}, kernels32[] = {9, 9, 4, 4, 4, 4, 4};
    h3_config *m = NULL;
    h3_status_code rc = h3_config_load(meta_path, &m, status);
    if (rc != H3_OK) return rc;
    const char *type = NULL;
    int meta_channels, n_meta_rates, meta_rates[H3_AUDIO_VAE_MAX_STAGES];
    if ((rc = int_in_range(c, "latent_channels", 1, H3_AUDIO_VAE_MAX_LATENT_CHANNELS, &cfg->latent_channels,
                           status)) != H3_OK ||
        (rc = int_in_range(m, "metadata.kwargs.sample_rate", 1, MAX_SAMPLE_RATE, &cfg->sample_rate, status)) != H3_OK ||
        (rc = int_in_range(m, "metadata.kwargs.latent_dim", 1, MAX_WIDTH, &cfg->latent_dim, status)) != H3_OK ||
        (rc = int_in_range(m, "metadata.kwargs.decoder_dim", 1, MAX_WIDTH, &cfg->decoder_dim, status)) != H3_OK ||
        (rc = int_in_range(m, "metadata.kwargs.vae_latent_channels", 1, H3_AUDIO_VAE_MAX_LATENT_CHANNELS,
                           &meta_channels, status)) != H3_OK ||
        (rc = int_list(m, "metadata.kwargs.decoder_rates", H3_AUDIO_VAE_MAX_STAGES, meta_rates, &n_meta_rates,
                       status)) != H3_OK ||
        (rc = h3_config_string(m, "metadata.kwargs.decoder_type", &type, status)) != H3_OK)
        goto done;
    if (strcmp(type, "bigvgan") != 0) {
        rc = h3_fail(status, H3_ERR_UNSUPPORTED, "%s: decoder_type \"%s\" (only \"bigvgan\" exists)", meta_path, type);
        goto done;
    }
    if (meta_channels != cfg->latent_channels) {
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: vae_latent_channels %d differs from latent_channels %d in %s",
                     meta_path, meta_channels, cfg->latent_channels, h3_config_path(c));
        goto done;
    }
    const int *rates, *kernels;
    if (cfg->sample_rate == 16000) {
        rates = rates16, kernels = kernels16, cfg->n_stages = 6;
    } else if (cfg->sample_rate == 32000) {
        rates = rates32, kernels = kernels32, cfg->n_stages = 7;
    } else {
        rc = h3_fail(status, H3_ERR_UNSUPPORTED, "%s: sample_rate %d has no BigVGAN table (16000 or 32000)",
                     meta_path, cfg->sample_rate);
        goto done;
    }
    /* The original ignores decoder_rates in favour of its table; refuse a
     * metadata that disagrees rather than guess which one was meant. */
    int same = n_meta_rates == cfg->n_stages;
    for (int i = 0; same && i < n_meta_rates; i++) same = meta_rates[i] == rates[i];
    if (!same) {
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: decoder_rates differ from the BigVGAN table of %d Hz", meta_path,
                     cfg->sample_rate);
        goto done;
    }
    memcpy(cfg->rates, rates, (size_t)cfg->n_stages * sizeof *rates);
    memcpy(cfg->kernel_sizes, kernels, (size_t)cfg->n_stages * sizeof *kernels);
    cfg->n_kernels = 3;
    for (int j = 0; j < 3; j++) {
        cfg->resblock_kernels[j] = 3 + 4 * j; /* 3, 7, 11 */
        cfg->n_dilations[j] = 3;
        cfg->dilations[j][0] = 1, cfg->dilations[j][1] = 3, cfg->dilations[j][2] = 5;
    }
    if (h3_config_has(m, "metadata.kwargs.encoder_rates")) {
        rc = read_encoder(m, "metadata.kwargs.", cfg, status);
        cfg->num_attention_heads = NATIVE_ENCODER_HEADS;
    }
    if (rc == H3_OK) rc = read_latent_stats(c, cfg, status);
done:
    h3_config_free(m);
    return rc;
}

/* The shape rules the loader and decoder rely on. */
static h3_status_code config_validate(const char *path, h3_audio_vae_config *cfg, h3_status *status) {
    if (cfg->n_stages < 1) return h3_fail(status, H3_ERR_FORMAT, "%s: no decoder_rates", path);
    if (cfg->n_kernels < 1) return h3_fail(status, H3_ERR_FORMAT, "%s: no resblock_kernel_sizes", path);
    for (int s = 0; s < cfg->n_stages; s++) {
        int r = cfg->rates[s], k = cfg->kernel_sizes[s];
        /* ConvTranspose1d with padding (k−r)/2 gives exactly L·r samples only
         * when k − r is even and non-negative. */
        if (k < r || (k - r) % 2 != 0)
            return h3_fail(status, H3_ERR_UNSUPPORTED,
                           "%s: stage %d has kernel %d and rate %d (needs kernel >= rate, same parity)", path, s, k, r);
    }
    int64_t hop;
    h3_status_code rc = rate_product(path, "decoder_rates", cfg->rates, cfg->n_stages, &hop, status);
    if (rc != H3_OK) return rc;
    cfg->hop = (int)hop;
    if (cfg->decoder_dim % (1 << cfg->n_stages) != 0)
        return h3_fail(status, H3_ERR_FORMAT, "%s: decoder_dim %d does not halve %d times", path, cfg->decoder_dim,
                       cfg->n_stages);
    for (int j = 0; j < cfg->n_kernels; j++)
        if (cfg->resblock_kernels[j] % 2 == 0)
            return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: resblock kernel %d is even (length would change)", path,
                           cfg->resblock_kernels[j]);
    return H3_OK;
}

h3_status_code h3_audio_vae_config_load(const char *dir, h3_audio_vae_config *cfg, h3_status *status) {
    memset(cfg, 0, sizeof *cfg);
    if (!dir) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "audio VAE: no directory given");
    char *path = g_build_filename(dir, "config.json", NULL);
    char *meta = g_build_filename(dir, "metadata.json", NULL);
    h3_config *c = NULL;
    h3_status_code rc;
    if (!g_file_test(dir, G_FILE_TEST_IS_DIR)) {
        rc = h3_fail(status, H3_ERR_NOT_FOUND, "audio VAE: %s is not a directory", dir);
        goto done;
    }
    rc = h3_config_load(path, &c, status);
    if (rc != H3_OK) goto done;
    if (h3_config_has(c, "decoder_rates"))
        rc = config_diffusers(c, cfg, status);
    else if (g_file_test(meta, G_FILE_TEST_IS_REGULAR))
        rc = config_native(c, meta, cfg, status);
    else
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: no \"decoder_rates\" and no metadata.json beside it", path);
    if (rc == H3_OK) rc = config_validate(path, cfg, status);
done:
    h3_config_free(c);
    g_free(path);
    g_free(meta);
    return rc;
}

/* ---- the decoder's tensors ------------------------------------------------------- */

/* One walk over the decoder's tensors, module by module, the single statement
 * of which tensors a decoder of this config has: the loader (load_one) puts
 * each into its field, h3_audio_vae_decoder_tensors hands each to its caller
 * (export_one). dst: the field, NULL for a weight_v (folded with its
 * weight_g) and for the export, which has no decoder. */
typedef struct tensor_walk tensor_walk;
struct tensor_walk {
    h3_status_code (*visit)(tensor_walk *w, const h3_audio_vae_tensor *t, h3_tensor *dst, h3_status *status);
    const h3_audio_vae_config *cfg;
    h3_audio_vae *vae;             /* load_one's: where the tensors go */
    const h3_checkpoint *ck;
    const h3_st_tensor *pending_v; /* load_one's: the weight_v waiting for its weight_g */
    h3_audio_vae_tensor_fn fn;     /* export_one's */
    void *opaque;
};

/* Where a tensor sits: its module and, for an upsampler, the rate. */
typedef struct spot {
    h3_audio_vae_module module;
    int stride;
} spot;

static h3_status_code visit(tensor_walk *w, spot at, h3_audio_vae_role role, const char *prefix, const char *leaf,
                            int ndim, const int64_t *shape, h3_tensor *dst, h3_status *status) {
    char name[256];
    snprintf(name, sizeof name, "%s.%s", prefix, leaf);
    h3_audio_vae_tensor t = {.name = name, .ndim = ndim, .dtype = H3_ST_F32, .role = role, .module = at.module,
                             .stride = at.stride};
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    return w->visit(w, &t, dst, status);
}

/* A weight-normed conv: v [d0, d1, K] (Conv1d [Cout, Cin, K], ConvTranspose1d
 * [Cin, Cout, K]), g [d0, 1, 1] and a bias of bias_n elements (0 = none). */
static h3_status_code walk_conv(tensor_walk *w, spot at, const char *prefix, int64_t d0, int64_t d1, int64_t K,
                                int64_t bias_n, conv *c, h3_status *status) {
    h3_status_code rc = visit(w, at, H3_AUDIO_VAE_WN_V, prefix, "weight_v", 3, (int64_t[]){d0, d1, K}, NULL, status);
    if (rc == H3_OK)
        rc = visit(w, at, H3_AUDIO_VAE_WN_G, prefix, "weight_g", 3, (int64_t[]){d0, 1, 1}, c ? &c->w : NULL, status);
    if (rc == H3_OK && bias_n)
        rc = visit(w, at, H3_AUDIO_VAE_BIAS, prefix, "bias", 1, &bias_n, c ? &c->bias : NULL, status);
    return rc;
}

/* An anti-aliased SnakeBeta over C channels. */
static h3_status_code walk_act(tensor_walk *w, const char *prefix, int64_t C, snake_act *a, h3_status *status) {
    static const int64_t taps[3] = {1, 1, FILTER_TAPS};
    const spot at = {H3_AUDIO_VAE_ACTIVATION, 1};
    h3_status_code rc =
        visit(w, at, H3_AUDIO_VAE_SNAKE_ALPHA, prefix, "act.alpha", 1, &C, a ? &a->alpha : NULL, status);
    if (rc == H3_OK) rc = visit(w, at, H3_AUDIO_VAE_SNAKE_BETA, prefix, "act.beta", 1, &C, a ? &a->beta : NULL, status);
    if (rc == H3_OK)
        rc = visit(w, at, H3_AUDIO_VAE_FILTER_UP, prefix, "upsample.filter", 3, taps, a ? &a->up_filter : NULL, status);
    if (rc == H3_OK)
        rc = visit(w, at, H3_AUDIO_VAE_FILTER_DOWN, prefix, "downsample.lowpass.filter", 3, taps,
                   a ? &a->down_filter : NULL, status);
    return rc;
}

/* resblocks.{index}, the AMP block of resblock kernel j over C channels:
 * its 2·n activations, then convs1 and convs2. */
static h3_status_code walk_amp_block(tensor_walk *w, int index, int j, int64_t C, amp_block *blk, h3_status *status) {
    int n = w->cfg->n_dilations[j], K = w->cfg->resblock_kernels[j];
    char p[256];
    h3_status_code rc = H3_OK;
    for (int a = 0; a < 2 * n && rc == H3_OK; a++) {
        snprintf(p, sizeof p, "decoder.resblocks.%d.activations.%d", index, a);
        rc = walk_act(w, p, C, blk ? (a % 2 ? &blk->acts2[a / 2] : &blk->acts1[a / 2]) : NULL, status);
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < n && rc == H3_OK; i++) {
            snprintf(p, sizeof p, "decoder.resblocks.%d.convs%d.%d", index, k + 1, i);
            spot at = {k ? H3_AUDIO_VAE_AMP_CONV2 : H3_AUDIO_VAE_AMP_CONV1, 1};
            rc = walk_conv(w, at, p, C, C, K, C, blk ? (k ? &blk->convs2[i] : &blk->convs1[i]) : NULL, status);
        }
    return rc;
}

static h3_status_code walk_decoder(tensor_walk *w, h3_status *status) {
    const h3_audio_vae_config *cfg = w->cfg;
    h3_audio_vae *vae = w->vae;
    int64_t D = cfg->decoder_dim, Lc = cfg->latent_channels, Ld = cfg->latent_dim;
    const spot in = {H3_AUDIO_VAE_IN_PROJ, 1};
    h3_status_code rc = visit(w, in, H3_AUDIO_VAE_CONV_WEIGHT, "dec_in_proj", "weight", 3, (int64_t[]){Ld, Lc, 1},
                              vae ? &vae->in_proj.w : NULL, status);
    if (rc == H3_OK)
        rc = visit(w, in, H3_AUDIO_VAE_BIAS, "dec_in_proj", "bias", 1, &Ld, vae ? &vae->in_proj.bias : NULL, status);
    if (rc == H3_OK)
        rc = walk_conv(w, (spot){H3_AUDIO_VAE_CONV_PRE, 1}, "decoder.conv_pre", D, Ld, 7, D, vae ? &vae->conv_pre : NULL,
                       status);
    for (int s = 0; s < cfg->n_stages && rc == H3_OK; s++) {
        char prefix[64];
        int64_t Cin = D >> s, Cout = D >> (s + 1);
        snprintf(prefix, sizeof prefix, "decoder.ups.%d.0", s);
        rc = walk_conv(w, (spot){H3_AUDIO_VAE_UPSAMPLE, cfg->rates[s]}, prefix, Cin, Cout, cfg->kernel_sizes[s], Cout,
                       vae ? &vae->ups[s] : NULL, status);
        for (int j = 0; j < cfg->n_kernels && rc == H3_OK; j++) {
            int index = s * cfg->n_kernels + j;
            rc = walk_amp_block(w, index, j, Cout, vae ? &vae->blocks[index] : NULL, status);
        }
    }
    int64_t Cf = D >> cfg->n_stages;
    if (rc == H3_OK) rc = walk_act(w, "decoder.activation_post", Cf, vae ? &vae->act_post : NULL, status);
    if (rc == H3_OK)
        rc = walk_conv(w, (spot){H3_AUDIO_VAE_CONV_POST, 1}, "decoder.conv_post", 1, Cf, 7, 0,
                       vae ? &vae->conv_post : NULL, status);
    return rc;
}

static h3_status_code export_one(tensor_walk *w, const h3_audio_vae_tensor *t, h3_tensor *dst, h3_status *status) {
    (void)dst;
    return w->fn(w->opaque, t, status);
}

h3_status_code h3_audio_vae_decoder_tensors(const h3_audio_vae_config *cfg, h3_audio_vae_tensor_fn fn, void *opaque,
                                            h3_status *status) {
    if (!cfg || !fn) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "audio VAE: no config or callback");
    tensor_walk w = {.visit = export_one, .cfg = cfg, .fn = fn, .opaque = opaque};
    return walk_decoder(&w, status);
}

/* ---- dummy checkpoints (load-format dummy) ------------------------------------------ */

/* BigVGAN's anti-aliasing low-pass, kaiser_sinc_filter1d(0.25, 0.3, 12): the
 * buffer of every ×2 resampler, a constant, not a weight. */
static const float kaiser_filter[FILTER_TAPS] = {0.0020289647f, 0.0093894657f, -0.0255434588f, -0.0576573834f,
                                                 0.1285725832f, 0.4432097971f, 0.4432097971f,  0.1285725832f,
                                                 -0.0576573834f, -0.0255434588f, 0.0093894657f, 0.0020289647f};

/* h3-bench's random decoder (tools/bench/vae.c), which keeps the release's
 * decoder finite: weight_g sets each conv's output scale (w = g·v/‖v‖), 1
 * but sqrt(rate/2) for an upsampler and less where a residual branch ends
 * and for conv_post; SnakeBeta's log-scale alpha and beta near 0. */
static h3_status_code dummy_tensor(void *opaque, const h3_audio_vae_tensor *t, h3_status *status) {
    int64_t fan_in = 1;
    for (int i = 1; i < t->ndim; i++) fan_in *= t->shape[i];
    float a = sqrtf(3.0f / (float)fan_in), g = 1.0f;
    if (t->module == H3_AUDIO_VAE_UPSAMPLE) g = sqrtf((float)t->stride / 2.0f);
    else if (t->module == H3_AUDIO_VAE_AMP_CONV2) g = 0.3f;
    else if (t->module == H3_AUDIO_VAE_CONV_POST) g = 0.2f;
    switch (t->role) {
    case H3_AUDIO_VAE_CONV_WEIGHT: return h3_checkpoint_dummy_add(opaque, t->name, t->dtype, t->ndim, t->shape, -a, a, status);
    case H3_AUDIO_VAE_WN_V: return h3_checkpoint_dummy_add(opaque, t->name, t->dtype, t->ndim, t->shape, -1, 1, status);
    case H3_AUDIO_VAE_WN_G:
        return h3_checkpoint_dummy_add(opaque, t->name, t->dtype, t->ndim, t->shape, 0.9f * g, 1.1f * g, status);
    case H3_AUDIO_VAE_BIAS:
        return h3_checkpoint_dummy_add(opaque, t->name, t->dtype, t->ndim, t->shape, -0.02f, 0.02f, status);
    case H3_AUDIO_VAE_SNAKE_ALPHA:
    case H3_AUDIO_VAE_SNAKE_BETA:
        return h3_checkpoint_dummy_add(opaque, t->name, t->dtype, t->ndim, t->shape, -0.3f, 0.3f, status);
    case H3_AUDIO_VAE_FILTER_UP:
    case H3_AUDIO_VAE_FILTER_DOWN: break;
    }
    if (t->dtype != H3_ST_F32 || t->shape[2] != FILTER_TAPS)
        return h3_fail(status, H3_ERR_INTERNAL, "audio VAE: filter '%s' is not %d float32 taps", t->name, FILTER_TAPS);
    return h3_checkpoint_dummy_add_data(opaque, t->name, t->dtype, t->ndim, t->shape, kaiser_filter, status);
}

h3_status_code h3_audio_vae_dummy_checkpoint(const char *dir, uint64_t seed, h3_checkpoint **out, h3_status *status) {
    *out = NULL;
    h3_audio_vae_config cfg;
    h3_status_code rc = h3_audio_vae_config_load(dir, &cfg, status);
    if (rc != H3_OK) return rc;
    char *label = g_strdup_printf("%s (load-format dummy)", dir);
    h3_checkpoint *ck = NULL;
    rc = h3_checkpoint_dummy_new(label, seed, &ck, status);
    g_free(label);
    if (rc == H3_OK) rc = h3_audio_vae_decoder_tensors(&cfg, dummy_tensor, ck, status);
    if (rc != H3_OK) {
        h3_checkpoint_close(ck);
        return rc;
    }
    *out = ck;
    return H3_OK;
}

/* ---- weights ---------------------------------------------------------------------- */

/* w = g · v / ‖v‖ per slice of dim 0: the norm in double, then g/‖v‖ and the
 * product in float32 as torch's _weight_norm does. */
h3_status_code h3_audio_vae_fold_weight_norm(h3_backend *b, const h3_st_tensor *v, const h3_st_tensor *g,
                                            h3_tensor *out, h3_status *status) {
    const int64_t *shape = v->shape;
    if (!h3_backend_holds_data(b)) /* a measuring backend: the folded weight's place alone */
        return h3_weight_from_f32(b, NULL, H3_F32, 3, shape, out, status);
    if (h3_st_is_dummy(v) || h3_st_is_dummy(g)) {
        /* load-format dummy: w = g·v/‖v‖ has no host values to fold, but its
         * law is known: v uniform in [lo, hi) over a slice of n has ‖v‖ ≈
         * sqrt(n·E[v²]), so w is v's generator scaled by g/‖v‖, g taken at
         * the middle of its range. */
        if (!h3_st_is_dummy(v) || !h3_st_is_dummy(g))
            return h3_fail(status, H3_ERR_INTERNAL, "%s: '%s' and '%s' are not both dummy tensors", v->file_path,
                           v->name, g->name);
        double lo = v->random.lo, hi = v->random.hi, slice = (double)v->numel / (double)shape[0];
        double rms = sqrt((lo * lo + lo * hi + hi * hi) / 3.0), gain = 0.5 * ((double)g->random.lo + g->random.hi);
        h3_st_tensor w = *v;
        w.dtype = H3_ST_F32;
        w.nbytes = (size_t)w.numel * sizeof(float);
        w.random.lo = rms > 0 ? (float)(lo * gain / (rms * sqrt(slice))) : 0.0f;
        w.random.hi = rms > 0 ? (float)(hi * gain / (rms * sqrt(slice))) : 0.0f;
        return h3_weight_load(b, &w, H3_WEIGHT_F32, out, status);
    }
    size_t n = (size_t)v->numel, slice = n / (size_t)shape[0];
    float *w = malloc(n * sizeof(float) + 4), *gv = malloc((size_t)shape[0] * sizeof(float) + 4);
    h3_status_code rc;
    if (!w || !gv) {
        rc = h3_fail(status, H3_ERR_NO_MEMORY, "%s: out of host memory folding '%s'", v->file_path, v->name);
        goto done;
    }
    if ((rc = h3_st_to_f32(v, w, n, status)) != H3_OK || (rc = h3_st_to_f32(g, gv, (size_t)shape[0], status)) != H3_OK)
        goto done;
    for (int64_t o = 0; o < shape[0]; o++) {
        float *row = w + (size_t)o * slice;
        double ss = 0;
        for (size_t i = 0; i < slice; i++) ss += (double)row[i] * row[i];
        float norm = (float)sqrt(ss);
        if (!(norm > 0.0f) || !isfinite(norm)) {
            rc = h3_fail(status, H3_ERR_FORMAT, "%s: tensor '%s' slice %lld has norm %g; weight norm is undefined",
                         v->file_path, v->name, (long long)o, (double)norm);
            goto done;
        }
        float scale = gv[o] / norm;
        for (size_t i = 0; i < slice; i++) row[i] *= scale;
    }
    rc = h3_weight_from_f32(b, w, H3_F32, 3, shape, out, status);
    if (rc != H3_OK) h3_status_prefix(status, "%s: '%s'", v->file_path, v->name);
done:
    free(w);
    free(gv);
    return rc;
}

/* The loader's visit: the tensor from the checkpoint (its shape checked) onto
 * the backend in float32; a weight_v is held until its weight_g, then folded. */
static h3_status_code load_one(tensor_walk *w, const h3_audio_vae_tensor *t, h3_tensor *dst, h3_status *status) {
    const h3_st_tensor *src;
    h3_status_code rc = h3_checkpoint_get(w->ck, t->name, t->ndim, t->shape, &src, status);
    if (rc != H3_OK) return rc;
    if (t->role == H3_AUDIO_VAE_WN_V) {
        w->pending_v = src;
        return H3_OK;
    }
    if (t->role == H3_AUDIO_VAE_WN_G) return h3_audio_vae_fold_weight_norm(w->vae->b, w->pending_v, src, dst, status);
    return h3_weight_load(w->vae->b, src, H3_WEIGHT_F32, dst, status);
}

static h3_status_code load_weights(h3_audio_vae *vae, const h3_checkpoint *ck, h3_status *status) {
    const h3_audio_vae_config *cfg = &vae->cfg;
    for (int s = 0; s < cfg->n_stages; s++)
        for (int j = 0; j < cfg->n_kernels; j++) {
            amp_block *blk = &vae->blocks[s * cfg->n_kernels + j];
            blk->kernel = cfg->resblock_kernels[j];
            blk->n_dilations = cfg->n_dilations[j];
            blk->dilations = cfg->dilations[j];
        }
    tensor_walk w = {.visit = load_one, .cfg = cfg, .vae = vae, .ck = ck};
    return walk_decoder(&w, status);
}

h3_status_code h3_audio_vae_load(h3_backend *b, const char *dir, h3_audio_vae **out, h3_status *status) {
    return h3_audio_vae_load_from(b, dir, NULL, out, status);
}

h3_status_code h3_audio_vae_load_from(h3_backend *b, const char *dir, const h3_checkpoint *weights,
                                      h3_audio_vae **out, h3_status *status) {
    *out = NULL;
    if (!b) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "audio VAE: no backend");
    h3_audio_vae *vae = calloc(1, sizeof *vae);
    if (!vae) return h3_fail(status, H3_ERR_NO_MEMORY, "audio VAE: out of memory");
    vae->b = b;
    h3_checkpoint *ck = NULL;
    h3_status_code rc = h3_audio_vae_config_load(dir, &vae->cfg, status);
    if (rc == H3_OK) {
        vae->blocks = calloc((size_t)(vae->cfg.n_stages * vae->cfg.n_kernels), sizeof *vae->blocks);
        if (!vae->blocks) rc = h3_fail(status, H3_ERR_NO_MEMORY, "audio VAE: out of memory");
    }
    if (rc == H3_OK && !weights) rc = h3_checkpoint_open(dir, &ck, status);
    if (rc == H3_OK) rc = load_weights(vae, weights ? weights : ck, status);
    h3_checkpoint_close(ck);
    if (rc != H3_OK) {
        h3_audio_vae_free(vae);
        h3_status_prefix(status, "loading the audio VAE from %s", dir ? dir : "(null)");
        return rc;
    }
    *out = vae;
    return H3_OK;
}

static void free_conv(h3_backend *b, conv *c) {
    h3_weight_free(b, &c->w);
    h3_weight_free(b, &c->bias);
}

static void free_act(h3_backend *b, snake_act *a) {
    h3_weight_free(b, &a->alpha);
    h3_weight_free(b, &a->beta);
    h3_weight_free(b, &a->up_filter);
    h3_weight_free(b, &a->down_filter);
}

void h3_audio_vae_free(h3_audio_vae *vae) {
    if (!vae) return;
    h3_backend *b = vae->b;
    free_conv(b, &vae->in_proj);
    free_conv(b, &vae->conv_pre);
    free_conv(b, &vae->conv_post);
    for (int s = 0; s < H3_AUDIO_VAE_MAX_STAGES; s++) free_conv(b, &vae->ups[s]);
    if (vae->blocks)
        for (int i = 0; i < vae->cfg.n_stages * vae->cfg.n_kernels; i++)
            for (int d = 0; d < H3_AUDIO_VAE_MAX_DILATIONS; d++) {
                free_conv(b, &vae->blocks[i].convs1[d]);
                free_conv(b, &vae->blocks[i].convs2[d]);
                free_act(b, &vae->blocks[i].acts1[d]);
                free_act(b, &vae->blocks[i].acts2[d]);
            }
    free_act(b, &vae->act_post);
    free(vae->blocks);
    free(vae);
}

const h3_audio_vae_config *h3_audio_vae_get_config(const h3_audio_vae *vae) { return &vae->cfg; }
int h3_audio_vae_sample_rate(const h3_audio_vae *vae) { return vae->cfg.sample_rate; }
int h3_audio_vae_hop(const h3_audio_vae *vae) { return vae->cfg.hop; }

/* ---- decode ----------------------------------------------------------------------- */

void h3_audio_vae_denormalize(const h3_audio_vae *vae, const float *latents, int n_latents, float *out) {
    int C = vae->cfg.latent_channels;
    for (int n = 0; n < H3_AUDIO_VAE_CHANNELS; n++)
        for (int c = 0; c < C; c++) {
            /* float32 statistics, as the pipeline's torch.tensor(list) makes them */
            float sd = (float)vae->cfg.latents_std[c], mu = (float)vae->cfg.latents_mean[c];
            size_t row = ((size_t)n * C + c) * (size_t)n_latents;
            for (int t = 0; t < n_latents; t++) out[row + t] = latents[row + t] * sd + mu;
        }
}

/* A [B, C, L] view at the start of a preallocated buffer. */
static h3_tensor view3(const h3_tensor *buf, int64_t B, int64_t C, int64_t L) {
    h3_tensor t = *buf;
    t.ndim = 3;
    t.shape[0] = B, t.shape[1] = C, t.shape[2] = L;
    t.shape[3] = t.shape[4] = 0;
    return t;
}

static void act_forward(h3_backend *b, h3_tensor *y, const h3_tensor *x, const snake_act *a) {
    h3_op_snake_beta_antialiased(b, y, x, &a->alpha, &a->beta, &a->up_filter, &a->down_filter, ACT_RATIO);
}

static const h3_tensor *bias_of(const conv *c) { return c->bias.data ? &c->bias : NULL; }

static int cancelled(const volatile int *flag) { return flag && *flag; }

/* h += conv2(act(conv1_d(act(h)))) for every dilation d; t1, t2 scratch.
 * 0 when cancelled: it polls cancel_flag before each layer, because on the
 * CPU one anti-aliased activation of the last stage (the full sample rate)
 * takes about 26 ms on a 5 s clip and a whole block about 200 ms: a poll
 * per block would let a stop wait that long. */
static int amp_forward(h3_backend *b, const amp_block *blk, h3_tensor *h, h3_tensor *t1, h3_tensor *t2,
                       const volatile int *cancel_flag) {
    int K = blk->kernel;
    for (int i = 0; i < blk->n_dilations; i++) {
        int d = blk->dilations[i];
        if (cancelled(cancel_flag)) return 0;
        act_forward(b, t1, h, &blk->acts1[i]);
        if (cancelled(cancel_flag)) return 0;
        h3_op_conv1d(b, t2, t1, &blk->convs1[i].w, bias_of(&blk->convs1[i]), 1, d * (K - 1) / 2, d, 1);
        if (cancelled(cancel_flag)) return 0;
        act_forward(b, t1, t2, &blk->acts2[i]);
        if (cancelled(cancel_flag)) return 0;
        h3_op_conv1d(b, t2, t1, &blk->convs2[i].w, bias_of(&blk->convs2[i]), 1, (K - 1) / 2, 1, 1);
        h3_op_add(b, h, h, t2);
    }
    return 1;
}

/* The decoder proper on z [2, C, Na] (device), leaving [2, 1, Na·hop] in
 * *wave. buf[0..4] are five buffers of the largest activation size; every
 * stage keeps C·L constant-ish, so they are reused stage after stage. */
static h3_status_code decode_device(h3_audio_vae *vae, const h3_tensor *z, h3_tensor buf[5], h3_tensor *wave,
                                    const volatile int *cancel_flag, h3_status *status) {
    h3_backend *b = vae->b;
    const h3_audio_vae_config *cfg = &vae->cfg;
    int64_t B = H3_AUDIO_VAE_CHANNELS, L = z->shape[2], C = cfg->decoder_dim;
    h3_tensor h = view3(&buf[0], B, cfg->latent_dim, L);
    h3_op_conv1d(b, &h, z, &vae->in_proj.w, &vae->in_proj.bias, 1, 0, 1, 1);
    h3_tensor x = view3(&buf[1], B, C, L);
    h3_op_conv1d(b, &x, &h, &vae->conv_pre.w, bias_of(&vae->conv_pre), 1, 3, 1, 1);
    for (int s = 0; s < cfg->n_stages; s++) {
        int r = cfg->rates[s], k = cfg->kernel_sizes[s];
        h3_tensor y = view3(&buf[0], B, C / 2, L * r);
        h3_op_conv_transpose1d(b, &y, &x, &vae->ups[s].w, bias_of(&vae->ups[s]), r, (k - r) / 2);
        C /= 2, L *= r;
        /* x's buffer becomes the accumulator of the AMP blocks' outputs. */
        h3_tensor acc = view3(&buf[1], B, C, L), hj = view3(&buf[2], B, C, L);
        h3_tensor t1 = view3(&buf[3], B, C, L), t2 = view3(&buf[4], B, C, L);
        for (int j = 0; j < cfg->n_kernels; j++) {
            if (cancelled(cancel_flag)) return h3_fail(status, H3_ERR_CANCELLED, "audio VAE decode cancelled");
            h3_tensor *dst = j == 0 ? &acc : &hj;
            h3_op_copy(b, dst, &y);
            if (!amp_forward(b, &vae->blocks[s * cfg->n_kernels + j], dst, &t1, &t2, cancel_flag))
                return h3_fail(status, H3_ERR_CANCELLED, "audio VAE decode cancelled");
            if (j > 0) h3_op_add(b, &acc, &acc, &hj);
        }
        if (cfg->n_kernels > 1) h3_op_scale(b, &acc, &acc, 1.0f / (float)cfg->n_kernels);
        x = acc;
        h3_status_code rc = h3_backend_check(b, status);
        if (rc != H3_OK) return rc;
    }
    if (cancelled(cancel_flag)) return h3_fail(status, H3_ERR_CANCELLED, "audio VAE decode cancelled");
    h3_tensor t = view3(&buf[0], B, C, L);
    act_forward(b, &t, &x, &vae->act_post);
    *wave = view3(&buf[2], B, 1, L);
    h3_op_conv1d(b, wave, &t, &vae->conv_post.w, NULL, 1, 3, 1, 1);
    h3_op_clamp(b, wave, wave, -1.0f, 1.0f);
    return h3_backend_check(b, status);
}

/* Largest [2, C, L] activation of the decode. */
static int64_t max_activation(const h3_audio_vae_config *cfg, int64_t Na) {
    int64_t m = (int64_t)cfg->latent_dim * Na, C = cfg->decoder_dim, L = Na;
    if (C * L > m) m = C * L;
    for (int s = 0; s < cfg->n_stages; s++) {
        C /= 2, L *= cfg->rates[s];
        if (C * L > m) m = C * L;
    }
    return m * H3_AUDIO_VAE_CHANNELS;
}

h3_status_code h3_audio_vae_decode(h3_audio_vae *vae, const float *latents, int n_latents, float *out,
                                   const volatile int *cancel_flag, h3_status *status) {
    if (!vae || !latents || !out)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "audio VAE decode: NULL vae, latents or output");
    if (n_latents <= 0 || (int64_t)n_latents * vae->cfg.hop > ((int64_t)1 << 31))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "audio VAE decode: %d latents (need 1..%lld)", n_latents,
                       (long long)(((int64_t)1 << 31) / vae->cfg.hop));
    if (cancelled(cancel_flag)) return h3_fail(status, H3_ERR_CANCELLED, "audio VAE decode cancelled");
    h3_backend *b = vae->b;
    h3_status_code rc = h3_backend_check(b, status);
    if (rc != H3_OK) {
        h3_status_prefix(status, "audio VAE decode: the backend already failed");
        return rc;
    }
    int64_t B = H3_AUDIO_VAE_CHANNELS, C = vae->cfg.latent_channels, S = (int64_t)n_latents * vae->cfg.hop;
    float *host = malloc((size_t)(B * C * n_latents) * sizeof(float));
    if (!host) return h3_fail(status, H3_ERR_NO_MEMORY, "audio VAE decode: out of host memory");
    h3_audio_vae_denormalize(vae, latents, n_latents, host);

    size_t mark = h3_arena_mark(b);
    int64_t zshape[3] = {B, C, n_latents};
    h3_tensor z = h3_new(b, H3_F32, 3, zshape), buf[5], wave = {0};
    int64_t most = max_activation(&vae->cfg, n_latents);
    for (int i = 0; i < 5; i++) buf[i] = h3_new_1d(b, H3_F32, most);
    rc = h3_backend_check(b, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &z, host, status);
    if (rc == H3_OK) rc = decode_device(vae, &z, buf, &wave, cancel_flag, status);
    if (rc == H3_OK) rc = h3_tensor_download_f32(b, &wave, out, status);
    h3_arena_reset(b, mark);
    free(host);
    if (rc != H3_OK && rc != H3_ERR_CANCELLED)
        h3_status_prefix(status, "audio VAE decode of %lld samples", (long long)S);
    return rc;
}
