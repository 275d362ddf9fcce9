"""ElasticSampler: a DistributedSampler that re-partitions what is left of an epoch when the world changes.

    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, sampler=sampler)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)
    ...
        for batch_idx, (x, y) in enumerate(loader):
            ...
            sampler.record_batch(batch_idx, 32)   # after each batch
        sampler.set_epoch(epoch + 1)              # at the end of each epoch

Every rank shuffles the whole index the same way (seed + epoch), drops the
samples the world already processed this epoch (processed_num, counted for
all ranks by record_batch), pads the rest to a multiple of the size and
takes every size-th from its rank. After a reset (TorchState syncs it from
rank 0) the remaining samples are spread over the new world.
"""
import math
import random

import torch.utils.data

from ..world import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 1
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts `epoch` afresh (call it at the end of an epoch, so a part-done epoch is not repeated)."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Counts one batch of `batch_size` samples processed by every rank."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Re-partitions what is left of the epoch over the current world."""
        self.num_replicas = size()
        self.rank = rank()
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(indices)
        self.remaining_indices = indices[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / float(self.num_replicas)))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = list(self.remaining_indices)
        indices += indices[:self.total_size - len(indices)]
        mine = indices[self.rank:self.total_size:self.num_replicas]
        return iter(mine)

    def __len__(self):
        return self.num_samples
