"""A session's conversation as HTML: its turns in order, each with its messages and questions."""

from frontend_py.app.views.parts import clock, esc

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

STATUS_LABELS = {
    "PENDING": "waiting for an answer",
    "ANSWERED": "answered",
    "REJECTED": "skipped",
    "CANCELLED": "cancelled",
    "EXPIRED": "expired",
}


def empty(text: str) -> str:
    """What the conversation's place says when there is no conversation to show."""
    return '<p class="empty">' + esc(text) + "</p>"


def answer_text(question: dict[str, Any]) -> str:
    response = question.get("response") or {}
    labels = []
    chosen = response.get("selectedOptionIds") or []
    for option in question.get("options") or []:
        if option.get("id") in chosen:
            labels.append(option.get("label") or option.get("id"))
    custom = response.get("customText")
    if custom:
        labels.append("“" + custom + "”")
    return ", ".join(labels)


def _message(message: dict[str, Any], active_ids: list[str]) -> str:
    author = message.get("author") or "agent"
    kind = message.get("kind") or "message"
    question = message.get("clarification")
    time = clock(message.get("createdAt"))
    if isinstance(question, dict):
        status = question.get("status") or "PENDING"
        live = question.get("pendingId") in active_ids
        if status == "PENDING" and not live:
            label = "no longer current"
        else:
            label = STATUS_LABELS.get(status, status.lower())
        if question.get("answerQueued"):
            label = "answered · waiting for the agent"
        answer = answer_text(question)
        body = (
            '<div class="q-prompt">'
            + esc(question.get("prompt") or message.get("content"))
            + "</div>"
            + ('<div class="q-answer">' + esc(answer) + "</div>" if answer else "")
        )
        return (
            '<li class="msg question' + (" live" if live else "") + '">'
            '<div class="msg-meta"><span class="who">Agent asked</span><span class="chip">'
            + esc(label)
            + '</span><span class="time">'
            + esc(time)
            + "</span></div>"
            + body
            + "</li>"
        )
    css = "msg " + esc(author) + (" " + esc(kind) if kind != "message" else "")
    who = {"agent": "Agent", "user": "You", "system": "System"}.get(author, author)
    if kind == "permission_request":
        who = "Agent asks permission"
    return (
        '<li class="'
        + css
        + '"><div class="msg-meta"><span class="who">'
        + esc(who)
        + '</span><span class="time">'
        + esc(time)
        + '</span></div><div class="msg-body">'
        + esc(message.get("content"))
        + "</div></li>"
    )


def transcript(
    turns: list[dict[str, Any]] | None,
    messages: list[dict[str, Any]],
    active_ids: list[str],
    after: dict[str, list[str]] | None = None,
    tail: list[str] | None = None,
) -> str:
    """Messages grouped under their turns (ascending), each turn opened by a boundary line; ``after``
    holds lines to show after a message (by its id: the decision of what it asked), ``tail`` lines
    for the end."""
    after = after or {}
    if turns is None:
        return '<p class="empty">Loading the conversation…</p>'
    if not turns and not messages:
        return '<p class="empty">Nothing has happened in this session yet.</p>'
    by_turn: dict[str, list[dict[str, Any]]] = {}
    for message in messages:
        by_turn.setdefault(message.get("turnId") or "", []).append(message)
    parts = []
    number = 0
    known = set()
    for turn in turns:
        known.add(turn["id"])
        lifecycle = bool(turn.get("lifecycleOnly"))
        if not lifecycle:
            number += 1
        title = "Agent start-up" if lifecycle else "Turn " + str(number)
        state = "in progress" if turn.get("completedAt") is None else "done " + clock(turn.get("completedAt"))
        parts.append(
            '<li class="turn-boundary'
            + (" lifecycle" if lifecycle else "")
            + '" data-turn-id="'
            + esc(turn["id"])
            + '"><span>'
            + esc(title)
            + " · "
            + esc(clock(turn.get("startedAt")))
            + " · "
            + esc(state)
            + "</span></li>"
        )
        for message in by_turn.get(turn["id"], []):
            parts.append(_message(message, active_ids))
            parts += after.get(str(message.get("id")), [])
    for message in messages:
        if (message.get("turnId") or "") not in known:
            parts.append(_message(message, active_ids))
            parts += after.get(str(message.get("id")), [])
    return '<ol class="transcript-list">' + "".join(parts + (tail or [])) + "</ol>"
