"""Training curves against a real musterd (integration).

- a seed-002-style script whose only change is `from muster.metrics import SummaryWriter`
  reports custom scalars (add_scalar, add_scalars, a one-element tensor-like value, no step);
- the curves survive a daemon restart (<state>/training.db), and reporting goes on after it;
- an mpi cluster's ranks each report through worker 0 and get a line each;
- /metrics keeps working and its label sets stay bounded (no custom names, no ranks).
"""
import os
import urllib.request

import pytest

import muster
from sdk_daemon import Daemon, sdk_session, write_scripts
from testutil import wait_for

SCRIPTS = {
    # The seed's shape: a writer made with a log dir on rank 0, add_scalar every log interval.
    "seed002.py": """
        from muster.metrics import SummaryWriter
        import time

        class Scalar:  # what loss.item() is not: a tensor-like with __float__
            def __init__(self, v):
                self.v = v
            def __float__(self):
                return self.v

        writer = SummaryWriter('/home/user/share/log/mnist_test', total_steps=60)
        for epoch in range(1, 3):
            for batch_idx in range(30):
                niter = (epoch - 1) * 30 + batch_idx
                writer.add_scalar('Train/Loss', 2.0 / (niter + 1), niter)
            writer.add_scalars('Accuracy', {'train': 0.5 + epoch / 10, 'test': 0.45 + epoch / 10}, epoch)
            writer.add_scalar('Test/Loss', Scalar(1.0 / epoch))   # no step: 0, then 1
            writer.add_histogram('weights', [1, 2, 3], epoch)     # no curve for it: a no-op
        writer.flush()
        writer.close()
        print("reported", flush=True)
        time.sleep(float(__import__("os").environ.get("LINGER", "0")))
    """,
    "ranks.py": """
        from muster.metrics import SummaryWriter
        import os
        writer = SummaryWriter()
        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        for step in range(25):
            writer.add_scalar("loss", 1.0 / (step + 1) + rank, step)
        writer.close()
    """,
}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
    with Daemon(project, tmp_path_factory.mktemp("state")) as d, sdk_session(d, check_contract=True):
        yield d


def metrics_of(daemon, kind, ident):
    from sdk_daemon import RestApi
    status, body = RestApi(daemon).call("GET", "/api/v1/%s/%s/metrics" % (kind, ident))
    assert status == 200, body
    return body


def by_name(body):
    return {s["name"]: s for s in body["series"]}


def test_seed_style_summary_writer_reports_custom_scalars_that_survive_a_restart(daemon):
    [w] = muster.launch_workers(n=1, cpu=0.5, memory=0.5, script="seed002.py")
    wid = w["id"]
    wait_for(lambda: muster.get_worker(wid)["status"] == "succeeded", timeout=60, what="the script")
    assert "reported" in muster.worker_logs(wid)
    body = metrics_of(daemon, "workers", wid)
    series = by_name(body)
    assert set(series) == {"Train/Loss", "Accuracy/train", "Accuracy/test", "Test/Loss"}, sorted(series)
    loss = series["Train/Loss"]
    assert [p[0] for p in loss["points"]] == list(range(60))  # every step, in order
    assert loss["points"][-1][1] == pytest.approx(2.0 / 60)
    assert loss["total_steps"] == 60 and loss["rank"] is None and loss["worker_id"] == wid
    assert [p[:2] for p in series["Accuracy/test"]["points"]] == [[1, pytest.approx(0.55)], [2, pytest.approx(0.65)]]
    assert [p[0] for p in series["Test/Loss"]["points"]] == [0, 1]
    # The rows list the same, custom scalars under "scalars".
    assert any(r["scalars"].get("Train/Loss") == pytest.approx(2.0) for r in body["points"])

    # A restart keeps them; reporting goes on beside them.
    daemon.stop()
    daemon.start()
    again = metrics_of(daemon, "workers", wid)
    assert by_name(again) == series
    [w2] = muster.launch_workers(n=1, cpu=0.5, memory=0.5, script="seed002.py")
    wait_for(lambda: muster.get_worker(w2["id"])["status"] == "succeeded", timeout=60, what="the second script")
    assert len(by_name(metrics_of(daemon, "workers", w2["id"]))["Train/Loss"]["points"]) == 60
    assert by_name(metrics_of(daemon, "workers", wid)) == series

    # /metrics: still Prometheus text, and no label carries a custom name or a worker id.
    req = urllib.request.Request(daemon.url + "/metrics", headers={"Authorization": "Bearer " + daemon.token})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10) as resp:
        text = resp.read().decode()
    assert "muster_workers{" in text
    assert "Train/Loss" not in text and "Accuracy" not in text and wid not in text


def test_each_rank_of_an_mpi_cluster_gets_its_own_line(daemon):
    c = muster.horovodrun(2, "ranks.py", cpu=0.5, memory=0.5, timeout_seconds=120, wait_for_completion=True)
    c = muster.get_cluster(c)
    assert c["status"] == "succeeded", c
    body = metrics_of(daemon, "clusters", c["id"])
    lines = [s for s in body["series"] if s["name"] == "loss"]
    assert sorted(s["rank"] for s in lines) == [0, 1]
    assert len({s["worker_id"] for s in lines}) == 1  # both through worker 0
    for s in lines:
        assert [p[0] for p in s["points"]] == list(range(25))
        assert s["points"][0][1] == pytest.approx(1.0 + s["rank"])
    csv_text = urllib.request.build_opener(urllib.request.ProxyHandler({})).open(urllib.request.Request(
        daemon.url + "/api/v1/clusters/%s/metrics?format=csv" % c["id"],
        headers={"Authorization": "Bearer " + daemon.token}), timeout=10).read().decode()
    header, *rows = csv_text.splitlines()
    assert header == "step,time,loss,images_per_sec,lr,accuracy,worker,rank"
    assert len(rows) == 50 and {r.split(",")[7] for r in rows} == {"0", "1"}
