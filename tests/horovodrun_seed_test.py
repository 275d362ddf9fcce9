"""Seed 001's notebook (Cloudera's Horovod post) on muster, and what workers import (integration).

musterd runs without PYTHONPATH (and no MUSTER_RUNTIME_PATH / MUSTER_BINARY_DIR)
in its environment, as one started from a plain shell; the "notebook" is a
python3 process with the SDK on its PYTHONPATH and build/bin on PATH, as the
README sets them up.

- The seed's cell with only the import changed: launch workers, await them,
  os.system("horovodrun -np {} -H {} -p 2222 python train.py"): the ranks run
  on those workers' hosts (the workers are neither relaunched nor stopped),
  train.py is a Horovod script with `import muster.torch as hvd`, every
  rank's line arrives whole and tagged once.
- Every kind of worker imports muster, muster.torch and the runtime
  extension: an agent's script, a ps cluster's PS and worker tasks, an mpi
  rank; a worker whose script dies at once is an await failure, not running.
- A failing rank: the horovodrun command, the SDK exception and the CLI name
  it (rank, host, worker, exit code) with its last lines; the cluster's
  workers say how the cluster ended.
- python=: a venv's interpreter is what workers and ranks run when the
  notebook runs in it (and has muster's runtime dependencies); a venv
  without numpy falls back to /usr/bin/python3; a bad path is a 400 naming
  `python`.
"""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from sdk_daemon import Daemon, sdk_session, write_scripts

