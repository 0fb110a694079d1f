/* gsth3videosrc-messages.h - what h3videosrc posts
 * (gsth3videosrc-messages.c): progress, step and done messages, the stats
 * and capabilities structures, engine errors. */
#ifndef GST_H3_VIDEO_SRC_MESSAGES_H
#define GST_H3_VIDEO_SRC_MESSAGES_H

#include <gst/gst.h>

#include "gsth3videosrc.h"
#include "h3.h"

G_BEGIN_DECLS

/* What the worker was doing when the engine failed (for the message). */
typedef enum
{
  GST_H3_STAGE_LOAD,
  GST_H3_STAGE_VALIDATE,
  GST_H3_STAGE_GENERATE
} GstH3Stage;

G_GNUC_INTERNAL
void gst_h3_video_src_post_progress (GstH3VideoSrc * self, gboolean * open,
    GstProgressType type, const gchar * code, gint percent,
    const gchar * format, ...) G_GNUC_PRINTF (6, 7);
G_GNUC_INTERNAL
gint gst_h3_phase_percent (h3_phase phase, gint done, gint total);
G_GNUC_INTERNAL
void gst_h3_video_src_post_step (GstH3VideoSrc * self, h3_phase phase,
    gint done, gint total, gint percent);
G_GNUC_INTERNAL
void gst_h3_video_src_post_done (GstH3VideoSrc * self, const gchar * result,
    const h3_stats * stats);
G_GNUC_INTERNAL
GstStructure *gst_h3_stats_structure_new (const h3_stats * stats);
G_GNUC_INTERNAL
GstStructure *gst_h3_capabilities_structure_new (void);
G_GNUC_INTERNAL
void gst_h3_video_src_post_engine_error (GstH3VideoSrc * self,
    GstH3Stage stage, const h3_status * st);
G_GNUC_INTERNAL
void gst_h3_video_src_post_settings_error (GstH3VideoSrc * self,
    const h3_status * st);
G_GNUC_INTERNAL
void gst_h3_video_src_post_preflight_error (GstH3VideoSrc * self,
    const h3_status * st);

G_END_DECLS

#endif /* GST_H3_VIDEO_SRC_MESSAGES_H */
