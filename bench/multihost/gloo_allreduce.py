"""One rank of torch.distributed's gloo allreduce at the sizes given (float32, sum).

    RANK=r WORLD_SIZE=p MASTER_ADDR=a MASTER_PORT=n python3 gloo_allreduce.py OUT.json BYTES...

Rank 0 writes {"<bytes>": median seconds per op} to OUT.json; each size runs
a warm-up then REPS timed ops between barriers (the slowest rank's time).
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

REPS = int(os.environ.get("GLOO_REPS", "7"))


def main():
    torch.set_num_threads(1)
    out, sizes = sys.argv[1], [int(b) for b in sys.argv[2:]]
    dist.init_process_group("gloo", init_method="env://")
    results = {}
    for size in sizes:
        t = torch.ones(size // 4, dtype=torch.float32)
        dist.all_reduce(t)
        times = []
        for _ in range(REPS):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            times.append(dt.item())
        results[str(size)] = statistics.median(times)
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
