"""musterd --backend kubernetes against a real control plane: label integration, root only.

One testbed (tests/kubernetes_testbed.py: etcd, kube-apiserver, controller
manager, scheduler and a kubelet on containerd + runc in a network namespace,
2 CPUs and 2 GiB allocatable) serves every test of this module, in order:
  - a worker runs as a pod: its agent registers from the pod's IP, kubectl
    (the outside witness) sees the labels, requests = limits, the token only
    as a Secret reference; a stop deletes the pod, and its log is still read
    from musterd after the pod is gone;
  - a worker that asks more memory than any node has waits `scheduling`
    with the scheduler's reason (Insufficient memory);
  - a cluster's tasks that do not fit together create no pod at all and
    wait with the gang's reason.
"""
import json
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from kubernetes_testbed import KubernetesTestbed, have_kubernetes  # noqa: E402

from sdk_daemon import Daemon, binary_dir  # noqa: E402
from testutil import wait_for  # noqa: E402

WHY_NOT = have_kubernetes()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"a Kubernetes testbed cannot run here: {WHY_NOT}")

SOURCE_DIR = os.environ.get("MUSTER_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def bed():
    with KubernetesTestbed(nodes=1, tag="ki", cpus=2, memory_mb=2048) as b:
        yield b


@pytest.fixture(scope="module")
def daemon(bed, tmp_path_factory):
    project = tmp_path_factory.mktemp("k8s-project")
    os.chmod(project, 0o755)
    state = tmp_path_factory.mktemp("k8s-state")
    # The pods run this checkout's build and SDK.
    args = bed.musterd_backend_args([binary_dir(), SOURCE_DIR])
    args += ["--startup-timeout", "90", "--heartbeat-timeout", "60"]
    d = Daemon(project, state, listen=f"{bed.host_address}:0", backend="kubernetes",
               unset_env=("PYTHONPATH", "MUSTER_RUNTIME_PATH", "MUSTER_BINARY_DIR"), extra_args=args).start()
    yield d
    d.stop()


def pods(bed, worker_id=None):
    selector = "muster.io/worker=" + worker_id if worker_id else "muster.io/daemon"
    return bed.get_json("pods", "-n", bed.namespace, "-l", selector)["items"]


def test_a_worker_is_a_pod_and_its_log_outlives_it(bed, daemon):
    c = daemon.client()
    [w] = c.launch_workers(n=1, cpu=0.5, memory=0.25,
                           code="import socket; print('hello from', socket.gethostname(), flush=True)\n"
                                "import time; time.sleep(300)")
    up = c.await_workers([w], wait_for_completion=False, timeout_seconds=120)
    assert not up["failures"], [(f["status"], f["reason"], f.get("log_tail")) for f in up["failures"]]
    [pod] = pods(bed, w["id"])
    assert up["workers"][0]["ip_address"] == pod["status"]["podIP"]
    labels = pod["metadata"]["labels"]
    assert labels["muster.io/worker"] == w["id"] and labels["muster.io/daemon"]
    [container] = pod["spec"]["containers"]
    want = {"cpu": "500m", "memory": "256Mi"}
    assert container["resources"] == {"requests": want, "limits": want}, container["resources"]
    assert pod["spec"]["restartPolicy"] == "Never"
    env = {e["name"]: e for e in container["env"]}
    assert env["MUSTER_AGENT_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == pod["metadata"]["name"] + "-token"
    assert env["MUSTER_LIMITS_ENFORCED_BY"]["value"] == "kubernetes"
    assert not any(k.startswith("MUSTER_LOG_") for k in env)
    wait_for(lambda: "hello from" in c.worker_logs(w["id"]), 60, interval=0.3, what="the pod's output in musterd")
    limits = c.get_worker(w["id"]).get("limits") or {}
    assert "kubernetes" in json.dumps(limits), limits

    c.stop_workers(w["id"])
    assert c.get_worker(w["id"])["status"] == "stopped"
    wait_for(lambda: not pods(bed, w["id"]), 90, interval=0.5, what="the pod to be deleted")
    assert not bed.get_json("secrets", "-n", bed.namespace, "-l", "muster.io/worker=" + w["id"])["items"] or \
        wait_for(lambda: not bed.get_json("secrets", "-n", bed.namespace, "-l", "muster.io/worker=" + w["id"])["items"],
                 30, interval=0.5, what="the Secret to be deleted")
    assert "hello from" in c.worker_logs(w["id"]), "the log is gone with the pod"


def test_a_worker_too_big_for_any_node_waits_with_the_schedulers_reason(bed, daemon):
    c = daemon.client()
    [w] = c.launch_workers(n=1, cpu=0.5, memory=4, code="print('never')")
    got = wait_for(lambda: (lambda x: x if "Insufficient memory" in (x.get("reason") or "") else None)(
        c.get_worker(w["id"])), 60, interval=0.5, what="the scheduler's reason on the worker")
    assert got["status"] == "scheduling", got
    assert "Unschedulable" in got["reason"], got["reason"]
    c.stop_workers(w["id"])
    wait_for(lambda: not pods(bed, w["id"]), 60, interval=0.5, what="the pending pod to be deleted")


def test_a_cluster_that_does_not_fit_creates_no_pod(bed, daemon):
    c = daemon.client()
    # 3 tasks of 1 CPU on a node with 2 allocatable: all or none, so none.
    cluster = c.create_cluster(mode="ps", n_workers=2, n_ps=1, cpu=1, memory=0.25, timeout_seconds=600)
    ids = [i for group in cluster["workers"].values() for i in group]
    assert len(ids) == 3
    for wid in ids:
        got = wait_for(lambda: (lambda x: x if "whole group" in (x.get("reason") or "") else None)(c.get_worker(wid)),
                       30, interval=0.5, what="the gang's reason on task " + wid)
        assert got["status"] == "scheduling", got
        assert got["reason"].startswith("waiting for the whole group of 3 to fit: 3 CPUs"), got["reason"]
    time.sleep(2)
    started = [p["metadata"]["name"] for p in pods(bed) if p["metadata"]["labels"]["muster.io/worker"] in ids]
    assert not started, "half a gang has pods: %s" % started
    c.stop_cluster(cluster["id"])
