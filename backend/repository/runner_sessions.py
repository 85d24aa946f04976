"""What a runner token made: its task of each project folder and its session of each client session.

Both are claimed with an insert that does nothing on conflict, so two hooks that see a new session
at once (two processes, PostgreSQL) agree on the row that won: the loser finds it and drops what
it made for itself. SQLite serializes writers, so there the second one simply finds the first's.
"""

from __future__ import annotations

from sqlalchemy import Table, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.tables import runner_sessions, runner_tasks, task_sessions, tasks
from backend.domain.records import SessionRecord
from backend.repository import rows


def _insert(conn: AsyncConnection, table: Table) -> postgresql.Insert | sqlite.Insert:
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


async def scope(conn: AsyncConnection, token_id: str) -> tuple[frozenset[str], frozenset[str]]:
    """The tasks and the sessions a runner token made: what it reads, and where it acts."""
    task_ids = await conn.execute(select(runner_tasks.c.task_id).where(runner_tasks.c.token_id == token_id))
    session_ids = await conn.execute(
        select(runner_sessions.c.session_id).where(runner_sessions.c.token_id == token_id)
    )
    return frozenset(r.task_id for r in task_ids), frozenset(r.session_id for r in session_ids)


async def mapped_session(
    conn: AsyncConnection, token_id: str, client_session_id: str
) -> SessionRecord | None:
    """The session of that client session id, with its state; None on first sight."""
    row = (
        await conn.execute(
            select(task_sessions)
            .join(runner_sessions, runner_sessions.c.session_id == task_sessions.c.id)
            .where(
                runner_sessions.c.token_id == token_id,
                runner_sessions.c.client_session_id == client_session_id,
            )
        )
    ).first()
    return None if row is None else rows.session(row)


async def project_task(conn: AsyncConnection, token_id: str, project: str) -> str | None:
    row = (
        await conn.execute(
            select(runner_tasks.c.task_id).where(
                runner_tasks.c.token_id == token_id, runner_tasks.c.project == project
            )
        )
    ).first()
    return None if row is None else str(row.task_id)


async def claim_task(conn: AsyncConnection, token_id: str, project: str, task_id: str) -> bool:
    """Make `task_id` the token's task of the folder; False when another one already is."""
    statement = (
        _insert(conn, runner_tasks)
        .values(token_id=token_id, project=project, task_id=task_id, created_at=utcnow())
        .on_conflict_do_nothing()
    )
    return bool((await conn.execute(statement)).rowcount)


async def claim_session(
    conn: AsyncConnection, token_id: str, client_session_id: str, session_id: str
) -> bool:
    """Make `session_id` the token's session of that client session; False when another one is."""
    statement = (
        _insert(conn, runner_sessions)
        .values(
            token_id=token_id,
            client_session_id=client_session_id,
            session_id=session_id,
            created_at=utcnow(),
        )
        .on_conflict_do_nothing()
    )
    return bool((await conn.execute(statement)).rowcount)


async def remap_session(
    conn: AsyncConnection, token_id: str, client_session_id: str, old_session_id: str, new_session_id: str
) -> bool:
    """A client session that comes back after its session ended (a resumed conversation) gets a new
    one; False when another hook re-mapped it first."""
    result = await conn.execute(
        update(runner_sessions)
        .where(
            runner_sessions.c.token_id == token_id,
            runner_sessions.c.client_session_id == client_session_id,
            runner_sessions.c.session_id == old_session_id,
        )
        .values(session_id=new_session_id, created_at=utcnow())
    )
    return bool(result.rowcount)


async def discard_session(conn: AsyncConnection, session_id: str) -> None:
    """Drop a session a hook made for itself and lost to another hook's."""
    await conn.execute(delete(task_sessions).where(task_sessions.c.id == session_id))


async def discard_task(conn: AsyncConnection, task_id: str) -> None:
    """Drop a task a hook made for itself and lost to another hook's (before anything was in it)."""
    await conn.execute(delete(tasks).where(tasks.c.id == task_id))
