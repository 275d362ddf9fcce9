"""Cluster helpers: run_cluster (TensorFlow ps mode), horovodrun (mpi or elastic mode), torchrun, await_cluster.

The daemon does the hard part: it launches the tasks, collects
every task's ip:port, builds the ClusterSpec / TF_CONFIG or the horovodrun and
mpirun lines, and fails the whole cluster, naming the task, when one task
fails. These helpers only create the cluster, wait on it and turn a failed
cluster into a ClusterFailed exception that names the failing task.

A cluster has no server-side await call, so await_cluster polls
GET /api/v1/clusters/{id} with a growing interval (20 ms up to 250 ms).
"""
import shlex
import time
from typing import Any, Dict, Optional

from . import interpreter as _interpreter
from .errors import ClusterFailed, MusterError
from .ids import many_ids, one_id
from .progress import Progress, on_interrupt

TERMINAL = ("succeeded", "failed", "stopped")
_FAILED_WORKER = ("failed", "timedout", "lost")

# horovodrun's tuning options, sent to POST /api/v1/clusters as given (mpi mode).
HOROVOD_OPTIONS = ("fusion_threshold_mb", "cycle_time_ms", "timeline_filename", "start_timeout", "verbose",
                   "network_interfaces", "max_restarts")
# horovodrun's elastic flags: any of them makes the cluster elastic (musterd
# launches every rank and re-forms the world when one is lost).
ELASTIC_OPTIONS = ("min_np", "max_np", "reset_limit", "blacklist_cooldown_range")


class ClusterResult(tuple):
    """run_cluster's answer: the cdsw pair (cluster_spec, session_addr), plus the cluster.

    Unpacks as before (`spec, addr = muster.run_cluster(...)`); `.cluster_id`
    and `.cluster` say which cluster it was, so it can be stopped or its
    logs read.
    """

    def __new__(cls, spec: Dict[str, Any], addr: Optional[str], cluster: Dict[str, Any]) -> "ClusterResult":
        self = super().__new__(cls, (spec, addr))
        self.cluster = cluster
        self.cluster_id = cluster.get("id")
        return self


def _cluster_line(cluster: Dict[str, Any]) -> str:
    tasks = cluster.get("workers") or {}
    n = sum(len(v or []) for v in tasks.values()) if isinstance(tasks, dict) else len(tasks)
    line = "cluster %s (%s, %d tasks) %s" % (cluster.get("id"), cluster.get("mode"), n, cluster.get("status"))
    gens = cluster.get("generations") or []
    if cluster.get("mode") == "elastic" and gens:
        line += ", generation %s of %d ranks" % (gens[-1].get("generation"), len(gens[-1].get("members") or []))
    return line


def show_events(bar, cluster):
    """Shows on `bar` each of the cluster's events (its deaths, re-formations and restarts, as the
    daemon words them in cluster["events"]) that it has not shown yet, with the time it happened."""
    shown = bar.shown_events
    for e in cluster.get("events") or []:
        key = (e.get("at"), e.get("text"))
        if key in shown:
            continue
        shown.add(key)
        at = str(e.get("at") or "")
        bar.event("cluster %s: %s%s" % (cluster.get("id"), e.get("text"), " at " + at[11:19] if len(at) >= 19 else ""))


