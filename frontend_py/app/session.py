"""The main pane: the open task's head and session tabs, the open session's rules, conversation and card."""

from pyscript import document  # type: ignore[import-not-found]

from frontend_py.app import loads
from frontend_py.app.page import Page, attr, js_none
from frontend_py.app.rules import Rules
from frontend_py.app.slot import Slot
from frontend_py.app.sync import Sync
from frontend_py.app.views import parts, tasks, transcript

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

RETRY_ACTIONS = ("retry-sessions", "retry-history")


def focused_retry() -> str | None:
    """The Retry that has the focus, if one has it (a render is about to replace it)."""
    active = document.activeElement
    if js_none(active) or str(active.nodeType) != "1":
        return None
    action = attr(active, "data-action")
    return action if action in RETRY_ACTIONS else None


def keep_retry_focus(action: str) -> None:
    """A render replaced the focused Retry: focus the new one, or what the retry brought."""
    active = document.activeElement
    if not js_none(active) and active != document.body:
        return
    target = document.querySelector('[data-action="' + action + '"]')
    if js_none(target) and action == "retry-sessions":
        target = document.querySelector('#tabs [aria-selected="true"]')
        if js_none(target):
            target = document.querySelector("#tabs [role=tab]")
    if js_none(target):
        target = document.getElementById("transcript")
    target.focus()


class SessionPane:
    def __init__(self, page: Page, sync: Sync, rules: Rules, slot: Slot) -> None:
        self.page = page
        self.sync = sync
        self.rules = rules
        self.slot = slot

    def render(self, scroll: bool) -> None:
        page = self.page
        task_id = page.route_task
        task = page.store.task(task_id) if task_id else None
        if task_id is None or task is None:
            # No task open: the inbox shows instead (inbox.py); a task this page does not have says so.
            page.set_html("task-head", "" if not task_id else tasks.home("This task is not available."))
            page.set_html("tabs", "")
            page.set_html("rules", "")
            page.set_html("transcript", "")
            self.slot.render_empty("")
            return
        sessions = page.store.task_sessions(task_id)
        page.set_html("task-head", tasks.head(task))
        listed = self._render_tabs(task_id, sessions)
        session_id = page.route_session
        if session_id is None or page.store.session(session_id) is None:
            self._render_no_session(sessions, listed)
            return
        self._render_session(task_id, session_id, scroll)

    def _render_tabs(self, task_id: str, sessions: list[dict[str, Any]]) -> bool:
        """The tabs, or why there are none yet; whether the task's session list is held."""
        held = self.sync.loads
        key = loads.sessions_key(task_id)
        # No list held: a failed or unfinished load must not read as a task without sessions.
        failure = None if sessions else held.failure(key)
        listed = bool(sessions) or (failure is None and held.arrived(key))
        if failure is not None:
            html = parts.load_failed("sessions", failure, held.running(key))
        elif not listed:
            html = tasks.SESSIONS_LOADING
        else:
            html = tasks.session_tabs(task_id, sessions, self.page.route_session)
        self.page.set_html("tabs", html)
        return listed

    def _render_no_session(self, sessions: list[dict[str, Any]], listed: bool) -> None:
        owner = None
        for session in sessions:
            if session.get("pendingAction"):
                owner = session
        hint = "Choose a session above."
        if owner is not None:
            hint = "A session of this task needs your input: it is marked with a dot above."
        self.page.set_html("rules", "")
        self.page.set_html("transcript", transcript.empty(hint) if listed else "")
        self.slot.render_empty(self.slot.notice_html())

    def _render_session(self, task_id: str, session_id: str, scroll: bool) -> None:
        page = self.page
        action, active_ids = page.store.session_pending(session_id)
        self.rules.opened(session_id)
        self.rules.render(session_id)
        self.sync.check_permission(task_id, session_id, action)
        node = document.getElementById("transcript")
        # Follow the conversation while the reader is at its end (a card appearing shrinks the view).
        at_end = node.scrollTop + node.clientHeight >= node.scrollHeight - 48
        turns = page.store.turns(session_id)
        history_key = loads.history_key(session_id)
        failure = self.sync.loads.failure(history_key) if turns is None else None
        if failure is not None:
            html = parts.load_failed("history", failure, self.sync.loads.running(history_key))
        else:
            messages = page.store.messages(session_id)
            after, tail = self.sync.decisions.placed(session_id, messages)
            html = transcript.transcript(turns, messages, active_ids, after, tail)
        changed = page.set_html("transcript", html)
        card_changed = self.slot.render(session_id, active_ids, action)
        if (changed and scroll) or ((changed or card_changed) and at_end):
            node.scrollTop = node.scrollHeight
