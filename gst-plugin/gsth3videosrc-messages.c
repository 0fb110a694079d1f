/* gsth3videosrc-messages.c - what h3videosrc tells the application: the
 * progress messages (`load`, `generate`), the `h3videosrc/step` and
 * `h3videosrc/done` element messages, the `stats` and `capabilities`
 * structures, and the engine's failures as GStreamer errors. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include "gsth3videosrc-private.h"
#include "gsth3videosrc-messages.h"

/* ---- progress ------------------------------------------------------------ */

/* Posts a GST_MESSAGE_PROGRESS. START opens the operation; CONTINUE is
 * dropped unless it is open; the first terminal message closes it and
 * later ones are dropped. gst-launch waits for open operations before going
 * to PLAYING, so every START must get exactly one terminal message. */
void
gst_h3_video_src_post_progress (GstH3VideoSrc * self, gboolean * open,
    GstProgressType type, const gchar * code, gint percent,
    const gchar * format, ...)
{
  GstMessage *msg;
  gchar *text;
  va_list args;

  g_rec_mutex_lock (&self->progress_lock);
  if (type == GST_PROGRESS_TYPE_START) {
    *open = TRUE;
  } else if (!*open) {
    g_rec_mutex_unlock (&self->progress_lock);
    return;
  } else if (type != GST_PROGRESS_TYPE_CONTINUE) {
    *open = FALSE;
  }
  va_start (args, format);
  text = g_strdup_vprintf (format, args);
  va_end (args);
  msg = gst_message_new_progress (GST_OBJECT (self), type, code, text);
  /* gst_message_new_progress() only knows 0 and 100. */
  gst_structure_set (gst_message_writable_structure (msg), "percent",
      G_TYPE_INT, CLAMP (percent, 0, 100), NULL);
  GST_DEBUG_OBJECT (self, "progress %s: %s (%d%%)", code, text, percent);
  g_free (text);
  gst_element_post_message (GST_ELEMENT (self), msg);
  g_rec_mutex_unlock (&self->progress_lock);
}

/* Overall percent of a generation: the engine runs text, denoise, audio
 * decode, video decode in that order; denoising dominates. */
gint
gst_h3_phase_percent (h3_phase phase, gint done, gint total)
{
  gdouble f = total > 0 ? (gdouble) done / total : 1.0;

  switch (phase) {
    case H3_PHASE_LOAD:
      return 0;
    case H3_PHASE_TEXT:
      return (gint) (2 * f);
    case H3_PHASE_DENOISE:
      return 2 + (gint) (88 * f);
    case H3_PHASE_DECODE_AUDIO:
      return 90 + (gint) (2 * f);
    case H3_PHASE_DECODE_VIDEO:
      return 92 + (gint) (8 * f);
    case H3_PHASE_DONE:
      return 100;
  }
  return 0;
}

/* ---- element messages ---------------------------------------------------- */

void
gst_h3_video_src_post_step (GstH3VideoSrc * self, h3_phase phase, gint done,
    gint total, gint percent)
{
  gint64 now = g_get_monotonic_time ();
  gdouble elapsed, eta = -1.0;
  GstStructure *st;

  GST_H3_VIDEO_SRC_LOCK (self);
  elapsed = (now - self->run_start_us) / 1e6;
  if (phase == H3_PHASE_DENOISE && done > 0)
    eta = (now - self->denoise_start_us) / 1e6 / done * (total - done);
  GST_H3_VIDEO_SRC_UNLOCK (self);
  st = gst_structure_new ("h3videosrc/step",
      "phase", G_TYPE_STRING, h3_phase_name (phase),
      "step", G_TYPE_INT, done, "total", G_TYPE_INT, total,
      "percent", G_TYPE_INT, percent,
      "elapsed", G_TYPE_DOUBLE, elapsed, "eta", G_TYPE_DOUBLE, eta, NULL);
  gst_element_post_message (GST_ELEMENT (self),
      gst_message_new_element (GST_OBJECT (self), st));
}

