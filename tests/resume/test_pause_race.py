"""S10: a clarification pause that observed no turn, racing the session's first turn.

The pause's expectation is a `TurnSnapshot` its caller captures before anything detaches: a turn id,
or explicitly none. Here the session has no turn when the pause looks; then an agent's question (or
permission request) opens the session's first turn, and its wait detaches, while the pause's cancellation is
being registered: its unit of work waits on the session lock the turn's creation holds. The stale
pause must find the new authority under the lock, refuse, and leave the first turn alone.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from backend.db.engine import Database
from backend.domain import lifecycle as lc
from backend.domain.lifecycle import BundleState
from backend.repository import turns
from backend.services.dispatch import TurnSnapshot
from backend.services.pending.core import trusted
from tests.lifecycle.support import Kind, new_session, recording
from tests.resume.support import resuming, turn_rows


@pytest.mark.scenario("S10")
async def test_a_pause_that_saw_no_turn_refuses_to_cancel_the_first_turn_created_while_it_registers(
    db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, kind: Kind
) -> None:
    async with resuming(db) as (svc, _):
        _, session_id = await new_session(svc, turn=False)
        # The pause looks first: the session has no turn, and that is its explicit expectation.
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) is None
        pause = TurnSnapshot(session_id, None)

        # The question's unit of work stops right after it inserted the first turn, holding the lock.
        inserted = asyncio.Event()
        go_on = asyncio.Event()
        insert_turn = turns.insert_turn

        async def held_insert(conn: Any, sid: str, *args: Any, **kwargs: Any) -> Any:
            turn = await insert_turn(conn, sid, *args, **kwargs)
            if sid == session_id:
                inserted.set()
                await go_on.wait()
            return turn

        monkeypatch.setattr(turns, "insert_turn", held_insert)
        caplog.set_level(logging.INFO, logger="turnwise.resume")
        async with recording(svc) as log:
            asking = asyncio.create_task(kind.ask(svc, session_id, timeout_seconds=0.05))
            await asyncio.wait_for(inserted.wait(), 5)
            # The pause now registers its cancellation: it waits for the session lock.
            pausing = asyncio.create_task(svc.orchestrator.cancel_paused(pause))
            await asyncio.sleep(0.2)
            assert not pausing.done(), "the pause's cancellation ran while the first turn was being created"
            go_on.set()
            agent = await asyncio.wait_for(asking, 5)
            first_turn = agent.turn_id
            # The question's wait detaches, the pause's registration completes: neither order may let
            # the stale pause cancel the new turn.
            assert isinstance(await agent.outcome(), lc.Detached)
            assert await asyncio.wait_for(pausing, 5) is False
        stale = [r for r in caplog.records if getattr(r, "event", None) == "pause.stale"]
        assert [(getattr(r, "expected", "?"), getattr(r, "current", "?")) for r in stale] == [
            (None, first_turn)
        ]
        # The first turn is neither cancelled nor completed, and no completion was published for it.
        assert [(t["id"], t["completed"]) for t in await turn_rows(db, session_id)] == [(first_turn, False)]
        assert not [e for e in log.events if e["type"] == "turn.completed"]
        async with db.read() as conn:
            assert await turns.current_turn(conn, session_id) == first_turn
        # The detached pending action of that turn stays answerable.
        bundle = await svc.pending.bundle(agent.pending_id, authorize=trusted)
        assert bundle is not None
        assert bundle.state == BundleState.ACTIVE_DETACHED
        await agent.close()


async def test_a_pause_whose_expected_turn_is_still_current_cancels_exactly_that_turn(db: Database) -> None:
    async with resuming(db) as (svc, _):
        _, session_id = await new_session(svc)
        async with db.read() as conn:
            current = await turns.current_turn(conn, session_id)
        assert current is not None
        async with recording(svc) as log:
            assert await svc.orchestrator.cancel_paused(TurnSnapshot(session_id, current)) is True
        assert [(t["id"], t["completed"]) for t in await turn_rows(db, session_id)] == [(current, True)]
        assert [(e["type"], e["turn_id"]) for e in log.events if e["type"] == "turn.completed"] == [
            ("turn.completed", current)
        ]
