"""A task's HTML: its row in the task list, its head and its session tabs."""

from frontend_py.app.views.parts import PERMISSION_ICON, QUESTION_ICON, esc

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

STATE_LABELS = {
    "CREATED": "created",
    "STARTING": "starting",
    "RUNNING": "running",
    "WAITING_FOR_INPUT": "waiting for input",
    "COMPLETED": "completed",
    "FAILED": "failed",
    "CANCELLED": "cancelled",
}

SESSIONS_LOADING = '<p class="empty">Loading sessions…</p>'
# The step every task starts in says nothing: it is not shown.
QUIET_STEPS = ("", "todo")


def _step(step: Any, css: str) -> str:
    text = str(step or "")
    return "" if text.strip().lower() in QUIET_STEPS else '<span class="' + css + '">' + esc(text) + "</span>"


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
            "</span>",
            _step(step, "task-step"),
            "</span>",
            icon,
            "</button></li>",
        ]
    )


def task_list(rows: list[str]) -> str:
    if not rows:
        return '<p class="empty">No tasks yet.</p>'
    return '<ul class="task-list">' + "".join(rows) + "</ul>"


def home(message: str) -> str:
    """The main pane with no task open (or one this page does not have)."""
    return (
        '<div class="placeholder"><h1>Turnwise</h1><p>'
        + esc(message)
        + '</p><button type="button" class="btn primary phone-only" data-action="drawer-toggle">'
        + "Show tasks</button></div>"
    )


def head(task: dict[str, Any]) -> str:
    return (
        '<div class="task-head"><h1>'
        + esc(task.get("title"))
        + "</h1>"
        + _step(task.get("workflowStep"), "step")
        + "</div>"
    )


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
