"""One worker of tests/torch_ps_test.py: muster.torch.ps.SyncReplicasOptimizer
on a small model, started with TF_CONFIG by the test.

    python3 torch_ps_worker.py SCENARIO OUT_DIR [key=value ...]

Every worker trains the same two-layer model on its rows of a fixed data set
(worker i of n takes rows i::n of each step's batch) and writes its final
parameters to OUT_DIR/params-<worker>.npz; scenarios vary the timing and
what is expected (see the test). Errors from muster are printed as
`ERROR <class> rank=<rank>: <message>` and exit 3.
"""
import os
import sys
import threading
import time

import numpy as np
import torch

import muster.torch.ps as ps
from muster.runtime_errors import RuntimeFailure

STEPS = 4
BATCH = 8  # global rows per step


def model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))


def data():
    g = torch.Generator()
    g.manual_seed(1234)
    return torch.randn(STEPS * 4, BATCH, 6, generator=g), torch.randint(0, 3, (STEPS * 4, BATCH), generator=g)


def make_optimizer(name, params):
    """"sgd", "momentum", "adam"; "sgd_schedule": SGD whose rate halves every step (a torch scheduler)."""
    if name == "adam":
        return torch.optim.Adam(params, lr=0.01)
    return torch.optim.SGD(params, lr=0.1, momentum=0.9 if name == "momentum" else 0.0)


def scheduler(name, optimizer):
    return torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5) if name == "sgd_schedule" else None


def wait_for(path, timeout=60):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for " + path)
        time.sleep(0.02)


def touch(path):
    with open(path, "w"):
        pass


TICKS = [0]


def tick():
    while True:
        time.sleep(0.01)
        TICKS[0] += 1


def train(opt, net, rank, size, first, last, out, after_step=None, schedule=None):
    x, y = data()
    for s in range(first, last):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x[s][rank::size]), y[s][rank::size])
        loss.backward()
        opt.step()
        if schedule:
            schedule.step()
        if after_step:
            after_step(s)
    np.savez(os.path.join(out, "params-%d.npz" % rank), **{n: p.detach().numpy() for n, p in net.named_parameters()})


def main(scenario, out, opts):
    optimizer = opts.get("optimizer", "momentum")
    net = model(int(opts.get("seed", 0)))
    kwargs = {}
    if "replicas" in opts:
        kwargs["replicas_to_aggregate"] = int(opts["replicas"])
    if "ckpt" in opts:
        kwargs["checkpoint_dir"] = opts["ckpt"]
    local = make_optimizer(optimizer, net.parameters())
    schedule = scheduler(optimizer, local)  # on the wrapped optimizer, as with any torch optimizer
    opt = ps.SyncReplicasOptimizer(local, net, **kwargs)
    rank, size = opt.worker_index, opt.num_workers
    start = opt.initialize()
    print("worker %d of %d starts at global step %d" % (rank, size, start), flush=True)

    if scenario == "train":  # every worker: steps start..last, rows rank::size
        train(opt, net, rank, size, start, int(opts.get("last", STEPS)), out, schedule=schedule)
    elif scenario == "stale":  # workers 0, 1 train (replicas_to_aggregate=2); worker 2 pushes late
        if rank == 2:
            touch(os.path.join(out, "w2-ready"))
            wait_for(os.path.join(out, "w0-stepped"))
            for p in net.parameters():
                p.grad = torch.full_like(p, 1e6)  # would wreck the model if it were applied
            opt.step()
        else:
            wait_for(os.path.join(out, "w2-ready"))
            train(opt, net, rank, 2, 0, STEPS, out,
                  after_step=lambda s: touch(os.path.join(out, "w0-stepped")) if rank == 0 and s == 0 else None)
    elif scenario == "hang":  # worker 0 steps and waits; worker 1 never pushes (the test kills something)
        if rank == 0:
            threading.Thread(target=tick, daemon=True).start()  # runs only if step() releases the GIL
            touch(os.path.join(out, "w0-stepping"))
            train(opt, net, rank, size, 0, 1, out)
        else:
            if opts.get("die") == "1":
                os._exit(9)
            time.sleep(120)
    else:
        raise SystemExit("unknown scenario " + scenario)
    opt.done()  # the chief checkpoints first when checkpoint_dir is set
    s = opt.stats()
    print("stats stale_steps=%d stale_dropped=%d checkpoints=%d global_step=%d"
          % (s["stale_steps"], s["stale_dropped"], s["checkpoints_written"], opt.global_step), flush=True)


if __name__ == "__main__":
    opts = dict(a.split("=", 1) for a in sys.argv[3:])
    try:
        main(sys.argv[1], sys.argv[2], opts)
    except RuntimeFailure as e:
        print("ticks while waiting: %d" % TICKS[0], flush=True)
        print("ERROR %s rank=%s: %s" % (type(e).__name__, getattr(e, "rank", None), e), flush=True)
        sys.exit(3)
