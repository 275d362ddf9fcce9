"""Reductions of the "muster" backend beyond the runtime's dense ones: PREMUL_SUM and sparse all_reduce.

    op = dist._make_nccl_premul_sum(0.25)     # torch 1.13's only way to make one
    dist.all_reduce(t, op=op)                 # 0.25 * (t_0 + t_1 + ...): each rank's t times 0.25, then the sum
    dist.all_reduce(sparse_t)                 # the sum of every rank's sparse COO tensor, coalesced

PREMUL_SUM's factor. torch 1.13 keeps it in the C++ ReduceOp's supplement
(an NCCLPreMulSumSupplement: a double, or a tensor) and offers no Python
accessor, so a backend written in Python cannot ask for it. It is read from
the object's memory at the offsets 1.13 lays it out at, and only after a probe
has checked them: a ReduceOp made here with a known factor must read back as
that factor, with op PREMUL_SUM, and a tensor factor (whose slot differs from
the probe's empty one) is refused. Where the probe fails (another torch
build), PREMUL_SUM is refused with a message saying so, never guessed.
"""
import ctypes

import torch
import torch.distributed as dist

from ..runtime_errors import InvalidArgument

_PROBE = 0.4375  # a factor no rounding produces by accident
_layout = None   # (value pointer offset, supplement offset, factor offset, empty tensor slot) once probed


def is_premul_sum(op):
    premul = getattr(dist.ReduceOp, "PREMUL_SUM", None)
    return premul is not None and getattr(op, "op", op) == premul


def _read(op):
    """(double factor, tensor slot) of a ReduceOp's supplement at the probed offsets, or None."""
    value_at, supplement_at, factor_at, _ = _layout
    value = ctypes.c_void_p.from_address(id(op) + value_at).value
    if not value:
        return None
    supplement = ctypes.c_void_p.from_address(value + supplement_at).value
    if not supplement:
        return None
    return (ctypes.c_double.from_address(supplement + factor_at).value,
            ctypes.c_void_p.from_address(supplement + factor_at + 8).value)


def _probe():
    """Finds and checks where this torch keeps PREMUL_SUM's factor; False where it does not match 1.13's."""
    global _layout
    if _layout is not None:
        return bool(_layout)
    make = getattr(dist, "_make_nccl_premul_sum", None)
    _layout = ()
    if make is None:
        return False
    try:
        probe = make(_PROBE)
        # pybind11 keeps the C++ object's address just after the PyObject header; the ReduceOp (a
        # CustomClassHolder: vtable, two counts) then holds its op and the supplement, which (a
        # CustomClassHolder too) holds the double, then the tensor.
        _layout = (16, 32, 24, 0)
        got = _read(probe)
        if got is None or got[0] != _PROBE or probe.op != dist.ReduceOp.PREMUL_SUM:
            _layout = ()
            return False
        _layout = (16, 32, 24, got[1])
        other = _read(make(-2.5))
        if other is None or other[0] != -2.5:
            _layout = ()
            return False
        return True
    except (ValueError, TypeError, OSError):
        _layout = ()
        return False


def premul_factor(op):
    """PREMUL_SUM's factor (a float); InvalidArgument where it cannot be read."""
    if not _probe():
        raise InvalidArgument("all_reduce: PREMUL_SUM's factor cannot be read from this torch's ReduceOp (the "
                              "muster backend reads torch 1.13's layout); multiply the tensor by the factor and "
                              "use ReduceOp.SUM")
    got = _read(op)
    if got is None:
        raise InvalidArgument("all_reduce: this PREMUL_SUM ReduceOp carries no factor")
    factor, tensor_slot = got
    if tensor_slot != _layout[3]:
        raise InvalidArgument("all_reduce: PREMUL_SUM with a tensor factor is not offered by the muster backend; "
                              "make it with a float (dist._make_nccl_premul_sum(2.0))")
    return factor


class SparseGather:
    """Every rank's (indices, values) of a coalesced sparse COO tensor, then their sum.

    start() queues two allgatherv (the indices as int64, the values' bytes as int64 words, so any dtype
    travels), whose counts may differ by rank; sum() builds the result once both are done.
    """

    def __init__(self, comm, indices, values):
        self._comm = comm
        self._indices = indices                  # (sparse dims, nnz) int64
        self._values = values                    # (nnz, dense dims...)
        self._sparse_dims = indices.shape[0]
        self._row_shape = tuple(values.shape[1:])
        row = 1
        for d in self._row_shape:
            row *= d
        self._row_bytes = row * values.element_size()
        raw = values.reshape(-1).view(torch.uint8)
        pad = (-raw.numel()) % 8
        self._raw = torch.cat([raw, torch.zeros(pad, dtype=torch.uint8)]) if pad else raw.contiguous()
        self._handles = None
        self._results = None

    def start(self):
        h_idx = self._comm.allgatherv_async(self._indices.data_ptr(), self._indices.numel(), "int64")
        h_val = self._comm.allgatherv_async(self._raw.data_ptr(), self._raw.numel() // 8, "int64")
        self._handles = (h_idx, h_val)
        return self

    def wait(self):  # the handle _submit waits on
        self._results = tuple(h.wait() for h in self._handles)

    def sum(self, shape, dtype):
        (idx_bytes, idx_counts), (val_bytes, val_words) = self._results
        idx_all = torch.from_numpy(idx_bytes).view(torch.int64)
        val_all = torch.from_numpy(val_bytes)
        indices, values = [], []
        i_at = v_at = 0
        for count, words in zip(idx_counts, val_words):
            nnz = count // self._sparse_dims if self._sparse_dims else 0
            indices.append(idx_all[i_at:i_at + count].view(self._sparse_dims, nnz))
            rows = val_all[v_at:v_at + nnz * self._row_bytes]
            values.append(rows.view(dtype).view((nnz,) + self._row_shape) if nnz else
                          torch.empty((0,) + self._row_shape, dtype=dtype))
            i_at += count
            v_at += words * 8
        return torch.sparse_coo_tensor(torch.cat(indices, dim=1), torch.cat(values), shape).coalesce()
