"""The agent took a detached answer, then the transport handling after it failed (scenario S18).

Fault points `resume.clear` (clearing the successor's dispatch metadata and the claim's intent) and
`resume.outbox` (the failure cleanup's own write) fail after the executor acknowledged the prompt.
"""

from __future__ import annotations

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import BundleState
from backend.domain.states import SessionState
from backend.repository import reservations, turns
from backend.services.pending.core import trusted
from tests.lifecycle.support import Kind, new_session, recording, rows
from tests.resume.support import detached_request, eventually, faulty, resuming, turn_rows


@pytest.mark.scenario("S18")
async def test_clearing_failure_after_acceptance_runs_normal_cleanup_and_the_answer_is_never_reopened(
    db: Database, kind: Kind
) -> None:
    async with resuming(db, ["accepted"]) as (svc, executor):
        _, session_id = await new_session(svc)
        agent = await detached_request(svc, session_id, kind)
        async with recording(svc) as log, faulty("resume.clear"):
            failed = await kind.answer(svc, agent.pending_id, agent.bundle)
            await eventually(lambda: any(e["type"] == "turn.started" for e in log.events))
        assert isinstance(failed, lc.DeliveryFailed)
        assert failed.retryable is False
        (request,) = executor.received
        successor = request.turn_id
        # Normal failure cleanup ran: the successor stays current with its start event in the outbox,
        # the claim's intent is retired, and the session runs again.
        stored = {t["id"]: t["metadata"] for t in await turn_rows(db, session_id)}
        assert stored[successor] == {reservations.START_EVENT_PENDING: True}
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == successor
        answered = await rows(db, agent.pending_id)
        assert [r["status"] for r in answered] == ["answered"]
        assert "response_delivery_pending" not in answered[0]
        assert (await svc.reads.session(session_id)).state == SessionState.RUNNING
        # The accepted-answer marker: rollback fails closed and the answer cannot be given again.
        assert await svc.orchestrator.rollback_reservation(session_id, successor) is False
        assert successor in {t["id"] for t in await turn_rows(db, session_id)}
        again = await kind.answer(svc, agent.pending_id, agent.bundle)
        assert isinstance(again, lc.Conflict)
        assert again.bundle is not None
        assert again.bundle.state == BundleState.TERMINAL
        assert await rows(db, agent.pending_id) == answered
        assert len(executor.received) == 1
        await agent.close()


@pytest.mark.scenario("S18")
async def test_cleanup_that_fails_too_leaves_the_answer_to_restart_recovery_and_it_is_never_reopened(
    db: Database, kind: Kind
) -> None:
    async with resuming(db, ["accepted"]) as (svc, executor):
        _, session_id = await new_session(svc)
        agent = await detached_request(svc, session_id, kind)
        async with faulty("resume.clear", "resume.outbox"):
            failed = await kind.answer(svc, agent.pending_id, agent.bundle)
        assert isinstance(failed, lc.DeliveryFailed)
        assert failed.retryable is False
        (request,) = executor.received
        successor = request.turn_id
        # Cleanup could not write: the attempted reservation and the claim's intent stay for recovery.
        stored = {t["id"]: t["metadata"] for t in await turn_rows(db, session_id)}
        assert stored[successor][reservations.ATTEMPTED] is True
        claimed = await rows(db, agent.pending_id)
        assert [r["status"] for r in claimed] == ["answered"]
        assert claimed[0]["response_delivery_pending"]
        # Still never reopened in this process: rollback refused, a second answer conflicts.
        assert await svc.orchestrator.rollback_reservation(session_id, successor) is False
        again = await kind.answer(svc, agent.pending_id, agent.bundle)
        assert isinstance(again, lc.Conflict)
        assert await rows(db, agent.pending_id) == claimed
        await agent.close()
    async with resuming(db, ["accepted"]) as (restarted, after):
        await restarted.recovery.run()
        # Attempted: kept as the current turn, intent retired, the answer terminal, nothing re-sent.
        stored = {t["id"]: t["metadata"] for t in await turn_rows(db, session_id)}
        assert stored[successor] == {reservations.START_EVENT_PENDING: True}
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == successor
        final = await rows(db, agent.pending_id)
        assert [r["status"] for r in final] == ["answered"]
        assert "response_delivery_pending" not in final[0]
        bundle = await restarted.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.TERMINAL
        late = await kind.answer(restarted, agent.pending_id, agent.bundle)
        assert isinstance(late, lc.Conflict)
        assert after.received == []
