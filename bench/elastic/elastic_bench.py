"""bench/elastic: recovery from a SIGKILLed rank, muster's elastic cluster vs torchrun --max-restarts.

Both train bench/torch's 25 M MLP with 2 ranks on this host, committing (muster:
state.commit() in memory; torchrun: a checkpoint file) every 10 steps; rank 1
kills itself before step 25. Measured in the same run, from the logs the
ranks write:
- recovery: from the SIGKILL to the first step completed by the new world;
- steps redone: the steps done again after it (since the last commit);
- muster only: the replacement joined (the SIGKILL to the generation that
  has it formed, from the cluster's generations), the cost of commit()
  per step (the median commit over 10 x the median step) and of
  state.check_host_updates() (called after every step that does not commit,
  so that a replacement joins at the next step rather than the next commit).
  One more run commits only, for the join as a commit-only script sees it.
Writes <out>/elastic.json.
"""
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from sdk_daemon import Daemon, RestApi  # noqa: E402
from testutil import wait_for  # noqa: E402

STEPS, COMMIT_EVERY, KILL_STEP = 60, 10, 45
MUSTER_RUNS = 3
CHECK_EVERY = 1
ARGS = ["--steps", str(STEPS), "--commit-every", str(COMMIT_EVERY), "--kill-rank", "1", "--kill-step",
        str(KILL_STEP)]


def records(logdir, prefix):
    out = []
    for name in os.listdir(logdir):
        if name.startswith(prefix):
            with open(os.path.join(logdir, name)) as f:
                out += [json.loads(line) for line in f if line.strip()]
    return out


def parse_time(text):
    return datetime.datetime.strptime(text.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def measure(steps, killed, world_key, first_world):
    before = [s for s in steps if s["event"] == "step" and s[world_key] == first_world]
    after = [s for s in steps if s["event"] == "step" and s[world_key] != first_world]
    last_before = max(s["step"] for s in before)
    resumed_from = min(s["step"] for s in after) - 1
    return {"recovery_seconds": min(s["time"] for s in after) - killed,
            "steps_redone": last_before - resumed_from,
            "step_seconds": statistics.median(s["seconds"] for s in before if s["step"] > 2)}


def run_muster(work, check_every):
    project = os.path.join(work, "project")
    os.makedirs(project)
    for name in ("muster_train.py", "model.py"):
        shutil.copy(os.path.join(HERE, name), project)
    logdir = os.path.join(work, "muster")
    os.makedirs(logdir)
    daemon = Daemon(project, os.path.join(work, "state"))
    daemon.start()
    try:
        api = RestApi(daemon)
        status, c = api.call("POST", "/api/v1/clusters", {
            "mode": "elastic", "n_workers": 2, "min_np": 1, "max_np": 2, "cpu": 1, "memory": 2,
            "worker_script": "muster_train.py", "args": ["--logdir", logdir, "--check-every", str(check_every)] + ARGS, "timeout_seconds": 120,
            "env": {"PYTHONPATH": os.path.join(ROOT, "sdk", "python"), "OMP_NUM_THREADS": "1",
                    "MUSTER_BINARY_DIR": os.environ["MUSTER_BINARY_DIR"]}})
        assert status == 201, c

        def ended():
            s, c = api.call("GET", "/api/v1/clusters/" + c_id)
            return c if c["status"] in ("succeeded", "failed", "stopped") else None
        c_id = c["id"]
        c = wait_for(ended, timeout=900, interval=0.5, what="the elastic cluster")
        assert c["status"] == "succeeded", c["reason"]
    finally:
        daemon.stop()
    killed = float(open(os.path.join(logdir, "killed")).read())
    steps = records(logdir, "muster-")
    first = min(s["generation"] for s in steps)
    out = measure(steps, killed, "generation", first)
    reformed = [g for g in c["generations"] if g["generation"] == first + 1]
    out["reformed_seconds"] = parse_time(reformed[0]["started_at"]) - killed if reformed else None
    joined = [g for g in c["generations"] if len(g["members"]) == 2 and g["generation"] > first]
    out["replacement_joined_seconds"] = parse_time(joined[0]["started_at"]) - killed if joined else None
    # Each rank's first commit also allocates the copy of the optimizer's
    # state (none exists before the first step): the later ones are the cost
    # of committing as training goes on.
    def steady(event):
        out = []
        for rank in (0, 1):
            mine = sorted((s for s in steps if s["event"] == event and s["generation"] == first and s["rank"] == rank
                           and s["step"] > 0), key=lambda s: s["step"])
            out += [s["seconds"] for s in mine[1:]]
        return out
    commits, saves, checks = steady("commit"), steady("save"), steady("check")
    out["check_every"] = check_every
    if checks:
        out["check_seconds"] = statistics.median(checks)
        out["check_cost_per_step"] = out["check_seconds"] / (check_every * out["step_seconds"])
    out["commit_seconds"] = statistics.median(commits)
    out["save_seconds"] = statistics.median(saves)
    # What commit() adds to training: the copy. Its broadcast's wait for the
    # slower rank would otherwise be spent in the next allreduce.
    out["commit_cost_per_step"] = out["save_seconds"] / (COMMIT_EVERY * out["step_seconds"])
    out["generations"] = [{k: g[k] for k in ("generation", "cause", "recovery_seconds", "resume_seconds",
                                              "batches_redone")} | {"size": len(g["members"])}
                          for g in c["generations"]]
    return out


def run_torchrun(work):
    logdir = os.path.join(work, "torchrun")
    os.makedirs(logdir)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "--max_restarts", "1", "--redirects", "2", "--tee", "2", "--log_dir", os.path.join(work, "torchrun-logs"),
           os.path.join(HERE, "torchrun_train.py"), "--logdir", logdir] + ARGS
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:]
    killed = float(open(os.path.join(logdir, "killed")).read())
    return measure(records(logdir, "torchrun-"), killed, "restart", 0)


def main():
    out_path = sys.argv[1]
    work = tempfile.mkdtemp(prefix="muster_bench_elastic_")
    try:
        load = [float(open("/proc/loadavg").read().split()[0])]
        result = {"model": "mlp25m (25.2 M parameters), batch 32, 2 ranks on one host, 1 thread each",
                  "commit_every": COMMIT_EVERY, "kill_step": KILL_STEP, "steps": STEPS}
        # Recovery moves by ~10% from run to run here: the median of three.
        runs = []
        for i in range(MUSTER_RUNS):
            os.makedirs(os.path.join(work, "m%d" % i))
            runs.append(run_muster(os.path.join(work, "m%d" % i), CHECK_EVERY))
        runs.sort(key=lambda m: m["recovery_seconds"])
        result["muster"] = runs[len(runs) // 2]
        result["muster"]["recovery_runs"] = [m["recovery_seconds"] for m in runs]
        joins = sorted(m["replacement_joined_seconds"] for m in runs if m["replacement_joined_seconds"] is not None)
        result["muster"]["joined_runs"] = joins
        result["muster"]["joined_median"] = statistics.median(joins) if joins else None
        os.makedirs(os.path.join(work, "commit-only"))
        result["muster_commit_only"] = run_muster(os.path.join(work, "commit-only"), 0)
        result["torchrun"] = run_torchrun(work)
        load.append(float(open("/proc/loadavg").read().split()[0]))
        result["load"] = load
        result["speedup"] = result["torchrun"]["recovery_seconds"] / result["muster"]["recovery_seconds"]
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps(result, indent=1))
    finally:
        if os.environ.get("MUSTER_BENCH_KEEP"):
            print("bench/elastic: kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
