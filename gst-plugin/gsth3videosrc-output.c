/* gsth3videosrc-output.c - h3videosrc's two pad tasks. Each pushes its own
 * stream at downstream's pace: stream-start, caps, segment, collection and
 * tags at once (the caps are known before the model loads), then one buffer
 * per video frame (the audio sliced per video frame) as the worker delivers
 * them, then EOS once the worker has published the clip's stats and its
 * h3videosrc/done message. Flows are combined so that one unlinked pad is
 * fine and two are an error. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gsth3videosrc-private.h"

/* ---- timestamps and caps ------------------------------------------------- */

/* Start of video frame n: from the frame counter, never accumulated. */
GstClockTime
gst_h3_frame_time (gint64 n)
{
  return gst_util_uint64_scale (n, GST_SECOND, H3_FPS);
}

/* First audio sample of the slice that goes with video frame n. */
static gint64
slice_sample (const GstH3VideoSrc * self, gint64 n)
{
  return (gint64) gst_util_uint64_scale_round (n, self->plan.sample_rate,
      H3_FPS);
}

GstCaps *
gst_h3_video_caps_new (gint width, gint height)
{
  return gst_caps_new_simple ("video/x-raw",
      "format", G_TYPE_STRING, "RGB",
      "width", G_TYPE_INT, width,
      "height", G_TYPE_INT, height,
      "framerate", GST_TYPE_FRACTION, H3_FPS, 1,
      "pixel-aspect-ratio", GST_TYPE_FRACTION, 1, 1, NULL);
}

GstCaps *
gst_h3_audio_caps_new (gint rate)
{
  return gst_caps_new_simple ("audio/x-raw",
      "format", G_TYPE_STRING, "F32LE",
      "rate", G_TYPE_INT, rate,
      "channels", G_TYPE_INT, 2,
      "layout", G_TYPE_STRING, "interleaved",
      "channel-mask", GST_TYPE_BITMASK, (guint64) 0x3, NULL);
}

static GstCaps *
output_caps (GstH3VideoSrc * self, GstH3Output * out)
{
  if (out->is_video)
    return gst_h3_video_caps_new (self->run.width, self->run.height);
  return gst_h3_audio_caps_new (self->run_rate);
}

/* ---- the streams --------------------------------------------------------- */

/* The identity of a run's streams (group, seqnum, ids, GstStreams with
 * their caps, and their collection), from the run's settings and the
 * model's audio rate (h3_engine_preflight). */
void
gst_h3_video_src_streams_new (GstH3VideoSrc * self)
{
  GstCaps *caps;

  self->group_id = gst_util_group_id_next ();
  self->segment_seqnum = gst_util_seqnum_next ();
  self->video_stream_id = gst_h3_settings_stream_id (&self->run, "video");
  self->audio_stream_id = gst_h3_settings_stream_id (&self->run, "audio");
  caps = gst_h3_video_caps_new (self->run.width, self->run.height);
  self->video_stream = gst_stream_new (self->video_stream_id, caps,
      GST_STREAM_TYPE_VIDEO, GST_STREAM_FLAG_NONE);
  gst_caps_unref (caps);
  caps = gst_h3_audio_caps_new (self->run_rate);
  self->audio_stream = gst_stream_new (self->audio_stream_id, caps,
      GST_STREAM_TYPE_AUDIO, GST_STREAM_FLAG_NONE);
  gst_caps_unref (caps);
  self->collection = gst_stream_collection_new (NULL);
  gst_stream_collection_add_stream (self->collection,
      gst_object_ref (self->video_stream));
  gst_stream_collection_add_stream (self->collection,
      gst_object_ref (self->audio_stream));
}

void
gst_h3_video_src_streams_clear (GstH3VideoSrc * self)
{
  gst_clear_object (&self->video_stream);
  gst_clear_object (&self->audio_stream);
  gst_clear_object (&self->collection);
  g_clear_pointer (&self->video_stream_id, g_free);
  g_clear_pointer (&self->audio_stream_id, g_free);
}

/* Whether the peer of out's pad accepts the run's caps; posts the error
 * when it does not, naming the caps (the audio rate is the model's) and
 * what to put after the pad. An unlinked pad accepts anything. */
gboolean
gst_h3_video_src_accept_caps (GstH3VideoSrc * self, GstH3Output * out)
{
  GstCaps *caps;
  gchar *what;

  if (!gst_pad_is_linked (out->pad))
    return TRUE;
  caps = output_caps (self, out);
  if (gst_pad_peer_query_accept_caps (out->pad, caps)) {
    gst_caps_unref (caps);
    return TRUE;
  }
  what = out->is_video ? g_strdup_printf ("RGB video at %dx%d, 24 fps",
      self->run.width, self->run.height) :
      g_strdup_printf ("32-bit float stereo audio at %d Hz (the model's "
      "rate)", self->run_rate);
  GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
      ("The element linked to the %s pad does not accept %s. Put %s after "
          "that pad.", GST_PAD_NAME (out->pad), what, out->is_video ?
          "videoconvert (and videoscale)" : "audioconvert ! audioresample"),
      ("caps %" GST_PTR_FORMAT " refused", caps));
  g_free (what);
  gst_caps_unref (caps);
  return FALSE;
}

