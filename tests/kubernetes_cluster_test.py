"""musterd --backend kubernetes on a real control plane, faults and cluster modes: label integration, root only.

One two-node testbed (tests/kubernetes_testbed.py) serves every test of this
module, in order; kubectl is the outside witness:
  - a worker over its memory limit ends `failed`, its reason naming OOMKilled;
  - musterd killed with SIGKILL and started again on its state dir re-adopts
    its running pod: the worker stays running, its log goes on, it succeeds;
  - a ps cluster (TF_CONFIG with pod IPs) and a torchrun cluster (gloo
    all-reduce across pods) run to success;
  - an mpi cluster runs mpi_hello's ranks in two pods, mpirun on musterd's
    host reaching them with muster-kube-rsh (kubectl exec), no sshd;
  - an elastic cluster whose pod is deleted with kubectl (an outside actor)
    gets a replacement pod (kubectl's events show it started), re-forms its
    world and succeeds;
  - the ported CML notebook (tests/notebooks/cml_ported.ipynb) runs unchanged
    in a real kernel (nbclient) against a musterd on this backend: it reads
    each worker's log right after await_workers, which on pods holds the
    worker's end until the log followed from the kubelet is complete;
  - last, a kubelet killed: its node goes NotReady and its running worker
    `lost`, the node named in the reason (the kubelet is started again after).
"""
import ipaddress
import json
import os
import shutil
import signal
import socket
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from kubernetes_testbed import KubernetesTestbed, have_kubernetes  # noqa: E402

from sdk_daemon import Daemon, binary_dir, sdk_session  # noqa: E402
from testutil import wait_for  # noqa: E402

PROBE = "muster-elastic-rdzv-probe"  # tests/elastic_rdzv_probe.cc: an elastic rank, musterd's rendezvous only

WHY_NOT = have_kubernetes()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"a Kubernetes testbed cannot run here: {WHY_NOT}")

