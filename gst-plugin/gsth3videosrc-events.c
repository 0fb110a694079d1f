/* gsth3videosrc-events.c - h3videosrc's events and queries: the
 * application's EOS, seeks (flushing, segment, in TIME, on the kept clip)
 * and the queries a source answers (position, duration, seeking, latency,
 * caps). The element (gsth3videosrc.c) installs these on its pads. */
#include "config.h"

#include <string.h>

#include "gsth3videosrc-private.h"
#include "gsth3videosrc-events.h"
#include "gsth3videosrc-live.h"
#include "gsth3videosrc-messages.h"

/* Application EOS (gst-launch-1.0 -e, gst_element_send_event): end the
 * clip early, where both pads have data: stop the generation (or let it go
 * on to its first frames when they are near, gst_h3_video_src_eos_decide),
 * and let each task push what is decoded, the audio up to the last frame's
 * end, then EOS. Never blocks: the caller may hold the state lock. */
static gboolean
handle_eos (GstH3VideoSrc * self, GstEvent * event)
{
  gboolean running, first = FALSE;
  GstH3EosPlan plan = GST_H3_EOS_NONE;
  gdouble first_in = -1.0;

  GST_H3_VIDEO_SRC_LOCK (self);
  running = self->running;
  if (running && !self->eos_requested) {
    self->eos_requested = first = TRUE;
    self->eos_seqnum = gst_event_get_seqnum (event);
    plan = self->eos_plan = gst_h3_video_src_eos_decide (self, &first_in);
    GST_H3_VIDEO_SRC_BROADCAST (self);
  }
  GST_H3_VIDEO_SRC_UNLOCK (self);
  gst_event_unref (event);
  if (!running) {
    GST_DEBUG_OBJECT (self, "EOS while not running: ignored");
    return FALSE;
  }
  GST_INFO_OBJECT (self, "end of stream requested");
  if (first)
    gst_h3_video_src_eos_apply (self, plan, first_in);
  return TRUE;
}

/* Why a seek cannot be done now, or NULL. Called with the lock held. */
static const gchar *
seek_refusal (GstH3VideoSrc * self, gdouble rate, GstFormat format,
    GstSeekFlags flags)
{
  if (!self->running)
    return "the element is not running (seek in PAUSED or PLAYING)";
  if (self->run.is_live)
    return "a live stream is not seekable";
  if (!self->run.keep_clip)
    return "keep-clip is off: the frames are freed as they are pushed";
  if (!self->run_keep)
    return "the clip is larger than keep-clip-max-bytes, so it is not "
        "kept";
  if (format != GST_FORMAT_TIME)
    return "only TIME seeks are supported";
  if (rate <= 0.0)
    return "reverse playback (a negative rate) is not supported";
  if (flags & GST_SEEK_FLAG_INSTANT_RATE_CHANGE)
    return "instant rate changes are not supported";
  if (self->eos_requested || self->stop_streaming)
    return "the stream has ended (end-of-stream requested, or an error)";
  return NULL;
}

/* Where a seek to start lands with the snap flags: every frame is a key
 * frame, so KEY_UNIT and SNAP_* move start to a frame boundary (before it
 * unless SNAP_AFTER or SNAP_NEAREST say otherwise); without them the seek
 * is accurate: the segment starts at start, the first video frame is the
 * one that contains it and the audio starts at its nearest sample. */
static gint64
seek_snap (GstSeekFlags flags, gint64 start)
{
  gint64 before;
  GstClockTime t0, t1;

  if (start < 0 || !(flags & (GST_SEEK_FLAG_KEY_UNIT |
              GST_SEEK_FLAG_SNAP_BEFORE | GST_SEEK_FLAG_SNAP_AFTER)))
    return start;
  before = gst_h3_frame_at ((GstClockTime) start);
  t0 = gst_h3_frame_time (before);
  t1 = gst_h3_frame_time (before + 1);
  if (t0 == (GstClockTime) start)
    return start;
  if ((flags & GST_SEEK_FLAG_SNAP_BEFORE) && (flags & GST_SEEK_FLAG_SNAP_AFTER))
    return (gint64) ((GstClockTime) start - t0 < t1 - (GstClockTime) start ?
        t0 : t1);
  if (flags & GST_SEEK_FLAG_SNAP_AFTER)
    return (gint64) t1;
  return (gint64) t0;
}

/* Stops both pad tasks for a flushing seek: the flag makes a task that
 * waits for media return, FLUSH_START unblocks one in a push, and the
 * stream locks say both are out of their loop. */
