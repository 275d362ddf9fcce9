"""muster's training runtime from Python: collectives on numpy arrays.

The framework-neutral layer under muster.torch. One Communicator per process
(world from mpirun's environment, a world of one without it); collectives
work in place on C-contiguous arrays, with no copies between Python and the
runtime (the array's memory is handed to the C++ communicator), and release
the GIL while they wait on peers.

Example (under ``mpirun -np 2 python3 script.py``)::

    import numpy as np
    import muster.runtime as rt
    rt.init()
    x = np.full(4, rt.rank(), dtype=np.float32)
    rt.allreduce(x, op="sum")              # x == [1, 1, 1, 1] on both ranks
    parts = rt.allgather(np.arange(rt.rank() + 1))   # [0, 0, 1]
    rt.shutdown()

Without mpirun, processes form a world over a store they all reach::

    store = rt.FileStore("/tmp/job-7")        # or any object with set()/get()
    rt.init(store=store, rank=r, size=n)
    evens = rt.split([0, 2], "evens")         # a process set (None on ranks 1, 3)
    if evens is not None:
        rt.allreduce(x, comm=evens)

Every op takes name= (compared across ranks: ops that differ between ranks
raise MismatchError on every rank, naming them, and the world stays usable).

Failures raise the classes of muster.runtime_errors (CommError naming the dead
rank, PeerTimeoutError, MismatchError, InvalidArgument), never hang: every
wait is bounded by MUSTER_COMM_TIMEOUT_MS (default 60 s).

The extension module (_muster_runtime, built by ``make build``) is found
beside this package (installed), else in $MUSTER_RUNTIME_PATH,
$MUSTER_BINARY_DIR/python/muster, or the repository's build folder.
"""
import atexit
import importlib.machinery
import importlib.util
import os
import sys
import threading
import weakref

from . import extension_path, failure_record
from .runtime_errors import (CommError, DataError, InvalidArgument, MismatchError,  # noqa: F401 (re-exported)
                             PeerTimeoutError, RuntimeFailure)

failure_record.install()  # a rank's uncaught exception tells musterd which rank failed first

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "communicator",
    "bootstrap", "transport", "FileStore", "split",
    "allreduce", "allreduce_async", "broadcast", "broadcast_async", "allgather", "allgather_bytes", "barrier",
    "reducescatter", "reducescatter_async", "alltoall", "alltoall_async",
    "Handle", "extension", "CommError", "PeerTimeoutError", "MismatchError", "InvalidArgument", "RuntimeFailure",
]

_lock = threading.Lock()
_ext = None
_comm = None
_closers = []  # callables run at shutdown before the communicator closes (optimizers)


def _locate():
    for d in extension_path.candidates():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(d, "_muster_runtime" + suffix)
            if os.path.exists(path):
                return path
    raise ImportError(
        "muster's runtime extension _muster_runtime is not built for this Python (%s): run `make build` "
        "(or `cmake --build build --target _muster_runtime`), or set MUSTER_RUNTIME_PATH to the folder "
        "holding _muster_runtime*.so; looked in %s" % (sys.executable, ", ".join(extension_path.candidates())))


def extension():
    """The _muster_runtime module (loaded on first use)."""
    global _ext
    if _ext is not None:
        return _ext
    # Open MPI loads its components with dlopen and expects libmpi's symbols
    # to be global: load the extension (and with it libmpi) RTLD_GLOBAL.
    flags = sys.getdlopenflags()
    sys.setdlopenflags(os.RTLD_GLOBAL | os.RTLD_NOW)
    try:
        try:
            from . import _muster_runtime as ext  # installed beside the package
        except ImportError:
            path = _locate()
            spec = importlib.util.spec_from_file_location("muster._muster_runtime", path)
            ext = importlib.util.module_from_spec(spec)
            sys.modules["muster._muster_runtime"] = ext
            spec.loader.exec_module(ext)
    finally:
        sys.setdlopenflags(flags)
    _ext = ext
    return ext


