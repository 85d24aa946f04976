"""Per-session write serialization: advisory locks on PostgreSQL, the writer lock on SQLite.

A session's lock key is derived in SQL (`hashtextextended('turnwise-session:' || id, 0)`), so a
statement that finds a session can take its lock in the same round trip (see
`clarifications.lock_session_of_bundle`). Every process of one deployment must derive keys the same
way: processes of releases before the key moved into SQL do not serialize with these (stop them all
before starting the new release).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import ColumnElement, String, bindparam, func, literal, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.fast_path import Prepared
from backend.db.prepared import begin_with

_PREFIX = "turnwise-session:"


def lock_key(session_id: Any) -> ColumnElement[int]:
    """The advisory-lock key of a session id (a bound value or a column)."""
    return func.hashtextextended(literal(_PREFIX, String()) + session_id, 0)


# Many sessions in one statement (startup recovery locks thousands): the ordered subquery keeps
# acquisition order sorted, so two batch lockers never deadlock.
_LOCK_MANY = text(
    "SELECT count(pg_advisory_xact_lock(k)) FROM "
    "(SELECT DISTINCT hashtextextended(:prefix || unnest(:ids), 0) AS k ORDER BY 1) AS ordered"
).bindparams(bindparam("ids", type_=ARRAY(String())), bindparam("prefix", _PREFIX, type_=String()))
_LOCK_ONE = Prepared(
    select(func.pg_advisory_xact_lock(lock_key(bindparam("session_id", type_=String()))).label("locked"))
)


async def lock_sessions(conn: AsyncConnection, session_ids: Iterable[str]) -> None:
    """Serialize writers of these sessions until the transaction ends (sorted, so never a deadlock).

    SQLite transactions opened by `Database.write()` already hold the database writer lock.
    """
    if conn.dialect.name != "postgresql":
        return
    ids = sorted(set(session_ids))
    if len(ids) > 1:
        await conn.execute(_LOCK_MANY, {"ids": ids})
    elif ids and not await begin_with(conn, lock_one(ids[0])):
        await _LOCK_ONE.rows(conn, {"session_id": ids[0]})


def lock_one(session_id: str) -> tuple[Prepared, dict[str, Any]]:
    """One session's lock, as a statement for `prepared.begin_with` (PostgreSQL)."""
    return _LOCK_ONE, {"session_id": session_id}
