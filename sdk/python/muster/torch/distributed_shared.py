"""The storages a "muster" group moves into shared memory, so the runtime allreduces them in place.

Used by muster.torch.distributed (MusterProcessGroup.allreduce); SharedStorages' docstring says when
a storage moves and what that costs.
"""
import os
import threading

from . import settings as _settings

# A tensor of at least this many bytes that a group allreduces a second time
# from the same storage (DDP's buckets, a script's long-lived buffers) has
# that storage moved into shared memory, so the runtime reduces it in place.
_SHARE_MIN_BYTES = 1 << 20


def _storage_of(t):
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage().untyped()


def _dev_shm_has_room(nbytes):
    """Whether /dev/shm can take `nbytes` more with as much to spare: a full one
    kills the process with SIGBUS on first touch instead of failing cleanly."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return False
    return st.f_bavail * st.f_frsize >= 2 * nbytes


class SharedStorages:
    """The storages a group has moved into shared memory for the direct path.

    The runtime's direct allreduce reads and writes every rank's buffer in
    place, which needs the buffers in memory the peers can map. DDP's buckets
    are private (the reducer allocates them), so the ring would move them
    through its shared slots, in and out. A storage that comes back for a
    second allreduce is moved, in place, into torch's shared memory
    (share_memory_(): views and the reducer's references follow), and each
    allreduce on it names its file to the runtime, which maps the peers'
    files once and then reduces in place (AllreduceOptions::shared_fd).
    Storages seen once (temporaries such as a torch.cat of gradients) are
    left alone. Each entry holds a weak reference: when a storage dies (DDP
    rebuilds its buckets after the first step) the runtime's mapping of its
    file is dropped before the next op. A shared storage cannot be resized
    afterwards. The DistributedOptimizer's rule decides whether to
    (settings.shared_gradients(), MUSTER_SHARED_GRADIENTS): not where only
    private memory gets transparent huge pages, since backward and DDP's
    bucket copies then run slower on shared memory's 4 KiB pages than the
    staging costs.
    """

    def __init__(self, comm):
        self._comm = comm
        self._on = comm.shares_host_memory and _settings.shared_gradients()
        self._seen = {}  # storage's _cdata -> _Seen
        self._lock = threading.Lock()

    def offer(self, t):
        """(fd, offset, entry) of contiguous `t`'s storage for the runtime, or (-1, 0, entry).

        The caller hands `entry` to done() once the op has finished: a
        storage is moved only while no op of this group uses it (moving frees
        its old memory, which an op in flight would still read and write)."""
        if not self._on or t.numel() * t.element_size() < _SHARE_MIN_BYTES:
            return -1, 0, None
        with self._lock:
            self._forget_dead()
            storage = _storage_of(t)
            seen = self._seen.get(storage._cdata)
            first = seen is None
            if first:
                seen = self._seen[storage._cdata] = _Seen(storage)
            seen.busy += 1
            if first or seen.refused or (seen.busy > 1 and not storage.is_shared()):
                return -1, 0, seen
            try:
                if not storage.is_shared() and not _dev_shm_has_room(storage.nbytes()):
                    raise RuntimeError("no room in /dev/shm")
                fd, _ = storage._share_fd_cpu_()  # in place; the same fd once shared
                if seen.file is None:
                    st = os.fstat(fd)
                    seen.file = (st.st_dev, st.st_ino)
            except (RuntimeError, AttributeError, OSError):  # another sharing strategy, no room
                seen.refused = True
                return -1, 0, seen
            return fd, t.data_ptr() - storage.data_ptr(), seen

    def done(self, seen):
        if seen is not None:
            with self._lock:
                seen.busy -= 1

    def _forget_dead(self):
        for key in [k for k, seen in self._seen.items() if seen.ref.expired()]:
            seen = self._seen.pop(key)
            if seen.file is not None:
                self._comm.forget_shared_file(*seen.file)


class _Seen:
    __slots__ = ("ref", "file", "refused", "busy")

    def __init__(self, storage):
        from torch.multiprocessing.reductions import StorageWeakRef
        self.ref = StorageWeakRef(storage)
        self.file = None  # (st_dev, st_ino) once shared
        self.refused = False
        self.busy = 0  # this group's allreduces on it not yet finished
