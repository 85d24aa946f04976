"""Subscriptions over the live hub: pending projections, session message events, task summaries.

`pendingActionChanged` and `taskSummaryChanged` send a snapshot of their scope first and then
changes, so a reconnecting client converges without any replay; each subscriber's mailbox holds
the newest state per session (per task), never a backlog. `sessionEvents` has no snapshot: a client
loads `sessionMessages` and applies events from then on (events older than what it holds lose on
the projection revision, and message events are idempotent re-reads).

When the event bus comes back after a gap, the live hub re-reads every subscription's scope (the
`tasks` given to it here) and sends what is newer than what the subscriber has, so no change made
during the gap is missed.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import strawberry
from strawberry.types import Info

from backend import metrics
from backend.api import access, fanout
from backend.api.auth import Principal
from backend.api.context import Context
from backend.api.types import Message, MessageEventKind, SessionProjection, TaskStatusSummary
from backend.domain.errors import NotFound
from backend.domain.records import SessionPending
from backend.services.container import Services
from backend.services.live import Scope, ScopeTasks, SessionChange
from backend.services.mailbox import Mailbox


@strawberry.type
class SessionEvent:
    kind: MessageEventKind
    message_id: strawberry.ID
    message: Message | None = strawberry.field(description="Null for DELETED.")
    projection: SessionProjection | None = strawberry.field(
        description="Null: could not be computed, or a content-only update; keep the old one."
    )

    @classmethod
    def of(cls, change: SessionChange) -> SessionEvent:
        return cls(
            kind=MessageEventKind(change.kind),
            message_id=strawberry.ID(change.message_id),
            message=None
            if change.message is None or change.kind == "deleted"
            else Message.of(change.message),
            projection=None if change.projection is None else SessionProjection.of(change.projection),
        )


async def _session_task(info: Info[Context, None], session_id: str) -> str:
    """The session's task, if the caller may read it; NotFound naming only the session otherwise."""
    return await _session_owner(info.context, session_id)


async def _session_owner(context: Context, session_id: str) -> str:
    try:
        task_id = await context.services.access.session_owner(session_id)
    except NotFound:
        raise NotFound("session", session_id) from None
    access.require_session_read(context.principal, session_id, task_id)
    return task_id


def shared_projection(p: SessionPending) -> SessionProjection:
    """The one `SessionProjection` of this process for a session's state at a revision: every
    subscription that sends it (a change fanned out, or the same snapshot) yields the same object,
    executed once per document and encoded once (`backend/api/fanout.py`)."""
    # The hub offers one record to every watcher of a change: they ask for it one after another.
    if _LastShared.record is p and _LastShared.projection is not None:
        return _LastShared.projection
    revision = p.revision
    key = ("SessionProjection", p.session_id, revision.epoch, revision.sequence, p.pending_action)
    shared = fanout.SHARED.event(key, lambda: SessionProjection.of(p))
    _LastShared.record, _LastShared.projection = p, shared
    return shared


class _LastShared:
    record: SessionPending | None = None
    projection: SessionProjection | None = None


async def _offer_snapshot(
    services: Services, task_ids: list[str], scope: Scope, mailbox: Mailbox[SessionPending]
) -> None:
    """The scope's current projections into the mailbox, read after the watcher was registered (in a
    read shared with the subscriptions starting meanwhile). A function of its own, so the rows it read
    are not held by the subscription's frame for as long as it runs."""
    sessions, projections = await services.reads.snapshot_coalesced(task_ids)
    for s in sessions:
        p = projections.get(s.id)
        if p is not None and scope(s.task_id, s.id):
            mailbox.offer(s.id, p)


def _readable(principal: Principal, task_id: str) -> bool:
    return access.can_read_task(principal, task_id)


async def _all_readable_tasks(info: Info[Context, None]) -> list[str]:
    return await _readable_tasks(info.context)


async def _readable_tasks(context: Context) -> list[str]:
    readable = access.readable_task_ids(context.principal)
    if readable is not None:
        return sorted(readable)
    return [t.id for t in await context.services.reads.tasks()]


