"""Pooled PostgreSQL connections: no ping per checkout, yet a connection that died while idle is
replaced before anyone sees it."""

from __future__ import annotations

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
        # The pool still holds the dead connection; the checkout's ping finds it and reconnects.
        alive = await _backend_pid(db)
        assert alive != dead
        assert db.pings >= 1
    finally:
        await db.dispose()
        await admin.dispose()


async def test_a_connection_killed_between_two_quick_uses_fails_one_transaction_only(pg_url: str) -> None:
    db = Database(pg_url, pool_size=1)  # no ping: the connection was in use a moment ago
    admin = Database(pg_url, pool_size=1)
    try:
        dead = await _backend_pid(db)
        async with admin.read() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dead})
        with pytest.raises(DBAPIError) as failed:
            await _backend_pid(db)
        assert failed.value.connection_invalidated
        # The disconnect invalidated the pool: the next transaction has a new connection.
        assert await _backend_pid(db) != dead
    finally:
        await db.dispose()
        await admin.dispose()
