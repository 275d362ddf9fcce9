#!/bin/sh
# comm_store_launch.sh N PROGRAM ARGS...: runs N copies of PROGRAM on this
# machine without mpirun, each with ARGS --store=DIR --rank=R --size=N, DIR
# a fresh directory for their file store (removed at the end). Exits 0 only
# when every copy did; names each one that did not. On SIGTERM/SIGINT (a
# ctest timeout) the copies are killed too.
set -u
n=$1
shift
dir=$(mktemp -d /tmp/muster-store-XXXXXX) || exit 2
pids=""
cleanup() {
  for p in $pids; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap 'cleanup; exit 3' TERM INT
r=0
while [ "$r" -lt "$n" ]; do
  "$@" --store="$dir" --rank="$r" --size="$n" &
  pids="$pids $!"
  r=$((r + 1))
done
rc=0
r=0
for p in $pids; do
  wait "$p"
  code=$?
  if [ "$code" -ne 0 ]; then
    echo "comm_store_launch: rank $r (pid $p) exited with status $code" >&2
    rc=1
  fi
  r=$((r + 1))
done
rm -rf "$dir"
exit $rc
