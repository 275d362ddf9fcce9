"""musterd --backend slurm against a real Slurm: label integration, root only.

One testbed (tests/slurm_testbed.py: munged, slurmctld, two slurmd nodes each
in its own network namespace with its own address and hostname, 2 CPUs and
2 GB each) serves every test of this module, in order:
  - launch/await/stop: two 2-CPU workers land one per node, report the
    nodes' addresses, and stop_workers cancels their jobs;
  - a worker that does not fit waits as `scheduling` with Slurm's reason
    (Resources), then runs once a node frees up;
  - scancel from outside is reported as stopped, naming scancel;
  - a ps cluster (1 PS + 2 workers) and a 2-rank mpi cluster (one rank per
    node, mpirun's daemons started through srun) train fashion_mnist for an
    epoch across the nodes;
  - kill -9 of musterd and a restart on the same state dir and port re-adopts
    a running job by its job id (it keeps running; stop cancels it);
  - a killed node (slurmd and everything on it, as a crash) is reported lost,
    naming the node.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from slurm_testbed import SlurmTestbed, have_slurm  # noqa: E402

import muster  # noqa: E402
from sdk_daemon import Daemon, binary_dir  # noqa: E402
from testutil import wait_for  # noqa: E402

WHY_NOT = have_slurm()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"a real Slurm cannot run here: {WHY_NOT}")


@pytest.fixture(scope="module")
def bed():
    with SlurmTestbed(nodes=2, tag="it", cpus=2, memory_mb=2048) as b:
        os.environ["SLURM_CONF"] = str(b.dir / "slurm.conf")
        yield b


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    d = tmp_path_factory.mktemp("slurm-project")
    os.chmod(d, 0o755)
    # Scripts are named relative to the project: a wrapper for the training program.
    (d / "fm.sh").write_text('#!/bin/sh\nexec %s "$@"\n' % os.path.join(binary_dir(), "bin", "fashion_mnist"))
    os.chmod(d / "fm.sh", 0o755)
    return d


def start_daemon(bed, project, state, port=0):
    # Started as from a plain shell: the workers get muster's package and extension from musterd.
    return Daemon(project, state, listen=f"{bed.controller_address}:{port}", backend="slurm",
                  unset_env=("PYTHONPATH", "MUSTER_RUNTIME_PATH", "MUSTER_BINARY_DIR"),
                  extra_args=["--backend-opt", f"master_address={bed.controller_address}",
                              "--backend-opt", "poll_ms=300", "--heartbeat-timeout", "60",
                              "--startup-timeout", "60", "--worker-log-max-size", "256KiB"]).start()


@pytest.fixture(scope="module")
def daemon(bed, project, tmp_path_factory):
    d = start_daemon(bed, project, tmp_path_factory.mktemp("slurm-state"))
    yield d
    d.stop()


def client(d):
    return d.client()


def squeue(bed):
    # (Slurm 22.05's squeue --json ignores its filter options: filter here.)
    out = subprocess.run(["squeue", "--json", "--states=all"], capture_output=True, text=True,
                         env=bed.env(), check=True).stdout
    return {str(j["job_id"]): j for j in json.loads(out)["jobs"]}


def job_of(bed, worker_id):
    jobs = [j for j in squeue(bed).values() if j["name"] == f"muster-{worker_id}"]
    assert jobs, f"no Slurm job named muster-{worker_id}"
    return str(jobs[0]["job_id"]), jobs[0]


def worker(c, wid):
    return c.get_worker(wid)


def test_launch_await_stop_on_both_nodes(bed, daemon):
    c = client(daemon)
    assert c.url.startswith("https://") and c.tls.fingerprint, "beyond loopback musterd speaks only TLS"
    ws = c.launch_workers(n=2, cpu=2, memory=0.5, code="import muster.torch, muster.runtime; "
                          "muster.runtime.extension(); print('imports ok', flush=True); "
                          "import time; time.sleep(120)")
    up = c.await_workers(ws, wait_for_completion=False, timeout_seconds=90)
    assert not up["failures"], [(f["status"], f["reason"], f.get("log_tail")) for f in up["failures"]]
    ips = sorted(w["ip_address"] for w in up["workers"])
    assert ips == sorted(bed.node_address(n) for n in bed.nodes), ips
    jobs = [job_of(bed, w["id"]) for w in ws]
    assert sorted(j["nodes"] for _, j in jobs) == sorted(bed.nodes)
    assert all(j["cpus"] == 2 for _, j in jobs), [j["cpus"] for _, j in jobs]
    for w in ws:
        wait_for(lambda: "imports ok" in c.worker_logs(w["id"]), 60, interval=0.3, what="muster imported on a node")
    c.stop_workers(*[w["id"] for w in ws])
    for w in ws:
        assert worker(c, w["id"])["status"] == "stopped"
    wait_for(lambda: all(job_of(bed, w["id"])[1]["job_state"] in ("CANCELLED", "COMPLETED") for w in ws),
             60, interval=0.3, what="the jobs to end in Slurm")


def test_a_jobs_output_is_capped_by_the_agents_relay(bed, daemon):
    """sbatch --output names the worker's log; the agent's relay writes it under the cap."""
    c = client(daemon)
    code = "import sys\nfor i in range(40000): sys.stdout.write('%08d slurm output line\\n' % i)\nprint('end')\n"
    [w] = c.launch_workers(n=1, cpu=1, memory=0.5, code=code)
    wait_for(lambda: worker(c, w["id"])["status"] == "succeeded", 90, interval=0.3, what="the spewing job")
    log = os.path.join(daemon.state_dir, "workers", w["id"], "output.log")
    assert os.path.getsize(log) <= 256 * 1024 and os.path.getsize(log + ".1") <= 256 * 1024
    assert not os.path.exists(log + ".2")
    text = c.worker_logs(w["id"])
    assert text.startswith("[muster] ") and text.endswith("00039999 slurm output line\nend\n"), text[-200:]


def test_pending_for_resources_shows_scheduling_with_the_reason(bed, daemon):
    c = client(daemon)
    big = c.launch_workers(n=2, cpu=2, memory=0.5, code="import time; time.sleep(120)")
    c.await_workers(big, wait_for_completion=False, timeout_seconds=90)
    late = c.launch_workers(n=1, cpu=2, memory=0.5, code="import time; time.sleep(120)")[0]
    w = wait_for(lambda: (lambda w: w if "Resources" in (w.get("reason") or "") else None)(worker(c, late["id"])),
                 30, interval=0.3, what="the queued worker's Slurm reason")
    assert w["status"] == "scheduling", w
    c.stop_workers(big[0]["id"])
    up = c.await_workers([late], wait_for_completion=False, timeout_seconds=60)
    assert not up["failures"], [(f["status"], f["reason"], f.get("log_tail")) for f in up["failures"]]
    assert worker(c, late["id"])["status"] == "running"
    c.stop_workers(*[x["id"] for x in big + [late]])


def test_scancel_from_outside_is_reported(bed, daemon):
    c = client(daemon)
    w = c.launch_workers(n=1, cpu=1, memory=0.5, code="import time; time.sleep(120)")[0]
    c.await_workers([w], wait_for_completion=False, timeout_seconds=60)
    job, _ = job_of(bed, w["id"])
    subprocess.run(["scancel", job], env=bed.env(), check=True)
    got = wait_for(lambda: (lambda x: x if x["status"] not in ("running", "starting") else None)(worker(c, w["id"])),
                   40, interval=0.3, what="the cancelled worker to end")
    assert got["status"] in ("stopped", "failed"), got
    # Either Slurm's state came first (stopped, "scancel") or the agent saw
    # SIGTERM and reported its script's end; both must name what happened.
    assert "scancel" in got["reason"] or "signal" in got["reason"] or got["exit_code"] not in (None, 0), got


def test_ps_cluster_trains_fashion_mnist_across_nodes(bed, daemon, project):
    c = client(daemon)
    spec, _ = c.run_cluster(n_workers=2, n_ps=1, cpu=1, memory=0.9, worker_script="fm.sh",
                            args="--model mlp --epochs 1 --limit 6000 --test-limit 2000", timeout_seconds=120)
    hosts = {addr.rsplit(":", 1)[0] for addrs in spec.values() for addr in addrs}
    assert hosts <= {bed.node_address(n) for n in bed.nodes}, hosts
    assert len(hosts) == 2, f"the 3 tasks should need both nodes (2 CPUs each): {hosts}"
    cl = [x for x in c.list_clusters() if x["mode"] == "ps"][-1]
    assert cl["status"] == "succeeded", cl
    logs = c.cluster_logs(cl["id"])
    assert "test_accuracy=" in logs, logs[-2000:]


def test_mpi_cluster_allreduce_across_nodes(bed, daemon):
    """mpirun on the daemon's host starts its daemons inside the workers' Slurm
    jobs (srun --overlap, through muster-slurm-rsh); the two ranks, one per
    node, train with muster's ring over MPI between the nodes."""
    c = client(daemon)
    cl = c.horovodrun(2, "fm.sh", cpu=2, memory=0.9, args="--model mlp --epochs 1 --limit 6000 --test-limit 2000",
                      timeout_seconds=120, wait_for_completion=True, completion_timeout_seconds=300)
    logs = c.cluster_logs(cl["id"])
    assert cl["status"] == "succeeded", (cl, logs[-3000:])
    assert "plm_rsh_agent" in cl["mpirun_argv"], cl["mpirun_argv"]
    assert "test_accuracy=" in logs, logs[-2000:]
    hosts = {w["ip_address"] for w in c.list_workers() if w.get("cluster_id") == cl["id"]}
    assert hosts == {bed.node_address(n) for n in bed.nodes}, hosts
    # The line the user is shown is still the plain horovodrun line.
    assert cl["horovodrun_command"].startswith("horovodrun -np 2 -H "), cl["horovodrun_command"]


