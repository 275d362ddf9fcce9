"""JSON over HTTP(S) to musterd, standard library only (urllib, ssl).

One Transport per Client. Each call opens its own connection, so a Client can
be shared by threads. Proxies from the environment are ignored on purpose:
musterd is local or on the cluster's own network, never behind a web proxy.
An https:// URL is verified as its TlsVerify says (muster.tls): the pin is
checked right after the handshake, before a byte of the request (the token)
is sent.
"""
import http.client
import json
import functools
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request

from typing import Callable, Optional, Tuple

from .errors import MusterError
from .tls import TlsVerify

# HTTP status -> error code, for answers whose body is not our JSON error.
_CODES = {
    400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied",
    404: "not_found", 409: "conflict", 413: "payload_too_large",
    500: "internal", 503: "unavailable", 504: "deadline_exceeded",
}

DEFAULT_TIMEOUT_S = 30.0

# musterd's default --max-body-bytes: a larger body is refused here, before
# it is sent, naming the field that makes it large.
MAX_BODY_BYTES = 1 << 20


def _largest_field(body) -> str:
    if not isinstance(body, dict) or not body:
        return "body"
    return max(body, key=lambda k: len(json.dumps(body[k])))


def error_from_response(status, body):
    """Turns an HTTP error answer into a MusterError.

    The daemon's form is {"error": {"code", "message", "field"}}; anything
    else (a proxy's HTML page, an empty body) still gives a readable error.
    """
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    try:
        err = json.loads(text).get("error")
    except (ValueError, AttributeError):
        err = None
    if isinstance(err, dict) and err.get("message"):
        return MusterError(str(err["message"]), code=str(err.get("code") or _CODES.get(status, "unknown")),
                           field=err.get("field") or None, http_status=status)
    message = text.strip()[:500] or "HTTP %d with no body" % status
    return MusterError(message, code=_CODES.get(status, "unknown"), http_status=status)


class VerifiedHTTPSConnection(http.client.HTTPSConnection):
    """An HTTPSConnection whose peer certificate is checked against a TlsVerify as soon as it connects."""

    def __init__(self, host, port=None, *, tls: TlsVerify, **kwargs):
        kwargs.pop("check_hostname", None)  # the context decides
        kwargs["context"] = tls.context()
        super().__init__(host, port, **kwargs)
        self._tls = tls

    def connect(self):
        where = "%s:%s" % (self.host, self.port)
        try:
            super().connect()
        except ssl.SSLCertVerificationError as err:
            raise self._tls.refused(where, err) from None
        try:
            self._tls.check(self.sock, where)
        except MusterError:
            self.close()
            raise


class _VerifiedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, tls: TlsVerify) -> None:
        super().__init__()
        self._tls = tls

    def https_open(self, req):
        return self.do_open(functools.partial(VerifiedHTTPSConnection, tls=self._tls), req)


def https_connection(url: str, tls: Optional[TlsVerify], timeout=None) -> http.client.HTTPConnection:
    """A connection to `url`'s host: verified HTTPS for https://, plain for http://."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        return VerifiedHTTPSConnection(parts.hostname, parts.port, tls=tls or TlsVerify(source="the system's CAs"),
                                       timeout=timeout)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)


def opener(url: str, tls: Optional[TlsVerify]) -> urllib.request.OpenerDirector:
    """A urllib opener without proxies that verifies https:// as `tls` says."""
    handlers = [urllib.request.ProxyHandler({})]
    if url.startswith("https://"):
        handlers.append(_VerifiedHTTPSHandler(tls or TlsVerify(source="the system's CAs")))
    return urllib.request.build_opener(*handlers)


