"""Horovod's PyTorch collectives over muster's runtime (CPU tensors).

Names and semantics follow horovod.torch: allreduce/allgather/broadcast come
in out-of-place (new tensor, differentiable), in-place (trailing underscore)
and asynchronous (_async, returning an int handle for synchronize()/poll())
forms. Tensors are handed to the C++ communicator by address, with no copy
for contiguous float32/float64/float16/bfloat16/int32/int64 tensors; the GIL is
released while a collective waits.

Ops: Average, Sum, Min, Max, Product (Product runs as an allgather and a
local product). Adasum is not implemented (NotImplementedError).
"""
import threading
import time

import torch

from .. import runtime as _rt
from ..runtime_errors import InvalidArgument, MismatchError
from .compression import Compression
from .world import rank, size

Average, Sum, Adasum, Min, Max, Product = "average", "sum", "adasum", "min", "max", "product"

_NATIVE = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
           torch.bfloat16: "bfloat16", torch.int32: "int32", torch.int64: "int64"}
# Reduced through a wider type (the runtime has no 8/16-bit integer kernels).
_WIDEN = {torch.uint8: torch.int64, torch.int8: torch.int64, torch.int16: torch.int64, torch.bool: torch.int64}

_handles = {}        # int -> (runtime.Handle, result thunk)
_next_handle = [0]
_lock = threading.Lock()


# --- tensors <-> the runtime ---------------------------------------------------

def _check_tensor(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise InvalidArgument("%s takes a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.device.type != "cpu":
        raise InvalidArgument("%s: muster.torch reduces CPU tensors; got one on %s" % (what, tensor.device))
    if tensor.is_sparse:
        raise InvalidArgument("%s: sparse tensors are not supported (use a dense tensor)" % what)


def _op_of(average, op, what):
    if average is not None:
        if op is not None:
            raise ValueError("%s: give either average= (deprecated) or op=, not both" % what)
        return Average if average else Sum
    op = Average if op is None else op
    if op == Adasum:
        raise NotImplementedError("%s: op=Adasum is not implemented by muster.torch; use Average or Sum" % what)
    if op not in (Average, Sum, Min, Max, Product):
        raise ValueError("%s: unknown op %r (Average, Sum, Min, Max, Product)" % (what, op))
    return op


def _new_handle(h, result):
    with _lock:
        _next_handle[0] += 1
        hid = _next_handle[0]
        _handles[hid] = (h, result)
    return hid


def synchronize(handle):
    """Waits for the async op `handle` and returns its output tensor."""
    with _lock:
        entry = _handles.pop(handle, None)
    if entry is None:
        raise ValueError("synchronize(%r): not a pending handle (already synchronized?)" % (handle,))
    h, result = entry
    h.wait()
    return result()


def poll(handle):
    """True when the async op `handle` is done (synchronize() will not block)."""
    with _lock:
        entry = _handles.get(handle)
    if entry is None:
        raise ValueError("poll(%r): not a pending handle" % (handle,))
    return entry[0].done()


def _reduce_async(buf, op):
    """Starts an in-place reduction of contiguous `buf`; returns a runtime.Handle."""
    comm = _rt.collective_communicator()
    if op == Product:
        def finish():
            parts = allgather(buf.reshape((1,) + tuple(buf.shape)))
            buf.copy_(parts.prod(dim=0))
        return _rt.Handle(None, keep=buf, finish=finish)
    dtype = _NATIVE[buf.dtype]
    native = comm.allreduce_async(buf.data_ptr(), buf.numel(), dtype, op)
    return _rt.Handle(native, keep=buf)


def _allreduce_into(tensor, out, op, compression, prescale_factor, postscale_factor):
    """Starts reducing `tensor` into `out` (which may be `tensor`); returns (handle, result thunk)."""
    wire, ctx = compression.compress(tensor.detach())
    widen = _WIDEN.get(wire.dtype)
    if widen is not None:
        wire = wire.to(widen)
    if wire.dtype not in _NATIVE:
        raise InvalidArgument("allreduce: dtype %s cannot be reduced" % tensor.dtype)
    wire = wire.contiguous()
    if wire.numel() and wire.data_ptr() == tensor.data_ptr():
        wire = wire.clone()  # reduced in place: never in the caller's tensor
    if prescale_factor != 1.0:
        wire.mul_(prescale_factor)
    h = _reduce_async(wire, op)

    def result():
        r = compression.decompress(wire, ctx)
        if postscale_factor != 1.0:
            r = r * postscale_factor
        out.copy_(r.reshape(out.shape))
        return out
    return h, result


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=None):
    """Starts reducing `tensor` in place; synchronize(handle) returns it."""
    _check_tensor(tensor, "allreduce_async_")
    op = _op_of(average, op, "allreduce_async_")
    if tensor.is_contiguous() and tensor.dtype in _NATIVE and prescale_factor == 1.0:
        h = _reduce_async(tensor.detach(), op)

        def result():
            if postscale_factor != 1.0:
                tensor.data.mul_(postscale_factor)
            return tensor
        return _new_handle(h, result)
    h, result = _allreduce_into(tensor, tensor.detach(), op, Compression.none, prescale_factor, postscale_factor)
    return _new_handle(h, lambda: (result(), tensor)[1])


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=None):
    """Starts reducing a copy of `tensor`; synchronize(handle) returns the new tensor."""
    _check_tensor(tensor, "allreduce_async")
    op = _op_of(average, op, "allreduce_async")
    out = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    h, result = _allreduce_into(tensor, out, op, Compression.none, prescale_factor, postscale_factor)
    return _new_handle(h, result)


