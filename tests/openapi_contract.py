"""api/openapi.yaml as a checker of live musterd responses (and request bodies).

Contract() loads the document (python3-yaml), inlines every local $ref, and
answers for one concrete request:

- check_response(method, url_or_path, status, body, content_type) raises
  ContractError unless the route is documented (or the answer is the 404 of
  an unknown route), the status is listed for that operation, and the body
  matches the schema of that status and media type (JSON bodies with
  Draft 2020-12, formats checked);
- request_schema(method, template) is the schema of a request body, for the
  boundary test.

Responses are checked *strictly*: every object schema that lists its
`properties` (Worker, Cluster, Error, ...) is closed with
additionalProperties:false, after merging allOf members, so a field renamed
or added in the code but not in the document fails. The document itself
stays open (clients must ignore unknown fields, docs/API_COMPATIBILITY.md).

ResponseObserver wraps a urllib opener (what the Python SDK's Transport
uses) so every answer it receives is checked without changing what the
caller sees: the body is read once and handed back unchanged.
"""
import copy
import datetime
import io
import json
import os
import re
import threading
import urllib.error
import urllib.parse

import jsonschema
import yaml

METHODS = ("get", "put", "post", "delete", "patch")


class ContractError(AssertionError):
    """A request or response that api/openapi.yaml does not allow."""


