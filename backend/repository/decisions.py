"""The audit trail's read: settled pending actions of a scope, newest decision first, in one statement.

A pending action is settled when it is not active by the one rule (`repository/authority.py`): its
rows are no longer pending, or they are but not in the current turn of a live session (superseded).
Its decision time is its rows' last update (a claim writes it, a settle keeps it; a cancel or an
expiry writes it too); a superseded one's is the start of the first turn of its session started after
it was asked (best effort: the turn that took its place), or its last update when there is none.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BindParameter, ColumnElement, Integer, and_, bindparam, case, func, not_, select, true
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.tables import task_session_messages as M
from backend.db.tables import task_session_turns as T
from backend.db.tables import task_sessions as S
from backend.db.tables import users as U
from backend.domain.lifecycle import BundleRow
from backend.repository.authority import (
    PENDING_ACTION_TYPES,
    current_turn_id,
    is_pending_action,
    is_pending_status,
    session_is_live,
)
from backend.repository.needs_you import custom_plans, question_order
from backend.repository.pending_rows import BUNDLE_ROW_COLUMNS, bundle_row


@dataclass(frozen=True, slots=True)
class SettledFacts:
    pending_id: str
    task_id: str
    session_id: str
    session_state: str
    current_turn: str | None
    asked_at: dt.datetime
    decided_at: dt.datetime
    # The user name of who claimed its rows (their id when the user is gone), when stored.
    decided_by: str | None
    rows: tuple[BundleRow, ...]


def _scope(where: ColumnElement[bool]) -> Any:
    """The sessions read (`where`), each with its task, state and current turn."""
    return (
        select(S.c.id, S.c.task_id, S.c.state, current_turn_id(S.c.id).label("turn_id"))
        .where(where)
        .cte("scope")
        .prefix_with("MATERIALIZED")
    )


def _bundles(scope: Any) -> Any:
    """Each pending action of those sessions, one row per bundle: when it was asked and last
    changed, whether a row of it is still open, its turn and who claimed it."""
    open_row = case((is_pending_status(M), 1), else_=0)
    return (
        select(
            M.c.pending_id,
            M.c.session_id,
            func.min(M.c.created_at).label("asked_at"),
            func.max(M.c.updated_at).label("updated_at"),
            func.max(open_row).label("open_rows"),
            func.min(M.c.turn_id).label("turn_id"),
            func.max(M.c.decided_by).label("decided_by"),
        )
        .select_from(scope.join(M, M.c.session_id == scope.c.id))
        # (pending_id IS NOT NULL, spelled out: what the partial index of the trail is read by)
        .where(M.c.pending_id.is_not(None), is_pending_action(M))
        .group_by(M.c.pending_id, M.c.session_id)
        .cte("bundles")
    )


def _decided(scope: Any, bundles: Any) -> Any:
    """The bundles decided (not still waiting in their session's current turn), newest first, the
    page's worth (`b_first`), each with when it was decided: its last change, or for one left open
    the start of the turn that followed it."""
    successor = (
        select(func.min(T.c.started_at))
        .where(T.c.session_id == bundles.c.session_id, T.c.started_at > bundles.c.asked_at)
        .scalar_subquery()
    )
    decided_at = case(
        (bundles.c.open_rows == 1, func.coalesce(successor, bundles.c.updated_at)), else_=bundles.c.updated_at
    ).label("decided_at")
    still_active = and_(
        bundles.c.open_rows == 1, bundles.c.turn_id == scope.c.turn_id, session_is_live(scope.c.state)
    )
    return (
        select(
            bundles.c.pending_id,
            bundles.c.session_id,
            bundles.c.asked_at,
            bundles.c.decided_by,
            decided_at,
            scope.c.task_id,
            scope.c.state.label("session_state"),
            scope.c.turn_id.label("current_turn"),
        )
        .select_from(bundles.join(scope, scope.c.id == bundles.c.session_id))
        .where(not_(still_active))
        .order_by(decided_at.desc(), bundles.c.pending_id.desc())
        .limit(bindparam("b_first", type_=Integer))
        .cte("decided")
    )


def _statement(where: ColumnElement[bool]) -> Any:
    """The decided bundles of the sessions `where` picks, each with every row of its bundle."""
    scope = _scope(where)
    decided = _decided(scope, _bundles(scope))
    rows = M.alias("bundle_row")
    return (
        select(
            decided.c.pending_id.label("decided_pending_id"),
            decided.c.task_id,
            decided.c.session_state,
            decided.c.current_turn,
            decided.c.asked_at,
            decided.c.decided_at,
            func.coalesce(U.c.name, decided.c.decided_by).label("decided_by_name"),
            *(rows.c[c.name] for c in BUNDLE_ROW_COLUMNS),
        )
        .select_from(
            decided.join(
                rows,
                and_(
                    rows.c.pending_id == decided.c.pending_id,
                    rows.c.session_id == decided.c.session_id,
                    rows.c.type.in_(PENDING_ACTION_TYPES),
                ),
            ).outerjoin(U, U.c.id == decided.c.decided_by)
        )
        .order_by(decided.c.decided_at.desc(), decided.c.pending_id.desc(), rows.c.created_at, rows.c.id)
    )


_B_TASKS: BindParameter[Any] = bindparam("b_task_ids", expanding=True)
_BY_SCOPE = {
    "session": _statement(S.c.id == bindparam("b_session", type_=S.c.id.type)),
    "tasks": _statement(S.c.task_id.in_(_B_TASKS)),
    "all": _statement(true()),
}


async def settled(
    conn: AsyncConnection,
    *,
    session_id: str | None = None,
    task_ids: Sequence[str] | None = None,
    first: int,
) -> list[SettledFacts]:
    """The newest `first` settled pending actions of one session, of these tasks, or (neither) of
    every task; newest decision first."""
    params: dict[str, Any] = {"b_first": first}
    if session_id is not None:
        scope = "session"
        params["b_session"] = session_id
    elif task_ids is not None:
        if not task_ids:
            return []
        scope = "tasks"
        params["b_task_ids"] = list(dict.fromkeys(task_ids))
    else:
        scope = "all"
    found: dict[str, tuple[Any, list[BundleRow]]] = {}
    await custom_plans(conn)
    for row in await conn.execute(_BY_SCOPE[scope], params):
        entry = found.get(row.decided_pending_id)
        if entry is None:
            entry = found[row.decided_pending_id] = (row, [])
        entry[1].append(bundle_row(row))
    out = []
    for pending_id, (first_row, rows_) in found.items():
        rows_.sort(key=question_order)
        out.append(
            SettledFacts(
                pending_id=pending_id,
                task_id=first_row.task_id,
                session_id=rows_[0].session_id,
                session_state=first_row.session_state,
                current_turn=None if first_row.current_turn is None else str(first_row.current_turn),
                asked_at=first_row.asked_at,
                decided_at=first_row.decided_at,
                decided_by=first_row.decided_by_name,
                rows=tuple(rows_),
            )
        )
    return out
