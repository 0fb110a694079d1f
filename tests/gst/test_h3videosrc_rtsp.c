/* test_h3videosrc_rtsp.c - gst-check suite: one model load for an RTSP
 * server whose clients each get a pipeline of their own (issue 15, item 4).
 *
 * An in-process gst-rtsp-server (bound to a free port of 127.0.0.1) serves
 * a media factory that is not shared, so every client gets its own
 * pipeline and its own h3videosrc:
 *
 *   ( h3videosrc name=src model-location=<tiny-h3> ... engine-cache=...
 *       src.video ! videoconvert ! I420 ! x264enc ! rtph264pay name=pay0
 *       src.audio ! audioconvert ! S16BE ! rtpL16pay name=pay1 )
 *
 * and clients (rtspsrc over TCP, depayloaded, the video decoded) in the
 * same process count what they receive up to their EOS: every frame and
 * every audio sample of the clip.
 *
 * A load is observed twice over, per process (each test is a child of its
 * own under CK_FORK):
 *   - the `load` progress START an h3videosrc posts when it opens the engine
 *     itself (docs/ELEMENT.md, Messages), seen with a sync handler on each
 *     media's pipeline bus;
 *   - the engine's own "opened <model> ..." INFO line, which h3core logs once
 *     per h3_engine_open and the element forwards to its debug category
 *     ("h3core: opened ..."), seen with a debug log function.
 *
 * The engine lives as long as an element holds it (docs/ELEMENT.md, One
 * model for the process): clients that overlap share one load, and so do
 * clients that come one after the other while another h3videosrc of the
 * process (a pipeline of the application) keeps the engine; without any
 * element left in between, the next client loads again.
 *
 * The model is the official tiny test model (tests/data/models/tiny-h3, on
 * the CPU): a clip takes a fraction of a second. */
#include <gst/check/gstcheck.h>
#include <gst/rtsp-server/rtsp-server.h>
#include <string.h>

#include "h3_gst_test.h"

#define PROMPT "a robot dancing"
#define FRAMES 22               /* already 17n+5: no alignment */
#define EOS_TIMEOUT (60 * GST_SECOND)

/* ---- what the process loaded ----------------------------------------------- */

static gint load_starts;        /* `load` progress START (atomic) */
static gint engine_opens;       /* h3core's "opened" log lines (atomic) */
static gint wait_starts;        /* `wait` progress START, for the log */
static GQuark media_quark;      /* a Media on its h3videosrc */

static void
count_opens (GstDebugCategory * category, GstDebugLevel level,
    const gchar * file, const gchar * function, gint line, GObject * object,
    GstDebugMessage * message, gpointer data)
{
  const gchar *text;

  if (level != GST_LEVEL_INFO
      || strcmp (gst_debug_category_get_name (category), "h3videosrc") != 0)
    return;
  text = gst_debug_message_get (message);
  if (text && g_str_has_prefix (text, "h3core: opened "))
    g_atomic_int_inc (&engine_opens);
}

static gchar *
model_dir (void)
{
  const gchar *data = g_getenv ("H3_TEST_DATA");

  fail_unless (data != NULL, "H3_TEST_DATA is not set (run through meson)");
  return g_build_filename (data, "models", "tiny-h3", NULL);
}

/* ---- the server -------------------------------------------------------------- */

/* One media (one client's pipeline) as the server side saw it. */
typedef struct
{
  gint frames;                  /* video buffers out of h3videosrc (atomic) */
  gint audio_bytes;             /* audio bytes out of h3videosrc (atomic) */
  gint done_ok;                 /* h3videosrc/done with result ok */
  gint done_frames;             /*   and its frames */
  gint finalized;               /* the media's h3videosrc is gone (atomic) */
} Media;

typedef struct
{
  GMainContext *ctx;
  GMainLoop *loop;
  GThread *thread;
  GstRTSPServer *server;
  guint source;
  guint port;
  GMutex lock;
  GPtrArray *medias;            /* of Media, in the order they were made */
} Server;

