"""Clarification use cases: ask and wait (the live waiter), detach, respond, cancel, workflow guard.

The bundle state comes from `domain.lifecycle.derive_state` over one locked read; respond follows the
decision table `domain.lifecycle.RESPOND_RULES`. Writes that must outlive a cancelled request
(detach, confirmation, restore) run in a task of their own with a finite deadline (`_bounded`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from backend import faults
from backend.db.engine import STORAGE_ERRORS
from backend.db.health import is_outage
from backend.domain.errors import BrokenInvariant, CorruptData, InvalidInput, InvalidState, NotFound, present
from backend.domain.ids import new_id
from backend.domain.lifecycle import (
    CLAIM_KEY,
    INTENT_KEY,
    Answer,
    Answered,
    Asked,
    Bundle,
    BundleRow,
    BundleState,
    Claim,
    Closed,
    Conflict,
    ConflictReason,
    DeliveryFailed,
    Detached,
    Rejected,
    RespondAction,
    Responded,
    RespondOutcome,
    WaitOutcome,
    bundle_signature,
    bundle_turn,
    decide_response,
    validate_answers,
    validate_questions,
)
from backend.domain.names import plain_name
from backend.domain.records import MessageRecord, TaskRecord
from backend.domain.states import TERMINAL_SESSION_STATES, ClarificationStatus, SessionState
from backend.repository import clarifications as repo
from backend.repository import instances, tasks, turns
from backend.services.bounded import bounded
from backend.services.context import Deps
from backend.services.events_out import publish_session_change
from backend.services.restorer import UNAVAILABLE_LATER, UNAVAILABLE_RETRY, Restorer
from backend.services.resume import NotWiredResumer, Resumer
from backend.services.uow import Work, flush, uow
from backend.services.waiters import Notice, NoticeKind, Waiter, WaiterHub

log = logging.getLogger("turnwise.clarification")

T = TypeVar("T")
# Raises (NotFound, Forbidden) unless the caller may act on the bundle or task: called with the task
# id and, where one is concerned, the session id. Every entry point requires one; there is no default.
Authorize = Callable[[str, str | None], None]
MAX_STEP = 200


def trusted(_task_id: str, _session_id: str | None) -> None:
    """The authorizer of in-process callers acting for the system itself (never the API's)."""


@dataclass(frozen=True, slots=True)
class TaskAdvanced:
    task: TaskRecord


@dataclass(frozen=True, slots=True)
class TaskAdvanceBlocked:
    task_id: str
    reason: str
    session_id: str | None


@dataclass
class Clarifications:
    deps: Deps
    hub: WaiterHub
    resumer: Resumer = field(default_factory=NotWiredResumer)
    # Called after a restore so retryability is reported only once task summaries converged.
    refresh_summaries: Callable[[list[str]], Awaitable[Any]] | None = None
    # The primary-answer watchdog's synchronous notifier: called inside the finalized confirmation
    # boundary, before the answer is returned to the agent, so the agent cannot act before it is armed.
    primary_answer_notifier: Callable[[Claim], None] | None = None
    _background: set[asyncio.Task[Any]] = field(default_factory=set)
    # pending id -> session, for bundles this process asked or answered: a bundle never changes
    # session, so a respond to one of them locks its session without first looking it up.
    _session_of: dict[str, str] = field(default_factory=dict)
    session_memory: int = 10_000
    restorer: Restorer = field(init=False)

    def __post_init__(self) -> None:
        self.restorer = Restorer(self.deps.db, self._restore_later)

    # --- helpers --------------------------------------------------------------------------------

    def _remember_session(self, pending_id: str, session_id: str) -> None:
        memory = self._session_of
        if pending_id not in memory:
            if len(memory) >= self.session_memory:
                del memory[next(iter(memory))]  # the oldest first
            memory[pending_id] = session_id

    async def _bounded(self, work: Awaitable[T], seconds: float | None = None) -> T:
        """Run `work` in its own task with a deadline; a cancelled caller does not cancel it."""
        limit = self.deps.settings.persistence_seconds if seconds is None else seconds
        return await bounded(self._background, work, limit)

    async def _publish(
        self, task_id: str, session_id: str, kind: str, message_ids: Sequence[str], *, strict: bool = False
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

    async def _load(self, conn: AsyncConnection, pending_id: str) -> Bundle | None:
        facts = (await repo.bundle_facts(conn, [pending_id])).get(pending_id)
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
        bundle = Bundle(
            pending_id=pending_id,
            task_id=task_id,
            session_id=rows[0].session_id,
            turn_id=bundle_turn(rows),
            session_state=session_state,
            current_turn_id=current_turn,
            rows=tuple(rows),
        )
        instance = bundle.waiter_instance
        heartbeat = None
        if self.hub.needs_heartbeat(instance):
            known = present(instance, "waiter instance")
            heartbeat = (await instances.heartbeats(conn, [known])).get(known)
        alive = self.hub.alive(instance, bundle.waiter_id, heartbeat)
        return replace(bundle, waiter_alive=alive) if alive else bundle

    async def bundle(self, pending_id: str, *, authorize: Authorize) -> Bundle | None:
        async with self.deps.db.read() as conn:
            bundle = await self._load(conn, pending_id)
        if bundle is not None:
            authorize(bundle.task_id, bundle.session_id)
        return bundle

    async def active_bundles(self, session_ids: Sequence[str]) -> dict[str, Bundle]:
        """session_id -> its newest active bundle; two statements for the whole batch."""
        async with self.deps.db.read() as conn:
            by_session = await repo.active_pending_ids_for_sessions(conn, session_ids)
            wanted = [ids[0] for ids in by_session.values()]
            facts = await repo.bundle_facts(conn, wanted)
            out: dict[str, Bundle] = {}
            for session_id, ids in by_session.items():
                if ids[0] in facts:
                    out[session_id] = await self._bundle(conn, ids[0], *facts[ids[0]])
        return out

    # --- ask and wait ---------------------------------------------------------------------------

    def wait_seconds(self, timeout_seconds: float | None) -> float:
        limit = self.deps.settings.max_wait_seconds
        if timeout_seconds is None:
            return limit
        if not timeout_seconds > 0:
            raise InvalidInput("timeoutSeconds", "must be greater than 0")
        return min(float(timeout_seconds), limit)

    async def ask(
        self,
        session_id: str,
        questions: Sequence[dict[str, Any]],
        context: str | None,
        timeout_seconds: float | None = None,
    ) -> AsyncGenerator[WaitOutcome, None]:
        """Yields `Asked`, then exactly one of Answered / Rejected / Detached / Closed."""
        specs = validate_questions(questions, context)
        timeout = self.wait_seconds(timeout_seconds)
        signature = bundle_signature(specs, context)
        # Registered before the write, so a hand-off for the new bundle always finds its waiter.
        waiter = self.hub.register(session_id)
        asked: dict[str, Any] | None = None
        delivered: list[Claim] = []
        try:
            bundle, asked = await self._create_or_attach(waiter, specs, context, signature)
            yield Asked(bundle)
            # Logged once the agent was sent the outcome (the generator resumes after the send), so a
            # log line never delays it; likewise "delivered" below.
            log.info(asked.pop("message"), extra=asked)
            asked = None
            yield await self._wait(waiter, timeout, delivered)
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

    async def _create_or_attach(
        self, waiter: Waiter, specs: Any, context: str | None, signature: str
    ) -> tuple[Bundle, dict[str, Any]]:
        """The bundle asked (or re-attached to), and its log line (the message and its fields)."""
        session_id = waiter.session_id
        async with uow(self.deps, [session_id], hold_summary=True) as w:
            conn = w.conn
            pending_id = new_id()
            inserted: list[MessageRecord] | None = None
            if len(specs) == 1 and conn.dialect.name == "postgresql":
                # The common case (a live session with a turn, no identical bundle) is written by the
                # statement that reads the context; any other case is decided below, as it finds it.
                found = await repo.ask_and_insert(
                    conn,
                    session_id=session_id,
                    pending_id=pending_id,
                    question=specs[0],
                    context=context,
                    signature=signature,
                    waiter_id=waiter.waiter_id,
                    waiter_instance=self.hub.instance_id,
                )
                session, turn_id, reused, inserted = (
                    found.session,
                    found.turn_id,
                    found.reusable,
                    found.inserted,
                )
            else:
                session, turn_id, reused = await repo.ask_context(conn, session_id, signature)
            if session.state in TERMINAL_SESSION_STATES:
                raise InvalidState(f"session {session_id!r} is {session.state}; it takes no new questions")
            if turn_id is None:
                # A question needs a turn to belong to; asking opens the session's first turn.
                turn_id = (await turns.insert_turn(conn, session_id)).id
                w.publish(session.task_id, session_id, "turn.started", turn_id=turn_id)
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
                session.task_id, session_id, "message.added" if reused is None else "message.updated", changed
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
        self._remember_session(pending_id, session_id)
        return bundle, {
            "message": "clarification asked" if reused is None else "clarification re-attached",
            "event": "clarification.asked" if reused is None else "clarification.attached",
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
            return Rejected(claim.pending_id)
        return Answered(claim.pending_id, claim.answers)

    async def _finalize(self, claim: Claim) -> tuple[bool, Work]:
        """The confirmation's unit of work; its events wait until the responder was told. Whether
        it settled the claim (False: a restore won the race)."""
        if len(claim.message_ids) == 1 and self.deps.db.sends_messages:
            # The lock and the settling write as one transaction of their own, in one round trip.
            async with self.deps.db.alone() as conn:
                done = await repo.confirm_alone(conn, claim.session_id, claim.message_ids[0], claim.claim_id)
            if done is not None:
                settled, resumed = done
                work = Work(conn)
                if settled:
                    work.publish_messages(
                        claim.task_id, claim.session_id, "message.updated", claim.message_ids
                    )
                # Resuming (waiting -> running, the claim having taken the rows out of pending) keeps
                # the task's pending action: its summary is as current as before.
                work.projected = resumed
                return settled, work
        async with uow(self.deps, [claim.session_id], hold=True) as w:
            rows, resumed = await repo.settle_claim_and_resume(
                w.conn, claim.session_id, claim.message_ids, claim.claim_id
            )
            if resumed:
                # The claim already took the rows out of pending (and reconciled the summary); waiting
                # -> running and a settled intent leave the pending action as it is.
                w.touched_and_bumped(claim.session_id, task_id=claim.task_id, pending_action_kept=True)
            w.publish_messages(claim.task_id, claim.session_id, "message.updated", [r.id for r in rows])
        return bool(rows), w

    # --- respond --------------------------------------------------------------------------------

    async def respond(
        self,
        pending_id: str,
        answers: Sequence[Answer],
        *,
        rejected: bool,
        authorize: Authorize,
    ) -> RespondOutcome:
        attempt: list[Claim] = []  # the claim this respond wrote, should its COMMIT's reply be lost
        try:
            return await self._respond(
                pending_id, answers, rejected=rejected, authorize=authorize, attempt=attempt
            )
        except Exception as exc:
            if not is_outage(exc):
                raise
            log.warning(
                "respond failed: database unavailable",
                extra={"event": "clarification.respond_unavailable", "pending_id": pending_id},
            )
            for claim in attempt:
                self.restorer.later(claim)
            return DeliveryFailed(pending_id, True, UNAVAILABLE_RETRY)

    async def _respond(
        self,
        pending_id: str,
        answers: Sequence[Answer],
        *,
        rejected: bool,
        authorize: Authorize,
        attempt: list[Claim],
    ) -> RespondOutcome:
        known = self._session_of.get(pending_id)
        async with uow(self.deps, [known] if known else [], hold=True, hold_summary=known is not None) as w:
            conn = w.conn
            if known is not None:
                session_id: str | None = known
            else:
                session_id, locked = await repo.lock_session_of_bundle(conn, pending_id)
                if session_id is None:
                    raise NotFound("clarification", pending_id)
                if locked:
                    w.locked_by_read(session_id)
                    w.summary_held(session_id)
                else:
                    await w.lock([session_id])
            bundle = await self._load(conn, pending_id)
            if bundle is None:
                raise NotFound("clarification", pending_id)
            if bundle.session_id != session_id:
                raise BrokenInvariant(f"bundle {pending_id} moved from session {session_id}")
            self._remember_session(pending_id, bundle.session_id)
            authorize(bundle.task_id, bundle.session_id)
            decision = decide_response(bundle.state, rejected=rejected)
            if decision.action == RespondAction.CONFLICT:
                return Conflict(pending_id, present(decision.conflict, "conflict reason"), bundle)
            valid = validate_answers(bundle, answers, rejected=rejected)
            live = decision.action == RespondAction.DELIVER_LIVE
            claim_id = None if decision.action == RespondAction.PERSIST_REJECTION else new_id()
            if claim_id is not None and bundle.turn_id is not None:
                attempt.append(
                    Claim(
                        claim_id=claim_id,
                        pending_id=pending_id,
                        session_id=session_id,
                        task_id=bundle.task_id,
                        turn_id=bundle.turn_id,
                        message_ids=tuple(r.id for r in bundle.pending_rows),
                        answers=(),
                        rejected=rejected,
                    )
                )
            claimed, bumped = await repo.claim_bumping(
                conn,
                session_id=session_id,
                pending_id=pending_id,
                message_ids=[r.id for r in bundle.pending_rows],
                answers=valid,
                rejected=rejected,
                claim_id=claim_id,
                detach_rows=not live,
                bump=True,
            )
            if not claimed:  # cannot happen under the lock; kept so a lost claim is never a success
                return Conflict(pending_id, ConflictReason.DELIVERY_CLAIMED, bundle)
            if claim_id is None:
                # A persisted rejection is final at once: the session no longer waits for it.
                await tasks.mark_running_when_unblocked(conn, session_id)
                w.publish_messages(bundle.task_id, session_id, "message.updated", [r.id for r in claimed])
            if bumped:  # the claim's own statement bumped the session's sequence
                w.touched_and_bumped(session_id, task_id=bundle.task_id)
            else:
                w.touch(session_id, task_id=bundle.task_id)
        attempt.clear()  # committed: from here on, delivery restores the claim on failure
        after = _merge(bundle, claimed)
        # A live claim is followed by "clarification delivered" (or a warning and its restore): the
        # claim itself is detail. A resume or a persisted rejection is logged here.
        log.log(
            logging.DEBUG if live else logging.INFO,
            "clarification claimed",
            extra={
                "event": "clarification.claimed",
                "pending_id": pending_id,
                "claim_id": claim_id,
                "action": decision.action.value,
                "messages": len(claimed),
            },
        )
        # Publishes the task summaries the claim wrote (a claimed bundle no longer waits for input);
        # a delivered claim queued no message event: those follow only once delivery succeeded.
        await flush(self.deps, w)
        if claim_id is None:
            return Responded(after, resumed=False)
        turn_id = present(bundle.turn_id, f"turn of bundle {pending_id}")
        claim = Claim(
            claim_id=claim_id,
            pending_id=pending_id,
            session_id=session_id,
            task_id=bundle.task_id,
            turn_id=turn_id,
            message_ids=tuple(r.id for r in claimed),
            answers=tuple(valid[q] for q in sorted(valid)),
            rejected=rejected,
        )
        await faults.hit("after_claim")
        if live:
            return await self._bounded(
                self._deliver_live(claim, bundle, after),
                self.deps.settings.live_confirmation_seconds + 2 * self.deps.settings.persistence_seconds,
            )
        return await self._bounded(
            self._resume(claim, after),
            self.deps.settings.dispatch_seconds + 2 * self.deps.settings.persistence_seconds,
        )

    async def _deliver_live(self, claim: Claim, bundle: Bundle, after: Bundle) -> RespondOutcome:
        instance = present(bundle.waiter_instance, "live waiter's instance")
        waiter_id = present(bundle.waiter_id, "live waiter")
        async with self.hub.expect_confirmation(claim.claim_id) as confirmation:
            try:
                await self.hub.hand_off(instance, waiter_id, claim)
                confirmed = await self._await_confirmation(confirmation, instance)
            except Exception:
                log.warning(
                    "live delivery not confirmed",
                    extra={"event": "clarification.delivery_unconfirmed", "claim_id": claim.claim_id},
                    exc_info=True,
                )
                confirmed = False
        if confirmed:
            return Responded(_finalized(after, claim), resumed=False)
        return await self._recover_claim(claim, after, "the agent did not confirm the answer")

    async def _resume(self, claim: Claim, after: Bundle) -> RespondOutcome:
        try:
            outcome = await self.resumer.resume(claim)
        except Exception:
            log.exception(
                "resume failed", extra={"event": "clarification.resume_failed", "claim_id": claim.claim_id}
            )
            return await self._recover_claim(claim, after, "the agent could not be resumed")
        if outcome.accepted:
            log.info(
                "clarification resumed", extra={"event": "clarification.resumed", "claim_id": claim.claim_id}
            )
            await self._publish(claim.task_id, claim.session_id, "message.updated", claim.message_ids)
            return Responded(_finalized(after, claim), resumed=not outcome.queued, queued=outcome.queued)
        if outcome.retryable:
            return await self._recover_claim(
                claim, after, outcome.message or "the agent could not be resumed"
            )
        await self._publish(claim.task_id, claim.session_id, "message.updated", claim.message_ids)
        return DeliveryFailed(
            claim.pending_id, False, outcome.message or "the answer may have reached the agent"
        )

    async def _await_confirmation(self, confirmation: asyncio.Future[bool], instance_id: str) -> bool:
        """Wait for the waiter's verdict, at most the live-confirmation bound; but when the waiter
        lives in another process whose heartbeat goes stale (it crashed), stop waiting at once so
        the claim is restored instead of hanging the person who answered."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.deps.settings.live_confirmation_seconds
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError
            try:
                return await asyncio.wait_for(
                    asyncio.shield(confirmation), min(remaining, self.deps.settings.heartbeat_seconds)
                )
            except TimeoutError:
                if not self.hub.needs_heartbeat(instance_id):
                    continue
            async with self.deps.db.read() as conn:
                beats = await instances.heartbeats(conn, [instance_id])
            if not self.hub.heartbeat_fresh(beats.get(instance_id)):
                log.warning(
                    "waiter process gone before confirming",
                    extra={"event": "clarification.waiter_gone", "instance_id": instance_id},
                )
                return False

    async def _restore_or_retire(
        self, claim: Claim, *, detach_rows: bool
    ) -> tuple[list[str], list[BundleRow], Work]:
        """Restore exactly this claim while still current; otherwise settle it. Exactly one of the
        waiter's finalize and this restore wins (both require the claim's intent, under the lock)."""
        async with uow(self.deps, [claim.session_id], hold=True) as w:
            restored = await repo.restore_claim(
                w.conn, claim.session_id, claim.message_ids, claim.claim_id, detach_rows=detach_rows
            )
            retired: list[BundleRow] = []
            if restored:
                w.touch(claim.session_id)
                w.publish_messages(claim.task_id, claim.session_id, "message.updated", restored)
            else:
                retired = await repo.settle_claim(w.conn, claim.message_ids, claim.claim_id)
                w.publish_messages(
                    claim.task_id, claim.session_id, "message.updated", [r.id for r in retired]
                )
        return restored, retired, w

    async def _restore_later(self, claim: Claim, detach_rows: bool) -> None:
        """The restorer's restore of a claim an outage left behind (see `backend/services/restorer.py`)."""
        restored, retired, w = await self._restore_or_retire(claim, detach_rows=detach_rows)
        outcome = "restored" if restored else "retired" if retired else "settled before"
        log.info(
            f"deferred claim {outcome}",
            extra={
                "event": "clarification.restore_deferred_done",
                "claim_id": claim.claim_id,
                "outcome": outcome,
            },
        )
        if restored and self.refresh_summaries is not None:
            try:
                await self.refresh_summaries([claim.task_id])
            except Exception:
                log.warning("summary not acknowledged after a deferred restore", exc_info=True)
        await flush(self.deps, w)

    async def _recover_claim(self, claim: Claim, after: Bundle, why: str) -> RespondOutcome:
        """Restore exactly this claim while still current; otherwise settle it. While the database
        is unreachable the claim is left to the restorer, and the person may retry."""
        detach_rows = self.restorer.detaches(claim.claim_id)
        try:
            restored, retired, w = await self._restore_or_retire(claim, detach_rows=detach_rows)
        except Exception as exc:
            if not is_outage(exc):
                raise
            self.restorer.later(claim, detach_rows=detach_rows)
            return DeliveryFailed(claim.pending_id, True, f"{why}; {UNAVAILABLE_LATER}")
        if restored:
            log.info(
                "claim restored",
                extra={
                    "event": "clarification.restored",
                    "claim_id": claim.claim_id,
                    "pending_id": claim.pending_id,
                },
            )
            converged = ""
            if self.refresh_summaries is not None:
                try:
                    await self.refresh_summaries([claim.task_id])
                except Exception as exc:
                    log.warning(
                        "summary not acknowledged after restore",
                        extra={"event": "clarification.summary_unconverged", "claim_id": claim.claim_id},
                        exc_info=True,
                    )
                    converged = f"; task summary not yet converged ({exc})"
            # Published even when the summary acknowledgement failed: durable pending state is the truth.
            # A failed publication is reported too; the answer stays safe to retry either way.
            try:
                faults.check("clarification.restore_publish")
                await flush(self.deps, w, strict=True)
            except Exception as exc:  # noqa: BLE001 - reported to the caller; the restore stands
                converged += f"; other clients not yet told ({exc})"
            return DeliveryFailed(
                claim.pending_id, True, f"{why}; the question is answerable again{converged}"
            )
        if retired:
            log.info(
                "claim retired",
                extra={
                    "event": "clarification.retired",
                    "claim_id": claim.claim_id,
                    "pending_id": claim.pending_id,
                },
            )
            await flush(self.deps, w)
            return DeliveryFailed(claim.pending_id, False, f"{why}; the question is no longer current")
        # Neither: the waiter's durable confirmation won the race.
        return Responded(_finalized(after, claim), resumed=False)

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


def _drain(waiter: Waiter) -> list[Notice]:
    """The hand-offs still queued for a waiter that stops waiting (wakes are dropped)."""
    out = []
    while not waiter.queue.empty():
        notice = waiter.queue.get_nowait()
        if notice.kind == NoticeKind.HANDOFF and notice.claim is not None:
            out.append(notice)
    return out


def _merge(bundle: Bundle, changed: Sequence[BundleRow]) -> Bundle:
    by_id = {r.id: r for r in changed}
    return replace(bundle, rows=tuple(by_id.get(r.id, r) for r in bundle.rows), waiter_alive=False)


def _finalized(after: Bundle, claim: Claim) -> Bundle:
    rows = []
    for r in after.rows:
        if r.id in claim.message_ids:
            md = {k: v for k, v in r.metadata.items() if k != INTENT_KEY}
            md[CLAIM_KEY] = claim.claim_id
            r = BundleRow(r.id, r.session_id, r.turn_id, md)
        rows.append(r)
    return replace(after, rows=tuple(rows))
