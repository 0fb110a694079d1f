/* test_h3videosrc_dummy.c - h3videosrc with load-format=dummy: the model's
 * configs and tokenizer alone (a copy of the embedded tiny model without its
 * *.safetensors), random weights made on the backend, through a whole
 * pipeline to EOS; the dummy FastH3 adapters give their 4 forwards; a
 * mismatched mode and adapter kind, and safetensors on a folder without
 * weights, end in an error message that says why; precision=fp8 runs and
 * the stats say so. */
#include <gst/check/gstcheck.h>
#include <glib/gstdio.h>
#include <string.h>

#include "h3.h"
#include "h3_gst_test.h"

static gchar *config_dir;

/* Copies src into dst, leaving out every *.safetensors. Runs before the
 * suite, so it reports on its own. */
static void
copy_configs (const gchar * src, const gchar * dst)
{
  GDir *d = g_dir_open (src, 0, NULL);
  const gchar *name;

  if (!d)
    g_error ("cannot read %s", src);
  g_mkdir_with_parents (dst, 0755);
  while ((name = g_dir_read_name (d))) {
    gchar *s = g_build_filename (src, name, NULL);
    gchar *t = g_build_filename (dst, name, NULL);
    if (g_file_test (s, G_FILE_TEST_IS_DIR)) {
      copy_configs (s, t);
    } else if (!g_str_has_suffix (name, ".safetensors")) {
      gchar *bytes;
      gsize n;
      if (!g_file_get_contents (s, &bytes, &n, NULL)
          || !g_file_set_contents (t, bytes, n, NULL))
        g_error ("cannot copy %s to %s", s, t);
      g_free (bytes);
    }
    g_free (s);
    g_free (t);
  }
  g_dir_close (d);
}

static void
remove_tree (const gchar * path)
{
  GDir *d = g_dir_open (path, 0, NULL);
  const gchar *name;

  if (!d) {
    g_unlink (path);
    return;
  }
  while ((name = g_dir_read_name (d))) {
    gchar *p = g_build_filename (path, name, NULL);
    remove_tree (p);
    g_free (p);
  }
  g_dir_close (d);
  g_rmdir (path);
}

typedef struct
{
  gboolean eos;
  gchar *error;                 /* the error's message, or NULL */
  gint steps;                   /* from h3videosrc/done */
  gboolean random_weights;      /* from the stats property at EOS */
  gchar precision[128];         /* likewise */
  guint64 video_bytes;
  gchar *memory;                /* the stats' memory mode at EOS */
  GChecksum *video_sum, *audio_sum;     /* of every buffer's bytes, in order */
} Run;

static void
count_bytes (GstElement * sink, GstBuffer * buf, GstPad * pad, gpointer data)
{
  Run *r = data;
  GstMapInfo map;

  r->video_bytes += gst_buffer_get_size (buf);
  if (gst_buffer_map (buf, &map, GST_MAP_READ)) {
    g_checksum_update (r->video_sum, map.data, map.size);
    gst_buffer_unmap (buf, &map);
  }
}

static void
sum_audio (GstElement * sink, GstBuffer * buf, GstPad * pad, gpointer data)
{
  Run *r = data;
  GstMapInfo map;

  if (gst_buffer_map (buf, &map, GST_MAP_READ)) {
    g_checksum_update (r->audio_sum, map.data, map.size);
    gst_buffer_unmap (buf, &map);
  }
}

static void
run_clear (Run * r)
{
  g_free (r->error);
  g_free (r->memory);
  g_checksum_free (r->video_sum);
  g_checksum_free (r->audio_sum);
  memset (r, 0, sizeof *r);
}

/* Drops the last references and waits until the element is finalized: its
 * generation thread holds one until it returns (after an error too), and
 * the leaks tracer checks every test at exit. Object data is destroyed at
 * the end of finalize. */
