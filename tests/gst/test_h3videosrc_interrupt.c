/* test_h3videosrc_interrupt.c - Ctrl-C into a file leaves a file that
 * plays.
 *
 * Runs the README's pipelines (examples/mp4.sh's MP4: x264enc + avenc_aac
 * into mp4mux; the README's Matroska: raw RGB and F32 into matroskamux;
 * WebM: vp8enc + opusenc into webmmux) with gst-launch-1.0 -e on the
 * embedded tiny model, and sends SIGINT at a random point of each run
 * (seeded: the same points every time), from before the model load to
 * after the end. Each file must open in ffprobe with both streams holding
 * packets: the video exactly the frames the element's WARNING says it cut
 * the clip at (or all of them when no WARNING came), the audio ending with
 * the video. Before the element ended an interrupted clip where both pads
 * have data, 11 of 14 interrupted MP4s did not open (tracks without a
 * sample description). 20 runs per container (about 1 s of CPU each),
 * each under a timeout (a hang fails the test). gst-launch-1.0 and ffprobe
 * (ffmpeg) come from PATH. */
#include <gst/check/gstcheck.h>
#include <glib/gstdio.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

/* 20 runs per container; 6 in the sanitizer build, where the element runs
 * a few times slower (that build checks memory, the plain one the files). */
#if defined(__SANITIZE_ADDRESS__)
#define RUNS 6
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RUNS 6
#endif
#endif
#ifndef RUNS
#define RUNS 20
#endif
#define CHILD_TIMEOUT_S 60
/* Latest SIGINT, from the pipeline's start: past the end of the longer
 * runs here (about 1 s on two idle cores), so that some land after EOS. */
#define MAX_DELAY_MS 1500

typedef struct
{
  const gchar *name, *ext;
  /* The branches after h3videosrc name=s; %s: the output file. */
  const gchar *tail;
  /* Raw audio: one packet per slice, and one slice per video frame. */
  gboolean audio_per_frame;
} Container;

static const Container containers[] = {
  {"MP4", "mp4",
        "s.video ! queue max-size-buffers=0 max-size-bytes=0 "
        "max-size-time=3000000000 ! videoconvert ! video/x-raw,format=I420 ! "
        "x264enc ! h264parse ! queue ! mux.video_0 "
        "s.audio ! queue max-size-buffers=0 max-size-bytes=0 "
        "max-size-time=3000000000 ! audioconvert ! audioresample ! "
        "audio/x-raw,rate=48000 ! avenc_aac ! aacparse ! queue ! mux.audio_0 "
      "mp4mux name=mux ! filesink location=%s", FALSE},
  {"Matroska", "mkv",
      "s.video ! queue ! matroskamux name=m ! filesink location=%s "
      "s.audio ! queue ! m.", TRUE},
  {"WebM", "webm",
        "s.video ! queue ! videoconvert ! vp8enc deadline=1 ! queue ! m. "
        "s.audio ! queue ! audioconvert ! audioresample ! opusenc ! queue ! m. "
      "webmmux name=m ! filesink location=%s", FALSE},
};

/* Whether gst-launch-1.0 has started the pipeline (its SIGINT handler is
 * in place then): its first line is in the log. */
static gboolean
launched (const gchar * log_file)
{
  gchar *log = NULL;
  gboolean yes = g_file_get_contents (log_file, &log, NULL, NULL) &&
      strstr (log, "Setting pipeline to PAUSED") != NULL;

  g_free (log);
  return yes;
}

/* Runs cmd (sh -c, which execs gst-launch-1.0: the pid is its) and sends
 * it SIGINT delay_ms after it started the pipeline, unless it ended
 * before. FALSE: it hung. */
