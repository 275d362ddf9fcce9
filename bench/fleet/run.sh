#!/usr/bin/env bash
# bench/fleet: one musterd (fleet-musterd: musterd's own main with a backend
# that starts nothing) against 1,000 / 10,000 / 30,000 simulated workers
# whose agents speak the real agent protocol (fleet_agents); run.py says
# what is measured.
#   usage: bash bench/fleet/run.sh <build-dir>       (make bench-fleet)
# FLEET_BENCH_ARGS adds run.py options (e.g. "--sizes 1000 --window 10").
# Writes bench/out/fleet.json and bench/out/fleet.md (the RESULTS.md section).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
for f in "$BUILD/bin/fleet-musterd" "$BUILD/bin/fleet_agents"; do
  [ -x "$f" ] || { echo "bench/fleet: $f is not built; run 'make build'" >&2; exit 1; }
done
echo "bench/fleet: one musterd, simulated fleets of 1,000 / 10,000 / 30,000 workers"
# shellcheck disable=SC2086
/usr/bin/python3 "$ROOT/bench/fleet/run.py" --build "$BUILD" --out "$ROOT/bench/out/fleet.json" ${FLEET_BENCH_ARGS:-}
cat "$ROOT/bench/out/fleet.md"
