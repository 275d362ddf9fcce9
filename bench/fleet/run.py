#!/usr/bin/env python3
"""bench/fleet: one unmodified musterd against a simulated fleet.

For each fleet size N it starts fleet-musterd (musterd's own main with the
"fleet" backend, which starts nothing) and a few fleet_agents processes that
speak the real agent protocol for every worker, launches N workers through
the REST API in launches of 1,000, waits until every agent has registered,
and then measures:

- idle: musterd's CPU (utime+stime over the window, from /proc) and RSS;
  heartbeat latency p50/p99 as the agents saw it; late heartbeats (the
  daemon's own muster_heartbeat_interval_seconds: gaps over 1.5 intervals);
  workers wrongly lost (listed `lost` although their agent never stopped);
- under that idle load: a paged list (limit=100), a GET of one worker,
  /metrics (size and time), and the dashboard's event stream (time to its
  whole snapshot, and from a stop to that worker's event);
- a wave of 1,000 registrations at once (launch to the last agent
  registered), and a stop of all workers (the stop call, and until every
  worker is stopped).

Writes bench/out/fleet.json; bench/report.py renders it into RESULTS.md.
"""
import argparse
import http.client
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def percentile(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def raise_file_limit(want):
    """Raises this process's open-files limit (children inherit it) to `want`, or as far as the hard limit
    goes; returns the soft limit it got."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(want, hard)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def load_average():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


class Daemon:
    """fleet-musterd in a fresh state dir, and a keep-alive user connection to it."""

    def __init__(self, build, workdir, n, interval_s, agent_procs, heartbeat_rate):
        self.state = os.path.join(workdir, "state")
        self.socket = os.path.join(workdir, "fleet.sock")
        os.makedirs(self.state)
        self.log = open(os.path.join(workdir, "musterd.log"), "w")
        # As many connections as the open-files limit allows (musterd raises
        # its soft limit to the hard one; on this machine the hard limit is
        # 20,000 and cannot be raised), less room for its other files.
        self.file_limit = raise_file_limit(4 * n + 4096)
        self.max_connections = self.file_limit - 1024
        self.proc = subprocess.Popen(
            [os.path.join(build, "bin", "fleet-musterd"), "--listen", "127.0.0.1:0", "--project-dir", REPO,
             "--state-dir", self.state, "--backend", "fleet", "--backend-opt", "socket=" + self.socket,
             "--max-workers", "1000", "--max-live-workers", str(n + 2000),
             "--max-finished-workers", str(n + 2000), "--http-max-connections", str(self.max_connections),
             "--heartbeat-interval", str(interval_s), "--heartbeat-rate", str(heartbeat_rate),
             "--log-level", "warn"],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise SystemExit("fleet-musterd did not start: %r (see %s)" % (line, self.log.name))
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        self.url = line.split("listening on", 1)[1].strip()
        self.port = int(self.url.rsplit(":", 1)[1])
        with open(os.path.join(self.state, "token")) as f:
            self.token = f.read().strip()
        self.agents = []
        for k in range(agent_procs):
            sources = []
            for s in range(4):
                sources += ["--source", "127.0.%d.%d" % (10 + k, 2 + s)]
            p = subprocess.Popen([os.path.join(build, "bin", "fleet_agents"), "--socket", self.socket, "--port",
                                  str(self.port), "--interval-ms", str(int(interval_s * 1000))] + sources,
                                 stdout=subprocess.PIPE, text=True)
            if json.loads(p.stdout.readline()).get("ready") is not True:
                raise SystemExit("fleet_agents did not start")
            self.agents.append(p)
        time.sleep(0.5)  # the backend accepts them on its own thread
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def request(self, method, path, body=None):
        headers = {"Authorization": "Bearer " + self.token}
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        for attempt in range(2):
            try:
                self.conn.request(method, path, data, headers)
                r = self.conn.getresponse()
                payload = r.read()
                return r.status, payload
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                if attempt:
                    raise

    def json(self, method, path, body=None):
        status, payload = self.request(method, path, body)
        if status >= 300:
            raise SystemExit("%s %s: %d %s" % (method, path, status, payload[:300]))
        return json.loads(payload)

    def cpu_seconds(self):
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK

    def rss_mb(self):
        with open("/proc/%d/statm" % self.proc.pid) as f:
            return int(f.read().split()[1]) * PAGE / 2**20

    def agent_stats(self):
        """What every agent process saw since the last call, merged (latencies: the worst process's)."""
        for p in self.agents:
            p.send_signal(signal.SIGUSR1)
        merged = {"agents": 0, "registered": 0, "exited": 0, "errors": 0, "queued_heartbeats": 0,
                  "stale_connections": 0, "reconnects": 0}
        counters = list(merged)
        for p in self.agents:
            s = json.loads(p.stdout.readline())
            for k in counters:
                merged[k] += s[k]
            for kind in ("register", "heartbeat", "exit"):
                m = merged.setdefault(kind, {"count": 0, "status": {}})
                m["count"] += s[kind]["count"]
                for code, c in s[kind].get("status", {}).items():
                    m["status"][code] = m["status"].get(code, 0) + c
                for q in ("p50_ms", "p99_ms", "max_ms"):
                    if q in s[kind]:
                        m[q] = max(m.get(q, 0), s[kind][q])
        return merged

    def statuses(self):
        """Every worker's status, counted, through the paged list."""
        counts, token = {}, None
        while True:
            page = self.json("GET", "/api/v1/workers?limit=1000" + ("&page_token=" + token if token else ""))
            for w in page["workers"]:
                counts[w["status"]] = counts.get(w["status"], 0) + 1
            token = page.get("next_page_token")
            if not token:
                return counts

    def metric(self, text, name):
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def heartbeats(self):
        """(late, all, assigned interval s) from the daemon's own /metrics: a heartbeat is late when it came
        more than 1.5 times the interval that worker was told after its previous one."""
        status, text = self.request("GET", "/metrics")
        text = text.decode()
        return (self.metric(text, "muster_heartbeats_late_total") or 0,
                self.metric(text, "muster_heartbeat_interval_seconds_count") or 0,
                self.metric(text, "muster_heartbeat_assigned_interval_seconds"))

    def close(self):
        for p in self.agents:
            p.terminate()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        for p in self.agents:
            p.wait()
        self.log.close()


def launch(d, n):
    ids = []
    while len(ids) < n:
        k = min(1000, n - len(ids))
        answer = d.json("POST", "/api/v1/workers", {"n": k, "script": "bench/launch/sleep.py", "cpu": 0.001,
                                                    "memory": 0.001})
        ids += [w["id"] for w in answer["workers"]]
    return ids


def wait_running(d, n, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        counts = d.statuses()
        if counts.get("running", 0) >= n:
            return counts
        time.sleep(0.5)
    return d.statuses()


def timed(fn, repeats):
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    return {"p50_ms": percentile(samples, 0.5), "p99_ms": percentile(samples, 0.99), "max_ms": max(samples),
            "count": repeats}


def event_stream(d, stop_id):
    """(ms to the whole snapshot, ms from stopping `stop_id` to its worker event)."""
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=120)
    t0 = time.perf_counter()
    conn.request("GET", "/api/v1/events", headers={"Authorization": "Bearer " + d.token})
    r = conn.getresponse()
    snapshot_ms = None
    event = None
    t_stop = None
    while True:
        line = r.fp.readline()
        if not line:
            break
        line = line.decode().rstrip("\n")
        if line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:"):
            data = json.loads(line.split(":", 1)[1])
            if event == "snapshot" and data.get("complete") and snapshot_ms is None:
                snapshot_ms = (time.perf_counter() - t0) * 1000
                t_stop = time.perf_counter()
                d.json("POST", "/api/v1/workers/stop", {"ids": [stop_id]})
            elif event == "worker" and t_stop and data.get("id") == stop_id:
                conn.close()
                return snapshot_ms, (time.perf_counter() - t_stop) * 1000
    conn.close()
    return snapshot_ms, None


def run_size(build, n, args, heartbeat_rate):
    workdir = tempfile.mkdtemp(prefix="muster-fleet-%d." % n)
    d = Daemon(build, workdir, n, args.interval, args.agent_procs, heartbeat_rate)
    result = {"workers": n, "heartbeat_interval_s": args.interval, "heartbeat_rate": heartbeat_rate,
              "agent_processes": args.agent_procs, "file_limit": d.file_limit,
              "max_connections": d.max_connections}
    try:
        t = time.time()
        ids = launch(d, n)
        counts = wait_running(d, n, timeout=120 + n / 50)
        result["start_s"] = round(time.time() - t, 2)
        result["started"] = counts
        if counts.get("running", 0) < n:
            result["error"] = "only %d of %d workers running" % (counts.get("running", 0), n)
            return result
        _, _, assigned = d.heartbeats()
        assigned = assigned or args.interval
        result["assigned_interval_s"] = assigned
        result["loss_timeout_s"] = round(10.0 * max(1.0, assigned / args.interval), 1)  # musterd's default 10 s
        time.sleep(2 * assigned)  # every agent past its first heartbeat at the interval it was told
        d.agent_stats()
        late0, all0, _ = d.heartbeats()
        cpu0, t0 = d.cpu_seconds(), time.time()
        time.sleep(max(args.window, 3 * assigned))
        cpu1, t1 = d.cpu_seconds(), time.time()
        hb = d.agent_stats()
        late1, all1, _ = d.heartbeats()
        counts = d.statuses()
        result["idle"] = {
            "window_s": round(t1 - t0, 1),
            "cpu_core_fraction": round((cpu1 - cpu0) / (t1 - t0), 4),
            "rss_mb": round(d.rss_mb(), 1),
            "heartbeat": hb["heartbeat"],
            "heartbeats_late": int(late1 - late0),
            "heartbeats_seen_by_daemon": int(all1 - all0),
            "agent_errors": hb["errors"],
            "agent_reconnects": hb["reconnects"],
            "agent_stale_connections": hb["stale_connections"],
            "statuses": counts,
            "wrongly_lost": counts.get("lost", 0),
        }
        # Under that idle load: what users ask.
        page_ids = []

        def paged():
            page = d.json("GET", "/api/v1/workers?limit=100" + ("&page_token=" + page_ids[-1] if page_ids else ""))
            if page.get("next_page_token"):
                page_ids.append(page["next_page_token"])
        result["paged_list"] = timed(paged, 50)
        result["get_worker"] = timed(lambda: d.json("GET", "/api/v1/workers/" + ids[n // 2]), 50)
        sizes = []

        def metrics():
            status, text = d.request("GET", "/metrics")
            sizes.append(len(text))
        result["metrics"] = timed(metrics, 10)
        result["metrics"]["bytes"] = max(sizes)
        snapshot_ms, event_ms = event_stream(d, ids[0])
        result["event_stream"] = {"snapshot_ms": snapshot_ms, "stop_to_event_ms": event_ms}
        d.agent_stats()
        # A wave of 1,000 registrations at once.
        t = time.time()
        launch(d, 1000)
        counts = wait_running(d, n - 1 + 1000, timeout=120)
        wave_s = time.time() - t
        stats = d.agent_stats()
        result["wave_1000"] = {"launch_to_all_running_s": round(wave_s, 2), "register": stats["register"],
                               "heartbeat": stats["heartbeat"], "running": counts.get("running", 0)}
        # Stop them all.
        t = time.time()
        d.json("POST", "/api/v1/workers/stop", {"ids": []})
        stop_call = time.time() - t
        deadline = time.time() + 120 + n / 100
        while time.time() < deadline:
            counts = d.statuses()
            if counts.get("running", 0) == 0 and counts.get("starting", 0) == 0:
                break
            time.sleep(0.5)
        result["stop_all"] = {"call_s": round(stop_call, 2), "all_stopped_s": round(time.time() - t, 2),
                              "statuses": counts}
    finally:
        d.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return result


TARGETS = {
    10000: [("idle CPU (of one core)", lambda r: r["idle"]["cpu_core_fraction"], 0.25, "{:.1%}"),
            ("idle RSS, MB", lambda r: r["idle"]["rss_mb"], 500, "{:.0f}"),
            ("heartbeat p99, ms", lambda r: r["idle"]["heartbeat"]["p99_ms"], 50, "{:.1f}"),
            ("workers wrongly lost", lambda r: r["idle"]["wrongly_lost"], 0, "{:d}"),
            ("paged list p99, ms", lambda r: r["paged_list"]["p99_ms"], 100, "{:.1f}"),
            ("/metrics, ms (p50)", lambda r: r["metrics"]["p50_ms"], 200, "{:.1f}")],
    30000: [("workers wrongly lost", lambda r: r["idle"]["wrongly_lost"], 0, "{:d}"),
            ("the daemon answers: paged list p99, ms", lambda r: r["paged_list"]["p99_ms"], 1000, "{:.1f}")],
}


def markdown(report):
    first = report["sizes"][0] if report["sizes"] else {}
    lines = ["## Fleet: one musterd, simulated workers", "",
             "bench/fleet: fleet-musterd (musterd's own main and flags, with a backend that starts nothing) and "
             "%d fleet_agents processes speaking the real agent protocol for every worker (register, heartbeats "
             "on a connection kept while musterd keeps it, exit, the log file), all on this %d-core machine; the "
             "agents' CPU is not musterd's but shares its cores. musterd runs with its defaults: heartbeats every "
             "%g s (--heartbeat-interval) while within --heartbeat-rate %g a second, stretched beyond it "
             "(\"budget off\": --heartbeat-rate 0, every agent at %g s, the reference); connections up to the "
             "open-files limit (4 x workers + 4,096, at most the hard limit, %d here, which cannot be raised) less "
             "1,024, kept open up to "
             "15/16 of that (\"reconnects\": agents told Connection: close that came back on a new connection). "
             "Load average before %s, after %s." % (
                 first.get("agent_processes", 0), report["cores"], first.get("heartbeat_interval_s", 2),
                 max((r.get("heartbeat_rate", 0) for r in report["sizes"]), default=0),
                 first.get("heartbeat_interval_s", 2), max((r.get("file_limit", 0) for r in report["sizes"]), default=0),
                 report["load_before"], report["load_after"]), "",
             "| workers | heartbeat every / lost after, s | start, s | idle CPU | RSS, MB | heartbeat p50 / p99, ms "
             "| late | lost | reconnects | paged list p99, ms "
             "| GET worker p99, ms | /metrics ms / KB | event snapshot, ms | stop→event, ms | wave of 1,000, s "
             "| register p99, ms | stop all, s |",
             "|" + "---|" * 17]
    for r in report["sizes"]:
        label = "%d%s" % (r["workers"], " (budget off)" if r.get("heartbeat_rate") == 0 else "")
        if "idle" not in r:
            lines.append("| %s | %s |%s" % (label, r.get("error", "?"), " |" * 15))
            continue
        i = r["idle"]
        lines.append("| %s | %g / %g | %.1f | %.1f%% | %.0f | %.1f / %.1f | %d of %d | %d | %d | %.1f | %.1f "
                     "| %.0f / %.0f | %s | %s | %.1f | %.1f | %.1f |" % (
                         label, r.get("assigned_interval_s", 0), r.get("loss_timeout_s", 0),
                         r["start_s"], 100 * i["cpu_core_fraction"], i["rss_mb"],
                         i["heartbeat"].get("p50_ms", 0), i["heartbeat"].get("p99_ms", 0), i["heartbeats_late"],
                         i["heartbeats_seen_by_daemon"], i["wrongly_lost"], i.get("agent_reconnects", 0),
                         r["paged_list"]["p99_ms"],
                         r["get_worker"]["p99_ms"], r["metrics"]["p50_ms"], r["metrics"]["bytes"] / 1024,
                         "%.0f" % r["event_stream"]["snapshot_ms"] if r["event_stream"]["snapshot_ms"] else "-",
                         "%.0f" % r["event_stream"]["stop_to_event_ms"] if r["event_stream"]["stop_to_event_ms"] else "-",
                         r["wave_1000"]["launch_to_all_running_s"], r["wave_1000"]["register"].get("p99_ms", 0),
                         r["stop_all"]["all_stopped_s"]))
    lines += ["", "Targets (issue 45):", "", "| workers | figure | measured | target | |", "|---|---|---|---|---|"]
    for r in report["sizes"]:
        if r.get("heartbeat_rate") == 0:
            continue  # the reference row, not a target
        for name, get, limit, fmt in TARGETS.get(r["workers"], []):
            try:
                v = get(r)
            except (KeyError, TypeError):
                lines.append("| %d | %s | not measured | %s | fail |" % (r["workers"], name, limit))
                continue
            ok = v <= limit
            lines.append("| %d | %s | %s | ≤ %s | %s |" % (r["workers"], name, fmt.format(v), fmt.format(limit),
                                                        "pass" if ok else "**fail**"))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--sizes", default="1000,10000:fixed,10000,30000",
                    help="fleet sizes; N:fixed runs N with musterd's heartbeat budget off (the reference)")
    ap.add_argument("--heartbeat-rate", type=float, default=2500, help="musterd's --heartbeat-rate (its default)")
    ap.add_argument("--interval", type=float, default=2.0, help="agents' heartbeat interval, s (musterd's default)")
    ap.add_argument("--window", type=float, default=20.0, help="idle measurement window, s")
    ap.add_argument("--agent-procs", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "out", "fleet.json"))
    args = ap.parse_args()
    report = {"bench": "fleet", "cores": os.cpu_count(), "load_before": load_average(), "sizes": []}
    for size in args.sizes.split(","):
        # "10000:fixed": the reference, every agent at --interval however many run (--heartbeat-rate 0).
        n, _, how = size.partition(":")
        r = run_size(args.build, int(n), args, 0 if how == "fixed" else args.heartbeat_rate)
        print(json.dumps(r), flush=True)
        report["sizes"].append(r)
    report["load_after"] = load_average()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(markdown(report))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
