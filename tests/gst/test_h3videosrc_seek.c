/* test_h3videosrc_seek.c - gst-check suite for h3videosrc's replay: the
 * kept clip (keep-clip), the SEEKING query, flushing and segment seeks in
 * TIME, and what is refused.
 *
 * Every test runs a pipeline of the real element on the embedded tiny model
 * on the CPU (64x32, 22 frames, 2 steps), each pad into a fakesink that
 * does not synchronise, with a probe that records what reaches the sink:
 * the segments, the buffers since the last one, SEGMENT_DONE and EOS.
 * The clip of the first pass is the reference: what a seek replays must
 * be its frames and samples, bit for bit, without running the model again
 * (no `generate` progress after the first pass). */
#include <gst/check/gstcheck.h>
#include <string.h>

#include "h3_gst_test.h"

#define PROMPT "a robot dancing"
#define FRAMES 22               /* 22 is already 17n+5 */

static GstClockTime
frame_time (guint64 n)
{
  return gst_util_uint64_scale (n, GST_SECOND, 24);
}

/* What reached one sink. */
typedef struct
{
  GMutex lock;
  GPtrArray *buffers;           /* since the last segment (or flush) */
  GstSegment segment;
  guint32 segment_seqnum;
  gint segments, segment_dones, eos;
} Sink;

typedef struct
{
  GstElement *pipeline, *src;
  GstBus *bus;
  Sink video, audio;
  gint generate_starts;         /* `generate` START messages (atomic) */
  gint dones;                   /* h3videosrc/done messages (atomic) */
  gint rate;                    /* the audio caps' rate */
} Pipe;

static GstPadProbeReturn
sink_probe (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  Sink *k = data;

  g_mutex_lock (&k->lock);
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER) {
    g_ptr_array_add (k->buffers,
        gst_buffer_ref (GST_PAD_PROBE_INFO_BUFFER (info)));
  } else if (info->type & GST_PAD_PROBE_TYPE_EVENT_BOTH) {
    GstEvent *ev = GST_PAD_PROBE_INFO_EVENT (info);

    switch (GST_EVENT_TYPE (ev)) {
      case GST_EVENT_SEGMENT:
        gst_event_copy_segment (ev, &k->segment);
        k->segment_seqnum = gst_event_get_seqnum (ev);
        k->segments++;
        g_ptr_array_set_size (k->buffers, 0);
        break;
      case GST_EVENT_FLUSH_STOP:
        g_ptr_array_set_size (k->buffers, 0);
        k->eos = 0;
        break;
      case GST_EVENT_SEGMENT_DONE:
        k->segment_dones++;
        break;
      case GST_EVENT_EOS:
        k->eos++;
        break;
      default:
        break;
    }
  }
  g_mutex_unlock (&k->lock);
  return GST_PAD_PROBE_OK;
}

static GstBusSyncReply
count_generate (GstBus * bus, GstMessage * m, gpointer data)
{
  Pipe *p = data;

  if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_PROGRESS) {
    GstProgressType type;
    gchar *code, *text;
    gst_message_parse_progress (m, &type, &code, &text);
    if (type == GST_PROGRESS_TYPE_START && g_strcmp0 (code, "generate") == 0)
      g_atomic_int_inc (&p->generate_starts);
    g_free (code);
    g_free (text);
  } else if (gst_message_has_name (m, "h3videosrc/done")) {
    g_atomic_int_inc (&p->dones);
  }
  return GST_BUS_PASS;
}

static void
sink_init (Pipe * p, Sink * k, const gchar * name)
{
  GstElement *sink = gst_bin_get_by_name (GST_BIN (p->pipeline), name);
  GstPad *pad = gst_element_get_static_pad (sink, "sink");

  g_mutex_init (&k->lock);
  k->buffers = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_buffer_unref);
  gst_segment_init (&k->segment, GST_FORMAT_UNDEFINED);
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER |
      GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM | GST_PAD_PROBE_TYPE_EVENT_FLUSH,
      sink_probe, k, NULL);
  gst_object_unref (pad);
  gst_object_unref (sink);
}

/* props: extra h3videosrc properties, as on a gst-launch line (after
 * steps=2, which they may override). */
