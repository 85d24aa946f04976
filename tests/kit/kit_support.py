"""Helpers the kit tests share on CPython and on MicroPython (no pytest, no asyncio needed)."""

import json

try:
    from collections.abc import Callable, Generator
    from typing import Any, TypeVar

    F = TypeVar("F", bound=Callable[..., Any])
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

from frontend_py.kit import CLARIFICATION, PERMISSION, AbortSignal, Navigator, Store

# The kinds of pending action a session's projection names: a clarification, a permission request.
KINDS = [CLARIFICATION, PERMISSION]


def _here() -> str:
    path = __file__.replace("\\", "/")
    return path.rsplit("/", 1)[0] if "/" in path else "."


def fixture_path(name: str) -> str:
    """``tests/fixtures/<name>``: beside this folder on disk, and at the same place in the browser's
    virtual file system, where the harness page mirrors the repository layout."""
    return _here() + "/../fixtures/" + name


def load_fixture(name: str) -> Any:
    with open(fixture_path(name)) as handle:
        return json.load(handle)


def scenario(*ids: str) -> Callable[[F], F]:
    """``@pytest.mark.scenario(*ids)`` on CPython; a no-op under MicroPython, which has no pytest."""
    try:
        import pytest
    except ImportError:
        return lambda test: test
    mark: Callable[[F], F] = pytest.mark.scenario(*ids)
    return mark


def each_kind(test: F) -> F:
    """The test once per kind of pending action, called with ``kind`` (one of ``KINDS``): a
    ``pytest.mark.parametrize`` case each on CPython; under MicroPython, which has no pytest, one
    test that runs for every kind in turn."""
    try:
        import pytest
    except ImportError:

        def every_kind() -> None:
            for kind in KINDS:
                test(kind)

        return every_kind  # type: ignore[return-value]
    mark: Callable[[F], F] = pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.lower())
    return mark(test)


def other_kind(kind: str) -> str:
    return PERMISSION if kind == CLARIFICATION else CLARIFICATION


def raises(error: type[BaseException], call: Callable[..., Any], *args: Any) -> bool:
    try:
        call(*args)
    except error:
        return True
    return False


# --- hand-driven coroutines: every interleaving is chosen by the test, identically everywhere ---


class Deferred:
    """An awaitable the test settles by hand (MicroPython awaits through ``__iter__``)."""

    def __init__(self) -> None:
        self.done = False
        self._value: Any = None
        self._error: BaseException | None = None

    def resolve(self, value: Any) -> None:
        if not self.done:
            self.done, self._value = True, value

    def reject(self, error: BaseException) -> None:
        if not self.done:
            self.done, self._error = True, error

    def __await__(self) -> Generator[Any, None, Any]:
        while not self.done:
            yield self
        if self._error is not None:
            raise self._error
        return self._value

    __iter__ = __await__


class Run:
    """A coroutine stepped by hand; ``result`` once it returns."""

    def __init__(self, coroutine: Any) -> None:
        self.coroutine = coroutine
        self.done = False
        self.result: Any = None
        self.step()

    def step(self) -> None:
        if self.done:
            return
        try:
            self.coroutine.send(None)
        except StopIteration as stop:
            self.done, self.result = True, stop.value


def settle(*runs: Run) -> None:
    """Step every run until none can move (each is waiting on an unsettled ``Deferred``)."""
    for _ in range(20):
        for run in runs:
            run.step()


class AbortError(Exception):
    """What a browser ``fetch`` raises when its ``AbortController`` fires."""


class Loads:
    """The injected session loader: each call returns a ``Deferred`` the test settles."""

    def __init__(self, honour_abort: bool = True) -> None:
        # honour_abort=False models a response that was already on its way when the abort fired.
        self.honour_abort = honour_abort
        self.calls: list[tuple[str, Deferred, AbortSignal]] = []

    async def __call__(self, task_id: str, signal: AbortSignal) -> Any:
        deferred = Deferred()
        self.calls.append((task_id, deferred, signal))
        if self.honour_abort:
            signal.add_listener(lambda: deferred.reject(AbortError("aborted")))
        return await deferred

    def resolve(self, index: int, sessions: list[dict[str, Any]]) -> None:
        self.calls[index][1].resolve(sessions)

    def fail(self, index: int) -> None:
        self.calls[index][1].reject(RuntimeError("HTTP 500"))


