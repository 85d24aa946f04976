"""Reach: push subscriptions, notification channels and the notification outbox."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, bindparam, delete, exists, func, literal, or_, select, true, union_all, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db.engine import utcnow
from backend.db.fast_path import Prepared
from backend.db.tables import notification_channels as C
from backend.db.tables import notification_outbox as O
from backend.db.tables import push_subscriptions as P
from backend.db.tables import task_grants as G
from backend.db.tables import users as U
from backend.domain.ids import new_id

PENDING = "pending"
CLOSE = "close"
# Messages a device shows until their action stops being pending: a first notice and its reminders
# (`repository.reminders.REMIND`); each device that was shown one gets one `close`.
SHOWN = (PENDING, "remind")
PUSH = "push"
CHANNEL = "channel"
QUEUED, SENDING, SENT, SKIPPED, GONE, FAILED = "queued", "sending", "sent", "skipped", "gone", "failed"
# Roles that see every task (backend/api/access.py); an agent is never told of its own question.
READ_ALL_ROLES = ("admin", "support")


@dataclass(frozen=True, slots=True)
class PushSubscription:
    id: str
    user_id: str
    endpoint: str
    p256dh: str
    auth: str


@dataclass(frozen=True, slots=True)
class Channel:
    id: str
    user_id: str
    url: str
    label: str
    created_at: dt.datetime


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: str
    pending_id: str
    kind: str
    task_id: str
    session_id: str
    destination: str
    destination_id: str
    status: str
    due_at: dt.datetime
    deadline_at: dt.datetime
    attempts: int
    step: int = 0  # a reminder's number (1, 2, ...); 0 for every other message
    created_at: dt.datetime | None = None
    asked_at: dt.datetime | None = None  # when its action was asked (None: its `created_at`)

    @property
    def asked(self) -> dt.datetime | None:
        return self.asked_at or self.created_at


def outbox_row(row: Any) -> OutboxRow:
    return OutboxRow(
        row.id,
        row.pending_id,
        row.kind,
        row.task_id,
        row.session_id,
        row.destination,
        row.destination_id,
        row.status,
        row.due_at,
        row.deadline_at,
        int(row.attempts),
        int(row.step),
        row.created_at,
        row.asked_at,
    )


# --- destinations -------------------------------------------------------------------------------


async def save_push_subscription(
    conn: AsyncConnection, user_id: str, endpoint: str, p256dh: str, auth: str
) -> None:
    """One row per endpoint (a browser profile on a device): registering it again updates its keys,
    and moves it to this user (a device signed in as someone else since)."""
    found = (await conn.execute(select(P.c.id).where(P.c.endpoint == endpoint))).first()
    if found is None:
        await conn.execute(
            P.insert().values(
                id=new_id(), user_id=user_id, endpoint=endpoint, p256dh=p256dh, auth=auth, created_at=utcnow()
            )
        )
    else:
        await conn.execute(
            update(P).where(P.c.id == found.id).values(user_id=user_id, p256dh=p256dh, auth=auth)
        )


async def delete_push_subscription(conn: AsyncConnection, user_id: str, endpoint: str) -> bool:
    result = await conn.execute(delete(P).where(P.c.user_id == user_id, P.c.endpoint == endpoint))
    return bool(result.rowcount)


async def drop_push_subscription(conn: AsyncConnection, subscription_id: str) -> None:
    """The push service said the subscription is gone (404/410)."""
    await conn.execute(delete(P).where(P.c.id == subscription_id))


async def push_subscriptions(conn: AsyncConnection, ids: Sequence[str]) -> dict[str, PushSubscription]:
    if not ids:
        return {}
    result = await conn.execute(select(P).where(P.c.id.in_(list(ids))))
    return {r.id: PushSubscription(r.id, r.user_id, r.endpoint, r.p256dh, r.auth) for r in result}


async def add_channel(conn: AsyncConnection, user_id: str, url: str, label: str) -> Channel:
    channel = Channel(new_id(), user_id, url, label, utcnow())
    await conn.execute(
        C.insert().values(id=channel.id, user_id=user_id, url=url, label=label, created_at=channel.created_at)
    )
    return channel


async def channels_of(conn: AsyncConnection, user_id: str) -> list[Channel]:
    result = await conn.execute(select(C).where(C.c.user_id == user_id).order_by(C.c.created_at, C.c.id))
    return [Channel(r.id, r.user_id, r.url, r.label, r.created_at) for r in result]


async def channels(conn: AsyncConnection, ids: Sequence[str]) -> dict[str, Channel]:
    if not ids:
        return {}
    result = await conn.execute(select(C).where(C.c.id.in_(list(ids))))
    return {r.id: Channel(r.id, r.user_id, r.url, r.label, r.created_at) for r in result}


async def remove_channel(conn: AsyncConnection, user_id: str, channel_id: str) -> bool:
    result = await conn.execute(delete(C).where(C.c.user_id == user_id, C.c.id == channel_id))
    return bool(result.rowcount)


# --- the outbox ---------------------------------------------------------------------------------

_B_PENDING = bindparam("b_pending", type_=O.c.pending_id.type)
_B_TASK = bindparam("b_task", type_=O.c.task_id.type)
_B_SESSION = bindparam("b_session", type_=O.c.session_id.type)
_B_DUE = bindparam("b_due", type_=O.c.due_at.type)
_B_DEADLINE = bindparam("b_deadline", type_=O.c.deadline_at.type)
_B_NOW = bindparam("b_now", type_=O.c.created_at.type)


@dataclass(frozen=True, slots=True)
class AskOutbox:
    """When the outbox rows of one ask are due, given up and written (the ask's bind values)."""

    due_at: dt.datetime
    deadline_at: dt.datetime
    created_at: dt.datetime

    def params(self, pending_id: str) -> dict[str, Any]:
        return {
            "b_pending": pending_id,
            "b_due": self.due_at,
            "b_deadline": self.deadline_at,
            "b_now": self.created_at,
        }


def sees_task(user_id: Any, task_id: Any) -> Any:
    """The user may read the task `task_id`: a role that reads every task, or a grant. Everything
    but its own table is correlated (the destination's user, the task's expression): a grant of
    another user with a destination never counts."""
    granted = exists().where(G.c.user_id == U.c.id, G.c.task_id == task_id).correlate_except(G)
    return (
        exists()
        .where(U.c.id == user_id, or_(U.c.role.in_(READ_ALL_ROLES), and_(U.c.role == "user", granted)))
        .correlate_except(U)
    )


def _destinations(
    table: Any,
    destination: str,
    kind: str,
    *,
    pending_id: Any,
    task_id: Any,
    session_id: Any,
    where: Any,
    alongside: Any = None,
) -> Any:
    # `alongside`: the one-row FROM the values come from (the ask's context), joined to every row.
    source = table if alongside is None else table.join(alongside, true())
    return (
        select(
            (pending_id + literal(f":{kind[0]}{destination[0]}:") + table.c.id).label("id"),
            pending_id.label("pending_id"),
            literal(kind).label("kind"),
            task_id.label("task_id"),
            session_id.label("session_id"),
            literal(destination).label("destination"),
            table.c.id.label("destination_id"),
            literal(QUEUED).label("status"),
            _B_DUE.label("due_at"),
            _B_DEADLINE.label("deadline_at"),
            literal(0).label("attempts"),
            _B_NOW.label("created_at"),
        )
        .select_from(source)
        .where(sees_task(table.c.user_id, task_id), *where)
    )


_COLUMNS = [
    "id",
    "pending_id",
    "kind",
    "task_id",
    "session_id",
    "destination",
    "destination_id",
    "status",
    "due_at",
    "deadline_at",
    "attempts",
    "created_at",
]


def ask_outbox_insert(
    *, task_id: Any, session_id: Any, where: Sequence[Any] = (), alongside: Any = None
) -> Any:
    """What a new pending action's ask writes: one outbox row per destination (push subscription,
    channel) of every user who can see the task, whatever their number (none too), returning each
    row's id. `task_id`, `session_id`: the values or expressions (a CTE's columns) of the ask; the
    pending id is `b_pending`, the times `b_due`, `b_deadline` and `b_now` (`AskOutbox.params`);
    `where`: conditions every row also needs (the bundle's row was inserted, say); `alongside`: the
    one-row FROM that `task_id` and `session_id` are columns of."""
    rows = {
        "pending_id": _B_PENDING,
        "task_id": task_id,
        "session_id": session_id,
        "where": where,
        "alongside": alongside,
    }
    return (
        O.insert()
        .from_select(
            _COLUMNS,
            union_all(_destinations(P, PUSH, PENDING, **rows), _destinations(C, CHANNEL, PENDING, **rows)),
        )
        .returning(O.c.id)
    )


# In the ask's own unit of work, when the ask's statement did not write them itself (SQLite, a
# question bundle of several, ...): one statement.
_ENQUEUE_ASK = Prepared(ask_outbox_insert(task_id=_B_TASK, session_id=_B_SESSION))


async def enqueue_ask(
    conn: AsyncConnection, *, pending_id: str, task_id: str, session_id: str, outbox: AskOutbox
) -> int:
    """The outbox rows of a new pending action, in the ask's unit of work; how many (0: nobody who
    sees the task has a destination)."""
    written = await _ENQUEUE_ASK.rows(
        conn, {**outbox.params(pending_id), "b_task": task_id, "b_session": session_id}
    )
    return len(written)


async def finish(
    conn: AsyncConnection,
    row_id: str,
    status: str,
    *,
    error: str | None = None,
    retry_at: dt.datetime | None = None,
) -> None:
    """Record how a claimed row's send ended; `retry_at` puts it back in the queue."""
    values: dict[str, Any] = {
        "status": status,
        "last_error": error,
        "claimed_by": None,
        "claimed_until": None,
    }
    if status == SENT:
        values["sent_at"] = utcnow()
    if retry_at is not None:
        values.update(status=QUEUED, due_at=retry_at)
    await conn.execute(update(O).where(O.c.id == row_id, O.c.status == SENDING).values(values))


async def abandon_stale_sends(conn: AsyncConnection, now: dt.datetime) -> int:
    """Rows left `sending` by a process that died (their lease ran out): they may have been sent, so
    they are never sent again (at most once); recorded as failed."""
    result = await conn.execute(
        update(O)
        .where(O.c.status == SENDING, O.c.claimed_until < now)
        .values(status=FAILED, last_error="the sending process stopped before it recorded the outcome")
    )
    return int(result.rowcount or 0)


async def sent_push_actions(conn: AsyncConnection, after: str | None, limit: int) -> list[str]:
    """Pending ids with a delivered push whose close is not queued yet, in pending id order, from
    just after `after` (None: from the first): one page of the worker's walk over all of them."""
    query = (
        select(O.c.pending_id)
        .where(O.c.kind.in_(SHOWN), O.c.destination == PUSH, O.c.status == SENT, O.c.close_queued.is_(False))
        .group_by(O.c.pending_id)
        .order_by(O.c.pending_id)
        .limit(limit)
    )
    if after is not None:
        query = query.where(O.c.pending_id > after)
    return [r.pending_id for r in await conn.execute(query)]


async def queue_closes(
    conn: AsyncConnection, pending_ids: Sequence[str], now: dt.datetime, deadline: dt.datetime
) -> int:
    """A `close` push to every device that was shown these actions (a first notice or a reminder);
    each at most once.

    Only rows already `sent` are marked and get their close: a push of the same action still
    queued, retrying or being sent keeps its mark clear, so once it is delivered it gets a close of
    its own (a later pass), and one that never goes out needs none. The mark is set first and the
    closes are written for exactly the rows it marked: with two workers, PostgreSQL lets one of them
    mark a row (the other's UPDATE finds it marked once the first commits), so each close is queued
    by one; a row that turned `sent` in between is left for the next pass, never marked without its
    close."""
    if not pending_ids:
        return 0
    marked = list(
        await conn.execute(
            update(O)
            .where(
                O.c.pending_id.in_(list(pending_ids)),
                O.c.kind.in_(SHOWN),
                O.c.destination == PUSH,
                O.c.status == SENT,
                O.c.close_queued.is_(False),
            )
            .values(close_queued=True)
            .returning(O.c.pending_id, O.c.task_id, O.c.session_id, O.c.destination_id)
        )
    )
    if not marked:
        return 0
    # One close per action and device, however many of its messages the device was shown.
    closes = {
        f"{r.pending_id}:{CLOSE[0]}{PUSH[0]}:{r.destination_id}": {
            "id": f"{r.pending_id}:{CLOSE[0]}{PUSH[0]}:{r.destination_id}",
            "pending_id": r.pending_id,
            "kind": CLOSE,
            "task_id": r.task_id,
            "session_id": r.session_id,
            "destination": PUSH,
            "destination_id": r.destination_id,
            "status": QUEUED,
            "due_at": now,
            "deadline_at": deadline,
            "attempts": 0,
            "created_at": now,
        }
        for r in marked
    }
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    await conn.execute(dialect.insert(O).values(list(closes.values())).on_conflict_do_nothing())
    return len(closes)


# Rows whose story is over: delivered, skipped, gone or failed. A delivered push whose close is not
# queued yet is not over (its close is written from it).
FINISHED = (SENT, SKIPPED, GONE, FAILED)


async def prune(conn: AsyncConnection, before: dt.datetime) -> int:
    """Delete finished rows created before `before`; the number deleted."""
    result = await conn.execute(
        delete(O).where(
            O.c.status.in_(FINISHED),
            O.c.created_at < before,
            or_(
                O.c.kind.not_in(SHOWN),
                O.c.destination != PUSH,
                O.c.status != SENT,
                O.c.close_queued.is_(True),
            ),
        )
    )
    return int(result.rowcount or 0)


BOOTSTRAP_USER = "bootstrap"


async def ensure_bootstrap_user(conn: AsyncConnection) -> None:
    """The bootstrap token's admin has no user row of its own; destinations belong to a user, so it
    gets one (created once, by whichever process needs it first)."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    await conn.execute(
        dialect.insert(U)
        .values(id=BOOTSTRAP_USER, name="(bootstrap token)", role="admin", created_at=utcnow())
        .on_conflict_do_nothing()
    )


@dataclass(frozen=True, slots=True)
class Outlook:
    next_due: dt.datetime | None  # the earliest queued row
    next_lease_end: dt.datetime | None  # the earliest claim of a row being sent to run out
    awaiting_close: bool  # delivered pushes whose close is not queued yet

    def stale_sends(self, now: dt.datetime) -> bool:
        """Rows a dead process left `sending` (their claim ran out)."""
        return self.next_lease_end is not None and self.next_lease_end < now


_OUTLOOK = select(
    select(func.min(O.c.due_at)).where(O.c.status == QUEUED).scalar_subquery().label("next_due"),
    select(func.min(O.c.claimed_until)).where(O.c.status == SENDING).scalar_subquery().label("lease_end"),
    exists()
    .where(O.c.kind.in_(SHOWN), O.c.destination == PUSH, O.c.status == SENT, O.c.close_queued.is_(False))
    .label("awaiting_close"),
)


async def outlook(conn: AsyncConnection) -> Outlook:
    """What the worker has to do, in one read: nothing at all is the common case."""
    row = (await conn.execute(_OUTLOOK)).one()
    return Outlook(row.next_due, row.lease_end, bool(row.awaiting_close))
