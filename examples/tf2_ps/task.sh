#!/bin/bash
# One worker_script for every task of a TensorFlow-2-style ps cluster
# (musterd POST /api/v1/clusters with n_ps, n_chief, n_workers, n_evaluator):
#   chief      the coordinator: initialises the variables on the parameter
#              servers, drives the training with the worker tasks, writes a
#              checkpoint every epoch; its end ends the cluster
#   worker     trains with the chief (muster's synchronous replicas)
#   evaluator  outside the ClusterSpec (TensorFlow's rule): a sidecar that
#              evaluates each new checkpoint (evaluator.py)
#   ps         muster-ps, started by musterd itself
# Usage: task.sh FASHION_MNIST_PROGRAM CHECKPOINT_DIR [fashion_mnist flags...]
set -euo pipefail
program=$1 checkpoint_dir=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
case "${MUSTER_TASK_TYPE:?run this as a task of a muster ps cluster}" in
  chief | worker) exec "$program" --mode ps --checkpoint-dir "$checkpoint_dir" "$@" ;;
  evaluator) exec /usr/bin/python3 -u "$here/evaluator.py" --checkpoint-dir "$checkpoint_dir" ;;
  *) echo "task.sh: unexpected task type $MUSTER_TASK_TYPE" >&2; exit 2 ;;
esac
