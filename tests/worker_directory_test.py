"""Workers start in the project directory (integration: a real musterd).

As a notebook's workers do in Cloudera ML (/home/cdsw) and as torchrun keeps
the caller's directory, a worker's script starts in musterd's --project-dir:
open("config.json") reads the project's file. Its own directory under the
state dir stays its scratch space, named by MUSTER_WORKER_DIR, and exists.

MUSTER_TEST_BACKEND picks the backend: local (default) or container (root
only: network namespaces; exits 77, skipped, otherwise).
"""
import json
import os
import shutil

import pytest

import muster
from sdk_daemon import Daemon, sdk_session, write_scripts

BACKEND = os.environ.get("MUSTER_TEST_BACKEND", "local")

SCRIPTS = {
    "config.json": '{"lr": 0.1, "data": "data/train.csv"}\n',
    "read_config.py": """
        import json, os
        with open("config.json") as f:
            config = json.load(f)
        with open(config["data"]) as f:
            rows = f.read().split()
        scratch = os.environ["MUSTER_WORKER_DIR"]
        with open(os.path.join(scratch, "scratch.txt"), "w") as f:
            f.write("written by the script\\n")
        print("RESULT " + json.dumps({"cwd": os.getcwd(), "config": config, "rows": rows, "worker_dir": scratch,
                                      "worker_dir_exists": os.path.isdir(scratch)}), flush=True)
    """,
}


def backend_args():
    if BACKEND != "container":
        return {}
    pid = os.getpid()
    return {"listen": "0.0.0.0:0", "backend": "container",
            "extra_args": ["--backend-opt", "bridge=mtwd%d" % (pid % 100000), "--backend-opt",
                           "subnet=10.224.%d.0/24" % (pid % 200), "--backend-opt", "prefix=mwd", "--stop-grace", "1"]}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    if BACKEND == "container" and (os.geteuid() != 0 or not shutil.which("ip")):
        pytest.exit("skipped: needs root and iproute2 (the container backend creates network namespaces)",
                    returncode=77)
    project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
    (project / "data").mkdir()
    (project / "data" / "train.csv").write_text("1\n2\n3\n")
    with Daemon(project, tmp_path_factory.mktemp("state"), **backend_args()) as d, sdk_session(d):
        yield d


def test_the_script_starts_in_the_project_with_its_scratch_dir(daemon):
    workers = muster.launch_workers(n=1, cpu=0.5, memory=0.5, script="read_config.py")
    done = muster.await_workers(workers, wait_for_completion=True, timeout_seconds=120)
    log = muster.worker_logs(workers[0])
    assert done["failures"] == [], (done["failures"], log)
    line = [x for x in log.splitlines() if x.startswith("RESULT ")]
    assert line, log
    seen = json.loads(line[0][len("RESULT "):])
    assert seen["cwd"] == os.path.realpath(daemon.project_dir)
    assert seen["config"] == {"lr": 0.1, "data": "data/train.csv"}
    assert seen["rows"] == ["1", "2", "3"]
    wid = workers[0]["id"]
    assert os.path.realpath(seen["worker_dir"]) == os.path.realpath(os.path.join(daemon.state_dir, "workers", wid))
    assert seen["worker_dir_exists"]
    with open(os.path.join(seen["worker_dir"], "scratch.txt")) as f:
        assert f.read() == "written by the script\n"
    assert not os.path.exists(os.path.join(daemon.project_dir, "scratch.txt"))
    if BACKEND == "container":  # the worker ran in a namespace of its own, behind the bridge
        assert muster.get_worker(wid)["ip_address"].startswith("10.224."), muster.get_worker(wid)
