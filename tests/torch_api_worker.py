# Every call of muster.torch's Horovod API, checked on every rank. Run under
# `mpirun -np N` (N = 1, 2, 3; tests/torch.cmake); any failed check raises,
# the rank exits non-zero and mpirun fails the test. Values are chosen so
# each rank knows the exact expected result.
import os
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import muster.torch as hvd
from muster.runtime_errors import InvalidArgument, MismatchError

torch.set_num_threads(1)
hvd.init()
r, n = hvd.rank(), hvd.size()
tests = []


def check(cond, what):
    if not cond:
        raise AssertionError("rank %d/%d: %s" % (r, n, what))


def close(a, b, tol=1e-5):
    return torch.allclose(a.double(), b.double(), rtol=tol, atol=tol)


def test(f):
    tests.append(f)
    return f


@test
def world():
    check(hvd.is_initialized(), "is_initialized")
    check(r == int(os.environ.get("OMPI_COMM_WORLD_RANK", 0)), "rank from mpirun")
    check(n == int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1)), "size from mpirun")
    check(hvd.local_rank() == r and hvd.local_size() == n, "one host: local == world")
    check(hvd.cross_rank() == 0 and hvd.cross_size() == 1, "one host: cross world of one")
    check(hvd.is_homogeneous() and hvd.mpi_threads_supported(), "homogeneous")


