/* test_h3videosrc_fl2va.c - h3videosrc with FL2VA keyframes, on the
 * official tiny model (tests/data/models/tiny-h3) and the golden's keyframe
 * (goldens/tiny-h3/e2e_fl2va_keyframe.png), with the golden's prompt, seed,
 * size and forwards (read from e2e_fl2va_3steps.json).
 *
 *  - image-location: the element's frames against the official golden
 *    (uint8 within 1, audio rel-L2 <= 1e-4), and bit for bit what
 *    h3_engine_generate gives for the same request (h3-generate's path:
 *    media/h3_image_file, then the engine);
 *  - image as a GstSample: RGB (with a padded stride) and RGBA give exactly
 *    the file's clip and the file's stream ids (the ids hash the pixels);
 *    I420 runs to the end;
 *  - last-image-location, and a first sample with a last file: the engine's
 *    clip bit for bit; T2VA, first, last and first+last have distinct ids;
 *  - bad keyframes (missing, corrupt, a PNG and a JPEG cut short (the
 *    message says "truncated"), empty, a FIFO, a directory,
 *    a 20000x20000 or 0x0 header; a 0x0, NV12, GRAY8, caps-less, unfixed,
 *    non-video, oversized or short sample): the state change to PAUSED
 *    fails with a message naming the file or the property, nothing is
 *    loaded or pushed, and the same element then runs with a good one;
 *  - hostile GstVideoMeta planes (a stride or offset past the buffer, a
 *    stride shorter than a row or negative, a meta not the caps' size,
 *    format or plane count, rows running out of their memory block): the
 *    same refusal, with the numbers; fitting layouts are taken;
 *  - the rules: the last set of a file and a sample wins, a change in
 *    PLAYING is ignored with a warning, the h3: URI carries the locations,
 *    `capabilities` lists the modes.
 *
 * Everything runs on the CPU (compute=cpu). H3_TEST_DATA comes from meson. */
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <gst/video/video.h>
#include <gdk-pixbuf/gdk-pixbuf.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h3.h"
#include "h3_image_file.h"
#include "base/h3_safetensors.h"
#include "h3_test_capture.h"
#include "h3_test_golden.h"
#include "h3_gst_test.h"

#define GOLDEN "e2e_fl2va_3steps"
#define KEYFRAME "goldens/tiny-h3/e2e_fl2va_keyframe.png"

static gchar *
data_path (const gchar * rel)
{
  const gchar *root = g_getenv ("H3_TEST_DATA");

  return g_build_filename (root ? root : "tests/data", rel, NULL);
}

/* The golden's keyframe, decoded as h3-generate decodes it. */
static h3_image_file
keyframe_pixels (void)
{
  gchar *path = data_path (KEYFRAME);
  h3_image_file f;
  h3_status st = { 0 };

  fail_unless (h3_image_file_load (path, &f, &st) == H3_OK, "%s", st.message);
  g_free (path);
  return f;
}

/* ---- samples ------------------------------------------------------------- */

/* A sample of the picture in format (RGB with row padding, RGBx, RGBA with
 * a varying alpha, or I420 through GstVideoConverter). */
static GstSample *
make_sample (const h3_image * im, GstVideoFormat format)
{
  gint w = im->width, h = im->height;
  GstVideoInfo info;
  GstBuffer *buf;
  GstCaps *caps;
  GstSample *sample;

  if (format == GST_VIDEO_FORMAT_I420) {
    GstSample *rgb = make_sample (im, GST_VIDEO_FORMAT_RGB);
    GstVideoInfo in_info;
    GstVideoFrame in, out;
    GstVideoConverter *conv;

    fail_unless (gst_video_info_from_caps (&in_info, gst_sample_get_caps (rgb)));
    gst_video_info_set_format (&info, GST_VIDEO_FORMAT_I420, w, h);
    buf = gst_buffer_new_allocate (NULL, GST_VIDEO_INFO_SIZE (&info), NULL);
    fail_unless (gst_video_frame_map (&in, &in_info, gst_sample_get_buffer (rgb),
            GST_MAP_READ));
    fail_unless (gst_video_frame_map (&out, &info, buf, GST_MAP_WRITE));
    conv = gst_video_converter_new (&in_info, &info, NULL);
    gst_video_converter_frame (conv, &in, &out);
    gst_video_converter_free (conv);
    gst_video_frame_unmap (&out);
    gst_video_frame_unmap (&in);
    gst_sample_unref (rgb);
  } else {
    gint px = format == GST_VIDEO_FORMAT_RGB ? 3 : 4;
    /* RGB: 8 bytes of padding per row, described by a video meta. */
    gsize stride = (gsize) w * px + (px == 3 ? 8 : 0);
    gsize offset[GST_VIDEO_MAX_PLANES] = { 0 };
    gint strides[GST_VIDEO_MAX_PLANES] = { (gint) stride };
    GstMapInfo map;

    gst_video_info_set_format (&info, format, w, h);
    buf = gst_buffer_new_allocate (NULL, stride * h, NULL);
    fail_unless (gst_buffer_map (buf, &map, GST_MAP_WRITE));
    memset (map.data, 0xee, map.size);
    for (gint y = 0; y < h; y++)
      for (gint x = 0; x < w; x++) {
        memcpy (map.data + y * stride + x * px, im->rgb + y * im->stride +
            x * 3, 3);
        if (px == 4)
          map.data[y * stride + x * px + 3] = (guint8) (x * 7 + y);
      }
    gst_buffer_unmap (buf, &map);
    if (px == 3)
      gst_buffer_add_video_meta_full (buf, GST_VIDEO_FRAME_FLAG_NONE, format,
          w, h, 1, offset, strides);
  }
  caps = gst_video_info_to_caps (&info);
  sample = gst_sample_new (buf, caps, NULL, NULL);
  gst_caps_unref (caps);
  gst_buffer_unref (buf);
  return sample;
}

