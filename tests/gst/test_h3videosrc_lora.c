/* test_h3videosrc_lora.c - the element's `lora` (issue 33): a strength
 * changed between two clips of one element, on one engine (the engine key
 * holds the LoRAs' paths, not their strengths), gives the clip of a fresh
 * engine opened at that strength; the LoRA changes the clip; a LoRA that
 * does not fit the model fails the run, naming the file, and the next run
 * without it is the plain clip. The model and its LoRA are written by
 * h3-make-tiny-model --lora ($H3_MAKE_TINY_MODEL). */
#include <glib/gstdio.h>
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <string.h>

#include "h3_gst_test.h"

static gchar *tmp, *model, *lora;

static void
make_model (void)
{
  const gchar *tool = g_getenv ("H3_MAKE_TINY_MODEL");
  gchar *out = NULL, *err = NULL;
  gint status = -1;

  /* a fixture, outside any test: g_error, not fail_unless */
  if (!tool)
    g_error ("H3_MAKE_TINY_MODEL is not set");
  tmp = g_dir_make_tmp ("h3-lora-XXXXXX", NULL);
  model = g_build_filename (tmp, "model", NULL);
  lora = g_build_filename (tmp, "lora.safetensors", NULL);
  const gchar *argv[] = { tool, "--output", model, "--profile", "default",
    "--seed", "1234", "--lora", lora, NULL
  };
  if (!g_spawn_sync (NULL, (gchar **) argv, NULL, 0, NULL, NULL, &out, &err,
          &status, NULL) || status != 0)
    g_error ("%s: %s", tool, err ? err : "did not run");
  g_free (out);
  g_free (err);
}

/* One clip of element e: its video bytes (and audio, appended). */
static GByteArray *
run_clip (GstElement * e, GstHarness * hv, GstHarness * ha, GstBus * bus,
    gchar ** error)
{
  GByteArray *bytes = g_byte_array_new ();
  GstHarness *hs[] = { hv, ha };
  GstMessage *m;

  gst_harness_play (hv);
  for (guint i = 0; i < G_N_ELEMENTS (hs); i++) {
    GstBuffer *buf;
    for (;;) {
      GstEvent *ev = gst_harness_pull_event (hs[i]);
      gboolean eos;
      fail_unless (ev != NULL, "no EOS within the harness timeout");
      eos = GST_EVENT_TYPE (ev) == GST_EVENT_EOS;
      gst_event_unref (ev);
      if (eos)
        break;
    }
    while ((buf = gst_harness_try_pull (hs[i]))) {
      GstMapInfo map;
      gst_buffer_map (buf, &map, GST_MAP_READ);
      g_byte_array_append (bytes, map.data, map.size);
      gst_buffer_unmap (buf, &map);
      gst_buffer_unref (buf);
    }
  }
  *error = NULL;
  while ((m = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR))) {
    GError *err;
    gst_message_parse_error (m, &err, NULL);
    if (!*error)
      *error = g_strdup (err->message);
    g_error_free (err);
    gst_message_unref (m);
  }
  gst_element_set_state (e, GST_STATE_NULL);
  return bytes;
}

static GstElement *
new_element (GstHarness ** hv, GstHarness ** ha, GstBus ** bus,
    gboolean cache)
{
  GstElement *e = h3_gst_harnesses_new (hv, ha, bus);

  g_object_set (e, "prompt", "a robot dancing", "width", 64, "height", 32,
      "num-frames", 22, "steps", 2, "model-location", model, "engine-cache",
      cache, NULL);
  gst_util_set_object_arg (G_OBJECT (e), "compute", "cpu");
  return e;
}

static void
set_lora (GstElement * e, const gchar * spec)
{
  const gchar *list[] = { spec, NULL };
  g_object_set (e, "lora", spec ? list : NULL, NULL);
}

/* The largest byte difference (video frames are uint8; the audio's float
 * bytes only when both clips are the same length). */
static gint
max_diff (GByteArray * a, GByteArray * b, guint video_bytes)
{
  gint d = 0;

  fail_unless (a->len == b->len, "clips of %u and %u bytes", a->len, b->len);
  for (guint i = 0; i < video_bytes && i < a->len; i++)
    d = MAX (d, ABS ((gint) a->data[i] - (gint) b->data[i]));
  return d;
}

typedef struct
{
  GstHarness *hv, *ha;
  GstBus *bus;
  GstElement *e;
} Src;

/* A harnessed h3videosrc with spec (or none), run once: its clip. The
 * element is kept (with its engine) until src_free. */
