"""musterd beyond loopback speaks only TLS, verified by every client.

A musterd on 0.0.0.0 serves https with a self-signed certificate it makes in
its state dir (kept across restarts) and names in musterd.json; the Python
SDK, the CLI and muster-agent pin its fingerprint (or verify a CA file), and
refuse a certificate that does not match with a clear error. A forwarding
proxy in the test records every byte between client and daemon: the tokens
never cross in the clear (and, as a control, they do over the plain HTTP a
loopback musterd speaks).
"""
import hashlib
import json
import os
import socket
import ssl
import subprocess
import threading
import time

import pytest

import muster
from sdk_daemon import Daemon, binary_dir, sdk_session, write_scripts

SCRIPTS = {
    "hello.py": """
import os
import muster.metrics
r = muster.metrics.reporter()
muster.metrics.report(step=1, loss=0.5)
r.close()  # sends what is queued and waits for it
print("url", os.environ["MUSTER_URL"])
print("pin", os.environ.get("MUSTER_TLS_FINGERPRINT"))
print("metrics sent", r.sent, "failed", r.failed_requests)
""",
}


def cert_fingerprint(path):
    with open(path) as f:
        return hashlib.sha256(ssl.PEM_cert_to_DER_cert(f.read())).hexdigest()


def empty_project(path):
    path.mkdir(parents=True)
    return path


