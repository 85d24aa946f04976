"""A person's side of a pending action: one locked read, the decision of
`domain.lifecycle.RESPOND_RULES`, the durable claim, then delivery to the live waiter, a resume of
the detached agent, or a restore.

Writes that must outlive a cancelled request (confirmation wait, restore) run in a task of their own
with a finite deadline (`Core.bounded`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from sqlalchemy.ext.asyncio import AsyncConnection

from backend import faults
from backend.db.health import DatabaseOutage, is_outage
from backend.domain.errors import BrokenInvariant, NotFound, present
from backend.domain.events import EventKind
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
    RespondDecision,
    Responded,
    RespondOutcome,
    decide_response,
)
from backend.domain.permissions import Decision
from backend.domain.states import PendingActionKind
from backend.repository import claims, tasks
from backend.services.pending.core import Authorize, Core
from backend.services.restorer import UNAVAILABLE_LATER, UNAVAILABLE_RETRY
from backend.services.uow import Work, flush, uow

log = logging.getLogger("turnwise.pending")

# What a person sent, checked against the bundle it answers: the responses keyed by row.
Check = Callable[[Bundle], Mapping[str, Answer | Decision]]
OnClaimed = Callable[[AsyncConnection, Bundle, Mapping[str, Answer | Decision]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Response:
    """One respond to a pending action, with its kind's parts: `check` turns what the person sent
    into the bundle's responses keyed by row (or raises InvalidInput, writing nothing); `on_claimed`
    writes what else the response decides (a remembered rule) in the claim's own transaction."""

    pending_id: str
    kind: PendingActionKind
    check: Check
    rejected: bool
    authorize: Authorize
    on_claimed: OnClaimed | None = None
    # The user whose response this is, kept with the claimed rows (the audit trail's "decided by").
    decided_by: str | None = None


@dataclass(frozen=True, slots=True)
class _Claimed:
    """What the claim's unit of work decided and wrote."""

    response: Response
    bundle: Bundle
    decision: RespondDecision
    rows: list[BundleRow]
    # None for a persisted rejection (final at once, nothing to deliver).
    claim_id: str | None
    responses: Mapping[str, Answer | Decision]

    @property
    def live(self) -> bool:
        return self.decision.action == RespondAction.DELIVER_LIVE

    def claim(self, claim_id: str) -> Claim:
        """The committed claim, as finalize and restore act on it."""
        return _claim_of(self.bundle, claim_id, [r.id for r in self.rows], self.responses, self.response)


