#!/usr/bin/env python3
"""Writes the example notebooks (examples/notebook/*.ipynb) from the cells below.

Each notebook is the matching .py example (workers_basics.py, ps_training.py,
allreduce_training.py, pytorch_training.py) cut into the steps a notebook user runs one at a time,
with a markdown cell before each step saying what it does. Edit the cells
here and re-run `python3 examples/notebook/make_notebooks.py`; the .ipynb files
are committed so Jupyter opens them directly, and tests/sdk_python_notebook_test.py
checks they are what this script writes.

The first code cell of each notebook is tagged "parameters" (papermill's
convention): the test and `make demo` insert a cell after it to shrink the
run (fewer images, one epoch).
"""
import json
import os
import sys

PROGRAM_CELL = '''\
def program(name="fashion_mnist"):
    """build/bin/<name> relative to musterd's --project-dir (where it resolves scripts)."""
    build = os.environ.get("MUSTER_BINARY_DIR") or os.path.join(os.getcwd(), "build")
    project = os.environ.get("MUSTER_PROJECT_DIR") or os.getcwd()
    return os.path.relpath(os.path.join(os.path.abspath(build), "bin", name), os.path.abspath(project))'''

WORKERS_BASICS = [
    ("md", "# Workers with muster, the way cdsw notebooks do it\n\n"
           "This notebook talks to a running `musterd` through the Python SDK and keeps Cloudera's spelling, "
           "`import muster as cdsw`. It launches 4 workers, waits until they run, follows one worker's output "
           "live, stops them, and shows what a crashing worker looks like.\n\n"
           "The workers run `examples/notebook/workers_basics.py` (its `worker_main`): scripts are paths "
           "relative to musterd's `--project-dir`."),
    ("code", "import os\n\nimport muster as cdsw  # a cdsw notebook ported to muster keeps its spelling\n\n"
             "N_WORKERS = 4\nWORK_SECONDS = 120", {"tags": ["parameters"]}),
    ("md", "## Launch and wait\n\n`launch_workers` returns at once with the worker dicts; `await_workers` "
           "with `wait_for_completion=False` returns once every worker is running with an IP address "
           "(a status line shows the progress; Ctrl-C / *Interrupt* stops the workers)."),
    ("code", "workers = cdsw.launch_workers(n=N_WORKERS, cpu=0.5, memory=1, script=\"examples/notebook/workers_basics.py\",\n"
             "                              env={\"WORK_SECONDS\": str(WORK_SECONDS)})\n"
             "running = cdsw.await_workers(workers, wait_for_completion=False, timeout_seconds=60)\n"
             "worker_ips = [w[\"ip_address\"] for w in running[\"workers\"]]\n"
             "for w in running[\"workers\"]:\n"
             "    print(\"%-12s %-8s ip %-15s running since %s\" % (w[\"id\"], w[\"status\"], w[\"ip_address\"], w[\"running_at\"]))\n"
             "print(\"failures:\", running[\"failures\"] or \"none\")\n"
             "assert len(worker_ips) == N_WORKERS and not running[\"failures\"]"),
    ("md", "## Follow a worker's output live\n\n`worker_logs(id, follow=True)` is a generator: each line arrives "
           "as the worker writes it. These workers wait to be stopped, so we stop reading once the first "
           "worker says so."),
    ("code", "for line in cdsw.worker_logs(workers[0], follow=True):\n"
             "    print(\"  | \" + line)\n"
             "    if \"waiting to be stopped\" in line:\n"
             "        break"),
    ("md", "## Stop them\n\n`stop_workers(*workers)` stops these workers and their process trees "
           "(`stop_workers()` with no argument stops every worker)."),
    ("code", "stopped = cdsw.stop_workers(*workers)\n"
             "print(\", \".join(\"%s=%s\" % (w[\"id\"], w[\"status\"]) for w in stopped))\n"
             "assert all(w[\"status\"] == \"stopped\" for w in stopped)"),
    ("md", "## A worker that crashes\n\nIts code raises `SystemExit(2)`: `await_workers` lists it in "
           "`failures` with its exit code, and its log is still there."),
    ("code", "bad = cdsw.launch_workers(n=1, cpu=0.5, memory=1, code=\"print('loading data'); raise SystemExit(2)\")\n"
             "res = cdsw.await_workers(bad, wait_for_completion=True, timeout_seconds=60)\n"
             "for f in res[\"failures\"]:\n"
             "    print(f[\"id\"], f[\"status\"], \"exit code\", f.get(\"exit_code\"), \"-\", f.get(\"reason\"))\n"
             "    print(\"log:\", cdsw.worker_logs(f).strip())\n"
             "assert [f[\"exit_code\"] for f in res[\"failures\"]] == [2]"),
]

