"""fashion_mnist end to end: short trainings on a subset of Fashion-MNIST in
every mode, each reaching a loss threshold; resume from a checkpoint.

One file, three ctest entries (tests/examples.cmake selects with -k):
  single  one process; resume gives exactly the uninterrupted result
  mpi     2 ranks under a real mpirun (allreduce), and resume
  ps      1 real muster-ps + 2 workers with TF_CONFIG, and resume
"""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile

import pytest

from testutil import free_ports

BIN = os.path.join(os.environ.get("MUSTER_BINARY_DIR", "build"), "bin")
PROGRAM = os.path.join(BIN, "fashion_mnist")
DATA = "/usr/share/datasets/fashion-mnist"
# 3000 images, 3 epochs: seconds per run; the loss falls from 2.3 to about 0.5.
COMMON = ["--model", "mlp", "--limit", "3000", "--test-limit", "2000", "--batch-size", "32",
          "--log-every", "50", "--seed", "7"]
LOSS_THRESHOLD = 0.75
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-mca", "btl", "self,vader,tcp",
          "-mca", "btl_vader_single_copy_mechanism", "none"]

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")),
                                reason="dataset-fashion-mnist not installed (scripts/setup.sh installs it)")


def finals(output):
    """The `final key=value` lines of the chief's output."""
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^final (\w+)=([-0-9.e]+)$", output, re.M)}


def run(cmd, env=None, timeout=100):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    assert p.returncode == 0, "%s failed (%d):\n%s" % (" ".join(cmd), p.returncode, p.stdout[-3000:])
    return p.stdout


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="muster_fmnist_")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def check_trained(out):
    f = finals(out)
    assert f["loss"] < LOSS_THRESHOLD, out[-2000:]
    assert f["test_accuracy"] > 0.7, out[-2000:]
    assert re.search(r"^epoch 3 step \d+ loss", out, re.M), out[-2000:]
    return f


def test_single_trains_and_resume_is_exact(tmp):
    full = run([PROGRAM, "--epochs", "3"] + COMMON)
    assert "mode=single workers=1" in full
    f = check_trained(full)
    ckpt = os.path.join(tmp, "ckpt")
    # Interrupted after 2 of 3 epochs (the schedule still spans 3), then resumed.
    run([PROGRAM, "--epochs", "3", "--max-steps", "188", "--checkpoint-dir", ckpt] + COMMON)
    assert os.path.exists(os.path.join(ckpt, "fashion_mnist.ckpt"))
    resumed = run([PROGRAM, "--epochs", "3", "--checkpoint-dir", ckpt] + COMMON)
    assert re.search(r"resumed from .* at step 188", resumed), resumed[-2000:]
    # Same data order, parameters and momentum: the very same model.
    r = finals(resumed)
    assert (r["test_accuracy"], r["loss"]) == (f["test_accuracy"], f["loss"]), (r, f)


def test_single_reports_a_bad_data_dir(tmp):
    p = subprocess.run([PROGRAM, "--data-dir", tmp], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=30)
    assert p.returncode == 1
    assert "train-images-idx3-ubyte.gz: cannot open" in p.stdout


def mpi_env():
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               MUSTER_COMM_TIMEOUT_MS="30000")
    env.pop("TF_CONFIG", None)
    return env


def test_mpi_two_ranks_train_and_resume(tmp):
    out = run(MPIRUN + ["-np", "2", PROGRAM, "--epochs", "3"] + COMMON, env=mpi_env())
    assert "mode=allreduce workers=2" in out
    assert len(re.findall(r"^final test_accuracy=", out, re.M)) == 1, "only rank 0 prints"
    check_trained(out)
    ckpt = os.path.join(tmp, "ckpt")
    run(MPIRUN + ["-np", "2", PROGRAM, "--epochs", "1", "--checkpoint-dir", ckpt] + COMMON, env=mpi_env())
    resumed = run(MPIRUN + ["-np", "2", PROGRAM, "--epochs", "3", "--checkpoint-dir", ckpt] + COMMON, env=mpi_env())
    assert re.search(r"resumed from .* at step 47", resumed), resumed[-2000:]
    check_trained(resumed)


def run_ps_job(extra, tmp):
    """1 muster-ps + 2 workers on loopback; returns the chief's output."""
    ps_port, w0, w1 = free_ports(3)
    cluster = {"ps": ["127.0.0.1:%d" % ps_port], "worker": ["127.0.0.1:%d" % w0, "127.0.0.1:%d" % w1]}

    def env(kind, index):
        e = dict(os.environ, MUSTER_PS_TIMEOUT_MS="30000",
                 TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}}))
        for k in list(e):
            if k.startswith("OMPI_"):
                del e[k]
        return e

    procs = []
    try:
        ps_log = open(os.path.join(tmp, "ps.log"), "w")
        procs.append(subprocess.Popen([os.path.join(BIN, "muster-ps")], env=env("ps", 0), stdout=ps_log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
        logs = [os.path.join(tmp, "worker%d.log" % i) for i in range(2)]
        for i in range(2):
            procs.append(subprocess.Popen([PROGRAM] + COMMON + extra, env=env("worker", i),
                                          stdout=open(logs[i], "w"), stderr=subprocess.STDOUT,
                                          start_new_session=True))
        for p in procs[1:]:
            p.wait(timeout=100)
        outs = [open(path).read() for path in logs]
        for i, p in enumerate(procs[1:]):
            assert p.returncode == 0, "worker %d failed:\n%s\nps:\n%s" % (i, outs[i][-2000:],
                                                                         open(ps_log.name).read()[-2000:])
        assert procs[0].wait(timeout=30) == 0, "muster-ps did not exit 0 after every worker finished"
        return outs[0]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def test_ps_one_server_two_workers_train_and_resume(tmp):
    out = run_ps_job(["--epochs", "3"], tmp)
    assert "mode=ps workers=2" in out
    check_trained(out)
    ckpt = os.path.join(tmp, "ckpt")
    run_ps_job(["--epochs", "1", "--checkpoint-dir", ckpt], tmp)
    assert any(n.startswith("ckpt-") for n in os.listdir(ckpt)), os.listdir(ckpt)
    resumed = run_ps_job(["--epochs", "3", "--checkpoint-dir", ckpt], tmp)
    assert re.search(r"resumed at global step 47", resumed), resumed[-2000:]
    check_trained(resumed)