def init(timeout_ms=0, store=None, rank=-1, size=-1, prefix=""):
    """Creates the process's communicator (collective: every rank calls it). Idempotent.

    timeout_ms > 0 overrides the runtime's peer timeout (MUSTER_COMM_TIMEOUT_MS wins over both).
    Without `store` the world comes from the environment (mpirun, musterd, else one process).
    With `store` (FileStore, or any object with set(key, bytes) and
    get(keys, timeout_ms) -> list of bytes) the `size` processes form the
    world over it, this one being `rank`; `prefix` must differ between worlds
    formed over the same store (default "muster").
    """
    global _comm
    with _lock:
        if _comm is None or not _comm.open:
            if store is None:
                _comm = extension().Communicator(int(timeout_ms))
            else:
                _comm = extension().Communicator(int(timeout_ms), store, int(rank), int(size), str(prefix))
        return _comm


def FileStore(path):  # noqa: N802 (a class of the extension)
    """A store in a directory every process reaches (one machine, or a shared file system).

    It is the runtime's C++ file store itself (_muster_runtime.FileStore):
    key "a/b" is the file <path>/a/b, written once, atomically, so a world
    formed from Python and one formed from C++ share a directory; given to
    init(store=...), it is used without calling back into Python::

        rt.init(store=rt.FileStore("/tmp/job-7"), rank=r, size=n)
    """
    return extension().FileStore(os.path.abspath(str(path)))


def is_initialized():
    return _comm is not None and _comm.open


def communicator():
    """The process's communicator; raises ValueError before init()."""
    if not is_initialized():
        raise ValueError("muster runtime is not initialised: call init() first (hvd.init() in muster.torch)")
    return _comm


_before_collective = []  # callables that finish work in flight (a DistributedOptimizer's step)


def before_collective(finisher):
    """Registers `finisher()` (or a weakref.WeakMethod of it), run before every collective issued here.

    A DistributedOptimizer registers one that finishes a step in flight: its
    bucket allreduces run on the runtime's own thread, and a collective the
    user issues meanwhile (a metric allreduce between backward() and step())
    could otherwise reach the ranks in different orders.
    """
    _before_collective.append(finisher)


def collective_communicator():
    """communicator(), after finishing whatever must precede a new collective."""
    comm = communicator()
    for entry in list(_before_collective):
        finish = entry() if isinstance(entry, weakref.ref) else entry
        if finish is None:
            _before_collective.remove(entry)  # its optimizer is gone
        else:
            finish()
    return comm


def on_shutdown(closer):
    """Runs `closer()` (or a weakref.WeakMethod of it) at shutdown(), before the communicator closes."""
    _closers.append(closer)


def shutdown():
    """Closes every optimizer and the communicator (joins the runtime's threads). init() may follow."""
    global _comm
    with _lock:
        while _closers:
            entry = _closers.pop()
            closer = entry() if isinstance(entry, weakref.ref) else entry
            try:
                if closer is not None:
                    closer()
            except Exception:  # noqa: BLE001 - a broken optimizer must not keep the communicator open
                pass
        del _before_collective[:]
        if _comm is not None:
            _comm.close()
        _comm = None


atexit.register(shutdown)


def rank():
    return communicator().rank


def size():
    return communicator().size


def local_rank():
    return communicator().local_rank


def local_size():
    return communicator().local_size


def bootstrap():
    """What formed the world: "mpi", "store", "single" or "musterd"."""
    return communicator().bootstrap


def transport():
    """What the ring's links run over: "shm", "tcp", "mpi", "mixed" or "none"."""
    return communicator().transport


def split(ranks, name, comm=None):
    """A process set (collective over `comm`, default the world).

    Returns a Communicator among `ranks` (sorted, unique ranks of `comm`) on
    its members, None on the others; pass it as comm= to any op here.
    """
    return _target(comm).split([int(r) for r in ranks], str(name))


def _target(comm):
    """The Communicator an op runs on: the world (after what must precede it), or `comm`."""
    if comm is None:
        return collective_communicator()
    if not comm.open:
        raise InvalidArgument("that communicator was closed")
    return comm


# --- buffers -----------------------------------------------------------------

_NUMPY_DTYPES = {"float32": "float32", "float64": "float64", "float16": "float16", "int32": "int32",
                 "int64": "int64"}


def raw_view(nbytes):
    """(dtype name, count) that moves `nbytes` bytes with no reduction (broadcast, allgather), or None if odd."""
    for name, width in (("int64", 8), ("int32", 4), ("float16", 2)):
        if nbytes % width == 0:
            return name, nbytes // width
    return None


