/* gsth3videosrc-settings.c - the values of h3videosrc's properties: the
 * properties themselves, built from the request schema (h3.h's h3_params,
 * and this file's rows for the element's own settings), their defaults,
 * the snapshot a run takes, what they mean to the engine (model directory,
 * engine key, h3_request) and the checks that fail a bad setting at the
 * state change, before any model load. The rules themselves are h3core's
 * (h3_request_check, h3_engine_options_check): the element applies them
 * and reports the engine's words. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "gsth3videosrc-private.h"
#include "gsth3videosrc-messages.h"

/* The public enums of gsth3videosrc.h are h3core's values by another name. */
G_STATIC_ASSERT ((int) GST_H3_BACKEND_VSA == (int) H3_ATTENTION_VSA);
G_STATIC_ASSERT ((int) GST_H3_COMPUTE_CUDA == (int) H3_COMPUTE_CUDA);
G_STATIC_ASSERT ((int) GST_H3_LOAD_FORMAT_DUMMY == (int) H3_LOAD_DUMMY);
G_STATIC_ASSERT ((int) GST_H3_DUMMY_ADAPTER_VSA == (int) H3_DUMMY_ADAPTER_VSA);
G_STATIC_ASSERT ((int) GST_H3_PRECISION_FP8 == (int) H3_PRECISION_FP8);
G_STATIC_ASSERT ((int) GST_H3_MEMORY_STREAM == (int) H3_MEMORY_STREAM);

#define EL(field) H3_PARAM_IN_FRONTEND, G_STRUCT_OFFSET (GstH3Settings, field)

/* 2 GiB: a 15 s clip at 1280x736 (362 frames of 2.8 MB, with its audio)
 * is about 1 GiB. */
#define KEEP_CLIP_MAX_BYTES_DEFAULT 2147483648.0

/* The element's own settings, in the schema's form. */
static const h3_param element_params[] = {
  {.name = "engine-cache",.title = "Engine cache",.doc =
        "Share the loaded model with the other elements of the process "
        "that have the same model settings",.type = H3_PARAM_BOOL,
        EL (engine_cache),.number_default = 1},
  {.name = "keep-clip",.title = "Keep clip",.doc =
        "Keep the clip in memory for seeks and replays (up to "
        "keep-clip-max-bytes)",.type = H3_PARAM_BOOL, EL (keep_clip),
      .number_default = 1},
  {.name = "keep-clip-max-bytes",.title = "Keep clip max bytes",.doc =
        "Largest clip (frames + audio, bytes) that keep-clip keeps",.type =
        H3_PARAM_UINT64, EL (keep_clip_max_bytes),.min = 0,.umax =
        G_MAXUINT64,.number_default = KEEP_CLIP_MAX_BYTES_DEFAULT},
  {.name = "is-live",.title = "Is live",.doc =
        "Live source: running-time timestamps, latency, queue-prompt "
        "appends clips",.type = H3_PARAM_BOOL, EL (is_live)},
  {.name = "latency",.title = "Latency",.doc =
        "With is-live: the latency to report in ns (the generation time "
        "to expect), -1 = estimated from the last generation",.type =
        H3_PARAM_INT64, EL (latency),.min = -1,.umax = G_MAXINT64,
      .number_default = -1},
  {.name = "image-location",.title = "Image location",.doc =
        "FL2VA: picture file (PNG, JPEG) the clip starts on; unsets image",
      .type = H3_PARAM_STRING, EL (image_location),.flags = H3_PARAM_PATH},
  {.name = "last-image-location",.title = "Last image location",.doc =
        "FL2VA: picture file (PNG, JPEG) the clip ends on; unsets "
        "last-image",.type = H3_PARAM_STRING, EL (last_image_location),
      .flags = H3_PARAM_PATH},
  {.name = NULL}
};

const h3_param *
gst_h3_settings_params (void)
{
  return element_params;
}

/* The properties' rows, by id - first_id: every row of h3_params an
 * element has (not the tools' own), then the element's. */
static const h3_param *property_rows[64];
static guint property_first_id, property_count;

gpointer
gst_h3_settings_home (GstH3Settings * s, const h3_param * row)
{
  switch (row->home) {
    case H3_PARAM_IN_REQUEST:
      return &s->request;
    case H3_PARAM_IN_OPTIONS:
      return &s->options;
    default:
      return s;
  }
}

