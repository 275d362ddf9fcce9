"""torch.distributed on muster's runtime: the process-group backend "muster".

    import torch.distributed as dist
    import muster.torch.distributed          # registers the backend
    dist.init_process_group("muster")        # env:// as with gloo (muster.torchrun sets it)
    model = torch.nn.parallel.DistributedDataParallel(model)

Everything built on torch.distributed (DistributedDataParallel, the
collectives, DistributedSampler's users) then moves its tensors with muster's
runtime: the shared-memory ring on one host, muster's TCP transport between
hosts. CPU tensors only.

How it is built
- The world forms over the c10d Store torch hands the backend (the
  TCPStore of env://, or any init_method's store): a
  `_muster_runtime.Communicator(store=..., rank, size)` exchanges its
  endpoints through it, then every op runs on muster's own links. A
  subgroup (dist.new_group) gets a Communicator of its own over the
  subgroup's store.
- MusterProcessGroup is a Python subclass of torch's ProcessGroup (the
  route torch 1.13 offers a third-party backend written in Python; C++
  callers such as DDP's reducer reach its methods through torch's
  trampoline). A C++ c10d::ProcessGroup built against libtorch-dev is the
  other route, bound to one torch build's ABI (Debian's libtorch-dev is
  1.13 only). The Python layer costs tens of microseconds per call against
  DDP's milliseconds per bucket (a 25 MB bucket is ~3 ms on the ring here).
  Measured on bench/torch's 25 M-parameter MLP (2 ranks, each bound to one
  core): DDP on this backend takes the CPU time per step of DDP with a comm
  hook that hands each bucket straight to the runtime (in the quietest run,
  384.0 against 384.7 ms at batch 8, 411.3 against 410.7 at batch 32; on a
  busier machine the backend came out 4% below to 25% above the hook, run
  to run), so neither this layer nor the GIL is where its step goes, and a
  C++ ProcessGroup would not change it.
- Shared buckets: a storage allreduced a second time (DDP's buckets from
  the second step on, a script's long-lived buffer) moves into shared memory
  and the runtime reduces it in place (distributed_shared.py): a repeated
  16 MB all_reduce ~1 ms against ~2.2 on the ring, 64 MB 2.7 against 6.8;
  once, ~0.2 s for 16 MB to move and map. The DDP step of bench/torch's
  25 M MLP gains 1-6%: what is left between DDP(muster) and muster.torch is
  DDP's own data path (each gradient copied into its bucket and back;
  DistributedDataParallel(..., gradient_as_bucket_view=True) removes the
  copies), the same on gloo, with one core per rank none of it hidden
  behind backward.
- Collectives are asynchronous: a call hands the tensor's memory
  (data_ptr, no copy for contiguous tensors of a runtime dtype) to the
  runtime and returns a Work made from a torch Future
  (`_create_work_from_future`); one completion thread per group waits on
  the runtime's handles in order (they complete in submission order) and
  completes the futures, so DDP's bucket allreduces overlap its backward.
- Errors: a collective that failed (a dead rank, a timeout, ranks
  disagreeing) makes every later call of the group raise that failure, a
  MusterBackendError (a RuntimeError) naming the rank, with the runtime's
  CommError / PeerTimeoutError / MismatchError as its cause. A synchronous
  call from torch.distributed (dist.all_reduce(t), async_op=False) waits
  for its own op and raises its error itself. Futures are never completed
  with an error: torch 1.13's Work.wait() does not pass it on, and DDP's
  reducer crashes the process on one. Within DDP, the bucket allreduce
  after the failure raises from backward().

- Point to point (distributed_p2p.py): send, recv, isend, irecv, recv from
  any source and batch_isend_irecv run on the runtime's point-to-point
  links (a byte ring each way in shared memory on a host, a TCP stream of
  their own between hosts), outside the order of the collectives, at any
  size, matched by (sender, tag). Their Works raise their own failures
  from wait() and name a recv's sender (_source_rank()).
- Timeouts: the group's timeout (init_process_group / new_group) is the
  runtime's: a collective, a barrier or a recv with no progress for that
  long raises an error that says "Timed out" and names the rank.

Ops: allreduce (SUM, AVG, MIN, MAX on the runtime's dtypes float16/32/64,
bfloat16, int32/64; PRODUCT, BAND, BOR, BXOR and the 8/16-bit integer and
bool dtypes by an allgather and a local reduction; PREMUL_SUM; sparse COO
tensors, summed: distributed_reduce.py), allreduce_coalesced, broadcast,
allgather (and _allgather_base / all_gather_into_tensor, allgather_coalesced),
reduce_scatter (and _reduce_scatter_base / reduce_scatter_tensor),
alltoall, alltoall_base (all_to_all_single, uneven splits too), barrier,
monitored_barrier (dist.monitored_barrier, which torch 1.13 offers to gloo
alone by name, accepts "muster" groups once this module is imported),
reduce, gather, scatter, and with them torch's object collectives
(all_gather_object, gather_object, broadcast_object_list,
scatter_object_list); send, recv, recv from any source, isend, irecv,
batch_isend_irecv. Work.get_future() on every op.
"""
import atexit
import datetime
import functools
import os
import queue
import sys
import threading
import weakref

