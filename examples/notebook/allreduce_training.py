#!/usr/bin/env python3
"""Notebook example: Horovod-style allreduce training of Fashion-MNIST with muster.

What a Horovod user does with `horovodrun -np 2 python train.py`: muster
starts 2 workers (1 slot each), builds the horovodrun/mpirun line from their
IP addresses and runs it; each rank of the fashion_mnist program averages
its gradients with the others (ring allreduce), rank 0 prints progress and
the test accuracy averaged over the ranks. We print the line, wait for the
end and read the accuracy from the launcher's output (muster.cluster_logs).

Run with musterd running (scripts/demo.sh does it):
    python3 examples/notebook/allreduce_training.py [--model mlp] [--epochs 3]
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


def cluster_output(cluster, tail=None):
    """mpirun's output (rank 0's progress and accuracy), from the daemon's
    GET /api/v1/clusters/{id}/logs: works wherever this notebook runs, not
    only on the daemon's host. mpirun --tag-output prefixes each line with
    [job,rank]<stdout>:, which is stripped here."""
    return re.sub(r"^\[\d+,\d+\]<std\w+>:", "", muster.cluster_logs(cluster, tail=tail), flags=re.M)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--min-accuracy", type=float, default=0.85, help="exit 1 below this test accuracy")
    a = ap.parse_args()

    args = ["--model", a.model, "--epochs", str(a.epochs), "--batch-size", str(a.batch_size), "--log-every", "200"]
    cluster = muster.horovodrun(2, program(), slots=1, cpu=1, memory=2, args=args, timeout_seconds=120)
    print("horovodrun line:", cluster.get("horovodrun_command"))
    print("mpirun line:    ", cluster.get("mpirun_command"))
    try:
        cluster = muster.await_cluster(cluster, timeout_seconds=900)
    except muster.ClusterFailed as err:  # names the first rank that failed, with its last lines
        print("allreduce training failed: %s" % err.message, file=sys.stderr)
        print(cluster_output(err.cluster, tail=20), file=sys.stderr)
        return 1
    print("cluster %s %s" % (cluster.get("id"), cluster.get("status")))
    if cluster.get("status") != "succeeded":  # stopped meanwhile
        print("allreduce training did not finish: %s" % cluster.get("reason"), file=sys.stderr)
        return 1

    log = cluster_output(cluster)
    print("--- rank 0 progress ---")
    for line in log.splitlines():
        if line.startswith(("mode=", "epoch ", "final ")):
            print("  " + line)
    m = re.search(r"^final test_accuracy=([0-9.]+)$", log, re.M)
    if not m:
        print("no final accuracy in the cluster's logs", file=sys.stderr)
        return 1
    print("allreduce mode (2 ranks, %s, %d epochs): test accuracy %.2f%%" % (a.model, a.epochs,
                                                                             100 * float(m.group(1))))
    if float(m.group(1)) < a.min_accuracy:
        print("below the expected %.0f%%" % (100 * a.min_accuracy), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
