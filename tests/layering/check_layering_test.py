"""The layering checker on a tiny fabricated tree and File API reply.

Each case writes a few folders of sources, a codemodel-v2 reply as CMake
writes it (index -> codemodel -> one file per target) and runs the checker:
the clean tree passes, and each kind of violation fails naming file:line, the
include and both targets.
"""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layering  # noqa: E402

LAYERS = {
    "base": (["core/base"], []),
    "core": (["core"], ["base"]),
    "net": (["net"], ["base"]),
    "app": (["app"], ["core", "net"]),
}


def write_tree(root, files):
    for path, text in files.items():
        full = root / "src" / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)


def write_reply(root, targets):
    """targets: name -> (type, folder, sources, [(dep, command)])."""
    reply = root / "build" / ".cmake" / "api" / "v1" / "reply"
    reply.mkdir(parents=True)
    entries = []
    for name, (kind, folder, sources, deps) in targets.items():
        commands = sorted({command for _, command in deps})
        nodes = [{"command": commands.index(command), "file": 0} for _, command in deps]
        (reply / ("target-%s.json" % name)).write_text(json.dumps({
            "name": name, "id": name + "::@1", "type": kind,
            "paths": {"source": folder, "build": folder},
            "sources": [{"path": s} for s in sources],
            "dependencies": [{"id": dep + "::@1", "backtrace": i} for i, (dep, _) in enumerate(deps)],
            "backtraceGraph": {"commands": commands, "files": ["CMakeLists.txt"], "nodes": nodes},
        }))
        entries.append({"name": name, "id": name + "::@1", "jsonFile": "target-%s.json" % name})
    (reply / "codemodel-v2-0.json").write_text(json.dumps({"configurations": [{"targets": entries}]}))
    (reply / "index-2000-01-01.json").write_text(json.dumps(
        {"reply": {"codemodel-v2": {"jsonFile": "codemodel-v2-0.json"}}}))


CLEAN_FILES = {
    "core/base/log.h": "#pragma once\n",
    "core/base/log.cc": '#include "core/base/log.h"\n',
    "core/model.h": '#pragma once\n#include "core/base/log.h"\n#include <vector>\n',
    "core/model.cc": '#include "core/model.h"\n#include "nlohmann/json.hpp"\n',
    "net/wire.h": '#pragma once\n',
    "net/wire.cc": '#include "net/wire.h"\n#include "core/base/log.h"\n',
    "app/main.cc": '#include "core/model.h"\n#include "net/wire.h"\n#include "helper.h"\n',
    "app/helper.h": '#pragma once\n#include "net/wire.h"\n',
}
CLEAN_TARGETS = {
    "base": ("STATIC_LIBRARY", "core/base", ["core/base/log.cc"], []),
    "core": ("STATIC_LIBRARY", "core", ["core/model.cc"], [("base", "target_link_libraries")]),
    "net": ("STATIC_LIBRARY", "net", ["net/wire.cc"], [("base", "target_link_libraries")]),
    "app": ("EXECUTABLE", "app", ["app/main.cc"],
            [("core", "target_link_libraries"), ("net", "target_link_libraries")]),
}


def run(tmp_path, files, targets):
    write_tree(tmp_path, files)
    write_reply(tmp_path, targets)
    model = check_layering.read_codemodel(str(tmp_path / "build"))
    assert model is not None
    return check_layering.check(model, str(tmp_path / "src"), LAYERS)


def test_clean_tree_passes(tmp_path):
    assert run(tmp_path, CLEAN_FILES, CLEAN_TARGETS) == []


def test_unlinked_sibling_fails_naming_both_targets(tmp_path):
    files = dict(CLEAN_FILES)
    files["net/wire.cc"] += '#include "core/model.h"\n'  # net may not use core
    problems = run(tmp_path, files, CLEAN_TARGETS)
    assert any(p.startswith('net/wire.cc:3: #include "core/model.h"') and "owned by core" in p
               and "net does not link" in p for p in problems), problems
    assert any("layer net (target net) may not include layer core (target core)" in p for p in problems), problems


