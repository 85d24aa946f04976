"""What a person is told of a pending action when no tab is open: a push payload or a chat message.

Pure: built from a bundle and its task's title. The push payload is the JSON of the API contract
("reach"); its `url` opens the owning session. A single question with 2 or 3 options carries its
options as action buttons, a permission request Allow and Deny; answering from a button goes
through the same mutation as the web app, with the same conflict rules.
"""

from __future__ import annotations

import json
from typing import Any

from backend.domain.lifecycle import Bundle
from backend.domain.permissions import canonical_json, request_of
from backend.domain.states import PendingActionKind

MAX_BODY = 300
MAX_INPUT_SHOWN = 500
ACTION_ALLOW = "allow"
ACTION_DENY = "deny"
OPTION_ACTION = "option:"  # + the option's id


def session_path(task_id: str, session_id: str) -> str:
    return f"/t/{task_id}/s/{session_id}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _questions(bundle: Bundle) -> list[dict[str, Any]]:
    out = []
    for row in bundle.rows:
        raw = row.metadata.get("question")
        if isinstance(raw, dict):
            out.append(raw)
    return out


def _shown_input(tool_input: Any) -> str:
    if isinstance(tool_input, dict) and isinstance(tool_input.get("command"), str):
        return str(tool_input["command"])
    return canonical_json(tool_input)


def describe(bundle: Bundle, task_title: str) -> tuple[str, str, list[dict[str, str]]]:
    """(title, body, action buttons) of a pending action."""
    if bundle.kind == PendingActionKind.PERMISSION:
        request = request_of(bundle.rows[0].metadata) or {}
        tool = str(request.get("tool_name") or "a tool")
        title = f"{task_title}: may the agent use {tool}?"
        body = _clip(_shown_input(request.get("input")), MAX_BODY)
        allow_deny = [{"action": ACTION_ALLOW, "title": "Allow"}, {"action": ACTION_DENY, "title": "Deny"}]
        return title, body, allow_deny
    questions = _questions(bundle)
    title = f"{task_title}: a question for you"
    if len(questions) == 1:
        q = questions[0]
        body = _clip(str(q.get("prompt") or ""), MAX_BODY)
        options = [o for o in q.get("options") or [] if isinstance(o, dict)]
        actions: list[dict[str, str]] = []
        if 2 <= len(options) <= 3 and not q.get("multi_select"):
            actions = [
                {"action": f"{OPTION_ACTION}{o.get('id')}", "title": str(o.get("label"))} for o in options
            ]
        return title, body, actions
    title = f"{task_title}: {len(questions)} questions for you"
    body = _clip(" · ".join(str(q.get("prompt") or "") for q in questions), MAX_BODY)
    return title, body, []


def push_payload(bundle: Bundle, task_title: str) -> dict[str, Any]:
    title, body, actions = describe(bundle, task_title)
    return {
        "type": "pending",
        "kind": bundle.kind.value,
        "pendingId": bundle.pending_id,
        "taskId": bundle.task_id,
        "sessionId": bundle.session_id,
        "url": session_path(bundle.task_id, bundle.session_id),
        "title": title,
        "body": body,
        "actions": actions,
    }


def close_payload(pending_id: str) -> dict[str, Any]:
    return {"type": "close", "pendingId": pending_id}


def chat_message(bundle: Bundle, task_title: str, session_name: str, public_url: str) -> tuple[str, str]:
    """(title, body) of a chat or mail message: the task and session, the question or the tool and
    its input, the options, and the link to the session."""
    link = public_url.rstrip("/") + session_path(bundle.task_id, bundle.session_id)
    lines = [f"Task: {task_title}", f"Session: {session_name}"]
    if bundle.kind == PendingActionKind.PERMISSION:
        request = request_of(bundle.rows[0].metadata) or {}
        tool = str(request.get("tool_name") or "")
        title = f"Turnwise: the agent asks to use {tool}"
        lines += [f"Tool: {tool}", "Input:", _clip(_shown_input(request.get("input")), MAX_INPUT_SHOWN)]
        lines.append("Options: Allow, Deny")
    else:
        questions = _questions(bundle)
        title = "Turnwise: a question for you" if len(questions) == 1 else "Turnwise: questions for you"
        for i, q in enumerate(questions, 1):
            prefix = f"{i}. " if len(questions) > 1 else ""
            lines.append(f"{prefix}{q.get('prompt')}")
            labels = [str(o.get("label")) for o in q.get("options") or [] if isinstance(o, dict)]
            if labels:
                lines.append("   Options: " + ", ".join(labels))
    if bundle.context:
        lines.append(f"Context: {_clip(bundle.context, MAX_BODY)}")
    lines.append(f"Answer: {link}")
    return title, "\n".join(lines)


def encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
