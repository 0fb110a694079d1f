/* h3_video_vae.c - the MiniMax-H3 video VAE decoder (docs/spec/h3-vaes.md §3),
 * and the loading of the encoder's weights when asked (its forward:
 * h3_video_vae_encoder.c).
 *
 * Decode = for each temporal window of 7 latents (stepping by 5), for each
 * spatial tile: post_quant_conv -> proj_in -> 36 ViT blocks over all tokens
 * of the tile plus register tokens -> norm_out -> proj_out -> unpatchify.
 * The tiles of a window are stitched into a window canvas with the exact
 * blend order of diffusers' _stitch_tiles, the canvas is cross-faded with the
 * previous window's tail, and the frames that became final are converted to
 * RGB and handed to the caller. Everything between the latent upload and the
 * finished frames happens through backend ops.
 *
 * Precision follows the official recipe (§3.8): the residual stream, the
 * norms, the layer scales and the blends' inputs are what torch would have
 * under fp16 autocast when the backend computes in 16 bits (act dtype F16),
 * and plain float32 on the CPU backend (the goldens). */
#include "model/h3_video_vae.h"
#include "model/h3_video_vae_impl.h"

#include <glib.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/h3_config.h"
#include "base/h3_file.h"
#include "base/h3_safetensors.h"

#define MAX_LATENT_CHANNELS 64
#define MAX_BATCH 8 /* spatial tiles decoded together: a row of 1280 px is 7 */

typedef struct vae_block {
    h3_tensor norm1, norm2, scale1, scale2;
    h3_tensor wq, bq, wk, bk, wv, bv, wo, bo;
    h3_tensor w1, b1, w2, b2;
} vae_block;

struct h3_video_vae {
    h3_backend *b;
    /* decoder shape */
    int z_channels, out_channels;
    int ratio, ratio_t; /* patch size = spatial / temporal compression */
    int dim, heads, head_dim, rot_dim, n_layers, n_registers, ffn_dim;
    double rope_theta;
    float norm_eps;
    int value_first; /* SwiGLU fc1 layout: 1 diffusers [value; gate], 0 native [gate; value] */
    /* temporal geometry (D _decode) */
    int clip_length, token_drop;
    int frame_pre_padding, tokens_chunk, token_overlap, frame_overlap;
    /* spatial tiling */
    int tile, min_overlap;
    h3_dtype act; /* activations between norms: F32 on the CPU, F16 on 16-bit backends */
    float latents_mean[MAX_LATENT_CHANNELS], latents_std[MAX_LATENT_CHANNELS];
    h3_tensor mean_t, std_t; /* F32 [C] */
    /* weights */
    h3_tensor pq_w, pq_b, in_w, in_b, registers, norm_out_w, norm_out_b, out_w, out_b;
    vae_block *blocks;
    h3_video_progress_fn progress;
    void *progress_opaque;
    h3_tp tp; /* tiles round-robin over the ranks, rank 0 stitches (H3_TP_SINGLE: all here) */
    h3_vae_encoder *enc; /* NULL unless loaded with h3_video_vae_options.encoder */
};

static const float pixel_mean[3] = {0.485f, 0.456f, 0.406f};
static const float pixel_std[3] = {0.229f, 0.224f, 0.225f};

/* ---- configuration -------------------------------------------------------------- */

static h3_status_code product_of(const h3_config *c, const char *key, int *out, h3_status *status) {
    int64_t f[16];
    int n = 0;
    h3_status_code rc = h3_config_int_array(c, key, f, 16, &n, status);
    if (rc != H3_OK) return rc;
    /* Each factor and the running product stay in [1, 1024], checked before
     * the multiplication: a factor such as 4294967296 must neither overflow
     * nor wrap to 0 and pass the bound (a divide by zero later). */
    int64_t p = 1;
    for (int i = 0; i < n; i++) {
        if (f[i] < 1 || f[i] > 1024 || p > 1024 / f[i])
            return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\"[%d] = %lld: the factors must multiply to 1..1024",
                           h3_config_path(c), key, i, (long long)f[i]);
        p *= f[i];
    }
    *out = (int)p;
    return H3_OK;
}

/* Every integer of the config has its range here (docs/RELIABILITY.md,
 * "Ranges and files"); they keep dim = heads·head_dim and the FFN width
 * inside int32. */
static h3_status_code get_int(const h3_config *c, const char *key, int lo, int hi, int *out, h3_status *status) {
    int64_t v = 0;
    h3_status_code rc = h3_config_int_range(c, key, lo, hi, &v, status);
    if (rc == H3_OK) *out = (int)v;
    return rc;
}

/* The float keys: rope theta, the rotary share of a head (floor(head_dim x
 * ratio) becomes an int, so a ratio past 1 is no share) and the norm eps. */
static h3_status_code get_floats(const h3_config *c, const char *theta_key, const char *ratio_key,
                                 const char *eps_key, double *theta, double *ratio, double *eps, h3_status *status) {
    h3_status_code rc = h3_config_double_range_or(c, theta_key, 1e-3, 1e12, theta, status);
    if (rc == H3_OK) rc = h3_config_double_range_or(c, ratio_key, 0, 1, ratio, status);
    if (rc == H3_OK && eps_key) rc = h3_config_double_range_or(c, eps_key, 1e-30, 1, eps, status);
    return rc;
}

/* Like get_int, but keeps *out when the key is absent. */
static h3_status_code get_int_or(const h3_config *c, const char *key, int lo, int hi, int *out, h3_status *status) {
    if (!h3_config_has(c, key)) return H3_OK;
    return get_int(c, key, lo, hi, out, status);
}

static h3_status_code read_latent_stats(h3_video_vae *v, const h3_config *c, h3_status *status) {
    double vals[MAX_LATENT_CHANNELS];
    const char *keys[2] = {"latents_mean", "latents_std"};
    for (int k = 0; k < 2; k++) {
        int n = 0;
        h3_status_code rc = h3_config_double_array(c, keys[k], vals, MAX_LATENT_CHANNELS, &n, status);
        if (rc != H3_OK) return rc;
        if (n != v->z_channels)
            return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" has %d entries, the latent has %d channels",
                           h3_config_path(c), keys[k], n, v->z_channels);
        for (int i = 0; i < n; i++) {
            if (k == 1 && !(vals[i] > 0 && vals[i] <= 1e30))
                return h3_fail(status, H3_ERR_FORMAT, "%s: latents_std[%d] = %g", h3_config_path(c), i, vals[i]);
            (k ? v->latents_std : v->latents_mean)[i] = (float)vals[i];
        }
    }
    return H3_OK;
}

/* diffusers vae/config.json (AutoencoderKLMiniMaxH3). */
static h3_status_code read_diffusers_config(h3_video_vae *v, const h3_config *c, h3_status *status) {
    h3_status_code rc;
    const char *cls = NULL;
    if (h3_config_has(c, "_class_name")) {
        if ((rc = h3_config_string(c, "_class_name", &cls, status)) != H3_OK) return rc;
        if (strcmp(cls, "AutoencoderKLMiniMaxH3") != 0)
            return h3_fail(status, H3_ERR_FORMAT, "%s: _class_name is \"%s\", not AutoencoderKLMiniMaxH3",
                           h3_config_path(c), cls);
    }
    if ((rc = get_int(c, "latent_channels", 1, MAX_LATENT_CHANNELS, &v->z_channels, status)) != H3_OK) return rc;
    v->out_channels = 3;
    if ((rc = get_int_or(c, "out_channels", 3, 3, &v->out_channels, status)) != H3_OK) return rc;
    if ((rc = product_of(c, "spatial_downsample_factors", &v->ratio, status)) != H3_OK) return rc;
    if ((rc = product_of(c, "temporal_downsample_factors", &v->ratio_t, status)) != H3_OK) return rc;
    if ((rc = get_int(c, "decoder_num_layers", 0, 1000, &v->n_layers, status)) != H3_OK) return rc;
    if ((rc = get_int(c, "decoder_num_attention_heads", 1, 1024, &v->heads, status)) != H3_OK) return rc;
    if ((rc = get_int(c, "decoder_attention_head_dim", 2, 1024, &v->head_dim, status)) != H3_OK) return rc;
    v->n_registers = 4;
    if ((rc = get_int_or(c, "decoder_num_register_tokens", 0, 1024, &v->n_registers, status)) != H3_OK) return rc;
    int ffn_mult = 4;
    if ((rc = get_int_or(c, "decoder_ffn_mult", 1, 64, &ffn_mult, status)) != H3_OK) return rc;
    double ratio = 0.75, eps = 1e-5;
    v->rope_theta = 100.0;
    if ((rc = get_floats(c, "decoder_rope_theta", "decoder_rope_dim_ratio", "decoder_norm_eps", &v->rope_theta, &ratio,
                         &eps, status)) != H3_OK)
        return rc;
    v->clip_length = 17;
    v->token_drop = 3;
    if ((rc = get_int_or(c, "clip_length", 1, 1000, &v->clip_length, status)) != H3_OK) return rc;
    if ((rc = get_int_or(c, "token_drop", 0, 1000, &v->token_drop, status)) != H3_OK) return rc;
    v->dim = v->heads * v->head_dim;
    v->ffn_dim = v->dim * ffn_mult;
    v->rot_dim = (int)floor(v->head_dim * ratio);
    v->norm_eps = (float)eps;
    v->value_first = 1;
    return read_latent_stats(v, c, status);
}

