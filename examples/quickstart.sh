#!/bin/sh
# The README's quickstart: install the Debian packages, build gst-h3, and
# generate a clip with its soundtrack from the embedded tiny model on the
# CPU, encoded to H.264 + AAC in h3-quickstart.mkv (any player opens it).
#
#   examples/quickstart.sh [--no-setup] [out.mkv]
#
# --no-setup skips the installation and the build and uses the element
# GStreamer already finds (installed, or through GST_PLUGIN_PATH). The clip
# takes about ten seconds on two cores; the tiny model paints noise, not a
# fox. For a real clip add model-location=/path/to/MiniMax-H3 and drop the
# size (the default is 1280x736, 124 frames): H3VIDEOSRC_PROPS replaces the
# size properties below.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
setup=1
if [ "${1:-}" = "--no-setup" ]; then
  setup=0
  shift
fi
out=${1:-h3-quickstart.mkv}
props=${H3VIDEOSRC_PROPS:-width=320 height=192 num-frames=48}

if [ "$setup" = 1 ]; then
  "$root/tools/install-deps-debian.sh"
  [ -d "$root/build" ] || meson setup "$root/build" "$root"
  ninja -C "$root/build"
  GST_PLUGIN_PATH="$root/build/gst-plugin${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}"
  export GST_PLUGIN_PATH
fi

# One queue per branch, sized in time: x264enc holds about 2 s of video
# (docs/ELEMENT.md, "Queues and encoders"). I420 keeps the H.264 in the
# profile every player decodes; 48 kHz audio is what players expect most
# (avenc_aac itself takes the model's 32 kHz).
# shellcheck disable=SC2086  # props is a list of properties
gst-launch-1.0 -e \
  h3videosrc name=s prompt="a red fox running through snow" $props \
  s.video ! queue max-size-buffers=0 max-size-bytes=0 max-size-time=3000000000 \
    ! videoconvert ! video/x-raw,format=I420 ! x264enc ! h264parse ! queue ! mux. \
  s.audio ! queue max-size-buffers=0 max-size-bytes=0 max-size-time=3000000000 \
    ! audioconvert ! audioresample ! audio/x-raw,rate=48000 ! avenc_aac ! aacparse ! queue ! mux. \
  matroskamux name=mux ! filesink location="$out"
echo "wrote $out"
