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
import os
import warnings
import weakref

import torch

from .. import runtime as _rt
from ..runtime_errors import InvalidArgument
from . import functions, mpi_ops, settings
from .compression import Compression


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor):
        super(self.__class__, self).__init__(params)
        if op == mpi_ops.Adasum:
            raise NotImplementedError("DistributedOptimizer: op=Adasum is not implemented by muster.torch")
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
        self._params = [(n, p) for n, p in named if p.requires_grad]
        for n, p in self._params:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise InvalidArgument("DistributedOptimizer: parameter '%s' is %s on %s; muster.torch averages "
                                      "float32 CPU parameters" % (n, p.dtype, p.device))
        self._compression = compression
        self._native = None
        self._views = {}
        self._index = {}
        self._early = False
        self._delay = {p: self._passes for _, p in self._params}
        self._ready = set()
        self._synchronized = False
        self._should_synchronize = True
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
        if not os.environ.get("MUSTER_RENDEZVOUS_URL"):
            self._bind()

    def _bind(self):
        """Registers the parameters with the runtime's optimizer of the current world (collective)."""
        functions._check_same(self._params, "DistributedOptimizer")
        comm = _rt.communicator()
        self._native = _rt.extension().DistributedOptimizer(
            comm, fusion_threshold_bytes=settings.fusion_threshold_bytes(),
            fp16=self._compression is Compression.fp16, timeline=settings.timeline_path())
        _rt.on_shutdown(weakref.WeakMethod(self._unbind))
        _rt.before_collective(weakref.WeakMethod(self._finish_step_in_flight))
        self._index = {}
        for n, p in self._params:
            self._index[p] = self._native.add_parameter(n, p.data_ptr(), p.numel())
        self._views = {}
        for n, p in self._params:
            view = torch.from_numpy(self._native.gradient(self._index[p])).view_as(p)
            if p.grad is not None:
                view.copy_(p.grad)
            else:
                view.zero_()
            p.grad = view
            self._views[p] = view

    def _unbind(self):
        """The world closes: gradients leave the runtime's memory (plain tensors again) before it goes."""
        native, self._native = self._native, None
        for _, p in self._params:
            if p in self._views and p.grad is not None and p.grad.data_ptr() == self._views[p].data_ptr():
                p.grad = p.grad.detach().clone()
        self._views = {}
        self._ready.clear()
        for _, p in self._params:
            self._delay[p] = self._passes
        self._synchronized = False
        self._early = False
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
            self._adopt_grad(p)
            self._ready.add(p)
            self._synchronized = False
            native.grad_ready(self._index[p])
        return hook

    def _adopt_grad(self, p):
        """Makes p.grad the runtime's view again (copying a replaced gradient into it)."""
        view = self._views[p]
        g = p.grad
        if g is None:
            view.zero_()
        elif g.data_ptr() != view.data_ptr():
            view.copy_(g)
        if p.grad is not view:
            p.grad = view

    def _finish_step_in_flight(self):
        """Before another collective: a step whose buckets are on the wire is finished first."""
        if self._ready and not self._synchronized:
            self.synchronize()
            self._early = True

    def synchronize(self):
        """Waits until every gradient holds the average over all ranks (the rest are reduced now)."""
        native = self._bound()
        for _, p in self._params:
            if p not in self._ready:
                self._adopt_grad(p)
        native.synchronize()
        if self._op == mpi_ops.Sum and mpi_ops.size() > 1:
            with torch.no_grad():
                for _, p in self._params:
                    p.grad.mul_(mpi_ops.size())
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
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    opt = cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
              gradient_predivide_factor)
    if optimizer.state_dict()["state"]:
        opt.load_state_dict(optimizer.state_dict())
    return opt
