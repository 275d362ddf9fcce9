"""Links of a given rate and round-trip time for NetnsHosts (root).

    with NetnsHosts(2, "sh") as hosts, ShapedLinks(hosts, rate_gbit=1, rtt_us=200, delay_line=path):
        ...  # every host's link: 1 Gbit/s each way, 200 us more round trip

Each host's link behaves like a NIC of that rate on a switch:
  - rate: a tbf on both ends of the host's veth, the namespace's end (what the
    host sends) and the bridge's end (what it receives), so a host can neither
    send nor receive faster than the rate, whatever the number of peers.
    burst: max(128 KB, 400 us of the rate). TCP hands the veth 64 KB GSO
    packets, and a bucket smaller than one packet drops them (64 KB: 0.82x of
    1 Gbit/s and 0.49x of 5 Gbit/s for one iperf3 stream, with
    retransmissions; 128 KB and more: 0.955x and 0.89-0.92x, none). limit
    (the queue): 5 ms of the rate, so a standing queue never drops what a ring's
    streams put in flight.
  - delay: this kernel has no sch_netem, so each host's incoming packets are
    held rtt/2 by bench/multihost/delay_line (an NFQUEUE rule in the raw
    table's PREROUTING on the host's end of the veth); a packet from A to B
    is held once, at B, so each round trip between two hosts gains rtt.
    Measure the hop it gives (hop_ping): the delay comes on top of the
    stack's own cost and of this machine's wake-up jitter.

What it adds is removed on exit (qdiscs, rules, delay lines); NetnsHosts'
own removal would take it all with the namespaces anyway.
"""
from __future__ import annotations

import subprocess
import time


def _run(argv: list[str], check: bool = True) -> None:
    r = subprocess.run(argv, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {r.stderr.strip()}")


def tbf_args(rate_gbit: float) -> list[str]:
    bytes_per_s = rate_gbit * 1e9 / 8
    burst = max(128 << 10, int(bytes_per_s * 400e-6))
    limit = int(bytes_per_s * 5e-3) + burst
    return ["tbf", "rate", f"{int(rate_gbit * 1000)}mbit", "burst", str(burst), "limit", str(limit)]


class ShapedLinks:
    def __init__(self, hosts, rate_gbit: float | None, rtt_us: int, delay_line: str):
        self.hosts = hosts
        self.rate_gbit = rate_gbit
        self.rtt_us = rtt_us
        self.delay_line = delay_line
        self._lines: list[subprocess.Popen] = []
        self._rules: list[int] = []
        self._qdiscs: list[int] = []

    def _rule(self, i: int, op: str) -> list[str]:
        ns = self.hosts.netns(i)
        return self.hosts.argv(i, ["iptables", "-t", "raw", op, "PREROUTING", "-i", ns + "c", "-j", "NFQUEUE",
                                   "--queue-num", "0", "--queue-bypass"])

    def __enter__(self) -> "ShapedLinks":
        try:
            for i in range(self.hosts.n):
                ns = self.hosts.netns(i)
                if self.rate_gbit:
                    self._qdiscs.append(i)
                    _run(["tc", "-n", ns, "qdisc", "replace", "dev", ns + "c", "root"] + tbf_args(self.rate_gbit))
                    _run(["tc", "qdisc", "replace", "dev", ns + "h", "root"] + tbf_args(self.rate_gbit))
                if self.rtt_us:
                    self._lines.append(self.hosts.run(i, [self.delay_line, "0", str(self.rtt_us // 2)],
                                                      stderr=subprocess.DEVNULL))
                    self._rules.append(i)
                    _run(self._rule(i, "-A"))
            time.sleep(0.2)  # the delay lines bound their queues
            for p in self._lines:
                if p.poll() is not None:
                    raise RuntimeError(f"delay_line exited with {p.returncode} (root? NFQUEUE in this kernel?)")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for i in self._rules:
            _run(self._rule(i, "-D"), check=False)
        for p in self._lines:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for i in self._qdiscs:
            ns = self.hosts.netns(i)
            _run(["tc", "-n", ns, "qdisc", "del", "dev", ns + "c", "root"], check=False)
            _run(["tc", "qdisc", "del", "dev", ns + "h", "root"], check=False)
        self._lines, self._rules, self._qdiscs = [], [], []
