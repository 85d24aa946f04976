"""Refuses text that no store can keep faithfully (NUL, unpaired surrogates) before anything runs.

PostgreSQL text cannot hold NUL and UTF-8 cannot encode a lone surrogate, so such input would
otherwise fail deep in a write as an internal error. Checked once, for every operation (HTTP and
WebSocket), over both the document's string literals and the variables.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from graphql import DocumentNode, GraphQLError, StringValueNode, visit
from graphql.language import ArgumentNode, Visitor
from strawberry.types import ExecutionContext

PROBLEM = "text must not contain NUL characters or unpaired surrogates"


def storable(text: str) -> bool:
    if "\x00" in text:
        return False
    if text.isascii():  # no surrogate to pair, and no copy made to find out
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _all_storable(value: Any) -> bool:
    """`bad_variable_paths` finds nothing (checked without building a path per value)."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return all((not isinstance(k, str) or storable(k)) and _all_storable(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_all_storable(item) for item in value)
    return True


def bad_variable_paths(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, str):
        if not storable(value):
            yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and not storable(key):
                yield path
            else:
                yield from bad_variable_paths(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from bad_variable_paths(item, f"{path}[{i}]")


class _Literals(Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.arguments: list[str] = []
        self.bad: list[str] = []

    def enter_argument(self, node: ArgumentNode, *_: Any) -> None:
        self.arguments.append(node.name.value)

    def leave_argument(self, *_: Any) -> None:
        self.arguments.pop()

    def enter_string_value(self, node: StringValueNode, *_: Any) -> None:
        if not storable(node.value):
            self.bad.append(self.arguments[-1] if self.arguments else "document")


# Literals are fixed by the document's text: checked once per text (as many as the parser cache keeps).
_CHECKED_TEXTS = 128
_literals_of: OrderedDict[str, tuple[str, ...]] = OrderedDict()


def _literal_problems(text: str, document: DocumentNode) -> tuple[str, ...]:
    if text and text in _literals_of:
        _literals_of.move_to_end(text)
        return _literals_of[text]
    literals = _Literals()
    visit(document, literals)
    found = tuple(literals.bad)
    if text:
        _literals_of[text] = found
        if len(_literals_of) > _CHECKED_TEXTS:
            _literals_of.popitem(last=False)
    return found


def text_problems(ctx: ExecutionContext) -> list[GraphQLError]:
    """The operation's unstorable text (variables and the document's string literals), as errors."""
    variables = ctx.variables or {}
    bad = [] if _all_storable(variables) else list(bad_variable_paths(variables, "$"))
    if ctx.graphql_document is not None:
        bad += _literal_problems(ctx.query or "", ctx.graphql_document)
    return [GraphQLError(f"{where}: {PROBLEM}", extensions={"code": "BAD_USER_INPUT"}) for where in bad]