/* ---- the pad tasks ------------------------------------------------------- */

void
gst_h3_output_reset (GstH3Output * out)
{
  out->next = 0;
  out->started = FALSE;
  out->discont = TRUE;
  out->eos = FALSE;
  out->last_flow = GST_FLOW_OK;
}

/* Takes the next buffer of this output if its media have been decoded.
 * Called with the lock held. */
static GstBuffer *
output_take_buffer (GstH3VideoSrc * self, GstH3Output * out)
{
  gint n = out->next, frames = self->plan.num_frames;
  GstBuffer *buf;

  if (out->is_video) {
    if (n >= self->frames_ready)
      return NULL;
    buf = self->frames[n];
    self->frames[n] = NULL;
    GST_BUFFER_PTS (buf) = gst_h3_frame_time (n);
    GST_BUFFER_DURATION (buf) = gst_h3_frame_time (n + 1) -
        gst_h3_frame_time (n);
    GST_BUFFER_OFFSET (buf) = n;
    GST_BUFFER_OFFSET_END (buf) = n + 1;
  } else {
    gint64 s0 = slice_sample (self, n), s1 = slice_sample (self, n + 1);
    GstClockTime pts, end;
    gint rate = self->plan.sample_rate;

    if (self->audio_ready < s1 && !self->generated)
      return NULL;
    buf = gst_buffer_new_allocate (NULL, (s1 - s0) * 2 * sizeof (gfloat),
        NULL);
    gst_buffer_fill (buf, 0, self->samples + s0 * 2,
        (s1 - s0) * 2 * sizeof (gfloat));
    pts = gst_util_uint64_scale_round (s0, GST_SECOND, rate);
    /* The last slice ends exactly where the video ends; this moves its end
     * by less than half a sample. */
    end = n + 1 == frames ? gst_h3_frame_time (frames) :
        gst_util_uint64_scale_round (s1, GST_SECOND, rate);
    GST_BUFFER_PTS (buf) = pts;
    GST_BUFFER_DURATION (buf) = end - pts;
    GST_BUFFER_OFFSET (buf) = s0;
    GST_BUFFER_OFFSET_END (buf) = s1;
  }
  if (out->discont) {
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
    out->discont = FALSE;
  }
  out->next++;
  return buf;
}

/* Stream-start, caps, segment, collection and tags, in the order sticky
 * events are stored. */
static gboolean
output_push_sticky (GstH3VideoSrc * self, GstH3Output * out,
    gboolean with_caps)
{
  GstEvent *ev;
  GstSegment segment;
  GstTagList *tags;
  gboolean negotiated = TRUE;

  ev = gst_event_new_stream_start (out->is_video ? self->video_stream_id :
      self->audio_stream_id);
  gst_event_set_group_id (ev, self->group_id);
  gst_event_set_stream (ev, out->is_video ? self->video_stream :
      self->audio_stream);
  gst_pad_push_event (out->pad, ev);

  if (with_caps) {
    GstCaps *caps = output_caps (self, out);

    /* Fail before the first buffer rather than after the whole clip (the
     * state change checked already, but pads may be linked since). */
    negotiated = gst_h3_video_src_accept_caps (self, out);
    if (negotiated)
      gst_pad_push_event (out->pad, gst_event_new_caps (caps));
    gst_caps_unref (caps);
  }

  gst_segment_init (&segment, GST_FORMAT_TIME);
  segment.duration = gst_h3_frame_time (self->run_frames);
  ev = gst_event_new_segment (&segment);
  gst_event_set_seqnum (ev, self->segment_seqnum);
  gst_pad_push_event (out->pad, ev);

  gst_pad_push_event (out->pad,
      gst_event_new_stream_collection (self->collection));

  tags = gst_tag_list_new (GST_TAG_TITLE, self->run.prompt,
      GST_TAG_COMMENT, "generated by h3videosrc (MiniMax-H3)",
      GST_TAG_APPLICATION_NAME, "h3videosrc", NULL);
  gst_tag_list_set_scope (tags, GST_TAG_SCOPE_GLOBAL);
  gst_pad_push_event (out->pad, gst_event_new_tag (tags));
  out->started = TRUE;
  return negotiated;
}

static void
output_push_eos (GstH3VideoSrc * self, GstH3Output * out, guint32 seqnum)
{
  GstEvent *ev;

  if (out->eos)
    return;
  if (!out->started)
    output_push_sticky (self, out, FALSE);
  ev = gst_event_new_eos ();
  gst_event_set_seqnum (ev, seqnum);
  gst_pad_push_event (out->pad, ev);
  out->eos = TRUE;
  /* Pushing EOS makes the pad's last flow EOS, but an unlinked pad stays
   * NOT_LINKED for the combiner: if the other pad turns out unlinked too,
   * that is an error, not an end of stream. */
  GST_OBJECT_LOCK (self);
  gst_flow_combiner_update_pad_flow (self->combiner, out->pad,
      out->last_flow == GST_FLOW_NOT_LINKED ? GST_FLOW_NOT_LINKED :
      GST_FLOW_EOS);
  GST_OBJECT_UNLOCK (self);
  GST_DEBUG_OBJECT (out->pad, "EOS after %d buffers", out->next);
}

