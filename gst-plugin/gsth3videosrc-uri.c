/* gsth3videosrc-uri.c - the `h3:` URI of a clip, to and from h3videosrc's
 * properties, and the policy on what a URI may ask for. h3src
 * (gsth3src.c) is the URI handler that uses it, so that playbin,
 * uridecodebin and gst-play-1.0 open a prompt like a file:
 *
 *   h3:?prompt=a%20red%20fox&width=256&height=160&num-frames=22&steps=2
 *   h3:a%20red%20fox?seed=7                 (the path, when given, is the prompt)
 *
 * The query's keys are the element's property names (the rows of the
 * request schema and the element's own), its values their values as
 * gst-launch-1.0 writes them (enums by nick: backend=vsa), parsed by the
 * schema (h3_param_parse: no sign on an unsigned number, nothing after
 * it). Values are percent-decoded; `+` is a plus sign, not a space. A key
 * given twice, a host, a fragment, an escaped NUL, an unknown key or a bad
 * value is an error, and a bad URI changes nothing. Setting a URI sets
 * every property it can carry: those it leaves out go back to their
 * defaults, so a URI always describes the whole clip. get_uri writes the
 * prompt and every such property that differs from its default.
 *
 * A URI is data: it comes from a playlist or a web page as often as from
 * the application. By default (h3src's uri-policy=content) it may carry
 * only the clip's content, the rows flagged H3_PARAM_CONTENT (prompt, seed,
 * width, height, num-frames, steps, backend, vsa-sparsity), within the
 * bounds of an untrusted request (h3_request_check_untrusted); a key that names a file, a device, memory or the engine
 * cache is refused when h3src starts, with a message that says how an
 * application opts in (uri-policy=all, from playbin's source-setup). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "gsth3videosrc-private.h"
#include "gsth3videosrc-uri.h"

/* The rows an element has (the tools' own rows are not properties). */
static const h3_param *
uri_row (const gchar * key)
{
  const h3_param *p = h3_param_find (NULL, key);

  if (!p)
    p = h3_param_find (gst_h3_settings_params (), key);
  return p && !(p->flags & H3_PARAM_TOOLS) ? p : NULL;
}

/* "prompt, seed, ..." of the rows whose CONTENT flag is `content`. */
static gchar *
uri_key_list (gboolean content)
{
  GString *s = g_string_new (NULL);
  const h3_param *tables[] = { h3_params (), gst_h3_settings_params () };

  for (guint t = 0; t < G_N_ELEMENTS (tables); t++)
    for (const h3_param * p = tables[t]; p->name; p++)
      if (!(p->flags & H3_PARAM_TOOLS)
          && !!(p->flags & H3_PARAM_CONTENT) == !!content)
        g_string_append_printf (s, "%s%s", s->len ? ", " : "", p->name);
  return g_string_free (s, FALSE);
}

static gboolean
uri_fail (GError ** error, const gchar * format, ...) G_GNUC_PRINTF (2, 3);

static gboolean
uri_fail (GError ** error, const gchar * format, ...)
{
  va_list ap;
  gchar *text;

  va_start (ap, format);
  text = g_strdup_vprintf (format, ap);
  va_end (ap);
  g_set_error (error, GST_URI_ERROR, GST_URI_ERROR_BAD_URI, "h3: URI: %s",
      text);
  g_free (text);
  return FALSE;
}

/* A percent-decoded part of the URI; NULL (and an error) for an escaped
 * NUL or a bad escape. */
static gchar *
uri_unescape (const gchar * start, const gchar * end, const gchar * what,
    GError ** error)
{
  gchar *text = g_uri_unescape_segment (start, end, NULL);

  if (!text) {
    gchar *raw = g_strndup (start, end - start);
    uri_fail (error, "%s '%s' has a bad escape or an escaped NUL", what, raw);
    g_free (raw);
  }
  return text;
}

/* The URI split into its settings, in order: keys[i] = values[i]. The
 * path, when given, is the prompt. */
