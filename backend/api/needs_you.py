"""Needs you: the caller's actionable pending actions across every task it may read, oldest first.

`inbox(first)` reads them; `inboxChanged` sends the list at once, then again after every change to
it. A person sees the tasks granted to them, admin and support every task; an agent token (and any
other role that is not a person's) is refused, as the other person-facing queries refuse it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncGenerator
from typing import ClassVar

import strawberry
from strawberry.types import Info

from backend import metrics
from backend.api import access
from backend.api.auth import Principal
from backend.api.context import Context
from backend.api.types import ClarificationBundle, PermissionRequest
from backend.domain.errors import Forbidden, InvalidInput
from backend.domain.states import PendingActionKind
from backend.services.needs_you import DEFAULT_FIRST, MAX_FIRST, NeedsYouItem

PEOPLE = ("user", "admin", "support")


def person_scope(principal: Principal) -> frozenset[str] | None:
    """The tasks whose pending actions the caller may see (None: every task); Forbidden unless the
    caller is a person."""
    if principal.role not in PEOPLE:
        raise Forbidden(f"the {principal.role} role has no inbox: it is a person's list")
    return access.readable_task_ids(principal)


@strawberry.type(description="A pending action that waits for the caller.")
class InboxItem:
    pending_id: strawberry.ID
    kind: PendingActionKind
    task_id: strawberry.ID
    task_title: str
    session_id: strawberry.ID
    asked_at: dt.datetime
    agent_waiting: bool = strawberry.field(
        description="An agent holds a live wait for it now (false: detached; an answer resumes it later)."
    )
    clarification: ClarificationBundle | None = strawberry.field(description="Kind CLARIFICATION.")
    permission: PermissionRequest | None = strawberry.field(description="Kind PERMISSION.")

    @classmethod
    def of(cls, item: NeedsYouItem) -> InboxItem:
        bundle = item.bundle
        questions = item.kind == PendingActionKind.CLARIFICATION
        return cls(
            pending_id=strawberry.ID(bundle.pending_id),
            kind=item.kind,
            task_id=strawberry.ID(bundle.task_id),
            task_title=item.task_title,
            session_id=strawberry.ID(bundle.session_id),
            asked_at=bundle.asked_at,
            agent_waiting=item.agent_waiting,
            clarification=ClarificationBundle.of(bundle) if questions else None,
            permission=None if questions else PermissionRequest.of(bundle),
        )


class _Shown:
    """The process's `InboxItem` of each item the needs-you hub read: one change's items are shared by
    every open inbox that sees them, so each is made once, not once per subscriber (bounded: the
    oldest is forgotten first, and made again if it is asked for)."""

    bound = 50_000
    made: ClassVar[dict[int, tuple[NeedsYouItem, InboxItem]]] = {}

    @classmethod
    def of(cls, item: NeedsYouItem) -> InboxItem:
        held = cls.made.get(id(item))
        if held is not None and held[0] is item:
            return held[1]
        shown = InboxItem.of(item)
        if len(cls.made) >= cls.bound:
            del cls.made[next(iter(cls.made))]
        cls.made[id(item)] = (item, shown)
        return shown


@strawberry.type
class NeedsYouQueries:
    @strawberry.field(
        description="The caller's actionable pending actions (the current-turn rule) across every task "
        "it may read, oldest first."
    )
    async def inbox(self, info: Info[Context, None], first: int | None = DEFAULT_FIRST) -> list[InboxItem]:
        scope = person_scope(info.context.principal)
        tasks = None if scope is None else sorted(scope)
        items = await info.context.services.needs_you.inbox(tasks, DEFAULT_FIRST if first is None else first)
        return [InboxItem.of(i) for i in items]


@strawberry.type
class NeedsYouSubscriptions:
    @strawberry.subscription(
        description="The caller's inbox (as `inbox(first)` reads it) at once, then again after every "
        "change to it: a pending action asked, settled or superseded, a task granted or taken away."
    )
    async def inbox_changed(
        self, info: Info[Context, None], first: int | None = DEFAULT_FIRST
    ) -> AsyncGenerator[list[InboxItem], None]:
        principal = info.context.principal
        scope = person_scope(principal)
        limit = DEFAULT_FIRST if first is None else first
        if not 1 <= limit <= MAX_FIRST:
            raise InvalidInput("first", f"must be between 1 and {MAX_FIRST}")
        hub = info.context.services.needs_you_live
        person = principal.user_id if principal.role == "user" else None
        del info  # held no longer than needed: a subscription lives for hours
        with (
            hub.watch(person, scope, limit) as watcher,
            metrics.SUBSCRIBERS.labels("inboxChanged").track_inprogress(),
        ):
            # Registered before the snapshot is read, so no change between the two is lost.
            await hub.snapshot(watcher)
            async for items in watcher.mailbox:
                yield [_Shown.of(i) for i in items]
