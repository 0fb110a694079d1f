/* gsth3src.c - h3src: the `h3:` URI source.
 *
 * playbin (through uridecodebin) decides how to take a source's streams
 * when it creates it, still in NULL: it exposes the pads that already carry
 * raw caps, plugs one decodebin on the first pad of any other source with
 * pads, and waits for the pads of a source that has none yet. h3videosrc's
 * always pads carry no caps before they start, so only its video would be
 * played. h3src is a bin around one h3videosrc whose ghost pads `video` and
 * `audio` appear when it goes to PAUSED (like rtspsrc's): uridecodebin
 * then takes each of them, playbin3 too, and gst-play-1.0 plays the clip
 * with its sound.
 *
 * The URI sets the h3videosrc's properties (gsth3videosrc-uri.c); the
 * element itself is reachable as the child `src` (src::prompt=... on a
 * gst-launch-1.0 line, or the source-setup signal of playbin). What a URI
 * may set is the uri-policy's: playbin sets the URI when it makes the
 * source, before source-setup, so the policy is applied when h3src
 * starts (READY to PAUSED), once the application had its say. */

/**
 * SECTION:element-h3src
 * @title: h3src
 *
 * The `h3:` URI source: an h3videosrc whose properties come from the URI's
 * query, with `video` and `audio` pads that appear when it starts, so that
 * playbin and uridecodebin link both streams.
 *
 * ## Example launch lines
 * |[
 * gst-play-1.0 "h3:?prompt=waves%20on%20a%20beach&width=256&height=160&num-frames=22&steps=2"
 * gst-launch-1.0 playbin uri="h3:?prompt=a%20red%20fox&width=64&height=32&num-frames=22&steps=2"
 * ]|
 *
 * By default (#GstH3Src:uri-policy `content`) a URI carries only what the
 * clip shows: prompt, seed, width, height, num-frames, steps, backend and
 * vsa-sparsity, within the release's largest clip (sides up to 1344,
 * 1344x768 pixels, 50 steps). A URI from a playlist or a page cannot make
 * a player read a file as a model or a keyframe, pick GPUs or memory, or
 * ask for hours of work. An application that trusts its URIs sets
 * uri-policy=all, for instance in playbin's source-setup handler.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gsth3src.h"
#include "gsth3videosrc.h"
#include "gsth3videosrc-uri.h"

GST_DEBUG_CATEGORY_STATIC (gst_h3_src_debug);
#undef GST_CAT_DEFAULT
#define GST_CAT_DEFAULT gst_h3_src_debug

struct _GstH3Src
{
  GstBin parent;

  GstElement *src;              /* the h3videosrc, child "src" */
  GstH3UriPolicy uri_policy;    /* object lock */
  gchar *uri;                   /* the URI last set, or NULL; object lock */
  GstPad *video, *audio;        /* ghost pads, from READY->PAUSED to PAUSED->READY */
};

static GstStaticPadTemplate video_template = GST_STATIC_PAD_TEMPLATE ("video",
    GST_PAD_SRC, GST_PAD_SOMETIMES, GST_STATIC_CAPS ("video/x-raw"));

static GstStaticPadTemplate audio_template = GST_STATIC_PAD_TEMPLATE ("audio",
    GST_PAD_SRC, GST_PAD_SOMETIMES, GST_STATIC_CAPS ("audio/x-raw"));

enum
{
  PROP_0,
  PROP_URI_POLICY
};

static void gst_h3_src_uri_handler_init (gpointer g_iface, gpointer data);

GType
gst_h3_uri_policy_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_H3_URI_POLICY_CONTENT, "The clip's content only (prompt, seed, "
          "sizes, frames, steps, backend, vsa-sparsity), within the "
          "release's largest clip", "content"},
    {GST_H3_URI_POLICY_ALL, "Every h3videosrc property the URI names "
          "(paths, devices, memory: for URIs the application trusts)",
        "all"},
    {0, NULL, NULL}
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstH3UriPolicy", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

#define parent_class gst_h3_src_parent_class
G_DEFINE_TYPE_WITH_CODE (GstH3Src, gst_h3_src, GST_TYPE_BIN,
    G_IMPLEMENT_INTERFACE (GST_TYPE_URI_HANDLER, gst_h3_src_uri_handler_init));
