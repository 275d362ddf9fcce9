"""musterd's world rendezvous end to end: label integration.

Elastic clusters whose ranks run muster-elastic-rdzv-probe (tests/
elastic_rdzv_probe.cc): the runtime's C++ rendezvous client against a real
musterd with the local backend, no Communicator. Each rank writes a line per
generation it was in; the tests check the generations the ranks saw against
the cluster's own history (REST), with:
- three ranks and no failure;
- rank 1 SIGKILLed after generation 1 formed: the survivors re-form as
  generation 2 (ranks kept in order), a replacement joins at generation 3;
- rank 0 SIGKILLed during generation 1's key exchange (a death during the
  rendezvous itself);
- a stale caller: the dead rank's token cannot join any more;
- a cluster whose ranks keep dying fails past reset_limit, naming the deaths.
Every cluster's workers are gone at the end (no process left behind).
"""
import json
import os
import shutil
import time
import urllib.error
import urllib.request

import pytest

from openapi_contract import Contract, ResponseObserver
from sdk_daemon import Daemon, RestApi, binary_dir, processes_with_env
from testutil import wait_for

PROBE = "muster-elastic-rdzv-probe"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    project = tmp_path_factory.mktemp("project")
    shutil.copy(os.path.join(binary_dir(), "bin", PROBE), str(project / PROBE))
    os.chmod(str(project / PROBE), 0o755)
    out = tmp_path_factory.mktemp("out")
    daemon = Daemon(project, tmp_path_factory.mktemp("state"))
    daemon.start()
    observer = ResponseObserver(Contract())
    try:
        yield {"api": RestApi(daemon, observer), "daemon": daemon, "out": out}
    finally:
        daemon.stop()


def run_cluster(env, name, args, n=3, **fields):
    out = env["out"] / name
    out.mkdir()
    body = {"mode": "elastic", "n_workers": n, "cpu": 0.1, "memory": 0.1, "worker_script": PROBE,
            "args": ["--out", str(out)] + args, "timeout_seconds": 60}
    body.update(fields)
    status, cluster = env["api"].call("POST", "/api/v1/clusters", body)
    assert status == 201, cluster
    return cluster["id"], out


def finished(env, cid, timeout=90):
    def ended():
        status, c = env["api"].call("GET", "/api/v1/clusters/" + cid)
        assert status == 200
        return c if c["status"] in ("succeeded", "failed", "stopped") else None
    return wait_for(ended, timeout=timeout, what="cluster %s to end" % cid)


def lines(out):
    seen = {}
    for name in os.listdir(str(out)):
        with open(os.path.join(str(out), name)) as f:
            for line in f:
                rec = json.loads(line)
                seen.setdefault(rec["generation"], []).append(rec)
    return seen


def assert_nothing_left(env, cluster):
    ids = [w for ws in cluster["workers"].values() for w in ws]
    for g in cluster.get("generations", []):
        ids += g["members"] + [d["worker_id"] for d in g["deaths"]]
    for wid in set(ids):
        status, w = env["api"].call("GET", "/api/v1/workers/" + wid)
        assert status == 200 and w["status"] in ("succeeded", "failed", "stopped", "lost", "timedout"), w
    wait_for(lambda: not processes_with_env("MUSTER_URL=" + env["daemon"].url), timeout=20,
             what="every process of the cluster's workers to end")


def test_three_ranks_form_one_generation_and_succeed(env):
    cid, out = run_cluster(env, "plain", ["--until-generation", "1", "--until-size", "3"])
    c = finished(env, cid)
    assert c["status"] == "succeeded", c["reason"]
    gens = lines(out)
    assert sorted(gens) == [1]
    ranks = sorted(gens[1], key=lambda r: r["rank"])
    members = [r["worker"] for r in ranks]
    # Every rank saw every other's worker id, in rank order, through the KvStore.
    assert all(r["members"] == members and r["size"] == 3 for r in ranks)
    assert [g["generation"] for g in c["generations"]] == [1]
    assert c["generations"][0]["members"] == members and c["resets"] == 0
    assert_nothing_left(env, c)


