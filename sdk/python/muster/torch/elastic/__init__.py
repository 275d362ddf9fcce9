"""Horovod's elastic API on muster.torch: training that survives a lost rank.

A script written for Horovod elastic runs with only the import changed::

    import muster.torch as hvd          # was: import horovod.torch as hvd
    hvd.init()
    model, optimizer = Net(), torch.optim.SGD(params, lr=0.01 * hvd.size())
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch in range(state.batch, batches_per_epoch):
                step()
                if state.batch % 10 == 0:
                    state.commit()        # a copy in memory; raises HostsUpdatedInterrupt on a change
            state.batch = 0

    def on_state_reset():
        for group in optimizer.param_groups:
            group["lr"] = 0.01 * hvd.size()

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
    state.register_reset_callbacks([on_state_reset])
    train(state)

and is started as an elastic cluster, where musterd launches every rank and
forms the world itself::

    import muster
    muster.horovodrun(3, "train.py", min_np=2, max_np=3, reset_limit=5)

When a rank dies the others get HorovodInternalError from the collective in
flight, go back to the last commit and re-form without it (the next
generation); musterd launches a replacement, which joins at the generation
after and receives the state from rank 0. Outside an elastic cluster (under
mpirun, or one process) run() just calls the function.
"""
from .errors import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from .runner import run, run_fn  # noqa: F401
from .sampler import ElasticSampler  # noqa: F401
from .state import ObjectState, State  # noqa: F401
from .torch_state import TorchState  # noqa: F401

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler", "HorovodInternalError",
           "HostsUpdatedInterrupt"]
