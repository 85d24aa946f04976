"""Migration 0007 carries existing pending rows over: their bundle, status and claim move from the
metadata into their columns (the keys leave the metadata), the open pending rows are filled from
them, and the downgrade puts everything back; on both dialects, on a database of its own."""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Connection, make_url, text

from backend.db import migrate
from backend.db.engine import Database
from tests.conftest import PG_URL, _admin, require_service

# Rows as revision 0006 stored them: every shape of the moved keys, legacy forms included.
OLD_ROWS: list[tuple[str, str, dict[str, Any]]] = [
    ("m1", "clarification_request", {"pending_id": "p1", "status": "pending", "question_id": "q1"}),
    (
        "m2",
        "clarification_request",
        {
            "pending_id": "p2",
            "status": "answered",
            "delivery_claim_id": "c2",
            "response_delivery_pending": True,
            "response": {"selected": ["a"]},
        },
    ),
    ("m3", "permission_request", {"pending_id": "p3", "status": "rejected", "delivery_claim_id": "c3"}),
    ("m4", "clarification_request", {"pending_id": "p4"}),  # legacy: no status is pending
    (
        "m5",
        "clarification_request",
        {"pending_id": "p5", "status": "pending", "response_delivery_pending": "1"},
    ),
    ("m6", "message", {"text": "hello"}),
    ("m7", "clarification_request", {"status": "pending"}),  # no bundle: history, never open
]


@pytest.fixture(params=["sqlite", "postgresql"])
async def fresh(request: pytest.FixtureRequest) -> AsyncIterator[Database]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{Path(tempfile.mkdtemp(prefix='turnwise-mig-')) / 'm.db'}"
        name = None
    else:
        require_service("PostgreSQL", PG_URL, "TURNWISE_REQUIRE_PG", 5432)
        name = f"turnwise_mig_{uuid.uuid4().hex[:12]}"
        await _admin(f'CREATE DATABASE "{name}"')
        url = make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    db = Database(url)
    try:
        yield db
    finally:
        await db.dispose()
        if name is not None:
            await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _downgrade(db: Database, target: str) -> None:
    def run(sync_conn: Connection) -> None:
        command.downgrade(migrate.alembic_config(sync_conn), target)

    async with db.engine.connect() as conn:
        await conn.run_sync(run)
        await conn.commit()


async def _old_rows(db: Database) -> None:
    async with db.engine.begin() as conn:
        now = "2026-01-01 00:00:00+00:00"
        await conn.execute(
            text(
                "INSERT INTO tasks (id, title, workflow_step, created_at, updated_at)"
                f" VALUES ('t', 't', 'todo', '{now}', '{now}')"
            )
        )
        await conn.execute(
            text(
                "INSERT INTO task_sessions (id, task_id, state, created_at, updated_at)"
                f" VALUES ('s', 't', 'RUNNING', '{now}', '{now}')"
            )
        )
        for row_id, kind, metadata in OLD_ROWS:
            await conn.execute(
                text(
                    "INSERT INTO task_session_messages"
                    " (id, session_id, turn_id, type, author, content, metadata, created_at, updated_at)"
                    f" VALUES (:id, 's', 'turn', :type, 'agent', '', :md, '{now}', '{now}')"
                ),
                {"id": row_id, "type": kind, "md": json.dumps(metadata)},
            )


async def _read(db: Database, columns: str) -> dict[str, tuple[Any, ...]]:
    async with db.engine.connect() as conn:
        found = await conn.execute(text(f"SELECT id, {columns} FROM task_session_messages ORDER BY id"))
        return {
            r[0]: tuple(json.loads(v) if isinstance(v, str) and v.startswith("{") else v for v in r[1:])
            for r in found
        }


async def test_0007_moves_the_keys_into_columns_fills_the_open_rows_and_back(fresh: Database) -> None:
    await migrate.upgrade(fresh, "0006")
    await _old_rows(fresh)
    before = await _read(fresh, "metadata")
    await migrate.upgrade(fresh)
    after = await _read(fresh, "pending_id, status, claim_id, delivery_pending, metadata")
    assert after["m1"] == ("p1", "pending", None, False, {"question_id": "q1"})
    assert after["m2"] == ("p2", "answered", "c2", True, {"response": {"selected": ["a"]}})
    assert after["m3"] == ("p3", "rejected", "c3", False, {})
    assert after["m4"] == ("p4", None, None, False, {})
    assert after["m5"] == ("p5", "pending", None, True, {})
    assert after["m6"] == (None, None, None, False, {"text": "hello"})
    assert after["m7"] == (None, "pending", None, False, {})
    async with fresh.engine.connect() as conn:
        open_rows = {r[0] for r in await conn.execute(text("SELECT message_id FROM open_pending_rows"))}
    assert open_rows == {"m1", "m4", "m5"}
    await _downgrade(fresh, "0006")
    restored = await _read(fresh, "metadata")
    # The flag comes back as JSON true (its tolerant forms read the same).
    assert restored == {
        **before,
        "m5": ({"pending_id": "p5", "status": "pending", "response_delivery_pending": True},),
    }
    await migrate.upgrade(fresh)
    assert await _read(fresh, "pending_id, status, claim_id, delivery_pending, metadata") == after
