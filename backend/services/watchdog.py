"""The primary-answer watchdog: after a live answer, resend it as a resume prompt if the agent stays silent.

Armed synchronously by the clarification service inside the finalized delivery-confirmation
boundary (before the agent sees the answer), so the agent's first reaction always finds it armed.
Agent activity in the session (a message, a turn starting or completing, a new question, a prompt
acknowledgement) cancels it in either phase, and so does shutdown; cancellation reaches in-flight
repository and prompt calls because the fallback runs inside the watchdog's own task. The fallback
carries the clarification turn id and revalidates it before acting and again inside prompt admission
(under the session lock), so it can never dispatch a stale answer into a successor turn. Nothing of
a watchdog is persisted: a restart simply forgets it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from backend.background import stop_tasks
from backend.bus import TASK_CHANNEL
from backend.db.engine import utcnow
from backend.domain.events import EventKind
from backend.domain.lifecycle import Claim
from backend.domain.states import TERMINAL_SESSION_STATES
from backend.repository import reservations, runners, tasks, turns
from backend.services.context import Deps
from backend.services.dispatch import Origin, TurnSnapshot
from backend.services.orchestrator import Orchestrator
from backend.services.prompt_channel import PromptChannel

log = logging.getLogger("turnwise.watchdog")

ACTIVITY_EVENTS = frozenset({EventKind.MESSAGE_ADDED, EventKind.TURN_STARTED, EventKind.TURN_COMPLETED})


class Phase(StrEnum):
    ARMED = "armed"  # waiting out the agent's silence
    FALLBACK = "fallback"  # revalidating, cancelling the captured turn, dispatching the answer
    DONE = "done"


@dataclass(eq=False)
class Watch:
    claim: Claim
    armed_at: dt.datetime
    phase: Phase = Phase.ARMED
    # While armed, a timer; once it fires, the task that runs the fallback (cancellable throughout).
    timer: asyncio.TimerHandle | None = None
    task: asyncio.Task[None] | None = None
    outcome: str = ""
    done: asyncio.Event = field(default_factory=asyncio.Event)


class Watchdogs:
    def __init__(self, deps: Deps, orchestrator: Orchestrator) -> None:
        self.deps = deps
        self.orchestrator = orchestrator
        self._by_session: dict[str, set[Watch]] = {}
        self._listener: asyncio.Task[None] | None = None

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._listener is not None:
            return
        self._listener = await self.deps.bus.follow(TASK_CHANNEL, self._on_event)

    async def stop(self) -> None:
        """Shutdown cancels every phase of every watchdog, including in-flight fallback work."""
        for session_id in list(self._by_session):
            self.cancel_session(session_id, "shutdown")
        if self._listener is not None:
            await stop_tasks([self._listener], log, "watchdog listener")
            self._listener = None

    def _on_event(self, event: dict[str, Any]) -> None:
        session_id = str(event.get("session_id"))
        watches = self._by_session.get(session_id)
        if not watches or event.get("type") not in ACTIVITY_EVENTS:
            return
        turn_id = event.get("turn_id")
        if turn_id is not None and turn_id in self.orchestrator.own_turns:
            return  # the orchestrator's own successor, not the agent
        for watch in list(watches):
            # The fallback's own silent cancellation of the captured turn is recovery-owned activity.
            if (
                watch.phase == Phase.FALLBACK
                and event.get("type") == EventKind.TURN_COMPLETED
                and turn_id == watch.claim.turn_id
            ):
                continue
            self._cancel(watch, f"activity:{event.get('type')}")

    # --- arming and cancelling ------------------------------------------------------------------

    def arm(self, claim: Claim) -> None:
        """The synchronous notifier the pending-actions service calls before returning a live answer."""
        self.armed(claim)

    def armed(self, claim: Claim) -> Watch:
        watch = Watch(claim, utcnow())
        self._by_session.setdefault(claim.session_id, set()).add(watch)
        # A timer, not a sleeping task: most watchdogs are cancelled by the agent's next activity
        # long before they fire, and a timer costs a fraction of a task to make and cancel.
        loop = asyncio.get_running_loop()
        watch.timer = loop.call_later(self.deps.settings.watchdog_seconds, self._fire, watch)
        # Debug: one per live answer, and cancelled again by the agent's next activity in most cycles.
        log.debug(
            "watchdog armed",
            extra={
                "event": "watchdog.armed",
                "pending_id": claim.pending_id,
                "turn_id": claim.turn_id,
                "session_id": claim.session_id,
            },
        )
        return watch

    def note_activity(self, session_id: str, reason: str) -> None:
        """Agent activity seen directly (e.g. acknowledgePrompt, which publishes no event)."""
        self.cancel_session(session_id, reason)

    def cancel_session(self, session_id: str, reason: str) -> None:
        for watch in list(self._by_session.get(session_id, ())):
            self._cancel(watch, reason)

    def _fire(self, watch: Watch) -> None:
        watch.timer = None
        if watch.phase == Phase.ARMED:
            watch.task = asyncio.get_running_loop().create_task(self._run(watch))
            # Also when cancelled before its first step, which skips `_run` and its `finally`.
            watch.task.add_done_callback(lambda _: self._forget(watch))

    def _cancel(self, watch: Watch, reason: str) -> None:
        if watch.phase == Phase.DONE:
            return
        if watch.task is None:
            if watch.timer is None:
                return
            watch.timer.cancel()
            watch.timer = None
            watch.outcome = f"cancelled:{reason}"
            self._forget(watch)
        else:
            watch.outcome = f"cancelled:{reason}"
            watch.task.cancel()
        log.debug(
            "watchdog cancelled",
            extra={"event": "watchdog.cancelled", "pending_id": watch.claim.pending_id, "reason": reason},
        )

    def _forget(self, watch: Watch) -> None:
        watch.phase = Phase.DONE
        watches = self._by_session.get(watch.claim.session_id)
        if watches is not None:
            watches.discard(watch)
            if not watches:
                del self._by_session[watch.claim.session_id]
        watch.done.set()

    # --- the fallback ---------------------------------------------------------------------------

    async def _run(self, watch: Watch) -> None:
        claim = watch.claim
        try:
            watch.phase = Phase.FALLBACK
            limit = self.deps.settings.dispatch_seconds + 3 * self.deps.settings.persistence_seconds
            async with asyncio.timeout(limit):
                reason = await self._preflight(watch)
                if reason:
                    watch.outcome = f"skipped:{reason}"
                    log.info(
                        "watchdog fallback skipped",
                        extra={"event": "watchdog.skipped", "pending_id": claim.pending_id, "reason": reason},
                    )
                    return
                # Silent cancellation of exactly the captured turn, then the single hand-off.
                if not await self.orchestrator.cancel_paused(TurnSnapshot(claim.session_id, claim.turn_id)):
                    watch.outcome = "skipped:superseded"
                    return
                outcome = await self.orchestrator.dispatch_answer(claim, Origin.WATCHDOG)
            watch.outcome = "dispatched" if outcome.accepted else f"failed:{outcome.message}"
            log.info(
                "watchdog fallback finished",
                extra={
                    "event": "watchdog.fallback",
                    "pending_id": claim.pending_id,
                    "accepted": outcome.accepted,
                    "detail": outcome.message,
                },
            )
        except asyncio.CancelledError:
            pass
        except Exception:
            watch.outcome = "failed"
            log.exception(
                "watchdog fallback failed", extra={"event": "watchdog.failed", "pending_id": claim.pending_id}
            )
        finally:
            self._forget(watch)

    async def _preflight(self, watch: Watch) -> str:
        """Why not to fall back ('' = go): the turn was superseded, the session ended, or the agent
        spoke (possibly through another server process) since the answer was delivered."""
        claim = watch.claim
        async with self.deps.db.read() as conn:
            session = await tasks.get_session(conn, claim.session_id)
            if session.state in TERMINAL_SESSION_STATES:
                return "session ended"
            if await turns.current_turn(conn, claim.session_id) != claim.turn_id:
                return "superseded"
            if await reservations.agent_activity_since(conn, claim.session_id, watch.armed_at):
                return "agent active"
            # An agent that holds no prompt channel (an MCP client between tool calls) cannot be sent
            # the answer again; cancelling its turn would only take the turn away from it.
            if isinstance(self.orchestrator.executor, PromptChannel) and (
                await runners.live_holder(conn, claim.session_id) is None
            ):
                return "no runner"
        return ""
