"""Runs a Python script under a real `mpirun -np N` for the muster.torch tests.

The job gets its own process group (killed when it ends or times out, pass
or fail), a private directory for Open MPI's session files, and PYTHONPATH /
MUSTER_BINARY_DIR forwarded so every rank imports this tree's muster.torch.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile

PYTHON = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))


def mpirun(np, script, args=(), env=None, timeout=240, abort_on_failure=True, forward=()):
    """Returns (exit code, combined output) of `mpirun -np np python3 script args...`.

    `forward` names more environment variables for mpirun to pass to the ranks.
    """
    run_env = dict(os.environ)
    run_env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    run_env.update(env or {})
    run_env.setdefault("PYTHONPATH", os.path.join(os.path.dirname(HERE), "sdk", "python"))
    session = tempfile.mkdtemp(prefix="muster-torch-test-")
    names = ("PYTHONPATH", "MUSTER_BINARY_DIR", "MUSTER_COMM_TIMEOUT_MS", "OMP_NUM_THREADS",
             "MUSTER_SHARED_GRADIENTS") + tuple(forward)
    forward = [v for name in names if name in run_env for v in ("-x", name)]
    argv = [os.environ.get("MUSTER_MPIEXEC", "mpirun"), "--allow-run-as-root", "--oversubscribe",
            "-mca", "btl", "self,vader,tcp", "-mca", "btl_vader_single_copy_mechanism", "none",
            "-mca", "orte_tmpdir_base", session, "-mca", "btl_vader_backing_directory", session]
    if not abort_on_failure:
        argv += ["-mca", "orte_abort_on_non_zero_status", "0"]
    argv += forward + ["-np", str(np), PYTHON, os.path.join(HERE, script)] + [str(a) for a in args]
    proc = subprocess.Popen(argv, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError("mpirun -np %d %s did not finish within %d s (a hang):\n%s"
                             % (np, script, timeout, out)) from None
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # stragglers mpirun left behind
        except ProcessLookupError:
            pass
        shutil.rmtree(session, ignore_errors=True)


if __name__ == "__main__":
    # python3 torch_mpirun.py NP SCRIPT ARGS... (for ctest): passes when mpirun
    # exits 0 and every rank printed "rank <r>: all <k> checks passed".
    import re
    np = int(sys.argv[1])
    code, output = mpirun(np, sys.argv[2], sys.argv[3:])
    sys.stdout.write(output)
    ranks = {int(m) for m in re.findall(r"rank (\d+): all \d+ checks passed", output)}
    if code == 0 and ranks != set(range(np)):
        sys.stdout.write("\nFAILED: ranks %s did not report all checks passed\n" % sorted(set(range(np)) - ranks))
        code = 1
    sys.exit(code)
