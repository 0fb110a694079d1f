#!/bin/sh
# Compares `gst-inspect-1.0 ELEMENT` with the committed
# tests/gst-inspect-ELEMENT.txt (h3videosrc, h3src), the stand-in for
# upstream's gst_plugins_cache.json (hotdoc is not packaged in Debian
# bookworm). The element is named by the file.
#
# Lines that differ from machine to machine are normalised first: the
# plugin's file name and version, the embedded model's directory (the
# model-location default) and the capabilities structure (it describes the
# machine). Everything else - properties, flags, ranges, defaults, enums,
# pad templates - must match.
#
#   check-inspect.sh EXPECTED [--update]
# The environment (GST_PLUGIN_PATH, GST_REGISTRY) comes from meson.
set -eu
expected=$1
element=$(basename "$expected" .txt)
element=${element#gst-inspect-}
actual=$(mktemp)
trap 'rm -f "$actual"' EXIT

GST_INSPECT_NO_COLORS=1 gst-inspect-1.0 --no-colors "$element" | awk '
  /^  Filename / { print "  Filename                 <filename>"; next }
  /^  Version / { print "  Version                  <version>"; next }
  # The default of model-location is the embedded model directory.
  /^  model-location / { in_model = 1 }
  in_model && /String\. Default: / { sub(/Default: .*/, "Default: <embedded tiny model>"); in_model = 0 }
  # The current value of capabilities depends on the machine: keep the
  # property header, drop the structure dump that follows it.
  /^  capabilities / { print; getline; print; getline; print; skip = 1; next }
  skip && /^  [a-z]/ { skip = 0 }
  skip { next }
  { print }
' >"$actual"

if [ "${2:-}" = "--update" ]; then
  cp "$actual" "$expected"
  echo "updated $expected"
  exit 0
fi
if diff -u "$expected" "$actual"; then
  echo "1 passed, 0 failed"
else
  echo "gst-inspect-1.0 $element differs from $expected" >&2
  echo "(run tests/gst/check-inspect.sh $expected --update after a deliberate change)" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
