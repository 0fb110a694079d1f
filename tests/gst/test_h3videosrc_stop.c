/* test_h3videosrc_stop.c - an application that stops a clip and exits
 * always exits.
 *
 * Each cycle runs tests/gst/h3-stop-child in a process of its own: a
 * pipeline PLAYING, stopped (NULL) at a random point of the generation
 * (model load, prompt, a denoising step, the audio or the video decode),
 * dropped, and main returns. Before the element joined its generation on
 * dispose, the process could exit while the generation thread was inside
 * an OpenBLAS call, and OpenBLAS's exit handler then waited for it forever
 * (about one run in five). 100 cycles, each under a timeout: no hang, no
 * failure. The child's path comes from meson (H3_STOP_CHILD). */
#include <gst/check/gstcheck.h>
#include <signal.h>
#include <sys/wait.h>

#define CYCLES 100
#define CHILD_TIMEOUT_S 60

typedef enum
{
  CHILD_OK,
  CHILD_FAILED,
  CHILD_HUNG
} ChildResult;

/* Runs one child with the stop points of seed; kills it after the
 * timeout. */
static ChildResult
run_child (gchar ** envp, gint seed, gint * status)
{
  const gchar *child = g_getenv ("H3_STOP_CHILD");
  gchar *seed_arg = g_strdup_printf ("%d", seed);
  gchar *argv[] = { (gchar *) child, (gchar *) "--seed", seed_arg,
    (gchar *) "--max-delay-ms", (gchar *) "300", NULL
  };
  GError *err = NULL;
  GPid pid;
  gint64 deadline = g_get_monotonic_time () + CHILD_TIMEOUT_S * G_USEC_PER_SEC;
  ChildResult result = CHILD_HUNG;

  fail_unless (child != NULL, "H3_STOP_CHILD is not set");
  fail_unless (g_spawn_async (NULL, argv, envp, G_SPAWN_DO_NOT_REAP_CHILD |
          G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, &pid, &err), "%s: %s", child,
      err ? err->message : "");
  while (g_get_monotonic_time () < deadline) {
    pid_t r = waitpid (pid, status, WNOHANG);
    if (r == pid) {
      result = WIFEXITED (*status) && WEXITSTATUS (*status) == 0 ? CHILD_OK :
          CHILD_FAILED;
      break;
    }
    g_usleep (5000);
  }
  if (result == CHILD_HUNG) {
    kill (pid, SIGKILL);
    waitpid (pid, status, 0);
  }
  g_spawn_close_pid (pid);
  g_free (seed_arg);
  return result;
}

GST_START_TEST (test_stop_and_exit_cycles)
{
  gchar **envp = g_get_environ ();
  gint hangs = 0, failures = 0;
  gint64 t0 = g_get_monotonic_time ();

  /* The child is an application, not a test: no leaks tracer. */
  envp = g_environ_unsetenv (envp, "GST_TRACERS");
  for (gint i = 1; i <= CYCLES; i++) {
    gint status = 0;
    switch (run_child (envp, i, &status)) {
      case CHILD_OK:
        break;
      case CHILD_FAILED:
        failures++;
        GST_WARNING ("cycle %d: the child exited with status 0x%x", i, status);
        break;
      case CHILD_HUNG:
        hangs++;
        GST_WARNING ("cycle %d: the child did not exit within %d s", i,
            CHILD_TIMEOUT_S);
        break;
    }
  }
  g_print ("%d stop-and-exit cycles in %.1f s: %d hung, %d failed\n", CYCLES,
      (g_get_monotonic_time () - t0) / 1e6, hangs, failures);
  fail_unless_equals_int (hangs, 0);
  fail_unless_equals_int (failures, 0);
  g_strfreev (envp);
}

GST_END_TEST;

static Suite *
h3videosrc_stop_suite (void)
{
  Suite *s = suite_create ("h3videosrc-stop");
  TCase *tc = tcase_create ("stop");

  tcase_set_timeout (tc, 900);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_stop_and_exit_cycles);
  return s;
}

GST_CHECK_MAIN (h3videosrc_stop);
