/* gsth3videosrc-sample.c - a keyframe GstSample into packed RGB
 * (gsth3videosrc-sample.h). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include "gsth3videosrc-sample.h"

/* Where a plane's pixels lie: rows of row_bytes, the first at offset, each
 * stride bytes after the one before. */
typedef struct
{
  gsize offset;
  gint stride;
  gint rows;
  gsize row_bytes;
} Plane;

/* The rows of plane p of a w x h frame of finfo, as the conversion reads
 * them (the first component of the plane: its subsampled size and pixel
 * stride). */
static void
plane_rows (const GstVideoFormatInfo * finfo, guint p, gint w, gint h,
    Plane * out)
{
  gint comp[GST_VIDEO_MAX_COMPONENTS];

  gst_video_format_info_component (finfo, p, comp);
  out->rows = GST_VIDEO_FORMAT_INFO_SCALE_HEIGHT (finfo, comp[0], h);
  out->row_bytes = (gsize) GST_VIDEO_FORMAT_INFO_SCALE_WIDTH (finfo, comp[0],
      w) * GST_VIDEO_FORMAT_INFO_PSTRIDE (finfo, comp[0]);
}

/* The bytes from a plane's first row to the end of its last one (stride is
 * at least row_bytes here: no overflow in 64 bits for rows <= 16384). */
static guint64
plane_span (const Plane * pl)
{
  return (guint64) (pl->rows - 1) * (guint64) pl->stride + pl->row_bytes;
}

/* The caps: fixed video/x-raw in system memory, one of the four formats,
 * within the keyframe limits, whole frames. Fills info. */
static gchar *
check_caps (GstSample * sample, GstVideoInfo * info)
{
  GstCaps *caps = gst_sample_get_caps (sample);
  const GstStructure *s;
  const gchar *name;
  GstVideoFormat format;
  gint w = 0, h = 0;
  gchar *text, *msg = NULL;

  if (!gst_sample_get_buffer (sample))
    return g_strdup ("the sample has no buffer");
  if (!caps || !gst_caps_is_fixed (caps))
    return g_strdup ("the sample has no fixed caps");
  s = gst_caps_get_structure (caps, 0);
  if (!gst_structure_has_name (s, "video/x-raw")
      || !gst_caps_features_contains (gst_caps_get_features (caps, 0),
          GST_CAPS_FEATURE_MEMORY_SYSTEM_MEMORY)) {
    text = gst_caps_to_string (caps);
    msg = g_strdup_printf ("the sample's caps are %s, not video/x-raw in "
        "system memory", text);
    g_free (text);
    return msg;
  }
  name = gst_structure_get_string (s, "format");
  format = gst_video_format_from_string (name ? name : "");
  if (format != GST_VIDEO_FORMAT_RGB && format != GST_VIDEO_FORMAT_RGBx
      && format != GST_VIDEO_FORMAT_RGBA && format != GST_VIDEO_FORMAT_I420)
    return g_strdup_printf ("the sample's format %s is not supported",
        name ? name : "(none)");
  gst_structure_get_int (s, "width", &w);
  gst_structure_get_int (s, "height", &h);
  if (w < 1 || h < 1)
    return g_strdup_printf ("the sample is %dx%d: it has no pixels", w, h);
  if (w > H3_MAX_IMAGE_SIDE || h > H3_MAX_IMAGE_SIDE
      || (gint64) w * h > H3_MAX_IMAGE_PIXELS)
    return g_strdup_printf ("the sample is %dx%d: at most %d pixels a side "
        "and %" G_GINT64_FORMAT " in all", w, h, H3_MAX_IMAGE_SIDE,
        (gint64) H3_MAX_IMAGE_PIXELS);
  if (!gst_video_info_from_caps (info, caps)) {
    text = gst_caps_to_string (caps);
    msg = g_strdup_printf ("the sample's caps %s are not a complete video "
        "format", text);
  } else if (GST_VIDEO_INFO_INTERLACE_MODE (info) ==
      GST_VIDEO_INTERLACE_MODE_ALTERNATE) {
    /* alternate: a buffer is one field of h/2 rows, not a picture */
    text = gst_caps_to_string (caps);
    msg = g_strdup_printf ("the sample's caps %s hold one field a buffer "
        "(interlace-mode=alternate): a keyframe is a whole frame", text);
  } else {
    return NULL;
  }
  g_free (text);
  return msg;
}

