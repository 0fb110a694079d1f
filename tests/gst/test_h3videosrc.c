/* test_h3videosrc.c - gst-check suite for the h3videosrc element.
 *
 * Every test runs the real element on the embedded tiny model on the CPU,
 * at a small size (64x32, 22 frames, 2 steps) so a clip takes seconds.
 * Long generations (steps=1000) stand in for "mid-generation": the tests
 * wait for the first denoising step message before acting.
 *
 * The environment comes from meson: GST_PLUGIN_PATH_1_0 points at the build
 * of the plugin, GST_REGISTRY at a registry file in the build directory,
 * GST_TRACERS=leaks for the start/stop leak count. */
#include <gst/check/gstcheck.h>
#include <gst/check/gstconsistencychecker.h>
#include <gst/check/gstharness.h>
#include <glib/gstdio.h>
#include <math.h>
#include <json-glib/json-glib.h>
#include <string.h>

#define PROMPT "a robot dancing"
#define W 64
#define H 32
#define FRAMES 22               /* 22 is already 17n+5 */
#define STEPS 2
#define LONG_STEPS 1000         /* far more than any test waits for */

/* The sample rate of the model the element runs (its audio VAE's
 * sampling_rate): the audio caps must carry it. */
static gint
model_rate (void)
{
  GstElement *e = gst_element_factory_make ("h3videosrc", NULL);
  gchar *dir = NULL, *path;
  JsonParser *parser = json_parser_new ();
  gint rate;

  g_object_get (e, "model-location", &dir, NULL);
  path = g_build_filename (dir, "audio_vae", "config.json", NULL);
  fail_unless (json_parser_load_from_file (parser, path, NULL), "%s", path);
  rate = (gint) json_object_get_int_member (json_node_get_object
      (json_parser_get_root (parser)), "sampling_rate");
  fail_unless (rate > 0, "%s: no sampling_rate", path);
  g_object_unref (parser);
  g_free (path);
  g_free (dir);
  gst_object_unref (e);
  return rate;
}

static void
set_small (GstElement * e, guint64 seed)
{
  g_object_set (e, "prompt", PROMPT, "seed", seed, "width", W, "height", H,
      "num-frames", FRAMES, "steps", STEPS, NULL);
}

/* Time limits are multiplied by H3_TEST_TIME_SCALE (the valgrind suite
 * sets it: everything runs some 20 times slower there). */
static gint64
time_limit_us (gdouble seconds)
{
  const gchar *scale = g_getenv ("H3_TEST_TIME_SCALE");

  return (gint64) (seconds * G_USEC_PER_SEC * (scale ? g_ascii_strtod (scale,
              NULL) : 1.0));
}

static gboolean
caps_equal (GstCaps * caps, const gchar * expected)
{
  GstCaps *e = gst_caps_from_string (expected);
  gboolean equal = gst_caps_is_equal (caps, e);

  gst_caps_unref (e);
  return equal;
}

static void
mark_finalized (gpointer data)
{
  g_atomic_int_set ((gint *) data, TRUE);
}

/* Drops a reference to an h3videosrc and waits until it is finalized: its
 * generation thread holds a reference until a cancelled step returns, and
 * the leaks tracer checks every test at exit.
 *
 * "Finalized", not "its weak references cleared": GLib clears those when
 * the last unref begins, before dispose. The element may then still be
 * finalizing on its generation thread, listed by the leaks tracer, and
 * get-live-objects would take a reference to it and dispose it a second
 * time. Object data is destroyed at the very end of finalize, after the
 * tracer has forgotten the object, and without taking a reference. */
static void
unref_and_wait (GstElement * e)
{
  static GQuark quark;
  gint *finalized = g_new0 (gint, 1);
  gboolean gone = FALSE;

  if (!quark)
    quark = g_quark_from_static_string ("test-h3videosrc-finalized");
  g_object_set_qdata_full (G_OBJECT (e), quark, finalized, mark_finalized);
  gst_object_unref (e);
  for (gint i = 0; i < 1000 && !gone; i++) {
    gone = g_atomic_int_get (finalized);
    if (!gone)
      g_usleep (10000);
  }
  fail_unless (gone, "h3videosrc still alive 10 s after its last reference "
      "was dropped");
  g_free (finalized);
}

static GstClockTime
frame_time (guint64 n)
{
  return gst_util_uint64_scale (n, GST_SECOND, 24);
}

/* ---- harness helpers ------------------------------------------------------ */

typedef struct
{
  GPtrArray *events;
  GPtrArray *buffers;
  gchar *checksum;              /* SHA-256 of every buffer's bytes */
} Output;

typedef struct
{
  GstHarness *hv, *ha;
  GstStreamConsistency *cv, *ca;
  GstBus *bus;
} Clip;

static void
clip_new (Clip * c, guint64 seed)
{
  GstPad *pad;

  memset (c, 0, sizeof *c);
  c->hv = gst_harness_new_with_padnames ("h3videosrc", NULL, "video");
  c->ha = gst_harness_new_with_element (c->hv->element, NULL, "audio");
  set_small (c->hv->element, seed);
  pad = gst_element_get_static_pad (c->hv->element, "video");
  c->cv = gst_consistency_checker_new (pad);
  gst_object_unref (pad);
  pad = gst_element_get_static_pad (c->hv->element, "audio");
  c->ca = gst_consistency_checker_new (pad);
  gst_object_unref (pad);
  /* A harnessed element has no bus: give it one to see its messages. */
  c->bus = gst_bus_new ();
  gst_element_set_bus (c->hv->element, c->bus);
}

static void
clip_free (Clip * c)
{
  GstElement *e = gst_object_ref (c->hv->element);

  gst_consistency_checker_free (c->cv);
  gst_consistency_checker_free (c->ca);
  gst_harness_teardown (c->ha);
  gst_harness_teardown (c->hv);
  gst_bus_set_flushing (c->bus, TRUE);
  gst_object_unref (c->bus);
  unref_and_wait (e);
}

/* Pulls every event up to EOS, then the buffers queued before it. */
static void
output_collect (GstHarness * h, Output * o)
{
  GChecksum *sum = g_checksum_new (G_CHECKSUM_SHA256);
  GstBuffer *buf;

  o->events = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_mini_object_unref);
  o->buffers = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_mini_object_unref);
  for (;;) {
    GstEvent *ev = gst_harness_pull_event (h);
    fail_unless (ev != NULL, "no EOS within the harness timeout");
    g_ptr_array_add (o->events, ev);
    if (GST_EVENT_TYPE (ev) == GST_EVENT_EOS)
      break;
  }
  while ((buf = gst_harness_try_pull (h))) {
    GstMapInfo map;
    fail_unless (gst_buffer_map (buf, &map, GST_MAP_READ));
    g_checksum_update (sum, map.data, map.size);
    gst_buffer_unmap (buf, &map);
    g_ptr_array_add (o->buffers, buf);
  }
  o->checksum = g_strdup (g_checksum_get_string (sum));
  g_checksum_free (sum);
}

static void
output_clear (Output * o)
{
  g_ptr_array_unref (o->events);
  g_ptr_array_unref (o->buffers);
  g_free (o->checksum);
}

static GstEvent *
output_event (Output * o, GstEventType type)
{
  for (guint i = 0; i < o->events->len; i++) {
    GstEvent *ev = g_ptr_array_index (o->events, i);
    if (GST_EVENT_TYPE (ev) == type)
      return ev;
  }
  return NULL;
}

/* Generates the small clip on both pads of a fresh element. */
static void
generate (guint64 seed, Output * video, Output * audio)
{
  Clip c;

  clip_new (&c, seed);
  gst_harness_play (c.hv);
  output_collect (c.hv, video);
  output_collect (c.ha, audio);
  clip_free (&c);
}

/* ---- bus helpers ---------------------------------------------------------- */

/* Waits for an element message with the given structure name. */
static gboolean
wait_element_message (GstBus * bus, const gchar * name, GstClockTime timeout)
{
  gint64 deadline = g_get_monotonic_time () + timeout / 1000;

  for (;;) {
    gint64 left = deadline - g_get_monotonic_time ();
    GstMessage *m;
    gboolean found;

    if (left <= 0)
      return FALSE;
    m = gst_bus_timed_pop_filtered (bus, left * 1000,
        GST_MESSAGE_ELEMENT | GST_MESSAGE_ERROR);
    if (!m)
      return FALSE;
    if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ERROR) {
      GError *err;
      gchar *dbg;
      gst_message_parse_error (m, &err, &dbg);
      fail ("unexpected error: %s (%s)", err->message, dbg);
    }
    found = gst_message_has_name (m, name);
    gst_message_unref (m);
    if (found)
      return TRUE;
  }
}

/* Waits for an error and checks its domain and code, and that its message
 * says must_say (when not NULL). */
static void
expect_error_saying (GstBus * bus, GQuark domain, gint code,
    const gchar * what, const gchar * must_say)
{
  GstMessage *m = gst_bus_timed_pop_filtered (bus, 60 * GST_SECOND,
      GST_MESSAGE_ERROR);
  GError *err = NULL;
  gchar *dbg = NULL;

  fail_unless (m != NULL, "%s: no error message", what);
  gst_message_parse_error (m, &err, &dbg);
  GST_INFO ("%s: %s (%s)", what, err->message, dbg);
  fail_unless (err->domain == domain && err->code == code,
      "%s: got %s %d '%s', expected %s %d", what,
      g_quark_to_string (err->domain), err->code, err->message,
      g_quark_to_string (domain), code);
  fail_unless (strlen (err->message) > 20, "%s: uninformative message '%s'",
      what, err->message);
  fail_unless (must_say == NULL || strstr (err->message, must_say) != NULL,
      "%s: the message '%s' does not say '%s'", what, err->message, must_say);
  g_error_free (err);
  g_free (dbg);
  gst_message_unref (m);
}

static guint
count_messages (GstBus * bus, GstMessageType type)
{
  guint n = 0;
  GstMessage *m;

  while ((m = gst_bus_pop_filtered (bus, type))) {
    n++;
    gst_message_unref (m);
  }
  return n;
}

/* ---- tests: streams ------------------------------------------------------- */

