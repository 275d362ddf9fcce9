"""Where muster's runtime extensions (_muster_runtime, _muster_ps) are looked for: standard library only.

The runtime (runtime.py, torch/ps.py) loads them from here; the REST SDK
(interpreter.py) only lists what is there, to tell whether this interpreter
could load one, and never imports the runtime to do so. In order:
$MUSTER_RUNTIME_PATH, $MUSTER_BINARY_DIR/python/muster, the repository's
build/python/muster, then its other build*/ folders, newest first.
"""
import glob
import os

from .settings import Settings


def candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    env = Settings.environment()
    dirs = []
    if env.raw("MUSTER_RUNTIME_PATH") is not None:
        dirs.append(env.raw("MUSTER_RUNTIME_PATH"))
    if env.raw("MUSTER_BINARY_DIR") is not None:
        dirs.append(os.path.join(env.raw("MUSTER_BINARY_DIR"), "python", "muster"))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))  # <repo>/sdk/python/muster -> <repo>
    dirs.append(os.path.join(repo, "build", "python", "muster"))
    others = glob.glob(os.path.join(repo, "build*", "python", "muster"))
    dirs.extend(d for d in sorted(others, key=os.path.getmtime, reverse=True) if d not in dirs)
    return dirs
