"""Whole-job restarts under max_restarts (torchrun's semantics): label integration.

Clusters of the real fashion_mnist program on a real musterd (local backend):
- mpi: mpirun runs 2 ranks checkpointing every epoch; rank 1 is SIGKILLed
  after the first checkpoint; mpirun fails, musterd stops every task and
  starts them again (MUSTER_RESTART_COUNT=1), the job resumes from its
  checkpoint and ends succeeded with the restart in its generations;
- ps: muster-ps and 2 workers; worker 1 (not the chief) is SIGKILLed; it
  alone is replaced under the same task index and TF_CONFIG, pulls the
  parameters the PS holds and the job ends succeeded;
- a job that keeps failing stops after max_restarts, naming the last failure.
Each checks that no process of the cluster is left.
"""
import os
import re
import shutil
import signal
import time

import pytest

from sdk_daemon import Daemon, RestApi, binary_dir, processes_with_env
from testutil import wait_for

DATA = "/usr/share/datasets/fashion-mnist"
COMMON = ["--model", "mlp", "--limit", "2400", "--test-limit", "1000", "--batch-size", "32", "--log-every", "25",
          "--seed", "7", "--threads", "1"]

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")),
                                reason="dataset-fashion-mnist not installed (scripts/setup.sh installs it)")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    project = tmp_path_factory.mktemp("project")
    shutil.copy(os.path.join(binary_dir(), "bin", "fashion_mnist"), str(project / "fashion_mnist"))
    os.chmod(str(project / "fashion_mnist"), 0o755)
    with open(str(project / "always_fails.sh"), "w") as f:
        f.write("#!/bin/sh\necho \"run $MUSTER_RESTART_COUNT\"\nexit 3\n")
    os.chmod(str(project / "always_fails.sh"), 0o755)
    daemon = Daemon(project, tmp_path_factory.mktemp("state"))
    daemon.start()
    try:
        yield {"api": RestApi(daemon), "daemon": daemon, "tmp": tmp_path_factory.mktemp("ckpt")}
    finally:
        daemon.stop()


def cluster(env, cid):
    status, c = env["api"].call("GET", "/api/v1/clusters/" + cid)
    assert status == 200, c
    return c


def finished(env, cid, timeout=240):
    return wait_for(lambda: (lambda c: c if c["status"] in ("succeeded", "failed", "stopped") else None)(
        cluster(env, cid)), timeout=timeout, interval=0.5, what="cluster %s to end" % cid)


def kill_rank(cid, **match):
    """SIGKILLs the one process of cluster `cid` whose environment has every NAME=VALUE of `match`."""
    def found():
        pids = set(processes_with_env("MUSTER_CLUSTER_ID=" + cid))
        for name, value in match.items():
            pids &= set(processes_with_env("%s=%s" % (name, value)))
        # The script itself, not its agent: the agent does not carry the task's own variables.
        return sorted(p for p in pids if "fashion_mnist" in open("/proc/%d/cmdline" % p, "rb").read().decode(
            errors="replace"))
    pids = wait_for(found, timeout=60, what="the process of %s in cluster %s" % (match, cid))
    os.kill(pids[0], signal.SIGKILL)
    return pids[0]


def cluster_log(env, cid):
    status, text = env["api"].call("GET", "/api/v1/clusters/%s/logs" % cid)
    return text if isinstance(text, str) else str(text)


def assert_nothing_left(env, cid):
    wait_for(lambda: not processes_with_env("MUSTER_CLUSTER_ID=" + cid), timeout=30,
             what="every process of cluster %s to end" % cid)


