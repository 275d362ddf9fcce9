# Horovod's semantics in muster.torch, as Horovod's documentation states them,
# checked on every rank. Run under `mpirun -np N` (N = 2, 3; tests/torch.cmake)
# by torch_mpirun.py; a failed check raises, the rank exits non-zero and the
# test fails. Each check knows its exact expected value.
#
#   python3 torch_semantics_worker.py [check names...]
import json
import math
import os
import sys
import tempfile
import time

import torch
import torch.nn as nn

import muster
import muster.torch as hvd
from muster.runtime_errors import InvalidArgument, MismatchError

torch.set_num_threads(1)
hvd.init()
r, n = hvd.rank(), hvd.size()
checks = []


def check(cond, what):
    if not cond:
        raise AssertionError("rank %d/%d: %s" % (r, n, what))


def close(a, b, tol=1e-6):
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=tol, atol=tol)


def case(f):
    checks.append(f)
    return f


def raises(cls, f, *args, **kwargs):
    try:
        f(*args, **kwargs)
    except cls as e:
        return e
    raise AssertionError("rank %d/%d: %s did not raise %s" % (r, n, getattr(f, "__name__", f), cls.__name__))


@case
def error_classes():
    """Horovod's errors are RuntimeErrors; muster's stay MusterErrors."""
    for cls in (MismatchError, hvd.HorovodInternalError, hvd.CommError, hvd.PeerTimeoutError, InvalidArgument):
        check(issubclass(cls, RuntimeError) and issubclass(cls, muster.MusterError), "%s is a RuntimeError" % cls)
    check(issubclass(InvalidArgument, ValueError), "InvalidArgument is a ValueError")


@case
def ops_match_by_name_not_by_order():
    """A named op waits for the same name on the others; a barrier in between still passes."""
    t = torch.full((4,), float(r + 1))
    if r == 0:
        h = hvd.allreduce_async(t, name="late", op=hvd.Sum)
        check(not hvd.poll(h), "the op waits for the other ranks")
        hvd.barrier()
    else:
        hvd.barrier()
        h = hvd.allreduce_async(t, name="late", op=hvd.Sum)
    check(close(hvd.synchronize(h), torch.full((4,), n * (n + 1) / 2.0)), "matched by name")
    # Two async ops issued in opposite orders on different ranks.
    names = ["first", "second"] if r % 2 == 0 else ["second", "first"]
    hs = {nm: hvd.allreduce_async(torch.full((2,), float(len(nm))), name=nm, op=hvd.Sum) for nm in names}
    for nm, h in hs.items():
        check(close(hvd.synchronize(h), torch.full((2,), float(n * len(nm)))), "out of order: %s" % nm)


@case
def duplicate_names_in_flight_raise_value_error():
    h = hvd.allreduce_async(torch.ones(3), name="dup")
    e = raises(ValueError, hvd.allreduce_async, torch.ones(3), name="dup")
    check("dup" in str(e) and "in flight" in str(e), "the error names the op: %s" % e)
    time.sleep(0.5)  # the op is long done: its name stays in use until its result is taken
    raises(ValueError, hvd.allreduce_async, torch.ones(3), name="dup")
    hvd.synchronize(h)
    hvd.synchronize(hvd.allreduce_async(torch.ones(3), name="dup"))  # the name is free again
    h = hvd.allgather_async(torch.ones(1), name="polled")
    while not hvd.poll(h):
        time.sleep(0.001)
    hvd.synchronize(hvd.allgather_async(torch.ones(1), name="polled"))  # poll() saw it done: free again
    hvd.synchronize(h)
    # One name in two kinds is two ops (Horovod keys names by kind).
    a = hvd.allreduce_async(torch.ones(2), name="same")
    b = hvd.broadcast_async(torch.ones(2), 0, name="same")
    hvd.synchronize(a)
    hvd.synchronize(b)


