/* test_h3videosrc_fasth3.c - h3videosrc in the two FastH3 modes, on the
 * official tiny model (tests/data/models/tiny-h3) and its tiny adapters.
 *
 *  - backend=fa with the Dense Data-Free adapter: the element's frames and
 *    samples against the official FastH3 golden (diffusers, 4 forwards on
 *    the release's ladder): uint8 within ±1, audio to 1e-4;
 *  - backend=vsa with the VSA Data-Free adapter (no official golden: the
 *    reference implementation has no VSA-H3 at this size): the element gives
 *    what h3_engine_generate gives for the same request, bit for bit, and
 *    not the dense clip;
 *  - a mode and an adapter that do not belong together fail the state
 *    change to PAUSED, before the model loads (the adapter's kind is read
 *    from its header), with LIBRARY/SETTINGS and a message that names both.
 *
 * Everything runs on the CPU (compute=cpu). H3_TEST_DATA comes from meson. */
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <string.h>

#include "h3.h"
#include "base/h3_safetensors.h"
#include "../h3_test_capture.h"
#include "../h3_test_golden.h"
#include "h3_gst_test.h"

/* The official FastH3 golden's request (ladder B, the release's). */
#define GOLDEN "e2e_t2va_fasth3_ladderB"

static gchar *
data_path (const gchar * rel)
{
  const gchar *root = g_getenv ("H3_TEST_DATA");

  return g_build_filename (root ? root : "tests/data", rel, NULL);
}

static gchar *
adapter_path (const gchar * variant)
{
  gchar *rel = g_strdup_printf ("adapters/tiny-h3/%s/adapter_model.safetensors",
      variant);
  gchar *p = data_path (rel);

  g_free (rel);
  return p;
}

/* What the element pushed on both pads, concatenated, and its done message. */
typedef struct
{
  GByteArray *video;
  GArray *audio;                /* interleaved stereo floats */
  gint steps;                   /* from h3videosrc/done */
} Clip;

static void
clip_clear (Clip * c)
{
  g_byte_array_unref (c->video);
  g_array_unref (c->audio);
}

