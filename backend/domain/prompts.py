"""The text of a resume prompt: what the agent asked, what the person answered, continue."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from backend.domain.lifecycle import Answer
from backend.domain.permissions import Decision, canonical_json, request_of

DECLINED = "The user declined to answer. Please continue without it."


def _answer_text(question: Mapping[str, Any], answer: Answer | None) -> str:
    if answer is None:
        return "(no answer)"
    labels = {
        str(o.get("id")): str(o.get("label"))
        for o in question.get("options") or []
        if isinstance(o, dict) and o.get("id") is not None
    }
    parts = [labels.get(oid, oid) for oid in answer.selected_option_ids]
    if answer.custom_text and answer.custom_text.strip():
        parts.append(answer.custom_text.strip())
    return "; ".join(parts) if parts else "(no answer)"


def permission_prompt(request: Mapping[str, Any], decision: Decision | None) -> str:
    """A late decision on a tool call the agent asked for (it was told "denied for now")."""
    tool = str(request.get("tool_name") or "")
    shown = canonical_json(request.get("input"))
    asked = f"You previously asked to use the tool {tool} with this input:\n{shown}\n"
    if decision is None or not decision.allowed:
        reason = f" Their reason: {decision.message}" if decision is not None and decision.message else ""
        return f"{asked}The user denied it.{reason} Please continue without it."
    edited = decision.updated_input != request.get("input")
    run_with = f"with this input instead:\n{canonical_json(decision.updated_input)}\n" if edited else ""
    return f"{asked}The user allowed it{', ' if edited else '. '}{run_with}Please run it now and continue."


def resume_prompt(
    rows: Sequence[Mapping[str, Any]], answers: Sequence[Answer | Decision], *, rejected: bool = False
) -> str:
    """Rows are the question rows' metadata in question order; answers are keyed by question id (a
    permission request: its one row and its decision)."""
    request = request_of(rows[0]) if rows else None
    if request is not None:
        decisions = [a for a in answers if isinstance(a, Decision)]
        return permission_prompt(request, decisions[0] if decisions else None)
    by_question = {a.question_id: a for a in answers if isinstance(a, Answer)}
    asked: list[tuple[str, Mapping[str, Any], Answer | None]] = []
    for md in rows:
        raw = md.get("question")
        question: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
        prompt = str(question.get("prompt") or "")
        asked.append((prompt, question, by_question.get(str(md.get("question_id") or ""))))
    if rejected:
        if len(asked) == 1:
            return f'You previously asked the user: "{asked[0][0]}"\n{DECLINED}'
        listing = "\n".join(f"{i}. {p}" for i, (p, _, _) in enumerate(asked, 1))
        return f"You previously asked the user:\n{listing}\n{DECLINED}"
    if len(asked) == 1:
        prompt, question, answer = asked[0]
        return (
            f'You previously asked the user: "{prompt}"\n'
            f"The user answered: {_answer_text(question, answer)}\n"
            "Please continue with this information."
        )
    lines = ["You previously asked the user several questions:"]
    for i, (prompt, question, answer) in enumerate(asked, 1):
        lines.append(f'{i}. "{prompt}"\n   Answer: {_answer_text(question, answer)}')
    lines.append("Please continue with this information.")
    return "\n".join(lines)
