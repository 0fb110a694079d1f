/* h3_studio_jobs.c - h3-studio's job store and its one worker.
 *
 * Jobs wait in a bounded queue and run one at a time, as the element's
 * shared engine runs one generation at a time anyway. The worker keeps one
 * pipeline for the process,
 *
 *   h3videosrc ! I420 ! x264enc ! mp4mux ! filesink   (+ audio: AAC at 48 kHz)
 *
 * and for each job sets the clip's properties and the file, plays it to
 * EOS and goes back to NULL: the element keeps its engine across runs while
 * the model settings stay the same, so the model loads once, on the first
 * job. Progress comes from the element's h3videosrc/step messages; a
 * cancel sets the pipeline to NULL, which stops the generation at its next
 * step. The MP4s live in the data folder under names the studio makes
 * (<id>.mp4); nothing a request says reaches the file system. */
#include <errno.h>
#include <glib/gstdio.h>
#include <stdlib.h>
#include <gst/gst.h>
#include <gst/video/video.h>
#include <string.h>

#include "h3_image_file.h"
#include "h3_studio.h"

struct _H3Studio
{
  H3StudioConfig config;
  gchar *data_dir, *model_dir, *extra;
  GMutex lock;
  GCond cond;
  GHashTable *jobs;             /* id -> H3Job (a ref) */
  guint64 submitted;            /* jobs submitted: the next one's seq */
  GQueue queue;                 /* queued jobs (refs) */
  H3Job *running;               /* the worker's, or NULL */
  gboolean quit;
  GThread *worker;
  GstElement *pipeline, *src, *sink;
};

static const gchar *PIPELINE =
    "h3videosrc name=src src.video ! queue ! videoconvert ! "
    "video/x-raw,format=I420 ! x264enc speed-preset=ultrafast ! h264parse ! "
    "mp4mux name=mux faststart=true ! filesink name=sink "
    "src.audio ! queue max-size-buffers=0 max-size-bytes=0 max-size-time=0 ! "
    "audioconvert ! audioresample ! audio/x-raw,rate=48000 ! avenc_aac ! mux.";

void
h3_job_unref (H3Job * job)
{
  if (!job || !g_atomic_int_dec_and_test (&job->refs))
    return;
  h3_job_spec_clear (&job->spec);
  g_free (job->id);
  g_free (job->error_code);
  g_free (job->error_message);
  g_free (job->path);
  g_free (job);
}

static H3Job *
job_ref (H3Job * job)
{
  g_atomic_int_inc (&job->refs);
  return job;
}

/* Under the lock. */
static void
job_fail (H3Job * job, const gchar * code, const gchar * message)
{
  job->status = H3_JOB_FAILED;
  g_free (job->error_code);
  g_free (job->error_message);
  job->error_code = g_strdup (code);
  job->error_message = g_strdup (message);
  job->completed_at = g_get_real_time () / G_USEC_PER_SEC;
}

/* The keyframe upload as the element's `image` sample (RGB). */
static GstSample *
keyframe_sample (GBytes * bytes, gchar ** why)
{
  h3_image_file kf = { 0 };
  h3_status st = { 0 };
  GstVideoInfo info;
  GstBuffer *buf;
  GstMapInfo map;
  GstCaps *caps;
  GstSample *sample;
  gsize n;
  const guint8 *data = g_bytes_get_data (bytes, &n);

  if (h3_image_file_decode (data, n, "input_reference", &kf, &st) != H3_OK) {
    *why = g_strdup (st.message);
    return NULL;
  }
  gst_video_info_set_format (&info, GST_VIDEO_FORMAT_RGB, kf.image.width,
      kf.image.height);
  buf = gst_buffer_new_allocate (NULL, GST_VIDEO_INFO_SIZE (&info), NULL);
  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  for (gint y = 0; y < kf.image.height; y++)
    memcpy (map.data + (gsize) y * GST_VIDEO_INFO_PLANE_STRIDE (&info, 0),
        kf.image.rgb + (gsize) y * kf.image.stride, (gsize) kf.image.width * 3);
  gst_buffer_unmap (buf, &map);
  caps = gst_video_info_to_caps (&info);
  sample = gst_sample_new (buf, caps, NULL, NULL);
  gst_caps_unref (caps);
  gst_buffer_unref (buf);
  h3_image_file_clear (&kf);
  return sample;
}