static void
stats_set (GstStructure * st, const h3_stats * stats)
{
  gst_structure_set (st,
      "load", G_TYPE_DOUBLE, stats->load,
      "text", G_TYPE_DOUBLE, stats->text,
      "denoise", G_TYPE_DOUBLE, stats->denoise,
      "decode-video", G_TYPE_DOUBLE, stats->decode_video,
      "decode-audio", G_TYPE_DOUBLE, stats->decode_audio,
      "total", G_TYPE_DOUBLE, stats->total,
      "per-step", G_TYPE_DOUBLE, stats->per_step,
      "steps", G_TYPE_INT, stats->steps,
      "compute", G_TYPE_STRING, stats->compute,
      "fallback", G_TYPE_STRING, stats->fallback,
      "random-weights", G_TYPE_BOOLEAN, stats->random_weights != 0,
      "precision", G_TYPE_STRING, stats->precision,
      "loras", G_TYPE_STRING, stats->loras,
      "peak-bytes", G_TYPE_UINT64, (guint64) stats->peak_bytes,
      "memory", G_TYPE_STRING, stats->memory,
      "memory-reason", G_TYPE_STRING, stats->memory_reason,
      "host-pinned-bytes", G_TYPE_UINT64, (guint64) stats->host_pinned_bytes,
      "host-pageable-bytes", G_TYPE_UINT64,
      (guint64) stats->host_pageable_bytes, NULL);
}

/* The `stats` property: h3videosrc/stats. */
GstStructure *
gst_h3_stats_structure_new (const h3_stats * stats)
{
  GstStructure *st = gst_structure_new_empty ("h3videosrc/stats");

  stats_set (st, stats);
  return st;
}

void
gst_h3_video_src_post_done (GstH3VideoSrc * self, const gchar * result,
    const h3_stats * stats)
{
  GstStructure *st = gst_structure_new ("h3videosrc/done",
      "result", G_TYPE_STRING, result,
      "frames", G_TYPE_INT, gst_h3_clip_plan (&self->clip)->num_frames,
      "width", G_TYPE_INT, gst_h3_clip_plan (&self->clip)->width,
      "height", G_TYPE_INT, gst_h3_clip_plan (&self->clip)->height,
      "seed", G_TYPE_UINT64, self->run.request.seed, NULL);

  stats_set (st, stats);
  gst_element_post_message (GST_ELEMENT (self),
      gst_message_new_element (GST_OBJECT (self), st));
}

/* ---- capabilities -------------------------------------------------------- */

static gboolean
field_name_valid (const gchar * name)
{
  if (!g_ascii_isalpha (*name))
    return FALSE;
  for (; *name; name++)
    if (!g_ascii_isalnum (*name) && *name != '-')
      return FALSE;
  return TRUE;
}

/* The `capabilities` property. h3_capabilities_describe() gives text; lines
 * of the form `key: value` or `key=value` become string fields, and the
 * whole text stays in `description`. */
GstStructure *
gst_h3_capabilities_structure_new (void)
{
  GstStructure *st = gst_structure_new_empty ("h3videosrc/capabilities");
  char *text = h3_capabilities_describe ();
  gchar **lines;

  if (!text)
    return st;
  gst_structure_set (st, "description", G_TYPE_STRING, text, NULL);
  lines = g_strsplit_set (text, "\n;", -1);
  for (gchar ** l = lines; *l; l++) {
    gchar *sep = strpbrk (*l, ":=");
    gchar *key, *val;
    if (!sep)
      continue;
    key = g_strstrip (g_strndup (*l, sep - *l));
    val = g_strstrip (g_strdup (sep + 1));
    g_strdelimit (key, " _", '-');
    if (field_name_valid (key) && g_strcmp0 (key, "description") != 0)
      gst_structure_set (st, key, G_TYPE_STRING, val, NULL);
    g_free (key);
    g_free (val);
  }
  g_strfreev (lines);
  free (text);
  return st;
}

