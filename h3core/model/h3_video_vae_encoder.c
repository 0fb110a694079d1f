/* h3_video_vae_encoder.c - the video VAE encoder's forward (docs/spec/h3-vaes.md
 * §3.3, §3.4, §3.10), over the weights h3_video_vae.c loads.
 *
 * Per clip (one frame, or 17) and per 256-px spatial tile: conv_in, the
 * levels (resnets, then the strided downsampler), GroupNorm + SiLU, conv_out
 * and quant_conv give the tile's moments; the tiles are stitched in latent
 * space with diffusers' blend order, the clips concatenated, the trailing
 * token_drop latents dropped. Activations are channels last, [T, H, W, C]
 * float32; a 3×3×3 convolution is an im2col (h3_op_im2col3d, in the weight's
 * dtype: bf16 on CUDA) into a bounded column buffer and a GEMM
 * (h3_op_linear, float32 out, bias fused). Everything between the clip's
 * upload and the stitched moments runs on the backend; three ping-pong
 * activation buffers and the column buffer come from the arena once per clip.
 * Under tensor parallelism the tiles go round-robin over the ranks and are
 * all-gathered, so every rank ends with the whole result. */
#include "model/h3_video_vae_encoder.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/h3_safetensors.h"
#include "model/h3_video_vae_impl.h"

#define MAX_TILES 256                  /* per axis */
#define COL_BUDGET ((int64_t)1 << 24) /* elements of the im2col buffer (32 MB in bf16) */

static const float pixel_mean[3] = {0.485f, 0.456f, 0.406f};
static const float pixel_std[3] = {0.229f, 0.224f, 0.225f};

/* One clip's encode: the geometry and the buffers of its tiles. */
typedef struct enc_state {
    h3_video_vae_info vi;
    const h3_vae_encoder *e;
    h3_backend *b;
    int T, H, W;             /* the clip, pixels */
    int Tl, Hl, Wl;          /* its moments */
    int ny, nx, th, tw;      /* tiles and their size (pixels) */
    int ys[MAX_TILES], yo[MAX_TILES], xs[MAX_TILES], xo[MAX_TILES];
    h3_tensor clip;          /* [T, H, W, 3] float32 */
    h3_tensor canvas;        /* [Tl, Hl, Wl, 2C] stitched moments */
    h3_tensor *raw;          /* ny·nx tiles [Tl, th/r, tw/r, 2C]: rows of `gathered` */
    h3_tensor gathered;      /* [rounds·ranks, tile moments]: round k holds tiles k·ranks .. k·ranks + ranks − 1 */
    h3_tensor tile;          /* [T, th, tw, 3] */
    h3_tensor buf[3], col;   /* activations (float32, max numel) and im2col */
} enc_state;

/* ---- shapes ------------------------------------------------------------------------ */

static h3_tensor shaped(const h3_tensor *buf, int64_t T, int64_t H, int64_t W, int64_t C) {
    h3_tensor t = *buf;
    t.ndim = 4;
    t.shape[0] = T, t.shape[1] = H, t.shape[2] = W, t.shape[3] = C;
    return t;
}

static h3_conv3d_geom geom_k3(void) {
    return (h3_conv3d_geom){.kt = 3, .kh = 3, .kw = 3, .st = 1, .sh = 1, .sw = 1, .pad_t = 2,
                            .pad_top = 1, .pad_bottom = 1, .pad_left = 1, .pad_right = 1};
}

/* Downsample3d: a 3×3×3 conv with stride (t, s, s), causal in time; a
 * spatial stride of 2 pads the bottom and right by 1 (reflect) instead. */
static h3_conv3d_geom geom_down(int t, int s) {
    int p = s == 2;
    return (h3_conv3d_geom){.kt = 3, .kh = 3, .kw = 3, .st = t, .sh = s, .sw = s, .pad_t = 2,
                            .pad_bottom = p, .pad_right = p};
}

static int64_t out_len(int64_t len, int pad, int k, int s) { return (len + pad - k) / s + 1; }

