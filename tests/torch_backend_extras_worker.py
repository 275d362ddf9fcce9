"""One rank of tests/torch_backend_extras_test.py: what PyTorch's distributed_test.py runs on gloo only
(a gate naming gloo, or MPI), checked on the "muster" backend against torch's documentation.

Started with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); the default group is
"muster". Expected values are computed here from every rank's inputs. Modes (argv[1]):
  collectives  all_reduce_coalesced (SUM, PRODUCT, MIN, MAX, complex; world, new_group(), a subgroup),
               all_gather_coalesced, all_to_all / all_to_all_single on subgroups and complex tensors,
               gather_object, scatter_object_list, all_gather_object, broadcast_object_list (world and
               subgroup), sparse all_reduce (nnz differing by rank, none on one rank, dense dims),
               ReduceOp.PREMUL_SUM, Work.get_future() chains, DDP's no_sync() gradient accumulation
               with and without a comm hook that uses get_future()
  p2p          isend/irecv, batch_isend_irecv (tags, out of order), recv from any source returning the
               sender, 4 KB / 1 MB / 64 MB messages byte for byte, non-contiguous tensors, a size
               mismatch raising on the receiver, subgroup ranks
  monitored    monitored_barrier: every rank passes (also wait_all_ranks); a rank that never comes is
               named by rank 0 (the first in rank order; all with wait_all_ranks) and the ranks that
               came fail at once naming rank 0's report; subgroup members and non-members; timeout 0
  timeouts     a barrier only rank 0 enters fails after the group's timeout, saying "Timed out": on
               the world formed again with a 1 s timeout, on new_group(timeout=...) and on a subgroup
Prints "rank R ok" at the end.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import muster.torch.distributed  # noqa: F401 - registers "muster"

torch.set_num_threads(1)
RANK, SIZE = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
STORE = None  # the world's TCPStore, for hand-made rendezvous between scenarios


def check(cond, what):
    if not cond:
        raise AssertionError("rank %d: %s" % (RANK, what))


def raises(fn, *needles):
    """fn() must raise; returns its message, which must contain every needle."""
    try:
        fn()
    except Exception as err:  # noqa: BLE001 - what torch's callers catch
        text = str(err)
        for n in needles:
            check(n in text, "expected %r in the error, got: %s" % (n, text))
        return text
    raise AssertionError("rank %d: expected an error with %s" % (RANK, needles))


def sync(name):
    """Every rank of the world arrives (through the store, so no backend op is involved)."""
    STORE.add("sync/" + name, 1)
    deadline = time.monotonic() + 120
    while int(STORE.add("sync/" + name, 0)) < SIZE:
        check(time.monotonic() < deadline, "sync %s timed out" % name)
        time.sleep(0.01)


# --- collectives -----------------------------------------------------------------------------------------

def all_reduce_coalesced():
    R = dist.ReduceOp
    cases = {R.SUM: sum, R.PRODUCT: lambda xs: torch.stack(xs).prod(0),
             R.MIN: lambda xs: torch.stack(xs).min(0).values, R.MAX: lambda xs: torch.stack(xs).max(0).values}
    groups = [(None, list(range(SIZE))), (dist.new_group(), list(range(SIZE)))]
    sub = list(range(1, SIZE)) if SIZE >= 3 else [0, 1]
    groups.append((dist.new_group(sub), sub))
    for group, members in groups:
        if RANK not in members:
            continue
        for op, reduce in cases.items():
            def inputs(r):
                return [torch.tensor([r + 1.0, -r - 2.0]), torch.full((3, 2), 0.5 * r + 1)]
            ts = inputs(RANK)
            dist.all_reduce_coalesced(ts, op=op, group=group)
            for i, t in enumerate(ts):
                expect = reduce([inputs(r)[i] for r in members])
                check(torch.allclose(t, expect), "all_reduce_coalesced %s tensor %d: %s != %s" % (op, i, t, expect))
        c = [torch.tensor([complex(RANK, 1)]), torch.tensor([complex(2, -RANK)] * 3)]
        dist.all_reduce_coalesced(c, group=group)
        check(c[0].item() == complex(sum(members), len(members)), "all_reduce_coalesced complex64: %s" % c[0])
        check(torch.equal(c[1], torch.tensor([complex(2 * len(members), -sum(members))] * 3)),
              "all_reduce_coalesced complex, second tensor")
        # async_op: a future (torch 1.13 returns Work.get_future() here)
        ts = [torch.ones(4) * (RANK + 1)]
        fut = dist.all_reduce_coalesced(ts, group=group, async_op=True)
        fut.wait()
        check(torch.equal(ts[0], torch.ones(4) * sum(r + 1 for r in members)), "all_reduce_coalesced async")


def all_gather_coalesced():
    ins = [torch.full((i + 1,) * (i + 1), float(RANK * 10 + i)) for i in range(3)]
    outs = [[torch.zeros_like(t) for t in ins] for _ in range(SIZE)]
    dist.all_gather_coalesced(outs, ins)
    for r in range(SIZE):
        for i, o in enumerate(outs[r]):
            check(torch.equal(o, torch.full_like(o, float(r * 10 + i))), "all_gather_coalesced rank %d #%d" % (r, i))


def all_to_all_subgroup_and_complex():
    sub = list(range(1, SIZE)) if SIZE >= 3 else [0, 1]
    group = dist.new_group(sub)
    if RANK in sub:
        me, n = sub.index(RANK), len(sub)
        ins = [torch.tensor([complex(me, j)] * (j + 1)) for j in range(n)]
        outs = [torch.zeros(me + 1, dtype=torch.complex64) for _ in range(n)]
        dist.all_to_all(outs, ins, group=group)
        for j in range(n):
            check(torch.equal(outs[j], torch.tensor([complex(j, me)] * (me + 1))), "all_to_all complex from %d" % j)
        # all_to_all_single, unequal splits: group rank j gets j + 1 rows from everyone.
        send = torch.cat([torch.full((j + 1, 2), float(me * 100 + j)) for j in range(n)])
        recv = torch.zeros((me + 1) * n, 2)
        dist.all_to_all_single(recv, send, [me + 1] * n, [j + 1 for j in range(n)], group=group)
        expect = torch.cat([torch.full((me + 1, 2), float(j * 100 + me)) for j in range(n)])
        check(torch.equal(recv, expect), "all_to_all_single on a subgroup")


def object_collectives():
    sub = list(range(1, SIZE)) if SIZE >= 3 else [0, 1]
    subgroup = dist.new_group(sub)
    for group, members in ((None, list(range(SIZE))), (subgroup, sub)):
        if RANK not in members:
            continue
        me = members.index(RANK)

        def obj(r):
            return {"rank": r, "text": "x" * (r + 1), "t": torch.arange(r + 1)}
        dst = members[-1]
        got = [None] * len(members) if RANK == dst else None
        dist.gather_object(obj(RANK), got, dst=dst, group=group)
        if RANK == dst:
            for i, r in enumerate(members):
                check(got[i]["rank"] == r and got[i]["text"] == "x" * (r + 1) and torch.equal(got[i]["t"],
                                                                                               torch.arange(r + 1)),
                      "gather_object from rank %d: %s" % (r, got[i]))
        src = members[0]
        if group is None:  # torch 1.13's scatter_object_list compares the group rank with the global src
            out = [None]
            dist.scatter_object_list(out, [obj(r) for r in members] if RANK == src else None, src=src)
            check(out[0]["rank"] == RANK, "scatter_object_list: got %s" % out[0])
        everyone = [None] * len(members)
        dist.all_gather_object(everyone, obj(RANK), group=group)
        check([o["rank"] for o in everyone] == members, "all_gather_object: %s" % everyone)
        lst = [obj(src), "second", 3] if RANK == src else [None, None, None]
        dist.broadcast_object_list(lst, src=src, group=group)
        check(lst[0]["rank"] == src and lst[1:] == ["second", 3], "broadcast_object_list: %s" % lst)
        del me


def sparse_all_reduce():
    def mine(r, dense):
        # rank r holds entries at rows r, r + 2 (none on the last rank), values r + 1
        rows = [] if r == SIZE - 1 else [r, r + 2]
        idx = torch.tensor([rows, [0] * len(rows)], dtype=torch.int64).view(2, len(rows))
        shape = (SIZE + 2, 3) + ((2,) if dense else ())
        vals = torch.full((len(rows),) + ((2,) if dense else ()), float(r + 1))
        return torch.sparse_coo_tensor(idx, vals, shape)
    for dense in (False, True):
        t = mine(RANK, dense)
        dist.all_reduce(t)
        expect = sum(mine(r, dense).to_dense() for r in range(SIZE))
        check(t.is_sparse and torch.equal(t.to_dense(), expect), "sparse all_reduce (dense dims %s)" % dense)
    t = mine(RANK, False)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    check(torch.equal(t.to_dense(), sum(mine(r, False).to_dense() for r in range(SIZE))), "sparse all_reduce async")
    raises(lambda: dist.all_reduce(mine(RANK, False), op=dist.ReduceOp.MAX), "sums them")


def premul_sum():
    op = dist._make_nccl_premul_sum(0.25)
    t = torch.arange(6, dtype=torch.float32) + RANK
    dist.all_reduce(t, op=op)
    expect = sum((torch.arange(6, dtype=torch.float32) + r) * 0.25 for r in range(SIZE))
    check(torch.allclose(t, expect), "PREMUL_SUM: %s != %s" % (t, expect))
    d = torch.ones(3, dtype=torch.float64) * (RANK + 1)
    dist.all_reduce(d, op=dist._make_nccl_premul_sum(-2.0))
    check(torch.equal(d, torch.ones(3, dtype=torch.float64) * -2.0 * sum(r + 1 for r in range(SIZE))),
          "PREMUL_SUM float64")
    raises(lambda: dist.all_reduce(torch.ones(2), op=dist._make_nccl_premul_sum([torch.tensor([2.0])])),
           "tensor factor")


def futures():
    # torch's documentation of Work.get_future(): a chain of then() callbacks on an allreduce's future.
    group = dist.distributed_c10d._get_default_group()
    t = torch.full((3,), float(RANK + 1))
    fut = group.allreduce([t]).get_future()
    res = fut.then(lambda f: [x * 3 for x in f.wait()]).then(lambda f: [x + 1 for x in f.wait()]).wait()
    total = sum(r + 1 for r in range(SIZE))
    check(torch.equal(res[0], torch.full((3,), total * 3.0 + 1)), "get_future chain: %s" % res)
    check(torch.equal(t, torch.full((3,), float(total))), "get_future: the allreduce's tensor")
    fut = dist.all_reduce(torch.ones(2), async_op=True).get_future()
    check(torch.equal(fut.wait()[0], torch.ones(2) * SIZE), "async all_reduce's future")


def ddp_no_sync():
    # DistributedDataParallel.no_sync(): gradients accumulate locally inside it; the next backward
    # outside reduces them all. Equal to one process accumulating every rank's batches.
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    batches = [torch.randn(SIZE, 4, generator=torch.Generator().manual_seed(s)) for s in range(3)]

    def hook(state, bucket):  # allreduce, then average, through the Work's future
        fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
        return fut.then(lambda f: f.value()[0] / SIZE)
    for with_hook in (False, True):
        model = torch.nn.parallel.DistributedDataParallel(__import__("copy").deepcopy(base))
        if with_hook:
            model.register_comm_hook(None, hook)
        with model.no_sync():
            for b in batches[:2]:
                model(b[RANK:RANK + 1]).sum().backward()
        model(batches[2][RANK:RANK + 1]).sum().backward()
        ref = __import__("copy").deepcopy(base)
        for b in batches:
            (ref(b).sum() / SIZE).backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            check(torch.allclose(p.grad, q.grad, atol=1e-5), "no_sync (hook %s): %s != %s" % (with_hook, p.grad,
                                                                                            q.grad))


def collectives():
    all_reduce_coalesced()
    all_gather_coalesced()
    all_to_all_subgroup_and_complex()
    object_collectives()
    sparse_all_reduce()
    premul_sum()
    futures()
    ddp_no_sync()


# --- point to point --------------------------------------------------------------------------------------

def pattern(n, seed):
    return (torch.arange(n, dtype=torch.int64) * 2654435761 + seed).to(torch.int32)


def p2p():
    right, left = (RANK + 1) % SIZE, (RANK - 1) % SIZE
    # isend/irecv around the ring, every size byte for byte.
    for nbytes in (4 << 10, 1 << 20, 64 << 20):
        n = nbytes // 4
        out = pattern(n, RANK)
        got = torch.zeros(n, dtype=torch.int32)
        reqs = [dist.isend(out, right, tag=nbytes % 1000), dist.irecv(got, left, tag=nbytes % 1000)]
        for r in reqs:
            r.wait()
        check(torch.equal(got, pattern(n, left)), "isend/irecv of %d bytes" % nbytes)
    # batch_isend_irecv, torch's documentation example, then several tags taken out of order.
    send_tensor = torch.arange(2) + 2 * RANK
    recv_tensor = torch.zeros(2, dtype=torch.int64)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send_tensor, right),
                                   dist.P2POp(dist.irecv, recv_tensor, left)])
    for r in reqs:
        r.wait()
    check(torch.equal(recv_tensor, torch.arange(2) + 2 * left), "batch_isend_irecv: %s" % recv_tensor)
    ops, gots = [], {}
    for tag in range(5):
        ops.append(dist.P2POp(dist.isend, torch.full((tag + 1,), float(RANK * 10 + tag)), right, tag=tag))
    for tag in reversed(range(5)):
        gots[tag] = torch.zeros(tag + 1)
        ops.append(dist.P2POp(dist.irecv, gots[tag], left, tag=tag))
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    for tag, t in gots.items():
        check(torch.equal(t, torch.full((tag + 1,), float(left * 10 + tag))), "batch tag %d: %s" % (tag, t))
    # Same pair and tag: messages arrive in the order sent.
    if RANK == 0:
        for i in range(4):
            dist.send(torch.tensor([i]), 1, tag=9)
    elif RANK == 1:
        seen = []
        for _ in range(4):
            t = torch.zeros(1, dtype=torch.int64)
            dist.recv(t, 0, tag=9)
            seen.append(int(t))
        check(seen == [0, 1, 2, 3], "messages of one tag out of order: %s" % seen)
    # recv from any source: rank 0 takes one message from every other rank and learns who sent it.
    if RANK == 0:
        senders = []
        for _ in range(SIZE - 1):
            t = torch.zeros(3)
            src = dist.recv(t)
            check(torch.equal(t, torch.full((3,), float(src))), "any source: %s from %d" % (t, src))
            senders.append(src)
        check(sorted(senders) == list(range(1, SIZE)), "any source senders: %s" % senders)
        t = torch.zeros(3)
        w = dist.irecv(t, tag=1)  # irecv from any source, too
        w.wait()
        check(w._source_rank() == SIZE - 1 and torch.equal(t, torch.ones(3) * 7), "irecv any source")
    else:
        dist.send(torch.full((3,), float(RANK)), 0)
        if RANK == SIZE - 1:
            dist.send(torch.ones(3) * 7, 0, tag=1)
    # A point-to-point Work's future (Work.get_future()): completed with its tensors.
    got = torch.zeros(4)
    futs = [dist.isend(torch.full((4,), float(RANK)), right, tag=6).get_future(),
            dist.irecv(got, left, tag=6).get_future()]
    torch.futures.wait_all(futs)
    check(torch.equal(futs[1].value()[0], torch.full((4,), float(left))), "irecv's future: %s" % futs[1].value())
    # Non-contiguous tensors both ways.
    out = torch.arange(12, dtype=torch.float32).view(3, 4).t()
    got = torch.zeros(3, 4).t()
    for r in (dist.isend(out, right, tag=3), dist.irecv(got, left, tag=3)):
        r.wait()
    check(torch.equal(got, out), "non-contiguous: %s" % got)
    # A recv whose size differs from the message: the receiver's wait raises naming both sizes.
    if RANK == 0:
        dist.send(torch.zeros(5), 1, tag=4)
    elif RANK == 1:
        raises(lambda: dist.recv(torch.zeros(4), 0, tag=4), "20 bytes", "16")
    # A subgroup's ranks are its own (group rank 0 is world rank 1 at 3 ranks).
    if SIZE >= 3:
        group = dist.new_group([1, 2])
        if RANK == 1:
            dist.send(torch.ones(2) * 5, 2, group=group)  # dst is a global rank in torch's API
        elif RANK == 2:
            t = torch.zeros(2)
            check(dist.recv(t, group=group) == 1 and torch.equal(t, torch.ones(2) * 5), "subgroup any source")
    dist.barrier()


# --- monitored_barrier ---------------------------------------------------------------------------------

def monitored():
    timeout = datetime.timedelta(seconds=2)
    for _ in range(3):
        dist.all_reduce(torch.ones(4))
    dist.monitored_barrier(timeout=timeout)
    dist.monitored_barrier(timeout=timeout, wait_all_ranks=True)
    # Rank 1 never comes (a fresh group per scenario: a rank that skips one leaves the group's later
    # monitored barriers out of step). Rank 0 names it; the others fail at once with rank 0's report.
    group = dist.new_group()
    start = time.monotonic()
    if RANK == 0:
        text = raises(lambda: dist.monitored_barrier(group, timeout=timeout), "Rank 1 failed to pass monitoredBarrier")
        check(time.monotonic() - start >= 1.9, "rank 0 gave up before the timeout")
        check("ranks that passed: %s" % ", ".join(map(str, range(2, SIZE))) in text if SIZE > 2 else True, text)
    elif RANK != 1:
        raises(lambda: dist.monitored_barrier(group, timeout=timeout),
               "Rank %d successfully reached monitoredBarrier" % RANK, "Rank 1 failed to pass monitoredBarrier")
        check(time.monotonic() - start < 10, "an arrived rank waited long after rank 0 failed")
    sync("missing-one")
    # wait_all_ranks: every rank but 0 stays away; rank 0 names them all.
    group = dist.new_group()
    if RANK == 0:
        names = ", ".join(map(str, range(1, SIZE)))
        raises(lambda: dist.monitored_barrier(group, timeout=datetime.timedelta(seconds=0.2), wait_all_ranks=True),
               "Ranks %s failed to pass monitoredBarrier" % names if SIZE > 2 else
               "Ranks 1 failed to pass monitoredBarrier")
    sync("missing-all")
    # The first missing rank in rank order is the one named (3 ranks: rank 2 stays away).
    if SIZE >= 3:
        group = dist.new_group()
        if RANK == 0:
            raises(lambda: dist.monitored_barrier(group, timeout=timeout), "Rank 2 failed to pass monitoredBarrier")
        elif RANK == 1:
            raises(lambda: dist.monitored_barrier(group, timeout=timeout), "Rank 1 successfully reached")
        sync("order")
    # A subgroup: rank 1 stays away; non-members return at once.
    group = dist.new_group([0, 1])
    if RANK == 0:
        raises(lambda: dist.monitored_barrier(group, datetime.timedelta(seconds=0.1)),
               "Rank 1 failed to pass monitoredBarrier")
    elif RANK != 1:
        dist.monitored_barrier(group, datetime.timedelta(seconds=0.1))
    sync("subgroup")
    # Timeout 0: rank 0 alone, no time to wait for anyone.
    group = dist.new_group()
    if RANK == 0:
        raises(lambda: group.monitored_barrier(datetime.timedelta(seconds=0)),
               "Rank 0 timed out in monitoredBarrier", "Rank 1 failed to pass monitoredBarrier in 0 ms")
    sync("timeout-0")
    # And the world still works.
    t = torch.ones(2)
    dist.all_reduce(t)
    check(torch.equal(t, torch.ones(2) * SIZE), "all_reduce after the monitored barriers")


# --- timeouts ------------------------------------------------------------------------------------------------

def lone_barrier(group, seconds, name):
    """Rank 0 (of `group`) enters a barrier nobody else does: it must fail after about `seconds`."""
    if dist.get_rank(group) == 0:
        start = time.monotonic()
        raises(lambda: dist.barrier(group), "Timed out")
        took = time.monotonic() - start
        check(seconds - 0.1 <= took < seconds + 10, "%s: the barrier failed after %.2f s, its timeout is %.1f s"
              % (name, took, seconds))
    sync(name)


def timeouts():
    short = datetime.timedelta(seconds=1)
    lone_barrier(dist.new_group(timeout=short), 1.0, "full-group")
    if SIZE >= 3:
        sub = dist.new_group([1, 2], timeout=datetime.timedelta(seconds=2))
        if RANK in (1, 2):
            lone_barrier(sub, 2.0, "subgroup")
        else:
            sync("subgroup")
    # The world formed again with a short timeout (torch's test_barrier_timeout_global).
    dist.destroy_process_group()
    sync("destroyed")
    dist.init_process_group("muster", timeout=short, init_method="file://" + os.environ["INIT_FILE"],
                            rank=RANK, world_size=SIZE)
    lone_barrier(None, 1.0, "world")


MODES = {"collectives": collectives, "p2p": p2p, "monitored": monitored, "timeouts": timeouts}

if __name__ == "__main__":
    STORE = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]) + 1, SIZE, RANK == 0,
                          timeout=datetime.timedelta(seconds=120))
    dist.init_process_group("muster")
    MODES[sys.argv[1]]()
    print("rank %d ok" % RANK, flush=True)
    sys.stdout.flush()