def test_lower_layer_including_higher_fails_even_when_linked(tmp_path):
    files = dict(CLEAN_FILES)
    files["app/app.h"] = "#pragma once\n"
    files["core/model.h"] += '#include "app/app.h"\n'
    targets = dict(CLEAN_TARGETS)
    targets["applib"] = ("STATIC_LIBRARY", "app", [], [])
    targets["core"] = ("STATIC_LIBRARY", "core", ["core/model.cc"],
                       [("base", "target_link_libraries"), ("applib", "target_link_libraries")])
    problems = run(tmp_path, files, targets)
    # Found in a header (core/model.h), not only in sources.
    assert any(p.startswith('core/model.h:4: #include "app/app.h": layer core (target core) may not include '
                            'layer app') for p in problems), problems


def test_build_order_dependency_is_not_linkage(tmp_path):
    targets = dict(CLEAN_TARGETS)
    targets["app"] = ("EXECUTABLE", "app", ["app/main.cc"],
                      [("core", "target_link_libraries"), ("net", "add_dependencies")])
    problems = run(tmp_path, CLEAN_FILES, targets)
    assert any('app/main.cc:2: #include "net/wire.h": owned by net, which app does not link' in p
               for p in problems), problems


def test_header_nobody_includes_is_still_checked(tmp_path):
    files = dict(CLEAN_FILES)
    files["net/unused.h"] = '#pragma once\n#include "app/helper.h"\n'
    problems = run(tmp_path, files, CLEAN_TARGETS)
    assert any(p.startswith('net/unused.h:2: #include "app/helper.h": layer net (target net) may not include '
                            'layer app') for p in problems), problems


def test_transitive_link_counts(tmp_path):
    # app reaches base only through core and net: allowed.
    files = dict(CLEAN_FILES)
    files["app/main.cc"] += '#include "core/base/log.h"\n'
    assert run(tmp_path, files, CLEAN_TARGETS) == []


def test_header_without_owner_and_foreign_sources_fail(tmp_path):
    files = dict(CLEAN_FILES)
    files["lost/orphan.h"] = "#pragma once\n"
    files["app/main.cc"] += '#include "lost/orphan.h"\n'
    targets = dict(CLEAN_TARGETS)
    targets["app"] = ("EXECUTABLE", "app", ["app/main.cc", "net/wire.cc"],
                      [("core", "target_link_libraries"), ("net", "target_link_libraries")])
    problems = run(tmp_path, files, targets)
    assert any("lost/orphan.h belongs to no target" in p for p in problems), problems
    assert any("target app compiles net/wire.cc from another folder" in p for p in problems), problems


def test_interface_library_owns_its_headers(tmp_path):
    # core/api.h belongs to the header-only "coreapi", which uses base: its
    # users (core, app) link base, so its include of base is fine, and a user
    # that does not link coreapi may not include it.
    files = dict(CLEAN_FILES)
    files["core/api.h"] = '#pragma once\n#include "core/base/log.h"\n'
    files["core/model.cc"] += '#include "core/api.h"\n'
    files["net/wire.cc"] += '#include "core/api.h"\n'
    targets = dict(CLEAN_TARGETS)
    targets["coreapi"] = ("INTERFACE_LIBRARY", "core", ["core/api.h"], [])
    targets["core"] = ("STATIC_LIBRARY", "core", ["core/model.cc"],
                       [("base", "target_link_libraries"), ("coreapi", "target_link_libraries")])
    problems = run(tmp_path, files, targets)
    assert [p for p in problems if "owned by" in p] == [
        'net/wire.cc:3: #include "core/api.h": owned by coreapi, which net does not link'], problems


def test_layer_cycle_is_rejected():
    with pytest.raises(ValueError, match="cycle"):
        check_layering.layer_closure({"a": (["a"], ["b"]), "b": (["b"], ["a"])})


def test_project_layers_are_a_dag_and_cover_every_folder():
    reach = check_layering.layer_closure(check_layering.LAYERS)
    assert "runtime" not in reach["workers"] and "workers" not in reach["runtime"]
    assert "service" not in reach["runtime"] and reach["base"] == {"base"}
    source = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for folder in ("api", "api/base", "clusterspec", "runtime", "workers", "service", "sdk",
                   "examples", "bench", "tests"):
        assert os.path.isdir(os.path.join(source, folder)), folder
        assert check_layering.layer_of(folder + "/x.h", check_layering.LAYERS) is not None, folder
