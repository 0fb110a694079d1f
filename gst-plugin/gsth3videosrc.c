/* gsth3videosrc.c - h3videosrc: text prompt -> raw video + raw audio.
 *
 * The element is a GstElement with two ALWAYS source pads. It holds no model
 * code: it drives the h3core engine (h3.h) from a worker thread and streams
 * what the engine's callbacks deliver.
 *
 *   READY->PAUSED  snapshot the properties, check them, start one pad task
 *                  per pad and the worker thread.
 *   worker         open the engine (only when the model settings changed),
 *                  validate the request into a plan, generate. Callbacks
 *                  store decoded frames and samples in the run's clip and
 *                  wake the pad tasks.
 *   pad tasks      each pushes its own stream at downstream's pace:
 *                  stream-start, caps, segment, collection, tags, then one
 *                  buffer per video frame (audio sliced per video frame),
 *                  then EOS. One blocked branch never stalls the other.
 *   PAUSED->READY  cancel the engine, wake and stop the tasks; the worker is
 *                  not joined here (a denoising step can take seconds), but
 *                  at the next start or on dispose.
 *
 * Timestamps come from frame and sample counters, never from accumulated
 * durations, so the streams cannot drift apart. */

/**
 * SECTION:element-h3videosrc
 * @title: h3videosrc
 *
 * Generates a video clip and its stereo soundtrack from a text prompt with
 * MiniMax-H3, a joint audio-video diffusion transformer. The element has two
 * always source pads: `video` (RGB frames at 24 fps) and `audio` (32-bit
 * float interleaved stereo at the model's sample rate). The clip is
 * generated once per run; frames are pushed as the engine decodes them.
 *
 * It is not a live source: timestamps start at 0 and the pipeline prerolls
 * once the first decoded media arrive, which can take minutes with the full
 * model. Put a `queue` on each branch and size it for the encoder's latency
 * (see docs/ELEMENT.md).
 *
 * Without `model-location` the element runs the small embedded test model,
 * which produces noise-like media in seconds on a CPU: use it to check a
 * pipeline, then point `model-location` at a MiniMax-H3 download.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 -e h3videosrc prompt="a red fox running in snow" name=s \
 *     s.video ! queue ! videoconvert ! x264enc ! h264parse ! mux. \
 *     s.audio ! queue ! audioconvert ! avenc_aac ! mux. \
 *     mp4mux name=mux ! filesink location=fox.mp4
 * ]|
 * Generates 124 frames (about 5 s) at 1280x736 and writes an MP4 file.
 * |[
 * gst-launch-1.0 -e h3videosrc prompt="waves on a beach" width=64 height=32 \
 *     num-frames=22 steps=2 name=s \
 *     s.video ! queue ! matroskamux name=mux ! filesink location=beach.mkv \
 *     s.audio ! queue ! mux.
 * ]|
 * A small, fast clip with raw video and audio in Matroska.
 *
 * ## Messages
 *
 * * `GST_MESSAGE_PROGRESS` with code `load` (engine opened) and `generate`
 *   (START, CONTINUE with a `percent` field for the prompt, every denoising
 *   step and every decode window, COMPLETE right before the first buffer,
 *   CANCELED when stopped, ERROR after an error message).
 * * Element message `h3videosrc/step` for every denoising step and decode
 *   window: `phase`, `step`, `total`, `percent`, `elapsed`, `eta`.
 * * Element message `h3videosrc/done` at the end of each generation with
 *   the `result` and the stage timings.
 * * A `GstStreamCollection` with the two streams, before any data.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include <gst/base/gstflowcombiner.h>

#include "gsth3videosrc.h"
#include "h3.h"

GST_DEBUG_CATEGORY_STATIC (gst_h3_video_src_debug);
#define GST_CAT_DEFAULT gst_h3_video_src_debug

#define H3_FPS 24

#define DEFAULT_PROMPT NULL
#define DEFAULT_SEED 42
#define DEFAULT_WIDTH 1280
#define DEFAULT_HEIGHT 736
#define DEFAULT_NUM_FRAMES 120
#define DEFAULT_BACKEND GST_H3_BACKEND_FA
#define DEFAULT_STEPS 0
#define DEFAULT_MODEL_LOCATION NULL
#define DEFAULT_ADAPTER_LOCATION NULL
#define DEFAULT_COMPUTE GST_H3_COMPUTE_AUTO
#define DEFAULT_DEVICES "auto"
#define DEFAULT_VSA_SPARSITY 0.9

#define MIN_SIZE 32
#define MAX_SIZE 4096
#define MAX_FRAMES 362          /* 15 s at 24 fps, the longest the model serves */
#define MAX_STEPS 1000

enum
{
  PROP_0,
  PROP_PROMPT,
  PROP_SEED,
  PROP_WIDTH,
  PROP_HEIGHT,
  PROP_NUM_FRAMES,
  PROP_ALIGNED_FRAMES,
  PROP_BACKEND,
  PROP_STEPS,
  PROP_MODEL_LOCATION,
  PROP_ADAPTER_LOCATION,
  PROP_COMPUTE,
  PROP_DEVICES,
  PROP_VSA_SPARSITY,
  PROP_CAPABILITIES,
  PROP_STATS
};

#define VIDEO_CAPS_TEMPLATE \
  "video/x-raw, format = (string) RGB, width = (int) [ 32, 4096 ], " \
  "height = (int) [ 32, 4096 ], framerate = (fraction) 24/1, " \
  "pixel-aspect-ratio = (fraction) 1/1"

#define AUDIO_CAPS_TEMPLATE \
  "audio/x-raw, format = (string) F32LE, rate = (int) [ 1, MAX ], " \
  "channels = (int) 2, layout = (string) interleaved, " \
  "channel-mask = (bitmask) 0x3"

static GstStaticPadTemplate video_template = GST_STATIC_PAD_TEMPLATE ("video",
    GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (VIDEO_CAPS_TEMPLATE));

static GstStaticPadTemplate audio_template = GST_STATIC_PAD_TEMPLATE ("audio",
    GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (AUDIO_CAPS_TEMPLATE));

/* Everything the properties configure. The element keeps one copy under the
 * object lock and snapshots it into `run` when a run starts, so property
 * changes never reach a generation in flight. */
typedef struct
{
  gchar *prompt;
  guint64 seed;
  gint width, height, num_frames;
  GstH3Backend backend;
  guint steps;
  gchar *model_location, *adapter_location;
  GstH3Compute compute;
  gchar *devices;
  gdouble vsa_sparsity;
} GstH3Settings;

/* One source pad and the position of its pad task in the run. Touched only
 * by that task, or by the state change while the task is stopped. */
typedef struct
{
  GstH3VideoSrc *self;
  GstPad *pad;
  gboolean is_video;
  gint next;                    /* next video frame, or audio slice (one per frame) */
  gboolean started;             /* sticky events pushed */
  gboolean discont;
  gboolean eos;
  GstFlowReturn last_flow;      /* of the last push */
} GstH3Output;

struct _GstH3VideoSrc
{
  GstElement parent;

  GstH3Output video, audio;

  GstH3Settings settings;       /* object lock */

  /* The engine is opened by the worker and kept across runs while the
   * model settings (engine_key) stay the same. Only the worker uses it;
   * the pointer is published under `lock` so stop can cancel it. */
  h3_engine *engine;
  gchar *engine_key;

  GThread *worker;
  GstH3Settings run;            /* read-only while the worker runs */
  gint run_frames;              /* aligned frame count of the run */

  /* The run; guarded by `lock`, changes broadcast on `cond`. */
  GMutex lock;
  GCond cond;
  gboolean running;             /* between READY->PAUSED and PAUSED->READY */
  gboolean flushing;            /* tasks must return at once */
  gboolean cancel;              /* the generation must stop */
  gboolean eos_requested;       /* application EOS: push EOS now */
  guint32 eos_seqnum;
  gboolean stop_streaming;      /* fatal error: push EOS and stop */
  gboolean error_posted;
  gboolean worker_done;
  gboolean have_plan;
  h3_plan plan;
  GstBuffer **frames;           /* plan.num_frames; NULL once pushed */
  gint frames_ready;
  gfloat *samples;              /* audio_len stereo frames, zero padded */
  gint64 audio_len, audio_ready, audio_delivered;
  gboolean generated;           /* the engine returned H3_OK */
  gchar *callback_error;        /* the engine broke the callback contract */
  gint64 run_start_us, denoise_start_us;
  GstStructure *stats;