static GstBusSyncReply
media_bus (GstBus * bus, GstMessage * m, gpointer data)
{
  Media *md = data;

  if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_PROGRESS) {
    GstProgressType pt;
    gchar *code, *text;

    gst_message_parse_progress (m, &pt, &code, &text);
    GST_INFO ("%s: progress %s: %s", GST_MESSAGE_SRC_NAME (m), code, text);
    if (pt == GST_PROGRESS_TYPE_START && g_strcmp0 (code, "load") == 0)
      g_atomic_int_inc (&load_starts);
    if (pt == GST_PROGRESS_TYPE_START && g_strcmp0 (code, "wait") == 0)
      g_atomic_int_inc (&wait_starts);
    g_free (code);
    g_free (text);
  } else if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ELEMENT
      && gst_message_has_name (m, "h3videosrc/done")) {
    const GstStructure *st = gst_message_get_structure (m);

    if (g_strcmp0 (gst_structure_get_string (st, "result"), "ok") == 0)
      g_atomic_int_inc (&md->done_ok);
    gst_structure_get_int (st, "frames", &md->done_frames);
  }
  return GST_BUS_PASS;
}

static GstPadProbeReturn
count_video (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  g_atomic_int_inc (&((Media *) data)->frames);
  return GST_PAD_PROBE_OK;
}

static GstPadProbeReturn
count_audio (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  g_atomic_int_add (&((Media *) data)->audio_bytes,
      (gint) gst_buffer_get_size (GST_PAD_PROBE_INFO_BUFFER (info)));
  return GST_PAD_PROBE_OK;
}

static void
mark_finalized (gpointer data)
{
  g_atomic_int_set (&((Media *) data)->finalized, TRUE);
}

/* Counts what src pushes and posts on bus, and marks md finalized with it. */
static void
watch_src (GstElement * src, GstBus * bus, Media * md)
{
  GstPad *pad;

  gst_bus_set_sync_handler (bus, media_bus, md, NULL);
  pad = gst_element_get_static_pad (src, "video");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, count_video, md, NULL);
  gst_object_unref (pad);
  pad = gst_element_get_static_pad (src, "audio");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, count_audio, md, NULL);
  gst_object_unref (pad);
  /* Destroyed at the very end of the element's finalize (test_h3videosrc.c,
   * unref_and_wait, says why not a weak reference). */
  g_object_set_qdata_full (G_OBJECT (src), media_quark, md, mark_finalized);
}

static void
wait_finalized (Media * md, const gchar * what)
{
  for (gint n = 0; n < 1000 && !g_atomic_int_get (&md->finalized); n++)
    g_usleep (10000);
  fail_unless (g_atomic_int_get (&md->finalized), "the h3videosrc of %s is "
      "still alive 10 s after it was left", what);
}

/* Every client's pipeline: watch its bus and its h3videosrc. */
static void
media_configure (GstRTSPMediaFactory * factory, GstRTSPMedia * media,
    gpointer data)
{
  Server *srv = data;
  Media *md = g_new0 (Media, 1);
  GstElement *bin = gst_rtsp_media_get_element (media);
  GstElement *src = gst_bin_get_by_name (GST_BIN (bin), "src");
  GstObject *pipeline = gst_object_get_parent (GST_OBJECT (bin));
  GstBus *bus;

  fail_unless (src != NULL && pipeline != NULL);
  bus = gst_pipeline_get_bus (GST_PIPELINE (pipeline));
  watch_src (src, bus, md);

  g_mutex_lock (&srv->lock);
  g_ptr_array_add (srv->medias, md);
  g_mutex_unlock (&srv->lock);
  GST_INFO ("media %p: pipeline %s", media, GST_OBJECT_NAME (pipeline));
  gst_object_unref (bus);
  gst_object_unref (pipeline);
  gst_object_unref (src);
  gst_object_unref (bin);
}

static gpointer
server_thread (gpointer data)
{
  Server *srv = data;

  g_main_context_push_thread_default (srv->ctx);
  g_main_loop_run (srv->loop);
  g_main_context_pop_thread_default (srv->ctx);
  return NULL;
}

/* threads: the server's client threads (its default is 1: one client's
 * requests wait while another's media prerolls). */
