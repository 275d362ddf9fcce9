"""Horovod's helpers for starting every rank from the same state.

broadcast_parameters / broadcast_optimizer_state / broadcast_object copy
rank `root_rank`'s model, optimizer state and any picklable object to every
rank; allgather_object collects one object per rank.

Example (Horovod's recipe)::

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    epoch = hvd.broadcast_object(epoch, root_rank=0)
"""
import io
import pickle

import torch

from ..runtime_errors import MismatchError
from . import mpi_ops
from . import state as _state
from .process_sets import global_process_set


_calls = {}  # (function, process set id) -> calls so far: the names of unnamed object ops


def _name(function, name, process_set):
    """`name`, or the function's own count of unnamed calls: every rank calls these functions alike, even where
    its other unnamed ops differ (a rank that failed an op the others never issued)."""
    if name:
        return name
    key = (function, getattr(process_set, "process_set_id", 0))
    n = _calls.get(key, 0)
    _calls[key] = n + 1
    return "%s.%d" % (function, n)


def forget_calls():
    """Resets the counts (hvd.shutdown): a new world starts from zero on every rank."""
    _calls.clear()


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Root's `obj` (anything torch.save can write) on every rank of the process set."""
    mpi_ops._check_root(root_rank, process_set, "broadcast_object")
    name = _name("broadcast_object", name, process_set)
    if _state.world_rank() == root_rank:
        buf = io.BytesIO()
        torch.save(obj, buf)
        payload = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        length = torch.zeros(1, dtype=torch.int64)
    mpi_ops.broadcast_(length, root_rank, name=name + ".sz", process_set=process_set)
    if _state.world_rank() != root_rank:
        payload = torch.zeros(int(length[0]), dtype=torch.uint8)
    mpi_ops.broadcast_(payload, root_rank, name=name + ".t", process_set=process_set)
    if _state.world_rank() == root_rank:
        return obj
    return torch.load(io.BytesIO(payload.numpy().tobytes()))


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's `obj` (picklable), as a list in the process set's rank order."""
    name = _name("allgather_object", name, process_set)
    data = pickle.dumps(obj)
    payload = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    sizes, gathered = mpi_ops.grouped_allgather([torch.tensor([len(data)], dtype=torch.int64), payload],
                                                name=name, process_set=process_set)
    out, offset = [], 0
    raw = gathered.numpy().tobytes()
    for n in sizes.tolist():
        out.append(pickle.loads(raw[offset:offset + n]))
        offset += n
    return out


def _named_tensors(params, what):
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list) or hasattr(params, "__iter__"):
        items = list(params)
        for item in items:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise ValueError("%s: pass a state_dict or model.named_parameters() (name, tensor) pairs" % what)
    else:
        raise ValueError("%s: invalid params of type %s" % (what, type(params).__name__))
    return items


def broadcast_parameters(params, root_rank):
    """Copies root's parameters/buffers, in place, into every rank's.

    `params`: model.state_dict() or model.named_parameters() (or any list of
    (name, tensor) pairs in the same order on every rank).
    """
    items = _named_tensors(params, "broadcast_parameters")
    _check_same(items, "broadcast_parameters")
    handles = []
    for _, p in items:
        if p is None:
            continue
        if isinstance(p, torch.Tensor):
            handles.append(mpi_ops.broadcast_async_(p.data if p.requires_grad else p, root_rank))
    for h in handles:
        mpi_ops.synchronize(h)


def _check_same(items, what, process_set=global_process_set):
    """Every rank passes the same names, shapes and dtypes, or MismatchError naming the first difference."""
    mine = [(str(n), tuple(p.shape) if isinstance(p, torch.Tensor) else None,
             str(p.dtype) if isinstance(p, torch.Tensor) else type(p).__name__) for n, p in items]
    everyone = allgather_object(mine, process_set=process_set)
    raise_on_mismatch(everyone, what)


def raise_on_mismatch(everyone, what):
    """`everyone[r]` is rank r's list of (name, shape, dtype); raises MismatchError on any difference."""
    base = everyone[0]
    for r, other in enumerate(everyone[1:], start=1):
        if other == base:
            continue
        names0 = {e[0]: e for e in base}
        namesr = {e[0]: e for e in other}
        for name in names0:
            if name not in namesr:
                raise MismatchError("%s: parameter '%s' is on rank 0 but not on rank %d" % (what, name, r))
        for name in namesr:
            if name not in names0:
                raise MismatchError("%s: parameter '%s' is on rank %d but not on rank 0" % (what, name, r))
        for e0, er in zip(base, other):
            if e0 != er:
                if e0[0] != er[0]:
                    raise MismatchError("%s: parameters in a different order: rank 0 has '%s' where rank %d has '%s'"
                                        % (what, e0[0], r, er[0]))
                raise MismatchError("%s: parameter '%s' is %s %s on rank 0 but %s %s on rank %d"
                                    % (what, e0[0], e0[2], list(e0[1] or ()), er[2], list(er[1] or ()), r))
        raise MismatchError("%s: rank 0 registers %d parameters, rank %d %d" % (what, len(base), r, len(other)))