  /* Progress bookkeeping: each START gets exactly one terminal message. */
  GRecMutex progress_lock;
  gboolean load_open, generate_open;

  /* Identity of the run's streams; written at start, then read-only. */
  guint group_id;
  guint32 segment_seqnum;
  gchar *video_stream_id, *audio_stream_id;
  GstStream *video_stream, *audio_stream;
  GstStreamCollection *collection;

  GstFlowCombiner *combiner;    /* object lock */
  guint32 last_seek_seqnum;
};

#define parent_class gst_h3_video_src_parent_class
G_DEFINE_TYPE (GstH3VideoSrc, gst_h3_video_src, GST_TYPE_ELEMENT);
GST_ELEMENT_REGISTER_DEFINE (h3videosrc, "h3videosrc", GST_RANK_NONE,
    GST_TYPE_H3_VIDEO_SRC);

static void gst_h3_video_src_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec);
static void gst_h3_video_src_get_property (GObject * object, guint prop_id,
    GValue * value, GParamSpec * pspec);
static void gst_h3_video_src_dispose (GObject * object);
static void gst_h3_video_src_finalize (GObject * object);
static GstStateChangeReturn gst_h3_video_src_change_state (GstElement *
    element, GstStateChange transition);
static gboolean gst_h3_video_src_send_event (GstElement * element,
    GstEvent * event);
static gboolean gst_h3_video_src_src_event (GstPad * pad, GstObject * parent,
    GstEvent * event);
static gboolean gst_h3_video_src_src_query (GstPad * pad, GstObject * parent,
    GstQuery * query);
static gboolean gst_h3_video_src_activate_mode (GstPad * pad,
    GstObject * parent, GstPadMode mode, gboolean active);
static void gst_h3_video_src_loop (gpointer user_data);

/* ---- enums ---------------------------------------------------------------- */

GType
gst_h3_backend_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_H3_BACKEND_FA, "Dense attention (FastH3 dense adapter when given)",
        "fa"},
    {GST_H3_BACKEND_VSA,
        "VSA-H3 block-sparse attention (FastH3 VSA adapter; experimental)",
        "vsa"},
    {0, NULL, NULL}
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstH3Backend", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

GType
gst_h3_compute_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_H3_COMPUTE_AUTO, "CUDA when a usable GPU is present, else the CPU",
        "auto"},
    {GST_H3_COMPUTE_CPU, "The CPU", "cpu"},
    {GST_H3_COMPUTE_CUDA, "CUDA GPUs (fails when none is usable)", "cuda"},
    {0, NULL, NULL}
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstH3Compute", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

/* ---- settings --------------------------------------------------------------- */

static void
settings_init (GstH3Settings * s)
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
}

static void
settings_clear (GstH3Settings * s)
{
  g_free (s->prompt);
  g_free (s->model_location);
  g_free (s->adapter_location);
  g_free (s->devices);
  memset (s, 0, sizeof *s);
}

static void
settings_copy (GstH3Settings * dst, const GstH3Settings * src)
{
  settings_clear (dst);
  *dst = *src;
  dst->prompt = g_strdup (src->prompt);
  dst->model_location = g_strdup (src->model_location);
  dst->adapter_location = g_strdup (src->adapter_location);
  dst->devices = g_strdup (src->devices);
}

static const gchar *
settings_model_dir (const GstH3Settings * s)
{
  return s->model_location && *s->model_location ? s->model_location :
      h3_default_model_dir ();
}

/* What the engine was opened with: a change means a new engine. */
static gchar *
settings_engine_key (const GstH3Settings * s)
{
  return g_strdup_printf ("%s\n%s\n%d\n%s", settings_model_dir (s),
      s->adapter_location ? s->adapter_location : "", (int) s->compute,
      s->devices ? s->devices : "auto");
}

/* Stream ids must be deterministic (the same request gives the same ids)
 * and distinct per pad: a hash of everything that defines the clip. */
static gchar *
settings_stream_id (const GstH3Settings * s, const gchar * pad_name)
{
  gchar *desc, *hash, *id;

  desc = g_strdup_printf ("%s\n%" G_GUINT64_FORMAT "\n%dx%d\n%d\n%u\n%d\n%g\n"
      "%s\n%s", s->prompt ? s->prompt : "", s->seed, s->width, s->height,
      h3_align_frames (s->num_frames), s->steps, (int) s->backend,
      s->vsa_sparsity, settings_model_dir (s),
      s->adapter_location ? s->adapter_location : "");
  hash = g_compute_checksum_for_string (G_CHECKSUM_SHA256, desc, -1);
  id = g_strdup_printf ("h3videosrc/%.16s/%s", hash, pad_name);
  g_free (hash);
  g_free (desc);
  return id;
}

static gboolean
devices_valid (const gchar * devices)
{
  gchar **parts;
  gboolean ok = TRUE;

  if (!devices || !*devices || g_strcmp0 (devices, "auto") == 0)
    return TRUE;
  parts = g_strsplit (devices, ",", -1);
  for (gchar ** p = parts; *p && ok; p++) {
    const gchar *c = g_strstrip (*p);
    if (!*c)
      ok = FALSE;
    for (; *c && ok; c++)
      ok = g_ascii_isdigit (*c);
  }
  g_strfreev (parts);
  return ok;
}

static gint
round_to_32 (gint v, gboolean up)
{
  gint r = v / 32 * 32 + (up ? 32 : 0);
  return CLAMP (r, MIN_SIZE, MAX_SIZE);
}

/* Checks what can be checked without the model, so that bad settings fail
 * the state change at once instead of after a model load. The engine's
 * h3_engine_validate() stays the authority (it also knows the model). */
static gboolean
settings_check (GstH3VideoSrc * self, const GstH3Settings * s)
{
  const gchar *dir;
  gchar *stripped;
  gboolean empty;

  stripped = g_strstrip (g_strdup (s->prompt ? s->prompt : ""));
  empty = *stripped == '\0';
  g_free (stripped);
  if (empty) {
    GST_ELEMENT_ERROR (self, LIBRARY, SETTINGS,
        ("No prompt: set the prompt property to a description of the clip, "
            "e.g. prompt=\"a red fox running in snow\"."),
        ("prompt is empty"));
    return FALSE;
  }
  if (!g_utf8_validate (s->prompt, -1, NULL)) {
    GST_ELEMENT_ERROR (self, LIBRARY, SETTINGS,
        ("The prompt is not valid UTF-8 text."), ("prompt is not UTF-8"));
    return FALSE;
  }
  if (s->width % 32 || s->height % 32) {
    gint bad = s->width % 32 ? s->width : s->height;
    GST_ELEMENT_ERROR (self, LIBRARY, SETTINGS,
        ("%s=%d is not a multiple of 32: use %d or %d.",
            s->width % 32 ? "width" : "height", bad, round_to_32 (bad, FALSE),
            round_to_32 (bad, TRUE)), ("width %d height %d", s->width,
            s->height));
    return FALSE;
  }
  if (s->width > 4 * s->height || s->height > 4 * s->width) {
    GST_ELEMENT_ERROR (self, LIBRARY, SETTINGS,
        ("%dx%d is too elongated: the aspect ratio must be between 1:4 and "
            "4:1.", s->width, s->height), ("width %d height %d", s->width,
            s->height));
    return FALSE;
  }
  if (!devices_valid (s->devices)) {
    GST_ELEMENT_ERROR (self, LIBRARY, SETTINGS,
        ("devices=\"%s\" is not valid: use \"auto\" or a comma-separated list "
            "of CUDA device numbers such as \"0,1,2,3\".", s->devices),
        ("devices '%s'", s->devices));
    return FALSE;
  }
  dir = settings_model_dir (s);
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
  return TRUE;
}

static h3_request
settings_request (const GstH3Settings * s)
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

/* ---- class ------------------------------------------------------------------ */