def daemon_json(d):
    with open(os.path.join(d.state_dir, "musterd.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
    with Daemon(project, tmp_path_factory.mktemp("state"), listen="0.0.0.0:0") as d:
        yield d


class Recorder:
    """A TCP forwarder 127.0.0.1:port -> target that keeps every byte, both ways."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.bytes = bytearray()
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src, dst):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            with self.lock:
                self.bytes += data
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self):
        self.listener.close()


def port_of(url):
    return int(url.rsplit(":", 1)[1])


def run_agent(url, token, pin, timeout=20):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_")}
    env.update({"MUSTER_URL": url, "MUSTER_WORKER_ID": "w-tls-probe", "MUSTER_AGENT_TOKEN": token,
                "MUSTER_CGROUP": "none", "MUSTER_TLS_FINGERPRINT": pin})
    return subprocess.run([os.path.join(binary_dir(), "bin", "muster-agent"), "--kernel", "python3", "--code",
                           "print('never runs')"], env=env, capture_output=True, text=True, timeout=timeout)


def test_musterd_json_names_the_certificate_and_its_fingerprint(daemon):
    info = daemon_json(daemon)
    assert info["url"].startswith("https://127.0.0.1:"), info
    assert info["tls"]["cert"] == os.path.join(daemon.state_dir, "tls", "musterd.crt")
    assert info["tls"]["fingerprint"] == cert_fingerprint(info["tls"]["cert"])
    assert oct(os.stat(os.path.join(daemon.state_dir, "tls", "musterd.key")).st_mode & 0o777) == "0o600"


def test_workers_agents_and_metrics_go_over_pinned_tls(daemon):
    fingerprint = daemon_json(daemon)["tls"]["fingerprint"]
    with sdk_session(daemon):
        c = muster.Client()
        assert c.url.startswith("https://") and c.tls.fingerprint == fingerprint
        w = c.launch_workers(n=1, cpu=0.1, memory=0.1, script="hello.py")[0]
        c.await_workers([w["id"]], wait_for_completion=True, timeout_seconds=60)
        status = c.get_worker(w["id"])["status"]
        log = c.worker_logs(w["id"])
        followed = "".join(c.worker_logs(w["id"], follow=True, from_start=True))  # a chunked stream over TLS
    assert status == "succeeded", log
    assert "url https://127.0.0.1:%d" % port_of(daemon.url) in log
    assert "pin " + fingerprint in log
    assert "metrics sent 1 failed 0" in log
    assert "metrics sent 1 failed 0" in followed, followed


def test_cli_pins_musterd_json_and_refuses_a_wrong_fingerprint(daemon):
    env = dict(daemon.env())
    cli = ["/usr/bin/python3", "-m", "muster"]
    ok = subprocess.run(cli + ["ps"], env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    wrong = subprocess.run(cli + ["--tls-fingerprint", "ab" * 32, "ps"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert wrong.returncode != 0
    assert "not the pinned " + "ab" * 32 in wrong.stderr, wrong.stderr
    # A CA file instead of the pin: the self-signed certificate, its address checked.
    env_ca = dict(env, MUSTER_URL=daemon.url, MUSTER_TOKEN=daemon.token,
                  MUSTER_CA_FILE=daemon_json(daemon)["tls"]["cert"])
    env_ca.pop("MUSTER_STATE_DIR")
    ca = subprocess.run(cli + ["ps"], env=env_ca, capture_output=True, text=True, timeout=60)
    assert ca.returncode == 0, ca.stderr


def test_sdk_refuses_a_wrong_fingerprint_and_plain_http(daemon):
    with pytest.raises(muster.MusterError) as err:
        muster.Client(daemon.url, daemon.token, tls_fingerprint="cd" * 32).list_workers()
    assert err.value.code == "untrusted_certificate"
    assert daemon_json(daemon)["tls"]["fingerprint"] in err.value.message and "cd" * 32 in err.value.message
    # Without a pin or CA the system's CAs do not know a self-signed certificate.
    with pytest.raises(muster.MusterError) as err:
        muster.Client(daemon.url, daemon.token, ca_file="/etc/ssl/certs/ca-certificates.crt").list_workers()
    assert err.value.code == "untrusted_certificate", err.value
    # Plain http to the TLS port gets no answer: never a silent fallback.
    with pytest.raises(muster.MusterError):
        muster.Client(daemon.url.replace("https://", "http://"), daemon.token).list_workers()


def test_agent_refuses_a_wrong_fingerprint(daemon):
    t0 = time.monotonic()
    r = run_agent(daemon.url, "agent-secret", "ef" * 32)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "not the pinned " + "ef" * 32 in r.stdout, r.stdout
    assert time.monotonic() - t0 < 10, "a refused certificate is not retried"


def test_tokens_never_cross_in_the_clear(daemon, tmp_path):
    fingerprint = daemon_json(daemon)["tls"]["fingerprint"]
    rec = Recorder(port_of(daemon.url))
    try:
        via = "https://127.0.0.1:%d" % rec.port
        muster.Client(via, daemon.token, tls_fingerprint=fingerprint).list_workers()
        agent_token = "agent-token-that-must-not-leak-7f3a"
        r = run_agent(via, agent_token, fingerprint)
        assert "register failed (401" in r.stdout, r.stdout  # it reached the daemon, which refused the made-up token
    finally:
        rec.close()
    seen = bytes(rec.bytes)
    assert b"\x16\x03" in seen[:16], "the capture starts with a TLS handshake"
    assert len(seen) > 2000
    for secret in (daemon.token.encode(), agent_token.encode(), b"Authorization", b"Bearer"):
        assert secret not in seen, secret

    # Control: the same recorder in front of a loopback (plain HTTP) musterd sees the token.
    project = empty_project(tmp_path / "plain-project")
    with Daemon(project, tmp_path / "plain-state") as plain:
        assert plain.url.startswith("http://")
        rec = Recorder(port_of(plain.url))
        try:
            muster.Client("http://127.0.0.1:%d" % rec.port, plain.token).list_workers()
        finally:
            rec.close()
        assert ("Bearer " + plain.token).encode() in bytes(rec.bytes)


def test_self_signed_certificate_is_kept_across_restarts(tmp_path):
    project = empty_project(tmp_path / "project")
    d = Daemon(project, tmp_path / "state", listen="0.0.0.0:0")
    with d:
        first = daemon_json(d)["tls"]["fingerprint"]
    with d:
        assert daemon_json(d)["tls"]["fingerprint"] == first
        assert d.client().list_workers() == []


def test_given_certificate_and_key_are_served(tmp_path):
    cert, key = str(tmp_path / "c.pem"), str(tmp_path / "k.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=muster-test",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    project = empty_project(tmp_path / "project")
    # Given a certificate, musterd serves TLS also on loopback.
    with Daemon(project, tmp_path / "state", extra_args=["--tls-cert", cert, "--tls-key", key]) as d:
        info = daemon_json(d)
        assert info["url"].startswith("https://127.0.0.1:")
        assert info["tls"] == {"cert": cert, "fingerprint": cert_fingerprint(cert)}
        assert muster.Client(d.url, d.token, ca_file=cert).list_workers() == []
        assert not os.path.exists(os.path.join(d.state_dir, "tls")), "no self-signed one made"


def test_plain_http_beyond_loopback_only_with_insecure_http(tmp_path):
    project = empty_project(tmp_path / "project")
    with Daemon(project, tmp_path / "state", listen="0.0.0.0:0", extra_args=["--insecure-http"]) as d:
        assert d.url.startswith("http://") and "tls" not in daemon_json(d)
        assert "--insecure-http: serving plain HTTP" in d.log()
