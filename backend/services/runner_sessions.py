"""What a runner token does for an agent client's hooks (Claude Code, Codex): its sessions, their turns
and their permission requests.

A hook names the client's session (`session_id`) and the folder it runs in (`cwd`). The runner's
session of that client session is created on first sight, under the runner's task of that folder
(made with the first session there, titled after the folder, `Task.project` set to it, granted to
the person who issued the token). A client session that comes back after its session ended (a
resumed conversation) gets a new session under the same task.

A permission request asked this way belongs to the client's terminal as soon as nobody decides it in
time: it is then closed at once (its card and its notifications close) instead of staying answerable,
and so is one whose hook went away mid-wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from backend.domain.errors import BrokenInvariant, InvalidInput, InvalidState, present
from backend.domain.events import EventKind
from backend.domain.lifecycle import Asked, WaitOutcome
from backend.domain.names import plain_name
from backend.domain.records import SessionRecord
from backend.domain.states import TERMINAL_SESSION_STATES, SessionState
from backend.repository import access as access_repo
from backend.repository import runner_sessions as repo
from backend.repository import tasks, turns
from backend.services.access import Access
from backend.services.bounded import bounded
from backend.services.context import Deps
from backend.services.operations import MAX_PROJECT, MAX_TITLE, Operations
from backend.services.pending.actions import PendingActions
from backend.services.pending.core import trusted
from backend.services.permissions import Permissions
from backend.services.uow import Work, uow

log = logging.getLogger("turnwise.runner")

MAX_CLIENT_SESSION_ID = 200
# A runner's wait ends this long before the lifecycle's own (TURNWISE_MAX_WAIT_SECONDS), so that it
# is the runner that closes the request, while its waiter still holds it.
CLOSE_MARGIN_SECONDS = 5.0
# While a decision is being handed to the waiter, closing is refused: ask again this often.
CLOSE_RETRY_SECONDS = 0.25


class RunnerEvent(enum.StrEnum):
    SESSION_START = "SESSION_START"  # the session's agent runs
    USER_PROMPT_SUBMIT = "USER_PROMPT_SUBMIT"  # new work: a new turn, older pending actions inert
    STOP = "STOP"  # the agent finished responding: its turn completes
    SESSION_END = "SESSION_END"  # the session is over (COMPLETED)


@dataclass(frozen=True, slots=True)
class Runner:
    """The caller: a runner token and the person who issued it."""

    token_id: str
    user_id: str


def folder_title(project: str) -> str:
    """A task's title for a folder: its last part (`/home/ann/src/shop` -> `shop`)."""
    parts = [p for p in project.replace("\\", "/").split("/") if p]
    return (parts[-1] if parts else project)[:MAX_TITLE]


def _client_session_id(value: str) -> str:
    value = plain_name("clientSessionId", value).strip()
    if not value or len(value) > MAX_CLIENT_SESSION_ID:
        raise InvalidInput("clientSessionId", f"must be 1-{MAX_CLIENT_SESSION_ID} characters")
    return value


def _project(value: str) -> str:
    value = plain_name("project", value).strip()
    if not value or len(value) > MAX_PROJECT:
        raise InvalidInput("project", f"must be 1-{MAX_PROJECT} characters")
    return value


