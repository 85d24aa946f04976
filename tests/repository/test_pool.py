"""Pooled PostgreSQL connections: no ping per checkout, yet a connection that died while idle is
replaced before anyone sees it."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from backend.db.engine import Database


async def _backend_pid(db: Database) -> int:
    async with db.read() as conn:
        return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def test_a_connection_in_steady_use_is_not_pinged(pg_url: str) -> None:
    db = Database(pg_url, pool_size=1)
    try:
        for _ in range(5):
            await _backend_pid(db)
        assert db.pings == 0
    finally:
        await db.dispose()


async def test_an_idle_connection_killed_at_the_server_is_replaced_without_an_error(pg_url: str) -> None:
    db = Database(pg_url, pool_size=1, idle_ping_seconds=0.0)
    admin = Database(pg_url, pool_size=1)
    try:
        dead = await _backend_pid(db)
        async with admin.read() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dead})
        # The pool still holds the dead connection; the checkout finds it (closed, or by its ping)
        # and reconnects before the unit runs.
        alive = await _backend_pid(db)
        assert alive != dead
        assert db.pings + db.health.failures >= 1
    finally:
        await db.dispose()
        await admin.dispose()


async def test_a_connection_killed_between_two_quick_uses_is_replaced_before_the_next_unit(
    pg_url: str,
) -> None:
    db = Database(pg_url, pool_size=1)  # no ping: the connection was in use a moment ago
    admin = Database(pg_url, pool_size=1)
    try:
        dead = await _backend_pid(db)
        async with admin.read() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dead})
        await asyncio.sleep(0.2)  # the server closed the socket; the driver reads that at once
        assert await _backend_pid(db) != dead  # no error: replaced at checkout, without a round trip
        assert db.pings == 0
        assert db.health.failures == 1
        assert db.health.up
    finally:
        await db.dispose()
        await admin.dispose()


async def test_a_connection_killed_during_a_unit_fails_that_unit_only(pg_url: str) -> None:
    db = Database(pg_url, pool_size=1)
    admin = Database(pg_url, pool_size=1)
    try:
        killed: list[int] = []

        async def killed_midway() -> None:
            async with db.read() as conn:
                killed.append(int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()))
                async with admin.read() as other:
                    await other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": killed[0]})
                await conn.execute(text("SELECT 1"))

        with pytest.raises(DBAPIError) as failed:
            await killed_midway()
        assert failed.value.connection_invalidated
        dead = killed[0]
        # The disconnect invalidated the pool: the next transaction has a new connection.
        assert await _backend_pid(db) != dead
    finally:
        await db.dispose()
        await admin.dispose()
