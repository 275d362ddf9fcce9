"""muster.torch against Horovod's own documentation: a Horovod-documentation-style PyTorch
script (torch_horovod_script.py, only its import line changed from
horovod.torch) trains under `mpirun -np 2` to the same parameters as under
`-np 1` on the same global batch."""
import os
import re
import tempfile

import torch

from torch_mpirun import HERE, mpirun

SCRIPT = "torch_horovod_script.py"


def test_script_differs_from_horovod_only_in_the_import_line():
    text = open(os.path.join(HERE, SCRIPT)).read()
    code = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    imports = [line for line in code if "hvd" in line and line.startswith("import")]
    assert imports == ["import muster.torch as hvd  # was: import horovod.torch as hvd"]
    assert not [line for line in code if "muster" in line and line not in imports]
    for call in ("hvd.init()", "hvd.DistributedOptimizer(", "hvd.broadcast_parameters(",
                 "hvd.broadcast_optimizer_state(", "hvd.allreduce(", "hvd.allgather("):
        assert call in text, call


def test_two_ranks_train_to_the_one_rank_parameters():
    with tempfile.TemporaryDirectory(prefix="muster-torch-eq-") as d:
        results = {}
        for np in (2, 1):
            out_file = os.path.join(d, "np%d.pt" % np)
            code, out = mpirun(np, SCRIPT, [out_file, 2, 32])
            assert code == 0, out
            assert re.search(r"epoch 1 loss \d", out), out
            results[np] = torch.load(out_file)
        two, one = results[2], results[1]
        assert two["state"].keys() == one["state"].keys()
        for name in one["state"]:
            diff = (two["state"][name] - one["state"][name]).abs().max().item()
            assert diff < 1e-5, "%s differs by %g between 2 ranks and 1" % (name, diff)
        assert abs(two["loss"] - one["loss"]) < 1e-5
        assert two["predictions"] == one["predictions"]
