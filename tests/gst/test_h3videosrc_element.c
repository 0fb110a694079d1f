/* test_h3videosrc_element.c - gst-check suite for the h3videosrc element:
 * its interface and life. Caps negotiation, properties and their locking,
 * queries, error domains, start/stop cycles, what fails before the model
 * loads, stats before EOS, one engine shared by the process's pipelines,
 * and the h3: URI (h3src, playbin, uridecodebin). test_h3videosrc.c has
 * the clip itself; h3videosrc_check.h what both share.
 *
 * Same environment as test_h3videosrc.c: the embedded tiny model on the
 * CPU at 64x32, 22 frames, 2 steps; GST_TRACERS=leaks from meson. */
#include "h3videosrc_check.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

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
  h3_gst_wait_eos (sh->bus, 120 * GST_SECOND, "the shared-engine pipeline");
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

/* The error an h3src posts when it is started alone (NULL if none). */
static GError *
start_error (GstElement * e)
{
  GstBus *bus = gst_bus_new ();
  GstMessage *m;
  GError *err = NULL;

  gst_element_set_bus (e, bus);
  if (gst_element_set_state (e, GST_STATE_PAUSED) != GST_STATE_CHANGE_FAILURE)
    gst_element_get_state (e, NULL, NULL, GST_CLOCK_TIME_NONE);
  m = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  if (m) {
    gst_message_parse_error (m, &err, NULL);
    gst_message_unref (m);
  }
  gst_element_set_state (e, GST_STATE_NULL);
  gst_element_set_bus (e, NULL);
  gst_object_unref (bus);
  return err;
}

/* The lora property (a list row of the schema, a GStrv): set and read
 * back, empty is unset, and through an h3: URI (',' between items, '\\'
 * escaping a ',') and back. */
GST_START_TEST (test_lora_property)
{
  GstElement *e = gst_element_factory_make ("h3videosrc", NULL);
  const gchar *two[] = { "a.safetensors:0.5", "b,c.safetensors", NULL };
  const gchar *empty[] = { NULL };
  gchar **got = (gchar **) 0x1, *uri;
  GError *err = NULL;
  GstElement *src;

  g_object_get (e, "lora", &got, NULL);
  fail_unless (got == NULL);
  g_object_set (e, "lora", two, NULL);
  g_object_get (e, "lora", &got, NULL);
  fail_unless (got && g_strv_length (got) == 2
      && g_str_equal (got[0], two[0]) && g_str_equal (got[1], two[1]));
  g_strfreev (got);
  g_object_set (e, "lora", empty, NULL);
  g_object_get (e, "lora", &got, NULL);
  fail_unless (got == NULL, "an empty list reads back as %p", got);
  gst_object_unref (e);

  e = gst_element_make_from_uri (GST_URI_SRC, SMALL_URI
      "&lora=a.safetensors:0.5,b%5C,c.safetensors", NULL, &err);
  fail_unless (e != NULL, "%s", err ? err->message : "");
  src = gst_bin_get_by_name (GST_BIN (e), "src");
  g_object_get (src, "lora", &got, NULL);
  fail_unless (got && g_strv_length (got) == 2
      && g_str_equal (got[0], two[0]) && g_str_equal (got[1], two[1]));
  g_strfreev (got);
  uri = gst_uri_handler_get_uri (GST_URI_HANDLER (e));
  fail_unless (strstr (uri, "&lora=a.safetensors%3A0.5%2Cb%5C%2Cc.safetensors")
      != NULL, "%s", uri);
  fail_unless (gst_uri_handler_set_uri (GST_URI_HANDLER (e), uri, &err),
      "%s: %s", uri, err ? err->message : "");
  g_object_get (src, "lora", &got, NULL);
  fail_unless (got && g_strv_length (got) == 2
      && g_str_equal (got[1], two[1]), "%s", uri);
  g_strfreev (got);
  g_free (uri);
  fail_if (gst_uri_handler_set_uri (GST_URI_HANDLER (e),
          SMALL_URI "&lora=a.safetensors:abc", &err));
  fail_unless (strstr (err->message, "not a number") != NULL, "%s",
      err->message);
  g_clear_error (&err);
  gst_object_unref (src);
  gst_object_unref (e);
}

