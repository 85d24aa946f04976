"""Pending projections read through the one rule: per session, for many sessions in one statement."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import literal, select
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.sqlfuncs import json_text
from backend.db.tables import task_session_messages as M
from backend.db.tables import task_sessions as S
from backend.domain.errors import CorruptData
from backend.domain.records import Revision, SessionPending
from backend.repository.authority import active_clarification_rows, current_turn_id, pending_action
from backend.repository.meta import epoch_value, parse_epoch


async def pending_for_sessions(
    conn: AsyncConnection, session_ids: Sequence[str]
) -> dict[str, SessionPending]:
    """One statement for the whole batch; the epoch is read in the same snapshot as each sequence."""
    if not session_ids:
        return {}
    base = (
        select(
            S.c.id,
            S.c.task_id,
            S.c.state,
            S.c.pending_seq,
            current_turn_id(S.c.id).label("turn_id"),
        )
        .where(S.c.id.in_(list(dict.fromkeys(session_ids))))
        .subquery("s")
    )
    query = select(
        base.c.id,
        base.c.task_id,
        base.c.state,
        base.c.pending_seq,
        base.c.turn_id,
        pending_action(base.c.id, base.c.state, base.c.turn_id).label("pending_action"),
        epoch_value().label("epoch"),
    )
    out: dict[str, SessionPending] = {}
    for row in await conn.execute(query):
        epoch = 0 if row.epoch is None else parse_epoch(row.epoch)
        out[row.id] = SessionPending(
            row.id,
            row.task_id,
            row.state,
            row.turn_id,
            row.pending_action,
            Revision(epoch, int(row.pending_seq)),
        )
    return out


async def active_pending_ids(conn: AsyncConnection, session_id: str) -> list[str]:
    """Pending ids of the session's active clarification bundles, sorted."""
    state = select(S.c.state).where(S.c.id == literal(session_id)).scalar_subquery()
    pid = json_text(M.c.metadata, "pending_id")
    query = (
        select(pid.label("pending_id"))
        .where(M.c.session_id == session_id, active_clarification_rows(M, state))
        .group_by(pid)
        .order_by(pid)
    )
    out: list[str] = []
    for (value,) in await conn.execute(query):
        if not isinstance(value, str) or not value:
            raise CorruptData(f"session {session_id}: an active clarification row has no pending_id")
        out.append(value)
    return out
