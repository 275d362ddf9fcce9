"""The record a rank leaves when an exception ends its script, for musterd to name the root cause.

Imported by muster's runtime modules (muster.runtime, so muster.torch and the
"muster" torch.distributed backend too), which install it: an uncaught
exception is printed as usual, then one line on stderr::

    muster-failure {"rank": 1, "exception": "KeyError: 'config'", "blames": null,
                    "monotonic_ns": 81234567890, "unix_ns": 1733094000123456789}

`blames` is the peer rank the exception itself names as its cause (a
CommError's `rank`, as an EngineStopped or a MusterBackendError carries it),
else null. musterd reads the line from the rank's output
(service/failure_report.h) and, of a cluster's failed ranks, names the one that
raised on its own first, not the ones that failed of its failure; whether an
exception's text reads as a peer's failure is decided there, in one place.
Like torchrun's error files, the clocks order the ranks' failures.
"""
import json
import os
import sys
import time
import traceback

from .settings import parse_integer

PREFIX = "muster-failure "
_RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK")
_installed = False


def _rank():
    # Never raises (it runs in sys.excepthook): a rank variable that is not a
    # whole number >= 0 is passed over.
    for name in _RANK_VARIABLES:
        value = parse_integer(os.environ.get(name, ""))
        if value is not None and value >= 0:
            return value
    return None


def _blamed_peer(exc, own_rank):
    """The peer rank named by `exc` or the exceptions it was raised from, else None."""
    from .runtime_errors import CommError
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        peer = getattr(exc, "rank", None) if isinstance(exc, CommError) or _is_backend_error(exc) else None
        if isinstance(peer, int) and peer != own_rank:
            return peer
        exc = exc.__cause__ or exc.__context__
    return None


def _is_backend_error(exc):
    return type(exc).__name__ == "MusterBackendError"


def record(exc):
    """The record's line for `exc` (without the newline)."""
    rank = _rank()
    line = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return PREFIX + json.dumps({"rank": rank, "exception": line, "blames": _blamed_peer(exc, rank),
                                "monotonic_ns": time.monotonic_ns(), "unix_ns": time.time_ns()})


def install():
    """Chains sys.excepthook so that an uncaught exception also writes its record (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        previous(exc_type, exc, tb)
        try:
            sys.stderr.write(record(exc) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - the traceback above is what matters; never fail in the hook
            pass

    sys.excepthook = hook
