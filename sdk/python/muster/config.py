"""Finding the daemon: its URL and bearer token.

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
            "no musterd URL: set MUSTER_URL or start musterd (it writes %s)"
            % os.path.join(directory, "musterd.json"), code="unconfigured")
    if not token:
        raise MusterError(
            "no musterd token: set MUSTER_TOKEN or start musterd (it writes %s)"
            % os.path.join(directory, "token"), code="unconfigured")
    return url.rstrip("/"), token
