"""Ready events (completeTurn) that overlap a live prompt reservation (S31)."""

from __future__ import annotations

import asyncio

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.errors import StaleGeneration
from backend.domain.lifecycle import BundleState
from backend.domain.states import SessionState
from backend.services.pending.actions import TaskAdvanceBlocked
from backend.services.pending.core import trusted
from tests.lifecycle.support import Kind, new_session, recording
from tests.resume.support import GatedExecutor, detached_request, resuming, turn_rows


@pytest.mark.scenario("S31")
async def test_a_generationless_ready_event_dropped_after_rollback_changes_no_session_or_workflow_state(
    db: Database, kind: Kind
) -> None:
    gate = GatedExecutor()
    async with resuming(db, executor=gate) as (svc, _):
        task_id, session_id = await new_session(svc)
        await svc.pending.advance_task(task_id, "review", authorize=trusted)
        agent = await detached_request(svc, session_id, kind)
        predecessor = agent.turn_id
        respond = asyncio.create_task(kind.answer(svc, agent.pending_id, agent.bundle))
        await asyncio.wait_for(gate.started.wait(), 5)
        before_turns = await turn_rows(db, session_id)
        async with recording(svc) as log:
            ready = asyncio.create_task(svc.operations.complete_turn(predecessor, None))
            # The event waits on the live reservation: its outcome is not known yet.
            await asyncio.sleep(0.2)
            assert not ready.done()
            gate.release("rejected")  # the reservation rolls back
            failed = await respond
            with pytest.raises(StaleGeneration, match="without a generation"):
                await ready
        assert isinstance(failed, lc.DeliveryFailed)
        assert failed.retryable is True
        # Dropped: no turn completed, no turn event, no detach, the session still waits for input
        # on the restored pending action, and the workflow step and guard are exactly as before.
        after_turns = await turn_rows(db, session_id)
        assert [t["id"] for t in after_turns] == [predecessor]
        assert after_turns == [t for t in before_turns if t["id"] == predecessor]
        assert not after_turns[0]["completed"]
        assert not [e for e in log.events if e["type"] in ("turn.completed", "turn.started")]
        session = await svc.reads.session(session_id)
        assert session.state == SessionState.WAITING_FOR_INPUT.value
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED
        assert (await svc.reads.task(task_id)).workflow_step == "review"
        blocked = await svc.pending.advance_task(task_id, "done", authorize=trusted)
        assert isinstance(blocked, TaskAdvanceBlocked)
        assert blocked.session_id == session_id
        await agent.close()
