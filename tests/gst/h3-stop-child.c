/* h3-stop-child.c - what an application does when it stops a clip and
 * exits: build a pipeline around h3videosrc, set it PLAYING, stop it at a
 * random point during the generation (NULL), drop it and return from main.
 * The process must then exit: test_h3videosrc_stop runs it many times under
 * a timeout, and the gst-valgrind suite runs it under valgrind.
 *
 *   h3-stop-child [--cycles N] [--seed S] [--max-delay-ms M] [--steps K]
 *
 * Each cycle waits a random time in [0, M] ms (scaled by the environment's
 * H3_TEST_TIME_SCALE) after PLAYING before going to NULL, so that the stop
 * lands in the model load, the prompt, a denoising step or the decode.
 * Exit status 0 when every cycle reached NULL; the test counts a timeout as
 * a hang. */
#include <gst/gst.h>
#include <stdlib.h>

int
main (int argc, char **argv)
{
  gint cycles = 1, max_delay_ms = 400, steps = 8;
  gint64 seed = 1;
  gdouble scale = 1.0;
  const gchar *s = g_getenv ("H3_TEST_TIME_SCALE");
  GOptionEntry entries[] = {
    {"cycles", 0, 0, G_OPTION_ARG_INT, &cycles, "Cycles in this process", "N"},
    {"seed", 0, 0, G_OPTION_ARG_INT64, &seed, "Seed of the stop points", "S"},
    {"max-delay-ms", 0, 0, G_OPTION_ARG_INT, &max_delay_ms,
        "Latest stop after PLAYING", "M"},
    {"steps", 0, 0, G_OPTION_ARG_INT, &steps, "Denoising steps", "K"},
    {NULL}
  };
  GOptionContext *ctx = g_option_context_new ("- stop h3videosrc and exit");
  GError *err = NULL;
  GRand *rand;

  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_add_group (ctx, gst_init_get_option_group ());
  if (!g_option_context_parse (ctx, &argc, &argv, &err)) {
    g_printerr ("%s\n", err->message);
    return 2;
  }
  g_option_context_free (ctx);
  if (s)
    scale = g_ascii_strtod (s, NULL);
  rand = g_rand_new_with_seed ((guint32) seed);

  for (gint i = 0; i < cycles; i++) {
    gchar *desc = g_strdup_printf ("h3videosrc name=s prompt=\"a robot "
        "dancing\" width=64 height=32 num-frames=22 steps=%d seed=%d "
        "s.video ! queue ! fakesink s.audio ! queue ! fakesink", steps, i);
    GstElement *pipeline = gst_parse_launch (desc, &err);
    gulong delay_us;

    g_free (desc);
    if (!pipeline) {
      g_printerr ("%s\n", err->message);
      return 2;
    }
    if (gst_element_set_state (pipeline, GST_STATE_PLAYING) ==
        GST_STATE_CHANGE_FAILURE) {
      g_printerr ("cycle %d: PLAYING failed\n", i);
      return 3;
    }
    delay_us = (gulong) (g_rand_double_range (rand, 0, max_delay_ms) * 1000 *
        scale);
    g_usleep (delay_us);
    if (gst_element_set_state (pipeline, GST_STATE_NULL) !=
        GST_STATE_CHANGE_SUCCESS) {
      g_printerr ("cycle %d: NULL failed\n", i);
      return 4;
    }
    gst_object_unref (pipeline);
    g_print ("cycle %d: stopped after %lu ms\n", i, delay_us / 1000);
  }
  g_rand_free (rand);
  return 0;
}
