/* h3_vision.c - the Qwen3-VL vision tower on the op interface
 * (docs/spec/h3-conditioner.md §5.3; transformers Qwen3VLVisionModel).
 *
 * Patches arrive in merge-window order (h3_image_process), so every table
 * built here on the host - position-embedding taps, rotary angles - is laid
 * out in that order, and a merger's 2x2 window is 4 consecutive rows. */
#include "model/h3_vision.h"

#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "model.visual."
#define LN_EPS 1e-6f

/* Tensors in list order: 3 globals, 12 per block, 6 per merger. */
enum { G_PATCH_W, G_PATCH_B, G_POS, G_COUNT };
enum {
    B_NORM1_W, B_NORM1_B, B_QKV_W, B_QKV_B, B_PROJ_W, B_PROJ_B,
    B_NORM2_W, B_NORM2_B, B_FC1_W, B_FC1_B, B_FC2_W, B_FC2_B, B_COUNT
};
enum { M_NORM_W, M_NORM_B, M_FC1_W, M_FC1_B, M_FC2_W, M_FC2_B, M_COUNT };

static const char *const block_suffix[B_COUNT] = {
    "norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
    "norm2.weight", "norm2.bias", "mlp.linear_fc1.weight", "mlp.linear_fc1.bias", "mlp.linear_fc2.weight",
    "mlp.linear_fc2.bias",
};
static const char *const merger_suffix[M_COUNT] = {
    "norm.weight", "norm.bias", "linear_fc1.weight", "linear_fc1.bias", "linear_fc2.weight", "linear_fc2.bias",
};

struct h3_vision {
    h3_backend *b;
    h3_vision_config cfg;
    int n_weights;
    h3_tensor *w;      /* in h3_vision_tensor_list order */
    h3_tensor patch_w; /* w[G_PATCH_W] seen as [C, in·tp·ps²] */
    int grid_side;     /* the position table is grid_side x grid_side */
    int head_dim;
    int head_pad;      /* the width each head is computed at: head_dim, or head_dim padded with zeros (below) */
    float *inv_freq;   /* head_dim/4 rotary frequencies per axis */
};

static int block_index(int l, int r) { return G_COUNT + l * B_COUNT + r; }
static int merger_index(const h3_vision_config *c, int m, int r) { /* m = 0: merger, 1 + k: deepstack k */
    return G_COUNT + (int)c->depth * B_COUNT + m * M_COUNT + r;
}

/* ---- config -------------------------------------------------------------------- */

static h3_status_code read_deepstack(const h3_config *c, h3_vision_config *cfg, h3_status *status) {
    const char *key = "vision_config.deepstack_visual_indexes";
    cfg->n_deepstack = 0;
    if (!h3_config_has(c, key)) return H3_OK;
    int64_t idx[H3_VISION_MAX_DEEPSTACK];
    int n = 0;
    h3_status_code rc = h3_config_int_array(c, key, idx, H3_VISION_MAX_DEEPSTACK, &n, status);
    if (rc != H3_OK) return rc;
    for (int i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= cfg->depth || (i > 0 && idx[i] <= idx[i - 1]))
            return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\"[%d] = %lld; want increasing block indexes below depth %lld",
                           h3_config_path(c), key, i, (long long)idx[i], (long long)cfg->depth);
        cfg->deepstack[i] = (int)idx[i];
    }
    cfg->n_deepstack = n;
    return H3_OK;
}

static h3_status_code check_vision_options(const h3_config *c, h3_vision_config *cfg, h3_status *status) {
    const char *path = h3_config_path(c);
    h3_status_code rc = H3_OK;
    if (h3_config_has(c, "vision_config.hidden_act")) {
        const char *act;
        if ((rc = h3_config_string(c, "vision_config.hidden_act", &act, status)) != H3_OK) return rc;
        if (strcmp(act, "gelu_pytorch_tanh") != 0)
            return h3_fail(status, H3_ERR_UNSUPPORTED,
                           "%s: vision_config.hidden_act is \"%s\"; only \"gelu_pytorch_tanh\" is supported", path, act);
    }
    cfg->rope_theta = 10000.0;
    rc = h3_config_double_or(c, "vision_config.rope_parameters.rope_theta", &cfg->rope_theta, status);
    if (rc == H3_OK && !(cfg->rope_theta > 1.0))
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: vision_config rope_theta = %g must be > 1", path, cfg->rope_theta);
    return rc;
}