class Log:
    """What every sheet did, in order."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str]] = []


class SheetNavigator(Navigator):
    def __init__(self, log: Log, sheet: str) -> None:
        self.log = log
        self.sheet = sheet

    def navigate(self, route: str) -> None:
        self.log.entries.append(("navigate", route))

    def release_session_layout(self) -> None:
        self.log.entries.append(("release", self.sheet))

    def close_sheet(self) -> None:
        self.log.entries.append(("close", self.sheet))


# --- API-shaped data -----------------------------------------------------------------------------


def rev(epoch: str, sequence: str) -> dict[str, str]:
    return {"epoch": epoch, "sequence": sequence}


def session(
    session_id: str,
    task_id: str = "T",
    created: str = "2026-08-14T10:00:00Z",
    pending: str | None = None,
    revision: dict[str, str] | None = None,
    primary: bool = False,
    input_capable: bool = True,
    state: str = "RUNNING",
    active: str | None = None,
) -> dict[str, Any]:
    """A ``TaskSession``; ``active`` names its active request, a bundle or a permission request as
    ``pending`` says."""
    request = {"pendingId": active} if active else None
    return {
        "id": session_id,
        "taskId": task_id,
        "state": state,
        "isPrimary": primary,
        "inputCapable": input_capable,
        "createdAt": created,
        "pendingAction": pending,
        "pendingActionRevision": revision or rev("1", "1"),
        "activeClarification": None if pending == PERMISSION else request,
        "activePermission": request if pending == PERMISSION else None,
    }


def summary(task_id: str, revision: int, pending: str | None) -> dict[str, Any]:
    return {
        "taskId": task_id,
        "revision": revision,
        "pendingAction": pending,
        "updatedAt": "2026-08-14T10:00:00Z",
    }


def task(
    task_id: str,
    sessions: list[dict[str, Any]],
    task_summary: Any = None,
    primary: str | None = None,
    with_summary: bool = True,
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "id": task_id,
        "title": "Task " + task_id,
        "workflowStep": "build",
        "primarySessionId": primary,
        "sessions": sessions,
    }
    if with_summary:
        result["summary"] = task_summary
    return result


def turn(turn_id: str, started: str, completed: str | None = None, session_id: str = "S") -> dict[str, Any]:
    return {
        "id": turn_id,
        "sessionId": session_id,
        "startedAt": started,
        "createdAt": started,
        "completedAt": completed,
        "lifecycleOnly": False,
    }


def question(
    message_id: str, turn_id: str, pending_id: str, status: str = "PENDING", session_id: str = "S"
) -> dict[str, Any]:
    return {
        "id": message_id,
        "sessionId": session_id,
        "turnId": turn_id,
        "kind": "clarification_request",
        "author": "agent",
        "content": "Which one?",
        "createdAt": "2026-08-14T10:00:00Z",
        "clarification": {
            "pendingId": pending_id,
            "questionId": "q1",
            "title": None,
            "prompt": "Which one?",
            "options": [],
            "multiSelect": False,
            "status": status,
            "agentDisconnected": False,
            "response": None,
        },
    }


def permission_request(message_id: str, turn_id: str, session_id: str = "S") -> dict[str, Any]:
    """A permission request as ``sessionMessages`` lists it: its state is not part of a message, so
    only a held projection tells whether it still waits."""
    return {
        "id": message_id,
        "sessionId": session_id,
        "turnId": turn_id,
        "kind": "permission_request",
        "author": "agent",
        "content": "Permission to use Bash",
        "createdAt": "2026-08-14T10:00:00Z",
        "clarification": None,
    }


def pending_message(kind: str, message_id: str, turn_id: str, pending_id: str) -> dict[str, Any]:
    """The message that asks ``kind``: a question of bundle ``pending_id``, or a permission request."""
    if kind == PERMISSION:
        return permission_request(message_id, turn_id)
    return question(message_id, turn_id, pending_id)


def active_ids(kind: str, pending_id: str) -> list[str]:
    """The active bundle ids ``session_pending`` reports while ``kind`` waits: a permission request is
    not a bundle of questions, so it names none."""
    return [pending_id] if kind == CLARIFICATION else []


def store_with(tasks: list[dict[str, Any]]) -> Store:
    store = Store()
    store.apply_tasks(tasks)
    return store