/* A sample of raw caps text and a buffer of n bytes (bad inputs). */
static GstSample *
raw_sample (const gchar * caps_text, gsize n)
{
  GstCaps *caps = caps_text ? gst_caps_from_string (caps_text) : NULL;
  GstBuffer *buf = gst_buffer_new_allocate (NULL, n, NULL);
  GstSample *s;

  gst_buffer_memset (buf, 0, 0x80, n);
  s = gst_sample_new (buf, caps, NULL, NULL);
  if (caps)
    gst_caps_unref (caps);
  gst_buffer_unref (buf);
  return s;
}

static guint32
crc32_of (const guint8 * p, gsize n)
{
  guint32 c = 0xffffffffu;

  for (gsize i = 0; i < n; i++) {
    c ^= p[i];
    for (gint k = 0; k < 8; k++)
      c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
  }
  return c ^ 0xffffffffu;
}

static void
put32 (guint8 * p, guint32 v)
{
  p[0] = v >> 24, p[1] = v >> 16, p[2] = v >> 8, p[3] = v;
}

/* A PNG file whose IHDR claims w x h (8-bit RGB), then an empty IDAT and
 * IEND: the decoder refuses the size from the header. */
static void
write_png_header (const gchar * path, guint32 w, guint32 h)
{
  static const guint8 sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
  guint8 b[80], *c = b + 8, *d = c + 25, *e = d + 12;

  memcpy (b, sig, 8);
  put32 (c, 13);
  memcpy (c + 4, "IHDR", 4);
  put32 (c + 8, w);
  put32 (c + 12, h);
  c[16] = 8, c[17] = 2, c[18] = 0, c[19] = 0, c[20] = 0;
  put32 (c + 21, crc32_of (c + 4, 17));
  put32 (d, 0);
  memcpy (d + 4, "IDAT", 4);
  put32 (d + 8, crc32_of (d + 4, 4));
  put32 (e, 0);
  memcpy (e + 4, "IEND", 4);
  put32 (e + 8, crc32_of (e + 4, 4));
  fail_unless (g_file_set_contents (path, (const gchar *) b, e + 12 - b,
          NULL));
}

/* The picture upside down: another keyframe of the same size. */
static h3_image_file
flipped (const h3_image_file * f)
{
  h3_image_file out = { 0 };
  gsize row = (gsize) f->image.width * 3;

  out.pixels = malloc (row * f->image.height + 1);
  for (gint y = 0; y < f->image.height; y++)
    memcpy (out.pixels + y * row, f->image.rgb + (f->image.height - 1 -
            y) * f->image.stride, row);
  out.image = (h3_image) {
  f->image.width, f->image.height, row, out.pixels};
  return out;
}

/* ---- the element --------------------------------------------------------- */

typedef struct
{
  GByteArray *video;
  GArray *audio;                /* interleaved stereo floats */
  gchar *stream_id;             /* of the video pad */
} Clip;

static void
clip_clear (Clip * c)
{
  g_byte_array_unref (c->video);
  g_array_unref (c->audio);
  g_free (c->stream_id);
}

static GstElement *
new_element (GstHarness ** hv, GstHarness ** ha, GstBus ** bus)
{
  gchar *model = data_path ("models/tiny-h3");
  h3_request golden = h3_test_golden_request (GOLDEN);
  GstElement *e;

  e = h3_gst_harnesses_new (hv, ha, bus);
  g_object_set (e, "prompt", golden.prompt, "seed", (guint64) golden.seed,
      "width", golden.width, "height", golden.height, "num-frames",
      golden.num_frames, "steps", golden.steps, "model-location", model, NULL);
  gst_util_set_object_arg (G_OBJECT (e), "compute", "cpu");
  g_free (model);
  return e;
}

/* Pulls every buffer up to EOS into bytes; the stream id of the
 * stream-start into *id when id is not NULL. */
static void
pull_all (GstHarness * h, GByteArray * bytes, gchar ** id)
{
  GstBuffer *buf;
  GstEvent *ev;

  for (;;) {
    ev = gst_harness_pull_event (h);
    fail_unless (ev != NULL, "no EOS within the harness timeout");
    if (GST_EVENT_TYPE (ev) == GST_EVENT_STREAM_START && id) {
      const gchar *sid;
      gst_event_parse_stream_start (ev, &sid);
      *id = g_strdup (sid);
    }
    if (GST_EVENT_TYPE (ev) == GST_EVENT_EOS) {
      gst_event_unref (ev);
      break;
    }
    gst_event_unref (ev);
  }
  while ((buf = gst_harness_try_pull (h))) {
    GstMapInfo map;
    fail_unless (gst_buffer_map (buf, &map, GST_MAP_READ));
    g_byte_array_append (bytes, map.data, map.size);
    gst_buffer_unmap (buf, &map);
    gst_buffer_unref (buf);
  }
}

