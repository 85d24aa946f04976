"""HTML for the web app's parts, built from kit state; pure functions, no browser imports."""

import json

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


SESSIONS_LOADING = '<p class="empty">Loading sessions…</p>'

ALERT_ICON = (
    '<svg viewBox="0 0 20 20" aria-hidden="true"><circle cx="10" cy="10" r="9" fill="currentColor"/>'
    '<path d="M10 5.6v5.2" stroke="#fff" stroke-width="1.9" stroke-linecap="round"/>'
    '<circle cx="10" cy="14.2" r="1.1" fill="#fff"/></svg>'
)

# What failed to load -> (test id prefix, the headline); the action is ``retry-<what>``.
LOAD_FAILURES = {
    "sessions": ("task-sessions", "Couldn't load this task's sessions."),
    "history": ("session-history", "Couldn't load this session."),
}


def load_failed(what: str, reason: str, retrying: bool) -> str:
    """A load that failed, in place of what it would have shown: why, and Retry.

    An alert, so a screen reader says it when it appears. While the retry is on its way the button
    stays focusable (``aria-disabled``, not ``disabled``), so the keyboard's place is kept.
    """
    prefix, headline = LOAD_FAILURES[what]
    return (
        '<div class="load-failed" role="alert" data-testid="' + prefix + '-error">'
        '<span class="load-failed-icon">' + ALERT_ICON + "</span>"
        '<div class="load-failed-text"><p class="load-failed-title">' + esc(headline) + "</p>"
        '<p class="load-failed-reason">' + esc(reason) + "</p></div>"
        '<button type="button" class="btn ghost small" data-action="retry-' + what + '" '
        'data-testid="'
        + prefix
        + '-retry"'
        + (' aria-disabled="true"' if retrying else "")
        + ">"
        + ("Retrying…" if retrying else "Retry")
        + "</button></div>"
    )


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


def _card_open(prefix: str, pending_id: str, icon: str, title: str, hide_title: str) -> str:
    """A card's frame up to its scrolling body: the header with its badge, title and Hide control.

    Both kinds share it (``prefix`` names the test ids: ``<prefix>-card``, ``<prefix>-hide``); the
    body scrolls, the header and the footer (``_card_close``) stay in view however long the body.
    """
    return (
        '<section class="card ' + prefix + '" role="dialog" aria-modal="false" aria-labelledby="card-title" '
        'tabindex="-1" data-testid="' + prefix + '-card" data-pending-id="' + esc(pending_id) + '">'
        '<header class="card-head"><span class="card-badge">' + icon + "</span>"
        '<h2 id="card-title">' + esc(title) + "</h2>"
        '<button type="button" class="card-hide" data-action="hide-card" data-testid="' + prefix + '-hide" '
        'aria-keyshortcuts="Escape" title="'
        + esc(hide_title)
        + '">'
        + CHEVRON_ICON
        + '<span>Hide</span><kbd class="card-key" aria-hidden="true">Esc</kbd></button></header>'
        '<div class="card-body">'
    )


