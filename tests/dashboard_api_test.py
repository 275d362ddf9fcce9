"""The dashboard's HTTP side against a real musterd (local backend): label integration.

Jupyter-style login (the URL printed and written 0600, /?token= sets an HttpOnly SameSite=Strict
session cookie that is not the token and redirects it away), CSRF on cookie-authenticated
state changes (bearer clients unaffected), the CSP and the absence of CORS, the login page
showing no data, the event stream, the training-metrics routes and /metrics.
"""
import json
import os
import re
import socket
import stat
import time

import pytest

import muster
from dashboard_common import Http, login, metrics_token, sdk_env, write_project, prometheus_samples
from testutil import wait_for
from sdk_daemon import Daemon


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    project = write_project(tmp_path_factory.mktemp("project"))
    with Daemon(project, tmp_path_factory.mktemp("state"), extra_args=["--max-event-streams", "3"]) as d:
        yield d


@pytest.fixture(scope="module")
def client(daemon):
    return muster.Client(daemon.url, daemon.token)


@pytest.fixture
def http(daemon):
    return Http(daemon.url)


def test_the_dashboard_url_is_printed_and_written_owner_only(daemon):
    line = wait_for(lambda: re.search(r"musterd dashboard: (\S+)", daemon.log()), what="the dashboard line")
    url = line.group(1)
    assert url == daemon.url + "/?token=" + daemon.token
    path = os.path.join(daemon.state_dir, "dashboard.url")
    assert open(path).read().strip() == url
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_token_login_sets_an_httponly_strict_session_cookie_and_drops_the_token(daemon, http):
    status, headers, _, _ = http.request("GET", "/?token=" + daemon.token)
    assert status == 303
    assert headers["location"] == "./"
    cookie = headers["set-cookie"]
    name, value = cookie.split(";")[0].split("=", 1)
    assert name.startswith("muster_session")
    assert value and daemon.token not in cookie
    flags = [f.strip() for f in cookie.split(";")[1:]]
    assert "HttpOnly" in flags and "SameSite=Strict" in flags and "Path=/" in flags
    # A wrong token: the page (asking again), 401, no cookie.
    status, headers, body, _ = http.request("GET", "/?token=" + "0" * 64)
    assert status == 401 and "set-cookie" not in headers and 'id="login-form"' in body
    # The form's route: JSON token -> cookie + CSRF token; wrong token -> 401.
    status, headers, body, _ = http.request("POST", "/api/v1/session", {"token": daemon.token})
    assert status == 200 and "HttpOnly" in headers["set-cookie"] and len(json.loads(body)["csrf_token"]) == 64
    status, _, body, _ = http.request("POST", "/api/v1/session", {"token": "nope"})
    assert status == 401 and json.loads(body)["error"]["code"] == "unauthenticated"
    status, _, body, _ = http.request("POST", "/api/v1/session", {"tok": "x"})
    assert status == 400 and json.loads(body)["error"]["field"] == "token"


