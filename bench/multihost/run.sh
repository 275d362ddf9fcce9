#!/usr/bin/env bash
# bench/multihost: muster across 2 and 4 hosts (network namespaces joined by
# veth links) vs Open MPI, gloo and iperf3 on the same links; root only.
#   usage: bash bench/multihost/run.sh <build-dir>   (writes bench/out/multihost.{json,md})
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:-build}" && pwd)"
if [ "$(id -u)" -ne 0 ]; then
  echo "bench/multihost: skipped, needs root (network namespaces)" >&2
  exit 0
fi
cmake --build "$build" --target multihost_allreduce_bench muster_ps_server ps_bench_worker fashion_mnist -j "${JOBS:-2}" >/dev/null
exec /usr/bin/python3 "$here/run.py" "$build" "$here/../out"
