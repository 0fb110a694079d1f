/* test_h3videosrc.c - gst-check suite for the h3videosrc element: the clip.
 * Its streams and their events, timestamps and checksums, determinism and
 * reuse of the loaded engine, its messages, and stopping it (EOS, NULL,
 * unlinked pads, a device failure) mid-generation.
 * test_h3videosrc_element.c has the element's interface and life
 * (properties, queries, errors, start/stop cycles, the shared engine, the
 * h3: URI); h3videosrc_check.h what both share.
 *
 * Every test runs the real element on the embedded tiny model on the CPU,
 * at a small size (64x32, 22 frames, 2 steps) so a clip takes seconds.
 * Long generations (steps=1000) stand in for "mid-generation": the tests
 * wait for the first denoising step message before acting.
 *
 * The environment comes from meson: GST_PLUGIN_PATH_1_0 points at the build
 * of the plugin, GST_REGISTRY at a registry file in the build directory,
 * GST_TRACERS=leaks for the leak count at exit. */
#include "h3videosrc_check.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

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

/* A clip whose first frames are far whatever the machine's pace: the
 * element finishes to the first frames only when the steps left take at
 * most GST_H3_EOS_FINISH_WAIT (5 s), and LONG_PIPE's 1000 steps of a 64x32
 * clip take about that on an idle machine. */
#define FAR_PIPE \
  "h3videosrc name=s prompt=\"" PROMPT "\" width=256 height=128 " \
  "num-frames=124 steps=1000 s.video ! queue ! fakesink s.audio ! queue ! " \
  "fakesink"

GST_START_TEST (test_eos_mid_generation)
{
  Pipe p;
  GstMessage *m;
  gint64 t0;
  gboolean canceled = FALSE, warned = FALSE;

  pipe_new (&p, FAR_PIPE);
  fail_unless (gst_element_set_state (p.pipeline, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  fail_unless (wait_element_message (p.bus, "h3videosrc/step",
          60 * GST_SECOND), "no denoising step within 60 s");

  t0 = g_get_monotonic_time ();
  fail_unless (gst_element_send_event (p.pipeline, gst_event_new_eos ()));
  /* (A filtered pop drops what it skips: take the progress too.) */
  while ((m = gst_bus_timed_pop_filtered (p.bus, time_limit_us (5.0) * 1000,
              GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_PROGRESS |
              GST_MESSAGE_WARNING))) {
    GstMessageType type = GST_MESSAGE_TYPE (m);
    if (type == GST_MESSAGE_WARNING) {
      GError *e;
      gst_message_parse_warning (m, &e, NULL);
      /* The first frames are far (999 steps): the streams end empty. */
      warned |= g_str_has_prefix (e->message, "Stopped by end-of-stream "
          "before the first frame");
      g_error_free (e);
    } else if (type == GST_MESSAGE_PROGRESS) {
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
  fail_unless (warned, "no WARNING that the streams end without media");
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
  return s;
}

GST_CHECK_MAIN (h3videosrc);
