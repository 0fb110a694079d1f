/* h3_studio_api.c - h3-studio's requests and answers in the shape of the
 * peers' /v1/videos API (OpenAI's videos: create, retrieve, list,
 * content, delete; sglang's and vLLM-Omni's job stores).
 *
 * A create request's fields map onto the request schema (h3.h's
 * h3_params): every row an untrusted request may carry (H3_PARAM_CONTENT:
 * prompt, seed, width, height, num-frames, steps, backend, vsa-sparsity)
 * by its name, with `_` for `-` (num_frames), parsed by its row; and the
 * API's own fields: `model` (must name the served model), `size` ("WxH":
 * width and height) and `seconds` (the clip's length: num-frames at 24
 * fps). `input_reference` (a multipart file, PNG or JPEG) is the first
 * keyframe. Any other field is refused by name: paths, devices and memory
 * are the server's, never a request's. The request is then held to
 * h3_request_check_untrusted's bounds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h3_studio.h"

void
h3_job_spec_clear (H3JobSpec * spec)
{
  g_free ((gchar *) spec->request.prompt);
  if (spec->keyframe)
    g_bytes_unref (spec->keyframe);
  memset (spec, 0, sizeof *spec);
}

/* The schema row a field names, if a request may carry it. */
static const h3_param *
content_row (const gchar * field)
{
  gchar *name = g_strdelimit (g_strdup (field), "_", '-');
  const h3_param *p = h3_param_find (NULL, name);

  g_free (name);
  return p && (p->flags & H3_PARAM_CONTENT) && !(p->flags & H3_PARAM_TOOLS)
      && p->home == H3_PARAM_IN_REQUEST ? p : NULL;
}

static gboolean
fail (gchar ** param, gchar ** why, const gchar * field, gchar * message)
{
  *param = g_strdup (field);
  *why = message;
  return FALSE;
}

/* The fields a create request may have, for the unknown-field message. */
static gchar *
field_list (void)
{
  GString *s = g_string_new ("model, size, seconds, input_reference");

  for (const h3_param * p = h3_params (); p->name; p++)
    if (content_row (p->name)) {
      gchar *f = g_strdelimit (g_strdup (p->name), "-", '_');
      g_string_append_printf (s, ", %s", f);
      g_free (f);
    }
  return g_string_free (s, FALSE);
}

/* One field, as text, into spec. */
static gboolean
apply_field (H3JobSpec * spec, const gchar * field, const gchar * text,
    gboolean * have_size, gboolean * have_sides, gchar ** param, gchar ** why)
{
  const h3_param *row = content_row (field);
  h3_status st = { 0 };

  if (g_str_equal (field, "model")) {
    if (!g_str_equal (text, H3_STUDIO_MODEL))
      return fail (param, why, field, g_strdup_printf ("model '%s' is not "
              "served here: this server runs %s", text, H3_STUDIO_MODEL));
    return TRUE;
  }
  if (g_str_equal (field, "size")) {
    gint w, h;
    gchar tail;
    if (sscanf (text, "%dx%d%c", &w, &h, &tail) != 2 || w <= 0 || h <= 0)
      return fail (param, why, field, g_strdup_printf ("size '%s': expected "
              "WIDTHxHEIGHT, e.g. 1280x736", text));
    spec->request.width = w;
    spec->request.height = h;
    *have_size = TRUE;
  } else if (g_str_equal (field, "seconds")) {
    gchar *end;
    gdouble s = g_ascii_strtod (text, &end);
    if (!*text || *end || !(s > 0) || s > H3_MAX_FRAMES / (double) H3_FPS)
      return fail (param, why, field, g_strdup_printf ("seconds '%s': a "
              "length in (0, %.2f]", text, H3_MAX_FRAMES / (double) H3_FPS));
    spec->request.num_frames = MAX (1, (gint) lround (s * H3_FPS));
  } else if (row) {
    /* a string row keeps the pointer: the spec owns a copy */
    gboolean is_string = row->type == H3_PARAM_STRING;
    gchar **field_ptr = h3_param_field (row, &spec->request);
    gchar *old = is_string ? *field_ptr : NULL;
    gchar *owned = is_string ? g_strdup (text) : NULL;

    if (h3_param_parse (row, is_string ? owned : text, 0, &spec->request,
            &st) != H3_OK) {
      g_free (owned);
      return fail (param, why, field, g_strdup (st.message));
    }
    g_free (old);
    if (row->offset == G_STRUCT_OFFSET (h3_request, width)
        || row->offset == G_STRUCT_OFFSET (h3_request, height))
      *have_sides = TRUE;
  } else {
    gchar *fields = field_list ();
    gboolean r = fail (param, why, field,
        g_strdup_printf ("unknown field '%s' (the fields are %s)", field,
            fields));
    g_free (fields);
    return r;
  }
  if (*have_size && *have_sides)
    return fail (param, why, field, g_strdup ("give either size or "
            "width and height, not both"));
  return TRUE;
}

