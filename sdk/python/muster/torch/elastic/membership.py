"""Whether this rank's world should re-form: rank 0 watches musterd, and
every rank agrees on what rank 0 saw.

In an elastic cluster (MUSTER_RENDEZVOUS_URL set by musterd) rank 0 runs a
daemon thread that long-polls musterd's `world` route for its generation;
check() is then one small broadcast from rank 0 of what it last saw, so all
ranks raise HostsUpdatedInterrupt at the same call (or none does). Outside
an elastic cluster nothing can join, and check() costs nothing.
"""
import threading

from ... import runtime as _rt
from ...settings import Settings

ELASTIC_ENV = "MUSTER_RENDEZVOUS_URL"
_POLL_MS = 25000


def in_elastic_cluster():
    """True for a rank musterd launched into an elastic cluster."""
    return Settings.environment().raw(ELASTIC_ENV) is not None


def generation():
    """The generation of the world this process is in (0 outside an elastic cluster)."""
    if not in_elastic_cluster():
        return 0
    return _rt.extension().rendezvous_assignment()[0]


class _Watcher:
    """Long-polls musterd for one generation until it is over or stop() was called."""

    def __init__(self, gen):
        self.generation = gen
        self.changed = False
        self.waiting = 0
        self.error = None
        self._stop = threading.Event()
        self._client = _rt.extension().RendezvousClient()
        self._thread = threading.Thread(target=self._run, name="muster-elastic-watch", daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                view = self._client.world(self.generation, _POLL_MS)
            except Exception as err:  # noqa: BLE001 - reported by check() as a change
                self.error = err
                self.changed = True
                return
            if view["changed"]:
                self.waiting = int(view["waiting"])
                self.changed = True
                return

    def stop(self):
        self._stop.set()


_lock = threading.Lock()
_watcher = None


def watch():
    """(Re)starts rank 0's watcher for the current generation; a no-op elsewhere."""
    global _watcher
    with _lock:
        if _watcher is not None:
            _watcher.stop()
            _watcher = None
        if in_elastic_cluster() and _rt.is_initialized() and _rt.rank() == 0:
            _watcher = _Watcher(generation())


def stop():
    global _watcher
    with _lock:
        if _watcher is not None:
            _watcher.stop()
            _watcher = None


def check():
    """(changed, skip_sync), the same on every rank: rank 0's view, broadcast."""
    if not in_elastic_cluster() or not _rt.is_initialized():
        return False, False
    import numpy as np
    flags = np.zeros(2, dtype=np.int64)
    if _rt.rank() == 0:
        w = _watcher
        if w is not None and w.changed:
            flags[0] = 1
            flags[1] = 0 if w.waiting > 0 else 1
    if _rt.size() > 1:
        _rt.broadcast(flags, 0)
    return bool(flags[0]), bool(flags[1])


def report(gen, batches_redone):
    """Tells musterd, from a background thread, that `gen` completed its first step."""
    if not in_elastic_cluster():
        return

    def send():
        try:
            _rt.extension().RendezvousClient().report(int(gen), int(batches_redone))
        except Exception:  # noqa: BLE001 - the history only; training goes on
            pass
    threading.Thread(target=send, name="muster-elastic-report", daemon=True).start()
