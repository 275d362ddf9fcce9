"""muster.torch under faults: every surviving rank raises a muster exception
naming the cause within the runtime's timeout (3 s here), never hangs."""
import re

import tempfile

import torch_mpirun

TIMEOUT_ENV = {"MUSTER_COMM_TIMEOUT_MS": "3000"}


def mpirun(np, script, args, env, timeout, abort_on_failure):
    # Each run's survivors wait for each other's reports before leaving (torch_fault_worker.leave).
    with tempfile.TemporaryDirectory(prefix="muster-fault-") as marks:
        return torch_mpirun.mpirun(np, script, args, env=dict(env, MUSTER_FAULT_DIR=marks), timeout=timeout,
                                   abort_on_failure=abort_on_failure, forward=("MUSTER_FAULT_DIR",))


def faults(out):
    # mpirun may splice two ranks' lines together: a report ends at the next one.
    pattern = r"(?<!NO-)FAULT rank (\d+) (\w+): (.*?)(?=(?<!NO-)FAULT rank \d+ \w+: |\n|$)"
    return {int(m.group(1)): (m.group(2), m.group(3)) for m in re.finditer(pattern, out)}


def test_mismatched_parameters_name_the_parameter_on_every_rank():
    code, out = mpirun(2, "torch_fault_worker.py", ["params"], env=TIMEOUT_ENV, timeout=120, abort_on_failure=False)
    got = faults(out)
    assert sorted(got) == [0, 1], out
    for kind, message in got.values():
        assert kind == "MismatchError", out
        assert "'2.weight'" in message and "rank 1" in message, out
    assert code == 0, out


def test_mismatched_collective_raises_on_every_rank():
    code, out = mpirun(2, "torch_fault_worker.py", ["collective"], env=TIMEOUT_ENV, timeout=120,
                       abort_on_failure=False)
    got = faults(out)
    assert sorted(got) == [0, 1], out
    for kind, message in got.values():
        assert kind in ("PeerTimeoutError", "CommError", "MismatchError"), out
    assert "NO-FAULT" not in out, out


def test_dead_rank_is_named_by_every_survivor():
    code, out = mpirun(3, "torch_fault_worker.py", ["kill"], env=TIMEOUT_ENV, timeout=150, abort_on_failure=False)
    got = faults(out)
    assert sorted(got) == [0, 2], out
    for kind, message in got.values():
        assert kind in ("CommError", "PeerTimeoutError"), out
        assert "rank 1" in message, out


def test_an_op_the_others_never_start_fails_on_every_rank_naming_them_and_the_world_stays_usable():
    code, out = mpirun(3, "torch_fault_worker.py", ["stall"], env=TIMEOUT_ENV, timeout=150, abort_on_failure=False)
    got = faults(out)
    assert sorted(got) == [0, 1, 2], out
    kind, message = got[0]
    assert kind == "MismatchError" and "allreduce.only_rank_0" in message, out
    assert "started by rank 0 but not by ranks 1, 2" in message, out
    for r in (1, 2):
        assert got[r][0] == "MismatchError" and "not by rank 0" in got[r][1], out
    assert out.count("USABLE rank") == 3 and "BROKEN" not in out, out
    assert code == 0, out


def test_a_rank_dying_between_engine_ops_is_named_by_every_survivor():
    code, out = mpirun(3, "torch_fault_worker.py", ["engine_kill"], env=TIMEOUT_ENV, timeout=150,
                       abort_on_failure=False)
    got = faults(out)
    assert sorted(got) == [0, 2], out
    for kind, message in got.values():
        assert kind in ("CommError", "PeerTimeoutError"), out
        assert "rank 1" in message, out


def test_a_rank_that_shuts_down_ends_the_others_collectives_with_horovods_error():
    code, out = mpirun(3, "torch_fault_worker.py", ["shutdown"], env=TIMEOUT_ENV, timeout=150,
                       abort_on_failure=False)
    got = faults(out)
    assert "LEFT rank 1" in out, out
    assert sorted(got) == [0, 2], out
    for kind, message in got.values():
        assert kind == "EngineStopped" and "shut down on rank 1" in message, out
