#!/usr/bin/env python3
"""Images/s of the fashion_mnist program: 1 process vs 2 ranks (allreduce,
mpirun -np 2) vs 1 PS + 2 workers, for the MLP and the CNN, at the same
global batch (128: 128 in one process, 64 per worker otherwise), one thread
per process, all in one run. Each repetition runs every configuration once,
back to back, for a fixed number of steps without evaluation (REPEATS
repetitions, BENCH_TRAIN_REPEATS); the median images/s is kept.

Scaling efficiency = 2-rank images/s / (2 x 1-process images/s), computed
per repetition against that repetition's single process, median reported.

Then (unless BENCH_TRAIN_ACCURACY=0) test accuracy after EPOCHS epochs on
the full data set, per-worker batch 64, in each mode, for the MLP and the
CNN (BENCH_TRAIN_CNN_ACCURACY=0 leaves the CNN's out: a few minutes less).

Usage: train_bench.py <build-dir>
"""
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from testutil import free_ports  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
BIN = os.path.join(BUILD, "bin")
PROGRAM = os.path.join(BIN, "fashion_mnist")
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "out")
REPEATS = int(os.environ.get("BENCH_TRAIN_REPEATS", "7"))
GLOBAL_BATCH = 128
STEPS = {"mlp": 400, "cnn": 120}  # per run, at the global batch
EPOCHS = int(os.environ.get("BENCH_TRAIN_EPOCHS", "10"))
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-mca", "btl", "self,vader,tcp",
          "-mca", "btl_vader_single_copy_mechanism", "none"]


def finals(text):
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^final (\w+)=([-0-9.e]+)$", text, re.M)}


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_") and k != "TF_CONFIG"}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


def check(p, out, what):
    if p.returncode != 0:
        sys.exit("bench/train: %s failed (%d):\n%s" % (what, p.returncode, out[-3000:]))


def run_single(args):
    p = subprocess.run([PROGRAM] + args, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=3600)
    check(p, p.stdout, "single process")
    return finals(p.stdout)


def run_allreduce(args):
    p = subprocess.run(MPIRUN + ["-np", "2", PROGRAM] + args, env=clean_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=3600)
    check(p, p.stdout, "mpirun -np 2")
    return finals(p.stdout)