static void
pipe_new (Pipe * p, const gchar * props)
{
  gchar *desc = g_strdup_printf ("h3videosrc name=s prompt=\"" PROMPT "\" "
      "width=64 height=32 num-frames=%d steps=2 seed=42 %s "
      "s.video ! fakesink name=vs sync=false "
      "s.audio ! fakesink name=as sync=false", FRAMES, props);
  GError *err = NULL;
  GstElement *e;

  memset (p, 0, sizeof *p);
  p->pipeline = gst_parse_launch (desc, &err);
  fail_unless (p->pipeline != NULL, "%s", err ? err->message : "");
  p->src = gst_bin_get_by_name (GST_BIN (p->pipeline), "s");
  p->bus = gst_element_get_bus (p->pipeline);
  gst_bus_set_sync_handler (p->bus, count_generate, p, NULL);
  sink_init (p, &p->video, "vs");
  sink_init (p, &p->audio, "as");
  /* The model's rate, as the audio caps say (before any run). */
  e = gst_bin_get_by_name (GST_BIN (p->pipeline), "s");
  {
    GstPad *pad = gst_element_get_static_pad (e, "audio");
    GstCaps *caps = gst_pad_query_caps (pad, NULL);
    fail_unless (gst_structure_get_int (gst_caps_get_structure (caps, 0),
            "rate", &p->rate));
    gst_caps_unref (caps);
    gst_object_unref (pad);
  }
  gst_object_unref (e);
  g_free (desc);
}

static void
sink_clear (Sink * k)
{
  g_ptr_array_unref (k->buffers);
  g_mutex_clear (&k->lock);
}

