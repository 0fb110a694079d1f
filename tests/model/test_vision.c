/* test_vision.c - the FL2VA keyframe path before the language model: PIL's
 * LANCZOS resize bit for bit (the e2e_fl2va golden's keyframe), the canvas
 * and cover-crop arithmetic, the Qwen3-VL image processor (pixel_values and
 * image_grid_thw of the text_encoder golden), the vision tower's tensor names
 * against the real release index, and its forward's invariants. */
#include <glib.h>
#include <json-glib/json-glib.h>
#include <stdint.h>

#include "backend/h3_backend.h"
#include "base/h3_config.h"
#include "base/h3_safetensors.h"
#include "h3_test.h"
#include "model/h3_image.h"
#include "model/h3_vision.h"

#define E2E_GOLDEN "goldens/tiny-h3/e2e_fl2va_3steps.safetensors"
#define TE_GOLDEN "goldens/tiny-h3/text_encoder.safetensors"
#define TINY_TE "models/tiny-h3/text_encoder"
#define TINY_PROCESSOR "models/tiny-h3/processor"

static h3_st_file *e2e, *te_golden;
static h3_backend *be;

/* A U8 [H, W, 3] golden tensor as an image (pixels point into the file). */
static int golden_image(h3_st_file *f, const char *name, h3_rgb_image *img) {
    const h3_st_tensor *t = h3_st_find(f, name);
    if (!t || t->dtype != H3_ST_U8 || t->ndim != 3 || t->shape[2] != 3) return 0;
    img->height = (int)t->shape[0];
    img->width = (int)t->shape[1];
    img->stride = (size_t)img->width * 3;
    img->data = (uint8_t *)t->data;
    return 1;
}

static size_t count_diff(const h3_rgb_image *a, const h3_rgb_image *b, int *max_abs) {
    size_t n = 0;
    *max_abs = 0;
    for (int y = 0; y < a->height; y++)
        for (int x = 0; x < a->width * 3; x++) {
            int d = abs((int)a->data[(size_t)y * a->stride + x] - (int)b->data[(size_t)y * b->stride + x]);
            if (d) n++;
            if (d > *max_abs) *max_abs = d;
        }
    return n;
}

/* keyframe.input_uint8 [40, 96] stretched onto the 64x32 canvas, exactly. */
static void test_lanczos_golden(void) {
    h3_rgb_image in, want, got;
    h3_status st = {0};
    CHECK(golden_image(e2e, "keyframe.input_uint8", &in) && golden_image(e2e, "keyframe.resized_uint8", &want),
          "golden keyframes missing");
    if (!in.data || !want.data) return;
    h3_status_code rc = h3_image_fit_keyframe(&in, want.width, want.height, 0, &got, &st);
    CHECK(rc == H3_OK && got.width == 64 && got.height == 32, "fit: %s", st.message);
    if (rc != H3_OK) return;
    int max_abs = 0;
    size_t n = count_diff(&got, &want, &max_abs);
    printf("LANCZOS %dx%d -> %dx%d: %zu of %d bytes differ (max %d)\n", in.width, in.height, got.width, got.height, n,
           got.width * got.height * 3, max_abs);
    CHECK(n == 0, "LANCZOS: %zu bytes differ from PIL (max %d)", n, max_abs);
    h3_rgb_image te_kf;
    CHECK(golden_image(te_golden, "fl2va.keyframe_uint8", &te_kf) && count_diff(&got, &te_kf, &max_abs) == 0,
          "text_encoder golden keyframe differs from the e2e one");
    h3_rgb_image_clear(&got);
}

