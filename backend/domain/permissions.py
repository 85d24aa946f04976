"""Permission requests as pure rules: an agent asks to use a tool, a person allows or denies it.

A permission request is a pending action of kind `permission`: a bundle of one row (message type
`permission_request`) with the same lifecycle as a clarification's questions (`domain.lifecycle`).
The person's decision takes the place of a question's answer: a `Decision` is keyed like an answer
(`question_id`), written as the row's `response`, handed to a live waiter or turned into a resume
prompt. A denial takes the path of a skipped question (rejected: final, never a resume).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from backend.domain.errors import InvalidInput
from backend.domain.names import plain_name
from backend.domain.states import MESSAGE_KIND_PERMISSION

# The one row of a permission bundle answers under this key (what a question's id is to its answer).
PERMISSION_KEY = "permission"
MAX_TOOL_NAME = 200
MAX_TOOL_USE_ID = 200
MAX_INPUT_BYTES = 64_000
MAX_MESSAGE = 4_000
MAX_CONTEXT = 4_000
ALLOW = "allow"
DENY = "deny"


# A NUL in the canonical text: the escape \u0000 itself, not a backslash written before "u0000" (that
# is text a command may well hold, and reads "\\u0000" there).
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _json_value(field_name: str, value: Any) -> Any:
    """A JSON value as it will be stored, or InvalidInput: finite numbers, string keys, bounded size."""
    try:
        text = canonical_json(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(field_name, f"must be a JSON value ({exc})") from None
    if _NUL_ESCAPE.search(text) is not None:
        raise InvalidInput(field_name, "must not contain NUL characters")
    try:
        size = len(text.encode())
    except UnicodeEncodeError:
        raise InvalidInput(field_name, "must be valid Unicode text (no lone surrogates)") from None
    if size > MAX_INPUT_BYTES:
        raise InvalidInput(field_name, f"must be at most {MAX_INPUT_BYTES} bytes of JSON")
    return json.loads(text)


def _an_object(field_name: str, value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object: a tool takes its arguments by name (Claude Code reads an
    `updatedInput` as one, and would fail on a string or a list), or InvalidInput naming the field."""
    if isinstance(value, dict):
        return value
    raise InvalidInput(
        field_name, f"must be a JSON object (a tool's arguments by name), not {_described(value)}"
    )


def _described(value: Any) -> str:
    kind = "number" if isinstance(value, float) else json_type(value)  # NaN too: a number, not JSON
    return kind if kind == "null" else f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


@dataclass(frozen=True, slots=True)
class PermissionSpec:
    """What the agent asks to run: the tool, its input, and the agent's own id of the call."""

    tool_name: str
    input: Any
    tool_use_id: str | None

    message_type = MESSAGE_KIND_PERMISSION

    @property
    def id(self) -> str:
        return PERMISSION_KEY

    @property
    def content(self) -> str:
        return f"Permission to use {self.tool_name}"

    def row_metadata(self) -> dict[str, Any]:
        return {
            "question_id": PERMISSION_KEY,
            PERMISSION_KEY: {
                "tool_name": self.tool_name,
                "input_json": canonical_json(self.input),
                "tool_use_id": self.tool_use_id,
            },
        }


def validate_permission(
    tool_name: Any, tool_input: Any, tool_use_id: Any, context: str | None
) -> PermissionSpec:
    if not isinstance(tool_name, str) or not tool_name.strip():
        raise InvalidInput("toolName", "is required")
    if len(tool_name) > MAX_TOOL_NAME:
        raise InvalidInput("toolName", f"must be at most {MAX_TOOL_NAME} characters")
    plain_name("toolName", tool_name)
    if tool_use_id is not None:
        if not isinstance(tool_use_id, str) or not tool_use_id or len(tool_use_id) > MAX_TOOL_USE_ID:
            raise InvalidInput("toolUseId", f"must be 1-{MAX_TOOL_USE_ID} characters")
        plain_name("toolUseId", tool_use_id)
    if context is not None and len(context) > MAX_CONTEXT:
        raise InvalidInput("context", f"must be at most {MAX_CONTEXT} characters")
    return PermissionSpec(tool_name, _json_value("input", _an_object("input", tool_input)), tool_use_id)


