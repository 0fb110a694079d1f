/* gsth3videosrc-uri.c - the `h3:` URI of a clip, to and from h3videosrc's
 * properties. h3src (gsth3src.c) is the URI handler that uses it, so that
 * playbin, uridecodebin and gst-play-1.0 open a prompt like a file:
 *
 *   h3:?prompt=a%20red%20fox&width=256&height=160&num-frames=22&steps=2
 *   h3:a%20red%20fox?seed=7                 (the path, when given, is the prompt)
 *
 * The query's keys are the element's property names, its values their
 * values as gst-launch-1.0 writes them (enums by nick: backend=vsa). Values
 * are percent-decoded; `+` is a plus sign, not a space. Setting a URI sets
 * every property it can carry: those it leaves out go back to their
 * defaults, so a URI always describes the whole clip. get_uri writes the
 * prompt and every such property that differs from its default. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "gsth3videosrc-private.h"

/* The properties a URI carries, in the order get_uri writes them. */
static const gchar *const uri_keys[] = {
  "prompt", "seed", "width", "height", "num-frames", "steps", "backend",
  "vsa-sparsity", "model-location", "adapter-location", "compute", "devices",
  "load-format", "dummy-adapter", "engine-cache", "keep-clip",
  "keep-clip-max-bytes", "image-location", "last-image-location",
  "memory", "max-gpu-memory", "precision", NULL
};

static gboolean
uri_key_known (const gchar * key)
{
  return g_strv_contains (uri_keys, key);
}

/* The URI of what an h3videosrc (obj) is set to generate. */
gchar *
gst_h3_uri_from_properties (GObject * obj)
{
  GString *uri = g_string_new ("h3:");
  gchar sep = '?';

  for (const gchar * const *k = uri_keys; *k; k++) {
    GParamSpec *pspec = g_object_class_find_property (G_OBJECT_GET_CLASS (obj),
        *k);
    GValue v = G_VALUE_INIT;
    gchar *text, *escaped;

    g_value_init (&v, pspec->value_type);
    g_object_get_property (obj, *k, &v);
    /* model-location reads back the embedded model's directory when unset:
     * leave it out unless it was set. */
    if (g_strcmp0 (*k, "model-location") == 0 && g_strcmp0 (g_value_get_string
            (&v), h3_default_model_dir ()) == 0) {
      g_value_unset (&v);
      continue;
    }
    if (g_param_value_defaults (pspec, &v)) {
      g_value_unset (&v);
      continue;
    }
    if (G_VALUE_HOLDS_STRING (&v))
      text = g_value_dup_string (&v);
    else if (G_VALUE_HOLDS_ENUM (&v))
      text = g_strdup (g_enum_get_value (g_type_class_peek (pspec->value_type),
              g_value_get_enum (&v))->value_nick);
    else
      text = gst_value_serialize (&v);
    escaped = g_uri_escape_string (text ? text : "", NULL, FALSE);
    g_string_append_printf (uri, "%c%s=%s", sep, *k, escaped);
    sep = '&';
    g_free (escaped);
    g_free (text);
    g_value_unset (&v);
  }
  return g_string_free (uri, FALSE);
}

/* The value of property pspec written as text, checked against its range. */
static gboolean
uri_parse_value (GParamSpec * pspec, const gchar * text, GValue * v,
    GError ** error)
{
  g_value_init (v, pspec->value_type);
  if (G_VALUE_HOLDS_STRING (v)) {
    g_value_set_string (v, text);
  } else if (!gst_value_deserialize_with_pspec (v, text, pspec)) {
    g_set_error (error, GST_URI_ERROR, GST_URI_ERROR_BAD_URI,
        "h3: URI: '%s' is not a valid %s for %s", text,
        g_type_name (pspec->value_type), pspec->name);
    return FALSE;
  }
  if (g_param_value_validate (pspec, v)) {
    g_set_error (error, GST_URI_ERROR, GST_URI_ERROR_BAD_URI,
        "h3: URI: %s=%s is out of range", pspec->name, text);
    return FALSE;
  }
  return TRUE;
}