static void
seek_stop_tasks (GstH3VideoSrc * self, guint32 seqnum)
{
  GstH3Output *outs[] = { &self->video, &self->audio };

  GST_H3_VIDEO_SRC_LOCK (self);
  self->seeking++;
  GST_H3_VIDEO_SRC_BROADCAST (self);
  GST_H3_VIDEO_SRC_UNLOCK (self);
  for (guint i = 0; i < G_N_ELEMENTS (outs); i++) {
    GstEvent *ev = gst_event_new_flush_start ();
    gst_event_set_seqnum (ev, seqnum);
    gst_pad_push_event (outs[i]->pad, ev);
  }
  for (guint i = 0; i < G_N_ELEMENTS (outs); i++) {
    gst_pad_pause_task (outs[i]->pad);
    GST_PAD_STREAM_LOCK (outs[i]->pad);
  }
}

static void
seek_restart_tasks (GstH3VideoSrc * self, guint32 seqnum, gboolean flush)
{
  GstH3Output *outs[] = { &self->video, &self->audio };
  gboolean running;

  if (flush) {
    for (guint i = 0; i < G_N_ELEMENTS (outs); i++) {
      GstEvent *ev = gst_event_new_flush_stop (TRUE);
      gst_event_set_seqnum (ev, seqnum);
      gst_pad_push_event (outs[i]->pad, ev);
      outs[i]->eos = FALSE;
      outs[i]->last_flow = GST_FLOW_OK;
    }
  }
  GST_OBJECT_LOCK (self);
  gst_flow_combiner_reset (self->combiner);
  GST_OBJECT_UNLOCK (self);
  GST_H3_VIDEO_SRC_LOCK (self);
  if (flush)
    self->seeking--;
  running = self->running && !self->flushing;
  GST_H3_VIDEO_SRC_UNLOCK (self);
  for (guint i = 0; i < G_N_ELEMENTS (outs); i++) {
    /* A task that pushed EOS paused itself: a seek starts it again. */
    if (running)
      gst_pad_start_task (outs[i]->pad, gst_h3_video_src_loop, outs[i], NULL);
    if (flush)
      GST_PAD_STREAM_UNLOCK (outs[i]->pad);
  }
}

/* A seek in a kept clip: the clip is not generated again, each pad task
 * restarts from the new segment (flvdemux's order for a flushing seek:
 * FLUSH_START, stop the tasks, FLUSH_STOP, new segment, restart). A
 * non-flushing seek (a segment loop) takes effect at the tasks' next
 * buffer, its running time following the last one pushed. Every sink sends
 * the same seek upstream: each seqnum is answered once, and again with the
 * same answer. */
static gboolean
handle_seek (GstH3VideoSrc * self, GstEvent * event)
{
  guint32 seqnum = gst_event_get_seqnum (event);
  gdouble rate;
  GstFormat format;
  GstSeekFlags flags;
  GstSeekType start_type, stop_type;
  gint64 start, stop;
  GstSegment segment;
  const gchar *refusal;
  gboolean flush, update, ok = FALSE;

  g_mutex_lock (&self->seek_lock);
  GST_OBJECT_LOCK (self);
  if (seqnum == self->last_seek_seqnum) {
    ok = self->last_seek_result;
    GST_OBJECT_UNLOCK (self);
    g_mutex_unlock (&self->seek_lock);
    gst_event_unref (event);
    return ok;
  }
  GST_OBJECT_UNLOCK (self);

  gst_event_parse_seek (event, &rate, &format, &flags, &start_type, &start,
      &stop_type, &stop);
  flush = (flags & GST_SEEK_FLAG_FLUSH) != 0;
  if (start_type == GST_SEEK_TYPE_SET)
    start = seek_snap (flags, start);

  GST_H3_VIDEO_SRC_LOCK (self);
  refusal = seek_refusal (self, rate, format, flags);
  segment = self->segment;
  GST_H3_VIDEO_SRC_UNLOCK (self);
  if (!refusal && !gst_segment_do_seek (&segment, rate, format, flags,
          start_type, start, stop_type, stop, &update))
    refusal = "the positions are outside the clip";
  if (refusal) {
    GST_WARNING_OBJECT (self, "seek %" GST_PTR_FORMAT " refused: %s", event,
        refusal);
    goto done;
  }
  GST_INFO_OBJECT (self, "seek to %" GST_SEGMENT_FORMAT "%s", &segment,
      flush ? " (flushing)" : "");

  if (flush)
    seek_stop_tasks (self, seqnum);
  GST_H3_VIDEO_SRC_LOCK (self);
  self->segment = segment;
  /* Segments start at their position (basesrc's rule for a new segment). */
  self->segment.position = segment.start;
  self->segment_gen++;
  self->segment_seqnum = seqnum;
  self->segment_done_pads = 0;
  GST_H3_VIDEO_SRC_BROADCAST (self);
  GST_H3_VIDEO_SRC_UNLOCK (self);
  seek_restart_tasks (self, seqnum, flush);
  ok = TRUE;

done:
  GST_OBJECT_LOCK (self);
  self->last_seek_seqnum = seqnum;
  self->last_seek_result = ok;
  GST_OBJECT_UNLOCK (self);
  g_mutex_unlock (&self->seek_lock);
  gst_event_unref (event);
  return ok;
}

