"""Read use cases: tasks, sessions with their pending projection, turns and messages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from backend import faults
from backend.domain.errors import InvalidInput
from backend.domain.records import MessageRecord, SessionPending, SessionRecord, TaskRecord, TurnRecord
from backend.repository import messages, pending, tasks, turns
from backend.services.context import Deps

MAX_PAGE = 500
# Fault point: the pending-action derivation of a forced task-session list fails.
FAULT_DERIVE = "pending.derive"


@dataclass
class Reads:
    deps: Deps

    async def tasks(self, task_ids: Sequence[str] | None = None) -> list[TaskRecord]:
        async with self.deps.db.read() as conn:
            return await tasks.list_tasks(conn, task_ids)

    async def task(self, task_id: str) -> TaskRecord:
        async with self.deps.db.read() as conn:
            return await tasks.get_task(conn, task_id)

    async def session(self, session_id: str) -> SessionRecord:
        async with self.deps.db.read() as conn:
            return await tasks.get_session(conn, session_id)

    async def sessions_with_pending(
        self, task_ids: Sequence[str]
    ) -> tuple[list[SessionRecord], dict[str, SessionPending]]:
        """Sessions of many tasks and their projections: one statement whatever the count."""
        async with self.deps.db.read() as conn:
            faults.check(FAULT_DERIVE)
            pairs = await pending.sessions_with_pending(conn, task_ids)
        sessions = [s for s, _ in pairs]
        projections = {s.id: p for s, p in pairs}
        return sessions, projections

    async def pending_for_sessions(self, session_ids: Sequence[str]) -> dict[str, SessionPending]:
        async with self.deps.db.read() as conn:
            return await pending.pending_for_sessions(conn, session_ids)

    async def turn(self, turn_id: str) -> TurnRecord:
        async with self.deps.db.read() as conn:
            return await turns.get_turn(conn, turn_id)

    async def turns(self, session_id: str) -> list[TurnRecord]:
        async with self.deps.db.read() as conn:
            await tasks.get_session(conn, session_id)
            return await turns.visible_turns(conn, session_id)

    async def messages(self, session_id: str, *, first: int | None, after: str | None) -> list[MessageRecord]:
        limit = MAX_PAGE if first is None else first
        if not 1 <= limit <= MAX_PAGE:
            raise InvalidInput("first", f"must be between 1 and {MAX_PAGE}")
        async with self.deps.db.read() as conn:
            await tasks.get_session(conn, session_id)
            return await messages.page_messages(conn, session_id, first=limit, after=after)
