"""A Horovod-elastic PyTorch script survives a lost rank: label integration.

Elastic clusters on a real musterd (local backend) run tests/
elastic_torch_train.py, Horovod's own elastic torch test in shape with only
the import changed. Each case SIGKILLs a rank mid-training (rank 0 and a
non-zero rank, at 2 and 3 ranks), kills one inside commit(), admits the
replacement at a check_host_updates() between commits, stops a whole
worker, or kills musterd while the world re-forms, and asserts:
- the cluster ends succeeded, with the death and the recovery in its
  generations;
- every rank of the last world ends with bit-identical parameters (sha256);
- no more than one commit interval is redone;
- nothing is left: no process of the cluster, no muster /dev/shm segment
  whose creator has exited.
"""
import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from sdk_daemon import Daemon, RestApi, processes_with_env
from testutil import wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = "elastic_torch_train.py"
PER_COMMIT = 4
# Each batch takes at least this long, so the job outlasts a replacement's
# start (a fresh Python importing torch: seconds on a loaded 2-core host) and
# the replacement can join before the survivors finish.
BATCH_WAIT = "0.5"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    project = tmp_path_factory.mktemp("project")
    shutil.copy(os.path.join(HERE, SCRIPT), str(project / SCRIPT))
    state = tmp_path_factory.mktemp("state")
    daemon = Daemon(project, state)
    daemon.start()
    try:
        yield {"api": RestApi(daemon), "daemon": daemon, "tmp": tmp_path_factory.mktemp("logs"),
               "project": project, "state": state}
    finally:
        daemon.stop()


def shm_segments():
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def leaked(segments):
    """muster's segments ("muster-<creator pid>-...") whose creator has exited: left behind.

    Others' segments (Open MPI's vader_segment.*, a test running beside this
    one) and those of live processes are not this cluster's leak."""
    out = []
    for name in segments:
        parts = name.split("-")
        if parts[0] != "muster" or len(parts) < 3 or not parts[1].isdigit():
            continue
        if not os.path.exists("/proc/%s" % parts[1]):
            out.append(name)
    return sorted(out)


def start(env, name, n, extra=(), **fields):
    logdir = env["tmp"] / name
    logdir.mkdir()
    sdk = os.path.join(os.path.dirname(HERE), "sdk", "python")
    body = {"mode": "elastic", "n_workers": n, "cpu": 0.5, "memory": 0.5, "worker_script": SCRIPT,
            "args": ["--logdir", str(logdir), "--batches-per-commit", str(PER_COMMIT)]
                    + ([] if "--batch-wait" in extra else ["--batch-wait", BATCH_WAIT]) + list(extra),
            "env": {"PYTHONPATH": sdk, "MUSTER_BINARY_DIR": os.environ.get("MUSTER_BINARY_DIR", ""),
                    "OMP_NUM_THREADS": "1"},
            "timeout_seconds": 120}
    body.update(fields)
    status, c = env["api"].call("POST", "/api/v1/clusters", body)
    assert status == 201, c
    return c["id"], logdir


def cluster(env, cid):
    status, c = env["api"].call("GET", "/api/v1/clusters/" + cid)
    assert status == 200, c
    return c


def finished(env, cid, timeout=240):
    return wait_for(lambda: (lambda c: c if c["status"] in ("succeeded", "failed", "stopped") else None)(
        cluster(env, cid)), timeout=timeout, interval=0.25, what="cluster %s to end" % cid)


def steps(logdir):
    out = []
    for name in os.listdir(str(logdir)):
        if name.startswith("steps-"):
            with open(os.path.join(str(logdir), name)) as f:
                out += [json.loads(line) for line in f]
    return out


def check(env, cid, logdir, shm_before, expect_size):
    c = finished(env, cid)
    if c["status"] != "succeeded":
        status, log = env["api"].call("GET", "/api/v1/clusters/%s/logs?tail=60" % cid)
        pytest.fail("cluster %s: %s\n%s\n%s" % (c["status"], c["reason"], json.dumps(c["generations"], indent=1), log))
    # Every rank of the last world holds the same parameters.
    finals = [json.load(open(os.path.join(str(logdir), f))) for f in os.listdir(str(logdir)) if f.startswith("final-")]
    last = c["generations"][-1]
    assert len(finals) == len(last["members"]) == expect_size, (finals, last)
    assert len({f["sha256"] for f in finals}) == 1, finals
    assert all(f["generation"] == last["generation"] for f in finals)
    # No more than one commit interval redone: what rank 0 of a later world
    # did again, and what the cluster's history says.
    seen = {}
    for s in sorted(steps(logdir), key=lambda s: s["time"]):
        key = (s["epoch"], s["batch"])
        if s["rank"] == 0:
            seen.setdefault(key, set()).add(s["generation"])
    redone = sum(1 for gens in seen.values() if len(gens) > 1)
    assert redone <= PER_COMMIT, seen
    for g in c["generations"]:
        if g["batches_redone"] is not None:
            assert g["batches_redone"] <= PER_COMMIT, g
    # Nothing left behind.
    wait_for(lambda: not processes_with_env("MUSTER_CLUSTER_ID=" + cid), timeout=30,
             what="every process of cluster %s to end" % cid)
    wait_for(lambda: not leaked(shm_segments() - shm_before), timeout=10,
             what="no shared-memory segment left (left: %s)" % leaked(shm_segments() - shm_before))
    return c