static void
server_start (Server * srv, gboolean engine_cache, gint threads)
{
  GstRTSPMountPoints *mounts;
  GstRTSPMediaFactory *factory;
  gchar *dir = model_dir ();
  gchar *launch;

  memset (srv, 0, sizeof *srv);
  g_mutex_init (&srv->lock);
  srv->medias = g_ptr_array_new_with_free_func (g_free);
  srv->ctx = g_main_context_new ();
  srv->loop = g_main_loop_new (srv->ctx, FALSE);
  srv->server = gst_rtsp_server_new ();
  gst_rtsp_server_set_address (srv->server, "127.0.0.1");
  gst_rtsp_server_set_service (srv->server, "0");       /* a free port */
  if (threads > 1) {
    GstRTSPThreadPool *pool = gst_rtsp_server_get_thread_pool (srv->server);

    gst_rtsp_thread_pool_set_max_threads (pool, threads);
    g_object_unref (pool);
  }

  launch = g_strdup_printf ("( h3videosrc name=src model-location=\"%s\" "
      "prompt=\"" PROMPT "\" seed=42 width=64 height=32 num-frames=%d "
      "steps=2 engine-cache=%s "
      "src.video ! videoconvert ! video/x-raw,format=I420 ! "
      "x264enc tune=zerolatency speed-preset=ultrafast key-int-max=8 ! "
      "rtph264pay name=pay0 pt=96 config-interval=-1 "
      "src.audio ! audioconvert ! audio/x-raw,format=S16BE ! "
      "rtpL16pay name=pay1 pt=97 )", dir, FRAMES,
      engine_cache ? "true" : "false");
  factory = gst_rtsp_media_factory_new ();
  gst_rtsp_media_factory_set_launch (factory, launch);
  /* Not shared: every client its own pipeline, its own h3videosrc. */
  gst_rtsp_media_factory_set_shared (factory, FALSE);
  g_signal_connect (factory, "media-configure", G_CALLBACK (media_configure),
      srv);
  mounts = gst_rtsp_server_get_mount_points (srv->server);
  gst_rtsp_mount_points_add_factory (mounts, "/h3", factory);
  g_object_unref (mounts);

  srv->source = gst_rtsp_server_attach (srv->server, srv->ctx);
  fail_unless (srv->source != 0, "the RTSP server could not listen");
  srv->port = (guint) gst_rtsp_server_get_bound_port (srv->server);
  fail_unless (srv->port > 0);
  GST_INFO ("RTSP server on 127.0.0.1:%u: %s", srv->port, launch);
  srv->thread = g_thread_new ("rtsp-server", server_thread, srv);
  g_free (launch);
  g_free (dir);
}

static Media *
server_media (Server * srv, guint i)
{
  Media *md;

  g_mutex_lock (&srv->lock);
  fail_unless (i < srv->medias->len, "%u medias, not %u", srv->medias->len,
      i + 1);
  md = g_ptr_array_index (srv->medias, i);
  g_mutex_unlock (&srv->lock);
  return md;
}

/* Waits until the h3videosrc of every media made so far is finalized (the
 * server frees a media once its client has torn it down). */
static void
server_wait_medias_gone (Server * srv)
{
  g_mutex_lock (&srv->lock);
  for (guint i = 0; i < srv->medias->len; i++) {
    Media *md = g_ptr_array_index (srv->medias, i);

    g_mutex_unlock (&srv->lock);
    wait_finalized (md, "a media");
    g_mutex_lock (&srv->lock);
  }
  g_mutex_unlock (&srv->lock);
}

static void
server_stop (Server * srv)
{
  GstRTSPSessionPool *pool;
  GSource *source;

  server_wait_medias_gone (srv);
  pool = gst_rtsp_server_get_session_pool (srv->server);
  gst_rtsp_session_pool_cleanup (pool);
  g_object_unref (pool);
  source = g_main_context_find_source_by_id (srv->ctx, srv->source);
  if (source)
    g_source_destroy (source);
  g_main_loop_quit (srv->loop);
  g_thread_join (srv->thread);
  g_object_unref (srv->server);
  g_main_loop_unref (srv->loop);
  g_main_context_unref (srv->ctx);
  gst_rtsp_thread_pool_cleanup ();
  /* Last: the media pipelines' bus handlers point at them. */
  g_ptr_array_unref (srv->medias);
  g_mutex_clear (&srv->lock);
}

