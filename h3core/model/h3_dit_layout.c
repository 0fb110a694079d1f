/* h3_dit_layout.c - packed sequence layout, RoPE positions, row timesteps,
 * video patchify and audio packing (docs/spec/h3-transformer.md §3.2,
 * §3.3, §4.3).
 *
 * The float64 arithmetic below copies the reference operation by operation:
 * every product is forced through a volatile so that a compiler allowed to
 * contract a*b+c into an FMA (-ffp-contract=fast with -mfma) cannot change
 * the last ulp the float32 cast may depend on. */
#include "model/h3_dit_layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One latent frame spans (5/3)·p rotary units, p = (1, 4, 4, 4, 4): the
 * video VAE groups 17 pixel frames (1 + 4·4) into 5 latents, and one pixel
 * frame at 24 fps is 5/3 units of the 40 units/s audio clock. */
static const double rope_frame_rescale = 5.0 / 3.0;
static const int rope_frames_per_latent[5] = {1, 4, 4, 4, 4};
static const double rope_spatial_scale = 32.0;

static double frame_span(int index) { return rope_frame_rescale * rope_frames_per_latent[index % 5]; }

/* Rounded product: see the file comment. */
static double mul_rounded(double a, double b) {
    volatile double p = a * b;
    return p;
}

/* numpy.linspace(left, left + ratio, n, endpoint=False) * 32, where
 * ratio = dim / sqrt(H_lat·W_lat): numpy computes step = (stop - start) / n
 * and y = arange(n) * step + start. */
static void spatial_grid(int dim, int patch, double sqrt_area, double *grid) {
    double ratio = (double)dim / sqrt_area;
    double left = (1.0 - ratio) / 2.0;
    double stop = left + ratio;
    int n = dim / patch;
    double step = (stop - left) / (double)n;
    for (int k = 0; k < n; k++) grid[k] = mul_rounded(mul_rounded((double)k, step) + left, rope_spatial_scale);
}

/* numpy's pairwise summation (umath loops, PW_BLOCKSIZE 128, 8 accumulators). */
static double pairwise_sum(const double *a, int n) {
    if (n < 8) {
        double res = 0.0;
        for (int i = 0; i < n; i++) res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        int i;
        for (int j = 0; j < 8; j++) r[j] = a[j];
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    int n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

double h3_dit_temporal_span_pairwise(int num_latent_frames) {
    if (num_latent_frames <= 0) return 0.0;
    double *spans = malloc((size_t)num_latent_frames * sizeof *spans);
    if (!spans) return NAN;
    for (int i = 0; i < num_latent_frames; i++) spans[i] = frame_span(i);
    /* np.sum starts from the additive identity 0.0 and adds the pairwise sum. */
    double s = 0.0 + pairwise_sum(spans, num_latent_frames);
    free(spans);
    return s;
}

void h3_dit_layout_free(h3_dit_layout *layout) {
    if (!layout) return;
    free(layout->position_ids);
    free(layout->token_tags);
    free(layout->video_indices);
    free(layout->audio_indices);
    free(layout->text_indices);
    free(layout->height_grid);
    free(layout->width_grid);
    free(layout);
}

/* ---- Ref2VA references --------------------------------------------------------------- */

static int is_visual(const h3_dit_reference *r) { return r->kind != H3_DIT_REFERENCE_AUDIO; }

static int64_t reference_video_rows(const h3_dit_reference *r, const h3_dit_layout_params *p) {
    if (!is_visual(r)) return 0;
    return (int64_t)r->num_latent_frames * (r->latent_height / p->patch_h) * (r->latent_width / p->patch_w);
}

/* Audio rows: both channels of an audio reference or of a video's soundtrack. */
static int64_t reference_audio_rows(const h3_dit_reference *r) {
    return r->kind == H3_DIT_REFERENCE_IMAGE ? 0 : (int64_t)H3_DIT_AUDIO_CHANNELS * r->num_audio_latents;
}

static const char *reference_kind_name(h3_dit_reference_kind k) {
    return k == H3_DIT_REFERENCE_IMAGE ? "image" : k == H3_DIT_REFERENCE_VIDEO ? "video" : "audio";
}

/* Sizes are bounded so that no row count or clock can overflow: 2^20
 * latents or latent frames per reference, a latent grid side of 2^16. */
#define MAX_REFERENCE_LATENTS (1 << 20)
#define MAX_REFERENCE_SIDE (1 << 16)

static h3_status_code check_reference(const h3_dit_reference *r, int i, const h3_dit_layout_params *p,
                                      h3_status *status) {
    if (r->kind != H3_DIT_REFERENCE_IMAGE && r->kind != H3_DIT_REFERENCE_VIDEO && r->kind != H3_DIT_REFERENCE_AUDIO)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit layout: reference %d has kind %d", i + 1, (int)r->kind);
    const char *kind = reference_kind_name(r->kind);
    int want_frames_ok = r->kind == H3_DIT_REFERENCE_IMAGE   ? r->num_latent_frames == 1
                         : r->kind == H3_DIT_REFERENCE_VIDEO ? r->num_latent_frames >= 1 &&
                                                                    r->num_latent_frames <= MAX_REFERENCE_LATENTS
                                                             : r->num_latent_frames == 0;
    if (!want_frames_ok)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit layout: %s reference %d has %d latent frames", kind,
                       i + 1, r->num_latent_frames);
    int audio_ok = r->kind == H3_DIT_REFERENCE_IMAGE   ? r->num_audio_latents == 0
                   : r->kind == H3_DIT_REFERENCE_VIDEO ? r->num_audio_latents >= 0
                                                       : r->num_audio_latents >= 1;
    if (!audio_ok || r->num_audio_latents > MAX_REFERENCE_LATENTS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit layout: %s reference %d has %d audio latents", kind,
                       i + 1, r->num_audio_latents);
    if (!is_visual(r)) return H3_OK;
    if (r->latent_height <= 0 || r->latent_width <= 0 || r->latent_height > MAX_REFERENCE_SIDE ||
        r->latent_width > MAX_REFERENCE_SIDE || r->latent_height % p->patch_h || r->latent_width % p->patch_w)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "dit layout: %s reference %d has latent grid %dx%d (needs 1..%d, divisible by the patch %dx%d)",
                       kind, i + 1, r->latent_height, r->latent_width, MAX_REFERENCE_SIDE, p->patch_h, p->patch_w);
    return H3_OK;
}

