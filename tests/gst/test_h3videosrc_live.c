/* test_h3videosrc_live.c - gst-check suite for h3videosrc's live mode:
 * is-live, the LATENCY answer and its estimate, queue-prompt, and mixing
 * with live test sources in compositor and audiomixer without a late
 * buffer.
 *
 * The real element runs the embedded tiny model on the CPU (64x32, 22
 * frames, 2 steps). */
#include <gst/check/gstcheck.h>
#include <string.h>

#define PROMPT "a robot dancing"
#define FRAMES 22
#define MARGIN (200 * GST_MSECOND)      /* GST_H3_LIVE_MARGIN */

static GstClockTime
frame_time (guint64 n)
{
  return gst_util_uint64_scale (n, GST_SECOND, 24);
}

static GstElement *
small_live_src (const gchar * name)
{
  GstElement *e = gst_element_factory_make ("h3videosrc", name);

  g_object_set (e, "prompt", PROMPT, "seed", (guint64) 42, "width", 64,
      "height", 32, "num-frames", FRAMES, "steps", 2, "is-live", TRUE, NULL);
  return e;
}

static GstClockTime
query_latency (GstElement * e, gboolean * live)
{
  GstQuery *q = gst_query_new_latency ();
  GstClockTime min, max;

  fail_unless (gst_element_query (e, q));
  gst_query_parse_latency (q, live, &min, &max);
  gst_query_unref (q);
  return min;
}

static gboolean
queue_prompt (GstElement * e, const gchar * prompt, guint64 seed)
{
  gboolean ok = FALSE;

  g_signal_emit_by_name (e, "queue-prompt", prompt, seed, &ok);
  return ok;
}

/* Pops messages until one of the types (an error fails the test). */
static GstMessage *
bus_wait (GstBus * bus, GstMessageType types, GstClockTime timeout)
{
  GstMessage *m = gst_bus_timed_pop_filtered (bus, timeout,
      types | GST_MESSAGE_ERROR);

  if (m && GST_MESSAGE_TYPE (m) == GST_MESSAGE_ERROR) {
    GError *err;
    gchar *debug;
    gst_message_parse_error (m, &err, &debug);
    fail ("error from %s: %s (%s)", GST_MESSAGE_SRC_NAME (m), err->message,
        debug);
  }
  return m;
}

/* ---- queries and the signal ------------------------------------------------- */

