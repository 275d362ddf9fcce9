"""Worker and cluster logs against a real musterd with a small cap (integration).

- reading starts at the end: the last lines, after one "[muster] ..." line that says how many
  bytes came before and where the whole log is; tail=N (exactly N lines), from_start, the CLI's
  -n/--from-start;
- a writer as fast as Python can write (hundreds of MB) through the agent's relay: no log file
  ever passes the cap (sampled all along), at most --worker-log-keep rotated files exist, and what
  is kept is the end of the output, in order;
- follow starts at the end of a long log, replays it with from_start, and catches up at disk
  speed rather than a chunk per poll (the rate is printed; bench/ has the figures);
- a cluster's launcher log (mpirun's output) is capped the same way.
"""
import os
import re
import subprocess
import sys
import threading
import time

import pytest

import muster
from sdk_daemon import Daemon, sdk_session, write_scripts
from testutil import wait_for

CAP = 1 << 20
KEEP = 2

SCRIPTS = {
    # MB megabytes of numbered 64-byte lines, as fast as it can, then a last line.
    "spew.py": """
        import os, sys
        total = int(float(os.environ.get("MB", "1")) * (1 << 20))
        line, n, out = 0, 0, sys.stdout.buffer
        while n < total:
            block = b"".join(b"%012d spew spew spew spew spew spew spew spew spew spew\\n" % (line + i)
                             for i in range(4096))
            line += 4096
            n += len(block)
            out.write(block)
        out.write(b"last line %d\\n" % line)
        out.flush()
        if os.environ.get("THEN_SLEEP"):
            import time
            time.sleep(float(os.environ["THEN_SLEEP"]))
            print("after the pause", flush=True)
    """,
    "short.py": """
        for i in range(5):
            print("short %d" % i, flush=True)
    """,
}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
    args = ["--worker-log-max-size", "1MiB", "--worker-log-keep", str(KEEP)]
    with Daemon(project, tmp_path_factory.mktemp("state"), extra_args=args) as d, sdk_session(d, check_contract=True):
        yield d


def log_files(daemon, wid):
    path = os.path.join(daemon.state_dir, "workers", wid, "output.log")
    return path, [path] + [path + ".%d" % i for i in range(1, KEEP + 3)]


def run_worker(env, timeout=300):
    [w] = muster.launch_workers(n=1, cpu=0.5, memory=0.5, script="spew.py", env=env)
    return w["id"]


def finished(wid, timeout=300):
    return wait_for(lambda: muster.get_worker(wid)["status"] in ("succeeded", "failed") and muster.get_worker(wid),
                    timeout=timeout, interval=0.2, what="worker %s to end" % wid)


def test_a_short_log_is_whole_and_has_no_marker(daemon):
    [w] = muster.launch_workers(n=1, cpu=0.5, memory=0.5, script="short.py")
    assert finished(w["id"])["status"] == "succeeded"
    text = muster.worker_logs(w)
    assert "[muster] " not in text and text.endswith("short 4\n")
    assert muster.worker_logs(w, from_start=True) == text


