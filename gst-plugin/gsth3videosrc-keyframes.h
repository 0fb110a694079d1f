/* gsth3videosrc-keyframes.h - the FL2VA keyframes of a run
 * (gsth3videosrc-keyframes.c): files and samples decoded into RGB. */
#ifndef GST_H3_VIDEO_SRC_KEYFRAMES_H
#define GST_H3_VIDEO_SRC_KEYFRAMES_H

#include <gst/gst.h>

#include "gsth3videosrc.h"
#include "h3.h"
#include "h3_image_file.h"
#include "gsth3videosrc-settings.h"

G_BEGIN_DECLS

/* A keyframe of a run, decoded at READY->PAUSED (gsth3videosrc-keyframes.c):
 * packed RGB pixels of its own and their digest (for the stream ids). */
typedef struct _GstH3Keyframe
{
  gboolean present;
  h3_image_file file;
  gchar *digest;                /* SHA-256 of the size and pixels */
} GstH3Keyframe;

G_GNUC_INTERNAL
gboolean gst_h3_keyframes_load (GstH3VideoSrc * self, const GstH3Settings * s,
    GstH3Keyframe kf[2]);
G_GNUC_INTERNAL
void gst_h3_keyframes_apply (const GstH3Keyframe kf[2], h3_request * req);
G_GNUC_INTERNAL
void gst_h3_keyframe_clear (GstH3Keyframe * k);

G_END_DECLS

#endif /* GST_H3_VIDEO_SRC_KEYFRAMES_H */
