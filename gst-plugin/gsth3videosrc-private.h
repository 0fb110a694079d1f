/* gsth3videosrc-private.h - what the files of h3videosrc share: the
 * instance struct, the internal types and the cross-file functions.
 *
 * The element is a GstElement with two ALWAYS source pads. It holds no model
 * code: it drives the h3core engine (h3.h) from a worker thread and streams
 * what the engine's callbacks deliver.
 *
 *   READY->PAUSED  snapshot the properties, decode the keyframes (FL2VA:
 *                  files and samples into the run's own RGB), and check
 *                  everything that needs no weight (h3_engine_preflight: the model's layout and
 *                  audio rate, compute and devices, backend against the
 *                  adapter's kind; a linked pad; downstream accepting the
 *                  caps), then start one pad task per pad and the worker.
 *   worker         take the process's engine for the model settings (load
 *                  it, or wait for the element loading it), wait for its
 *                  turn on it, validate the request into a plan, generate.
 *                  Callbacks store decoded frames and samples in the run's
 *                  clip and wake the pad tasks. Stats, h3videosrc/done and
 *                  the `generate` COMPLETE are posted before the tasks may
 *                  push EOS.
 *   pad tasks      each pushes its own stream at downstream's pace:
 *                  stream-start, caps, segment, collection, tags at once,
 *                  then one buffer per video frame (audio sliced per video
 *                  frame), then EOS. One blocked branch never stalls the
 *                  other. Each plays self->segment: a seek in a kept clip
 *                  (keep-clip) sets a new one and the tasks start over
 *                  from its position (SEGMENT_DONE instead of EOS for a
 *                  segment seek). Live (is-live), each pushes complete
 *                  clips (self->live_clips) in PLAYING, one after the
 *                  other, from where the last one ended, while the worker
 *                  generates the next queued prompt.
 *   EOS            (the application's) ends the clip where both pads have
 *                  data: the generation stops, or first goes on to its
 *                  first frames when they are near (eos_plan); the pads
 *                  push the decoded frames, the audio up to the last one's
 *                  end, then EOS; a WARNING says what was cut.
 *   PAUSED->READY  cancel (the engine polls the run's cancel flag), wake and
 *                  stop the tasks, and wait a bounded time for the worker
 *                  (GST_H3_STOP_WAIT); one still in a step or a model load is
 *                  joined at the next start or when the element is freed:
 *                  dispose always waits for it, so that no generation runs
 *                  once the application has dropped the element and a
 *                  process can exit.
 *
 * Timestamps come from frame and sample counters, never from accumulated
 * durations, so the streams cannot drift apart.
 *
 * One file per concern:
 *   gsth3videosrc.c           the element: GObject boilerplate, properties,
 *                             pads, state changes
 *   gsth3videosrc-settings.c  the properties' values: defaults, copies, the
 *                             checks before a run (h3core's rules), the
 *                             h3_request
 *   gsth3videosrc-engine.c    the engines shared by the elements of a
 *                             process: loads, turns, cancellation
 *   gsth3videosrc-worker.c    the generation thread and the engine callbacks
 *   gsth3videosrc-output.c    the pad tasks: buffers, caps, sticky events, EOS
 *   gsth3videosrc-events.c    the application's EOS, seeks, the pads' queries
 *   gsth3videosrc-messages.c  progress, step and done messages, the stats and
 *                             capabilities structures, engine errors
 *   gsth3videosrc-uri.c       the h3: URI of a clip (h3src handles it)
 *   gsth3videosrc-keyframes.c the FL2VA keyframes: files (media/) and
 *                             GstSamples into RGB, once per run
 *   gsth3videosrc-sample.c    a GstSample checked (caps, video meta planes
 *                             against the memory) and copied as RGB; apart
 *                             for tests/fuzz/fuzz_sample.c
 */
#ifndef GST_H3_VIDEO_SRC_PRIVATE_H
#define GST_H3_VIDEO_SRC_PRIVATE_H

#include <gst/gst.h>
#include <gst/base/gstflowcombiner.h>

#include "gsth3videosrc.h"
#include "h3.h"
#include "h3_image_file.h"

