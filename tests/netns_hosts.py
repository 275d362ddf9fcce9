"""Hosts of our own on one machine: network namespaces on a bridge (root).

    with NetnsHosts(n=2, tag="mh") as hosts:
        hosts.address(0)                      # "10.217.x.2"
        hosts.run(0, ["iperf3", "-s", "-1"])  # a process inside host 0
        hosts.rsh_agent()                     # mpirun's plm_rsh_agent into the hosts

Each host is a network namespace with a veth link onto a private bridge and
its own address; the bridge (in the machine's namespace) has .1 and routes
between them, so traffic between hosts crosses two veth links and the bridge
as it would cross a switch. The filesystem, processes and CPUs are shared.
Names carry the tag and this process's pid, so several sets can coexist;
everything is removed in __exit__ (and at interpreter exit).
"""
from __future__ import annotations

import atexit
import itertools
import os
import signal
import subprocess
import tempfile
from pathlib import Path


# Each set gets its own names even within one process: a kernel may still be
# tearing down the last set's links when the next one is made.
_SETS = itertools.count()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


class NetnsHosts:
    def __init__(self, n: int, tag: str, subnet_octet: int = 217):
        pid = os.getpid()
        self.n = n
        self.tag = tag
        name = f"mh{tag}{pid % 10000}s{next(_SETS) % 10}"
        self.bridge = name
        self.prefix = f"10.{subnet_octet}.{pid % 200}."
        self.namespaces = [f"{name}n{i + 1}" for i in range(n)]
        self._made: list[str] = []
        self._dir = Path(tempfile.mkdtemp(prefix=f"muster-netns-{tag}-"))

    @property
    def gateway(self) -> str:
        return self.prefix + "1"

    def address(self, i: int) -> str:
        return self.prefix + str(i + 2)

    def netns(self, i: int) -> str:
        return self.namespaces[i]

    def __enter__(self) -> "NetnsHosts":
        try:
            self.create()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def create(self) -> None:
        atexit.register(self.remove)
        _ip("link", "add", self.bridge, "type", "bridge")
        self._made.append("bridge")
        _ip("addr", "add", self.gateway + "/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.namespaces):
            host_end, ns_end = ns + "h", ns + "c"
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            _ip("link", "set", ns_end, "netns", ns)
            _ip("link", "set", host_end, "master", self.bridge)
            _ip("link", "set", host_end, "up")
            _ip("-n", ns, "addr", "add", self.address(i) + "/24", "dev", ns_end)
            _ip("-n", ns, "link", "set", ns_end, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "route", "add", "default", "via", self.gateway)

    def remove(self) -> None:
        for ns in self.namespaces:
            if ns not in self._made:
                continue
            for pid in _ip("netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            _ip("netns", "del", ns, check=False)
        if "bridge" in self._made:
            _ip("link", "del", self.bridge, check=False)
        self._made.clear()

    def argv(self, i: int, argv: list[str]) -> list[str]:
        """argv run inside host i's network namespace. nsenter, not `ip netns
        exec`: the latter remounts /sys, which hides the machine's cgroups."""
        return ["nsenter", f"--net=/var/run/netns/{self.netns(i)}", *argv]

    def run(self, i: int, argv: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.argv(i, argv), **kw)

    def rsh_agent(self) -> str:
        """A program for mpirun's -mca plm_rsh_agent: `agent [ssh opts] HOST CMD...`
        runs CMD in the namespace whose address is HOST, under a hostname of
        its own (the namespace's name): Open MPI's daemons tell nodes apart by
        the hostname they report, and with the machine's one name ORTE now and
        then failed to route between them ("does not know how to route")."""
        path = self._dir / "netns-rsh"
        if not path.exists():
            cases = "\n".join(f"  {self.address(i)}) ns={ns} ;;" for i, ns in enumerate(self.namespaces))
            path.write_text(f"""#!/bin/sh
while [ $# -gt 0 ]; do case $1 in -p|-i|-l|-o) shift 2 ;; -*) shift ;; *) break ;; esac; done
host=$1; shift
case $host in
{cases}
  *) echo "netns-rsh: unknown host $host" >&2; exit 255 ;;
esac
exec nsenter --net=/var/run/netns/$ns unshare --uts /bin/sh -c "hostname $ns; $*"
""")
            path.chmod(0o755)
        return str(path)
