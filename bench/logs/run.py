#!/usr/bin/env python3
"""bench/logs/run.py [build-dir]: worker logs through musterd, against their same-run references.

1. Writing: a worker script writes WRITE_MB of 64-byte lines as fast as it can; through the
   agent's log relay (capped at --worker-log-max-size 64MiB, rotating) versus the same script
   writing to /dev/null outside musterd. MB/s, median of RUNS.
2. Catching up: a finished worker's REPLAY_MB log read back over the REST API, streamed
   (?follow=true&from_start=true, what `logs -f --from-start` and the dashboard's whole-log link
   do) and whole (?from_start=true without follow), versus reading the file from disk. MB/s,
   median of RUNS; before this change a follow sent 256 KiB per 200 ms poll (1.3 MB/s).
3. The default read (the last 1000 lines with the marker) of that log: milliseconds.
Writes bench/out/logs.json and logs.md; the load (uptime) is recorded with the figures.
"""
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "sdk", "python")]
os.environ["MUSTER_BINARY_DIR"] = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))

import muster  # noqa: E402
from sdk_daemon import Daemon  # noqa: E402

RUNS = int(os.environ.get("RUNS", "5"))
WRITE_MB = int(os.environ.get("WRITE_MB", "256"))
REPLAY_MB = int(os.environ.get("REPLAY_MB", "50"))
SPEW = textwrap.dedent("""
    import os, sys
    total = int(float(os.environ["MB"]) * (1 << 20))
    block = b"".join(b"%012d spew spew spew spew spew spew spew spew spew spew\\n" % i for i in range(16384))
    n, out = 0, sys.stdout.buffer
    while n < total:
        out.write(block)
        n += len(block)
    out.flush()
""")


def wait_done(client, wid, timeout=600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        w = client.get_worker(wid)
        if w["status"] in ("succeeded", "failed", "stopped", "lost", "timedout"):
            return w
        time.sleep(0.05)
    raise TimeoutError(wid)


def read_stream(url, token, path, query):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    start = time.monotonic()
    conn.request("GET", path + "?" + urllib.parse.urlencode(query), headers={"Authorization": "Bearer " + token})
    resp = conn.getresponse()
    n = 0
    while True:
        chunk = resp.read1(1 << 20)
        if not chunk:
            break
        n += len(chunk)
    conn.close()
    return n, time.monotonic() - start


def main():
    work = tempfile.mkdtemp(prefix="muster-bench-logs-")
    project = os.path.join(work, "project")
    os.makedirs(project)
    with open(os.path.join(project, "spew.py"), "w") as f:
        f.write(SPEW)
    load = os.getloadavg()
    figures = {"runs": RUNS, "write_mb": WRITE_MB, "replay_mb": REPLAY_MB, "load_before": [round(x, 1) for x in load]}
    with Daemon(project, os.path.join(work, "state")) as d:
        client = muster.Client(d.url, d.token)
        # 1. Writing through the relay versus to /dev/null.
        relay, devnull = [], []
        for _ in range(RUNS):
            [w] = client.launch_workers(n=1, cpu=1, memory=1, script="spew.py", env={"MB": str(WRITE_MB)})
            done = wait_done(client, w["id"])
            relay.append(WRITE_MB / done["duration"])  # running to finished, as the /dev/null run is timed
            start = time.monotonic()
            subprocess.run([sys.executable, os.path.join(project, "spew.py")], env=dict(os.environ, MB=str(WRITE_MB)),
                           stdout=subprocess.DEVNULL, check=True)
            devnull.append(WRITE_MB / (time.monotonic() - start))
        figures["write_relay_mb_s"] = round(statistics.median(relay), 1)
        figures["write_devnull_mb_s"] = round(statistics.median(devnull), 1)
        # 2. and 3. One finished REPLAY_MB log, read back.
        [w] = client.launch_workers(n=1, cpu=1, memory=1, script="spew.py", env={"MB": str(REPLAY_MB)})
        wait_done(client, w["id"])
        path = "/api/v1/workers/%s/logs" % w["id"]
        log_file = os.path.join(d.state_dir, "workers", w["id"], "output.log")
        follow, whole, disk, tail_ms = [], [], [], []
        for _ in range(RUNS):
            n, s = read_stream(d.url, d.token, path, {"follow": "true", "from_start": "true"})
            follow.append(n / 1e6 / s)
            n, s = read_stream(d.url, d.token, path, {"from_start": "true"})
            whole.append(n / 1e6 / s)
            start = time.monotonic()
            with open(log_file, "rb") as f:
                while f.read(1 << 20):
                    pass
            disk.append(os.path.getsize(log_file) / 1e6 / (time.monotonic() - start))
            n, s = read_stream(d.url, d.token, path, {})
            tail_ms.append(s * 1000)
        figures["replay_follow_mb_s"] = round(statistics.median(follow), 1)
        figures["replay_whole_mb_s"] = round(statistics.median(whole), 1)
        figures["replay_disk_mb_s"] = round(statistics.median(disk), 1)
        figures["tail_ms"] = round(statistics.median(tail_ms), 1)
    figures["load_after"] = [round(x, 1) for x in os.getloadavg()]
    out = os.path.join(ROOT, "bench", "out")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "logs.json"), "w") as f:
        json.dump(figures, f, indent=1)
    md = textwrap.dedent("""
        ## Logs (bench/logs)

        Medians of {runs} runs; load average {load_before} before, {load_after} after ({cores} cores).

        | what | MB/s | reference (same run) | ratio |
        | --- | --- | --- | --- |
        | a script writing {write_mb} MB through the agent's log relay (64 MiB cap, rotating) | {write_relay_mb_s} | to /dev/null outside musterd: {write_devnull_mb_s} | {w_ratio} |
        | replaying a {replay_mb} MB log, `follow=true&from_start=true` | {replay_follow_mb_s} | reading the file: {replay_disk_mb_s} | {f_ratio} |
        | the same, `from_start=true` (no follow) | {replay_whole_mb_s} | reading the file: {replay_disk_mb_s} | {h_ratio} |

        The default read of that log (its last 1000 lines and the marker line) took {tail_ms} ms.
        Before reads started at the end, a follow replayed from byte 0 at 256 KiB per 200 ms poll, 1.3 MB/s.
    """).format(cores=os.cpu_count(),
                w_ratio=round(figures["write_relay_mb_s"] / figures["write_devnull_mb_s"], 2),
                f_ratio=round(figures["replay_follow_mb_s"] / figures["replay_disk_mb_s"], 3),
                h_ratio=round(figures["replay_whole_mb_s"] / figures["replay_disk_mb_s"], 3), **figures)
    with open(os.path.join(out, "logs.md"), "w") as f:
        f.write(md.lstrip())
    print(md)


if __name__ == "__main__":
    main()
