"""JSON for the hot paths (stored metadata, bus messages, GraphQL over HTTP and WebSocket), with
orjson: several times faster than the standard library at both ends.

The text it writes is compact and UTF-8 (no `\\uXXXX` escapes); readers parse it the same. Where
orjson refuses a value the standard library takes (an integer beyond 64 bits, a lone surrogate),
`dumps` falls back to the standard library, so nothing that encoded before fails now; `loads` falls
back likewise for what orjson refuses to read (NaN, Infinity). orjson reads an integer beyond 64 bits
as a float without a word (2**70 + 1 would come back as 1.1805916207174113e+21), so a text with a run
of 19 digits or more (every integer outside orjson's range has one) is read by the standard library,
which keeps every integer exact. Nothing hashed or compared as text uses it: that keeps its own fixed
encoding (`domain.lifecycle.bundle_signature`).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS
# A run of digits as long as the shortest integer orjson cannot hold (-9223372036854775809): the text
# may hold such an integer (or only a long fraction or a string of digits, which read the same either way).
_LONG_DIGITS = re.compile(r"[0-9]{19}")
_LONG_DIGITS_BYTES = re.compile(rb"[0-9]{19}")


def dumps(value: Any) -> str:
    try:
        return orjson.dumps(value, option=_OPTIONS).decode()
    except TypeError:
        return json.dumps(value, separators=(",", ":"))


def loads(text: str | bytes) -> Any:
    """The JSON value of `text`; json.JSONDecodeError for anything that is not JSON this reads (not
    UTF-8, nested past the interpreter's recursion, an integer of more digits than it converts)."""
    long_digits = _LONG_DIGITS.search(text) if isinstance(text, str) else _LONG_DIGITS_BYTES.search(text)
    if long_digits is not None:
        return _standard(text)  # exact integers of any size
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return _standard(text)  # raises json.JSONDecodeError for what is not JSON at all


def _standard(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except UnicodeDecodeError as exc:
        raise _refused(text, f"not UTF-8 ({exc.reason})", exc.start) from None
    except RecursionError:
        raise _refused(text, "nested too deeply", 0) from None
    except ValueError as exc:  # an integer of more digits than the interpreter converts
        raise _refused(text, str(exc), 0) from None


def _refused(text: str | bytes, why: str, position: int) -> json.JSONDecodeError:
    document = text if isinstance(text, str) else text.decode("utf-8", "replace")
    return json.JSONDecodeError(why, document, min(position, len(document)))
