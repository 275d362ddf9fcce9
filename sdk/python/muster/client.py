"""Client: one connection target (URL + token) and every REST call on it.

The module-level functions (muster.launch_workers, ...) build a Client from
the environment on each call; use a Client directly to talk to a daemon other
than the discovered one, or to set the request timeout.
"""
import shlex
import urllib.parse

from . import clusters as _clusters
from ._http import DEFAULT_TIMEOUT_S, Transport
from .config import discover
from .errors import MusterError
from .ids import many_ids, one_id

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


def _path_id(value, what="worker"):
    return urllib.parse.quote(one_id(value, what), safe="")


class Client:
    """A musterd connection. url/token default to discovery (see muster.config).

    Example::

        c = muster.Client("http://127.0.0.1:7878", token="...")
        workers = c.launch_workers(n=2, cpu=1, memory=1, script="train.py")
    """

    def __init__(self, url=None, token=None, timeout_seconds=DEFAULT_TIMEOUT_S):
        self.url, self.token = discover(url, token)
        self.timeout_seconds = timeout_seconds
        self._http = Transport(self.url, self.token)

    def __repr__(self):
        return "muster.Client(%r)" % self.url

    # ---- workers ---------------------------------------------------------

    def launch_workers(self, n, cpu, memory, nvidia_gpu=0, kernel="python3", script="", code="",
                       env={}, args=None):  # noqa: B006 - cdsw's signature; never mutated
        """Launches n workers; returns their worker dicts in launch order.

        All or nothing: if the daemon rejects the request, nothing runs.

        Example::

            workers = client.launch_workers(n=2, cpu=0.5, memory=2, script="train.py",
                                            env={"EPOCHS": "3"}, args=["--lr", "0.1"])
            ids = [w["id"] for w in workers]
        """
        body = {"n": n, "cpu": cpu, "memory": memory, "nvidia_gpu": nvidia_gpu, "kernel": kernel,
                "script": script or "", "code": code or "", "env": _env_dict(env),
                "args": _args_list(args)}
        answer = self._http.request("POST", "/api/v1/workers", body, timeout=self.timeout_seconds)
        return answer["workers"]

    def await_workers(self, ids, wait_for_completion=True, timeout_seconds=60):
        """Waits (on the server) for workers; returns {"workers": [...], "failures": [...]}.

        wait_for_completion=False: a worker is done once `running` with an
        ip_address; True: once `succeeded`. Workers that fail, stop, or are
        still pending at the timeout are in "failures" (timeout_seconds=0:
        no timeout).

        Example::

            done = client.await_workers(workers, wait_for_completion=False, timeout_seconds=60)
            ips = [w["ip_address"] for w in done["workers"]]
        """
        body = {"ids": many_ids(ids), "wait_for_completion": bool(wait_for_completion),
                "timeout_seconds": timeout_seconds}
        timeout = None if not timeout_seconds else float(timeout_seconds) + _AWAIT_SLACK_S
        return self._http.request("POST", "/api/v1/workers/await", body, timeout=timeout)

    def stop_workers(self, *worker_id):
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
        if isinstance(answer, dict):
            return answer.get("workers", [])
        return answer or []

    def list_workers(self):
        """Every worker this daemon knows, finished ones included.

        Example::

            running = [w for w in client.list_workers() if w["status"] == "running"]
        """
        return self._http.request("GET", "/api/v1/workers", timeout=self.timeout_seconds)["workers"]

    def get_worker(self, worker_id):
        """One worker's dict (id string or dict).

        Example::

            print(client.get_worker(ids[0])["status"])
        """
        return self._http.request("GET", "/api/v1/workers/" + _path_id(worker_id), timeout=self.timeout_seconds)

    def worker_logs(self, worker_id, tail=None):
        """The worker's combined stdout/stderr as text; tail=N: the last N lines.

        Example::

            print(client.worker_logs(ids[0], tail=20))
        """
        query = {"tail": int(tail)} if tail is not None else None
        return self._http.request("GET", "/api/v1/workers/%s/logs" % _path_id(worker_id), query=query,
                                  timeout=self.timeout_seconds, text=True)

    # ---- clusters (REST) ---------------------------------------------------

    def create_cluster(self, **body):
        """POST /api/v1/clusters with the fields of issue 3; returns the cluster dict.

        Most notebooks want run_cluster or horovodrun instead. Fields left as
        None are not sent (the daemon's defaults apply).

        Example::

            c = client.create_cluster(mode="mpi", n_workers=2, cpu=1, memory=1,
                                      worker_script="train.py", slots=1)
        """
        body = {k: v for k, v in body.items() if v is not None}
        return self._http.request("POST", "/api/v1/clusters", body, timeout=self.timeout_seconds)

    def get_cluster(self, cluster_id):
        """One cluster's dict.

        Example::

            print(client.get_cluster(cid)["status"])
        """
        return self._http.request("GET", "/api/v1/clusters/" + _path_id(cluster_id, "cluster"),
                                  timeout=self.timeout_seconds)

    def list_clusters(self):
        """Every cluster this daemon knows.

        Example::

            for c in client.list_clusters():
                print(c["id"], c["mode"], c["status"])
        """
        answer = self._http.request("GET", "/api/v1/clusters", timeout=self.timeout_seconds)
        return answer.get("clusters", []) if isinstance(answer, dict) else answer

    def stop_cluster(self, cluster_id):
        """Stops every task of a cluster (and its launcher); returns the cluster.

        Example::

            client.stop_cluster(cluster["id"])
        """
        return self._http.request("POST", "/api/v1/clusters/%s/stop" % _path_id(cluster_id, "cluster"),
                                  {}, timeout=self.timeout_seconds)

    def cluster_logs(self, cluster_id, tail=None):
        """The cluster's output as text: mpi, the launcher's (mpirun's) log; ps, the chief's.

        Empty text while the cluster has no log yet. tail=N: the last N lines.

        Example::

            print(client.cluster_logs(cluster["id"], tail=20))
        """
        query = {"tail": int(tail)} if tail is not None else None
        return self._http.request("GET", "/api/v1/clusters/%s/logs" % _path_id(cluster_id, "cluster"),
                                  query=query, timeout=self.timeout_seconds, text=True)

    # ---- clusters (helpers; see clusters.py) -----------------------------------

    def await_cluster(self, cluster_id, timeout_seconds=60, wait_for_completion=True):
        """See muster.await_cluster."""
        return _clusters.await_cluster(self, cluster_id, timeout_seconds, wait_for_completion)

    def run_cluster(self, n_workers, n_ps, cpu, memory, nvidia_gpu=0, worker_script=None,
                    timeout_seconds=60, mode="ps", ps_script=None, env=None, args=None, **extra):
        """See muster.run_cluster."""
        return _clusters.run_cluster(self, n_workers, n_ps, cpu, memory, nvidia_gpu, worker_script,
                                     timeout_seconds, mode, ps_script, env, args, **extra)

    def horovodrun(self, n, script, slots=1, **extra):
        """See muster.horovodrun."""
        return _clusters.horovodrun(self, n, script, slots, **extra)
