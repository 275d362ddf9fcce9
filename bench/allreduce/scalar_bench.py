"""A scalar allreduce from Python, the way a training script averages a loss or
a metric: muster.torch's hvd.allreduce against torch.distributed on gloo and
against the runtime's own call underneath it, in one mpirun, interleaved.

  mpirun -np 2 python3 scalar_bench.py OUT.json

Variants, each a batch of BATCH calls on a 0-d float32 tensor, repeated REPS
times in turn (rep by rep, so load hits all alike); the figure is the median
over reps of the slowest rank's time per call, in microseconds:
  hvd       hvd.allreduce(t)                 (Horovod's default: average, a new tensor)
  hvd_sum   hvd.allreduce(t, op=hvd.Sum)
  gloo      dist.all_reduce(t)               (sum, in place; torch.distributed on gloo)
  runtime   the Communicator's allreduce_async(...).wait() on the tensor's memory
            (the C++ call hvd.allreduce makes, with only the binding around it)
The gloo group rendezvous over tcp://127.0.0.1:$SCALAR_BENCH_PORT (default 29531).
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import muster.runtime as rt
import muster.torch as hvd

REPS = int(os.environ.get("SCALAR_BENCH_REPS", "15"))
BATCH = int(os.environ.get("SCALAR_BENCH_BATCH", "500"))


def slowest(seconds):
    return hvd.allreduce(torch.tensor([seconds], dtype=torch.float64), op=hvd.Max).item()


def per_call_us(f):
    dist.barrier()
    hvd.barrier()
    t0 = time.perf_counter()
    for _ in range(BATCH):
        f()
    return slowest((time.perf_counter() - t0) / BATCH) * 1e6


def main():
    out_path = sys.argv[1]
    hvd.init()
    port = os.environ.get("SCALAR_BENCH_PORT", "29531")
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % port, rank=hvd.rank(),
                            world_size=hvd.size())
    comm = rt.communicator()
    a, b, c, d = (torch.tensor(float(hvd.rank() + 1)) for _ in range(4))
    runs = {
        "hvd": lambda: hvd.allreduce(a),
        "hvd_sum": lambda: hvd.allreduce(b, op=hvd.Sum),
        "gloo": lambda: dist.all_reduce(c),
        "runtime": lambda: comm.allreduce_async(d.data_ptr(), 1, "float32", "sum").wait(),
    }
    # Correct once: the average of 1..n, and sums of 1..n.
    n = hvd.size()
    want_avg, want_sum = (n + 1) / 2.0, n * (n + 1) / 2.0
    got = {"hvd": hvd.allreduce(a).item(), "hvd_sum": hvd.allreduce(b, op=hvd.Sum).item()}
    dist.all_reduce(c)
    comm.allreduce_async(d.data_ptr(), 1, "float32", "sum").wait()
    got["gloo"], got["runtime"] = c.item(), d.item()
    want = {"hvd": want_avg, "hvd_sum": want_sum, "gloo": want_sum, "runtime": want_sum}
    wrong = {k: (got[k], want[k]) for k in got if abs(got[k] - want[k]) > 1e-6}
    if wrong:
        raise SystemExit("scalar_bench: wrong results %s" % wrong)
    for t in (b, c, d):
        t.zero_()  # the timed sums stay at zero (no overflow, same cost)
    times = {k: [] for k in runs}
    for rep in range(REPS + 1):
        for name, f in runs.items():
            us = per_call_us(f)
            if rep:  # the first round warms up
                times[name].append(us)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {"ranks": n, "batch": BATCH, "reps": REPS, "torch": torch.__version__,
              "us": med, "hvd_vs_gloo": med["gloo"] / med["hvd"],
              "hvd_over_runtime_us": med["hvd"] - med["runtime"]}
    dist.destroy_process_group()
    if hvd.rank() == 0:
        print(json.dumps(result, indent=1), flush=True)
        with open(out_path, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
