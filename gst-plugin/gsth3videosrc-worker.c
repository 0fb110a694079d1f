/* gsth3videosrc-worker.c - h3videosrc's generation thread: it opens the
 * engine (or keeps the one of an earlier run), validates the run's request
 * into a plan, generates, and receives the engine's callbacks. Decoded
 * frames and samples go into the run's clip, where the pad tasks
 * (gsth3videosrc-output.c) take them. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "gsth3videosrc-private.h"

/* ---- the clip and the thread --------------------------------------------- */

/* Frees the clip of the last run. The worker must be joined. */
void
gst_h3_video_src_clip_clear (GstH3VideoSrc * self)
{
  if (self->frames) {
    for (gint i = 0; i < self->plan.num_frames; i++)
      gst_clear_buffer (&self->frames[i]);
    g_free (self->frames);
    self->frames = NULL;
  }
  g_clear_pointer (&self->samples, g_free);
  g_clear_pointer (&self->callback_error, g_free);
  self->have_plan = FALSE;
  memset (&self->plan, 0, sizeof self->plan);
  self->frames_ready = 0;
  self->audio_len = self->audio_ready = self->audio_delivered = 0;
  self->generated = FALSE;
}

/* Waits for the worker of the previous run. It was cancelled, so this
 * takes at most one denoising step (or the rest of a model load, which the
 * engine cannot interrupt). */
void
gst_h3_video_src_worker_join (GstH3VideoSrc * self)
{
  if (!self->worker)
    return;
  if (self->worker == g_thread_self ()) {
    /* The worker dropped the last reference (see the worker's end): it is
     * returning, so let it go instead of joining it from itself. */
    g_thread_unref (self->worker);
  } else {
    GST_DEBUG_OBJECT (self, "joining the generation thread");
    g_thread_join (self->worker);
  }
  self->worker = NULL;
}

/* ---- engine -------------------------------------------------------------- */

static gboolean
worker_cancelled (GstH3VideoSrc * self)
{
  gboolean c;

  g_mutex_lock (&self->lock);
  c = self->cancel;
  g_mutex_unlock (&self->lock);
  return c;
}