SOURCE_DIR = os.environ.get("MUSTER_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ps mode: every task writes its TF_CONFIG to its log; the workers end, the PS
# serves until the cluster stops it.
PS_TASK = r'''
import json, os, sys, time
tf = json.loads(os.environ["TF_CONFIG"])
print("task", tf["task"]["type"], tf["task"]["index"], "cluster", json.dumps(tf["cluster"]), flush=True)
if tf["task"]["type"] == "ps":
    while True:
        time.sleep(1)
'''

GLOO_ALLREDUCE = r'''
import torch
import torch.distributed as dist
dist.init_process_group("gloo")   # env:// from torchrun's variables
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print("rank %d of %d: sum %.0f" % (dist.get_rank(), dist.get_world_size(), t.item()), flush=True)
dist.barrier()
dist.destroy_process_group()
'''


@pytest.fixture(scope="module")
def bed():
    with KubernetesTestbed(nodes=2, tag="kc", cpus=2, memory_mb=3072, subnet_octet=219) as b:
        yield b


def start_daemon(bed, project, state, port=0):
    # The pods run this checkout's build and SDK.
    args = bed.musterd_backend_args([binary_dir(), SOURCE_DIR])
    args += ["--startup-timeout", "120", "--heartbeat-timeout", "60"]
    return Daemon(project, state, listen=f"{bed.host_address}:{port}", backend="kubernetes",
                  unset_env=("PYTHONPATH", "MUSTER_RUNTIME_PATH", "MUSTER_BINARY_DIR"), extra_args=args).start()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    p = tmp_path_factory.mktemp("k8s-project")
    os.chmod(p, 0o755)
    (p / "ps_task.py").write_text(PS_TASK)
    (p / "gloo_allreduce.py").write_text(GLOO_ALLREDUCE)
    shutil.copy(os.path.join(binary_dir(), "bin", PROBE), str(p / PROBE))
    os.chmod(p / PROBE, 0o755)
    shutil.copy(os.path.join(binary_dir(), "bin", "muster-mpi-hello"), str(p / "mpi_hello"))
    os.chmod(p / "mpi_hello", 0o755)
    return p


@pytest.fixture(scope="module")
def daemon(bed, project, tmp_path_factory):
    d = start_daemon(bed, project, tmp_path_factory.mktemp("k8s-state"))
    yield d
    d.stop()


def pods(bed, worker_id=None):
    selector = "muster.io/worker=" + worker_id if worker_id else "muster.io/daemon"
    return bed.get_json("pods", "-n", bed.namespace, "-l", selector)["items"]


def ended(c, wid, timeout):
    return wait_for(lambda: (lambda w: w if w["status"] in ("succeeded", "failed", "stopped", "lost") else None)(
        c.get_worker(wid)), timeout, interval=0.5, what="worker %s to end" % wid)


def test_a_worker_over_its_memory_limit_fails_as_oomkilled(bed, daemon):
    c = daemon.client()
    t0 = time.monotonic()
    [w] = c.launch_workers(n=1, cpu=0.25, memory=0.125,
                           code="print('allocating', flush=True)\nb = b'x' * (512 << 20)\nprint('survived')")
    got = ended(c, w["id"], 180)
    print("OOM reported after %.1f s: %s" % (time.monotonic() - t0, got["reason"]))
    assert got["status"] == "failed", got
    assert "OOMKilled" in got["reason"] or "out of memory" in got["reason"], got["reason"]
    assert "survived" not in c.worker_logs(w["id"])
    # The witness, while the pod is there (it is deleted once its log is read):
    # the container's own termination reason.
    # The agent reports before its container has ended: wait for the one or the other.
    def container_end():
        got = pods(bed, w["id"])
        if not got:
            return "gone"
        [cs] = got[0]["status"].get("containerStatuses") or [{}]
        return (cs.get("state") or {}).get("terminated")
    end = wait_for(container_end, 60, interval=0.5, what="the container to end or the pod to be deleted")
    assert end == "gone" or end["reason"] == "OOMKilled", end


def test_a_restarted_musterd_adopts_its_running_pod(bed, project, tmp_path_factory):
    state = tmp_path_factory.mktemp("k8s-restart-state")
    # The same address across the restart, as a daemon's is: the agents keep theirs.
    with socket.socket() as s:
        s.bind((bed.host_address, 0))
        port = s.getsockname()[1]
    d = start_daemon(bed, project, state, port)
    try:
        c = d.client()
        code = ("import time\nfor i in range(40):\n    print('tick', i, flush=True)\n    time.sleep(1)\n"
                "print('done ticking', flush=True)")
        [w] = c.launch_workers(n=1, cpu=0.25, memory=0.25, code=code)
        up = c.await_workers([w], wait_for_completion=False, timeout_seconds=180)
        assert not up["failures"], up["failures"]
        wait_for(lambda: "tick 2" in c.worker_logs(w["id"]), 60, interval=0.3, what="the first ticks")
        [pod] = pods(bed, w["id"])
        os.killpg(d.proc.pid, signal.SIGKILL)
        d.proc.wait(10)
        d.proc = None
        time.sleep(3)  # the pod goes on without its daemon
        d.start(timeout=60)
        c = d.client()
        got = c.get_worker(w["id"])
        assert got["status"] == "running", got
        [again] = pods(bed, w["id"])
        assert again["metadata"]["uid"] == pod["metadata"]["uid"], "the pod was replaced, not adopted"
        done = ended(c, w["id"], 120)
        assert done["status"] == "succeeded", done
        log = c.worker_logs(w["id"])
        assert "tick 0" in log and "tick 39" in log and "done ticking" in log, log[-2000:]
        # Nothing lost and in order. The followed log's resume point is kept
        # after every chunk written, so at most the chunk being written at
        # the SIGKILL (a line, at one tick a second) comes twice.
        seen = [int(line.split()[1]) for line in log.splitlines() if line.startswith("tick ")]
        assert set(seen) == set(range(40)) and seen == sorted(seen), seen
        assert len(seen) - 40 <= 1, seen
    finally:
        d.stop()


def test_a_ps_cluster_trains_to_success_on_pods(bed, daemon):
    c = daemon.client()
    cluster = c.create_cluster(mode="ps", n_workers=2, n_ps=1, cpu=0.25, memory=0.25, worker_script="ps_task.py",
                               ps_script="ps_task.py", timeout_seconds=300)
    done = c.await_cluster(cluster["id"], timeout_seconds=240)
    assert done["status"] == "succeeded", done
    spec = done["cluster_spec"]
    # TF_CONFIG names the pods' own addresses, one per task.
    subnets = [ipaddress.ip_network(bed.pod_subnet(n)) for n in bed.node_names]
    hosts = {a.rsplit(":", 1)[0] for a in spec["ps"] + spec["worker"]}
    assert len(hosts) == 3, spec
    assert all(any(ipaddress.ip_address(h) in net for net in subnets) for h in hosts), (hosts, subnets)
    for wid in sum(cluster["workers"].values(), []):
        assert c.get_worker(wid)["ip_address"] in hosts
    for i, wid in enumerate(cluster["workers"]["worker"]):
        assert c.get_worker(wid)["status"] == "succeeded"
        # The log is followed from the pod and may trail the worker's end.
        want = "task worker %d cluster %s" % (i, json.dumps(spec))
        wait_for(lambda: want in c.worker_logs(wid), 30, interval=0.3, what="worker %d's TF_CONFIG in its log" % i)


def test_a_torchrun_cluster_all_reduces_across_pods(bed, daemon):
    c = daemon.client()
    cluster = c.create_cluster(mode="torchrun", n_workers=2, cpu=0.5, memory=0.75, worker_script="gloo_allreduce.py",
                               timeout_seconds=300)
    done = c.await_cluster(cluster["id"], timeout_seconds=240)
    logs = {wid: c.worker_logs(wid) for wid in cluster["workers"]["worker"]}
    assert done["status"] == "succeeded", (done, logs)
    for rank, wid in enumerate(cluster["workers"]["worker"]):
        want = "rank %d of 2: sum 3" % rank
        wait_for(lambda: want in c.worker_logs(wid), 30, interval=0.3, what="rank %d's sum in its log" % rank)


def test_an_mpi_cluster_runs_its_ranks_in_pods_without_sshd(bed, daemon):
    c = daemon.client()
    cluster = c.create_cluster(mode="mpi", n_workers=2, slots=1, cpu=0.5, memory=0.5, worker_script="mpi_hello",
                               launch=True, timeout_seconds=300)
    done = c.await_cluster(cluster["id"], timeout_seconds=240)
    log = c.cluster_logs(cluster["id"])
    assert done["status"] == "succeeded", (done, log)
    # mpirun reached the pods through muster-kube-rsh (kubectl exec), not ssh.
    assert "plm_rsh_agent" in done["mpirun_command"] and "muster-kube-rsh" in done["mpirun_command"], done
    subnets = [ipaddress.ip_network(bed.pod_subnet(n)) for n in bed.node_names]
    hosts = [line.split()[0] for line in done["hostfile"].splitlines()]
    assert len(hosts) == 2 and all(any(ipaddress.ip_address(h) in net for net in subnets) for h in hosts), done
    for rank in (0, 1):
        assert "mpi_hello rank %d of 2 allreduce sum 3 expected 3" % rank in log, log
    for wid in cluster["workers"]["worker"]:
        w = c.get_worker(wid)
        assert w["status"] == "succeeded" and w["ip_address"] in hosts, w


def pod_events(bed, worker_id):
    """The reasons of the events about the pod of `worker_id` (they outlive the pod)."""
    got = bed.get_json("events", "-n", bed.namespace)["items"]
    return [e["reason"] for e in got
            if e["involvedObject"].get("kind") == "Pod" and e["involvedObject"]["name"].endswith("-" + worker_id)]


def test_an_elastic_cluster_replaces_a_pod_deleted_with_kubectl_and_succeeds(bed, daemon, project):
    c = daemon.client()
    out = project / "elastic-out"
    out.mkdir()
    os.chmod(out, 0o777)
    # Each rank exits 0 once a world of 2 formed at generation 2 or later: the
    # survivor alone re-forms generation 2, the replacement joins it in 3.
    cluster = c.create_cluster(mode="elastic", n_workers=2, min_np=1, max_np=2, cpu=0.25, memory=0.25,
                               worker_script=PROBE, args=["--out", str(out), "--until-generation", "2",
                                                          "--until-size", "2"], timeout_seconds=300)
    cid = cluster["id"]

    def first_generation():
        cl = c.get_cluster(cid)
        assert cl["status"] not in ("failed", "stopped", "succeeded"), cl
        gens = cl.get("generations") or []
        if not gens or len(gens[0]["members"]) < 2:
            return None
        members = gens[0]["members"]
        return members if all("generation 1 rank" in c.worker_logs(w) for w in members) else None
    members = wait_for(first_generation, 240, interval=0.5, what="generation 1 of 2 ranks on pods")
    victim = members[1]
    [pod] = pods(bed, victim)
    t0 = time.monotonic()
    bed.kubectl("delete", "pod", "-n", bed.namespace, pod["metadata"]["name"], "--wait=false")
    done = c.await_cluster(cid, timeout_seconds=240)
    print("the cluster ended %.1f s after the pod's deletion: %s" % (time.monotonic() - t0, done["status"]))
    assert done["status"] == "succeeded", done
    history = done["generations"]
    [death] = history[0]["deaths"]
    assert death["worker_id"] == victim, history[0]
    [replaced] = history[0]["replacements"]
    assert replaced["replaced"] == victim, history[0]
    new = replaced["by"]
    assert history[-1]["members"][-1] == new and len(history[-1]["members"]) == 2, history
    assert c.get_worker(new)["status"] == "succeeded"
    # The witness: a new pod, for the replacement, was scheduled and started.
    reasons = wait_for(lambda: (lambda r: r if "Started" in r else None)(pod_events(bed, new)), 30, interval=0.5,
                       what="the replacement pod's Started event")
    assert "Scheduled" in reasons, reasons
    wait_for(lambda: "generation %d rank" % history[-1]["generation"] in c.worker_logs(new), 30, interval=0.3,
             what="the replacement's line in its log")


def test_the_ported_cml_notebook_runs_on_pods(bed, tmp_path_factory):
    notebooks = os.path.join(SOURCE_DIR, "examples", "notebook")
    sys.path.insert(0, notebooks)
    import run_notebook
    d = start_daemon(bed, SOURCE_DIR, tmp_path_factory.mktemp("k8s-notebook-state"))
    env = {"MUSTER_PROJECT_DIR": SOURCE_DIR, "PYTHONPATH": os.path.join(SOURCE_DIR, "sdk", "python"),
           "OMP_NUM_THREADS": "1"}
    try:
        with sdk_session(d, env=env):
            nb = run_notebook.run(os.path.join(SOURCE_DIR, "tests", "notebooks", "cml_ported.ipynb"), (),
                                  cwd=SOURCE_DIR, timeout=300)
        # The notebook asserts its own outcomes (each worker's log read right
        # after its await); what it printed:
        text = "".join(run_notebook.outputs_text(cell) for cell in nb.cells if cell.cell_type == "code")
        assert text.count(" succeeded 20") >= 2, text  # "<id> succeeded <running_at> <duration>"
        assert "muster: 2/2 workers succeeded" in text, text
        # Its four workers ran as pods: each one's address is in a node's pod subnet.
        subnets = [ipaddress.ip_network(bed.pod_subnet(n)) for n in bed.node_names]
        workers = d.client().list_workers()
        assert len(workers) == 4, workers
        for w in workers:
            assert w["status"] == "succeeded", w
            assert any(ipaddress.ip_address(w["ip_address"]) in net for net in subnets), (w, subnets)
    finally:
        d.stop()


def test_a_killed_kubelet_makes_its_workers_lost_naming_the_node(bed, daemon):
    c = daemon.client()
    [w] = c.launch_workers(n=1, cpu=0.25, memory=0.125, code="import time\ntime.sleep(600)")
    up = c.await_workers([w], wait_for_completion=False, timeout_seconds=180)
    assert not up["failures"], up["failures"]
    [pod] = pods(bed, w["id"])
    node = pod["spec"]["nodeName"]
    t0 = time.monotonic()
    bed.kill_kubelet(node)
    try:
        got = ended(c, w["id"], 120)
        print("lost after %.1f s: %s" % (time.monotonic() - t0, got["reason"]))
        assert got["status"] == "lost", got
        assert node in got["reason"] and "NotReady" in got["reason"], got["reason"]
        assert bed.node_ready(node) is not True
    finally:
        bed.restart_kubelet(node)
