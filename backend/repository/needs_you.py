"""What waits for a person: the active pending actions of many sessions, oldest first, in one statement.

"Active" is the one rule's (`repository/authority.py`): a row of a pending action with a pending
status, in the current turn of a live session. The statement derives each session's current turn
once (`current_turn_id`, in a materialized CTE, as the projection does), finds that turn's pending
rows through `open_pending_rows` (an index lookup by turn, however long the turn's answered history),
groups them into bundles (asked at their first row's time), keeps the oldest `first`, and returns
every row of those bundles with their task's title and the session's revision, so a caller builds
each bundle (`Bundle.of_rows`) without another read.

Three scopes, each statement built once per process: some tasks (a person's grants), every task
(admin and support), and some sessions (what the live fan-out re-reads after a change: every one of
them is returned, with its revision, even when nothing of it waits any more).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BindParameter, ColumnElement, Integer, Select, and_, bindparam, func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.tables import open_pending_rows as OPEN
from backend.db.tables import task_grants
from backend.db.tables import task_session_messages as M
from backend.db.tables import task_sessions as S
from backend.db.tables import tasks as TASKS
from backend.domain.lifecycle import BundleRow
from backend.domain.records import Revision
from backend.repository.authority import (
    PENDING_ACTION_TYPES,
    current_turn_id,
    is_pending_action,
    is_pending_status,
    session_is_live,
)
from backend.repository.meta import epoch_value, parse_epoch
from backend.repository.pending_rows import BUNDLE_ROW_COLUMNS, bundle_row

# A `first` past this is this: nobody reads ten thousand items at once.
MAX_FIRST = 10_000


@dataclass(frozen=True, slots=True)
class PendingFacts:
    """One active pending action as read: its rows, its session's facts, its task's title."""

    pending_id: str
    task_id: str
    task_title: str
    session_id: str
    session_state: str
    current_turn: str | None
    asked_at: dt.datetime
    rows: tuple[BundleRow, ...]


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """A session as the read found it: its revision, and its active pending actions (oldest first)."""

    session_id: str
    task_id: str
    revision: Revision
    pending: tuple[PendingFacts, ...]


def _sessions(where: ColumnElement[bool]) -> Any:
    """The sessions in scope, each with its current turn (derived once) and revision."""
    return (
        select(
            S.c.id,
            S.c.task_id,
            S.c.state,
            S.c.pending_seq,
            current_turn_id(S.c.id).label("turn_id"),
        )
        .where(where)
        .cte("scope")
        .prefix_with("MATERIALIZED")
    )


def _bundles(base: Any, *, limited: bool) -> Any:
    """The active bundles of those sessions: one row each, oldest first (`b_first` of them)."""
    asked_at = func.min(M.c.created_at).label("asked_at")
    found = (
        select(M.c.pending_id, base.c.id.label("session_id"), M.c.type.label("kind"), asked_at)
        .select_from(
            base.join(OPEN, and_(OPEN.c.turn_id == base.c.turn_id, OPEN.c.session_id == base.c.id)).join(
                M, M.c.id == OPEN.c.message_id
            )
        )
        .where(session_is_live(base.c.state), is_pending_action(M), is_pending_status(M))
        .group_by(M.c.pending_id, base.c.id, M.c.type)
    )
    if limited:
        found = found.order_by(asked_at, M.c.pending_id).limit(bindparam("b_first", type_=Integer))
    return found.cte("waiting")


def _statement(where: ColumnElement[bool], *, limited: bool, every_session: bool) -> Select[Any]:
    base = _sessions(where)
    waiting = _bundles(base, limited=limited)
    rows = M.alias("bundle_row")
    row_columns = [rows.c[c.name] for c in BUNDLE_ROW_COLUMNS]
    of_bundle = and_(
        rows.c.pending_id == waiting.c.pending_id,
        rows.c.session_id == waiting.c.session_id,
        rows.c.type.in_(PENDING_ACTION_TYPES),
    )
    columns = [
        base.c.id.label("scope_session_id"),
        base.c.task_id,
        base.c.state.label("session_state"),
        base.c.turn_id.label("current_turn"),
        base.c.pending_seq,
        epoch_value().label("epoch"),
        TASKS.c.title.label("task_title"),
        waiting.c.pending_id,
        waiting.c.asked_at,
        *row_columns,
    ]
    joined = base.join(TASKS, TASKS.c.id == base.c.task_id)
    if every_session:
        source = joined.outerjoin(waiting, waiting.c.session_id == base.c.id).outerjoin(rows, of_bundle)
    else:
        source = joined.join(waiting, waiting.c.session_id == base.c.id).join(rows, of_bundle)
    return (
        select(*columns)
        .select_from(source)
        .order_by(waiting.c.asked_at, waiting.c.pending_id, rows.c.created_at, rows.c.id)
    )


_B_TASKS: BindParameter[Any] = bindparam("b_task_ids", expanding=True)
_B_SESSIONS: BindParameter[Any] = bindparam("b_session_ids", expanding=True)
_LIVE_OF_TASKS = and_(S.c.task_id.in_(_B_TASKS), session_is_live(S.c.state))
_LIVE = session_is_live(S.c.state)
# Built once per process: only bound values change between calls. (scope, limited) -> statement.
_WAITING = {
    ("tasks", True): _statement(_LIVE_OF_TASKS, limited=True, every_session=False),
    ("tasks", False): _statement(_LIVE_OF_TASKS, limited=False, every_session=False),
    ("all", True): _statement(_LIVE, limited=True, every_session=False),
    ("all", False): _statement(_LIVE, limited=False, every_session=False),
}
_OF_SESSIONS = _statement(S.c.id.in_(_B_SESSIONS), limited=False, every_session=True)


async def custom_plans(conn: AsyncConnection) -> None:
    """PostgreSQL: plan this transaction's statements for the values they are given. These statements
    are the same text call after call, so after five runs PostgreSQL would keep one generic plan of
    them, which knows neither the current turn's `LIMIT 1` nor the scope, and then read every
    session's turns in full (seconds, where the plan for the values takes milliseconds)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(_CUSTOM_PLANS)


