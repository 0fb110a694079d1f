/* gsth3videosrc-keyframes.c - the FL2VA keyframes of h3videosrc: the
 * first and last pictures of the clip, from a file (image-location,
 * last-image-location: decoded by media/h3_image_file, GdkPixbuf) or from a
 * GstSample an application holds (image, last-image: video/x-raw RGB,
 * RGBx, RGBA or I420, turned into packed RGB here). Both are turned into
 * the RGB pixels an h3_image points at once per run, at READY->PAUSED, so
 * that a bad file or sample fails the state change before any model load,
 * and the run keeps its own copy: the application may change or drop the
 * sample afterwards. Each keyframe's digest (SHA-256 of its size and
 * pixels) goes into the stream ids. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include <gst/video/video.h>

#include "gsth3videosrc-private.h"

void
gst_h3_keyframe_clear (GstH3Keyframe * k)
{
  h3_image_file_clear (&k->file);
  g_clear_pointer (&k->digest, g_free);
  k->present = FALSE;
}

/* SHA-256 of "WxH\n" and the rows of packed RGB (the stride left out): the
 * same pixels give the same digest, whichever property they came from. */
static gchar *
keyframe_digest (const h3_image * im)
{
  GChecksum *sum = g_checksum_new (G_CHECKSUM_SHA256);
  gchar head[64];
  gchar *out;

  g_snprintf (head, sizeof head, "%dx%d\n", im->width, im->height);
  g_checksum_update (sum, (const guchar *) head, -1);
  for (gint y = 0; y < im->height; y++)
    g_checksum_update (sum, im->rgb + (gsize) y * im->stride,
        (gssize) im->width * 3);
  out = g_strdup (g_checksum_get_string (sum));
  g_checksum_free (sum);
  return out;
}

/* A file keyframe: the decoder's message names the file; the domain says
 * what is wrong with it. */
static gboolean
keyframe_from_file (GstH3VideoSrc * self, const gchar * prop,
    const gchar * path, GstH3Keyframe * out)
{
  h3_status st;
  gint code;

  memset (&st, 0, sizeof st);
  if (h3_image_file_load (path, &out->file, &st) == H3_OK)
    return TRUE;
  switch (st.code) {
    case H3_ERR_NOT_FOUND:
      code = GST_RESOURCE_ERROR_NOT_FOUND;
      break;
    case H3_ERR_NO_MEMORY:
      code = GST_RESOURCE_ERROR_FAILED;
      break;
    default:                   /* not a regular file, unreadable, corrupt, too large */
      code = GST_RESOURCE_ERROR_OPEN_READ;
      break;
  }
  gst_element_message_full_with_details (GST_ELEMENT (self),
      GST_MESSAGE_ERROR, GST_RESOURCE_ERROR, code,
      g_strdup_printf ("%s: %s. Set %s to a PNG or JPEG file, or unset it.",
          prop, st.message, prop),
      g_strdup_printf ("h3core %s decoding %s '%s': %s",
          h3_status_code_name (st.code), prop, path, st.message),
      __FILE__, GST_FUNCTION, __LINE__,
      gst_structure_new ("details", "h3-status", G_TYPE_STRING,
          h3_status_code_name (st.code), "location", G_TYPE_STRING, path,
          NULL));
  return FALSE;
}

#define SAMPLE_ERROR(self, prop, ...) G_STMT_START { \
  gchar *text_ = g_strdup_printf (__VA_ARGS__); \
  GST_ELEMENT_ERROR (self, LIBRARY, SETTINGS, ("%s: %s. Set %s to a " \
          "video/x-raw sample of format RGB, RGBx, RGBA or I420, or unset " \
          "it.", prop, text_, prop), ("%s: %s", prop, text_)); \
  g_free (text_); \
} G_STMT_END

/* Packed RGB (stride width*3) from a mapped frame of RGB, RGBx or RGBA
 * (alpha dropped, as for a file), or of I420 through GstVideoConverter. */
