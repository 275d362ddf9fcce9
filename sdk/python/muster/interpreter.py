"""Which Python the workers run: the notebook's own, when it can run muster's runtime.

launch_workers, run_cluster and horovodrun send `python` (the interpreter
every worker or rank runs its script with, api/kernel.h in the daemon's
source). Given explicitly, it is sent as is. Left out (None), the SDK sends
this notebook's interpreter, sys.executable, when it has what muster's
training runtime needs:
  - numpy (muster.runtime's one dependency), and
  - if a runtime extension (_muster_runtime) is found from here (beside
    the package, $MUSTER_RUNTIME_PATH, $MUSTER_BINARY_DIR, the repository's
    build folders), one built for this interpreter's ABI;
otherwise it sends nothing and the daemon runs /usr/bin/python3 (Debian's,
where the extension is built). So a venv or conda notebook's workers keep
its packages, and one that could not load the runtime falls back to the
interpreter that can. Nothing is imported to decide this.

Example::

    muster.interpreter.default_python()   # "/home/me/venvs/ml/bin/python" or None
"""
import glob
import importlib.machinery
import importlib.util
import os
import sys
from typing import Optional

from . import extension_path

# What the daemon runs when the request names no interpreter.
DAEMON_DEFAULT = "/usr/bin/python3"


def _extension_files():
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    for d in [here] + extension_path.candidates():
        found.extend(glob.glob(os.path.join(d, "_muster_runtime*.so")))
    return found


def can_run_runtime() -> bool:
    """Whether this interpreter has muster's runtime dependencies (see the module comment)."""
    if importlib.util.find_spec("numpy") is None:
        return False
    built = _extension_files()
    if not built:
        return True  # nothing to compare with (the notebook is not beside a build)
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return any(os.path.basename(f).endswith(suffixes) for f in built)


def default_python() -> Optional[str]:
    """The interpreter to send when the caller named none: sys.executable or None (the daemon's default)."""
    exe = sys.executable
    if not exe or not os.path.isabs(exe) or os.path.abspath(exe) == DAEMON_DEFAULT:
        return None
    return exe if can_run_runtime() else None


# Set by `import muster` in a notebook: its choice, for the commands it runs
# (os.system("horovodrun ... python train.py") runs them in this interpreter).
NOTEBOOK_PYTHON = "MUSTER_NOTEBOOK_PYTHON"


def export_for_commands() -> None:
    """Records default_python() in the environment that os.system / subprocess commands inherit,
    unless a notebook above this process did (a command run by it keeps the notebook's choice)."""
    if NOTEBOOK_PYTHON not in os.environ:
        os.environ[NOTEBOOK_PYTHON] = default_python() or ""


def for_commands() -> Optional[str]:
    """The interpreter a command (horovodrun, muster) sends for a bare `python`: the notebook's choice
    when a notebook ran it (MUSTER_NOTEBOOK_PYTHON; "" is the daemon's default), else default_python()."""
    if NOTEBOOK_PYTHON in os.environ:
        return os.environ[NOTEBOOK_PYTHON] or None
    return default_python()


def resolve(python: Optional[str]) -> Optional[str]:
    """`python` as a request sends it: as given, or default_python() when None; "" sends nothing."""
    if python is None:
        return default_python()
    return python or None
