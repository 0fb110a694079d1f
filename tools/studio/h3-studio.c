/* h3-studio - a page and a /v1/videos API over one shared engine.
 *
 *   h3-studio [--host ADDR] [--port N] [--model DIR] [--data DIR]
 *             [--max-queue N] [--max-storage MIB] [--max-upload MIB]
 *             [--element "PROP=VALUE ..."]
 *
 * One process, one pipeline, one engine (h3_studio_jobs.c): the page at /
 * (prompt, seed, size, frames, steps, backend, a keyframe upload; progress,
 * the MP4 played and offered for download, the job list with cancel and
 * delete) and a JSON API shaped like the peers' (docs/STUDIO.md):
 *
 *   POST   /v1/videos              create (JSON or multipart/form-data)
 *   GET    /v1/videos              list (limit, after, order)
 *   GET    /v1/videos/ID           retrieve
 *   GET    /v1/videos/ID/content   the MP4 (Range requests answered)
 *   POST   /v1/videos/ID/cancel    cancel
 *   DELETE /v1/videos/ID           delete (the file too)
 *
 * Safe by default: it listens on 127.0.0.1 unless --host says otherwise,
 * bodies are bounded (--max-upload, 413 past it), a request's fields are
 * the request schema's content rows within the untrusted bounds
 * (h3_studio_api.c), uploads are PNG or JPEG keyframes decoded in memory,
 * and files live under --data with names the studio makes. Errors are
 * JSON {"error": {"message", "type", "param", "code"}} with the status the
 * peers' clients expect (400, 404, 409, 413, 415, 429, 507). */
#include <glib-unix.h>
#include <gst/gst.h>
#include <libsoup/soup.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/h3_json.h"
#include "h3_image_file.h"
#include "h3_studio.h"

int h3_studio_page_file (int i, const char **name, const unsigned char **data,
    size_t * size);

typedef struct
{
  H3Studio *studio;
  guint64 max_upload;
} Server;

/* ---- answers ------------------------------------------------------------- */

static void
answer_json (SoupServerMessage * msg, guint status, gchar * text)
{
  soup_server_message_set_status (msg, status, NULL);
  soup_server_message_set_response (msg, "application/json", SOUP_MEMORY_TAKE,
      text, strlen (text));
}

static void
answer_error (SoupServerMessage * msg, guint status, const gchar * message,
    const gchar * param, const gchar * code)
{
  const gchar *type = status == 429 ? "rate_limit_error" :
      status == 404 ? "not_found_error" : status >= 500 && status != 507 ?
      "server_error" : "invalid_request_error";

  answer_json (msg, status, h3_studio_error_json (message, type, param, code));
}

static void
answer_job (Server * sv, SoupServerMessage * msg, guint status, H3Job * job)
{
  H3Job copy;
  JsonNode *node;

  h3_studio_snapshot (sv->studio, job, &copy);
  node = h3_studio_job_json (&copy);
  answer_json (msg, status, json_to_string (node, FALSE));
  json_node_unref (node);
  g_free (copy.error_code);
  g_free (copy.error_message);
}

/* ---- create -------------------------------------------------------------- */

/* multipart/form-data: text fields and at most one file, input_reference
 * (PNG or JPEG). */
