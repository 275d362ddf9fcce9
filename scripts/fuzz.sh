#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz, built with clang into build-fuzz
# (the main build uses g++). ccache makes rebuilds cheap.
#
#   scripts/fuzz.sh build                 configure + build every target
#   scripts/fuzz.sh smoke <target> [sec]  <target>'s corpus, then a bounded run (default 5 s)
#   scripts/fuzz.sh run [sec]             every target for FUZZ_SECONDS (default 60) each (make fuzz)
#
# Targets: rest_request tf_config hostfile ps_frame. Seeds live in
# tests/fuzz/corpus/<target>/ (checked in); new inputs a run finds go to
# build-fuzz/corpus/<target>/, crashes to build-fuzz/crashes/<target>/.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${FUZZ_BUILD:-$ROOT/build-fuzz}"
TARGETS=(rest_request tf_config hostfile ps_frame)
JOBS="${JOBS:-$(nproc)}"

build() {
  if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
    CC=clang CXX=clang++ cmake -S "$ROOT/tests/fuzz" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  fi
  local log="$BUILD/build.log"
  if ! cmake --build "$BUILD" -j "$JOBS" >"$log" 2>&1; then
    grep -E "error|undefined" "$log" | head -n 40 >&2 || tail -n 40 "$log" >&2
    echo "fuzz.sh: the clang build of the fuzz targets failed (whole log: $log)" >&2
    return 1
  fi
}

# run_target <target> <seconds> [extra libFuzzer flags...]
run_target() {
  local t="$1" secs="$2"
  shift 2
  local seeds="$ROOT/tests/fuzz/corpus/$t" found="$BUILD/corpus/$t" crashes="$BUILD/crashes/$t"
  mkdir -p "$found" "$crashes"
  # Leaks count as failures (ASan's LeakSanitizer runs at exit of each input batch).
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    "$BUILD/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -artifact_prefix="$crashes/" -print_final_stats=1 "$@" "$found" "$seeds"
}

case "${1:-}" in
  build)
    build
    ;;
  smoke)
    t="${2:?target}"
    build
    # The corpus alone first (every checked-in seed, incl. past crashes), then a short random run.
    mkdir -p "$BUILD/crashes/$t"
    ASAN_OPTIONS="detect_leaks=1" "$BUILD/fuzz_$t" -runs=0 -artifact_prefix="$BUILD/crashes/$t/" "$ROOT/tests/fuzz/corpus/$t"
    run_target "$t" "${3:-5}" 2>&1 | tail -n 15
    ;;
  run)
    build
    secs="${2:-${FUZZ_SECONDS:-60}}"
    for t in "${TARGETS[@]}"; do
      echo "== fuzz_$t for ${secs}s"
      run_target "$t" "$secs" 2>&1 | grep -E "stat::|ERROR|SUMMARY|Done|crash-|leak-|timeout-" || true
      if ls "$BUILD/crashes/$t"/* >/dev/null 2>&1; then
        echo "fuzz_$t: findings in $BUILD/crashes/$t" >&2
        exit 1
      fi
    done
    ;;
  *)
    sed -n '2,12p' "$0"
    exit 2
    ;;
esac
