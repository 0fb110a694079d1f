/* gsth3videosrc-worker.c - h3videosrc's generation thread: it takes the
 * process's engine for the run's model settings (loading it, or waiting for
 * the element that loads it), waits for its turn on it, validates the run's
 * request into a plan, generates, and receives the engine's callbacks.
 * Decoded frames and samples go into the run's clip, where the pad tasks
 * (gsth3videosrc-output.c) take them. In live mode a complete clip is
 * handed to the pad tasks (self->live_clips) and the thread goes on with
 * the next queued prompt, clip after clip, until it is stopped.
 *
 * The thread holds no reference to the element: dispose waits for it (it
 * is cancelled first, so that is one denoising step, or the rest of a model
 * load), so no generation outlives the element and a process that drops its
 * pipelines can exit while nothing runs on the CPU or the GPU. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "gsth3videosrc-private.h"
#include "gsth3videosrc-engine.h"
#include "gsth3videosrc-live.h"
#include "gsth3videosrc-messages.h"

/* ---- the clip and the thread --------------------------------------------- */

/* Frees the clip of the last run (and, live, the clips not pushed). The
 * worker must be joined. */
void
gst_h3_video_src_clip_clear (GstH3VideoSrc * self)
{
  GstH3LiveClip *clip;

  while ((clip = g_queue_pop_head (&self->live_clips)))
    gst_h3_live_clip_free (clip);
  self->live_clips_made = 0;
  if (self->clip.frames) {
    for (gint i = 0; i < self->clip.plan.num_frames; i++)
      gst_clear_buffer (&self->clip.frames[i]);
    g_free (self->clip.frames);
    self->clip.frames = NULL;
  }
  g_clear_pointer (&self->clip.samples, g_free);
  g_clear_pointer (&self->clip.callback_error, g_free);
  self->clip.have_plan = FALSE;
  memset (&self->clip.plan, 0, sizeof self->clip.plan);
  self->clip.frames_ready = 0;
  self->clip.audio_len = self->clip.audio_ready = 0;
  self->clip.audio_delivered = 0;
  self->clip.generated = FALSE;
}

/* Stops the run's generation wherever it is: the engine polls the flag at
 * every step, tile and window (h3_callbacks.cancel_flag), the waits for an
 * engine poll it too, and h3_engine_cancel reaches the decoders at once when
 * this element is the one generating. Never blocks; any thread. */
void
gst_h3_video_src_cancel (GstH3VideoSrc * self)
{
  GST_H3_VIDEO_SRC_LOCK (self);
  self->cancel = TRUE;
  g_atomic_int_set (&self->cancel_flag, 1);
  if (self->engine)
    gst_h3_engine_cancel (self->engine, GST_OBJECT (self));
  GST_H3_VIDEO_SRC_BROADCAST (self);
  GST_H3_VIDEO_SRC_UNLOCK (self);
  gst_h3_engine_wake ();
}

/* What an application EOS does to the generation now (called with the
 * lock held). A clip ends where both pads have data, so: stop at once when
 * frames are decoded (the clip ends with them), and go on to the first
 * frames when they are near, that is once the denoising is done, or when
 * the steps left take at most GST_H3_EOS_FINISH_WAIT at the pace of those
 * done; before the first step that pace is unknown (PENDING: decided at
 * the next step; a model load cannot be interrupted anyway). Stop at once
 * too while waiting for another element (that can take any time), and in
 * live mode. *first_in: the seconds of denoising left, or -1. */
GstH3EosPlan
gst_h3_video_src_eos_decide (GstH3VideoSrc * self, gdouble * first_in)
{
  gint done = self->phase_done, total = self->phase_total;
  gdouble left;

  *first_in = -1.0;
  if (self->run.is_live || self->clip.frames_ready > 0 || self->waiting
      || self->cancel)
    return GST_H3_EOS_CUT;
  if (self->phase == H3_PHASE_DECODE_AUDIO
      || self->phase == H3_PHASE_DECODE_VIDEO) {
    *first_in = 0.0;
    return GST_H3_EOS_FINISH;
  }
  if (self->phase != H3_PHASE_DENOISE || done <= 0)
    return GST_H3_EOS_PENDING;
  left = (g_get_monotonic_time () - self->denoise_start_us) / 1e6 / done *
      (total - done);
  *first_in = left;
  return left * G_USEC_PER_SEC <= GST_H3_EOS_FINISH_WAIT ?
      GST_H3_EOS_FINISH : GST_H3_EOS_CUT;
}

