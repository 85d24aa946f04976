"""Reminders and escalation: a person's preferences, and the worker's claim of due outbox rows with
what each row needs to decide its follow-ups (its person, their preferences, whether they still see
the task), all in the claim's one transaction."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.tables import notification_channels as C
from backend.db.tables import notification_outbox as O
from backend.db.tables import notification_preferences as NP
from backend.db.tables import push_subscriptions as P
from backend.db.tables import users as U
from backend.domain.ids import new_id
from backend.domain.reminders import Preferences
from backend.repository.reach import CHANNEL, PUSH, QUEUED, SENDING, SKIPPED, OutboxRow, outbox_row, sees_task

REMIND = "remind"
ESCALATE = "escalate"
# Messages that exist only while their action waits: dropped once it is settled.
WHILE_WAITING = (REMIND, ESCALATE)


# --- preferences --------------------------------------------------------------------------------


def _preferences(row: Any) -> Preferences:
    return Preferences(
        row.notify_after_seconds,
        row.remind_every_seconds,
        row.escalate_after_seconds,
        row.escalate_channel_id,
    )


async def preferences(conn: AsyncConnection, user_id: str) -> Preferences:
    """The person's preferences; the defaults when they chose none."""
    row = (await conn.execute(select(NP).where(NP.c.user_id == user_id))).first()
    return Preferences() if row is None else _preferences(row)


async def save_preferences(conn: AsyncConnection, user_id: str, prefs: Preferences) -> None:
    values = {
        "notify_after_seconds": prefs.notify_after,
        "remind_every_seconds": prefs.remind_every,
        "escalate_after_seconds": prefs.escalate_after,
        "escalate_channel_id": prefs.escalate_channel_id,
        "updated_at": utcnow(),
    }
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    await conn.execute(
        dialect.insert(NP)
        .values(user_id=user_id, **values)
        .on_conflict_do_update(index_elements=[NP.c.user_id], set_=values)
    )


# --- the claim ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Due:
    """A due outbox row, held by this transaction, with its destination's person (None: the
    destination is gone), their preferences and whether they still see the task."""

    row: OutboxRow
    person: str | None
    prefs: Preferences
    sees: bool


_OWNER = func.coalesce(P.c.user_id, C.c.user_id)


def _due_query(now: dt.datetime, limit: int, *, postgres: bool) -> Any:
    source = (
        O.outerjoin(P, and_(O.c.destination == PUSH, P.c.id == O.c.destination_id))
        .outerjoin(C, and_(O.c.destination == CHANNEL, C.c.id == O.c.destination_id))
        .outerjoin(NP, NP.c.user_id == _OWNER)
    )
    query = (
        select(
            *O.c,
            _OWNER.label("person"),
            NP.c.notify_after_seconds,
            NP.c.remind_every_seconds,
            NP.c.escalate_after_seconds,
            NP.c.escalate_channel_id,
            sees_task(_OWNER, O.c.task_id).label("sees"),
        )
        .select_from(source)
        .where(O.c.status == QUEUED, O.c.due_at <= now)
        .order_by(O.c.due_at, O.c.id)
        .limit(limit)
    )
    if postgres:
        # Only the outbox rows are locked, and those another process holds are skipped: one
        # process takes each row.
        query = query.with_for_update(of=O, skip_locked=True)
    return query


async def due(conn: AsyncConnection, now: dt.datetime, limit: int) -> list[Due]:
    """Up to `limit` due rows, held by this transaction (PostgreSQL: rows another process holds are
    skipped), oldest due first."""
    result = await conn.execute(_due_query(now, limit, postgres=conn.dialect.name == "postgresql"))
    return [Due(outbox_row(r), r.person, _preferences(r), bool(r.sees)) for r in result]


async def claim(
    conn: AsyncConnection, ids: Sequence[str], instance_id: str, until: dt.datetime
) -> list[OutboxRow]:
    """Mark these held rows `sending` for this process until `until`: the at-most-once boundary."""
    if not ids:
        return []
    result = await conn.execute(
        update(O)
        .where(O.c.id.in_(list(ids)), O.c.status == QUEUED)
        .values(status=SENDING, claimed_by=instance_id, claimed_until=until, attempts=O.c.attempts + 1)
        .returning(*O.c)
    )
    return sorted((outbox_row(r) for r in result), key=lambda r: (r.due_at, r.id))


async def put_off(conn: AsyncConnection, later: Mapping[str, tuple[dt.datetime, dt.datetime]]) -> None:
    """Held rows due later than they were written for: id -> (due, deadline)."""
    for row_id, (due_at, deadline_at) in later.items():
        await conn.execute(
            update(O)
            .where(O.c.id == row_id, O.c.status == QUEUED)
            .values(due_at=due_at, deadline_at=deadline_at)
        )


async def skip(conn: AsyncConnection, why: Mapping[str, str]) -> None:
    """Held rows that will never be sent: id -> why."""
    for row_id, reason in why.items():
        await conn.execute(
            update(O).where(O.c.id == row_id, O.c.status == QUEUED).values(status=SKIPPED, last_error=reason)
        )


async def drop_while_waiting(conn: AsyncConnection, pending_ids: Sequence[str], why: str) -> int:
    """Every queued reminder and escalation of these (settled) actions, skipped; on PostgreSQL not
    those another process holds (it is deciding them itself, in the same way)."""
    if not pending_ids:
        return 0
    queued = select(O.c.id).where(
        O.c.pending_id.in_(list(pending_ids)), O.c.kind.in_(WHILE_WAITING), O.c.status == QUEUED
    )
    if conn.dialect.name == "postgresql":
        queued = queued.with_for_update(skip_locked=True)
    result = await conn.execute(
        update(O).where(O.c.id.in_(queued.scalar_subquery())).values(status=SKIPPED, last_error=why)
    )
    return int(result.rowcount or 0)


@dataclass(frozen=True, slots=True)
class FollowUp:
    """A later message of the same action to one destination: a reminder (step 1, 2, ...) or an
    escalation (step 0)."""

    of: OutboxRow
    kind: str
    step: int
    destination: str
    destination_id: str
    due_at: dt.datetime
    deadline_at: dt.datetime
    asked_at: dt.datetime


async def add(conn: AsyncConnection, follow_ups: Sequence[FollowUp], now: dt.datetime) -> int:
    """Write the follow-ups; one that exists (the same action, kind, step and destination) stays as
    it is: at most one row per message, whoever wrote it and however often. How many were new."""
    if not follow_ups:
        return 0
    rows = [
        {
            "id": new_id(),
            "pending_id": f.of.pending_id,
            "kind": f.kind,
            "step": f.step,
            "task_id": f.of.task_id,
            "session_id": f.of.session_id,
            "destination": f.destination,
            "destination_id": f.destination_id,
            "status": QUEUED,
            "due_at": f.due_at,
            "deadline_at": f.deadline_at,
            "attempts": 0,
            "asked_at": f.asked_at,
            "created_at": now,
        }
        for f in follow_ups
    ]
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    result = await conn.execute(dialect.insert(O).values(rows).on_conflict_do_nothing().returning(O.c.id))
    return len(list(result))


async def names(conn: AsyncConnection, user_ids: Sequence[str]) -> dict[str, str]:
    if not user_ids:
        return {}
    result = await conn.execute(select(U.c.id, U.c.name).where(U.c.id.in_(list(user_ids))))
    return {r.id: r.name for r in result}
