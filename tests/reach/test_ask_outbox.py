"""The ask's part of reach, through the services over a real database (SQLite and PostgreSQL): the
outbox rows a new pending action's ask writes in its own unit of work (one per destination of whoever
may see the task, nobody else's; on PostgreSQL a one-question ask's own statement writes them, so
the ask costs the statements it cost before reach), the wake-up it publishes only when it wrote
some, and a worker that asks nothing of the database while there is nothing to do, yet sends what
another process's ask wrote in time."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import select

from backend.bus import EventBus
from backend.config import Settings
from backend.db.engine import Database, utcnow
from backend.db.tables import notification_outbox as O
from backend.db.tables import push_subscriptions as P
from backend.repository import access
from backend.repository import reach as repo
from backend.services.container import Services
from backend.services.context import Deps
from backend.services.reach import WAKE, WAKE_CHANNEL
from tests.lifecycle.support import FAST, Agent, ToolAgent, new_session, questions
from tests.reach.receivers import PushService, eventually, push_service

AFTER = 60.0  # the outbox rows' delay, unless a test needs them due sooner
RETRY = 600.0


@asynccontextmanager
async def process(db: Database, bus: EventBus, **settings: Any) -> AsyncIterator[Services]:
    """The services of one server process on `db` and `bus`: neither its notification worker nor
    its waiter hub's heartbeat runs unless the test starts them."""
    values = {
        **FAST,
        "notify_after_seconds": AFTER,
        "notify_retry_seconds": RETRY,
        "outbound_allowed_hosts": ("127.0.0.1",),
        **settings,
    }
    services = Services.build(Deps(db=db, bus=bus, settings=Settings(database_url=db.url, **values)))
    try:
        yield services
    finally:
        await services.reach.stop()


@asynccontextmanager
async def memory_bus() -> AsyncIterator[EventBus]:
    bus = EventBus("memory://")
    await bus.connect()
    try:
        yield bus
    finally:
        await bus.disconnect()


@dataclass(frozen=True)
class People:
    """Who has which destination (push subscription ids, channel ids), and who should hear."""

    task_id: str
    session_id: str
    told: set[tuple[str, str]]  # (destination, destination id) of everyone who may see the task
    untold: set[tuple[str, str]]
    everywhere: set[tuple[str, str]]  # of those who see every task (admin, support)


async def user(db: Database, role: str) -> str:
    async with db.write() as conn:
        return (await access.create_user(conn, f"{role}-{time.monotonic_ns()}", role)).id


async def push(db: Database, user_id: str) -> tuple[str, str]:
    """A push subscription (never sent to here: no worker runs)."""
    async with db.write() as conn:
        await repo.save_push_subscription(conn, user_id, f"https://push.example/{user_id}", "k", "a")
        found = await conn.execute(select(P.c.id).where(P.c.user_id == user_id))
        return repo.PUSH, str(found.scalar_one())


async def channel(db: Database, user_id: str) -> tuple[str, str]:
    async with db.write() as conn:
        return repo.CHANNEL, (await repo.add_channel(conn, user_id, "json://chat.example/hook", "chat")).id


async def people(svc: Services, db: Database) -> People:
    """A task with a running session, and people around it: an admin and a support person (they see
    every task), a user granted the task, a user granted another task only, an agent, and a user
    granted the task who has no destination."""
    task_id, session_id = await new_session(svc)
    other_task, _ = await new_session(svc)
    admin, support, granted, elsewhere, agent, quiet = [
        await user(db, role) for role in ("admin", "support", "user", "user", "agent", "user")
    ]
    async with db.write() as conn:
        await access.grant_task(conn, granted, task_id)
        await access.grant_task(conn, quiet, task_id)
        await access.grant_task(conn, elsewhere, other_task)
    everywhere = {await push(db, admin), await channel(db, admin), await channel(db, support)}
    told = {*everywhere, await push(db, granted), await channel(db, granted)}
    # A user granted only another task, and an agent, hear nothing, though people who may see the
    # task have destinations too.
    untold = {await push(db, elsewhere), await channel(db, elsewhere), await channel(db, agent)}
    return People(task_id, session_id, told, untold, everywhere)


async def outbox(db: Database, pending_id: str | None = None) -> list[Any]:
    query = select(O).order_by(O.c.id)
    if pending_id is not None:
        query = query.where(O.c.pending_id == pending_id)
    async with db.read() as conn:
        return list(await conn.execute(query))


Ask = Callable[[Services, str], Awaitable[Any]]


async def one_question(svc: Services, session_id: str) -> Any:
    return await Agent.ask(svc, session_id)


async def three_questions(svc: Services, session_id: str) -> Any:
    return await Agent.ask(svc, session_id, questions(3))


async def permission(svc: Services, session_id: str) -> Any:
    return await ToolAgent.ask(svc, session_id)


ASKS = {"one question": one_question, "three questions": three_questions, "permission": permission}


@pytest.mark.parametrize("asking", list(ASKS))
async def test_an_ask_writes_one_row_per_destination_of_whoever_may_see_the_task(
    db: Database, asking: str
) -> None:
    async with memory_bus() as bus, process(db, bus) as svc:
        seen = await people(svc, db)
        before = utcnow()
        agent = await ASKS[asking](svc, seen.session_id)
        after = utcnow()
        try:
            rows = await outbox(db)
            assert {r.pending_id for r in rows} == {agent.pending_id}
            assert {(r.destination, r.destination_id) for r in rows} == seen.told
            assert len(rows) == len(seen.told)  # one row per (action, destination)
            for row in rows:
                assert row.id == f"{agent.pending_id}:p{row.destination[0]}:{row.destination_id}"
                assert (row.kind, row.status, row.attempts) == ("pending", "queued", 0)
                assert (row.task_id, row.session_id) == (seen.task_id, seen.session_id)
                assert before + dt.timedelta(seconds=AFTER) <= row.due_at
                assert row.due_at <= after + dt.timedelta(seconds=AFTER)
                assert row.deadline_at == row.due_at + dt.timedelta(seconds=RETRY)
                assert before <= row.created_at <= after
        finally:
            await agent.close()


