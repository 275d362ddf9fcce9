"""bench/elastic, torchrun's side: the same model under torchrun --max-restarts,
DistributedDataParallel over gloo, a checkpoint to disk every --commit-every
steps (what a torchrun script does to survive a restart), resuming from it.

Logs each completed step (restart, step, time) to <logdir>/torchrun-<rank>.jsonl;
in the first run, rank --kill-rank SIGKILLs itself before step --kill-step,
after writing the time to <logdir>/killed.
"""
import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import batch, mlp25m  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--commit-every", type=int, default=10)
p.add_argument("--kill-rank", type=int, default=1)
p.add_argument("--kill-step", type=int, default=25)
p.add_argument("--logdir", required=True)
a = p.parse_args()

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
torch.manual_seed(1)
model = torch.nn.parallel.DistributedDataParallel(mlp25m())
x, y = batch()
optimizer = torch.optim.SGD(model.parameters(), lr=0.001 * size, momentum=0.9)
ckpt = os.path.join(a.logdir, "checkpoint.pt")
step = 0
if os.path.exists(ckpt):
    saved = torch.load(ckpt)
    model.module.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    step = saved["step"]
log = open(os.path.join(a.logdir, "torchrun-%d.jsonl" % rank), "a", buffering=1)
while step < a.steps:
    if step == a.kill_step and rank == a.kill_rank and restart == 0:
        with open(os.path.join(a.logdir, "killed"), "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.time()
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    step += 1
    log.write(json.dumps({"event": "step", "restart": restart, "rank": rank, "step": step, "time": time.time(),
                          "seconds": time.time() - t0}) + "\n")
    if step % a.commit_every == 0 and rank == 0:
        t1 = time.time()
        tmp = ckpt + ".tmp"
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, tmp)
        os.replace(tmp, ckpt)
        log.write(json.dumps({"event": "commit", "restart": restart, "rank": rank, "step": step,
                              "time": time.time(), "seconds": time.time() - t1}) + "\n")
dist.destroy_process_group()
