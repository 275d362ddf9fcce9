"""The layers of the Python package `muster` (docs/ARCHITECTURE.md, "Layers"), checked on its imports.

Every `import` and `from ... import` in every module is read, those inside
functions included (a function-level import is still an edge: it only moves
the cycle to run time). The check fails, naming file:line and both modules,
when
- an import crosses the table below (the REST SDK never loads the runtime or
  its extension; the runtime never reaches the daemon's client);
- the modules' imports form a cycle (the cycle is printed, one edge a line).
An import of a module's own ancestor package is not an edge: Python has
initialised the package before the module runs.

Usage: check_python_imports.py --package <dir holding the package> [--name muster]
"""
import argparse
import ast
import fnmatch
import os
import sys

# layer -> (module patterns, layers it may use). First match wins.
LAYERS = {
    "base": (["muster.errors", "muster.settings", "muster.extension_path"], []),
    "extension": (["muster._muster_*"], []),
    "runtime": (["muster.runtime", "muster.runtime_errors", "muster.failure_record", "muster.torch",
                 "muster.torch.*"], ["base", "extension"]),
    "sdk": (["muster", "muster.*"], ["base"]),
}


def layer_of(module, layers):
    for name, (patterns, _) in layers.items():
        if any(fnmatch.fnmatchcase(module, p) for p in patterns):
            return name
    return None


def modules_of(root, package):
    """module name -> file, for every .py under <root>/<package>."""
    found = {}
    for folder, _, files in os.walk(os.path.join(root, package)):
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(folder, f)
            name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
            if name.endswith(".__init__"):
                name = name[:-len(".__init__")]
            found[name] = path
    return found


def imports_of(module, path, known, package):
    """[(line, imported module)] for the imports of `module` that name a module of `package`."""
    is_package = os.path.basename(path) == "__init__.py"
    here = module.split(".") if is_package else module.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            # `from pkg import name`: the submodule pkg.name when there is one
            # (or an extension module, which has no .py), else pkg itself.
            targets = []
            for a in node.names:
                sub = origin + "." + a.name
                targets.append(sub if sub in known or fnmatch.fnmatchcase(a.name, "_muster_*") else origin)
        else:
            continue
        for target in targets:
            if not (target == package or target.startswith(package + ".")):
                continue
            if target == module or module.startswith(target + "."):
                continue  # itself, or an ancestor package
            out.append((node.lineno, target))
    return out


def find_cycles(graph):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def check(root, package="muster", layers=LAYERS):
    """The violations, as lines of text (empty when the package is clean)."""
    known = modules_of(root, package)
    problems = []
    graph = {m: set() for m in known}
    where = {}
    for module, path in sorted(known.items()):
        mine = layer_of(module, layers)
        for line, target in imports_of(module, path, known, package):
            rel = os.path.relpath(path, root)
            if target in known:
                graph[module].add(target)
                where.setdefault((module, target), "%s:%d" % (rel, line))
            theirs = layer_of(target, layers)
            if mine is None or theirs is None or theirs == mine:
                continue
            if theirs not in layers[mine][1]:
                problems.append("%s:%d: %s (layer %s) imports %s (layer %s), which %s may not use"
                                % (rel, line, module, mine, target, theirs, mine))
    for cycle in find_cycles(graph):
        members = set(cycle)
        edges = ["  %s -> %s (%s)" % (a, b, where[(a, b)])
                 for a in cycle for b in sorted(graph[a]) if b in members]
        problems.append("import cycle among %d modules: %s\n%s" % (len(cycle), ", ".join(cycle), "\n".join(edges)))
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", required=True, help="the folder holding the package (sdk/python)")
    parser.add_argument("--name", default="muster")
    args = parser.parse_args()
    problems = check(args.package, args.name)
    for p in problems:
        print(p)
    if problems:
        print("%d layering problem(s) in the Python package %s" % (len(problems), args.name))
        return 1
    print("%s: %d modules, no import cycle, every import within the layers"
          % (args.name, len(modules_of(args.package, args.name))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
