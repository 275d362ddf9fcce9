"""Horovod's PyTorch collectives on muster's runtime (CPU tensors), with Horovod's semantics.

Every op comes out-of-place (a new tensor, differentiable), in place
(trailing underscore) and asynchronous (`_async`, returning an int handle
for synchronize()/poll()); each takes name= and process_set=. A call queues
a request with its process set's engine (engine.py), which agrees with the
other ranks on what every rank has asked for and runs it, fused, in one
order on every rank. So, as in Horovod:
  - ops are matched across ranks by name (unnamed ops by their order among
    unnamed ops of their kind), not by the order each rank issued them in;
    two ops in flight with one name raise ValueError (InvalidArgument);
  - ranks that pass different dtypes, shapes, roots, ops or scale factors
    get a MismatchError (a RuntimeError) on every rank, naming the ranks and
    what differs, and the world stays usable;
  - after hvd.join() a rank contributes zeros to the others' allreduces.

Ops: Average, Sum, Min, Max, Product, and Adasum (allreduce only, CPU, a
power-of-two number of ranks, as in Horovod). Gradients follow Horovod's
definitions: allreduce's is the same allreduce of the gradient; allgather's
and broadcast's are the averaged gradient (broadcast's only on the root);
alltoall's is the alltoall back; reducescatter's is the allgather of the
gradient (times the set's size for Sum).

Example::

    import muster.torch as hvd
    hvd.init()
    h = hvd.allreduce_async(torch.ones(3), name="x", op=hvd.Sum)
    total = hvd.synchronize(h)                        # tensor([n, n, n])
    rows = hvd.allgather(torch.full((hvd.rank() + 1, 2), hvd.rank()))
"""
import threading

import torch

from ..runtime_errors import InvalidArgument
from . import process_sets as _ps
from . import state as _state
from .compression import Compression
from .execution import Work, dtype_name
from .process_sets import global_process_set

Average, Sum, Adasum, Min, Max, Product = "average", "sum", "adasum", "min", "max", "product"
_OPS = (Average, Sum, Adasum, Min, Max, Product)

_handles = {}        # int -> engine.Handle
_next_handle = [0]
_lock = threading.Lock()


# --- handles -------------------------------------------------------------------

def _new_handle(handle):
    with _lock:
        _next_handle[0] += 1
        _handles[_next_handle[0]] = handle
        return _next_handle[0]


def synchronize(handle):
    """Waits for the async op `handle` and returns its output (a tensor, a list, or alltoall's pair)."""
    with _lock:
        h = _handles.pop(handle, None)
    if h is None:
        raise ValueError("synchronize(%r): not a pending handle (already synchronized?)" % (handle,))
    return h.wait()  # frees the op's name for the next call


def poll(handle):
    """True when the async op `handle` is done (synchronize() will not block)."""
    with _lock:
        h = _handles.get(handle)
    if h is None:
        raise ValueError("poll(%r): not a pending handle" % (handle,))
    if h.done():
        h.release()
        return True
    return False


def forget_handles():
    with _lock:
        _handles.clear()


# --- checks --------------------------------------------------------------------

