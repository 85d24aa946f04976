"""Task activation: which route opening a task leads to, guarded against stale continuations.

A clean task opens its remembered session (if still present), else its primary session, else its
newest session. A task that advertises a pending action (its summary, or without one the legacy
projection from its sessions: ``Store.task_pending_action``) bypasses every cached preference:
the controller forces an authoritative session load (the injected ``load_sessions``) and opens the
newest input-capable session whose ``pendingAction`` matches the task's action. Before applying the
load it revalidates the task:

* task gone -> inert (no navigation, no selection change, the load is not applied);
* summary revision or action changed -> the owner choice is obsolete: open the task-only route and
  let the current projection show the real owner;
* no matching owner -> release the outgoing session layout, then open the task-only route.

A failed load opens the task-only route too, so the user is never stranded on an unchanged URL.

Generations: each controller is one mounted sheet (desktop sidebar, phone drawer, tablet sheet).
Its per-task load generation lets only the newest load of a task reach the store (an older response
finishing last cannot replace a newer snapshot) and aborts the older request; its selection
generation makes any continuation inert once this sheet has started a newer activation. A
superseded or aborted load is inert, never a failure. ``unmount`` makes every continuation of this
sheet inert, so it cannot navigate, select, or close a replacement sheet. Controllers share nothing
but the store, so two mounted sheets never invalidate each other.
"""

try:
    from collections.abc import Awaitable, Callable
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

from frontend_py.kit.store import Store
from frontend_py.kit.timestamps import parse_timestamp

OPENED_SESSION = "session"
OPENED_TASK = "task"
INERT = "inert"


def task_route(task_id: str) -> str:
    return "/t/" + task_id


def session_route(task_id: str, session_id: str) -> str:
    return "/t/" + task_id + "/s/" + session_id


class Navigator:
    """What activation may do to the app; the browser layer implements it."""

    def navigate(self, route: str) -> None:
        """Go to ``route``; a session route also makes that session the active one."""
        raise NotImplementedError

    def release_session_layout(self) -> None:
        """Let go of the outgoing session's layout before the active session is cleared."""
        raise NotImplementedError

    def close_sheet(self) -> None:
        """Close the sheet or drawer this controller belongs to."""
        raise NotImplementedError


class AbortSignal:
    """Set when a newer load (or unmounting) makes a request pointless; loaders may listen."""

    def __init__(self) -> None:
        self.aborted = False
        self._listeners: list[Callable[[], None]] = []

    def add_listener(self, listener: Callable[[], None]) -> None:
        if self.aborted:
            listener()
        else:
            self._listeners.append(listener)

    def abort(self) -> None:
        if self.aborted:
            return
        self.aborted = True
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener()


def _newest(sessions: list[dict[str, Any]]) -> dict[str, Any] | None:
    best: dict[str, Any] | None = None
    best_key: tuple[int, str] | None = None
    for session in sessions:
        key = (parse_timestamp(session.get("createdAt")), session["id"])
        if best_key is None or key > best_key:
            best, best_key = session, key
    return best


def _summary_revision(store: Store, task_id: str) -> int | None:
    summary = store.summary(task_id)
    return None if summary is None else summary.get("revision")


def clean_choice(store: Store, task_id: str) -> str | None:
    """The session a clean task opens: remembered, else primary, else newest; None if it has none."""
    sessions = store.task_sessions(task_id)
    present = set()
    for session in sessions:
        present.add(session["id"])
    remembered = store.remembered_session(task_id)
    if remembered in present:
        return str(remembered)
    task = store.task(task_id)
    primary = task.get("primarySessionId") if task else None
    if primary in present:
        return str(primary)
    for session in sessions:
        if session.get("isPrimary"):
            return str(session["id"])
    newest = _newest(sessions)
    return None if newest is None else str(newest["id"])


def sole_session(store: Store, task_id: str) -> str | None:
    """The task's one session when it has exactly one: where a task-only fallback of an activation
    goes next (there is nothing to choose), whatever that session holds."""
    sessions = store.task_sessions(task_id)
    return str(sessions[0]["id"]) if len(sessions) == 1 else None


def pending_owner(store: Store, task_id: str, action: str) -> str | None:
    """The newest input-capable session whose pending action matches the task's, or None."""
    candidates = [
        s for s in store.task_sessions(task_id) if s.get("inputCapable") and s.get("pendingAction") == action
    ]
    newest = _newest(candidates)
    return None if newest is None else str(newest["id"])


class ActivationController:
    """Activation for one mounted sheet; ``closes_sheet`` for the phone drawer and tablet sheet."""

    def __init__(
        self,
        store: Store,
        load_sessions: Callable[[str, AbortSignal], Awaitable[list[dict[str, Any]]]],
        navigator: Navigator,
        closes_sheet: bool = False,
    ) -> None:
        self.store = store
        self.load_sessions = load_sessions
        self.navigator = navigator
        self.closes_sheet = closes_sheet
        self.mounted = True
        self._selection = 0
        self._loads: dict[str, int] = {}
        self._signals: dict[str, AbortSignal] = {}

    def unmount(self) -> None:
        """The sheet is gone: abort its loads and make every continuation inert."""
        self.mounted = False
        signals, self._signals = self._signals, {}
        for signal in signals.values():
            signal.abort()

    async def activate(self, task_id: str) -> str:
        """Open ``task_id``; returns ``OPENED_SESSION``, ``OPENED_TASK`` or ``INERT``."""
        if not self.mounted or self.store.task(task_id) is None:
            return INERT
        self._selection += 1
        selection = self._selection
        action = self.store.task_pending_action(task_id)
        if not action:
            return self._open(task_id, clean_choice(self.store, task_id))
        revision_at_start = _summary_revision(self.store, task_id)

        load = self._loads.get(task_id, 0) + 1
        self._loads[task_id] = load
        previous = self._signals.get(task_id)
        if previous is not None:
            previous.abort()
        signal = AbortSignal()
        self._signals[task_id] = signal
        try:
            sessions = await self.load_sessions(task_id, signal)
        except Exception:  # noqa: BLE001 - whatever failed the caller's loader, the task opens alone
            if not self._owns(task_id, load, selection) or signal.aborted:
                return INERT
            self._forget(task_id, signal)
            return self._open_task_only(task_id)
        if not self._owns(task_id, load, selection):
            return INERT
        self._forget(task_id, signal)
        if self.store.task(task_id) is None:
            return INERT
        self.store.apply_task_sessions(task_id, sessions)
        if (
            _summary_revision(self.store, task_id) != revision_at_start
            or self.store.task_pending_action(task_id) != action
        ):
            return self._open_task_only(task_id)
        owner = pending_owner(self.store, task_id, action)
        if owner is None:
            return self._open_task_only(task_id)
        return self._open(task_id, owner)

    def _owns(self, task_id: str, load: int, selection: int) -> bool:
        return self.mounted and self._loads.get(task_id) == load and self._selection == selection

    def _forget(self, task_id: str, signal: AbortSignal) -> None:
        if self._signals.get(task_id) is signal:
            del self._signals[task_id]

    def _open(self, task_id: str, session_id: str | None) -> str:
        if session_id is None:
            return self._open_task_only(task_id)
        self.store.remember_session(task_id, session_id)
        self.navigator.navigate(session_route(task_id, session_id))
        self._close()
        return OPENED_SESSION

    def _open_task_only(self, task_id: str) -> str:
        self.navigator.release_session_layout()
        self.navigator.navigate(task_route(task_id))
        self._close()
        return OPENED_TASK

    def _close(self) -> None:
        if self.closes_sheet:
            self.navigator.close_sheet()
