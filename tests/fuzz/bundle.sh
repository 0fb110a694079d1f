#!/bin/sh
# A fuzz build packed to run on a machine without GLib, json-glib, OpenBLAS or
# GdkPixbuf installed (the GPU machine): the harnesses, the shared libraries
# they load (all but glibc's own) and the generated seeds (with the engine
# harnesses' model), in a build directory's layout, so that run-long.sh and
# run-parallel.sh take it as BUILD_DIR.
#
#   tests/fuzz/bundle.sh BUILD_DIR DEST        then, on the other machine,
#   . DEST/env.sh && tests/fuzz/run-parallel.sh DEST 16 3600
#
# The repository's checkout must be there too (tests/data, the dictionaries,
# the committed seeds, the scripts). Debug information is stripped to keep
# DEST small (about 15 MB): ASan's reports still name the functions; replay a
# finding in the full build here for file and line.
set -eu
[ $# -eq 2 ] || { sed -n '2,14p' "$0"; exit 2; }
build=$(cd "$1" && pwd)
dest=$2
[ -x "$build/tests/fuzz/fuzz_config" ] || { echo "bundle.sh: $build is no fuzz build (ninja -C $1 fuzz-harnesses)" >&2; exit 2; }
rm -rf "$dest"
mkdir -p "$dest/tests/fuzz" "$dest/lib"
dest=$(cd "$dest" && pwd)
for exe in "$build"/tests/fuzz/fuzz_*; do
  [ -f "$exe" ] && [ -x "$exe" ] || continue
  objcopy --strip-debug "$exe" "$dest/tests/fuzz/${exe##*/}"
done
# the seeds, and seeds/model: the model the engine harnesses open
cp -r "$build/tests/fuzz/seeds" "$dest/tests/fuzz/"
# Every library the harnesses load but glibc's (the other machine's glibc
# runs them; the rest may be missing there).
for exe in "$dest"/tests/fuzz/fuzz_*; do ldd "$exe"; done | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  while read -r lib; do
    case ${lib##*/} in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libresolv.so.*) continue ;;
    esac
    cp -L "$lib" "$dest/lib/"
  done
cat >"$dest/env.sh" <<ENV
# . DEST/env.sh: the bundle's libraries, its tiny model for the harnesses. Moved
# elsewhere: bash finds it from this file's path, other shells from H3_FUZZ_BUNDLE.
_h3b=\${H3_FUZZ_BUNDLE:-\${BASH_SOURCE:+\$(cd "\$(dirname "\$BASH_SOURCE")" && pwd)}}
_h3b=\${_h3b:-$dest}
export LD_LIBRARY_PATH=\$_h3b/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export H3_FUZZ_MODEL=\$_h3b/tests/fuzz/seeds/model
ENV
missing=$(for exe in "$dest"/tests/fuzz/fuzz_*; do LD_LIBRARY_PATH="$dest/lib" ldd "$exe"; done | grep -c "not found" || true)
[ "$missing" = 0 ] || { echo "bundle.sh: $missing unresolved libraries" >&2; exit 1; }
echo "bundle: $dest ($(du -sh "$dest" | cut -f1)); on the other machine: H3_FUZZ_BUNDLE=PATH . PATH/env.sh"
