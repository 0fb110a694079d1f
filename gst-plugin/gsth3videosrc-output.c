/* gsth3videosrc-output.c - h3videosrc's two pad tasks. Each pushes its own
 * stream at downstream's pace: stream-start, caps, segment, collection and
 * tags at once (the caps are known before the model loads), then one buffer
 * per video frame (the audio sliced per video frame) as the worker delivers
 * them, then EOS once the worker has published the clip's stats and its
 * h3videosrc/done message. Flows are combined so that one unlinked pad is
 * fine and two are an error. Each task plays the element's segment from
 * its position (seeks in a kept clip), and in live mode pushes complete
 * clips one after the other, timestamped in running time. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "gsth3videosrc-private.h"
#include "gsth3videosrc-live.h"
#include "gsth3videosrc-messages.h"

/* ---- timestamps and caps ------------------------------------------------- */

/* Start of video frame n: from the frame counter, never accumulated. */
GstClockTime
gst_h3_frame_time (gint64 n)
{
  return gst_util_uint64_scale (n, GST_SECOND, H3_FPS);
}

/* The frame that contains time t: the last one that starts at or before
 * it (frame times are truncated, so t * 24 alone can fall one short). */
gint64
gst_h3_frame_at (GstClockTime t)
{
  gint64 n = (gint64) gst_util_uint64_scale (t, H3_FPS, GST_SECOND);

  while (gst_h3_frame_time (n + 1) <= t)
    n++;
  return n;
}

/* First audio sample of the slice that goes with video frame n. */
static gint64
slice_sample (const GstH3VideoSrc * self, gint64 n)
{
  return (gint64) gst_util_uint64_scale_round (n, self->run_rate, H3_FPS);
}

/* Start of audio sample k, from the sample counter. */
static GstClockTime
sample_time (const GstH3VideoSrc * self, gint64 k)
{
  return gst_util_uint64_scale_round (k, GST_SECOND, self->run_rate);
}

/* What a clip takes in memory: its RGB frames and its stereo F32 audio,
 * trimmed to the video's length. */
guint64
gst_h3_clip_bytes (gint frames, gint width, gint height, gint rate)
{
  return (guint64) frames * width * height * 3 +
      gst_util_uint64_scale_round (frames, MAX (rate, 0), H3_FPS) * 2 *
      sizeof (gfloat);
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
    return gst_h3_video_caps_new (self->run.request.width, self->run.request.height);
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
  self->video_stream_id = gst_h3_settings_stream_id (&self->run,
      self->run_keyframes, "video");
  self->audio_stream_id = gst_h3_settings_stream_id (&self->run,
      self->run_keyframes, "audio");
  caps = gst_h3_video_caps_new (self->run.request.width, self->run.request.height);
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
      self->run.request.width, self->run.request.height) :
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
  out->end = 0;
  out->sample = out->sample_end = 0;
  out->segment_gen = 0;
  out->started = FALSE;
  out->discont = TRUE;
  out->eos = FALSE;
  out->segment_done = FALSE;
  out->last_flow = GST_FLOW_OK;
  out->live_index = 0;
  out->live_started = FALSE;
  out->live_end = GST_CLOCK_TIME_NONE;
  out->live_offset = 0;
}

/* Positions out at the start of segment (TIME, rate > 0): video at the
 * frame that contains segment->start, up to the frame that contains stop;
 * audio at the sample nearest to start, up to the one nearest to stop, in
 * slices that keep the clip's own boundaries (one per video frame) after
 * the first. Both keep their timestamps in the clip, so they stay in sync
 * whatever the position. */
