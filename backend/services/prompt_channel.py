"""The GraphQL prompt channel: agent runners hold `agentPrompts(sessionId)`; dispatches reach the
holder in whichever server process it is connected to, and come back through `acknowledgePrompt`.

Exactly one runner holds a session's channel (the newest takes over); its lease lives in the
database so any process can decide "no runner connected" - a dispatch known NOT to have been
delivered, reported as a synchronous rejection. A dispatch that was published but not acknowledged
before the deadline is ambiguous: the runner may be working on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict
from typing import Any

from backend import faults
from backend.bus import BusUnavailable
from backend.domain.clarification import flag
from backend.domain.ids import new_id
from backend.executors.base import DispatchOutcome, DispatchResult, PromptRequest
from backend.repository import reservations, runners, turns
from backend.services.context import Deps

log = logging.getLogger("turnwise.prompts")

PROMPT_CHANNEL = "turnwise.prompts"
ACK_CHANNEL = "turnwise.prompt_acks"


def prompts_channel(session_id: str) -> str:
    return f"{PROMPT_CHANNEL}.{session_id}"


def acks_channel(turn_id: str) -> str:
    return f"{ACK_CHANNEL}.{turn_id}"


class PromptChannel:
    name = "channel"

    def __init__(self, deps: Deps, *, lease_seconds: float = 15.0) -> None:
        self.deps = deps
        self.lease = lease_seconds
        # Takes the session's undelivered inbox items (late answers queued while nobody held the
        # channel); the holder gets them before anything else, and again on each inbox nudge.
        self.take_inbox: Callable[[str], Awaitable[list[PromptRequest]]] | None = None

    @contextlib.asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[AsyncIterator[PromptRequest]]:
        """Hold the session's prompt channel for the duration of the block; yields its dispatches."""
        runner_id = new_id()
        # After a bus gap the holder re-reads its inbox: a queued answer's nudge may have been lost.
        async with self.deps.bus.subscribe(prompts_channel(session_id), after_gap={"inbox": True}) as events:
            async with self.deps.db.write() as conn:
                await runners.take_over(
                    conn,
                    runner_id=runner_id,
                    session_id=session_id,
                    instance_id=self.deps.instance_id,
                    lease=self.lease,
                )
            log.info("runner connected", extra={"event": "runner.connected", "session_id": session_id})
            lost = asyncio.Event()
            renewer = asyncio.create_task(self._renew(runner_id, lost))
            try:
                yield self._dispatches(events, runner_id, lost, session_id)
            finally:
                renewer.cancel()
                try:
                    await renewer
                except asyncio.CancelledError:
                    pass
                finally:
                    # Released whatever became of the renewer: the next runner need not wait it out.
                    await asyncio.shield(self._release(runner_id))
                log.info(
                    "runner disconnected", extra={"event": "runner.disconnected", "session_id": session_id}
                )

    async def _dispatches(
        self, events: AsyncIterator[dict[str, Any]], runner_id: str, lost: asyncio.Event, session_id: str
    ) -> AsyncIterator[PromptRequest]:
        if self.take_inbox is not None:
            for queued in await self.take_inbox(session_id):
                yield queued
        async for event in events:
            if lost.is_set():
                return
            if event.get("inbox"):
                if self.take_inbox is not None:
                    for queued in await self.take_inbox(session_id):
                        yield queued
                continue
            if event.get("runner_id") != runner_id:
                continue  # addressed to an earlier or later holder of this session
            yield PromptRequest(**event["request"])

    async def _renew(self, runner_id: str, lost: asyncio.Event) -> None:
        """Renew every third of the lease. A failed renewal is logged and retried; the holder stops
        (lost) when the lease is gone, or when renewals kept failing for a whole lease."""
        loop = asyncio.get_running_loop()
        renewed_at = loop.time()
        while True:
            await asyncio.sleep(self.lease / 3)
            try:
                faults.check("prompts.renew")
                async with self.deps.db.write() as conn:
                    held = await runners.renew(conn, runner_id, self.lease)
            except Exception:
                log.exception("runner lease renewal failed", extra={"event": "runner.renew_failed"})
                if loop.time() - renewed_at < self.lease:
                    continue
                log.error("runner lease expired", extra={"event": "runner.lease_expired"})
                lost.set()
                return
            if not held:
                lost.set()
                return
            renewed_at = loop.time()

    async def _release(self, runner_id: str) -> None:
        async with self.deps.db.write() as conn:
            await runners.release(conn, runner_id)

    async def dispatch(self, request: PromptRequest, *, deadline_seconds: float) -> DispatchResult:
        async with self.deps.db.read() as conn:
            holder = await runners.live_holder(conn, request.session_id)
        if holder is None:
            return DispatchResult(DispatchOutcome.REJECTED, "no agent runner is connected to this session")
        # Listen for the acknowledgement before publishing, so a fast runner cannot be missed.
        async with self.deps.bus.subscribe(acks_channel(request.turn_id)) as acks:
            try:
                await self.deps.bus.publish(
                    prompts_channel(request.session_id), {"runner_id": holder, "request": asdict(request)}
                )
            except BusUnavailable as exc:
                # Nothing was sent while the bus is down: provably undelivered.
                return DispatchResult(DispatchOutcome.REJECTED, f"the event bus is unavailable: {exc}")
            except Exception as exc:
                log.warning("prompt publication failed", extra={"turn_id": request.turn_id}, exc_info=True)
                # A failed publish may still have reached the broker: not provably undelivered.
                return DispatchResult(DispatchOutcome.AMBIGUOUS, f"publication failed: {type(exc).__name__}")
            try:
                async with asyncio.timeout(deadline_seconds):
                    async for ack in acks:
                        accepted = bool(ack.get("accepted"))
                        outcome = DispatchOutcome.ACCEPTED if accepted else DispatchOutcome.REJECTED
                        return DispatchResult(outcome, "acknowledged by the runner")
            except TimeoutError:
                pass
        return DispatchResult(DispatchOutcome.AMBIGUOUS, "no acknowledgement before the deadline")

    async def acknowledge(self, turn_id: str, accepted: bool) -> bool:
        """Pass the runner's answer to whichever process dispatched the turn. True when the turn is
        still an outstanding (unpublished) dispatch; False tells the runner nobody waits for it."""
        async with self.deps.db.read() as conn:
            turn = await turns.get_turn(conn, turn_id)
        outstanding = flag(turn.metadata.get(reservations.PENDING))
        if outstanding:
            await self.deps.bus.publish(acks_channel(turn_id), {"turn_id": turn_id, "accepted": accepted})
        log.info(
            "prompt acknowledged",
            extra={
                "event": "prompt.ack",
                "turn_id": turn_id,
                "accepted": accepted,
                "outstanding": outstanding,
            },
        )
        return outstanding
