/* gsth3plugin.c - the `h3` plugin: registers h3videosrc and h3src (the
 * h3: URI source around it).
 *
 * plugin_init runs inside gst-plugin-scanner for every registry rebuild, so
 * it only registers types: no model, no CUDA, no NCCL is touched here. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <gst/gst.h>

#include "gsth3src.h"
#include "gsth3videosrc.h"

static gboolean
plugin_init (GstPlugin * plugin)
{
  return GST_ELEMENT_REGISTER (h3videosrc, plugin)
      && GST_ELEMENT_REGISTER (h3src, plugin);
}

GST_PLUGIN_DEFINE (GST_VERSION_MAJOR, GST_VERSION_MINOR, h3,
    "MiniMax-H3 text to video and audio generation",
    plugin_init, VERSION, GST_LICENSE, GST_PACKAGE_NAME, GST_PACKAGE_ORIGIN)