def run_ps(args):
    ps, w0, w1 = free_ports(3)
    cluster = {"ps": ["127.0.0.1:%d" % ps], "worker": ["127.0.0.1:%d" % w0, "127.0.0.1:%d" % w1]}

    def env(kind, i):
        return clean_env(TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": kind, "index": i}}))

    procs = []
    try:
        procs.append(subprocess.Popen([os.path.join(BIN, "muster-ps")], env=env("ps", 0), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True))
        for i in range(2):
            procs.append(subprocess.Popen([PROGRAM] + args, env=env("worker", i), stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, start_new_session=True))
        outs = [p.communicate(timeout=3600)[0] for p in procs[1:]]
        for i, p in enumerate(procs[1:]):
            check(p, outs[i], "ps worker %d" % i)
        procs[0].wait(timeout=60)
        return finals(outs[0])
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def run_pair(args):
    """Two independent single processes at once, one per core (as mpirun binds
    the ranks), no communication: what the host gives two busy cores right
    now, the ceiling for any 2-worker run."""
    procs = [subprocess.Popen(["taskset", "-c", str(i % (os.cpu_count() or 1)), PROGRAM] + args, env=clean_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    outs = [p.communicate(timeout=3600)[0] for p in procs]
    for p, out in zip(procs, outs):
        check(p, out, "independent pair")
    f = [finals(out) for out in outs]
    return {k: sum(x[k] for x in f) for k in ("images_per_sec", "images_per_cpu_sec")}


MODES = [("single", run_single, 1), ("allreduce", run_allreduce, 2), ("ps", run_ps, 2)]
# Throughput runs also time the independent pair (a reference, not a mode).
THROUGHPUT_MODES = MODES + [("pair", run_pair, 2)]


def cpu_seconds():
    """User + system CPU time of every finished child process (mpirun's ranks included)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def throughput(model):
    """Every repetition runs the three modes back to back, so a slow stretch of
    this shared machine hits one repetition's modes alike; the efficiency is
    taken per repetition (against the single process of the same repetition)
    and the median over repetitions is reported."""
    args_of = {}
    runs = {name: {"samples": [], "cpu_samples": [], "cpu": []} for name, _, _ in THROUGHPUT_MODES}
    for _ in range(REPEATS):
        for name, fn, workers in THROUGHPUT_MODES:
            batch = GLOBAL_BATCH // workers
            args = ["--model", model, "--batch-size", str(batch), "--max-steps", str(STEPS[model]), "--epochs", "1",
                    "--log-every", "1000000", "--no-eval", "--warmup-steps", "0"]
            args_of[name] = batch
            before = cpu_seconds()
            f = fn(args)
            runs[name]["cpu"].append(cpu_seconds() - before)
            runs[name]["samples"].append(f["images_per_sec"])
            runs[name]["cpu_samples"].append(f["images_per_cpu_sec"])
    rows = {}
    for name, _, workers in THROUGHPUT_MODES:
        r = runs[name]
        rows[name] = {"images_per_sec": statistics.median(r["samples"]), "samples": r["samples"], "workers": workers,
                      "images_per_cpu_sec": statistics.median(r["cpu_samples"]), "cpu_samples": r["cpu_samples"],
                      "batch_per_worker": args_of[name], "cpu_seconds_per_run": statistics.median(r["cpu"])}
        print("  %s %-9s %8.0f images/s (runs: %s); %8.0f images/CPU-s (runs: %s); %.1f CPU s per run" % (
            model, name, rows[name]["images_per_sec"], ", ".join("%.0f" % s for s in r["samples"]),
            rows[name]["images_per_cpu_sec"], ", ".join("%.0f" % s for s in r["cpu_samples"]),
            rows[name]["cpu_seconds_per_run"]), flush=True)

    def per_repeat(mode, key):
        return [m / (2 * s) for m, s in zip(runs[mode][key], runs["single"][key])]

    out = {"modes": rows}
    for mode in ("allreduce", "ps"):
        wall, cpu = per_repeat(mode, "samples"), per_repeat(mode, "cpu_samples")
        out[mode + "_efficiency"] = statistics.median(wall)
        out[mode + "_efficiency_runs"] = wall
        out[mode + "_efficiency_cpu"] = statistics.median(cpu)
        print("  %s %-9s efficiency per repetition: %s (median %.2f)" % (
            model, mode, ", ".join("%.2f" % e for e in wall), out[mode + "_efficiency"]), flush=True)
    # What the host gave two busy cores in each repetition, and what share of
    # it the allreduce run kept (the cost of muster's synchronisation alone).
    host = [p / (2 * s) for p, s in zip(runs["pair"]["samples"], runs["single"]["samples"])]
    kept = [a / p for a, p in zip(runs["allreduce"]["samples"], runs["pair"]["samples"])]
    out["pair_vs_single"] = statistics.median(host)
    out["pair_vs_single_runs"] = host
    out["allreduce_vs_pair"] = statistics.median(kept)
    out["allreduce_vs_pair_runs"] = kept
    print("  %s two independent processes vs 2 x single per repetition: %s (median %.2f); allreduce vs that pair: "
          "%s (median %.2f)" % (model, ", ".join("%.2f" % e for e in host), out["pair_vs_single"],
                                ", ".join("%.2f" % e for e in kept), out["allreduce_vs_pair"]), flush=True)
    return out


def accuracy(model):
    acc = {}
    for name, fn, _ in MODES:
        t = time.monotonic()
        f = fn(["--model", model, "--epochs", str(EPOCHS), "--batch-size", "64", "--log-every", "1000000"])
        acc[name] = {"test_accuracy": f["test_accuracy"], "seconds": round(time.monotonic() - t, 1)}
        print("  %s %-9s test accuracy %.4f after %d epochs (%.0f s)" % (model, name, f["test_accuracy"], EPOCHS,
                                                                        acc[name]["seconds"]), flush=True)
    return acc


def main():
    os.makedirs(OUT, exist_ok=True)
    result = {"global_batch": GLOBAL_BATCH, "repeats": REPEATS, "steps": STEPS, "threads_per_process": 1,
              "cores": os.cpu_count(), "load_average_before": os.getloadavg()[0], "models": {}}
    for model in ("mlp", "cnn"):
        print("bench/train: throughput, %s" % model, flush=True)
        result["models"][model] = throughput(model)
    if os.environ.get("BENCH_TRAIN_ACCURACY", "1") != "0":
        result["epochs"] = EPOCHS
        models = ["mlp"] + (["cnn"] if os.environ.get("BENCH_TRAIN_CNN_ACCURACY", "1") != "0" else [])
        for model in models:
            print("bench/train: accuracy, %s" % model, flush=True)
            result["models"][model]["accuracy"] = accuracy(model)
    result["load_average_after"] = os.getloadavg()[0]
    with open(os.path.join(OUT, "train.json"), "w") as f:
        json.dump(result, f, indent=2)
    with open(os.path.join(OUT, "train.md"), "w") as f:
        f.write(markdown(result))
    print(markdown(result))


def markdown(r):
    lines = ["## Training throughput (bench/train)", "",
             "examples/fashion_mnist on Fashion-MNIST, global batch %d (one process: %d; 2 ranks or 2 PS workers: "
             "%d each), one thread per process, %d repetitions, each running every mode back to back; images/s are "
             "medians. Scaling efficiency = 2-worker images/s / (2 x 1-process images/s) of the same "
             "repetition, median over repetitions (per repetition in the list below the table); target >= 0.85 "
             "for allreduce." %
             (r["global_batch"], r["global_batch"], r["global_batch"] // 2, r["repeats"]), "",
             "Machine load (1-minute load average) before / after: %.1f / %.1f on %d cores. Wall-clock "
             "figures depend on how much CPU the other work on the machine leaves to each configuration: on a "
             "loaded machine the ratios say more about CPU shares than about scaling (when this was first run, "
             "under a load of 10, one process got about a third of a core while the 2 ranks ran nearly "
             "unhindered). The CPU-time table below does not depend on load. With the same global batch each "
             "worker computes on half the batch, which is a little faster per image here, so the CPU-time "
             "efficiency can exceed 1." %
             (r["load_average_before"], r.get("load_average_after", r["load_average_before"]), r["cores"]), "",
             "Wall clock (images/s of the whole job, training steps only):", "",
             "| model | 1 process | 2 ranks (allreduce) | 1 PS + 2 workers | allreduce efficiency | PS efficiency |",
             "|---|---|---|---|---|---|"]
    for model, m in r["models"].items():
        s = m["modes"]
        lines.append("| %s | %.0f img/s | %.0f img/s | %.0f img/s | %.2f | %.2f |" % (
            model, s["single"]["images_per_sec"], s["allreduce"]["images_per_sec"], s["ps"]["images_per_sec"],
            m["allreduce_efficiency"], m["ps_efficiency"]))
    lines.append("")
    for model, m in r["models"].items():
        lines.append("- %s efficiency per repetition: allreduce %s; PS %s" % (
            model, ", ".join("%.2f" % e for e in m.get("allreduce_efficiency_runs", [])),
            ", ".join("%.2f" % e for e in m.get("ps_efficiency_runs", []))))
    if all("pair_vs_single" in m for m in r["models"].values()):
        lines += ["", "What the host gives two busy cores: in every repetition two independent single processes "
                  "(no communication, batch %d each, one per core as mpirun binds the ranks) also ran. Their "
                  "images/s against 2 x the single process is the ceiling of any 2-worker run at that moment; "
                  "the allreduce run against the pair is what muster's synchronisation costs on top:" %
                  (r["global_batch"] // 2), "",
                  "| model | independent pair / (2 x single) | allreduce / independent pair |", "|---|---|---|"]
        for model, m in r["models"].items():
            lines.append("| %s | %.2f (runs: %s) | %.2f (runs: %s) |" % (
                model, m["pair_vs_single"], ", ".join("%.2f" % e for e in m["pair_vs_single_runs"]),
                m["allreduce_vs_pair"], ", ".join("%.2f" % e for e in m["allreduce_vs_pair_runs"])))
    lines += ["", "Per CPU-second of each training thread, summed over the processes: the throughput with a "
              "dedicated core per process, which other load on the machine does not change (time a training "
              "thread spends blocked in a collective or waiting for the PS while asleep is not counted; "
              "spinning is):", "",
              "| model | 1 process | 2 ranks (allreduce) | 1 PS + 2 workers | allreduce efficiency | PS efficiency |",
              "|---|---|---|---|---|---|"]
    for model, m in r["models"].items():
        s = m["modes"]
        lines.append("| %s | %.0f img/s | %.0f img/s | %.0f img/s | %.2f | %.2f |" % (
            model, s["single"]["images_per_cpu_sec"], s["allreduce"]["images_per_cpu_sec"],
            s["ps"]["images_per_cpu_sec"], m["allreduce_efficiency_cpu"], m["ps_efficiency_cpu"]))
    acc_rows = [(model, m["accuracy"]) for model, m in r["models"].items() if "accuracy" in m]
    if acc_rows:
        if r.get("accuracy_note"):
            lines += ["", r["accuracy_note"]]
        lines += ["", "Test accuracy on the 10,000 test images after %d epochs (batch 64 per worker, learning "
                  "rate scaled by the workers with warm-up, cosine decay):" % r["epochs"], "",
                  "| model | 1 process | 2 ranks (allreduce) | 1 PS + 2 workers |", "|---|---|---|---|"]
        for model, a in acc_rows:
            lines.append("| %s | %.2f%% | %.2f%% | %.2f%% |" % (model, 100 * a["single"]["test_accuracy"],
                                                             100 * a["allreduce"]["test_accuracy"],
                                                             100 * a["ps"]["test_accuracy"]))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
