#!/usr/bin/env python3
"""Notebook example: one PyTorch training script, three ways, through musterd.

examples/pytorch/train.py trains a LeNet-style CNN on Fashion-MNIST. The
same file runs
  1. as one worker (single process),
  2. under `muster.horovodrun(...)`: 2 ranks, `import muster.torch as hvd`
     (Horovod's API on muster's ring allreduce),
  3. under `muster.run_cluster(...)`: 1 parameter server (muster-ps) + 2
     workers, `muster.torch.ps.SyncReplicasOptimizer` (TF_CONFIG from musterd),
and we compare the test accuracies: the global batch is the same in every
mode, so they should agree within half a point.

Run with musterd running (scripts/demo.sh does it), from the repository:
    PYTHONPATH=sdk/python python3 examples/notebook/pytorch_training.py
(PYTHONPATH for this process only: the workers get muster from musterd.)
pytorch_training.ipynb is the same as a notebook.
Settings (environment): TRAIN_ARGS (default "--epochs 2 --limit 6000";
"--full" for all 60000 images, 5 epochs), MODES (default "single allreduce
ps"), MIN_ACCURACY (default 0.65).
"""
# %% Setup: the script is a path in musterd's project dir; workers find muster's
# Python package and its runtime extension without help (musterd hands them its own).
import os
import re
import shlex

import muster

SCRIPT = "examples/pytorch/train.py"
TRAIN_ARGS = shlex.split(os.environ.get("TRAIN_ARGS", "--epochs 2 --limit 6000")) + ["--log-every", "100"]
MODES = os.environ.get("MODES", "single allreduce ps").split()
MIN_ACCURACY = float(os.environ.get("MIN_ACCURACY", "0.65"))
ENV = {"OMP_NUM_THREADS": "1"}


def final(log, key="test_accuracy"):
    """The `final <key>=<value>` line of rank 0 / the chief (an mpi log's lines carry their rank's tag)."""
    m = re.search(r"^(?:\[\d+,\d+\]<stdout>:)?final %s=([0-9.]+)$" % key, log, re.M)
    if not m:
        raise RuntimeError("no final %s in the log:\n%s" % (key, log[-3000:]))
    return float(m.group(1))


accuracy = {}

# %% 1. Single process: one worker runs the script.
if "single" in MODES:
    workers = muster.launch_workers(1, cpu=1, memory=2, script=SCRIPT, args=TRAIN_ARGS, env=ENV)
    result = muster.await_workers(workers, wait_for_completion=True, timeout_seconds=900)
    log = muster.worker_logs(workers[0]["id"])
    if result["failures"]:
        raise RuntimeError("single-process training failed: %s\n%s" % (result["failures"], log[-3000:]))
    accuracy["single"] = final(log)
    print("single process:        test accuracy %.2f%%" % (100 * accuracy["single"]))

# %% 2. Horovod-style allreduce: muster builds the horovodrun/mpirun line for 2 ranks and runs it.
if "allreduce" in MODES:
    cluster = muster.horovodrun(2, SCRIPT, slots=1, cpu=1, memory=2, args=TRAIN_ARGS, env=ENV,
                                wait_for_completion=True, completion_timeout_seconds=900)
    print("horovodrun line:", cluster.get("horovodrun_command"))
    accuracy["allreduce"] = final(muster.cluster_logs(cluster))
    print("allreduce, 2 ranks:    test accuracy %.2f%%" % (100 * accuracy["allreduce"]))

# %% 3. Parameter servers: 1 muster-ps + 2 workers; musterd hands every task its TF_CONFIG.
if "ps" in MODES:
    spec, session = muster.run_cluster(n_workers=2, n_ps=1, cpu=1, memory=2, worker_script=SCRIPT, args=TRAIN_ARGS,
                                       env=ENV, timeout_seconds=120, completion_timeout_seconds=900)
    print("ClusterSpec:", spec)
    ps_cluster = next(c for c in sorted(muster.list_clusters(), key=lambda c: c.get("created_at", ""), reverse=True)
                      if c.get("mode") == "ps" and (c.get("cluster_spec") or {}).get("worker") == spec.get("worker"))
    accuracy["ps"] = final(muster.cluster_logs(ps_cluster))  # the chief's log
    print("1 PS + 2 workers:      test accuracy %.2f%%" % (100 * accuracy["ps"]))

# %% Compare: the same global batches, so the same accuracy up to float rounding.
for mode in [m for m in ("allreduce", "ps") if m in accuracy and "single" in accuracy]:
    print("%-10s - single: %+.2f points" % (mode, 100 * (accuracy[mode] - accuracy["single"])))
low = {m: a for m, a in accuracy.items() if a < MIN_ACCURACY}
if low:
    raise SystemExit("below the expected %.0f%%: %s" % (100 * MIN_ACCURACY, low))
