"""Issue-5 figures: the `tasks` read (1,000 tasks x 3 sessions) vs a bare SELECT, and live fan-out
to 1,000 subscribers on one server process (commit -> last delivery, memory per idle subscription)."""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr
from sqlalchemy import insert, select

from backend.bus import EventBus
from backend.client import Connection
from backend.config import Settings
from backend.db.engine import Database, utcnow
from backend.db.tables import (
    task_session_messages,
    task_session_turns,
    task_sessions,
    task_status_summaries,
    tasks,
)
from backend.repository import message_fields
from backend.services.container import Services
from backend.services.context import Deps
from bench.common import fresh_database, median, pct, run, timed, write_result

TASKS = 1_000
SESSIONS_PER_TASK = 3
SUBSCRIBERS = 1_000
PER_CONNECTION = 100
ROUNDS = 30


async def seed(db: Database, n_tasks: int, prefix: str) -> list[str]:
    """n tasks x 3 RUNNING sessions with an open turn each; every 4th task has a pending question."""
    now = utcnow()
    started = now - dt.timedelta(hours=1)
    task_rows, session_rows, turn_rows, message_rows = [], [], [], []
    for i in range(n_tasks):
        tid = f"{prefix}t{i:05d}"
        task_rows.append({"id": tid, "title": f"task {i}", "created_at": now, "updated_at": now})
        for j in range(SESSIONS_PER_TASK):
            sid = f"{tid}s{j}"
            session_rows.append(
                {
                    "id": sid,
                    "task_id": tid,
                    "state": "RUNNING",
                    "is_primary": j == 0,
                    "input_capable": True,
                    "pending_seq": 1,
                    "created_at": now,
                    "updated_at": now,
                }
            )
            turn_rows.append(
                {
                    "id": f"{sid}u",
                    "session_id": sid,
                    "started_at": started,
                    "created_at": started,
                    "metadata": {},
                }
            )
            if i % 4 == 0 and j == 1:
                message_rows.append(
                    {
                        "id": f"{sid}m",
                        "session_id": sid,
                        "turn_id": f"{sid}u",
                        "type": "clarification_request",
                        "author": "agent",
                        "content": "?",
                        **message_fields.values_of({"pending_id": f"{sid}p", "status": "pending"}),
                        "created_at": now,
                        "updated_at": now,
                    }
                )
    async with db.write() as conn:
        for table, rows in (
            (tasks, task_rows),
            (task_sessions, session_rows),
            (task_session_turns, turn_rows),
            (task_session_messages, message_rows),
        ):
            for k in range(0, len(rows), 2_000):
                await conn.execute(insert(table), rows[k : k + 2_000])
    return [str(r["id"]) for r in task_rows]


async def bare_select(db: Database, task_ids: list[str]) -> int:
    """The same rows with no derivation: tasks, their sessions and stored summaries."""
    async with db.read() as conn:
        t = (await conn.execute(select(tasks).where(tasks.c.id.in_(task_ids)))).all()
        s = (await conn.execute(select(task_sessions).where(task_sessions.c.task_id.in_(task_ids)))).all()
        m = (
            await conn.execute(
                select(task_status_summaries).where(task_status_summaries.c.task_id.in_(task_ids))
            )
        ).all()
    return len(t) + len(s) + len(m)


async def tasks_read(services: Services) -> int:
    """What `tasks` resolves from: the task rows, then one reconciling load of summaries + projections."""
    records = await services.reads.tasks()
    views = await services.summaries.reconcile([r.id for r in records])
    return len(views)