PS_TRAINING = [
    ("md", "# Parameter-server training of Fashion-MNIST\n\n"
           "What a TensorFlow user does with `tf.train.SyncReplicasOptimizer`, with muster's C++ runtime: one "
           "`run_cluster` call starts parameter servers (`muster-ps`) and workers running the `fashion_mnist` "
           "program; musterd hands every task its `TF_CONFIG`; the workers push gradients, the PS averages "
           "them and applies the optimizer; the chief (worker 0) prints progress and the test accuracy."),
    ("code", "import os\nimport re\n\nimport muster\n\n"
             "MODEL = \"mlp\"\nEPOCHS = 3\nLIMIT = 0          # train on the first N images (0: all 60,000)\n"
             "TEST_LIMIT = 0\nMIN_ACCURACY = 0.85", {"tags": ["parameters"]}),
    ("code", PROGRAM_CELL),
    ("md", "## Start the cluster and wait for the end\n\nWith a `worker_script`, `run_cluster` waits until "
           "the cluster has ended (a status line shows where it is; Ctrl-C stops the cluster) and raises "
           "`muster.ClusterFailed`, naming the failing task, if one failed. It returns cdsw's pair "
           "`(cluster_spec, session_addr)`, which also carries `.cluster_id`."),
    ("code", "args = [\"--model\", MODEL, \"--epochs\", str(EPOCHS), \"--batch-size\", \"64\", \"--log-every\", \"200\",\n"
             "        \"--limit\", str(LIMIT), \"--test-limit\", str(TEST_LIMIT)]\n"
             "result = muster.run_cluster(n_workers=2, n_ps=1, cpu=1, memory=2, worker_script=program(), args=args,\n"
             "                            timeout_seconds=120, completion_timeout_seconds=900)\n"
             "cluster_spec, session_addr = result\n"
             "print(\"cluster\", result.cluster_id)\nprint(\"ClusterSpec:\", cluster_spec)\n"
             "print(\"session address:\", session_addr)"),
    ("md", "## Read the chief's output\n\n`cluster_logs` of a ps cluster is the chief's log."),
    ("code", "log = muster.cluster_logs(result.cluster_id)\n"
             "for line in log.splitlines():\n"
             "    if line.startswith((\"mode=\", \"epoch \", \"final \")):\n"
             "        print(\"  \" + line)\n"
             "accuracy = float(re.search(r\"^final test_accuracy=([0-9.]+)$\", log, re.M).group(1))\n"
             "print(\"test accuracy %.2f%%\" % (100 * accuracy))\n"
             "assert accuracy >= MIN_ACCURACY, \"below the expected %.0f%%\" % (100 * MIN_ACCURACY)"),
]