/* Acts on a decision of gst_h3_video_src_eos_decide (no lock held). */
void
gst_h3_video_src_eos_apply (GstH3VideoSrc * self, GstH3EosPlan plan,
    gdouble first_in)
{
  switch (plan) {
    case GST_H3_EOS_CUT:
      gst_h3_video_src_cancel (self);
      gst_h3_video_src_post_progress (self, &self->wait_open,
          GST_PROGRESS_TYPE_CANCELED, "wait", 0, "Stopped by end-of-stream");
      gst_h3_video_src_post_progress (self, &self->generate_open,
          GST_PROGRESS_TYPE_CANCELED, "generate", 0,
          "Generation stopped by end-of-stream");
      break;
    case GST_H3_EOS_FINISH:
      GST_INFO_OBJECT (self, "end of stream before the first frame: going "
          "on to the first frames (%.2f s of denoising left)", first_in);
      gst_h3_video_src_post_progress (self, &self->generate_open,
          GST_PROGRESS_TYPE_CONTINUE, "generate", 0, "End-of-stream: going "
          "on to the first frames (%.1f s of denoising left), so that the "
          "file has media; set the pipeline to NULL to stop at once",
          first_in);
      break;
    case GST_H3_EOS_PENDING:
      GST_INFO_OBJECT (self, "end of stream before the first denoising "
          "step: decided at that step");
      break;
    case GST_H3_EOS_NONE:
      break;
  }
}

/* The WARNING of an application EOS that cut the clip: what the streams
 * got of it. Once per run; nothing when the clip was complete. */
static void
worker_warn_cut (GstH3VideoSrc * self)
{
  gint made, total, done, steps;
  gboolean post, denoising;
  h3_phase phase;

  GST_H3_VIDEO_SRC_LOCK (self);
  post = self->eos_requested && !self->clip.generated && !self->eos_warned
      && !self->error_posted && !self->run.is_live;
  self->eos_warned |= post;
  made = self->clip.frames_ready;
  total = self->run_frames;
  /* Every frame made it: nothing was cut. */
  post = post && made < total;
  phase = self->phase;
  denoising = phase == H3_PHASE_DENOISE;
  done = self->phase_done;
  steps = self->phase_total;
  GST_H3_VIDEO_SRC_UNLOCK (self);
  if (!post)
    return;
  if (made > 0)
    GST_ELEMENT_WARNING (self, STREAM, FAILED,
        ("Stopped by end-of-stream: the clip was cut after %d of its %d "
            "frames (%.2f s of %.2f s); the audio ends with the last frame.",
            made, total, made / (gdouble) H3_FPS, total / (gdouble) H3_FPS),
        ("cut at frame %d", made));
  else
    GST_ELEMENT_WARNING (self, STREAM, FAILED,
        ("Stopped by end-of-stream before the first frame of %d was "
            "decoded: both streams end without media, and a muxer writes a "
            "file without samples (such an MP4 does not play)%s.", total,
            denoising ? "; the denoising steps left would have taken longer "
            "than the element waits for them" : ""),
        ("stopped in phase %s (step %d of %d)", h3_phase_name (phase), done,
            steps));
}

/* Waits up to timeout (microseconds) for the worker to finish, and joins
 * it if it did. TRUE when no worker is left. */
gboolean
gst_h3_video_src_worker_wait (GstH3VideoSrc * self, gint64 timeout)
{
  gint64 deadline = g_get_monotonic_time () + timeout;
  gboolean done;

  if (!self->worker)
    return TRUE;
  GST_H3_VIDEO_SRC_LOCK (self);
  while (!self->worker_done && GST_H3_VIDEO_SRC_WAIT_UNTIL (self,
          deadline));
  done = self->worker_done;
  GST_H3_VIDEO_SRC_UNLOCK (self);
  if (!done) {
    GST_INFO_OBJECT (self, "the generation is still finishing its step (or "
        "a model load): it is joined at the next start or when the element "
        "is freed");
    return FALSE;
  }
  gst_h3_video_src_worker_join (self);
  return TRUE;
}

/* Waits for the worker of the previous run, however long it takes. It was
 * cancelled, so this takes at most one denoising step (or the rest of a
 * model load, which the engine cannot interrupt). */
