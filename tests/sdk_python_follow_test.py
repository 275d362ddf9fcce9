"""Python SDK against a real musterd: followed logs, cdsw parity notes, progress and Ctrl-C (integration).

- worker_logs(follow=True) yields each line within a second of the worker
  writing it and ends when the worker ends; through a proxy that cuts the
  connection mid-stream it reconnects and loses or repeats nothing;
- cluster_logs(follow=True) on a running mpi cluster;
- CML cloud arguments and script+code come back as MusterWarning;
- a real SIGINT to a process blocked in horovodrun(wait_for_completion=True)
  or await_workers stops the cluster / workers (checked over the REST API and
  in /proc), and the KeyboardInterrupt carries the cluster id;
- progress: a status line rewritten with \\r on a tty, nothing on a pipe.
"""
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest

import muster
from sdk_daemon import Daemon, processes_with_env, sdk_session, write_scripts
from testutil import wait_for

SCRIPTS = {
    # N lines, one every 0.3 s, each carrying the time it was written.
    "ticker.py": """
        import os, sys, time
        for i in range(int(os.environ.get("TICKS", "8"))):
            print("tick %d %.6f" % (i, time.time()), flush=True)
            time.sleep(float(os.environ.get("TICK_S", "0.3")))
        print("done", flush=True)
    """,
    "sleeper.py": """
        import time
        print("sleeping", flush=True)
        time.sleep(600)
    """,
    "crash.py": """
        print("loading data", flush=True)
        raise ValueError("boom in the worker")
    """,
}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
    with Daemon(project, tmp_path_factory.mktemp("state")) as d, sdk_session(d):
        yield d


def test_worker_logs_follow_yields_lines_live_and_ends_with_the_worker(daemon):
    [w] = muster.launch_workers(n=1, cpu=0.5, memory=0.5, script="ticker.py", env={"TICKS": "8"})
    seen = []
    for line in muster.worker_logs(w, follow=True):
        if not line.startswith("[muster-agent]"):  # the agent's own notes share the log
            seen.append((line, time.time()))
    lines = [line for line, _ in seen]
    assert lines == ["tick %d %s" % (i, lines[i].split()[2]) for i in range(8)] + ["done"], lines
    lags = [at - float(line.split()[2]) for line, at in seen[:-1]]
    assert max(lags) < 1.0, "lines arrived late: %s" % lags
    # They came over time, not all at the end: the first long before the last.
    assert seen[-2][1] - seen[0][1] > 1.5
    assert muster.get_worker(w)["status"] == "succeeded"


class CuttingProxy:
    """A TCP proxy to musterd that cuts the first followed answer after `cut` bytes from the daemon."""

    def __init__(self, target, cut):
        host, port = target.split("//")[1].split(":")
        self.target = (host, int(port))
        self.cut = cut
        self.cuts = 0
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        upstream = socket.create_connection(self.target)
        request = client.recv(65536)
        upstream.sendall(request)
        cut = self.cut if b"follow=true" in request and self.cuts == 0 else None
        if cut is not None:
            self.cuts += 1
        sent = 0
        try:
            while True:
                data = upstream.recv(65536 if cut is None else max(1, min(65536, cut - sent)))
                if not data:
                    break
                client.sendall(data)
                sent += len(data)
                if cut is not None and sent >= cut:
                    break
        except OSError:
            pass
        client.close()
        upstream.close()

    def close(self):
        self.listener.close()


def test_follow_reconnects_from_its_offset_after_the_connection_drops(daemon):
    [w] = muster.launch_workers(n=1, cpu=0.5, memory=0.5, script="ticker.py", env={"TICKS": "10", "TICK_S": "0.2"})
    proxy = CuttingProxy(daemon.url, cut=400)  # headers plus a few lines, mid-line
    try:
        client = muster.Client(proxy.url, daemon.token)
        every = list(client.worker_logs(w, follow=True))
    finally:
        proxy.close()
    assert proxy.cuts == 1
    assert "\n".join(every) + "\n" == muster.worker_logs(w)  # nothing lost or repeated
    lines = [x for x in every if not x.startswith("[muster-agent]")]
    assert [x.split()[:2] for x in lines[:-1]] == [["tick", str(i)] for i in range(10)], lines
    assert lines[-1] == "done"


