"""Horovod's PyTorch API on muster's runtime: change only the import line.

    import muster.torch as hvd          # was: import horovod.torch as hvd

and run the script under mpirun (or muster.horovodrun / run_cluster, whose
mpi clusters start it that way). Each rank's tensors are reduced by
muster's C++ runtime (shared-memory ring or direct allreduce within a host,
TCP between hosts) through the _muster_runtime extension; CPU tensors only.

What is here (same names and semantics as horovod.torch): init, shutdown,
is_initialized, rank, size, local_rank, local_size, cross_rank, cross_size;
allreduce, allgather, broadcast, alltoall, reducescatter and their in-place,
async and grouped forms, sparse_allreduce_async, synchronize, poll, barrier,
join; ops Average, Sum, Min, Max, Product, Adasum; Compression.none/fp16;
ProcessSet, global_process_set, add_process_set, remove_process_set;
start_timeline, stop_timeline; broadcast_parameters,
broadcast_optimizer_state, broadcast_object, allgather_object;
DistributedOptimizer; SyncBatchNorm. See README.md beside this file for how
they work (a negotiating engine per process set, as in Horovod) and for
Horovod's own test suite run against them.

Failures raise muster.runtime_errors classes, all RuntimeErrors as Horovod's
are: MismatchError on every rank when ranks pass different tensors (the world
stays usable), CommError / PeerTimeoutError naming a dead or silent rank
(HorovodInternalError is CommError), InvalidArgument (also a ValueError) for
a bad call; never a hang (MUSTER_COMM_TIMEOUT_MS, default 60 s).

Example (Horovod's documentation recipe)::

    import torch
    import muster.torch as hvd
    hvd.init()
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for x, y in loader:
        opt.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        opt.step()
    avg = hvd.allreduce(loss.detach(), name="avg_loss")
"""
from ..runtime_errors import (CommError, InvalidArgument, MismatchError, PeerTimeoutError,  # noqa: F401
                              RuntimeFailure)
from .compression import Compression  # noqa: F401
from .functions import (allgather_object, broadcast_object, broadcast_optimizer_state,  # noqa: F401
                        broadcast_parameters)
from .mpi_ops import (Adasum, Average, Max, Min, Product, Sum, allgather, allgather_async, allreduce,  # noqa: F401
                      allreduce_, allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier,
                      broadcast, broadcast_, broadcast_async, broadcast_async_, grouped_allgather,
                      grouped_allgather_async, grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                      grouped_allreduce_async_, grouped_reducescatter, grouped_reducescatter_async, join, poll,
                      reducescatter, reducescatter_async, sparse_allreduce_async, synchronize)
from .process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set  # noqa: F401
from .timeline import start_timeline, stop_timeline  # noqa: F401
from .world import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled,  # noqa: F401
                    init, is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
                    mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size)
from .optimizer import DistributedOptimizer  # noqa: F401
from .sync_batch_norm import SyncBatchNorm  # noqa: F401

# Horovod's name for a failed collective: a peer died, timed out or shut down.
# Every muster.runtime_errors class is a RuntimeError, as Horovod's errors are.
HorovodInternalError = CommError
HostsUpdatedInterrupt = RuntimeFailure
from . import elastic  # noqa: F401,E402 - hvd.elastic: Horovod's elastic API (run, TorchState, commit)
