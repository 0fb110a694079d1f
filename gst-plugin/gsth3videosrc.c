/* gsth3videosrc.c - h3videosrc: text prompt -> raw video + raw audio.
 *
 * The element itself: type, properties, pads, events, queries and state
 * changes. The generation thread, the pad tasks, the settings checks and
 * the messages live in the gsth3videosrc-*.c files; the private header
 * describes how they fit together. */

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
 * By default it is not a live source: timestamps start at 0 and the
 * pipeline prerolls once the first decoded media arrive, which can take
 * minutes with the full model. Put a `queue` on each branch and size it for
 * the encoder's latency (see docs/ELEMENT.md). With #GstH3VideoSrc:is-live
 * it is one: timestamps in running time, a LATENCY answer of the
 * generation time to expect (#GstH3VideoSrc:latency), and clips appended
 * with the #GstH3VideoSrc::queue-prompt action signal, each where the last
 * one ends: a channel that goes on until an application EOS.
 *
 * Without `model-location` the element runs the small embedded test model,
 * which produces noise-like media in seconds on a CPU: use it to check a
 * pipeline, then point `model-location` at a MiniMax-H3 download.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 -e h3videosrc prompt="a red fox running in snow" name=s \
 *     s.video ! queue ! videoconvert ! video/x-raw,format=I420 ! x264enc ! \
 *       h264parse ! mux. \
 *     s.audio ! queue max-size-time=3000000000 max-size-bytes=0 \
 *       max-size-buffers=0 ! audioconvert ! audioresample ! avenc_aac ! mux. \
 *     mp4mux name=mux ! filesink location=fox.mp4
 * ]|
 * Generates 124 frames (about 5 s) at 1280x736 and writes an MP4 file that
 * every player decodes (I420: from RGB, x264enc would write High 4:4:4).
 * |[
 * gst-launch-1.0 -e h3videosrc prompt="waves on a beach" width=64 height=32 \
 *     num-frames=22 steps=2 name=s \
 *     s.video ! queue ! matroskamux name=mux ! filesink location=beach.mkv \
 *     s.audio ! queue ! mux.
 * ]|
 * A small, fast clip with raw video and audio in Matroska.
 * |[
 * gst-launch-1.0 -e h3videosrc model-location=tests/data/models/tiny-h3 \
 *     image-location=tests/data/goldens/tiny-h3/e2e_fl2va_keyframe.png \
 *     prompt="a robot dancing" width=64 height=32 num-frames=22 steps=2 \
 *     name=s s.video ! queue ! matroskamux name=mux ! \
 *     filesink location=robot.mkv s.audio ! queue ! mux.
 * ]|
 * Image to video (FL2VA): the clip starts on the picture. With
 * #GstH3VideoSrc:last-image-location it ends on another one; an
 * application holding a frame in memory sets #GstH3VideoSrc:image instead.
 *
 * ## Messages
 *
 * * `GST_MESSAGE_PROGRESS` with code `load` (engine opened), `wait`
 *   (waiting for a shared engine another element loads or generates on)
 *   and `generate` (START, CONTINUE with a `percent` field for the prompt,
 *   every denoising step and the audio decode, COMPLETE when the first
 *   frames are decoded, so that gst-launch-1.0 plays once the sinks
 *   preroll, CANCELED when stopped, ERROR after an error message).
 * * Element message `h3videosrc/step` for every denoising step and decode
 *   window (`percent` reaches 100 with the last frame): `phase`, `step`,
 *   `total`, `percent`, `elapsed`, `eta`; `h3videosrc/waiting` (`reason`,
 *   `holder`) when waiting for a shared engine.
 * * Element message `h3videosrc/done` at the end of each generation with
 *   the `result` and the stage timings, before EOS (and `stats` is set).
 * * A `GstStreamCollection` with the two streams and their caps, before any
 *   data.
 *
 * Settings that cannot work (backend against the adapter, devices against
 * the machine, caps refused downstream, no linked pad) fail the change to
 * PAUSED before the model loads. Elements of a process with the same model
 * settings share one loaded model (#GstH3VideoSrc:engine-cache). The clip
 * is kept after it is generated (#GstH3VideoSrc:keep-clip): the element is
 * then seekable in TIME, with flushing, non-flushing and segment seeks
 * (loop playback), without running the model again. Stopping
 * waits for the generation to return (bounded at READY/NULL; always when
 * the element is freed). The `h3:` URIs are handled by h3src, a bin around
 * this element.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "gsth3videosrc-private.h"

GST_DEBUG_CATEGORY (gst_h3_video_src_debug);

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
  PROP_LOAD_FORMAT,
  PROP_DUMMY_ADAPTER,
  PROP_PRECISION,
  PROP_MEMORY,
  PROP_MAX_GPU_MEMORY,
  PROP_ENGINE_CACHE,
  PROP_KEEP_CLIP,
  PROP_KEEP_CLIP_MAX_BYTES,
  PROP_IS_LIVE,
  PROP_LATENCY,
  PROP_IMAGE_LOCATION,
  PROP_LAST_IMAGE_LOCATION,
  PROP_IMAGE,
  PROP_LAST_IMAGE,
  PROP_CAPABILITIES,
  PROP_STATS
};

/* The sides and the frame rate h3core serves (h3.h). */
#define SIDE_RANGE "[ " G_STRINGIFY (H3_MIN_SIDE) ", " \
  G_STRINGIFY (H3_MAX_SIDE) " ]"
#define VIDEO_CAPS_TEMPLATE \
  "video/x-raw, format = (string) RGB, width = (int) " SIDE_RANGE ", " \
  "height = (int) " SIDE_RANGE ", framerate = (fraction) " \
  G_STRINGIFY (H3_FPS) "/1, pixel-aspect-ratio = (fraction) 1/1"

#define AUDIO_CAPS_TEMPLATE \
  "audio/x-raw, format = (string) F32LE, rate = (int) [ 1, MAX ], " \
  "channels = (int) 2, layout = (string) interleaved, " \
  "channel-mask = (bitmask) 0x3"

static GstStaticPadTemplate video_template = GST_STATIC_PAD_TEMPLATE ("video",
    GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (VIDEO_CAPS_TEMPLATE));

static GstStaticPadTemplate audio_template = GST_STATIC_PAD_TEMPLATE ("audio",
    GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (AUDIO_CAPS_TEMPLATE));

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
static gboolean gst_h3_video_src_activate_mode (GstPad * pad,
    GstObject * parent, GstPadMode mode, gboolean active);

/* ---- enums --------------------------------------------------------------- */

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

GType
gst_h3_load_format_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_H3_LOAD_FORMAT_SAFETENSORS, "The checkpoint files of the model",
        "safetensors"},
    {GST_H3_LOAD_FORMAT_DUMMY,
        "Random weights made on the device from the configs (benchmarks)",
        "dummy"},
    {0, NULL, NULL}
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstH3LoadFormat", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

