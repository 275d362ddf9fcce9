"""hvd.elastic.run: the loop that keeps a training function going while ranks come and go.

    @hvd.elastic.run
    def train(state):
        ...

On each (re)start the state is synced from rank 0, then `train(state)` runs.
When a collective fails (HorovodInternalError: a rank died) every surviving
rank restores the last commit; when a membership change is announced
(HostsUpdatedInterrupt, at commit() or check_host_updates()) the state
stays as it is: it is committed where it stands and that is what the sync
hands to a newcomer. Either way the world is torn down
and formed again through musterd as the next generation (hvd.shutdown() and
hvd.init()), the reset callbacks run and the loop starts over. A new rank
starts its script, calls hvd.init() (joining at the next generation) and
enters the same loop, receiving the state at its first sync.

No collective may come between hvd.init() and the call of the decorated
function (as in Horovod): a rank joining later would meet the survivors'
state sync with another collective.
"""
import functools

from . import membership
from .errors import HorovodInternalError, HostsUpdatedInterrupt


def _reset():
    from .. import world
    membership.stop()
    world.shutdown()
    world.init()


def run_fn(func, reset):
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        reset_required = False
        redone = 0
        try:
            while True:
                try:
                    if reset_required:
                        reset()
                        state.on_reset()
                        state._report = (membership.generation(), redone)
                        reset_required = False
                    membership.watch()
                    if not skip_sync:
                        state.sync()
                    return func(state, *args, **kwargs)
                except HorovodInternalError as err:
                    if not membership.in_elastic_cluster():
                        raise _not_elastic(err)
                    redone = state._steps_since_commit
                    state.restore()
                    state._steps_since_commit = 0
                    skip_sync = False
                    reset_required = True
                except HostsUpdatedInterrupt as interrupt:
                    # No rollback: every rank raised at the same call, after
                    # the same step, so the state as it stands is a
                    # consistent commit. Saved here because the sync below
                    # hands out (and restores) the last save: without it a
                    # change seen by check_host_updates() between commits
                    # would put the counters back to the last commit while
                    # the model kept the steps since, and they'd be trained
                    # twice.
                    state.save()
                    state._steps_since_commit = 0
                    redone = 0
                    skip_sync = interrupt.skip_sync
                    reset_required = True
        finally:
            membership.stop()
    return wrapper


def _not_elastic(err):
    err.message += (" (this rank is not part of an elastic cluster, so its world cannot re-form: start it with "
                    "muster.horovodrun(np, script, min_np=...))")
    return err


def run(func):
    """Decorator: runs `func(state, ...)` across failures and membership changes (Horovod's hvd.elastic.run)."""
    return run_fn(func, _reset)
