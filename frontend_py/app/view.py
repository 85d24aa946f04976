"""HTML for the web app's parts, built from kit state; pure functions, no browser imports."""

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

QUESTION_ICON = (
    '<svg viewBox="0 0 20 20" aria-hidden="true"><circle cx="10" cy="10" r="9" fill="currentColor"/>'
    '<path d="M7.6 7.4a2.5 2.5 0 1 1 3.4 2.3c-.6.3-1 .8-1 1.5v.5" stroke="#fff" stroke-width="1.7" '
    'fill="none" stroke-linecap="round"/><circle cx="10" cy="14.6" r="1.05" fill="#fff"/></svg>'
)
PERMISSION_ICON = (
    '<svg viewBox="0 0 20 20" aria-hidden="true"><path d="M10 1.5 2.5 4.5v5c0 4.3 3.1 7.7 7.5 9 '
    '4.4-1.3 7.5-4.7 7.5-9v-5z" fill="currentColor"/><path d="M10 6v4.6" stroke="#fff" '
    'stroke-width="1.8" stroke-linecap="round"/><circle cx="10" cy="13.6" r="1.05" fill="#fff"/></svg>'
)

STATE_LABELS = {
    "CREATED": "created",
    "STARTING": "starting",
    "RUNNING": "running",
    "WAITING_FOR_INPUT": "waiting for input",
    "COMPLETED": "completed",
    "FAILED": "failed",
    "CANCELLED": "cancelled",
}

STATUS_LABELS = {
    "PENDING": "waiting for an answer",
    "ANSWERED": "answered",
    "REJECTED": "skipped",
    "CANCELLED": "cancelled",
    "EXPIRED": "expired",
}


def esc(value: Any) -> str:
    """Text and attribute escaping (MicroPython has no ``html`` module)."""
    text = "" if value is None else str(value)
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&#39;")
    )


def clock(timestamp: Any) -> str:
    """``HH:MM`` of an ISO timestamp (UTC, as the API sends it); empty when it is not one."""
    text = str(timestamp or "")
    return text[11:16] if len(text) >= 16 and text[10] in "T " else ""


# --- task list ---------------------------------------------------------------------------------


def task_row(task_id: str, title: Any, step: Any, action: Any, selected: bool) -> str:
    """One task row; the question icon only while the task has a pending action."""
    icon = ""
    if action == "CLARIFICATION":
        icon = (
            '<span class="pending-icon question" data-testid="task-question-icon" '
            'title="A question is waiting for you">' + QUESTION_ICON + "</span>"
        )
    elif action == "PERMISSION":
        icon = (
            '<span class="pending-icon permission" data-testid="task-question-icon" '
            'title="A permission request is waiting for you">' + PERMISSION_ICON + "</span>"
        )
    safe_id = esc(task_id)
    return "".join(
        [
            '<li><button type="button" class="task-row',
            " pending" if action else "",
            '" data-action="task" data-task-id="',
            safe_id,
            '" data-testid="task-row-',
            safe_id,
            '"',
            ' aria-current="page"' if selected else "",
            '><span class="task-text"><span class="task-title">',
            esc(title),
            '</span><span class="task-step">',
            esc(step),
            "</span></span>",
            icon,
            "</button></li>",
        ]
    )


def task_list(rows: list[str]) -> str:
    if not rows:
        return '<p class="empty">No tasks yet.</p>'
    return '<ul class="task-list">' + "".join(rows) + "</ul>"


# --- session tabs ------------------------------------------------------------------------------


def session_tabs(task_id: str, sessions: list[dict[str, Any]], selected: str | None) -> str:
    if not sessions:
        return '<p class="empty">This task has no sessions.</p>'
    parts = []
    for number, session in enumerate(sessions, 1):
        session_id = session["id"]
        label = "Primary" if session.get("isPrimary") else "Session " + str(number)
        is_selected = session_id == selected
        dot = ""
        if session.get("pendingAction"):
            dot = '<span class="tab-dot" title="Needs your input"></span>'
        parts.append(
            '<button type="button" role="tab" class="tab" data-action="tab" data-task-id="'
            + esc(task_id)
            + '" data-session-id="'
            + esc(session_id)
            + '" data-testid="session-tab-'
            + esc(session_id)
            + '" aria-selected="'
            + ("true" if is_selected else "false")
            + '"><span class="tab-label">'
            + esc(label)
            + "</span>"
            + dot
            + '<span class="tab-state">'
            + esc(STATE_LABELS.get(session.get("state") or "", ""))
            + "</span></button>"
        )
    return '<div class="tabs" role="tablist" aria-label="Sessions">' + "".join(parts) + "</div>"


