"""TorchState: a model, an optimizer and plain attributes as one elastic state.

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

The model's and the optimizer's state_dicts are saved by commit() into
tensors allocated once (later commits copy into them, so a commit costs one
memory copy of the parameters and the optimizer's buffers), restored into
the live objects by restore(), and broadcast from rank 0 by sync(). Other
keyword arguments are ObjectState attributes. An ElasticSampler given as an
attribute is saved, restored and synced too. Optimizer steps are counted
(the batches a failure makes the ranks redo, shown in the cluster's
history).
"""
import torch

from ..functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters, load_state_in_place
from ..world import rank
from .sampler import ElasticSampler
from .state import ObjectState


def _clone_into(saved, live):
    """A copy of `live` (a state_dict, nested), reusing `saved`'s tensors where they fit."""
    if isinstance(live, torch.Tensor):
        if isinstance(saved, torch.Tensor) and saved.shape == live.shape and saved.dtype == live.dtype:
            saved.copy_(live.detach())
            return saved
        return live.detach().clone()
    if isinstance(live, dict):
        prev = saved if isinstance(saved, dict) else {}
        return {k: _clone_into(prev.get(k), v) for k, v in live.items()}
    if isinstance(live, list):
        prev = saved if isinstance(saved, list) and len(saved) == len(live) else [None] * len(live)
        return [_clone_into(p, v) for p, v in zip(prev, live)]
    if isinstance(live, tuple):
        prev = saved if isinstance(saved, tuple) and len(saved) == len(live) else (None,) * len(live)
        return tuple(_clone_into(p, v) for p, v in zip(prev, live))
    return live


class StateHandler(object):
    def __init__(self, value):
        self.value = value
        self._saved = None
        self.save()

    def set_value(self, value):
        self.value = value
        self.save()

    def save(self):
        self._saved = _clone_into(self._saved, self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        raise NotImplementedError()


class ModelStateHandler(StateHandler):
    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(StateHandler):
    def __init__(self, value):
        super().__init__(value)
        self.steps = None  # called after each step (TorchState counts them)
        wrapped = value.step

        def step(*args, **kwargs):
            out = wrapped(*args, **kwargs)
            if self.steps is not None:
                self.steps()
            return out
        value.step = step  # the instance's own step: counts, then the class's runs as before

    def restore(self):
        if not load_state_in_place(self.value, self._saved):
            self.value.load_state_dict(self._saved)

    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class SamplerStateHandler(StateHandler):
    def save(self):
        self._saved = dict(self.value.state_dict())

    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), root_rank=0))


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    return _handler_registry


def set_handler_registry(registry):
    global _handler_registry
    _handler_registry = registry


def _handler_for(value):
    for kind, handler in _handler_registry:
        if isinstance(value, kind):
            return handler(value)
    return None


class TorchState(ObjectState):
    """A PyTorch training state: model, optimizer, and attributes (Horovod's hvd.elastic.TorchState)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(dict(model=model, optimizer=optimizer))
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is not None:
                handlers[name] = handler
            else:
                plain[name] = value
        self._handlers = handlers
        for name, handler in handlers.items():
            setattr(self, name, handler.value)
            if isinstance(handler, OptimizerStateHandler):
                handler.steps = self._step_done
        super(TorchState, self).__init__(bcast_object=broadcast_object, get_rank=rank, **plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super(TorchState, self).save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super(TorchState, self).restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super(TorchState, self).sync()

    def __setattr__(self, name, value):
        if hasattr(self, "_handlers") and name in self._handlers and hasattr(self, name):
            self._handlers[name].set_value(value)
        super().__setattr__(name, value)