/* Frames after the encoder for a clip of T frames. */
static int clip_latents(const h3_vae_encoder *e, int T) {
    for (int l = 0; l < e->n_levels; l++)
        if (e->level[l].t_stride * e->level[l].s_stride > 1) T = (int)out_len(T, 2, 3, e->level[l].t_stride);
    return T;
}

/* The most float32 values one activation of a tile of T x H x W needs
 * (M: conv_out's channels). */
static int64_t max_activation(const h3_vae_encoder *e, int64_t T, int64_t H, int64_t W, int64_t M) {
    int64_t m = T * H * W * e->level[0].cout;
    for (int l = 0; l < e->n_levels; l++) {
        const h3_vae_enc_level *lv = &e->level[l];
        int64_t n = T * H * W * (lv->cout > lv->res[0].cin ? lv->cout : lv->res[0].cin);
        if (n > m) m = n;
        if (lv->t_stride * lv->s_stride > 1) {
            T = out_len(T, 2, 3, lv->t_stride);
            H = out_len(H, lv->s_stride == 2, 3, lv->s_stride), W = out_len(W, lv->s_stride == 2, 3, lv->s_stride);
        }
    }
    return m > T * H * W * M ? m : T * H * W * M;
}

/* ---- the tile's forward ---------------------------------------------------------------- */

/* w[:, :, kt−1] of a conv weight [Cout, Cin·kt·kh·kw], gathered on the
 * backend into [Cout, Cin·kh·kw] (arena). */
static h3_tensor last_tap(enc_state *s, const h3_tensor *w, const h3_conv3d_geom *g) {
    int64_t Cout = w->shape[0], hw = (int64_t)g->kh * g->kw, Cin = w->shape[1] / (g->kt * hw);
    h3_tensor t = h3_new_2d(s->b, w->dtype, Cout, Cin * hw);
    h3_view sv, dv;
    memset(&sv, 0, sizeof sv), memset(&dv, 0, sizeof dv);
    sv.ndim = dv.ndim = 3;
    sv.shape[0] = dv.shape[0] = Cout, sv.shape[1] = dv.shape[1] = Cin, sv.shape[2] = dv.shape[2] = hw;
    sv.offset = (g->kt - 1) * hw;
    sv.stride[0] = w->shape[1], sv.stride[1] = g->kt * hw, sv.stride[2] = 1;
    dv.stride[0] = Cin * hw, dv.stride[1] = hw, dv.stride[2] = 1;
    h3_op_copy_view(s->b, &t, &dv, w, &sv);
    return t;
}

static h3_tensor conv3d_taps(enc_state *s, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                             const h3_conv3d_geom *g, int out);

/* y (in buf[out]) = conv(x). One frame (a keyframe) meets only the last
 * temporal tap, the others see the causal zero frames: that tap alone is
 * the same convolution at a third of the work (what ComfyUI does). */
static h3_tensor conv3d(enc_state *s, const h3_tensor *x, const h3_vae_conv *cv, const h3_conv3d_geom *g, int out) {
    if (x->shape[0] != 1 || g->kt == 1 || g->pad_t != g->kt - 1) return conv3d_taps(s, x, &cv->w, &cv->b, g, out);
    size_t mark = h3_arena_mark(s->b);
    h3_tensor w = last_tap(s, &cv->w, g);
    h3_conv3d_geom g1 = *g;
    g1.kt = 1, g1.pad_t = 0;
    h3_tensor y = conv3d_taps(s, x, &w, &cv->b, &g1, out);
    h3_arena_reset(s->b, mark);
    return y;
}

/* conv(x) with weight w [Cout, Cin·kt·kh·kw]: im2col of row blocks that fit
 * the column buffer, each a GEMM. */