void
gst_h3_output_seek (GstH3VideoSrc * self, GstH3Output * out,
    const GstSegment * segment)
{
  gint frames = self->run_frames;
  GstClockTime start = segment->start, stop = segment->stop;

  if (out->is_video) {
    out->next = (gint) MIN (gst_h3_frame_at (start), frames);
    /* Up to the frame that contains stop (a frame that starts at stop is
     * not in the segment). */
    if (GST_CLOCK_TIME_IS_VALID (stop)) {
      gint64 end = gst_h3_frame_at (stop);

      if (gst_h3_frame_time (end) < stop)
        end++;
      out->end = (gint) MIN (end, frames);
    } else {
      out->end = frames;
    }
  } else {
    gint64 len = self->run_audio_len, n;

    out->sample = (gint64) MIN (gst_util_uint64_scale_round (start,
            self->run_rate, GST_SECOND), (guint64) len);
    out->sample_end = GST_CLOCK_TIME_IS_VALID (stop) ?
        (gint64) MIN (gst_util_uint64_scale_round (stop, self->run_rate,
            GST_SECOND), (guint64) len) : len;
    /* The slice that holds the first sample. */
    n = (gint64) gst_util_uint64_scale (out->sample, H3_FPS, self->run_rate);
    while (n > 0 && slice_sample (self, n) > out->sample)
      n--;
    while (n + 1 < frames && slice_sample (self, n + 1) <= out->sample)
      n++;
    out->next = (gint) n;
  }
  out->eos = FALSE;
  out->segment_done = FALSE;
  out->discont = TRUE;
  out->last_flow = GST_FLOW_OK;
  GST_DEBUG_OBJECT (out->pad, "segment %" GST_SEGMENT_FORMAT ": %s", segment,
      out->is_video ? "video" : "audio");
}

/* Whether an application EOS has cut the clip: the generation returned,
 * and the clip ends with the frames decoded by then (frames_ready), the
 * audio with the last of them. Called with the lock held. */
static gboolean
output_cut (const GstH3VideoSrc * self)
{
  return self->eos_requested && self->eos_plan == GST_H3_EOS_CUT
      && !self->generating && !gst_h3_clip_complete (&self->clip);
}

/* Whether out has pushed everything of its segment (of the cut clip).
 * Called with the lock held. */
static gboolean
output_at_end (const GstH3VideoSrc * self, const GstH3Output * out,
    gboolean cut)
{
  gint ready = gst_h3_clip_ready (&self->clip);

  if (out->is_video)
    return out->next >= (cut ? MIN (out->end, ready) : out->end);
  return out->sample >= (cut ? MIN (out->sample_end, slice_sample (self,
              ready)) : out->sample_end);
}

/* Takes the next buffer of this output if its media have been decoded.
 * A kept clip lends its frames (a buffer sharing the frame's memory), so
 * that they can be pushed again after a seek; otherwise the frame is given
 * away. The audio slice of frame n goes once that frame is decoded, so
 * that wherever the clip is cut (an application EOS) both streams end
 * together. Called with the lock held. */
static GstBuffer *
output_take_buffer (GstH3VideoSrc * self, GstH3Output * out, gboolean cut)
{
  gint n = out->next, frames = gst_h3_clip_plan (&self->clip)->num_frames;
  gint ready = gst_h3_clip_ready (&self->clip);
  GstBuffer *buf;

  if (out->is_video) {
    if (n >= ready)
      return NULL;
    buf = gst_h3_clip_frame (&self->clip, n, self->run_keep);
    GST_BUFFER_PTS (buf) = gst_h3_frame_time (n);
    GST_BUFFER_DURATION (buf) = gst_h3_frame_time (n + 1) -
        gst_h3_frame_time (n);
    GST_BUFFER_OFFSET (buf) = n;
    GST_BUFFER_OFFSET_END (buf) = n + 1;
    out->next++;
  } else {
    gint64 s0 = out->sample, slice_end = slice_sample (self, n + 1), s1;
    GstClockTime pts, end;

    s1 = MIN (slice_end, out->sample_end);
    if (!gst_h3_clip_complete (&self->clip) && !cut
        && (gst_h3_clip_audio_ready (&self->clip) < s1 || n >= ready))
      return NULL;
    buf = gst_buffer_new_allocate (NULL, (s1 - s0) * 2 * sizeof (gfloat),
        NULL);
    gst_buffer_fill (buf, 0, gst_h3_clip_samples (&self->clip, s0),
        (s1 - s0) * 2 * sizeof (gfloat));
    pts = sample_time (self, s0);
    /* The clip's last slice ends exactly where the video ends; this moves
     * its end by less than half a sample. */
    end = s1 == gst_h3_clip_audio_len (&self->clip) ?
        gst_h3_frame_time (frames) : cut && s1 == slice_sample (self, ready) ?
        gst_h3_frame_time (ready) : sample_time (self, s1);
    GST_BUFFER_PTS (buf) = pts;
    GST_BUFFER_DURATION (buf) = end - pts;
    GST_BUFFER_OFFSET (buf) = s0;
    GST_BUFFER_OFFSET_END (buf) = s1;
    out->sample = s1;
    if (s1 == slice_end)
      out->next++;
  }
  if (out->discont) {
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
    out->discont = FALSE;
  }
  return buf;
}

