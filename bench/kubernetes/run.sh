#!/usr/bin/env bash
# bench/kubernetes: musterd --backend kubernetes on the real testbed
# (tests/kubernetes_testbed.py; root, the binaries from scripts/kubernetes.sh):
# launch + await of 8, 32 and 64 workers against the same pods created
# straight through the API server (the floor, same run), and an elastic
# cluster's replacement pod after a pod's deletion (kubernetes_bench.py).
#   usage: bash bench/kubernetes/run.sh <build-dir>       (make bench-kubernetes)
# KUBERNETES_BENCH_ARGS adds kubernetes_bench.py options (e.g. "--sizes 8 --runs 1").
# Writes bench/out/kubernetes.json and bench/out/kubernetes.md (the RESULTS.md section).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
OUT="$ROOT/bench/out"
mkdir -p "$OUT"
for f in "$BUILD/bin/musterd" "$BUILD/bin/muster-agent"; do
  [ -x "$f" ] || { echo "bench/kubernetes: $f is not built; run 'make build'" >&2; exit 1; }
done
export PYTHONPATH="$ROOT/sdk/python" MUSTER_BINARY_DIR="$BUILD" MUSTER_SOURCE_DIR="$ROOT"
echo "bench/kubernetes: launch + await through musterd vs direct pod creation; elastic replacement after a pod's deletion"
# shellcheck disable=SC2086
/usr/bin/python3 "$ROOT/bench/kubernetes/kubernetes_bench.py" "$OUT/kubernetes.json" ${KUBERNETES_BENCH_ARGS:-}
/usr/bin/python3 "$ROOT/bench/kubernetes/report.py" "$OUT"
cat "$OUT/kubernetes.md"
