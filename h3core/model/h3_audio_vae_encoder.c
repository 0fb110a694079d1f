/* h3_audio_vae_encoder.c - the audio VAE encoder: DAC blocks, the attention
 * head (pre_block) and mean_proj (h3_audio_vae_encoder.h). Weight norm is
 * folded once at load time, as for the decoder. */
#include "model/h3_audio_vae_encoder.h"

#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/h3_audio_vae_impl.h"

#define RES_UNITS 3
static const int res_dilations[RES_UNITS] = {1, 3, 9};
#define LN_EPS 1e-5f

typedef struct conv {
    h3_tensor w, bias;
} conv;

typedef struct res_unit {
    h3_tensor alpha1, alpha2; /* Snake1d before each conv */
    conv c1, c2;              /* k7 dilated, k1 */
} res_unit;

typedef struct enc_block {
    res_unit res[RES_UNITS];
    h3_tensor alpha; /* Snake1d before the strided conv */
    conv down;       /* width C -> 2C, kernel 2·stride, stride, padding ceil(stride/2) */
    int stride;
} enc_block;

typedef struct layer_norm {
    h3_tensor w, bias;
} layer_norm;

typedef struct linear {
    h3_tensor w, bias;
} linear;

struct h3_audio_vae_encoder {
    h3_backend *b;
    h3_audio_vae_config cfg;
    conv conv_in, conv_out;
    enc_block blocks[H3_AUDIO_VAE_MAX_STAGES];
    h3_tensor alpha_out;
    /* pre_block */
    layer_norm norm1, norm2, norm3, mlp_norm;
    h3_tensor qkv, q_bias, k_bias, v_bias; /* qkv [3D, D], viewed by rows as q, k, v */
    h3_tensor pool;                        /* [latent_channels, head_dim]·heads: head mean + adaptive pool */
    linear attn_proj, proj, w0, w1, w2, mean_proj;
};

/* ---- loading ------------------------------------------------------------------------ */

typedef struct loader {
    h3_audio_vae_encoder *enc;
    const h3_checkpoint *ck;
} loader;

static h3_status_code load_plain(loader *l, const char *name, int ndim, const int64_t *shape, h3_tensor *dst,
                                 h3_status *status) {
    const h3_st_tensor *src;
    h3_status_code rc = h3_checkpoint_get(l->ck, name, ndim, shape, &src, status);
    if (rc == H3_OK) rc = h3_weight_load(l->enc->b, src, H3_WEIGHT_F32, dst, status);
    return rc;
}

/* A weight-normed Conv1d prefix.{weight_v [Cout, Cin, K], weight_g, bias}. */
static h3_status_code load_wn_conv(loader *l, const char *prefix, int64_t cout, int64_t cin, int64_t k, conv *c,
                                   h3_status *status) {
    char name[160];
    const h3_st_tensor *v, *g;
    snprintf(name, sizeof name, "%s.weight_v", prefix);
    h3_status_code rc = h3_checkpoint_get(l->ck, name, 3, (int64_t[]){cout, cin, k}, &v, status);
    snprintf(name, sizeof name, "%s.weight_g", prefix);
    if (rc == H3_OK) rc = h3_checkpoint_get(l->ck, name, 3, (int64_t[]){cout, 1, 1}, &g, status);
    if (rc == H3_OK) rc = h3_audio_vae_fold_weight_norm(l->enc->b, v, g, &c->w, status);
    snprintf(name, sizeof name, "%s.bias", prefix);
    if (rc == H3_OK) rc = load_plain(l, name, 1, &cout, &c->bias, status);
    return rc;
}

/* A Snake1d's alpha [1, C, 1]. */
static h3_status_code load_alpha(loader *l, const char *prefix, int64_t C, h3_tensor *dst, h3_status *status) {
    char name[160];
    snprintf(name, sizeof name, "%s.alpha", prefix);
    return load_plain(l, name, 3, (int64_t[]){1, C, 1}, dst, status);
}

