/* h3_image.c - keyframe geometry, PIL's LANCZOS and the Qwen3-VL image
 * processor (docs/spec/h3-conditioner.md §5.1-5.2).
 *
 * The resize follows Pillow's libImaging/Resample.c: precompute_coeffs (taps
 * in double around centre (x + 0.5)·scale, support 3·max(scale, 1),
 * normalised to sum 1), normalize_coeffs_8bpc (round half away from zero to
 * 22 fractional bits), then ResampleHorizontal_8bpc / ResampleVertical_8bpc
 * with the accumulator starting at 1 << 21 and clip8 (>> 22, clamp). */
#include "model/h3_image.h"

#include <glib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/h3_config.h"

#define PRECISION_BITS (32 - 8 - 2)
#define LANCZOS_SUPPORT 3.0

h3_status_code h3_rgb_image_check(const h3_rgb_image *img, const char *what, h3_status *status) {
    if (!img || !img->data)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s: no pixels", what);
    if (img->width < 1 || img->height < 1 || img->width > H3_IMAGE_MAX_SIDE || img->height > H3_IMAGE_MAX_SIDE ||
        (int64_t)img->width * img->height > H3_IMAGE_MAX_PIXELS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "%s: %dx%d; want 1..%d pixels a side and at most %lld pixels", what, img->width, img->height,
                       H3_IMAGE_MAX_SIDE, (long long)H3_IMAGE_MAX_PIXELS);
    if (img->stride < (size_t)img->width * 3)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "%s: stride %zu is below 3·width = %d", what, img->stride,
                       img->width * 3);
    return H3_OK;
}

void h3_rgb_image_clear(h3_rgb_image *img) {
    if (!img) return;
    free(img->data);
    memset(img, 0, sizeof *img);
}

static h3_status_code image_alloc(int w, int h, h3_rgb_image *dst, h3_status *status) {
    memset(dst, 0, sizeof *dst);
    dst->data = malloc((size_t)w * (size_t)h * 3);
    if (!dst->data) return h3_fail(status, H3_ERR_NO_MEMORY, "image: no host memory for %dx%d RGB", w, h);
    dst->width = w;
    dst->height = h;
    dst->stride = (size_t)w * 3;
    return H3_OK;
}

static h3_status_code image_copy(const h3_rgb_image *src, h3_rgb_image *dst, h3_status *status) {
    h3_status_code rc = image_alloc(src->width, src->height, dst, status);
    if (rc != H3_OK) return rc;
    for (int y = 0; y < src->height; y++)
        memcpy(dst->data + (size_t)y * dst->stride, src->data + (size_t)y * src->stride, (size_t)src->width * 3);
    return H3_OK;
}

/* ---- separable fixed-point resampling (Pillow's Resample.c) ----------------------- */

static double sinc(double x) {
    if (x == 0.0) return 1.0;
    x = x * M_PI;
    return sin(x) / x;
}

static double lanczos(double x) {
    if (-3.0 <= x && x < 3.0) return sinc(x) * sinc(x / 3.0);
    return 0.0;
}

/* Keys' cubic with a = -0.5 as torch's antialiased bicubic evaluates it
 * (HelperInterpCubic::aa_filter: cubic_convolution1/2 in double). */
static double cubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    return 0.0;
}

/* A filter and how its taps become integers: Pillow's 8-bit path uses 22
 * fractional bits; torch's uint8 antialias kernels (UpSampleKernelAVXAntialias,
 * from Pillow-SIMD) int16 taps with the most bits that keep the largest tap
 * below 2^15. */
typedef struct resample_filter {
    double (*fn)(double);
    double support;
    int int16_taps;
} resample_filter;

static const resample_filter pil_lanczos = {lanczos, 3.0, 0};
static const resample_filter torch_bicubic = {cubic, 2.0, 1};

/* One axis: for each output index its first input index and tap count
 * (bounds[2i], bounds[2i+1]), ksize fixed-point taps, and their precision. */
typedef struct axis_coeffs {
    int ksize, precision;
    int *bounds;
    int32_t *kk;
} axis_coeffs;