void
gst_h3_video_src_worker_join (GstH3VideoSrc * self)
{
  if (!self->worker)
    return;
  if (self->worker == g_thread_self ()) {
    /* The element is disposed by the worker's last action (see the end of
     * gst_h3_video_src_worker): it is returning, so let it go. */
    g_thread_unref (self->worker);
  } else {
    GST_DEBUG_OBJECT (self, "joining the generation thread");
    g_thread_join (self->worker);
  }
  self->worker = NULL;
}

/* ---- engine -------------------------------------------------------------- */

/* Ends the run's streams after an error or an early stop. */
static void
worker_stop_streaming (GstH3VideoSrc * self, gboolean error_posted)
{
  GST_H3_VIDEO_SRC_LOCK (self);
  self->stop_streaming = TRUE;
  self->error_posted |= error_posted;
  GST_H3_VIDEO_SRC_BROADCAST (self);
  GST_H3_VIDEO_SRC_UNLOCK (self);
}

/* The waits for a shared engine say whom they wait for: a `wait` progress
 * operation (gst-launch-1.0 prints it; nothing can preroll before the
 * engine is ours anyway) and an h3videosrc/waiting element message. */
static void
post_waiting (GstH3VideoSrc * self, const gchar * reason, const gchar * holder)
{
  gboolean load = g_strcmp0 (reason, "load") == 0, stop;

  /* A wait for another element can take any time: an EOS waiting for the
   * first frames stops here (gst_h3_video_src_eos_decide). */
  GST_H3_VIDEO_SRC_LOCK (self);
  self->waiting = TRUE;
  stop = self->eos_requested && self->eos_plan != GST_H3_EOS_CUT;
  if (stop)
    self->eos_plan = GST_H3_EOS_CUT;
  GST_H3_VIDEO_SRC_UNLOCK (self);
  if (stop)
    gst_h3_video_src_eos_apply (self, GST_H3_EOS_CUT, -1.0);
  GST_INFO_OBJECT (self, "waiting for %s (%s)", holder, reason);
  gst_element_post_message (GST_ELEMENT (self),
      gst_message_new_element (GST_OBJECT (self),
          gst_structure_new ("h3videosrc/waiting", "reason", G_TYPE_STRING,
              reason, "holder", G_TYPE_STRING, holder, NULL)));
  if (load)
    gst_h3_video_src_post_progress (self, &self->wait_open,
        GST_PROGRESS_TYPE_START, "wait", 0, "Waiting for the model, which "
        "%s is loading", holder);
  else
    gst_h3_video_src_post_progress (self, &self->wait_open,
        GST_PROGRESS_TYPE_START, "wait", 0, "Waiting for %s to finish its "
        "generation on the shared model", holder);
}

static void
worker_waited (GstH3VideoSrc * self)
{
  GST_H3_VIDEO_SRC_LOCK (self);
  self->waiting = FALSE;
  GST_H3_VIDEO_SRC_UNLOCK (self);
}

static void
on_wait_load (gpointer data, const gchar * holder)
{
  post_waiting (data, "load", holder);
}

static void
on_wait_turn (gpointer data, const gchar * holder)
{
  post_waiting (data, "turn", holder);
}

/* Takes the process's engine for the run's model settings: the one this
 * element already holds when they did not change, else the shared one
 * (engine-cache), loading it when nobody has, or waiting for the element
 * that is loading it. Only the worker calls this, and runs never overlap.
 * FALSE when there is no engine: an error was posted, or the run was
 * stopped meanwhile (*stopped). */
