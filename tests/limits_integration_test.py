"""Workers' cpu and memory limits, enforced with the kernel's cgroups, end to
end: a real musterd (local backend), real agents, real scripts (label
integration).

- memory=1 (GiB): a script allocating 3 GiB ends `failed` with the reason
  "out of memory (limit 1 GiB)", read from its cgroup's OOM kill counter;
- cpu=0.5: two processes spinning for 3 s get about half a core (measured
  by the script itself, from its children's CPU time over the wall time);
- the worker's `limits` says how each was enforced, and no muster-<id>
  directory is left in the cgroup v1 memory and cpu hierarchies (nor the v2
  one) once the worker ended;
- the same on the container backend, whose agents run in network
  namespaces on this host (root and iproute2 needed; skipped otherwise);
- with MUSTER_CGROUP_ROOT (meant for tests) pointing at an empty directory,
  no controller exists: the launch warns (MusterWarning) which limit is not
  enforced and why, and the worker's `limits` says "not enforced".

A host with neither a cgroup v1 nor a v2 memory/cpu controller this process
can write skips the whole module with the reason (exit code 77, which ctest
counts as a skip, not a pass).
"""
import os
import re
import shutil
import warnings

import pytest

import muster
from sdk_daemon import Daemon, sdk_session, write_scripts
from testutil import wait_for

SCRIPTS = {
    # bytearray zero-fills, so every one of its pages is touched.
    "hog.py": """
        b = bytearray(3 << 30)
        print("allocated", len(b), flush=True)
    """,
    # Two processes spinning for SPIN_S seconds of wall time; prints the cores they got.
    "spin.py": """
        import os, time
        seconds = float(os.environ.get("SPIN_S", "3"))
        start = time.monotonic()
        pids = []
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    pass
                os._exit(0)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
        wall = time.monotonic() - start
        t = os.times()
        print("CORES %.3f" % ((t.children_user + t.children_system) / wall), flush=True)
    """,
    "quick.py": """
        print("ok", flush=True)
    """,
}


def own_cgroup_dirs():
    """This process's cgroup directory in each hierarchy that the limits use: {"memory": path, "cpu": path, "v2": path}."""
    mounts = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            head, _, tail = line.partition(" - ")
            fields, tail_fields = head.split(), tail.split()
            if len(fields) < 5 or len(tail_fields) < 3:
                continue
            root, point, fstype, options = fields[3], fields[4], tail_fields[0], tail_fields[2].split(",")
            if fstype == "cgroup2":
                mounts.setdefault("v2", (point, root))
            elif fstype == "cgroup":
                for c in ("memory", "cpu"):
                    if c in options:
                        mounts.setdefault(c, (point, root))
    out = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in (["v2"] if controllers == "" else controllers.split(",")):
                if name in mounts:
                    point, root = mounts[name]
                    rel = path[len(root):] if root != "/" and path.startswith(root) else path
                    out[name] = os.path.join(point, rel.lstrip("/"))
    return out


CGROUPS = own_cgroup_dirs()


def leftovers(worker_id):
    """The cgroup directories of `worker_id` that still exist, in every hierarchy."""
    found = []
    for base in CGROUPS.values():
        # os.walk ignores directories that go while it walks (cgroups of other workers ending).
        for parent, dirs, _ in os.walk(base):
            found += [os.path.join(parent, d) for d in dirs if worker_id in d]
    return found


def no_cgroup_left(worker_id):
    """Waits (the agent removes its directories after its exit report, the
    backend the v2 cgroup after the agent) until none of `worker_id`'s is left."""
    wait_for(lambda: leftovers(worker_id) == [], timeout=10, what="the cgroups of %s to go (%s)"
             % (worker_id, leftovers(worker_id)))


def read(path):
    try:
        with open(path) as f:
            return f.read().split()
    except OSError:
        return []


def available(controller):
    """Whether a worker's limit on `controller` can be enforced here: v2 passes it down, or v1 has it writable."""
    v2 = CGROUPS.get("v2")
    if v2 and (controller in read(os.path.join(v2, "cgroup.subtree_control"))
               or os.path.ismount(v2) and controller in read(os.path.join(v2, "cgroup.controllers"))):
        return True
    path = CGROUPS.get(controller)
    return path is not None and os.access(path, os.W_OK)


MISSING = [c for c in ("memory", "cpu") if not available(c)]
if MISSING:
    pytest.exit("no cgroup controller this process can use for %s on this host (%s): nothing to enforce with"
                % (" and ".join(MISSING), CGROUPS), returncode=77)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
    with Daemon(project, tmp_path_factory.mktemp("state")) as d, sdk_session(d, check_contract=True):
        yield d


