"""Python SDK against a real musterd (local backend): label integration.

One daemon per module, in a temp state dir, with a temp project dir holding
the worker scripts below. The SDK finds the daemon only through
MUSTER_STATE_DIR (musterd.json + token), as a notebook would.
"""
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import muster
from sdk_daemon import Daemon, kill_processes_with_env, pid_alive, sdk_session, write_scripts
from testutil import free_port, wait_for

SCRIPTS = {
    # Prints who it is, its args and an env var, then sleeps SLEEP seconds.
    "work.py": """
        import os, sys, time
        print("hello from", os.environ["MUSTER_WORKER_ID"], "at", os.environ["MUSTER_IP_ADDRESS"], flush=True)
        print("args", sys.argv[1:], "color", os.environ.get("COLOR", "-"), flush=True)
        time.sleep(float(os.environ.get("SLEEP", "0.5")))
        print("done", flush=True)
    """,
    "crash.py": """
        import sys
        print("line one", flush=True)
        print("about to crash", flush=True)
        sys.exit(3)
    """,
    # TICKS lines, one every TICK_S seconds, then "done".
    "ticker.py": """
        import os, time
        for i in range(int(os.environ.get("TICKS", "10"))):
            print("tick", i, flush=True)
            time.sleep(float(os.environ.get("TICK_S", "0.5")))
        print("done", flush=True)
    """,
    # Writes its pid (and a child's) to the log, then waits to be stopped.
    "forever.py": """
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print("pids", os.getpid(), child.pid, flush=True)
        time.sleep(600)
    """,
}

@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
    with Daemon(project, tmp_path_factory.mktemp("state")) as d, sdk_session(d, check_contract=True):
        yield d


def by_id(workers):
    return {w["id"]: w for w in workers}


def test_four_workers_run_with_ips_then_complete(daemon):
    import muster as cdsw  # the ported-notebook spelling
    workers = cdsw.launch_workers(n=4, cpu=0.5, memory=1, script="work.py", env={"SLEEP": "2", "COLOR": "blue"},
                                  args=["--lr", "0.1"])
    ids = [w["id"] for w in workers]
    assert len(set(ids)) == 4
    try:
        up = cdsw.await_workers(ids, wait_for_completion=False, timeout_seconds=60)
        assert up["failures"] == [], up["failures"]
        assert sorted(w["id"] for w in up["workers"]) == sorted(ids)
        for w in up["workers"]:
            assert w["status"] == "running", w
            ipaddress.ip_address(w["ip_address"])  # a real address, not "unknown"

        done = cdsw.await_workers(workers, wait_for_completion=True, timeout_seconds=60)
        assert done["failures"] == [], done["failures"]
        assert sorted(w["id"] for w in done["workers"]) == sorted(ids)
        assert all(w["status"] == "succeeded" and w["exit_code"] == 0 for w in done["workers"])

        log = cdsw.worker_logs(ids[0])
        assert "hello from %s at " % ids[0] in log
        assert "args ['--lr', '0.1'] color blue" in log and "done" in log
        listed = by_id(cdsw.list_workers())
        assert all(listed[i]["status"] == "succeeded" for i in ids)
        assert cdsw.get_worker(workers[1])["id"] == ids[1]
    finally:
        cdsw.stop_workers(*ids)


def test_crashing_script_lands_in_failures_with_exit_code_and_log(daemon):
    good, = muster.launch_workers(1, cpu=0.5, memory=1, script="work.py", env={"SLEEP": "0"})
    bad, = muster.launch_workers(1, cpu=0.5, memory=1, script="crash.py")
    res = muster.await_workers([good, bad], wait_for_completion=True, timeout_seconds=60)
    assert [w["id"] for w in res["workers"]] == [good["id"]]
    assert [f["id"] for f in res["failures"]] == [bad["id"]]
    failed = res["failures"][0]
    assert failed["status"] == "failed" and failed["exit_code"] == 3, failed
    assert "about to crash" in muster.worker_logs(bad)
    tail = muster.worker_logs(bad["id"], tail=1)
    assert "about to crash" in tail and "line one" not in tail


def test_inline_code_runs_under_python3(daemon):
    w, = muster.launch_workers(1, cpu=0.5, memory=1, code="print('inline', 6 * 7)")
    res = muster.await_workers([w], timeout_seconds=60)
    assert res["failures"] == [], res
    assert "inline 42" in muster.worker_logs(w)


def test_an_await_that_times_out_leaves_the_workers_running(daemon):
    """cdsw's await_workers: running workers that outlast the timeout are reported in "failures" as they are
    (still running, reason "timed out (still running)"), not failed, not stopped."""
    workers = muster.launch_workers(2, cpu=0.5, memory=1, script="forever.py")
    try:
        assert muster.await_workers(workers, wait_for_completion=False, timeout_seconds=60)["failures"] == []
        start = time.monotonic()
        res = muster.await_workers(workers, wait_for_completion=True, timeout_seconds=3)
        assert 2.5 < time.monotonic() - start < 30
        assert res["workers"] == []
        assert [f["id"] for f in res["failures"]] == [w["id"] for w in workers]
        for f in res["failures"]:
            assert f["status"] == "running" and f["reason"] == "timed out (still running)", f
            assert f["exit_code"] is None and "failed" not in repr(f), repr(f)
        # Left running: the await ran out, the workers did not.
        assert [muster.get_worker(w)["status"] for w in workers] == ["running", "running"]
    finally:
        muster.stop_workers(*workers)


