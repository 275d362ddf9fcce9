"""Training metrics for musterd's dashboard and /metrics (standard library only).

Call from rank 0 / the chief of a training script that musterd started::

    import muster.metrics
    muster.metrics.report(step=100, loss=0.42, images_per_sec=5300, lr=0.01)
    muster.metrics.report(step=1000, accuracy=0.88)

The points go, batched, to POST $MUSTER_URL/api/v1/agent/workers/$MUSTER_WORKER_ID/metrics
with the worker's $MUSTER_METRICS_TOKEN (else $MUSTER_AGENT_TOKEN); musterd gives these to every
worker's script and, in mpi clusters, to mpirun's ranks. The same rules as the C++ runtime's reporter
(runtime/report/metrics_reporter.h):

- report() never blocks and never raises for delivery: it appends to a bounded queue
  (MAX_QUEUED points; beyond it new points are dropped and counted) that a daemon thread
  sends every INTERVAL seconds, at most MAX_BATCH points per request, TIMEOUT seconds each;
- a daemon that is down or refuses a batch loses only that batch;
- without the three variables (training outside musterd) report() does nothing;
- at interpreter exit what is queued gets one last try (bounded by TIMEOUT).

Bad arguments (a non-integer step, a non-number loss) raise ValueError at once: those are
bugs in the caller, not delivery problems.
"""
import atexit
import json
import math
import os
import threading
import time
import urllib.error
import urllib.request

__all__ = ["report", "Reporter", "reporter"]

INTERVAL = 1.0
TIMEOUT = 2.0
MAX_QUEUED = 10000
MAX_BATCH = 1000
_SCALARS = ("loss", "images_per_sec", "lr", "accuracy")


def make_point(step, **scalars):
    """Validates and returns one point (a dict) as the daemon expects it."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError("step must be an integer >= 0, not %r" % (step,))
    point = {"step": step, "time": round(time.time(), 3)}
    for name, value in scalars.items():
        if name not in _SCALARS:
            raise ValueError("unknown metric %r (known: %s)" % (name, ", ".join(_SCALARS)))
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
            raise ValueError("%s must be a number, not %r" % (name, value))
        value = float(value)
        if math.isfinite(value):  # NaN/inf are dropped: the daemon refuses them
            point[name] = value
    return point


class Reporter:
    """Sends points to one daemon for one worker; see the module docstring."""

    def __init__(self, url, worker_id, token, interval=INTERVAL, timeout=TIMEOUT, max_queued=MAX_QUEUED,
                 max_batch=MAX_BATCH):
        self.enabled = bool(url and worker_id and token and url.startswith("http://"))
        self._url = (url or "").rstrip("/") + "/api/v1/agent/workers/%s/metrics" % worker_id
        self._token = token
        self._interval, self._timeout = interval, timeout
        self._max_queued, self._max_batch = max_queued, max_batch
        self._queue = []
        self._lock = threading.Condition()
        self._quit = False
        self.sent = self.dropped = self.failed_requests = 0
        self._thread = None
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def report(self, step, **scalars):
        point = make_point(step, **scalars)
        if not self.enabled:
            return
        with self._lock:
            if len(self._queue) >= self._max_queued:
                self.dropped += 1
                return
            self._queue.append(point)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="muster-metrics", daemon=True)
                self._thread.start()

    def close(self):
        """Sends what is queued (one try) and stops the thread."""
        with self._lock:
            self._quit = True
            self._lock.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(self._timeout + 1)

    def _loop(self):
        with self._lock:
            while not self._quit:
                self._lock.wait(self._interval)
                self._send_some()
            self._send_some()

    def _send_some(self):  # called with the lock held
        batch = self._queue[:self._max_batch]
        if not batch:
            return
        del self._queue[:len(batch)]
        self._lock.release()
        ok = False
        try:
            req = urllib.request.Request(self._url, data=json.dumps({"points": batch}).encode(), method="POST",
                                         headers={"Authorization": "Bearer " + self._token,
                                                  "Content-Type": "application/json"})
            with self._opener.open(req, timeout=self._timeout) as resp:
                ok = 200 <= resp.status < 300
        except (urllib.error.URLError, OSError, ValueError):
            ok = False
        finally:
            self._lock.acquire()
        if ok:
            self.sent += len(batch)
        else:
            self.failed_requests += 1
            self.dropped += len(batch)


_reporter = None
_reporter_lock = threading.Lock()


def reporter():
    """The process's reporter, from MUSTER_URL, MUSTER_WORKER_ID and MUSTER_METRICS_TOKEN."""
    global _reporter
    with _reporter_lock:
        if _reporter is None:
            _reporter = Reporter(os.environ.get("MUSTER_URL"), os.environ.get("MUSTER_WORKER_ID"),
                                 os.environ.get("MUSTER_METRICS_TOKEN") or os.environ.get("MUSTER_AGENT_TOKEN"))
            if _reporter.enabled:
                atexit.register(_reporter.close)
        return _reporter


def report(step, loss=None, images_per_sec=None, lr=None, accuracy=None):
    """Queues one point for musterd (no-op outside musterd); never blocks."""
    reporter().report(step, loss=loss, images_per_sec=images_per_sec, lr=lr, accuracy=accuracy)
