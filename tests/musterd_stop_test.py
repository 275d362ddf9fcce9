"""Stops against a real musterd (local backend): no convoy, and stops that stop.

- 32 workers stopped at once, each by its own request, beside 16 healthy
  workers that heartbeat every 0.5 s: every stop answers long before the
  10 s grace (the waiting happens on the backend's thread, not the
  request's), /healthz stays prompt, no healthy worker is marked lost, and
  the stopped scripts (which ignore SIGTERM) are SIGKILLed after the grace.
- Escapees: a script that starts `setsid sleep` and a double-forked sleep,
  then either waits (it is stopped) or exits 0: every such process ends with
  its worker, with the worker's cgroup and without (the agent's subreaper).
"""
import concurrent.futures
import os
import sys
import time
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from sdk_daemon import Daemon, RestApi, pid_alive, sdk_session, write_scripts  # noqa: E402
from testutil import wait_for  # noqa: E402

import muster  # noqa: E402

SCRIPTS = {
    "healthy.sh": "sleep 600\n",
    # Ignores SIGTERM, so only the SIGKILL after the grace ends it.
    "stubborn.sh": """\
        trap '' TERM
        echo "pid=$$"
        while true; do sleep 0.2; done
    """,
    # Escapees: one in a session of its own, one double-forked (its parent
    # exits, so it is re-parented), then wait, or exit 0 with them running.
    "escape.sh": """\
        setsid sleep 600 &
        echo "setsid=$!"
        ( sleep 601 & echo "dfork=$!" )
        echo ready
        if [ "$1" = wait ]; then sleep 600; fi
        exit 0
    """,
}

GRACE_S = 10


def log_pids(client, worker_id, names):
    text = client.worker_logs(worker_id)
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key in names and value.isdigit():
            found[key] = int(value)
    return found if set(found) == set(names) else None


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
    args = ["--heartbeat-interval", "0.5", "--heartbeat-timeout", "4", "--stop-grace", str(GRACE_S),
            "--max-workers", "64"]
    with Daemon(project, tmp_path_factory.mktemp("state"), extra_args=args) as d, sdk_session(d):
        yield d


def test_32_concurrent_stops_answer_at_once_and_healthy_workers_live_on(daemon):
    client = muster.Client()
    # 4.8 CPUs in all on a 2-core host, on purpose: musterd's default --overcommit=true runs them (with a warning).
    healthy = client.launch_workers(n=16, cpu=0.1, memory=0.1, kernel="bash", script="healthy.sh")
    stubborn = client.launch_workers(n=32, cpu=0.1, memory=0.1, kernel="bash", script="stubborn.sh")
    ready = client.await_workers(healthy + stubborn, wait_for_completion=False, timeout_seconds=120, progress=False)
    assert not ready["failures"], ready["failures"]
    pids = {w["id"]: wait_for(lambda w=w: log_pids(client, w["id"], ["pid"]), what="pid of " + w["id"])["pid"]
            for w in stubborn}
    api = RestApi(daemon, timeout=60)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def stop(worker):
        start = time.monotonic()
        status, body = api.call("POST", "/api/v1/workers/stop", {"ids": [worker["id"]]})
        return status, body, time.monotonic() - start

    def healthz():
        start = time.monotonic()
        with opener.open(daemon.url + "/healthz", timeout=30) as resp:
            resp.read()
        return time.monotonic() - start

    with concurrent.futures.ThreadPoolExecutor(max_workers=40) as pool:
        stops = [pool.submit(stop, w) for w in stubborn]
        probes = [pool.submit(healthz) for _ in range(5)]
        answers = [f.result() for f in stops]
        probe_times = [f.result() for f in probes]
    for status, body, took in answers:
        assert status == 200, body
        assert body["workers"][0]["status"] == "stopped", body
        # Blocking on the grace would take >= 10 s per stop (and queue the rest).
        assert took < GRACE_S / 2, "a stop waited %.1f s: it held its handler for the grace" % took
    assert max(probe_times) < GRACE_S / 2, probe_times

    # The stubborn scripts ignore SIGTERM: alive until the grace, then killed.
    assert any(pid_alive(p) for p in pids.values()), "SIGTERM alone ended scripts that ignore it"
    wait_for(lambda: not any(pid_alive(p) for p in pids.values()), timeout=GRACE_S + 15,
             what="every stopped script to be SIGKILLed after the grace")
    # Meanwhile (well past the 4 s heartbeat timeout) no healthy worker was lost.
    statuses = {w["id"]: client.get_worker(w["id"])["status"] for w in healthy}
    assert set(statuses.values()) == {"running"}, statuses
    client.stop_workers(*healthy)


@pytest.mark.parametrize("cgroups", ["true", "false"])
@pytest.mark.parametrize("ending", ["stopped", "exits"])
def test_escapees_end_with_their_worker(tmp_path, cgroups, ending):
    project = tmp_path / "project"
    project.mkdir()
    write_scripts(project, SCRIPTS)
    args = ["--stop-grace", "2", "--backend-opt", "cgroups=" + cgroups]
    with Daemon(project, tmp_path / "state", extra_args=args) as d:
        client = muster.Client(d.url, d.token)
        [w] = client.launch_workers(n=1, cpu=0.1, memory=0.1, kernel="bash", script="escape.sh",
                                    args=["wait"] if ending == "stopped" else [])
        pids = wait_for(lambda: log_pids(client, w["id"], ["setsid", "dfork"]), timeout=60, what="escapee pids")
        if ending == "stopped":
            assert all(pid_alive(p) for p in pids.values())
            client.stop_workers(w)
            final = "stopped"
        else:
            final = "succeeded"
        wait_for(lambda: client.get_worker(w["id"])["status"] == final, timeout=60, what="worker " + final)
        wait_for(lambda: not any(pid_alive(p) for p in pids.values()), timeout=15,
                 what="the escapees %s to end with their worker (cgroups=%s)" % (pids, cgroups))
        if cgroups == "true":
            cgroup = [line for line in client.worker_logs(w["id"]).splitlines() if "in cgroup" in line]
            assert cgroup, client.worker_logs(w["id"])
            path = cgroup[0].rsplit("in cgroup ", 1)[1].strip()
            wait_for(lambda: not os.path.exists(path), timeout=10, what="the worker's cgroup %s removed" % path)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
