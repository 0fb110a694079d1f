/* gsth3videosrc-uri.h - the h3: URI of a clip
 * (gsth3videosrc-uri.c; h3src handles it). */
#ifndef GST_H3_VIDEO_SRC_URI_H
#define GST_H3_VIDEO_SRC_URI_H

#include <gst/gst.h>

G_BEGIN_DECLS

G_GNUC_INTERNAL
gchar *gst_h3_uri_from_properties (GObject * h3videosrc);
G_GNUC_INTERNAL
gboolean gst_h3_uri_to_properties (GObject * h3videosrc, const gchar * uri,
    GError ** error);
G_GNUC_INTERNAL
gchar *gst_h3_uri_check_policy (const gchar * uri);

G_END_DECLS

#endif /* GST_H3_VIDEO_SRC_URI_H */
