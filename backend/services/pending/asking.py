"""The agent's side of a pending action: ask (or wait again), wait as the live waiter, detach, and
confirm a handed-off response durably before the agent sees it.

Writes that must outlive a cancelled request (detach, confirmation) run in a task of their own with
a finite deadline (`Core.bounded`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from backend import faults
from backend.db.health import is_outage
from backend.domain.errors import present
from backend.domain.events import EventKind
from backend.domain.ids import new_id
from backend.domain.lifecycle import (
    Answered,
    Asked,
    Bundle,
    BundleRow,
    BundleState,
    Claim,
    Closed,
    Decided,
    Detached,
    Rejected,
    Spec,
    WaitOutcome,
)
from backend.domain.records import SessionRecord
from backend.domain.states import ClarificationStatus, PendingActionKind, SessionState
from backend.repository import asks, bundles, claims, tasks
from backend.repository.asks import AskContext
from backend.repository.reach import AskOutbox
from backend.services.pending.core import Core, trusted
from backend.services.session_turn import turn_for_new_rows
from backend.services.uow import Work, flush, uow
from backend.services.waiters import Notice, NoticeKind, Waiter

log = logging.getLogger("turnwise.pending")

# What an ask of each kind writes, as a refusal names it.
WRITES = {PendingActionKind.CLARIFICATION: "questions", PendingActionKind.PERMISSION: "permission requests"}


@dataclass(frozen=True, slots=True)
class Ask:
    """One ask of a pending action, as its kind's front validated it."""

    kind: PendingActionKind
    session_id: str
    # Validated specs: questions, or one permission request (none when waiting again).
    specs: tuple[Spec, ...]
    context: str | None
    signature: str
    wait_seconds: float
    # The rules that may decide the action as it is asked, read with the ask's context
    # (`permission_rules.candidate_params`), and what decides it from them in the ask's own unit of
    # work (given the context when it found any); when it does, the ask yields only its `Decided` and
    # waits for nobody.
    rules: Mapping[str, Any] | None = None
    decided: Callable[[Work, AskContext], Awaitable[Decided | None]] | None = None
    # Only wait again on that open bundle (`wait_again`): the ask writes no row, and yields nothing
    # when the bundle is no longer open.
    attach_to: str | None = None


@dataclass(frozen=True, slots=True)
class _Context:
    """What an ask read (and maybe wrote) under the session's lock, before deciding what to write."""

    read: asks.AskContext
    # The open bundle with the same signature, which the ask re-attaches to instead of a new one.
    reused: str | None
    outbox: AskOutbox | None = None

    @property
    def session(self) -> SessionRecord:
        return self.read.session

    @property
    def turn_id(self) -> str | None:
        return self.read.turn_id


