/* test_h3videosrc_tools.c - h3videosrc through the command-line tools and
 * the example applications, as a user runs them.
 *
 *  - gst-launch-1.0 -e into matroskamux ! filesink, then gst-discoverer-1.0
 *    on the file (duration, streams, caps) and a demux pass that counts the
 *    frames and audio samples actually stored;
 *  - examples/h3-multi-prompt (C) and examples/multi_prompt.py (PyGObject):
 *    two prompts, one model load;
 *  - examples/quickstart.sh, mp4.sh and hls.sh at a tiny size.
 *
 * Paths come from meson: H3_EXAMPLE_C (the built C example), H3_EXAMPLE_PY
 * and H3_PYTHON (a python3 with gi; the test is skipped without one),
 * H3_EXAMPLES_DIR (the scripts). */
#include "h3videosrc_check.h"

#include <glib/gstdio.h>
#include <sys/wait.h>
#include <string.h>

static gchar *
run_tool (gchar ** argv, gint * status)
{
  gchar *out = NULL, *err = NULL;
  GError *error = NULL;

  fail_unless (g_spawn_sync (NULL, argv, NULL, G_SPAWN_SEARCH_PATH, NULL,
          NULL, &out, &err, status, &error), "%s: %s", argv[0],
      error ? error->message : "");
  GST_INFO ("%s stdout:\n%s\nstderr:\n%s", argv[0], out, err);
  if (*status != 0)
    GST_WARNING ("%s exited with %d:\n%s\n%s", argv[0], *status, out, err);
  g_free (err);
  return out;
}

/* Removes a temporary directory made by a test, with its files. */
static void
remove_dir (const gchar * dir)
{
  GDir *d = g_dir_open (dir, 0, NULL);
  const gchar *name;

  while (d && (name = g_dir_read_name (d))) {
    gchar *p = g_build_filename (dir, name, NULL);
    g_unlink (p);
    g_free (p);
  }
  if (d)
    g_dir_close (d);
  g_rmdir (dir);
}

typedef struct
{
  guint frames;
  guint64 samples;
  GstClockTime video_end, audio_end;
  gint rate, width, height;
} Stored;

static void
on_video (GstElement * sink, GstBuffer * buf, GstPad * pad, Stored * s)
{
  s->frames++;
  s->video_end = GST_BUFFER_PTS (buf) + GST_BUFFER_DURATION (buf);
}

static void
on_audio (GstElement * sink, GstBuffer * buf, GstPad * pad, Stored * s)
{
  s->samples += gst_buffer_get_size (buf) / (2 * sizeof (gfloat));
  s->audio_end = GST_BUFFER_PTS (buf) + GST_BUFFER_DURATION (buf);
}

static void
on_pad_added (GstElement * demux, GstPad * pad, GstBin * pipeline)
{
  gboolean video = g_str_has_prefix (GST_PAD_NAME (pad), "video");
  GstElement *sink = gst_bin_get_by_name (pipeline, video ? "vq" : "aq");
  GstPad *sinkpad = gst_element_get_static_pad (sink, "sink");

  fail_unless (gst_pad_link (pad, sinkpad) == GST_PAD_LINK_OK);
  gst_object_unref (sinkpad);
  gst_object_unref (sink);
}

