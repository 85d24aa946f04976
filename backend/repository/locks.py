"""Per-session write serialization: advisory locks on PostgreSQL, the writer lock on SQLite."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from sqlalchemy import bindparam, func, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.types import BigInteger

from backend.db.prepared import Prepared

# Many sessions in one statement (startup recovery locks thousands): the ordered subquery keeps
# acquisition order sorted, so two batch lockers never deadlock.
_LOCK_MANY = text(
    "SELECT count(pg_advisory_xact_lock(k)) FROM (SELECT unnest(:keys) AS k ORDER BY 1) AS ordered"
).bindparams(bindparam("keys", type_=ARRAY(BigInteger())))
_LOCK_ONE = Prepared(select(func.pg_advisory_xact_lock(bindparam("key", type_=BigInteger()))))


def _key(session_id: str) -> int:
    digest = hashlib.blake2b(f"turnwise-session:{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


async def lock_sessions(conn: AsyncConnection, session_ids: Iterable[str]) -> None:
    """Serialize writers of these sessions until the transaction ends (sorted, so never a deadlock).

    SQLite transactions opened by `Database.write()` already hold the database writer lock.
    """
    if conn.dialect.name != "postgresql":
        return
    keys = sorted({_key(s) for s in session_ids})
    if len(keys) > 1:
        await conn.execute(_LOCK_MANY, {"keys": keys})
        return
    for key in keys:
        await _LOCK_ONE.rows(conn, {"key": key})