import torch
import torch.distributed as dist

from .. import runtime as _rt
from . import distributed_reduce as _reduce
from .distributed_p2p import PointToPoint
from .distributed_shared import SharedStorages as _SharedStorages
from ..runtime_errors import CommError, InvalidArgument, MismatchError, PeerTimeoutError, RuntimeFailure

__all__ = ["MusterProcessGroup", "BACKEND", "MusterBackendError"]

BACKEND = "muster"

_c10d = torch._C._distributed_c10d
_C10D_FILE = os.path.join("torch", "distributed", "distributed_c10d.py")
_ReduceOp = dist.ReduceOp
_ANY_SOURCE = -1  # the runtime's recv_async(src=-1): the first matching message from any rank

# torch dtype -> the runtime's name, for dtypes the runtime reduces natively.
_NATIVE = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
           torch.bfloat16: "bfloat16", torch.int32: "int32", torch.int64: "int64"}
# Reduced through a wider copy (a sum of bool is their OR once cast back).
_WIDENED = {torch.uint8: torch.int64, torch.int8: torch.int64, torch.int16: torch.int64, torch.bool: torch.int64}


class MusterBackendError(RuntimeError):
    """A collective of the "muster" backend failed; the runtime's error is its __cause__.

    `rank` names the peer at fault where the runtime knows it (else None).
    """

    def __init__(self, message, rank=None):
        super().__init__(message)
        self.rank = rank


def _op_name(op):
    """The runtime's name of a torch ReduceOp it reduces natively, else None."""
    if op == _ReduceOp.SUM:
        return "sum"
    if op == _ReduceOp.MIN:
        return "min"
    if op == _ReduceOp.MAX:
        return "max"
    if hasattr(_ReduceOp, "AVG") and op == _ReduceOp.AVG:
        return "average"
    return None


def _reduce_locally(stacked, op):
    """Reduces a (size, ...) tensor along dim 0 with a ReduceOp the runtime lacks."""
    if op == _ReduceOp.PRODUCT:  # half types in float32 (torch has no half product on CPU)
        return torch.prod(stacked.float() if stacked.dtype in (torch.float16, torch.bfloat16) else stacked, dim=0)
    if op in (_ReduceOp.BAND, _ReduceOp.BOR, _ReduceOp.BXOR):
        if stacked.is_floating_point():
            raise InvalidArgument("all_reduce: %s is for integer or bool tensors, got %s" % (op, stacked.dtype))
        out = stacked[0].clone()
        for part in stacked[1:]:
            if op == _ReduceOp.BAND:
                out &= part
            elif op == _ReduceOp.BOR:
                out |= part
            else:
                out ^= part
        return out
    raise InvalidArgument("all_reduce: the muster backend has no %s" % (op,))


class _StoreAdapter:
    """The c10d Store as the runtime's store: set(key, bytes), get(keys, timeout_ms) -> [bytes]."""

    def __init__(self, store):
        self._store = store

    def set(self, key, value):
        self._store.set(key, bytes(value))

    def get(self, keys, timeout_ms):
        self._store.wait(list(keys), datetime.timedelta(milliseconds=int(timeout_ms)))
        return [self._store.get(k) for k in keys]


def _as_backend_error(err):
    if isinstance(err, MusterBackendError):
        return err
    if isinstance(err, PeerTimeoutError):  # the group's timeout, in the words torch's callers look for
        text = "muster backend: Timed out (the group's timeout passed with no progress): %s" % err
    else:
        text = "muster backend: %s" % err
    out = MusterBackendError(text, getattr(err, "rank", None))
    out.__cause__ = err
    return out


