"""muster.torch.elastic in one process: label unit.

The state classes, the sampler and the run loop's control flow, with the
world of one process (hvd.init() without a launcher) and the world's reset
and membership check replaced where a test needs a failure or a change:
- TorchState: commit copies the model and the optimizer (into tensors it
  allocated once), restore brings both back exactly, attributes too;
- run(): HorovodInternalError restores and re-forms, HostsUpdatedInterrupt
  re-forms without a rollback (skip_sync as raised; raised by
  check_host_updates between commits, the steps since the commit are kept), reset callbacks run
  after each re-formation, the steps since the last commit are what is
  reported as redone; outside an elastic cluster a failure is not retried;
- ElasticSampler: the epoch's remaining samples are spread over the world.
"""
import json
import os

import pytest
import torch

import muster.torch as hvd
from muster.torch.elastic import membership
from muster.torch.elastic import runner as elastic_run


@pytest.fixture(autouse=True)
def world():
    hvd.init()
    yield
    hvd.shutdown()


def make():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, opt


def step(model, opt):
    opt.zero_grad()
    model(torch.ones(5, 4)).sum().backward()
    opt.step()


def snapshot(model, opt):
    return ({k: v.clone() for k, v in model.state_dict().items()},
            {k: v["momentum_buffer"].clone() for k, v in opt.state_dict()["state"].items()})


def assert_same(a, b):
    for x, y in zip(a[0].values(), b[0].values()):
        assert torch.equal(x, y)
    assert a[1].keys() == b[1].keys()
    for k in a[1]:
        assert torch.equal(a[1][k], b[1][k])


def test_torch_state_commit_and_restore_are_exact():
    model, opt = make()
    state = hvd.elastic.TorchState(model, opt, epoch=0, batch=0)
    step(model, opt)
    state.batch = 1
    state.commit()
    committed = snapshot(model, opt)
    saved = [t.data_ptr() for t in state._handlers["model"]._saved.values()]
    for _ in range(3):
        step(model, opt)
    state.batch = 4
    assert state._steps_since_commit == 3
    state.restore()
    assert_same(snapshot(model, opt), committed)
    assert state.batch == 1
    # A later commit copies into the same tensors (no new allocation per commit).
    step(model, opt)
    state.commit()
    assert [t.data_ptr() for t in state._handlers["model"]._saved.values()] == saved
    assert state._steps_since_commit == 0


def test_optimizer_restore_copies_into_the_live_state():
    # Adam: a tensor "step" and two moment buffers per parameter; a learning
    # rate changed after the commit comes back too.
    torch.manual_seed(3)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    state = hvd.elastic.TorchState(model, opt)
    step(model, opt)
    state.commit()
    committed = {k: {n: (t.clone() if torch.is_tensor(t) else t) for n, t in v.items()}
                 for k, v in opt.state_dict()["state"].items()}
    live = [t.data_ptr() for v in opt.state.values() for t in v.values() if torch.is_tensor(t)]
    for _ in range(2):
        step(model, opt)
    opt.param_groups[0]["lr"] = 0.5
    state.restore()
    after = opt.state_dict()["state"]
    for k, v in committed.items():
        for n, t in v.items():
            assert torch.equal(after[k][n], t) if torch.is_tensor(t) else after[k][n] == t, (k, n)
    assert opt.param_groups[0]["lr"] == 0.01
    # In place: no new tensors (a recovery allocates nothing of the model's size).
    assert [t.data_ptr() for v in opt.state.values() for t in v.values() if torch.is_tensor(t)] == live
    step(model, opt)  # and the optimizer still steps


def test_optimizer_restore_to_a_commit_before_the_first_step():
    model, opt = make()
    state = hvd.elastic.TorchState(model, opt)  # saved at construction: no optimizer state yet
    step(model, opt)
    assert opt.state
    state.restore()
    assert not opt.state, "the momentum that did not exist at the commit is gone"
    step(model, opt)


def test_optimizer_restore_falls_back_when_the_layout_changed():
    model, opt = make()
    state = hvd.elastic.TorchState(model, opt)
    step(model, opt)
    state.commit()
    committed = snapshot(model, opt)
    opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(2))]})  # another group since the commit
    try:
        state.restore()
    except ValueError as e:  # load_state_dict's own complaint: the layouts differ
        assert "parameter group" in str(e)
    else:
        raise AssertionError("restore() accepted a commit of another layout")
    assert_same(snapshot(model, opt), committed)


