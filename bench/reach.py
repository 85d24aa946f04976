"""Reach on PostgreSQL: what notifying costs an ask, and how fast the outbox sends.

1. Ask latency (ask -> `Asked`, through the service) for sessions whose task a person with three
   destinations (a push subscription and two channels) can see, against sessions nobody is told
   of, alternating, in one run. The target: within 1.05x.
2. The outbox sending 1,000 pushes (VAPID-signed, aes128gcm-encrypted) to a local push endpoint:
   the worker's rate, from the first claim to the last delivery.

`python -m bench reach`; TURNWISE_BENCH_ASKS (default 400 per side). Results: bench/results/reach.json.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from sqlalchemy import func, select

from backend.bus import EventBus
from backend.config import Settings
from backend.db.engine import Database
from backend.db.tables import notification_outbox as O
from backend.domain.lifecycle import Asked
from backend.repository import access
from backend.repository import reach as reach_repo
from backend.services.container import Services
from backend.services.context import Deps
from bench.common import fresh_database, pct, write_result
from tests.reach.receivers import push_service

ASKS = int(os.environ.get("TURNWISE_BENCH_ASKS", "400"))
PUSHES = 1000
QUESTION = {"prompt": "Ship it?", "options": [{"label": "Yes"}, {"label": "No"}]}


async def _session(services: Services) -> tuple[str, str]:
    task = await services.operations.create_task("bench")
    session = await services.operations.create_session(task.id, is_primary=True, input_capable=True)
    await services.operations.start_turn(session.id)
    return task.id, session.id


async def _ask_once(services: Services, session_id: str) -> float:
    started = time.perf_counter()
    stream = services.pending.ask(session_id, [QUESTION], None, 0.001)
    asked = await stream.__anext__()
    elapsed = time.perf_counter() - started
    assert isinstance(asked, Asked)
    await stream.aclose()
    return elapsed


async def ask_latency(db: Database, endpoint: str, p256dh: str, auth: str) -> dict[str, Any]:
    bus = EventBus("memory://")
    await bus.connect()
    settings = Settings(database_url=db.url, notify_after_seconds=3600, outbound_allowed_hosts=("127.0.0.1",))
    services = Services.build(Deps(db=db, bus=bus, settings=settings))
    await services.waiters.start()
    try:
        async with db.write() as conn:
            person = await access.create_user(conn, "dana", "user")
        told, untold = [], []
        for _ in range(8):
            task_id, session_id = await _session(services)
            async with db.write() as conn:
                await access.grant_task(conn, person.id, task_id)
            told.append(session_id)
            untold.append((await _session(services))[1])
        async with db.write() as conn:
            await reach_repo.save_push_subscription(conn, person.id, endpoint, p256dh, auth)
            await reach_repo.add_channel(conn, person.id, "json://127.0.0.1:9/a", "a")
            await reach_repo.add_channel(conn, person.id, "json://127.0.0.1:9/b", "b")
        samples: dict[str, list[float]] = {"three destinations": [], "none": []}
        for i in range(ASKS + 50):
            for label, sessions in (("three destinations", told), ("none", untold)):
                elapsed = await _ask_once(services, sessions[i % len(sessions)])
                if i >= 50:  # warmed up
                    samples[label].append(elapsed)
        out = {
            label: {"p50_ms": round(pct(s, 50) * 1000, 3), "p99_ms": round(pct(s, 99) * 1000, 3)}
            for label, s in samples.items()
        }
        ratio = out["three destinations"]["p50_ms"] / out["none"]["p50_ms"]
        return {"asks_per_side": ASKS, **out, "ratio_p50": round(ratio, 3)}
    finally:
        await services.waiters.stop()
        await bus.disconnect()


async def outbox_rate(db: Database) -> dict[str, Any]:
    with push_service() as phone:
        bus = EventBus("memory://")
        await bus.connect()
        settings = Settings(
            database_url=db.url,
            notify_after_seconds=0.0,
            notify_poll_seconds=0.05,
            outbound_allowed_hosts=("127.0.0.1",),
        )
        services = Services.build(Deps(db=db, bus=bus, settings=settings))
        await services.waiters.start()
        try:
            async with db.write() as conn:
                person = await access.create_user(conn, "erin", "admin")
                await reach_repo.save_push_subscription(
                    conn, person.id, phone.endpoint, phone.browser.p256dh, phone.browser.auth_secret
                )
            _, session_id = await _session(services)
            # 1,000 open questions (each asked, detached at once), notified after the worker starts.
            for _ in range(PUSHES):
                stream = services.pending.ask(
                    session_id, [dict(QUESTION, prompt=f"Ship it? {_}")], None, 0.001
                )
                await stream.__anext__()
                await stream.aclose()
            started = time.perf_counter()
            await services.reach.start()
            try:
                await asyncio.to_thread(phone.received.wait, PUSHES, 120.0)
            finally:
                elapsed = time.perf_counter() - started
                await services.reach.stop()
                async with db.read() as conn:
                    statuses: dict[str, int] = dict(
                        (await conn.execute(select(O.c.status, func.count()).group_by(O.c.status))).all()
                    )
            return {
                "pushes": PUSHES,
                "seconds": round(elapsed, 2),
                "per_second": round(PUSHES / elapsed, 1),
                "rows_by_status": statuses,
            }
        finally:
            await services.waiters.stop()
            await bus.disconnect()


async def run() -> dict[str, Any]:
    with push_service() as phone:
        db, drop = await fresh_database("postgresql", pool_size=10)
        try:
            latency = await ask_latency(db, phone.endpoint, phone.browser.p256dh, phone.browser.auth_secret)
        finally:
            await drop()
    db, drop = await fresh_database("postgresql", pool_size=20)
    try:
        rate = await outbox_rate(db)
    finally:
        await drop()
    met = latency["ratio_p50"] <= 1.05
    return {
        "ask_latency": latency,
        "outbox": rate,
        "targets": [
            {
                "target": "ask p50 with three destinations vs none <= 1.05x",
                "value": latency["ratio_p50"],
                "met": met,
            }
        ],
    }


def main() -> None:
    result = asyncio.run(run())
    latency, rate = result["ask_latency"], result["outbox"]
    told, untold = latency["three destinations"], latency["none"]
    print(
        f"  ask p50/p99: three destinations {told['p50_ms']}/{told['p99_ms']} ms, "
        f"none {untold['p50_ms']}/{untold['p99_ms']} ms, ratio {latency['ratio_p50']}"
    )
    print(f"  outbox: {rate['pushes']} pushes in {rate['seconds']} s = {rate['per_second']}/s")
    for t in result["targets"]:
        print(f"  {'MET' if t['met'] else 'NOT MET':<9} {t['target']}: {t['value']}")
    print(f"  written to {write_result('reach', result).name}")
