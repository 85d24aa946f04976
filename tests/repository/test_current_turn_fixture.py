"""The shared current-turn fixture, on SQLite and PostgreSQL, through the repository derivation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backend.db.engine import Database
from backend.repository import pending, turns
from tests.conftest import wipe
from tests.repository.seed import seed_session

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "current_turn_resolution.json").read_text()
)["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
@pytest.mark.scenario("S02", "S03", "S27")
async def test_current_turn_resolution_fixture(db: Database, case: dict[str, Any]) -> None:
    await wipe(db)
    await seed_session(db, case)
    expect = case["expect"]
    async with db.read() as conn:
        assert await turns.current_turn(conn, "s1") == expect["current_turn"]
        assert [t.id for t in await turns.visible_turns(conn, "s1")] == expect["visible_turns"]
        assert await pending.active_pending_ids(conn, "s1") == expect["active_pending_ids"]
        projection = (await pending.pending_for_sessions(conn, ["s1"]))["s1"]
    assert projection.pending_action == expect["pending_action"]
    assert projection.current_turn_id == expect["current_turn"]
