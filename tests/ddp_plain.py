"""PyTorch's DDP tutorial, in the shape users copy it: DDP on the "muster" backend, a
few steps, then dist.barrier() and dist.destroy_process_group(), with the model still
alive at module level when the interpreter exits (the case that once aborted).

Run with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as
muster.torchrun or tests/ddp_end_stress_test.py give it.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn

import muster.torch.distributed  # noqa: F401 - registers the "muster" backend

dist.init_process_group(os.environ.get("DDP_BACKEND", "muster"))
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
ddp = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
for step in range(8):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(ddp(torch.randn(32, 64)), torch.randint(0, 10, (32,)))
    loss.backward()
    opt.step()
print("rank %d trained: loss %.4f" % (rank, loss.item()), flush=True)
dist.barrier()
dist.destroy_process_group()
print("rank %d done" % rank, flush=True)
