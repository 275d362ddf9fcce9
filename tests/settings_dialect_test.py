"""The Python reader (muster.settings) on the cases the C++ reader (base_settings_test) runs too."""
import json
import os

import pytest

from muster.settings import SettingError, Settings

CASES = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "settings_dialect.json")))


def read(kind, text):
    s = Settings.of({"X": text}, "test setting")
    if kind == "boolean":
        return s.boolean("X", None)
    spec = CASES[kind]
    if kind == "integer":
        return s.integer("X", None, spec["min"], spec["max"])
    if kind == "number":
        return s.number("X", None, spec["min"], spec["max"])
    return s.choice("X", None, spec["allowed"])


@pytest.mark.parametrize("kind", ["boolean", "integer", "number"])
def test_good_values_parse_to_what_the_cases_say(kind):
    for text, expected in CASES[kind]["ok"].items():
        assert read(kind, text) == pytest.approx(expected), (kind, text)


@pytest.mark.parametrize("kind", ["boolean", "integer", "number", "choice"])
def test_bad_values_are_errors_naming_the_setting(kind):
    for text in CASES[kind]["bad"]:
        with pytest.raises(SettingError) as err:
            read(kind, text)
        assert err.value.field == "X" and err.value.code == "invalid_argument"
        assert isinstance(err.value, ValueError)
        assert ("test setting X is '%s'" % text) in err.value.message, err.value.message


def test_choices():
    for text in CASES["choice"]["ok"]:
        assert read("choice", text) == text


def test_error_texts_match_the_cpp_reader():
    for case in CASES["errors"]:
        with pytest.raises(SettingError) as err:
            read(case["type"], case["text"])
        assert err.value.message == case["message"]


def test_environment_empty_is_unset_and_absent_is_the_fallback():
    env = Settings.environment({"EMPTY": CASES["environment"]["empty_is_unset"], "ON": "1"})
    assert env.boolean("EMPTY", True) is True
    assert env.integer("ABSENT", 7, 0, 10) == 7
    assert env.boolean("ON", False) is True
    with pytest.raises(SettingError) as err:
        Settings.environment({"T": "yes"}).boolean("T", False)
    assert err.value.message == "environment variable T is 'yes': expected true, false, 1 or 0"
