"""Server instances that host live clarification waiters: registration and heartbeats in the meta table.

A waiter's bundle rows name the instance that holds it (`waiter_instance`); another process decides
whether that waiter can still receive a hand-off by reading the instance's heartbeat here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.tables import meta

PREFIX = "instance:"


def key(instance_id: str) -> str:
    return PREFIX + instance_id


async def beat(conn: AsyncConnection, instance_id: str) -> None:
    now = utcnow().isoformat()
    result = await conn.execute(update(meta).where(meta.c.key == key(instance_id)).values(value=now))
    if result.rowcount == 0:
        await conn.execute(insert(meta).values(key=key(instance_id), value=now))


async def forget(conn: AsyncConnection, instance_id: str) -> None:
    await conn.execute(delete(meta).where(meta.c.key == key(instance_id)))


async def heartbeats(conn: AsyncConnection, instance_ids: Sequence[str]) -> dict[str, dt.datetime]:
    """Last heartbeat per known instance; an unreadable value counts as no heartbeat (a dead instance)."""
    ids = [i for i in dict.fromkeys(instance_ids) if i]
    if not ids:
        return {}
    out: dict[str, dt.datetime] = {}
    result = await conn.execute(select(meta.c.key, meta.c.value).where(meta.c.key.in_([key(i) for i in ids])))
    for row in result:
        try:
            out[row.key[len(PREFIX) :]] = dt.datetime.fromisoformat(row.value)
        except ValueError:
            continue
    return out


async def prune(conn: AsyncConnection, older_than: dt.datetime) -> int:
    """Drop registrations of instances whose heartbeat is older than `older_than` (crashed processes)."""
    stale = []
    for row in await conn.execute(select(meta.c.key, meta.c.value).where(meta.c.key.like(PREFIX + "%"))):
        try:
            if dt.datetime.fromisoformat(row.value) < older_than:
                stale.append(row.key)
        except ValueError:
            stale.append(row.key)
    if stale:
        await conn.execute(delete(meta).where(meta.c.key.in_(stale)))
    return len(stale)