/* encoder.block.{1+i}: residual units over C channels, then the strided conv to 2C. */
static h3_status_code load_block(loader *l, int i, int64_t C, enc_block *blk, h3_status *status) {
    char p[128];
    h3_status_code rc = H3_OK;
    for (int r = 0; r < RES_UNITS && rc == H3_OK; r++) {
        snprintf(p, sizeof p, "encoder.block.%d.block.%d.block.0", i + 1, r);
        rc = load_alpha(l, p, C, &blk->res[r].alpha1, status);
        snprintf(p, sizeof p, "encoder.block.%d.block.%d.block.1", i + 1, r);
        if (rc == H3_OK) rc = load_wn_conv(l, p, C, C, 7, &blk->res[r].c1, status);
        snprintf(p, sizeof p, "encoder.block.%d.block.%d.block.2", i + 1, r);
        if (rc == H3_OK) rc = load_alpha(l, p, C, &blk->res[r].alpha2, status);
        snprintf(p, sizeof p, "encoder.block.%d.block.%d.block.3", i + 1, r);
        if (rc == H3_OK) rc = load_wn_conv(l, p, C, C, 1, &blk->res[r].c2, status);
    }
    snprintf(p, sizeof p, "encoder.block.%d.block.3", i + 1);
    if (rc == H3_OK) rc = load_alpha(l, p, C, &blk->alpha, status);
    snprintf(p, sizeof p, "encoder.block.%d.block.4", i + 1);
    if (rc == H3_OK) rc = load_wn_conv(l, p, 2 * C, C, 2 * blk->stride, &blk->down, status);
    return rc;
}

static h3_status_code load_norm(loader *l, const char *prefix, int64_t D, layer_norm *n, h3_status *status) {
    char name[160];
    snprintf(name, sizeof name, "%s.weight", prefix);
    h3_status_code rc = load_plain(l, name, 1, &D, &n->w, status);
    snprintf(name, sizeof name, "%s.bias", prefix);
    if (rc == H3_OK) rc = load_plain(l, name, 1, &D, &n->bias, status);
    return rc;
}

static h3_status_code load_linear(loader *l, const char *prefix, int64_t out, int64_t in, linear *lin,
                                  h3_status *status) {
    char name[160];
    snprintf(name, sizeof name, "%s.weight", prefix);
    h3_status_code rc = load_plain(l, name, 2, (int64_t[]){out, in}, &lin->w, status);
    snprintf(name, sizeof name, "%s.bias", prefix);
    if (rc == H3_OK) rc = load_plain(l, name, 1, &out, &lin->bias, status);
    return rc;
}

/* torch's mean over heads then adaptive_avg_pool1d(head_dim -> out) is one
 * linear map of the attention output [N, heads·head_dim]: output j averages
 * bin [floor(j·hd/out), ceil((j+1)·hd/out)) of every head. */
static h3_status_code make_pool(h3_audio_vae_encoder *enc, int heads, int head_dim, int out, h3_status *status) {
    size_t n = (size_t)out * (size_t)heads * (size_t)head_dim;
    float *p = calloc(n, sizeof *p);
    if (!p) return h3_fail(status, H3_ERR_NO_MEMORY, "audio VAE encoder: out of host memory");
    for (int j = 0; j < out; j++) {
        int lo = (int)(((int64_t)j * head_dim) / out), hi = (int)(((int64_t)(j + 1) * head_dim + out - 1) / out);
        float wgt = 1.0f / ((float)heads * (float)(hi - lo));
        for (int h = 0; h < heads; h++)
            for (int d = lo; d < hi; d++) p[(size_t)j * heads * head_dim + (size_t)h * head_dim + d] = wgt;
    }
    h3_status_code rc = h3_weight_from_f32(enc->b, p, H3_F32, 2, (int64_t[]){out, (int64_t)heads * head_dim},
                                           &enc->pool, status);
    free(p);
    return rc;
}

