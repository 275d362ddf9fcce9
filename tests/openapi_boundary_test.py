"""musterd accepts exactly what api/openapi.yaml allows: label integration.

For every JSON request body (launch, await, stop, clusters in both modes,
the agent's register and exit, the runtimes' metrics report, the dashboard
login) and the `tail` query parameter, requests are
generated from the document's own constraints: each required field dropped,
an unknown field added, and for each field values on both sides of its
bounds (minimum/maximum, exclusive ones), every enum member and a
non-member, every JSON type, strings against patterns and lengths, NUL
characters, list items and map names/values. The document decides (Draft
2020-12 validation of the body) whether each request is allowed; musterd
must then answer 2xx (the agent routes: anything but 400, since a valid
body may still meet a 409 for the worker's state), and for a disallowed one
400 invalid_argument whose `field` is a field the document's validation
blames. Accepted launches start workers: they run `true` (or an empty
script) and are stopped at once.

What the document cannot say in a schema is set up so it holds: script
names it allows are created in the project directory (executable), ids name
a worker that exists, and limits marked `x-muster-limit` take the daemon's
--max-workers (2 here). A field marked `x-muster-exists` names something that
must exist (an executable file: `python`; running workers: `workers`): a
value the document allows that names nothing must get 400 naming the field. The daemon has one GPU (--gpus 0): a request the
document allows may still meet 409 conflict naming nvidia_gpu, exactly when
it asks for more GPUs than that (the document's GpusBusy answer). Every
answer is also checked against the document, and the logs' query
parameters (tail, follow, offset, from_start) are probed the same way.
"""
import copy
import hashlib
import hmac
import json
import os
import re
import shutil
import stat
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from openapi_contract import Contract, ResponseObserver, request_validator
from sdk_daemon import Daemon, RestApi as Api

MAX_WORKERS = 2
HOST_GPUS = 1   # musterd --gpus 0: one device (workers only see CUDA_VISIBLE_DEVICES=0)
TYPE_PROBES = ["x", 7, 1.5, True, None, [], {}]
LAUNCH_BASES = [{"n": 1, "cpu": 0.1, "memory": 0.1, "kernel": "bash", "code": "true"},
                {"n": 1, "cpu": 0.1, "memory": 0.1, "script": "ok.sh"}]
CLUSTER_BASES = [{"n_workers": 1, "cpu": 0.1, "memory": 0.1},
                 {"mode": "mpi", "n_workers": 1, "cpu": 0.1, "memory": 0.1, "worker_script": "ok.sh",
                  "launch": False}]
PYTHON = "/usr/bin/python3"
STRING_PROBES = ["", "a", "a" * 15, "a" * 16, "a b", "a$b", "-a", "a.b_c-d", "/abs.sh", "../up.sh", "a/../b.sh",
                 "sub/dir.sh", "a\u0000b", "\u00e9t\u00e9.sh"]


@pytest.fixture(scope="module")
def contract():
    return Contract()


@pytest.fixture(scope="module")
def env(tmp_path_factory, contract):
    project = tmp_path_factory.mktemp("project")
    make_script(str(project), "ok.sh")
    daemon = Daemon(project, tmp_path_factory.mktemp("state"), ["--max-workers", str(MAX_WORKERS), "--gpus", "0"])
    daemon.start()
    observer = ResponseObserver(contract)
    try:
        yield {"api": Api(daemon, observer), "project": str(project), "daemon": daemon, "observer": observer}
    finally:
        daemon.stop()
        shutil.rmtree(str(project), ignore_errors=True)