/* The whole request against the rules and the untrusted bounds. */
static gboolean
finish (H3JobSpec * spec, gchar ** param, gchar ** why)
{
  h3_status st = { 0 };

  if (!spec->request.prompt)
    return fail (param, why, "prompt", g_strdup ("prompt is required: "
            "describe the clip to generate"));
  if (h3_request_check_untrusted (&spec->request, &st) != H3_OK)
    return fail (param, why, NULL, g_strdup (st.message));
  return TRUE;
}

static void
spec_init (H3JobSpec * spec)
{
  memset (spec, 0, sizeof *spec);
  spec->request = h3_request_default ();
}

gboolean
h3_studio_spec_from_fields (GHashTable * fields, H3JobSpec * spec,
    gchar ** param, gchar ** why)
{
  GHashTableIter it;
  gpointer k, v;
  gboolean have_size = FALSE, have_sides = FALSE;

  spec_init (spec);
  g_hash_table_iter_init (&it, fields);
  while (g_hash_table_iter_next (&it, &k, &v))
    if (!apply_field (spec, k, v, &have_size, &have_sides, param, why)) {
      h3_job_spec_clear (spec);
      return FALSE;
    }
  if (!finish (spec, param, why)) {
    h3_job_spec_clear (spec);
    return FALSE;
  }
  return TRUE;
}

/* A JSON member as the text its row parses, refusing the wrong JSON type
 * (a string for a number, a number for a prompt, any object or array). */
static gchar *
member_text (const gchar * field, JsonNode * node, gchar ** why)
{
  const h3_param *row = content_row (field);
  gboolean numeric = row && row->type != H3_PARAM_STRING
      && row->type != H3_PARAM_ENUM;
  GType t = JSON_NODE_HOLDS_VALUE (node) ? json_node_get_value_type (node) :
      G_TYPE_INVALID;

  if (g_str_equal (field, "seconds") && t == G_TYPE_STRING)
    return g_strdup (json_node_get_string (node));      /* OpenAI's form: "4" */
  if (g_str_equal (field, "seconds"))
    numeric = TRUE;
  if (numeric && t == G_TYPE_INT64)
    return g_strdup_printf ("%" G_GINT64_FORMAT, json_node_get_int (node));
  if (numeric && t == G_TYPE_DOUBLE) {
    gchar buf[G_ASCII_DTOSTR_BUF_SIZE];
    return g_strdup (g_ascii_dtostr (buf, sizeof buf,
            json_node_get_double (node)));
  }
  if (!numeric && t == G_TYPE_STRING)
    return g_strdup (json_node_get_string (node));
  *why = g_strdup_printf ("%s: expected a %s", field,
      numeric ? "number" : "string");
  return NULL;
}

gboolean
h3_studio_spec_from_json (JsonNode * root, H3JobSpec * spec, gchar ** param,
    gchar ** why)
{
  JsonObject *o;
  GList *members;
  gboolean ok = TRUE, have_size = FALSE, have_sides = FALSE;

  spec_init (spec);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root))
    return fail (param, why, NULL, g_strdup ("the body must be a JSON "
            "object"));
  o = json_node_get_object (root);
  members = json_object_get_members (o);
  for (GList * m = members; ok && m; m = m->next) {
    const gchar *field = m->data;
    JsonNode *node = json_object_get_member (o, field);
    gchar *text;

    if (!content_row (field) && !g_str_equal (field, "model")
        && !g_str_equal (field, "size") && !g_str_equal (field, "seconds")) {
      ok = apply_field (spec, field, "", &have_size, &have_sides, param, why);
      break;
    }
    text = member_text (field, node, why);
    if (!text) {
      *param = g_strdup (field);
      ok = FALSE;
      break;
    }
    ok = apply_field (spec, field, text, &have_size, &have_sides, param, why);
    g_free (text);
  }
  g_list_free (members);
  if (ok)
    ok = finish (spec, param, why);
  if (!ok)
    h3_job_spec_clear (spec);
  return ok;
}