/* Native video_vae/config.json + source/config.json (AutoencoderKLLegacy). */
static h3_status_code read_native_config(h3_video_vae *v, const h3_config *wrap, const h3_config *src,
                                         h3_status *status) {
    h3_status_code rc;
    int use_vit = 0, causal = 1;
    if ((rc = h3_config_bool(src, "use_vit_decoder", &use_vit, status)) != H3_OK) return rc;
    if (!use_vit)
        return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: use_vit_decoder is false; only the ViT decoder exists",
                       h3_config_path(src));
    if (h3_config_has(src, "causal_decoder")) {
        if ((rc = h3_config_bool(src, "causal_decoder", &causal, status)) != H3_OK) return rc;
        if (causal)
            return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: causal_decoder is true; the release decoder is not causal",
                           h3_config_path(src));
    }
    if ((rc = get_int(src, "embed_dim", 1, MAX_LATENT_CHANNELS, &v->z_channels, status)) != H3_OK) return rc;
    int lc = v->z_channels;
    if ((rc = get_int_or(wrap, "latent_channels", 1, MAX_LATENT_CHANNELS, &lc, status)) != H3_OK) return rc;
    if (lc != v->z_channels)
        return h3_fail(status, H3_ERR_FORMAT, "%s: latent_channels %d differs from embed_dim %d in %s",
                       h3_config_path(wrap), lc, v->z_channels, h3_config_path(src));
    v->out_channels = 3;
    if ((rc = get_int_or(src, "out_ch", 3, 3, &v->out_channels, status)) != H3_OK) return rc;
    if (h3_config_has(src, "vae_ratio")) {
        if ((rc = get_int(src, "vae_ratio", 1, 1024, &v->ratio, status)) != H3_OK) return rc;
    } else if ((rc = product_of(src, "space_down", &v->ratio, status)) != H3_OK) {
        return rc;
    }
    if (h3_config_has(src, "vae_ratio_t")) {
        if ((rc = get_int(src, "vae_ratio_t", 1, 1024, &v->ratio_t, status)) != H3_OK) return rc;
    } else if ((rc = product_of(src, "time_down", &v->ratio_t, status)) != H3_OK) {
        return rc;
    }
    if ((rc = get_int(src, "vit_decoder_kwargs.num_layers", 0, 1000, &v->n_layers, status)) != H3_OK) return rc;
    if ((rc = get_int(src, "vit_decoder_kwargs.heads", 1, 1024, &v->heads, status)) != H3_OK) return rc;
    if ((rc = get_int(src, "vit_decoder_kwargs.dim_head", 2, 1024, &v->head_dim, status)) != H3_OK) return rc;
    double ratio = 0.75;
    v->rope_theta = 100.0;
    if ((rc = get_floats(src, "vit_decoder_kwargs.rope_theta", "vit_decoder_kwargs.rope_dim_ratio", NULL,
                         &v->rope_theta, &ratio, NULL, status)) != H3_OK)
        return rc;
    v->clip_length = 17;
    v->token_drop = 3;
    if ((rc = get_int_or(wrap, "vae_clip_length", 1, 1000, &v->clip_length, status)) != H3_OK) return rc;
    if ((rc = get_int_or(wrap, "vae_token_drop", 0, 1000, &v->token_drop, status)) != H3_OK) return rc;
    if ((rc = get_int_or(wrap, "vae_tile_size", 1, 1 << 16, &v->tile, status)) != H3_OK) return rc;
    if ((rc = get_int_or(wrap, "vae_tile_overlap_min", 0, 1 << 16, &v->min_overlap, status)) != H3_OK) return rc;
    /* ViT3DDecoder defaults (not in the config): 4 registers (checked against
     * the tensor), FFN x4 (checked against w1), eps 1e-5. */
    v->n_registers = 4;
    v->dim = v->heads * v->head_dim;
    v->ffn_dim = v->dim * 4;
    v->rot_dim = (int)floor(v->head_dim * ratio);
    v->norm_eps = 1e-5f;
    v->value_first = 0;
    return read_latent_stats(v, wrap, status);
}

/* Derived values (D AutoencoderKLMiniMaxH3.__init__) and the limits of this
 * implementation, checked once so decode can trust them. */
static h3_status_code check_geometry(h3_video_vae *v, const char *path, h3_status *status) {
    int tr = v->ratio_t;
    v->frame_pre_padding = ((-v->clip_length) % tr + tr) % tr;
    v->tokens_chunk = (v->clip_length + tr - 1) / tr;
    v->token_overlap = ((-v->token_drop) % v->tokens_chunk + v->tokens_chunk) % v->tokens_chunk;
    v->frame_overlap = v->token_overlap * tr - v->frame_pre_padding;
    if (v->frame_overlap < 0) v->frame_overlap = 0;
    if (v->token_drop <= 0 || v->token_drop >= v->tokens_chunk || v->frame_overlap <= 0)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "%s: clip_length %d / token_drop %d / temporal ratio %d give no overlapping windows; only the "
                       "release geometry (17 / 3 / 4) and its like are supported",
                       path, v->clip_length, v->token_drop, tr);
    if (v->rot_dim <= 0 || v->rot_dim % 6 != 0 || v->rot_dim > v->head_dim || v->rot_dim > 384)
        return h3_fail(status, H3_ERR_FORMAT, "%s: rotary dim %d (head dim %d) is not a positive multiple of 6",
                       path, v->rot_dim, v->head_dim);
    if (v->tile % v->ratio != 0 || v->min_overlap % v->ratio != 0 || v->min_overlap >= v->tile)
        return h3_fail(status, H3_ERR_FORMAT, "%s: tile %d / overlap %d must be multiples of %d with overlap < tile",
                       path, v->tile, v->min_overlap, v->ratio);
    return H3_OK;
}

/* ---- the decoder's tensors ------------------------------------------------------- */

/* One walk over the decoder's tensors, module by module, the single statement
 * of which tensors a decoder of this config has: the loader (load_one) puts
 * each into its field, h3_video_vae_decoder_tensors hands each to its caller
 * (export_one). dst: the field, or the three of a fused native q/k/v. */
typedef struct tensor_walk tensor_walk;
struct tensor_walk {
    h3_status_code (*visit)(tensor_walk *w, const h3_video_vae_tensor *t, h3_tensor *const *dst, h3_status *status);
    h3_video_vae *v;
    const h3_checkpoint *ck;   /* load_one's */
    h3_video_vae_tensor_fn fn; /* export_one's */
    void *opaque;
};

static h3_status_code visit(tensor_walk *w, h3_video_vae_role role, h3_tensor *const *dst, int ndim,
                            const int64_t *shape, h3_status *status, const char *fmt, ...) G_GNUC_PRINTF(7, 8);
static h3_status_code visit(tensor_walk *w, h3_video_vae_role role, h3_tensor *const *dst, int ndim,
                            const int64_t *shape, h3_status *status, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    h3_video_vae_tensor t = {.name = name, .ndim = ndim, .dtype = H3_ST_F32, .role = role};
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    return w->visit(w, &t, dst, status);
}

static h3_status_code walk_linear(tensor_walk *w, const char *prefix, int64_t n_out, int64_t n_in, h3_tensor *weight,
                                  h3_tensor *bias, h3_status *status) {
    h3_status_code rc =
        visit(w, H3_VIDEO_VAE_WEIGHT, &weight, 2, (int64_t[]){n_out, n_in}, status, "%s.weight", prefix);
    if (rc == H3_OK) rc = visit(w, H3_VIDEO_VAE_BIAS, &bias, 1, &n_out, status, "%s.bias", prefix);
    return rc;
}

/* prefix.leaf, a vector of the model width. */
static h3_status_code walk_vector(tensor_walk *w, h3_video_vae_role role, const char *prefix, const char *leaf,
                                  h3_tensor *dst, h3_status *status) {
    int64_t n = w->v->dim;
    return visit(w, role, &dst, 1, &n, status, "%s.%s", prefix, leaf);
}

/* q, k, v: three linears (diffusers) or one fused per head (native). */
static h3_status_code walk_qkv(tensor_walk *w, const char *p, vae_block *k, h3_status *status) {
    int64_t D = w->v->dim;
    h3_tensor *ws[3] = {&k->wq, &k->wk, &k->wv}, *bs[3] = {&k->bq, &k->bk, &k->bv};
    h3_status_code rc = H3_OK;
    if (!w->v->value_first) {
        rc = visit(w, H3_VIDEO_VAE_QKV_WEIGHT, ws, 2, (int64_t[]){3 * D, D}, status, "%s.attn.to_qkv.weight", p);
        if (rc == H3_OK)
            rc = visit(w, H3_VIDEO_VAE_QKV_BIAS, bs, 1, (int64_t[]){3 * D}, status, "%s.attn.to_qkv.bias", p);
        return rc;
    }
    const char *parts[3] = {"attn.to_q", "attn.to_k", "attn.to_v"};
    for (int j = 0; j < 3 && rc == H3_OK; j++) {
        char name[256];
        snprintf(name, sizeof name, "%s.%s", p, parts[j]);
        rc = walk_linear(w, name, D, D, ws[j], bs[j], status);
    }
    return rc;
}

static h3_status_code walk_block(tensor_walk *w, int i, vae_block *k, h3_status *status) {
    const h3_video_vae *v = w->v;
    int native = !v->value_first;
    int64_t D = v->dim, F = v->ffn_dim;
    char p[128], out[192], fc1[192], fc2[192];
    snprintf(p, sizeof p, "decoder.transformer_blocks.%d", i);
    snprintf(out, sizeof out, "%s.%s", p, native ? "attn.to_out" : "attn.to_out.0");
    snprintf(fc1, sizeof fc1, "%s.%s", p, native ? "ff.w1" : "ff.net.0.proj");
    snprintf(fc2, sizeof fc2, "%s.%s", p, native ? "ff.w2" : "ff.net.2");
    h3_status_code rc = walk_vector(w, H3_VIDEO_VAE_NORM_WEIGHT, p, "norm1.weight", &k->norm1, status);
    if (rc == H3_OK) rc = walk_qkv(w, p, k, status);
    if (rc == H3_OK) rc = walk_linear(w, out, D, D, &k->wo, &k->bo, status);
    if (rc == H3_OK) rc = walk_vector(w, H3_VIDEO_VAE_LAYER_SCALE, p, "scale1", &k->scale1, status);
    if (rc == H3_OK) rc = walk_vector(w, H3_VIDEO_VAE_NORM_WEIGHT, p, "norm2.weight", &k->norm2, status);
    if (rc == H3_OK) rc = walk_linear(w, fc1, 2 * F, D, &k->w1, &k->b1, status);
    if (rc == H3_OK) rc = walk_linear(w, fc2, D, F, &k->w2, &k->b2, status);
    if (rc == H3_OK) rc = walk_vector(w, H3_VIDEO_VAE_LAYER_SCALE, p, "scale2", &k->scale2, status);
    return rc;
}

/* v->blocks holds n_layers blocks. */
static h3_status_code walk_decoder(tensor_walk *w, h3_status *status) {
    h3_video_vae *v = w->v;
    int64_t C = v->z_channels, D = v->dim, P = (int64_t)v->out_channels * v->ratio_t * v->ratio * v->ratio;
    h3_tensor *pq_w = &v->pq_w, *pq_b = &v->pq_b, *registers = &v->registers;
    h3_status_code rc =
        visit(w, H3_VIDEO_VAE_WEIGHT, &pq_w, 5, (int64_t[]){C, C, 1, 1, 1}, status, "post_quant_conv.weight");
    if (rc == H3_OK) rc = visit(w, H3_VIDEO_VAE_BIAS, &pq_b, 1, &C, status, "post_quant_conv.bias");
    if (rc == H3_OK)
        rc = walk_linear(w, v->value_first ? "decoder.proj_in" : "decoder.x_embedder", D, C, &v->in_w, &v->in_b,
                         status);
    if (rc == H3_OK)
        rc = visit(w, H3_VIDEO_VAE_REGISTERS, &registers, 3, (int64_t[]){1, v->n_registers, D}, status,
                   "decoder.register_tokens");
    for (int i = 0; i < v->n_layers && rc == H3_OK; i++) rc = walk_block(w, i, &v->blocks[i], status);
    if (rc == H3_OK)
        rc = walk_vector(w, H3_VIDEO_VAE_NORM_WEIGHT, "decoder.norm_out", "weight", &v->norm_out_w, status);
    if (rc == H3_OK) rc = walk_vector(w, H3_VIDEO_VAE_NORM_BIAS, "decoder.norm_out", "bias", &v->norm_out_b, status);
    if (rc == H3_OK) rc = walk_linear(w, "decoder.proj_out", P, D, &v->out_w, &v->out_b, status);
    return rc;
}