def death_of(c):
    deaths = [d for g in c["generations"] for d in g["deaths"]]
    assert deaths, c["generations"]
    return deaths[0]


@pytest.mark.parametrize("n,rank", [(2, 1), (2, 0), (3, 1), (3, 0)])
def test_a_killed_rank_is_replaced_and_training_ends_in_step(env, n, rank):
    before = shm_segments()
    cid, logdir = start(env, "kill-%d-%d" % (n, rank), n, ["--kill", "%d:0:6" % rank], min_np=n - 1, max_np=n)
    c = check(env, cid, logdir, before, n)
    d = death_of(c)
    assert d["task"] == "rank %d" % rank and "killed by signal 9" in d["reason"], d
    assert c["resets"] >= 1
    assert any(g["cause"] == "reset" and g["recovery_seconds"] is not None for g in c["generations"])
    # The replacement joined: the last world has n ranks, one of them new.
    first = set(c["generations"][0]["members"])
    assert len(set(c["generations"][-1]["members"]) - first) == 1


def test_elastic_events_show_live_in_the_wait(env):
    """A notebook's (or a script's) muster.horovodrun(..., wait_for_completion=True) shows each event
    as it happens: the death, going on without it, the replacement's join; and the
    generation history puts the death first."""
    logdir = env["tmp"] / "live-events"
    logdir.mkdir()
    sdk = os.path.join(os.path.dirname(HERE), "sdk", "python")
    program = (
        "import muster\n"
        "c = muster.horovodrun(3, %r, min_np=2, max_np=3, cpu=0.5, memory=0.5, timeout_seconds=120,\n"
        "                      args=['--logdir', %r, '--batches-per-commit', '%d', '--batch-wait', %r,\n"
        "                            '--kill', '1:0:6'],\n"
        "                      env={'PYTHONPATH': %r, 'MUSTER_BINARY_DIR': %r, 'OMP_NUM_THREADS': '1'},\n"
        "                      wait_for_completion=True, completion_timeout_seconds=240)\n"
        "print('END', c['id'], c['status'], flush=True)\n"
        % (SCRIPT, str(logdir), PER_COMMIT, BATCH_WAIT, sdk, os.environ.get("MUSTER_BINARY_DIR", "")))
    out = subprocess.run(["/usr/bin/python3", "-c", program], env=dict(os.environ, **env["daemon"].env()),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("muster: cluster ")]
    death = [i for i, line in enumerate(lines) if "rank 1 (worker" in line and "was killed by signal 9" in line]
    going = [i for i, line in enumerate(lines) if "going on with 2 ranks" in line]
    joined = [i for i, line in enumerate(lines) if "joined: 3 ranks" in line]
    assert death and going and joined and death[0] < going[0] < joined[0], out.stderr
    cid = out.stdout.split()[1]
    c = cluster(env, cid)
    assert c["status"] == "succeeded", c
    assert c["generations"][0]["end_reason"].startswith("rank 1 (worker "), c["generations"][0]
    assert "was killed by signal 9" in c["generations"][0]["end_reason"].split(";")[0], c["generations"][0]


def test_a_replacement_admitted_between_commits_redoes_nothing(env):
    # With check_host_updates() after every batch the replacement joins at
    # the next batch, not the next commit; the world it joins carries on
    # from the batch where the change was found (nothing rolled back, so
    # nothing trained twice), and every rank still ends on the same model.
    before = shm_segments()
    # No commit inside the epoch (the last --batches-per-commit wins), so the
    # join can only come at a check; 40 half-second batches leave the
    # replacement 20 s to start.
    cid, logdir = start(env, "host-check", 2, ["--kill", "1:0:2", "--batches-per-host-check", "1",
                                                "--batches-per-commit", "1000", "--batches-per-epoch", "40",
                                                "--epochs", "1"], min_np=1, max_np=2)
    c = check(env, cid, logdir, before, 2)
    gens = c["generations"]
    joined = [i for i in range(1, len(gens)) if len(gens[i]["members"]) > len(gens[i - 1]["members"])]
    assert joined, json.dumps(gens, indent=1)
    join = gens[joined[0]]["generation"]
    # Rank 0's batches in the order done, with the world each was done in.
    order = [(s["generation"], s["epoch"], s["batch"]) for s in sorted(steps(logdir), key=lambda s: s["time"])
             if s["rank"] == 0]
    last = [(e, b) for g, e, b in order if g < join][-1]
    first = [(e, b) for g, e, b in order if g == join][0]
    # The batch after the last one the shrunken world finished: (epoch, batch)
    # counts batches done, so the next logged one is batch + 1 of that epoch.
    assert first == (last[0], last[1] + 1), ("resumed at %s after %s" % (first, last), json.dumps(gens, indent=1))
    assert gens[joined[0]]["batches_redone"] in (None, 0), gens[joined[0]]


