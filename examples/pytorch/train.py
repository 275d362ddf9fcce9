#!/usr/bin/env python3
"""Train a LeNet-style CNN on Fashion-MNIST with PyTorch, in whichever mode
the environment asks for (as examples/fashion_mnist does for C++):

    python3 train.py                         single process
    mpirun -np 2 python3 train.py            allreduce: `import muster.torch as hvd`,
                                             Horovod's API (OMPI_COMM_WORLD_SIZE is set;
                                             muster.horovodrun(...) starts it so)
    TF_CONFIG='{...}' python3 train.py       parameter servers: muster.torch.ps
                                             (muster.run_cluster(...) sets TF_CONFIG)

`--batch-size` is the global batch: each of N workers takes 1/N of it, so
every mode makes the same updates as the single process (up to float
rounding) and reaches the same accuracy. Rank 0 / the chief prints progress
and, at the end, `final test_accuracy=0.8612`, `final loss=...`,
`final images_per_sec=...`. Under musterd every rank reports its loss at
every step through muster.metrics.SummaryWriter (the dashboard draws a curve
per rank). Defaults are a short run (6000 images, 2 epochs); `--full` trains
on all 60000 images for 5 epochs.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_data  # noqa: E402  (beside this script)


class LeNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(6, 16, 5)
        self.fc1 = torch.nn.Linear(16 * 5 * 5, 120)
        self.fc2 = torch.nn.Linear(120, 84)
        self.fc3 = torch.nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class Single:
    name, rank, size = "single", 0, 1

    def wrap(self, model, optimizer, args, steps_per_epoch):
        return optimizer, 0

    def sum(self, values):
        return values

    def finish(self, optimizer):
        pass


class Allreduce:
    """Horovod's recipe, with only the import changed."""
    name = "allreduce"

    def __init__(self):
        import muster.torch as hvd
        self.hvd = hvd
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()

    def wrap(self, model, optimizer, args, steps_per_epoch):
        hvd = self.hvd
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        return optimizer, 0

    def sum(self, values):
        t = self.hvd.allreduce(torch.tensor(values, dtype=torch.float64), op=self.hvd.Sum, name="metrics")
        return t.tolist()

    def finish(self, optimizer):
        self.hvd.shutdown()


class ParameterServer:
    """TensorFlow's SyncReplicasOptimizer recipe on muster-ps."""
    name = "ps"

    def __init__(self):
        import muster.torch.ps as ps
        self.ps = ps

    def wrap(self, model, optimizer, args, steps_per_epoch):
        optimizer = self.ps.SyncReplicasOptimizer(optimizer, model, checkpoint_dir=args.checkpoint_dir,
                                                  checkpoint_every=steps_per_epoch if args.checkpoint_dir else 0)
        self.rank, self.size = optimizer.worker_index, optimizer.num_workers
        start = optimizer.initialize()
        if start > 0 and self.rank == 0:
            print("resumed at global step %d" % start, flush=True)
        return optimizer, start

    def sum(self, values):
        return values  # every worker holds the same parameters: the chief evaluates everything

    def finish(self, optimizer):
        s = optimizer.stats()
        if self.rank == 0:
            print("ps stats: stale_steps=%d bytes_pushed=%d checkpoints=%d"
                  % (s["stale_steps"], s["bytes_pushed"], s["checkpoints_written"]), flush=True)
        optimizer.done()


def detect_mode():
    if os.environ.get("OMPI_COMM_WORLD_SIZE"):
        return "allreduce"
    if os.environ.get("TF_CONFIG"):
        return "ps"
    return "single"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", default="auto", choices=["auto", "single", "allreduce", "ps"])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64, help="global batch, split over the workers")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--optimizer", default="momentum", choices=["sgd", "momentum", "adam"])
    ap.add_argument("--limit", type=int, default=6000, help="train on the first N images (0: all)")
    ap.add_argument("--test-limit", type=int, default=0, help="evaluate on the first N test images (0: all)")
    ap.add_argument("--full", action="store_true", help="all 60000 images, 5 epochs")
    ap.add_argument("--data-dir", default=fashion_data.DEFAULT_DIR)
    ap.add_argument("--checkpoint-dir", default=None, help="ps mode: the chief checkpoints every epoch and resumes")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--log-every", type=int, default=50)
    args = ap.parse_args(argv)
    if args.full:
        args.limit, args.epochs = 0, 5
    return args


def summary_writer(total_steps, rank):
    """muster.metrics.SummaryWriter (torch.utils.tensorboard's scalar calls, drawn by musterd's
    dashboard, one curve per rank); a no-op outside musterd or without the muster package."""
    try:
        from muster.metrics import SummaryWriter
    except ImportError:
        class SummaryWriter:  # noqa: N801 - the same name, doing nothing
            def __init__(self, *args, **kwargs):
                pass

            def add_scalar(self, *args, **kwargs):
                pass

            def close(self):
                pass
    return SummaryWriter(total_steps=total_steps, rank=rank)


def make_optimizer(name, params, lr):
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.SGD(params, lr=lr, momentum=0.9 if name == "momentum" else 0.0)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # the same initial model everywhere (then broadcast / the chief's wins)
    name = detect_mode() if args.mode == "auto" else args.mode
    mode = {"single": Single, "allreduce": Allreduce, "ps": ParameterServer}[name]()

    train = fashion_data.load(args.data_dir, "train", args.limit)
    test = fashion_data.load(args.data_dir, "t10k", args.test_limit)
    steps = fashion_data.steps_per_epoch(len(train), args.batch_size)
    model = LeNet()
    optimizer, start = mode.wrap(model, make_optimizer(args.optimizer, model.parameters(), args.lr), args, steps)
    chief = mode.rank == 0
    if chief:
        print("mode=%s workers=%d images=%d global_batch=%d steps_per_epoch=%d"
              % (mode.name, mode.size, len(train), args.batch_size, steps), flush=True)

    # Every rank's loss at every step: a curve per rank on the dashboard.
    writer = summary_writer(args.epochs * steps, mode.rank if name != "single" else None)
    t0, images, step, loss_sum, loss_n = time.monotonic(), 0, start, 0.0, 0
    for epoch in range(start // steps, args.epochs):
        for x, y in fashion_data.shard_batches(train, epoch, args.seed, args.batch_size, mode.rank, mode.size,
                                               skip=step - epoch * steps):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            images += len(y)
            loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
            writer.add_scalar("loss", loss.item(), step)
            if chief and step % args.log_every == 0:
                print("epoch %d step %d loss %.4f" % (epoch + 1, step, loss_sum / loss_n), flush=True)
                loss_sum, loss_n = 0.0, 0
    elapsed = time.monotonic() - t0

    share = (mode.rank, mode.size) if name == "allreduce" else (0, 1)
    correct, total, test_loss = mode.sum(list(fashion_data.evaluate_shard(model, test, *share)))
    all_images = images * mode.size  # every worker takes an equal share of every global batch
    if chief:
        print("final test_accuracy=%.4f" % (correct / total), flush=True)
        print("final loss=%.4f" % (test_loss / total), flush=True)
        print("final images_per_sec=%.0f" % (all_images / max(elapsed, 1e-9)), flush=True)
        writer.add_scalar("accuracy", correct / total, step)
        writer.add_scalar("images_per_sec", all_images / max(elapsed, 1e-9), step)
    writer.close()
    mode.finish(optimizer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
