"""The live waiters of this process and the hand-off of claimed answers to them, across processes.

Every process has an instance id. A waiter's bundle rows record `waiter_id` and `waiter_instance`.
A responder (in any process) claims the answer durably, then hands the claim to that instance over
the event bus (channel `turnwise.instance.<id>`; in-process when it is its own). The waiter confirms
through the database and answers the responder on the responder's instance channel. Liveness of a
remote waiter = its instance's heartbeat in the meta table is fresh and the bus is shared (not
`memory://`); of a local waiter = it is registered here. Waiters also wake on every session event of
their session (one bus subscription per process) and re-read their bundle: events carry ids only.

The bus can lose a message (an outage, a partition). So a process that receives a hand-off for a
waiter of its own acknowledges receipt at once (`received`), and a responder that hears no receipt
within `handoff_receipt_seconds` gives up on the hand-off: its claim is restored (or found settled)
under the session lock, and the waiter's confirmation, should the hand-off arrive after all, finds no
claim to finalize. Only a received hand-off is waited for up to the live-confirmation bound. When the
bus comes back after a gap, every waiter re-reads its bundle (events were missed) and a responder
gives up on every remote hand-off still unconfirmed (its confirmation may have been lost); a waiter
whose confirmation could not be published retries it until the bus takes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from backend import faults
from backend.background import stop_tasks
from backend.bus import BUS_GAP, TASK_CHANNEL
from backend.db.engine import utcnow
from backend.domain.events import EventKind
from backend.domain.ids import new_id
from backend.domain.lifecycle import Answer, Claim
from backend.domain.permissions import Decision, decision_from_response
from backend.lru import LRU
from backend.repository import instances
from backend.services.context import Deps

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

log = logging.getLogger("turnwise.pending")

INSTANCE_CHANNEL = "turnwise.instance"


def instance_channel(instance_id: str) -> str:
    return f"{INSTANCE_CHANNEL}.{instance_id}"


def claim_to_json(claim: Claim) -> dict[str, Any]:
    """A claim as the hand-off message carries it to another process: a question's answer as its
    fields, a permission request's decision as it is stored (`{"decision": ...}`)."""
    data = asdict(claim)
    data["answers"] = [
        {"decision": a.as_response()} if isinstance(a, Decision) else asdict(a) for a in claim.answers
    ]
    return data


def claim_from_json(data: dict[str, Any]) -> Claim:
    return Claim(
        claim_id=str(data["claim_id"]),
        pending_id=str(data["pending_id"]),
        session_id=str(data["session_id"]),
        task_id=str(data["task_id"]),
        turn_id=str(data["turn_id"]),
        message_ids=tuple(str(m) for m in data["message_ids"]),
        answers=tuple(_answer_from_json(a) for a in data["answers"]),
        rejected=bool(data["rejected"]),
    )


def _answer_from_json(data: dict[str, Any]) -> Answer | Decision:
    if "decision" in data:
        decision = decision_from_response(data["decision"])
        if decision is None:
            raise ValueError("a hand-off carried an unreadable decision")
        return decision
    return Answer(
        str(data["question_id"]), tuple(str(s) for s in data["selected_option_ids"]), data.get("custom_text")
    )


class NoticeKind(StrEnum):
    HANDOFF = "handoff"  # a claimed answer for the waiter to confirm and deliver
    WAKE = "wake"  # re-read the bundle: something about it changed


# Session events that can never end a waiter's hold on its bundle, so they wake nobody: a message
# added (a new question or message leaves other bundles as they are) and a session state change (a
# terminal one expires the questions and publishes their rows, which wakes the waiters). Skipping
# them spares every ask the re-read its own events would otherwise cause.
NO_WAKE_EVENTS = frozenset({EventKind.MESSAGE_ADDED, EventKind.SESSION_STATE})


@dataclass
class Notice:
    kind: NoticeKind
    claim: Claim | None = None
    reply_to: str | None = None


@dataclass
class Waiter:
    session_id: str
    waiter_id: str = field(default_factory=new_id)
    pending_id: str | None = None
    queue: asyncio.Queue[Notice] = field(default_factory=asyncio.Queue)
    wake_queued: bool = False
    finished: bool = False

    def wake(self) -> None:
        # Coalesced: one queued wake re-reads the newest state, however many events arrived.
        if not self.wake_queued:
            self.wake_queued = True
            self.queue.put_nowait(Notice(NoticeKind.WAKE))


# Other processes whose heartbeat a hub keeps (a fleet is far smaller).
_BEATS_KEPT = 1024