/* The planes the frame will be read from, before it is mapped: the video
 * meta's (its format, size and plane count those of the caps, each stride
 * at least a row, each plane's rows within the buffer), or the caps'
 * layout in a buffer of at least the caps' frame size. */
static gchar *
check_layout (const GstVideoInfo * info, GstBuffer * buf)
{
  const GstVideoFormatInfo *finfo = info->finfo;
  GstVideoMeta *meta = gst_buffer_get_video_meta (buf);
  gint w = GST_VIDEO_INFO_WIDTH (info), h = GST_VIDEO_INFO_HEIGHT (info);
  guint n_planes = GST_VIDEO_INFO_N_PLANES (info);
  gsize size = gst_buffer_get_size (buf);

  if (!meta) {
    if (size < GST_VIDEO_INFO_SIZE (info))
      return g_strdup_printf ("the sample's buffer (%" G_GSIZE_FORMAT
          " bytes) does not hold a %dx%d %s frame (%" G_GSIZE_FORMAT " bytes)",
          size, w, h, GST_VIDEO_INFO_NAME (info), GST_VIDEO_INFO_SIZE (info));
    return NULL;
  }
  if (meta->format != GST_VIDEO_INFO_FORMAT (info) || meta->width != (guint) w
      || meta->height != (guint) h || meta->n_planes != n_planes)
    return g_strdup_printf ("the sample's video meta describes %s %ux%u of "
        "%u plane%s, its caps %s %dx%d of %u plane%s",
        gst_video_format_to_string (meta->format) ?
        gst_video_format_to_string (meta->format) : "an unknown format",
        meta->width, meta->height,
        meta->n_planes, meta->n_planes == 1 ? "" : "s",
        GST_VIDEO_INFO_NAME (info), w, h, n_planes, n_planes == 1 ? "" : "s");
  for (guint p = 0; p < n_planes; p++) {
    Plane pl = { meta->offset[p], meta->stride[p], 0, 0 };
    guint64 end;

    plane_rows (finfo, p, w, h, &pl);
    if (pl.stride < 0 || (gsize) pl.stride < pl.row_bytes)
      return g_strdup_printf ("plane %u of the sample's video meta has a "
          "stride of %d bytes, less than its rows of %" G_GSIZE_FORMAT
          " bytes", p, pl.stride, pl.row_bytes);
    end = (guint64) pl.offset + plane_span (&pl);
    if (pl.offset >= size || end > size)
      return g_strdup_printf ("plane %u of the sample's video meta (offset %"
          G_GSIZE_FORMAT ", stride %d: %d rows of %" G_GSIZE_FORMAT " bytes) "
          "ends at byte %" G_GUINT64_FORMAT ", past the end of the buffer (%"
          G_GSIZE_FORMAT " bytes)", p, pl.offset, pl.stride, pl.rows,
          pl.row_bytes, end, size);
  }
  return NULL;
}

/* Once mapped, each plane's rows lie in the memory mapped for it: a plane
 * of a buffer of several memory blocks is mapped as the one block holding
 * its offset (gst_video_meta_map), which its rows must not run out of. */
static gchar *
check_mapped (const GstVideoFrame * frame)
{
  const GstVideoInfo *info = &frame->info;

  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES (frame); p++) {
    const GstMapInfo *m = &frame->map[frame->meta ? p : 0];
    const guint8 *data = frame->data[p];
    Plane pl = { 0, GST_VIDEO_FRAME_PLANE_STRIDE (frame, p), 0, 0 };

    plane_rows (info->finfo, p, GST_VIDEO_INFO_WIDTH (info),
        GST_VIDEO_INFO_HEIGHT (info), &pl);
    if (data < m->data || (gsize) (data - m->data) > m->size
        || plane_span (&pl) > m->size - (gsize) (data - m->data))
      return g_strdup_printf ("plane %u of the sample (stride %d: %d rows of %"
          G_GSIZE_FORMAT " bytes) runs past the end of the memory block that "
          "holds its start (%" G_GSIZE_FORMAT " bytes)", p, pl.stride,
          pl.rows, pl.row_bytes, m->size);
  }
  return NULL;
}

/* I420 through GstVideoConverter (the caps' colorimetry), from a copy of
 * the frame in the caps' own layout: the copy reads each plane's rows as
 * checked (gst_video_frame_copy: a row's bytes, the plane's rows), and the
 * converter then reads only memory the element allocated, laid out as the
 * info it was made for. */
