"""Per-session write serialization: advisory locks on PostgreSQL, the writer lock on SQLite."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection


def _key(session_id: str) -> int:
    digest = hashlib.blake2b(f"turnwise-session:{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


async def lock_sessions(conn: AsyncConnection, session_ids: Iterable[str]) -> None:
    """Serialize writers of these sessions until the transaction ends (sorted, so never a deadlock).

    SQLite transactions opened by `Database.write()` already hold the database writer lock.
    """
    if conn.dialect.name != "postgresql":
        return
    for key in sorted({_key(s) for s in session_ids}):
        await conn.execute(select(func.pg_advisory_xact_lock(key)))