class _AllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, compression, prescale_factor, postscale_factor):
        ctx.args = (op, prescale_factor, postscale_factor)
        out = torch.empty_like(tensor, memory_format=torch.contiguous_format)
        h, result = _allreduce_into(tensor, out, op, compression, prescale_factor, postscale_factor)
        h.wait()
        return result()

    @staticmethod
    def backward(ctx, grad):
        op, pre, post = ctx.args
        return allreduce(grad, op=op, prescale_factor=pre, postscale_factor=post), None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """The reduction of `tensor` over all ranks, as a new tensor (default op Average; differentiable)."""
    _check_tensor(tensor, "allreduce")
    op = _op_of(average, op, "allreduce")
    return _AllreduceFn.apply(tensor, op, compression, prescale_factor, postscale_factor)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=None):
    """Reduces `tensor` in place over all ranks and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return [allreduce(t, average, name, compression, op, prescale_factor, postscale_factor) for t in tensors]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=None):
    handles = [allreduce_async_(t, average, name, op, prescale_factor, postscale_factor) for t in tensors]
    return [synchronize(h) for h in handles]


# --- allgather, broadcast, alltoall ----------------------------------------------

def _allgather(tensor):
    """(every rank's tensor concatenated along dim 0, rows per rank)."""
    _check_tensor(tensor, "allgather")
    t = tensor.detach().contiguous()
    if t.dim() == 0:
        raise InvalidArgument("allgather: the tensor needs at least one dimension (it concatenates along dim 0)")
    tails = _rt.allgather_bytes(repr((tuple(t.shape[1:]), str(t.dtype))).encode())
    if len(set(tails)) != 1:
        raise MismatchError("allgather: ranks disagree about dtype or shape after dim 0: %s" % "; ".join(
            "rank %d %s" % (r, s.decode()) for r, s in enumerate(tails)))
    parts = _rt.allgather_bytes(_as_bytes(t).numpy().tobytes())
    row = t.element_size()
    for d in t.shape[1:]:
        row *= d
    counts = [len(p) // row if row else 0 for p in parts]
    joined = b"".join(parts)
    flat = torch.frombuffer(bytearray(joined), dtype=torch.uint8) if joined else torch.empty(0, dtype=torch.uint8)
    return flat.view(t.dtype).reshape((sum(counts),) + tuple(t.shape[1:])), counts


def _as_bytes(t):
    """A contiguous tensor's memory as a flat uint8 tensor (same storage)."""
    return t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)


class _AllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor):
        out, counts = _allgather(tensor)
        ctx.counts = counts
        return out

    @staticmethod
    def backward(ctx, grad):
        summed = allreduce(grad, op=Sum)
        offset = sum(ctx.counts[:rank()])
        return summed.narrow(0, offset, ctx.counts[rank()])


def allgather(tensor, name=None, process_set=None):
    """Every rank's `tensor` concatenated along dim 0 (sizes of dim 0 may differ per rank)."""
    return _AllgatherFn.apply(tensor)


