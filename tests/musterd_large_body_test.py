"""A body over musterd's limit gets its 413, also when the client sends it
whole before reading (Python's http.client, urllib, the SDK's transport):
the daemon reads and discards up to --http-max-drain-bytes (16 MiB) before
it closes, instead of resetting the connection ("Broken pipe", then the SDK
saying "cannot reach musterd ... (is it running?)"). The SDK refuses
over-size code before it sends anything."""
import http.client
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from sdk_daemon import Daemon  # noqa: E402

import muster  # noqa: E402
from muster.errors import MusterError  # noqa: E402


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    with Daemon(tmp_path_factory.mktemp("project"), tmp_path_factory.mktemp("state")) as d:
        yield d


@pytest.mark.parametrize("mib", [2, 8])
def test_a_client_that_sends_a_large_body_whole_reads_the_413(daemon, mib):
    host, port = daemon.url[len("http://"):].split(":")
    body = json.dumps({"n": 1, "cpu": 1, "memory": 1, "code": "x" * (mib << 20)}).encode()
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("POST", "/api/v1/workers", body=body,
                     headers={"Authorization": "Bearer " + daemon.token, "Content-Type": "application/json"})
        resp = conn.getresponse()
        answer = json.loads(resp.read())
    finally:
        conn.close()
    assert resp.status == 413
    assert answer["error"]["code"] == "payload_too_large", answer


def test_the_sdk_refuses_over_size_code_before_sending(daemon):
    client = muster.Client(daemon.url, daemon.token)
    with pytest.raises(MusterError) as err:
        client.launch_workers(n=1, cpu=1, memory=1, code="print(1)\n" * (200 << 10))
    assert err.value.code == "payload_too_large" and err.value.field == "code"
    assert "script=" in str(err.value)
    assert client.list_workers() == [], "something was launched"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
