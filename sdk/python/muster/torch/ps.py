"""Parameter-server training for PyTorch: TensorFlow's SyncReplicasOptimizer
over muster's parameter servers (muster-ps).

Each worker of a `muster.run_cluster(...)` ps cluster gets TF_CONFIG; this
module reads it through the C++ client (runtime/ps/client.h, bound by the
_muster_ps extension), so the cluster's addresses, this task's role and the
cluster's secret come from the same loader muster's C++ workers use. The
chief (task "chief", else worker 0) initialises the variables on the PS tasks
(or resumes them from the newest checkpoint), the other workers wait for it;
then every `step()` pushes this worker's gradients and pulls the new
parameters straight into the model's memory (no copies: the tensors' storage
is sent and received in place; the GIL is released while waiting). The PS
tasks average `replicas_to_aggregate` gradients per step and apply the
optimizer; with backup workers (replicas_to_aggregate < total_num_replicas)
a late worker's gradients are dropped as stale, as in TensorFlow, and counted
in `stats()`.

Example (a worker script started by run_cluster)::

    import torch
    import muster.torch.ps as ps

    model = Net()
    opt = ps.SyncReplicasOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), model,
                                   checkpoint_dir="ckpt", checkpoint_every=500)
    with opt:                               # done() at the end: the chief checkpoints, the PS tasks exit
        start = opt.initialize()            # the global step to resume from
        for x, y in batches(shard=opt.worker_index, of=opt.num_workers):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()                      # push, wait for the step's average, pull

The optimizer runs on the PS tasks, so only what they implement is accepted:
torch.optim.SGD (momentum 0 or 0.9, no dampening, no Nesterov) and
torch.optim.Adam (default betas and eps); weight decay is added to the
gradient on the worker, as torch does. A learning-rate change (a scheduler
on the wrapped optimizer) scales the pushed gradients, which is exact for SGD
and the usual approximation for momentum; Adam cannot follow one.

Errors are the classes of muster.runtime_errors: CommError (a PS task died:
the message names it, `rank` is its index), PeerTimeoutError (nothing
arrived within MUSTER_PS_TIMEOUT_MS, e.g. a worker died and there are no
backup workers), InvalidArgument, DataError (a checkpoint that does not fit).
After one, the optimizer is unusable.
"""
import importlib.machinery
import importlib.util
import os
import sys

import torch

from .. import extension_path as _extension_path
from ..runtime_errors import InvalidArgument

__all__ = ["SyncReplicasOptimizer"]


def _load_extension():
    """_muster_ps, beside the installed package or in the folders muster.runtime
    looks in for _muster_runtime ($MUSTER_RUNTIME_PATH, $MUSTER_BINARY_DIR/python/muster,
    the repository's build folders)."""
    try:
        from .. import _muster_ps as ext  # installed beside the package
        return ext
    except ImportError:
        pass
    for d in _extension_path.candidates():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(d, "_muster_ps" + suffix)
            if os.path.exists(path):
                spec = importlib.util.spec_from_file_location("muster._muster_ps", path)
                ext = importlib.util.module_from_spec(spec)
                sys.modules["muster._muster_ps"] = ext
                spec.loader.exec_module(ext)
                return ext
    raise ImportError("muster.torch.ps needs the _muster_ps extension for this Python (%s): run `make build` (or "
                      "`cmake --build build --target _muster_ps`), or set MUSTER_RUNTIME_PATH to the folder holding "
                      "_muster_ps*.so; looked in %s" % (sys.executable, ", ".join(_extension_path.candidates())))


_ps = _load_extension()


def _ps_optimizer(optimizer):
    """(name the PS tasks know, learning rate, weight decay) for a torch optimizer."""
    if len(optimizer.param_groups) != 1:
        raise InvalidArgument("SyncReplicasOptimizer: the optimizer has %d parameter groups; the parameter "
                              "servers apply one set of options to every variable" % len(optimizer.param_groups))
    g = optimizer.param_groups[0]
    if type(optimizer) is torch.optim.SGD:
        if g.get("dampening", 0) != 0 or g.get("nesterov", False) or g.get("maximize", False):
            raise InvalidArgument("SyncReplicasOptimizer: SGD with dampening, nesterov or maximize is not "
                                  "implemented on the parameter servers")
        if g["momentum"] not in (0, 0.9):
            raise InvalidArgument("SyncReplicasOptimizer: SGD momentum %s: the parameter servers run momentum 0 "
                                  "or 0.9" % g["momentum"])
        name = "momentum" if g["momentum"] else "sgd"
    elif type(optimizer) is torch.optim.Adam:
        if tuple(g["betas"]) != (0.9, 0.999) or g["eps"] != 1e-8 or g.get("amsgrad") or g.get("maximize"):
            raise InvalidArgument("SyncReplicasOptimizer: Adam runs on the parameter servers with betas "
                                  "(0.9, 0.999) and eps 1e-8 only (no amsgrad, maximize)")
        name = "adam"
    else:
        raise InvalidArgument("SyncReplicasOptimizer: %s is not implemented on the parameter servers; use "
                              "torch.optim.SGD (momentum 0 or 0.9) or torch.optim.Adam" % type(optimizer).__name__)
    return name, float(g["lr"]), float(g.get("weight_decay", 0) or 0)


