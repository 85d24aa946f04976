"""The pending-action lifecycle's shared part: its collaborators, and bundle reads with liveness.

A bundle is every row of one pending id (a clarification's questions, or one permission request),
read in one snapshot; its state comes from `domain.lifecycle.derive_state`. The lifecycle is one
service for both kinds (`pending/actions.py`), composed of this core, the asking side
(`pending/asking.py`: ask, wait, detach, confirm) and the responding side (`pending/responding.py`:
claim, deliver, resume, restore). What differs between the kinds (what is asked, how a response is
checked, what else it decides) comes in with each call, as an `Ask` or a `Response`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from backend.domain.errors import present
from backend.domain.events import EventKind
from backend.domain.lifecycle import Bundle, BundleRow, Claim
from backend.domain.states import MESSAGE_TYPES, PendingActionKind
from backend.repository import bundles
from backend.repository.reach import AskOutbox
from backend.services.bounded import bounded
from backend.services.context import Deps
from backend.services.events_out import publish_session_change
from backend.services.restorer import Restorer
from backend.services.resume import NotWiredResumer, Resumer
from backend.services.uow import Work
from backend.services.waiters import WaiterHub

log = logging.getLogger("turnwise.pending")
T = TypeVar("T")

# Raises (NotFound, Forbidden) unless the caller may act on the bundle or task: called with the task
# id and, where one is concerned, the session id. Every entry point requires one; there is no default.
Authorize = Callable[[str, str | None], None]


def trusted(_task_id: str, _session_id: str | None) -> None:
    """The authorizer of in-process callers acting for the system itself (never the API's)."""


class AskNotifier(Protocol):
    """Who hears of a new pending action in its ask's unit of work (the reach service)."""

    def ask_outbox(self) -> AskOutbox:
        """When the ask's notification outbox rows are due (read before the ask's statements, which
        may write the rows themselves)."""
        ...

    async def asked(
        self,
        work: Work,
        pending_id: str,
        task_id: str,
        session_id: str,
        outbox: AskOutbox,
        written: int | None,
    ) -> None:
        """A new pending action was written in `work`; `written`: how many outbox rows the ask's
        own statement wrote for it (None: none, the notifier writes them)."""
        ...


@dataclass
class Core:
    """What both sides of the lifecycle share: its collaborators, the seams wired after it was built
    (the resumer, the watchdog's notifier, the ask notifier), and the bundle reads."""

    deps: Deps
    hub: WaiterHub
    resumer: Resumer = field(default_factory=NotWiredResumer)
    # Called after a restore so retryability is reported only once task summaries converged.
    refresh_summaries: Callable[[list[str]], Awaitable[Any]] | None = None
    # The primary-answer watchdog's synchronous notifier: called inside the finalized confirmation
    # boundary, before the answer is returned to the agent, so the agent cannot act before it is armed.
    primary_answer_notifier: Callable[[Claim], None] | None = None
    # Told in the ask's unit of work of each new pending action: the notification outbox's rows
    # (backend/services/reach/asking.py), committed with the ask or not at all.
    on_asked: AskNotifier | None = None
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    # pending id -> session, for bundles this process asked or answered and those other processes
    # announced (the live hub hears them): a bundle never changes session, so a respond to one of
    # them locks its session without first looking it up.
    sessions: dict[str, str] = field(default_factory=dict)
    session_memory: int = 10_000
    # Set by the service once the responding side exists (it restores what the restorer holds).
    restorer: Restorer = field(init=False)

    def remember_session(self, pending_id: str, session_id: str) -> None:
        """A bundle's session: this process asked or answered it, or another process announced it."""
        memory = self.sessions
        if pending_id not in memory:
            if len(memory) >= self.session_memory:
                del memory[next(iter(memory))]  # the oldest first
            memory[pending_id] = session_id

    async def bounded(self, work: Awaitable[T], seconds: float | None = None) -> T:
        """Run `work` in its own task with a deadline; a cancelled caller does not cancel it."""
        limit = self.deps.settings.persistence_seconds if seconds is None else seconds
        return await bounded(self.background, work, limit)

    async def publish(
        self,
        task_id: str,
        session_id: str,
        kind: EventKind,
        message_ids: Sequence[str],
        *,
        strict: bool = False,
    ) -> None:
        for message_id in message_ids:
            await publish_session_change(
                self.deps.bus,
                task_id=task_id,
                session_id=session_id,
                kind=kind,
                message_id=message_id,
                strict=strict,
            )

    async def load(self, conn: AsyncConnection, pending_id: str) -> Bundle | None:
        facts = (await bundles.bundle_facts(conn, [pending_id])).get(pending_id)
        if facts is None:
            return None
        return await self._bundle(conn, pending_id, *facts)

    async def _bundle(
        self,
        conn: AsyncConnection,
        pending_id: str,
        rows: list[BundleRow],
        task_id: str,
        session_state: str,
        current_turn: str | None,
    ) -> Bundle:
        bundle = Bundle.of_rows(pending_id, task_id, rows, session_state, current_turn)
        instance = bundle.waiter_instance
        heartbeat = None
        if self.hub.needs_heartbeat(instance):
            known = present(instance, "waiter instance")
            heartbeat = await self.hub.heartbeat(conn, known)
        alive = self.hub.alive(instance, bundle.waiter_id, heartbeat)
        return replace(bundle, waiter_alive=alive) if alive else bundle

    async def bundle(self, pending_id: str, *, authorize: Authorize) -> Bundle | None:
        async with self.deps.db.read() as conn:
            bundle = await self.load(conn, pending_id)
        if bundle is not None:
            authorize(bundle.task_id, bundle.session_id)
        return bundle

    async def active_bundles(
        self, session_ids: Sequence[str], kind: PendingActionKind = PendingActionKind.CLARIFICATION
    ) -> dict[str, Bundle]:
        """session_id -> its newest active bundle of this kind; two statements for the whole batch."""
        async with self.deps.db.read() as conn:
            by_session = await bundles.active_pending_ids_for_sessions(conn, session_ids, MESSAGE_TYPES[kind])
            wanted = [ids[0] for ids in by_session.values()]
            facts = await bundles.bundle_facts(conn, wanted)
            out: dict[str, Bundle] = {}
            for session_id, ids in by_session.items():
                if ids[0] in facts:
                    out[session_id] = await self._bundle(conn, ids[0], *facts[ids[0]])
        return out
