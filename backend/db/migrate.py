"""Apply and inspect Alembic migrations on an async engine, on both dialects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

from backend.db.engine import Database

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


async def upgrade(db: Database, target: str = "head", *, url: str | None = None) -> None:
    """Apply migrations up to `target`. On PostgreSQL they run on a connection of their own, without
    the service's statement timeout (a migration may rightly take long), and at `url` when given
    (`TURNWISE_MIGRATE_DATABASE_URL`: a direct connection where the service goes through PgBouncer)."""

    def run(sync_conn: Connection) -> None:
        command.upgrade(alembic_config(sync_conn), target)

    runner = db if db.is_sqlite else Database(url or db.url, pool_size=1, statement_timeout=None)
    try:
        async with runner.engine.connect() as conn:
            await conn.run_sync(run)
            await conn.commit()
    finally:
        if runner is not db:
            await runner.dispose()


async def current_revision(db: Database) -> str | None:
    def read(sync_conn: Connection) -> Any:
        return MigrationContext.configure(sync_conn).get_current_revision()

    async with db.engine.connect() as conn:
        rev = await conn.run_sync(read)
    return str(rev) if rev else None


async def is_current(db: Database) -> bool:
    return await current_revision(db) == head_revision()
