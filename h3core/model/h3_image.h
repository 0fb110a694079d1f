/* h3_image.h - the FL2VA keyframes before the vision tower: the canvas, PIL's
 * LANCZOS resize bit for bit, the keyframe fit (stretch or cover-crop), and
 * the Qwen3-VL image processor (smart_resize, 2x16x16 patches in merge-window
 * order, normalisation) that turns a keyframe into pixel_values and its
 * grid (docs/spec/h3-conditioner.md §5.1-5.2).
 *
 * Images are packed 8-bit RGB, row-major, `stride` bytes between rows.
 * Decoding files is not done here: callers hand in pixels. */
#ifndef H3_IMAGE_H
#define H3_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/h3_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest side and area any image function here accepts. */
#define H3_IMAGE_MAX_SIDE 16384
#define H3_IMAGE_MAX_PIXELS ((int64_t)1 << 28)

typedef struct h3_rgb_image {
    int width, height;
    size_t stride;  /* bytes from one row to the next, >= 3·width */
    uint8_t *data;  /* owned when made by the functions below (h3_rgb_image_clear) */
} h3_rgb_image;

/* Checks sizes, stride and pixels (what names the image in messages: "first keyframe"). */
h3_status_code h3_rgb_image_check(const h3_rgb_image *img, const char *what, h3_status *status);
/* Frees pixels this module allocated and zeroes the struct. */
void h3_rgb_image_clear(h3_rgb_image *img);

/* PIL's Image.resize((out_w, out_h), Image.LANCZOS) on RGB: Lanczos-3 taps
 * in double, normalised, turned into 22-bit fixed point, horizontal pass then
 * vertical (each only when that side changes), rounding by the +half bias
 * and clipping to 0..255 after each pass. *dst gets tightly packed pixels. */
h3_status_code h3_image_resize_lanczos(const h3_rgb_image *src, int out_w, int out_h, h3_rgb_image *dst,
                                       h3_status *status);

/* The Qwen2-VL fast image processor's resize: torchvision's
 * resize(BICUBIC, antialias=True) of a uint8 image on an AVX2 CPU, i.e.
 * torch's uint8 antialias kernel (Pillow-SIMD's scheme): Keys' cubic
 * a = -0.5, support 2·max(scale, 1), taps normalised and rounded to int16
 * at the largest precision that keeps them below 2^15, horizontal pass then
 * vertical, each saturated to 0..255. (Bit-exactness with torch is
 * UNCONFIRMED here: no torch to compare against; H3 canvases at the
 * release's 768 short edge never take this path.) */
h3_status_code h3_image_resize_bicubic_aa(const h3_rgb_image *src, int out_w, int out_h, h3_rgb_image *dst,
                                          h3_status *status);

/* The MiniMax-H3 canvas for an aspect ratio (diffusers resolve_canvas_size):
 * short edge 768, area capped at 768·1344, both sides rounded half-even to
 * `multiple` (32 for the release), at least `multiple`. Aspect ratios outside
 * 1:4..4:1 are an H3_ERR_INVALID_ARGUMENT. */
h3_status_code h3_image_canvas_size(double aspect_w, double aspect_h, int multiple, int *out_h, int *out_w,
                                    h3_status *status);

/* Ref2VA: an image reference normalised as the setup step does: scaled so
 * its short side is short_edge (the model's reference_image_short_edge),
 * each side rounded half-even to a multiple of 32 (at least 32), resized
 * with LANCZOS (h3_image_resize_lanczos); 80x48 at 64 is 96x64. The aspect
 * is not limited (the pipeline does not limit it). */
h3_status_code h3_image_fit_reference(const h3_rgb_image *src, int short_edge, h3_rgb_image *dst, h3_status *status);

/* A keyframe onto a canvas as diffusers MiniMaxH3ResizeStep does it. A
 * keyframe already at canvas size is copied. Otherwise the first keyframe of
 * the request (follower == 0; a lone last keyframe is one too) is stretched
 * with LANCZOS; a follower (the last keyframe after a first one) is scaled by
 * max(W/w, H/h) to (max(W, round(w·s)), max(H, round(h·s))) with LANCZOS and
 * centre-cropped at ((w' − W) / 2, (h' − H) / 2). */
h3_status_code h3_image_fit_keyframe(const h3_rgb_image *src, int canvas_w, int canvas_h, int follower,
                                     h3_rgb_image *dst, h3_status *status);

/* The Qwen2-VL / Qwen3-VL image processor config (preprocessor_config.json). */
typedef struct h3_image_processor_config {
    int64_t min_pixels, max_pixels; /* size.shortest_edge / size.longest_edge (or min_pixels / max_pixels) */
    int patch_size, temporal_patch_size, merge_size;
    float mean[3], std[3];
} h3_image_processor_config;

/* path: a preprocessor_config.json, or a directory holding one. */
h3_status_code h3_image_processor_config_load(const char *path, h3_image_processor_config *cfg, h3_status *status);

/* transformers smart_resize(h, w, factor, min_pixels, max_pixels): the size
 * the processor resamples an image to, both sides multiples of factor. */
h3_status_code h3_image_smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels,
                                     int *out_h, int *out_w, h3_status *status);

/* One image through the processor: pixel_values [grid_t·grid_h·grid_w,
 * 3·tp·ps·ps] float32 (*out malloc'd; rows in (t, merge-window row, window
 * column, row in window, column in window) order, columns (channel, frame,
 * y, x)), values (x − 255·mean) / (255·std) in float32, the single frame
 * repeated over the temporal patch. grid_thw = {1, H'/ps, W'/ps} where
 * H'xW' is smart_resize's size; an image of another size is first resized
 * to it with h3_image_resize_bicubic_aa (a canvas under min_pixels, e.g.
 * 128x128 -> 256x256 with the release's processor). */
h3_status_code h3_image_process(const h3_image_processor_config *cfg, const h3_rgb_image *img, float **out,
                                int64_t grid_thw[3], h3_status *status);

#ifdef __cplusplus
}
#endif
#endif
