/* gsth3videosrc-events.h - the application's EOS, seeks and
 * the pads' queries (gsth3videosrc-events.c). */
#ifndef GST_H3_VIDEO_SRC_EVENTS_H
#define GST_H3_VIDEO_SRC_EVENTS_H

#include <gst/gst.h>

G_BEGIN_DECLS

/* GstElement::send_event, and the source pads' event and query functions. */
gboolean gst_h3_video_src_send_event (GstElement * element, GstEvent * event);
gboolean gst_h3_video_src_src_event (GstPad * pad, GstObject * parent,
    GstEvent * event);
gboolean gst_h3_video_src_src_query (GstPad * pad, GstObject * parent,
    GstQuery * query);

G_END_DECLS

#endif /* GST_H3_VIDEO_SRC_EVENTS_H */
