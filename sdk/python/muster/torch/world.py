"""The top of muster.torch: init/shutdown, and who is who (Horovod's names).

init() starts two Communicators of the runtime over the same ranks: under
mpirun (or a muster mpi cluster) the world is Open MPI's (OMPI_COMM_WORLD_*),
else one process. The first is the runtime's own (muster.runtime; the C++
DistributedOptimizer's buckets run on it); the second carries the engine of
the global process set (engine.py), which negotiates and runs every
collective called through this API. Each runs its ops in its own order, so
an optimizer's buckets never interleave with a negotiation round.
local_* count the ranks on this host; cross_* are Horovod's cross
communicator: the ranks with the same local rank, one per host.

This module imports the others and none imports it (elastic/ aside, which
sits above it): what it knows lives in state.py, the package's leaf, and
what process_sets.py needs of it (the engine and communicator factories) is
handed down once, below, through process_sets._setup().
"""
import types

import numpy as np

from .. import runtime as _rt
from . import functions, mpi_ops, settings, timeline
from . import state as _state
from . import process_sets as ps
from .collectives import Collectives
from .engine import Engine, stall_seconds

_world = _state.world  # cross_rank, cross_size (computed once per init)


def init(comm=None, process_sets=None):
    """Starts the runtime and the global engine (collective): world from mpirun's environment, else one process.

    Horovod's environment is honoured where it means something here (see
    muster.torch.settings). `comm` must be None (or a list of all ranks);
    `process_sets` lists ProcessSets to add at once (hvd.add_process_set).
    """
    if comm is not None and not (isinstance(comm, list) and comm == list(range(len(comm)))):
        raise ValueError("muster.torch.init(comm=...) supports only the whole world (pass nothing)")
    if _rt.is_initialized() and _engine_running():
        return
    settings.log_ignored()
    c = _rt.init()
    if comm is not None and len(comm) != c.size:
        raise ValueError("muster.torch.init(comm=%s): the world has %d ranks; pass nothing" % (comm, c.size))
    # Horovod's cross communicator: the ranks with the same local rank.
    if c.size > 1:
        locals_ = np.zeros(c.size, dtype=np.int64)
        mine = np.array([c.local_rank], dtype=np.int64)
        c.allgather_async(mine.ctypes.data, 1, "int64", locals_.ctypes.data).wait()
        same = [r for r in range(c.size) if locals_[r] == c.local_rank]
        _world.update(cross_rank=same.index(c.rank), cross_size=len(same))
    else:
        _world.update(cross_rank=0, cross_size=1)
    ps.start(make_engine(Collectives(_engine_communicator(c)), list(range(c.size)), "global"), c.rank, c.size)
    _rt.on_shutdown(_stop_engines)
    for p in process_sets or ():
        ps.add_process_set(p)


def _engine_running():
    return _state.engine_running()


def _engine_communicator(comm):
    """The global engine's communicator: split from the runtime's (formed the same way: MPI, musterd, a store)."""
    return comm.split(list(range(comm.size)), "muster.torch.global")


def make_engine(coll, ranks, name):
    """An Engine over `coll` (a Collectives) for the global ranks `ranks`."""
    return Engine(coll, ranks, name=name, cycle_s=settings.cycle_seconds(), stall_s=stall_seconds(),
                  fusion_bytes=settings.fusion_threshold_bytes() or (64 << 20), timeline=_timeline())


def split_runtime(ranks, name):
    """The runtime's own communicator among `ranks` (None on the others); collective over the world."""
    return _rt.collective_communicator().split(list(ranks), name)


ps._setup(types.SimpleNamespace(make_engine=make_engine, split_runtime=split_runtime))


def _timeline():
    return timeline.current()


def _stop_engines():
    for engine in ps.stop():
        engine.coll.close()
    mpi_ops.forget_handles()
    functions.forget_calls()


def shutdown():
    """Stops the engines and the runtime (joins their threads); init() may be called again.

    The other ranks learn of it: their collectives raise from then on (as in Horovod).
    """
    _rt.shutdown()


def is_initialized():
    return _rt.is_initialized() and _engine_running()


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
