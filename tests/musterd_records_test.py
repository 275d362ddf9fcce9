"""Bounded records against a real musterd holding 20,000 finished workers.

The workers are real rows: one worker really runs, and its row in the state
database is copied 20,000 times under new ids (launching 20,000 processes
would take this machine an hour). Then:
- the dashboard's event stream sends the whole snapshot, in pieces of at
  most 200 workers, and stays open (before: one 11 MB event past the 4 MiB
  stream bound closed it after 28 bytes);
- 8 clients listing every worker at once (in pages) leave the daemon's
  RSS bounded;
- DELETE forgets a finished worker and refuses a running one;
- restarted with the default retention (and --max-finished-workers 1000),
  the daemon forgets the oldest, rows and all, once a second.
"""
import concurrent.futures
import json
import os
import socket
import sqlite3
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from sdk_daemon import Daemon, write_scripts  # noqa: E402
from testutil import wait_for  # noqa: E402

import muster  # noqa: E402
from muster.errors import MusterError  # noqa: E402

N = 20_000
SCRIPTS = {"sleep.py": "import time\ntime.sleep(600)\n"}


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


class ChunkedReader:
    """The body of a chunked HTTP response on a socket, piece by piece."""

    def __init__(self, sock):
        self.sock, self.raw, self.total = sock, b"", 0

    def _need(self, n):
        while len(self.raw) < n:
            data = self.sock.recv(1 << 20)
            if not data:
                raise AssertionError("the event stream closed after %d body bytes" % self.total)
            self.raw += data

    def _line(self):
        while b"\r\n" not in self.raw:
            self._need(len(self.raw) + 1)
        line, self.raw = self.raw.split(b"\r\n", 1)
        return line

    def headers(self):
        while True:
            if self._line() == b"":
                return

    def chunk(self):
        size = int(self._line(), 16)
        self._need(size + 2)
        data, self.raw = self.raw[:size], self.raw[size + 2:]
        self.total += size
        return data


def read_snapshot(daemon):
    """Reads GET /api/v1/events until the snapshot is complete; (workers seen, largest piece, pieces)."""
    host, port = daemon.url[len("http://"):].split(":")
    s = socket.create_connection((host, int(port)), timeout=60)
    s.sendall(("GET /api/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n" % daemon.token).encode())
    reader = ChunkedReader(s)
    reader.headers()
    buf = b""
    workers, largest, pieces = set(), 0, 0
    try:
        while True:
            buf += reader.chunk()
            while b"\n\n" in buf:
                block, buf = buf.split(b"\n\n", 1)
                lines = block.split(b"\n")
                if b"event: snapshot" not in lines:
                    continue
                piece = json.loads([line for line in lines if line.startswith(b"data: ")][0][len(b"data: "):])
                assert piece["part"] == pieces
                pieces += 1
                largest = max(largest, len(piece["workers"]))
                workers.update(w["id"] for w in piece["workers"])
                if piece["complete"]:
                    return workers, largest, pieces
    finally:
        s.close()


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """A state dir whose database holds N copies of a real finished worker's row."""
    project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
    state = tmp_path_factory.mktemp("state")
    with Daemon(project, state) as d:
        client = muster.Client(d.url, d.token)
        [w] = client.launch_workers(n=1, cpu=0.1, memory=0.1, code="print('done')")
        client.await_workers([w], timeout_seconds=120, progress=False)
    con = sqlite3.connect(str(state / "musterd.db"))
    _, seq, text = con.execute("SELECT id, seq, record FROM workers WHERE id = ?", (w["id"],)).fetchone()
    record = json.loads(text)
    rows = []
    for i in range(N):
        wid = "r%09d" % i
        record["worker"]["id"] = wid
        record["agent_token"] = "t%063d" % i
        record["log_path"] = str(state / "workers" / wid / "output.log")
        rows.append((wid, seq + 1 + i, json.dumps(record)))
    con.executemany("INSERT INTO workers (id, seq, record) VALUES (?, ?, ?)", rows)
    con.commit()
    con.close()
    return project, state


def test_20000_finished_workers_stream_list_and_stay_bounded(state):
    project, state_dir = state
    with Daemon(project, state_dir, extra_args=["--max-finished-workers", "50000"]) as d:
        client = muster.Client(d.url, d.token)
        baseline = rss_mb(d.proc.pid)
        workers, largest, pieces = read_snapshot(d)
        assert len(workers) == N + 1
        assert largest <= 200 and pieces > N // 200

        def everyone(_):
            return len(client.list_workers())

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            counts = list(pool.map(everyone, range(8)))
        assert counts == [N + 1] * 8
        peak = rss_mb(d.proc.pid)
        # 8 lists of 20,000 workers built whole took ~600 MB; in pages, the
        # daemon stays within 150 MB of what it holds at rest.
        assert peak - baseline < 150, "RSS %.0f MB -> %.0f MB" % (baseline, peak)

        # DELETE: a finished worker goes, a running one is refused.
        client.delete_worker("r000000000")
        with pytest.raises(MusterError) as err:
            client.get_worker("r000000000")
        assert err.value.http_status == 404
        [live] = client.launch_workers(n=1, cpu=0.1, memory=0.1, script="sleep.py")
        with pytest.raises(MusterError) as err:
            client.delete_worker(live)
        assert err.value.http_status == 409 and "stop it" in str(err.value)
        client.stop_workers(live)

    # Retention: the oldest finished workers beyond 1000 go, rows and all.
    with Daemon(project, state_dir, extra_args=["--max-finished-workers", "1000"]) as d:
        client = muster.Client(d.url, d.token)
        wait_for(lambda: len(client.list_workers()) == 1000, timeout=30, what="retention down to 1000")
        assert "r000019999" in {w["id"] for w in client.list_workers()}, "the newest are kept"
    con = sqlite3.connect(str(state_dir / "musterd.db"))
    assert con.execute("SELECT COUNT(*) FROM workers").fetchone()[0] == 1000
    con.close()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