static h3_tensor conv3d_taps(enc_state *s, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias,
                             const h3_conv3d_geom *g, int out) {
    int64_t To = out_len(x->shape[0], g->pad_t, g->kt, g->st);
    int64_t Ho = out_len(x->shape[1], g->pad_top + g->pad_bottom, g->kh, g->sh);
    int64_t Wo = out_len(x->shape[2], g->pad_left + g->pad_right, g->kw, g->sw);
    int64_t Cout = w->shape[0], K = w->shape[1], N = To * Ho * Wo;
    h3_tensor y = shaped(&s->buf[out], To, Ho, Wo, Cout), y2 = h3_tensor_2d(&y, N, Cout);
    int64_t rows = h3_tensor_numel(&s->col) / K;
    h3_tensor cols = s->col; /* [rows, K] over the column buffer */
    cols.ndim = 2, cols.shape[0] = rows, cols.shape[1] = K;
    if (rows > N) rows = N;
    for (int64_t n0 = 0; n0 < N; n0 += rows) {
        int64_t nr = N - n0 < rows ? N - n0 : rows;
        h3_tensor col = h3_tensor_rows_view(&cols, 0, nr), yr = h3_tensor_rows_view(&y2, n0, nr);
        h3_op_im2col3d(s->b, &col, x, g, n0);
        h3_op_linear(s->b, &yr, &col, w, bias);
    }
    return y;
}

/* A 1×1×1 convolution: a linear over the channels. */
static h3_tensor conv1(enc_state *s, const h3_tensor *x, const h3_vae_conv *cv, h3_tensor *dst) {
    int64_t N = h3_tensor_rows(x), Cout = cv->w.shape[0];
    h3_tensor y = shaped(dst, x->shape[0], x->shape[1], x->shape[2], Cout);
    h3_tensor x2 = h3_tensor_2d(x, N, x->shape[3]), y2 = h3_tensor_2d(&y, N, Cout);
    h3_op_linear(s->b, &y2, &x2, &cv->w, &cv->b);
    return y;
}

/* GroupNorm (+ SiLU) per frame of x into buf[out]. */
static h3_tensor group_norm(enc_state *s, const h3_tensor *x, const h3_tensor *w, const h3_tensor *bias, int silu,
                            int out) {
    h3_tensor y = shaped(&s->buf[out], x->shape[0], x->shape[1], x->shape[2], x->shape[3]);
    h3_tensor x3 = *x, y3 = y;
    x3.ndim = y3.ndim = 3;
    x3.shape[1] = y3.shape[1] = x->shape[1] * x->shape[2];
    x3.shape[2] = y3.shape[2] = x->shape[3];
    h3_op_group_norm(s->b, &y3, &x3, w, bias, s->e->groups, s->e->eps, silu);
    return y;
}

/* ResnetBlock3d on buf[*cur]: conv2(silu(gn2(conv1(silu(gn1(x)))))) + shortcut(x). */
static h3_tensor resnet(enc_state *s, const h3_vae_enc_resnet *r, const h3_tensor *x, int *cur) {
    int i = *cur, j = (i + 1) % 3, k = (i + 2) % 3;
    h3_conv3d_geom g = geom_k3();
    h3_tensor h = group_norm(s, x, &r->norm1_w, &r->norm1_b, 1, j);
    h3_tensor h1 = conv3d(s, &h, &r->conv1, &g, k);
    h1 = group_norm(s, &h1, &r->norm2_w, &r->norm2_b, 1, k);
    h3_tensor h2 = conv3d(s, &h1, &r->conv2, &g, j);
    h3_tensor res = r->cin != r->cout ? conv1(s, x, &r->shortcut, &s->buf[k]) : *x;
    h3_op_add(s->b, &h2, &h2, &res);
    *cur = j;
    return h2;
}

/* encoder + quant_conv of the tile in s->tile into `moments` [Tl, th/r, tw/r, 2C]. */
static void tile_forward(enc_state *s, h3_tensor *moments) {
    const h3_vae_encoder *e = s->e;
    h3_conv3d_geom g = geom_k3();
    int cur = 0;
    h3_tensor x = conv3d(s, &s->tile, &e->conv_in, &g, cur);
    for (int l = 0; l < e->n_levels; l++) {
        const h3_vae_enc_level *lv = &e->level[l];
        for (int j = 0; j < e->layers; j++) x = resnet(s, &lv->res[j], &x, &cur);
        if (lv->t_stride * lv->s_stride > 1) {
            h3_conv3d_geom gd = geom_down(lv->t_stride, lv->s_stride);
            cur = (cur + 1) % 3;
            x = conv3d(s, &x, &lv->down, &gd, cur);
        }
    }
    int j = (cur + 1) % 3, k = (cur + 2) % 3;
    x = group_norm(s, &x, &e->norm_out_w, &e->norm_out_b, 1, j);
    x = conv3d(s, &x, &e->conv_out, &g, k);
    conv1(s, &x, &e->quant, moments);
}

