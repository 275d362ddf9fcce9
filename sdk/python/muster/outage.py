"""Riding a wait through a short musterd outage (a restart; a crash, then a restart).

The waits (await_workers, await_cluster, followed logs) can last hours, and
musterd keeps its workers and clusters across a restart on the same state
dir. So when a wait's request finds nothing answering (connection refused or
reset: MusterError code "unavailable" with no HTTP status), it does not fail
at once: it prints one line ("muster: musterd unreachable at URL (...);
retrying for up to 30 s") and tries again, for up to `grace_seconds`
(Client(reconnect_seconds=...), else MUSTER_RECONNECT_SECONDS, else 30;
0 fails at once). An answer ends the outage; a daemon still away when the
grace is spent raises the unavailable error, saying how long it was tried.
Single calls (launch, stop, get, list) are not retried: they fail at once.

Example::

    outage = Outage(30, client.url)
    cluster = outage.call(lambda: client.get_cluster(cid))
"""
import sys
import time
from typing import Callable, Optional, TypeVar

from .errors import MusterError

T = TypeVar("T")


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def is_unreachable(err: MusterError) -> bool:
    """Nothing answered (refused, reset, no route): not an answer from musterd, not a client-side timeout."""
    return err.code == "unavailable" and err.http_status is None


class Outage:
    """The outage state of one wait: when it began, and the grace it has.

    note(text) shows the one line (default: stderr); sleep and clock are
    seams for tests. Not shared between threads: one per wait.
    """

    def __init__(self, grace_seconds: float, url: str, note: Optional[Callable[[str], None]] = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace_seconds = float(grace_seconds)
        self.url = url
        self._note = note or _to_stderr
        self._sleep = sleep
        self._clock = clock
        self._since: Optional[float] = None
        self._tries = 0

    def failed(self, err: MusterError) -> None:
        """A request of the wait found nothing answering: pause before the next try, or raise once the grace is spent.

        Any other error is raised as it is.
        """
        if not is_unreachable(err):
            raise err
        now = self._clock()
        if self._since is None:
            if self.grace_seconds <= 0:
                raise err
            self._since = now
            detail = getattr(err, "detail", "")
            self._note("muster: musterd unreachable at %s%s; retrying for up to %s s"
                       % (self.url, " (%s)" % detail if detail else "", _number(self.grace_seconds)))
        if now - self._since >= self.grace_seconds:
            raise MusterError("%s (retried for %s s; Client(reconnect_seconds=...) or MUSTER_RECONNECT_SECONDS "
                              "sets how long)" % (err.message, _number(self.grace_seconds)),
                              code="unavailable") from None
        self._tries += 1
        self._sleep(min(0.25 * self._tries, 1.0, max(0.0, self._since + self.grace_seconds - now)))

    def answered(self) -> None:
        """musterd answered: the outage, if any, is over."""
        self._since = None
        self._tries = 0

    def call(self, fn: Callable[[], T]) -> T:
        """fn() until it gets an answer (or raises anything but unreachable, or the grace is spent)."""
        while True:
            try:
                result = fn()
            except MusterError as err:
                self.failed(err)
                continue
            self.answered()
            return result


def _number(seconds: float) -> str:
    return "%d" % seconds if float(seconds).is_integer() else "%g" % seconds