static gboolean
uri_split (const gchar * uri, GPtrArray * keys, GPtrArray * values,
    GError ** error)
{
  const gchar *colon = strchr (uri, ':'), *p, *query, *end;

  if (!colon || colon - uri != 2 || g_ascii_strncasecmp (uri, "h3", 2) != 0)
    return uri_fail (error, "'%s' is not an h3: URI "
        "(h3:?prompt=a%%20red%%20fox&width=256...)", uri);
  p = colon + 1;
  if (g_str_has_prefix (p, "//")) {
    const gchar *host = p + 2, *host_end = host + strcspn (host, "/?#");
    if (host_end > host) {
      gchar *h = g_strndup (host, host_end - host);
      uri_fail (error, "a host ('%s') means nothing to h3: write "
          "h3:?prompt=... or h3:PROMPT?...", h);
      g_free (h);
      return FALSE;
    }
    p = host_end;
  }
  if (strchr (p, '#'))
    return uri_fail (error, "a fragment ('%s') means nothing to h3:",
        strchr (p, '#'));
  query = strchr (p, '?');
  end = query ? query : p + strlen (p);
  if (*p == '/')
    p++;
  if (end > p) {
    gchar *prompt = uri_unescape (p, end, "the path", error);
    if (!prompt)
      return FALSE;
    g_ptr_array_add (keys, g_strdup ("prompt"));
    g_ptr_array_add (values, prompt);
  }
  for (p = query ? query + 1 : end; query && *p;) {
    const gchar *item_end = p + strcspn (p, "&"), *eq = memchr (p, '=',
        item_end - p);
    gchar *key, *value;

    if (item_end == p) {
      p++;
      continue;
    }
    key = uri_unescape (p, eq ? eq : item_end, "a key", error);
    if (!key)
      return FALSE;
    g_ptr_array_add (keys, key);
    if (!eq)
      return uri_fail (error, "'%s' needs a value (%s=...)", key, key);
    value = uri_unescape (eq + 1, item_end, key, error);
    if (!value)
      return FALSE;
    g_ptr_array_add (values, value);
    p = *item_end ? item_end + 1 : item_end;
  }
  for (guint i = 0; i < keys->len; i++)
    for (guint j = 0; j < i; j++)
      if (g_str_equal (keys->pdata[i], keys->pdata[j]))
        return uri_fail (error, "'%s' is given twice%s",
            (gchar *) keys->pdata[i], g_str_equal (keys->pdata[i], "prompt")
            ? " (the path is the prompt)" : "");
  return TRUE;
}

/* The URI's settings, each parsed by its row into `scratch` and kept as a
 * GValue of its property's type, in pspecs/gvalues. */
static gboolean
uri_parse (GObjectClass * klass, const gchar * uri, GPtrArray * pspecs,
    GArray * gvalues, GstH3Settings * scratch, GError ** error)
{
  GPtrArray *keys = g_ptr_array_new_with_free_func (g_free);
  GPtrArray *values = g_ptr_array_new_with_free_func (g_free);
  gboolean ok = uri_split (uri, keys, values, error);

  for (guint i = 0; ok && i < values->len; i++) {
    const gchar *key = keys->pdata[i];
    const h3_param *row = uri_row (key);
    GParamSpec *pspec = row ? g_object_class_find_property (klass, key) : NULL;
    GValue v = G_VALUE_INIT;
    h3_status st = { 0 };

    if (!pspec) {
      gchar *content = uri_key_list (TRUE), *other = uri_key_list (FALSE);
      ok = uri_fail (error, "unknown key '%s' (the keys are %s; with h3src's "
          "uri-policy=all also %s)", key, content, other);
      g_free (content);
      g_free (other);
      break;
    }
    if (h3_param_parse (row, values->pdata[i], 0,
            gst_h3_settings_home (scratch, row), &st) != H3_OK) {
      ok = uri_fail (error, "%s", st.message);
      break;
    }
    g_value_init (&v, pspec->value_type);
    gst_h3_settings_get_value (scratch, row, &v);
    /* a list row's value is parse's block: the GValue holds a copy */
    h3_param_free_value (row, gst_h3_settings_home (scratch, row));
    g_ptr_array_add (pspecs, pspec);
    g_array_append_val (gvalues, v);
  }
  g_ptr_array_unref (keys);
  g_ptr_array_unref (values);
  return ok;
}

/* Sets the properties of an h3videosrc (obj) from a URI; a bad URI
 * changes nothing. The policy is h3src's, applied when it starts
 * (gst_h3_uri_check_policy). */