static gboolean
spec_from_multipart (SoupServerMessage * msg, GBytes * body, H3JobSpec * spec,
    guint * status, gchar ** param, gchar ** why)
{
  SoupMultipart *mp = soup_multipart_new_from_message
      (soup_server_message_get_request_headers (msg), body);
  GHashTable *fields;
  GBytes *keyframe = NULL;
  gboolean ok = TRUE;

  if (!mp) {
    *status = 400;
    *why = g_strdup ("the multipart body does not parse");
    return FALSE;
  }
  fields = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  for (int i = 0; ok && i < soup_multipart_get_length (mp); i++) {
    SoupMessageHeaders *h;
    GBytes *part;
    gchar *disposition = NULL;
    GHashTable *params = NULL;
    const gchar *name, *filename;

    soup_multipart_get_part (mp, i, &h, &part);
    if (!soup_message_headers_get_content_disposition (h, &disposition,
            &params) || !(name = g_hash_table_lookup (params, "name"))) {
      *status = 400;
      *why = g_strdup ("a part has no Content-Disposition name");
      ok = FALSE;
    } else if ((filename = g_hash_table_lookup (params, "filename"))) {
      const gchar *type = soup_message_headers_get_content_type (h, NULL);
      if (!g_str_equal (name, "input_reference") || keyframe) {
        *status = 400;
        *param = g_strdup (name);
        *why = g_strdup_printf ("file '%s': the only upload is one "
            "input_reference (a PNG or JPEG keyframe)", name);
        ok = FALSE;
      } else if (type && !g_str_equal (type, "image/png")
          && !g_str_equal (type, "image/jpeg")
          && !g_str_equal (type, "application/octet-stream")) {
        *status = 415;
        *param = g_strdup (name);
        *why = g_strdup_printf ("input_reference is %s: upload a PNG or JPEG "
            "picture", type);
        ok = FALSE;
      } else {
        keyframe = g_bytes_ref (part);
      }
    } else if (g_hash_table_contains (fields, name)) {
      *status = 400;
      *param = g_strdup (name);
      *why = g_strdup_printf ("field '%s' is given twice", name);
      ok = FALSE;
    } else {
      gsize n;
      const gchar *data = g_bytes_get_data (part, &n);
      g_hash_table_insert (fields, g_strdup (name), g_strndup (data, n));
    }
    g_free (disposition);
    if (params)
      g_hash_table_destroy (params);
  }
  if (ok && !h3_studio_spec_from_fields (fields, spec, param, why)) {
    *status = 400;
    ok = FALSE;
  }
  if (ok && keyframe) {
    /* decoded now, so a bad picture is the request's error, not the job's */
    h3_image_file kf = { 0 };
    h3_status st = { 0 };
    gsize n;
    const guint8 *bytes = g_bytes_get_data (keyframe, &n);
    if (h3_image_file_decode (bytes, n, "input_reference", &kf, &st) != H3_OK) {
      *status = 400;
      *param = g_strdup ("input_reference");
      *why = g_strdup (st.message);
      h3_job_spec_clear (spec);
      ok = FALSE;
    }
    h3_image_file_clear (&kf);
  }
  if (ok)
    spec->keyframe = keyframe;
  else if (keyframe)
    g_bytes_unref (keyframe);
  g_hash_table_destroy (fields);
  soup_multipart_free (mp);
  return ok;
}

static void
create (Server * sv, SoupServerMessage * msg)
{
  SoupMessageHeaders *h = soup_server_message_get_request_headers (msg);
  const gchar *type = soup_message_headers_get_content_type (h, NULL);
  SoupMessageBody *body = soup_server_message_get_request_body (msg);
  GBytes *bytes = soup_message_body_flatten (body);
  H3JobSpec spec;
  gchar *param = NULL, *why = NULL;
  guint status = 400;
  gboolean ok;
  H3Job *job;

  if (type && g_str_equal (type, "multipart/form-data")) {
    ok = spec_from_multipart (msg, bytes, &spec, &status, &param, &why);
  } else if (!type || g_str_equal (type, "application/json")) {
    JsonParser *parser = NULL;
    h3_status st = { 0 };
    gsize n;
    const gchar *data = g_bytes_get_data (bytes, &n);
    ok = h3_json_parse (data, (gssize) n, "the request body", &parser,
        &st) == H3_OK;
    if (!ok)
      why = g_strdup (st.message);
    else
      ok = h3_studio_spec_from_json (json_parser_get_root (parser), &spec,
          &param, &why);
    if (parser)
      g_object_unref (parser);
  } else {
    status = 415;
    why = g_strdup_printf ("Content-Type %s: send application/json or "
        "multipart/form-data", type);
    ok = FALSE;
  }
  g_bytes_unref (bytes);
  if (!ok) {
    answer_error (msg, status, why, param, status == 415 ?
        "unsupported_media_type" : "invalid_value");
    g_free (why);
    g_free (param);
    return;
  }
  job = h3_studio_submit (sv->studio, &spec, &status, &why);
  if (!job) {
    answer_error (msg, status, why, NULL, status == 429 ? "queue_full" :
        "storage_full");
    h3_job_spec_clear (&spec);
    g_free (why);
    return;
  }
  answer_job (sv, msg, 200, job);
  h3_job_unref (job);
}