/* The job's clip on the pipeline: every content row of the request, the
 * keyframe, the file. */
static gboolean
configure (H3Studio * s, H3Job * job, gchar ** why)
{
  GstSample *image = NULL;

  if (job->spec.keyframe && !(image = keyframe_sample (job->spec.keyframe,
              why)))
    return FALSE;
  for (const h3_param * p = h3_params (); p->name; p++) {
    gchar *text;
    if (p->home != H3_PARAM_IN_REQUEST || !(p->flags & H3_PARAM_CONTENT)
        || (p->flags & H3_PARAM_TOOLS))
      continue;
    text = h3_param_format (p, &job->spec.request);
    gst_util_set_object_arg (G_OBJECT (s->src), p->name, text ? text : "");
    free (text);
  }
  g_object_set (s->src, "image", image, NULL);
  if (image)
    gst_sample_unref (image);
  g_object_set (s->sink, "location", job->path, NULL);
  return TRUE;
}

/* Plays the pipeline to EOS, an error or a cancel. */
static void
run_job (H3Studio * s, H3Job * job)
{
  GstBus *bus = gst_element_get_bus (s->pipeline);
  gchar *why = NULL;
  gboolean done = FALSE;

  if (!configure (s, job, &why)) {
    g_mutex_lock (&s->lock);
    job_fail (job, "invalid_reference", why);
    g_mutex_unlock (&s->lock);
    g_free (why);
    gst_object_unref (bus);
    return;
  }
  gst_element_set_state (s->pipeline, GST_STATE_PLAYING);
  while (!done) {
    GstMessage *m = gst_bus_timed_pop_filtered (bus, 50 * GST_MSECOND,
        GST_MESSAGE_ERROR | GST_MESSAGE_EOS | GST_MESSAGE_ELEMENT);
    gboolean cancel;

    g_mutex_lock (&s->lock);
    cancel = job->cancel;
    if (cancel) {
      job_fail (job, "cancelled", "cancelled before it was complete");
      done = TRUE;
    } else if (m && GST_MESSAGE_TYPE (m) == GST_MESSAGE_EOS) {
      GStatBuf st;
      job->status = H3_JOB_COMPLETED;
      job->progress = 100;
      job->completed_at = g_get_real_time () / G_USEC_PER_SEC;
      job->bytes = g_stat (job->path, &st) == 0 ? (guint64) st.st_size : 0;
      done = TRUE;
    } else if (m && GST_MESSAGE_TYPE (m) == GST_MESSAGE_ERROR) {
      GError *err = NULL;
      gst_message_parse_error (m, &err, NULL);
      job_fail (job, "generation_failed", err->message);
      g_error_free (err);
      done = TRUE;
    } else if (m && gst_message_has_name (m, "h3videosrc/step")) {
      gint percent;
      if (gst_structure_get_int (gst_message_get_structure (m), "percent",
              &percent))
        job->progress = CLAMP (percent, job->progress, 99);
    }
    g_mutex_unlock (&s->lock);
    if (m)
      gst_message_unref (m);
  }
  gst_element_set_state (s->pipeline, GST_STATE_NULL);
  gst_bus_set_flushing (bus, TRUE);
  gst_bus_set_flushing (bus, FALSE);
  gst_object_unref (bus);
  if (job->status != H3_JOB_COMPLETED)
    g_unlink (job->path);
}