ALLREDUCE_TRAINING = [
    ("md", "# Horovod-style allreduce training of Fashion-MNIST\n\n"
           "What a Horovod user does with `horovodrun -np 2 python train.py`: muster starts 2 workers, builds "
           "the horovodrun/mpirun line from their IP addresses and runs it; each rank averages its gradients "
           "with the others (ring allreduce) and rank 0 prints progress and the test accuracy."),
    ("code", "import os\nimport re\n\nimport muster\n\n"
             "MODEL = \"mlp\"\nEPOCHS = 3\nLIMIT = 0\nTEST_LIMIT = 0\nMIN_ACCURACY = 0.85",
     {"tags": ["parameters"]}),
    ("code", PROGRAM_CELL),
    ("md", "## Start it\n\n`horovodrun` returns once the workers are up and mpirun runs; the cluster dict "
           "has the exact lines it ran. Horovod's tuning options (`fusion_threshold_mb`, `cycle_time_ms`, "
           "`timeline_filename`, `start_timeout`, `verbose`, `network_interfaces`) are keyword arguments."),
    ("code", "args = [\"--model\", MODEL, \"--epochs\", str(EPOCHS), \"--batch-size\", \"64\", \"--log-every\", \"200\",\n"
             "        \"--limit\", str(LIMIT), \"--test-limit\", str(TEST_LIMIT)]\n"
             "cluster = muster.horovodrun(2, program(), slots=1, cpu=1, memory=2, args=args, timeout_seconds=120)\n"
             "print(\"cluster\", cluster[\"id\"])\nprint(\"horovodrun line:\", cluster[\"horovodrun_command\"])\n"
             "print(\"mpirun line:    \", cluster[\"mpirun_command\"])"),
    ("md", "## Follow rank 0 live\n\n`cluster_logs(cluster, follow=True)` yields mpirun's output as it is "
           "written (each line tagged `[1,rank]<stdout>:`) and ends with the cluster."),
    ("code", "lines = []\n"
             "for line in muster.cluster_logs(cluster, follow=True):\n"
             "    line = re.sub(r\"^\\[\\d+,\\d+\\]<std\\w+>:\", \"\", line)\n"
             "    lines.append(line)\n"
             "    if line.startswith((\"mode=\", \"epoch \", \"final \")):\n"
             "        print(\"  \" + line)"),
    ("md", "## Check the outcome\n\n`await_cluster` returns the cluster once it has ended; had the job failed, it "
           "would raise `muster.ClusterFailed` naming the first rank that failed, with its last lines."),
    ("code", "cluster = muster.await_cluster(cluster, timeout_seconds=120)\n"
             "print(\"cluster %s %s\" % (cluster[\"id\"], cluster[\"status\"]))\n"
             "accuracy = float(re.search(r\"^final test_accuracy=([0-9.]+)$\", \"\\n\".join(lines), re.M).group(1))\n"
             "print(\"test accuracy %.2f%%\" % (100 * accuracy))\n"
             "assert accuracy >= MIN_ACCURACY, \"below the expected %.0f%%\" % (100 * MIN_ACCURACY)"),
]

