"""Tasks and their sessions: creation, lookup, state."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import bindparam, exists, not_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.fast_path import Prepared
from backend.db.tables import task_session_messages, task_sessions, tasks
from backend.domain.errors import NotFound
from backend.domain.ids import new_id
from backend.domain.records import SessionRecord, TaskRecord
from backend.domain.states import SessionState
from backend.repository import bumped, rows
from backend.repository.authority import active_pending_rows


async def create_task(
    conn: AsyncConnection, title: str, workflow_step: str = "todo", *, project: str | None = None
) -> TaskRecord:
    now = utcnow()
    record = TaskRecord(new_id(), title, workflow_step, now, now, project)
    await conn.execute(
        tasks.insert().values(
            id=record.id,
            title=title,
            workflow_step=workflow_step,
            created_at=now,
            updated_at=now,
            project=project,
        )
    )
    return record


async def get_task(conn: AsyncConnection, task_id: str) -> TaskRecord:
    row = (await conn.execute(select(tasks).where(tasks.c.id == task_id))).first()
    if row is None:
        raise NotFound("task", task_id)
    return rows.task(row)


async def task_titles(conn: AsyncConnection, task_ids: Sequence[str]) -> dict[str, str]:
    if not task_ids:
        return {}
    result = await conn.execute(select(tasks.c.id, tasks.c.title).where(tasks.c.id.in_(list(task_ids))))
    return {r.id: r.title for r in result}


async def list_tasks(conn: AsyncConnection, task_ids: Sequence[str] | None = None) -> list[TaskRecord]:
    query = select(tasks).order_by(tasks.c.created_at.desc(), tasks.c.id.desc())
    if task_ids is not None:
        query = query.where(tasks.c.id.in_(list(task_ids)))
    return [rows.task(r) for r in await conn.execute(query)]


async def set_workflow_step(conn: AsyncConnection, task_id: str, step: str) -> TaskRecord:
    result = await conn.execute(
        update(tasks).where(tasks.c.id == task_id).values(workflow_step=step, updated_at=utcnow())
    )
    if result.rowcount == 0:
        raise NotFound("task", task_id)
    return await get_task(conn, task_id)


async def create_session(
    conn: AsyncConnection, task_id: str, *, is_primary: bool, input_capable: bool
) -> SessionRecord:
    await get_task(conn, task_id)
    now = utcnow()
    if is_primary:
        await conn.execute(
            update(task_sessions)
            .where(task_sessions.c.task_id == task_id, task_sessions.c.is_primary.is_(True))
            .values(is_primary=False, updated_at=now)
        )
    record = SessionRecord(
        new_id(), task_id, SessionState.CREATED.value, is_primary, input_capable, 0, now, now
    )
    await conn.execute(
        task_sessions.insert().values(
            id=record.id,
            task_id=task_id,
            state=record.state,
            is_primary=is_primary,
            input_capable=input_capable,
            pending_seq=0,
            created_at=now,
            updated_at=now,
        )
    )
    return record


_GET_SESSION = select(task_sessions).where(task_sessions.c.id == bindparam("b_session"))
_TASKS_OF_SESSIONS = (
    select(task_sessions.c.task_id)
    .where(task_sessions.c.id.in_(bindparam("b_session_ids", expanding=True)))
    .distinct()
)


async def task_ids_of_sessions(conn: AsyncConnection, session_ids: Sequence[str]) -> list[str]:
    if not session_ids:
        return []
    result = await conn.execute(_TASKS_OF_SESSIONS, {"b_session_ids": sorted(set(session_ids))})
    return sorted(r.task_id for r in result)


async def get_session(conn: AsyncConnection, session_id: str) -> SessionRecord:
    row = (await conn.execute(_GET_SESSION, {"b_session": session_id})).first()
    if row is None:
        raise NotFound("session", session_id)
    return rows.session(row)


async def list_sessions(conn: AsyncConnection, task_ids: Sequence[str]) -> list[SessionRecord]:
    query = (
        select(task_sessions)
        .where(task_sessions.c.task_id.in_(list(task_ids)))
        .order_by(task_sessions.c.created_at, task_sessions.c.id)
    )
    return [rows.session(r) for r in await conn.execute(query)]


_B_SESSION = bindparam("b_session", type_=task_sessions.c.id.type)
_SET_STATE = (
    update(task_sessions)
    .where(task_sessions.c.id == _B_SESSION)
    .values(state=bindparam("b_state"), updated_at=bindparam("b_now"))
)
# The same, and the session's sequence bump of its unit of work in the same statement.
_SET_STATE_BUMP = _SET_STATE.values(pending_seq=task_sessions.c.pending_seq + 1)
_BLOCKING = task_session_messages.alias("blocking")
# The session `b_session` waits for input but no active clarification blocks it any more.
WAITING_AND_UNBLOCKED = (
    task_sessions.c.state == SessionState.WAITING_FOR_INPUT.value,
    not_(
        exists().where(
            _BLOCKING.c.session_id == _B_SESSION,
            active_pending_rows(_BLOCKING, task_sessions.c.state, session_id=_B_SESSION),
        )
    ),
)
_MARK_RUNNING_WHEN_UNBLOCKED = (
    update(task_sessions)
    .where(task_sessions.c.id == _B_SESSION, *WAITING_AND_UNBLOCKED)
    .values(
        state=SessionState.RUNNING.value, updated_at=bindparam("b_now", type_=task_sessions.c.updated_at.type)
    )
)
_MARK_RUNNING_WHEN_UNBLOCKED_BUMP = _MARK_RUNNING_WHEN_UNBLOCKED.values(
    pending_seq=task_sessions.c.pending_seq + 1
)
# Run on the driver connection (backend/db/prepared.py): the hot path's statements.
_SET_STATE_P = Prepared(_SET_STATE)
_SET_STATE_BUMP_P = Prepared(_SET_STATE_BUMP)
_MARK_RUNNING_P = Prepared(_MARK_RUNNING_WHEN_UNBLOCKED.returning(task_sessions.c.id))
_MARK_RUNNING_BUMP_P = Prepared(_MARK_RUNNING_WHEN_UNBLOCKED_BUMP.returning(task_sessions.c.id))


async def set_session_state(
    conn: AsyncConnection, session_id: str, state: str, *, bump: bool = False
) -> None:
    """`bump`: also bump the session's pending sequence, noted for the unit of work (`bumped`)."""
    params = {"b_session": session_id, "b_state": state, "b_now": utcnow()}
    await (_SET_STATE_BUMP_P if bump else _SET_STATE_P).rows(conn, params)
    if bump:
        bumped.note(conn, session_id)


