"""The one rule's pending tests find a turn's pending rows through the partial index of pending rows,
so their cost does not grow with the answered history of the turn (a long session asks hundreds of
questions in one turn)."""

from __future__ import annotations

from sqlalchemy import literal, select, text

from backend.db.engine import Database, utcnow
from backend.db.tables import task_session_messages, task_sessions, tasks
from backend.domain.states import MESSAGE_KIND_CLARIFICATION
from backend.repository.authority import has_pending_kind


async def test_pending_rows_of_a_turn_are_found_through_the_partial_index(db: Database) -> None:
    now = utcnow()
    async with db.write() as conn:
        await conn.execute(tasks.insert().values(id="t1", title="t", created_at=now, updated_at=now))
        await conn.execute(
            task_sessions.insert().values(
                id="s1",
                task_id="t1",
                state="RUNNING",
                is_primary=True,
                input_capable=True,
                pending_seq=0,
                created_at=now,
                updated_at=now,
            )
        )
        answered = [
            {
                "id": f"m{i:04d}",
                "session_id": "s1",
                "turn_id": "turn1",
                "type": MESSAGE_KIND_CLARIFICATION,
                "author": "agent",
                "content": "?",
                "metadata": {"pending_id": f"p{i}", "status": "answered"},
                "created_at": now,
                "updated_at": now,
            }
            for i in range(400)
        ]
        await conn.execute(task_session_messages.insert(), answered)
        await conn.execute(text("ANALYZE"))
    pending = select(has_pending_kind(literal("s1"), literal("turn1"), MESSAGE_KIND_CLARIFICATION))
    sql = str(pending.compile(dialect=db.engine.dialect, compile_kwargs={"literal_binds": True}))
    explain = "EXPLAIN QUERY PLAN " if db.is_sqlite else "EXPLAIN "
    async with db.read() as conn:
        plan = "\n".join(str(row[-1]) for row in await conn.execute(text(explain + sql)))
    assert "ix_messages_pending_turn" in plan, plan