PYTORCH_TRAINING = [
    ("md", "# One PyTorch script, three ways\n\n"
           "`examples/pytorch/train.py` trains a LeNet-style CNN on Fashion-MNIST. The same file runs as one "
           "worker, under `muster.horovodrun` (`import muster.torch as hvd`: Horovod's API on muster's ring "
           "allreduce) and under `muster.run_cluster` (1 parameter server + 2 workers, "
           "`muster.torch.ps.SyncReplicasOptimizer`). The global batch is the same in every mode, so the test "
           "accuracies should agree within about half a point.\n\n"
           "The workers need nothing from this notebook's environment: musterd hands them muster's own "
           "package and runtime extension, and this notebook's Python when it can run them."),
    ("code", "import re\n\nimport muster\n\n"
             "SCRIPT = \"examples/pytorch/train.py\"   # relative to musterd's --project-dir\n"
             "TRAIN_ARGS = [\"--epochs\", \"2\", \"--limit\", \"6000\", \"--log-every\", \"100\"]\n"
             "MODES = [\"single\", \"allreduce\", \"ps\"]\nMIN_ACCURACY = 0.65\n"
             "ENV = {\"OMP_NUM_THREADS\": \"1\"}", {"tags": ["parameters"]}),
    ("code", "def final(log, key=\"test_accuracy\"):\n"
             "    \"\"\"The `final <key>=<value>` line of rank 0 / the chief (an mpi log's lines carry their rank's tag).\"\"\"\n"
             "    m = re.search(r\"^(?:\\[\\d+,\\d+\\]<stdout>:)?final %s=([0-9.]+)$\" % key, log, re.M)\n"
             "    if not m:\n"
             "        raise RuntimeError(\"no final %s in the log:\\n%s\" % (key, log[-3000:]))\n"
             "    return float(m.group(1))\n\n\n"
             "accuracy = {}"),
    ("md", "## 1. One worker\n\nThe script as a single process."),
    ("code", "if \"single\" in MODES:\n"
             "    workers = muster.launch_workers(1, cpu=1, memory=2, script=SCRIPT, args=TRAIN_ARGS, env=ENV)\n"
             "    result = muster.await_workers(workers, wait_for_completion=True, timeout_seconds=900)\n"
             "    log = muster.worker_logs(workers[0])\n"
             "    assert not result[\"failures\"], log[-3000:]\n"
             "    accuracy[\"single\"] = final(log)\n"
             "    print(\"single process:     test accuracy %.2f%%\" % (100 * accuracy[\"single\"]))"),
    ("md", "## 2. Horovod's API, 2 ranks\n\nmuster builds the horovodrun/mpirun line from 2 workers' IP "
           "addresses and runs it; `wait_for_completion=True` raises `muster.ClusterFailed` naming the first "
           "rank that failed, with its last lines."),
    ("code", "if \"allreduce\" in MODES:\n"
             "    cluster = muster.horovodrun(2, SCRIPT, cpu=1, memory=2, args=TRAIN_ARGS, env=ENV,\n"
             "                                wait_for_completion=True, completion_timeout_seconds=900)\n"
             "    print(\"horovodrun line:\", cluster[\"horovodrun_command\"])\n"
             "    accuracy[\"allreduce\"] = final(muster.cluster_logs(cluster))\n"
             "    print(\"allreduce, 2 ranks: test accuracy %.2f%%\" % (100 * accuracy[\"allreduce\"]))"),
    ("md", "## 3. Parameter servers: 1 PS + 2 workers\n\nmusterd hands every task its `TF_CONFIG`; the "
           "cluster's log is the chief's."),
    ("code", "if \"ps\" in MODES:\n"
             "    result = muster.run_cluster(n_workers=2, n_ps=1, cpu=1, memory=2, worker_script=SCRIPT,\n"
             "                                args=TRAIN_ARGS, env=ENV, timeout_seconds=120,\n"
             "                                completion_timeout_seconds=900)\n"
             "    print(\"ClusterSpec:\", result[0])\n"
             "    accuracy[\"ps\"] = final(muster.cluster_logs(result.cluster_id))\n"
             "    print(\"1 PS + 2 workers:   test accuracy %.2f%%\" % (100 * accuracy[\"ps\"]))"),
    ("md", "## Compare"),
    ("code", "for mode in [m for m in (\"allreduce\", \"ps\") if m in accuracy and \"single\" in accuracy]:\n"
             "    print(\"%-10s - single: %+.2f points\" % (mode, 100 * (accuracy[mode] - accuracy[\"single\"])))\n"
             "low = {m: a for m, a in accuracy.items() if a < MIN_ACCURACY}\n"
             "assert not low, \"below the expected %.0f%%: %s\" % (100 * MIN_ACCURACY, low)"),
]

