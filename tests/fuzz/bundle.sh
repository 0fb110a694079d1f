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
# GdkPixbuf (image_file) needs the MIME database to tell PNG from JPEG (without it every image is refused
# as an unknown format and the harness fuzzes nothing past the sniffing) and its loader modules for the
# other formats: mime.cache, the modules but SVG's (librsvg's tree is large; keyframes are pictures) and
# their libraries, and loaders.cache with its paths made relative, written out by env.sh.
mime=$(pkg-config --variable=prefix shared-mime-info 2>/dev/null || echo /usr)/share/mime/mime.cache
[ -f "$mime" ] || mime=/usr/share/mime/mime.cache
mkdir -p "$dest/share/mime"
cp "$mime" "$dest/share/mime/"
pixdir=$(pkg-config --variable=gdk_pixbuf_moduledir gdk-pixbuf-2.0)
pixcache=$(pkg-config --variable=gdk_pixbuf_cache_file gdk-pixbuf-2.0)
mkdir -p "$dest/pixbuf-loaders"
for mod in "$pixdir"/libpixbufloader-*.so; do
  case ${mod##*/} in *svg*) continue ;; esac
  cp "$mod" "$dest/pixbuf-loaders/"
  ldd "$mod" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r lib; do
    case ${lib##*/} in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libresolv.so.*) continue ;;
    esac
    [ -f "$dest/lib/${lib##*/}" ] || cp -L "$lib" "$dest/lib/"
  done
done
# loaders.cache without the SVG entry, module paths as @DIR@/NAME
awk -v dir="$pixdir" 'BEGIN { RS = ""; ORS = "\n\n" } !/svg/ { gsub(dir, "@DIR@"); print }' "$pixcache" \
  >"$dest/pixbuf-loaders/loaders.cache.in"
cat >"$dest/env.sh" <<ENV
# . DEST/env.sh: the bundle's libraries, its tiny model for the harnesses. Moved
# elsewhere: bash finds it from this file's path, other shells from H3_FUZZ_BUNDLE.
_h3b=\${H3_FUZZ_BUNDLE:-\${BASH_SOURCE:+\$(cd "\$(dirname "\$BASH_SOURCE")" && pwd)}}
_h3b=\${_h3b:-$dest}
export LD_LIBRARY_PATH=\$_h3b/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export H3_FUZZ_MODEL=\$_h3b/tests/fuzz/seeds/model
export XDG_DATA_DIRS=\$_h3b/share\${XDG_DATA_DIRS:+:\$XDG_DATA_DIRS}
sed "s#@DIR@#\$_h3b/pixbuf-loaders#g" "\$_h3b/pixbuf-loaders/loaders.cache.in" >"\$_h3b/pixbuf-loaders/loaders.cache"
export GDK_PIXBUF_MODULE_FILE=\$_h3b/pixbuf-loaders/loaders.cache
ENV
missing=$(for exe in "$dest"/tests/fuzz/fuzz_* "$dest"/pixbuf-loaders/*.so; do LD_LIBRARY_PATH="$dest/lib" ldd "$exe"; done | grep -c "not found" || true)
[ "$missing" = 0 ] || { echo "bundle.sh: $missing unresolved libraries" >&2; exit 1; }
echo "bundle: $dest ($(du -sh "$dest" | cut -f1)); on the other machine: H3_FUZZ_BUNDLE=PATH . PATH/env.sh"