def _card_close(buttons: str) -> str:
    """Ends the body and adds the footer: the "More below" cue and the card's ``buttons``."""
    return (
        '</div><footer class="card-actions"><span class="card-more" aria-hidden="true">'
        + CHEVRON_ICON
        + "More below</span>"
        + buttons
        + "</footer></section>"
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
    # Hiding keeps the question waiting (Skip is the one that rejects it); Escape does the same.
    parts = [
        _card_open(
            "clarification",
            pending_id,
            QUESTION_ICON,
            "The agent needs your input",
            "Hide the question (Esc); it keeps waiting",
        )
    ]
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
    disabled = " disabled" if busy else ""
    parts.append(
        _card_close(
            '<button type="button" class="btn ghost" data-action="skip" '
            'data-testid="clarification-skip"' + disabled + ">Skip</button>"
            '<button type="button" class="btn primary" data-action="submit" '
            'data-testid="clarification-submit"'
            + disabled
            + ">"
            + ("Sending…" if busy else "Submit")
            + "</button>"
        )
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


def reopen_pill(prefix: str = "clarification") -> str:
    """The pill that brings a hidden card back (``<prefix>-reopen``)."""
    if prefix == "permission":
        icon, text = PERMISSION_ICON, "A permission request is waiting · Show"
    else:
        icon, text = QUESTION_ICON, "A question is waiting · Show"
    return (
        '<button type="button" class="reopen '
        + prefix
        + '" data-action="show-card" data-testid="'
        + prefix
        + '-reopen">'
        + icon
        + "<span>"
        + text
        + "</span></button>"
    )


# --- permission card ---------------------------------------------------------------------------


def json_type(value: Any) -> str:
    """The JSON type of a decoded value, as the server compares an edited input with the asked one."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def pretty_json(value: Any, indent: str = "") -> str:
    """JSON with two-space indents and sorted keys (MicroPython's ``json.dumps`` has neither, and its
    dicts keep no order, so sorting is what makes the text the same wherever it is built)."""
    inner = indent + "  "
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = []
        for key in sorted(value):
            items.append(inner + json.dumps(str(key)) + ": " + pretty_json(value[key], inner))
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list):
        if not value:
            return "[]"
        return "[\n" + ",\n".join([inner + pretty_json(item, inner) for item in value]) + "\n" + indent + "]"
    return json.dumps(value)


def check_edited(text: str, original: Any) -> tuple[Any, str | None]:
    """The edited input decoded, or why it cannot be sent: it must be JSON of the asked input's type.

    Strict syntax is checked by the page (the browser's ``JSON.parse``) before this is called.
    """
    if not text.strip():
        return (None, "The input is empty. Write the tool's input as JSON.")
    try:
        value = json.loads(text)
    except ValueError:
        return (None, "That is not valid JSON. Fix it, then allow again.")
    wanted = json_type(original)
    if json_type(value) != wanted:
        return (None, "The input must be a JSON " + wanted + ", like the one the agent sent.")
    return (value, None)


def _text_field(value: Any, name: str) -> str | None:
    field = value.get(name) if isinstance(value, dict) else None
    return field if isinstance(field, str) else None


def _rest(value: dict[str, Any], shown: tuple[str, ...]) -> dict[str, Any]:
    rest = {}
    for key in value:
        if key not in shown:
            rest[key] = value[key]
    return rest


def _lines(text: str) -> list[str]:
    return text.split("\n")


def diff_rows(old: str, new: str) -> list[tuple[str, str]]:
    """A line diff of one replacement: the lines both share at the start and end as context (" "),
    the old middle removed ("-"), the new middle added ("+")."""
    before, after = _lines(old), _lines(new)
    start = 0
    while start < len(before) and start < len(after) and before[start] == after[start]:
        start += 1
    end = 0
    while (
        end < len(before) - start
        and end < len(after) - start
        and before[len(before) - 1 - end] == after[len(after) - 1 - end]
    ):
        end += 1
    rows = [(" ", line) for line in before[:start]]
    rows += [("-", line) for line in before[start : len(before) - end]]
    rows += [("+", line) for line in after[start : len(after) - end]]
    rows += [(" ", line) for line in before[len(before) - end :]]
    return rows


def tool_input_html(value: Any) -> str:
    """A tool's input the way people read it: a ``command`` as a shell line, an ``old_string`` /
    ``new_string`` edit as a diff of its file, anything else (and what those leave out) as JSON."""
    parts = []
    rest: Any = value
    command = _text_field(value, "command")
    old, new = _text_field(value, "old_string"), _text_field(value, "new_string")
    if command is not None:
        description = _text_field(value, "description")
        if description:
            parts.append('<p class="perm-caption">' + esc(description) + "</p>")
        parts.append(
            '<pre class="perm-shell"><span class="visually-hidden">Shell command: </span>'
            '<span class="perm-prompt" aria-hidden="true">$ </span><code>' + esc(command) + "</code></pre>"
        )
        rest = _rest(value, ("command", "description"))
    elif old is not None and new is not None:
        path = _text_field(value, "file_path") or _text_field(value, "path")
        if path:
            parts.append('<p class="perm-caption perm-file">' + esc(path) + "</p>")
        rows = []
        for mark, line in diff_rows(old, new):
            css = {"-": "del", "+": "add", " ": "ctx"}[mark]
            label = {"-": "removed: ", "+": "added: ", " ": ""}[mark]
            rows.append(
                '<span class="perm-line ' + css + '"><span class="visually-hidden">' + label + "</span>"
                '<span class="perm-mark" aria-hidden="true">' + mark + "</span>" + esc(line) + "</span>"
            )
        parts.append('<pre class="perm-diff">' + "".join(rows) + "</pre>")
        rest = _rest(value, ("old_string", "new_string", "file_path", "path"))
    if rest is value or (isinstance(rest, dict) and rest):
        parts.append('<pre class="perm-json">' + esc(pretty_json(rest)) + "</pre>")
    return "".join(parts)


def input_summary(value: Any) -> str:
    """One line for a rule's input: its command, its file, else compact JSON."""
    command = _text_field(value, "command")
    if command is not None:
        return command
    path = _text_field(value, "file_path")
    if path is not None:
        return "edit " + path
    return json.dumps(value)


def permission_card(
    request: dict[str, Any],
    draft: dict[str, Any],
    busy: bool,
    error: str | None,
) -> str:
    """The card for a session's active permission request.

    ``draft`` is the person's: ``reason`` (for a deny), ``editing`` with ``edited`` (the input's
    text), ``any`` (remember any input of the tool, not only this one).
    """
    pending_id = str(request.get("pendingId") or "")
    tool = str(request.get("toolName") or "")
    editing = bool(draft.get("editing"))
    disabled = " disabled" if busy else ""
    parts = [
        _card_open(
            "permission",
            pending_id,
            PERMISSION_ICON,
            "The agent asks to use a tool",
            "Hide the request (Esc); it keeps waiting",
        )
    ]
    parts.append(
        '<p class="perm-tool"><span class="perm-label">Tool</span>'
        '<code class="perm-name" data-testid="permission-tool">' + esc(tool) + "</code></p>"
    )
    context = request.get("context")
    if context:
        parts.append('<p class="card-context">' + esc(context) + "</p>")
    if request.get("agentDisconnected"):
        parts.append(
            '<p class="card-detached" data-testid="permission-detached">The agent stopped waiting and '
            "went on as if denied. Allow resumes it with this tool call; Deny only closes the request.</p>"
        )
    error_html = ""
    if error:
        error_html = (
            '<p class="card-error" id="perm-error" role="alert" data-testid="permission-error">'
            + esc(error)
            + "</p>"
        )
    if editing:
        parts.append(
            '<div class="perm-input-head"><label class="perm-label" for="perm-edited">Input as JSON</label>'
            '<button type="button" class="btn ghost small" data-action="perm-edit-cancel" '
            'data-testid="permission-edit-cancel"' + disabled + ">Cancel edit</button></div>"
            '<textarea id="perm-edited" class="custom perm-editor" rows="6" spellcheck="false" '
            'autocapitalize="off" data-testid="permission-edited-input"'
            + (' aria-invalid="true" aria-describedby="perm-error"' if error else "")
            + ">"
            + esc(draft.get("edited") or "")
            + "</textarea>"
            + error_html
        )
        error_html = ""
    else:
        parts.append(
            '<div class="perm-input-head"><span class="perm-label" id="perm-input-label">Input</span>'
            '<button type="button" class="btn ghost small" data-action="perm-edit" '
            'data-testid="permission-edit"' + disabled + ">Edit, then allow</button></div>"
            '<div class="perm-input" role="group" aria-labelledby="perm-input-label" '
            'data-testid="permission-input">' + tool_input_html(request.get("input")) + "</div>"
        )
        parts.append(
            '<div class="perm-always">'
            '<button type="button" class="btn ghost" data-action="perm-always" '
            'data-testid="permission-always"' + disabled + ">Always allow this in this session</button>"
            '<label class="perm-any"><input type="checkbox" data-action="perm-any" '
            'data-testid="permission-always-any"'
            + (" checked" if draft.get("any") else "")
            + disabled
            + "><span>For any input of <code>"
            + esc(tool)
            + "</code>, not only this one</span></label></div>"
        )
    parts.append(
        '<label class="perm-field" for="perm-reason">Reason, if you deny '
        '<span class="perm-hint">(optional; the agent sees it)</span></label>'
        '<textarea id="perm-reason" class="custom perm-reason" rows="1" data-testid="permission-reason" '
        'placeholder="Why not?">' + esc(draft.get("reason") or "") + "</textarea>"
    )
    parts.append(error_html)
    deny = (
        '<button type="button" class="btn ghost danger" data-action="perm-deny" data-testid="permission-deny"'
        + disabled
        + ">Deny</button>"
    )
    if editing:
        buttons = (
            deny + '<button type="button" class="btn primary" data-action="perm-allow-edited" '
            'data-testid="permission-allow-edited"'
            + disabled
            + ">"
            + ("Sending…" if busy else "Allow edited")
            + "</button>"
        )
    else:
        buttons = (
            deny + '<button type="button" class="btn primary" data-action="perm-allow" '
            'data-testid="permission-allow"'
            + disabled
            + ">"
            + ("Sending…" if busy else "Allow")
            + "</button>"
        )
    parts.append(_card_close(buttons))
    return "".join(parts)


def permission_queued_notice() -> str:
    return (
        '<div class="notice" role="status" data-testid="permission-queued"><p>Your decision is saved and '
        "waiting for the agent: it gets it once, as soon as it comes back.</p>"
        '<button type="button" class="btn ghost small" data-action="dismiss-notice">Dismiss</button></div>'
    )


def _decision_text(request: dict[str, Any] | None) -> str:
    decision = (request or {}).get("decision") or {}
    behavior = decision.get("behavior")
    if behavior == "ALLOW":
        text = "Allowed"
        if decision.get("auto"):
            text += " by a rule of this session"
        elif decision.get("remember"):
            text += " and remembered for this session"
        if decision.get("updatedInput") is not None and decision.get("updatedInput") != (request or {}).get(
            "input"
        ):
            text += ", with an edited input"
        return text + "."
    if behavior == "DENY":
        message = decision.get("message")
        return "Denied" + (": “" + str(message) + "”" if message else ".")
    return ""


def permission_notice(reason: str | None, request: dict[str, Any] | None) -> str:
    """Shown when the card closed without this page's decision taking effect: why, and the decision
    that was taken instead when it is known."""
    if reason == "SUPERSEDED":
        headline = "This permission request is no longer current: the agent has moved on."
    elif reason == "DELIVERY_CLAIMED":
        headline = "A decision for this request is already on its way to the agent."
    elif reason == "ELSEWHERE":
        headline = "This permission request was decided elsewhere."
    elif reason == "CLOSED":
        headline = "This permission request is no longer waiting."
    else:
        headline = "This permission request was already decided or closed."
    decided = _decision_text(request)
    if decided and reason in ("TERMINAL", "ELSEWHERE", "CLOSED", None):
        headline = "Someone else decided this permission request first."
    return (
        '<div class="notice" role="status" data-testid="permission-conflict"><p>'
        + esc(headline)
        + "</p>"
        + (
            '<p class="notice-detail" data-testid="permission-winner">' + esc(decided) + "</p>"
            if decided
            else ""
        )
        + '<button type="button" class="btn ghost small" data-action="dismiss-notice">Dismiss</button></div>'
    )


def permission_rules(rules: list[dict[str, Any]], busy: str | None) -> str:
    """The session's remembered rules ("Allowed in this session"), each with its Revoke button."""
    if not rules:
        return ""
    items = []
    for rule in rules:
        rule_id = str(rule.get("id") or "")
        value = rule.get("input")
        scope = "any input" if value is None else input_summary(value)
        items.append(
            '<li class="rule" data-testid="permission-rule-'
            + esc(rule_id)
            + '"><code class="perm-name">'
            + esc(rule.get("toolName"))
            + '</code><span class="rule-input" title="'
            + esc(scope)
            + '">'
            + esc(scope)
            + '</span><button type="button" class="btn ghost small" data-action="perm-revoke" '
            'data-rule-id="'
            + esc(rule_id)
            + '" data-testid="permission-rule-revoke" aria-label="Revoke: '
            + esc(rule.get("toolName"))
            + ", "
            + esc(scope)
            + '"'
            + (" disabled" if busy == rule_id else "")
            + ">Revoke</button></li>"
        )
    return (
        '<section class="rules" data-testid="permission-rules" aria-labelledby="rules-title">'
        '<h2 id="rules-title" class="rules-title">Allowed in this session</h2>'
        '<ul class="rule-list">' + "".join(items) + "</ul></section>"
    )