static h3_status_code check_vision_dims(const char *path, const h3_vision_config *c, h3_status *status) {
    const struct { const char *key; int64_t v, hi; } dims[] = {
        {"depth", c->depth, 1024},
        {"hidden_size", c->hidden_size, 1 << 16},
        {"intermediate_size", c->intermediate_size, 1 << 18},
        {"num_heads", c->num_heads, 1024},
        {"in_channels", c->in_channels, 3},
        {"patch_size", c->patch_size, 1024},
        {"temporal_patch_size", c->temporal_patch_size, 64},
        {"spatial_merge_size", c->spatial_merge_size, 64},
        {"out_hidden_size", c->out_hidden_size, 1 << 18},
        {"num_position_embeddings", c->num_position_embeddings, 1 << 20},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(dims); i++)
        if (dims[i].v < 1 || dims[i].v > dims[i].hi)
            return h3_fail(status, H3_ERR_FORMAT, "%s: vision_config.%s = %lld is outside [1, %lld]", path,
                           dims[i].key, (long long)dims[i].v, (long long)dims[i].hi);
    if (c->in_channels != 3)
        return h3_fail(status, H3_ERR_UNSUPPORTED, "%s: vision_config.in_channels = %lld; only RGB (3)", path,
                       (long long)c->in_channels);
    if (c->hidden_size % c->num_heads || (c->hidden_size / c->num_heads) % 4)
        return h3_fail(status, H3_ERR_FORMAT,
                       "%s: vision_config hidden_size %lld over %lld heads must give a head size that is a multiple of 4",
                       path, (long long)c->hidden_size, (long long)c->num_heads);
    int64_t side = (int64_t)sqrt((double)c->num_position_embeddings);
    if (side * side != c->num_position_embeddings)
        return h3_fail(status, H3_ERR_FORMAT, "%s: vision_config.num_position_embeddings = %lld is not a square", path,
                       (long long)c->num_position_embeddings);
    return H3_OK;
}

h3_status_code h3_vision_config_read(const h3_config *c, h3_vision_config *cfg, h3_status *status) {
    memset(cfg, 0, sizeof *cfg);
    if (!h3_config_has(c, "vision_config"))
        return h3_fail(status, H3_ERR_NOT_FOUND, "%s: no vision_config: this text encoder has no vision tower",
                       h3_config_path(c));
    const struct { const char *key; int64_t *dst; } ints[] = {
        {"vision_config.depth", &cfg->depth},
        {"vision_config.hidden_size", &cfg->hidden_size},
        {"vision_config.intermediate_size", &cfg->intermediate_size},
        {"vision_config.num_heads", &cfg->num_heads},
        {"vision_config.patch_size", &cfg->patch_size},
        {"vision_config.temporal_patch_size", &cfg->temporal_patch_size},
        {"vision_config.spatial_merge_size", &cfg->spatial_merge_size},
        {"vision_config.out_hidden_size", &cfg->out_hidden_size},
        {"vision_config.num_position_embeddings", &cfg->num_position_embeddings},
    };
    h3_status_code rc = H3_OK;
    for (size_t i = 0; i < G_N_ELEMENTS(ints) && rc == H3_OK; i++) rc = h3_config_int(c, ints[i].key, ints[i].dst, status);
    cfg->in_channels = 3;
    if (rc == H3_OK) rc = h3_config_int_or(c, "vision_config.in_channels", &cfg->in_channels, status);
    if (rc == H3_OK) rc = check_vision_dims(h3_config_path(c), cfg, status);
    if (rc == H3_OK) rc = read_deepstack(c, cfg, status);
    if (rc == H3_OK) rc = check_vision_options(c, cfg, status);
    return rc;
}

/* ---- tensor list --------------------------------------------------------------- */

static void set_info(h3_vision_tensor_info *t, const char *name, int ndim, int64_t s0, int64_t s1) {
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = s0;
    t->shape[1] = s1;
}

static void block_shape(const h3_vision_config *c, int r, h3_vision_tensor_info *t) {
    int64_t C = c->hidden_size, I = c->intermediate_size;
    static const int ndim[B_COUNT] = {1, 1, 2, 1, 2, 1, 1, 1, 2, 1, 2, 1};
    const int64_t s0[B_COUNT] = {C, C, 3 * C, 3 * C, C, C, C, C, I, I, C, C};
    const int64_t s1[B_COUNT] = {0, 0, C, 0, C, 0, 0, 0, C, 0, I, 0};
    t->ndim = ndim[r];
    t->shape[0] = s0[r];
    t->shape[1] = s1[r];
}

/* postshuffle: the DeepStack mergers normalise the 4C window vector, the
 * final merger each C patch before the shuffle. */