static void
gst_h3_video_src_class_init (GstH3VideoSrcClass * klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  const GParamFlags rw = G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
      GST_PARAM_MUTABLE_READY;
  const GParamFlags ro = G_PARAM_READABLE | G_PARAM_STATIC_STRINGS;

  GST_DEBUG_CATEGORY_INIT (gst_h3_video_src_debug, "h3videosrc", 0,
      "MiniMax-H3 text to video and audio source");

  gobject_class->set_property = gst_h3_video_src_set_property;
  gobject_class->get_property = gst_h3_video_src_get_property;
  gobject_class->dispose = gst_h3_video_src_dispose;
  gobject_class->finalize = gst_h3_video_src_finalize;

  /**
   * GstH3VideoSrc:prompt:
   *
   * What the clip shows and sounds like, in plain language (UTF-8). It must
   * not be empty: there is no default prompt.
   */
  g_object_class_install_property (gobject_class, PROP_PROMPT,
      g_param_spec_string ("prompt", "Prompt",
          "Description of the clip to generate (required)", DEFAULT_PROMPT,
          rw));

  /**
   * GstH3VideoSrc:seed:
   *
   * Seed of the initial noise. The same seed and settings give the same
   * clip, bit for bit, on the same compute backend.
   */
  g_object_class_install_property (gobject_class, PROP_SEED,
      g_param_spec_uint64 ("seed", "Seed",
          "Seed of the initial noise (same seed and settings, same clip)", 0,
          G_MAXUINT64, DEFAULT_SEED, rw));

  /**
   * GstH3VideoSrc:width:
   *
   * Frame width in pixels: a multiple of 32, with width/height between 1/4
   * and 4. The model was trained around 1280x736 and 1344x768.
   */
  g_object_class_install_property (gobject_class, PROP_WIDTH,
      g_param_spec_int ("width", "Width",
          "Frame width in pixels (multiple of 32, aspect 1:4 to 4:1)",
          MIN_SIZE, MAX_SIZE, DEFAULT_WIDTH, rw));

  /**
   * GstH3VideoSrc:height:
   *
   * Frame height in pixels: a multiple of 32, see #GstH3VideoSrc:width.
   */
  g_object_class_install_property (gobject_class, PROP_HEIGHT,
      g_param_spec_int ("height", "Height",
          "Frame height in pixels (multiple of 32, aspect 1:4 to 4:1)",
          MIN_SIZE, MAX_SIZE, DEFAULT_HEIGHT, rw));

  /**
   * GstH3VideoSrc:num-frames:
   *
   * Requested number of frames at 24 fps. The model generates 17n+5 frames,
   * so the count is aligned up (120 gives 124, anything up to 22 gives 22);
   * read #GstH3VideoSrc:aligned-frames for the count that will be produced.
   */
  g_object_class_install_property (gobject_class, PROP_NUM_FRAMES,
      g_param_spec_int ("num-frames", "Number of frames",
          "Requested number of frames at 24 fps (aligned up to 17n+5, "
          "see aligned-frames)", 1, MAX_FRAMES, DEFAULT_NUM_FRAMES, rw));

  /**
   * GstH3VideoSrc:aligned-frames:
   *
   * The number of frames the element will produce for the current
   * #GstH3VideoSrc:num-frames: the next count of the form 17n+5.
   */
  g_object_class_install_property (gobject_class, PROP_ALIGNED_FRAMES,
      g_param_spec_int ("aligned-frames", "Aligned frames",
          "Number of frames that will be produced (num-frames aligned up to "
          "17n+5)", 22, G_MAXINT, h3_align_frames (DEFAULT_NUM_FRAMES), ro));

  /**
   * GstH3VideoSrc:backend:
   *
   * Attention mode: `fa` (dense attention) or `vsa` (VSA-H3 block-sparse
   * attention, faster, experimental, needs a FastH3 VSA adapter on the full
   * model).
   */
  g_object_class_install_property (gobject_class, PROP_BACKEND,
      g_param_spec_enum ("backend", "Backend",
          "Attention mode: dense (fa) or VSA-H3 block-sparse (vsa)",
          GST_TYPE_H3_BACKEND, DEFAULT_BACKEND, rw));

  /**
   * GstH3VideoSrc:steps:
   *
   * Number of denoising passes (transformer forwards). 0 uses the model's
   * default: 49 for the base model, 4 with a FastH3 adapter. Fewer steps are
   * faster and blurrier.
   */
  g_object_class_install_property (gobject_class, PROP_STEPS,
      g_param_spec_uint ("steps", "Steps",
          "Denoising passes; 0 = the model's default (49, or 4 with a FastH3 "
          "adapter)", 0, MAX_STEPS, DEFAULT_STEPS, rw));

  /**
   * GstH3VideoSrc:model-location:
   *
   * Directory of a MiniMax-H3 model: the diffusers layout root (with
   * model_index.json, transformer/, vae/, audio_vae/, text_encoder/,
   * tokenizer/) or the native FL2VA/ folder. When unset, the embedded tiny
   * test model is used; reading the property then gives its directory.
   */
  g_object_class_install_property (gobject_class, PROP_MODEL_LOCATION,
      g_param_spec_string ("model-location", "Model location",
          "Directory of a MiniMax-H3 model (diffusers layout or FL2VA/); "
          "unset = the embedded tiny model", DEFAULT_MODEL_LOCATION,
          rw | GST_PARAM_DOC_SHOW_DEFAULT));

  /**
   * GstH3VideoSrc:adapter-location:
   *
   * A FastH3 adapter (fastvideo-lora-v2 .safetensors) fused into the model
   * when it is loaded; it makes 4 steps the default.
   */
  g_object_class_install_property (gobject_class, PROP_ADAPTER_LOCATION,
      g_param_spec_string ("adapter-location", "Adapter location",
          "FastH3 adapter (fastvideo-lora-v2 .safetensors), or unset",
          DEFAULT_ADAPTER_LOCATION, rw));

  /**
   * GstH3VideoSrc:compute:
   *
   * Where the model runs. `auto` uses CUDA when this build has it and a
   * usable GPU is present, else the CPU (the reason appears in
   * #GstH3VideoSrc:stats and #GstH3VideoSrc:capabilities).
   */
  g_object_class_install_property (gobject_class, PROP_COMPUTE,
      g_param_spec_enum ("compute", "Compute",
          "Where the model runs: auto, cpu or cuda", GST_TYPE_H3_COMPUTE,
          DEFAULT_COMPUTE, rw));

  /**
   * GstH3VideoSrc:devices:
   *
   * CUDA devices to use: "auto", or a comma-separated list of device
   * numbers such as "0,1,2,3" (the tensor-parallel degree is the count).
   */
  g_object_class_install_property (gobject_class, PROP_DEVICES,
      g_param_spec_string ("devices", "Devices",
          "CUDA devices: \"auto\" or a list such as \"0,1,2,3\"",
          DEFAULT_DEVICES, rw));

  /**
   * GstH3VideoSrc:vsa-sparsity:
   *
   * With backend=vsa, the fraction of video key tiles each query tile
   * skips. Ignored with backend=fa.
   */
  g_object_class_install_property (gobject_class, PROP_VSA_SPARSITY,
      g_param_spec_double ("vsa-sparsity", "VSA sparsity",
          "Fraction of video key tiles skipped with backend=vsa", 0.0, 0.99,
          DEFAULT_VSA_SPARSITY, rw));

  /**
   * GstH3VideoSrc:capabilities:
   *
   * What this build and machine can run (compute backends, GPUs, fa/vsa
   * availability and the reason for any fallback), as a GstStructure named
   * `h3videosrc/capabilities`. Reading it creates no CUDA context and loads
   * no model.
   */
  g_object_class_install_property (gobject_class, PROP_CAPABILITIES,
      g_param_spec_boxed ("capabilities", "Capabilities",
          "What this build and machine can run (h3videosrc/capabilities)",
          GST_TYPE_STRUCTURE, ro | GST_PARAM_DOC_SHOW_DEFAULT));

  /**
   * GstH3VideoSrc:stats:
   *
   * Stage timings of the last generation in seconds, as a GstStructure named
   * `h3videosrc/stats` (`load`, `text`, `denoise`, `decode-video`,
   * `decode-audio`, `total`, `per-step`, `steps`, `compute`, `fallback`).
   * NULL before the first generation.
   */
  g_object_class_install_property (gobject_class, PROP_STATS,
      g_param_spec_boxed ("stats", "Statistics",
          "Stage timings of the last generation (h3videosrc/stats)",
          GST_TYPE_STRUCTURE, ro | GST_PARAM_DOC_SHOW_DEFAULT));

  gst_element_class_add_static_pad_template (element_class, &video_template);
  gst_element_class_add_static_pad_template (element_class, &audio_template);
  gst_element_class_set_static_metadata (element_class,
      "MiniMax-H3 video and audio generator", "Source/Video/Audio",
      "Generates a video clip with its soundtrack from a text prompt "
      "(MiniMax-H3 through h3core)", "gst-h3 developers");

  element_class->change_state =
      GST_DEBUG_FUNCPTR (gst_h3_video_src_change_state);
  element_class->send_event = GST_DEBUG_FUNCPTR (gst_h3_video_src_send_event);

  gst_type_mark_as_plugin_api (GST_TYPE_H3_BACKEND, 0);
  gst_type_mark_as_plugin_api (GST_TYPE_H3_COMPUTE, 0);
}

