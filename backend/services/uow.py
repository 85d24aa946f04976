"""One unit of work per write: session locks up front, one sequence bump, events after the commit.

    async with uow(self.deps, [session_id]) as w:
        session = await tasks.get_session(w.conn, session_id)   # read
        ...                                                   # decide (domain rules)
        await repo.write(w.conn, ...)                           # write
        w.touch(session_id)                                     # the projection may have changed
        w.publish(session.task_id, session_id, EventKind.MESSAGE_ADDED, message_id=...)

On a normal exit the unit bumps `pending_seq` of every touched session in ONE statement (or none,
when the writes already bumped them all: a write that bumps a session itself notes it on the
connection, `repository/bumped.py`, and such a session counts as touched), brings
the existing summaries of their tasks up to date in the same transaction (so the live projector
need not read and write them again), commits, and only then publishes the queued events in order
(publication failures are logged, never raised: clients converge on their next read). When the body
raises, the transaction rolls back and nothing is published. Services decide and write; the unit
owns the lock, the bump, the commit and the fan-out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncConnection

from backend.domain.errors import BrokenInvariant
from backend.domain.events import EventKind
from backend.domain.records import SummaryRecord
from backend.repository import bumped, bundles, locks, summaries, tasks
from backend.services.context import Deps
from backend.services.events_out import publish_batch, session_change
from backend.services.summaries import (
    FAULT_PUBLISH,
    SUMMARY_CHANNEL,
    project_in_transaction,
    publish_summaries,
    summary_event,
)


@dataclass(frozen=True, slots=True)
class Event:
    task_id: str
    session_id: str
    kind: EventKind
    message_id: str | None = None
    turn_id: str | None = None
    # The bundle a message belongs to, announced with its session (see `session_change`).
    pending_id: str | None = None


@dataclass
class Work:
    """The open transaction of one unit of work."""

    conn: AsyncConnection
    locked: set[str] = field(default_factory=set)
    touched: dict[str, None] = field(default_factory=dict)
    # The tasks of touched sessions the caller already knows: spares reading them.
    task_of: dict[str, str] = field(default_factory=dict)
    # Touched sessions whose write provably left their pending action as it was (see `touch`): their
    # tasks' summaries need no reconciliation for it.
    neutral: set[str] = field(default_factory=set)
    events: list[Event] = field(default_factory=list)
    # Sessions whose task's summary row (if the task has one) this unit holds since it locked the
    # session (PostgreSQL). Session locks always come before summary rows, so no session lock may
    # follow.
    held: set[str] = field(default_factory=set)
    # Filled at commit: the task summaries this unit wrote, and whether every touched task's summary
    # is provably current (then its events tell the live projector so).
    summaries: list[SummaryRecord] = field(default_factory=list)
    projected: bool = False
    # Messages of other channels than the task channel, published after the unit's events, and
    # callbacks run once the unit committed (before anything is published).
    posts: list[tuple[str, dict[str, object]]] = field(default_factory=list)
    committed: list[Callable[[], None]] = field(default_factory=list)

    async def lock(self, session_ids: Iterable[str]) -> None:
        """Serialize on more sessions (found by a read under this transaction); idempotent."""
        wanted = sorted(set(session_ids) - self.locked)
        if wanted:
            if self.held:
                raise BrokenInvariant("a session lock after a held summary row could deadlock")
            await locks.lock_sessions(self.conn, wanted)
            self.locked.update(wanted)

    async def lock_session_of_bundle(self, pending_id: str) -> str | None:
        """The session of this bundle, locked (on PostgreSQL by the statement that finds it, which
        also holds its task's summary row, so no further session lock may follow); None when no such
        bundle exists."""
        found, locked = await bundles.lock_session_of_bundle(self.conn, pending_id)
        if found is None:
            return None
        if locked:
            self.locked.add(found)
            self.held.add(found)
        else:
            await self.lock([found])
        return found

    def touch(self, *session_ids: str, task_id: str | None = None, pending_action_kept: bool = False) -> None:
        """These sessions' projections may have changed: bump their sequence at commit (`task_id`:
        the task they belong to, when the caller knows it). `pending_action_kept`: the write changed
        only what the pending action does not depend on (a live state for another live state, a
        settled delivery intent), so the tasks' summaries are not reconciled for it; any other write
        touching the same session in this unit clears it."""
        for session_id in session_ids:
            if session_id not in self.touched and pending_action_kept:
                self.neutral.add(session_id)
            elif not pending_action_kept:
                self.neutral.discard(session_id)
            self.touched[session_id] = None
            if task_id is not None:
                self.task_of[session_id] = task_id

    def publish(
        self,
        task_id: str,
        session_id: str,
        kind: EventKind,
        *,
        message_id: str | None = None,
        turn_id: str | None = None,
        pending_id: str | None = None,
    ) -> None:
        """Queue one event; it is published only after the commit succeeded."""
        self.events.append(Event(task_id, session_id, kind, message_id, turn_id, pending_id))

    def publish_messages(
        self,
        task_id: str,
        session_id: str,
        kind: EventKind,
        message_ids: Sequence[str],
        *,
        pending_id: str | None = None,
    ) -> None:
        """One event per message; `pending_id`: the bundle they belong to, announced to every process
        with the first of them."""
        announced = pending_id
        for message_id in message_ids:
            self.publish(task_id, session_id, kind, message_id=message_id, pending_id=announced)
            announced = None

    def post(self, channel: str, message: dict[str, object]) -> None:
        """Queue one message of another channel; published with the events, after the commit."""
        self.posts.append((channel, message))

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run `callback` once the unit committed (never when it rolled back)."""
        self.committed.append(callback)