@case
def mismatches_raise_on_every_rank_and_leave_the_world_usable():
    cases = [
        ("dtype", lambda: hvd.allreduce(torch.ones(3, dtype=torch.int32 if r == 1 else torch.float32))),
        ("shape", lambda: hvd.allreduce(torch.ones(3 + (r == n - 1)))),
        ("shape", lambda: hvd.allreduce(torch.ones((6, 1) if r == 0 else (3, 2)))),
        ("root_rank", lambda: hvd.broadcast(torch.ones(3), r)),
        ("shape after the first dimension", lambda: hvd.allgather(torch.ones(2, 1 + r))),
        ("op", lambda: hvd.allreduce(torch.ones(2), op=hvd.Sum if r == 0 else hvd.Max)),
        ("prescale_factor", lambda: hvd.allreduce(torch.ones(2), prescale_factor=1.0 + r)),
        ("dtype", lambda: hvd.reducescatter(torch.ones(2 * n, dtype=torch.float64 if r else torch.float32))),
        ("dtype", lambda: hvd.alltoall(torch.ones(n, dtype=torch.int64 if r else torch.float32))),
    ]
    for field, f in cases:
        e = raises(MismatchError, f)
        check(field in str(e) and "rank" in str(e), "the error says %r: %s" % (field, e))
    check(close(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(n))), "usable after mismatches")