static void axis_coeffs_free(axis_coeffs *a) {
    free(a->bounds);
    free(a->kk);
}

static int32_t to_fixed(double k, int precision) {
    double v = k * (double)(1 << precision);
    return k < 0 ? (int32_t)(-0.5 + v) : (int32_t)(0.5 + v);
}

/* torch: the first precision p < 22 at which round(w_max·2^(p+1)) reaches 2^15. */
static int int16_precision(const double *k, size_t n) {
    double w_max = 0;
    for (size_t i = 0; i < n; i++) w_max = k[i] > w_max ? k[i] : w_max;
    int p = 0;
    for (; p < 22; p++)
        if ((int)(0.5 + w_max * (double)(1 << (p + 1))) >= (1 << 15)) break;
    return p;
}

/* precompute_coeffs over the box [0, in_size): taps in double around the
 * centre (x + 0.5)·scale, normalised to sum 1 (k[] holds them, [out][ksize]). */
static void precompute(const resample_filter *f, int in_size, int out_size, int ksize, int *bounds, double *k) {
    double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = f->support * filterscale;
    for (int xx = 0; xx < out_size; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale, *kx = k + (size_t)xx * ksize;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            kx[x] = f->fn((x + xmin - center + 0.5) * ss);
            ww += kx[x];
        }
        for (int x = 0; x < xmax; x++)
            if (ww != 0.0) kx[x] /= ww;
        for (int x = xmax; x < ksize; x++) kx[x] = 0.0;
        bounds[xx * 2] = xmin;
        bounds[xx * 2 + 1] = xmax;
    }
}

static h3_status_code axis_coeffs_make(const resample_filter *f, int in_size, int out_size, axis_coeffs *a,
                                       h3_status *status) {
    double scale = (double)in_size / out_size;
    a->ksize = (int)ceil(f->support * (scale < 1.0 ? 1.0 : scale)) * 2 + 1;
    size_t n = (size_t)out_size * (size_t)a->ksize;
    a->bounds = malloc((size_t)out_size * 2 * sizeof *a->bounds);
    a->kk = malloc(n * sizeof *a->kk);
    double *k = malloc(n * sizeof *k);
    if (!a->bounds || !a->kk || !k) {
        free(k);
        axis_coeffs_free(a);
        return h3_fail(status, H3_ERR_NO_MEMORY, "image resize: no host memory for %zu taps", n);
    }
    precompute(f, in_size, out_size, a->ksize, a->bounds, k);
    a->precision = f->int16_taps ? int16_precision(k, n) : PRECISION_BITS;
    for (size_t i = 0; i < n; i++) a->kk[i] = to_fixed(k[i], a->precision);
    free(k);
    return H3_OK;
}

/* >> precision (arithmetic), clamped to 0..255: Pillow's clip8, torch's
 * saturating packs. */