static h3_status_code load_pre_block(loader *l, h3_status *status) {
    h3_audio_vae_encoder *enc = l->enc;
    int64_t D = enc->cfg.latent_dim, C = enc->cfg.latent_channels;
    int heads = enc->cfg.num_attention_heads;
    if (D % heads != 0)
        return h3_fail(status, H3_ERR_FORMAT, "audio VAE: latent_dim %lld is not a multiple of num_attention_heads %d",
                       (long long)D, heads);
    h3_status_code rc = load_norm(l, "pre_block.norm1", D, &enc->norm1, status);
    if (rc == H3_OK) rc = load_norm(l, "pre_block.norm3", D, &enc->norm3, status);
    if (rc == H3_OK) rc = load_norm(l, "pre_block.norm2", C, &enc->norm2, status);
    if (rc == H3_OK) rc = load_norm(l, "pre_block.mlp.norm", C, &enc->mlp_norm, status);
    if (rc == H3_OK) rc = load_plain(l, "pre_block.attn.qkv.weight", 2, (int64_t[]){3 * D, D}, &enc->qkv, status);
    if (rc == H3_OK) rc = load_plain(l, "pre_block.attn.q_bias", 1, &D, &enc->q_bias, status);
    if (rc == H3_OK) rc = load_plain(l, "pre_block.attn.zero_k_bias", 1, &D, &enc->k_bias, status);
    if (rc == H3_OK) rc = load_plain(l, "pre_block.attn.v_bias", 1, &D, &enc->v_bias, status);
    if (rc == H3_OK) rc = make_pool(enc, heads, (int)(D / heads), (int)C, status);
    if (rc == H3_OK) rc = load_linear(l, "pre_block.attn.proj", C, C, &enc->attn_proj, status);
    if (rc == H3_OK) rc = load_linear(l, "pre_block.proj", C, D, &enc->proj, status);
    if (rc == H3_OK) rc = load_linear(l, "pre_block.mlp.w0", 2 * C, C, &enc->w0, status);
    if (rc == H3_OK) rc = load_linear(l, "pre_block.mlp.w1", 2 * C, C, &enc->w1, status);
    if (rc == H3_OK) rc = load_linear(l, "pre_block.mlp.w2", C, 2 * C, &enc->w2, status);
    if (rc != H3_OK) return rc;
    /* mean_proj is a Conv1d k1 [C, C, 1]: over rows, a linear */
    h3_tensor w3 = {0};
    rc = load_plain(l, "mean_proj.weight", 3, (int64_t[]){C, C, 1}, &w3, status);
    if (rc == H3_OK) enc->mean_proj.w = h3_tensor_2d(&w3, C, C);
    if (rc == H3_OK) rc = load_plain(l, "mean_proj.bias", 1, &C, &enc->mean_proj.bias, status);
    return rc;
}

static h3_status_code load_weights(h3_audio_vae_encoder *enc, const h3_checkpoint *ck, h3_status *status) {
    const h3_audio_vae_config *cfg = &enc->cfg;
    loader l = {.enc = enc, .ck = ck};
    int64_t C = cfg->encoder_dim;
    h3_status_code rc = load_wn_conv(&l, "encoder.block.0", C, 1, 7, &enc->conv_in, status);
    for (int i = 0; i < cfg->n_encoder_stages && rc == H3_OK; i++, C *= 2) {
        enc->blocks[i].stride = cfg->encoder_rates[i];
        rc = load_block(&l, i, C, &enc->blocks[i], status);
    }
    char p[64];
    snprintf(p, sizeof p, "encoder.block.%d", cfg->n_encoder_stages + 1);
    if (rc == H3_OK) rc = load_alpha(&l, p, C, &enc->alpha_out, status);
    snprintf(p, sizeof p, "encoder.block.%d", cfg->n_encoder_stages + 2);
    if (rc == H3_OK) rc = load_wn_conv(&l, p, cfg->latent_dim, C, 3, &enc->conv_out, status);
    if (rc == H3_OK) rc = load_pre_block(&l, status);
    return rc;
}

h3_status_code h3_audio_vae_encoder_load(h3_backend *b, const char *dir, const h3_checkpoint *weights,
                                         h3_audio_vae_encoder **out, h3_status *status) {
    *out = NULL;
    if (!b) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "audio VAE encoder: no backend");
    h3_audio_vae_encoder *enc = calloc(1, sizeof *enc);
    if (!enc) return h3_fail(status, H3_ERR_NO_MEMORY, "audio VAE encoder: out of memory");
    enc->b = b;
    h3_checkpoint *ck = NULL;
    h3_status_code rc = h3_audio_vae_config_load(dir, &enc->cfg, status);
    if (rc == H3_OK && enc->cfg.n_encoder_stages == 0)
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: the config describes no encoder (no \"encoder_rates\")", dir);
    if (rc == H3_OK && !weights) rc = h3_checkpoint_open(dir, &ck, status);
    if (rc == H3_OK) rc = load_weights(enc, weights ? weights : ck, status);
    h3_checkpoint_close(ck);
    if (rc != H3_OK) {
        h3_audio_vae_encoder_free(enc);
        h3_status_prefix(status, "loading the audio VAE encoder from %s", dir ? dir : "(null)");
        return rc;
    }
    *out = enc;
    return H3_OK;
}