/* ---- tiles and stitching ----------------------------------------------------------- */

static h3_view make_view(int ndim, const int64_t *shape, int64_t offset, const int64_t *stride) {
    h3_view v;
    memset(&v, 0, sizeof v);
    v.ndim = ndim;
    v.offset = offset;
    for (int i = 0; i < ndim; i++) v.shape[i] = shape[i], v.stride[i] = stride[i];
    return v;
}

/* s->tile = the clip's pixels [y0, y0+th) x [x0, x0+tw). */
static void gather_tile(enc_state *s, int y0, int x0) {
    int64_t shape[4] = {s->T, s->th, s->tw, 3};
    int64_t ss[4] = {(int64_t)s->H * s->W * 3, (int64_t)s->W * 3, 3, 1};
    int64_t ds[4] = {(int64_t)s->th * s->tw * 3, (int64_t)s->tw * 3, 3, 1};
    h3_view sv = make_view(4, shape, ((int64_t)y0 * s->W + x0) * 3, ss), dv = make_view(4, shape, 0, ds);
    h3_op_copy_view(s->b, &s->tile, &dv, &s->clip, &sv);
}

/* D _stitch_tiles in latent space (overlaps / ratio), channels last: the
 * kept part of raw tile (i, j) into the canvas, its top rows blended with
 * the raw tile above, then its left columns with the raw tile to the left. */
static void stitch_tile(enc_state *s, int i, int j) {
    int r = s->vi.ratio;
    int64_t M = 2 * (int64_t)s->vi.z_channels, lh = s->th / r, lw = s->tw / r;
    int64_t oh = i < s->ny - 1 ? lh - s->yo[i] / r : lh, ow = j < s->nx - 1 ? lw - s->xo[j] / r : lw;
    int64_t cs[4] = {(int64_t)s->Hl * s->Wl * M, (int64_t)s->Wl * M, M, 1}, rs[4] = {lh * lw * M, lw * M, M, 1};
    int64_t at = ((int64_t)(s->ys[i] / r) * s->Wl + s->xs[j] / r) * M;
    h3_tensor *raw = &s->raw[i * s->nx + j];
    int64_t shape[4] = {s->Tl, oh, ow, M};
    h3_view cv = make_view(4, shape, at, cs), rv = make_view(4, shape, 0, rs);
    h3_op_copy_view(s->b, &s->canvas, &cv, raw, &rv);
    if (i > 0) {
        int e = s->yo[i - 1] / r;
        int64_t sh[4] = {s->Tl, e < oh ? e : oh, ow, M};
        h3_view dv = make_view(4, sh, at, cs), av = make_view(4, sh, (lh - e) * lw * M, rs);
        h3_op_blend_view(s->b, &s->canvas, &dv, &s->raw[(i - 1) * s->nx + j], &av, &s->canvas, &dv, 1, e);
    }
    if (j > 0) {
        int e = s->xo[j - 1] / r;
        int64_t sh[4] = {s->Tl, oh, e < ow ? e : ow, M};
        h3_view dv = make_view(4, sh, at, cs), av = make_view(4, sh, (lw - e) * M, rs);
        h3_op_blend_view(s->b, &s->canvas, &dv, &s->raw[i * s->nx + j - 1], &av, &s->canvas, &dv, 2, e);
    }
}

/* ---- a clip ----------------------------------------------------------------------- */

