#!/bin/sh
# HTTP Live Streaming: hlssink2 writes 1-second MPEG-TS segments and a
# playlist; serve the directory over HTTP and open playlist.m3u8 in a player
# (e.g. `python3 -m http.server -d hls` then http://localhost:8000/playlist.m3u8).
#
#   examples/hls.sh "a prompt" [outdir]
#
# Segments can only be cut at key frames: key-int-max=24 puts one every
# second at 24 fps. playlist-length=0 keeps every segment (a VOD playlist).
#
# Known GStreamer 1.22 issue: now and then (about one run in ten on short
# clips) splitmuxsink, inside hlssink2, never posts EOS after writing the last
# fragment, so gst-launch-1.0 does not exit. The files are complete by then
# (the playlist ends with #EXT-X-ENDLIST): press Ctrl-C.
set -eu
prompt=${1:?usage: hls.sh "prompt" [outdir]}
dir=${2:-hls}
props=${H3VIDEOSRC_PROPS:-width=320 height=192 num-frames=124}
mkdir -p "$dir"

# shellcheck disable=SC2086
exec gst-launch-1.0 -e \
  h3videosrc name=s prompt="$prompt" $props \
  s.video ! queue max-size-buffers=0 max-size-bytes=0 max-size-time=3000000000 \
    ! videoconvert ! video/x-raw,format=I420 ! x264enc key-int-max=24 ! h264parse ! hls.video \
  s.audio ! queue max-size-buffers=0 max-size-bytes=0 max-size-time=3000000000 \
    ! audioconvert ! audioresample ! audio/x-raw,rate=48000 ! avenc_aac ! aacparse ! hls.audio \
  hlssink2 name=hls target-duration=1 playlist-length=0 max-files=0 \
    location="$dir/segment%05d.ts" playlist-location="$dir/playlist.m3u8"