/* ---- errors -------------------------------------------------------------- */

static const gchar *
stage_name (GstH3Stage stage)
{
  switch (stage) {
    case GST_H3_STAGE_LOAD:
      return "loading the model";
    case GST_H3_STAGE_VALIDATE:
      return "checking the settings";
    case GST_H3_STAGE_GENERATE:
      return "generating";
  }
  return "?";
}

/* Maps an h3core failure to the GStreamer error domain an application
 * expects, with a hint that tells the user what to change. */
void
gst_h3_video_src_post_engine_error (GstH3VideoSrc * self, GstH3Stage stage,
    const h3_status * st)
{
  GQuark domain;
  gint code;
  const gchar *hint;

  switch (st->code) {
    case H3_ERR_NOT_FOUND:
      domain = GST_RESOURCE_ERROR;
      code = GST_RESOURCE_ERROR_NOT_FOUND;
      hint = "Set model-location to a complete MiniMax-H3 directory "
          "(diffusers layout or FL2VA/), or unset it for the embedded model.";
      break;
    case H3_ERR_IO:
      domain = GST_RESOURCE_ERROR;
      code = GST_RESOURCE_ERROR_OPEN_READ;
      hint = "Check that the model files are readable and not truncated.";
      break;
    case H3_ERR_FORMAT:
      domain = stage == GST_H3_STAGE_GENERATE ? GST_STREAM_ERROR :
          GST_RESOURCE_ERROR;
      code = stage == GST_H3_STAGE_GENERATE ? GST_STREAM_ERROR_FAILED :
          GST_RESOURCE_ERROR_OPEN_READ;
      hint = "A file does not match what h3core expects: check that "
          "model-location and adapter-location point at complete MiniMax-H3 "
          "files, or download them again.";
      break;
    case H3_ERR_INVALID_ARGUMENT:
    case H3_ERR_UNSUPPORTED:
      domain = GST_LIBRARY_ERROR;
      code = GST_LIBRARY_ERROR_SETTINGS;
      hint = "Change the property named above.";
      break;
    case H3_ERR_DEVICE:
      domain = GST_RESOURCE_ERROR;
      code = GST_RESOURCE_ERROR_FAILED;
      hint = stage == GST_H3_STAGE_LOAD ?
          "The GPU could not be used: check the NVIDIA driver (nvidia-smi) "
          "and the devices property, or set compute=cpu." :
          "A device failed: check the GPU (nvidia-smi, the driver's log), "
          "try other devices, or compute=cpu.";
      break;
    case H3_ERR_NONFINITE:
      /* At load a weight holds NaN or Inf (the message names the file and
       * the tensor): the files are at fault. While generating a stage's
       * output went non-finite: the clip is refused, never sent black. */
      domain = stage == GST_H3_STAGE_LOAD ? GST_RESOURCE_ERROR :
          GST_STREAM_ERROR;
      code = stage == GST_H3_STAGE_LOAD ? GST_RESOURCE_ERROR_OPEN_READ :
          GST_STREAM_ERROR_FAILED;
      hint = stage == GST_H3_STAGE_LOAD ?
          "A model or adapter file holds NaN or Inf values: download it "
          "again, or leave adapter-location unset." :
          "The computation overflowed at the stage named above: the model "
          "or adapter files may be damaged (download them again); "
          "compute=cpu computes in float32.";
      break;
    case H3_ERR_NO_MEMORY:
      domain = GST_RESOURCE_ERROR;
      code = GST_RESOURCE_ERROR_FAILED;
      hint = stage == GST_H3_STAGE_LOAD ?
          "The model does not fit: spread it over more GPUs (devices), or "
          "use compute=cpu." :
          "Out of memory: try fewer frames or a smaller size, more devices, "
          "or compute=cpu.";
      break;
    default:
      domain = stage == GST_H3_STAGE_LOAD ? GST_LIBRARY_ERROR :
          GST_STREAM_ERROR;
      code = stage == GST_H3_STAGE_LOAD ? GST_LIBRARY_ERROR_INIT :
          GST_STREAM_ERROR_FAILED;
      hint = "This looks like a bug in h3core: please report it with the "
          "output of GST_DEBUG=h3videosrc:6.";
      break;
  }
  gst_element_message_full_with_details (GST_ELEMENT (self),
      GST_MESSAGE_ERROR, domain, code,
      g_strdup_printf ("Failed while %s: %s. %s", stage_name (stage),
          st->message, hint),
      g_strdup_printf ("h3core %s while %s: %s",
          h3_status_code_name (st->code), stage_name (stage), st->message),
      __FILE__, GST_FUNCTION, __LINE__,
      gst_structure_new ("details", "h3-status", G_TYPE_STRING,
          h3_status_code_name (st->code), NULL));
}

