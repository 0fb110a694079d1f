/* gsth3videosrc-settings.c - the values of h3videosrc's properties: their
 * defaults, the snapshot a run takes, what they mean to the engine (model
 * directory, engine key, h3_request) and the checks that fail a bad setting
 * at the state change, before any model load. The rules themselves are
 * h3core's (h3_request_check, h3_devices_parse): the element applies them
 * and reports the engine's words. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "gsth3videosrc-private.h"

void
gst_h3_settings_init (GstH3Settings * s)
{
  memset (s, 0, sizeof *s);
  s->prompt = g_strdup (DEFAULT_PROMPT);
  s->seed = DEFAULT_SEED;
  s->width = DEFAULT_WIDTH;
  s->height = DEFAULT_HEIGHT;
  s->num_frames = DEFAULT_NUM_FRAMES;
  s->backend = DEFAULT_BACKEND;
  s->steps = DEFAULT_STEPS;
  s->model_location = g_strdup (DEFAULT_MODEL_LOCATION);
  s->adapter_location = g_strdup (DEFAULT_ADAPTER_LOCATION);
  s->compute = DEFAULT_COMPUTE;
  s->devices = g_strdup (DEFAULT_DEVICES);
  s->vsa_sparsity = DEFAULT_VSA_SPARSITY;
  s->load_format = DEFAULT_LOAD_FORMAT;
  s->dummy_adapter = DEFAULT_DUMMY_ADAPTER;
  s->precision = DEFAULT_PRECISION;
  s->memory = DEFAULT_MEMORY;
  s->max_gpu_memory = DEFAULT_MAX_GPU_MEMORY;
  s->engine_cache = DEFAULT_ENGINE_CACHE;
  s->keep_clip = DEFAULT_KEEP_CLIP;
  s->keep_clip_max_bytes = DEFAULT_KEEP_CLIP_MAX_BYTES;
  s->is_live = DEFAULT_IS_LIVE;
  s->latency = DEFAULT_LATENCY;
}

void
gst_h3_settings_clear (GstH3Settings * s)
{
  g_free (s->prompt);
  g_free (s->model_location);
  g_free (s->adapter_location);
  g_free (s->devices);
  g_free (s->image_location);
  g_free (s->last_image_location);
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
  dst->prompt = g_strdup (src->prompt);
  dst->model_location = g_strdup (src->model_location);
  dst->adapter_location = g_strdup (src->adapter_location);
  dst->devices = g_strdup (src->devices);
  dst->image_location = g_strdup (src->image_location);
  dst->last_image_location = g_strdup (src->last_image_location);
  dst->image = src->image ? gst_sample_ref (src->image) : NULL;
  dst->last_image = src->last_image ? gst_sample_ref (src->last_image) : NULL;
}

const gchar *
gst_h3_settings_model_dir (const GstH3Settings * s)
{
  return s->model_location && *s->model_location ? s->model_location :
      h3_default_model_dir ();
}

/* What defines an engine: elements with the same key share one (unless
 * engine-cache=false), and a change means another engine. */
gchar *
gst_h3_settings_engine_key (const GstH3Settings * s)
{
  return g_strdup_printf ("%s\n%s\n%d\n%s\n%d\n%d\n%d\n%" G_GUINT64_FORMAT "\n%d",
      gst_h3_settings_model_dir (s),
      s->adapter_location ? s->adapter_location : "", (int) s->compute,
      s->devices ? s->devices : "auto", (int) s->load_format,
      (int) s->dummy_adapter, (int) s->memory, s->max_gpu_memory,
      (int) s->precision);
}

/* What a generation's time depends on besides the engine: the live
 * latency estimate reuses a measurement only for the same shape. */
gchar *
gst_h3_settings_shape (const GstH3Settings * s)
{
  gboolean first = (s->image_location && *s->image_location) || s->image;
  gboolean last = (s->last_image_location && *s->last_image_location)
      || s->last_image;

  return g_strdup_printf ("%dx%d %d frames %u steps backend %d %g "
      "keyframes %d%d", s->width, s->height, h3_align_frames (s->num_frames),
      s->steps, (int) s->backend, s->vsa_sparsity, first, last);
}

/* Stream ids must be deterministic (the same request gives the same ids)
 * and distinct per pad: a hash of everything that defines the clip, the
 * keyframes by their pixels' digests (NULL keyframes: none), so the same
 * picture gives the same id whether it came from a file or a sample. */
