/* h3_image_file.h - keyframe files for h3-generate and the element: PNG and
 * JPEG (only those two: h3_image_file.c says why) decoded into the packed
 * 8-bit RGB an h3_image points at.
 *
 * Not the engine's job (h3core takes pixels), and not hand-written: the
 * decoding is GdkPixbuf's (docs/ARCHITECTURE.md, Dependencies). What this
 * adds is the checks a model folder's other files get: a regular file only
 * (a FIFO must not block), a bounded size, the image's size refused from its
 * header before any pixel is allocated, and messages that name the file. */
#ifndef H3_IMAGE_FILE_H
#define H3_IMAGE_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "h3.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest file read (bytes). */
#define H3_IMAGE_FILE_MAX_BYTES ((size_t)256 << 20)

/* A decoded image: `image` points into `pixels`, which h3_image_file_clear frees. */
typedef struct h3_image_file {
    h3_image image;
    uint8_t *pixels;
} h3_image_file;

/* Decodes the file at path. An alpha channel is dropped (as PIL's
 * convert("RGB") does); other layouts than 8-bit RGB(A) are refused.
 * Errors (a status naming the file): missing or unreadable, not a regular
 * file, larger than H3_IMAGE_FILE_MAX_BYTES, not a PNG or JPEG (by its first
 * bytes), corrupt, truncated (a PNG whose image data does not cover every
 * row or that has no IEND chunk, a JPEG without its end-of-image marker or
 * with fewer bytes of scan data than its 8x8 blocks need: refused before
 * any decoder runs, the message saying 'truncated'), 0x0, a side over
 * H3_MAX_IMAGE_SIDE or more than H3_MAX_IMAGE_PIXELS pixels. */
h3_status_code h3_image_file_load(const char *path, h3_image_file *out, h3_status *status);
/* The same from bytes in memory (`name` stands for the file in messages). */
h3_status_code h3_image_file_decode(const uint8_t *bytes, size_t n, const char *name, h3_image_file *out,
                                    h3_status *status);
void h3_image_file_clear(h3_image_file *f);

#ifdef __cplusplus
}
#endif
#endif