/* Tile layout and the clip's buffers (arena, kept for the clip). */
static h3_status_code clip_setup(enc_state *s, h3_status *status) {
    int r = s->vi.ratio, tl = 0;
    s->ny = h3_video_vae_split_tiles(s->H, s->vi.tile, s->vi.min_overlap, r, s->ys, s->yo, MAX_TILES, &s->th);
    s->nx = h3_video_vae_split_tiles(s->W, s->vi.tile, s->vi.min_overlap, r, s->xs, s->xo, MAX_TILES, &tl);
    s->tw = tl;
    if (s->ny < 1 || s->nx < 1)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "video VAE encode: no tiling of %dx%d by %d/%d", s->W, s->H,
                       s->vi.tile, s->vi.min_overlap);
    s->Tl = clip_latents(s->e, s->T), s->Hl = s->H / r, s->Wl = s->W / r;
    int64_t M = 2 * (int64_t)s->vi.z_channels;
    s->raw = calloc((size_t)(s->ny * s->nx), sizeof *s->raw);
    if (!s->raw) return h3_fail(status, H3_ERR_NO_MEMORY, "video VAE encode: out of memory");
    h3_backend *b = s->b;
    s->clip = h3_new(b, H3_F32, 4, (int64_t[]){s->T, s->H, s->W, 3});
    s->canvas = h3_new(b, H3_F32, 4, (int64_t[]){s->Tl, s->Hl, s->Wl, M});
    int N = s->vi.tp.size, n_tiles = s->ny * s->nx, rounds = (n_tiles + N - 1) / N;
    int64_t rshape[4] = {s->Tl, s->th / r, s->tw / r, M};
    s->gathered = h3_new_2d(b, H3_F32, (int64_t)rounds * N, rshape[0] * rshape[1] * rshape[2] * M);
    for (int t = 0; t < n_tiles && s->gathered.data; t++) {
        h3_tensor row = h3_tensor_rows_view(&s->gathered, t, 1);
        s->raw[t] = h3_tensor_reshape(&row, 4, rshape);
    }
    s->tile = h3_new(b, H3_F32, 4, (int64_t[]){s->T, s->th, s->tw, 3});
    int64_t n = max_activation(s->e, s->T, s->th, s->tw, M), kmax = 0;
    for (int i = 0; i < 3; i++) s->buf[i] = h3_new_1d(b, H3_F32, n);
    for (int l = 0; l < s->e->n_levels; l++)
        if (27 * (int64_t)s->e->level[l].cout > kmax) kmax = 27 * (int64_t)s->e->level[l].cout;
    s->col = h3_new_1d(b, s->e->conv_in.w.dtype, kmax > COL_BUDGET ? kmax : COL_BUDGET);
    return h3_backend_check(b, status);
}

/* Normalized pixels of frames [f0, f0+T) (the last repeated past the end). */
static void normalize_clip(const h3_video_vae_frames *in, int f0, int T, float *x) {
    size_t stride = in->stride ? in->stride : (size_t)in->width * 3;
    size_t fstride = in->frame_stride ? in->frame_stride : stride * (size_t)in->height;
    for (int t = 0; t < T; t++) {
        int f = f0 + t < in->frames ? f0 + t : in->frames - 1;
        for (int y = 0; y < in->height; y++) {
            const uint8_t *row = in->rgb + (size_t)f * fstride + (size_t)y * stride;
            float *o = x + (((size_t)t * in->height + y) * in->width) * 3;
            for (int p = 0; p < in->width * 3; p++) o[p] = ((float)row[p] / 255.0f - pixel_mean[p % 3]) / pixel_std[p % 3];
        }
    }
}

/* Every tile through the encoder: rank r of the tensor-parallel group
 * encodes tiles r, r + N, ... (row-major), and an all-gather after each
 * round of N gives every rank all of them (the same code on the same
 * weights: the one-rank result). */
static h3_status_code encode_tiles(enc_state *s, h3_status *status) {
    const h3_tp *tp = &s->vi.tp;
    int n_tiles = s->ny * s->nx;
    for (int first = 0; first < n_tiles; first += tp->size) {
        int t = first + tp->rank;
        if (t < n_tiles) {
            size_t m = h3_arena_mark(s->b);
            gather_tile(s, s->ys[t / s->nx], s->xs[t % s->nx]);
            tile_forward(s, &s->raw[t]);
            h3_arena_reset(s->b, m);
        }
        h3_tensor round = h3_tensor_rows_view(&s->gathered, first, tp->size);
        h3_tp_all_gather(tp, s->b, &round);
        h3_status_code rc = h3_backend_check(s->b, status);
        if (rc != H3_OK) return rc;
    }
    return H3_OK;
}

