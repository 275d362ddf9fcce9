"""Python SDK pieces without a daemon (unit): follow_log's wire protocol against an
in-process HTTP server, Progress's three modes, code sent as written, the CLI's parser."""
import http.server
import io
import sys
import threading
import types

import pytest

from muster import progress as progress_mod
from muster._http import Transport
from muster.cli import parser
from muster.client import Client
from muster.errors import MusterError
from muster.follow import _tail_start, follow_log

LOG = b"".join(b"line %d\n" % i for i in range(20)) + b"partial"


class Stub(http.server.BaseHTTPRequestHandler):
    """GET /log?follow=true&offset=N: chunked from N, X-Log-Offset; the first
    answer is cut after `cut` bytes (no final chunk). Without follow support
    (server.streams False): the whole log, no header."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        srv = self.server
        srv.queries.append(self.path)
        if srv.busy:  # a daemon with no follower slot free: 503 to follows, the last lines otherwise
            if "follow=true" in self.path:
                body = b'{"error": {"code": "unavailable", "message": "too many followed logs"}}'
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            log = LOG + srv.more
            start = _tail_start(log, int(self.path.split("tail=")[1]))
            marker = b"[muster] %d bytes not shown\n" % start if start else b""
            body = marker + log[start:]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Log-Offset", str(start))
            self.send_header("X-Log-Marker-Bytes", str(len(marker)))
            self.end_headers()
            self.wfile.write(body)
            return
        if not srv.streams:
            self.send_response(200)
            self.send_header("Content-Length", str(len(LOG)))
            self.end_headers()
            self.wfile.write(LOG)
            return
        query = dict(p.split("=") for p in self.path.split("?", 1)[1].split("&"))
        start = int(query.get("offset", 0))
        if "tail" in query:
            start = _tail_start(LOG, int(query["tail"]))
        marker = b"[muster] %d bytes not shown\n" % start if start and "offset" not in query else b""
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("X-Log-Offset", str(start))
        self.send_header("X-Log-Marker-Bytes", str(len(marker)))
        self.end_headers()
        body = marker + LOG[start:]
        if len(srv.queries) == 1 and srv.cut:
            body = body[:srv.cut]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(body), body))
            self.wfile.flush()
            self.close_connection = True
            return
        for i in range(0, len(body), 7):
            piece = body[i:i + 7]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def stub():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    srv.queries, srv.streams, srv.cut, srv.busy, srv.more = [], True, 0, False, b""
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def lines_of(data):
    return data.decode().split("\n")


def test_follow_streams_every_line_then_the_partial_one(stub):
    t = Transport("http://127.0.0.1:%d" % stub.server_address[1], "tok")
    assert list(follow_log(t, "/log", lambda: True)) == lines_of(LOG)
    assert stub.queries == ["/log?follow=true"]  # where to start is the daemon's default
    stub.queries.clear()
    assert list(follow_log(t, "/log", lambda: True, from_start=True)) == lines_of(LOG)
    assert stub.queries == ["/log?follow=true&from_start=true"]


def test_follow_reconnects_from_the_offset_after_a_cut(stub):
    stub.cut = 45  # mid-line
    t = Transport("http://127.0.0.1:%d" % stub.server_address[1], "tok")
    assert list(follow_log(t, "/log", lambda: True)) == lines_of(LOG)
    assert stub.queries == ["/log?follow=true", "/log?follow=true&offset=45"]


def test_the_marker_is_shown_but_not_counted_as_log_bytes(stub):
    start = _tail_start(LOG, 3)
    marker = b"[muster] %d bytes not shown\n" % start
    stub.cut = len(marker) + 10  # the marker and 10 bytes of the log, then the connection drops
    t = Transport("http://127.0.0.1:%d" % stub.server_address[1], "tok")
    out = list(follow_log(t, "/log", lambda: True, tail=3))
    assert out == [marker.decode().rstrip("\n"), "line 18", "line 19", "partial"]
    assert stub.queries == ["/log?follow=true&tail=3", "/log?follow=true&offset=%d" % (start + 10)]


def test_follow_with_tail_and_polling_when_the_daemon_does_not_stream(stub):
    t = Transport("http://127.0.0.1:%d" % stub.server_address[1], "tok")
    out = list(follow_log(t, "/log", lambda: True, tail=3))
    assert out[0].startswith("[muster] ") and out[1:] == ["line 18", "line 19", "partial"]
    stub.streams = False
    stub.queries.clear()
    done = iter([False, True])
    out = list(follow_log(t, "/log", lambda: next(done), tail=2, poll_seconds=0.01))
    assert out == ["line 19", "partial"]  # the second poll adds nothing, and the follower ends


def test_polling_a_busy_daemon_passes_on_only_new_bytes(stub):
    stub.busy = True
    t = Transport("http://127.0.0.1:%d" % stub.server_address[1], "tok")

    def grow():
        stub.more += b" more\nnext\n"  # the partial line ends, a new one follows
        return False

    calls = iter([lambda: False, grow, lambda: True])
    out = list(follow_log(t, "/log", lambda: next(calls)(), tail=2, poll_seconds=0.01))
    assert out[0].startswith("[muster] ") and out[1:] == ["line 19", "partial more", "next"]
    assert stub.queries[0] == "/log?follow=true&tail=2"
    assert all("follow" not in q for q in stub.queries[1:])


def test_tail_start():
    assert _tail_start(b"a\nb\nc\n", 2) == 2
    assert _tail_start(b"a\nb\nc", 2) == 2
    assert _tail_start(b"a\nb\n", 5) == 0
    assert _tail_start(b"a\nb\n", 0) == 4


def test_code_is_sent_as_written_and_oversize_code_is_refused_before_sending():
    # The `!` rule is the daemon's (api/kernel.h): the SDK sends code unchanged.
    sent = []
    c = Client("http://127.0.0.1:9", token="t")
    c._http.request = lambda method, path, body=None, **kw: sent.append(body) or {"workers": []}
    c.launch_workers(n=1, cpu=1, memory=1, code="print('py')\n!echo hi")
    assert sent[0]["code"] == "print('py')\n!echo hi"
    # Nothing listens on port 9: a request that was sent would fail "unavailable".
    with pytest.raises(MusterError) as err:
        Client("http://127.0.0.1:9", token="t").launch_workers(n=1, cpu=1, memory=1, code="x" * (1 << 20))
    assert err.value.code == "payload_too_large" and err.value.field == "code"
    assert "script=" in str(err.value)


class FakeTty(io.StringIO):
    def isatty(self):
        return True


def test_progress_on_a_tty_rewrites_one_line_and_is_silent_elsewhere():
    tty = FakeTty()
    bar = progress_mod.Progress(stream=tty, min_interval=0)
    bar.update("1/2 up")
    bar.update("2/2 up")
    bar.close()
    assert tty.getvalue().startswith("\rmuster: 1/2 up [0s]\rmuster: 2/2 up [0s]") and tty.getvalue().endswith("\n")
    pipe = io.StringIO()
    quiet = progress_mod.Progress(stream=pipe)
    quiet.update("x", force=True)
    quiet.close("y")
    assert pipe.getvalue() == "" and not quiet.active
    off = FakeTty()
    progress_mod.Progress(enabled=False, stream=off).update("x", force=True)
    assert off.getvalue() == ""


def test_progress_in_jupyter_updates_one_display(monkeypatch):
    shown = []

    class Handle:
        def update(self, obj):
            shown.append(("update", repr(obj)))

    def display(obj, display_id=False):
        assert display_id is True
        shown.append(("display", repr(obj)))
        return Handle()

    ipython = types.ModuleType("IPython")
    ipython.get_ipython = lambda: types.SimpleNamespace(kernel=object())
    ipython_display = types.ModuleType("IPython.display")
    ipython_display.display = display
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "IPython.display", ipython_display)
    bar = progress_mod.Progress(stream=io.StringIO(), min_interval=0)
    assert bar.mode == "jupyter"
    bar.update("a")
    bar.close("b")
    assert [k for k, _ in shown] == ["display", "update"] and "muster: b" in shown[-1][1]


def test_on_interrupt_stops_then_reraises_with_the_id():
    stopped = []
    with pytest.raises(KeyboardInterrupt) as info:
        with progress_mod.on_interrupt(True, lambda: stopped.append(1), "cluster c-1", cluster_id="c-1"):
            raise KeyboardInterrupt
    assert stopped == [1] and info.value.cluster_id == "c-1"
    with pytest.raises(KeyboardInterrupt):
        with progress_mod.on_interrupt(False, lambda: stopped.append(2), "x"):
            raise KeyboardInterrupt
    assert stopped == [1]


def test_cli_parser():
    p = parser()
    assert p.parse_args(["--json", "ps"]).json and p.parse_args(["ps", "--json"]).json
    a = p.parse_args(["horovodrun", "-np", "2", "--cycle-time-ms", "5", "train.py", "--lr", "1"])
    assert (a.np, a.cycle_time_ms, a.script, a.args) == (2, 5.0, "train.py", ["--lr", "1"])
    with pytest.raises(SystemExit):
        p.parse_args(["run-cluster", "--workers", "2", "--chief", "2", "--script", "x"])
