"""One rank of tests/torch_distributed_test.py: the "muster" torch.distributed backend.

Started with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT); the default group is "muster", and a gloo group over the
same ranks is the reference. Modes (argv[1]):
  collectives  every collective on both groups, results compared (exact for
               integers, float tolerance for floats)
  ddp          DistributedDataParallel on muster and on gloo from the same
               initial model on the same batches: the parameters agree, and
               equal those of one process trained on the global batch
  shared       tensors allreduced again from the same storage (a script's
               buffer, DDP's buckets) move into shared memory and the peers
               map each other's files (the direct path); temporaries stay
               private; results agree with gloo's, and once the storages
               die the peers' files are unmapped
  kill         rank VICTIM dies with SIGKILL; every survivor's next
               collective raises an error naming it (printed as
               "raised: <type>: <message>")
Prints "rank R ok" at the end.
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import muster.torch.distributed as mdist  # registers "muster"

torch.set_num_threads(1)
RANK, SIZE = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def close(a, b, what):
    if a.dtype in (torch.float16, torch.bfloat16):
        # gloo adds half-precision values in half precision, one rounding per
        # rank; muster adds them in float32 and rounds once: at 3 ranks they
        # may differ by the last place of the result.
        eps = torch.finfo(a.dtype).eps
        ok = torch.allclose(a.double(), b.double(), rtol=2 * eps, atol=2 * eps)
    elif a.dtype.is_floating_point:
        ok = torch.allclose(a.double(), b.double(), rtol=1e-5, atol=1e-5)
    else:
        ok = torch.equal(a, b)
    if not ok:
        raise AssertionError("%s: muster %s != gloo %s" % (what, a.flatten()[:8].tolist(), b.flatten()[:8].tolist()))


# Dtypes gloo cannot reduce: its reference runs on a wider copy, cast back.
GLOO_WIDER = {torch.bfloat16: torch.float32, torch.int16: torch.int64, torch.bool: torch.int64}


def both(fn, make, what):
    """fn(tensor-or-tensors, group) on a fresh copy for muster and gloo; compares what make() builds."""
    ours, ref = make(), make()
    fn(ours, None)
    ours = ours if isinstance(ours, list) else [ours]
    ref = ref if isinstance(ref, list) else [ref]
    wide = [t.to(GLOO_WIDER.get(t.dtype, t.dtype)) for t in ref]
    fn(wide if len(wide) > 1 else wide[0], GLOO)
    for a, w, b in zip(ours, wide, ref):
        b = (w > 0) if b.dtype == torch.bool else w.to(b.dtype)
        if a.dtype == torch.bfloat16:
            ok = torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-2)
            if not ok:
                raise AssertionError("%s: muster %s != gloo %s" % (what, a[:8].tolist(), b[:8].tolist()))
        else:
            close(a, b, what)


def data(dtype, n=37, seed=0, rank=None):
    """Rank `rank`'s (default: this rank's) input: any rank can compute any other's, for references."""
    g = torch.Generator().manual_seed(1000 * (RANK if rank is None else rank) + seed)
    if dtype == torch.bool:
        return torch.rand(n, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.rand(n, generator=g) * 4 - 2).to(dtype)
    return torch.randint(1, 5, (n,), generator=g).to(dtype)


