"""muster.metrics without a daemon: label unit. Bad arguments raise at once; without the
environment report() does nothing; against a small local HTTP server the points arrive in
batches with the bearer token, and a dead daemon never blocks report()."""
import http.server
import json
import threading
import time

import pytest

from muster import metrics


def test_points_are_validated():
    p = metrics.make_point(3, loss=0.5, lr=1, accuracy=None)
    assert p["step"] == 3 and p["loss"] == 0.5 and p["lr"] == 1.0 and "accuracy" not in p and p["time"] > 1.6e9
    assert "loss" not in metrics.make_point(1, loss=float("nan"))
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(ValueError, match="step"):
            metrics.make_point(bad, loss=1)
    with pytest.raises(ValueError, match="loss"):
        metrics.make_point(1, loss="high")
    with pytest.raises(ValueError, match="unknown metric"):
        metrics.make_point(1, speed=3)


def test_without_the_environment_nothing_runs(monkeypatch):
    r = metrics.Reporter(None, None, None)
    assert not r.enabled
    r.report(1, loss=1)
    assert r._thread is None and r.dropped == 0


class _Sink(http.server.BaseHTTPRequestHandler):
    received = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Sink.received.append((self.path, self.headers["Authorization"], body["points"]))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_points_arrive_batched_with_the_token():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        r = metrics.Reporter("http://127.0.0.1:%d" % server.server_address[1], "w1", "tok", interval=0.05)
        for i in range(50):
            r.report(i, loss=1.0 / (i + 1))
        r.close()
        points = [p for _, _, batch in _Sink.received for p in batch]
        assert [p["step"] for p in points] == list(range(50))
        assert all(path == "/api/v1/agent/workers/w1/metrics" and auth == "Bearer tok" for path, auth, _ in _Sink.received)
        assert len(_Sink.received) < 50 and r.sent == 50
    finally:
        server.shutdown()


def test_a_dead_daemon_never_blocks():
    r = metrics.Reporter("http://127.0.0.1:9", "w1", "tok", interval=0.01, timeout=0.2, max_queued=10,
                         max_batch=10)
    start = time.monotonic()
    for i in range(10000):
        r.report(i, loss=1)
    assert time.monotonic() - start < 2
    # Not yet counted: at most the queue (10) and the one batch (10) the
    # sender thread may have taken out and be failing to send right now.
    assert r.dropped >= 10000 - 10 - 10
    r.close()
    assert r.sent == 0