static void
unref_and_wait (GstElement * pipeline, GstElement * src)
{
  H3Finalized *f = h3_gst_watch_finalized (src);

  gst_object_unref (src);
  gst_object_unref (pipeline);
  h3_gst_wait_finalized (f, "the pipeline went");
}

static void
run_pipeline (const gchar * props, Run * r)
{
  gchar *desc = g_strdup_printf ("h3videosrc name=s prompt=\"a robot dancing\" "
      "width=64 height=32 num-frames=22 compute=cpu model-location=\"%s\" %s "
      "s.video ! fakesink name=v signal-handoffs=true "
      "s.audio ! fakesink name=a signal-handoffs=true", config_dir, props);
  GError *err = NULL;
  GstElement *p = gst_parse_launch (desc, &err);
  GstElement *v, *a, *src;
  GstBus *bus;
  gboolean done = FALSE;

  fail_unless (p != NULL, "%s: %s", desc, err ? err->message : "?");
  memset (r, 0, sizeof *r);
  r->steps = -1;
  r->video_sum = g_checksum_new (G_CHECKSUM_SHA256);
  r->audio_sum = g_checksum_new (G_CHECKSUM_SHA256);
  v = gst_bin_get_by_name (GST_BIN (p), "v");
  a = gst_bin_get_by_name (GST_BIN (p), "a");
  src = gst_bin_get_by_name (GST_BIN (p), "s");
  g_signal_connect (v, "handoff", G_CALLBACK (count_bytes), r);
  g_signal_connect (a, "handoff", G_CALLBACK (sum_audio), r);
  bus = gst_element_get_bus (p);
  gst_element_set_state (p, GST_STATE_PLAYING);
  while (!done) {
    GstMessage *m = gst_bus_timed_pop_filtered (bus, 120 * GST_SECOND,
        GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_ELEMENT);
    fail_unless (m != NULL, "no EOS or error within 120 s");
    if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ERROR) {
      GError *e;
      gst_message_parse_error (m, &e, NULL);
      r->error = g_strdup (e->message);
      g_error_free (e);
      done = TRUE;
    } else if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_EOS) {
      r->eos = TRUE;
      done = r->steps >= 0;
    } else if (gst_message_has_name (m, "h3videosrc/done")) {
      gst_structure_get_int (gst_message_get_structure (m), "steps", &r->steps);
      done = r->eos;
    }
    gst_message_unref (m);
  }
  if (r->eos) {
    GstStructure *stats = NULL;
    g_object_get (src, "stats", &stats, NULL);
    if (stats) {
      gst_structure_get_boolean (stats, "random-weights", &r->random_weights);
      const gchar *precision = gst_structure_get_string (stats, "precision");
      g_strlcpy (r->precision, precision ? precision : "", sizeof r->precision);
      r->memory = g_strdup (gst_structure_get_string (stats, "memory"));
      gst_structure_free (stats);
    }
  }
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (v);
  gst_object_unref (a);
  unref_and_wait (p, src);
  g_free (desc);
}

GST_START_TEST (test_dummy_base_model)
{
  Run r;

  run_pipeline ("load-format=dummy steps=2", &r);
  fail_unless (r.error == NULL, "error: %s", r.error);
  fail_unless (r.eos);
  fail_unless_equals_int (r.steps, 2);
  fail_unless (r.random_weights, "stats do not say the weights are random");
  fail_unless_equals_uint64 (r.video_bytes, (guint64) 22 * 64 * 32 * 3);
  run_clear (&r);
}

GST_END_TEST;

GST_START_TEST (test_dummy_adapters)
{
  Run r;

  run_pipeline ("load-format=dummy dummy-adapter=dense backend=fa", &r);
  fail_unless (r.error == NULL, "dense: %s", r.error);
  fail_unless_equals_int (r.steps, 4);
  run_clear (&r);
  run_pipeline ("load-format=dummy dummy-adapter=vsa backend=vsa", &r);
  fail_unless (r.error == NULL, "vsa: %s", r.error);
  fail_unless_equals_int (r.steps, 4);
  run_clear (&r);
  run_pipeline ("load-format=dummy dummy-adapter=vsa backend=fa", &r);
  fail_unless (r.error != NULL && strstr (r.error, "vsa") != NULL,
      "a VSA adapter with backend=fa: %s", r.error ? r.error : "no error");
  run_clear (&r);
}