G_BEGIN_DECLS

GST_DEBUG_CATEGORY_EXTERN (gst_h3_video_src_debug);
#define GST_CAT_DEFAULT gst_h3_video_src_debug

/* Live mode: what a clip's first buffer needs after the clip is complete
 * to reach the sinks (the push through the pipeline), added to the
 * latency the element reports; and the margin on a measured generation
 * time in the estimate (x 1.25). */
#define GST_H3_LIVE_MARGIN (200 * GST_MSECOND)
#define GST_H3_LIVE_ESTIMATE_FACTOR 1.25

/* How long PAUSED->READY (and READY->NULL) wait for a cancelled generation
 * to return: it stops at the next denoising step or decode window, which is
 * milliseconds on the tiny model and can be seconds on the full one. A
 * worker still running then is joined when the element is freed. */
#define GST_H3_STOP_WAIT (500 * G_TIME_SPAN_MILLISECOND)

/* Application EOS before the first frame: a file needs a frame to play
 * (an encoder writes no header without one, and an MP4 track without a
 * sample description does not open), so the generation goes on to its
 * first decoded frames when, at the pace of the steps done, the denoising
 * steps left take at most this long; otherwise it stops at once and the
 * streams end without media (gsth3videosrc-worker.c, eos_plan). */
#define GST_H3_EOS_FINISH_WAIT (5 * G_TIME_SPAN_SECOND)

/* What an application EOS does to a generation in flight. */
typedef enum
{
  GST_H3_EOS_NONE,              /* no EOS requested */
  GST_H3_EOS_PENDING,           /* decided at the next denoising step */
  GST_H3_EOS_FINISH,            /* go on to the first frames, cut there */
  GST_H3_EOS_CUT                /* stopped: the clip ends at frames_ready */
} GstH3EosPlan;

/* Everything the properties configure. The element keeps one copy under the
 * object lock and snapshots it into `run` when a run starts, so property
 * changes never reach a generation in flight. Every field but the samples
 * is a row of a schema (h3.h's h3_params for the request and the engine
 * options, gst_h3_settings_params for the element's own): its default,
 * range, property and URI key come from there. Strings are owned. */
typedef struct
{
  h3_request request;           /* prompt (first_image, last_image: unset) */
  h3_engine_options options;    /* model_dir, adapter_path, devices (log: unset) */
  gboolean engine_cache;
  gboolean keep_clip;
  guint64 keep_clip_max_bytes;
  gboolean is_live;
  gint64 latency;               /* ns, or -1: estimated */
  /* FL2VA keyframes: a file or a sample for each (setting one clears the
   * other: the last set wins); all unset: T2VA. */
  gchar *image_location, *last_image_location;
  GstSample *image, *last_image;
} GstH3Settings;

/* A keyframe of a run, decoded at READY->PAUSED (gsth3videosrc-keyframes.c):
 * packed RGB pixels of its own and their digest (for the stream ids). */
typedef struct
{
  gboolean present;
  h3_image_file file;
  gchar *digest;                /* SHA-256 of the size and pixels */
} GstH3Keyframe;

/* Live mode: a complete clip waiting to be pushed, or being pushed, with
 * the timestamp offset both pads give it (gsth3videosrc-output.c). */
typedef struct
{
  guint index;                  /* 0: the run's first clip */
  gchar *prompt;
  guint64 seed;
  h3_plan plan;
  GstBuffer **frames;           /* plan.num_frames, NULL once pushed */
  gfloat *samples;              /* audio_len stereo frames */
  gint64 audio_len;
  GstClockTime complete_rt;     /* running time when complete, or NONE (before PLAYING) */
  GstClockTime base;            /* PTS of its first frame, NONE until decided */
  gint pads_left;               /* pads still pushing it */
} GstH3LiveClip;

/* A prompt queued with queue-prompt. */
typedef struct
{
  gchar *prompt;
  guint64 seed;
} GstH3QueuedPrompt;

/* An engine shared by the elements of the process (gsth3videosrc-engine.c). */
typedef struct _GstH3Engine GstH3Engine;

