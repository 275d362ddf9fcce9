#!/usr/bin/env python3
"""bench/kubernetes: musterd --backend kubernetes on the real testbed (tests/kubernetes_testbed.py).

  usage: kubernetes_bench.py <out.json> [--sizes 8,32,64] [--runs 3]

1. Launch + await of N workers through musterd (launch_workers, then
   await_workers until every agent has registered from its pod), against the
   floor measured in the same run: the same N pods (same image, requests =
   limits, hostPath mounts) created straight through the API server over
   REST (python urllib, the testbed's token) and waited for until every one
   is Running. Medians over --runs per size.
2. An elastic cluster of 2 pods: one pod deleted through the API server, and
   the time until its replacement worker is running (agent registered).
The testbed has two nodes of 2 CPUs; requests are sized (cpu 0.05, 64 MiB)
so that 64 pods fit both nodes at once.
"""
import argparse
import json
import os
import ssl
import statistics
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))

from kubernetes_testbed import KubernetesTestbed, have_kubernetes  # noqa: E402
from sdk_daemon import Daemon, binary_dir  # noqa: E402

CPU, MEMORY = 0.05, 0.0625
SLEEPER = "import time\ntime.sleep(3600)"


class Rest:
    """The API server over HTTPS with the testbed's CA and token."""

    def __init__(self, bed):
        self.base = bed.api_server.rstrip("/")
        self.ctx = ssl.create_default_context(cafile=bed.ca_file)
        with open(bed.token_file) as f:
            self.token = f.read().strip()
        self.ns = bed.namespace

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Authorization": "Bearer " + self.token,
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=self.ctx, timeout=60) as resp:
            return json.loads(resp.read() or b"{}")

    def pods(self, selector):
        return self.call("GET", f"/api/v1/namespaces/{self.ns}/pods?labelSelector={selector}")["items"]

    def delete_all(self, selector, timeout=180):
        self.call("DELETE", f"/api/v1/namespaces/{self.ns}/pods?labelSelector={selector}&gracePeriodSeconds=0")
        deadline = time.monotonic() + timeout
        while self.pods(selector) and time.monotonic() < deadline:
            time.sleep(0.5)


def floor(bed, rest, n, run):
    """Seconds from the first create to every one of n pods Running."""
    label = {"bench-floor": "%d-%d" % (n, run)}
    sel = "bench-floor=%d-%d" % (n, run)
    manifests = [bed.pod_manifest("floor-%d-%d-%d" % (n, run, i), ["/usr/bin/sleep", "3600"],
                                  cpu="%dm" % int(CPU * 1000), memory="%dMi" % int(MEMORY * 1024), labels=label)
                 for i in range(n)]
    t0 = time.monotonic()
    for m in manifests:
        rest.call("POST", f"/api/v1/namespaces/{rest.ns}/pods", m)
    while True:
        got = rest.pods(sel)
        if sum(p.get("status", {}).get("phase") == "Running" for p in got) == n:
            break
        if time.monotonic() - t0 > 600:
            raise RuntimeError("floor: %d pods not running within 600 s" % n)
        time.sleep(0.1)
    took = time.monotonic() - t0
    rest.delete_all(sel)
    return took


def through_musterd(daemon, rest, n):
    c = daemon.client()
    t0 = time.monotonic()
    ws = c.launch_workers(n=n, cpu=CPU, memory=MEMORY, code=SLEEPER)
    up = c.await_workers(ws, wait_for_completion=False, timeout_seconds=600)
    took = time.monotonic() - t0
    assert not up["failures"], [(f["status"], f["reason"]) for f in up["failures"]][:3]
    c.stop_workers(*ws)
    rest.delete_all("muster.io/daemon")
    return took