async def mark_running_when_unblocked(conn: AsyncConnection, session_id: str, *, bump: bool = False) -> bool:
    """WAITING_FOR_INPUT -> RUNNING once the session has no active clarification left (its last
    question was answered, skipped, resumed or cancelled). True when the state changed (`bump`: and
    then its pending sequence was bumped too, noted for the unit of work)."""
    changed = await (_MARK_RUNNING_BUMP_P if bump else _MARK_RUNNING_P).rows(
        conn, {"b_session": session_id, "b_now": utcnow()}
    )
    if bump and changed:
        bumped.note(conn, session_id)
    return len(changed) == 1


async def mark_running_on_new_turn(conn: AsyncConnection, session_id: str) -> bool:
    """A new conversational turn supersedes the questions a waiting session waited on: it runs.
    Other states are the operator's to set."""
    result = await conn.execute(
        update(task_sessions)
        .where(
            task_sessions.c.id == session_id,
            task_sessions.c.state == SessionState.WAITING_FOR_INPUT.value,
        )
        .values(state=SessionState.RUNNING.value, updated_at=utcnow())
    )
    return result.rowcount == 1


# Built once per process: one statement bumps every session a unit of work touched.
_BUMP = (
    update(task_sessions)
    .where(task_sessions.c.id.in_(bindparam("session_ids", expanding=True)))
    .values(pending_seq=task_sessions.c.pending_seq + 1)
)
_BUMP_ONE = Prepared(
    update(task_sessions)
    .where(task_sessions.c.id == bindparam("session_id", type_=task_sessions.c.id.type))
    .values(pending_seq=task_sessions.c.pending_seq + 1)
    .returning(task_sessions.c.id)
)


async def bump_pending_seqs(conn: AsyncConnection, session_ids: Sequence[str]) -> None:
    """Every write that can change these sessions' projections bumps them once, in one statement,
    inside its transaction (the unit of work does it at commit)."""
    if not session_ids:
        return
    ids = sorted(set(session_ids))
    if len(ids) == 1:
        await _BUMP_ONE.rows(conn, {"session_id": ids[0]})
        return
    await conn.execute(_BUMP, {"session_ids": ids})


async def sessions_by_id(conn: AsyncConnection, session_ids: Iterable[str]) -> list[SessionRecord]:
    ids = sorted(set(session_ids))
    if not ids:
        return []
    query = select(task_sessions).where(task_sessions.c.id.in_(ids))
    return [rows.session(r) for r in await conn.execute(query)]