/* ---- the clients --------------------------------------------------------------- */

typedef struct
{
  GstElement *pipeline;
  GstBus *bus;
  gint frames;                  /* decoded frames (atomic) */
  gint audio_bytes;             /* depayloaded audio bytes (atomic) */
  gint width, height;
} Client;

static void
client_video (GstElement * sink, GstBuffer * buf, GstPad * pad, gpointer data)
{
  Client *c = data;

  if (g_atomic_int_add (&c->frames, 1) == 0) {
    GstCaps *caps = gst_pad_get_current_caps (pad);
    GstStructure *st = gst_caps_get_structure (caps, 0);

    gst_structure_get_int (st, "width", &c->width);
    gst_structure_get_int (st, "height", &c->height);
    gst_caps_unref (caps);
  }
}

static void
client_audio (GstElement * sink, GstBuffer * buf, GstPad * pad, gpointer data)
{
  g_atomic_int_add (&((Client *) data)->audio_bytes,
      (gint) gst_buffer_get_size (buf));
}

/* rtspsrc's pads to their depayloaders. Not gst_parse_launch's delayed
 * links ("r. ! rtph264depay ..."): rtspsrc adds its two pads from two
 * streaming threads at once, and GStreamer 1.22's delayed linking then
 * warns now and then (gst_parse_found_pad disconnects a handler twice,
 * "instance ... has no handler with id ..."). */
static void
client_pad_added (GstElement * r, GstPad * pad, gpointer data)
{
  GstCaps *caps = gst_pad_get_current_caps (pad);
  const gchar *media;
  GstElement *depay;
  GstPad *sink;

  if (!caps)
    caps = gst_pad_query_caps (pad, NULL);
  media = gst_structure_get_string (gst_caps_get_structure (caps, 0),
      "media");
  depay = gst_bin_get_by_name (GST_BIN (data),
      g_strcmp0 (media, "video") == 0 ? "vd" : "ad");
  sink = gst_element_get_static_pad (depay, "sink");
  fail_unless_equals_int (gst_pad_link (pad, sink), GST_PAD_LINK_OK);
  gst_object_unref (sink);
  gst_object_unref (depay);
  gst_caps_unref (caps);
}

static void
client_start (Client * c, Server * srv)
{
  gchar *desc = g_strdup_printf ("rtspsrc name=r location=rtsp://127.0.0.1:"
      "%u/h3 protocols=tcp latency=0 "
      "rtph264depay name=vd ! avdec_h264 ! fakesink name=vs sync=false "
      "signal-handoffs=true "
      "rtpL16depay name=ad ! fakesink name=as sync=false signal-handoffs=true",
      srv->port);
  GError *err = NULL;
  GstElement *vs, *as, *r;

  memset (c, 0, sizeof *c);
  c->pipeline = gst_parse_launch (desc, &err);
  fail_unless (c->pipeline != NULL, "%s", err ? err->message : "");
  c->bus = gst_element_get_bus (c->pipeline);
  vs = gst_bin_get_by_name (GST_BIN (c->pipeline), "vs");
  as = gst_bin_get_by_name (GST_BIN (c->pipeline), "as");
  g_signal_connect (vs, "handoff", G_CALLBACK (client_video), c);
  g_signal_connect (as, "handoff", G_CALLBACK (client_audio), c);
  r = gst_bin_get_by_name (GST_BIN (c->pipeline), "r");
  g_signal_connect (r, "pad-added", G_CALLBACK (client_pad_added),
      c->pipeline);
  gst_object_unref (r);
  gst_object_unref (vs);
  gst_object_unref (as);
  fail_if (gst_element_set_state (c->pipeline, GST_STATE_PLAYING) ==
      GST_STATE_CHANGE_FAILURE);
  g_free (desc);
}