def _init_state(optimizer):
    """Creates the optimizer's lazily made state (momentum, Adam moments) with a zero-gradient step.

    The parameters are restored afterwards, so only the state (zeros, step
    counts) changes. A parameter that had no gradient keeps the zero one (as
    in Horovod), which is the gradient of no step at all.
    """
    saved, grads = [], []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if not p.requires_grad:
                continue
            saved.append((p, p.detach().clone()))
            grads.append((p, p.grad))
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            else:
                p.grad = torch.zeros_like(p.grad)
            if isinstance(optimizer, torch.optim.SparseAdam):
                p.grad = p.grad.to_sparse()  # it refuses dense gradients
    step = getattr(optimizer, "_muster_plain_step", optimizer.step)
    step()
    with torch.no_grad():
        for p, value in saved:
            p.copy_(value)
    for p, g in grads:
        if g is None:
            p.grad.zero_()
        else:
            p.grad = g


def load_state_in_place(optimizer, saved):
    """optimizer.load_state_dict(saved), copying into the optimizer's own tensors.

    Optimizer.load_state_dict deep-copies the whole state first: a fresh
    allocation of the model's size (or twice it) on every recovery. Returns
    False, touching nothing, when the layout differs (load_state_dict then).
    """
    groups, saved_groups = optimizer.param_groups, saved.get("param_groups", [])
    if len(groups) != len(saved_groups) or any(len(g["params"]) != len(s["params"])
                                                for g, s in zip(groups, saved_groups)):
        return False
    pairs = [(p, i) for g, s in zip(groups, saved_groups) for p, i in zip(g["params"], s["params"])]
    saved_state = saved.get("state", {})
    for p, i in pairs:
        live, kept = optimizer.state.get(p), saved_state.get(i)
        if kept is None or live is None:
            continue
        if set(live) != set(kept):
            return False
        for k, v in kept.items():
            if torch.is_tensor(v) and not (torch.is_tensor(live[k]) and live[k].shape == v.shape
                                           and live[k].dtype == v.dtype and live[k].device == v.device):
                return False
    with torch.no_grad():
        for p, i in pairs:
            kept = saved_state.get(i)
            if kept is None:
                optimizer.state.pop(p, None)  # no state yet at that commit (before the first step)
                continue
            live = optimizer.state.get(p)
            if live is None:
                optimizer.state[p] = {k: v.clone() if torch.is_tensor(v) else v for k, v in kept.items()}
                continue
            for k, v in kept.items():
                if torch.is_tensor(v):
                    if live[k].data_ptr() != v.data_ptr():  # a state just broadcast in place is there already
                        live[k].copy_(v)
                else:
                    live[k] = v
    for g, s in zip(groups, saved_groups):
        for k, v in s.items():
            if k != "params":
                g[k] = v
    return True


def broadcast_optimizer_state(optimizer, root_rank, model=None):
    """Copies root's optimizer state (hyper-parameters, momentum buffers, step counts) to every rank.

    State an optimizer creates on its first step (SGD momentum, Adam moments)
    is created first on every rank, so ranks that have not stepped yet receive it.
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("broadcast_optimizer_state: LBFGS is not supported (as in Horovod)")
    if not optimizer.state_dict()["state"]:
        _init_state(optimizer)
    state = optimizer.state_dict()
    tensors = []
    skeleton = {}
    for pid in sorted(state["state"]):
        entry = {}
        for key in sorted(state["state"][pid]):
            value = state["state"][pid][key]
            if isinstance(value, torch.Tensor):
                tensors.append(("%s.%s" % (pid, key), value))
                entry[key] = None
            else:
                entry[key] = value
        skeleton[pid] = entry
    _check_same(tensors, "broadcast_optimizer_state")
    root = broadcast_object({"param_groups": state["param_groups"], "skeleton": skeleton}, root_rank)
    handles = [mpi_ops.broadcast_async_(t, root_rank) for _, t in tensors]
    for h in handles:
        mpi_ops.synchronize(h)
    if _state.world_rank() == root_rank:
        return
    new_state = {}
    for pid, entry in root["skeleton"].items():
        new_state[pid] = {k: (state["state"][pid][k] if v is None else v) for k, v in entry.items()}
    groups = []
    for mine, theirs in zip(state["param_groups"], root["param_groups"]):
        g = dict(theirs)
        g["params"] = mine["params"]
        groups.append(g)
    merged = {"state": new_state, "param_groups": groups}
    if not load_state_in_place(optimizer, merged):
        optimizer.load_state_dict(merged)
