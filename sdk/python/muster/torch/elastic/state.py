"""State: what an elastic run keeps in step across its ranks and rolls back.

A State holds the training state a script registers with it. commit() saves
a copy in host memory (and checks for a membership change); restore() goes
back to the last commit after a failure; sync() copies rank 0's state to
every rank when a world forms (rank 0 is always a rank that held the state:
musterd orders the survivors first). Callbacks registered with
register_reset_callbacks() run after each re-formation, before the sync (to
rescale a learning rate with the new size, say).

ObjectState holds plain Python objects given as keyword arguments, exposed
as attributes (state.epoch, state.batch).

Example::

    state = hvd.elastic.ObjectState(epoch=0, batch=0)
    state.epoch += 1
    state.commit()
"""
from . import membership
from .errors import HostsUpdatedInterrupt


class State(object):
    """The base of every elastic state (Horovod's hvd.elastic.State)."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []
        # Steps done since the last commit (TorchState counts optimizer
        # steps): what a failure makes the ranks redo.
        self._steps_since_commit = 0
        self._report = None  # (generation, batches redone), sent after the first step of a new world

    def register_reset_callbacks(self, callbacks):
        """Functions to call after the world re-formed (a rank left or joined), before the state is synced."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state in host memory, then checks for a membership change (HostsUpdatedInterrupt)."""
        self.save()
        self._steps_since_commit = 0
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank at once when the world is about to change."""
        changed, skip_sync = membership.check()
        if changed:
            raise HostsUpdatedInterrupt(skip_sync)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        pass

    # -- recovery accounting (muster: what the cluster's history shows)
    def _step_done(self):
        self._steps_since_commit += 1
        if self._report is not None:
            gen, redone = self._report
            self._report = None
            if self._rank() == 0:
                membership.report(gen, redone)


class ObjectState(State):
    """Plain Python objects (keyword arguments), as attributes; broadcast from rank 0 on sync."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super(ObjectState, self).__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)