GST_START_TEST (test_event_order_and_streams)
{
  Output v, a, v2, a2;
  const GstEventType order[] = { GST_EVENT_STREAM_START, GST_EVENT_CAPS,
    GST_EVENT_SEGMENT, GST_EVENT_STREAM_COLLECTION, GST_EVENT_TAG,
    GST_EVENT_EOS
  };
  Output *outs[] = { &v, &a };
  const gchar *vid, *aid, *vid2, *aid2;
  guint vgroup, agroup;
  GstStream *vstream, *astream;
  GstStreamCollection *coll;
  const GstSegment *seg;
  GstCaps *caps;
  GstEvent *ev;

  generate (42, &v, &a);

  for (guint o = 0; o < 2; o++) {
    fail_unless_equals_int (outs[o]->events->len, G_N_ELEMENTS (order));
    for (guint i = 0; i < G_N_ELEMENTS (order); i++) {
      ev = g_ptr_array_index (outs[o]->events, i);
      fail_unless (GST_EVENT_TYPE (ev) == order[i], "event %u is %s, not %s",
          i, GST_EVENT_TYPE_NAME (ev), gst_event_type_get_name (order[i]));
    }
  }

  /* Distinct stream ids, one group, the GstStream of the right type. */
  gst_event_parse_stream_start (output_event (&v, GST_EVENT_STREAM_START),
      &vid);
  gst_event_parse_stream_start (output_event (&a, GST_EVENT_STREAM_START),
      &aid);
  fail_unless (g_str_has_suffix (vid, "/video"), "video stream id %s", vid);
  fail_unless (g_str_has_suffix (aid, "/audio"), "audio stream id %s", aid);
  fail_if (g_strcmp0 (vid, aid) == 0);
  fail_unless (gst_event_parse_group_id (output_event (&v,
              GST_EVENT_STREAM_START), &vgroup));
  fail_unless (gst_event_parse_group_id (output_event (&a,
              GST_EVENT_STREAM_START), &agroup));
  fail_unless_equals_int (vgroup, agroup);
  gst_event_parse_stream (output_event (&v, GST_EVENT_STREAM_START),
      &vstream);
  gst_event_parse_stream (output_event (&a, GST_EVENT_STREAM_START),
      &astream);
  fail_unless (gst_stream_get_stream_type (vstream) == GST_STREAM_TYPE_VIDEO);
  fail_unless (gst_stream_get_stream_type (astream) == GST_STREAM_TYPE_AUDIO);
  fail_unless_equals_string (gst_stream_get_stream_id (vstream), vid);

  /* One collection holding both streams, on both pads. */
  gst_event_parse_stream_collection (output_event (&v,
          GST_EVENT_STREAM_COLLECTION), &coll);
  fail_unless_equals_int (gst_stream_collection_get_size (coll), 2);
  fail_unless (gst_stream_collection_get_stream (coll, 0) == vstream);
  fail_unless (gst_stream_collection_get_stream (coll, 1) == astream);
  gst_object_unref (coll);
  gst_event_parse_stream_collection (output_event (&a,
          GST_EVENT_STREAM_COLLECTION), &coll);
  fail_unless_equals_int (gst_stream_collection_get_size (coll), 2);
  gst_object_unref (coll);
  gst_object_unref (vstream);
  gst_object_unref (astream);

  /* Caps. */
  gst_event_parse_caps (output_event (&v, GST_EVENT_CAPS), &caps);
  fail_unless (caps_equal (caps, "video/x-raw, format=RGB, width=64, "
          "height=32, framerate=24/1, pixel-aspect-ratio=1/1"),
      "video caps %" GST_PTR_FORMAT, caps);
  gst_event_parse_caps (output_event (&a, GST_EVENT_CAPS), &caps);
  {
    gchar *expected = g_strdup_printf ("audio/x-raw, format=F32LE, rate=%d, "
        "channels=2, layout=interleaved, channel-mask=(bitmask)0x3",
        model_rate ());
    fail_unless (caps_equal (caps, expected), "audio caps %" GST_PTR_FORMAT
        ", expected %s", caps, expected);
    g_free (expected);
  }

  /* TIME segments from 0 with the clip's duration, one seqnum. */
  gst_event_parse_segment (output_event (&v, GST_EVENT_SEGMENT), &seg);
  fail_unless (seg->format == GST_FORMAT_TIME);
  fail_unless_equals_uint64 (seg->start, 0);
  fail_unless_equals_uint64 (seg->duration, frame_time (FRAMES));
  gst_event_parse_segment (output_event (&a, GST_EVENT_SEGMENT), &seg);
  fail_unless_equals_uint64 (seg->duration, frame_time (FRAMES));
  fail_unless_equals_int (gst_event_get_seqnum (output_event (&v,
              GST_EVENT_SEGMENT)), gst_event_get_seqnum (output_event (&a,
              GST_EVENT_SEGMENT)));

  /* Deterministic ids: the same request gives the same ids again. */
  generate (42, &v2, &a2);
  gst_event_parse_stream_start (output_event (&v2, GST_EVENT_STREAM_START),
      &vid2);
  gst_event_parse_stream_start (output_event (&a2, GST_EVENT_STREAM_START),
      &aid2);
  fail_unless_equals_string (vid, vid2);
  fail_unless_equals_string (aid, aid2);

  output_clear (&v);
  output_clear (&a);
  output_clear (&v2);
  output_clear (&a2);
}

GST_END_TEST;

GST_START_TEST (test_timestamps_and_offsets)
{
  Output v, a;
  guint64 samples = 0, expected_samples;
  GstClockTime vend, aend;
  gint rate = model_rate ();

  generate (42, &v, &a);

  /* Video: one buffer per aligned frame, PTS from the frame counter. */
  fail_unless_equals_int (v.buffers->len, FRAMES);
  for (guint i = 0; i < v.buffers->len; i++) {
    GstBuffer *b = g_ptr_array_index (v.buffers, i);
    fail_unless_equals_uint64 (GST_BUFFER_PTS (b), frame_time (i));
    fail_unless_equals_uint64 (GST_BUFFER_DURATION (b),
        frame_time (i + 1) - frame_time (i));
    fail_unless_equals_uint64 (GST_BUFFER_OFFSET (b), i);
    fail_unless_equals_uint64 (GST_BUFFER_OFFSET_END (b), i + 1);
    fail_unless_equals_int (gst_buffer_get_size (b), W * H * 3);
    fail_unless_equals_int (GST_BUFFER_FLAG_IS_SET (b,
            GST_BUFFER_FLAG_DISCONT), i == 0);
  }

  /* Audio: one slice per video frame, contiguous in samples and time. */
  fail_unless_equals_int (a.buffers->len, FRAMES);
  for (guint i = 0; i < a.buffers->len; i++) {
    GstBuffer *b = g_ptr_array_index (a.buffers, i);
    guint64 n = GST_BUFFER_OFFSET_END (b) - GST_BUFFER_OFFSET (b);
    fail_unless_equals_uint64 (GST_BUFFER_OFFSET (b), samples);
    fail_unless_equals_uint64 (GST_BUFFER_OFFSET (b),
        gst_util_uint64_scale_round (i, rate, 24));
    fail_unless_equals_int (gst_buffer_get_size (b), n * 2 * sizeof (gfloat));
    fail_unless_equals_uint64 (GST_BUFFER_PTS (b),
        gst_util_uint64_scale_round (samples, GST_SECOND, rate));
    if (i > 0) {
      GstBuffer *p = g_ptr_array_index (a.buffers, i - 1);
      fail_unless_equals_uint64 (GST_BUFFER_PTS (p) + GST_BUFFER_DURATION (p),
          GST_BUFFER_PTS (b));
    }
    fail_unless_equals_int (GST_BUFFER_FLAG_IS_SET (b,
            GST_BUFFER_FLAG_DISCONT), i == 0);
    samples += n;
  }

  /* Both streams end together: audio is trimmed (or padded) to the video
   * length, the last slice ending exactly with the last frame. */
  expected_samples = gst_util_uint64_scale_round (FRAMES, rate, 24);
  fail_unless_equals_uint64 (samples, expected_samples);
  {
    GstBuffer *lv = g_ptr_array_index (v.buffers, FRAMES - 1);
    GstBuffer *la = g_ptr_array_index (a.buffers, FRAMES - 1);
    vend = GST_BUFFER_PTS (lv) + GST_BUFFER_DURATION (lv);
    aend = GST_BUFFER_PTS (la) + GST_BUFFER_DURATION (la);
  }
  fail_unless_equals_uint64 (vend, frame_time (FRAMES));
  fail_unless_equals_uint64 (aend, vend);

  /* The audio is real signal, finite and in [-1, 1]. */
  {
    gdouble energy = 0;
    for (guint i = 0; i < a.buffers->len; i++) {
      GstBuffer *b = g_ptr_array_index (a.buffers, i);
      GstMapInfo map;
      const gfloat *s;
      gst_buffer_map (b, &map, GST_MAP_READ);
      s = (const gfloat *) map.data;
      for (gsize k = 0; k < map.size / sizeof (gfloat); k++) {
        fail_unless (isfinite (s[k]) && s[k] >= -1.0f && s[k] <= 1.0f,
            "sample %g", s[k]);
        energy += s[k] * s[k];
      }
      gst_buffer_unmap (b, &map);
    }
    fail_unless (energy > 0, "silent audio");
  }
  output_clear (&v);
  output_clear (&a);
}

GST_END_TEST;

GST_START_TEST (test_seed_determinism)
{
  Output v1, a1, v2, a2, v3, a3;

  generate (42, &v1, &a1);
  generate (42, &v2, &a2);
  generate (7, &v3, &a3);
  fail_unless_equals_string (v1.checksum, v2.checksum);
  fail_unless_equals_string (a1.checksum, a2.checksum);
  fail_if (g_strcmp0 (v1.checksum, v3.checksum) == 0,
      "seed 7 gave the same video as seed 42");
  fail_if (g_strcmp0 (a1.checksum, a3.checksum) == 0,
      "seed 7 gave the same audio as seed 42");
  output_clear (&v1);
  output_clear (&a1);
  output_clear (&v2);
  output_clear (&a2);
  output_clear (&v3);
  output_clear (&a3);
}

GST_END_TEST;

/* One element, several runs: the engine is loaded once and reused, and a
 * rerun gives the same clip. */