GType
gst_h3_precision_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_H3_PRECISION_BF16, "The backend's compute type (bf16 on CUDA)",
        "bf16"},
    {GST_H3_PRECISION_FP8,
          "FP8 E4M3 weights with per-channel scales for the big linears",
        "fp8"},
    {0, NULL, NULL}
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstH3Precision", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

GType
gst_h3_dummy_adapter_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_H3_DUMMY_ADAPTER_NONE, "No adapter: the base model", "none"},
    {GST_H3_DUMMY_ADAPTER_DENSE, "A random FastH3 dense adapter", "dense"},
    {GST_H3_DUMMY_ADAPTER_VSA, "A random FastH3 VSA adapter", "vsa"},
    {0, NULL, NULL}
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstH3DummyAdapter", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

GType
gst_h3_memory_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_H3_MEMORY_AUTO, "Resident when the weights fit the device, else "
          "stream", "auto"},
    {GST_H3_MEMORY_RESIDENT, "Every weight on the device", "resident"},
    {GST_H3_MEMORY_STREAM, "The transformer's blocks and the text encoder's "
          "layers in host memory, streamed to the device a block ahead",
        "stream"},
    {0, NULL, NULL}
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstH3Memory", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

/* ---- class --------------------------------------------------------------- */

/* The queue-prompt action signal. */
static gboolean
queue_prompt (GstH3VideoSrc * self, const gchar * prompt, guint64 seed)
{
  GstH3QueuedPrompt *q;
  gboolean live;
  gchar *text;

  GST_OBJECT_LOCK (self);
  live = self->settings.is_live;
  GST_OBJECT_UNLOCK (self);
  if (!live) {
    GST_WARNING_OBJECT (self, "queue-prompt needs is-live=true: a clip of "
        "its own is a new run (set prompt, go to PLAYING)");
    return FALSE;
  }
  text = g_strstrip (g_strdup (prompt ? prompt : ""));
  if (!*text) {
    GST_WARNING_OBJECT (self, "queue-prompt: the prompt is empty");
    g_free (text);
    return FALSE;
  }
  g_free (text);
  q = g_new0 (GstH3QueuedPrompt, 1);
  q->prompt = g_strdup (prompt);
  q->seed = seed;
  g_mutex_lock (&self->lock);
  g_queue_push_tail (&self->prompt_queue, q);
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  GST_INFO_OBJECT (self, "queued \"%s\" (seed %" G_GUINT64_FORMAT ")",
      prompt, seed);
  return TRUE;
}

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
          H3_MIN_SIDE, H3_MAX_SIDE, DEFAULT_WIDTH, rw));

  /**
   * GstH3VideoSrc:height:
   *
   * Frame height in pixels: a multiple of 32, see #GstH3VideoSrc:width.
   */
  g_object_class_install_property (gobject_class, PROP_HEIGHT,
      g_param_spec_int ("height", "Height",
          "Frame height in pixels (multiple of 32, aspect 1:4 to 4:1)",
          H3_MIN_SIDE, H3_MAX_SIDE, DEFAULT_HEIGHT, rw));

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
          "see aligned-frames)", 1, H3_MAX_FRAMES, DEFAULT_NUM_FRAMES, rw));

  /**
   * GstH3VideoSrc:aligned-frames:
   *
   * The number of frames the element will produce for the current
   * #GstH3VideoSrc:num-frames: the next count of the form 17n+5.
   */
  g_object_class_install_property (gobject_class, PROP_ALIGNED_FRAMES,
      g_param_spec_int ("aligned-frames", "Aligned frames",
          "Number of frames that will be produced (num-frames aligned up to "
          "17n+5)", h3_align_frames (1), G_MAXINT,
          h3_align_frames (DEFAULT_NUM_FRAMES), ro));

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
          "adapter)", 0, H3_MAX_STEPS, DEFAULT_STEPS, rw));

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
   * GstH3VideoSrc:load-format:
   *
   * Where the weights come from. `safetensors` (the default) reads the
   * checkpoint files under #GstH3VideoSrc:model-location. `dummy` needs
   * only the model's configs and tokenizer: every weight is made on its
   * device from a seeded generator, so the release's shapes run end to end
   * without the release's files (benchmarks, memory planning). The output
   * is noise; #GstH3VideoSrc:stats says `random-weights`.
   */
  g_object_class_install_property (gobject_class, PROP_LOAD_FORMAT,
      g_param_spec_enum ("load-format", "Load format",
          "Where the weights come from: safetensors or dummy (random)",
          GST_TYPE_H3_LOAD_FORMAT, DEFAULT_LOAD_FORMAT, rw));

  /**
   * GstH3VideoSrc:dummy-adapter:
   *
   * With load-format=dummy and no #GstH3VideoSrc:adapter-location: run as
   * with a FastH3 adapter of this kind (4 forwards; `vsa` needs
   * backend=vsa, `dense` backend=fa).
   */
  g_object_class_install_property (gobject_class, PROP_DUMMY_ADAPTER,
      g_param_spec_enum ("dummy-adapter", "Dummy adapter",
          "With load-format=dummy: the FastH3 adapter kind to make up",
          GST_TYPE_H3_DUMMY_ADAPTER, DEFAULT_DUMMY_ADAPTER, rw));

  /**
   * GstH3VideoSrc:precision:
   *
   * What the big linear layers' weights are held and multiplied in.
   * `bf16` (the default): the backend's compute type. `fp8`: the
   * transformer's and the text encoder's linears in FP8 E4M3 with a float32
   * scale per output channel, quantised once at load, their inputs
   * quantised per row on the fly (attention, norms and the VAEs stay as
   * they are): about half those weights' memory. It needs a GPU with FP8
   * tensor cores (compute capability 8.9 or newer) and compute=cuda or
   * auto; a GPU without them is refused when the element starts, naming its
   * capability. On the CPU it is emulated in float32. #GstH3VideoSrc:stats
   * says which (`precision`).
   */
  g_object_class_install_property (gobject_class, PROP_PRECISION,
      g_param_spec_enum ("precision", "Precision",
          "The linear layers' weights: bf16, or fp8 (E4M3, per-channel "
          "scales; GPUs of compute capability 8.9+)",
          GST_TYPE_H3_PRECISION, DEFAULT_PRECISION, rw));

  /**
   * GstH3VideoSrc:memory:
   *
   * Where the big weights live. `resident`: every weight on the device.
   * `stream`: the transformer's blocks and the text encoder's layers stay in
   * host memory (page-locked up to half of it, the rest pageable) and are
   * copied into a ring of two device slots a block ahead of the compute,
   * on a copy stream of their own: the output is resident's bit for bit,
   * and the device holds the rest of the model, two blocks and the
   * activations (the release's 117 GB of weights fit a 24 GB card).
   * `auto` (the default): resident when the memory plan's weights fit the
   * device (#GstH3VideoSrc:max-gpu-memory, or what is free), else stream.
   * #GstH3VideoSrc:stats says which ran (`memory`, `memory-reason`) and
   * what the host holds (`host-pinned-bytes`, `host-pageable-bytes`). A
   * setting that cannot fit is refused at the change to PAUSED, naming the
   * numbers.
   */
  g_object_class_install_property (gobject_class, PROP_MEMORY,
      g_param_spec_enum ("memory", "Memory",
          "Where the weights live: auto, resident (on the device) or stream "
          "(host memory, streamed to the device a block ahead)",
          GST_TYPE_H3_MEMORY, DEFAULT_MEMORY, rw));

  /**
   * GstH3VideoSrc:max-gpu-memory:
   *
   * The most device memory the engine may use on each GPU, in bytes, the
   * CUDA context included; 0 (the default): what is free. The memory plan
   * holds the model and every request to it and allocations past it fail,
   * so an 80, 48 or 24 GB card can be stood for on a larger one; with
   * memory=auto it decides between resident and stream.
   */
  g_object_class_install_property (gobject_class, PROP_MAX_GPU_MEMORY,
      g_param_spec_uint64 ("max-gpu-memory", "Max GPU memory",
          "Most device memory to use on each GPU, in bytes (0: what is free)",
          0, G_MAXUINT64, DEFAULT_MAX_GPU_MEMORY, rw));

  /**
   * GstH3VideoSrc:devices:
   *
   * Where the ranks of tensor parallelism run:
   *
   * * `auto`: one backend, chosen by #GstH3VideoSrc:compute;
   * * a comma-separated list of CUDA device numbers such as `0,1,2,3`: one
   *   rank per GPU (NCCL between them), the degree is the count;
   * * `cpu:N`: N ranks on the CPU (for tests and for checking a
   *   tensor-parallel setup without GPUs).
   *
   * The degree must divide the model's attention heads (1, 2, 4, 7 or 8 for
   * MiniMax-H3). A GPU list with compute=cpu, or cpu:N with compute=cuda,
   * is refused. #GstH3VideoSrc:stats names the ranks that ran.
   */
  g_object_class_install_property (gobject_class, PROP_DEVICES,
      g_param_spec_string ("devices", "Devices",
          "Tensor-parallel ranks: \"auto\", CUDA devices such as "
          "\"0,1,2,3\", or \"cpu:N\" (N CPU ranks)", DEFAULT_DEVICES, rw));

  /**
   * GstH3VideoSrc:vsa-sparsity:
   *
   * With backend=vsa, the fraction of video key tiles each query tile
   * skips. Ignored with backend=fa.
   */
  g_object_class_install_property (gobject_class, PROP_VSA_SPARSITY,
      g_param_spec_double ("vsa-sparsity", "VSA sparsity",
          "Fraction of video key tiles skipped with backend=vsa", 0.0,
          H3_MAX_VSA_SPARSITY, DEFAULT_VSA_SPARSITY, rw));

  /**
   * GstH3VideoSrc:engine-cache:
   *
   * Share the loaded model with the other h3videosrc elements of the
   * process whose model settings are the same (model-location,
   * adapter-location, compute, devices, load-format, dummy-adapter, memory,
   * max-gpu-memory, precision): the
   * model is loaded once, kept while any of them exists, and their
   * generations take turns on it. FALSE gives this element an engine of its
   * own (another copy of the weights in memory).
   */
  g_object_class_install_property (gobject_class, PROP_ENGINE_CACHE,
      g_param_spec_boolean ("engine-cache", "Engine cache",
          "Share the loaded model with the other elements of the process "
          "that have the same model settings", DEFAULT_ENGINE_CACHE, rw));

  /**
   * GstH3VideoSrc:keep-clip:
   *
   * Keep the generated clip in memory until the next run, so that it can
   * be replayed without running the model again: the element is then
   * seekable in TIME (flushing and non-flushing seeks, segment seeks for
   * loops, positive rates), during the generation too (a position not
   * decoded yet is pushed once it is). A clip larger than
   * #GstH3VideoSrc:keep-clip-max-bytes is not kept. FALSE: every frame is
   * freed once pushed, and seeks are refused.
   */
  g_object_class_install_property (gobject_class, PROP_KEEP_CLIP,
      g_param_spec_boolean ("keep-clip", "Keep clip",
          "Keep the clip in memory for seeks and replays (up to "
          "keep-clip-max-bytes)", DEFAULT_KEEP_CLIP, rw));

  /**
   * GstH3VideoSrc:keep-clip-max-bytes:
   *
   * The largest clip #GstH3VideoSrc:keep-clip keeps: its RGB frames
   * (width x height x 3 bytes each) plus its 32-bit stereo audio. A larger
   * clip is streamed and freed as with keep-clip=false (the element logs
   * why) and is not seekable. The default, 2 GiB, holds the longest clip
   * (362 frames) at 1280x736.
   */
  g_object_class_install_property (gobject_class, PROP_KEEP_CLIP_MAX_BYTES,
      g_param_spec_uint64 ("keep-clip-max-bytes", "Keep clip max bytes",
          "Largest clip (frames + audio, bytes) that keep-clip keeps", 0,
          G_MAXUINT64, DEFAULT_KEEP_CLIP_MAX_BYTES, rw));

  /**
   * GstH3VideoSrc:is-live:
   *
   * Behave as a live source: no preroll (the state changes to PAUSED return
   * NO_PREROLL), data flows in PLAYING only, timestamps are running time,
   * and the LATENCY query answers live with #GstH3VideoSrc:latency. Each
   * clip is pushed once it is complete, from the running time it started
   * playing at (the first) or where the last one ended, later only when
   * it was complete too late for the latency (a GAP event covers the
   * difference). Clips queued with #GstH3VideoSrc::queue-prompt follow;
   * without one the element waits for the next: the stream ends only with
   * an application EOS. Live streams are not seekable; clips are freed as
   * they are pushed.
   */
  g_object_class_install_property (gobject_class, PROP_IS_LIVE,
      g_param_spec_boolean ("is-live", "Is live",
          "Live source: running-time timestamps, latency, queue-prompt "
          "appends clips", DEFAULT_IS_LIVE, rw));

  /**
   * GstH3VideoSrc:latency:
   *
   * With is-live: the latency the element reports, in nanoseconds: how
   * long after its timestamp a buffer may reach the sinks. A clip needs its
   * generation time, so set it to what a generation takes (the element's
   * `stats` give `total`) plus a margin. -1 (the default) estimates it:
   * the measured generation time of the last clip of the same size,
   * frames, steps and backend (this element's, or another's on the same
   * shared engine), times 1.25, plus 0.2 s for the push through the
   * pipeline; before any measurement, the 0.2 s alone (the
   * first clip then starts when it is complete). The element posts a
   * LATENCY message when the estimate changes.
   */
  g_object_class_install_property (gobject_class, PROP_LATENCY,
      g_param_spec_int64 ("latency", "Latency",
          "With is-live: the latency to report in ns (the generation time "
          "to expect), -1 = estimated from the last generation", -1,
          G_MAXINT64, DEFAULT_LATENCY, rw));

  /**
   * GstH3VideoSrc:image-location:
   *
   * FL2VA: a picture file (PNG, JPEG) the clip starts on, stretched onto
   * the width x height canvas. It is decoded at READY to PAUSED: a missing,
   * unreadable or corrupt file, or one that is not a regular file, fails
   * that state change with a RESOURCE error naming the file, before the
   * model loads. Setting it (non-empty) unsets #GstH3VideoSrc:image: the
   * last of the two set is the keyframe. Unset (the default) with no
   * #GstH3VideoSrc:image: no first keyframe.
   */
  g_object_class_install_property (gobject_class, PROP_IMAGE_LOCATION,
      g_param_spec_string ("image-location", "Image location",
          "FL2VA: picture file (PNG, JPEG) the clip starts on; unsets image",
          NULL, rw));

  /**
   * GstH3VideoSrc:last-image-location:
   *
   * FL2VA: a picture file the clip ends on, scaled to cover the canvas and
   * centre-cropped (alone, without a first keyframe, it is stretched, as
   * the reference does). Decoded and checked as
   * #GstH3VideoSrc:image-location; setting it unsets
   * #GstH3VideoSrc:last-image.
   */
  g_object_class_install_property (gobject_class, PROP_LAST_IMAGE_LOCATION,
      g_param_spec_string ("last-image-location", "Last image location",
          "FL2VA: picture file (PNG, JPEG) the clip ends on; unsets "
          "last-image", NULL, rw));

  /**
   * GstH3VideoSrc:image:
   *
   * FL2VA: the picture the clip starts on, for applications that hold a
   * frame in memory: a #GstSample with video/x-raw caps of format RGB,
   * RGBx, RGBA (alpha dropped) or I420 (converted to RGB with
   * GstVideoConverter, the caps' colorimetry), any size up to 16384 pixels
   * a side. The element copies the pixels at READY to PAUSED; another
   * format, no buffer, 0x0 or a buffer too small for the caps fails that
   * state change with LIBRARY/SETTINGS. Setting it (non-NULL) unsets
   * #GstH3VideoSrc:image-location: the last of the two set is the keyframe.
   */
  g_object_class_install_property (gobject_class, PROP_IMAGE,
      g_param_spec_boxed ("image", "Image",
          "FL2VA: GstSample (video/x-raw RGB, RGBx, RGBA or I420) the clip "
          "starts on; unsets image-location", GST_TYPE_SAMPLE, rw));

  /**
   * GstH3VideoSrc:last-image:
   *
   * FL2VA: the picture the clip ends on, as a #GstSample (see
   * #GstH3VideoSrc:image and #GstH3VideoSrc:last-image-location). Setting
   * it unsets #GstH3VideoSrc:last-image-location.
   */
  g_object_class_install_property (gobject_class, PROP_LAST_IMAGE,
      g_param_spec_boxed ("last-image", "Last image",
          "FL2VA: GstSample (video/x-raw RGB, RGBx, RGBA or I420) the clip "
          "ends on; unsets last-image-location", GST_TYPE_SAMPLE, rw));

  /**
   * GstH3VideoSrc::queue-prompt:
   * @h3videosrc: the element
   * @prompt: what the next clip shows and sounds like
   * @seed: its seed
   *
   * With #GstH3VideoSrc:is-live, appends a clip with this prompt and seed
   * (and the element's other settings) to the stream: it is generated
   * after the clips before it and starts where the last one ends, so a
   * live channel goes on as long as prompts are queued. Prompts queued
   * before the element starts follow its first clip; the queue is cleared
   * when a run stops (PAUSED to READY).
   *
   * Returns: %TRUE when queued; %FALSE without is-live or with an empty
   * prompt (the element logs why).
   */
  g_signal_new_class_handler ("queue-prompt", G_TYPE_FROM_CLASS (klass),
      G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION, G_CALLBACK (queue_prompt), NULL,
      NULL, NULL, G_TYPE_BOOLEAN, 2, G_TYPE_STRING, G_TYPE_UINT64);

  /**
   * GstH3VideoSrc:capabilities:
   *
   * What this build and machine can run (compute backends, GPUs, fa/vsa
   * availability and the reason for any fallback), as a GstStructure named
   * `h3videosrc/capabilities`: each `key: value` line of
   * h3_capabilities_describe() is a string field (among them `cpu-threads`,
   * `gpus` and `compute-auto`, `cpu` or `cuda`), and `description` holds
   * the whole text. Reading it creates no CUDA context and loads no model.
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
   * `decode-audio`, `total`, `per-step`, `steps`, `compute`, `fallback`,
   * `precision`).
   * `compute` names the ranks that ran, e.g. `cpu (tp2, cpu)` for
   * devices=cpu:2. NULL before the first generation.
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
  gst_type_mark_as_plugin_api (GST_TYPE_H3_LOAD_FORMAT, 0);
  gst_type_mark_as_plugin_api (GST_TYPE_H3_DUMMY_ADAPTER, 0);
  gst_type_mark_as_plugin_api (GST_TYPE_H3_PRECISION, 0);
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
  gst_h3_settings_init (&self->settings);
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  g_rec_mutex_init (&self->progress_lock);
  g_mutex_init (&self->seek_lock);
  g_queue_init (&self->live_clips);
  g_queue_init (&self->prompt_queue);
  self->live_origin = self->live_next_base = GST_CLOCK_TIME_NONE;
  self->combiner = gst_flow_combiner_new ();
  self->last_seek_seqnum = GST_SEQNUM_INVALID;
  output_init (self, &self->video, &video_template, TRUE);
  output_init (self, &self->audio, &audio_template, FALSE);
  GST_OBJECT_FLAG_SET (self, GST_ELEMENT_FLAG_SOURCE);
}

static void
gst_h3_video_src_dispose (GObject * object)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (object);
  GstH3Engine *engine;

  /* The last reference went away on the generation thread itself (a
   * message it posted was the last holder): it cannot be joined from here.
   * Stop it and keep the element alive until it returns; it drops that
   * reference as its very last action, and this runs again. */
  g_mutex_lock (&self->lock);
  if (self->worker && self->worker == g_thread_self ()
      && !self->worker_exiting) {
    self->worker_holds_ref = TRUE;
    g_mutex_unlock (&self->lock);
    gst_h3_video_src_cancel (self);
    g_object_ref (self);
    return;
  }
  g_mutex_unlock (&self->lock);

  /* No generation outlives the element: wait for it (cancelled, it ends at
   * its next step, or when a model load in progress is over). */
  g_mutex_lock (&self->lock);
  self->flushing = TRUE;
  g_mutex_unlock (&self->lock);
  gst_h3_video_src_cancel (self);
  gst_h3_video_src_worker_join (self);
  gst_h3_video_src_clip_clear (self);
  gst_h3_video_src_streams_clear (self);
  g_mutex_lock (&self->lock);
  engine = self->engine;
  self->engine = NULL;
  g_mutex_unlock (&self->lock);
  gst_h3_engine_unref (engine);
  G_OBJECT_CLASS (parent_class)->dispose (object);
}