@case
def allgather_async_is_async():
    # Rank 0 starts first; the others start 0.3 s later, so rank 0's ops cannot have finished when it
    # polls right after starting them (the others may find theirs done at once: rank 0 was waiting).
    if r != 0:
        time.sleep(0.3)
    hs = [hvd.allgather_async(torch.full((r + 1, 3), float(r))) for _ in range(5)]
    if r == 0:
        check(not any(hvd.poll(h) for h in hs), "poll() is False before the others took part")
    for h in hs:
        out = hvd.synchronize(h)
        check(out.shape == (n * (n + 1) // 2, 3), "allgather_async shape %s" % (tuple(out.shape),))


@case
def grouped_ops_are_one_operation():
    """A grouped op is one entry: ranks agree on all its tensors at once, and it is one timeline row."""
    path = os.path.join(tempfile.gettempdir(), "muster-semantics-timeline-%d.json" % os.getppid())
    hvd.start_timeline(path, mark_cycles=True)
    ts = [torch.full((k + 1,), float(r)) for k in range(4)]
    out = hvd.grouped_allreduce(ts, op=hvd.Sum, name="group")
    g = hvd.grouped_allgather([torch.full((1, 2), float(r)), torch.full((2,), float(r))], name="ggroup")
    hvd.stop_timeline()
    for k, o in enumerate(out):
        check(close(o, torch.full((k + 1,), n * (n - 1) / 2.0)), "grouped_allreduce %d" % k)
    check(g[0].shape == (n, 2) and g[1].shape == (2 * n,), "grouped_allgather shapes")
    if r == 0:
        with open(path) as f:
            events = json.load(f)  # complete JSON once stopped
        rows = [e["args"]["name"] for e in events if e.get("ph") == "M" and e["pid"] != 0]
        check(rows == ["allreduce.group", "allgather.ggroup"], "one row per grouped op: %s" % rows)
        names = {e["name"] for e in events}
        check({"NEGOTIATE_ALLREDUCE", "ALLREDUCE", "CYCLE_START"} <= names, "timeline phases: %s" % names)
        check("start_time_since_epoch_in_micros" in json.dumps(events), "timeline start time")
        os.unlink(path)
    e = raises(MismatchError, hvd.grouped_allreduce, [torch.ones(2)] * (1 + (r == 0)))
    check("number of tensors" in str(e), "group sizes compared: %s" % e)


@case
def scaling_follows_horovods_cpu_rules():
    # integers scale in float64 and truncate, per rank before the sum
    x = torch.tensor([7, -7, 3], dtype=torch.int32)
    got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5)
    check(torch.equal(got, torch.tensor([3, -3, 1], dtype=torch.int32) * n), "int prescale truncates: %s" % got)
    got = hvd.allreduce(x, op=hvd.Sum, postscale_factor=0.5)
    check(torch.equal(got, (x.double() * n * 0.5).to(torch.int32)), "int postscale: %s" % got)
    # integer average truncates toward zero
    got = hvd.allreduce(torch.tensor([r - 1], dtype=torch.int64), op=hvd.Average)
    want = int(sum(k - 1 for k in range(n)) / n)
    check(got.item() == want, "int average %s, want %d" % (got, want))
    # float16: scaled in float32, rounded once (with 2 ranks the float16 sum h + h is exact, so the
    # result is known to the bit; with more the sum itself rounds in float16, as in Horovod)
    h = torch.tensor([0.1, 1000.0, 3.3], dtype=torch.float16)
    got = hvd.allreduce(h, op=hvd.Sum, postscale_factor=0.3)
    if n == 2:
        want = ((h.float() * n) * torch.tensor(0.3, dtype=torch.float32)).half()
        check(torch.equal(got, want), "fp16 postscale rounds once: %s vs %s" % (got, want))
    got = hvd.allreduce(h, op=hvd.Sum, prescale_factor=0.3)
    check(got.dtype == torch.float16 and close(got.float(), (h.float() * 0.3).half().float() * n, 1e-2),
          "fp16 prescale")
    # float32 scales in float32 (exact sum of two equal values at 2 ranks)
    f = torch.tensor([1.1, 2.2], dtype=torch.float32)
    got = hvd.allreduce(f, op=hvd.Sum, prescale_factor=0.7)
    if n == 2:
        check(torch.equal(got, (f * torch.tensor(0.7, dtype=torch.float32)) * n), "float32 prescale: %s" % got)
    check(close(got, f * 0.7 * n, 1e-6), "float32 prescale")
    # Min/Max/Product across dtypes
    for dt in (torch.int32, torch.int64, torch.float32, torch.float64, torch.uint8):
        v = torch.tensor([r + 1, 2], dtype=dt)
        check(torch.equal(hvd.allreduce(v, op=hvd.Min), torch.tensor([1, 2], dtype=dt)), "Min %s" % dt)
        check(torch.equal(hvd.allreduce(v, op=hvd.Max), torch.tensor([n, 2], dtype=dt)), "Max %s" % dt)
        check(torch.equal(hvd.allreduce(v, op=hvd.Product), torch.tensor([math.factorial(n), 2 ** n], dtype=dt)),
              "Product %s" % dt)


@case
def reducescatter_every_op_uneven_rows_async_and_grouped():
    rows = 2 * n + 1  # uneven: the first (rows % n) ranks get one row more
    t = torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3) + r
    base, extra = divmod(rows, n)
    mine = base + (1 if r < extra else 0)
    start = r * base + min(r, extra)
    full_sum = sum(torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3) + k for k in range(n))
    want = full_sum[start:start + mine]
    check(close(hvd.reducescatter(t, op=hvd.Sum), want), "reducescatter Sum")
    check(close(hvd.reducescatter(t), want / n), "reducescatter default op is Average")
    check(close(hvd.reducescatter(t, op=hvd.Min), t[start:start + mine] - r), "reducescatter Min")
    check(close(hvd.reducescatter(t, op=hvd.Max), t[start:start + mine] - r + n - 1), "reducescatter Max")
    check(close(hvd.reducescatter(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25), want * 0.5),
          "reducescatter pre/postscale")
    h = hvd.reducescatter_async(t, op=hvd.Sum, name="rs")
    check(close(hvd.synchronize(h), want), "reducescatter_async")
    g = hvd.grouped_reducescatter([t, t.double()], op=hvd.Sum)
    check(close(g[0], want) and close(g[1], want.double()) and g[1].dtype == torch.float64, "grouped")
    h = hvd.grouped_reducescatter_async([t], op=hvd.Sum)
    check(close(hvd.synchronize(h)[0], want), "grouped_reducescatter_async")
    raises((ValueError, RuntimeError), hvd.reducescatter, torch.tensor(1.0))
    raises(RuntimeError, hvd.reducescatter, t, op=hvd.Adasum)


