#!/usr/bin/env python3
"""muster.torch against torch's own DistributedDataParallel / gloo, side by side.

Run by bench/torch/run.sh as `mpirun -np 2 python3 torch_bench.py OUT.json`
(one thread per rank). The stacks live in the same two processes: muster.torch
(init from mpirun's environment), torch.distributed on gloo (TCP on
localhost) and a torch.distributed group on the "muster" backend
(muster.torch.distributed, formed over gloo's store). Every measurement
alternates between them, rep by rep, so a slow stretch of the shared machine
hits all alike; figures are medians.

  models.<name>   one training step (forward, backward, gradient averaging,
                  SGD update) of the same model on the same per-rank batch:
                  muster.torch.DistributedOptimizer vs DistributedDataParallel
                  on gloo vs DistributedDataParallel on the muster backend,
                  with DDP's default buckets and with
                  gradient_as_bucket_view=True (the gradients are views of
                  the buckets: DDP copies no gradient into a bucket and back)
  allreduce.<b>   in-place float32 sum of b bytes: hvd.allreduce_ vs
                  torch.distributed.all_reduce on gloo and on muster
                  (algbw = bytes / time)
  p2p.<b>         point to point between the two ranks: b bytes sent by
                  dist.send and taken by dist.recv, there and back (rank 0
                  sends, rank 1 receives and sends the same bytes back), on
                  gloo and on the muster backend; one-way time = round trip / 2
                  (BENCH_TORCH_ONLY=p2p runs only these, into torch_p2p.json)
  overhead        hvd.allreduce_ at 64 MB vs the C++ runtime's own ring
                  allreduce called directly on the same torch tensor (what
                  the Python layers add), and on a numpy array
                  (numpy asks for transparent huge pages, torch 1.13 does not)
"""
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import muster.runtime as rt
import muster.torch as hvd
import muster.torch.distributed  # noqa: F401 - registers the "muster" backend

torch.set_num_threads(1)
HERE = os.path.dirname(os.path.abspath(__file__))
MB = 1 << 20


def lenet():
    """The example CNN (examples/pytorch/train.py's LeNet, Fashion-MNIST 28x28)."""
    try:
        sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))
        from train import LeNet  # noqa: PLC0415
        return LeNet()
    except Exception:  # noqa: BLE001 - the example may be absent; the same network inline
        class LeNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
                self.conv2 = nn.Conv2d(6, 16, 5)
                self.fc1 = nn.Linear(400, 120)
                self.fc2 = nn.Linear(120, 84)
                self.fc3 = nn.Linear(84, 10)

            def forward(self, x):
                x = F.max_pool2d(F.relu(self.conv1(x)), 2)
                x = F.max_pool2d(F.relu(self.conv2(x)), 2)
                return self.fc3(F.relu(self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))))
        return LeNet()


def mlp25m():
    """25.2 M parameters (ResNet-50 has 25.6 M): 1024-4096-4096-1024-10."""
    return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, 1024), nn.ReLU(), nn.Linear(1024, 10))


MODELS = {
    # name: (constructor, per-rank batch shape, timed steps)
    "cnn": (lenet, (64, 1, 28, 28), 30),
    "mlp25m": (mlp25m, (32, 1024), 12),
    # The same 100 MB of gradients on a quarter of the compute: closer to the
    # compute/communication ratio a GPU gives this model, where the averaging
    # is what decides the step time.
    "mlp25m_b8": (mlp25m, (8, 1024), 20),
}


MUSTER_PG = None  # the torch.distributed group on the "muster" backend (main())


def timed(f):
    dist.barrier()
    hvd.barrier()
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def slowest(t):
    """The slowest rank's time (a step is as slow as its slowest rank)."""
    return hvd.allreduce(torch.tensor([t], dtype=torch.float64), op=hvd.Max).item()


