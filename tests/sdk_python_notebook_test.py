"""The example notebooks and a ported CML notebook, run end to end in a real ipykernel (integration).

Each notebook runs through examples/notebook/run_notebook.py (nbclient, kernel
"python3") against a real musterd whose project dir is the repository, and
fails on any cell error (the notebooks assert their own outcomes). Training
notebooks get tiny parameters (1 epoch on 3,000 images). Also checks the
committed .ipynb files are what make_notebooks.py writes.
"""
import json
import os
import re
import subprocess
import sys
import time

import pytest

from sdk_daemon import Daemon, processes_with_env, sdk_session

REPO = os.environ.get("MUSTER_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..")
NOTEBOOKS = os.path.join(REPO, "examples", "notebook")
DATA = "/usr/share/datasets/fashion-mnist"
sys.path.insert(0, NOTEBOOKS)

import make_notebooks  # noqa: E402
import run_notebook  # noqa: E402

TINY_TRAINING = [("EPOCHS", "1"), ("LIMIT", "3000"), ("TEST_LIMIT", "1000"), ("MIN_ACCURACY", "0.5")]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    env = {"MUSTER_PROJECT_DIR": REPO, "PYTHONPATH": os.path.join(REPO, "sdk", "python"), "OMP_NUM_THREADS": "1"}
    with Daemon(REPO, tmp_path_factory.mktemp("state")) as d, sdk_session(d, env=env):
        yield d


def execute(name, overrides=(), where=NOTEBOOKS):
    nb = run_notebook.run(os.path.join(where, name), overrides, cwd=REPO, timeout=300)
    return "".join(run_notebook.outputs_text(c) for c in nb.cells if c.cell_type == "code")


def test_committed_notebooks_are_what_the_generator_writes():
    for name, cells in make_notebooks.NOTEBOOKS.items():
        with open(os.path.join(NOTEBOOKS, name)) as f:
            assert f.read() == make_notebooks.render(cells), "%s is stale: run make_notebooks.py" % name
        json.loads(make_notebooks.render(cells))


