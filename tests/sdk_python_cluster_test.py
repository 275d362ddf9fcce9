"""Python SDK cluster calls against a real musterd (local backend): label integration.

run_cluster (ps mode) with and without a worker script, a failing task named
in ClusterFailed, and horovodrun (mpi mode) both building the lines only and
running its mpirun line (its output read back with cluster_logs).
"""
import json
import os
import re
import shlex
import subprocess
import time

import pytest

import muster
from sdk_daemon import Daemon, sdk_session, write_scripts

SCRIPTS = {
    # Every task writes the TF_CONFIG it was released with to $OUT_DIR/<type>-<index>.json.
    # Worker tasks end only once the PS has written its file: the daemon stops
    # the PS when the workers end, which could otherwise be before it started.
    "show_tf_config.py": """
        import json, os, time
        cfg = os.environ["TF_CONFIG"]
        task = json.loads(cfg)["task"]
        path = os.path.join(os.environ["OUT_DIR"], "%s-%d.json" % (task["type"], task["index"]))
        with open(path + ".tmp", "w") as f:
            f.write(cfg)
        os.rename(path + ".tmp", path)
        # ...and those named in WAIT_FOR too (the evaluator's: the daemon stops it once the workers end).
        deadline = time.monotonic() + 60
        for name in ["ps-0.json"] + [n for n in os.environ.get("WAIT_FOR", "").split(",") if n]:
            while not os.path.exists(os.path.join(os.environ["OUT_DIR"], name)) and time.monotonic() < deadline:
                time.sleep(0.05)
    """,
    "ps.py": """
        import json, os, time
        cfg = os.environ["TF_CONFIG"]
        if os.environ.get("OUT_DIR"):
            path = os.path.join(os.environ["OUT_DIR"], "ps-%d.json" % json.loads(cfg)["task"]["index"])
            with open(path + ".tmp", "w") as f:
                f.write(cfg)
            os.rename(path + ".tmp", path)
        time.sleep(600)
    """,
    "crash_worker_1.py": """
        import json, os, sys, time
        task = json.loads(os.environ["TF_CONFIG"])["task"]
        if task["index"] == 1:
            print("worker 1 gives up", flush=True)
            sys.exit(3)
        time.sleep(600)
    """,
    # One write per line: mpirun --tag-output tags each chunk it reads, so a
    # line written piecewise (print under python3 -u) can come out split.
    "hello_rank.py": """
        import os
        line = "rank %s of %s\\n" % (os.environ.get("OMPI_COMM_WORLD_RANK"), os.environ.get("OMPI_COMM_WORLD_SIZE"))
        os.write(1, line.encode())
    """,
}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
    with Daemon(project, tmp_path_factory.mktemp("state")) as d, sdk_session(d, check_contract=True):
        yield d


def newest_cluster():
    return max(muster.list_clusters(), key=lambda c: (c.get("created_at") or "", c["id"]))


def test_run_cluster_with_script_gives_every_task_its_own_tf_config(daemon, tmp_path):
    spec, session_addr = muster.run_cluster(n_workers=2, n_ps=1, cpu=0.5, memory=1, worker_script="show_tf_config.py",
                                            ps_script="ps.py", timeout_seconds=60, env={"OUT_DIR": str(tmp_path)})
    assert len(spec["ps"]) == 1 and len(spec["worker"]) == 2
    addrs = spec["ps"] + spec["worker"]
    assert len(set(addrs)) == 3 and all(a.rsplit(":", 1)[1].isdigit() for a in addrs)
    assert session_addr == "grpc://" + spec["worker"][0]

    cluster = newest_cluster()
    assert cluster["status"] == "succeeded" and cluster["mode"] == "ps"
    assert {t: len(ids) for t, ids in cluster["workers"].items()} == {"ps": 1, "worker": 2}
    assert sorted(os.listdir(tmp_path)) == ["ps-0.json", "worker-0.json", "worker-1.json"]
    for name in os.listdir(tmp_path):
        task_type, index = name[:-len(".json")].split("-")
        cfg = json.loads((tmp_path / name).read_text())
        assert cfg["cluster"] == spec, name
        assert cfg["task"] == {"type": task_type, "index": int(index)}, name
    # The PS task is stopped once every worker task has ended.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        ps = muster.get_worker(cluster["workers"]["ps"][0])
        if ps["status"] not in ("running", "starting", "scheduling"):
            break
        time.sleep(0.1)
    assert ps["status"] not in ("running", "starting", "scheduling"), ps