def bench_model(name):
    make, shape, steps = MODELS[name]
    torch.manual_seed(0)
    ref = make()
    x = torch.randn(*shape)
    y = torch.randint(0, 10, (shape[0],))

    m_model = make()
    m_model.load_state_dict(ref.state_dict())
    m_opt = hvd.DistributedOptimizer(torch.optim.SGD(m_model.parameters(), lr=0.01, momentum=0.9),
                                      named_parameters=m_model.named_parameters())
    hvd.broadcast_parameters(m_model.state_dict(), root_rank=0)

    d_model = make()
    d_model.load_state_dict(ref.state_dict())
    ddp = nn.parallel.DistributedDataParallel(d_model)
    d_opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)

    # The same DDP, on the muster backend.
    dm_model = make()
    dm_model.load_state_dict(ref.state_dict())
    ddp_m = nn.parallel.DistributedDataParallel(dm_model, process_group=MUSTER_PG)
    dm_opt = torch.optim.SGD(ddp_m.parameters(), lr=0.01, momentum=0.9)

    # The same on the muster backend with gradient_as_bucket_view=True: DDP's
    # default copies every gradient into its bucket and back each step (two
    # passes over all gradient bytes that muster.torch, whose gradients live in
    # the runtime's buffers, does not make); this shows what they cost.
    dv_model = make()
    dv_model.load_state_dict(ref.state_dict())
    ddp_v = nn.parallel.DistributedDataParallel(dv_model, process_group=MUSTER_PG, gradient_as_bucket_view=True)
    dv_opt = torch.optim.SGD(ddp_v.parameters(), lr=0.01, momentum=0.9)

    # The floor: the same step with no gradient averaging at all, both ranks
    # computing at once as in the others. No library's step can be faster, so
    # ddp_step / local_step is the most any allreduce could gain over DDP here.
    l_model = make()
    l_model.load_state_dict(ref.state_dict())
    l_opt = torch.optim.SGD(l_model.parameters(), lr=0.01, momentum=0.9)

    def muster_step():
        m_opt.zero_grad()
        F.cross_entropy(m_model(x), y).backward()
        m_opt.step()

    def ddp_step():
        d_opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        d_opt.step()

    def ddp_muster_step():
        dm_opt.zero_grad()
        F.cross_entropy(ddp_m(x), y).backward()
        dm_opt.step()

    def ddp_view_step():
        dv_opt.zero_grad()
        F.cross_entropy(ddp_v(x), y).backward()
        dv_opt.step()

    def local_step():
        l_opt.zero_grad()
        F.cross_entropy(l_model(x), y).backward()
        l_opt.step()

    for _ in range(3):  # warm-up: allocation, first buckets
        muster_step()
        ddp_step()
        ddp_muster_step()
        ddp_view_step()
        local_step()
    mt, dt, dmt, dvt, lt = [], [], [], [], []
    for _ in range(steps):
        mt.append(slowest(timed(muster_step)))
        dt.append(slowest(timed(ddp_step)))
        dmt.append(slowest(timed(ddp_muster_step)))
        dvt.append(slowest(timed(ddp_view_step)))
        lt.append(slowest(timed(local_step)))
    # Same updates on the same data: every stack must have trained alike.
    drift = max((a - b).abs().max().item() for a, b in zip(m_model.parameters(), d_model.parameters()))
    drift_dm = max((a - b).abs().max().item() for a, b in zip(dm_model.parameters(), d_model.parameters()))
    drift_dv = max((a - b).abs().max().item() for a, b in zip(dv_model.parameters(), d_model.parameters()))
    m_s, d_s, l_s = statistics.median(mt), statistics.median(dt), statistics.median(lt)
    dm_s, dv_s = statistics.median(dmt), statistics.median(dvt)
    # The same comparisons rep by rep (the stacks of one rep ran back to back,
    # so a slow stretch of the shared machine hits them alike), then the median.
    per_rep = {"ddp_muster_vs_gloo": statistics.median(d / dm for d, dm in zip(dt, dmt)),
               "ddp_muster_over_muster": statistics.median(dm / m - 1.0 for dm, m in zip(dmt, mt)),
               "ddp_muster_view_over_muster": statistics.median(dv / m - 1.0 for dv, m in zip(dvt, mt))}
    images = shape[0] * hvd.size()
    return {"muster_step_s": m_s, "ddp_step_s": d_s, "speedup_vs_ddp": d_s / m_s,
            "local_step_s": l_s, "speedup_bound": d_s / l_s, "muster_over_local": m_s / l_s - 1.0,
            "muster_images_per_s": images / m_s, "ddp_images_per_s": images / d_s,
            "parameters": sum(p.numel() for p in ref.parameters()), "batch_per_rank": shape[0],
            "ddp_muster_step_s": dm_s, "ddp_muster_vs_gloo": d_s / dm_s, "ddp_muster_over_muster": dm_s / m_s - 1.0,
            "ddp_muster_images_per_s": images / dm_s, "ddp_muster_max_param_difference": drift_dm,
            "ddp_muster_view_step_s": dv_s, "ddp_muster_view_over_muster": dv_s / m_s - 1.0,
            "ddp_muster_view_max_param_difference": drift_dv, "per_rep_median": per_rep,
            "steps": steps, "max_param_difference": drift, "fusion_buckets": m_opt._native.bucket_count,
            "gradients_direct": bool(m_opt._native.gradients_direct)}


