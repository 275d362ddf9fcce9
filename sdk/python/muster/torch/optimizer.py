"""DistributedOptimizer: Horovod's gradient-averaging optimizer wrapper.

Wraps any torch.optim optimizer. Each gradient is handed to the runtime as
soon as autograd has accumulated it (a hook on the parameter's gradient
accumulator); the runtime's communication thread fuses ready gradients into
buckets (HOROVOD_FUSION_THRESHOLD, default 64 MB) and averages them over all
ranks while backward goes on; step() waits for the rest and applies the
wrapped optimizer's update.

Zero copy: the gradients live in one array the runtime owns (shared memory
between the ranks of a host, where the runtime's direct allreduce reads them
in place); each parameter's .grad is a view of it, so autograd accumulates
straight into the wire buffer. A .grad the user replaced (zero_grad with
set_to_none=True, an assignment) is copied into the view when its hook runs.

Every rank must register the same parameters (names, shapes, dtypes, order):
the constructor compares them across ranks and raises MismatchError naming
the first differing parameter on every rank, instead of deadlocking.

hvd.join() (uneven data): each step announces itself to the process set's
engine (one negotiation round, started with the step's first gradient, so it
overlaps backward). A rank that has joined stands in for the step: its
engine thread runs this optimizer's reduction with zero gradients, so the
others' buckets complete and average over the whole set, as in Horovod.

Sparse gradients (nn.Embedding(sparse=True)): allgathered as indices and
values (hvd.sparse_allreduce_async) and left sparse for the wrapped optimizer
(SparseAdam); with sparse_as_dense=True they are reduced densely and made
sparse again. process_set=: only its ranks reduce; on other ranks the
optimizer steps on local gradients, as in Horovod.

Example::

    import muster.torch as hvd
    hvd.init()
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
"""
import contextlib
import warnings
import weakref

import torch

from .. import runtime as _rt
from ..runtime_errors import InvalidArgument
from ..settings import Settings
from . import functions, mpi_ops, process_sets, settings
from .compression import Compression


