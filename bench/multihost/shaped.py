"""bench/multihost/shaped.py: allreduce on links of a known rate and round trip (root only).

    python3 bench/multihost/shaped.py BUILD OUT_DIR      (writes OUT_DIR/shaped.{json,md})

The hosts of bench/multihost (network namespaces on veth links, one rank
each), with every host's link shaped (shaping.py: tbf both ways, a delay
line for the round trip) to 1 and 5 Gbit/s, with 0 and 200 us added round
trip, on 2 and 4 hosts, and once unshaped as the machine's own ceiling. For
each, in one pass:
  - hop_ping between hosts 0 and 1: the link's round trip, its one-way hop
    (half of it) and the ring's latency floor, 2 (p-1) hops;
  - iperf3, one stream host 0 -> host 1: the floor check that the shaping
    holds (and what a TCP stream gets of the rate: 1448 payload bytes of
    every 1514 on the wire at most, 0.956x);
  - iperf3, p streams at once in a ring (host i -> host i+1, so every host
    sends one and receives one, as the ring allreduce does): what each link
    gets when all of them run together on the shared cores, the ceiling a
    ring of any library meets on this machine;
  - multihost_allreduce_bench under mpirun: muster's ring over its TCP
    transport and MPI_Allreduce (Open MPI, tcp btl), interleaved, at 8 B
    (muster's default path for a small op) and 256 KB .. 64 MB;
  - gloo (torch.distributed) at the same sizes.
Bus bandwidth is algbw x 2 (p-1)/p, the bytes each host's link carries each
way per second, so it reads directly against the link's rate.

SHAPED_QUICK=1: 8 B, 16 and 64 MB, 3 reps (a few minutes). SHAPED_HOSTS,
SHAPED_RATES, SHAPED_RTTS (comma lists) pick configurations; SHAPED_AB=
NAME=VALUE[,...] adds a column: muster's ring created with those variables
(multihost_allreduce_bench's MULTIHOST_AB), for finding where the link goes.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run  # noqa: E402  (bench/multihost/run.py: NetnsHosts, mpirun, iperf3)
from shaping import ShapedLinks  # noqa: E402

QUICK = os.environ.get("SHAPED_QUICK") == "1"
SIZES = [8, 16 << 20, 64 << 20] if QUICK else [8, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
REPS = 3 if QUICK else 5
TARGET_FRACTION, TARGET_HOPS = 0.9, 1.5


def env_list(name, default, kind=int):
    v = os.environ.get(name)
    return [kind(x) for x in v.split(",")] if v else default


def hop(build, hosts):
    """Round trip host 0 <-> host 1 of an 8-byte UDP datagram (hop_ping), microseconds."""
    port = str(17300 + os.getpid() % 500)
    server = hosts.run(1, [os.path.join(build, "bin", "hop_ping"), "serve", port])
    try:
        time.sleep(0.2)
        out = subprocess.run(hosts.argv(0, [os.path.join(build, "bin", "hop_ping"), hosts.address(1), port, "300"]),
                             capture_output=True, text=True, timeout=120, check=True).stdout
        return json.loads(out)["rtt_us"]
    finally:
        server.kill()
        server.wait()


def allreduce(build, hosts, p, tmp, ab):
    out = os.path.join(tmp, f"shaped{p}.json")
    # mpirun -x NAME passes this process's value on to every rank.
    os.environ.update(MULTIHOST_REPS=str(REPS), MULTIHOST_AB=ab, MULTIHOST_SKIP_SECOND="0" if ab else "1")
    run.mpirun(hosts, p, [os.path.join(build, "bin", "multihost_allreduce_bench"), out] + [str(b) for b in SIZES],
               extra_env=["MULTIHOST_REPS", "MULTIHOST_AB", "MULTIHOST_SKIP_SECOND"])
    with open(out) as f:
        data = json.load(f)
    return data["transport"], {s["size_bytes"]: s for s in data["sizes"]}


def gloo(hosts, p, tmp):
    os.environ["GLOO_REPS"] = str(REPS)
    saved, run.SIZES = run.SIZES, SIZES
    try:
        return run.gloo(hosts, p, tmp)  # {bytes: (algbw GB/s, cpu s)}
    finally:
        run.SIZES = saved


def measure(build, hosts, p, rate, rtt, tmp, ab):
    rtt_us = hop(build, hosts)
    link = run.iperf3(hosts, [1], [0], seconds=3)
    ring = run.iperf3(hosts, [(i + 1) % p for i in range(p)], list(range(p)), seconds=3) / p
    transport, ours = allreduce(build, hosts, p, tmp, ab)
    theirs = gloo(hosts, p, tmp)
    steps = 2 * (p - 1) / p
    # What the figures are read against: the shaped rate, or, unshaped,
    # what one iperf3 stream got (the machine's own ceiling for one link).
    ref = rate / 8 if rate else link
    one_way = rtt_us["median"] / 2
    floor_us = 2 * (p - 1) * one_way
    sizes = {}
    for b in SIZES:
        x = ours[b]
        g = theirs[b][0]
        row = {"muster_busbw_gbs": x["tcp_gbs"] * steps, "mpi_busbw_gbs": x["mpi_gbs"] * steps,
               "gloo_busbw_gbs": g * steps, "muster_us": x["tcp_us"], "mpi_us": x["mpi_us"], "gloo_us": b / g / 1e3,
               "cpu_s_per_op": {"muster": x["tcp_cpu_s"], "mpi": x["mpi_cpu_s"], "gloo": theirs[b][1]}}
        if ab:
            row["probe_busbw_gbs"] = x["mpi_links_gbs"] * steps
        for k in ("muster", "mpi", "gloo") + (("probe",) if ab else ()):
            row[k + "_fraction"] = row[k + "_busbw_gbs"] / ref
        row = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
        row["cpu_s_per_op"] = {k: round(v, 4) for k, v in row["cpu_s_per_op"].items()}
        sizes[str(b)] = row
    small = sizes[str(SIZES[0])]
    return {"hosts": p, "rate_gbit": rate, "rtt_us_added": rtt, "transport": transport,
            "ping_rtt_us": rtt_us, "one_way_hop_us": round(one_way, 1), "ring_floor_us": round(floor_us, 1),
            "iperf3_gbs": round(link, 4), "iperf3_fraction": round(link / ref, 3) if rate else 1.0,
            "iperf3_ring_gbs": round(ring, 4), "iperf3_ring_fraction": round(ring / ref, 3),
            "reference_gbs": round(ref, 4), "sizes": sizes,
            "small_vs_floor": {k: round(small[k + "_us"] / floor_us, 2) for k in ("muster", "mpi", "gloo")}}


def main():
    build, out_dir = sys.argv[1], sys.argv[2]
    if os.geteuid() != 0:
        raise SystemExit("bench/multihost/shaped.py needs root (network namespaces, tc)")
    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="muster-shaped-")
    ab = os.environ.get("SHAPED_AB", "")
    name = os.environ.get("SHAPED_NAME", "shaped")
    delay_line = os.path.join(build, "bin", "delay_line")
    result = {"cpus": os.cpu_count(), "load_before": [round(x, 2) for x in os.getloadavg()],
              "uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
              "quick": QUICK, "reps": REPS, "probe": ab, "configs": [],
              "targets": {"fraction_of_rate": TARGET_FRACTION, "small_vs_ring_floor": TARGET_HOPS}}
    rates = env_list("SHAPED_RATES", [0, 1, 5], float)
    rtts = env_list("SHAPED_RTTS", [0, 200])
    for p in env_list("SHAPED_HOSTS", [2, 4]):
        with run.NetnsHosts(p, "sp") as hosts:
            for rate in rates:
                for rtt in ([0] if not rate else rtts):
                    with ShapedLinks(hosts, rate or None, rtt, delay_line):
                        t0 = time.time()
                        c = measure(build, hosts, p, rate or None, rtt, tmp, ab)
                        c["seconds"] = round(time.time() - t0, 1)
                        c["load"] = [round(x, 2) for x in os.getloadavg()]
                    result["configs"].append(c)
                    print(json.dumps({k: c[k] for k in ("hosts", "rate_gbit", "rtt_us_added", "one_way_hop_us",
                                                         "iperf3_fraction", "iperf3_ring_fraction", "small_vs_floor", "seconds", "load")}),
                          {b: (x["muster_fraction"], x["mpi_fraction"], x["gloo_fraction"])
                           for b, x in c["sizes"].items()}, flush=True)
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    result["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    from shaped_report import report  # noqa: E402
    with open(os.path.join(out_dir, name + ".md"), "w") as f:
        f.write(report(result))
    print(report(result))


if __name__ == "__main__":
    main()