GST_ELEMENT_REGISTER_DEFINE (h3src, "h3src", GST_RANK_NONE, GST_TYPE_H3_SRC);

/* ---- pads ---------------------------------------------------------------- */

/* A ghost of the h3videosrc's pad, active but not yet on the bin: the
 * h3videosrc sees a linked pad when it starts. */
static GstPad *
ghost_new (GstH3Src * self, const gchar * name, GstStaticPadTemplate * templ)
{
  GstPad *target = gst_element_get_static_pad (self->src, name);
  GstPadTemplate *t = gst_static_pad_template_get (templ);
  GstPad *ghost = gst_ghost_pad_new_from_template (name, target, t);

  gst_object_unref (t);
  gst_object_unref (target);
  gst_pad_set_active (ghost, TRUE);
  return gst_object_ref_sink (ghost);
}

static void
ghosts_release (GstH3Src * self, gboolean added)
{
  GstPad **pads[] = { &self->video, &self->audio };

  for (guint i = 0; i < G_N_ELEMENTS (pads); i++) {
    GstPad *pad = *pads[i];
    if (!pad)
      continue;
    gst_pad_set_active (pad, FALSE);
    if (added)
      gst_element_remove_pad (GST_ELEMENT (self), pad);
    gst_object_unref (pad);
    *pads[i] = NULL;
  }
}

/* The URI against uri-policy, when h3src starts: FALSE (with an error
 * posted) when it asks for what the policy refuses. */
static gboolean
policy_allows (GstH3Src * self)
{
  gchar *uri, *why = NULL;
  GstH3UriPolicy policy;

  GST_OBJECT_LOCK (self);
  uri = g_strdup (self->uri);
  policy = self->uri_policy;
  GST_OBJECT_UNLOCK (self);
  if (uri && policy == GST_H3_URI_POLICY_CONTENT)
    why = gst_h3_uri_check_policy (uri);
  if (why)
    GST_ELEMENT_ERROR (self, RESOURCE, NOT_AUTHORIZED,
        ("The h3: URI asks for %s", why), ("uri %s, uri-policy=content", uri));
  g_free (uri);
  g_free (why);
  return why == NULL;
}

static GstStateChangeReturn
gst_h3_src_change_state (GstElement * element, GstStateChange transition)
{
  GstH3Src *self = GST_H3_SRC (element);
  GstStateChangeReturn ret;

  if (transition == GST_STATE_CHANGE_READY_TO_PAUSED && !policy_allows (self))
    return GST_STATE_CHANGE_FAILURE;
  if (transition == GST_STATE_CHANGE_READY_TO_PAUSED) {
    self->video = ghost_new (self, "video", &video_template);
    self->audio = ghost_new (self, "audio", &audio_template);
  }
  ret = GST_ELEMENT_CLASS (parent_class)->change_state (element, transition);
  switch (transition) {
    case GST_STATE_CHANGE_READY_TO_PAUSED:
      if (ret == GST_STATE_CHANGE_FAILURE) {
        ghosts_release (self, FALSE);
        break;
      }
      gst_element_add_pad (element, self->video);
      gst_element_add_pad (element, self->audio);
      gst_element_no_more_pads (element);
      break;
    case GST_STATE_CHANGE_PAUSED_TO_READY:
      ghosts_release (self, TRUE);
      break;
    default:
      break;
  }
  return ret;
}

/* ---- the URI handler ----------------------------------------------------- */

static GstURIType
uri_get_type (GType type)
{
  return GST_URI_SRC;
}

static const gchar *const *
uri_get_protocols (GType type)
{
  static const gchar *const protocols[] = { "h3", NULL };

  return protocols;
}

static gchar *
uri_get_uri (GstURIHandler * handler)
{
  return gst_h3_uri_from_properties (G_OBJECT (GST_H3_SRC (handler)->src));
}

