"""The session inbox: resume prompts of late answers that no agent was connected to receive.

An item is written in the transaction that settles its claim and opens its successor turn
(`turn_id`). It is deliverable while it was never taken, never closed, and its successor is still the
session's current turn; taking it is one conditional UPDATE, so exactly one taker ever gets it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.sqlfuncs import json_flag, json_update
from backend.db.tables import session_inbox as I
from backend.db.tables import task_session_messages as M
from backend.repository.authority import current_turn_id

QUEUED_KEY = "response_queued"


@dataclass(frozen=True, slots=True)
class InboxItem:
    id: str
    session_id: str
    turn_id: str
    source_turn_id: str
    pending_id: str
    claim_id: str
    prompt: str
    answers: list[dict[str, Any]]
    created_at: dt.datetime
    delivered_at: dt.datetime | None
    delivered_via: str | None
    acked_at: dt.datetime | None
    closed_at: dt.datetime | None


def _item(row: Any) -> InboxItem:
    answers = row.answers if isinstance(row.answers, list) else []
    return InboxItem(
        id=row.id,
        session_id=row.session_id,
        turn_id=row.turn_id,
        source_turn_id=row.source_turn_id,
        pending_id=row.pending_id,
        claim_id=row.claim_id,
        prompt=row.prompt,
        answers=answers,
        created_at=row.created_at,
        delivered_at=row.delivered_at,
        delivered_via=row.delivered_via,
        acked_at=row.acked_at,
        closed_at=row.closed_at,
    )


def _deliverable() -> ColumnElement[bool]:
    return and_(
        I.c.delivered_at.is_(None),
        I.c.closed_at.is_(None),
        I.c.turn_id == current_turn_id(I.c.session_id),
    )


async def put(
    conn: AsyncConnection,
    *,
    item_id: str,
    session_id: str,
    turn_id: str,
    source_turn_id: str,
    pending_id: str,
    claim_id: str,
    prompt: str,
    answers: list[dict[str, Any]],
) -> None:
    """Caller holds the session lock and writes the successor turn in the same transaction."""
    await conn.execute(
        I.insert().values(
            id=item_id,
            session_id=session_id,
            turn_id=turn_id,
            source_turn_id=source_turn_id,
            pending_id=pending_id,
            claim_id=claim_id,
            prompt=prompt,
            answers=answers,
            created_at=utcnow(),
        )
    )


async def mark_rows(conn: AsyncConnection, message_ids: Sequence[str]) -> list[str]:
    """Flag the answered question rows whose answer waits in the inbox (the web card shows it)."""
    if not message_ids:
        return []
    result = await conn.execute(
        update(M)
        .where(M.c.id.in_(list(message_ids)))
        .values(metadata=json_update(M.c.metadata, {QUEUED_KEY: True}))
        .returning(M.c.id)
    )
    return [r.id for r in result]


async def unmark_bundles(conn: AsyncConnection, session_id: str, pending_ids: Sequence[str]) -> list[str]:
    """The answer of these bundles no longer waits (taken or closed): drop the web card's flag."""
    if not pending_ids:
        return []
    result = await conn.execute(
        update(M)
        .where(
            M.c.session_id == session_id,
            M.c.pending_id.in_(list(pending_ids)),
            json_flag(M.c.metadata, QUEUED_KEY),
        )
        .values(metadata=json_update(M.c.metadata, remove=(QUEUED_KEY,)))
        .returning(M.c.id)
    )
    return [r.id for r in result]


async def close_stale_of_session(conn: AsyncConnection, session_id: str) -> list[str]:
    """Close the session's undelivered items whose successor turn is no longer current; pending ids."""
    result = await conn.execute(
        update(I)
        .where(
            I.c.session_id == session_id,
            I.c.delivered_at.is_(None),
            I.c.closed_at.is_(None),
            I.c.turn_id != current_turn_id(I.c.session_id),
        )
        .values(closed_at=utcnow())
        .returning(I.c.pending_id)
    )
    return [r.pending_id for r in result]


async def take(
    conn: AsyncConnection, session_id: str, *, via: str, pending_id: str | None = None
) -> list[InboxItem]:
    """Mark the deliverable items of the session (or of one bundle) delivered and return them, oldest
    first. The at-most-once boundary: a taken item is never handed out again."""
    where = [I.c.session_id == session_id, _deliverable()]
    if pending_id is not None:
        where.append(I.c.pending_id == pending_id)
    result = await conn.execute(
        update(I).where(*where).values(delivered_at=utcnow(), delivered_via=via).returning(*I.c)
    )
    return sorted((_item(r) for r in result), key=lambda i: (i.created_at, i.id))


async def for_bundle(conn: AsyncConnection, pending_id: str) -> tuple[InboxItem, bool] | None:
    """The newest item of a bundle and whether it is deliverable now; None when it has none."""
    row = (
        await conn.execute(
            select(*I.c, _deliverable().label("deliverable"))
            .where(I.c.pending_id == pending_id)
            .order_by(I.c.created_at.desc(), I.c.id.desc())
            .limit(1)
        )
    ).first()
    return None if row is None else (_item(row), bool(row.deliverable))


async def acknowledge(conn: AsyncConnection, turn_id: str) -> bool:
    """The agent confirmed the delivered item that opened `turn_id`."""
    result = await conn.execute(
        update(I)
        .where(I.c.turn_id == turn_id, I.c.delivered_at.is_not(None), I.c.acked_at.is_(None))
        .values(acked_at=utcnow())
    )
    return result.rowcount == 1


async def close_stale(conn: AsyncConnection) -> list[tuple[str, str]]:
    """Startup: close every undelivered item whose successor turn is no longer current (a newer turn
    superseded it; it is never delivered). Returns (session id, pending id) per item."""
    result = await conn.execute(
        update(I)
        .where(
            I.c.delivered_at.is_(None),
            I.c.closed_at.is_(None),
            I.c.turn_id != current_turn_id(I.c.session_id),
        )
        .values(closed_at=utcnow())
        .returning(I.c.session_id, I.c.pending_id, I.c.claim_id)
    )
    return [(r.session_id, r.pending_id) for r in result]
