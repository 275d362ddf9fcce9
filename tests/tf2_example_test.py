"""examples/tf2_ps against a real musterd: 1 muster-ps, a chief, a worker and
a sidecar evaluator (TensorFlow 2's roles) train the MLP on a Fashion-MNIST
subset. Checks that every task got a TF_CONFIG per TensorFlow's rules (the
evaluator outside the cluster), that the chief trained and its log is the
cluster's, that the evaluator evaluated the chief's checkpoints, and that the
cluster ended with the chief (the rest stopped).
"""
import json
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from sdk_daemon import Daemon

SOURCE = os.environ.get("MUSTER_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(os.environ.get("MUSTER_BINARY_DIR", "build"), "bin")
DATA = "/usr/share/datasets/fashion-mnist"

pytestmark = [
    pytest.mark.skipif(not os.path.exists(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")),
                       reason="dataset-fashion-mnist not installed (scripts/setup.sh installs it)"),
    pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "fashion_mnist")) or
                       not os.path.exists(os.path.join(BIN, "muster-ps")),
                       reason="build fashion_mnist and muster-ps first"),
]


def call(d, method, path, body=None):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(d.url + path, data=None if body is None else json.dumps(body).encode(),
                                 method=method, headers={"Authorization": "Bearer " + d.token,
                                                         "Content-Type": "application/json"})
    try:
        with opener.open(req, timeout=60) as resp:
            raw = resp.read()
            return resp.status, (raw.decode() if path.endswith("/logs") else json.loads(raw or b"null"))
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def test_tf2_layout_trains_and_evaluates():
    root = tempfile.mkdtemp(prefix="muster-tf2-")
    project = os.path.join(root, "project")
    shutil.copytree(os.path.join(SOURCE, "examples", "tf2_ps"), os.path.join(project, "tf2_ps"))
    ckpt = os.path.join(root, "ckpt")
    try:
        with Daemon(project, os.path.join(root, "state")) as d:
            args = [os.path.join(BIN, "fashion_mnist"), ckpt, "--model", "mlp", "--epochs", "3", "--limit", "3000",
                    "--test-limit", "1000", "--batch-size", "32", "--seed", "7", "--threads", "1"]
            status, c = call(d, "POST", "/api/v1/clusters",
                             {"n_ps": 1, "n_chief": 1, "n_workers": 1, "n_evaluator": 1, "cpu": 1, "memory": 1,
                              "worker_script": "tf2_ps/task.sh", "args": args, "timeout_seconds": 60})
            assert status == 201, c
            assert set(c["workers"]) == {"ps", "chief", "worker", "evaluator"}
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline:
                status, c = call(d, "GET", "/api/v1/clusters/" + c["id"])
                if c["status"] in ("succeeded", "failed", "stopped"):
                    break
                time.sleep(0.5)
            status, chief_log = call(d, "GET", "/api/v1/clusters/%s/logs" % c["id"])
            evaluator = c["workers"]["evaluator"][0]
            status, eval_log = call(d, "GET", "/api/v1/workers/%s/logs" % evaluator)
            assert c["status"] == "succeeded", (c, chief_log[-2000:], eval_log[-2000:])
            # The ClusterSpec holds ps, chief and worker; not the evaluator.
            assert sorted(c["cluster_spec"]) == ["chief", "ps", "worker"], c["cluster_spec"]
            # The chief trained; its log is the cluster's.
            acc = float(re.search(r"^final test_accuracy=([0-9.]+)$", chief_log, re.M).group(1))
            assert acc > 0.6, chief_log[-2000:]
            # The evaluator saw the cluster without itself and evaluated checkpoints.
            assert "cluster ['chief', 'ps', 'worker']" in eval_log, eval_log
            evals = [float(x) for x in re.findall(r"^eval step=\d+ test_accuracy=([0-9.]+)", eval_log, re.M)]
            assert evals and max(evals) > 0.5, eval_log
            status, ev = call(d, "GET", "/api/v1/workers/" + evaluator)
            assert ev["status"] == "stopped", ev  # ended with the chief, as TF2's sidecar is
    finally:
        shutil.rmtree(root, ignore_errors=True)