static void
output_init (GstH3VideoSrc * self, GstH3Output * out,
    GstStaticPadTemplate * templ, gboolean is_video)
{
  out->self = self;
  out->is_video = is_video;
  out->pad = gst_pad_new_from_static_template (templ, templ->name_template);
  gst_pad_set_event_function (out->pad,
      GST_DEBUG_FUNCPTR (gst_h3_video_src_src_event));
  gst_pad_set_query_function (out->pad,
      GST_DEBUG_FUNCPTR (gst_h3_video_src_src_query));
  gst_pad_set_activatemode_function (out->pad,
      GST_DEBUG_FUNCPTR (gst_h3_video_src_activate_mode));
  gst_element_add_pad (GST_ELEMENT (self), out->pad);
  gst_flow_combiner_add_pad (self->combiner, out->pad);
}

static void
gst_h3_video_src_init (GstH3VideoSrc * self)
{
  settings_init (&self->settings);
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  g_rec_mutex_init (&self->progress_lock);
  self->combiner = gst_flow_combiner_new ();
  self->last_seek_seqnum = GST_SEQNUM_INVALID;
  output_init (self, &self->video, &video_template, TRUE);
  output_init (self, &self->audio, &audio_template, FALSE);
  GST_OBJECT_FLAG_SET (self, GST_ELEMENT_FLAG_SOURCE);
}

/* Frees the clip of the last run. The worker must be joined. */
static void
clip_clear (GstH3VideoSrc * self)
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

static void
streams_clear (GstH3VideoSrc * self)
{
  gst_clear_object (&self->video_stream);
  gst_clear_object (&self->audio_stream);
  gst_clear_object (&self->collection);
  g_clear_pointer (&self->video_stream_id, g_free);
  g_clear_pointer (&self->audio_stream_id, g_free);
}

/* Waits for the worker of the previous run. It was cancelled, so this
 * takes at most one denoising step (or the rest of a model load, which the
 * engine cannot interrupt). */
static void
worker_join (GstH3VideoSrc * self)
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

static void
gst_h3_video_src_dispose (GObject * object)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (object);

  g_mutex_lock (&self->lock);
  self->cancel = TRUE;
  self->flushing = TRUE;
  if (self->engine)
    h3_engine_cancel (self->engine);
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  worker_join (self);
  clip_clear (self);
  streams_clear (self);
  if (self->engine) {
    h3_engine_close (self->engine);
    self->engine = NULL;
  }
  G_OBJECT_CLASS (parent_class)->dispose (object);
}

static void
gst_h3_video_src_finalize (GObject * object)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (object);

  settings_clear (&self->settings);
  settings_clear (&self->run);
  g_free (self->engine_key);
  if (self->stats)
    gst_structure_free (self->stats);
  gst_flow_combiner_free (self->combiner);
  g_rec_mutex_clear (&self->progress_lock);
  g_cond_clear (&self->cond);
  g_mutex_clear (&self->lock);
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

/* ---- properties ----------------------------------------------------------- */

static void
set_string (gchar ** field, const GValue * value)
{
  g_free (*field);
  *field = g_value_dup_string (value);
}

static void
gst_h3_video_src_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (object);
  GstH3Settings *s = &self->settings;
  GstState state;

  GST_OBJECT_LOCK (self);
  /* GST_PARAM_MUTABLE_READY is only a hint to tools; the core does not
   * enforce it, so a change during a run is refused here (x264enc style). */
  state = GST_STATE (self);
  if (state > GST_STATE_READY && !(pspec->flags & GST_PARAM_MUTABLE_PLAYING)) {
    GST_OBJECT_UNLOCK (self);
    GST_WARNING_OBJECT (self, "property '%s' can only be changed in the NULL "
        "or READY state; ignoring the change in %s", pspec->name,
        gst_element_state_get_name (state));
    return;
  }
  switch (prop_id) {
    case PROP_PROMPT:
      set_string (&s->prompt, value);
      break;
    case PROP_SEED:
      s->seed = g_value_get_uint64 (value);
      break;
    case PROP_WIDTH:
      s->width = g_value_get_int (value);
      break;
    case PROP_HEIGHT:
      s->height = g_value_get_int (value);
      break;
    case PROP_NUM_FRAMES:
      s->num_frames = g_value_get_int (value);
      break;
    case PROP_BACKEND:
      s->backend = g_value_get_enum (value);
      break;
    case PROP_STEPS:
      s->steps = g_value_get_uint (value);
      break;
    case PROP_MODEL_LOCATION:
      set_string (&s->model_location, value);
      break;
    case PROP_ADAPTER_LOCATION:
      set_string (&s->adapter_location, value);
      break;
    case PROP_COMPUTE:
      s->compute = g_value_get_enum (value);
      break;
    case PROP_DEVICES:
      set_string (&s->devices, value);
      if (!s->devices)
        s->devices = g_strdup (DEFAULT_DEVICES);
      break;
    case PROP_VSA_SPARSITY:
      s->vsa_sparsity = g_value_get_double (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK (self);
}

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

/* h3_capabilities_describe() gives text; lines of the form `key: value` or
 * `key=value` become fields, and the whole text stays in `description`. */
static GstStructure *
capabilities_structure (void)
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

static void
gst_h3_video_src_get_property (GObject * object, guint prop_id,
    GValue * value, GParamSpec * pspec)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (object);
  GstH3Settings *s = &self->settings;

  switch (prop_id) {
    case PROP_CAPABILITIES:
      g_value_take_boxed (value, capabilities_structure ());
      return;
    case PROP_STATS:
      g_mutex_lock (&self->lock);
      g_value_set_boxed (value, self->stats);
      g_mutex_unlock (&self->lock);
      return;
    default:
      break;
  }

  GST_OBJECT_LOCK (self);
  switch (prop_id) {
    case PROP_PROMPT:
      g_value_set_string (value, s->prompt);
      break;
    case PROP_SEED:
      g_value_set_uint64 (value, s->seed);
      break;
    case PROP_WIDTH:
      g_value_set_int (value, s->width);
      break;
    case PROP_HEIGHT:
      g_value_set_int (value, s->height);
      break;
    case PROP_NUM_FRAMES:
      g_value_set_int (value, s->num_frames);
      break;
    case PROP_ALIGNED_FRAMES:
      g_value_set_int (value, h3_align_frames (s->num_frames));
      break;
    case PROP_BACKEND:
      g_value_set_enum (value, s->backend);
      break;
    case PROP_STEPS:
      g_value_set_uint (value, s->steps);
      break;
    case PROP_MODEL_LOCATION:
      g_value_set_string (value, settings_model_dir (s));
      break;
    case PROP_ADAPTER_LOCATION:
      g_value_set_string (value, s->adapter_location);
      break;
    case PROP_COMPUTE:
      g_value_set_enum (value, s->compute);
      break;
    case PROP_DEVICES:
      g_value_set_string (value, s->devices);
      break;
    case PROP_VSA_SPARSITY:
      g_value_set_double (value, s->vsa_sparsity);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK (self);
}

/* ---- messages --------------------------------------------------------------- */

/* Posts a GST_MESSAGE_PROGRESS. START opens the operation; CONTINUE is
 * dropped unless it is open; the first terminal message closes it and
 * later ones are dropped. gst-launch waits for open operations before going
 * to PLAYING, so every START must get exactly one terminal message. */
static void
post_progress (GstH3VideoSrc * self, gboolean * open, GstProgressType type,
    const gchar * code, gint percent, const gchar * format, ...)
    G_GNUC_PRINTF (6, 7);

static void
post_progress (GstH3VideoSrc * self, gboolean * open, GstProgressType type,
    const gchar * code, gint percent, const gchar * format, ...)
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
static gint
phase_percent (h3_phase phase, gint done, gint total)
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
      "fallback", G_TYPE_STRING, stats->fallback, NULL);
}

