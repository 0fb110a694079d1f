/* h3_vsa.c - the VSA-H3 parameters and the tiling plan of a request (h3_vsa.h). */
#include "model/h3_vsa.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

h3_vsa_params h3_vsa_params_default(void) {
    h3_vsa_params p = {.sparsity = H3_VSA_DEFAULT_SPARSITY, .tile_t = 4, .tile_h = 4, .tile_w = 4};
    return p;
}

/* The shortest decimal that reads back as x, as a double: the value a
 * Python config holding that decimal would carry. */
static double shortest_decimal(float x) {
    char buf[32];
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)x);
        double d = strtod(buf, NULL);
        if ((float)d == x) return d;
    }
    return (double)x;
}

int64_t h3_vsa_topk(float sparsity, int64_t num_video_tiles) {
    if (num_video_tiles <= 0) return 0;
    double k = ceil((1.0 - shortest_decimal(sparsity)) * (double)num_video_tiles);
    if (!(k >= 1.0)) return 1; /* also NaN */
    return k > (double)num_video_tiles ? num_video_tiles : (int64_t)k;
}

void h3_vsa_plan_free(h3_vsa_plan *plan) {
    if (!plan) return;
    free(plan->tile_sizes);
    free(plan->tile_start);
    free(plan->tile_order);
    free(plan->untile_index);
    free(plan);
}

h3_status_code h3_vsa_params_check(const h3_vsa_params *p, h3_status *status) {
    if (!(p->sparsity >= 0.0f && p->sparsity < 1.0f))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "vsa: sparsity %g must be in [0, 1)", (double)p->sparsity);
    if (p->tile_t < 1 || p->tile_h < 1 || p->tile_w < 1 || (int64_t)p->tile_t * p->tile_h * p->tile_w > 4096)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "vsa: tile %dx%dx%d (each side >= 1, at most 4096 rows)",
                       p->tile_t, p->tile_h, p->tile_w);
    return H3_OK;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Tile sizes: prefix chunks of each segment, then the video blocks. */
static void fill_sizes(h3_vsa_plan *pl) {
    int64_t j = 0, E = pl->tile_elems;
    for (int s = 0; s < pl->num_segments; s++)
        for (int64_t r = 0; r < pl->segments[s]; r += E) pl->tile_sizes[j++] = (int32_t)(pl->segments[s] - r < E ? pl->segments[s] - r : E);
    const h3_vsa_params *p = &pl->params;
    int64_t T = pl->grid[0], H = pl->grid[1], W = pl->grid[2];
    for (int64_t t0 = 0; t0 < T; t0 += p->tile_t)
        for (int64_t h0 = 0; h0 < H; h0 += p->tile_h)
            for (int64_t w0 = 0; w0 < W; w0 += p->tile_w) {
                int64_t et = T - t0 < p->tile_t ? T - t0 : p->tile_t;
                int64_t eh = H - h0 < p->tile_h ? H - h0 : p->tile_h;
                int64_t ew = W - w0 < p->tile_w ? W - w0 : p->tile_w;
                pl->tile_sizes[j++] = (int32_t)(et * eh * ew);
            }
}

/* tile_order: the prefix rows as they are, then each video block's rows in
 * (t, h, w) order (get_tile_partition_indices); untile_index its inverse
 * into padded slots. */
static void fill_order(h3_vsa_plan *pl) {
    const h3_vsa_params *p = &pl->params;
    int64_t T = pl->grid[0], H = pl->grid[1], W = pl->grid[2], r = 0;
    for (int64_t i = 0; i < pl->prefix_len; i++) pl->tile_order[r++] = (int32_t)i;
    for (int64_t t0 = 0; t0 < T; t0 += p->tile_t)
        for (int64_t h0 = 0; h0 < H; h0 += p->tile_h)
            for (int64_t w0 = 0; w0 < W; w0 += p->tile_w)
                for (int64_t t = t0; t < T && t < t0 + p->tile_t; t++)
                    for (int64_t y = h0; y < H && y < h0 + p->tile_h; y++)
                        for (int64_t x = w0; x < W && x < w0 + p->tile_w; x++)
                            pl->tile_order[r++] = (int32_t)(pl->prefix_len + (t * H + y) * W + x);
    pl->tile_start[0] = 0;
    for (int64_t j = 0; j < pl->num_tiles; j++) {
        pl->tile_start[j + 1] = pl->tile_start[j] + pl->tile_sizes[j];
        for (int64_t o = 0; o < pl->tile_sizes[j]; o++)
            pl->untile_index[pl->tile_order[pl->tile_start[j] + o]] = (int32_t)(j * pl->tile_elems + o);
    }
}