/* ---- the encoder's tensors (loaded only when asked) -------------------------------- */

/* The encoder's shape from the diffusers config (block_out_channels,
 * layers_per_block, the per-level factors, norm_num_groups, norm_eps). */
static h3_status_code read_encoder_diffusers(h3_vae_encoder *e, const h3_config *c, int64_t *ch, int64_t *sd,
                                             int64_t *td, int n[3], h3_status *status) {
    h3_status_code rc = h3_config_int_array(c, "block_out_channels", ch, H3_VAE_ENC_MAX_LEVELS, &n[0], status);
    if (rc == H3_OK) rc = h3_config_int_array(c, "spatial_downsample_factors", sd, H3_VAE_ENC_MAX_LEVELS, &n[1], status);
    if (rc == H3_OK) rc = h3_config_int_array(c, "temporal_downsample_factors", td, H3_VAE_ENC_MAX_LEVELS, &n[2], status);
    if (rc == H3_OK) rc = get_int(c, "layers_per_block", 1, H3_VAE_ENC_MAX_LAYERS, &e->layers, status);
    e->groups = 32, e->in_channels = 3;
    if (rc == H3_OK) rc = get_int_or(c, "norm_num_groups", 1, 1024, &e->groups, status);
    if (rc == H3_OK) rc = get_int_or(c, "in_channels", 1, 4, &e->in_channels, status);
    double eps = 1e-6;
    if (rc == H3_OK) rc = h3_config_double_or(c, "norm_eps", &eps, status);
    e->eps = (float)eps;
    return rc;
}

/* The same from the native source config (ch·ch_mult, num_res_blocks,
 * space_down/time_down; the original code's GroupNorm is 32 groups, 1e-6). */
static h3_status_code read_encoder_native(h3_vae_encoder *e, const h3_config *c, int64_t *ch, int64_t *sd,
                                          int64_t *td, int n[3], h3_status *status) {
    int base = 0;
    h3_status_code rc = get_int(c, "ch", 1, 1 << 16, &base, status);
    if (rc == H3_OK) rc = h3_config_int_array(c, "ch_mult", ch, H3_VAE_ENC_MAX_LEVELS, &n[0], status);
    if (rc == H3_OK) rc = h3_config_int_array(c, "space_down", sd, H3_VAE_ENC_MAX_LEVELS, &n[1], status);
    if (rc == H3_OK) rc = h3_config_int_array(c, "time_down", td, H3_VAE_ENC_MAX_LEVELS, &n[2], status);
    if (rc == H3_OK) rc = get_int(c, "num_res_blocks", 1, H3_VAE_ENC_MAX_LAYERS, &e->layers, status);
    e->groups = 32, e->in_channels = 3, e->eps = 1e-6f;
    if (rc == H3_OK) rc = get_int_or(c, "in_channels", 1, 4, &e->in_channels, status);
    for (int i = 0; rc == H3_OK && i < n[0]; i++) ch[i] *= base;
    return rc;
}

/* Per level: channels, and strides of 1 or 2 (a temporal stride needs a
 * spatial one: diffusers' Downsample3d pads space only for stride 2). */
static h3_status_code set_encoder_levels(h3_vae_encoder *e, const h3_video_vae *v, const char *path,
                                         const int64_t *ch, const int64_t *sd, const int64_t *td, const int n[3],
                                         h3_status *status) {
    if (n[0] < 1 || n[1] != n[0] || n[2] != n[0])
        return h3_fail(status, H3_ERR_FORMAT, "%s: the encoder's channel and factor lists differ in length (%d/%d/%d)",
                       path, n[0], n[1], n[2]);
    int rs = 1, rt = 1;
    e->n_levels = n[0];
    for (int i = 0; i < n[0]; i++) {
        h3_vae_enc_level *l = &e->level[i];
        if (ch[i] < 1 || ch[i] > 1 << 16 || ch[i] % e->groups || sd[i] < 1 || sd[i] > 2 || td[i] < 1 || td[i] > 2 ||
            (td[i] == 2 && sd[i] == 1))
            return h3_fail(status, H3_ERR_UNSUPPORTED,
                           "%s: encoder level %d: %lld channels (%d groups), strides t%lld s%lld; supported: channels a "
                           "multiple of the groups, strides 1 or 2, no temporal-only stride",
                           path, i, (long long)ch[i], e->groups, (long long)td[i], (long long)sd[i]);
        l->cout = (int)ch[i], l->s_stride = (int)sd[i], l->t_stride = (int)td[i];
        rs *= l->s_stride, rt *= l->t_stride;
    }
    if (rs != v->ratio || rt != v->ratio_t)
        return h3_fail(status, H3_ERR_FORMAT, "%s: the encoder compresses %dx in space and %dx in time, the VAE %d/%d",
                       path, rs, rt, v->ratio, v->ratio_t);
    return H3_OK;
}

/* The encoder's shape, from dir's config(s) of either layout. */
static h3_status_code read_encoder_config(const h3_video_vae *v, const char *dir, h3_vae_encoder *e,
                                          h3_status *status) {
    char *path = g_build_filename(dir, "config.json", NULL);
    h3_config *c = NULL, *src = NULL;
    const char *sub = NULL, *mode = "reflect";
    h3_status_code rc = h3_config_load(path, &c, status);
    if (rc == H3_OK && !v->value_first && (rc = h3_config_string(c, "source_path", &sub, status)) == H3_OK) {
        g_free(path);
        path = g_build_filename(dir, sub, "config.json", NULL);
        if ((rc = h3_config_load(path, &src, status)) == H3_OK) h3_config_free(c), c = src;
    }
    int64_t ch[H3_VAE_ENC_MAX_LEVELS], sd[H3_VAE_ENC_MAX_LEVELS], td[H3_VAE_ENC_MAX_LEVELS];
    int n[3] = {0, 0, 0};
    if (rc == H3_OK)
        rc = v->value_first ? read_encoder_diffusers(e, c, ch, sd, td, n, status)
                            : read_encoder_native(e, c, ch, sd, td, n, status);
    const char *mode_key = v->value_first ? "spatial_padding_mode" : "padding_mode";
    if (rc == H3_OK && h3_config_has(c, mode_key)) rc = h3_config_string(c, mode_key, &mode, status);
    if (rc == H3_OK && strcmp(mode, "reflect") != 0)
        rc = h3_fail(status, H3_ERR_UNSUPPORTED, "%s: %s \"%s\"; the encoder supports \"reflect\"", path, mode_key,
                     mode);
    if (rc == H3_OK) rc = set_encoder_levels(e, v, path, ch, sd, td, n, status);
    h3_config_free(c);
    g_free(path);
    return rc;
}

static h3_status_code walk_conv(tensor_walk *w, const char *prefix, int64_t cout, int64_t cin, int k, h3_vae_conv *cv,
                                h3_status *status) {
    h3_tensor *wt = &cv->w, *bt = &cv->b;
    h3_status_code rc = visit(w, H3_VIDEO_VAE_CONV_WEIGHT, &wt, 5, (int64_t[]){cout, cin, k, k, k}, status,
                              "%s.weight", prefix);
    if (rc == H3_OK) rc = visit(w, H3_VIDEO_VAE_CONV_BIAS, &bt, 1, &cout, status, "%s.bias", prefix);
    return rc;
}

static h3_status_code walk_group_norm(tensor_walk *w, const char *prefix, int64_t c, h3_tensor *wt, h3_tensor *bt,
                                      h3_status *status) {
    h3_status_code rc = visit(w, H3_VIDEO_VAE_NORM_WEIGHT, &wt, 1, &c, status, "%s.weight", prefix);
    if (rc == H3_OK) rc = visit(w, H3_VIDEO_VAE_NORM_BIAS, &bt, 1, &c, status, "%s.bias", prefix);
    return rc;
}

/* Resnet j of level l (diffusers down_blocks.l.resnets.j, native down.l.block.j). */
static h3_status_code walk_resnet(tensor_walk *w, int l, int j, h3_vae_enc_resnet *r, h3_status *status) {
    int native = !w->v->value_first;
    char p[128], n[192];
    snprintf(p, sizeof p, native ? "encoder.down.%d.block.%d" : "encoder.down_blocks.%d.resnets.%d", l, j);
    snprintf(n, sizeof n, "%s.norm1", p);
    h3_status_code rc = walk_group_norm(w, n, r->cin, &r->norm1_w, &r->norm1_b, status);
    snprintf(n, sizeof n, "%s.conv1", p);
    if (rc == H3_OK) rc = walk_conv(w, n, r->cout, r->cin, 3, &r->conv1, status);
    snprintf(n, sizeof n, "%s.norm2", p);
    if (rc == H3_OK) rc = walk_group_norm(w, n, r->cout, &r->norm2_w, &r->norm2_b, status);
    snprintf(n, sizeof n, "%s.conv2", p);
    if (rc == H3_OK) rc = walk_conv(w, n, r->cout, r->cout, 3, &r->conv2, status);
    snprintf(n, sizeof n, "%s.%s", p, native ? "nin_shortcut" : "conv_shortcut");
    if (rc == H3_OK && r->cin != r->cout) rc = walk_conv(w, n, r->cout, r->cin, 1, &r->shortcut, status);
    return rc;
}

/* w->v->enc holds the shape (read_encoder_config); the walk fills its tensors. */
static h3_status_code walk_encoder(tensor_walk *w, h3_status *status) {
    h3_vae_encoder *e = w->v->enc;
    int native = !w->v->value_first, cin = e->level[0].cout;
    h3_status_code rc = walk_conv(w, "encoder.conv_in", cin, e->in_channels, 3, &e->conv_in, status);
    for (int l = 0; l < e->n_levels && rc == H3_OK; l++) {
        h3_vae_enc_level *lv = &e->level[l];
        for (int j = 0; j < e->layers && rc == H3_OK; j++) {
            lv->res[j].cin = j ? lv->cout : cin, lv->res[j].cout = lv->cout;
            rc = walk_resnet(w, l, j, &lv->res[j], status);
        }
        char p[128];
        snprintf(p, sizeof p, native ? "encoder.down.%d.downsample.conv" : "encoder.down_blocks.%d.downsamplers.0.conv",
                 l);
        if (rc == H3_OK && lv->t_stride * lv->s_stride > 1) rc = walk_conv(w, p, lv->cout, lv->cout, 3, &lv->down, status);
        cin = lv->cout;
    }
    int64_t M = 2 * (int64_t)w->v->z_channels;
    if (rc == H3_OK) rc = walk_group_norm(w, "encoder.norm_out", cin, &e->norm_out_w, &e->norm_out_b, status);
    if (rc == H3_OK) rc = walk_conv(w, "encoder.conv_out", M, cin, 3, &e->conv_out, status);
    if (rc == H3_OK) rc = walk_conv(w, "quant_conv", M, M, 1, &e->quant, status);
    return rc;
}

