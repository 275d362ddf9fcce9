#!/usr/bin/env bash
# bench/allreduce: allreduce bandwidth (muster ring vs MPI_Allreduce, memcpy
# reference) and, when built, the DistributedOptimizer fused-gradient bench.
#   usage: bash bench/allreduce/run.sh <build-dir>
# Writes bench/out/allreduce.json ({"sizes": [...], "memcpy_gbs": x, "fused": {...}})
# and bench/out/allreduce.md (the RESULTS.md section).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
OUT="$ROOT/bench/out"
mkdir -p "$OUT"

BW="$BUILD/bin/allreduce_bandwidth_bench"
FUSED="$BUILD/bin/allreduce_fused_bench"
if [ ! -x "$BW" ]; then
  echo "bench/allreduce: $BW not built; run 'make build' (or cmake --build $BUILD --target allreduce_bandwidth_bench)" >&2
  exit 1
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The same transports the mpi tests use: shared memory (vader) and TCP.
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -mca btl self,vader,tcp
        -mca btl_vader_single_copy_mechanism none -np 2)

# The machine is shared: record its load next to the figures.
cut -d' ' -f1 /proc/loadavg > "$OUT/allreduce_load.txt"
echo "bench/allreduce: ring vs MPI_Allreduce, 4 KB .. 256 MB, 2 ranks"
"${MPIRUN[@]}" "$BW" "$OUT/allreduce_bandwidth.json"

rm -f "$OUT/allreduce_fused.json"
if [ -x "$FUSED" ]; then
  echo "bench/allreduce: DistributedOptimizer on the ResNet-50 gradient set"
  "${MPIRUN[@]}" "$FUSED" "$OUT/allreduce_fused.json"
else
  echo "bench/allreduce: $FUSED not built; the 'fused' figures are left out" >&2
fi

# What comparing OpDescriptors before each op costs (runtime/comm/README.md, "Checked ops").
CHECK="$BUILD/bin/allreduce_check_cost_bench"
rm -f "$OUT/allreduce_check_cost.json"
if [ -x "$CHECK" ]; then
  echo "bench/allreduce: the op-descriptor check, 4 KB / 64 KB / 64 MB"
  "${MPIRUN[@]}" "$CHECK" "$OUT/allreduce_check_cost.json"
fi

cut -d' ' -f1 /proc/loadavg >> "$OUT/allreduce_load.txt"
/usr/bin/python3 "$ROOT/bench/allreduce/report.py" "$OUT"
rm -f "$OUT/allreduce_load.txt"
cat "$OUT/allreduce.md"