@asynccontextmanager
async def uow(
    deps: Deps, session_ids: Iterable[str] = (), *, hold: bool = False, hold_summary: bool = False
) -> AsyncIterator[Work]:
    """One write transaction holding these sessions' locks; `hold=True` leaves publication to
    `flush(deps, work)` (for a caller that must act between the commit and the fan-out).
    `hold_summary` (one session, no further session locks in the unit): on PostgreSQL the statement
    that takes the session's lock also holds its task's summary row, so the commit reconciles that
    summary in one statement instead of locking it first."""
    async with deps.db.write() as conn:
        work = Work(conn)
        bumped.taken(conn)  # notes a unit rolled back on this connection left behind
        wanted = list(session_ids)
        if hold_summary and len(wanted) == 1:
            if await summaries.lock_session_holding_summary(conn, wanted[0]):
                work.held.add(wanted[0])
            work.locked.add(wanted[0])
        else:
            await work.lock(wanted)
        yield work
        already = bumped.taken(conn)
        work.touch(*(s for s in already if s not in work.touched))
        if work.touched:
            touched = list(work.touched)
            await tasks.bump_pending_seqs(conn, [s for s in touched if s not in already])
            changed = [s for s in touched if s not in work.neutral]
            if changed:
                work.summaries, work.projected = await project_in_transaction(
                    conn,
                    changed,
                    task_of={**{e.session_id: e.task_id for e in work.events}, **work.task_of},
                    held=work.held,
                    fault_points=deps.settings.fault_points,
                )
            else:
                work.projected = True  # no pending action moved: every summary is as current as before
    if not hold:
        await flush(deps, work)


async def flush(deps: Deps, work: Work, *, strict: bool = False) -> None:
    """Publish the queued events of a committed unit, in order, once (`strict`: raise on a failed
    publication instead of logging it)."""
    for callback in work.committed:
        callback()
    work.committed = []
    events, work.events = work.events, []
    written, work.summaries = work.summaries, []
    posts, work.posts = work.posts, []
    messages = [
        message
        for event in events
        for message in session_change(
            task_id=event.task_id,
            session_id=event.session_id,
            kind=event.kind,
            message_id=event.message_id,
            turn_id=event.turn_id,
            projected=work.projected,
            pending_id=event.pending_id,
        )
    ]
    if written and FAULT_PUBLISH not in deps.settings.fault_points:
        # One round trip for the whole unit where the bus can: its events, then its summaries.
        messages.extend((SUMMARY_CHANNEL, summary_event(s)) for s in written)
        written = []
    messages.extend(posts)
    await publish_batch(deps.bus, messages, strict=strict)
    await publish_summaries(deps, written)