/* The stitched moments, channels last, to planar [2C, Tl, Hl, Wl] on the
 * backend, then into host (2C·Tl·Hl·Wl floats). */
static h3_status_code download_moments(enc_state *s, float *host, h3_status *status) {
    int64_t M = 2 * (int64_t)s->vi.z_channels, N = (int64_t)s->Tl * s->Hl * s->Wl;
    int64_t shape[2] = {N, M}, ps[2] = {1, N}, cs[2] = {M, 1};
    h3_tensor planar = h3_new_1d(s->b, H3_F32, M * N);
    h3_view pv = make_view(2, shape, 0, ps), cv = make_view(2, shape, 0, cs);
    h3_op_copy_view(s->b, &planar, &pv, &s->canvas, &cv);
    h3_status_code rc = h3_backend_check(s->b, status);
    return rc == H3_OK ? h3_tensor_download_f32(s->b, &planar, host, status) : rc;
}

/* Encodes frames [f0, f0+T) and writes latents [0, keep) of the clip to
 * frames [t0, t0+keep) of mean/logvar ([C, Ttot, Hl, Wl]). */
static h3_status_code encode_clip(enc_state *s, const h3_video_vae_frames *in, int f0, int t0, int keep, int Ttot,
                                  float *mean, float *logvar, h3_status *status) {
    size_t mark = h3_arena_mark(s->b);
    h3_status_code rc = clip_setup(s, status);
    int64_t C = s->vi.z_channels, HW = (int64_t)s->Hl * s->Wl, plane = (int64_t)s->Tl * HW;
    size_t npix = (size_t)s->T * s->H * s->W * 3, nmom = (size_t)(2 * C * plane);
    float *host = rc == H3_OK ? malloc((npix > nmom ? npix : nmom) * sizeof(float)) : NULL;
    if (rc == H3_OK && !host) rc = h3_fail(status, H3_ERR_NO_MEMORY, "video VAE encode: no memory for the pixels");
    if (rc == H3_OK) {
        normalize_clip(in, f0, s->T, host);
        rc = h3_tensor_upload_f32(s->b, &s->clip, host, status);
    }
    if (rc == H3_OK) rc = encode_tiles(s, status);
    for (int i = 0; rc == H3_OK && i < s->ny; i++)
        for (int j = 0; j < s->nx; j++) stitch_tile(s, i, j);
    if (rc == H3_OK) rc = download_moments(s, host, status);
    for (int64_t c = 0; rc == H3_OK && c < C; c++) {
        size_t n = (size_t)(keep * HW) * sizeof(float);
        if (mean) memcpy(mean + (c * Ttot + t0) * HW, host + c * plane, n);
        if (logvar) memcpy(logvar + (c * Ttot + t0) * HW, host + (C + c) * plane, n);
    }
    free(host);
    free(s->raw);
    s->raw = NULL;
    h3_arena_reset(s->b, mark);
    return rc;
}

/* ---- the API -------------------------------------------------------------------------- */

int h3_video_vae_encoded_frames(const h3_video_vae *vae, int frames) {
    h3_video_vae_info vi;
    if (!vae || frames < 1) return -1;
    h3_video_vae_get_info(vae, &vi);
    if (frames == 1 || !vi.enc) return frames == 1 ? 1 : -1;
    int clips = (frames + vi.clip_length - 1) / vi.clip_length;
    return clips * clip_latents(vi.enc, vi.clip_length) - vi.token_drop;
}

static h3_status_code check_input(const h3_video_vae_info *vi, const h3_video_vae_frames *in, h3_status *status) {
    if (!vi->enc)
        return h3_fail(status, H3_ERR_UNSUPPORTED,
                       "video VAE encode: the VAE was loaded without its encoder (h3_video_vae_options.encoder)");
    if (!in || !in->rgb || in->frames < 1)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "video VAE encode: no frames");
    int r = vi->ratio;
    if (in->width < 2 * r || in->height < 2 * r || in->width % r || in->height % r || in->width > 1 << 14 ||
        in->height > 1 << 14)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "video VAE encode: %dx%d pixels; width and height must be multiples of %d, from %d to 16384",
                       in->width, in->height, r, 2 * r);
    if (in->stride && in->stride < (size_t)in->width * 3)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "video VAE encode: row stride %zu < 3 x %d", in->stride,
                       in->width);
    return H3_OK;
}

