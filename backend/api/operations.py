"""Queries and mutations over tasks, sessions, turns and messages (the first slice of the contract)."""

from __future__ import annotations

import strawberry
from strawberry.types import Info

from backend.api.context import Context
from backend.api.types import Message, SessionState, Task, TaskSession, Turn
from backend.domain.errors import NotFound
from backend.domain.states import SessionState as DomainSessionState


@strawberry.type
class OperationQueries:
    @strawberry.field(description="Task list / boot payload.")
    async def tasks(self, info: Info[Context, None]) -> list[Task]:
        info.context.principal.require_reader()
        return [Task(record=t) for t in await info.context.services.reads.tasks()]

    @strawberry.field
    async def task(self, info: Info[Context, None], id: strawberry.ID) -> Task | None:
        info.context.principal.require_reader()
        try:
            return Task(record=await info.context.services.reads.task(str(id)))
        except NotFound:
            return None

    @strawberry.field(description="Forced, authoritative load of a task's sessions with their projections.")
    async def task_sessions(self, info: Info[Context, None], task_id: strawberry.ID) -> list[TaskSession]:
        info.context.principal.require_reader()
        await info.context.services.reads.task(str(task_id))
        sessions, projections = await info.context.services.reads.sessions_with_pending([str(task_id)])
        for s in sessions:
            if s.id not in projections:
                raise LookupError(f"no projection for session {s.id}")
            info.context.pending_by_session.prime(s.id, projections[s.id])
        return [TaskSession(record=s) for s in sessions]

    @strawberry.field(description="Visible durable turn history, ascending.")
    async def session_turns(self, info: Info[Context, None], session_id: strawberry.ID) -> list[Turn]:
        info.context.principal.require_reader()
        return [Turn.of(t) for t in await info.context.services.reads.turns(str(session_id))]

    @strawberry.field
    async def session_messages(
        self,
        info: Info[Context, None],
        session_id: strawberry.ID,
        first: int | None = None,
        after: strawberry.ID | None = None,
    ) -> list[Message]:
        info.context.principal.require_reader()
        records = await info.context.services.reads.messages(
            str(session_id), first=first, after=None if after is None else str(after)
        )
        return [Message.of(m) for m in records]


@strawberry.type
class OperationMutations:
    @strawberry.mutation
    async def create_task(self, info: Info[Context, None], title: str) -> Task:
        info.context.principal.require_admin()
        return Task(record=await info.context.services.operations.create_task(title))

    @strawberry.mutation
    async def create_session(
        self,
        info: Info[Context, None],
        task_id: strawberry.ID,
        is_primary: bool = False,
        input_capable: bool = True,
    ) -> TaskSession:
        info.context.principal.require_admin()
        record = await info.context.services.operations.create_session(
            str(task_id), is_primary=is_primary, input_capable=input_capable
        )
        return TaskSession(record=record)

    @strawberry.mutation
    async def set_session_state(
        self, info: Info[Context, None], session_id: strawberry.ID, state: SessionState
    ) -> TaskSession:
        info.context.principal.require_admin()
        record = await info.context.services.operations.set_session_state(
            str(session_id), DomainSessionState(state.value)
        )
        return TaskSession(record=record)

    @strawberry.mutation
    async def start_turn(
        self, info: Info[Context, None], session_id: strawberry.ID, lifecycle_only: bool = False
    ) -> Turn:
        info.context.principal.require_admin()
        return Turn.of(
            await info.context.services.operations.start_turn(str(session_id), lifecycle_only=lifecycle_only)
        )

    @strawberry.mutation
    async def complete_turn(
        self, info: Info[Context, None], turn_id: strawberry.ID, generation: str | None = None
    ) -> Turn:
        info.context.principal.require_admin()
        return Turn.of(await info.context.services.operations.complete_turn(str(turn_id)))

    @strawberry.mutation
    async def post_message(
        self,
        info: Info[Context, None],
        session_id: strawberry.ID,
        content: str,
        author: str = "agent",
        kind: str = "message",
    ) -> Message:
        info.context.principal.require_admin()
        record = await info.context.services.operations.post_message(
            str(session_id), content=content, author=author, kind=kind
        )
        return Message.of(record)

    @strawberry.mutation
    async def delete_message(self, info: Info[Context, None], message_id: strawberry.ID) -> bool:
        info.context.principal.require_admin()
        return await info.context.services.operations.delete_message(str(message_id))
