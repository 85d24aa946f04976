"""Another process's heartbeat, as a waiter hub reads it: from the database, and not again while the
one it read is fresh (a stored heartbeat only moves forward, so it is then fresh too). A respond to
a bundle whose agent waits in another process decides that process's liveness without a statement
of its own while it beats."""

from __future__ import annotations

import asyncio
from typing import Any

from backend.bus import EventBus
from backend.config import Settings
from backend.db.engine import Database
from backend.repository import instances
from backend.services.context import Deps
from backend.services.waiters import WaiterHub
from tests.lifecycle.support import FAST
from tests.services.support import statements

BEAT = 0.1  # heartbeat_seconds: stale after three missed beats


def hub(db: Database) -> WaiterHub:
    values: dict[str, Any] = {**FAST, "heartbeat_seconds": BEAT}
    settings = Settings(database_url=db.url, **values)
    return WaiterHub(Deps(db=db, bus=EventBus("memory://"), settings=settings))


async def test_a_fresh_heartbeat_is_read_once_and_a_stale_one_again(db: Database) -> None:
    waiters = hub(db)
    async with db.write() as conn:
        await instances.beat(conn, "other")
    with statements(db) as sql:
        async with db.read() as conn:
            first = await waiters.heartbeat(conn, "other")
            again = await waiters.heartbeat(conn, "other")
    assert first is not None
    assert waiters.heartbeat_fresh(first)
    assert again == first
    assert len(sql) == 1  # the second answer needed no statement
    # It beats on; once the beat read is no longer fresh, the stored one is read again.
    await asyncio.sleep(3 * BEAT)
    async with db.write() as conn:
        await instances.beat(conn, "other")
    with statements(db) as sql:
        async with db.read() as conn:
            later = await waiters.heartbeat(conn, "other")
    assert len(sql) == 1
    assert later is not None
    assert later > first
    assert waiters.heartbeat_fresh(later)


async def test_a_process_that_stopped_beating_is_stale_no_later_than_a_read_says(db: Database) -> None:
    waiters = hub(db)
    async with db.write() as conn:
        await instances.beat(conn, "crashed")
        await instances.beat(conn, "stopped")
    async with db.read() as conn:
        for name in ("crashed", "stopped"):
            assert waiters.heartbeat_fresh(await waiters.heartbeat(conn, name))
    async with db.write() as conn:
        await instances.forget(conn, "stopped")  # a clean stop (its waiters detached first)
    await asyncio.sleep(3 * BEAT)  # three missed beats
    async with db.read() as conn:
        crashed = await waiters.heartbeat(conn, "crashed")
        stopped = await waiters.heartbeat(conn, "stopped")
        unknown = await waiters.heartbeat(conn, "never")
    assert not waiters.heartbeat_fresh(crashed)
    assert stopped is None
    assert unknown is None