def test_cluster_logs_follow_on_an_mpi_cluster(daemon):
    c = muster.horovodrun(2, "ticker.py", cpu=0.5, memory=0.5, env={"TICKS": "4"}, timeout_seconds=60)
    lines = list(muster.cluster_logs(c, follow=True))
    ticks = [x for x in lines if "tick 3" in x]
    assert len(ticks) == 2, lines  # both ranks' last tick, tagged by mpirun
    assert muster.get_cluster(c)["status"] == "succeeded"


def test_cml_cloud_arguments_and_script_with_code_warn(daemon):
    with pytest.warns(muster.MusterWarning, match="resource_profile_id.*ignored"):
        ws = muster.launch_workers(n=1, cpu=0.5, memory=0.5, script="ticker.py", env={"TICKS": "1"},
                                   resource_profile_id="rp-1", accelerator_label_id=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ws += muster.launch_workers(n=1, cpu=0.5, memory=0.5, script="ticker.py", code="print('code ran')",
                                    env={"TICKS": "1"})
    assert any(issubclass(x.category, muster.MusterWarning) and "script" in str(x.message) for x in caught), \
        [str(x.message) for x in caught]
    done = muster.await_workers(ws, wait_for_completion=True, timeout_seconds=60, progress=False)
    assert not done["failures"], done["failures"]
    log = muster.worker_logs(ws[1])
    assert "tick 0" in log and "code ran" not in log  # the script ran, as in cdsw
    for w in done["workers"]:
        assert w["running_at"] and isinstance(w["duration"], float) and w["duration"] > 0


def run_interrupted(daemon, body, ready):
    """Runs `body` in a python3 subprocess, waits for ready() (a REST check), sends SIGINT; returns (rc, stderr)."""
    env = daemon.env()
    env["PYTHONPATH"] = os.path.join(os.environ["MUSTER_SOURCE_DIR"], "sdk", "python")
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(body)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(ready, 60, what="the call to start its work")
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def test_ctrl_c_in_horovodrun_stops_the_cluster_and_names_it(daemon):
    before = {c["id"] for c in muster.list_clusters()}
    body = """
        import muster
        try:
            muster.horovodrun(2, "sleeper.py", cpu=0.5, memory=0.5, wait_for_completion=True)
        except KeyboardInterrupt as e:
            print("interrupted cluster", e.cluster_id, flush=True)
            raise
    """

    def running():
        new = [c for c in muster.list_clusters() if c["id"] not in before and c["status"] == "running"]
        return new and "sleeping" in muster.cluster_logs(new[0]) and new[0]

    rc, out, err = run_interrupted(daemon, body, running)
    [cluster] = [c for c in muster.list_clusters() if c["id"] not in before]
    assert "interrupted cluster %s" % cluster["id"] in out
    # One line, no traceback through urllib: the interrupt is a muster.MusterInterrupted.
    assert rc != 0 and err.splitlines() == ["muster: interrupted; stopped cluster %s" % cluster["id"]], (rc, err)
    assert cluster["status"] == "stopped"
    for wid in cluster["workers"]["worker"]:
        assert muster.get_worker(wid)["status"] in ("stopped", "failed")
    wait_for(lambda: not processes_with_env("MUSTER_CLUSTER_ID=" + cluster["id"]), 15,
             what="every process of cluster %s to end" % cluster["id"])


def test_ctrl_c_in_await_workers_stops_the_workers(daemon):
    before = {w["id"] for w in muster.list_workers()}
    body = """
        import muster
        ws = muster.launch_workers(n=2, cpu=0.5, memory=0.5, script="sleeper.py")
        muster.await_workers(ws, wait_for_completion=True, timeout_seconds=0)
    """

    def running():
        new = [w for w in muster.list_workers() if w["id"] not in before]
        return len(new) == 2 and all(w["status"] == "running" for w in new)

    rc, _, err = run_interrupted(daemon, body, running)
    new = [w for w in muster.list_workers() if w["id"] not in before]
    assert rc != 0 and len(err.splitlines()) == 1, (rc, err)
    assert err.startswith("muster: interrupted; stopped workers ") and all(w["id"] in err for w in new), err
    assert sorted(w["status"] for w in new) == ["stopped", "stopped"], new
    for w in new:
        wait_for(lambda: not processes_with_env("MUSTER_WORKER_ID=" + w["id"]), 15, what="worker %s to end" % w["id"])


def run_on_a_tty(daemon, body):
    """Runs `body` in a python3 subprocess whose stderr is a pty; returns (stdout, what the pty showed)."""
    env = daemon.env()
    env["PYTHONPATH"] = os.path.join(os.environ["MUSTER_SOURCE_DIR"], "sdk", "python")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(body)], env=env, stdout=subprocess.PIPE,
                            stderr=slave, text=True)
    os.close(slave)
    tty_text = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(master, 4096)
        except OSError:
            break
        if not data:
            break
        tty_text += data
    out = proc.communicate(timeout=60)[0]
    os.close(master)
    return out, tty_text.decode()