def await_cluster(client, cluster_id, timeout_seconds=60, wait_for_completion=True, progress=True,
                  stop_on_interrupt=True, bar=None):
    """Waits for a cluster; returns its dict, or raises ClusterFailed if it failed.

    wait_for_completion=True: until it has ended (succeeded, failed, stopped);
    False: until every task is up (status no longer "starting"), or ended.
    A cluster that failed raises ClusterFailed naming the failing task (or
    mpi's first failed rank) with its last lines; one that was stopped is
    returned (status "stopped"). timeout_seconds=0 waits forever; otherwise
    MusterError("deadline_exceeded") with .cluster_id. A musterd that cannot
    be reached meanwhile is retried for the client's reconnect_seconds
    (muster.outage). Shows progress (progress=False: silent); on Ctrl-C
    stops the cluster (stop_on_interrupt=False: leaves it) and re-raises,
    with the id as the KeyboardInterrupt's .cluster_id.
    """
    cid = one_id(cluster_id, "cluster")
    own_bar = bar is None
    bar = Progress(progress) if own_bar else bar
    outage = client.outage(bar if bar.active else None)
    with on_interrupt(stop_on_interrupt, lambda: client.stop_cluster(cid), "cluster " + cid, bar, cluster_id=cid):
        deadline = time.monotonic() + float(timeout_seconds) if timeout_seconds else None
        interval = 0.02
        while True:
            cluster = outage.call(lambda: client.get_cluster(cid))
            status = cluster.get("status")
            show_events(bar, cluster)
            bar.update(_cluster_line(cluster))
            if status == "failed":
                bar.close(_cluster_line(cluster))
                _raise_failed(client, cluster)
            if status in TERMINAL or (not wait_for_completion and status != "starting"):
                if own_bar:
                    bar.close(_cluster_line(cluster))
                return cluster
            if deadline is not None and time.monotonic() >= deadline:
                bar.close()
                err = MusterError("cluster %s is still %r after %s s" % (cid, status, timeout_seconds),
                                  code="deadline_exceeded")
                err.cluster_id = cid
                raise err
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


def describe_rank(cluster):
    """(task, text) for a failed cluster's root cause, e.g. ("rank:1", "rank 1 on ... exited with code 3 ...").

    The daemon names the rank whose failure came first, not one that failed
    of it (cluster["failed_rank"]); the text ends with its last lines. mpi
    names it "rank:N"; ps and torchrun by its task, "worker:1". (None, "")
    when the cluster has none.
    """
    f = cluster.get("failed_rank")
    if not isinstance(f, dict):
        return None, ""
    task = "rank:%s" % f.get("rank")
    if cluster.get("mode") not in ("mpi", "elastic"):
        task = next(("%s:%d" % (t, i) for t, i, wid in task_ids(cluster) if wid == f.get("worker_id")), task)
    where = " on %s" % f["host"] if f.get("host") else ""
    if f.get("worker_id"):
        where += " (worker %s)" % f["worker_id"]
    if f.get("signal") is not None:
        how = "was killed by signal %s%s" % (f["signal"], " (%s)" % f["signal_name"] if f.get("signal_name") else "")
    else:
        how = "exited with code %s" % f.get("exit_code")
    text = "rank %s%s %s" % (f.get("rank"), where, how)
    if f.get("exception"):
        text += ": %s" % f["exception"]
    if f.get("then_failed"):
        text += "; then failed: %s" % f["then_failed"]
    tail = [line for line in f.get("log_tail") or []]
    if tail:
        text += "\n--- last lines of rank %s ---\n%s" % (f.get("rank"), "\n".join(tail))
    return task, text


def describe_failure(client, cluster):
    """(task, text) for the first task that failed, e.g. ("worker:1", "... exit code 3 ...").

    Tasks stopped as a consequence of another's failure are skipped in favour
    of the one that failed; an mpi cluster names the first rank that failed
    ("rank:1", see describe_rank). Returns (None, server reason) if none is found.
    """
    task, text = describe_rank(cluster)
    if task:
        return task, text
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
    if task and cluster.get("failed_rank"):
        tail = text.partition("\n")[2]  # the reason names the rank already
        if tail:
            message += "\n" + tail
    elif task:
        message += "\n" + text
    raise ClusterFailed(message, cluster, task)


def _spec_of(cluster):
    spec = cluster.get("cluster_spec") or {}
    if isinstance(spec, dict) and isinstance(spec.get("cluster"), dict):
        spec = spec["cluster"]  # a TF_CONFIG-shaped answer
    return spec


def session_address(cluster_spec: Dict[str, Any]) -> Optional[str]:
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