class Handle:
    """An asynchronous collective in flight. wait() returns its result and raises its error.

    The buffers it works on are kept alive until wait() returned.
    """

    def __init__(self, native, keep=None, finish=None):
        self._native = native
        self._keep = keep
        self._finish = finish
        self._done = False
        self._result = None

    def done(self):
        return self._done or (self._native is None or self._native.done())

    def wait(self):
        if not self._done:
            try:
                if self._native is not None:
                    self._native.wait()
                self._result = self._finish() if self._finish is not None else None
            finally:
                self._done = True
                self._native = None
                self._keep = None
        return self._result


def _check_array(a, what, writeable=True):
    import numpy as np
    if not isinstance(a, np.ndarray):
        raise InvalidArgument("%s takes a numpy array, got %s" % (what, type(a).__name__))
    if not a.flags["C_CONTIGUOUS"]:
        raise InvalidArgument("%s needs a C-contiguous array (use numpy.ascontiguousarray)" % what)
    if writeable and not a.flags["WRITEABLE"]:
        raise InvalidArgument("%s writes into the array, but it is read-only" % what)


def _reduce_dtype(a, what):
    name = _NUMPY_DTYPES.get(a.dtype.name)
    if name is None:
        raise InvalidArgument("%s cannot reduce dtype %s: use float16/32/64 or int32/64" % (what, a.dtype.name))
    return name


def allreduce_async(array, op="sum", name=None, comm=None):
    """Starts an in-place allreduce of `array` (op: sum, average, min, max)."""
    _check_array(array, "allreduce")
    dtype = _reduce_dtype(array, "allreduce")
    native = _target(comm).allreduce_async(array.ctypes.data, array.size, dtype, op, name or "", list(array.shape))
    return Handle(native, keep=array, finish=lambda: array)


def allreduce(array, op="sum", name=None, comm=None):
    """Reduces `array` over all ranks, in place; returns it."""
    return allreduce_async(array, op, name, comm).wait()


def broadcast_async(array, root, name=None, comm=None):
    _check_array(array, "broadcast")
    view = raw_view(array.nbytes)
    if view is None:
        import numpy as np
        padded = np.zeros(array.nbytes + 1, dtype=np.uint8)
        padded[:-1] = array.reshape(-1).view(np.uint8)
        inner = broadcast_async(padded, root, name, comm)

        def finish():
            inner.wait()
            array.reshape(-1).view(np.uint8)[:] = padded[:-1]
            return array
        return Handle(None, keep=(array, padded), finish=finish)
    native = _target(comm).broadcast_async(array.ctypes.data, view[1], view[0], int(root), name or "",
                                           list(array.shape))
    return Handle(native, keep=array, finish=lambda: array)


def broadcast(array, root, name=None, comm=None):
    """Copies root's `array` into every rank's (same shape and dtype everywhere); returns it."""
    return broadcast_async(array, root, name, comm).wait()


def allgather_bytes(data, comm=None):
    """Every rank's `data` (bytes, any length per rank), as a list in rank order."""
    import numpy as np
    payload = np.frombuffer(bytes(data), dtype=np.uint8)
    # Sizes first (fixed width), then the payload padded to 8-byte words.
    words = (len(payload) + 7) // 8
    buf = np.zeros(words * 8, dtype=np.uint8)
    buf[:len(payload)] = payload
    c = _target(comm)
    sizes = np.zeros(c.size, dtype=np.int64)
    mine = np.array([len(payload)], dtype=np.int64)
    c.allgather_async(mine.ctypes.data, 1, "int64", sizes.ctypes.data).wait()
    raw, counts = c.allgatherv(buf.ctypes.data, words, "int64")
    out, offset = [], 0
    for n, k in zip(sizes.tolist(), counts):
        out.append(raw[offset:offset + n])
        offset += k * 8
    return out


def allgather(array, name=None, comm=None):
    """Concatenates every rank's `array` along the first dimension (which may differ per rank).

    The other dimensions and the dtype must agree (MismatchError otherwise).
    """
    import numpy as np
    _check_array(array, "allgather", writeable=False)
    tail = tuple(array.shape[1:])
    name = name or ""
    if array.dtype.name in _NUMPY_DTYPES:
        native = _target(comm).allgatherv_async(array.ctypes.data, array.size, _NUMPY_DTYPES[array.dtype.name],
                                                name, list(tail))
        data, _ = native.wait()
        return data.view(array.dtype).reshape((-1,) + tail)
    # Other dtypes travel as bytes; their shapes and dtype are compared by name.
    check = "%s|%s|%s" % (name, array.dtype.str, tail)
    parts = allgather_bytes(array.tobytes(), comm)
    kinds = allgather_bytes(check.encode(), comm)
    if len(set(kinds)) != 1:
        raise MismatchError("allgather: ranks disagree about dtype, name or the shape after the first dimension: %s"
                            % ", ".join("rank %d %s" % (r, k.decode()) for r, k in enumerate(kinds)))
    flat = np.frombuffer(b"".join(parts), dtype=array.dtype)
    return flat.reshape((-1,) + tail).copy()