async def _projection_scope(
    context: Context, task_id: strawberry.ID | None, session_id: strawberry.ID | None
) -> tuple[Scope, ScopeTasks, list[str], str | None]:
    """What a `pendingActionChanged` watches: its scope, the tasks it covers (and how to re-read them),
    and the one task it can match (None: every readable task)."""
    principal = context.principal
    scope: Scope
    if session_id is not None:
        sid = str(session_id)
        owner = await _session_owner(context, sid)
        if task_id is not None and str(task_id) != owner:
            raise NotFound("session", sid)

        def scope(_t: str, s: str) -> bool:
            return s == sid

        task_ids, only_task = [owner], owner
    elif task_id is not None:
        tid = str(task_id)
        access.require_task_read(principal, tid)
        await context.services.reads.require_task_coalesced(tid)

        def scope(t: str, _s: str) -> bool:
            return t == tid

        task_ids, only_task = [tid], tid
    else:

        def scope(t: str, _s: str) -> bool:
            return _readable(principal, t)

        task_ids, only_task = await _readable_tasks(context), None

    async def scope_tasks() -> list[str]:
        if only_task is None:
            return await _readable_tasks(context)
        return task_ids

    return scope, scope_tasks, task_ids, only_task


@strawberry.type
class LiveSubscriptions:
    @strawberry.subscription(description="Snapshot of the scope's session projections first, then changes.")
    async def pending_action_changed(
        self,
        info: Info[Context, None],
        task_id: strawberry.ID | None = None,
        session_id: strawberry.ID | None = None,
    ) -> AsyncGenerator[SessionProjection, None]:
        services = info.context.services
        scope, scope_tasks, task_ids, only_task = await _projection_scope(info.context, task_id, session_id)
        # Held no longer than needed: a subscription lives for hours, ten thousand on one process.
        del info
        with (
            services.live.watch_projections(scope, scope_tasks, task_id=only_task) as mailbox,
            metrics.SUBSCRIBERS.labels("pendingActionChanged").track_inprogress(),
        ):
            # Registered before the snapshot is read, so no change between the two is lost; the
            # mailbox drops whichever of snapshot and change carries the older revision.
            await _offer_snapshot(services, task_ids, scope, mailbox)
            # Changes that find this subscription idle are sent without waking it (`fanout.py`).
            mailbox.direct = fanout.direct_sender(shared_projection)
            async for projection in mailbox:
                shared = shared_projection(projection)
                del projection  # its own record (a snapshot's) is not held while the subscription waits
                yield shared

    @strawberry.subscription(description="Message added / updated / deleted, with the session projection.")
    async def session_events(
        self, info: Info[Context, None], session_id: strawberry.ID
    ) -> AsyncGenerator[SessionEvent, None]:
        sid = str(session_id)
        await _session_task(info, sid)
        with (
            info.context.services.live.watch_session_events(sid) as mailbox,
            metrics.SUBSCRIBERS.labels("sessionEvents").track_inprogress(),
        ):
            async for change in mailbox:
                yield SessionEvent.of(change)

    @strawberry.subscription(
        description="Snapshot of every readable task's summary first, then replacements."
    )
    async def task_summary_changed(
        self, info: Info[Context, None]
    ) -> AsyncGenerator[TaskStatusSummary, None]:
        principal = info.context.principal
        services = info.context.services

        def scope(t: str) -> bool:
            return _readable(principal, t)

        async def scope_tasks() -> list[str]:
            return await _all_readable_tasks(info)

        with (
            services.live.watch_summaries(scope, scope_tasks) as mailbox,
            metrics.SUBSCRIBERS.labels("taskSummaryChanged").track_inprogress(),
        ):
            views = await services.summaries.reconcile(await _all_readable_tasks(info))
            for task_id, view in views.items():
                if view.summary is not None:
                    mailbox.offer(task_id, view.summary)
            async for summary in mailbox:
                yield TaskStatusSummary.of(summary)