/* Fails on an error message of the run. */
static void
expect_no_error (GstBus * bus)
{
  GstMessage *m;

  while ((m = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR))) {
    GError *err;
    gchar *dbg;
    gst_message_parse_error (m, &err, &dbg);
    fail ("unexpected error: %s (%s)", err->message, dbg);
  }
}

/* One clip with the keyframe properties: name/value pairs (G_TYPE_STRING
 * locations or GstSample pointers), NULL-terminated. */
static void
run_element (Clip * c, const gchar * first_prop, ...)
{
  GstHarness *hv, *ha;
  GstBus *bus;
  GByteArray *audio = g_byte_array_new ();
  GstElement *e = new_element (&hv, &ha, &bus);
  va_list args;

  va_start (args, first_prop);
  g_object_set_valist (G_OBJECT (e), first_prop, args);
  va_end (args);
  gst_harness_play (hv);
  c->video = g_byte_array_new ();
  c->stream_id = NULL;
  pull_all (hv, c->video, &c->stream_id);
  pull_all (ha, audio, NULL);
  expect_no_error (bus);
  h3_gst_harnesses_free (hv, ha, bus);
  c->audio = g_array_sized_new (FALSE, FALSE, sizeof (gfloat),
      audio->len / sizeof (gfloat));
  g_array_append_vals (c->audio, audio->data, audio->len / sizeof (gfloat));
  g_byte_array_unref (audio);
  fail_unless (c->stream_id != NULL, "no stream-start on the video pad");
}

/* What h3_engine_generate gives for the golden's request with these
 * keyframes (h3-generate --image/--last-image). */
static void
run_engine (const h3_image * first, const h3_image * last,
    h3_test_capture * cap)
{
  gchar *model = data_path ("models/tiny-h3");
  h3_engine_options o = h3_engine_options_default ();
  h3_request r = h3_test_golden_request (GOLDEN);
  h3_engine *e = NULL;
  h3_status st = { 0 };

  o.model_dir = model;
  o.compute = H3_COMPUTE_CPU;
  fail_unless (h3_engine_open (&o, &e, &st) == H3_OK, "%s", st.message);
  r.first_image = first;
  r.last_image = last;
  memset (cap, 0, sizeof *cap);
  fail_unless (h3_test_generate (e, &r, cap, NULL, &st) == H3_OK, "%s",
      st.message);
  h3_engine_close (e);
  g_free (model);
}

/* The element's clip is the engine's, bit for bit (the audio cut to the
 * clip's length). */
static void
expect_engine_clip (const Clip * c, const h3_test_capture * cap,
    const gchar * what)
{
  fail_unless_equals_int64 ((gint64) c->video->len,
      (gint64) cap->plan.num_frames * cap->plan.width * cap->plan.height * 3);
  fail_unless (memcmp (c->video->data, cap->video, c->video->len) == 0,
      "%s: the element's frames are not the engine's", what);
  fail_unless (c->audio->len > 0 && c->audio->len / 2 <= (guint) cap->samples);
  fail_unless (memcmp (c->audio->data, cap->audio,
          c->audio->len * sizeof (gfloat)) == 0,
      "%s: the element's samples are not the engine's", what);
}

/* ---- tests --------------------------------------------------------------- */

GST_START_TEST (test_image_location_matches_golden)
{
  gchar *png = data_path (KEYFRAME);
  gchar *path = data_path ("goldens/tiny-h3/" GOLDEN ".safetensors");
  h3_st_file *g = NULL;
  h3_status st = { 0 };
  const h3_st_tensor *u8, *audio;
  h3_image_file kf = keyframe_pixels ();
  h3_test_capture cap;
  Clip c;
  gint maxd = 0;
  gint64 frames, n_ref;
  gdouble num = 0, den = 0;

  run_element (&c, "image-location", png, NULL);

  fail_unless (h3_st_open (path, &g, &st) == H3_OK, "%s", st.message);
  u8 = h3_st_find (g, "videos_uint8");
  audio = h3_st_find (g, "audio");
  fail_unless (u8 && u8->dtype == H3_ST_U8 && audio
      && audio->dtype == H3_ST_F32);
  fail_unless_equals_int64 ((gint64) c.video->len, u8->numel);
  for (guint i = 0; i < c.video->len; i++)
    maxd = MAX (maxd, ABS ((gint) c.video->data[i] -
            (gint) ((const guint8 *) u8->data)[i]));
  n_ref = audio->shape[2];
  frames = c.audio->len / 2;
  fail_unless (frames > 0 && frames <= n_ref && frames + 40 >= n_ref);
  for (gint64 i = 0; i < frames; i++)
    for (gint ch = 0; ch < 2; ch++) {
      gdouble r = ((const gfloat *) audio->data)[ch * n_ref + i];
      gdouble d = g_array_index (c.audio, gfloat, 2 * i + ch) - r;
      num += d * d;
      den += r * r;
    }
  g_print ("image-location vs the golden: uint8 max |diff| %d, audio rel L2 "
      "%.3e\n", maxd, sqrt (num / den));
  fail_unless (maxd <= 1, "frames differ from the golden by up to %d", maxd);
  fail_unless (den > 0 && sqrt (num / den) <= 1e-4, "audio rel L2 %.3e",
      sqrt (num / den));

  /* h3-generate --image's path: the same decoder, then the engine. */
  run_engine (&kf.image, NULL, &cap);
  expect_engine_clip (&c, &cap, "image-location");
  fail_unless (g_str_has_prefix (c.stream_id, "h3videosrc/"));

  h3_test_capture_free (&cap);
  clip_clear (&c);
  h3_st_close (g);
  h3_image_file_clear (&kf);
  g_free (path);
  g_free (png);
}

