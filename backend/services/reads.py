"""Read use cases: tasks, sessions with their pending projection, turns and messages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from backend import faults
from backend.domain.errors import InvalidInput, NotFound
from backend.domain.records import MessageRecord, SessionPending, SessionRecord, TaskRecord, TurnRecord
from backend.repository import messages, pending, tasks, turns
from backend.services.coalesce import Coalesced
from backend.services.context import Deps

MAX_PAGE = 500
# Fault point: the pending-action derivation of a forced task-session list fails.
FAULT_DERIVE = "pending.derive"


SessionsWithPending = tuple[list[SessionRecord], dict[str, SessionPending]]


@dataclass
class Reads:
    deps: Deps
    # What a subscription reads as it starts, coalesced across subscribers (`coalesce.py`): many
    # reconnecting at once cost a few statements, not one or two each.
    _tasks_now: Coalesced[str, list[TaskRecord]] = field(init=False, repr=False)
    _snapshots: Coalesced[str, SessionsWithPending] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._tasks_now = Coalesced(self.tasks)
        self._snapshots = Coalesced(self.sessions_with_pending)

    async def tasks(self, task_ids: Sequence[str] | None = None) -> list[TaskRecord]:
        async with self.deps.db.read() as conn:
            return await tasks.list_tasks(conn, task_ids)

    async def task(self, task_id: str) -> TaskRecord:
        async with self.deps.db.read() as conn:
            return await tasks.get_task(conn, task_id)

    async def session(self, session_id: str) -> SessionRecord:
        async with self.deps.db.read() as conn:
            return await tasks.get_session(conn, session_id)

    async def sessions_with_pending(self, task_ids: Sequence[str]) -> SessionsWithPending:
        """Sessions of many tasks and their projections: one statement whatever the count."""
        async with self.deps.db.read() as conn:
            faults.check(FAULT_DERIVE)
            pairs = await pending.sessions_with_pending(conn, task_ids)
        sessions = [s for s, _ in pairs]
        projections = {s.id: p for s, p in pairs}
        return sessions, projections

    async def require_task_coalesced(self, task_id: str) -> None:
        """NotFound unless the task exists, read as `task` would, in a read shared with other callers
        that asked meanwhile (one that starts after this call)."""
        if not any(t.id == task_id for t in await self._tasks_now.read([task_id])):
            raise NotFound("task", task_id)

    async def snapshot_coalesced(self, task_ids: Sequence[str]) -> SessionsWithPending:
        """`sessions_with_pending(task_ids)`, in a read shared with other callers that asked meanwhile
        (one that starts after this call)."""
        wanted = set(task_ids)
        sessions, projections = await self._snapshots.read(task_ids)
        mine = [s for s in sessions if s.task_id in wanted]
        return mine, {s.id: projections[s.id] for s in mine if s.id in projections}

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
