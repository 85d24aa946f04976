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
