"""The runtime's Python binding without mpirun: worlds formed over a store.

- Ranks on threads in one process (_muster_runtime.Communicator with a
  store object): every op with names, reducescatter and alltoall against
  references, a mismatch raised on every rank as
  muster.runtime_errors.MismatchError, process sets, what formed the world.
- Real processes (runtime_store_worker.py) forming a world over
  muster.runtime.FileStore, checking the numpy layer.
"""
import os
import subprocess
import sys
import tempfile
import threading

import numpy as np
import pytest

import muster.runtime as rt
from muster.runtime_errors import InvalidArgument, MismatchError

HERE = os.path.dirname(os.path.abspath(__file__))


class DictStore:
    """A store in this process's memory, for ranks on threads."""

    def __init__(self):
        self.values = {}
        self.cv = threading.Condition()

    def set(self, key, value):
        with self.cv:
            assert key not in self.values, key
            self.values[key] = bytes(value)
            self.cv.notify_all()

    def get(self, keys, timeout_ms):
        with self.cv:
            ok = self.cv.wait_for(lambda: all(k in self.values for k in keys), timeout_ms / 1000.0)
            if not ok:
                raise TimeoutError("missing: %s" % [k for k in keys if k not in self.values])
            return [self.values[k] for k in keys]


def run_ranks(n, body, prefix):
    """body(rank, communicator) on n threads; returns each rank's result or exception."""
    store = DictStore()
    results = [None] * n

    def run(r):
        try:
            c = rt.extension().Communicator(timeout_ms=20000, store=store, rank=r, size=n, prefix=prefix)
            try:
                results[r] = body(r, c)
            finally:
                c.close()
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            results[r] = e
    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results


