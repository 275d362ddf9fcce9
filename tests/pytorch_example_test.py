"""examples/pytorch through musterd, as a notebook user runs it: the notebook
example examples/notebook/pytorch_training.py against a real musterd (local
backend, the repository as its project dir) on a short run (3000 images, 2
epochs), one ctest entry per mode (tests/torch_ps.cmake selects with -k):
  single     one worker (launch_workers)
  allreduce  muster.horovodrun(2, ...): mpirun, `import muster.torch as hvd`
  ps         muster.run_cluster(n_workers=2, n_ps=1, ...): muster-ps + SyncReplicasOptimizer
Each asserts the notebook finished and the accuracy is sane (> 0.6; the loss
is still falling after 94 steps).
"""
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sdk_daemon import Daemon  # noqa: E402

REPO = os.environ.get("MUSTER_SOURCE_DIR") or os.path.dirname(HERE)
NOTEBOOK = os.path.join(REPO, "examples", "notebook", "pytorch_training.py")
DATA = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

pytestmark = pytest.mark.skipif(not os.path.exists(DATA), reason="dataset-fashion-mnist not installed")


@pytest.fixture
def daemon(tmp_path):
    with Daemon(REPO, tmp_path / "state") as d:
        yield d


@pytest.mark.parametrize("mode", ["single", "allreduce", "ps"])
def test_notebook_trains(daemon, mode):
    env = daemon.env()
    env.update(MODES=mode, TRAIN_ARGS="--epochs 2 --limit 3000 --test-limit 2000", MIN_ACCURACY="0.6",
               MUSTER_PROJECT_DIR=REPO, PYTHONPATH=os.path.join(REPO, "sdk", "python"))
    p = subprocess.run([sys.executable, NOTEBOOK], env=env, cwd=REPO, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=400)
    assert p.returncode == 0, "%s\n--- musterd ---\n%s" % (p.stdout[-4000:], daemon.log())
    print(p.stdout)
    m = re.search(r"test accuracy ([0-9.]+)%", p.stdout)
    assert m and float(m.group(1)) > 60.0, p.stdout
    if mode == "ps":  # muster-ps ran and the chief's log came back through the SDK
        assert "ClusterSpec:" in p.stdout and "'ps'" in p.stdout, p.stdout
