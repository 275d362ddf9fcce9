"""The engine of one process set: a thread that negotiates and runs muster.torch's collectives.

Horovod's model, kept here: a collective call queues a request and returns a
handle; a background thread agrees with the other ranks, in rounds, on
which requests every rank has made (negotiation.py), then runs those, in one
order on every rank, on the runtime (execution.py). So ranks may start
collectives in different orders, async ops make progress while the caller
computes, a rank that joined stands in for the others' allreduces, and a
mismatch (dtype, shape, root, ...) is an error on every rank before any
byte moved.

The thread's loop, step by step:
  a) Wait for something to say: a new request, a join, a shutdown; or, with
     nothing to say, the cycle time (1 ms while this rank has requests in
     flight, HOROVOD_CYCLE_TIME; 100 ms when idle). Every rank keeps taking
     part in rounds while idle, so a rank waiting on the others never times
     out against ranks that are merely busy computing; only a dead or hung
     rank (whose engine stops) makes the runtime's watchdog fire.
  b) One round: every rank's message to every rank (Collectives.exchange).
  c) The same Decision on every rank (negotiation.Negotiation.round).
  d) Fail this rank's requests the decision failed (mismatch, stall), run
     the ready ones (execution.run), finish a join, note shutdowns.
A runtime error (a dead peer, a timeout) breaks the engine: every request
in flight and every later call raises it, naming the peer.

Threads: requests are queued from any thread under `_lock`; only the engine
thread exchanges, negotiates and runs ops. Handles are waited on from any
thread.
"""
import logging
import threading
import time

from ..runtime_errors import CommError, InvalidArgument, MismatchError, RuntimeFailure
from ..settings import Settings
from . import negotiation
from .execution import run_ready

log = logging.getLogger("muster.torch")

IDLE_CYCLE_S = 0.1


class Handle:
    """The completion of one request: wait() returns its result or raises its error."""

    __slots__ = ("_event", "result", "error", "request", "release")

    def __init__(self):
        self._event = threading.Event()
        self.result = None
        self.error = None
        self.request = None
        self.release = _nothing  # called once the caller took the result (frees a held name)

    def done(self):
        return self._event.is_set()

    def wait(self):
        while not self._event.wait(0.2):  # wakes now and then, so Ctrl-C reaches a waiting notebook
            pass
        self.release()
        if self.error is not None:
            raise self.error
        return self.result

    def finish(self, result=None):
        self.result = result
        self._event.set()

    def fail(self, error):
        self.error = error
        self._event.set()


class Request:
    """One collective this rank started: its key, descriptor and the work execution.py does for it."""

    __slots__ = ("key", "desc", "work", "handle", "started")

    def __init__(self, key, desc, work):
        self.key = key
        self.desc = desc
        self.work = work          # execution.Work: inputs, outputs, how to finish
        self.handle = Handle()
        self.handle.request = self
        self.started = time.monotonic()


class EngineStopped(CommError):
    """The process set's engine is shut down (this rank or another called shutdown()).

    A CommError (hvd.HorovodInternalError), as in Horovod, where a rank that
    shut down ends every rank's collectives.
    """