static void
gst_h3_video_src_finalize (GObject * object)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (object);

  gst_h3_settings_clear (&self->settings);
  gst_h3_settings_clear (&self->run);
  gst_h3_keyframe_clear (&self->run_keyframes[0]);
  gst_h3_keyframe_clear (&self->run_keyframes[1]);
  g_free (self->rate_key);
  g_free (self->measured_shape);
  g_queue_clear_full (&self->prompt_queue,
      (GDestroyNotify) gst_h3_queued_prompt_free);
  if (self->stats)
    gst_structure_free (self->stats);
  gst_flow_combiner_free (self->combiner);
  g_rec_mutex_clear (&self->progress_lock);
  g_mutex_clear (&self->seek_lock);
  g_cond_clear (&self->cond);
  g_mutex_clear (&self->lock);
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

/* ---- properties ---------------------------------------------------------- */

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
  const gchar *unset = NULL;    /* the keyframe property this one replaces */

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
    case PROP_LOAD_FORMAT:
      s->load_format = g_value_get_enum (value);
      break;
    case PROP_DUMMY_ADAPTER:
      s->dummy_adapter = g_value_get_enum (value);
      break;
    case PROP_PRECISION:
      s->precision = g_value_get_enum (value);
      break;
    case PROP_MEMORY:
      s->memory = g_value_get_enum (value);
      break;
    case PROP_MAX_GPU_MEMORY:
      s->max_gpu_memory = g_value_get_uint64 (value);
      break;
    case PROP_ENGINE_CACHE:
      s->engine_cache = g_value_get_boolean (value);
      break;
    case PROP_KEEP_CLIP:
      s->keep_clip = g_value_get_boolean (value);
      break;
    case PROP_KEEP_CLIP_MAX_BYTES:
      s->keep_clip_max_bytes = g_value_get_uint64 (value);
      break;
    case PROP_IS_LIVE:
      s->is_live = g_value_get_boolean (value);
      break;
    case PROP_LATENCY:
      s->latency = g_value_get_int64 (value);
      break;
      /* A keyframe comes from a file or from a sample: the last set wins. */
    case PROP_IMAGE_LOCATION:
      set_string (&s->image_location, value);
      if (s->image_location && *s->image_location && s->image) {
        g_clear_pointer (&s->image, gst_sample_unref);
        unset = "image";
      }
      break;
    case PROP_LAST_IMAGE_LOCATION:
      set_string (&s->last_image_location, value);
      if (s->last_image_location && *s->last_image_location && s->last_image) {
        g_clear_pointer (&s->last_image, gst_sample_unref);
        unset = "last-image";
      }
      break;
    case PROP_IMAGE:
      g_clear_pointer (&s->image, gst_sample_unref);
      s->image = g_value_dup_boxed (value);
      if (s->image && s->image_location) {
        g_clear_pointer (&s->image_location, g_free);
        unset = "image-location";
      }
      break;
    case PROP_LAST_IMAGE:
      g_clear_pointer (&s->last_image, gst_sample_unref);
      s->last_image = g_value_dup_boxed (value);
      if (s->last_image && s->last_image_location) {
        g_clear_pointer (&s->last_image_location, g_free);
        unset = "last-image-location";
      }
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK (self);
  if (unset) {
    GST_INFO_OBJECT (self, "%s replaces %s", pspec->name, unset);
    g_object_notify (object, unset);
  }
}