# --- transcript --------------------------------------------------------------------------------


def _answer_text(question: dict[str, Any]) -> str:
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
        answer = _answer_text(question)
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
    turns: list[dict[str, Any]] | None, messages: list[dict[str, Any]], active_ids: list[str]
) -> str:
    """Messages grouped under their turns (ascending), each turn opened by a boundary line."""
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
    for message in messages:
        if (message.get("turnId") or "") not in known:
            parts.append(_message(message, active_ids))
    return '<ol class="transcript-list">' + "".join(parts) + "</ol>"


# --- clarification card ------------------------------------------------------------------------


CHEVRON_ICON = (
    '<svg viewBox="0 0 20 20" aria-hidden="true"><path d="M5 8l5 5 5-5" stroke="currentColor" '
    'stroke-width="2" fill="none" stroke-linecap="round" stroke-linejoin="round"/></svg>'
)


def _option(question_id: str, option: dict[str, Any], multi: bool, pressed: bool, tabbable: bool) -> str:
    """One option: a toggle button in a "choose any" question, a radio in a "choose one" group."""
    option_id = option.get("id") or ""
    description = option.get("description")
    if multi:
        state = ' aria-pressed="' + ("true" if pressed else "false") + '"'
    else:
        # A radio group is one tab stop: the chosen radio (or the first) takes focus, arrows move.
        state = (
            ' role="radio" aria-checked="'
            + ("true" if pressed else "false")
            + '" tabindex="'
            + ("0" if tabbable else "-1")
            + '"'
        )
    return (
        '<button type="button" class="option'
        + (" chosen" if pressed else "")
        + (" multi" if multi else "")
        + '" data-action="option" data-question-id="'
        + esc(question_id)
        + '" data-option-id="'
        + esc(option_id)
        + '" data-testid="clarification-option-'
        + esc(option_id)
        + '"'
        + state
        + '><span class="mark" aria-hidden="true"></span><span class="option-text">'
        + '<span class="option-label">'
        + esc(option.get("label"))
        + "</span>"
        + ('<span class="option-desc">' + esc(description) + "</span>" if description else "")
        + "</span></button>"
    )