_count = [0]  # DistributedOptimizers made in this process: every rank numbers them alike


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, sparse_as_dense=False, process_set=None):
        super(self.__class__, self).__init__(params)
        if op not in (mpi_ops.Average, mpi_ops.Sum):
            raise ValueError("DistributedOptimizer: op must be Average or Sum, got %r" % (op,))
        if compression not in (Compression.none, Compression.fp16):
            raise ValueError("DistributedOptimizer: compression must be Compression.none or Compression.fp16")
        if gradient_predivide_factor != 1.0 and op != mpi_ops.Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1, got %r" % (backward_passes_per_step,))
        self._op = op
        self._passes = backward_passes_per_step
        # Pre- and post-division by the factor multiply to one average; in
        # float32 their only effect is on rounding, so the runtime averages once.
        self._predivide = gradient_predivide_factor
        params_in_groups = [p for g in self.param_groups for p in g["params"]]
        named = self._names(named_parameters, params_in_groups)
        self._parameter_names = {p: n for n, p in named}
        self._sparse_as_dense = sparse_as_dense
        self._sparse = {}          # parameter -> its sparse reduction in flight (a callable)
        self._process_set = process_set
        self._member = process_set is None or process_set.included()
        self._params = [(n, p) for n, p in named if p.requires_grad]
        self._native = None
        self._synchronized = False
        self._should_synchronize = True
        self._early = False
        self._ready = set()
        self._compression = compression
        self._views = {}
        self._index = {}
        self._steps = 0
        self._step_announced = False
        self._delay = {p: self._passes for _, p in self._params}
        if not self._member:
            # Not in the process set: gradients stay local, as in Horovod.
            return
        for n, p in self._params:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise InvalidArgument("DistributedOptimizer: parameter '%s' is %s on %s; muster.torch averages "
                                      "float32 CPU parameters" % (n, p.dtype, p.device))
        _count[0] += 1
        self._engine_id = "DistributedOptimizer.%d" % _count[0]
        self._grad_accs = []
        for _, p in self._params:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._make_hook(p))
            self._grad_accs.append(acc)
        # In an elastic cluster the world is formed again after a failure
        # (hvd.elastic.run): the optimizer binds to the world at its first
        # backward, and again after each re-formation, so that a rank joining
        # later meets the others' state sync with no collective of its own
        # first. Elsewhere it binds now (ranks that disagree fail here).
        if Settings.environment().raw("MUSTER_RENDEZVOUS_URL") is None:
            self._bind()

    def _bind(self):
        """Registers the parameters with the runtime's optimizer of the current world (collective)."""
        process_set = self._process_set
        if process_set is not None and process_set.ranks != list(range(_rt.size())):
            comm = process_sets.optimizer_communicator(process_set, "DistributedOptimizer")
        else:
            comm = _rt.communicator()
        functions._check_same(self._params, "DistributedOptimizer", process_set=process_set)
        self._native = _rt.extension().DistributedOptimizer(
            comm, fusion_threshold_bytes=settings.fusion_threshold_bytes(),
            fp16=self._compression is Compression.fp16, timeline=settings.timeline_path())
        self._native_size = comm.size
        self._engine = process_sets.engine_of(process_set, "DistributedOptimizer")
        self._step_announced = False
        self._engine.stand_ins[self._engine_id] = weakref.WeakMethod(self._stand_in)
        _rt.on_shutdown(weakref.WeakMethod(self._unbind))
        _rt.before_collective(weakref.WeakMethod(self._finish_step_in_flight))
        self._early = False
        # A world of one rank reduces nothing, so it needs no shared memory:
        # gradients that exist stay where they are (after a re-formation down
        # to one rank, no allocation of the model's size before its first step).
        # Elsewhere gradients live in the runtime's shared memory unless this
        # host gives only private memory huge pages (settings.shared_gradients):
        # then each gets a private tensor of its own, registered with the runtime.
        solo = comm.size == 1
        private = not solo and not settings.shared_gradients()
        self._index = {}
        kept = {}
        for n, p in self._params:
            g = p.grad
            if private and (g is None or g.is_sparse or not self._plain(g, p)):
                # A tensor of its own, adopted as the shared view would be: a
                # dense gradient now (copied), none or a sparse one at the
                # first gradient (the hook; autograd may make it sparse).
                dense = torch.zeros_like(p, memory_format=torch.contiguous_format)
                if g is not None and not g.is_sparse:
                    dense.copy_(g)
                    p.grad = dense
                g = dense
            if (solo or private) and g is not None and not g.is_sparse and self._plain(g, p):
                kept[p] = g
            self._index[p] = self._native.add_parameter(n, p.data_ptr(), p.numel(),
                                                        grad=kept[p].data_ptr() if p in kept else 0)
        self._views = {}
        for n, p in self._params:
            array = self._native.gradient(self._index[p])  # the first call is collective: every rank makes it
            if p in kept:
                self._views[p] = kept[p]  # the tensor itself: it owns the memory the optimizer reads
                continue
            view = torch.from_numpy(array).view_as(p)
            view.zero_()
            if p.grad is not None and not p.grad.is_sparse:
                view.copy_(p.grad)
                p.grad = view
            # A parameter without a gradient gets the view at its first gradient (the hook adopts it): until
            # then autograd may show it is sparse (nn.Embedding(sparse=True)), which takes the sparse path.
            self._views[p] = view

    @staticmethod
    def _plain(g, p):
        """A gradient the runtime can reduce where it lies: dense float32 CPU memory, contiguous, p's size."""
        return (g.dtype == torch.float32 and g.device.type == "cpu" and g.is_contiguous()
                and g.numel() == p.numel())

    def _unbind(self):
        """The world closes: gradients keep their values in the closed optimizer's memory (the views hold it)
        until the next world's optimizer adopts them."""
        native, self._native = self._native, None
        self._views = {}
        self._ready.clear()
        self._sparse.clear()
        for _, p in self._params:
            self._delay[p] = self._passes
        self._synchronized = False
        self._early = False
        self._step_announced = False
        if native is not None:
            native.close()

    def _bound(self):
        if self._native is None:
            self._bind()
        return self._native

    @staticmethod
    def _names(named_parameters, params_in_groups):
        if named_parameters is None:
            return [("allreduce.noname.%d" % i, p) for i, p in enumerate(params_in_groups)]
        named = list(named_parameters)
        if any(not isinstance(item, tuple) or len(item) != 2 for item in named):
            raise ValueError("named_parameters should be a sequence of (name, parameter) tuples, "
                             "usually model.named_parameters()")
        names = [n for n, _ in named]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ValueError("named_parameters has duplicate names: %s" % ", ".join(dups))
        by_id = {id(p): n for n, p in named}
        missing = [i for i, p in enumerate(params_in_groups) if id(p) not in by_id]
        if missing:
            raise ValueError("named_parameters was given, but %d optimizer parameter(s) are not in it "
                             "(positions %s in param_groups)" % (len(missing), missing[:5]))
        return [(by_id[id(p)], p) for p in params_in_groups]

    def _make_hook(self, p):
        def hook(*_):
            if p in self._ready:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before call to step(). "
                    "Increase backward_passes_per_step to accumulate gradients locally.")
            self._delay[p] -= 1
            if self._delay[p] > 0:
                return
            native = self._bound()
            self._ready.add(p)
            self._synchronized = False
            self._announce_step()
            if p.grad is not None and p.grad.is_sparse and not self._sparse_as_dense:
                self._sparse[p] = mpi_ops.sparse_allreduce_async(
                    p.grad, name="DistributedOptimizer.%s" % self._parameter_names[p],
                    op=mpi_ops.Average,
                    process_set=self._process_set or mpi_ops.global_process_set)
                return  # the native buckets reduce its (unused) dense view alongside
            self._adopt_grad(p)
            native.grad_ready(self._index[p])
        return hook

    def _adopt_grad(self, p):
        """Makes p.grad the runtime's view again (copying a replaced gradient into it).

        A sparse gradient (sparse_as_dense=True) is densified into the view and
        stays sparse for the wrapped optimizer: step() turns the average back
        into a sparse tensor.
        """
        view = self._views[p]
        g = p.grad
        if g is None:
            view.zero_()
        elif g.is_sparse:
            view.zero_()
            view.add_(g)
            return
        elif g.data_ptr() != view.data_ptr():
            view.copy_(g)
        if p.grad is not view:
            p.grad = view

    def _announce_step(self):
        """Tells the engine this rank runs a step (once per step), so joined ranks stand in for it."""
        if self._step_announced or self._native_size < 2:
            return
        self._step_announced = True
        self._steps += 1
        self._engine.submit("optimizer", "%s.step%d" % (self._engine_id, self._steps), {"id": self._engine_id},
                            None)

    def _stand_in(self):
        """On a joined rank (engine thread): this step's reduction with zero gradients; this rank's own
        gradients are put back afterwards."""
        saved = [(view, view.clone()) for view in self._views.values()]
        for view, _ in saved:
            view.zero_()
        self._ready.clear()
        self._native.synchronize()
        for view, value in saved:
            view.copy_(value)
        self._steps += 1
        for _, p in self._params:
            self._delay[p] = self._passes

    def _finish_step_in_flight(self):
        """Before another collective: a step whose buckets are on the wire is finished first."""
        if self._ready and not self._synchronized:
            self.synchronize()
            self._early = True

    def synchronize(self):
        """Waits until every gradient holds the average over all ranks (the rest are reduced now)."""
        if not self._member:  # not in the optimizer's process set: nothing to reduce
            self._synchronized = True
            return
        native = self._bound()
        self._announce_step()
        for _, p in self._params:
            if p not in self._ready and p not in self._sparse:
                self._adopt_grad(p)
        native.synchronize()
        self._step_announced = False
        n = self._native_size
        with torch.no_grad():
            for _, p in self._params:
                g = p.grad
                if p in self._sparse:
                    reduced = self._sparse.pop(p)()
                    p.grad = reduced * n if self._op == mpi_ops.Sum else reduced
                    continue
                if g is not None and g.is_sparse:  # sparse_as_dense: the dense average, made sparse again
                    dense = self._views[p] * (n if self._op == mpi_ops.Sum else 1)
                    p.grad = dense.to_sparse()
                elif self._op == mpi_ops.Sum and n > 1 and g is not None:
                    g.mul_(n)
        self._ready.clear()
        for _, p in self._params:
            self._delay[p] = self._passes
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Within it, step() applies the gradients without synchronizing (call synchronize() first)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized and not self._early:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown. You may want to "
                              "consider using optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            elif not self._synchronized:
                self.synchronize()
        self._synchronized = False
        self._early = False
        return super(self.__class__, self).step(closure)

    def _muster_plain_step(self, closure=None):
        return super(self.__class__, self).step(closure)

    def zero_grad(self, set_to_none=False):
        if self._ready:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                                 "cause a race condition.")
        return super(self.__class__, self).zero_grad(set_to_none=set_to_none)


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
        named = _DistributedOptimizer._names(named_parameters,
                                                        [p for g in self.param_groups for p in g["params"]])
        self._parameter_names = {p: n for n, p in named}

    def synchronize(self):
        pass

    def skip_synchronize(self):
        return contextlib.nullcontext()

    def step(self, closure=None):
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


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,  # noqa: N802 (Horovod's name)
                         backward_passes_per_step=1, op=mpi_ops.Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """An optimizer of `optimizer`'s class that averages gradients over all ranks before each step.

    Collective: every rank constructs it with the same parameters. The
    returned object shares `optimizer`'s parameter groups and starts from its
    state.
    """
    if num_groups or groups:
        warnings.warn("muster.torch.DistributedOptimizer: num_groups/groups are ignored; buckets follow "
                      "HOROVOD_FUSION_THRESHOLD")
    if op == mpi_ops.Adasum and _rt.size() > 1:
        if process_set is not None and process_set.ranks != list(range(_rt.size())):
            raise NotImplementedError("DistributedOptimizer: Adasum does not support non-global process sets "
                                      "(as in Horovod)")
        mpi_ops._check_adasum(op, process_sets.engine_of(None, "DistributedOptimizer"), "DistributedOptimizer")
        cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
                   dict(_DistributedAdasumOptimizer.__dict__))
        opt = cls(optimizer.param_groups, named_parameters)
        if optimizer.state_dict()["state"]:
            opt.load_state_dict(optimizer.state_dict())
        return opt
    if op == mpi_ops.Adasum:
        op = mpi_ops.Average  # one rank: Adasum of one update is that update
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    opt = cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
              gradient_predivide_factor, sparse_as_dense, process_set)
    if optimizer.state_dict()["state"]:
        opt.load_state_dict(optimizer.state_dict())
    return opt
