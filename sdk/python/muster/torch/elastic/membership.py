"""Whether this rank's world should re-form: rank 0 watches musterd, and
every rank agrees on what rank 0 saw.

In an elastic cluster (MUSTER_RENDEZVOUS_URL set by musterd) rank 0 holds a
watch that long-polls musterd's `world` route for its generation: the C++
elastic loop's own (runtime/elastic/membership.h, bound as
_muster_runtime.MembershipWatch), so both loops watch and report one way;
check() is then one small broadcast from rank 0 of what it last saw, so all
ranks raise HostsUpdatedInterrupt at the same call (or none does). Outside
an elastic cluster nothing can join, and check() costs nothing.
"""
import threading

from ... import runtime as _rt
from ...settings import Settings

ELASTIC_ENV = "MUSTER_RENDEZVOUS_URL"


def in_elastic_cluster():
    """True for a rank musterd launched into an elastic cluster."""
    return Settings.environment().raw(ELASTIC_ENV) is not None


def generation():
    """The generation of the world this process is in (0 outside an elastic cluster)."""
    if not in_elastic_cluster():
        return 0
    return _rt.extension().rendezvous_assignment()[0]


_lock = threading.Lock()
_watcher = None


def watch():
    """(Re)starts rank 0's watcher for the current generation; a no-op elsewhere."""
    global _watcher
    with _lock:
        _watcher = None  # its thread ends within one long-poll
        if in_elastic_cluster() and _rt.is_initialized() and _rt.rank() == 0:
            _watcher = _rt.extension().MembershipWatch(generation())


def stop():
    global _watcher
    with _lock:
        _watcher = None


def check():
    """(changed, skip_sync), the same on every rank: rank 0's view, broadcast."""
    if not in_elastic_cluster() or not _rt.is_initialized():
        return False, False
    import numpy as np
    flags = np.zeros(2, dtype=np.int64)
    if _rt.rank() == 0:
        w = _watcher
        changed, newcomers = w.changed() if w is not None else (False, False)
        if changed:
            flags[0] = 1
            flags[1] = 0 if newcomers else 1
    if _rt.size() > 1:
        _rt.broadcast(flags, 0)
    return bool(flags[0]), bool(flags[1])


def report(gen, batches_redone):
    """Tells musterd, from a background thread, that `gen` completed its first step."""
    if in_elastic_cluster():
        _rt.extension().report_recovery(int(gen), int(batches_redone))
