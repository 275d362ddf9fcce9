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


class _DistributedAdasumOptimizer:
    """The body of DistributedOptimizer(op=hvd.Adasum), mixed into the wrapped optimizer's class.

    Horovod's rule for Adasum in an optimizer: combine the updates, not the
    gradients. step() runs the wrapped optimizer on this rank's own
    gradients, takes each parameter's change (the delta), combines the
    ranks' deltas with Adasum (one grouped allreduce) and applies the
    combination to the parameters as they were before the step.
    synchronize() and skip_synchronize() exist for Horovod's interface;
    there is nothing to synchronize before step().
    """

    def __init__(self, params, named_parameters):
        super(self.__class__, self).__init__(params)
        from . import optimizer
        named = optimizer._DistributedOptimizer._names(named_parameters,
                                                        [p for g in self.param_groups for p in g["params"]])
        self._parameter_names = {p: n for n, p in named}

    def synchronize(self):
        pass

    def skip_synchronize(self):
        import contextlib
        return contextlib.nullcontext()

    def step(self, closure=None):
        from . import mpi_ops
        params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        start = [p.detach().clone() for p in params]
        loss = super(self.__class__, self).step(closure)
        deltas = [p.detach() - s for p, s in zip(params, start)]
        if deltas:
            combined = mpi_ops.grouped_allreduce(deltas, op=mpi_ops.Adasum, name="DistributedAdasumOptimizer")
            with torch.no_grad():
                for p, s, d in zip(params, start, combined):
                    p.copy_(s + d)
        return loss