const h3_param *
gst_h3_settings_row (guint prop_id)
{
  if (prop_id < property_first_id
      || prop_id - property_first_id >= property_count)
    return NULL;
  return property_rows[prop_id - property_first_id];
}

/* Every row of both tables that has a field in GstH3Settings. */
#define FOR_EACH_ROW(p) \
  for (const h3_param * const *_t = (const h3_param * const[]) { \
        h3_params (), element_params, NULL}; *_t; _t++) \
    for (const h3_param * p = *_t; p->name; p++) \
      if (!(p->flags & H3_PARAM_TOOLS))

void
gst_h3_settings_init (GstH3Settings * s)
{
  memset (s, 0, sizeof *s);
  FOR_EACH_ROW (p) {
    gpointer home = gst_h3_settings_home (s, p);
    h3_param_set_default (p, home);
    if (p->type == H3_PARAM_STRING) {
      gchar **f = h3_param_field (p, home);
      *f = g_strdup (*f);
    }
  }
}

void
gst_h3_settings_clear (GstH3Settings * s)
{
  FOR_EACH_ROW (p) {
    gpointer f = h3_param_field (p, gst_h3_settings_home (s, p));

    /* STRV rows hold a GStrv of the element's own (never h3_param_parse's) */
    if (p->type == H3_PARAM_STRING)
      g_free (*(gchar **) f);
    else if (p->type == H3_PARAM_STRV)
      g_strfreev (*(gchar ***) f);
  }
  if (s->image)
    gst_sample_unref (s->image);
  if (s->last_image)
    gst_sample_unref (s->last_image);
  memset (s, 0, sizeof *s);
}

void
gst_h3_settings_copy (GstH3Settings * dst, const GstH3Settings * src)
{
  gst_h3_settings_clear (dst);
  *dst = *src;
  FOR_EACH_ROW (p) {
    gpointer f = h3_param_field (p, gst_h3_settings_home (dst, p));

    if (p->type == H3_PARAM_STRING)
      *(gchar **) f = g_strdup (*(gchar **) f);
    else if (p->type == H3_PARAM_STRV)
      *(gchar ***) f = g_strdupv (*(gchar ***) f);
  }
  dst->image = src->image ? gst_sample_ref (src->image) : NULL;
  dst->last_image = src->last_image ? gst_sample_ref (src->last_image) : NULL;
}

/* "dummy-adapter" -> "GstH3DummyAdapter". */
static gchar *
enum_type_name (const h3_param * row)
{
  GString *name = g_string_new ("GstH3");
  gboolean up = TRUE;

  for (const gchar * c = row->name; *c; c++) {
    if (*c == '-') {
      up = TRUE;
      continue;
    }
    g_string_append_c (name, up ? g_ascii_toupper (*c) : *c);
    up = FALSE;
  }
  return g_string_free (name, FALSE);
}

/* The GEnum of an ENUM row: its choices, without the tools' own. */
GType
gst_h3_settings_enum_type (const gchar * row_name)
{
  static GMutex mutex;
  static GHashTable *types;
  const h3_param *row = h3_param_find (NULL, row_name);
  gchar *name;
  GType type;

  g_return_val_if_fail (row && row->type == H3_PARAM_ENUM, G_TYPE_INVALID);
  name = enum_type_name (row);
  g_mutex_lock (&mutex);
  if (!types)
    types = g_hash_table_new (g_str_hash, g_str_equal);
  type = GPOINTER_TO_SIZE (g_hash_table_lookup (types, name));
  if (!type) {
    guint n = 0;
    /* registered once for the process: the values live as long */
    GEnumValue *values = g_new0 (GEnumValue, 16);

    for (const h3_param_choice * c = row->choices; c->nick && n < 15; c++)
      if (!(c->flags & H3_PARAM_TOOLS))
        values[n++] = (GEnumValue) {
        c->value, c->doc, c->nick};
    type = g_enum_register_static (name, values);
    g_hash_table_insert (types, g_strdup (name), GSIZE_TO_POINTER (type));
  }
  g_mutex_unlock (&mutex);
  g_free (name);
  return type;
}