def test_the_cap_holds_against_a_fast_writer_and_reads_start_at_the_end(daemon):
    wid = run_worker({"MB": "300"})
    path, files = log_files(daemon, wid)
    largest, extra, samples = [0], [], [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            for i, p in enumerate(files):
                try:
                    size = os.stat(p).st_size
                except FileNotFoundError:
                    continue
                largest[0] = max(largest[0], size)
                if i > KEEP:
                    extra.append(p)
            samples[0] += 1
            time.sleep(0.002)

    t = threading.Thread(target=sample, daemon=True)
    start = time.monotonic()
    t.start()
    try:
        w = finished(wid)
    finally:
        done.set()
        t.join()
    seconds = time.monotonic() - start
    print("300 MB through the relay in %.1f s (%.0f MB/s with the daemon's polling), %d samples"
          % (seconds, 300 / seconds, samples[0]))
    assert w["status"] == "succeeded", muster.worker_logs(wid, tail=20)
    assert samples[0] > 20
    assert largest[0] <= CAP, "a log file reached %d bytes, over the %d cap" % (largest[0], CAP)
    assert not extra, "more than %d rotated files existed: %s" % (KEEP, sorted(set(extra)))
    assert os.path.exists(path + ".%d" % KEEP)

    # Reading starts at the end: a marker line, then the last 1000 lines.
    text = muster.worker_logs(wid)
    first, rest = text.split("\n", 1)
    m = re.match(r"\[muster\] [0-9.]+ MiB \((\d+) bytes\) of earlier output not shown; the last 1000 lines follow\. "
                 r"The whole log: (\S+) \(earlier output in output\.log\.1, output\.log\.2; [0-9.]+ MiB dropped by "
                 r"the size cap", first)
    assert m, first
    assert m.group(2) == path
    assert int(m.group(1)) > 299 * (1 << 20)  # nearly all of the 300 MB came before
    lines = rest.splitlines()
    assert len(lines) == 1000 and lines[-1].startswith("last line ")
    numbers = [int(x.split()[0]) for x in lines[:-1]]
    assert numbers == list(range(numbers[0], numbers[0] + 999))

    assert muster.worker_logs(wid, tail=3).splitlines() == lines[-3:]  # an explicit tail: exactly its lines

    # from_start: the current file from its first byte, whose first line says what rotated away.
    whole = muster.worker_logs(wid, from_start=True)
    assert whole.startswith("[muster] log rotated: this file starts at byte ")
    assert len(whole.encode()) <= CAP and whole.endswith(lines[-1] + "\n")

    # The CLI says the same.
    env = dict(os.environ)
    cli = [sys.executable, "-m", "muster", "logs"]
    out = subprocess.run(cli + [wid], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == text, out
    out = subprocess.run(cli + ["-n", "2", wid], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.splitlines() == lines[-2:], out
    out = subprocess.run(cli + ["--from-start", wid], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == whole


def test_follow_starts_at_the_end_and_from_start_replays_fast(daemon):
    wid = run_worker({"MB": "40", "THEN_SLEEP": "3"})
    path, _ = log_files(daemon, wid)
    wait_for(lambda: b"last line" in open(path, "rb").read()[-200:] if os.path.exists(path) else False,
             timeout=120, interval=0.2, what="the 40 MB")
    seen = []
    start = time.monotonic()
    for line in muster.worker_logs(wid, follow=True):
        seen.append(line)
    assert seen[0].startswith("[muster] ") and "of earlier output not shown" in seen[0], seen[:2]
    assert seen[-1] == "after the pause"
    assert len(seen) <= 1000 + 3  # the marker, the last lines, and what came after
    assert time.monotonic() - start < 30

    # from_start replays the current file (1 MiB here) whole; time it against the cap's size.
    start = time.monotonic()
    replay = list(muster.worker_logs(wid, follow=True, from_start=True))
    seconds = time.monotonic() - start
    assert replay[0].startswith("[muster] log rotated: ")
    assert replay[-1] == "after the pause"
    print("replayed %d lines (%d bytes) in %.3f s" % (len(replay), sum(len(x) + 1 for x in replay), seconds))


def test_a_follow_with_an_offset_that_rotated_away_says_so(daemon):
    wid = run_worker({"MB": "5"})
    assert finished(wid)["status"] == "succeeded"
    lines = list(muster.Client().worker_logs(wid, follow=True, offset=10))
    assert lines[0].startswith("[muster] bytes 10..") and "are no longer in" in lines[0], lines[0]
    assert lines[1].startswith("[muster] log rotated: this file starts at byte ")
    assert lines[-1].startswith("last line ")


def test_a_clusters_launcher_log_is_capped_too(daemon):
    c = muster.horovodrun(2, "spew.py", cpu=0.5, memory=0.5, env={"MB": "3"}, timeout_seconds=120,
                          wait_for_completion=True)
    c = muster.get_cluster(c)
    assert c["status"] == "succeeded", c
    log = os.path.join(daemon.state_dir, "clusters", c["id"], "launcher.log")
    assert os.path.getsize(log) <= CAP
    assert os.path.exists(log + ".1")
    text = muster.cluster_logs(c)
    first = text.splitlines()[0]
    assert first.startswith("[muster] ") and "launcher.log" in first, first
    assert re.search(r"last line \d+$", text.rstrip("\n").splitlines()[-1])  # a rank's end is the log's end
