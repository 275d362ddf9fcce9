"""muster: workers and training clusters for a notebook, from musterd.

The calls and defaults are Cloudera's (cdsw), so a notebook ported with
`import muster as cdsw` keeps working::

    import muster as cdsw
    workers = cdsw.launch_workers(n=2, cpu=0.5, memory=2, script="train.py")
    running = cdsw.await_workers(workers, wait_for_completion=False, timeout_seconds=60)
    ips = [w["ip_address"] for w in running["workers"]]
    cdsw.stop_workers(*workers)

Each module-level call finds the daemon afresh (MUSTER_URL / MUSTER_TOKEN,
else the files musterd wrote in $MUSTER_STATE_DIR or ~/.muster; see
muster.config) and raises muster.MusterError on any error. Use muster.Client
for an explicit URL and token.

Workers and clusters come back as muster.Worker and muster.Cluster: the
dicts they always were, shown as one line (`<Worker 3fa9c0d1e2 running
10.0.0.7 4.2 s>`), the whole record in `.record` (muster.records).
"""
from typing import Any, Dict, Iterator, List, Mapping, Optional, Union

from . import clusters as _clusters
from . import interpreter as _interpreter
from . import metrics  # noqa: F401 - muster.metrics.report(...) for training scripts
from .client import Args, Client, WorkerRef
from .clusters import ClusterResult
from .config import discover, state_dir
from .errors import ClusterFailed, MusterError, MusterInterrupted, MusterWarning
from .records import Cluster, LogTail, Worker

__all__ = [
    "Client", "MusterError", "ClusterFailed", "MusterInterrupted", "MusterWarning", "ClusterResult", "discover", "state_dir",
    "Worker", "Cluster", "LogTail",
    "launch_workers", "await_workers", "stop_workers", "list_workers", "get_worker", "worker_logs",
    "run_cluster", "horovodrun", "torchrun", "await_cluster", "list_clusters", "get_cluster", "stop_cluster",
    "cluster_logs", "describe_generations",
]

__all__ += ["delete_worker"]

__version__ = "0.1.0"

# The commands a notebook runs (os.system("horovodrun ... python train.py"))
# give their ranks this notebook's Python, as the calls here do (see
# muster.interpreter).
_interpreter.export_for_commands()


def _client() -> Client:
    return Client()


def launch_workers(n: int, cpu: float, memory: float, nvidia_gpu: int = 0, kernel: str = "python3",
                   script: str = "", code: str = "", env: Mapping[str, Any] = {},  # noqa: B006
                   args: Args = None, accelerator_label_id: Any = None, resource_profile_id: Any = None,
                   resource_group_id: Any = None, python: Optional[str] = None) -> List[Worker]:
    """Launches n workers, each running `script` (a file in the project) or inline `code`.

    kernel "python3" runs a .py (or `code`); an executable runs directly; a
    .sh runs with bash. env is added to each worker's environment, args are
    passed to the script (a list, or a string split like a shell would).
    Returns the workers in launch order (muster.Worker: a dict with id,
    status, ip_address, running_at, duration, ..., shown as one line). All or nothing: if the daemon rejects the
    request, nothing runs. As in cdsw, `script` wins when both `script` and
    `code` are given (the daemon's note comes as a muster.MusterWarning).
    CML cloud's accelerator_label_id, resource_profile_id and
    resource_group_id are accepted and ignored, with a MusterWarning.
    python is the interpreter the workers run (an absolute path); left out,
    it is this notebook's own (sys.executable) when that can run muster's
    runtime, else the daemon's /usr/bin/python3 (muster.interpreter).

    Example::

        workers = muster.launch_workers(n=4, cpu=0.5, memory=1, script="sleep.py",
                                        env={"SECONDS": "5"})
        print([w["id"] for w in workers])
    """
    return _client().launch_workers(n, cpu, memory, nvidia_gpu, kernel, script, code, env, args,
                                    accelerator_label_id, resource_profile_id, resource_group_id, python)


