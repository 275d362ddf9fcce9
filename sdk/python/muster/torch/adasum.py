"""Adasum: Horovod's adaptive summation of gradients, on the CPU.

Adasum combines two gradients a and b as

    (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b

which is their sum when they are orthogonal and their average when they are
equal. Horovod combines the ranks' vectors pairwise, recursively: at level
k, ranks whose numbers differ only in bit k combine their results so far
(vector-halving, distance-doubling over MPI). Each pairwise step depends on
whole-vector dot products only, so the same tree of combinations gives the
same result whoever computes it: muster.torch gathers every rank's vector
(one byte allgather, execution.py) and every rank evaluates the tree, pairs
(0,1), (2,3), ... then ((0,1),(2,3)), .... Dot products are taken in
float64, as Horovod does. Like Horovod, it needs a power-of-two number of
ranks (mpi_ops checks before anything is sent).

This module is the math only (execution.py runs it); the optimizer that
combines updates with it is optimizer.py's _DistributedAdasumOptimizer.
"""
import torch


def adasum_pair(a, b):
    """The Adasum combination of two flat tensors of one dtype (see the module doc)."""
    a64, b64 = a.double(), b.double()
    dot = float(torch.dot(a64, b64))
    na = float(torch.dot(a64, a64))
    nb = float(torch.dot(b64, b64))
    ca = 1.0 - dot / (2 * na) if na > 0 else 1.0
    cb = 1.0 - dot / (2 * nb) if nb > 0 else 1.0
    return (ca * a64 + cb * b64).to(a.dtype)


def adasum_tree(vectors):
    """Combines rank-ordered flat tensors pairwise, level by level (len(vectors) a power of two)."""
    level = list(vectors)
    while len(level) > 1:
        level = [adasum_pair(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]