def test_object_state_syncs_through_its_broadcast():
    seen = []

    def bcast(obj):
        seen.append(dict(obj))
        return {"epoch": 7, "batch": 2}
    state = hvd.elastic.ObjectState(bcast, lambda: 0, epoch=0, batch=0)
    state.sync()
    assert (state.epoch, state.batch) == (7, 2) and seen == [{"epoch": 0, "batch": 0}]


def in_elastic_cluster(monkeypatch, generation, checks=None):
    """Makes this process a rank of an elastic cluster at `generation` (rank 0's poller of musterd off);
    `checks`, if given, are what successive membership checks answer. Returns the reports sent to musterd."""
    reports = []
    monkeypatch.setattr(membership, "in_elastic_cluster", lambda: True)
    monkeypatch.setattr(membership, "watch", lambda: None)
    monkeypatch.setattr(membership, "generation", lambda: generation)
    monkeypatch.setattr(membership, "report", lambda gen, redone: reports.append((gen, redone)))
    if checks is not None:
        answers = iter(checks)
        monkeypatch.setattr(membership, "check", lambda: next(answers))
    return reports


def test_run_restores_and_reforms_after_a_failure(monkeypatch):
    reports = in_elastic_cluster(monkeypatch, 2)
    model, opt = make()
    state = hvd.elastic.TorchState(model, opt, batch=0)
    resets, callbacks = [], []
    state.register_reset_callbacks([lambda: callbacks.append(state.batch)])
    calls = []

    def train(state):
        calls.append(state.batch)
        while state.batch < 6:
            step(model, opt)
            state.batch += 1
            if state.batch == 2:
                state.commit()
            if state.batch == 5 and len(calls) == 1:
                raise hvd.elastic.HorovodInternalError("rank 1 has exited")
        return "done"

    wrapped = elastic_run.run_fn(train, lambda: resets.append(1))
    assert wrapped(state) == "done"
    # Back to the commit at batch 2; the three steps after it are redone.
    assert calls == [0, 2] and resets == [1] and callbacks == [2]
    assert reports == [(2, 3)]


def test_hosts_updated_reforms_without_rollback(monkeypatch):
    in_elastic_cluster(monkeypatch, 3, [(True, False)] + [(False, False)] * 4)
    synced = []
    state = hvd.elastic.ObjectState(lambda obj: synced.append(1) or obj, lambda: 0, batch=0)
    resets = []

    def train(state):
        while state.batch < 3:
            state.batch += 1
            state.commit()  # the first check says: a newcomer waits
        return state.batch

    assert elastic_run.run_fn(train, lambda: resets.append(1))(state) == 3
    assert resets == [1]
    assert len(synced) == 2  # skip_sync=False: synced again after the change (a newcomer needs the state)


def test_a_change_seen_between_commits_keeps_the_steps_since(monkeypatch):
    # Horovod's elastic examples call check_host_updates() every few batches
    # and commit() more rarely. A change found there re-forms the world with
    # nothing rolled back: counters, model and optimizer stay where the
    # check found them, and the sync hands that state on.
    reports = in_elastic_cluster(monkeypatch, 3, [(False, False), (True, False)] + [(False, False)] * 10)
    model, opt = make()
    state = hvd.elastic.TorchState(model, opt, batch=0)
    at_change, resets, starts = [], [], []

    def train(state):
        starts.append(state.batch)
        while state.batch < 6:
            step(model, opt)
            state.batch += 1
            if state.batch == 1:
                state.commit()  # check 1: nothing
            elif state.batch == 3 and len(starts) == 1:
                at_change.append(snapshot(model, opt))
                state.check_host_updates()  # check 2: a newcomer waits
        return state.batch

    assert elastic_run.run_fn(train, lambda: resets.append(1))(state) == 6
    assert resets == [1] and starts == [0, 3]  # resumed after batch 3, not back at the commit of batch 1
    # What the sync hands a newcomer (and restores here) is the state at the
    # change: a rank that joined would start from exactly these values.
    state.restore()
    assert state.batch == 3
    assert_same(snapshot(model, opt), at_change[0])
    assert reports == [(3, 0)]