gboolean
gst_h3_video_src_send_event (GstElement * element, GstEvent * event)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (element);

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_EOS:
      return handle_eos (self, event);
    case GST_EVENT_SEEK:
      return handle_seek (self, event);
    default:
      /* the type is final: the instance's class is h3videosrc's, its parent GstElement's */
      return GST_ELEMENT_CLASS (g_type_class_peek_parent (G_OBJECT_GET_CLASS
              (element)))->send_event (element, event);
  }
}

gboolean
gst_h3_video_src_src_event (GstPad * pad, GstObject * parent, GstEvent * event)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (parent);

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_SEEK:
      return handle_seek (self, event);
    case GST_EVENT_QOS:
    case GST_EVENT_LATENCY:
    case GST_EVENT_RECONFIGURE:
      /* A generator cannot catch up, and every frame is kept; caps are
       * fixed, so there is nothing to renegotiate. */
      GST_LOG_OBJECT (pad, "ignoring %" GST_PTR_FORMAT, event);
      gst_event_unref (event);
      return TRUE;
    default:
      return gst_pad_event_default (pad, parent, event);
  }
}

/* The model's audio rate for the properties (outside a run), from its
 * configs (h3_engine_preflight, no weight read), cached per engine key; 0
 * when the model directory cannot tell. */
static gint
settings_rate (GstH3VideoSrc * self)
{
  GstH3Settings snapshot;
  h3_engine_options opt;
  h3_preflight pf;
  h3_status st;
  gchar *key;
  gint rate = 0;
  gboolean known;

  memset (&snapshot, 0, sizeof snapshot);
  GST_OBJECT_LOCK (self);
  gst_h3_settings_copy (&snapshot, &self->settings);
  GST_OBJECT_UNLOCK (self);
  key = gst_h3_settings_engine_key (&snapshot);
  GST_H3_VIDEO_SRC_LOCK (self);
  known = g_strcmp0 (key, self->rate_key) == 0;
  if (known)
    rate = self->rate;
  GST_H3_VIDEO_SRC_UNLOCK (self);
  if (!known) {
    gst_h3_settings_engine_options (&snapshot, &opt);
    memset (&st, 0, sizeof st);
    if (h3_engine_preflight (&opt, NULL, &pf, &st) == H3_OK)
      rate = pf.sample_rate;
    else
      GST_DEBUG_OBJECT (self, "no audio rate yet: %s", st.message);
    GST_H3_VIDEO_SRC_LOCK (self);
    g_free (self->rate_key);
    self->rate_key = key;
    self->rate = rate;
    key = NULL;
    GST_H3_VIDEO_SRC_UNLOCK (self);
  }
  g_free (key);
  gst_h3_settings_clear (&snapshot);
  return rate;
}

/* Frame count, size and audio rate of the run, or of the properties
 * outside a run. */
static void
current_geometry (GstH3VideoSrc * self, gint * frames, gint * width,
    gint * height, gint * rate)
{
  gboolean running;

  GST_H3_VIDEO_SRC_LOCK (self);
  running = self->running;
  if (running) {
    *frames = self->run_frames;
    *width = self->run.request.width;
    *height = self->run.request.height;
    *rate = self->run_rate;
  } else {
    GST_OBJECT_LOCK (self);
    *frames = h3_align_frames (self->settings.request.num_frames);
    *width = self->settings.request.width;
    *height = self->settings.request.height;
    GST_OBJECT_UNLOCK (self);
  }
  GST_H3_VIDEO_SRC_UNLOCK (self);
  if (!running)
    *rate = settings_rate (self);
}

