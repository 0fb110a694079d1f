/* h3-multi-prompt.c - several clips in one process, one model load.
 *
 * The pipeline is built once:
 *
 *   h3videosrc name=src ! queue ! matroskamux name=mux ! filesink
 *   src.audio ! queue ! mux.
 *
 * For each prompt the pipeline goes back to NULL (filesink only takes a new
 * file name there), the element's properties and the file name change, and
 * the pipeline plays to EOS. h3videosrc keeps its engine across state
 * changes as long as model-location, adapter-location, compute and devices
 * stay the same, so only the first clip pays for loading the model (the
 * "load" progress message appears once). The engine is freed with the
 * element.
 *
 * Build (needs only GStreamer's development files):
 *   gcc h3-multi-prompt.c -o h3-multi-prompt \
 *       $(pkg-config --cflags --libs gstreamer-1.0)
 * Run:
 *   ./h3-multi-prompt -W 256 -H 160 -n 22 -o clips "a red fox in snow" \
 *       "waves on a beach at dusk"
 * Options: -W width, -H height, -n frames, -s steps (0 = model default),
 * -S seed, -m model directory, -o output directory. */
#include <gst/gst.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int width, height, frames, steps;
    guint64 seed;
    const char *model, *outdir;
} options;

static int parse_options(int argc, char **argv, options *o) {
    int c;
    *o = (options){256, 160, 22, 0, 42, NULL, "."};
    while ((c = getopt(argc, argv, "W:H:n:s:S:m:o:")) != -1) {
        switch (c) {
        case 'W': o->width = atoi(optarg); break;
        case 'H': o->height = atoi(optarg); break;
        case 'n': o->frames = atoi(optarg); break;
        case 's': o->steps = atoi(optarg); break;
        case 'S': o->seed = g_ascii_strtoull(optarg, NULL, 10); break;
        case 'm': o->model = optarg; break;
        case 'o': o->outdir = optarg; break;
        default: return -1;
        }
    }
    return optind;
}

/* Plays the pipeline to EOS. Counts model loads and prints progress.
 * Returns 0 on EOS, -1 on an error. */
static int play_to_eos(GstElement *pipeline, int *loads) {
    GstBus *bus = gst_element_get_bus(pipeline);
    int result = 0, done = 0;

    if (gst_element_set_state(pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE)
        result = -1;
    while (!done && result == 0) {
        GstMessage *m = gst_bus_timed_pop_filtered(bus, GST_CLOCK_TIME_NONE,
            GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_PROGRESS);
        switch (GST_MESSAGE_TYPE(m)) {
        case GST_MESSAGE_EOS:
            done = 1;
            break;
        case GST_MESSAGE_ERROR: {
            GError *err;
            char *dbg;
            gst_message_parse_error(m, &err, &dbg);
            fprintf(stderr, "error: %s\n(%s)\n", err->message, dbg ? dbg : "");
            g_error_free(err);
            g_free(dbg);
            result = -1;
            break;
        }
        case GST_MESSAGE_PROGRESS: {
            GstProgressType type;
            char *code, *text;
            gst_message_parse_progress(m, &type, &code, &text);
            if (strcmp(code, "load") == 0 && type == GST_PROGRESS_TYPE_START) (*loads)++;
            printf("  [%s] %s\n", code, text);
            g_free(code);
            g_free(text);
            break;
        }
        default:
            break;
        }
        gst_message_unref(m);
    }
    gst_object_unref(bus);
    return result;
}

int main(int argc, char **argv) {
    options o;
    GError *err = NULL;
    GstElement *pipeline, *src, *sink;
    int first, loads = 0, failed = 0;

    gst_init(&argc, &argv);
    first = parse_options(argc, argv, &o);
    if (first < 0 || first >= argc) {
        fprintf(stderr, "usage: %s [-W width] [-H height] [-n frames] [-s steps] [-S seed] "
                        "[-m model-dir] [-o outdir] prompt...\n", argv[0]);
        return 2;
    }
    pipeline = gst_parse_launch("h3videosrc name=src ! queue ! matroskamux name=mux ! "
                                "filesink name=sink src.audio ! queue ! mux.", &err);
    if (!pipeline) {
        fprintf(stderr, "pipeline: %s\n", err->message);
        return 1;
    }
    src = gst_bin_get_by_name(GST_BIN(pipeline), "src");
    sink = gst_bin_get_by_name(GST_BIN(pipeline), "sink");
    if (o.model) g_object_set(src, "model-location", o.model, NULL);

    for (int i = first; i < argc && !failed; i++) {
        int n = i - first + 1, aligned;
        char *location = g_strdup_printf("%s/clip-%d.mkv", o.outdir, n);
        GstStructure *stats = NULL;
        double total = 0;

        /* Properties of h3videosrc change only in NULL or READY. */
        gst_element_set_state(pipeline, GST_STATE_NULL);
        g_object_set(src, "prompt", argv[i], "seed", o.seed + (guint64)n - 1, "width", o.width,
                     "height", o.height, "num-frames", o.frames, "steps", (guint)o.steps, NULL);
        g_object_set(sink, "location", location, NULL);
        g_object_get(src, "aligned-frames", &aligned, NULL);
        printf("clip %d: \"%s\" -> %s (%d frames at %dx%d)\n", n, argv[i], location, aligned,
               o.width, o.height);
        if (play_to_eos(pipeline, &loads) != 0) failed = 1;
        g_object_get(src, "stats", &stats, NULL);
        if (stats) {
            gst_structure_get_double(stats, "total", &total);
            printf("  generated in %.2f s\n", total);
            gst_structure_free(stats);
        }
        g_free(location);
    }
    gst_element_set_state(pipeline, GST_STATE_NULL);
    printf("model loaded %d time(s) for %d clip(s)\n", loads, argc - first);
    gst_object_unref(src);
    gst_object_unref(sink);
    gst_object_unref(pipeline);
    return failed ? 1 : 0;
}
