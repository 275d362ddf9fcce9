"""Client: one connection target (URL + token) and every REST call on it.

The module-level functions (muster.launch_workers, ...) build a Client from
the environment on each call; use a Client directly to talk to a daemon other
than the discovered one, or to set the request timeout.
"""
import shlex
import time
import urllib.parse
import warnings
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from . import clusters as _clusters
from . import interpreter as _interpreter
from . import records as _records
from ._http import DEFAULT_TIMEOUT_S, Transport
from .config import discover, source_of_url, tls_settings
from .config import reconnect_seconds as reconnect_seconds_of
from .errors import MusterError, MusterWarning
from .follow import WORKER_TERMINAL, follow_log, log_path
from .ids import many_ids, one_id
from .outage import Outage
from .progress import Progress, on_interrupt
from .records import Cluster, Worker

WorkerRef = Union[str, Mapping[str, Any]]
Args = Union[None, str, Sequence[Any]]

# CML cloud's launch arguments: accepted for portability, no meaning on musterd.
CML_ONLY_ARGS = ("accelerator_label_id", "resource_profile_id", "resource_group_id")

# Extra seconds an await's HTTP request may take beyond the server-side wait.
_AWAIT_SLACK_S = 30.0


def _args_list(args):
    if args is None:
        return []
    if isinstance(args, str):
        return shlex.split(args)
    return [str(a) for a in args]


def _env_dict(env):
    if not env:
        return {}
    if not isinstance(env, dict):
        raise MusterError("env must be a dict of NAME -> value", code="invalid_argument", field="env")
    return {str(k): v if isinstance(v, str) else str(v) for k, v in env.items()}


def _log_query(tail, from_start):
    """The query of a (not followed) logs read; the daemon's default without either."""
    if from_start:
        if tail is not None:
            raise ValueError("give tail or from_start, not both: from_start reads the whole log")
        return {"from_start": "true"}
    return {"tail": int(tail)} if tail is not None else None


def _path_id(value, what="worker"):
    return urllib.parse.quote(one_id(value, what), safe="")


def surface_warnings(answer: Any, stacklevel: int = 4) -> None:
    """warnings.warn (category MusterWarning) each string of the daemon's "warnings" array."""
    if isinstance(answer, dict):
        for text in answer.get("warnings") or []:
            warnings.warn("musterd: %s" % text, MusterWarning, stacklevel=stacklevel)


def warn_cml_only(**given: Any) -> None:
    """One warning naming the CML cloud arguments that were given (not None) and are ignored."""
    names = [k for k in CML_ONLY_ARGS if given.get(k) is not None]
    if names:
        warnings.warn("%s: CML cloud resource arguments, ignored by muster (workers get cpu, memory and "
                      "nvidia_gpu as asked)" % ", ".join(names), MusterWarning, stacklevel=4)


def _await_counts(ids: List[str], ready: Dict[str, Worker], failed: Dict[str, Worker], late: Dict[str, Worker],
                  what: str) -> str:
    """"3/4 workers running, 1 failed", "0/2 workers succeeded, 2 timed out (still running)"."""
    text = "%d/%d workers %s" % (len(ready), len(ids), what)
    if failed:
        text += ", %d failed" % len(failed)
    still: Dict[str, int] = {}
    for w in late.values():
        still[str(w.get("status"))] = still.get(str(w.get("status")), 0) + 1
    for status, count in still.items():
        text += ", %d timed out (still %s)" % (count, status)
    return text


# What the progress display and `muster launch --wait` show of the failed workers' logs.
FAILURE_TAIL_LINES = 10
FAILURES_SHOWN = 3
AGENT_NOTE = "[muster-agent]"  # how muster-agent's own lines in a worker's log begin


