#!/usr/bin/env bash
# Packs what bench/multihost, the NCCL test and bench/allreduce's one-host
# optimizer-step and latency benchmarks need to run on another x86-64
# Linux machine that has none of our Debian packages (a lent GPU machine):
# our built programs, the shared libraries they and Open MPI's plugins load
# (not glibc or libstdc++), Open MPI and PMIx with their plugins and help
# files, iperf3, ip, and the Fashion-MNIST files. Paths inside the archive are
# absolute paths of this machine; scripts/device_run.sh unpacks it without
# overwriting anything the other machine has.
#   usage: bash scripts/device_bundle.sh BUILD OUT.tar.gz
set -euo pipefail
build="$(cd "$1" && pwd)"
out="$2"
list="$(mktemp)"
trap 'rm -f "$list"' EXIT
programs=(multihost_allreduce_bench muster-ps ps_bench_worker fashion_mnist comm_nccl_test allreduce_fused_bench
          allreduce_latency_bench)
bins=()
for p in "${programs[@]}"; do bins+=("$build/bin/$p"); done
system_bins=("$(readlink -f /usr/bin/mpirun)" /usr/bin/orted /usr/bin/iperf3 "$(readlink -f /usr/sbin/ip)")
plugin_dirs=(/usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2)
plugins=$(find "${plugin_dirs[@]}" -name '*.so*' -type f)
{
  for f in "${bins[@]}" "${system_bins[@]}" $plugins; do
    ldd "$f" | awk '/=>/ && $3 ~ /^\// {print $3}'
  done | grep -Ev '/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|libnccl|libcuda|ld-linux)[.-]' |
    sort -u | while read -r lib; do echo "$lib"; readlink -f "$lib"; done
  readlink -f /usr/local/cuda/lib64/libcudart.so.13
  echo /usr/local/cuda/lib64/libcudart.so.13
  printf '%s\n' "${system_bins[@]}" /usr/bin/mpirun /usr/share/openmpi /usr/share/pmix /etc/openmpi "${plugin_dirs[@]}" \
    /usr/share/datasets/fashion-mnist
} | sort -u | grep -v '^$' | while read -r f; do if [ -e "$f" ]; then echo "$f"; fi; done >"$list"
# Our programs go under /opt/muster/build/bin, where run.py looks for BUILD/bin.
stage="$(mktemp -d)"
trap 'rm -f "$list"; rm -rf "$stage"' EXIT
mkdir -p "$stage/opt/muster/build/bin"
cp "${bins[@]}" "$stage/opt/muster/build/bin/"
strip --strip-debug "$stage"/opt/muster/build/bin/*
tar -czf "$out" --exclude='*/include/*' --exclude='*.a' -P -T "$list" -C "$stage" opt
du -h "$out"
