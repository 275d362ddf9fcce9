#!/usr/bin/python3
"""Checks that every #include in the tree follows the build's arrows.

Every target sees the whole source tree as its include root ("service/x.h"),
so the compiler does not stop a library from including a header of a library
it does not link. This check does, from what CMake itself knows: the File API
codemodel (build/.cmake/api/v1/reply, asked for by tests/layering.cmake) gives
each target's sources, the folder that defines it and its link dependencies.

For every `#include "a/b.h"` that names a file of the source tree, in a
target's sources and in the headers it owns:
  1. layers: the header's layer must be the includer's layer or one it may
     use (LAYERS below, the order docs/ARCHITECTURE.md "Layers" states);
  2. targets: the header's owner must be the target itself or in its link
     closure (link dependencies, transitively; add_dependencies() is build
     order, not linkage, and does not count);
  3. folders: a target's sources live under the folder whose CMakeLists.txt
     defines it.
A header's owner: the targets listing it among their sources, else those
compiling its sibling <stem>.cc, else the library targets (then any targets)
defined in its folder, else the targets with sources in its folder. A header
with no owner is an error too: give it one (an INTERFACE library that lists it).

Usage: check_layering.py --source SRC --build BUILD   (exit 1 on violations)
"""
import argparse
import json
import os
import re
import subprocess
import sys

# Each layer: the folders it holds (longest prefix wins) and the layers it may
# use directly; "may use" is transitive. The two halves (control plane:
# api/workers/service, data plane: runtime) share only clusterspec and base.
LAYERS = {
    "base": (["api/base"], []),
    "api": (["api"], ["base", "clusterspec"]),
    "clusterspec": (["clusterspec"], ["base"]),
    "runtime": (["runtime"], ["clusterspec"]),
    "workers": (["workers"], ["api"]),
    "service": (["service"], ["workers", "clusterspec"]),
    "sdk": (["sdk"], []),
    "examples": (["examples"], ["runtime"]),
    "bench": (["bench"], ["examples", "service", "sdk"]),
    "tests": (["tests"], ["bench"]),
}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
CXX_EXTENSIONS = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp")
LIBRARY_TYPES = ("STATIC_LIBRARY", "SHARED_LIBRARY", "MODULE_LIBRARY", "OBJECT_LIBRARY",
                 "INTERFACE_LIBRARY")


class Target:
    def __init__(self, name, kind, folder, sources, deps):
        self.name = name
        self.kind = kind
        self.folder = folder          # the folder of the CMakeLists.txt that defines it
        self.sources = sources        # paths relative to the source root
        self.deps = deps              # names of direct link dependencies
        self.closure = set()


def layer_closure(layers):
    """layer -> every layer it may use (itself included); raises on a cycle."""
    result = {}

    def visit(name, stack):
        if name in result:
            return result[name]
        if name in stack:
            raise ValueError("layer order has a cycle: " + " -> ".join(stack + [name]))
        if name not in layers:
            raise ValueError("unknown layer %r (used by %s)" % (name, stack[-1]))
        reach = {name}
        for lower in layers[name][1]:
            reach |= visit(lower, stack + [name])
        result[name] = reach
        return reach

    for name in layers:
        visit(name, [])
    return result


def layer_of(path, layers):
    """The layer whose folder is the longest prefix of path, or None."""
    best, best_len = None, -1
    for name, (folders, _) in layers.items():
        for folder in folders:
            if (path == folder or path.startswith(folder + "/")) and len(folder) > best_len:
                best, best_len = name, len(folder)
    return best