h3_status_code h3_video_vae_encode(h3_video_vae *vae, const h3_video_vae_frames *in, float *mean, float *logvar,
                                   h3_status *status) {
    if (!vae) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "video VAE encode: no model");
    enc_state s;
    memset(&s, 0, sizeof s);
    h3_video_vae_get_info(vae, &s.vi);
    h3_status_code rc = check_input(&s.vi, in, status);
    if (rc != H3_OK) return rc;
    s.e = s.vi.enc, s.b = s.vi.b, s.H = in->height, s.W = in->width;
    if ((rc = h3_backend_check(s.b, status)) != H3_OK) return rc;
    int Ttot = h3_video_vae_encoded_frames(vae, in->frames);
    s.T = in->frames == 1 ? 1 : s.vi.clip_length; /* one frame: the spatial path alone */
    int per = clip_latents(s.e, s.T);
    for (int f0 = 0, t0 = 0; rc == H3_OK && f0 < in->frames; f0 += s.T, t0 += per) {
        int keep = Ttot - t0 < per ? Ttot - t0 : per;
        if (keep > 0) rc = encode_clip(&s, in, f0, t0, keep, Ttot, mean, logvar, status);
    }
    if (rc == H3_OK && logvar) /* DiagonalGaussianDistribution clamps the log-variance */
        for (int64_t i = 0; i < (int64_t)s.vi.z_channels * Ttot * (s.H / s.vi.ratio) * (s.W / s.vi.ratio); i++)
            logvar[i] = logvar[i] < -30.0f ? -30.0f : logvar[i] > 20.0f ? 20.0f : logvar[i];
    return rc;
}

void h3_video_vae_condition_latents(const h3_video_vae *vae, const float *mean, const float *logvar, const float *eps,
                                    int64_t n, float *out) {
    h3_video_vae_info vi;
    h3_video_vae_get_info(vae, &vi);
    for (int64_t c = 0; c < vi.z_channels; c++) {
        for (int64_t i = c * n; i < (c + 1) * n; i++) {
            float sd = expf(0.5f * logvar[i]), noise = sd * eps[i]; /* torch: mean + std * sample */
            float z = h3_f16_to_f32(h3_f32_to_f16(mean[i] + noise));
            out[i] = (z - vi.latents_mean[c]) / vi.latents_std[c];
        }
    }
}

h3_status_code h3_video_vae_encode_keyframe(h3_video_vae *vae, const uint8_t *rgb, int width, int height,
                                            size_t stride, h3_torch_generator *gen, float *out, h3_status *status) {
    if (!vae || !out) return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "video VAE keyframe: no model or output");
    h3_video_vae_frames in = {.rgb = rgb, .frames = 1, .width = width, .height = height, .stride = stride};
    h3_video_vae_info vi;
    h3_video_vae_get_info(vae, &vi);
    h3_status_code rc = check_input(&vi, &in, status);
    if (rc != H3_OK) return rc;
    int64_t n = (int64_t)(height / vi.ratio) * (width / vi.ratio), total = n * vi.z_channels;
    float *buf = malloc((size_t)(3 * total) * sizeof(float));
    if (!buf) return h3_fail(status, H3_ERR_NO_MEMORY, "video VAE keyframe: out of memory");
    float *mean = buf, *logvar = buf + total, *eps = buf + 2 * total;
    rc = h3_video_vae_encode(vae, &in, mean, logvar, status);
    if (rc == H3_OK) {
        h3_torch_generator own;
        if (!gen) h3_torch_generator_seed(gen = &own, H3_VIDEO_VAE_KEYFRAME_SEED);
        h3_torch_randn_f32(gen, eps, (size_t)total);
        h3_video_vae_condition_latents(vae, mean, logvar, eps, n, out);
    }
    free(buf);
    return rc;
}