typedef enum
{
  STAGE_LOAD,
  STAGE_VALIDATE,
  STAGE_GENERATE
} GstH3Stage;

static const gchar *
stage_name (GstH3Stage stage)
{
  switch (stage) {
    case STAGE_LOAD:
      return "loading the model";
    case STAGE_VALIDATE:
      return "checking the settings";
    case STAGE_GENERATE:
      return "generating";
  }
  return "?";
}

/* Maps an h3core failure to the GStreamer error domain an application
 * expects, with a hint that tells the user what to change. */
static void
post_engine_error (GstH3VideoSrc * self, GstH3Stage stage,
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
      domain = stage == STAGE_GENERATE ? GST_STREAM_ERROR : GST_RESOURCE_ERROR;
      code = stage == STAGE_GENERATE ? GST_STREAM_ERROR_FAILED :
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
    case H3_ERR_NO_MEMORY:
      domain = GST_RESOURCE_ERROR;
      code = GST_RESOURCE_ERROR_FAILED;
      hint = "Try fewer frames or a smaller size, other devices, or "
          "compute=cpu.";
      break;
    default:
      domain = stage == STAGE_LOAD ? GST_LIBRARY_ERROR : GST_STREAM_ERROR;
      code = stage == STAGE_LOAD ? GST_LIBRARY_ERROR_INIT :
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

/* ---- worker --------------------------------------------------------------- */

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

static h3_compute
compute_mode (GstH3Compute c)
{
  switch (c) {
    case GST_H3_COMPUTE_CPU:
      return H3_COMPUTE_CPU;
    case GST_H3_COMPUTE_CUDA:
      return H3_COMPUTE_CUDA;
    default:
      return H3_COMPUTE_AUTO;
  }
}

/* Opens the engine unless the one from an earlier run fits the model
 * settings. Only the worker calls this, and runs never overlap. */
static gboolean
worker_ensure_engine (GstH3VideoSrc * self)
{
  const GstH3Settings *s = &self->run;
  gchar *key = settings_engine_key (s);
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

  opt.model_dir = settings_model_dir (s);
  opt.adapter_path = s->adapter_location && *s->adapter_location ?
      s->adapter_location : NULL;
  opt.compute = compute_mode (s->compute);
  opt.devices = s->devices;
  opt.log = engine_log;
  opt.log_opaque = self;

  post_progress (self, &self->load_open, GST_PROGRESS_TYPE_START, "load", 0,
      "Loading the model from %s", opt.model_dir);
  t0 = g_get_monotonic_time ();
  memset (&st, 0, sizeof st);
  rc = h3_engine_open (&opt, &engine, &st);
  if (rc != H3_OK) {
    post_engine_error (self, STAGE_LOAD, &st);
    post_progress (self, &self->load_open, GST_PROGRESS_TYPE_ERROR, "load",
        0, "Could not load the model: %s", st.message);
    g_free (key);
    return FALSE;
  }
  h3_engine_get_stats (engine, &stats);
  g_mutex_lock (&self->lock);
  self->engine = engine;
  g_free (self->engine_key);
  self->engine_key = key;
  g_mutex_unlock (&self->lock);
  post_progress (self, &self->load_open, GST_PROGRESS_TYPE_COMPLETE, "load",
      100, "Model loaded in %.1f s (compute: %s)",
      (g_get_monotonic_time () - t0) / 1e6, stats.compute);
  return TRUE;
}

/* The validated plan fixes the clip's geometry: size the clip, tell the
 * audio stream its rate, and wake the pad tasks so they can push caps. */
static void
worker_publish_plan (GstH3VideoSrc * self, const h3_plan * plan)
{
  GstCaps *caps;

  caps = gst_caps_new_simple ("audio/x-raw", "format", G_TYPE_STRING, "F32LE",
      "rate", G_TYPE_INT, plan->sample_rate, "channels", G_TYPE_INT, 2,
      "layout", G_TYPE_STRING, "interleaved", "channel-mask", GST_TYPE_BITMASK,
      (guint64) 0x3, NULL);
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

static void
post_step_message (GstH3VideoSrc * self, h3_phase phase, gint done,
    gint total, gint percent)
{
  gint64 now = g_get_monotonic_time ();
  gdouble elapsed, eta = -1.0;
  GstStructure *st;

  g_mutex_lock (&self->lock);
  elapsed = (now - self->run_start_us) / 1e6;
  if (phase == H3_PHASE_DENOISE && done > 0)
    eta = (now - self->denoise_start_us) / 1e6 / done * (total - done);
  g_mutex_unlock (&self->lock);
  st = gst_structure_new ("h3videosrc/step",
      "phase", G_TYPE_STRING, h3_phase_name (phase),
      "step", G_TYPE_INT, done, "total", G_TYPE_INT, total,
      "percent", G_TYPE_INT, percent,
      "elapsed", G_TYPE_DOUBLE, elapsed, "eta", G_TYPE_DOUBLE, eta, NULL);
  gst_element_post_message (GST_ELEMENT (self),
      gst_message_new_element (GST_OBJECT (self), st));
}

static void
on_progress (void *opaque, h3_phase phase, int done, int total)
{
  GstH3VideoSrc *self = opaque;
  gint percent = phase_percent (phase, done, total);
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
        post_progress (self, &self->generate_open,
            GST_PROGRESS_TYPE_CONTINUE, "generate", percent,
            "Encoding the prompt");
      break;
    case H3_PHASE_DENOISE:
      if (done == 0)
        break;
      post_progress (self, &self->generate_open, GST_PROGRESS_TYPE_CONTINUE,
          "generate", percent, "Denoising: step %d of %d", done, total);
      post_step_message (self, phase, done, total, percent);
      break;
    case H3_PHASE_DECODE_AUDIO:
    case H3_PHASE_DECODE_VIDEO:
      if (done == 0)
        break;
      post_progress (self, &self->generate_open, GST_PROGRESS_TYPE_CONTINUE,
          "generate", percent, "Decoding %s: window %d of %d",
          phase == H3_PHASE_DECODE_VIDEO ? "video" : "audio", done, total);
      post_step_message (self, phase, done, total, percent);
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

static void
worker_post_done (GstH3VideoSrc * self, const gchar * result,
    const h3_stats * stats)
{
  GstStructure *st = gst_structure_new ("h3videosrc/done",
      "result", G_TYPE_STRING, result,
      "frames", G_TYPE_INT, self->plan.num_frames,
      "width", G_TYPE_INT, self->plan.width,
      "height", G_TYPE_INT, self->plan.height,
      "seed", G_TYPE_UINT64, self->run.seed, NULL);

  stats_set (st, stats);
  gst_element_post_message (GST_ELEMENT (self),
      gst_message_new_element (GST_OBJECT (self), st));
}

static gpointer
gst_h3_video_src_worker (gpointer data)
{
  GstH3VideoSrc *self = data;
  h3_request req = settings_request (&self->run);
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
    post_engine_error (self, STAGE_VALIDATE, &st);
    worker_stop_streaming (self, TRUE);
    goto done;
  }
  worker_publish_plan (self, &plan);

  post_progress (self, &self->generate_open, GST_PROGRESS_TYPE_START,
      "generate", 0, "Generating %d frames at %dx%d (seed %" G_GUINT64_FORMAT
      ", %d steps)", plan.num_frames, plan.width, plan.height, self->run.seed,
      plan.steps);
  memset (&st, 0, sizeof st);
  rc = h3_engine_generate (self->engine, &req, &cb, &st);

  h3_engine_get_stats (self->engine, &stats);
  stats_st = gst_structure_new_empty ("h3videosrc/stats");
  stats_set (stats_st, &stats);
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
    worker_post_done (self, "ok", &stats);
    post_progress (self, &self->generate_open, GST_PROGRESS_TYPE_COMPLETE,
        "generate", 100, "Generated %d frames in %.1f s", plan.num_frames,
        stats.total);
  } else if (callback_error) {
    GST_ELEMENT_ERROR (self, STREAM, FAILED,
        ("Generation failed: the engine delivered inconsistent media. This "
            "is a bug in h3core; please report it."), ("%s", callback_error));
    worker_stop_streaming (self, TRUE);
    worker_post_done (self, "error", &stats);
    post_progress (self, &self->generate_open, GST_PROGRESS_TYPE_ERROR,
        "generate", 0, "Generation failed");
  } else if (rc == H3_ERR_CANCELLED) {
    GST_INFO_OBJECT (self, "generation cancelled");
    worker_post_done (self, "cancelled", &stats);
    post_progress (self, &self->generate_open, GST_PROGRESS_TYPE_CANCELED,
        "generate", 0, "Generation cancelled");
  } else {
    post_engine_error (self, STAGE_GENERATE, &st);
    worker_stop_streaming (self, TRUE);
    worker_post_done (self, "error", &stats);
    post_progress (self, &self->generate_open, GST_PROGRESS_TYPE_ERROR,
        "generate", 0, "Generation failed: %s", st.message);
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

/* ---- pad tasks ------------------------------------------------------------ */

static GstClockTime
frame_time (gint64 n)
{
  return gst_util_uint64_scale (n, GST_SECOND, H3_FPS);
}

/* First audio sample of the slice that goes with video frame n. */
static gint64
slice_sample (const GstH3VideoSrc * self, gint64 n)
{
  return (gint64) gst_util_uint64_scale_round (n, self->plan.sample_rate,
      H3_FPS);
}

static GstCaps *
output_caps (GstH3VideoSrc * self, GstH3Output * out)
{
  if (out->is_video)
    return gst_caps_new_simple ("video/x-raw",
        "format", G_TYPE_STRING, "RGB",
        "width", G_TYPE_INT, self->run.width,
        "height", G_TYPE_INT, self->run.height,
        "framerate", GST_TYPE_FRACTION, H3_FPS, 1,
        "pixel-aspect-ratio", GST_TYPE_FRACTION, 1, 1, NULL);
  return gst_caps_new_simple ("audio/x-raw",
      "format", G_TYPE_STRING, "F32LE",
      "rate", G_TYPE_INT, self->plan.sample_rate,
      "channels", G_TYPE_INT, 2,
      "layout", G_TYPE_STRING, "interleaved",
      "channel-mask", GST_TYPE_BITMASK, (guint64) 0x3, NULL);
}

/* Takes the next buffer of this output if its media have been decoded.
 * Called with the lock held. */
static GstBuffer *
output_take_buffer (GstH3VideoSrc * self, GstH3Output * out)
{
  gint n = out->next, frames = self->plan.num_frames;
  GstBuffer *buf;

  if (out->is_video) {
    if (n >= self->frames_ready)
      return NULL;
    buf = self->frames[n];
    self->frames[n] = NULL;
    GST_BUFFER_PTS (buf) = frame_time (n);
    GST_BUFFER_DURATION (buf) = frame_time (n + 1) - frame_time (n);
    GST_BUFFER_OFFSET (buf) = n;
    GST_BUFFER_OFFSET_END (buf) = n + 1;
  } else {
    gint64 s0 = slice_sample (self, n), s1 = slice_sample (self, n + 1);
    GstClockTime pts, end;
    gint rate = self->plan.sample_rate;

    if (self->audio_ready < s1 && !self->generated)
      return NULL;
    buf = gst_buffer_new_allocate (NULL, (s1 - s0) * 2 * sizeof (gfloat),
        NULL);
    gst_buffer_fill (buf, 0, self->samples + s0 * 2,
        (s1 - s0) * 2 * sizeof (gfloat));
    pts = gst_util_uint64_scale_round (s0, GST_SECOND, rate);
    /* The last slice ends exactly where the video ends; this moves its end
     * by less than half a sample. */
    end = n + 1 == frames ? frame_time (frames) :
        gst_util_uint64_scale_round (s1, GST_SECOND, rate);
    GST_BUFFER_PTS (buf) = pts;
    GST_BUFFER_DURATION (buf) = end - pts;
    GST_BUFFER_OFFSET (buf) = s0;
    GST_BUFFER_OFFSET_END (buf) = s1;
  }
  if (out->discont) {
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
    out->discont = FALSE;
  }
  out->next++;
  return buf;
}

/* Stream-start, caps (once the plan is known), segment, collection and
 * tags, in the order sticky events are stored. */
static gboolean
output_push_sticky (GstH3VideoSrc * self, GstH3Output * out,
    gboolean with_caps)
{
  GstEvent *ev;
  GstSegment segment;
  GstTagList *tags;
  gboolean negotiated = TRUE;

  ev = gst_event_new_stream_start (out->is_video ? self->video_stream_id :
      self->audio_stream_id);
  gst_event_set_group_id (ev, self->group_id);
  gst_event_set_stream (ev, out->is_video ? self->video_stream :
      self->audio_stream);
  gst_pad_push_event (out->pad, ev);

  if (with_caps) {
    GstCaps *caps = output_caps (self, out);

    /* Fail before the first buffer rather than after the whole clip. */
    if (gst_pad_peer_query_accept_caps (out->pad, caps)) {
      gst_pad_push_event (out->pad, gst_event_new_caps (caps));
    } else {
      GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
          ("The element linked to the %s pad does not accept %s. Put %s "
              "after that pad.", GST_PAD_NAME (out->pad),
              out->is_video ? "RGB video at 24 fps" :
              "32-bit float stereo audio",
              out->is_video ? "videoconvert (and videoscale)" :
              "audioconvert (and audioresample)"),
          ("caps %" GST_PTR_FORMAT " refused", caps));
      negotiated = FALSE;
    }
    gst_caps_unref (caps);
  }

  gst_segment_init (&segment, GST_FORMAT_TIME);
  segment.duration = frame_time (self->run_frames);
  ev = gst_event_new_segment (&segment);
  gst_event_set_seqnum (ev, self->segment_seqnum);
  gst_pad_push_event (out->pad, ev);

  gst_pad_push_event (out->pad,
      gst_event_new_stream_collection (self->collection));

  tags = gst_tag_list_new (GST_TAG_TITLE, self->run.prompt,
      GST_TAG_COMMENT, "generated by h3videosrc (MiniMax-H3)",
      GST_TAG_APPLICATION_NAME, "h3videosrc", NULL);
  gst_tag_list_set_scope (tags, GST_TAG_SCOPE_GLOBAL);
  gst_pad_push_event (out->pad, gst_event_new_tag (tags));
  out->started = TRUE;
  return negotiated;
}

static void
output_push_eos (GstH3VideoSrc * self, GstH3Output * out, guint32 seqnum)
{
  GstEvent *ev;

  if (out->eos)
    return;
  if (!out->started)
    output_push_sticky (self, out, FALSE);
  ev = gst_event_new_eos ();
  gst_event_set_seqnum (ev, seqnum);
  gst_pad_push_event (out->pad, ev);
  out->eos = TRUE;
  /* Pushing EOS makes the pad's last flow EOS, but an unlinked pad stays
   * NOT_LINKED for the combiner: if the other pad turns out unlinked too,
   * that is an error, not an end of stream. */
  GST_OBJECT_LOCK (self);
  gst_flow_combiner_update_pad_flow (self->combiner, out->pad,
      out->last_flow == GST_FLOW_NOT_LINKED ? GST_FLOW_NOT_LINKED :
      GST_FLOW_EOS);
  GST_OBJECT_UNLOCK (self);
  GST_DEBUG_OBJECT (out->pad, "EOS after %d buffers", out->next);
}

/* A fatal flow (both pads unlinked, not negotiated, an error downstream):
 * report it once, stop the generation and end both streams. */
static void
output_fatal (GstH3VideoSrc * self, GstH3Output * out, GstFlowReturn ret,
    gboolean error_posted)
{
  gboolean post;

  g_mutex_lock (&self->lock);
  post = !self->error_posted && !error_posted;
  self->error_posted = TRUE;
  self->stop_streaming = TRUE;
  self->cancel = TRUE;
  if (self->engine)
    h3_engine_cancel (self->engine);
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  if (post)
    GST_ELEMENT_FLOW_ERROR (self, ret);
  post_progress (self, &self->generate_open, GST_PROGRESS_TYPE_ERROR,
      "generate", 0, "Streaming stopped: %s", gst_flow_get_name (ret));
  output_push_eos (self, out, self->segment_seqnum);
}

typedef enum
{
  STEP_PAUSE,
  STEP_STICKY,
  STEP_BUFFER,
  STEP_EOS
} GstH3Step;

static void
gst_h3_video_src_loop (gpointer user_data)
{
  GstH3Output *out = user_data;
  GstH3VideoSrc *self = out->self;
  GstBuffer *buf = NULL;
  GstH3Step step;
  GstFlowReturn ret, combined;
  guint32 eos_seqnum;

  g_mutex_lock (&self->lock);
  for (;;) {
    if (self->flushing) {
      step = STEP_PAUSE;
      break;
    }
    if (self->eos_requested || self->stop_streaming) {
      step = STEP_EOS;
      break;
    }
    if (self->have_plan) {
      if (!out->started) {
        step = STEP_STICKY;
        break;
      }
      if (out->next >= self->plan.num_frames) {
        step = STEP_EOS;
        break;
      }
      if ((buf = output_take_buffer (self, out))) {
        step = STEP_BUFFER;
        break;
      }
    }
    /* The worker ended without a full clip and without saying why (it
     * always should): end the stream rather than wait forever. */
    if (self->worker_done && !self->generated) {
      step = STEP_EOS;
      break;
    }
    g_cond_wait (&self->cond, &self->lock);
  }
  eos_seqnum = self->eos_requested ? self->eos_seqnum : self->segment_seqnum;
  g_mutex_unlock (&self->lock);

  switch (step) {
    case STEP_PAUSE:
      GST_DEBUG_OBJECT (out->pad, "flushing: pausing the task");
      gst_pad_pause_task (out->pad);
      return;
    case STEP_STICKY:
      /* A refused caps posts its own, more helpful, error message. */
      if (!output_push_sticky (self, out, TRUE)) {
        GST_OBJECT_LOCK (self);
        gst_flow_combiner_update_pad_flow (self->combiner, out->pad,
            GST_FLOW_NOT_NEGOTIATED);
        GST_OBJECT_UNLOCK (self);
        output_fatal (self, out, GST_FLOW_NOT_NEGOTIATED, TRUE);
      }
      if (out->eos)
        gst_pad_pause_task (out->pad);
      return;
    case STEP_EOS:
      output_push_eos (self, out, eos_seqnum);
      gst_pad_pause_task (out->pad);
      return;
    case STEP_BUFFER:
      break;
  }

  /* gst-launch only goes to PLAYING once every progress operation is
   * finished, and sinks only preroll with data: close "generate" before
   * the first buffer, never at EOS. */
  post_progress (self, &self->generate_open, GST_PROGRESS_TYPE_COMPLETE,
      "generate", 100, "Streaming the generated clip");

  GST_LOG_OBJECT (out->pad, "pushing %" GST_PTR_FORMAT, buf);
  ret = gst_pad_push (out->pad, buf);
  out->last_flow = ret;
  GST_OBJECT_LOCK (self);
  combined = gst_flow_combiner_update_pad_flow (self->combiner, out->pad, ret);
  GST_OBJECT_UNLOCK (self);

  if (combined == GST_FLOW_FLUSHING) {
    GST_DEBUG_OBJECT (out->pad, "flushing: pausing the task");
    gst_pad_pause_task (out->pad);
  } else if (combined == GST_FLOW_NOT_LINKED || combined < GST_FLOW_EOS) {
    GST_DEBUG_OBJECT (out->pad, "fatal flow %s (pad %s)",
        gst_flow_get_name (combined), gst_flow_get_name (ret));
    output_fatal (self, out, combined, FALSE);
    gst_pad_pause_task (out->pad);
  } else if (ret == GST_FLOW_EOS || combined == GST_FLOW_EOS) {
    /* Downstream wants no more on this branch. */
    output_push_eos (self, out, self->segment_seqnum);
    gst_pad_pause_task (out->pad);
  }
}

static gboolean
gst_h3_video_src_activate_mode (GstPad * pad, GstObject * parent,
    GstPadMode mode, gboolean active)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (parent);

  if (mode != GST_PAD_MODE_PUSH)
    return FALSE;
  if (active)
    return TRUE;                /* the task starts with the run */
  g_mutex_lock (&self->lock);
  self->flushing = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  return gst_pad_stop_task (pad);
}

/* ---- events and queries --------------------------------------------------- */

/* Application EOS (gst-launch-1.0 -e, gst_element_send_event): stop the
 * generation and let each task push EOS. Never blocks: the caller may hold
 * the state lock. */
static gboolean
handle_eos (GstH3VideoSrc * self, GstEvent * event)
{
  gboolean running;

  g_mutex_lock (&self->lock);
  running = self->running;
  if (running && !self->eos_requested) {
    self->eos_requested = TRUE;
    self->eos_seqnum = gst_event_get_seqnum (event);
    self->cancel = TRUE;
    if (self->engine)
      h3_engine_cancel (self->engine);
    g_cond_broadcast (&self->cond);
  }
  g_mutex_unlock (&self->lock);
  gst_event_unref (event);
  if (!running) {
    GST_DEBUG_OBJECT (self, "EOS while not running: ignored");
    return FALSE;
  }
  GST_INFO_OBJECT (self, "end of stream requested");
  post_progress (self, &self->generate_open, GST_PROGRESS_TYPE_CANCELED,
      "generate", 0, "Generation stopped by end-of-stream");
  return TRUE;
}

/* The clip is generated in one pass and pushed once: no seeking. Every
 * sink sends the same seek upstream, so answer each seqnum once. */
static gboolean
handle_seek (GstH3VideoSrc * self, GstEvent * event)
{
  guint32 seqnum = gst_event_get_seqnum (event);

  GST_OBJECT_LOCK (self);
  if (seqnum != self->last_seek_seqnum) {
    self->last_seek_seqnum = seqnum;
    GST_OBJECT_UNLOCK (self);
    GST_INFO_OBJECT (self, "seek %" GST_PTR_FORMAT " refused: h3videosrc is "
        "not seekable", event);
  } else {
    GST_OBJECT_UNLOCK (self);
  }
  gst_event_unref (event);
  return FALSE;
}

static gboolean
gst_h3_video_src_send_event (GstElement * element, GstEvent * event)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (element);

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_EOS:
      return handle_eos (self, event);
    case GST_EVENT_SEEK:
      return handle_seek (self, event);
    default:
      return GST_ELEMENT_CLASS (parent_class)->send_event (element, event);
  }
}