GST_END_TEST;

/* Issue 31: a URI is data. By default it carries the clip's content only,
 * within bounds; a path, device or memory key fails the start with a
 * message that says how an application opts in (uri-policy=all), which
 * then lets it through. Malformed URIs are errors at set_uri. */
GST_START_TEST (test_uri_policy)
{
  const gchar *refused[] = {
    "h3:?prompt=x&model-location=/etc",
    "h3:?prompt=x&adapter-location=/etc/passwd",
    "h3:?prompt=x&image-location=/home/me/secret.png",
    "h3:?prompt=x&lora=/etc/passwd:0.5",
    "h3:?prompt=x&devices=0,1",
    "h3:?prompt=x&memory=stream",
    "h3:?prompt=x&engine-cache=false",
    "h3:?prompt=x&keep-clip-max-bytes=18446744073709551615",
    "h3:?prompt=x&width=4096&height=1024",
    "h3:?prompt=x&width=1344&height=1344",
    "h3:?prompt=x&steps=1000",
    NULL
  };
  const gchar *malformed[] = {
    "h3:?prompt=a%00b", "h3://evil.example/?prompt=x",
    "h3:?prompt=a&prompt=b", "h3:x?prompt=y", "h3:?seed=-1",
    "h3:?seed=%2B7", "h3:?prompt=x#t=5", "h3:?width=64&width=64",
    "h3:?prompt=x&is-live=maybe", NULL
  };
  GError *err = NULL;
  GstElement *e;

  for (const gchar * const *u = refused; *u; u++) {
    e = gst_element_make_from_uri (GST_URI_SRC, *u, NULL, &err);
    fail_unless (e != NULL, "%s: %s", *u, err ? err->message : "");
    err = start_error (e);
    fail_unless (err != NULL, "%s started", *u);
    GST_INFO ("%s: %s", *u, err->message);
    fail_unless (g_error_matches (err, GST_RESOURCE_ERROR,
            GST_RESOURCE_ERROR_NOT_AUTHORIZED), "%s: %s", *u, err->message);
    fail_unless (strstr (err->message, "uri-policy=all") != NULL, "%s: %s",
        *u, err->message);
    g_clear_error (&err);
    /* the application opts in: the policy lets it through (what fails
     * then is the setting itself, or nothing linked) */
    gst_util_set_object_arg (G_OBJECT (e), "uri-policy", "all");
    err = start_error (e);
    fail_unless (err == NULL || !g_error_matches (err, GST_RESOURCE_ERROR,
            GST_RESOURCE_ERROR_NOT_AUTHORIZED), "%s with uri-policy=all: %s",
        *u, err->message);
    g_clear_error (&err);
    gst_object_unref (e);
  }

  e = gst_element_make_from_uri (GST_URI_SRC, SMALL_URI, NULL, &err);
  fail_unless (e != NULL);
  for (const gchar * const *u = malformed; *u; u++) {
    fail_if (gst_uri_handler_set_uri (GST_URI_HANDLER (e), *u, &err),
        "%s accepted", *u);
    GST_INFO ("%s: %s", *u, err->message);
    fail_unless (err->domain == GST_URI_ERROR);
    g_clear_error (&err);
  }
  /* the content of the release's largest clip is within the bounds */
  fail_unless (gst_uri_handler_set_uri (GST_URI_HANDLER (e),
          "h3:?prompt=x&width=768&height=1344&num-frames=362&steps=50&"
          "backend=vsa&vsa-sparsity=0.95&seed=18446744073709551615", &err),
      "%s", err ? err->message : "");
  err = start_error (e);
  fail_unless (err == NULL || !g_error_matches (err, GST_RESOURCE_ERROR,
          GST_RESOURCE_ERROR_NOT_AUTHORIZED), "%s", err->message);
  g_clear_error (&err);
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
h3videosrc_element_suite (void)
{
  Suite *s = suite_create ("h3videosrc-element");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 300);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_caps_negotiation_failure);
  tcase_add_test (tc, test_properties);
  tcase_add_test (tc, test_lora_property);
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
  tcase_add_test (tc, test_uri_policy);
  tcase_add_test (tc, test_uri_playbin_uridecodebin);
  return s;
}

GST_CHECK_MAIN (h3videosrc_element);