GST_END_TEST;

GST_START_TEST (test_image_sample)
{
  gchar *png = data_path (KEYFRAME);
  h3_image_file kf = keyframe_pixels ();
  GstSample *rgb = make_sample (&kf.image, GST_VIDEO_FORMAT_RGB);
  GstSample *rgba = make_sample (&kf.image, GST_VIDEO_FORMAT_RGBA);
  GstSample *i420 = make_sample (&kf.image, GST_VIDEO_FORMAT_I420);
  h3_test_capture cap;
  Clip file, c_rgb, c_rgba, c_i420;

  run_engine (&kf.image, NULL, &cap);
  run_element (&file, "image-location", png, NULL);
  run_element (&c_rgb, "image", rgb, NULL);
  run_element (&c_rgba, "image", rgba, NULL);
  expect_engine_clip (&c_rgb, &cap, "image (RGB sample)");
  expect_engine_clip (&c_rgba, &cap, "image (RGBA sample)");
  /* The ids hash the pixels, not where they came from. */
  fail_unless_equals_string (c_rgb.stream_id, file.stream_id);
  fail_unless_equals_string (c_rgba.stream_id, file.stream_id);

  /* I420 loses chroma: not the same picture, but a whole clip. */
  run_element (&c_i420, "image", i420, NULL);
  fail_unless_equals_int (c_i420.video->len, c_rgb.video->len);
  fail_unless_equals_int (c_i420.audio->len, c_rgb.audio->len);
  fail_if (g_strcmp0 (c_i420.stream_id, c_rgb.stream_id) == 0);

  clip_clear (&file);
  clip_clear (&c_rgb);
  clip_clear (&c_rgba);
  clip_clear (&c_i420);
  h3_test_capture_free (&cap);
  gst_sample_unref (rgb);
  gst_sample_unref (rgba);
  gst_sample_unref (i420);
  h3_image_file_clear (&kf);
  g_free (png);
}

GST_END_TEST;

GST_START_TEST (test_last_image)
{
  gchar *png = data_path (KEYFRAME);
  h3_image_file kf = keyframe_pixels ();
  h3_image_file other = flipped (&kf);
  GstSample *first = make_sample (&other.image, GST_VIDEO_FORMAT_RGB);
  h3_test_capture cap;
  Clip last, both, only_first, t2va;

  run_engine (NULL, &kf.image, &cap);
  run_element (&last, "last-image-location", png, NULL);
  expect_engine_clip (&last, &cap, "last-image-location");
  h3_test_capture_free (&cap);

  run_engine (&other.image, &kf.image, &cap);
  run_element (&both, "image", first, "last-image-location", png, NULL);
  expect_engine_clip (&both, &cap, "image + last-image-location");
  h3_test_capture_free (&cap);

  /* T2VA, first, last, first+last: four clips, four ids. */
  run_element (&only_first, "image", first, NULL);
  run_element (&t2va, "prompt", h3_test_golden_request (GOLDEN).prompt, NULL);
  fail_if (memcmp (t2va.video->data, last.video->data, last.video->len) == 0);
  fail_if (g_strcmp0 (t2va.stream_id, last.stream_id) == 0);
  fail_if (g_strcmp0 (t2va.stream_id, only_first.stream_id) == 0);
  fail_if (g_strcmp0 (t2va.stream_id, both.stream_id) == 0);
  fail_if (g_strcmp0 (last.stream_id, only_first.stream_id) == 0);
  fail_if (g_strcmp0 (last.stream_id, both.stream_id) == 0);
  fail_if (g_strcmp0 (only_first.stream_id, both.stream_id) == 0);

  clip_clear (&last);
  clip_clear (&both);
  clip_clear (&only_first);
  clip_clear (&t2va);
  gst_sample_unref (first);
  h3_image_file_clear (&other);
  h3_image_file_clear (&kf);
  g_free (png);
}

GST_END_TEST;

typedef struct
{
  const gchar *prop;
  const gchar *location;        /* a file under the temporary directory, or NULL */
  const gchar *caps;            /* a sample of these caps (NULL: no caps) */
  gsize bytes;                  /* its buffer */
  GQuark domain;
  gint code;
  const gchar *says[2];         /* what the message must contain */
} BadCase;

/* The state change to PAUSED fails with the error, before anything loads
 * (no progress message) or is pushed; the same element then starts with a
 * good keyframe. */