GST_START_TEST (test_live_queries)
{
  GstElement *pipe = gst_pipeline_new (NULL);
  GstElement *e = small_live_src ("s");
  GstElement *vs = gst_element_factory_make ("fakesink", NULL);
  GstElement *as = gst_element_factory_make ("fakesink", NULL);
  GstElement *plain = gst_element_factory_make ("h3videosrc", NULL);
  gboolean live, seekable = TRUE;
  GstQuery *q;
  gint64 dur = 0;

  /* Live: the latency answer, no seeking, no end. */
  fail_unless_equals_uint64 (query_latency (e, &live), MARGIN);
  fail_unless (live);
  g_object_set (e, "latency", (gint64) 3 * GST_SECOND, NULL);
  fail_unless_equals_uint64 (query_latency (e, &live), 3 * GST_SECOND);
  q = gst_query_new_seeking (GST_FORMAT_TIME);
  fail_unless (gst_element_query (e, q));
  gst_query_parse_seeking (q, NULL, &seekable, NULL, NULL);
  fail_if (seekable);
  gst_query_unref (q);
  fail_unless (gst_element_query_duration (e, GST_FORMAT_TIME, &dur));
  fail_unless_equals_int64 (dur, -1);

  /* queue-prompt: live only, and not empty. */
  fail_if (queue_prompt (plain, "waves", 1));
  fail_if (queue_prompt (e, "  ", 1));
  fail_unless (queue_prompt (e, "waves", 1));
  gst_object_unref (plain);

  /* No preroll: a live source. */
  gst_bin_add_many (GST_BIN (pipe), e, vs, as, NULL);
  fail_unless (gst_element_link_pads (e, "video", vs, "sink"));
  fail_unless (gst_element_link_pads (e, "audio", as, "sink"));
  fail_unless_equals_int (gst_element_set_state (pipe, GST_STATE_PAUSED),
      GST_STATE_CHANGE_NO_PREROLL);
  fail_unless_equals_int (gst_element_set_state (pipe, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_object_unref (pipe);
}

GST_END_TEST;

/* ---- the estimate ------------------------------------------------------------ */

/* Without a `latency`, the element answers the margin until it has
 * generated a clip, then the measured time times 1.25 plus the margin, and
 * says so with a LATENCY message. */
GST_START_TEST (test_live_latency_estimate)
{
  GstElement *pipe = gst_parse_launch ("h3videosrc name=s prompt=\"" PROMPT
      "\" width=64 height=32 num-frames=22 steps=2 is-live=true "
      "s.video ! fakesink sync=true s.audio ! fakesink sync=true", NULL);
  GstElement *s = gst_bin_get_by_name (GST_BIN (pipe), "s");
  GstBus *bus = gst_element_get_bus (pipe);
  GstStructure *stats = NULL;
  GstMessage *m;
  gdouble total;
  gboolean live;
  GstClockTime want;

  fail_unless_equals_uint64 (query_latency (s, &live), MARGIN);
  fail_unless (gst_element_set_state (pipe, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  for (;;) {
    m = bus_wait (bus, GST_MESSAGE_LATENCY, 120 * GST_SECOND);
    fail_unless (m != NULL, "no LATENCY message");
    if (GST_MESSAGE_SRC (m) == GST_OBJECT (s)) {
      gst_message_unref (m);
      break;
    }
    gst_message_unref (m);
  }
  g_object_get (s, "stats", &stats, NULL);
  fail_unless (stats != NULL);
  fail_unless (gst_structure_get_double (stats, "total", &total));
  gst_structure_free (stats);
  want = (GstClockTime) (total * 1.25 * GST_SECOND) + MARGIN;
  fail_unless_equals_uint64 (query_latency (s, &live), want);
  fail_unless (live);
  /* Another element on the same (shared) engine estimates from it too,
   * before it generated anything: an RTSP server's second client. */
  {
    GstElement *other = small_live_src (NULL);
    fail_unless_equals_uint64 (query_latency (other, &live), want);
    g_object_set (other, "engine-cache", FALSE, NULL);
    fail_unless_equals_uint64 (query_latency (other, &live), MARGIN);
    gst_object_unref (other);
  }
  fail_unless_equals_int (gst_element_set_state (pipe, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_object_unref (bus);
  gst_object_unref (s);
  gst_object_unref (pipe);
}

GST_END_TEST;

/* ---- mixing with live sources -------------------------------------------------- */

typedef struct
{
  GMutex lock;
  GstElement *pipeline;
  GstClockTime latency;         /* the LATENCY event h3videosrc received */
  /* What h3videosrc's branches delivered to the mixers. */
  gint video_buffers;
  GstClockTime video_next;      /* expected PTS of the next buffer */
  guint64 video_offset;
  GstClockTime audio_next;
  guint64 audio_offset;
  gint late;                    /* buffers that reached a mixer past their deadline */
  GstClockTimeDiff worst;       /* the least slack seen */
  gint gaps, discontinuities;
  GstClockTime first_pts;
  gint mixed;                   /* compositor output buffers */
  GstClockTime mixed_end;
  /* Checksums of the h3 frames that reached the compositor, and how many
   * output frames showed each (its region, copied with operator=source). */
  GHashTable *h3_frames;
} Mix;

#define H3_W 64
#define H3_H 32
#define OUT_W 128

static gchar *
region_checksum (GstBuffer * buf, gint stride)
{
  GChecksum *sum = g_checksum_new (G_CHECKSUM_SHA1);
  GstMapInfo map;
  gchar *hex;

  fail_unless (gst_buffer_map (buf, &map, GST_MAP_READ));
  for (gint y = 0; y < H3_H; y++)
    g_checksum_update (sum, map.data + (gsize) y * stride, H3_W * 4);
  gst_buffer_unmap (buf, &map);
  hex = g_strdup (g_checksum_get_string (sum));
  g_checksum_free (sum);
  return hex;
}

static GstPadProbeReturn
latency_event (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  Mix *x = data;
  GstEvent *ev = GST_PAD_PROBE_INFO_EVENT (info);

  if (GST_EVENT_TYPE (ev) == GST_EVENT_LATENCY) {
    g_mutex_lock (&x->lock);
    gst_event_parse_latency (ev, &x->latency);
    g_mutex_unlock (&x->lock);
  }
  return GST_PAD_PROBE_OK;
}

/* At a mixer's sink pad: the buffer must be there before its running time
 * plus the pipeline's latency (the mixer's deadline), and follow the last
 * one without a hole. */
static GstPadProbeReturn
mixer_input (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  Mix *x = g_object_get_data (G_OBJECT (pad), "mix");
  gboolean video = GPOINTER_TO_INT (data);
  GstBuffer *buf;
  GstClockTime now, pts;
  GstClock *clock;
  GstClockTimeDiff slack;

  if (info->type & GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM) {
    if (GST_EVENT_TYPE (GST_PAD_PROBE_INFO_EVENT (info)) == GST_EVENT_GAP) {
      g_mutex_lock (&x->lock);
      x->gaps++;
      g_mutex_unlock (&x->lock);
    }
    return GST_PAD_PROBE_OK;
  }
  buf = GST_PAD_PROBE_INFO_BUFFER (info);
  pts = GST_BUFFER_PTS (buf);
  clock = gst_element_get_clock (x->pipeline);
  fail_unless (clock != NULL);
  now = gst_clock_get_time (clock) - gst_element_get_base_time (x->pipeline);
  gst_object_unref (clock);

  g_mutex_lock (&x->lock);
  /* Segment [0, ...), base 0: the PTS is the running time. A live
   * pipeline configures its latency once its sinks have prerolled, in
   * PLAYING, with the first buffers: the deadline holds from then on. */
  slack = GST_CLOCK_DIFF (now, pts + x->latency);
  if (x->latency > 0 && slack < 0) {
    x->late++;
    GST_WARNING ("late %s buffer %" GST_TIME_FORMAT " at %" GST_TIME_FORMAT
        " (latency %" GST_TIME_FORMAT ")", video ? "video" : "audio",
        GST_TIME_ARGS (pts), GST_TIME_ARGS (now), GST_TIME_ARGS (x->latency));
  }
  if (x->latency > 0 && slack < x->worst)
    x->worst = slack;
  if (video) {
    if (x->video_buffers == 0)
      x->first_pts = pts;
    else if (pts != x->video_next)
      x->discontinuities++;
    x->video_next = pts + GST_BUFFER_DURATION (buf);
    fail_unless_equals_uint64 (GST_BUFFER_OFFSET (buf), x->video_offset);
    x->video_offset = GST_BUFFER_OFFSET_END (buf);
    x->video_buffers++;
    /* AYUV 64x32: no padding. */
    g_hash_table_insert (x->h3_frames, region_checksum (buf, H3_W * 4),
        GINT_TO_POINTER (0));
  } else {
    if (GST_CLOCK_TIME_IS_VALID (x->audio_next) && pts != x->audio_next)
      x->discontinuities++;
    x->audio_next = pts + GST_BUFFER_DURATION (buf);
  }
  g_mutex_unlock (&x->lock);
  return GST_PAD_PROBE_OK;
}

static void
mixed_handoff (GstElement * sink, GstBuffer * buf, GstPad * pad, gpointer data)
{
  Mix *x = data;

  gchar *sum = region_checksum (buf, OUT_W * 4);
  gpointer shown;

  g_mutex_lock (&x->lock);
  x->mixed++;
  x->mixed_end = GST_BUFFER_PTS (buf) + GST_BUFFER_DURATION (buf);
  if (g_hash_table_lookup_extended (x->h3_frames, sum, NULL, &shown))
    g_hash_table_insert (x->h3_frames, g_strdup (sum),
        GINT_TO_POINTER (GPOINTER_TO_INT (shown) + 1));
  g_mutex_unlock (&x->lock);
  g_free (sum);
}

static void
probe_mixer_pad (Mix * x, const gchar * element, gboolean video)
{
  GstElement *e = gst_bin_get_by_name (GST_BIN (x->pipeline), element);
  GstPad *src = gst_element_get_static_pad (e, "src");
  GstPad *sink = gst_pad_get_peer (src);

  g_object_set_data (G_OBJECT (sink), "mix", x);
  /* On top, copied as it is: the output's top-left corner is the h3
   * frame, byte for byte. */
  if (video) {
    gst_util_set_object_arg (G_OBJECT (sink), "operator", "source");
    g_object_set (sink, "zorder", 10, NULL);
  }
  gst_pad_add_probe (sink, GST_PAD_PROBE_TYPE_BUFFER |
      GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, mixer_input,
      GINT_TO_POINTER (video), NULL);
  gst_object_unref (sink);
  gst_object_unref (src);
  gst_object_unref (e);
}

/* h3videosrc is-live with a given latency and a queued prompt, next to
 * videotestsrc is-live in a compositor and audiotestsrc is-live in an
 * audiomixer, into synchronising sinks with QoS: both clips reach the
 * mixers before their deadlines, one after the other without a hole, and
 * no QoS message says anything was dropped. */
GST_START_TEST (test_live_compositor_no_drops)
{
  const gchar *desc_format =
      "compositor name=mix background=black ! "
      "video/x-raw,format=AYUV,width=128,height=64,framerate=24/1 ! "
      "fakesink name=vout sync=true qos=true signal-handoffs=true "
      "videotestsrc is-live=true pattern=ball ! "
      "video/x-raw,format=AYUV,width=128,height=64,framerate=24/1 ! mix. "
      "h3videosrc name=s is-live=true latency=3000000000 prompt=\"" PROMPT
      "\" width=64 height=32 num-frames=22 steps=2 seed=42 "
      "s.video ! videoconvert ! video/x-raw,format=AYUV ! "
      "identity name=vconv ! mix. "
      "audiomixer name=amix ! fakesink name=aout sync=true qos=true "
      "audiotestsrc is-live=true wave=silence ! "
      "audio/x-raw,format=F32LE,rate=%d,channels=2 ! amix. "
      "s.audio ! identity name=aconv ! amix.";
  gchar *desc;
  GError *err = NULL;
  Mix x;
  GstElement *s, *vout;
  GstBus *bus;
  GstPad *pad;
  GstMessage *m;
  gint qos = 0;
  gint64 deadline;
  GstStateChangeReturn ret;
  GstClockTime end = 2 * frame_time (FRAMES);

  memset (&x, 0, sizeof x);
  g_mutex_init (&x.lock);
  x.audio_next = GST_CLOCK_TIME_NONE;
  x.worst = G_MAXINT64;
  x.h3_frames = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  /* audiotestsrc at the model's rate: audiomixer mixes without a
   * resampler (which would hold its filter's last samples). */
  {
    GstElement *e = small_live_src (NULL);
    GstPad *apad = gst_element_get_static_pad (e, "audio");
    GstCaps *caps = gst_pad_query_caps (apad, NULL);
    gint rate = 0;
    fail_unless (gst_structure_get_int (gst_caps_get_structure (caps, 0),
            "rate", &rate));
    desc = g_strdup_printf (desc_format, rate);
    gst_caps_unref (caps);
    gst_object_unref (apad);
    gst_object_unref (e);
  }
  x.pipeline = gst_parse_launch (desc, &err);
  g_free (desc);
  fail_unless (x.pipeline != NULL, "%s", err ? err->message : "");
  bus = gst_element_get_bus (x.pipeline);
  s = gst_bin_get_by_name (GST_BIN (x.pipeline), "s");
  pad = gst_element_get_static_pad (s, "video");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_EVENT_UPSTREAM, latency_event,
      &x, NULL);
  gst_object_unref (pad);
  probe_mixer_pad (&x, "vconv", TRUE);
  probe_mixer_pad (&x, "aconv", FALSE);
  vout = gst_bin_get_by_name (GST_BIN (x.pipeline), "vout");
  g_signal_connect (vout, "handoff", G_CALLBACK (mixed_handoff), &x);
  gst_object_unref (vout);

  /* A second clip follows the first: a live channel. */
  fail_unless (queue_prompt (s, "waves at dusk", 7));
  /* ASYNC as a rule; SUCCESS when the sinks prerolled on the live sources'
   * first buffers before the bin finished setting its other children to
   * PLAYING (seen once in CI under ASan). */
  ret = gst_element_set_state (x.pipeline, GST_STATE_PLAYING);
  fail_unless (ret == GST_STATE_CHANGE_ASYNC ||
      ret == GST_STATE_CHANGE_SUCCESS, "PLAYING: %s",
      gst_element_state_change_return_get_name (ret));

  /* Until both clips went through the mixers and the compositor's output
   * is past their end. */
  deadline = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;
  for (;;) {
    gboolean done;
    m = bus_wait (bus, GST_MESSAGE_QOS | GST_MESSAGE_WARNING |
        GST_MESSAGE_LATENCY, 50 * GST_MSECOND);
    if (m) {
      if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_QOS) {
        GST_WARNING ("QoS from %s", GST_MESSAGE_SRC_NAME (m));
        qos++;
      } else if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_LATENCY) {
        gst_bin_recalculate_latency (GST_BIN (x.pipeline));
      } else {
        GError *e;
        gst_message_parse_warning (m, &e, NULL);
        fail ("warning from %s: %s", GST_MESSAGE_SRC_NAME (m), e->message);
      }
      gst_message_unref (m);
    }
    g_mutex_lock (&x.lock);
    done = x.video_buffers == 2 * FRAMES && GST_CLOCK_TIME_IS_VALID
        (x.audio_next) && x.audio_next >= x.first_pts + end
        && x.mixed_end > x.first_pts + end;
    g_mutex_unlock (&x.lock);
    if (done)
      break;
    fail_unless (g_get_monotonic_time () < deadline, "the clips did not go "
        "through within 20 s (%d video buffers, %d mixed, audio to %"
        GST_TIME_FORMAT ", first PTS %" GST_TIME_FORMAT ")", x.video_buffers,
        x.mixed, GST_TIME_ARGS (x.audio_next), GST_TIME_ARGS (x.first_pts));
  }
  fail_unless (gst_element_send_event (x.pipeline, gst_event_new_eos ()));
  m = bus_wait (bus, GST_MESSAGE_EOS, 60 * GST_SECOND);
  fail_unless (m != NULL, "no EOS after the application's EOS");
  gst_message_unref (m);
  fail_unless_equals_int (gst_element_set_state (x.pipeline, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);

  GST_INFO ("latency %" GST_TIME_FORMAT ", first PTS %" GST_TIME_FORMAT
      ", least slack %" G_GINT64_FORMAT " ns, %d mixed frames",
      GST_TIME_ARGS (x.latency), GST_TIME_ARGS (x.first_pts), x.worst,
      x.mixed);
  /* The pipeline's latency holds the element's 3 s. */
  fail_unless (x.latency >= 3 * GST_SECOND, "latency %" GST_TIME_FORMAT,
      GST_TIME_ARGS (x.latency));
  fail_unless_equals_int (x.late, 0);
  fail_unless_equals_int (qos, 0);
  /* The second clip starts where the first ends: no hole, no gap. */
  fail_unless_equals_int (x.discontinuities, 0);
  fail_unless_equals_int (x.gaps, 0);
  fail_unless_equals_uint64 (x.video_offset, 2 * FRAMES);
  fail_unless_equals_uint64 (x.video_next, x.first_pts + end);
  /* The mixed stream ran through both clips at 24 fps, and showed every
   * h3 frame (the compositor dropped none). */
  fail_unless (x.mixed >= 2 * FRAMES, "%d mixed frames", x.mixed);
  {
    GHashTableIter it;
    gpointer key, shown;
    gint missing = 0;
    fail_unless (g_hash_table_size (x.h3_frames) > FRAMES);
    g_hash_table_iter_init (&it, x.h3_frames);
    while (g_hash_table_iter_next (&it, &key, &shown))
      missing += GPOINTER_TO_INT (shown) == 0;
    fail_unless_equals_int (missing, 0);
  }
  g_hash_table_unref (x.h3_frames);

  gst_object_unref (s);
  gst_object_unref (bus);
  gst_object_unref (x.pipeline);
  g_mutex_clear (&x.lock);
}

GST_END_TEST;

/* ---- a clip queued late ---------------------------------------------------- */

typedef struct
{
  GMutex lock;
  gint buffers;
  GstClockTime first_pts[2], end[2];    /* of each clip (by OFFSET) */
  guint64 last_offset_end;
  GstClockTime gap_start, gap_duration;
  gint gaps, tags;
  gchar *title;
} LiveSink;

static GstPadProbeReturn
live_sink_probe (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  LiveSink *k = data;

  g_mutex_lock (&k->lock);
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER) {
    GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER (info);
    gint clip = GST_BUFFER_OFFSET (b) < FRAMES ? 0 : 1;
    if (k->buffers == FRAMES * clip)
      k->first_pts[clip] = GST_BUFFER_PTS (b);
    k->end[clip] = GST_BUFFER_PTS (b) + GST_BUFFER_DURATION (b);
    fail_unless_equals_uint64 (GST_BUFFER_OFFSET (b), k->last_offset_end);
    k->last_offset_end = GST_BUFFER_OFFSET_END (b);
    k->buffers++;
  } else {
    GstEvent *ev = GST_PAD_PROBE_INFO_EVENT (info);
    if (GST_EVENT_TYPE (ev) == GST_EVENT_GAP) {
      gst_event_parse_gap (ev, &k->gap_start, &k->gap_duration);
      k->gaps++;
    } else if (GST_EVENT_TYPE (ev) == GST_EVENT_TAG && k->buffers > 0) {
      GstTagList *tags;
      gst_event_parse_tag (ev, &tags);
      g_free (k->title);
      k->title = NULL;
      gst_tag_list_get_string (tags, GST_TAG_TITLE, &k->title);
      k->tags++;
    }
  }
  g_mutex_unlock (&k->lock);
  return GST_PAD_PROBE_OK;
}

/* A prompt queued after the last clip has ended: the next clip cannot
 * follow at once, so it starts by when it was complete (plus the margin,
 * less the latency), after a GAP event for the time in between; offsets
 * go on, and its tags name its prompt. */
GST_START_TEST (test_live_late_clip_gap)
{
  GstElement *pipe = gst_parse_launch ("h3videosrc name=s prompt=\"" PROMPT
      "\" width=64 height=32 num-frames=22 steps=2 is-live=true "
      "latency=1000000000 s.video ! fakesink name=vs sync=false "
      "s.audio ! fakesink sync=false", NULL);
  GstElement *s = gst_bin_get_by_name (GST_BIN (pipe), "s");
  GstElement *vs = gst_bin_get_by_name (GST_BIN (pipe), "vs");
  GstPad *pad = gst_element_get_static_pad (vs, "sink");
  GstBus *bus = gst_element_get_bus (pipe);
  LiveSink k;
  gint64 deadline;
  GstMessage *m;
  GstClockTime queued_rt;

  memset (&k, 0, sizeof k);
  g_mutex_init (&k.lock);
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER |
      GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, live_sink_probe, &k, NULL);
  fail_unless (gst_element_set_state (pipe, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  deadline = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;
  while (g_atomic_int_get (&k.buffers) < FRAMES) {
    fail_unless (g_get_monotonic_time () < deadline, "no first clip");
    g_usleep (10000);
  }
  /* Well after the first clip's end (in running time). */
  g_usleep (2 * G_USEC_PER_SEC);
  {
    GstClock *clock = gst_element_get_clock (pipe);
    queued_rt = gst_clock_get_time (clock) - gst_element_get_base_time (pipe);
    gst_object_unref (clock);
  }
  fail_unless (queued_rt > k.end[0] + GST_SECOND);
  fail_unless (queue_prompt (s, "waves at dusk", 7));
  while (g_atomic_int_get (&k.buffers) < 2 * FRAMES) {
    fail_unless (g_get_monotonic_time () < deadline, "no second clip");
    g_usleep (10000);
  }
  fail_unless (gst_element_send_event (pipe, gst_event_new_eos ()));
  m = bus_wait (bus, GST_MESSAGE_EOS, 60 * GST_SECOND);
  fail_unless (m != NULL);
  gst_message_unref (m);
  fail_unless_equals_int (gst_element_set_state (pipe, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);

  GST_INFO ("clip 0 %" GST_TIME_FORMAT "..%" GST_TIME_FORMAT ", clip 1 from %"
      GST_TIME_FORMAT, GST_TIME_ARGS (k.first_pts[0]), GST_TIME_ARGS (k.end[0]),
      GST_TIME_ARGS (k.first_pts[1]));
  fail_unless_equals_uint64 (k.end[0], k.first_pts[0] + frame_time (FRAMES));
  /* Not before it was complete (after it was queued), plus the margin,
   * less the latency: later than the first clip's end, after a gap. */
  fail_unless (k.first_pts[1] >= queued_rt + MARGIN - GST_SECOND,
      "clip 1 at %" GST_TIME_FORMAT ", queued at %" GST_TIME_FORMAT,
      GST_TIME_ARGS (k.first_pts[1]), GST_TIME_ARGS (queued_rt));
  fail_unless (k.first_pts[1] > k.end[0]);
  fail_unless_equals_int (k.gaps, 1);
  fail_unless_equals_uint64 (k.gap_start, k.end[0]);
  fail_unless_equals_uint64 (k.gap_start + k.gap_duration, k.first_pts[1]);
  fail_unless_equals_uint64 (k.end[1], k.first_pts[1] + frame_time (FRAMES));
  fail_unless_equals_uint64 (k.last_offset_end, 2 * FRAMES);
  fail_unless (k.tags >= 1);
  fail_unless_equals_string (k.title, "waves at dusk");

  g_free (k.title);
  g_mutex_clear (&k.lock);
  gst_object_unref (bus);
  gst_object_unref (pad);
  gst_object_unref (vs);
  gst_object_unref (s);
  gst_object_unref (pipe);
}

GST_END_TEST;

static Suite *
h3videosrc_live_suite (void)
{
  Suite *s = suite_create ("h3videosrc-live");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 300);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_live_queries);
  tcase_add_test (tc, test_live_latency_estimate);
  tcase_add_test (tc, test_live_compositor_no_drops);
  tcase_add_test (tc, test_live_late_clip_gap);
  return s;
}

GST_CHECK_MAIN (h3videosrc_live);
