#!/bin/sh
# The `fuzz` suite's runner (tests/fuzz/meson.build; run-long.sh uses it too).
#
#   run-fuzz.sh fuzz   EXE NAME WORK DICT SEED_DIR...   bounded run, then the leak pass
#   run-fuzz.sh leaks  EXE NAME WORK                    the leak pass over WORK/corpus/NAME
#   run-fuzz.sh replay EXE NAME WORK REGRESSION_DIR     each saved input once
#
# fuzz: H3_FUZZ_TIME seconds (default 20) from the seeds; the corpus it grows
# is WORK/corpus/NAME (kept between runs); a crash, timeout or oversized
# allocation lands in WORK/artifacts/NAME/ and fails the test. Extra libFuzzer
# flags: H3_FUZZ_FLAGS (e.g. "-jobs=4 -workers=4").
#
# Leaks: LeakSanitizer cannot run while fuzzing, because GLib and json-glib
# are built without frame pointers: their allocation stacks stop at
# g_malloc, so the json-glib leak in tests/lsan.supp cannot be told from ours
# without slow unwinding, 25x slower. The fuzzing runs with -detect_leaks=0;
# then every input of the corpus is replayed once in one process with full
# stacks, and LSan's report at exit fails the test (the inputs are then run
# one by one to name the leaking ones: WORK/artifacts/NAME/leak-*).
#
# replay: exit 77 (skipped) when REGRESSION_DIR holds no input.
set -eu
mode=$1 exe=$2 name=$3 work=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
# The harnesses write every input to files: on a tmpfs (/dev/shm) that costs
# a tenth of what it costs on ext4 (inode allocation was 10-15 % of the
# slower harnesses' time). H3_FUZZ_TMPDIR chooses another place.
tmp=${H3_FUZZ_TMPDIR:-}
if [ -z "$tmp" ]; then
  tmp="$work/tmp"
  [ -d /dev/shm ] && [ -w /dev/shm ] && tmp=/dev/shm/h3-fuzz-$(id -u)
fi
mkdir -p "$tmp"
export TMPDIR="$tmp"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
fast="detect_leaks=0:handle_abort=1"
full="detect_leaks=1:fast_unwind_on_malloc=0:handle_abort=1"
supp="suppressions=$here/../lsan.supp:print_suppressions=0"
corpus="$work/corpus/$name"
artifacts="$work/artifacts/$name"

# The leak pass over every file of the given directories.
leaks() {
  dirs="$*"
  set --
  for d in $dirs; do
    for f in "$d"/*; do [ -f "$f" ] && set -- "$@" "$f"; done
  done
  [ $# -gt 0 ] || return 0
  if ! grep -q -a __lsan_do_leak_check "$exe"; then
    echo "leak pass: skipped, $exe has no LeakSanitizer (-Dfuzz_sanitize without address)"
    return 0
  fi
  echo "leak pass: $# input(s) of $name"
  if ASAN_OPTIONS="$full" LSAN_OPTIONS="$supp" "$exe" -runs=1 -error_exitcode=1 -timeout_exitcode=1 "$@" >"$work/leaks-$name.log" 2>&1; then
    echo "leak pass: no leak"
    return 0
  fi
  grep -A40 "ERROR: LeakSanitizer" "$work/leaks-$name.log" | head -80 || tail -40 "$work/leaks-$name.log"
  for f in "$@"; do
    if ! ASAN_OPTIONS="$full" LSAN_OPTIONS="$supp" "$exe" -runs=1 -error_exitcode=1 "$f" >/dev/null 2>&1; then
      cp "$f" "$artifacts/leak-$(basename "$f")"
      echo "leaks: $artifacts/leak-$(basename "$f")"
    fi
  done
  return 1
}

case $mode in
replay)
  dir=$1
  set --
  for f in "$dir"/*; do
    [ -f "$f" ] || continue
    case $f in *.txt|*.md) continue ;; esac
    set -- "$@" "$f"
  done
  if [ $# -eq 0 ]; then
    echo "no saved inputs in $dir"
    exit 77
  fi
  echo "replaying $# input(s) of $name"
  ASAN_OPTIONS="$full" LSAN_OPTIONS="$supp" exec "$exe" -runs=1 -timeout=60 -error_exitcode=1 -timeout_exitcode=1 "$@"
  ;;
fuzz)
  dict=$1
  shift
  mkdir -p "$corpus" "$artifacts"
  seeds=""
  for d in "$@"; do [ -d "$d" ] && seeds="$seeds $d"; done
  # -error_exitcode=1: libFuzzer's default, 77, reads as "skipped" to meson.
  # shellcheck disable=SC2086
  ASAN_OPTIONS="${ASAN_OPTIONS:-$fast}" "$exe" -dict="$dict" -max_total_time="${H3_FUZZ_TIME:-20}" \
    -timeout=30 -rss_limit_mb=2560 -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" ${H3_FUZZ_FLAGS:-} "$corpus" $seeds
  # shellcheck disable=SC2086
  leaks "$corpus" $seeds
  ;;
leaks)
  mkdir -p "$artifacts"
  leaks "$corpus"
  ;;
*)
  echo "usage: run-fuzz.sh fuzz|leaks|replay ..." >&2
  exit 2
  ;;
esac
