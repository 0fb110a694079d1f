#!/bin/sh
# The official OpenAI Node SDK (npm `openai`, the version in
# openai-client/package.json), unmodified, against h3-studio on the embedded
# tiny model: create, retrieve, list, downloadContent, delete; the MP4 it
# downloads checked with ffprobe. Installs the SDK into the build folder
# (npm reaches the npm registry); exit 77 without node or npm.
#   test_h3_studio_openai.sh H3_STUDIO_EXE WORK_DIR
set -eu
exe=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null && command -v npm >/dev/null || { echo "skipped: node/npm not installed"; exit 77; }
mkdir -p "$work"
cp "$here/openai-client/package.json" "$here/openai-client/client.mjs" "$work/"
if [ ! -d "$work/node_modules/openai" ]; then
  (cd "$work" && env -u LD_PRELOAD npm install --no-audit --no-fund --no-package-lock --omit=peer >/dev/null 2>&1) || {
    echo "npm install openai failed"; exit 1; }
fi
data=$(mktemp -d)
log=$data/studio.log
"$exe" --port 0 --data "$data/videos" --element compute=cpu >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
for i in $(seq 1 100); do
  url=$(sed -n 's/^h3-studio: listening on \(http:[^ ]*\)\/ .*/\1/p' "$log")
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { cat "$log"; exit 1; }
# the sanitizer build preloads ASan for h3-studio, not for node
env -u LD_PRELOAD node "$work/client.mjs" "$url" "$data/sdk.mp4"
ffprobe -v error -show_entries stream=codec_type -of csv=p=0 "$data/sdk.mp4" | sort | tr '\n' ' ' | grep -q "audio video" || {
  echo "the SDK's download is not an MP4 with audio and video"; exit 1; }
echo "test_h3_studio_openai: the SDK's clip plays (ffprobe: audio, video)"
