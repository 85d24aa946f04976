"""Pending projections read through the one rule: per session, for many sessions in one statement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.fast_path import Prepared
from backend.db.tables import task_session_messages as M
from backend.db.tables import task_sessions as S
from backend.domain.errors import CorruptData
from backend.domain.records import Revision, SessionPending, SessionRecord
from backend.repository import rows
from backend.repository.authority import active_pending_rows, current_turn_id, pending_action
from backend.repository.meta import epoch_value, parse_epoch


def projected_sessions(where: ColumnElement[bool]) -> Select[Any]:
    """Session rows with their projection: the derivation runs once per session row, and the epoch
    is read in the same statement (one snapshot) as each sequence."""
    # Materialized, so the current turn is derived once per session even where the planner would
    # otherwise inline it into each of the pending-kind tests below.
    base = (
        select(S, current_turn_id(S.c.id).label("turn_id")).where(where).cte("s").prefix_with("MATERIALIZED")
    )
    return select(
        base,
        pending_action(base.c.id, base.c.state, base.c.turn_id).label("pending_action"),
        epoch_value().label("epoch"),
    )


# Built once per process: the projection is the hottest read there is, and building its expression
# cost more than running it.
_BY_SESSION_IDS = projected_sessions(S.c.id.in_(bindparam("b_session_ids", expanding=True)))
_BY_TASK_IDS = projected_sessions(S.c.task_id.in_(bindparam("b_task_ids", expanding=True)))
_BY_TASK_IDS = _BY_TASK_IDS.order_by(
    _BY_TASK_IDS.selected_columns.created_at, _BY_TASK_IDS.selected_columns.id
)
_BY_TASK_ID = projected_sessions(S.c.task_id == bindparam("b_task_id", type_=S.c.task_id.type))
_BY_TASK_ID_P = Prepared(
    _BY_TASK_ID.order_by(_BY_TASK_ID.selected_columns.created_at, _BY_TASK_ID.selected_columns.id)
)
_SESSION_STATE = (
    select(S.c.state).where(S.c.id == bindparam("b_session", type_=S.c.id.type)).scalar_subquery()
)
_PENDING_ID = M.c.pending_id
_B_SESSION = bindparam("b_session", type_=S.c.id.type)
_ACTIVE_PENDING_IDS = (
    select(_PENDING_ID.label("pending_id"))
    .where(M.c.session_id == _B_SESSION, active_pending_rows(M, _SESSION_STATE, session_id=_B_SESSION))
    .group_by(_PENDING_ID)
    .order_by(_PENDING_ID)
)


def _projection(row: Any) -> SessionPending:
    epoch = 0 if row.epoch is None else parse_epoch(row.epoch)
    return SessionPending(
        row.id, row.task_id, row.state, row.turn_id, row.pending_action, Revision(epoch, int(row.pending_seq))
    )


async def pending_for_sessions(
    conn: AsyncConnection, session_ids: Sequence[str]
) -> dict[str, SessionPending]:
    """Projections of many sessions in one statement."""
    if not session_ids:
        return {}
    rows_ = await conn.execute(_BY_SESSION_IDS, {"b_session_ids": list(dict.fromkeys(session_ids))})
    return {row.id: _projection(row) for row in rows_}


async def sessions_with_pending(
    conn: AsyncConnection, task_ids: Sequence[str]
) -> list[tuple[SessionRecord, SessionPending]]:
    """Every session of these tasks (oldest first) with its projection, in one statement."""
    if not task_ids:
        return []
    ids = list(dict.fromkeys(task_ids))
    if len(ids) == 1:
        return [
            (rows.session(row), _projection(row))
            for row in await _BY_TASK_ID_P.rows(conn, {"b_task_id": ids[0]})
        ]
    found = await conn.execute(_BY_TASK_IDS, {"b_task_ids": ids})
    return [(rows.session(row), _projection(row)) for row in found]


async def active_pending_ids(conn: AsyncConnection, session_id: str) -> list[str]:
    """Pending ids of the session's active clarification bundles, sorted."""
    out: list[str] = []
    for (value,) in await conn.execute(_ACTIVE_PENDING_IDS, {"b_session": session_id}):
        if not isinstance(value, str) or not value:
            raise CorruptData(f"session {session_id}: an active clarification row has no pending_id")
        out.append(value)
    return out