static GByteArray *
src_run (Src * s, gboolean cache, const gchar * spec)
{
  gchar *error;
  GByteArray *clip;

  s->e = new_element (&s->hv, &s->ha, &s->bus, cache);
  set_lora (s->e, spec);
  clip = run_clip (s->e, s->hv, s->ha, s->bus, &error);
  fail_unless (error == NULL, "%s: %s", spec ? spec : "no LoRA", error);
  return clip;
}

static void
src_free (Src * s)
{
  h3_gst_harnesses_free (s->hv, s->ha, s->bus);
}

/* Elements that differ only in the LoRAs' strengths share one engine (its
 * key holds the paths): each run sets its own strengths on it, in its
 * turn, and gets the clip a fresh engine at that strength gives. */
GST_START_TEST (test_strength_between_clips)
{
  Src plain, one, six, fresh, back;
  GByteArray *c_plain, *c_one, *c_six, *c_fresh, *c_back;
  gchar *spec1 = g_strdup_printf ("%s:1.0", lora),
      *spec6 = g_strdup_printf ("%s:0.6", lora);
  GstStructure *stats;
  const guint video_bytes = 22 * 64 * 32 * 3;

  c_plain = src_run (&plain, TRUE, NULL);
  c_one = src_run (&one, TRUE, spec1);
  fail_unless (max_diff (c_plain, c_one, video_bytes) > 1,
      "the LoRA at 1.0 does not change the clip");
  /* shares one's engine: the strength changes in place */
  c_six = src_run (&six, TRUE, spec6);
  g_object_get (six.e, "stats", &stats, NULL);
  fail_unless (stats && strstr (gst_structure_get_string (stats, "loras"),
          ":0.6") != NULL, "stats: %" GST_PTR_FORMAT, stats);
  gst_structure_free (stats);
  c_fresh = src_run (&fresh, FALSE, spec6);
  /* in place: one more float32 rounding than a fresh fusion (h3_lora) */
  fail_unless (max_diff (c_six, c_fresh, video_bytes) <= 1,
      "0.6 after 1.0 on one engine differs from a fresh 0.6 by %d",
      max_diff (c_six, c_fresh, video_bytes));
  /* and back to 1.0 on the shared engine */
  c_back = src_run (&back, TRUE, spec1);
  fail_unless (max_diff (c_one, c_back, video_bytes) <= 1,
      "1.0 again: %d", max_diff (c_one, c_back, video_bytes));
  src_free (&back);
  src_free (&fresh);
  src_free (&six);
  src_free (&one);
  src_free (&plain);
  g_byte_array_unref (c_plain);
  g_byte_array_unref (c_one);
  g_byte_array_unref (c_six);
  g_byte_array_unref (c_fresh);
  g_byte_array_unref (c_back);
  g_free (spec1);
  g_free (spec6);
}

GST_END_TEST;

GST_START_TEST (test_lora_refused_by_name)
{
  GstHarness *hv, *ha;
  GstBus *bus;
  GstElement *e;
  GByteArray *clip;
  gchar *bad = g_build_filename (tmp ? tmp : "/tmp", "other.safetensors",
      NULL), *error;

  g_free (bad);
  /* the model's own weights file is not a LoRA */
  bad = g_build_filename (model, "transformer",
      "diffusion_pytorch_model.safetensors", NULL);
  e = new_element (&hv, &ha, &bus, TRUE);
  set_lora (e, bad);
  clip = run_clip (e, hv, ha, bus, &error);
  fail_unless (error != NULL && strstr (error, "diffusion_pytorch_model"),
      "a model file as a LoRA: %s", error ? error : "no error");
  g_free (error);
  g_byte_array_unref (clip);
  h3_gst_harnesses_free (hv, ha, bus);
  g_free (bad);
}

GST_END_TEST;

static void
remove_model (void)
{
  gchar *argv[] = { (gchar *) "rm", (gchar *) "-rf", tmp, NULL };
  g_spawn_sync (NULL, argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL,
      NULL, NULL);
}

static Suite *
h3videosrc_lora_suite (void)
{
  Suite *s = suite_create ("h3videosrc-lora");
  TCase *tc = tcase_create ("lora");

  tcase_set_timeout (tc, 600);
  tcase_add_unchecked_fixture (tc, make_model, remove_model);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_strength_between_clips);
  tcase_add_test (tc, test_lora_refused_by_name);
  return s;
}

GST_CHECK_MAIN (h3videosrc_lora);