def test_a_rank_killed_inside_commit(env):
    before = shm_segments()
    cid, logdir = start(env, "in-commit", 2, ["--kill-in-commit", "1:0:%d" % (2 * PER_COMMIT)], min_np=1, max_np=2)
    c = check(env, cid, logdir, before, 2)
    assert death_of(c)["task"] == "rank 1"


def test_a_whole_worker_stopped(env):
    before = shm_segments()
    cid, logdir = start(env, "stopped", 2, ["--batch-wait", "0.2"], min_np=1, max_np=2)
    wait_for(lambda: any(s["epoch"] == 0 and s["batch"] >= 3 for s in steps(logdir)), timeout=120,
             what="training under way")
    victim = cluster(env, cid)["generations"][-1]["members"][1]
    status, body = env["api"].call("POST", "/api/v1/workers/stop", {"ids": [victim]})
    assert status == 200, body
    c = check(env, cid, logdir, before, 2)
    d = death_of(c)
    assert d["worker_id"] == victim and "stopped" in d["reason"], d


def test_musterd_killed_during_a_recovery(env):
    before = shm_segments()
    cid, logdir = start(env, "daemon", 2, ["--batch-wait", "0.2"], min_np=1, max_np=2)
    wait_for(lambda: any(s["epoch"] == 0 and s["batch"] >= 3 for s in steps(logdir)), timeout=120,
             what="training under way")
    daemon = env["daemon"]
    members = cluster(env, cid)["generations"][-1]["members"]
    pid = [p for p in processes_with_env("MUSTER_WORKER_ID=" + members[1])
           if SCRIPT.encode() in open("/proc/%d/cmdline" % p, "rb").read()][0]
    # The rank dies, and musterd with it while the survivor re-forms; a new
    # musterd on the same port and state takes the cluster back.
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.1)
    port = daemon.url.rsplit(":", 1)[1]
    os.killpg(daemon.proc.pid, signal.SIGKILL)
    daemon.proc.wait(10)
    daemon.listen = "127.0.0.1:" + port
    daemon.start()
    env["api"] = RestApi(daemon)
    c = check(env, cid, logdir, before, 2)
    assert death_of(c)["worker_id"] == members[1]


# ---- across container hosts (root only): each rank in a network namespace of its own

@pytest.fixture(scope="module")
def cenv(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root: the container backend creates network namespaces and a bridge")
    project = tmp_path_factory.mktemp("cproject")
    shutil.copy(os.path.join(HERE, SCRIPT), str(project / SCRIPT))
    pid = os.getpid()
    args = ["--backend-opt", "bridge=mel%d" % (pid % 100000), "--backend-opt",
            "subnet=10.223.%d.0/24" % (pid % 200), "--backend-opt", "prefix=mel", "--stop-grace", "1"]
    daemon = Daemon(project, tmp_path_factory.mktemp("cstate"), extra_args=args, listen="0.0.0.0:0",
                    backend="container")
    daemon.start(timeout=60)
    try:
        yield {"api": RestApi(daemon), "daemon": daemon, "tmp": tmp_path_factory.mktemp("clogs")}
    finally:
        daemon.stop()


def test_a_killed_rank_across_container_hosts(cenv):
    before = shm_segments()
    cid, logdir = start(cenv, "c-kill", 2, ["--kill", "1:0:6"], min_np=1, max_np=2)
    c = check(cenv, cid, logdir, before, 2)
    assert death_of(c)["task"] == "rank 1"
    # The ranks were on two hosts: their workers registered two addresses.
    ips = set()
    for wid in c["generations"][0]["members"]:
        status, w = cenv["api"].call("GET", "/api/v1/workers/" + wid)
        ips.add(w["ip_address"])
    assert len(ips) == 2, ips


def test_a_whole_container_worker_stopped(cenv):
    before = shm_segments()
    cid, logdir = start(cenv, "c-stop", 2, ["--batch-wait", "0.2"], min_np=1, max_np=2)
    wait_for(lambda: any(s["epoch"] == 0 and s["batch"] >= 3 for s in steps(logdir)), timeout=120,
             what="training under way")
    victim = cluster(cenv, cid)["generations"][-1]["members"][0]  # rank 0's container goes
    status, body = cenv["api"].call("POST", "/api/v1/workers/stop", {"ids": [victim]})
    assert status == 200, body
    c = check(cenv, cid, logdir, before, 2)
    assert death_of(c)["worker_id"] == victim