def await_workers(ids: Any, wait_for_completion: bool = True, timeout_seconds: float = 60, progress: bool = True,
                  stop_on_interrupt: bool = True) -> Dict[str, List[Worker]]:
    """Waits for workers (ids or worker dicts); returns {"workers": [...], "failures": [...]}.

    With wait_for_completion=False a worker is ready once `running` with a
    known ip_address; with True once it has `succeeded`. Failed, timed-out
    and stopped workers are in "failures" with a "reason" and "log_tail"
    (the end of their log). Those still pending after timeout_seconds (0 =
    no timeout) are in "failures" too, but left as they are: still
    "running" (or "starting"), reason "timed out (still running)", not
    stopped. The wait happens in the daemon, not by polling. While waiting
    it shows "k/n workers running" and at the end each failed worker's last
    log lines (Jupyter: a display updated in place; terminal: stderr;
    progress=False: nothing). Ctrl-C (interrupting the cell) stops these
    workers and re-raises KeyboardInterrupt; stop_on_interrupt=False leaves
    them running. A musterd restarting meanwhile is waited for (30 s,
    MUSTER_RECONNECT_SECONDS), with one line saying so.

    Example::

        res = muster.await_workers(workers, wait_for_completion=False, timeout_seconds=60)
        ips = [w["ip_address"] for w in res["workers"]]
        for f in res["failures"]:
            print(f["id"], f["status"], f["reason"])
            print(f["log_tail"])        # the end of its log (its traceback)
    """
    return _client().await_workers(ids, wait_for_completion, timeout_seconds, progress, stop_on_interrupt)


def stop_workers(*worker_id: Any) -> List[Worker]:
    """Stops workers (ids or dicts) and their whole process trees; no argument stops all.

    Returns the stopped workers' dicts. An explicitly empty list
    (stop_workers([])) stops nothing.

    Example::

        muster.stop_workers(*workers)      # those launched above
        muster.stop_workers()              # every worker of this daemon
    """
    return _client().stop_workers(*worker_id)


def list_workers() -> List[Worker]:
    """Every worker the daemon knows (finished ones too), as dicts.

    Example::

        for w in muster.list_workers():
            print(w["id"], w["status"], w["ip_address"])
    """
    return _client().list_workers()


def delete_worker(worker_id: WorkerRef) -> None:
    """Forgets a finished worker (its record and log); running ones must be stopped first.

    Example::

        muster.delete_worker(w)
    """
    _client().delete_worker(worker_id)


def get_worker(worker_id: WorkerRef) -> Worker:
    """One worker's dict (worker_id: id string or dict).

    Example::

        w = muster.get_worker(workers[0])
        print(w["status"], w["exit_code"])
    """
    return _client().get_worker(worker_id)


def worker_logs(worker_id: WorkerRef, tail: Optional[int] = None, follow: bool = False,
                offset: Optional[int] = None, from_start: bool = False) -> Union[str, Iterator[str]]:
    """A worker's combined stdout and stderr as a string, from the end: its last lines.

    By default the last 1000 lines (tail=N: the last N); when earlier output
    is left out, a first line "[muster] ..." says how much and where the whole
    log is. from_start=True: the whole log from its first byte.

    follow=True: a generator of lines (no trailing newline) that yields each
    line within a second of the worker writing it and ends when the worker
    has ended; it starts at the end the same way (from_start=True: replays
    the log first). It reconnects from where it was if the connection drops.

    Example::

        print(muster.worker_logs(workers[0], tail=20))
        for line in muster.worker_logs(workers[0], follow=True):
            print(line)
    """
    return _client().worker_logs(worker_id, tail, follow, offset, from_start)


def run_cluster(n_workers: int, n_ps: int, cpu: float, memory: float, nvidia_gpu: int = 0,
                worker_script: Optional[str] = None, timeout_seconds: float = 60, mode: str = "ps",
                ps_script: Optional[str] = None, env: Optional[Mapping[str, Any]] = None, args: Args = None,
                n_chief: int = 0, n_evaluator: int = 0, progress: bool = True, stop_on_interrupt: bool = True,
                **extra: Any) -> ClusterResult:
    """Starts a TensorFlow parameter-server cluster; returns (cluster_spec, session_addr).

    musterd launches n_ps parameter servers and n_workers workers, collects
    each task's host:port, and hands every task its own TF_CONFIG (and a
    cluster.json in its MUSTER_WORKER_DIR) before the task's program starts.
    PS tasks run `ps_script` if given, else the runtime's parameter server.

    - With no worker_script: returns once every task is up.
    - With worker_script: waits until the cluster has ended (no limit unless
      completion_timeout_seconds=N is given) and raises muster.ClusterFailed,
      naming the failing task ("worker:1") and its log tail, if any failed.

    timeout_seconds bounds the start-up: every task must be up by then.
    cluster_spec is {"ps": ["ip:port", ...], "worker": [...]} (plus "chief"
    with n_chief=1); session_addr is "grpc://<chief or worker 0>". The pair
    also carries .cluster_id and .cluster. n_chief=1 adds TensorFlow 2's
    coordinator task ("chief", in the cluster spec), n_evaluator=1 an
    "evaluator" task (outside it, per TensorFlow's rules). Extra keyword
    arguments (e.g. network_interface) go to POST /api/v1/clusters
    unchanged. python: every task's interpreter (default: as for
    launch_workers).

    While waiting it shows the cluster's status (progress=False: silent).
    Ctrl-C stops the cluster and re-raises KeyboardInterrupt with the id as
    its .cluster_id (stop_on_interrupt=False: leaves it running); every
    MusterError raised once the cluster exists carries .cluster_id too.

    Example::

        cluster_spec, session_addr = muster.run_cluster(
            n_workers=2, n_ps=1, cpu=0.5, memory=2, worker_script="train.py")
        print(cluster_spec["worker"], session_addr)
    """
    return _client().run_cluster(n_workers, n_ps, cpu, memory, nvidia_gpu, worker_script, timeout_seconds,
                                 mode, ps_script, env, args, n_chief=n_chief, n_evaluator=n_evaluator,
                                 progress=progress, stop_on_interrupt=stop_on_interrupt, **extra)