@test
def allreduce_ops():
    total = n * (n - 1) / 2
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.float16, torch.bfloat16):
        x = torch.full((3, 5), r, dtype=dtype)
        y = hvd.allreduce(x, op=hvd.Sum)
        check(y.dtype == dtype and y.shape == x.shape, "allreduce keeps dtype and shape")
        check(close(y, torch.full((3, 5), total)), "sum of %s" % dtype)
        check(close(x, torch.full((3, 5), r)), "allreduce leaves its input alone")
    x = torch.arange(6, dtype=torch.float32) + r
    check(close(hvd.allreduce(x), torch.arange(6.0) + (n - 1) / 2), "default op is Average")
    check(close(hvd.allreduce(x, average=False), n * torch.arange(6.0) + total), "average=False is Sum")
    check(close(hvd.allreduce(x, op=hvd.Min), torch.arange(6.0)), "Min")
    check(close(hvd.allreduce(x, op=hvd.Max), torch.arange(6.0) + n - 1), "Max")
    p = torch.tensor([float(r + 1), 2.0])
    check(close(hvd.allreduce(p, op=hvd.Product), torch.tensor([float(torch.arange(1, n + 1).prod()), 2.0 ** n])),
          "Product")
    u = torch.full((4,), 1, dtype=torch.uint8)
    check(torch.equal(hvd.allreduce(u, op=hvd.Sum), torch.full((4,), n, dtype=torch.uint8)), "uint8 sum")
    s = hvd.allreduce(torch.ones(4), op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    check(close(s, torch.full((4,), float(n))), "pre/postscale")
    nc = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()  # not contiguous
    check(close(hvd.allreduce(nc, op=hvd.Sum), n * nc), "non-contiguous input")
    if n & (n - 1) == 0:  # Adasum: a power-of-two number of ranks, as in Horovod
        a = hvd.allreduce(torch.full((4,), 2.0), op=hvd.Adasum)
        check(close(a, torch.full((4,), 2.0)), "Adasum of equal vectors is the vector (%s)" % a)
    else:
        try:
            hvd.allreduce(x, op=hvd.Adasum)
            check(False, "Adasum must raise on %d ranks" % n)
        except NotImplementedError as e:
            check("Adasum" in str(e) and "power-of-two" in str(e), "Adasum error names it: %s" % e)
    z = torch.ones(0)
    check(hvd.allreduce(z).numel() == 0, "empty tensor")


@test
def allreduce_in_place_and_async():
    x = torch.full((1000,), float(r))
    y = hvd.allreduce_(x, op=hvd.Sum)
    check(y is x and close(x, torch.full((1000,), n * (n - 1) / 2)), "allreduce_ in place")
    tensors = [torch.full((100 * (i + 1),), float(r + i)) for i in range(4)]
    handles = [hvd.allreduce_async(t, op=hvd.Max) for t in tensors]
    outs = [hvd.synchronize(h) for h in handles]
    for i, o in enumerate(outs):
        check(close(o, torch.full((100 * (i + 1),), float(n - 1 + i))), "allreduce_async result %d" % i)
    h = hvd.allreduce_async_(tensors[0], op=hvd.Sum)
    while not hvd.poll(h):
        pass
    check(hvd.poll(h), "poll stays true once done")
    check(hvd.synchronize(h) is tensors[0], "allreduce_async_ returns the tensor")
    try:
        hvd.synchronize(h)
        check(False, "a handle synchronizes once")
    except ValueError:
        pass
    g = hvd.grouped_allreduce([torch.ones(3), torch.ones(2) * r], op=hvd.Sum)
    check(close(g[0], torch.full((3,), float(n))) and close(g[1], torch.full((2,), n * (n - 1) / 2)), "grouped")


@test
def allreduce_autograd():
    x = torch.full((3,), float(r + 1), requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Sum)
    (y * y).sum().backward()
    # d/dx_r of sum_j (sum_k x_k)^2 over ranks = allreduce-sum of 2*y -> 2*y*n
    check(close(x.grad, 2 * y.detach() * n), "allreduce gradient")


@test
def fp16_compression_error_bound():
    g = torch.Generator().manual_seed(3 + r)
    x = torch.randn(10000, generator=g)
    exact = hvd.allreduce(x.double(), op=hvd.Average)
    approx = hvd.allreduce(x, compression=hvd.Compression.fp16)
    check(approx.dtype == torch.float32, "fp16 decompresses to float32")
    err = (approx.double() - exact).abs().max().item()
    # float16 keeps 11 significant bits: per value |e| <= 2^-11 |v|, plus one
    # rounding of the reduced value; |v| < 6 here.
    check(err <= 6 * 2.0 ** -10 and err > 0, "fp16 error %g out of bound" % err)


@test
def allgather_varying_first_dim():
    x = torch.full((r + 1, 2), float(r))
    y = hvd.allgather(x)
    want = torch.cat([torch.full((k + 1, 2), float(k)) for k in range(n)])
    check(torch.equal(y, want), "allgather concatenates in rank order")
    i = hvd.synchronize(hvd.allgather_async(torch.tensor([r], dtype=torch.int64)))
    check(torch.equal(i, torch.arange(n)), "allgather_async int64")
    b = hvd.allgather(torch.tensor([r % 2 == 0]))
    check(b.dtype == torch.bool and b.tolist() == [k % 2 == 0 for k in range(n)], "allgather bool")
    if n > 1:
        try:
            hvd.allgather(torch.zeros(1, 2 + r))
            check(False, "allgather with different trailing shapes must raise")
        except MismatchError as e:
            check("rank 1" in str(e), "mismatch names the rank: %s" % e)


@test
def broadcasts():
    root = n - 1
    x = torch.full((5,), float(r))
    y = hvd.broadcast(x, root_rank=root)
    check(close(y, torch.full((5,), float(root))) and close(x, torch.full((5,), float(r))), "broadcast")
    hvd.broadcast_(x, root_rank=root)
    check(close(x, torch.full((5,), float(root))), "broadcast_")
    nc = (torch.arange(6, dtype=torch.float64).reshape(2, 3) * (r + 1)).t()
    hvd.broadcast_(nc, root_rank=0)
    check(close(nc, torch.arange(6, dtype=torch.float64).reshape(2, 3).t()), "broadcast_ non-contiguous")
    odd = torch.tensor([r == 0, True, False])
    hvd.broadcast_(odd, root_rank=0)
    check(odd.tolist() == [True, True, False], "broadcast_ of an odd number of bytes")
    h = hvd.broadcast_async(torch.full((7,), float(r)), root_rank=0)
    check(close(hvd.synchronize(h), torch.zeros(7)), "broadcast_async")
    try:
        hvd.broadcast(x, root_rank=n)
        check(False, "a root outside the world must raise")
    except InvalidArgument:
        pass
    obj = hvd.broadcast_object({"epoch": r, "name": "rank%d" % r}, root_rank=root)
    check(obj == {"epoch": root, "name": "rank%d" % root}, "broadcast_object")
    check(hvd.allgather_object(("r", r)) == [("r", k) for k in range(n)], "allgather_object")


@test
def alltoall_and_barrier():
    splits = [k + 1 for k in range(n)]  # rank r sends k+1 rows to rank k
    x = torch.cat([torch.full((k + 1,), float(100 * r + k)) for k in range(n)])
    out, received = hvd.alltoall(x, splits=splits)
    want = torch.cat([torch.full((r + 1,), float(100 * k + r)) for k in range(n)])
    check(torch.equal(out, want) and received.tolist() == [r + 1] * n, "alltoall")
    hvd.barrier()
    last = hvd.join()
    check(0 <= last < n, "join returns a rank")


def make_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))