/* Up to EOS: every frame, decoded at the clip's size. */
static void
client_wait_eos (Client * c)
{
  GstMessage *m = gst_bus_timed_pop_filtered (c->bus, EOS_TIMEOUT,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);

  fail_unless (m != NULL, "no EOS within 60 s (%d frames so far)",
      g_atomic_int_get (&c->frames));
  if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ERROR) {
    GError *err;
    gchar *dbg;

    gst_message_parse_error (m, &err, &dbg);
    fail ("client error from %s: %s (%s)", GST_MESSAGE_SRC_NAME (m),
        err->message, dbg);
  }
  gst_message_unref (m);
  fail_unless_equals_int (g_atomic_int_get (&c->frames), FRAMES);
  fail_unless_equals_int (c->width, 64);
  fail_unless_equals_int (c->height, 32);
}

/* Tears the session down (rtspsrc sends TEARDOWN on the way to NULL). */
static void
client_stop (Client * c)
{
  fail_unless_equals_int (gst_element_set_state (c->pipeline,
          GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  gst_object_unref (c->bus);
  gst_object_unref (c->pipeline);
}

/* The media i got the whole clip from its h3videosrc (its done message
 * says so), and its client got all of it: every frame and every sample. */
static void
check_media (Server * srv, guint i, Client * c)
{
  Media *md = server_media (srv, i);

  fail_unless_equals_int (g_atomic_int_get (&md->done_ok), 1);
  fail_unless_equals_int (md->done_frames, FRAMES);
  fail_unless_equals_int (g_atomic_int_get (&md->frames), FRAMES);
  fail_unless (g_atomic_int_get (&md->audio_bytes) > 0);
  /* F32 stereo out of the element, S16 stereo in the RTP packets. */
  fail_unless_equals_int (g_atomic_int_get (&c->audio_bytes),
      g_atomic_int_get (&md->audio_bytes) / 2);
}

static void
setup (void)
{
  GstElement *e = gst_element_factory_make ("h3videosrc", NULL);
  GSList *cats, *l;

  g_atomic_int_set (&load_starts, 0);
  g_atomic_int_set (&engine_opens, 0);
  g_atomic_int_set (&wait_starts, 0);
  media_quark = g_quark_from_static_string ("test-h3videosrc-rtsp-media");
  /* The element's category exists once its plugin is loaded; the engine's
   * "opened" line is at INFO. */
  fail_unless (e != NULL, "no h3videosrc");
  gst_object_unref (e);
  gst_debug_set_active (TRUE);
  cats = gst_debug_get_all_categories ();
  for (l = cats; l; l = l->next)
    if (strcmp (gst_debug_category_get_name (l->data), "h3videosrc") == 0
        && gst_debug_category_get_threshold (l->data) < GST_LEVEL_INFO)
      gst_debug_category_set_threshold (l->data, GST_LEVEL_INFO);
  g_slist_free (cats);
  gst_debug_add_log_function (count_opens, NULL, NULL);
}

static void
teardown (void)
{
  gst_debug_remove_log_function (count_opens);
}

static void
check_loads (gint expected)
{
  GST_INFO ("%d load progress START, %d engine opens, %d waits", load_starts,
      engine_opens, wait_starts);
  fail_unless_equals_int (g_atomic_int_get (&load_starts), expected);
  fail_unless_equals_int (g_atomic_int_get (&engine_opens), expected);
}

/* ---- tests ---------------------------------------------------------------------- */

/* Two clients at once, their requests handled in parallel (two client
 * threads): two pipelines, two h3videosrc prerolling together, one load
 * (the second finds the engine loaded, or waits for its load or its
 * turn). */
GST_START_TEST (test_rtsp_two_clients_one_load)
{
  Server srv;
  Client a, b;

  server_start (&srv, TRUE, 2);
  client_start (&a, &srv);
  client_start (&b, &srv);
  client_wait_eos (&a);
  client_wait_eos (&b);
  fail_unless_equals_int (srv.medias->len, 2);
  /* Which client's media was made first is the server's business: the
   * sums are per media, the clip the same for both. */
  check_media (&srv, 0, &a);
  check_media (&srv, 1, &b);
  check_loads (1);
  client_stop (&a);
  client_stop (&b);
  server_stop (&srv);
}

GST_END_TEST;

/* The same with engine-cache=false: each h3videosrc loads its own. */
GST_START_TEST (test_rtsp_two_clients_no_cache)
{
  Server srv;
  Client a, b;

  server_start (&srv, FALSE, 2);
  client_start (&a, &srv);
  client_start (&b, &srv);
  client_wait_eos (&a);
  client_wait_eos (&b);
  fail_unless_equals_int (srv.medias->len, 2);
  check_media (&srv, 0, &a);
  check_media (&srv, 1, &b);
  check_loads (2);
  client_stop (&a);
  client_stop (&b);
  server_stop (&srv);
}

GST_END_TEST;

/* One client after the other: while the first is still connected (its
 * h3videosrc holds the engine) the second shares the load; once both have
 * left the engine is closed with the last element, and a third client
 * loads again. */
GST_START_TEST (test_rtsp_clients_one_after_the_other)
{
  Server srv;
  Client a, b, c;

  server_start (&srv, TRUE, 1);
  client_start (&a, &srv);
  client_wait_eos (&a);
  client_start (&b, &srv);
  client_wait_eos (&b);
  check_media (&srv, 0, &a);
  check_media (&srv, 1, &b);
  check_loads (1);
  client_stop (&a);
  client_stop (&b);
  server_wait_medias_gone (&srv);

  client_start (&c, &srv);
  client_wait_eos (&c);
  check_media (&srv, 2, &c);
  check_loads (2);
  client_stop (&c);
  server_stop (&srv);
}

GST_END_TEST;

/* An application's own pipeline and the server's: the application's
 * h3videosrc loads the model and keeps it, the clients (one at a time,
 * each leaving before the next comes) share it: one load in all. */
GST_START_TEST (test_rtsp_pipeline_and_clients_one_load)
{
  gchar *dir = model_dir ();
  gchar *desc = g_strdup_printf ("h3videosrc name=src model-location=\"%s\" "
      "prompt=\"" PROMPT "\" seed=7 width=64 height=32 num-frames=%d "
      "steps=2 ! fakesink", dir, FRAMES);
  GError *err = NULL;
  GstElement *local = gst_parse_launch (desc, &err), *src;
  Media local_md = { 0 };
  GstBus *bus;
  Server srv;
  Client a, b;

  fail_unless (local != NULL, "%s", err ? err->message : "");
  bus = gst_element_get_bus (local);
  /* The application's pipeline counts like the media ones. */
  src = gst_bin_get_by_name (GST_BIN (local), "src");
  watch_src (src, bus, &local_md);
  gst_object_unref (src);
  fail_if (gst_element_set_state (local, GST_STATE_PLAYING) ==
      GST_STATE_CHANGE_FAILURE);
  h3_gst_wait_eos (bus, EOS_TIMEOUT, "the local pipeline");
  fail_unless_equals_int (local_md.done_ok, 1);
  fail_unless_equals_int (g_atomic_int_get (&local_md.frames), FRAMES);
  /* Back to NULL: the element keeps its engine. */
  fail_unless_equals_int (gst_element_set_state (local, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  check_loads (1);

  server_start (&srv, TRUE, 1);
  client_start (&a, &srv);
  client_wait_eos (&a);
  client_stop (&a);
  server_wait_medias_gone (&srv);
  client_start (&b, &srv);
  client_wait_eos (&b);
  client_stop (&b);
  check_media (&srv, 0, &a);
  check_media (&srv, 1, &b);
  check_loads (1);
  server_stop (&srv);

  gst_bus_set_sync_handler (bus, NULL, NULL, NULL);
  gst_object_unref (bus);
  gst_object_unref (local);
  wait_finalized (&local_md, "the application's pipeline");
  g_free (desc);
  g_free (dir);
}

GST_END_TEST;

static Suite *
h3videosrc_rtsp_suite (void)
{
  Suite *s = suite_create ("h3videosrc-rtsp");
  TCase *tc = tcase_create ("rtsp");

  tcase_add_checked_fixture (tc, setup, teardown);
  tcase_set_timeout (tc, 120);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_rtsp_two_clients_one_load);
  tcase_add_test (tc, test_rtsp_two_clients_no_cache);
  tcase_add_test (tc, test_rtsp_clients_one_after_the_other);
  tcase_add_test (tc, test_rtsp_pipeline_and_clients_one_load);
  return s;
}

GST_CHECK_MAIN (h3videosrc_rtsp);
