"""Python SDK unit tests: no daemon.

Id normalisation and config discovery are tested directly. Client behaviour
(request shapes, error mapping, cluster failure reporting) is tested against
a tiny in-process http.server stub that records each request and answers
from a table; it stands in for nothing but the wire.
"""
import json
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import muster
from muster import clusters
from muster.ids import many_ids, one_id


# ---- stub -----------------------------------------------------------------

class Stub:
    """Answers (METHOD, path) from `routes`: value = (status, body) or a callable(req) -> (status, body)."""

    def __init__(self):
        self.routes = {}
        self.requests = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                path, _, query = self.path.partition("?")
                req = {"method": self.command, "path": path, "query": query,
                       "auth": self.headers.get("Authorization"),
                       "body": json.loads(raw) if raw else None}
                stub.requests.append(req)
                answer = stub.routes.get((self.command, path), (404, {"error": {"code": "not_found",
                                                                               "message": "no route " + path}}))
                if callable(answer):
                    answer = answer(req)
                status, body = answer
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = _serve
            do_POST = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def stub(monkeypatch, tmp_path):
    s = Stub()
    monkeypatch.setenv("MUSTER_URL", s.url)
    monkeypatch.setenv("MUSTER_TOKEN", "t0ken")
    monkeypatch.setenv("MUSTER_STATE_DIR", str(tmp_path / "nowhere"))
    yield s
    s.close()


def worker(wid, status="running", **kw):
    w = {"id": wid, "status": status, "ip_address": "127.0.0.1", "exit_code": None, "reason": ""}
    w.update(kw)
    return w


# ---- ids ------------------------------------------------------------------

def test_ids_accept_strings_dicts_and_nesting():
    assert one_id("w-1") == "w-1"
    assert one_id({"id": "w-2", "status": "running"}) == "w-2"
    assert many_ids(["a", {"id": "b"}]) == ["a", "b"]
    assert many_ids("a") == ["a"]
    assert many_ids({"id": "a"}) == ["a"]
    assert many_ids([["a", "b"], {"id": "c"}]) == ["a", "b", "c"]  # stop_workers(list) form
    assert many_ids(None) == []
    assert many_ids(("x", "y")) == ["x", "y"]


@pytest.mark.parametrize("bad", [{"status": "running"}, None, 1.5, True, "", b"id", object()])
def test_ids_reject_what_is_not_an_id(bad):
    with pytest.raises(muster.MusterError) as err:
        one_id(bad)
    assert err.value.code == "invalid_argument"
    assert err.value.field == "ids"


# ---- config discovery -----------------------------------------------------