REPO = os.path.realpath(os.environ.get("MUSTER_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.path.realpath(os.environ.get("MUSTER_BINARY_DIR") or os.path.join(REPO, "build"))
SDK = os.path.join(REPO, "sdk", "python")
LOGIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

SCRIPTS = {
    "idle.py": """
        import time
        print("idle worker up", flush=True)
        time.sleep(600)
    """,
    # A Horovod script whose only change is the import.
    "train.py": """
        import sys
        import torch
        import muster.torch as hvd  # was: import horovod.torch as hvd
        hvd.init()
        print("rank", hvd.rank(), "of", hvd.size())  # several writes under python -u
        total = hvd.allreduce(torch.ones(4) * (hvd.rank() + 1), op=hvd.Sum)
        print("sum", total.tolist(), "python", sys.executable)
    """,
    "fail.py": """
        import os
        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        print("rank", rank, "loading data", flush=True)
        if rank == 1:
            raise ValueError("bad batch on rank 1")
        import time
        time.sleep(30)
    """,
    "imports.py": """
        import json, os, sys, time
        import muster, muster.torch, muster.runtime
        muster.runtime.extension()
        print("imports ok", os.environ.get("MUSTER_TASK_TYPE", "-"), muster.__file__, sys.executable, flush=True)
        # A ps cluster ends (and stops its ps task) when its worker ends: the
        # worker waits until the ps task has printed, so its line is in the log.
        marker = "/tmp/muster-imports-%s-ps" % os.environ.get("MUSTER_CLUSTER_ID", "")
        if os.environ.get("MUSTER_TASK_TYPE") == "ps":
            open(marker, "w").close()
            time.sleep(600)
        elif json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {}).get("ps"):
            deadline = time.monotonic() + 120
            while not os.path.exists(marker) and time.monotonic() < deadline:
                time.sleep(0.05)
            os.unlink(marker)
    """,
    "broken.py": """
        import no_such_module_here
    """,
}

# Cloudera's cell, verbatim but for the import (and NUM_WORKERS / the idle script, which the post leaves to the reader).
SEED_CELL = '''
import os
import muster as cdsw

NUM_WORKERS = 2
workers = cdsw.launch_workers(NUM_WORKERS,
                              cpu=0.5, memory=2,
                              script="idle.py")
worker_ids = [worker["id"] for worker in workers]
running_workers = cdsw.await_workers(worker_ids,
                              wait_for_completion=False,
                              timeout_seconds=60)
worker_ips = [worker["ip_address"] for worker in \\
                              running_workers["workers"]]
cmd="horovodrun -np {} -H {} -p 2222 python train.py".format(
                              len(worker_ips),
                              ",".join(worker_ips))

os.system(cmd)
'''


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
    unset = ("PYTHONPATH", "MUSTER_RUNTIME_PATH", "MUSTER_BINARY_DIR", "MUSTER_NOTEBOOK_PYTHON")
    # --await-settle 5: a script that dies at once still does so under this machine's load.
    with Daemon(project, tmp_path_factory.mktemp("state"), ["--await-settle", "5"], unset_env=unset) as d, \
            sdk_session(d):
        with open("/proc/%d/environ" % d.proc.pid, "rb") as f:
            assert not [e for e in f.read().split(b"\0") if e.startswith(b"PYTHONPATH=")]
        yield d


def notebook_env(daemon, **extra):
    """A notebook's process environment per the README: SDK on PYTHONPATH, build/bin on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MUSTER_", "PYTHON"))}
    env.update(PATH=os.path.join(BUILD, "bin") + ":" + LOGIN_PATH, PYTHONPATH=SDK, MUSTER_STATE_DIR=daemon.state_dir)
    env.update(extra)
    return env


def run(daemon, argv, timeout=600, **extra):
    return subprocess.run(argv, cwd=daemon.project_dir, env=notebook_env(daemon, **extra), capture_output=True,
                          text=True, timeout=timeout)


def newest_cluster():
    import muster
    return max(muster.list_clusters(), key=lambda c: c["created_at"])


def test_seed_001_cell_runs_with_only_the_import_changed(daemon):
    import muster
    r = run(daemon, [sys.executable, "-c", SEED_CELL])
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    # Each rank's line whole, tagged once, although python -u wrote it in pieces.
    assert "[1,0]<stdout>:rank 0 of 2" in lines and "[1,1]<stdout>:rank 1 of 2" in lines, r.stdout
    assert any(re.match(r"^\[1,0\]<stdout>:sum \[3\.0, 3\.0, 3\.0, 3\.0\] python /usr/bin/python3$", x)
               for x in lines), r.stdout
    cluster = newest_cluster()
    assert cluster["mode"] == "mpi" and cluster["status"] == "succeeded", cluster
    # The ranks ran on the notebook's own workers: nothing new launched, nothing stopped.
    mine = [w for w in muster.list_workers() if w["id"] in cluster["workers"]["worker"]]
    assert len(mine) == 2 and all(w["status"] == "running" and w["script"] == "idle.py" for w in mine), mine
    assert cluster["horovodrun_argv"][:5] == ["horovodrun", "-np", "2", "-H", "127.0.0.1:2"], cluster
    muster.stop_workers(*mine)


def test_muster_horovodrun_takes_python_script_and_says_how_the_cluster_ended(daemon):
    import muster
    r = run(daemon, ["muster", "horovodrun", "-np", "2", "--cpu", "0.5", "--memory", "0.5", "--wait",
                     "python", "train.py"])
    assert r.returncode == 0, r.stdout + r.stderr
    cluster = newest_cluster()
    assert cluster["status"] == "succeeded", cluster
    for wid in cluster["workers"]["worker"]:
        w = muster.get_worker(wid)
        # The hosts end as their ranks did: succeeded, exit code 0.
        assert w["status"] == "succeeded" and w["exit_code"] == 0, w
        assert w["reason"] == "cluster %s succeeded" % cluster["id"], w
    assert "[1,1]<stdout>:rank 1 of 2" in muster.cluster_logs(cluster).splitlines()
    table = run(daemon, ["muster", "ps", "-a"]).stdout
    assert all(re.search(r"^%s .*cluster %s succeeded$" % (wid, cluster["id"]), table, re.M)
               for wid in cluster["workers"]["worker"]), table


def test_every_kind_of_worker_imports_muster_torch_and_the_extension(daemon):
    import muster
    w = muster.launch_workers(1, cpu=0.5, memory=0.5, script="imports.py")
    done = muster.await_workers(w, wait_for_completion=True, timeout_seconds=120)
    assert not done["failures"], done["failures"]
    assert "imports ok - %s/muster/__init__.py" % SDK in muster.worker_logs(w[0])
    spec, _ = muster.run_cluster(n_workers=1, n_ps=1, cpu=0.5, memory=0.5, worker_script="imports.py",
                                 ps_script="imports.py", timeout_seconds=120, completion_timeout_seconds=300)
    ps = [c for c in muster.list_clusters() if c["mode"] == "ps" and c["cluster_spec"] and
          c["cluster_spec"]["worker"] == spec["worker"]][0]
    assert "imports ok worker" in muster.cluster_logs(ps)
    ps_log = muster.worker_logs(ps["workers"]["ps"][0])
    assert "imports ok ps" in ps_log, ps_log
    c = muster.horovodrun(2, "imports.py", cpu=0.5, memory=0.5, wait_for_completion=True,
                          completion_timeout_seconds=300)
    log = muster.cluster_logs(c).splitlines()
    assert sum(1 for x in log if x.startswith(("[1,0]<stdout>:imports ok", "[1,1]<stdout>:imports ok"))) == 2, log


def test_a_script_that_dies_at_once_is_an_await_failure_not_running(daemon):
    import muster
    w = muster.launch_workers(1, cpu=0.5, memory=0.5, script="broken.py")
    res = muster.await_workers(w, wait_for_completion=False, timeout_seconds=60)
    assert not res["workers"], res
    [f] = res["failures"]
    assert f["status"] == "failed" and f["exit_code"] == 1, f
    assert "No module named 'no_such_module_here'" in f["log_tail"], f


def test_a_failed_rank_is_named_with_its_last_lines(daemon):
    import muster
    # The horovodrun command: mpirun's exit code, and the rank on stderr.
    r = run(daemon, ["horovodrun", "-np", "2", "--cpu", "0.5", "--memory", "0.5", "python", "fail.py"])
    assert r.returncode == 1, r.stdout + r.stderr
    assert "[1,1]<stdout>:rank 1 loading data" in r.stdout.splitlines(), r.stdout
    assert re.search(r"rank 1 on 127\.0\.0\.1 \(worker \w+\) exited with code 1", r.stderr), r.stderr
    assert "ValueError: bad batch on rank 1" in r.stderr, r.stderr
    cluster = newest_cluster()
    f = cluster["failed_rank"]
    assert f["rank"] == 1 and f["host"] == "127.0.0.1" and f["exit_code"] == 1 and f["signal"] is None, f
    assert f["worker_id"] == cluster["workers"]["worker"][1], cluster
    # The rank's stdout and stderr reach mpirun as two streams, and orted may
    # forward them in either order: the traceback is whole and in order, and
    # the rank's last stdout line is there, wherever it fell.
    tail = f["log_tail"]
    assert "rank 1 loading data" in tail and "ValueError: bad batch on rank 1" in tail, f
    traceback = [line for line in tail if line != "rank 1 loading data"]
    assert traceback[0] == "Traceback (most recent call last):" and traceback[-1] == "ValueError: bad batch on rank 1", f
    for wid in cluster["workers"]["worker"]:
        assert muster.get_worker(wid)["reason"].startswith("cluster %s failed: rank 1 on" % cluster["id"])
    # The SDK's exception.
    with pytest.raises(muster.ClusterFailed) as err:
        muster.horovodrun(2, "fail.py", cpu=0.5, memory=0.5, wait_for_completion=True)
    assert err.value.task == "rank:1", err.value
    assert "exited with code 1" in str(err.value) and "ValueError: bad batch on rank 1" in str(err.value), err.value
    # The CLI.
    r = run(daemon, ["muster", "horovodrun", "-np", "2", "--cpu", "0.5", "--memory", "0.5", "--wait", "fail.py"])
    assert r.returncode == 5 and "ValueError: bad batch on rank 1" in r.stderr, r.stdout + r.stderr
    r = run(daemon, ["muster", "clusters", "-a"])
    assert re.search(r"failed\s.*rank 1 on 127\.0\.0\.1", r.stdout), r.stdout


def make_venv(where, system_site_packages):
    args = [sys.executable, "-m", "venv", "--without-pip"] + (["--system-site-packages"] if system_site_packages
                                                              else []) + [where]
    subprocess.run(args, check=True)
    return os.path.join(where, "bin", "python")


def test_the_notebooks_python_is_what_workers_and_ranks_run(daemon, tmp_path):
    venv = make_venv(str(tmp_path / "venv"), True)
    body = textwrap.dedent("""
        import json, muster
        w = muster.launch_workers(1, cpu=0.5, memory=0.5, code="import sys; print('exe', sys.executable)")
        muster.await_workers(w, timeout_seconds=120)
        c = muster.horovodrun(1, "train.py", cpu=0.5, memory=0.5, wait_for_completion=True,
                              completion_timeout_seconds=300)
        print(json.dumps({"worker": muster.worker_logs(w[0]), "ranks": muster.cluster_logs(c)}))
    """)
    r = run(daemon, [venv, "-c", body])
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert "exe %s" % venv in out["worker"], out
    assert "python %s" % venv in out["ranks"], out
    # A venv without the runtime's dependencies (no numpy): workers run /usr/bin/python3.
    bare = make_venv(str(tmp_path / "bare"), False)
    r = run(daemon, [bare, "-c", "import muster; print(muster.interpreter.default_python())"])
    assert r.returncode == 0 and r.stdout.strip() == "None", r.stdout + r.stderr
    # A path that is no interpreter: 400 naming python, nothing launched.
    import muster
    with pytest.raises(muster.MusterError) as err:
        muster.launch_workers(1, cpu=0.5, memory=0.5, code="print(1)", python=str(tmp_path / "nope"))
    assert err.value.code == "invalid_argument" and err.value.field == "python", err.value
