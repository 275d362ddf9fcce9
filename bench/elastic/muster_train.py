"""bench/elastic, muster's side: Horovod's elastic recipe with muster.torch, one rank of an elastic cluster.

Trains the 25 M MLP for --steps steps, committing every --commit-every and,
with --check-every K, calling state.check_host_updates() after every K-th
step that does not commit (Horovod's way to admit new hosts sooner than the
next commit); logs each completed step (generation, step, time) and the
duration of each commit and check to <logdir>/muster-<worker>.jsonl. In its first world, rank --kill-rank
SIGKILLs itself before step --kill-step, after writing the time to
<logdir>/killed (once: not the replacement too).
"""
import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F

import muster.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import batch, mlp25m  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--commit-every", type=int, default=10)
p.add_argument("--check-every", type=int, default=0)
p.add_argument("--kill-rank", type=int, default=1)
p.add_argument("--kill-step", type=int, default=25)
p.add_argument("--logdir", required=True)
a = p.parse_args()

torch.set_num_threads(1)
hvd.init()
first = hvd.elastic.membership.generation()
worker = os.environ.get("MUSTER_WORKER_ID", "local")
torch.manual_seed(1)
model = mlp25m()
x, y = batch()
optimizer = torch.optim.SGD(model.parameters(), lr=0.001 * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
log = open(os.path.join(a.logdir, "muster-%s.jsonl" % worker), "a", buffering=1)


def record(**fields):
    fields.update(generation=hvd.elastic.membership.generation(), rank=hvd.rank(), time=time.time())
    log.write(json.dumps(fields) + "\n")


@hvd.elastic.run
def train(state):
    while state.step < a.steps:
        # Once per cluster: a replacement can reach the kill step again (in
        # rank --kill-rank's place) when it joined before the survivors got
        # back to it.
        killed = os.path.join(a.logdir, "killed")
        if (state.step == a.kill_step and hvd.rank() == a.kill_rank and hvd.elastic.membership.generation() == first
                and not os.path.exists(killed)):
            with open(killed, "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.time()
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        state.step += 1
        record(event="step", step=state.step, seconds=time.time() - t0)
        if state.step % a.commit_every == 0:
            t1 = time.time()
            state.commit()
            record(event="commit", step=state.step, seconds=time.time() - t1)
        elif a.check_every and state.step % a.check_every == 0:
            t1 = time.time()
            state.check_host_updates()
            record(event="check", step=state.step, seconds=time.time() - t1)


def on_reset():
    for g in optimizer.param_groups:
        g["lr"] = 0.001 * hvd.size()


state = hvd.elastic.TorchState(model, optimizer, step=0)
state.register_reset_callbacks([on_reset])
# commit() = save() (the copy into host memory: its own cost) + a broadcast
# of rank 0's membership flag (a sync point: a rank waits there for a slower
# peer instead of in the next allreduce). Both are logged.
_save = state.save


def timed_save():
    t = time.time()
    _save()
    record(event="save", step=state.step, seconds=time.time() - t)


state.save = timed_save
train(state)
