"""Clusters against a real musterd on the local backend.

- ps mode, 1 PS + 2 workers: every task sees a valid TF_CONFIG with a
  distinct type/index and the same cluster; cluster.json (in the task's
  MUSTER_WORKER_DIR) matches; the PS is stopped once the workers are done
  and the cluster succeeds.
- a crashing worker fails the cluster with a reason naming it, and the other
  tasks are stopped (their processes are gone).
- mpi mode with launch=true runs a real mpirun of tests/mpi_hello.cc across
  2 slots and the cluster succeeds; a worker stopped while mpirun runs aborts
  it (ranks gone) and fails the cluster naming the worker.
- a restarted daemon still lists its clusters; one that had not ended is
  failed with the reason and its tasks stopped.
Each test has its own daemon, project and state dir, removed afterwards.
"""
import json
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from openapi_contract import ResponseObserver
from sdk_daemon import Daemon, RestApi, pid_alive

# Every answer of every test here is checked against api/openapi.yaml.
CONFORMANCE = ResponseObserver()

WRITE_TF_CONFIG = r'''
import json, os, sys, time
out = os.environ["OUT_DIR"]
wid = os.environ["MUSTER_WORKER_ID"]
with open(os.path.join(os.environ["MUSTER_WORKER_DIR"], "cluster.json")) as f:  # released beside the task
    file_config = json.load(f)
record = {"worker_id": wid, "pid": os.getpid(), "tf_config": os.environ.get("TF_CONFIG"),
          "cluster_json": file_config, "task_type": os.environ.get("MUSTER_TASK_TYPE"),
          "task_index": os.environ.get("MUSTER_TASK_INDEX")}
tmp = os.path.join(out, wid + ".tmp")
with open(tmp, "w") as f:
    json.dump(record, f)
os.rename(tmp, os.path.join(out, wid + ".json"))
mode = sys.argv[1] if len(sys.argv) > 1 else "exit"
if mode == "serve" or (mode == "crash-1" and os.environ["MUSTER_TASK_INDEX"] != "1"):
    while True:
        time.sleep(1)
# End only once every task wrote its record, so the tasks stopped at the end
# (the PS; the others when one crashes) have had their turn too.
deadline = time.time() + 60
while time.time() < deadline:
    if len([n for n in os.listdir(out) if n.endswith(".json")]) >= int(os.environ["EXPECT_TASKS"]):
        break
    time.sleep(0.05)
if mode == "crash-1":
    sys.exit(3)
'''

# ps_script takes no args: run tasks.py in "serve" mode (wait to be stopped).
PS_TASK = r'''
import os, sys
sys.argv = [sys.argv[0], "serve"]
exec(open(os.path.join(os.environ["MUSTER_PROJECT_DIR"], "tasks.py")).read())
'''