/* A fatal flow (both pads unlinked, not negotiated, an error downstream):
 * report it once, stop the generation and end both streams. */
static void
output_fatal (GstH3VideoSrc * self, GstH3Output * out, GstFlowReturn ret,
    gboolean error_posted)
{
  gboolean post;

  g_mutex_lock (&self->lock);
  post = !self->error_posted && !error_posted;
  self->error_posted = TRUE;
  self->stop_streaming = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  gst_h3_video_src_cancel (self);
  if (post)
    GST_ELEMENT_FLOW_ERROR (self, ret);
  gst_h3_video_src_post_progress (self, &self->generate_open,
      GST_PROGRESS_TYPE_ERROR, "generate", 0, "Streaming stopped: %s",
      gst_flow_get_name (ret));
  output_push_eos (self, out, self->segment_seqnum);
}

typedef enum
{
  STEP_PAUSE,
  STEP_STICKY,
  STEP_BUFFER,
  STEP_EOS
} GstH3Step;

/* The task of one pad (user_data: its GstH3Output): waits for the next
 * thing to push, pushes it, and pauses itself when flushing or done. */
void
gst_h3_video_src_loop (gpointer user_data)
{
  GstH3Output *out = user_data;
  GstH3VideoSrc *self = out->self;
  GstBuffer *buf = NULL;
  GstH3Step step;
  GstFlowReturn ret, combined;
  guint32 eos_seqnum;

  g_mutex_lock (&self->lock);
  for (;;) {
    if (self->flushing) {
      step = STEP_PAUSE;
      break;
    }
    if (self->stop_streaming) {
      step = STEP_EOS;
      break;
    }
    /* An application EOS waits for the cancelled generation to return
     * (one step), so that its stats and done message come first. */
    if (self->eos_requested) {
      if (!self->generating) {
        step = STEP_EOS;
        break;
      }
    } else if (!out->started) {
      step = STEP_STICKY;
      break;
    } else if (self->have_plan) {
      if (out->next >= self->plan.num_frames) {
        if (self->generated) {
          step = STEP_EOS;
          break;
        }
      } else if ((buf = output_take_buffer (self, out))) {
        step = STEP_BUFFER;
        break;
      }
    }
    /* The worker ended without a full clip and without saying why (it
     * always should): end the stream rather than wait forever. */
    if (self->worker_done && !self->generated) {
      step = STEP_EOS;
      break;
    }
    g_cond_wait (&self->cond, &self->lock);
  }
  eos_seqnum = self->eos_requested ? self->eos_seqnum : self->segment_seqnum;
  g_mutex_unlock (&self->lock);

  switch (step) {
    case STEP_PAUSE:
      GST_DEBUG_OBJECT (out->pad, "flushing: pausing the task");
      gst_pad_pause_task (out->pad);
      return;
    case STEP_STICKY:
      /* A refused caps posts its own, more helpful, error message. */
      if (!output_push_sticky (self, out, TRUE)) {
        GST_OBJECT_LOCK (self);
        gst_flow_combiner_update_pad_flow (self->combiner, out->pad,
            GST_FLOW_NOT_NEGOTIATED);
        GST_OBJECT_UNLOCK (self);
        output_fatal (self, out, GST_FLOW_NOT_NEGOTIATED, TRUE);
      }
      if (out->eos)
        gst_pad_pause_task (out->pad);
      return;
    case STEP_EOS:
      output_push_eos (self, out, eos_seqnum);
      gst_pad_pause_task (out->pad);
      return;
    case STEP_BUFFER:
      break;
  }

  GST_LOG_OBJECT (out->pad, "pushing %" GST_PTR_FORMAT, buf);
  ret = gst_pad_push (out->pad, buf);
  out->last_flow = ret;
  GST_OBJECT_LOCK (self);
  combined = gst_flow_combiner_update_pad_flow (self->combiner, out->pad, ret);
  GST_OBJECT_UNLOCK (self);

  if (combined == GST_FLOW_FLUSHING) {
    GST_DEBUG_OBJECT (out->pad, "flushing: pausing the task");
    gst_pad_pause_task (out->pad);
  } else if (combined == GST_FLOW_NOT_LINKED || combined < GST_FLOW_EOS) {
    GST_DEBUG_OBJECT (out->pad, "fatal flow %s (pad %s)",
        gst_flow_get_name (combined), gst_flow_get_name (ret));
    output_fatal (self, out, combined, FALSE);
    gst_pad_pause_task (out->pad);
  } else if (ret == GST_FLOW_EOS || combined == GST_FLOW_EOS) {
    /* Downstream wants no more on this branch. */
    output_push_eos (self, out, self->segment_seqnum);
    gst_pad_pause_task (out->pad);
  }
}