/* Reads back what the file holds: frame count, sample count, end times. */
static void
read_back (const gchar * path, Stored * s)
{
  /* The demuxer's one thread feeds both branches: each needs a queue, or
   * the first sink to preroll blocks the other one's preroll. */
  gchar *desc = g_strdup_printf ("filesrc location=\"%s\" ! matroskademux "
      "name=d queue name=vq ! fakesink name=vsink signal-handoffs=true "
      "sync=false queue name=aq ! fakesink name=asink signal-handoffs=true "
      "sync=false", path);
  GstElement *pipeline = gst_parse_launch (desc, NULL);
  GstElement *demux = gst_bin_get_by_name (GST_BIN (pipeline), "d");
  GstElement *vsink = gst_bin_get_by_name (GST_BIN (pipeline), "vsink");
  GstElement *asink = gst_bin_get_by_name (GST_BIN (pipeline), "asink");
  GstBus *bus = gst_element_get_bus (pipeline);
  gchar *what;

  memset (s, 0, sizeof *s);
  g_signal_connect (demux, "pad-added", G_CALLBACK (on_pad_added), pipeline);
  g_signal_connect (vsink, "handoff", G_CALLBACK (on_video), s);
  g_signal_connect (asink, "handoff", G_CALLBACK (on_audio), s);
  gst_element_set_state (pipeline, GST_STATE_PLAYING);
  what = g_strdup_printf ("reading %s back", path);
  h3_gst_wait_eos (bus, 60 * GST_SECOND, what);
  g_free (what);
  gst_element_set_state (pipeline, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (demux);
  gst_object_unref (vsink);
  gst_object_unref (asink);
  gst_object_unref (pipeline);
  g_free (desc);
}

/* "Duration: 0:00:00.916666666" -> nanoseconds. */
static GstClockTime
parse_duration (const gchar * text)
{
  const gchar *d = strstr (text, "Duration: ");
  guint h, m, s, ns;

  fail_unless (d != NULL, "no Duration in:\n%s", text);
  fail_unless (sscanf (d, "Duration: %u:%u:%u.%u", &h, &m, &s, &ns) == 4);
  return ((h * 60 + m) * 60 + s) * GST_SECOND + ns;
}

GST_START_TEST (test_launch_matroska_discoverer)
{
  gchar *dir = g_dir_make_tmp ("h3videosrc-launch-XXXXXX", NULL);
  gchar *file = g_build_filename (dir, "clip.mkv", NULL);
  gchar *location = g_strdup_printf ("location=%s", file);
  gchar *launch[] = { "gst-launch-1.0", "-e", "h3videosrc",
    "prompt=" PROMPT, "width=64", "height=32", "num-frames=22", "steps=2",
    "name=s", "s.video", "!", "queue", "!", "matroskamux", "name=mux", "!",
    "filesink", location, "s.audio", "!", "queue", "!", "mux.", NULL
  };
  gchar *discover[] = { "gst-discoverer-1.0", "-v", file, NULL };
  gchar *out;
  gint status;
  Stored s;
  GstClockTime duration, video_end = gst_util_uint64_scale (FRAMES,
      GST_SECOND, 24);

  out = run_tool (launch, &status);
  fail_unless_equals_int (status, 0);
  fail_unless (strstr (out, "Progress: (generate)") != NULL,
      "gst-launch shows no progress:\n%s", out);
  fail_unless (strstr (out, "Got EOS from element") != NULL, "%s", out);
  /* The `generate` operation ends before the sinks can preroll, so
   * gst-launch plays at once instead of holding the pipeline in PAUSED
   * until the last frame is decoded. */
  fail_unless (strstr (out, "waiting for progress to finish") == NULL,
      "gst-launch waited for the progress to finish:\n%s", out);
  g_free (out);

  out = run_tool (discover, &status);
  fail_unless_equals_int (status, 0);
  duration = parse_duration (out);
  /* Matroska stores milliseconds. */
  fail_unless (duration + GST_MSECOND >= video_end
      && duration <= video_end + GST_MSECOND,
      "duration %" GST_TIME_FORMAT ", expected %" GST_TIME_FORMAT,
      GST_TIME_ARGS (duration), GST_TIME_ARGS (video_end));
  fail_unless (strstr (out, "Width: 64") && strstr (out, "Height: 32"), "%s",
      out);
  fail_unless (strstr (out, "Frame rate: 24/1") != NULL, "%s", out);
  {
    gchar *rate = g_strdup_printf ("Sample rate: %d\n", model_rate ());
    fail_unless (strstr (out, rate) != NULL, "no '%s' in:\n%s", rate, out);
    g_free (rate);
  }
  fail_unless (strstr (out, "Channels: 2") != NULL, "%s", out);
  g_free (out);

  read_back (file, &s);
  fail_unless_equals_int (s.frames, FRAMES);
  fail_unless_equals_uint64 (s.samples,
      gst_util_uint64_scale_round (FRAMES, model_rate (), 24));
  fail_unless (s.video_end + GST_MSECOND >= video_end
      && s.video_end <= video_end + GST_MSECOND);
  fail_unless (s.audio_end + 2 * GST_MSECOND >= s.video_end
      && s.audio_end <= s.video_end + 2 * GST_MSECOND,
      "audio ends at %" GST_TIME_FORMAT ", video at %" GST_TIME_FORMAT,
      GST_TIME_ARGS (s.audio_end), GST_TIME_ARGS (s.video_end));

  remove_dir (dir);
  g_free (location);
  g_free (file);
  g_free (dir);
}

GST_END_TEST;

/* Both examples print "model loaded N time(s) for M clip(s)". */
static void
check_example (gchar ** argv, const gchar * dir)
{
  gint status;
  gchar *out = run_tool (argv, &status);
  Stored s;

  fail_unless_equals_int (status, 0);
  fail_unless (strstr (out, "model loaded 1 time(s) for 2 clip(s)") != NULL,
      "the engine was not reused:\n%s", out);
  for (gint i = 1; i <= 2; i++) {
    gchar *file = g_strdup_printf ("%s/clip-%d.mkv", dir, i);
    read_back (file, &s);
    fail_unless_equals_int (s.frames, FRAMES);
    fail_unless_equals_uint64 (s.samples,
        gst_util_uint64_scale_round (FRAMES, model_rate (), 24));
    g_free (file);
  }
  g_free (out);
}

GST_START_TEST (test_example_c)
{
  const gchar *exe = g_getenv ("H3_EXAMPLE_C");
  gchar *dir = g_dir_make_tmp ("h3videosrc-example-XXXXXX", NULL);
  gchar *argv[] = { (gchar *) exe, "-W", "64", "-H", "32", "-n", "22", "-s",
    "2", "-o", dir, "a robot dancing", "waves on a beach", NULL
  };

  fail_unless (exe != NULL, "H3_EXAMPLE_C is not set");
  check_example (argv, dir);
  remove_dir (dir);
  g_free (dir);
}

GST_END_TEST;

GST_START_TEST (test_example_python)
{
  const gchar *python = g_getenv ("H3_PYTHON");
  const gchar *script = g_getenv ("H3_EXAMPLE_PY");
  gchar *dir = g_dir_make_tmp ("h3videosrc-example-XXXXXX", NULL);
  gchar *probe[] = { (gchar *) python, "-c",
    "import gi; gi.require_version('Gst', '1.0')", NULL
  };
  gchar *argv[] = { (gchar *) python, (gchar *) script, "--width", "64",
    "--height", "32", "--frames", "22", "--steps", "2", "--outdir", dir,
    "a robot dancing", "waves on a beach", NULL
  };
  gint status = 1;

  fail_unless (script != NULL, "H3_EXAMPLE_PY is not set");
  if (python)
    g_free (run_tool (probe, &status));
  if (status != 0) {
    GST_WARNING ("no python3 with PyGObject (python3-gi): skipped");
  } else {
    check_example (argv, dir);
  }
  remove_dir (dir);
  g_free (dir);
}

GST_END_TEST;

/* examples/quickstart.sh (without its install and build steps), mp4.sh and
 * hls.sh at the test size: each must produce H.264 + AAC of the clip's
 * duration. */
/* Runs an example script at the test size under timeout(1). Returns its
 * output, or NULL when it had to be killed after 60 s. */
static gchar *
run_script (const gchar * name, const gchar * arg1, const gchar * arg2)
{
  const gchar *dir = g_getenv ("H3_EXAMPLES_DIR");
  gchar *script, *out = NULL, *out_err = NULL;
  gchar **env;
  gint status;
  GError *error = NULL;

  fail_unless (dir != NULL, "H3_EXAMPLES_DIR is not set");
  script = g_build_filename (dir, name, NULL);
  {
    gchar *argv[] = { "timeout", "60", "sh", script, (gchar *) arg1,
      (gchar *) arg2, NULL
    };
    env = g_environ_setenv (g_get_environ (), "H3VIDEOSRC_PROPS",
        "width=64 height=32 num-frames=22 steps=2", TRUE);
    fail_unless (g_spawn_sync (NULL, argv, env, G_SPAWN_SEARCH_PATH, NULL,
            NULL, &out, &out_err, &status, &error), "%s: %s", script,
        error ? error->message : "");
  }
  if (WIFEXITED (status) && WEXITSTATUS (status) == 124) {
    GST_WARNING ("%s did not end within 60 s:\n%s\n%s", script, out,
        out_err);
    g_clear_pointer (&out, g_free);
  } else {
    fail_unless (g_spawn_check_wait_status (status, NULL),
        "%s failed:\n%s\n%s", script, out, out_err);
  }
  g_free (out_err);
  g_strfreev (env);
  g_free (script);
  return out;
}

static void
check_encoded (const gchar * file)
{
  gchar *argv[] = { "gst-discoverer-1.0", (gchar *) file, NULL };
  gint status;
  gchar *out = run_tool (argv, &status);
  GstClockTime duration, clip = gst_util_uint64_scale (FRAMES, GST_SECOND,
      24);

  fail_unless_equals_int (status, 0);
  fail_unless (strstr (out, "video #") && strstr (out, "H.264"), "%s", out);
  fail_unless (strstr (out, "audio #") && strstr (out, "AAC"), "%s", out);
  duration = parse_duration (out);
  /* AAC adds its encoder delay (1024 samples) at the end. */
  fail_unless (duration + 5 * GST_MSECOND >= clip
      && duration <= clip + 50 * GST_MSECOND, "%s: duration %"
      GST_TIME_FORMAT, file, GST_TIME_ARGS (duration));
  g_free (out);
}

GST_START_TEST (test_example_scripts)
{
  gchar *dir = g_dir_make_tmp ("h3videosrc-scripts-XXXXXX", NULL);
  gchar *mkv = g_build_filename (dir, "first.mkv", NULL);
  gchar *mp4 = g_build_filename (dir, "clip.mp4", NULL);
  gchar *hls = g_build_filename (dir, "hls", NULL);
  gchar *playlist = g_build_filename (hls, "playlist.m3u8", NULL);
  gchar *segment = g_build_filename (hls, "segment00000.ts", NULL);
  gchar *text = NULL, *out = NULL;

  out = run_script ("quickstart.sh", "--no-setup", mkv);
  fail_unless (out != NULL, "quickstart.sh hung");
  g_free (out);
  check_encoded (mkv);
  out = run_script ("mp4.sh", PROMPT, mp4);
  fail_unless (out != NULL, "mp4.sh hung");
  g_clear_pointer (&out, g_free);
  check_encoded (mp4);
  /* GStreamer 1.22's splitmuxsink (inside hlssink2) now and then never
   * posts EOS after the last fragment, about one run in ten, well after
   * h3videosrc pushed EOS on both pads: gst-launch then waits forever.
   * Only that hang is retried; every completed run is checked in full. */
  for (gint attempt = 0; attempt < 3 && !out; attempt++) {
    remove_dir (hls);
    out = run_script ("hls.sh", PROMPT, hls);
  }
  fail_unless (out != NULL, "hls.sh hung three times in a row");
  g_free (out);
  fail_unless (g_file_get_contents (playlist, &text, NULL, NULL));
  fail_unless (strstr (text, "segment00000.ts") != NULL, "%s", text);
  fail_unless (strstr (text, "#EXT-X-ENDLIST") != NULL, "%s", text);
  {
    gchar *argv[] = { "gst-discoverer-1.0", segment, NULL };
    gint status;
    out = run_tool (argv, &status);
    fail_unless_equals_int (status, 0);
    fail_unless (strstr (out, "H.264") && strstr (out, "AAC"), "%s", out);
    g_free (out);
  }
  g_free (text);
  remove_dir (hls);
  remove_dir (dir);
  g_free (segment);
  g_free (playlist);
  g_free (hls);
  g_free (mp4);
  g_free (mkv);
  g_free (dir);
}

GST_END_TEST;

static Suite *
h3videosrc_tools_suite (void)
{
  Suite *s = suite_create ("h3videosrc-tools");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 300);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_launch_matroska_discoverer);
  tcase_add_test (tc, test_example_c);
  tcase_add_test (tc, test_example_python);
  tcase_add_test (tc, test_example_scripts);
  return s;
}

GST_CHECK_MAIN (h3videosrc_tools);