class _Outcome:
    """How one submitted op ended: `done` is set once it has; `error` is its failure, if any."""

    __slots__ = ("done", "error")

    def __init__(self):
        self.done = threading.Event()
        self.error = None


class _Completions:
    """The thread that waits on the runtime's handles, in submission order, and completes the futures.

    Each entry is (handle, future, finish, outcome): finish() returns the
    future's value (and copies results into place). A failure is kept (the
    group's next call raises it) and the future is still completed with a
    value: torch 1.13 does not hand a future's error to Work.wait(), and DDP's
    reducer crashes the process on one (found by trying), so errors are
    raised from the calls instead.
    """

    def __init__(self, name):
        self._queue = queue.Queue()
        self._failed = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def failed(self):
        return self._failed

    def put(self, handle, future, finish, outcome):
        self._queue.put((handle, future, finish, outcome))

    def _run(self):
        while True:
            entry = self._queue.get()
            if entry is None:
                return
            handle, future, finish, outcome = entry
            value = []
            try:
                if self._failed is not None:
                    raise self._failed
                if handle is not None:
                    handle.wait()
                value = finish()
            except BaseException as err:  # noqa: BLE001 - every failure reaches the caller
                outcome.error = _as_backend_error(err)
                if self._failed is None:
                    self._failed = outcome.error
            outcome.done.set()
            future.set_result(value)

    def close(self, timeout_s=None):
        """Ends the thread once what was queued has completed; True when it has ended (within `timeout_s`)."""
        self._queue.put(None)
        # The group's last reference may go on this thread (a finish() that
        # held it): its __del__ then closes from here, and cannot join itself.
        if threading.current_thread() is self._thread:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


def _caller_waits():
    """True when the op was called by one of torch.distributed's functions with async_op=False.

    That caller waits on the Work at once, and Work.wait() cannot carry an
    error: the call waits for its op itself and raises. Called from C++ (DDP's
    reducer) or with async_op=True, the call returns at once.
    """
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    if frame is None or not frame.f_code.co_filename.endswith(_C10D_FILE):
        return False
    return frame.f_locals.get("async_op") is False


