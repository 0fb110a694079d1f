/* h3videosrc_check.c - the helpers of h3videosrc_check.h. */
#include "h3videosrc_check.h"

#include <json-glib/json-glib.h>
#include <string.h>

/* The sample rate of the model the element runs (its audio VAE's
 * sampling_rate): the audio caps must carry it. */
gint
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

void
set_small (GstElement * e, guint64 seed)
{
  g_object_set (e, "prompt", PROMPT, "seed", seed, "width", W, "height", H,
      "num-frames", FRAMES, "steps", STEPS, NULL);
}

/* Time limits are multiplied by H3_TEST_TIME_SCALE (the valgrind suite
 * sets it: everything runs some 20 times slower there). */
gint64
time_limit_us (gdouble seconds)
{
  const gchar *scale = g_getenv ("H3_TEST_TIME_SCALE");

  return (gint64) (seconds * G_USEC_PER_SEC * (scale ? g_ascii_strtod (scale,
              NULL) : 1.0));
}

gboolean
caps_equal (GstCaps * caps, const gchar * expected)
{
  GstCaps *e = gst_caps_from_string (expected);
  gboolean equal = gst_caps_is_equal (caps, e);

  gst_caps_unref (e);
  return equal;
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
void
unref_and_wait (GstElement * e)
{
  h3_gst_unref_and_wait (e, "its last reference was dropped");
}

GstClockTime
frame_time (guint64 n)
{
  return gst_util_uint64_scale (n, GST_SECOND, 24);
}

/* ---- harness helpers ------------------------------------------------------ */


void
clip_new (Clip * c, guint64 seed)
{
  GstPad *pad;

  memset (c, 0, sizeof *c);
  h3_gst_harnesses_new (&c->hv, &c->ha, &c->bus);
  set_small (c->hv->element, seed);
  pad = gst_element_get_static_pad (c->hv->element, "video");
  c->cv = gst_consistency_checker_new (pad);
  gst_object_unref (pad);
  pad = gst_element_get_static_pad (c->hv->element, "audio");
  c->ca = gst_consistency_checker_new (pad);
  gst_object_unref (pad);
}

void
clip_free (Clip * c)
{
  gst_consistency_checker_free (c->cv);
  gst_consistency_checker_free (c->ca);
  h3_gst_harnesses_free (c->hv, c->ha, c->bus);
}

/* Pulls every event up to EOS, then the buffers queued before it. */
void
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

void
output_clear (Output * o)
{
  g_ptr_array_unref (o->events);
  g_ptr_array_unref (o->buffers);
  g_free (o->checksum);
}

GstEvent *
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
void
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
gboolean
wait_element_message (GstBus * bus, const gchar * name, GstClockTime timeout)
{
  GstMessage *m = h3_gst_wait_element_message (bus, name, timeout);

  if (m)
    gst_message_unref (m);
  return m != NULL;
}

/* Waits for an error and checks its domain and code, and that its message
 * says must_say (when not NULL). */
void
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

guint
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

void
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

void
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
GstMessage *
pipe_run (Pipe * p)
{
  GstMessage *m;

  gst_element_set_state (p->pipeline, GST_STATE_PLAYING);
  m = h3_gst_pop_eos_or_error (p->bus, 120 * GST_SECOND, "the pipeline");
  return m;
}