/* ---- the rest of the API ------------------------------------------------- */

static void
list (Server * sv, SoupServerMessage * msg, GHashTable * query)
{
  GPtrArray *all = h3_studio_list (sv->studio);
  const gchar *after = query ? g_hash_table_lookup (query, "after") : NULL;
  const gchar *order = query ? g_hash_table_lookup (query, "order") : NULL;
  const gchar *limit_text = query ? g_hash_table_lookup (query, "limit") :
      NULL;
  gint64 limit = 20;
  guint start = 0, end;
  JsonArray *data = json_array_new ();
  JsonObject *o = json_object_new ();
  JsonNode *root;

  if (limit_text && (!g_ascii_string_to_signed (limit_text, 10, 1, 100,
              &limit, NULL))) {
    answer_error (msg, 400, "limit: an integer in 1..100", "limit",
        "invalid_value");
    g_ptr_array_unref (all);
    json_array_unref (data);
    json_object_unref (o);
    return;
  }
  if (order && g_str_equal (order, "asc")) {
    for (guint i = 0; i < all->len / 2; i++) {
      gpointer t = all->pdata[i];
      all->pdata[i] = all->pdata[all->len - 1 - i];
      all->pdata[all->len - 1 - i] = t;
    }
  } else if (order && !g_str_equal (order, "desc")) {
    answer_error (msg, 400, "order: asc or desc", "order", "invalid_value");
    g_ptr_array_unref (all);
    json_array_unref (data);
    json_object_unref (o);
    return;
  }
  for (guint i = 0; after && i < all->len; i++)
    if (g_str_equal (((H3Job *) all->pdata[i])->id, after))
      start = i + 1;
  end = MIN (all->len, start + (guint) limit);
  for (guint i = start; i < end; i++) {
    H3Job copy;
    h3_studio_snapshot (sv->studio, all->pdata[i], &copy);
    json_array_add_element (data, h3_studio_job_json (&copy));
    g_free (copy.error_code);
    g_free (copy.error_message);
  }
  json_object_set_string_member (o, "object", "list");
  json_object_set_array_member (o, "data", data);
  if (end > start) {
    json_object_set_string_member (o, "first_id",
        ((H3Job *) all->pdata[start])->id);
    json_object_set_string_member (o, "last_id",
        ((H3Job *) all->pdata[end - 1])->id);
  } else {
    json_object_set_null_member (o, "first_id");
    json_object_set_null_member (o, "last_id");
  }
  json_object_set_boolean_member (o, "has_more", end < all->len);
  root = json_node_init_object (json_node_alloc (), o);
  answer_json (msg, 200, json_to_string (root, FALSE));
  json_node_unref (root);
  json_object_unref (o);
  g_ptr_array_unref (all);
}

/* The MP4, whole or the one range asked for (the page's <video> seeks). */
static void
content (Server * sv, SoupServerMessage * msg, H3Job * job)
{
  H3Job copy;
  gchar *data = NULL;
  gsize n = 0;
  SoupRange *ranges;
  int nranges;
  SoupMessageHeaders *req = soup_server_message_get_request_headers (msg);
  SoupMessageHeaders *resp = soup_server_message_get_response_headers (msg);

  h3_studio_snapshot (sv->studio, job, &copy);
  g_free (copy.error_code);
  g_free (copy.error_message);
  if (copy.status != H3_JOB_COMPLETED) {
    answer_error (msg, 409, "the video is not completed yet", NULL,
        "not_ready");
    return;
  }
  if (!g_file_get_contents (copy.path, &data, &n, NULL)) {
    answer_error (msg, 404, "the video's file is gone", NULL, "not_found");
    return;
  }
  soup_message_headers_replace (resp, "Accept-Ranges", "bytes");
  if (soup_message_headers_get_ranges (req, (goffset) n, &ranges, &nranges)) {
    if (nranges == 1) {
      goffset a = ranges[0].start, b = ranges[0].end;
      soup_message_headers_set_content_range (resp, a, b, (goffset) n);
      soup_server_message_set_status (msg, 206, NULL);
      soup_server_message_set_response (msg, "video/mp4", SOUP_MEMORY_COPY,
          data + a, (gsize) (b - a + 1));
      soup_message_headers_free_ranges (req, ranges);
      g_free (data);
      return;
    }
    soup_message_headers_free_ranges (req, ranges);
  }
  soup_message_headers_replace (resp, "Content-Disposition",
      "attachment; filename=\"h3-studio.mp4\"");
  soup_server_message_set_status (msg, 200, NULL);
  soup_server_message_set_response (msg, "video/mp4", SOUP_MEMORY_TAKE, data,
      n);
}