static gboolean
worker_ensure_engine (GstH3VideoSrc * self, gboolean * stopped)
{
  const GstH3Settings *s = &self->run;
  gchar *key = gst_h3_settings_engine_key (s);
  h3_engine_options opt;
  GstH3Engine *e, *old = NULL;
  gboolean must_load, ok;
  h3_status st;
  h3_stats stats;
  gint64 t0 = 0;

  *stopped = FALSE;
  GST_H3_VIDEO_SRC_LOCK (self);
  if (self->engine && g_strcmp0 (key, gst_h3_engine_key (self->engine)) == 0
      && gst_h3_engine_is_shared (self->engine) == s->engine_cache) {
    GST_H3_VIDEO_SRC_UNLOCK (self);
    g_free (key);
    GST_DEBUG_OBJECT (self, "reusing the loaded engine");
    return TRUE;
  }
  old = self->engine;
  self->engine = NULL;
  GST_H3_VIDEO_SRC_UNLOCK (self);
  if (old) {
    GST_INFO_OBJECT (self, "model settings changed: releasing the engine");
    gst_h3_engine_unref (old);
  }

  e = gst_h3_engine_lookup (key, s->engine_cache, &must_load);
  g_free (key);
  memset (&st, 0, sizeof st);
  if (must_load) {
    gst_h3_settings_engine_options (s, &opt);
    gst_h3_video_src_post_progress (self, &self->load_open,
        GST_PROGRESS_TYPE_START, "load", 0, "Loading the model from %s",
        opt.model_dir);
    t0 = g_get_monotonic_time ();
    ok = gst_h3_engine_load (e, GST_OBJECT (self), &opt, &st);
  } else {
    GST_INFO_OBJECT (self, "sharing the engine of another element");
    ok = gst_h3_engine_wait_loaded (e, &self->cancel_flag, on_wait_load,
        self, &st);
    worker_waited (self);
    if (!ok && st.code == H3_ERR_CANCELLED) {
      gst_h3_video_src_post_progress (self, &self->wait_open,
          GST_PROGRESS_TYPE_CANCELED, "wait", 0,
          "Stopped while waiting for the model");
      gst_h3_engine_unref (e);
      *stopped = TRUE;
      return FALSE;
    }
    if (ok)
      gst_h3_video_src_post_progress (self, &self->wait_open,
          GST_PROGRESS_TYPE_COMPLETE, "wait", 100, "The model is loaded");
  }
  if (!ok) {
    gst_h3_video_src_post_engine_error (self, GST_H3_STAGE_LOAD, &st);
    gst_h3_video_src_post_progress (self, &self->load_open,
        GST_PROGRESS_TYPE_ERROR, "load", 0, "Could not load the model: %s",
        st.message);
    gst_h3_video_src_post_progress (self, &self->wait_open,
        GST_PROGRESS_TYPE_ERROR, "wait", 0, "The model could not be loaded: "
        "%s", st.message);
    gst_h3_engine_unref (e);
    return FALSE;
  }
  GST_H3_VIDEO_SRC_LOCK (self);
  self->engine = e;
  GST_H3_VIDEO_SRC_UNLOCK (self);
  if (must_load) {
    h3_engine_get_stats (gst_h3_engine_get (e), &stats);
    gst_h3_video_src_post_progress (self, &self->load_open,
        GST_PROGRESS_TYPE_COMPLETE, "load", 100,
        "Model loaded in %.1f s (compute: %s)",
        (g_get_monotonic_time () - t0) / 1e6, stats.compute);
  }
  return TRUE;
}

/* The validated plan fixes the clip's geometry: size the clip and wake the
 * pad tasks. The streams' caps were known before the load (preflight). */
static gboolean
worker_publish_plan (GstH3VideoSrc * self, const h3_plan * plan)
{
  if (plan->sample_rate != self->run_rate || plan->num_frames !=
      self->run_frames || plan->width != self->run.request.width ||
      plan->height != self->run.request.height) {
    GST_ELEMENT_ERROR (self, STREAM, FAILED,
        ("The loaded model plans %d frames at %dx%d with %d Hz audio, not the "
            "%d frames at %dx%d with %d Hz its configs announced. This is a "
            "bug in h3core; please report it.", plan->num_frames, plan->width,
            plan->height, plan->sample_rate, self->run_frames,
            self->run.request.width, self->run.request.height, self->run_rate), (NULL));
    return FALSE;
  }
  GST_H3_VIDEO_SRC_LOCK (self);
  self->clip.plan = *plan;
  self->clip.frames = g_new0 (GstBuffer *, plan->num_frames);
  self->clip.frames_ready = 0;
  /* Audio is trimmed or zero padded to end with the last video frame. */
  self->clip.audio_len = (gint64) gst_util_uint64_scale_round (plan->num_frames,
      plan->sample_rate, H3_FPS);
  self->clip.samples = g_new0 (gfloat, self->clip.audio_len * 2);
  self->clip.audio_ready = self->clip.audio_delivered = 0;
  self->clip.have_plan = TRUE;
  GST_H3_VIDEO_SRC_BROADCAST (self);
  GST_H3_VIDEO_SRC_UNLOCK (self);
  GST_INFO_OBJECT (self, "plan: %d frames %dx%d, %" G_GINT64_FORMAT " audio "
      "samples at %d Hz (model gives %" G_GINT64_FORMAT "), %d steps, %d "
      "prompt tokens", plan->num_frames, plan->width, plan->height,
      self->clip.audio_len, plan->sample_rate, plan->audio_samples, plan->steps,
      plan->text_tokens);
  return TRUE;
}

