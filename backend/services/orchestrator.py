"""The orchestrator: prompt admission, successor reservations, dispatch, ready-event gating.

A detached answer resumes its agent through `dispatch_answer` (the `Resumer` seam calls it, and so
does the primary-answer watchdog's fallback):

  admission (per session, in-process lock + durable check of other processes' reservations)
  -> reserve an unpublished successor turn carrying the claim's recovery identity
  -> durable attempt marker (the at-most-once boundary)
  -> executor.dispatch
  -> ACCEPTED: publish `turn.started`, then clear the recovery metadata and retire the intent
     REJECTED: delete the successor (the service restores the claim; retryable)
     AMBIGUOUS: keep the successor, move it to the start-event outbox (never sent again)

In-process memory only ever makes things stricter: accepted turns can never be rolled back, and a
session whose rollback failed admits no prompt and resolves no ready event until restart recovery.

One module on purpose: admission, the durable steps and the ready-event gate share one state
machine (`Live`, `Outcome`), and each step's failure handling names the step that undoes it; split
across modules, a reader would lose the one place where every outcome of a reservation is decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from backend import faults
from backend.config import Settings
from backend.domain.errors import InvalidState, NotFound
from backend.domain.events import EventKind
from backend.domain.ids import new_id
from backend.domain.lifecycle import Claim
from backend.domain.prompts import resume_prompt
from backend.domain.states import TERMINAL_SESSION_STATES
from backend.executors.base import DispatchOutcome, DispatchResult, Executor, PromptRequest
from backend.lru import LRU
from backend.repository import claims, reservations, tasks, turns
from backend.services.bounded import bounded
from backend.services.context import Deps
from backend.services.dispatch import (
    Admission,
    Busy,
    Dispatch,
    Live,
    Origin,
    Outcome,
    Stale,
    TurnSnapshot,
)
from backend.services.events_out import publish_session_change
from backend.services.resume import ResumeOutcome
from backend.services.uow import uow

log = logging.getLogger("turnwise.resume")

T = TypeVar("T")
POLL_SECONDS = 0.05
# Reservation turns remembered as this process's own (their events are not agent activity). Their
# events reach the watchdogs moments after publication, so the newest ones suffice.
OWN_TURNS_KEPT = 4096


class Orchestrator:
    def __init__(self, deps: Deps, executor: Executor) -> None:
        self.deps = deps
        self.executor = executor
        # Per session, only while a dispatch holds or waits for it.
        self._admission: dict[str, Admission] = {}
        self._live: dict[str, Live] = {}
        self._quarantined: dict[str, str] = {}
        # Turns seen accepted whose durable state does not refuse a rollback yet (publication and
        # the outbox move both make it refuse): an in-process rollback fails closed for them.
        self._accepted: set[str] = set()
        # Turns this process reserved: their events are the orchestrator's own, not agent activity.
        # The newest turn ids this process dispatched (`in` does not refresh one).
        self.own_turns: LRU[str, None] = LRU(OWN_TURNS_KEPT)
        self._background: set[asyncio.Task[Any]] = set()

    @property
    def settings(self) -> Settings:
        return self.deps.settings

    async def _bounded(self, work: Awaitable[T], seconds: float) -> T:
        """Own task, finite deadline, not cancelled with its caller (rollback and cleanup must finish)."""
        return await bounded(self._background, work, seconds)

    # --- the Resumer seam -----------------------------------------------------------------------

    async def resume(self, claim: Claim) -> ResumeOutcome:
        if claim.rejected:
            return ResumeOutcome(False, True, "a rejection is persisted without resuming the agent")
        return await self.dispatch_answer(claim, Origin.DETACHED)

    def quarantined(self, session_id: str) -> bool:
        return session_id in self._quarantined

    def held(self) -> dict[str, int]:
        """Sizes of the per-process state (each stays bounded whatever the traffic)."""
        return {
            "admission_locks": len(self._admission),
            "accepted": len(self._accepted),
            "own_turns": len(self.own_turns),
            "live": len(self._live),
            "quarantined": len(self._quarantined),
        }

    async def dispatch_answer(self, claim: Claim, origin: Origin) -> ResumeOutcome:
        """Admit, reserve, mark, dispatch, publish the claim's answers as the successor of its turn.
        Never raises for outcomes; after the attempt marker every failure is reported non-retryable."""
        session_id = claim.session_id
        loop = asyncio.get_running_loop()
        admit_by = loop.time() + self.settings.persistence_seconds
        lock = self._enter_admission(session_id)
        try:
            await asyncio.wait_for(lock.acquire(), self.settings.persistence_seconds)
        except BaseException as exc:
            self._leave_admission(session_id)
            if isinstance(exc, TimeoutError):
                return ResumeOutcome(False, True, "the orchestrator did not admit the prompt in time")
            raise
        try:
            if session_id in self._quarantined:
                return ResumeOutcome(
                    False, True, "a prompt reservation of this session is unresolved until restart recovery"
                )
            live = self._live[session_id] = Live(new_id())
            try:
                return await self._admitted(Dispatch(claim, origin, live), admit_by)
            finally:
                if live.outcome != Outcome.UNRESOLVED:
                    live.resolved.set()
                    if self._live.get(session_id) is live:
                        del self._live[session_id]
        finally:
            lock.release()
            self._leave_admission(session_id)

    def _enter_admission(self, session_id: str) -> asyncio.Lock:
        admission = self._admission.setdefault(session_id, Admission())
        admission.users += 1
        return admission.lock

    def _leave_admission(self, session_id: str) -> None:
        """The lock is forgotten once no dispatch holds or waits for it."""
        admission = self._admission[session_id]
        admission.users -= 1
        if admission.users == 0:
            del self._admission[session_id]

    async def _admitted(self, d: Dispatch, admit_by: float) -> ResumeOutcome:
        """The durable steps of an admitted dispatch, each failure undone by the step that names it."""
        reserved = await self._reserve_in_time(d, admit_by)
        if isinstance(reserved, ResumeOutcome):
            return reserved
        log.info("successor reserved", extra={"event": "resume.reserved", "origin": d.origin.value, **d.ids})
        await faults.hit("resume.after_reserve")
        try:
            await asyncio.wait_for(
                self._mark_attempted(d.session_id, d.turn_id), self.settings.persistence_seconds
            )
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - any failure is rolled back
            return await self._undo(d, f"attempt marker not persisted: {exc}", cancelled=exc)
        log.info("dispatch attempted", extra={"event": "resume.attempted", **d.ids})
        await faults.hit("resume.after_attempt_marker")
        return await self._dispatch_attempted(d, reserved)

    async def _reserve_in_time(self, d: Dispatch, admit_by: float) -> str | ResumeOutcome:
        """The reservation's prompt; waits (bounded) while another process's reservation of the
        session is unresolved. An outcome instead when it was refused or rolled back."""
        loop = asyncio.get_running_loop()
        while True:
            remaining = admit_by - loop.time()
            try:
                if remaining <= 0:
                    raise TimeoutError
                return await asyncio.wait_for(self._reserve(d), remaining)
            except Busy:
                await asyncio.sleep(POLL_SECONDS)
            except Stale:
                d.live.outcome = Outcome.REFUSED
                log.info("prompt refused: turn superseded", extra={"event": "resume.refused", **d.ids})
                return ResumeOutcome(False, True, "the clarification's turn is no longer current")
            except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - any failure is rolled back
                # The reservation's outcome is unknown (deadline during commit, a failure, a cancelled
                # watchdog): roll back whatever may have been written, in a fresh bounded context.
                why = (
                    "the orchestrator did not admit the prompt in time"
                    if isinstance(exc, TimeoutError)
                    else str(exc)
                )
                return await self._undo(d, f"reservation failed: {why}", cancelled=exc)

    async def _dispatch_attempted(self, d: Dispatch, prompt: str) -> ResumeOutcome:
        """From here on the prompt may reach the agent: nothing below sends it again or deletes it."""
        claim = d.claim
        request = PromptRequest(
            session_id=claim.session_id,
            task_id=claim.task_id,
            turn_id=d.turn_id,
            generation=d.turn_id,
            prompt=prompt,
            pending_id=claim.pending_id,
        )
        try:
            result = await self._dispatch(request)
        except asyncio.CancelledError:
            await self._bounded(self._settle_ambiguous(d), self._cleanup_s)
            raise
        if result.outcome == DispatchOutcome.REJECTED:
            log.info(
                "dispatch rejected", extra={"event": "resume.rejected", "detail": result.detail, **d.ids}
            )
            return await self._undo(d, f"the agent did not take the prompt: {result.detail}", retry=True)
        if result.outcome == DispatchOutcome.AMBIGUOUS:
            log.warning(
                "dispatch ambiguous", extra={"event": "resume.ambiguous", "detail": result.detail, **d.ids}
            )
            await self._bounded(self._settle_ambiguous(d), self._cleanup_s)
            return ResumeOutcome(
                False, False, f"the prompt may have reached the agent ({result.detail}); it is not sent again"
            )
        self._accepted.add(d.turn_id)
        log.info("dispatch accepted", extra={"event": "resume.accepted", **d.ids})
        await faults.hit("resume.after_dispatch_ack")
        return await self._bounded(self._publish(d), self._cleanup_s)

    @property
    def _cleanup_s(self) -> float:
        return self.settings.persistence_seconds

    async def _dispatch(self, request: PromptRequest) -> DispatchResult:
        deadline = self.settings.dispatch_seconds
        try:
            # The executor classifies its own deadline; ours only guards against one that does not.
            return await asyncio.wait_for(
                self.executor.dispatch(request, deadline_seconds=deadline), deadline + 1
            )
        except TimeoutError:
            return DispatchResult(DispatchOutcome.AMBIGUOUS, "no acknowledgement before the deadline")
        except Exception as exc:
            log.exception(
                "executor failed", extra={"event": "resume.executor_failed", "turn_id": request.turn_id}
            )
            return DispatchResult(DispatchOutcome.AMBIGUOUS, f"executor failed: {type(exc).__name__}")

    # --- durable steps --------------------------------------------------------------------------

    async def _reserve(self, d: Dispatch) -> str:
        claim = d.claim
        async with uow(self.deps, [claim.session_id]) as w:
            conn = w.conn
            # Prompt admission rechecks current-turn authority under the session lock.
            session = await tasks.get_session(conn, claim.session_id)
            if session.state in TERMINAL_SESSION_STATES:
                raise Stale
            if await turns.current_turn(conn, claim.session_id) != claim.turn_id:
                raise Stale
            if await reservations.live_reservation(conn, claim.session_id) is not None:
                raise Busy
            rows = await reservations.source_rows(conn, claim.message_ids)
            await reservations.reserve(
                conn,
                claim.session_id,
                turn_id=d.turn_id,
                source_turn_id=claim.turn_id,
                pending_id=claim.pending_id,
                message_ids=claim.message_ids,
                claim_id=d.claim_id,
                origin=d.origin.value,
            )
            self.own_turns.put(d.turn_id, None)
        return resume_prompt(rows, claim.answers)

    async def _mark_attempted(self, session_id: str, turn_id: str) -> None:
        async with uow(self.deps, [session_id]) as w:
            faults.check("resume.attempt_marker")
            if not await reservations.mark_attempted(w.conn, turn_id):
                raise RuntimeError("the reservation is gone")
            w.touch(session_id)

    async def rollback_reservation(self, session_id: str, turn_id: str) -> bool:
        """Delete a reservation that provably never reached the agent. Fails closed (False) for a
        turn this process saw accepted, and for one already published or referenced by a message."""
        if turn_id in self._accepted:
            log.warning(
                "rollback refused: accepted", extra={"event": "resume.rollback_refused", "turn_id": turn_id}
            )
            return False
        async with uow(self.deps, [session_id]) as w:
            faults.check("resume.rollback")
            deleted = await reservations.delete_unpublished(w.conn, turn_id)
            if not deleted:
                return await turns_absent(w.conn, turn_id)
            w.touch(session_id)
        return True

    async def _undo(
        self, d: Dispatch, why: str, *, cancelled: BaseException | None = None, retry: bool = True
    ) -> ResumeOutcome:
        session_id, turn_id, live, ids = d.session_id, d.turn_id, d.live, d.ids
        try:
            ok = await self._bounded(self.rollback_reservation(session_id, turn_id), self._cleanup_s)
        except Exception:
            log.exception("rollback failed", extra={"event": "resume.rollback_failed", **ids})
            ok = False
        if not ok:
            # The reservation stays unresolved: ready events keep waiting, admission stays closed.
            live.outcome = Outcome.UNRESOLVED
            self._quarantined[session_id] = turn_id
            log.error("session quarantined", extra={"event": "resume.quarantined", **ids})
            if isinstance(cancelled, asyncio.CancelledError):
                raise cancelled
            return ResumeOutcome(
                False,
                False,
                f"{why}; the reservation could not be rolled back and restart recovery resolves it",
            )
        live.outcome = Outcome.ROLLED_BACK
        log.info("reservation rolled back", extra={"event": "resume.rolled_back", "why": why, **ids})
        if isinstance(cancelled, asyncio.CancelledError):
            raise cancelled
        return ResumeOutcome(False, retry, why)

    async def _publish(self, d: Dispatch) -> ResumeOutcome:
        live, ids, session_id, claim_id = d.live, d.ids, d.session_id, d.claim_id
        task_id, message_ids = d.claim.task_id, d.claim.message_ids
        try:
            faults.check("resume.publish")
            # Recovery-clean by construction: public events carry ids only, never turn metadata.
            await publish_session_change(
                self.deps.bus,
                task_id=task_id,
                session_id=session_id,
                kind=EventKind.TURN_STARTED,
                turn_id=live.turn_id,
                strict=True,
            )
            await faults.hit("resume.after_publish")
            async with uow(self.deps, [session_id]) as w:
                faults.check("resume.clear")
                if not await reservations.clear_recovery(w.conn, live.turn_id):
                    raise RuntimeError("the reservation lost its recovery metadata")
                if claim_id is not None:
                    await claims.settle_claim(w.conn, message_ids, claim_id)
                await tasks.mark_running_when_unblocked(w.conn, session_id)
                w.touch(session_id)
        except Exception as exc:
            log.exception(
                "publication failed after acceptance", extra={"event": "resume.publish_failed", **ids}
            )
            if await self._to_outbox(d):
                self._accepted.discard(live.turn_id)  # the outbox marker refuses a rollback now
            live.outcome = Outcome.PUBLISHED
            return ResumeOutcome(
                False, False, f"the agent took the answer but its turn could not be published ({exc})"
            )
        live.outcome = Outcome.PUBLISHED
        self._accepted.discard(live.turn_id)  # published: a rollback is refused durably now
        log.info("successor published", extra={"event": "resume.published", **ids})
        return ResumeOutcome(True, False)

    async def _to_outbox(self, d: Dispatch) -> bool:
        """Normal failure cleanup after a possible acceptance: keep the successor, retire the intent,
        leave the start event to the durable outbox. If even this fails, reservation recovery owns it."""
        live, ids, claim_id, message_ids = d.live, d.ids, d.claim_id, d.claim.message_ids
        try:
            async with uow(self.deps, [ids["session_id"]]) as w:
                faults.check("resume.outbox")
                await reservations.move_to_outbox(w.conn, [live.turn_id])
                if claim_id is not None:
                    await claims.settle_claim(w.conn, message_ids, claim_id)
                await tasks.mark_running_when_unblocked(w.conn, ids["session_id"])
                w.touch(ids["session_id"])
            log.info("start event queued", extra={"event": "resume.outbox", **ids})
            return True
        except Exception:
            log.exception("outbox write failed", extra={"event": "resume.outbox_failed", **ids})
            return False

    async def _settle_ambiguous(self, d: Dispatch) -> None:
        live, ids, task_id = d.live, d.ids, d.claim.task_id
        self._accepted.add(live.turn_id)  # may be running: never rolled back, never sent again
        live.outcome = Outcome.AMBIGUOUS
        if not await self._to_outbox(d):
            return
        self._accepted.discard(live.turn_id)  # the outbox marker refuses a rollback now
        try:
            await self.replay_start([(live.turn_id, ids["session_id"], task_id, False)])
        except Exception:
            # The outbox keeps the marker: startup recovery replays the start event.
            log.warning(
                "start event left to the outbox", extra={"event": "outbox.deferred", **ids}, exc_info=True
            )

    async def replay_start(self, items: Sequence[tuple[str, str, str, bool]]) -> list[str]:
        """Publish `turn.started` (then `turn.completed` when already completed) for outbox turns and
        clear each marker only after the bus accepted its events. Returns the ids cleared; raises after
        clearing the others when some publication failed."""
        done: list[str] = []
        failed: list[str] = []
        for turn_id, session_id, task_id, completed in items:
            try:
                faults.check("outbox.publish")
                for kind in (
                    (EventKind.TURN_STARTED, EventKind.TURN_COMPLETED)
                    if completed
                    else (EventKind.TURN_STARTED,)
                ):
                    await publish_session_change(
                        self.deps.bus,
                        task_id=task_id,
                        session_id=session_id,
                        kind=kind,
                        turn_id=turn_id,
                        strict=True,
                    )
            except Exception:
                log.exception(
                    "start event replay failed", extra={"event": "outbox.failed", "turn_id": turn_id}
                )
                failed.append(turn_id)
                continue
            done.append(turn_id)
        if done:
            async with uow(self.deps) as w:
                await reservations.clear_outbox(w.conn, done)
            for turn_id in done:
                log.info("start event replayed", extra={"event": "outbox.replayed", "turn_id": turn_id})
        if failed:
            raise RuntimeError(f"start events not accepted by the bus for turns {', '.join(failed)}")
        return done

    # --- ready events (completeTurn) ------------------------------------------------------------

    async def wait_resolved(self, session_id: str) -> bool:
        """Wait while a reservation of the session is unresolved (here or in another process).
        True when one overlapped. Raises InvalidState when it stays unresolved past the deadline."""
        loop = asyncio.get_running_loop()
        limit = self.settings.dispatch_seconds + 2 * self.settings.persistence_seconds
        deadline = loop.time() + limit
        overlapped = False
        while True:
            live = self._live.get(session_id)
            if live is None and session_id not in self._quarantined:
                async with self.deps.db.read() as conn:
                    pending = await reservations.live_reservation(conn, session_id)
                if pending is None:
                    return overlapped
            overlapped = True
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise InvalidState(
                    f"session {session_id!r} has a prompt reservation unresolved until restart recovery"
                )
            if live is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(live.resolved.wait(), remaining)
                if live.outcome == Outcome.UNRESOLVED:
                    await asyncio.sleep(min(POLL_SECONDS, max(remaining, 0)))
            else:
                await asyncio.sleep(min(POLL_SECONDS, remaining))

    # --- clarification pause --------------------------------------------------------------------

    async def cancel_paused(self, snapshot: TurnSnapshot) -> bool:
        """Cancel (complete) the paused turn only if authority still matches the snapshot: a first or
        successor turn created meanwhile is never cancelled by the stale pause."""
        async with uow(self.deps, [snapshot.session_id]) as w:
            conn = w.conn
            current = await turns.current_turn(conn, snapshot.session_id)
            if current != snapshot.turn_id:
                log.info(
                    "stale pause cancellation rejected",
                    extra={
                        "event": "pause.stale",
                        "session_id": snapshot.session_id,
                        "expected": snapshot.turn_id,
                        "current": current,
                    },
                )
                return False
            if snapshot.turn_id is None:
                return True
            turn = await turns.get_turn(conn, snapshot.turn_id)
            if turn.completed_at is not None:
                return True
            await turns.complete_turn(conn, turn)
            w.touch(snapshot.session_id)
            session = await tasks.get_session(conn, snapshot.session_id)
            w.publish(session.task_id, session.id, EventKind.TURN_COMPLETED, turn_id=snapshot.turn_id)
        log.info("paused turn cancelled", extra={"event": "pause.cancelled", "turn_id": snapshot.turn_id})
        return True


async def turns_absent(conn: Any, turn_id: str) -> bool:
    """A rollback whose reservation no longer exists at all has nothing left to undo."""
    try:
        await turns.get_turn(conn, turn_id)
    except NotFound:
        return True
    return False
