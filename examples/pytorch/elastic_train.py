"""Fashion-MNIST written for Horovod elastic; only the import says muster.

    c = muster.horovodrun(3, "examples/pytorch/elastic_train.py", min_np=2, max_np=3)

The script is Horovod's elastic pattern as Horovod documents it: the
training loop is a function decorated with hvd.elastic.run, its progress
(model, optimizer, epoch and batch) lives in an hvd.elastic.TorchState,
state.commit() every --commit-every batches marks what survives a failure.
When a rank dies, the others get HorovodInternalError from the collective in
flight, go back to the last commit and re-form their world through musterd;
musterd launches a replacement, which joins at the next generation and
receives the state from a survivor at its first sync. Rank 0 prints
`final test_accuracy=...` at the end.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

import muster.torch as hvd  # was: import horovod.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_data  # noqa: E402  (beside this script)

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--data-dir", default=fashion_data.DEFAULT_DIR)
ap.add_argument("--epochs", type=int, default=2)
ap.add_argument("--limit", type=int, default=12000, help="training images (0: all)")
ap.add_argument("--test-limit", type=int, default=2000)
ap.add_argument("--global-batch", type=int, default=96, help="split over the ranks of each world")
ap.add_argument("--commit-every", type=int, default=10, help="batches between commits")
ap.add_argument("--lr", type=float, default=0.05)
args = ap.parse_args()

hvd.init()
torch.manual_seed(1)
train_data = fashion_data.load(args.data_dir, "train", args.limit)
test_data = fashion_data.load(args.data_dir, "t10k", args.test_limit)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9),
                                     named_parameters=model.named_parameters())
steps = fashion_data.steps_per_epoch(len(train_data), args.global_batch)


@hvd.elastic.run
def train(state):
    # The global batch stays the same whatever the world's size, so the
    # schedule (and the result) does not depend on who is left.
    while state.epoch < args.epochs:
        for x, y in fashion_data.shard_batches(train_data, state.epoch, 7, args.global_batch, hvd.rank(),
                                               hvd.size(), skip=state.batch):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            state.batch += 1
            if state.batch % args.commit_every == 0:
                state.commit()
        if hvd.rank() == 0:
            print("epoch %d done with %d ranks (%d steps)" % (state.epoch + 1, hvd.size(), steps), flush=True)
        state.epoch += 1
        state.batch = 0
        state.commit()


state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
train(state)

correct, total, _ = fashion_data.evaluate_shard(model, test_data, hvd.rank(), hvd.size())
counts = hvd.allreduce(torch.tensor([float(correct), float(total)]), op=hvd.Sum, name="accuracy")
if hvd.rank() == 0:
    print("final test_accuracy=%.4f" % (counts[0] / counts[1]).item(), flush=True)