static h3_status_code check_references(const h3_dit_layout_params *p, h3_status *status) {
    if (p->num_references < 0 || p->num_references > H3_DIT_MAX_REFERENCES)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit layout: %d references (max %d)", p->num_references,
                       H3_DIT_MAX_REFERENCES);
    if (p->num_references > 0 && p->num_keyframes > 0)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "dit layout: %d keyframes and %d references (Ref2VA takes references only)", p->num_keyframes,
                       p->num_references);
    for (int i = 0; i < p->num_references; i++) {
        h3_status_code rc = check_reference(&p->references[i], i, p, status);
        if (rc != H3_OK) return rc;
    }
    return H3_OK;
}

static h3_status_code check_params(const h3_dit_layout_params *p, h3_status *status) {
    if (p->num_text < 0 || (p->num_text > 0 && !p->text_token_tags))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit layout: %d text rows without tags", p->num_text);
    for (int i = 0; i < p->num_text; i++)
        if (p->text_token_tags[i] != H3_TAG_TEXT && p->text_token_tags[i] != H3_TAG_VIDEO)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit layout: text row %d has tag %d (want 0 or 1)", i,
                           p->text_token_tags[i]);
    if (p->patch_t != 1)
        return h3_fail(status, H3_ERR_UNSUPPORTED, "dit layout: temporal patch %d (only 1 is supported)", p->patch_t);
    if (p->patch_h <= 0 || p->patch_w <= 0)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit layout: patch %dx%d", p->patch_h, p->patch_w);
    if (p->num_latent_frames <= 0 || p->latent_height <= 0 || p->latent_width <= 0)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit layout: latent grid %dx%dx%d", p->num_latent_frames,
                       p->latent_height, p->latent_width);
    if (p->latent_height % p->patch_h || p->latent_width % p->patch_w)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit layout: latent %dx%d not divisible by the patch %dx%d",
                       p->latent_height, p->latent_width, p->patch_h, p->patch_w);
    if (p->num_audio_latents < 0)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit layout: %d audio latents", p->num_audio_latents);
    if (p->num_keyframes < 0 || p->num_keyframes > H3_DIT_MAX_KEYFRAMES)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit layout: %d keyframes (max %d)", p->num_keyframes,
                       H3_DIT_MAX_KEYFRAMES);
    for (int i = 0; i < p->num_keyframes; i++)
        if (p->anchors[i] != H3_ANCHOR_FIRST && p->anchors[i] != H3_ANCHOR_LAST)
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit layout: keyframe %d has anchor %d", i,
                           (int)p->anchors[i]);
    h3_status_code rc = check_references(p, status);
    if (rc != H3_OK) return rc;
    int64_t rows = (int64_t)p->num_text +
                   (int64_t)(p->num_keyframes + p->num_latent_frames) * (p->latent_height / p->patch_h) *
                       (p->latent_width / p->patch_w) +
                   2 * (int64_t)p->num_audio_latents;
    for (int i = 0; i < p->num_references; i++)
        rows += reference_video_rows(&p->references[i], p) + reference_audio_rows(&p->references[i]);
    if (rows > INT32_MAX)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit layout: %lld rows do not fit int32 indices", (long long)rows);
    return H3_OK;
}

