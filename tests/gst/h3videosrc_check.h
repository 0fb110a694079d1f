/* h3videosrc_check.h - what the h3videosrc gst-check suites share
 * (test_h3videosrc.c: the clip; test_h3videosrc_element.c: the element's
 * interface and life; test_h3videosrc_tools.c: the model's sample rate): the small request, waiting for an element to be
 * finalized, a harnessed clip on both pads and its collected output, and
 * bus helpers. Built into each suite's executable (tests/gst/meson.build). */
#ifndef H3VIDEOSRC_CHECK_H
#define H3VIDEOSRC_CHECK_H

#include <gst/check/gstcheck.h>
#include <gst/check/gstconsistencychecker.h>
#include <gst/check/gstharness.h>

#include "h3_gst_test.h"

#define PROMPT "a robot dancing"
#define W 64
#define H 32
#define FRAMES 22               /* 22 is already 17n+5 */
#define STEPS 2
#define LONG_STEPS 1000         /* far more than any test waits for */

/* One pad's output up to EOS (output_collect). */
typedef struct
{
  GPtrArray *events;
  GPtrArray *buffers;
  gchar *checksum;              /* SHA-256 of every buffer's bytes */
} Output;

/* An h3videosrc harnessed on both pads, with consistency checkers and a
 * bus of its own (clip_new, clip_free). */
typedef struct
{
  GstHarness *hv, *ha;
  GstStreamConsistency *cv, *ca;
  GstBus *bus;
} Clip;

/* Buffers and EOS seen on one pad (a probe of pipe_new's). */
typedef struct
{
  gint buffers;
  gboolean eos;
} PadCount;

/* A parsed pipeline around an h3videosrc named "s", its bus, probes and
 * consistency checkers on both pads (pipe_new, pipe_free). */
typedef struct
{
  GstElement *pipeline, *src;
  GstBus *bus;
  PadCount video, audio;
  GstStreamConsistency *cv, *ca;
} Pipe;

/* A pipeline that stays mid-generation for longer than any test waits. */
#define LONG_PIPE \
  "h3videosrc name=s prompt=\"" PROMPT "\" width=64 height=32 num-frames=22 " \
  "steps=1000 s.video ! queue ! fakesink s.audio ! queue ! fakesink"

/* The sample rate of the model the element runs (its audio VAE's
 * sampling_rate): the audio caps must carry it. */
gint model_rate (void);
/* The small request (PROMPT, W x H, FRAMES, STEPS) with this seed. */
void set_small (GstElement * e, guint64 seed);
/* seconds in microseconds, times H3_TEST_TIME_SCALE (the valgrind suite
 * sets it: everything runs some 20 times slower there). */
gint64 time_limit_us (gdouble seconds);
gboolean caps_equal (GstCaps * caps, const gchar * expected);
/* Drops a reference to an h3videosrc and waits until it is finalized
 * (h3videosrc_check.c says why finalized). */
void unref_and_wait (GstElement * e);
/* The timestamp of frame n at 24 fps. */
GstClockTime frame_time (guint64 n);
void clip_new (Clip * c, guint64 seed);
void clip_free (Clip * c);
/* Pulls every event up to EOS, then the buffers queued before it. */
void output_collect (GstHarness * h, Output * o);
void output_clear (Output * o);
/* The first event of that type, or NULL. */
GstEvent *output_event (Output * o, GstEventType type);
/* Generates the small clip on both pads of a fresh element. */
void generate (guint64 seed, Output * video, Output * audio);
/* Waits for an element message with the given structure name (an error
 * fails the test). */
gboolean wait_element_message (GstBus * bus, const gchar * name,
    GstClockTime timeout);
/* Waits for an error and checks its domain and code, and that its message
 * says must_say (when not NULL). */
void expect_error_saying (GstBus * bus, GQuark domain, gint code,
    const gchar * what, const gchar * must_say);
/* Pops and counts the queued messages of these types. */
guint count_messages (GstBus * bus, GstMessageType type);
/* Parses desc (its h3videosrc named "s") and watches both pads. */
void pipe_new (Pipe * p, const gchar * desc);
/* To NULL (which must succeed), then everything freed and the element
 * finalized. */
void pipe_free (Pipe * p);
/* Runs a pipeline to EOS or error; returns the error message or NULL. */
GstMessage *pipe_run (Pipe * p);

#endif