class Engine:
    """Negotiates and runs the collectives of one process set (see the module doc).

    `coll` is the set's Collectives; `world_ranks[i]` the global rank of set rank i.
    """

    def __init__(self, coll, world_ranks, name="global", cycle_s=0.001, stall_s=60.0, fusion_bytes=64 << 20,
                 timeline=None):
        self.coll = coll
        self.rank = coll.rank
        self.size = coll.size
        self.world_ranks = list(world_ranks)
        self.name = name
        self.cycle_s = cycle_s
        self.stall_s = stall_s
        self.fusion_bytes = fusion_bytes
        self.timeline = timeline
        self.negotiation = negotiation.Negotiation(self.size)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue = []          # requests not yet announced
        self._inflight = {}       # key -> Request, from submit() until finished
        self._held = {}           # key -> Handle whose result was not taken yet (submit's hold_name)
        self._unnamed = {}        # kind -> count of unnamed requests (their keys)
        self._join = None         # Handle of this rank's join() in progress
        self._join_announced = False
        self._bye = False         # shutdown requested here
        self._broken = None       # the error that ended the engine
        # id -> weakref to a callable a joined rank runs (engine thread) to stand in for an "optimizer" op
        self.stand_ins = {}
        self._thread = threading.Thread(target=self._loop, name="muster-torch-%s" % name, daemon=True)
        self._thread.start()

    # -- requests (any thread) ---------------------------------------------------

    def submit(self, kind, name, desc, work, hold_name=False):
        """Queues a request; returns its Handle. InvalidArgument when `name` is in use already.

        A name is in use from the call until the op is done; with `hold_name`
        (the API's async calls) until its result was taken (Handle.release():
        synchronize(), or poll() seeing it done), so whether a second call
        with the name raises never depends on how fast the ranks were.
        """
        with self._lock:
            self._raise_if_unusable()
            if name is None or name == "":
                n = self._unnamed.get(kind, 0)
                self._unnamed[kind] = n + 1
                key = "%s.noname.%d" % (kind, n)
            else:
                key = "%s.%s" % (kind, name)
                if key in self._inflight or key in self._held:
                    raise InvalidArgument(
                        "%s: a %s named %r is already in flight on this rank; names of ops in flight must be "
                        "unique (synchronize the first one, or give another name)" % (key, kind, name))
            desc = dict(desc, kind=kind)
            req = Request(key, desc, work)
            if hold_name and name:
                self._held[key] = req.handle
                req.handle.release = lambda: self._release(key, req.handle)
            self._inflight[key] = req
            self._queue.append(req)
            if self.timeline is not None:
                self.timeline.negotiate_start(key, kind)
            self._wake.notify()
        return req.handle

    def _release(self, key, handle):
        with self._lock:
            if self._held.get(key) is handle:  # not a later op that reuses the name
                del self._held[key]

    def join(self):
        """Starts this rank's join; the returned Handle's result is the rank that joined last."""
        with self._lock:
            self._raise_if_unusable()
            if self._join is not None:
                raise InvalidArgument("join() is already in progress on this rank")
            self._join = Handle()
            self._join_announced = False
            self._wake.notify()
            return self._join

    def shutdown(self, timeout_s=10.0):
        """Tells the other ranks this rank is leaving, stops the thread (waits up to `timeout_s`)."""
        with self._lock:
            if self._broken is None:
                self._bye = True
            self._wake.notify()
        self._thread.join(timeout_s)
        with self._lock:
            if self._broken is None:
                self._break(EngineStopped("muster.torch was shut down on this rank (hvd.shutdown())"))

    def alive(self):
        return self._thread.is_alive()

    def _raise_if_unusable(self):
        if self._broken is not None:
            raise _again(self._broken)
        if self._bye:
            raise EngineStopped("muster.torch is shutting down on this rank")

    # -- the loop (engine thread) ----------------------------------------------

    def _loop(self):
        try:
            while True:
                msg, announced = self._next_message()
                if msg is None:
                    return
                raw = self.coll.exchange(negotiation.encode(msg))
                decision = self.negotiation.round([negotiation.decode(m) for m in raw])
                if self.timeline is not None:
                    self.timeline.cycle()
                self._apply(decision)
                if decision.shutdown:
                    who = [self.world_ranks[r] for r in decision.shutdown]
                    self._break(EngineStopped(
                        "muster.torch was shut down on %s; collectives need every rank of the process set, so "
                        "none can run any more (Horovod's rule: once a rank shuts down, all do)"
                        % negotiation.ranks_text(who), rank=next((r for r in who if r != self.world_ranks[self.rank]), None)))
                    return
        except BaseException as e:  # noqa: BLE001 - a peer's death or a bug: every waiter must hear of it
            if not isinstance(e, RuntimeFailure):
                log.exception("muster.torch engine %s failed", self.name)
                e = CommError("muster.torch's engine thread failed: %s: %s" % (type(e).__name__, e))
            self._break(e)

    def _next_message(self):
        """Waits per step a); returns (message, requests announced) or (None, None) to stop."""
        with self._lock:
            busy = bool(self._inflight) or self._join is not None
            deadline = time.monotonic() + (self.cycle_s if busy else IDLE_CYCLE_S)
            while not self._queue and not self._bye and self._broken is None and \
                    not (self._join is not None and not self._join_announced):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.wait(left)
            if self._broken is not None:
                return None, None
            announced, self._queue = self._queue, []
            msg = {"ops": [[r.key, r.desc] for r in announced]}
            if self._join is not None and not self._join_announced:
                msg["join"] = 1
                self._join_announced = True
            if self._bye:
                msg["bye"] = 1
            if self.rank == 0:
                msg["clock"] = time.monotonic()
                msg["stall"] = self.stall_s
            return msg, announced

    def _apply(self, decision):
        """Step d): fails, runs and finishes what the round decided."""
        with self._lock:
            mine = []
            for ready in decision.ready:
                req = self._inflight.get(ready.key) if self.rank in ready.descs else None
                mine.append((ready, req))
                if req is None and self.rank in ready.joined:
                    self._stood_in(ready.key)
            stalled = [self._inflight.get(key) for key, descs, _ in decision.stalled if self.rank in descs]
        for (key, _, message), req in zip([s for s in decision.stalled if self.rank in s[1]], stalled):
            if req is not None:
                self._done(req, error=MismatchError(message))
        runnable = []
        for ready, req in mine:
            if ready.error is not None:
                if req is not None:
                    self._done(req, error=MismatchError(self._global_names(ready.error)))
            elif req is not None or ready.joined:
                runnable.append((ready, req))
        if runnable:
            if self.timeline is not None:
                for ready, _ in runnable:
                    self.timeline.negotiate_end(ready.key, ready.desc()["kind"])
            results = run_ready(self, runnable)
            for (ready, req), result in zip(runnable, results):
                if req is not None:
                    self._done(req, result=result)
        if decision.join_done is not None:
            with self._lock:
                handle, self._join = self._join, None
            if handle is not None:
                handle.finish(self.world_ranks[decision.join_done])

    def _stood_in(self, key):
        """This rank joined and stood in for `key`: an unnamed op counts as issued here too (lock held).

        So the ranks' counts of unnamed ops stay alike when joined ranks skip
        the ops the others run (or fail) meanwhile.
        """
        kind, sep, index = key.partition(".noname.")
        if sep and index.isdigit():
            self._unnamed[kind] = max(self._unnamed.get(kind, 0), int(index) + 1)

    def _global_names(self, message):
        """Errors name global ranks (what hvd.rank() says), not ranks within the set."""
        if self.world_ranks == list(range(self.size)):
            return message
        return "%s (process set ranks %s are global ranks %s)" % (message, list(range(self.size)), self.world_ranks)

    def _done(self, req, result=None, error=None):
        with self._lock:
            self._inflight.pop(req.key, None)
        if self.timeline is not None:
            self.timeline.op_end(req.key)
        if error is not None:
            req.handle.fail(error)
        else:
            req.handle.finish(result)

    def _break(self, error):
        """Ends the engine with `error`: every request in flight and every later call raises it."""
        with self._lock:
            if self._broken is None:
                self._broken = error
            waiting = list(self._inflight.values())
            self._inflight.clear()
            self._queue = []
            join, self._join = self._join, None
        for req in waiting:
            req.handle.fail(_again(error))
        if join is not None:
            join.fail(_again(error))


def _nothing():
    pass


def _again(error):
    """A fresh exception of `error`'s class and message (one instance per raise, keeping `rank`)."""
    try:
        fresh = type(error)(error.message if hasattr(error, "message") else str(error))
    except TypeError:
        return error
    if hasattr(error, "rank"):
        fresh.rank = error.rank
    return fresh


def stall_seconds():
    """How long a request may wait for the other ranks to start it: the runtime's peer timeout."""
    ms = Settings.environment().integer("MUSTER_COMM_TIMEOUT_MS", None, 0, (1 << 31) - 1)
    return 60.0 if ms is None else max(ms, 1) / 1000.0