static gboolean
gst_h3_video_src_src_event (GstPad * pad, GstObject * parent, GstEvent * event)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (parent);

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_SEEK:
      return handle_seek (self, event);
    case GST_EVENT_QOS:
    case GST_EVENT_LATENCY:
    case GST_EVENT_RECONFIGURE:
      /* A generator cannot catch up, and every frame is kept; caps are
       * fixed, so there is nothing to renegotiate. */
      GST_LOG_OBJECT (pad, "ignoring %" GST_PTR_FORMAT, event);
      gst_event_unref (event);
      return TRUE;
    default:
      return gst_pad_event_default (pad, parent, event);
  }
}

/* Frame count and size of the run, or of the properties outside a run. */
static void
current_geometry (GstH3VideoSrc * self, gint * frames, gint * width,
    gint * height, gint * rate)
{
  g_mutex_lock (&self->lock);
  if (self->running) {
    *frames = self->run_frames;
    *width = self->run.width;
    *height = self->run.height;
  } else {
    GST_OBJECT_LOCK (self);
    *frames = h3_align_frames (self->settings.num_frames);
    *width = self->settings.width;
    *height = self->settings.height;
    GST_OBJECT_UNLOCK (self);
  }
  *rate = self->have_plan ? self->plan.sample_rate : 0;
  g_mutex_unlock (&self->lock);
}

