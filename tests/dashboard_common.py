"""Helpers for the dashboard tests: a raw HTTP client (no redirects followed, every header
visible), the cookie login, and a module-scoped real musterd with a project of small scripts."""
import hashlib
import hmac
import http.client
import json
import os
import re
import textwrap
import urllib.parse

SCRIPTS = {
    "sleep.py": "import time\nprint('worker up', flush=True)\ntime.sleep(600)\n",
    # Log text that must be shown as text, never run or rendered as markup.
    "evil_log.py": """
        import time
        print("<script>window.__pwned = 1</script><b id='injected'>bold</b> & done", flush=True)
        time.sleep(600)
    """,
    # Reports five points through the standard-library reporter, then waits.
    "report.py": """
        import time
        import muster.metrics
        for step in range(1, 6):
            muster.metrics.report(step=step * 10, loss=1.0 / step, images_per_sec=1000 + step, lr=0.01)
        muster.metrics.reporter().close()
        print("reported", muster.metrics.reporter().sent, flush=True)
        time.sleep(600)
    """,
}


def write_project(path):
    for name, body in SCRIPTS.items():
        (path / name).write_text(textwrap.dedent(body))
    return path


class Http:
    """One request per connection, so a test sees exactly what the server sent."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port

    def request(self, method, path, body=None, headers=None, timeout=10):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        data = None
        hdrs = dict(headers or {})
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            hdrs.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
        conn.close()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, text, resp.msg


def login(client, token):
    """Logs in through /?token=...; returns (cookie "name=value", csrf token)."""
    status, headers, _, _ = client.request("GET", "/?token=" + token)
    assert status == 303, status
    cookie = headers["set-cookie"].split(";")[0]
    status, _, body, _ = client.request("GET", "/api/v1/session", headers={"Cookie": cookie})
    assert status == 200, body
    return cookie, json.loads(body)["csrf_token"]


def metrics_token(daemon_token, worker_id):
    return hmac.new(daemon_token.encode(), ("metrics:" + worker_id).encode(), hashlib.sha256).hexdigest()


def sdk_env(daemon):
    """Env for workers that import muster (the SDK is not installed, only in the source tree)."""
    return {"PYTHONPATH": os.path.join(os.environ.get("MUSTER_SOURCE_DIR", ""), "sdk", "python")}


def prometheus_samples(text, name):
    """{frozenset(labels): value} of the samples of `name` in Prometheus text."""
    out = {}
    for line in text.splitlines():
        m = re.match(r'^%s(\{(.*)\})? (\S+)$' % re.escape(name), line)
        if m:
            labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out[labels] = float(m.group(3))
    return out
