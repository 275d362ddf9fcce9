#!/usr/bin/env bash
# bench/api/run.sh <build-dir>: the REST API benchmark.
# Starts musterd (local backend) in a temp state dir with bench/api as its
# project dir, runs api_bench.py (wrk at 8..1024 connections, a slowloris),
# and always stops the daemon and its workers. Writes bench/out/api.json and
# api.md.
set -euo pipefail

BUILD=$(cd "${1:?usage: bench/api/run.sh <build-dir>}" && pwd)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=$(mktemp -d /tmp/muster-bench-api.XXXXXX)
DAEMON_PID=""
command -v wrk >/dev/null || { echo "bench/api needs wrk (apt-get install wrk)" >&2; exit 1; }
# 1024 wrk connections + 1024 slowloris sockets + the daemon's own.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

cleanup() {
  if [[ -n "$DAEMON_PID" ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    # Workers run in their own process groups: stop them through the API.
    curl -s -m 120 -o /dev/null -X POST -H "Authorization: Bearer $(cat "$STATE/token" 2>/dev/null)" \
      -d '{"ids":[]}' "$(cat "$STATE/url" 2>/dev/null)/api/v1/workers/stop" || true
    kill -TERM -- "-$DAEMON_PID" 2>/dev/null || kill -TERM "$DAEMON_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$DAEMON_PID" 2>/dev/null || true
  fi
  rm -rf "$STATE"
}
trap cleanup EXIT INT TERM

setsid "$BUILD/bin/musterd" --listen 127.0.0.1:0 --project-dir "$REPO/bench/api" --state-dir "$STATE" \
  --backend local --max-workers 256 --heartbeat-interval 2 >"$STATE/musterd.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 300); do
  [[ -s "$STATE/musterd.json" ]] && break
  kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$STATE/musterd.log" >&2; echo "musterd exited" >&2; exit 1; }
  sleep 0.1
done
[[ -s "$STATE/musterd.json" ]] || { cat "$STATE/musterd.log" >&2; echo "musterd not ready" >&2; exit 1; }
URL=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$STATE/musterd.json")
echo "$URL" >"$STATE/url"

/usr/bin/python3 "$REPO/bench/api/api_bench.py" --url "$URL" --token "$(cat "$STATE/token")" \
  --pid "$DAEMON_PID" --out "$REPO/bench/out" "${@:2}"