@case
def alltoall_is_point_to_point_with_horovods_return_types():
    splits = [k + 1 for k in range(n)]  # rank r sends k+1 rows to rank k
    x = torch.cat([torch.full((k + 1, 2), float(10 * r + k)) for k in range(n)])
    out, received = hvd.alltoall(x, splits=torch.tensor(splits, dtype=torch.int32))
    want = torch.cat([torch.full((r + 1, 2), float(10 * k + r)) for k in range(n)])
    check(torch.equal(out, want) and received.dtype == torch.int32 and received.tolist() == [r + 1] * n,
          "alltoall with splits returns (tensor, received splits)")
    out = hvd.alltoall(torch.arange(2 * n, dtype=torch.float64) + 100 * r)
    check(isinstance(out, torch.Tensor), "alltoall without splits returns the tensor alone")
    check(torch.equal(out, torch.tensor([100.0 * k + 2 * r + j for k in range(n) for j in range(2)],
                                        dtype=torch.float64)), "equal splits")
    pair = hvd.synchronize(hvd.alltoall_async(torch.arange(n).float()))
    check(isinstance(pair, tuple) and pair[1].tolist() == [1] * n, "alltoall_async gives the pair")
    raises(ValueError, hvd.alltoall, torch.ones(n + 1))                                   # not divisible
    raises(ValueError, hvd.alltoall, torch.ones(n), torch.ones(n))                       # float splits
    raises(ValueError, hvd.alltoall, torch.ones(n - 1), torch.ones(n, dtype=torch.int32))  # too many rows
    # gradient: the alltoall back
    t = x.clone().requires_grad_()
    out, _ = hvd.alltoall(t, splits=splits)
    (out * (r + 1)).sum().backward()
    want = torch.cat([torch.full((k + 1, 2), float(k + 1)) for k in range(n)])
    check(close(t.grad, want), "alltoall gradient: rows come back from the rank that got them")


@case
def gradients_as_horovod_defines_them():
    # allgather: the average of the gradients, this rank's rows
    t = torch.ones(r + 1, 2, requires_grad=True)
    g = hvd.allgather(t)
    g.backward(torch.arange(g.shape[0] * 2, dtype=torch.float32).reshape(-1, 2) + r)
    start = r * (r + 1) // 2
    want = torch.arange(g.shape[0] * 2, dtype=torch.float32).reshape(-1, 2)[start:start + r + 1] + (n - 1) / 2.0
    check(close(t.grad, want), "allgather gradient is averaged: %s vs %s" % (t.grad, want))
    # broadcast: averaged, only on the root
    for root in range(n):
        t = torch.ones(3, requires_grad=True)
        hvd.broadcast(t, root).backward(torch.full((3,), float(r + 1)))
        want = torch.full((3,), (n + 1) / 2.0) if r == root else torch.zeros(3)
        check(close(t.grad, want), "broadcast gradient (root %d): %s" % (root, t.grad))
    # allreduce: the same allreduce of the gradients
    t = torch.ones(2, requires_grad=True)
    hvd.allreduce(t, op=hvd.Sum).backward(torch.full((2,), float(r)))
    check(close(t.grad, torch.full((2,), n * (n - 1) / 2.0)), "allreduce Sum gradient")
    # reducescatter: the allgather of the gradient, times the size for Sum
    t = torch.ones(2 * n, 2, requires_grad=True)
    hvd.reducescatter(t, op=hvd.Sum).backward(torch.full((2, 2), float(r)))
    want = torch.cat([torch.full((2, 2), float(k * n)) for k in range(n)])
    check(close(t.grad, want), "reducescatter Sum gradient")
    t = torch.ones(2 * n, 2, requires_grad=True)
    hvd.reducescatter(t).backward(torch.full((2, 2), float(r)))
    check(close(t.grad, want / n), "reducescatter Average gradient")


@case
def join_stands_in_with_zeros_and_names_the_last_rank():
    for first in range(n):
        if r == first:
            last = hvd.join()
        else:
            a = hvd.allreduce(torch.full((3,), 6.0), op=hvd.Sum, name="join.sum")
            check(close(a, torch.full((3,), 6.0 * (n - 1))), "joined rank adds zeros: %s" % a)
            b = hvd.allreduce(torch.full((2,), 6.0), name="join.avg")
            check(close(b, torch.full((2,), 6.0 * (n - 1) / n)), "average divides by the whole size: %s" % b)
            m = hvd.allreduce(torch.full((2,), float(r)), op=hvd.Min, name="join.min")
            check(close(m, torch.full((2,), float(min(k for k in range(n) if k != first)))),
                  "Min ignores the joined rank: %s" % m)
            raises(RuntimeError, hvd.allgather, torch.ones(1, 2), name="join.gather")
            raises(RuntimeError, hvd.broadcast, torch.ones(2), 0 if first else 1, name="join.bcast")
            last = hvd.join()
        check(last != first or n == 1, "join returns the rank that joined last, not the first (%d)" % last)
        every = hvd.allgather_object(last)
        check(every == [last] * n, "join's result is the same everywhere: %s" % every)
    # unnamed ops stay matched after a join the others ran ops across
    if r == 0:
        hvd.join()
    else:
        raises(RuntimeError, hvd.allgather, torch.ones(1))
        hvd.join()
    check(close(hvd.allgather(torch.ones(1)), torch.ones(n)), "unnamed allgathers still match")


