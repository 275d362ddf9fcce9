"""Admission against a real musterd (local backend) and the Python SDK.

This host's CPUs are N (the daemon counts the CPUs it may run on, as
os.sched_getaffinity does; 2 on the build VM):
- by default (overcommit allowed), N + 1 workers of cpu=1 all run, and the
  launch comes back with a MusterWarning naming the totals;
- with --overcommit=false the last of them waits in `scheduling` with the
  reason ("waiting for 1 CPU: 3 of 2 requested") and starts once another
  ends; a ps cluster that does not fit beside a running worker waits whole
  (every task `scheduling`, none started) and starts whole once it ends.
Each daemon has its own project and state dir, removed afterwards.
"""
import os
import time

import pytest

import muster
from sdk_daemon import Daemon, RestApi, sdk_session, write_scripts

CPUS = len(os.sched_getaffinity(0))

SCRIPTS = {
    "serve.py": """
        import time
        print("serving", flush=True)
        time.sleep(600)
    """,
}


def wait_status(worker_id, wanted, timeout=60):
    deadline = time.monotonic() + timeout
    w = muster.get_worker(worker_id)
    while w["status"] not in wanted and time.monotonic() < deadline:
        time.sleep(0.1)
        w = muster.get_worker(worker_id)
    return w


@pytest.fixture
def daemon_with(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    write_scripts(project, SCRIPTS)
    started = []

    def start(*args):
        d = Daemon(project, tmp_path / ("state%d" % len(started)), extra_args=list(args)).start()
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


def test_by_default_the_launch_past_the_host_runs_with_a_warning(daemon_with):
    d = daemon_with()
    with sdk_session(d):
        with pytest.warns(muster.MusterWarning) as caught:
            workers = muster.launch_workers(n=CPUS + 1, cpu=1, memory=0.1, script="serve.py")
        texts = [str(w.message) for w in caught]
        wanted = ("musterd: this launch takes the host's CPUs past its capacity: %d of %d CPUs requested (0 by the "
                  "workers already there, %d by this launch); the workers share the CPUs (musterd "
                  "--overcommit=false makes such workers wait until the host has room)" % (CPUS + 1, CPUS, CPUS + 1))
        assert wanted in texts, texts
        up = muster.await_workers(workers, wait_for_completion=False, timeout_seconds=60, progress=False)
        assert up["failures"] == [], up["failures"]
        muster.stop_workers()


def test_without_overcommit_the_last_worker_waits_until_one_ends(daemon_with):
    d = daemon_with("--overcommit=false")
    with sdk_session(d):
        with pytest.warns(muster.MusterWarning) as caught:
            workers = muster.launch_workers(n=CPUS + 1, cpu=1, memory=0.1, script="serve.py")
        reason = "waiting for 1 CPU: %d of %d requested" % (CPUS + 1, CPUS)
        assert ("musterd: 1 of %d worker(s) wait in scheduling until this host has room (musterd "
                "--overcommit=false): %s" % (CPUS + 1, reason)) in [str(w.message) for w in caught]
        ids = [w["id"] for w in workers]
        up = muster.await_workers(ids[:-1], wait_for_completion=False, timeout_seconds=60, progress=False)
        assert up["failures"] == [], up["failures"]
        time.sleep(1)  # a few of the daemon's passes: the last one still waits
        last = muster.get_worker(ids[-1])
        assert last["status"] == "scheduling" and last["reason"] == reason, last

        muster.stop_workers(ids[0])
        last = wait_status(ids[-1], ("running",))
        assert last["status"] == "running", last
        assert last["reason"] in ("", None), last
        muster.stop_workers()


def test_without_overcommit_a_cluster_waits_whole(daemon_with):
    d = daemon_with("--overcommit=false")
    api = RestApi(d)
    with sdk_session(d):
        holder = muster.launch_workers(n=1, cpu=1, memory=0.1, script="serve.py")
        assert muster.await_workers(holder, wait_for_completion=False, timeout_seconds=60,
                                    progress=False)["failures"] == []
        # 1 PS + 1 worker of cpu=N/2: the host's N CPUs, one too many beside the holder.
        status, c = api.call("POST", "/api/v1/clusters", {
            "mode": "ps", "n_ps": 1, "n_workers": 1, "cpu": CPUS / 2, "memory": 0.1,
            "worker_script": "serve.py", "ps_script": "serve.py", "timeout_seconds": 120})
        assert status == 201, c
        reason = "waiting for 1 CPU: %d of %d requested" % (CPUS + 1, CPUS)
        assert ("2 of 2 worker(s) wait in scheduling until this host has room (musterd --overcommit=false): " +
                reason) in c.get("warnings", []), c
        tasks = c["workers"]["ps"] + c["workers"]["worker"]
        time.sleep(1)
        for wid in tasks:
            w = muster.get_worker(wid)
            assert w["status"] == "scheduling" and w["reason"] == reason, w

        muster.stop_workers(holder[0])
        for wid in tasks:
            assert wait_status(wid, ("running",))["status"] == "running"
        status, stopped = api.call("POST", "/api/v1/clusters/%s/stop" % c["id"])
        assert status == 200, stopped