def describe_failures(failures: Sequence[Mapping[str, Any]]) -> str:
    """The failed workers of an await, each with the last lines of its log (its log_tail), as text.

    Workers that timed out (still running or starting) are left out: their
    count says so. At most FAILURES_SHOWN workers, FAILURE_TAIL_LINES lines each.
    """
    ended = [f for f in failures if f.get("status") in WORKER_TERMINAL]
    parts = []
    for f in ended[:FAILURES_SHOWN]:
        text = "worker %s %s" % (f.get("id"), f.get("status"))
        if f.get("reason"):
            text += ": %s" % f["reason"]
        elif f.get("exit_code") is not None:
            text += " with exit code %s" % f["exit_code"]
        # The worker's own output: the agent's notes that share its log are left out.
        tail = [line for line in str(f.get("log_tail") or "").splitlines()
                if not line.startswith(AGENT_NOTE)][-FAILURE_TAIL_LINES:]
        if tail:
            text += "\n--- last lines of its log ---\n" + "\n".join(tail)
        parts.append(text)
    if len(ended) > FAILURES_SHOWN:
        parts.append("(%d more failed: %s)" % (len(ended) - FAILURES_SHOWN,
                                               ", ".join(str(f.get("id")) for f in ended[FAILURES_SHOWN:])))
    return "\n".join(parts)


