#!/bin/sh
# Packs a CUDA build's GPU programs for the GPU machine, which has CUDA, NCCL,
# cuBLAS and PyTorch but no GLib, json-glib, OpenBLAS or GStreamer: the programs
# (stripped) and every shared library they load but glibc's and CUDA's, in one
# tar.xz that stays under the device tool's 64 MiB carry limit.
#
#   tools/gpu-bundle.sh [--gst] [--studio] BUILD_DIR DEST.tar.xz [PROGRAM...]
#
# PROGRAM: paths under BUILD_DIR (default: h3-bench, h3-generate and the GPU
# tests). --gst adds the element and what tools/bench/h3_e2e.py's pipeline needs
# (gst-launch-1.0, gst-discoverer-1.0, the plugin scanner, the plugins of the
# pipeline) from this machine's GStreamer. On the GPU machine, from the repository root:
#   mkdir -p /tmp/g && tar xJf DEST.tar.xz -C /tmp/g && export LD_LIBRARY_PATH=/tmp/g/lib
#   /tmp/g/bin/h3-bench ...        (tests: H3_TEST_DATA=$PWD/tests/data /tmp/g/bin/test_gpu_goldens)
#   with --gst also: export PATH=/tmp/g/bin:$PATH GST_PLUGIN_SYSTEM_PATH_1_0=/tmp/g/plugins \
#     GST_PLUGIN_SCANNER_1_0=/tmp/g/bin/gst-plugin-scanner GST_REGISTRY_1_0=/tmp/g/registry.bin
# --studio (with --gst) adds h3-studio and the plugins of its pipeline (h264parse, avenc_aac), for
# tools/bench/h3_studio_bench.py.
set -eu
gst=0
studio=0
[ "${1:-}" = --gst ] && { gst=1; shift; }
[ "${1:-}" = --studio ] && { studio=1; shift; }
[ $# -ge 2 ] || { sed -n '2,16p' "$0"; exit 2; }
build=$(cd "$1" && pwd)
out=$2
shift 2
[ $# -gt 0 ] || set -- tools/h3-bench tools/h3-generate tests/test_cuda_ops tests/test_gpu_goldens \
  tests/test_cuda_fp8 tests/test_gpu_stream
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/lib"
for p in "$@"; do
  [ -x "$build/$p" ] || { echo "gpu-bundle.sh: $build/$p is not built" >&2; exit 2; }
  strip -o "$tmp/bin/${p##*/}" "$build/$p"
done
dirs="bin lib"
if [ $gst = 1 ]; then
  gstlib=$(pkg-config --variable=pluginsdir gstreamer-1.0)
  scanner=$(pkg-config --variable=pluginscannerdir gstreamer-1.0)/gst-plugin-scanner
  [ -f "$build/gst-plugin/libgsth3.so" ] || { echo "gpu-bundle.sh: $build/gst-plugin/libgsth3.so is not built" >&2; exit 2; }
  mkdir -p "$tmp/plugins"
  strip -o "$tmp/plugins/libgsth3.so" "$build/gst-plugin/libgsth3.so"
  cp "$(command -v gst-launch-1.0)" "$(command -v gst-discoverer-1.0)" "$scanner" "$tmp/bin/"
  # h3_e2e.py's pipeline: queue, videoconvert, x264enc, mp4mux, filesink, audioconvert,
  # audioresample, lamemp3enc; typefind and playback for gst-discoverer-1.0
  plugins="coreelements videoconvertscale x264 isomp4 audioconvert audioresample lame app typefindfunctions playback"
  if [ $studio = 1 ]; then
    [ -x "$build/tools/studio/h3-studio" ] || { echo "gpu-bundle.sh: $build/tools/studio/h3-studio is not built" >&2; exit 2; }
    strip -o "$tmp/bin/h3-studio" "$build/tools/studio/h3-studio"
    plugins="$plugins videoparsersbad libav"
  fi
  for p in $plugins; do
    [ -f "$gstlib/libgst$p.so" ] || { echo "gpu-bundle.sh: $gstlib/libgst$p.so missing (install gstreamer1.0-plugins-good/-ugly)" >&2; exit 2; }
    cp "$gstlib/libgst$p.so" "$tmp/plugins/"
  done
  dirs="bin lib plugins"
fi
for exe in "$tmp"/bin/* "$tmp"/plugins/*; do [ -f "$exe" ] && ldd "$exe"; done 2>/dev/null |
  awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  while read -r lib; do
    case ${lib##*/} in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libresolv.so.*) continue ;;
    libcuda.so.*|libcublas*|libnccl*|libcudart*|libnvidia*) continue ;; # the GPU machine's own
    esac
    cp -L "$lib" "$tmp/lib/"
  done
# -9: a 64 MiB dictionary, so the programs' identical CUDA fatbins (about 12 MB each) are stored once
XZ_OPT=${XZ_OPT:--9} tar cJf "$out" -C "$tmp" $dirs
echo "gpu-bundle: $out ($(du -h "$out" | cut -f1)): $(ls "$tmp/bin" | tr '\n' ' ')"
