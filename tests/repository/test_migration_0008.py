"""Migration 0008 works every exact rule's key out again with its input's numbers compared by value
(a rule remembered from an input PostgreSQL's JSONB rewrote now matches the agent's own next ask),
keeps one of two rules that now allow the same input, and the downgrade works the keys out the old
way; on both dialects, on a database of its own."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

from sqlalchemy import text

from backend.db import migrate
from backend.db.engine import Database
from backend.domain.permissions import ANY_INPUT, input_key
from tests.repository.test_migration_0007 import _downgrade, fresh
from tests.repository.test_migration_0011 import matching

__all__ = ["fresh"]  # the fixture, shared with 0007's test

NOW = "2026-01-01 00:00:00+00:00"
# (rule id, created at, input; None: any input): as revision 0007's code wrote them.
OLD_RULES: list[tuple[str, str, Any]] = [
    ("r1", "2026-01-01 00:00:01+00:00", {"n": 1e16}),
    ("r2", "2026-01-01 00:00:02+00:00", {"n": 10**16}),  # the same input, now: one of the two stays
    ("r3", "2026-01-01 00:00:03+00:00", {"t": 30.0, "x": "a"}),
    ("r4", "2026-01-01 00:00:04+00:00", None),
    ("r5", "2026-01-01 00:00:05+00:00", {"c": 1.5, "z": -0.0}),
]


def _as_written(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


async def _old_rules(db: Database) -> None:
    as_json = "CAST(:input AS JSONB)" if not db.is_sqlite else ":input"
    async with db.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO tasks (id, title, workflow_step, created_at, updated_at)"
                f" VALUES ('t', 't', 'todo', '{NOW}', '{NOW}')"
            )
        )
        await conn.execute(
            text(
                "INSERT INTO task_sessions (id, task_id, state, created_at, updated_at)"
                f" VALUES ('s', 't', 'RUNNING', '{NOW}', '{NOW}')"
            )
        )
        for rule_id, created, value in OLD_RULES:
            await conn.execute(
                text(
                    "INSERT INTO permission_rules (id, session_id, tool_name, input_key, input, created_at)"
                    f" VALUES (:id, 's', 'Bash', :key, {as_json}, :created)"
                ),
                {
                    "id": rule_id,
                    "key": ANY_INPUT if value is None else _as_written(value),
                    "input": None if value is None else json.dumps(value),
                    "created": created if db.is_sqlite else dt.datetime.fromisoformat(created),
                },
            )


async def _rules(db: Database) -> dict[str, tuple[str, Any]]:
    async with db.engine.connect() as conn:
        found = await conn.execute(text("SELECT id, input_key, input FROM permission_rules ORDER BY id"))
        return {r[0]: (r[1], json.loads(r[2]) if isinstance(r[2], str) else r[2]) for r in found}


async def test_0008_keys_exact_rules_by_value_keeps_one_of_two_alike_and_back(fresh: Database) -> None:
    await migrate.upgrade(fresh, "0007")
    await _old_rules(fresh)
    await migrate.upgrade(fresh, "0008")
    after = await _rules(fresh)
    assert len({"r1", "r2"} & set(after)) == 1  # 1e16 and 10**16 are one input now
    assert {"r3", "r4", "r5"} <= set(after)
    for rule_id, (key, stored) in after.items():
        assert key == (ANY_INPUT if stored is None else input_key(stored)), rule_id
    await migrate.upgrade(fresh)  # what the rules became since (0011) matches the same way
    # The agent's next ask matches, however the input's numbers are written.
    async with fresh.engine.connect() as conn:
        for seconds in (30.0, 30):
            asked = {"t": seconds, "x": "a"}
            rule = await matching(conn, "s", "Bash", asked)
            assert rule is not None, asked
            assert rule.id == "r3", asked
        for number in (1e16, 10**16):
            asked = {"n": number}
            rule = await matching(conn, "s", "Bash", asked)
            assert rule is not None, asked
            assert rule.id in ("r1", "r2"), asked
    await _downgrade(fresh, "0007")
    for rule_id, (key, stored) in (await _rules(fresh)).items():
        assert key == (ANY_INPUT if stored is None else _as_written(stored)), rule_id