def test_tf2_chief_and_evaluator_get_tensorflow_valid_tf_configs(daemon, tmp_path):
    result = muster.run_cluster(n_workers=2, n_ps=1, n_chief=1, n_evaluator=1, cpu=0.5, memory=1,
                                worker_script="show_tf_config.py", ps_script="ps.py", timeout_seconds=60,
                                # The chief's success ends the cluster: it waits for every
                                # other task's file, or a worker started late writes none.
                                env={"OUT_DIR": str(tmp_path),
                                     "WAIT_FOR": "evaluator-0.json,worker-0.json,worker-1.json"}, progress=False)
    spec, session_addr = result
    # TensorFlow's rules: the chief is in the cluster spec, the evaluator is not.
    assert sorted(spec) == ["chief", "ps", "worker"] and len(spec["chief"]) == 1, spec
    assert session_addr == "grpc://" + spec["chief"][0]
    assert result.cluster_id == result.cluster["id"] and result.cluster["status"] == "succeeded"
    assert sorted(os.listdir(tmp_path)) == ["chief-0.json", "evaluator-0.json", "ps-0.json", "worker-0.json",
                                            "worker-1.json"]
    for name in os.listdir(tmp_path):
        task_type, index = name[:-len(".json")].split("-")
        cfg = json.loads((tmp_path / name).read_text())
        assert cfg["cluster"] == spec, name
        assert cfg["task"] == {"type": task_type, "index": int(index)}, name


def test_a_failing_task_fails_the_cluster_and_is_named(daemon):
    with pytest.raises(muster.ClusterFailed) as err:
        muster.run_cluster(n_workers=2, n_ps=1, cpu=0.5, memory=1, worker_script="crash_worker_1.py",
                           ps_script="ps.py", timeout_seconds=60, completion_timeout_seconds=120)
    e = err.value
    assert e.task == "worker:1", e
    assert e.cluster_id == e.cluster["id"] and e.cluster_id.startswith("c-")
    assert "exit code 3" in e.message and "worker 1 gives up" in e.message
    assert e.cluster["status"] == "failed"
    # Nobody is left waiting: every task of the cluster has ended.
    deadline = time.monotonic() + 20
    ids = [w for ids in e.cluster["workers"].values() for w in ids]
    while time.monotonic() < deadline:
        statuses = [muster.get_worker(w)["status"] for w in ids]
        if all(s in ("succeeded", "failed", "stopped", "timedout", "lost") for s in statuses):
            break
        time.sleep(0.2)
    assert all(s in ("succeeded", "failed", "stopped", "timedout", "lost") for s in statuses), statuses


def test_await_cluster_raises_cluster_failed_for_a_failed_cluster(daemon):
    """The README's promise: a failed cluster is raised (ClusterFailed naming the task, with its last lines),
    whoever started it and however it is awaited; a stopped one is returned."""
    c = muster.Client().create_cluster(mode="ps", n_workers=2, n_ps=1, cpu=0.5, memory=1,
                                       worker_script="crash_worker_1.py", ps_script="ps.py", timeout_seconds=60)
    assert re.fullmatch(r"<Cluster %s ps starting [0-9.]+ s>" % c["id"], repr(c)), repr(c)
    with pytest.raises(muster.ClusterFailed) as err:
        muster.await_cluster(c, timeout_seconds=120, progress=False)
    e = err.value
    assert e.cluster_id == c["id"] and e.cluster["status"] == "failed", e.cluster
    assert e.task.endswith(":1") and "worker 1 gives up" in e.message, (e.task, e.message)
    assert repr(e.cluster).startswith("<Cluster %s ps failed " % c["id"]) and "\n" not in repr(e.cluster)
    assert e.cluster.record == muster.get_cluster(c).record
    # Up only (wait_for_completion=False) raises the same for a cluster that already failed.
    with pytest.raises(muster.ClusterFailed):
        muster.await_cluster(c["id"], wait_for_completion=False, progress=False)