def test_results_read_as_one_line_and_stay_the_dicts_they_were(daemon):
    ids_re = r"[0-9a-f]{10}"
    workers = muster.launch_workers(2, cpu=0.5, memory=1, script="work.py", env={"SLEEP": "4"})
    try:
        one = r"<Worker %s (scheduling|starting)>" % ids_re
        assert re.fullmatch(r"\[%s, %s\]" % (one, one), repr(workers)), repr(workers)
        up = muster.await_workers(workers, wait_for_completion=False, timeout_seconds=60)
        w = up["workers"][0]
        assert re.fullmatch(r"<Worker %s running %s( [0-9.]+ s)?>" % (w["id"], re.escape(w["ip_address"])),
                            repr(w)), repr(w)
        # The await's dict of lists reads short: one line per worker, not their fields.
        assert repr(up) == "{'workers': [%s, %s], 'failures': []}" % (repr(up["workers"][0]), repr(up["workers"][1]))
        assert "ip_address" not in repr(up) and "\n" not in repr(up)
        # Still dicts: indexing, JSON, equality with the plain record, .record the whole of it.
        assert isinstance(w, dict) and w["status"] == "running"
        assert json.loads(json.dumps(up)) == up
        record = w.record
        assert type(record) is dict and record == w and "running_at" in record and "running_at" in repr(record)
        done = muster.await_workers(workers, wait_for_completion=True, timeout_seconds=60)
        assert all(re.fullmatch(r"<Worker %s succeeded 127\.0\.0\.1 [0-9.]+ s>" % x["id"], repr(x))
                   for x in done["workers"]), done
        assert [repr(x) for x in muster.stop_workers(*workers)] == [repr(muster.get_worker(x)) for x in workers]
        listed = {x["id"]: x for x in muster.list_workers()}
        assert repr(listed[w["id"]]).startswith("<Worker %s succeeded" % w["id"])
    finally:
        muster.stop_workers(*workers)
    bad, = muster.launch_workers(1, cpu=0.5, memory=1, script="crash.py")
    failed = muster.await_workers([bad], timeout_seconds=60)["failures"][0]
    assert re.fullmatch(r"<Worker %s failed 127\.0\.0\.1 exit 3 [0-9.]+ s: .+>" % bad["id"], repr(failed)), repr(failed)
    # The end of its log: the text musterd sent, and its lines.
    assert "about to crash\n" in failed["log_tail"] and "about to crash" in failed["log_tail"].lines


def test_stop_kills_the_whole_process_tree(daemon):
    workers = muster.launch_workers(2, cpu=0.5, memory=1, script="forever.py")
    up = muster.await_workers(workers, wait_for_completion=False, timeout_seconds=60)
    assert up["failures"] == [], up["failures"]
    pids = []
    for w in workers:
        deadline = time.monotonic() + 30
        log = ""
        while "pids" not in log and time.monotonic() < deadline:
            log = muster.worker_logs(w)
            time.sleep(0.1)
        line = [ln for ln in log.splitlines() if ln.startswith("pids")]
        assert line, log
        pids += [int(p) for p in line[0].split()[1:]]
    assert all(pid_alive(p) for p in pids)

    stopped = muster.stop_workers(*workers)
    assert sorted(w["id"] for w in stopped) == sorted(w["id"] for w in workers)
    assert all(muster.get_worker(w)["status"] == "stopped" for w in workers)
    deadline = time.monotonic() + 15
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(pid_alive(p) for p in pids), "script or its child survived stop_workers"
    res = muster.await_workers(workers, wait_for_completion=True, timeout_seconds=5)
    assert {f["status"] for f in res["failures"]} == {"stopped"}


def test_bad_requests_raise_with_code_and_field(daemon):
    with pytest.raises(muster.MusterError) as err:
        muster.launch_workers(0, cpu=1, memory=1, script="work.py")
    assert (err.value.code, err.value.field, err.value.http_status) == ("invalid_argument", "n", 400)
    for script in ("../outside.py", "/etc/passwd", "missing.py"):
        with pytest.raises(muster.MusterError) as err:
            muster.launch_workers(1, cpu=1, memory=1, script=script)
        assert err.value.code == "invalid_argument" and err.value.field == "script", (script, err.value)
    with pytest.raises(muster.MusterError) as err:
        muster.launch_workers(1, cpu=1, memory=1, script="work.py", env={"BAD-NAME": "x"})
    assert err.value.code == "invalid_argument" and err.value.field == "env"
    with pytest.raises(muster.MusterError) as err:
        muster.get_worker("no-such-worker")
    assert err.value.code == "not_found" and err.value.http_status == 404
    with pytest.raises(muster.MusterError) as err:
        muster.Client(daemon.url, "wrong-token").list_workers()
    assert err.value.code == "unauthenticated" and err.value.http_status == 401