@dataclass
class Asking:
    core: Core

    async def ask(self, ask: Ask) -> AsyncGenerator[WaitOutcome, None]:
        """Yields `Asked`, then exactly one of Answered / Rejected / Detached / Closed; or only
        `Decided` (see `Ask.decided`); or nothing (see `Ask.attach_to`)."""
        hub = self.core.hub
        # Registered before the write, so a hand-off for the new bundle always finds its waiter.
        waiter = hub.register(ask.session_id)
        asked: dict[str, Any] | None = None
        delivered: list[Claim] = []
        try:
            made = await self._create_or_attach(waiter, ask)
            if made is None:  # the bundle to wait on again is no longer open: nothing was written
                waiter.finished = True
                return
            if isinstance(made, Decided):
                waiter.finished = True
                yield made
                return
            bundle, asked = made
            yield Asked(bundle)
            # Logged once the agent was sent the outcome (the generator resumes after the send), so a
            # log line never delays it; likewise "delivered" below.
            log.info(asked.pop("message"), extra=asked)
            asked = None
            yield await self._wait(waiter, ask.wait_seconds, delivered)
        finally:
            if asked is not None:  # the agent went away right after it was sent `Asked`
                log.info(asked.pop("message"), extra=asked)
            await self._end_wait(waiter, delivered)

    async def _end_wait(self, waiter: Waiter, delivered: list[Claim]) -> None:
        """However a wait ends: its delivery logged, its waiter gone, no hand-off left waiting on it,
        and its rows detached when the agent went away."""
        for claim in delivered:
            log.info(
                "pending action delivered",
                extra={
                    "event": "pending.delivered",
                    "kind": claim.kind.value,
                    "pending_id": claim.pending_id,
                    "claim_id": claim.claim_id,
                    "rejected": claim.rejected,
                },
            )
        self.core.hub.unregister(waiter)
        # A hand-off nobody will confirm now: refuse it at once, so its responder restores the
        # claim instead of waiting out the live confirmation bound.
        for notice in _drain(waiter):
            claim = present(notice.claim, "hand-off claim")
            await self.core.bounded(self.core.hub.confirm(notice.reply_to, claim.claim_id, False))
        if not waiter.finished and waiter.pending_id is not None:
            # Client disconnect: detach in a context the cancelled request cannot abort.
            waiter.finished = True
            await self.core.bounded(self.detach(waiter, "disconnect"))

    # --- the ask's unit of work -----------------------------------------------------------------

    async def _create_or_attach(
        self, waiter: Waiter, ask: Ask
    ) -> tuple[Bundle, dict[str, Any]] | Decided | None:
        """The bundle asked (or re-attached to), and its log line (the message and its fields).
        With `attach_to`: that bundle re-attached, or None (nothing written) when it is not open."""
        session_id = waiter.session_id
        pending_id = new_id()
        new = asks.NewBundle(
            pending_id, ask.specs, ask.context, ask.signature, waiter.waiter_id, self.core.hub.instance_id
        )
        async with uow(self.core.deps, [session_id], hold_summary=True) as w:
            found = await self._context(w, waiter, ask, new)
            if found is None or isinstance(found, Decided):
                return found
            session = found.session
            # A new row needs a turn to belong to; asking may open the session's first turn.
            turn_id = await turn_for_new_rows(w, session, found.turn_id, WRITES[ask.kind])
            bundle: Bundle | None = None
            if found.reused is not None:
                pending_id = found.reused
                changed = await bundles.attach_waiter(
                    w.conn,
                    session_id=session_id,
                    pending_id=pending_id,
                    waiter_id=waiter.waiter_id,
                    waiter_instance=self.core.hub.instance_id,
                )
            else:
                bundle = await self._insert(w, waiter, found, new, turn_id)
                changed = [r.id for r in bundle.rows]
            waiter.pending_id = pending_id
            kind = EventKind.MESSAGE_ADDED if found.reused is None else EventKind.MESSAGE_UPDATED
            w.publish_messages(session.task_id, session_id, kind, changed, pending_id=pending_id)
            await self._set_waiting(w, session, reset=found.reused is not None)
            if bundle is None:
                bundle = await self.core.load(w.conn, pending_id)
        bundle = present(bundle, f"bundle {pending_id} just written")
        self.core.remember_session(pending_id, session_id)
        verb = "asked" if found.reused is None else "re-attached"
        return bundle, {
            "message": f"pending action {verb}",
            "event": "pending.asked" if found.reused is None else "pending.attached",
            "kind": bundle.kind.value,
            "pending_id": pending_id,
            "session_id": session_id,
            "turn_id": turn_id,
            "waiter_id": waiter.waiter_id,
        }

    async def _context(
        self, w: Work, waiter: Waiter, ask: Ask, new: asks.NewBundle
    ) -> _Context | Decided | None:
        """The session, its turn and an open bundle of the same signature; a rule's decision instead
        (nothing more to write); None when the bundle to wait on again is no longer open."""
        if ask.attach_to is not None:
            # Waiting again: never a new row, nor a rule's decision; only the open bundle itself.
            session, turn_id, reused = await asks.ask_context(w.conn, waiter.session_id, ask.signature)
            read = asks.AskContext(session, turn_id, reused)
            return _Context(read, reused) if reused == ask.attach_to else None
        # A new pending action tells people: when (its outbox rows may be written by the statement
        # that reads the context, and are written by the notifier otherwise).
        notifier = self.core.on_asked
        outbox = None if notifier is None else notifier.ask_outbox()
        # The common case (a live session with a turn, no identical bundle, no rule that may decide
        # it) may be written by the statement that reads the context; any other case is decided by
        # the caller.
        found = await asks.ask_context_inserting(
            w.conn, new, session_id=waiter.session_id, outbox=outbox, rules=ask.rules
        )
        if found.rules and ask.decided is not None:
            outcome = await ask.decided(w, found)
            if outcome is not None:
                return outcome
        return _Context(found, found.reusable, outbox)

    async def _insert(
        self, w: Work, waiter: Waiter, found: _Context, new: asks.NewBundle, turn_id: str
    ) -> Bundle:
        """A new bundle (unless the context's statement wrote it) and its notifications; returned as
        the re-read would find it: this process's live waiter's."""
        session = found.session
        pending_id = new.pending_id
        records = await asks.ensure_bundle(w.conn, found.read, new, turn_id=turn_id)
        notifier = self.core.on_asked
        if notifier is not None and found.outbox is not None:
            await notifier.asked(
                w, pending_id, session.task_id, session.id, found.outbox, found.read.outbox_rows
            )
        hub = self.core.hub
        return Bundle(
            pending_id=pending_id,
            task_id=session.task_id,
            session_id=session.id,
            turn_id=turn_id,
            session_state=SessionState.WAITING_FOR_INPUT.value,
            current_turn_id=turn_id,
            rows=tuple(BundleRow(r.id, r.session_id, r.turn_id, r.metadata, r.created_at) for r in records),
            waiter_alive=hub.alive(hub.instance_id, waiter.waiter_id, None),
        )

    async def _set_waiting(self, w: Work, session: SessionRecord, *, reset: bool) -> None:
        """The session waits for input now; `reset`: re-attaching, so no insert set it already."""
        if session.state == SessionState.WAITING_FOR_INPUT:
            w.touch(session.id, task_id=session.task_id)
            return
        if reset:
            await tasks.set_session_state(w.conn, session.id, SessionState.WAITING_FOR_INPUT.value, bump=True)
        w.publish(session.task_id, session.id, EventKind.SESSION_STATE)
        w.touch(session.id, task_id=session.task_id)

    # --- the wait -------------------------------------------------------------------------------

    async def _wait(self, waiter: Waiter, wait_seconds: float, delivered: list[Claim]) -> WaitOutcome:
        """The wait's outcome; a claim delivered to the agent is added to `delivered`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_seconds
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                # Not `wait_for`: on this Python it returns the item and swallows a cancellation that
                # lands as a notice arrives, so a disconnected agent would keep its waiter alive.
                async with asyncio.timeout(remaining):
                    notice = await waiter.queue.get()
            except TimeoutError:
                break
            if notice.kind == NoticeKind.HANDOFF and notice.claim is not None:
                confirmed = await self._confirm_or_wait_on(waiter, notice.claim, notice.reply_to)
                if confirmed is not None:
                    delivered.append(notice.claim)
                    return confirmed
                continue
            waiter.wake_queued = False
            ended = await self._ended_elsewhere(waiter)
            if ended is not None:
                waiter.finished = True
                return ended
        waiter.finished = True
        return await self._timed_out(waiter, delivered)

    async def _timed_out(self, waiter: Waiter, delivered: list[Claim]) -> WaitOutcome:
        """The wait ran out: a hand-off that landed meanwhile is delivered, else the rows detach."""
        pending_id = present(waiter.pending_id, "waiter's bundle")
        # A hand-off can land as the wait runs out (queued while the timed-out get was being
        # cancelled): its responder already holds a claim and waits on this waiter, so deliver it.
        for notice in _drain(waiter):
            claim = present(notice.claim, "hand-off claim")
            confirmed = await self._confirm(waiter, claim, notice.reply_to)
            if confirmed is not None:
                delivered.append(claim)
                return confirmed
        if not await self.core.bounded(self.detach(waiter, "timeout")):
            # Nothing was left to detach: something else ended the hold first. Only a question that
            # is still answerable detached; one a newer turn superseded, or a terminal one, closed.
            closed = _closed(pending_id, await self.core.bundle(pending_id, authorize=trusted))
            if closed is not None:
                return closed
        return Detached(pending_id)

    async def _ended_elsewhere(self, waiter: Waiter) -> WaitOutcome | None:
        """After a session event: has something else ended this waiter's hold on its bundle?"""
        pending_id = present(waiter.pending_id, "waiter's bundle")
        bundle = await self.core.bundle(pending_id, authorize=trusted)
        closed = _closed(pending_id, bundle)
        if closed is not None or bundle is None:
            return closed
        state = bundle.state
        if state == BundleState.DELIVERY_CLAIMED:
            return None  # a hand-off is on its way (or its responder will restore the claim)
        if state == BundleState.ACTIVE_LIVE and bundle.waiter_id == waiter.waiter_id:
            return None
        # Still answerable, but not by this waiter: detached by turn teardown, or taken over by a
        # newer waiter.
        log.info(
            "waiter released",
            extra={
                "event": "pending.waiter_detached",
                "kind": bundle.kind.value,
                "pending_id": pending_id,
                "state": state,
            },
        )
        return Detached(pending_id)

    # --- detach ---------------------------------------------------------------------------------

    async def detach(self, waiter: Waiter, reason: str) -> bool:
        """Detach this waiter's rows of its bundle; whether any were still attached to it."""
        pending_id = present(waiter.pending_id, "waiter's bundle")
        async with uow(self.core.deps, [waiter.session_id]) as w:
            changed = await bundles.detach(
                w.conn, waiter.session_id, pending_id=pending_id, waiter_id=waiter.waiter_id
            )
            if not changed:
                return False
            # Detaching changes no projection (the rows stay pending), so no sequence bump.
            session = await tasks.get_session(w.conn, waiter.session_id)
            w.publish_messages(
                session.task_id, session.id, EventKind.MESSAGE_UPDATED, [m for m, _ in changed]
            )
        log_detached(pending_id, reason)
        return True

    async def detach_session(self, session_id: str) -> int:
        """Turn teardown: detach every attached pending bundle of the session's current turn."""

        async def run() -> int:
            async with uow(self.core.deps, [session_id]) as w:
                changed = await bundles.detach(w.conn, session_id)
                session = await tasks.get_session(w.conn, session_id)
                w.publish_messages(
                    session.task_id, session_id, EventKind.MESSAGE_UPDATED, [m for m, _ in changed]
                )
            for pending_id in sorted({p for _, p in changed}):
                log_detached(pending_id, "teardown")
            return len(changed)

        return await self.core.bounded(run())

    # --- confirm --------------------------------------------------------------------------------

    async def _confirm_or_wait_on(
        self, waiter: Waiter, claim: Claim, reply_to: str | None
    ) -> WaitOutcome | None:
        """`_confirm`; but when the database is unreachable the agent keeps waiting: the responder is
        told the answer was not confirmed (its claim goes back once the database is back, still
        attached to this waiter), and the person's retry hands it over again."""
        try:
            return await self._confirm(waiter, claim, reply_to)
        except Exception as exc:
            if not is_outage(exc):
                raise
            log.warning(
                "confirmation failed: database unavailable",
                extra={
                    "event": "pending.confirm_unavailable",
                    "kind": claim.kind.value,
                    "claim_id": claim.claim_id,
                },
            )
            self.core.restorer.keep_attached(claim.claim_id)
            await self.core.hub.confirm(reply_to, claim.claim_id, False)
            return None

    async def _confirm(self, waiter: Waiter, claim: Claim, reply_to: str | None) -> WaitOutcome | None:
        """Durable confirmation BEFORE the agent sees the answer; None when a restore won the race."""
        await faults.hit("before_confirm")
        settled, work = await self.core.bounded(self.finalize(claim))
        if not settled:
            log.info(
                "confirmation lost to restore",
                extra={"event": "pending.confirm_lost", "kind": claim.kind.value, "claim_id": claim.claim_id},
            )
            return None
        waiter.finished = True
        if self.core.primary_answer_notifier is not None and not claim.rejected:
            self.core.primary_answer_notifier(claim)
        await self.core.hub.confirm(reply_to, claim.claim_id, True)
        await flush(self.core.deps, work)
        if claim.rejected:
            return Rejected(claim.pending_id, claim.answers)
        return Answered(claim.pending_id, claim.answers)

    async def finalize(self, claim: Claim) -> tuple[bool, Work]:
        """The confirmation's unit of work; its events wait until the responder was told. Whether
        it settled the claim (False: a restore won the race)."""
        deps = self.core.deps
        async with uow(deps, [claim.session_id], hold=True) as w:
            rows, resumed = await claims.settle_claim_and_resume(
                w.conn, claim.session_id, claim.message_ids, claim.claim_id
            )
            if resumed:
                # The claim already took the rows out of pending (and reconciled the summary); waiting
                # -> running and a settled intent leave the pending action as it is.
                w.touch(claim.session_id, task_id=claim.task_id, pending_action_kept=True)
            w.publish_messages(
                claim.task_id, claim.session_id, EventKind.MESSAGE_UPDATED, [r.id for r in rows]
            )
        return bool(rows), w