def horovodrun(n: int, script: str, slots: int = 1, **options: Any) -> Cluster:
    """Starts an allreduce (mpi mode) cluster of n workers; returns the cluster dict.

    The dict carries "id", "horovodrun_command" and "mpirun_command" (the
    exact lines, built from the workers' IPs), "hostfile", "workers" and
    "status". Options: cpu=1, memory=1, nvidia_gpu=0, args, env, ssh_port
    (daemon default 2222), network_interface, launch=True (the daemon runs
    the mpirun line itself; False only builds the lines), timeout_seconds=60
    for start-up, wait_for_completion=False (True: wait for the end and raise
    muster.ClusterFailed if it failed), completion_timeout_seconds=0,
    progress=True, stop_on_interrupt=True (Ctrl-C stops the cluster; the
    KeyboardInterrupt and any MusterError carry .cluster_id). Horovod's
    tuning options: fusion_threshold_mb, cycle_time_ms, timeline_filename,
    start_timeout (s), verbose, network_interfaces (a list, or "eth0,eth1").
    python: the ranks' interpreter (default: as for launch_workers).
    workers: running workers (ids or dicts) to run the ranks on, `slots`
    each, instead of launching n new ones (n=None, or their number); the
    cluster never stops them (`horovodrun -H <their IPs>`). A failed job
    raises ClusterFailed naming the first rank that failed (task "rank:1")
    with its last lines.

    max_restarts=k restarts every rank after a failure, up to k times (the
    script resumes from its own checkpoint; torchrun's --max-restarts).

    Elastic (horovodrun's elastic flags): with min_np, max_np, reset_limit or
    blacklist_cooldown_range=(lo, hi) the cluster is elastic: musterd
    launches every rank itself (no mpirun) and forms the world through its
    own rendezvous; when a rank dies the others re-form without it (at least
    min_np), a replacement joins (up to max_np), and a script written for
    Horovod elastic (hvd.elastic.run, TorchState, commit()) goes on from its
    last commit. The cluster's "generations" say who died, who replaced
    whom and how long each recovery took (muster.describe_generations).

    Example::

        c = muster.horovodrun(2, "train.py", slots=1, launch=False)
        print(c["horovodrun_command"])
        muster.stop_cluster(c)

        c = muster.horovodrun(3, "train_elastic.py", min_np=2, max_np=3, reset_limit=5,
                              wait_for_completion=True)
        print(muster.describe_generations(c))
    """
    return _client().horovodrun(n, script, slots, **options)


def describe_generations(cluster: Any) -> str:
    """A cluster's generations (its failures and recoveries) as text, one line each.

    Example::

        print(muster.describe_generations(muster.get_cluster(cid)))
    """
    if not isinstance(cluster, dict):
        cluster = _client().get_cluster(cluster)
    return _clusters.describe_generations(cluster)