def card(
    pending_id: str,
    questions: list[dict[str, Any]],
    context: str | None,
    selections: dict[str, list[str]],
    custom: dict[str, str],
    busy: bool,
    error: str | None,
) -> str:
    """The question card for one active bundle; ``selections``/``custom`` are the user's draft."""
    detached = False
    for question in questions:
        if question.get("agentDisconnected"):
            detached = True
    parts = [
        '<section class="card" role="dialog" aria-modal="false" aria-labelledby="card-title" '
        'tabindex="-1" data-testid="clarification-card" data-pending-id="' + esc(pending_id) + '">',
        '<header class="card-head"><span class="card-badge">' + QUESTION_ICON + "</span>"
        '<h2 id="card-title">The agent needs your input</h2>'
        # Hiding keeps the question waiting (Skip is the one that rejects it); Escape does the same.
        '<button type="button" class="card-hide" data-action="hide-card" data-testid="clarification-hide" '
        'aria-keyshortcuts="Escape" title="Hide the question (Esc); it keeps waiting">'
        + CHEVRON_ICON
        + '<span>Hide</span><kbd class="card-key" aria-hidden="true">Esc</kbd></button></header>',
    ]
    # The body scrolls; the header and the Skip/Submit footer stay in view however long the bundle.
    parts.append('<div class="card-body">')
    if context:
        parts.append('<p class="card-context">' + esc(context) + "</p>")
    if detached:
        parts.append(
            '<p class="card-detached" data-testid="clarification-detached">The agent stopped waiting '
            "for this answer. It is resumed with your answer when you submit it, at once or "
            "when it comes back.</p>"
        )
    for number, question in enumerate(questions, 1):
        question_id = question.get("questionId") or ""
        chosen = selections.get(question_id) or []
        multi = bool(question.get("multiSelect"))
        # Ids by position: question ids are the agent's strings, not safe inside id references.
        text_id = "card-q" + str(number) + "-text"
        parts.append('<fieldset class="q" data-question-id="' + esc(question_id) + '">')
        title = question.get("title")
        # The title and "Choose one/any" share a line above the prompt (a card is short of room).
        legend = '<legend class="q-legend"><span class="q-head">'
        if title:
            legend += '<span class="q-title">' + esc(title) + "</span>"
        legend += '<span class="q-mode">' + ("Choose any" if multi else "Choose one") + "</span></span>"
        legend += '<span class="q-text" id="' + text_id + '">' + esc(question.get("prompt"))
        legend += "</span></legend>"
        parts.append(legend)
        options = question.get("options") or []
        if multi:
            parts.append('<div class="options">')
        else:
            parts.append('<div class="options" role="radiogroup" aria-labelledby="' + text_id + '">')
        stop = ""
        for option in options:
            if (option.get("id") or "") in chosen:
                stop = option.get("id") or ""
        if not stop and options:
            stop = options[0].get("id") or ""
        for option in options:
            option_id = option.get("id") or ""
            parts.append(_option(question_id, option, multi, option_id in chosen, option_id == stop))
        parts.append("</div>")
        # Each box is named after its own question, so two boxes never share one label.
        own_id = "card-q" + str(number) + "-own"
        parts.append(
            '<span class="visually-hidden" id="'
            + own_id
            + '">Your own answer to</span><textarea class="custom" rows="2" data-question-id="'
            + esc(question_id)
            + '" data-testid="clarification-custom-text" placeholder="Or write your own answer" '
            + 'aria-labelledby="'
            + own_id
            + " "
            + text_id
            + '">'
            + esc(custom.get(question_id) or "")
            + "</textarea></fieldset>"
        )
    if error:
        parts.append(
            '<p class="card-error" role="alert" data-testid="clarification-error">' + esc(error) + "</p>"
        )
    parts.append("</div>")
    disabled = " disabled" if busy else ""
    parts.append(
        '<footer class="card-actions"><span class="card-more" aria-hidden="true">'
        + CHEVRON_ICON
        + "More below</span>"
        '<button type="button" class="btn ghost" data-action="skip" '
        'data-testid="clarification-skip"' + disabled + ">Skip</button>"
        '<button type="button" class="btn primary" data-action="submit" data-testid="clarification-submit"'
        + disabled
        + ">"
        + ("Sending…" if busy else "Submit")
        + "</button></footer></section>"
    )
    return "".join(parts)


def queued_notice() -> str:
    """After answering a question whose agent is not connected: the answer waits for it."""
    return (
        '<div class="notice" role="status" data-testid="clarification-queued"><p>Your answer is saved '
        "and waiting for the agent: it gets it once, as soon as it comes back.</p>"
        '<button type="button" class="btn ghost small" data-action="dismiss-notice">Dismiss</button></div>'
    )


def conflict_notice(reason: str | None, bundle: dict[str, Any] | None) -> str:
    """Shown after a stale card is closed: why, and the answer that won when there is one."""
    answers = []
    for question in (bundle or {}).get("questions") or []:
        text = _answer_text(question)
        status = question.get("status")
        if text:
            answers.append(
                "<li><span class='q-text'>" + esc(question.get("prompt")) + "</span> " + esc(text) + "</li>"
            )
        elif status == "REJECTED":
            answers.append("<li><span class='q-text'>" + esc(question.get("prompt")) + "</span> skipped</li>")
    if reason == "SUPERSEDED":
        headline = "This question is no longer current: the agent has moved on."
    elif answers:
        headline = "Someone else answered this question first."
    else:
        headline = "This question was already answered or closed."
    return (
        '<div class="notice" role="status" data-testid="clarification-conflict"><p>'
        + esc(headline)
        + "</p>"
        + (
            '<ul class="winner" data-testid="clarification-winner">' + "".join(answers) + "</ul>"
            if answers
            else ""
        )
        + '<button type="button" class="btn ghost small" data-action="dismiss-notice">Dismiss</button></div>'
    )


def reopen_pill() -> str:
    return (
        '<button type="button" class="reopen" data-action="show-card" data-testid="clarification-reopen">'
        + QUESTION_ICON
        + "<span>A question is waiting · Show</span></button>"
    )
