"""The MCP tools' arguments: checks that name a field as the agent spelled it, and the services'
refusals put in the tools' words."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from backend.api.hygiene import storable
from backend.domain.errors import InvalidInput


def storable_paths(value: Any, path: str) -> list[str]:
    """Where the arguments hold text that cannot be stored (NUL, a lone surrogate), as spelled."""
    if isinstance(value, str):
        return [] if storable(value) else [path]
    if isinstance(value, dict):
        out: list[str] = []
        for key, item in value.items():
            out += (
                [path]
                if isinstance(key, str) and not storable(key)
                else storable_paths(item, f"{path}.{key}" if path else str(key))
            )
        return out
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in storable_paths(item, f"{path}[{i}]")]
    return []


def text_arg(args: dict[str, Any], key: str, where: str, *, required: bool) -> str | None:
    value = args.get(key)
    if value is None:
        if required:
            raise InvalidInput(where, "is required")
        return None
    if not isinstance(value, str):
        raise InvalidInput(where, "must be a string")
    return value


# The GraphQL API's names of the tools' fields (what the services name in their errors), and their
# names here.
TOOL_WORDS = {
    "title": "header",
    "prompt": "question",
    "timeoutSeconds": "timeout_seconds",
    "toolName": "tool_name",
    "toolUseId": "tool_use_id",
    "sessionId": "session_id",
    "pendingId": "pending_id",
}


def _folded(name: str) -> str:
    return name.replace("_", "").replace("-", "").casefold()


def _meant(key: str, fields: Sequence[str]) -> str | None:
    """The field an unknown key most likely meant: the tool's name for a name of the GraphQL API,
    the same name in another case style (`timeoutSeconds`), else a close spelling."""
    alias = TOOL_WORDS.get(key)
    if alias in fields:
        return alias
    folded = {_folded(f): f for f in fields}
    if _folded(key) in folded:
        return folded[_folded(key)]
    close = difflib.get_close_matches(_folded(key), list(folded), n=1)
    return folded[close[0]] if close else None


def known_fields(value: dict[str, Any], fields: Sequence[str], where: str, what: str) -> None:
    """Refuse a field the tool does not take (a misspelt one would be ignored silently otherwise),
    named as the agent spelled it, with the field it most likely meant."""
    for key in value:
        if key not in fields:
            path = f"{where}.{key}" if where else str(key)
            meant = _meant(str(key), fields)
            hint = f"did you mean {meant}?" if meant else f"{what} takes {', '.join(fields)}"
            raise InvalidInput(path, f"unknown field; {hint}")


def timeout_arg(args: dict[str, Any]) -> float | None:
    """The wait the agent asked for; None when it left the argument out (the service's longest)."""
    if "timeout_seconds" not in args:
        return None
    value = args["timeout_seconds"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidInput(
            "timeout_seconds", "must be a number greater than 0 (leave it out to wait the longest)"
        )
    return float(value)


_NAME = re.compile(r"^[^.\[]+")


def _tool_field(field: str) -> str:
    """A service's field path (`questions[0].title`) in the tool's words (`questions[0].header`)."""
    return ".".join(
        _NAME.sub(lambda m: TOOL_WORDS.get(m.group(), m.group()), part) for part in field.split(".")
    )


@contextmanager
def in_tool_words() -> Iterator[None]:
    """Around a service call: its refusals name the fields as the tool does. The tool's own checks
    name them as the agent spelled them and need no translation."""
    try:
        yield
    except InvalidInput as exc:
        reason = str(exc).removeprefix(f"{exc.field}: ")
        raise InvalidInput(_tool_field(exc.field), reason) from None
