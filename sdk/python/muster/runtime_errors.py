"""Errors of muster's training runtime, as Python exceptions.

The runtime extension (_muster_runtime) raises these for failed collectives;
muster.runtime and muster.torch let them through. They are plain Python
classes (standard library only), so code can catch them without importing
torch or the extension. All are muster.MusterError subclasses and, as
Horovod's errors are, RuntimeError subclasses (InvalidArgument is a
ValueError too), so code written for Horovod's `except RuntimeError` catches
them.

Example::

    import muster.torch as hvd
    from muster.runtime_errors import CommError
    try:
        hvd.allreduce(t)
    except CommError as err:     # a peer died or timed out
        print("rank", err.rank, "failed:", err)
"""
from .errors import MusterError


class RuntimeFailure(MusterError, RuntimeError):
    """Any error of the training runtime."""

    def __init__(self, message, code="runtime_error"):
        super().__init__(message, code=code)


class InvalidArgument(RuntimeFailure, ValueError):
    """A call got something invalid (sizes, dtypes, ranks, options)."""

    def __init__(self, message):
        super().__init__(message, code="invalid_argument")


class MismatchError(RuntimeFailure):
    """Ranks disagree about what they submitted (tensors, sizes, names, order).

    Raised on every rank of the op, naming the ranks and what differs, before
    any of its data moved: the world stays usable.
    """

    def __init__(self, message):
        super().__init__(message, code="mismatch")


class CommError(RuntimeFailure):
    """A peer died, a link broke or a collective failed; `rank` names the peer (None: unknown)."""

    def __init__(self, message, rank=None):
        super().__init__(message, code="comm_error")
        self.rank = rank


class PeerTimeoutError(CommError):
    """A peer made no progress within the runtime's timeout (MUSTER_COMM_TIMEOUT_MS)."""


class DataError(RuntimeFailure):
    """A file or frame could not be read."""

    def __init__(self, message):
        super().__init__(message, code="data_error")
