"""A training script in the shape of Horovod's own elastic PyTorch test
(test/integration/data/elastic_torch_main.py), with only the import changed:
`import muster.torch as hvd`. The elastic integration tests and bench/elastic
run it as the ranks of an elastic cluster.

It trains a small model on a fixed random batch (the same on every rank and
after every restart), commits every --batches-per-commit batches (and
with --batches-per-host-check N checks for a membership change every N
batches between, as Horovod's elastic MNIST example does), and writes:
- <logdir>/steps-<worker>.jsonl: one line per completed batch (generation,
  rank, size, epoch, batch, time);
- <logdir>/final-<worker>.json at the end: the parameters' sha256 and the
  number of batches done.
Failures it can cause itself (each once per cluster, in the rank's first
world, so a replacement does not repeat them): --kill "RANK:EPOCH:BATCH" SIGKILLs that
rank before the batch; --kill-in-commit "RANK:EPOCH:BATCH" SIGKILLs it in
the middle of that batch's commit (the model saved, the optimizer not yet).
"""
import argparse
import hashlib
import json
import os
import signal
import time

import torch
import torch.nn.functional as F

import muster.torch as hvd   # was: import horovod.torch as hvd

parser = argparse.ArgumentParser(description="PyTorch elastic test (muster)")
parser.add_argument("--batches-per-epoch", type=int, default=12)
parser.add_argument("--batches-per-commit", type=int, default=4)
parser.add_argument("--batches-per-host-check", type=int, default=0,
                    help="call state.check_host_updates() every N batches that do not commit (0: never)")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-wait", type=float, default=0.0, help="seconds each batch takes at least")
parser.add_argument("--hidden", type=int, default=64, help="width of the hidden layer")
parser.add_argument("--logdir", required=True)
parser.add_argument("--kill", default="", help="RANK:EPOCH:BATCH (first world only)")
parser.add_argument("--kill-in-commit", default="", help="RANK:EPOCH:BATCH (first world only)")
args = parser.parse_args()

hvd.init()
worker = os.environ.get("MUSTER_WORKER_ID", "local")
first_generation = hvd.elastic.membership.generation()

torch.manual_seed(42)
data = torch.randn(32, 16)
target = torch.randint(0, 4, (32,))
model = torch.nn.Sequential(torch.nn.Linear(16, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 4))
lr = 0.01
optimizer = torch.optim.SGD(model.parameters(), lr=lr * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())


def parse(spec):
    return tuple(int(x) for x in spec.split(":")) if spec else None


kill_at, kill_in_commit = parse(args.kill), parse(args.kill_in_commit)


def in_first_world():
    return hvd.elastic.membership.generation() == first_generation


def first_time(what):
    """True once per cluster for `what` (a marker in the log directory): a
    replacement takes the dead rank's number and, joining before the
    survivors got back to the same batch, would otherwise die there too."""
    marker = os.path.join(args.logdir, "done-" + what)
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def log_step(state):
    with open(os.path.join(args.logdir, "steps-%s.jsonl" % worker), "a") as f:
        f.write(json.dumps({"generation": hvd.elastic.membership.generation(), "rank": hvd.rank(),
                            "size": hvd.size(), "epoch": state.epoch, "batch": state.batch,
                            "time": time.time()}) + "\n")


@hvd.elastic.run
def train(state):
    while state.epoch < args.epochs:
        while state.batch < args.batches_per_epoch:
            if kill_at == (hvd.rank(), state.epoch, state.batch) and in_first_world() and first_time("kill"):
                os.kill(os.getpid(), signal.SIGKILL)
            started = time.time()
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data), target)
            loss.backward()
            optimizer.step()
            state.batch += 1
            if args.batch_wait:
                time.sleep(max(0.0, args.batch_wait - (time.time() - started)))
            log_step(state)
            if state.batch % args.batches_per_commit == 0:
                if (kill_in_commit == (hvd.rank(), state.epoch, state.batch) and in_first_world()
                        and first_time("kill-in-commit")):
                    state._handlers["model"].save()
                    os.kill(os.getpid(), signal.SIGKILL)   # the optimizer's half of the commit never happens
                state.commit()
            elif args.batches_per_host_check and state.batch % args.batches_per_host_check == 0:
                state.check_host_updates()
        state.epoch += 1
        state.batch = 0
        state.commit()


def on_state_reset():
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr * hvd.size()


state = hvd.elastic.TorchState(model, optimizer, batch=0, epoch=0)
state.register_reset_callbacks([on_state_reset])
train(state)

digest = hashlib.sha256()
for p in model.parameters():
    digest.update(p.detach().numpy().tobytes())
with open(os.path.join(args.logdir, "final-%s.json" % worker), "w") as f:
    json.dump({"sha256": digest.hexdigest(), "rank": hvd.rank(), "size": hvd.size(), "epoch": state.epoch,
               "generation": hvd.elastic.membership.generation()}, f)