static gboolean
run_interrupted (gchar ** envp, const gchar * cmd, const gchar * log_file,
    gint delay_ms, gint * status)
{
  gchar *argv[] = { (gchar *) "/bin/sh", (gchar *) "-c", (gchar *) cmd,
    NULL
  };
  GError *err = NULL;
  GPid pid;
  gint64 t0 = 0;
  gint64 deadline = g_get_monotonic_time () + CHILD_TIMEOUT_S *
      G_USEC_PER_SEC;
  gboolean sent = FALSE, done = FALSE;

  fail_unless (g_spawn_async (NULL, argv, envp, G_SPAWN_DO_NOT_REAP_CHILD,
          NULL, NULL, &pid, &err), "%s", err ? err->message : "");
  while (g_get_monotonic_time () < deadline) {
    if (waitpid (pid, status, WNOHANG) == pid) {
      done = TRUE;
      break;
    }
    if (!t0 && launched (log_file))
      t0 = g_get_monotonic_time ();
    if (t0 && !sent && g_get_monotonic_time () - t0 >= delay_ms * 1000) {
      kill (pid, SIGINT);
      sent = TRUE;
    }
    g_usleep (2000);
  }
  if (!done) {
    kill (pid, SIGKILL);
    waitpid (pid, status, 0);
  }
  g_spawn_close_pid (pid);
  return done;
}

/* The frame count of the element's WARNING ("cut after N of its M"),
 * 0 for "before the first frame", -1 when there is none. */
static gint
warned_frames (const gchar * log)
{
  const gchar *w = strstr (log, "Stopped by end-of-stream");

  if (!w)
    return -1;
  if (g_str_has_prefix (w, "Stopped by end-of-stream before the first"))
    return 0;
  w = strstr (w, "cut after ");
  fail_unless (w != NULL, "a WARNING without its frame count: %s", log);
  return atoi (w + strlen ("cut after "));
}

/* ffprobe's packet counts of the file's video and audio streams; FALSE
 * when it cannot open it. */
static gboolean
probe (const gchar * file, gint * video, gint * audio, gchar ** out)
{
  gchar *argv[] = { (gchar *) "ffprobe", (gchar *) "-v", (gchar *) "error",
    (gchar *) "-count_packets", (gchar *) "-show_entries",
    (gchar *) "stream=codec_type,nb_read_packets", (gchar *) "-of",
    (gchar *) "csv=p=0", (gchar *) file, NULL
  };
  gchar *err_text = NULL, **lines;
  gint status = 0;
  GError *err = NULL;

  fail_unless (g_spawn_sync (NULL, argv, NULL, G_SPAWN_SEARCH_PATH, NULL,
          NULL, out, &err_text, &status, &err), "ffprobe: %s (install "
      "ffmpeg)", err ? err->message : "");
  *video = *audio = -1;
  lines = g_strsplit (*out, "\n", -1);
  for (gchar ** l = lines; *l; l++) {
    if (g_str_has_prefix (*l, "video,"))
      *video = atoi (*l + 6);
    else if (g_str_has_prefix (*l, "audio,"))
      *audio = atoi (*l + 6);
  }
  g_strfreev (lines);
  if (err_text && *err_text) {
    gchar *both = g_strconcat (*out, err_text, NULL);
    g_free (*out);
    *out = both;
  }
  g_free (err_text);
  return g_spawn_check_wait_status (status, NULL);
}