GST_START_TEST (test_rerun_reuses_engine)
{
  Clip c;
  Output v1, a1, v2, a2;
  GstMessage *m;
  guint loads = 0;

  clip_new (&c, 42);
  gst_harness_play (c.hv);
  output_collect (c.hv, &v1);
  output_collect (c.ha, &a1);
  fail_unless_equals_int (gst_element_set_state (c.hv->element,
          GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  fail_unless_equals_int (gst_element_set_state (c.hv->element,
          GST_STATE_PLAYING), GST_STATE_CHANGE_SUCCESS);
  output_collect (c.hv, &v2);
  output_collect (c.ha, &a2);
  fail_unless_equals_string (v1.checksum, v2.checksum);
  fail_unless_equals_string (a1.checksum, a2.checksum);

  while ((m = gst_bus_pop_filtered (c.bus, GST_MESSAGE_PROGRESS))) {
    GstProgressType type;
    gchar *code, *text;
    gst_message_parse_progress (m, &type, &code, &text);
    if (g_strcmp0 (code, "load") == 0 && type == GST_PROGRESS_TYPE_START)
      loads++;
    g_free (code);
    g_free (text);
    gst_message_unref (m);
  }
  fail_unless_equals_int (loads, 1);
  output_clear (&v1);
  output_clear (&a1);
  output_clear (&v2);
  output_clear (&a2);
  clip_free (&c);
}

GST_END_TEST;

/* Total audio samples (per channel) of an output. */
static guint64
output_samples (Output * o)
{
  guint64 n = 0;

  for (guint i = 0; i < o->buffers->len; i++)
    n += gst_buffer_get_size (g_ptr_array_index (o->buffers, i)) /
        (2 * sizeof (gfloat));
  return n;
}

/* devices=cpu:2: the element runs tensor parallelism over two CPU ranks,
 * as the engine does for h3_engine_open; the clip has the geometry of the
 * one devices=auto gives, and the stats name the ranks. */
GST_START_TEST (test_devices_cpu_ranks)
{
  Clip c;
  Output v1, a1, v2, a2;
  GstStructure *stats = NULL;
  const gchar *compute;

  generate (42, &v1, &a1);

  clip_new (&c, 42);
  g_object_set (c.hv->element, "devices", "cpu:2", NULL);
  gst_harness_play (c.hv);
  output_collect (c.hv, &v2);
  output_collect (c.ha, &a2);
  fail_unless_equals_int (v1.buffers->len, FRAMES);
  fail_unless_equals_int (v2.buffers->len, v1.buffers->len);
  fail_unless_equals_int (a2.buffers->len, a1.buffers->len);
  fail_unless_equals_uint64 (output_samples (&a2), output_samples (&a1));
  fail_unless (output_samples (&a2) > 0);

  /* The stats are stored when the engine returns, which can be after the
   * last frame went out. */
  for (gint i = 0; i < 1000 && !stats; i++) {
    g_object_get (c.hv->element, "stats", &stats, NULL);
    if (!stats)
      g_usleep (10000);
  }
  fail_unless (stats != NULL, "no stats 10 s after EOS");
  compute = gst_structure_get_string (stats, "compute");
  GST_INFO ("devices=cpu:2: compute '%s'", compute);
  fail_unless (compute != NULL && g_str_has_prefix (compute, "cpu")
      && strstr (compute, "tp2") != NULL, "compute '%s' does not name two "
      "CPU ranks", compute);
  gst_structure_free (stats);

  output_clear (&v1);
  output_clear (&a1);
  output_clear (&v2);
  output_clear (&a2);
  clip_free (&c);
}

GST_END_TEST;

/* ---- tests: messages -------------------------------------------------------- */

typedef struct
{
  GMutex lock;
  GPtrArray *log;               /* strings, in posting order */
} Log;

static void
log_add (Log * l, gchar * entry)
{
  g_mutex_lock (&l->lock);
  g_ptr_array_add (l->log, entry);
  g_mutex_unlock (&l->lock);
}

static GstBusSyncReply
log_message (GstBus * bus, GstMessage * m, gpointer data)
{
  Log *l = data;

  if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_PROGRESS) {
    GstProgressType type;
    gchar *code, *text;
    gint percent = -1;
    const gchar *types[] = { "START", "CONTINUE", "COMPLETE", "CANCELED",
      "ERROR"
    };
    gst_message_parse_progress (m, &type, &code, &text);
    gst_structure_get_int (gst_message_get_structure (m), "percent",
        &percent);
    log_add (l, g_strdup_printf ("progress %s %s %d", code, types[type],
            percent));
    g_free (code);
    g_free (text);
  } else if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ELEMENT) {
    const GstStructure *s = gst_message_get_structure (m);
    gint step = 0, total = 0;
    gst_structure_get_int (s, "step", &step);
    gst_structure_get_int (s, "total", &total);
    log_add (l, g_strdup_printf ("element %s %s %d/%d",
            gst_structure_get_name (s),
            GST_STR_NULL (gst_structure_get_string (s, "phase")), step,
            total));
  } else if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_STREAM_COLLECTION) {
    log_add (l, g_strdup ("collection"));
  }
  return GST_BUS_PASS;
}

static GstPadProbeReturn
log_first_buffer (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  log_add (data, g_strdup_printf ("buffer %s", GST_PAD_NAME (pad)));
  return GST_PAD_PROBE_REMOVE;
}

static GstPadProbeReturn
log_eos (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  if (GST_EVENT_TYPE (GST_PAD_PROBE_INFO_EVENT (info)) == GST_EVENT_EOS)
    log_add (data, g_strdup_printf ("eos %s", GST_PAD_NAME (pad)));
  return GST_PAD_PROBE_OK;
}

static gint
log_find_last (Log * l, const gchar * entry)
{
  for (gint i = (gint) l->log->len - 1; i >= 0; i--)
    if (g_str_has_prefix (g_ptr_array_index (l->log, i), entry))
      return i;
  return -1;
}

static gint
log_find (Log * l, const gchar * entry)
{
  for (guint i = 0; i < l->log->len; i++)
    if (g_str_has_prefix (g_ptr_array_index (l->log, i), entry))
      return (gint) i;
  return -1;
}

static guint
log_count (Log * l, const gchar * prefix)
{
  guint n = 0;
  for (guint i = 0; i < l->log->len; i++)
    n += g_str_has_prefix (g_ptr_array_index (l->log, i), prefix);
  return n;
}

GST_START_TEST (test_progress_and_element_messages)
{
  Clip c;
  Output v, a;
  Log l;
  GstPad *pad;
  GstMessage *m;
  gint first_buffer, complete, last_percent = -1, last_window;
  gboolean got_done = FALSE;
  GstStructure *stats = NULL;

  g_mutex_init (&l.lock);
  l.log = g_ptr_array_new_with_free_func (g_free);
  clip_new (&c, 42);
  gst_bus_set_sync_handler (c.bus, log_message, &l, NULL);
  pad = gst_element_get_static_pad (c.hv->element, "video");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, log_first_buffer, &l,
      NULL);
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, log_eos, &l,
      NULL);
  gst_object_unref (pad);
  pad = gst_element_get_static_pad (c.hv->element, "audio");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, log_first_buffer, &l,
      NULL);
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, log_eos, &l,
      NULL);
  gst_object_unref (pad);

  gst_harness_play (c.hv);
  output_collect (c.hv, &v);
  output_collect (c.ha, &a);

  for (guint i = 0; i < l.log->len; i++)
    GST_INFO ("%s", (gchar *) g_ptr_array_index (l.log, i));
  fail_unless (log_find (&l, "collection") >= 0);
  fail_unless (log_find (&l, "progress load START") >= 0);
  fail_unless (log_find (&l, "progress load COMPLETE") >
      log_find (&l, "progress load START"));
  fail_unless (log_find (&l, "progress generate START") >
      log_find (&l, "progress load COMPLETE"));
  /* The prompt, each step, the audio decode (the engine decodes audio
   * first), and video windows decoded before the first buffer. */
  fail_unless (log_count (&l, "progress generate CONTINUE") >= 1 + STEPS + 1);
  fail_unless_equals_int (log_count (&l, "progress generate COMPLETE"), 1);
  fail_unless_equals_int (log_count (&l, "progress generate CANCELED"), 0);
  fail_unless_equals_int (log_count (&l, "progress generate ERROR"), 0);
  /* `generate` ends when the first frames are decoded, before the first
   * video buffer (and so before the sinks preroll: gst-launch-1.0 plays as
   * soon as the pipeline prerolls, and never waits for the rest of the
   * decode). The decode goes on in h3videosrc/step messages to the last
   * window, then h3videosrc/done, then EOS on both pads. */
  complete = log_find (&l, "progress generate COMPLETE");
  first_buffer = log_find (&l, "buffer video");
  last_window = log_find_last (&l, "element h3videosrc/step decode-video");
  fail_unless (first_buffer >= 0 && complete >= 0);
  fail_unless (complete < first_buffer, "COMPLETE at %d, first video buffer "
      "at %d", complete, first_buffer);
  fail_unless (last_window >= 0 && last_window > complete,
      "last decode window at %d, COMPLETE at %d", last_window, complete);
  {
    gint step, total;
    fail_unless (sscanf ((gchar *) g_ptr_array_index (l.log, last_window),
            "element h3videosrc/step decode-video %d/%d", &step, &total) == 2);
    fail_unless_equals_int (step, total);
  }
  fail_unless (log_find (&l, "element h3videosrc/done") > last_window);
  fail_unless (log_find (&l, "eos video") > log_find (&l,
          "element h3videosrc/done"));
  fail_unless (log_find (&l, "eos audio") > log_find (&l,
          "element h3videosrc/done"));
  /* Nothing of `generate` after COMPLETE. */
  fail_unless (log_find_last (&l, "progress generate") == complete);
  /* Percent increases through the CONTINUE messages up to COMPLETE, which
   * is where the video decode starts: below 100 until every frame is
   * decoded. */
  for (guint i = 0; i < l.log->len; i++) {
    const gchar *e = g_ptr_array_index (l.log, i);
    gint p;
    if (!g_str_has_prefix (e, "progress generate CONTINUE"))
      continue;
    p = atoi (strrchr (e, ' ') + 1);
    fail_unless (p >= last_percent && p < 100, "percent %d after %d", p,
        last_percent);
    last_percent = p;
  }
  {
    gint p = atoi (strrchr ((gchar *) g_ptr_array_index (l.log, complete),
            ' ') + 1);
    fail_unless (p >= last_percent && p >= 90 && p < 100, "COMPLETE at %d%%",
        p);
  }
  /* One step message per denoising step, plus one per decode window. */
  fail_unless (log_count (&l, "element h3videosrc/step") >= STEPS + 2);

  while ((m = gst_bus_pop_filtered (c.bus, GST_MESSAGE_ELEMENT))) {
    const GstStructure *s = gst_message_get_structure (m);
    if (gst_structure_has_name (s, "h3videosrc/step")) {
      const gchar *phase = gst_structure_get_string (s, "phase");
      gint step, total;
      gdouble elapsed;
      fail_unless (phase != NULL);
      fail_unless (gst_structure_get_int (s, "step", &step));
      fail_unless (gst_structure_get_int (s, "total", &total));
      fail_unless (gst_structure_get_double (s, "elapsed", &elapsed));
      fail_unless (step >= 1 && step <= total);
      if (g_strcmp0 (phase, "denoise") == 0)
        fail_unless_equals_int (total, STEPS);
    } else if (gst_structure_has_name (s, "h3videosrc/done")) {
      gdouble total;
      gint steps, frames;
      got_done = TRUE;
      fail_unless_equals_string (gst_structure_get_string (s, "result"), "ok");
      fail_unless (gst_structure_get_double (s, "total", &total));
      fail_unless (gst_structure_get_int (s, "steps", &steps));
      fail_unless (gst_structure_get_int (s, "frames", &frames));
      fail_unless_equals_int (steps, STEPS);
      fail_unless_equals_int (frames, FRAMES);
      fail_unless (total > 0);
    }
    gst_message_unref (m);
  }
  fail_unless (got_done);

  /* The stats property holds the same timings. */
  g_object_get (c.hv->element, "stats", &stats, NULL);
  fail_unless (stats != NULL);
  fail_unless (gst_structure_has_name (stats, "h3videosrc/stats"));
  {
    gint steps;
    gdouble total, denoise;
    fail_unless (gst_structure_get_int (stats, "steps", &steps));
    fail_unless_equals_int (steps, STEPS);
    fail_unless (gst_structure_get_double (stats, "total", &total));
    fail_unless (gst_structure_get_double (stats, "denoise", &denoise));
    fail_unless (total >= denoise && denoise > 0);
    fail_unless (gst_structure_get_string (stats, "compute") != NULL);
  }
  gst_structure_free (stats);

  output_clear (&v);
  output_clear (&a);
  gst_bus_set_sync_handler (c.bus, NULL, NULL, NULL);
  clip_free (&c);
  g_ptr_array_unref (l.log);
  g_mutex_clear (&l.lock);
}