def collectives():
    R = dist.ReduceOp
    reduce_ops = {"SUM": R.SUM, "MIN": R.MIN, "MAX": R.MAX, "PRODUCT": R.PRODUCT}
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8,
                  torch.int8, torch.int16):
        for name, op in reduce_ops.items():
            if dtype == torch.float16 and name == "PRODUCT":
                continue  # gloo has no half-precision product
            both(lambda t, g: dist.all_reduce(t, op=op, group=g), lambda: data(dtype),
                 "all_reduce %s %s" % (name, dtype))
    for name, op in (("BAND", R.BAND), ("BOR", R.BOR), ("BXOR", R.BXOR)):
        both(lambda t, g: dist.all_reduce(t, op=op, group=g), lambda: data(torch.int64), "all_reduce " + name)
    both(lambda t, g: dist.all_reduce(t, group=g), lambda: data(torch.bool), "all_reduce bool")
    # A non-contiguous tensor and a large one (the ring, many blocks).
    ours = data(torch.float32, 60).view(20, 3)
    dist.all_reduce(ours[:, 1])  # gloo reduces the storage under a strided view, so: a contiguous reference
    ref = data(torch.float32, 60).view(20, 3)
    column = ref[:, 1].contiguous()
    dist.all_reduce(column, group=GLOO)
    ref[:, 1] = column
    close(ours, ref, "all_reduce strided")
    both(lambda t, g: dist.all_reduce(t, group=g), lambda: data(torch.float32, 3 << 20), "all_reduce 12 MB")
    # Asynchronous: several in flight, waited in reverse.
    ts = [data(torch.float32, 1000, seed=s) for s in range(4)]
    refs = [t.clone() for t in ts]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    for w in reversed(works):
        w.wait()
    for t in refs:
        dist.all_reduce(t, group=GLOO)
    for a, b in zip(ts, refs):
        close(a, b, "all_reduce async")

    for root in range(SIZE):
        both(lambda t, g: dist.broadcast(t, root, group=g), lambda: data(torch.float32, 33), "broadcast")
        both(lambda t, g: dist.broadcast(t, root, group=g), lambda: data(torch.uint8, 33), "broadcast odd bytes")

    def gather_all(ts, g):
        dist.all_gather(ts[1:], ts[0], group=g)
    both(gather_all, lambda: [data(torch.float32, 7)] + [torch.zeros(7) for _ in range(SIZE)], "all_gather")

    # gloo (torch 1.13) has no all_gather_into_tensor, reduce_scatter or list all_to_all: the
    # references are computed here from every rank's inputs (data(..., rank=r)).
    out = torch.zeros(5 * SIZE, dtype=torch.int64)
    dist.all_gather_into_tensor(out, data(torch.int64, 5))
    close(out, torch.cat([data(torch.int64, 5, rank=r) for r in range(SIZE)]), "all_gather_into_tensor")

    out = torch.zeros(6)
    dist.reduce_scatter(out, [data(torch.float32, 6, seed=s) for s in range(SIZE)])
    close(out, sum(data(torch.float32, 6, seed=RANK, rank=r) for r in range(SIZE)), "reduce_scatter")
    out = torch.zeros(4)
    scatter_tensor = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
    scatter_tensor(out, data(torch.float32, 4 * SIZE))
    close(out, sum(data(torch.float32, 4 * SIZE, rank=r)[4 * RANK:4 * RANK + 4] for r in range(SIZE)),
          "reduce_scatter_tensor")
    out = torch.zeros(2)
    dist.reduce_scatter(out, [data(torch.float32, 2, seed=s) for s in range(SIZE)], op=dist.ReduceOp.MAX)
    close(out, torch.stack([data(torch.float32, 2, seed=RANK, rank=r) for r in range(SIZE)]).max(dim=0).values,
          "reduce_scatter MAX")

    # Rank r sends rank j a tensor of 3 + j elements.
    outs = [torch.zeros(3 + RANK) for _ in range(SIZE)]
    dist.all_to_all(outs, [data(torch.float32, 3 + j, seed=j) for j in range(SIZE)])
    for r in range(SIZE):
        close(outs[r], data(torch.float32, 3 + RANK, seed=RANK, rank=r), "all_to_all from rank %d" % r)
    # all_to_all_single, uneven: rank r sends r + 1 rows (of 2) to every rank.
    in_rows = [RANK + 1] * SIZE
    out_rows = [r + 1 for r in range(SIZE)]
    out = torch.zeros(sum(out_rows), 2)
    dist.all_to_all_single(out, data(torch.float32, sum(in_rows) * 2).view(-1, 2), out_rows, in_rows)
    expect = [data(torch.float32, (r + 1) * SIZE * 2, rank=r).view(-1, 2)[(r + 1) * RANK:(r + 1) * (RANK + 1)]
              for r in range(SIZE)]
    close(out, torch.cat(expect), "all_to_all_single uneven")
    both(lambda ts, g: dist.all_to_all_single(ts[1], ts[0], group=g),  # even splits: gloo has this one
         lambda: [data(torch.int64, 4 * SIZE), torch.zeros(4 * SIZE, dtype=torch.int64)], "all_to_all_single")

    for root in range(SIZE):
        def red(t, g):
            dist.reduce(t, root, group=g)
        ours, ref = data(torch.float32), data(torch.float32)
        mine = ours.clone()
        red(ours, None)
        red(ref, GLOO)
        close(ours, ref if RANK == root else mine, "reduce root %d" % root)
        gathered = [torch.zeros(5) for _ in range(SIZE)] if RANK == root else None
        dist.gather(data(torch.float32, 5), gathered, dst=root)
        if RANK == root:
            for r, part in enumerate(gathered):
                close(part, data(torch.float32, 5, rank=r), "gather")
        out = torch.zeros(3)
        dist.scatter(out, [torch.full((3,), float(r)) for r in range(SIZE)] if RANK == root else None, src=root)
        close(out, torch.full((3,), float(RANK)), "scatter")

    objs = [None] * SIZE
    dist.all_gather_object(objs, {"rank": RANK, "text": "x" * (RANK + 1)})  # odd byte counts
    assert objs == [{"rank": r, "text": "x" * (r + 1)} for r in range(SIZE)], objs
    lst = [RANK, "from %d" % RANK]
    dist.broadcast_object_list(lst, src=SIZE - 1)
    assert lst == [SIZE - 1, "from %d" % (SIZE - 1)], lst

    # Point to point over the store: a ring of messages, twice with the same tag.
    for _ in range(2):
        right, left = (RANK + 1) % SIZE, (RANK - 1) % SIZE
        got = torch.zeros(4)
        if RANK % 2 == 0:
            dist.send(torch.full((4,), float(RANK)), right)
            dist.recv(got, left)
        else:
            dist.recv(got, left)
            dist.send(torch.full((4,), float(RANK)), right)
        close(got, torch.full((4,), float(left)), "send/recv")
    dist.barrier()


