"""The state directory's integrity against a real musterd.

- One daemon per state directory: a second musterd on the same --state-dir
  exits at once naming the pid of the first, which keeps serving (its
  musterd.json and its running worker untouched).
- A database that lost its rows (deleted, or truncated to 0 bytes, its -wal
  gone) next to worker directories is refused at start, naming them, never
  silently emptied; --adopt-orphaned-workers starts and lists them as lost,
  with a log line.
- Garbled rows are logged (and skipped); the others are restored.
"""
import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from sdk_daemon import Daemon, musterd_path, write_scripts  # noqa: E402
from testutil import wait_for  # noqa: E402

import muster  # noqa: E402

SCRIPTS = {"sleep.py": "import time\ntime.sleep(600)\n"}


def finished_workers(d, n):
    client = muster.Client(d.url, d.token)
    workers = client.launch_workers(n=n, cpu=0.1, memory=0.1, code="print('done')")
    done = client.await_workers(workers, wait_for_completion=True, timeout_seconds=120, progress=False)
    assert not done["failures"], done["failures"]
    return [w["id"] for w in workers]


def run_musterd(project, state, *extra, timeout=20):
    """Runs musterd until it exits (or `timeout`); (exit code, its output)."""
    cmd = [musterd_path(), "--listen", "127.0.0.1:0", "--project-dir", str(project), "--state-dir", str(state)]
    proc = subprocess.run(cmd + list(extra), capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture()
def project(tmp_path):
    p = tmp_path / "project"
    p.mkdir()
    return write_scripts(p, SCRIPTS)


def test_a_second_daemon_on_the_same_state_dir_exits_naming_the_first(project, tmp_path):
    state = tmp_path / "state"
    with Daemon(project, state) as first:
        client = muster.Client(first.url, first.token)
        [w] = client.launch_workers(n=1, cpu=0.1, memory=0.1, script="sleep.py")
        client.await_workers([w], wait_for_completion=False, timeout_seconds=60, progress=False)
        info = (state / "musterd.json").read_text()
        start = time.monotonic()
        code, out = run_musterd(project, state)
        assert time.monotonic() - start < 10
        assert code != 0
        assert "pid %d" % first.proc.pid in out, out
        assert str(state) in out, out
        # The first daemon is untouched: same musterd.json, its worker still running.
        assert (state / "musterd.json").read_text() == info
        assert json.loads(info)["pid"] == first.proc.pid
        time.sleep(1)
        assert client.get_worker(w["id"])["status"] == "running"


@pytest.mark.parametrize("loss", ["deleted", "emptied"])
def test_a_database_that_lost_its_workers_is_refused_or_adopted(project, tmp_path, loss):
    state = tmp_path / "state"
    with Daemon(project, state) as d:
        ids = finished_workers(d, 3)
    db = state / "musterd.db"
    if loss == "deleted":
        db.unlink()
    else:
        db.write_bytes(b"")
    for extra in ("-wal", "-shm"):
        if (state / ("musterd.db" + extra)).exists():
            (state / ("musterd.db" + extra)).unlink()

    code, out = run_musterd(project, state)
    assert code != 0, out
    assert "3 worker directories" in out and "--adopt-orphaned-workers" in out, out
    assert all((state / "workers" / i).is_dir() for i in ids), "the refused start removed worker directories"

    with Daemon(project, state, extra_args=["--adopt-orphaned-workers"]) as d:
        client = muster.Client(d.url, d.token)
        listed = {w["id"]: w for w in client.list_workers()}
        assert set(listed) == set(ids)
        assert {w["status"] for w in listed.values()} == {"lost"}
        assert "done" in client.worker_logs(ids[0])  # their logs are served again
        assert "adopted 3 worker directories" in d.log(), d.log()
    # Adopted means recorded: the next start needs no flag.
    with Daemon(project, state) as d:
        assert len(muster.Client(d.url, d.token).list_workers()) == 3


def test_garbled_rows_are_logged_and_skipped(project, tmp_path):
    state = tmp_path / "state"
    with Daemon(project, state) as d:
        ids = finished_workers(d, 2)
    con = sqlite3.connect(str(state / "musterd.db"))
    con.execute("UPDATE workers SET record = '{\"worker\": {\"id\": 7}}' WHERE id = ?", (ids[0],))
    con.commit()
    con.close()
    # Its directory goes too, so the start is not refused for it.
    for f in (state / "workers" / ids[0]).iterdir():
        f.unlink()
    (state / "workers" / ids[0]).rmdir()
    with Daemon(project, state) as d:
        listed = [w["id"] for w in muster.Client(d.url, d.token).list_workers()]
        assert listed == [ids[1]]
        wait_for(lambda: "skipped a worker row that cannot be read: " + ids[0] in d.log(), timeout=10,
                 what="a log line naming the garbled row")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