def read_codemodel(build):
    """Targets from the newest codemodel-v2 reply under build, or None if none."""
    reply = os.path.join(build, ".cmake", "api", "v1", "reply")
    if not os.path.isdir(reply):
        return None
    indexes = sorted(f for f in os.listdir(reply) if f.startswith("index-") and f.endswith(".json"))
    if not indexes:
        return None
    with open(os.path.join(reply, indexes[-1])) as f:
        index = json.load(f)
    ref = index.get("reply", {}).get("codemodel-v2")
    if not ref or "jsonFile" not in ref:
        return None
    with open(os.path.join(reply, ref["jsonFile"])) as f:
        codemodel = json.load(f)
    config = codemodel["configurations"][0]
    raw = []
    for entry in config["targets"]:
        with open(os.path.join(reply, entry["jsonFile"])) as f:
            raw.append(json.load(f))
    name_of = {t["id"]: t["name"] for t in raw}
    targets = {}
    for t in raw:
        graph = t.get("backtraceGraph", {"nodes": [], "commands": []})
        deps = []
        for dep in t.get("dependencies", []):
            command = None
            if dep.get("backtrace") is not None:
                node = graph["nodes"][dep["backtrace"]]
                if "command" in node:
                    command = graph["commands"][node["command"]]
            if command == "add_dependencies":
                continue  # build order only: the target does not link it
            if dep["id"] in name_of:
                deps.append(name_of[dep["id"]])
        sources = [s["path"] for s in t.get("sources", []) if not os.path.isabs(s["path"])]
        folder = t["paths"]["source"]
        targets[t["name"]] = Target(t["name"], t["type"], "" if folder == "." else folder, sources, deps)
    return targets


def link_closures(targets):
    for t in targets.values():
        seen, todo = set(), list(t.deps)
        while todo:
            name = todo.pop()
            if name in seen or name not in targets:
                continue
            seen.add(name)
            todo.extend(targets[name].deps)
        t.closure = seen
    # The codemodel does not list what an INTERFACE library links (it is not
    # built); its users link that too, so what every user reaches stands for it.
    for t in targets.values():
        if t.kind == "INTERFACE_LIBRARY" and not t.deps:
            users = [u.closure - {t.name} for u in targets.values() if t.name in u.deps]
            t.closure = set.intersection(*users) if users else set()


def header_owners(targets):
    """header path -> set of owning target names (see the module comment)."""
    listed, by_stem, defined_in, sources_in = {}, {}, {}, {}
    for t in targets.values():
        defined_in.setdefault(t.folder, []).append(t)
        for s in t.sources:
            root, ext = os.path.splitext(s)
            if ext in (".h", ".hh", ".hpp"):
                listed.setdefault(s, set()).add(t.name)
            else:
                by_stem.setdefault(root, set()).add(t.name)
            sources_in.setdefault(os.path.dirname(s), set()).add(t.name)

    def owners(header):
        if header in listed:
            return listed[header]
        stem = os.path.splitext(header)[0]
        if stem in by_stem:
            return by_stem[stem]
        folder = os.path.dirname(header)
        here = defined_in.get(folder, [])
        libraries = {t.name for t in here if t.kind in LIBRARY_TYPES}
        if libraries:
            return libraries
        if here:
            return {t.name for t in here}
        return sources_in.get(folder, set())

    return owners