/* v->enc allocated with its shape read from dir. */
static h3_status_code encoder_setup(h3_video_vae *v, const char *dir, h3_status *status) {
    v->enc = calloc(1, sizeof *v->enc);
    if (!v->enc) return h3_fail(status, H3_ERR_NO_MEMORY, "video VAE encoder: out of memory");
    return read_encoder_config(v, dir, v->enc, status);
}

static void conv_free(h3_backend *b, h3_vae_conv *cv) {
    h3_weight_free(b, &cv->w);
    h3_weight_free(b, &cv->b);
}

static void encoder_free(h3_backend *b, h3_vae_encoder *e) {
    if (!e) return;
    conv_free(b, &e->conv_in);
    for (int l = 0; l < e->n_levels; l++) {
        for (int j = 0; j < e->layers; j++) {
            h3_vae_enc_resnet *r = &e->level[l].res[j];
            h3_tensor *n[] = {&r->norm1_w, &r->norm1_b, &r->norm2_w, &r->norm2_b};
            for (size_t i = 0; i < 4; i++) h3_weight_free(b, n[i]);
            conv_free(b, &r->conv1), conv_free(b, &r->conv2), conv_free(b, &r->shortcut);
        }
        conv_free(b, &e->level[l].down);
    }
    h3_weight_free(b, &e->norm_out_w);
    h3_weight_free(b, &e->norm_out_b);
    conv_free(b, &e->conv_out), conv_free(b, &e->quant);
    free(e);
}

/* ---- weights ---------------------------------------------------------------------- */

/* Native `to_qkv` rows are interleaved per head: [h0: q k v, h1: q k v, ...].
 * Part p (0 q, 1 k, 2 v) of a weight [3D, D] or bias [3D] goes to out. */
static h3_status_code load_qkv_part(h3_video_vae *v, const h3_st_tensor *src, int part, h3_tensor *out,
                                    h3_status *status) {
    int64_t cols = src->ndim == 2 ? src->shape[1] : 1, hd = v->head_dim, D = v->dim;
    if (h3_st_is_dummy(src)) {
        /* load-format dummy: random rows have no heads to untangle; part p is rows [p·D, (p+1)·D) */
        h3_st_tensor rows = h3_st_rows(src, part * D, D);
        return h3_weight_load(v->b, &rows, H3_WEIGHT_F16, out, status);
    }
    size_t n_all = (size_t)src->numel;
    if (!h3_backend_holds_data(v->b)) { /* a measuring backend: the part's shape alone */
        h3_st_tensor t = *src;
        t.dtype = H3_ST_F32;
        t.shape[0] = D;
        t.numel = D * cols;
        t.data = NULL;
        t.nbytes = (size_t)t.numel * sizeof(float);
        return h3_weight_load(v->b, &t, H3_WEIGHT_F16, out, status);
    }
    float *all = malloc(n_all * sizeof(float)), *sel = malloc((size_t)(D * cols) * sizeof(float));
    h3_status_code rc = (all && sel) ? h3_st_to_f32(src, all, n_all, status)
                                     : h3_fail(status, H3_ERR_NO_MEMORY, "%s: no memory for '%s'", src->file_path,
                                               src->name);
    if (rc == H3_OK) {
        for (int64_t h = 0; h < v->heads; h++)
            memcpy(sel + h * hd * cols, all + (h * 3 * hd + part * hd) * cols, (size_t)(hd * cols) * sizeof(float));
        h3_st_tensor t = *src;
        t.dtype = H3_ST_F32;
        t.shape[0] = D;
        t.numel = D * cols;
        t.data = sel;
        t.nbytes = (size_t)t.numel * sizeof(float);
        rc = h3_weight_load(v->b, &t, H3_WEIGHT_F16, out, status);
    }
    free(all);
    free(sel);
    return rc;
}

/* The loader's visit: the tensor from the checkpoint (its shape checked) onto
 * the backend; linears in f16, vectors in f32, reshaped for the ops. */
static h3_status_code load_one(tensor_walk *w, const h3_video_vae_tensor *t, h3_tensor *const *dst,
                               h3_status *status) {
    h3_video_vae *v = w->v;
    const h3_st_tensor *src;
    h3_status_code rc = h3_checkpoint_get(w->ck, t->name, t->ndim, t->shape, &src, status);
    if (rc != H3_OK) return rc;
    switch (t->role) {
    case H3_VIDEO_VAE_QKV_WEIGHT:
    case H3_VIDEO_VAE_QKV_BIAS:
        for (int part = 0; part < 3 && rc == H3_OK; part++) rc = load_qkv_part(v, src, part, dst[part], status);
        return rc;
    case H3_VIDEO_VAE_WEIGHT:
    case H3_VIDEO_VAE_BIAS:
        rc = h3_weight_load(v->b, src, H3_WEIGHT_F16, dst[0], status);
        if (rc == H3_OK && t->ndim == 5) /* a 1x1x1 conv is a linear over channels */
            *dst[0] = h3_tensor_2d(dst[0], t->shape[0], t->shape[1]);
        return rc;
    case H3_VIDEO_VAE_CONV_WEIGHT: /* the encoder's: in the compute dtype, flattened for im2col + linear */
        rc = h3_weight_load(v->b, src, H3_WEIGHT_DEFAULT, dst[0], status);
        if (rc == H3_OK) *dst[0] = h3_tensor_2d(dst[0], t->shape[0], h3_tensor_numel(dst[0]) / t->shape[0]);
        return rc;
    default:
        rc = h3_weight_load(v->b, src, H3_WEIGHT_F32, dst[0], status);
        if (rc == H3_OK && t->role == H3_VIDEO_VAE_LAYER_SCALE) /* one-row tables for h3_op_gated_residual */
            *dst[0] = h3_tensor_2d(dst[0], 1, t->shape[0]);
        if (rc == H3_OK && t->role == H3_VIDEO_VAE_REGISTERS) *dst[0] = h3_tensor_2d(dst[0], t->shape[1], t->shape[2]);
        return rc;
    }
}

/* The native config does not state the register count or the FFN width:
 * take them from the tensors (ViT3DDecoder defaults 4 and 4x). */
static void native_sizes_from_tensors(h3_video_vae *v, const h3_checkpoint *ck) {
    const h3_st_tensor *t = h3_checkpoint_find(ck, "decoder.register_tokens");
    if (t && t->ndim == 3 && t->shape[0] == 1 && t->shape[2] == v->dim && t->shape[1] <= 1024)
        v->n_registers = (int)t->shape[1];
    t = v->n_layers > 0 ? h3_checkpoint_find(ck, "decoder.transformer_blocks.0.ff.w1.weight") : NULL;
    if (t && t->ndim == 2 && t->shape[0] % 2 == 0 && t->shape[1] == v->dim) v->ffn_dim = (int)(t->shape[0] / 2);
}

static h3_status_code alloc_blocks(h3_video_vae *v, h3_status *status) {
    v->blocks = calloc((size_t)(v->n_layers ? v->n_layers : 1), sizeof *v->blocks);
    return v->blocks ? H3_OK : h3_fail(status, H3_ERR_NO_MEMORY, "video VAE: out of memory");
}

static h3_status_code load_weights(h3_video_vae *v, const h3_checkpoint *ck, h3_status *status) {
    int64_t C = v->z_channels;
    if (!v->value_first) native_sizes_from_tensors(v, ck);
    tensor_walk w = {.visit = load_one, .v = v, .ck = ck};
    h3_status_code rc = alloc_blocks(v, status);
    if (rc == H3_OK) rc = walk_decoder(&w, status);
    if (rc == H3_OK) rc = h3_weight_from_f32(v->b, v->latents_mean, H3_F32, 1, &C, &v->mean_t, status);
    if (rc == H3_OK) rc = h3_weight_from_f32(v->b, v->latents_std, H3_F32, 1, &C, &v->std_t, status);
    return rc;
}

void h3_video_vae_free(h3_video_vae *v) {
    if (!v) return;
    h3_backend *b = v->b;
    h3_tensor *top[] = {&v->pq_w, &v->pq_b, &v->in_w, &v->in_b, &v->registers, &v->norm_out_w,
                        &v->norm_out_b, &v->out_w, &v->out_b, &v->mean_t, &v->std_t};
    for (size_t i = 0; i < sizeof top / sizeof *top; i++) h3_weight_free(b, top[i]);
    for (int i = 0; v->blocks && i < v->n_layers; i++) {
        vae_block *k = &v->blocks[i];
        h3_tensor *all[] = {&k->norm1, &k->norm2, &k->scale1, &k->scale2, &k->wq, &k->bq, &k->wk, &k->bk,
                            &k->wv, &k->bv, &k->wo, &k->bo, &k->w1, &k->b1, &k->w2, &k->b2};
        for (size_t j = 0; j < sizeof all / sizeof *all; j++) h3_weight_free(b, all[j]);
    }
    free(v->blocks);
    encoder_free(b, v->enc);
    free(v);
}

/* The native config names a folder (source_path) and a file in it
 * (source_safetensors_path): both stay inside the VAE's own folder, the
 * folder with every symlink resolved (a "../../elsewhere" or a link out is
 * refused), the file's last part allowed to be a link as every file of a
 * Hugging Face cache snapshot is (base/h3_file.h). */
static h3_status_code check_source_paths(const h3_config *wrap, const char *dir, const char *sub, const char *file,
                                         h3_status *status) {
    char what[1200];
    snprintf(what, sizeof what, "%s: \"source_path\"", h3_config_path(wrap));
    char *folder = g_build_filename(dir, sub, NULL);
    h3_status_code rc = g_path_is_absolute(sub)
                            ? h3_fail(status, H3_ERR_FORMAT, "%s is '%s': a folder inside '%s' is needed", what, sub,
                                      dir)
                            : h3_path_check_inside(dir, folder, what, status);
    if (rc == H3_OK) {
        snprintf(what, sizeof what, "%s: \"source_safetensors_path\"", h3_config_path(wrap));
        rc = h3_path_check_file_name(folder, file, what, status);
    }
    g_free(folder);
    return rc;
}

