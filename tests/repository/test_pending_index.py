"""The pending rows of a turn are found through `open_pending_rows`, which the database's triggers
keep to exactly the rows the one rule calls pending, so the rule's pending tests do not grow with the
answered history of a turn (a long session asks hundreds of questions in one turn), while no index
of the message rows reads their status or claim: on PostgreSQL a claim and a settle are heap-only
updates."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sqlalchemy import delete, literal, select, text, update

from backend.db.engine import Database, utcnow
from backend.db.tables import open_pending_rows as OPEN
from backend.db.tables import task_session_messages as M
from backend.db.tables import task_session_turns, task_sessions, tasks
from backend.domain.states import MESSAGE_KIND_CLARIFICATION, MESSAGE_KIND_MESSAGE, MESSAGE_KIND_PERMISSION
from backend.repository import bundles, claims, message_fields, pending
from backend.repository.authority import has_pending_kind, is_pending_row


async def _session(
    db: Database,
    session_id: str = "s1",
    *,
    task_id: str | None = None,
    state: str = "RUNNING",
    turn: bool = False,
) -> None:
    """A session (with its own task, unless `task_id` names one already there; with `turn`, one open
    turn `turn<n>` for session `s<n>`)."""
    now = utcnow()
    async with db.write() as conn:
        if task_id is None:
            task_id = f"task-{session_id}"
            await conn.execute(tasks.insert().values(id=task_id, title="t", created_at=now, updated_at=now))
        await conn.execute(
            task_sessions.insert().values(
                id=session_id,
                task_id=task_id,
                state=state,
                is_primary=True,
                input_capable=True,
                pending_seq=0,
                created_at=now,
                updated_at=now,
            )
        )
        if turn:
            await conn.execute(
                task_session_turns.insert().values(
                    id=f"turn{session_id[1:]}", session_id=session_id, started_at=now, created_at=now
                )
            )


def _row(i: int, *, session_id: str = "s1", turn_id: str = "turn1", **metadata: Any) -> dict[str, Any]:
    now = utcnow()
    kind = metadata.pop("kind", MESSAGE_KIND_CLARIFICATION)
    return {
        "id": f"m{i:04d}",
        "session_id": session_id,
        "turn_id": turn_id,
        "type": kind,
        "author": "agent",
        "content": "?",
        **message_fields.values_of(metadata),
        "created_at": now,
        "updated_at": now,
    }


async def test_pending_rows_of_a_turn_are_found_through_the_open_rows(db: Database) -> None:
    await _session(db)
    async with db.write() as conn:
        answered = [_row(i, pending_id=f"p{i}", status="answered") for i in range(400)]
        await conn.execute(M.insert(), answered)
        await conn.execute(text("ANALYZE"))
    pending = select(has_pending_kind(literal("s1"), literal("turn1"), MESSAGE_KIND_CLARIFICATION))
    sql = str(pending.compile(dialect=db.engine.dialect, compile_kwargs={"literal_binds": True}))
    explain = "EXPLAIN QUERY PLAN " if db.is_sqlite else "EXPLAIN "
    async with db.read() as conn:
        plan = "\n".join(str(row[-1]) for row in await conn.execute(text(explain + sql)))
        assert not (await conn.execute(pending)).scalar()
    assert "open_pending_rows" in plan, plan
    assert "task_session_messages" not in plan, plan


async def _open(conn: Any) -> set[tuple[str, str, str, str]]:
    found = await conn.execute(select(OPEN.c.turn_id, OPEN.c.type, OPEN.c.session_id, OPEN.c.message_id))
    return {tuple(r) for r in found}


async def _by_rule(conn: Any) -> set[tuple[str, str, str, str]]:
    found = await conn.execute(select(M.c.turn_id, M.c.type, M.c.session_id, M.c.id).where(is_pending_row(M)))
    return {tuple(r) for r in found}


async def test_the_open_rows_are_exactly_the_rows_the_rule_calls_pending_after_any_write(
    db: Database,
) -> None:
    """Inserts, status changes (to and from pending, to the legacy empty status), bundle, turn and
    type changes and deletes, one at a time and many in one statement, of every kind of row: after
    each, the triggers' table equals the rule's condition over the message rows."""
    await _session(db)
    await _session(db, "s2")
    rng = random.Random(7)
    statuses = ["pending", "", None, "answered", "rejected", "expired", "cancelled", "Pending"]
    kinds = [MESSAGE_KIND_CLARIFICATION, MESSAGE_KIND_PERMISSION, MESSAGE_KIND_MESSAGE]
    ids: list[str] = []
    written = 0
    for step in range(120):
        async with db.write() as conn:
            choice = rng.random()
            if choice < 0.35 or not ids:
                i = written = written + 1
                metadata: dict[str, Any] = {"kind": rng.choice(kinds), "status": rng.choice(statuses)}
                if rng.random() < 0.8:
                    metadata["pending_id"] = rng.choice(["", f"p{i}"])
                await conn.execute(
                    M.insert().values(
                        _row(
                            i,
                            session_id=rng.choice(["s1", "s2"]),
                            turn_id=rng.choice(["t1", "t2"]),
                            **metadata,
                        )
                    )
                )
                ids.append(f"m{i:04d}")
            elif choice < 0.7:
                some = rng.sample(ids, min(len(ids), rng.randint(1, 3)))
                await conn.execute(update(M).where(M.c.id.in_(some)).values(status=rng.choice(statuses)))
            elif choice < 0.8:
                some = rng.sample(ids, 1)
                await conn.execute(
                    update(M).where(M.c.id.in_(some)).values(turn_id=rng.choice(["t1", "t2", "t3"]))
                )
            elif choice < 0.85:
                some = rng.sample(ids, 1)
                await conn.execute(
                    update(M).where(M.c.id.in_(some)).values(pending_id=rng.choice([None, "", "px"]))
                )
            elif choice < 0.9:
                some = rng.sample(ids, 1)
                await conn.execute(update(M).where(M.c.id.in_(some)).values(type=rng.choice(kinds)))
            elif choice < 0.95:
                # Writes that change no field the rule reads leave the table alone.
                some = rng.sample(ids, min(len(ids), 2))
                await conn.execute(
                    update(M).where(M.c.id.in_(some)).values(delivery_pending=True, claim_id="c")
                )
            else:
                gone = rng.choice(ids)
                ids.remove(gone)
                await conn.execute(delete(M).where(M.c.id == gone))
            assert await _open(conn) == await _by_rule(conn), f"step {step}"
    async with db.write() as conn:
        # A session deleted whole (its messages go by cascade) leaves no open row behind.
        await conn.execute(delete(task_sessions).where(task_sessions.c.id == "s2"))
        assert await _open(conn) == await _by_rule(conn)
        assert {session for _, _, session, _ in await _open(conn)} <= {"s1"}


@pytest.mark.parametrize("dialect", ["postgresql"], indirect=True)
async def test_a_claim_and_its_settle_are_heap_only_updates(db: Database) -> None:
    """Counted by PostgreSQL for this transaction: both updates of the claimed row are heap-only
    (no index of the table reads a value they change)."""
    await _session(db, turn=True)
    async with db.write() as conn:
        await conn.execute(M.insert().values(_row(1, pending_id="p1", status="pending", question_id="q1")))
    async with db.write() as conn:
        claimed = await claims.claim(
            conn,
            session_id="s1",
            pending_id="p1",
            message_ids=["m0001"],
            answers={},
            rejected=False,
            claim_id="c1",
            detach_rows=True,
        )
        assert [r.id for r in claimed] == ["m0001"]
        assert claimed[0].metadata["status"] == "answered"
        settled = await claims.settle_claim(conn, ["m0001"], "c1")
        assert [r.id for r in settled] == ["m0001"]
        counts = (
            await conn.execute(
                text(
                    "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables"
                    " WHERE relname = 'task_session_messages'"
                )
            )
        ).one()
        assert tuple(counts) == (2, 2)
        assert await _open(conn) == set()


async def test_every_session_finds_its_own_active_rows_whatever_the_others_hold(db: Database) -> None:
    """The lookups asked of each message row (a task's sessions, many sessions at once) compare each
    row with its own session's current turn, never another session's."""
    now = utcnow()
    async with db.write() as conn:
        await conn.execute(tasks.insert().values(id="task", title="t", created_at=now, updated_at=now))
    for n in (1, 2, 3):
        await _session(db, f"s{n}", task_id="task", state="WAITING_FOR_INPUT", turn=True)
    async with db.write() as conn:
        # s1 and s2 each ask in their own current turn; s3's only question names s1's turn.
        await conn.execute(
            M.insert(),
            [
                _row(1, session_id="s1", turn_id="turn1", pending_id="p1", status="pending"),
                _row(2, session_id="s2", turn_id="turn2", pending_id="p2", status="pending"),
                _row(3, session_id="s3", turn_id="turn1", pending_id="p3", status="pending"),
            ],
        )
    async with db.read() as conn:
        assert await bundles.sessions_with_active_bundles(conn, "task") == ["s1", "s2"]
        found = await bundles.active_pending_ids_for_sessions(conn, ["s1", "s2", "s3"])
        assert found == {"s1": ["p1"], "s2": ["p2"]}
        assert await pending.active_pending_ids(conn, "s3") == []
        assert await pending.active_pending_ids(conn, "s2") == ["p2"]
