#!/bin/sh
# Long fuzzing runs: each harness of tests/fuzz for hours, in parallel
# jobs, on a corpus kept outside the repository; then the leak pass
# (run-fuzz.sh) and a table of executions and findings per harness.
#
#   tests/fuzz/run-long.sh BUILD_DIR [HARNESS...]     (default: every harness)
#
#   H3_FUZZ_TIME    seconds per harness (default 3600)
#   H3_FUZZ_RUNS    stop a harness once it has run this many inputs (its
#                   jobs together), even with time left (default: no target)
#   H3_FUZZ_JOBS    parallel libFuzzer jobs per harness (default: the CPU count)
#   H3_FUZZ_REPORT  the report's path (default CORPUS/report-DATE.txt)
#   H3_FUZZ_CHECK_BUILD  an ASan fuzz build whose harness replays the corpus
#                   after the run (the leak pass: LSan, and ASan on every input
#                   found), for a BUILD_DIR built -Dfuzz_sanitize=undefined
#   H3_FUZZ_PRELOAD a malloc library for the fuzz jobs alone (LD_PRELOAD; not
#                   the leak pass), for a build without ASan, which brings its
#                   own: libmimalloc.so.2 (libmimalloc2.0) gives fuzz_engine_open
#                   1.2x the inputs a second (json-glib allocates per node)
#   H3_FUZZ_CORPUS  where corpora, artifacts and logs go (default
#                   ${XDG_CACHE_HOME:-$HOME/.cache}/gst-h3-fuzz); reuse it to
#                   resume: each run starts from the corpus the last one grew
#
# BUILD_DIR is a fuzz build (docs/RELIABILITY.md) or a bundle of one (bundle.sh):
#   CC=clang meson setup build-fuzz -Dfuzz=enabled -Dcuda=disabled -Dgstreamer=disabled
#   ninja -C build-fuzz
# Each harness runs libFuzzer's -jobs=N -workers=N -max_total_time=T; a job
# that crashes ends early, so the round is started again with the time left
# until T is spent. Findings: CORPUS/artifacts/<harness>/{crash,leak,timeout,
# oom}-*; replay one with BUILD_DIR/tests/fuzz/fuzz_<harness> FILE, and save it
# under tests/fuzz/regressions/<harness>/ so that the fuzz suite replays it.
set -eu
[ $# -ge 1 ] || { sed -n '2,33p' "$0"; exit 2; }
build=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
total=${H3_FUZZ_TIME:-3600}
jobs=${H3_FUZZ_JOBS:-$(nproc)}
root=${H3_FUZZ_CORPUS:-${XDG_CACHE_HOME:-$HOME/.cache}/gst-h3-fuzz}
mkdir -p "$root"
root=$(cd "$root" && pwd)
case $root/ in "$src"/*) echo "run-long.sh: keep H3_FUZZ_CORPUS outside the repository" >&2; exit 2 ;; esac

if [ $# -eq 0 ]; then
  set --
  for exe in "$build"/tests/fuzz/fuzz_*; do [ -x "$exe" ] && set -- "$@" "${exe##*/fuzz_}"; done