@case
def join_stands_in_for_distributed_optimizer_steps():
    """Uneven data: rank r trains r + 1 steps, then joins; joined ranks add zero gradients, the average
    still divides by the whole size."""
    w = nn.Parameter(torch.zeros(3))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0), named_parameters=[("w", w)])
    grad_of = lambda k: torch.tensor([1.0, 10.0, 100.0]) * (k + 1)  # noqa: E731
    expected = torch.zeros(3)
    for step in range(1, r + 2):
        opt.zero_grad()
        (w * grad_of(r)).sum().backward()
        opt.step()
        active = [k for k in range(n) if k + 1 >= step]
        expected = expected - sum(grad_of(k) for k in active) / n
        check(close(w.detach(), expected, 1e-5), "step %d with ranks %s active: %s vs %s"
              % (step, active, w.detach(), expected))
    last = hvd.join()
    check(last == n - 1, "the rank with the most data joins last: %d" % last)
    # Where the gradients lived (ctest runs this file with MUSTER_SHARED_GRADIENTS=0 too).
    setting = os.environ.get("MUSTER_SHARED_GRADIENTS", "")
    if setting in ("0", "1"):
        check(bool(opt._native.gradients_direct) == (setting == "1"),
              "MUSTER_SHARED_GRADIENTS=%s: gradients_direct %s" % (setting, opt._native.gradients_direct))
    check(w.grad is not None and close(w.grad, sum(grad_of(k) for k in range(n) if k >= r) / n, 1e-5),
          "a joined rank's own gradient is left as its last step made it")


@case
def sparse_allreduce_matches_dense():
    g = torch.Generator().manual_seed(r)
    dense = torch.rand(7, 3, generator=g)
    dense[dense < 0.6] = 0
    sparse = dense.to_sparse()
    want = hvd.allreduce(dense)
    got = hvd.sparse_allreduce_async(sparse, name="sp", op=hvd.Average)()
    check(got.is_sparse and close(got.to_dense(), want), "sparse average equals the dense one")
    got = hvd.sparse_allreduce_async(sparse, name="sp", op=hvd.Sum)()
    check(close(got.to_dense(), want * n), "sparse sum")
    for sparse_as_dense in (False, True):
        torch.manual_seed(0)
        emb = nn.Embedding(10, 3, sparse=True)
        ref = nn.Embedding(10, 3)
        ref.weight.data.copy_(emb.weight.data)
        opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
                                       named_parameters=[("emb", emb.weight)], sparse_as_dense=sparse_as_dense)
        idx = torch.tensor([[1, 2, 4], [4, 3, r + 5]])
        opt.zero_grad()
        emb(idx).sum().backward()
        opt.synchronize()
        check(emb.weight.grad.is_sparse, "SparseAdam gets a sparse gradient (sparse_as_dense=%s)" % sparse_as_dense)
        ref(idx).sum().backward()
        want = hvd.allreduce(ref.weight.grad)
        check(close(emb.weight.grad.to_dense(), want), "averaged sparse gradient (sparse_as_dense=%s)"
              % sparse_as_dense)
        with opt.skip_synchronize():
            opt.step()