def make_script(project, name):
    path = os.path.join(project, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


# ---- the document's constraints, as values ---------------------------------

def with_daemon_limits(schema):
    """The schema with x-muster-limit maxima set from this daemon's --max-workers."""
    if isinstance(schema, list):
        return [with_daemon_limits(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: with_daemon_limits(v) for k, v in schema.items()}
    limit = out.get("x-muster-limit", {}).get("maximum")
    if limit:
        m = re.fullmatch(r"--max-workers(?: - (\d+))?", limit)
        assert m, "unknown x-muster-limit %r" % limit
        out["maximum"] = MAX_WORKERS - int(m.group(1) or 0)
    return out


def subschemas(schema):
    """schema and every branch of anyOf/oneOf/allOf, for reading bounds."""
    yield schema
    for key in ("anyOf", "oneOf", "allOf"):
        for s in schema.get(key, []):
            yield from subschemas(s)


def values_for(schema, seed):
    """Values on both sides of every constraint of one property schema."""
    out = list(TYPE_PROBES)
    if seed is not None:
        out.append(seed)
    for s in subschemas(schema):
        types = s.get("type", [])
        types = [types] if isinstance(types, str) else types
        integer = "integer" in types
        step = 1 if integer else 0.001
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if key in s:
                b = s[key]
                out += [b - step, b, b + step]
                if integer:
                    out.append(float(b))   # 2.0: an integer to JSON Schema
        for member in s.get("enum", []) + ([s["const"]] if "const" in s else []):
            out.append(member)
            if isinstance(member, str):
                out += [member.upper(), member + "x"]
        if "string" in types or "pattern" in s or "minLength" in s or "maxLength" in s:
            out += STRING_PROBES
            for key in ("minLength", "maxLength"):
                if key in s:
                    out += ["a" * max(0, s[key] - 1), "a" * s[key], "a" * (s[key] + 1)]
        if "array" in types or "items" in s:
            item = seed[0] if isinstance(seed, list) and seed else "a"
            out += [[], [item], [item, item], [1], [None], [""], ["a\u0000"], [{"id": item}], [{"id": ""}], [{}]]
        if "propertyNames" in s or isinstance(s.get("additionalProperties"), dict):
            out += [{"A": "1"}, {"_a9": "x"}, {"1A": "x"}, {"A-B": "x"}, {"": "x"}, {"A": 1}, {"A": None},
                    {"A": "a\u0000"}]
    unique = []
    for v in out:
        key = json.dumps(v, sort_keys=True)
        if key not in [json.dumps(u, sort_keys=True) for u in unique]:
            unique.append(v)
    return unique


def cases(schema, base, seeds=None):
    """(what, body) pairs: base with one field dropped, added or changed."""
    seeds = seeds or {}
    props = {}
    for s in subschemas(schema):
        for name, p in s.get("properties", {}).items():
            props.setdefault(name, p)
    out = [("base", copy.deepcopy(base))]
    for name in base:
        body = copy.deepcopy(base)
        del body[name]
        out.append(("without %s" % name, body))
    out.append(("unknown field memroy", dict(copy.deepcopy(base), memroy=1)))
    for name, p in props.items():
        for v in values_for(p, seeds.get(name, base.get(name))):
            out.append(("%s=%s" % (name, json.dumps(v)), dict(copy.deepcopy(base), **{name: v})))
    seen, unique = set(), []
    for what, body in out:
        key = json.dumps(body, sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append((what, body))
    return unique


def marked_exists(schema):
    """{field: kind} of the properties marked x-muster-exists."""
    out = {}
    for s in subschemas(schema):
        for name, p in s.get("properties", {}).items():
            for sub in subschemas(p):
                if sub.get("x-muster-exists"):
                    out[name] = sub["x-muster-exists"]
    return out


def exists(kind, value, env):
    """Whether `value` names something that exists, for a field marked x-muster-exists `kind`."""
    if value is None or value == "":
        return True
    if kind == "executable":
        return isinstance(value, str) and os.path.isfile(value) and os.access(value, os.X_OK)
    if kind == "running-workers":
        return isinstance(value, list) and all(v in env.get("running", ()) for v in value)
    raise AssertionError("unknown x-muster-exists %r" % kind)


def blamed_fields(validator, body):
    """The fields the document's validation holds responsible for rejecting body."""
    fields = set()

    def walk(errors):
        for e in errors:
            path = list(e.absolute_path) if hasattr(e, "absolute_path") else []
            if path:
                fields.add(str(path[0]))
            elif e.validator == "required":
                fields.update(re.findall(r"'([^']+)' is a required property", e.message))
            elif e.validator in ("additionalProperties", "unevaluatedProperties"):
                fields.update(re.findall(r"'([^']+)'", e.message))
            walk(e.context or [])

    walk(validator.iter_errors(body))
    return fields


def check_agreement(contract, env, method, template, bases, seeds=None, path_for=None, accepted=None,
                    after_accept=None):
    schema = with_daemon_limits(contract.request_schema(method, template))
    validator = request_validator(schema)
    api = env["api"]
    disagreements, counts = [], {"allowed": 0, "rejected": 0}
    marked = marked_exists(schema)
    for base in bases:
        assert validator.is_valid(base), "the test's base body %s is not allowed by the document" % base
        for what, body in cases(schema, base, seeds):
            allowed = validator.is_valid(body)
            missing = [f for f, kind in marked.items() if allowed and f in body and not exists(kind, body[f], env)]
            if allowed and missing:
                # The document's rule it cannot write as a schema: 400 naming the field.
                status, answer = api.call(method, path_for() if path_for else template, body)
                counts["rejected"] += 1
                err = answer.get("error", {}) if isinstance(answer, dict) else {}
                if status != 400 or err.get("field") not in missing:
                    disagreements.append("%s: %s names nothing that exists; musterd answered %s %s"
                                         % (what, missing, status, answer))
                    if 200 <= status < 300 and after_accept:
                        after_accept(answer)
                continue
            if allowed:
                for field in ("script", "worker_script", "ps_script"):
                    if isinstance(body.get(field), str) and body[field]:
                        make_script(env["project"], body[field])
            status, answer = api.call(method, path_for() if path_for else template, body)
            counts["allowed" if allowed else "rejected"] += 1
            if allowed:
                ok = accepted(status, body, answer) if accepted else 200 <= status < 300
                if not ok:
                    disagreements.append("%s: the document allows %s, musterd answered %s %s"
                                         % (what, json.dumps(body), status, answer))
                if after_accept and 200 <= status < 300:
                    after_accept(answer)
            else:
                err = answer.get("error", {}) if isinstance(answer, dict) else {}
                blamed = blamed_fields(validator, body)
                if status != 400 or err.get("code") != "invalid_argument":
                    disagreements.append("%s: the document rejects %s (%s), musterd answered %s %s"
                                         % (what, json.dumps(body), sorted(blamed), status, answer))
                    if 200 <= status < 300 and after_accept:
                        after_accept(answer)
                elif blamed and err.get("field") not in blamed:
                    disagreements.append("%s: musterd's 400 names field %r, the document blames %s (%s)"
                                         % (what, err.get("field"), sorted(blamed), err.get("message")))
    assert not disagreements, "%d disagreements:\n" % len(disagreements) + "\n".join(disagreements)
    assert counts["allowed"] >= 3 and counts["rejected"] >= 5, counts
    return counts


def stop_workers(env):
    def stop(answer):
        ids = [w["id"] for w in answer.get("workers", [])]
        if ids:
            status, body = env["api"].call("POST", "/api/v1/workers/stop", {"ids": ids})
            assert status == 200, body
    return stop


def finished_worker(env):
    api = env["api"]
    status, body = api.call("POST", "/api/v1/workers", {"n": 1, "cpu": 0.1, "memory": 0.1, "kernel": "bash",
                                                        "code": "true"})
    assert status == 201, body
    wid = body["workers"][0]["id"]
    status, body = api.call("POST", "/api/v1/workers/await", {"ids": [wid], "timeout_seconds": 30})
    assert status == 200 and body["workers"], body
    return wid


def gpus_wanted(body, count_field):
    per = body.get("nvidia_gpu") or 0
    count = body.get(count_field) or 0
    if count_field == "n_workers":   # every task of a ps cluster but its PS tasks reserves GPUs
        count += (body.get("n_chief") or 0) + (body.get("n_evaluator") or 0)
    return per * count


def created_or_gpus_busy(count_field):
    """2xx, or the document's 409 for a request wanting more GPUs than the host has."""
    def accepted(status, body, answer):
        if 200 <= status < 300:
            return gpus_wanted(body, count_field) <= HOST_GPUS
        err = answer.get("error", {}) if isinstance(answer, dict) else {}
        return (status == 409 and err.get("code") == "conflict" and err.get("field") == "nvidia_gpu"
                and gpus_wanted(body, count_field) > HOST_GPUS)
    return accepted


def test_launch_accepts_exactly_what_the_document_allows(contract, env):
    check_agreement(contract, env, "POST", "/api/v1/workers", LAUNCH_BASES, seeds={"args": ["--x"], "python": PYTHON},
                    accepted=created_or_gpus_busy("n"), after_accept=stop_workers(env))


def test_await_and_stop_accept_exactly_what_the_document_allows(contract, env):
    wid = finished_worker(env)  # settled: an await on it answers at once
    bases = [{"ids": [wid], "wait_for_completion": False, "timeout_seconds": 5}]
    check_agreement(contract, env, "POST", "/api/v1/workers/await", bases, seeds={"ids": [wid]})
    check_agreement(contract, env, "POST", "/api/v1/workers/stop", [{"ids": [wid]}], seeds={"ids": [wid]})


def test_clusters_accept_exactly_what_the_document_allows(contract, env):
    def stop_cluster(answer):
        status, body = env["api"].call("POST", "/api/v1/clusters/%s/stop" % answer["id"], {})
        assert status == 200, body

    # A running worker of the notebook's own, for mpi clusters on `workers`.
    api = env["api"]
    status, body = api.call("POST", "/api/v1/workers", {"n": 1, "cpu": 0.1, "memory": 0.1, "kernel": "bash",
                                                        "code": "sleep 600"})
    assert status == 201, body
    mine = body["workers"][0]["id"]
    status, body = api.call("POST", "/api/v1/workers/await", {"ids": [mine], "wait_for_completion": False,
                                                              "timeout_seconds": 60})
    assert status == 200 and body["workers"], body
    on_workers = {"mode": "mpi", "workers": [mine], "cpu": 0.1, "memory": 0.1, "worker_script": "ok.sh",
                  "launch": False}
    check_agreement(contract, dict(env, running={mine}), "POST", "/api/v1/clusters", CLUSTER_BASES + [on_workers],
                    seeds={"args": ["--x"], "worker_script": "ok.sh", "ps_script": "ok.sh",
                           "network_interfaces": ["lo"], "python": PYTHON, "workers": [mine]},
                    accepted=created_or_gpus_busy("n_workers"), after_accept=stop_cluster)
    # The cluster never stopped the worker it ran on.
    status, body = api.call("GET", "/api/v1/workers/" + mine)
    assert body["status"] == "running", body
    api.call("POST", "/api/v1/workers/stop", {"ids": [mine]})


def test_agent_routes_accept_exactly_what_the_document_allows(contract, env):
    api = env["api"]
    status, body = api.call("POST", "/api/v1/workers", {"n": 1, "cpu": 0.1, "memory": 0.1, "kernel": "bash",
                                                        "code": "sleep 60"})
    assert status == 201, body
    wid = body["workers"][0]["id"]
    token, deadline = None, time.monotonic() + 30
    while token is None and time.monotonic() < deadline:
        token = agent_token(wid)
        time.sleep(0.1)
    assert token, "no muster-agent process of worker %s found" % wid

    class AgentApi:
        def call(self, method, path, body=None):
            return api.call(method, path, body, token=token)

    agent_env = dict(env, api=AgentApi())
    not_400 = lambda status, body, answer: status in (200, 409)  # noqa: E731 - valid body; 409 once the worker ended
    check_agreement(contract, agent_env, "POST", "/api/v1/agent/workers/{id}/register",
                    [{"ip_address": "127.0.0.1"}], path_for=lambda: "/api/v1/agent/workers/%s/register" % wid,
                    accepted=not_400)
    check_agreement(contract, agent_env, "POST", "/api/v1/agent/workers/{id}/exit", [{"exit_code": 0}],
                    path_for=lambda: "/api/v1/agent/workers/%s/exit" % wid, accepted=not_400)
    api.call("POST", "/api/v1/workers/stop", {"ids": [wid]})


def agent_token(wid):
    """The agent token of worker wid, from its muster-agent's environment (we are its parent's user)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                entries = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        except OSError:
            continue
        if entries.get(b"MUSTER_WORKER_ID") == wid.encode() and b"MUSTER_AGENT_TOKEN" in entries:
            return entries[b"MUSTER_AGENT_TOKEN"].decode()
    return None


@pytest.mark.parametrize("route", ["/api/v1/workers/{id}/logs", "/api/v1/clusters/{id}/logs"])
def test_tail_accepts_exactly_what_the_document_allows(contract, env, route):
    api = env["api"]
    if "clusters" in route:
        status, body = api.call("POST", "/api/v1/clusters", {"n_workers": 1, "cpu": 0.1, "memory": 0.1})
        assert status == 201, body
        rid = body["id"]
        api.call("POST", "/api/v1/clusters/%s/stop" % rid, {})
    else:
        rid = finished_worker(env)
    (tail,) = [p for p in contract.parameters("GET", route) if p["name"] == "tail"]
    validator = request_validator(tail["schema"])
    top = tail["schema"]["maximum"]
    raw_values = ["0", "1", "5", "-1", "x", "1.5", "", "+3", " 3", "3 ", "0x10", "1e3", str(top), str(top + 1)]
    disagreements = []
    for raw in raw_values:
        try:
            value = int(raw) if re.fullmatch(r"-?[0-9]+", raw) else raw   # a query value as OpenAPI reads it
        except ValueError:
            value = raw
        allowed = validator.is_valid(value)
        status, answer = api.call("GET", route.replace("{id}", rid) + "?tail=" + urllib.parse.quote(raw))
        if allowed and status != 200:
            disagreements.append("tail=%r: allowed by the document, musterd answered %s %s" % (raw, status, answer))
        if not allowed and (status != 400 or answer.get("error", {}).get("field") != "tail"):
            disagreements.append("tail=%r: rejected by the document, musterd answered %s %s" % (raw, status, answer))
    assert not disagreements, "\n".join(disagreements)


def query_value(raw):
    """A query string value as an OpenAPI reader types it: true/false, a whole number, else the text."""
    if raw in ("true", "false"):
        return raw == "true"
    if re.fullmatch(r"-?[0-9]+", raw):
        return int(raw)
    return raw


@pytest.mark.parametrize("route", ["/api/v1/workers/{id}/logs", "/api/v1/clusters/{id}/logs"])
def test_follow_and_offset_accept_exactly_what_the_document_allows(contract, env, route):
    """Streams of an ended worker (cluster) end at once, so every allowed follow answers 200 promptly."""
    api = env["api"]
    if "clusters" in route:
        status, body = api.call("POST", "/api/v1/clusters", {"n_workers": 1, "cpu": 0.1, "memory": 0.1})
        assert status == 201, body
        rid = body["id"]
        api.call("POST", "/api/v1/clusters/%s/stop" % rid, {})
    else:
        rid = finished_worker(env)
    params = {p["name"]: p for p in contract.parameters("GET", route)}
    path = route.replace("{id}", rid)
    disagreements = []

    def probe(name, raw, query, allowed):
        status, answer = api.call("GET", path + "?" + query)
        if allowed and status != 200:
            disagreements.append("%s: allowed by the document, musterd answered %s %s" % (query, status, answer))
        if not allowed and (status != 400 or answer.get("error", {}).get("field") != name):
            disagreements.append("%s: rejected by the document, musterd answered %s %s" % (query, status, answer))

    follow = request_validator(params["follow"]["schema"])
    for raw in ["true", "false", "1", "0", "", "yes", "TRUE", "2", "-1", "true "]:
        probe("follow", raw, "follow=" + urllib.parse.quote(raw), follow.is_valid(query_value(raw)))
    offset = request_validator(params["offset"]["schema"])
    top = params["offset"]["schema"]["maximum"]
    for raw in ["0", "1", "5", "999999", "-1", "x", "1.5", "", "+3", " 3", "0x10", "1e3", str(top), str(top + 1),
                "9" * 19, "1" + "0" * 19]:
        probe("offset", raw, "follow=true&offset=" + urllib.parse.quote(raw), offset.is_valid(query_value(raw)))
    # The rule the schema cannot say: offset needs follow=true.
    probe("offset", "3", "offset=3", False)
    probe("offset", "3", "follow=false&offset=3", False)
    from_start = request_validator(params["from_start"]["schema"])
    for raw in ["true", "false", "1", "0", "", "yes", "TRUE", "2", "-1", "true "]:
        probe("from_start", raw, "from_start=" + urllib.parse.quote(raw), from_start.is_valid(query_value(raw)))
        probe("from_start", raw, "follow=true&from_start=" + urllib.parse.quote(raw),
              from_start.is_valid(query_value(raw)))
    # from_start reads from the first byte: not with tail or offset.
    probe("from_start", "true", "from_start=true&tail=3", False)
    probe("from_start", "true", "follow=true&from_start=true&offset=3", False)
    assert not disagreements, "\n".join(disagreements)


def point_path(error):
    """points[3].loss from a validation error's path ["points", 3, "loss"] (musterd's field naming)."""
    path = list(error.absolute_path)
    out = str(path[0]) if path else ""
    for p in path[1:]:
        out += "[%d]" % p if isinstance(p, int) else "." + str(p)
    return out


def point_blames(validator, body):
    """Fields (musterd's naming) the document blames for rejecting a metrics report."""
    fields = set()

    def walk(errors):
        for e in errors:
            where = point_path(e)
            if e.validator == "required" and not e.context:
                fields.update((where + "." if where else "") + f
                              for f in re.findall(r"'([^']+)' is a required property", e.message))
            elif e.validator == "additionalProperties":
                fields.update((where + "." if where else "") + f for f in re.findall(r"'([^']+)'", e.message))
            if where:
                fields.add(where)
            walk(e.context or [])

    walk(validator.iter_errors(body))
    return fields


def test_metrics_report_accepts_exactly_what_the_document_allows(contract, env):
    """The runtimes' report: every field of one point on both sides of its type, the batch bounds.

    musterd admits at most 20 reports a second per worker before reading the
    body (429); the probe waits and sends again when it meets one."""
    api = env["api"]
    status, body = api.call("POST", "/api/v1/workers", {"n": 1, "cpu": 0.1, "memory": 0.1, "kernel": "bash",
                                                        "code": "sleep 60"})
    assert status == 201, body
    wid = body["workers"][0]["id"]
    path = "/api/v1/agent/workers/%s/metrics" % wid
    # The worker's metrics token (MUSTER_METRICS_TOKEN): the document's metricsToken scheme.
    token = hmac.new(env["daemon"].token.encode(), ("metrics:" + wid).encode(), hashlib.sha256).hexdigest()
    status, answer = api.call("POST", path, {"points": [{"step": 0, "loss": 1}]})
    assert status == 403, "the daemon token is not a metrics token: %s %s" % (status, answer)
    validator = request_validator(contract.request_schema("POST", "/api/v1/agent/workers/{id}/metrics"))
    base = {"step": 1, "loss": 0.5}
    bodies = [{"points": [base]}, {}, {"points": None}, {"points": []}, {"points": "x"}, {"points": {}},
              {"points": [base], "other": 1}, {"points": [base] * 1000}, {"points": [base] * 1001},
              {"points": [1]}, {"points": [None]}, {"points": [{}]}, {"points": [base, {"step": 2}]},
              {"points": [{"step": 3, "loss": None}]}, {"points": [{"step": 3, "loss": None, "lr": 0.1}]},
              {"points": [dict(base, memroy=1)]}, {"points": [{"loss": 1}]}]
    for name in ("step", "time", "loss", "images_per_sec", "lr", "accuracy"):
        for v in TYPE_PROBES + [0, -1, 2.0, -0.5, 1e300, 2 ** 62, "1"]:
            bodies.append({"points": [dict(base, **{name: v})]})
    disagreements, counts = [], {"allowed": 0, "rejected": 0}
    for b in bodies:
        allowed = validator.is_valid(b)
        deadline = time.monotonic() + 10
        while True:
            status, answer = api.call("POST", path, b, token=token)
            if status != 429 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        counts["allowed" if allowed else "rejected"] += 1
        what = json.dumps(b)[:200]
        if allowed:
            n = len(b["points"])
            if status != 202 or answer != {"accepted": n}:
                disagreements.append("the document allows %s, musterd answered %s %s" % (what, status, answer))
            continue
        err = answer.get("error", {}) if isinstance(answer, dict) else {}
        blamed = point_blames(validator, b)
        if status != 400 or err.get("code") != "invalid_argument":
            disagreements.append("the document rejects %s (%s), musterd answered %s %s"
                                 % (what, sorted(blamed), status, answer))
        elif blamed and err.get("field") not in blamed:
            disagreements.append("%s: musterd's 400 names field %r, the document blames %s (%s)"
                                 % (what, err.get("field"), sorted(blamed), err.get("message")))
    api.call("POST", "/api/v1/workers/stop", {"ids": [wid]})
    assert not disagreements, "%d disagreements:\n" % len(disagreements) + "\n".join(disagreements)
    assert counts["allowed"] >= 10 and counts["rejected"] >= 20, counts
    # What was accepted is what the worker's curve serves (checked against the document by the observer).
    status, answer = api.call("GET", "/api/v1/workers/%s/metrics" % wid)
    assert status == 200 and answer["points"] and answer["points"][0]["step"] == 1, (status, answer)
    assert {"step": 1, "loss": 0.5} == {k: answer["points"][0][k] for k in ("step", "loss")}, answer
    status, answer = api.call("GET", "/api/v1/workers/%s/metrics?format=csv" % wid)
    assert status == 200 and answer.startswith("step,time,loss,images_per_sec,lr,accuracy,worker,rank\n"), (status, answer)
    status, answer = api.call("GET", "/api/v1/workers/%s/metrics?format=xml" % wid)
    assert status == 400 and answer["error"]["field"] == "format", (status, answer)


def test_session_login_accepts_exactly_what_the_document_allows(contract, env):
    """POST /api/v1/session: a body the document allows logs in with the right token (200), else 401."""
    daemon_token = env["daemon"].token
    accepted = lambda status, body, answer: (  # noqa: E731
        status == 200 if body.get("token") == daemon_token else status == 401)
    counts = check_agreement(contract, env, "POST", "/api/v1/session", [{"token": daemon_token}],
                             accepted=accepted)
    assert counts["allowed"] >= 3, counts