@test
def broadcast_parameters_and_optimizer_state():
    model = make_model(100 + r)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    ref = make_model(100)
    for (_, a), (_, b) in zip(model.state_dict().items(), ref.state_dict().items()):
        check(torch.equal(a, b), "broadcast_parameters(state_dict)")
    model2 = make_model(200 + r)
    hvd.broadcast_parameters(model2.named_parameters(), root_rank=0)
    for a, b in zip(model2.parameters(), make_model(200).parameters()):
        check(torch.equal(a, b), "broadcast_parameters(named_parameters)")
    for cls, kw in ((torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}), (torch.optim.Adam, {"lr": 0.01})):
        m = make_model(300)
        opt = cls(m.parameters(), **kw)
        if r == 0:  # only the root has stepped: the others have no state yet
            for _ in range(2):
                opt.zero_grad()
                m(torch.ones(2, 8)).sum().backward()
                opt.step()
            opt.param_groups[0]["lr"] = 0.5
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        check(opt.param_groups[0]["lr"] == 0.5, "hyper-parameters from the root (%s)" % cls.__name__)
        key = "momentum_buffer" if cls is torch.optim.SGD else "exp_avg"
        buf = opt.state[m[0].weight][key]
        every = hvd.allgather(buf.unsqueeze(0))
        check(all(torch.equal(every[0], every[k]) for k in range(n)) and every[0].abs().sum() > 0,
              "%s state equal on every rank" % key)