static gboolean
frame_to_rgb (GstVideoFrame * in, guint8 * rgb)
{
  const GstVideoInfo *info = &in->info;
  gint w = GST_VIDEO_INFO_WIDTH (info), h = GST_VIDEO_INFO_HEIGHT (info);
  gsize row = (gsize) w * 3;

  if (GST_VIDEO_INFO_FORMAT (info) == GST_VIDEO_FORMAT_I420) {
    GstVideoInfo out_info;
    GstVideoConverter *conv;
    GstVideoFrame out;
    GstBuffer *buf;

    gst_video_info_set_format (&out_info, GST_VIDEO_FORMAT_RGB, w, h);
    conv = gst_video_converter_new ((GstVideoInfo *) info, &out_info, NULL);
    if (!conv)
      return FALSE;
    buf = gst_buffer_new_allocate (NULL, GST_VIDEO_INFO_SIZE (&out_info),
        NULL);
    if (!buf || !gst_video_frame_map (&out, &out_info, buf, GST_MAP_WRITE)) {
      if (buf)
        gst_buffer_unref (buf);
      gst_video_converter_free (conv);
      return FALSE;
    }
    gst_video_converter_frame (conv, in, &out);
    for (gint y = 0; y < h; y++)
      memcpy (rgb + (gsize) y * row, (const guint8 *)
          GST_VIDEO_FRAME_PLANE_DATA (&out, 0) +
          (gsize) y * GST_VIDEO_FRAME_PLANE_STRIDE (&out, 0), row);
    gst_video_frame_unmap (&out);
    gst_buffer_unref (buf);
    gst_video_converter_free (conv);
    return TRUE;
  }

  {
    gint px = GST_VIDEO_INFO_FORMAT (info) == GST_VIDEO_FORMAT_RGB ? 3 : 4;
    const guint8 *src = GST_VIDEO_FRAME_PLANE_DATA (in, 0);
    gint stride = GST_VIDEO_FRAME_PLANE_STRIDE (in, 0);

    for (gint y = 0; y < h; y++) {
      const guint8 *s = src + (gsize) y * stride;
      guint8 *d = rgb + (gsize) y * row;

      if (px == 3) {
        memcpy (d, s, row);
      } else {
        for (gint x = 0; x < w; x++)
          memcpy (d + 3 * x, s + 4 * x, 3);
      }
    }
  }
  return TRUE;
}

/* A sample keyframe: checked (caps, format, size, buffer) before anything
 * is allocated for it, then copied as packed RGB. */