fi
[ $# -gt 0 ] || { echo "run-long.sh: no fuzz_* in $build/tests/fuzz (configure with -Dfuzz=enabled)" >&2; exit 2; }

export OPENBLAS_NUM_THREADS=1 G_SLICE=always-malloc H3_FUZZ_DATA="$src/tests/data"
# inputs become files: on a tmpfs when there is one (run-fuzz.sh says why)
TMPDIR=${H3_FUZZ_TMPDIR:-$root/tmp}
[ -z "${H3_FUZZ_TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && TMPDIR=/dev/shm/h3-fuzz-$(id -u)
export TMPDIR H3_FUZZ_TMPDIR="$TMPDIR"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:handle_abort=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
mkdir -p "$TMPDIR"
report=${H3_FUZZ_REPORT:-$root/report-$(date +%Y%m%d-%H%M%S).txt}
# the engine harnesses' model of that build (make_seeds writes it; a bundle,
# bundle.sh, carries it too)
[ -d "$build/tests/fuzz/seeds/model" ] && export H3_FUZZ_MODEL="$build/tests/fuzz/seeds/model"

count() { find "$1" -maxdepth 1 -name "$2-*" 2>/dev/null | wc -l | tr -d ' '; }

printf '%-22s %7s %5s %12s %8s %8s %6s %9s %5s %8s\n' harness seconds jobs executions exec/s crashes leaks timeouts \
  ooms corpus >"$report"
for name in "$@"; do
  exe="$build/tests/fuzz/fuzz_$name"
  [ -x "$exe" ] || { echo "run-long.sh: no $exe" >&2; exit 2; }
  if [ -n "${H3_FUZZ_PRELOAD:-}" ] && grep -q __asan_init "$exe"; then
    echo "run-long.sh: $exe is an ASan build; ASan's allocator must stay (unset H3_FUZZ_PRELOAD)" >&2
    exit 2
  fi
  corpus="$root/corpus/$name" artifacts="$root/artifacts/$name" logs="$root/logs/$name"
  mkdir -p "$corpus" "$artifacts" "$logs"
  seeds=""
  for d in "$src/tests/fuzz/seeds/$name" "$build/tests/fuzz/seeds/$name"; do [ -d "$d" ] && seeds="$seeds $d"; done
  dict="$here/json.dict"
  [ "$name" = image_file ] && dict="$here/image.dict"
  [ "$name" = sample ] && dict="$here/sample.dict"
  # this run's rounds only: a resumed corpus keeps the older logs apart
  logs="$logs/$(date +%Y%m%d-%H%M%S)"
  start=$(date +%s) round=0 execs=0
  echo "== $name: ${total} s${H3_FUZZ_RUNS:+ or $H3_FUZZ_RUNS inputs}, $jobs job(s), corpus $corpus"
  while :; do
    left=$((total - ($(date +%s) - start)))
    [ "$left" -ge 10 ] || break
    runs=""
    if [ -n "${H3_FUZZ_RUNS:-}" ]; then
      todo=$((H3_FUZZ_RUNS - execs))
      [ "$todo" -gt 0 ] || break
      runs="-runs=$(((todo + jobs - 1) / jobs))"
    fi
    round=$((round + 1))
    mkdir -p "$logs/round-$round"
    # shellcheck disable=SC2086
    (cd "$logs/round-$round" && env ${H3_FUZZ_PRELOAD:+LD_PRELOAD="$H3_FUZZ_PRELOAD"} "$exe" -jobs="$jobs" -workers="$jobs" -max_total_time="$left" $runs \
      -dict="$dict" -timeout=30 -rss_limit_mb=2560 -print_final_stats=1 \
      -artifact_prefix="$artifacts/" "$corpus" $seeds >driver.log 2>&1) || true
    execs=$(cat "$logs"/round-*/fuzz-*.log 2>/dev/null | awk '/^stat::number_of_executed_units:/ { n += $2 } END { print n + 0 }')
  done
  secs=$(($(date +%s) - start))
  # the leak pass, through the ASan build's harness when this one has none
  check="$exe"
  [ -n "${H3_FUZZ_CHECK_BUILD:-}" ] && check="$H3_FUZZ_CHECK_BUILD/tests/fuzz/fuzz_$name"
  "$here/run-fuzz.sh" leaks "$check" "$name" "$root" || true
  line=$(printf '%-22s %7s %5s %12s %8s %8s %6s %9s %5s %8s' "$name" "$secs" "$jobs" "$execs" \
    "$((execs / (secs > 0 ? secs : 1)))" "$(count "$artifacts" crash)" \
    "$(count "$artifacts" leak)" "$(count "$artifacts" timeout)" "$(count "$artifacts" oom)" \
    "$(find "$corpus" -type f | wc -l | tr -d ' ')")
  echo "$line" >>"$report"
  echo "$line"
done
echo
cat "$report"
echo "(report: $report; findings under $root/artifacts/)"
