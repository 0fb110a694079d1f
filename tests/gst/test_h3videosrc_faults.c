/* test_h3videosrc_faults.c - h3videosrc on damaged models and failing
 * ranks (issue 14, items 3, 4 and 7): a clip whose values went NaN or Inf
 * is an ERROR naming the stage, never EOS after black frames; a NaN weight
 * and a corrupt tokenizer.json are RESOURCE errors naming the file; the
 * advice for devices=0,0 with compute=cpu is accepted by the same element;
 * a rank failing in the middle of a tensor-parallel forward is an ERROR,
 * and the next PLAYING of the same element runs the clip. */
#include <gst/check/gstcheck.h>
#include <gst/gst.h>
#include <math.h>
#include <string.h>

#include "h3_test_model.h"
#include "h3_gst_test.h"

#define PROMPT "a red fox runs through fresh snow"

typedef struct
{
  GstElement *pipeline, *src;
  GstBus *bus;
  gint buffers;
  gboolean eos;
} Run;

static GstPadProbeReturn
count_data (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  Run *r = data;

  (void) pad;
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER)
    g_atomic_int_inc (&r->buffers);
  else if (GST_EVENT_TYPE (GST_PAD_PROBE_INFO_EVENT (info)) == GST_EVENT_EOS)
    r->eos = TRUE;
  return GST_PAD_PROBE_OK;
}

/* h3videosrc name=s with `props`, both pads to fakesinks, buffers counted. */
static void
run_new (Run * r, const gchar * props)
{
  gchar *desc = g_strdup_printf ("h3videosrc name=s prompt=\"" PROMPT "\" "
      "width=64 height=32 num-frames=22 steps=2 compute=cpu %s "
      "s.video ! queue ! fakesink s.audio ! queue ! fakesink", props);
  GError *err = NULL;
  const gchar *pads[] = { "video", "audio" };

  memset (r, 0, sizeof *r);
  r->pipeline = gst_parse_launch (desc, &err);
  fail_unless (r->pipeline != NULL, "%s: %s", desc, err ? err->message : "");
  r->src = gst_bin_get_by_name (GST_BIN (r->pipeline), "s");
  r->bus = gst_element_get_bus (r->pipeline);
  for (guint i = 0; i < G_N_ELEMENTS (pads); i++) {
    GstPad *pad = gst_element_get_static_pad (r->src, pads[i]);
    gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER |
        GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, count_data, r, NULL);
    gst_object_unref (pad);
  }
  g_free (desc);
}

/* PLAYING until EOS or ERROR: the error (unref it), or NULL on EOS. The
 * pipeline is back in NULL either way, ready to play again. */