def bench_allreduce(nbytes, reps):
    n = nbytes // 4
    a = torch.ones(n)
    b = torch.ones(n)
    arr = np.ones(n, dtype=np.float32)
    comm = rt.communicator()
    c = torch.ones(n)
    times = {"muster": [], "gloo": [], "muster_pg": [], "runtime": [], "runtime_numpy": []}
    runs = {
        "muster": lambda: hvd.allreduce_(a, op=hvd.Sum),
        "gloo": lambda: dist.all_reduce(b),
        "muster_pg": lambda: dist.all_reduce(c, group=MUSTER_PG),
        # The runtime's own allreduce on the same tensor, a: what the Python
        # layers add. (On a second tensor allocated the same way the figure
        # moved by +-5% with where its pages landed, more than the layers add.)
        "runtime": lambda: comm.allreduce_async(a.data_ptr(), n, "float32", "sum").wait(),
        # The same on numpy memory, which numpy backs with transparent huge pages (torch 1.13 does not).
        "runtime_numpy": lambda: comm.allreduce_async(arr.ctypes.data, n, "float32", "sum").wait(),
    }
    move = None
    names = list(runs)
    for i in range(reps + 2):
        # Each rep starts with another variant: the first op after the fills
        # below meets the dirty lines they left (4 x the size, written back
        # while it runs), and a fixed order gave that to hvd.allreduce_ every
        # time.
        for name in names[i % len(names):] + names[:i % len(names)]:
            run = runs[name]
            t = slowest(timed(run))
            # The first rep warms caches and the ring's slots. On the second
            # the muster group moves c's storage into shared memory and the
            # ranks map each other's (distributed_shared.py, SharedStorages): a
            # one-time cost, reported on its own.
            if i == 1 and name == "muster_pg":
                move = t
            if i >= 2:
                times[name].append(t)
        for t in (a, b, c):
            t.fill_(1.0)
        arr.fill(1.0)
    med = {k: statistics.median(v) for k, v in times.items()}
    # What the Python layers add, rep by rep: hvd.allreduce_ and the runtime's
    # own call on the same tensor run in every rep, so their ratio within a
    # rep leaves out the load that moves both (a ratio of the two medians
    # mixes reps of different load).
    paired = statistics.median(m / r for m, r in zip(times["muster"], times["runtime"]))
    return {"muster_s": med["muster"], "gloo_s": med["gloo"], "runtime_s": med["runtime"],
            "extension_over_runtime_paired": paired - 1.0,
            "runtime_numpy_s": med["runtime_numpy"], "muster_algbw_gbs": nbytes / med["muster"] / 1e9,
            "muster_pg_s": med["muster_pg"], "muster_pg_algbw_gbs": nbytes / med["muster_pg"] / 1e9,
            "muster_pg_second_op_s": move, "muster_pg_storage_shared": c.is_shared(),
            "muster_pg_vs_gloo": med["gloo"] / med["muster_pg"],
            "gloo_algbw_gbs": nbytes / med["gloo"] / 1e9, "speedup_vs_gloo": med["gloo"] / med["muster"],
            "reps": reps}


