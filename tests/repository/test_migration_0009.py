"""Migration 0009 gives remembered rules their input's JSON text: a rule written before it reads its
input as stored, one written after reads back exactly what was remembered (on PostgreSQL too, where
the JSONB column rewrites 1e16 and -0.0), and the downgrade drops the text; on both dialects."""

from __future__ import annotations

from sqlalchemy import text

from backend.db import migrate
from backend.db.engine import Database
from backend.domain.rule_scopes import Scope
from backend.repository import permission_rules
from backend.services.permission_rules import remembered_rule
from tests.repository.test_migration_0007 import _downgrade, fresh
from tests.repository.test_migration_0008 import _old_rules
from tests.repository.test_migration_0011 import matching

__all__ = ["fresh"]  # the fixture, shared with 0007's test

EXACT = {"deadline_ns": 1.7e18, "offset": -0.0, "ratio": 0.25}


async def test_0009_rules_keep_their_input_text_and_older_rules_read_as_stored(fresh: Database) -> None:
    await migrate.upgrade(fresh, "0008")
    await _old_rules(fresh)
    await migrate.upgrade(fresh)
    async with fresh.engine.begin() as conn:
        older = await permission_rules.get(conn, "r3")
        assert older is not None
        assert older.input == {"t": 30.0, "x": "a"} or older.input == {"t": 30, "x": "a"}  # as stored
        (remembered,) = await permission_rules.add(
            conn,
            [
                remembered_rule(
                    "Sleep",
                    EXACT,
                    any_input=False,
                    scope=Scope.SESSION,
                    scope_id="s",
                    created_by=None,
                    expires_at=None,
                    source_pending_id="p",
                )
            ],
        )
    async with fresh.engine.connect() as conn:
        again = await permission_rules.get(conn, remembered.id)
        assert again is not None
        assert again.input == EXACT
        assert [type(v) for v in again.input.values()] == [float, float, float]
        assert str(again.input["offset"]) == "-0.0"
        assert (await matching(conn, "s", "Sleep", EXACT)) == again
    await _downgrade(fresh, "0008")
    async with fresh.engine.connect() as conn:
        columns = (await conn.execute(text("SELECT * FROM permission_rules"))).keys()
    assert "input_json" not in columns