static void merger_shape(const h3_vision_config *c, int postshuffle, int r, h3_vision_tensor_info *t) {
    int64_t C = c->hidden_size, W = C * c->spatial_merge_size * c->spatial_merge_size, O = c->out_hidden_size;
    int64_t norm = postshuffle ? W : C;
    const int64_t s0[M_COUNT] = {norm, norm, W, W, O, O};
    const int64_t s1[M_COUNT] = {0, 0, W, 0, W, 0};
    t->ndim = s1[r] ? 2 : 1;
    t->shape[0] = s0[r];
    t->shape[1] = s1[r];
}

static int tensor_count(const h3_vision_config *c) {
    return G_COUNT + (int)c->depth * B_COUNT + (1 + c->n_deepstack) * M_COUNT;
}

h3_status_code h3_vision_tensor_list(const h3_vision_config *cfg, h3_vision_tensor_info **out, int *n,
                                     h3_status *status) {
    int count = tensor_count(cfg);
    h3_vision_tensor_info *t = calloc((size_t)count, sizeof *t);
    if (!t) return h3_fail(status, H3_ERR_NO_MEMORY, "vision tower: out of host memory");
    int64_t C = cfg->hidden_size;
    set_info(&t[G_PATCH_W], PREFIX "patch_embed.proj.weight", 5, C, cfg->in_channels);
    t[G_PATCH_W].shape[2] = cfg->temporal_patch_size;
    t[G_PATCH_W].shape[3] = t[G_PATCH_W].shape[4] = cfg->patch_size;
    set_info(&t[G_PATCH_B], PREFIX "patch_embed.proj.bias", 1, C, 0);
    set_info(&t[G_POS], PREFIX "pos_embed.weight", 2, cfg->num_position_embeddings, C);
    for (int l = 0; l < cfg->depth; l++)
        for (int r = 0; r < B_COUNT; r++) {
            h3_vision_tensor_info *e = &t[block_index(l, r)];
            snprintf(e->name, sizeof e->name, PREFIX "blocks.%d.%s", l, block_suffix[r]);
            block_shape(cfg, r, e);
        }
    for (int m = 0; m <= cfg->n_deepstack; m++)
        for (int r = 0; r < M_COUNT; r++) {
            h3_vision_tensor_info *e = &t[merger_index(cfg, m, r)];
            if (m == 0) snprintf(e->name, sizeof e->name, PREFIX "merger.%s", merger_suffix[r]);
            else snprintf(e->name, sizeof e->name, PREFIX "deepstack_merger_list.%d.%s", m - 1, merger_suffix[r]);
            merger_shape(cfg, m > 0, r, e);
        }
    *out = t;
    *n = count;
    return H3_OK;
}

h3_status_code h3_vision_dummy_add(const h3_vision_config *cfg, h3_checkpoint *ck, h3_status *status) {
    h3_vision_tensor_info *t = NULL;
    int n = 0;
    h3_status_code rc = h3_vision_tensor_list(cfg, &t, &n, status);
    /* Matrices [N, K...] in ±sqrt(3/K) (unit variance out for unit variance
     * in), norm weights in [0.8, 1.2], biases in ±0.05, positions in ±0.5. */
    for (int i = 0; i < n && rc == H3_OK; i++) {
        float lo = -0.05f, hi = 0.05f;
        int64_t fan_in = 1;
        for (int d = 1; d < t[i].ndim; d++) fan_in *= t[i].shape[d];
        if (i == G_POS) lo = -0.5f, hi = 0.5f;
        else if (t[i].ndim >= 2) hi = sqrtf(3.0f / (float)fan_in), lo = -hi;
        else if (strstr(t[i].name, "norm") && g_str_has_suffix(t[i].name, ".weight")) lo = 0.8f, hi = 1.2f;
        rc = h3_checkpoint_dummy_add(ck, t[i].name, H3_ST_BF16, t[i].ndim, t[i].shape, lo, hi, status);
    }
    free(t);
    return rc;
}

/* ---- load ---------------------------------------------------------------------- */

/* torch's fp32 inv_freq for theta 1e4 at exponents 2j/36 (the release's
 * 72-wide heads), docs/spec/h3-conditioner.md §5.3. */
static const uint32_t inv_freq_1e4_36[18] = {
    0x3f800000, 0x3f1977cc, 0x3eb800d6, 0x3e5c9d35, 0x3e044133, 0x3d9e91b6, 0x3d3e1e95, 0x3ce3f280, 0x3c88a69b,
    0x3c23d70a, 0x3bc47060, 0x3b6b8631, 0x3b0d3169, 0x3aa94938, 0x3a4af7f3, 0x39f35a5c, 0x3991e2e1, 0x392ee9bf,
};

