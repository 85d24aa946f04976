"""Issue-4 figures: detached answer -> dispatch acknowledged (p50/p99, PostgreSQL), and startup
recovery of N stranded reservations with their claimed intents (time and statement count)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from typing import Any

from sqlalchemy import insert

from backend.bus import EventBus
from backend.config import Settings
from backend.db.engine import Database, utcnow
from backend.db.tables import task_session_messages, task_session_turns, task_sessions, tasks
from backend.domain.lifecycle import Answer, Detached
from backend.repository import message_fields, reservations
from backend.services.container import Services
from backend.services.context import Deps
from backend.services.pending.core import trusted
from bench.common import fresh_database, median, pct, run, write_result

ANSWERS = 300
RECOVERY_SIZES = [1_000, 10_000]


async def _services(db: Database) -> tuple[Services, EventBus]:
    bus = EventBus("memory://")
    await bus.connect()
    settings = Settings(
        database_url=db.url, persistence_seconds=10, dispatch_seconds=10, watchdog_seconds=600
    )
    return Services.build(Deps(db=db, bus=bus, settings=settings)), bus


async def bench_dispatch(dialect: str) -> dict[str, Any]:
    """A runner holds the session's agentPrompts channel and acknowledges each prompt at once; we time
    respondToClarification on a detached question until it returns resumed=True."""
    db, drop = await fresh_database(dialect)
    services, bus = await _services(db)
    try:
        await services.waiters.start()
        task = await services.operations.create_task("bench")
        session = await services.operations.create_session(task.id, is_primary=True, input_capable=True)
        await services.operations.start_turn(session.id)

        async def runner(ready: asyncio.Event) -> None:
            async with services.prompts.hold(session.id) as prompts:
                ready.set()
                async for request in prompts:
                    await services.prompts.acknowledge(request.turn_id, True)

        ready = asyncio.Event()
        holder = asyncio.create_task(runner(ready))
        await ready.wait()
        samples: list[float] = []
        for i in range(ANSWERS + 20):
            stream = services.pending.ask(
                session.id, [{"prompt": f"Q{i}?", "options": [{"label": "a"}, {"label": "b"}]}], None, 0.001
            )
            asked = await stream.__anext__()
            assert isinstance(await stream.__anext__(), Detached)
            await stream.aclose()
            pending_id = asked.bundle.pending_id  # type: ignore[union-attr]
            start = time.perf_counter()
            result = await services.pending.respond(
                pending_id, [Answer("q1", ("q1_opt1",), None)], rejected=False, authorize=trusted
            )
            elapsed = time.perf_counter() - start
            assert getattr(result, "resumed", False), result
            if i >= 20:
                samples.append(elapsed)
        holder.cancel()
        with contextlib.suppress(BaseException):
            await holder
        return {
            "dialect": dialect,
            "answers": len(samples),
            "p50_ms": round(median(samples) * 1000, 2),
            "p99_ms": round(pct(samples, 99) * 1000, 2),
        }
    finally:
        await services.waiters.stop()
        await bus.disconnect()
        await drop()


async def seed_stranded(db: Database, n: int) -> None:
    """n sessions, each with a detached question claimed (intent set) and its successor reserved; half
    of the reservations carry the attempt marker (kept), half are empty (deleted, claim restored)."""
    now = utcnow()
    async with db.write() as conn:
        await conn.execute(
            insert(tasks), [{"id": "t", "title": "bench", "created_at": now, "updated_at": now}]
        )
        for k in range(0, n, 2_000):
            ids = range(k, min(n, k + 2_000))
            await conn.execute(
                insert(task_sessions),
                [
                    {"id": f"s{i}", "task_id": "t", "state": "RUNNING", "created_at": now, "updated_at": now}
                    for i in ids
                ],
            )
            turns: list[dict[str, Any]] = []
            for i in ids:
                turns.append(
                    {
                        "id": f"u{i}",
                        "session_id": f"s{i}",
                        "started_at": now,
                        "created_at": now,
                        "metadata": {},
                    }
                )
                md: dict[str, Any] = {
                    reservations.PENDING: True,
                    reservations.SOURCE_TURN_ID: f"u{i}",
                    reservations.SOURCE_PENDING_ID: f"p{i}",
                    reservations.SOURCE_MESSAGE_IDS: [f"m{i}"],
                    reservations.CLAIM_ID: f"c{i}",
                }
                if i % 2:
                    md[reservations.ATTEMPTED] = True
                later = now + dt.timedelta(microseconds=1)
                turns.append(
                    {
                        "id": f"r{i}",
                        "session_id": f"s{i}",
                        "started_at": later,
                        "created_at": later,
                        "metadata": md,
                    }
                )
            await conn.execute(insert(task_session_turns), turns)
            await conn.execute(
                insert(task_session_messages),
                [
                    {
                        "id": f"m{i}",
                        "session_id": f"s{i}",
                        "turn_id": f"u{i}",
                        "type": "clarification_request",
                        "author": "agent",
                        "content": "Which?",
                        **message_fields.values_of(
                            {
                                "pending_id": f"p{i}",
                                "question_id": "q1",
                                "status": "answered",
                                "agent_disconnected": True,
                                "response_delivery_pending": True,
                                "delivery_claim_id": f"c{i}",
                            }
                        ),
                        "created_at": now,
                        "updated_at": now,
                    }
                    for i in ids
                ],
            )


async def bench_recovery(dialect: str, n: int) -> dict[str, Any]:
    db, drop = await fresh_database(dialect)
    services, bus = await _services(db)
    try:
        await seed_stranded(db, n)
        before = db.statements
        start = time.perf_counter()
        await services.recovery.run()  # reservations, then delivery intents, then orphaned waiters
        step12 = time.perf_counter() - start
        statements_12 = db.statements - before
        replayed = await services.resume_recovery.replay_outbox()
        total = time.perf_counter() - start
        assert replayed == n // 2, replayed
        return {
            "dialect": dialect,
            "reservations": n,
            "recovery_s": round(step12, 3),
            "with_outbox_replay_s": round(total, 3),
            "statements_steps_1_2": statements_12,
            "statements_total": db.statements - before,
        }
    finally:
        await bus.disconnect()
        await drop()


async def all_figures() -> dict[str, Any]:
    dispatch = [await bench_dispatch(d) for d in ("postgresql", "sqlite")]
    recovery = [await bench_recovery(d, n) for d in ("postgresql", "sqlite") for n in RECOVERY_SIZES]
    return {"dispatch": dispatch, "recovery": recovery}


def main() -> None:
    figures = run(all_figures())
    for d in figures["dispatch"]:
        print(
            f"{d['dialect']:>10}: detached answer -> dispatch acknowledged  "
            f"p50 {d['p50_ms']} ms  p99 {d['p99_ms']} ms"
        )
    for r in figures["recovery"]:
        print(
            f"{r['dialect']:>10}: recovery of {r['reservations']:>6} reservations  {r['recovery_s']} s "
            f"(+ outbox replay {r['with_outbox_replay_s']} s)  statements {r['statements_steps_1_2']} "
            f"(total {r['statements_total']})"
        )
    print(f"results: {write_result('resume', figures)}")


if __name__ == "__main__":
    main()