def test_outside_an_elastic_cluster_a_failure_is_not_retried(monkeypatch):
    monkeypatch.delenv("MUSTER_RENDEZVOUS_URL", raising=False)
    state = hvd.elastic.ObjectState(lambda obj: obj, lambda: 0, batch=0)

    def train(state):
        raise hvd.elastic.HorovodInternalError("rank 1 has exited")

    with pytest.raises(hvd.elastic.HorovodInternalError) as err:
        hvd.elastic.run(train)(state)
    assert "not part of an elastic cluster" in str(err.value)


def test_commit_outside_an_elastic_cluster_checks_nothing(monkeypatch):
    monkeypatch.delenv("MUSTER_RENDEZVOUS_URL", raising=False)
    model, opt = make()
    state = hvd.elastic.TorchState(model, opt)
    state.commit()
    state.check_host_updates()  # no broadcast, no interrupt


def test_elastic_sampler_spreads_what_is_left_of_the_epoch(monkeypatch):
    data = list(range(20))
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=1)
    order = list(iter(sampler))
    assert sorted(order) == data and len(sampler) == 20
    sampler.record_batch(0, 4)
    sampler.record_batch(1, 4)
    sampler.load_state_dict(sampler.state_dict())  # what a reset does after the sync
    rest = list(iter(sampler))
    assert rest == order[8:]
    # The same state in a world of 3: rank 1 of 3 takes every third of the rest, padded.
    from muster.torch.elastic import sampler as sampler_module
    monkeypatch.setattr(sampler_module, "size", lambda: 3)
    monkeypatch.setattr(sampler_module, "rank", lambda: 1)
    sampler.reset()
    assert len(sampler) == 4 and list(iter(sampler)) == (order[8:] + order[8:9])[1:12:3]
    sampler.set_epoch(1)
    assert sampler.processed_num == 0 and sorted(sampler.remaining_indices) == data


def test_distributed_optimizer_in_an_elastic_cluster_binds_at_first_backward(monkeypatch):
    monkeypatch.setenv("MUSTER_RENDEZVOUS_URL", "http://127.0.0.1:9")
    model, opt = make()
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    assert opt._native is None  # no collective at construction
    step(model, opt)
    assert opt._native is not None
    before = [p.clone() for p in model.parameters()]
    # A re-formation: shutdown unbinds (gradients become plain tensors), the next backward binds again.
    hvd.shutdown()
    assert opt._native is None and all(p.grad is not None for p in model.parameters())
    # This process is no rank of a real elastic cluster: its next world is the world of one again.
    monkeypatch.delenv("MUSTER_RENDEZVOUS_URL")
    hvd.init()
    step(model, opt)
    assert opt._native is not None
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def _scenarios():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic_loop_scenarios.json")
    with open(path) as f:
        return json.load(f)["scenarios"]


@pytest.mark.parametrize("sc", _scenarios(), ids=lambda sc: sc["name"])
def test_the_shared_scenarios_give_the_cpp_loops_answers(monkeypatch, sc):
    # tests/elastic_loop_scenarios.json: the C++ loop (elastic_run_test) gives the same answers.
    worlds = [1]
    reports = []
    monkeypatch.setattr(membership, "in_elastic_cluster", lambda: True)
    monkeypatch.setattr(membership, "watch", lambda: None)
    monkeypatch.setattr(membership, "generation", lambda: worlds[0])
    monkeypatch.setattr(membership, "report", lambda gen, redone: reports.append([gen, redone]))
    state = hvd.elastic.ObjectState(lambda obj: obj, lambda: 0, step=0, weight=0.0)
    fail_at, change_at = set(sc["fail_at"]), set(sc["change_at"])

    def check():
        if state.step in change_at:
            change_at.discard(state.step)
            return True, False  # a newcomer waits: sync
        return False, False
    monkeypatch.setattr(membership, "check", check)
    starts = []

    def train(state):
        starts.append(state.step)
        while state.step < sc["steps"]:
            state.step += 1
            state.weight += 1.0
            state._step_done()  # what TorchState's optimizer hook calls
            if state.step in fail_at:
                fail_at.discard(state.step)
                raise hvd.elastic.HorovodInternalError("scenario: a collective failed after step %d" % state.step)
            if state.step % sc["commit_every"] == 0:
                state.commit()
        return state.step

    def reset():
        worlds[0] += 1

    assert elastic_run.run_fn(train, reset)(state) == sc["final"]
    assert starts == sc["starts"]
    assert reports == sc["reports"]
    assert state.weight == float(sc["final"]), "a redone step counted twice"
    assert worlds[0] == sc["worlds"]