static void
gst_h3_video_src_get_property (GObject * object, guint prop_id,
    GValue * value, GParamSpec * pspec)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (object);
  GstH3Settings *s = &self->settings;

  switch (prop_id) {
    case PROP_CAPABILITIES:
      g_value_take_boxed (value, gst_h3_capabilities_structure_new ());
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
      g_value_set_string (value, gst_h3_settings_model_dir (s));
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
    case PROP_LOAD_FORMAT:
      g_value_set_enum (value, s->load_format);
      break;
    case PROP_DUMMY_ADAPTER:
      g_value_set_enum (value, s->dummy_adapter);
      break;
    case PROP_PRECISION:
      g_value_set_enum (value, s->precision);
      break;
    case PROP_MEMORY:
      g_value_set_enum (value, s->memory);
      break;
    case PROP_MAX_GPU_MEMORY:
      g_value_set_uint64 (value, s->max_gpu_memory);
      break;
    case PROP_ENGINE_CACHE:
      g_value_set_boolean (value, s->engine_cache);
      break;
    case PROP_KEEP_CLIP:
      g_value_set_boolean (value, s->keep_clip);
      break;
    case PROP_KEEP_CLIP_MAX_BYTES:
      g_value_set_uint64 (value, s->keep_clip_max_bytes);
      break;
    case PROP_IS_LIVE:
      g_value_set_boolean (value, s->is_live);
      break;
    case PROP_LATENCY:
      g_value_set_int64 (value, s->latency);
      break;
    case PROP_IMAGE_LOCATION:
      g_value_set_string (value, s->image_location);
      break;
    case PROP_LAST_IMAGE_LOCATION:
      g_value_set_string (value, s->last_image_location);
      break;
    case PROP_IMAGE:
      g_value_set_boxed (value, s->image);
      break;
    case PROP_LAST_IMAGE:
      g_value_set_boxed (value, s->last_image);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK (self);
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

/* ---- state changes ------------------------------------------------------- */

/* READY->PAUSED, before the pads are activated: snapshot and check the
 * properties (everything that needs no weight, gst_h3_settings_check), that
 * a pad is linked and that downstream accepts the caps, forget the last
 * run, and describe the new run's streams. */
static gboolean
run_prepare (GstH3VideoSrc * self)
{
  GstH3Settings snapshot;
  GstH3Keyframe keyframes[2];
  h3_preflight pf;

  memset (&snapshot, 0, sizeof snapshot);
  GST_OBJECT_LOCK (self);
  gst_h3_settings_copy (&snapshot, &self->settings);
  GST_OBJECT_UNLOCK (self);
  /* The keyframes first: a bad file or sample is refused before anything
   * else is looked at, and their sizes go into h3core's request check. */
  if (!gst_h3_keyframes_load (self, &snapshot, keyframes)) {
    gst_h3_settings_clear (&snapshot);
    return FALSE;
  }
  if (!gst_h3_settings_check (self, &snapshot, keyframes, &pf)) {
    gst_h3_keyframe_clear (&keyframes[0]);
    gst_h3_keyframe_clear (&keyframes[1]);
    gst_h3_settings_clear (&snapshot);
    return FALSE;
  }
  if (!gst_pad_is_linked (self->video.pad)
      && !gst_pad_is_linked (self->audio.pad)) {
    GST_ELEMENT_ERROR (self, STREAM, FAILED,
        ("Neither pad of %s is linked: link its video pad, its audio pad or "
            "both before starting it.", GST_ELEMENT_NAME (self)),
        ("not-linked at READY->PAUSED"));
    gst_h3_keyframe_clear (&keyframes[0]);
    gst_h3_keyframe_clear (&keyframes[1]);
    gst_h3_settings_clear (&snapshot);
    return FALSE;
  }

  /* The previous run's generation may still read its keyframes: replace
   * them once it has returned. */
  gst_h3_video_src_worker_join (self);
  gst_h3_video_src_clip_clear (self);
  gst_h3_video_src_streams_clear (self);
  gst_h3_settings_clear (&self->run);
  self->run = snapshot;
  for (gint i = 0; i < 2; i++) {
    gst_h3_keyframe_clear (&self->run_keyframes[i]);
    self->run_keyframes[i] = keyframes[i];
  }
  self->run_frames = h3_align_frames (self->run.num_frames);
  self->run_rate = pf.sample_rate;
  self->run_audio_len = (gint64) gst_util_uint64_scale_round (self->run_frames,
      self->run_rate, H3_FPS);
  self->run_keep = FALSE;
  if (self->run.keep_clip && !self->run.is_live) {
    guint64 bytes = gst_h3_clip_bytes (self->run_frames, self->run.width,
        self->run.height, self->run_rate);

    self->run_keep = bytes <= self->run.keep_clip_max_bytes;
    if (!self->run_keep)
      GST_WARNING_OBJECT (self, "the clip takes %" G_GUINT64_FORMAT " bytes, "
          "more than keep-clip-max-bytes (%" G_GUINT64_FORMAT "): it is not "
          "kept, frames are freed as they are pushed and seeks are refused",
          bytes, self->run.keep_clip_max_bytes);
  }

  /* Downstream is in PAUSED already: a capsfilter that wants another size
   * or rate fails the state change, not a run minutes later. */
  if (!gst_h3_video_src_accept_caps (self, &self->video)
      || !gst_h3_video_src_accept_caps (self, &self->audio))
    return FALSE;

  gst_h3_video_src_streams_new (self);

  gst_h3_output_reset (&self->video);
  gst_h3_output_reset (&self->audio);
  GST_OBJECT_LOCK (self);
  gst_flow_combiner_reset (self->combiner);
  GST_OBJECT_UNLOCK (self);

  g_mutex_lock (&self->lock);
  gst_segment_init (&self->segment, GST_FORMAT_TIME);
  if (!self->run.is_live)
    self->segment.duration = gst_h3_frame_time (self->run_frames);
  self->playing = FALSE;
  self->live_origin = self->live_next_base = GST_CLOCK_TIME_NONE;
  self->segment_gen = 0;
  self->seeking = 0;
  self->segment_done_pads = 0;
  self->running = TRUE;
  self->flushing = FALSE;
  self->cancel = FALSE;
  g_atomic_int_set (&self->cancel_flag, 0);
  self->eos_requested = FALSE;
  self->eos_plan = GST_H3_EOS_NONE;
  self->eos_warned = FALSE;
  self->waiting = FALSE;
  self->phase = H3_PHASE_LOAD;
  self->phase_done = self->phase_total = 0;
  self->stop_streaming = FALSE;
  self->error_posted = FALSE;
  self->generating = FALSE;
  self->worker_done = FALSE;
  self->run_start_us = self->denoise_start_us = g_get_monotonic_time ();
  g_mutex_unlock (&self->lock);

  gst_element_post_message (GST_ELEMENT (self),
      gst_message_new_stream_collection (GST_OBJECT (self),
          self->collection));
  GST_INFO_OBJECT (self, "run: \"%s\" seed %" G_GUINT64_FORMAT " %dx%d, %d "
      "frames, %d Hz", self->run.prompt, self->run.seed, self->run.width,
      self->run.height, self->run_frames, self->run_rate);
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
  /* No reference: dispose joins the thread (gsth3videosrc-worker.c). */
  self->worker = g_thread_new ("h3videosrc-gen", gst_h3_video_src_worker,
      self);
}

/* PAUSED->READY, before the pads are deactivated: cancel and wake
 * everything so that the deactivation (which stops the tasks) is quick. */
static void
run_stop (GstH3VideoSrc * self)
{
  /* After a seek in progress (which restarts the tasks), before any other. */
  g_mutex_lock (&self->seek_lock);
  g_mutex_lock (&self->lock);
  self->running = FALSE;
  self->flushing = TRUE;
  self->playing = FALSE;
  g_queue_clear_full (&self->prompt_queue,
      (GDestroyNotify) gst_h3_queued_prompt_free);
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  g_mutex_unlock (&self->seek_lock);
  gst_h3_video_src_cancel (self);
  gst_h3_video_src_post_progress (self, &self->load_open,
      GST_PROGRESS_TYPE_CANCELED, "load", 0, "Stopped while loading the model");
  gst_h3_video_src_post_progress (self, &self->wait_open,
      GST_PROGRESS_TYPE_CANCELED, "wait", 0, "Stopped while waiting");
  gst_h3_video_src_post_progress (self, &self->generate_open,
      GST_PROGRESS_TYPE_CANCELED, "generate", 0, "Generation cancelled");
}

/* PAUSED->READY (after the tasks stopped) and READY->NULL: wait a bounded
 * time for the cancelled generation to return, then free the clip. A
 * worker still in a long step or a model load is joined at the next start
 * or by dispose, which always waits. */
static void
run_release (GstH3VideoSrc * self)
{
  if (gst_h3_video_src_worker_wait (self, GST_H3_STOP_WAIT))
    gst_h3_video_src_clip_clear (self);
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
    case GST_STATE_CHANGE_PLAYING_TO_PAUSED:
      g_mutex_lock (&self->lock);
      self->playing = FALSE;
      g_mutex_unlock (&self->lock);
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
      if (self->run.is_live)
        ret = GST_STATE_CHANGE_NO_PREROLL;
      break;
    case GST_STATE_CHANGE_PAUSED_TO_PLAYING:
      /* A live source's data flows now. */
      g_mutex_lock (&self->lock);
      self->playing = TRUE;
      g_cond_broadcast (&self->cond);
      g_mutex_unlock (&self->lock);
      break;
    case GST_STATE_CHANGE_PLAYING_TO_PAUSED:
      if (self->run.is_live)
        ret = GST_STATE_CHANGE_NO_PREROLL;
      break;
    case GST_STATE_CHANGE_PAUSED_TO_READY:
    case GST_STATE_CHANGE_READY_TO_NULL:
      run_release (self);
      break;
    default:
      break;
  }
  return ret;
}