DDP_TRAINING = [
    ("md", "# A PyTorch DDP script from the notebook, on gloo and on muster\n\n"
           "`examples/pytorch/ddp_train.py` is written as PyTorch's DDP tutorial writes a torchrun script: "
           "`init_process_group` reads torchrun's environment, a `DistributedSampler` splits the data, the model "
           "is wrapped in `DistributedDataParallel`. `muster.torchrun` starts it on muster's workers unchanged: "
           "every process gets `RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, ... "
           "We train it twice, on PyTorch's gloo backend and on muster's (`--backend muster`, which only adds "
           "`import muster.torch.distributed`), and compare."),
    ("code", "import os\nimport re\n\nimport muster\n\n"
             "SCRIPT = \"examples/pytorch/ddp_train.py\"\nN_WORKERS = 2\nEPOCHS = 2\nLIMIT = 6000\n"
             "TEST_LIMIT = 0\nMIN_ACCURACY = 0.65", {"tags": ["parameters"]}),
    ("md", "Workers find muster's Python package (for the muster backend) through `PYTHONPATH`; one torch "
           "thread per process."),
    ("code", "repo = os.path.abspath(os.environ.get(\"MUSTER_PROJECT_DIR\") or os.getcwd())\n"
             "ENV = {\"PYTHONPATH\": os.path.join(repo, \"sdk\", \"python\"), \"OMP_NUM_THREADS\": \"1\"}\n"
             "if os.environ.get(\"MUSTER_BINARY_DIR\"):\n"
             "    ENV[\"MUSTER_BINARY_DIR\"] = os.path.abspath(os.environ[\"MUSTER_BINARY_DIR\"])\n"
             "ARGS = [\"--epochs\", str(EPOCHS), \"--limit\", str(LIMIT), \"--test-limit\", str(TEST_LIMIT)]"),
    ("md", "## Start it on gloo\n\n`torchrun` returns once the workers are up; the cluster dict has the "
           "equivalent `torchrun` line (the one every node would run by hand)."),
    ("code", "cluster = muster.torchrun(N_WORKERS, SCRIPT, cpu=1, memory=2, args=ARGS + [\"--backend\", \"gloo\"],\n"
             "                          env=ENV, timeout_seconds=120)\n"
             "print(\"cluster\", cluster[\"id\"])\nprint(\"torchrun line:\", cluster[\"torchrun_command\"])"),
    ("md", "## Follow rank 0 live\n\n`cluster_logs(cluster, follow=True)` is worker 0's output (rank 0) as it "
           "is written; it ends with the cluster."),
    ("code", "def follow(cluster):\n"
             "    lines = []\n"
             "    for line in muster.cluster_logs(cluster, follow=True):\n"
             "        lines.append(line)\n"
             "        if line.startswith((\"backend=\", \"epoch \", \"final \")):\n"
             "            print(\"  \" + line)\n"
             "    muster.await_cluster(cluster, timeout_seconds=120)  # raises muster.ClusterFailed if it failed\n"
             "    text = \"\\n\".join(lines)\n"
             "    return {k: float(re.search(r\"^final %s=([0-9.]+)$\" % k, text, re.M).group(1))\n"
             "            for k in (\"test_accuracy\", \"images_per_sec\")}\n\n"
             "gloo = follow(cluster)"),
    ("md", "## The same script on muster's allreduce\n\n`--backend muster`: the script imports "
           "`muster.torch.distributed` and calls `init_process_group(\"muster\")`; DDP's gradient buckets then "
           "go through muster's shared-memory ring (TCP between hosts) instead of gloo."),
    ("code", "cluster = muster.torchrun(N_WORKERS, SCRIPT, cpu=1, memory=2, args=ARGS + [\"--backend\", \"muster\"],\n"
             "                          env=ENV, timeout_seconds=120)\n"
             "ours = follow(cluster)"),
    ("md", "## Compare\n\nThe same data, the same initial model, the same updates up to float rounding: "
           "the accuracies agree."),
    ("code", "for name, r in ((\"gloo\", gloo), (\"muster\", ours)):\n"
             "    print(\"%-7s test accuracy %.2f%%  %6.0f images/s\" % (name, 100 * r[\"test_accuracy\"], r[\"images_per_sec\"]))\n"
             "assert abs(gloo[\"test_accuracy\"] - ours[\"test_accuracy\"]) < 0.01\n"
             "assert ours[\"test_accuracy\"] >= MIN_ACCURACY, \"below the expected %.0f%%\" % (100 * MIN_ACCURACY)"),
]

NOTEBOOKS = {
    "workers_basics.ipynb": WORKERS_BASICS,
    "ps_training.ipynb": PS_TRAINING,
    "allreduce_training.ipynb": ALLREDUCE_TRAINING,
    "pytorch_training.ipynb": PYTORCH_TRAINING,
    "ddp_training.ipynb": DDP_TRAINING,
}


def cell(kind, source, metadata=None):
    lines = source.splitlines(keepends=True)
    if kind == "md":
        return {"cell_type": "markdown", "metadata": metadata or {}, "source": lines}
    return {"cell_type": "code", "execution_count": None, "metadata": metadata or {}, "outputs": [],
            "source": lines}


def notebook(cells):
    return {
        "cells": [cell(*c) for c in cells],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def render(cells):
    nb = notebook(cells)
    for i, c in enumerate(nb["cells"]):
        c["id"] = "cell-%d" % i  # stable ids: the committed files do not churn
    return json.dumps(nb, indent=1, sort_keys=True) + "\n"


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    for name, cells in NOTEBOOKS.items():
        with open(os.path.join(here, name), "w") as f:
            f.write(render(cells))
        print("wrote", os.path.join(here, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