def torchrun(n: int, script: str, nproc_per_node: int = 1, **options: Any) -> Cluster:
    """Runs a torch.distributed script on n workers, as torchrun would; returns the cluster dict.

    Every process gets torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,
    LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK, MASTER_ADDR, MASTER_PORT,
    TORCHELASTIC_RUN_ID, ...), so a script written for torchrun
    (`dist.init_process_group("gloo")`, DistributedDataParallel,
    DistributedSampler) runs unchanged; `import muster.torch.distributed` and
    backend "muster" make it run on muster's allreduce. MASTER_PORT is a port
    worker 0's agent reserved on its host. nproc_per_node > 1 runs that many
    processes per worker (LOCAL_RANK 0..nproc_per_node-1; OMP_NUM_THREADS=1
    unless env sets it). The dict carries "id", "status", "workers" and
    "torchrun_command", the torchrun line every node would run for the same
    job. A process that dies ends the job: the cluster fails naming the
    worker and its ranks (muster.ClusterFailed with wait_for_completion).

    Options: args (list or string), env, cpu=1, memory=1, nvidia_gpu=0 (per
    worker), max_restarts=0 (torchrun --max_restarts, validated and handed to
    the processes as TORCHELASTIC_MAX_RESTARTS), timeout_seconds=60 for
    start-up, wait_for_completion=False (True: wait for the end and raise
    muster.ClusterFailed if it failed), completion_timeout_seconds=0,
    progress=True, stop_on_interrupt=True.

    Example::

        c = muster.torchrun(2, "examples/pytorch/ddp_train.py", args=["--epochs", "1"])
        print(c["torchrun_command"])
        c = muster.await_cluster(c, timeout_seconds=600)
        print(c["status"], muster.cluster_logs(c, tail=3))
    """
    return _client().torchrun(n, script, nproc_per_node, **options)


def await_cluster(cluster_id: WorkerRef, timeout_seconds: float = 60, wait_for_completion: bool = True,
                  progress: bool = True, stop_on_interrupt: bool = True) -> Cluster:
    """Waits for a cluster (id or dict) to end, or with wait_for_completion=False to be up.

    Returns the cluster dict (status "succeeded", "running", or "stopped" if
    someone stopped it). A cluster that failed raises muster.ClusterFailed
    naming the failing task or mpi's first failed rank, with its last lines
    (.cluster is the cluster, .task "worker:1" or "rank:1"). Raises
    MusterError(code="deadline_exceeded") after timeout_seconds (0 = wait
    forever). Shows progress (progress=False: silent); Ctrl-C stops the
    cluster and re-raises (stop_on_interrupt=False: leaves it running). A
    musterd restarting meanwhile is waited for (30 s,
    MUSTER_RECONNECT_SECONDS), with one line saying so.

    Example::

        try:
            c = muster.await_cluster(cluster, timeout_seconds=600)
            print(c["status"])
        except muster.ClusterFailed as err:
            print(err.task, err.message)
    """
    return _client().await_cluster(cluster_id, timeout_seconds, wait_for_completion, progress, stop_on_interrupt)


def list_clusters() -> List[Cluster]:
    """Every cluster the daemon knows, as dicts.

    Example::

        for c in muster.list_clusters():
            print(c["id"], c["mode"], c["status"])
    """
    return _client().list_clusters()


def get_cluster(cluster_id: WorkerRef) -> Cluster:
    """One cluster's dict (id or dict).

    Example::

        print(muster.get_cluster(cid)["cluster_spec"])
    """
    return _client().get_cluster(cluster_id)


def stop_cluster(cluster_id: WorkerRef) -> Cluster:
    """Stops a cluster's tasks and launcher; returns the cluster dict.

    Example::

        muster.stop_cluster(cluster)
    """
    return _client().stop_cluster(cluster_id)


def cluster_logs(cluster: WorkerRef, tail: Optional[int] = None, follow: bool = False,
                 offset: Optional[int] = None, from_start: bool = False) -> Union[str, Iterator[str]]:
    """A cluster's output as a string (cluster: id or dict), from its last lines as worker_logs.

    follow=True: a generator of its lines as they are written, ending when
    the cluster has ended (see worker_logs).

    mpi mode (horovodrun with launch=True): the launcher's log, i.e.
    mpirun's combined output, where each line starts with its rank's tag
    ("[1,0]<stdout>:" for rank 0). ps mode: the chief's log (the "chief"
    task with n_chief=1, else worker 0). torchrun mode: worker 0's log
    (rank 0's output, and its siblings' with nproc_per_node > 1).
    Empty while the cluster has no log yet. Works wherever the notebook
    runs: the text comes over the REST API, not from the daemon's disk.

    Example::

        c = muster.horovodrun(2, "train.py", wait_for_completion=True)
        print(muster.cluster_logs(c, tail=20))
    """
    return _client().cluster_logs(cluster, tail, follow, offset, from_start)


# Helpers for cluster tasks and tests.
session_address = _clusters.session_address