static GParamSpec *
row_pspec (const h3_param * p)
{
  GParamFlags flags = G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
      GST_PARAM_MUTABLE_READY;
  gdouble def = p->number_default;

  if (p->flags & H3_PARAM_RUNTIME_DEFAULT)
    flags |= GST_PARAM_DOC_SHOW_DEFAULT;
  if (p->flags & H3_PARAM_MUTABLE_PLAYING)
    flags |= GST_PARAM_MUTABLE_PLAYING;
  switch (p->type) {
    case H3_PARAM_STRING:
      return g_param_spec_string (p->name, p->title, p->doc,
          p->string_default, flags);
    case H3_PARAM_BOOL:
      return g_param_spec_boolean (p->name, p->title, p->doc, def != 0,
          flags);
    case H3_PARAM_INT:
      return g_param_spec_int (p->name, p->title, p->doc, (gint) p->min,
          (gint) p->umax, (gint) def, flags);
    case H3_PARAM_UINT:
      return g_param_spec_uint (p->name, p->title, p->doc, (guint) p->min,
          (guint) p->umax, (guint) def, flags);
    case H3_PARAM_INT64:
      return g_param_spec_int64 (p->name, p->title, p->doc, p->min,
          (gint64) p->umax, (gint64) def, flags);
    case H3_PARAM_UINT64:
    case H3_PARAM_BYTES:
      return g_param_spec_uint64 (p->name, p->title, p->doc,
          (guint64) p->min, p->umax, (guint64) def, flags);
    case H3_PARAM_FLOAT:
      return g_param_spec_double (p->name, p->title, p->doc, p->real_min,
          p->real_max, def, flags);
    case H3_PARAM_ENUM:
      return g_param_spec_enum (p->name, p->title, p->doc,
          gst_h3_settings_enum_type (p->name), (gint) def, flags);
    case H3_PARAM_STRV:
      return g_param_spec_boxed (p->name, p->title, p->doc, G_TYPE_STRV,
          flags);
  }
  return NULL;
}

void
gst_h3_settings_install_properties (GObjectClass * klass, guint first_id)
{
  property_first_id = first_id;
  property_count = 0;
  FOR_EACH_ROW (p) {
    g_assert (property_count < G_N_ELEMENTS (property_rows));
    property_rows[property_count] = p;
    g_object_class_install_property (klass, first_id + property_count,
        row_pspec (p));
    property_count++;
  }
}

void
gst_h3_settings_get_value (GstH3Settings * s, const h3_param * p,
    GValue * value)
{
  gpointer f = h3_param_field (p, gst_h3_settings_home (s, p));

  switch (p->type) {
    case H3_PARAM_STRING:
      /* model-location reads back the embedded model's folder when unset */
      if (p->flags & H3_PARAM_RUNTIME_DEFAULT)
        g_value_set_string (value, gst_h3_settings_model_dir (s));
      else
        g_value_set_string (value, *(gchar **) f);
      break;
    case H3_PARAM_BOOL:
      g_value_set_boolean (value, *(gint *) f);
      break;
    case H3_PARAM_INT:
      g_value_set_int (value, *(gint *) f);
      break;
    case H3_PARAM_UINT:
      g_value_set_uint (value, (guint) * (gint *) f);
      break;
    case H3_PARAM_INT64:
      g_value_set_int64 (value, *(gint64 *) f);
      break;
    case H3_PARAM_UINT64:
    case H3_PARAM_BYTES:
      g_value_set_uint64 (value, *(guint64 *) f);
      break;
    case H3_PARAM_FLOAT:
      g_value_set_double (value, *(gfloat *) f);
      break;
    case H3_PARAM_ENUM:
      g_value_set_enum (value, *(gint *) f);
      break;
    case H3_PARAM_STRV:
      g_value_set_boxed (value, *(gchar ***) f);
      break;
  }
}

void
gst_h3_settings_set_value (GstH3Settings * s, const h3_param * p,
    const GValue * value)
{
  gpointer f = h3_param_field (p, gst_h3_settings_home (s, p));

  switch (p->type) {
    case H3_PARAM_STRING:
      g_free (*(gchar **) f);
      *(gchar **) f = g_value_dup_string (value);
      /* unset means the default (devices: "auto") */
      if (!*(gchar **) f)
        *(gchar **) f = g_strdup (p->string_default);
      break;
    case H3_PARAM_BOOL:
      *(gint *) f = g_value_get_boolean (value) ? 1 : 0;
      break;
    case H3_PARAM_INT:
      *(gint *) f = g_value_get_int (value);
      break;
    case H3_PARAM_UINT:
      *(gint *) f = (gint) g_value_get_uint (value);
      break;
    case H3_PARAM_INT64:
      *(gint64 *) f = g_value_get_int64 (value);
      break;
    case H3_PARAM_UINT64:
    case H3_PARAM_BYTES:
      *(guint64 *) f = g_value_get_uint64 (value);
      break;
    case H3_PARAM_FLOAT:
      *(gfloat *) f = (gfloat) g_value_get_double (value);
      break;
    case H3_PARAM_ENUM:
      *(gint *) f = g_value_get_enum (value);
      break;
    case H3_PARAM_STRV:{
      gchar **v = g_value_dup_boxed (value);

      g_strfreev (*(gchar ***) f);
      /* an empty list is the default, no list */
      if (v && !v[0]) {
        g_strfreev (v);
        v = NULL;
      }
      *(gchar ***) f = v;
      break;
    }
  }
}