static void free_conv(h3_backend *b, conv *c) {
    h3_weight_free(b, &c->w);
    h3_weight_free(b, &c->bias);
}

void h3_audio_vae_encoder_free(h3_audio_vae_encoder *enc) {
    if (!enc) return;
    h3_backend *b = enc->b;
    free_conv(b, &enc->conv_in);
    free_conv(b, &enc->conv_out);
    for (int i = 0; i < H3_AUDIO_VAE_MAX_STAGES; i++) {
        enc_block *blk = &enc->blocks[i];
        for (int r = 0; r < RES_UNITS; r++) {
            h3_weight_free(b, &blk->res[r].alpha1);
            h3_weight_free(b, &blk->res[r].alpha2);
            free_conv(b, &blk->res[r].c1);
            free_conv(b, &blk->res[r].c2);
        }
        h3_weight_free(b, &blk->alpha);
        free_conv(b, &blk->down);
    }
    h3_weight_free(b, &enc->alpha_out);
    layer_norm *norms[4] = {&enc->norm1, &enc->norm2, &enc->norm3, &enc->mlp_norm};
    for (int i = 0; i < 4; i++) {
        h3_weight_free(b, &norms[i]->w);
        h3_weight_free(b, &norms[i]->bias);
    }
    h3_tensor *plain[5] = {&enc->qkv, &enc->q_bias, &enc->k_bias, &enc->v_bias, &enc->pool};
    for (int i = 0; i < 5; i++) h3_weight_free(b, plain[i]);
    linear *lins[6] = {&enc->attn_proj, &enc->proj, &enc->w0, &enc->w1, &enc->w2, &enc->mean_proj};
    for (int i = 0; i < 6; i++) {
        h3_weight_free(b, &lins[i]->w);
        h3_weight_free(b, &lins[i]->bias);
    }
    free(enc);
}

const h3_audio_vae_config *h3_audio_vae_encoder_config(const h3_audio_vae_encoder *enc) { return &enc->cfg; }

int64_t h3_audio_vae_encoded_length(const h3_audio_vae_encoder *enc, int64_t n_samples) {
    int64_t hop = enc->cfg.hop;
    return n_samples <= 0 ? 0 : (n_samples + hop - 1) / hop;
}

/* ---- the forward ---------------------------------------------------------------------- */

/* A [B, C, L] view at the start of a preallocated buffer. */
static h3_tensor view3(const h3_tensor *buf, int64_t B, int64_t C, int64_t L) {
    h3_tensor t = *buf;
    memset(t.shape, 0, sizeof t.shape);
    t.ndim = 3;
    t.shape[0] = B, t.shape[1] = C, t.shape[2] = L;
    return t;
}

/* Conv1d output length (PyTorch's formula). */
static int64_t conv_len(int64_t L, int k, int stride, int pad, int dil) {
    int64_t span = L + 2 * (int64_t)pad - (int64_t)dil * (k - 1) - 1;
    return span < 0 ? -1 : span / stride + 1;
}

static int down_pad(int stride) { return (stride + 1) / 2; } /* ceil(stride / 2) */

/* The sizes of the encode of Sp samples: the largest [B, C, L] activation
 * (per batch item) and the length the blocks end at. */
static void encoder_sizes(const h3_audio_vae_config *cfg, int64_t Sp, int64_t *most, int64_t *Lend) {
    int64_t C = cfg->encoder_dim, L = Sp, m = C * L;
    for (int i = 0; i < cfg->n_encoder_stages && L > 0; i++) {
        int s = cfg->encoder_rates[i];
        L = conv_len(L, 2 * s, s, down_pad(s), 1);
        C *= 2;
        if (C * L > m) m = C * L;
    }
    if ((int64_t)cfg->latent_dim * L > m) m = (int64_t)cfg->latent_dim * L;
    *most = m, *Lend = L;
}

