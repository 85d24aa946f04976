"""A predecessor's ready event overlapping a detached-answer successor's dispatch (scenario S28).

The predecessor turn holds two pending actions of one kind: a detached one whose answer resumes the
agent, and a live one whose waiter stays attached, so a teardown (detach) pass of the predecessor
would be visible. Events are read up to a marker published after the step under test, so "no event"
is proven by the marker's arrival, not by a pause.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from backend.bus import TASK_CHANNEL
from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.errors import StaleGeneration
from backend.services.container import Services
from backend.services.operations import ReservationGate
from tests.lifecycle.support import EventLog, Kind, new_session, questions, recording, rows
from tests.resume.support import GatedExecutor, detached_request, eventually, resuming, turn_rows


class Watching:
    """The ready-event gate, observed: when a ready event starts waiting, and whether it overlapped."""

    def __init__(self, inner: ReservationGate) -> None:
        self.inner = inner
        self.waiting = asyncio.Event()
        self.overlapped: list[bool] = []

    async def wait_resolved(self, session_id: str) -> bool:
        self.waiting.set()
        overlapped = await self.inner.wait_resolved(session_id)
        self.overlapped.append(overlapped)
        return overlapped


async def settled(svc: Services, log: EventLog) -> list[dict[str, Any]]:
    """Every event published so far (a marker sent now arrives after all of them), then a fresh page."""
    marker = uuid.uuid4().hex
    await svc.deps.bus.publish(TASK_CHANNEL, {"type": "test.marker", "message_id": marker})
    await eventually(lambda: marker in log.kinds("test.marker"))
    seen = [e for e in log.events if e["type"] != "test.marker"]
    log.events.clear()
    return seen


@pytest.mark.scenario("S28")
@pytest.mark.parametrize("outcome", ["accepted", "rejected"])
async def test_a_predecessor_ready_event_completes_only_the_turn_its_generation_still_owns(
    db: Database, outcome: str, kind: Kind
) -> None:
    gate = GatedExecutor()
    async with resuming(db, executor=gate) as (svc, _):
        _, session_id = await new_session(svc)
        answered = await detached_request(svc, session_id, kind)
        predecessor = answered.turn_id
        assert svc.operations.reservations is not None
        watching = Watching(svc.operations.reservations)
        svc.operations.reservations = watching
        live = await kind.ask(svc, session_id, qs=questions(2), tool_input={"command": "make test"})
        live.wait()
        live_rows = await rows(db, live.pending_id)
        assert {r["agent_disconnected"] for r in live_rows} == {False}
        async with recording(svc) as log:
            responding = asyncio.create_task(kind.answer(svc, answered.pending_id, answered.bundle))
            await asyncio.wait_for(gate.started.wait(), 5)
            (request,) = gate.received
            successor = request.turn_id
            ready = asyncio.create_task(svc.operations.complete_turn(predecessor, predecessor))
            await asyncio.wait_for(watching.waiting.wait(), 5)  # it waits while the dispatch is held
            gate.release(outcome)
            result = await responding
            error: BaseException | None = None
            try:
                done = await ready
            except StaleGeneration as exc:
                error = exc
            events = await settled(svc, log)
        answer_rows = sorted(r["id"] for r in await rows(db, answered.pending_id))
        published = sorted((e["type"], e.get("turn_id") or e.get("message_id")) for e in events)
        turns = {t["id"]: t["completed"] for t in await turn_rows(db, session_id)}
        assert watching.overlapped[0] is True, "the ready event arrived while the successor was reserved"
        if outcome == "accepted":
            assert isinstance(result, lc.Responded)
            assert isinstance(error, StaleGeneration)
            # Only the successor's own publication: no turn.completed, no detach pass of the stale
            # predecessor (its live question untouched), the successor still open.
            assert published == sorted(
                [("turn.started", successor)] + [("message.updated", m) for m in answer_rows]
            )
            assert await rows(db, live.pending_id) == live_rows
            assert turns == {predecessor: True, successor: False}
        else:
            assert isinstance(result, lc.DeliveryFailed)
            assert result.retryable is True
            # Rolled back: the predecessor generation owns the session again and completes normally,
            # with its teardown pass detaching its live question.
            assert error is None
            assert done.id == predecessor
            assert done.completed_at is not None
            detached = await rows(db, live.pending_id)
            assert {r["agent_disconnected"] for r in detached} == {True}
            assert published == sorted(
                [("turn.completed", predecessor)]
                + [("message.updated", m) for m in answer_rows]
                + [("message.updated", r["id"]) for r in live_rows]
            )
            assert turns == {predecessor: True}
            assert isinstance(await live.outcome(), lc.Detached)
        await answered.close()
        await live.close()
