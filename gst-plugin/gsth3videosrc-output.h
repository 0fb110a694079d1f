/* gsth3videosrc-output.h - h3videosrc's pad tasks
 * (gsth3videosrc-output.c): a pad's position in the run, timestamps, caps,
 * the streams' identity, the tasks' loop. */
#ifndef GST_H3_VIDEO_SRC_OUTPUT_H
#define GST_H3_VIDEO_SRC_OUTPUT_H

#include <gst/gst.h>

#include "gsth3videosrc.h"
#include "h3.h"

G_BEGIN_DECLS

/* One source pad and the position of its pad task in the run. Touched only
 * by that task, or by the state change while the task is stopped. */
typedef struct
{
  GstH3VideoSrc *self;
  GstPad *pad;
  gboolean is_video;
  gint next;                    /* next video frame, or audio slice (one per frame) */
  gint end;                     /* video: the segment's end frame (exclusive) */
  gint64 sample, sample_end;    /* audio: next sample, the segment's end */
  guint segment_gen;            /* the segment (self->segment_gen) pushed */
  gboolean started;             /* sticky events pushed */
  gboolean discont;
  gboolean eos;
  gboolean segment_done;        /* SEGMENT_DONE pushed for segment_gen */
  /* Live mode: the clip this pad is on (its index), where the last one
   * ended, and the running offsets (frames, samples) of the stream. */
  guint live_index;
  gboolean live_started;        /* the gap and tags before live_index pushed */
  GstClockTime live_end;
  guint64 live_offset;
  GstFlowReturn last_flow;      /* of the last push */
} GstH3Output;

G_GNUC_INTERNAL
GstClockTime gst_h3_frame_time (gint64 n);
G_GNUC_INTERNAL
gint64 gst_h3_frame_at (GstClockTime t);
G_GNUC_INTERNAL
GstCaps *gst_h3_video_caps_new (gint width, gint height);
G_GNUC_INTERNAL
GstCaps *gst_h3_audio_caps_new (gint rate);
G_GNUC_INTERNAL
void gst_h3_video_src_streams_new (GstH3VideoSrc * self);
G_GNUC_INTERNAL
void gst_h3_video_src_streams_clear (GstH3VideoSrc * self);
G_GNUC_INTERNAL
gboolean gst_h3_video_src_accept_caps (GstH3VideoSrc * self,
    GstH3Output * out);
G_GNUC_INTERNAL
void gst_h3_output_reset (GstH3Output * out);
G_GNUC_INTERNAL
guint64 gst_h3_clip_bytes (gint frames, gint width, gint height, gint rate);
G_GNUC_INTERNAL
void gst_h3_output_seek (GstH3VideoSrc * self, GstH3Output * out,
    const GstSegment * segment);
G_GNUC_INTERNAL
void gst_h3_video_src_loop (gpointer user_data);

G_END_DECLS

#endif /* GST_H3_VIDEO_SRC_OUTPUT_H */