def allgather_async(tensor, name=None, process_set=None):
    out = allgather(tensor)
    return _new_handle(_rt.Handle(None), lambda: out)


def grouped_allgather(tensors, name=None, process_set=None):
    return [allgather(t) for t in tensors]


def _check_root(root_rank, what):
    if not isinstance(root_rank, int) or root_rank < 0 or root_rank >= size():
        raise InvalidArgument("%s: root_rank %r is not a rank of this world (size %d)" % (what, root_rank, size()))


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    """Starts copying root's `tensor` into every rank's, in place."""
    _check_tensor(tensor, "broadcast_async_")
    _check_root(root_rank, "broadcast")
    t = tensor.detach()
    if t.numel() == 0:
        return _new_handle(_rt.Handle(None), lambda: tensor)
    if t.is_contiguous():
        return _new_handle(_rt.broadcast_async(_as_bytes(t).numpy(), root_rank), lambda: tensor)
    buf = t.contiguous()
    h = _rt.broadcast_async(_as_bytes(buf).numpy(), root_rank)

    def result():
        t.copy_(buf)
        return tensor
    return _new_handle(h, result)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    _check_tensor(tensor, "broadcast_async")
    return broadcast_async_(tensor.detach().clone(memory_format=torch.contiguous_format), root_rank)


class _BroadcastFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank):
        ctx.root_rank = root_rank
        return synchronize(broadcast_async(tensor, root_rank))

    @staticmethod
    def backward(ctx, grad):
        summed = allreduce(grad, op=Sum)
        if rank() != ctx.root_rank:
            summed = summed * 0
        return summed, None


def broadcast(tensor, root_rank, name=None, process_set=None):
    """Root's `tensor` as a new tensor on every rank (differentiable)."""
    _check_tensor(tensor, "broadcast")
    return _BroadcastFn.apply(tensor, root_rank)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    """Copies root's `tensor` into every rank's `tensor`, in place; returns it."""
    return synchronize(broadcast_async_(tensor, root_rank))


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Scatters slices of `tensor` (along dim 0, `splits[i]` rows to rank i; equal parts by default)
    and gathers what every rank sent here, concatenated in rank order.

    Returns (output, received_splits), as Horovod does. The runtime has no
    alltoall primitive: this runs as one allgather of every rank's send
    buffer, so it moves size() times the bytes a point-to-point alltoall would.
    """
    _check_tensor(tensor, "alltoall")
    n = size()
    if splits is None:
        if tensor.shape[0] % n:
            raise InvalidArgument("alltoall: dim 0 (%d) is not divisible by the world size %d; pass splits"
                                  % (tensor.shape[0], n))
        splits = [tensor.shape[0] // n] * n
    splits = [int(s) for s in (splits.tolist() if isinstance(splits, torch.Tensor) else splits)]
    if len(splits) != n or sum(splits) != tensor.shape[0] or min(splits) < 0:
        raise InvalidArgument("alltoall: splits %s must have one entry per rank (%d) summing to dim 0 (%d)"
                              % (splits, n, tensor.shape[0]))
    all_splits = _rt.allgather_bytes(repr(splits).encode())
    all_splits = [eval(s.decode(), {"__builtins__": {}}) for s in all_splits]  # noqa: S307 - our own repr of ints
    gathered, counts = _allgather(tensor)
    me, out, received = rank(), [], []
    offset = 0
    for r in range(n):
        start = offset + sum(all_splits[r][:me])
        out.append(gathered.narrow(0, start, all_splits[r][me]))
        received.append(all_splits[r][me])
        offset += counts[r]
    return torch.cat(out, dim=0), torch.tensor(received, dtype=torch.int32)


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    result = alltoall(tensor, splits)
    return _new_handle(_rt.Handle(None), lambda: result)


def barrier(process_set=None):
    """Returns when every rank has called barrier()."""
    _rt.barrier()


def join(device=-1):
    """Waits for every rank to join; returns the rank that joined last.

    Unlike Horovod, ranks that joined do not stand in for the others' later
    collectives with zeros: call join() when every rank is done with them.
    """
    import struct
    stamps = _rt.allgather_bytes(struct.pack("<d", time.time()))
    times = [struct.unpack("<d", s)[0] for s in stamps]
    return max(range(len(times)), key=lambda r: times[r])

