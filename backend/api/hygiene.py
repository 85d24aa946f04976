"""Refuses text that no store can keep faithfully (NUL, unpaired surrogates), and variables nested
deeper than anything walks safely, before anything runs.

PostgreSQL text cannot hold NUL and UTF-8 cannot encode a lone surrogate, so such input would
otherwise fail deep in a write as an internal error. Checked once, for every operation (HTTP and
WebSocket), over both the document's string literals and the variables.
"""

from __future__ import annotations

from typing import Any

from graphql import DocumentNode, GraphQLError, StringValueNode, visit
from graphql.language import ArgumentNode, Visitor
from strawberry.types import ExecutionContext

from backend.lru import LRU

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


# Lists and objects in an operation's variables nest at most this deep (a tool's input is JSON of any
# shape): deeper ones are refused naming where, before anything walks them recursively.
MAX_DEPTH = 256
TOO_DEEP = f"lists and objects must not nest more than {MAX_DEPTH} levels deep"


def _all_storable(value: Any) -> bool:
    """`variable_problems` finds nothing (checked without building a path per value)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not storable(item):
                return False
        elif isinstance(item, dict):
            if depth >= MAX_DEPTH:
                return False
            for key, child in item.items():
                if isinstance(key, str) and not storable(key):
                    return False
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            if depth >= MAX_DEPTH:
                return False
            stack.extend((child, depth + 1) for child in item)
    return True


def variable_problems(value: Any, path: str) -> list[tuple[str, str]]:
    """(where, what is wrong) for each unstorable text (or key) and each list or object nested too
    deep."""
    found: list[tuple[str, str]] = []
    stack = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            if not storable(item):
                found.append((where, PROBLEM))
        elif isinstance(item, (dict, list)):
            if depth >= MAX_DEPTH:
                found.append((where, TOO_DEEP))
                continue
            children: list[tuple[Any, str, int]] = []
            if isinstance(item, dict):
                for key, child in item.items():
                    if isinstance(key, str) and not storable(key):
                        found.append((where, PROBLEM))
                    else:
                        children.append((child, f"{where}.{key}", depth + 1))
            else:
                children = [(child, f"{where}[{i}]", depth + 1) for i, child in enumerate(item)]
            stack.extend(reversed(children))
    return found


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
_literals_of: LRU[str, tuple[str, ...]] = LRU(_CHECKED_TEXTS)


def _literal_problems(text: str, document: DocumentNode) -> tuple[str, ...]:
    known = _literals_of.get(text) if text else None
    if known is not None:
        return known
    literals = _Literals()
    visit(document, literals)
    found = tuple(literals.bad)
    if text:
        _literals_of.put(text, found)
    return found


def text_problems(ctx: ExecutionContext) -> list[GraphQLError]:
    """The operation's unstorable text (variables and the document's string literals), as errors."""
    variables = ctx.variables or {}
    bad = [] if _all_storable(variables) else variable_problems(variables, "$")
    if ctx.graphql_document is not None:
        bad += [(where, PROBLEM) for where in _literal_problems(ctx.query or "", ctx.graphql_document)]
    return [GraphQLError(f"{where}: {what}", extensions={"code": "BAD_USER_INPUT"}) for where, what in bad]