/* Reads the config(s) of either layout and names the weights file. */
static h3_status_code read_config(h3_video_vae *v, const char *dir, char **weights, h3_status *status) {
    char *path = g_build_filename(dir, "config.json", NULL);
    h3_config *wrap = NULL, *src = NULL;
    h3_status_code rc = h3_config_load(path, &wrap, status);
    g_free(path);
    if (rc != H3_OK) return rc;
    if (!h3_config_has(wrap, "source_path")) {
        rc = read_diffusers_config(v, wrap, status);
        *weights = g_strdup(dir);
        h3_config_free(wrap);
        return rc;
    }
    const char *sub = NULL, *file = "model.safetensors";
    rc = h3_config_string(wrap, "source_path", &sub, status);
    if (rc == H3_OK && h3_config_has(wrap, "source_safetensors_path"))
        rc = h3_config_string(wrap, "source_safetensors_path", &file, status);
    if (rc == H3_OK) rc = check_source_paths(wrap, dir, sub, file, status);
    if (rc == H3_OK) {
        char *src_path = g_build_filename(dir, sub, "config.json", NULL);
        rc = h3_config_load(src_path, &src, status);
        g_free(src_path);
    }
    if (rc == H3_OK) rc = read_native_config(v, wrap, src, status);
    if (rc == H3_OK) *weights = g_build_filename(dir, sub, file, NULL);
    h3_config_free(src);
    h3_config_free(wrap);
    return rc;
}

/* A decoder without weights: the config of dir read and checked, the defaults set. */
static h3_status_code config_from_dir(const char *dir, h3_video_vae **out, char **weights, h3_status *status) {
    *out = NULL;
    if (!g_file_test(dir, G_FILE_TEST_IS_DIR))
        return h3_fail(status, H3_ERR_NOT_FOUND, "%s: no such video VAE directory", dir);
    h3_video_vae *v = calloc(1, sizeof *v);
    if (!v) return h3_fail(status, H3_ERR_NO_MEMORY, "video VAE: out of memory");
    v->tp = H3_TP_SINGLE;
    v->tile = 256;
    v->min_overlap = 64;
    h3_status_code rc = read_config(v, dir, weights, status);
    if (rc == H3_OK) rc = check_geometry(v, dir, status);
    if (rc != H3_OK) {
        free(v);
        return rc;
    }
    *out = v;
    return H3_OK;
}

h3_status_code h3_video_vae_load(h3_backend *b, const char *dir, h3_video_vae **out, h3_status *status) {
    return h3_video_vae_load_from(b, dir, NULL, out, status);
}

h3_status_code h3_video_vae_load_from(h3_backend *b, const char *dir, const h3_checkpoint *weights,
                                      h3_video_vae **out, h3_status *status) {
    return h3_video_vae_load_with(b, dir, weights, NULL, out, status);
}

h3_status_code h3_video_vae_load_with(h3_backend *b, const char *dir, const h3_checkpoint *weights,
                                      const h3_video_vae_options *opts, h3_video_vae **out, h3_status *status) {
    *out = NULL;
    if (!b || !dir) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "video VAE: no backend or directory");
    h3_video_vae *v = NULL;
    char *path = NULL;
    h3_checkpoint *own = NULL;
    h3_status_code rc = config_from_dir(dir, &v, &path, status);
    if (rc == H3_OK) {
        v->b = b;
        v->act = h3_backend_compute_dtype(b) == H3_F32 ? H3_F32 : H3_F16;
        if (opts && opts->encoder) rc = encoder_setup(v, dir, status);
        if (rc == H3_OK && !weights) rc = h3_checkpoint_open(path, &own, status);
    }
    if (rc == H3_OK) rc = load_weights(v, weights ? weights : own, status);
    if (rc == H3_OK && v->enc) {
        tensor_walk w = {.visit = load_one, .v = v, .ck = weights ? weights : own};
        rc = walk_encoder(&w, status);
    }
    h3_checkpoint_close(own);
    g_free(path);
    if (rc != H3_OK) {
        h3_video_vae_free(v);
        return rc;
    }
    *out = v;
    return H3_OK;
}

/* The export's visit: the caller's callback. */
static h3_status_code export_one(tensor_walk *w, const h3_video_vae_tensor *t, h3_tensor *const *dst,
                                 h3_status *status) {
    (void)dst;
    return w->fn(w->opaque, t, status);
}

h3_status_code h3_video_vae_decoder_tensors(const char *dir, h3_video_vae_tensor_fn fn, void *opaque,
                                            h3_status *status) {
    if (!dir || !fn) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "video VAE: no directory or callback");
    h3_video_vae *v = NULL;
    char *weights = NULL;
    h3_status_code rc = config_from_dir(dir, &v, &weights, status);
    g_free(weights);
    if (rc == H3_OK) rc = alloc_blocks(v, status);
    tensor_walk w = {.visit = export_one, .v = v, .fn = fn, .opaque = opaque};
    if (rc == H3_OK) rc = walk_decoder(&w, status);
    if (v) free(v->blocks);
    free(v);
    return rc;
}

h3_status_code h3_video_vae_encoder_tensors(const char *dir, h3_video_vae_tensor_fn fn, void *opaque,
                                            h3_status *status) {
    if (!dir || !fn) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "video VAE: no directory or callback");
    h3_video_vae *v = NULL;
    char *weights = NULL;
    h3_status_code rc = config_from_dir(dir, &v, &weights, status);
    g_free(weights);
    if (rc == H3_OK) rc = encoder_setup(v, dir, status);
    tensor_walk w = {.visit = export_one, .v = v, .fn = fn, .opaque = opaque};
    if (rc == H3_OK) rc = walk_encoder(&w, status);
    if (v) free(v->enc);
    free(v);
    return rc;
}

int h3_video_vae_has_encoder(const h3_video_vae *v) { return v && v->enc; }

void h3_video_vae_get_info(const h3_video_vae *v, h3_video_vae_info *out) {
    memset(out, 0, sizeof *out);
    out->b = v->b;
    out->enc = v->enc;
    out->z_channels = v->z_channels, out->ratio = v->ratio, out->ratio_t = v->ratio_t;
    out->clip_length = v->clip_length, out->token_drop = v->token_drop;
    out->tile = v->tile, out->min_overlap = v->min_overlap;
    out->latents_mean = v->latents_mean, out->latents_std = v->latents_std;
    out->tp = v->tp;
}

/* load-format dummy: h3-bench's random VAE (tools/bench/vae.c), which runs
 * the release's decoder at 1280×736 with finite activations: unit-variance
 * linears, layer scales small as in a trained ViT. */
static h3_status_code dummy_tensor(void *opaque, const h3_video_vae_tensor *t, h3_status *status) {
    int64_t fan_in = 1;
    for (int i = 1; i < t->ndim; i++) fan_in *= t->shape[i];
    float a = sqrtf(3.0f / (float)fan_in), lo, hi;
    switch (t->role) {
    case H3_VIDEO_VAE_WEIGHT:
    case H3_VIDEO_VAE_CONV_WEIGHT:
    case H3_VIDEO_VAE_QKV_WEIGHT: lo = -a, hi = a; break;
    case H3_VIDEO_VAE_BIAS:
    case H3_VIDEO_VAE_CONV_BIAS:
    case H3_VIDEO_VAE_QKV_BIAS: lo = -0.02f, hi = 0.02f; break;
    case H3_VIDEO_VAE_NORM_WEIGHT: lo = 0.8f, hi = 1.2f; break;
    case H3_VIDEO_VAE_NORM_BIAS: lo = -0.1f, hi = 0.1f; break;
    case H3_VIDEO_VAE_LAYER_SCALE: lo = 0.05f, hi = 0.25f; break;
    default: lo = -1.0f, hi = 1.0f; break; /* the register tokens */
    }
    return h3_checkpoint_dummy_add(opaque, t->name, t->dtype, t->ndim, t->shape, lo, hi, status);
}

h3_status_code h3_video_vae_dummy_checkpoint(const char *dir, uint64_t seed, h3_checkpoint **out, h3_status *status) {
    return h3_video_vae_dummy_checkpoint_with(dir, seed, NULL, out, status);
}

h3_status_code h3_video_vae_dummy_checkpoint_with(const char *dir, uint64_t seed, const h3_video_vae_options *opts,
                                                  h3_checkpoint **out, h3_status *status) {
    *out = NULL;
    char *label = g_strdup_printf("%s (load-format dummy)", dir ? dir : "(null)");
    h3_checkpoint *ck = NULL;
    h3_status_code rc = h3_checkpoint_dummy_new(label, seed, &ck, status);
    g_free(label);
    if (rc == H3_OK) rc = h3_video_vae_decoder_tensors(dir, dummy_tensor, ck, status);
    if (rc == H3_OK && opts && opts->encoder) rc = h3_video_vae_encoder_tensors(dir, dummy_tensor, ck, status);
    if (rc != H3_OK) {
        h3_checkpoint_close(ck);
        return rc;
    }
    *out = ck;
    return H3_OK;
}

void h3_video_vae_set_tp(h3_video_vae *v, const h3_tp *tp) { v->tp = *tp; }

void h3_video_vae_set_progress(h3_video_vae *v, h3_video_progress_fn fn, void *opaque) {
    v->progress = fn;
    v->progress_opaque = opaque;
}

h3_status_code h3_video_vae_set_tiling(h3_video_vae *v, int tile, int min_overlap, h3_status *status) {
    if (tile <= 0 || tile % v->ratio != 0 || min_overlap < 0 || min_overlap % v->ratio != 0 || min_overlap >= tile)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "video VAE tiling: tile %d / min overlap %d must be multiples of %d with 0 <= overlap < tile",
                       tile, min_overlap, v->ratio);
    v->tile = tile;
    v->min_overlap = min_overlap;
    return H3_OK;
}

int h3_video_vae_latent_channels(const h3_video_vae *v) { return v->z_channels; }
int h3_video_vae_spatial_ratio(const h3_video_vae *v) { return v->ratio; }

static int windows_for(int T, int token_drop, int tokens_chunk) {
    if (T < 1 || (T + token_drop) % tokens_chunk != 0) return 0;
    int n = (T + token_drop) / tokens_chunk - 1;
    return n >= 1 ? n : 0;
}

int h3_video_vae_num_windows(int T) { return windows_for(T, 3, 5); }

int h3_video_vae_num_frames(const h3_video_vae *v, int T) {
    int n = windows_for(T, v->token_drop, v->tokens_chunk);
    if (!n) return -1;
    int main_frames = v->tokens_chunk * v->ratio_t - v->frame_pre_padding;
    int tail = (v->tokens_chunk + v->token_overlap) * v->ratio_t - v->tokens_chunk * v->ratio_t - v->frame_pre_padding;
    return n * main_frames + tail;
}

/* ---- the ViT forward of one tile ----------------------------------------------------- */

/* x itself when it already has dtype dt, else a converted copy. */
static h3_tensor as_dtype(h3_backend *b, const h3_tensor *x, h3_dtype dt) {
    if (x->dtype == dt) return *x;
    h3_tensor y = h3_new(b, dt, x->ndim, x->shape);
    h3_op_copy(b, &y, x);
    return y;
}

/* One ViT block on the residual x (float32): n_tiles tiles of S/n_tiles
 * rows each, stacked, so the GEMMs and row ops run over all of them at
 * once and only attention goes tile by tile. Fused where the backend has
 * the fusion, with torch's numerics kept: the RMSNorms compute in float32
 * and write the GEMMs' input dtype directly (torch's .float() ... .to(fp16));
 * q/k head norm and RoPE are one pass (h3_op_qk_norm_rope, weightless); the
 * layer-scaled residual x += scale ⊙ float(y) is h3_op_gated_residual with
 * the scale as a one-row table and the all-zero selector `sel` [S]. */
