"""Bundle reads and writes after the ask, the same for both kinds of pending action: which session a
bundle lives in, its facts, a waiter attaching or detaching, closing and expiring. Every condition on
"current" comes from authority.py.

Each write is one conditional statement whose WHERE re-checks what the caller decided on (pending
status, current-turn ownership, live session, claim identity), so a stale decision changes nothing.
Callers run inside a unit of work (`services/uow.py`), which holds the session lock and bumps the
pending sequence of every session it touched once, at commit. An ask's own statements are in
`asks.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, bindparam, func, not_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.fast_path import Prepared
from backend.db.sqlfuncs import json_flag, json_text, json_update
from backend.db.tables import task_session_messages as M
from backend.db.tables import task_sessions as S
from backend.domain.errors import CorruptData
from backend.domain.lifecycle import BundleRow
from backend.domain.states import MESSAGE_KIND_CLARIFICATION, ClarificationStatus
from backend.repository import message_fields, summaries
from backend.repository.authority import (
    PENDING_ACTION_TYPES,
    active_pending_rows,
    current_turn_id,
    is_pending_action,
    is_pending_status,
)
from backend.repository.locks import lock_key
from backend.repository.pending_rows import (
    ACTIVE_ROWS,
    B_SESSION,
    OPEN_IN_CURRENT_TURN,
    PENDING_ID_IS,
    PID,
    bound,
    bundle_row,
)

# --- statements built once per process (only bound values change between calls) ----------------

_SESSION_OF_BUNDLE = (
    select(M.c.session_id)
    .where(PENDING_ID_IS, M.c.type.in_(PENDING_ACTION_TYPES))
    .order_by(M.c.created_at, M.c.id)
    .limit(1)
)

_SESSION_OF_BUNDLE_P = Prepared(_SESSION_OF_BUNDLE)
# PostgreSQL: the same, and its session's lock taken in the same statement (the LIMIT keeps the
# subquery whole, so the lock is taken for the one row found).
_FOUND = _SESSION_OF_BUNDLE.subquery("found")
_FOUND_LOCKED = (
    select(_FOUND.c.session_id, func.pg_advisory_xact_lock(lock_key(_FOUND.c.session_id)).label("locked"))
    .cte("found_locked")
    .prefix_with("MATERIALIZED")
)
# ... and then its task's summary row held.
_LOCK_SESSION_OF_BUNDLE = Prepared(summaries.then_hold_summary(_FOUND_LOCKED))


def _bundle_facts(where: ColumnElement[bool]) -> Any:
    return (
        select(
            M.c.id,
            M.c.session_id,
            M.c.turn_id,
            M.c.created_at,
            *message_fields.COLUMNS,
            S.c.task_id,
            S.c.state,
            current_turn_id(M.c.session_id).label("current_turn"),
        )
        .join(S, S.c.id == M.c.session_id)
        .where(where, M.c.type.in_(PENDING_ACTION_TYPES))
        .order_by(M.c.created_at, M.c.id)
    )


_BUNDLE_FACTS_ONE = Prepared(_bundle_facts(PENDING_ID_IS))
_BUNDLE_FACTS = _bundle_facts(PID.in_(bindparam("b_pending_ids", expanding=True)))


# --- reads --------------------------------------------------------------------------------------


async def session_of_bundle(conn: AsyncConnection, pending_id: str) -> str | None:
    """The session a bundle lives in (its first row's); the caller locks it, then reads the bundle."""
    row = await _SESSION_OF_BUNDLE_P.first(conn, {"b_pending_id": pending_id})
    return None if row is None else str(row.session_id)


async def lock_session_of_bundle(conn: AsyncConnection, pending_id: str) -> tuple[str | None, bool]:
    """`session_of_bundle`, and on PostgreSQL its session's lock taken in the same statement, then
    its task's summary row held (if it has one): (the session, whether it is now locked and its
    summary held). A bundle's session never changes, so what the caller reads next (a new snapshot,
    after the lock) is as fresh as after a separate lock."""
    if conn.dialect.name != "postgresql":
        return await session_of_bundle(conn, pending_id), False
    row = await _LOCK_SESSION_OF_BUNDLE.first(conn, {"b_pending_id": pending_id})
    if row is None:
        return None, False
    return str(row.session_id), True


async def bundle_facts(
    conn: AsyncConnection, pending_ids: Sequence[str]
) -> dict[str, tuple[list[BundleRow], str, str, str | None]]:
    """Rows of many bundles in one statement: pending_id -> (rows, task_id, session_state, current turn).

    The session facts come from the bundle's first row; a bundle spanning sessions is refused by the
    domain's turn identity rule, not silently merged.
    """
    if not pending_ids:
        return {}
    out: dict[str, tuple[list[BundleRow], str, str, str | None]] = {}
    ids = list(dict.fromkeys(pending_ids))
    found: Any = (
        await _BUNDLE_FACTS_ONE.rows(conn, {"b_pending_id": ids[0]})
        if len(ids) == 1
        else await conn.execute(_BUNDLE_FACTS, {"b_pending_ids": ids})
    )
    for row in found:
        entry = out.get(row.pending_id)
        if entry is None:
            current = None if row.current_turn is None else str(row.current_turn)
            entry = out[row.pending_id] = ([], row.task_id, row.state, current)
        entry[0].append(bundle_row(row))
    for rows_, *_ in out.values():
        rows_.sort(key=lambda r: (_index(r), r.id))
    return out


def _index(row: BundleRow) -> int:
    value = row.metadata.get("question_index")
    return value if isinstance(value, int) else 0


async def active_pending_ids_for_sessions(
    conn: AsyncConnection, session_ids: Sequence[str], message_type: str = MESSAGE_KIND_CLARIFICATION
) -> dict[str, list[str]]:
    """session_id -> pending ids of its active bundles of this message type, newest first; one
    statement for the batch."""
    if not session_ids:
        return {}
    pid = M.c.pending_id
    query = (
        select(M.c.session_id, pid.label("pending_id"), func.max(M.c.created_at).label("newest"))
        .join(S, S.c.id == M.c.session_id)
        .where(
            M.c.session_id.in_(list(dict.fromkeys(session_ids))),
            active_pending_rows(M, S.c.state, (message_type,)),
        )
        .group_by(M.c.session_id, pid)
    )
    found: dict[str, list[tuple[Any, str]]] = {}
    for row in await conn.execute(query):
        if not isinstance(row.pending_id, str) or not row.pending_id:
            raise CorruptData(f"session {row.session_id}: an active clarification row has no pending_id")
        found.setdefault(row.session_id, []).append((row.newest, row.pending_id))
    return {s: [p for _, p in sorted(v, key=lambda x: (x[0], x[1]), reverse=True)] for s, v in found.items()}


async def attach_waiter(
    conn: AsyncConnection, *, session_id: str, pending_id: str, waiter_id: str, waiter_instance: str
) -> list[str]:
    """A new waiter takes over an active bundle: its pending current-turn rows become attached."""
    result = await conn.execute(
        update(M)
        .where(PENDING_ID_IS, ACTIVE_ROWS)
        .values(
            metadata=json_update(
                M.c.metadata,
                {"agent_disconnected": False, "waiter_id": waiter_id, "waiter_instance": waiter_instance},
            )
        )
        .returning(M.c.id),
        bound(session_id, pending_id),
    )
    return [r.id for r in result]


# --- detach / cancel / expire -------------------------------------------------------------------


async def detach(
    conn: AsyncConnection,
    session_id: str,
    *,
    pending_id: str | None = None,
    waiter_id: str | None = None,
    turn_id: str | None = None,
) -> list[tuple[str, str]]:
    """Mark pending, not-yet-detached current-turn rows `agent_disconnected`; (message id, pending id)
    of exactly the rows changed, so a repeat changes and publishes nothing.

    With `waiter_id`, only rows still owned by that waiter: a waiter that lost its bundle to a newer
    waiter of the same questions must not detach it.
    """
    conditions = [ACTIVE_ROWS, not_(json_flag(M.c.metadata, "agent_disconnected"))]
    conditions.append(OPEN_IN_CURRENT_TURN if pending_id is None else PENDING_ID_IS)
    if waiter_id is not None:
        conditions.append(json_text(M.c.metadata, "waiter_id") == waiter_id)
    if turn_id is not None:
        conditions.append(M.c.turn_id == turn_id)
    result = await conn.execute(
        update(M)
        .where(*conditions)
        .values(metadata=json_update(M.c.metadata, {"agent_disconnected": True}))
        .returning(M.c.id, M.c.pending_id),
        bound(session_id, pending_id),
    )
    return [(r.id, str(r.pending_id)) for r in result]


async def close_pending(
    conn: AsyncConnection, session_id: str, pending_id: str, status: ClarificationStatus
) -> list[str]:
    """Cancel (or expire) the pending current-turn rows of one bundle; other bundles are untouched."""
    result = await conn.execute(
        update(M)
        .where(PENDING_ID_IS, ACTIVE_ROWS)
        .values(status=status.value, updated_at=utcnow())
        .returning(M.c.id),
        bound(session_id, pending_id),
    )
    return [r.id for r in result]


async def expire_current_turn_bundles(conn: AsyncConnection, session_id: str) -> list[str]:
    """Expire every pending clarification row of the session's current turn; returns the changed ids.

    Called while the session enters a terminal state, before that transition is published, so no
    answerable question survives a finished session. Older turns are history and stay untouched.
    """
    result = await conn.execute(
        update(M)
        .where(
            M.c.session_id == B_SESSION,
            is_pending_action(M),
            # (an open row of the current turn is a row of the current turn: derived once)
            OPEN_IN_CURRENT_TURN,
            is_pending_status(M),
        )
        .values(
            status=ClarificationStatus.EXPIRED.value,
            updated_at=utcnow(),
        )
        .returning(M.c.id),
        bound(session_id),
    )
    return [row.id for row in result]


# --- workflow guard -----------------------------------------------------------------------------


async def sessions_with_active_bundles(conn: AsyncConnection, task_id: str) -> list[str]:
    """Sessions of the task that hold an active clarification (current turn, pending, live session)."""
    result = await conn.execute(
        select(M.c.session_id)
        .join(S, S.c.id == M.c.session_id)
        .where(S.c.task_id == task_id, active_pending_rows(M, S.c.state))
        .group_by(M.c.session_id)
        .order_by(M.c.session_id)
    )
    return [r.session_id for r in result]
