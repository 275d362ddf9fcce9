"""Running the ops a round made ready: fused, in one order on every rank (engine.py step d).

Every rank runs the same list of ready ops (negotiation.Decision.ready) and
builds the same plan from the ops' descriptors alone, so the runtime sees
the same operations in the same order everywhere, joined ranks included:
  - allreduce, grouped allreduce and reducescatter with op Sum, Average,
    Min or Max: tensors of one wire dtype are packed into fusion buffers
    (HOROVOD_FUSION_THRESHOLD bytes at most; a grouped op is never split
    from itself) and each buffer is one runtime allreduce. A joined rank
    contributes zeros (Sum, Average, as Horovod does) or the op's identity
    (Min, Max, Product), so it does not change the result; Average still
    divides by the process set's size.
  - allgather, grouped allgather, alltoall, Product and Adasum: one byte
    allgather for all of them (each rank's block holds its part of every
    op; the lengths come from the descriptors), then each op takes its
    pieces: concatenation, the rows sent to this rank, a product, Adasum.
  - broadcast: one runtime broadcast each.
Then each op's finish step writes its outputs (average, postscale, dtype).

Scaling follows Horovod's CPU rules: float32/float64 scale in their own
precision, float16/bfloat16 in float32 and round once, integers in float64
and truncate; an integer average truncates toward zero.
"""
import math

import torch

from .adasum import adasum_tree
from .collectives import NATIVE, Pending, as_bytes

_FLOATS = (torch.float32, torch.float64)
_HALVES = (torch.float16, torch.bfloat16)


def dtype_of(name):
    """torch dtype from its descriptor name ("float32")."""
    return getattr(torch, name)


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def wire_dtype(dtype):
    """The dtype the runtime reduces `dtype` in: itself when it can, else int64 (8/16-bit ints, bool)."""
    return dtype if dtype in NATIVE else torch.int64


def numel(shape):
    return math.prod(shape) if shape else 1


def prescale(t, factor):
    """`t` times `factor` as Horovod scales on the CPU, in t's dtype."""
    if factor == 1.0:
        return t
    if t.dtype in _FLOATS:
        return t * factor
    if t.dtype in _HALVES:
        return (t.float() * factor).to(t.dtype)
    return (t.double() * factor).to(t.dtype)


def finish_reduced(red, out, post):
    """Writes the reduced flat `red` (wire dtype, may be modified) into `out`: postscale, dtype.

    An average was divided by the runtime already (op "average": exact
    division for float32/64, truncation for integers, float32 for 16-bit floats).
    """
    dt = out.dtype
    if post != 1.0:
        if dt in _FLOATS:
            red.mul_(post)
        elif dt in _HALVES:
            red = red.float().mul_(post)
        else:
            red = (red.double() * post).to(torch.int64)
    flat = red.view(out.shape) if red.numel() == out.numel() else red
    if out.data_ptr() != flat.data_ptr() or out.dtype != flat.dtype:
        out.copy_(flat)
    return out


def identity(op, dtype, count):
    """What a joined rank contributes to a reduction: zeros (sum, average), else the op's identity."""
    if op in ("sum", "average"):
        return torch.zeros(count, dtype=dtype)
    if op == "product":
        return torch.ones(count, dtype=dtype)
    if dtype.is_floating_point:
        return torch.full((count,), math.inf if op == "min" else -math.inf, dtype=dtype)
    info = torch.iinfo(dtype)
    return torch.full((count,), info.max if op == "min" else info.min, dtype=dtype)


def scatter_rows(rows, n, rank):
    """(offset, count) of the rows of reducescatter's output on `rank`: the first rows % n ranks get one more."""
    base, extra = divmod(rows, n)
    count = base + (1 if rank < extra else 0)
    offset = rank * base + min(rank, extra)
    return offset, count


class Work:
    """What one request computes on this rank (built by mpi_ops.py; read by the plans below).

    inputs: contiguous tensors sent; outputs: where results go (allreduce,
    broadcast; None to allocate); single: return one result instead of a list;
    splits: alltoall's rows per destination; returns_splits: alltoall with splits.
    """

    __slots__ = ("inputs", "outputs", "single", "splits", "returns_splits", "after")

    def __init__(self, inputs=(), outputs=None, single=True, splits=None, returns_splits=False, after=None):
        self.inputs = list(inputs)
        self.outputs = outputs
        self.single = single
        self.splits = splits
        self.returns_splits = returns_splits
        self.after = after  # optional callable(result) -> result, run last (e.g. copy back to a strided tensor)