static GstMessage *
run_play (Run * r)
{
  GstMessage *m;

  r->buffers = 0;
  r->eos = FALSE;
  gst_element_set_state (r->pipeline, GST_STATE_PLAYING);
  m = h3_gst_pop_eos_or_error (r->bus, 300 * GST_SECOND, "the run");
  fail_unless_equals_int (gst_element_set_state (r->pipeline,
          GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  gst_bus_set_flushing (r->bus, TRUE);
  gst_bus_set_flushing (r->bus, FALSE);
  return m;
}

static void
run_free (Run * r)
{
  gst_element_set_state (r->pipeline, GST_STATE_NULL);
  gst_object_unref (r->src);
  gst_object_unref (r->bus);
  gst_object_unref (r->pipeline);
}

/* The error of m is domain/code and its text holds `want`. */
static void
expect_error (GstMessage * m, GQuark domain, gint code, const gchar * want)
{
  GError *err = NULL;
  gchar *dbg = NULL;

  fail_unless (m != NULL, "EOS where an error was expected (%s)", want);
  gst_message_parse_error (m, &err, &dbg);
  GST_INFO ("error: %s (%s)", err->message, dbg);
  fail_unless (err->domain == domain && err->code == code,
      "%s %d: %s", g_quark_to_string (err->domain), err->code, err->message);
  fail_unless (strstr (err->message, want) != NULL, "'%s' lacks '%s'",
      err->message, want);
  g_error_free (err);
  g_free (dbg);
  gst_message_unref (m);
}

static gchar *
model_with (const gchar * file, const gchar * part, gfloat v)
{
  gchar *dir = h3_test_copy_data ("models/tiny-h3"), *name;

  fail_unless (dir != NULL);
  name = h3_test_poison_part (dir, file, part, v, 1 << 20);
  fail_unless (name != NULL, "%s in %s", part, file);
  g_free (name);
  return dir;
}

static void
drop_model (gchar * dir)
{
  h3_test_remove_tree (dir);
  g_free (dir);
}

/* Weights that overflow: the latents of the first denoising step go Inf,
 * and the element posts a STREAM error naming the step (not EOS: run_play
 * returns the bus's first of the two), with nothing sent. */
GST_START_TEST (test_nonfinite_clip_is_an_error)
{
  gchar *dir = model_with ("transformer/diffusion_pytorch_model.safetensors",
      "proj_out.weight", 3.0e38f);
  gchar *props = g_strdup_printf ("model-location=%s engine-cache=false", dir);
  Run r;

  run_new (&r, props);
  expect_error (run_play (&r), GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
      "denoising step 1/2");
  fail_unless (r.buffers == 0, "%d buffers", r.buffers);
  run_free (&r);
  g_free (props);
  drop_model (dir);
}

GST_END_TEST;

/* A NaN weight: refused while loading, a RESOURCE error naming the tensor. */
GST_START_TEST (test_nan_weight_is_a_resource_error)
{
  gchar *dir = model_with ("vae/diffusion_pytorch_model.safetensors",
      "decoder.proj_out.weight", NAN);
  gchar *props = g_strdup_printf ("model-location=%s engine-cache=false", dir);
  Run r;

  run_new (&r, props);
  expect_error (run_play (&r), GST_RESOURCE_ERROR,
      GST_RESOURCE_ERROR_OPEN_READ, "decoder.proj_out.weight");
  fail_unless (r.buffers == 0, "%d buffers", r.buffers);
  run_free (&r);
  g_free (props);
  drop_model (dir);
}

GST_END_TEST;

/* tokenizer.json with a model type h3core cannot read: a RESOURCE error
 * naming the file, not a settings error. */
GST_START_TEST (test_corrupt_tokenizer_is_a_resource_error)
{
  gchar *dir = h3_test_copy_data ("models/tiny-h3");
  gchar *path = g_build_filename (dir, "tokenizer", "tokenizer.json", NULL);
  gchar *json = NULL, *props;
  GString *s;
  Run r;

  fail_unless (g_file_get_contents (path, &json, NULL, NULL));
  s = g_string_new (json);
  fail_unless (g_string_replace (s, "\"BPE\"", "\"XYZ\"", 1) == 1);
  fail_unless (g_file_set_contents (path, s->str, -1, NULL));
  props = g_strdup_printf ("model-location=%s engine-cache=false", dir);
  run_new (&r, props);
  expect_error (run_play (&r), GST_RESOURCE_ERROR,
      GST_RESOURCE_ERROR_OPEN_READ, "tokenizer.json");
  run_free (&r);
  g_string_free (s, TRUE);
  g_free (json);
  g_free (props);
  g_free (path);
  drop_model (dir);
}

GST_END_TEST;

/* devices=0,0 with compute=cpu: the element refuses it with advice, and the
 * advice, set on the same element, runs the clip. */
GST_START_TEST (test_devices_advice_is_accepted)
{
  Run r;

  run_new (&r, "devices=0,0 engine-cache=false");
  expect_error (run_play (&r), GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS,
      "devices=cpu:2");
  g_object_set (r.src, "devices", "cpu:2", NULL);
  fail_unless (run_play (&r) == NULL, "devices=cpu:2 failed");
  fail_unless (r.buffers > 0 && r.eos, "%d buffers, eos %d", r.buffers,
      r.eos);
  run_free (&r);
}

GST_END_TEST;

/* Rank 1 of devices=cpu:2 fails 9 ops into the first forward (the engine's
 * H3_INJECT_FAULT test hook, one shot): an ERROR naming the rank, every
 * rank stopped (the call returns), and the next PLAYING of the same element
 * on the same engine runs the whole clip. */
GST_START_TEST (test_rank_failure_then_rerun)
{
  Run r;

  g_setenv ("H3_INJECT_FAULT", "1:0:9", TRUE);
  run_new (&r, "devices=cpu:2");
  expect_error (run_play (&r), GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_FAILED,
      "rank 1");
  g_unsetenv ("H3_INJECT_FAULT");
  fail_unless (r.buffers == 0, "%d buffers before the failure", r.buffers);
  fail_unless (run_play (&r) == NULL, "the run after the rank failure");
  fail_unless (r.buffers > 0 && r.eos, "%d buffers, eos %d", r.buffers,
      r.eos);
  run_free (&r);
}

GST_END_TEST;

static Suite *
h3videosrc_faults_suite (void)
{
  Suite *s = suite_create ("h3videosrc-faults");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 600);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_nonfinite_clip_is_an_error);
  tcase_add_test (tc, test_nan_weight_is_a_resource_error);
  tcase_add_test (tc, test_corrupt_tokenizer_is_a_resource_error);
  tcase_add_test (tc, test_devices_advice_is_accepted);
  tcase_add_test (tc, test_rank_failure_then_rerun);
  return s;
}

GST_CHECK_MAIN (h3videosrc_faults);