def includes_of(path, source_root):
    """(line number, include text, resolved tree path or None) for each #include."""
    result = []
    with open(os.path.join(source_root, path), errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            quote, text = m.groups()
            resolved = None
            if "/" in text and os.path.isfile(os.path.join(source_root, text)):
                resolved = os.path.normpath(text)
            elif quote == '"':
                beside = os.path.normpath(os.path.join(os.path.dirname(path), text))
                if os.path.isfile(os.path.join(source_root, beside)) and not beside.startswith(".."):
                    resolved = beside
            if resolved is not None:
                result.append((number, text, resolved))
    return result


def check(targets, source_root, layers=LAYERS):
    """Every violation as one line of text; empty when the tree is clean."""
    reach = layer_closure(layers)
    link_closures(targets)
    owners = header_owners(targets)
    problems = []

    # Which files each target answers for: its C/C++ sources and the headers it owns.
    files = {}
    for t in targets.values():
        for s in t.sources:
            if s.endswith(CXX_EXTENSIONS):
                files.setdefault(s, set()).add(t.name)
        if not (t.folder == "" or all(s == t.folder or s.startswith(t.folder + "/") for s in t.sources)):
            outside = [s for s in t.sources if not s.startswith(t.folder + "/")]
            problems.append("%s/CMakeLists.txt: target %s compiles %s from another folder "
                            "(a folder's CMakeLists.txt defines only its own targets)"
                            % (t.folder or ".", t.name, ", ".join(outside)))
    # Headers: those listed as sources, those beside any target's sources
    # (the headers of its folder), and every tree header they include.
    pending = [f for f in files if f.endswith((".h", ".hh", ".hpp"))]
    for folder in sorted({os.path.dirname(s) for t in targets.values() for s in t.sources}):
        full = os.path.join(source_root, folder)
        if os.path.isdir(full):
            pending.extend(os.path.join(folder, f) if folder else f for f in sorted(os.listdir(full))
                           if f.endswith((".h", ".hh", ".hpp")) and os.path.isfile(os.path.join(full, f)))
    pending = sorted(set(pending))
    checked_headers = set(pending)
    for s in list(files):
        for _, _, header in includes_of(s, source_root):
            if header not in checked_headers:
                checked_headers.add(header)
                pending.append(header)
    # Each header is checked as part of its owners.
    while pending:
        header = pending.pop()
        for name in owners(header):
            files.setdefault(header, set()).add(name)
        for _, _, included in includes_of(header, source_root):
            if included not in checked_headers:
                checked_headers.add(included)
                pending.append(included)

    for path in sorted(files):
        if not os.path.isfile(os.path.join(source_root, path)):
            continue
        names = sorted(files[path])
        for number, text, header in includes_of(path, source_root):
            where = "%s:%d: #include \"%s\"" % (path, number, text)
            header_owners_ = owners(header)
            if not header_owners_:
                problems.append("%s: %s belongs to no target (list it in one, e.g. an INTERFACE library)"
                                % (where, header))
                continue
            # Layers: judged by the includer's target folder.
            for name in names:
                from_layer = layer_of(targets[name].folder or path, layers)
                to_layer = layer_of(header, layers)
                if from_layer is None or to_layer is None:
                    problems.append("%s: %s is in no layer (declare its folder in LAYERS)"
                                    % (where, path if from_layer is None else header))
                elif to_layer not in reach[from_layer]:
                    problems.append("%s: layer %s (target %s) may not include layer %s (target %s)"
                                    % (where, from_layer, name, to_layer, ", ".join(sorted(header_owners_))))
            # Targets: the owner must be the includer or something it links.
            if not any(name in header_owners_ or header_owners_ & targets[name].closure for name in names):
                problems.append("%s: owned by %s, which %s does not link"
                                % (where, " / ".join(sorted(header_owners_)), " / ".join(names)))
    return sorted(set(problems))


def configure_for_codemodel(build):
    """CMake answers a File API query from the configure after the one that
    wrote it: in a build dir configured once, re-run cmake to get the reply."""
    subprocess.run(["cmake", build], check=True, stdout=subprocess.DEVNULL)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", required=True, help="the source tree")
    parser.add_argument("--build", required=True, help="a configured build dir")
    args = parser.parse_args(argv)
    targets = read_codemodel(args.build)
    if targets is None:
        configure_for_codemodel(args.build)
        targets = read_codemodel(args.build)
    if targets is None:
        print("no codemodel-v2 reply under %s/.cmake/api/v1/reply: is the codemodel query "
              "written (tests/layering.cmake)?" % args.build, file=sys.stderr)
        return 2
    problems = check(targets, os.path.abspath(args.source))
    for p in problems:
        print(p)
    if problems:
        print("%d layering violation(s); the order is in tests/layering/check_layering.py (LAYERS) "
              "and docs/ARCHITECTURE.md (Layers)" % len(problems))
        return 1
    print("layering: %d targets, every include follows the link graph and the layer order" % len(targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