def test_restart_readopts_running_jobs(bed, daemon, project, tmp_path_factory):
    state = tmp_path_factory.mktemp("slurm-restart")
    d = start_daemon(bed, project, state)
    try:
        c = client(d)
        w = c.launch_workers(n=1, cpu=1, memory=0.5, code="import time; time.sleep(300)")[0]
        c.await_workers([w], wait_for_completion=False, timeout_seconds=60)
        job, _ = job_of(bed, w["id"])
        port = int(d.url.rsplit(":", 1)[1])
        os.killpg(d.proc.pid, signal.SIGKILL)
        d.proc.wait()
        d.proc = None
        d2 = start_daemon(bed, project, state, port=port)
        try:
            c2 = client(d2)
            time.sleep(3)  # a few heartbeats and squeue polls
            assert worker(c2, w["id"])["status"] == "running"
            assert job_of(bed, w["id"])[1]["job_state"] == "RUNNING"
            c2.stop_workers(w["id"])
            assert worker(c2, w["id"])["status"] == "stopped"
            wait_for(lambda: job_of(bed, w["id"])[1]["job_state"] != "RUNNING", 60, interval=0.3,
                     what="the re-adopted job to be cancelled")
            assert job_of(bed, w["id"])[0] == job
        finally:
            d2.stop()
    finally:
        if d.proc is not None:
            d.stop()


def test_a_killed_node_is_reported_lost_naming_it(bed, daemon):
    c = client(daemon)
    w = c.launch_workers(n=1, cpu=1, memory=0.5, code="import time; time.sleep(300)")[0]
    c.await_workers([w], wait_for_completion=False, timeout_seconds=60)
    _, job = job_of(bed, w["id"])
    node = job["nodes"]
    bed.kill_node(node)
    got = wait_for(lambda: (lambda x: x if x["status"] == "lost" else None)(worker(c, w["id"])),
                   60, interval=0.3, what="the worker on the killed node to be lost")
    assert node in got["reason"] or "heartbeat" in got["reason"], got