def _named_parameters(model, optimizer):
    named = list(model.named_parameters()) if isinstance(model, torch.nn.Module) else list(model)
    named = [(n, p) for n, p in named if p.requires_grad]
    if not named:
        raise InvalidArgument("SyncReplicasOptimizer: the model has no trainable parameters")
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    in_model = {id(p) for _, p in named}
    for n, p in named:
        if id(p) not in in_optimizer:
            raise InvalidArgument("SyncReplicasOptimizer: parameter '%s' is not in the optimizer" % n)
        if p.device.type != "cpu" or p.dtype != torch.float32 or not p.is_contiguous():
            raise InvalidArgument("SyncReplicasOptimizer: parameter '%s' must be a contiguous float32 CPU tensor "
                                  "(got %s on %s)" % (n, p.dtype, p.device))
    if in_optimizer - in_model:
        raise InvalidArgument("SyncReplicasOptimizer: the optimizer holds %d parameters that are not the model's "
                              "trainable parameters" % len(in_optimizer - in_model))
    if len({n for n, _ in named}) != len(named):
        raise InvalidArgument("SyncReplicasOptimizer: parameter names are not unique")
    return named


class SyncReplicasOptimizer:
    """Wraps `optimizer` (whose options the PS tasks apply) for the parameters
    of `model` (an nn.Module, or named_parameters()). Registration order is
    the model's, so every worker must build the same model. The parameters'
    storage is registered as it is: move or cast the model (.to(), .double())
    before, never after, constructing this.

    replicas_to_aggregate: gradients averaged per step (default: every worker).
    total_num_replicas: workers in the job (default: every worker in TF_CONFIG).
    checkpoint_dir / checkpoint_every: the chief resumes from the newest
    checkpoint in checkpoint_dir and writes one every checkpoint_every steps
    and at done() (values and the optimizer's state on the PS tasks).
    timeout_ms: how long to wait for a PS answer (default MUSTER_PS_TIMEOUT_MS, else 120 s).
    mode: "sync" (SyncReplicas) or "async" (every push applied at once).
    """

    def __init__(self, optimizer, model, replicas_to_aggregate=None, total_num_replicas=None,
                 checkpoint_dir=None, checkpoint_every=0, timeout_ms=None, mode="sync"):
        self.optimizer = optimizer
        self._name, self._lr0, self._weight_decay = _ps_optimizer(optimizer)
        self._params = _named_parameters(model, optimizer)
        self._client = _ps.Client(
            replicas_to_aggregate=int(replicas_to_aggregate or 0), total_num_replicas=int(total_num_replicas or 0),
            optimizer=self._name, learning_rate=self._lr0, mode=mode, checkpoint_dir=checkpoint_dir or "",
            checkpoint_every=int(checkpoint_every or 0), timeout_ms=int(timeout_ms or 0))
        # The parameters' own storage: pulls write the new values into it.
        self._client.register_variables([(n, p.detach().numpy()) for n, p in self._params])
        self._zeros = {}
        self._initialized = False

    # -- the training loop ------------------------------------------------

    def initialize(self):
        """The chief initialises the PS variables from this model (or the newest
        checkpoint), every worker then holds them; returns the global step to
        start from. step() calls it on first use."""
        if not self._initialized:
            self._client.initialize_or_wait()
            self._initialized = True
        return self._client.global_step

    def zero_grad(self, set_to_none=False):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        """Pushes every parameter's .grad (zeros where None), waits until the
        PS tasks have applied this step, pulls the parameters into the model.
        Returns the closure's loss, if a closure is given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.initialize()
        self._client.step(self._gradients())
        return loss

    def _gradients(self):
        lr = float(self.optimizer.param_groups[0]["lr"])
        scale = 1.0
        if lr != self._lr0:
            if self._name == "adam":
                raise InvalidArgument("SyncReplicasOptimizer: the learning rate changed from %g to %g, but Adam runs "
                                      "on the parameter servers at the rate it started with" % (self._lr0, lr))
            scale = lr / self._lr0
        out = []
        for n, p in self._params:
            g = p.grad
            if g is None:
                if n not in self._zeros:
                    self._zeros[n] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                out.append(self._zeros[n].numpy())
                continue
            g = g.detach()
            if self._weight_decay:
                g = g.add(p.detach(), alpha=self._weight_decay)
            if scale != 1.0:
                g = g * scale
            if g.dtype != torch.float32 or not g.is_contiguous() or g.device.type != "cpu":
                g = g.to("cpu", torch.float32).contiguous()
            out.append(g.numpy())  # a view: the C++ client reads the gradient's own memory
        return out

    def save_checkpoint(self):
        """The chief writes a checkpoint now (values and optimizer state); returns its path."""
        return self._client.save_checkpoint()

    def done(self):
        """Tells the PS tasks this worker has finished (the chief checkpoints
        first if checkpoint_dir is set); they exit when every worker is done."""
        self._client.done()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.done()
        return False

    # -- who this worker is and what happened -----------------------------

    @property
    def global_step(self):
        return self._client.global_step

    @property
    def worker_index(self):
        """0 for the chief; the shard of the data this worker reads."""
        return self._client.worker_index

    @property
    def num_workers(self):
        return self._client.num_workers

    @property
    def is_chief(self):
        return self._client.is_chief

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def stats(self):
        """bytes_pushed, bytes_pulled, checkpoints_written, last_checkpoint,
        stale_dropped (this worker's gradient slices the PS tasks dropped as
        stale) and stale_steps (steps with at least one dropped)."""
        return self._client.stats()