static const gchar *
status_name (H3JobStatus s)
{
  switch (s) {
    case H3_JOB_QUEUED:
      return "queued";
    case H3_JOB_IN_PROGRESS:
      return "in_progress";
    case H3_JOB_COMPLETED:
      return "completed";
    default:
      return "failed";
  }
}

JsonNode *
h3_studio_job_json (const H3Job * job)
{
  JsonBuilder *b = json_builder_new ();
  const h3_request *r = &job->spec.request;
  gint frames = h3_align_frames (r->num_frames);
  gchar *size = g_strdup_printf ("%dx%d", r->width, r->height);
  gchar *seconds = g_strdup_printf ("%.2f", frames / (double) H3_FPS);
  const h3_param *backend = h3_param_find (NULL, "backend");
  JsonNode *node;

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "id");
  json_builder_add_string_value (b, job->id);
  json_builder_set_member_name (b, "object");
  json_builder_add_string_value (b, "video");
  json_builder_set_member_name (b, "model");
  json_builder_add_string_value (b, H3_STUDIO_MODEL);
  json_builder_set_member_name (b, "status");
  json_builder_add_string_value (b, status_name (job->status));
  json_builder_set_member_name (b, "progress");
  json_builder_add_int_value (b, job->progress);
  json_builder_set_member_name (b, "created_at");
  json_builder_add_int_value (b, job->created_at);
  json_builder_set_member_name (b, "completed_at");
  if (job->completed_at)
    json_builder_add_int_value (b, job->completed_at);
  else
    json_builder_add_null_value (b);
  json_builder_set_member_name (b, "expires_at");
  json_builder_add_null_value (b);
  json_builder_set_member_name (b, "prompt");
  json_builder_add_string_value (b, r->prompt);
  json_builder_set_member_name (b, "size");
  json_builder_add_string_value (b, size);
  json_builder_set_member_name (b, "seconds");
  json_builder_add_string_value (b, seconds);
  json_builder_set_member_name (b, "remixed_from_video_id");
  json_builder_add_null_value (b);
  /* what the clip is, beyond the peers' fields */
  json_builder_set_member_name (b, "num_frames");
  json_builder_add_int_value (b, frames);
  json_builder_set_member_name (b, "seed");
  json_builder_add_int_value (b, (gint64) r->seed);
  json_builder_set_member_name (b, "steps");
  json_builder_add_int_value (b, r->steps);
  json_builder_set_member_name (b, "backend");
  json_builder_add_string_value (b,
      h3_param_choice_by_value (backend, r->attention)->nick);
  json_builder_set_member_name (b, "keyframe");
  json_builder_add_boolean_value (b, job->spec.keyframe != NULL);
  json_builder_set_member_name (b, "error");
  if (job->status == H3_JOB_FAILED) {
    json_builder_begin_object (b);
    json_builder_set_member_name (b, "code");
    json_builder_add_string_value (b, job->error_code);
    json_builder_set_member_name (b, "message");
    json_builder_add_string_value (b, job->error_message);
    json_builder_end_object (b);
  } else {
    json_builder_add_null_value (b);
  }
  json_builder_end_object (b);
  node = json_builder_get_root (b);
  g_object_unref (b);
  g_free (size);
  g_free (seconds);
  return node;
}

gchar *
h3_studio_error_json (const gchar * message, const gchar * type,
    const gchar * param, const gchar * code)
{
  JsonBuilder *b = json_builder_new ();
  JsonNode *root;
  gchar *text;

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "error");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "message");
  json_builder_add_string_value (b, message);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, type);
  json_builder_set_member_name (b, "param");
  if (param)
    json_builder_add_string_value (b, param);
  else
    json_builder_add_null_value (b);
  json_builder_set_member_name (b, "code");
  if (code)
    json_builder_add_string_value (b, code);
  else
    json_builder_add_null_value (b);
  json_builder_end_object (b);
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  text = json_to_string (root, FALSE);
  json_node_unref (root);
  g_object_unref (b);
  return text;
}
