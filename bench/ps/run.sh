#!/usr/bin/env bash
# bench/ps: sync PS step of a 25.6 M-parameter float32 model over loopback,
# 2 workers with 1 then 2 PS tasks, against iperf3 measured in the same run.
# Usage: bench/ps/run.sh <build-dir>   (writes bench/out/ps.json and ps.md)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:-build}" && pwd)"
cmake --build "$build" --target muster_ps_server ps_bench_worker -j "${JOBS:-2}" >/dev/null
exec /usr/bin/python3 "$here/run.py" "$build" "$here/../out"
