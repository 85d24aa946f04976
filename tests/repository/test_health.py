"""The database's health seam: outages typed as one error, dead pooled connections replaced before
use, bounded statements, and what `Database.health` says (PostgreSQL; the fault tests with a real
cluster restarted, stopped, killed and frozen are in tests/dbfaults)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from backend.db.engine import Database
from backend.db.health import DatabaseOutage, is_outage
from tests.servers import free_port


async def _pid(db: Database) -> int:
    async with db.read() as conn:
        return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def _run(db: Database, *statements: str) -> None:
    async with db.write() as conn:
        for statement in statements:
            await conn.execute(text(statement))


async def _terminate(pg_url: str, pid: int) -> None:
    admin = Database(pg_url)
    try:
        async with admin.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    finally:
        await admin.dispose()


async def test_a_pooled_connection_the_server_closed_is_replaced_before_the_unit_and_so_are_older_ones(
    pg_url: str,
) -> None:
    db = Database(pg_url, pool_size=3)
    try:
        # Three pooled connections, all opened before the one that dies.
        async def hold() -> int:
            async with db.read() as conn:
                pid = int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())
                await asyncio.sleep(0.1)
                return pid

        before = set(await asyncio.gather(hold(), hold(), hold()))
        assert len(before) == 3
        for pid in before:
            await _terminate(pg_url, pid)  # as a restart does: the server closes every socket
        await asyncio.sleep(0.2)  # the driver reads the close

        # The next units succeed, each on a fresh connection: none of the old ones is used again.
        after = set(await asyncio.gather(hold(), hold(), hold()))
        assert not after & before
        assert db.health.up
        assert db.health.failures >= 1
    finally:
        await db.dispose()


async def test_a_refused_connect_is_a_typed_outage_and_marks_the_database_down() -> None:
    db = Database(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/test", connect_timeout=1)
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseOutage) as raised:
            await _run(db)
        assert time.monotonic() - started < 3
        assert is_outage(raised.value)
        assert not db.health.up
        assert db.health.failures == 1
        assert await db.probe() is False
        assert db.health.failures == 2
    finally:
        await db.dispose()


async def test_a_statement_without_a_reply_within_the_timeout_is_an_outage_and_its_connection_is_dropped(
    pg_url: str,
) -> None:
    db = Database(pg_url, pool_size=1, statement_timeout=0.5)
    try:
        first = await _pid(db)
        started = time.monotonic()
        with pytest.raises(DatabaseOutage) as raised:
            await _run(db, "SELECT pg_sleep(5)")
        assert time.monotonic() - started < 2.5  # closed at once, not rolled back over the socket
        assert is_outage(raised.value)
        assert not db.health.up
        # The next unit runs on a new connection and marks the database up again.
        assert await _pid(db) != first
        assert db.health.up
    finally:
        await db.dispose()


async def test_an_ordinary_database_error_is_not_an_outage(pg_url: str) -> None:
    db = Database(pg_url)
    try:
        with pytest.raises(IntegrityError) as raised:
            await _run(db, "CREATE TEMP TABLE t (id int primary key)", "INSERT INTO t VALUES (1), (1)")
        assert not is_outage(raised.value)
        assert db.health.up
        assert db.health.failures == 0
    finally:
        await db.dispose()


async def test_migrations_run_without_the_statement_timeout(pg_url: str) -> None:
    """A migration may rightly take longer than an operation: `migrate.upgrade` runs on a
    connection of its own, without the service's statement timeout."""
    from backend.db import migrate

    db = Database(pg_url, statement_timeout=0.01)
    try:
        await migrate.upgrade(db)  # already at head: it still connects and reads the version
    finally:
        await db.dispose()
    # Read back without the 10 ms bound, which a loaded machine's catalog query may exceed.
    plain = Database(pg_url)
    try:
        assert await migrate.is_current(plain)
    finally:
        await plain.dispose()


class _DropAfterFirst:
    """A TCP relay to PostgreSQL: its first connection is relayed whole; every later one gets through
    its startup, then loses both sides when the client sends its first query (a real connection lost
    while the pool sets it up, in its connect hook's first query)."""

    def __init__(self) -> None:
        self.connections = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        drop = self.connections > 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", 5432)

        async def down() -> None:
            with contextlib.suppress(OSError):
                while data := await up_reader.read(65536):
                    writer.write(data)
                    await writer.drain()

        relay = asyncio.create_task(down())
        try:
            # Untyped first messages (an SSL request, the startup message): length-prefixed.
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                body = await reader.readexactly(size - 4)
                up_writer.write(size.to_bytes(4, "big") + body)
                await up_writer.drain()
                if body[:4] != (80877103).to_bytes(4, "big"):  # not an SSLRequest: the startup
                    break
            while True:
                kind = await reader.readexactly(1)
                size = int.from_bytes(await reader.readexactly(4), "big")
                body = await reader.readexactly(size - 4)
                if drop and kind in (b"Q", b"P"):
                    break  # the first query: the connection goes
                up_writer.write(kind + size.to_bytes(4, "big") + body)
                await up_writer.drain()
        except (asyncio.IncompleteReadError, OSError):
            pass
        finally:
            relay.cancel()
            for w in (writer, up_writer):
                w.close()


async def test_a_connection_lost_during_its_setup_is_a_typed_outage(pg_url: str) -> None:
    del pg_url  # PostgreSQL is there
    relay = await asyncio.start_server(_DropAfterFirst(), "127.0.0.1", 0)
    port = relay.sockets[0].getsockname()[1]
    db = Database(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/test", connect_timeout=2)
    try:
        async with db.read() as first:  # held, so the next unit needs a connection of its own
            await first.execute(text("SELECT 1"))
            with pytest.raises(DatabaseOutage) as raised:
                await _run(db, "SELECT 1")
        assert is_outage(raised.value)
        assert not db.health.up
    finally:
        await db.dispose()
        relay.close()
        await relay.wait_closed()