@pytest.mark.parametrize("n", [1, 2, 3])
def test_threads_every_op_named(n):
    def body(r, c):
        assert (c.rank, c.size, c.bootstrap) == (r, n, "store")
        assert c.transport == ("none" if n == 1 else "shm")
        x = np.full(1000, r + 1.0, dtype=np.float32)
        c.allreduce_async(x.ctypes.data, x.size, "float32", "sum", name="x", shape=[1000]).wait()
        assert (x == n * (n + 1) / 2).all()
        b = np.full(7, float(r))
        c.broadcast_async(b.ctypes.data, 7, "float64", n - 1, name="b").wait()
        assert (b == n - 1).all()
        # reducescatter: rank q gets q + 1 elements.
        counts = [q + 1 for q in range(n)]
        send = np.arange(sum(counts), dtype=np.int64) * (r + 1)
        recv = np.zeros(counts[r], dtype=np.int64)
        c.reducescatter_async(send.ctypes.data, recv.ctypes.data, counts, "int64", "sum", name="rs").wait()
        begin = sum(counts[:r])
        assert list(recv) == [i * n * (n + 1) // 2 for i in range(begin, begin + counts[r])]
        # alltoall: rank r sends q + 1 elements of value 10r + q to rank q.
        send = np.concatenate([np.full(q + 1, 10 * r + q, dtype=np.int32) for q in range(n)])
        data, got = c.alltoall_async(send.ctypes.data, [q + 1 for q in range(n)], "int32", name="a2a").wait()
        assert got == [r + 1] * n
        assert list(data.view(np.int32)) == [10 * i + r for i in range(n) for _ in range(r + 1)]
        data, counts = c.allgatherv_async(send.ctypes.data, r + 1, "int32").wait()
        assert counts == [q + 1 for q in range(n)]
        c.barrier_async(name="end").wait()
        return "ok"
    assert run_ranks(n, body, "ops%d" % n) == ["ok"] * n


def test_threads_mismatch_is_raised_on_every_rank_and_the_world_goes_on():
    def body(r, c):
        x = np.ones(8, dtype=np.float32)
        try:
            c.allreduce_async(x.ctypes.data, 8, "int32" if r == 0 else "float32", "sum").wait()
            return "no error"
        except MismatchError as e:
            message = str(e)
        y = np.ones(8, dtype=np.float32)
        c.allreduce_async(y.ctypes.data, 8, "float32", "sum").wait()
        assert (y == 3).all()
        return message
    results = run_ranks(3, body, "mismatch")
    assert all(isinstance(m, str) for m in results), results
    assert len(set(results)) == 1, results
    assert "rank 0 has dtype int32" in results[0] and "float32" in results[0], results[0]


def test_threads_process_sets():
    def body(r, c):
        s = c.split([1, 2], "pair")
        if r == 0:
            assert s is None
            return "outside"
        assert (s.rank, s.size) == (r - 1, 2)
        x = np.array([r], dtype=np.int64)
        s.allreduce_async(x.ctypes.data, 1, "int64", "sum").wait()
        s.close()
        return int(x[0])
    assert run_ranks(3, body, "sets") == ["outside", 3, 3]


def test_allreduce_in_a_shared_file_named_by_its_fd():
    """shared_fd through the binding: each rank's buffer in a memfd at an offset, reduced right
    (the runtime maps the peers' files: comm_shared_test checks that); forget_shared_file drops
    the mapping, and is a no-op once the communicator is closed."""
    import mmap
    count, offset = 1 << 20, 4096

    def body(r, c):
        fd = os.memfd_create("runtime-python-test-r%d" % r)
        try:
            os.ftruncate(fd, offset + count * 4)
            with mmap.mmap(fd, offset + count * 4) as m:
                data = np.frombuffer(m, dtype=np.float32, count=count, offset=offset)
                for rnd in range(2):
                    data[:] = np.arange(count, dtype=np.float32) * (r + 1)
                    c.allreduce_async(data.ctypes.data, count, "float32", shared_fd=fd, shared_offset=offset).wait()
                    n = c.size
                    if not np.array_equal(data, np.arange(count, dtype=np.float32) * (n * (n + 1) // 2)):
                        return "wrong in round %d" % rnd
                    st = os.fstat(fd)
                    c.forget_shared_file(st.st_dev, st.st_ino)
                shares = c.shares_host_memory
                del data
        finally:
            os.close(fd)
        return shares

    assert run_ranks(2, body, "shared-file") == [True, True]
    c = rt.extension().Communicator(0)
    c.close()
    c.forget_shared_file(1, 2)


def test_store_arguments_are_checked():
    ext = rt.extension()
    with pytest.raises(InvalidArgument):
        ext.Communicator(store=DictStore(), rank=2, size=2)
    with pytest.raises(InvalidArgument):
        ext.Communicator(store=object(), rank=0, size=1)
    with pytest.raises(InvalidArgument):
        ext.Communicator(rank=0, size=1)


@pytest.mark.parametrize("n", [2, 3])
def test_processes_over_a_file_store(n):
    env = dict(os.environ, MUSTER_COMM_TIMEOUT_MS="20000")
    with tempfile.TemporaryDirectory(prefix="muster-store-") as d:
        procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "runtime_store_worker.py"), d, str(r), str(n)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env) for r in range(n)]
        outs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise
            outs.append(out.decode())
        for r, (p, out) in enumerate(zip(procs, outs)):
            assert p.returncode == 0, "rank %d:\n%s" % (r, out)
            assert "WORKER rank %d ok" % r in out, out


def test_file_store_is_the_runtimes_own_layout(tmp_path):
    """rt.FileStore is the C++ file store: its documented layout on disk, written once, a clear timeout."""
    store = rt.FileStore(tmp_path / "job")
    assert type(store) is rt.extension().FileStore and store.path == str(tmp_path / "job")
    store.set("a/b", b"\x00value")
    assert (tmp_path / "job" / "a" / "b").read_bytes() == b"\x00value"
    assert not [p for p in (tmp_path / "job" / "a").iterdir() if ".tmp-" in p.name]
    # A file another process (or the C++ store in a C++ program) wrote in that layout is read as a key.
    (tmp_path / "job" / "c").write_bytes(b"from elsewhere")
    assert store.get(["a/b", "c"], 1000) == [b"\x00value", b"from elsewhere"]
    with pytest.raises(InvalidArgument, match="was set before"):
        store.set("a/b", b"again")
    for bad in ("", "../x", "a//b", "/abs"):
        with pytest.raises(InvalidArgument):
            store.set(bad, b"v")
    from muster.runtime_errors import PeerTimeoutError
    with pytest.raises(PeerTimeoutError, match="missing"):
        store.get(["a/b", "never"], 50)
