/* gsth3videosrc-live.h - live mode's pieces shared by the
 * worker and the pad tasks (gsth3videosrc-live.c): the complete clips and
 * queued prompts, the running time, the latency. */
#ifndef GST_H3_VIDEO_SRC_LIVE_H
#define GST_H3_VIDEO_SRC_LIVE_H

#include <gst/gst.h>

#include "gsth3videosrc.h"
#include "h3.h"

G_BEGIN_DECLS

/* Live mode: what a clip's first buffer needs after the clip is complete
 * to reach the sinks (the push through the pipeline), added to the
 * latency the element reports; and the margin on a measured generation
 * time in the estimate (x 1.25). */
#define GST_H3_LIVE_MARGIN (200 * GST_MSECOND)
#define GST_H3_LIVE_ESTIMATE_FACTOR 1.25

/* Live mode: a complete clip waiting to be pushed, or being pushed, with
 * the timestamp offset both pads give it (the pad tasks push it). */
typedef struct
{
  guint index;                  /* 0: the run's first clip */
  gchar *prompt;
  guint64 seed;
  h3_plan plan;
  GstBuffer **frames;           /* plan.num_frames, NULL once pushed */
  gfloat *samples;              /* audio_len stereo frames */
  gint64 audio_len;
  GstClockTime complete_rt;     /* running time when complete, or NONE (before PLAYING) */
  GstClockTime base;            /* PTS of its first frame, NONE until decided */
  gint pads_left;               /* pads still pushing it */
} GstH3LiveClip;

/* A prompt queued with queue-prompt. */
typedef struct
{
  gchar *prompt;
  guint64 seed;
} GstH3QueuedPrompt;

G_GNUC_INTERNAL
void gst_h3_live_clip_free (GstH3LiveClip * clip);
G_GNUC_INTERNAL
void gst_h3_queued_prompt_free (GstH3QueuedPrompt * q);
/* The element's running time now, or NONE without a clock. */
G_GNUC_INTERNAL
GstClockTime gst_h3_video_src_running_time (GstH3VideoSrc * self);
/* The latency a live element reports (the property, or the estimate). */
G_GNUC_INTERNAL
GstClockTime gst_h3_video_src_latency (GstH3VideoSrc * self);

G_END_DECLS

#endif /* GST_H3_VIDEO_SRC_LIVE_H */
