#!/usr/bin/env bash
# bench/launch/run.sh <build-dir>: the launch benchmark.
# Starts musterd (local backend) in a temp state dir with the repo as its
# project dir, runs launch_bench.py through the Python SDK, and always stops
# the daemon and its workers. Writes bench/out/launch.json and launch.md.
# LAUNCH_BENCH_ARGS adds launch_bench.py options to the first pass (e.g.
# "--runs 1 --sizes 64,256" for a quick look).
set -euo pipefail

BUILD=$(cd "${1:?usage: bench/launch/run.sh <build-dir>}" && pwd)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=$(mktemp -d /tmp/muster-bench-launch.XXXXXX)
DAEMON_PID=""
export PYTHONPATH="$REPO/sdk/python${PYTHONPATH:+:$PYTHONPATH}"
export MUSTER_STATE_DIR="$STATE"
unset MUSTER_URL MUSTER_TOKEN

cleanup() {
  if [[ -n "$DAEMON_PID" ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    /usr/bin/python3 -c 'import muster; muster.stop_workers()' >/dev/null 2>&1 || true
    kill -TERM -- "-$DAEMON_PID" 2>/dev/null || kill -TERM "$DAEMON_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$DAEMON_PID" 2>/dev/null || true
  fi
  rm -rf "$STATE"
}
trap cleanup EXIT INT TERM

# start_daemon [musterd options...]: a musterd in $STATE, waited for until it answers.
start_daemon() {
  rm -f "$STATE/musterd.json"
  setsid "$BUILD/bin/musterd" --listen 127.0.0.1:0 --project-dir "$REPO" --state-dir "$STATE" \
    --backend local --max-workers 1024 "$@" >"$STATE/musterd.log" 2>&1 &
  DAEMON_PID=$!
  for _ in $(seq 300); do
    grep -q "musterd listening on" "$STATE/musterd.log" 2>/dev/null && [[ -s "$STATE/musterd.json" ]] && break
    kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$STATE/musterd.log" >&2; echo "musterd exited" >&2; exit 1; }
    sleep 0.1
  done
  [[ -s "$STATE/musterd.json" ]] || { cat "$STATE/musterd.log" >&2; echo "musterd not ready" >&2; exit 1; }
}
stop_daemon() {
  kill -TERM -- "-$DAEMON_PID" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.1; done
  DAEMON_PID=""
}

# 1. Launch cost: a worker counts as `running` once its agent registered
#    (--await-settle 0), as cdsw's await_workers(wait_for_completion=False).
start_daemon --await-settle 0
/usr/bin/python3 "$REPO/bench/launch/launch_bench.py" --out "$REPO/bench/out" ${LAUNCH_BENCH_ARGS:-}
stop_daemon
# 2. The same 64-worker launch as a user sees it with musterd's default
#    --await-settle (each worker's script must have run that long).
start_daemon
/usr/bin/python3 "$REPO/bench/launch/launch_bench.py" --out "$REPO/bench/out" --default-settle