static int cancelled(const volatile int *flag) { return flag && *flag; }

/* The DAC encoder on x [B, 1, Sp]: *out = [B, latent_dim, Na] in one of
 * buf[0..3] (four buffers of the largest activation). */
static h3_status_code encoder_device(h3_audio_vae_encoder *enc, const h3_tensor *x, h3_tensor buf[4], h3_tensor *out,
                                     const volatile int *cancel_flag, h3_status *status) {
    h3_backend *b = enc->b;
    const h3_audio_vae_config *cfg = &enc->cfg;
    int64_t B = x->shape[0], L = x->shape[2], C = cfg->encoder_dim;
    int cur = 0;
    h3_tensor h = view3(&buf[cur], B, C, L);
    h3_op_conv1d(b, &h, x, &enc->conv_in.w, &enc->conv_in.bias, 1, 3, 1, 1);
    for (int i = 0; i < cfg->n_encoder_stages; i++) {
        if (cancelled(cancel_flag)) return h3_fail(status, H3_ERR_CANCELLED, "audio VAE encode cancelled");
        const enc_block *blk = &enc->blocks[i];
        h3_tensor t1 = view3(&buf[(cur + 1) % 4], B, C, L), t2 = view3(&buf[(cur + 2) % 4], B, C, L);
        for (int r = 0; r < RES_UNITS; r++) { /* h += c2(snake(c1_d(snake(h)))) */
            const res_unit *u = &blk->res[r];
            int d = res_dilations[r];
            h3_op_snake(b, &t1, &h, &u->alpha1);
            h3_op_conv1d(b, &t2, &t1, &u->c1.w, &u->c1.bias, 1, 3 * d, d, 1);
            h3_op_snake(b, &t1, &t2, &u->alpha2);
            h3_op_conv1d(b, &t2, &t1, &u->c2.w, &u->c2.bias, 1, 0, 1, 1);
            h3_op_add(b, &h, &h, &t2);
        }
        h3_op_snake(b, &t1, &h, &blk->alpha);
        int s = blk->stride;
        int64_t Lo = conv_len(L, 2 * s, s, down_pad(s), 1);
        cur = (cur + 2) % 4;
        h = view3(&buf[cur], B, 2 * C, Lo);
        h3_op_conv1d(b, &h, &t1, &blk->down.w, &blk->down.bias, s, down_pad(s), 1, 1);
        C *= 2, L = Lo;
        h3_status_code rc = h3_backend_check(b, status);
        if (rc != H3_OK) return rc;
    }
    h3_tensor t1 = view3(&buf[(cur + 1) % 4], B, C, L);
    h3_op_snake(b, &t1, &h, &enc->alpha_out);
    *out = view3(&buf[(cur + 2) % 4], B, cfg->latent_dim, L);
    h3_op_conv1d(b, out, &t1, &enc->conv_out.w, &enc->conv_out.bias, 1, 1, 1, 1);
    return h3_backend_check(b, status);
}

/* [B, C, N] (time last) -> rows [B·N, C], or back (to_rows 0). */
static void transpose_rows(h3_backend *b, h3_tensor *dst, const h3_tensor *src, int64_t B, int64_t C, int64_t N,
                           int to_rows) {
    h3_view chan = {.ndim = 3, .shape = {B, N, C}, .offset = 0, .stride = {C * N, 1, N}};
    h3_view rows = {.ndim = 3, .shape = {B, N, C}, .offset = 0, .stride = {N * C, C, 1}};
    if (to_rows)
        h3_op_copy_view(b, dst, &rows, src, &chan);
    else
        h3_op_copy_view(b, dst, &chan, src, &rows);
}

/* pre_block and mean_proj on rows x [B·N, D]: the latents' rows [B·N, Cl]
 * in z. */
