"""Queries and mutations over tasks, sessions, turns and messages (the first slice of the contract)."""

from __future__ import annotations

from typing import Annotated

import strawberry
from strawberry.types import Info

from backend.api import access
from backend.api.context import Context
from backend.api.types import Message, Task, TaskSession, Turn
from backend.domain.errors import NotFound
from backend.domain.states import SessionState

FAULT_TASKS = "api.tasks"


async def require_session_read(info: Info[Context, None], session_id: str) -> None:
    """NotFound (naming the session only) unless the caller may read the session's task."""
    principal = info.context.principal
    if access.readable_task_ids(principal) is None:
        return
    try:
        task_id = await info.context.services.access.session_owner(session_id)
    except NotFound:
        raise NotFound("session", session_id) from None
    access.require_session_read(principal, session_id, task_id)


async def require_session_agent(info: Info[Context, None], session_id: str) -> None:
    principal = info.context.principal
    if principal.is_admin or (principal.role == "agent" and principal.session_id == session_id):
        return
    try:
        task_id: str | None = await info.context.services.access.session_owner(session_id)
    except NotFound:
        task_id = None
    access.require_session_agent(principal, session_id, task_id)


@strawberry.type
class OperationQueries:
    @strawberry.field(description="Task list / boot payload.")
    async def tasks(self, info: Info[Context, None]) -> list[Task]:
        readable = access.readable_task_ids(info.context.principal)
        if readable is not None and not readable:
            return []
        if FAULT_TASKS in info.context.services.deps.settings.fault_points:
            # Test-only seam: an unexpected failure inside a resolver, to prove it is masked.
            raise RuntimeError("injected fault with internals: password=hunter2 at /srv/secret")
        records = await info.context.services.reads.tasks(None if readable is None else sorted(readable))
        return await Task.load(info, records)

    @strawberry.field
    async def task(self, info: Info[Context, None], id: strawberry.ID) -> Task | None:
        if not access.can_read_task(info.context.principal, str(id)):
            return None
        try:
            record = await info.context.services.reads.task(str(id))
        except NotFound:
            return None
        loaded = await Task.load(info, [record])
        return loaded[0] if loaded else None

    @strawberry.field(description="Forced, authoritative load of a task's sessions with their projections.")
    async def task_sessions(self, info: Info[Context, None], task_id: strawberry.ID) -> list[TaskSession]:
        access.require_task_read(info.context.principal, str(task_id))
        await info.context.services.reads.task(str(task_id))
        sessions, projections = await info.context.services.reads.sessions_with_pending([str(task_id)])
        for s in sessions:
            info.context.pending_by_session.prime(s.id, projections.get(s.id))
        return await TaskSession.load(info, sessions)

    @strawberry.field(description="Visible durable turn history, ascending.")
    async def session_turns(self, info: Info[Context, None], session_id: strawberry.ID) -> list[Turn]:
        await require_session_read(info, str(session_id))
        return [Turn.of(t) for t in await info.context.services.reads.turns(str(session_id))]

    @strawberry.field
    async def session_messages(
        self,
        info: Info[Context, None],
        session_id: strawberry.ID,
        first: int | None = None,
        after: strawberry.ID | None = None,
    ) -> list[Message]:
        await require_session_read(info, str(session_id))
        records = await info.context.services.reads.messages(
            str(session_id), first=first, after=None if after is None else str(after)
        )
        return [Message.of(m) for m in records]


@strawberry.type
class OperationMutations:
    @strawberry.mutation
    async def create_task(
        self,
        info: Info[Context, None],
        title: str,
        project: Annotated[
            str | None,
            strawberry.argument(
                description="The repository folder the task works in, e.g. its absolute path."
            ),
        ] = None,
    ) -> Task:
        access.require_admin(info.context.principal)
        record = await info.context.services.operations.create_task(title, project=project)
        (task,) = await Task.load(info, [record])
        return task

    @strawberry.mutation
    async def create_session(
        self,
        info: Info[Context, None],
        task_id: strawberry.ID,
        is_primary: bool = False,
        input_capable: bool = True,
    ) -> TaskSession:
        access.require_admin(info.context.principal)
        record = await info.context.services.operations.create_session(
            str(task_id), is_primary=is_primary, input_capable=input_capable
        )
        (session,) = await TaskSession.load(info, [record])
        return session

    @strawberry.mutation
    async def set_session_state(
        self, info: Info[Context, None], session_id: strawberry.ID, state: SessionState
    ) -> TaskSession:
        access.require_admin(info.context.principal)
        record = await info.context.services.operations.set_session_state(str(session_id), state)
        (session,) = await TaskSession.load(info, [record])
        return session

    @strawberry.mutation
    async def start_turn(
        self, info: Info[Context, None], session_id: strawberry.ID, lifecycle_only: bool = False
    ) -> Turn:
        await require_session_agent(info, str(session_id))
        return Turn.of(
            await info.context.services.operations.start_turn(str(session_id), lifecycle_only=lifecycle_only)
        )

    @strawberry.mutation
    async def complete_turn(
        self, info: Info[Context, None], turn_id: strawberry.ID, generation: str | None = None
    ) -> Turn:
        principal = info.context.principal
        if not principal.is_admin:
            try:
                task_id, session_id = await info.context.services.access.turn_owner(str(turn_id))
            except NotFound:
                raise NotFound("turn", str(turn_id)) from None
            try:
                access.require_session_agent(principal, session_id, task_id)
            except NotFound:
                raise NotFound("turn", str(turn_id)) from None
        return Turn.of(await info.context.services.operations.complete_turn(str(turn_id), generation))

    @strawberry.mutation
    async def post_message(
        self,
        info: Info[Context, None],
        session_id: strawberry.ID,
        content: str,
        author: str = "agent",
        kind: str = "message",
    ) -> Message:
        await require_session_agent(info, str(session_id))
        record = await info.context.services.operations.post_message(
            str(session_id), content=content, author=author, kind=kind
        )
        return Message.of(record)

    @strawberry.mutation
    async def delete_message(self, info: Info[Context, None], message_id: strawberry.ID) -> bool:
        access.require_admin(info.context.principal)
        return await info.context.services.operations.delete_message(str(message_id))
