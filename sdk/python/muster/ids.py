"""Worker and cluster ids as users pass them: strings, or the dicts we return.

cdsw accepts both `["id1", "id2"]` and the worker dicts launch_workers
returned; so do we, and also a single id or dict where a list is expected.
"""
from typing import Any, List

from .errors import MusterError


def one_id(value: Any, what: str = "worker") -> str:
    """"abc" -> "abc"; {"id": "abc", ...} -> "abc"; anything else raises."""
    if isinstance(value, dict):
        value = value.get("id")
        if value is None:
            raise MusterError("a %s dict has no \"id\" key" % what, code="invalid_argument", field="ids")
    elif hasattr(value, "id") and not isinstance(value, (str, bytes)):
        value = value.id
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise MusterError("a %s id must be a string or a %s dict, got %r" % (what, what, value),
                          code="invalid_argument", field="ids")
    value = str(value)
    if not value:
        raise MusterError("empty %s id" % what, code="invalid_argument", field="ids")
    return value


def many_ids(values: Any, what: str = "worker") -> List[str]:
    """A list (or tuple, or single item, nested once) of ids/dicts -> list of strings."""
    if values is None:
        return []
    if isinstance(values, (str, dict, int)) or hasattr(values, "id"):
        values = [values]
    out = []
    for v in values:
        if isinstance(v, (list, tuple)):
            out.extend(one_id(x, what) for x in v)
        else:
            out.append(one_id(v, what))
    return out