def elastic_replacement(daemon, rest, bed, runs):
    c = daemon.client()
    cluster = c.create_cluster(mode="elastic", n_workers=2, min_np=1, max_np=2, cpu=0.25, memory=0.25,
                               worker_script="sleeper.py", timeout_seconds=600)
    cid = cluster["id"]
    out = []

    def running_workers():
        cl = c.get_cluster(cid)
        ids = [w for g in cl["workers"].values() for w in g]
        return {w for w in ids if c.get_worker(w)["status"] == "running"}

    deadline = time.monotonic() + 300
    while len(running_workers()) < 2:
        if time.monotonic() > deadline:
            raise RuntimeError("elastic cluster not running: %s" % c.get_cluster(cid))
        time.sleep(0.2)
    for _ in range(runs):
        before = running_workers()
        victim = sorted(before)[0]
        [pod] = rest.pods("muster.io/worker=" + victim)
        t0 = time.monotonic()
        rest.call("DELETE", f"/api/v1/namespaces/{rest.ns}/pods/{pod['metadata']['name']}?gracePeriodSeconds=0")
        while True:
            now = running_workers()
            if len(now - before) >= 1 and victim not in now:
                break
            if time.monotonic() - t0 > 120:
                raise RuntimeError("no replacement within 120 s: %s" % c.get_cluster(cid))
            time.sleep(0.05)
        out.append(time.monotonic() - t0)
    c.stop_cluster(cid)
    rest.delete_all("muster.io/daemon")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--sizes", default="8,32,64")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    why = have_kubernetes()
    if why:
        raise SystemExit("bench/kubernetes: the testbed cannot run here: " + why)
    sizes = [int(s) for s in args.sizes.split(",")]
    load = [os.getloadavg()[0]]
    t_bed = time.monotonic()
    with KubernetesTestbed(nodes=2, tag="kb", cpus=2, memory_mb=6144, subnet_octet=221) as bed:
        bed_seconds = time.monotonic() - t_bed
        project = os.path.join(bed.dir, "project")
        os.makedirs(project)
        os.chmod(project, 0o755)
        with open(os.path.join(project, "sleeper.py"), "w") as f:
            f.write(SLEEPER + "\n")
        mounts = sorted({"/usr", os.path.realpath(binary_dir()), ROOT})
        bed.host_mounts = [(m, m, True) for m in mounts]
        extra = bed.musterd_backend_args(mounts)
        extra += ["--startup-timeout", "600", "--heartbeat-timeout", "120", "--max-workers", "1024"]
        daemon = Daemon(project, os.path.join(bed.dir, "state"), listen=f"{bed.host_address}:0", backend="kubernetes",
                        unset_env=("PYTHONPATH", "MUSTER_RUNTIME_PATH", "MUSTER_BINARY_DIR"), extra_args=extra)
        daemon.start(timeout=60)
        rest = Rest(bed)
        result = {"sizes": {}, "cpu": CPU, "memory_gib": MEMORY, "nodes": 2, "node_cpus": 2,
                  "testbed_seconds": bed_seconds}
        try:
            for n in sizes:
                runs = args.runs if n <= 32 else max(1, args.runs - 2)
                m, f = [], []
                for r in range(runs):  # interleaved, so both see the same load
                    f.append(floor(bed, rest, n, r))
                    m.append(through_musterd(daemon, rest, n))
                    print("n=%d run %d: floor %.2f s, musterd %.2f s" % (n, r, f[-1], m[-1]), flush=True)
                result["sizes"][str(n)] = {"musterd": m, "floor": f, "musterd_median": statistics.median(m),
                                           "floor_median": statistics.median(f),
                                           "ratio": statistics.median(m) / statistics.median(f)}
            rep = elastic_replacement(daemon, rest, bed, args.runs)
            result["replacement"] = {"runs": rep, "median": statistics.median(rep)}
            print("replacement: %s" % ", ".join("%.2f" % x for x in rep), flush=True)
        finally:
            daemon.stop()
    load.append(os.getloadavg()[0])
    result["load"] = load
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
