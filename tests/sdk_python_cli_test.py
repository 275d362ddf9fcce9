"""The `muster` command line as a user runs it (python3 -m muster, a subprocess) against a real musterd.

launch / ps / logs (-f) / stop on workers, horovodrun --no-launch with
Horovod options, clusters and stop on a cluster, --json output, and the
exit codes and messages of the error model (muster.cli).
"""
import json
import os
import subprocess
import sys
import time

import pytest

from sdk_daemon import Daemon, write_scripts

SCRIPTS = {
    "hello.py": """
        import os, sys, time
        print("hello from", os.environ.get("MUSTER_WORKER_ID"), "args", sys.argv[1:], flush=True)
        time.sleep(float(os.environ.get("HOLD_S", "0")))
        print("bye", flush=True)
    """,
    "crash.py": """
        print("loading data", flush=True)
        raise ValueError("boom in the worker")
    """,
}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
    with Daemon(project, tmp_path_factory.mktemp("state")) as d:
        try:
            yield d
        finally:
            muster(d, "stop", "--all")


def muster(daemon, *args, env=None, timeout=90):
    e = daemon.env() if daemon else dict(os.environ)
    e["PYTHONPATH"] = os.path.join(os.environ["MUSTER_SOURCE_DIR"], "sdk", "python")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "muster"] + list(args), env=e, capture_output=True, text=True,
                          timeout=timeout)


def ok(result):
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def test_launch_ps_logs_stop(daemon):
    ids = ok(muster(daemon, "launch", "-n", "2", "--script", "hello.py", "--cpu", "0.5", "--memory", "0.5",
                    "--env", "HOLD_S=30", "--", "--lr", "0.1")).split()
    assert len(ids) == 2
    table = ok(muster(daemon, "ps"))
    assert table.splitlines()[0].split()[:3] == ["ID", "STATUS", "IP"]
    assert all(i in table for i in ids)
    workers = json.loads(ok(muster(daemon, "ps", "--json")))
    assert {w["id"] for w in workers} >= set(ids)
    assert all("running_at" in w and "duration" in w for w in workers)
    up = json.loads(ok(muster(daemon, "--json", "launch", "-n", "1", "--script", "hello.py", "--wait",
                              "--cpu", "0.5", "--memory", "0.5")))
    # hello.py ends at once: awaited for running, a script that ran and succeeded meanwhile is no failure.
    assert up["workers"][0]["status"] in ("running", "succeeded") and not up["failures"]
    # logs -f follows the short-lived one to its end.
    follow = ok(muster(daemon, "logs", "-f", up["workers"][0]["id"]))
    assert follow.splitlines()[-1] == "bye" and "hello from %s" % up["workers"][0]["id"] in follow
    stopped = ok(muster(daemon, "stop", *ids))
    assert sorted(line.split()[1] for line in stopped.splitlines()) == ["stopped", "stopped"]
    assert "args ['--lr', '0.1']" in ok(muster(daemon, "logs", "--tail", "5", ids[0]))
    assert not any(i in ok(muster(daemon, "ps")) for i in ids)
    assert all(i in ok(muster(daemon, "ps", "-a")) for i in ids)


