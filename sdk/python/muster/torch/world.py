"""The world of muster.torch: init/shutdown and who is who (Horovod's names).

init() starts the runtime's Communicator: under mpirun (or a muster mpi
cluster) the world is Open MPI's (OMPI_COMM_WORLD_*), else one process.
local_* count the ranks on this host; cross_* are Horovod's cross
communicator: the ranks with the same local rank, one per host.
"""
from .. import runtime as _rt

_world = {}  # cross_rank, cross_size (computed once per init)


def init(comm=None, process_sets=None):
    """Starts the runtime (collective): world from mpirun's environment, else one process.

    Horovod's environment is honoured where it means something here (see
    muster.torch.settings); `comm` and `process_sets` are accepted for
    compatibility and must be None / the global set.
    """
    if comm is not None and not isinstance(comm, list):
        raise ValueError("muster.torch.init(comm=...) supports only the whole world (pass nothing)")
    if _rt.is_initialized():
        return
    from . import settings
    settings.log_ignored()
    c = _rt.init(settings.timeout_ms())
    # Horovod's cross communicator: the ranks with the same local rank.
    if c.size > 1:
        import numpy as np
        locals_ = np.zeros(c.size, dtype=np.int64)
        mine = np.array([c.local_rank], dtype=np.int64)
        c.allgather_async(mine.ctypes.data, 1, "int64", locals_.ctypes.data).wait()
        same = [r for r in range(c.size) if locals_[r] == c.local_rank]
        _world.update(cross_rank=same.index(c.rank), cross_size=len(same))
    else:
        _world.update(cross_rank=0, cross_size=1)


def shutdown():
    """Stops the runtime (joins its threads); init() may be called again."""
    from . import mpi_ops
    mpi_ops._handles.clear()
    _rt.shutdown()


def is_initialized():
    return _rt.is_initialized()


def rank():
    return _rt.rank()


def size():
    return _rt.size()


def local_rank():
    return _rt.local_rank()


def local_size():
    return _rt.local_size()


def cross_rank():
    _rt.communicator()
    return _world["cross_rank"]


def cross_size():
    _rt.communicator()
    return _world["cross_size"]


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    return size() == local_size() * cross_size()


def mpi_threads_supported():
    return True


def mpi_enabled():
    return True


def mpi_built():
    return True


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    return 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False
