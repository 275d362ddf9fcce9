#!/usr/bin/env python3
"""Launch benchmark: launch_workers(n=64) -> all 64 `running` with an IP.

Run by bench/launch/run.sh, which starts musterd (local backend) and sets
MUSTER_STATE_DIR. Each run times, through the Python SDK, launch_workers(64)
followed by await_workers(wait_for_completion=False); every worker must be
running with an ip_address or the run fails. All workers are stopped between
runs. A worker is `running` once its muster-agent has registered its IP,
which happens before the agent starts the Python script. The reference,
measured in the same run on the same machine, is the fork/exec floor:
starting 64 bare `sh` processes directly (subprocess) until each has printed
that it is up.

Writes bench/out/launch.json and bench/out/launch.md.
"""
import argparse
import ipaddress
import json
import os
import statistics
import subprocess
import time

import muster

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET_S = 1.0
WORKER_SCRIPT = "bench/launch/sleep.py"  # relative to musterd's --project-dir (the repo root)


def one_launch(n):
    t0 = time.perf_counter()
    workers = muster.launch_workers(n, cpu=0.25, memory=1, script=WORKER_SCRIPT)
    res = muster.await_workers(workers, wait_for_completion=False, timeout_seconds=120)
    elapsed = time.perf_counter() - t0
    try:
        if res["failures"]:
            f = res["failures"][0]
            raise SystemExit("launch bench: %d of %d workers failed, e.g. %s %s: %s"
                             % (len(res["failures"]), n, f["id"], f["status"], f.get("reason")))
        if len(res["workers"]) != n:
            raise SystemExit("launch bench: %d workers running, expected %d" % (len(res["workers"]), n))
        for w in res["workers"]:
            ipaddress.ip_address(w["ip_address"])
    finally:
        muster.stop_workers(*workers)
    return elapsed


def one_reference(n):
    """n bare sh processes, each printing once it has started: the fork/exec floor."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["/bin/sh", "-c", "echo up; exec sleep 600"], stdout=subprocess.PIPE)
             for _ in range(n)]
    try:
        for p in procs:
            if p.stdout.readline().strip() != b"up":
                raise SystemExit("reference process failed to start")
        return time.perf_counter() - t0
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
            p.stdout.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "out"))
    opts = ap.parse_args()

    runs, refs = [], []
    for i in range(opts.runs):
        runs.append(one_launch(opts.n))
        time.sleep(0.5)  # let the stopped workers' processes go
        refs.append(one_reference(opts.n))
        time.sleep(0.5)
        print("run %d: muster %.3f s, bare sh processes %.3f s" % (i + 1, runs[-1], refs[-1]), flush=True)

    median = statistics.median(runs)
    ref = statistics.median(refs)
    load = os.getloadavg()[0]
    figures = {"n": opts.n, "runs_s": [round(r, 4) for r in runs], "median_s": round(median, 4),
               "target_s": TARGET_S, "reference_runs_s": [round(r, 4) for r in refs],
               "reference_median_s": round(ref, 4), "ratio_to_reference": round(median / ref, 2),
               "cpus": os.cpu_count(), "loadavg_1m": round(load, 2), "backend": "local"}
    os.makedirs(opts.out, exist_ok=True)
    with open(os.path.join(opts.out, "launch.json"), "w") as f:
        json.dump(figures, f, indent=2)
        f.write("\n")
    verdict = "meets" if median < TARGET_S else "misses"
    md = [
        "## Launch: %d workers to `running` with IPs" % opts.n,
        "",
        "Time from `launch_workers(n=%d)` to `await_workers(..., wait_for_completion=False)` returning"
        " all %d workers `running` with an IP address, through the Python SDK against musterd on the"
        " local backend (each worker runs `bench/launch/sleep.py` under muster-agent). Median of %d runs;"
        " every worker is stopped between runs. A worker counts as `running` once its muster-agent has"
        " registered its IP (before the agent has started the Python script). Reference: %d bare `sh`"
        " processes started directly until each printed that it is up (the fork/exec floor), measured"
        " in the same run." % (opts.n, opts.n, len(runs), opts.n),
        "",
        "| | median | runs |",
        "|---|---|---|",
        "| muster launch + await | **%.3f s** | %s |" % (median, ", ".join("%.3f" % r for r in runs)),
        "| bare `sh` processes (reference) | %.3f s | %s |" % (ref, ", ".join("%.3f" % r for r in refs)),
        "",
        "Target: under %.1f s; this run %s it (%.2fx the bare-process floor). Machine: %d cores,"
        " 1-minute load average %.1f when the run ended." % (TARGET_S, verdict, median / ref,
                                                               os.cpu_count(), load),
        "",
    ]
    with open(os.path.join(opts.out, "launch.md"), "w") as f:
        f.write("\n".join(md))
    print("launch: median %.3f s (target %.1f s), reference %.3f s" % (median, TARGET_S, ref))


if __name__ == "__main__":
    main()