def permission_signature(spec: PermissionSpec, context: str | None) -> str:
    """Identity of "the same request": asking it again while that bundle is active reuses it."""
    canonical = canonical_json(
        {
            "kind": PERMISSION_KEY,
            "context": context,
            "tool_name": spec.tool_name,
            "input": spec.input,
            "tool_use_id": spec.tool_use_id,
        }
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _stored_value(raw: Mapping[str, Any], key: str) -> Any:
    """A tool's input (or an edited one) as stored: its canonical JSON text inside the row's metadata,
    so it reads back exactly on both dialects (PostgreSQL's JSONB would keep 1e16 as
    10000000000000000 and -0.0 as 0, and the agent would be handed those). Rows written before keep
    the value itself."""
    text = raw.get(f"{key}_json")
    if not isinstance(text, str):
        return raw.get(key)
    try:
        return json.loads(text)
    except ValueError:  # not JSON after all: a read shows the text rather than failing
        return text


def request_of(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """The tool request a row's metadata holds, its `input` read back exactly (None: not a permission
    row)."""
    raw = metadata.get(PERMISSION_KEY)
    if not isinstance(raw, dict):
        return None
    if "input_json" not in raw:
        return raw
    request = {key: value for key, value in raw.items() if key != "input_json"}
    request["input"] = _stored_value(raw, "input")
    return request


# A request stored before a tool's input had to be an object reads with its input wrapped under this
# key: the API always shows an object (the field is non-null, and JSON null cannot be sent there), and
# a person editing it starts from an object, which is what an ALLOW of it needs (`validate_decision`).
NOT_AN_OBJECT_KEY = "value"


def shown_input(value: Any) -> dict[str, Any]:
    """A stored request's input as the API shows it: itself when an object, else wrapped."""
    return value if isinstance(value, dict) else {NOT_AN_OBJECT_KEY: value}


# --- deciding -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RuleRef:
    """The rule that decided a request, as it was when it decided: stored with the decision, so the
    history still says which rule allowed or denied what, and where it applied, after the rule is
    revoked or expired."""

    id: str
    tool_name: str
    any_input: bool  # True: any input of the tool (a bare tool name)
    # Its pattern, behavior ("allow" / "deny"), scope and scope id; None for a decision stored before
    # rules had them (a session's ALLOW).
    pattern: str | None = None
    behavior: str = ALLOW
    scope: str = "session"
    scope_id: str | None = None

    def as_stored(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tool_name": self.tool_name,
            "any_input": self.any_input,
            "pattern": self.pattern,
            "behavior": self.behavior,
            "scope": self.scope,
            "scope_id": self.scope_id,
        }

    @classmethod
    def from_stored(cls, raw: Any) -> RuleRef | None:
        if not isinstance(raw, dict):
            return None
        rule_id, tool_name, any_input = raw.get("id"), raw.get("tool_name"), raw.get("any_input")
        if not (isinstance(rule_id, str) and isinstance(tool_name, str) and isinstance(any_input, bool)):
            return None
        pattern, behavior, scope, scope_id = (
            raw.get(k) for k in ("pattern", "behavior", "scope", "scope_id")
        )
        return cls(
            rule_id,
            tool_name,
            any_input,
            pattern if isinstance(pattern, str) else None,
            behavior if isinstance(behavior, str) else ALLOW,
            scope if isinstance(scope, str) else "session",
            scope_id if isinstance(scope_id, str) else None,
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """A person's (or a remembered rule's) decision on one permission request."""

    behavior: str  # ALLOW | DENY
    updated_input: Any = None  # ALLOW: the input the tool runs with
    message: str | None = None  # DENY: why, for the agent
    remember: bool = False  # ALLOW: also a rule for this session
    remember_any_input: bool = False  # the rule matches any input of the tool, not only this one
    auto: bool = False  # decided by a rule, nobody asked
    rule: RuleRef | None = None  # with auto: the rule that decided it, as it was then

    @property
    def rule_id(self) -> str | None:
        return None if self.rule is None else self.rule.id

    @property
    def question_id(self) -> str:
        return PERMISSION_KEY

    @property
    def allowed(self) -> bool:
        return self.behavior == ALLOW

    def as_response(self) -> dict[str, Any]:
        return {
            "behavior": self.behavior,
            "updated_input_json": canonical_json(self.updated_input),
            "message": self.message,
            "remember": self.remember,
            "remember_any_input": self.remember_any_input,
            "auto": self.auto,
            "rule_id": self.rule_id,
            "rule": None if self.rule is None else self.rule.as_stored(),
        }

    def for_agent(self) -> dict[str, Any]:
        """Exactly what Claude Code's permission prompt tool returns (`--permission-prompt-tool`)."""
        if self.allowed:
            return {"behavior": ALLOW, "updatedInput": self.updated_input}
        return {"behavior": DENY, "message": self.message or "The person denied this tool call."}


def decision_from_response(raw: Any) -> Decision | None:
    if not isinstance(raw, dict) or raw.get("behavior") not in (ALLOW, DENY):
        return None
    message = raw.get("message")
    return Decision(
        behavior=str(raw["behavior"]),
        updated_input=_stored_value(raw, "updated_input"),
        message=message if isinstance(message, str) else None,
        remember=raw.get("remember") is True,
        remember_any_input=raw.get("remember_any_input") is True,
        auto=raw.get("auto") is True,
        rule=RuleRef.from_stored(raw.get("rule")),
    )


@dataclass(frozen=True, slots=True)
class Sent:
    """What a person sent to decide a permission request (respondToPermission's arguments)."""

    behavior: str  # ALLOW | DENY, either case
    updated_input: Any = None
    has_updated_input: bool = False  # an edited input was sent (it may be JSON null)
    message: str | None = None
    remember: bool = False
    remember_any_input: bool = False


def validate_decision(request: Mapping[str, Any], sent: Sent, *, pattern_rule: bool = False) -> Decision:
    """The decision on `request` (a row's tool request), or InvalidInput naming the field.
    `pattern_rule`: a remembered ALLOW becomes a rule of a pattern (checked against the input the
    person allowed where it is written), not one of this exact input."""
    behavior = sent.behavior.lower()
    message = sent.message
    if behavior not in (ALLOW, DENY):
        raise InvalidInput("behavior", "must be ALLOW or DENY")
    if behavior == DENY:
        if sent.has_updated_input:
            raise InvalidInput("updatedInput", "only an ALLOW carries an input")
        if sent.remember or sent.remember_any_input:
            raise InvalidInput("remember", "only an ALLOW is remembered")
        if message is not None and len(message) > MAX_MESSAGE:
            raise InvalidInput("message", f"must be at most {MAX_MESSAGE} characters")
        text = message.strip() if message else None
        return Decision(DENY, message=text or None)
    if message is not None:
        raise InvalidInput("message", "only a DENY carries a message")
    if sent.remember_any_input and not sent.remember:
        raise InvalidInput("rememberAnyInput", "needs remember: true")
    original = request.get("input")
    if sent.has_updated_input:
        edited = _json_value("updatedInput", _an_object("updatedInput", sent.updated_input))
        exact_rule = sent.remember and not sent.remember_any_input and not pattern_rule
        if exact_rule and input_key(edited) != input_key(original):
            # A rule for one exact input would allow what the agent asked for, not what the person
            # approved: "always allow X" on a request for Y says neither.
            raise InvalidInput(
                "remember",
                "cannot go with an updatedInput that differs from the tool's input: a rule for this "
                "exact input would allow what the agent asked for, not the edit; allow the edit without "
                "remember, or remember any input of the tool (rememberAnyInput)",
            )
    elif isinstance(original, dict):
        edited = original
    else:
        # Stored by an older server: allowed as it is, the agent would be handed a non-object to run.
        raise InvalidInput(
            "updatedInput",
            f"is needed to allow this request: its input is {_described(original)}, not a JSON "
            "object, so the tool cannot run with it as asked; send the object to run it with, or deny",
        )
    return Decision(
        ALLOW, updated_input=edited, remember=sent.remember, remember_any_input=sent.remember_any_input
    )


# --- remembered rules ---------------------------------------------------------------------------


def comparable(value: Any) -> Any:
    """`value` as a rule compares it: each number by its value, whatever form it was written in. A
    float that is a whole number is the integer it is (PostgreSQL's JSONB keeps 1e16 as
    10000000000000000, 1.7e18 as 1700000000000000000 and -0.0 as 0.0, which is what an input read back
    from it holds), read from its shortest decimal form, as JSON wrote it."""
    if isinstance(value, float):
        if math.isfinite(value):
            decimal = Decimal(repr(value))
            if decimal == decimal.to_integral_value():
                return int(decimal)
        return value
    if isinstance(value, dict):
        return {key: comparable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [comparable(item) for item in value]
    return value


def input_key(value: Any) -> str:
    """What a rule for one exact input compares: the input's canonical JSON, its numbers compared by
    value (`comparable`), hashed."""
    return hashlib.sha256(canonical_json(comparable(value)).encode()).hexdigest()


ANY_INPUT = ""  # the input key of a rule that matches any input of its tool


def rule_keys(tool_input: Any) -> tuple[str, str]:
    """The input keys a request with this input matches: its own, and any input."""
    return (input_key(tool_input), ANY_INPUT)
