/* gsth3videosrc-keyframes.c - the FL2VA keyframes of h3videosrc: the
 * first and last pictures of the clip, from a file (image-location,
 * last-image-location: decoded by media/h3_image_file, GdkPixbuf) or from a
 * GstSample an application holds (image, last-image: video/x-raw RGB,
 * RGBx, RGBA or I420, checked against its memory and turned into packed
 * RGB by gsth3videosrc-sample.c). Both are turned into the RGB pixels an
 * h3_image points at once per run, at READY->PAUSED, so that a bad file or
 * sample fails the state change before any model load, and the run keeps
 * its own copy: the application may change or drop the sample afterwards. Each keyframe's digest (SHA-256 of its size and
 * pixels) goes into the stream ids. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include <gst/video/video.h>

#include "gsth3videosrc-private.h"
#include "gsth3videosrc-sample.h"

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

/* A sample keyframe: checked (caps, format, size, the video meta's planes
 * against the buffer's memory) before anything is allocated for it, then
 * copied as packed RGB (gsth3videosrc-sample.c). */
static gboolean
keyframe_from_sample (GstH3VideoSrc * self, const gchar * prop,
    GstSample * sample, GstH3Keyframe * out)
{
  gchar *msg = NULL;
  GstH3SampleResult r = gst_h3_sample_to_rgb (sample, &out->file, &msg);

  if (r == GST_H3_SAMPLE_REFUSED)
    SAMPLE_ERROR (self, prop, "%s", msg);
  else if (r == GST_H3_SAMPLE_FAILED)
    GST_ELEMENT_ERROR (self, RESOURCE, FAILED, ("%s: %s.", prop, msg),
        ("%s: conversion failed", prop));
  g_free (msg);
  return r == GST_H3_SAMPLE_OK;
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
