#!/bin/sh
# Installs what gst-h3 needs to build and test on Debian 12 (bookworm).
# Run as root (or through sudo). Safe to run again.
set -eu
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential meson ninja-build pkg-config \
  libglib2.0-dev libjson-glib-dev libopenblas-dev libgdk-pixbuf-2.0-dev zlib1g-dev libjpeg-dev \
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev libgstrtspserver-1.0-dev libsoup-3.0-dev \
  gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good \
  gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly gstreamer1.0-libav \
  gstreamer1.0-plugins-base-apps valgrind \
  python3 python3-gi gir1.2-gstreamer-1.0 ffmpeg \
  clang libclang-rt-dev llvm \
  chromium chromium-driver python3-selenium >/dev/null
# clang + libclang-rt-dev: the fuzz build (libFuzzer, ASan, UBSan runtimes;
# tests/fuzz, docs/RELIABILITY.md); llvm: llvm-symbolizer for sanitizer stacks.