class _Plan:
    """The runtime ops of one round and, per ready op, how to finish it."""

    def __init__(self, engine):
        self.engine = engine
        self.n = engine.size
        self.me = engine.rank
        self.buckets = []       # [_Bucket]
        self.open = {}          # (runtime op, wire dtype) -> the bucket still taking segments
        self.gather = []        # [(lengths per rank, my bytes, finish(pieces))]
        self.broadcasts = []    # [(buffer, root set rank)]
        self.starts = []        # [callable() -> Pending]: reduce-scatters and alltoalls, in order
        self.post = []          # [callable()]: their finishing steps, once every op is done
        self.finishers = []     # per ready op: callable() -> result

    # -- allreduce family ------------------------------------------------------

    def reduce(self, rop, dtype, count, source, segment_done, target=None):
        """Adds `count` elements (flat wire tensor `source`, or None for a joined stand-in) to a bucket.

        segment_done(reduced flat tensor) is called once the bucket is reduced.
        `target`: a contiguous tensor of the wire dtype the result goes to; a
        bucket of that one segment is reduced in it, with no staging copy.
        """
        wd = wire_dtype(dtype)
        key = (rop, wd)
        bucket = self.open.get(key)
        nbytes = count * torch.tensor([], dtype=wd).element_size()
        if bucket is None or (bucket.nbytes and bucket.nbytes + nbytes > self.engine.fusion_bytes):
            bucket = self.open[key] = _Bucket(rop, wd)
            self.buckets.append(bucket)
        if source is None:
            source = identity(rop, wd, count)
        bucket.add(source, count, nbytes, segment_done, target)

    # -- allgather family -------------------------------------------------------

    def allgather(self, lengths, mine, finish):
        """Adds one op's bytes to the round's byte allgather; finish(pieces[r]: uint8 tensor) builds its result."""
        self.gather.append((lengths, mine, finish))

    def run(self):
        pending = []
        for bucket in self.buckets:
            pending.append(bucket.start(self.engine.coll))
        if self.gather:
            pending.append(self._start_gather())
        for buf, root in self.broadcasts:
            pending.append(self.engine.coll.broadcast(buf, root))
        for start in self.starts:
            pending.append(start())
        for p in pending:
            p.wait()
        for bucket in self.buckets:
            bucket.finish()
        for f in self.post:
            f()
        return [f() for f in self.finishers]

    def _start_gather(self):
        n = self.n
        per_rank = [sum(lengths[r] for lengths, _, _ in self.gather) for r in range(n)]
        mine = torch.cat([m.reshape(-1) for _, m, _ in self.gather])
        out = torch.empty(sum(per_rank), dtype=torch.uint8)
        pending = self.engine.coll.allgather(mine, per_rank, out)
        bases = [sum(per_rank[:r]) for r in range(n)]

        def finish():
            offsets = list(bases)
            for lengths, _, done in self.gather:
                pieces = []
                for r in range(n):
                    pieces.append(out[offsets[r]:offsets[r] + lengths[r]])
                    offsets[r] += lengths[r]
                done(pieces)
        return Pending(pending, finish=finish)


class _Bucket:
    """One fusion buffer: segments of one wire dtype reduced by one runtime allreduce."""

    def __init__(self, rop, wd):
        self.rop = rop  # the runtime's op: sum, average, min, max
        self.wd = wd
        self.sources = []
        self.counts = []
        self.done = []
        self.target = None
        self.nbytes = 0
        self.buf = None

    def add(self, source, count, nbytes, segment_done, target):
        self.sources.append(source.reshape(-1))
        self.counts.append(count)
        self.done.append(segment_done)
        self.target = target if not self.counts[:-1] else None
        self.nbytes += nbytes

    def start(self, coll):
        if len(self.sources) == 1:
            src = self.sources[0]
            if self.target is not None:
                self.buf = self.target.view(-1)
                if self.buf.data_ptr() != src.data_ptr():
                    self.buf.copy_(src)
            else:
                self.buf = src.clone() if src.dtype == self.wd else src.to(self.wd)
        else:
            self.buf = torch.cat([s.to(self.wd) for s in self.sources])
        self.sources = None
        return coll.allreduce(self.buf, self.rop)

    def finish(self):
        offset = 0
        for count, done in zip(self.counts, self.done):
            done(self.buf.narrow(0, offset, count))
            offset += count


# --- per kind ------------------------------------------------------------------

