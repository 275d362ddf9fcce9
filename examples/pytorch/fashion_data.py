"""Fashion-MNIST for the PyTorch example: Debian's dataset-fashion-mnist read
with numpy (IDX files, gzipped or not; no downloads), and the batches each
worker takes.

    train = load("/usr/share/datasets/fashion-mnist", "train", limit=6000)
    for x, y in shard_batches(train, epoch=0, seed=7, global_batch=64, rank=1, size=2):
        ...   # rank 1's half of every global batch of epoch 0

Sharding is DistributedSampler's: one permutation per epoch (the same on
every worker, from seed + epoch), worker r takes every size-th index from r.
Step i of every worker together covers exactly the single process's batch i
of `global_batch` images, so all modes follow the same trajectory.
"""
import gzip
import os

import numpy as np
import torch

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
_MAGIC = {2049: 1, 2051: 3}  # IDX unsigned-byte labels (1 dim) and images (3 dims)


def _read_idx(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rb") as f:
                data = f.read()
            break
    else:
        raise FileNotFoundError("%s[.gz]: cannot open (install dataset-fashion-mnist or pass --data-dir)" % path)
    magic = int.from_bytes(data[0:4], "big")
    if magic not in _MAGIC:
        raise ValueError("%s: not an unsigned-byte IDX file (magic %#x)" % (path, magic))
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(_MAGIC[magic])]
    offset = 4 + 4 * len(dims)
    if len(data) - offset != int(np.prod(dims)):
        raise ValueError("%s: %d bytes of data for dimensions %s" % (path, len(data) - offset, dims))
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


class Dataset:
    def __init__(self, images, labels):
        self.images = images  # float32 tensor N x 1 x 28 x 28, normalised
        self.labels = labels  # int64 tensor N

    def __len__(self):
        return len(self.labels)


def load(data_dir, split, limit=0):
    """split "train" or "t10k"; the first `limit` images (0: all)."""
    images = _read_idx(os.path.join(data_dir, "%s-images-idx3-ubyte" % split))
    labels = _read_idx(os.path.join(data_dir, "%s-labels-idx1-ubyte" % split))
    if len(images) != len(labels):
        raise ValueError("%s: %d images but %d labels" % (data_dir, len(images), len(labels)))
    if limit:
        images, labels = images[:limit], labels[:limit]
    x = torch.from_numpy(images.astype(np.float32) / 255.0)
    x = ((x - 0.2860) / 0.3530).unsqueeze(1).contiguous()  # Fashion-MNIST's mean and deviation
    return Dataset(x, torch.from_numpy(labels.astype(np.int64)))


def steps_per_epoch(n, global_batch):
    return n // global_batch  # the incomplete last batch is dropped, in every mode


def shard_batches(data, epoch, seed, global_batch, rank, size, skip=0):
    """This worker's part of each global batch of `epoch`, from step `skip` on."""
    if global_batch % size:
        raise ValueError("the global batch %d does not split over %d workers" % (global_batch, size))
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    order = torch.randperm(len(data), generator=g)
    for i in range(skip, steps_per_epoch(len(data), global_batch)):
        idx = order[i * global_batch:(i + 1) * global_batch][rank::size]
        yield data.images[idx], data.labels[idx]


def evaluate_shard(model, data, rank, size, batch=1000):
    """(correct, count, summed loss) over test images rank, rank + size, ..."""
    correct, total, loss = 0, 0, 0.0
    model.eval()
    with torch.no_grad():
        idx = torch.arange(rank, len(data), size)
        for i in range(0, len(idx), batch):
            sel = idx[i:i + batch]
            out = model(data.images[sel])
            loss += torch.nn.functional.cross_entropy(out, data.labels[sel], reduction="sum").item()
            correct += (out.argmax(1) == data.labels[sel]).sum().item()
            total += len(sel)
    model.train()
    return correct, total, loss
