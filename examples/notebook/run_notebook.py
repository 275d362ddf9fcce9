#!/usr/bin/env python3
"""Runs a notebook end to end in a real Jupyter kernel (nbclient + ipykernel), as "Run All" does.

    python3 examples/notebook/run_notebook.py NOTEBOOK.ipynb [--set NAME=VALUE ...] [--out FILE]

--set adds a cell after the cell tagged "parameters" (papermill's
convention) that assigns NAME = VALUE (VALUE is a Python literal), e.g.
`--set EPOCHS=1`. The kernel is "python3" and runs in the repository root
(--cwd), with this process's environment (MUSTER_STATE_DIR, PYTHONPATH, ...).
The cells' text output is printed once all have run; any cell error stops the
run with exit code 1 and the error printed. --out saves the executed notebook.

Needs Debian's python3-nbclient and python3-ipykernel (scripts/setup.sh).
Started by a python3 that has no nbclient (a pyenv or venv one first on
PATH), it runs itself again under Debian's /usr/bin/python3, saying so.
"""
import argparse
import os
import sys

DEBIAN_PYTHON = "/usr/bin/python3"
_AGAIN = "MUSTER_RUN_NOTEBOOK_AGAIN"  # set for the second start, so there is no third


def ensure_nbclient(argv):
    """Returns once nbclient imports; else runs this script under Debian's python3, or exits naming what is missing."""
    try:
        import nbclient.exceptions  # noqa: F401
        os.environ.pop(_AGAIN, None)  # not for the kernel
        return
    except ImportError:
        pass
    debian = sys.prefix == sys.base_prefix == "/usr"
    if not debian and not os.environ.get(_AGAIN) and os.access(DEBIAN_PYTHON, os.X_OK):
        print("run_notebook.py: %s cannot import nbclient; running under %s (Debian's python3-nbclient)"
              % (sys.executable, DEBIAN_PYTHON), file=sys.stderr, flush=True)
        os.environ[_AGAIN] = "1"
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(__file__)] + list(argv))
    sys.exit("run_notebook.py: %s cannot import nbclient; it needs Debian's python3-nbclient and "
             "python3-ipykernel, which scripts/setup.sh (make setup) installs for %s"
             % (sys.executable, DEBIAN_PYTHON))


def parameter_cell(nb, overrides):
    """Inserts `NAME = VALUE` lines after the "parameters" cell (or first code cell)."""
    import nbformat
    if not overrides:
        return
    index = next((i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])),
                 next(i for i, c in enumerate(nb.cells) if c.cell_type == "code"))
    source = "# injected parameters\n" + "\n".join("%s = %s" % kv for kv in overrides)
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]}))


def outputs_text(cell):
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o.get("text", ""))
        elif o.get("output_type") in ("execute_result", "display_data"):
            out.append(o.get("data", {}).get("text/plain", "") + "\n")
    return "".join(out)


def run(path, overrides=(), cwd=None, timeout=900, out=None):
    """Executes the notebook; returns the executed notebook. Raises nbclient's CellExecutionError."""
    import nbclient
    import nbformat
    # ipykernel's debugger (pydevd) warns on every kernel start under Python
    # 3.11 that frozen modules may hide breakpoints; nobody debugs here.
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    nb = nbformat.read(path, as_version=4)
    parameter_cell(nb, list(overrides))
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": cwd or os.getcwd()}})
    try:
        client.execute()
    finally:
        if out:
            nbformat.write(nb, out)
    return nb


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebook")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a parameter")
    ap.add_argument("--cwd", default=os.getcwd(), help="the kernel's working directory (default: here)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per cell (default 900)")
    ap.add_argument("--out", help="write the executed notebook here")
    argv = sys.argv[1:] if argv is None else argv
    a = ap.parse_args(argv)
    overrides = []
    for item in a.set:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            ap.error("--set wants NAME=VALUE, got %r" % item)
        overrides.append((name, value))
    ensure_nbclient(argv)
    import nbclient.exceptions
    try:
        nb = run(a.notebook, overrides, a.cwd, a.timeout, a.out)
    except nbclient.exceptions.CellExecutionError as err:
        print("%s: a cell failed:\n%s" % (a.notebook, err), file=sys.stderr)
        return 1
    for cell in nb.cells:
        if cell.cell_type == "code":
            text = outputs_text(cell)
            if text:
                sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
