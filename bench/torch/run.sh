#!/usr/bin/env bash
# bench/torch: muster.torch and DDP on the "muster" backend vs PyTorch's DDP on gloo, side
# by side in the same 2-rank job, one thread per rank (torch_bench.py).
#   usage: bash bench/torch/run.sh <build-dir> [p2p]   (make bench-torch)
# Writes bench/out/torch.json ({"models": {...}, "allreduce": {...}, "overhead": {...}}),
# bench/out/torch_p2p.json (send/recv 4 KB, 1 MB, 64 MB: {"p2p": {...}}) and bench/out/torch.md
# (the RESULTS.md section). With `p2p`, only the point-to-point part runs (torch.json is kept).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:-build}"
PART="${2:-all}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
OUT="$ROOT/bench/out"
mkdir -p "$OUT"

if ! ls "$BUILD"/python/muster/_muster_runtime*.so >/dev/null 2>&1; then
  echo "bench/torch: the runtime extension is not built in $BUILD; run 'make build'" >&2
  exit 1
fi
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "bench/torch: /usr/bin/python3 cannot import torch (Debian python3-torch); run 'make setup'" >&2
  exit 1
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONPATH="$ROOT/sdk/python${PYTHONPATH:+:$PYTHONPATH}" MUSTER_BINARY_DIR="$BUILD"
export OMP_NUM_THREADS=1
# The same transports the mpi tests use: shared memory (vader) and TCP.
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -mca btl self,vader,tcp
        -mca btl_vader_single_copy_mechanism none
        -x PYTHONPATH -x MUSTER_BINARY_DIR -x OMP_NUM_THREADS -np 2)

# The machine is shared: record its load next to the figures.
LOAD_BEFORE=$(cut -d' ' -f1 /proc/loadavg)
echo "bench/torch: send/recv 4 KB, 1 MB, 64 MB between the two ranks, muster backend vs gloo"
BENCH_TORCH_ONLY=p2p "${MPIRUN[@]}" -x BENCH_TORCH_ONLY /usr/bin/python3 "$ROOT/bench/torch/torch_bench.py" \
  "$OUT/torch_p2p.json"
if [ "$PART" = p2p ]; then
  LOAD_AFTER=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/python3 "$ROOT/bench/torch/report.py" "$OUT" "" "" "$LOAD_BEFORE" "$LOAD_AFTER"
  cat "$OUT/torch.md"
  exit 0
fi
echo "bench/torch: muster.torch vs DDP/gloo (CNN, 25M MLP) and allreduce 1/16/64 MB, 2 ranks x 1 thread"
"${MPIRUN[@]}" /usr/bin/python3 "$ROOT/bench/torch/torch_bench.py" "$OUT/torch.json"
# The models again with glibc's malloc asking for transparent huge pages, for
# every stack of the job alike (report.py: "With huge pages").
echo "bench/torch: the models again with GLIBC_TUNABLES=glibc.malloc.hugetlb=1"
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 BENCH_TORCH_ONLY=models \
  "${MPIRUN[@]}" -x GLIBC_TUNABLES -x BENCH_TORCH_ONLY /usr/bin/python3 "$ROOT/bench/torch/torch_bench.py" \
  "$OUT/torch_thp.json"
LOAD_AFTER=$(cut -d' ' -f1 /proc/loadavg)

/usr/bin/python3 "$ROOT/bench/torch/report.py" "$OUT" "$LOAD_BEFORE" "$LOAD_AFTER" "$LOAD_BEFORE" "$LOAD_AFTER"
cat "$OUT/torch.md"
