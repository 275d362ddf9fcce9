"""The one strict reader of settings given as text, in the dialect of musterd's (api/base/settings.h).

Every environment variable muster's Python reads (the SDK's MUSTER_*, the
runtime's, Horovod's HOROVOD_*) goes through it, with one spelling per type:

    boolean   exactly true, false, 1 or 0 (not on/off, yes/no, True or "")
    integer   optional '-', decimal digits, nothing else, within [min, max]
    number    a finite decimal number, within [min, max]
    choice    one of the listed words
    text      anything

A value that does not parse raises SettingError (a MusterError with code
"invalid_argument" and `field` the setting's name, and a ValueError) naming
the setting, the text it had and what is expected; never a silent default.
An absent setting, or an empty environment variable, gives the fallback.
tests/settings_dialect.json holds the cases both readers are run on.

Example::

    s = Settings.environment()
    timeout_ms = s.integer("MUSTER_COMM_TIMEOUT_MS", 60000, 0, 2**31 - 1)
"""
import math
import os
import re

from .errors import MusterError

_INTEGER = re.compile(r"-?[0-9]+\Z")
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")
_LONG_LONG = (-(1 << 63), (1 << 63) - 1)


class SettingError(MusterError, ValueError):
    """A setting whose text does not parse: `field` is its name."""

    def __init__(self, message, name):
        super().__init__(message, code="invalid_argument", field=name)


def parse_bool(text):
    return {"true": True, "1": True, "false": False, "0": False}.get(text)


def parse_integer(text):
    if not _INTEGER.match(text):
        return None
    value = int(text)
    return value if _LONG_LONG[0] <= value <= _LONG_LONG[1] else None


def parse_number(text):
    if not _NUMBER.match(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


class Settings:
    """A source of settings (the environment, or a dict) read in the dialect above."""

    def __init__(self, lookup, kind, empty_is_absent):
        self._lookup = lookup
        self._kind = kind
        self._empty_is_absent = empty_is_absent

    @classmethod
    def environment(cls, environ=None):
        """The process environment (or `environ`, a mapping standing in for it); empty counts as unset."""
        env = os.environ if environ is None else environ
        return cls(env.get, "environment variable", True)

    @classmethod
    def of(cls, values, kind):
        """A mapping whose every key counts, an empty value included (`kind` names it in errors)."""
        return cls(dict(values).get, kind, False)

    def describe(self, name):
        return "%s %s" % (self._kind, name)

    def raw(self, name):
        """The text as given, None when absent."""
        value = self._lookup(name)
        if value is None or (value == "" and self._empty_is_absent):
            return None
        return value

    def _fail(self, name, text, expected):
        raise SettingError("%s is '%s': expected %s" % (self.describe(name), text, expected), name)

    def boolean(self, name, fallback):
        text = self.raw(name)
        if text is None:
            return fallback
        value = parse_bool(text)
        if value is None:
            self._fail(name, text, "true, false, 1 or 0")
        return value

    def integer(self, name, fallback, minimum, maximum):
        text = self.raw(name)
        if text is None:
            return fallback
        value = parse_integer(text)
        if value is None or not minimum <= value <= maximum:
            self._fail(name, text, "a whole number in %d..%d" % (minimum, maximum))
        return value

    def number(self, name, fallback, minimum, maximum):
        text = self.raw(name)
        if text is None:
            return fallback
        value = parse_number(text)
        if value is None or not minimum <= value <= maximum:
            self._fail(name, text, "a number in %g..%g" % (minimum, maximum))
        return value

    def choice(self, name, fallback, allowed):
        text = self.raw(name)
        if text is None:
            return fallback
        if text not in allowed:
            words = list(allowed)
            self._fail(name, text, words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1])
        return text

    def text(self, name, fallback=""):
        text = self.raw(name)
        return fallback if text is None else text
