"""Issue-2 figures: projection cost vs history length, and the 1,000-session batch vs a bare SELECT."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import insert, select

from backend.db.engine import Database, utcnow
from backend.db.tables import task_session_messages, task_session_turns, task_sessions, tasks
from backend.repository import message_fields, pending
from bench.common import fresh_database, median, run, timed, write_result

SIZES = [(10, 100), (100, 1_000), (1_000, 10_000), (10_000, 100_000)]
BATCH = 1_000


async def seed_history(db: Database, session_id: str, turns: int, messages: int) -> None:
    """`turns` turns (all completed but the last) and `messages` messages spread over them; a pending
    question in the current turn and stale pending questions in older turns."""
    base = utcnow() - dt.timedelta(days=30)
    now = utcnow()
    turn_rows: list[dict[str, Any]] = []
    for i in range(turns):
        started = base + dt.timedelta(seconds=i)
        turn_rows.append(
            {
                "id": f"{session_id}-t{i:06d}",
                "session_id": session_id,
                "started_at": started,
                "created_at": started,
                "completed_at": None if i == turns - 1 else started + dt.timedelta(milliseconds=500),
                "metadata": {"lifecycle_only": True} if i % 97 == 5 else {},
            }
        )
    message_rows: list[dict[str, Any]] = []
    for j in range(messages):
        turn = turn_rows[j * turns // messages]
        question = j % 10 == 0
        message_rows.append(
            {
                "id": f"{session_id}-m{j:07d}",
                "session_id": session_id,
                "turn_id": turn["id"],
                "type": "clarification_request" if question else "message",
                "author": "agent",
                "content": "x" * 40,
                **message_fields.values_of({"pending_id": f"p{j}", "status": "pending"} if question else {}),
                "created_at": now,
                "updated_at": now,
            }
        )
    async with db.write() as conn:
        await conn.execute(insert(task_session_turns), turn_rows)
        for k in range(0, len(message_rows), 5_000):
            await conn.execute(insert(task_session_messages), message_rows[k : k + 5_000])


async def seed_sessions(db: Database, count: int, prefix: str) -> list[str]:
    now = utcnow()
    async with db.write() as conn:
        await conn.execute(
            insert(tasks), [{"id": f"{prefix}-task", "title": "bench", "created_at": now, "updated_at": now}]
        )
        await conn.execute(
            insert(task_sessions),
            [
                {
                    "id": f"{prefix}-s{i:05d}",
                    "task_id": f"{prefix}-task",
                    "state": "RUNNING",
                    "is_primary": i == 0,
                    "input_capable": True,
                    "created_at": now,
                    "updated_at": now,
                }
                for i in range(count)
            ],
        )
    return [f"{prefix}-s{i:05d}" for i in range(count)]


async def projection_growth(db: Database) -> list[dict[str, Any]]:
    rows = []
    for turns, messages in SIZES:
        (session_id,) = await seed_sessions(db, 1, f"g{turns}")
        await seed_history(db, session_id, turns, messages)
        if db.dialect == "postgresql":
            async with db.engine.connect() as conn:
                await conn.exec_driver_sql("ANALYZE")
                await conn.commit()

        async def project(session_id: str = session_id) -> None:
            async with db.read() as conn:
                result = await pending.pending_for_sessions(conn, [session_id])
            assert result[session_id].pending_action == "clarification"

        before = db.statements
        await project()
        statements = db.statements - before
        samples = await timed(project, repeat=300)
        rows.append(
            {
                "turns": turns,
                "messages": messages,
                "median_ms": median(samples) * 1e3,
                "statements": statements,
            }
        )
    return rows


async def batch_vs_bare(db: Database) -> dict[str, Any]:
    ids = await seed_sessions(db, BATCH, "batch")
    for i, session_id in enumerate(ids[:BATCH]):
        if i % 10 == 0:
            await seed_history(db, session_id, 5, 10)

    async def batch() -> None:
        async with db.read() as conn:
            result = await pending.pending_for_sessions(conn, ids)
        assert len(result) == BATCH

    async def bare() -> None:
        async with db.read() as conn:
            rows = (await conn.execute(select(task_sessions).where(task_sessions.c.id.in_(ids)))).all()
        assert len(rows) == BATCH

    before = db.statements
    await batch()
    statements = db.statements - before
    batch_s = median(await timed(batch, repeat=40, warmup=5))
    bare_s = median(await timed(bare, repeat=40, warmup=5))
    return {
        "sessions": BATCH,
        "batch_ms": batch_s * 1e3,
        "bare_select_ms": bare_s * 1e3,
        "ratio": batch_s / bare_s,
        "statements": statements,
    }


async def bench_dialect(dialect: str) -> dict[str, Any]:
    db, drop = await fresh_database(dialect)
    try:
        growth = await projection_growth(db)
        batch = await batch_vs_bare(db)
    finally:
        await drop()
    return {"dialect": dialect, "growth": growth, "batch": batch}


def report(result: dict[str, Any]) -> None:
    growth = result["growth"]
    first = growth[0]["median_ms"]
    print(f"\n[{result['dialect']}] pending projection of one session vs its history")
    print(f"{'turns':>7} {'messages':>9} {'median ms':>10} {'x smallest':>11} {'statements':>11}")
    for row in growth:
        print(
            f"{row['turns']:>7} {row['messages']:>9} {row['median_ms']:>10.3f} "
            f"{row['median_ms'] / first:>11.2f} {row['statements']:>11}"
        )
    b = result["batch"]
    print(
        f"[{result['dialect']}] {b['sessions']} sessions in one batch: {b['batch_ms']:.2f} ms, bare SELECT "
        f"{b['bare_select_ms']:.2f} ms, ratio {b['ratio']:.2f}x (target <= 3x), "
        f"{b['statements']} statement(s)"
    )


def main() -> None:
    results = [run(bench_dialect(d)) for d in ("sqlite", "postgresql")]
    for result in results:
        report(result)
    print(f"results: {write_result('foundation', {'results': results})}")


if __name__ == "__main__":
    main()