/* inv_freq[j] = 1 / theta^(2j/dim) for dim = head_dim/2 (VisionRotaryEmbedding). */
static void make_inv_freq(h3_vision *v) {
    int dim = v->head_dim / 2;
    for (int j = 0; j < dim / 2; j++) {
        if (v->cfg.rope_theta == 10000.0 && dim == 36) {
            memcpy(&v->inv_freq[j], &inv_freq_1e4_36[j], sizeof(float));
            continue;
        }
        float e = (float)(2 * j) / (float)dim;
        v->inv_freq[j] = 1.0f / powf((float)v->cfg.rope_theta, e);
    }
}

void h3_vision_free(h3_vision *v) {
    if (!v) return;
    if (v->w)
        for (int i = 0; i < v->n_weights; i++) h3_weight_free(v->b, &v->w[i]);
    free(v->w);
    free(v->inv_freq);
    free(v);
}

static h3_status_code load_all(h3_vision *v, const h3_checkpoint *ck, h3_status *status) {
    h3_vision_tensor_info *t = NULL;
    int n = 0;
    h3_status_code rc = h3_vision_tensor_list(&v->cfg, &t, &n, status);
    if (rc != H3_OK) return rc;
    v->w = calloc((size_t)n, sizeof *v->w);
    if (!v->w) rc = h3_fail(status, H3_ERR_NO_MEMORY, "vision tower: out of host memory");
    for (int i = 0; i < n && rc == H3_OK; i++) {
        const h3_st_tensor *src;
        rc = h3_checkpoint_get(ck, t[i].name, t[i].ndim, t[i].shape, &src, status);
        if (rc == H3_OK) rc = h3_weight_load(v->b, src, H3_WEIGHT_DEFAULT, &v->w[i], status);
        if (rc == H3_OK) v->n_weights = i + 1;
    }
    free(t);
    return rc;
}

/* ---- heads padded for the tensor-core attention ------------------------------------
 * The release's tower has 16 heads of width 72, and the bf16 attention
 * kernels take widths 64 and 128: at 72 every block ran the generic kernel,
 * 23x slower than eager torch (docs/PERFORMANCE.md). With each head's q, k
 * and v padded with zero channels to 128 (zero rows in the qkv projection,
 * zero columns in the output projection), the scores and outputs are the
 * same sums (the zeros add nothing; the scale stays 1/sqrt(72)), computed by
 * the fast kernel. Only on the bf16 backend (CUDA), where that kernel is;
 * the float32 paths keep the checkpoint's shapes. */

static int padded_width(const h3_backend *b, int dh) {
    if (h3_backend_compute_dtype(b) != H3_BF16 || dh == 64 || dh == 128 || dh > 128) return dh;
    return dh < 64 ? 64 : 128;
}

static h3_view view2(int64_t rows, int64_t cols, int64_t offset, int64_t row_stride) {
    h3_view v = {.ndim = 2, .shape = {rows, cols}, .offset = offset, .stride = {row_stride, 1}};
    return v;
}

/* Block l's qkv weight [3·H·dh, C] and bias, and proj weight [C, H·dh],
 * onto the padded head width P. */
static h3_status_code pad_block(h3_vision *v, int l, h3_status *status) {
    h3_backend *b = v->b;
    h3_tensor *w = &v->w[block_index(l, 0)];
    int64_t H = v->cfg.num_heads, dh = v->head_dim, P = v->head_pad, C = v->cfg.hidden_size;
    h3_tensor qkv, bias, proj;
    int64_t qkv_shape[2] = {3 * H * P, C}, bias_shape[1] = {3 * H * P}, proj_shape[2] = {C, H * P};
    h3_status_code rc = h3_weight_zeros(b, w[B_QKV_W].dtype, 2, qkv_shape, &qkv, status);
    if (rc == H3_OK) rc = h3_weight_zeros(b, w[B_QKV_B].dtype, 1, bias_shape, &bias, status);
    if (rc == H3_OK) rc = h3_weight_zeros(b, w[B_PROJ_W].dtype, 2, proj_shape, &proj, status);
    if (rc != H3_OK) return rc;
    for (int64_t part = 0; part < 3; part++)
        for (int64_t h = 0; h < H; h++) {
            int64_t from = part * H * dh + h * dh, to = part * H * P + h * P;
            h3_view dv = view2(dh, C, to * C, C), sv = view2(dh, C, from * C, C);
            h3_op_copy_view(b, &qkv, &dv, &w[B_QKV_W], &sv);
            h3_view db = view2(1, dh, to, dh), sb = view2(1, dh, from, dh);
            h3_op_copy_view(b, &bias, &db, &w[B_QKV_B], &sb);
        }
    for (int64_t h = 0; h < H; h++) {
        h3_view dv = view2(C, dh, h * P, H * P), sv = view2(C, dh, h * dh, H * dh);
        h3_op_copy_view(b, &proj, &dv, &w[B_PROJ_W], &sv);
    }
    rc = h3_backend_check(b, status);
    h3_weight_free(b, &w[B_QKV_W]);
    h3_weight_free(b, &w[B_QKV_B]);
    h3_weight_free(b, &w[B_PROJ_W]);
    w[B_QKV_W] = qkv;
    w[B_QKV_B] = bias;
    w[B_PROJ_W] = proj;
    return rc;
}

