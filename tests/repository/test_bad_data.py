"""Malformed metadata already in the database is reported clearly, never reset or half-read."""

from __future__ import annotations

import pytest

from backend.db.engine import Database
from backend.domain.errors import CorruptData
from backend.repository import messages, pending, turns
from tests.repository.seed import seed_session

CASE = {
    "turns": [
        {
            "id": "t1",
            "started_at": "2026-08-14T10:00:00Z",
            "created_at": "2026-08-14T10:00:00Z",
            "completed_at": None,
            "metadata": ["not", "an", "object"],
        },
    ],
    "messages": [
        {"id": "m1", "turn_id": "t1", "type": "clarification_request", "metadata": ["bad"]},
    ],
}


async def test_malformed_metadata_is_a_clear_error(db: Database) -> None:
    await seed_session(db, CASE)
    async with db.read() as conn:
        with pytest.raises(CorruptData, match="turn t1: metadata is not an object"):
            await turns.visible_turns(conn, "s1")
        with pytest.raises(CorruptData, match="message m1: metadata is not an object"):
            await messages.get_message(conn, "m1")
        # The derivation itself stays defined: a non-object has no flags and no pending status.
        assert await turns.current_turn(conn, "s1") == "t1"
        assert (await pending.pending_for_sessions(conn, ["s1"]))["s1"].pending_action is None