def test_without_a_session_the_page_is_the_login_form_and_no_data(daemon, client, http):
    [w] = client.launch_workers(n=1, cpu=0.1, memory=0.1, script="sleep.py")
    status, headers, body, _ = http.request("GET", "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert 'id="login-form"' in body and w["id"] not in body
    for path in ("/api/v1/workers", "/api/v1/events", "/metrics", "/api/v1/session", "/api/v1/workers/%s/logs" % w["id"]):
        status, _, body, _ = http.request("GET", path)
        assert status == 401, (path, status)
        assert w["id"] not in body
    client.stop_workers(w["id"])


def test_cookie_posts_need_the_csrf_token_and_bearer_posts_do_not(daemon, client, http):
    cookie, csrf = login(http, daemon.token)
    [a, b] = client.launch_workers(n=2, cpu=0.1, memory=0.1, script="sleep.py")
    status, _, body, _ = http.request("GET", "/api/v1/workers", headers={"Cookie": cookie})
    assert status == 200 and a["id"] in body
    stop = {"ids": [a["id"]]}
    status, _, body, _ = http.request("POST", "/api/v1/workers/stop", stop, headers={"Cookie": cookie})
    assert status == 403 and "X-CSRF-Token" in json.loads(body)["error"]["message"]
    status, _, _, _ = http.request("POST", "/api/v1/workers/stop", stop, headers={"Cookie": cookie, "X-CSRF-Token": "0" * 64})
    assert status == 403
    assert client.get_worker(a["id"])["status"] in ("scheduling", "starting", "running")
    status, _, body, _ = http.request("POST", "/api/v1/workers/stop", stop, headers={"Cookie": cookie, "X-CSRF-Token": csrf})
    assert status == 200 and json.loads(body)["workers"][0]["status"] == "stopped"
    # A bearer client never needs one.
    status, _, body, _ = http.request("POST", "/api/v1/workers/stop", {"ids": [b["id"]]},
                                      headers={"Authorization": "Bearer " + daemon.token})
    assert status == 200 and json.loads(body)["workers"][0]["status"] == "stopped"
    # Logging out ends the session.
    status, _, _, _ = http.request("POST", "/api/v1/session/logout", {}, headers={"Cookie": cookie, "X-CSRF-Token": csrf})
    assert status == 200
    assert http.request("GET", "/api/v1/workers", headers={"Cookie": cookie})[0] == 401


def test_the_page_has_a_strict_csp_no_inline_code_and_no_cors(daemon, http):
    evil = {"Origin": "http://evil.example"}
    status, headers, body, _ = http.request("GET", "/", headers=evil)
    csp = headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp and "style-src 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert headers["x-content-type-options"] == "nosniff" and headers["referrer-policy"] == "no-referrer"
    # No inline script or style in the page.
    for tag in re.findall(r"<script[^>]*>", body):
        assert "src=" in tag, tag
    assert "<style" not in body and " style=" not in body and "javascript:" not in body
    for m in re.finditer(r'(?:src|href)="([^"]+)"', body):
        assert not re.match(r"^(/|https?:|//)", m.group(1)), "not relative: " + m.group(1)
    cookie, _ = login(http, daemon.token)
    for method, path, hdrs in [("GET", "/", evil), ("GET", "/api/v1/workers", dict(evil, Cookie=cookie)),
                               ("OPTIONS", "/api/v1/workers", dict(evil, **{"Access-Control-Request-Method": "POST"})),
                               ("GET", "/static/app.js", evil)]:
        status, headers, _, _ = http.request(method, path, headers=hdrs)
        assert not [h for h in headers if h.startswith("access-control-")], (method, path, headers)
    status, headers, body, _ = http.request("GET", "/static/app.js")
    assert status == 200 and headers["content-type"].startswith("text/javascript") and "innerHTML" not in body
    assert http.request("GET", "/static/.hidden")[0] == 400
    assert http.request("GET", "/static/../token")[0] == 404


def read_events(sock, until, timeout=15):
    """Reads server-sent events from a raw socket until `until(events)` holds."""
    sock.settimeout(timeout)
    buf, events = b"", []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
        for m in re.finditer(rb"event: (\w+)\r?\ndata: (.*?)\r?\n", buf):
            pass
        events = [(m.group(1).decode(), json.loads(m.group(2))) for m in re.finditer(rb"event: (\w+)\ndata: ([^\n]*)\n", buf)]
        if until(events):
            return events, buf
    raise AssertionError("events so far: %r" % events)


def open_events(daemon, auth):
    host, port = daemon.url[len("http://"):].split(":")
    s = socket.create_connection((host, int(port)))
    s.sendall(("GET /api/v1/events HTTP/1.1\r\nHost: x\r\n%s\r\n\r\n" % auth).encode())
    return s


def test_the_event_stream_sends_a_snapshot_then_every_change_and_is_bounded(daemon, client, http):
    cookie, _ = login(http, daemon.token)
    s = open_events(daemon, "Cookie: " + cookie)
    try:
        events, head = read_events(s, lambda ev: any(name == "snapshot" for name, _ in ev))
        assert b"text/event-stream" in head
        [w] = client.launch_workers(n=1, cpu=0.1, memory=0.1, script="sleep.py")
        events, _ = read_events(s, lambda ev: any(n == "worker" and d["id"] == w["id"] and d["status"] == "running"
                                                  for n, d in ev))
        # At most three streams (--max-event-streams 3): two more fit, a fourth is refused.
        others = [open_events(daemon, "Authorization: Bearer " + daemon.token) for _ in range(2)]
        for o in others:
            read_events(o, lambda ev: any(name == "snapshot" for name, _ in ev))
        status, _, body, _ = http.request("GET", "/api/v1/events", headers={"Cookie": cookie})
        assert status == 503 and "too many event streams" in body
        for o in others:
            o.close()
        client.stop_workers(w["id"])
        read_events(s, lambda ev: any(n == "worker" and d["id"] == w["id"] and d["status"] == "stopped" for n, d in ev))
    finally:
        s.close()


def test_training_metrics_are_reported_kept_and_served_as_json_and_csv(daemon, client, http):
    [w] = client.launch_workers(n=1, cpu=0.1, memory=0.1, script="report.py", env=sdk_env(daemon))
    bearer = {"Authorization": "Bearer " + daemon.token}
    path = "/api/v1/workers/%s/metrics" % w["id"]

    def points():
        status, _, body, _ = http.request("GET", path, headers=bearer)
        assert status == 200, body
        return json.loads(body)["points"]
    got = wait_for(lambda: len(points()) == 5 and points(), what="five reported points")
    assert [p["step"] for p in got] == [10, 20, 30, 40, 50]
    assert got[1]["loss"] == 0.5 and got[0]["images_per_sec"] == 1001 and got[0]["accuracy"] is None
    status, headers, body, _ = http.request("GET", path + "?format=csv", headers=bearer)
    assert status == 200 and headers["content-type"].startswith("text/csv")
    lines = body.strip().splitlines()
    assert lines[0] == "step,time,loss,images_per_sec,lr,accuracy,worker,rank" and len(lines) == 6
    assert lines[2].startswith("20,") and lines[2].endswith(",0.5,1002,0.01,,%s," % w["id"])
    assert http.request("GET", path + "?format=xml", headers=bearer)[0] == 400

    post = "/api/v1/agent/workers/%s/metrics" % w["id"]
    mine = {"Authorization": "Bearer " + metrics_token(daemon.token, w["id"])}
    status, _, body, _ = http.request("POST", post, {"points": [{"step": 1, "loss": "high"}]}, headers=mine)
    assert status == 400 and json.loads(body)["error"]["field"] == "points[0].loss"
    status, _, body, _ = http.request("POST", post, {"points": [{"loss": 1}]}, headers=mine)
    assert status == 400 and json.loads(body)["error"]["field"] == "points[0].step"
    # Another worker's metrics token, the daemon token, no token: refused.
    assert http.request("POST", post, {"points": [{"step": 1, "loss": 1}]},
                        headers={"Authorization": "Bearer " + metrics_token(daemon.token, "other")})[0] == 401
    assert http.request("POST", post, {"points": [{"step": 1, "loss": 1}]}, headers=bearer)[0] == 403
    assert http.request("POST", post, {"points": [{"step": 1, "loss": 1}]})[0] == 401
    # Rate limited per worker: a burst beyond 20 reports a second gets 429.
    codes = [http.request("POST", post, {"points": [{"step": 100 + i, "loss": 1}]}, headers=mine)[0] for i in range(40)]
    assert 202 in codes and 429 in codes and set(codes) <= {202, 429}, codes
    client.stop_workers(w["id"])


def test_metrics_is_prometheus_text_with_cookie_or_bearer(daemon, client, http):
    [w] = client.launch_workers(n=1, cpu=0.1, memory=0.1, script="sleep.py")
    client.await_workers([w["id"]], wait_for_completion=False, timeout_seconds=30)
    status, headers, text, _ = http.request("GET", "/metrics", headers={"Authorization": "Bearer " + daemon.token})
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    running = prometheus_samples(text, "muster_workers")
    assert running[frozenset({("status", "running"), ("backend", "local")})] >= 1
    assert "# TYPE muster_http_request_duration_seconds histogram" in text
    # Requests are counted by route pattern, never by raw path.
    reqs = prometheus_samples(text, "muster_http_requests_total")
    routes = {dict(k)["route"] for k in reqs}
    assert "/api/v1/workers/{id}/metrics" in routes and not any(w["id"] in r for r in routes)
    assert prometheus_samples(text, "muster_worker_launches_total")[frozenset()] >= 1
    assert "muster_store_write_duration_seconds_count" in text and "muster_heartbeat_lag_seconds" in text
    cookie, _ = login(http, daemon.token)
    assert http.request("GET", "/metrics", headers={"Cookie": cookie})[0] == 200
    client.stop_workers(w["id"])


def test_dashboard_dir_overrides_where_the_page_comes_from(tmp_path):
    (tmp_path / "project").mkdir()
    files = tmp_path / "files"
    files.mkdir()
    (files / "index.html").write_text("<!doctype html><p>custom page</p>")
    (files / "app.js").write_text("// custom")
    d = Daemon(tmp_path / "project", tmp_path / "state", extra_args=["--dashboard-dir", str(files)])
    d.start()
    try:
        http = Http(d.url)
        status, headers, body, _ = http.request("GET", "/")
        assert status == 200 and "custom page" in body and "default-src 'self'" in headers["content-security-policy"]
        assert http.request("GET", "/static/app.js")[2] == "// custom"
        assert http.request("GET", "/static/style.css")[0] == 404
    finally:
        d.stop()