def _rows_per_rank(rows, n):
    """Horovod's split of `rows` among n ranks: the first rows % n ranks get one more."""
    return [rows // n + (1 if r < rows % n else 0) for r in range(n)]


def reducescatter_async(array, op="sum", name=None, comm=None):
    """Starts a reduce-scatter: every rank's `array` (same shape everywhere) is reduced,
    and rank r receives its rows of the result (dim 0 split as Horovod does). wait() returns them."""
    import numpy as np
    _check_array(array, "reducescatter", writeable=False)
    dtype = _reduce_dtype(array, "reducescatter")
    if array.ndim == 0:
        raise InvalidArgument("reducescatter needs an array with a first dimension to split")
    c = _target(comm)
    row = int(np.prod(array.shape[1:], dtype=np.int64))
    rows = _rows_per_rank(array.shape[0], c.size)
    out = np.empty((rows[c.rank],) + tuple(array.shape[1:]), dtype=array.dtype)
    native = c.reducescatter_async(array.ctypes.data, out.ctypes.data, [r * row for r in rows], dtype, op,
                                   name or "", list(array.shape))
    return Handle(native, keep=(array, out), finish=lambda: out)


def reducescatter(array, op="sum", name=None, comm=None):
    """This rank's rows of the reduction of every rank's `array` (see reducescatter_async)."""
    return reducescatter_async(array, op, name, comm).wait()


def alltoall_async(array, splits=None, name=None, comm=None):
    """Starts an alltoall: rows splits[j] of `array` (dim 0, in order) go to rank j (default:
    equal parts). wait() returns (the rows received, concatenated in rank order, rows from each rank)."""
    import numpy as np
    _check_array(array, "alltoall", writeable=False)
    c = _target(comm)
    if array.ndim == 0:
        raise InvalidArgument("alltoall needs an array with a first dimension to split")
    if splits is None:
        if array.shape[0] % c.size:
            raise InvalidArgument("alltoall: %d rows do not split evenly among %d ranks; give splits="
                                  % (array.shape[0], c.size))
        splits = [array.shape[0] // c.size] * c.size
    splits = [int(k) for k in splits]
    if len(splits) != c.size or sum(splits) != array.shape[0] or min(splits) < 0:
        raise InvalidArgument("alltoall: splits %s must be %d non-negative row counts adding up to %d"
                              % (splits, c.size, array.shape[0]))
    tail = tuple(array.shape[1:])
    row = int(np.prod(tail, dtype=np.int64))
    dtype, scale = _NUMPY_DTYPES.get(array.dtype.name), 1
    if dtype is None:
        view = raw_view(array.itemsize * row) if row else ("int64", 0)
        if view is None:
            raise InvalidArgument("alltoall: rows of %d bytes of %s cannot travel whole; use a wider dtype"
                                  % (array.itemsize * row, array.dtype.name))
        dtype = view[0]
        scale = view[1] // row if row else 1
    native = c.alltoall_async(array.ctypes.data, [k * row * scale for k in splits], dtype, name or "",
                              [array.dtype.itemsize] + list(tail))

    got = {}

    class _Pending:  # the native ResultHandle, its result kept for finish()
        def wait(self):
            got["result"] = native.wait()

        def done(self):
            return native.done()

    def finish():
        data, counts = got["result"]
        out = data.view(array.dtype).reshape((-1,) + tail)
        return out, [k // (row * scale) if row else 0 for k in counts]
    return Handle(_Pending(), keep=array, finish=finish)


def alltoall(array, splits=None, name=None, comm=None):
    """(rows received in rank order, rows from each rank): see alltoall_async."""
    return alltoall_async(array, splits, name, comm).wait()


def barrier(name=None, comm=None):
    """Returns when every rank has called barrier()."""
    _target(comm).barrier_async(name or "").wait()
