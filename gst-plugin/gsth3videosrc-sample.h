/* gsth3videosrc-sample.h - a GstSample an application hands the element
 * (the image and last-image properties) checked and turned into packed RGB.
 *
 * A file of its own, outside the element, so that tests/fuzz/fuzz_sample.c
 * compiles the same code without the plugin. The sample's buffer is
 * memory the application describes: its caps and its GstVideoMeta (plane
 * offsets and strides) are checked against the memory before a byte is
 * read, since gst_video_frame_map checks only that each plane's offset
 * lies in the buffer (GStreamer 1.22), not what the stride reaches. */
#ifndef GST_H3_VIDEO_SRC_SAMPLE_H
#define GST_H3_VIDEO_SRC_SAMPLE_H

#include <gst/video/video.h>

#include "h3_image_file.h"

G_BEGIN_DECLS

typedef enum
{
  GST_H3_SAMPLE_OK,
  GST_H3_SAMPLE_REFUSED,        /* not a sample the element takes */
  GST_H3_SAMPLE_FAILED          /* out of memory, or no GstVideoConverter */
} GstH3SampleResult;

/* Packed RGB (stride width*3, alpha dropped) of a video/x-raw sample in
 * system memory, RGB, RGBx, RGBA or I420, of at most H3_MAX_IMAGE_SIDE a
 * side and H3_MAX_IMAGE_PIXELS pixels. Refused: no buffer, caps not fixed
 * or not such video, a GstVideoMeta whose format, size or plane count is
 * not the caps', a plane whose stride is shorter than a row or whose rows
 * (offset + stride x rows) reach past the buffer or its memory block, a
 * buffer smaller than the caps' frame. On anything but OK, *message is a
 * sentence (g_free) naming the numbers and out holds nothing. */
G_GNUC_INTERNAL
GstH3SampleResult gst_h3_sample_to_rgb (GstSample * sample,
    h3_image_file * out, gchar ** message);

G_END_DECLS
#endif