/* ---- callbacks ----------------------------------------------------------- */

static void
on_progress (void *opaque, h3_phase phase, int done, int total)
{
  GstH3VideoSrc *self = opaque;
  gint percent = gst_h3_phase_percent (phase, done, total);
  gboolean cancel;

  GstH3EosPlan eos = GST_H3_EOS_NONE;
  gdouble first_in = -1.0;

  GST_H3_VIDEO_SRC_LOCK (self);
  cancel = self->cancel;
  if (phase == H3_PHASE_DENOISE && done == 0)
    self->denoise_start_us = g_get_monotonic_time ();
  self->phase = phase;
  self->phase_done = done;
  self->phase_total = total;
  /* An EOS before the first step: now its pace is known. */
  if (self->eos_plan == GST_H3_EOS_PENDING && !cancel) {
    eos = gst_h3_video_src_eos_decide (self, &first_in);
    self->eos_plan = eos;
  }
  GST_H3_VIDEO_SRC_UNLOCK (self);
  if (eos != GST_H3_EOS_NONE && eos != GST_H3_EOS_PENDING) {
    gst_h3_video_src_eos_apply (self, eos, first_in);
    cancel = eos == GST_H3_EOS_CUT;
  }
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
  if (!self->clip.callback_error)
    self->clip.callback_error = message;
  else
    g_free (message);
  GST_H3_VIDEO_SRC_UNLOCK (self);
  return 1;
}

static int
on_video_frames (void *opaque, int first, int count, const uint8_t * rgb)
{
  GstH3VideoSrc *self = opaque;
  gsize size;
  GstBuffer **bufs;
  gboolean stop;

  GST_H3_VIDEO_SRC_LOCK (self);
  if (self->cancel) {
    GST_H3_VIDEO_SRC_UNLOCK (self);
    return 1;
  }
  if (first != self->clip.frames_ready || count < 0
      || first + count > self->clip.plan.num_frames)
    return callback_fail (self, g_strdup_printf ("engine delivered frames "
            "[%d, %d) while %d of %d were ready", first, first + count,
            self->clip.frames_ready, self->clip.plan.num_frames));
  size = (gsize) self->clip.plan.width * self->clip.plan.height * 3;
  GST_H3_VIDEO_SRC_UNLOCK (self);

  /* The first frames are about to flow, so the sinks will preroll: the
   * `generate` operation ends here, before they can (gst-launch-1.0 holds
   * a prerolled pipeline in PAUSED while a progress operation is open, and
   * the encoders would wait for the rest of the decode). The decode goes
   * on as h3videosrc/step messages, to 100 %, then h3videosrc/done. */
  if (first == 0 && count > 0)
    gst_h3_video_src_post_progress (self, &self->generate_open,
        GST_PROGRESS_TYPE_COMPLETE, "generate",
        gst_h3_phase_percent (H3_PHASE_DECODE_VIDEO, 0, 1),
        "First frames decoded: streaming while the video decodes");

  /* Copy outside the lock: the pad tasks keep pushing meanwhile. */
  bufs = g_new (GstBuffer *, MAX (count, 1));
  for (gint i = 0; i < count; i++) {
    bufs[i] = gst_buffer_new_allocate (NULL, size, NULL);
    gst_buffer_fill (bufs[i], 0, rgb + (gsize) i * size, size);
  }

  GST_H3_VIDEO_SRC_LOCK (self);
  for (gint i = 0; i < count; i++)
    self->clip.frames[first + i] = bufs[i];
  self->clip.frames_ready = first + count;
  /* An application EOS came first and waited for these: stop here. */
  stop = self->eos_requested
      && self->clip.frames_ready < self->clip.plan.num_frames;
  GST_H3_VIDEO_SRC_BROADCAST (self);
  GST_H3_VIDEO_SRC_UNLOCK (self);
  g_free (bufs);
  GST_LOG_OBJECT (self, "frames %d..%d decoded", first, first + count - 1);
  if (stop)
    GST_INFO_OBJECT (self, "end of stream: the clip ends after frame %d",
        first + count - 1);
  return stop ? 1 : 0;
}

