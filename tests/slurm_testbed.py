"""A real Slurm on this machine, for tests and benchmarks (root only).

    with SlurmTestbed(nodes=2, tag="st") as bed:
        env = bed.env()            # SLURM_CONF for sbatch/squeue/scancel/srun
        bed.node_address("node1")  # "10.216.x.2"

What it starts, all private to one testbed (its own directory, ports, bridge
and names, so several can run side by side):
  - munged on a private socket with the machine's munge key;
  - slurmctld on the host, in its own UTS namespace (hostname <tag>ctl) and
    listening on the bridge address;
  - one slurmd per node, each in its own network namespace (own address on a
    bridge, veth link) and UTS namespace (hostname = the node's name), so
    every node is a host of its own as far as Slurm and the workers see;
  - a generated slurm.conf: select/cons_tres with CR_Core_Memory (so --cpus-
    per-task and --mem are scheduled), proctrack/pgid and task/none (no
    cgroups needed), no accounting daemon, completed jobs kept 10 minutes in
    slurmctld (MinJobAge) so squeue still shows how they ended.
The filesystem is shared (as on the clusters users have: home and project
directories on a shared filesystem).

Everything is torn down in __exit__ (and at interpreter exit), in reverse.
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from netns_hosts import NetnsHosts


def have_slurm() -> str | None:
    """None when a testbed can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, munged, slurmd)"
    for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "ip", "unshare"):
        if not shutil.which(tool):
            return f"{tool} is not installed (scripts/setup.sh installs slurm-wlm, munge, iproute2)"
    if not Path("/etc/munge/munge.key").exists():
        return "/etc/munge/munge.key is missing (the munge package creates it)"
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True)


