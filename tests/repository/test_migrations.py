"""Migrations build exactly the tables the code declares, on both dialects, and stop at one head."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

from backend.db import migrate
from backend.db.engine import Database
from backend.db.tables import metadata


def _diff(sync_conn: Connection) -> list[Any]:
    return list(compare_metadata(MigrationContext.configure(sync_conn), metadata))


async def test_migrations_match_the_declared_tables(db: Database) -> None:
    async with db.engine.connect() as conn:
        assert await conn.run_sync(_diff) == []


async def test_migrations_have_one_head_and_the_database_is_at_it(db: Database) -> None:
    heads = ScriptDirectory.from_config(migrate.alembic_config()).get_heads()
    assert len(heads) == 1, f"several migration heads: {heads}"
    assert await migrate.is_current(db)
