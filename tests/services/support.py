"""Services over a real database and an in-process bus, plus raw seeding for states the API refuses."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from sqlalchemy import event, select

from backend.bus import EventBus
from backend.config import Settings
from backend.db.engine import Database
from backend.db.tables import task_status_summaries
from backend.repository import messages, turns
from backend.services.container import Services
from backend.services.context import Deps


@asynccontextmanager
async def services_for(db: Database, **settings: Any) -> AsyncIterator[Services]:
    bus = EventBus("memory://")
    await bus.connect()
    try:
        yield Services.build(Deps(db=db, bus=bus, settings=Settings(database_url=db.url, **settings)))
    finally:
        await bus.disconnect()


async def ask(db: Database, session_id: str, pending_id: str = "p1") -> str:
    """A pending clarification row in the session's current turn (what askClarification stores)."""
    async with db.write() as conn:
        turn_id = await turns.current_turn(conn, session_id)
        assert turn_id is not None
        row = await messages.insert_message(
            conn,
            session_id=session_id,
            turn_id=turn_id,
            kind="clarification_request",
            author="agent",
            content="which?",
            metadata={"pending_id": pending_id, "question_id": "q1", "status": "pending"},
        )
    return row.id


async def stored_summary(db: Database, task_id: str) -> dict[str, Any] | None:
    async with db.read() as conn:
        row = (
            await conn.execute(
                select(task_status_summaries).where(task_status_summaries.c.task_id == task_id)
            )
        ).first()
    return None if row is None else dict(row._mapping)


@contextmanager
def statements(db: Database) -> Iterator[list[str]]:
    """The SQL statements `db` runs in the block (not SQLite's own BEGIN)."""
    sql: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement not in ("BEGIN", "BEGIN IMMEDIATE"):
            sql.append(statement)

    event.listen(db.engine.sync_engine, "before_cursor_execute", record)
    try:
        yield sql
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", record)