/* A sharp synthetic pattern (it rings, so clipping is exercised). */
static void pattern(h3_rgb_image *img, int w, int h) {
    *img = (h3_rgb_image){w, h, (size_t)w * 3, malloc((size_t)w * h * 3)};
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                img->data[((size_t)y * w + x) * 3 + c] = (uint8_t)((x * 37 + y * 91 + c * 53 + ((x * y) % 29) * 7) & 255);
}

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Up, down, one axis, and the follower's cover-crop, against Pillow 9.4
 * (Image.resize(..., LANCZOS), the crop with diffusers' arithmetic): the
 * FNV-1a 64 of its bytes. mode -1: plain resize, 1: follower fit. */
static void test_lanczos_pillow(void) {
    static const struct { int w, h, ow, oh, mode; uint64_t fnv; } cases[] = {
        {40, 30, 100, 77, -1, 0xc994f029701c3995ull}, {77, 51, 200, 51, -1, 0x6c4df6ff3a8acdd2ull},
        {300, 200, 300, 37, -1, 0xe2e795f4cebfb7cfull}, {5, 5, 64, 64, -1, 0x7dba1e671a639e23ull},
        {96, 40, 64, 64, 1, 0x13c1cf53f20eb7acull},     {30, 50, 64, 32, 1, 0x41c90281782fa95full},
        {200, 113, 1344, 768, 1, 0x521a9902c9744d9eull},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        h3_rgb_image in, out;
        h3_status st = {0};
        pattern(&in, cases[i].w, cases[i].h);
        h3_status_code rc = cases[i].mode < 0 ? h3_image_resize_lanczos(&in, cases[i].ow, cases[i].oh, &out, &st)
                                              : h3_image_fit_keyframe(&in, cases[i].ow, cases[i].oh, 1, &out, &st);
        CHECK(rc == H3_OK && out.width == cases[i].ow && out.height == cases[i].oh, "case %zu: %s", i, st.message);
        if (rc == H3_OK)
            CHECK(fnv1a(out.data, (size_t)out.width * out.height * 3) == cases[i].fnv, "%dx%d -> %dx%d (mode %d) differs from Pillow",
                  cases[i].w, cases[i].h, cases[i].ow, cases[i].oh, cases[i].mode);
        h3_rgb_image_clear(&out);
        free(in.data);
    }
}

/* One pass only, identity, and a stride wider than the row. */
static void test_lanczos_shapes(void) {
    h3_rgb_image in;
    CHECK(golden_image(e2e, "keyframe.input_uint8", &in), "golden keyframe missing");
    if (!in.data) return;
    h3_status st = {0};
    h3_rgb_image same, wide, tall, padded = in, from_padded;
    CHECK(h3_image_resize_lanczos(&in, in.width, in.height, &same, &st) == H3_OK && same.width == in.width &&
              memcmp(same.data, in.data, (size_t)in.width * in.height * 3) == 0,
          "identity resize changed pixels: %s", st.message);
    CHECK(h3_image_resize_lanczos(&in, 50, in.height, &wide, &st) == H3_OK && wide.width == 50 && wide.height == 40,
          "horizontal only: %s", st.message);
    CHECK(h3_image_resize_lanczos(&in, in.width, 17, &tall, &st) == H3_OK && tall.height == 17, "vertical only: %s",
          st.message);
    /* the same image behind a padded stride gives the same result */
    padded.stride = in.stride + 7;
    padded.data = calloc((size_t)in.height, padded.stride);
    for (int y = 0; y < in.height; y++) memcpy(padded.data + y * padded.stride, in.data + y * in.stride, in.stride);
    CHECK(h3_image_resize_lanczos(&padded, 50, in.height, &from_padded, &st) == H3_OK &&
              memcmp(from_padded.data, wide.data, (size_t)50 * 40 * 3) == 0,
          "padded stride differs: %s", st.message);
    free(padded.data);
    h3_rgb_image_clear(&same);
    h3_rgb_image_clear(&wide);
    h3_rgb_image_clear(&tall);
    h3_rgb_image_clear(&from_padded);

    h3_rgb_image bad = in, out;
    bad.stride = 10;
    CHECK(h3_image_resize_lanczos(&bad, 8, 8, &out, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "stride"),
          "short stride: %s", st.message);
    CHECK(h3_image_resize_lanczos(&in, 0, 8, &out, &st) == H3_ERR_INVALID_ARGUMENT, "0-wide target: %s", st.message);
    CHECK(h3_image_resize_lanczos(&in, 20000, 8, &out, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "16384"),
          "huge target: %s", st.message);
}

/* resolve_canvas_size values and the follower's cover-crop geometry. */
static void test_canvas_and_crop(void) {
    h3_status st = {0};
    int h = 0, w = 0;
    CHECK(h3_image_canvas_size(16, 9, 32, &h, &w, &st) == H3_OK && h == 768 && w == 1344, "16:9 -> %dx%d", w, h);
    CHECK(h3_image_canvas_size(9, 16, 32, &h, &w, &st) == H3_OK && h == 1344 && w == 768, "9:16 -> %dx%d", w, h);
    CHECK(h3_image_canvas_size(1, 1, 32, &h, &w, &st) == H3_OK && h == 768 && w == 768, "1:1 -> %dx%d", w, h);
    CHECK(h3_image_canvas_size(96, 40, 32, &h, &w, &st) == H3_OK && h == 640 && w == 1568,
          "96x40 -> %dx%d", w, h);
    CHECK(h3_image_canvas_size(5, 1, 32, &h, &w, &st) == H3_ERR_INVALID_ARGUMENT && strstr(st.message, "4:1"),
          "5:1: %s", st.message);

    h3_rgb_image in, out;
    CHECK(golden_image(e2e, "keyframe.input_uint8", &in), "golden keyframe missing");
    if (!in.data) return;
    /* 96x40 onto 64x64: scale max(64/96, 64/40) = 1.6 -> 154x64, crop x at 45 */
    CHECK(h3_image_fit_keyframe(&in, 64, 64, 1, &out, &st) == H3_OK && out.width == 64 && out.height == 64,
          "cover-crop: %s", st.message);
    h3_rgb_image scaled, ref;
    h3_image_resize_lanczos(&in, 154, 64, &scaled, &st);
    int same = scaled.data != NULL;
    for (int y = 0; y < 64 && same; y++)
        same = memcmp(out.data + y * out.stride, scaled.data + y * scaled.stride + 45 * 3, 64 * 3) == 0;
    CHECK(same, "cover-crop is not the 154x64 resize cropped at x = 45");
    h3_rgb_image_clear(&out);
    /* not a follower: stretched */
    CHECK(h3_image_fit_keyframe(&in, 64, 64, 0, &out, &st) == H3_OK, "stretch: %s", st.message);
    h3_image_resize_lanczos(&in, 64, 64, &ref, &st);
    CHECK(out.data && ref.data && memcmp(out.data, ref.data, 64 * 64 * 3) == 0, "first keyframe not stretched");
    h3_rgb_image_clear(&out);
    h3_rgb_image_clear(&ref);
    h3_rgb_image_clear(&scaled);
}

/* The processor's bicubic: a flat image stays flat (taps sum to one in
 * int16), identity copies; checked against Pillow's BICUBIC when written
 * (within 2, from the int16 taps). */
static void test_bicubic(void) {
    h3_status st = {0};
    h3_rgb_image flat = {37, 23, 37 * 3, malloc(37 * 23 * 3)}, out;
    memset(flat.data, 200, 37 * 23 * 3);
    const int sizes[][2] = {{256, 256}, {11, 5}, {37, 64}, {80, 23}};
    for (size_t i = 0; i < G_N_ELEMENTS(sizes); i++) {
        h3_status_code rc = h3_image_resize_bicubic_aa(&flat, sizes[i][0], sizes[i][1], &out, &st);
        int ok = rc == H3_OK;
        for (int k = 0; ok && k < sizes[i][0] * sizes[i][1] * 3; k++) ok = out.data[k] == 200;
        CHECK(ok, "flat image resized to %dx%d is not flat: %s", sizes[i][0], sizes[i][1], st.message);
        h3_rgb_image_clear(&out);
    }
    free(flat.data);
}

static void test_smart_resize(void) {
    h3_status st = {0};
    int h = 0, w = 0;
    CHECK(h3_image_smart_resize(768, 1344, 32, 65536, 16777216, &h, &w, &st) == H3_OK && h == 768 && w == 1344,
          "release canvas %dx%d", w, h);
    CHECK(h3_image_smart_resize(128, 128, 32, 65536, 16777216, &h, &w, &st) == H3_OK && h == 256 && w == 256,
          "128x128 -> %dx%d (spec: 256x256)", w, h);
    CHECK(h3_image_smart_resize(32, 64, 32, 1024, 16777216, &h, &w, &st) == H3_OK && h == 32 && w == 64,
          "tiny canvas %dx%d", w, h);
    CHECK(h3_image_smart_resize(1, 300, 32, 1024, 16777216, &h, &w, &st) == H3_ERR_INVALID_ARGUMENT &&
              strstr(st.message, "200"),
          "ratio 300: %s", st.message);
}

/* The processor on the golden keyframe: pixel_values and image_grid_thw. */
static void test_processor_golden(void) {
    h3_status st = {0};
    h3_image_processor_config cfg;
    h3_status_code rc = h3_image_processor_config_load(h3_test_data(TINY_PROCESSOR), &cfg, &st);
    CHECK(rc == H3_OK && cfg.min_pixels == 1024 && cfg.patch_size == 16 && cfg.temporal_patch_size == 2 &&
              cfg.merge_size == 2 && cfg.mean[0] == 0.5f && cfg.std[2] == 0.5f,
          "tiny processor config: %s", st.message);
    h3_image_processor_config real;
    rc = h3_image_processor_config_load(h3_test_data("official/processor/preprocessor_config.json"), &real, &st);
    CHECK(rc == H3_OK && real.min_pixels == 65536 && real.max_pixels == 16777216, "release processor: %s", st.message);

    h3_rgb_image kf;
    float *pv = NULL, *want = NULL;
    int64_t grid[3] = {0};
    const h3_st_tensor *info;
    CHECK(golden_image(te_golden, "fl2va.keyframe_uint8", &kf), "golden keyframe missing");
    if (!kf.data) return;
    rc = h3_image_process(&cfg, &kf, &pv, grid, &st);
    CHECK(rc == H3_OK, "process: %s", st.message);
    const h3_st_tensor *g = h3_st_find(te_golden, "fl2va.image_grid_thw");
    const int64_t *gw = g ? g->data : NULL;
    CHECK(gw && grid[0] == gw[0] && grid[1] == gw[1] && grid[2] == gw[2], "grid [%lld,%lld,%lld]",
          (long long)grid[0], (long long)grid[1], (long long)grid[2]);
    if (rc == H3_OK && h3_st_read_f32(te_golden, "fl2va.pixel_values", &want, &info, &st) == H3_OK) {
        size_t n = (size_t)info->numel, differ = 0;
        CHECK(info->shape[0] == grid[0] * grid[1] * grid[2] && info->shape[1] == 1536, "pixel_values shape");
        for (size_t i = 0; i < n; i++) differ += pv[i] != want[i];
        printf("pixel_values [%lld, %lld]: %zu values differ\n", (long long)info->shape[0], (long long)info->shape[1],
               differ);
        CHECK(differ == 0, "pixel_values: %zu of %zu differ", differ, n);
    }
    free(pv);
    free(want);

    /* the release processor takes 64x32 up to 384x192 (smart_resize to 65536 pixels or more) */
    rc = h3_image_process(&real, &kf, &pv, grid, &st);
    CHECK(rc == H3_OK && grid[0] == 1 && grid[1] == 12 && grid[2] == 24, "upscaled keyframe grid [%lld,%lld,%lld]: %s",
          (long long)grid[0], (long long)grid[1], (long long)grid[2], st.message);
    free(pv);
}

/* ---- the vision tower ------------------------------------------------------------ */

static int load_vision_config(const char *dir, h3_vision_config *cfg, h3_status *st) {
    char *path = g_build_filename(dir, "config.json", NULL);
    h3_config *c = NULL;
    h3_status_code rc = h3_config_load(path, &c, st);
    if (rc == H3_OK) rc = h3_vision_config_read(c, cfg, st);
    h3_config_free(c);
    g_free(path);
    return rc == H3_OK;
}

/* Every name the loader reads is in the release's index with the spec's
 * shape, and every model.visual.* name of the index is read. */
static void test_real_names(void) {
    h3_status st = {0};
    h3_vision_config cfg;
    const char *dir = h3_test_data("official/text_encoder");
    CHECK(load_vision_config(dir, &cfg, &st), "real vision config: %s", st.message);
    CHECK(cfg.depth == 27 && cfg.hidden_size == 1152 && cfg.num_heads == 16 && cfg.out_hidden_size == 5120 &&
              cfg.n_deepstack == 3 && cfg.deepstack[0] == 8 && cfg.deepstack[2] == 24 && cfg.rope_theta == 10000.0,
          "real vision config values");
    h3_vision_tensor_info *list = NULL;
    int n = 0;
    CHECK(h3_vision_tensor_list(&cfg, &list, &n, &st) == H3_OK, "list: %s", st.message);
    JsonParser *p = json_parser_new();
    char *index = g_build_filename(dir, "model.safetensors.index.json", NULL);
    CHECK(json_parser_load_from_file(p, index, NULL), "index");
    JsonObject *map = json_object_get_object_member(json_node_get_object(json_parser_get_root(p)), "weight_map");
    int missing = 0, visual = 0;
    int64_t params = 0;
    for (int i = 0; i < n; i++) {
        if (!json_object_has_member(map, list[i].name) && missing++ < 3) fprintf(stderr, "not in index: %s\n", list[i].name);
        int64_t e = 1;
        for (int d = 0; d < list[i].ndim; d++) e *= list[i].shape[d];
        params += e;
    }
    GList *names = json_object_get_members(map);
    for (GList *l = names; l; l = l->next) visual += g_str_has_prefix(l->data, "model.visual.");
    g_list_free(names);
    printf("vision tower: %d tensors, %lld parameters; the index has %d model.visual.* names\n", n, (long long)params,
           visual);
    CHECK(missing == 0, "%d names missing from the real index", missing);
    CHECK(visual == n, "the index has %d visual tensors, the loader reads %d", visual, n);
    CHECK(params == 595266800, "parameters %lld, spec 5.3: 595,266,800", (long long)params);
    free(list);
    g_free(index);
    g_object_unref(p);
}

/* Two images in one call give each image's features as alone (attention
 * stays within an image), and the outputs are finite. */
static void test_forward_independence(void) {
    h3_status st = {0};
    h3_vision_config cfg;
    h3_checkpoint *ck = NULL;
    h3_vision *v = NULL;
    if (!load_vision_config(h3_test_data(TINY_TE), &cfg, &st) || h3_checkpoint_open(h3_test_data(TINY_TE), &ck, &st) ||
        h3_vision_load(be, &cfg, ck, &v, &st)) {
        CHECK(0, "tiny vision load: %s", st.message);
        h3_checkpoint_close(ck);
        return;
    }
    float *pv = NULL;
    const h3_st_tensor *info;
    CHECK(h3_st_read_f32(te_golden, "fl2va.pixel_values", &pv, &info, &st) == H3_OK, "pixel_values: %s", st.message);
    int64_t rows = info->shape[0], cols = info->shape[1], O = cfg.out_hidden_size;
    int64_t grid[2][3] = {{1, 2, 4}, {1, 2, 2}};
    int64_t t0 = h3_vision_tokens(v, grid[0]), t1 = h3_vision_tokens(v, grid[1]);
    CHECK(rows == 8 && t0 == 2 && t1 == 1, "tiny grid: %lld rows, tokens %lld %lld", (long long)rows, (long long)t0,
          (long long)t1);
    /* image 2: the left half's 4 patches (the first merge windows' rows are 0..3) */
    float *two = malloc((size_t)(rows + 4) * cols * sizeof *two);
    memcpy(two, pv, (size_t)rows * cols * sizeof *two);
    memcpy(two + rows * cols, pv, (size_t)4 * cols * sizeof *two);
    h3_dtype dt = h3_backend_compute_dtype(be);
    size_t mark = h3_arena_mark(be);
    h3_tensor e2 = h3_new_2d(be, dt, 3, O), e1 = h3_new_2d(be, dt, 2, O), e0 = h3_new_2d(be, dt, 1, O);
    h3_tensor d2[2] = {h3_new_2d(be, dt, 3, O), h3_new_2d(be, dt, 3, O)};
    h3_tensor d1[2] = {h3_new_2d(be, dt, 2, O), h3_new_2d(be, dt, 2, O)};
    h3_tensor d0[2] = {h3_new_2d(be, dt, 1, O), h3_new_2d(be, dt, 1, O)};
    h3_status_code rc = h3_vision_forward(v, two, (const int64_t(*)[3])grid, 2, &e2, d2, &st);
    CHECK(rc == H3_OK, "forward of two: %s", st.message);
    CHECK(h3_vision_forward(v, pv, (const int64_t(*)[3])grid, 1, &e1, d1, &st) == H3_OK, "first alone: %s", st.message);
    CHECK(h3_vision_forward(v, pv, (const int64_t(*)[3])&grid[1], 1, &e0, d0, &st) == H3_OK, "second alone: %s",
          st.message);
    float a[3 * 64], b1[2 * 64], b0[64];
    const h3_tensor *pairs[3][3] = {{&e2, &e1, &e0}, {&d2[0], &d1[0], &d0[0]}, {&d2[1], &d1[1], &d0[1]}};
    for (int k = 0; k < 3 && rc == H3_OK; k++) {
        h3_tensor_download_f32(be, pairs[k][0], a, &st);
        h3_tensor_download_f32(be, pairs[k][1], b1, &st);
        h3_tensor_download_f32(be, pairs[k][2], b0, &st);
        double e_first = h3_test_rel_l2(a, b1, (size_t)2 * O), e_second = h3_test_rel_l2(a + 2 * O, b0, (size_t)O);
        int finite = 1;
        for (int i = 0; i < 3 * O; i++) finite &= isfinite(a[i]) != 0;
        CHECK(finite && e_first < 1e-6 && e_second < 1e-6, "output %d: batched vs alone %g %g", k, e_first, e_second);
    }
    /* a wrong output shape is refused */
    CHECK(h3_vision_forward(v, pv, (const int64_t(*)[3])grid, 1, &e0, d0, &st) == H3_ERR_INVALID_ARGUMENT,
          "wrong embeds rows: %s", st.message);
    int64_t odd[1][3] = {{1, 3, 4}};
    CHECK(h3_vision_forward(v, pv, (const int64_t(*)[3])odd, 1, &e1, d1, &st) == H3_ERR_INVALID_ARGUMENT &&
              strstr(st.message, "multiples"),
          "odd grid: %s", st.message);
    int64_t video[1][3] = {{2, 2, 4}};
    CHECK(h3_vision_forward(v, pv, (const int64_t(*)[3])video, 1, &e1, d1, &st) == H3_ERR_UNSUPPORTED &&
              strstr(st.message, "still"),
          "video grid: %s", st.message);
    h3_arena_reset(be, mark);
    free(two);
    free(pv);
    h3_vision_free(v);
    h3_checkpoint_close(ck);
}

/* A dummy checkpoint of the tower loads and runs (load-format dummy). */
static void test_dummy(void) {
    h3_status st = {0};
    h3_vision_config cfg;
    h3_checkpoint *ck = NULL;
    h3_vision *v = NULL;
    CHECK(load_vision_config(h3_test_data(TINY_TE), &cfg, &st), "config: %s", st.message);
    h3_status_code rc = h3_checkpoint_dummy_new("vision dummy", 7, &ck, &st);
    if (rc == H3_OK) rc = h3_vision_dummy_add(&cfg, ck, &st);
    if (rc == H3_OK) rc = h3_vision_load(be, &cfg, ck, &v, &st);
    CHECK(rc == H3_OK, "dummy load: %s", st.message);
    if (rc == H3_OK) {
        float *pv = NULL;
        const h3_st_tensor *info;
        h3_st_read_f32(te_golden, "fl2va.pixel_values", &pv, &info, &st);
        int64_t grid[1][3] = {{1, 2, 4}};
        size_t mark = h3_arena_mark(be);
        h3_dtype dt = h3_backend_compute_dtype(be);
        h3_tensor e = h3_new_2d(be, dt, 2, cfg.out_hidden_size);
        h3_tensor d[2] = {h3_new_2d(be, dt, 2, cfg.out_hidden_size), h3_new_2d(be, dt, 2, cfg.out_hidden_size)};
        rc = h3_vision_forward(v, pv, (const int64_t(*)[3])grid, 1, &e, d, &st);
        float out[2 * 64];
        if (rc == H3_OK) rc = h3_tensor_download_f32(be, &e, out, &st);
        int finite = rc == H3_OK;
        for (int i = 0; i < 2 * cfg.out_hidden_size && finite; i++) finite = isfinite(out[i]);
        CHECK(finite, "dummy forward: %s", st.message);
        h3_arena_reset(be, mark);
        free(pv);
    }
    h3_vision_free(v);
    h3_checkpoint_close(ck);
}

static void test_config_errors(void) {
    h3_status st = {0};
    h3_vision_config cfg;
    h3_config *c = NULL;
    h3_config_parse("{\"text_config\":{}}", "no-vision.json", &c, &st);
    CHECK(h3_vision_config_read(c, &cfg, &st) == H3_ERR_NOT_FOUND && strstr(st.message, "no vision"), "no vision: %s",
          st.message);
    h3_config_free(c);
    const char *bad_act = "{\"vision_config\":{\"depth\":2,\"hidden_size\":32,\"intermediate_size\":64,\"num_heads\":2,"
                          "\"patch_size\":16,\"temporal_patch_size\":2,\"spatial_merge_size\":2,\"out_hidden_size\":40,"
                          "\"num_position_embeddings\":16,\"hidden_act\":\"relu\"}}";
    h3_config_parse(bad_act, "act.json", &c, &st);
    CHECK(h3_vision_config_read(c, &cfg, &st) == H3_ERR_UNSUPPORTED && strstr(st.message, "relu"), "relu: %s",
          st.message);
    h3_config_free(c);
    const char *bad_ds = "{\"vision_config\":{\"depth\":2,\"hidden_size\":32,\"intermediate_size\":64,\"num_heads\":2,"
                         "\"patch_size\":16,\"temporal_patch_size\":2,\"spatial_merge_size\":2,\"out_hidden_size\":40,"
                         "\"num_position_embeddings\":15,\"deepstack_visual_indexes\":[0,1]}}";
    h3_config_parse(bad_ds, "pos.json", &c, &st);
    CHECK(h3_vision_config_read(c, &cfg, &st) == H3_ERR_FORMAT && strstr(st.message, "square"), "15 positions: %s",
          st.message);
    h3_config_free(c);
}

int main(void) {
    h3_status st = {0};
    if (h3_st_open(h3_test_data(E2E_GOLDEN), &e2e, &st) != H3_OK ||
        h3_st_open(h3_test_data(TE_GOLDEN), &te_golden, &st) != H3_OK || h3_backend_cpu_create(2, &be, &st) != H3_OK) {
        fprintf(stderr, "setup: %s\n", st.message);
        return 1;
    }
    test_lanczos_golden();
    test_lanczos_shapes();
    test_lanczos_pillow();
    test_canvas_and_crop();
    test_smart_resize();
    test_bicubic();
    test_processor_golden();
    test_real_names();
    test_forward_independence();
    test_dummy();
    test_config_errors();
    h3_backend_destroy(be);
    h3_st_close(e2e);
    h3_st_close(te_golden);
    return h3_test_finish("test_vision");
}
