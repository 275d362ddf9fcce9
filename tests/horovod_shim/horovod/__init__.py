"""A stand-in `horovod` package whose `horovod.torch` is muster.torch.

Only for running Horovod's own PyTorch test file against muster
(tests/horovod_suite.py puts this folder first on PYTHONPATH): the file says
`import horovod.torch as hvd` and gets muster.torch itself, not a copy, so
every call it makes lands in muster's implementation. Nothing of Horovod's
code is here; `horovod.runner.util.threads` is the one helper its test
utilities import.
"""
import sys

import muster.torch as torch  # noqa: F401 (re-exported as horovod.torch)

sys.modules[__name__ + ".torch"] = torch
