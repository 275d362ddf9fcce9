"""muster.torch.ps end to end: real muster-ps processes and Python workers
(tests/torch_ps_worker.py) configured through TF_CONFIG, as run_cluster
starts them. Label integration.

  equivalence  1 PS + 2 workers averaging == one process on the concatenated
               batch (SGD with momentum; 2 PS and Adam; a "chief" task and
               a worker, the chief initialising, with an lr scheduler), to
               float tolerance
  stale        replicas_to_aggregate=2 of 3: a late worker's gradient (1e6
               everywhere) is dropped, counted in its stats() and muster-ps's
               log, and leaves the model as the two others made it
  resume       4 steps, checkpoint, a fresh muster-ps and freshly initialised
               workers resume at step 4: == 8 uninterrupted steps (momentum included)
  PS death     kill -9 of muster-ps while a worker waits: CommError naming the
               PS (and another thread of that worker ran meanwhile: the GIL is released)
  worker death a worker dies: the other gets PeerTimeoutError naming it
  bad input    unsupported optimizers, a ps task, missing TF_CONFIG: clear errors
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_ps_worker as worker  # noqa: E402  (the model, data and optimizers the workers use)
from testutil import free_ports  # noqa: E402

BIN = os.path.join(os.environ.get("MUSTER_BINARY_DIR", os.path.join(HERE, "..", "build")), "bin")
WORKER = os.path.join(HERE, "torch_ps_worker.py")


class Job:
    """n_ps muster-ps processes and n_workers Python workers on loopback; every
    process is killed (by pid) when the test ends."""

    def __init__(self, tmp, n_workers, n_ps=1, timeout_ms=30000, chief=False):
        ports = free_ports(n_ps + n_workers)
        addrs = ["127.0.0.1:%d" % p for p in ports]
        self.cluster = {"ps": addrs[:n_ps], "worker": addrs[n_ps + (1 if chief else 0):]}
        if chief:  # TensorFlow's layout: a "chief" task, then workers 0.. (the chief is worker index 0)
            self.cluster["chief"] = [addrs[n_ps]]
        self.n_workers = n_workers
        self.tmp, self.timeout_ms = str(tmp), timeout_ms
        self.ps, self.workers = [], []

    def env(self, kind, index):
        e = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_")}
        e.update(MUSTER_PS_TIMEOUT_MS=str(self.timeout_ms), OMP_NUM_THREADS="1",
                 TF_CONFIG=json.dumps({"cluster": self.cluster, "task": {"type": kind, "index": index}}))
        return e

    def start_ps(self):
        for i in range(len(self.cluster["ps"])):
            log = open(os.path.join(self.tmp, "ps-%d.log" % i), "w")
            self.ps.append(subprocess.Popen([os.path.join(BIN, "muster-ps")], env=self.env("ps", i), stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True))

    def start_workers(self, scenario, *opts, per_worker=None):
        """Worker i (its worker_index; logs worker-<i>.log) is the chief task when there is one."""
        chief = "chief" in self.cluster
        for i in range(self.n_workers):
            extra = list(opts) + list((per_worker or {}).get(i, []))
            log = open(os.path.join(self.tmp, "worker-%d.log" % i), "w")
            task = ("chief", 0) if chief and i == 0 else ("worker", i - 1 if chief else i)
            self.workers.append(subprocess.Popen([sys.executable, WORKER, scenario, self.tmp] + extra,
                                                 env=self.env(*task), stdout=log, stderr=subprocess.STDOUT,
                                                 start_new_session=True))

    def log(self, name):
        with open(os.path.join(self.tmp, name + ".log")) as f:
            return f.read()

    def logs(self):
        names = ["ps-%d" % i for i in range(len(self.ps))] + ["worker-%d" % i for i in range(len(self.workers))]
        return "\n".join("--- %s ---\n%s" % (n, self.log(n)[-2000:]) for n in names)

    def wait_workers(self, timeout=90):
        codes = [p.wait(timeout=timeout) for p in self.workers]
        return codes

    def finish(self, timeout=90):
        """Every worker exits 0, then every muster-ps does."""
        codes = self.wait_workers(timeout)
        assert codes == [0] * len(codes), "worker exit codes %s\n%s" % (codes, self.logs())
        for p in self.ps:
            assert p.wait(timeout=30) == 0, "muster-ps did not exit 0 after every worker finished\n" + self.logs()

    def kill(self):
        for p in self.ps + self.workers:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture
def jobs(tmp_path):
    made = []

    def make(n_workers, n_ps=1, timeout_ms=30000, chief=False):
        d = tmp_path / ("job%d" % len(made))
        d.mkdir()
        j = Job(d, n_workers, n_ps, timeout_ms, chief)
        made.append(j)
        return j
    yield make
    for j in made:
        j.kill()


def reference(steps, first=0, n_rows=None, optimizer="momentum", seed=0):
    """One process on the whole batch (or its first n_rows... of each step: the
    rows workers 0 and 1 of 2 take)."""
    net = worker.model(seed)
    opt = worker.make_optimizer(optimizer, net.parameters())
    schedule = worker.scheduler(optimizer, opt)
    x, y = worker.data()
    for s in range(first, steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x[s]), y[s]).backward()
        opt.step()
        if schedule:
            schedule.step()
    return {n: p.detach().numpy().copy() for n, p in net.named_parameters()}


def params(job, rank):
    with np.load(os.path.join(job.tmp, "params-%d.npz" % rank)) as f:
        return dict(f)


def assert_close(got, want, what):
    assert got.keys() == want.keys()
    for n in want:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-5, atol=1e-6, err_msg="%s: parameter %s" % (what, n))


@pytest.mark.parametrize("n_ps,optimizer,chief", [(1, "momentum", False), (2, "adam", False), (1, "sgd_schedule", True)])
def test_two_workers_average_equals_one_process_on_the_whole_batch(jobs, n_ps, optimizer, chief):
    job = jobs(2, n_ps=n_ps, chief=chief)
    job.start_ps()
    # Worker 1 starts from another initialisation: the chief's values must win.
    job.start_workers("train", "optimizer=" + optimizer, per_worker={1: ["seed=99"]})
    job.finish()
    want = reference(worker.STEPS, optimizer=optimizer)
    for r in (0, 1):
        assert_close(params(job, r), want, "worker %d" % r)
    assert "starts at global step 0" in job.log("worker-1")
    assert re.search(r"stats stale_steps=0 stale_dropped=0", job.log("worker-0")), job.logs()


def test_stale_gradients_are_dropped_counted_and_harmless(jobs):
    job = jobs(3)
    job.start_ps()
    job.start_workers("stale", "replicas=2")
    job.finish()
    late = job.log("worker-2")
    m = re.search(r"stats stale_steps=(\d+) stale_dropped=(\d+)", late)
    assert m and int(m.group(1)) == 1 and int(m.group(2)) >= 1, job.logs()
    for r in (0, 1):
        assert "stats stale_steps=0 stale_dropped=0" in job.log("worker-%d" % r), job.logs()
    m = re.search(r"(\d+) stale gradients dropped", job.log("ps-0"))
    assert m and int(m.group(1)) >= 1, job.logs()
    # Workers 0 and 1 made every step between them: rows 0::2 and 1::2 of each batch.
    want = reference(worker.STEPS)
    for r in (0, 1):
        assert_close(params(job, r), want, "worker %d" % r)


def test_checkpoint_and_resume_through_the_chief(jobs, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    first = jobs(2)
    first.start_ps()
    first.start_workers("train", "ckpt=" + ckpt, "last=4")
    first.finish()
    assert [n for n in os.listdir(ckpt) if n.startswith("ckpt-")] == ["ckpt-000000000004.bin"], os.listdir(ckpt)
    assert "checkpoints=1" in first.log("worker-0")

    second = jobs(2)  # new PS, new ports, workers initialised from another seed
    second.start_ps()
    second.start_workers("train", "ckpt=" + ckpt, "last=8", "seed=5")
    second.finish()
    assert "starts at global step 4" in second.log("worker-0"), second.logs()
    want = reference(8)
    for r in (0, 1):
        assert_close(params(second, r), want, "resumed worker %d" % r)


def wait_file(path, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert proc.poll() is None, "worker exited early"
        assert time.monotonic() < deadline, "timed out waiting for " + path
        time.sleep(0.02)


def test_ps_death_raises_comm_error_naming_the_ps(jobs):
    job = jobs(2)
    job.start_ps()
    job.start_workers("hang")
    wait_file(os.path.join(job.tmp, "w0-stepping"), job.workers[0])
    time.sleep(0.5)  # worker 0 is inside step(), waiting for worker 1's gradient
    job.ps[0].send_signal(signal.SIGKILL)
    assert job.workers[0].wait(timeout=30) == 3, job.logs()
    out = job.log("worker-0")
    assert re.search(r"ERROR CommError rank=0: (comm_error: )?ps task 0 \(127\.0\.0\.1:\d+\) closed the connection", out), out
    # A thread of the worker kept running while step() waited (>= 0.5 s): the GIL was released.
    assert int(re.search(r"ticks while waiting: (\d+)", out).group(1)) >= 20, out


def test_worker_death_raises_timeout_naming_the_lost_worker(jobs):
    job = jobs(2, timeout_ms=2000)
    job.start_ps()
    job.start_workers("hang", per_worker={1: ["die=1"]})
    assert job.workers[0].wait(timeout=60) == 3, job.logs()
    out = job.log("worker-0")
    assert re.search(r"ERROR PeerTimeoutError rank=0: .*timed out after 2000 ms.*lost worker\(s\): 1", out), out
    assert job.workers[1].wait(timeout=10) == 9


def test_bad_input_is_named(monkeypatch):
    import muster.torch.ps as ps
    from muster.runtime_errors import InvalidArgument
    net = worker.model(0)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(InvalidArgument, match="TF_CONFIG is not set"):
        ps.SyncReplicasOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), net)
    cluster = {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 0}}))
    with pytest.raises(InvalidArgument, match="ps task"):
        ps.SyncReplicasOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), net)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    with pytest.raises(InvalidArgument, match="RMSprop is not implemented on the parameter servers"):
        ps.SyncReplicasOptimizer(torch.optim.RMSprop(net.parameters(), lr=0.1), net)
    with pytest.raises(InvalidArgument, match="momentum 0.5"):
        ps.SyncReplicasOptimizer(torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.5), net)
    with pytest.raises(InvalidArgument, match="parameter '2.weight' is not in the optimizer"):
        ps.SyncReplicasOptimizer(torch.optim.SGD(list(net.parameters())[:2], lr=0.1), net)
    half = torch.nn.Linear(3, 2).double()
    with pytest.raises(InvalidArgument, match="parameter 'weight' must be a contiguous float32 CPU tensor"):
        ps.SyncReplicasOptimizer(torch.optim.SGD(half.parameters(), lr=0.1), half)