def enforced_limits(worker):
    limits = worker.get("limits") or {}
    for resource in ("cpu", "memory"):
        assert limits.get(resource, "").startswith("enforced by cgroup v"), limits
    return limits


def test_a_worker_over_its_memory_limit_fails_as_out_of_memory(daemon):
    w, = muster.launch_workers(1, cpu=1, memory=1, script="hog.py")
    res = muster.await_workers([w], timeout_seconds=120)
    assert [f["id"] for f in res["failures"]] == [w["id"]], res
    failed = muster.get_worker(w)
    enforced_limits(failed)
    assert failed["status"] == "failed", failed
    print("memory=1 worker that allocated 3 GiB:", failed["status"], "-", failed["reason"])
    assert "out of memory (limit 1 GiB)" in failed["reason"], failed["reason"]
    assert "allocated" not in muster.worker_logs(w)
    no_cgroup_left(w["id"])


def test_a_half_core_worker_gets_half_a_core(daemon):
    w, = muster.launch_workers(1, cpu=0.5, memory=1, script="spin.py", env={"SPIN_S": "3"})
    res = muster.await_workers([w], timeout_seconds=120)
    assert res["failures"] == [], res["failures"]
    enforced_limits(muster.get_worker(w))
    log = muster.worker_logs(w)
    cores = float(re.search(r"CORES ([0-9.]+)", log).group(1))
    print("cpu=0.5 worker, two spinning processes:", cores, "cores")
    assert 0.35 <= cores <= 0.65, log
    no_cgroup_left(w["id"])


def test_limits_are_reported_and_their_cgroups_removed(daemon):
    w, = muster.launch_workers(1, cpu=0.5, memory=0.5, script="quick.py")
    res = muster.await_workers([w], timeout_seconds=60)
    assert res["failures"] == [], res["failures"]
    limits = enforced_limits(muster.get_worker(w))
    assert set(limits) == {"cpu", "memory"}, limits
    assert "cpu=0.5 memory=0.5GiB: " in muster.worker_logs(w)
    no_cgroup_left(w["id"])


def test_an_unenforceable_limit_warns_at_launch(tmp_path):
    empty = tmp_path / "no-cgroups"
    empty.mkdir()
    (tmp_path / "project").mkdir()
    project = write_scripts(tmp_path / "project", SCRIPTS)
    saved = os.environ.get("MUSTER_CGROUP_ROOT")
    os.environ["MUSTER_CGROUP_ROOT"] = str(empty)  # musterd's, and so its local agents'
    try:
        with Daemon(project, tmp_path / "state") as d:
            client = muster.Client(d.url, d.token)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                w, = client.launch_workers(1, cpu=0.5, memory=1, script="quick.py")
            texts = [str(c.message) for c in caught if issubclass(c.category, muster.MusterWarning)]
            assert any("memory=1 (GiB) is recorded, not enforced" in t and "no cgroup v1 memory hierarchy" in t
                       for t in texts), texts
            assert any("cpu=0.5 is recorded, not enforced" in t for t in texts), texts
            res = client.await_workers([w], timeout_seconds=60)
            assert res["failures"] == [], res["failures"]
            limits = client.get_worker(w)["limits"]
            assert limits["memory"].startswith("not enforced: "), limits
            assert limits["cpu"].startswith("not enforced: "), limits
    finally:
        if saved is None:
            os.environ.pop("MUSTER_CGROUP_ROOT", None)
        else:
            os.environ["MUSTER_CGROUP_ROOT"] = saved
    assert list(empty.iterdir()) == []  # nothing was made there


def test_a_container_worker_over_its_memory_limit_fails_as_out_of_memory(tmp_path):
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("the container backend needs root and iproute2 (it creates network namespaces)")
    (tmp_path / "project").mkdir()
    project = write_scripts(tmp_path / "project", SCRIPTS)
    pid = os.getpid()
    args = ["--backend-opt", "bridge=mlim%d" % (pid % 10000), "--backend-opt", "subnet=10.224.%d.0/24" % (pid % 200),
            "--backend-opt", "prefix=mlm", "--stop-grace", "1"]
    with Daemon(project, tmp_path / "state", extra_args=args, listen="0.0.0.0:0", backend="container") as d, \
            sdk_session(d):
        w, = muster.launch_workers(1, cpu=0.5, memory=0.5, script="hog.py")
        res = muster.await_workers([w], timeout_seconds=120)
        assert [f["id"] for f in res["failures"]] == [w["id"]], res
        failed = muster.get_worker(w)
        enforced_limits(failed)
        assert "out of memory (limit 0.5 GiB)" in failed["reason"], failed["reason"]
        no_cgroup_left(w["id"])