h3_status_code h3_vsa_plan_make(const int64_t *segments, int num_segments, int64_t T, int64_t h, int64_t w,
                                const h3_vsa_params *params, h3_vsa_plan **out, h3_status *status) {
    *out = NULL;
    h3_status_code rc = h3_vsa_params_check(params, status);
    if (rc != H3_OK) return rc;
    if (num_segments < 0 || num_segments > H3_VSA_MAX_SEGMENTS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "vsa: %d prefix segments (at most %d)", num_segments,
                       H3_VSA_MAX_SEGMENTS);
    if (T < 1 || h < 1 || w < 1)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "vsa: video grid %lldx%lldx%lld", (long long)T, (long long)h,
                       (long long)w);
    h3_vsa_plan *pl = calloc(1, sizeof *pl);
    if (!pl) return h3_fail(status, H3_ERR_NO_MEMORY, "vsa: out of memory");
    pl->params = *params;
    pl->tile_elems = params->tile_t * params->tile_h * params->tile_w;
    pl->grid[0] = T, pl->grid[1] = h, pl->grid[2] = w;
    for (int s = 0; s < num_segments; s++) {
        if (segments[s] < 0) {
            h3_vsa_plan_free(pl);
            return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "vsa: prefix segment %d has %lld rows", s,
                           (long long)segments[s]);
        }
        if (segments[s] == 0) continue;
        pl->segments[pl->num_segments++] = segments[s];
        pl->prefix_len += segments[s];
        pl->num_prefix_tiles += ceil_div(segments[s], pl->tile_elems);
    }
    pl->num_video_tiles = ceil_div(T, params->tile_t) * ceil_div(h, params->tile_h) * ceil_div(w, params->tile_w);
    pl->num_tiles = pl->num_prefix_tiles + pl->num_video_tiles;
    pl->seq_len = pl->prefix_len + T * h * w;
    pl->padded_len = pl->num_tiles * pl->tile_elems;
    pl->topk = h3_vsa_topk(params->sparsity, pl->num_video_tiles);
    if (pl->padded_len > INT32_MAX || pl->seq_len > INT32_MAX) {
        long long rows = (long long)pl->padded_len; /* read before the plan is freed */
        h3_vsa_plan_free(pl);
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "vsa: %lld padded rows do not fit int32 indices", rows);
    }
    pl->tile_sizes = malloc((size_t)pl->num_tiles * sizeof *pl->tile_sizes);
    pl->tile_start = malloc((size_t)(pl->num_tiles + 1) * sizeof *pl->tile_start);
    pl->tile_order = malloc((size_t)pl->seq_len * sizeof *pl->tile_order);
    pl->untile_index = malloc((size_t)pl->seq_len * sizeof *pl->untile_index);
    if (!pl->tile_sizes || !pl->tile_start || !pl->tile_order || !pl->untile_index) {
        long long rows = (long long)pl->seq_len; /* read before the plan is freed */
        h3_vsa_plan_free(pl);
        return h3_fail(status, H3_ERR_NO_MEMORY, "vsa: out of memory for a plan of %lld rows", rows);
    }
    fill_sizes(pl);
    fill_order(pl);
    *out = pl;
    return H3_OK;
}

h3_status_code h3_vsa_plan_from_layout(const h3_dit_layout *l, const h3_vsa_params *params, h3_vsa_plan **out,
                                       h3_status *status) {
    const h3_dit_layout_params *p = &l->params;
    int64_t segments[3] = {l->num_text, l->num_condition_rows, l->num_audio_rows};
    int64_t T = p->num_latent_frames, h = p->latent_height / p->patch_h, w = p->latent_width / p->patch_w;
    if (l->video_start != l->num_text + l->num_condition_rows + l->num_audio_rows || l->seq_len != l->video_start + T * h * w) {
        *out = NULL;
        return h3_fail(status, H3_ERR_INTERNAL, "vsa: the layout is not [text | cond | audio | video]");
    }
    return h3_vsa_plan_make(segments, 3, T, h, w, params, out, status);
}
