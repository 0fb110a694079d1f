#!/bin/sh
# An MP4 file: H.264 (x264enc) and AAC (avenc_aac). mp4mux only takes encoded
# streams. I420 keeps the H.264 in a profile every player decodes; the audio is
# resampled to 48 kHz, the rate players expect most (avenc_aac itself takes the
# model's 32 kHz).
#
#   examples/mp4.sh "a prompt" [out.mp4]
#
# x264enc's default look-ahead holds about 2 s of video at 24 fps: the audio
# queue holds 3 s so the muxer never waits on a full audio queue
# (docs/ELEMENT.md, "Queues and encoders"). H3VIDEOSRC_PROPS adds element
# properties, e.g. "model-location=/models/MiniMax-H3 steps=4".
set -eu
prompt=${1:?usage: mp4.sh "prompt" [out.mp4]}
out=${2:-clip.mp4}
props=${H3VIDEOSRC_PROPS:-width=320 height=192 num-frames=48}

# shellcheck disable=SC2086
exec gst-launch-1.0 -e \
  h3videosrc name=s prompt="$prompt" $props \
  s.video ! queue max-size-buffers=0 max-size-bytes=0 max-size-time=3000000000 \
    ! videoconvert ! video/x-raw,format=I420 ! x264enc ! h264parse ! queue ! mux.video_0 \
  s.audio ! queue max-size-buffers=0 max-size-bytes=0 max-size-time=3000000000 \
    ! audioconvert ! audioresample ! audio/x-raw,rate=48000 ! avenc_aac ! aacparse ! queue ! mux.audio_0 \
  mp4mux name=mux ! filesink location="$out"
