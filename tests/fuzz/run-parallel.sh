#!/bin/sh
# Every harness at once on N cores for T seconds, then one table of
# executions and findings (the rows of run-long.sh, which runs each one).
#
#   tests/fuzz/run-parallel.sh BUILD_DIR N T [HARNESS...]   (default: every harness)
#
# BUILD_DIR: a fuzz build, or a bundle of one (bundle.sh: for a machine
# without GLib; source its env.sh first). The N cores are shared out as
# libFuzzer jobs: one per harness, the rest to the slowest harnesses first
# (SLOW below, from docs/RELIABILITY.md's rates); with fewer cores than
# harnesses they run in waves of N, each wave T / waves seconds. Corpora,
# artifacts and logs: H3_FUZZ_CORPUS (run-long.sh's default), so a later run
# resumes; H3_FUZZ_RUNS (an executions target per harness) is passed on.
# Prints the table and keeps it in CORPUS/parallel-DATE.txt.
set -eu
[ $# -ge 3 ] || { sed -n '2,15p' "$0"; exit 2; }
build=$(cd "$1" && pwd)
cores=$2 total=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
root=${H3_FUZZ_CORPUS:-${XDG_CACHE_HOME:-$HOME/.cache}/gst-h3-fuzz}
mkdir -p "$root/reports"
root=$(cd "$root" && pwd)
export H3_FUZZ_CORPUS="$root"
[ "$cores" -ge 1 ] && [ "$total" -ge 10 ] || { echo "run-parallel.sh: N >= 1 cores, T >= 10 s" >&2; exit 2; }

if [ $# -eq 0 ]; then
  for exe in "$build"/tests/fuzz/fuzz_*; do [ -x "$exe" ] && [ -f "$exe" ] && set -- "$@" "${exe##*/fuzz_}"; done
fi
[ $# -gt 0 ] || { echo "run-parallel.sh: no fuzz_* in $build/tests/fuzz" >&2; exit 2; }

# Slowest first: the extra cores go to these, in this order.
SLOW="engine_open memory_plan adapter tokenizer_load image_file checkpoint video_vae_config text_encoder_config
dit_config audio_vae_config tokenizer_encode config safetensors"
rank() { i=0; for s in $SLOW; do [ "$s" = "$1" ] && { echo $i; return; }; i=$((i + 1)); done; echo $i; }
ordered=$(for h in "$@"; do echo "$(rank "$h") $h"; done | sort -n | cut -d' ' -f2)

count=$#
waves=$(((count + cores - 1) / cores))
per=$((total / waves))
stamp=$(date +%Y%m%d-%H%M%S)
table="$root/parallel-$stamp.txt"
echo "$count harness(es), $cores core(s), $waves wave(s) of $per s; corpora under $root"

set -- $ordered
wave=0
while [ $# -gt 0 ]; do
  wave=$((wave + 1))
  n=$(($# < cores ? $# : cores))
  extra=$((cores - n))
  i=0
  pids=""
  for h in "$@"; do
    [ $i -lt $n ] || break
    jobs=$((1 + extra / n + (i < extra % n ? 1 : 0)))
    echo "  wave $wave: $h, $jobs job(s)"
    H3_FUZZ_TIME=$per H3_FUZZ_JOBS=$jobs H3_FUZZ_REPORT="$root/reports/$stamp-$h.txt" \
      sh "$here/run-long.sh" "$build" "$h" >"$root/reports/$stamp-$h.log" 2>&1 &
    pids="$pids $!"
    i=$((i + 1))
  done
  shift "$n"
  for p in $pids; do wait "$p" || true; done
done

{
  head -n 1 "$(ls "$root/reports/$stamp"-*.txt | head -n 1)"
  for f in "$root/reports/$stamp"-*.txt; do tail -n +2 "$f"; done | sort
  printf '%-22s %7s %5s %12s\n' total "$total" "$cores" \
    "$(for f in "$root/reports/$stamp"-*.txt; do tail -n +2 "$f"; done | awk '{ n += $4 } END { print n + 0 }')"
} >"$table"
cat "$table"
echo "(table: $table; per-harness logs: $root/reports/$stamp-*.log; findings under $root/artifacts/)"
