"""Clarification lifecycle on PostgreSQL: live round trip, respond throughput, transactions per respond.

50 sessions each hold a live waiter; all 50 are answered at once, for several rounds. The round trip
is "respond called -> the waiting agent holds the answer" (claim, hand-off, durable confirmation).
The same statements run as a bare repository loop (no service logic, no bus, no waiter) in the same
run, and throughput is reported as a ratio to it.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any

from sqlalchemy import event

from backend.bus import EventBus
from backend.config import Settings
from backend.db.engine import Database
from backend.domain.ids import new_id
from backend.domain.lifecycle import Answer, Answered, Asked, validate_questions
from backend.repository import asks, bundles, claims, locks, tasks, turns
from backend.services.container import Services
from backend.services.context import Deps
from backend.services.pending.core import trusted
from bench.common import fresh_database, pct, write_result

SESSIONS = 50
ROUNDS = int(os.environ.get("TURNWISE_BENCH_ROUNDS", "8"))
QUESTION = {"prompt": "Which database?", "options": [{"label": "SQLite"}, {"label": "PostgreSQL"}]}
ANSWER = [Answer("q1", ("q1_opt2",), None)]


class Counter:
    def __init__(self, db: Database) -> None:
        self.transactions = 0

        @event.listens_for(db.engine.sync_engine, "begin")
        def _begin(_: Any) -> None:
            self.transactions += 1


async def _sessions(services: Services) -> list[str]:
    ids = []
    for _ in range(SESSIONS):
        task = await services.operations.create_task("bench")
        session = await services.operations.create_session(task.id, is_primary=True, input_capable=True)
        await services.operations.start_turn(session.id)
        ids.append(session.id)
    return ids


async def _service_round(services: Services, session_ids: list[str]) -> tuple[list[float], float]:
    streams = []
    for sid in session_ids:
        stream = services.pending.ask(sid, [QUESTION], None)
        asked = await stream.__anext__()
        assert isinstance(asked, Asked)
        streams.append((stream, asked.bundle.pending_id))
    waits = [asyncio.ensure_future(stream.__anext__()) for stream, _ in streams]
    await asyncio.sleep(0)
    latencies: list[float] = []

    async def one(pending_id: str, wait: asyncio.Future[Any]) -> None:
        start = time.perf_counter()
        await services.pending.respond(pending_id, ANSWER, rejected=False, authorize=trusted)
        outcome = await wait
        assert isinstance(outcome, Answered)
        latencies.append(time.perf_counter() - start)

    began = time.perf_counter()
    await asyncio.gather(*(one(p, w) for (_, p), w in zip(streams, waits, strict=True)))
    wall = time.perf_counter() - began
    for stream, _ in streams:
        await stream.aclose()
    for sid in session_ids:  # a fresh turn per round keeps each round's bundles independent
        await services.operations.start_turn(sid)
    return latencies, wall


async def _bare_round(db: Database, session_ids: list[str]) -> tuple[list[float], float]:
    specs = validate_questions([QUESTION], None)
    asked: list[str] = []
    async with db.write() as conn:
        for sid in session_ids:
            turn_id = await turns.current_turn(conn, sid)
            assert turn_id is not None
            pid = new_id()
            bundle = asks.NewBundle(pid, specs, None, new_id(), new_id(), "bench")
            await asks.insert_bundle(conn, bundle, session_id=sid, turn_id=turn_id)
            asked.append(pid)
    latencies: list[float] = []

    async def one(pending_id: str) -> None:
        start = time.perf_counter()
        async with db.write() as conn:  # the claim transaction
            sid = await bundles.session_of_bundle(conn, pending_id)
            assert sid is not None
            await locks.lock_sessions(conn, [sid])
            facts = (await bundles.bundle_facts(conn, [pending_id]))[pending_id]
            claim_id = new_id()
            claimed = await claims.claim(
                conn,
                session_id=sid,
                pending_id=pending_id,
                message_ids=[r.id for r in facts[0]],
                answers={"q1": ANSWER[0]},
                rejected=False,
                claim_id=claim_id,
                detach_rows=False,
            )
            await tasks.bump_pending_seqs(conn, [sid])
        async with db.write() as conn:  # the confirmation transaction
            await locks.lock_sessions(conn, [sid])
            assert await claims.settle_claim(conn, [r.id for r in claimed], claim_id)
        latencies.append(time.perf_counter() - start)

    began = time.perf_counter()
    await asyncio.gather(*(one(p) for p in asked))
    wall = time.perf_counter() - began
    async with db.write() as conn:
        for sid in session_ids:
            await turns.insert_turn(conn, sid)
    return latencies, wall


async def _operation_counts(services: Services, db: Database, counter: Counter) -> dict[str, int]:
    """Transactions and statements of one ask, and of one live respond with its confirmation, on a
    fresh session (the fewest of three tries, so a background heartbeat cannot inflate them)."""
    task = await services.operations.create_task("counts")
    session = await services.operations.create_session(task.id, is_primary=True, input_capable=True)
    await services.operations.start_turn(session.id)
    best: dict[str, int] = {}
    for _ in range(3):
        tx, st = counter.transactions, db.statements
        stream = services.pending.ask(session.id, [QUESTION], None)
        asked = await stream.__anext__()
        assert isinstance(asked, Asked)
        ask = {"ask_transactions": counter.transactions - tx, "ask_statements": db.statements - st}
        wait = asyncio.ensure_future(stream.__anext__())
        tx, st = counter.transactions, db.statements
        await services.pending.respond(asked.bundle.pending_id, ANSWER, rejected=False, authorize=trusted)
        assert isinstance(await wait, Answered)
        respond = {
            "respond_transactions": counter.transactions - tx,
            "respond_statements": db.statements - st,
        }
        await stream.aclose()
        for key, value in {**ask, **respond}.items():
            best[key] = min(best.get(key, value), value)
    return best


async def _cycle_counts(services: Services, db: Database, counter: Counter) -> tuple[int, int]:
    """Transactions and statements of one whole ask -> answer cycle at the service level with the
    live hub (the summary projector) running, counted until everything it set off has settled."""
    task = await services.operations.create_task("cycle")
    session = await services.operations.create_session(task.id, is_primary=True, input_capable=True)
    await services.operations.start_turn(session.id)
    await services.summaries.refresh([task.id])
    await asyncio.sleep(0.5)
    tx, st = counter.transactions, db.statements
    stream = services.pending.ask(session.id, [QUESTION], None)
    asked = await stream.__anext__()
    assert isinstance(asked, Asked)
    wait = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0.3)  # the ask's events reach the projector before the answer
    await services.pending.respond(asked.bundle.pending_id, ANSWER, rejected=False, authorize=trusted)
    assert isinstance(await wait, Answered)
    await stream.aclose()
    await asyncio.sleep(0.5)
    return counter.transactions - tx, db.statements - st


async def run() -> dict[str, Any]:
    db, drop = await fresh_database("postgresql", pool_size=20)
    url = db.url
    bus = EventBus("memory://")
    try:
        await bus.connect()
        services = Services.build(Deps(db=db, bus=bus, settings=Settings(database_url=url)))
        await services.waiters.start()
        counter = Counter(db)
        counts_empty = await _operation_counts(services, db, counter)
        await services.live.start()
        cycle_tx, cycle_st = await _cycle_counts(services, db, counter)
        await services.live.stop()
        session_ids = await _sessions(services)

        # Transactions one live respond costs, measured alone: respond + the waiter's confirmation.
        stream = services.pending.ask(session_ids[0], [QUESTION], None)
        asked = await stream.__anext__()
        assert isinstance(asked, Asked)
        wait = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.01)
        before_tx, before_st = counter.transactions, db.statements
        await services.pending.respond(asked.bundle.pending_id, ANSWER, rejected=False, authorize=trusted)
        await wait
        tx_per_respond = counter.transactions - before_tx
        statements_per_respond = db.statements - before_st
        await stream.aclose()
        await services.operations.start_turn(session_ids[0])

        await _service_round(services, session_ids)  # warm-up
        await _bare_round(db, session_ids)
        service_lat: list[float] = []
        bare_lat: list[float] = []
        service_wall = bare_wall = 0.0
        for _ in range(ROUNDS):  # interleaved, so both see the same database and machine state
            lat, wall = await _service_round(services, session_ids)
            service_lat += lat
            service_wall += wall
            lat, wall = await _bare_round(db, session_ids)
            bare_lat += lat
            bare_wall += wall
        # The same operations once the database holds every round's bundles, turns and sessions:
        # statement and transaction counts per operation do not grow with the data.
        counts_grown = await _operation_counts(services, db, counter)
        if counts_grown != counts_empty:
            raise AssertionError(f"counts grew with the data: {counts_empty} -> {counts_grown}")
        await services.waiters.stop()
        n = ROUNDS * SESSIONS
        service_tput = n / service_wall
        bare_tput = n / bare_wall
        return {
            "sessions": SESSIONS,
            "rounds": ROUNDS,
            "responds": n,
            "transactions_per_respond": tx_per_respond,
            "operation_counts": counts_grown,
            "cycle_transactions": cycle_tx,
            "cycle_statements": cycle_st,
            "statements_per_respond": statements_per_respond,
            "round_trip_ms": {
                "p50": 1000 * statistics.median(service_lat),
                "p99": 1000 * pct(service_lat, 99),
            },
            "bare_sql_ms": {"p50": 1000 * statistics.median(bare_lat), "p99": 1000 * pct(bare_lat, 99)},
            "respond_throughput_per_s": service_tput,
            "bare_sql_throughput_per_s": bare_tput,
            "throughput_ratio": service_tput / bare_tput,
        }
    finally:
        await bus.disconnect()
        await drop()


def main() -> None:
    result = asyncio.run(run())
    rows = [
        ("sessions x rounds", f"{result['sessions']} x {result['rounds']}"),
        ("transactions / respond (target <= 3)", str(result["transactions_per_respond"])),
        ("statements / respond", str(result["statements_per_respond"])),
        (
            "ask: transactions / statements",
            f"{result['operation_counts']['ask_transactions']} / "
            f"{result['operation_counts']['ask_statements']} (same on an empty and a grown database)",
        ),
        (
            "respond + confirmation: transactions / statements",
            f"{result['operation_counts']['respond_transactions']} / "
            f"{result['operation_counts']['respond_statements']} (same on an empty and a grown database)",
        ),
        (
            "whole cycle, live projector running: transactions / statements (target <= 4)",
            f"{result['cycle_transactions']} / {result['cycle_statements']}",
        ),
        (
            "live round trip p50 / p99",
            f"{result['round_trip_ms']['p50']:.1f} / {result['round_trip_ms']['p99']:.1f} ms",
        ),
        (
            "bare SQL claim+confirm p50 / p99",
            f"{result['bare_sql_ms']['p50']:.1f} / {result['bare_sql_ms']['p99']:.1f} ms",
        ),
        ("respond throughput", f"{result['respond_throughput_per_s']:.0f} /s"),
        ("bare SQL throughput", f"{result['bare_sql_throughput_per_s']:.0f} /s"),
        ("ratio (target >= 0.4)", f"{result['throughput_ratio']:.2f}"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    write_result("lifecycle", result)


if __name__ == "__main__":
    main()
