/* gsth3videosrc.h - h3videosrc: a GStreamer source that generates a video
 * clip with its soundtrack from a text prompt, through the h3core engine. */
#ifndef GST_H3_VIDEO_SRC_H
#define GST_H3_VIDEO_SRC_H

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_H3_VIDEO_SRC (gst_h3_video_src_get_type ())
G_DECLARE_FINAL_TYPE (GstH3VideoSrc, gst_h3_video_src, GST, H3_VIDEO_SRC,
    GstElement);

/* The execution modes of the `backend` property (h3_attention_mode). */
typedef enum
{
  GST_H3_BACKEND_FA = 0,
  GST_H3_BACKEND_VSA = 1
} GstH3Backend;

#define GST_TYPE_H3_BACKEND (gst_h3_backend_get_type ())
GType gst_h3_backend_get_type (void);

/* Where the model runs (h3_compute). */
typedef enum
{
  GST_H3_COMPUTE_AUTO = 0,
  GST_H3_COMPUTE_CPU = 1,
  GST_H3_COMPUTE_CUDA = 2
} GstH3Compute;

#define GST_TYPE_H3_COMPUTE (gst_h3_compute_get_type ())
GType gst_h3_compute_get_type (void);

/* Where the weights come from (h3_load_format). */
typedef enum
{
  GST_H3_LOAD_FORMAT_SAFETENSORS = 0,
  GST_H3_LOAD_FORMAT_DUMMY = 1
} GstH3LoadFormat;

#define GST_TYPE_H3_LOAD_FORMAT (gst_h3_load_format_get_type ())
GType gst_h3_load_format_get_type (void);

/* The FastH3 adapter made up with load-format=dummy (h3_dummy_adapter). */
typedef enum
{
  GST_H3_DUMMY_ADAPTER_NONE = 0,
  GST_H3_DUMMY_ADAPTER_DENSE = 1,
  GST_H3_DUMMY_ADAPTER_VSA = 2
} GstH3DummyAdapter;

#define GST_TYPE_H3_DUMMY_ADAPTER (gst_h3_dummy_adapter_get_type ())
GType gst_h3_dummy_adapter_get_type (void);

/* What the big linear layers' weights are held in (h3_precision). */
typedef enum
{
  GST_H3_PRECISION_BF16 = 0,
  GST_H3_PRECISION_FP8 = 1
} GstH3Precision;

#define GST_TYPE_H3_PRECISION (gst_h3_precision_get_type ())
GType gst_h3_precision_get_type (void);
/* Where the big weights live (h3_memory_mode). */
typedef enum
{
  GST_H3_MEMORY_AUTO = 0,
  GST_H3_MEMORY_RESIDENT = 1,
  GST_H3_MEMORY_STREAM = 2
} GstH3Memory;

#define GST_TYPE_H3_MEMORY (gst_h3_memory_get_type ())
GType gst_h3_memory_get_type (void);

GST_ELEMENT_REGISTER_DECLARE (h3videosrc);

G_END_DECLS

#endif /* GST_H3_VIDEO_SRC_H */