static h3_status_code pad_heads(h3_vision *v, h3_status *status) {
    v->head_pad = padded_width(v->b, v->head_dim);
    h3_status_code rc = H3_OK;
    for (int l = 0; v->head_pad != v->head_dim && l < (int)v->cfg.depth && rc == H3_OK; l++)
        rc = pad_block(v, l, status);
    return rc;
}

h3_status_code h3_vision_load(h3_backend *b, const h3_vision_config *cfg, const h3_checkpoint *ck, h3_vision **out,
                              h3_status *status) {
    *out = NULL;
    h3_vision *v = calloc(1, sizeof *v);
    if (!v) return h3_fail(status, H3_ERR_NO_MEMORY, "vision tower: out of host memory");
    v->b = b;
    v->cfg = *cfg;
    v->head_dim = (int)(cfg->hidden_size / cfg->num_heads);
    v->grid_side = (int)sqrt((double)cfg->num_position_embeddings);
    v->inv_freq = malloc((size_t)(v->head_dim / 4) * sizeof *v->inv_freq);
    h3_status_code rc = v->inv_freq ? H3_OK : h3_fail(status, H3_ERR_NO_MEMORY, "vision tower: out of host memory");
    if (rc == H3_OK) rc = load_all(v, ck, status);
    if (rc == H3_OK) rc = pad_heads(v, status);
    if (rc != H3_OK) {
        h3_vision_free(v);
        return rc;
    }
    make_inv_freq(v);
    v->patch_w = h3_tensor_2d(&v->w[G_PATCH_W], cfg->hidden_size, h3_tensor_numel(&v->w[G_PATCH_W]) / cfg->hidden_size);
    *out = v;
    return H3_OK;
}

const h3_vision_config *h3_vision_get_config(const h3_vision *v) { return &v->cfg; }

int64_t h3_vision_tokens(const h3_vision *v, const int64_t grid_thw[3]) {
    int64_t m = v->cfg.spatial_merge_size;
    for (int i = 0; i < 3; i++)
        if (grid_thw[i] < 1 || grid_thw[i] > 65536) return -1;
    if (grid_thw[1] % m || grid_thw[2] % m) return -1;
    return grid_thw[0] * grid_thw[1] * grid_thw[2] / (m * m);
}

/* ---- host tables --------------------------------------------------------------- */

/* torch.linspace(0, end, steps) in float32, its scalar formula (the CUDA
 * kernel's, and the CPU's for short ranges): the first half counts up from
 * 0, the second down from end. */
static float linspace_at(float end, int64_t steps, int64_t i) {
    if (steps == 1) return 0.0f;
    float step = end / (float)(steps - 1);
    if (i < steps / 2) return step * (float)i;
    return end - step * (float)(steps - i - 1);
}

/* Patch p of an image in merge-window order -> its raster (row, col). */
static void window_to_raster(int64_t p, int64_t gw, int64_t m, int64_t *row, int64_t *col) {
    int64_t per_window = m * m, windows_w = gw / m;
    int64_t win = p / per_window, in = p % per_window;
    *row = (win / windows_w) * m + in / m;
    *col = (win % windows_w) * m + in % m;
}

/* fast_pos_embed_interpolate: 4 bilinear taps per patch into the grid_side²
 * table. idx/wt are [4][n] (tap-major), n = Σ t·h·w. */
