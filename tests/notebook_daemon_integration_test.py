"""The daemon side of a notebook session (GPU reservation, followed logs, cdsw's worker fields) against a real musterd on the local backend.

- cdsw parity: workers see CDSW_ENGINE_ID, CDSW_MASTER_IP, CML_MASTER_IP,
  CDSW_IP_ADDRESS, CDSW_PROJECT, CDSW_CPU_MILLICORES, CDSW_MEMORY_MB; worker
  objects carry running_at and duration; script + code runs the script with
  a warning in the 201 body; python3 code starting with `!` runs in the shell.
- followed logs: GET .../logs?follow=true streams lines within a second of
  being written and ends when the worker ends; offset and tail pick the first
  byte (X-Log-Offset); the cluster route follows the chief; followers are bounded (503).
- GPUs: musterd --gpus 0,1 gives two workers different CUDA_VISIBLE_DEVICES
  and refuses a third with 409 naming the free count; devices come back.
Each test has its own daemon, project and state dir, removed afterwards.
"""
import http.client
import json
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from sdk_daemon import Daemon, RestApi


class Api(RestApi):
    def launch(self, **body):
        body.setdefault("n", 1)
        body.setdefault("cpu", 0.25)
        body.setdefault("memory", 0.25)
        return self.call("POST", "/api/v1/workers", body)

    def await_done(self, ids, timeout=60):
        status, body = self.call("POST", "/api/v1/workers/await",
                                 {"ids": ids, "wait_for_completion": True, "timeout_seconds": timeout})
        assert status == 200, body
        return body

    def open_stream(self, path):
        """A streamed GET: (response, connection); read it with read1()."""
        u = urllib.parse.urlparse(self.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("GET", path, headers={"Authorization": "Bearer " + self.token})
        return conn.getresponse(), conn

    def log(self, wid):
        req = urllib.request.Request(self.url + "/api/v1/workers/%s/logs" % wid,
                                     headers={"Authorization": "Bearer " + self.token})
        with self.opener.open(req, timeout=30) as resp:
            return resp.read().decode()


@pytest.fixture
def dirs():
    root = tempfile.mkdtemp(prefix="muster-nbdaemon-")
    project = os.path.join(root, "project")
    os.makedirs(project)
    yield root, project
    shutil.rmtree(root, ignore_errors=True)


def daemon_for(root, project, *args):
    return Daemon(project, os.path.join(root, "state"), extra_args=list(args))


ENV_SCRIPT = r'''
import json, os
keys = ["CDSW_ENGINE_ID", "CDSW_MASTER_IP", "CML_MASTER_IP", "CDSW_IP_ADDRESS", "CDSW_PROJECT",
        "CDSW_CPU_MILLICORES", "CDSW_MEMORY_MB", "MUSTER_WORKER_ID", "MUSTER_IP_ADDRESS", "CUDA_VISIBLE_DEVICES"]
print("ENV " + json.dumps({k: os.environ.get(k) for k in keys}))
'''


def env_of(api, wid):
    for line in api.log(wid).splitlines():
        if line.startswith("ENV "):
            return json.loads(line[4:])
    raise AssertionError("no ENV line in the log of %s:\n%s" % (wid, api.log(wid)))


def test_cdsw_variables_running_at_duration_and_script_over_code(dirs):
    root, project = dirs
    with open(os.path.join(project, "env.py"), "w") as f:
        f.write(ENV_SCRIPT + "import time\ntime.sleep(0.5)\n")
    with daemon_for(root, project) as d:
        api = Api(d)
        status, body = api.launch(cpu=0.5, memory=1.5, script="env.py", code="raise SystemExit(7)")
        assert status == 201, body
        assert len(body["warnings"]) == 1 and "script runs and code is ignored" in body["warnings"][0]
        w = body["workers"][0]
        assert "running_at" in w and w["duration"] is None
        done = api.await_done([w["id"]])
        assert [x["status"] for x in done["workers"]] == ["succeeded"], done  # the script ran, not the code
        finished = done["workers"][0]
        assert finished["running_at"] == finished["started_at"]
        assert 0.4 < finished["duration"] < 30
        env = env_of(api, w["id"])
        assert env["CDSW_ENGINE_ID"] == env["MUSTER_WORKER_ID"] == w["id"]
        assert env["CDSW_MASTER_IP"] == env["CML_MASTER_IP"] == "127.0.0.1"
        assert env["CDSW_IP_ADDRESS"] == env["MUSTER_IP_ADDRESS"] == "127.0.0.1"
        assert env["CDSW_PROJECT"] == "project"
        assert env["CDSW_CPU_MILLICORES"] == "500" and env["CDSW_MEMORY_MB"] == "1536"
        assert env["CUDA_VISIBLE_DEVICES"] is None
        # A finished worker's duration stays put.
        time.sleep(0.3)
        status, again = api.call("GET", "/api/v1/workers/" + w["id"])
        assert again["duration"] == finished["duration"]

        # cdsw's `!` lines: a lone one is a shell command (its exit code counts) ...
        status, body = api.launch(code="!echo shell says $((6*7)); exit 4")
        assert status == 201, body
        failed = api.await_done([body["workers"][0]["id"]])["failures"][0]
        assert failed["exit_code"] == 4 and "shell says 42" in failed["log_tail"]
        # ... and mixed with Python each runs in turn.
        status, body = api.launch(code="x = 5\n!echo from-shell\nprint('from-python', x)")
        wid = body["workers"][0]["id"]
        assert api.await_done([wid])["workers"], api.log(wid)
        log = api.log(wid)
        assert log.index("from-shell") < log.index("from-python 5"), log


TICKER = r'''
import sys, time
for i in range(int(sys.argv[1])):
    print("tick %d %.3f" % (i, time.time()), flush=True)
    time.sleep(float(sys.argv[2]))
'''


def read_stream(resp, deadline_s=60):
    """Reads a streamed body to its end; returns [(arrival time, line)]."""
    got, buf = [], b""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        chunk = resp.read1(65536)
        if not chunk:
            break
        now = time.time()
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            got.append((now, line.decode()))
    return got


def test_followed_worker_log_is_live_and_ends_with_the_worker(dirs):
    root, project = dirs
    with open(os.path.join(project, "ticker.py"), "w") as f:
        f.write(TICKER)
    with daemon_for(root, project) as d:
        api = Api(d)
        status, body = api.launch(script="ticker.py", args=["8", "0.4"])
        assert status == 201, body
        wid = body["workers"][0]["id"]
        resp, conn = api.open_stream("/api/v1/workers/%s/logs?follow=true" % wid)
        assert resp.status == 200
        assert resp.getheader("Content-Type").startswith("text/plain")
        assert resp.getheader("X-Log-Offset") == "0"
        lines = read_stream(resp)
        conn.close()
        ticks = [(t, l) for t, l in lines if l.startswith("tick ")]
        assert [l.split()[1] for _, l in ticks] == [str(i) for i in range(8)], lines
        # Every line arrived within a second of being printed.
        late = [(round(t - float(l.split()[2]), 3), l) for t, l in ticks if t - float(l.split()[2]) > 1.0]
        assert not late, late
        # The stream ended because the worker did.
        status, w = api.call("GET", "/api/v1/workers/" + wid)
        assert w["status"] == "succeeded", w

        # From an offset, and the last lines (a finished log: all at once, then the end).
        full = api.log(wid)
        offset = full.index("tick 5")
        resp, conn = api.open_stream("/api/v1/workers/%s/logs?follow=true&offset=%d" % (wid, offset))
        assert resp.getheader("X-Log-Offset") == str(offset)
        assert resp.read().decode() == full[offset:]
        conn.close()
        resp, conn = api.open_stream("/api/v1/workers/%s/logs?follow=true&tail=2" % wid)
        text = resp.read().decode()
        conn.close()
        assert text == "".join(full.splitlines(True)[-2:])
        assert int(resp.getheader("X-Log-Offset")) == len(full.encode()) - len(text.encode())
        status, body = api.call("GET", "/api/v1/workers/%s/logs?follow=true&offset=-3" % wid)
        assert status == 400 and body["error"]["field"] == "offset"
        status, body = api.call("GET", "/api/v1/workers/nope/logs?follow=true")
        assert status == 404


def test_followed_cluster_log_is_the_chiefs_and_followers_are_bounded(dirs):
    root, project = dirs
    with open(os.path.join(project, "ticker.py"), "w") as f:
        f.write(TICKER)
    with daemon_for(root, project, "--max-log-followers", "2") as d:
        api = Api(d)
        status, c = api.call("POST", "/api/v1/clusters", {"n_workers": 1, "n_ps": 0, "n_chief": 1,
                                                          "worker_script": "ticker.py", "args": ["4", "0.3"],
                                                          "cpu": 0.25, "memory": 0.25})
        assert status == 201, c
        resp, conn = api.open_stream("/api/v1/clusters/%s/logs?follow=true" % c["id"])
        assert resp.status == 200
        # Two followers at most: one more is refused, not left hanging.
        other, other_conn = api.open_stream("/api/v1/workers/%s/logs?follow=true" % c["workers"]["worker"][0])
        assert other.status == 200
        status, body = api.call("GET", "/api/v1/clusters/%s/logs?follow=true" % c["id"])
        assert status == 503, body
        lines = read_stream(resp)
        conn.close()
        assert [l.split()[1] for _, l in lines if l.startswith("tick ")] == ["0", "1", "2", "3"], lines
        status, c = api.call("GET", "/api/v1/clusters/" + c["id"])
        assert c["status"] == "succeeded", c
        other.read()
        other_conn.close()


def test_gpus_are_reserved_per_worker(dirs):
    root, project = dirs
    with open(os.path.join(project, "env.py"), "w") as f:
        f.write(ENV_SCRIPT + "import sys, time\ntime.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)\n")
    with daemon_for(root, project, "--gpus", "0,1") as d:
        api = Api(d)
        status, a = api.launch(script="env.py", nvidia_gpu=1, args=["60"])
        assert status == 201, a
        status, b = api.launch(script="env.py", nvidia_gpu=1, args=["0"])
        assert status == 201, b
        status, refused = api.launch(script="env.py", nvidia_gpu=1)
        assert status == 409, refused
        assert "only 0 of the 2 GPUs of this host are free" in refused["error"]["message"], refused
        assert refused["error"]["field"] == "nvidia_gpu"
        a_id, b_id = a["workers"][0]["id"], b["workers"][0]["id"]
        api.await_done([b_id])
        status, running = api.call("POST", "/api/v1/workers/await",
                                   {"ids": [a_id], "wait_for_completion": False, "timeout_seconds": 60})
        assert running["workers"], running
        # Wait for a's ENV line (the script prints it first).
        deadline = time.monotonic() + 30
        while "ENV " not in api.log(a_id) and time.monotonic() < deadline:
            time.sleep(0.1)
        devices = {env_of(api, a_id)["CUDA_VISIBLE_DEVICES"], env_of(api, b_id)["CUDA_VISIBLE_DEVICES"]}
        assert devices == {"0", "1"}
        status, w = api.call("GET", "/api/v1/workers/" + a_id)
        assert w["gpu_devices"] in ("0", "1")
        # b ended: its device is free again; a still holds the other.
        status, c = api.launch(script="env.py", nvidia_gpu=1)
        assert status == 201, c
        assert c["workers"][0]["gpu_devices"] == env_of(api, b_id)["CUDA_VISIBLE_DEVICES"]
        status, too_many = api.launch(script="env.py", nvidia_gpu=1)
        assert status == 409
        api.call("POST", "/api/v1/workers/stop", {"ids": [a_id]})
    # A bad --gpus is refused at start-up.
    with pytest.raises(RuntimeError, match="--gpus"):
        daemon_for(root, project, "--gpus", "0,x").start()


def test_daemon_stops_promptly_with_a_follow_open(dirs):
    root, project = dirs
    with open(os.path.join(project, "ticker.py"), "w") as f:
        f.write(TICKER)
    d = daemon_for(root, project).start()
    try:
        api = Api(d)
        status, body = api.launch(script="ticker.py", args=["600", "0.2"])
        assert status == 201, body
        resp, conn = api.open_stream("/api/v1/workers/%s/logs?follow=true" % body["workers"][0]["id"])
        assert resp.status == 200
        assert resp.read1(65536) or resp.read1(65536)  # the stream is live
        start = time.monotonic()  # the worker still runs: only the shutdown can end the stream
        d.proc.send_signal(15)
        d.proc.wait(20)
        assert time.monotonic() - start < 10
        rest = read_stream(resp, 10)  # the stream ended with the daemon
        conn.close()
        assert all(l.startswith(("tick ", "[muster-agent]")) for _, l in rest), rest
    finally:
        d.stop()
