"""Requirements outside the numbered scenarios, on the resume path: work that must survive a cancelled
request, private dispatch fields that must never leave the process, and the watchdog's arming."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.api.types import Turn
from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import INTENT_KEY, BundleState
from backend.repository import reservations
from backend.services.dispatch import Origin
from backend.services.pending.core import trusted
from tests.lifecycle.support import Agent, new_session, recording, rows, yes
from tests.resume.support import GatedExecutor, detached_question, eventually, faulty, resuming, turn_rows

PUBLIC_EVENT_KEYS = {"type", "task_id", "session_id", "message_id", "turn_id", "content_only"}


class HeldWrites(Database):
    """The orchestrator's database, whose write number `hold_at` waits until the test releases it."""

    def __init__(self, url: str, hold_at: int) -> None:
        super().__init__(url)
        self.hold_at = hold_at
        self.writes = 0
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        self.writes += 1
        if self.writes == self.hold_at:
            self.reached.set()
            await self.release.wait()
        async with super().write() as conn:
            yield conn


async def test_a_failed_reservation_write_is_rolled_back_even_when_the_request_was_cancelled(
    db: Database,
) -> None:
    async with resuming(db, ["accepted"]) as (svc, executor):
        task_id, session_id = await new_session(svc)
        agent = await detached_question(svc, session_id)
        assert agent.bundle is not None
        before = await turn_rows(db, session_id)
        # Writes of the orchestrator: 1 reservation, 2 attempt marker (fails), 3 rollback (held).
        held = HeldWrites(db.url, hold_at=3)
        svc.orchestrator.deps = replace(svc.orchestrator.deps, db=held)
        try:
            async with faulty("resume.attempt_marker"):
                request = asyncio.create_task(
                    svc.orchestrator.dispatch_answer(
                        lc.Claim(
                            claim_id="settled-by-the-waiter",
                            pending_id=agent.pending_id,
                            session_id=session_id,
                            task_id=task_id,
                            turn_id=agent.bundle.turn_id or "",
                            message_ids=tuple(r.id for r in agent.bundle.rows),
                            answers=tuple(yes("q1")),
                            rejected=False,
                        ),
                        Origin.WATCHDOG,
                    )
                )
                await asyncio.wait_for(held.reached.wait(), 10)
                reserved = [t for t in await turn_rows(db, session_id) if t not in before]
                assert len(reserved) == 1, "the reservation committed before the marker failed"
                request.cancel()  # the request goes away while its rollback waits
                with pytest.raises(asyncio.CancelledError):
                    await request
                held.release.set()
                # The rollback ran to the end in its own context: the reservation is gone.
                for _ in range(250):
                    if await turn_rows(db, session_id) == before:
                        break
                    await asyncio.sleep(0.02)
                assert await turn_rows(db, session_id) == before
        finally:
            svc.orchestrator.deps = replace(svc.orchestrator.deps, db=db)
            await held.dispose()
        assert executor.received == []
        assert not svc.orchestrator.quarantined(session_id)
        # Admission is open again: the same answer goes through once.
        done = await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
        assert isinstance(done, lc.Responded)
        assert done.resumed is True
        assert len(executor.received) == 1
        await agent.close()


@pytest.mark.parametrize("outcome", ["accepted", "rejected"])
async def test_cancelling_the_respond_request_does_not_cancel_its_delivery(
    db: Database, outcome: str
) -> None:
    gate = GatedExecutor()
    async with resuming(db, executor=gate) as (svc, _):
        _, session_id = await new_session(svc)
        agent = await detached_question(svc, session_id)
        request = asyncio.create_task(
            svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
        )
        await asyncio.wait_for(gate.started.wait(), 5)
        request.cancel()  # the HTTP client disconnects while the dispatch is in flight
        with pytest.raises(asyncio.CancelledError):
            await request
        assert not gate.cancelled, "the dispatch was not cancelled with the request"
        gate.release(outcome)
        stored: list[dict[str, Any]] = []

        async def settled() -> bool:
            stored[:] = await rows(db, agent.pending_id)
            return not any(INTENT_KEY in r for r in stored)

        for _ in range(250):
            if await settled():
                break
            await asyncio.sleep(0.02)
        assert not any(INTENT_KEY in r for r in stored), "the claim was left half-done"
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        if outcome == "accepted":
            # Delivered once: answered, and its successor published as the current turn.
            assert {r["status"] for r in stored} == {"answered"}
            assert bundle.state == BundleState.TERMINAL
            successor = gate.received[0].turn_id
            assert {t["id"]: t["metadata"] for t in await turn_rows(db, session_id)}[successor] == {}
        else:
            # Not taken: restored and answerable again.
            assert {r["status"] for r in stored} == {"pending"}
            assert bundle.state == BundleState.ACTIVE_DETACHED
        await agent.close()


