"""SyncBatchNorm: batch normalisation whose statistics cover the whole global batch (Horovod's hvd.SyncBatchNorm).

With small per-rank batches the per-rank mean and variance are noisy; this
layer normalises every rank's batch with the mean and variance of all ranks'
batches together, exactly as one BatchNorm over the concatenated batch would.
In training mode each forward pass runs two allreduces (sum and count, then
the sum of squared deviations: the two-pass variance, which keeps float32
precise); gradients flow back through them (an allreduce's gradient is the
allreduce of the gradient), so each rank gets the gradient of the global
loss. In eval mode it is an ordinary BatchNorm on the running statistics.

Example::

    model = nn.Sequential(nn.Linear(8, 16), hvd.SyncBatchNorm(16), nn.ReLU())
"""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from . import mpi_ops


class SyncBatchNorm(_BatchNorm):
    """torch.nn.BatchNorm{1,2,3}d over every rank's batch (input (N, C, ...), at least 2 dimensions)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (N, C, ...), got %dD" % input.dim())

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training and self.track_running_stats:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0,
                                self.eps)
        factor = 0.0
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        c = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        shape = [1, c] + [1] * (input.dim() - 2)
        count = torch.tensor([input.numel() // c], dtype=input.dtype)
        totals = mpi_ops.allreduce(torch.cat([input.sum(dims), count]), op=mpi_ops.Sum,
                                   name=None)
        n = totals[c].detach()
        if float(n) < 2:
            raise ValueError("SyncBatchNorm needs more than 1 value per channel across all ranks in training, "
                             "got %d" % int(n))
        mean = totals[:c] / n
        centered = input - mean.view(shape)
        var = mpi_ops.allreduce((centered * centered).sum(dims), op=mpi_ops.Sum) / n
        if self.training and self.track_running_stats:
            with torch.no_grad():
                self.running_mean.mul_(1 - factor).add_(mean.detach() * factor)
                self.running_var.mul_(1 - factor).add_(var.detach() * (n / (n - 1)) * factor)
        out = centered / torch.sqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out