static gboolean
keyframe_from_sample (GstH3VideoSrc * self, const gchar * prop,
    GstSample * sample, GstH3Keyframe * out)
{
  GstCaps *caps = gst_sample_get_caps (sample);
  GstBuffer *buf = gst_sample_get_buffer (sample);
  const GstStructure *s;
  GstVideoInfo info;
  GstVideoFrame frame;
  GstVideoFormat format;
  gint w = 0, h = 0;
  gsize bytes;
  gboolean ok;

  if (!caps || !gst_caps_is_fixed (caps) || !buf) {
    SAMPLE_ERROR (self, prop, "the sample has %s", !buf ? "no buffer" :
        "no fixed caps");
    return FALSE;
  }
  s = gst_caps_get_structure (caps, 0);
  if (!gst_structure_has_name (s, "video/x-raw")
      || gst_caps_features_contains (gst_caps_get_features (caps, 0),
          GST_CAPS_FEATURE_MEMORY_SYSTEM_MEMORY) == FALSE) {
    gchar *text = gst_caps_to_string (caps);

    SAMPLE_ERROR (self, prop, "the sample's caps are %s, not video/x-raw in "
        "system memory", text);
    g_free (text);
    return FALSE;
  }
  format = gst_video_format_from_string (gst_structure_get_string (s,
          "format") ? gst_structure_get_string (s, "format") : "");
  if (format != GST_VIDEO_FORMAT_RGB && format != GST_VIDEO_FORMAT_RGBx
      && format != GST_VIDEO_FORMAT_RGBA && format != GST_VIDEO_FORMAT_I420) {
    const gchar *name = gst_structure_get_string (s, "format");

    SAMPLE_ERROR (self, prop, "the sample's format %s is not supported",
        name ? name : "(none)");
    return FALSE;
  }
  gst_structure_get_int (s, "width", &w);
  gst_structure_get_int (s, "height", &h);
  if (w < 1 || h < 1) {
    SAMPLE_ERROR (self, prop, "the sample is %dx%d: it has no pixels", w, h);
    return FALSE;
  }
  if (w > H3_MAX_IMAGE_SIDE || h > H3_MAX_IMAGE_SIDE
      || (gint64) w * h > H3_MAX_IMAGE_PIXELS) {
    SAMPLE_ERROR (self, prop, "the sample is %dx%d: at most %d pixels a side "
        "and %" G_GINT64_FORMAT " in all", w, h, H3_MAX_IMAGE_SIDE,
        (gint64) H3_MAX_IMAGE_PIXELS);
    return FALSE;
  }
  if (!gst_video_info_from_caps (&info, caps)) {
    gchar *text = gst_caps_to_string (caps);

    SAMPLE_ERROR (self, prop, "the sample's caps %s are not a complete "
        "video format", text);
    g_free (text);
    return FALSE;
  }
  if (!gst_video_frame_map (&frame, &info, buf, GST_MAP_READ)) {
    SAMPLE_ERROR (self, prop, "the sample's buffer (%" G_GSIZE_FORMAT
        " bytes) does not hold a %dx%d %s frame (%" G_GSIZE_FORMAT " bytes)",
        gst_buffer_get_size (buf), w, h, gst_video_format_to_string (format),
        GST_VIDEO_INFO_SIZE (&info));
    return FALSE;
  }
  bytes = (gsize) w * 3 * (gsize) h;
  out->file.pixels = malloc (bytes + 1);
  ok = out->file.pixels && frame_to_rgb (&frame, out->file.pixels);
  gst_video_frame_unmap (&frame);
  if (!ok) {
    free (out->file.pixels);
    out->file.pixels = NULL;
    GST_ELEMENT_ERROR (self, RESOURCE, FAILED, ("%s: the %dx%d %s sample "
            "could not be converted to RGB (out of memory?).", prop, w, h,
            gst_video_format_to_string (format)), ("%s: conversion failed",
            prop));
    return FALSE;
  }
  out->file.image = (h3_image) {
  w, h, (size_t) w * 3, out->file.pixels};
  return TRUE;
}

/* Decodes the keyframes the settings name into kf[0] (first) and kf[1]
 * (last), posting the error and leaving both empty when one is bad. */
gboolean
gst_h3_keyframes_load (GstH3VideoSrc * self, const GstH3Settings * s,
    GstH3Keyframe kf[2])
{
  const gchar *props[2][2] = {
    {"image-location", "image"}, {"last-image-location", "last-image"}
  };
  const gchar *locations[2] = { s->image_location, s->last_image_location };
  GstSample *samples[2] = { s->image, s->last_image };

  memset (kf, 0, 2 * sizeof *kf);
  for (gint i = 0; i < 2; i++) {
    gboolean ok = TRUE;

    if (locations[i] && *locations[i])
      ok = keyframe_from_file (self, props[i][0], locations[i], &kf[i]);
    else if (samples[i])
      ok = keyframe_from_sample (self, props[i][1], samples[i], &kf[i]);
    else
      continue;
    if (!ok) {
      gst_h3_keyframe_clear (&kf[0]);
      gst_h3_keyframe_clear (&kf[1]);
      return FALSE;
    }
    kf[i].present = TRUE;
    kf[i].digest = keyframe_digest (&kf[i].file.image);
    GST_INFO_OBJECT (self, "%s keyframe: %dx%d from %s (%.16s)",
        i ? "last" : "first", kf[i].file.image.width,
        kf[i].file.image.height, locations[i] && *locations[i] ?
        locations[i] : props[i][1], kf[i].digest);
  }
  return TRUE;
}

/* Points the request at the keyframes (none: T2VA). */
void
gst_h3_keyframes_apply (const GstH3Keyframe kf[2], h3_request * req)
{
  req->first_image = kf && kf[0].present ? &kf[0].file.image : NULL;
  req->last_image = kf && kf[1].present ? &kf[1].file.image : NULL;
}
