"""torchrun mode on the container backend (integration, root only: network namespaces).

musterd with --backend container puts every worker in a network namespace
of its own behind a bridge, so MASTER_ADDR is worker 0's namespace address
and the other ranks reach rank 0's store and gloo's links across the bridge:
- every process's environment names worker 0's container address and its
  reserved port;
- a gloo script (init_process_group with env://) runs unchanged on 2
  containers, and examples/pytorch/ddp_train.py trains on them.
Without root (or `ip netns`) the test exits 77, which ctest reports as skipped.
"""
import json
import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sdk_daemon import Daemon, sdk_session, write_scripts  # noqa: E402
from torchrun_cluster_test import SCRIPTS  # noqa: E402

REPO = os.environ.get("MUSTER_SOURCE_DIR") or os.path.dirname(HERE)



@pytest.fixture(autouse=True, scope="module")
def root_and_network_namespaces():
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.exit("skipped: needs root and iproute2 (the container backend creates network namespaces)",
                    returncode=77)


def container_args():
    """A bridge, subnet and name prefix of this test process alone (tests/container_test_env.h's rule)."""
    pid = os.getpid()
    return ["--backend-opt", "bridge=mtct%d" % (pid % 100000), "--backend-opt",
            "subnet=10.223.%d.0/24" % (pid % 200), "--backend-opt", "prefix=mtc", "--stop-grace", "1"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, root_and_network_namespaces):
    project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
    for name in ("ddp_train.py", "fashion_data.py"):  # scripts must lie inside the project dir
        shutil.copy(os.path.join(REPO, "examples", "pytorch", name), str(project))
    env = {"PYTHONPATH": os.path.join(REPO, "sdk", "python")}
    with Daemon(project, tmp_path_factory.mktemp("state"), extra_args=container_args(), listen="0.0.0.0:0",
                backend="container") as d, sdk_session(d, env=env):
        yield d


def test_ranks_meet_across_containers(daemon, tmp_path):
    import muster
    out = tmp_path / "env"
    out.mkdir()
    os.chmod(str(tmp_path), 0o755)
    c = muster.torchrun(2, "show_env.py", cpu=0.5, memory=0.5, env={"OUT_DIR": str(out)}, timeout_seconds=120,
                        wait_for_completion=True, completion_timeout_seconds=120, progress=False)
    assert c["status"] == "succeeded", c
    workers = [muster.get_worker(w) for w in c["workers"]["worker"]]
    assert workers[0]["ip_address"] != workers[1]["ip_address"], workers  # two hosts
    for rank in (0, 1):
        with open(out / ("rank-%d.json" % rank)) as f:
            e = json.load(f)
        assert e["MASTER_ADDR"] == workers[0]["ip_address"] and e["MASTER_PORT"] == str(workers[0]["port"])
        assert e["WORLD_SIZE"] == "2" and e["GROUP_RANK"] == str(rank)
        assert e["GLOO_SOCKET_IFNAME"] not in (None, "lo"), e  # the container's own interface
    assert c["torchrun_command"].startswith("torchrun --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d "
                                            "--rdzv_endpoint=%s:%d " % (workers[0]["ip_address"], workers[0]["port"]))


def test_gloo_and_ddp_scripts_run_unchanged(daemon):
    import muster
    c = muster.torchrun(2, "gloo_allreduce.py", cpu=1, memory=1, env={"OMP_NUM_THREADS": "1"}, timeout_seconds=120,
                        wait_for_completion=True, completion_timeout_seconds=300, progress=False)
    assert "rank 0 of 2: sum 3" in muster.cluster_logs(c)
    c = muster.torchrun(2, "ddp_train.py", cpu=1, memory=2, timeout_seconds=120,
                        args=["--epochs", "1", "--limit", "1280", "--test-limit", "500"],
                        env={"OMP_NUM_THREADS": "1"}, wait_for_completion=True, completion_timeout_seconds=600,
                        progress=False)
    log = muster.cluster_logs(c)
    assert "backend=gloo world_size=2" in log and "final test_accuracy=" in log, log