const gchar *
gst_h3_settings_model_dir (const GstH3Settings * s)
{
  const gchar *dir = s->options.model_dir;

  return dir && *dir ? dir : h3_default_model_dir ();
}

/* The lora row's paths without their strengths, in the row's list form:
 * an engine's LoRA files are part of what it is, their strengths are
 * changed on it between clips (h3_engine_set_loras). */
static gchar *
lora_paths (const h3_param * p, const h3_engine_options * opt)
{
  GPtrArray *paths = g_ptr_array_new_with_free_func (free);
  h3_engine_options list = { 0 };
  gchar *text;

  for (const char *const *it = opt->loras; it && *it; it++) {
    char *path = NULL;

    /* a bad item fails the settings check; here it stands as it is */
    if (h3_lora_spec_parse (*it, &path, NULL, NULL) != H3_OK)
      path = strdup (*it);
    g_ptr_array_add (paths, path);
  }
  g_ptr_array_add (paths, NULL);
  list.loras = (const char *const *) paths->pdata;
  text = h3_param_format (p, &list);
  g_ptr_array_unref (paths);
  return text;
}

/* The engine options' rows as text, one line each, in table order: what
 * defines an engine (elements with the same key share one unless
 * engine-cache=false; `for_key`: the LoRAs by their paths alone) and part
 * of a stream's identity (with the strengths). */
static void
append_options (GString * out, const GstH3Settings * s, gboolean for_key)
{
  h3_engine_options opt;

  gst_h3_settings_engine_options (s, &opt);
  for (const h3_param * p = h3_params (); p->name; p++) {
    gchar *text;

    if (p->home != H3_PARAM_IN_OPTIONS || (p->flags & H3_PARAM_TOOLS))
      continue;
    if (for_key && p->offset == G_STRUCT_OFFSET (h3_engine_options, loras))
      text = lora_paths (p, &opt);
    else
      text = h3_param_format (p, &opt);
    g_string_append_printf (out, "%s=%s\n", p->name, text ? text : "");
    free (text);
  }
}

gchar *
gst_h3_settings_engine_key (const GstH3Settings * s)
{
  GString *key = g_string_new (NULL);

  append_options (key, s, TRUE);
  return g_string_free (key, FALSE);
}

/* What a generation's time depends on besides the engine: the live
 * latency estimate reuses a measurement only for the same shape. */
gchar *
gst_h3_settings_shape (const GstH3Settings * s)
{
  const h3_request *r = &s->request;
  gboolean first = (s->image_location && *s->image_location) || s->image;
  gboolean last = (s->last_image_location && *s->last_image_location)
      || s->last_image;

  return g_strdup_printf ("%dx%d %d frames %d steps backend %d %g "
      "keyframes %d%d", r->width, r->height, h3_align_frames (r->num_frames),
      r->steps, (int) r->attention, (double) r->vsa_sparsity, first, last);
}

/* Stream ids must be deterministic (the same request gives the same ids)
 * and distinct per pad: a hash of everything that defines the clip (every
 * request row and the engine's options), the keyframes by their pixels'
 * digests (NULL keyframes: none), so the same picture gives the same id
 * whether it came from a file or a sample. */
gchar *
gst_h3_settings_stream_id (const GstH3Settings * s,
    const GstH3Keyframe * keyframes, const gchar * pad_name)
{
  GString *desc = g_string_new (NULL);
  gchar *hash, *id;
  h3_request r = gst_h3_settings_request (s);
  gboolean first = keyframes && keyframes[0].present;
  gboolean last = keyframes && keyframes[1].present;

  r.num_frames = h3_align_frames (r.num_frames);
  for (const h3_param * p = h3_params (); p->name; p++) {
    gchar *text;

    if (p->home != H3_PARAM_IN_REQUEST)
      continue;
    text = h3_param_format (p, &r);
    g_string_append_printf (desc, "%s=%s\n", p->name, text ? text : "");
    free (text);
  }
  append_options (desc, s, FALSE);
  g_string_append_printf (desc, "first %s\nlast %s\n",
      first ? keyframes[0].digest : "-", last ? keyframes[1].digest : "-");
  hash = g_compute_checksum_for_string (G_CHECKSUM_SHA256, desc->str, -1);
  id = g_strdup_printf ("h3videosrc/%.16s/%s", hash, pad_name);
  g_free (hash);
  g_string_free (desc, TRUE);
  return id;
}

