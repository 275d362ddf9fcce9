"""Runs the PS benchmark (see run.sh) and writes ps.json / ps.md."""
import json
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from testutil import free_port  # noqa: E402

STEPS = int(os.environ.get("PS_BENCH_STEPS", "10"))
WARMUP = 2
PARAMS = 25_600_000
N_WORKERS = 2


def iperf3_gbs():
    port = free_port()
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        data = {"error": "not run"}
        for _ in range(50):  # wait for the server without using up its one connection
            time.sleep(0.1)
            out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "3", "-J"],
                                 capture_output=True, text=True, timeout=60)
            data = json.loads(out.stdout)
            if "error" not in data or "refused" not in data["error"]:
                break
        if "error" in data:
            raise RuntimeError("iperf3: " + data["error"])
        return data["end"]["sum_received"]["bits_per_second"] / 8 / 1e9
    finally:
        server.kill()
        server.wait()


def run_ps(build, n_ps):
    ps = ["127.0.0.1:%d" % free_port() for _ in range(n_ps)]
    workers = ["127.0.0.1:%d" % free_port() for _ in range(N_WORKERS)]
    cluster = {"ps": ps, "chief": workers[:1], "worker": workers[1:]}

    def env(kind, index):
        e = dict(os.environ)
        e["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})
        e.setdefault("MUSTER_PS_TIMEOUT_MS", "60000")
        return e

    procs = []
    try:
        for i in range(n_ps):
            procs.append(subprocess.Popen([build + "/bin/muster-ps"], env=env("ps", i),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        args = [build + "/bin/ps_bench_worker", "--params", str(PARAMS), "--steps", str(STEPS), "--warmup", str(WARMUP)]
        chief = subprocess.Popen(args, env=env("chief", 0), stdout=subprocess.PIPE, text=True)
        others = [subprocess.Popen(args, env=env("worker", i), stdout=subprocess.DEVNULL) for i in range(N_WORKERS - 1)]
        procs += [chief] + others
        out, _ = chief.communicate(timeout=300)
        for p in others:
            if p.wait(timeout=60) != 0:
                raise RuntimeError("a benchmark worker failed")
        if chief.returncode != 0:
            raise RuntimeError("the chief failed")
        for p in procs[:n_ps]:
            if p.wait(timeout=30) != 0:
                raise RuntimeError("muster-ps exited with %d" % p.returncode)
        result = json.loads(out.strip().splitlines()[-1])
        step_s = statistics.median(result["step_s"])
        return {"n_ps": n_ps, "n_workers": N_WORKERS, "step_s": round(step_s, 4),
                "aggregate_gbs": round(N_WORKERS * result["bytes_per_step"] / step_s / 1e9, 3),
                "steps": len(result["step_s"])}
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()


def main():
    build, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    # iperf3 before, between and after the PS runs: the machine is shared, so
    # the reference is the median of three samples taken around them.
    samples = [iperf3_gbs()]
    runs = [run_ps(build, 1)]
    samples.append(iperf3_gbs())
    runs.append(run_ps(build, 2))
    samples.append(iperf3_gbs())
    ref = statistics.median(samples)
    figures = {"iperf3_gbs": round(ref, 3), "iperf3_samples_gbs": [round(x, 3) for x in samples],
               "model_params": PARAMS, "model_mb": PARAMS * 4 / 1e6, "runs": runs,
               "ratio_vs_iperf3": round(runs[0]["aggregate_gbs"] / ref, 3),
               "ratio_vs_best_iperf3_sample": round(runs[0]["aggregate_gbs"] / max(samples), 3),
               "target_ratio": 0.7,
               "cpus": os.cpu_count()}
    with open(os.path.join(out_dir, "ps.json"), "w") as f:
        json.dump(figures, f, indent=2)
        f.write("\n")
    lines = ["## Parameter server (bench/ps)", "",
             "Sync step (push every gradient, pull every parameter) of a 25.6 M-parameter float32 model "
             "(102.4 MB), %d workers, loopback, separate processes; median of %d steps after %d warm-up steps. "
             "Aggregate = bytes pushed + pulled by all workers per second. Reference: one iperf3 TCP stream over "
             "loopback in the same run (median of samples before, between and after the PS runs)." % (N_WORKERS, STEPS, WARMUP), "",
             "| PS tasks | workers | step (s) | aggregate (GB/s) | vs iperf3 |", "|---|---|---|---|---|"]
    for r in runs:
        lines.append("| %d | %d | %.3f | %.2f | %.2fx |" % (r["n_ps"], r["n_workers"], r["step_s"], r["aggregate_gbs"],
                                                            r["aggregate_gbs"] / ref))
    lines += ["", "iperf3 (1 stream, loopback): %.2f GB/s (samples %s GB/s). Ratio 1 PS / iperf3: **%.2f** "
              "(target >= 0.7); against the faster iperf3 sample alone: %.2f. Machine: %d CPUs, shared with other "
              "jobs while measured, so both figures move from run to run."
              % (ref, ", ".join("%.2f" % x for x in samples), figures["ratio_vs_iperf3"], figures["ratio_vs_best_iperf3_sample"],
                 os.cpu_count()), ""]
    with open(os.path.join(out_dir, "ps.md"), "w") as f:
        f.write("\n".join(lines))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