class WaiterHub:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.instance_id = deps.instance_id
        self._waiters: dict[str, Waiter] = {}
        self._by_session: dict[str, set[str]] = {}
        self._confirmations: dict[str, asyncio.Future[bool]] = {}
        # Claims handed to another process and not yet confirmed: the receipt timer of each (None
        # once its receipt arrived).
        self._remote: dict[str, asyncio.TimerHandle | None] = {}
        self._retries: set[asyncio.Task[None]] = set()
        self._tasks: list[asyncio.Task[None]] = []
        # The newest heartbeat read of each other process: while it is fresh, so is the process's
        # stored one (a heartbeat only moves forward), and no read is needed.
        self._beats: LRU[str, dt.datetime] = LRU(_BEATS_KEPT)
        self.started = False

    @property
    def shared_bus(self) -> bool:
        return self.deps.bus.shared

    @property
    def stale_after(self) -> dt.timedelta:
        return dt.timedelta(seconds=3 * self.deps.settings.heartbeat_seconds)

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.started:
            return
        async with self.deps.db.write() as conn:
            await instances.beat(conn, self.instance_id)
        for channel, handler in (
            (instance_channel(self.instance_id), self._on_instance_message),
            (TASK_CHANNEL, self._on_session_event),
        ):
            self._tasks.append(await self.deps.bus.follow(channel, handler, after_gap={"type": BUS_GAP}))
        self._tasks.append(asyncio.create_task(self._heartbeat()))
        self.started = True
        log.info("waiter hub started", extra={"event": "waiters.started", "instance_id": self.instance_id})

    async def stop(self) -> None:
        await stop_tasks([*self._tasks, *self._retries], log, "waiter hub task")
        self._tasks.clear()
        self._retries.clear()
        if self.started:
            try:
                async with self.deps.db.write() as conn:
                    await instances.forget(conn, self.instance_id)
            except Exception:
                # Others treat this instance as gone once its heartbeat goes stale.
                log.exception(
                    "waiter hub could not forget its instance", extra={"event": "waiters.forget_failed"}
                )
        self.started = False

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.deps.settings.heartbeat_seconds)
            try:
                async with self.deps.db.write() as conn:
                    await instances.beat(conn, self.instance_id)
            except Exception:
                log.exception("heartbeat failed", extra={"instance_id": self.instance_id})

    # --- registry -------------------------------------------------------------------------------

    def register(self, session_id: str) -> Waiter:
        waiter = Waiter(session_id)
        self._waiters[waiter.waiter_id] = waiter
        self._by_session.setdefault(session_id, set()).add(waiter.waiter_id)
        return waiter

    def unregister(self, waiter: Waiter) -> None:
        self._waiters.pop(waiter.waiter_id, None)
        ids = self._by_session.get(waiter.session_id)
        if ids is not None:
            ids.discard(waiter.waiter_id)
            if not ids:
                del self._by_session[waiter.session_id]

    def is_local_waiter(self, waiter_id: str | None) -> bool:
        return waiter_id is not None and waiter_id in self._waiters

    def left(self, instance_id: str | None, waiter_id: str | None) -> bool:
        """Has this waiter of this process stopped waiting? Its rows stay attached until its detach
        commits, which waits for the session lock. (Another process's waiter is not known here: its
        process refuses the hand-off instead.)"""
        return instance_id == self.instance_id and not self.is_local_waiter(waiter_id)

    def alive(self, instance_id: str | None, waiter_id: str | None, heartbeat: dt.datetime | None) -> bool:
        """Can a hand-off to this waiter be confirmed? Decides ACTIVE_LIVE vs ACTIVE_DETACHED."""
        if instance_id is None or waiter_id is None:
            return False
        if instance_id == self.instance_id:
            return self.is_local_waiter(waiter_id)
        return self.shared_bus and self.heartbeat_fresh(heartbeat)

    async def heartbeat(self, conn: AsyncConnection, instance_id: str) -> dt.datetime | None:
        """Another process's last heartbeat: the one read before while it is still fresh (the stored
        one can only be newer, so it is fresh too), else read now. Liveness so decided is never
        later than a read would have decided it: a process stops beating when it crashes, and when
        it stops cleanly it has detached its waiters' rows first (their liveness no longer counts)."""
        known = self._beats.get(instance_id)
        if known is not None and self.heartbeat_fresh(known):
            return known
        beat = (await instances.heartbeats(conn, [instance_id])).get(instance_id)
        if beat is None:
            self._beats.pop(instance_id)
        else:
            self._beats.put(instance_id, beat)
        return beat

    def heartbeat_fresh(self, heartbeat: dt.datetime | None) -> bool:
        """Another process counts as running until it misses three heartbeats."""
        return heartbeat is not None and utcnow() - heartbeat < self.stale_after

    def needs_heartbeat(self, instance_id: str | None) -> bool:
        return instance_id is not None and instance_id != self.instance_id and self.shared_bus

    # --- hand-off -------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def expect_confirmation(self, claim_id: str) -> AsyncIterator[asyncio.Future[bool]]:
        """The waiter's verdict on a hand-off: True = finalized; False = not delivered (also when
        a remote waiter's process did not acknowledge receipt within the receipt bound)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._confirmations[claim_id] = future
        try:
            yield future
        finally:
            self._confirmations.pop(claim_id, None)
            timer = self._remote.pop(claim_id, None)
            if timer is not None:
                timer.cancel()

    async def hand_off(self, instance_id: str, waiter_id: str, claim: Claim) -> None:
        if instance_id == self.instance_id:
            # The waiter lives here: the claim goes to it as it is, no message to encode and decode.
            await self._receive_handoff(waiter_id, claim, self.instance_id)
            return
        message = {
            "type": "handoff",
            "waiter_id": waiter_id,
            "reply_to": self.instance_id,
            "claim": claim_to_json(claim),
        }
        if claim.claim_id in self._confirmations:
            # Armed before the publish: the receipt can arrive before the publish call returns.
            self._remote[claim.claim_id] = asyncio.get_running_loop().call_later(
                self.deps.settings.handoff_receipt_seconds, self._no_receipt, claim.claim_id
            )
        await self.deps.bus.publish(instance_channel(instance_id), message)

    def _no_receipt(self, claim_id: str) -> None:
        if claim_id not in self._remote:
            return
        self._remote[claim_id] = None
        self._give_up(claim_id, "no receipt from the waiter's process")

    def _give_up(self, claim_id: str, why: str) -> None:
        future = self._confirmations.get(claim_id)
        if future is not None and not future.done():
            log.warning(
                "hand-off given up",
                extra={"event": "pending.handoff_lost", "claim_id": claim_id, "why": why},
            )
            future.set_result(False)

    async def confirm(self, reply_to: str | None, claim_id: str, ok: bool) -> None:
        """Tell the responder the outcome of its hand-off (ok = durably finalized by the waiter)."""
        message = {"type": "confirmed", "claim_id": claim_id, "ok": ok}
        if reply_to is None:
            return
        if reply_to == self.instance_id:
            await self._on_instance_message(message)
        else:
            try:
                await self.deps.bus.publish(instance_channel(reply_to), message)
            except Exception:  # noqa: BLE001 - retried below
                # The database holds the truth; the responder re-checks it when its wait ends. Until
                # then, retry: the bus is usually back within seconds.
                log.warning("confirmation publication failed; retrying", extra={"claim_id": claim_id})
                task = asyncio.create_task(self._republish(reply_to, message))
                self._retries.add(task)
                task.add_done_callback(self._retries.discard)

    async def _republish(self, reply_to: str, message: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.deps.settings.live_confirmation_seconds
        while loop.time() < deadline:
            await asyncio.sleep(0.5)
            try:
                await self.deps.bus.publish(instance_channel(reply_to), message)
                return
            except Exception:  # noqa: BLE001 - retried until the bound; the responder recovers anyway
                continue

    async def _acknowledge(self, reply_to: Any, claim_id: str) -> None:
        """Receipt of a hand-off for a live waiter here: the responder keeps waiting for it."""
        if not isinstance(reply_to, str) or reply_to == self.instance_id:
            return
        try:
            faults.check("handoff.reply")
            await self.deps.bus.publish(
                instance_channel(reply_to), {"type": "received", "claim_id": claim_id}
            )
        except Exception:  # without a receipt the responder restores the claim
            log.warning("hand-off receipt not published", extra={"claim_id": claim_id}, exc_info=True)

    async def _receive_handoff(self, waiter_id: str, claim: Claim, reply_to: Any) -> None:
        waiter = self._waiters.get(waiter_id)
        if waiter is None or waiter.finished or waiter.pending_id != claim.pending_id:
            # Nobody here can confirm it: say so at once, so the responder restores the claim
            # instead of waiting out its bound.
            await self.confirm(reply_to, claim.claim_id, False)
            return
        waiter.queue.put_nowait(Notice(NoticeKind.HANDOFF, claim, reply_to))
        await self._acknowledge(reply_to, claim.claim_id)

    async def _on_instance_message(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "handoff":
            await self._receive_handoff(
                str(message.get("waiter_id")), claim_from_json(message["claim"]), message.get("reply_to")
            )
        elif kind == "received":
            claim_id = str(message.get("claim_id"))
            timer = self._remote.get(claim_id)
            if timer is not None:
                timer.cancel()
                self._remote[claim_id] = None
        elif kind == "confirmed":
            future = self._confirmations.get(str(message.get("claim_id")))
            if future is not None and not future.done():
                future.set_result(bool(message.get("ok")))
        elif kind == BUS_GAP:
            # A receipt or confirmation may have been lost in the gap: recover every remote hand-off
            # still open (the restore and a late confirmation serialize on the claim in the database).
            for claim_id in list(self._remote):
                self._give_up(claim_id, "the bus was lost while the hand-off was open")

    async def _on_session_event(self, event: dict[str, Any]) -> None:
        if event.get("type") == BUS_GAP:
            # Session events may have been missed: every waiter re-reads its bundle.
            for woken in list(self._waiters.values()):
                woken.wake()
            return
        if event.get("type") in NO_WAKE_EVENTS:
            return
        for waiter_id in list(self._by_session.get(str(event.get("session_id")), ())):
            waiter = self._waiters.get(waiter_id)
            # A waiter still asking (no bundle yet) has nothing to re-read: its ask names the bundle
            # inside the unit that holds the session's lock, so an event that arrives before that
            # is of a write committed before the ask took the lock, which the ask's own statements
            # read. (The event of the previous answer's confirmation often lands here, as the agent
            # asks its next question.)
            if waiter is not None and waiter.pending_id is not None:
                waiter.wake()