/* The engine options of the model settings (without the log sink, which
 * the engine cache sets). The strings point into s. */
void
gst_h3_settings_engine_options (const GstH3Settings * s,
    h3_engine_options * opt)
{
  *opt = s->options;
  opt->model_dir = gst_h3_settings_model_dir (s);
  if (opt->adapter_path && !*opt->adapter_path)
    opt->adapter_path = NULL;
  opt->log = NULL;
  opt->log_opaque = NULL;
}

/* The request of the settings, without keyframes (gst_h3_keyframes_apply
 * adds a run's). The prompt points into s. */
h3_request
gst_h3_settings_request (const GstH3Settings * s)
{
  h3_request r = s->request;

  r.first_image = r.last_image = NULL;
  return r;
}

/* Checks everything that needs no weight, so that bad settings fail the
 * state change at once instead of after a model load: h3core's rules of a
 * request and of a device list, that the files exist, then
 * h3_engine_preflight (the model's layout and audio rate, compute and
 * devices against this build and machine, backend and steps against the
 * adapter's kind). pf receives the preflight's facts. The engine stays the
 * authority (h3_engine_validate also knows the loaded model). */
gboolean
gst_h3_settings_check (GstH3VideoSrc * self, const GstH3Settings * s,
    const GstH3Keyframe * keyframes, h3_preflight * pf)
{
  h3_request req = gst_h3_settings_request (s);
  h3_engine_options opt;
  h3_status st;
  const gchar *dir;

  gst_h3_keyframes_apply (keyframes, &req);
  gst_h3_settings_engine_options (s, &opt);
  memset (&st, 0, sizeof st);
  if (h3_request_check (&req, &st) != H3_OK
      || h3_engine_options_check (&opt, &st) != H3_OK) {
    gst_h3_video_src_post_settings_error (self, &st);
    return FALSE;
  }
  dir = gst_h3_settings_model_dir (s);
  if (!g_file_test (dir, G_FILE_TEST_IS_DIR)) {
    if (s->options.model_dir && *s->options.model_dir)
      GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND,
          ("Model not found: '%s' is not a directory. Set model-location to "
              "a MiniMax-H3 download (diffusers layout, or its FL2VA folder), "
              "or leave it unset to use the embedded tiny model.", dir),
          ("model-location '%s' does not exist", dir));
    else
      GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND,
          ("The embedded tiny model is missing from '%s': reinstall gst-h3 "
              "or set model-location to a MiniMax-H3 download.", dir),
          ("default model dir '%s' does not exist", dir));
    return FALSE;
  }
  if (opt.adapter_path
      && !g_file_test (opt.adapter_path, G_FILE_TEST_EXISTS)) {
    GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND,
        ("Adapter not found: '%s' does not exist. Set adapter-location to a "
            "FastH3 .safetensors file or leave it unset.",
            opt.adapter_path), ("adapter-location '%s' does not exist",
            opt.adapter_path));
    return FALSE;
  }
  for (const char *const *it = opt.loras; it && *it; it++) {
    char *path = NULL;

    /* the grammar passed h3_engine_options_check above */
    h3_lora_spec_parse (*it, &path, NULL, NULL);
    if (path && !g_file_test (path, G_FILE_TEST_IS_REGULAR)) {
      GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND,
          ("LoRA not found: '%s' is not a file. Fix or remove the item "
              "'%s' of the lora property.", path, *it),
          ("lora '%s' does not exist", path));
      free (path);
      return FALSE;
    }
    free (path);
  }
  if (h3_engine_preflight (&opt, &req, pf, &st) != H3_OK) {
    gst_h3_video_src_post_preflight_error (self, &st);
    return FALSE;
  }
  GST_DEBUG_OBJECT (self, "preflight: %d Hz audio, adapter %s", pf->sample_rate,
      pf->has_adapter ? (pf->adapter_vsa ? "vsa" : "dense") : "none");
  return TRUE;
}
