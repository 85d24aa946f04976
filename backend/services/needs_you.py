"""Needs you: everything that waits for a person, across tasks and sessions, oldest first.

An item is an active pending action (the one rule's: a pending row of the current turn of a live
session) of a task the caller may read, with its task's title, when it was asked, and whether an
agent holds a live wait for it now (`agent_waiting`: the same fact as a request's
`agentDisconnected`, inverted, read from the same rows). The whole list is one statement
(`repository/needs_you.py`) whatever its length; liveness of a remote waiter adds at most one read
per other process whose heartbeat is not fresh in memory (`WaiterHub.heartbeat`).

Not to be confused with the session inbox (`services/inbox.py`): the resume prompts of late answers
waiting for their agent.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sqlalchemy.ext.asyncio import AsyncConnection

from backend import metrics
from backend.domain.clarification import flag
from backend.domain.errors import InvalidInput
from backend.domain.lifecycle import Bundle, BundleState
from backend.domain.records import Revision
from backend.domain.states import MESSAGE_TYPES, PendingActionKind
from backend.repository import needs_you as repo
from backend.services.context import Deps
from backend.services.waiters import WaiterHub

log = logging.getLogger("turnwise.needs_you")

DEFAULT_FIRST = 100
MAX_FIRST = 500
ACTIVE = (BundleState.ACTIVE_LIVE, BundleState.ACTIVE_DETACHED)


@dataclass(frozen=True, slots=True)
class NeedsYouItem:
    bundle: Bundle
    task_title: str
    agent_waiting: bool

    @property
    def pending_id(self) -> str:
        return self.bundle.pending_id

    @property
    def kind(self) -> PendingActionKind:
        return self.bundle.kind

    @property
    def task_id(self) -> str:
        return self.bundle.task_id

    @property
    def session_id(self) -> str:
        return self.bundle.session_id

    @property
    def asked_at(self) -> dt.datetime:
        return self.bundle.asked_at

    @property
    def order(self) -> tuple[dt.datetime, str]:
        return (self.bundle.asked_at, self.bundle.pending_id)


@dataclass(frozen=True, slots=True)
class SessionItems:
    """A session as one read found it: its revision and its items, oldest first."""

    session_id: str
    task_id: str
    revision: Revision
    items: tuple[NeedsYouItem, ...]


def agent_waiting(bundle: Bundle) -> bool:
    """An agent holds a live wait for it: one of its pending rows is not marked disconnected."""
    return any(not flag(r.metadata.get("agent_disconnected")) for r in bundle.pending_rows)


@dataclass
class NeedsYou:
    deps: Deps
    waiters: WaiterHub

    async def inbox(self, task_ids: Sequence[str] | None, first: int = DEFAULT_FIRST) -> list[NeedsYouItem]:
        """The oldest `first` items of these tasks (None: of every task)."""
        if not 1 <= first <= MAX_FIRST:
            raise InvalidInput("first", f"must be between 1 and {MAX_FIRST}")
        async with self.deps.db.read() as conn:
            found = await repo.waiting_in_tasks(conn, task_ids, first)
            return await self.items(conn, found)

    async def sessions(self, conn: AsyncConnection, found: Sequence[repo.SessionFacts]) -> list[SessionItems]:
        """The sessions read, their facts as items."""
        beats: dict[str, dt.datetime | None] = {}
        return [
            SessionItems(s.session_id, s.task_id, s.revision, tuple(await self.items(conn, s.pending, beats)))
            for s in found
        ]

    async def gauges(self) -> dict[PendingActionKind, tuple[int, dt.datetime | None]]:
        """kind -> (how many pending actions of it wait, when the oldest was asked); one statement."""
        async with self.deps.db.read() as conn:
            found = await repo.counts(conn)
        return {kind: found.get(message_type, (0, None)) for kind, message_type in MESSAGE_TYPES.items()}

    async def refresh_gauges(self) -> None:
        """`/metrics`' gauges of what waits now (by kind: how many, the oldest one's age), read before
        a scrape; a failed read is logged and leaves the gauges as they were."""
        try:
            found = await self.gauges()
        except Exception:
            log.warning(
                "waiting pending actions not counted",
                extra={"event": "needs_you.gauges_failed"},
                exc_info=True,
            )
            return
        now = dt.datetime.now(dt.UTC)
        for kind, (count, oldest) in found.items():
            metrics.PENDING_WAITING.labels(kind.value).set(count)
            age = 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())
            metrics.PENDING_OLDEST_SECONDS.labels(kind.value).set(age)

    async def items(
        self,
        conn: AsyncConnection,
        found: Sequence[repo.PendingFacts],
        beats: dict[str, dt.datetime | None] | None = None,
    ) -> list[NeedsYouItem]:
        """The facts read as items, each bundle's state with its waiter's liveness; an item whose
        bundle is not active after all (a legacy row the SQL rule counts) is left out. `beats`: the
        heartbeats of other processes read so far (each is read once per call)."""
        beats = {} if beats is None else beats
        hub = self.waiters
        out = []
        for facts in found:
            bundle = Bundle.of_rows(
                facts.pending_id, facts.task_id, facts.rows, facts.session_state, facts.current_turn
            )
            instance = bundle.waiter_instance
            if instance is not None and hub.needs_heartbeat(instance) and instance not in beats:
                beats[instance] = await hub.heartbeat(conn, instance)
            if hub.alive(instance, bundle.waiter_id, beats.get(instance) if instance else None):
                bundle = replace(bundle, waiter_alive=True)
            if bundle.state not in ACTIVE:
                continue
            out.append(NeedsYouItem(bundle, facts.task_title, agent_waiting(bundle)))
        return out