class Transport:
    """Sends one request and returns the decoded answer (JSON or text)."""

    def __init__(self, url: str, token: str, source: Callable[[], str] = lambda: "MUSTER_URL",
                 tls: Optional[TlsVerify] = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.source = source  # where the URL came from (muster.config.source_of_url), asked on errors
        self.tls = tls
        self._opener = opener(self.url, tls)

    def unreachable(self, reason) -> MusterError:
        """Nothing answered at the URL (refused, reset, no route): code "unavailable", no HTTP status,
        the reason as `.detail` (muster.outage reads both)."""
        err = MusterError("cannot reach musterd at %s: %s. Is it running? (the URL came from %s)"
                          % (self.url, reason, self.source()), code="unavailable")
        err.detail = str(reason)
        return err

    def tls_failed(self, err) -> MusterError:
        """A TLS handshake that failed (not a certificate refused: that raises in VerifiedHTTPSConnection)."""
        hint = "" if self.url.startswith("https://") else " (musterd serves https beyond loopback: use https://)"
        return MusterError("TLS with musterd at %s failed: %s%s (the URL came from %s)"
                           % (self.url, err, hint, self.source()), code="unavailable")

    def open_stream(self, path: str, query: Optional[dict] = None,
                    timeout: Optional[float] = DEFAULT_TIMEOUT_S) -> Tuple[http.client.HTTPConnection,
                                                                         http.client.HTTPResponse]:
        """GET path and return (connection, response) with the body still unread.

        For answers that arrive over time (followed logs, chunked): the caller
        reads the response as it comes and closes the connection. An error
        answer raises MusterError as request() does; a connection that cannot
        be made raises MusterError(code="unavailable").
        """
        parts = urllib.parse.urlsplit(self.url)
        target = (parts.path.rstrip("/") + path) + ("?" + urllib.parse.urlencode(query) if query else "")
        conn = https_connection(self.url, self.tls, timeout=timeout)
        try:
            conn.request("GET", target, headers={"Authorization": "Bearer " + self.token, "Accept": "text/plain"})
            resp = conn.getresponse()
        except (socket.timeout, TimeoutError):
            conn.close()
            raise MusterError("GET %s: no answer from musterd within %s s" % (path, timeout),
                              code="deadline_exceeded") from None
        except (ConnectionError, OSError, http.client.HTTPException) as err:
            conn.close()
            if isinstance(err, ssl.SSLError):
                raise self.tls_failed(err) from None
            raise self.unreachable(err) from None
        if resp.status >= 400:
            body = resp.read()
            conn.close()
            raise error_from_response(resp.status, body)
        return conn, resp

    def request(self, method, path, body=None, query=None, timeout=DEFAULT_TIMEOUT_S, text=False):
        """method "GET"/"POST"; path like "/api/v1/workers"; timeout None = wait forever."""
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None
        headers = {"Authorization": "Bearer " + self.token, "Accept": "application/json"}
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
            if len(data) > MAX_BODY_BYTES:
                field = _largest_field(body)
                hint = " (put the code in a file in the project and pass script=)" if field == "code" else ""
                raise MusterError("%s %s: the request would be %d bytes, more than musterd accepts (%d, musterd "
                                  "--max-body-bytes), mostly %r%s" % (method, path, len(data), MAX_BODY_BYTES,
                                                                       field, hint),
                                  code="payload_too_large", field=field)
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=timeout) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as err:
            raise error_from_response(err.code, err.read()) from None
        except (socket.timeout, TimeoutError):
            raise MusterError("%s %s: no answer from musterd within %s s" % (method, path, timeout),
                              code="deadline_exceeded") from None
        except (urllib.error.URLError, ConnectionError, OSError, http.client.HTTPException) as err:
            # HTTPException: the connection ended mid-answer (a daemon that died while answering).
            reason = getattr(err, "reason", err)
            if isinstance(reason, ssl.SSLError):
                raise self.tls_failed(reason) from None
            raise self.unreachable(reason or type(err).__name__) from None
        if text:
            return payload.decode("utf-8", "replace")
        if not payload:
            return None
        try:
            return json.loads(payload.decode("utf-8"))
        except ValueError:
            raise MusterError("%s %s: musterd answered something that is not JSON: %r"
                              % (method, path, payload[:200]), code="internal") from None