static void block_forward(h3_video_vae *v, const vae_block *k, h3_tensor *x, const h3_tensor *cos,
                          const h3_tensor *sin, const h3_tensor *sel, int n_tiles) {
    h3_backend *b = v->b;
    int64_t S = h3_tensor_rows(x), D = v->dim, St = S / n_tiles;
    size_t mark = h3_arena_mark(b);
    /* attention */
    h3_tensor n = h3_new_2d(b, v->act, S, D);
    h3_op_rms_norm(b, &n, x, &k->norm1, D, v->norm_eps);
    h3_tensor q = h3_new_2d(b, v->act, S, D), kk = h3_new_2d(b, v->act, S, D), vv = h3_new_2d(b, v->act, S, D);
    h3_op_linear(b, &q, &n, &k->wq, &k->bq);
    h3_op_linear(b, &kk, &n, &k->wk, &k->bk);
    h3_op_linear(b, &vv, &n, &k->wv, &k->bv);
    h3_op_qk_norm_rope(b, &q, NULL, v->norm_eps, cos, sin, v->heads, v->head_dim, v->rot_dim);
    h3_op_qk_norm_rope(b, &kk, NULL, v->norm_eps, cos, sin, v->heads, v->head_dim, v->rot_dim);
    h3_tensor o = h3_new_2d(b, v->act, S, D), p = h3_new_2d(b, v->act, S, D);
    for (int t = 0; t < n_tiles; t++) { /* each tile attends only to itself */
        h3_tensor ot = h3_tensor_rows_view(&o, t * St, St), qt = h3_tensor_rows_view(&q, t * St, St);
        h3_tensor kt = h3_tensor_rows_view(&kk, t * St, St), vt = h3_tensor_rows_view(&vv, t * St, St);
        h3_op_attention(b, &ot, &qt, &kt, &vt, v->heads, v->heads, v->head_dim, 0, (float)(1.0 / sqrt(v->head_dim)));
    }
    h3_op_linear(b, &p, &o, &k->wo, &k->bo);
    h3_op_gated_residual(b, x, &k->scale1, &p, sel);
    /* feed-forward */
    h3_op_rms_norm(b, &n, x, &k->norm2, D, v->norm_eps);
    h3_tensor u = h3_new_2d(b, v->act, S, 2 * (int64_t)v->ffn_dim), g = h3_new_2d(b, v->act, S, v->ffn_dim);
    h3_op_linear(b, &u, &n, &k->w1, &k->b1);
    h3_op_swiglu(b, &g, &u, v->value_first);
    h3_op_linear(b, &p, &g, &k->w2, &k->b2);
    h3_op_gated_residual(b, x, &k->scale2, &p, sel);
    h3_arena_reset(b, mark);
}

/* cos/sin [S, rot_dim] for a tile of t x h x w tokens followed by the
 * register and zero tokens at position (0,0,0); float32 exactly as D
 * MiniMaxH3VideoRotaryPosEmbed (grid 2(k+0.5)/size - 1, angle 2π·p·inv_freq,
 * [t.., h.., w..] repeated twice). */
static void rope_tables(const h3_video_vae *v, int t, int h, int w, float *cos_t, float *sin_t) {
    int rot = v->rot_dim, half = rot / 2, nf = rot / 6;
    int64_t N = (int64_t)t * h * w, S = N + v->n_registers + 1;
    float inv[128], ang[192];
    double step = 6.0 / rot;
    for (int j = 0; j < nf; j++) inv[j] = 1.0f / powf((float)v->rope_theta, (float)(j * step));
    const float two_pi = (float)(2.0 * M_PI);
    int sizes[3] = {t, h, w};
    for (int64_t s = 0; s < S; s++) {
        int idx[3] = {0, 0, 0};
        int real = s < N;
        if (real) {
            idx[0] = (int)(s / ((int64_t)h * w));
            idx[1] = (int)(s / w % h);
            idx[2] = (int)(s % w);
        }
        for (int a = 0; a < 3; a++) {
            float p = real ? 2.0f * (((float)idx[a] + 0.5f) / (float)sizes[a]) - 1.0f : 0.0f;
            float pa = two_pi * p;
            for (int j = 0; j < nf; j++) ang[a * nf + j] = pa * inv[j];
        }
        for (int c = 0; c < rot; c++) {
            cos_t[s * rot + c] = cosf(ang[c % half]);
            sin_t[s * rot + c] = sinf(ang[c % half]);
        }
    }
}

/* tokens [G·N, C] float32 (de-normalized latents of G tiles, N tokens
 * each) -> out [G·N, P] (act dtype), P = 3 x pt x p x p pixel values per
 * token. Each tile's sequence is its N tokens, the registers and the zero
 * token (S = N + R + 1 rows of x); cos/sin and sel cover G·S rows. */
static void tile_forward(h3_video_vae *v, const h3_tensor *tokens, int G, const h3_tensor *cos, const h3_tensor *sin,
                         const h3_tensor *sel, h3_tensor *out) {
    h3_backend *b = v->b;
    int64_t N = h3_tensor_rows(tokens) / G, C = v->z_channels, D = v->dim, R = v->n_registers, S = N + R + 1;
    size_t mark = h3_arena_mark(b);
    h3_tensor x = h3_new_2d(b, H3_F32, G * S, D);
    h3_tensor z = as_dtype(b, tokens, v->act), zq = h3_new_2d(b, v->act, G * N, C);
    h3_op_linear(b, &zq, &z, &v->pq_w, &v->pq_b); /* post_quant_conv */
    h3_tensor e = h3_new_2d(b, v->act, G * N, D);
    h3_op_linear(b, &e, &zq, &v->in_w, &v->in_b);
    for (int g = 0; g < G; g++) {
        h3_tensor xs = h3_tensor_rows_view(&x, g * S, N), es = h3_tensor_rows_view(&e, g * N, N);
        h3_op_copy(b, &xs, &es); /* cat(fp16 tokens, fp32 registers) promotes */
        if (R > 0) {
            h3_tensor xr = h3_tensor_rows_view(&x, g * S + N, R);
            h3_op_copy(b, &xr, &v->registers);
        }
        h3_tensor xz = h3_tensor_rows_view(&x, g * S + N + R, 1);
        h3_op_fill(b, &xz, 0.0f);
    }
    for (int i = 0; i < v->n_layers; i++) block_forward(v, &v->blocks[i], &x, cos, sin, sel, G);
    h3_tensor ln = h3_new_2d(b, v->act, G * N, D);
    for (int g = 0; g < G; g++) { /* LayerNorm in float32, written in the GEMM's dtype */
        h3_tensor xs = h3_tensor_rows_view(&x, g * S, N), ls = h3_tensor_rows_view(&ln, g * N, N);
        h3_op_layer_norm(b, &ls, &xs, &v->norm_out_w, &v->norm_out_b, v->norm_eps);
    }
    h3_op_linear(b, out, &ln, &v->out_w, &v->out_b);
    h3_arena_reset(b, mark);
}

/* ---- tiling, stitching, windows ---------------------------------------------------- */

typedef struct tile_axis {
    int n;
    int len;    /* pixels per tile (all tiles are equal) */
    int *start; /* pixels */
    int *ov;    /* overlap between tile i and i+1, pixels */
} tile_axis;

/* D _split_tiles: the fewest tiles that cover `length` with overlaps of at
 * least min_overlap, the slack spread round-robin in steps of `r`. */
static int split_tiles(int length, int tile, int min_overlap, int r, tile_axis *a) {
    int max_n = length / r + 2;
    a->start = calloc((size_t)max_n, sizeof(int));
    a->ov = calloc((size_t)max_n, sizeof(int));
    if (!a->start || !a->ov) return 0;
    if (tile >= length) {
        a->n = 1;
        a->len = length;
        return 1;
    }
    int n = (length + tile - 1) / tile;
    while (tile * n - min_overlap * (n - 1) - length < 0) n++;
    int sum = 0;
    for (int i = 0; i < n - 1; i++) sum += a->ov[i] = min_overlap;
    int remaining = tile * n - sum - length;
    for (int i = 0; i < remaining / r; i++) a->ov[i % (n - 1)] += r;
    for (int i = 0; i + 1 < n; i++) a->start[i + 1] = a->start[i] + tile - a->ov[i];
    a->n = n;
    a->len = tile;
    return 1;
}

int h3_video_vae_split_tiles(int length, int tile, int min_overlap, int ratio, int *starts, int *overlaps, int max,
                             int *tile_len) {
    if (length < 1 || ratio < 1 || tile < 1 || tile % ratio || min_overlap < 0 || min_overlap % ratio ||
        min_overlap >= tile || length % ratio)
        return -1;
    tile_axis a;
    memset(&a, 0, sizeof a);
    int n = -1;
    if (split_tiles(length, tile, min_overlap, ratio, &a) && a.n <= max) {
        n = a.n;
        memcpy(starts, a.start, (size_t)n * sizeof(int));
        if (n > 1) memcpy(overlaps, a.ov, (size_t)(n - 1) * sizeof(int));
        if (tile_len) *tile_len = a.len;
    }
    free(a.start);
    free(a.ov);
    return n;
}

static h3_view make_view(int ndim, const int64_t *shape, int64_t offset, const int64_t *stride) {
    h3_view v;
    memset(&v, 0, sizeof v);
    v.ndim = ndim;
    v.offset = offset;
    for (int i = 0; i < ndim; i++) {
        v.shape[i] = shape[i];
        v.stride[i] = stride[i];
    }
    return v;
}

/* Where decoded frames go: packed uint8 to a callback, or float32 planar. */
typedef struct frame_sink {
    h3_video_emit_fn emit;
    void *opaque;
    uint8_t *rgb_host;
    h3_tensor rgb_dev;
    float *out;        /* [3, F, H, W] */
    float *stage_host; /* [3, n, H, W] */
    h3_tensor stage;
    int total_frames;
} frame_sink;

typedef struct decode_state {
    h3_video_vae *v;
    int T, Hl, Wl, Hp, Wp;
    int wt, wf; /* latents and frames per window */
    tile_axis ty, tx;
    h3_tensor latent, cos, sin, canvas, tail;
    h3_tensor sel; /* I32 [batch·S] zeros: the layer scales' one-row table selector */
    int64_t S;     /* rows of one tile's sequence: tokens + registers + the zero token */
    int batch;     /* tiles decoded together (cos/sin/sel hold batch·S rows) */
    /* Raw tiles [3, wf, ty.len, tx.len]: 2 rows x tx.n of them, reused row
     * by row; under TP every tile of the window, views into `gathered`
     * ([rounds·N, tile elements]: round k holds tiles kN..kN+N-1). */
    h3_tensor *raw;
    int all_tiles;
    h3_tensor gathered;
} decode_state;