def log_detached(pending_id: str, reason: str) -> None:
    log.info(
        "pending action detached",
        extra={"event": "pending.detached", "pending_id": pending_id, "reason": reason},
    )


def _closed(pending_id: str, bundle: Bundle | None) -> Closed | None:
    """How a wait on a bundle that takes no answer any more ends, with the questions' status: gone
    (cancelled), terminal (its status), or superseded by a newer turn (still pending, as history).
    None while the bundle is answerable (live, detached) or its answer is being delivered."""
    if bundle is None:
        status = ClarificationStatus.CANCELLED.value
    elif bundle.state == BundleState.TERMINAL:
        statuses = Counter(r.status for r in bundle.rows if not r.is_pending)
        status = statuses.most_common(1)[0][0] if statuses else ClarificationStatus.EXPIRED.value
    elif bundle.state == BundleState.SUPERSEDED_HISTORY:
        status = ClarificationStatus.PENDING.value
    else:
        return None
    log.info(
        "waiter released",
        extra={"event": "pending.waiter_closed", "pending_id": pending_id, "status": status},
    )
    return Closed(pending_id, status)


async def final_outcome(
    stream: AsyncGenerator[WaitOutcome, None],
) -> tuple[WaitOutcome | None, Bundle | None]:
    """What an ask's stream ends with, for a caller that waits for the end (MCP tools): its outcome
    (None: it ended without one, as a wait on a bundle no longer open does) and the bundle it asked
    (None: decided at once, or nothing asked). The stream is closed however this ends."""
    bundle: Bundle | None = None
    try:
        async for outcome in stream:
            if isinstance(outcome, Asked):
                bundle = outcome.bundle
                continue
            return outcome, bundle
    finally:
        await stream.aclose()
    return None, bundle


def _drain(waiter: Waiter) -> list[Notice]:
    """The hand-offs still queued for a waiter that stops waiting (wakes are dropped)."""
    out = []
    while not waiter.queue.empty():
        notice = waiter.queue.get_nowait()
        if notice.kind == NoticeKind.HANDOFF and notice.claim is not None:
            out.append(notice)
    return out