static void position_taps(const h3_vision *v, const int64_t (*grid)[3], int n_images, int64_t n, int32_t *idx,
                          float *wt) {
    int side = v->grid_side;
    int64_t m = v->cfg.spatial_merge_size, p0 = 0;
    for (int i = 0; i < n_images; i++) {
        int64_t gt = grid[i][0], gh = grid[i][1], gw = grid[i][2];
        for (int64_t p = 0; p < gt * gh * gw; p++) {
            int64_t r, c;
            window_to_raster(p % (gh * gw), gw, m, &r, &c);
            float hy = linspace_at((float)(side - 1), gh, r), wx = linspace_at((float)(side - 1), gw, c);
            int hf = (int)hy, wf = (int)wx, hc = hf + 1 < side ? hf + 1 : side - 1, wc = wf + 1 < side ? wf + 1 : side - 1;
            float dh = hy - (float)hf, dw = wx - (float)wf;
            int64_t o = p0 + p;
            idx[o] = hf * side + wf;
            idx[n + o] = hf * side + wc;
            idx[2 * n + o] = hc * side + wf;
            idx[3 * n + o] = hc * side + wc;
            wt[o] = (1.0f - dh) * (1.0f - dw);
            wt[n + o] = (1.0f - dh) * dw;
            wt[2 * n + o] = dh * (1.0f - dw);
            wt[3 * n + o] = dh * dw;
        }
        p0 += gt * gh * gw;
    }
}

/* rot_pos_emb: per patch, angles [row·f | col·f] (head_dim/2), duplicated
 * over both halves; cos/sin [n, head_dim]. */
static void rotary_tables(const h3_vision *v, const int64_t (*grid)[3], int n_images, float *cos_t, float *sin_t) {
    int dh = v->head_dim, q = dh / 4;
    int64_t m = v->cfg.spatial_merge_size, o = 0;
    for (int i = 0; i < n_images; i++) {
        int64_t gt = grid[i][0], gh = grid[i][1], gw = grid[i][2];
        for (int64_t p = 0; p < gt * gh * gw; p++, o++) {
            int64_t r, c;
            window_to_raster(p % (gh * gw), gw, m, &r, &c);
            float *cr = cos_t + o * dh, *sr = sin_t + o * dh;
            for (int j = 0; j < 2 * q; j++) {
                float angle = (float)(j < q ? r : c) * v->inv_freq[j % q];
                cr[j] = cr[j + 2 * q] = cosf(angle);
                sr[j] = sr[j + 2 * q] = sinf(angle);
            }
        }
    }
}

/* ---- forward ------------------------------------------------------------------- */

/* x [n, C] += Σ_k table[idx_k] · w_k, the taps summed in order, each product
 * rounded to the compute dtype first (transformers, in the table's dtype). */
static void add_position_embedding(h3_vision *v, h3_tensor *x, const h3_tensor *idx, const h3_tensor *wt) {
    h3_backend *b = v->b;
    int64_t n = h3_tensor_rows(x), C = v->cfg.hidden_size;
    h3_dtype dt = h3_backend_compute_dtype(b);
    h3_tensor acc = h3_new_2d(b, dt, n, C), tap = h3_new_2d(b, dt, n, C), wb = h3_new_2d(b, dt, n, C);
    for (int k = 0; k < 4; k++) {
        h3_tensor ik = *idx; /* tap k's n indexes */
        ik.shape[0] = n;
        ik.data = (int32_t *)idx->data + k * n;
        h3_view wv = {2, {n, C}, k * n, {1, 0}}, dv = {2, {n, C}, 0, {C, 1}};
        h3_op_gather_rows(b, &tap, &v->w[G_POS], &ik);
        h3_op_copy_view(b, &wb, &dv, wt, &wv); /* w_k broadcast over the row */
        h3_op_mul(b, k ? &tap : &acc, &tap, &wb);
        if (k) h3_op_add(b, &acc, &acc, &tap);
    }
    h3_op_add(b, x, x, &acc);
}