static void set_position(h3_dit_layout *l, int64_t row, double t, double h, double w) {
    l->position_ids[row * 3 + 0] = t;
    l->position_ids[row * 3 + 1] = h;
    l->position_ids[row * 3 + 2] = w;
}

/* The (t, h, w) of the text, keyframe and target rows (docs/spec/h3-transformer.md §3.3). The
 * target media's clock origin is the text length L, or in Ref2VA the clock
 * after the references (build_references). */
static void build_positions(h3_dit_layout *l, double origin) {
    const h3_dit_layout_params *p = &l->params;
    int64_t L = l->num_text, Hp = p->latent_height / p->patch_h, Wp = p->latent_width / p->patch_w;
    int64_t Na = p->num_audio_latents;

    for (int64_t i = 0; i < L; i++) set_position(l, i, (double)i, 0.0, 0.0);

    for (int k = 0; k < p->num_keyframes; k++) {
        double anchor = origin;
        if (p->anchors[k] == H3_ANCHOR_LAST)
            anchor = origin + h3_dit_temporal_span_pairwise(p->num_latent_frames) - rope_frame_rescale;
        int64_t base = l->condition_start + k * l->rows_per_frame;
        for (int64_t i = 0; i < Hp; i++)
            for (int64_t j = 0; j < Wp; j++)
                set_position(l, base + i * Wp + j, anchor, l->height_grid[i], l->width_grid[j]);
    }

    /* Audio: one clock unit per latent, no height, pinned to the two ends of
     * the video width grid (channel 0 left, channel 1 right). */
    for (int ch = 0; ch < H3_DIT_AUDIO_CHANNELS; ch++)
        for (int64_t n = 0; n < Na; n++)
            set_position(l, l->audio_start + ch * Na + n, origin + (double)n, 0.0,
                         ch == 0 ? l->width_grid[0] : l->width_grid[Wp - 1]);

    /* Video time: origin + cat([0], cumsum(spans[:-1])), the cumsum sequential. */
    double clock = 0.0;
    for (int t = 0; t < p->num_latent_frames; t++) {
        if (t > 0) clock += frame_span(t - 1);
        double time = origin + clock;
        int64_t base = l->video_start + t * l->rows_per_frame;
        for (int64_t i = 0; i < Hp; i++)
            for (int64_t j = 0; j < Wp; j++)
                set_position(l, base + i * Wp + j, time, l->height_grid[i], l->width_grid[j]);
    }
}

/* Video time of latent frame t from a clock origin: origin + cat([0],
 * cumsum(spans[:-1])), the cumsum sequential; *clock carries the cumsum. */
static double frame_time(double origin, int t, double *clock) {
    if (t > 0) *clock += frame_span(t - 1);
    return origin + *clock;
}

/* One audio block: channel-major rows at clock + n, h 0, w pinned to w0
 * (channel 0) or w1 (channel 1). Returns the next row. */
static int64_t audio_block(h3_dit_layout *l, int64_t row, int64_t *a, double clock, int64_t n_latents, double w0,
                           double w1) {
    for (int ch = 0; ch < H3_DIT_AUDIO_CHANNELS; ch++)
        for (int64_t n = 0; n < n_latents; n++, row++) {
            set_position(l, row, clock + (double)n, 0.0, ch == 0 ? w0 : w1);
            l->audio_indices[(*a)++] = (int32_t)row;
        }
    return row;
}