async def test_private_dispatch_fields_never_reach_replayed_events_or_a_completion_racing_cleanup(
    db: Database,
) -> None:
    gate = GatedExecutor()
    async with resuming(db, executor=gate) as (svc, _):
        _, session_id = await new_session(svc)
        agent = await detached_question(svc, session_id)
        async with recording(svc) as log:
            async with faulty("resume.clear"):  # accepted and published, but the clean-up fails
                request = asyncio.create_task(
                    svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
                )
                await asyncio.wait_for(gate.started.wait(), 5)
                successor = gate.received[0].turn_id
                # The agent reports its turn done while the orchestrator is still cleaning up.
                completion = asyncio.create_task(svc.operations.complete_turn(successor, successor))
                gate.release("accepted")
                result = await request
                done = await completion
            assert isinstance(result, lc.DeliveryFailed)
            assert result.retryable is False
            assert done.completed_at is not None
            # The start event waits in the outbox; replaying it publishes start then completion.
            stored = {t["id"]: t["metadata"] for t in await turn_rows(db, session_id)}
            assert stored[successor] == {reservations.START_EVENT_PENDING: True}
            assert await svc.resume_recovery.replay_outbox() == 1
            await eventually(
                lambda: (
                    [e["type"] for e in log.events if e["turn_id"] == successor][-2:]
                    == [
                        "turn.started",
                        "turn.completed",
                    ]
                )
            )
        for event in log.events:
            assert set(event) == PUBLIC_EVENT_KEYS, event
        assert "prompt_dispatch" not in repr(log.events)
        # Neither does the turn the completion returned, once serialized for clients.
        assert "prompt_dispatch" not in repr(Turn.of(done))
        assert {t["id"]: t["metadata"] for t in await turn_rows(db, session_id)}[successor] == {}
        await agent.close()


async def test_the_watchdog_is_armed_once_inside_the_confirmation_boundary(db: Database) -> None:
    async with resuming(db, ["accepted"]) as (svc, _):
        _, session_id = await new_session(svc)
        agent = await Agent.ask(svc, session_id)
        waiting = agent.wait()
        armed: list[tuple[lc.Claim, bool]] = []
        arm = svc.pending.primary_answer_notifier
        assert arm is not None

        def notify(claim: lc.Claim) -> None:
            # Called synchronously: the agent has not received its answer at this instant.
            armed.append((claim, waiting.done()))
            arm(claim)

        svc.pending.primary_answer_notifier = notify
        answered = await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
        assert isinstance(answered, lc.Responded)
        assert isinstance(await agent.outcome(), lc.Answered)
        ((claim, agent_had_it),) = armed
        assert agent_had_it is False
        assert claim.pending_id == agent.pending_id
        assert claim.turn_id == (agent.bundle.turn_id if agent.bundle else None)
        # The confirmation it was armed inside is durable: the rows are finalized, no intent left.
        assert {r["status"] for r in await rows(db, agent.pending_id)} == {"answered"}
        assert not any(INTENT_KEY in r for r in await rows(db, agent.pending_id))
        watches = svc.watchdogs._by_session.get(session_id, set())
        assert [w.claim.claim_id for w in watches] == [claim.claim_id]
        # Never twice: a repeated answer conflicts and a skip of another live bundle arms nothing.
        again = await svc.pending.respond(agent.pending_id, yes("q1"), rejected=False, authorize=trusted)
        assert isinstance(again, lc.Conflict)
        other = await Agent.ask(
            svc, session_id, [{"prompt": "Skip me?", "options": [{"label": "a"}, {"label": "b"}]}]
        )
        other.wait()
        assert isinstance(
            await svc.pending.respond(other.pending_id, [], rejected=True, authorize=trusted),
            lc.Responded,
        )
        assert isinstance(await other.outcome(), lc.Rejected)
        assert len(armed) == 1
        await agent.close()
        await other.close()