/* A setting that h3core's model-free rules refuse (h3_request_check,
 * h3_devices_parse), found at the state change: LIBRARY/SETTINGS in the
 * engine's own words, which name the property and the value. */
void
gst_h3_video_src_post_settings_error (GstH3VideoSrc * self,
    const h3_status * st)
{
  gst_element_message_full_with_details (GST_ELEMENT (self),
      GST_MESSAGE_ERROR, GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS,
      g_strdup (st->message),
      g_strdup_printf ("h3core %s while checking the settings: %s",
          h3_status_code_name (st->code), st->message),
      __FILE__, GST_FUNCTION, __LINE__,
      gst_structure_new ("details", "h3-status", G_TYPE_STRING,
          h3_status_code_name (st->code), NULL));
}

/* What h3_engine_preflight refused at the state change, before any load:
 * its message names the setting and what to do; the domain says which kind
 * of problem it is. */
void
gst_h3_video_src_post_preflight_error (GstH3VideoSrc * self,
    const h3_status * st)
{
  GQuark domain;
  gint code;
  const gchar *hint = "";

  switch (st->code) {
    case H3_ERR_INVALID_ARGUMENT:
    case H3_ERR_UNSUPPORTED:
      domain = GST_LIBRARY_ERROR;
      code = GST_LIBRARY_ERROR_SETTINGS;
      break;
    case H3_ERR_DEVICE:
      /* No driver, no GPU, no such GPU: the device is not there. */
      domain = GST_RESOURCE_ERROR;
      code = GST_RESOURCE_ERROR_NOT_FOUND;
      break;
    case H3_ERR_NOT_FOUND:
      domain = GST_RESOURCE_ERROR;
      code = GST_RESOURCE_ERROR_NOT_FOUND;
      hint = " Set model-location to a complete MiniMax-H3 directory "
          "(diffusers layout or FL2VA/), or unset it for the embedded model.";
      break;
    case H3_ERR_FORMAT:
    case H3_ERR_IO:
      domain = GST_RESOURCE_ERROR;
      code = GST_RESOURCE_ERROR_OPEN_READ;
      hint = " Check that model-location and adapter-location point at "
          "complete MiniMax-H3 and FastH3 files, or download them again.";
      break;
    default:
      domain = GST_LIBRARY_ERROR;
      code = GST_LIBRARY_ERROR_INIT;
      hint = " This looks like a bug in h3core: please report it with the "
          "output of GST_DEBUG=h3videosrc:6.";
      break;
  }
  gst_element_message_full_with_details (GST_ELEMENT (self),
      GST_MESSAGE_ERROR, domain, code,
      g_strdup_printf ("%s.%s", st->message, hint),
      g_strdup_printf ("h3core %s before loading (h3_engine_preflight): %s",
          h3_status_code_name (st->code), st->message),
      __FILE__, GST_FUNCTION, __LINE__,
      gst_structure_new ("details", "h3-status", G_TYPE_STRING,
          h3_status_code_name (st->code), NULL));
}