/* The raw tile (i, j) of the current window. */
static h3_tensor *raw_tile(decode_state *d, int i, int j) {
    return &d->raw[(d->all_tiles ? i : i % 2) * d->tx.n + j];
}

/* Frames [f0, f0+n) of the canvas become output frames [first, first+n). */
static h3_status_code sink_frames(decode_state *d, frame_sink *s, int f0, int n, int first, h3_status *status) {
    h3_backend *b = d->v->b;
    int64_t C = d->v->out_channels, HW = (int64_t)d->Hp * d->Wp;
    h3_status_code rc;
    if (s->emit) {
        h3_op_rgb8_from_planar(b, &s->rgb_dev, &d->canvas, f0, n, pixel_mean, pixel_std);
        if ((rc = h3_backend_check(b, status)) != H3_OK) return rc;
        if ((rc = h3_tensor_download_bytes(b, &s->rgb_dev, s->rgb_host, (size_t)(n * HW * C), status)) != H3_OK)
            return rc;
        if (s->emit(s->opaque, first, n, s->rgb_host) != 0)
            return h3_fail(status, H3_ERR_CANCELLED, "video VAE decode cancelled by the frame consumer");
        return H3_OK;
    }
    int64_t shape[4] = {C, n, d->Hp, d->Wp};
    int64_t cstride[4] = {(int64_t)d->wf * HW, HW, d->Wp, 1}, sstride[4] = {(int64_t)n * HW, HW, d->Wp, 1};
    h3_view cv = make_view(4, shape, (int64_t)f0 * HW, cstride), sv = make_view(4, shape, 0, sstride);
    h3_tensor st = s->stage;
    st.shape[1] = n;
    h3_op_copy_view(b, &st, &sv, &d->canvas, &cv);
    if ((rc = h3_backend_check(b, status)) != H3_OK) return rc;
    if ((rc = h3_tensor_download_f32(b, &st, s->stage_host, status)) != H3_OK) return rc;
    for (int64_t c = 0; c < C; c++)
        memcpy(s->out + (c * s->total_frames + first) * HW, s->stage_host + c * n * HW, (size_t)(n * HW) * sizeof(float));
    return H3_OK;
}

/* Gathers the tile's latents as tokens [t, y, x][c] into tok (float32,
 * [wt·th·tw, C]); the caller de-normalizes. */
static void gather_tokens(decode_state *d, h3_tensor *tok, int t0, int y0, int x0, int th, int tw) {
    h3_video_vae *v = d->v;
    int64_t C = v->z_channels, HW = (int64_t)d->Hl * d->Wl;
    int64_t shape[4] = {d->wt, th, tw, C};
    int64_t sstride[4] = {HW, d->Wl, 1, (int64_t)d->T * HW}, dstride[4] = {(int64_t)th * tw * C, tw * C, C, 1};
    h3_view sv = make_view(4, shape, t0 * HW + (int64_t)y0 * d->Wl + x0, sstride);
    h3_view dv = make_view(4, shape, 0, dstride);
    h3_op_copy_view(v->b, tok, &dv, &d->latent, &sv);
}

/* Token output [N, P] -> raw tile [3, pt*t, p*h, p*w]:
 * feature ((c*pt + dt)*p + dy)*p + dx of token (t, y, x) is pixel
 * (c, pt*t + dt, p*y + dy, p*x + dx). */
static void unpatchify(decode_state *d, const h3_tensor *tokens, h3_tensor *raw, int th, int tw) {
    h3_video_vae *v = d->v;
    int64_t p = v->ratio, pt = v->ratio_t, P = h3_tensor_cols(tokens);
    int64_t TH = raw->shape[2], TW = raw->shape[3], F = raw->shape[1];
    int64_t shape[7] = {v->out_channels, d->wt, pt, th, p, tw, p};
    int64_t sstride[7] = {pt * p * p, (int64_t)th * tw * P, p * p, (int64_t)tw * P, p, P, 1};
    int64_t dstride[7] = {F * TH * TW, pt * TH * TW, TH * TW, p * TW, TW, p, 1};
    h3_view sv = make_view(7, shape, 0, sstride), dv = make_view(7, shape, 0, dstride);
    h3_op_copy_view(v->b, raw, &dv, tokens, &sv);
}

/* D _stitch_tiles for tile (i, j): its kept region goes to the canvas, then
 * the top rows are blended with the raw tile above and the left columns
 * with the raw tile to the left (both unblended), as diffusers does. */
static void stitch_tile(decode_state *d, int i, int j) {
    h3_backend *b = d->v->b;
    int64_t C = d->v->out_channels, F = d->wf, TH = d->ty.len, TW = d->tx.len, Hp = d->Hp, Wp = d->Wp;
    int64_t oh = i < d->ty.n - 1 ? TH - d->ty.ov[i] : TH, ow = j < d->tx.n - 1 ? TW - d->tx.ov[j] : TW;
    int64_t at = (int64_t)d->ty.start[i] * Wp + d->tx.start[j];
    int64_t cstride[4] = {F * Hp * Wp, Hp * Wp, Wp, 1}, rstride[4] = {F * TH * TW, TH * TW, TW, 1};
    h3_tensor *raw = raw_tile(d, i, j);
    int64_t shape[4] = {C, F, oh, ow};
    h3_view cv = make_view(4, shape, at, cstride), rv = make_view(4, shape, 0, rstride);
    h3_op_copy_view(b, &d->canvas, &cv, raw, &rv);
    if (i > 0) {
        int e = d->ty.ov[i - 1];
        int64_t s[4] = {C, F, e < oh ? e : oh, ow};
        h3_view dv = make_view(4, s, at, cstride), av = make_view(4, s, (TH - e) * TW, rstride);
        h3_op_blend_view(b, &d->canvas, &dv, raw_tile(d, i - 1, j), &av, &d->canvas, &dv, 2, e);
    }
    if (j > 0) {
        int e = d->tx.ov[j - 1];
        int64_t s[4] = {C, F, oh, e < ow ? e : ow};
        h3_view dv = make_view(4, s, at, cstride), av = make_view(4, s, TW - e, rstride);
        h3_op_blend_view(b, &d->canvas, &dv, raw_tile(d, i, j - 1), &av, &d->canvas, &dv, 3, e);
    }
}

static int cancelled(const volatile int *flag) { return flag && *flag; }

/* G tiles through the ViT together (tile t = tiles[t] in row-major order
 * of the window, into raws[t]): one pass of GEMMs over all their tokens is
 * faster than G passes over one tile's 1,797. */
static void decode_tiles(decode_state *d, int w, const int *tiles, int G, h3_tensor *const *raws) {
    h3_video_vae *v = d->v;
    h3_backend *b = v->b;
    int th = d->ty.len / v->ratio, tw = d->tx.len / v->ratio;
    int64_t P = (int64_t)v->out_channels * v->ratio_t * v->ratio * v->ratio, N = (int64_t)d->wt * th * tw;
    size_t mark = h3_arena_mark(b);
    h3_tensor tok = h3_new_2d(b, H3_F32, G * N, v->z_channels);
    for (int g = 0; g < G; g++) {
        int i = tiles[g] / d->tx.n, j = tiles[g] % d->tx.n;
        h3_tensor tg = h3_tensor_rows_view(&tok, g * N, N);
        gather_tokens(d, &tg, w * v->tokens_chunk, d->ty.start[i] / v->ratio, d->tx.start[j] / v->ratio, th, tw);
    }
    h3_op_mul_row_vector(b, &tok, &tok, &v->std_t);
    h3_op_add_row_vector(b, &tok, &tok, &v->mean_t);
    h3_tensor out = h3_new_2d(b, v->act, G * N, P);
    h3_tensor cos = h3_tensor_rows_view(&d->cos, 0, G * d->S), sin = h3_tensor_rows_view(&d->sin, 0, G * d->S);
    h3_tensor sel = h3_tensor_rows_view(&d->sel, 0, G * d->S);
    tile_forward(v, &tok, G, &cos, &sin, &sel, &out);
    for (int g = 0; g < G; g++) {
        h3_tensor og = h3_tensor_rows_view(&out, g * N, N);
        unpatchify(d, &og, raws[g], th, tw);
    }
    h3_arena_reset(b, mark);
}

static void decode_tile(decode_state *d, int w, int i, int j, h3_tensor *raw) {
    int t = i * d->tx.n + j;
    decode_tiles(d, w, &t, 1, &raw);
}

/* Tensor parallel: rank r decodes tiles r, r+N, ... (row-major); after each
 * round of N tiles an all-gather gives every rank the round's tiles; rank 0
 * then stitches the window in the usual order. The tiles are computed by
 * the same code on the same weights, so the result is the one-rank result
 * (bit for bit on the CPU; on a GPU one rank batches a row of tiles through
 * the GEMMs, which can change their rounding). */
static h3_status_code decode_window_tp(decode_state *d, int w, const volatile int *cancel_flag, h3_status *status) {
    h3_video_vae *v = d->v;
    h3_backend *b = v->b;
    int N = v->tp.size, n_tiles = d->ty.n * d->tx.n;
    for (int first = 0; first < n_tiles; first += N) {
        if (cancelled(cancel_flag)) return h3_fail(status, H3_ERR_CANCELLED, "video VAE decode cancelled");
        int t = first + v->tp.rank;
        if (t < n_tiles) decode_tile(d, w, t / d->tx.n, t % d->tx.n, &d->raw[t]);
        h3_tensor round = h3_tensor_rows_view(&d->gathered, first, N);
        h3_tp_all_gather(&v->tp, b, &round);
        h3_status_code rc = h3_backend_check(b, status);
        if (rc != H3_OK) return rc;
    }
    if (v->tp.rank != 0) return H3_OK;
    for (int i = 0; i < d->ty.n; i++)
        for (int j = 0; j < d->tx.n; j++) stitch_tile(d, i, j);
    return h3_backend_check(b, status);
}

/* One temporal window: every tile through the ViT, stitched into the canvas. */
static h3_status_code decode_window(decode_state *d, int w, const volatile int *cancel_flag, h3_status *status) {
    h3_video_vae *v = d->v;
    h3_backend *b = v->b;
    if (d->all_tiles) return decode_window_tp(d, w, cancel_flag, status);
    /* A row of tiles at a time (at most MAX_BATCH), then its stitching. */
    for (int i = 0; i < d->ty.n; i++) {
        for (int j0 = 0; j0 < d->tx.n; j0 += d->batch) {
            if (cancelled(cancel_flag)) return h3_fail(status, H3_ERR_CANCELLED, "video VAE decode cancelled");
            int G = d->tx.n - j0 < d->batch ? d->tx.n - j0 : d->batch, tiles[MAX_BATCH];
            h3_tensor *raws[MAX_BATCH];
            for (int g = 0; g < G; g++) tiles[g] = i * d->tx.n + j0 + g, raws[g] = raw_tile(d, i, j0 + g);
            decode_tiles(d, w, tiles, G, raws);
            for (int g = 0; g < G; g++) stitch_tile(d, i, j0 + g);
            h3_status_code rc = h3_backend_check(b, status);
            if (rc != H3_OK) return rc;
        }
    }
    return H3_OK;
}