@test
def gradient_equivalence():
    """n ranks averaging their shards' gradients == one process on the whole batch."""
    g = torch.Generator().manual_seed(11)
    xs, ys = torch.randn(6 * n, 8, generator=g), torch.randint(0, 4, (6 * n,), generator=g)
    model = make_model(1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    ref = make_model(1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        opt.zero_grad()
        loss = F.cross_entropy(model(xs[r::n]), ys[r::n])
        loss.backward()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            if step == 1:  # a metric between backward() and step(): the step in flight finishes first
                hvd.allreduce(loss.detach())
            opt.step()
        ref_opt.zero_grad()
        F.cross_entropy(ref(torch.cat([xs[k::n] for k in range(n)])), torch.cat([ys[k::n] for k in range(n)])
                        ).backward()
        ref_opt.step()
        for (name, a), b in zip(model.named_parameters(), ref.parameters()):
            check(close(a.grad, b.grad, 1e-5), "step %d: averaged gradient of %s == whole-batch gradient" % (step, name))
            check(close(a, b, 1e-5), "step %d: parameter %s" % (step, name))


@test
def gradients_in_shared_or_private_memory():
    """Either home of the gradients (MUSTER_SHARED_GRADIENTS) averages alike: the runtime's shared memory
    (the direct allreduce), or each gradient's own torch tensor (a 2 MB one reduced in place in a bucket of
    its own, the small ones fused), also after zero_grad(set_to_none=True) replaced every .grad."""
    g = torch.Generator().manual_seed(12)
    xs, ys = torch.randn(4 * n, 512, generator=g), torch.randint(0, 4, (4 * n,), generator=g)

    def model_of():
        torch.manual_seed(7)
        return nn.Sequential(nn.Linear(512, 1024), nn.Tanh(), nn.Linear(1024, 4))
    ref = model_of()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    runs = {}
    for setting in ("1", "0"):
        os.environ["MUSTER_SHARED_GRADIENTS"] = setting
        try:
            model = model_of()
            opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                           named_parameters=model.named_parameters())
            # No gradient before the first backward, wherever they will live
            # (autograd decides dense or sparse; a step before it moves nothing).
            check(all(p.grad is None for p in model.parameters()),
                  "MUSTER_SHARED_GRADIENTS=%s: no .grad before the first backward" % setting)
            for step in range(3):
                opt.zero_grad(set_to_none=step == 2)
                F.cross_entropy(model(xs[r::n]), ys[r::n]).backward()
                opt.step()
            if n > 1:
                check(bool(opt._native.gradients_direct) == (setting == "1"),
                      "MUSTER_SHARED_GRADIENTS=%s: gradients_direct %s" % (setting, opt._native.gradients_direct))
            runs[setting] = model
        finally:
            del os.environ["MUSTER_SHARED_GRADIENTS"]
    for step in range(3):
        ref_opt.zero_grad()
        F.cross_entropy(ref(torch.cat([xs[k::n] for k in range(n)])), torch.cat([ys[k::n] for k in range(n)])
                        ).backward()
        ref_opt.step()
    for setting, model in runs.items():
        for (name, a), b in zip(model.named_parameters(), ref.parameters()):
            check(close(a.grad, b.grad, 1e-5), "MUSTER_SHARED_GRADIENTS=%s: averaged gradient of %s" % (setting, name))
            check(close(a, b, 1e-5), "MUSTER_SHARED_GRADIENTS=%s: parameter %s" % (setting, name))


@test
def optimizer_options():
    g = torch.Generator().manual_seed(5)
    xs = torch.randn(4 * n, 8, generator=g)
    model = make_model(2)
    extra = nn.Linear(3, 3)  # never used in forward: its gradient is averaged zeros
    params = list(model.named_parameters()) + [("extra." + k, v) for k, v in extra.named_parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in params], lr=0.1), named_parameters=params,
                                   backward_passes_per_step=2, op=hvd.Sum)
    opt.zero_grad()
    for half in range(2):
        model(xs[r::n][2 * half:2 * half + 2]).sum().backward()
    opt.synchronize()
    ref = make_model(2)
    for k in range(n):
        ref(xs[k::n][:4]).sum().backward()  # Sum over ranks of two local passes each
    for (name, a), b in zip(model.named_parameters(), ref.parameters()):
        check(close(a.grad, b.grad, 1e-4), "backward_passes_per_step=2, op=Sum: %s" % name)
    check(torch.count_nonzero(extra.weight.grad) == 0, "unused parameter gets a zero gradient")
    before = [p.detach().clone() for p in model.parameters()]
    with opt.skip_synchronize():
        opt.step()
    for b, p in zip(before, model.parameters()):
        check(close(p, b - 0.1 * p.grad), "skip_synchronize step applies the reduced gradient")
    # zero_grad(set_to_none=True): autograd makes a new .grad, the hook copies it back into the runtime's view
    opt.zero_grad(set_to_none=True)
    model(xs[r::n]).sum().backward()
    model(xs[r::n]).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.synchronize()
        try:
            opt.step()
            check(False, "step() after synchronize() without skip_synchronize must warn")
        except UserWarning:
            pass
    fp = make_model(3)
    fopt = hvd.DistributedOptimizer(torch.optim.SGD(fp.parameters(), lr=0.1), compression=hvd.Compression.fp16)
    fopt.zero_grad()
    fp(xs[r::n]).sum().backward()
    fopt.synchronize()
    ref = make_model(3)
    for k in range(n):
        ref(xs[k::n]).sum().backward()
    for a, b in zip(fp.parameters(), ref.parameters()):
        check(close(a.grad, b.grad / n, 2e-3), "fp16 compression within float16 precision")