static gboolean
query_caps (GstH3VideoSrc * self, GstPad * pad, GstQuery * query)
{
  GstCaps *filter, *caps, *result;
  gint frames, width, height, rate;

  current_geometry (self, &frames, &width, &height, &rate);
  caps = gst_pad_get_pad_template_caps (pad);
  caps = gst_caps_make_writable (caps);
  if (pad == self->video.pad)
    gst_caps_set_simple (caps, "width", G_TYPE_INT, width,
        "height", G_TYPE_INT, height, NULL);
  else if (rate > 0)
    gst_caps_set_simple (caps, "rate", G_TYPE_INT, rate, NULL);
  gst_query_parse_caps (query, &filter);
  if (filter) {
    result = gst_caps_intersect_full (filter, caps, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref (caps);
  } else {
    result = caps;
  }
  gst_query_set_caps_result (query, result);
  gst_caps_unref (result);
  return TRUE;
}

static gboolean
gst_h3_video_src_src_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (parent);
  gint frames, width, height, rate;
  GstFormat format;

  switch (GST_QUERY_TYPE (query)) {
    case GST_QUERY_CAPS:
      return query_caps (self, pad, query);
    case GST_QUERY_DURATION:
      current_geometry (self, &frames, &width, &height, &rate);
      gst_query_parse_duration (query, &format, NULL);
      if (format == GST_FORMAT_TIME) {
        gst_query_set_duration (query, format, frame_time (frames));
        return TRUE;
      }
      if (format == GST_FORMAT_DEFAULT && pad == self->video.pad) {
        gst_query_set_duration (query, format, frames);
        return TRUE;
      }
      if (format == GST_FORMAT_DEFAULT && rate > 0) {
        gst_query_set_duration (query, format,
            gst_util_uint64_scale_round (frames, rate, H3_FPS));
        return TRUE;
      }
      return FALSE;
    case GST_QUERY_LATENCY:
      /* Not live: buffers are timestamped from 0 and synchronised by the
       * sinks; generation time is not latency. */
      gst_query_set_latency (query, FALSE, 0, GST_CLOCK_TIME_NONE);
      return TRUE;
    case GST_QUERY_SEEKING:
      current_geometry (self, &frames, &width, &height, &rate);
      gst_query_parse_seeking (query, &format, NULL, NULL, NULL);
      gst_query_set_seeking (query, format, FALSE, 0,
          format == GST_FORMAT_TIME ? (gint64) frame_time (frames) : -1);
      return TRUE;
    default:
      return gst_pad_query_default (pad, parent, query);
  }
}