/* One block on x [n, C], in place; seg[i] .. seg[i+1] are image i's rows. */
static void block_forward(h3_vision *v, int l, h3_tensor *x, const h3_tensor *cos_t, const h3_tensor *sin_t,
                          const int64_t *seg, int n_images) {
    h3_backend *b = v->b;
    const h3_tensor *w = &v->w[block_index(l, 0)];
    int64_t n = h3_tensor_rows(x), C = v->cfg.hidden_size;
    int H = (int)v->cfg.num_heads, dh = v->head_dim, P = v->head_pad; /* P: the padded head width */
    int64_t HP = (int64_t)H * P;
    h3_dtype dt = h3_backend_compute_dtype(b);
    size_t mark = h3_arena_mark(b);
    h3_tensor h = h3_new_2d(b, dt, n, C), o = h3_new_2d(b, dt, n, HP);
    h3_tensor qkv[3];
    h3_tensor bias3 = h3_tensor_2d(&w[B_QKV_B], 3, HP);
    h3_op_layer_norm(b, &h, x, &w[B_NORM1_W], &w[B_NORM1_B], LN_EPS);
    for (int i = 0; i < 3; i++) {
        h3_tensor wi = h3_tensor_rows_view(&w[B_QKV_W], i * HP, HP), bi = h3_tensor_rows_view(&bias3, i, 1);
        qkv[i] = h3_new_2d(b, dt, n, HP);
        h3_op_linear(b, &qkv[i], &h, &wi, &bi);
    }
    /* the rotation covers the head's own dh channels; the padding stays zero */
    h3_op_rope(b, &qkv[0], cos_t, sin_t, H, P, dh);
    h3_op_rope(b, &qkv[1], cos_t, sin_t, H, P, dh);
    for (int i = 0; i < n_images; i++) {
        int64_t r0 = seg[i], nr = seg[i + 1] - seg[i];
        h3_tensor oi = h3_tensor_rows_view(&o, r0, nr), qi = h3_tensor_rows_view(&qkv[0], r0, nr);
        h3_tensor ki = h3_tensor_rows_view(&qkv[1], r0, nr), vi = h3_tensor_rows_view(&qkv[2], r0, nr);
        h3_op_attention(b, &oi, &qi, &ki, &vi, H, H, P, 0, (float)(1.0 / sqrt((double)dh)));
    }
    h3_op_linear(b, &h, &o, &w[B_PROJ_W], &w[B_PROJ_B]);
    h3_op_add(b, x, x, &h);

    h3_tensor u = h3_new_2d(b, dt, n, v->cfg.intermediate_size);
    h3_op_layer_norm(b, &h, x, &w[B_NORM2_W], &w[B_NORM2_B], LN_EPS);
    h3_op_linear(b, &u, &h, &w[B_FC1_W], &w[B_FC1_B]);
    h3_op_gelu(b, &u, &u, 1);
    h3_op_linear(b, &h, &u, &w[B_FC2_W], &w[B_FC2_B]);
    h3_op_add(b, x, x, &h);
    h3_arena_reset(b, mark);
}

/* Patch merger m (0: the final one, 1 + k: DeepStack k): x [n, C] -> out [n/4, O]. */
static void merger_forward(h3_vision *v, int m, const h3_tensor *x, h3_tensor *out) {
    h3_backend *b = v->b;
    const h3_tensor *w = &v->w[merger_index(&v->cfg, m, 0)];
    int64_t n = h3_tensor_rows(x), C = v->cfg.hidden_size, s = v->cfg.spatial_merge_size;
    int64_t W = C * s * s, rows = n / (s * s);
    h3_dtype dt = h3_backend_compute_dtype(b);
    size_t mark = h3_arena_mark(b);
    h3_tensor t = h3_new_2d(b, dt, rows, W), u = h3_new_2d(b, dt, rows, W);
    if (m > 0) {
        h3_tensor xw = h3_tensor_2d(x, rows, W);
        h3_op_layer_norm(b, &t, &xw, &w[M_NORM_W], &w[M_NORM_B], LN_EPS);
    } else {
        h3_tensor tn = h3_tensor_2d(&t, n, C);
        h3_op_layer_norm(b, &tn, x, &w[M_NORM_W], &w[M_NORM_B], LN_EPS);
    }
    h3_op_linear(b, &u, &t, &w[M_FC1_W], &w[M_FC1_B]);
    h3_op_gelu(b, &u, &u, 0);
    h3_op_linear(b, out, &u, &w[M_FC2_W], &w[M_FC2_B]);
    h3_arena_reset(b, mark);
}

/* Rows per image and their total; errors for grids the tower cannot take. */
static h3_status_code check_forward(const h3_vision *v, const int64_t (*grid)[3], int n_images,
                                    const h3_tensor *embeds, const h3_tensor *deepstack, int64_t *seg,
                                    h3_status *status) {
    int64_t tokens = 0;
    seg[0] = 0;
    for (int i = 0; i < n_images; i++) {
        int64_t t = h3_vision_tokens(v, grid[i]);
        if (grid[i][0] != 1) /* attention would run per frame: a video, which H3's FL2VA never sends */
            return h3_fail(status, H3_ERR_UNSUPPORTED, "vision tower: image %d has %lld temporal patches; only still "
                           "images (grid t = 1) are supported", i, (long long)grid[i][0]);
        if (t < 0)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                           "vision tower: image %d has grid [%lld, %lld, %lld]; sides must be positive multiples of %lld",
                           i, (long long)grid[i][0], (long long)grid[i][1], (long long)grid[i][2],
                           (long long)v->cfg.spatial_merge_size);
        tokens += t;
        seg[i + 1] = seg[i] + grid[i][0] * grid[i][1] * grid[i][2];
    }
    h3_dtype dt = h3_backend_compute_dtype(v->b);
    int bad = !embeds || embeds->dtype != dt || h3_tensor_rows(embeds) != tokens ||
              h3_tensor_cols(embeds) != v->cfg.out_hidden_size;
    for (int k = 0; k < v->cfg.n_deepstack && !bad; k++)
        bad = deepstack[k].dtype != dt || h3_tensor_rows(&deepstack[k]) != tokens ||
              h3_tensor_cols(&deepstack[k]) != v->cfg.out_hidden_size;
    if (bad)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "vision tower: embeds and the %d DeepStack outputs must be %s [%lld, %lld] tensors",
                       v->cfg.n_deepstack, h3_dtype_name(dt), (long long)tokens, (long long)v->cfg.out_hidden_size);
    return H3_OK;
}