static void
expect_refused (const BadCase * b, const gchar * dir)
{
  GstHarness *hv, *ha;
  GstBus *bus;
  GstMessage *m;
  GError *err = NULL;
  gchar *dbg = NULL, *path = NULL, *png = data_path (KEYFRAME);
  GstElement *e = new_element (&hv, &ha, &bus);
  guint progress = 0;
  GstSample *sample = NULL;

  if (b->location) {
    path = g_build_filename (dir, b->location, NULL);
    g_object_set (e, b->prop, path, NULL);
  } else {
    sample = raw_sample (b->caps, b->bytes);
    g_object_set (e, b->prop, sample, NULL);
    gst_sample_unref (sample);
  }
  fail_unless_equals_int (gst_element_set_state (e, GST_STATE_PAUSED),
      GST_STATE_CHANGE_FAILURE);
  m = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  fail_unless (m != NULL, "%s %s: no error", b->prop, b->location ?
      b->location : b->caps);
  gst_message_parse_error (m, &err, &dbg);
  g_print ("%s %s: %s\n", b->prop, b->location ? b->location :
      (b->caps ? b->caps : "(no caps)"), err->message);
  fail_unless (err->domain == b->domain && err->code == b->code,
      "%s: %s %d '%s'", b->prop, g_quark_to_string (err->domain), err->code,
      err->message);
  for (gint i = 0; i < 2; i++)
    fail_unless (!b->says[i] || strstr (err->message, b->says[i]),
        "'%s' does not say '%s'", err->message, b->says[i]);
  fail_unless (strstr (err->message, b->prop) != NULL, "'%s' does not name "
      "%s", err->message, b->prop);
  fail_unless (gst_harness_try_pull (hv) == NULL, "a frame after the error");
  while ((m = (gst_message_unref (m), gst_bus_pop_filtered (bus,
                  GST_MESSAGE_PROGRESS))))
    progress++;
  fail_unless_equals_int (progress, 0);
  g_error_free (err);
  g_free (dbg);

  /* Nothing half-done: the element starts with a good keyframe. */
  gst_element_set_state (e, GST_STATE_NULL);
  g_object_set (e, g_str_has_prefix (b->prop, "last") ?
      "last-image-location" : "image-location", png, NULL);
  fail_unless (gst_element_set_state (e, GST_STATE_PAUSED) !=
      GST_STATE_CHANGE_FAILURE);
  gst_buffer_unref (gst_harness_pull (hv));
  gst_element_set_state (e, GST_STATE_NULL);
  h3_gst_harnesses_free (hv, ha, bus);
  g_free (path);
  g_free (png);
}