/* The tags of a clip; prompt NULL: the run's (live clips follow their
 * queued prompts). */
static void
output_push_tags (GstH3VideoSrc * self, GstH3Output * out,
    const gchar * prompt)
{
  gchar *title;
  GstTagList *tags;

  GST_H3_VIDEO_SRC_LOCK (self);
  title = g_strdup (prompt ? prompt : self->run.request.prompt);
  GST_H3_VIDEO_SRC_UNLOCK (self);
  tags = gst_tag_list_new (GST_TAG_TITLE, title,
      GST_TAG_COMMENT, "generated by h3videosrc (MiniMax-H3)",
      GST_TAG_APPLICATION_NAME, "h3videosrc", NULL);
  g_free (title);
  gst_tag_list_set_scope (tags, GST_TAG_SCOPE_GLOBAL);
  gst_pad_push_event (out->pad, gst_event_new_tag (tags));
}

static void
output_push_segment (GstH3Output * out, const GstSegment * segment,
    guint32 seqnum)
{
  GstEvent *ev = gst_event_new_segment (segment);

  gst_event_set_seqnum (ev, seqnum);
  gst_pad_push_event (out->pad, ev);
}

/* Stream-start, caps, segment, collection and tags, in the order sticky
 * events are stored. */
static gboolean
output_push_sticky (GstH3VideoSrc * self, GstH3Output * out,
    gboolean with_caps, const GstSegment * segment, guint32 seqnum)
{
  GstEvent *ev;
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

  output_push_segment (out, segment, seqnum);
  gst_pad_push_event (out->pad,
      gst_event_new_stream_collection (self->collection));
  output_push_tags (self, out, NULL);
  out->started = TRUE;
  return negotiated;
}

static void
output_push_eos (GstH3VideoSrc * self, GstH3Output * out, guint32 seqnum)
{
  GstEvent *ev;

  if (out->eos)
    return;
  if (!out->started) {
    GstSegment segment;

    GST_H3_VIDEO_SRC_LOCK (self);
    segment = self->segment;
    GST_H3_VIDEO_SRC_UNLOCK (self);
    output_push_sticky (self, out, FALSE, &segment, self->segment_seqnum);
  }
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

  GST_H3_VIDEO_SRC_LOCK (self);
  post = !self->error_posted && !error_posted;
  self->error_posted = TRUE;
  self->stop_streaming = TRUE;
  GST_H3_VIDEO_SRC_BROADCAST (self);
  GST_H3_VIDEO_SRC_UNLOCK (self);
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
  STEP_SEGMENT,
  STEP_BUFFER,
  STEP_SEGMENT_DONE,
  STEP_LIVE_CLIP,
  STEP_EOS
} GstH3Step;

/* After a buffer: the segment's position is the end of the furthest
 * buffer pushed in it (a non-flushing seek accumulates the running time
 * up to there). */
static void
output_update_position (GstH3VideoSrc * self, GstH3Output * out,
    GstClockTime end)
{
  GST_H3_VIDEO_SRC_LOCK (self);
  if (out->segment_gen == self->segment_gen
      && (!GST_CLOCK_TIME_IS_VALID (self->segment.position)
          || end > self->segment.position))
    self->segment.position = end;
  GST_H3_VIDEO_SRC_UNLOCK (self);
}

