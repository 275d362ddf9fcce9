"""Installing the Python SDK as a user does: pip, offline, with the system's setuptools (integration).

`python3 -m pip install --no-build-isolation --no-index <sdk/python>` into a
venv made with `/usr/bin/python3 -m venv --system-site-packages` (Debian 12's pip
refuses to install into the system interpreter without
--break-system-packages; a venv is the supported way). The source is copied
to a temp dir first, so the build's build/ and egg-info never land in the
checkout. Then, outside the source tree and without PYTHONPATH: `import
muster` comes from the venv, py.typed is installed, the `muster` entry point
runs and talks to a real musterd.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from sdk_daemon import Daemon, musterd_path

SRC = os.path.join(os.environ.get("MUSTER_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..")), "sdk", "python")


def run(cmd, **kw):
    env = dict(kw.pop("env", os.environ))
    env.pop("PYTHONPATH", None)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, **kw)
    assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-2000:])
    return r.stdout


def test_pip_install_into_a_venv_gives_the_package_and_the_cli(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(SRC, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
    py = str(venv / "bin" / "python")
    run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--disable-pip-version-check",
         str(src)], cwd=str(tmp_path))
    where = run([py, "-c", "import muster, os; print(os.path.dirname(muster.__file__))"], cwd="/").strip()
    assert where.startswith(str(venv)), where
    assert os.path.exists(os.path.join(where, "py.typed"))
    assert run([str(venv / "bin" / "muster"), "--version"]).strip() == "muster 0.1.0"
    assert "horovodrun" in run([str(venv / "bin" / "muster"), "--help"])
    if not os.path.exists(musterd_path()):
        pytest.fail("musterd is not built at %s" % musterd_path())
    project = tmp_path / "project"
    project.mkdir()
    with Daemon(project, tmp_path / "state") as d:
        out = run([str(venv / "bin" / "muster"), "--json", "ps", "-a"], env=d.env(), cwd="/")
        assert json.loads(out) == []