_CUSTOM_PLANS = text("SET LOCAL plan_cache_mode = force_custom_plan")


def _first(first: int) -> int:
    return max(0, min(first, MAX_FIRST))


def _collect(found: Any) -> list[SessionFacts]:
    """Rows (ordered by bundle age, then row) grouped into sessions (in the order their oldest
    bundle was asked; sessions with none last) and bundles."""
    sessions: dict[str, tuple[str, Revision, dict[str, list[Any]]]] = {}
    facts: dict[str, tuple[Any, list[BundleRow]]] = {}
    for row in found:
        held = sessions.get(row.scope_session_id)
        if held is None:
            epoch = 0 if row.epoch is None else parse_epoch(row.epoch)
            held = sessions[row.scope_session_id] = (
                row.task_id,
                Revision(epoch, int(row.pending_seq)),
                {},
            )
        if row.pending_id is None or row.id is None:
            continue
        bundle = facts.get(row.pending_id)
        if bundle is None:
            bundle = facts[row.pending_id] = (row, [])
            held[2][row.pending_id] = []
        bundle[1].append(bundle_row(row))
    out: list[SessionFacts] = []
    for session_id, (task_id, revision, pending_ids) in sessions.items():
        pending = []
        for pending_id in pending_ids:
            first, rows_ = facts[pending_id]
            rows_.sort(key=question_order)
            pending.append(
                PendingFacts(
                    pending_id=pending_id,
                    task_id=task_id,
                    task_title=first.task_title,
                    session_id=session_id,
                    session_state=first.session_state,
                    current_turn=None if first.current_turn is None else str(first.current_turn),
                    asked_at=first.asked_at,
                    rows=tuple(rows_),
                )
            )
        out.append(SessionFacts(session_id, task_id, revision, tuple(pending)))
    return out


def question_order(row: BundleRow) -> tuple[int, str]:
    """A bundle's rows in the order of its questions."""
    value = row.metadata.get("question_index")
    return (value if isinstance(value, int) else 0, row.id)


def oldest_first(sessions: Sequence[SessionFacts]) -> list[PendingFacts]:
    return sorted((p for s in sessions for p in s.pending), key=lambda p: (p.asked_at, p.pending_id))


async def waiting_in_tasks(
    conn: AsyncConnection, task_ids: Sequence[str] | None, first: int | None = None
) -> list[PendingFacts]:
    """The active pending actions of these tasks (None: of every task), oldest first: the oldest
    `first` of them (None: all); one statement."""
    return oldest_first(await sessions_waiting(conn, task_ids, first))


async def sessions_waiting(
    conn: AsyncConnection, task_ids: Sequence[str] | None, first: int | None = None
) -> list[SessionFacts]:
    """The sessions of these tasks (None: of every task) with active pending actions, each with its
    revision and those actions (of the oldest `first` over all; None: all); one statement."""
    if task_ids is not None and not task_ids:
        return []
    statement = _WAITING[("all" if task_ids is None else "tasks", first is not None)]
    await custom_plans(conn)
    params: dict[str, Any] = {}
    if first is not None:
        params["b_first"] = _first(first)
    if task_ids is not None:
        params["b_task_ids"] = list(dict.fromkeys(task_ids))
    return _collect(await conn.execute(statement, params))


async def waiting_in_sessions(conn: AsyncConnection, session_ids: Sequence[str]) -> list[SessionFacts]:
    """Every one of these sessions (that exists) with its revision and all its active pending
    actions, also when none waits any more; one statement."""
    if not session_ids:
        return []
    await custom_plans(conn)
    found = await conn.execute(_OF_SESSIONS, {"b_session_ids": list(dict.fromkeys(session_ids))})
    return _collect(found)


async def grants_of(conn: AsyncConnection, user_ids: Sequence[str]) -> dict[str, frozenset[str]]:
    """user -> the tasks granted to them (every user asked for has an entry); one statement."""
    ids = list(dict.fromkeys(user_ids))
    if not ids:
        return {}
    found: dict[str, set[str]] = {u: set() for u in ids}
    query = select(task_grants.c.user_id, task_grants.c.task_id).where(task_grants.c.user_id.in_(ids))
    for row in await conn.execute(query):
        found[row.user_id].add(row.task_id)
    return {u: frozenset(t) for u, t in found.items()}


_ALL_WAITING = _bundles(_sessions(_LIVE), limited=False)
_COUNTS = select(
    _ALL_WAITING.c.kind, func.count().label("waiting"), func.min(_ALL_WAITING.c.asked_at).label("oldest")
).group_by(_ALL_WAITING.c.kind)


async def counts(conn: AsyncConnection) -> dict[str, tuple[int, dt.datetime | None]]:
    """message type -> (how many pending actions of it are active, when the oldest was asked); one
    statement."""
    await custom_plans(conn)
    return {row.kind: (int(row.waiting), row.oldest) for row in await conn.execute(_COUNTS)}
