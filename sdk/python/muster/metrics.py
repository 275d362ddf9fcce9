"""Training metrics for musterd's dashboard and /metrics (standard library only).

From a training script that musterd started (any rank; each rank's points make its own line)::

    import muster.metrics
    muster.metrics.report(step=100, loss=0.42, images_per_sec=5300, lr=0.01)
    muster.metrics.report(step=1000, accuracy=0.88, scalars={"val/loss": 0.51})

or, as with torch.utils.tensorboard (Debian has no TensorBoard; change only the import)::

    from muster.metrics import SummaryWriter
    writer = SummaryWriter()
    writer.add_scalar("Train/Loss", loss.item(), niter)
    writer.add_scalars("Loss", {"train": 0.4, "val": 0.5}, epoch)  # curves Loss/train, Loss/val
    writer.close()

The points go, batched, to POST $MUSTER_URL/api/v1/agent/workers/$MUSTER_WORKER_ID/metrics
with the worker's $MUSTER_METRICS_TOKEN (else $MUSTER_AGENT_TOKEN); musterd gives these to every
worker's script and, in mpi clusters, to mpirun's ranks, which report through worker 0 with their
rank ($OMPI_COMM_WORLD_RANK, $HOROVOD_RANK, $PMI_RANK or $RANK). The same rules as the C++
runtime's reporter (runtime/report/metrics_reporter.h):

- report() never blocks and never raises for delivery: it appends to a bounded queue
  (MAX_QUEUED points; beyond it new points are dropped and counted) that a daemon thread
  sends every INTERVAL seconds, at most MAX_BATCH points per request, TIMEOUT seconds each;
- a daemon that is down or refuses a batch loses only that batch;
- without the three variables (training outside musterd) report() does nothing;
- at interpreter exit what is queued gets one last try (bounded by TIMEOUT).

Bad arguments (a non-integer step, a non-number loss, a bad scalar name) raise ValueError at
once: those are bugs in the caller, not delivery problems. SummaryWriter instead maps any
TensorBoard tag onto a valid name, as a drop-in replacement must.
"""
import atexit
import json
import math
import os
import re
import threading
import time
import urllib.error
import urllib.request

from ._http import opener
from .errors import MusterError
from .settings import Settings
from .tls import TlsVerify

__all__ = ["report", "Reporter", "reporter", "SummaryWriter"]

INTERVAL = 1.0
TIMEOUT = 2.0
MAX_QUEUED = 10000
MAX_BATCH = 1000
_SCALARS = ("loss", "images_per_sec", "lr", "accuracy")
_NAME = re.compile(r"^[A-Za-z0-9_./:()-]([A-Za-z0-9 _./:()-]{0,62}[A-Za-z0-9_./:()-])?$")
_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK", "RANK")


def _number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise ValueError("%s must be a number, not %r" % (name, value))
    return float(value)


def _whole(name, value, low):
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError("%s must be an integer >= %d, not %r" % (name, low, value))
    return value


def env_rank(environ=None):
    """This process's rank from the launcher's environment (mpirun, horovodrun, torchrun), or None."""
    environ = os.environ if environ is None else environ
    for name in _RANK_VARIABLES:
        value = environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def make_point(step, scalars=None, rank=None, total_steps=None, time_=None, **classic):
    """Validates and returns one point (a dict) as the daemon expects it.

    classic: loss, images_per_sec, lr, accuracy; scalars: {name: number} for any other
    (names of 1..64 letters, digits, space and _ . / : ( ) -).
    """
    _whole("step", step, 0)
    point = {"step": step, "time": round(time.time() if time_ is None else float(time_), 3)}
    if rank is not None:
        point["rank"] = _whole("rank", rank, 0)
    if total_steps is not None:
        point["total_steps"] = _whole("total_steps", total_steps, 1)
    for name, value in classic.items():
        if name not in _SCALARS:
            raise ValueError("unknown metric %r (known: %s; put any other in scalars={...})"
                             % (name, ", ".join(_SCALARS)))
        if value is None:
            continue
        value = _number(name, value)
        if math.isfinite(value):  # NaN/inf are dropped: the daemon refuses them
            point[name] = value
    for name, value in (scalars or {}).items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError("bad scalar name %r: 1..64 letters, digits, space and _ . / : ( ) -" % (name,))
        if value is None:
            continue
        value = _number(name, value)
        if math.isfinite(value):
            point.setdefault("scalars", {})[name] = value
    return point


