"""The MCP tools' arguments: checked against the tools' declared schemas, refusals naming a field as
the agent spelled it, and the services' refusals put in the tools' words."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from jsonschema import Draft202012Validator, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from mcp import types

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


def _spelled(path: Sequence[str | int]) -> str:
    """A path into the arguments as the agent wrote it: `questions[0].header`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


_WORDS = {
    "string": "a string",
    "number": "a number",
    "integer": "a whole number",
    "boolean": "true or false",
    "object": "an object",
    "array": "a list",
}


def _reason(error: ValidationError, tool: str) -> tuple[str, str]:
    """The field the schema refused, as spelled, and why in a person's words."""
    where = list(error.absolute_path)
    schema: dict[str, Any] = error.schema if isinstance(error.schema, dict) else {}
    keyword, value = error.validator, error.validator_value
    if keyword == "additionalProperties":
        fields = list(schema.get("properties", {}))
        key = next(str(k) for k in error.instance if k not in fields)
        meant = _meant(key, fields)
        what = _spelled(where) or tool
        hint = f"did you mean {meant}?" if meant else f"{what} takes {', '.join(fields)}"
        return _spelled([*where, key]), f"unknown field; {hint}"
    if keyword == "required":
        missing = next(str(k) for k in value if k not in error.instance)
        return _spelled([*where, missing]), "is required"
    field = _spelled(where) or tool
    if keyword in ("type", "exclusiveMinimum", "minimum"):
        # The whole of what the field takes, whichever part the value missed.
        declared = schema.get("type", [])
        kinds = [declared] if isinstance(declared, str) else list(declared)
        # Null stands for a field left out: not worth naming.
        words = " or ".join(_WORDS.get(k, k) for k in kinds if k != "null") or "a value"
        if "exclusiveMinimum" in schema:
            words += f" greater than {schema['exclusiveMinimum']:g}"
        if "minimum" in schema:
            words += f" of at least {schema['minimum']:g}"
        return field, f"must be {words}"
    if keyword in ("minItems", "maxItems"):
        low, high = schema.get("minItems"), schema.get("maxItems")
        if low is not None and high is not None:
            return field, f"must hold {low} to {high} items"
        return field, f"must hold at least {low} items" if high is None else f"must hold at most {high} items"
    if keyword == "maxLength":
        return field, f"must be at most {value} characters"
    if keyword == "minLength":
        return field, f"must be at least {value} characters"
    if keyword == "enum":
        return field, f"must be one of {', '.join(map(str, value))}"
    return field, error.message


def _order(error: ValidationError) -> tuple[int, bool, list[tuple[int, int | str]]]:
    """Shallow before deep (the call's own fields before a question's); an unknown field before a
    missing one (it is likely the missing one misspelt); then by place."""
    path = list(error.absolute_path)
    places = [(0, p) if isinstance(p, int) else (1, p) for p in path]
    return len(path), error.validator != "additionalProperties", places


class ToolArguments:
    """A tool's arguments checked against the schema it declares (built once per tool), so a field
    declared there is checked without code of its own; a refusal names the field as the agent spelled
    it. What a schema cannot say (storable text, the services' own rules) is checked elsewhere."""

    def __init__(self, tools: Iterable[types.Tool]) -> None:
        self._validators: dict[str, Validator] = {}
        for tool in tools:
            cls = validator_for(tool.input_schema, default=Draft202012Validator)
            cls.check_schema(tool.input_schema)
            self._validators[tool.name] = cls(tool.input_schema)

    def check(self, tool: str, arguments: dict[str, Any]) -> None:
        errors = sorted(self._validators[tool].iter_errors(arguments), key=_order)
        if errors:
            raise InvalidInput(*_reason(errors[0], tool))


def tool_execution() -> types.ToolExecution:
    """What a tool that waits for a person declares: it may be called as a task (its client then polls
    for the result instead of holding the call open; `api/mcp_tasks.py`)."""
    return types.ToolExecution(task_support="optional")


def timeout_arg(args: dict[str, Any]) -> float | None:
    """The wait the agent asked for; None when it left the argument out (the service's longest).
    The schema has checked it is a number above 0, which NaN passes (it compares false)."""
    value = args.get("timeout_seconds")
    if value is None:
        return None
    seconds = float(value)
    if seconds != seconds:
        raise InvalidInput("timeout_seconds", "must be a number greater than 0")
    return seconds


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