/* The host tables of one call, uploaded. */
static h3_status_code upload_tables(h3_vision *v, const float *pixels, const int64_t (*grid)[3], int n_images,
                                    int64_t n, h3_tensor *pix, h3_tensor *idx, h3_tensor *wt, h3_tensor *cos_t,
                                    h3_tensor *sin_t, h3_status *status) {
    h3_backend *b = v->b;
    h3_dtype dt = h3_backend_compute_dtype(b);
    int dh = v->head_dim;
    *pix = h3_new_2d(b, dt, n, v->patch_w.shape[1]);
    *idx = h3_new_1d(b, H3_I32, 4 * n);
    *wt = h3_new_1d(b, dt, 4 * n);
    *cos_t = h3_new_2d(b, H3_F32, n, dh);
    *sin_t = h3_new_2d(b, H3_F32, n, dh);
    h3_status_code rc = h3_backend_check(b, status);
    int32_t *hi = malloc((size_t)n * 4 * sizeof *hi);
    float *hw = malloc((size_t)n * 4 * sizeof *hw), *hc = malloc((size_t)n * dh * 2 * sizeof *hc);
    if (rc == H3_OK && (!hi || !hw || !hc))
        rc = h3_fail(status, H3_ERR_NO_MEMORY, "vision tower: out of host memory for %lld patches", (long long)n);
    if (rc == H3_OK) {
        position_taps(v, grid, n_images, n, hi, hw);
        rotary_tables(v, grid, n_images, hc, hc + (size_t)n * dh);
        rc = h3_tensor_upload_f32(b, pix, pixels, status);
    }
    if (rc == H3_OK) rc = h3_tensor_upload_i32(b, idx, hi, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, wt, hw, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, cos_t, hc, status);
    if (rc == H3_OK) rc = h3_tensor_upload_f32(b, sin_t, hc + (size_t)n * dh, status);
    free(hi);
    free(hw);
    free(hc);
    return rc;
}

h3_status_code h3_vision_forward(h3_vision *v, const float *pixel_values, const int64_t (*grid_thw)[3], int n_images,
                                 h3_tensor *embeds, h3_tensor *deepstack, h3_status *status) {
    h3_backend *b = v->b;
    if (n_images < 1 || n_images > 64)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "vision tower: %d images; want 1..64", n_images);
    int64_t seg[65];
    h3_status_code rc = check_forward(v, grid_thw, n_images, embeds, deepstack, seg, status);
    if (rc == H3_OK) rc = h3_backend_check(b, status);
    if (rc != H3_OK) return rc;
    int64_t n = seg[n_images];
    size_t mark = h3_arena_mark(b);
    h3_tensor pix, idx, wt, cos_t, sin_t;
    rc = upload_tables(v, pixel_values, grid_thw, n_images, n, &pix, &idx, &wt, &cos_t, &sin_t, status);
    h3_tensor x = h3_new_2d(b, h3_backend_compute_dtype(b), n, v->cfg.hidden_size);
    if (rc == H3_OK) {
        h3_op_linear(b, &x, &pix, &v->patch_w, &v->w[G_PATCH_B]);
        add_position_embedding(v, &x, &idx, &wt);
        rc = h3_backend_check(b, status);
    }
    for (int l = 0, k = 0; l < v->cfg.depth && rc == H3_OK; l++) {
        block_forward(v, l, &x, &cos_t, &sin_t, seg, n_images);
        if (k < v->cfg.n_deepstack && v->cfg.deepstack[k] == l) merger_forward(v, 1 + k, &x, &deepstack[k]), k++;
        if ((rc = h3_backend_check(b, status)) != H3_OK) h3_status_prefix(status, "vision block %d", l);
    }
    if (rc == H3_OK) {
        merger_forward(v, 0, &x, embeds);
        rc = h3_backend_check(b, status);
    }
    h3_arena_reset(b, mark);
    return rc;
}