def test_run_cluster_without_script_returns_once_up(daemon):
    spec, session_addr = muster.run_cluster(n_workers=2, n_ps=1, cpu=0.5, memory=1, ps_script="ps.py",
                                            timeout_seconds=60)
    assert len(spec["worker"]) == 2 and len(spec["ps"]) == 1 and session_addr.startswith("grpc://")
    cluster = newest_cluster()
    assert cluster["status"] == "running"
    stopped = muster.stop_cluster(cluster)
    assert muster.await_cluster(stopped, timeout_seconds=30)["status"] == "stopped"  # returned, not raised
    assert repr(muster.get_cluster(stopped)).startswith("<Cluster %s ps stopped " % cluster["id"])


def test_horovodrun_builds_the_lines_from_the_workers(daemon):
    c = muster.horovodrun(2, "hello_rank.py", slots=1, launch=False, cpu=0.5, memory=1)
    try:
        assert c["mode"] == "mpi" and len(c["workers"]["worker"]) == 2
        hv = c["horovodrun_command"]
        assert hv.startswith("horovodrun -np 2 -H ") and "hello_rank.py" in hv, hv
        assert c["mpirun_command"].startswith("mpirun ") and "-np 2" in c["mpirun_command"]
        assert c["hostfile"].strip()
    finally:
        muster.stop_cluster(c)


def test_horovodrun_launch_runs_mpirun_to_success(daemon):
    c = muster.horovodrun(2, "hello_rank.py", slots=1, cpu=0.5, memory=1, launch=True, wait_for_completion=True,
                          completion_timeout_seconds=120)
    assert c["status"] == "succeeded", c
    assert re.fullmatch(r"<Cluster %s mpi succeeded [0-9.]+ s>" % c["id"], repr(c)), repr(c)
    assert [repr(x) for x in muster.list_clusters() if x["id"] == c["id"]] == [repr(muster.get_cluster(c))]
    # mpirun's output over the REST API: both ranks' lines (tagged by rank), tail keeps the end.
    logs = muster.cluster_logs(c)
    for rank in ("0", "1"):
        assert "rank %s of 2" % rank in logs, logs
    assert muster.cluster_logs(c["id"], tail=1) == logs.splitlines(True)[-1]
    with pytest.raises(muster.MusterError) as e:
        muster.cluster_logs("c-no-such-cluster")
    assert e.value.code == "not_found"


def test_the_mpirun_line_a_cluster_shows_runs_as_typed(daemon):
    """mpirun_command (what the dashboard's Copy button copies) is a line a user can run: pasted into a shell
    in the project directory it runs the job, with none of musterd's internal wrappers in it."""
    c = muster.horovodrun(2, "hello_rank.py", slots=1, cpu=0.5, memory=1, launch=True, wait_for_completion=True,
                          completion_timeout_seconds=120)
    line = c["mpirun_command"]
    assert c["status"] == "succeeded" and line.startswith("mpirun "), c
    for internal in ("/bin/sh", "muster-rank", "exec 3>&2", "MUSTER_CLUSTER_ID", "MUSTER_METRICS_TOKEN"):
        assert internal not in line, (internal, line)
    assert shlex.split(line) == c["mpirun_argv"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MUSTER_", "OMPI_"))}
    ran = subprocess.run(["/bin/sh", "-c", line], cwd=daemon.project_dir, env=env, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, (line, ran.stdout, ran.stderr)
    for rank in ("0", "1"):
        assert "rank %s of 2" % rank in ran.stdout, ran.stdout
    assert "Warning" not in ran.stderr, ran.stderr  # nothing forwarded that a user's shell lacks
