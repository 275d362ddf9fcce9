"""The Python import checker on small fabricated packages: clean passes; a crossing and a cycle fail, named."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_python_imports as checker  # noqa: E402

LAYERS = {
    "base": (["pkg.errors"], []),
    "extension": (["pkg._muster_*"], []),
    "runtime": (["pkg.rt", "pkg.rt.*"], ["base", "extension"]),
    "sdk": (["pkg", "pkg.*"], ["base"]),
}


def write(root, files):
    for path, text in files.items():
        full = root / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)


CLEAN = {
    "pkg/__init__.py": "from .client import Client\n",
    "pkg/errors.py": "import os\n",
    "pkg/client.py": "from .errors import os\nfrom . import errors\n",
    "pkg/rt/__init__.py": "from .top import init\n",
    "pkg/rt/top.py": "from . import leaf\nfrom .. import _muster_runtime\nfrom ..errors import os\n",
    "pkg/rt/leaf.py": "from .. import rt  # the ancestor package: not an edge\nimport pkg.errors\n",
}


def test_clean_package_passes(tmp_path):
    write(tmp_path, CLEAN)
    assert checker.check(str(tmp_path), "pkg", LAYERS) == []


def test_sdk_importing_the_runtime_inside_a_function_is_named(tmp_path):
    files = dict(CLEAN)
    files["pkg/client.py"] = "def f():\n    from .rt import top\n"
    write(tmp_path, files)
    problems = checker.check(str(tmp_path), "pkg", LAYERS)
    assert problems == ["pkg/client.py:2: pkg.client (layer sdk) imports pkg.rt.top (layer runtime), "
                        "which sdk may not use"]


def test_extension_outside_the_runtime_is_named(tmp_path):
    files = dict(CLEAN)
    files["pkg/client.py"] = "from . import _muster_runtime\n"
    write(tmp_path, files)
    problems = checker.check(str(tmp_path), "pkg", LAYERS)
    assert len(problems) == 1 and "pkg.client (layer sdk) imports pkg._muster_runtime (layer extension)" in problems[0]


def test_function_level_cycle_is_named_with_each_edge(tmp_path):
    files = dict(CLEAN)
    files["pkg/rt/leaf.py"] = "def reset():\n    from . import top\n"
    write(tmp_path, files)
    problems = checker.check(str(tmp_path), "pkg", LAYERS)
    assert len(problems) == 1
    assert problems[0].startswith("import cycle among 2 modules: pkg.rt.leaf, pkg.rt.top")
    assert "pkg.rt.leaf -> pkg.rt.top (pkg/rt/leaf.py:2)" in problems[0]
    assert "pkg.rt.top -> pkg.rt.leaf (pkg/rt/top.py:1)" in problems[0]


def test_the_real_package_is_clean():
    source = os.environ.get("MUSTER_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    assert checker.check(os.path.join(source, "sdk", "python")) == []
