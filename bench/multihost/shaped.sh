#!/usr/bin/env bash
# bench/multihost, shaped: allreduce on 2 and 4 network-namespace hosts whose
# links are shaped to 1 and 5 Gbit/s, with 0 and 200 us added round trip,
# against MPI_Allreduce, gloo and iperf3 on the same links; root only.
#   usage: bash bench/multihost/shaped.sh <build-dir>   (writes bench/out/shaped.{json,md})
#   SHAPED_QUICK=1: 8 B, 16 and 64 MB, 3 reps (shaped.py lists the other knobs)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:-build}" && pwd)"
if [ "$(id -u)" -ne 0 ]; then
  echo "bench/multihost shaped: skipped, needs root (network namespaces, tc)" >&2
  exit 0
fi
for tool in tc iptables iperf3 mpirun; do
  if ! command -v "$tool" >/dev/null; then
    echo "bench/multihost shaped: skipped, $tool is not installed" >&2
    exit 0
  fi
done
cmake --build "$build" --target multihost_allreduce_bench delay_line hop_ping -j "${JOBS:-2}" >/dev/null
exec /usr/bin/python3 "$here/shaped.py" "$build" "$here/../out"