async def test_a_re_attach_writes_no_rows(db: Database) -> None:
    async with memory_bus() as bus, process(db, bus) as svc:
        seen = await people(svc, db)
        first = await Agent.ask(svc, seen.session_id)
        again = await Agent.ask(svc, seen.session_id)  # the same question while it is open
        try:
            assert again.pending_id == first.pending_id
            assert len(await outbox(db)) == len(seen.told)
        finally:
            await again.close()
            await first.close()


async def test_nobody_with_a_destination_means_no_rows_and_the_same_statements(db: Database) -> None:
    async with memory_bus() as bus, process(db, bus) as svc:
        counts = []

        async def ask(session_id: str) -> None:
            statements, transactions = db.statements, db.transactions
            agent = await Agent.ask(svc, session_id)
            counts.append((db.statements - statements, db.transactions - transactions))
            await agent.close()

        for _ in range(2):
            await ask((await new_session(svc))[1])  # nobody has a destination yet
        assert await outbox(db) == []
        seen = await people(svc, db)
        told = [(await new_session(svc))[1] for _ in range(2)]  # admin and support see every task
        for session_id in told:
            await ask(session_id)
        # Whether anybody hears of it or not, the ask costs the same, in one transaction.
        assert len(set(counts)) == 1, counts
        assert counts[0][1] == 1
        if not db.is_sqlite and db.fast_path:
            # PostgreSQL, in messages: BEGIN with the lock and the held summary row, the context
            # with the insert and the outbox rows, and the summary (as before reach).
            assert counts[0][0] == 3
        rows = await outbox(db)
        for session_id in told:
            mine = {(r.destination, r.destination_id) for r in rows if r.session_id == session_id}
            assert mine == seen.everywhere
        assert len(rows) == len(told) * len(seen.everywhere)


async def test_only_an_ask_that_wrote_rows_wakes_the_workers(db: Database) -> None:
    async with memory_bus() as bus, process(db, bus) as svc:
        _, quiet = await new_session(svc)
        heard: list[dict[str, Any]] = []
        ready = asyncio.Event()

        async def listen() -> None:
            async with bus.subscribe(WAKE_CHANNEL) as events:
                ready.set()
                async for message in events:
                    heard.append(message)

        listener = asyncio.create_task(listen())
        await ready.wait()
        try:
            nobody = await Agent.ask(svc, quiet)
            await nobody.close()
            seen = await people(svc, db)
            somebody = await Agent.ask(svc, seen.session_id)
            await somebody.close()
            await bus.publish(WAKE_CHANNEL, {"type": "test.sentinel"})
            deadline = time.monotonic() + 10
            while not heard or heard[-1]["type"] != "test.sentinel":
                assert time.monotonic() < deadline, heard
                await asyncio.sleep(0.01)
        finally:
            listener.cancel()
        (row, *_) = await outbox(db, somebody.pending_id)
        assert heard[:-1] == [{"type": WAKE, "due": row.due_at.isoformat()}]


async def test_an_idle_worker_asks_nothing_of_the_database_and_still_sends_another_process_s_rows_in_time(
    db: Database, database_url: str
) -> None:
    """Two processes on one database and one bus: A runs its worker, B (its worker not started)
    asks. Idle, A's worker runs no statement; B's ask wakes it through the bus, and the push goes
    out at the rows' due time, within about a second."""
    after = 1.0
    other_db = Database(database_url)  # B's own connections: A's statements are counted apart
    try:
        with push_service() as phone:
            async with (
                memory_bus() as bus,
                process(db, bus, notify_after_seconds=after) as a,
                process(other_db, bus, notify_after_seconds=after) as b,
            ):
                _, session_id = await new_session(b)
                await subscribe(other_db, await user(other_db, "admin"), phone)
                await a.reach.start()
                await quiet(db)  # its first pass: the keys, pruning, a first look
                before = db.statements
                await asyncio.sleep(3.0)
                assert db.statements - before == 0  # idle: not one statement in 3 s
                asked_at = time.monotonic()
                agent = await Agent.ask(b, session_id)
                try:
                    (pushed,) = await asyncio.to_thread(phone.received.wait, 1)
                    # The receiver has the push before A's worker records it as sent: wait for the
                    # record while A still runs (stopping it mid-send leaves the row for a retry).
                    await eventually(lambda: a.reach.sent == 1)
                finally:
                    await agent.close()
        assert pushed["pendingId"] == agent.pending_id
        took = phone.received.times[0] - asked_at
        # Due `after` seconds after the ask; sent within a second of that (half a second more for a
        # loaded machine).
        assert after - 0.05 <= took <= after + 1.5, took
    finally:
        await other_db.dispose()


async def quiet(db: Database, seconds: float = 0.5) -> None:
    """Until `db` ran no statement for `seconds` (at most 10 s)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        before = db.statements
        await asyncio.sleep(seconds)
        if db.statements == before:
            return
    raise AssertionError("statements ran all along")


async def subscribe(db: Database, user_id: str, service: PushService) -> None:
    browser = service.browser
    async with db.write() as conn:
        await repo.save_push_subscription(
            conn, user_id, service.endpoint, browser.p256dh, browser.auth_secret
        )