/* The end of a segment seek on this pad: SEGMENT_DONE downstream, and once
 * every pad is there, the SEGMENT_DONE message (the application's cue to
 * loop with another segment seek). The task then waits for that seek. */
static void
output_segment_done (GstH3VideoSrc * self, GstH3Output * out,
    const GstSegment * segment, guint32 seqnum, guint gen)
{
  GstClockTime stop = GST_CLOCK_TIME_IS_VALID (segment->stop) ?
      segment->stop : gst_h3_frame_time (self->run_frames);
  GstEvent *ev = gst_event_new_segment_done (GST_FORMAT_TIME, stop);
  gboolean last;

  gst_event_set_seqnum (ev, seqnum);
  gst_pad_push_event (out->pad, ev);
  GST_H3_VIDEO_SRC_LOCK (self);
  last = gen == self->segment_gen && ++self->segment_done_pads == 2;
  GST_H3_VIDEO_SRC_UNLOCK (self);
  GST_DEBUG_OBJECT (out->pad, "segment done at %" GST_TIME_FORMAT,
      GST_TIME_ARGS (stop));
  if (last) {
    GstMessage *msg = gst_message_new_segment_done (GST_OBJECT (self),
        GST_FORMAT_TIME, stop);

    gst_message_set_seqnum (msg, seqnum);
    gst_element_post_message (GST_ELEMENT (self), msg);
  }
}

/* ---- live mode ------------------------------------------------------------ */

static GstH3LiveClip *
live_clip_find (GstH3VideoSrc * self, guint index)
{
  for (GList * l = self->live_clips.head; l; l = l->next) {
    GstH3LiveClip *clip = l->data;
    if (clip->index == index)
      return clip;
  }
  return NULL;
}

/* Where a live clip starts: after the last one (continuous timestamps),
 * and not before the running time it was complete at, plus the margin,
 * less the latency (so that it is never late at the sinks: a clip that
 * took longer than the latency starts later, after a gap). The first one
 * starts no earlier than the running time of the first look. Called with
 * the lock held, by the first pad to reach the clip. */
static void
live_clip_place (GstH3VideoSrc * self, GstH3LiveClip * clip,
    GstClockTime latency)
{
  GstClockTime start;

  if (!GST_CLOCK_TIME_IS_VALID (self->live_origin))
    self->live_origin = gst_h3_video_src_running_time (self);
  start = GST_CLOCK_TIME_IS_VALID (self->live_next_base) ?
      self->live_next_base : self->live_origin;
  if (GST_CLOCK_TIME_IS_VALID (clip->complete_rt)
      && clip->complete_rt + GST_H3_LIVE_MARGIN > latency)
    start = MAX (start, clip->complete_rt + GST_H3_LIVE_MARGIN - latency);
  clip->base = start;
  self->live_next_base = start + gst_h3_frame_time (clip->plan.num_frames);
  GST_INFO_OBJECT (self, "live clip %u (\"%s\") from %" GST_TIME_FORMAT
      " (complete at %" GST_TIME_FORMAT ", latency %" GST_TIME_FORMAT ")",
      clip->index, clip->prompt, GST_TIME_ARGS (start),
      GST_TIME_ARGS (clip->complete_rt), GST_TIME_ARGS (latency));
}

/* The next buffer of a live clip, which is complete: the frames are
 * given away as they are pushed, the audio is sliced per video frame,
 * timestamps are the clip's base plus its own counters, offsets count the
 * whole stream. When the pad is done with the clip it moves to the next;
 * the last pad frees it. Called with the lock held. */