static h3_status_code head_device(h3_audio_vae_encoder *enc, const h3_tensor *x, int64_t B, int64_t N, h3_tensor *z,
                                  h3_status *status) {
    h3_backend *b = enc->b;
    int64_t D = enc->cfg.latent_dim, Cl = enc->cfg.latent_channels, R = B * N;
    int heads = enc->cfg.num_attention_heads, dh = (int)(D / heads);
    h3_tensor n1 = h3_new_2d(b, H3_F32, R, D), n3 = h3_new_2d(b, H3_F32, R, D);
    h3_tensor q = h3_new_2d(b, H3_F32, R, D), k = h3_new_2d(b, H3_F32, R, D), v = h3_new_2d(b, H3_F32, R, D);
    h3_tensor o = h3_new_2d(b, H3_F32, R, D);
    h3_tensor a = h3_new_2d(b, H3_F32, R, Cl), y = h3_new_2d(b, H3_F32, R, Cl), m = h3_new_2d(b, H3_F32, R, Cl);
    h3_tensor g0 = h3_new_2d(b, H3_F32, R, 2 * Cl), g1 = h3_new_2d(b, H3_F32, R, 2 * Cl);
    h3_status_code rc = h3_backend_check(b, status);
    if (rc != H3_OK) return rc;
    h3_tensor wq = h3_tensor_rows_view(&enc->qkv, 0, D), wk = h3_tensor_rows_view(&enc->qkv, D, D);
    h3_tensor wv = h3_tensor_rows_view(&enc->qkv, 2 * D, D);
    h3_op_layer_norm(b, &n1, x, &enc->norm1.w, &enc->norm1.bias, LN_EPS);
    h3_op_layer_norm(b, &n3, x, &enc->norm3.w, &enc->norm3.bias, LN_EPS);
    h3_op_linear(b, &q, &n1, &wq, &enc->q_bias);
    h3_op_linear(b, &k, &n1, &wk, &enc->k_bias);
    h3_op_linear(b, &v, &n1, &wv, &enc->v_bias);
    for (int64_t i = 0; i < B; i++) { /* causal within each channel */
        h3_tensor qi = h3_tensor_rows_view(&q, i * N, N), ki = h3_tensor_rows_view(&k, i * N, N);
        h3_tensor vi = h3_tensor_rows_view(&v, i * N, N), oi = h3_tensor_rows_view(&o, i * N, N);
        h3_op_attention(b, &oi, &qi, &ki, &vi, heads, heads, dh, 1, 1.0f / sqrtf((float)dh));
    }
    h3_op_linear(b, &a, &o, &enc->pool, NULL);
    h3_op_linear(b, &y, &a, &enc->attn_proj.w, &enc->attn_proj.bias);
    h3_op_linear(b, &a, &n3, &enc->proj.w, &enc->proj.bias);
    h3_op_add(b, &a, &a, &y); /* x = proj(norm3(x)) + attn(norm1(x)) */
    h3_op_layer_norm(b, &m, &a, &enc->norm2.w, &enc->norm2.bias, LN_EPS);
    h3_op_layer_norm(b, &m, &m, &enc->mlp_norm.w, &enc->mlp_norm.bias, LN_EPS);
    h3_op_linear(b, &g0, &m, &enc->w0.w, &enc->w0.bias);
    h3_op_linear(b, &g1, &m, &enc->w1.w, &enc->w1.bias);
    h3_op_gelu(b, &g0, &g0, 1);
    h3_op_mul(b, &g0, &g0, &g1);
    h3_op_linear(b, &y, &g0, &enc->w2.w, &enc->w2.bias);
    h3_op_add(b, &a, &a, &y); /* x = x + mlp(norm2(x)) */
    h3_op_linear(b, z, &a, &enc->mean_proj.w, &enc->mean_proj.bias);
    return h3_backend_check(b, status);
}