def run_ready(engine, runnable):
    """Runs [(Ready, Request or None)] (see module doc); returns each op's result (None for stand-ins)."""
    plan = _Plan(engine)
    for ready, req in runnable:
        desc = ready.desc() if req is None else req.desc
        kind = desc["kind"]
        work = req.work if req is not None else None
        if kind == "barrier":  # agreeing on it was the whole op
            plan.finishers.append(lambda: None)
        elif kind == "process_set":
            plan.finishers.append(_process_set(engine, desc))
        elif kind == "optimizer":
            plan.finishers.append(_stand_in(engine, desc) if work is None and req is None else (lambda: None))
        elif kind == "allreduce":
            _allreduce(plan, desc, work)
        elif kind == "reducescatter":
            _reducescatter(plan, desc, work)
        elif kind == "allgather":
            _allgather(plan, ready, work)
        elif kind == "alltoall":
            _alltoall(plan, ready, work)
        elif kind == "broadcast":
            _broadcast(plan, desc, work)
        else:
            raise ValueError("no plan for collective kind %r" % kind)
    return plan.run()


def _process_set(engine, desc):
    """Adding a process set: every rank of this (the global) engine splits its communicator, in round order."""
    def run():
        if desc["action"] != "add":
            return None
        return engine.coll.split(desc["ranks"], desc["name"])
    return run


def _stand_in(engine, desc):
    """A joined rank's part in another rank's DistributedOptimizer step (see optimizer.py)."""
    def run():
        ref = engine.stand_ins.get(desc["id"])
        fn = ref() if ref is not None else None
        if fn is not None:
            fn()
    return run


def _result(work, outs):
    if work is None:
        return None
    result = outs[0] if work.single else list(outs)
    return work.after(result) if work.after is not None else result


def _allreduce(plan, desc, work):
    op, pre, post = desc["op"], desc["pre"], desc["post"]
    dtypes = [dtype_of(d) for d in desc["dtypes"]]
    shapes = desc["shapes"]
    if op in ("product", "adasum"):
        _allreduce_gathered(plan, desc, work, dtypes, shapes)
        return
    outs = [None] * len(dtypes)
    for i, (dtype, shape) in enumerate(zip(dtypes, shapes)):
        count = numel(shape)
        source = target = None
        if work is not None:
            source = prescale(work.inputs[i], pre).reshape(-1)
            if source.dtype != wire_dtype(dtype):
                source = source.to(wire_dtype(dtype))
            outs[i] = work.outputs[i]
            if outs[i].dtype == source.dtype and outs[i].is_contiguous():
                target = outs[i]

        def segment_done(red, i=i):
            if outs[i] is not None:
                finish_reduced(red, outs[i], post)
        plan.reduce(op, dtype, count, source, segment_done, target)
    plan.finishers.append(lambda: _result(work, outs))


def _allreduce_gathered(plan, desc, work, dtypes, shapes):
    """Product and Adasum: every rank's (prescaled) tensors gathered, combined here."""
    op, pre, post = desc["op"], desc["pre"], desc["post"]
    wds = [wire_dtype(d) for d in dtypes]
    counts = [numel(s) for s in shapes]
    width = sum(c * torch.tensor([], dtype=wd).element_size() for c, wd in zip(counts, wds))
    if work is not None:
        parts = [prescale(t, pre).reshape(-1).to(wd) for t, wd in zip(work.inputs, wds)]
    else:
        parts = [identity("product", wd, c) if op == "product" else torch.zeros(c, dtype=wd)
                 for c, wd in zip(counts, wds)]
    mine = torch.cat([as_bytes(p.contiguous()) for p in parts]) if parts else torch.empty(0, dtype=torch.uint8)
    outs = [None] * len(dtypes)

    def finish(pieces):
        if work is None:
            return
        offset = 0
        for i, (wd, c) in enumerate(zip(wds, counts)):
            nb = c * torch.tensor([], dtype=wd).element_size()
            every = torch.stack([p[offset:offset + nb].view(wd) for p in pieces]) if nb else \
                torch.empty(plan.n, 0, dtype=wd)
            offset += nb
            if op == "product":
                red = every.prod(dim=0).to(wd)
            else:
                red = adasum_tree(list(every.unbind(0)))
            outs[i] = finish_reduced(red, work.outputs[i], post)
    plan.allgather([width] * plan.n, mine, finish)
    plan.finishers.append(lambda: _result(work, outs))