GST_END_TEST;

/* ---- tests: stopping -------------------------------------------------------- */

typedef struct
{
  gint buffers;
  gboolean eos;
} PadCount;

static GstPadProbeReturn
count_data (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  PadCount *pc = data;

  if (info->type & GST_PAD_PROBE_TYPE_BUFFER)
    g_atomic_int_inc (&pc->buffers);
  else if (GST_EVENT_TYPE (GST_PAD_PROBE_INFO_EVENT (info)) == GST_EVENT_EOS)
    g_atomic_int_set (&pc->eos, TRUE);
  return GST_PAD_PROBE_OK;
}

typedef struct
{
  GstElement *pipeline, *src;
  GstBus *bus;
  PadCount video, audio;
  GstStreamConsistency *cv, *ca;
} Pipe;

static void
pipe_new (Pipe * p, const gchar * desc)
{
  GError *err = NULL;
  GstPad *pad;

  memset (p, 0, sizeof *p);
  p->pipeline = gst_parse_launch (desc, &err);
  fail_unless (p->pipeline != NULL, "%s: %s", desc, err ? err->message : "");
  p->src = gst_bin_get_by_name (GST_BIN (p->pipeline), "s");
  p->bus = gst_element_get_bus (p->pipeline);
  pad = gst_element_get_static_pad (p->src, "video");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER |
      GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, count_data, &p->video, NULL);
  p->cv = gst_consistency_checker_new (pad);
  gst_object_unref (pad);
  pad = gst_element_get_static_pad (p->src, "audio");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER |
      GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, count_data, &p->audio, NULL);
  p->ca = gst_consistency_checker_new (pad);
  gst_object_unref (pad);
}