static gpointer
worker (gpointer data)
{
  H3Studio *s = data;

  g_mutex_lock (&s->lock);
  for (;;) {
    H3Job *job;
    while (!s->quit && g_queue_is_empty (&s->queue))
      g_cond_wait (&s->cond, &s->lock);
    if (s->quit)
      break;
    job = g_queue_pop_head (&s->queue);
    if (job->cancel) {
      job_fail (job, "cancelled", "cancelled while queued");
      h3_job_unref (job);
      continue;
    }
    job->status = H3_JOB_IN_PROGRESS;
    s->running = job;
    g_mutex_unlock (&s->lock);
    run_job (s, job);
    g_mutex_lock (&s->lock);
    s->running = NULL;
    /* deleted while it ran: its file goes now */
    if (!g_hash_table_contains (s->jobs, job->id))
      g_unlink (job->path);
    g_cond_broadcast (&s->cond);
    h3_job_unref (job);
  }
  g_mutex_unlock (&s->lock);
  return NULL;
}

H3Studio *
h3_studio_new (const H3StudioConfig * config, GError ** error)
{
  H3Studio *s = g_new0 (H3Studio, 1);
  GstElement *mux;

  s->config = *config;
  s->data_dir = g_strdup (config->data_dir);
  s->model_dir = g_strdup (config->model_dir);
  s->extra = g_strdup (config->extra);
  if (g_mkdir_with_parents (s->data_dir, 0700) != 0) {
    g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (errno),
        "data folder '%s': %s", s->data_dir, g_strerror (errno));
    h3_studio_free (s);
    return NULL;
  }
  s->pipeline = gst_parse_launch (PIPELINE, error);
  if (!s->pipeline) {
    h3_studio_free (s);
    return NULL;
  }
  s->src = gst_bin_get_by_name (GST_BIN (s->pipeline), "src");
  s->sink = gst_bin_get_by_name (GST_BIN (s->pipeline), "sink");
  mux = gst_bin_get_by_name (GST_BIN (s->pipeline), "mux");
  gst_object_unref (mux);
  if (s->model_dir)
    g_object_set (s->src, "model-location", s->model_dir, NULL);
  if (s->extra) {
    gchar **kv = g_strsplit_set (s->extra, " ", -1);
    for (gchar ** p = kv; *p; p++) {
      gchar *eq = strchr (*p, '=');
      if (!**p)
        continue;
      if (eq)
        *eq = '\0';
      if (!eq || !g_object_class_find_property (G_OBJECT_GET_CLASS (s->src),
              *p)) {
        g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
            "--element '%s': expected PROPERTY=VALUE of h3videosrc", *p);
        g_strfreev (kv);
        h3_studio_free (s);
        return NULL;
      }
      gst_util_set_object_arg (G_OBJECT (s->src), *p, eq + 1);
    }
    g_strfreev (kv);
  }
  g_mutex_init (&s->lock);
  g_cond_init (&s->cond);
  s->jobs = g_hash_table_new_full (g_str_hash, g_str_equal, NULL,
      (GDestroyNotify) h3_job_unref);
  g_queue_init (&s->queue);
  s->worker = g_thread_new ("h3-studio-worker", worker, s);
  return s;
}

void
h3_studio_free (H3Studio * s)
{
  if (!s)
    return;
  if (s->worker) {
    g_mutex_lock (&s->lock);
    s->quit = TRUE;
    if (s->running)
      s->running->cancel = TRUE;
    g_cond_broadcast (&s->cond);
    g_mutex_unlock (&s->lock);
    g_thread_join (s->worker);
    g_queue_clear_full (&s->queue, (GDestroyNotify) h3_job_unref);
    g_hash_table_destroy (s->jobs);
    g_mutex_clear (&s->lock);
    g_cond_clear (&s->cond);
  }
  if (s->pipeline) {
    gst_element_set_state (s->pipeline, GST_STATE_NULL);
    gst_object_unref (s->src);
    gst_object_unref (s->sink);
    gst_object_unref (s->pipeline);
  }
  g_free (s->data_dir);
  g_free (s->model_dir);
  g_free (s->extra);
  g_free (s);
}

/* Bytes of the MP4s the store keeps. Under the lock. */
static guint64
stored_bytes (H3Studio * s)
{
  GHashTableIter it;
  gpointer v;
  guint64 n = 0;

  g_hash_table_iter_init (&it, s->jobs);
  while (g_hash_table_iter_next (&it, NULL, &v))
    n += ((H3Job *) v)->bytes;
  return n;
}

