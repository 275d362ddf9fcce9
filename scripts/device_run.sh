#!/usr/bin/env bash
# On a lent GPU machine (root): unpack scripts/device_bundle.sh's archive
# without overwriting what is there, then run the NCCL test on the GPU(s) and
# bench/multihost with the machine's own cores. Writes to $OUT.
#   usage: bash scripts/device_run.sh BUNDLE.tar.gz [COMMAND...]
# COMMAND (default: bench/multihost/run.py) runs instead of the benchmark.
set -uo pipefail
bundle="$1"
shift
out="${OUT:-/tmp/out}"
mkdir -p "$out"
export PATH="$PATH:/usr/sbin:/sbin"
echo "== machine"; nproc; uname -r; head -2 /etc/os-release; nvidia-smi -L || true
for t in ip nsenter mpirun iperf3; do printf '%s: %s\n' "$t" "$(command -v $t || echo missing)"; done
tar -C / -xzf "$(readlink -f "$bundle")" -P --skip-old-files --keep-directory-symlink
ldconfig
nccl_dir=$(dirname "$(find / -xdev -name 'libnccl.so.2' 2>/dev/null | head -1)")
echo "NCCL from $nccl_dir"
export LD_LIBRARY_PATH="$nccl_dir:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# An image may pin Open MPI to one node (OMPI_MCA_plm=isolated): the benchmark
# launches ranks into its hosts through plm_rsh_agent.
unset OMPI_MCA_plm
mpirun --version | head -1
b=/opt/muster/build/bin
echo "== NCCL on this machine's GPU(s)"
for np in ${NCCL_RANKS-1 2}; do
  echo "-- comm_nccl_test under mpirun -np $np"
  OMPI_MCA_plm=isolated timeout 180 mpirun --allow-run-as-root --oversubscribe -np $np -x LD_LIBRARY_PATH $b/comm_nccl_test 2>&1 | tail -25
done

echo "== bench/multihost"
export MUSTER_BENCH_PYTHON="$(command -v python3)"
if [ $# -eq 0 ]; then
  export MULTIHOST_NAME="${MULTIHOST_NAME:-multihost_16core}"
  export MULTIHOST_LABEL="${MULTIHOST_LABEL:-on a lent GPU machine ($(nproc) cores, one namespace per host)}"
  set -- python3 bench/multihost/run.py /opt/muster/build "$out"
fi
PYTHONUNBUFFERED=1 timeout "${MULTIHOST_TIMEOUT:-420}" "$@" 2>&1 | tail -80