static int
on_audio_samples (void *opaque, int64_t first, int64_t count,
    const float *interleaved)
{
  GstH3VideoSrc *self = opaque;
  gint64 end, keep;

  GST_H3_VIDEO_SRC_LOCK (self);
  if (self->cancel) {
    GST_H3_VIDEO_SRC_UNLOCK (self);
    return 1;
  }
  if (first != self->clip.audio_delivered || count < 0)
    return callback_fail (self, g_strdup_printf ("engine delivered samples "
            "from %" G_GINT64_FORMAT " while %" G_GINT64_FORMAT " were "
            "delivered", (gint64) first, self->clip.audio_delivered));
  self->clip.audio_delivered = first + count;
  /* Samples past the end of the video are trimmed. */
  end = MIN (first + count, self->clip.audio_len);
  keep = end - first;
  if (keep > 0)
    memcpy (self->clip.samples + first * 2, interleaved,
        keep * 2 * sizeof (gfloat));
  self->clip.audio_ready = MAX (self->clip.audio_ready, end);
  GST_H3_VIDEO_SRC_BROADCAST (self);
  GST_H3_VIDEO_SRC_UNLOCK (self);
  GST_LOG_OBJECT (self, "samples %" G_GINT64_FORMAT "+%" G_GINT64_FORMAT
      " decoded", (gint64) first, (gint64) count);
  return 0;
}

/* ---- the generation thread ----------------------------------------------- */

/* Live mode: remembers how long this shape took to generate, for the
 * latency estimate, and tells the pipeline when the estimate changed (it
 * queries the latency again: gst-launch-1.0 and playbin do). */
static void
worker_note_generation_time (GstH3VideoSrc * self, gdouble seconds)
{
  gchar *shape = gst_h3_settings_shape (&self->run);
  GstClockTime before, after;

  before = gst_h3_video_src_latency (self);
  if (gst_h3_engine_is_shared (self->engine))
    gst_h3_engine_note_time (self->engine, shape, seconds);
  GST_H3_VIDEO_SRC_LOCK (self);
  g_free (self->measured_shape);
  self->measured_shape = shape;
  self->measured_seconds = seconds;
  GST_H3_VIDEO_SRC_UNLOCK (self);
  after = gst_h3_video_src_latency (self);
  if (after != before) {
    GST_INFO_OBJECT (self, "live latency now %" GST_TIME_FORMAT " (the clip "
        "took %.3f s)", GST_TIME_ARGS (after), seconds);
    gst_element_post_message (GST_ELEMENT (self),
        gst_message_new_latency (GST_OBJECT (self)));
  }
}

/* Live mode: hands the complete clip to the pad tasks, with the running
 * time it was complete at, and makes room for the next one. Called with
 * the lock held. */
static void
live_clip_publish (GstH3VideoSrc * self)
{
  GstH3LiveClip *clip = g_new0 (GstH3LiveClip, 1);

  clip->index = self->live_clips_made++;
  clip->prompt = g_strdup (self->run.request.prompt);
  clip->seed = self->run.request.seed;
  clip->plan = self->clip.plan;
  clip->frames = self->clip.frames;
  clip->samples = self->clip.samples;
  clip->audio_len = self->clip.audio_len;
  clip->complete_rt = self->playing ? gst_h3_video_src_running_time (self) :
      GST_CLOCK_TIME_NONE;
  clip->base = GST_CLOCK_TIME_NONE;
  clip->pads_left = 2;
  g_queue_push_tail (&self->live_clips, clip);
  GST_DEBUG_OBJECT (self, "live clip %u complete at %" GST_TIME_FORMAT,
      clip->index, GST_TIME_ARGS (clip->complete_rt));
  self->clip.frames = NULL;
  self->clip.samples = NULL;
  self->clip.have_plan = FALSE;
  self->clip.frames_ready = 0;
  self->clip.audio_len = self->clip.audio_ready = 0;
  self->clip.audio_delivered = 0;
  self->clip.generated = FALSE;
}

