"""An older turn's detached question once a newer ordinary turn is accepted (scenario S02)."""

from __future__ import annotations

import pytest

from backend.db.engine import Database
from backend.domain.lifecycle import BundleState
from backend.services.pending.actions import TaskAdvanced
from backend.services.pending.core import trusted
from tests.lifecycle.support import Kind, new_session, recording, rows, running
from tests.resume.support import eventually


@pytest.mark.scenario("S02")
async def test_a_newer_turn_leaves_an_older_detached_question_inert_history_through_its_completion(
    db: Database, kind: Kind
) -> None:
    async with running(db) as svc:
        task_id, session_id = await new_session(svc)
        agent = await kind.ask(svc, session_id, timeout_seconds=0.05)
        await agent.outcome()
        history = await rows(db, agent.pending_id)
        assert [(r["status"], r["agent_disconnected"]) for r in history] == [("pending", True)]
        old_ids = {r["id"] for r in history}
        async with recording(svc) as log:
            newer = await svc.operations.start_turn(session_id)
            await svc.operations.complete_turn(newer.id)
            # A marker published after both: once it arrived, every event before it did too.
            marker = await svc.operations.post_message(
                session_id, content="done", author="agent", kind="message"
            )
            await eventually(lambda: marker.id in log.kinds("message.added"))
        kinds = [e["type"] for e in log.events]
        assert "turn.started" in kinds
        assert "turn.completed" in kinds
        # No detach event (nor any other) derives from the old row, at the start or the completion.
        assert not [e for e in log.events if e.get("message_id") in old_ids]
        # The old row stays in history, unchanged.
        assert await rows(db, agent.pending_id) == history
        page = await svc.reads.messages(session_id, first=None, after=None)
        assert old_ids <= {m.id for m in page}
        # No overlay, no pending projection, no workflow barrier.
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.SUPERSEDED_HISTORY
        assert await kind.active(svc, [session_id]) == {}
        assert await svc.pending.active_bundles([session_id]) == {}
        projection = (await svc.reads.pending_for_sessions([session_id]))[session_id]
        assert projection.current_turn_id == newer.id
        assert projection.pending_action is None
        advanced = await svc.pending.advance_task(task_id, "review", authorize=trusted)
        assert isinstance(advanced, TaskAdvanced)
        assert advanced.task.workflow_step == "review"
        await agent.close()
