"""Agent runner leases: which runner holds a session's prompt channel, renewed by its process."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.tables import agent_runners as R


async def take_over(
    conn: AsyncConnection, *, runner_id: str, session_id: str, instance_id: str, lease: float
) -> None:
    """The newest runner holds the channel: earlier holders of the session lose their lease."""
    now = utcnow()
    await conn.execute(delete(R).where(R.c.session_id == session_id))
    await conn.execute(
        R.insert().values(
            id=runner_id,
            session_id=session_id,
            instance_id=instance_id,
            connected_at=now,
            expires_at=now + dt.timedelta(seconds=lease),
        )
    )


async def renew(conn: AsyncConnection, runner_id: str, lease: float) -> bool:
    """False when the lease is gone (taken over or released): the holder must stop."""
    result = await conn.execute(
        update(R).where(R.c.id == runner_id).values(expires_at=utcnow() + dt.timedelta(seconds=lease))
    )
    return result.rowcount == 1


async def release(conn: AsyncConnection, runner_id: str) -> None:
    await conn.execute(delete(R).where(R.c.id == runner_id))


async def live_holder(conn: AsyncConnection, session_id: str) -> str | None:
    row = (
        await conn.execute(
            select(R.c.id)
            .where(R.c.session_id == session_id, R.c.expires_at > utcnow())
            .order_by(R.c.connected_at.desc())
            .limit(1)
        )
    ).first()
    return None if row is None else str(row.id)


async def holding_instances(conn: AsyncConnection) -> list[str]:
    """The server processes that hold any prompt channel lease (expired ones included)."""
    return [str(r.instance_id) for r in await conn.execute(select(R.c.instance_id).distinct())]


async def release_instances(conn: AsyncConnection, instance_ids: list[str]) -> int:
    """Drop every lease held through these (gone) processes: their runners are disconnected."""
    if not instance_ids:
        return 0
    result = await conn.execute(delete(R).where(R.c.instance_id.in_(instance_ids)))
    return int(result.rowcount)