GST_END_TEST;

GST_START_TEST (test_dummy_fp8)
{
  Run r;

  run_pipeline ("load-format=dummy steps=2 precision=fp8", &r);
  fail_unless (r.error == NULL, "error: %s", r.error);
  fail_unless (r.eos);
  fail_unless (g_str_has_prefix (r.precision, "fp8 (e4m3: "),
      "stats precision: '%s'", r.precision);
  fail_unless_equals_uint64 (r.video_bytes, (guint64) 22 * 64 * 32 * 3);
  run_pipeline ("load-format=dummy steps=2", &r);
  fail_unless (strcmp (r.precision, "f32") == 0,
      "stats precision on the CPU by default: '%s'", r.precision);
}

GST_END_TEST;

GST_START_TEST (test_safetensors_without_weights)
{
  Run r;

  run_pipeline ("steps=2", &r);
  fail_unless (r.error != NULL, "a folder without weights loaded");
  fail_unless (strstr (r.error, "safetensors") != NULL, "error: %s", r.error);
  run_clear (&r);
}

GST_END_TEST;

/* memory=stream: the same buffers as resident, to the byte (the streamed
 * weights are the resident ones' bytes, the ops the same ops). */
GST_START_TEST (test_memory_stream)
{
  Run res, str, bad;

  run_pipeline ("load-format=dummy steps=2 memory=resident", &res);
  run_pipeline ("load-format=dummy steps=2 memory=stream", &str);
  fail_unless (res.error == NULL && str.error == NULL, "errors: %s / %s",
      res.error, str.error);
  fail_unless_equals_string (res.memory, "resident");
  fail_unless_equals_string (str.memory, "stream");
  fail_unless_equals_uint64 (str.video_bytes, res.video_bytes);
  fail_unless_equals_string (g_checksum_get_string (str.video_sum),
      g_checksum_get_string (res.video_sum));
  fail_unless_equals_string (g_checksum_get_string (str.audio_sum),
      g_checksum_get_string (res.audio_sum));
  /* a cap no mode fits on a GPU: refused by name before anything loads
   * (on the CPU the plan holds nothing to a cap, so it runs) */
  run_pipeline ("load-format=dummy steps=2 memory=stream "
      "max-gpu-memory=1048576", &bad);
  fail_unless (bad.error == NULL || strstr (bad.error, "max-gpu-memory"),
      "a 1 MiB cap: %s", bad.error);
  run_clear (&res);
  run_clear (&str);
  run_clear (&bad);
}

GST_END_TEST;

static Suite *
h3videosrc_dummy_suite (void)
{
  Suite *s = suite_create ("h3videosrc-dummy");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 300);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_dummy_base_model);
  tcase_add_test (tc, test_dummy_adapters);
  tcase_add_test (tc, test_dummy_fp8);
  tcase_add_test (tc, test_safetensors_without_weights);
  tcase_add_test (tc, test_memory_stream);
  return s;
}

int
main (int argc, char **argv)
{
  gchar *tmp;
  int failed;

  gst_check_init (&argc, &argv);
  tmp = g_dir_make_tmp ("h3-dummy-XXXXXX", NULL);
  config_dir = g_build_filename (tmp, "tiny-h3", NULL);
  copy_configs (h3_default_model_dir (), config_dir);
  failed = gst_check_run_suite (h3videosrc_dummy_suite (), "h3videosrc-dummy",
      __FILE__);
  remove_tree (tmp);
  g_free (config_dir);
  g_free (tmp);
  return failed;
}
