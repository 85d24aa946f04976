"""Clarification use cases: ask and wait (the live waiter), detach, confirm, cancel, workflow guard.

The bundle state comes from `domain.lifecycle.derive_state` over one locked read; responding (claim,
delivery, resume, restore) is `services/responding.py`, the shared reads `services/bundles.py`.
Writes that must outlive a cancelled request (detach, confirmation) run in a task of their own with
a finite deadline (`_bounded`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from backend import faults
from backend.db.engine import STORAGE_ERRORS
from backend.db.health import is_outage
from backend.domain.errors import CorruptData, InvalidInput, present
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
    bundle_signature,
    validate_questions,
)
from backend.domain.names import plain_name
from backend.domain.records import MessageRecord, TaskRecord
from backend.domain.states import MESSAGE_KIND_PERMISSION, ClarificationStatus, SessionState
from backend.repository import claims, tasks
from backend.repository import clarifications as repo
from backend.services.bundles import Authorize, trusted
from backend.services.responding import Responding
from backend.services.restorer import Restorer
from backend.services.session_turn import turn_for_new_rows
from backend.services.uow import Work, flush, one_message, uow
from backend.services.waiters import Notice, NoticeKind, Waiter

log = logging.getLogger("turnwise.clarification")
T = TypeVar("T")
MAX_STEP = 200


@dataclass(frozen=True, slots=True)
class TaskAdvanced:
    task: TaskRecord


@dataclass(frozen=True, slots=True)
class TaskAdvanceBlocked:
    task_id: str
    reason: str
    session_id: str | None


@dataclass
class Clarifications(Responding):
    """The pending-action lifecycle, whole: what `Responding` and `PendingActionsBase` hold, and the
    waiter's side (ask, wait, detach, confirm), cancel and the workflow guard."""

    def __post_init__(self) -> None:
        self.restorer = Restorer(self.deps.db, self._restore_later)

    # --- ask and wait ---------------------------------------------------------------------------

    def wait_seconds(self, timeout_seconds: float | None) -> float:
        limit = self.deps.settings.max_wait_seconds
        if timeout_seconds is None:
            return limit
        if not timeout_seconds > 0:
            raise InvalidInput("timeoutSeconds", "must be greater than 0")
        return min(float(timeout_seconds), limit)

    def ask(
        self,
        session_id: str,
        questions: Sequence[dict[str, Any]],
        context: str | None,
        timeout_seconds: float | None = None,
    ) -> AsyncGenerator[WaitOutcome, None]:
        """Yields `Asked`, then exactly one of Answered / Rejected / Detached / Closed. Invalid
        questions raise InvalidInput here, before anything is written."""
        specs = validate_questions(questions, context)
        wait_seconds = self.wait_seconds(timeout_seconds)
        return self.ask_specs(session_id, specs, context, bundle_signature(specs, context), wait_seconds)

    async def ask_specs(
        self,
        session_id: str,
        specs: Sequence[Spec],
        context: str | None,
        signature: str,
        wait_seconds: float,
        *,
        decided: Callable[[Work], Awaitable[Decided | None]] | None = None,
        attach_to: str | None = None,
    ) -> AsyncGenerator[WaitOutcome, None]:
        """The ask of every kind of pending action (validated specs: questions, or one permission
        request): yields `Asked`, then exactly one of Answered / Rejected / Detached / Closed.
        `decided`: what may decide the action as it is asked (a remembered rule), first in the ask's
        own unit of work; when it does, the ask yields only its `Decided` and waits for nobody.
        `attach_to`: only wait again on that open bundle (`wait_again`); the ask writes no row and
        yields nothing when the bundle is no longer open."""
        # Registered before the write, so a hand-off for the new bundle always finds its waiter.
        waiter = self.hub.register(session_id)
        asked: dict[str, Any] | None = None
        delivered: list[Claim] = []
        try:
            made = await self._create_or_attach(waiter, specs, context, signature, decided, attach_to)
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
            yield await self._wait(waiter, wait_seconds, delivered)
        finally:
            if asked is not None:  # the agent went away right after it was sent `Asked`
                log.info(asked.pop("message"), extra=asked)
            for claim in delivered:
                log.info(
                    "clarification delivered",
                    extra={
                        "event": "clarification.delivered",
                        "pending_id": claim.pending_id,
                        "claim_id": claim.claim_id,
                        "rejected": claim.rejected,
                    },
                )
            self.hub.unregister(waiter)
            # A hand-off nobody will confirm now: refuse it at once, so its responder restores the
            # claim instead of waiting out the live confirmation bound.
            for notice in _drain(waiter):
                claim = present(notice.claim, "hand-off claim")
                await self._bounded(self.hub.confirm(notice.reply_to, claim.claim_id, False))
            if not waiter.finished and waiter.pending_id is not None:
                # Client disconnect: detach in a context the cancelled request cannot abort.
                waiter.finished = True
                await self._bounded(self._detach(waiter, "disconnect"))

    async def wait_again(self, bundle: Bundle, wait_seconds: float) -> WaitOutcome | None:
        """The agent waits again on a request it asked earlier (MCP `wait_for_answer`), of either
        kind: its waiter re-attaches to that very bundle and waits as the ask did. Never a new row,
        nor a remembered rule's decision (rules decide requests as they are asked). None, having
        written nothing, when the bundle is no longer open to wait on (read it again)."""
        signature = bundle.rows[0].metadata.get("bundle_signature") if bundle.rows else None
        if not isinstance(signature, str) or not signature:
            return None  # a legacy bundle that no ask can name: not re-attachable
        stream = self.ask_specs(
            bundle.session_id, (), bundle.context, signature, wait_seconds, attach_to=bundle.pending_id
        )
        outcome, _ = await final_outcome(stream)
        return outcome

    async def _create_or_attach(
        self,
        waiter: Waiter,
        specs: Sequence[Spec],
        context: str | None,
        signature: str,
        decided: Callable[[Work], Awaitable[Decided | None]] | None = None,
        attach_to: str | None = None,
    ) -> tuple[Bundle, dict[str, Any]] | Decided | None:
        """The bundle asked (or re-attached to), and its log line (the message and its fields).
        With `attach_to`: that bundle re-attached, or None (nothing written) when it is not open."""
        session_id = waiter.session_id
        async with uow(self.deps, [session_id], hold_summary=True) as w:
            conn = w.conn
            pending_id = new_id()
            inserted: list[MessageRecord] | None = None
            # A new pending action tells people: when (its outbox rows may be written by the
            # statement that reads the context, and are written below otherwise).
            notifier = self.on_asked
            outbox = None if notifier is None or attach_to is not None else notifier.ask_outbox()
            written: int | None = None
            if attach_to is not None:
                # Waiting again: never a new row, nor a rule's decision; only the open bundle itself.
                session, turn_id, reused = await repo.ask_context(conn, session_id, signature)
                if reused != attach_to:
                    return None
            else:
                if decided is not None:
                    outcome = await decided(w)
                    if outcome is not None:
                        return outcome
                # The common case (a live session with a turn, no identical bundle) may be written
                # by the statement that reads the context; any other case is decided below.
                found = await repo.ask_context_inserting(
                    conn,
                    session_id=session_id,
                    pending_id=pending_id,
                    questions=specs,
                    context=context,
                    signature=signature,
                    waiter_id=waiter.waiter_id,
                    waiter_instance=self.hub.instance_id,
                    outbox=outbox,
                )
                session, turn_id, reused, inserted, written = (
                    found.session,
                    found.turn_id,
                    found.reusable,
                    found.inserted,
                    found.outbox_rows,
                )
            # A new row needs a turn to belong to; asking may open the session's first turn.
            turn_id = await turn_for_new_rows(w, session, turn_id, _what(specs))
            bundle: Bundle | None = None
            waiting = SessionState.WAITING_FOR_INPUT.value
            if reused is not None:
                pending_id = reused
                changed = await repo.attach_waiter(
                    conn,
                    session_id=session_id,
                    pending_id=pending_id,
                    waiter_id=waiter.waiter_id,
                    waiter_instance=self.hub.instance_id,
                )
            else:
                records = inserted or await repo.insert_bundle(
                    conn,
                    session_id=session_id,
                    turn_id=turn_id,
                    pending_id=pending_id,
                    questions=specs,
                    context=context,
                    signature=signature,
                    waiter_id=waiter.waiter_id,
                    waiter_instance=self.hub.instance_id,
                    state=None if session.state == SessionState.WAITING_FOR_INPUT else waiting,
                )
                changed = [r.id for r in records]
                if notifier is not None and outbox is not None:
                    await notifier.asked(w, pending_id, session.task_id, session_id, outbox, written)
                # What was just written, as the re-read would find it: this process's live waiter.
                bundle = Bundle(
                    pending_id=pending_id,
                    task_id=session.task_id,
                    session_id=session_id,
                    turn_id=turn_id,
                    session_state=SessionState.WAITING_FOR_INPUT.value,
                    current_turn_id=turn_id,
                    rows=tuple(BundleRow(r.id, r.session_id, r.turn_id, r.metadata) for r in records),
                    waiter_alive=self.hub.alive(self.hub.instance_id, waiter.waiter_id, None),
                )
            waiter.pending_id = pending_id
            w.publish_messages(
                session.task_id,
                session_id,
                "message.added" if reused is None else "message.updated",
                changed,
                pending_id=pending_id,
            )
            if session.state != SessionState.WAITING_FOR_INPUT:
                if reused is not None:  # a new bundle's insert already set it
                    await tasks.set_session_state(conn, session_id, waiting, bump=True)
                w.publish(session.task_id, session_id, "session.state")
                w.touched_and_bumped(session_id, task_id=session.task_id)
            else:
                w.touch(session_id, task_id=session.task_id)
            if bundle is None:
                bundle = await self._load(conn, pending_id)
        bundle = present(bundle, f"bundle {pending_id} just written")
        self.remember_session(pending_id, session_id)
        return bundle, {
            "message": f"{bundle.kind.value} asked" if reused is None else f"{bundle.kind.value} re-attached",
            "event": "clarification.asked" if reused is None else "clarification.attached",
            "kind": bundle.kind.value,
            "pending_id": pending_id,
            "session_id": session_id,
            "turn_id": turn_id,
            "waiter_id": waiter.waiter_id,
        }

    async def _wait(self, waiter: Waiter, wait_seconds: float, delivered: list[Claim]) -> WaitOutcome:
        """The wait's outcome; a claim delivered to the agent is added to `delivered`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_seconds
        pending_id = present(waiter.pending_id, "waiter's bundle")
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
        # A hand-off can land as the wait runs out (queued while the timed-out get was being
        # cancelled): its responder already holds a claim and waits on this waiter, so deliver it.
        for notice in _drain(waiter):
            claim = present(notice.claim, "hand-off claim")
            confirmed = await self._confirm(waiter, claim, notice.reply_to)
            if confirmed is not None:
                delivered.append(claim)
                return confirmed
        if not await self._bounded(self._detach(waiter, "timeout")):
            # Nothing was left to detach: something else ended the hold first. Only a question that
            # is still answerable detached; one a newer turn superseded, or a terminal one, closed.
            closed = _closed(pending_id, await self.bundle(pending_id, authorize=trusted))
            if closed is not None:
                return closed
        return Detached(pending_id)

    async def _ended_elsewhere(self, waiter: Waiter) -> WaitOutcome | None:
        """After a session event: has something else ended this waiter's hold on its bundle?"""
        pending_id = present(waiter.pending_id, "waiter's bundle")
        bundle = await self.bundle(pending_id, authorize=trusted)
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
            extra={"event": "clarification.waiter_detached", "pending_id": pending_id, "state": state},
        )
        return Detached(pending_id)

    async def _detach(self, waiter: Waiter, reason: str) -> bool:
        """Detach this waiter's rows of its bundle; whether any were still attached to it."""
        pending_id = present(waiter.pending_id, "waiter's bundle")
        async with uow(self.deps, [waiter.session_id]) as w:
            changed = await repo.detach(
                w.conn, waiter.session_id, pending_id=pending_id, waiter_id=waiter.waiter_id
            )
            if not changed:
                return False
            # Detaching changes no projection (the rows stay pending), so no sequence bump.
            session = await tasks.get_session(w.conn, waiter.session_id)
            w.publish_messages(session.task_id, session.id, "message.updated", [m for m, _ in changed])
        log.info(
            "clarification detached",
            extra={"event": "clarification.detached", "pending_id": waiter.pending_id, "reason": reason},
        )
        return True

    async def detach_session(self, session_id: str) -> int:
        """Turn teardown: detach every attached pending bundle of the session's current turn."""

        async def run() -> int:
            async with uow(self.deps, [session_id]) as w:
                changed = await repo.detach(w.conn, session_id)
                session = await tasks.get_session(w.conn, session_id)
                w.publish_messages(session.task_id, session_id, "message.updated", [m for m, _ in changed])
            for pending_id in sorted({p for _, p in changed}):
                log.info(
                    "clarification detached",
                    extra={"event": "clarification.detached", "pending_id": pending_id, "reason": "teardown"},
                )
            return len(changed)

        return await self._bounded(run())

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
                extra={"event": "clarification.confirm_unavailable", "claim_id": claim.claim_id},
            )
            self.restorer.keep_attached(claim.claim_id)
            await self.hub.confirm(reply_to, claim.claim_id, False)
            return None

    async def _confirm(self, waiter: Waiter, claim: Claim, reply_to: str | None) -> WaitOutcome | None:
        """Durable confirmation BEFORE the agent sees the answer; None when a restore won the race."""
        await faults.hit("before_confirm")
        settled, work = await self._bounded(self._finalize(claim))
        if not settled:
            log.info(
                "confirmation lost to restore",
                extra={"event": "clarification.confirm_lost", "claim_id": claim.claim_id},
            )
            return None
        waiter.finished = True
        if self.primary_answer_notifier is not None and not claim.rejected:
            self.primary_answer_notifier(claim)
        await self.hub.confirm(reply_to, claim.claim_id, True)
        await flush(self.deps, work)
        if claim.rejected:
            return Rejected(claim.pending_id, claim.answers)
        return Answered(claim.pending_id, claim.answers)

    async def _finalize(self, claim: Claim) -> tuple[bool, Work]:
        """The confirmation's unit of work; its events wait until the responder was told. Whether
        it settled the claim (False: a restore won the race)."""
        if len(claim.message_ids) == 1:
            # The lock and the settling write as one transaction of their own, in one round trip.
            message_id = claim.message_ids[0]
            done = await one_message(
                self.deps,
                lambda conn: claims.confirm_alone(conn, claim.session_id, message_id, claim.claim_id),
            )
            if done is not None:
                (settled, resumed), work = done
                if settled:
                    work.publish_messages(
                        claim.task_id, claim.session_id, "message.updated", claim.message_ids
                    )
                # Resuming (waiting -> running, the claim having taken the rows out of pending) keeps
                # the task's pending action: its summary is as current as before.
                work.projected = resumed
                return settled, work
        async with uow(self.deps, [claim.session_id], hold=True) as w:
            rows, resumed = await claims.settle_claim_and_resume(
                w.conn, claim.session_id, claim.message_ids, claim.claim_id
            )
            if resumed:
                # The claim already took the rows out of pending (and reconciled the summary); waiting
                # -> running and a settled intent leave the pending action as it is.
                w.touched_and_bumped(claim.session_id, task_id=claim.task_id, pending_action_kept=True)
            w.publish_messages(claim.task_id, claim.session_id, "message.updated", [r.id for r in rows])
        return bool(rows), w

    # --- cancel ---------------------------------------------------------------------------------

    async def cancel(self, pending_id: str, *, authorize: Authorize) -> bool:
        """Cancel a request still owned by a live waiter; False for anything else (nothing written)."""
        async with uow(self.deps) as w:
            conn = w.conn
            session_id = await repo.session_of_bundle(conn, pending_id)
            if session_id is None:
                return False
            await w.lock([session_id])
            bundle = await self._load(conn, pending_id)
            if bundle is None:
                return False
            authorize(bundle.task_id, bundle.session_id)
            if bundle.state != BundleState.ACTIVE_LIVE:
                return False
            changed = await repo.close_pending(conn, session_id, pending_id, ClarificationStatus.CANCELLED)
            if changed:
                await tasks.mark_running_when_unblocked(conn, session_id)
                w.touch(session_id)
                w.publish_messages(bundle.task_id, session_id, "message.updated", changed)
        if not changed:
            return False
        log.info(
            "clarification cancelled", extra={"event": "clarification.cancelled", "pending_id": pending_id}
        )
        return True

    # --- workflow guard -------------------------------------------------------------------------

    async def advance_task(
        self, task_id: str, to_step: str, *, authorize: Authorize
    ) -> TaskAdvanced | TaskAdvanceBlocked:
        step = plain_name("toStep", to_step).strip()
        if not step or len(step) > MAX_STEP:
            raise InvalidInput("toStep", f"must be 1-{MAX_STEP} characters")
        async with uow(self.deps) as w:
            conn = w.conn
            await tasks.get_task(conn, task_id)
            authorize(task_id, None)
            sessions = await tasks.list_sessions(conn, [task_id])
            await w.lock([s.id for s in sessions])
            try:
                faults.check("workflow_guard_read")
                blocking = await repo.sessions_with_active_bundles(conn, task_id)
            except (*STORAGE_ERRORS, CorruptData):  # not a programming error: those propagate
                # Fail closed: an unreadable pending state never lets the workflow move on.
                log.exception(
                    "workflow guard read failed", extra={"event": "workflow.guard_failed", "task_id": task_id}
                )
                return TaskAdvanceBlocked(task_id, "pending clarification state could not be read", None)
            if blocking:
                return TaskAdvanceBlocked(
                    task_id, "a session of the task has an active clarification", blocking[0]
                )
            task = await tasks.set_workflow_step(conn, task_id, step)
        log.info("task advanced", extra={"event": "workflow.advanced", "task_id": task_id, "step": step})
        return TaskAdvanced(task)


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
        extra={"event": "clarification.waiter_closed", "pending_id": pending_id, "status": status},
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


def _what(specs: Sequence[Spec]) -> str:
    """What an ask of these specs writes, as a refusal names it."""
    if specs and specs[0].message_type == MESSAGE_KIND_PERMISSION:
        return "permission requests"
    return "questions"


def _drain(waiter: Waiter) -> list[Notice]:
    """The hand-offs still queued for a waiter that stops waiting (wakes are dropped)."""
    out = []
    while not waiter.queue.empty():
        notice = waiter.queue.get_nowait()
        if notice.kind == NoticeKind.HANDOFF and notice.claim is not None:
            out.append(notice)
    return out