static void
pipe_free (Pipe * p)
{
  fail_unless_equals_int (gst_element_set_state (p->pipeline,
          GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  gst_consistency_checker_free (p->cv);
  gst_consistency_checker_free (p->ca);
  gst_bus_set_flushing (p->bus, TRUE);
  gst_object_unref (p->bus);
  gst_object_unref (p->pipeline);
  unref_and_wait (p->src);
}

/* Runs a pipeline to EOS or error; returns the error message or NULL. */
static GstMessage *
pipe_run (Pipe * p)
{
  GstMessage *m;

  gst_element_set_state (p->pipeline, GST_STATE_PLAYING);
  m = gst_bus_timed_pop_filtered (p->bus, 120 * GST_SECOND,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  fail_unless (m != NULL, "neither EOS nor an error within 120 s");
  if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_EOS) {
    gst_message_unref (m);
    return NULL;
  }
  return m;
}

#define LONG_PIPE \
  "h3videosrc name=s prompt=\"" PROMPT "\" width=64 height=32 num-frames=22 " \
  "steps=1000 s.video ! queue ! fakesink s.audio ! queue ! fakesink"

GST_START_TEST (test_eos_mid_generation)
{
  Pipe p;
  GstMessage *m;
  gint64 t0;
  gboolean canceled = FALSE;

  pipe_new (&p, LONG_PIPE);
  fail_unless (gst_element_set_state (p.pipeline, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  fail_unless (wait_element_message (p.bus, "h3videosrc/step",
          60 * GST_SECOND), "no denoising step within 60 s");

  t0 = g_get_monotonic_time ();
  fail_unless (gst_element_send_event (p.pipeline, gst_event_new_eos ()));
  /* (A filtered pop drops what it skips: take the progress too.) */
  while ((m = gst_bus_timed_pop_filtered (p.bus, time_limit_us (5.0) * 1000,
              GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_PROGRESS))) {
    GstMessageType type = GST_MESSAGE_TYPE (m);
    if (type == GST_MESSAGE_PROGRESS) {
      GstProgressType ptype;
      gchar *code, *text;
      gst_message_parse_progress (m, &ptype, &code, &text);
      canceled |= ptype == GST_PROGRESS_TYPE_CANCELED &&
          g_strcmp0 (code, "generate") == 0;
      g_free (code);
      g_free (text);
    }
    gst_message_unref (m);
    fail_if (type == GST_MESSAGE_ERROR, "error after the EOS event");
    if (type == GST_MESSAGE_EOS)
      break;
  }
  fail_unless (m != NULL, "no EOS within 5 s of the EOS event");
  GST_INFO ("EOS after %.3f s", (g_get_monotonic_time () - t0) / 1e6);
  fail_unless (g_atomic_int_get (&p.video.eos));
  fail_unless (g_atomic_int_get (&p.audio.eos));
  /* Stopped during denoising: no media was decoded. */
  fail_unless_equals_int (g_atomic_int_get (&p.video.buffers), 0);
  fail_unless_equals_int (g_atomic_int_get (&p.audio.buffers), 0);
  fail_unless (canceled, "no generate CANCELED progress message");
  pipe_free (&p);
}

GST_END_TEST;

GST_START_TEST (test_null_within_one_second)
{
  Pipe p;
  gint64 t0, dt;
  GstStateChangeReturn ret;

  pipe_new (&p, LONG_PIPE);
  fail_unless (gst_element_set_state (p.pipeline, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  fail_unless (wait_element_message (p.bus, "h3videosrc/step",
          60 * GST_SECOND), "no denoising step within 60 s");
  t0 = g_get_monotonic_time ();
  ret = gst_element_set_state (p.pipeline, GST_STATE_NULL);
  dt = g_get_monotonic_time () - t0;
  fail_unless_equals_int (ret, GST_STATE_CHANGE_SUCCESS);
  GST_INFO ("NULL reached in %.3f s", dt / 1e6);
  fail_unless (dt < time_limit_us (1.0), "NULL took %.3f s", dt / 1e6);
  pipe_free (&p);
}

GST_END_TEST;

GST_START_TEST (test_only_video_linked)
{
  Pipe p;
  GstMessage *err;

  pipe_new (&p, "h3videosrc name=s prompt=\"" PROMPT "\" width=64 height=32 "
      "num-frames=22 steps=2 s.video ! queue ! fakesink");
  err = pipe_run (&p);
  fail_unless (err == NULL, "error with only video linked");
  fail_unless_equals_int (p.video.buffers, FRAMES);
  fail_unless (p.video.eos);
  /* The unlinked pad's EOS reaches no sink, so the pipeline's EOS does not
   * wait for it: it comes at about the same time. */
  for (gint i = 0; i < 500 && !g_atomic_int_get (&p.audio.eos); i++)
    g_usleep (10000);
  fail_unless (g_atomic_int_get (&p.audio.eos), "no EOS on the audio pad");
  pipe_free (&p);
}

GST_END_TEST;

/* Linking nothing is an error, as for any source (not-linked). */
GST_START_TEST (test_nothing_linked_is_stream_error)
{
  GstElement *pipeline = gst_pipeline_new (NULL);
  GstElement *src = gst_element_factory_make ("h3videosrc", NULL);
  GstBus *bus = gst_element_get_bus (pipeline);

  set_small (src, 42);
  gst_bin_add (GST_BIN (pipeline), src);
  /* Known at the state change: nothing is loaded for nothing. */
  fail_unless_equals_int (gst_element_set_state (pipeline,
          GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  expect_error_saying (bus, GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
      "nothing linked", "linked");
  fail_unless_equals_int (gst_element_set_state (pipeline, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_object_unref (bus);
  gst_object_ref (src);
  gst_object_unref (pipeline);
  unref_and_wait (src);
}

GST_END_TEST;

/* A device failure in the middle of denoising (the engine's H3_INJECT_FAULT
 * hook) reaches the bus as a RESOURCE/FAILED error with the engine's words,
 * the progress ends in ERROR, and the pipeline shuts down cleanly. */
GST_START_TEST (test_device_failure_mid_generation)
{
  Pipe p;
  GstMessage *m;
  GError *err = NULL;
  gchar *dbg = NULL;

  g_setenv ("H3_INJECT_FAULT", "0:1", TRUE);
  pipe_new (&p, "h3videosrc name=s prompt=\"" PROMPT "\" width=64 height=32 "
      "num-frames=22 steps=4 s.video ! queue ! fakesink s.audio ! queue ! "
      "fakesink");
  m = pipe_run (&p);
  g_unsetenv ("H3_INJECT_FAULT");
  fail_unless (m != NULL, "EOS despite a device failure");
  gst_message_parse_error (m, &err, &dbg);
  fail_unless (err->domain == GST_RESOURCE_ERROR &&
      err->code == GST_RESOURCE_ERROR_FAILED, "%s (%s)", err->message, dbg);
  fail_unless (strstr (err->message, "injected fault") != NULL, "%s",
      err->message);
  fail_unless (p.video.buffers == 0 && p.audio.buffers == 0,
      "%d video and %d audio buffers before the failure", p.video.buffers,
      p.audio.buffers);
  g_error_free (err);
  g_free (dbg);
  gst_message_unref (m);
  pipe_free (&p);
}

GST_END_TEST;

/* ---- tests: properties, queries, errors ----------------------------------- */

/* Downstream refusing the caps fails the state change to PAUSED, before
 * any model load, naming what the pad carries. */
GST_START_TEST (test_caps_negotiation_failure)
{
  Clip c;

  clip_new (&c, 42);
  gst_harness_set_sink_caps_str (c.hv, "video/x-raw, format=I420");
  fail_unless_equals_int (gst_element_set_state (c.hv->element,
          GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  expect_error_saying (c.bus, GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION,
      "video pad refused", "RGB video at 64x32");
  fail_unless_equals_int (count_messages (c.bus, GST_MESSAGE_PROGRESS), 0);
  gst_element_set_state (c.hv->element, GST_STATE_NULL);
  clip_free (&c);
}

GST_END_TEST;

GST_START_TEST (test_properties)
{
  GstElement *e = gst_element_factory_make ("h3videosrc", NULL);
  gint w, aligned;
  gchar *loc, *prompt;
  guint64 seed;
  GstStructure *caps = NULL, *stats = (GstStructure *) 0x1;

  g_object_get (e, "width", &w, "seed", &seed, "aligned-frames", &aligned,
      "model-location", &loc, "prompt", &prompt, "stats", &stats, NULL);
  fail_unless_equals_int (w, 1280);
  fail_unless_equals_uint64 (seed, 42);
  fail_unless_equals_int (aligned, 124);  /* default 120 -> 17*7+5 */
  fail_unless (loc != NULL && g_file_test (loc, G_FILE_TEST_IS_DIR),
      "default model dir %s", loc);
  fail_unless (prompt == NULL);
  fail_unless (stats == NULL);
  g_free (loc);

  for (gint req = 1; req <= 362; req++) {
    g_object_set (e, "num-frames", req, NULL);
    g_object_get (e, "aligned-frames", &aligned, NULL);
    fail_unless (aligned >= req && aligned >= 22 && (aligned - 5) % 17 == 0
        && aligned - req < 17 + (req < 22 ? 22 : 0), "%d -> %d", req,
        aligned);
  }

  g_object_get (e, "capabilities", &caps, NULL);
  fail_unless (caps != NULL);
  fail_unless (gst_structure_has_name (caps, "h3videosrc/capabilities"));
  fail_unless (gst_structure_get_string (caps, "description") != NULL);
  gst_structure_free (caps);
  gst_object_unref (e);
}

GST_END_TEST;

/* A capabilities field as an integer, whatever type the element gives it
 * (the text of its `key: value` line, or a number). */
static gboolean
capabilities_int (const GstStructure * st, const gchar * name, gint64 * out)
{
  const GValue *v = gst_structure_get_value (st, name);
  GValue n = G_VALUE_INIT;

  if (!v)
    return FALSE;
  if (G_VALUE_HOLDS_STRING (v)) {
    const gchar *text = g_value_get_string (v);
    gchar *end = NULL;
    if (!text)
      return FALSE;
    *out = g_ascii_strtoll (text, &end, 10);
    return end != text && *end == '\0';
  }
  g_value_init (&n, G_TYPE_INT64);
  if (!g_value_transform (v, &n))
    return FALSE;
  *out = g_value_get_int64 (&n);
  return TRUE;
}

/* A capabilities field as text, whatever its type. */
static gchar *
capabilities_text (const GstStructure * st, const gchar * name)
{
  const GValue *v = gst_structure_get_value (st, name);

  if (!v)
    return NULL;
  if (G_VALUE_HOLDS_STRING (v))
    return g_value_dup_string (v);
  return gst_value_serialize (v);
}

/* What h3_capabilities_describe reports about the machine reaches the
 * element: CPU threads, GPUs and what compute=auto picks. */
GST_START_TEST (test_capabilities_fields)
{
  GstElement *e = gst_element_factory_make ("h3videosrc", NULL);
  GstStructure *caps = NULL;
  gint64 threads = -1, gpus = -1;
  gchar *compute;

  g_object_get (e, "capabilities", &caps, NULL);
  fail_unless (caps != NULL);
  GST_INFO ("%" GST_PTR_FORMAT, caps);
  fail_unless (capabilities_int (caps, "cpu-threads", &threads),
      "no cpu-threads in %" GST_PTR_FORMAT, caps);
  fail_unless (threads >= 1, "cpu-threads %" G_GINT64_FORMAT, threads);
  fail_unless (capabilities_int (caps, "gpus", &gpus),
      "no gpus in %" GST_PTR_FORMAT, caps);
  fail_unless (gpus >= 0, "gpus %" G_GINT64_FORMAT, gpus);
  compute = capabilities_text (caps, "compute-auto");
  fail_unless (compute != NULL, "no compute-auto in %" GST_PTR_FORMAT, caps);
  fail_unless (g_strcmp0 (compute, "cpu") == 0
      || g_strcmp0 (compute, "cuda") == 0, "compute-auto '%s'", compute);
  /* compute=auto only picks CUDA with a GPU to run on. */
  fail_unless (g_strcmp0 (compute, "cuda") != 0 || gpus >= 1,
      "compute-auto cuda with %" G_GINT64_FORMAT " GPUs", gpus);
  g_free (compute);
  gst_structure_free (caps);
  gst_object_unref (e);
}

GST_END_TEST;

GST_START_TEST (test_property_locked_while_playing)
{
  Clip c;
  Output v, a;
  gint w;
  gchar *prompt;

  clip_new (&c, 42);
  gst_harness_play (c.hv);
  g_object_set (c.hv->element, "width", 128, "prompt", "something else",
      NULL);
  g_object_get (c.hv->element, "width", &w, "prompt", &prompt, NULL);
  fail_unless_equals_int (w, W);
  fail_unless_equals_string (prompt, PROMPT);
  g_free (prompt);
  output_collect (c.hv, &v);
  output_collect (c.ha, &a);
  fail_unless_equals_int (v.buffers->len, FRAMES);
  output_clear (&v);
  output_clear (&a);
  /* Back in READY the change is accepted. */
  gst_element_set_state (c.hv->element, GST_STATE_READY);
  g_object_set (c.hv->element, "width", 128, NULL);
  g_object_get (c.hv->element, "width", &w, NULL);
  fail_unless_equals_int (w, 128);
  clip_free (&c);
}

GST_END_TEST;

GST_START_TEST (test_queries)
{
  GstElement *e = gst_element_factory_make ("h3videosrc", NULL);
  GstPad *vpad = gst_element_get_static_pad (e, "video");
  GstPad *apad = gst_element_get_static_pad (e, "audio");
  GstQuery *q;
  gint64 dur;
  gboolean live, seekable;
  GstClockTime min, max;
  GstFormat fmt;
  GstCaps *caps;

  set_small (e, 42);
  fail_unless (gst_element_query_duration (e, GST_FORMAT_TIME, &dur));
  fail_unless_equals_uint64 (dur, frame_time (FRAMES));
  fail_unless (gst_pad_query_duration (apad, GST_FORMAT_TIME, &dur));
  fail_unless_equals_uint64 (dur, frame_time (FRAMES));
  fail_unless (gst_pad_query_duration (vpad, GST_FORMAT_DEFAULT, &dur));
  fail_unless_equals_int (dur, FRAMES);

  q = gst_query_new_latency ();
  fail_unless (gst_pad_query (vpad, q));
  gst_query_parse_latency (q, &live, &min, &max);
  fail_if (live);
  fail_unless_equals_uint64 (min, 0);
  gst_query_unref (q);

  q = gst_query_new_seeking (GST_FORMAT_TIME);
  fail_unless (gst_pad_query (vpad, q));
  gst_query_parse_seeking (q, &fmt, &seekable, NULL, &dur);
  /* The clip will be kept (keep-clip, far below keep-clip-max-bytes). */
  fail_unless (seekable);
  fail_unless_equals_uint64 (dur, frame_time (FRAMES));
  gst_query_unref (q);

  /* Caps follow the properties before a run. */
  caps = gst_pad_query_caps (vpad, NULL);
  fail_unless (gst_caps_is_fixed (caps), "%" GST_PTR_FORMAT, caps);
  fail_unless (caps_equal (caps, "video/x-raw, format=RGB, width=64, "
          "height=32, framerate=24/1, pixel-aspect-ratio=1/1"));
  gst_caps_unref (caps);

  /* Outside a run, a seek is refused (tests/gst/test_h3videosrc_seek.c
   * seeks in runs). */
  fail_if (gst_element_send_event (e, gst_event_new_seek (1.0,
              GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH, GST_SEEK_TYPE_SET,
              GST_SECOND / 2, GST_SEEK_TYPE_NONE, -1)));
  /* EOS outside a run is refused too. */
  fail_if (gst_element_send_event (e, gst_event_new_eos ()));

  gst_object_unref (vpad);
  gst_object_unref (apad);
  gst_object_unref (e);
}

GST_END_TEST;

/* Starts a lone element with bad settings (property, value, ..., NULL);
 * the state change to PAUSED fails, and the error has the expected domain
 * and says must_say (when not NULL). */
static void
check_settings_error (GQuark domain, gint code, const gchar * must_say,
    const gchar * prop, ...)
{
  GstElement *e = gst_element_factory_make ("h3videosrc", NULL);
  GstBus *bus = gst_bus_new ();
  GString *what = g_string_new (NULL);
  va_list args;

  set_small (e, 42);
  va_start (args, prop);
  for (const gchar * p = prop; p; p = va_arg (args, const gchar *)) {
    const gchar *value = va_arg (args, const gchar *);
    gst_util_set_object_arg (G_OBJECT (e), p, value);
    g_string_append_printf (what, "%s%s=%s", what->len ? " " : "", p, value);
  }
  va_end (args);
  gst_element_set_bus (e, bus);
  fail_unless_equals_int (gst_element_set_state (e, GST_STATE_PAUSED),
      GST_STATE_CHANGE_FAILURE);
  expect_error_saying (bus, domain, code, what->str, must_say);
  /* Found before anything loads: no `load` progress at all. */
  fail_unless_equals_int (count_messages (bus, GST_MESSAGE_PROGRESS), 0);
  gst_element_set_state (e, GST_STATE_NULL);
  gst_bus_set_flushing (bus, TRUE);
  gst_object_unref (bus);
  unref_and_wait (e);
  g_string_free (what, TRUE);
}

static void
check_setting_error (const gchar * prop, const gchar * value, GQuark domain,
    gint code)
{
  check_settings_error (domain, code, NULL, prop, value, NULL);
}

GST_START_TEST (test_error_domains)
{
  gchar *notamodel;

  check_setting_error ("width", "100", GST_LIBRARY_ERROR,
      GST_LIBRARY_ERROR_SETTINGS);
  check_setting_error ("height", "4096", GST_LIBRARY_ERROR,
      GST_LIBRARY_ERROR_SETTINGS);       /* 64x4096: aspect beyond 1:4 */
  check_setting_error ("prompt", "   ", GST_LIBRARY_ERROR,
      GST_LIBRARY_ERROR_SETTINGS);
  check_setting_error ("devices", "gpu0", GST_LIBRARY_ERROR,
      GST_LIBRARY_ERROR_SETTINGS);
  check_setting_error ("model-location", "/nonexistent/MiniMax-H3",
      GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND);
  check_setting_error ("adapter-location", "/nonexistent/adapter.safetensors",
      GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND);

  /* A directory that is not a model, and an adapter that is not a
   * safetensors file: found from the files, at the state change too,
   * before anything loads. */
  notamodel = g_dir_make_tmp ("h3videosrc-XXXXXX", NULL);
  check_setting_error ("model-location", notamodel, GST_RESOURCE_ERROR,
      GST_RESOURCE_ERROR_NOT_FOUND);
  {
    gchar *bogus = g_build_filename (notamodel, "adapter.safetensors", NULL);
    fail_unless (g_file_set_contents (bogus, "{\"not\": \"safetensors\"}",
            -1, NULL));
    check_setting_error ("adapter-location", bogus, GST_RESOURCE_ERROR,
        GST_RESOURCE_ERROR_OPEN_READ);
    g_unlink (bogus);
    g_free (bogus);
  }
  g_rmdir (notamodel);
  g_free (notamodel);
}

GST_END_TEST;

/* The devices grammar is h3core's (h3_devices_parse): a bad list fails the
 * state change in the engine's words, which name the value, and a GPU list
 * with compute=cpu suggests the cpu:N of as many ranks. */
GST_START_TEST (test_devices_errors)
{
  check_settings_error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS,
      "0,x", "devices", "0,x", NULL);
  check_settings_error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS,
      "use devices=cpu:1", "devices", "0", "compute", "cpu", NULL);
}

GST_END_TEST;

/* ---- tests: start/stop cycles ------------------------------------------------ */

static GstTracer *
leaks_tracer (void)
{
  GList *tracers = gst_tracing_get_active_tracers ();
  GstTracer *found = NULL;

  for (GList * l = tracers; l; l = l->next)
    if (!found && g_strcmp0 (G_OBJECT_TYPE_NAME (l->data),
            "GstLeaksTracer") == 0)
      found = gst_object_ref (l->data);
  g_list_free_full (tracers, gst_object_unref);
  return found;
}

static guint
live_objects (GstTracer * tracer)
{
  GstStructure *info = NULL;
  const GValue *list;
  guint n;

  g_signal_emit_by_name (tracer, "get-live-objects", &info);
  list = gst_structure_get_value (info, "live-objects-list");
  n = gst_value_list_get_size (list);
  for (guint i = 0; i < n; i++) {
    const GstStructure *o =
        gst_value_get_structure (gst_value_list_get_value (list, i));
    GST_LOG ("live: %" GST_PTR_FORMAT, o);
  }
  gst_structure_free (info);
  return n;
}

static void
one_cycle (Pipe * p, gint i)
{
  GstStateChangeReturn ret;
  gint64 t0;

  fail_unless (gst_element_set_state (p->pipeline, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  /* Stop at different points: right away, or during denoising. */
  if (i % 2)
    fail_unless (wait_element_message (p->bus, "h3videosrc/step",
            60 * GST_SECOND), "cycle %d: no step", i);
  t0 = g_get_monotonic_time ();
  ret = gst_element_set_state (p->pipeline, GST_STATE_NULL);
  fail_unless_equals_int (ret, GST_STATE_CHANGE_SUCCESS);
  fail_unless (g_get_monotonic_time () - t0 < time_limit_us (1.0),
      "cycle %d: NULL took %.3f s", i, (g_get_monotonic_time () - t0) / 1e6);
  fail_unless_equals_int (count_messages (p->bus, GST_MESSAGE_ERROR), 0);
  count_messages (p->bus, GST_MESSAGE_ANY);
}

GST_START_TEST (test_start_stop_cycles)
{
  GstTracer *tracer = leaks_tracer ();
  Pipe p;
  guint before = 0, after;

  /* Warm up once so that what GStreamer creates lazily and keeps (clocks,
   * caps caches, task pools) is in the baseline. */
  pipe_new (&p, LONG_PIPE);
  one_cycle (&p, 1);
  pipe_free (&p);
  if (tracer)
    before = live_objects (tracer);

  pipe_new (&p, LONG_PIPE);
  for (gint i = 0; i < 50; i++)
    one_cycle (&p, i);
  pipe_free (&p);

  if (tracer) {
    after = live_objects (tracer);
    GST_INFO ("live objects: %u before, %u after 50 cycles", before, after);
    fail_unless_equals_int (after, before);
    gst_object_unref (tracer);
  } else {
    GST_WARNING ("GST_TRACERS=leaks is not set: object count not checked");
  }
}

GST_END_TEST;

/* ---- tests: what fails before the model loads ------------------------------ */

/* What this machine and build can run, from the capabilities property. */
static void
machine_gpus (gint * gpus, gboolean * cuda_built)
{
  GstElement *e = gst_element_factory_make ("h3videosrc", NULL);
  GstStructure *caps = NULL;
  gint64 n = 0;
  gchar *build;

  g_object_get (e, "capabilities", &caps, NULL);
  fail_unless (capabilities_int (caps, "gpus", &n));
  build = capabilities_text (caps, "build");
  *gpus = (gint) n;
  *cuda_built = build && strstr (build, "cuda") != NULL;
  g_free (build);
  gst_structure_free (caps);
  gst_object_unref (e);
}

/* Everything that needs no weight fails the state change to PAUSED, in
 * milliseconds, with nothing loaded (check_settings_error checks that no
 * progress was posted): backend against the adapter's kind, compute and
 * devices against this build and machine. */
GST_START_TEST (test_early_settings_errors)
{
  gint gpus;
  gboolean cuda_built;
  gchar *past_last;

  check_settings_error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS,
      "backend=vsa", "backend", "vsa", NULL);
  check_settings_error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS,
      "backend=fa", "load-format", "dummy", "dummy-adapter", "vsa", NULL);
  check_settings_error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS,
      "backend=vsa", "load-format", "dummy", "dummy-adapter", "dense",
      "backend", "vsa", NULL);
  check_settings_error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS,
      "steps 2", "load-format", "dummy", "dummy-adapter", "dense", NULL);

  /* compute=cuda says what is missing; never "fewer frames". */
  machine_gpus (&gpus, &cuda_built);
  GST_INFO ("%d GPU(s), %s", gpus, cuda_built ? "CUDA build" : "no CUDA");
  if (!cuda_built)
    check_settings_error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS,
        "no CUDA backend", "compute", "cuda", NULL);
  else if (gpus == 0)
    check_settings_error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND,
        "compute=cpu", "compute", "cuda", NULL);
  past_last = g_strdup_printf ("%d", gpus);
  if (!cuda_built)
    check_settings_error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS,
        "no CUDA backend", "devices", past_last, NULL);
  else if (gpus == 0)
    check_settings_error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND,
        "driver", "devices", past_last, NULL);
  else
    check_settings_error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND,
        "does not exist", "devices", past_last, NULL);
  g_free (past_last);
}

GST_END_TEST;

/* The audio rate is the model's, read from its configs before any load:
 * the caps query answers it outside a run, the stream collection carries
 * both streams' caps, and a capsfilter that wants another rate fails the
 * state change with a message that names the rate. */
GST_START_TEST (test_caps_before_loading)
{
  GstElement *e = gst_element_factory_make ("h3videosrc", NULL);
  GstPad *apad = gst_element_get_static_pad (e, "audio");
  gint rate = model_rate ();
  gchar *expected = g_strdup_printf ("audio/x-raw, format=F32LE, rate=%d, "
      "channels=2, layout=interleaved, channel-mask=(bitmask)0x3", rate);
  gchar *desc, *rate_text;
  GstCaps *caps;
  Pipe p;
  GstMessage *m;
  GstStreamCollection *coll = NULL;

  set_small (e, 42);
  caps = gst_pad_query_caps (apad, NULL);
  fail_unless (caps_equal (caps, expected), "audio caps %" GST_PTR_FORMAT
      " before a run, expected %s", caps, expected);
  gst_caps_unref (caps);
  gst_object_unref (apad);
  gst_object_unref (e);

  /* The collection, posted at READY->PAUSED, before the model loads. */
  pipe_new (&p, "h3videosrc name=s prompt=\"" PROMPT "\" width=64 height=32 "
      "num-frames=22 steps=2 s.video ! queue ! fakesink s.audio ! queue ! "
      "fakesink");
  fail_unless (gst_element_set_state (p.pipeline, GST_STATE_PAUSED) !=
      GST_STATE_CHANGE_FAILURE);
  m = gst_bus_timed_pop_filtered (p.bus, 10 * GST_SECOND,
      GST_MESSAGE_STREAM_COLLECTION);
  fail_unless (m != NULL, "no stream collection");
  gst_message_parse_stream_collection (m, &coll);
  fail_unless_equals_int (gst_stream_collection_get_size (coll), 2);
  for (guint i = 0; i < 2; i++) {
    GstStream *st = gst_stream_collection_get_stream (coll, i);
    GstCaps *sc = gst_stream_get_caps (st);
    fail_unless (sc != NULL, "stream %s has no caps",
        gst_stream_get_stream_id (st));
    if (gst_stream_get_stream_type (st) == GST_STREAM_TYPE_AUDIO)
      fail_unless (caps_equal (sc, expected), "%" GST_PTR_FORMAT, sc);
    gst_caps_unref (sc);
  }
  gst_object_unref (coll);
  gst_message_unref (m);
  pipe_free (&p);

  /* A capsfilter forcing another rate: gst_parse_launch cannot even link
   * it (the caps query answers the model's rate). */
  desc = g_strdup_printf ("h3videosrc name=s prompt=\"" PROMPT "\" width=64 "
      "height=32 num-frames=22 steps=2 s.video ! queue ! fakesink s.audio ! "
      "audio/x-raw,rate=%d ! fakesink", rate == 48000 ? 44100 : 48000);
  {
    GError *err = NULL;
    GstElement *pipeline = gst_parse_launch (desc, &err);
    fail_unless (err != NULL && g_error_matches (err, GST_PARSE_ERROR,
            GST_PARSE_ERROR_LINK), "%s linked", desc);
    GST_INFO ("%s", err->message);
    g_clear_error (&err);
    gst_clear_object (&pipeline);
  }
  g_free (desc);
  /* One whose caps change after the link (an application's): refused at
   * the state change, before anything loads, naming the rate. */
  pipe_new (&p, "h3videosrc name=s prompt=\"" PROMPT "\" width=64 height=32 "
      "num-frames=22 steps=2 s.video ! queue ! fakesink s.audio ! "
      "capsfilter name=cf ! fakesink");
  {
    GstElement *cf = gst_bin_get_by_name (GST_BIN (p.pipeline), "cf");
    desc = g_strdup_printf ("audio/x-raw,rate=%d", rate == 48000 ? 44100 :
        48000);
    gst_util_set_object_arg (G_OBJECT (cf), "caps", desc);
    gst_object_unref (cf);
  }
  fail_unless_equals_int (gst_element_set_state (p.pipeline,
          GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  rate_text = g_strdup_printf ("%d Hz", rate);
  expect_error_saying (p.bus, GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION,
      "capsfilter with another rate", rate_text);
  fail_unless_equals_int (count_messages (p.bus, GST_MESSAGE_PROGRESS), 0);
  pipe_free (&p);
  g_free (rate_text);
  g_free (desc);
  g_free (expected);
}

GST_END_TEST;

/* ---- tests: stats and done before EOS -------------------------------------- */

typedef struct
{
  GMutex lock;
  GstElement *src;
  gboolean done_seen;
  gdouble done_total;
  gint eos_checked;
  gchar *failure;
} EosCheck;

static GstBusSyncReply
eos_check_bus (GstBus * bus, GstMessage * m, gpointer data)
{
  EosCheck *c = data;

  if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ELEMENT
      && gst_message_has_name (m, "h3videosrc/done")) {
    g_mutex_lock (&c->lock);
    c->done_seen = TRUE;
    gst_structure_get_double (gst_message_get_structure (m), "total",
        &c->done_total);
    g_mutex_unlock (&c->lock);
  }
  return GST_BUS_PASS;
}

/* At the moment EOS leaves a pad: this run's done was posted, and `stats`
 * holds this run's timings (the done message's). */
static GstPadProbeReturn
eos_check_probe (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  EosCheck *c = data;
  GstStructure *stats = NULL;
  gdouble total = -1;

  if (GST_EVENT_TYPE (GST_PAD_PROBE_INFO_EVENT (info)) != GST_EVENT_EOS)
    return GST_PAD_PROBE_OK;
  g_object_get (c->src, "stats", &stats, NULL);
  if (stats)
    gst_structure_get_double (stats, "total", &total);
  g_mutex_lock (&c->lock);
  if (!c->failure && !c->done_seen)
    c->failure = g_strdup_printf ("EOS on %s before h3videosrc/done",
        GST_PAD_NAME (pad));
  else if (!c->failure && total != c->done_total)
    c->failure = g_strdup_printf ("EOS on %s with stale stats (total %g, "
        "this clip's %g)", GST_PAD_NAME (pad), total, c->done_total);
  c->eos_checked++;
  g_mutex_unlock (&c->lock);
  if (stats)
    gst_structure_free (stats);
  return GST_PAD_PROBE_OK;
}

static void
check_stats_before_eos (const gchar * sink, gint runs)
{
  gchar *desc = g_strdup_printf ("h3videosrc name=s prompt=\"" PROMPT "\" "
      "width=64 height=32 num-frames=22 steps=2 s.video ! queue ! %s "
      "s.audio ! queue ! %s", sink, sink);
  EosCheck c;
  Pipe p;
  GstPad *pad;

  memset (&c, 0, sizeof c);
  g_mutex_init (&c.lock);
  pipe_new (&p, desc);
  c.src = p.src;
  gst_bus_set_sync_handler (p.bus, eos_check_bus, &c, NULL);
  for (const gchar * const *name = (const gchar *[]) {
  "video", "audio", NULL}; *name; name++) {
    pad = gst_element_get_static_pad (p.src, *name);
    gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM,
        eos_check_probe, &c, NULL);
    gst_object_unref (pad);
  }
  /* The same element again and again: stale stats would be the last
   * run's. */
  for (gint i = 0; i < runs; i++) {
    g_mutex_lock (&c.lock);
    c.done_seen = FALSE;
    g_mutex_unlock (&c.lock);
    fail_unless (pipe_run (&p) == NULL, "%s: run %d failed", sink, i);
    fail_unless_equals_int (gst_element_set_state (p.pipeline,
            GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
    g_mutex_lock (&c.lock);
    fail_unless (c.failure == NULL, "%s, run %d: %s", sink, i, c.failure);
    g_mutex_unlock (&c.lock);
  }
  fail_unless_equals_int (c.eos_checked, 2 * runs);
  gst_bus_set_sync_handler (p.bus, NULL, NULL, NULL);
  pipe_free (&p);
  g_mutex_clear (&c.lock);
  g_free (desc);
}

/* The stats and the done message of a clip are out before its EOS, with
 * sinks that synchronise to the clock and with an async sink that does
 * not (filesink), over several runs of one element. */
GST_START_TEST (test_stats_before_eos)
{
  check_stats_before_eos ("fakesink sync=true", 3);
  check_stats_before_eos ("filesink location=/dev/null", 5);
  check_stats_before_eos ("fakesink sync=false async=false", 5);
}

GST_END_TEST;

/* ---- tests: one engine for the process ------------------------------------- */

typedef struct
{
  GstElement *pipeline, *src;
  GstBus *bus;
  GChecksum *video, *audio;
  gint loads;                   /* `load` START messages (atomic) */
  gint waits, waits_done;       /* `wait` START and terminal messages */
  gint waiting_load, waiting_turn;      /* h3videosrc/waiting by reason */
  gchar *holder;                /* of the last h3videosrc/waiting */
} Shared;

static GstBusSyncReply
shared_count_load (GstBus * bus, GstMessage * m, gpointer data)
{
  Shared *sh = data;

  if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_PROGRESS) {
    GstProgressType pt;
    gchar *code, *text;
    gst_message_parse_progress (m, &pt, &code, &text);
    if (pt == GST_PROGRESS_TYPE_START && g_strcmp0 (code, "load") == 0)
      g_atomic_int_inc (&sh->loads);
    if (g_strcmp0 (code, "wait") == 0) {
      GST_INFO ("%s: %s", GST_MESSAGE_SRC_NAME (m), text);
      if (pt == GST_PROGRESS_TYPE_START)
        g_atomic_int_inc (&sh->waits);
      else if (pt != GST_PROGRESS_TYPE_CONTINUE)
        g_atomic_int_inc (&sh->waits_done);
    }
    g_free (code);
    g_free (text);
  } else if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ELEMENT
      && gst_message_has_name (m, "h3videosrc/waiting")) {
    const GstStructure *st = gst_message_get_structure (m);
    const gchar *reason = gst_structure_get_string (st, "reason");
    g_atomic_int_inc (g_strcmp0 (reason, "load") == 0 ? &sh->waiting_load :
        &sh->waiting_turn);
    g_free (sh->holder);
    sh->holder = g_strdup (gst_structure_get_string (st, "holder"));
  }
  return GST_BUS_PASS;
}

static void
shared_handoff (GstElement * sink, GstBuffer * buf, GstPad * pad,
    gpointer data)
{
  GChecksum *sum = data;
  GstMapInfo map;

  gst_buffer_map (buf, &map, GST_MAP_READ);
  g_checksum_update (sum, map.data, map.size);
  gst_buffer_unmap (buf, &map);
}

static void
shared_new (Shared * sh, guint64 seed, guint steps, gboolean cache)
{
  gchar *desc = g_strdup_printf ("h3videosrc name=s prompt=\"" PROMPT "\" "
      "width=64 height=32 num-frames=22 steps=%u seed=%" G_GUINT64_FORMAT
      " engine-cache=%s s.video ! queue ! fakesink name=vs "
      "signal-handoffs=true s.audio ! queue ! fakesink name=as "
      "signal-handoffs=true", steps, seed, cache ? "true" : "false");
  GError *err = NULL;
  GstElement *vs, *as;

  memset (sh, 0, sizeof *sh);
  sh->pipeline = gst_parse_launch (desc, &err);
  fail_unless (sh->pipeline != NULL, "%s", err ? err->message : "");
  sh->src = gst_bin_get_by_name (GST_BIN (sh->pipeline), "s");
  sh->bus = gst_element_get_bus (sh->pipeline);
  gst_bus_set_sync_handler (sh->bus, shared_count_load, sh, NULL);
  sh->video = g_checksum_new (G_CHECKSUM_SHA256);
  sh->audio = g_checksum_new (G_CHECKSUM_SHA256);
  vs = gst_bin_get_by_name (GST_BIN (sh->pipeline), "vs");
  as = gst_bin_get_by_name (GST_BIN (sh->pipeline), "as");
  g_signal_connect (vs, "handoff", G_CALLBACK (shared_handoff), sh->video);
  g_signal_connect (as, "handoff", G_CALLBACK (shared_handoff), sh->audio);
  gst_object_unref (vs);
  gst_object_unref (as);
  g_free (desc);
}

/* Pops messages until EOS (or an error, which fails). */
static void
shared_wait_eos (Shared * sh)
{
  GstMessage *m = gst_bus_timed_pop_filtered (sh->bus, 120 * GST_SECOND,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);

  fail_unless (m != NULL, "no EOS within 120 s");
  if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ERROR) {
    GError *err;
    gst_message_parse_error (m, &err, NULL);
    fail ("error: %s", err->message);
  }
  gst_message_unref (m);
}

static void
shared_free (Shared * sh)
{
  fail_unless_equals_int (gst_element_set_state (sh->pipeline,
          GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  gst_bus_set_sync_handler (sh->bus, NULL, NULL, NULL);
  gst_bus_set_flushing (sh->bus, TRUE);
  gst_object_unref (sh->bus);
  gst_object_unref (sh->pipeline);
  unref_and_wait (sh->src);
  g_free (sh->holder);
  g_checksum_free (sh->video);
  g_checksum_free (sh->audio);
}

/* The clip a pipeline received is the expected one; ready for another. */
static void
shared_check (Shared * sh, Output * video, Output * audio)
{
  fail_unless_equals_string (g_checksum_get_string (sh->video),
      video->checksum);
  fail_unless_equals_string (g_checksum_get_string (sh->audio),
      audio->checksum);
  g_checksum_reset (sh->video);
  g_checksum_reset (sh->audio);
}

/* Two pipelines of one process load the model once and both give the clip
 * a pipeline of their own gives; with engine-cache=false each loads. */
GST_START_TEST (test_engine_shared_across_pipelines)
{
  Output v42, a42, v7, a7;
  Shared x, y;

  generate (42, &v42, &a42);
  generate (7, &v7, &a7);

  for (gint cache = 1; cache >= 0; cache--) {
    shared_new (&x, 42, STEPS, cache);
    shared_new (&y, 7, STEPS, cache);
    fail_unless (gst_element_set_state (x.pipeline, GST_STATE_PLAYING) !=
        GST_STATE_CHANGE_FAILURE);
    fail_unless (gst_element_set_state (y.pipeline, GST_STATE_PLAYING) !=
        GST_STATE_CHANGE_FAILURE);
    shared_wait_eos (&x);
    shared_wait_eos (&y);
    GST_INFO ("engine-cache=%d: %d + %d loads", cache, x.loads, y.loads);
    fail_unless_equals_int (x.loads + y.loads, cache ? 1 : 2);
    /* The one that did not load may have waited for the other's load (or
     * found it loaded, or waited for its generation): each wait said so,
     * naming the other pipeline's element, and ended. */
    fail_unless_equals_int (x.waits, x.waits_done);
    fail_unless_equals_int (y.waits, y.waits_done);
    fail_unless_equals_int (x.waits + y.waits, x.waiting_load +
        x.waiting_turn + y.waiting_load + y.waiting_turn);
    if (!cache)
      fail_unless_equals_int (x.waits + y.waits, 0);
    shared_check (&x, &v42, &a42);
    shared_check (&y, &v7, &a7);

    /* Another run of both, the other one first: still no load. */
    fail_unless_equals_int (gst_element_set_state (x.pipeline,
            GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
    fail_unless_equals_int (gst_element_set_state (y.pipeline,
            GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
    x.loads = y.loads = 0;
    fail_unless (gst_element_set_state (y.pipeline, GST_STATE_PLAYING) !=
        GST_STATE_CHANGE_FAILURE);
    fail_unless (gst_element_set_state (x.pipeline, GST_STATE_PLAYING) !=
        GST_STATE_CHANGE_FAILURE);
    shared_wait_eos (&y);
    shared_wait_eos (&x);
    fail_unless_equals_int (x.loads + y.loads, 0);
    shared_check (&x, &v42, &a42);
    shared_check (&y, &v7, &a7);
    shared_free (&x);
    shared_free (&y);
  }
  output_clear (&v42);
  output_clear (&a42);
  output_clear (&v7);
  output_clear (&a7);
}

GST_END_TEST;

/* Generations on a shared engine take turns: a pipeline that waits for its
 * turn stops at once, and runs once the other one is stopped. */
GST_START_TEST (test_engine_shared_turns)
{
  Output v7, a7;
  Shared x, y;
  gint64 t0, dt;

  generate (7, &v7, &a7);
  shared_new (&x, 42, LONG_STEPS, TRUE);
  shared_new (&y, 7, STEPS, TRUE);
  fail_unless (gst_element_set_state (x.pipeline, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  fail_unless (wait_element_message (x.bus, "h3videosrc/step",
          60 * GST_SECOND), "no denoising step");
  /* y waits for x's generation: no step of its own. */
  fail_unless (gst_element_set_state (y.pipeline, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  fail_if (wait_element_message (y.bus, "h3videosrc/step",
          300 * GST_MSECOND), "y generated while x was generating");
  /* ... and says so: h3videosrc/waiting (turn, naming x's element) and an
   * open `wait` progress operation. */
  fail_unless_equals_int (g_atomic_int_get (&y.waiting_turn), 1);
  fail_unless_equals_int (g_atomic_int_get (&y.waits), 1);
  fail_unless_equals_int (g_atomic_int_get (&y.waits_done), 0);
  {
    gchar *name = gst_element_get_name (x.src);
    fail_unless_equals_string (y.holder, name);
    g_free (name);
  }
  t0 = g_get_monotonic_time ();
  fail_unless_equals_int (gst_element_set_state (y.pipeline, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  dt = g_get_monotonic_time () - t0;
  fail_unless (dt < time_limit_us (1.0), "stopping a waiting pipeline took "
      "%.3f s", dt / 1e6);
  /* Waiting again, then x stops: y gets the engine and its clip. */
  fail_unless (gst_element_set_state (y.pipeline, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  g_usleep (100000);
  fail_unless_equals_int (gst_element_set_state (x.pipeline, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  shared_wait_eos (&y);
  shared_check (&y, &v7, &a7);
  fail_unless_equals_int (x.loads + y.loads, 1);
  /* Stopped while waiting (CANCELED), then waited again (COMPLETE). */
  fail_unless_equals_int (y.waits, y.waits_done);
  fail_unless (y.waits >= 2, "%d waits", y.waits);
  shared_free (&x);
  shared_free (&y);
  output_clear (&v7);
  output_clear (&a7);
}

GST_END_TEST;

/* ---- tests: the h3: URI ------------------------------------------------------ */

#define SMALL_URI "h3:?prompt=a%20robot%20dancing&width=64&height=32&" \
  "num-frames=22&steps=2"

/* The h3: URI: h3src, the bin around an h3videosrc (child "src"), sets the
 * child's properties from the query and writes them back. */
GST_START_TEST (test_uri_handler)
{
  GError *err = NULL;
  GstElement *e = gst_element_make_from_uri (GST_URI_SRC, SMALL_URI "&seed=7"
      "&backend=fa&compute=cpu", NULL, &err), *src;
  gchar *prompt = NULL, *uri;
  gint w, h, n;
  guint steps;
  guint64 seed;
  gint compute;

  fail_unless (e != NULL, "%s", err ? err->message : "");
  fail_unless_equals_string (G_OBJECT_TYPE_NAME (e), "GstH3Src");
  src = gst_bin_get_by_name (GST_BIN (e), "src");
  fail_unless_equals_string (G_OBJECT_TYPE_NAME (src), "GstH3VideoSrc");
  g_object_get (src, "prompt", &prompt, "width", &w, "height", &h,
      "num-frames", &n, "steps", &steps, "seed", &seed, "compute", &compute,
      NULL);
  fail_unless_equals_string (prompt, PROMPT);
  fail_unless (w == W && h == H && n == FRAMES && steps == STEPS);
  fail_unless_equals_uint64 (seed, 7);
  fail_unless_equals_int (compute, 1);
  g_free (prompt);

  /* get_uri gives back what it was set to. */
  uri = gst_uri_handler_get_uri (GST_URI_HANDLER (e));
  GST_INFO ("uri: %s", uri);
  fail_unless (g_str_has_prefix (uri, "h3:?prompt=a%20robot%20dancing&"),
      "%s", uri);
  fail_unless (strstr (uri, "&width=64&height=32&num-frames=22&steps=2")
      && strstr (uri, "&seed=7") && strstr (uri, "&compute=cpu")
      && !strstr (uri, "backend") && !strstr (uri, "model-location"), "%s",
      uri);
  g_free (uri);

  /* A new URI describes the whole clip: what it leaves out is reset. The
   * path, when given, is the prompt. */
  fail_unless (gst_uri_handler_set_uri (GST_URI_HANDLER (e),
          "h3:a%20red%20fox+bis?height=64", &err), "%s", err->message);
  g_object_get (src, "prompt", &prompt, "width", &w, "height", &h, "seed",
      &seed, NULL);
  fail_unless_equals_string (prompt, "a red fox+bis");
  fail_unless_equals_int (w, 1280);
  fail_unless_equals_int (h, 64);
  fail_unless_equals_uint64 (seed, 42);
  g_free (prompt);

  /* A bad URI changes nothing and says why. */
  for (const gchar * const *bad = (const gchar *[]) {
  "h3:?colour=red", "h3:?width=abc", "h3:?width=5", "h3:?steps",
          "file:///tmp/x", NULL}; *bad; bad++) {
    fail_if (gst_uri_handler_set_uri (GST_URI_HANDLER (e), *bad, &err),
        "%s accepted", *bad);
    GST_INFO ("%s: %s", *bad, err->message);
    fail_unless (err->domain == GST_URI_ERROR);
    g_clear_error (&err);
  }
  g_object_get (src, "height", &h, NULL);
  fail_unless_equals_int (h, 64);
  gst_object_unref (src);
  gst_object_unref (e);
}

GST_END_TEST;

static void
count_handoff (GstElement * sink, GstBuffer * buf, GstPad * pad,
    gpointer data)
{
  g_atomic_int_inc ((gint *) data);
}

static void
uridecodebin_pad_added (GstElement * dec, GstPad * pad, gpointer data)
{
  GstElement *pipeline = data;
  GstCaps *caps = gst_pad_query_caps (pad, NULL);
  gboolean video = g_str_has_prefix (gst_structure_get_name
      (gst_caps_get_structure (caps, 0)), "video/");
  GstElement *sink = gst_bin_get_by_name (GST_BIN (pipeline),
      video ? "vs" : "as");
  GstPad *sinkpad = gst_element_get_static_pad (sink, "sink");

  fail_unless_equals_int (gst_pad_link (pad, sinkpad), GST_PAD_LINK_OK);
  gst_object_unref (sinkpad);
  gst_object_unref (sink);
  gst_caps_unref (caps);
}

static void
run_uri_pipeline (GstElement * pipeline, GstElement * vs, GstElement * as,
    gint * video, gint * audio)
{
  GstBus *bus = gst_element_get_bus (pipeline);
  GstMessage *m;

  g_object_set (vs, "signal-handoffs", TRUE, NULL);
  g_object_set (as, "signal-handoffs", TRUE, NULL);
  g_signal_connect (vs, "handoff", G_CALLBACK (count_handoff), video);
  g_signal_connect (as, "handoff", G_CALLBACK (count_handoff), audio);
  fail_unless (gst_element_set_state (pipeline, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  m = gst_bus_timed_pop_filtered (bus, 120 * GST_SECOND, GST_MESSAGE_EOS |
      GST_MESSAGE_ERROR);
  fail_unless (m != NULL, "neither EOS nor an error");
  if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ERROR) {
    GError *err;
    gchar *dbg;
    gst_message_parse_error (m, &err, &dbg);
    fail ("%s (%s)", err->message, dbg);
  }
  gst_message_unref (m);
  fail_unless_equals_int (gst_element_set_state (pipeline, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_object_unref (bus);
}

/* playbin, playbin3 and uridecodebin open a prompt like a file, with both
 * streams (what gst-play-1.0 does). */
GST_START_TEST (test_uri_playbin_uridecodebin)
{
  GError *err = NULL;
  GstElement *pipeline, *vs, *as;
  gint video = 0, audio = 0;

  for (const gchar * const *bin = (const gchar *[]) {
  "playbin", "playbin3", NULL}; *bin; bin++) {
    video = audio = 0;
    pipeline = gst_element_factory_make (*bin, NULL);
    vs = gst_element_factory_make ("fakesink", "vs");
    as = gst_element_factory_make ("fakesink", "as");
    g_object_set (pipeline, "uri", SMALL_URI, "video-sink", vs, "audio-sink",
        as, NULL);
    /* Without soft-volume: GStreamer 1.22's playsink leaks the volume
     * element it puts before a sink without a volume of its own (with any
     * file), which the leaks tracer would report. */
    gst_util_set_object_arg (G_OBJECT (pipeline), "flags", "video+audio");
    run_uri_pipeline (pipeline, vs, as, &video, &audio);
    GST_INFO ("%s: %d video, %d audio buffers", *bin, video, audio);
    fail_unless_equals_int (video, FRAMES);
    fail_unless_equals_int (audio, FRAMES);
    gst_object_unref (pipeline);
  }

  video = audio = 0;
  pipeline = gst_parse_launch ("uridecodebin name=d uri=\"" SMALL_URI "\" "
      "fakesink name=vs fakesink name=as", &err);
  fail_unless (pipeline != NULL, "%s", err ? err->message : "");
  {
    GstElement *dec = gst_bin_get_by_name (GST_BIN (pipeline), "d");
    g_signal_connect (dec, "pad-added", G_CALLBACK (uridecodebin_pad_added),
        pipeline);
    gst_object_unref (dec);
  }
  vs = gst_bin_get_by_name (GST_BIN (pipeline), "vs");
  as = gst_bin_get_by_name (GST_BIN (pipeline), "as");
  run_uri_pipeline (pipeline, vs, as, &video, &audio);
  GST_INFO ("uridecodebin: %d video, %d audio buffers", video, audio);
  fail_unless_equals_int (video, FRAMES);
  fail_unless_equals_int (audio, FRAMES);
  gst_object_unref (vs);
  gst_object_unref (as);
  gst_object_unref (pipeline);
}

GST_END_TEST;

static Suite *
h3videosrc_suite (void)
{
  Suite *s = suite_create ("h3videosrc");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 300);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_event_order_and_streams);
  tcase_add_test (tc, test_timestamps_and_offsets);
  tcase_add_test (tc, test_seed_determinism);
  tcase_add_test (tc, test_rerun_reuses_engine);
  tcase_add_test (tc, test_devices_cpu_ranks);
  tcase_add_test (tc, test_progress_and_element_messages);
  tcase_add_test (tc, test_eos_mid_generation);
  tcase_add_test (tc, test_null_within_one_second);
  tcase_add_test (tc, test_only_video_linked);
  tcase_add_test (tc, test_nothing_linked_is_stream_error);
  tcase_add_test (tc, test_device_failure_mid_generation);
  tcase_add_test (tc, test_caps_negotiation_failure);
  tcase_add_test (tc, test_properties);
  tcase_add_test (tc, test_capabilities_fields);
  tcase_add_test (tc, test_property_locked_while_playing);
  tcase_add_test (tc, test_queries);
  tcase_add_test (tc, test_error_domains);
  tcase_add_test (tc, test_devices_errors);
  tcase_add_test (tc, test_start_stop_cycles);
  tcase_add_test (tc, test_early_settings_errors);
  tcase_add_test (tc, test_caps_before_loading);
  tcase_add_test (tc, test_stats_before_eos);
  tcase_add_test (tc, test_engine_shared_across_pipelines);
  tcase_add_test (tc, test_engine_shared_turns);
  tcase_add_test (tc, test_uri_handler);
  tcase_add_test (tc, test_uri_playbin_uridecodebin);
  return s;
}

GST_CHECK_MAIN (h3videosrc);