static void
pull_all (GstHarness * h, GByteArray * bytes)
{
  GstBuffer *buf;
  GstEvent *ev;

  for (;;) {
    ev = gst_harness_pull_event (h);
    fail_unless (ev != NULL, "no EOS within the harness timeout");
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

/* The steps of h3videosrc/done, which may come after EOS. */
static gint
done_steps (GstBus * bus)
{
  GstMessage *m = h3_gst_wait_element_message (bus, "h3videosrc/done",
      60 * GST_SECOND);
  gint steps = -1;

  fail_unless (m != NULL, "no h3videosrc/done message");
  fail_unless (gst_structure_get_int (gst_message_get_structure (m),
          "steps", &steps));
  gst_message_unref (m);
  return steps;
}

static GstElement *
new_element (GstHarness ** hv, GstHarness ** ha, GstBus ** bus,
    const gchar * backend, const gchar * adapter_variant)
{
  gchar *model = data_path ("models/tiny-h3");
  gchar *adapter = adapter_path (adapter_variant);
  GstElement *e;
  h3_request golden = h3_test_golden_request (GOLDEN);

  e = h3_gst_harnesses_new (hv, ha, bus);
  g_object_set (e, "prompt", golden.prompt, "seed", (guint64) golden.seed,
      "width", golden.width, "height", golden.height, "num-frames",
      golden.num_frames, "steps", 0, "model-location", model,
      "adapter-location", adapter, NULL);
  gst_util_set_object_arg (G_OBJECT (e), "backend", backend);
  gst_util_set_object_arg (G_OBJECT (e), "compute", "cpu");
  g_free (model);
  g_free (adapter);
  return e;
}

static void
run_element (const gchar * backend, const gchar * adapter_variant, Clip * c)
{
  GstHarness *hv, *ha;
  GstBus *bus;
  GByteArray *audio = g_byte_array_new ();

  new_element (&hv, &ha, &bus, backend, adapter_variant);
  gst_harness_play (hv);
  c->video = g_byte_array_new ();
  pull_all (hv, c->video);
  pull_all (ha, audio);
  c->steps = done_steps (bus);
  h3_gst_harnesses_free (hv, ha, bus);
  c->audio = g_array_sized_new (FALSE, FALSE, sizeof (gfloat),
      audio->len / sizeof (gfloat));
  g_array_append_vals (c->audio, audio->data, audio->len / sizeof (gfloat));
  g_byte_array_unref (audio);
}

static const h3_st_tensor *
golden_tensor (h3_st_file * g, const gchar * name, h3_st_dtype dtype)
{
  const h3_st_tensor *t = h3_st_find (g, name);

  fail_unless (t != NULL, "golden has no %s", name);
  fail_unless (t->dtype == dtype, "golden %s: unexpected dtype", name);
  return t;
}

GST_START_TEST (test_fa_dense_adapter_matches_golden)
{
  gchar *path = data_path ("goldens/tiny-h3/e2e_t2va_fasth3_ladderB.safetensors");
  h3_st_file *g = NULL;
  h3_status st = { 0 };
  const h3_st_tensor *u8, *audio;
  const guint8 *ref;
  const gfloat *ref_audio;
  Clip c;
  gint maxd = 0;
  gint64 frames, ndiff = 0, n_ref;
  gdouble num = 0, den = 0;

  fail_unless (h3_st_open (path, &g, &st) == H3_OK, "%s", st.message);
  u8 = golden_tensor (g, "videos_uint8", H3_ST_U8);
  audio = golden_tensor (g, "audio", H3_ST_F32);
  run_element ("fa", "dense-datafree", &c);

  fail_unless_equals_int (c.steps, 4);  /* the adapter's ladder, steps=0 */
  fail_unless_equals_int64 ((gint64) c.video->len, u8->numel);
  ref = u8->data;
  for (guint i = 0; i < c.video->len; i++) {
    gint d = ABS ((gint) c.video->data[i] - (gint) ref[i]);
    maxd = MAX (maxd, d);
    ndiff += d != 0;
  }
  g_print ("fa + dense adapter vs the golden: %" G_GINT64_FORMAT
      " of %u frame values differ, max |diff| %d\n",
      ndiff, c.video->len, maxd);
  fail_unless (maxd <= 1, "frames differ from the golden by up to %d", maxd);
  fail_unless (ndiff * 100 < (gint64) c.video->len,
      "%" G_GINT64_FORMAT " frame values differ from the golden", ndiff);

  /* The golden is [1, 2, samples] over the whole latent span; the element
   * cuts the track to the clip's duration (F/24 s), interleaved. */
  n_ref = audio->shape[2];
  frames = c.audio->len / 2;
  fail_unless (frames > 0 && frames <= n_ref, "%" G_GINT64_FORMAT
      " audio frames for a golden of %" G_GINT64_FORMAT, frames, n_ref);
  fail_unless (frames + 40 >= n_ref, "audio cut short: %" G_GINT64_FORMAT
      " of %" G_GINT64_FORMAT, frames, n_ref);
  ref_audio = audio->data;
  for (gint64 i = 0; i < frames; i++)
    for (gint ch = 0; ch < 2; ch++) {
      gdouble r = ref_audio[ch * n_ref + i];
      gdouble d = g_array_index (c.audio, gfloat, 2 * i + ch) - r;
      num += d * d;
      den += r * r;
    }
  g_print ("fa + dense adapter vs the golden: audio rel L2 %.3e over %"
      G_GINT64_FORMAT " of %" G_GINT64_FORMAT " frames\n", sqrt (num / den),
      frames, n_ref);
  fail_unless (den > 0 && sqrt (num / den) <= 1e-4, "audio rel L2 %.3e",
      sqrt (num / den));

  clip_clear (&c);
  h3_st_close (g);
  g_free (path);
}

GST_END_TEST;

GST_START_TEST (test_vsa_adapter_matches_engine)
{
  gchar *model = data_path ("models/tiny-h3");
  gchar *adapter = adapter_path ("vsa-datafree");
  h3_engine_options o = h3_engine_options_default ();
  h3_request r = h3_request_default ();
  h3_engine *e = NULL;
  h3_status st = { 0 };
  h3_test_capture cap = { 0 };
  Clip c, dense;

  o.model_dir = model;
  o.adapter_path = adapter;
  o.compute = H3_COMPUTE_CPU;
  fail_unless (h3_engine_open (&o, &e, &st) == H3_OK, "%s", st.message);
  r = h3_test_golden_request (GOLDEN);
  r.steps = 0;
  r.attention = H3_ATTENTION_VSA;
  fail_unless (h3_test_generate (e, &r, &cap, NULL, &st) == H3_OK, "%s",
      st.message);
  h3_engine_close (e);

  run_element ("vsa", "vsa-datafree", &c);
  fail_unless_equals_int (c.steps, 4);
  fail_unless_equals_int64 ((gint64) c.video->len,
      (gint64) cap.plan.num_frames * cap.plan.width * cap.plan.height * 3);
  fail_unless (memcmp (c.video->data, cap.video, c.video->len) == 0,
      "vsa: the element's frames are not the engine's");
  fail_unless (c.audio->len / 2 <= (guint) cap.samples);
  fail_unless (memcmp (c.audio->data, cap.audio,
          c.audio->len * sizeof (gfloat)) == 0,
      "vsa: the element's samples are not the engine's");

  /* Sparse attention with its own adapter is not the dense clip. */
  run_element ("fa", "dense-datafree", &dense);
  fail_unless (dense.video->len == c.video->len
      && memcmp (dense.video->data, c.video->data, c.video->len) != 0,
      "backend=vsa gave the backend=fa clip");

  clip_clear (&dense);
  clip_clear (&c);
  h3_test_capture_free (&cap);
  g_free (model);
  g_free (adapter);
}

GST_END_TEST;

static void
expect_mismatch (const gchar * backend, const gchar * variant,
    const gchar * must_name)
{
  GstHarness *hv, *ha;
  GstBus *bus;
  GstMessage *m, *m2;
  GError *err = NULL;
  gchar *dbg = NULL;
  guint progress = 0;

  new_element (&hv, &ha, &bus, backend, variant);
  fail_unless_equals_int (gst_element_set_state (hv->element,
          GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  m = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  fail_unless (m != NULL, "backend=%s with %s: no error", backend, variant);
  gst_message_parse_error (m, &err, &dbg);
  g_print ("backend=%s with %s: %s\n", backend, variant, err->message);
  fail_unless (err->domain == GST_LIBRARY_ERROR
      && err->code == GST_LIBRARY_ERROR_SETTINGS,
      "backend=%s with %s: %s %d '%s'", backend, variant,
      g_quark_to_string (err->domain), err->code, err->message);
  fail_unless (strstr (err->message, must_name) != NULL,
      "backend=%s with %s: '%s' does not say '%s'", backend, variant,
      err->message, must_name);
  fail_unless (gst_harness_try_pull (hv) == NULL, "a frame after the error");
  /* Nothing was loaded for it. */
  while ((m2 = gst_bus_pop_filtered (bus, GST_MESSAGE_PROGRESS))) {
    progress++;
    gst_message_unref (m2);
  }
  fail_unless_equals_int (progress, 0);
  gst_element_set_state (hv->element, GST_STATE_NULL);
  g_error_free (err);
  g_free (dbg);
  gst_message_unref (m);
  h3_gst_harnesses_free (hv, ha, bus);
}

GST_START_TEST (test_mode_adapter_mismatch)
{
  expect_mismatch ("vsa", "dense-datafree", "backend=vsa");
  expect_mismatch ("fa", "vsa-datafree", "backend=fa");
}

GST_END_TEST;

static Suite *
h3videosrc_fasth3_suite (void)
{
  Suite *s = suite_create ("h3videosrc-fasth3");
  TCase *tc = tcase_create ("fasth3");

  tcase_set_timeout (tc, 600);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_fa_dense_adapter_matches_golden);
  tcase_add_test (tc, test_vsa_adapter_matches_engine);
  tcase_add_test (tc, test_mode_adapter_mismatch);
  return s;
}

GST_CHECK_MAIN (h3videosrc_fasth3);
