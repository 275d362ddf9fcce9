#!/usr/bin/env bash
# bench/elastic: recovery from a SIGKILLed rank, muster's elastic cluster vs
# torchrun --max-restarts, and the cost of commit() (elastic_bench.py).
#   usage: bash bench/elastic/run.sh <build-dir>       (make bench-elastic)
# Writes bench/out/elastic.json and bench/out/elastic.md (the RESULTS.md section).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
OUT="$ROOT/bench/out"
mkdir -p "$OUT"
for f in "$BUILD/bin/musterd" "$BUILD/bin/muster-agent"; do
  [ -x "$f" ] || { echo "bench/elastic: $f is not built; run 'make build'" >&2; exit 1; }
done
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "bench/elastic: /usr/bin/python3 cannot import torch (Debian python3-torch); run 'make setup'" >&2
  exit 1
fi
export PYTHONPATH="$ROOT/sdk/python${PYTHONPATH:+:$PYTHONPATH}" MUSTER_BINARY_DIR="$BUILD" OMP_NUM_THREADS=1
echo "bench/elastic: recovery (muster elastic vs torchrun --max-restarts) and commit() cost, 25M MLP, 2 ranks"
/usr/bin/python3 "$ROOT/bench/elastic/elastic_bench.py" "$OUT/elastic.json"
/usr/bin/python3 "$ROOT/bench/elastic/report.py" "$OUT"
cat "$OUT/elastic.md"
