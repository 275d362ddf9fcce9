"""Chaos: kill -9 musterd (local backend, fixed port and
state dir) in the middle of a 64-worker launch, during a running mpi cluster
(mpirun with 2 sleeping ranks, and one whose ranks train on) and during a
running ps cluster (1 ps + 2 workers), restart it on the same state dir and
port, and check what a user would: every record is back with a truthful
status, running workers were adopted (they keep running and reporting, and a
stop through the new daemon reaches them), a running mpi cluster was taken
back (its job runs on under muster-launcher and ends well, its output all in
the log; a stop through the new daemon ends mpirun and every rank, nothing of
its session left in /proc), the interrupted ps cluster's tasks are gone, and
the port binds again.
"""
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from sdk_daemon import Daemon, kill_processes_with_env  # noqa: E402
from testutil import free_port, wait_for  # noqa: E402

from muster.client import Client  # noqa: E402

SLEEPER = "import time\ntime.sleep(600)\n"


def environ_of(pid):
    try:
        with open("/proc/%s/environ" % pid, "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return {}
    out = {}
    for e in entries:
        k, sep, v = e.partition(b"=")
        if sep:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def stat_of(pid):
    """(state, pgrp, session, start time) of a live process, or None."""
    try:
        with open("/proc/%s/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[2]), int(fields[3]), int(fields[19])


def identity(pid):
    s = stat_of(pid)
    return (int(pid), s[3]) if s and s[0] != "Z" else None


def alive(ident):
    s = stat_of(ident[0])
    return s is not None and s[0] != "Z" and s[3] == ident[1]


def processes(**env):
    """Live pids whose environment holds every NAME=value of `env` (value None: NAME is set)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        e = environ_of(pid)
        if all((k in e) if v is None else e.get(k) == v for k, v in env.items()):
            s = stat_of(pid)
            if s and s[0] != "Z":
                out.append(int(pid))
    return out


def exe_name(pid):
    try:
        return os.path.basename(os.readlink("/proc/%d/exe" % pid))
    except OSError:
        return ""


def agents(url):
    """worker id -> pid of every live agent of the daemon at `url` (scripts carry no token)."""
    out = {}
    for p in processes(MUSTER_URL=url, MUSTER_AGENT_TOKEN=None, MUSTER_WORKER_ID=None):
        wid = environ_of(p).get("MUSTER_WORKER_ID")  # the process may have ended meanwhile
        if wid:
            out[wid] = p
    return out


def port_binds(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
            return True
        except OSError:
            return False


@pytest.fixture
def chaos(tmp_path):
    """Starts daemons on one fixed port and state dir; kills whatever they left at the end."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "sleeper.py").write_text(SLEEPER)
    state = tmp_path / "state"
    port = free_port()
    started = []

    def start(extra=()):
        d = Daemon(project, state, extra_args=["--heartbeat-interval", "0.5", "--heartbeat-timeout", "4",
                                               "--startup-timeout", "8", "--stop-grace", "1"] + list(extra),
                   listen="127.0.0.1:%d" % port)
        d.start()
        started.append(d)
        return d

    def kill9(d):
        os.kill(d.proc.pid, signal.SIGKILL)  # the daemon only: its children live on, as after a crash
        d.proc.wait(10)
        d.proc = None

    yield start, kill9, port
    for d in started:
        d.stop()
    if started and started[0].url:
        kill_processes_with_env("MUSTER_URL=" + started[0].url, str(state))


def test_kill9_during_a_64_worker_launch(chaos):
    start, kill9, port = chaos
    d = start(["--max-workers", "64"])
    url = d.url
    client = Client(d.url, d.token, timeout_seconds=60)
    errors = []

    def launch():
        try:
            # 6.4 CPUs on a 2-core host, on purpose (musterd's default --overcommit=true runs them, warning).
            client.launch_workers(n=64, cpu=0.1, memory=0.1, code=SLEEPER)
        except Exception as e:  # noqa: BLE001 - the daemon dies under it
            errors.append(e)

    t = threading.Thread(target=launch)
    t.start()
    wait_for(lambda: agents(url), 20, what="the first agent")
    kill9(d)
    t.join(30)
    # A child the daemon was spawning when it died holds a copy of the
    # listener until its exec (close-on-exec), so allow that moment; an agent
    # that had inherited the port would hold it for good.
    try:
        wait_for(lambda: port_binds(port), 5, what="the killed daemon's port to be free")
    except AssertionError:
        holders = subprocess.run(["ss", "-ltnp", "sport = :%d" % port], capture_output=True, text=True).stdout
        raise AssertionError("a process holds the killed daemon's port:\n" + holders)

    d2 = start(["--max-workers", "64"])
    assert d2.url == url
    c2 = Client(d2.url, d2.token)
    # Agents that were started re-register and are adopted; records whose
    # agent never started time out; records whose launch had not come back
    # from the backend (still "scheduling") fail, and their agents, if any
    # started, are refused and exit. Nothing stays "scheduling" or "starting",
    # and exactly the running records have a live agent.
    def settled():
        ws = c2.list_workers()
        if any(w["status"] in ("scheduling", "starting") for w in ws):
            return None
        return (ws,) if {w["id"] for w in ws if w["status"] == "running"} == set(agents(url)) else None

    (workers,) = wait_for(settled, 40, what="every record to settle")
    assert len(workers) in (0, 64), "a launch is one transaction: %d records" % len(workers)
    running = {w["id"] for w in workers if w["status"] == "running"}
    for w in workers:
        assert w["status"] in ("running", "timedout", "failed"), w
        if w["status"] == "timedout":
            assert "did not register" in w["reason"], w
        if w["status"] == "failed":
            assert w["reason"] == "the daemon restarted before the worker was launched", w
    assert running == set(agents(url)), "running records and live agents differ"
    # Adopted workers keep reporting: still running after a heartbeat timeout.
    time.sleep(4.5)
    assert {w["id"] for w in c2.list_workers() if w["status"] == "running"} == running
    # The new daemon reaches the old daemon's agents.
    c2.stop_workers()
    wait_for(lambda: not agents(url), 15, what="every agent to end")


def test_kill9_during_a_running_mpi_cluster(chaos):
    start, kill9, port = chaos
    d = start()
    client = Client(d.url, d.token, timeout_seconds=60)
    cluster = client.horovodrun(2, "sleeper.py", slots=1, cpu=0.1, memory=0.1, launch=True)
    cid = cluster["id"]
    # The ranks' python processes and the /bin/sh in front of each, which
    # reports its exit (mpi_mode.h, kRankExitWrapper).
    # Until both ranks have exec'd python (a rank is seen as setpriv for a moment first).
    ranks = wait_for(lambda: (lambda p: p if len(p) == 4 and sum(exe_name(q).startswith("python") for q in p) == 2
                              else None)(processes(MUSTER_CLUSTER_ID=cid, OMPI_COMM_WORLD_RANK=None)), 30,
                     what="2 ranks (python) and their wrappers")
    assert sorted(exe_name(p).startswith("python") for p in ranks) == [False, False, True, True], \
        [exe_name(p) for p in ranks]
    mpirun = [p for p in processes(MUSTER_CLUSTER_ID=cid)
              if os.path.basename(os.readlink("/proc/%d/exe" % p)).startswith(("mpirun", "orterun", "prterun"))]
    assert len(mpirun) == 1, mpirun
    # The launcher starts clean: nothing blocked, and none of the daemon's sockets.
    with open("/proc/%d/status" % mpirun[0]) as f:
        sigblk = [line.split()[1] for line in f if line.startswith("SigBlk:")][0]
    assert int(sigblk, 16) == 0, "mpirun inherited blocked signals: " + sigblk
    old = [identity(p) for p in ranks + mpirun]
    old_session = stat_of(mpirun[0])[2]
    workers = [t for t in cluster["workers"]["worker"]]

    kill9(d)
    assert all(alive(i) for i in old), "mpirun should outlive a daemon killed with -9"
    assert port_binds(port), "mpirun holds the killed daemon's port"

    # The restarted daemon takes the cluster back, as it does its workers:
    # the job runs on, untouched, and a stop through the new daemon ends it.
    d2 = start()
    c2 = Client(d2.url, d2.token)
    after = c2.get_cluster(cid)
    assert after["status"] == "running", after
    time.sleep(2)  # a few of the new daemon's passes
    assert c2.get_cluster(cid)["status"] == "running"
    assert all(alive(i) for i in old), "the job must run on under the new daemon"
    wait_for(lambda: all(c2.get_worker(w)["status"] == "running" for w in workers), 20,
             what="the hosts' agents back with the new daemon")
    c2.stop_cluster(cid)
    wait_for(lambda: not any(alive(i) for i in old), 10, what="mpirun and its ranks to end")
    leftovers = [p for p in os.listdir("/proc") if p.isdigit() and (stat_of(p) or ("Z", 0, 0, 0))[0] != "Z"
                 and stat_of(p)[2] == old_session]
    assert not leftovers, "processes of mpirun's session survived: %s" % leftovers
    assert c2.get_cluster(cid)["status"] == "stopped"
    for wid in workers:
        assert c2.get_worker(wid)["status"] == "stopped"
    wait_for(lambda: not processes(MUSTER_CLUSTER_ID=cid), 10, what="the cluster's agents to end")


def test_an_mpi_job_finishes_across_a_daemon_restart(chaos, tmp_path):
    """kill -9 of the daemon while the ranks train: the job ends after the restart, its
    output written all along (the keeper, not the daemon, holds mpirun's pipe), and the
    new daemon reports it succeeded, its hosts succeeded."""
    start, kill9, _ = chaos
    project = tmp_path / "project"
    (project / "ticks.py").write_text(textwrap.dedent("""
        import os, sys, time
        rank = os.environ["OMPI_COMM_WORLD_RANK"]
        for i in range(40):
            os.write(1, ("rank %s tick %d\\n" % (rank, i)).encode())
            time.sleep(0.2)
    """))
    d = start()
    client = Client(d.url, d.token, timeout_seconds=60)
    cluster = client.horovodrun(2, "ticks.py", slots=1, cpu=0.1, memory=0.1, launch=True)
    cid = cluster["id"]
    wait_for(lambda: "tick 3" in client.cluster_logs(cid), 30, what="the ranks to tick")
    kill9(d)
    time.sleep(1.5)  # ticks while no daemon runs
    d2 = start()
    c2 = Client(d2.url, d2.token, timeout_seconds=120)
    done = wait_for(lambda: (lambda c: c if c["status"] not in ("starting", "running") else None)(
        c2.get_cluster(cid)), 60, what="the job to end")
    assert done["status"] == "succeeded", done
    logs = c2.cluster_logs(cid, from_start=True)
    for rank in ("0", "1"):
        ticks = [line for line in logs.splitlines() if "rank %s tick" % rank in line]
        assert len(ticks) == 40, "rank %s: %d of 40 lines in the log:\n%s" % (rank, len(ticks), logs[-2000:])
    for wid in cluster["workers"]["worker"]:
        w = c2.get_worker(wid)
        assert w["status"] == "succeeded" and w["exit_code"] == 0, w


def test_kill9_during_a_running_ps_cluster(chaos):
    start, kill9, port = chaos
    d = start()
    client = Client(d.url, d.token, timeout_seconds=60)
    spec, _ = client.run_cluster(n_workers=2, n_ps=1, cpu=0.1, memory=0.1, ps_script="sleeper.py",
                                 timeout_seconds=30)
    assert len(spec["ps"]) == 1 and len(spec["worker"]) == 2
    cluster = max(client.list_clusters(), key=lambda c: c["created_at"])
    cid = cluster["id"]
    tasks = cluster["workers"]["ps"] + cluster["workers"]["worker"]
    scripts = wait_for(lambda: (lambda p: p if len(p) >= 3 else None)(
        [p for p in processes(MUSTER_CLUSTER_ID=cid, TF_CONFIG=None) if "MUSTER_AGENT_TOKEN" not in environ_of(p)]), 20,
        what="3 task scripts")
    old = [identity(p) for p in scripts]

    kill9(d)
    assert all(alive(i) for i in old)
    assert port_binds(port)

    d2 = start()
    c2 = Client(d2.url, d2.token)
    after = c2.get_cluster(cid)
    assert after["status"] == "failed" and "daemon restarted" in after["reason"], after
    for wid in tasks:
        assert c2.get_worker(wid)["status"] == "stopped", c2.get_worker(wid)
    wait_for(lambda: not processes(MUSTER_CLUSTER_ID=cid) and not any(alive(i) for i in old), 10,
             what="every task's agent and script to end")
    assert len(c2.list_workers()) == 3
