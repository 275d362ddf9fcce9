"""A DDP job that trained to the end must end well: tests/ddp_plain.py (PyTorch's
tutorial shape on the "muster" backend) run many times at 2 and 3 ranks, on an idle
host and on one whose cores are all taken by spinners. Every rank of every run exits
0: no SIGABRT ("terminate called without an active exception") at interpreter exit.

The abort this holds off: the backend's completion thread (a daemon thread) was still
inside torch's Future.set_result, which releases the GIL, when the main thread reached
the end of the script; at finalization that thread's GIL re-acquire ends it with a
forced unwind through a noexcept destructor, and the C++ runtime calls terminate. The
backend now ends every live group's thread from an atexit handler, before finalization.
"""
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from testutil import free_port  # noqa: E402

SCRIPT = os.path.join(HERE, "ddp_plain.py")
RUNS = int(os.environ.get("DDP_END_RUNS", "6"))


def run_once(n):
    port = free_port()
    procs = []
    for rank in range(n):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(["/usr/bin/python3", SCRIPT], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    results = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=240)
            results.append((p.returncode, out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


@pytest.fixture
def busy_host():
    spinners = [subprocess.Popen(["/usr/bin/python3", "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    yield
    for s in spinners:
        s.kill()
        s.wait()


def check_runs(n):
    bad = []
    for i in range(RUNS):
        for rank, (code, out) in enumerate(run_once(n)):
            if code != 0 or "rank %d done" % rank not in out:
                bad.append("run %d rank %d exited %s:\n%s" % (i, rank, code, out[-2000:]))
    assert not bad, "%d of %d rank exits went wrong:\n%s" % (len(bad), RUNS * n, "\n".join(bad))


@pytest.mark.parametrize("n", [2, 3])
def test_idle_host_every_run_ends_well(n):
    check_runs(n)


@pytest.mark.parametrize("n", [2, 3])
def test_busy_host_every_run_ends_well(n, busy_host):
    check_runs(n)