class MusterProcessGroup(dist.ProcessGroup):
    """A torch.distributed process group whose collectives run on muster's runtime.

    Made by torch through the registered backend (init_process_group("muster"),
    new_group(backend="muster")); not meant to be constructed by hand.
    """

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        timeout_ms = int(timeout.total_seconds() * 1000) if timeout is not None else 0
        ext = _rt.extension()
        try:
            self._comm = ext.Communicator(timeout_ms, store=_StoreAdapter(store), rank=rank, size=size,
                                          prefix="muster")
        except RuntimeFailure as err:
            raise _as_backend_error(err) from err
        self._done = _Completions("muster-pg-%d" % rank)
        self._shared = _SharedStorages(self._comm)
        self._p2p = PointToPoint(self._comm, _as_backend_error)
        self._timeout = timeout if timeout is not None else datetime.timedelta(milliseconds=self._comm.timeout_ms)
        self._closed = False
        _open_groups.add(self)

    # --- plumbing ------------------------------------------------------------------------------------

    def getBackendName(self):  # noqa: N802 - torch's name
        return BACKEND

    def _check(self):
        if self._done.failed is not None:
            raise self._done.failed

    def _submit(self, start, finish):
        """Runs start() (which returns a runtime handle or None) and queues finish() for the future.

        A caller that waits at once (dist.all_reduce(t)) gets the op's error
        from this call."""
        self._check()
        try:
            handle = start()
        except RuntimeFailure as err:
            raise _as_backend_error(err) from err
        future = torch.futures.Future()
        outcome = _Outcome()
        self._done.put(handle, future, finish, outcome)
        if _caller_waits():
            outcome.done.wait()
            if outcome.error is not None:
                raise outcome.error
        return _c10d._create_work_from_future(future)

    def _completed(self, value):
        future = torch.futures.Future()
        future.set_result(value)
        return _c10d._create_work_from_future(future)

    @staticmethod
    def _one(tensors, what, sparse_ok=False):
        if len(tensors) != 1:
            raise InvalidArgument("%s: the muster backend takes one tensor per process, got %d" % (what, len(tensors)))
        t = tensors[0]
        if t.device.type != "cpu":
            raise InvalidArgument("%s: the muster backend works on CPU tensors, got one on %s" % (what, t.device))
        if t.is_sparse and not sparse_ok:
            raise InvalidArgument("%s: the muster backend takes sparse tensors only in all_reduce, got one here" % what)
        return t

    @staticmethod
    def _raw(t):
        """(dtype name, count) moving the bytes of contiguous `t` unchanged (broadcast, gather)."""
        view = _rt.raw_view(t.numel() * t.element_size())
        return view

    # --- allreduce -----------------------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        t = self._one(tensors, "all_reduce", sparse_ok=True)
        op = opts.reduceOp if opts is not None else _ReduceOp.SUM
        if t.is_sparse:
            return self._sparse_allreduce(t, op)
        if _reduce.is_premul_sum(op):  # each rank's tensor times the factor, then the sum
            if not t.is_floating_point():
                raise InvalidArgument("all_reduce: PREMUL_SUM multiplies by a float; got a %s tensor" % t.dtype)
            t.mul_(_reduce.premul_factor(op))
            op = _ReduceOp.SUM
        name = _op_name(op)
        if name is not None and t.dtype in _NATIVE and t.is_contiguous():
            shared = self._shared
            fd, offset, seen = shared.offer(t)

            def finish():  # on the completion thread: must not hold the group (its __del__ joins that thread)
                shared.done(seen)
                return [t]
            # (A failed op never runs finish(): its storage stays counted busy, in a group that is broken.)
            return self._submit(lambda: self._comm.allreduce_async(t.data_ptr(), t.numel(), _NATIVE[t.dtype], name,
                                                                   shared_fd=fd, shared_offset=offset), finish)
        if name is not None and t.dtype in _NATIVE:  # non-contiguous: reduce a contiguous copy
            flat = t.contiguous()

            def back():
                t.copy_(flat)
                return [t]
            return self._submit(lambda: self._comm.allreduce_async(flat.data_ptr(), flat.numel(),
                                                                   _NATIVE[t.dtype], name), back)
        if name is not None and t.dtype in _WIDENED and op in (_ReduceOp.SUM, _ReduceOp.MIN, _ReduceOp.MAX):
            wide = t.to(_WIDENED[t.dtype]).contiguous()

            def narrow():
                t.copy_(wide > 0 if t.dtype == torch.bool else wide)
                return [t]
            return self._submit(lambda: self._comm.allreduce_async(wide.data_ptr(), wide.numel(), "int64", name),
                                narrow)
        # What the runtime does not reduce: every rank's tensor, reduced here.
        gathered = torch.empty((self.size(),) + tuple(t.shape), dtype=t.dtype)
        mine = t.contiguous()

        def reduce_here():
            if name == "average":
                out = gathered.to(torch.float64).mean(dim=0) if not t.is_floating_point() else gathered.mean(dim=0)
            elif name is not None:  # sum / min / max of a dtype the runtime lacks
                out = {"sum": lambda g: g.sum(dim=0), "min": lambda g: g.min(dim=0).values,
                       "max": lambda g: g.max(dim=0).values}[name](gathered.to(torch.int64))
            else:
                out = _reduce_locally(gathered, op)
            t.copy_(out)
            return [t]
        return self._submit(lambda: self._allgather_raw(mine, gathered), reduce_here)

    def _sparse_allreduce(self, t, op):
        """The sum of every rank's sparse COO tensor, into `t` (torch's gloo backend's sparse all_reduce):
        every rank's indices and values (allgatherv, so the counts may differ), then the sum, coalesced."""
        if op != _ReduceOp.SUM:
            raise InvalidArgument("all_reduce of a sparse tensor: the muster backend sums them (ReduceOp.SUM), got %s"
                                  % (op,))
        mine = t.coalesce()
        indices = mine.indices().contiguous()
        values = mine.values().contiguous()
        gather = _reduce.SparseGather(self._comm, indices, values)

        def total():
            t.copy_(gather.sum(t.shape, t.dtype))
            return [t]
        return self._submit(gather.start, total)

    def allreduce_coalesced(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else _ReduceOp.SUM
        if not tensors:
            return self._completed([])
        flat = torch.cat([t.reshape(-1) for t in tensors])
        inner = dist.AllreduceOptions()
        inner.reduceOp = op
        work = self.allreduce([flat], inner)

        def split():
            offset = 0
            for t in tensors:
                t.copy_(flat[offset:offset + t.numel()].view_as(t))
                offset += t.numel()
            return tensors
        return self._submit(lambda: _WorkHandle(work), split)

    # --- moving bytes ---------------------------------------------------------------------------------

    def _allgather_raw(self, mine, out):
        """Starts the allgather of contiguous `mine` into contiguous `out` (size x mine) as raw words;
        returns a handle whose wait() leaves every rank's bytes in `out`."""
        nbytes = mine.numel() * mine.element_size()
        view = self._raw(mine)
        if view is not None:
            return self._comm.allgather_async(mine.data_ptr(), view[1], view[0], out.data_ptr())
        # An odd byte count (pickled objects in uint8): one padding byte per rank.
        padded = torch.zeros(nbytes + 1, dtype=torch.uint8)
        padded[:nbytes] = mine.reshape(-1).view(torch.uint8)
        everyone = torch.empty((self.size(), nbytes + 1), dtype=torch.uint8)
        inner = self._comm.allgather_async(padded.data_ptr(), (nbytes + 1) // 2, "float16", everyone.data_ptr())
        return _Unpad(inner, everyone, out.reshape(-1).view(torch.uint8).view(self.size(), nbytes), padded)

    def broadcast(self, tensors, opts=None):
        t = self._one(tensors, "broadcast")
        root = opts.rootRank if opts is not None else 0
        buf = t if t.is_contiguous() else t.contiguous()
        nbytes = buf.numel() * buf.element_size()
        view = self._raw(buf)
        if view is None:  # an odd number of bytes: through a padded copy
            padded = torch.zeros(nbytes + 1, dtype=torch.uint8)
            padded[:nbytes] = buf.reshape(-1).view(torch.uint8)

            def unpad():
                buf.reshape(-1).view(torch.uint8).copy_(padded[:nbytes])
                if buf is not t:
                    t.copy_(buf)
                return [t]
            return self._submit(lambda: self._comm.broadcast_async(padded.data_ptr(), (nbytes + 1) // 2, "float16",
                                                                   int(root)), unpad)

        def back():
            if buf is not t:
                t.copy_(buf)
            return [t]
        return self._submit(lambda: self._comm.broadcast_async(buf.data_ptr(), view[1], view[0], int(root)), back)

    def allgather(self, output_tensors, input_tensors, opts=None):
        t = self._one(input_tensors, "all_gather")
        outs = output_tensors[0]
        if len(output_tensors) != 1 or len(outs) != self.size():
            raise InvalidArgument("all_gather: expected one list of %d output tensors" % self.size())
        for i, o in enumerate(outs):
            if o.numel() != t.numel() or o.dtype != t.dtype:
                raise InvalidArgument("all_gather: output %d has %d elements of %s, the input %d of %s"
                                      % (i, o.numel(), o.dtype, t.numel(), t.dtype))
        mine = t.contiguous()
        gathered = torch.empty((self.size(),) + tuple(t.shape), dtype=t.dtype)

        def scatter_out():
            for o, part in zip(outs, gathered):
                o.copy_(part.view_as(o))
            return output_tensors
        return self._submit(lambda: self._allgather_raw(mine, gathered), scatter_out)

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        if output.numel() != input.numel() * self.size():
            raise InvalidArgument("all_gather_into_tensor: the output has %d elements, not %d x %d"
                                  % (output.numel(), self.size(), input.numel()))
        mine = input.contiguous()
        out = output if output.is_contiguous() else torch.empty_like(output, memory_format=torch.contiguous_format)

        def back():
            if out is not output:
                output.copy_(out)
            return [output]
        return self._submit(lambda: self._allgather_raw(mine, out), back)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._allgather_base(o, i) for o, i in zip(outputs, inputs)]
        return works[-1] if works else self._completed([])

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        """all_gather_coalesced: every rank's list of tensors (sizes may differ within the list, alike on
        every rank) into output_lists[rank]: one allgather of their bytes laid end to end."""
        size = self.size()
        if len(output_lists) != size or any(len(outs) != len(input_list) for outs in output_lists):
            raise InvalidArgument("all_gather_coalesced: expected %d output lists of %d tensors each"
                                  % (size, len(input_list)))
        for outs in output_lists:
            for i, (o, t) in enumerate(zip(outs, input_list)):
                if o.numel() != t.numel() or o.dtype != t.dtype:
                    raise InvalidArgument("all_gather_coalesced: output %d has %d elements of %s, input %d has %d of %s"
                                          % (i, o.numel(), o.dtype, i, t.numel(), t.dtype))
        for t in input_list:
            self._one([t], "all_gather_coalesced")
        parts = [t.contiguous().reshape(-1).view(torch.uint8) for t in input_list]
        mine = torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8)
        gathered = torch.empty((size, mine.numel()), dtype=torch.uint8)

        def scatter_out():
            for r, outs in enumerate(output_lists):
                offset = 0
                for o, part in zip(outs, parts):
                    n = part.numel()
                    o.copy_(gathered[r, offset:offset + n].view(o.dtype).view_as(o))
                    offset += n
            return [o for outs in output_lists for o in outs]
        return self._submit(lambda: self._allgather_raw(mine, gathered), scatter_out)

    def gather(self, output_tensors, input_tensors, opts=None):
        t = self._one(input_tensors, "gather")
        root = opts.rootRank if opts is not None else 0
        mine = t.contiguous()
        gathered = torch.empty((self.size(),) + tuple(t.shape), dtype=t.dtype)

        def to_root():
            if self.rank() == root:
                for o, part in zip(output_tensors[0], gathered):
                    o.copy_(part.view_as(o))
            return output_tensors
        return self._submit(lambda: self._allgather_raw(mine, gathered), to_root)

    def scatter(self, output_tensors, input_tensors, opts=None):
        out = self._one(output_tensors, "scatter")
        root = opts.rootRank if opts is not None else 0
        stacked = torch.empty((self.size(),) + tuple(out.shape), dtype=out.dtype)
        if self.rank() == root:
            for part, src in zip(stacked, input_tensors[0]):
                part.copy_(src.view_as(part))
        inner = dist.BroadcastOptions()
        inner.rootRank = root
        work = self.broadcast([stacked], inner)

        def mine():
            out.copy_(stacked[self.rank()])
            return [out]
        return self._submit(lambda: _WorkHandle(work), mine)

    def reduce(self, tensors, opts=None):
        t = self._one(tensors, "reduce")
        root = opts.rootRank if opts is not None else 0
        inner = dist.AllreduceOptions()
        inner.reduceOp = opts.reduceOp if opts is not None else _ReduceOp.SUM
        # Only the root's tensor receives the result; the others keep theirs.
        target = t if self.rank() == root else t.clone()
        work = self.allreduce([target], inner)
        return self._submit(lambda: _WorkHandle(work), lambda: [t])

    # --- reduce-scatter and all-to-all ------------------------------------------------------------

    def _reduce_scatter_flat(self, send, recv, op):
        name = _op_name(op)
        if name is None or send.dtype not in _NATIVE:
            raise InvalidArgument("reduce_scatter: the muster backend reduces SUM, AVG, MIN, MAX of %s, got %s of %s"
                                  % ("/".join(sorted(_NATIVE.values())), op, send.dtype))
        counts = [recv.numel()] * self.size()
        return self._comm.reducescatter_async(send.data_ptr(), recv.data_ptr(), counts, _NATIVE[send.dtype], name)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out = self._one(output_tensors, "reduce_scatter")
        parts = input_tensors[0]
        if len(input_tensors) != 1 or len(parts) != self.size():
            raise InvalidArgument("reduce_scatter: expected one list of %d input tensors" % self.size())
        send = torch.cat([p.reshape(-1) for p in parts])
        recv = torch.empty(out.numel(), dtype=out.dtype)
        op = opts.reduceOp if opts is not None else _ReduceOp.SUM

        def back():
            out.copy_(recv.view_as(out))
            return [out]
        return self._submit(lambda: self._reduce_scatter_flat(send, recv, op), back)

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        if input.numel() != output.numel() * self.size():
            raise InvalidArgument("reduce_scatter_tensor: the input has %d elements, not %d x %d"
                                  % (input.numel(), self.size(), output.numel()))
        send = input.contiguous()
        recv = output if output.is_contiguous() else torch.empty(output.numel(), dtype=output.dtype)
        op = opts.reduceOp if opts is not None else _ReduceOp.SUM

        def back():
            if recv is not output:
                output.copy_(recv.view_as(output))
            return [output]
        return self._submit(lambda: self._reduce_scatter_flat(send, recv, op), back)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        size = self.size()
        row_in = input[0].numel() if input.dim() > 0 and input.shape[0] else 1
        row_out = output[0].numel() if output.dim() > 0 and output.shape[0] else 1
        in_rows = list(input_split_sizes) or [input.shape[0] // size] * size
        out_rows = list(output_split_sizes) or [output.shape[0] // size] * size
        if len(in_rows) != size or len(out_rows) != size:
            raise InvalidArgument("all_to_all_single: split sizes must have %d entries" % size)
        if sum(in_rows) != input.shape[0] or sum(out_rows) != output.shape[0]:
            raise InvalidArgument("all_to_all_single: split sizes %s / %s do not add up to the tensors' first "
                                  "dimensions %d / %d" % (in_rows, out_rows, input.shape[0], output.shape[0]))
        if input.dtype != output.dtype:
            raise InvalidArgument("all_to_all_single: input %s and output %s differ" % (input.dtype, output.dtype))
        send = input.contiguous()
        recv = output if output.is_contiguous() else torch.empty_like(output, memory_format=torch.contiguous_format)
        dtype, unit = self._unit(send)
        send_counts = [r * row_in * unit for r in in_rows]
        recv_counts = [r * row_out * unit for r in out_rows]

        def back():
            if recv is not output:
                output.copy_(recv)
            return [output]
        return self._submit(lambda: self._comm.alltoallv_async(send.data_ptr(), send_counts, recv.data_ptr(),
                                                               recv_counts, dtype), back)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        if len(input_tensors) != self.size() or len(output_tensors) != self.size():
            raise InvalidArgument("all_to_all: expected %d input and %d output tensors" % (self.size(), self.size()))
        dtypes = {t.dtype for t in list(input_tensors) + list(output_tensors)}
        if len(dtypes) != 1:
            raise InvalidArgument("all_to_all: every tensor must have one dtype, got %s" % sorted(map(str, dtypes)))
        send = torch.cat([t.reshape(-1) for t in input_tensors])
        recv = torch.empty(sum(t.numel() for t in output_tensors), dtype=send.dtype)
        dtype, unit = self._unit(send)
        send_counts = [t.numel() * unit for t in input_tensors]
        recv_counts = [t.numel() * unit for t in output_tensors]

        def back():
            offset = 0
            for t in output_tensors:
                t.copy_(recv[offset:offset + t.numel()].view_as(t))
                offset += t.numel()
            return output_tensors
        return self._submit(lambda: self._comm.alltoallv_async(send.data_ptr(), send_counts, recv.data_ptr(),
                                                               recv_counts, dtype), back)

    @staticmethod
    def _unit(t):
        """(runtime dtype, runtime elements per torch element) moving `t`'s bytes unchanged."""
        if t.dtype in _NATIVE:
            return _NATIVE[t.dtype], 1
        if t.element_size() == 1:
            raise InvalidArgument("all_to_all: 8-bit and bool tensors are not offered by the muster backend; "
                                  "convert to int32 or int64")
        return "float16", t.element_size() // 2

    def barrier(self, opts=None):
        return self._submit(lambda: self._comm.barrier_async(), lambda: [])

    # --- point to point (distributed_p2p.py) -----------------------------------------------------------

    def send(self, tensors, dst, tag=0):
        return self._p2p.send(tensors, dst, tag)

    def recv(self, tensors, src, tag=0):
        return self._p2p.recv(tensors, src, tag)

    def recv_anysource(self, tensors, tag=0):
        return self._p2p.recv(tensors, _ANY_SOURCE, tag)

    # batch_isend_irecv wraps its isend/irecv in these: each op starts as it is issued (none waits on
    # another), so the batch needs no grouping of its own.
    def _start_coalescing(self):
        pass

    def _end_coalescing(self, reqs=None):
        pass

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """torch's monitored_barrier (dist.monitored_barrier on a "muster" group comes here): rank 0 waits up to
        `timeout` (default: the group's) for every rank and raises naming those that did not arrive, the first
        in rank order, or all of them with wait_all_ranks; the others pass only if all arrived.

            dist.monitored_barrier(timeout=timedelta(seconds=30), wait_all_ranks=True)
            # rank 0: RuntimeError "... Ranks 2, 3 failed to pass monitoredBarrier in 30000 ms ..."
        """
        timeout = timeout if timeout is not None else self._timeout
        seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
        self._p2p.monitored_barrier(self.rank(), self.size(), max(0.0, seconds), bool(wait_all_ranks))

    # --- lifetime -------------------------------------------------------------------------------------

    def shutdown(self, grace_s=None):
        """Ends the group: its completion thread, then its runtime communicator.

        torch calls this on destroy_process_group in 2.x; in 1.13 it runs when
        the group is collected, or at interpreter exit (_close_open_groups).
        With `grace_s`, ops still in flight after that long (ones no caller
        waited for, on peers that never come) are failed by closing the
        communicator, so exit never hangs on them.
        """
        if self._closed:
            return
        self._closed = True
        _open_groups.discard(self)
        if not self._done.close(grace_s):
            self._comm.close()  # fails the op the thread waits on (CommError), so it ends
            self._done.close(grace_s)
        self._comm.close()  # ends the point-to-point ops still pending: their buffers may go now
        self._p2p.orphans.clear()

    def __del__(self):
        try:
            self.shutdown()
        except Exception:  # noqa: BLE001 - interpreter teardown
            pass


class _Unpad:
    """A padded allgather's handle: wait() copies each rank's bytes (without the pad) into place."""

    def __init__(self, inner, everyone, out_rows, keep):
        self._inner, self._everyone, self._out_rows, self._keep = inner, everyone, out_rows, keep

    def wait(self):
        self._inner.wait()
        self._out_rows.copy_(self._everyone[:, :self._out_rows.shape[1]])


class _WorkHandle:
    """A torch Work as a runtime-like handle (wait()), for ops composed of another op."""

    def __init__(self, work):
        self._work = work

    def wait(self):
        self._work.wait()


def _create(store, rank, size, timeout):
    return MusterProcessGroup(store, rank, size, timeout)


def _register():
    if BACKEND in getattr(dist.Backend, "backend_list", []) or hasattr(dist.Backend, BACKEND.upper()):
        return
    dist.Backend.register_backend(BACKEND, _create)


def _offer_monitored_barrier():
    """torch 1.13's dist.monitored_barrier refuses every backend but gloo by name, before it asks the group:
    a "muster" group answers it itself (MusterProcessGroup.monitored_barrier); any other goes to torch's."""
    original = dist.monitored_barrier
    if getattr(original, "_muster", False):
        return

    @functools.wraps(original)
    def monitored_barrier(group=dist.GroupMember.WORLD, timeout=None, wait_all_ranks=False):
        from torch.distributed import distributed_c10d as c10d
        if c10d._rank_not_in_group(group):
            c10d._warn_not_in_group("monitored_barrier")
            return None
        target = c10d._get_default_group() if group is None else group
        if isinstance(target, MusterProcessGroup):
            return target.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)
        return original(group, timeout, wait_all_ranks)
    monitored_barrier._muster = True
    dist.monitored_barrier = monitored_barrier
    dist.distributed_c10d.monitored_barrier = monitored_barrier


# Groups not yet shut down. At interpreter exit their completion threads must
# have ended before finalization starts: a daemon thread still inside a call
# that released the GIL (torch's Future.set_result does, and so does the
# runtime's Handle.wait) is ended by the GIL's re-acquire during finalization,
# a forced unwind through a C++ noexcept destructor, and the process aborts
# with "terminate called without an active exception" after the script itself
# ended well. atexit handlers run before finalization, so the threads end
# there, each after the op it completes.
_open_groups = weakref.WeakSet()
_EXIT_GRACE_S = 10.0


def _close_open_groups():
    for group in list(_open_groups):
        try:
            group.shutdown(grace_s=_EXIT_GRACE_S)
        except Exception as err:  # noqa: BLE001 - exit goes on; say why this group did not end cleanly
            print("muster backend: at exit, group of rank %d did not close: %s" % (group.rank(), err), file=sys.stderr)


atexit.register(_close_open_groups)
_register()
_offer_monitored_barrier()

# Errors that callers may want by name.
CommError = CommError
PeerTimeoutError = PeerTimeoutError
MismatchError = MismatchError