/* Ends the run's streams after an error or an early stop. */
static void
worker_stop_streaming (GstH3VideoSrc * self, gboolean error_posted)
{
  g_mutex_lock (&self->lock);
  self->stop_streaming = TRUE;
  self->error_posted |= error_posted;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

static void
engine_log (void *opaque, h3_log_level level, const char *message)
{
  GstH3VideoSrc *self = opaque;

  switch (level) {
    case H3_LOG_ERROR:
      GST_ERROR_OBJECT (self, "h3core: %s", message);
      break;
    case H3_LOG_WARNING:
      GST_WARNING_OBJECT (self, "h3core: %s", message);
      break;
    case H3_LOG_INFO:
      GST_INFO_OBJECT (self, "h3core: %s", message);
      break;
    default:
      GST_DEBUG_OBJECT (self, "h3core: %s", message);
      break;
  }
}

/* Opens the engine unless the one from an earlier run fits the model
 * settings. Only the worker calls this, and runs never overlap. */
static gboolean
worker_ensure_engine (GstH3VideoSrc * self)
{
  const GstH3Settings *s = &self->run;
  gchar *key = gst_h3_settings_engine_key (s);
  h3_engine_options opt = h3_engine_options_default ();
  h3_engine *engine = NULL, *old = NULL;
  h3_status st;
  h3_stats stats;
  h3_status_code rc;
  gint64 t0;

  g_mutex_lock (&self->lock);
  if (self->engine && g_strcmp0 (key, self->engine_key) == 0) {
    g_mutex_unlock (&self->lock);
    g_free (key);
    GST_DEBUG_OBJECT (self, "reusing the loaded engine");
    return TRUE;
  }
  old = self->engine;
  self->engine = NULL;
  g_mutex_unlock (&self->lock);
  if (old) {
    GST_INFO_OBJECT (self, "model settings changed: closing the engine");
    h3_engine_close (old);
  }

  opt.model_dir = gst_h3_settings_model_dir (s);
  opt.adapter_path = s->adapter_location && *s->adapter_location ?
      s->adapter_location : NULL;
  opt.compute = gst_h3_settings_compute (s);
  opt.devices = s->devices;
  opt.load_format = s->load_format == GST_H3_LOAD_FORMAT_DUMMY ?
      H3_LOAD_DUMMY : H3_LOAD_SAFETENSORS;
  opt.dummy_adapter = (h3_dummy_adapter) s->dummy_adapter;
  opt.log = engine_log;
  opt.log_opaque = self;

  gst_h3_video_src_post_progress (self, &self->load_open,
      GST_PROGRESS_TYPE_START, "load", 0, "Loading the model from %s",
      opt.model_dir);
  t0 = g_get_monotonic_time ();
  memset (&st, 0, sizeof st);
  rc = h3_engine_open (&opt, &engine, &st);
  if (rc != H3_OK) {
    gst_h3_video_src_post_engine_error (self, GST_H3_STAGE_LOAD, &st);
    gst_h3_video_src_post_progress (self, &self->load_open,
        GST_PROGRESS_TYPE_ERROR, "load", 0, "Could not load the model: %s",
        st.message);
    g_free (key);
    return FALSE;
  }
  h3_engine_get_stats (engine, &stats);
  g_mutex_lock (&self->lock);
  self->engine = engine;
  g_free (self->engine_key);
  self->engine_key = key;
  g_mutex_unlock (&self->lock);
  gst_h3_video_src_post_progress (self, &self->load_open,
      GST_PROGRESS_TYPE_COMPLETE, "load", 100,
      "Model loaded in %.1f s (compute: %s)",
      (g_get_monotonic_time () - t0) / 1e6, stats.compute);
  return TRUE;
}

/* The validated plan fixes the clip's geometry: size the clip, tell the
 * audio stream its rate, and wake the pad tasks so they can push caps. */
static void
worker_publish_plan (GstH3VideoSrc * self, const h3_plan * plan)
{
  GstCaps *caps;

  caps = gst_h3_audio_caps_new (plan->sample_rate);
  gst_stream_set_caps (self->audio_stream, caps);
  gst_caps_unref (caps);

  g_mutex_lock (&self->lock);
  self->plan = *plan;
  self->frames = g_new0 (GstBuffer *, plan->num_frames);
  self->frames_ready = 0;
  /* Audio is trimmed or zero padded to end with the last video frame. */
  self->audio_len = (gint64) gst_util_uint64_scale_round (plan->num_frames,
      plan->sample_rate, H3_FPS);
  self->samples = g_new0 (gfloat, self->audio_len * 2);
  self->audio_ready = self->audio_delivered = 0;
  self->have_plan = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  GST_INFO_OBJECT (self, "plan: %d frames %dx%d, %" G_GINT64_FORMAT " audio "
      "samples at %d Hz (model gives %" G_GINT64_FORMAT "), %d steps, %d "
      "prompt tokens", plan->num_frames, plan->width, plan->height,
      self->audio_len, plan->sample_rate, plan->audio_samples, plan->steps,
      plan->text_tokens);
}

/* ---- callbacks ----------------------------------------------------------- */

static void
on_progress (void *opaque, h3_phase phase, int done, int total)
{
  GstH3VideoSrc *self = opaque;
  gint percent = gst_h3_phase_percent (phase, done, total);
  gboolean cancel;

  g_mutex_lock (&self->lock);
  cancel = self->cancel;
  /* h3_engine_generate() clears the engine's cancel flag when it starts,
   * so a stop that came just before the call is repeated here. */
  if (cancel && self->engine)
    h3_engine_cancel (self->engine);
  if (phase == H3_PHASE_DENOISE && done == 0)
    self->denoise_start_us = g_get_monotonic_time ();
  g_mutex_unlock (&self->lock);
  if (cancel)
    return;

  switch (phase) {
    case H3_PHASE_TEXT:
      if (done == 0)
        gst_h3_video_src_post_progress (self, &self->generate_open,
            GST_PROGRESS_TYPE_CONTINUE, "generate", percent,
            "Encoding the prompt");
      break;
    case H3_PHASE_DENOISE:
      if (done == 0)
        break;
      gst_h3_video_src_post_progress (self, &self->generate_open,
          GST_PROGRESS_TYPE_CONTINUE, "generate", percent,
          "Denoising: step %d of %d", done, total);
      gst_h3_video_src_post_step (self, phase, done, total, percent);
      break;
    case H3_PHASE_DECODE_AUDIO:
    case H3_PHASE_DECODE_VIDEO:
      if (done == 0)
        break;
      gst_h3_video_src_post_progress (self, &self->generate_open,
          GST_PROGRESS_TYPE_CONTINUE, "generate", percent,
          "Decoding %s: window %d of %d",
          phase == H3_PHASE_DECODE_VIDEO ? "video" : "audio", done, total);
      gst_h3_video_src_post_step (self, phase, done, total, percent);
      break;
    default:
      break;
  }
}

/* Records a broken callback contract (out-of-order or out-of-range data);
 * the generation is stopped and reported as a stream failure. */
static int
callback_fail (GstH3VideoSrc * self, gchar * message)
{
  GST_ERROR_OBJECT (self, "%s", message);
  if (!self->callback_error)
    self->callback_error = message;
  else
    g_free (message);
  g_mutex_unlock (&self->lock);
  return 1;
}

static int
on_video_frames (void *opaque, int first, int count, const uint8_t * rgb)
{
  GstH3VideoSrc *self = opaque;
  gsize size;
  GstBuffer **bufs;

  g_mutex_lock (&self->lock);
  if (self->cancel) {
    g_mutex_unlock (&self->lock);
    return 1;
  }
  if (first != self->frames_ready || count < 0
      || first + count > self->plan.num_frames)
    return callback_fail (self, g_strdup_printf ("engine delivered frames "
            "[%d, %d) while %d of %d were ready", first, first + count,
            self->frames_ready, self->plan.num_frames));
  size = (gsize) self->plan.width * self->plan.height * 3;
  g_mutex_unlock (&self->lock);

  /* Copy outside the lock: the pad tasks keep pushing meanwhile. */
  bufs = g_new (GstBuffer *, MAX (count, 1));
  for (gint i = 0; i < count; i++) {
    bufs[i] = gst_buffer_new_allocate (NULL, size, NULL);
    gst_buffer_fill (bufs[i], 0, rgb + (gsize) i * size, size);
  }

  g_mutex_lock (&self->lock);
  for (gint i = 0; i < count; i++)
    self->frames[first + i] = bufs[i];
  self->frames_ready = first + count;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  g_free (bufs);
  GST_LOG_OBJECT (self, "frames %d..%d decoded", first, first + count - 1);
  return 0;
}

static int
on_audio_samples (void *opaque, int64_t first, int64_t count,
    const float *interleaved)
{
  GstH3VideoSrc *self = opaque;
  gint64 end, keep;

  g_mutex_lock (&self->lock);
  if (self->cancel) {
    g_mutex_unlock (&self->lock);
    return 1;
  }
  if (first != self->audio_delivered || count < 0)
    return callback_fail (self, g_strdup_printf ("engine delivered samples "
            "from %" G_GINT64_FORMAT " while %" G_GINT64_FORMAT " were "
            "delivered", (gint64) first, self->audio_delivered));
  self->audio_delivered = first + count;
  /* Samples past the end of the video are trimmed. */
  end = MIN (first + count, self->audio_len);
  keep = end - first;
  if (keep > 0)
    memcpy (self->samples + first * 2, interleaved, keep * 2 * sizeof (gfloat));
  self->audio_ready = MAX (self->audio_ready, end);
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  GST_LOG_OBJECT (self, "samples %" G_GINT64_FORMAT "+%" G_GINT64_FORMAT
      " decoded", (gint64) first, (gint64) count);
  return 0;
}

/* ---- the generation thread ----------------------------------------------- */

gpointer
gst_h3_video_src_worker (gpointer data)
{
  GstH3VideoSrc *self = data;
  h3_request req = gst_h3_settings_request (&self->run);
  h3_callbacks cb = { .progress = on_progress, .video_frames = on_video_frames,
    .audio_samples = on_audio_samples, .opaque = self };
  h3_status st;
  h3_status_code rc;
  h3_plan plan;
  h3_stats stats;
  GstStructure *stats_st;
  gchar *callback_error;

  if (!worker_ensure_engine (self)) {
    worker_stop_streaming (self, TRUE);
    goto done;
  }
  if (worker_cancelled (self))
    goto done;

  memset (&st, 0, sizeof st);
  rc = h3_engine_validate (self->engine, &req, &plan, &st);
  if (rc != H3_OK) {
    gst_h3_video_src_post_engine_error (self, GST_H3_STAGE_VALIDATE, &st);
    worker_stop_streaming (self, TRUE);
    goto done;
  }
  worker_publish_plan (self, &plan);

  gst_h3_video_src_post_progress (self, &self->generate_open,
      GST_PROGRESS_TYPE_START, "generate", 0, "Generating %d frames at %dx%d "
      "(seed %" G_GUINT64_FORMAT ", %d steps)", plan.num_frames, plan.width,
      plan.height, self->run.seed, plan.steps);
  memset (&st, 0, sizeof st);
  rc = h3_engine_generate (self->engine, &req, &cb, &st);

  h3_engine_get_stats (self->engine, &stats);
  stats_st = gst_h3_stats_structure_new (&stats);
  g_mutex_lock (&self->lock);
  if (self->stats)
    gst_structure_free (self->stats);
  self->stats = stats_st;
  callback_error = g_strdup (self->callback_error);
  g_mutex_unlock (&self->lock);

  if (rc == H3_OK) {
    g_mutex_lock (&self->lock);
    self->generated = TRUE;
    g_cond_broadcast (&self->cond);
    g_mutex_unlock (&self->lock);
    gst_h3_video_src_post_done (self, "ok", &stats);
    gst_h3_video_src_post_progress (self, &self->generate_open,
        GST_PROGRESS_TYPE_COMPLETE, "generate", 100,
        "Generated %d frames in %.1f s", plan.num_frames, stats.total);
  } else if (callback_error) {
    GST_ELEMENT_ERROR (self, STREAM, FAILED,
        ("Generation failed: the engine delivered inconsistent media. This "
            "is a bug in h3core; please report it."), ("%s", callback_error));
    worker_stop_streaming (self, TRUE);
    gst_h3_video_src_post_done (self, "error", &stats);
    gst_h3_video_src_post_progress (self, &self->generate_open,
        GST_PROGRESS_TYPE_ERROR, "generate", 0, "Generation failed");
  } else if (rc == H3_ERR_CANCELLED) {
    GST_INFO_OBJECT (self, "generation cancelled");
    gst_h3_video_src_post_done (self, "cancelled", &stats);
    gst_h3_video_src_post_progress (self, &self->generate_open,
        GST_PROGRESS_TYPE_CANCELED, "generate", 0, "Generation cancelled");
  } else {
    gst_h3_video_src_post_engine_error (self, GST_H3_STAGE_GENERATE, &st);
    worker_stop_streaming (self, TRUE);
    gst_h3_video_src_post_done (self, "error", &stats);
    gst_h3_video_src_post_progress (self, &self->generate_open,
        GST_PROGRESS_TYPE_ERROR, "generate", 0, "Generation failed: %s",
        st.message);
  }
  g_free (callback_error);

done:
  g_mutex_lock (&self->lock);
  self->worker_done = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  /* The worker holds a reference so that the element (and the engine it is
   * using) outlives the generation even when the application drops the
   * pipeline meanwhile; this may dispose the element, from this thread. */
  gst_object_unref (self);
  return NULL;
}

