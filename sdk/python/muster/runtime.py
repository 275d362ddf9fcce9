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

Failures raise the classes of muster.runtime_errors (CommError naming the dead
rank, PeerTimeoutError, MismatchError, InvalidArgument), never hang: every
wait is bounded by MUSTER_COMM_TIMEOUT_MS (default 60 s).

The extension module (_muster_runtime, built by ``make build``) is found
beside this package (installed), else in $MUSTER_RUNTIME_PATH,
$MUSTER_BINARY_DIR/python/muster, or the repository's build folder.
"""
import atexit
import glob
import importlib.machinery
import importlib.util
import os
import sys
import threading
import weakref

from .runtime_errors import (CommError, DataError, InvalidArgument, MismatchError,  # noqa: F401 (re-exported)
                             PeerTimeoutError, RuntimeFailure)

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "communicator",
    "allreduce", "allreduce_async", "broadcast", "broadcast_async", "allgather", "allgather_bytes", "barrier",
    "Handle", "extension", "CommError", "PeerTimeoutError", "MismatchError", "InvalidArgument", "RuntimeFailure",
]

_lock = threading.Lock()
_ext = None
_comm = None
_closers = []  # callables run at shutdown before the communicator closes (optimizers)


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = []
    if os.environ.get("MUSTER_RUNTIME_PATH"):
        dirs.append(os.environ["MUSTER_RUNTIME_PATH"])
    if os.environ.get("MUSTER_BINARY_DIR"):
        dirs.append(os.path.join(os.environ["MUSTER_BINARY_DIR"], "python", "muster"))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))  # <repo>/sdk/python/muster -> <repo>
    dirs.append(os.path.join(repo, "build", "python", "muster"))
    others = glob.glob(os.path.join(repo, "build*", "python", "muster"))
    dirs.extend(sorted(others, key=os.path.getmtime, reverse=True))
    return dirs


def _locate():
    for d in _candidates():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(d, "_muster_runtime" + suffix)
            if os.path.exists(path):
                return path
    raise ImportError(
        "muster's runtime extension _muster_runtime is not built for this Python (%s): run `make build` "
        "(or `cmake --build build --target _muster_runtime`), or set MUSTER_RUNTIME_PATH to the folder "
        "holding _muster_runtime*.so; looked in %s" % (sys.executable, ", ".join(_candidates())))


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


def init(timeout_ms=0):
    """Creates the process's communicator (collective: every rank calls it). Idempotent.

    timeout_ms > 0 overrides the runtime's peer timeout (MUSTER_COMM_TIMEOUT_MS wins over both).
    """
    global _comm
    with _lock:
        if _comm is None or not _comm.open:
            _comm = extension().Communicator(int(timeout_ms))
        return _comm


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


def allreduce_async(array, op="sum"):
    """Starts an in-place allreduce of `array` (op: sum, average, min, max)."""
    _check_array(array, "allreduce")
    dtype = _reduce_dtype(array, "allreduce")
    native = collective_communicator().allreduce_async(array.ctypes.data, array.size, dtype, op)
    return Handle(native, keep=array, finish=lambda: array)


def allreduce(array, op="sum"):
    """Reduces `array` over all ranks, in place; returns it."""
    return allreduce_async(array, op).wait()


def broadcast_async(array, root):
    _check_array(array, "broadcast")
    view = raw_view(array.nbytes)
    if view is None:
        import numpy as np
        padded = np.zeros(array.nbytes + 1, dtype=np.uint8)
        padded[:-1] = array.reshape(-1).view(np.uint8)
        inner = broadcast_async(padded, root)

        def finish():
            inner.wait()
            array.reshape(-1).view(np.uint8)[:] = padded[:-1]
            return array
        return Handle(None, keep=(array, padded), finish=finish)
    native = collective_communicator().broadcast_async(array.ctypes.data, view[1], view[0], int(root))
    return Handle(native, keep=array, finish=lambda: array)


def broadcast(array, root):
    """Copies root's `array` into every rank's (same shape and dtype everywhere); returns it."""
    return broadcast_async(array, root).wait()


def allgather_bytes(data):
    """Every rank's `data` (bytes, any length per rank), as a list in rank order."""
    import numpy as np
    payload = np.frombuffer(bytes(data), dtype=np.uint8)
    # Sizes first (fixed width), then the payload padded to 8-byte words.
    words = (len(payload) + 7) // 8
    buf = np.zeros(words * 8, dtype=np.uint8)
    buf[:len(payload)] = payload
    comm = collective_communicator()
    sizes = np.zeros(comm.size, dtype=np.int64)
    mine = np.array([len(payload)], dtype=np.int64)
    comm.allgather_async(mine.ctypes.data, 1, "int64", sizes.ctypes.data).wait()
    raw, counts = comm.allgatherv(buf.ctypes.data, words, "int64")
    out, offset = [], 0
    for n, c in zip(sizes.tolist(), counts):
        out.append(raw[offset:offset + n])
        offset += c * 8
    return out


def allgather(array):
    """Concatenates every rank's `array` along the first dimension (which may differ per rank)."""
    import numpy as np
    _check_array(array, "allgather", writeable=False)
    parts = allgather_bytes(array.tobytes())
    shapes = allgather_bytes(np.array(array.shape[1:], dtype=np.int64).tobytes())
    if len(set(shapes)) != 1:
        raise MismatchError("allgather: ranks disagree about the shape after the first dimension: %s"
                            % ", ".join("rank %d %s" % (r, tuple(np.frombuffer(s, dtype=np.int64).tolist()))
                                        for r, s in enumerate(shapes)))
    flat = np.frombuffer(b"".join(parts), dtype=array.dtype)
    return flat.reshape((-1,) + array.shape[1:]).copy()


def barrier():
    """Returns when every rank has called barrier()."""
    collective_communicator().barrier_async().wait()
