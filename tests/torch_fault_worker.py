# Faults a muster.torch script must survive with an exception, never a hang.
# Run under mpirun by torch_fault_test.py with a short MUSTER_COMM_TIMEOUT_MS.
# Each surviving rank prints one line "FAULT rank <r> <ExceptionClass>: <message>"
# and exits 0; a rank that sees no exception prints "NO-FAULT rank <r>" and exits 3.
#
# Usage: python3 torch_fault_worker.py params|collective|kill|stall|engine_kill|shutdown
import os
import signal
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import muster.torch as hvd
from muster import MusterError

torch.set_num_threads(1)
mode = sys.argv[1]
hvd.init()
r = hvd.rank()


def leave():
    """Exits without finalising MPI (the communicator is broken: skip it with
    a dead or confused peer), once every surviving rank has reported or 30 s
    have passed. mpirun ends the whole job at the first rank that exits
    without MPI_Finalize, which would cut a slower survivor off before its
    report; MUSTER_FAULT_DIR (the test's) is where each leaves a mark."""
    marks = os.environ.get("MUSTER_FAULT_DIR")
    if marks:
        open(os.path.join(marks, "reported.%d" % r), "w").close()
        survivors = hvd.size() - (1 if mode in ("kill", "engine_kill", "shutdown") else 0)
        deadline = time.monotonic() + 30
        while len(os.listdir(marks)) < survivors and time.monotonic() < deadline:
            time.sleep(0.01)
    os._exit(0)


def model_for(rank):
    layers = [nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)]
    if mode == "params" and rank == 1:
        layers[2] = nn.Linear(16, 5)  # rank 1's last layer differs: 'mismatch' names it
    return nn.Sequential(*layers)


try:
    if mode == "params":
        model = model_for(r)
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters())
    elif mode == "collective":
        # Rank 0 reduces 1000 floats while the others broadcast 3000 bytes: not the same collective.
        if r == 0:
            hvd.allreduce(torch.ones(1000))
        else:
            hvd.broadcast(torch.ones(750), root_rank=0)
        hvd.allreduce(torch.ones(10))  # a rank the mismatch did not stop must not get past this
    elif mode == "kill":
        model = model_for(r)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
        for step in range(1000):
            if r == 1 and step == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            time.sleep(0.01)
    elif mode == "stall":
        # Rank 0 starts an op no other rank starts; the others wait in a barrier rank 0 never reaches.
        if r == 0:
            hvd.allreduce(torch.ones(3), name="only_rank_0")
        else:
            hvd.barrier()
    elif mode == "engine_kill":
        # Collectives through the engine; rank 1 dies between two of them.
        for step in range(1000):
            if r == 1 and step == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            hvd.allreduce(torch.ones(100), name="step")
            time.sleep(0.01)
    elif mode == "shutdown":
        # Rank 1 leaves; Horovod's rule: every rank's collectives end with it.
        if r == 1:
            hvd.shutdown()
            print("LEFT rank 1", flush=True)
            sys.exit(0)
        time.sleep(1)
        hvd.allreduce(torch.ones(3))
    else:
        raise SystemExit("unknown mode " + mode)
except MusterError as e:
    if mode == "stall":
        # Nothing moved: the world is usable, and says so.
        print("FAULT rank %d %s: %s" % (r, type(e).__name__, str(e).replace("\n", " ")), flush=True)
        ok = hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [float(hvd.size())] * 2
        print("%s rank %d" % ("USABLE" if ok else "BROKEN", r), flush=True)
        sys.exit(0)
    print("FAULT rank %d %s: %s" % (r, type(e).__name__, str(e).replace("\n", " ")), flush=True)
    if mode == "params":
        sys.exit(0)  # nothing broke: MPI finalises as usual
    leave()
print("NO-FAULT rank %d" % r, flush=True)
sys.exit(3)