def _reducescatter(plan, desc, work):
    """The runtime's reduce-scatter per tensor: this rank keeps its rows of the reduction."""
    op, pre, post = desc["op"], desc["pre"], desc["post"]
    dtypes = [dtype_of(d) for d in desc["dtypes"]]
    shapes = desc["shapes"]
    outs = [None] * len(dtypes)
    coll = plan.engine.coll
    for i, (dtype, shape) in enumerate(zip(dtypes, shapes)):
        source = prescale(work.inputs[i], pre).reshape(-1)
        if source.dtype != wire_dtype(dtype):
            source = source.to(wire_dtype(dtype))
        _, rows = scatter_rows(shape[0], plan.n, plan.me)
        row = numel(shape[1:])
        counts = [scatter_rows(shape[0], plan.n, k)[1] * row for k in range(plan.n)]
        red = torch.empty(rows * row, dtype=source.dtype)
        out = torch.empty([rows] + list(shape[1:]), dtype=dtype)
        plan.starts.append(lambda source=source, counts=counts, red=red:
                           coll.reducescatter(source.contiguous(), counts, op, red))
        plan.post.append(lambda i=i, red=red, out=out: outs.__setitem__(i, finish_reduced(red, out, post)))
    plan.finishers.append(lambda: _result(work, outs))


def _allgather(plan, ready, work):
    descs = ready.descs
    n = plan.n
    dtypes = [dtype_of(d) for d in descs[0]["dtypes"]]
    sizes = [t.element_size() for t in (torch.empty(0, dtype=d) for d in dtypes)]
    # lengths[r] = rank r's bytes for this op; per_tensor[r][j] its bytes of tensor j
    per_tensor = [[numel(s) * sz for s, sz in zip(descs[r]["shapes"], sizes)] for r in range(n)]
    lengths = [sum(p) for p in per_tensor]
    mine = torch.cat([as_bytes(t) for t in work.inputs]) if work.inputs else torch.empty(0, dtype=torch.uint8)
    outs = [None] * len(dtypes)

    def finish(pieces):
        for j, dtype in enumerate(dtypes):
            trailing = list(descs[0]["shapes"][j][1:])
            rows = sum(descs[r]["shapes"][j][0] for r in range(n))
            out = torch.empty([rows] + trailing, dtype=dtype)
            flat = as_bytes(out)
            at = 0
            for r in range(n):
                start = sum(per_tensor[r][:j])
                nb = per_tensor[r][j]
                flat[at:at + nb] = pieces[r][start:start + nb]
                at += nb
            outs[j] = out
    plan.allgather(lengths, mine, finish)
    plan.finishers.append(lambda: _result(work, outs))


def _alltoall(plan, ready, work):
    """The runtime's point-to-point alltoall; byte counts it cannot move (no dtype width divides them all)
    go as an allgather of every rank's send rows, of which this rank keeps its own."""
    descs = ready.descs
    n, me = plan.n, plan.me
    dtype = dtype_of(descs[0]["dtypes"][0])
    itemsize = torch.empty(0, dtype=dtype).element_size()
    trailing = list(descs[0]["shapes"][0][1:])
    row = numel(trailing) * itemsize
    lengths = [sum(descs[r]["splits"]) * row for r in range(n)]
    sent = work.inputs[0].narrow(0, 0, sum(work.splits)) if work.inputs[0].dim() else work.inputs[0]
    mine = as_bytes(sent.contiguous())
    result = {}
    received = [descs[r]["splits"][me] for r in range(n)]
    coll = plan.engine.coll
    # Every rank decides from every rank's splits alike whether the runtime can move these byte counts.
    width = coll.alltoall_width([s * row for r in range(n) for s in descs[r]["splits"]])
    if width is not None:
        out = torch.empty([sum(received)] + trailing, dtype=dtype)
        send_bytes = [s * row for s in work.splits]
        recv_bytes = [c * row for c in received]
        plan.starts.append(lambda: coll.alltoall(mine, send_bytes, as_bytes(out), recv_bytes, width))
        splits = torch.tensor(received, dtype=torch.int32)

        def done_p2p():
            pair = (out, splits) if work.returns_splits else out
            return work.after(pair) if work.after is not None else pair
        plan.finishers.append(done_p2p)
        return

    def finish(pieces):
        received = [descs[r]["splits"][me] for r in range(n)]
        out = torch.empty([sum(received)] + trailing, dtype=dtype)
        flat = as_bytes(out)
        at = 0
        for r in range(n):
            start = sum(descs[r]["splits"][:me]) * row
            nb = received[r] * row
            flat[at:at + nb] = pieces[r][start:start + nb]
            at += nb
        result["out"] = out
        result["splits"] = torch.tensor(received, dtype=torch.int32)
    plan.allgather(lengths, mine, finish)

    def done():
        out = (result["out"], result["splits"]) if work.returns_splits else result["out"]
        return work.after(out) if work.after is not None else out
    plan.finishers.append(done)


def _broadcast(plan, desc, work):
    root = plan.engine.world_ranks.index(desc["root"])
    buf = work.outputs[0]
    plan.broadcasts.append((buf, root))
    plan.finishers.append(lambda: _result(work, [buf]))