def bench_p2p(nbytes, reps):
    n = nbytes // 4
    bufs = {"gloo": torch.ones(n), "muster": torch.ones(n)}
    groups = {"gloo": None, "muster": MUSTER_PG}
    times = {k: [] for k in groups}
    names = list(groups)

    def round_trip(name):
        t, g = bufs[name], groups[name]
        if hvd.rank() == 0:
            dist.send(t, 1, group=g)
            dist.recv(t, 1, group=g)
        else:
            dist.recv(t, 0, group=g)
            dist.send(t, 0, group=g)
    for i in range(reps + 2):
        for name in names[i % 2:] + names[:i % 2]:  # alternate which goes first
            t = slowest(timed(lambda: round_trip(name))) / 2
            if i >= 2:
                times[name].append(t)
    for name, t in bufs.items():  # the bytes came back unchanged
        assert torch.equal(t, torch.ones(n)), name
    med = {k: statistics.median(v) for k, v in times.items()}
    paired = statistics.median(g / m for g, m in zip(times["gloo"], times["muster"]))
    return {"muster_s": med["muster"], "gloo_s": med["gloo"], "muster_gbs": nbytes / med["muster"] / 1e9,
            "gloo_gbs": nbytes / med["gloo"] / 1e9, "speedup_vs_gloo": med["gloo"] / med["muster"],
            "speedup_vs_gloo_paired": paired, "reps": reps}


def main():
    global MUSTER_PG
    out_path = sys.argv[1]
    hvd.init()
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % os.environ.get("BENCH_TORCH_PORT", "29517"),
                            rank=hvd.rank(), world_size=hvd.size())
    MUSTER_PG = dist.new_group(backend="muster")
    from muster.torch import settings
    result = {"ranks": hvd.size(), "threads_per_rank": torch.get_num_threads(), "torch": torch.__version__,
              "models": {}, "allreduce": {}, "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
              "thp": {"enabled": settings._thp_mode("enabled"), "shmem_enabled": settings._thp_mode("shmem_enabled")}}
    only = os.environ.get("BENCH_TORCH_ONLY", "")  # "models", "allreduce" or "p2p": a part only
    if only == "p2p":
        result["p2p"] = {}
        for nbytes, reps in ((4 << 10, 200), (1 * MB, 50), (64 * MB, 15)):
            result["p2p"][str(nbytes)] = bench_p2p(nbytes, reps)
            if hvd.rank() == 0:
                print("send/recv %8d B: %s" % (nbytes, result["p2p"][str(nbytes)]), flush=True)
        dist.destroy_process_group()
        if hvd.rank() == 0:
            with open(out_path, "w") as f:
                json.dump(result, f, indent=2, sort_keys=True)
        return
    for nbytes, reps in ((1 * MB, 21), (16 * MB, 11), (64 * MB, 15)) if only != "models" else ():
        result["allreduce"][str(nbytes)] = bench_allreduce(nbytes, reps)
        if hvd.rank() == 0:
            print("allreduce %3d MB: %s" % (nbytes // MB, result["allreduce"][str(nbytes)]), flush=True)
    for name in MODELS if only != "allreduce" else ():
        result["models"][name] = bench_model(name)
        if hvd.rank() == 0:
            print("model %s: %s" % (name, result["models"][name]), flush=True)
    dist.destroy_process_group()
    if only:
        # A part only (run.sh's huge-pages pass: the models): written as it is.
        if hvd.rank() == 0:
            print(json.dumps(result, indent=1))
            if only == "models":
                with open(out_path, "w") as f:
                    json.dump(result, f, indent=2, sort_keys=True)
        return
    r64 = result["allreduce"][str(64 * MB)]
    result["overhead"] = {"bytes": 64 * MB, "extension_s": r64["muster_s"], "runtime_s": r64["runtime_s"],
                          "runtime_numpy_s": r64["runtime_numpy_s"],
                          "extension_overhead": r64["extension_over_runtime_paired"],
                          "extension_overhead_of_medians": r64["muster_s"] / r64["runtime_s"] - 1.0}
    if hvd.rank() == 0:
        with open(out_path, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