static uint8_t clip8(int64_t acc, int precision) {
    int64_t v = acc >> precision;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static void pass_horizontal(const h3_rgb_image *src, h3_rgb_image *dst, const axis_coeffs *a) {
    for (int y = 0; y < dst->height; y++) {
        const uint8_t *in = src->data + (size_t)y * src->stride;
        uint8_t *out = dst->data + (size_t)y * dst->stride;
        for (int xx = 0; xx < dst->width; xx++) {
            int xmin = a->bounds[xx * 2], xmax = a->bounds[xx * 2 + 1];
            const int32_t *k = &a->kk[(size_t)xx * a->ksize];
            for (int c = 0; c < 3; c++) {
                int64_t ss = (int64_t)1 << (a->precision - 1);
                for (int x = 0; x < xmax; x++) ss += (int64_t)in[(size_t)(x + xmin) * 3 + c] * k[x];
                out[(size_t)xx * 3 + c] = clip8(ss, a->precision);
            }
        }
    }
}

static void pass_vertical(const h3_rgb_image *src, h3_rgb_image *dst, const axis_coeffs *a) {
    for (int yy = 0; yy < dst->height; yy++) {
        int ymin = a->bounds[yy * 2], ymax = a->bounds[yy * 2 + 1];
        const int32_t *k = &a->kk[(size_t)yy * a->ksize];
        uint8_t *out = dst->data + (size_t)yy * dst->stride;
        for (int xc = 0; xc < dst->width * 3; xc++) {
            int64_t ss = (int64_t)1 << (a->precision - 1);
            for (int y = 0; y < ymax; y++) ss += (int64_t)src->data[(size_t)(y + ymin) * src->stride + xc] * k[y];
            out[xc] = clip8(ss, a->precision);
        }
    }
}

/* One pass along one axis (horizontal: width changes), into a new image. */
static h3_status_code resize_pass(const resample_filter *f, const h3_rgb_image *src, int out_w, int out_h,
                                  int horizontal, h3_rgb_image *dst, h3_status *status) {
    axis_coeffs a = {0};
    h3_status_code rc = horizontal ? axis_coeffs_make(f, src->width, out_w, &a, status)
                                   : axis_coeffs_make(f, src->height, out_h, &a, status);
    if (rc == H3_OK) rc = image_alloc(out_w, out_h, dst, status);
    if (rc == H3_OK) {
        if (horizontal) pass_horizontal(src, dst, &a);
        else pass_vertical(src, dst, &a);
    }
    axis_coeffs_free(&a);
    return rc;
}

/* Horizontal pass then vertical, each only when that side changes. */
static h3_status_code resample(const resample_filter *f, const h3_rgb_image *src, int out_w, int out_h,
                               h3_rgb_image *dst, h3_status *status) {
    memset(dst, 0, sizeof *dst);
    h3_status_code rc = h3_rgb_image_check(src, "image resize source", status);
    if (rc != H3_OK) return rc;
    h3_rgb_image probe = {out_w, out_h, (size_t)(out_w > 0 ? out_w : 0) * 3, src->data};
    if ((rc = h3_rgb_image_check(&probe, "image resize target", status)) != H3_OK) return rc;
    int need_h = out_w != src->width, need_v = out_h != src->height;
    if (!need_h && !need_v) return image_copy(src, dst, status);
    if (!need_v) return resize_pass(f, src, out_w, out_h, 1, dst, status);
    if (!need_h) return resize_pass(f, src, out_w, out_h, 0, dst, status);
    h3_rgb_image tmp;
    rc = resize_pass(f, src, out_w, src->height, 1, &tmp, status);
    if (rc == H3_OK) rc = resize_pass(f, &tmp, out_w, out_h, 0, dst, status);
    h3_rgb_image_clear(&tmp);
    return rc;
}

h3_status_code h3_image_resize_lanczos(const h3_rgb_image *src, int out_w, int out_h, h3_rgb_image *dst,
                                       h3_status *status) {
    return resample(&pil_lanczos, src, out_w, out_h, dst, status);
}

h3_status_code h3_image_resize_bicubic_aa(const h3_rgb_image *src, int out_w, int out_h, h3_rgb_image *dst,
                                          h3_status *status) {
    return resample(&torch_bicubic, src, out_w, out_h, dst, status);
}

/* ---- canvas and keyframe fit ----------------------------------------------------- */

h3_status_code h3_image_canvas_size(double aspect_w, double aspect_h, int multiple, int *out_h, int *out_w,
                                    h3_status *status) {
    const double short_edge = 768, max_pixels = 768.0 * 1344.0;
    if (!(aspect_w > 0) || !(aspect_h > 0) || !isfinite(aspect_w) || !isfinite(aspect_h))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "canvas: the aspect ratio must be positive, got %g:%g",
                       aspect_w, aspect_h);
    if (multiple < 1 || multiple > 4096)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "canvas: multiple %d is out of range", multiple);
    double ratio = aspect_w / aspect_h;
    if (!(ratio >= 0.25 && ratio <= 4.0))
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "canvas: MiniMax-H3 supports aspect ratios from 1:4 to 4:1, got %g:%g (%g)", aspect_w,
                       aspect_h, ratio);
    double w = ratio >= 1.0 ? short_edge * ratio : short_edge, h = ratio >= 1.0 ? short_edge : short_edge / ratio;
    double area = w * h;
    if (area > max_pixels) {
        double s = pow(max_pixels / area, 0.5);
        w *= s;
        h *= s;
    }
    int ch = (int)rint(h / multiple) * multiple, cw = (int)rint(w / multiple) * multiple;
    *out_h = ch > multiple ? ch : multiple;
    *out_w = cw > multiple ? cw : multiple;
    return H3_OK;
}