@dataclass
class RunnerSessions:
    deps: Deps
    operations: Operations
    permissions: Permissions
    pending: PendingActions
    access: Access
    _background: set[asyncio.Task[Any]] = field(default_factory=set)

    # --- the session of a client session ----------------------------------------------------------

    async def ensure(self, runner: Runner, client_session_id: str, project: str) -> SessionRecord:
        """The runner's live session of that client session, made (with its folder's task) on first
        sight, or anew when the one it had ended. Two hooks at once agree on one."""
        client_session_id = _client_session_id(client_session_id)
        project = _project(project)
        async with self.deps.db.read() as conn:
            session = await repo.mapped_session(conn, runner.token_id, client_session_id)
        if session is not None and session.state not in TERMINAL_SESSION_STATES:
            return session
        async with uow(self.deps) as w:
            session, made = await self._map(w, runner, client_session_id, project)
        if made:
            await self.access.runner_scope_changed()
            log.info(
                "runner session made",
                extra={"event": "runner.session_made", "session_id": session.id, "task_id": session.task_id},
            )
        return session

    async def _map(
        self, w: Work, runner: Runner, client_session_id: str, project: str
    ) -> tuple[SessionRecord, bool]:
        conn = w.conn
        current = await repo.mapped_session(conn, runner.token_id, client_session_id)
        if current is not None and current.state not in TERMINAL_SESSION_STATES:
            return current, False  # another hook made it meanwhile
        task_id, made_task = await self._task(conn, runner, project)
        session = await tasks.create_session(conn, task_id, is_primary=True, input_capable=True)
        await tasks.set_session_state(conn, session.id, SessionState.RUNNING.value)
        if current is None:
            won = await repo.claim_session(conn, runner.token_id, client_session_id, session.id)
        else:
            won = await repo.remap_session(conn, runner.token_id, client_session_id, current.id, session.id)
        if not won:
            await repo.discard_session(conn, session.id)
            if made_task:
                await repo.discard_task(conn, task_id)
            found = await repo.mapped_session(conn, runner.token_id, client_session_id)
            return present(found, f"runner session of {client_session_id!r}"), False
        w.touch(session.id, task_id=task_id)
        w.publish(task_id, session.id, EventKind.SESSION_STATE)
        return await tasks.get_session(conn, session.id), True

    async def _task(self, conn: AsyncConnection, runner: Runner, project: str) -> tuple[str, bool]:
        """The runner's task of the folder, and whether this call made it."""
        found = await repo.project_task(conn, runner.token_id, project)
        if found is not None:
            return found, False
        task = await tasks.create_task(conn, folder_title(project), project=project)
        if not await repo.claim_task(conn, runner.token_id, project, task.id):
            await repo.discard_task(conn, task.id)
            return present(await repo.project_task(conn, runner.token_id, project), "runner task"), False
        # The person who issued the token sees and answers what their agents ask there.
        await access_repo.grant_task(conn, runner.user_id, task.id)
        return task.id, True

    # --- turns and state --------------------------------------------------------------------------

    async def event(
        self, runner: Runner, client_session_id: str, project: str, event: RunnerEvent
    ) -> SessionRecord | None:
        """What a hook event means for the session; None only for the end of a session never seen."""
        if event == RunnerEvent.SESSION_END:
            return await self._end(runner, client_session_id)
        session = await self.ensure(runner, client_session_id, project)
        if event == RunnerEvent.USER_PROMPT_SUBMIT:
            await self.operations.start_turn(session.id)
        elif event == RunnerEvent.STOP:
            await self._complete_current_turn(session.id)
        return await self._session(session.id)

    async def _end(self, runner: Runner, client_session_id: str) -> SessionRecord | None:
        client_session_id = _client_session_id(client_session_id)
        async with self.deps.db.read() as conn:
            session = await repo.mapped_session(conn, runner.token_id, client_session_id)
        if session is None or session.state in TERMINAL_SESSION_STATES:
            return session
        try:
            return await self.operations.set_session_state(session.id, SessionState.COMPLETED)
        except InvalidState:  # another hook ended it first
            return await self._session(session.id)

    async def _complete_current_turn(self, session_id: str) -> None:
        async with self.deps.db.read() as conn:
            turn_id = await turns.current_turn(conn, session_id)
            turn = None if turn_id is None else await turns.get_turn(conn, turn_id)
        if turn is None or turn.completed_at is not None:
            return  # no work was reported (the hooks came in mid-session), or it already completed
        with contextlib.suppress(InvalidState):  # completed meanwhile
            await self.operations.complete_turn(turn.id)

    async def _session(self, session_id: str) -> SessionRecord:
        async with self.deps.db.read() as conn:
            return await tasks.get_session(conn, session_id)

    # --- permission requests ----------------------------------------------------------------------

    def wait_seconds(self, requested: float | None) -> float:
        limit = self.deps.settings.max_wait_seconds
        cap = max(limit - CLOSE_MARGIN_SECONDS, limit / 2)
        if requested is None:
            return cap
        if not requested > 0:
            raise InvalidInput("waitSeconds", "must be greater than 0")
        return min(float(requested), cap)

    async def ask_permission(
        self,
        runner: Runner,
        client_session_id: str,
        project: str,
        tool_name: Any,
        tool_input: Any,
        *,
        context: str | None = None,
        wait_seconds: float | None = None,
    ) -> AsyncGenerator[WaitOutcome, None]:
        """Yields the lifecycle's outcomes (`Decided` alone when a rule decides; else `Asked`, then
        one of Answered / Rejected / Closed). Nobody deciding within the wait closes the request (its
        outcome is then `Closed`, cancelled); so does the caller going away mid-wait."""
        wait = self.wait_seconds(wait_seconds)
        session = await self.ensure(runner, client_session_id, project)
        # The lifecycle waits its longest; this wait ends first and closes the request itself.
        reader = _Reader(self.permissions.ask(session.id, tool_name, tool_input, None, context, None))
        pending_id: str | None = None
        ended = False
        try:
            outcome = await reader.next(None)
            if outcome is None:
                raise BrokenInvariant("a permission ask ended before its first outcome")
            if not isinstance(outcome, Asked):
                ended = True  # decided by a rule as it was asked
                yield outcome
                return
            pending_id = outcome.bundle.pending_id
            yield outcome
            final = await reader.next(wait)
            if final is None:
                final = await self._close(reader, pending_id)
            ended = True
            yield final
        finally:
            if not ended and pending_id is not None:
                # The hook went away (its client gave up on it, or a person pressed Esc): the
                # request is its terminal's now, closed while this waiter still holds it.
                with contextlib.suppress(Exception):
                    await bounded(
                        self._background,
                        self.pending.cancel(pending_id, authorize=trusted),
                        self.deps.settings.persistence_seconds,
                    )
            await reader.aclose()

    async def _close(self, reader: _Reader, pending_id: str) -> WaitOutcome:
        """Nobody decided in time: close the request while its waiter holds it, and return how the
        wait ended (a decision handed over as it closed still wins)."""
        while True:
            closed = await self.pending.cancel(pending_id, authorize=trusted)
            outcome = await reader.next(None if closed else CLOSE_RETRY_SECONDS)
            if outcome is not None:
                if closed:
                    log.info(
                        "runner permission closed: nobody decided in time",
                        extra={"event": "runner.permission_closed", "pending_id": pending_id},
                    )
                return outcome


class _Reader:
    """An ask's outcomes, each read in a task of its own: a subscription that ends (the client went
    away) cancels the reader of the outcomes, not the lifecycle's wait, which would detach the
    request before the runner could close it."""

    def __init__(self, stream: AsyncGenerator[WaitOutcome, None]) -> None:
        self.stream = stream
        self.step: asyncio.Future[WaitOutcome] | None = None

    async def next(self, within: float | None) -> WaitOutcome | None:
        """The next outcome; None when `within` seconds passed first (the read goes on)."""
        if self.step is None:
            self.step = asyncio.ensure_future(anext(self.stream))
        done, _ = await asyncio.wait({self.step}, timeout=within)
        if not done:
            return None
        step, self.step = self.step, None
        try:
            return step.result()
        except StopAsyncIteration:
            raise BrokenInvariant("a permission ask ended without an outcome") from None

    async def aclose(self) -> None:
        step, self.step = self.step, None
        if step is not None and not step.done():
            step.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await step
        await self.stream.aclose()
