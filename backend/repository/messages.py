"""Transcript messages: insert, page, delete."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, delete, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.tables import task_session_messages as M
from backend.domain.errors import NotFound
from backend.domain.ids import new_id
from backend.domain.records import MessageRecord
from backend.repository import message_fields


async def insert_message(
    conn: AsyncConnection,
    *,
    session_id: str,
    turn_id: str,
    kind: str,
    author: str,
    content: str,
    metadata: dict[str, Any] | None = None,
) -> MessageRecord:
    now = utcnow()
    record = MessageRecord(
        new_id(), session_id, turn_id, kind, author, content, dict(metadata or {}), now, now
    )
    await conn.execute(
        M.insert().values(
            id=record.id,
            session_id=session_id,
            turn_id=turn_id,
            type=kind,
            author=author,
            content=content,
            **message_fields.values_of(record.metadata),
            created_at=now,
            updated_at=now,
        )
    )
    return record


async def get_message(conn: AsyncConnection, message_id: str) -> MessageRecord:
    row = (await conn.execute(select(M).where(M.c.id == message_id))).first()
    if row is None:
        raise NotFound("message", message_id)
    return message_fields.record(row)


async def page_messages(
    conn: AsyncConnection, session_id: str, *, first: int, after: str | None
) -> list[MessageRecord]:
    query = select(M).where(M.c.session_id == session_id)
    if after is not None:
        anchor = (
            await conn.execute(
                select(M.c.created_at, M.c.id).where(M.c.id == after, M.c.session_id == session_id)
            )
        ).first()
        if anchor is None:
            raise NotFound("message", after)
        query = query.where(
            or_(
                M.c.created_at > anchor.created_at,
                and_(M.c.created_at == anchor.created_at, M.c.id > anchor.id),
            )
        )
    query = query.order_by(M.c.created_at, M.c.id).limit(first)
    return [message_fields.record(r) for r in await conn.execute(query)]


async def delete_message(conn: AsyncConnection, message_id: str) -> None:
    await conn.execute(delete(M).where(M.c.id == message_id))


async def get_messages(conn: AsyncConnection, message_ids: list[str]) -> dict[str, MessageRecord]:
    """The messages that still exist among these ids, in one statement (absent ids are left out)."""
    if not message_ids:
        return {}
    result = await conn.execute(select(M).where(M.c.id.in_(list(dict.fromkeys(message_ids)))))
    return {r.id: message_fields.record(r) for r in result}


async def changed_since(
    conn: AsyncConnection, session_ids: list[str], since: Any, *, limit: int
) -> list[MessageRecord]:
    """Messages of these sessions written or updated at or after `since`, newest `limit` per call,
    returned oldest first (for a subscriber that may have missed their events)."""
    if not session_ids:
        return []
    query = (
        select(M)
        .where(M.c.session_id.in_(list(dict.fromkeys(session_ids))), M.c.updated_at >= since)
        .order_by(M.c.updated_at.desc(), M.c.id.desc())
        .limit(limit)
    )
    found = [message_fields.record(r) for r in await conn.execute(query)]
    found.reverse()
    return found