/* Rows [top, top+h) and columns [left, left+w) of src, copied. */
static h3_status_code crop(const h3_rgb_image *src, int left, int top, int w, int h, h3_rgb_image *dst,
                           h3_status *status) {
    h3_status_code rc = image_alloc(w, h, dst, status);
    if (rc != H3_OK) return rc;
    for (int y = 0; y < h; y++)
        memcpy(dst->data + (size_t)y * dst->stride, src->data + (size_t)(y + top) * src->stride + (size_t)left * 3,
               (size_t)w * 3);
    return H3_OK;
}

static int reference_side(int side, int short_side, int short_edge) {
    const int multiple = 32;
    int v = (int)rint((double)side * short_edge / short_side / multiple) * multiple;
    return v > multiple ? v : multiple;
}

h3_status_code h3_image_fit_reference(const h3_rgb_image *src, int short_edge, h3_rgb_image *dst, h3_status *status) {
    memset(dst, 0, sizeof *dst);
    h3_status_code rc = h3_rgb_image_check(src, "reference image", status);
    if (rc != H3_OK) return rc;
    if (short_edge < 32 || short_edge > 16384)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "reference image: short edge %d is outside 32..16384",
                       short_edge);
    int short_side = src->width < src->height ? src->width : src->height;
    int w = reference_side(src->width, short_side, short_edge), h = reference_side(src->height, short_side, short_edge);
    if (w > H3_IMAGE_MAX_SIDE || h > H3_IMAGE_MAX_SIDE || (int64_t)w * h > H3_IMAGE_MAX_PIXELS)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "reference image: %dx%d at a short edge of %d becomes %dx%d, past %d pixels a side or %lld "
                       "in all; use an image of a less extreme aspect ratio",
                       src->width, src->height, short_edge, w, h, H3_IMAGE_MAX_SIDE, (long long)H3_IMAGE_MAX_PIXELS);
    return h3_image_resize_lanczos(src, w, h, dst, status);
}

h3_status_code h3_image_fit_keyframe(const h3_rgb_image *src, int canvas_w, int canvas_h, int follower,
                                     h3_rgb_image *dst, h3_status *status) {
    memset(dst, 0, sizeof *dst);
    h3_status_code rc = h3_rgb_image_check(src, "keyframe", status);
    if (rc != H3_OK) return rc;
    if (src->width == canvas_w && src->height == canvas_h) return image_copy(src, dst, status);
    if (!follower) return h3_image_resize_lanczos(src, canvas_w, canvas_h, dst, status);
    double sx = (double)canvas_w / src->width, sy = (double)canvas_h / src->height, s = sx > sy ? sx : sy;
    double rw = rint(src->width * s), rh = rint(src->height * s);
    if (rw > H3_IMAGE_MAX_SIDE || rh > H3_IMAGE_MAX_SIDE)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "last keyframe: %dx%d would be scaled to %.0fx%.0f to cover the %dx%d canvas; at most %d a side",
                       src->width, src->height, rw, rh, canvas_w, canvas_h, H3_IMAGE_MAX_SIDE);
    int w = canvas_w > (int)rw ? canvas_w : (int)rw, h = canvas_h > (int)rh ? canvas_h : (int)rh;
    h3_rgb_image scaled;
    if ((rc = h3_image_resize_lanczos(src, w, h, &scaled, status)) != H3_OK) return rc;
    rc = crop(&scaled, (w - canvas_w) / 2, (h - canvas_h) / 2, canvas_w, canvas_h, dst, status);
    h3_rgb_image_clear(&scaled);
    return rc;
}

