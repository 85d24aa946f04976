"""How a clarification question is stored in message metadata, and its tolerant reading.

Metadata keys (one message row per question, rows of a bundle share `pending_id`):
`pending_id`, `question_id`, `question_index`, `question_total`, `context`,
`question` {title, prompt, options: [{id, label, description}], multi_select},
`status` (pending | answered | rejected | cancelled | expired; missing = legacy pending),
`response` {selected_option_ids, custom_text}, `agent_disconnected`, `response_delivery_pending`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backend.domain.states import TRUTHY_FLAG_TEXTS, ClarificationStatus


def flag(value: Any) -> bool:
    """The tolerant flag test in Python; the SQL twin is `backend.db.sqlfuncs.json_flag`."""
    if value is True:
        return True
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int | float):
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        return False
    return text in TRUTHY_FLAG_TEXTS


def status_of(metadata: dict[str, Any]) -> str:
    raw = metadata.get("status")
    if raw in (None, ""):
        return ClarificationStatus.PENDING.value
    return str(raw)


@dataclass(frozen=True, slots=True)
class OptionView:
    id: str
    label: str
    description: str | None


@dataclass(frozen=True, slots=True)
class ResponseView:
    selected_option_ids: list[str]
    custom_text: str | None


@dataclass(frozen=True, slots=True)
class QuestionView:
    pending_id: str
    question_id: str
    title: str | None
    prompt: str
    options: list[OptionView]
    multi_select: bool
    status: str
    agent_disconnected: bool
    response: ResponseView | None
    context: str | None
    # Answered while no agent was connected: the answer waits in the session's inbox.
    answer_queued: bool = False


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def question_view(metadata: dict[str, Any]) -> QuestionView | None:
    """None when the row does not hold a readable question (historical or malformed data)."""
    pending_id = _str(metadata.get("pending_id"))
    question = metadata.get("question")
    if not pending_id or not isinstance(question, dict):
        return None
    options = []
    for opt in question.get("options") or []:
        if isinstance(opt, dict) and _str(opt.get("id")) and _str(opt.get("label")) is not None:
            options.append(OptionView(str(opt["id"]), str(opt["label"]), _str(opt.get("description"))))
    response = metadata.get("response")
    response_view = None
    if isinstance(response, dict):
        selected = [s for s in response.get("selected_option_ids") or [] if isinstance(s, str)]
        response_view = ResponseView(selected, _str(response.get("custom_text")))
    return QuestionView(
        pending_id=pending_id,
        question_id=_str(metadata.get("question_id")) or "",
        title=_str(question.get("title")),
        prompt=_str(question.get("prompt")) or "",
        options=options,
        multi_select=flag(question.get("multi_select")),
        status=status_of(metadata),
        agent_disconnected=flag(metadata.get("agent_disconnected")),
        response=response_view,
        context=_str(metadata.get("context")),
        answer_queued=flag(metadata.get("response_queued")),
    )
