"""The two ways an elastic run is interrupted (Horovod's names).

HorovodInternalError: a collective failed because the world broke (a rank
died, its host went away, musterd refused a broken generation). The state
goes back to the last commit and the world re-forms. It is muster's
CommError, so every failure the runtime reports for a lost peer counts.

HostsUpdatedInterrupt: a planned membership change (a replacement rank
waits to join), raised on every rank at the same commit() or
check_host_updates(); no rollback. skip_sync=True when nobody new joins
(the ranks that stay hold the same state already).
"""
from ...runtime_errors import CommError, RuntimeFailure

HorovodInternalError = CommError


class HostsUpdatedInterrupt(RuntimeFailure):
    """The world is about to change (raised at commit() / check_host_updates(); no rollback)."""

    def __init__(self, skip_sync=False, message="the world's membership changed: re-forming"):
        super().__init__(message, code="hosts_updated")
        self.skip_sync = skip_sync
