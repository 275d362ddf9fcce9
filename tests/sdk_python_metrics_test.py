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


def test_any_scalar_by_name_with_rank_and_total():
    p = metrics.make_point(7, scalars={"Train/Loss": 0.25, "val acc (top-1)": 0.5, "skip": None}, rank=3,
                           total_steps=100)
    assert p["scalars"] == {"Train/Loss": 0.25, "val acc (top-1)": 0.5} and p["rank"] == 3 and p["total_steps"] == 100
    for bad in ("a,b", "", " x", "x" * 65, 3):
        with pytest.raises(ValueError, match="scalar name"):
            metrics.make_point(1, scalars={bad: 1})
    with pytest.raises(ValueError, match="total_steps"):
        metrics.make_point(1, loss=1, total_steps=0)
    assert metrics.env_rank({"OMPI_COMM_WORLD_RANK": "2", "RANK": "5"}) == 2
    assert metrics.env_rank({"RANK": "5"}) == 5 and metrics.env_rank({}) is None


def test_summary_writer_is_a_drop_in_for_the_scalar_calls(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Sink.received.clear()
    r = metrics.Reporter("http://127.0.0.1:%d" % server.server_address[1], "w1", "tok", interval=30)
    monkeypatch.setattr(metrics, "_reporter", r)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    try:
        class Tensor:  # loss.item()'s caller may pass the tensor itself
            def __float__(self):
                return 0.75

        with metrics.SummaryWriter("/nowhere/log", total_steps=10) as w:
            assert w.get_logdir() == "/nowhere/log"
            w.add_scalar("Train/Loss", 0.5, 3)
            w.add_scalar("Train/Loss", Tensor())          # no step: the tag's next one
            w.add_scalars("Acc", {"train": 0.9, "val": 0.8}, 3, walltime=1700000000.5)
            w.add_scalar("weird tag! é", 1.0, 1)          # any TensorBoard tag becomes a valid name
            w.add_histogram("weights", [1, 2], 3)          # accepted, nothing to draw
            w.add_image("img", None)
            w.flush()  # sends now, without waiting for the 30 s interval
            assert r.sent == 5
        points = [p for _, _, batch in _Sink.received for p in batch]
        assert [(p["step"], p["scalars"]) for p in points] == [
            (3, {"Train/Loss": 0.5}), (4, {"Train/Loss": 0.75}), (3, {"Acc/train": 0.9}), (3, {"Acc/val": 0.8}),
            (1, {"weird tag_ _": 1.0})]
        assert all(p["rank"] == 1 and p["total_steps"] == 10 for p in points)
        assert points[2]["time"] == 1700000000.5
        with pytest.raises(AttributeError):
            w.not_a_writer_method
    finally:
        r.close()
        server.shutdown()


def test_summary_writer_outside_musterd_does_nothing(monkeypatch):
    monkeypatch.setattr(metrics, "_reporter", metrics.Reporter(None, None, None))
    w = metrics.SummaryWriter()
    w.add_scalar("x", 1.0, 1)
    w.add_scalars("y", {"a": 1}, 1)
    w.flush()
    w.close()
    assert metrics._reporter._thread is None