class Client:
    """A musterd connection. url/token default to discovery (see muster.config); an https:// daemon's
    certificate is verified with ca_file and/or the pinned tls_fingerprint, else as muster.tls says
    (MUSTER_CA_FILE, MUSTER_TLS_FINGERPRINT, musterd.json).

    Example::

        c = muster.Client("http://127.0.0.1:7878", token="...")
        workers = c.launch_workers(n=2, cpu=1, memory=1, script="train.py")
        remote = muster.Client("https://10.0.0.5:7878", token="...", tls_fingerprint="3f1c...")
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 timeout_seconds: float = DEFAULT_TIMEOUT_S, reconnect_seconds: Optional[float] = None,
                 ca_file: Optional[str] = None, tls_fingerprint: Optional[str] = None) -> None:
        self.url, self.token = discover(url, token)
        self.timeout_seconds = timeout_seconds
        # How long a wait rides through an unreachable musterd (muster.outage).
        self.reconnect_seconds = reconnect_seconds_of(reconnect_seconds)
        self.tls = tls_settings(self.url, ca_file, tls_fingerprint)
        self._http = Transport(self.url, self.token, lambda: source_of_url(url), self.tls)

    def __repr__(self):
        return "muster.Client(%r)" % self.url

    def outage(self, bar: Optional[Progress] = None) -> Outage:
        """The outage state of one wait on this daemon (muster.outage); its line goes below `bar`."""
        return Outage(self.reconnect_seconds, self.url, note=bar.note if bar is not None else None)

    # ---- workers ---------------------------------------------------------

    def launch_workers(self, n: int, cpu: float, memory: float, nvidia_gpu: int = 0, kernel: str = "python3",
                       script: str = "", code: str = "", env: Mapping[str, Any] = {},  # noqa: B006 - never mutated
                       args: Args = None, accelerator_label_id: Any = None, resource_profile_id: Any = None,
                       resource_group_id: Any = None, python: Optional[str] = None) -> List[Worker]:
        """Launches n workers; returns their worker dicts in launch order.

        All or nothing: if the daemon rejects the request, nothing runs.
        The daemon's notes (e.g. "script wins over code" when both are
        given, as in cdsw) come as MusterWarning warnings. CML cloud's
        accelerator_label_id / resource_profile_id / resource_group_id are
        accepted and ignored, with a MusterWarning saying so. As in cdsw's
        examples, a `code` line starting with "!" runs as a shell command
        (bash; one that fails ends the worker with its exit code): the
        daemon applies that rule, the code is sent as written. Code over
        musterd's body limit (1 MiB) is refused here, before sending: put it
        in a file in the project and pass script=.
        python: the interpreter the workers run (an absolute path); None
        sends this notebook's own when it can run muster's runtime, else the
        daemon's default, /usr/bin/python3 (see muster.interpreter).

        Example::

            workers = client.launch_workers(n=2, cpu=0.5, memory=2, script="train.py",
                                            env={"EPOCHS": "3"}, args=["--lr", "0.1"])
            ids = [w["id"] for w in workers]
        """
        body = {"n": n, "cpu": cpu, "memory": memory, "nvidia_gpu": nvidia_gpu, "kernel": kernel,
                "script": script or "", "code": code or "", "env": _env_dict(env),
                "args": _args_list(args)}
        interpreter = _interpreter.resolve(python)
        if interpreter:
            body["python"] = interpreter
        warn_cml_only(accelerator_label_id=accelerator_label_id, resource_profile_id=resource_profile_id,
                      resource_group_id=resource_group_id)
        answer = self._http.request("POST", "/api/v1/workers", body, timeout=self.timeout_seconds)
        surface_warnings(answer)
        return _records.workers(answer["workers"])

    def await_workers(self, ids: Any, wait_for_completion: bool = True, timeout_seconds: float = 60,
                      progress: bool = True, stop_on_interrupt: bool = True) -> Dict[str, List[Worker]]:
        """Waits (on the server) for workers; returns {"workers": [...], "failures": [...]}.

        wait_for_completion=False: a worker is done once `running` with an
        ip_address; True: once `succeeded`. Workers that fail or stop are in
        "failures" with their "reason" and "log_tail" (the end of their log).
        Workers still pending at the timeout (timeout_seconds=0: no timeout)
        are in "failures" too, left as they are (not stopped, still
        "running" or "starting"), with reason "timed out (still running)".
        While it waits it shows how many are ready, and at the end the
        failed workers' last log lines (see muster.progress; progress=False:
        silent); on Ctrl-C it stops the awaited workers and re-raises
        (stop_on_interrupt=False: leaves them). A musterd that cannot be
        reached meanwhile (restarting) is retried for reconnect_seconds.

        Example::

            done = client.await_workers(workers, wait_for_completion=False, timeout_seconds=60)
            ips = [w["ip_address"] for w in done["workers"]]
            still = [f for f in done["failures"] if f["status"] == "running"]   # timed out, still running
        """
        id_list = many_ids(ids)
        bar = Progress(progress)
        what = "worker%s %s" % ("s" if len(id_list) != 1 else "", ", ".join(id_list))
        with on_interrupt(stop_on_interrupt and bool(id_list), lambda: self.stop_workers(id_list), what, bar):
            return self._await(id_list, wait_for_completion, timeout_seconds, bar)

    def _await_request(self, ids: List[str], wait_for_completion: bool, timeout_seconds: float) -> Dict[str, Any]:
        body = {"ids": ids, "wait_for_completion": bool(wait_for_completion), "timeout_seconds": timeout_seconds}
        timeout = None if not timeout_seconds else float(timeout_seconds) + _AWAIT_SLACK_S
        answer = self._http.request("POST", "/api/v1/workers/await", body, timeout=timeout)
        return answer if isinstance(answer, dict) else {}

    def _await(self, ids: List[str], wait_for_completion: bool, timeout_seconds: float,
               bar: Progress) -> Dict[str, List[Worker]]:
        """The wait, as server-side awaits: one for the whole wait when nothing is shown, else
        one of at most a second each, so the status line moves. A request that finds no
        musterd is tried again for the rest of the wait (muster.outage). The answer keeps
        the order of `ids`; workers the daemon left pending at the deadline (a failure
        whose status is not terminal) are the timed-out ones."""
        word = "succeeded" if wait_for_completion else "running"
        deadline = time.monotonic() + float(timeout_seconds) if timeout_seconds else None
        outage = self.outage(bar if bar.active else None)
        step_max = 1.0 if bar.active else None
        ready: Dict[str, Worker] = {}
        failed: Dict[str, Worker] = {}
        late: Dict[str, Worker] = {}
        order = list(dict.fromkeys(ids))
        pending = list(order)
        asked = answered = 0
        bar.update(_await_counts(ids, ready, failed, late, word), force=True)
        while pending or not answered:
            if deadline is None:
                final, step = step_max is None, step_max or 0
            else:
                left = float(timeout_seconds) if not asked else max(deadline - time.monotonic(), 0.001)
                final = step_max is None or left <= step_max
                step = left if final else step_max
            asked += 1
            try:
                answer = self._await_request(pending, wait_for_completion, step)
            except MusterError as err:
                outage.failed(err)  # raises unless musterd is only away for a while
                continue
            outage.answered()
            answered += 1
            for w in answer.get("workers", []):
                ready[w["id"]] = _records.worker(w)
            for w in answer.get("failures", []):
                if w.get("status") in WORKER_TERMINAL:
                    failed[w["id"]] = _records.worker(w)
                elif final:
                    late[w["id"]] = _records.worker(w)
            pending = [i for i in pending if i not in ready and i not in failed and i not in late]
            bar.update(_await_counts(ids, ready, failed, late, word))
            if final:
                break
        done = {**failed, **late}
        result = {"workers": [ready[i] for i in order if i in ready],
                  "failures": [done[i] for i in order if i in done]}
        bar.close(_await_counts(ids, ready, failed, late, word), details=describe_failures(result["failures"]))
        return result

    def stop_workers(self, *worker_id: Any) -> List[Worker]:
        """Stops the given workers (ids or dicts), or every worker if none given.

        Returns the stopped workers' dicts. An explicitly empty list
        (stop_workers([])) stops nothing: only a call with no argument at
        all means "every worker".

        Example::

            client.stop_workers(w1["id"], w2)   # two workers
            client.stop_workers(*workers)       # a list from launch_workers
            client.stop_workers()               # all of this daemon's workers
        """
        ids = many_ids(list(worker_id))
        if worker_id and not ids:
            return []
        answer = self._http.request("POST", "/api/v1/workers/stop", {"ids": ids}, timeout=self.timeout_seconds)
        return _records.workers(answer.get("workers", []) if isinstance(answer, dict) else answer)

    def list_workers(self) -> List[Worker]:
        """Every worker this daemon knows, finished ones included (in launch order).

        The daemon answers in pages (at most 1000 workers each); this follows
        them to the end. Finished workers are kept a week, 10,000 at most, by
        default (musterd --retain-finished, --max-finished-workers).

        Example::

            running = [w for w in client.list_workers() if w["status"] == "running"]
        """
        out: List[Worker] = []
        query: Dict[str, str] = {}
        while True:
            answer = self._http.request("GET", "/api/v1/workers", query=query or None, timeout=self.timeout_seconds)
            out.extend(_records.workers(answer["workers"]))
            token = answer.get("next_page_token")
            if not token:
                return out
            query = {"page_token": token}

    def delete_worker(self, worker_id: WorkerRef) -> None:
        """Forgets a finished worker: its record and its directory (log included).

        A worker that has not finished is refused (stop it first), and so is
        a worker of a cluster (delete the cluster).

        Example::

            client.delete_worker(w)
        """
        self._http.request("DELETE", "/api/v1/workers/" + _path_id(worker_id), timeout=self.timeout_seconds)

    def get_worker(self, worker_id: WorkerRef) -> Worker:
        """One worker's dict (id string or dict).

        Example::

            print(client.get_worker(ids[0])["status"])
        """
        return _records.worker(self._http.request("GET", "/api/v1/workers/" + _path_id(worker_id),
                                                  timeout=self.timeout_seconds))

    def worker_logs(self, worker_id: WorkerRef, tail: Optional[int] = None, follow: bool = False,
                    offset: Optional[int] = None, from_start: bool = False) -> Union[str, Iterator[str]]:
        """The worker's combined stdout/stderr as text, from the end: its last lines.

        By default the daemon's last 1000 lines (at most 1 MiB), and when earlier output
        is left out, the text starts with one line "[muster] ..." saying how much, and
        where the whole log is; tail=N: exactly the last N lines. from_start=True: the whole
        log file from its first byte (a log over the daemon's cap has rotated:
        its first line says so).

        follow=True returns a generator of lines (without their newline) that
        yields each line as the worker writes it and ends when the worker has
        ended (see muster.follow; it reconnects if the connection drops). It
        starts at the end as above (tail=N: the last N lines, from_start=True:
        the first byte, offset=B: byte B).

        Example::

            print(client.worker_logs(ids[0], tail=20))
            print(client.worker_logs(ids[0], from_start=True))
            for line in client.worker_logs(ids[0], follow=True):
                print(line)
        """
        if follow:
            wid = one_id(worker_id)
            return follow_log(self._http, log_path("workers", wid),
                              lambda: self.get_worker(wid).get("status") in WORKER_TERMINAL, tail, offset,
                              from_start=from_start, outage=self.outage())
        return self._http.request("GET", "/api/v1/workers/%s/logs" % _path_id(worker_id),
                                  query=_log_query(tail, from_start), timeout=self.timeout_seconds, text=True)

    # ---- clusters (REST) ---------------------------------------------------

    def create_cluster(self, **body: Any) -> Cluster:
        """POST /api/v1/clusters with the cluster request's fields; returns the cluster dict.

        Most notebooks want run_cluster or horovodrun instead. Fields left as
        None are not sent (the daemon's defaults apply).

        Example::

            c = client.create_cluster(mode="mpi", n_workers=2, cpu=1, memory=1,
                                      worker_script="train.py", slots=1)
        """
        body = {k: v for k, v in body.items() if v is not None}
        answer = self._http.request("POST", "/api/v1/clusters", body, timeout=self.timeout_seconds)
        surface_warnings(answer, stacklevel=5)
        return _records.cluster(answer)

    def get_cluster(self, cluster_id: WorkerRef) -> Cluster:
        """One cluster's dict.

        Example::

            print(client.get_cluster(cid)["status"])
        """
        return _records.cluster(self._http.request("GET", "/api/v1/clusters/" + _path_id(cluster_id, "cluster"),
                                                   timeout=self.timeout_seconds))

    def list_clusters(self) -> List[Cluster]:
        """Every cluster this daemon knows.

        Example::

            for c in client.list_clusters():
                print(c["id"], c["mode"], c["status"])
        """
        answer = self._http.request("GET", "/api/v1/clusters", timeout=self.timeout_seconds)
        return [_records.cluster(c) for c in (answer.get("clusters", []) if isinstance(answer, dict) else answer)]

    def stop_cluster(self, cluster_id: WorkerRef) -> Cluster:
        """Stops every task of a cluster (and its launcher); returns the cluster.

        Example::

            client.stop_cluster(cluster["id"])
        """
        return _records.cluster(self._http.request("POST", "/api/v1/clusters/%s/stop" % _path_id(cluster_id, "cluster"),
                                                   {}, timeout=self.timeout_seconds))

    def cluster_logs(self, cluster_id: WorkerRef, tail: Optional[int] = None, follow: bool = False,
                     offset: Optional[int] = None, from_start: bool = False) -> Union[str, Iterator[str]]:
        """The cluster's output as text: mpi, the launcher's (mpirun's) log; ps, the chief's.

        Empty text while the cluster has no log yet. Like worker_logs: the last
        lines by default (tail=N: the last N), with a "[muster] ..." line when
        earlier output is left out; from_start=True: the whole log. follow=True:
        a generator of lines as they are written, ending when the cluster has
        ended (as worker_logs(follow=True)).

        Example::

            print(client.cluster_logs(cluster["id"], tail=20))
            for line in client.cluster_logs(cluster, follow=True):
                print(line)
        """
        if follow:
            cid = one_id(cluster_id, "cluster")
            return follow_log(self._http, log_path("clusters", cid),
                              lambda: self.get_cluster(cid).get("status") in _clusters.TERMINAL, tail, offset,
                              from_start=from_start, outage=self.outage())
        return self._http.request("GET", "/api/v1/clusters/%s/logs" % _path_id(cluster_id, "cluster"),
                                  query=_log_query(tail, from_start), timeout=self.timeout_seconds, text=True)

    # ---- clusters (helpers; see clusters.py) -----------------------------------

    def await_cluster(self, cluster_id: WorkerRef, timeout_seconds: float = 60, wait_for_completion: bool = True,
                      progress: bool = True, stop_on_interrupt: bool = True) -> Cluster:
        """See muster.await_cluster."""
        return _clusters.await_cluster(self, cluster_id, timeout_seconds, wait_for_completion,
                                       progress=progress, stop_on_interrupt=stop_on_interrupt)

    def run_cluster(self, n_workers: int, n_ps: int, cpu: float, memory: float, nvidia_gpu: int = 0,
                    worker_script: Optional[str] = None, timeout_seconds: float = 60, mode: str = "ps",
                    ps_script: Optional[str] = None, env: Optional[Mapping[str, Any]] = None, args: Args = None,
                    **extra: Any) -> "_clusters.ClusterResult":
        """See muster.run_cluster."""
        return _clusters.run_cluster(self, n_workers, n_ps, cpu, memory, nvidia_gpu, worker_script,
                                     timeout_seconds, mode, ps_script, env, args, **extra)

    def horovodrun(self, n: int, script: str, slots: int = 1, **extra: Any) -> Cluster:
        """See muster.horovodrun."""
        return _clusters.horovodrun(self, n, script, slots, **extra)

    def torchrun(self, n: int, script: str, nproc_per_node: int = 1, **extra: Any) -> Cluster:
        """See muster.torchrun."""
        return _clusters.torchrun(self, n, script, nproc_per_node, **extra)
