"""The `muster` command line (also `python3 -m muster`): the SDK's calls from a shell.

    muster ps [-a]                       workers (running ones; -a: all), a table
    muster clusters [-a]                 clusters, a table
    muster logs [-f] [-n N | --from-start] ID   a worker's or a cluster's output, from its
                                         last lines (-f: follow; --from-start: all of it)
    muster cluster ID                    one cluster, with its generations
    muster stop ID... | --all            stop workers and/or clusters
    muster launch -n N --script S ...    launch workers (--wait: until they run / end)
    muster run-cluster --workers N --ps N --script S ...
    muster horovodrun -np N [-H HOST,...] [python] SCRIPT [ARGS...]
    muster torchrun -np N [--nproc-per-node K] SCRIPT [ARGS...]

--json prints the SDK's dicts as JSON instead of tables. The daemon is found
as the SDK finds it (--url/--token, MUSTER_URL/MUSTER_TOKEN, the state dir).

Exit codes follow the error model (muster.errors): 0 success; 1 a
MusterError from the daemon not listed below; 2 bad usage or
invalid_argument; 3 musterd unreachable or not configured (unavailable,
unconfigured); 4 not_found; 5 a cluster or worker failed (cluster_failed,
`launch --wait` with failed workers, whose last log lines it prints); 6
deadline_exceeded (also `launch --wait` whose workers were all fine but some
still pending at --timeout, left running); 130 interrupted (Ctrl-C,
after stopping what the command started). Errors print as
"muster: error: <code>: <message>" on stderr.
"""
import argparse
import json
import sys
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from . import __version__
from . import clusters as _clusters
from . import horovodrun_cli as _horovodrun
from . import interpreter as _interpreter
from .client import Client, describe_failures
from .errors import MusterError, MusterInterrupted
from .follow import CLUSTER_TERMINAL, WORKER_TERMINAL
from .progress import Progress

EXIT_CODES = {"invalid_argument": 2, "unavailable": 3, "unconfigured": 3, "not_found": 4,
              "cluster_failed": 5, "deadline_exceeded": 6}
EXIT_FAILED = 5
EXIT_INTERRUPTED = 130


def _env_pairs(values: Optional[List[str]]) -> Dict[str, str]:
    env = {}
    for item in values or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise MusterError("--env wants NAME=VALUE, got %r" % item, code="invalid_argument", field="env")
        env[name] = value
    return env


