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
#include "gsth3videosrc-engine.h"
#include "gsth3videosrc-events.h"
#include "gsth3videosrc-live.h"
#include "gsth3videosrc-messages.h"
#include "gsth3videosrc-uri.h"

GST_DEBUG_CATEGORY (gst_h3_video_src_debug);

/* The properties written by hand; every other one is a row of the request
 * schema (gst_h3_settings_install_properties), with ids from
 * PROP_SCHEMA_FIRST on. */
enum
{
  PROP_0,
  PROP_ALIGNED_FRAMES,
  PROP_IMAGE,
  PROP_LAST_IMAGE,
  PROP_CAPABILITIES,
  PROP_STATS,
  PROP_SCHEMA_FIRST
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

/* ---- enums ---------------------------------------------------------------
 * The values, their names and descriptions are the schema's choices. */

GType
gst_h3_backend_get_type (void)
{
  return gst_h3_settings_enum_type ("backend");
}

GType
gst_h3_compute_get_type (void)
{
  return gst_h3_settings_enum_type ("compute");
}

GType
gst_h3_load_format_get_type (void)
{
  return gst_h3_settings_enum_type ("load-format");
}

GType
gst_h3_precision_get_type (void)
{
  return gst_h3_settings_enum_type ("precision");
}

GType
gst_h3_dummy_adapter_get_type (void)
{
  return gst_h3_settings_enum_type ("dummy-adapter");
}

GType
gst_h3_memory_get_type (void)
{
  return gst_h3_settings_enum_type ("memory");
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
  GST_H3_VIDEO_SRC_LOCK (self);
  g_queue_push_tail (&self->prompt_queue, q);
  GST_H3_VIDEO_SRC_BROADCAST (self);
  GST_H3_VIDEO_SRC_UNLOCK (self);
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

  /* Every setting of the request, the engine and the element: one
   * property per row of the request schema (h3.h's h3_params and the
   * element's own rows), its name, nick, blurb, range and default from the
   * row; docs/ELEMENT.md documents each. */
  gst_h3_settings_install_properties (gobject_class, PROP_SCHEMA_FIRST);

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
          h3_align_frames (h3_request_default ().num_frames), ro));

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
  GST_H3_VIDEO_SRC_LOCK (self);
  if (self->worker && self->worker == g_thread_self ()
      && !self->worker_exiting) {
    self->worker_holds_ref = TRUE;
    GST_H3_VIDEO_SRC_UNLOCK (self);
    gst_h3_video_src_cancel (self);
    g_object_ref (self);
    return;
  }
  GST_H3_VIDEO_SRC_UNLOCK (self);

  /* No generation outlives the element: wait for it (cancelled, it ends at
   * its next step, or when a model load in progress is over). */
  GST_H3_VIDEO_SRC_LOCK (self);
  self->flushing = TRUE;
  GST_H3_VIDEO_SRC_UNLOCK (self);
  gst_h3_video_src_cancel (self);
  gst_h3_video_src_worker_join (self);
  gst_h3_video_src_clip_clear (self);
  gst_h3_video_src_streams_clear (self);
  GST_H3_VIDEO_SRC_LOCK (self);
  engine = self->engine;
  self->engine = NULL;
  GST_H3_VIDEO_SRC_UNLOCK (self);
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
gst_h3_video_src_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec)
{
  GstH3VideoSrc *self = GST_H3_VIDEO_SRC (object);
  GstH3Settings *s = &self->settings;
  const h3_param *row = gst_h3_settings_row (prop_id);
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
  if (row)
    gst_h3_settings_set_value (s, row, value);
  switch (prop_id) {
      /* A keyframe comes from a file or from a sample: the last set wins. */
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
      if (!row)
        G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      else if (row->flags & H3_PARAM_PATH) {
        gchar *path = *(gchar **) h3_param_field (row,
            gst_h3_settings_home (s, row));
        gboolean set = path && *path;
        if (set && s->image && g_str_equal (row->name, "image-location")) {
          g_clear_pointer (&s->image, gst_sample_unref);
          unset = "image";
        } else if (set && s->last_image
            && g_str_equal (row->name, "last-image-location")) {
          g_clear_pointer (&s->last_image, gst_sample_unref);
          unset = "last-image";
        }
      }
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
  const h3_param *row = gst_h3_settings_row (prop_id);

  switch (prop_id) {
    case PROP_CAPABILITIES:
      g_value_take_boxed (value, gst_h3_capabilities_structure_new ());
      return;
    case PROP_STATS:
      GST_H3_VIDEO_SRC_LOCK (self);
      g_value_set_boxed (value, self->stats);
      GST_H3_VIDEO_SRC_UNLOCK (self);
      return;
    default:
      break;
  }

  GST_OBJECT_LOCK (self);
  switch (prop_id) {
    case PROP_ALIGNED_FRAMES:
      g_value_set_int (value, h3_align_frames (s->request.num_frames));
      break;
    case PROP_IMAGE:
      g_value_set_boxed (value, s->image);
      break;
    case PROP_LAST_IMAGE:
      g_value_set_boxed (value, s->last_image);
      break;
    default:
      if (row)
        gst_h3_settings_get_value (s, row, value);
      else
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
  GST_H3_VIDEO_SRC_LOCK (self);
  self->flushing = TRUE;
  GST_H3_VIDEO_SRC_BROADCAST (self);
  GST_H3_VIDEO_SRC_UNLOCK (self);
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
  self->run_frames = h3_align_frames (self->run.request.num_frames);
  self->run_rate = pf.sample_rate;
  self->run_audio_len = (gint64) gst_util_uint64_scale_round (self->run_frames,
      self->run_rate, H3_FPS);
  self->run_keep = FALSE;
  if (self->run.keep_clip && !self->run.is_live) {
    guint64 bytes = gst_h3_clip_bytes (self->run_frames, self->run.request.width,
        self->run.request.height, self->run_rate);

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

  GST_H3_VIDEO_SRC_LOCK (self);
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
  GST_H3_VIDEO_SRC_UNLOCK (self);

  gst_element_post_message (GST_ELEMENT (self),
      gst_message_new_stream_collection (GST_OBJECT (self),
          self->collection));
  GST_INFO_OBJECT (self, "run: \"%s\" seed %" G_GUINT64_FORMAT " %dx%d, %d "
      "frames, %d Hz", self->run.request.prompt, self->run.request.seed, self->run.request.width,
      self->run.request.height, self->run_frames, self->run_rate);
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
  GST_H3_VIDEO_SRC_LOCK (self);
  self->running = FALSE;
  self->flushing = TRUE;
  self->playing = FALSE;
  g_queue_clear_full (&self->prompt_queue,
      (GDestroyNotify) gst_h3_queued_prompt_free);
  GST_H3_VIDEO_SRC_BROADCAST (self);
  GST_H3_VIDEO_SRC_UNLOCK (self);
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
      GST_H3_VIDEO_SRC_LOCK (self);
      self->playing = FALSE;
      GST_H3_VIDEO_SRC_UNLOCK (self);
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
      GST_H3_VIDEO_SRC_LOCK (self);
      self->playing = TRUE;
      GST_H3_VIDEO_SRC_BROADCAST (self);
      GST_H3_VIDEO_SRC_UNLOCK (self);
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