"""Who this rank is, and the tables of process sets and their engines: the leaf of muster.torch.

Every other module of the package may read this one; it imports none of
them. init() (world.py, the top) fills it and shutdown() empties it; the
modules in between (process_sets, mpi_ops, functions, timeline, optimizer)
only read and update the tables.

    world         rank/size as init() formed them; cross_rank/cross_size
                  (Horovod's cross communicator: ranks with this local rank)
    engines       process_set_id -> Engine (the sets this rank belongs to)
    runtime_comms process_set_id -> the runtime communicator among the set's
                  ranks (its DistributedOptimizers reduce on it)
    sets          process_set_id -> ProcessSet (every set added, member or not)
"""

world = {"rank": 0, "size": 0}
engines = {}
runtime_comms = {}
sets = {}
next_id = [1]


def world_rank():
    return world["rank"]


def world_size():
    return world["size"]


def engine_running():
    """Whether init() installed the global set's engine (and shutdown() has not removed it)."""
    return 0 in engines
