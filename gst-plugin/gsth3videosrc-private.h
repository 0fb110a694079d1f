/* gsth3videosrc-private.h - the instance struct of h3videosrc, made of the
 * parts each file owns (settings, keyframes, pad outputs, the clip the worker
 * fills), and the macros of its lock. Each concern's functions are in its
 * own header (gsth3videosrc-<concern>.h), included by the files that call
 * them.
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
 *   gsth3videosrc-live.c      live mode's clips and prompts (the worker makes
 *                             them, the pad tasks push them), the running
 *                             time, the latency
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
#include "gsth3videosrc-keyframes.h"
#include "gsth3videosrc-output.h"
#include "gsth3videosrc-settings.h"
#include "gsth3videosrc-worker.h"

G_BEGIN_DECLS

GST_DEBUG_CATEGORY_EXTERN (gst_h3_video_src_debug);
#define GST_CAT_DEFAULT gst_h3_video_src_debug

/* How long PAUSED->READY (and READY->NULL) wait for a cancelled generation
 * to return: it stops at the next denoising step or decode window, which is
 * milliseconds on the tiny model and can be seconds on the full one. A
 * worker still running then is joined when the element is freed. */
#define GST_H3_STOP_WAIT (500 * G_TIME_SPAN_MILLISECOND)

/* The run's lock and condition (self->lock, self->cond), as GstBaseSrc's
 * GST_LIVE_LOCK: what they guard is marked in the struct below. */
#define GST_H3_VIDEO_SRC_GET_LOCK(self) (&(self)->lock)
#define GST_H3_VIDEO_SRC_GET_COND(self) (&(self)->cond)
#define GST_H3_VIDEO_SRC_LOCK(self) \
    g_mutex_lock (GST_H3_VIDEO_SRC_GET_LOCK (self))
#define GST_H3_VIDEO_SRC_UNLOCK(self) \
    g_mutex_unlock (GST_H3_VIDEO_SRC_GET_LOCK (self))
#define GST_H3_VIDEO_SRC_WAIT(self) \
    g_cond_wait (GST_H3_VIDEO_SRC_GET_COND (self), \
        GST_H3_VIDEO_SRC_GET_LOCK (self))
#define GST_H3_VIDEO_SRC_WAIT_UNTIL(self, end_time) \
    g_cond_wait_until (GST_H3_VIDEO_SRC_GET_COND (self), \
        GST_H3_VIDEO_SRC_GET_LOCK (self), (end_time))
#define GST_H3_VIDEO_SRC_BROADCAST(self) \
    g_cond_broadcast (GST_H3_VIDEO_SRC_GET_COND (self))

/* An engine shared by the elements of the process (gsth3videosrc-engine.h). */
typedef struct _GstH3Engine GstH3Engine;

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

  /* The run; guarded by `lock` (GST_H3_VIDEO_SRC_LOCK), changes broadcast
   * on `cond` (GST_H3_VIDEO_SRC_BROADCAST). */
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
  GstH3Clip clip;               /* the worker fills it (-worker.h) */
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

G_END_DECLS

#endif /* GST_H3_VIDEO_SRC_PRIVATE_H */