def wait_for(client, cluster, timeout_seconds, completion, completion_timeout_seconds, progress, stop_on_interrupt):
    """Start-up wait, then (completion) the wait for the end; raises ClusterFailed, and tags
    every MusterError and KeyboardInterrupt on the way with the cluster's id."""
    cid = cluster["id"]
    bar = Progress(progress)
    try:
        # await_cluster raises ClusterFailed for a failed cluster; a stopped one fails this call too.
        cluster = await_cluster(client, cid, timeout_seconds, False, stop_on_interrupt=stop_on_interrupt, bar=bar)
        if cluster.get("status") == "stopped":
            bar.close(_cluster_line(cluster))
            _raise_failed(client, cluster)
        if completion:
            cluster = await_cluster(client, cid, completion_timeout_seconds, True,
                                    stop_on_interrupt=stop_on_interrupt, bar=bar)
            bar.close(_cluster_line(cluster))
            if cluster.get("status") != "succeeded":
                _raise_failed(client, cluster)
        bar.close()
        return cluster
    except MusterError as err:
        err.cluster_id = cid
        raise


def run_cluster(client, n_workers, n_ps, cpu, memory, nvidia_gpu=0, worker_script=None,
                timeout_seconds=60, mode="ps", ps_script=None, env=None, args=None,
                completion_timeout_seconds=0, n_chief=0, n_evaluator=0, progress=True,
                stop_on_interrupt=True, python=None, **extra):
    cluster = client.create_cluster(
        mode=mode, n_workers=n_workers, n_ps=n_ps if mode == "ps" else None, cpu=cpu, memory=memory,
        nvidia_gpu=nvidia_gpu, worker_script=worker_script, ps_script=ps_script, env=env,
        args=_args(args), timeout_seconds=timeout_seconds,
        n_chief=int(n_chief) if n_chief else None, n_evaluator=int(n_evaluator) if n_evaluator else None,
        python=_interpreter.resolve(python), **extra)
    cluster = wait_for(client, cluster, timeout_seconds, bool(worker_script), completion_timeout_seconds, progress,
                    stop_on_interrupt)
    spec = _spec_of(cluster)
    return ClusterResult(spec, session_address(spec), cluster)


def horovodrun(client, n, script, slots=1, cpu=1, memory=1, nvidia_gpu=0, args=None, env=None,
               ssh_port=None, network_interface=None, launch=True, timeout_seconds=60,
               wait_for_completion=False, completion_timeout_seconds=0, progress=True, stop_on_interrupt=True,
               python=None, workers=None, **options):
    unknown = sorted(set(options) - set(HOROVOD_OPTIONS) - set(ELASTIC_OPTIONS))
    if unknown:
        raise MusterError("horovodrun() got unknown option(s) %s; known: %s" % (", ".join(unknown),
                          ", ".join(HOROVOD_OPTIONS + ELASTIC_OPTIONS)), code="invalid_argument", field=unknown[0])
    if isinstance(options.get("network_interfaces"), str):
        options["network_interfaces"] = [x for x in options["network_interfaces"].split(",") if x]
    worker_ids = many_ids(workers) if workers else None
    if worker_ids and n is not None and n != len(worker_ids):
        raise MusterError("horovodrun(%s, ...) with workers=%d workers: n is the number of workers (give n=%d, "
                          "or n=None; slots=%d ranks run on each)" % (n, len(worker_ids), len(worker_ids), slots),
                          code="invalid_argument", field="n")
    elastic = any(options.get(k) is not None for k in ELASTIC_OPTIONS)
    if elastic:
        if worker_ids:
            raise MusterError("horovodrun(): workers= runs the ranks on running workers under mpirun; an elastic "
                              "cluster (min_np, max_np, reset_limit, blacklist_cooldown_range) launches its own",
                              code="invalid_argument", field="workers")
        if options.get("blacklist_cooldown_range") is not None:
            options["blacklist_cooldown_range"] = [int(x) for x in options["blacklist_cooldown_range"]]
        # Every rank is a worker musterd starts itself: no slots, ssh or mpirun line.
        cluster = client.create_cluster(
            mode="elastic", n_workers=n, slots=slots if slots != 1 else None, cpu=cpu, memory=memory,
            nvidia_gpu=nvidia_gpu, worker_script=script, args=_args(args), env=env,
            network_interface=network_interface, launch=None if launch else False,
            timeout_seconds=timeout_seconds, python=_interpreter.resolve(python), **options)
    else:
        cluster = client.create_cluster(
            mode="mpi", n_workers=None if worker_ids else n, slots=slots, cpu=cpu, memory=memory,
            nvidia_gpu=nvidia_gpu, worker_script=script, args=_args(args), env=env,
            ssh_port=ssh_port, network_interface=network_interface, launch=launch,
            timeout_seconds=timeout_seconds, python=_interpreter.resolve(python), workers=worker_ids, **options)
    return wait_for(client, cluster, timeout_seconds, wait_for_completion, completion_timeout_seconds, progress,
                    stop_on_interrupt)