@case
def sync_batch_norm_equals_batch_norm_over_the_global_batch():
    torch.manual_seed(7)
    batch = torch.randn(4 * n, 3, 5)           # every rank builds the whole batch, uses its rows
    mine = batch[4 * r:4 * (r + 1)].clone().requires_grad_()
    sbn = hvd.SyncBatchNorm(3, momentum=0.3)
    bn = nn.BatchNorm1d(3, momentum=0.3)
    with torch.no_grad():
        sbn.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
        bn.weight.copy_(sbn.weight)
    full = batch.clone().requires_grad_()
    out = sbn(mine)
    ref = bn(full)
    check(close(out, ref[4 * r:4 * (r + 1)], 1e-5), "normalised with the global statistics")
    check(close(sbn.running_mean, bn.running_mean, 1e-5) and close(sbn.running_var, bn.running_var, 1e-5),
          "running statistics")
    weights = torch.arange(out.numel(), dtype=torch.float32).reshape(out.shape)
    (out * weights).sum().backward()
    (ref * torch.cat([torch.arange(out.numel(), dtype=torch.float32).reshape(out.shape)] * n)).sum().backward()
    check(close(mine.grad, full.grad[4 * r:4 * (r + 1)], 1e-4), "input gradient of the global loss")
    check(close(hvd.allreduce(sbn.weight.grad, op=hvd.Sum), bn.weight.grad, 1e-4), "weight gradient")
    sbn.eval()
    bn.eval()
    check(close(sbn(mine), bn(full)[4 * r:4 * (r + 1)], 1e-5), "eval mode uses the running statistics")


@case
def adasum_is_horovods_pairwise_combination():
    if n & (n - 1):
        e = raises(NotImplementedError, hvd.allreduce, torch.ones(2), op=hvd.Adasum)
        check("power-of-two" in str(e), "Adasum refuses %d ranks: %s" % (n, e))
        return
    a, b = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    got = hvd.allreduce(a if r % 2 == 0 else b, op=hvd.Adasum)
    check(close(got, torch.tensor([1.0, 1.0])), "orthogonal vectors add: %s" % got)
    v = torch.tensor([3.0, -1.0])
    check(close(hvd.allreduce(v, op=hvd.Adasum), v), "equal vectors average")
    if n != 2:
        return
    x = torch.tensor([1.0, 2.0]) if r == 0 else torch.tensor([2.0, 0.5])
    dot, na, nb = 3.0, 5.0, 4.25
    want = (1 - dot / (2 * na)) * torch.tensor([1.0, 2.0]) + (1 - dot / (2 * nb)) * torch.tensor([2.0, 0.5])
    check(close(hvd.allreduce(x, op=hvd.Adasum), want, 1e-6), "Adasum formula")
    # DistributedOptimizer(op=Adasum): the ranks' updates (deltas) are combined, then applied
    w = nn.Parameter(torch.tensor([5.0, 5.0]))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0), named_parameters=[("w", w)], op=hvd.Adasum)
    opt.zero_grad()
    (w * x).sum().backward()        # gradient x: the SGD delta is -x
    opt.step()
    check(close(w.detach(), torch.tensor([5.0, 5.0]) - want, 1e-6), "Adasum optimizer: %s" % w.detach())


@case
def dynamic_timeline_writes_no_file_named_dynamic():
    check(not os.path.exists("DYNAMIC"), "HOROVOD_TIMELINE=DYNAMIC must not create a file called DYNAMIC")


@case
def process_set_argument_is_never_ignored():
    bogus = hvd.ProcessSet([0])
    e = raises(ValueError, hvd.allreduce, torch.ones(1), process_set=bogus)
    check("not an added process set" in str(e), "an unadded set is refused: %s" % e)
    raises(ValueError, hvd.allreduce, torch.ones(1), process_set="everyone")
    check(hvd.global_process_set.size() == n and hvd.global_process_set.rank() == r, "global set")
    check(hvd.global_process_set.included(), "global set includes every rank")
    out = hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=hvd.global_process_set)
    check(out.item() == n, "the global set explicitly")
    check(hvd.remove_process_set(hvd.global_process_set) is False, "the global set cannot be removed")