static gboolean
i420_to_rgb (GstVideoFrame * in, const GstVideoInfo * info, guint8 * rgb)
{
  gint w = GST_VIDEO_INFO_WIDTH (info), h = GST_VIDEO_INFO_HEIGHT (info);
  gsize row = (gsize) w * 3;
  GstVideoInfo out_info;
  GstVideoConverter *conv;
  GstVideoFrame own, out;
  GstBuffer *own_buf, *out_buf;
  gboolean ok = FALSE;

  gst_video_info_set_format (&out_info, GST_VIDEO_FORMAT_RGB, w, h);
  own_buf = gst_buffer_new_allocate (NULL, GST_VIDEO_INFO_SIZE (info), NULL);
  out_buf = gst_buffer_new_allocate (NULL, GST_VIDEO_INFO_SIZE (&out_info),
      NULL);
  conv = gst_video_converter_new ((GstVideoInfo *) info, &out_info, NULL);
  if (own_buf && out_buf && conv
      && gst_video_frame_map (&own, info, own_buf, GST_MAP_READWRITE)) {
    if (gst_video_frame_map (&out, &out_info, out_buf, GST_MAP_WRITE)) {
      ok = gst_video_frame_copy (&own, in);
      if (ok) {
        gst_video_converter_frame (conv, &own, &out);
        for (gint y = 0; y < h; y++)
          memcpy (rgb + (gsize) y * row, (const guint8 *)
              GST_VIDEO_FRAME_PLANE_DATA (&out, 0) +
              (gsize) y * GST_VIDEO_FRAME_PLANE_STRIDE (&out, 0), row);
      }
      gst_video_frame_unmap (&out);
    }
    gst_video_frame_unmap (&own);
  }
  if (conv)
    gst_video_converter_free (conv);
  if (own_buf)
    gst_buffer_unref (own_buf);
  if (out_buf)
    gst_buffer_unref (out_buf);
  return ok;
}

/* Packed RGB (stride width*3) from a checked frame of RGB, RGBx or RGBA
 * (alpha dropped, as for a file), or of I420 (i420_to_rgb; info: the
 * caps'). */
static gboolean
frame_to_rgb (GstVideoFrame * in, const GstVideoInfo * caps_info,
    guint8 * rgb)
{
  const GstVideoInfo *info = &in->info;
  gint w = GST_VIDEO_INFO_WIDTH (info), h = GST_VIDEO_INFO_HEIGHT (info);
  gsize row = (gsize) w * 3;

  if (GST_VIDEO_INFO_FORMAT (info) == GST_VIDEO_FORMAT_I420)
    return i420_to_rgb (in, caps_info, rgb);

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

GstH3SampleResult
gst_h3_sample_to_rgb (GstSample * sample, h3_image_file * out,
    gchar ** message)
{
  GstVideoInfo info;
  GstVideoFrame frame;
  GstBuffer *buf;
  gint w, h;
  gboolean ok;

  memset (out, 0, sizeof *out);
  *message = check_caps (sample, &info);
  if (*message)
    return GST_H3_SAMPLE_REFUSED;
  buf = gst_sample_get_buffer (sample);
  *message = check_layout (&info, buf);
  if (*message)
    return GST_H3_SAMPLE_REFUSED;
  if (!gst_video_frame_map (&frame, &info, buf, GST_MAP_READ)) {
    *message = g_strdup_printf ("the sample's buffer (%" G_GSIZE_FORMAT
        " bytes) cannot be mapped for reading", gst_buffer_get_size (buf));
    return GST_H3_SAMPLE_REFUSED;
  }
  *message = check_mapped (&frame);
  if (*message) {
    gst_video_frame_unmap (&frame);
    return GST_H3_SAMPLE_REFUSED;
  }
  w = GST_VIDEO_INFO_WIDTH (&info);
  h = GST_VIDEO_INFO_HEIGHT (&info);
  out->pixels = malloc ((gsize) w * 3 * (gsize) h + 1);
  ok = out->pixels && frame_to_rgb (&frame, &info, out->pixels);
  gst_video_frame_unmap (&frame);
  if (!ok) {
    h3_image_file_clear (out);
    *message = g_strdup_printf ("the %dx%d %s sample could not be converted "
        "to RGB (out of memory?)", w, h, GST_VIDEO_INFO_NAME (&info));
    return GST_H3_SAMPLE_FAILED;
  }
  out->image = (h3_image) {
  w, h, (size_t) w * 3, out->pixels};
  return GST_H3_SAMPLE_OK;
}
