"""Horovod's process sets: collectives among a subset of the ranks.

    even = hvd.add_process_set([0, 2])        # collective: every rank calls it
    if hvd.rank() in (0, 2):
        hvd.allreduce(t, process_set=even)    # only ranks 0 and 2 take part
    hvd.remove_process_set(even)

Every process set has an engine of its own (engine.py) over a communicator
of its own, split from the global one: ops on disjoint sets run side by
side, and a set's barrier waits for its ranks only. Root ranks are global
ranks (hvd.rank()), as in Horovod; ProcessSet.rank() is the rank within the
set. An op on a set this rank is not in, or on a set that was removed,
raises InvalidArgument (a ValueError): process_set= is never ignored.
"""
from ..runtime_errors import InvalidArgument
from . import state as _state

_engines = _state.engines
_runtime_comms = _state.runtime_comms
_sets = _state.sets
_next_id = _state.next_id
_world = _state.world
_basics = None  # what init (world.py) hands down: make_engine(coll, ranks, name), split_runtime(ranks, name)


def _setup(basics):
    """Called once by world.py, the package's top, with the engine and communicator factories it owns."""
    global _basics
    _basics = basics


class ProcessSet:
    """A set of ranks that run collectives together (Horovod's ProcessSet).

    Build it from a list of global ranks and pass it to hvd.add_process_set()
    (or to hvd.init(process_sets=[...])). process_set_id is set once added.
    """

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            raise ValueError("ProcessSet takes a list of ranks (muster.torch has no mpi4py communicators); got %r"
                             % (ranks_or_comm,)) from None
        if any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
            raise ValueError("ProcessSet takes a list of integer ranks, got %r" % (ranks_or_comm,))
        self.ranks = ranks

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """Number of ranks in the set, or None when it is not (or no longer) added."""
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set, or None when the set is not added; ValueError when not a member."""
        if self.process_set_id is None:
            return None
        me = _world["rank"]
        if me not in self.ranks:
            raise ValueError("rank %d is not in %s" % (me, self))
        return self.ranks.index(me)

    def included(self):
        """Whether this process is in the set (None when the set has no ranks yet)."""
        if self.ranks is None:
            return None
        return _world["rank"] in self.ranks

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=None)" % (self.process_set_id, self.ranks)

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


# --- the engines (muster.torch internal) -----------------------------------------

def start(engine, rank, size):
    """Installs the global set's engine (hvd.init)."""
    _world.update(rank=rank, size=size)
    global_process_set.ranks = list(range(size))
    global_process_set.process_set_id = 0
    _engines[0] = engine
    _sets[0] = global_process_set


def stop():
    """Shuts every engine down, the global one last (hvd.shutdown); returns them for closing."""
    stopped = []
    for psid in sorted(_engines, reverse=True):
        engine = _engines.pop(psid)
        engine.shutdown()
        stopped.append(engine)
    for psid, ps in list(_sets.items()):
        if psid != 0:
            ps._invalidate()
    _sets.clear()
    for comm in _runtime_comms.values():
        comm.close()
    _runtime_comms.clear()
    return stopped


def engine_of(process_set, what):
    """The engine running `what` for `process_set` on this rank, or InvalidArgument saying why there is none."""
    if process_set is None:
        process_set = global_process_set
    if not isinstance(process_set, ProcessSet):
        raise InvalidArgument("%s: process_set must be a hvd.ProcessSet, got %s" % (what, type(process_set).__name__))
    psid = process_set.process_set_id
    if 0 not in _engines:
        raise ValueError("muster.torch is not initialised: call hvd.init() first")
    if psid is None or psid not in _sets:
        raise InvalidArgument("%s: %s is not an added process set (hvd.add_process_set), or was removed"
                              % (what, process_set))
    engine = _engines.get(psid)
    if engine is None:
        raise InvalidArgument("%s: rank %d is not in %s; only its ranks may run its collectives"
                              % (what, _world["rank"], process_set))
    return engine


def ranks_of(process_set):
    engine_of(process_set, "process set")
    return list((process_set or global_process_set).ranks)


def size_of(process_set):
    return len(ranks_of(process_set))


def rank_in(process_set):
    return ranks_of(process_set).index(_world["rank"])


# --- adding and removing (collective over the global set) ---------------------------

def add_process_set(process_set):
    """Adds a process set (a ProcessSet or a list of global ranks) and returns it. Collective: every rank calls it.

    ValueError for ranks outside the world or a set that exists already;
    MismatchError on every rank when the ranks passed differ between ranks.
    """
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    ranks = process_set.ranks
    size = _world["size"]
    if not ranks or ranks[0] < 0 or ranks[-1] >= size or len(set(ranks)) != len(ranks):
        raise ValueError("add_process_set: ranks %s must be distinct ranks of this world (0..%d)" % (ranks, size - 1))
    for ps in _sets.values():
        if ps.ranks == ranks:
            raise ValueError("Attempted to add a duplicate process set: %s" % process_set)
    engine = engine_of(global_process_set, "add_process_set")
    psid = _next_id[0]
    name = "muster.torch.set%d" % psid
    # The engine thread splits its own communicator when the op runs (execution.py): in order with its rounds.
    coll = engine.submit("process_set", None, {"ranks": ranks, "action": "add", "name": name}, None).wait()
    _next_id[0] += 1
    runtime_comm = _basics.split_runtime(ranks, name + ".optimizer")
    if coll is not None:
        _engines[psid] = _basics.make_engine(coll, ranks, "set%d" % psid)
        _runtime_comms[psid] = runtime_comm
    process_set.process_set_id = psid
    _sets[psid] = process_set
    return process_set


def optimizer_communicator(process_set, what):
    """The runtime communicator a DistributedOptimizer of `process_set` reduces on (this rank a member)."""
    engine_of(process_set, what)
    return _runtime_comms[process_set.process_set_id]


def remove_process_set(process_set):
    """Removes an added process set (collective); False for the global set or a set not added."""
    psid = process_set.process_set_id
    if psid is None or psid == 0 or psid not in _sets:
        return False
    engine = engine_of(global_process_set, "remove_process_set")
    engine.submit("process_set", None, {"ranks": process_set.ranks, "action": "remove"}, None).wait()
    mine = _engines.pop(psid, None)
    if mine is not None:
        mine.shutdown()
        mine.coll.close()
    runtime_comm = _runtime_comms.pop(psid, None)
    if runtime_comm is not None:
        runtime_comm.close()
    del _sets[psid]
    process_set._invalidate()
    return True
