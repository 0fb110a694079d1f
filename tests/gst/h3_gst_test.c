/* h3_gst_test.c - the helpers of h3_gst_test.h. */
#include "h3_gst_test.h"

struct _H3Finalized
{
  gint done;                    /* atomic */
};

static void
mark_finalized (gpointer data)
{
  g_atomic_int_set (&((H3Finalized *) data)->done, TRUE);
}

/* "Finalized", not "its weak references cleared": GLib clears those when
 * the last unref begins, before dispose. The element may then still be
 * finalizing on its generation thread, listed by the leaks tracer, and
 * get-live-objects would take a reference to it and dispose it a second
 * time. Object data is destroyed at the very end of finalize, after the
 * tracer has forgotten the object, and without taking a reference. The
 * watch itself is freed by h3_gst_wait_finalized, so the destroy notify
 * only marks it. */
H3Finalized *
h3_gst_watch_finalized (gpointer obj)
{
  static GQuark quark;
  H3Finalized *f = g_new0 (H3Finalized, 1);

  if (!quark)
    quark = g_quark_from_static_string ("h3-gst-test-finalized");
  g_object_set_qdata_full (G_OBJECT (obj), quark, f, mark_finalized);
  return f;
}

void
h3_gst_wait_finalized (H3Finalized * f, const gchar * after)
{
  gboolean gone = FALSE;

  for (gint i = 0; i < 1000 && !gone; i++) {
    gone = g_atomic_int_get (&f->done);
    if (!gone)
      g_usleep (10000);
  }
  fail_unless (gone, "h3videosrc still alive 10 s after %s", after);
  g_free (f);
}

void
h3_gst_unref_and_wait (gpointer element, const gchar * after)
{
  H3Finalized *f = h3_gst_watch_finalized (element);

  gst_object_unref (element);
  h3_gst_wait_finalized (f, after);
}

GstElement *
h3_gst_harnesses_new (GstHarness ** hv, GstHarness ** ha, GstBus ** bus)
{
  *hv = gst_harness_new_with_padnames ("h3videosrc", NULL, "video");
  *ha = gst_harness_new_with_element ((*hv)->element, NULL, "audio");
  *bus = gst_bus_new ();
  gst_element_set_bus ((*hv)->element, *bus);
  return (*hv)->element;
}

void
h3_gst_harnesses_free (GstHarness * hv, GstHarness * ha, GstBus * bus)
{
  GstElement *e = gst_object_ref (hv->element);
  H3Finalized *f = h3_gst_watch_finalized (e);

  gst_harness_teardown (ha);
  gst_harness_teardown (hv);
  gst_bus_set_flushing (bus, TRUE);
  gst_object_unref (bus);
  gst_object_unref (e);
  h3_gst_wait_finalized (f, "the harnesses were torn down");
}

GstMessage *
h3_gst_pop_eos_or_error (GstBus * bus, GstClockTime timeout,
    const gchar * what)
{
  GstMessage *m = gst_bus_timed_pop_filtered (bus, timeout,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);

  fail_unless (m != NULL, "%s: neither EOS nor an error within %"
      G_GUINT64_FORMAT " s", what, (guint64) (timeout / GST_SECOND));
  if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_EOS) {
    gst_message_unref (m);
    return NULL;
  }
  return m;
}

void
h3_gst_wait_eos (GstBus * bus, GstClockTime timeout, const gchar * what)
{
  GstMessage *m = h3_gst_pop_eos_or_error (bus, timeout, what);

  if (m) {
    GError *err;
    gchar *dbg;

    gst_message_parse_error (m, &err, &dbg);
    fail ("%s: error from %s: %s (%s)", what, GST_MESSAGE_SRC_NAME (m),
        err->message, dbg);
  }
}

GstMessage *
h3_gst_wait_element_message (GstBus * bus, const gchar * name,
    GstClockTime timeout)
{
  gint64 deadline = g_get_monotonic_time () + timeout / 1000;

  for (;;) {
    gint64 left = deadline - g_get_monotonic_time ();
    GstMessage *m;

    if (left <= 0)
      return NULL;
    m = gst_bus_timed_pop_filtered (bus, left * 1000,
        GST_MESSAGE_ELEMENT | GST_MESSAGE_ERROR);
    if (!m)
      return NULL;
    if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ERROR) {
      GError *err;
      gchar *dbg;
      gst_message_parse_error (m, &err, &dbg);
      fail ("unexpected error: %s (%s)", err->message, dbg);
    }
    if (gst_message_has_name (m, name))
      return m;
    gst_message_unref (m);
  }
}
