#!/bin/sh
# Packs a CUDA build's GPU programs for the GPU machine, which has CUDA, NCCL,
# cuBLAS and PyTorch but no GLib, json-glib or OpenBLAS: the programs
# (stripped) and every shared library they load but glibc's and CUDA's, in one
# tar.xz that stays under the device tool's 64 MiB carry limit.
#
#   tools/gpu-bundle.sh BUILD_DIR DEST.tar.xz [PROGRAM...]
#
# PROGRAM: paths under BUILD_DIR (default: h3-bench and the GPU tests). On the
# GPU machine, from the repository root:
#   mkdir -p /tmp/g && tar xJf DEST.tar.xz -C /tmp/g && export LD_LIBRARY_PATH=/tmp/g/lib
#   /tmp/g/bin/h3-bench ...        (tests: H3_TEST_DATA=$PWD/tests/data /tmp/g/bin/test_gpu_goldens)
set -eu
[ $# -ge 2 ] || { sed -n '2,12p' "$0"; exit 2; }
build=$(cd "$1" && pwd)
out=$2
shift 2
[ $# -gt 0 ] || set -- tools/h3-bench tests/test_cuda_ops tests/test_gpu_goldens tests/test_cuda_fp8 \
  tests/test_gpu_stream
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/lib"
for p in "$@"; do
  [ -x "$build/$p" ] || { echo "gpu-bundle.sh: $build/$p is not built" >&2; exit 2; }
  strip -o "$tmp/bin/${p##*/}" "$build/$p"
done
for exe in "$tmp"/bin/*; do ldd "$exe"; done | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  while read -r lib; do
    case ${lib##*/} in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libresolv.so.*) continue ;;
    libcuda.so.*|libcublas*|libnccl*|libcudart*|libnvidia*) continue ;; # the GPU machine's own
    esac
    cp -L "$lib" "$tmp/lib/"
  done
tar cJf "$out" -C "$tmp" bin lib
echo "gpu-bundle: $out ($(du -h "$out" | cut -f1)): $(ls "$tmp/bin" | tr '\n' ' ')"
