"""Finding the daemon: its URL and bearer token (and, for https, how its
certificate is verified: tls_settings(), muster.tls).

Order, for each of the two values separately:
  1. an explicit argument (Client(url=..., token=...));
  2. the environment: MUSTER_URL, MUSTER_TOKEN;
  3. the state directory (MUSTER_STATE_DIR, else ~/.muster): the URL from
     <state>/musterd.json {"url": ...}, the token from <state>/token.
musterd writes both files when it starts, so a notebook on the same machine
needs no configuration at all.
"""
import json
import os
from typing import Optional, Tuple

from .errors import MusterError
from .tls import TlsVerify


def state_dir() -> str:
    """The daemon's state directory: $MUSTER_STATE_DIR, else ~/.muster."""
    return os.environ.get("MUSTER_STATE_DIR") or os.path.join(os.path.expanduser("~"), ".muster")


def _read_url(directory: str) -> Optional[str]:
    path = os.path.join(directory, "musterd.json")
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise MusterError("cannot read %s: %s" % (path, err), code="unconfigured")
    url = data.get("url") if isinstance(data, dict) else None
    if not isinstance(url, str) or not url:
        raise MusterError("%s has no \"url\" string" % path, code="unconfigured")
    return url


def _read_token(directory: str) -> Optional[str]:
    path = os.path.join(directory, "token")
    try:
        with open(path) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None
    except OSError as err:
        raise MusterError("cannot read %s: %s" % (path, err), code="unconfigured")


def _state_dir_hint(directory: str) -> str:
    if os.environ.get("MUSTER_STATE_DIR"):
        return "MUSTER_STATE_DIR=%s" % directory
    return "the default state dir %s; a musterd started with --state-dir DIR is found with MUSTER_STATE_DIR=DIR" \
        % directory


def source_of_url(url: Optional[str] = None) -> str:
    """Where discover() took the URL from, for error messages ("MUSTER_URL", "<state>/musterd.json ...")."""
    if url:
        return "the url given to muster.Client"
    if os.environ.get("MUSTER_URL"):
        return "MUSTER_URL"
    directory = state_dir()
    path = os.path.join(directory, "musterd.json")
    text = "%s (%s)" % (path, _state_dir_hint(directory))
    try:
        with open(path) as f:
            pid = json.load(f).get("pid")
        if isinstance(pid, int) and pid > 0:
            os.kill(pid, 0)
    except ProcessLookupError:
        text += "; the musterd that wrote it (pid %s) is no longer running: start it again" % pid
    except (OSError, ValueError, AttributeError):
        pass
    return text


# How long a wait (await_workers, await_cluster, a followed log) keeps trying
# a musterd it cannot reach before it fails (muster.outage).
DEFAULT_RECONNECT_SECONDS = 30.0


def reconnect_seconds(given: Optional[float] = None) -> float:
    """Seconds a wait rides through an unreachable musterd: `given`, else $MUSTER_RECONNECT_SECONDS, else 30.

    0 fails at once. A value that is not a number >= 0 raises
    MusterError(code="invalid_argument") naming where it came from.

    Example::

        muster.config.reconnect_seconds()      # 30.0 unless MUSTER_RECONNECT_SECONDS says otherwise
    """
    source, value = "reconnect_seconds", given
    if value is None:
        source, value = "MUSTER_RECONNECT_SECONDS", os.environ.get("MUSTER_RECONNECT_SECONDS", "").strip()
        if not value:
            return DEFAULT_RECONNECT_SECONDS
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise MusterError("%s must be a number of seconds >= 0 (0: fail at once), got %r" % (source, value),
                          code="invalid_argument", field=source)
    return seconds


def tls_settings(url: str, ca_file: Optional[str] = None, fingerprint: Optional[str] = None) -> Optional[TlsVerify]:
    """How the certificate of the daemon at `url` is verified (muster.tls gives the order); None for http://.

    Example::

        muster.config.tls_settings("https://10.0.0.5:7878")   # MUSTER_CA_FILE / MUSTER_TLS_FINGERPRINT / musterd.json
    """
    if not url.startswith("https://"):
        return None
    if ca_file or fingerprint:
        return TlsVerify(ca_file, fingerprint, "the ca_file/tls_fingerprint given")
    env_ca, env_pin = os.environ.get("MUSTER_CA_FILE"), os.environ.get("MUSTER_TLS_FINGERPRINT")
    if env_ca or env_pin:
        names = [n for n, v in (("MUSTER_CA_FILE", env_ca), ("MUSTER_TLS_FINGERPRINT", env_pin)) if v]
        return TlsVerify(env_ca, env_pin, " and ".join(names))
    path = os.path.join(state_dir(), "musterd.json")
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = None
    tls = data.get("tls") if isinstance(data, dict) else None
    if isinstance(tls, dict) and str(data.get("url", "")).rstrip("/") == url.rstrip("/") and tls.get("fingerprint"):
        return TlsVerify(None, str(tls["fingerprint"]), "%s (tls.fingerprint)" % path)
    return TlsVerify(None, None, "the system's CAs")


def discover(url: Optional[str] = None, token: Optional[str] = None) -> Tuple[str, str]:
    """Returns (url, token) following the order above.

    Raises MusterError(code="unconfigured") naming what is missing and where
    it was looked for.

    Example::

        url, token = muster.config.discover()
    """
    directory = state_dir()
    url = url or os.environ.get("MUSTER_URL") or _read_url(directory)
    token = token or os.environ.get("MUSTER_TOKEN") or _read_token(directory)
    if not url:
        raise MusterError(
            "no musterd found: %s does not exist (%s). Start musterd (build/bin/musterd --project-dir DIR), or "
            "point MUSTER_STATE_DIR at the --state-dir it runs with, or set MUSTER_URL and MUSTER_TOKEN"
            % (os.path.join(directory, "musterd.json"), _state_dir_hint(directory)), code="unconfigured")
    if not token:
        raise MusterError(
            "no musterd token: %s does not exist (%s); set MUSTER_TOKEN, or MUSTER_STATE_DIR to the --state-dir "
            "musterd runs with" % (os.path.join(directory, "token"), _state_dir_hint(directory)),
            code="unconfigured")
    return url.rstrip("/"), token
