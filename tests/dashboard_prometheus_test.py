"""Debian's Prometheus server scraping a real musterd's /metrics with a bearer token file:
label integration. Prometheus's own HTTP API must report muster_workers{status="running"}
equal to the number of workers running, before and after a change; over plain HTTP (a
loopback musterd) and over HTTPS (musterd beyond loopback), verified with tls_config's
ca_file: the daemon's self-signed certificate, its address checked."""
import json
import os
import shutil
import subprocess
import tempfile
import urllib.parse
import urllib.request

import pytest

from dashboard_common import write_project
from testutil import free_port, wait_for
from sdk_daemon import Daemon

PROMETHEUS = "/usr/bin/prometheus"
pytestmark = pytest.mark.skipif(not os.path.exists(PROMETHEUS), reason="prometheus is not installed")


@pytest.fixture(params=["http", "https"])
def daemon(tmp_path, request):
    (tmp_path / "project").mkdir()
    project = write_project(tmp_path / "project")
    listen = "127.0.0.1:0" if request.param == "http" else "0.0.0.0:0"
    with Daemon(project, tmp_path / "state", listen=listen) as d:
        assert d.url.startswith(request.param + "://")
        yield d


@pytest.fixture
def prometheus(daemon, tmp_path):
    work = tempfile.mkdtemp(prefix="muster-dash-prom-")
    token_file = os.path.join(work, "token")
    with open(token_file, "w") as f:
        f.write(daemon.token)
    os.chmod(token_file, 0o600)
    scheme, target = daemon.url.split("://")
    tls = ""
    if scheme == "https":
        with open(os.path.join(daemon.state_dir, "musterd.json")) as f:
            tls = "    tls_config:\n      ca_file: %s\n" % json.load(f)["tls"]["cert"]
    config = os.path.join(work, "prometheus.yml")
    with open(config, "w") as f:
        f.write(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n"
            "  - job_name: musterd\n"
            "    scheme: %s\n"
            "    metrics_path: /metrics\n"
            "    authorization:\n      type: Bearer\n      credentials_file: %s\n%s"
            "    static_configs:\n      - targets: ['%s']\n" % (scheme, token_file, tls, target))
    port = free_port()
    log = open(os.path.join(work, "prometheus.log"), "wb")
    proc = subprocess.Popen([PROMETHEUS, "--config.file=" + config, "--storage.tsdb.path=" + os.path.join(work, "data"),
                             "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        yield "http://127.0.0.1:%d" % port, os.path.join(work, "prometheus.log")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def query(base, expr):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=5) as r:
            body = json.load(r)
    except OSError:
        return None
    if body.get("status") != "success":
        return None
    return body["data"]["result"]


def running_value(base):
    result = query(base, 'muster_workers{status="running",backend="local"}')
    if not result:
        return None
    return float(result[0]["value"][1])


def test_prometheus_scrapes_the_running_workers(daemon, prometheus):
    base, log = prometheus
    client = daemon.client()
    workers = client.launch_workers(n=3, cpu=0.1, memory=0.1, script="sleep.py")
    client.await_workers([w["id"] for w in workers], wait_for_completion=False, timeout_seconds=30)
    try:
        wait_for(lambda: running_value(base) == 3, timeout=60, interval=0.5,
                 what="Prometheus to see 3 running workers (log: %s)" % log)
        # The target is up (the bearer token file worked) and the request histogram is there.
        up = query(base, 'up{job="musterd"}')
        assert up and up[0]["value"][1] == "1"
        # A scrape is counted once answered, so the next scrape shows it.
        wait_for(lambda: (query(base, 'muster_http_request_duration_seconds_count{route="/metrics",code="200"}') or
                          [{"value": [0, "0"]}])[0]["value"][1] not in ("0",), timeout=30, interval=0.5,
                 what="the scrapes' own latency histogram")
        client.stop_workers(workers[0]["id"])
        wait_for(lambda: running_value(base) == 2, timeout=30, interval=0.5, what="Prometheus to see 2")
    finally:
        client.stop_workers(*[w["id"] for w in workers])