/* One source pad and the position of its pad task in the run. Touched only
 * by that task, or by the state change while the task is stopped. */
typedef struct
{
  GstH3VideoSrc *self;
  GstPad *pad;
  gboolean is_video;
  gint next;                    /* next video frame, or audio slice (one per frame) */
  gint end;                     /* video: the segment's end frame (exclusive) */
  gint64 sample, sample_end;    /* audio: next sample, the segment's end */
  guint segment_gen;            /* the segment (self->segment_gen) pushed */
  gboolean started;             /* sticky events pushed */
  gboolean discont;
  gboolean eos;
  gboolean segment_done;        /* SEGMENT_DONE pushed for segment_gen */
  /* Live mode: the clip this pad is on (its index), where the last one
   * ended, and the running offsets (frames, samples) of the stream. */
  guint live_index;
  gboolean live_started;        /* the gap and tags before live_index pushed */
  GstClockTime live_end;
  guint64 live_offset;
  GstFlowReturn last_flow;      /* of the last push */
} GstH3Output;

struct _GstH3VideoSrc
{
  GstElement parent;

  GstH3Output video, audio;

  GstH3Settings settings;       /* object lock */

  /* The process's engine for the model settings of the last run, kept
   * across runs while they stay the same. Set by the worker under `lock`;
   * released on dispose or when the settings change. */
  GstH3Engine *engine;

  GThread *worker;
  GstH3Settings run;            /* read-only while the worker runs */
  GstH3Keyframe run_keyframes[2];       /* the run's first and last; read-only too */
  gint run_frames;              /* aligned frame count of the run */
  gint run_rate;                /* audio rate of the run (the preflight's) */
  gint64 run_audio_len;         /* stereo samples of the run: the video's length */
  gboolean run_keep;            /* the run keeps its clip: seekable */

  /* The run's stop flag: the engine polls it (h3_callbacks.cancel_flag), so
   * does every wait for an engine. Atomic; raised with `cancel`. */
  volatile gint cancel_flag;

  /* The run; guarded by `lock`, changes broadcast on `cond`. */
  GMutex lock;
  GCond cond;
  gboolean running;             /* between READY->PAUSED and PAUSED->READY */
  gboolean flushing;            /* tasks must return at once */
  gboolean cancel;              /* the generation must stop */
  gboolean eos_requested;       /* application EOS: end the clip early */
  guint32 eos_seqnum;
  GstH3EosPlan eos_plan;        /* what the EOS does (CUT once it returned) */
  gboolean eos_warned;          /* the WARNING about the cut is posted */
  gboolean waiting;             /* for another element's load or turn */
  h3_phase phase;               /* the engine's last progress, -1: none */
  gint phase_done, phase_total;
  gboolean stop_streaming;      /* fatal error: push EOS and stop */
  gboolean error_posted;
  gboolean generating;          /* in h3_engine_generate, until done is posted */
  gboolean worker_done;
  gboolean worker_holds_ref;    /* dispose ran on the worker: it drops the last ref */
  gboolean worker_exiting;
  gboolean have_plan;
  h3_plan plan;
  GstBuffer **frames;           /* plan.num_frames; NULL once pushed, unless run_keep */
  gint frames_ready;
  gfloat *samples;              /* audio_len stereo frames, zero padded */
  gint64 audio_len, audio_ready, audio_delivered;
  gboolean generated;           /* the clip is complete: stats, done, COMPLETE posted */
  gchar *callback_error;        /* the engine broke the callback contract */
  gint64 run_start_us, denoise_start_us;
  GstStructure *stats;

  /* Live mode (run.is_live), under `lock`: the clips generated and not yet
   * pushed by both pads (GstH3LiveClip, in order), the prompts queued for
   * the next clips (GstH3QueuedPrompt; kept across runs until PAUSED->READY
   * of a run), whether the element is PLAYING, the running time it
   * started playing at, where the last clip ends (the next one starts
   * there or later), and the measured generation time the latency
   * estimate comes from (of this element's last clip of the same shape). */
  GQueue live_clips;
  GQueue prompt_queue;
  guint live_clips_made;
  gboolean playing;
  GstClockTime live_origin, live_next_base;
  gchar *measured_shape;
  gdouble measured_seconds;