def test_many_concurrent_awaits_do_not_block_other_calls(daemon):
    import threading
    w, = muster.launch_workers(1, cpu=0.5, memory=1, script="forever.py")
    assert muster.await_workers([w], wait_for_completion=False, timeout_seconds=60)["failures"] == []
    client = muster.Client()  # one Client shared by every thread
    results, finished_at = [], []

    def wait():
        results.append(client.await_workers([w], wait_for_completion=True, timeout_seconds=30))
        finished_at.append(time.monotonic())

    threads = [threading.Thread(target=wait) for _ in range(16)]
    try:
        for t in threads:
            t.start()
        time.sleep(0.3)
        listed = client.list_workers()  # answered while 16 awaits are parked in the daemon
        answered_at = time.monotonic()
        assert any(x["id"] == w["id"] for x in listed)
        assert finished_at == [], "an await returned before the worker ended"
        muster.stop_workers(w)  # ends the worker: every parked await must wake up
        for t in threads:
            t.join(30)
        assert len(results) == 16
        assert all(r["workers"] == [] and r["failures"][0]["status"] == "stopped" for r in results)
        assert min(finished_at) > answered_at
    finally:
        muster.stop_workers(w)
        for t in threads:
            t.join(30)


def test_waits_ride_through_a_daemon_restart(tmp_path):
    """musterd killed (-9) while a notebook awaits a worker and follows its log, restarted on the same port and
    state dir: the await returns the worker succeeded, the follow ends with its last line, each line once, and
    each wait said in one line that it was retrying."""
    (tmp_path / "project").mkdir()
    project = write_scripts(tmp_path / "project", SCRIPTS)
    state = tmp_path / "state"
    listen = "127.0.0.1:%d" % free_port()
    first = Daemon(project, state, listen=listen).start()
    second = None
    env = first.env()
    env["PYTHONPATH"] = os.path.join(os.environ["MUSTER_SOURCE_DIR"], "sdk", "python")
    try:
        client = muster.Client(first.url, first.token)
        w, = client.launch_workers(1, cpu=0.5, memory=1, script="ticker.py", env={"TICKS": "16", "TICK_S": "0.5"})
        waits = {
            "await": subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
                import json, muster
                res = muster.await_workers([%r], wait_for_completion=True, timeout_seconds=120, progress=False)
                print(json.dumps(res))
            """ % w["id"])], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
            "follow": subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
                import muster
                for line in muster.worker_logs(%r, follow=True):
                    print(line, flush=True)
            """ % w["id"])], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
        }
        wait_for(lambda: "tick 2" in client.worker_logs(w), 30, what="the worker to tick")
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait(10)
        first.proc = None
        time.sleep(2)
        second = Daemon(project, state, listen=listen).start()
        assert second.url == first.url
        out = {name: p.communicate(timeout=90) for name, p in waits.items()}
        for name, p in waits.items():
            assert p.returncode == 0, (name, out[name])
            notes = [x for x in out[name][1].splitlines() if "unreachable" in x]
            assert len(notes) == 1 and notes[0].startswith("muster: musterd unreachable at %s" % first.url), out[name]
            assert notes[0].endswith("; retrying for up to 30 s"), notes
        res = json.loads(out["await"][0])
        assert [x["id"] for x in res["workers"]] == [w["id"]] and res["failures"] == [], res
        assert res["workers"][0]["status"] == "succeeded", res
        lines = [x for x in out["follow"][0].splitlines() if not x.startswith("[muster-agent]")]
        assert lines == ["tick %d" % i for i in range(16)] + ["done"], lines
    finally:
        for p in locals().get("waits", {}).values():
            if p.poll() is None:
                p.kill()
                p.wait()
        for d in (second, first):
            if d is not None:
                d.stop()
        kill_processes_with_env("MUSTER_URL=" + first.url, str(state))  # the worker, if no daemon stopped it


def test_a_wait_gives_up_on_a_daemon_that_stays_away(daemon, monkeypatch):
    monkeypatch.setenv("MUSTER_RECONNECT_SECONDS", "1.5")
    dead = muster.Client("http://127.0.0.1:%d" % free_port(), daemon.token)
    assert dead.reconnect_seconds == 1.5
    start = time.monotonic()
    with pytest.raises(muster.MusterError) as err:
        dead.await_workers(["nobody"], timeout_seconds=60, progress=False)
    assert 1.4 < time.monotonic() - start < 10
    assert err.value.code == "unavailable" and "retried for 1.5 s" in err.value.message, err.value
    monkeypatch.setenv("MUSTER_RECONNECT_SECONDS", "soon")
    with pytest.raises(muster.MusterError) as err:
        muster.Client(daemon.url, daemon.token)
    assert err.value.field == "MUSTER_RECONNECT_SECONDS" and "'soon'" in err.value.message
