"""Horovod's timeline API: a Chrome trace of muster.torch's collectives, written by rank 0.

    hvd.start_timeline("/tmp/timeline.json", mark_cycles=True)
    hvd.allreduce(t, name="loss")
    hvd.stop_timeline()          # the file is complete JSON; open it in chrome://tracing

Each op is a row named by its key ("allreduce.loss") with NEGOTIATE_<KIND>
from the call until every rank had made it, then <KIND> until its result was
ready; mark_cycles adds a CYCLE_START mark per negotiation round. Only rank
0 writes (as in Horovod); on other ranks the calls do nothing. With
HOROVOD_TIMELINE=DYNAMIC (Horovod's spelling) nothing is recorded until
start_timeline; HOROVOD_TIMELINE=<file> records the DistributedOptimizer's
fusion buckets there (settings.py), not these events.
"""
import json
import os
import threading
import time

from . import state as _state

_lock = threading.Lock()
_active = None   # the Timeline being written, or None


class Timeline:
    """One trace file being written (events appended as they happen)."""

    def __init__(self, path, mark_cycles):
        self.path = path
        self.mark_cycles = mark_cycles
        self.rows = {}          # key -> pid
        self.open_phase = {}    # key -> name of the phase begun last
        self.start = time.time()
        self.file = open(path, "w")
        self.first = True
        self._write({"name": "process_name", "ph": "M", "pid": 0,
                     "args": {"name": "muster.torch", "start_time_since_epoch_in_micros": int(self.start * 1e6)}})

    def _ts(self):
        return int((time.time() - self.start) * 1e6)

    def _write(self, event):
        self.file.write(("[\n" if self.first else ",\n") + json.dumps(event, separators=(",", ":")))
        self.first = False
        self.file.flush()

    def _row(self, key):
        pid = self.rows.get(key)
        if pid is None:
            pid = self.rows[key] = len(self.rows) + 1
            self._write({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": key}})
        return pid

    def begin(self, key, phase):
        pid = self._row(key)
        ended = self.open_phase.pop(key, None)
        if ended is not None:
            self._write({"name": ended, "ph": "E", "ts": self._ts(), "pid": pid, "tid": 1})
        self.open_phase[key] = phase
        self._write({"name": phase, "ph": "B", "ts": self._ts(), "pid": pid, "tid": 1})

    def end(self, key):
        phase = self.open_phase.pop(key, None)
        if phase is not None:
            self._write({"name": phase, "ph": "E", "ts": self._ts(), "pid": self._row(key), "tid": 1})

    def cycle(self):
        if self.mark_cycles:
            self._write({"name": "CYCLE_START", "ph": "i", "ts": self._ts(), "pid": 0, "tid": 1, "s": "g"})

    def close(self):
        for key in list(self.open_phase):
            self.end(key)
        self.file.write("\n]\n" if not self.first else "[]\n")
        self.file.close()


def start_timeline(file_path, mark_cycles=False):
    """Starts writing the timeline to `file_path` (rank 0), ending one already being written."""
    if _state.world_rank() != 0:
        return
    global _active
    path = os.fspath(file_path)
    with _lock:
        if _active is not None:
            if _active.path == path and _active.mark_cycles == mark_cycles:
                return  # already writing there (Horovod ignores a repeated start)
            _active.close()
        _active = Timeline(path, bool(mark_cycles))


def stop_timeline():
    """Ends the timeline: the file is complete JSON afterwards."""
    global _active
    with _lock:
        if _active is not None:
            _active.close()
            _active = None


# --- the engine's hooks (no-ops without a timeline) ----------------------------------

def negotiate_start(key, kind):
    with _lock:
        if _active is not None:
            _active.begin(key, "NEGOTIATE_" + kind.upper())


def negotiate_end(key, kind):
    with _lock:
        if _active is not None:
            _active.begin(key, kind.upper())


def op_end(key):
    with _lock:
        if _active is not None:
            _active.end(key)


def cycle():
    with _lock:
        if _active is not None:
            _active.cycle()


def current():
    """The hooks' module (engines call it whatever the state; each hook checks for a timeline)."""
    import sys
    return sys.modules[__name__]