def test_a_killed_rank_is_replaced_and_the_world_reforms_twice(env):
    cid, out = run_cluster(env, "kill1", ["--die-rank", "1", "--die-generation", "1", "--until-generation", "3",
                                          "--until-size", "3"], min_np=2, max_np=3)
    c = finished(env, cid)
    assert c["status"] == "succeeded", c["reason"]
    gens = lines(out)
    first = [r["worker"] for r in sorted(gens[1], key=lambda r: r["rank"])]
    dead = first[1]
    # Generation 2: the survivors, rank 0 and the old rank 2 in that order.
    second = sorted(gens[2], key=lambda r: r["rank"])
    assert [r["worker"] for r in second] == [first[0], first[2]]
    # Generation 3: the survivors first, then the replacement.
    third = sorted(gens[3], key=lambda r: r["rank"])
    assert [r["worker"] for r in third][:2] == [first[0], first[2]] and len(third) == 3
    replacement = third[2]["worker"]
    history = c["generations"]
    assert [g["generation"] for g in history] == [1, 2, 3]
    assert [g["cause"] for g in history] == ["start", "reset", "reset"] and c["resets"] == 2
    g1 = history[0]
    assert [d["worker_id"] for d in g1["deaths"]] == [dead]
    assert g1["deaths"][0]["task"] == "rank 1" and "killed by signal 9" in g1["deaths"][0]["reason"]
    assert g1["replacements"] == [{"replaced": dead, "by": replacement, "at": g1["replacements"][0]["at"]}]
    assert "rank 1 (worker %s) was killed by signal 9" % dead in g1["end_reason"]
    assert history[1]["recovery_seconds"] is not None and history[1]["recovery_seconds"] < 30
    assert history[2]["members"][-1] == replacement
    # The dead rank is stale for good: its own token cannot join any more.
    token = hmac_token(env["daemon"], dead)
    status, body = env["api"].call("POST", "/api/v1/agent/workers/%s/rendezvous/join" % dead, {"generation": 1},
                                   token=token)
    assert status in (404, 409), body
    assert_nothing_left(env, c)


def test_a_death_during_the_key_exchange_breaks_the_generation_before_it_is_used(env):
    cid, out = run_cluster(env, "inkv", ["--die-rank", "0", "--die-generation", "1", "--die-in-kv",
                                         "--until-generation", "2", "--until-size", "2"], min_np=2, max_np=3)
    c = finished(env, cid)
    assert c["status"] == "succeeded", c["reason"]
    gens = lines(out)
    assert 1 not in gens  # nobody completed generation 1's exchange
    second = sorted(gens[2], key=lambda r: r["rank"])
    assert len(second) >= 2
    history = c["generations"]
    assert history[0]["deaths"] and history[0]["deaths"][0]["task"] == "rank 0"
    assert_nothing_left(env, c)


def test_past_reset_limit_the_cluster_fails_naming_the_deaths(env):
    # Rank 0 of generation 1 dies; with reset_limit 0 the world may not re-form.
    cid, out = run_cluster(env, "limit", ["--die-rank", "0", "--die-generation", "1", "--until-generation", "5"],
                           n=2, min_np=1, max_np=2, reset_limit=0)
    c = finished(env, cid)
    assert c["status"] == "failed"
    assert "reset_limit 0 reached" in c["reason"] and "killed by signal 9" in c["reason"], c["reason"]
    assert_nothing_left(env, c)


def test_below_min_np_for_the_start_timeout_fails(env):
    # Both ranks die in generation 1 with nobody left holding the state.
    cid, out = run_cluster(env, "alldead", ["--die-rank", "0", "--die-generation", "1", "--until-generation", "9"],
                           n=1, min_np=1, max_np=1)
    c = finished(env, cid)
    assert c["status"] == "failed"
    assert "nobody holds the training state" in c["reason"], c["reason"]
    assert_nothing_left(env, c)


def hmac_token(daemon, worker_id):
    import hashlib
    import hmac
    return hmac.new(daemon.token.encode(), ("metrics:" + worker_id).encode(), hashlib.sha256).hexdigest()
