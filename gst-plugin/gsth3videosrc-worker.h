/* gsth3videosrc-worker.h - h3videosrc's generation thread
 * (gsth3videosrc-worker.c): the clip it fills, its start, stop and
 * cancellation, and what an application EOS does to a generation. */
#ifndef GST_H3_VIDEO_SRC_WORKER_H
#define GST_H3_VIDEO_SRC_WORKER_H

#include <gst/gst.h>

#include "gsth3videosrc.h"
#include "h3.h"

G_BEGIN_DECLS

/* Application EOS before the first frame: a file needs a frame to play
 * (an encoder writes no header without one, and an MP4 track without a
 * sample description does not open), so the generation goes on to its
 * first decoded frames when, at the pace of the steps done, the denoising
 * steps left take at most this long; otherwise it stops at once and the
 * streams end without media (gsth3videosrc-worker.c, eos_plan). */
#define GST_H3_EOS_FINISH_WAIT (5 * G_TIME_SPAN_SECOND)

/* What an application EOS does to a generation in flight. */
typedef enum
{
  GST_H3_EOS_NONE,              /* no EOS requested */
  GST_H3_EOS_PENDING,           /* decided at the next denoising step */
  GST_H3_EOS_FINISH,            /* go on to the first frames, cut there */
  GST_H3_EOS_CUT                /* stopped: the clip ends at frames_ready */
} GstH3EosPlan;

/* The clip of a run as the worker fills it (frames and samples decoded,
 * under the element's lock, GST_H3_VIDEO_SRC_LOCK) and the pad tasks read
 * it, through the accessors below (the lock held). */
typedef struct
{
  gboolean have_plan;
  h3_plan plan;
  GstBuffer **frames;           /* plan.num_frames; NULL once pushed, unless run_keep */
  gint frames_ready;
  gfloat *samples;              /* audio_len stereo frames, zero padded */
  gint64 audio_len, audio_ready, audio_delivered;
  gboolean generated;           /* the clip is complete: stats, done, COMPLETE posted */
  gchar *callback_error;        /* the engine broke the callback contract */
} GstH3Clip;

/* Whether the run's plan is known (validated), and the plan (zero before). */
static inline gboolean
gst_h3_clip_has_plan (const GstH3Clip * c)
{
  return c->have_plan;
}

static inline const h3_plan *
gst_h3_clip_plan (const GstH3Clip * c)
{
  return &c->plan;
}

/* The video frames decoded so far: frames [0, ready) are there. */
static inline gint
gst_h3_clip_ready (const GstH3Clip * c)
{
  return c->frames_ready;
}

/* The stereo samples decoded so far, and the clip's length in samples. */
static inline gint64
gst_h3_clip_audio_ready (const GstH3Clip * c)
{
  return c->audio_ready;
}

static inline gint64
gst_h3_clip_audio_len (const GstH3Clip * c)
{
  return c->audio_len;
}

/* The clip is complete: its stats, done message and COMPLETE are posted. */
static inline gboolean
gst_h3_clip_complete (const GstH3Clip * c)
{
  return c->generated;
}

/* Decoded frame n (n < ready): lent (a buffer sharing its memory) when
 * the clip is kept (keep-clip: pushed again after a seek), otherwise
 * given away. */
static inline GstBuffer *
gst_h3_clip_frame (GstH3Clip * c, gint n, gboolean keep)
{
  GstBuffer *buf;

  if (keep)
    return gst_buffer_copy (c->frames[n]);
  buf = c->frames[n];
  c->frames[n] = NULL;
  return buf;
}

/* The interleaved stereo samples from sample s on. */
static inline const gfloat *
gst_h3_clip_samples (const GstH3Clip * c, gint64 s)
{
  return c->samples + s * 2;
}

G_GNUC_INTERNAL
gpointer gst_h3_video_src_worker (gpointer data);
G_GNUC_INTERNAL
void gst_h3_video_src_worker_join (GstH3VideoSrc * self);
G_GNUC_INTERNAL
gboolean gst_h3_video_src_worker_wait (GstH3VideoSrc * self, gint64 timeout);
G_GNUC_INTERNAL
void gst_h3_video_src_cancel (GstH3VideoSrc * self);
G_GNUC_INTERNAL
GstH3EosPlan gst_h3_video_src_eos_decide (GstH3VideoSrc * self,
    gdouble * first_in);
G_GNUC_INTERNAL
void gst_h3_video_src_eos_apply (GstH3VideoSrc * self, GstH3EosPlan plan,
    gdouble first_in);
/* Frees the clip of the last run (and, live, the clips not pushed). The
 * worker must be joined. */
G_GNUC_INTERNAL
void gst_h3_video_src_clip_clear (GstH3VideoSrc * self);

G_END_DECLS

#endif /* GST_H3_VIDEO_SRC_WORKER_H */