gchar *
gst_h3_settings_stream_id (const GstH3Settings * s,
    const GstH3Keyframe * keyframes, const gchar * pad_name)
{
  gchar *desc, *hash, *id, *frames = NULL;
  gboolean first = keyframes && keyframes[0].present;
  gboolean last = keyframes && keyframes[1].present;

  /* T2VA keeps the ids it always had. */
  if (first || last)
    frames = g_strdup_printf ("\nfirst %s\nlast %s",
        first ? keyframes[0].digest : "-", last ? keyframes[1].digest : "-");
  /* fp8 makes another clip; bf16 keeps the ids it always had */
  if (s->precision == GST_H3_PRECISION_FP8) {
    gchar *with = g_strdup_printf ("%s\nprecision fp8", frames ? frames : "");
    g_free (frames);
    frames = with;
  }
  desc = g_strdup_printf ("%s\n%" G_GUINT64_FORMAT "\n%dx%d\n%d\n%u\n%d\n%g\n"
      "%s\n%s\n%d\n%d%s", s->prompt ? s->prompt : "",
      s->seed, s->width, s->height, h3_align_frames (s->num_frames), s->steps,
      (int) s->backend, s->vsa_sparsity, gst_h3_settings_model_dir (s),
      s->adapter_location ? s->adapter_location : "", (int) s->load_format,
      (int) s->dummy_adapter, frames ? frames : "");
  g_free (frames);
  hash = g_compute_checksum_for_string (G_CHECKSUM_SHA256, desc, -1);
  id = g_strdup_printf ("h3videosrc/%.16s/%s", hash, pad_name);
  g_free (hash);
  g_free (desc);
  return id;
}

/* The `compute` property as the engine's h3_compute. */
h3_compute
gst_h3_settings_compute (const GstH3Settings * s)
{
  switch (s->compute) {
    case GST_H3_COMPUTE_CPU:
      return H3_COMPUTE_CPU;
    case GST_H3_COMPUTE_CUDA:
      return H3_COMPUTE_CUDA;
    default:
      return H3_COMPUTE_AUTO;
  }
}

/* The engine options of the model settings (without the log sink, which
 * the engine cache sets). The strings point into s. */
void
gst_h3_settings_engine_options (const GstH3Settings * s,
    h3_engine_options * opt)
{
  *opt = h3_engine_options_default ();
  opt->model_dir = gst_h3_settings_model_dir (s);
  opt->adapter_path = s->adapter_location && *s->adapter_location ?
      s->adapter_location : NULL;
  opt->compute = gst_h3_settings_compute (s);
  opt->devices = s->devices;
  opt->load_format = s->load_format == GST_H3_LOAD_FORMAT_DUMMY ?
      H3_LOAD_DUMMY : H3_LOAD_SAFETENSORS;
  opt->dummy_adapter = (h3_dummy_adapter) s->dummy_adapter;
  opt->precision = s->precision == GST_H3_PRECISION_FP8 ?
      H3_PRECISION_FP8 : H3_PRECISION_BF16;
  opt->memory = s->memory == GST_H3_MEMORY_STREAM ? H3_MEMORY_STREAM :
      s->memory == GST_H3_MEMORY_RESIDENT ? H3_MEMORY_RESIDENT :
      H3_MEMORY_AUTO;
  opt->max_gpu_memory = s->max_gpu_memory;
}

h3_request
gst_h3_settings_request (const GstH3Settings * s)
{
  h3_request r = h3_request_default ();

  r.prompt = s->prompt;
  r.seed = s->seed;
  r.width = s->width;
  r.height = s->height;
  r.num_frames = s->num_frames;
  r.steps = (int) s->steps;
  r.attention = s->backend == GST_H3_BACKEND_VSA ? H3_ATTENTION_VSA :
      H3_ATTENTION_DENSE;
  r.vsa_sparsity = (float) s->vsa_sparsity;
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
  h3_device_list devices;
  h3_status st;
  const gchar *dir;

  gst_h3_keyframes_apply (keyframes, &req);
  memset (&st, 0, sizeof st);
  if (h3_request_check (&req, &st) != H3_OK
      || h3_devices_parse (s->devices, gst_h3_settings_compute (s), &devices,
          &st) != H3_OK) {
    gst_h3_video_src_post_settings_error (self, &st);
    return FALSE;
  }
  dir = gst_h3_settings_model_dir (s);
  if (!g_file_test (dir, G_FILE_TEST_IS_DIR)) {
    if (s->model_location && *s->model_location)
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
  if (s->adapter_location && *s->adapter_location
      && !g_file_test (s->adapter_location, G_FILE_TEST_EXISTS)) {
    GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND,
        ("Adapter not found: '%s' does not exist. Set adapter-location to a "
            "FastH3 .safetensors file or leave it unset.",
            s->adapter_location), ("adapter-location '%s' does not exist",
            s->adapter_location));
    return FALSE;
  }
  gst_h3_settings_engine_options (s, &opt);
  if (h3_engine_preflight (&opt, &req, pf, &st) != H3_OK) {
    gst_h3_video_src_post_preflight_error (self, &st);
    return FALSE;
  }
  GST_DEBUG_OBJECT (self, "preflight: %d Hz audio, adapter %s", pf->sample_rate,
      pf->has_adapter ? (pf->adapter_vsa ? "vsa" : "dense") : "none");
  return TRUE;
}
