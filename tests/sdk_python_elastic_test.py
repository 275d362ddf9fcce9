"""The SDKs' side of elastic clusters and restarts, no daemon: label unit.

muster.horovodrun with horovodrun's elastic flags asks for an elastic
cluster (and nothing mpirun needs), max_restarts goes through for mpi
clusters, describe_generations and `muster cluster ID` print the history,
and the CLI takes the flags under horovodrun's names.
"""
import pytest

import muster
from muster import cli
from sdk_python_unit_test import Stub

HISTORY = [
    {"generation": 1, "cause": "start", "started_at": "2026-11-22T22:15:30.000Z", "members": ["a", "b", "c"],
     "size": 3, "ended_at": "2026-11-22T22:16:02.000Z", "end_reason": "rank 1 (worker b) was killed by signal 9",
     "deaths": [{"worker_id": "b", "task": "rank 1", "reason": "was killed by signal 9",
                 "at": "2026-11-22T22:16:02.000Z"}],
     "replacements": [{"replaced": "b", "by": "d", "at": "2026-11-22T22:16:02.100Z"}],
     "recovery_seconds": None, "resume_seconds": None, "batches_redone": None},
    {"generation": 2, "cause": "reset", "started_at": "2026-11-22T22:16:02.400Z", "members": ["a", "c"], "size": 2,
     "ended_at": None, "end_reason": "", "deaths": [], "replacements": [], "recovery_seconds": 0.4,
     "resume_seconds": 0.61, "batches_redone": 3},
]


@pytest.fixture
def stub(monkeypatch, tmp_path):
    s = Stub()
    monkeypatch.setenv("MUSTER_URL", s.url)
    monkeypatch.setenv("MUSTER_TOKEN", "t0ken")
    monkeypatch.setenv("MUSTER_STATE_DIR", str(tmp_path / "nowhere"))
    yield s
    s.close()


def test_elastic_flags_ask_for_an_elastic_cluster(stub):
    up = {"id": "c5", "status": "running", "mode": "elastic", "workers": {"worker": ["a", "b", "c"]}}
    stub.routes[("POST", "/api/v1/clusters")] = (201, dict(up, status="starting"))
    stub.routes[("GET", "/api/v1/clusters/c5")] = (200, up)
    c = muster.horovodrun(3, "train.py", min_np=2, max_np=4, reset_limit=5, blacklist_cooldown_range=(1, 30))
    assert c["mode"] == "elastic"
    body = stub.requests[0]["body"]
    assert body["mode"] == "elastic" and body["n_workers"] == 3 and body["worker_script"] == "train.py"
    assert (body["min_np"], body["max_np"], body["reset_limit"]) == (2, 4, 5)
    assert body["blacklist_cooldown_range"] == [1, 30]
    # Nothing mpirun needs: no slots, ssh port or launch flag.
    assert "slots" not in body and "ssh_port" not in body and "launch" not in body


def test_max_restarts_goes_to_an_mpi_cluster(stub):
    up = {"id": "c6", "status": "running", "mode": "mpi", "workers": {"worker": ["a"]}}
    stub.routes[("POST", "/api/v1/clusters")] = (201, dict(up, status="starting"))
    stub.routes[("GET", "/api/v1/clusters/c6")] = (200, up)
    muster.horovodrun(1, "train.py", max_restarts=3)
    body = stub.requests[0]["body"]
    assert body["mode"] == "mpi" and body["max_restarts"] == 3


def test_unknown_options_are_refused_before_any_request(stub):
    with pytest.raises(muster.MusterError) as err:
        muster.horovodrun(2, "train.py", min_nps=2)
    assert err.value.field == "min_nps" and "min_np" in err.value.message
    assert stub.requests == []


def test_describe_generations_names_deaths_replacements_and_recovery():
    text = muster.describe_generations({"generations": HISTORY})
    lines = text.splitlines()
    assert lines[0].startswith("generation 1 (start) 3 ranks, from 2026-11-22T22:15:30.000Z to ")
    assert "ended: rank 1 (worker b) was killed by signal 9" in lines[0]
    assert lines[1] == "  rank 1 (worker b) was killed by signal 9 at 2026-11-22T22:16:02.000Z; replaced by d"
    assert "generation 2 (reset) 2 ranks" in lines[2]
    assert "recovered in 0.40 s, first step after 0.61 s, 3 batches redone" in lines[2]


def test_cli_cluster_prints_the_generations(stub, capsys):
    stub.routes[("GET", "/api/v1/clusters/c7")] = (200, {"id": "c7", "status": "running", "mode": "elastic",
                                                          "generations": HISTORY, "reason": ""})
    assert cli.main(["cluster", "c7"]) == 0
    out = capsys.readouterr().out
    assert "cluster c7 running" in out and "replaced by d" in out and "3 batches redone" in out


def test_cli_horovodrun_takes_horovodruns_elastic_flags(stub, capsys):
    up = {"id": "c8", "status": "running", "mode": "elastic", "workers": {"worker": ["a", "b"]}}
    stub.routes[("POST", "/api/v1/clusters")] = (201, dict(up, status="starting"))
    stub.routes[("GET", "/api/v1/clusters/c8")] = (200, up)
    assert cli.main(["horovodrun", "-np", "2", "--min-np", "1", "--max-np", "3", "--reset-limit", "2",
                     "--blacklist-cooldown-range", "5", "50", "--json", "train.py"]) == 0
    body = stub.requests[0]["body"]
    assert body["mode"] == "elastic" and body["min_np"] == 1 and body["max_np"] == 3
    assert body["blacklist_cooldown_range"] == [5, 50] and body["reset_limit"] == 2
