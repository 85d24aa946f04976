"""The hot-path JSON codec reads and writes what the standard library does, falling back to it
where orjson refuses a value."""

from __future__ import annotations

import json
from typing import Any

import pytest

from backend import jsoncodec

VALUES: list[Any] = [
    {"a": 1, "b": [True, None, 1.5, "x"], "c": {"d": "é ✓"}},
    [],
    "plain",
    {"big": 2**70},  # beyond 64 bits: the standard library writes it
    {1: "int key"},  # written with its key as text, as the standard library does
]


@pytest.mark.parametrize("value", VALUES)
def test_dumps_reads_back_as_the_standard_library_reads_it(value: Any) -> None:
    text = jsoncodec.dumps(value)
    assert isinstance(text, str)
    assert json.loads(text) == json.loads(json.dumps(value))
    assert jsoncodec.loads(text) == json.loads(json.dumps(value))


def test_loads_takes_what_the_standard_library_takes_and_refuses_the_rest() -> None:
    assert jsoncodec.loads(b'{"x": [1, 2]}') == {"x": [1, 2]}
    assert jsoncodec.loads("NaN") != jsoncodec.loads("NaN")  # the standard library's NaN
    with pytest.raises(json.JSONDecodeError):
        jsoncodec.loads("{not json")


@pytest.mark.parametrize(
    "number",
    [
        2**70 + 1,  # a float cannot hold it
        123456789012345678901234567890,
        2**64,  # just past orjson's range
        -(2**63) - 1,
        2**64 - 1,  # orjson's own, still exact
        -(2**63),
        10**18,
    ],
)
def test_loads_keeps_every_integer_exact(number: int) -> None:
    for text in (f'{{"n": {number}, "l": [{number}]}}', f'{{"n": {number}, "l": [{number}]}}'.encode()):
        read = jsoncodec.loads(text)
        assert read == {"n": number, "l": [number]}
        assert type(read["n"]) is int


def test_loads_of_long_digit_runs_that_are_no_integers_reads_as_before() -> None:
    text = '{"id": "1234567890123456789012", "x": 0.12345678901234567890123, "y": 1.5e300}'
    assert jsoncodec.loads(text) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b'{"t": "\xff"}', "not UTF-8"),
        (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
        (b'{"n": ' + b"9" * 5000 + b"}", "digits"),
    ],
    ids=["not utf-8", "too deep", "too many digits"],
)
def test_what_loads_cannot_read_is_a_json_decode_error(text: bytes, why: str) -> None:
    # Callers (the GraphQL view's body, stored and bus JSON) handle that one error as "not JSON".
    with pytest.raises(json.JSONDecodeError, match=why):
        jsoncodec.loads(text)