@case
def process_sets_run_among_their_ranks_only():
    import muster.runtime as rt
    even_ranks = [k for k in range(n) if k % 2 == 0]
    odd_ranks = [k for k in range(n) if k % 2 == 1]
    if not hasattr(rt.communicator(), "split"):
        e = raises(InvalidArgument, hvd.add_process_set, even_ranks)
        check("Communicator.split" in str(e), "an extension without split says so: %s" % e)
        return
    # ranks that disagree about a set get an error on every rank, and nothing is added
    e = raises(MismatchError, hvd.add_process_set, [0] if r == 0 else [1])
    check("ranks" in str(e), "mismatched add_process_set: %s" % e)
    even = hvd.add_process_set(even_ranks)
    odd = hvd.add_process_set(hvd.ProcessSet(odd_ranks))
    mine, other = (even, odd) if r % 2 == 0 else (odd, even)
    members = mine.ranks
    check(mine.size() == len(members) and mine.rank() == members.index(r) and mine.included(), "set shape")
    check(not other.included(), "the other set does not include this rank")
    raises(ValueError, hvd.add_process_set, even_ranks)                       # a duplicate
    e = raises(ValueError, hvd.allreduce, torch.ones(1), process_set=other)
    check("not in" in str(e), "an op on a set this rank is not in: %s" % e)
    # every op, among the set's ranks only
    got = hvd.allreduce(torch.full((3,), float(r)), op=hvd.Sum, process_set=mine)
    check(close(got, torch.full((3,), float(sum(members)))), "allreduce in the set: %s" % got)
    got = hvd.allgather(torch.full((1, 2), float(r)), process_set=mine)
    check(got[:, 0].tolist() == [float(k) for k in members], "allgather in set rank order: %s" % got)
    root = members[-1]
    check(close(hvd.broadcast(torch.full((2,), float(r)), root, process_set=mine), torch.full((2,), float(root))),
          "broadcast from a global root rank")
    raises(ValueError, hvd.broadcast, torch.ones(2), other.ranks[0], process_set=mine)  # root not in the set
    out = hvd.alltoall(torch.arange(len(members), dtype=torch.float32) + 10 * r, process_set=mine)
    check(out.tolist() == [10.0 * k + mine.rank() for k in members], "alltoall in the set: %s" % out)
    rs = hvd.reducescatter(torch.ones(2 * len(members), 2), op=hvd.Sum, process_set=mine)
    check(close(rs, torch.full((2, 2), float(len(members)))), "reducescatter in the set")
    g = hvd.grouped_allreduce([torch.ones(2), torch.ones(3)], op=hvd.Sum, process_set=mine)
    check(close(g[1], torch.full((3,), float(len(members)))), "grouped allreduce in the set")
    check(hvd.allgather_object(r, process_set=mine) == members, "allgather_object in the set")
    check(hvd.broadcast_object(r, root_rank=members[0], process_set=mine) == members[0], "broadcast_object")
    # independence: the odd set's barrier does not wait for a sleeping even rank. Judged by
    # when each rank left its set's barrier against when rank 0 woke (CLOCK_MONOTONIC is one
    # clock for every process on the host), not by durations: under mpirun on a loaded
    # machine ranks reach this line at different times, so a duration says little.
    hvd.barrier()
    woke = None
    if r == 0:
        time.sleep(2)
        woke = time.monotonic()
    hvd.barrier(process_set=mine)
    left = time.monotonic()
    woke = hvd.broadcast_object(woke, root_rank=0)
    if r % 2 == 0:
        check(left >= woke, "the even set's barrier waited for rank 0 (left %.3f s before it woke)" % (woke - left))
    else:
        check(left < woke, "the odd set's barrier did not wait for rank 0 (left %.3f s after it woke)" % (left - woke))
    hvd.barrier()
    # DistributedOptimizer on the even set: its ranks average, the others step alone
    w = nn.Parameter(torch.zeros(2))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0), named_parameters=[("w", w)], process_set=even)
    opt.zero_grad()
    (w * (r + 1)).sum().backward()
    opt.step()
    want = -sum(k + 1 for k in even_ranks) / len(even_ranks) if r % 2 == 0 else -(r + 1.0)
    check(close(w.detach(), torch.full((2,), want)), "process set optimizer: %s vs %s" % (w.detach(), want))
    check(hvd.remove_process_set(odd) and hvd.remove_process_set(even), "removed")
    check(even.process_set_id is None and not hvd.remove_process_set(even), "a removed set is invalid")
    raises(ValueError, hvd.allreduce, torch.ones(1), process_set=even)


names = sys.argv[1:]
ran = 0
for c in checks:
    if names and c.__name__ not in names:
        continue
    c()
    ran += 1
    hvd.barrier()
    if r == 0:
        print("ok", c.__name__, flush=True)
print("rank %d: all %d checks passed" % (r, ran), flush=True)
