/* gsth3videosrc-live.c - what h3videosrc's live mode (is-live) shares
 * between the worker, which makes complete clips from queued prompts, and
 * the pad tasks, which push them: the clips' and prompts' lifetimes, the
 * element's running time, and the latency it reports. Apart from both so
 * that neither calls the other for them. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "gsth3videosrc-private.h"
#include "gsth3videosrc-engine.h"
#include "gsth3videosrc-live.h"

void
gst_h3_live_clip_free (GstH3LiveClip * clip)
{
  for (gint i = 0; i < clip->plan.num_frames; i++)
    gst_clear_buffer (&clip->frames[i]);
  g_free (clip->frames);
  g_free (clip->samples);
  g_free (clip->prompt);
  g_free (clip);
}

void
gst_h3_queued_prompt_free (GstH3QueuedPrompt * q)
{
  g_free (q->prompt);
  g_free (q);
}

GstClockTime
gst_h3_video_src_running_time (GstH3VideoSrc * self)
{
  GstClock *clock = gst_element_get_clock (GST_ELEMENT (self));
  GstClockTime now, base;

  if (!clock)
    return GST_CLOCK_TIME_NONE;
  now = gst_clock_get_time (clock);
  base = gst_element_get_base_time (GST_ELEMENT (self));
  gst_object_unref (clock);
  return now > base ? now - base : 0;
}

/* The live latency: the `latency` property, or the estimate: the measured
 * generation time of the last clip of the same shape, this element's or
 * (engine-cache) another's on the same engine, times 1.25, or nothing
 * before a measurement; plus the time a complete clip's first buffer needs
 * to reach the sinks (GST_H3_LIVE_MARGIN). */
GstClockTime
gst_h3_video_src_latency (GstH3VideoSrc * self)
{
  GstH3Settings snapshot;
  gchar *shape, *key;
  gdouble seconds = -1.0;
  GstClockTime latency;

  memset (&snapshot, 0, sizeof snapshot);
  GST_H3_VIDEO_SRC_LOCK (self);
  if (self->running)
    gst_h3_settings_copy (&snapshot, &self->run);
  GST_H3_VIDEO_SRC_UNLOCK (self);
  if (!snapshot.options.devices) {
    GST_OBJECT_LOCK (self);
    gst_h3_settings_copy (&snapshot, &self->settings);
    GST_OBJECT_UNLOCK (self);
  }
  if (snapshot.latency >= 0) {
    latency = (GstClockTime) snapshot.latency;
    gst_h3_settings_clear (&snapshot);
    return latency;
  }
  shape = gst_h3_settings_shape (&snapshot);
  GST_H3_VIDEO_SRC_LOCK (self);
  if (g_strcmp0 (shape, self->measured_shape) == 0)
    seconds = self->measured_seconds;
  GST_H3_VIDEO_SRC_UNLOCK (self);
  if (seconds < 0 && snapshot.engine_cache) {
    key = gst_h3_settings_engine_key (&snapshot);
    seconds = gst_h3_engine_time_for (key, shape);
    g_free (key);
  }
  g_free (shape);
  gst_h3_settings_clear (&snapshot);
  return (GstClockTime) (MAX (seconds, 0.0) * GST_H3_LIVE_ESTIMATE_FACTOR *
      GST_SECOND) + GST_H3_LIVE_MARGIN;
}
