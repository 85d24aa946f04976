"""Respond to a pending action: one locked read, the decision of `domain.lifecycle.RESPOND_RULES`,
the durable claim, then delivery to the live waiter, a resume of the detached agent, or a restore.

Writes that must outlive a cancelled request (confirmation wait, restore) run in a task of their own
with a finite deadline (`_bounded`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from backend import faults
from backend.db.health import DatabaseOutage, is_outage
from backend.domain.errors import BrokenInvariant, NotFound, present
from backend.domain.ids import new_id
from backend.domain.lifecycle import (
    CLAIM_KEY,
    INTENT_KEY,
    Answer,
    Bundle,
    BundleRow,
    Claim,
    Conflict,
    ConflictReason,
    DeliveryFailed,
    RespondAction,
    Responded,
    RespondOutcome,
    decide_response,
    validate_answers,
)
from backend.domain.permissions import Decision
from backend.domain.states import PendingActionKind
from backend.repository import claims, tasks
from backend.repository import clarifications as repo
from backend.services.bundles import Authorize, PendingActionsBase
from backend.services.restorer import UNAVAILABLE_LATER, UNAVAILABLE_RETRY
from backend.services.uow import Work, flush, uow

log = logging.getLogger("turnwise.clarification")
T = TypeVar("T")


# What a person sent, checked against the bundle it answers: the responses keyed by row.
Check = Callable[[Bundle], Mapping[str, Answer | Decision]]
OnClaimed = Callable[[AsyncConnection, Bundle, Mapping[str, Answer | Decision]], Awaitable[None]]


class Responding(PendingActionsBase):
    # --- respond --------------------------------------------------------------------------------

    async def respond(
        self,
        pending_id: str,
        answers: Sequence[Answer],
        *,
        rejected: bool,
        authorize: Authorize,
    ) -> RespondOutcome:
        """Answer (or, rejected, skip) a clarification."""
        return await self.respond_with(
            pending_id,
            PendingActionKind.CLARIFICATION,
            lambda bundle: validate_answers(bundle, answers, rejected=rejected),
            rejected=rejected,
            authorize=authorize,
        )

    async def respond_with(
        self,
        pending_id: str,
        kind: PendingActionKind,
        check: Check,
        *,
        rejected: bool,
        authorize: Authorize,
        on_claimed: OnClaimed | None = None,
    ) -> RespondOutcome:
        """The respond of every kind of pending action: `check` turns what the person sent into the
        bundle's responses keyed by row (or raises InvalidInput, writing nothing); `on_claimed` writes
        what else the response decides (a remembered rule) in the claim's own transaction."""
        # The claim this respond wrote, should its COMMIT's reply be lost, and whether restoring it
        # detaches its rows (a live claim's waiter never got the answer and still waits for it).
        attempt: list[tuple[Claim, bool]] = []
        try:
            return await self._respond(
                pending_id,
                kind,
                check,
                rejected=rejected,
                authorize=authorize,
                attempt=attempt,
                on_claimed=on_claimed,
            )
        except Exception as exc:
            if not is_outage(exc):
                raise
            log.warning(
                "respond failed: database unavailable",
                extra={"event": "clarification.respond_unavailable", "pending_id": pending_id},
            )
            for claim, detach_rows in attempt:
                self.restorer.later(claim, detach_rows=detach_rows)
            return DeliveryFailed(pending_id, True, UNAVAILABLE_RETRY)

    async def _respond(
        self,
        pending_id: str,
        kind: PendingActionKind,
        check: Check,
        *,
        rejected: bool,
        authorize: Authorize,
        attempt: list[tuple[Claim, bool]],
        on_claimed: OnClaimed | None,
    ) -> RespondOutcome:
        known = self._session_of.get(pending_id)
        async with uow(self.deps, [known] if known else [], hold=True, hold_summary=known is not None) as w:
            conn = w.conn
            if known is not None:
                session_id: str | None = known
            else:
                session_id, locked = await repo.lock_session_of_bundle(conn, pending_id)
                if session_id is None:
                    raise NotFound(kind.value, pending_id)
                if locked:
                    w.locked_by_read(session_id)
                    w.summary_held(session_id)
                else:
                    await w.lock([session_id])
            bundle = await self._load(conn, pending_id)
            if bundle is None or bundle.kind != kind:  # another kind's pending id is unknown here
                raise NotFound(kind.value, pending_id)
            if bundle.session_id != session_id:
                raise BrokenInvariant(f"bundle {pending_id} moved from session {session_id}")
            self.remember_session(pending_id, bundle.session_id)
            authorize(bundle.task_id, bundle.session_id)
            await faults.reached("respond.loaded")
            decision = decide_response(bundle.state, rejected=rejected)
            if decision.action == RespondAction.CONFLICT:
                return Conflict(pending_id, present(decision.conflict, "conflict reason"), bundle)
            valid = check(bundle)
            live = decision.action == RespondAction.DELIVER_LIVE
            claim_id = None if decision.action == RespondAction.PERSIST_REJECTION else new_id()
            if claim_id is not None and bundle.turn_id is not None:
                attempt.append(
                    (
                        Claim(
                            claim_id=claim_id,
                            pending_id=pending_id,
                            session_id=session_id,
                            task_id=bundle.task_id,
                            turn_id=bundle.turn_id,
                            message_ids=tuple(r.id for r in bundle.pending_rows),
                            answers=(),
                            rejected=rejected,
                        ),
                        not live,
                    )
                )
            claimed, bumped = await claims.claim_bumping(
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
            if on_claimed is not None:
                await on_claimed(conn, bundle, valid)
            if claim_id is None:
                # A persisted rejection is final at once: the session no longer waits for it.
                await tasks.mark_running_when_unblocked(conn, session_id)
                w.publish_messages(bundle.task_id, session_id, "message.updated", [r.id for r in claimed])
            if bumped:  # the claim's own statement bumped the session's sequence
                w.touched_and_bumped(session_id, task_id=bundle.task_id)
            else:
                w.touch(session_id, task_id=bundle.task_id)
        if faults.configured():
            _commit_reply_lost()
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
        await faults.reached("respond.claimed")
        settings = self.deps.settings
        if live:
            # A waiter gone before it took the answer turns the delivery into a resume: room for both.
            confirm_or_resume = settings.live_confirmation_seconds + settings.dispatch_seconds
            return await self._bounded(
                self._deliver_live(claim, bundle, after), confirm_or_resume + 3 * settings.persistence_seconds
            )
        return await self._bounded(
            self._resume(claim, after),
            self.deps.settings.dispatch_seconds + 2 * self.deps.settings.persistence_seconds,
        )

    async def _deliver_live(self, claim: Claim, bundle: Bundle, after: Bundle) -> RespondOutcome:
        instance = present(bundle.waiter_instance, "live waiter's instance")
        waiter_id = present(bundle.waiter_id, "live waiter")
        if not self.hub.left(instance, waiter_id):
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
        if self.hub.left(instance, waiter_id):
            # The agent's wait ended after the load, before its waiter took the answer: no
            # confirmation will come, so the answer goes the detached way now (S24).
            detached = await self._detached_after_all(claim, after)
            if detached is not None:
                return detached
        return await self._recover_claim(claim, after, "the agent did not confirm the answer")

    async def _detached_after_all(self, claim: Claim, after: Bundle) -> RespondOutcome | None:
        """A live claim whose waiter is gone, re-made as the detached agent's: an answer is resumed
        with the same claim, a skip (a denial) is stored as final. None when the claim is no longer
        there to re-make (its turn was superseded meanwhile) or the database is unreachable: the
        caller then recovers it as any unconfirmed claim."""
        try:
            remade = await self._remake_detached(claim)
        except Exception as exc:
            if not is_outage(exc):
                raise
            return None
        if remade is None:
            return None
        claimed, w = remade
        log.info(
            "waiter gone before delivery; the detached agent gets the answer",
            extra={"event": "clarification.waiter_gone_before_delivery", "claim_id": claim.claim_id},
        )
        await flush(self.deps, w)
        if claim.rejected:
            return Responded(_merge(after, claimed), resumed=False)
        return await self._resume(claim, _merge(after, claimed))

    async def _remake_detached(self, claim: Claim) -> tuple[list[BundleRow], Work] | None:
        """One unit under the session lock: the claim's rows back to pending, detached, and claimed
        again on the detached path. Exactly one of this and the waiter's confirmation wins."""
        answers = {a.question_id: a for a in claim.answers}
        async with uow(self.deps, [claim.session_id], hold=True) as w:
            restored = await claims.restore_claim(
                w.conn, claim.session_id, claim.message_ids, claim.claim_id, detach_rows=True
            )
            if not restored:
                return None
            claimed = await claims.claim(
                w.conn,
                session_id=claim.session_id,
                pending_id=claim.pending_id,
                message_ids=restored,
                answers=answers,
                rejected=claim.rejected,
                claim_id=None if claim.rejected else claim.claim_id,
                detach_rows=True,
            )
            if len(claimed) != len(restored):
                raise BrokenInvariant(f"claim {claim.claim_id} could not be re-made under the lock")
            # The live claim already took the rows out of pending: only a skip changes the session.
            w.touch(claim.session_id, task_id=claim.task_id, pending_action_kept=not claim.rejected)
            if claim.rejected:
                await tasks.mark_running_when_unblocked(w.conn, claim.session_id)
                w.publish_messages(claim.task_id, claim.session_id, "message.updated", restored)
        return claimed, w

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
                beat = await self.hub.heartbeat(conn, instance_id)
            if not self.hub.heartbeat_fresh(beat):
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
            restored = await claims.restore_claim(
                w.conn, claim.session_id, claim.message_ids, claim.claim_id, detach_rows=detach_rows
            )
            retired: list[BundleRow] = []
            if restored:
                w.touch(claim.session_id)
                w.publish_messages(claim.task_id, claim.session_id, "message.updated", restored)
            else:
                retired = await claims.settle_claim(w.conn, claim.message_ids, claim.claim_id)
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


def _commit_reply_lost() -> None:
    """Fault point `respond.commit_reply_lost`: the claim's COMMIT took effect but its reply was
    lost, as when the database goes away between the two; raised as the outage it would be."""
    try:
        faults.check("respond.commit_reply_lost")
    except faults.InjectedFault as lost:
        raise DatabaseOutage(None, None, lost, connection_invalidated=True) from lost


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