static void
pipe_free (Pipe * p)
{
  fail_unless_equals_int (gst_element_set_state (p->pipeline,
          GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  gst_bus_set_sync_handler (p->bus, NULL, NULL, NULL);
  gst_bus_set_flushing (p->bus, TRUE);
  gst_object_unref (p->bus);
  gst_object_unref (p->src);
  gst_object_unref (p->pipeline);
  sink_clear (&p->video);
  sink_clear (&p->audio);
}

/* Pops messages until one of the types (an error fails the test). */
static GstMessage *
pipe_wait (Pipe * p, GstMessageType types)
{
  GstMessage *m = gst_bus_timed_pop_filtered (p->bus, 120 * GST_SECOND,
      types | GST_MESSAGE_ERROR);

  fail_unless (m != NULL, "nothing within 120 s");
  if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ERROR) {
    GError *err;
    gchar *debug;
    gst_message_parse_error (m, &err, &debug);
    fail ("error: %s (%s)", err->message, debug);
  }
  return m;
}

static void
pipe_wait_eos (Pipe * p)
{
  gst_message_unref (pipe_wait (p, GST_MESSAGE_EOS));
}

/* Sends a seek to the pipeline (every sink sends it upstream), returns
 * whether it was done; *seqnum: the seek's. */
static gboolean
pipe_seek (Pipe * p, gdouble rate, GstFormat format, GstSeekFlags flags,
    gint64 start, gint64 stop, guint32 * seqnum)
{
  GstEvent *ev = gst_event_new_seek (rate, format, flags, GST_SEEK_TYPE_SET,
      start, stop < 0 ? GST_SEEK_TYPE_NONE : GST_SEEK_TYPE_SET, stop);

  if (seqnum)
    *seqnum = gst_event_get_seqnum (ev);
  return gst_element_send_event (p->pipeline, ev);
}

static gboolean
pipe_seekable (Pipe * p)
{
  GstQuery *q = gst_query_new_seeking (GST_FORMAT_TIME);
  gboolean seekable = FALSE;
  gint64 end = -1;

  fail_unless (gst_element_query (p->pipeline, q));
  gst_query_parse_seeking (q, NULL, &seekable, NULL, &end);
  fail_unless_equals_uint64 (end, frame_time (FRAMES));
  gst_query_unref (q);
  return seekable;
}

/* The reference: the bytes of every video frame (by frame number) and of
 * the whole soundtrack. */
typedef struct
{
  GPtrArray *frames;            /* GBytes */
  GByteArray *audio;
  gint64 audio_len;             /* stereo samples */
} Ref;

static void
ref_take (Pipe * p, Ref * r)
{
  r->frames = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  r->audio = g_byte_array_new ();
  g_mutex_lock (&p->video.lock);
  for (guint i = 0; i < p->video.buffers->len; i++) {
    GstBuffer *b = g_ptr_array_index (p->video.buffers, i);
    GstMapInfo map;
    fail_unless_equals_uint64 (GST_BUFFER_OFFSET (b), i);
    fail_unless (gst_buffer_map (b, &map, GST_MAP_READ));
    g_ptr_array_add (r->frames, g_bytes_new (map.data, map.size));
    gst_buffer_unmap (b, &map);
  }
  g_mutex_unlock (&p->video.lock);
  fail_unless_equals_int (r->frames->len, FRAMES);
  g_mutex_lock (&p->audio.lock);
  for (guint i = 0; i < p->audio.buffers->len; i++) {
    GstBuffer *b = g_ptr_array_index (p->audio.buffers, i);
    GstMapInfo map;
    fail_unless_equals_uint64 (GST_BUFFER_OFFSET (b), r->audio->len / 8);
    fail_unless (gst_buffer_map (b, &map, GST_MAP_READ));
    g_byte_array_append (r->audio, map.data, map.size);
    gst_buffer_unmap (b, &map);
  }
  g_mutex_unlock (&p->audio.lock);
  r->audio_len = r->audio->len / 8;
  fail_unless_equals_uint64 (r->audio_len,
      gst_util_uint64_scale_round (FRAMES, p->rate, 24));
}

static void
ref_clear (Ref * r)
{
  g_ptr_array_unref (r->frames);
  g_byte_array_unref (r->audio);
}

/* The video sink received frames from..FRAMES-1 of the reference, from
 * PTS frame_time(from), with DISCONT on the from. */
static void
check_video_from (Pipe * p, Ref * r, gint from)
{
  g_mutex_lock (&p->video.lock);
  fail_unless_equals_int (p->video.buffers->len, FRAMES - from);
  for (guint i = 0; i < p->video.buffers->len; i++) {
    GstBuffer *b = g_ptr_array_index (p->video.buffers, i);
    GBytes *want = g_ptr_array_index (r->frames, from + i);
    GstMapInfo map;
    fail_unless_equals_uint64 (GST_BUFFER_OFFSET (b), from + i);
    fail_unless_equals_uint64 (GST_BUFFER_PTS (b), frame_time (from + i));
    fail_unless_equals_uint64 (GST_BUFFER_DURATION (b),
        frame_time (from + i + 1) - frame_time (from + i));
    fail_unless_equals_int (GST_BUFFER_FLAG_IS_SET (b,
            GST_BUFFER_FLAG_DISCONT), i == 0);
    fail_unless (gst_buffer_map (b, &map, GST_MAP_READ));
    fail_unless (map.size == g_bytes_get_size (want)
        && memcmp (map.data, g_bytes_get_data (want, NULL), map.size) == 0,
        "frame %d differs from the from pass", from + i);
    gst_buffer_unmap (b, &map);
  }
  g_mutex_unlock (&p->video.lock);
}

/* The audio sink received the reference's samples from sample from to
 * the end, contiguous, with PTS from the sample counter. */
static void
check_audio_from (Pipe * p, Ref * r, gint64 from)
{
  gint64 next = from;

  g_mutex_lock (&p->audio.lock);
  fail_unless (p->audio.buffers->len > 0);
  for (guint i = 0; i < p->audio.buffers->len; i++) {
    GstBuffer *b = g_ptr_array_index (p->audio.buffers, i);
    GstMapInfo map;
    fail_unless_equals_uint64 (GST_BUFFER_OFFSET (b), next);
    fail_unless_equals_uint64 (GST_BUFFER_PTS (b),
        gst_util_uint64_scale_round (next, GST_SECOND, p->rate));
    fail_unless (gst_buffer_map (b, &map, GST_MAP_READ));
    fail_unless_equals_uint64 (map.size / 8, GST_BUFFER_OFFSET_END (b) - next);
    fail_unless (memcmp (map.data, r->audio->data + next * 8, map.size) == 0,
        "samples from %" G_GINT64_FORMAT " differ from the from pass", next);
    next = GST_BUFFER_OFFSET_END (b);
    gst_buffer_unmap (b, &map);
    if (i + 1 == p->audio.buffers->len)
      fail_unless_equals_uint64 (GST_BUFFER_PTS (b) + GST_BUFFER_DURATION (b),
          frame_time (FRAMES));
  }
  g_mutex_unlock (&p->audio.lock);
  fail_unless_equals_uint64 (next, r->audio_len);
}

static void
check_segment (Sink * k, guint32 seqnum, gdouble rate, GstClockTime start,
    GstClockTime base)
{
  g_mutex_lock (&k->lock);
  fail_unless_equals_int (k->segment_seqnum, seqnum);
  fail_unless_equals_int (k->segment.format, GST_FORMAT_TIME);
  fail_unless (k->segment.rate == rate, "rate %f", k->segment.rate);
  fail_unless_equals_uint64 (k->segment.start, start);
  fail_unless_equals_uint64 (k->segment.time, start);
  fail_unless_equals_uint64 (k->segment.base, base);
  fail_unless_equals_uint64 (k->segment.duration, frame_time (FRAMES));
  g_mutex_unlock (&k->lock);
}

/* Plays the clip to EOS and takes it as the reference. */
static void
pipe_play_reference (Pipe * p, Ref * r)
{
  fail_unless (gst_element_set_state (p->pipeline, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  pipe_wait_eos (p);
  ref_take (p, r);
  fail_unless_equals_int (g_atomic_int_get (&p->generate_starts), 1);
}

/* ---- tests ------------------------------------------------------------------ */

/* After the clip has played, flushing seeks to a frame boundary and into
 * a frame replay it from there: the video from the frame that holds the
 * position, the audio from its nearest sample, the same bytes as the first
 * pass, no model run. */
GST_START_TEST (test_flush_seek_middle)
{
  Pipe p;
  Ref r;
  guint32 seqnum;
  GstClockTime t;
  gint64 sample;

  pipe_new (&p, "");
  pipe_play_reference (&p, &r);
  fail_unless (pipe_seekable (&p));

  /* To frame 11 exactly. */
  t = frame_time (11);
  fail_unless (pipe_seek (&p, 1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH |
          GST_SEEK_FLAG_ACCURATE, t, -1, &seqnum));
  pipe_wait_eos (&p);
  check_segment (&p.video, seqnum, 1.0, t, 0);
  check_segment (&p.audio, seqnum, 1.0, t, 0);
  check_video_from (&p, &r, 11);
  sample = gst_util_uint64_scale_round (11, p.rate, 24);
  check_audio_from (&p, &r, sample);

  /* Into frame 7: the segment starts there, the video frame that holds it
   * (the sinks clip its beginning), the audio from the nearest sample. */
  t = frame_time (7) + 10 * GST_MSECOND;
  fail_unless (pipe_seek (&p, 1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH |
          GST_SEEK_FLAG_ACCURATE, t, -1, &seqnum));
  pipe_wait_eos (&p);
  check_segment (&p.video, seqnum, 1.0, t, 0);
  check_segment (&p.audio, seqnum, 1.0, t, 0);
  check_video_from (&p, &r, 7);
  sample = gst_util_uint64_scale_round (t, p.rate, GST_SECOND);
  check_audio_from (&p, &r, sample);
  {
    GstBuffer *b = g_ptr_array_index (p.audio.buffers, 0);
    GstClockTimeDiff d = GST_CLOCK_DIFF (t, GST_BUFFER_PTS (b));
    fail_unless (ABS (d) <= GST_SECOND / p.rate / 2 + 1, "audio starts %"
        G_GINT64_FORMAT " ns from the seek position", d);
  }

  /* KEY_UNIT (every frame is one) snaps to the frame before. */
  fail_unless (pipe_seek (&p, 1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH |
          GST_SEEK_FLAG_KEY_UNIT, frame_time (3) + GST_MSECOND, -1, &seqnum));
  pipe_wait_eos (&p);
  check_segment (&p.video, seqnum, 1.0, frame_time (3), 0);
  check_video_from (&p, &r, 3);
  check_audio_from (&p, &r, gst_util_uint64_scale_round (3, p.rate, 24));

  /* The model ran once. */
  fail_unless_equals_int (g_atomic_int_get (&p.generate_starts), 1);
  ref_clear (&r);
  pipe_free (&p);
}

GST_END_TEST;

/* Loop playback: a flushing segment seek, then at each SEGMENT_DONE a
 * non-flushing segment seek back to 0; each pass is the whole clip, in
 * running time after the last one. The first pass starts while the clip is
 * still being generated (the seek is done at preroll). */
GST_START_TEST (test_segment_seek_loop)
{
  Pipe p;
  Ref r[3];
  guint32 seqnum;
  GstMessage *m;
  GstFormat format;
  gint64 position;

  pipe_new (&p, "");
  fail_unless_equals_int (gst_element_set_state (p.pipeline,
          GST_STATE_PAUSED), GST_STATE_CHANGE_ASYNC);
  gst_message_unref (pipe_wait (&p, GST_MESSAGE_ASYNC_DONE));
  fail_unless (pipe_seekable (&p));
  fail_unless (pipe_seek (&p, 1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH |
          GST_SEEK_FLAG_SEGMENT, 0, -1, &seqnum));
  fail_unless (gst_element_set_state (p.pipeline, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);

  for (gint pass = 0; pass < 3; pass++) {
    m = pipe_wait (&p, GST_MESSAGE_SEGMENT_DONE | GST_MESSAGE_EOS);
    fail_unless_equals_int (GST_MESSAGE_TYPE (m), GST_MESSAGE_SEGMENT_DONE);
    fail_unless_equals_int (gst_message_get_seqnum (m), seqnum);
    gst_message_parse_segment_done (m, &format, &position);
    fail_unless_equals_int (format, GST_FORMAT_TIME);
    fail_unless_equals_uint64 (position, frame_time (FRAMES));
    gst_message_unref (m);
    /* Every pad ended its segment, nothing ended the stream. */
    fail_unless_equals_int (p.video.segment_dones, pass + 1);
    fail_unless_equals_int (p.audio.segment_dones, pass + 1);
    fail_unless_equals_int (p.video.eos + p.audio.eos, 0);
    check_segment (&p.video, seqnum, 1.0, 0, pass * frame_time (FRAMES));
    check_segment (&p.audio, seqnum, 1.0, 0, pass * frame_time (FRAMES));
    ref_take (&p, &r[pass]);
    if (pass > 0) {
      check_video_from (&p, &r[0], 0);
      check_audio_from (&p, &r[0], 0);
    }
    /* Loop: back to the start, without flushing. */
    if (pass < 2)
      fail_unless (pipe_seek (&p, 1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_SEGMENT,
              0, -1, &seqnum));
  }
  /* A plain seek ends the loop with EOS. */
  fail_unless (pipe_seek (&p, 1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH, 0,
          -1, &seqnum));
  pipe_wait_eos (&p);
  check_video_from (&p, &r[0], 0);
  check_audio_from (&p, &r[0], 0);
  fail_unless_equals_int (g_atomic_int_get (&p.generate_starts), 1);
  for (gint i = 0; i < 3; i++)
    ref_clear (&r[i]);
  pipe_free (&p);
}

GST_END_TEST;

/* A seek while the model still denoises: it is kept, and each pad pushes
 * from the new position once it is decoded; the clip is the one a replay
 * of the whole gives. */
GST_START_TEST (test_seek_during_generation)
{
  Pipe p;
  Ref r;
  guint32 seqnum;
  gint steps_seen = 0;
  GstMessage *m;

  pipe_new (&p, "steps=200");
  fail_unless_equals_int (gst_element_set_state (p.pipeline,
          GST_STATE_PAUSED), GST_STATE_CHANGE_ASYNC);
  /* The first denoising step: nothing is decoded yet. */
  while (!steps_seen) {
    m = pipe_wait (&p, GST_MESSAGE_ELEMENT);
    steps_seen = gst_message_has_name (m, "h3videosrc/step");
    gst_message_unref (m);
  }
  fail_unless (pipe_seekable (&p));
  fail_unless (pipe_seek (&p, 1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH,
          frame_time (11), -1, &seqnum));
  fail_unless_equals_int (g_atomic_int_get (&p.dones), 0);
  fail_unless (gst_element_set_state (p.pipeline, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  pipe_wait_eos (&p);
  check_segment (&p.video, seqnum, 1.0, frame_time (11), 0);
  check_segment (&p.audio, seqnum, 1.0, frame_time (11), 0);
  g_mutex_lock (&p.video.lock);
  fail_unless_equals_int (p.video.buffers->len, FRAMES - 11);
  fail_unless_equals_uint64 (GST_BUFFER_OFFSET (g_ptr_array_index
          (p.video.buffers, 0)), 11);
  g_mutex_unlock (&p.video.lock);

  /* The whole clip, replayed: what the seek pushed is its end. */
  {
    GPtrArray *video = p.video.buffers, *audio = p.audio.buffers;
    p.video.buffers = g_ptr_array_new_with_free_func ((GDestroyNotify)
        gst_buffer_unref);
    p.audio.buffers = g_ptr_array_new_with_free_func ((GDestroyNotify)
        gst_buffer_unref);
    fail_unless (pipe_seek (&p, 1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH, 0,
            -1, NULL));
    pipe_wait_eos (&p);
    ref_take (&p, &r);
    g_ptr_array_unref (p.video.buffers);
    g_ptr_array_unref (p.audio.buffers);
    p.video.buffers = video;
    p.audio.buffers = audio;
  }
  check_video_from (&p, &r, 11);
  check_audio_from (&p, &r, gst_util_uint64_scale_round (11, p.rate, 24));
  fail_unless_equals_int (g_atomic_int_get (&p.generate_starts), 1);
  ref_clear (&r);
  pipe_free (&p);
}

GST_END_TEST;

/* Without a kept clip (keep-clip=false, or a clip larger than
 * keep-clip-max-bytes) the SEEKING query says no, seeks are refused, and
 * the clip plays to its end undisturbed. */
GST_START_TEST (test_seek_refused_without_kept_clip)
{
  const gchar *props[] = { "keep-clip=false", "keep-clip-max-bytes=1000" };

  for (guint i = 0; i < G_N_ELEMENTS (props); i++) {
    Pipe p;
    Ref r;

    pipe_new (&p, props[i]);
    fail_if (pipe_seekable (&p), "%s: seekable before the run", props[i]);
    fail_unless_equals_int (gst_element_set_state (p.pipeline,
            GST_STATE_PAUSED), GST_STATE_CHANGE_ASYNC);
    gst_message_unref (pipe_wait (&p, GST_MESSAGE_ASYNC_DONE));
    fail_if (pipe_seekable (&p), "%s: seekable in the run", props[i]);
    fail_if (pipe_seek (&p, 1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH,
            frame_time (5), -1, NULL), "%s: seek done", props[i]);
    fail_unless (gst_element_set_state (p.pipeline, GST_STATE_PLAYING) !=
        GST_STATE_CHANGE_FAILURE);
    pipe_wait_eos (&p);
    ref_take (&p, &r);          /* every frame from 0, once */
    fail_unless_equals_int (p.video.segments, 1);
    fail_if (pipe_seek (&p, 1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH, 0, -1,
            NULL), "%s: seek after EOS done", props[i]);
    ref_clear (&r);
    pipe_free (&p);
  }
}

GST_END_TEST;

/* Positive rates are a segment's: the same buffers, the rate in the
 * segment for the sinks. Reverse playback and other formats are refused
 * (the element logs why). */
GST_START_TEST (test_seek_rate)
{
  Pipe p;
  Ref r;
  guint32 seqnum;

  pipe_new (&p, "");
  pipe_play_reference (&p, &r);
  fail_unless (pipe_seek (&p, 2.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH,
          frame_time (4), -1, &seqnum));
  pipe_wait_eos (&p);
  check_segment (&p.video, seqnum, 2.0, frame_time (4), 0);
  check_segment (&p.audio, seqnum, 2.0, frame_time (4), 0);
  check_video_from (&p, &r, 4);
  check_audio_from (&p, &r, gst_util_uint64_scale_round (4, p.rate, 24));

  fail_if (pipe_seek (&p, -1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH, 0,
          frame_time (FRAMES), NULL));
  fail_if (pipe_seek (&p, 1.0, GST_FORMAT_DEFAULT, GST_SEEK_FLAG_FLUSH, 3, -1,
          NULL));
  /* Refused seeks leave the last segment alone. */
  check_segment (&p.video, seqnum, 2.0, frame_time (4), 0);

  /* A stop position: up to the frame that holds it, audio to its nearest
   * sample; then EOS. */
  fail_unless (pipe_seek (&p, 1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH,
          frame_time (2), frame_time (9), &seqnum));
  pipe_wait_eos (&p);
  g_mutex_lock (&p.video.lock);
  fail_unless_equals_int (p.video.buffers->len, 7);
  fail_unless_equals_uint64 (GST_BUFFER_OFFSET (g_ptr_array_index
          (p.video.buffers, 0)), 2);
  g_mutex_unlock (&p.video.lock);
  g_mutex_lock (&p.audio.lock);
  {
    GstBuffer *last = g_ptr_array_index (p.audio.buffers,
        p.audio.buffers->len - 1);
    fail_unless_equals_uint64 (GST_BUFFER_OFFSET_END (last),
        gst_util_uint64_scale_round (9, p.rate, 24));
  }
  g_mutex_unlock (&p.audio.lock);
  fail_unless_equals_int (g_atomic_int_get (&p.generate_starts), 1);
  ref_clear (&r);
  pipe_free (&p);
}

GST_END_TEST;

/* A player scrubs: playbin on an h3: URI answers the SEEKING query through
 * h3src's pads, and a key-unit seek lands on the frame there. */
static GstPadProbeReturn
count_buffer (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  g_atomic_int_inc ((gint *) data);
  return GST_PAD_PROBE_OK;
}

GST_START_TEST (test_playbin_scrub)
{
  GstElement *play = gst_element_factory_make ("playbin", NULL);
  GstElement *vs = gst_element_factory_make ("fakesink", NULL);
  GstElement *as = gst_element_factory_make ("fakesink", NULL);
  GstBus *bus = gst_element_get_bus (play);
  GstQuery *q;
  GstMessage *m;
  GstPad *pad;
  gboolean seekable = FALSE;
  gint64 pos = -1;
  gint video = 0;

  g_object_set (play, "uri", "h3:?prompt=a%20robot%20dancing&width=64&"
      "height=32&num-frames=22&steps=2", "video-sink", vs, "audio-sink", as,
      NULL);
  /* Without soft-volume (GStreamer 1.22's playsink leaks its volume). */
  gst_util_set_object_arg (G_OBJECT (play), "flags", "video+audio");
  pad = gst_element_get_static_pad (vs, "sink");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, count_buffer, &video,
      NULL);
  gst_object_unref (pad);
  fail_unless_equals_int (gst_element_set_state (play, GST_STATE_PAUSED),
      GST_STATE_CHANGE_ASYNC);
  m = gst_bus_timed_pop_filtered (bus, 120 * GST_SECOND,
      GST_MESSAGE_ASYNC_DONE | GST_MESSAGE_ERROR);
  fail_unless (m && GST_MESSAGE_TYPE (m) == GST_MESSAGE_ASYNC_DONE);
  gst_message_unref (m);
  q = gst_query_new_seeking (GST_FORMAT_TIME);
  fail_unless (gst_element_query (play, q));
  gst_query_parse_seeking (q, NULL, &seekable, NULL, NULL);
  gst_query_unref (q);
  fail_unless (seekable);

  fail_unless (gst_element_seek_simple (play, GST_FORMAT_TIME,
          GST_SEEK_FLAG_FLUSH | GST_SEEK_FLAG_KEY_UNIT, GST_SECOND / 2));
  m = gst_bus_timed_pop_filtered (bus, 120 * GST_SECOND,
      GST_MESSAGE_ASYNC_DONE | GST_MESSAGE_ERROR);
  fail_unless (m && GST_MESSAGE_TYPE (m) == GST_MESSAGE_ASYNC_DONE);
  gst_message_unref (m);
  fail_unless (gst_element_query_position (play, GST_FORMAT_TIME, &pos));
  fail_unless_equals_int64 (pos, frame_time (12));
  g_atomic_int_set (&video, 1);   /* the prerolled frame 12 */
  fail_unless (gst_element_set_state (play, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  h3_gst_wait_eos (bus, 120 * GST_SECOND, "playing on after the seek");
  /* Frames 12..21 (the prerolled one counted once). */
  fail_unless_equals_int (g_atomic_int_get (&video), FRAMES - 12);
  fail_unless_equals_int (gst_element_set_state (play, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_object_unref (bus);
  gst_object_unref (play);
}

GST_END_TEST;

static Suite *
h3videosrc_seek_suite (void)
{
  Suite *s = suite_create ("h3videosrc-seek");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 300);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_flush_seek_middle);
  tcase_add_test (tc, test_segment_seek_loop);
  tcase_add_test (tc, test_seek_during_generation);
  tcase_add_test (tc, test_seek_refused_without_kept_clip);
  tcase_add_test (tc, test_seek_rate);
  tcase_add_test (tc, test_playbin_scrub);
  return s;
}

GST_CHECK_MAIN (h3videosrc_seek);
