"""The client store: state built from query results and kept current by applying events.

Zulip-style: a client fetches initial state (``apply_tasks``, ``apply_task``, ``apply_task_sessions``,
``apply_session_turns``, ``apply_session_messages``) and then applies events (``apply_session_event``,
``apply_projection``, ``apply_task_summary``). Applying the events a change emits to old state must
equal a fresh fetch; ``snapshot`` is the comparable form. Values are the API's JSON dicts
(camelCase), stored as received.

Two ordering rules keep delayed results from winning:

* every session projection, from any source, goes through ``revision.merge`` with one
  ``EpochFloor`` for the whole store, so an older projection (or a pre-restart epoch) never
  replaces a newer one whatever the delivery order of HTTP responses and WebSocket events;
* task summaries are replaced only by a strictly newer ``revision``. A task-list read that
  returns ``summary: null`` (the server could not repair it) drops the cached summary, unless a
  newer live summary arrived while that read was in flight: callers take a ``begin_read()`` token
  when the request starts and pass it with the result.
"""

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

from frontend_py.kit import derivation, revision
from frontend_py.kit.timestamps import parse_timestamp

_SESSION_FIELDS = ("id", "taskId", "state", "isPrimary", "inputCapable", "createdAt")
_TASK_FIELDS = ("id", "title", "workflowStep", "primarySessionId", "project")
_LEGACY_COUNTED_STATES = ("RUNNING", "WAITING_FOR_INPUT")


class ReadToken:
    """Summary revisions held when a task read started (None: no summary was held)."""

    def __init__(self, revisions: dict[str, int | None]) -> None:
        self.revisions = revisions

    def observed(self, task_id: str) -> int | None:
        return self.revisions.get(task_id)