H3Job *
h3_studio_submit (H3Studio * s, H3JobSpec * spec, guint * http_status,
    gchar ** why)
{
  H3Job *job;
  guint64 used;

  g_mutex_lock (&s->lock);
  if (g_queue_get_length (&s->queue) >= s->config.max_queue) {
    g_mutex_unlock (&s->lock);
    *http_status = 429;
    *why = g_strdup_printf ("the queue is full (%u jobs waiting): try again "
        "once one is done", s->config.max_queue);
    return NULL;
  }
  used = stored_bytes (s);
  if (used >= s->config.max_storage) {
    g_mutex_unlock (&s->lock);
    *http_status = 507;
    *why = g_strdup_printf ("the storage quota is used up (%" G_GUINT64_FORMAT
        " of %" G_GUINT64_FORMAT " bytes): delete videos first", used,
        s->config.max_storage);
    return NULL;
  }
  job = g_new0 (H3Job, 1);
  job->refs = 1;
  job->id = g_strdup_printf ("video_%08x%08x", g_random_int (),
      g_random_int ());
  job->spec = *spec;
  memset (spec, 0, sizeof *spec);
  job->status = H3_JOB_QUEUED;
  job->created_at = g_get_real_time () / G_USEC_PER_SEC;
  job->seq = s->submitted++;
  job->path = g_strdup_printf ("%s/%s.mp4", s->data_dir, job->id);
  g_hash_table_insert (s->jobs, job->id, job_ref (job));
  g_queue_push_tail (&s->queue, job_ref (job));
  g_cond_broadcast (&s->cond);
  g_mutex_unlock (&s->lock);
  return job;
}

H3Job *
h3_studio_lookup (H3Studio * s, const gchar * id)
{
  H3Job *job;

  g_mutex_lock (&s->lock);
  job = g_hash_table_lookup (s->jobs, id);
  if (job)
    job_ref (job);
  g_mutex_unlock (&s->lock);
  return job;
}

static gint
newest_first (gconstpointer a, gconstpointer b)
{
  const H3Job *x = *(H3Job * const *) a, *y = *(H3Job * const *) b;

  return x->seq > y->seq ? -1 : x->seq < y->seq ? 1 : 0;
}

GPtrArray *
h3_studio_list (H3Studio * s)
{
  GPtrArray *all = g_ptr_array_new_with_free_func ((GDestroyNotify)
      h3_job_unref);
  GHashTableIter it;
  gpointer v;

  g_mutex_lock (&s->lock);
  g_hash_table_iter_init (&it, s->jobs);
  while (g_hash_table_iter_next (&it, NULL, &v))
    g_ptr_array_add (all, job_ref (v));
  g_mutex_unlock (&s->lock);
  g_ptr_array_sort (all, newest_first);
  return all;
}

void
h3_studio_cancel (H3Studio * s, H3Job * job)
{
  g_mutex_lock (&s->lock);
  if (job->status == H3_JOB_QUEUED || job->status == H3_JOB_IN_PROGRESS)
    job->cancel = TRUE;
  /* a queued job ends at once: the worker only drops it */
  if (job->status == H3_JOB_QUEUED)
    job_fail (job, "cancelled", "cancelled while queued");
  g_mutex_unlock (&s->lock);
}

void
h3_studio_delete (H3Studio * s, H3Job * job)
{
  gboolean running;

  h3_studio_cancel (s, job);
  g_mutex_lock (&s->lock);
  running = s->running == job;
  g_hash_table_remove (s->jobs, job->id);
  if (!running)
    g_unlink (job->path);
  g_mutex_unlock (&s->lock);
}

void
h3_studio_snapshot (H3Studio * s, const H3Job * job, H3Job * copy)
{
  g_mutex_lock (&s->lock);
  *copy = *job;
  copy->error_code = g_strdup (job->error_code);
  copy->error_message = g_strdup (job->error_message);
  g_mutex_unlock (&s->lock);
}
