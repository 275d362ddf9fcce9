"""torchrun mode through a real musterd (local backend), as a notebook runs it (integration).

- the environment every process sees (torchrun's variables, MASTER_ADDR/PORT
  = worker 0's registered address and reserved port, the run id), at 3 x 1
  and 2 x 2 processes, and the request's OMP_NUM_THREADS winning;
- the torchrun line, read back by torch's own torchrun parser;
- a torch.distributed script with init_process_group("gloo") and env://
  running unchanged (2 workers, and 1 worker of 2 processes);
- a rank killed with SIGKILL: the cluster fails naming its worker and rank
  (and with nproc_per_node=2 the agent names the process), the rest is stopped;
- bad requests: 400 naming the field; the CLI's `muster torchrun`.
"""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sdk_daemon import Daemon, RestApi, sdk_session, write_scripts  # noqa: E402

TORCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
              "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
              "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE",
              "OMP_NUM_THREADS", "MUSTER_CLUSTER_ID", "GLOO_SOCKET_IFNAME", "MUSTER_IP_ADDRESS")

SCRIPTS = {
    "show_env.py": """
        import json, os
        names = %r
        env = {k: os.environ.get(k) for k in names}
        path = os.path.join(os.environ["OUT_DIR"], "rank-%%s.json" %% env["RANK"])
        with open(path, "w") as f:
            json.dump(env, f)
    """ % (TORCH_VARS,),
    "gloo_allreduce.py": """
        import os
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo")   # env:// from torchrun's variables
        t = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(t)
        print("rank %d of %d: sum %.0f" % (dist.get_rank(), dist.get_world_size(), t.item()), flush=True)
        dist.barrier()
        dist.destroy_process_group()
    """,
    "kill_rank.py": """
        import os, signal, time
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo")
        dist.barrier()
        if dist.get_rank() == int(os.environ["VICTIM"]):
            print("rank %d dies now" % dist.get_rank(), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(1)
        for _ in range(600):   # the survivors keep reducing until the dead peer breaks the link
            dist.all_reduce(torch.ones(4))
            time.sleep(0.1)
        print("survived the dead rank?!", flush=True)
    """,
}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
    env = {"PYTHONPATH": os.path.join(os.environ.get("MUSTER_SOURCE_DIR", os.path.dirname(HERE)), "sdk", "python")}
    with Daemon(project, tmp_path_factory.mktemp("state")) as d, sdk_session(d, env=env, check_contract=True):
        yield d


def run_env_cluster(tmp_path, n, nproc, env=None):
    import muster
    out = tmp_path / ("env-%dx%d" % (n, nproc))
    out.mkdir()
    c = muster.torchrun(n, "show_env.py", nproc_per_node=nproc, cpu=0.5, memory=0.5,
                        env=dict(env or {}, OUT_DIR=str(out)), wait_for_completion=True,
                        completion_timeout_seconds=120, progress=False)
    ranks = {}
    for name in os.listdir(out):
        with open(out / name) as f:
            e = json.load(f)
        ranks[int(e["RANK"])] = e
    return c, ranks


@pytest.mark.parametrize("n,nproc", [(3, 1), (2, 2)])
def test_every_process_sees_torchruns_environment(daemon, tmp_path, n, nproc):
    import muster
    c, ranks = run_env_cluster(tmp_path, n, nproc)
    assert c["status"] == "succeeded" and c["mode"] == "torchrun", c
    assert c["nproc_per_node"] == nproc and c["max_restarts"] == 0
    world = n * nproc
    assert sorted(ranks) == list(range(world))
    worker0 = muster.get_worker(c["workers"]["worker"][0])
    for rank, e in ranks.items():
        node, local = divmod(rank, nproc)
        assert e["LOCAL_RANK"] == str(local) and e["GROUP_RANK"] == str(node) and e["ROLE_RANK"] == str(rank)
        assert e["WORLD_SIZE"] == e["ROLE_WORLD_SIZE"] == str(world)
        assert e["LOCAL_WORLD_SIZE"] == str(nproc) and e["GROUP_WORLD_SIZE"] == str(n)
        assert e["ROLE_NAME"] == "default"
        # rank 0's host and the port its agent reserved there
        assert e["MASTER_ADDR"] == worker0["ip_address"] and e["MASTER_PORT"] == str(worker0["port"])
        assert e["TORCHELASTIC_RUN_ID"] == c["id"] == e["MUSTER_CLUSTER_ID"]
        assert e["TORCHELASTIC_RESTART_COUNT"] == "0" and e["TORCHELASTIC_MAX_RESTARTS"] == "0"
        assert e["TORCHELASTIC_USE_AGENT_STORE"] == "False"
        # gloo listens on the interface of the worker's registered address (loopback here)
        assert e["GLOO_SOCKET_IFNAME"] == "lo" and e["MUSTER_IP_ADDRESS"] == "127.0.0.1", e
        # torchrun's default for several processes per node
        assert e["OMP_NUM_THREADS"] == ("1" if nproc > 1 else os.environ.get("OMP_NUM_THREADS"))


def test_the_callers_omp_num_threads_wins(daemon, tmp_path):
    c, ranks = run_env_cluster(tmp_path, 1, 2, env={"OMP_NUM_THREADS": "3"})
    assert c["status"] == "succeeded"
    assert [ranks[r]["OMP_NUM_THREADS"] for r in (0, 1)] == ["3", "3"]