/* Live mode: waits for the next queued prompt (cancellable) and makes it
 * the run's. FALSE when stopped. */
static gboolean
live_next_prompt (GstH3VideoSrc * self)
{
  GstH3QueuedPrompt *q = NULL;

  GST_H3_VIDEO_SRC_LOCK (self);
  while (!self->cancel && !(q = g_queue_pop_head (&self->prompt_queue)))
    GST_H3_VIDEO_SRC_WAIT (self);
  if (q) {
    /* Under the lock: the pad tasks read the prompt for their tags. */
    g_free ((gchar *) self->run.request.prompt);
    self->run.request.prompt = q->prompt;
    self->run.request.seed = q->seed;
    g_free (q);
  }
  GST_H3_VIDEO_SRC_UNLOCK (self);
  if (!q)
    return FALSE;
  GST_INFO_OBJECT (self, "next clip: \"%s\" seed %" G_GUINT64_FORMAT,
      self->run.request.prompt, self->run.request.seed);
  return TRUE;
}

/* Publishes the result of a generation that returned: the stats first,
 * then h3videosrc/done and the terminal `generate` progress, and only then
 * lets the pad tasks push EOS (generated, or generating cleared for a stop),
 * so that an application reading `stats` at EOS reads this clip's. */
static void
worker_finish (GstH3VideoSrc * self, h3_status_code rc, const h3_status * st,
    const h3_plan * plan)
{
  h3_stats stats;
  GstStructure *stats_st;
  gchar *callback_error;

  h3_engine_get_stats (gst_h3_engine_get (self->engine), &stats);
  stats_st = gst_h3_stats_structure_new (&stats);
  GST_H3_VIDEO_SRC_LOCK (self);
  if (self->stats)
    gst_structure_free (self->stats);
  self->stats = stats_st;
  callback_error = g_strdup (self->clip.callback_error);
  GST_H3_VIDEO_SRC_UNLOCK (self);

  if (rc == H3_OK) {
    gst_h3_video_src_post_done (self, "ok", &stats);
    gst_h3_video_src_post_progress (self, &self->generate_open,
        GST_PROGRESS_TYPE_COMPLETE, "generate", 100,
        "Generated %d frames in %.1f s", plan->num_frames, stats.total);
    if (self->run.is_live)
      worker_note_generation_time (self, stats.total);
    GST_H3_VIDEO_SRC_LOCK (self);
    self->clip.generated = TRUE;
    if (self->run.is_live)
      live_clip_publish (self);
  } else if (callback_error) {
    gst_h3_video_src_post_done (self, "error", &stats);
    GST_ELEMENT_ERROR (self, STREAM, FAILED,
        ("Generation failed: the engine delivered inconsistent media. This "
            "is a bug in h3core; please report it."), ("%s", callback_error));
    gst_h3_video_src_post_progress (self, &self->generate_open,
        GST_PROGRESS_TYPE_ERROR, "generate", 0, "Generation failed");
    GST_H3_VIDEO_SRC_LOCK (self);
    self->stop_streaming = self->error_posted = TRUE;
  } else if (rc == H3_ERR_CANCELLED) {
    GST_INFO_OBJECT (self, "generation cancelled");
    worker_warn_cut (self);
    gst_h3_video_src_post_done (self, "cancelled", &stats);
    gst_h3_video_src_post_progress (self, &self->generate_open,
        GST_PROGRESS_TYPE_CANCELED, "generate", 0, "Generation cancelled");
    GST_H3_VIDEO_SRC_LOCK (self);
  } else {
    gst_h3_video_src_post_done (self, "error", &stats);
    gst_h3_video_src_post_engine_error (self, GST_H3_STAGE_GENERATE, st);
    gst_h3_video_src_post_progress (self, &self->generate_open,
        GST_PROGRESS_TYPE_ERROR, "generate", 0, "Generation failed: %s",
        st->message);
    GST_H3_VIDEO_SRC_LOCK (self);
    self->stop_streaming = self->error_posted = TRUE;
  }
  /* The pads end an EOS's clip at frames_ready from now on. */
  if (self->eos_requested)
    self->eos_plan = GST_H3_EOS_CUT;
  self->generating = FALSE;
  GST_H3_VIDEO_SRC_BROADCAST (self);
  GST_H3_VIDEO_SRC_UNLOCK (self);
  g_free (callback_error);
}