/* ---- the Qwen3-VL image processor ------------------------------------------------ */

static h3_status_code read_int_field(const h3_config *c, const char *const keys[2], int64_t *out, int64_t lo,
                                     int64_t hi, h3_status *status) {
    const char *key = h3_config_has(c, keys[0]) ? keys[0] : keys[1];
    h3_status_code rc = h3_config_int(c, key, out, status);
    if (rc == H3_OK && (*out < lo || *out > hi))
        rc = h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" = %lld is outside [%lld, %lld]", h3_config_path(c), key,
                     (long long)*out, (long long)lo, (long long)hi);
    return rc;
}

static h3_status_code read_triple(const h3_config *c, const char *key, float out[3], int positive,
                                  h3_status *status) {
    double v[3];
    int n = 0;
    h3_status_code rc = h3_config_double_array(c, key, v, 3, &n, status);
    if (rc != H3_OK) return rc;
    if (n != 3) return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\" has %d values, want 3", h3_config_path(c), key, n);
    for (int i = 0; i < 3; i++) {
        if (!isfinite(v[i]) || (positive && !(v[i] > 0)))
            return h3_fail(status, H3_ERR_FORMAT, "%s: \"%s\"[%d] = %g is out of range", h3_config_path(c), key, i,
                           v[i]);
        out[i] = (float)v[i];
    }
    return H3_OK;
}

static h3_status_code processor_fields(const h3_config *c, h3_image_processor_config *cfg, h3_status *status) {
    static const char *const min_keys[2] = {"size.shortest_edge", "min_pixels"};
    static const char *const max_keys[2] = {"size.longest_edge", "max_pixels"};
    static const char *const patch_keys[2] = {"patch_size", "patch_size"};
    static const char *const tp_keys[2] = {"temporal_patch_size", "temporal_patch_size"};
    static const char *const merge_keys[2] = {"merge_size", "merge_size"};
    int64_t v[5];
    h3_status_code rc = read_int_field(c, min_keys, &v[0], 1, H3_IMAGE_MAX_PIXELS, status);
    if (rc == H3_OK) rc = read_int_field(c, max_keys, &v[1], 1, (int64_t)1 << 40, status);
    if (rc == H3_OK) rc = read_int_field(c, patch_keys, &v[2], 1, 1024, status);
    if (rc == H3_OK) rc = read_int_field(c, tp_keys, &v[3], 1, 64, status);
    if (rc == H3_OK) rc = read_int_field(c, merge_keys, &v[4], 1, 64, status);
    if (rc == H3_OK) rc = read_triple(c, "image_mean", cfg->mean, 0, status);
    if (rc == H3_OK) rc = read_triple(c, "image_std", cfg->std, 1, status);
    if (rc != H3_OK) return rc;
    if (v[0] > v[1])
        return h3_fail(status, H3_ERR_FORMAT, "%s: min pixels %lld exceed max pixels %lld", h3_config_path(c),
                       (long long)v[0], (long long)v[1]);
    cfg->min_pixels = v[0];
    cfg->max_pixels = v[1];
    cfg->patch_size = (int)v[2];
    cfg->temporal_patch_size = (int)v[3];
    cfg->merge_size = (int)v[4];
    return H3_OK;
}

h3_status_code h3_image_processor_config_load(const char *path, h3_image_processor_config *cfg, h3_status *status) {
    memset(cfg, 0, sizeof *cfg);
    char *file = g_file_test(path, G_FILE_TEST_IS_DIR) ? g_build_filename(path, "preprocessor_config.json", NULL)
                                                       : g_strdup(path);
    h3_config *c = NULL;
    h3_status_code rc = h3_config_load(file, &c, status);
    g_free(file);
    if (rc != H3_OK) return rc;
    rc = processor_fields(c, cfg, status);
    h3_config_free(c);
    return rc;
}

