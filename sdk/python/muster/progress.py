"""Progress of the blocking calls, and what Ctrl-C does to them.

Progress is one status line that the blocking calls (await_workers,
await_cluster, run_cluster, horovodrun with wait_for_completion=True) keep
up to date while they wait:

- in a Jupyter kernel: a display updated in place
  (IPython.display.display(..., display_id=True).update); IPython is only
  used when the kernel already loaded it, never imported otherwise;
- in a terminal (stderr is a tty): one stderr line rewritten with "\\r";
- otherwise (a pipe, a log file, a test): nothing.
`progress=False` on any of those calls turns it off.

on_interrupt() is the other half: when the user interrupts the wait (Ctrl-C,
a Jupyter "interrupt kernel"), the call stops what it started or waited on
(stop_on_interrupt=True, the default) and then re-raises KeyboardInterrupt.
"""
import contextlib
import sys
import time
from typing import Callable, Iterator, Optional, TextIO

from .errors import MusterError, MusterInterrupted


def _jupyter_shell():
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        shell = ipython.get_ipython()
    except Exception:  # noqa: BLE001 - an odd IPython must never break a call
        return None
    return shell if shell is not None and getattr(shell, "kernel", None) is not None else None


def elapsed_text(seconds: float) -> str:
    """"7s", "2m05s", "1h02m"."""
    s = int(seconds)
    if s < 60:
        return "%ds" % s
    if s < 3600:
        return "%dm%02ds" % (s // 60, s % 60)
    return "%dh%02dm" % (s // 3600, (s % 3600) // 60)


class _Status:
    """What the Jupyter display shows: plain text, and the same in HTML."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        import html
        return "<pre style=\"margin:0\">%s</pre>" % html.escape(self.text)


class Progress:
    """One status line, shown where the user can see it (see the module comment).

    Example::

        bar = Progress(enabled=True)
        bar.update("2/4 workers running")
        bar.close("4/4 workers running")
    """

    def __init__(self, enabled: bool = True, stream: Optional[TextIO] = None, min_interval: float = 0.2) -> None:
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self._min_interval = min_interval
        self._last = 0.0
        self._width = 0
        self._handle = None
        self._enabled = enabled
        self._events = []  # jupyter: the event lines kept below the status line
        self.shown_events = set()  # keys of the events shown already (clusters.show_events)
        self._text = ""
        self.mode = None
        if not enabled:
            return
        if _jupyter_shell() is not None:
            self.mode = "jupyter"
        else:
            try:
                self.mode = "tty" if self.stream.isatty() else None
            except (AttributeError, ValueError):
                self.mode = None

    @property
    def active(self) -> bool:
        return self.mode is not None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def update(self, text: str, force: bool = False, details: str = "") -> None:
        """Shows `text` (plus the elapsed time); at most every min_interval unless forced.

        details: lines shown below it (a failed worker's last log lines).
        """
        if self.mode is None:
            return
        self._text = text
        now = time.monotonic()
        if not force and now - self._last < self._min_interval:
            return
        self._last = now
        line = "muster: %s [%s]" % (text, elapsed_text(self.elapsed()))
        if self.mode == "jupyter":
            below = "\n".join(self._events + ([details] if details else []))
            shown = _Status(line + ("\n" + below if below else ""))
            try:
                if self._handle is None:
                    from IPython.display import display
                    self._handle = display(shown, display_id=True)
                else:
                    self._handle.update(shown)
            except Exception:  # noqa: BLE001 - progress is a courtesy; the call goes on without it
                self.mode = None
            return
        self.stream.write("\r" + line.ljust(self._width))
        self._width = len(line)
        if details:
            self.stream.write("\n" + details.rstrip("\n") + "\n")
            self._width = 0
        self.stream.flush()

    def note(self, text: str) -> None:
        """One line that must be seen whatever the mode (an outage, say): on stderr, below the status
        line on a tty (which the next update draws again)."""
        if self.mode == "tty":
            self.stream.write("\r" + text.ljust(self._width) + "\n")
            self.stream.flush()
            self._width = 0
            self._last = 0.0
            return
        print(text, file=sys.stderr, flush=True)

    def event(self, text: str) -> None:
        """One line about something that happened meanwhile (a rank died, a replacement joined), shown as
        it happens: kept below the status line in a notebook, printed above it on a tty, and printed
        plainly where there is no status line (output to a pipe); nothing with progress off."""
        if not self._enabled:
            return
        line = "muster: " + text
        if self.mode == "jupyter":
            self._events = (self._events + [line])[-20:]
            self.update(self._text, force=True)
        elif self.mode == "tty":
            self.note(line)
        else:
            print(line, file=self.stream, flush=True)

    def close(self, text: Optional[str] = None, details: str = "") -> None:
        """Shows the final text (if any, with `details` below it) and ends the line; later updates are ignored."""
        if self.mode is None:
            return
        if text is not None:
            self.update(text, force=True, details=details)
        if self.mode == "tty" and self._width:
            self.stream.write("\n")
            self.stream.flush()
        self.mode = None


@contextlib.contextmanager
def on_interrupt(enabled: bool, stop: Callable[[], object], what: str,
                 bar: Optional[Progress] = None, **attributes) -> Iterator[None]:
    """On KeyboardInterrupt inside the block: close `bar`, run stop() if enabled
    (once more if a second Ctrl-C hits it), then raise MusterInterrupted, whose
    one line says what happened, with `attributes` set on it (e.g. cluster_id)
    and without the traceback of the HTTP call it cut short."""
    try:
        yield
    except MusterInterrupted:
        raise  # an inner call dealt with it
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        line = "muster: interrupted; %s left running (stop_on_interrupt=False)" % what
        if enabled:
            for _ in range(2):
                try:
                    stop()
                    line = "muster: interrupted; stopped %s" % what
                    break
                except KeyboardInterrupt:
                    continue
                except MusterError as err:
                    line = "muster: interrupted; could not stop %s: %s" % (what, err)
                    break
        interrupted = MusterInterrupted(line)
        for name, value in attributes.items():
            setattr(interrupted, name, value)
        raise interrupted from None


def _excepthook(kind, value, traceback, previous=sys.excepthook):
    """A MusterInterrupted nobody caught prints its one line, not a traceback; the rest goes on as before."""
    if isinstance(value, MusterInterrupted):
        print(value, file=sys.stderr, flush=True)
        return
    previous(kind, value, traceback)


if getattr(sys.excepthook, "__name__", "") != "_excepthook":  # chained once, even if this module is reloaded
    sys.excepthook = _excepthook