static h3_status_code encode_checked(h3_audio_vae_encoder *enc, const float *samples, int n_channels,
                                     int64_t n_samples, float *mean, const volatile int *cancel_flag,
                                     h3_status *status) {
    h3_backend *b = enc->b;
    const h3_audio_vae_config *cfg = &enc->cfg;
    int64_t B = n_channels, Na = h3_audio_vae_encoded_length(enc, n_samples), Sp = Na * cfg->hop;
    int64_t Cl = cfg->latent_channels, D = cfg->latent_dim, most, Lend;
    encoder_sizes(cfg, Sp, &most, &Lend);
    if (Lend != Na)
        return h3_fail(status, H3_ERR_UNSUPPORTED, "audio VAE encoder: %lld samples end at %lld latents, not %lld",
                       (long long)Sp, (long long)Lend, (long long)Na);
    float *host = calloc((size_t)(B * Sp), sizeof *host); /* right-padded with zeros to the hop */
    float *rows = malloc((size_t)(B * Na * Cl) * sizeof *rows);
    if (!host || !rows) {
        free(host), free(rows);
        return h3_fail(status, H3_ERR_NO_MEMORY, "audio VAE encode: out of host memory");
    }
    for (int64_t c = 0; c < B; c++) memcpy(host + c * Sp, samples + c * n_samples, (size_t)n_samples * sizeof *host);
    size_t mark = h3_arena_mark(b);
    h3_tensor x = h3_new(b, H3_F32, 3, (int64_t[]){B, 1, Sp}), buf[4], e = {0};
    for (int i = 0; i < 4; i++) buf[i] = h3_new_1d(b, H3_F32, B * most);
    h3_tensor xr = h3_new_2d(b, H3_F32, B * Na, D), z = h3_new_2d(b, H3_F32, B * Na, Cl);
    h3_status_code rc = h3_backend_check(b, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, &x, host, status);
    if (rc == H3_OK) rc = encoder_device(enc, &x, buf, &e, cancel_flag, status);
    if (rc == H3_OK && cancelled(cancel_flag)) rc = h3_fail(status, H3_ERR_CANCELLED, "audio VAE encode cancelled");
    if (rc == H3_OK) {
        transpose_rows(b, &xr, &e, B, D, Na, 1);
        rc = head_device(enc, &xr, B, Na, &z, status);
    }
    if (rc == H3_OK) rc = h3_tensor_download_f32(b, &z, rows, status);
    h3_arena_reset(b, mark);
    for (int64_t c = 0; rc == H3_OK && c < B; c++) /* rows [B·Na, Cl] -> mean [B, Cl, Na] */
        for (int64_t n = 0; n < Na; n++)
            for (int64_t k = 0; k < Cl; k++) mean[(c * Cl + k) * Na + n] = rows[(c * Na + n) * Cl + k];
    free(host);
    free(rows);
    return rc;
}

h3_status_code h3_audio_vae_encode(h3_audio_vae_encoder *enc, const float *samples, int n_channels,
                                   int64_t n_samples, float *mean, const volatile int *cancel_flag,
                                   h3_status *status) {
    if (!enc || !samples || !mean)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "audio VAE encode: NULL encoder, samples or output");
    int64_t limit = ((int64_t)1 << 31) / (n_channels > 0 ? n_channels : 1);
    if (n_channels < 1 || n_channels > 16 || n_samples < 1 || n_samples > limit - enc->cfg.hop)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "audio VAE encode: %d channels of %lld samples (need 1..16 channels, 1..%lld samples)",
                       n_channels, (long long)n_samples, (long long)(limit - enc->cfg.hop));
    if (cancelled(cancel_flag)) return h3_fail(status, H3_ERR_CANCELLED, "audio VAE encode cancelled");
    h3_status_code rc = h3_backend_check(enc->b, status);
    if (rc != H3_OK) {
        h3_status_prefix(status, "audio VAE encode: the backend already failed");
        return rc;
    }
    rc = encode_checked(enc, samples, n_channels, n_samples, mean, cancel_flag, status);
    if (rc != H3_OK && rc != H3_ERR_CANCELLED)
        h3_status_prefix(status, "audio VAE encode of %d x %lld samples", n_channels, (long long)n_samples);
    return rc;
}

void h3_audio_vae_normalize_rows(const h3_audio_vae_config *cfg, const float *mean, int n_channels, int64_t n_latents,
                                 float *rows) {
    int C = cfg->latent_channels;
    for (int ch = 0; ch < n_channels; ch++)
        for (int c = 0; c < C; c++) {
            float mu = (float)cfg->latents_mean[c], sd = (float)cfg->latents_std[c];
            const float *src = mean + ((size_t)ch * C + c) * (size_t)n_latents;
            for (int64_t n = 0; n < n_latents; n++) rows[((size_t)ch * n_latents + n) * C + c] = (src[n] - mu) / sd;
        }
}
