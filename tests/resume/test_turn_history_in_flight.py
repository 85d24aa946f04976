"""Turn history read while a detached answer's successor is dispatched (scenario S27), both dialects."""

from __future__ import annotations

import asyncio

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.repository import reservations
from tests.lifecycle.support import Kind, new_session
from tests.resume.support import GatedExecutor, detached_request, resuming, turn_rows


@pytest.mark.scenario("S27")
@pytest.mark.parametrize("outcome", ["accepted", "rejected"])
async def test_an_attempted_successor_is_left_out_of_turn_history_until_published_and_gone_after_rollback(
    db: Database, outcome: str, kind: Kind
) -> None:
    gate = GatedExecutor()
    async with resuming(db, executor=gate) as (svc, _):
        _, session_id = await new_session(svc)
        agent = await detached_request(svc, session_id, kind)
        predecessor = agent.turn_id
        responding = asyncio.create_task(kind.answer(svc, agent.pending_id, agent.bundle))
        await asyncio.wait_for(gate.started.wait(), 5)
        (request,) = gate.received
        successor = request.turn_id
        # In flight: durably reserved and marked attempted, yet not in the history a client loads.
        stored = {t["id"]: t["metadata"] for t in await turn_rows(db, session_id)}
        assert stored[successor][reservations.ATTEMPTED] is True
        assert [t.id for t in await svc.reads.turns(session_id)] == [predecessor]
        gate.release(outcome)
        result = await responding
        history = [t.id for t in await svc.reads.turns(session_id)]
        if outcome == "accepted":
            assert isinstance(result, lc.Responded)
            assert history == [predecessor, successor]
        else:
            # Rolled back: the row is gone, and no client ever saw it.
            assert isinstance(result, lc.DeliveryFailed)
            assert result.retryable is True
            assert history == [predecessor]
            assert [t["id"] for t in await turn_rows(db, session_id)] == [predecessor]
        await agent.close()


@pytest.mark.scenario("S27")
async def test_message_evidence_shows_an_in_flight_successor_and_keeps_it_after_a_refusal(
    db: Database, kind: Kind
) -> None:
    gate = GatedExecutor()
    async with resuming(db, executor=gate) as (svc, _):
        _, session_id = await new_session(svc)
        agent = await detached_request(svc, session_id, kind)
        predecessor = agent.turn_id
        responding = asyncio.create_task(kind.answer(svc, agent.pending_id, agent.bundle))
        await asyncio.wait_for(gate.started.wait(), 5)
        successor = gate.received[0].turn_id
        assert [t.id for t in await svc.reads.turns(session_id)] == [predecessor]
        # The agent already wrote into the successor: durable evidence that it exists.
        note = await svc.operations.post_message(
            session_id, content="working", author="agent", kind="message"
        )
        assert note.turn_id == successor
        assert [t.id for t in await svc.reads.turns(session_id)] == [predecessor, successor]
        gate.release("rejected")
        result = await responding
        # The evidence forbids the rollback: the successor stays, in storage and in history alike.
        assert isinstance(result, lc.DeliveryFailed)
        assert result.retryable is False
        assert successor in {t["id"] for t in await turn_rows(db, session_id)}
        assert [t.id for t in await svc.reads.turns(session_id)] == [predecessor, successor]
        await agent.close()