GST_START_TEST (test_bad_keyframes)
{
  gchar *dir = g_dir_make_tmp ("h3-fl2va-XXXXXX", NULL);
  gchar *png = data_path (KEYFRAME), *bytes, *p;
  gsize n;
  const GQuark R = GST_RESOURCE_ERROR, L = GST_LIBRARY_ERROR;
  const BadCase cases[] = {
    {"image-location", "missing.png", NULL, 0, R, GST_RESOURCE_ERROR_NOT_FOUND,
        {"missing.png", "No such file"}},
    {"image-location", "notes.png", NULL, 0, R, GST_RESOURCE_ERROR_OPEN_READ,
        {"notes.png", "cannot be decoded"}},
    {"last-image-location", "truncated.png", NULL, 0, R,
        GST_RESOURCE_ERROR_OPEN_READ, {"truncated.png", "a truncated PNG"}},
    /* the keyframe as a JPEG cut in its scan: a half-grey picture before */
    {"image-location", "cut.jpg", NULL, 0, R, GST_RESOURCE_ERROR_OPEN_READ,
        {"cut.jpg", "a truncated JPEG"}},
    {"image-location", "empty.png", NULL, 0, R, GST_RESOURCE_ERROR_OPEN_READ,
        {"empty.png", "empty"}},
    {"last-image-location", "fifo.png", NULL, 0, R,
        GST_RESOURCE_ERROR_OPEN_READ, {"fifo.png", "not a regular file"}},
    {"image-location", "folder", NULL, 0, R, GST_RESOURCE_ERROR_OPEN_READ,
        {"folder", "not a regular file"}},
    {"image-location", "huge.png", NULL, 0, R, GST_RESOURCE_ERROR_OPEN_READ,
        {"20000x20000", "16384"}},
    {"last-image-location", "zero.png", NULL, 0, R,
        GST_RESOURCE_ERROR_OPEN_READ, {"zero.png", NULL}},
    /* the fuzzer's BMP head: GdkPixbuf's loader asked for 3.2 GB */
    {"image-location", "first.bmp", NULL, 0, R, GST_RESOURCE_ERROR_OPEN_READ,
        {"first.bmp", "a BMP file"}},
    {"image", NULL, "video/x-raw,format=RGB,width=0,height=0,framerate=0/1",
        16, L, GST_LIBRARY_ERROR_SETTINGS, {"0x0", "no pixels"}},
    {"image", NULL, "video/x-raw,format=NV12,width=64,height=32", 64 * 48,
        L, GST_LIBRARY_ERROR_SETTINGS, {"NV12", "RGB, RGBx, RGBA or I420"}},
    {"last-image", NULL, "video/x-raw,format=GRAY8,width=64,height=32",
          64 * 32, L, GST_LIBRARY_ERROR_SETTINGS, {"GRAY8", "not supported"}},
    {"image", NULL, "video/x-raw,format=RGB,width=64,height=32", 100, L,
        GST_LIBRARY_ERROR_SETTINGS, {"100 bytes", "64x32"}},
    {"image", NULL, NULL, 100, L, GST_LIBRARY_ERROR_SETTINGS, {"no fixed caps",
            NULL}},
    {"image", NULL, "video/x-raw,format=RGB,width=[1,100],height=32", 100, L,
        GST_LIBRARY_ERROR_SETTINGS, {"no fixed caps", NULL}},
    {"last-image", NULL, "audio/x-raw,format=F32LE,rate=8000,channels=1", 100,
        L, GST_LIBRARY_ERROR_SETTINGS, {"not video/x-raw", NULL}},
    {"image", NULL, "video/x-raw,format=RGB,width=20000,height=8", 20000 * 24,
        L, GST_LIBRARY_ERROR_SETTINGS, {"20000x8", "at most"}},
  };

  fail_unless (dir != NULL);
  fail_unless (g_file_get_contents (png, &bytes, &n, NULL));
  p = g_build_filename (dir, "truncated.png", NULL);
  fail_unless (g_file_set_contents (p, bytes, n / 2, NULL));
  g_free (p);
  {
    GdkPixbuf *pb = gdk_pixbuf_new_from_file (png, NULL);
    gchar *jpeg = NULL;
    gsize jn = 0;

    fail_unless (pb && gdk_pixbuf_save_to_buffer (pb, &jpeg, &jn, "jpeg",
            NULL, NULL));
    p = g_build_filename (dir, "cut.jpg", NULL);
    fail_unless (g_file_set_contents (p, jpeg, jn - jn / 4, NULL));
    g_free (p);
    g_free (jpeg);
    g_object_unref (pb);
  }
  p = g_build_filename (dir, "notes.png", NULL);
  fail_unless (g_file_set_contents (p, "not an image\n", -1, NULL));
  g_free (p);
  p = g_build_filename (dir, "empty.png", NULL);
  fail_unless (g_file_set_contents (p, "", 0, NULL));
  g_free (p);
  p = g_build_filename (dir, "fifo.png", NULL);
  fail_unless (mkfifo (p, 0600) == 0);
  g_free (p);
  p = g_build_filename (dir, "folder", NULL);
  fail_unless (g_mkdir (p, 0700) == 0);
  g_free (p);
  p = g_build_filename (dir, "huge.png", NULL);
  write_png_header (p, 20000, 20000);
  g_free (p);
  p = g_build_filename (dir, "zero.png", NULL);
  write_png_header (p, 0, 0);
  g_free (p);
  p = g_build_filename (dir, "first.bmp", NULL);
  fail_unless (g_file_set_contents (p, "BM\x01\xbe\xbe\0\0\0\0\xbe\xbe\xbe\xbe"
          "\xbe\xbe\xbe\xbe\xbe", 18, NULL));
  g_free (p);

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    expect_refused (&cases[i], dir);

  for (const gchar * const *f = (const gchar *[]) {
  "truncated.png", "cut.jpg", "notes.png", "empty.png", "fifo.png", "folder",
        "huge.png", "zero.png", "first.bmp", NULL}; *f;
      f++) {
    p = g_build_filename (dir, *f, NULL);
    g_remove (p);
    g_free (p);
  }
  g_rmdir (dir);
  g_free (bytes);
  g_free (png);
  g_free (dir);
}

GST_END_TEST;

/* ---- hostile video metas ------------------------------------------------- */

typedef struct
{
  const gchar *caps;
  gsize memories[3];            /* the buffer's memory blocks (bytes; 0 ends) */
  GstVideoFormat meta_format;   /* GST_VIDEO_FORMAT_UNKNOWN: no meta */
  guint width, height, n_planes;
  gsize offset[GST_VIDEO_MAX_PLANES];
  gint stride[GST_VIDEO_MAX_PLANES];
  const gchar *says[2];         /* NULL says[0]: accepted */
} MetaCase;

#define RGB64 "video/x-raw,format=RGB,width=64,height=32,framerate=0/1"
#define I420_64 "video/x-raw,format=I420,width=64,height=32,framerate=0/1"

/* A sample of the case's caps, memory blocks (0x80 bytes) and video meta. */
static GstSample *
meta_sample (const MetaCase * c)
{
  GstCaps *caps = gst_caps_from_string (c->caps);
  GstBuffer *buf = gst_buffer_new ();
  GstSample *s;

  for (gint i = 0; i < 3 && c->memories[i]; i++) {
    GstMemory *m = gst_allocator_alloc (NULL, c->memories[i], NULL);
    GstMapInfo map;

    fail_unless (gst_memory_map (m, &map, GST_MAP_WRITE));
    memset (map.data, 0x80, map.size);
    gst_memory_unmap (m, &map);
    gst_buffer_append_memory (buf, m);
  }
  if (c->meta_format != GST_VIDEO_FORMAT_UNKNOWN)
    gst_buffer_add_video_meta_full (buf, GST_VIDEO_FRAME_FLAG_NONE,
        c->meta_format, c->width, c->height, c->n_planes, (gsize *) c->offset,
        (gint *) c->stride);
  s = gst_sample_new (buf, caps, NULL, NULL);
  gst_caps_unref (caps);
  gst_buffer_unref (buf);
  return s;
}

