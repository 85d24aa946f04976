"""Server processes starting at once on a fresh database each allocate their own revision epoch;
none fails because another created the epoch row first (`turnwise serve --workers N`)."""

from __future__ import annotations

import asyncio

from backend.db.engine import Database
from backend.repository import meta


async def test_two_starts_on_a_fresh_database_allocate_distinct_epochs(db: Database) -> None:
    other = Database(db.url)
    try:
        async with db.write() as first:
            assert await meta.advance_epoch(first) == 1
            # The second start runs while the first has created the row but not committed it: on
            # PostgreSQL its insert waits for that commit, on SQLite its BEGIN IMMEDIATE does.
            second = asyncio.create_task(_advance(other))
            await asyncio.sleep(0.2)
            assert not second.done()
        assert await asyncio.wait_for(second, 10) == 2
        async with db.write() as conn:
            assert await meta.advance_epoch(conn) == 3
    finally:
        await other.dispose()


async def _advance(db: Database) -> int:
    async with db.write() as conn:
        return await meta.advance_epoch(conn)
