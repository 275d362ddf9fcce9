"""The `horovodrun` command: Horovod's launcher line, run by musterd.

    horovodrun -np N [-H HOST[:SLOTS],...] [-p PORT] [options] [python] SCRIPT [ARGS...]

A notebook ported from CML keeps its cell (seed: Cloudera's Horovod post)::

    workers = cdsw.launch_workers(2, cpu=0.5, memory=2, script="idle.py")
    running = cdsw.await_workers([w["id"] for w in workers], wait_for_completion=False,
                                 timeout_seconds=60)
    worker_ips = [w["ip_address"] for w in running["workers"]]
    os.system("horovodrun -np {} -H {} -p 2222 python train.py".format(
        len(worker_ips), ",".join(worker_ips)))

- -H names hosts by IP address (HOST:SLOTS for more ranks than one): each
  must be a running worker of this daemon (the notebook's own; workers of
  a cluster are not lent). Several workers may share an IP (the local
  backend: all are 127.0.0.1): each entry takes the next one. The ranks
  run on those workers' hosts, one per slot; -np must equal the slots.
  Without -H, musterd launches N new workers for the job (as
  `muster horovodrun -np N`), with --cpu/--memory/--gpu each.
- -p is the workers' sshd port (the container backend's is 2222);
  mpirun's other options are musterd's (hostfile, interfaces, --prefix).
- `python` / `python3` before the script means the Python muster picks: the
  notebook's own (the one that ran `import muster` and os.system) when it
  can run muster's runtime, else musterd's /usr/bin/python3; a path
  (/opt/venv/bin/python) names one. SCRIPT is relative to musterd's
  --project-dir.

It prints every rank's output as it comes (tagged "[1,0]<stdout>:", as
horovodrun does), and exits with mpirun's exit code; a failure names the
first rank that failed with its last lines. Ctrl-C stops the job (one line).
Exit codes besides mpirun's: 2 bad usage, 3 musterd unreachable, 130
interrupted.
"""
import argparse
import os
import re
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import clusters as _clusters
from . import interpreter as _interpreter
from .client import Client
from .errors import ClusterFailed, MusterError, MusterInterrupted

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_INTERRUPTED = 130
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")


def split_command(command: Sequence[str]) -> Tuple[Optional[str], str, List[str]]:
    """(python, script, args) of a command line as horovodrun takes it.

    "python train.py --lr 1" -> (None, "train.py", ["--lr", "1"]): a bare
    python / python3 / python3.11 is "the Python", muster's pick (the
    notebook's own when it can run muster's runtime, else the daemon's
    /usr/bin/python3; interpreter.for_commands), not whichever comes first on
    PATH (a pyenv shim without torch, say); "/opt/py/bin/python train.py" ->
    ("/opt/py/bin/python", ...); "train.py" -> (None, "train.py", []).

    Example::

        split_command(["python3", "train.py", "-e", "2"])   # (None, "train.py", ["-e", "2"])
    """
    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise MusterError("no command: give the training script, e.g. `python train.py`",
                          code="invalid_argument", field="command")
    first = command[0]
    if not _PYTHON.match(os.path.basename(first)):
        return None, first, command[1:]
    if len(command) < 2:
        raise MusterError("%s needs a script after it, e.g. `%s train.py`" % (first, first),
                          code="invalid_argument", field="command")
    return (os.path.abspath(first) if os.sep in first else None), command[1], command[2:]


def parse_hosts(text: str) -> List[Tuple[str, int]]:
    """"10.0.0.1:2,10.0.0.2" -> [("10.0.0.1", 2), ("10.0.0.2", 1)]."""
    out = []
    for item in [x.strip() for x in text.split(",") if x.strip()]:
        host, sep, slots = item.partition(":")
        if not host or (sep and not slots.isdigit()) or (sep and int(slots) < 1):
            raise MusterError("-H %s: %r is not HOST or HOST:SLOTS (SLOTS a number >= 1)" % (text, item),
                              code="invalid_argument", field="hosts")
        out.append((host, int(slots) if sep else 1))
    if not out:
        raise MusterError("-H names no host", code="invalid_argument", field="hosts")
    return out


