#!/usr/bin/env bash
# On a lent GPU machine (root): unpack scripts/device_bundle.sh's archive
# without overwriting what is there, then run the NCCL test on the GPU(s),
# bench/multihost with the machine's own cores, and bench/allreduce's
# optimizer step (FUSED_LAUNCHES launches, 0 for none) and latency table on
# 2 ranks of one host. Writes to $OUT.
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

# bench/allreduce's one-host figures on this machine's cores, as run.sh takes
# them there (the same mpirun transports), each file named for the machine.
FUSED_LAUNCHES="${FUSED_LAUNCHES-3}"
if [ "$FUSED_LAUNCHES" -gt 0 ] && [ -x $b/allreduce_fused_bench ]; then
  echo "$(cut -d' ' -f1 /proc/loadavg) $(nproc)" >"$out/allreduce_device_load.txt"  # load, cores
  one_host=(mpirun --allow-run-as-root --oversubscribe -mca btl self,vader,tcp -mca btl_vader_single_copy_mechanism none)
  for i in $(seq "$FUSED_LAUNCHES"); do
    echo "== DistributedOptimizer step, ResNet-50 gradients, 2 ranks, launch $i of $FUSED_LAUNCHES"
    OMPI_MCA_plm=isolated timeout 120 "${one_host[@]}" -np 2 $b/allreduce_fused_bench "$out/allreduce_fused_device_launch$i.json" 2>&1 | tail -12
  done
  echo "== latency, 8 B .. 256 KB, 2 ranks"
  OMPI_MCA_plm=isolated timeout 120 "${one_host[@]}" -np 2 $b/allreduce_latency_bench "$out/allreduce_latency_device_np2.json" 2>&1 | tail -30
fi
