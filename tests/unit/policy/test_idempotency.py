"""Which Idempotency-Keys are valid and what makes two submits the same request."""

from __future__ import annotations

import json

import pytest

from service.policy.idempotency import MAX_KEY_LEN, fingerprint, parse_key


@pytest.mark.parametrize("raw, key", [
    ("abc", "abc"), ('"abc"', "abc"), ("  8e03978e-40d5  ", "8e03978e-40d5"),
    ("k" * MAX_KEY_LEN, "k" * MAX_KEY_LEN), ("a b", "a b"),
])
def test_valid_keys(raw: str, key: str) -> None:
    assert parse_key(raw) == key


@pytest.mark.parametrize("raw, why", [
    ("", "empty"), ("   ", "empty"), ('""', "empty"), ("k" * (MAX_KEY_LEN + 1), "over"),
    ("a\x01b", "printable"), ("caf\u00e9", "printable"), ('"a"b"', "quote"),
    ('"a\\b"', "backslash"),
])
def test_invalid_keys_say_why(raw: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_key(raw)


def test_json_bodies_are_compared_canonically_yaml_as_sent() -> None:
    doc = {"b": 1, "a": [1, 2], "c": {"y": None, "x": "é"}}
    one = fingerprint("R", json.dumps(doc), as_json=True)
    assert one == fingerprint("R", json.dumps(doc, indent=4, sort_keys=True), as_json=True)
    assert one != fingerprint("R", json.dumps({**doc, "b": 2}), as_json=True)
    assert one != fingerprint("other route", json.dumps(doc), as_json=True)
    yaml_text = "a: 1\nb: 2\n"
    assert fingerprint("R", yaml_text, as_json=False) == fingerprint(
        "R", "a: 1\r\nb: 2\r\n", as_json=False)
    assert fingerprint("R", yaml_text, as_json=False) != fingerprint(
        "R", "b: 2\na: 1\n", as_json=False)
    assert fingerprint("R", "{not json", as_json=True) == fingerprint(
        "R", "{not json", as_json=True)