def test_a_python3_without_nbclient_runs_the_notebook_under_debians(tmp_path):
    """README: `python3 examples/notebook/run_notebook.py ...`, where the python3 first on PATH (pyenv, a
    venv) has no nbclient: the script runs itself again under /usr/bin/python3, saying so, and the kernel
    is that Python's; a second start that still lacks it names the Debian packages instead."""
    import nbformat
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    assert subprocess.run([python, "-c", "import nbclient"], capture_output=True).returncode != 0
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sys\nprint(6 * 7, sys.prefix)")]),
                   str(path))
    script = os.path.join(NOTEBOOKS, "run_notebook.py")
    env = dict(os.environ)
    env.pop("MUSTER_RUN_NOTEBOOK_AGAIN", None)
    r = subprocess.run([python, script, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "42 /usr\n" in r.stdout, r.stdout
    assert "cannot import nbclient; running under /usr/bin/python3" in r.stderr, r.stderr
    env["MUSTER_RUN_NOTEBOOK_AGAIN"] = "1"
    r = subprocess.run([python, script, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 1 and "python3-nbclient" in r.stderr and "42" not in r.stdout, (r.stdout, r.stderr)


def test_workers_basics(daemon):
    text = execute("workers_basics.ipynb", [("WORK_SECONDS", "60")])
    assert "waiting to be stopped" in text and "exit code 2" in text, text


def test_ported_cml_notebook_runs_unchanged(daemon):
    text = execute("cml_ported.ipynb", where=os.path.join(REPO, "tests", "notebooks"))
    assert text.count(" succeeded 20") >= 2, text  # "<id> succeeded <running_at> <duration>"
    # await_workers' progress went to a Jupyter display (display_data), updated in place.
    assert "muster: 2/2 workers succeeded" in text, text


def test_a_notebook_shows_workers_as_lines_and_a_failed_workers_traceback(daemon, tmp_path):
    """What a notebook user sees: launch_workers' and await_workers' results as one line per worker, the
    progress display ending with the failed worker's last log lines, and its log_tail shown as lines."""
    import nbformat
    cells = ["import muster\n"
             "ws = muster.launch_workers(n=1, cpu=0.5, memory=0.5, code=\"raise ValueError('boom in a notebook')\")\n"
             "ws",
             "res = muster.await_workers(ws, wait_for_completion=True, timeout_seconds=60)\nres",
             "res['failures'][0]['log_tail']"]
    path = tmp_path / "shown.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), str(path))
    nb = run_notebook.run(str(path), cwd=REPO, timeout=120)

    def shown(cell, kind):
        return [o["data"]["text/plain"] for o in cell.outputs if o["output_type"] == kind]

    [launched] = shown(nb.cells[0], "execute_result")
    assert re.fullmatch(r"\[<Worker [0-9a-f]{10} (scheduling|starting)>\]", launched), launched
    progress = shown(nb.cells[1], "display_data")[-1]  # the one display, updated in place
    status, _, below = progress.partition("\n")
    assert status.startswith("muster: 0/1 workers succeeded, 1 failed ["), progress
    assert "--- last lines of its log ---" in below and below.splitlines()[-1] == "ValueError: boom in a notebook", \
        progress
    [result] = shown(nb.cells[1], "execute_result")
    result = re.sub(r"\s+", " ", result)  # IPython breaks a long dict after its first item
    assert re.fullmatch(r"\{'workers': \[\], 'failures': \[<Worker [0-9a-f]{10} failed 127\.0\.0\.1 exit 1 .+>\]\}",
                        result), result
    [tail] = shown(nb.cells[2], "execute_result")
    assert tail.splitlines()[-1] == "ValueError: boom in a notebook" and "\\n" not in tail, tail


def test_interrupting_the_kernel_stops_the_cluster_the_cell_started(daemon):
    """Jupyter's "interrupt kernel" during a blocking horovodrun: the cell ends in a KeyboardInterrupt
    (muster.MusterInterrupted) naming the cluster, shown as one line, and the cluster and all its
    processes are gone."""
    import muster
    from jupyter_client.manager import start_new_kernel
    km, kc = start_new_kernel(kernel_name="python3", cwd=REPO)
    try:
        before = {c["id"] for c in muster.list_clusters()}
        msg_id = kc.execute("import muster\n"
                            "try:\n"
                            "    muster.horovodrun(2, 'tests/notebooks/sleep_rank.py', cpu=0.5, memory=0.5,\n"
                            "                      wait_for_completion=True)\n"
                            "except KeyboardInterrupt as e:\n"
                            "    print('interrupted cluster', e.cluster_id)\n"
                            "    raise\n")
        deadline = time.monotonic() + 60
        cluster = None
        while time.monotonic() < deadline and cluster is None:
            new = [c for c in muster.list_clusters() if c["id"] not in before and c["status"] == "running"]
            if new and "rank sleeping" in muster.cluster_logs(new[0]):
                cluster = new[0]
            time.sleep(0.2)
        assert cluster is not None, "the cell's cluster never ran"
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=60)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=60)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "MusterInterrupted"
        assert reply["content"]["traceback"] == ["muster: interrupted; stopped cluster %s" % cluster["id"]], reply
        printed = ""
        while True:
            try:
                msg = kc.get_iopub_msg(timeout=2)
            except Exception:  # noqa: BLE001 - queue.Empty: nothing more was published
                break
            if msg["msg_type"] == "stream":
                printed += msg["content"]["text"]
        assert "interrupted cluster %s" % cluster["id"] in printed, printed
        assert muster.get_cluster(cluster)["status"] == "stopped"
        deadline = time.monotonic() + 15
        while processes_with_env("MUSTER_CLUSTER_ID=" + cluster["id"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not processes_with_env("MUSTER_CLUSTER_ID=" + cluster["id"])
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def need_training():
    if not os.path.isdir(DATA):
        pytest.skip("dataset-fashion-mnist not installed (scripts/setup.sh installs it)")
    binary = os.path.join(os.environ.get("MUSTER_BINARY_DIR", ""), "bin", "fashion_mnist")
    assert os.path.exists(binary), "fashion_mnist is not built at %s" % binary


def test_ps_training(daemon):
    need_training()
    text = execute("ps_training.ipynb", TINY_TRAINING)
    assert "ClusterSpec:" in text and "test accuracy" in text, text


def test_allreduce_training(daemon):
    need_training()
    text = execute("allreduce_training.ipynb", TINY_TRAINING)
    assert "horovodrun line:" in text and "test accuracy" in text, text


def test_pytorch_training(daemon):
    need_training()
    text = execute("pytorch_training.ipynb", [("TRAIN_ARGS", '["--epochs", "2", "--limit", "2000"]'),
                                              ("MIN_ACCURACY", "0.3")])
    for mode in ("single process:", "allreduce, 2 ranks:", "1 PS + 2 workers:"):
        assert mode in text, text


def test_ddp_training(daemon):
    import muster.runtime
    if "store" not in (muster.runtime.extension().Communicator.__init__.__doc__ or ""):
        # Its second half runs the "muster" backend, which forms its world over torch's Store.
        pytest.exit("skipped: this _muster_runtime has no Communicator(store=...) for the muster backend",
                    returncode=77)
    need_training()
    text = execute("ddp_training.ipynb", TINY_TRAINING)
    assert "torchrun line: torchrun --nnodes=2" in text and "muster  test accuracy" in text, text