static void
interrupt_runs (const Container * c, gint runs, guint32 seed)
{
  gchar **envp = g_get_environ ();
  gchar *dir = g_dir_make_tmp ("h3-interrupt-XXXXXX", NULL);
  GRand *rand = g_rand_new_with_seed (seed);
  gint cut = 0, whole = 0, unplayable = 0, empty = 0;
  gint64 t0 = g_get_monotonic_time ();

  fail_unless (dir != NULL);
  /* The child is an application, not a test: no leaks tracer. */
  envp = g_environ_unsetenv (envp, "GST_TRACERS");
  envp = g_environ_unsetenv (envp, "GST_DEBUG");
  for (gint i = 0; i < runs; i++) {
    gint frames = g_rand_int_range (rand, 22, 125);
    gint steps = g_rand_int_range (rand, 2, 9);
    gint delay_ms = g_rand_int_range (rand, 0, MAX_DELAY_MS);
    gchar *file = g_strdup_printf ("%s/%d.%s", dir, i, c->ext);
    gchar *log_file = g_strdup_printf ("%s/%d.log", dir, i);
    gchar *tail = g_strdup_printf (c->tail, file);
    gchar *cmd = g_strdup_printf ("exec gst-launch-1.0 -e h3videosrc name=s "
        "prompt=\"a robot dancing\" width=64 height=32 num-frames=%d "
        "steps=%d %s >%s 2>&1", frames, steps, tail, log_file);
    gchar *log = NULL, *probe_out = NULL;
    gint status = 0, video, audio, made;

    fail_unless (run_interrupted (envp, cmd, log_file, delay_ms, &status),
        "%s run %d (SIGINT at %d ms) did not end within %d s: %s", c->name, i,
        delay_ms, CHILD_TIMEOUT_S, cmd);
    fail_unless (g_file_get_contents (log_file, &log, NULL, NULL));
    /* 0; or SIGINT itself once gst-launch-1.0 has left its loop (its
     * handler is gone then: the file is complete). */
    fail_unless ((WIFEXITED (status) && WEXITSTATUS (status) == 0) ||
        (WIFSIGNALED (status) && WTERMSIG (status) == SIGINT
            && strstr (log, "Setting pipeline to NULL") != NULL),
        "%s run %d (SIGINT at %d ms): status 0x%x\n%s", c->name, i, delay_ms,
        status, log);
    fail_if (strstr (log, "ERROR: ") != NULL, "%s run %d: an error\n%s",
        c->name, i, log);
    made = warned_frames (log);
    if (!probe (file, &video, &audio, &probe_out)) {
      /* The documented case: EOS before the first frame, far from it. */
      fail_unless (made == 0, "%s run %d (SIGINT at %d ms, %d frames, %d "
          "steps): ffprobe cannot open the file:\n%s\n%s", c->name, i,
          delay_ms, frames, steps, probe_out, log);
      unplayable++;
    } else if (made == 0) {
      empty++;
    } else {
      fail_unless (video > 0 && audio > 0, "%s run %d (SIGINT at %d ms): "
          "%d video and %d audio packets\n%s", c->name, i, delay_ms, video,
          audio, log);
      /* All the frames the element says it pushed, and no more. */
      if (made > 0)
        fail_unless_equals_int (video, made);
      /* The audio ends with the last frame. */
      if (c->audio_per_frame)
        fail_unless_equals_int (audio, video);
      if (made > 0)
        cut++;
      else
        whole++;
    }
    GST_INFO ("%s run %d: %d frames, %d steps, SIGINT at %d ms: %d video "
        "and %d audio packets (%s)", c->name, i, frames, steps, delay_ms,
        video, audio, made > 0 ? "cut" : made == 0 ? "no media" : "whole");
    g_unlink (file);
    g_unlink (log_file);
    g_free (probe_out);
    g_free (log);
    g_free (cmd);
    g_free (tail);
    g_free (log_file);
    g_free (file);
  }
  g_print ("%s: %d interrupted runs in %.1f s: %d cut, %d whole, %d without "
      "media (%d of them unplayable)\n", c->name, runs,
      (g_get_monotonic_time () - t0) / 1e6, cut, whole, empty + unplayable,
      unplayable);
  /* At the tiny model's sizes the first frames are always near: every
   * interrupted file has media. */
  fail_unless_equals_int (empty + unplayable, 0);
  /* The points spread over the run: some cut, some after the end. */
  fail_unless (cut > 0, "no run was cut: the points miss the generation");
  g_rmdir (dir);
  g_free (dir);
  g_rand_free (rand);
  g_strfreev (envp);
}

GST_START_TEST (test_interrupt_mp4)
{
  interrupt_runs (&containers[0], RUNS, 31);
}

GST_END_TEST;

GST_START_TEST (test_interrupt_matroska)
{
  interrupt_runs (&containers[1], RUNS, 32);
}

GST_END_TEST;

GST_START_TEST (test_interrupt_webm)
{
  interrupt_runs (&containers[2], RUNS, 33);
}

GST_END_TEST;

static Suite *
h3videosrc_interrupt_suite (void)
{
  Suite *s = suite_create ("h3videosrc-interrupt");
  TCase *tc = tcase_create ("interrupt");

  tcase_set_timeout (tc, 600);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_interrupt_mp4);
  tcase_add_test (tc, test_interrupt_matroska);
  tcase_add_test (tc, test_interrupt_webm);
  return s;
}

GST_CHECK_MAIN (h3videosrc_interrupt);