static void
videos (SoupServer * server, SoupServerMessage * msg, const char *path,
    GHashTable * query, gpointer data)
{
  Server *sv = data;
  const gchar *method = soup_server_message_get_method (msg);
  gchar **parts = g_strsplit (path + strlen ("/v1/videos"), "/", -1);
  guint n = g_strv_length (parts);
  H3Job *job = NULL;

  /* "" -> the collection; "", ID -> a video; "", ID, ACTION */
  if (n <= 1 || (n == 2 && !*parts[1])) {
    if (g_str_equal (method, "POST"))
      create (sv, msg);
    else if (g_str_equal (method, "GET"))
      list (sv, msg, query);
    else
      answer_error (msg, 405, "use GET or POST on /v1/videos", NULL,
          "method_not_allowed");
  } else if (n > 3 || !(job = h3_studio_lookup (sv->studio, parts[1]))) {
    answer_error (msg, 404, "no such video", NULL, "not_found");
  } else if (n == 2 && g_str_equal (method, "GET")) {
    answer_job (sv, msg, 200, job);
  } else if (n == 2 && g_str_equal (method, "DELETE")) {
    gchar *text;
    h3_studio_delete (sv->studio, job);
    text = g_strdup_printf ("{\"id\":\"%s\",\"object\":\"video.deleted\","
        "\"deleted\":true}", job->id);
    answer_json (msg, 200, text);
  } else if (n == 3 && g_str_equal (parts[2], "content")
      && g_str_equal (method, "GET")) {
    content (sv, msg, job);
  } else if (n == 3 && g_str_equal (parts[2], "cancel")
      && g_str_equal (method, "POST")) {
    h3_studio_cancel (sv->studio, job);
    answer_job (sv, msg, 200, job);
  } else {
    answer_error (msg, 405, "no such action on a video", NULL,
        "method_not_allowed");
  }
  h3_job_unref (job);
  g_strfreev (parts);
}

/* Before a body is read: refuse one larger than --max-upload. */
static void
early (SoupServer * server, SoupServerMessage * msg, const char *path,
    GHashTable * query, gpointer data)
{
  Server *sv = data;
  SoupMessageHeaders *h = soup_server_message_get_request_headers (msg);
  goffset length = soup_message_headers_get_content_length (h);
  gchar *why;

  if (soup_message_headers_get_encoding (h) == SOUP_ENCODING_CONTENT_LENGTH
      && (guint64) length <= sv->max_upload)
    return;
  if (soup_message_headers_get_encoding (h) == SOUP_ENCODING_NONE)
    return;
  why = g_strdup_printf ("the body is larger than %" G_GUINT64_FORMAT
      " bytes (or has no Content-Length)", sv->max_upload);
  answer_error (msg, 413, why, NULL, "too_large");
  g_free (why);
}

static void
page (SoupServer * server, SoupServerMessage * msg, const char *path,
    GHashTable * query, gpointer data)
{
  const char *name;
  const unsigned char *bytes;
  size_t size;

  if (!g_str_equal (path, "/") || !h3_studio_page_file (0, &name, &bytes,
          &size)) {
    answer_error (msg, 404, "no such page", NULL, "not_found");
    return;
  }
  soup_server_message_set_status (msg, 200, NULL);
  soup_server_message_set_response (msg, "text/html; charset=utf-8",
      SOUP_MEMORY_STATIC, (const char *) bytes, size);
}

/* ---- main ---------------------------------------------------------------- */

static gboolean
quit (gpointer loop)
{
  g_main_loop_quit (loop);
  return G_SOURCE_REMOVE;
}

