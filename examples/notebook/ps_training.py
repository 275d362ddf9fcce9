#!/usr/bin/env python3
"""Notebook example: parameter-server training of Fashion-MNIST with muster.

What a TensorFlow user does with tf.train.SyncReplicasOptimizer, with
muster's C++ runtime: one call starts 1 parameter server (muster-ps) and 2
workers running the fashion_mnist program; musterd hands every task its
TF_CONFIG; the workers push gradients, the PS averages them and applies the
optimizer, the chief (worker 0) prints progress and the test accuracy.
We wait for the end and read the accuracy from the chief's log.

Run with musterd running (scripts/demo.sh does it):
    python3 examples/notebook/ps_training.py [--model mlp] [--epochs 3]
"""
import argparse
import os
import re
import sys

import muster


def program():
    """build/bin/fashion_mnist relative to the project dir (musterd resolves scripts there)."""
    build = os.environ.get("MUSTER_BINARY_DIR") or os.path.join(os.getcwd(), "build")
    project = os.environ.get("MUSTER_PROJECT_DIR") or os.getcwd()
    return os.path.relpath(os.path.join(os.path.abspath(build), "bin", "fashion_mnist"), os.path.abspath(project))


def chief_output(cluster_spec):
    """The log of worker 0 of the newest ps cluster whose spec is `cluster_spec`."""
    for c in sorted(muster.list_clusters(), key=lambda c: c.get("created_at", ""), reverse=True):
        if c.get("mode") != "ps":
            continue
        workers = (c.get("workers") or {}).get("worker") or []
        if workers and (c.get("cluster_spec") or {}).get("worker") == cluster_spec.get("worker"):
            wid = workers[0] if isinstance(workers[0], str) else workers[0]["id"]
            return muster.worker_logs(wid)
    raise RuntimeError("no ps cluster with workers %s" % cluster_spec.get("worker"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--min-accuracy", type=float, default=0.85, help="exit 1 below this test accuracy")
    a = ap.parse_args()

    args = ["--model", a.model, "--epochs", str(a.epochs), "--batch-size", str(a.batch_size), "--log-every", "200"]
    print("run_cluster(n_workers=2, n_ps=1, worker_script=%s %s)" % (program(), " ".join(args)), flush=True)
    cluster_spec, session_addr = muster.run_cluster(
        n_workers=2, n_ps=1, cpu=1, memory=2, worker_script=program(), args=args,
        timeout_seconds=120, completion_timeout_seconds=900)
    print("ClusterSpec:", cluster_spec)
    print("session address:", session_addr)

    log = chief_output(cluster_spec)
    print("--- chief (worker 0) progress ---")
    for line in log.splitlines():
        if line.startswith(("mode=", "epoch ", "final ", "resumed")):
            print("  " + line)
    m = re.search(r"^final test_accuracy=([0-9.]+)$", log, re.M)
    if not m:
        print("no final accuracy in the chief's log", file=sys.stderr)
        return 1
    print("ps mode (1 PS + 2 workers, %s, %d epochs): test accuracy %.2f%%" % (a.model, a.epochs,
                                                                               100 * float(m.group(1))))
    if float(m.group(1)) < a.min_accuracy:
        print("below the expected %.0f%%" % (100 * a.min_accuracy), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