h3_status_code h3_image_smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels,
                                     int *out_h, int *out_w, h3_status *status) {
    if (height < 1 || width < 1 || factor < 1)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT, "smart_resize: %dx%d with factor %d", width, height, factor);
    int lo = height < width ? height : width, hi = height < width ? width : height;
    if ((double)hi / lo > 200)
        return h3_fail(status, H3_ERR_INVALID_ARGUMENT,
                       "image %dx%d: absolute aspect ratio must be smaller than 200, got %g", width, height,
                       (double)hi / lo);
    double h_bar = rint((double)height / factor) * factor, w_bar = rint((double)width / factor) * factor;
    if (h_bar * w_bar > (double)max_pixels) {
        double beta = sqrt((double)height * width / (double)max_pixels);
        h_bar = fmax(factor, floor(height / beta / factor) * factor);
        w_bar = fmax(factor, floor(width / beta / factor) * factor);
    } else if (h_bar * w_bar < (double)min_pixels) {
        double beta = sqrt((double)min_pixels / ((double)height * width));
        h_bar = ceil(height * beta / factor) * factor;
        w_bar = ceil(width * beta / factor) * factor;
    }
    *out_h = (int)h_bar;
    *out_w = (int)w_bar;
    return H3_OK;
}

/* Fills pixel_values for a [gh, gw] patch grid, rows in merge-window order. */
static void patchify(const h3_image_processor_config *cfg, const h3_rgb_image *img, int gh, int gw, float *out) {
    int ps = cfg->patch_size, tp = cfg->temporal_patch_size, m = cfg->merge_size;
    size_t cols = (size_t)3 * tp * ps * ps;
    float scale[3], shift[3];
    for (int c = 0; c < 3; c++) {
        shift[c] = cfg->mean[c] * 255.0f; /* transformers fuses 1/255 into mean and std */
        scale[c] = cfg->std[c] * 255.0f;
    }
    size_t row = 0;
    for (int bh = 0; bh < gh / m; bh++)
        for (int bw = 0; bw < gw / m; bw++)
            for (int mh = 0; mh < m; mh++)
                for (int mw = 0; mw < m; mw++, row++) {
                    int y0 = (bh * m + mh) * ps, x0 = (bw * m + mw) * ps;
                    float *dst = out + row * cols;
                    for (int c = 0; c < 3; c++)
                        for (int f = 0; f < tp; f++)
                            for (int py = 0; py < ps; py++)
                                for (int px = 0; px < ps; px++) {
                                    float x = img->data[(size_t)(y0 + py) * img->stride + (size_t)(x0 + px) * 3 + c];
                                    *dst++ = (x - shift[c]) / scale[c];
                                }
                }
}

h3_status_code h3_image_process(const h3_image_processor_config *cfg, const h3_rgb_image *img, float **out,
                                int64_t grid_thw[3], h3_status *status) {
    *out = NULL;
    h3_status_code rc = h3_rgb_image_check(img, "keyframe", status);
    if (rc != H3_OK) return rc;
    int factor = cfg->patch_size * cfg->merge_size, h = 0, w = 0;
    rc = h3_image_smart_resize(img->height, img->width, factor, cfg->min_pixels, cfg->max_pixels, &h, &w, status);
    if (rc != H3_OK) return rc;
    h3_rgb_image resized = {0};
    const h3_rgb_image *src = img;
    if (h != img->height || w != img->width) { /* the processor's resize: torchvision bicubic, antialiased */
        if ((rc = h3_image_resize_bicubic_aa(img, w, h, &resized, status)) != H3_OK) return rc;
        src = &resized;
    }
    int gh = h / cfg->patch_size, gw = w / cfg->patch_size;
    size_t rows = (size_t)gh * gw, cols = (size_t)3 * cfg->temporal_patch_size * cfg->patch_size * cfg->patch_size;
    *out = malloc(rows * cols * sizeof **out);
    if (*out) patchify(cfg, src, gh, gw, *out);
    h3_rgb_image_clear(&resized);
    if (!*out) return h3_fail(status, H3_ERR_NO_MEMORY, "keyframe: no host memory for %zu pixel values", rows * cols);
    grid_thw[0] = 1;
    grid_thw[1] = gh;
    grid_thw[2] = gw;
    return H3_OK;
}