  /* The audio rate of the model settings outside a run (caps queries):
   * h3_engine_preflight's, cached per engine key. Under `lock`. */
  gchar *rate_key;
  gint rate;

  /* Progress bookkeeping: each START gets exactly one terminal message. */
  GRecMutex progress_lock;
  gboolean load_open, generate_open, wait_open;

  /* Identity of the run's streams; written at start, then read-only. */
  guint group_id;
  guint32 segment_seqnum;
  gchar *video_stream_id, *audio_stream_id;
  GstStream *video_stream, *audio_stream;
  GstStreamCollection *collection;

  /* The segment the pad tasks play, under `lock`: set at READY->PAUSED
   * ([0, duration]) and by each accepted seek, which bumps segment_gen;
   * each task pushes it when its own segment_gen is behind. position: the
   * end of the last buffer pushed (the base of a non-flushing seek). */
  GstSegment segment;
  guint segment_gen;
  gint seeking;                 /* a flushing seek stops the tasks */
  gint segment_done_pads;       /* pads that pushed SEGMENT_DONE for segment_gen */

  GstFlowCombiner *combiner;    /* object lock */
  GMutex seek_lock;             /* one seek at a time, against run_stop */
  guint32 last_seek_seqnum;     /* object lock */
  gboolean last_seek_result;
};

/* What the worker was doing when the engine failed (for the message). */
typedef enum
{
  GST_H3_STAGE_LOAD,
  GST_H3_STAGE_VALIDATE,
  GST_H3_STAGE_GENERATE
} GstH3Stage;

/* The functions the files share: internal to the plugin. */

/* ---- gsth3videosrc-settings.c -------------------------------------------- */

/* The element's own rows (H3_PARAM_IN_FRONTEND: offsets into
 * GstH3Settings), ended by a NULL name. */
G_GNUC_INTERNAL
const h3_param *gst_h3_settings_params (void);
/* Installs a property for every row of h3_params (but the tools' own) and
 * of gst_h3_settings_params, with ids from first_id on, in that order. */
G_GNUC_INTERNAL
void gst_h3_settings_install_properties (GObjectClass * klass,
    guint first_id);
/* The row of property id (as installed), or NULL. */
G_GNUC_INTERNAL
const h3_param *gst_h3_settings_row (guint prop_id);
/* The row's field in s (its home struct). */
G_GNUC_INTERNAL
gpointer gst_h3_settings_home (GstH3Settings * s, const h3_param * row);
/* The row's value in s into value (initialised to the property's type);
 * and the reverse. */
G_GNUC_INTERNAL
void gst_h3_settings_get_value (GstH3Settings * s, const h3_param * row,
    GValue * value);
G_GNUC_INTERNAL
void gst_h3_settings_set_value (GstH3Settings * s, const h3_param * row,
    const GValue * value);
G_GNUC_INTERNAL
void gst_h3_settings_init (GstH3Settings * s);
G_GNUC_INTERNAL
void gst_h3_settings_clear (GstH3Settings * s);
G_GNUC_INTERNAL
void gst_h3_settings_copy (GstH3Settings * dst, const GstH3Settings * src);
G_GNUC_INTERNAL
const gchar *gst_h3_settings_model_dir (const GstH3Settings * s);
G_GNUC_INTERNAL
gchar *gst_h3_settings_engine_key (const GstH3Settings * s);
G_GNUC_INTERNAL
gchar *gst_h3_settings_stream_id (const GstH3Settings * s,
    const GstH3Keyframe * keyframes, const gchar * pad_name);
/* The GEnum of an ENUM row of h3_params ("backend": GstH3Backend). */
G_GNUC_INTERNAL
GType gst_h3_settings_enum_type (const gchar * row_name);
G_GNUC_INTERNAL
h3_request gst_h3_settings_request (const GstH3Settings * s);
G_GNUC_INTERNAL
void gst_h3_settings_engine_options (const GstH3Settings * s,
    h3_engine_options * opt);