gboolean
gst_h3_uri_to_properties (GObject * obj, const gchar * uri, GError ** error)
{
  GObjectClass *klass = G_OBJECT_GET_CLASS (obj);
  GPtrArray *pspecs = g_ptr_array_new ();
  GArray *gvalues = g_array_new (FALSE, TRUE, sizeof (GValue));
  GstH3Settings scratch;
  gboolean ok;

  g_array_set_clear_func (gvalues, (GDestroyNotify) g_value_unset);
  /* owns nothing: the parsed strings point into the URI's pieces, and
   * each value is copied into its GValue at once */
  memset (&scratch, 0, sizeof scratch);
  ok = uri_parse (klass, uri, pspecs, gvalues, &scratch, error);
  if (ok) {
    guint n;
    GParamSpec **all = g_object_class_list_properties (klass, &n);

    g_object_freeze_notify (obj);
    for (guint i = 0; i < n; i++) {
      GValue v = G_VALUE_INIT;

      if (!uri_row (all[i]->name) || !(all[i]->flags & G_PARAM_WRITABLE))
        continue;
      g_value_init (&v, all[i]->value_type);
      g_param_value_set_default (all[i], &v);
      g_object_set_property (obj, all[i]->name, &v);
      g_value_unset (&v);
    }
    g_free (all);
    for (guint i = 0; i < pspecs->len; i++)
      g_object_set_property (obj, ((GParamSpec *) pspecs->pdata[i])->name,
          &g_array_index (gvalues, GValue, i));
    g_object_thaw_notify (obj);
    GST_INFO_OBJECT (obj, "URI %s", uri);
  }
  g_ptr_array_unref (pspecs);
  g_array_unref (gvalues);
  return ok;
}

/* What uri-policy=content refuses in `uri` (already accepted by
 * gst_h3_uri_to_properties): a newly allocated sentence, or NULL. */
gchar *
gst_h3_uri_check_policy (const gchar * uri)
{
  GPtrArray *keys = g_ptr_array_new_with_free_func (g_free);
  GPtrArray *values = g_ptr_array_new_with_free_func (g_free);
  GString *refused = g_string_new (NULL);
  gchar *why = NULL;
  h3_request r = h3_request_default ();

  if (!uri_split (uri, keys, values, NULL)) {
    why = g_strdup ("the URI does not parse");
    goto done;
  }
  for (guint i = 0; i < keys->len; i++) {
    const h3_param *row = uri_row (keys->pdata[i]);

    if (!row)
      continue;
    if (!(row->flags & H3_PARAM_CONTENT))
      g_string_append_printf (refused, "%s%s", refused->len ? ", " : "",
          row->name);
    else if (row->home == H3_PARAM_IN_REQUEST)
      h3_param_parse (row, values->pdata[i], 0, &r, NULL);
  }
  if (refused->len) {
    why = g_strdup_printf ("%s: an h3: URI may carry only the clip's "
        "content by default, not paths, devices, memory or engine "
        "settings; an application that trusts the URI sets h3src's "
        "uri-policy=all (from playbin's or uridecodebin's source-setup "
        "signal)", refused->str);
  } else {
    /* the prompt may be missing here (the element's own is then used):
     * the bounds are about the work asked for */
    h3_status st = { 0 };
    if (!r.prompt)
      r.prompt = "-";
    if (h3_request_check_untrusted (&r, &st) != H3_OK)
      why = g_strdup_printf ("%s; an application that trusts the URI sets "
          "h3src's uri-policy=all", st.message);
  }
done:
  g_string_free (refused, TRUE);
  g_ptr_array_unref (keys);
  g_ptr_array_unref (values);
  return why;
}

/* The URI of what an h3videosrc (obj) is set to generate. */
gchar *
gst_h3_uri_from_properties (GObject * obj)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (obj);
  GString *uri = g_string_new ("h3:");
  const h3_param *tables[] = { h3_params (), gst_h3_settings_params () };
  gchar sep = '?';

  GST_OBJECT_LOCK (self);
  for (guint t = 0; t < G_N_ELEMENTS (tables); t++)
    for (const h3_param * p = tables[t]; p->name; p++) {
      gpointer home = gst_h3_settings_home (&self->settings, p);
      gchar *text, *escaped;

      if ((p->flags & H3_PARAM_TOOLS) || h3_param_is_default (p, home))
        continue;
      text = h3_param_format (p, home);
      escaped = g_uri_escape_string (text ? text : "", NULL, FALSE);
      g_string_append_printf (uri, "%c%s=%s", sep, p->name, escaped);
      sep = '&';
      g_free (escaped);
      free (text);
    }
  GST_OBJECT_UNLOCK (self);
  return g_string_free (uri, FALSE);
}