/* D _decode: the window's main frames are cross-faded with the previous
 * window's tail and are then final; the tail is kept for the next window
 * (or, after the last window, is final too). */
static h3_status_code finish_window(decode_state *d, frame_sink *s, int w, int n_windows, h3_status *status) {
    h3_video_vae *v = d->v;
    h3_backend *b = v->b;
    int64_t C = v->out_channels, HW = (int64_t)d->Hp * d->Wp;
    int chunk_frames = v->tokens_chunk * v->ratio_t;
    int main0 = v->frame_pre_padding, main_n = chunk_frames - main0;
    int tail0 = chunk_frames + v->frame_pre_padding, tail_n = d->wf - tail0;
    int64_t cstride[4] = {(int64_t)d->wf * HW, HW, d->Wp, 1}, tstride[4] = {(int64_t)tail_n * HW, HW, d->Wp, 1};
    if (w > 0) {
        int e = v->frame_overlap;
        if (e > tail_n) e = tail_n;
        if (e > main_n) e = main_n;
        int64_t shape[4] = {C, e, d->Hp, d->Wp};
        h3_view dv = make_view(4, shape, main0 * HW, cstride), av = make_view(4, shape, (tail_n - e) * HW, tstride);
        h3_op_blend_view(b, &d->canvas, &dv, &d->tail, &av, &d->canvas, &dv, 1, e);
    }
    h3_status_code rc = sink_frames(d, s, main0, main_n, w * main_n, status);
    if (rc != H3_OK) return rc;
    if (w == n_windows - 1) return sink_frames(d, s, tail0, tail_n, n_windows * main_n, status);
    int64_t shape[4] = {C, tail_n, d->Hp, d->Wp};
    h3_view sv = make_view(4, shape, tail0 * HW, cstride), tv = make_view(4, shape, 0, tstride);
    h3_op_copy_view(b, &d->tail, &tv, &d->canvas, &sv);
    return h3_backend_check(b, status);
}

/* Allocates the decode's buffers (kept for the whole decode) and uploads the
 * latents and the RoPE tables. */
static h3_status_code decode_setup(decode_state *d, const float *latents, frame_sink *s, h3_status *status) {
    h3_video_vae *v = d->v;
    h3_backend *b = v->b;
    int64_t C = v->out_channels, HW = (int64_t)d->Hp * d->Wp;
    int th = d->ty.len / v->ratio, tw = d->tx.len / v->ratio;
    int64_t lshape[4] = {v->z_channels, d->T, d->Hl, d->Wl};
    d->latent = h3_new(b, H3_F32, 4, lshape);
    int64_t S = (int64_t)d->wt * th * tw + v->n_registers + 1;
    d->S = S;
    /* Batching pays on 16-bit GPU backends (GEMMs of 1,797 rows leave SMs idle);
     * the float32 (CPU) path and tensor parallelism decode tile by tile, so
     * that every rank count gives bit-identical output there. */
    d->batch = d->all_tiles || v->act == H3_F32 ? 1 : d->tx.n < MAX_BATCH ? d->tx.n : MAX_BATCH;
    int64_t BS = d->batch * S;
    d->cos = h3_new_2d(b, H3_F32, BS, v->rot_dim);
    d->sin = h3_new_2d(b, H3_F32, BS, v->rot_dim);
    d->sel = h3_new_2d(b, H3_I32, BS, 1);
    int64_t cshape[4] = {C, d->wf, d->Hp, d->Wp};
    d->canvas = h3_new(b, v->act, 4, cshape);
    int tail_n = d->wf - v->tokens_chunk * v->ratio_t - v->frame_pre_padding;
    int64_t tshape[4] = {C, tail_n, d->Hp, d->Wp};
    d->tail = h3_new(b, v->act, 4, tshape);
    int64_t rshape[4] = {C, d->wf, d->ty.len, d->tx.len};
    if (d->all_tiles) {
        int N = v->tp.size, n_tiles = d->ty.n * d->tx.n, rounds = (n_tiles + N - 1) / N;
        d->gathered = h3_new_2d(b, v->act, (int64_t)rounds * N, C * d->wf * d->ty.len * d->tx.len);
        for (int k = 0; k < n_tiles && d->gathered.data; k++) {
            h3_tensor slot = h3_tensor_rows_view(&d->gathered, k, 1);
            d->raw[k] = h3_tensor_reshape(&slot, 4, rshape);
        }
    } else {
        for (int k = 0; k < 2 * d->tx.n; k++) d->raw[k] = h3_new(b, v->act, 4, rshape);
    }
    int max_n = v->tokens_chunk * v->ratio_t - v->frame_pre_padding;
    if (tail_n > max_n) max_n = tail_n;
    if (s->emit) {
        s->rgb_dev = h3_new_1d(b, H3_I32, (max_n * HW * C + 3) / 4);
        s->rgb_host = malloc((size_t)(max_n * HW * C));
        if (!s->rgb_host) return h3_fail(status, H3_ERR_NO_MEMORY, "video VAE: no memory for frames");
    } else {
        int64_t sshape[4] = {C, max_n, d->Hp, d->Wp};
        s->stage = h3_new(b, v->act, 4, sshape);
        s->stage_host = malloc((size_t)(max_n * HW * C) * sizeof(float));
        if (!s->stage_host) return h3_fail(status, H3_ERR_NO_MEMORY, "video VAE: no memory for frames");
    }
    h3_status_code rc = h3_backend_check(b, status);
    if (rc != H3_OK) return rc;
    if ((rc = h3_tensor_upload_f32(b, &d->latent, latents, status)) != H3_OK) return rc;
    int32_t *zeros = calloc((size_t)BS, sizeof *zeros);
    if (!zeros) return h3_fail(status, H3_ERR_NO_MEMORY, "video VAE: no memory for the selector");
    rc = h3_tensor_upload_i32(b, &d->sel, zeros, status);
    free(zeros);
    if (rc != H3_OK) return rc;
    float *cs = malloc((size_t)(2 * BS * v->rot_dim) * sizeof(float));
    if (!cs) return h3_fail(status, H3_ERR_NO_MEMORY, "video VAE: no memory for RoPE tables");
    float *sn = cs + BS * v->rot_dim;
    rope_tables(v, d->wt, th, tw, cs, sn);
    for (int g = 1; g < d->batch; g++) { /* every tile of a batch has the same positions */
        memcpy(cs + g * S * v->rot_dim, cs, (size_t)(S * v->rot_dim) * sizeof(float));
        memcpy(sn + g * S * v->rot_dim, sn, (size_t)(S * v->rot_dim) * sizeof(float));
    }
    rc = h3_tensor_upload_f32(b, &d->cos, cs, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &d->sin, sn, status);
    free(cs);
    return rc;
}

static h3_status_code check_request(const h3_video_vae *v, const float *latents, int T, int H_lat, int W_lat,
                                    h3_status *status) {
    if (!latents) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "video VAE decode: no latents");
    if (H_lat < 1 || W_lat < 1 || H_lat > 4096 || W_lat > 4096)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "video VAE decode: latent size %dx%d (H x W)", H_lat, W_lat);
    if (!windows_for(T, v->token_drop, v->tokens_chunk))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "video VAE decode: %d latent frames; the decoder needs %dn+%d with n >= 1 (e.g. 37 latents "
                       "for 124 frames)",
                       T, v->tokens_chunk, v->tokens_chunk - v->token_drop);
    return H3_OK;
}

static h3_status_code decode(h3_video_vae *v, const float *latents, int T, int H_lat, int W_lat, frame_sink *s,
                             const volatile int *cancel_flag, h3_status *status) {
    h3_status_code rc = check_request(v, latents, T, H_lat, W_lat, status);
    if (rc != H3_OK) return rc;
    h3_backend *b = v->b;
    if ((rc = h3_backend_check(b, status)) != H3_OK) return rc;
    decode_state d;
    memset(&d, 0, sizeof d);
    d.v = v;
    d.T = T, d.Hl = H_lat, d.Wl = W_lat;
    d.Hp = H_lat * v->ratio, d.Wp = W_lat * v->ratio;
    d.wt = v->tokens_chunk + v->token_overlap;
    d.wf = d.wt * v->ratio_t;
    s->total_frames = h3_video_vae_num_frames(v, T);
    int n_windows = windows_for(T, v->token_drop, v->tokens_chunk);
    size_t mark = h3_arena_mark(b);
    d.all_tiles = v->tp.size > 1;
    if (!split_tiles(d.Hp, v->tile, v->min_overlap, v->ratio, &d.ty) ||
        !split_tiles(d.Wp, v->tile, v->min_overlap, v->ratio, &d.tx) ||
        !(d.raw = calloc((size_t)((d.all_tiles ? d.ty.n : 2) * d.tx.n), sizeof *d.raw))) {
        rc = h3_fail(status, H3_ERR_NO_MEMORY, "video VAE: out of memory");
        goto done;
    }
    if ((rc = decode_setup(&d, latents, s, status)) != H3_OK) goto done;
    for (int w = 0; w < n_windows; w++) {
        if (cancelled(cancel_flag)) {
            rc = h3_fail(status, H3_ERR_CANCELLED, "video VAE decode cancelled");
            goto done;
        }
        if ((rc = decode_window(&d, w, cancel_flag, status)) != H3_OK) goto done;
        if (v->tp.rank != 0) continue; /* rank 0 stitches and emits */
        if ((rc = finish_window(&d, s, w, n_windows, status)) != H3_OK) goto done;
        if (v->progress) v->progress(v->progress_opaque, w + 1, n_windows);
    }
done:
    h3_arena_reset(b, mark);
    free(d.ty.start), free(d.ty.ov), free(d.tx.start), free(d.tx.ov);
    free(d.raw);
    free(s->rgb_host);
    free(s->stage_host);
    return rc;
}

h3_status_code h3_video_vae_decode(h3_video_vae *v, const float *latents, int T, int H_lat, int W_lat,
                                   h3_video_emit_fn emit, void *opaque, const volatile int *cancel_flag,
                                   h3_status *status) {
    if (!v || !emit) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "video VAE decode: no model or no frame callback");
    frame_sink s;
    memset(&s, 0, sizeof s);
    s.emit = emit;
    s.opaque = opaque;
    return decode(v, latents, T, H_lat, W_lat, &s, cancel_flag, status);
}

h3_status_code h3_video_vae_decode_f32(h3_video_vae *v, const float *latents, int T, int H_lat, int W_lat, float *out,
                                       h3_status *status) {
    if (!v || !out) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "video VAE decode: no model or no output");
    frame_sink s;
    memset(&s, 0, sizeof s);
    s.out = out;
    return decode(v, latents, T, H_lat, W_lat, &s, NULL, status);
}