/* The reference blocks of a Ref2VA layout, in request order from row L:
 * their rows' positions and their places in video_indices and
 * audio_indices. An image sits at the clock on its own grid and advances
 * it by 1; an audio reference runs one unit per latent from the clock,
 * pinned to the ends of the TARGET width grid, and advances it by its
 * length; a video's soundtrack runs from the clock pinned to the ends of
 * the video's own width grid, its frames follow the video clock from the
 * same origin, and the clock advances by the longer of the two (the
 * frames' spans summed sequentially). Returns the final clock, the target
 * media's origin, in *origin. */
static h3_status_code build_references(h3_dit_layout *l, double *origin, h3_status *status) {
    const h3_dit_layout_params *p = &l->params;
    int64_t row = l->num_text, v = 0, a = 0, target_wp = p->latent_width / p->patch_w;
    double clock = (double)l->num_text;
    for (int i = 0; i < p->num_references; i++) {
        const h3_dit_reference *r = &p->references[i];
        if (!is_visual(r)) {
            row = audio_block(l, row, &a, clock, r->num_audio_latents, l->width_grid[0], l->width_grid[target_wp - 1]);
            clock += (double)r->num_audio_latents;
            continue;
        }
        int64_t Hp = r->latent_height / p->patch_h, Wp = r->latent_width / p->patch_w;
        double *hg = malloc((size_t)(Hp + Wp) * sizeof *hg), *wg = hg + Hp;
        if (!hg) return h3_fail(status, H3_ERR_NO_MEMORY, "dit layout: out of memory for reference %d's grid", i + 1);
        double sqrt_area = sqrt((double)r->latent_height * (double)r->latent_width);
        spatial_grid(r->latent_height, p->patch_h, sqrt_area, hg);
        spatial_grid(r->latent_width, p->patch_w, sqrt_area, wg);
        if (r->kind == H3_DIT_REFERENCE_VIDEO && r->num_audio_latents > 0)
            row = audio_block(l, row, &a, clock, r->num_audio_latents, wg[0], wg[Wp - 1]);
        double cum = 0.0;
        for (int t = 0; t < r->num_latent_frames; t++) {
            double time = r->kind == H3_DIT_REFERENCE_IMAGE ? clock : frame_time(clock, t, &cum);
            for (int64_t y = 0; y < Hp; y++)
                for (int64_t x = 0; x < Wp; x++, row++) {
                    set_position(l, row, time, hg[y], wg[x]);
                    l->video_indices[v++] = (int32_t)row;
                }
        }
        free(hg);
        if (r->kind == H3_DIT_REFERENCE_IMAGE) {
            clock += 1.0;
        } else {
            double span = 0.0;
            for (int t = 0; t < r->num_latent_frames; t++) span += frame_span(t);
            clock += (double)r->num_audio_latents > span ? (double)r->num_audio_latents : span;
        }
    }
    *origin = clock;
    return H3_OK;
}

/* Indices of the text and target rows (the keyframe rows too; Ref2VA's
 * reference rows come first, from build_references), then every row's tag. */
static void build_indices(h3_dit_layout *l) {
    int64_t v = l->num_condition_rows, a = l->num_condition_audio_rows;
    if (l->params.num_references == 0)
        for (int64_t r = l->condition_start, i = 0; r < l->audio_start; r++) l->video_indices[i++] = (int32_t)r;
    for (int64_t r = l->video_start; r < l->seq_len; r++) l->video_indices[v++] = (int32_t)r;
    for (int64_t r = l->audio_start; r < l->video_start; r++) l->audio_indices[a++] = (int32_t)r;
    for (int64_t i = 0; i < l->num_text; i++) l->text_indices[i] = (int32_t)i;

    for (int64_t i = 0; i < l->num_text; i++) l->token_tags[i] = l->params.text_token_tags[i];
    for (int64_t i = 0; i < l->num_audio_rows; i++) l->token_tags[l->audio_indices[i]] = H3_TAG_AUDIO;
    for (int64_t i = 0; i < l->num_video_rows; i++) l->token_tags[l->video_indices[i]] = H3_TAG_VIDEO;
}