static GstBuffer *
live_take_buffer (GstH3VideoSrc * self, GstH3Output * out,
    GstH3LiveClip * clip)
{
  gint n = out->next, frames = clip->plan.num_frames;
  GstBuffer *buf;
  gboolean last;

  if (out->is_video) {
    buf = clip->frames[n];
    clip->frames[n] = NULL;
    GST_BUFFER_PTS (buf) = clip->base + gst_h3_frame_time (n);
    GST_BUFFER_DURATION (buf) = gst_h3_frame_time (n + 1) -
        gst_h3_frame_time (n);
    GST_BUFFER_OFFSET (buf) = out->live_offset + n;
    GST_BUFFER_OFFSET_END (buf) = out->live_offset + n + 1;
  } else {
    gint64 s0 = slice_sample (self, n), s1 = slice_sample (self, n + 1);
    GstClockTime pts, end;

    buf = gst_buffer_new_allocate (NULL, (s1 - s0) * 2 * sizeof (gfloat),
        NULL);
    gst_buffer_fill (buf, 0, clip->samples + s0 * 2,
        (s1 - s0) * 2 * sizeof (gfloat));
    pts = clip->base + sample_time (self, s0);
    end = clip->base + (n + 1 == frames ? gst_h3_frame_time (frames) :
        sample_time (self, s1));
    GST_BUFFER_PTS (buf) = pts;
    GST_BUFFER_DURATION (buf) = end - pts;
    GST_BUFFER_OFFSET (buf) = out->live_offset + s0;
    GST_BUFFER_OFFSET_END (buf) = out->live_offset + s1;
  }
  if (out->discont) {
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
    out->discont = FALSE;
  }
  out->next++;
  last = out->next == frames;
  if (last) {
    out->next = 0;
    out->live_index++;
    out->live_started = FALSE;
    out->live_offset += out->is_video ? (guint64) frames :
        (guint64) clip->audio_len;
    out->live_end = clip->base + gst_h3_frame_time (frames);
    if (--clip->pads_left == 0) {
      g_queue_remove (&self->live_clips, clip);
      gst_h3_live_clip_free (clip);
    }
  }
  return buf;
}

/* Before a live clip's first buffer: a GAP for the time since the last
 * clip, when it could not follow at once, and the clip's tags. */
