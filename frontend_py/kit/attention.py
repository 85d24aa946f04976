"""Getting a person's attention: the waiting count (tab title, favicon badge) and which questions notify.

Everything here reads the ``Store``, so it inherits its ordering rules: a task summary is replaced
only by a strictly newer revision, hence a stale or older projection can neither raise nor clear
the count, nor start a notification.

The count is the number of listed tasks whose pending action (``Store.task_pending_action``: the
summary, or without one the legacy rule from the sessions) is set: the tasks that wait for input,
the same ones that show a question icon.

Notifications (``Notifier``) follow these rules:

* A *lookup* starts when a task's summary reaches a newer revision with a pending clarification
  (``scan``); the app fetches the task's sessions with their active bundles and hands the result
  back (``resolve``) with the revision the lookup was started for.
* A result applies only while the task's held summary still has that revision and still says
  ``CLARIFICATION``: a result overtaken by a newer summary (answered, superseded, or a newer
  question) is dropped; the newer revision has its own lookup.
* One notification per pending bundle (``pendingId``) in this tab, ever: a reconnect snapshot or a
  later revision of the same task cannot raise an already notified bundle again.
* A bundle whose session is open in a visible page raises nothing; the person is looking at it, so
  it counts as notified.
* Questions already pending when notifications are armed (page load with notifications on, or the
  moment the person opts in) are the *baseline*: recorded, never raised. The title and the icons
  already show them.
* By default only clarification questions notify (a permission request is counted in the title);
  ``Notifier(kinds=(CLARIFICATION, PERMISSION))`` notifies permission requests too, by the same
  rules, from a session's ``activePermission`` (its ``pendingId`` is the one notification's key).
"""

try:  # noqa: SIM105, RUF100 - MicroPython has no contextlib
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

from frontend_py.kit.derivation import CLARIFICATION, PERMISSION
from frontend_py.kit.store import Store

APP_NAME = "Turnwise"
_NOTIFIED_LIMIT = 500


def waiting_count(store: Store) -> int:
    """How many listed tasks wait for input (a pending clarification or permission request)."""
    count = 0
    for task_id in store.task_ids():
        if store.task_pending_action(task_id):
            count += 1
    return count


def page_title(count: int, name: str = APP_NAME) -> str:
    """``(2) Turnwise`` while tasks wait, else the bare name."""
    return "(" + str(count) + ") " + name if count > 0 else name


def badge_label(count: int) -> str:
    """The text drawn in the favicon badge: empty for none, ``9+`` beyond nine."""
    if count <= 0:
        return ""
    return str(count) if count < 10 else "9+"


class Lookup:
    """A pending question to look up: the task and the summary revision that announced it."""

    def __init__(self, task_id: str, revision: int, baseline: bool) -> None:
        self.task_id = task_id
        self.revision = revision
        self.baseline = baseline

    def __repr__(self) -> str:
        return "Lookup(" + self.task_id + ", " + str(self.revision) + ", " + str(self.baseline) + ")"


