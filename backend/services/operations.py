"""Operator and agent writes on tasks, sessions, turns and messages."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from backend.domain.errors import InvalidInput, InvalidState, StaleGeneration
from backend.domain.events import EventKind
from backend.domain.names import plain_name
from backend.domain.records import MessageRecord, SessionRecord, TaskRecord, TurnRecord
from backend.domain.states import (
    AUTHORS,
    MESSAGE_KIND_MESSAGE,
    MESSAGE_KIND_PERMISSION,
    TERMINAL_SESSION_STATES,
    ClarificationStatus,
    SessionState,
)
from backend.repository import bundles, messages, reservations, tasks, turns
from backend.services.bounded import bounded
from backend.services.context import Deps
from backend.services.session_turn import session_and_turn
from backend.services.uow import uow

log = logging.getLogger("turnwise.operations")

T = TypeVar("T")

MAX_TITLE = 500
MAX_PROJECT = 1000  # a folder path; PostgreSQL's btree index holds it whole
MAX_CONTENT = 200_000
POSTABLE_KINDS = frozenset(
    {MESSAGE_KIND_MESSAGE, MESSAGE_KIND_PERMISSION, "status", "tool_call", "thinking", "error"}
)


def _text(field: str, value: str, *, limit: int, allow_empty: bool = False) -> str:
    if not allow_empty and not value.strip():
        raise InvalidInput(field, "must not be empty")
    if len(value) > limit:
        raise InvalidInput(field, f"must be at most {limit} characters")
    return value


class ReservationGate(Protocol):
    async def wait_resolved(self, session_id: str) -> bool:
        """Wait while a prompt reservation of the session is unresolved; True when one was."""
        ...


class _Reserved(Exception):
    """A reservation appeared between the wait and the session lock: wait again."""


@dataclass
class Operations:
    deps: Deps
    # The orchestrator: ready events wait for a live prompt reservation of their session.
    reservations: ReservationGate | None = None
    _background: set[asyncio.Task[Any]] = field(default_factory=set)

    async def _bounded(self, work: Awaitable[T]) -> T:
        """Run `work` in its own task with a finite deadline; a cancelled caller does not cancel it."""
        return await bounded(self._background, work, self.deps.settings.persistence_seconds)

    async def create_task(self, title: str, *, project: str | None = None) -> TaskRecord:
        title = plain_name("title", _text("title", title, limit=MAX_TITLE)).strip()
        if project is not None:
            project = plain_name("project", _text("project", project, limit=MAX_PROJECT)).strip()
        async with self.deps.db.write() as conn:
            return await tasks.create_task(conn, title, project=project)

    async def create_session(self, task_id: str, *, is_primary: bool, input_capable: bool) -> SessionRecord:
        async with self.deps.db.write() as conn:
            return await tasks.create_session(
                conn, task_id, is_primary=is_primary, input_capable=input_capable
            )

    async def set_session_state(self, session_id: str, state: SessionState) -> SessionRecord:
        """The transition, the expiry of the current turn's pending questions and their publication
        run in a context of their own with a finite deadline (TURNWISE_PERSISTENCE_SECONDS): a
        cancelled request neither aborts them half way nor holds them on a lock indefinitely."""
        return await self._bounded(self._set_session_state(session_id, state))

    async def _set_session_state(self, session_id: str, state: SessionState) -> SessionRecord:
        async with uow(self.deps, [session_id]) as w:
            session = await tasks.get_session(w.conn, session_id)
            if session.state in TERMINAL_SESSION_STATES and state != session.state:
                raise InvalidState(f"session {session_id!r} is {session.state}; a terminal state is final")
            expired: list[str] = []
            if state in TERMINAL_SESSION_STATES:
                expired = await bundles.expire_current_turn_bundles(w.conn, session_id)
            await tasks.set_session_state(w.conn, session_id, state.value)
            w.touch(session_id)
            updated = await tasks.get_session(w.conn, session_id)
            w.publish_messages(session.task_id, session_id, EventKind.MESSAGE_UPDATED, expired)
            w.publish(session.task_id, session_id, EventKind.SESSION_STATE)
        for message_id in expired:
            log.info("clarification expired", extra={"session_id": session_id, "message_id": message_id})
        # The unit bumped the sequence once at its commit, after this row was read.
        return replace(updated, pending_seq=updated.pending_seq + 1)

    async def start_turn(self, session_id: str, *, lifecycle_only: bool = False) -> TurnRecord:
        async with uow(self.deps, [session_id]) as w:
            session = await tasks.get_session(w.conn, session_id)
            if session.state in TERMINAL_SESSION_STATES:
                raise InvalidState(f"session {session_id!r} is {session.state}; no new turn can start")
            turn = await turns.insert_turn(
                w.conn, session_id, {"lifecycle_only": True} if lifecycle_only else {}
            )
            if not lifecycle_only:
                # The new turn is accepted work: older open turns end here, so they can never
                # outrank it again, and a waiting session is running.
                for _, closed_id in await turns.close_predecessors(w.conn, [turn.id]):
                    w.publish(session.task_id, session_id, EventKind.TURN_COMPLETED, turn_id=closed_id)
                await tasks.mark_running_on_new_turn(w.conn, session_id)
            w.touch(session_id)
            w.publish(session.task_id, session_id, EventKind.TURN_STARTED, turn_id=turn.id)
        return turn

    async def complete_turn(self, turn_id: str, generation: str | None = None) -> TurnRecord:
        """The agent's ready event. `generation` is the prompt generation it ran (PromptDispatch.
        generation: the id of the turn the prompt opened). A ready event overlapping a prompt
        reservation waits for it, then must prove its generation still owns the session; without a
        generation it is dropped, since ownership cannot be proven."""
        if generation is not None and not generation.strip():
            raise InvalidInput("generation", "must not be empty")
        overlapped = False
        for _ in range(3):
            if self.reservations is not None:
                async with self.deps.db.read() as conn:
                    session_id = (await turns.get_turn(conn, turn_id)).session_id
                overlapped = await self.reservations.wait_resolved(session_id) or overlapped
            try:
                return await self._complete_turn(turn_id, generation, overlapped)
            except _Reserved:
                overlapped = True
        raise InvalidState(f"turn {turn_id!r}: prompt reservations keep overlapping; try again")

    async def _complete_turn(self, turn_id: str, generation: str | None, overlapped: bool) -> TurnRecord:
        async with uow(self.deps) as w:
            conn = w.conn
            turn = await turns.get_turn(conn, turn_id)
            await w.lock([turn.session_id])
            if self.reservations is not None:
                live = await reservations.live_reservation(conn, turn.session_id)
                if live is not None and live != turn_id:
                    raise _Reserved
            if overlapped or generation is not None:
                # Revalidate the prompt generation under the lock, before touching turn state.
                if generation is None:
                    raise StaleGeneration(
                        f"turn {turn_id!r}: a ready event without a generation overlapped a prompt "
                        "reservation and was dropped"
                    )
                current = await turns.current_turn(conn, turn.session_id)
                if generation != turn.id or current != turn.id:
                    raise StaleGeneration(
                        f"turn {turn_id!r}: prompt generation {generation!r} no longer owns the session"
                    )
            # Turn teardown detaches the turn's live questions while it is still current (a no-op
            # when a newer turn already owns the session, or when they are already detached).
            detached = await bundles.detach(conn, turn.session_id, turn_id=turn.id)
            turn = await turns.complete_turn(conn, await turns.get_turn(conn, turn_id))
            session = await tasks.get_session(conn, turn.session_id)
            w.touch(turn.session_id)
            w.publish_messages(
                session.task_id, session.id, EventKind.MESSAGE_UPDATED, [m for m, _ in detached]
            )
            w.publish(session.task_id, session.id, EventKind.TURN_COMPLETED, turn_id=turn.id)
        for _, pending_id in detached:
            log.info(
                "pending action detached",
                extra={"event": "pending.detached", "pending_id": pending_id, "reason": "teardown"},
            )
        return turn

    async def post_message(self, session_id: str, *, content: str, author: str, kind: str) -> MessageRecord:
        content = _text("content", content, limit=MAX_CONTENT)
        if author not in AUTHORS:
            raise InvalidInput("author", f"must be one of {', '.join(sorted(AUTHORS))}")
        if kind not in POSTABLE_KINDS:
            raise InvalidInput("kind", f"must be one of {', '.join(sorted(POSTABLE_KINDS))}")
        metadata = {"status": ClarificationStatus.PENDING.value} if kind == MESSAGE_KIND_PERMISSION else {}
        async with uow(self.deps, [session_id]) as w:
            # A message needs a turn to belong to: it may open the session's first turn.
            session, turn_id = await session_and_turn(w, session_id, "messages")
            message = await messages.insert_message(
                w.conn,
                session_id=session_id,
                turn_id=turn_id,
                kind=kind,
                author=author,
                content=content,
                metadata=metadata,
            )
            w.touch(session_id)
            w.publish(session.task_id, session_id, EventKind.MESSAGE_ADDED, message_id=message.id)
        return message

    async def delete_message(self, message_id: str) -> bool:
        async with uow(self.deps) as w:
            message = await messages.get_message(w.conn, message_id)
            await w.lock([message.session_id])
            session = await tasks.get_session(w.conn, message.session_id)
            await messages.delete_message(w.conn, message_id)
            w.touch(message.session_id)
            w.publish(session.task_id, session.id, EventKind.MESSAGE_DELETED, message_id=message_id)
        return True
