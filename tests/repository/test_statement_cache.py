"""Statements are cached by shape; the JSON metadata keys are part of the shape."""

from __future__ import annotations

from sqlalchemy import select, update

from backend.db.engine import Database
from backend.db.sqlfuncs import json_text, json_update
from backend.db.tables import task_session_messages as M
from backend.repository import messages, tasks, turns


async def test_statements_that_differ_only_in_a_metadata_key_never_share_a_compiled_form(
    db: Database,
) -> None:
    async with db.write() as conn:
        task = await tasks.create_task(conn, "t")
        session = await tasks.create_session(conn, task.id, is_primary=True, input_capable=True)
        turn = await turns.insert_turn(conn, session.id)
        row = await messages.insert_message(
            conn,
            session_id=session.id,
            turn_id=turn.id,
            kind="message",
            author="agent",
            content="x",
            metadata={"a": "1", "b": "2"},
        )
    async with db.read() as conn:
        # Same statement shape, different key: each must read its own key.
        first = (await conn.execute(select(json_text(M.c.metadata, "a")).where(M.c.id == row.id))).scalar()
        second = (await conn.execute(select(json_text(M.c.metadata, "b")).where(M.c.id == row.id))).scalar()
    assert (first, second) == ("1", "2")
    async with db.write() as conn:
        # A cached update takes its new values afresh, and its keys stay its own.
        for key, value in (("a", "3"), ("b", "4")):
            await conn.execute(
                update(M).where(M.c.id == row.id).values(metadata=json_update(M.c.metadata, {key: value}))
            )
        await conn.execute(
            update(M).where(M.c.id == row.id).values(metadata=json_update(M.c.metadata, {"a": "5"}))
        )
    async with db.read() as conn:
        stored = (await messages.get_messages(conn, [row.id]))[row.id].metadata
    assert (stored["a"], stored["b"]) == ("5", "4")