@test
def horovod_environment():
    """HOROVOD_FUSION_THRESHOLD sizes the buckets (0: one tensor per bucket, as in Horovod)."""
    counts = {}
    for value in ("0", str(64 << 20)):
        model = make_model(4)
        os.environ["HOROVOD_FUSION_THRESHOLD"] = value
        try:
            opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
        finally:
            del os.environ["HOROVOD_FUSION_THRESHOLD"]
        model(torch.ones(2, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
        counts[value] = opt._native.bucket_count
    check(counts["0"] == 4 and counts[str(64 << 20)] == 1, "buckets per threshold: %s" % counts)


@test
def numpy_layer():
    """muster.runtime, the framework-neutral layer under muster.torch."""
    import numpy as np
    import muster.runtime as rt
    x = np.full(7, r, dtype=np.float64)
    check(rt.allreduce(x, op="sum") is x and (x == n * (n - 1) / 2).all(), "rt.allreduce in place")
    h = rt.allreduce_async(np.full(3, r + 1, dtype=np.int32), op="max")
    check((h.wait() == n).all() and h.done(), "rt.allreduce_async")
    g = rt.allgather(np.full((r + 1, 2), r, dtype=np.int64))
    check(g.shape == (n * (n + 1) // 2, 2) and g[-1, 0] == n - 1, "rt.allgather varying first dim")
    odd = np.array([r, 1, 2], dtype=np.uint8)
    check(rt.broadcast(odd, n - 1).tolist() == [n - 1, 1, 2], "rt.broadcast of 3 bytes")
    check(rt.allgather_bytes(b"x" * r) == [b"x" * k for k in range(n)], "rt.allgather_bytes")
    for bad in (lambda: rt.allreduce(np.zeros(4, dtype=np.int8)), lambda: rt.allreduce(np.zeros((4, 4))[:, 0])):
        try:
            bad()
            check(False, "an int8 or strided array must be refused")
        except InvalidArgument:
            pass


@test
def shutdown_and_again():
    hvd.shutdown()
    check(not hvd.is_initialized(), "shut down")
    try:
        hvd.rank()
        check(False, "rank() after shutdown must raise")
    except ValueError:
        pass
    hvd.init()
    check(hvd.size() == n and hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == n, "init again")


@test
def gradients_survive_a_shutdown():
    # The averaged gradients live in the runtime's memory; a shutdown keeps
    # them (no copy: the closed optimizer's memory stays with the views), and
    # the next world's optimizer takes them over.
    model = make_model(5)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x = torch.full((4, 8), float(r + 1))
    model(x).sum().backward()
    opt.synchronize()
    averaged = [p.grad.clone() for p in model.parameters()]
    where = [p.grad.data_ptr() for p in model.parameters()]
    hvd.shutdown()
    for p, g in zip(model.parameters(), averaged):
        check(p.grad is not None and torch.equal(p.grad, g), "a gradient kept its value across the shutdown")
    check([p.grad.data_ptr() for p in model.parameters()] == where, "kept in place, not copied")
    hvd.init()
    with opt.skip_synchronize():
        opt.step()
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    for p, g in zip(model.parameters(), averaged):
        check(p.grad is not None and p.grad.shape == g.shape, "the next world's step")


only = sys.argv[1:]
ran = 0
for t in tests:
    if only and t.__name__ not in only:
        continue
    t()
    ran += 1
    hvd.barrier()
    if r == 0:
        print("ok", t.__name__, flush=True)
print("rank %d: all %d checks passed" % (r, ran), flush=True)
