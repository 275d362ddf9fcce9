"""One process of a muster.runtime world formed over a FileStore (no mpirun),
for runtime_python_test.py: python3 runtime_store_worker.py DIR RANK SIZE.

Checks every numpy-level op against numpy references, a mismatch raised on
every rank with the world usable after it, and process sets; prints
"WORKER rank R ok" at the end (an assertion error otherwise).
"""
import sys

import numpy as np

import muster.runtime as rt
from muster.runtime_errors import MismatchError

directory, rank, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
comm = rt.init(timeout_ms=20000, store=rt.FileStore(directory), rank=rank, size=size, prefix="job")
assert rt.rank() == rank and rt.size() == size, (rt.rank(), rt.size())
assert rt.bootstrap() == "store", rt.bootstrap()
assert rt.transport() in ("shm", "none"), rt.transport()


def data(r, n, dtype):
    return (np.arange(n) % 13 + r).astype(dtype)


# allreduce in every op, several dtypes and sizes, named.
for dtype in (np.float32, np.float64, np.int32, np.int64):
    for n in (1, 7, 5000, 300001):
        x = data(rank, n, dtype)
        rt.allreduce(x, op="sum", name="sum.%d" % n)
        ref = sum(data(r, n, dtype) for r in range(size))
        assert np.array_equal(x, ref.astype(dtype)), (dtype, n)
        y = data(rank, n, dtype)
        rt.allreduce(y, op="max")
        assert np.array_equal(y, data(size - 1, n, dtype)), (dtype, n)

# broadcast from every root; allgather with rows differing per rank.
for root in range(size):
    b = np.full((3, 4), float(rank), dtype=np.float64)
    rt.broadcast(b, root, name="b")
    assert (b == root).all()
g = rt.allgather(np.full((rank + 1, 2), rank, dtype=np.int64), name="rows")
assert g.shape == (sum(r + 1 for r in range(size)), 2), g.shape
assert list(g[:, 0]) == [r for r in range(size) for _ in range(r + 1)]

# reducescatter: Horovod's split of the first dimension, every op.
for op, fold in (("sum", np.sum), ("max", np.max), ("min", np.min), ("average", np.mean)):
    rows = 2 * size + 1
    t = np.stack([data(r, rows * 3, np.float64).reshape(rows, 3) * (r + 1) for r in range(size)])
    mine = rt.reducescatter(t[rank].copy(), op=op)
    counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    begin = sum(counts[:rank])
    ref = fold(t, axis=0)[begin:begin + counts[rank]]
    assert np.allclose(mine, ref), (op, mine, ref)

# alltoall with uneven splits: rank i sends (i + j) % 3 rows to rank j.
splits = [(rank + j) % 3 for j in range(size)]
send = np.concatenate([np.full((k, 2), 100 * rank + j, dtype=np.int32) for j, k in enumerate(splits)])
got, received = rt.alltoall(send, splits=splits, name="a2a")
assert received == [(i + rank) % 3 for i in range(size)], received
assert list(got[:, 0]) == [100 * i + rank for i in range(size) for _ in range((i + rank) % 3)]

# A mismatch: every rank raises, naming the ranks; the world still works.
try:
    rt.allreduce(np.ones(10 + (rank == 1), dtype=np.float32))
    raise AssertionError("no MismatchError")
except MismatchError as e:
    assert "rank 1 has count 11" in str(e), str(e)
z = np.ones(4, dtype=np.float32)
rt.allreduce(z)
assert (z == size).all()

# A process set of the even ranks, used beside the world.
evens = rt.split(list(range(0, size, 2)), "evens")
assert (evens is not None) == (rank % 2 == 0)
if evens is not None:
    e = np.array([rank], dtype=np.int64)
    rt.allreduce(e, comm=evens)
    assert e[0] == sum(range(0, size, 2))
    evens.close()
rt.barrier(name="end")
rt.shutdown()
print("WORKER rank %d ok" % rank)
