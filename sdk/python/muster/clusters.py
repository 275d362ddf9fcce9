"""Cluster helpers: run_cluster (TensorFlow ps mode), horovodrun (mpi mode), await_cluster.

The daemon does the hard part (issue 3): it launches the tasks, collects
every task's ip:port, builds the ClusterSpec / TF_CONFIG or the horovodrun and
mpirun lines, and fails the whole cluster, naming the task, when one task
fails. These helpers only create the cluster, wait on it and turn a failed
cluster into a ClusterFailed exception that names the failing task.

A cluster has no server-side await call, so await_cluster polls
GET /api/v1/clusters/{id} with a growing interval (20 ms up to 250 ms).
"""
import shlex
import time

from .errors import ClusterFailed, MusterError
from .ids import one_id

TERMINAL = ("succeeded", "failed", "stopped")
_FAILED_WORKER = ("failed", "timedout", "lost")


def await_cluster(client, cluster_id, timeout_seconds=60, wait_for_completion=True):
    """Waits for a cluster; returns its dict.

    wait_for_completion=True: until it has ended (succeeded, failed, stopped);
    False: until every task is up (status no longer "starting"), or ended.
    timeout_seconds=0 waits forever; otherwise MusterError("deadline_exceeded").
    Does not raise for a failed cluster: check cluster["status"].
    """
    cid = one_id(cluster_id, "cluster")
    deadline = time.monotonic() + float(timeout_seconds) if timeout_seconds else None
    interval = 0.02
    while True:
        cluster = client.get_cluster(cid)
        status = cluster.get("status")
        if status in TERMINAL or (not wait_for_completion and status != "starting"):
            return cluster
        if deadline is not None and time.monotonic() >= deadline:
            raise MusterError("cluster %s is still %r after %s s" % (cid, status, timeout_seconds),
                              code="deadline_exceeded")
        pause = interval if deadline is None else min(interval, max(0.0, deadline - time.monotonic()))
        time.sleep(pause)
        interval = min(interval * 2, 0.25)


def task_ids(cluster):
    """[(task_type, index, worker_id), ...] in the cluster's own order.

    The daemon groups workers by task type in index order
    ({"ps": [...], "worker": [...]}); a flat list is read as "worker".
    """
    workers = cluster.get("workers") or {}
    if isinstance(workers, list):
        workers = {"worker": workers}
    out = []
    for task_type, ids in workers.items():
        for index, wid in enumerate(ids or []):
            out.append((task_type, index, one_id(wid)))
    return out


def describe_failure(client, cluster):
    """(task, text) for the first task that failed, e.g. ("worker:1", "... exit code 3 ...").

    Tasks stopped as a consequence of another's failure are skipped in favour
    of the one that failed; returns (None, server reason) if none is found.
    """
    reason = cluster.get("reason") or ""
    for task_type, index, wid in task_ids(cluster):
        try:
            w = client.get_worker(wid)
        except MusterError:
            continue
        if w.get("status") not in _FAILED_WORKER:
            continue
        task = "%s:%d" % (task_type, index)
        text = "task %s (worker %s) %s" % (task, wid, w.get("status"))
        if w.get("exit_code") is not None:
            text += " with exit code %s" % w["exit_code"]
        if w.get("reason"):
            text += ": %s" % w["reason"]
        try:
            tail = client.worker_logs(wid, tail=5).rstrip()
        except MusterError:
            tail = ""
        if tail:
            text += "\n--- last lines of its log ---\n" + tail
        return task, text
    return None, reason


def _raise_failed(client, cluster):
    task, text = describe_failure(client, cluster)
    message = "cluster %s %s" % (cluster.get("id"), cluster.get("status"))
    if cluster.get("reason"):
        message += ": %s" % cluster["reason"]
    if task:
        message += "\n" + text
    raise ClusterFailed(message, cluster, task)


def _spec_of(cluster):
    spec = cluster.get("cluster_spec") or {}
    if isinstance(spec, dict) and isinstance(spec.get("cluster"), dict):
        spec = spec["cluster"]  # a TF_CONFIG-shaped answer
    return spec


def session_address(cluster_spec):
    """"grpc://host:port" of the chief, else of worker 0: where a tf.Session connects."""
    for kind in ("chief", "worker"):
        tasks = cluster_spec.get(kind) or []
        if isinstance(tasks, dict):  # dict-of-index form
            tasks = [tasks[k] for k in sorted(tasks, key=int)]
        if tasks:
            return "grpc://" + tasks[0]
    return None


def _args(args):
    if args is None:
        return None
    return shlex.split(args) if isinstance(args, str) else [str(a) for a in args]


def run_cluster(client, n_workers, n_ps, cpu, memory, nvidia_gpu=0, worker_script=None,
                timeout_seconds=60, mode="ps", ps_script=None, env=None, args=None,
                completion_timeout_seconds=0, **extra):
    cluster = client.create_cluster(
        mode=mode, n_workers=n_workers, n_ps=n_ps if mode == "ps" else None, cpu=cpu, memory=memory,
        nvidia_gpu=nvidia_gpu, worker_script=worker_script, ps_script=ps_script, env=env,
        args=_args(args), timeout_seconds=timeout_seconds, **extra)
    cluster = await_cluster(client, cluster["id"], timeout_seconds, wait_for_completion=False)
    if cluster.get("status") in ("failed", "stopped"):
        _raise_failed(client, cluster)
    if worker_script:
        cluster = await_cluster(client, cluster["id"], completion_timeout_seconds, wait_for_completion=True)
        if cluster.get("status") != "succeeded":
            _raise_failed(client, cluster)
    spec = _spec_of(cluster)
    return spec, session_address(spec)


def horovodrun(client, n, script, slots=1, cpu=1, memory=1, nvidia_gpu=0, args=None, env=None,
               ssh_port=None, network_interface=None, launch=True, timeout_seconds=60,
               wait_for_completion=False, completion_timeout_seconds=0):
    cluster = client.create_cluster(
        mode="mpi", n_workers=n, slots=slots, cpu=cpu, memory=memory, nvidia_gpu=nvidia_gpu,
        worker_script=script, args=_args(args), env=env,
        ssh_port=ssh_port, network_interface=network_interface, launch=launch,
        timeout_seconds=timeout_seconds)
    cluster = await_cluster(client, cluster["id"], timeout_seconds, wait_for_completion=False)
    if cluster.get("status") in ("failed", "stopped"):
        _raise_failed(client, cluster)
    if wait_for_completion:
        cluster = await_cluster(client, cluster["id"], completion_timeout_seconds, wait_for_completion=True)
        if cluster.get("status") != "succeeded":
            _raise_failed(client, cluster)
    return cluster