def _table(rows: Iterable[Sequence[Any]], header: Sequence[str]) -> str:
    cells = [list(header)] + [["-" if v is None or v == "" else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def _seconds(value: Any) -> str:
    return "%.1fs" % value if isinstance(value, (int, float)) else "-"


def _found(get, ident: str) -> bool:
    try:
        get(ident)
        return True
    except MusterError as err:
        if err.code != "not_found":
            raise
        return False


def _resolve(client: Client, ident: str) -> Tuple[str, str]:
    """("worker" or "cluster", its full id) for what a user typed: a worker id, a cluster
    id (c-...), or the start of exactly one of them (as `muster ps` shows them).

    Neither: not_found naming both kinds and where to look; the start of
    several: invalid_argument naming them.
    """
    if _found(client.get_worker, ident):
        return "worker", ident
    if _found(client.get_cluster, ident):
        return "cluster", ident
    matches = [("worker", w["id"]) for w in client.list_workers() if str(w.get("id", "")).startswith(ident)]
    matches += [("cluster", c["id"]) for c in client.list_clusters() if str(c.get("id", "")).startswith(ident)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise MusterError("%r is the start of several ids (%s); give more of it"
                          % (ident, ", ".join("%s %s" % m for m in matches)), code="invalid_argument", field="id")
    raise MusterError("no worker or cluster %r on musterd at %s (muster ps -a lists its workers, muster clusters -a "
                      "its clusters)" % (ident, client.url), code="not_found", field="id")


def _print(args, value: Any, text: str) -> None:
    print(json.dumps(value, indent=2, sort_keys=True) if args.json else text)


def cmd_ps(client: Client, args) -> int:
    workers = [w for w in client.list_workers() if args.all or w.get("status") not in WORKER_TERMINAL]
    rows = [(w["id"], w.get("status"), w.get("ip_address"), w.get("cpu"), w.get("memory"), w.get("nvidia_gpu"),
             w.get("cluster_id"), _seconds(w.get("duration")), w.get("exit_code"), w.get("script"), w.get("reason"))
            for w in workers]
    _print(args, workers, _table(rows, ("ID", "STATUS", "IP", "CPU", "MEM", "GPU", "CLUSTER", "DURATION", "EXIT",
                                        "SCRIPT", "REASON")))
    return 0


def cmd_clusters(client: Client, args) -> int:
    clusters = [c for c in client.list_clusters() if args.all or c.get("status") not in CLUSTER_TERMINAL]
    rows = []
    for c in clusters:
        tasks = c.get("workers") or {}
        n = sum(len(v or []) for v in tasks.values()) if isinstance(tasks, dict) else len(tasks)
        rows.append((c["id"], c.get("mode"), c.get("status"), n, c.get("generation") or "-", c.get("created_at"),
                     c.get("reason")))
    _print(args, clusters, _table(rows, ("ID", "MODE", "STATUS", "TASKS", "GEN", "CREATED", "REASON")))
    return 0


def cmd_logs(client: Client, args) -> int:
    if args.from_start and args.tail is not None:
        raise MusterError("give --tail or --from-start, not both", code="invalid_argument", field="from_start")
    kind, ident = _resolve(client, args.id)
    get = client.cluster_logs if kind == "cluster" else client.worker_logs
    if not args.follow:
        sys.stdout.write(get(ident, tail=args.tail, from_start=args.from_start))
        return 0
    for line in get(ident, tail=args.tail, follow=True, from_start=args.from_start):
        print(line, flush=True)
    return 0


def cmd_stop(client: Client, args) -> int:
    if args.all == bool(args.ids):
        raise MusterError("give worker/cluster ids or --all (not both)", code="invalid_argument", field="ids")
    stopped: List[Dict[str, Any]] = []
    if args.all:
        for c in client.list_clusters():
            if c.get("status") not in CLUSTER_TERMINAL:
                stopped.append(client.stop_cluster(c["id"]))
        stopped.extend(client.stop_workers())
    else:
        workers = []
        for typed in args.ids:
            kind, ident = _resolve(client, typed)
            if kind == "cluster":
                stopped.append(client.stop_cluster(ident))
            else:
                workers.append(ident)
        if workers:
            stopped.extend(client.stop_workers(workers))
    _print(args, stopped, "\n".join("%s %s" % (x.get("id"), x.get("status")) for x in stopped))
    return 0


def cmd_launch(client: Client, args) -> int:
    workers = client.launch_workers(args.n, args.cpu, args.memory, args.gpu, args.kernel, args.script or "",
                                    args.code or "", _env_pairs(args.env), args.args, python=args.python)
    result: Any = workers
    rc = 0
    if args.wait:
        result = client.await_workers(workers, wait_for_completion=args.wait == "completion",
                                      timeout_seconds=args.timeout, progress=not args.json)
        ended = [f for f in result["failures"] if f.get("status") in WORKER_TERMINAL]
        # Failed: 5. Only still pending at --timeout (left running): 6, as a deadline.
        rc = EXIT_FAILED if ended else EXIT_CODES["deadline_exceeded"] if result["failures"] else 0
        lines = (["%s %s %s" % (w["id"], w.get("status"), w.get("ip_address")) for w in result["workers"]] +
                 ["%s %s %s" % (f["id"], f.get("status"), f.get("reason")) for f in result["failures"]])
        # The failed workers' last log lines: on stderr's status line when it is a
        # terminal (muster.progress), else here.
        shown = "" if Progress(not args.json).active else describe_failures(result["failures"])
        text = "\n".join(lines + ([shown] if shown else []))
    else:
        text = "\n".join(w["id"] for w in workers)
    _print(args, result, text)
    return rc


def _cluster_text(c: Dict[str, Any]) -> str:
    lines = ["cluster %s %s" % (c.get("id"), c.get("status"))]
    for key in ("cluster_spec", "horovodrun_command", "mpirun_command", "torchrun_command"):
        if c.get(key):
            lines.append("%s: %s" % (key, c[key] if isinstance(c[key], str) else json.dumps(c[key])))
    if c.get("generations"):
        lines.append(_clusters.describe_generations(c))
    return "\n".join(lines)


def cmd_cluster(client: Client, args) -> int:
    kind, ident = _resolve(client, args.id)
    if kind != "cluster":
        raise MusterError("%s is a worker, not a cluster (muster logs %s shows its output)" % (ident, ident),
                          code="invalid_argument", field="id")
    cluster = client.get_cluster(ident)
    text = _cluster_text(cluster)
    if cluster.get("reason"):
        text += "\nreason: %s" % cluster["reason"]
    _print(args, cluster, text)
    return 0


def cmd_run_cluster(client: Client, args) -> int:
    env = _env_pairs(args.env)
    if args.wait:
        result = client.run_cluster(args.workers, args.ps, args.cpu, args.memory, args.gpu, worker_script=args.script,
                                    timeout_seconds=args.timeout, ps_script=args.ps_script, env=env, args=args.args,
                                    n_chief=args.chief, n_evaluator=args.evaluator, progress=not args.json,
                                    completion_timeout_seconds=args.completion_timeout, python=args.python)
        cluster = client.get_cluster(result.cluster_id)
    else:  # create it and wait for start-up only (run_cluster with a script waits for the end)
        cluster = client.create_cluster(mode="ps", n_workers=args.workers, n_ps=args.ps, cpu=args.cpu,
                                        memory=args.memory, nvidia_gpu=args.gpu, worker_script=args.script,
                                        ps_script=args.ps_script, env=env, args=args.args,
                                        timeout_seconds=args.timeout, n_chief=args.chief or None,
                                        n_evaluator=args.evaluator or None,
                                        python=_interpreter.resolve(args.python))
        cluster = _clusters.wait_for(client, cluster, args.timeout, False, 0, not args.json, True)
    _print(args, cluster, _cluster_text(cluster))
    return 0


def cmd_horovodrun(client: Client, args) -> int:
    options = {k: getattr(args, k) for k in ("fusion_threshold_mb", "cycle_time_ms", "timeline_filename",
                                             "start_timeout", "max_restarts", "min_np", "max_np", "reset_limit",
                                             "blacklist_cooldown_range") if getattr(args, k) is not None}
    if args.verbose:
        options["verbose"] = True
    if args.network_interfaces:
        options["network_interfaces"] = [x for x in args.network_interfaces.split(",") if x]
    # `python train.py` as horovodrun takes it: the interpreter, then the script.
    python, script, script_args = _horovodrun.split_command([args.script] + list(args.args))
    n, slots, workers = args.np, args.slots, None
    if args.hosts:  # the notebook's running workers, by IP (see the horovodrun command)
        workers, slots = _horovodrun.workers_for_hosts(client, _horovodrun.parse_hosts(args.hosts))
        if args.np != len(workers) * slots:
            raise MusterError("-np %d, but -H gives %d slot(s); muster runs one rank per slot"
                              % (args.np, len(workers) * slots), code="invalid_argument", field="np")
        n = None
    cluster = client.horovodrun(n, script, slots=slots, cpu=args.cpu, memory=args.memory,
                                nvidia_gpu=args.gpu, args=script_args, env=_env_pairs(args.env),
                                launch=not args.no_launch, timeout_seconds=args.timeout,
                                wait_for_completion=args.wait, completion_timeout_seconds=args.completion_timeout,
                                progress=not args.json,
                                python=args.python or python or _interpreter.for_commands() or "", workers=workers,
                                ssh_port=args.ssh_port, **options)
    _print(args, cluster, _cluster_text(cluster))
    return 0


def cmd_torchrun(client: Client, args) -> int:
    cluster = client.torchrun(args.np, args.script, nproc_per_node=args.nproc_per_node, cpu=args.cpu,
                              memory=args.memory, nvidia_gpu=args.gpu, args=args.args, env=_env_pairs(args.env),
                              max_restarts=args.max_restarts, timeout_seconds=args.timeout,
                              wait_for_completion=args.wait, completion_timeout_seconds=args.completion_timeout,
                              progress=not args.json)
    _print(args, cluster, _cluster_text(cluster))
    return 0


def _python_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--python", metavar="PATH", help="interpreter the workers run (default: this Python when it "
                   "can run muster's runtime, else musterd's /usr/bin/python3)")


def _resources(p: argparse.ArgumentParser, cpu: float = 1, memory: float = 1) -> None:
    p.add_argument("--cpu", type=float, default=cpu, help="vCPUs per worker (default %(default)s)")
    p.add_argument("--memory", type=float, default=memory, help="GB of memory per worker (default %(default)s)")
    p.add_argument("--gpu", type=int, default=0, help="NVIDIA GPUs per worker (default 0)")
    p.add_argument("--env", action="append", metavar="NAME=VALUE", help="add to each worker's environment; repeat")
    p.add_argument("--timeout", type=float, default=60, help="start-up timeout in seconds (default 60; 0: none)")


def parser() -> argparse.ArgumentParser:
    def common_options(suppress: bool) -> argparse.ArgumentParser:
        # Accepted before and after the command; after it, only when given
        # (argparse's SUPPRESS), so `muster --json ps` is not reset by ps.
        extra = {"default": argparse.SUPPRESS} if suppress else {}
        p = argparse.ArgumentParser(add_help=False)
        p.add_argument("--json", action="store_true", help="print JSON (the SDK's dicts) instead of text", **extra)
        p.add_argument("--url", help="musterd's URL (default: MUSTER_URL, else the state dir's musterd.json)",
                       **extra)
        p.add_argument("--token", help="bearer token (default: MUSTER_TOKEN, else the state dir's token)", **extra)
        p.add_argument("--ca-file", help="https: verify musterd's certificate with this PEM CA file (default: "
                       "MUSTER_CA_FILE)", **extra)
        p.add_argument("--tls-fingerprint", help="https: pin musterd's certificate by its SHA-256 (default: "
                       "MUSTER_TLS_FINGERPRINT, else musterd.json's)", **extra)
        return p

    common = common_options(True)
    top = argparse.ArgumentParser(prog="muster", description="Workers and training clusters on musterd.",
                                  epilog=__doc__.split("\n\n", 2)[2], parents=[common_options(False)],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version="muster " + __version__)
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("ps", parents=[common], help="list workers (running ones; -a: all)")
    p.add_argument("-a", "--all", action="store_true", help="also finished workers")
    p.set_defaults(run=cmd_ps)
    p = sub.add_parser("clusters", parents=[common], help="list clusters (active ones; -a: all)")
    p.add_argument("-a", "--all", action="store_true", help="also ended clusters")
    p.set_defaults(run=cmd_clusters)
    p = sub.add_parser("cluster", parents=[common], help="one cluster, with its generations (failures, recoveries)")
    p.add_argument("id", metavar="ID", help="cluster id (c-...), or the start of one")
    p.set_defaults(run=cmd_cluster)
    p = sub.add_parser("logs", parents=[common], help="a worker's or cluster's output")
    p.add_argument("id", metavar="ID", help="worker id, or cluster id (c-...), or the start of one")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing lines as they are written")
    p.add_argument("-n", "--tail", type=int, help="the last N lines (default: the daemon's 1000; with -f: start there)")
    p.add_argument("--from-start", action="store_true", help="the whole log from its first byte (with -f: replay it)")
    p.set_defaults(run=cmd_logs)
    p = sub.add_parser("stop", parents=[common], help="stop workers and/or clusters")
    p.add_argument("ids", nargs="*", metavar="ID", help="worker or cluster ids (or the start of one)")
    p.add_argument("--all", action="store_true", help="every active cluster and worker")
    p.set_defaults(run=cmd_stop)

    p = sub.add_parser("launch", parents=[common], help="launch workers (prints their ids)")
    p.add_argument("-n", type=int, required=True, help="number of workers")
    p.add_argument("--script", help="program to run, relative to musterd's project dir")
    p.add_argument("--code", help="inline Python code to run (kernel python3)")
    p.add_argument("--kernel", default="python3", choices=("python3", "bash", "executable"),
                   help="python3 (default: a .py file or --code with Python, a .sh with bash, another executable "
                   "file as it is), bash, or executable (the script file runs as it is)")
    _python_option(p)
    _resources(p)
    p.add_argument("--wait", nargs="?", const="running", choices=("running", "completion"),
                   help="wait until running (default) or until completion; exit 5 if any failed")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script (after --)")
    p.set_defaults(run=cmd_launch)

    p = sub.add_parser("run-cluster", parents=[common], help="a TensorFlow parameter-server cluster")
    p.add_argument("--workers", type=int, required=True, help="number of worker tasks")
    p.add_argument("--ps", type=int, default=1, help="number of parameter servers (default 1)")
    p.add_argument("--chief", type=int, choices=(0, 1), default=0, help="a TF2 chief (coordinator) task")
    p.add_argument("--evaluator", type=int, choices=(0, 1), default=0, help="a TF2 evaluator task")
    p.add_argument("--script", required=True, help="worker program, relative to the project dir")
    p.add_argument("--ps-script", help="parameter server program (default: muster-ps)")
    _python_option(p)
    _resources(p)
    p.add_argument("--wait", action="store_true", help="wait until the cluster has ended; exit 5 if it failed")
    p.add_argument("--completion-timeout", type=float, default=0, help="with --wait: seconds (default 0: none)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the worker program (after --)")
    p.set_defaults(run=cmd_run_cluster)

    p = sub.add_parser("horovodrun", parents=[common], help="an allreduce (mpi) cluster, like horovodrun -np N")
    p.add_argument("-np", "--np", dest="np", type=int, required=True,
                   help="number of workers (with -H: of ranks, one per slot)")
    p.add_argument("-H", "--hosts", help="HOST[:SLOTS],...: run on these running workers (by IP) instead of new ones")
    p.add_argument("-p", "--ssh-port", type=int, help="the workers' sshd port (default: musterd's, 2222)")
    p.add_argument("--slots", type=int, default=1, help="ranks per worker (default 1)")
    _python_option(p)
    _resources(p)
    p.add_argument("--no-launch", action="store_true", help="only build the horovodrun/mpirun lines")
    p.add_argument("--wait", action="store_true", help="wait until it has ended; exit 5 if it failed")
    p.add_argument("--completion-timeout", type=float, default=0, help="with --wait: seconds (default 0: none)")
    p.add_argument("--fusion-threshold-mb", type=int, help="Horovod tensor fusion buffer (MB)")
    p.add_argument("--cycle-time-ms", type=float, help="Horovod cycle time (ms)")
    p.add_argument("--timeline-filename", help="Horovod timeline file")
    p.add_argument("--start-timeout", type=int, help="Horovod start-up timeout (s)")
    p.add_argument("--verbose", action="store_true", help="Horovod verbose output")
    p.add_argument("--network-interfaces", help="comma-separated interfaces, e.g. eth0,eth1")
    p.add_argument("--max-restarts", type=int, help="restart every rank after a failure, up to N times")
    p.add_argument("--min-np", type=int, help="elastic: fewest ranks to go on with (default -np)")
    p.add_argument("--max-np", type=int, help="elastic: most ranks (default -np)")
    p.add_argument("--reset-limit", type=int, help="elastic: how often the world may re-form")
    p.add_argument("--blacklist-cooldown-range", type=int, nargs=2, metavar=("LO", "HI"),
                   help="elastic: a failing host's cooldown, seconds")
    p.add_argument("script", help="training program, relative to the project dir (or `python SCRIPT`)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the program")
    p.set_defaults(run=cmd_horovodrun)

    p = sub.add_parser("torchrun", parents=[common],
                       help="a torch.distributed job (DDP), like torchrun on N nodes")
    p.add_argument("-np", "--np", "--nnodes", dest="np", type=int, required=True, help="number of workers (nodes)")
    p.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node", type=int, default=1,
                   help="processes per worker (default 1)")
    p.add_argument("--max-restarts", "--max_restarts", dest="max_restarts", type=int, default=0,
                   help="torchrun's --max_restarts (default 0)")
    _resources(p)
    p.add_argument("--wait", action="store_true", help="wait until it has ended; exit 5 if it failed")
    p.add_argument("--completion-timeout", type=float, default=0, help="with --wait: seconds (default 0: none)")
    p.add_argument("script", help="training script, relative to the project dir")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    p.set_defaults(run=cmd_torchrun)
    return top


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs one command; returns its exit code (see the module comment)."""
    args = parser().parse_args(argv)
    if getattr(args, "args", None) and args.args[0] == "--":
        args.args = args.args[1:]
    try:
        client = Client(args.url, args.token, ca_file=getattr(args, "ca_file", None),
                        tls_fingerprint=getattr(args, "tls_fingerprint", None))
        return args.run(client, args)
    except KeyboardInterrupt as interrupt:
        print(interrupt if isinstance(interrupt, MusterInterrupted) else "muster: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except MusterError as err:
        print("muster: error: %s" % err, file=sys.stderr)
        return EXIT_CODES.get(err.code, 1)
    except BrokenPipeError:  # `muster logs -f ID | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
