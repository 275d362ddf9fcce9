#!/usr/bin/env python3
"""Fashion-MNIST with DistributedDataParallel, written the way PyTorch's DDP
tutorial writes a torchrun script: the launcher's environment (RANK,
LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) is all it needs, the data
is split with DistributedSampler, and the model is wrapped in DDP.

    torchrun --nproc_per_node=2 ddp_train.py --epochs 2          # by hand, on one host
    muster.torchrun(2, "examples/pytorch/ddp_train.py", args=["--epochs", "2"])   # from a notebook
    python3 ddp_train.py                                           # one process (world of 1)

--backend gloo (default) is PyTorch's CPU backend; --backend muster runs the
same script on muster's allreduce (`import muster.torch.distributed`
registers it). --batch-size is per process, as in the tutorial: 2 processes
at 32 train on the same 64 images per step as 1 process at 64.

Rank 0 prints one line per epoch and, at the end,
`final test_accuracy=0.7712`, `final loss=...`, `final images_per_sec=...`;
--save PATH writes the trained parameters (torch.save of the state dict).
The data is Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist
or --data-dir); nothing is downloaded.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_data  # noqa: E402  (the IDX reader beside this script)


class Net(nn.Module):
    """A LeNet-style CNN for 28x28 images."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def ddp_setup(backend):
    """Joins the process group torchrun's environment describes (env://)."""
    if backend == "muster":
        import muster.torch.distributed  # noqa: F401 - registers the "muster" backend
    if "RANK" not in os.environ:  # started without a launcher: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", "29500"))
    dist.init_process_group(backend=backend)


class Trainer:
    def __init__(self, model, train_data, optimizer, rank):
        self.rank = rank
        self.model = DDP(model)
        self.train_data = train_data
        self.optimizer = optimizer

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(source), targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        total, steps = 0.0, 0
        for source, targets in self.train_data:
            total += self._run_batch(source, targets)
            steps += 1
        return total / max(steps, 1), steps

    def train(self, epochs):
        images, start, loss = 0, time.perf_counter(), float("nan")
        for epoch in range(epochs):
            loss, steps = self._run_epoch(epoch)
            images += steps * self.train_data.batch_size * dist.get_world_size()
            if self.rank == 0:
                print("epoch %d loss %.4f" % (epoch + 1, loss), flush=True)
        return loss, images / (time.perf_counter() - start)


def evaluate(model, data, rank, world_size):
    """Test accuracy over every rank's share of the test set (rank, rank + world_size, ...)."""
    correct, total, _ = fashion_data.evaluate_shard(model, data, rank, world_size)
    counts = torch.tensor([correct, total], dtype=torch.float64)
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="gloo", help="gloo (default) or muster")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32, help="images per process and step (default 32)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--limit", type=int, default=6000, help="train on the first N images (0: all 60000)")
    p.add_argument("--test-limit", type=int, default=0, help="test on the first N images (0: all 10000)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--data-dir", default=fashion_data.DEFAULT_DIR)
    p.add_argument("--save", help="rank 0 writes the trained state dict here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    ddp_setup(args.backend)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    train = fashion_data.load(args.data_dir, "train", args.limit)
    test = fashion_data.load(args.data_dir, "t10k", args.test_limit)
    dataset = TensorDataset(train.images, train.labels)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False, drop_last=True,
                        sampler=DistributedSampler(dataset, seed=args.seed))
    torch.manual_seed(args.seed)  # the same initial model everywhere (DDP also broadcasts rank 0's)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if rank == 0:
        print("backend=%s world_size=%d images=%d batch_per_process=%d steps_per_epoch=%d"
              % (args.backend, world_size, len(dataset), args.batch_size, len(loader)), flush=True)

    loss, images_per_sec = Trainer(model, loader, optimizer, rank).train(args.epochs)
    accuracy = evaluate(model, test, rank, world_size)
    if rank == 0:
        print("final test_accuracy=%.4f" % accuracy)
        print("final loss=%.4f" % loss)
        print("final images_per_sec=%.0f" % images_per_sec, flush=True)
        if args.save:
            torch.save(model.state_dict(), args.save)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