h3_status_code h3_dit_layout_build(const h3_dit_layout_params *params, h3_dit_layout **out, h3_status *status) {
    *out = NULL;
    h3_dit_layout_params p = *params;
    if (!p.patch_t) p.patch_t = 1;
    if (!p.patch_h) p.patch_h = 2;
    if (!p.patch_w) p.patch_w = 2;
    h3_status_code rc = check_params(&p, status);
    if (rc != H3_OK) return rc;

    h3_dit_layout *l = calloc(1, sizeof *l);
    if (!l) return h3_fail(status, H3_ERR_NO_MEMORY, "dit layout: out of memory");
    l->params = p;
    int64_t Hp = p.latent_height / p.patch_h, Wp = p.latent_width / p.patch_w;
    l->num_text = p.num_text;
    l->rows_per_frame = Hp * Wp;
    l->num_condition_rows = (int64_t)p.num_keyframes * l->rows_per_frame;
    for (int i = 0; i < p.num_references; i++) {
        l->num_condition_rows += reference_video_rows(&p.references[i], &p);
        l->num_condition_audio_rows += reference_audio_rows(&p.references[i]);
    }
    l->num_audio_rows = l->num_condition_audio_rows + (int64_t)H3_DIT_AUDIO_CHANNELS * p.num_audio_latents;
    l->num_video_rows = l->num_condition_rows + (int64_t)p.num_latent_frames * l->rows_per_frame;
    l->condition_start = l->num_text;
    l->audio_start = l->condition_start + l->num_condition_rows + l->num_condition_audio_rows;
    l->video_start = l->audio_start + (int64_t)H3_DIT_AUDIO_CHANNELS * p.num_audio_latents;
    l->seq_len = l->video_start + (int64_t)p.num_latent_frames * l->rows_per_frame;

    size_t S = (size_t)l->seq_len;
    l->position_ids = calloc(S * 3, sizeof *l->position_ids);
    l->token_tags = calloc(S, sizeof *l->token_tags);
    l->video_indices = calloc((size_t)l->num_video_rows + 1, sizeof *l->video_indices);
    l->audio_indices = calloc((size_t)l->num_audio_rows + 1, sizeof *l->audio_indices);
    l->text_indices = calloc((size_t)l->num_text + 1, sizeof *l->text_indices);
    l->height_grid = calloc((size_t)Hp, sizeof *l->height_grid);
    l->width_grid = calloc((size_t)Wp, sizeof *l->width_grid);
    if (!l->position_ids || !l->token_tags || !l->video_indices || !l->audio_indices || !l->text_indices ||
        !l->height_grid || !l->width_grid) {
        h3_dit_layout_free(l);
        return h3_fail(status, H3_ERR_NO_MEMORY, "dit layout: out of memory for %zu rows", S);
    }
    double sqrt_area = sqrt((double)p.latent_height * (double)p.latent_width);
    spatial_grid(p.latent_height, p.patch_h, sqrt_area, l->height_grid);
    spatial_grid(p.latent_width, p.patch_w, sqrt_area, l->width_grid);

    double origin = (double)l->num_text;
    if (p.num_references > 0 && (rc = build_references(l, &origin, status)) != H3_OK) {
        h3_dit_layout_free(l);
        return rc;
    }
    build_indices(l);
    l->params.text_token_tags = l->token_tags; /* rows [0, L) hold the text tags */
    build_positions(l, origin);
    *out = l;
    return H3_OK;
}

h3_status_code h3_dit_layout_timesteps(const h3_dit_layout *l, float t_video, float t_audio,
                                       float timesteps[H3_DIT_MAX_TIMESTEPS], int *n_timesteps, int32_t *row_index,
                                       h3_status *status) {
    float cond = t_video > H3_DIT_CONDITION_TIMESTEP ? t_video : H3_DIT_CONDITION_TIMESTEP;
    enum { N_CANDIDATES = 4 };
    float candidates[N_CANDIDATES] = {t_video, t_audio, cond, H3_DIT_REFERENCE_AUDIO_TIMESTEP};
    int has[N_CANDIDATES] = {1, l->num_audio_rows > l->num_condition_audio_rows, l->num_condition_rows > 0,
                             l->num_condition_audio_rows > 0};
    if (!isfinite(t_video) || !isfinite(t_audio))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "dit timesteps: t_video %g, t_audio %g", t_video, t_audio);
    /* Distinct values, sorted ascending (torch.unique). */
    int n = 0;
    for (int c = 0; c < N_CANDIDATES; c++) {
        if (!has[c]) continue;
        int dup = 0;
        for (int i = 0; i < n; i++) dup |= timesteps[i] == candidates[c];
        if (!dup) timesteps[n++] = candidates[c];
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && timesteps[j] < timesteps[j - 1]; j--) {
            float tmp = timesteps[j];
            timesteps[j] = timesteps[j - 1];
            timesteps[j - 1] = tmp;
        }
    int index[N_CANDIDATES];
    for (int c = 0; c < N_CANDIDATES; c++) {
        index[c] = 0;
        for (int i = 0; i < n; i++)
            if (timesteps[i] == candidates[c]) index[c] = i;
    }
    *n_timesteps = n;
    for (int64_t s = 0; s < l->num_text; s++) row_index[s] = index[0];
    for (int64_t s = l->condition_start; s < l->audio_start; s++) /* keyframe / reference rows */
        row_index[s] = l->token_tags[s] == H3_TAG_AUDIO ? index[3] : index[2];
    for (int64_t s = l->audio_start; s < l->video_start; s++) row_index[s] = index[1];
    for (int64_t s = l->video_start; s < l->seq_len; s++) row_index[s] = index[0];
    return H3_OK;
}

