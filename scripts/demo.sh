#!/usr/bin/env bash
# make demo: start musterd on the local backend and run the notebook examples
# against it, as a data scientist would from a notebook session.
#
#   scripts/demo.sh <build-dir>
#
# Structure (extend it by adding run_notebook lines at the bottom):
#   start_daemon         musterd in a temp state dir, --project-dir = the repo,
#                        a free port, started without PYTHONPATH (its workers
#                        find muster by themselves); exports MUSTER_STATE_DIR
#                        for the SDK
#   run_notebook FILE    runs examples/notebook/FILE with the Python SDK
#   cleanup (trap)       stops every worker, then the daemon, then removes
#                        the state dir: always, also on error or Ctrl-C
set -euo pipefail

BUILD=$(cd "${1:?usage: scripts/demo.sh <build-dir>}" && pwd)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE_DIR=$(mktemp -d /tmp/muster-demo.XXXXXX)
DAEMON_PID=""
PYTHON=/usr/bin/python3

# The notebooks' own environment (what musterd prints for a notebook).
export PYTHONPATH="$REPO/sdk/python${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$BUILD/bin:$PATH"
export MUSTER_STATE_DIR="$STATE_DIR"
export MUSTER_PROJECT_DIR="$REPO"
export MUSTER_BINARY_DIR="$BUILD"
unset MUSTER_URL MUSTER_TOKEN

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

start_daemon() {
  say "starting musterd (local backend, state in $STATE_DIR)"
  env -u PYTHONPATH setsid "$BUILD/bin/musterd" --listen 127.0.0.1:0 --project-dir "$REPO" \
    --state-dir "$STATE_DIR" --backend local "$@" >"$STATE_DIR/musterd.log" 2>&1 &
  DAEMON_PID=$!
  local i
  for i in $(seq 300); do
    if grep -q "musterd listening on" "$STATE_DIR/musterd.log" 2>/dev/null && [[ -s "$STATE_DIR/musterd.json" ]]; then
      grep -m1 "musterd listening on" "$STATE_DIR/musterd.log" | sed 's/^.*musterd listening/musterd listening/'
      return 0
    fi
    if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
      cat "$STATE_DIR/musterd.log" >&2
      echo "demo: musterd exited during start-up" >&2
      return 1
    fi
    sleep 0.1
  done
  cat "$STATE_DIR/musterd.log" >&2
  echo "demo: musterd did not become ready in 30 s" >&2
  return 1
}

stop_daemon() {
  [[ -n "$DAEMON_PID" ]] || return 0
  if kill -0 "$DAEMON_PID" 2>/dev/null; then
    # Workers outlive the daemon by design (a restart adopts them): stop them first.
    "$PYTHON" -c 'import muster; muster.stop_workers()' >/dev/null 2>&1 || true
    kill -TERM -- "-$DAEMON_PID" 2>/dev/null || kill -TERM "$DAEMON_PID" 2>/dev/null || true
    local i
    for i in $(seq 50); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$DAEMON_PID" 2>/dev/null || true
  fi
  wait "$DAEMON_PID" 2>/dev/null || true
  DAEMON_PID=""
}

cleanup() {
  local rc=$?
  stop_daemon
  if [[ $rc -ne 0 && -f "$STATE_DIR/musterd.log" ]]; then
    echo "demo failed (exit $rc); last lines of musterd's log:" >&2
    tail -n 20 "$STATE_DIR/musterd.log" >&2 || true
  fi
  rm -rf "$STATE_DIR"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

run_notebook() {
  local name=$1
  shift
  say "notebook: examples/notebook/$name"
  (cd "$REPO" && "$PYTHON" "examples/notebook/$name" "$@")
}

# run_ipynb FILE.ipynb [--set NAME=VALUE ...]: the notebook in a real Jupyter
# kernel (nbclient + ipykernel), every cell in order, failing on any cell error.
run_ipynb() {
  local name=$1
  shift
  say "notebook (Jupyter kernel): examples/notebook/$name"
  (cd "$REPO" && "$PYTHON" examples/notebook/run_notebook.py "examples/notebook/$name" --cwd "$REPO" "$@")
}

start_daemon
run_notebook workers_basics.py
# Fashion-MNIST, MLP, 3 epochs, in parameter-server mode (1 PS + 2 workers; prints
# the ClusterSpec) and in allreduce mode (2 ranks; prints the horovodrun line):
# each prints its test accuracy and fails below 85%.
run_notebook ps_training.py --model mlp --epochs 3
run_notebook allreduce_training.py --model mlp --epochs 3
# One PyTorch script (examples/pytorch/train.py, LeNet-style CNN, 6000 images, 2
# epochs) as one worker, under horovodrun (muster.torch) and with 1 PS + 2
# workers (muster.torch.ps): prints the three test accuracies.
run_notebook pytorch_training.py
# The same steps as .ipynb notebooks, run cell by cell in a python3 kernel (the
# training ones shortened: 1 epoch; the .py runs above show the full accuracy).
run_ipynb workers_basics.ipynb --set WORK_SECONDS=60
run_ipynb ps_training.ipynb --set EPOCHS=1 --set MIN_ACCURACY=0.7
run_ipynb allreduce_training.ipynb --set EPOCHS=1 --set MIN_ACCURACY=0.7
run_ipynb pytorch_training.ipynb --set 'TRAIN_ARGS=["--epochs", "1", "--limit", "3000"]' --set MIN_ACCURACY=0.5
say "demo done"
echo "muster, horovodrun and musterd are in $BUILD/bin; to use them from your shell:"
echo "  export PATH=\"$BUILD/bin:\$PATH\""
