"""One rank of torch.distributed's gloo allreduce at the sizes given (float32, sum).

    RANK=r WORLD_SIZE=p MASTER_ADDR=a MASTER_PORT=n python3 gloo_allreduce.py OUT.json BYTES...

Rank 0 writes {"<bytes>": {"seconds": median per op, "cpu_s": median CPU
seconds per op summed over ranks}} to OUT.json; each size runs a warm-up then
REPS timed reps, each ops_per_rep(bytes) ops back to back between barriers
(the slowest rank's time per op; CPU from getrusage, every thread of the
process), as multihost_allreduce_bench measures it.
"""
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist

REPS = int(os.environ.get("GLOO_REPS", "7"))


def cpu_s():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def ops_per_rep(size):
    """64 MB of allreduce per timed rep, 1 to 32 ops; a latency probe (at most 4 KB) 512
    (multihost_allreduce_bench's rule)."""
    if size <= 4096:
        return 512
    return max(1, min(32, (64 << 20) // max(size, 1)))


def main():
    torch.set_num_threads(1)
    out, sizes = sys.argv[1], [int(b) for b in sys.argv[2:]]
    dist.init_process_group("gloo", init_method="env://")
    results = {}
    for size in sizes:
        t = torch.ones(size // 4, dtype=torch.float32)
        dist.all_reduce(t)
        times, cpus = [], []
        ops = ops_per_rep(size)
        for _ in range(REPS):
            dist.barrier()
            c0, t0 = cpu_s(), time.perf_counter()
            for _ in range(ops):
                dist.all_reduce(t)
            dt = torch.tensor([(time.perf_counter() - t0) / ops], dtype=torch.float64)
            dc = torch.tensor([(cpu_s() - c0) / ops], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            dist.all_reduce(dc, op=dist.ReduceOp.SUM)
            times.append(dt.item())
            cpus.append(dc.item())
        results[str(size)] = {"seconds": statistics.median(times), "cpu_s": statistics.median(cpus)}
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