static h3_status_code check_patch(int channels, int frames, int height, int width, int patch_h, int patch_w,
                                  h3_status *status) {
    if (channels <= 0 || frames <= 0 || height <= 0 || width <= 0 || patch_h <= 0 || patch_w <= 0 ||
        height % patch_h || width % patch_w)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "patchify: latents %dx%dx%dx%d do not fit the patch %dx%d",
                       channels, frames, height, width, patch_h, patch_w);
    return H3_OK;
}

/* Copies between latents z[c, t, y, x] and rows; to_rows picks the direction
 * (src is the latents when to_rows, else the rows). */
static void patch_copy(const float *src, float *dst, int C, int T, int H, int W, int ph, int pw, int to_rows) {
    size_t Hp = (size_t)(H / ph), Wp = (size_t)(W / pw), F = (size_t)C * ph * pw;
    for (size_t t = 0; t < (size_t)T; t++)
        for (size_t i = 0; i < Hp; i++)
            for (size_t j = 0; j < Wp; j++) {
                size_t row = ((t * Hp + i) * Wp + j) * F;
                for (size_t c = 0; c < (size_t)C; c++)
                    for (size_t py = 0; py < (size_t)ph; py++)
                        for (size_t px = 0; px < (size_t)pw; px++) {
                            size_t z = ((c * (size_t)T + t) * (size_t)H + ph * i + py) * (size_t)W + pw * j + px;
                            size_t f = row + (c * ph + py) * pw + px;
                            if (to_rows) dst[f] = src[z];
                            else dst[z] = src[f];
                        }
            }
}

h3_status_code h3_dit_patchify_video(const float *latents, int channels, int frames, int height, int width,
                                     int patch_h, int patch_w, float *rows, h3_status *status) {
    h3_status_code rc = check_patch(channels, frames, height, width, patch_h, patch_w, status);
    if (rc == H3_OK) patch_copy(latents, rows, channels, frames, height, width, patch_h, patch_w, 1);
    return rc;
}

h3_status_code h3_dit_unpatchify_video(const float *rows, int channels, int frames, int height, int width,
                                       int patch_h, int patch_w, float *latents, h3_status *status) {
    h3_status_code rc = check_patch(channels, frames, height, width, patch_h, patch_w, status);
    if (rc == H3_OK) patch_copy(rows, latents, channels, frames, height, width, patch_h, patch_w, 0);
    return rc;
}

void h3_dit_pack_audio(const float *latents, int channels, int num_latents, float *rows) {
    for (int ch = 0; ch < H3_DIT_AUDIO_CHANNELS; ch++)
        for (int n = 0; n < num_latents; n++)
            for (int c = 0; c < channels; c++)
                rows[((size_t)ch * num_latents + n) * channels + c] =
                    latents[((size_t)ch * channels + c) * num_latents + n];
}

void h3_dit_unpack_audio(const float *rows, int channels, int num_latents, float *latents) {
    for (int ch = 0; ch < H3_DIT_AUDIO_CHANNELS; ch++)
        for (int n = 0; n < num_latents; n++)
            for (int c = 0; c < channels; c++)
                latents[((size_t)ch * channels + c) * num_latents + n] =
                    rows[((size_t)ch * num_latents + n) * channels + c];
}
