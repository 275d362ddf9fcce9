"""The model both sides of bench/elastic train: bench/torch's 25.2 M-parameter MLP
(1024-4096-4096-1024-10, ResNet-50 has 25.6 M) on a fixed random batch."""
import torch
import torch.nn as nn


def mlp25m():
    return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, 1024), nn.ReLU(), nn.Linear(1024, 10))


def batch(size=32):
    g = torch.Generator().manual_seed(7)
    return torch.randn(size, 1024, generator=g), torch.randint(0, 10, (size,), generator=g)