def document_path():
    root = os.environ.get("MUSTER_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    return os.path.join(root, "api", "openapi.yaml")


def _format_checker():
    checker = jsonschema.FormatChecker()

    # RFC 3339 date-time, without depending on the optional rfc3339-validator.
    @checker.checks("date-time", raises=ValueError)
    def _date_time(value):
        if not isinstance(value, str):
            return True
        if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", value):
            raise ValueError("not an RFC 3339 date-time: %r" % value)
        datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return True

    return checker


FORMAT_CHECKER = _format_checker()


class Contract:
    def __init__(self, path=None):
        self.path = path or document_path()
        with open(self.path) as f:
            self.doc = yaml.safe_load(f)
        self._templates = []  # (segments, template)
        for template in self.doc["paths"]:
            self._templates.append(([s for s in template.split("/") if s], template))  # "/" has no segments

    # ---- $ref resolution ------------------------------------------------

    def _lookup(self, ref):
        if not ref.startswith("#/"):
            raise ContractError("only local $refs are supported, not %r" % ref)
        node = self.doc
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def resolve(self, node, _seen=()):
        """A deep copy of node with every $ref inlined (siblings kept beside it with allOf)."""
        if isinstance(node, list):
            return [self.resolve(x, _seen) for x in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            ref = node["$ref"]
            if ref in _seen:
                raise ContractError("recursive $ref %s is not supported" % ref)
            target = self.resolve(self._lookup(ref), _seen + (ref,))
            siblings = {k: self.resolve(v, _seen) for k, v in node.items() if k != "$ref"}
            if not siblings:
                return target
            if all(k in ("description", "summary", "example", "examples", "default") for k in siblings):
                merged = dict(target)
                merged.update(siblings)
                return merged
            return dict(siblings, allOf=[target])
        return {k: self.resolve(v, _seen) for k, v in node.items()}

    # ---- routes ------------------------------------------------------------

    def match(self, method, url):
        """(template, operation) for a concrete path (query ignored), or (None, None).

        Literal segments win over {params}, as in musterd's router."""
        path = urllib.parse.urlsplit(url).path
        segs = [s for s in path.split("/") if s]
        best, best_literals = None, -1
        for pattern, template in self._templates:
            if len(pattern) != len(segs):
                continue
            literals = 0
            for p, s in zip(pattern, segs):
                if p.startswith("{") and p.endswith("}"):
                    continue
                if p != s:
                    break
                literals += 1
            else:
                if method.lower() in self.doc["paths"][template] and literals > best_literals:
                    best, best_literals = template, literals
        if best is None:
            return None, None
        return best, self.doc["paths"][best][method.lower()]

    def operation(self, method, template):
        op = self.doc["paths"].get(template, {}).get(method.lower())
        if op is None:
            raise ContractError("%s %s is not in api/openapi.yaml" % (method, template))
        return op

    def request_schema(self, method, template):
        body = self.resolve(self.operation(method, template).get("requestBody", {}))
        return body.get("content", {}).get("application/json", {}).get("schema")

    def parameters(self, method, template):
        return [self.resolve(p) for p in self.operation(method, template).get("parameters", [])]

    # ---- responses ---------------------------------------------------------

    def response_spec(self, method, url, status):
        template, op = self.match(method, url)
        where = "%s %s -> %s" % (method, urllib.parse.urlsplit(url).path, status)
        if op is None:
            if status != 404:
                raise ContractError("%s: no documented route, yet the status is not 404" % where)
            return where, self.resolve({"$ref": "#/components/responses/NotFound"})
        responses = op.get("responses", {})
        spec = responses.get(str(status)) or responses.get("%dXX" % (status // 100)) or responses.get("default")
        if spec is None:
            raise ContractError("%s: status %s is not documented for %s %s (documented: %s)"
                                % (where, status, method, template, ", ".join(sorted(responses))))
        return where, self.resolve(spec)

    def check_response(self, method, url, status, body, content_type=""):
        """Raises ContractError unless this answer is what the document allows; returns the decoded body."""
        where, spec = self.response_spec(method, url, status)
        content = spec.get("content") or {}
        if isinstance(body, bytes):
            text = body.decode("utf-8", "replace")
        else:
            text = body if isinstance(body, str) else None
        if not content:
            if text:
                raise ContractError("%s: documented without a body, got %r" % (where, text[:200]))
            return None
        media = (content_type or "").split(";")[0].strip().lower()
        if media not in content:
            if not media and len(content) == 1:
                media = next(iter(content))
            else:
                raise ContractError("%s: content type %r, documented: %s" % (where, content_type, sorted(content)))
        schema = content[media].get("schema", {})
        if media == "application/json":
            if text is not None:
                try:
                    value = json.loads(text)
                except ValueError:
                    raise ContractError("%s: body is not JSON: %r" % (where, text[:200])) from None
            else:
                value = body
        else:
            value = text if text is not None else body
        errors = sorted(response_validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
        if errors:
            lines = ["%s: the body does not match api/openapi.yaml:" % where]
            for e in errors[:8]:
                lines.append("  at %s: %s" % ("/".join(str(p) for p in e.absolute_path) or "(root)", e.message))
            lines.append("  body: %s" % (text if text is not None else json.dumps(value))[:600])
            raise ContractError("\n".join(lines))
        return value


def strict(schema):
    """The schema with every object that lists properties closed (additionalProperties:false).

    allOf members that are objects are merged first, so closing them does not
    make an allOf of two objects (AwaitFailure = Worker + log_tail) unsatisfiable."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    # An if/not condition is a test, not a shape: closing it would change what it matches.
    out = {k: (v if k in ("if", "not") else strict(v)) for k, v in schema.items()}
    members = out.get("allOf")
    if members and all(isinstance(m, dict) and ("properties" in m or m.get("type") == "object") for m in members):
        merged = {k: v for k, v in out.items() if k != "allOf"}
        props, required = dict(merged.get("properties", {})), list(merged.get("required", []))
        for m in members:
            props.update(m.get("properties", {}))
            required += [r for r in m.get("required", []) if r not in required]
            for k, v in m.items():
                if k not in ("properties", "required", "additionalProperties"):
                    merged.setdefault(k, v)
        merged["properties"], merged["required"] = props, required
        out = merged
    if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False
    return out


def response_validator(schema):
    return jsonschema.Draft202012Validator(strict(copy.deepcopy(schema)), format_checker=FORMAT_CHECKER)


def request_validator(schema):
    return jsonschema.Draft202012Validator(schema, format_checker=FORMAT_CHECKER)


_shared = None
_shared_lock = threading.Lock()


def shared_contract():
    """One Contract per process (the document is read once)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Contract()
        return _shared


class _Replayed(io.BytesIO):
    """A read-once HTTP response handed back with the same body, status and headers."""

    def __init__(self, resp, payload):
        super().__init__(payload)
        self.status = resp.status
        self.code = resp.status
        self.headers = resp.headers
        self.url = resp.geturl()
        self.reason = getattr(resp, "reason", "")

    def getcode(self):
        return self.status

    def geturl(self):
        return self.url

    def info(self):
        return self.headers


class ResponseObserver:
    """Checks every answer an opener (urllib.request.OpenerDirector) receives.

    observer.wrap(opener) returns an object with the same open(); counts in
    observer.checked (by "METHOD /template status"); an answer that does
    not conform raises ContractError from open(). Followed logs
    (follow=true) are checked for status and content type only, and passed
    through unread, so a streaming reader still streams."""

    def __init__(self, contract=None):
        self.contract = contract or shared_contract()
        self.checked = {}
        self._lock = threading.Lock()

    def record(self, method, url, status, body, content_type):
        template, _ = self.contract.match(method, url)
        key = "%s %s %s" % (method, template or "(no route)", status)
        with self._lock:
            self.checked[key] = self.checked.get(key, 0) + 1
        self.contract.check_response(method, url, status, body, content_type)

    def total(self):
        with self._lock:
            return sum(self.checked.values())

    def wrap(self, opener):
        return _ObservedOpener(opener, self)


def _is_follow(url):
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    return query.get("follow", ["false"])[0].lower() in ("true", "1")


class _ObservedOpener:
    def __init__(self, opener, observer):
        self._opener = opener
        self._observer = observer

    def __getattr__(self, name):
        return getattr(self._opener, name)

    def open(self, req, *args, **kwargs):
        method = req.get_method()
        url = req.full_url
        try:
            resp = self._opener.open(req, *args, **kwargs)
        except urllib.error.HTTPError as err:
            payload = err.read()
            self._observer.record(method, url, err.code, payload, err.headers.get("Content-Type", ""))
            raise urllib.error.HTTPError(err.url, err.code, err.msg, err.headers, io.BytesIO(payload)) from None
        content_type = resp.headers.get("Content-Type", "")
        if _is_follow(url):
            self._observer.record(method, url, resp.status, "", content_type)
            return resp
        with resp:
            payload = resp.read()
        self._observer.record(method, url, resp.status, payload, content_type)
        return _Replayed(resp, payload)


def observe_sdk(monkeypatch_or_none=None, observer=None):
    """Makes every muster._http.Transport check the answers it receives.

    Returns (observer, undo). The SDK's behaviour is unchanged: only its
    opener is wrapped, after Transport.__init__ built it."""
    from muster import _http
    observer = observer or ResponseObserver()
    original = _http.Transport.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._opener = observer.wrap(self._opener)

    _http.Transport.__init__ = init

    def undo():
        _http.Transport.__init__ = original

    return observer, undo