static void
live_clip_start (GstH3VideoSrc * self, GstH3Output * out,
    GstClockTime gap_start, GstClockTime base, const gchar * prompt,
    guint index)
{
  if (GST_CLOCK_TIME_IS_VALID (gap_start) && base > gap_start) {
    GST_INFO_OBJECT (out->pad, "gap of %" GST_TIME_FORMAT " before live clip "
        "%u", GST_TIME_ARGS (base - gap_start), index);
    gst_pad_push_event (out->pad, gst_event_new_gap (gap_start,
            base - gap_start));
  }
  if (index > 0)
    output_push_tags (self, out, prompt);
}

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
  GstSegment segment;
  guint32 eos_seqnum, seqnum;
  guint gen;
  GstH3LiveClip *clip;
  GstClockTime latency = GST_CLOCK_TIME_NONE, gap_start = GST_CLOCK_TIME_NONE,
      live_base = GST_CLOCK_TIME_NONE;
  gchar *live_prompt = NULL;
  guint live_index = 0;

  if (self->run.is_live)
    latency = gst_h3_video_src_latency (self);

  GST_H3_VIDEO_SRC_LOCK (self);
  for (;;) {
    if (self->flushing || self->seeking) {
      step = STEP_PAUSE;
      break;
    }
    if (self->stop_streaming) {
      step = STEP_EOS;
      break;
    }
    /* An application EOS waits for the cancelled generation to return
     * (one step), so that its stats and done message come first; then the
     * clip ends where it was cut (output_cut). Live, EOS goes out then. */
    if (self->eos_requested && self->run.is_live) {
      if (!self->generating) {
        step = STEP_EOS;
        break;
      }
    } else if (!out->started) {
      /* Caps before EOS too: a muxer needs them for its tracks. */
      step = STEP_STICKY;
      break;
    } else if (self->run.is_live) {
      /* Data flows in PLAYING only, a complete clip at a time. */
      if (self->playing && (clip = live_clip_find (self, out->live_index))) {
        if (!GST_CLOCK_TIME_IS_VALID (clip->base))
          live_clip_place (self, clip, latency);
        if (!out->live_started) {
          step = STEP_LIVE_CLIP;
          gap_start = out->live_end;
          live_base = clip->base;
          live_prompt = g_strdup (clip->prompt);
          live_index = clip->index;
          out->live_started = TRUE;
          break;
        }
        buf = live_take_buffer (self, out, clip);
        step = STEP_BUFFER;
        break;
      }
    } else if (out->segment_gen != self->segment_gen) {
      step = STEP_SEGMENT;
      break;
    } else if (gst_h3_clip_has_plan (&self->clip)) {
      gboolean cut = output_cut (self);

      if (output_at_end (self, out, cut)) {
        /* After an application EOS no seek comes: no SEGMENT_DONE wait. */
        if (cut || self->eos_requested) {
          step = STEP_EOS;
          break;
        }
        if (self->segment.flags & GST_SEGMENT_FLAG_SEGMENT) {
          if (!out->segment_done) {
            step = STEP_SEGMENT_DONE;
            break;
          }
          /* Wait for the next seek. */
        } else if (gst_h3_clip_complete (&self->clip)) {
          step = STEP_EOS;
          break;
        }
      } else if ((buf = output_take_buffer (self, out, cut))) {
        step = STEP_BUFFER;
        break;
      }
    } else if (output_cut (self)) {
      /* Stopped before the plan: nothing to push. */
      step = STEP_EOS;
      break;
    }
    /* The worker ended without a full clip and without saying why (it
     * always should): end the stream rather than wait forever. */
    if (self->worker_done && !gst_h3_clip_complete (&self->clip)) {
      step = STEP_EOS;
      break;
    }
    GST_H3_VIDEO_SRC_WAIT (self);
  }
  segment = self->segment;
  gen = self->segment_gen;
  seqnum = self->segment_seqnum;
  eos_seqnum = self->eos_requested ? self->eos_seqnum : seqnum;
  if (step == STEP_STICKY || step == STEP_SEGMENT) {
    gst_h3_output_seek (self, out, &segment);
    out->segment_gen = gen;
  } else if (step == STEP_SEGMENT_DONE) {
    out->segment_done = TRUE;
  }
  GST_H3_VIDEO_SRC_UNLOCK (self);

  switch (step) {
    case STEP_PAUSE:
      GST_DEBUG_OBJECT (out->pad, "flushing: pausing the task");
      gst_pad_pause_task (out->pad);
      return;
    case STEP_STICKY:
      /* A refused caps posts its own, more helpful, error message. */
      if (!output_push_sticky (self, out, TRUE, &segment, seqnum)) {
        GST_OBJECT_LOCK (self);
        gst_flow_combiner_update_pad_flow (self->combiner, out->pad,
            GST_FLOW_NOT_NEGOTIATED);
        GST_OBJECT_UNLOCK (self);
        output_fatal (self, out, GST_FLOW_NOT_NEGOTIATED, TRUE);
      }
      if (out->eos)
        gst_pad_pause_task (out->pad);
      return;
    case STEP_SEGMENT:
      /* A seek: the new segment (a flush dropped the tags too). */
      output_push_segment (out, &segment, seqnum);
      output_push_tags (self, out, NULL);
      return;
    case STEP_SEGMENT_DONE:
      output_segment_done (self, out, &segment, seqnum, gen);
      return;
    case STEP_LIVE_CLIP:
      live_clip_start (self, out, gap_start, live_base, live_prompt,
          live_index);
      g_free (live_prompt);
      return;
    case STEP_EOS:
      output_push_eos (self, out, eos_seqnum);
      gst_pad_pause_task (out->pad);
      return;
    case STEP_BUFFER:
      break;
  }

  GST_LOG_OBJECT (out->pad, "pushing %" GST_PTR_FORMAT, buf);
  {
    GstClockTime end = GST_BUFFER_PTS (buf) + GST_BUFFER_DURATION (buf);

    ret = gst_pad_push (out->pad, buf);
    if (ret == GST_FLOW_OK)
      output_update_position (self, out, end);
  }
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
