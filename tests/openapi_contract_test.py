"""The response checker (tests/openapi_contract.py) without a daemon: label unit.

It must accept what musterd really sends and reject a renamed, missing or
undocumented field, an undocumented status and a wrong media type; every
example in the document must pass the same strict check, so the examples
are complete objects.
"""
import copy
import json

import pytest

from openapi_contract import Contract, ContractError, response_validator

WORKER = {"id": "3fa9c0d1e2", "status": "running", "ip_address": "10.0.0.7", "port": None, "cpu": 0.5,
          "memory": 2.0, "nvidia_gpu": 0, "kernel": "python3", "script": "train.py", "cluster_id": None,
          "created_at": "2026-11-22T22:15:30.123Z", "started_at": "2026-11-22T22:15:30.456Z",
          "running_at": "2026-11-22T22:15:30.456Z", "finished_at": None, "duration": 1.5, "exit_code": None,
          "reason": "", "gpu_devices": ""}


@pytest.fixture(scope="module")
def contract():
    return Contract()


def ok(contract, method, url, status, body, content_type="application/json"):
    if not isinstance(body, (str, bytes)):
        body = json.dumps(body)
    return contract.check_response(method, url, status, body, content_type)


def test_real_answers_pass(contract):
    ok(contract, "GET", "/api/v1/workers/3fa9c0d1e2", 200, WORKER)
    ok(contract, "POST", "/api/v1/workers", 201, {"workers": [WORKER]})
    ok(contract, "POST", "/api/v1/workers/await", 200,
       {"workers": [], "failures": [dict(WORKER, status="failed", exit_code=3, log_tail="boom\n")]})
    ok(contract, "GET", "/api/v1/workers/3fa9c0d1e2/logs?tail=5", 200, "hello\n", "text/plain; charset=utf-8")
    ok(contract, "POST", "/api/v1/agent/workers/3fa9c0d1e2/wait-release", 204, b"", "")
    ok(contract, "POST", "/api/v1/agent/workers/3fa9c0d1e2/heartbeat", 200, {})
    ok(contract, "POST", "/api/v1/workers", 400,
       {"error": {"code": "invalid_argument", "message": "n must be between 1 and 64", "field": "n"}})
    ok(contract, "POST", "/api/v1/workers", 201, {"workers": [WORKER], "warnings": ["code is ignored"]})
    ok(contract, "POST", "/api/v1/workers", 409,
       {"error": {"code": "conflict", "message": "only 0 of the 0 GPUs are free", "field": "nvidia_gpu"}})
    ok(contract, "GET", "/api/v1/workers/3fa9c0d1e2/logs?follow=true", 503,
       {"error": {"code": "unavailable", "message": "too many followed logs"}})
    # Any path not in the document is a 404 with the error body.
    ok(contract, "GET", "/api/v1/nothing", 404, {"error": {"code": "not_found", "message": "no route GET /api/v1/nothing"}})


def test_literal_segments_win_over_ids(contract):
    assert contract.match("POST", "/api/v1/workers/await")[0] == "/api/v1/workers/await"
    assert contract.match("GET", "/api/v1/workers/await")[0] == "/api/v1/workers/{id}"
    assert contract.match("POST", "/api/v1/workers/abc")[0] is None


@pytest.mark.parametrize("mutate, message", [
    (lambda w: w.update(ip=w.pop("ip_address")), "ip"),                      # renamed in the code
    (lambda w: w.pop("exit_code"), "exit_code"),                             # dropped
    (lambda w: w.update(gpus=1), "gpus"),                                     # added, undocumented
    (lambda w: w.update(status="paused"), "paused"),                         # not in the enum
    (lambda w: w.update(cpu="0.5"), "0.5"),                                   # wrong type
    (lambda w: w.update(created_at="yesterday"), "yesterday"),               # not RFC 3339
])
def test_a_worker_that_differs_from_the_document_fails(contract, mutate, message):
    worker = copy.deepcopy(WORKER)
    mutate(worker)
    with pytest.raises(ContractError, match=message):
        ok(contract, "GET", "/api/v1/workers/3fa9c0d1e2", 200, worker)
    with pytest.raises(ContractError):
        ok(contract, "POST", "/api/v1/workers/await", 200, {"workers": [], "failures": [dict(worker, log_tail="")]})


def test_statuses_media_types_and_error_bodies_are_checked(contract):
    with pytest.raises(ContractError, match="409 is not documented"):
        ok(contract, "GET", "/api/v1/workers/x", 409, {"error": {"code": "conflict", "message": "m"}})
    with pytest.raises(ContractError, match="content type"):
        ok(contract, "GET", "/api/v1/workers/x/logs", 200, WORKER, "application/json")
    with pytest.raises(ContractError, match="without a body"):
        ok(contract, "POST", "/api/v1/agent/workers/x/wait-release", 204, "{}")
    with pytest.raises(ContractError):  # `error` must carry code and message
        ok(contract, "GET", "/api/v1/workers/x", 404, {"error": {"message": "no worker"}})
    with pytest.raises(ContractError):  # an unknown route is a 404, nothing else
        ok(contract, "GET", "/api/v1/nothing", 200, {})
    with pytest.raises(ContractError, match="not JSON"):
        ok(contract, "GET", "/api/v1/workers/x", 200, "<html>")


def test_every_example_in_the_document_passes_the_strict_check(contract):
    checked = 0
    for template, ops in contract.doc["paths"].items():
        for method, op in ops.items():
            for status, spec in op["responses"].items():
                for media, content in (contract.resolve(spec).get("content") or {}).items():
                    examples = [content["example"]] if "example" in content else []
                    examples += [e["value"] for e in content.get("examples", {}).values()]
                    for example in examples:
                        errors = list(response_validator(content["schema"]).iter_errors(example))
                        assert not errors, "%s %s %s %s: %s" % (method, template, status, media, errors[0].message)
                        checked += 1
    assert checked >= 20


def test_mpi_clusters_carry_their_horovodrun_options(contract):
    op = contract.operation("GET", "/api/v1/clusters")
    (mpi,) = contract.resolve(op["responses"]["200"])["content"]["application/json"]["example"]["clusters"]
    assert mpi["mode"] == "mpi"
    ok(contract, "GET", "/api/v1/clusters/c-1", 200, mpi)
    ps = {k: v for k, v in mpi.items() if k not in ("network_interfaces", "fusion_threshold_mb", "cycle_time_ms",
                                                    "timeline_filename", "start_timeout", "verbose")}
    ok(contract, "GET", "/api/v1/clusters/c-1", 200, dict(ps, mode="ps"))
    with pytest.raises(ContractError, match="verbose"):   # the if/then is not closed away by the strict check
        ok(contract, "GET", "/api/v1/clusters/c-1", 200, dict(ps, timeline_filename="", start_timeout=None,
                                                               network_interfaces=[], fusion_threshold_mb=None,
                                                               cycle_time_ms=None))
