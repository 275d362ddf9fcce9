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
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    pid_file = tmp_path / "script.pid"
    env = dict(os.environ, MUSTER_URL="http://127.0.0.1:%d" % server.server_address[1], MUSTER_WORKER_ID="w1",
               MUSTER_AGENT_TOKEN="t" * 64, MUSTER_MASTER_IP="127.0.0.1", MUSTER_HEARTBEAT_S="0.2")
    code = "import os, time\nopen(%r, 'w').write(str(os.getpid()))\ntime.sleep(300)\n" % str(pid_file)
    log = tmp_path / "agent.log"
    with open(log, "wb") as out:
        agent = subprocess.Popen([agent_path(), "--kernel", "python3", "--code", code], env=env, cwd=tmp_path,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        rc = agent.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
        pytest.fail("the agent kept running against a daemon that refuses its token:\n" + log.read_text())
    finally:
        server.shutdown()
    text = log.read_text()
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