@dataclass
class Responding:
    core: Core

    async def respond(self, response: Response) -> RespondOutcome:
        """The respond of every kind of pending action."""
        # The claim this respond wrote, should its COMMIT's reply be lost, and whether restoring it
        # detaches its rows (a live claim's waiter never got the answer and still waits for it).
        attempt: list[tuple[Claim, bool]] = []
        try:
            return await self._respond(response, attempt)
        except Exception as exc:
            if not is_outage(exc):
                raise
            log.warning(
                "respond failed: database unavailable",
                extra={
                    "event": "pending.respond_unavailable",
                    "kind": response.kind.value,
                    "pending_id": response.pending_id,
                },
            )
            for claim, detach_rows in attempt:
                self.core.restorer.later(claim, detach_rows=detach_rows)
            return DeliveryFailed(response.pending_id, True, UNAVAILABLE_RETRY)

    async def _respond(self, response: Response, attempt: list[tuple[Claim, bool]]) -> RespondOutcome:
        known = self.core.sessions.get(response.pending_id)
        async with uow(
            self.core.deps, [known] if known else [], hold=True, hold_summary=known is not None
        ) as w:
            bundle = await self._locked_bundle(w, response, known)
            await faults.reached("respond.loaded")
            decision = decide_response(bundle.state, rejected=response.rejected)
            if decision.action == RespondAction.CONFLICT:
                reason = present(decision.conflict, "conflict reason")
                return Conflict(response.pending_id, reason, bundle)
            claimed = await self._claim(w, response, bundle, decision, attempt)
            if claimed is None:  # cannot happen under the lock; kept so a lost claim is never a success
                return Conflict(response.pending_id, ConflictReason.DELIVERY_CLAIMED, bundle)
        if faults.configured():
            _commit_reply_lost()
        attempt.clear()  # committed: from here on, delivery restores the claim on failure
        # A live claim is followed by "pending action delivered" (or a warning and its restore): the
        # claim itself is detail. A resume or a persisted rejection is logged here.
        log.log(
            logging.DEBUG if claimed.live else logging.INFO,
            "pending action claimed",
            extra={
                "event": "pending.claimed",
                "kind": response.kind.value,
                "pending_id": response.pending_id,
                "claim_id": claimed.claim_id,
                "action": decision.action.value,
                "messages": len(claimed.rows),
            },
        )
        # Publishes the task summaries the claim wrote (a claimed bundle no longer waits for input);
        # a delivered claim queued no message event: those follow only once delivery succeeded.
        await flush(self.core.deps, w)
        return await self._deliver(claimed)

    async def _locked_bundle(self, w: Work, response: Response, known: str | None) -> Bundle:
        """The bundle, read under its session's lock (found by the same statement when this process
        does not know the session), and authorized."""
        pending_id = response.pending_id
        if known is not None:
            session_id = known
        else:
            found = await w.lock_session_of_bundle(pending_id)
            if found is None:
                raise NotFound(response.kind.value, pending_id)
            session_id = found
        bundle = await self.core.load(w.conn, pending_id)
        if bundle is None or bundle.kind != response.kind:  # another kind's pending id is unknown here
            raise NotFound(response.kind.value, pending_id)
        if bundle.session_id != session_id:
            raise BrokenInvariant(f"bundle {pending_id} moved from session {session_id}")
        self.core.remember_session(pending_id, session_id)
        response.authorize(bundle.task_id, bundle.session_id)
        return bundle

    async def _claim(
        self,
        w: Work,
        response: Response,
        bundle: Bundle,
        decision: RespondDecision,
        attempt: list[tuple[Claim, bool]],
    ) -> _Claimed | None:
        """The durable claim of the bundle's pending rows (with a delivery intent unless it is a
        persisted rejection), and what else the response decides; None when no row was claimed."""
        valid = response.check(bundle)
        live = decision.action == RespondAction.DELIVER_LIVE
        claim_id = None if decision.action == RespondAction.PERSIST_REJECTION else new_id()
        pending = [r.id for r in bundle.pending_rows]
        if claim_id is not None and bundle.turn_id is not None:
            attempt.append((_claim_of(bundle, claim_id, pending, valid, response), not live))
        rows = await claims.claim(
            w.conn,
            session_id=bundle.session_id,
            pending_id=bundle.pending_id,
            message_ids=pending,
            answers=valid,
            rejected=response.rejected,
            claim_id=claim_id,
            detach_rows=not live,
            bump=True,
            decided_by=response.decided_by,
        )
        if not rows:
            return None
        if response.on_claimed is not None:
            await response.on_claimed(w.conn, bundle, valid)
        if claim_id is None:
            # A persisted rejection is final at once: the session no longer waits for it.
            await tasks.mark_running_when_unblocked(w.conn, bundle.session_id)
            w.publish_messages(
                bundle.task_id, bundle.session_id, EventKind.MESSAGE_UPDATED, [r.id for r in rows]
            )
        w.touch(bundle.session_id, task_id=bundle.task_id)
        return _Claimed(response, bundle, decision, rows, claim_id, valid)

    async def _deliver(self, claimed: _Claimed) -> RespondOutcome:
        """The committed claim on its way: to the live waiter, or to the detached agent's resume."""
        after = _merge(claimed.bundle, claimed.rows)
        if claimed.claim_id is None:
            return Responded(after, resumed=False)
        claim = claimed.claim(claimed.claim_id)
        await faults.hit("after_claim")
        await faults.reached("respond.claimed")
        settings = self.core.deps.settings
        if claimed.live:
            # A waiter gone before it took the answer turns the delivery into a resume: room for both.
            confirm_or_resume = settings.live_confirmation_seconds + settings.dispatch_seconds
            return await self.core.bounded(
                self._deliver_live(claim, claimed.bundle, after),
                confirm_or_resume + 3 * settings.persistence_seconds,
            )
        return await self.core.bounded(
            self._resume(claim, after), settings.dispatch_seconds + 2 * settings.persistence_seconds
        )

    async def _deliver_live(self, claim: Claim, bundle: Bundle, after: Bundle) -> RespondOutcome:
        hub = self.core.hub
        instance = present(bundle.waiter_instance, "live waiter's instance")
        waiter_id = present(bundle.waiter_id, "live waiter")
        if not hub.left(instance, waiter_id):
            async with hub.expect_confirmation(claim.claim_id) as confirmation:
                try:
                    await hub.hand_off(instance, waiter_id, claim)
                    confirmed = await self._await_confirmation(confirmation, instance)
                except Exception:
                    log.warning(
                        "live delivery not confirmed",
                        extra={
                            "event": "pending.delivery_unconfirmed",
                            "kind": claim.kind.value,
                            "claim_id": claim.claim_id,
                        },
                        exc_info=True,
                    )
                    confirmed = False
            if confirmed:
                return Responded(_finalized(after, claim), resumed=False)
        if hub.left(instance, waiter_id):
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
            extra={
                "event": "pending.waiter_gone_before_delivery",
                "kind": claim.kind.value,
                "claim_id": claim.claim_id,
            },
        )
        await flush(self.core.deps, w)
        if claim.rejected:
            return Responded(_merge(after, claimed), resumed=False)
        return await self._resume(claim, _merge(after, claimed))

    async def _remake_detached(self, claim: Claim) -> tuple[list[BundleRow], Work] | None:
        """One unit under the session lock: the claim's rows back to pending, detached, and claimed
        again on the detached path. Exactly one of this and the waiter's confirmation wins."""
        answers = {a.question_id: a for a in claim.answers}
        async with uow(self.core.deps, [claim.session_id], hold=True) as w:
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
                w.publish_messages(claim.task_id, claim.session_id, EventKind.MESSAGE_UPDATED, restored)
        return claimed, w

    async def _resume(self, claim: Claim, after: Bundle) -> RespondOutcome:
        ids = {"kind": claim.kind.value, "claim_id": claim.claim_id}
        try:
            outcome = await self.core.resumer.resume(claim)
        except Exception:
            log.exception("resume failed", extra={"event": "pending.resume_failed", **ids})
            return await self._recover_claim(claim, after, "the agent could not be resumed")
        if outcome.accepted:
            log.info("pending action resumed", extra={"event": "pending.resumed", **ids})
            await self.core.publish(
                claim.task_id, claim.session_id, EventKind.MESSAGE_UPDATED, claim.message_ids
            )
            return Responded(_finalized(after, claim), resumed=not outcome.queued, queued=outcome.queued)
        if outcome.retryable:
            return await self._recover_claim(
                claim, after, outcome.message or "the agent could not be resumed"
            )
        await self.core.publish(claim.task_id, claim.session_id, EventKind.MESSAGE_UPDATED, claim.message_ids)
        return DeliveryFailed(
            claim.pending_id, False, outcome.message or "the answer may have reached the agent"
        )

    async def _await_confirmation(self, confirmation: asyncio.Future[bool], instance_id: str) -> bool:
        """Wait for the waiter's verdict, at most the live-confirmation bound; but when the waiter
        lives in another process whose heartbeat goes stale (it crashed), stop waiting at once so
        the claim is restored instead of hanging the person who answered."""
        settings = self.core.deps.settings
        hub = self.core.hub
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.live_confirmation_seconds
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError
            try:
                return await asyncio.wait_for(
                    asyncio.shield(confirmation), min(remaining, settings.heartbeat_seconds)
                )
            except TimeoutError:
                if not hub.needs_heartbeat(instance_id):
                    continue
            async with self.core.deps.db.read() as conn:
                beat = await hub.heartbeat(conn, instance_id)
            if not hub.heartbeat_fresh(beat):
                log.warning(
                    "waiter process gone before confirming",
                    extra={"event": "pending.waiter_gone", "instance_id": instance_id},
                )
                return False

    # --- restore --------------------------------------------------------------------------------

    async def _restore_or_retire(
        self, claim: Claim, *, detach_rows: bool
    ) -> tuple[list[str], list[BundleRow], Work]:
        """Restore exactly this claim while still current; otherwise settle it. Exactly one of the
        waiter's finalize and this restore wins (both require the claim's intent, under the lock)."""
        async with uow(self.core.deps, [claim.session_id], hold=True) as w:
            restored = await claims.restore_claim(
                w.conn, claim.session_id, claim.message_ids, claim.claim_id, detach_rows=detach_rows
            )
            retired: list[BundleRow] = []
            if restored:
                w.touch(claim.session_id)
                w.publish_messages(claim.task_id, claim.session_id, EventKind.MESSAGE_UPDATED, restored)
            else:
                retired = await claims.settle_claim(w.conn, claim.message_ids, claim.claim_id)
                w.publish_messages(
                    claim.task_id, claim.session_id, EventKind.MESSAGE_UPDATED, [r.id for r in retired]
                )
        return restored, retired, w

    async def restore_later(self, claim: Claim, detach_rows: bool) -> None:
        """The restorer's restore of a claim an outage left behind (see `backend/services/restorer.py`)."""
        restored, retired, w = await self._restore_or_retire(claim, detach_rows=detach_rows)
        outcome = "restored" if restored else "retired" if retired else "settled before"
        log.info(
            f"deferred claim {outcome}",
            extra={
                "event": "pending.restore_deferred_done",
                "kind": claim.kind.value,
                "claim_id": claim.claim_id,
                "outcome": outcome,
            },
        )
        if restored and self.core.refresh_summaries is not None:
            try:
                await self.core.refresh_summaries([claim.task_id])
            except Exception:
                log.warning("summary not acknowledged after a deferred restore", exc_info=True)
        await flush(self.core.deps, w)

    async def _recover_claim(self, claim: Claim, after: Bundle, why: str) -> RespondOutcome:
        """Restore exactly this claim while still current; otherwise settle it. While the database
        is unreachable the claim is left to the restorer, and the person may retry."""
        restorer = self.core.restorer
        detach_rows = restorer.detaches(claim.claim_id)
        try:
            restored, retired, w = await self._restore_or_retire(claim, detach_rows=detach_rows)
        except Exception as exc:
            if not is_outage(exc):
                raise
            restorer.later(claim, detach_rows=detach_rows)
            return DeliveryFailed(claim.pending_id, True, f"{why}; {UNAVAILABLE_LATER}")
        ids = {"kind": claim.kind.value, "claim_id": claim.claim_id, "pending_id": claim.pending_id}
        if restored:
            log.info("claim restored", extra={"event": "pending.restored", **ids})
            told = await self._converge_restored(claim, w)
            return DeliveryFailed(claim.pending_id, True, f"{why}; the question is answerable again{told}")
        if retired:
            log.info("claim retired", extra={"event": "pending.retired", **ids})
            await flush(self.core.deps, w)
            return DeliveryFailed(claim.pending_id, False, f"{why}; the question is no longer current")
        # Neither: the waiter's durable confirmation won the race.
        return Responded(_finalized(after, claim), resumed=False)

    async def _converge_restored(self, claim: Claim, w: Work) -> str:
        """After a restore: the task summaries refreshed and the restore published; what of that
        failed, for the person's message (the answer stays safe to retry either way)."""
        converged = ""
        if self.core.refresh_summaries is not None:
            try:
                await self.core.refresh_summaries([claim.task_id])
            except Exception as exc:
                log.warning(
                    "summary not acknowledged after restore",
                    extra={
                        "event": "pending.summary_unconverged",
                        "kind": claim.kind.value,
                        "claim_id": claim.claim_id,
                    },
                    exc_info=True,
                )
                converged = f"; task summary not yet converged ({exc})"
        # Published even when the summary acknowledgement failed: durable pending state is the truth.
        # A failed publication is reported too.
        try:
            faults.check("clarification.restore_publish")
            await flush(self.core.deps, w, strict=True)
        except Exception as exc:  # noqa: BLE001 - reported to the caller; the restore stands
            converged += f"; other clients not yet told ({exc})"
        return converged


def _claim_of(
    bundle: Bundle,
    claim_id: str,
    message_ids: Sequence[str],
    responses: Mapping[str, Answer | Decision],
    response: Response,
) -> Claim:
    return Claim(
        claim_id=claim_id,
        pending_id=bundle.pending_id,
        session_id=bundle.session_id,
        task_id=bundle.task_id,
        turn_id=present(bundle.turn_id, f"turn of bundle {bundle.pending_id}"),
        message_ids=tuple(message_ids),
        answers=tuple(responses[q] for q in sorted(responses)),
        rejected=response.rejected,
    )


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
            r = replace(r, metadata=md)
        rows.append(r)
    return replace(after, rows=tuple(rows))