class Api(RestApi):
    def __init__(self, daemon):
        super().__init__(daemon, CONFORMANCE, timeout=30)

    def text(self, path):
        """GET a text/plain route: (status, body as str, content type)."""
        req = urllib.request.Request(self.url + path, headers={"Authorization": "Bearer " + self.token})
        try:
            with self.opener.open(req, timeout=30) as resp:
                return resp.status, resp.read().decode(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), e.headers.get("Content-Type", "")

    def wait_cluster(self, cid, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, c = self.call("GET", "/api/v1/clusters/" + cid)
            assert status == 200, c
            if c["status"] in ("succeeded", "failed", "stopped"):
                return c
            time.sleep(0.2)
        raise AssertionError("cluster %s did not end within %s s: %s" % (cid, timeout, c))

    def worker(self, wid):
        status, w = self.call("GET", "/api/v1/workers/" + wid)
        assert status == 200, w
        return w


@pytest.fixture
def env():
    root = tempfile.mkdtemp(prefix="muster_cluster_it_")
    project = os.path.join(root, "project")
    state = os.path.join(root, "state")
    out = os.path.join(root, "out")
    for d in (project, state, out):
        os.makedirs(d)
    with open(os.path.join(project, "tasks.py"), "w") as f:
        f.write(WRITE_TF_CONFIG)
    with open(os.path.join(project, "ps_task.py"), "w") as f:
        f.write(PS_TASK)
    hello = os.path.join(os.environ["MUSTER_BINARY_DIR"], "bin", "muster-mpi-hello")
    shutil.copy(hello, os.path.join(project, "mpi_hello"))
    daemon = Daemon(project, state)
    daemon.start()
    try:
        yield {"api": Api(daemon), "out": out, "state": state, "project": project, "daemon": daemon}
        assert CONFORMANCE.total() > 0, "no musterd answer was checked against api/openapi.yaml"
    finally:
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


def records(out, n, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        names = [n_ for n_ in os.listdir(out) if n_.endswith(".json")]
        if len(names) >= n:
            break
        time.sleep(0.1)
    result = {}
    for name in os.listdir(out):
        if name.endswith(".json"):
            with open(os.path.join(out, name)) as f:
                r = json.load(f)
            result[r["worker_id"]] = r
    return result


def test_ps_mode_every_task_gets_its_own_tf_config(env):
    api = env["api"]
    status, c = api.call("POST", "/api/v1/clusters", {
        "mode": "ps", "n_ps": 1, "n_workers": 2, "cpu": 0.5, "memory": 0.5,
        "worker_script": "tasks.py", "args": ["exit"], "ps_script": "ps_task.py",
        "env": {"OUT_DIR": env["out"], "EXPECT_TASKS": "3"}, "timeout_seconds": 60})
    assert status == 201, c
    assert c["status"] == "starting"
    assert len(c["workers"]["ps"]) == 1 and len(c["workers"]["worker"]) == 2
    done = api.wait_cluster(c["id"])
    assert done["status"] == "succeeded", done
    spec = done["cluster_spec"]
    assert len(spec["ps"]) == 1 and len(spec["worker"]) == 2
    assert len(set(spec["ps"] + spec["worker"])) == 3

    seen = records(env["out"], 3)
    assert set(seen) == set(c["workers"]["ps"] + c["workers"]["worker"])
    tasks = set()
    for wid, r in seen.items():
        tf = json.loads(r["tf_config"])
        assert tf["cluster"] == spec
        assert r["cluster_json"] == tf
        task = (tf["task"]["type"], tf["task"]["index"])
        assert task[0] in ("ps", "worker")
        assert 0 <= task[1] < len(spec[task[0]])
        # The worker id sits at the task's place in the cluster's workers list.
        assert c["workers"][task[0]][task[1]] == wid
        assert (r["task_type"], int(r["task_index"])) == task
        tasks.add(task)
    assert tasks == {("ps", 0), ("worker", 0), ("worker", 1)}

    ps = api.worker(c["workers"]["ps"][0])
    assert ps["status"] == "stopped"
    for wid in c["workers"]["worker"]:
        assert api.worker(wid)["status"] == "succeeded"
    ps_pid = seen[c["workers"]["ps"][0]]["pid"]
    deadline = time.monotonic() + 10
    while pid_alive(ps_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(ps_pid)

    status, listed = api.call("GET", "/api/v1/clusters")
    assert status == 200 and [x["id"] for x in listed["clusters"]] == [c["id"]]


def test_crashing_worker_fails_the_cluster_and_stops_the_rest(env):
    api = env["api"]
    status, c = api.call("POST", "/api/v1/clusters", {
        "mode": "ps", "n_ps": 1, "n_workers": 2, "cpu": 0.5, "memory": 0.5,
        "worker_script": "tasks.py", "args": ["crash-1"], "ps_script": "ps_task.py",
        "env": {"OUT_DIR": env["out"], "EXPECT_TASKS": "3"}, "timeout_seconds": 60})
    assert status == 201, c
    done = api.wait_cluster(c["id"])
    crashed = c["workers"]["worker"][1]
    assert done["status"] == "failed", done
    assert done["reason"] == "worker 1 (id %s) failed with exit code 3" % crashed
    assert api.worker(crashed)["exit_code"] == 3
    others = [c["workers"]["ps"][0], c["workers"]["worker"][0]]
    for wid in others:
        assert api.worker(wid)["status"] == "stopped"
    seen = records(env["out"], 3)
    assert set(seen) == set(others + [crashed])
    deadline = time.monotonic() + 10
    while any(pid_alive(seen[w]["pid"]) for w in others) and time.monotonic() < deadline:
        time.sleep(0.1)
    for wid in others:
        assert not pid_alive(seen[wid]["pid"]), wid


def test_mpi_mode_runs_a_real_mpirun_across_two_slots(env):
    api = env["api"]
    status, c = api.call("POST", "/api/v1/clusters", {
        "mode": "mpi", "n_workers": 2, "slots": 1, "cpu": 0.5, "memory": 0.5,
        "worker_script": "mpi_hello", "launch": True, "timeout_seconds": 60})
    assert status == 201, c
    done = api.wait_cluster(c["id"], timeout=100)
    # mpirun's output comes over the API (GET /api/v1/clusters/{id}/logs), not from the state dir.
    status, log, ctype = api.text("/api/v1/clusters/%s/logs" % c["id"])
    assert status == 200 and ctype.startswith("text/plain"), (status, ctype, log)
    assert done["status"] == "succeeded", (done, log)
    assert done["hostfile"] == "127.0.0.1 slots=2\n"
    assert done["horovodrun_command"].startswith("horovodrun -np 2 -H 127.0.0.1:2 -p 2222 ")
    assert done["mpirun_command"].startswith("mpirun --allow-run-as-root --tag-output -np 2 -H 127.0.0.1:2 ")
    assert done["launcher_exit_code"] == 0
    for rank in (0, 1):
        assert "mpi_hello rank %d of 2 allreduce sum 3 expected 3" % rank in log, log
    with open(os.path.join(env["state"], "clusters", c["id"], "launcher.log")) as f:
        assert log == f.read()  # the whole launcher log
    status, last, _ = api.text("/api/v1/clusters/%s/logs?tail=1" % c["id"])
    assert status == 200 and last == log.splitlines(True)[-1], last
    status, body, _ = api.text("/api/v1/clusters/%s/logs?tail=-1" % c["id"])
    assert status == 400 and json.loads(body)["error"]["field"] == "tail", body
    status, body, _ = api.text("/api/v1/clusters/c-no-such-cluster/logs")
    assert status == 404 and json.loads(body)["error"]["code"] == "not_found", body
    for wid in c["workers"]["worker"]:
        # The hosts end as their ranks did (torchrun's and ps's workers end with their scripts).
        w = api.worker(wid)
        assert w["status"] == "succeeded" and w["exit_code"] == 0, w
        assert w["reason"] == "cluster %s succeeded" % c["id"], w


RANK_SLEEPER = r'''#!/bin/bash
echo $$ > "$OUT_DIR/rank.$OMPI_COMM_WORLD_RANK.pid"
exec sleep 120
'''


def test_mpi_worker_lost_aborts_mpirun(env):
    api = env["api"]
    with open(os.path.join(env["project"], "sleeper.sh"), "w") as f:
        f.write(RANK_SLEEPER)
    status, c = api.call("POST", "/api/v1/clusters", {
        "mode": "mpi", "n_workers": 2, "cpu": 0.5, "memory": 0.5, "worker_script": "sleeper.sh",
        "env": {"OUT_DIR": env["out"]}, "launch": True, "timeout_seconds": 60})
    assert status == 201, c
    # Both ranks started under mpirun.
    deadline = time.monotonic() + 60
    pids = []
    while time.monotonic() < deadline:
        names = [n for n in os.listdir(env["out"]) if n.endswith(".pid")]
        if len(names) == 2:
            try:
                pids = [int(open(os.path.join(env["out"], n)).read()) for n in names]
                break
            except ValueError:
                pass
        time.sleep(0.1)
    assert len(pids) == 2, api.call("GET", "/api/v1/clusters/" + c["id"])
    lost = c["workers"]["worker"][0]
    status, _ = api.call("POST", "/api/v1/workers/stop", {"ids": [lost]})
    assert status == 200
    done = api.wait_cluster(c["id"])
    assert done["status"] == "failed", done
    assert done["reason"].startswith("worker 0 (id %s) was stopped" % lost), done["reason"]
    assert done["reason"].endswith("; mpirun was aborted"), done["reason"]
    # The surviving host's rank was ended by mpirun's abort. Its worker ends as its rank did (mpi_mode.h,
    # endings): failed with the signal's code when mpirun forwarded the rank's exit report before it
    # exited, else stopped (an aborting mpirun can exit before it forwards the report: about 1 run in 5
    # here). Never succeeded, never lost.
    survivor = api.worker(c["workers"]["worker"][1])
    assert (survivor["status"] == "failed" and survivor["exit_code"] > 128) or survivor["status"] == "stopped", survivor
    assert survivor["reason"].startswith("cluster %s failed: worker 0" % c["id"]), survivor
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(pid_alive(p) for p in pids), "ranks outlived the aborted mpirun"


def test_daemon_restart_keeps_clusters_and_fails_unfinished_ones(env):
    api = env["api"]
    status, c = api.call("POST", "/api/v1/clusters", {
        "mode": "ps", "n_ps": 1, "n_workers": 1, "cpu": 0.5, "memory": 0.5, "timeout_seconds": 60})
    assert status == 201, c
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, running = api.call("GET", "/api/v1/clusters/" + c["id"])
        if running["status"] != "starting":
            break
        time.sleep(0.1)
    assert running["status"] == "running", running
    # Restart the daemon on the same state dir (its workers outlive it).
    daemon = env["daemon"]
    daemon.proc.terminate()
    daemon.proc.wait(20)
    daemon.start()
    api = Api(daemon)
    status, after = api.call("GET", "/api/v1/clusters/" + c["id"])
    assert status == 200, after
    assert after["status"] == "failed", after
    assert after["reason"] == "the daemon restarted while the cluster was running; its tasks were stopped"
    assert after["cluster_spec"] == running["cluster_spec"]
    assert after["workers"] == c["workers"]
    for wid in c["workers"]["ps"] + c["workers"]["worker"]:
        assert api.worker(wid)["status"] == "stopped"
    status, listed = api.call("GET", "/api/v1/clusters")
    assert [x["id"] for x in listed["clusters"]] == [c["id"]]


def test_bad_requests_launch_nothing(env):
    api = env["api"]
    for body, field in [({"n_workers": 0}, "n_workers"),
                        ({"n_workers": 1, "worker_script": "../x.py"}, "worker_script"),
                        ({"n_workers": 1, "mode": "mpi", "worker_script": "mpi_hello", "network_interface": "$(id)"},
                         "network_interface")]:
        status, err = api.call("POST", "/api/v1/clusters", body)
        assert status == 400, err
        assert err["error"]["field"] == field, err
    status, w = api.call("GET", "/api/v1/workers")
    assert status == 200 and w["workers"] == []
    status, err = api.call("GET", "/api/v1/clusters/c-nope")
    assert status == 404 and err["error"]["code"] == "not_found"