/* ---- state changes ---------------------------------------------------------- */

static void
output_reset (GstH3Output * out)
{
  out->next = 0;
  out->started = FALSE;
  out->discont = TRUE;
  out->eos = FALSE;
  out->last_flow = GST_FLOW_OK;
}

/* READY->PAUSED, before the pads are activated: snapshot and check the
 * properties, forget the last run, and describe the new run's streams. */
static gboolean
run_prepare (GstH3VideoSrc * self)
{
  GstH3Settings snapshot;
  GstCaps *caps;

  memset (&snapshot, 0, sizeof snapshot);
  GST_OBJECT_LOCK (self);
  settings_copy (&snapshot, &self->settings);
  GST_OBJECT_UNLOCK (self);
  if (!settings_check (self, &snapshot)) {
    settings_clear (&snapshot);
    return FALSE;
  }

  worker_join (self);
  clip_clear (self);
  streams_clear (self);
  settings_clear (&self->run);
  self->run = snapshot;
  self->run_frames = h3_align_frames (self->run.num_frames);

  self->group_id = gst_util_group_id_next ();
  self->segment_seqnum = gst_util_seqnum_next ();
  self->video_stream_id = settings_stream_id (&self->run, "video");
  self->audio_stream_id = settings_stream_id (&self->run, "audio");
  caps = gst_caps_new_simple ("video/x-raw", "format", G_TYPE_STRING, "RGB",
      "width", G_TYPE_INT, self->run.width, "height", G_TYPE_INT,
      self->run.height, "framerate", GST_TYPE_FRACTION, H3_FPS, 1,
      "pixel-aspect-ratio", GST_TYPE_FRACTION, 1, 1, NULL);
  self->video_stream = gst_stream_new (self->video_stream_id, caps,
      GST_STREAM_TYPE_VIDEO, GST_STREAM_FLAG_NONE);
  gst_caps_unref (caps);
  /* The audio caps need the model's sample rate: set with the plan. */
  self->audio_stream = gst_stream_new (self->audio_stream_id, NULL,
      GST_STREAM_TYPE_AUDIO, GST_STREAM_FLAG_NONE);
  self->collection = gst_stream_collection_new (NULL);
  gst_stream_collection_add_stream (self->collection,
      gst_object_ref (self->video_stream));
  gst_stream_collection_add_stream (self->collection,
      gst_object_ref (self->audio_stream));

  output_reset (&self->video);
  output_reset (&self->audio);
  GST_OBJECT_LOCK (self);
  gst_flow_combiner_reset (self->combiner);
  GST_OBJECT_UNLOCK (self);

  g_mutex_lock (&self->lock);
  self->running = TRUE;
  self->flushing = FALSE;
  self->cancel = FALSE;
  self->eos_requested = FALSE;
  self->stop_streaming = FALSE;
  self->error_posted = FALSE;
  self->worker_done = FALSE;
  self->run_start_us = self->denoise_start_us = g_get_monotonic_time ();
  g_mutex_unlock (&self->lock);

  gst_element_post_message (GST_ELEMENT (self),
      gst_message_new_stream_collection (GST_OBJECT (self),
          self->collection));
  GST_INFO_OBJECT (self, "run: \"%s\" seed %" G_GUINT64_FORMAT " %dx%d, %d "
      "frames", self->run.prompt, self->run.seed, self->run.width,
      self->run.height, self->run_frames);
  return TRUE;
}

/* READY->PAUSED, after the pads are active. */
static void
run_start (GstH3VideoSrc * self)
{
  gst_pad_start_task (self->video.pad, gst_h3_video_src_loop, &self->video,
      NULL);
  gst_pad_start_task (self->audio.pad, gst_h3_video_src_loop, &self->audio,
      NULL);
  self->worker = g_thread_new ("h3videosrc-gen", gst_h3_video_src_worker,
      gst_object_ref (self));
}

/* PAUSED->READY, before the pads are deactivated: cancel and wake
 * everything so that the deactivation (which stops the tasks) is quick. */
static void
run_stop (GstH3VideoSrc * self)
{
  g_mutex_lock (&self->lock);
  self->running = FALSE;
  self->flushing = TRUE;
  self->cancel = TRUE;
  if (self->engine)
    h3_engine_cancel (self->engine);
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  post_progress (self, &self->load_open, GST_PROGRESS_TYPE_CANCELED, "load",
      0, "Stopped while loading the model");
  post_progress (self, &self->generate_open, GST_PROGRESS_TYPE_CANCELED,
      "generate", 0, "Generation cancelled");
}

/* PAUSED->READY, after the tasks stopped: free the clip now if the worker
 * has already finished, else at the next start or on dispose. */
static void
run_release (GstH3VideoSrc * self)
{
  gboolean done;

  g_mutex_lock (&self->lock);
  done = self->worker_done;
  g_mutex_unlock (&self->lock);
  if (done) {
    worker_join (self);
    clip_clear (self);
  }
}

static GstStateChangeReturn
gst_h3_video_src_change_state (GstElement * element, GstStateChange transition)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (element);
  GstStateChangeReturn ret;

  switch (transition) {
    case GST_STATE_CHANGE_READY_TO_PAUSED:
      if (!run_prepare (self))
        return GST_STATE_CHANGE_FAILURE;
      break;
    case GST_STATE_CHANGE_PAUSED_TO_READY:
      run_stop (self);
      break;
    default:
      break;
  }

  ret = GST_ELEMENT_CLASS (parent_class)->change_state (element, transition);
  if (ret == GST_STATE_CHANGE_FAILURE) {
    if (transition == GST_STATE_CHANGE_READY_TO_PAUSED)
      run_stop (self);
    return ret;
  }

  switch (transition) {
    case GST_STATE_CHANGE_READY_TO_PAUSED:
      run_start (self);
      break;
    case GST_STATE_CHANGE_PAUSED_TO_READY:
      run_release (self);
      break;
    default:
      break;
  }
  return ret;
}
