"""The records the SDK hands out: musterd's JSON objects, as dicts that read as one line.

Worker and Cluster are dicts (subclasses of dict): `w["id"]`, `w.get(...)`,
`json.dumps(w)`, `w == {...}` and every dict method work as on the plain
dicts they replace. Only their repr is short, so a notebook cell that shows
them reads

    [<Worker 3fa9c0d1e2 running 10.0.0.7 4.2 s>, <Worker 7b1e44a0c9 failed exit 3 0.5 s: the script exited ...>]
    <Cluster c-5e21ab07 mpi succeeded 5 s>

and `.record` is the whole record as a plain dict (its repr is all of it).
A failure from await_workers carries `log_tail`, the end of the worker's
log: a LogTail, the text musterd sent (a str, as before), with `.lines`, and
shown in a notebook as those lines rather than one escaped string.

Example::

    workers = muster.launch_workers(n=2, cpu=1, memory=1, script="train.py")
    workers                      # [<Worker 3fa9c0d1e2 starting>, <Worker 7b1e44a0c9 starting>]
    workers[0].record            # {'id': '3fa9c0d1e2', 'status': 'starting', 'ip_address': 'unknown', ...}
"""
import datetime
from typing import Any, Dict, List, Optional

# A reason longer than this is cut in the one-line repr (the record keeps all of it).
_REASON_CHARS = 80


def seconds_text(seconds: float) -> str:
    """"0.5 s", "42 s", "2m05s", "1h02m"."""
    if seconds < 10:
        return "%.1f s" % seconds
    if seconds < 120:
        return "%d s" % seconds
    s = int(seconds)
    if s < 3600:
        return "%dm%02ds" % (s // 60, s % 60)
    return "%dh%02dm" % (s // 3600, (s % 3600) // 60)


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _REASON_CHARS else text[:_REASON_CHARS - 3] + "..."


def _instant(text: Any) -> Optional[datetime.datetime]:
    """musterd's "2026-11-22T22:15:30.123Z" as an aware datetime; None if absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


class LogTail(str):
    """The last lines of a worker's log, as musterd sent them (one string); `.lines` is the list.

    A str, so `"Traceback" in f["log_tail"]` and print() work as before; a
    notebook (IPython) shows it as its lines.
    """

    __slots__ = ()

    @property
    def lines(self) -> List[str]:
        return self.splitlines()

    def _repr_pretty_(self, p, cycle) -> None:
        # Shown alone: its lines as written. Inside a container (a record's
        # dict): the usual quoted string, so the container stays readable.
        if len(getattr(p, "stack", ())) > 1:
            p.text(repr(self))
            return
        for i, line in enumerate(self.lines):
            if i:
                p.break_()
            p.text(line)


class Worker(dict):
    """A worker record (a dict) whose repr is one line: id, status, address, how long, why.

    Example::

        w = muster.get_worker(wid)
        w                   # <Worker 3fa9c0d1e2 failed exit 3 0.5 s: the script exited with code 3>
        w["exit_code"]      # 3
        w.record            # the full record, a plain dict
    """

    __slots__ = ()

    @property
    def record(self) -> Dict[str, Any]:
        return dict(self)

    def __repr__(self) -> str:
        status = self.get("status")
        parts = ["<Worker", str(self.get("id")), str(status)]
        ip = self.get("ip_address")
        if ip and ip != "unknown":
            parts.append(str(ip))
        if self.get("exit_code") is not None and status != "succeeded":
            parts.append("exit %s" % self["exit_code"])
        if isinstance(self.get("duration"), (int, float)) and self["duration"] > 0:
            parts.append(seconds_text(self["duration"]))
        text = " ".join(parts)
        # The reason says why it is not running or done; on an await's
        # failure (it has a log_tail) it says why it is there at all.
        if self.get("reason") and (status not in ("running", "succeeded") or "log_tail" in self):
            text += ": " + _short(self["reason"])
        return text + ">"


class Cluster(dict):
    """A cluster record (a dict) whose repr is one line: id, mode, status, how long, why.

    Example::

        c = muster.horovodrun(2, "train.py", wait_for_completion=True)
        c                            # <Cluster c-5e21ab07 mpi succeeded 5 s>
        c["mpirun_command"]          # the line, as a user would run it
        c.record                     # the full record, a plain dict
    """

    __slots__ = ()

    @property
    def record(self) -> Dict[str, Any]:
        return dict(self)

    def seconds(self) -> Optional[float]:
        """From created_at to finished_at (to now while it runs); None when unknown."""
        start = _instant(self.get("created_at"))
        if start is None:
            return None
        end = _instant(self.get("finished_at")) or datetime.datetime.now(datetime.timezone.utc)
        return max(0.0, (end - start).total_seconds())

    def __repr__(self) -> str:
        parts = ["<Cluster", str(self.get("id")), str(self.get("mode")), str(self.get("status"))]
        seconds = self.seconds()
        if seconds is not None:
            parts.append(seconds_text(seconds))
        text = " ".join(parts)
        if self.get("reason") and self.get("status") in ("failed", "stopped"):
            text += ": " + _short(self["reason"])
        return text + ">"


def worker(answer: Any) -> Any:
    """A worker object from musterd as a Worker (its log_tail a LogTail); anything else as it came."""
    if not isinstance(answer, dict):
        return answer
    out = Worker(answer)
    if isinstance(out.get("log_tail"), str):
        out["log_tail"] = LogTail(out["log_tail"])
    return out


def workers(answers: Any) -> List[Any]:
    return [worker(w) for w in answers or []]


def cluster(answer: Any) -> Any:
    """A cluster object from musterd as a Cluster; anything else as it came."""
    return Cluster(answer) if isinstance(answer, dict) else answer


def await_result(answer: Any) -> Dict[str, List[Any]]:
    """await_workers' {"workers": [...], "failures": [...]}, each a Worker: the dict of lists reads short."""
    answer = answer if isinstance(answer, dict) else {}
    out = dict(answer)
    out["workers"] = workers(answer.get("workers"))
    out["failures"] = workers(answer.get("failures"))
    return out
