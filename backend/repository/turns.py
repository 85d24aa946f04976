"""Turns: start, complete, current turn and visible history (through the one rule)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, bindparam, exists, func, not_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.sqlfuncs import json_flag
from backend.db.tables import task_session_turns as T
from backend.domain.errors import InvalidState, NotFound
from backend.domain.ids import new_id
from backend.domain.records import TurnRecord
from backend.repository import rows
from backend.repository.authority import PENDING, current_turn_id, is_visible_turn

_TICK = dt.timedelta(microseconds=1)

# Built once per process (every write path asks it): only the session id changes between calls.
_CURRENT_TURN = select(current_turn_id(bindparam("b_session", type_=T.c.session_id.type)))


async def current_turn(conn: AsyncConnection, session_id: str) -> str | None:
    value = (await conn.execute(_CURRENT_TURN, {"b_session": session_id})).scalar_one_or_none()
    return None if value is None else str(value)


async def visible_turns(conn: AsyncConnection, session_id: str) -> list[TurnRecord]:
    query = (
        select(T)
        .where(T.c.session_id == session_id, is_visible_turn(T))
        .order_by(T.c.started_at, T.c.created_at, T.c.id)
    )
    return [rows.turn(r) for r in await conn.execute(query)]


async def get_turn(conn: AsyncConnection, turn_id: str) -> TurnRecord:
    row = (await conn.execute(select(T).where(T.c.id == turn_id))).first()
    if row is None:
        raise NotFound("turn", turn_id)
    return rows.turn(row)


async def insert_turn(
    conn: AsyncConnection,
    session_id: str,
    metadata: dict[str, Any] | None = None,
    *,
    turn_id: str | None = None,
) -> TurnRecord:
    """Caller holds the session lock. A new turn never starts at or before an existing one, so the
    newest turn wins the current-turn ordering even when the clock has not moved. `turn_id` lets a
    caller know the id before the write, so it can roll back a write whose outcome it did not see."""
    now = utcnow()
    latest = (
        await conn.execute(select(func.max(T.c.started_at)).where(T.c.session_id == session_id))
    ).scalar_one_or_none()
    if latest is not None:
        latest = latest if latest.tzinfo else latest.replace(tzinfo=dt.UTC)
        now = max(now, latest + _TICK)
    record = TurnRecord(turn_id or new_id(), session_id, now, None, now, dict(metadata or {}))
    await conn.execute(
        T.insert().values(
            id=record.id,
            session_id=session_id,
            started_at=now,
            created_at=now,
            completed_at=None,
            metadata=record.metadata,
        )
    )
    return record


async def close_predecessors(conn: AsyncConnection, successor_ids: Sequence[str]) -> list[tuple[str, str]]:
    """A newer conversational turn was accepted: complete every older open conversational turn of its
    session, at the successor's start. Without this an older open turn would outrank the successor
    once the successor completes (open before completed) and revive its history. Lifecycle turns and
    unpublished reservations are left alone. Returns (session id, turn id) of the turns closed."""
    if not successor_ids:
        return []
    succ = T.alias("successor")
    newer = and_(
        succ.c.id.in_(list(successor_ids)),
        succ.c.session_id == T.c.session_id,
        succ.c.started_at > T.c.started_at,
    )
    result = await conn.execute(
        update(T)
        .where(
            T.c.completed_at.is_(None),
            T.c.id.not_in(list(successor_ids)),
            not_(json_flag(T.c.metadata, "lifecycle_only")),
            not_(json_flag(T.c.metadata, PENDING)),
            exists().where(newer),
        )
        .values(completed_at=select(func.min(succ.c.started_at)).where(newer).scalar_subquery())
        .returning(T.c.session_id, T.c.id)
    )
    return [(r.session_id, r.id) for r in result]


async def complete_turn(conn: AsyncConnection, turn: TurnRecord) -> TurnRecord:
    if turn.completed_at is not None:
        raise InvalidState(f"turn {turn.id!r} is already completed")
    done = max(utcnow(), turn.started_at)
    result = await conn.execute(
        update(T).where(T.c.id == turn.id, T.c.completed_at.is_(None)).values(completed_at=done)
    )
    if result.rowcount != 1:
        raise InvalidState(f"turn {turn.id!r} is already completed")
    return await get_turn(conn, turn.id)
