/* gsth3videosrc-settings.h - h3videosrc's property values
 * (gsth3videosrc-settings.c): the settings struct, its rows, copies,
 * the checks before a run and the h3_request. */
#ifndef GST_H3_VIDEO_SRC_SETTINGS_H
#define GST_H3_VIDEO_SRC_SETTINGS_H

#include <gst/gst.h>

#include "gsth3videosrc.h"
#include "h3.h"

G_BEGIN_DECLS

/* Everything the properties configure. The element keeps one copy under the
 * object lock and snapshots it into `run` when a run starts, so property
 * changes never reach a generation in flight. Every field but the samples
 * is a row of a schema (h3.h's h3_params for the request and the engine
 * options, gst_h3_settings_params for the element's own): its default,
 * range, property and URI key come from there. Strings are owned. */
typedef struct _GstH3Settings
{
  h3_request request;           /* prompt (first_image, last_image: unset) */
  h3_engine_options options;    /* model_dir, adapter_path, devices (log: unset) */
  gboolean engine_cache;
  gboolean keep_clip;
  guint64 keep_clip_max_bytes;
  gboolean is_live;
  gint64 latency;               /* ns, or -1: estimated */
  /* FL2VA keyframes: a file or a sample for each (setting one clears the
   * other: the last set wins); all unset: T2VA. */
  gchar *image_location, *last_image_location;
  GstSample *image, *last_image;
} GstH3Settings;

/* A keyframe decoded for a run (gsth3videosrc-keyframes.h). */
typedef struct _GstH3Keyframe GstH3Keyframe;

/* The element's own rows (H3_PARAM_IN_FRONTEND: offsets into
 * GstH3Settings), ended by a NULL name. */
G_GNUC_INTERNAL
const h3_param *gst_h3_settings_params (void);
/* Installs a property for every row of h3_params (but the tools' own) and
 * of gst_h3_settings_params, with ids from first_id on, in that order. */
G_GNUC_INTERNAL
void gst_h3_settings_install_properties (GObjectClass * klass,
    guint first_id);
/* The row of property id (as installed), or NULL. */
G_GNUC_INTERNAL
const h3_param *gst_h3_settings_row (guint prop_id);
/* The row's field in s (its home struct). */
G_GNUC_INTERNAL
gpointer gst_h3_settings_home (GstH3Settings * s, const h3_param * row);
/* The row's value in s into value (initialised to the property's type);
 * and the reverse. */
G_GNUC_INTERNAL
void gst_h3_settings_get_value (GstH3Settings * s, const h3_param * row,
    GValue * value);
G_GNUC_INTERNAL
void gst_h3_settings_set_value (GstH3Settings * s, const h3_param * row,
    const GValue * value);
G_GNUC_INTERNAL
void gst_h3_settings_init (GstH3Settings * s);
G_GNUC_INTERNAL
void gst_h3_settings_clear (GstH3Settings * s);
G_GNUC_INTERNAL
void gst_h3_settings_copy (GstH3Settings * dst, const GstH3Settings * src);
G_GNUC_INTERNAL
const gchar *gst_h3_settings_model_dir (const GstH3Settings * s);
G_GNUC_INTERNAL
gchar *gst_h3_settings_engine_key (const GstH3Settings * s);
G_GNUC_INTERNAL
gchar *gst_h3_settings_stream_id (const GstH3Settings * s,
    const GstH3Keyframe * keyframes, const gchar * pad_name);
/* The GEnum of an ENUM row of h3_params ("backend": GstH3Backend). */
G_GNUC_INTERNAL
GType gst_h3_settings_enum_type (const gchar * row_name);
G_GNUC_INTERNAL
h3_request gst_h3_settings_request (const GstH3Settings * s);
G_GNUC_INTERNAL
void gst_h3_settings_engine_options (const GstH3Settings * s,
    h3_engine_options * opt);
G_GNUC_INTERNAL
gboolean gst_h3_settings_check (GstH3VideoSrc * self, const GstH3Settings * s,
    const GstH3Keyframe * keyframes, h3_preflight * pf);
/* What a generation's time depends on besides the engine (the live
 * latency estimate reuses a measurement for the same shape only). */
G_GNUC_INTERNAL
gchar *gst_h3_settings_shape (const GstH3Settings * s);

G_END_DECLS

#endif /* GST_H3_VIDEO_SRC_SETTINGS_H */