class Reporter:
    """Sends points to one daemon for one worker; see the module docstring."""

    def __init__(self, url, worker_id, token, interval=INTERVAL, timeout=TIMEOUT, max_queued=MAX_QUEUED,
                 max_batch=MAX_BATCH, tls=None):
        self.enabled = bool(url and worker_id and token and url.startswith(("http://", "https://")))
        self._url = (url or "").rstrip("/") + "/api/v1/agent/workers/%s/metrics" % worker_id
        self._token = token
        self._interval, self._timeout = interval, timeout
        self._max_queued, self._max_batch = max_queued, max_batch
        self._queue = []
        self._lock = threading.Condition()
        self._quit = False
        self._flush_now = False
        self.sent = self.dropped = self.failed_requests = 0
        self._thread = None
        if tls is None and self.enabled and url.startswith("https://"):
            # What musterd gives each worker: the pin of its certificate.
            tls = TlsVerify(os.environ.get("MUSTER_CA_FILE"), os.environ.get("MUSTER_TLS_FINGERPRINT"),
                            "MUSTER_CA_FILE / MUSTER_TLS_FINGERPRINT")
        self._opener = opener(self._url, tls)

    def report(self, step, **fields):
        """Queues one point (make_point's arguments); never blocks."""
        self.queue(make_point(step, **fields))

    def queue(self, point):
        if not self.enabled or len(point) <= 2 + ("rank" in point) + ("total_steps" in point):
            return  # outside musterd, or a point without a (finite) scalar
        with self._lock:
            if len(self._queue) >= self._max_queued:
                self.dropped += 1
                return
            self._queue.append(point)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="muster-metrics", daemon=True)
                self._thread.start()

    def flush(self, timeout=None):
        """Sends what is queued now (each batch one try); returns once the queue is empty or after timeout."""
        deadline = time.monotonic() + (self._timeout * 2 if timeout is None else timeout)
        with self._lock:
            while self._queue and self._thread is not None and not self._quit and time.monotonic() < deadline:
                self._flush_now = True
                self._lock.notify_all()
                self._lock.wait(0.05)

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
                if not self._flush_now:
                    self._lock.wait(self._interval)
                self._flush_now = False
                self._send_some()
                self._lock.notify_all()
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
        except (urllib.error.URLError, OSError, ValueError, MusterError):  # MusterError: the certificate refused
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
            env = Settings.environment()
            _reporter = Reporter(env.raw("MUSTER_URL"), env.raw("MUSTER_WORKER_ID"),
                                 env.raw("MUSTER_METRICS_TOKEN") or env.raw("MUSTER_AGENT_TOKEN"))
            if _reporter.enabled:
                atexit.register(_reporter.close)
        return _reporter


def report(step, loss=None, images_per_sec=None, lr=None, accuracy=None, scalars=None, total_steps=None,
           rank=None):
    """Queues one point for musterd (no-op outside musterd); never blocks.

    scalars={"val/loss": 0.5} adds any other named scalar; total_steps (the run's last step)
    lets the dashboard show an ETA; rank defaults to the launcher's ($OMPI_COMM_WORLD_RANK, ...).

    Example::

        muster.metrics.report(step, loss=loss.item(), lr=0.01, total_steps=epochs * len(loader))
    """
    reporter().report(step, loss=loss, images_per_sec=images_per_sec, lr=lr, accuracy=accuracy, scalars=scalars,
                      total_steps=total_steps, rank=env_rank() if rank is None else rank)


def _tag_name(tag):
    """A TensorBoard tag as a curve name: other characters become _, at most 64."""
    name = re.sub(r"[^A-Za-z0-9 _./:()-]", "_", str(tag)).strip(" ")[:64].strip(" ")
    return name or "_"


class SummaryWriter:
    """torch.utils.tensorboard.SummaryWriter's scalar calls, drawn as musterd's dashboard curves.

    A drop-in for scripts written against TensorBoard: change only the import. add_scalar and
    add_scalars report (one line per rank); flush() sends what is queued; close() flushes; the
    writer is a context manager. log_dir and the other constructor arguments are accepted and
    ignored (nothing is written to disk); so are the other add_* calls (histograms, images,
    graphs, text, hparams ...), which have no curve to go to. Outside musterd every call is a
    no-op. Tags may be any text: characters other than letters, digits, space and _ . / : ( ) -
    become _, and a tag is cut at 64 characters.

    Example::

        from muster.metrics import SummaryWriter
        writer = SummaryWriter("/home/user/share/log/mnist_test", total_steps=epochs * len(train_loader))
        writer.add_scalar("Train/Loss", loss.item(), niter)
        writer.add_scalars("Accuracy", {"train": 0.91, "test": 0.89}, epoch)
        writer.close()
    """

    def __init__(self, log_dir=None, comment="", purge_step=None, max_queue=10, flush_secs=120, filename_suffix="",
                 total_steps=None, rank=None):
        self.log_dir = log_dir
        self.total_steps = None if total_steps is None else _whole("total_steps", total_steps, 1)
        self.rank = env_rank() if rank is None else _whole("rank", rank, 0)
        self._next_step = {}

    def get_logdir(self):
        return self.log_dir

    def _step(self, name, global_step):
        if global_step is None:  # TensorBoard records such points at the tag's next step
            step = self._next_step.get(name, 0)
        else:
            step = int(global_step)
        self._next_step[name] = step + 1
        return step

    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None, new_style=False,
                   double_precision=False):
        """One point of the curve `tag` (scalar_value: a number, or a one-element tensor or array)."""
        name = _tag_name(tag)
        reporter().queue(make_point(self._step(name, global_step), scalars={name: scalar_value}, rank=self.rank,
                                    total_steps=self.total_steps, time_=walltime))

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None):
        """One point on each curve main_tag/<key> of tag_scalar_dict."""
        for tag, value in tag_scalar_dict.items():
            self.add_scalar("%s/%s" % (main_tag, tag), value, global_step, walltime)

    def flush(self):
        reporter().flush()

    def close(self):
        reporter().flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __getattr__(self, name):
        if name.startswith("add_"):  # add_histogram, add_image, add_graph, ...: nothing to draw
            return lambda *args, **kwargs: None
        raise AttributeError(name)
