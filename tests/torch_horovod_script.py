# A PyTorch training script written the way Horovod's documentation writes
# them ("Horovod with PyTorch": init, DistributedSampler, DistributedOptimizer,
# broadcast_parameters, broadcast_optimizer_state, a metric averaged with
# allreduce, predictions collected with allgather). The only change from a
# horovod.torch script is the import line below. torch_equivalence_test.py
# runs it under `mpirun -np 2` and `-np 1` with the same global batch and
# compares the parameters it saves.
#
# Usage: python3 torch_horovod_script.py OUT_FILE [EPOCHS] [GLOBAL_BATCH]
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed

import muster.torch as hvd  # was: import horovod.torch as hvd

out_file = sys.argv[1]
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
global_batch = int(sys.argv[3]) if len(sys.argv) > 3 else 32

# Initialize Horovod
hvd.init()
torch.set_num_threads(1)
torch.manual_seed(42)


class Net(nn.Module):
    """LeNet-style CNN for 28x28 single-channel images (no dropout or batch
    norm, so 2 ranks and 1 rank compute the same function of the batch)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, kernel_size=5)
        self.conv2 = nn.Conv2d(6, 12, kernel_size=5)
        self.fc1 = nn.Linear(192, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = x.view(-1, 192)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


# A fixed synthetic dataset, the same on every rank.
g = torch.Generator().manual_seed(7)
images = torch.randn(256, 1, 28, 28, generator=g)
labels = torch.randint(0, 10, (256,), generator=g)
train_dataset = torch.utils.data.TensorDataset(images, labels)

# Partition dataset among workers using DistributedSampler
train_sampler = torch.utils.data.distributed.DistributedSampler(
    train_dataset, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
train_loader = torch.utils.data.DataLoader(
    train_dataset, batch_size=global_batch // hvd.size(), sampler=train_sampler)

# Build model... (each rank starts from different weights: the broadcast fixes that)
torch.manual_seed(1000 + hvd.rank())
model = Net()

optimizer = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

# Add Horovod Distributed Optimizer
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

# Broadcast parameters and optimizer state from rank 0 to all other processes.
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

for epoch in range(epochs):
    model.train()
    train_sampler.set_epoch(epoch)
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
    # Average the last loss over ranks (a metric)
    avg_loss = hvd.allreduce(loss.detach(), name="avg_loss")
    if hvd.rank() == 0:
        print("epoch %d loss %.6f" % (epoch, avg_loss.item()), flush=True)

# Gather every rank's predictions on its shard
model.eval()
with torch.no_grad():
    local_pred = torch.cat([model(x).argmax(dim=1) for x, _ in train_loader])
all_pred = hvd.allgather(local_pred)
assert all_pred.shape[0] == len(train_dataset), all_pred.shape

if hvd.rank() == 0:
    torch.save({"state": model.state_dict(), "predictions": all_pred.sum().item(), "loss": avg_loss.item()},
               out_file)