def describe_generations(cluster):
    """The cluster's generations as text, one line each plus its deaths and replacements.

    Example::

        print(muster.describe_generations(muster.get_cluster(cid)))
        # generation 1 (start) 3 ranks, 2026-11-22T22:15:30Z .. 22:16:02Z: rank 1 (worker 0d4c2f) was killed by signal 9
        #   rank 1 (worker 0d4c2f) was killed by signal 9 at ...; replaced by 9a8b7c
        # generation 2 (reset) 2 ranks, recovered in 0.41 s, 3 batches redone
    """
    lines = []
    for g in cluster.get("generations") or []:
        head = "generation %d (%s) %d ranks, from %s" % (g.get("generation", 0), g.get("cause", "?"),
                                                         len(g.get("members") or []), g.get("started_at"))
        if g.get("ended_at"):
            head += " to %s" % g["ended_at"]
        extra = []
        if g.get("recovery_seconds") is not None:
            extra.append("recovered in %.2f s" % g["recovery_seconds"])
        if g.get("resume_seconds") is not None:
            extra.append("first step after %.2f s" % g["resume_seconds"])
        if g.get("batches_redone") is not None:
            extra.append("%d batches redone" % g["batches_redone"])
        if extra:
            head += ", " + ", ".join(extra)
        if g.get("end_reason"):
            head += "; ended: " + g["end_reason"]
        lines.append(head)
        by = {r.get("replaced"): r.get("by") for r in g.get("replacements") or []}
        for d in g.get("deaths") or []:
            line = "  %s (worker %s) %s at %s" % (d.get("task"), d.get("worker_id"), d.get("reason"), d.get("at"))
            if by.get(d.get("worker_id")):
                line += "; replaced by %s" % by[d["worker_id"]]
            lines.append(line)
    return "\n".join(lines)


def torchrun(client, n, script, nproc_per_node=1, cpu=1, memory=1, nvidia_gpu=0, args=None, env=None,
             max_restarts=0, timeout_seconds=60, wait_for_completion=False, completion_timeout_seconds=0,
             progress=True, stop_on_interrupt=True, python=None):
    for name, value, low in (("n", n, 1), ("nproc_per_node", nproc_per_node, 1), ("max_restarts", max_restarts, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise MusterError("torchrun(): %s must be an integer >= %d, got %r" % (name, low, value),
                              code="invalid_argument", field=name)
    cluster = client.create_cluster(
        mode="torchrun", n_workers=n, nproc_per_node=nproc_per_node, max_restarts=max_restarts, cpu=cpu,
        memory=memory, nvidia_gpu=nvidia_gpu, worker_script=script, args=_args(args), env=env,
        timeout_seconds=timeout_seconds, python=_interpreter.resolve(python))
    return wait_for(client, cluster, timeout_seconds, wait_for_completion, completion_timeout_seconds, progress,
                    stop_on_interrupt)