@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in ("MUSTER_URL", "MUSTER_TOKEN", "MUSTER_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def write_state(directory, url="http://127.0.0.1:9999", token="filetoken"):
    os.makedirs(directory, exist_ok=True)
    if url is not None:
        with open(os.path.join(directory, "musterd.json"), "w") as f:
            json.dump({"url": url, "pid": 1}, f)
    if token is not None:
        with open(os.path.join(directory, "token"), "w") as f:
            f.write(token + "\n")


def test_discovery_reads_the_state_dir_from_env(clean_env, monkeypatch):
    state = clean_env / "state"
    write_state(state, url="http://127.0.0.1:9999/")
    monkeypatch.setenv("MUSTER_STATE_DIR", str(state))
    assert muster.discover() == ("http://127.0.0.1:9999", "filetoken")
    assert muster.state_dir() == str(state)


def test_discovery_defaults_to_home_dot_muster(clean_env):
    write_state(clean_env / "home" / ".muster", url="http://127.0.0.1:1234", token="hometoken")
    assert muster.discover() == ("http://127.0.0.1:1234", "hometoken")


def test_env_overrides_files_each_value_separately(clean_env, monkeypatch):
    state = clean_env / "state"
    write_state(state)
    monkeypatch.setenv("MUSTER_STATE_DIR", str(state))
    monkeypatch.setenv("MUSTER_URL", "http://10.0.0.1:7878")
    assert muster.discover() == ("http://10.0.0.1:7878", "filetoken")
    monkeypatch.setenv("MUSTER_TOKEN", "envtoken")
    assert muster.discover() == ("http://10.0.0.1:7878", "envtoken")
    assert muster.discover("http://explicit:1", "tok") == ("http://explicit:1", "tok")


def test_missing_configuration_names_what_and_where(clean_env, monkeypatch):
    state = clean_env / "empty"
    monkeypatch.setenv("MUSTER_STATE_DIR", str(state))
    with pytest.raises(muster.MusterError) as err:
        muster.list_workers()
    assert err.value.code == "unconfigured"
    assert "MUSTER_URL" in err.value.message and str(state) in err.value.message
    write_state(state, token=None)
    with pytest.raises(muster.MusterError) as err:
        muster.Client()
    assert err.value.code == "unconfigured" and "token" in err.value.message


def test_corrupt_musterd_json_is_reported(clean_env, monkeypatch):
    state = clean_env / "state"
    os.makedirs(state)
    (state / "musterd.json").write_text("{not json")
    monkeypatch.setenv("MUSTER_STATE_DIR", str(state))
    with pytest.raises(muster.MusterError) as err:
        muster.discover()
    assert err.value.code == "unconfigured" and "musterd.json" in err.value.message


# ---- request shapes ---------------------------------------------------------

def test_launch_sends_cdsw_defaults_and_bearer_token(stub):
    stub.routes[("POST", "/api/v1/workers")] = (201, {"workers": [worker("a"), worker("b")]})
    out = muster.launch_workers(2, cpu=0.5, memory=2, script="train.py", env={"EPOCHS": 3}, args="--lr 0.1")
    assert [w["id"] for w in out] == ["a", "b"]
    req = stub.requests[-1]
    assert req["auth"] == "Bearer t0ken"
    assert req["body"] == {"n": 2, "cpu": 0.5, "memory": 2, "nvidia_gpu": 0, "kernel": "python3",
                           "script": "train.py", "code": "", "env": {"EPOCHS": "3"}, "args": ["--lr", "0.1"]}


def test_await_normalises_ids_and_passes_semantics(stub):
    stub.routes[("POST", "/api/v1/workers/await")] = (200, {"workers": [worker("a")], "failures": []})
    res = muster.await_workers([{"id": "a"}, "b"], wait_for_completion=False, timeout_seconds=5)
    assert res["workers"][0]["id"] == "a"
    assert stub.requests[-1]["body"] == {"ids": ["a", "b"], "wait_for_completion": False, "timeout_seconds": 5}
    muster.await_workers("a")
    assert stub.requests[-1]["body"] == {"ids": ["a"], "wait_for_completion": True, "timeout_seconds": 60}


def test_stop_accepts_varargs_dicts_a_list_or_nothing(stub):
    stub.routes[("POST", "/api/v1/workers/stop")] = (200, {"workers": [worker("a", "stopped")]})
    assert muster.stop_workers("a", {"id": "b"})[0]["status"] == "stopped"
    assert stub.requests[-1]["body"] == {"ids": ["a", "b"]}
    muster.stop_workers([worker("c"), worker("d")])
    assert stub.requests[-1]["body"] == {"ids": ["c", "d"]}
    muster.stop_workers()
    assert stub.requests[-1]["body"] == {"ids": []}
    count = len(stub.requests)
    assert muster.stop_workers([]) == [] and muster.stop_workers(*[[]]) == []  # an empty list is not "all"
    assert len(stub.requests) == count


def test_get_list_and_logs(stub):
    stub.routes[("GET", "/api/v1/workers")] = (200, {"workers": [worker("a")]})
    stub.routes[("GET", "/api/v1/workers/a%2Fb")] = (200, worker("a/b"))
    stub.routes[("GET", "/api/v1/workers/a/logs")] = lambda req: (200, ("q=" + req["query"]).encode())
    assert muster.list_workers()[0]["id"] == "a"
    assert muster.get_worker({"id": "a/b"})["id"] == "a/b"  # quoted in the path
    assert muster.worker_logs("a", tail=3) == "q=tail=3"
    assert muster.worker_logs("a") == "q="


def test_cluster_logs_takes_an_id_or_the_cluster_dict(stub):
    stub.routes[("GET", "/api/v1/clusters/c1/logs")] = lambda req: (200, ("q=" + req["query"]).encode())
    assert muster.cluster_logs("c1", tail=5) == "q=tail=5"
    assert muster.cluster_logs({"id": "c1", "mode": "mpi"}) == "q="
    assert stub.requests[-1]["method"] == "GET"


# ---- error mapping -------------------------------------------------------------

def test_server_error_keeps_code_message_field(stub):
    stub.routes[("POST", "/api/v1/workers")] = (400, {"error": {"code": "invalid_argument",
                                                                "message": "n must be in 1..64", "field": "n"}})
    with pytest.raises(muster.MusterError) as err:
        muster.launch_workers(0, cpu=1, memory=1, script="x.py")
    e = err.value
    assert (e.code, e.message, e.field, e.http_status) == ("invalid_argument", "n must be in 1..64", "n", 400)
    assert "n must be in 1..64" in str(e) and "field n" in str(e)


@pytest.mark.parametrize("status,code", [(401, "unauthenticated"), (404, "not_found"), (409, "conflict"),
                                         (413, "payload_too_large"), (502, "unknown")])
def test_non_json_errors_map_from_the_http_status(stub, status, code):
    stub.routes[("GET", "/api/v1/workers/x")] = (status, b"<html>oops</html>")
    with pytest.raises(muster.MusterError) as err:
        muster.get_worker("x")
    assert err.value.code == code and err.value.http_status == status and "oops" in err.value.message


def test_unreachable_daemon_is_unavailable(monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = muster.Client("http://127.0.0.1:%d" % port, "tok")
    with pytest.raises(muster.MusterError) as err:
        client.list_workers()
    assert err.value.code == "unavailable" and str(port) in err.value.message


# ---- clusters ----------------------------------------------------------------

def test_session_address_prefers_chief_then_worker_zero():
    assert muster.session_address({"worker": ["h1:1", "h2:2"], "ps": ["p:3"]}) == "grpc://h1:1"
    assert muster.session_address({"chief": ["c:9"], "worker": ["h1:1"]}) == "grpc://c:9"
    assert muster.session_address({"worker": {"1": "b:2", "0": "a:1"}}) == "grpc://a:1"
    assert muster.session_address({"ps": ["p:1"]}) is None


def test_run_cluster_without_script_returns_spec_once_up(stub):
    spec = {"ps": ["127.0.0.1:5000"], "worker": ["127.0.0.1:5001", "127.0.0.1:5002"]}
    states = iter(["starting", "starting", "running"])
    stub.routes[("POST", "/api/v1/clusters")] = (201, {"id": "c1", "status": "starting"})
    stub.routes[("GET", "/api/v1/clusters/c1")] = lambda req: (200, {"id": "c1", "status": next(states),
                                                                      "cluster_spec": spec})
    got_spec, addr = muster.run_cluster(n_workers=2, n_ps=1, cpu=1, memory=1, timeout_seconds=5)
    assert got_spec == spec and addr == "grpc://127.0.0.1:5001"
    create = stub.requests[0]["body"]
    assert create == {"mode": "ps", "n_workers": 2, "n_ps": 1, "cpu": 1, "memory": 1, "nvidia_gpu": 0,
                      "timeout_seconds": 5}


def test_run_cluster_with_script_names_the_failing_task(stub):
    cluster = {"id": "c2", "status": "failed", "reason": "task worker:1 exited with 3",
               "workers": {"ps": ["p0"], "worker": ["w0", "w1"]}, "cluster_spec": {}}
    stub.routes[("POST", "/api/v1/clusters")] = (201, dict(cluster, status="starting"))
    stub.routes[("GET", "/api/v1/clusters/c2")] = (200, cluster)
    stub.routes[("GET", "/api/v1/workers/p0")] = (200, worker("p0", "stopped"))
    stub.routes[("GET", "/api/v1/workers/w0")] = (200, worker("w0", "stopped"))
    stub.routes[("GET", "/api/v1/workers/w1")] = (200, worker("w1", "failed", exit_code=3))
    stub.routes[("GET", "/api/v1/workers/w1/logs")] = (200, b"Traceback\nValueError: boom\n")
    with pytest.raises(muster.ClusterFailed) as err:
        muster.run_cluster(n_workers=2, n_ps=1, cpu=1, memory=1, worker_script="train.py")
    e = err.value
    assert e.task == "worker:1" and e.code == "cluster_failed" and e.cluster["id"] == "c2"
    assert "exit code 3" in e.message and "ValueError: boom" in e.message and "worker:1" in str(e)


def test_await_cluster_times_out_with_deadline_exceeded(stub):
    stub.routes[("GET", "/api/v1/clusters/c3")] = (200, {"id": "c3", "status": "starting"})
    with pytest.raises(muster.MusterError) as err:
        muster.await_cluster("c3", timeout_seconds=0.3)
    assert err.value.code == "deadline_exceeded" and "starting" in err.value.message


def test_horovodrun_sends_mpi_mode_and_returns_the_cluster(stub):
    up = {"id": "c4", "status": "running", "horovodrun_command": "horovodrun -np 2 -H 127.0.0.1:2 python3 t.py",
          "workers": {"worker": ["a", "b"]}}
    stub.routes[("POST", "/api/v1/clusters")] = (201, dict(up, status="starting"))
    stub.routes[("GET", "/api/v1/clusters/c4")] = (200, up)
    c = muster.horovodrun(2, "t.py", slots=1, launch=False)
    assert c["horovodrun_command"].startswith("horovodrun -np 2")
    body = stub.requests[0]["body"]
    assert body["mode"] == "mpi" and body["n_workers"] == 2 and body["worker_script"] == "t.py"
    assert body["launch"] is False and body["slots"] == 1 and "n_ps" not in body


# ---- first contact: errors that say where to look, python=, horovodrun's line, Ctrl-C ----------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_daemon_names_where_its_url_came_from(clean_env, monkeypatch):
    state = clean_env / "state"
    os.makedirs(state)
    with open(state / "musterd.json", "w") as f:  # left by a daemon that is gone (no such pid)
        json.dump({"url": "http://127.0.0.1:%d" % free_port(), "pid": 2 ** 22 + 12345}, f)
    (state / "token").write_text("t\n")
    monkeypatch.setenv("MUSTER_STATE_DIR", str(state))
    with pytest.raises(muster.MusterError) as err:
        muster.list_workers()
    assert err.value.code == "unavailable"
    assert "MUSTER_STATE_DIR=%s" % state in err.value.message, err.value.message
    assert "no longer running" in err.value.message, err.value.message
    monkeypatch.setenv("MUSTER_URL", "http://127.0.0.1:%d" % free_port())
    with pytest.raises(muster.MusterError) as err:
        muster.list_workers()
    assert "came from MUSTER_URL" in err.value.message, err.value.message


def test_no_daemon_found_says_to_set_muster_state_dir(clean_env, monkeypatch):
    with pytest.raises(muster.MusterError) as err:
        muster.discover()
    assert "MUSTER_STATE_DIR=DIR" in err.value.message and "--state-dir" in err.value.message, err.value.message


def test_python_is_sent_as_given_or_as_the_notebooks_own(stub, monkeypatch):
    from muster import interpreter
    stub.routes[("POST", "/api/v1/workers")] = (201, {"workers": [worker("a")]})
    muster.launch_workers(1, cpu=1, memory=1, code="print(1)", python="/opt/py/bin/python")
    assert stub.requests[-1]["body"]["python"] == "/opt/py/bin/python"
    monkeypatch.setattr(interpreter.sys, "executable", "/home/me/venv/bin/python")
    monkeypatch.setattr(interpreter, "can_run_runtime", lambda: True)
    muster.launch_workers(1, cpu=1, memory=1, code="print(1)")
    assert stub.requests[-1]["body"]["python"] == "/home/me/venv/bin/python"
    monkeypatch.setattr(interpreter, "can_run_runtime", lambda: False)  # no numpy, or another ABI
    muster.launch_workers(1, cpu=1, memory=1, code="print(1)")
    assert "python" not in stub.requests[-1]["body"]
    monkeypatch.setattr(interpreter.sys, "executable", "/usr/bin/python3")  # the daemon's default: not sent
    monkeypatch.setattr(interpreter, "can_run_runtime", lambda: True)
    assert interpreter.default_python() is None


def test_horovodrun_command_lines_as_users_type_them():
    from muster.horovodrun_cli import parse_hosts, parser, split_command
    assert split_command(["python", "train.py", "--lr", "1"]) == (None, "train.py", ["--lr", "1"])
    assert split_command(["python3.11", "train.py"]) == (None, "train.py", [])
    assert split_command(["/opt/py/bin/python3", "t.py"]) == ("/opt/py/bin/python3", "t.py", [])
    assert split_command(["--", "train.py", "-x"]) == (None, "train.py", ["-x"])
    for bad in ([], ["python"]):
        with pytest.raises(muster.MusterError) as err:
            split_command(bad)
        assert err.value.code == "invalid_argument"
    assert parse_hosts("10.0.0.1:2, 10.0.0.2") == [("10.0.0.1", 2), ("10.0.0.2", 1)]
    for bad in ("a:0", "a:x", ":2", ","):
        with pytest.raises(muster.MusterError) as err:
            parse_hosts(bad)
        assert err.value.field == "hosts"
    a = parser().parse_args("-np 4 -H 10.0.0.1,10.0.0.2 -p 2222 python train.py --epochs 3".split())
    assert (a.np, a.hosts, a.ssh_port, a.command) == (4, "10.0.0.1,10.0.0.2", 2222,
                                                      ["python", "train.py", "--epochs", "3"])


def test_hosts_name_running_workers_by_ip_in_order(stub):
    from muster.horovodrun_cli import parse_hosts, workers_for_hosts
    stub.routes[("GET", "/api/v1/workers")] = (200, {"workers": [
        dict(worker("a", "running"), ip_address="127.0.0.1"), dict(worker("b", "running"), ip_address="127.0.0.1"),
        dict(worker("c", "running"), ip_address="10.0.0.9", cluster_id="c-1"),
        dict(worker("d", "stopped"), ip_address="10.0.0.8")]})
    client = muster.Client()
    assert workers_for_hosts(client, parse_hosts("127.0.0.1,127.0.0.1")) == (["a", "b"], 1)
    assert workers_for_hosts(client, parse_hosts("127.0.0.1:2")) == (["a"], 2)
    for hosts in ("127.0.0.1,127.0.0.1,127.0.0.1", "10.0.0.9", "10.0.0.8"):  # too many; a cluster's; ended
        with pytest.raises(muster.MusterError) as err:
            workers_for_hosts(client, parse_hosts(hosts))
        assert err.value.field == "hosts" and "running workers: a 127.0.0.1, b 127.0.0.1" in err.value.message
    with pytest.raises(muster.MusterError) as err:
        workers_for_hosts(client, parse_hosts("127.0.0.1:1,127.0.0.1:2"))
    assert "different slot counts" in err.value.message


def test_an_interrupt_is_one_line_in_scripts_and_notebooks(capsys):
    from muster import progress
    stopped = []
    with pytest.raises(KeyboardInterrupt) as caught:
        with progress.on_interrupt(True, lambda: stopped.append(1), "cluster c-1", cluster_id="c-1"):
            raise KeyboardInterrupt
    err = caught.value
    assert isinstance(err, muster.MusterInterrupted) and err.cluster_id == "c-1" and stopped == [1]
    assert err.__suppress_context__ and err._render_traceback_() == ["muster: interrupted; stopped cluster c-1"]
    progress._excepthook(type(err), err, None)
    assert capsys.readouterr().err == "muster: interrupted; stopped cluster c-1\n"