class SlurmTestbed:
    def __init__(self, nodes: int = 2, tag: str = "st", cpus: int = 2, memory_mb: int = 2048,
                 subnet_octet: int = 216):
        self.tag = tag
        self.n_nodes = nodes
        self.cpus = cpus
        self.memory_mb = memory_mb
        pid = os.getpid()
        self.hosts = NetnsHosts(nodes, "s" + tag, subnet_octet)
        self.nodes = [f"{tag}node{i + 1}" for i in range(nodes)]
        self.ctl_host = f"{tag}ctl"
        self.dir = Path(tempfile.mkdtemp(prefix=f"muster-slurm-{tag}-"))
        self.dir.chmod(0o755)
        self.ctl_port = 20000 + (pid % 20000)
        self.procs: list[subprocess.Popen] = []
        self._up = False

    # -- addresses --------------------------------------------------------
    @property
    def controller_address(self) -> str:
        return self.hosts.gateway

    def node_address(self, node: str) -> str:
        return self.hosts.address(self.nodes.index(node))

    def netns_of(self, node: str) -> str:
        return self.hosts.netns(self.nodes.index(node))

    def env(self) -> dict:
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.dir / "slurm.conf")
        return env

    # -- life cycle -------------------------------------------------------
    def __enter__(self) -> "SlurmTestbed":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        atexit.register(self.stop)
        self.hosts.create()
        self._munge()
        self._write_conf()
        self._slurmctld()
        for node in self.nodes:
            self._slurmd(node)
        self.wait_nodes_idle()
        self._up = True

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 5
        for p in reversed(self.procs):
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        self.procs.clear()
        # Job steps started by slurmd run in the nodes' namespaces: removing
        # the hosts kills what is left there.
        self.hosts.remove()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- pieces -----------------------------------------------------------
    def _spawn(self, argv: list[str], log: str) -> subprocess.Popen:
        out = open(self.dir / log, "ab")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, env=self.env())
        out.close()
        self.procs.append(p)
        return p

    @property
    def munge_socket(self) -> str:
        return str(self.dir / "munge.socket")

    def _munge(self) -> None:
        self._spawn(["munged", "--foreground", "--force", f"--socket={self.munge_socket}",
                     f"--pid-file={self.dir / 'munged.pid'}", f"--seed-file={self.dir / 'munge.seed'}",
                     f"--log-file={self.dir / 'munged.log'}", "--key-file=/etc/munge/munge.key"],
                    "munged.out")
        self._wait(lambda: Path(self.munge_socket).exists(), 10, "munged did not create its socket")

    def _write_conf(self) -> None:
        (self.dir / "spool").mkdir()
        (self.dir / "state").mkdir()
        nodes = "\n".join(
            f"NodeName={n} NodeAddr={self.node_address(n)} NodeHostname={n} CPUs={self.cpus} "
            f"RealMemory={self.memory_mb} State=UNKNOWN" for n in self.nodes)
        conf = f"""# generated by tests/slurm_testbed.py
ClusterName=muster{self.tag}
SlurmctldHost={self.ctl_host}({self.controller_address})
SlurmctldPort={self.ctl_port}
SlurmdPort={self.ctl_port + 1}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={self.dir / 'state'}
SlurmdSpoolDir={self.dir / 'spool'}/%n
SlurmctldPidFile={self.dir / 'slurmctld.pid'}
SlurmdPidFile={self.dir / 'slurmd.%n.pid'}
SlurmctldLogFile={self.dir / 'slurmctld.log'}
SlurmdLogFile={self.dir / 'slurmd.%n.log'}
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=3
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=10
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
LaunchParameters=use_interactive_step
{nodes}
PartitionName=debug Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP
"""
        (self.dir / "slurm.conf").write_text(conf)
        (self.dir / "slurm.conf").chmod(0o644)
        for n in self.nodes:
            (self.dir / "spool" / n).mkdir()

    def _slurmctld(self) -> None:
        self._spawn(["unshare", "--uts", "sh", "-c",
                     f"hostname {self.ctl_host} && exec slurmctld -D -i -f {self.dir / 'slurm.conf'}"],
                    "slurmctld.out")
        self._wait(self._ctl_answers, 20, "slurmctld did not answer")

    def _slurmd(self, node: str) -> None:
        self._spawn(self.hosts.argv(self.nodes.index(node), [
            "unshare", "--uts", "sh", "-c", f"hostname {node} && exec slurmd -D -f {self.dir / 'slurm.conf'}"]),
            f"slurmd.{node}.out")

    def _ctl_answers(self) -> bool:
        r = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, env=self.env())
        return r.returncode == 0 and "UP" in r.stdout

    def node_states(self) -> dict:
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%T"], capture_output=True, text=True, env=self.env())
        states = {}
        for line in r.stdout.split():
            name, _, state = line.partition("|")
            states[name] = state
        return states

    def wait_nodes_idle(self, timeout: float = 30) -> None:
        self._wait(lambda: all(self.node_states().get(n, "").startswith("idle") for n in self.nodes), timeout,
                   "Slurm nodes did not become idle")

    def kill_slurmd(self, node: str) -> None:
        """Kills one node's slurmd (SIGKILL), as a node crash would."""
        i = self.nodes.index(node)
        p = self.procs[2 + i]
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()

    def kill_node(self, node: str) -> None:
        """A node crash: SIGKILL to its slurmd and to everything running on it
        (job steps, agents, scripts: every process in its network namespace)."""
        self.kill_slurmd(node)
        for pid in _run("ip", "netns", "pids", self.netns_of(node), check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass

    def log(self, name: str) -> str:
        try:
            return (self.dir / name).read_text(errors="replace")
        except OSError:
            return ""

    def _wait(self, cond, timeout: float, what: str) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if cond():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{what} within {timeout} s; logs in {self.dir}:\n"
                           + self.log("slurmctld.log")[-3000:] + self.log("slurmctld.out")[-2000:]
                           + "".join(self.log(f"slurmd.{n}.log")[-1500:] for n in self.nodes))


if __name__ == "__main__":  # manual smoke: python3 tests/slurm_testbed.py
    why = have_slurm()
    if why:
        raise SystemExit(f"skip: {why}")
    with SlurmTestbed() as bed:
        print(bed.node_states())
        r = subprocess.run(["srun", "-N2", "hostname"], capture_output=True, text=True, env=bed.env(), timeout=60)
        print(r.returncode, r.stdout, r.stderr)
        r = subprocess.run(["sbatch", "--parsable", "--wrap", "hostname -I; sleep 1", "-o", str(bed.dir / "j.out")],
                           capture_output=True, text=True, env=bed.env())
        print(r.returncode, r.stdout, r.stderr)
        time.sleep(4)
        print(subprocess.run(["squeue", "--states=all", "-h", "-o", "%i|%T|%r|%N|%j"], capture_output=True, text=True,
                             env=bed.env()).stdout)
        print((bed.dir / "j.out").read_text() if (bed.dir / "j.out").exists() else "no output")