G_GNUC_INTERNAL
gboolean gst_h3_settings_check (GstH3VideoSrc * self, const GstH3Settings * s,
    const GstH3Keyframe * keyframes, h3_preflight * pf);

/* ---- gsth3videosrc-keyframes.c ------------------------------------------- */

G_GNUC_INTERNAL
gboolean gst_h3_keyframes_load (GstH3VideoSrc * self, const GstH3Settings * s,
    GstH3Keyframe kf[2]);
G_GNUC_INTERNAL
void gst_h3_keyframes_apply (const GstH3Keyframe kf[2], h3_request * req);
G_GNUC_INTERNAL
void gst_h3_keyframe_clear (GstH3Keyframe * k);

/* ---- gsth3videosrc-engine.c ---------------------------------------------- */

/* The entry for key, with a reference; *must_load: the caller made it and
 * loads it (gst_h3_engine_load), else it waits (gst_h3_engine_wait_loaded).
 * shared=FALSE: an entry of the caller's own, outside the table. */
G_GNUC_INTERNAL
GstH3Engine *gst_h3_engine_lookup (const gchar * key, gboolean shared,
    gboolean * must_load);
G_GNUC_INTERNAL
gboolean gst_h3_engine_load (GstH3Engine * e, GstObject * loader,
    h3_engine_options * opt, h3_status * st);
/* Called once when a wait begins, with the name of the element it waits
 * for (the loader, or the one generating); no lock held. */
typedef void (*GstH3WaitFunc) (gpointer data, const gchar * holder);
G_GNUC_INTERNAL
gboolean gst_h3_engine_wait_loaded (GstH3Engine * e,
    const volatile gint * cancel, GstH3WaitFunc on_wait, gpointer data,
    h3_status * st);
G_GNUC_INTERNAL
gboolean gst_h3_engine_begin (GstH3Engine * e, GstObject * owner,
    const volatile gint * cancel, GstH3WaitFunc on_wait, gpointer data);
G_GNUC_INTERNAL
void gst_h3_engine_end (GstH3Engine * e, GstObject * owner);
G_GNUC_INTERNAL
void gst_h3_engine_cancel (GstH3Engine * e, GstObject * owner);
G_GNUC_INTERNAL
void gst_h3_engine_wake (void);
G_GNUC_INTERNAL
void gst_h3_engine_note_time (GstH3Engine * e, const gchar * shape,
    gdouble seconds);
G_GNUC_INTERNAL
gdouble gst_h3_engine_time_for (const gchar * key, const gchar * shape);
G_GNUC_INTERNAL
h3_engine *gst_h3_engine_get (GstH3Engine * e);
G_GNUC_INTERNAL
const gchar *gst_h3_engine_key (GstH3Engine * e);
G_GNUC_INTERNAL
gboolean gst_h3_engine_is_shared (GstH3Engine * e);
G_GNUC_INTERNAL
void gst_h3_engine_unref (GstH3Engine * e);

/* ---- gsth3videosrc-worker.c ---------------------------------------------- */

G_GNUC_INTERNAL
gpointer gst_h3_video_src_worker (gpointer data);
G_GNUC_INTERNAL
void gst_h3_video_src_worker_join (GstH3VideoSrc * self);
G_GNUC_INTERNAL
gboolean gst_h3_video_src_worker_wait (GstH3VideoSrc * self, gint64 timeout);
G_GNUC_INTERNAL
void gst_h3_video_src_cancel (GstH3VideoSrc * self);
G_GNUC_INTERNAL
GstH3EosPlan gst_h3_video_src_eos_decide (GstH3VideoSrc * self,
    gdouble * first_in);
G_GNUC_INTERNAL
void gst_h3_video_src_eos_apply (GstH3VideoSrc * self, GstH3EosPlan plan,
    gdouble first_in);