/* One clip on the engine: its turn, validation, generation. FALSE when the
 * run cannot go on (stopped, or an error was posted). */
static gboolean
worker_clip (GstH3VideoSrc * self)
{
  h3_request req = gst_h3_settings_request (&self->run);
  h3_callbacks cb = { .progress = on_progress, .video_frames = on_video_frames,
    .audio_samples = on_audio_samples, .opaque = self,
    .cancel_flag = &self->cancel_flag
  };
  h3_status st;
  h3_status_code rc = H3_ERR_CANCELLED;
  h3_plan plan;
  h3_engine *engine;
  gboolean ok;

  /* FL2VA: the run's keyframes, decoded at READY->PAUSED. */
  gst_h3_keyframes_apply (self->run_keyframes, &req);
  /* One generation at a time per engine: wait for the other elements
   * sharing it (cancellable). */
  ok = gst_h3_engine_begin (self->engine, GST_OBJECT (self),
      &self->cancel_flag, on_wait_turn, self);
  worker_waited (self);
  if (!ok) {
    gst_h3_video_src_post_progress (self, &self->wait_open,
        GST_PROGRESS_TYPE_CANCELED, "wait", 0,
        "Stopped while waiting for the shared model");
    return FALSE;
  }
  gst_h3_video_src_post_progress (self, &self->wait_open,
      GST_PROGRESS_TYPE_COMPLETE, "wait", 100, "The shared model is free");
  engine = gst_h3_engine_get (self->engine);

  memset (&st, 0, sizeof st);
  /* The run's LoRAs (and strengths) on the shared engine, in our turn: the
   * engine key holds their paths alone, so elements that differ only in
   * strengths share one engine, and each run sets its own (the set in
   * force is kept at once). A refused set leaves the previous in force. */
  if (h3_engine_set_loras (engine, self->run.options.loras, &st) != H3_OK
      || h3_engine_validate (engine, &req, &plan, &st) != H3_OK) {
    gst_h3_video_src_post_engine_error (self, GST_H3_STAGE_VALIDATE, &st);
    worker_stop_streaming (self, TRUE);
    goto end;
  }
  if (!worker_publish_plan (self, &plan)) {
    worker_stop_streaming (self, TRUE);
    goto end;
  }

  GST_H3_VIDEO_SRC_LOCK (self);
  self->generating = !self->cancel;
  GST_H3_VIDEO_SRC_UNLOCK (self);
  if (!self->generating)
    goto end;
  gst_h3_video_src_post_progress (self, &self->generate_open,
      GST_PROGRESS_TYPE_START, "generate", 0, "Generating %d frames at %dx%d "
      "(seed %" G_GUINT64_FORMAT ", %d steps)", plan.num_frames, plan.width,
      plan.height, self->run.request.seed, plan.steps);
  memset (&st, 0, sizeof st);
  rc = h3_engine_generate (engine, &req, &cb, &st);
  worker_finish (self, rc, &st, &plan);

end:
  gst_h3_engine_end (self->engine, GST_OBJECT (self));
  return rc == H3_OK;
}

gpointer
gst_h3_video_src_worker (gpointer data)
{
  GstH3VideoSrc *self = data;
  gboolean stopped, holds_ref;

  if (!worker_ensure_engine (self, &stopped)) {
    if (!stopped)
      worker_stop_streaming (self, TRUE);
    goto done;
  }
  /* Live: clip after clip, as prompts are queued, until stopped. */
  while (worker_clip (self) && self->run.is_live && live_next_prompt (self));

done:
  worker_warn_cut (self);
  GST_H3_VIDEO_SRC_LOCK (self);
  if (self->eos_requested)
    self->eos_plan = GST_H3_EOS_CUT;
  self->worker_done = TRUE;
  self->generating = FALSE;
  holds_ref = self->worker_holds_ref;
  self->worker_exiting = holds_ref;
  GST_H3_VIDEO_SRC_BROADCAST (self);
  GST_H3_VIDEO_SRC_UNLOCK (self);
  /* The application dropped the element while this thread was posting a
   * message (dispose ran here and kept the element alive for us): drop
   * that last reference, which disposes the element, as the very last
   * thing this thread does. */
  if (holds_ref)
    gst_object_unref (self);
  return NULL;
}