/* Sets the properties of an h3videosrc (obj) from a URI; a bad URI
 * changes nothing. */
gboolean
gst_h3_uri_to_properties (GObject * obj, const gchar * uri, GError ** error)
{
  GObjectClass *klass = G_OBJECT_GET_CLASS (obj);
  GstUri *u;
  GHashTable *query = NULL;
  GHashTableIter it;
  gpointer key, value;
  GArray *values;
  GPtrArray *names;
  const gchar *path;
  gboolean ok = TRUE;

  u = gst_uri_from_string (uri);
  if (!u || g_ascii_strcasecmp (gst_uri_get_scheme (u), "h3") != 0) {
    g_set_error (error, GST_URI_ERROR, GST_URI_ERROR_BAD_URI,
        "'%s' is not an h3: URI (h3:?prompt=a%%20red%%20fox&width=256...)",
        uri);
    if (u)
      gst_uri_unref (u);
    return FALSE;
  }

  /* Parse everything first: a bad URI changes nothing. */
  values = g_array_new (FALSE, TRUE, sizeof (GValue));
  g_array_set_clear_func (values, (GDestroyNotify) g_value_unset);
  names = g_ptr_array_new ();
  path = gst_uri_get_path (u);
  query = gst_uri_get_query_table (u);
  if (path && *path && g_strcmp0 (path, "/") != 0
      && !(query && g_hash_table_contains (query, "prompt"))) {
    GValue v = G_VALUE_INIT;
    g_value_init (&v, G_TYPE_STRING);
    g_value_set_string (&v, path);
    g_array_append_val (values, v);
    g_ptr_array_add (names, (gpointer) "prompt");
  }
  if (query)
    g_hash_table_iter_init (&it, query);
  while (ok && query && g_hash_table_iter_next (&it, &key, &value)) {
    GValue v = G_VALUE_INIT;
    GParamSpec *pspec;

    if (!uri_key_known (key)) {
      gchar *keys = g_strjoinv (", ", (gchar **) uri_keys);
      g_set_error (error, GST_URI_ERROR, GST_URI_ERROR_BAD_URI,
          "h3: URI: unknown key '%s' (the keys are %s)", (gchar *) key, keys);
      g_free (keys);
      ok = FALSE;
      break;
    }
    if (!value) {
      g_set_error (error, GST_URI_ERROR, GST_URI_ERROR_BAD_URI,
          "h3: URI: '%s' needs a value (%s=...)", (gchar *) key,
          (gchar *) key);
      ok = FALSE;
      break;
    }
    pspec = g_object_class_find_property (klass, key);
    if (!uri_parse_value (pspec, value, &v, error)) {
      g_value_unset (&v);
      ok = FALSE;
      break;
    }
    g_array_append_val (values, v);
    g_ptr_array_add (names, key);
  }

  if (ok) {
    g_object_freeze_notify (obj);
    for (const gchar * const *k = uri_keys; *k; k++) {
      GParamSpec *pspec = g_object_class_find_property (klass, *k);
      GValue v = G_VALUE_INIT;
      g_value_init (&v, pspec->value_type);
      g_param_value_set_default (pspec, &v);
      g_object_set_property (obj, *k, &v);
      g_value_unset (&v);
    }
    for (guint i = 0; i < names->len; i++)
      g_object_set_property (obj, g_ptr_array_index (names, i),
          &g_array_index (values, GValue, i));
    g_object_thaw_notify (obj);
    GST_INFO_OBJECT (obj, "URI %s", uri);
  }
  g_ptr_array_unref (names);
  g_array_unref (values);
  if (query)
    g_hash_table_unref (query);
  gst_uri_unref (u);
  return ok;
}