int
main (int argc, char **argv)
{
  gchar *host = g_strdup ("127.0.0.1"), *model = NULL, *data = NULL,
      *element = NULL;
  gint port = 8080, max_queue = 8, max_storage = 1024, max_upload = 16;
  GOptionEntry entries[] = {
    {"host", 0, 0, G_OPTION_ARG_STRING, &host,
        "Address to listen on (default 127.0.0.1: this machine only)", "ADDR"},
    {"port", 0, 0, G_OPTION_ARG_INT, &port, "Port (default 8080; 0: any)",
        "N"},
    {"model", 0, 0, G_OPTION_ARG_FILENAME, &model,
        "MiniMax-H3 folder (default: the embedded tiny model)", "DIR"},
    {"data", 0, 0, G_OPTION_ARG_FILENAME, &data,
        "Folder for the videos (default: a new one under the temp folder)",
        "DIR"},
    {"max-queue", 0, 0, G_OPTION_ARG_INT, &max_queue,
        "Jobs waiting at most (default 8; 429 past it)", "N"},
    {"max-storage", 0, 0, G_OPTION_ARG_INT, &max_storage,
        "MiB of videos kept at most (default 1024; 507 past it)", "MIB"},
    {"max-upload", 0, 0, G_OPTION_ARG_INT, &max_upload,
        "MiB of a request body at most (default 16; 413 past it)", "MIB"},
    {"element", 0, 0, G_OPTION_ARG_STRING, &element,
        "More h3videosrc properties for every job, e.g. \"compute=cpu "
          "adapter-location=...\"", "PROPS"},
    {NULL}
  };
  GOptionContext *ctx = g_option_context_new ("- MiniMax-H3 studio: a page "
      "and a /v1/videos API");
  GError *err = NULL;
  H3StudioConfig config = { 0 };
  SoupServer *server;
  Server sv;
  GMainLoop *loop;
  GSList *uris;
  GSocketAddress *addr;
  gchar *url;

  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_add_group (ctx, gst_init_get_option_group ());
  if (!g_option_context_parse (ctx, &argc, &argv, &err)) {
    fprintf (stderr, "h3-studio: %s\n", err->message);
    return 2;
  }
  g_option_context_free (ctx);
  if (port < 0 || port > 65535 || max_queue < 1 || max_storage < 1
      || max_upload < 1) {
    fprintf (stderr, "h3-studio: --port 0..65535, --max-queue, "
        "--max-storage and --max-upload from 1\n");
    return 2;
  }
  if (!data)
    data = g_dir_make_tmp ("h3-studio-XXXXXX", NULL);
  config.data_dir = data;
  config.model_dir = model;
  config.extra = element;
  config.max_queue = (guint) max_queue;
  config.max_storage = (guint64) max_storage << 20;
  sv.max_upload = (guint64) max_upload << 20;
  sv.studio = h3_studio_new (&config, &err);
  if (!sv.studio) {
    fprintf (stderr, "h3-studio: %s\n", err->message);
    return 2;
  }
  server = soup_server_new ("server-header", "h3-studio", NULL);
  soup_server_add_early_handler (server, "/v1/videos", early, &sv, NULL);
  soup_server_add_handler (server, "/v1/videos", videos, &sv, NULL);
  soup_server_add_handler (server, "/", page, &sv, NULL);
  addr = g_inet_socket_address_new_from_string (host, (guint) port);
  if (!addr) {
    fprintf (stderr, "h3-studio: --host '%s' is not an IP address\n", host);
    return 2;
  }
  if (!soup_server_listen (server, addr, 0, &err)) {
    fprintf (stderr, "h3-studio: listening on %s:%d: %s\n", host, port,
        err->message);
    return 1;
  }
  g_object_unref (addr);
  uris = soup_server_get_uris (server);
  url = g_uri_to_string (uris->data);
  printf ("h3-studio: listening on %s (videos in %s)\n", url, data);
  fflush (stdout);
  g_free (url);
  g_slist_free_full (uris, (GDestroyNotify) g_uri_unref);
  loop = g_main_loop_new (NULL, FALSE);
  g_unix_signal_add (SIGINT, quit, loop);
  g_unix_signal_add (SIGTERM, quit, loop);
  g_main_loop_run (loop);
  soup_server_disconnect (server);
  g_object_unref (server);
  h3_studio_free (sv.studio);
  g_main_loop_unref (loop);
  g_free (host);
  g_free (model);
  g_free (data);
  g_free (element);
  return 0;
}