static gboolean
uri_set_uri (GstURIHandler * handler, const gchar * uri, GError ** error)
{
  GstH3Src *self = GST_H3_SRC (handler);
  GstState state;

  GST_OBJECT_LOCK (self);
  state = GST_STATE (self);
  GST_OBJECT_UNLOCK (self);
  if (state > GST_STATE_READY) {
    g_set_error (error, GST_URI_ERROR, GST_URI_ERROR_BAD_STATE,
        "h3: URI: the URI can only be set in the NULL or READY state");
    return FALSE;
  }
  if (!gst_h3_uri_to_properties (G_OBJECT (self->src), uri, error))
    return FALSE;
  GST_OBJECT_LOCK (self);
  g_free (self->uri);
  self->uri = g_strdup (uri);
  GST_OBJECT_UNLOCK (self);
  return TRUE;
}

static void
gst_h3_src_uri_handler_init (gpointer g_iface, gpointer data)
{
  GstURIHandlerInterface *iface = g_iface;

  iface->get_type = uri_get_type;
  iface->get_protocols = uri_get_protocols;
  iface->get_uri = uri_get_uri;
  iface->set_uri = uri_set_uri;
}

/* ---- class --------------------------------------------------------------- */

static void
gst_h3_src_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec)
{
  GstH3Src *self = GST_H3_SRC (object);

  switch (prop_id) {
    case PROP_URI_POLICY:
      GST_OBJECT_LOCK (self);
      self->uri_policy = g_value_get_enum (value);
      GST_OBJECT_UNLOCK (self);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
}

static void
gst_h3_src_get_property (GObject * object, guint prop_id, GValue * value,
    GParamSpec * pspec)
{
  GstH3Src *self = GST_H3_SRC (object);

  switch (prop_id) {
    case PROP_URI_POLICY:
      GST_OBJECT_LOCK (self);
      g_value_set_enum (value, self->uri_policy);
      GST_OBJECT_UNLOCK (self);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
}

static void
gst_h3_src_finalize (GObject * object)
{
  g_free (GST_H3_SRC (object)->uri);
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_h3_src_class_init (GstH3SrcClass * klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);

  gobject_class->set_property = gst_h3_src_set_property;
  gobject_class->get_property = gst_h3_src_get_property;
  gobject_class->finalize = gst_h3_src_finalize;

  /**
   * GstH3Src:uri-policy:
   *
   * What the h3: URI may set. `content` (the default): the clip's content
   * alone (prompt, seed, width, height, num-frames, steps, backend,
   * vsa-sparsity), within the release's largest clip (sides up to 1344,
   * 1344x768 pixels, 50 steps); a URI naming a file, devices, memory or
   * engine settings, or asking for more, fails the start with
   * RESOURCE/NOT_AUTHORIZED. `all`: every h3videosrc property within its
   * own range, for URIs the application trusts. Set it before the
   * element starts, e.g. in playbin's source-setup handler: the URI is
   * checked at READY to PAUSED.
   */
  g_object_class_install_property (gobject_class, PROP_URI_POLICY,
      g_param_spec_enum ("uri-policy", "URI policy",
          "What an h3: URI may set: content (the clip's content, bounded) "
          "or all (every property; for trusted URIs)", GST_TYPE_H3_URI_POLICY,
          GST_H3_URI_POLICY_CONTENT, G_PARAM_READWRITE |
          G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY));
  gst_type_mark_as_plugin_api (GST_TYPE_H3_URI_POLICY, 0);

  GST_DEBUG_CATEGORY_INIT (gst_h3_src_debug, "h3src", 0,
      "the h3: URI source");
  gst_element_class_add_static_pad_template (element_class, &video_template);
  gst_element_class_add_static_pad_template (element_class, &audio_template);
  gst_element_class_set_static_metadata (element_class,
      "MiniMax-H3 h3: URI source", "Source/Video/Audio",
      "Generates the clip an h3: URI describes (prompt and h3videosrc "
      "properties in the query), for playbin and uridecodebin",
      "gst-h3 developers");
  element_class->change_state = GST_DEBUG_FUNCPTR (gst_h3_src_change_state);
}

static void
gst_h3_src_init (GstH3Src * self)
{
  self->src = g_object_new (GST_TYPE_H3_VIDEO_SRC, "name", "src", NULL);
  gst_bin_add (GST_BIN (self), self->src);
}
