/* gsth3src.h - h3src: the `h3:` URI source. A bin around one h3videosrc
 * whose `video` and `audio` pads appear when it starts, so that playbin,
 * uridecodebin and gst-play-1.0 take both streams of a prompt. */
#ifndef GST_H3_SRC_H
#define GST_H3_SRC_H

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_H3_SRC (gst_h3_src_get_type ())
G_DECLARE_FINAL_TYPE (GstH3Src, gst_h3_src, GST, H3_SRC, GstBin);

GST_ELEMENT_REGISTER_DECLARE (h3src);

/* What an h3: URI may set (h3src's uri-policy). */
typedef enum
{
  GST_H3_URI_POLICY_CONTENT = 0,
  GST_H3_URI_POLICY_ALL = 1
} GstH3UriPolicy;

#define GST_TYPE_H3_URI_POLICY (gst_h3_uri_policy_get_type ())
GType gst_h3_uri_policy_get_type (void);

G_END_DECLS

#endif /* GST_H3_SRC_H */