/* A GstVideoMeta whose planes do not fit its buffer is refused with the
 * numbers, as the property's error, before a byte of it is read: stride
 * 100,000 used to make other heap memory the keyframe, 10^8 a SIGSEGV, a
 * meta wider than the caps a heap overflow of the element's copy, a plane
 * running out of its memory block a read past it (the ASan build of this
 * test reports any of these). Layouts that fit, one memory block per plane
 * included, are taken. */
GST_START_TEST (test_hostile_sample_meta)
{
  const GstVideoFormat RGB = GST_VIDEO_FORMAT_RGB, I420 =
      GST_VIDEO_FORMAT_I420;
  const MetaCase cases[] = {
    {RGB64, {6144}, RGB, 64, 32, 1, {0}, {100000}, {"stride 100000",
            "buffer (6144 bytes)"}},
    {RGB64, {6144}, RGB, 64, 32, 1, {0}, {100000000}, {"stride 100000000",
            "past the end of the buffer"}},
    {RGB64, {6144}, RGB, 64, 32, 1, {6000}, {192}, {"offset 6000",
            "past the end of the buffer"}},
    {RGB64, {6144}, RGB, 64, 32, 1, {1000000}, {192}, {"offset 1000000",
            NULL}},
    {RGB64, {6144}, RGB, 64, 32, 1, {0}, {100}, {"stride of 100 bytes",
            "rows of 192 bytes"}},
    {RGB64, {6144}, RGB, 64, 32, 1, {0}, {-192}, {"stride of -192", NULL}},
    {RGB64, {12288}, RGB, 128, 32, 1, {0}, {384}, {"RGB 128x32",
            "RGB 64x32"}},
    {RGB64, {8192}, GST_VIDEO_FORMAT_RGBA, 64, 32, 1, {0}, {256},
        {"describes RGBA", NULL}},
    {RGB64, {6144}, RGB, 64, 32, 2, {0, 0}, {192, 192}, {"of 2 planes",
            NULL}},
    {I420_64, {3072}, I420, 64, 32, 3, {0, 2048, 2800}, {64, 32, 32},
        {"plane 2", "past the end of the buffer"}},
    {I420_64, {3072}, I420, 64, 32, 3, {0, 2048, 2560}, {64, 100000, 32},
        {"plane 1", "stride 100000"}},
    {RGB64, {4096, 2048}, RGB, 64, 32, 1, {0}, {192}, {"memory block",
            "4096 bytes"}},
    /* taken: one block per plane, and a padded stride */
    {I420_64, {2048, 512, 512}, I420, 64, 32, 3, {0, 2048, 2560}, {64, 32,
            32}, {NULL, NULL}},
    {RGB64, {64 * 200}, RGB, 64, 32, 1, {16}, {200}, {NULL, NULL}},
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    const MetaCase *c = &cases[i];
    const gchar *prop = i % 2 ? "last-image" : "image";
    GstHarness *hv, *ha;
    GstBus *bus;
    GstElement *e = new_element (&hv, &ha, &bus);
    GstSample *sample = meta_sample (c);
    GstStateChangeReturn ret;
    GstMessage *m;

    g_object_set (e, prop, sample, NULL);
    gst_sample_unref (sample);
    ret = gst_element_set_state (e, GST_STATE_PAUSED);
    m = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
    if (!c->says[0]) {
      fail_unless (ret != GST_STATE_CHANGE_FAILURE && m == NULL,
          "case %u: a layout that fits was refused", i);
    } else {
      GError *err = NULL;
      gchar *dbg = NULL;

      fail_unless_equals_int (ret, GST_STATE_CHANGE_FAILURE);
      fail_unless (m != NULL, "case %u: no error", i);
      gst_message_parse_error (m, &err, &dbg);
      g_print ("%s (case %u): %s\n", prop, i, err->message);
      fail_unless (err->domain == GST_LIBRARY_ERROR
          && err->code == GST_LIBRARY_ERROR_SETTINGS, "case %u: %s %d", i,
          g_quark_to_string (err->domain), err->code);
      fail_unless (g_str_has_prefix (err->message, prop), "'%s' does not "
          "name %s", err->message, prop);
      for (gint k = 0; k < 2; k++)
        fail_unless (!c->says[k] || strstr (err->message, c->says[k]),
            "'%s' does not say '%s'", err->message, c->says[k]);
      fail_unless (gst_harness_try_pull (hv) == NULL, "a frame after the "
          "error");
      g_error_free (err);
      g_free (dbg);
    }
    if (m)
      gst_message_unref (m);
    gst_element_set_state (e, GST_STATE_NULL);
    h3_gst_harnesses_free (hv, ha, bus);
  }
}

GST_END_TEST;