def test_mpi_cluster_restarts_every_rank_and_resumes_from_its_checkpoint(env):
    ckpt = str(env["tmp"] / "mpi")
    status, c = env["api"].call("POST", "/api/v1/clusters", {
        "mode": "mpi", "n_workers": 2, "cpu": 0.5, "memory": 0.5, "worker_script": "fashion_mnist",
        "args": ["--epochs", "4", "--checkpoint-dir", ckpt] + COMMON, "max_restarts": 1, "timeout_seconds": 60})
    assert status == 201, c
    cid = c["id"]
    wait_for(lambda: os.path.exists(os.path.join(ckpt, "fashion_mnist.ckpt")), timeout=180, interval=0.2,
             what="the first checkpoint")
    kill_rank(cid, OMPI_COMM_WORLD_RANK="1")
    done = finished(env, cid)
    assert done["status"] == "succeeded", done["reason"]
    assert done["restarts"] == 1 and done["max_restarts"] == 1
    gens = done["generations"]
    assert [g["cause"] for g in gens] == ["start", "restart"]
    # The first failed rank, as mpirun reported it.
    assert gens[0]["end_reason"].startswith("rank 1 on ") and "killed by signal 9" in gens[0]["end_reason"], \
        gens[0]["end_reason"]
    assert gens[1]["recovery_seconds"] is not None and gens[1]["recovery_seconds"] < 60
    assert set(gens[1]["members"]) == set(done["workers"]["worker"])
    assert not set(gens[0]["members"]) & set(gens[1]["members"])
    log = cluster_log(env, cid)
    assert re.search(r"resumed from .* at step \d+", log), log[-3000:]
    assert re.search(r"^final test_accuracy=0\.[5-9]", log, re.M) or "final test_accuracy" in log, log[-3000:]
    assert_nothing_left(env, cid)


def test_ps_worker_is_replaced_alone_under_its_task_index(env):
    ckpt = str(env["tmp"] / "ps")
    status, c = env["api"].call("POST", "/api/v1/clusters", {
        "mode": "ps", "n_ps": 1, "n_workers": 2, "cpu": 0.5, "memory": 0.5, "worker_script": "fashion_mnist",
        # 150 epochs of 2400 images: 7-8 s on a quiet 2-core VM (30 epochs took 1.5 s there and
        # could end before the kill), so worker 1 is killed mid-training.
        "args": ["--epochs", "150", "--checkpoint-dir", ckpt] + COMMON, "max_restarts": 2, "timeout_seconds": 60})
    assert status == 201, c
    cid = c["id"]
    ps, first = c["workers"]["ps"][0], c["workers"]["worker"]
    wait_for(lambda: cluster(env, cid)["status"] == "running", timeout=60, what="the cluster to run")
    # Training is under way: a step logged (not a fixed sleep, which a fast machine outran).
    wait_for(lambda: re.search(r"^epoch \d+ step \d+", cluster_log(env, cid), re.M), timeout=60, interval=0.1,
             what="a training step in cluster %s's log" % cid)
    c_now = cluster(env, cid)
    if c_now["status"] != "running":
        status, log = env["api"].call("GET", "/api/v1/clusters/%s/logs?tail=40" % cid)
        raise AssertionError("cluster %s is %s: %s\n%s" % (cid, c_now["status"], c_now["reason"], log))
    kill_rank(cid, MUSTER_TASK_TYPE="worker", MUSTER_TASK_INDEX="1")
    done = finished(env, cid)
    assert done["status"] == "succeeded", done["reason"]
    assert done["restarts"] == 1, "%s\n%s" % (done["generations"], cluster_log(env, cid)[-4000:])
    now = done["workers"]
    assert now["ps"] == [ps] and now["worker"][0] == first[0] and now["worker"][1] != first[1]
    gen = done["generations"][0]
    assert [d["worker_id"] for d in gen["deaths"]] == [first[1]] and gen["deaths"][0]["task"] == "worker 1"
    assert gen["replacements"][0] == {"replaced": first[1], "by": now["worker"][1], "at": gen["replacements"][0]["at"]}
    status, w = env["api"].call("GET", "/api/v1/workers/" + now["worker"][1])
    assert w["status"] == "succeeded", w
    assert_nothing_left(env, cid)


def test_a_job_that_keeps_failing_stops_after_max_restarts(env):
    status, c = env["api"].call("POST", "/api/v1/clusters", {
        "mode": "mpi", "n_workers": 1, "cpu": 0.2, "memory": 0.2, "worker_script": "always_fails.sh",
        "max_restarts": 2, "timeout_seconds": 60})
    assert status == 201, c
    done = finished(env, c["id"], timeout=120)
    assert done["status"] == "failed"
    assert "max_restarts 2 reached" in done["reason"], done["reason"]
    assert done["restarts"] == 2 and [g["cause"] for g in done["generations"]] == ["start", "restart", "restart"]
    assert "run 2" in cluster_log(env, c["id"])
    assert_nothing_left(env, c["id"])
