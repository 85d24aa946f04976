"""The audit trail's rules: how a settled pending action reads as a decision (no I/O).

Who decided: the person whose response claimed the rows (their user name); `rule <id>` when a
remembered rule allowed the request without asking; `system` when nobody answered it (expired with
its session, cancelled, superseded by a newer turn). A person's response claimed before who decided
was stored reads as `unknown`.

What was decided, from the rows: a question answered (ANSWERED) or skipped (SKIPPED); a tool call
allowed (ALLOWED) or denied (DENIED); or closed with no answer (EXPIRED, CANCELLED, SUPERSEDED: its
rows still pending, in a turn that is no longer current).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backend.domain.clarification import question_view
from backend.domain.lifecycle import Bundle, BundleRow
from backend.domain.permissions import (
    Decision,
    canonical_json,
    decision_from_response,
    input_key,
    request_of,
)
from backend.domain.states import ClarificationStatus, PendingActionKind

SYSTEM = "system"
UNKNOWN = "unknown"
# How much of a tool's input or an answer a summary shows.
SHOWN = 120


class Outcome(enum.StrEnum):
    ANSWERED = "ANSWERED"
    SKIPPED = "SKIPPED"
    ALLOWED = "ALLOWED"
    DENIED = "DENIED"
    EXPIRED = "EXPIRED"
    CANCELLED = "CANCELLED"
    SUPERSEDED = "SUPERSEDED"


PERSON_OUTCOMES = frozenset({Outcome.ANSWERED, Outcome.SKIPPED, Outcome.ALLOWED, Outcome.DENIED})


@dataclass(frozen=True, slots=True)
class Reading:
    """A settled pending action as a person reads it."""

    outcome: Outcome
    decided_by: str
    summary: str
    edited: bool
    message: str | None
    updated_input: Any
    rule_id: str | None


def outcome_of(kind: PendingActionKind, rows: Sequence[BundleRow]) -> Outcome | None:
    """What the rows say was decided; None while nothing was (every row pending: the caller knows
    whether that is still open or superseded)."""
    statuses = {r.status for r in rows}
    permission = kind == PendingActionKind.PERMISSION
    if ClarificationStatus.ANSWERED.value in statuses:
        return Outcome.ALLOWED if permission else Outcome.ANSWERED
    if ClarificationStatus.REJECTED.value in statuses:
        return Outcome.DENIED if permission else Outcome.SKIPPED
    if ClarificationStatus.CANCELLED.value in statuses:
        return Outcome.CANCELLED
    if ClarificationStatus.EXPIRED.value in statuses:
        return Outcome.EXPIRED
    return None


def read(bundle: Bundle, *, decided_by_name: str | None) -> Reading:
    """`bundle` (settled, or superseded) as a decision; `decided_by_name`: the user name of who
    claimed its rows, when stored."""
    outcome = outcome_of(bundle.kind, bundle.rows) or Outcome.SUPERSEDED
    if bundle.kind == PendingActionKind.PERMISSION:
        return _permission(bundle, outcome, decided_by_name)
    by = (decided_by_name or UNKNOWN) if outcome in PERSON_OUTCOMES else SYSTEM
    what = _answers(bundle.rows) if outcome == Outcome.ANSWERED else _asked(bundle.rows)
    summary = f"{outcome.value.lower()}: {what}" if what else outcome.value.lower()
    return Reading(outcome, by, summary, False, None, None, None)


def _permission(bundle: Bundle, outcome: Outcome, decided_by_name: str | None) -> Reading:
    row = bundle.rows[0]
    request = request_of(row.metadata) or {}
    asked = request.get("input")
    tool = str(request.get("tool_name") or "a tool")
    decision = decision_from_response(row.metadata.get("response"))
    if outcome not in PERSON_OUTCOMES or decision is None:
        by = SYSTEM if outcome not in PERSON_OUTCOMES else (decided_by_name or UNKNOWN)
        summary = f"{outcome.value.lower()}: {tool}: {shown(asked)}"
        return Reading(outcome, by, summary, False, None, None, None)
    by = f"rule {decision.rule_id}" if decision.auto and decision.rule_id else decided_by_name or UNKNOWN
    edited = decision.allowed and input_key(decision.updated_input) != input_key(asked)
    ran = decision.updated_input if decision.allowed else asked
    verb = "allowed" if decision.allowed else "denied"
    summary = f"{verb} {tool} with an edit: {shown(ran)}" if edited else f"{verb} {tool}: {shown(ran)}"
    if decision.auto and decision.rule is not None and decision.rule.pattern is not None:
        summary += f" (rule {decision.rule.pattern}, {decision.rule.scope} scope)"
    message = None if decision.allowed else _denial(decision)
    return Reading(
        outcome, by, summary, edited, message, decision.updated_input if edited else None, decision.rule_id
    )


def _denial(decision: Decision) -> str | None:
    """The reason the agent was given, as it received it."""
    message = decision.for_agent().get("message")
    return message if isinstance(message, str) else None


def shown(tool_input: Any) -> str:
    """A tool's input as a summary shows it: its command, path, URL or pattern when it has one, else
    its JSON; cut at `SHOWN` characters."""
    text: str | None = None
    if isinstance(tool_input, dict):
        for key in ("command", "file_path", "path", "url", "pattern", "query"):
            value = tool_input.get(key)
            if isinstance(value, str) and value.strip():
                text = value
                break
    if text is None:
        try:
            text = canonical_json(tool_input)
        except (TypeError, ValueError):
            text = str(tool_input)
    return _cut(" ".join(text.split()))


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def _answers(rows: Sequence[BundleRow]) -> str:
    """Each question's answer: the labels of its options chosen, and its own text, quoted."""
    parts = []
    for row in rows:
        view = question_view(row.metadata)
        if view is None or view.response is None:
            continue
        labels = {o.id: o.label for o in view.options}
        chosen = [labels.get(o, o) for o in view.response.selected_option_ids]
        if view.response.custom_text and view.response.custom_text.strip():
            chosen.append(f'"{view.response.custom_text.strip()}"')
        parts.append(", ".join(chosen))
    return _cut("; ".join(p for p in parts if p))


def _asked(rows: Sequence[BundleRow]) -> str:
    """What was asked: the questions' prompts."""
    prompts = [v.prompt for v in (question_view(r.metadata) for r in rows) if v is not None and v.prompt]
    return _cut(" / ".join(" ".join(p.split()) for p in prompts))
