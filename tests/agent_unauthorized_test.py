"""muster-agent against a daemon that no longer knows its token (restarted
with another state dir): heartbeats answered 401 or 403 must end the script
and the agent, with a log line saying why, instead of running forever.

A stub daemon (http.server on 127.0.0.1) accepts the registration and then
refuses every heartbeat; the agent runs a script that sleeps for minutes.
"""
import http.server
import json
import os
import signal
import subprocess
import threading
import time

import pytest


def agent_path():
    root = os.environ.get("MUSTER_BINARY_DIR") or os.path.join(os.path.dirname(__file__), "..", "build")
    return os.path.join(root, "bin", "muster-agent")


def stub_daemon(handler):
    """A stub musterd on 127.0.0.1 (a port of its own), serving from a daemon thread."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def agent_env(server, worker_id, token, heartbeat_s, **more):
    return dict(os.environ, MUSTER_URL="http://127.0.0.1:%d" % server.server_address[1], MUSTER_WORKER_ID=worker_id,
                MUSTER_AGENT_TOKEN=token, MUSTER_MASTER_IP="127.0.0.1", MUSTER_HEARTBEAT_S=heartbeat_s, **more)


def run_agent_to_end(tmp_path, server, env, kernel, code, timeout, stuck):
    """Runs muster-agent with `code` until it ends; returns (exit status, its log). Past `timeout` the agent's
    group is killed and the test fails with `stuck` and the log. The stub daemon is shut down either way."""
    log = tmp_path / "agent.log"
    with open(log, "wb") as out:
        agent = subprocess.Popen([agent_path(), "--kernel", kernel, "--code", code], env=env, cwd=tmp_path,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        rc = agent.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
        pytest.fail(stuck + ":\n" + log.read_text())
    finally:
        server.shutdown()
    return rc, log.read_text()


class Stub(http.server.BaseHTTPRequestHandler):
    refuse_with = 401
    heartbeats = 0

    def do_POST(self):  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path.endswith("/register"):
            code, body = 200, {"hold": False}
        elif self.path.endswith("/heartbeat"):
            type(self).heartbeats += 1
            code, body = self.refuse_with, {"error": {"code": "unauthenticated", "message": "unknown token"}}
        else:
            code, body = 404, {}
        self.reply(code, body)

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("status", [401, 403])
def test_agent_gives_up_on_a_daemon_that_refuses_its_token(tmp_path, status):
    handler = type("Handler", (Stub,), {"refuse_with": status, "heartbeats": 0})
    server = stub_daemon(handler)
    pid_file = tmp_path / "script.pid"
    env = agent_env(server, "w1", "t" * 64, "0.2")
    code = "import os, time\nopen(%r, 'w').write(str(os.getpid()))\ntime.sleep(300)\n" % str(pid_file)
    rc, text = run_agent_to_end(tmp_path, server, env, "python3", code, 20,
                                "the agent kept running against a daemon that refuses its token")
    assert "refused this worker's token 3 times" in text, text
    assert handler.heartbeats >= 3
    assert rc != 0
    script = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while os.path.exists("/proc/%d" % script) and time.monotonic() < deadline:
        time.sleep(0.05)
    with open("/proc/%d/stat" % script) if os.path.exists("/proc/%d/stat" % script) else open(os.devnull) as f:
        stat = f.read()
    assert not stat or stat.rsplit(")", 1)[1].split()[0] == "Z", "the script outlived its agent"


class Accepting(Stub):
    """A daemon that takes the registration and every heartbeat."""

    def do_POST(self):  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.reply(200, {"hold": False} if self.path.endswith("/register") else {})


def test_log_relay_holds_no_copy_of_the_agents_token(tmp_path):
    """The agent's log relay is a fork of it: its inherited environment (what
    /proc/<pid>/environ shows) is zeroed, and the script's output still
    reaches the log through it."""
    server = stub_daemon(Accepting)
    token = "s" * 64
    worker_log = tmp_path / "output.log"
    env = agent_env(server, "w2", token, "0.2", MUSTER_LOG_FILE=str(worker_log), MUSTER_LOG_MAX_BYTES="1048576",
                    MUSTER_LOG_KEEP="1")
    with open(tmp_path / "agent.log", "wb") as out:
        agent = subprocess.Popen([agent_path(), "--kernel", "bash", "--code", "echo relayed-line; sleep 300"],
                                 env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        relay, deadline = None, time.monotonic() + 20
        while relay is None and time.monotonic() < deadline:
            for pid in os.listdir("/proc"):
                try:
                    with open("/proc/%s/stat" % pid) as f:
                        stat = f.read()
                except OSError:
                    continue
                name, rest = stat.split("(", 1)[1].rsplit(")", 1)
                if name == "muster-logrelay" and int(rest.split()[1]) == agent.pid:
                    relay = int(pid)
            time.sleep(0.05)
        assert relay, "no muster-logrelay child of the agent:\n" + (tmp_path / "agent.log").read_text()
        with open("/proc/%d/environ" % relay, "rb") as f:
            environ = f.read()
        assert token.encode() not in environ
        assert environ.strip(b"\0") == b"", environ[:200]
        while b"relayed-line" not in (worker_log.read_bytes() if worker_log.exists() else b""):
            assert time.monotonic() < deadline, "the script's line never reached the log"
            time.sleep(0.05)
    finally:
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
        server.shutdown()


class EndsAtExit(Stub):
    """A daemon whose heartbeat answer comes late: it waits until the exit has been reported, then says what a
    real daemon says of a worker that has ended (409)."""
    exited = None  # threading.Event, per test

    def do_POST(self):  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        code, body = 200, {}
        if self.path.endswith("/register"):
            body = {"hold": False}
        elif self.path.endswith("/exit"):
            type(self).exited.set()
        elif self.path.endswith("/heartbeat"):
            if type(self).exited.wait(3):
                code, body = 409, {"error": {"code": "conflict", "message": "worker w3 has ended"}}
        self.reply(code, body)


def test_a_heartbeat_answered_after_the_exit_does_not_stop_the_agent(tmp_path):
    """A heartbeat in flight while the agent reports its script's exit is answered 409 (the worker has ended):
    that is the exit's own doing, and the agent must still end with the script's status (it used to take the
    answer for a stop and SIGKILL itself: exit 137 for a script that succeeded)."""
    handler = type("Handler", (EndsAtExit,), {"exited": threading.Event()})
    server = stub_daemon(handler)
    # The script outlives a few heartbeats, so one is waiting on the stub when the exit is reported.
    rc, text = run_agent_to_end(tmp_path, server, agent_env(server, "w3", "u" * 64, "0.05"), "bash",
                                "sleep 0.5; echo done", 30, "the agent did not end")
    assert handler.exited.is_set(), text
    assert rc == 0, "agent ended %d:\n%s" % (rc, text)