class Notifier:
    """Decides which pending bundles raise a desktop notification in this tab (see the module doc)."""

    def __init__(self, kinds: tuple[str, ...] = (CLARIFICATION,)) -> None:
        self.kinds = kinds
        self.armed = False
        # The summary revision last seen per task; a lookup starts only when it grows.
        self._seen: dict[str, int] = {}
        # Bundles notified (or seen, or baseline) in this tab, oldest first, bounded.
        self._notified: list[str] = []
        self._notified_set: set[str] = set()

    def notified(self, pending_id: str) -> bool:
        return pending_id in self._notified_set

    def arm(self, store: Store) -> list[Lookup]:
        """Start notifying; the questions pending now are looked up as the baseline."""
        self.armed = True
        lookups = []
        for task_id, summary, revision in _summaries(store):
            self._seen[task_id] = revision
            if summary.get("pendingAction") in self.kinds:
                lookups.append(Lookup(task_id, revision, True))
        return lookups

    def disarm(self) -> None:
        self.armed = False

    def scan(self, store: Store) -> list[Lookup]:
        """Call after every store change: lookups for tasks whose summary newly shows a question.

        While disarmed it only records revisions, so arming later does not replay them.
        """
        lookups = []
        for task_id, summary, revision in _summaries(store):
            seen = self._seen.get(task_id)
            if seen is not None and revision <= seen:
                continue
            self._seen[task_id] = revision
            if self.armed and summary.get("pendingAction") in self.kinds:
                # A task listed after arming is news too, not baseline.
                lookups.append(Lookup(task_id, revision, False))
        for task_id in list(self._seen):
            if store.task(task_id) is None:
                del self._seen[task_id]
        return lookups

    def resolve(
        self,
        store: Store,
        lookup: Lookup,
        sessions: list[dict[str, Any]],
        open_session: str | None,
        page_visible: bool,
    ) -> list[dict[str, Any]]:
        """The notifications a lookup's result raises: ``{pendingId, taskId, sessionId, title, body}``.

        ``sessions`` are the task's sessions with ``activeClarification`` (its ``questions``);
        ``open_session`` is the session open in the page, ``page_visible`` whether the page is seen.
        """
        if not self.armed:
            return []
        summary = store.summary(lookup.task_id)
        if summary is None or summary.get("revision") != lookup.revision:
            return []
        action = summary.get("pendingAction")
        if action not in self.kinds:
            return []
        task = store.task(lookup.task_id) or {}
        raised = []
        for session in sessions:
            bundle = session.get("activeClarification")
            asks_permission = action == PERMISSION and not isinstance(bundle, dict)
            if asks_permission:
                bundle = session.get("activePermission")
            if not isinstance(bundle, dict):
                continue
            pending_id = bundle.get("pendingId")
            if not pending_id or self.notified(pending_id):
                continue
            if bundle.get("state") not in (None, "ACTIVE_LIVE", "ACTIVE_DETACHED"):
                continue
            session_id = bundle.get("sessionId") or session.get("id")
            self._remember(pending_id)
            if lookup.baseline or (page_visible and session_id == open_session):
                continue
            raised.append(
                {
                    "pendingId": pending_id,
                    "taskId": lookup.task_id,
                    "sessionId": session_id,
                    "title": task.get("title") or APP_NAME,
                    "body": permission_line(bundle) if asks_permission else first_question(bundle),
                }
            )
        return raised

    def seen(self, pending_id: str) -> None:
        """The person saw this bundle in the page: it will not notify later."""
        self._remember(pending_id)

    def _remember(self, pending_id: str) -> None:
        if pending_id in self._notified_set:
            return
        self._notified.append(pending_id)
        self._notified_set.add(pending_id)
        if len(self._notified) > _NOTIFIED_LIMIT:
            dropped = self._notified.pop(0)
            self._notified_set.discard(dropped)


def permission_line(request: dict[str, Any]) -> str:
    """A permission notification's body: the tool, and its command when it has one."""
    tool = request.get("toolName") or "a tool"
    value = request.get("input")
    command = value.get("command") if isinstance(value, dict) else None
    line = "Asks to use " + str(tool)
    if isinstance(command, str) and command:
        line += ": " + command
    return line


def first_question(bundle: dict[str, Any]) -> str:
    """The notification body: the first question's prompt (else its title), else a generic line."""
    questions = bundle.get("questions") or []
    for question in questions:
        text = question.get("prompt") or question.get("title")
        if text:
            return str(text)
    return "An agent is waiting for your answer."


def _summaries(store: Store) -> list[tuple[str, dict[str, Any], int]]:
    """Each task's summary with its revision, for the tasks that have one."""
    found = []
    for task_id in store.task_ids():
        summary = store.summary(task_id)
        if summary is None:
            continue
        revision = summary.get("revision")
        if type(revision) is int:
            found.append((task_id, summary, revision))
    return found