def _pick(source: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    picked = {}
    for name in fields:
        picked[name] = source.get(name)
    return picked


def _created_key(row: dict[str, Any]) -> tuple[int, str]:
    return (parse_timestamp(row.get("createdAt")), row.get("id") or "")


class Store:
    """Tasks, their summaries and sessions, and each session's projection, turns and messages."""

    def __init__(self) -> None:
        self.floor = revision.EpochFloor()
        self._tasks: dict[str, dict[str, Any]] = {}
        self._summaries: dict[str, dict[str, Any]] = {}
        self._sessions: dict[str, dict[str, Any]] = {}
        # Per session: {"pendingAction", "revision", "activeIds"}; activeIds is None when the source
        # (a SessionProjection) does not name the active bundle, a list when a TaskSession did.
        self._projections: dict[str, dict[str, Any]] = {}
        self._turns: dict[str, list[dict[str, Any]]] = {}
        self._messages: dict[str, dict[str, dict[str, Any]]] = {}
        self._stale_turns: set[str] = set()
        self._remembered: dict[str, str] = {}

    # --- reads -------------------------------------------------------------------------------

    def task(self, task_id: str) -> dict[str, Any] | None:
        """The task with its current ``summary`` (or None), or None when the task is not present."""
        task = self._tasks.get(task_id)
        if task is None:
            return None
        view = dict(task)
        view["summary"] = self._summaries.get(task_id)
        return view

    def task_ids(self) -> list[str]:
        return sorted(self._tasks)

    def summary(self, task_id: str) -> dict[str, Any] | None:
        if task_id not in self._tasks:
            return None
        return self._summaries.get(task_id)

    def task_pending_action(self, task_id: str) -> str | None:
        """The task's pending action: its summary's, else the legacy projection from its sessions.

        A held summary is the authority (it is reconciled by the server). Without one (none sent, or
        dropped by an invalidating read) the legacy rule answers from the held session projections:
        only running or waiting sessions count, and a permission request outranks a clarification.
        """
        if task_id not in self._tasks:
            return None
        summary = self._summaries.get(task_id)
        if summary is not None:
            action: str | None = summary.get("pendingAction")
            return action
        found = None
        for session in self.task_sessions(task_id):
            if session.get("state") not in _LEGACY_COUNTED_STATES:
                continue
            kind = session.get("pendingAction")
            if kind == derivation.PERMISSION:
                return derivation.PERMISSION
            if kind == derivation.CLARIFICATION:
                found = derivation.CLARIFICATION
        return found

    def session(self, session_id: str) -> dict[str, Any] | None:
        """The session with its held projection as ``pendingAction`` / ``pendingActionRevision``."""
        session = self._sessions.get(session_id)
        if session is None:
            return None
        view = dict(session)
        projection = self._projections.get(session_id)
        view["pendingAction"] = projection["pendingAction"] if projection else None
        view["pendingActionRevision"] = projection["revision"] if projection else None
        return view

    def task_sessions(self, task_id: str) -> list[dict[str, Any]]:
        """The task's sessions, oldest first (by ``createdAt``, then id)."""
        views = []
        for session_id, session in self._sessions.items():
            if session.get("taskId") == task_id:
                view = self.session(session_id)
                if view is not None:
                    views.append(view)
        return sorted(views, key=_created_key)

    def projection(self, session_id: str) -> dict[str, Any] | None:
        return self._projections.get(session_id)

    def turns(self, session_id: str) -> list[dict[str, Any]] | None:
        """Visible turn history, ascending, or None when it has not been loaded."""
        turns = self._turns.get(session_id)
        return None if turns is None else list(turns)

    def turns_stale(self, session_id: str) -> bool:
        """Whether a message named a turn missing from the loaded history (reload ``sessionTurns``)."""
        return session_id in self._stale_turns

    def messages(self, session_id: str) -> list[dict[str, Any]]:
        """The session's messages, oldest first (by ``createdAt``, then id)."""
        return sorted(self._messages.get(session_id, {}).values(), key=_created_key)

    def session_pending(self, session_id: str) -> tuple[str | None, list[str]]:
        """``(pending action, active bundle ids)`` for one session (see ``derivation.session_pending``)."""
        session = self._sessions.get(session_id)
        state = session.get("state") if session else None
        projection = self._projections.get(session_id)
        turns = self._turns.get(session_id)
        rows = None if turns is None else [derivation.turn_row(t) for t in turns]
        messages = [derivation.message_row(m) for m in self._messages.get(session_id, {}).values()]
        server_ids = projection.get("activeIds") if projection else None
        return derivation.session_pending(state or "", projection, rows, messages, server_ids)

    def remembered_session(self, task_id: str) -> str | None:
        return self._remembered.get(task_id)

    def remember_session(self, task_id: str, session_id: str) -> None:
        self._remembered[task_id] = session_id

    def snapshot(self) -> dict[str, Any]:
        """Everything a fresh fetch would rebuild, in comparable form (no UI memory)."""
        tasks = {}
        for task_id in self._tasks:
            tasks[task_id] = self.task(task_id)
        sessions = {}
        for session_id in self._sessions:
            # The derived pending state, not the raw projection record: an event and a fresh
            # read name the active bundle differently (by id, or through the messages).
            action, active_ids = self.session_pending(session_id)
            sessions[session_id] = {
                "session": self.session(session_id),
                "pending": {"action": action, "activePendingIds": active_ids},
                "turns": self.turns(session_id),
                "messages": self.messages(session_id),
            }
        return {"tasks": tasks, "sessions": sessions}

    # --- query results -----------------------------------------------------------------------

    def begin_read(self) -> ReadToken:
        """Call when a task read (``tasks`` / ``task``) is sent; pass the token with its result."""
        revisions: dict[str, int | None] = {}
        for task_id, summary in self._summaries.items():
            revisions[task_id] = summary.get("revision")
        return ReadToken(revisions)

    def apply_tasks(self, tasks: list[dict[str, Any]], token: ReadToken | None = None) -> None:
        """Apply a ``tasks`` result: the full list, so tasks absent from it are removed."""
        listed = set()
        for task in tasks:
            listed.add(task["id"])
            self._apply_task_result(task, token)
        for task_id in list(self._tasks):
            if task_id not in listed:
                self._remove_task(task_id)

    def apply_task(self, task_id: str, task: dict[str, Any] | None, token: ReadToken | None = None) -> None:
        """Apply a ``task(id)`` result; None means the task no longer exists."""
        if task is None:
            self._remove_task(task_id)
        else:
            self._apply_task_result(task, token)

    def apply_task_sessions(self, task_id: str, sessions: list[dict[str, Any]]) -> None:
        """Apply an authoritative session list (``taskSessions`` or ``Task.sessions``)."""
        listed = set()
        for session in sessions:
            listed.add(session["id"])
            record = _pick(session, _SESSION_FIELDS)
            record["taskId"] = session.get("taskId") or task_id
            self._sessions[session["id"]] = record
            active = session.get("activeClarification")
            self._merge_projection(
                session["id"],
                {
                    "pendingAction": session.get("pendingAction"),
                    "revision": session.get("pendingActionRevision"),
                    "activeIds": [active["pendingId"]] if isinstance(active, dict) else [],
                },
            )
        for session_id in list(self._sessions):
            if self._sessions[session_id].get("taskId") == task_id and session_id not in listed:
                self._remove_session(session_id)

    def apply_session_turns(self, session_id: str, turns: list[dict[str, Any]]) -> None:
        self._turns[session_id] = sorted(
            turns,
            key=lambda t: (parse_timestamp(t.get("startedAt")), parse_timestamp(t.get("createdAt")), t["id"]),
        )
        self._stale_turns.discard(session_id)
        for message in self._messages.get(session_id, {}).values():
            self._check_turn(session_id, message)

    def apply_session_messages(
        self, session_id: str, messages: list[dict[str, Any]], replace: bool = True
    ) -> None:
        """Apply a ``sessionMessages`` page; ``replace=False`` adds a later page to what is held."""
        held = {} if replace else self._messages.get(session_id, {})
        for message in messages:
            held[message["id"]] = message
            self._check_turn(session_id, message)
        self._messages[session_id] = held

    # --- events ------------------------------------------------------------------------------

    def apply_session_event(self, session_id: str, event: dict[str, Any]) -> None:
        """Apply one ``sessionEvents`` payload.

        The projection goes first, so a new question and the projection that makes it pending land
        together. An absent projection keeps the held one; a projection whose ``pendingAction`` is
        null is an explicit clean.
        """
        projection = event.get("projection")
        if projection is not None:
            self.apply_projection(projection, session_id)
        kind = event.get("kind")
        message_id = event.get("messageId")
        if kind == "DELETED":
            if message_id is not None:
                self._messages.get(session_id, {}).pop(message_id, None)
            return
        message = event.get("message")
        if isinstance(message, dict):
            self._messages.setdefault(session_id, {})[message["id"]] = message
            self._check_turn(session_id, message)

    def apply_projection(self, projection: dict[str, Any], session_id: str | None = None) -> bool:
        """Apply a ``SessionProjection`` (``pendingActionChanged``); whether it was kept."""
        target = projection.get("sessionId") or session_id
        if not target:
            return False
        candidate = {
            "pendingAction": projection.get("pendingAction"),
            "revision": projection.get("revision"),
            "activeIds": None,
        }
        return self._merge_projection(target, candidate)

    def apply_task_summary(self, summary: dict[str, Any]) -> bool:
        """Apply a ``TaskStatusSummary`` (``taskSummaryChanged``): only a newer revision wins."""
        task_id = summary.get("taskId")
        new_revision = summary.get("revision")
        if not task_id or type(new_revision) is not int:
            return False
        held = self._summaries.get(task_id)
        if held is not None and not new_revision > held.get("revision", -1):
            return False
        self._summaries[task_id] = summary
        return True

    # --- internals ---------------------------------------------------------------------------

    def _apply_task_result(self, task: dict[str, Any], token: ReadToken | None) -> None:
        task_id = task["id"]
        self._tasks[task_id] = _pick(task, _TASK_FIELDS)
        if "summary" in task:
            summary = task["summary"]
            if summary is not None:
                self.apply_task_summary(summary)
            else:
                self._invalidate_summary(task_id, token)
        if isinstance(task.get("sessions"), list):
            self.apply_task_sessions(task_id, task["sessions"])

    def _invalidate_summary(self, task_id: str, token: ReadToken | None) -> None:
        held = self._summaries.get(task_id)
        if held is None:
            return
        if token is not None and held.get("revision") != token.observed(task_id):
            # A live summary arrived after the read started: it is newer than what the server
            # failed to repair, so the invalidation cannot erase it.
            return
        del self._summaries[task_id]

    def _merge_projection(self, session_id: str, candidate: dict[str, Any]) -> bool:
        held = self._projections.get(session_id)
        winner = revision.merge(held, candidate, self.floor)
        if winner is not candidate:
            return False
        self._projections[session_id] = candidate
        return True

    def _check_turn(self, session_id: str, message: dict[str, Any]) -> None:
        turns = self._turns.get(session_id)
        if turns is None:
            return
        turn_id = message.get("turnId")
        for turn in turns:
            if turn["id"] == turn_id:
                return
        self._stale_turns.add(session_id)

    def _remove_task(self, task_id: str) -> None:
        self._tasks.pop(task_id, None)
        self._summaries.pop(task_id, None)
        self._remembered.pop(task_id, None)
        for session_id in list(self._sessions):
            if self._sessions[session_id].get("taskId") == task_id:
                self._remove_session(session_id)

    def _remove_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
        self._projections.pop(session_id, None)
        self._turns.pop(session_id, None)
        self._messages.pop(session_id, None)
        self._stale_turns.discard(session_id)
