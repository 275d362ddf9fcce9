"""bench/multihost/sweep.py: A/B probes of the TCP ring's settings between hosts.

    python3 bench/multihost/sweep.py BUILD OUT.json [NAME=VALUE[,NAME=VALUE...] ...]
    SWEEP_PS_STREAMS=1,2,4 python3 bench/multihost/sweep.py BUILD OUT.json


For 2 and 4 network-namespace hosts (as bench/multihost/run.py), runs
multihost_allreduce_bench once per probe with MULTIHOST_AB set to it, so the
default transport and the probe's run interleaved in one mpirun, plus
iperf3's one-stream link. A development tool: run.py is the benchmark.
"""
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run  # noqa: E402

SIZES = [1 << 20, 16 << 20, 64 << 20]


def main():
    build, out, probes = sys.argv[1], sys.argv[2], sys.argv[3:] or [""]
    tmp = tempfile.mkdtemp(prefix="muster-sweep-")
    result = {"cpus": os.cpu_count(), "hosts": {}, "ps": {}}
    if os.environ.get("SWEEP_PS_STREAMS"):
        # The PS step (run.py's: 1 PS + 2 workers) at each MUSTER_PS_STREAMS.
        with run.NetnsHosts(3, "w") as hosts:
            agg = run.iperf3(hosts, [0, 0], [1, 2])
            for n in os.environ["SWEEP_PS_STREAMS"].split(","):
                os.environ["MUSTER_PS_STREAMS"] = n
                ps = run.ps_step(build, hosts)
                result["ps"][n] = dict(ps, ratio=round(ps["aggregate_gbs"] / agg, 2))
                print("ps streams", n, result["ps"][n], "iperf3 aggregate", round(agg, 3), flush=True)
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
        return
    for p in [int(x) for x in os.environ.get("SWEEP_HOSTS", "2,4").split(",")]:
        with run.NetnsHosts(p, "w") as hosts:
            link = run.iperf3(hosts, [1], [0])
            rows = []
            for probe in probes:
                path = os.path.join(tmp, f"ab{p}.json")
                env = [f"MULTIHOST_AB={probe}"] if probe else []
                run.mpirun(hosts, p, [os.path.join(build, "bin", "multihost_allreduce_bench"), path]
                           + [str(b) for b in SIZES], extra_env=env)
                with open(path) as f:
                    data = json.load(f)
                for s in data["sizes"]:
                    rows.append({"probe": probe or "(mpi links)", "bytes": s["size_bytes"],
                                 "default_gbs": round(s["tcp_gbs"], 3), "probe_gbs": round(s["mpi_links_gbs"], 3),
                                 "mpi_gbs": round(s["mpi_gbs"], 3), "default_cpu": round(s["tcp_cpu_s"], 4),
                                 "probe_cpu": round(s["mpi_links_cpu_s"], 4)})
                    print(p, "hosts", rows[-1], flush=True)
            result["hosts"][str(p)] = {"iperf3_gbs": round(link, 3), "rows": rows}
            print(p, "hosts iperf3", round(link, 3), flush=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