G_GNUC_INTERNAL
void gst_h3_video_src_clip_clear (GstH3VideoSrc * self);
G_GNUC_INTERNAL
void gst_h3_live_clip_free (GstH3LiveClip * clip);
G_GNUC_INTERNAL
void gst_h3_queued_prompt_free (GstH3QueuedPrompt * q);
G_GNUC_INTERNAL
gchar *gst_h3_settings_shape (const GstH3Settings * s);
G_GNUC_INTERNAL
GstClockTime gst_h3_video_src_latency (GstH3VideoSrc * self);
G_GNUC_INTERNAL
GstClockTime gst_h3_video_src_running_time (GstH3VideoSrc * self);

/* ---- gsth3videosrc-output.c ---------------------------------------------- */

G_GNUC_INTERNAL
GstClockTime gst_h3_frame_time (gint64 n);
G_GNUC_INTERNAL
gint64 gst_h3_frame_at (GstClockTime t);
G_GNUC_INTERNAL
GstCaps *gst_h3_video_caps_new (gint width, gint height);
G_GNUC_INTERNAL
GstCaps *gst_h3_audio_caps_new (gint rate);
G_GNUC_INTERNAL
void gst_h3_video_src_streams_new (GstH3VideoSrc * self);
G_GNUC_INTERNAL
void gst_h3_video_src_streams_clear (GstH3VideoSrc * self);
G_GNUC_INTERNAL
gboolean gst_h3_video_src_accept_caps (GstH3VideoSrc * self,
    GstH3Output * out);
G_GNUC_INTERNAL
void gst_h3_output_reset (GstH3Output * out);
G_GNUC_INTERNAL
guint64 gst_h3_clip_bytes (gint frames, gint width, gint height, gint rate);
G_GNUC_INTERNAL
void gst_h3_output_seek (GstH3VideoSrc * self, GstH3Output * out,
    const GstSegment * segment);
G_GNUC_INTERNAL
void gst_h3_video_src_loop (gpointer user_data);

/* ---- gsth3videosrc-events.c ---------------------------------------------- */

/* GstElement::send_event, and the source pads' event and query functions. */
gboolean gst_h3_video_src_send_event (GstElement * element, GstEvent * event);
gboolean gst_h3_video_src_src_event (GstPad * pad, GstObject * parent,
    GstEvent * event);
gboolean gst_h3_video_src_src_query (GstPad * pad, GstObject * parent,
    GstQuery * query);

/* ---- gsth3videosrc-messages.c -------------------------------------------- */

G_GNUC_INTERNAL
void gst_h3_video_src_post_progress (GstH3VideoSrc * self, gboolean * open,
    GstProgressType type, const gchar * code, gint percent,
    const gchar * format, ...) G_GNUC_PRINTF (6, 7);
G_GNUC_INTERNAL
gint gst_h3_phase_percent (h3_phase phase, gint done, gint total);
G_GNUC_INTERNAL
void gst_h3_video_src_post_step (GstH3VideoSrc * self, h3_phase phase,
    gint done, gint total, gint percent);
G_GNUC_INTERNAL
void gst_h3_video_src_post_done (GstH3VideoSrc * self, const gchar * result,
    const h3_stats * stats);
G_GNUC_INTERNAL
GstStructure *gst_h3_stats_structure_new (const h3_stats * stats);
G_GNUC_INTERNAL
GstStructure *gst_h3_capabilities_structure_new (void);
G_GNUC_INTERNAL
void gst_h3_video_src_post_engine_error (GstH3VideoSrc * self,
    GstH3Stage stage, const h3_status * st);
G_GNUC_INTERNAL
void gst_h3_video_src_post_settings_error (GstH3VideoSrc * self,
    const h3_status * st);
G_GNUC_INTERNAL
void gst_h3_video_src_post_preflight_error (GstH3VideoSrc * self,
    const h3_status * st);

/* ---- gsth3videosrc-uri.c ------------------------------------------------- */

G_GNUC_INTERNAL
gchar *gst_h3_uri_from_properties (GObject * h3videosrc);
G_GNUC_INTERNAL
gboolean gst_h3_uri_to_properties (GObject * h3videosrc, const gchar * uri,
    GError ** error);
G_GNUC_INTERNAL
gchar *gst_h3_uri_check_policy (const gchar * uri);

G_END_DECLS

#endif /* GST_H3_VIDEO_SRC_PRIVATE_H */