def test_the_torchrun_line_is_one_torchrun_accepts(daemon, tmp_path):
    import muster
    c, _ = run_env_cluster(tmp_path, 2, 3)
    argv = c["torchrun_argv"]
    worker0 = muster.get_worker(c["workers"]["worker"][0])
    from torch.distributed.run import get_args_parser
    args = get_args_parser().parse_args(argv[1:])
    assert argv[0] == "torchrun"
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend) == ("2", "3", "c10d")
    assert args.rdzv_endpoint == "%s:%d" % (worker0["ip_address"], worker0["port"])
    assert args.rdzv_id == c["id"] and args.max_restarts == 0
    assert os.path.basename(args.training_script) == "show_env.py" and args.training_script_args == []
    assert c["torchrun_command"].startswith("torchrun --nnodes=2 --nproc_per_node=3 ")


@pytest.mark.parametrize("n,nproc", [(2, 1), (1, 2)])
def test_a_gloo_script_runs_unchanged(daemon, n, nproc):
    import muster
    c = muster.torchrun(n, "gloo_allreduce.py", nproc_per_node=nproc, cpu=1, memory=1, timeout_seconds=120,
                        env={"OMP_NUM_THREADS": "1"}, wait_for_completion=True, completion_timeout_seconds=240,
                        progress=False)
    assert c["status"] == "succeeded", c
    log = muster.cluster_logs(c)  # worker 0's: rank 0 (and rank 1 with nproc_per_node=2)
    assert "rank 0 of 2: sum 3" in log, log


def test_a_killed_rank_fails_the_cluster_naming_it(daemon):
    import muster
    with pytest.raises(muster.ClusterFailed) as failed:
        muster.torchrun(2, "kill_rank.py", cpu=1, memory=1, timeout_seconds=120,
                        env={"OMP_NUM_THREADS": "1", "VICTIM": "1"}, wait_for_completion=True,
                        completion_timeout_seconds=240, progress=False)
    c = failed.value.cluster
    c = muster.get_cluster(c["id"])
    worker1 = c["workers"]["worker"][1]
    assert c["status"] == "failed"
    assert c["reason"] == "worker 1 (id %s, rank 1) failed with exit code 137" % worker1, c["reason"]
    for wid in c["workers"]["worker"]:  # nothing of the job is left running
        assert muster.get_worker(wid)["status"] in ("failed", "stopped", "succeeded")
    assert "rank 1 dies now" in muster.worker_logs(worker1)


def test_a_killed_process_ends_its_siblings_and_is_named(daemon):
    import muster
    with pytest.raises(muster.ClusterFailed):
        muster.torchrun(1, "kill_rank.py", nproc_per_node=2, cpu=1, memory=1, timeout_seconds=120,
                        env={"OMP_NUM_THREADS": "1", "VICTIM": "1"}, wait_for_completion=True,
                        completion_timeout_seconds=240, progress=False)
    c = next(c for c in reversed(muster.list_clusters()) if c["mode"] == "torchrun")
    worker0 = c["workers"]["worker"][0]
    assert c["reason"] == "worker 0 (id %s, ranks 0-1) failed with exit code 137" % worker0, c["reason"]
    log = muster.worker_logs(worker0)
    assert "process 1 of 2 (LOCAL_RANK=1 RANK=1 ROLE_RANK=1) was killed by signal 9; ending the other 1" in log, log
    assert "survived the dead rank" not in log


@pytest.mark.parametrize("body,field,words", [
    ({"mode": "torchrun", "n_workers": 2}, "worker_script", "is required in torchrun mode"),
    ({"mode": "torchrun", "n_workers": 2, "worker_script": "show_env.py", "nproc_per_node": 0}, "nproc_per_node",
     "must be in 1..1024"),
    ({"mode": "torchrun", "n_workers": 2, "worker_script": "show_env.py", "max_restarts": -1}, "max_restarts",
     "must be in 0..1000"),
    ({"mode": "torchrun", "n_workers": 2, "worker_script": "show_env.py", "slots": 2}, "slots", "nproc_per_node"),
    ({"mode": "mpi", "n_workers": 2, "worker_script": "show_env.py", "nproc_per_node": 2}, "nproc_per_node",
     "for torchrun mode only"),
    ({"mode": "torchrun", "n_workers": 1, "worker_script": "missing.py"}, "worker_script", "missing.py"),
])
def test_bad_requests_name_the_field(daemon, body, field, words):
    from openapi_contract import ResponseObserver
    status, answer = RestApi(daemon, ResponseObserver()).call("POST", "/api/v1/clusters", body)
    assert status == 400, answer
    assert answer["error"]["field"] == field and words in answer["error"]["message"], answer


def test_the_muster_command(daemon, tmp_path):
    out = tmp_path / "cli"
    out.mkdir()
    env = dict(os.environ, OUT_DIR=str(out))
    p = subprocess.run([sys.executable, "-m", "muster", "torchrun", "-np", "2", "--nproc-per-node", "1", "--cpu", "0.5",
                        "--memory", "0.5", "--env", "OUT_DIR=" + str(out), "--wait", "show_env.py"],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    assert p.returncode == 0, p.stdout
    assert "succeeded" in p.stdout and "torchrun_command: torchrun --nnodes=2 --nproc_per_node=1 " in p.stdout
    assert sorted(os.listdir(out)) == ["rank-0.json", "rank-1.json"]