def test_logs_follow_prints_lines_while_the_worker_runs(daemon):
    [wid] = ok(muster(daemon, "launch", "-n", "1", "--script", "hello.py", "--cpu", "0.5", "--memory", "0.5",
                      "--env", "HOLD_S=4")).split()
    e = daemon.env()
    e["PYTHONPATH"] = os.path.join(os.environ["MUSTER_SOURCE_DIR"], "sdk", "python")
    proc = subprocess.Popen([sys.executable, "-m", "muster", "logs", "-f", wid], env=e, stdout=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        while line.startswith("[muster-agent]"):
            line = proc.stdout.readline()
        assert line.startswith("hello from %s" % wid), line
        # The first line came while the worker still holds: it was followed, not read at the end.
        [me] = [w for w in json.loads(ok(muster(daemon, "ps", "--json"))) if w["id"] == wid]
        assert me["status"] == "running", me
        rest = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and rest.splitlines()[-1] == "bye", rest


def test_logs_takes_a_worker_id_a_cluster_id_or_the_start_of_either(daemon):
    up = json.loads(ok(muster(daemon, "--json", "launch", "-n", "1", "--script", "hello.py", "--wait", "completion",
                              "--cpu", "0.5", "--memory", "0.5")))
    wid = up["workers"][0]["id"]
    whole = ok(muster(daemon, "logs", wid))
    assert "hello from %s" % wid in whole and whole.splitlines()[-1] == "bye", whole
    assert ok(muster(daemon, "logs", wid[:6])) == whole
    c = json.loads(ok(muster(daemon, "horovodrun", "-np", "1", "--cpu", "0.5", "--memory", "0.5", "--no-launch",
                             "--json", "hello.py")))
    try:
        assert ok(muster(daemon, "logs", c["id"])) == ""  # launch=false: no launcher log yet
        assert ok(muster(daemon, "cluster", c["id"][:5])).startswith("cluster %s running" % c["id"])
        r = muster(daemon, "cluster", wid)
        assert r.returncode == 2 and "%s is a worker, not a cluster" % wid in r.stderr, r.stderr
    finally:
        ok(muster(daemon, "stop", c["id"]))
    r = muster(daemon, "logs", "0123456789")
    assert r.returncode == 4, (r.stdout, r.stderr)
    assert "no worker or cluster '0123456789' on musterd at %s" % daemon.url in r.stderr, r.stderr


def test_launch_wait_shows_a_failed_workers_traceback_and_a_timeout_as_one(daemon):
    r = muster(daemon, "launch", "-n", "1", "--script", "crash.py", "--wait", "completion", "--cpu", "0.5",
               "--memory", "0.5")
    assert r.returncode == 5, (r.stdout, r.stderr)
    out = r.stdout
    assert " failed " in out.splitlines()[0] and "--- last lines of its log ---" in out, out
    assert "loading data" in out and "ValueError: boom in the worker" in out and "Traceback" in out, out
    start = time.monotonic()
    r = muster(daemon, "launch", "-n", "1", "--script", "hello.py", "--env", "HOLD_S=60", "--wait", "completion",
               "--timeout", "2", "--cpu", "0.5", "--memory", "0.5")
    assert r.returncode == 6 and time.monotonic() - start < 30, (r.returncode, r.stdout, r.stderr)
    wid, status, reason = r.stdout.split(None, 2)
    assert (status, reason.strip()) == ("running", "timed out (still running)"), r.stdout
    [me] = [w for w in json.loads(ok(muster(daemon, "ps", "--json"))) if w["id"] == wid]
    assert me["status"] == "running", me  # left running
    ok(muster(daemon, "stop", wid))


def test_horovodrun_no_launch_with_horovod_options_then_stop_the_cluster(daemon):
    c = json.loads(ok(muster(daemon, "horovodrun", "-np", "2", "--cpu", "0.5", "--memory", "0.5", "--no-launch",
                             "--fusion-threshold-mb", "32", "--cycle-time-ms", "5", "--json",
                             "hello.py", "--epochs", "1")))
    assert c["id"].startswith("c-") and c["status"] == "running"
    assert "hello.py --epochs 1" in c["horovodrun_command"]
    assert "--fusion-threshold-mb 32" in c["horovodrun_command"], c["horovodrun_command"]
    assert c["id"] in ok(muster(daemon, "clusters"))
    assert ok(muster(daemon, "stop", c["id"])).split() == [c["id"], "stopped"]
    assert c["id"] not in ok(muster(daemon, "clusters"))
    assert c["id"] in ok(muster(daemon, "clusters", "-a"))


def test_errors_follow_the_error_model(daemon, tmp_path):
    r = muster(daemon, "logs", "nosuchworker")
    assert r.returncode == 4 and r.stderr.startswith("muster: error: not_found:"), r.stderr
    r = muster(daemon, "launch", "-n", "0", "--script", "hello.py")
    assert r.returncode == 2 and "invalid_argument" in r.stderr and "n" in r.stderr, r.stderr
    r = muster(daemon, "launch", "-n", "1", "--script", "hello.py", "--env", "NOEQUALS")
    assert r.returncode == 2 and "NAME=VALUE" in r.stderr, r.stderr
    r = muster(daemon, "stop")
    assert r.returncode == 2 and "--all" in r.stderr
    r = muster(None, "ps", env={"MUSTER_STATE_DIR": str(tmp_path), "MUSTER_URL": "", "MUSTER_TOKEN": ""})
    assert r.returncode == 3 and "unconfigured" in r.stderr, r.stderr
    r = muster(daemon, "ps", "--url", "http://127.0.0.1:1")
    assert r.returncode == 3 and "unavailable" in r.stderr, r.stderr
    r = muster(daemon, "bogus")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    r = muster(daemon, "--help")
    assert r.returncode == 0 and "horovodrun" in r.stdout and "Exit codes" in r.stdout