def mlp():
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 4))


def ddp():
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    init = mlp()
    models = {}
    for name, group in (("muster", None), ("gloo", GLOO)):
        m = mlp()
        m.load_state_dict(init.state_dict())
        # Small buckets, so a step is several allreduces in flight during backward.
        models[name] = DDP(m, process_group=group, bucket_cap_mb=0.005)
    single = mlp()
    single.load_state_dict(init.state_dict())
    opts = {k: torch.optim.SGD(v.parameters(), lr=0.1, momentum=0.9) for k, v in models.items()}
    single_opt = torch.optim.SGD(single.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(42)
    per_rank = 8
    for step in range(12):
        x = torch.randn(per_rank * SIZE, 20, generator=g)  # the global batch, the same on every rank
        y = torch.randint(0, 4, (per_rank * SIZE,), generator=g)
        mine = slice(RANK * per_rank, (RANK + 1) * per_rank)
        for name, model in models.items():
            opts[name].zero_grad()
            F.cross_entropy(model(x[mine]), y[mine]).backward()
            opts[name].step()
        single_opt.zero_grad()
        F.cross_entropy(single(x), y).backward()
        single_opt.step()
    for (n, a), (_, b), (_, c) in zip(models["muster"].module.named_parameters(),
                                      models["gloo"].module.named_parameters(), single.named_parameters()):
        diff_gloo = (a - b).abs().max().item()
        diff_single = (a - c).abs().max().item()
        print("rank %d %s: |muster - gloo| %.2e, |muster - one process| %.2e" % (RANK, n, diff_gloo, diff_single),
              flush=True)
        assert diff_gloo < 1e-5, "%s differs from gloo's by %g" % (n, diff_gloo)
        assert diff_single < 1e-4, "%s differs from one process's by %g" % (n, diff_single)


def peer_files_mapped(pids):
    """How many of this process's mappings are torch shared-memory files of the peers in `pids`."""
    with open("/proc/self/maps") as f:
        maps = f.read()
    return sum(maps.count("/dev/shm/torch_%d_" % p) for p in pids)


def shared():
    from torch.nn.parallel import DistributedDataParallel as DDP
    pids = torch.zeros(SIZE, dtype=torch.int64)
    dist.all_gather(list(pids.chunk(SIZE)), torch.tensor([os.getpid()]), group=GLOO)
    peers = [int(p) for r, p in enumerate(pids.tolist()) if r != RANK]
    assert peer_files_mapped(peers) == 0

    # MUSTER_SHARED_GRADIENTS=0 (the DistributedOptimizer's switch) keeps
    # everything private: the same results, nothing mapped.
    on = os.environ.get("MUSTER_SHARED_GRADIENTS") != "0"
    # A script's long-lived buffer: private the first time, shared from the
    # second. 8 MB: above the small path's limit, which is 4 MB where ranks
    # outnumber CPUs (and maps nothing).
    buf = torch.empty(1 << 21)
    for i in range(4):
        buf.copy_(data(torch.float32, n=1 << 21, seed=i))
        ref = buf.clone()
        dist.all_reduce(buf)
        dist.all_reduce(ref, group=GLOO)
        close(buf, ref, "buffer, op %d" % i)
        assert buf.is_shared() == (on and i >= 1), (i, buf.is_shared())
    # Not moved while an op of the group on it is in flight (moving frees the
    # old memory that op reads and writes): two async all_reduces in a row,
    # then a third once they are done. Rank 0 comes late, so on every other
    # rank the first op is surely still waiting for it when the second is
    # made (on rank 0 itself the first may be done by then, and the second
    # may move the storage: that is allowed, and the results must still be
    # right).
    pending = torch.ones(1 << 21)
    if RANK == 0:
        time.sleep(0.5)
    works = [dist.all_reduce(pending, async_op=True) for _ in range(2)]
    assert RANK == 0 or not pending.is_shared()
    for w in works:
        w.wait()
    assert torch.equal(pending, torch.full_like(pending, float(SIZE * SIZE))), pending[:4]
    dist.all_reduce(pending)
    assert pending.is_shared() == on
    assert torch.equal(pending, torch.full_like(pending, float(SIZE ** 3))), pending[:4]
    # A temporary each time (new storage): stays private, right all the same.
    for i in range(3):
        tmp = torch.cat([data(torch.float32, n=1 << 18, seed=i), data(torch.float32, n=1 << 18, seed=i + 9)])
        ref = tmp.clone()
        dist.all_reduce(tmp)
        dist.all_reduce(ref, group=GLOO)
        close(tmp, ref, "temporary %d" % i)
        assert not tmp.is_shared()
    dist.barrier()
    assert peer_files_mapped(peers) == (2 * (SIZE - 1) if on else 0), peer_files_mapped(peers)  # buf, pending

    # DDP with buckets of megabytes: the same parameters as on gloo.
    def model():
        return nn.Sequential(nn.Linear(512, 4096), nn.ReLU(), nn.Linear(4096, 4))  # an 8 MB weight
    torch.manual_seed(0)
    init = model()
    models = {}
    for name, group in (("muster", None), ("gloo", GLOO)):
        m = model()
        m.load_state_dict(init.state_dict())
        models[name] = DDP(m, process_group=group)
    opts = {k: torch.optim.SGD(v.parameters(), lr=0.05, momentum=0.9) for k, v in models.items()}
    g = torch.Generator().manual_seed(7)
    for step in range(6):
        x = torch.randn(8 * SIZE, 512, generator=g)
        y = torch.randint(0, 4, (8 * SIZE,), generator=g)
        mine = slice(RANK * 8, (RANK + 1) * 8)
        for name, m in models.items():
            opts[name].zero_grad()
            F.cross_entropy(m(x[mine]), y[mine]).backward()
            opts[name].step()
    for (n, a), (_, b) in zip(models["muster"].module.named_parameters(), models["gloo"].module.named_parameters()):
        diff = (a - b).abs().max().item()
        assert diff < 1e-5, "%s differs from gloo's by %g" % (n, diff)
    dist.barrier()
    with_buckets = peer_files_mapped(peers)
    print("rank %d: peers' files mapped with DDP's buckets: %d" % (RANK, with_buckets), flush=True)
    assert with_buckets == (3 * (SIZE - 1) if on else 0), with_buckets  # buf's, pending's, the 8 MB bucket's

    # The storages die: the next op drops the runtime's mappings of their files.
    del models, opts, buf, pending, works, w, m
    import gc
    gc.collect()
    dist.barrier()
    dist.all_reduce(torch.ones(1 << 18))
    dist.barrier()
    assert peer_files_mapped(peers) == 0, peer_files_mapped(peers)


def kill():
    victim = int(os.environ.get("VICTIM", SIZE - 1))
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    if RANK == victim:
        print("rank %d dies now" % RANK, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        for _ in range(1000):
            dist.all_reduce(t)
            time.sleep(0.01)
        print("rank %d: no error after the victim died" % RANK, flush=True)
        sys.exit(3)
    except Exception as err:  # noqa: BLE001 - what the survivor sees is the point
        print("raised after %.1f s: %s: %s" % (time.monotonic() - start, type(err).__name__, err), flush=True)
        assert isinstance(err, RuntimeError) and "rank %d" % victim in str(err), err
        assert isinstance(err, mdist.MusterBackendError)
    os._exit(0)  # the group is broken: skip destroy_process_group


mode = sys.argv[1]
dist.init_process_group("muster")
assert dist.get_backend() == "muster" and dist.get_world_size() == SIZE
GLOO = dist.new_group(backend="gloo")
{"collectives": collectives, "ddp": ddp, "shared": shared, "kill": kill}[mode]()
dist.barrier()
print("rank %d ok" % RANK, flush=True)
dist.destroy_process_group()