/* is-live of the run, or of the properties outside a run. */
static gboolean
is_live (GstH3VideoSrc * self)
{
  gboolean running, live;

  GST_H3_VIDEO_SRC_LOCK (self);
  running = self->running;
  live = self->run.is_live;
  GST_H3_VIDEO_SRC_UNLOCK (self);
  if (!running) {
    GST_OBJECT_LOCK (self);
    live = self->settings.is_live;
    GST_OBJECT_UNLOCK (self);
  }
  return live;
}

static gint
query_frames (GstH3VideoSrc * self)
{
  gint frames, width, height, rate;

  current_geometry (self, &frames, &width, &height, &rate);
  return frames;
}

/* Whether a TIME seek would be done: in a run, when its clip is kept;
 * outside one, when the properties will keep it. */
static gboolean
query_seekable (GstH3VideoSrc * self)
{
  gboolean running, seekable;
  gint frames, width, height, rate;

  GST_H3_VIDEO_SRC_LOCK (self);
  running = self->running;
  seekable = running && self->run_keep && !self->run.is_live &&
      !self->eos_requested && !self->stop_streaming;
  GST_H3_VIDEO_SRC_UNLOCK (self);
  if (running)
    return seekable;
  current_geometry (self, &frames, &width, &height, &rate);
  GST_OBJECT_LOCK (self);
  seekable = self->settings.keep_clip && !self->settings.is_live &&
      gst_h3_clip_bytes (frames, width, height,
      rate) <= self->settings.keep_clip_max_bytes;
  GST_OBJECT_UNLOCK (self);
  return seekable;
}

static gboolean
query_caps (GstH3VideoSrc * self, GstPad * pad, GstQuery * query)
{
  GstCaps *filter, *caps, *result;
  gint frames, width, height, rate;

  current_geometry (self, &frames, &width, &height, &rate);
  caps = gst_pad_get_pad_template_caps (pad);
  caps = gst_caps_make_writable (caps);
  if (pad == self->video.pad)
    gst_caps_set_simple (caps, "width", G_TYPE_INT, width,
        "height", G_TYPE_INT, height, NULL);
  else if (rate > 0)
    gst_caps_set_simple (caps, "rate", G_TYPE_INT, rate, NULL);
  gst_query_parse_caps (query, &filter);
  if (filter) {
    result = gst_caps_intersect_full (filter, caps, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref (caps);
  } else {
    result = caps;
  }
  gst_query_set_caps_result (query, result);
  gst_caps_unref (result);
  return TRUE;
}

gboolean
gst_h3_video_src_src_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (parent);
  gint frames, width, height, rate;
  GstFormat format;

  switch (GST_QUERY_TYPE (query)) {
    case GST_QUERY_CAPS:
      return query_caps (self, pad, query);
    case GST_QUERY_DURATION:
      current_geometry (self, &frames, &width, &height, &rate);
      gst_query_parse_duration (query, &format, NULL);
      if (is_live (self)) {
        /* A live channel has no end. */
        gst_query_set_duration (query, format, -1);
        return TRUE;
      }
      if (format == GST_FORMAT_TIME) {
        gst_query_set_duration (query, format, gst_h3_frame_time (frames));
        return TRUE;
      }
      if (format == GST_FORMAT_DEFAULT && pad == self->video.pad) {
        gst_query_set_duration (query, format, frames);
        return TRUE;
      }
      if (format == GST_FORMAT_DEFAULT && rate > 0) {
        gst_query_set_duration (query, format,
            gst_util_uint64_scale_round (frames, rate, H3_FPS));
        return TRUE;
      }
      return FALSE;
    case GST_QUERY_LATENCY:
      /* Not live: buffers are timestamped from 0 and synchronised by the
       * sinks; generation time is not latency. Live: the generation time
       * to expect (the `latency` property or its estimate); the clips are
       * held as long as the pipeline needs. */
      if (is_live (self))
        gst_query_set_latency (query, TRUE, gst_h3_video_src_latency (self),
            GST_CLOCK_TIME_NONE);
      else
        gst_query_set_latency (query, FALSE, 0, GST_CLOCK_TIME_NONE);
      return TRUE;
    case GST_QUERY_SEEKING:
      gst_query_parse_seeking (query, &format, NULL, NULL, NULL);
      gst_query_set_seeking (query, format, format == GST_FORMAT_TIME &&
          query_seekable (self), 0, format == GST_FORMAT_TIME ?
          (gint64) gst_h3_frame_time (query_frames (self)) : -1);
      return TRUE;
    default:
      return gst_pad_query_default (pad, parent, query);
  }
}

