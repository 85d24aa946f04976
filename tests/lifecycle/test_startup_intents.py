"""A delivery intent on a row that is still pending is corrupt data: startup stops on it."""

from __future__ import annotations

import pytest

from backend.db.engine import Database
from backend.domain.errors import CorruptData
from backend.domain.lifecycle import CLAIM_KEY, INTENT_KEY
from tests.lifecycle.support import all_metadata, running
from tests.repository.seed import seed_session

T0 = "2026-01-01T10:00:00Z"


def row(mid: str, pending_id: str, status: str) -> dict[str, object]:
    return {
        "id": mid,
        "turn_id": "t1",
        "type": "clarification_request",
        "metadata": {
            "pending_id": pending_id,
            "question_id": "q1",
            "status": status,
            "agent_disconnected": True,
            INTENT_KEY: True,
            CLAIM_KEY: f"claim-{mid}",
        },
    }


async def test_a_delivery_intent_on_a_pending_row_stops_startup_and_changes_nothing(db: Database) -> None:
    turns = [{"id": "t1", "started_at": T0, "created_at": T0, "completed_at": None}]
    # A well-formed stranded claim (answered, intent set) that startup would otherwise restore...
    await seed_session(db, {"turns": turns, "messages": [row("m-ok", "b-ok", "answered")]})
    # ...and a corrupt one: the intent sits on a row that is still pending.
    await seed_session(
        db,
        {
            "turns": [{**turns[0], "id": "t2"}],
            "messages": [{**row("m-bad", "b-bad", "pending"), "turn_id": "t2"}],
        },
        session_id="s2",
        task_id="task2",
    )
    before = await all_metadata(db)
    async with running(db) as svc:
        with pytest.raises(CorruptData, match="delivery intent on pending rows m-bad"):
            await svc.recovery.run()
    # Startup stopped before touching any claim, the corrupt row included: nothing was restored.
    assert await all_metadata(db) == before