def workers_for_hosts(client: Client, hosts: List[Tuple[str, int]]) -> Tuple[List[str], int]:
    """The running workers that -H names, in order, and the slots of each.

    Each entry takes the next running worker (of no cluster) with that IP
    address, so "127.0.0.1,127.0.0.1" is two local workers. Raises
    MusterError naming the entry that matches none, and the workers there are.
    """
    running = [w for w in client.list_workers() if w.get("status") == "running" and not w.get("cluster_id")]
    taken: List[str] = []
    for host, _ in hosts:
        match = next((w for w in running if w.get("ip_address") == host and w["id"] not in taken), None)
        if match is None:
            have = ", ".join("%s %s" % (w["id"], w.get("ip_address")) for w in running) or "none"
            used = sum(1 for h, _ in hosts if h == host)
            raise MusterError(
                "-H %s: %s running worker(s) at %s for %d entr%s (running workers: %s); launch and await them "
                "first (launch_workers, then await_workers(..., wait_for_completion=False))"
                % (host, "no" if not taken else "not enough", host, used, "y" if used == 1 else "ies", have),
                code="invalid_argument", field="hosts")
        taken.append(match["id"])
    slots = {s for _, s in hosts}
    if len(slots) != 1:
        raise MusterError("-H gives different slot counts (%s); muster runs the same number of ranks on each "
                          "worker" % ", ".join(sorted(str(s) for s in slots)), code="invalid_argument", field="hosts")
    return taken, slots.pop()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="horovodrun", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-np", "--num-proc", dest="np", type=int, required=True, help="number of ranks")
    p.add_argument("-H", "--hosts", help="HOST[:SLOTS],...: running workers by IP address (default: new workers)")
    p.add_argument("-p", "--ssh-port", type=int, help="the workers' sshd port (default: musterd's, 2222)")
    p.add_argument("--network-interface", "--network-interfaces", dest="network_interfaces",
                   help="comma-separated interfaces, e.g. eth0,eth1")
    p.add_argument("--fusion-threshold-mb", type=int, help="Horovod tensor fusion buffer (MB)")
    p.add_argument("--cycle-time-ms", type=float, help="Horovod cycle time (ms)")
    p.add_argument("--timeline-filename", help="Horovod timeline file")
    p.add_argument("--start-timeout", type=int, help="Horovod start-up timeout (s)")
    p.add_argument("--verbose", action="store_true", help="Horovod verbose output")
    p.add_argument("--cpu", type=float, default=1, help="without -H: vCPUs per new worker (default %(default)s)")
    p.add_argument("--memory", type=float, default=1, help="without -H: GB per new worker (default %(default)s)")
    p.add_argument("--gpu", type=int, default=0, help="without -H: NVIDIA GPUs per new worker (default 0)")
    p.add_argument("--timeout", type=float, default=60, help="start-up timeout in seconds (default 60)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="[python] SCRIPT [ARGS...]")
    return p


def _options(a) -> Dict[str, Any]:
    out: Dict[str, Any] = {k: getattr(a, k) for k in ("fusion_threshold_mb", "cycle_time_ms", "timeline_filename",
                                                      "start_timeout") if getattr(a, k) is not None}
    if a.verbose:
        out["verbose"] = True
    if a.network_interfaces:
        out["network_interfaces"] = [x for x in a.network_interfaces.split(",") if x]
    return out


def start(client: Client, a) -> Dict[str, Any]:
    """Creates the cluster for parsed arguments `a` and waits until its ranks start; returns it."""
    python, script, args = split_command(a.command)
    common = dict(args=args, env=None, ssh_port=a.ssh_port, launch=True, timeout_seconds=a.timeout,
                  python=python or _interpreter.for_commands() or "", progress=False, **_options(a))
    if a.hosts:
        workers, slots = workers_for_hosts(client, parse_hosts(a.hosts))
        if a.np != len(workers) * slots:
            raise MusterError("-np %d, but -H gives %d slot(s); muster runs one rank per slot" %
                              (a.np, len(workers) * slots), code="invalid_argument", field="np")
        return _clusters.horovodrun(client, None, script, slots=slots, workers=workers, **common)
    return _clusters.horovodrun(client, a.np, script, slots=1, cpu=a.cpu, memory=a.memory, nvidia_gpu=a.gpu,
                                **common)


def run(client: Client, a, out=sys.stdout, err=sys.stderr) -> int:
    """Starts the job, prints its output until it ends; returns mpirun's exit code."""
    cluster = None
    try:
        try:
            cluster = start(client, a)
        except ClusterFailed as e:  # it ended before it ran: still show what its ranks wrote
            if not (isinstance(e.cluster, dict) and e.cluster.get("id")):
                raise
            cluster = e.cluster
        for line in client.cluster_logs(cluster["id"], follow=True, offset=0):
            out.write(line + "\n")
            out.flush()
        cluster = client.get_cluster(cluster["id"])
        while cluster.get("status") not in _clusters.TERMINAL:  # the log ends a moment before the status
            time.sleep(0.1)
            cluster = client.get_cluster(cluster["id"])
    except KeyboardInterrupt as e:
        if cluster is None:  # during the start: the SDK stopped the cluster (its line says so)
            print(e if isinstance(e, MusterInterrupted) else "horovodrun: interrupted", file=err, flush=True)
            return EXIT_INTERRUPTED
        try:
            client.stop_cluster(cluster["id"])
            what = "stopped cluster %s" % cluster["id"]
        except MusterError as stop_error:
            what = "could not stop cluster %s: %s" % (cluster["id"], stop_error)
        print("horovodrun: interrupted; %s" % what, file=err, flush=True)
        return EXIT_INTERRUPTED
    if cluster.get("status") == "succeeded":
        return 0
    _, text = _clusters.describe_failure(client, cluster)
    print("horovodrun: cluster %s %s: %s" % (cluster["id"], cluster.get("status"), cluster.get("reason")),
          file=err, flush=True)
    tail = text.partition("\n")[2] if cluster.get("failed_rank") else ""
    if tail:
        print(tail, file=err, flush=True)
    code = cluster.get("launcher_exit_code")
    return code if isinstance(code, int) and 0 < code < 256 else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = parser().parse_args(argv)
    try:
        client = Client()
        return run(client, a)
    except KeyboardInterrupt:
        print("horovodrun: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except MusterError as e:
        print("horovodrun: error: %s" % e, file=sys.stderr, flush=True)
        if e.code in ("unavailable", "unconfigured"):
            return EXIT_UNAVAILABLE
        return EXIT_USAGE if e.code == "invalid_argument" else 1


if __name__ == "__main__":
    sys.exit(main())