def _check_tensor(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise InvalidArgument("%s takes a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.device.type != "cpu":
        raise InvalidArgument("%s: muster.torch reduces CPU tensors; got one on %s (move it with .cpu())"
                              % (what, tensor.device))
    if tensor.is_sparse:
        raise InvalidArgument("%s: a sparse tensor; use hvd.sparse_allreduce_async or a dense tensor" % what)


def _op_of(average, op, what, default=Average):
    if average is not None:
        if op is not None:
            raise ValueError("%s: give either average= (deprecated) or op=, not both" % what)
        return Average if average else Sum
    op = default if op is None else op
    if op not in _OPS:
        raise ValueError("%s: unknown op %r (hvd.Average, Sum, Min, Max, Product, Adasum)" % (what, op))
    return op


def _check_adasum(op, engine, what):
    if op != Adasum:
        return
    if engine.world_ranks != list(range(_state.world_size())):
        raise NotImplementedError("%s: Adasum does not support non-global process sets (as in Horovod)" % what)
    n = engine.size
    if n & (n - 1):
        raise NotImplementedError("%s: Adasum runs on a power-of-two number of ranks (as in Horovod); this job "
                                  "has %d" % (what, n))


def _desc(tensors, **extra):
    d = {"dtypes": [dtype_name(t.dtype) for t in tensors], "shapes": [list(t.shape) for t in tensors]}
    d.update(extra)
    return d


def _contiguous(t):
    return t.detach().contiguous()


def _submit(process_set, kind, name, desc, work):
    return _ps.engine_of(process_set, kind).submit(kind, name, desc, work, hold_name=True)


# --- allreduce -----------------------------------------------------------------

def _allreduce_submit(tensors, outputs, name, op, pre, post, process_set, single, what, after=None):
    for t in tensors:
        _check_tensor(t, what)
    engine = _ps.engine_of(process_set, what)
    _check_adasum(op, engine, what)
    inputs = [_contiguous(t) for t in tensors]
    desc = _desc(inputs, op=op, pre=float(pre), post=float(post))
    work = Work(inputs, outputs, single=single, after=after)
    return engine.submit("allreduce", name, desc, work, hold_name=True)


def _out_like(t):
    return torch.empty(t.shape, dtype=t.dtype)


def _in_place_outputs(tensors):
    """Outputs for an in-place op: the tensors themselves, or contiguous copies written back afterwards."""
    outs, backs = [], []
    for t in tensors:
        d = t.detach()
        if d.is_contiguous():
            outs.append(d)
        else:
            c = d.contiguous()
            outs.append(c)
            backs.append((d, c))
    return outs, backs


def _write_back(backs, result):
    for d, c in backs:
        d.copy_(c)
    return result


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts reducing `tensor` over the process set; synchronize(handle) returns a new tensor."""
    op = _op_of(average, op, "allreduce_async")
    h = _allreduce_submit([tensor], [_out_like(tensor)], name, op, prescale_factor, postscale_factor,
                          process_set, True, "allreduce")
    return _new_handle(h)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts reducing `tensor` in place; synchronize(handle) returns it."""
    op = _op_of(average, op, "allreduce_async_")
    _check_tensor(tensor, "allreduce_async_")
    outs, backs = _in_place_outputs([tensor])
    h = _allreduce_submit([tensor], outs, name, op, prescale_factor, postscale_factor, process_set, True,
                          "allreduce", after=lambda _: _write_back(backs, tensor))
    return _new_handle(h)


class _AllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        return synchronize(allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor,
                                           process_set))

    @staticmethod
    def backward(ctx, grad):
        average, op, pre, post, process_set = ctx.args
        return (allreduce(grad, average=average, op=op, prescale_factor=pre, postscale_factor=post,
                          process_set=process_set), None, None, None, None, None, None)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """The reduction of `tensor` over the process set, as a new tensor (default op Average; differentiable)."""
    _check_tensor(tensor, "allreduce")
    wire, ctx = compression.compress(tensor)
    out = _AllreduceFn.apply(wire, average, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(out, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Reduces `tensor` in place over the process set and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Starts reducing a list of tensors as one fused op; synchronize() returns a list of new tensors."""
    op = _op_of(average, op, "grouped_allreduce_async")
    tensors = list(tensors)
    h = _allreduce_submit(tensors, [_out_like(t) for t in tensors], name, op, prescale_factor, postscale_factor,
                          process_set, False, "grouped_allreduce")
    return _new_handle(h)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    """Starts reducing a list of tensors in place, as one fused op."""
    op = _op_of(average, op, "grouped_allreduce_async_")
    tensors = list(tensors)
    for t in tensors:
        _check_tensor(t, "grouped_allreduce_async_")
    outs, backs = _in_place_outputs(tensors)
    h = _allreduce_submit(tensors, outs, name, op, prescale_factor, postscale_factor, process_set, False,
                          "grouped_allreduce", after=lambda _: _write_back(backs, tensors))
    return _new_handle(h)


class _GroupedAllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(grouped_allreduce_async(list(tensors), average, name, op, prescale_factor,
                                                         postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        average, op, pre, post, process_set = ctx.args
        reduced = grouped_allreduce(list(grads), average=average, op=op, prescale_factor=pre,
                                    postscale_factor=post, process_set=process_set)
        return (None, None, None, None, None, None) + tuple(reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of tensors as one fused op; returns a list of new tensors (differentiable)."""
    tensors = list(tensors)
    for t in tensors:
        _check_tensor(t, "grouped_allreduce")
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedAllreduceFn.apply(average, name, op, prescale_factor, postscale_factor, process_set,
                                     *[w for w, _ in pairs])
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """Reduces a list of tensors in place as one fused op; returns them."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


# --- allgather -------------------------------------------------------------------

def _allgather_submit(tensors, name, process_set, single, what):
    for t in tensors:
        _check_tensor(t, what)
        if t.dim() == 0:
            raise InvalidArgument("%s: the tensor needs at least one dimension (it concatenates along dim 0)"
                                  % what)
    inputs = [_contiguous(t) for t in tensors]
    return _submit(process_set, "allgather", name, _desc(inputs), Work(inputs, single=single))


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's `tensor` along dim 0 (its size may differ per rank)."""
    return _new_handle(_allgather_submit([tensor], name, process_set, True, "allgather"))


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts allgathering a list of tensors as one fused op; synchronize() returns a list."""
    return _new_handle(_allgather_submit(list(tensors), name, process_set, False, "grouped_allgather"))


class _AllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0]
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce(grad, average=True, process_set=ctx.process_set)
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int64), process_set=ctx.process_set)
        offset = int(dims[:_ps.rank_in(ctx.process_set)].sum())
        return reduced.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's `tensor` concatenated along dim 0, in rank order (differentiable)."""
    _check_tensor(tensor, "allgather")
    return _AllgatherFn.apply(tensor, name, process_set)


class _GroupedAllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        reduced = grouped_allreduce(list(grads), average=True, process_set=ctx.process_set)
        dims = grouped_allgather([torch.tensor([d], dtype=torch.int64) for d in ctx.dims],
                                 process_set=ctx.process_set)
        me = _ps.rank_in(ctx.process_set)
        return (None, None) + tuple(r.narrow(0, int(d[:me].sum()), dim)
                                    for r, d, dim in zip(reduced, dims, ctx.dims))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers a list of tensors as one fused op; returns a list (differentiable)."""
    tensors = list(tensors)
    for t in tensors:
        _check_tensor(t, "grouped_allgather")
    return list(_GroupedAllgatherFn.apply(name, process_set, *tensors))


# --- broadcast -------------------------------------------------------------------

def _check_root(root_rank, process_set, what):
    ranks = _ps.ranks_of(process_set)
    if not isinstance(root_rank, int) or isinstance(root_rank, bool) or root_rank not in ranks:
        raise InvalidArgument("%s: root_rank %r is not a rank of the process set (ranks %s)"
                              % (what, root_rank, ranks))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying root's `tensor` into every rank's, in place; synchronize() returns it."""
    _check_tensor(tensor, "broadcast_async_")
    _check_root(root_rank, process_set, "broadcast")
    outs, backs = _in_place_outputs([tensor])
    work = Work([outs[0]], outs, after=lambda _: _write_back(backs, tensor))
    return _new_handle(_submit(process_set, "broadcast", name, _desc(outs, root=root_rank), work))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting root's `tensor`; synchronize() returns a new tensor (the input is unchanged)."""
    _check_tensor(tensor, "broadcast_async")
    _check_root(root_rank, process_set, "broadcast")
    out = tensor.detach().clone(memory_format=torch.contiguous_format)
    return _new_handle(_submit(process_set, "broadcast", name, _desc([out], root=root_rank), Work([out], [out])))


class _BroadcastFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce(grad, average=True, process_set=ctx.process_set)
        if _state.world_rank() != ctx.root_rank:
            reduced = reduced * 0
        return reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Root's `tensor` as a new tensor on every rank of the process set (differentiable)."""
    _check_tensor(tensor, "broadcast")
    return _BroadcastFn.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Copies root's `tensor` into every rank's `tensor`, in place; returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# --- alltoall --------------------------------------------------------------------

def _splits_list(tensor, splits, n, what):
    if splits is None:
        if tensor.dim() == 0 or tensor.shape[0] % n:
            raise InvalidArgument("%s: the first dimension (%s) is not divisible by the process set's size %d; "
                                  "pass splits" % (what, tuple(tensor.shape)[:1], n))
        return [tensor.shape[0] // n] * n
    if isinstance(splits, torch.Tensor):
        if splits.dtype not in (torch.int32, torch.int64):
            raise InvalidArgument("%s: splits must hold 32-bit integers (torch.int32), got %s" % (what, splits.dtype))
        values = [int(s) for s in splits.reshape(-1).tolist()]
    else:
        values = list(splits)
        if any(not isinstance(s, int) or isinstance(s, bool) for s in values):
            raise InvalidArgument("%s: splits must be integers, got %r" % (what, splits))
    if len(values) != n:
        raise InvalidArgument("%s: %d splits for a process set of %d ranks" % (what, len(values), n))
    if min(values, default=0) < 0:
        raise InvalidArgument("%s: splits must not be negative: %s" % (what, values))
    rows = tensor.shape[0] if tensor.dim() else 1
    if sum(values) > rows:
        raise InvalidArgument("%s: splits %s add up to %d rows, more than the tensor's first dimension (%d)"
                              % (what, values, sum(values), rows))
    return values


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall; synchronize() returns (output, received_splits)."""
    return _new_handle(_alltoall_submit(tensor, splits, name, process_set, True))


def _alltoall_submit(tensor, splits, name, process_set, returns_splits):
    _check_tensor(tensor, "alltoall")
    engine = _ps.engine_of(process_set, "alltoall")
    values = _splits_list(tensor, splits, engine.size, "alltoall")
    t = _contiguous(tensor)
    work = Work([t], splits=values, returns_splits=returns_splits)
    return engine.submit("alltoall", name, _desc([t], splits=values), work, hold_name=True)


class _AlltoallFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = _alltoall_submit(tensor, splits, name, process_set, True).wait()
        ctx.process_set = process_set
        ctx.received = received
        if splits is None:
            return out
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, *unused):
        back, _ = alltoall(grad, splits=ctx.received, process_set=ctx.process_set)
        return back, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends rows of `tensor` to every rank (splits[i] rows to rank i; equal parts when splits is None).

    Returns the rows every rank sent here, in rank order, and, when `splits`
    was given, the rows received from each rank (an int32 tensor), as Horovod
    does. Differentiable.
    """
    return _AlltoallFn.apply(tensor, splits, name, process_set)


# --- reducescatter ---------------------------------------------------------------

def _reducescatter_submit(tensors, name, op, pre, post, process_set, single, what):
    for t in tensors:
        _check_tensor(t, what)
        if t.dim() == 0:
            raise InvalidArgument("%s: a scalar cannot be scattered; the tensor needs a first dimension" % what)
    if op == Adasum:
        raise NotImplementedError("%s: Adasum is not a reducescatter op (as in Horovod): use Sum or Average" % what)
    if op not in (Sum, Average, Min, Max):
        raise InvalidArgument("%s: op %r; reducescatter takes Sum, Average, Min or Max" % (what, op))
    inputs = [_contiguous(t) for t in tensors]
    desc = _desc(inputs, op=op, pre=float(pre), post=float(post))
    return _submit(process_set, "reducescatter", name, desc, Work(inputs, single=single))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts reducing `tensor` over the set and scattering its rows (rank i gets the i-th block)."""
    return _new_handle(_reducescatter_submit([tensor], name, op, prescale_factor, postscale_factor, process_set,
                                             True, "reducescatter"))


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter_async of a list of tensors as one fused op."""
    return _new_handle(_reducescatter_submit(list(tensors), name, op, prescale_factor, postscale_factor,
                                             process_set, False, "grouped_reducescatter"))


class _ReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.args = (op, process_set, prescale_factor, postscale_factor)
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad):
        grad = _reducescatter_grad(grad, *ctx.args)
        return allgather(grad, process_set=ctx.args[1]), None, None, None, None, None


def _reducescatter_grad(grad, op, process_set, pre, post):
    if op == Sum:
        grad = grad * _ps.size_of(process_set)
    if pre != 1.0:
        grad = grad * pre
    if post != 1.0:
        grad = grad * post
    return grad


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """This rank's block of rows of the reduction of `tensor` over the set (differentiable).

    Rows are split as evenly as possible; the first (rows % size) ranks get one more.
    """
    _check_tensor(tensor, "reducescatter")
    wire, ctx = compression.compress(tensor)
    out = _ReducescatterFn.apply(wire, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(out, ctx)


class _GroupedReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.args = (op, process_set, prescale_factor, postscale_factor)
        return tuple(synchronize(grouped_reducescatter_async(list(tensors), name, op, process_set,
                                                             prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grads):
        grads = [_reducescatter_grad(g, *ctx.args) for g in grads]
        return (None, None, None, None, None) + tuple(grouped_allgather(grads, process_set=ctx.args[1]))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of a list of tensors as one fused op; returns a list (differentiable)."""
    tensors = list(tensors)
    for t in tensors:
        _check_tensor(t, "grouped_reducescatter")
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedReducescatterFn.apply(name, op, process_set, prescale_factor, postscale_factor,
                                         *[w for w, _ in pairs])
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]


# --- sparse ------------------------------------------------------------------------

def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Starts reducing a sparse (COO) tensor: its indices and values are allgathered.

    Returns a callable (not an int handle, as in Horovod) that waits and
    returns the reduced sparse tensor; duplicate indices from different
    ranks are summed when it is coalesced. op: Average or Sum.
    """
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise InvalidArgument("sparse_allreduce_async takes a sparse COO tensor")
    if op not in (Average, Sum):
        raise InvalidArgument("sparse_allreduce_async: op %r; Average or Sum" % (op,))
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    indices = _allgather_submit([t._indices().t().contiguous()], "%s.indices" % name, process_set, True,
                                "sparse_allreduce_async")
    values = _allgather_submit([t._values()], "%s.values" % name, process_set, True, "sparse_allreduce_async")
    n = _ps.size_of(process_set)

    def result():
        v = values.wait()
        i = indices.wait()
        if op == Average:
            v = v / n
        return torch.sparse_coo_tensor(i.t(), v, t.size())
    return result


# --- barrier, join -----------------------------------------------------------------

def barrier(process_set=global_process_set):
    """Returns once every rank of the process set has called barrier()."""
    _submit(process_set, "barrier", None, {}, Work(())).wait()


def join(device=-1):
    """This rank is done: until every rank has joined, it stands in for the others' allreduces with zeros.

    Blocks until every rank has called join(); returns the rank that joined
    last (the same on every rank). While some ranks have joined, allgather,
    broadcast, alltoall and reducescatter raise on the others (a joined rank
    has no tensor to give). `device` is accepted for Horovod's signature
    (muster.torch runs on the CPU).
    """
    return _ps.engine_of(global_process_set, "join").join().wait()
