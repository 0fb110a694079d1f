/* h3_gst_test.h - the pipeline scaffolding every h3videosrc gst-check
 * suite repeats: waiting for an element to be finalized (the leaks tracer
 * checks each test at exit), harnessing an element on both pads and tearing
 * it down, and popping a bus up to EOS, an error or an element message
 * within a time limit. Linked into
 * every suite (tests/gst/meson.build); h3videosrc_check.[ch] builds on it
 * for the suites that share a clip. */
#ifndef H3_GST_TEST_H
#define H3_GST_TEST_H

#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>

/* A watch on an object's finalization (h3_gst_watch_finalized). */
typedef struct _H3Finalized H3Finalized;

/* Starts watching obj: its finalize marks the watch (object data, which
 * GLib destroys at the very end of finalize; h3_gst_test.c says why not a
 * weak reference). No reference is taken. */
H3Finalized *h3_gst_watch_finalized (gpointer obj);
/* Waits up to 10 s for the watched object to be finalized, fails with
 * "h3videosrc still alive 10 s after <after>" otherwise; frees the watch. */
void h3_gst_wait_finalized (H3Finalized * f, const gchar * after);
/* Drops a reference to an h3videosrc and waits until it is finalized: its
 * generation thread holds a reference until a cancelled step returns. */
void h3_gst_unref_and_wait (gpointer element, const gchar * after);
/* An h3videosrc harnessed on both pads (*hv: video, *ha: audio) with a
 * bus of its own (a harnessed element has none) to see its messages. */
GstElement *h3_gst_harnesses_new (GstHarness ** hv, GstHarness ** ha,
    GstBus ** bus);
/* Tears down the harnesses of both pads of one h3videosrc and its bus,
 * then waits until the element is finalized. */
void h3_gst_harnesses_free (GstHarness * hv, GstHarness * ha, GstBus * bus);

/* Pops the bus's EOS or error within timeout; fails with "<what>: neither
 * EOS nor an error within N s" when none comes. Returns the error message
 * (the caller unrefs it), or NULL at EOS. */
GstMessage *h3_gst_pop_eos_or_error (GstBus * bus, GstClockTime timeout,
    const gchar * what);
/* Waits for EOS within timeout: an error (its message and debug string) or
 * no EOS fails the test, naming what. */
void h3_gst_wait_eos (GstBus * bus, GstClockTime timeout, const gchar * what);
/* The first element message named name within timeout (the caller unrefs
 * it), or NULL; the other messages popped on the way are dropped, and an
 * error fails the test. */
GstMessage *h3_gst_wait_element_message (GstBus * bus, const gchar * name,
    GstClockTime timeout);

#endif
