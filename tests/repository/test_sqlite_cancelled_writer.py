"""A SQLite writer cancelled mid-unit must not leave SQLite's writer lock held. A cancelled statement
invalidates its connection, which is then closed; but a `sqlite3` connection closed while a statement
of it is still unfinalized (the cancelled cursor's) stays open as a "zombie" and keeps its open
transaction, and with it the lock, so every later writer waited out its busy timeout and failed
("database is locked") until that cursor happened to be collected. A bounded unit of work (a
rollback or a reservation past its deadline, say) is cancelled exactly so."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from backend.db.engine import Database

pytestmark = pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "sqlalchemy"])

# A statement that keeps aiosqlite's thread busy for a while (a cancellation lands during it).
SLOW = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000000) SELECT count(*) FROM n"
)


async def test_a_writer_cancelled_mid_statement_leaves_the_lock_to_the_next_writer(
    sqlite_url: str, fast_path: bool
) -> None:
    db = Database(sqlite_url, fast_path=fast_path)
    try:
        async with db.write() as conn:
            await conn.execute(text("DROP TABLE IF EXISTS cancelled_writer"))
            await conn.execute(text("CREATE TABLE cancelled_writer (x INTEGER)"))
        started = asyncio.Event()

        async def write(x: int, slow: bool = False) -> None:
            async with db.write() as conn:
                await conn.execute(text("INSERT INTO cancelled_writer VALUES (:x)"), {"x": x})
                started.set()
                if slow:
                    await conn.execute(text(SLOW))

        cancelled = asyncio.create_task(write(1, slow=True))
        await started.wait()
        await asyncio.sleep(0.02)  # its slow statement runs on aiosqlite's thread
        assert not cancelled.done()
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        assert cancelled.cancelled()

        await asyncio.wait_for(write(2), 5)  # not the busy timeout of a lock left held
        async with db.read() as conn:
            rows = (await conn.execute(text("SELECT x FROM cancelled_writer"))).scalars().all()
        assert rows == [2]  # the cancelled unit's insert was rolled back
    finally:
        await db.dispose()