/* The warnings of the element, for the change refused in PLAYING. */
static void
collect_warning (GstDebugCategory * category, GstDebugLevel level,
    const gchar * file, const gchar * function, gint line, GObject * object,
    GstDebugMessage * message, gpointer user_data)
{
  GString *log = user_data;

  if (level == GST_LEVEL_WARNING
      && g_strcmp0 (gst_debug_category_get_name (category), "h3videosrc") == 0)
    g_string_append_printf (log, "%s\n", gst_debug_message_get (message));
}

GST_START_TEST (test_keyframe_rules)
{
  gchar *png = data_path (KEYFRAME), *loc = NULL, *uri;
  h3_image_file kf = keyframe_pixels ();
  GstSample *rgb = make_sample (&kf.image, GST_VIDEO_FORMAT_RGB), *got = NULL;
  GstHarness *hv, *ha;
  GstBus *bus;
  GstElement *e = new_element (&hv, &ha, &bus), *h3src, *child;
  GstStructure *caps = NULL;
  GString *log = g_string_new (NULL);
  GByteArray *video = g_byte_array_new (), *audio = g_byte_array_new ();
  GError *err = NULL;

  /* The last set of a file and a sample wins. */
  g_object_set (e, "image-location", png, "image", rgb, NULL);
  g_object_get (e, "image-location", &loc, "image", &got, NULL);
  fail_unless (loc == NULL && got == rgb);
  gst_sample_unref (got);
  g_object_set (e, "image-location", "", NULL);   /* empty: unsets itself only */
  g_object_get (e, "image", &got, NULL);
  fail_unless (got == rgb);
  gst_sample_unref (got);
  g_object_set (e, "last-image", rgb, "last-image-location", png, NULL);
  g_object_get (e, "last-image-location", &loc, "last-image", &got, NULL);
  fail_unless (got == NULL && g_strcmp0 (loc, png) == 0);
  g_free (loc);
  g_object_set (e, "image", NULL, "last-image-location", NULL, NULL);

  /* A change in PLAYING is ignored, and said so; the run is unaffected. */
  g_object_set (e, "image-location", png, NULL);
  gst_debug_set_threshold_for_name ("h3videosrc", GST_LEVEL_INFO);
  gst_debug_add_log_function (collect_warning, log, NULL);
  gst_harness_play (hv);
  g_object_set (e, "image-location", "/elsewhere.png", "last-image", rgb,
      NULL);
  gst_debug_remove_log_function (collect_warning);
  g_object_get (e, "image-location", &loc, "last-image", &got, NULL);
  fail_unless_equals_string (loc, png);
  fail_unless (got == NULL);
  g_free (loc);
  fail_unless (strstr (log->str, "'image-location' can only be changed in "
          "the NULL or READY state") != NULL, "no warning: %s", log->str);
  fail_unless (strstr (log->str, "'last-image'") != NULL, "%s", log->str);
  pull_all (hv, video, NULL);
  pull_all (ha, audio, NULL);
  fail_unless (video->len > 0 && audio->len > 0);
  expect_no_error (bus);

  /* The capabilities list the modes. */
  g_object_get (e, "capabilities", &caps, NULL);
  fail_unless_equals_string (gst_structure_get_string (caps, "modes"),
      "t2va, fl2va-first, fl2va-last, fl2va-first-last");
  gst_structure_free (caps);
  gst_element_set_state (e, GST_STATE_NULL);
  h3_gst_harnesses_free (hv, ha, bus);

  /* The h3: URI carries the locations. */
  uri = g_strdup_printf ("h3:?prompt=a%%20robot&image-location=%s"
      "&last-image-location=%s", png, png);
  h3src = gst_element_make_from_uri (GST_URI_SRC, uri, NULL, &err);
  fail_unless (h3src != NULL, "%s", err ? err->message : "no element");
  child = gst_bin_get_by_name (GST_BIN (h3src), "src");
  fail_unless (child != NULL);
  g_object_get (child, "image-location", &loc, NULL);
  fail_unless_equals_string (loc, png);
  g_free (loc);
  g_object_get (child, "last-image-location", &loc, NULL);
  fail_unless_equals_string (loc, png);
  g_free (loc);
  g_free (uri);
  uri = gst_uri_handler_get_uri (GST_URI_HANDLER (h3src));
  fail_unless (strstr (uri, "image-location=") != NULL
      && strstr (uri, "last-image-location=") != NULL, "%s", uri);
  g_free (uri);
  gst_object_unref (child);
  gst_object_unref (h3src);

  g_byte_array_unref (video);
  g_byte_array_unref (audio);
  g_string_free (log, TRUE);
  gst_sample_unref (rgb);
  h3_image_file_clear (&kf);
  g_free (png);
}

GST_END_TEST;

static Suite *
h3videosrc_fl2va_suite (void)
{
  Suite *s = suite_create ("h3videosrc-fl2va");
  TCase *tc = tcase_create ("fl2va");

  tcase_set_timeout (tc, 600);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_image_location_matches_golden);
  tcase_add_test (tc, test_image_sample);
  tcase_add_test (tc, test_last_image);
  tcase_add_test (tc, test_bad_keyframes);
  tcase_add_test (tc, test_hostile_sample_meta);
  tcase_add_test (tc, test_keyframe_rules);
  return s;
}

GST_CHECK_MAIN (h3videosrc_fl2va);
