"""Task status summaries: batched reads and compare-and-set writes of the cached pending action."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, case, func, literal, select, true, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.selectable import CTE, Select

from backend.db.engine import utcnow
from backend.db.fast_path import Prepared
from backend.db.prepared import begin_with
from backend.db.tables import task_sessions as TS
from backend.db.tables import task_status_summaries as S
from backend.domain.errors import CorruptData
from backend.domain.pending import TASK_RANK
from backend.domain.records import SummaryRecord
from backend.domain.states import TASK_PENDING_SESSION_STATES
from backend.repository.locks import lock_key, lock_one, lock_sessions
from backend.repository.pending import projected_sessions
from backend.repository.rows import metadata_of

_B_TASK = bindparam("b_task", type_=S.c.task_id.type)
# The unit of work's single-task reconciliation, run on the driver connection (backend/db/fast_path.py).
_LOCK_ONE = Prepared(select(S).where(S.c.task_id == _B_TASK).with_for_update())
_SET_ONE = Prepared(
    update(S)
    .where(S.c.task_id == _B_TASK, S.c.revision == bindparam("b_revision", type_=S.c.revision.type))
    .values(
        pending_action=bindparam("b_pending_action", type_=S.c.pending_action.type),
        revision=S.c.revision + 1,
        updated_at=bindparam("b_now", type_=S.c.updated_at.type),
    )
    .returning(*S.c)
)


def _derived_pending_action() -> Any:
    """The task's pending action derived in SQL from its sessions' projections: the same rule as
    `backend.domain.pending.task_pending_action` (sessions doing work only, the highest task rank,
    the oldest session first among equals); tests hold the two to the same answers."""
    projected = (
        projected_sessions(TS.c.task_id == _B_TASK).cte("task_projections").prefix_with("MATERIALIZED")
    )
    return (
        select(projected.c.pending_action)
        .where(
            projected.c.state.in_(sorted(TASK_PENDING_SESSION_STATES)),
            projected.c.pending_action.is_not(None),
        )
        .order_by(
            case(TASK_RANK, value=projected.c.pending_action, else_=0).desc(),
            projected.c.created_at,
            projected.c.id,
        )
        .limit(1)
        .scalar_subquery()
    )


_DERIVED = _derived_pending_action()
# Derive and write in one statement. Only for a caller that already holds the summary row (locked
# on PostgreSQL, the writer lock on SQLite) from an earlier statement of its transaction: this
# statement's snapshot then sees every change committed before it, and nobody can move the row.
_RECONCILE_STATEMENT = (
    update(S)
    .where(S.c.task_id == _B_TASK, S.c.pending_action.is_distinct_from(_DERIVED))
    .values(
        pending_action=_DERIVED,
        revision=S.c.revision + 1,
        updated_at=bindparam("b_now", type_=S.c.updated_at.type),
    )
    .returning(*S.c)
)
_RECONCILE_ONE = Prepared(_RECONCILE_STATEMENT)


# ... and whether the task has a summary at all, in the same statement (PostgreSQL: the UPDATE runs
# as a CTE, the presence is read in the statement's snapshot, before it).
_RECONCILED = _RECONCILE_STATEMENT.cte("reconciled")
_RECONCILE_PRESENT = Prepared(
    select(
        select(func.count()).select_from(S).where(S.c.task_id == _B_TASK).scalar_subquery().label("present"),
        *_RECONCILED.c,
    ).select_from(select(literal(1).label("one")).subquery("one").outerjoin(_RECONCILED, true()))
)


def then_hold_summary(locked: CTE) -> Select[Any]:
    """`locked` (a materialized CTE that took a session's advisory lock, with its `session_id`), then
    that session's task's summary row locked (FOR UPDATE) in a LATERAL subquery: evaluated for the
    lock's row, so after the lock (session locks always before summary rows), and row locking returns
    the newest version. Columns: `session_id` and the summary's (NULL when the task has none yet)."""
    held = (
        select(S)
        .join(TS, TS.c.task_id == S.c.task_id)
        .where(TS.c.id == locked.c.session_id)
        .with_for_update(of=S)
        .lateral("held_summary")
    )
    return select(locked.c.session_id, *held.c).select_from(locked.outerjoin(held, true()))


_B_SESSION = bindparam("b_session", type_=TS.c.id.type)
# PostgreSQL: a session's lock, then its task's summary row, in one statement.
_LOCK_SESSION_HOLDING_SUMMARY = Prepared(
    then_hold_summary(
        select(
            _B_SESSION.label("session_id"), func.pg_advisory_xact_lock(lock_key(_B_SESSION)).label("locked")
        )
        .cte("session_lock")
        .prefix_with("MATERIALIZED")
    )
)


# The same in two statements, for `prepared.begin_with`: the task's summary row held, after the lock.
_HOLD_SUMMARY_OF_SESSION = Prepared(
    select(S.c.task_id)
    .join(TS, TS.c.task_id == S.c.task_id)
    .where(TS.c.id == _B_SESSION)
    .with_for_update(of=S)
)


async def lock_session_holding_summary(conn: AsyncConnection, session_id: str) -> bool:
    """PostgreSQL: take the session's lock and then hold its task's summary row (if it has one) until
    the transaction ends. As the transaction's first statements, in BEGIN's own message; else one
    statement. Elsewhere only the session's lock is taken. Whether the summary row is held."""
    if conn.dialect.name != "postgresql":
        await lock_sessions(conn, [session_id])
        return False
    params = {"b_session": session_id}
    if not await begin_with(conn, lock_one(session_id), (_HOLD_SUMMARY_OF_SESSION, params)):
        await _LOCK_SESSION_HOLDING_SUMMARY.rows(conn, params)
    return True


def _record(row: Any) -> SummaryRecord:
    m = row._mapping
    revision = m["revision"]
    if not isinstance(revision, int) or revision < 0:
        raise CorruptData(f"task {m['task_id']}: summary revision {revision!r} is not a count")
    return SummaryRecord(
        m["task_id"],
        revision,
        m["pending_action"],
        metadata_of(m["fields"], where=f"summary {m['task_id']}"),
        m["updated_at"],
    )


async def read_summaries(conn: AsyncConnection, task_ids: Sequence[str]) -> dict[str, SummaryRecord]:
    """One statement for the whole batch."""
    if not task_ids:
        return {}
    result = await conn.execute(select(S).where(S.c.task_id.in_(list(dict.fromkeys(task_ids)))))
    return {r.task_id: _record(r) for r in result}


async def lock_summaries(conn: AsyncConnection, task_ids: Sequence[str]) -> dict[str, SummaryRecord]:
    """Read these tasks' summaries and hold their rows until the transaction ends (PostgreSQL; SQLite
    write transactions already hold the writer lock), so writers of sibling sessions of one task
    reconcile its summary one after the other, each seeing the other's committed change."""
    if not task_ids:
        return {}
    ids = sorted(set(task_ids))
    if len(ids) == 1:
        return {r.task_id: _record(r) for r in await _LOCK_ONE.rows(conn, {"b_task": ids[0]})}
    result = await conn.execute(select(S).where(S.c.task_id.in_(ids)).order_by(S.c.task_id).with_for_update())
    return {r.task_id: _record(r) for r in result}


async def insert_missing(
    conn: AsyncConnection, pending: Mapping[str, str | None]
) -> dict[str, SummaryRecord]:
    """Create revision-1 summaries; a row another writer created meanwhile is left alone (not returned)."""
    if not pending:
        return {}
    now = utcnow()
    values: list[dict[str, object]] = [
        {"task_id": t, "revision": 1, "pending_action": p, "fields": {}, "updated_at": now}
        for t, p in pending.items()
    ]
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(S).values(values).on_conflict_do_nothing(index_elements=[S.c.task_id])
    result = await conn.execute(statement.returning(*S.c))
    return {r.task_id: _record(r) for r in result}


async def compare_and_set(
    conn: AsyncConnection, changes: Mapping[str, tuple[int, str | None]]
) -> dict[str, SummaryRecord]:
    """Set each task's pending action and advance its revision, only where the stored revision is still
    the one given (task_id -> (expected revision, new pending action)). Returns the rows that won.

    `fields` is never written, so unrelated summary content survives. One UPDATE per distinct
    pending value (at most three), whatever the number of tasks.
    """
    now = utcnow()
    if len(changes) == 1:
        ((task_id, (expected, value)),) = changes.items()
        params = {"b_task": task_id, "b_revision": expected, "b_pending_action": value, "b_now": now}
        return {r.task_id: _record(r) for r in await _SET_ONE.rows(conn, params)}
    by_value: dict[str | None, list[tuple[str, int]]] = {}
    for task_id, (expected, value) in changes.items():
        by_value.setdefault(value, []).append((task_id, expected))
    won: dict[str, SummaryRecord] = {}
    for value, keys in by_value.items():
        result = await conn.execute(
            update(S)
            .where(tuple_(S.c.task_id, S.c.revision).in_(keys))
            .values(pending_action=value, revision=S.c.revision + 1, updated_at=now)
            .returning(*S.c)
        )
        won.update({r.task_id: _record(r) for r in result})
    return won


async def reconcile_held(conn: AsyncConnection, task_id: str) -> SummaryRecord | None:
    """Bring one task's summary (held by this transaction since an earlier statement, see
    `_RECONCILE_ONE`) up to date with its sessions: the written summary, or None when it already
    was. One statement."""
    rows = await _RECONCILE_ONE.rows(conn, {"b_task": task_id, "b_now": utcnow()})
    return _record(rows[0]) if rows else None


async def reconcile_held_if_present(conn: AsyncConnection, task_id: str) -> tuple[SummaryRecord | None, bool]:
    """PostgreSQL: `reconcile_held` for a summary row held without having been read: (the written
    summary or None, whether the task has a summary at all). One statement."""
    row = (await _RECONCILE_PRESENT.rows(conn, {"b_task": task_id, "b_now": utcnow()}))[0]
    return (None if row.task_id is None else _record(row)), bool(row.present)


async def bump_revisions(conn: AsyncConnection, task_ids: Sequence[str]) -> None:
    """A competing writer for the `summary.cas_conflict` fault point: makes every CAS on these lose."""
    await conn.execute(update(S).where(S.c.task_id.in_(list(task_ids))).values(revision=S.c.revision + 1))
