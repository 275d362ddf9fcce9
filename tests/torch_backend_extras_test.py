"""What PyTorch's own distributed_test.py runs only on gloo (or MPI), by name, held against the "muster"
backend here, from torch's documentation of each call (tests/torch_backend_extras_worker.py has the
cases; tests/torch_suite.py runs the suite itself and lists which of its cases each mode stands for):
- all_reduce_coalesced, all_gather_coalesced, all_to_all on subgroups, the object collectives, sparse
  all_reduce, ReduceOp.PREMUL_SUM, Work.get_future(), DDP's no_sync() with and without a comm hook;
- isend/irecv, batch_isend_irecv with tags, recv from any source, 4 KB to 64 MB, on shared memory and,
  with MUSTER_COMM_RING_TRANSPORT=tcp, on the TCP streams;
- monitored_barrier naming the ranks that did not come;
- barriers that fail after the group's timeout.
Each at 2 and 3 ranks, ranks as processes with torchrun's environment.
"""
import os
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from testutil import free_port  # noqa: E402

WORKER = os.path.join(HERE, "torch_backend_extras_worker.py")


def run_ranks(n, mode, timeout=300, env=None):
    port = free_port()
    while True:  # the worker's own store takes the port after it
        try:
            import socket
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            break
        except OSError:
            port = free_port()
    init_dir = tempfile.mkdtemp(prefix="extras-init-")
    procs = []
    for rank in range(n):
        e = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                 INIT_FILE=os.path.join(init_dir, "init"), **(env or {}))
        procs.append(subprocess.Popen(["/usr/bin/python3", "-u", WORKER, mode], env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + timeout
    out = []
    try:
        for p in procs:
            text, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
            out.append((p.returncode, text))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def show(results):
    return "\n".join("--- rank %d (exit %s) ---\n%s" % (r, c, t[-4000:]) for r, (c, t) in enumerate(results))


def passed(results):
    return all(c == 0 and "rank %d ok" % r in t for r, (c, t) in enumerate(results))


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("mode", ["collectives", "p2p", "monitored", "timeouts"])
def test_mode(mode, n):
    results = run_ranks(n, mode)
    assert passed(results), show(results)


def test_point_to_point_over_the_tcp_streams():
    results = run_ranks(3, "p2p", env={"MUSTER_COMM_RING_TRANSPORT": "tcp"})
    assert passed(results), show(results)