def test_progress_is_one_rewritten_line_on_a_tty_and_silent_on_a_pipe(daemon):
    body = """
        import muster, sys
        ws = muster.launch_workers(n=2, cpu=0.5, memory=0.5, script="ticker.py", env={"TICKS": "6"})
        res = muster.await_workers(ws, wait_for_completion=True, timeout_seconds=60)
        print("failures", len(res["failures"]), file=sys.stdout, flush=True)
    """
    env = daemon.env()
    env["PYTHONPATH"] = os.path.join(os.environ["MUSTER_SOURCE_DIR"], "sdk", "python")
    out, text = run_on_a_tty(daemon, body)
    assert "failures 0" in out
    assert "\r" in text and "muster: 2/2 workers succeeded" in text, text
    assert "muster: 0/2 workers succeeded" in text, text
    piped = subprocess.run([sys.executable, "-c", textwrap.dedent(body)], env=env, capture_output=True, text=True,
                           timeout=60)
    assert piped.returncode == 0 and "failures 0" in piped.stdout
    assert piped.stderr == "", piped.stderr


def test_progress_ends_with_a_failed_workers_last_lines_and_counts_a_timeout_apart(daemon):
    """The status line's last state: the worker that crashed, counted as failed, with its traceback below
    it; the one still running at the timeout counted as timed out, not failed, and left running."""
    body = """
        import muster
        bad = muster.launch_workers(n=1, cpu=0.5, memory=0.5, script="crash.py")
        slow = muster.launch_workers(n=1, cpu=0.5, memory=0.5, script="sleeper.py")
        muster.await_workers(slow, wait_for_completion=False, timeout_seconds=60, progress=False)
        res = muster.await_workers(bad + slow, wait_for_completion=True, timeout_seconds=4)
        print("statuses", [f["status"] for f in res["failures"]], muster.get_worker(slow[0])["status"], flush=True)
        muster.stop_workers(*slow)
    """
    out, text = run_on_a_tty(daemon, body)
    assert "statuses ['failed', 'running'] running" in out, (out, text)
    last = text.replace("\r\n", "\n").rsplit("\r", 1)[-1]  # the pty writes "\n" as "\r\n"
    status, _, below = last.partition("\n")
    assert status.startswith("muster: 0/2 workers succeeded, 1 failed, 1 timed out (still running) ["), last
    assert "--- last lines of its log ---" in below and "Traceback (most recent call last):" in below, last
    assert below.rstrip().splitlines()[-1] == "ValueError: boom in the worker", last
    assert "[muster-agent]" not in below, last
