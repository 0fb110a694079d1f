/* gsth3videosrc-engine.h - the engines shared by the elements
 * of a process (gsth3videosrc-engine.c): loads, turns, cancellation.
 * GstH3Engine is opaque. */
#ifndef GST_H3_VIDEO_SRC_ENGINE_H
#define GST_H3_VIDEO_SRC_ENGINE_H

#include <gst/gst.h>

#include "h3.h"

G_BEGIN_DECLS

/* An engine shared by the elements of the process (gsth3videosrc-engine.c). */
typedef struct _GstH3Engine GstH3Engine;

/* The entry for key, with a reference; *must_load: the caller made it and
 * loads it (gst_h3_engine_load), else it waits (gst_h3_engine_wait_loaded).
 * shared=FALSE: an entry of the caller's own, outside the table. */
G_GNUC_INTERNAL
GstH3Engine *gst_h3_engine_lookup (const gchar * key, gboolean shared,
    gboolean * must_load);
G_GNUC_INTERNAL
gboolean gst_h3_engine_load (GstH3Engine * e, GstObject * loader,
    h3_engine_options * opt, h3_status * st);
/* Called once when a wait begins, with the name of the element it waits
 * for (the loader, or the one generating); no lock held. */
typedef void (*GstH3WaitFunc) (gpointer data, const gchar * holder);
G_GNUC_INTERNAL
gboolean gst_h3_engine_wait_loaded (GstH3Engine * e,
    const volatile gint * cancel, GstH3WaitFunc on_wait, gpointer data,
    h3_status * st);
G_GNUC_INTERNAL
gboolean gst_h3_engine_begin (GstH3Engine * e, GstObject * owner,
    const volatile gint * cancel, GstH3WaitFunc on_wait, gpointer data);
G_GNUC_INTERNAL
void gst_h3_engine_end (GstH3Engine * e, GstObject * owner);
G_GNUC_INTERNAL
void gst_h3_engine_cancel (GstH3Engine * e, GstObject * owner);
G_GNUC_INTERNAL
void gst_h3_engine_wake (void);
G_GNUC_INTERNAL
void gst_h3_engine_note_time (GstH3Engine * e, const gchar * shape,
    gdouble seconds);
G_GNUC_INTERNAL
gdouble gst_h3_engine_time_for (const gchar * key, const gchar * shape);
G_GNUC_INTERNAL
h3_engine *gst_h3_engine_get (GstH3Engine * e);
G_GNUC_INTERNAL
const gchar *gst_h3_engine_key (GstH3Engine * e);
G_GNUC_INTERNAL
gboolean gst_h3_engine_is_shared (GstH3Engine * e);
G_GNUC_INTERNAL
void gst_h3_engine_unref (GstH3Engine * e);

G_END_DECLS

#endif /* GST_H3_VIDEO_SRC_ENGINE_H */
