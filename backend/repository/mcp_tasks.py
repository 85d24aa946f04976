"""MCP tasks: which pending action a task-augmented tool call waits on, whose it is, and until when.

A task's status is never stored (it is read from its pending action); `result` is the tool result the
plain call would have returned, written at most once (`complete` only fills an empty one), so every
process hands out the same result however many read it at once.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.tables import mcp_tasks as T


@dataclass(frozen=True, slots=True)
class McpTaskRecord:
    id: str
    owner: str
    session_id: str
    pending_id: str
    tool: str
    ttl_ms: int
    created_at: dt.datetime
    result: dict[str, Any] | None
    completed_at: dt.datetime | None

    @property
    def expires_at(self) -> dt.datetime:
        return self.created_at + dt.timedelta(milliseconds=self.ttl_ms)


def _record(row: Any) -> McpTaskRecord:
    return McpTaskRecord(
        id=row.id,
        owner=row.owner,
        session_id=row.session_id,
        pending_id=row.pending_id,
        tool=row.tool,
        ttl_ms=int(row.ttl_ms),
        created_at=row.created_at,
        result=row.result if isinstance(row.result, dict) else None,
        completed_at=row.completed_at,
    )


async def insert(
    conn: AsyncConnection,
    *,
    task_id: str,
    owner: str,
    session_id: str,
    pending_id: str,
    tool: str,
    ttl_ms: int,
    result: dict[str, Any] | None,
) -> McpTaskRecord:
    now = utcnow()
    values: dict[str, Any] = {
        "id": task_id,
        "owner": owner,
        "session_id": session_id,
        "pending_id": pending_id,
        "tool": tool,
        "ttl_ms": ttl_ms,
        "created_at": now,
    }
    if result is not None:  # left out, not None: a JSON column would store None as JSON null
        values.update(result=result, completed_at=now)
    await conn.execute(T.insert().values(**values))
    return McpTaskRecord(
        id=task_id,
        owner=owner,
        session_id=session_id,
        pending_id=pending_id,
        tool=tool,
        ttl_ms=ttl_ms,
        created_at=now,
        result=result,
        completed_at=values.get("completed_at"),
    )


async def get(conn: AsyncConnection, task_id: str, owner: str) -> McpTaskRecord | None:
    """The owner's task by id (another owner's reads as none)."""
    row = (await conn.execute(select(*T.c).where(T.c.id == task_id, T.c.owner == owner))).first()
    return None if row is None else _record(row)


async def list_for(
    conn: AsyncConnection, owner: str, *, after: str | None, limit: int
) -> list[McpTaskRecord]:
    """The owner's tasks, oldest first (ids are time-ordered), from after the cursor."""
    query = select(*T.c).where(T.c.owner == owner)
    if after is not None:
        query = query.where(T.c.id > after)
    rows = await conn.execute(query.order_by(T.c.id).limit(limit))
    return [_record(r) for r in rows]


async def complete(conn: AsyncConnection, task_id: str, result: dict[str, Any]) -> bool:
    """Store the task's result unless one is stored already; whether this call stored it."""
    changed = await conn.execute(
        update(T).where(T.c.id == task_id, T.c.result.is_(None)).values(result=result, completed_at=utcnow())
    )
    return changed.rowcount == 1