async def tasks_bench(dialect: str) -> dict[str, Any]:
    db, drop = await fresh_database(dialect)
    bus = EventBus("memory://")
    await bus.connect()
    services = Services.build(Deps(db=db, bus=bus, settings=Settings(database_url=db.url)))
    try:
        statements: dict[int, int] = {}
        ids: list[str] = []
        for size, prefix in ((10, "a"), (100, "b"), (TASKS - 110, "c")):
            ids += await seed(db, size, prefix)
            await tasks_read(services)  # creates the missing summaries (one write round)
            before = db.statements
            await tasks_read(services)
            statements[len(ids)] = db.statements - before
        full = await timed(lambda: tasks_read(services), repeat=15, warmup=3)
        bare = await timed(lambda: bare_select(db, ids), repeat=15, warmup=3)
        # The whole GraphQL request in-process (no network), for scale: Strawberry's per-field cost,
        # under the collector settings `turnwise serve` runs with (restored afterwards).
        from backend.api.app import create_app, tune_collector

        thresholds = gc.get_threshold()
        tune_collector()

        settings = Settings(database_url=db.url, bootstrap_token=SecretStr("bench"))
        app = create_app(settings, auto_migrate=False)
        query = (
            "{ tasks { id title summary { revision pendingAction }"
            " sessions { id pendingAction pendingActionRevision { epoch sequence } } } }"
        )
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as http:

                async def graphql() -> None:
                    r = await http.post(
                        "/graphql", json={"query": query}, headers={"Authorization": "Bearer bench"}
                    )
                    assert len(r.json()["data"]["tasks"]) == TASKS

                whole = await timed(graphql, repeat=15, warmup=3)  # as many as the read
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        return {
            "tasks": TASKS,
            "sessions": TASKS * SESSIONS_PER_TASK,
            "statements_per_read_by_task_count": statements,
            "tasks_read_p50_ms": median(full) * 1e3,
            "bare_select_p50_ms": median(bare) * 1e3,
            "ratio": median(full) / median(bare),
            "graphql_request_p50_ms": median(whole) * 1e3,
            # Target (issue 11): the whole request <= 2x the repository read of the same rows.
            "graphql_request_vs_read": median(whole) / median(full),
        }
    finally:
        await bus.disconnect()
        await drop()


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def fanout_bench() -> dict[str, Any]:
    from tests.api.client import Client
    from tests.api.gql import POST, PROJECTIONS, running_session
    from tests.servers import ADMIN_TOKEN, Server
    from tests.servers import fresh_database as server_database

    url = await asyncio.to_thread(server_database, "sqlite")
    srv = Server(url, env={"TURNWISE_SUBSCRIPTIONS_PER_CONNECTION": str(PER_CONNECTION)})
    await asyncio.to_thread(srv.start)
    assert srv.proc is not None
    admin = Client(srv.base_url, ADMIN_TOKEN)
    connections: list[Connection] = []
    try:
        _, session_id = await running_session(admin)
        await asyncio.sleep(0.5)
        rss_before = rss_kb(srv.proc.pid)
        counts = [0]
        arrived: list[float] = []
        round_done = asyncio.Event()
        expected = SUBSCRIBERS
        snapshots = asyncio.Event()

        def result(_: str) -> None:
            counts[0] += 1
            if counts[0] >= expected:
                arrived.append(time.perf_counter())
                round_done.set()
                snapshots.set()

        for _ in range(SUBSCRIBERS // PER_CONNECTION):
            connection = await admin.transport.connect(max_queue=None, on_result=result)
            connections.append(connection)
            for _ in range(PER_CONNECTION):
                await connection.subscribe(PROJECTIONS, {"s": session_id})
        await asyncio.wait_for(snapshots.wait(), 60)  # every subscription's snapshot arrived
        await asyncio.sleep(1.0)
        rss_after = rss_kb(srv.proc.pid)
        after_commit: list[float] = []
        after_send: list[float] = []
        for r in range(ROUNDS):
            round_done.clear()
            counts[0] = 0
            arrived.clear()
            sent = time.perf_counter()
            await admin.execute(POST, {"s": session_id, "c": f"m{r}", "k": "message"})
            committed = time.perf_counter()  # the response follows the commit
            await asyncio.wait_for(round_done.wait(), 30)
            after_commit.append(arrived[0] - committed)
            after_send.append(arrived[0] - sent)
        return {
            "subscribers": SUBSCRIBERS,
            "connections": len(connections),
            "commit_to_last_p50_ms": median(after_commit) * 1e3,
            "commit_to_last_p99_ms": pct(after_commit, 99) * 1e3,
            # The first delivery to each subscription also warms its execution: shown apart.
            "first_round_commit_to_last_ms": after_commit[0] * 1e3,
            "later_rounds_commit_to_last_p99_ms": pct(after_commit[1:], 99) * 1e3,
            "rounds_commit_to_last_ms": [round(x * 1e3, 1) for x in after_commit],
            "send_to_last_p50_ms": median(after_send) * 1e3,
            "send_to_last_p99_ms": pct(after_send, 99) * 1e3,
            "rss_per_idle_subscription_kb": (rss_after - rss_before) / SUBSCRIBERS,
        }
    finally:
        for connection in connections:
            await connection.close()
        await admin.aclose()
        await asyncio.to_thread(srv.stop)


async def all_benches() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dialect in ("sqlite", "postgresql"):
        out[f"tasks_{dialect}"] = await tasks_bench(dialect)
        print(json.dumps({f"tasks_{dialect}": out[f"tasks_{dialect}"]}, indent=2), flush=True)
    out["fanout"] = await fanout_bench()
    print(json.dumps({"fanout": out["fanout"]}, indent=2), flush=True)
    return out


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parents[1]))  # the tests package: real servers and clients
    results = run(all_benches())
    path = write_result("api", results)
    print(f"written {path}")
